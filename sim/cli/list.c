/* list.c: `podsim list KIND` (see list.h).  Names come in counting order
 * (tpu-v4-8 before tpu-v4-16).  Topologies come grouped by generation:
 * each generation's base file (tpu-v2.json: the chip, host and ICI figures,
 * no "extends") names a "# ..." heading, its slices (the files that extend
 * it, directly or through another) follow one per line, and a blank line
 * parts generations; files that are neither come last under their own
 * heading.
 *
 * Invariant: every name ps_config_list finds is printed exactly once, as a
 * line of its own; every other line is blank or starts with '#'. */
#include "cli/list.h"

#include "common/json.h"
#include "io/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_INPUT 2
/* deeper "extends" chains than this are taken as a loop (the loader
 * reports it when the file is used) */
#define MAX_EXTENDS 16

/* Orders names as people count: digit runs by their value, so tpu-v4-8
 * comes before tpu-v4-16 and a generation's base before its slices. */
static int compare_natural(const void *pa, const void *pb)
{
  const char *a = *(char *const *)pa, *b = *(char *const *)pb;
  while (*a && *b) {
    if (g_ascii_isdigit(*a) && g_ascii_isdigit(*b)) {
      char *ea, *eb;
      guint64 x = g_ascii_strtoull(a, &ea, 10), y = g_ascii_strtoull(b, &eb, 10);
      if (x != y)
        return x < y ? -1 : 1;
      a = ea;
      b = eb;
    } else if (*a != *b) {
      return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
    } else {
      a++;
      b++;
    }
  }
  return (unsigned char)*a - (unsigned char)*b;
}

/* A topology file's string field, or NULL when the file does not read or
 * lacks it.  (transfer full) */
static char *topology_field(const char *name, const char *key)
{
  g_autofree char *path = ps_config_find("topologies", name, NULL);
  json_object *root = path ? ps_json_load_file(path, NULL) : NULL, *v;
  char *out = NULL;
  if (root && json_object_is_type(root, json_type_object) &&
      json_object_object_get_ex(root, key, &v) && json_object_is_type(v, json_type_string))
    out = g_strdup(json_object_get_string(v));
  if (root)
    json_object_put(root);
  return out;
}

/* The file at the end of name's "extends" chain (name itself when it
 * extends nothing).  (transfer full) */
static char *topology_root(const char *name)
{
  char *at = g_strdup(name);
  for (int depth = 0; depth < MAX_EXTENDS; depth++) {
    char *parent = topology_field(at, "extends");
    if (!parent || strchr(parent, '/')) { /* a path is not a listed name */
      g_free(parent);
      break;
    }
    g_free(at);
    at = parent;
  }
  return at;
}

/* Prints names (sorted) grouped under their generation bases. */
static void print_topologies(char **names)
{
  guint n = g_strv_length(names);
  g_autofree char **roots = g_new0(char *, n + 1);
  GHashTable *has_slices = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < n; i++) {
    roots[i] = topology_root(names[i]);
    if (strcmp(roots[i], names[i]) != 0)
      g_hash_table_add(has_slices, roots[i]);
  }
  gboolean first = TRUE;
  for (guint b = 0; b < n; b++) { /* a base, then its slices */
    if (!g_hash_table_contains(has_slices, names[b]))
      continue;
    g_autofree char *generation = topology_field(names[b], "generation");
    printf("%s# %s%s%s: the slices of %s (the generation's base file)\n", first ? "" : "\n",
           generation ? "TPU " : "", generation ? generation : "", generation ? "" : names[b],
           names[b]);
    first = FALSE;
    for (guint i = 0; i < n; i++)
      if (i != b && strcmp(roots[i], names[b]) == 0)
        printf("%s\n", names[i]);
  }
  gboolean other = FALSE;
  for (guint i = 0; i < n; i++) {
    if (strcmp(roots[i], names[i]) != 0 || g_hash_table_contains(has_slices, names[i]))
      continue;
    if (!other)
      printf("%s# other topologies\n", first ? "" : "\n");
    other = TRUE;
    printf("%s\n", names[i]);
  }
  g_hash_table_destroy(has_slices);
  for (guint i = 0; i < n; i++)
    g_free(roots[i]);
}

int ps_cli_list(int argc, char **argv)
{
  static const char *const kinds[] = {"topologies", "models", "experiments"};
  if (argc != 2 || (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    if (argc > 2)
      fprintf(stderr, "podsim: list: one KIND, got %d words ('%s' ...)\n", argc - 1, argv[1]);
    else if (argc < 2)
      fprintf(stderr, "podsim: list: which KIND?\n");
    fprintf(argc == 2 ? stdout : stderr,
            "Usage: podsim list topologies|models|experiments\n\n"
            "Names in counting order; topologies grouped by generation under a '# ...' line\n"
            "naming the generation's base file (the figures its slices extend).\n");
    return argc == 2 ? 0 : EXIT_INPUT;
  }
  for (guint i = 0; i < G_N_ELEMENTS(kinds); i++) {
    if (strcmp(argv[1], kinds[i]) != 0)
      continue;
    g_auto(GStrv) names = ps_config_list(kinds[i]);
    qsort(names, g_strv_length(names), sizeof *names, compare_natural);
    if (i == 0) {
      print_topologies(names);
    } else {
      for (char **n = names; n && *n; n++)
        printf("%s\n", *n);
    }
    return 0;
  }
  fprintf(stderr, "podsim: list: unknown kind '%s' (expected topologies, models or experiments)\n",
          argv[1]);
  return EXIT_INPUT;
}

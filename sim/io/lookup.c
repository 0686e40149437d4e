/* lookup.c: where configs are found: the data directories (the
 * environment's, the installed tree's or the source tree's, the working
 * directory), names of topologies, models and experiments looked up along
 * them, and the listing of what they hold.
 *
 * Invariant: a name containing '/' or ending in ".json" is a path, read as
 * given; any other name is looked up beside the referring file, then along
 * ps_data_dirs() in order, and the first readable match wins. */
#include "io/config-private.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ============================================================ data directories */

/* The directory of the file this code was loaded from: libpodsim.so's
 * when the library is shared, else the running program's (/proc/self/exe),
 * symbolic links resolved.  (transfer full; NULL if unknown) */
static char *code_dir(gboolean shared_library)
{
  g_autofree char *file = NULL;
  if (shared_library) {
    Dl_info info;
    struct link_map *map = NULL;
    /* the main program's link map has an empty name */
    if (!dladdr1((void *)ps_data_dirs, &info, (void **)&map, RTLD_DL_LINKMAP) || !map ||
        !map->l_name || !*map->l_name)
      return NULL;
    file = realpath(map->l_name, NULL);
  } else {
    file = g_file_read_link("/proc/self/exe", NULL);
  }
  return file ? g_path_get_dirname(file) : NULL;
}

static gboolean is_dir(const char *dir, const char *sub)
{
  g_autofree char *p = g_build_filename(dir, sub, NULL);
  return g_file_test(p, G_FILE_TEST_IS_DIR);
}

/* Adds `dir` unless it is already there (compared after resolving links)
 * or, with a `cwd`, missing; the working directory `cwd` is added as ".",
 * so that names found there print as "experiments/x.json".  Without a cwd
 * `dir` is added as spelt, even when missing.  `real` holds the resolved
 * paths added so far. */
static void add_dir(GPtrArray *dirs, GPtrArray *real, const char *dir, const char *cwd)
{
  char *r = realpath(dir, NULL);
  if (!r && !cwd) /* $PODSIM_DATA_DIR: kept, so messages say it was searched */
    r = strdup(dir);
  if (!r)
    return;
  for (guint i = 0; i < real->len; i++)
    if (strcmp(real->pdata[i], r) == 0) {
      free(r);
      return;
    }
  g_ptr_array_add(dirs, g_strdup(cwd && strcmp(r, cwd) == 0 ? "." : dir));
  g_ptr_array_add(real, g_strdup(r));
  free(r);
}

gboolean ps_data_dirs_check(GError **error)
{
  const char *env = g_getenv("PODSIM_DATA_DIR");
  if (!env || !*env || g_file_test(env, G_FILE_TEST_IS_DIR))
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
              "PODSIM_DATA_DIR=%s: %s: set it to the directory that holds experiments/, "
              "topologies/ and models/, or unset it",
              env, g_file_test(env, G_FILE_TEST_EXISTS) ? "not a directory" : "no such directory");
  return FALSE;
}

char **ps_data_dirs(void)
{
  GPtrArray *dirs = g_ptr_array_new();
  g_autoptr(GPtrArray) real = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *cwd = realpath(".", NULL);
  const char *env = g_getenv("PODSIM_DATA_DIR");
  if (env && *env)
    add_dir(dirs, real, env, NULL); /* as the user spelt it */
  if (env && *env && !g_file_test(env, G_FILE_TEST_IS_DIR)) {
    /* no falling through to other trees: every lookup fails naming it */
    g_ptr_array_add(dirs, NULL);
    return (char **)g_ptr_array_free(dirs, FALSE);
  }
  /* libdir/../share/podsim, bindir/../share/podsim: an installed tree; the
   * directory holding the binary, or its parent (build/libpodsim.so,
   * build-asan/podsim), when it has experiments/: a source tree */
  for (int shared = 1; shared >= 0; shared--) {
    g_autofree char *dir = code_dir(shared);
    if (!dir)
      continue;
    g_autofree char *parent = g_path_get_dirname(dir);
    g_autofree char *share = g_build_filename(parent, "share", "podsim", NULL);
    if (is_dir(share, "."))
      add_dir(dirs, real, share, cwd);
    else if (is_dir(dir, "experiments"))
      add_dir(dirs, real, dir, cwd);
    else if (is_dir(parent, "experiments"))
      add_dir(dirs, real, parent, cwd);
  }
  /* the working directory last, even when $PODSIM_DATA_DIR names it too */
  if (!g_ptr_array_find_with_equal_func(dirs, ".", g_str_equal, NULL))
    g_ptr_array_add(dirs, g_strdup("."));
  g_ptr_array_add(dirs, NULL);
  return (char **)g_ptr_array_free(dirs, FALSE);
}

/* ============================================================ lookup */

static const char *kind_singular(const char *kind)
{
  if (strcmp(kind, "topologies") == 0)
    return "topology";
  if (strcmp(kind, "models") == 0)
    return "model";
  if (strcmp(kind, "experiments") == 0)
    return "experiment";
  return kind;
}

static gboolean is_path(const char *name)
{
  return strchr(name, '/') != NULL || g_str_has_suffix(name, ".json");
}

gboolean ps_config__is_file(const char *path)
{
  return g_file_test(path, G_FILE_TEST_IS_REGULAR);
}

/* Why `path` cannot be opened, as strerror text. */
static const char *unreadable_reason(const char *path)
{
  struct stat st;
  if (stat(path, &st) != 0)
    return g_strerror(errno);
  if (S_ISDIR(st.st_mode))
    return g_strerror(EISDIR);
  return "not a regular file";
}

/* Finds `name` of `kind` for a reference made at ref_file:ref_path (both
 * NULL for the command line).  Paths are tried relative to the referring
 * file's directory, then as given.  Names are tried next to the referring
 * file when it is of the same kind (a topology extending another), in
 * the referring file's sibling <kind>/ folder (experiments/x.json naming a
 * topology finds topologies/), then along ps_data_dirs().
 * (transfer full) */
char *ps_config__find_config(const char *kind, const char *name, const char *ref_file,
                         const char *ref_path, gboolean same_kind, GError **error)
{
  g_autofree char *ref_dir = ref_file ? g_path_get_dirname(ref_file) : NULL;
  g_autofree char *prefix =
      ref_file ? g_strdup_printf("%s: %s: ", ref_file, ps_config__where(ref_path)) : g_strdup("");

  if (*name == '\0') {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%sempty %s name", prefix,
                kind_singular(kind));
    return NULL;
  }
  if (is_path(name)) {
    if (g_path_is_absolute(name) || !ref_dir) {
      if (ps_config__is_file(name))
        return g_strdup(name);
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s%s: cannot read: %s", prefix,
                  name, unreadable_reason(name));
      return NULL;
    }
    g_autofree char *near = g_build_filename(ref_dir, name, NULL);
    if (ps_config__is_file(near))
      return g_steal_pointer(&near);
    if (ps_config__is_file(name))
      return g_strdup(name);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s%s: cannot read: %s", prefix,
                near, unreadable_reason(near));
    return NULL;
  }

  g_autofree char *leaf = g_strconcat(name, ".json", NULL);
  if (ref_dir) {
    if (same_kind) {
      g_autofree char *sib = g_build_filename(ref_dir, leaf, NULL);
      if (ps_config__is_file(sib))
        return g_steal_pointer(&sib);
    }
    g_autofree char *up = g_build_filename(ref_dir, "..", kind, leaf, NULL);
    if (ps_config__is_file(up))
      return g_steal_pointer(&up);
  }
  g_auto(GStrv) dirs = ps_data_dirs();
  GString *searched = g_string_new(NULL);
  for (guint i = 0; dirs[i]; i++) {
    /* "experiments/x.json" rather than "./experiments/x.json" in messages */
    const char *dir = dirs[i];
    g_autofree char *cand = strcmp(dir, ".") == 0 ? g_build_filename(kind, leaf, NULL)
                                                  : g_build_filename(dir, kind, leaf, NULL);
    if (ps_config__is_file(cand)) {
      g_string_free(searched, TRUE);
      return g_steal_pointer(&cand);
    }
    g_autofree char *d = g_build_filename(dir, kind, NULL);
    g_string_append_printf(searched, "%s%s", i ? ", " : "", d);
  }
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
              "%sunknown %s '%s' (see `podsim list %s`; searched %s)", prefix,
              kind_singular(kind), name, kind, searched->str);
  g_string_free(searched, TRUE);
  return NULL;
}

char *ps_config_find(const char *kind, const char *name, GError **error)
{
  g_return_val_if_fail(kind != NULL && name != NULL, NULL);
  return ps_config__find_config(kind, name, NULL, NULL, FALSE, error);
}

static gint compare_names(gconstpointer a, gconstpointer b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

char **ps_config_list(const char *kind)
{
  g_return_val_if_fail(kind != NULL, NULL);
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  g_auto(GStrv) dirs = ps_data_dirs();
  for (guint i = 0; dirs[i]; i++) {
    g_autofree char *d = g_build_filename(dirs[i], kind, NULL);
    GDir *dir = g_dir_open(d, 0, NULL);
    if (!dir)
      continue;
    const char *entry;
    while ((entry = g_dir_read_name(dir)) != NULL) {
      if (!g_str_has_suffix(entry, ".json") || entry[0] == '.')
        continue;
      g_autofree char *full = g_build_filename(d, entry, NULL);
      if (!ps_config__is_file(full))
        continue;
      g_hash_table_add(seen, g_strndup(entry, strlen(entry) - strlen(".json")));
    }
    g_dir_close(dir);
  }
  GPtrArray *names = g_ptr_array_new();
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, seen);
  while (g_hash_table_iter_next(&it, &key, NULL)) {
    g_ptr_array_add(names, g_strdup(key));
  }
  g_ptr_array_sort(names, compare_names);
  g_ptr_array_add(names, NULL);
  return (char **)g_ptr_array_free(names, FALSE);
}

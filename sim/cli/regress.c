/* regress.c: `podsim regress` and the golden file reader (see regress.h).
 *
 *   podsim regress [--update] [--json] [--file FILE]
 *
 * The file is read whole and checked before any case runs, so a malformed
 * line exits 2 with nothing on stdout.  Cases run one after the other, in
 * file order (the sixteen of tests/golden take about a second).  With
 * --update the file is rewritten line for line: comments, blank lines and
 * the order stay, each case line gets "ARGS<TAB>%.6g" of its new step time
 * (what tests/golden/regen.sh writes); the new text goes to a temporary
 * file beside it that is then renamed over it, so a reader sees the old
 * file or the new one, never half of one.
 *
 * Invariant: a case line is exactly "ARGS<TAB>NUMBER" with ARGS an
 * experiment then only "--set K=V" pairs and NUMBER a finite step time
 * > 0, and no case comes twice; anything else is a "PATH:LINE:" error. */
#include "cli/regress.h"

#include "cli/cli-common.h"

#include "common/common.h"
#include "io/config.h"
#include "run/run.h"
#include "run/experiment.h"

#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>


#define EXIT_INPUT 2

struct PsGolden {
  char *path;
  char **lines;     /* the file split at '\n' (a last "" when it ends with one) */
  GPtrArray *cases; /* PsGoldenCase *, in file order */
};

static void case_free(gpointer p)
{
  PsGoldenCase *c = p;
  g_free(c->args);
  g_free(c->experiment);
  g_strfreev(c->sets);
  g_free(c);
}

static void line_error(GError **error, const char *path, guint line, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);
static void line_error(GError **error, const char *path, guint line, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX, "%s:%u: %s", path, line, msg);
}

/* One case line.  (transfer full) */
static PsGoldenCase *case_parse(const char *path, guint line, const char *text, GError **error)
{
  const char *tab = strchr(text, '\t');
  if (!tab) {
    line_error(error, path, line,
               "no tab before the step time (a case line is EXPERIMENT [--set KEY=VALUE]..."
               "<TAB>SECONDS)");
    return NULL;
  }
  char *end = NULL;
  double want = g_ascii_strtod(tab + 1, &end);
  while (g_ascii_isspace(*end))
    end++;
  if (end == tab + 1 || *end || !isfinite(want) || want <= 0) {
    g_autofree char *value = g_strstrip(g_strdup(tab + 1));
    line_error(error, path, line, "'%s' is not a step time (a number of seconds > 0)", value);
    return NULL;
  }
  g_autofree char *args = g_strndup(text, (gsize)(tab - text));
  g_auto(GStrv) words = g_strsplit(args, " ", -1);
  if (!words[0] || !*words[0] || words[0][0] == '-') {
    line_error(error, path, line, "the case does not start with an EXPERIMENT");
    return NULL;
  }
  GPtrArray *sets = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 1; words[i]; i++) {
    if (!*words[i])
      continue;
    if (strcmp(words[i], "--set") == 0 && words[i + 1] && strchr(words[i + 1], '=')) {
      g_ptr_array_add(sets, g_strdup(words[++i]));
      continue;
    }
    line_error(error, path, line,
               "cannot read '%s' (after the EXPERIMENT a case has only --set KEY=VALUE)",
               words[i]);
    g_ptr_array_free(sets, TRUE);
    return NULL;
  }
  g_ptr_array_add(sets, NULL);
  PsGoldenCase *c = g_new0(PsGoldenCase, 1);
  c->args = g_steal_pointer(&args);
  c->experiment = g_strdup(words[0]);
  c->sets = (char **)g_ptr_array_free(sets, FALSE);
  c->want = want;
  c->line = line;
  return c;
}

PsGolden *ps_golden_read(const char *path, GError **error)
{
  g_return_val_if_fail(path != NULL, NULL);
  g_autofree char *text = NULL;
  GError *read_error = NULL;
  if (!g_file_get_contents(path, &text, NULL, &read_error)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "cannot read the golden file: %s",
                read_error->message);
    g_error_free(read_error);
    return NULL;
  }
  PsGolden *g = g_new0(PsGolden, 1);
  g->path = g_strdup(path);
  g->lines = g_strsplit(text, "\n", -1);
  g->cases = g_ptr_array_new_with_free_func(case_free);
  g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; g->lines[i]; i++) {
    const char *l = g->lines[i];
    const char *s = l;
    while (g_ascii_isspace(*s))
      s++;
    if (*l == '#' || *s == '\0')
      continue;
    PsGoldenCase *c = case_parse(path, i + 1, l, error);
    if (!c)
      goto fail;
    g_ptr_array_add(g->cases, c);
    gpointer first = g_hash_table_lookup(seen, c->args);
    if (first) {
      line_error(error, path, i + 1, "the case of line %u again", GPOINTER_TO_UINT(first));
      goto fail;
    }
    g_hash_table_insert(seen, c->args, GUINT_TO_POINTER(i + 1));
  }
  if (g->cases->len == 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: no golden case (lines EXPERIMENT [--set KEY=VALUE]...<TAB>SECONDS)", path);
    goto fail;
  }
  return g;
fail:
  ps_golden_free(g);
  return NULL;
}

void ps_golden_free(PsGolden *g)
{
  if (!g)
    return;
  g_free(g->path);
  g_strfreev(g->lines);
  g_ptr_array_free(g->cases, TRUE);
  g_free(g);
}

guint ps_golden_n_cases(const PsGolden *g)
{
  g_return_val_if_fail(g != NULL, 0);
  return g->cases->len;
}

const PsGoldenCase *ps_golden_case(const PsGolden *g, guint i)
{
  g_return_val_if_fail(g != NULL && i < g->cases->len, NULL);
  return g->cases->pdata[i];
}

gboolean ps_golden_run(const PsGoldenCase *c, double *step_time_s, GError **error)
{
  g_return_val_if_fail(c != NULL && step_time_s != NULL, FALSE);
  PsExperiment *e = ps_experiment_load(c->experiment, (const char *const *)c->sets, error);
  if (!e)
    return FALSE;
  PsSummary s;
  gboolean ok = ps_run(e, &(PsRunOptions){0}, &s, error);
  if (ok) {
    *step_time_s = s.step_time_s;
    ps_summary_clear(&s);
  }
  ps_experiment_free(e);
  return ok;
}

gboolean ps_golden_within(double got, double want)
{
  return fabs(got - want) <= PS_GOLDEN_TOLERANCE * want;
}

/* ---- the command ------------------------------------------------------ */

/* What became of one case. */
typedef struct {
  const PsGoldenCase *c;
  double got;
  char *error; /* NULL if it ran */
  gboolean moved;
} Result;

typedef struct {
  guint run, moved, failed, changed;
} Counts;

#define input_error(...) ps_cli_input_error("regress", __VA_ARGS__)

/* A step time as the golden file writes it.  (transfer full) */
static char *seconds_text(double s)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.6g", s));
}

/* "old 0.0191234 s, new 0.0189341 s, diff -0.000189303 s (-0.99%)".
 * (transfer full) */
static char *change_text(const Result *r)
{
  g_autofree char *old = seconds_text(r->c->want);
  g_autofree char *now = seconds_text(r->got);
  double diff = r->got - r->c->want;
  return g_strdup_printf("old %s s, new %s s, diff %+.6g s (%+.3g%%)", old, now, diff,
                         100 * diff / r->c->want);
}

/* The file's text with each case's new step time (a case that could not
 * run keeps its line); *changed the number of case lines that differ.
 * (transfer full) */
static char *golden_text(const PsGolden *g, const Result *results, guint *changed)
{
  g_auto(GStrv) lines = g_strdupv(g->lines);
  *changed = 0;
  for (guint i = 0; i < g->cases->len; i++) {
    const Result *r = &results[i];
    if (r->error)
      continue;
    g_autofree char *value = seconds_text(r->got);
    char *line = g_strdup_printf("%s\t%s", r->c->args, value);
    char **slot = &lines[r->c->line - 1];
    *changed += strcmp(*slot, line) != 0;
    g_free(*slot);
    *slot = line;
  }
  return g_strjoinv("\n", lines);
}

/* Replaces the file with text: a temporary file beside it, synced, then
 * renamed over it, with the old file's permissions. */
static gboolean golden_write(const PsGolden *g, const char *text, GError **error)
{
  GStatBuf st;
  int mode = g_stat(g->path, &st) == 0 ? (int)(st.st_mode & 0777) : 0644;
  GError *write_error = NULL;
  if (!g_file_set_contents_full(g->path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT, mode,
                                &write_error)) {
    g_set_error(error, G_FILE_ERROR, write_error->code, "%s: cannot rewrite: %s", g->path,
                write_error->message);
    g_error_free(write_error);
    return FALSE;
  }
  return TRUE;
}

static json_object *result_json(const Result *r)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "case", json_object_new_string(r->c->args));
  json_object_object_add(o, "line", json_object_new_int((int)r->c->line));
  json_object_object_add(o, "old_s", ps_cli_json_exact_double(r->c->want));
  gboolean ran = r->error == NULL;
  json_object_object_add(o, "new_s", ran ? ps_cli_json_exact_double(r->got) : NULL);
  json_object_object_add(o, "diff_s", ran ? ps_cli_json_exact_double(r->got - r->c->want) : NULL);
  json_object_object_add(
      o, "relative", ran ? ps_cli_json_exact_double((r->got - r->c->want) / r->c->want) : NULL);
  json_object_object_add(o, "moved", json_object_new_boolean(r->moved));
  json_object_object_add(o, "error", r->error ? json_object_new_string(r->error) : NULL);
  return o;
}

static void print_json(const PsGolden *g, const Result *results, const Counts *n,
                       gboolean update, gboolean written)
{
  json_object *root = json_object_new_object();
  json_object_object_add(root, "file", json_object_new_string(g->path));
  json_object_object_add(root, "tolerance", ps_cli_json_exact_double(PS_GOLDEN_TOLERANCE));
  json_object *cases = json_object_new_array();
  for (guint i = 0; i < g->cases->len; i++)
    json_object_array_add(cases, result_json(&results[i]));
  json_object_object_add(root, "cases", cases);
  json_object_object_add(root, "run", json_object_new_int((int)n->run));
  json_object_object_add(root, "moved", json_object_new_int((int)n->moved));
  json_object_object_add(root, "within",
                         json_object_new_int((int)(n->run - n->moved - n->failed)));
  json_object_object_add(root, "failed", json_object_new_int((int)n->failed));
  if (update) {
    json_object_object_add(root, "changed", json_object_new_int((int)n->changed));
    json_object_object_add(root, "updated", json_object_new_boolean(written));
  }
  printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(root);
}

/* "regress: FILE: 7 cases run, 1 moved, 6 within tolerance (1e-05 relative)". */
static void print_summary(const PsGolden *g, const Counts *n, const char *tail)
{
  g_autofree char *failed =
      n->failed ? g_strdup_printf(", %u failed", n->failed) : g_strdup("");
  printf("regress: %s: %u case%s run, %u moved, %u within tolerance%s (%g relative)%s\n",
         g->path, n->run, n->run == 1 ? "" : "s", n->moved, n->run - n->moved - n->failed,
         failed, PS_GOLDEN_TOLERANCE, tail);
}


int ps_cli_regress(int argc, char **argv)
{
  g_autofree char *file = NULL;
  gboolean update = FALSE, json = FALSE;
  GOptionEntry entries[] = {
      {"update", 'u', 0, G_OPTION_ARG_NONE, &update,
       "Rewrite the file with the new predictions and print what changed", NULL},
      {"json", 'j', 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with every case",
       NULL},
      {"file", 'f', 0, G_OPTION_ARG_FILENAME, &file,
       "The golden file (default: tests/golden/step-times.txt of the data directory)", "FILE"},
      {NULL}};
  g_set_prgname("podsim regress");
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("- golden step-time predictions against the current model");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Runs every case of the golden file (EXPERIMENT [--set KEY=VALUE]...<TAB>SECONDS,\n"
           "the cases tests/test_golden.c checks) and prints old, new and the difference for\n"
           "each one whose step time moved by more than " G_STRINGIFY(PS_GOLDEN_TOLERANCE)
           " of the old one, then a summary.\n"
           "Exit status 0 if none moved, 1 if one moved or could not run, 2 for a malformed\n"
           "file.  With --update the file is rewritten (a temporary file renamed over it)\n"
           "with the new step times, each line that changed is printed, and the exit status\n"
           "is 0 unless a case could not run (then the file is left as it was).");
  GError *error = NULL;
  int parse_status;
  if (!ps_cli_parse(ctx, "regress", &argc, &argv, &parse_status))
    return parse_status;
  if (argc > 1)
    return input_error("unexpected argument '%s' (see podsim regress --help)", argv[1]);
  if (!file)
    file = ps_cli_data_path("tests/golden/step-times.txt", G_FILE_TEST_IS_REGULAR);

  PsGolden *g = ps_golden_read(file, &error);
  if (!g) {
    int st = input_error("%s", error->message);
    g_error_free(error);
    return st;
  }
  Counts n = {.run = g->cases->len};
  Result *results = g_new0(Result, g->cases->len);
  for (guint i = 0; i < g->cases->len; i++) {
    Result *r = &results[i];
    r->c = g->cases->pdata[i];
    if (!ps_golden_run(r->c, &r->got, &error)) {
      r->error = g_strdup(error ? error->message : "the run failed without a message");
      g_clear_error(&error);
      n.failed++;
    } else if (!ps_golden_within(r->got, r->c->want)) {
      r->moved = TRUE;
      n.moved++;
    }
  }

  int status = 0;
  gboolean written = FALSE;
  g_autofree char *tail = NULL;
  g_autofree char *text = golden_text(g, results, &n.changed);
  if (update && !n.failed && n.changed) {
    if (golden_write(g, text, &error)) {
      written = TRUE;
      tail = g_strdup_printf("; rewrote %u line%s", n.changed, n.changed == 1 ? "" : "s");
    } else {
      fprintf(stderr, "podsim: regress: %s\n", error->message);
      g_clear_error(&error);
      status = 1;
    }
  } else if (update) {
    tail = g_strdup(n.failed ? "; file left as it was" : "; file already up to date");
  }
  if (n.failed || (!update && n.moved))
    status = 1;

  if (json) {
    print_json(g, results, &n, update, written);
  } else {
    for (guint i = 0; i < g->cases->len; i++) {
      const Result *r = &results[i];
      if (r->error) {
        printf("failed: %s (line %u): %s\n", r->c->args, r->c->line, r->error);
        continue;
      }
      g_autofree char *want = seconds_text(r->c->want), *got = seconds_text(r->got);
      if (written ? strcmp(want, got) == 0 : !r->moved)
        continue;
      g_autofree char *change = change_text(r);
      printf("%s: %s (line %u): %s%s\n", written ? "updated" : "moved", r->c->args,
             r->c->line, change, r->moved ? "" : " (within tolerance)");
    }
    print_summary(g, &n, tail ? tail : "");
  }
  if (n.failed && update)
    fprintf(stderr, "podsim: regress: %u case%s could not run: %s left as it was\n", n.failed,
            n.failed == 1 ? "" : "s", g->path);

  for (guint i = 0; i < g->cases->len; i++)
    g_free(results[i].error);
  g_free(results);
  ps_golden_free(g);
  return status;
}

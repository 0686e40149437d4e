/* test_sweep.c: `podsim sweep` and `podsim compare` through the binary
 * named by $PODSIM (set by `make test`): a sweep's rows against direct runs
 * of the same points, --jobs 2 against --jobs 1, failed points as error
 * rows and exit 1, resuming after a lost or cut-short row, range
 * expansion, JSON lines, and compare's ratios against two direct runs. */
#include "support/cli.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

#define EXP "tests/data/good/experiments/mlp-what-if.json"

static const char *podsim;

/* The lines of text without the empty one after the last newline. */
static char **lines_of(const char *text)
{
  g_assert_true(g_str_has_suffix(text, "\n"));
  g_autofree char *body = g_strndup(text, strlen(text) - 1);
  return g_strsplit(body, "\n", -1);
}

/* One CSV record (no newlines inside fields here): "a,\"b,c\",d". */
static char **csv_fields(const char *line)
{
  GPtrArray *f = g_ptr_array_new();
  GString *cell = g_string_new(NULL);
  gboolean quoted = FALSE;
  for (const char *c = line;; c++) {
    if (quoted && *c == '"' && c[1] == '"') {
      g_string_append_c(cell, '"');
      c++;
    } else if (*c == '"') {
      quoted = !quoted;
    } else if ((*c == ',' && !quoted) || *c == '\0') {
      g_ptr_array_add(f, g_strdup(cell->str));
      g_string_truncate(cell, 0);
      if (*c == '\0')
        break;
    } else {
      g_string_append_c(cell, *c);
    }
  }
  g_assert_false(quoted);
  g_string_free(cell, TRUE);
  g_ptr_array_add(f, NULL);
  return (char **)g_ptr_array_free(f, FALSE);
}

static int column(char **header, const char *name)
{
  for (int i = 0; header[i]; i++)
    if (strcmp(header[i], name) == 0)
      return i;
  g_assert_not_reached();
  return -1;
}

static guint count(const char *haystack, const char *needle)
{
  guint n = 0;
  for (const char *p = haystack; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

/* step_time_s of `podsim run EXP --json` at one point. */
static double run_step_time(const char *batch, const char *topology)
{
  g_autofree char *out = NULL, *err = NULL;
  g_autofree char *b = g_strdup_printf("global_batch=%s", batch);
  g_autofree char *t = g_strdup_printf("topology=%s", topology);
  g_assert_cmpint(podsim_run(&out, &err, "run", EXP, "--json", "--no-trace", "--set",
                      "numerics.enabled=false", "--set", b, "--set", t, NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  double s = json_object_get_double(json_object_object_get(o, "step_time_s"));
  json_object_put(o);
  return s;
}

/* Runs the 2x2 sweep (global_batch x topology) into csv, asserting it
 * exits 0; its stderr.  (transfer full) */
static char *sweep_grid(const char *csv)
{
  char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=128,256", "--vary", "topology=tpu-v3-8,tpu-v3-32", "--out",
                      csv, NULL), ==, 0);
  g_free(out);
  return err;
}

/* A 2x2 sweep: 4 rows, each step time that of a direct run of its point,
 * wall-clock fields left out, a progress line per point on stderr. */
static void test_grid_matches_runs(void)
{
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *csv = g_build_filename(dir, "grid.csv", NULL);
  g_autofree char *err = sweep_grid(csv);
  g_assert_cmpuint(count(err, "sweep: ["), ==, 4);
  g_autofree char *text = slurp(csv);
  g_auto(GStrv) lines = lines_of(text);
  g_assert_cmpuint(g_strv_length(lines), ==, 5);
  g_auto(GStrv) header = csv_fields(lines[0]);
  guint ncol = g_strv_length(header);
  g_assert_cmpstr(header[0], ==, "global_batch");
  g_assert_cmpstr(header[1], ==, "topology");
  g_assert_cmpstr(header[ncol - 1], ==, "error");
  g_assert_false(g_strv_contains((const char *const *)header, "wall_s"));
  g_assert_false(g_strv_contains((const char *const *)header, "events_per_s"));
  int st = column(header, "step_time_s"), comp = column(header, "breakdown.compute"),
      coll = column(header, "breakdown.collective"), dev = column(header, "devices");
  const char *want[4][2] = {{"128", "tpu-v3-8"}, {"128", "tpu-v3-32"},
                            {"256", "tpu-v3-8"}, {"256", "tpu-v3-32"}};
  double collective[4];
  for (guint r = 1; r < 5; r++) {
    g_auto(GStrv) f = csv_fields(lines[r]);
    g_assert_cmpuint(g_strv_length(f), ==, ncol);
    g_assert_cmpstr(f[0], ==, want[r - 1][0]);
    g_assert_cmpstr(f[1], ==, want[r - 1][1]);
    g_assert_cmpstr(f[ncol - 1], ==, "");
    g_assert_cmpstr(f[dev], ==, strcmp(f[1], "tpu-v3-8") == 0 ? "8" : "32");
    double step = g_ascii_strtod(f[st], NULL);
    g_assert_cmpfloat(step, ==, run_step_time(f[0], f[1]));
    g_assert_cmpfloat(g_ascii_strtod(f[comp], NULL), >, 0);
    collective[r - 1] = g_ascii_strtod(f[coll], NULL);
  }
  /* the breakdown columns are each row's own: 32 replicas all-reduce for
   * longer than 8 */
  g_assert_cmpfloat(collective[1], >, collective[0]);
  g_assert_cmpfloat(collective[3], >, collective[2]);
  scratch_clear(dir);
}

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of a sweep's file at --jobs N, its rows sorted. */
static char **sweep_sorted(const char *dir, const char *name, const char *jobs)
{
  g_autofree char *csv = g_build_filename(dir, name, NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64:512:x2", "--vary", "topology=tpu-v3-8,tpu-v3-32",
                      "--vary", "strategy.weight_update_sharding=true,false", "--jobs", jobs,
                      "--out", csv, NULL), ==, 0);
  g_assert_nonnull(strstr(err, jobs[0] == '1' ? "on 1 thread\n" : "on 2 threads\n"));
  g_autofree char *text = slurp(csv);
  char **lines = lines_of(text);
  g_assert_cmpuint(g_strv_length(lines), ==, 17);
  qsort(lines + 1, 16, sizeof(char *), cmp_str);
  return lines;
}

static void test_jobs_equal(void)
{
  char *dir = scratch_dir("podsim-sweep");
  g_auto(GStrv) one = sweep_sorted(dir, "one.csv", "1");
  g_auto(GStrv) two = sweep_sorted(dir, "two.csv", "2");
  for (guint i = 0; one[i] || two[i]; i++)
    g_assert_cmpstr(one[i], ==, two[i]);
  scratch_clear(dir);
}

/* global_batch 72 does not divide among 32 replicas: its row carries the
 * message, the others run, the sweep exits 1 and says how many failed. */
static void test_failed_point(void)
{
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *csv = g_build_filename(dir, "fail.csv", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64,72", "--vary", "topology=tpu-v3-8,tpu-v3-32,no-such-slice",
                      "--out", csv, NULL), ==, 1);
  g_assert_nonnull(strstr(err, "podsim: sweep: 3 of 6 points failed"));
  g_autofree char *text = slurp(csv);
  g_auto(GStrv) lines = lines_of(text);
  g_assert_cmpuint(g_strv_length(lines), ==, 7);
  g_auto(GStrv) header = csv_fields(lines[0]);
  guint ncol = g_strv_length(header);
  int st = column(header, "step_time_s");
  guint failed = 0;
  for (guint r = 1; r < 7; r++) {
    g_auto(GStrv) f = csv_fields(lines[r]);
    g_assert_cmpuint(g_strv_length(f), ==, ncol); /* quoting kept commas in their cell */
    const char *error = f[ncol - 1];
    if (strcmp(f[1], "no-such-slice") == 0) {
      g_assert_nonnull(strstr(error, "unknown topology 'no-such-slice'"));
      g_assert_nonnull(strchr(error, ','));
    } else if (strcmp(f[0], "72") == 0 && strcmp(f[1], "tpu-v3-32") == 0) {
      g_assert_nonnull(strstr(error, "global_batch: 72 is not divisible by strategy.replicas = 32"));
    } else {
      g_assert_cmpstr(error, ==, "");
      g_assert_cmpfloat(g_ascii_strtod(f[st], NULL), >, 0);
      continue;
    }
    failed++;
    g_assert_cmpstr(f[st], ==, "");
  }
  g_assert_cmpuint(failed, ==, 3);
  scratch_clear(dir);
}

/* Bad command lines exit 2 before running anything. */
static void test_usage_errors(void)
{
  struct {
    const char *a, *b, *c;
    const char *msg;
  } cases[] = {
      {"--vary", "global_batch=64", NULL, "--out FILE is required"},
      {"--vary", "global_batch=512:64:x2", "--dry-run", "A <= B"},
      {"--vary", "global_batch=64:512:x1", "--dry-run", "F > 1"},
      {"--vary", "global_batch=64:512:x", "--dry-run", "a range is A:B:xF"},
      {"--vary", "global_batch=64,,128", "--dry-run", "an empty value"},
      {"--vary", "global_batch=64,64", "--dry-run", "the value 64 comes twice"},
      {"--vary", "=64", "--dry-run", "expected KEY=V1,V2"},
      {"--format=xml", "--vary=steps=1", "--dry-run", "--format xml: choose csv or jsonl"},
      {"--jobs=-1", "--vary=steps=1", "--dry-run", "--jobs -1"},
      {"--dry-run", NULL, NULL, "give at least one --vary"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *out = NULL, *err = NULL;
    int st = podsim_run(&out, &err, "sweep", EXP, cases[i].a, cases[i].b, cases[i].c, NULL);
    g_test_message("%s %s: %d: %s", cases[i].a, cases[i].b ? cases[i].b : "", st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_nonnull(strstr(err, cases[i].msg));
    g_assert_true(g_str_has_prefix(err, "podsim: sweep: "));
    g_assert_cmpstr(out, ==, "");
  }
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", "no-such-experiment", "--vary", "steps=1,2",
                      "--dry-run", NULL), ==, 2);
  g_assert_nonnull(strstr(err, "no-such-experiment"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", "steps=1,2", "--vary", "steps=3",
                      "--dry-run", NULL), ==, 2);
  g_assert_nonnull(strstr(err, "--vary steps comes twice"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", "steps=1,2", "--set", "steps=3",
                      "--dry-run", NULL), ==, 2);
  g_assert_nonnull(strstr(err, "steps is both set"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", "--help", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "A:B:xF"));
  g_assert_nonnull(strstr(out, "Example:"));
  g_assert_nonnull(strstr(out, "--jobs"));
}

/* Re-runs the 2x2 sweep into csv; its stderr.  (transfer full) */
static char *sweep_again(const char *csv, const char *expect_in_err, guint expect_runs)
{
  char *err = sweep_grid(csv);
  g_test_message("%s", err);
  g_assert_nonnull(strstr(err, expect_in_err));
  g_assert_cmpuint(count(err, "sweep: ["), ==, expect_runs);
  return err;
}

/* A re-run skips the points already in the file: lose the last row (or
 * cut it short) and only that point runs again; the file ends identical.
 * A dry run over a cut file lists that point and leaves the file as it is;
 * a whole last row that lacks only its newline is kept (nothing runs, a
 * new point's row follows it on a line of its own); a file that is not a
 * sweep's is refused and left as it is, a cut last row and all. */
static void test_resume(void)
{
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *csv = g_build_filename(dir, "resume.csv", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_free(sweep_grid(csv));
  g_autofree char *full = slurp(csv);
  size_t len = strlen(full);
  const char *last = g_strrstr_len(full, (gssize)len - 1, "\n") + 1;
  g_assert_true(g_str_has_prefix(last, "256,tpu-v3-32,"));

  /* the last row lost */
  g_assert_true(g_file_set_contents(csv, full, last - full, NULL));
  g_autofree char *err1 = sweep_again(csv, "4 points, 3 already in", 1);
  g_assert_nonnull(strstr(err1, "sweep: [1/1] global_batch=256 topology=tpu-v3-32: step"));
  g_autofree char *again = slurp(csv);
  g_assert_cmpstr(again, ==, full);

  /* the last row cut short mid-way, as by a kill during a write */
  g_assert_true(g_file_set_contents(csv, full, (gssize)(last - full) + 20, NULL));
  g_autofree char *err2 = sweep_again(csv, "dropped a last row", 1);
  g_assert_nonnull(strstr(err2, "sweep: [1/1] global_batch=256 topology=tpu-v3-32: step"));
  g_autofree char *again2 = slurp(csv);
  g_assert_cmpstr(again2, ==, full);

  /* a dry run lists the cut row's point and changes nothing */
  g_assert_true(g_file_set_contents(csv, full, (gssize)(last - full) + 20, NULL));
  g_autofree char *cut = slurp(csv);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                             "global_batch=128,256", "--vary", "topology=tpu-v3-8,tpu-v3-32",
                             "--out", csv, "--dry-run", NULL), ==, 0);
  g_assert_cmpstr(out, ==, "global_batch=256 topology=tpu-v3-32\n");
  g_assert_nonnull(strstr(err, "a run would drop it"));
  g_autofree char *after_dry = slurp(csv);
  g_assert_cmpstr(after_dry, ==, cut);
  g_assert_true(g_file_set_contents(csv, full, -1, NULL));

  /* the whole last row without its newline: kept (a dry run lists only
   * new points and changes nothing; a run with nothing to do ends the
   * row) */
  g_assert_true(g_file_set_contents(csv, full, (gssize)len - 1, NULL));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                             "global_batch=128,256,512", "--vary", "topology=tpu-v3-8,tpu-v3-32",
                             "--out", csv, "--dry-run", NULL), ==, 0);
  g_assert_cmpstr(out, ==, "global_batch=512 topology=tpu-v3-8\n"
                           "global_batch=512 topology=tpu-v3-32\n");
  g_autofree char *kept = slurp(csv);
  g_assert_cmpint(strlen(kept), ==, len - 1);
  g_assert_true(strncmp(kept, full, len - 1) == 0);
  g_autofree char *err5 = sweep_again(csv, "4 already in", 0);
  g_assert_null(strstr(err5, "dropped"));
  g_autofree char *ended = slurp(csv);
  g_assert_cmpstr(ended, ==, full);
  g_assert_true(g_file_set_contents(csv, full, (gssize)len - 1, NULL));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                             "global_batch=128,256,512", "--vary", "topology=tpu-v3-8,tpu-v3-32",
                             "--out", csv, NULL), ==, 0);
  g_autofree char *grown = slurp(csv);
  g_assert_true(g_str_has_prefix(grown, full));
  g_assert_true(g_str_has_prefix(grown + len, "512,tpu-v3-8,"));
  g_assert_true(g_file_set_contents(csv, full, -1, NULL));

  /* not a sweep's file, its last row cut: refused, untouched */
  g_autofree char *foreign = g_build_filename(dir, "foreign.csv", NULL);
  const char *text = "global_batch,error\n64,\"x\n";
  g_assert_true(g_file_set_contents(foreign, text, -1, NULL));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", "global_batch=64,128", "--out",
                             foreign, NULL), ==, 2);
  g_autofree char *foreign_after = slurp(foreign);
  g_assert_cmpstr(foreign_after, ==, text);

  /* a failed point's row cut inside its message (unquoted, so every
   * field is there): dropped and the point run again, not kept */
  g_autofree char *failing = g_build_filename(dir, "failing.csv", NULL);
  const char *fail_args[] = {"sweep", "default", "--set", "numerics.enabled=false", "--set",
                             "steps=2", "--vary", "strategy.replicas=1,3", "--out", failing,
                             NULL};
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, fail_args[0], fail_args[1], fail_args[2], fail_args[3],
                             fail_args[4], fail_args[5], fail_args[6], fail_args[7],
                             fail_args[8], fail_args[9], NULL), ==, 1);
  g_autofree char *failed_full = slurp(failing);
  size_t flen = strlen(failed_full);
  g_assert_true(g_str_has_suffix(failed_full, "\n"));
  g_assert_true(g_file_set_contents(failing, failed_full, (gssize)flen - 10, NULL));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, fail_args[0], fail_args[1], fail_args[2], fail_args[3],
                             fail_args[4], fail_args[5], fail_args[6], fail_args[7],
                             fail_args[8], fail_args[9], NULL), ==, 1);
  g_assert_nonnull(strstr(err, "dropped a last row"));
  g_autofree char *failed_again = slurp(failing);
  g_assert_cmpstr(failed_again, ==, failed_full);

  /* nothing left to run: the file stays as it is */
  g_autofree char *err3 = sweep_again(csv, "4 already in", 0);
  g_autofree char *again3 = slurp(csv);
  g_assert_cmpstr(again3, ==, full);

  /* the same file under other --vary keys is refused, untouched */
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", "global_batch=128,256", "--out", csv,
                      NULL), ==, 2);
  g_assert_nonnull(strstr(err, "repeats the values of an earlier row"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", "steps=1,2", "--out", csv, NULL), ==,
                  2);
  g_assert_nonnull(strstr(err, "is not that of a sweep varying these keys"));
  g_autofree char *again4 = slurp(csv);
  g_assert_cmpstr(again4, ==, full);
  scratch_clear(dir);
}

static void test_ranges(void)
{
  struct {
    const char *vary, *want;
  } cases[] = {
      {"global_batch=64:512:x2", "global_batch=64\nglobal_batch=128\nglobal_batch=256\n"
                                 "global_batch=512\n"},
      {"steps=1:10:+3", "steps=1\nsteps=4\nsteps=7\nsteps=10\n"},
      {"steps=1:9:+3", "steps=1\nsteps=4\nsteps=7\n"},
      {"input.host_cost_per_example_s=0.1:0.5:+0.1",
       "input.host_cost_per_example_s=0.1\ninput.host_cost_per_example_s=0.2\n"
       "input.host_cost_per_example_s=0.3\ninput.host_cost_per_example_s=0.4\n"
       "input.host_cost_per_example_s=0.5\n"},
      {"collective.chunk_bytes=256KiB:1MiB:x2",
       "collective.chunk_bytes=262144\ncollective.chunk_bytes=524288\n"
       "collective.chunk_bytes=1048576\n"},
      {"global_batch=8,64:256:x2,1000", "global_batch=8\nglobal_batch=64\nglobal_batch=128\n"
                                        "global_batch=256\nglobal_batch=1000\n"},
      {"topology.torus.dims=[2,2],[2,4]", "topology.torus.dims=[2,2]\ntopology.torus.dims=[2,4]\n"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--vary", cases[i].vary, "--dry-run", NULL),
                    ==, 0);
    g_assert_cmpstr(out, ==, cases[i].want);
  }
  /* and the rows a range's sweep writes */
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *csv = g_build_filename(dir, "range.csv", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64:512:x2", "--out", csv, NULL), ==, 0);
  g_autofree char *text = slurp(csv);
  g_auto(GStrv) lines = lines_of(text);
  const char *want[] = {"64,", "128,", "256,", "512,"};
  g_assert_cmpuint(g_strv_length(lines), ==, 5);
  for (guint r = 0; r < 4; r++)
    g_assert_true(g_str_has_prefix(lines[r + 1], want[r]));
  scratch_clear(dir);
}

/* JSON lines: one object per point, the same fields as the CSV, errors as
 * strings (null when the point ran); resumable too. */
static void test_jsonl(void)
{
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *path = g_build_filename(dir, "points.jsonl", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64,72", "--vary", "topology=tpu-v3-8,tpu-v3-32", "--jobs",
                      "2", "--out", path, NULL), ==, 1);
  g_autofree char *text = slurp(path);
  g_auto(GStrv) lines = lines_of(text);
  g_assert_cmpuint(g_strv_length(lines), ==, 4);
  guint failed = 0;
  for (guint i = 0; i < 4; i++) {
    json_object *o = json_tokener_parse(lines[i]);
    g_assert_nonnull(o);
    json_object *gb = json_object_object_get(o, "global_batch"),
                *topo = json_object_object_get(o, "topology"), *e = NULL;
    g_assert_true(json_object_is_type(gb, json_type_int));
    g_assert_true(json_object_object_get_ex(o, "error", &e));
    g_assert_false(json_object_object_get_ex(o, "wall_s", NULL));
    if (e) {
      failed++;
      g_assert_cmpint(json_object_get_int(gb), ==, 72);
      g_assert_cmpstr(json_object_get_string(topo), ==, "tpu-v3-32");
      g_assert_false(json_object_object_get_ex(o, "step_time_s", NULL));
    } else {
      double st = json_object_get_double(json_object_object_get(o, "step_time_s"));
      g_autofree char *b = g_strdup_printf("%d", json_object_get_int(gb));
      g_assert_cmpfloat(st, ==, run_step_time(b, json_object_get_string(topo)));
      g_assert_true(json_object_object_get_ex(o, "breakdown.host", NULL));
    }
    json_object_put(o);
  }
  g_assert_cmpuint(failed, ==, 1);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64,72", "--vary", "topology=tpu-v3-8,tpu-v3-32", "--out",
                      path, NULL), ==, 1);
  g_assert_nonnull(strstr(err, "4 already in"));
  g_assert_nonnull(strstr(err, "1 of 4 points failed (1 in an earlier run)"));
  g_autofree char *again = slurp(path);
  g_assert_cmpstr(again, ==, text);
  scratch_clear(dir);
}

/* Numerics points share one opened Fashion-MNIST: their losses are those
 * of separate runs, on one thread or two. */
static void test_numerics_shared_data(void)
{
  if (!g_file_test("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                   G_FILE_TEST_EXISTS)) {
    g_test_skip("Fashion-MNIST is not installed");
    return;
  }
  char *dir = scratch_dir("podsim-sweep");
  g_autofree char *csv = g_build_filename(dir, "numerics.csv", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", "default", "--set", "steps=2", "--set",
                      "numerics.evaluate=false", "--vary", "numerics.seed=1,2", "--jobs", "2",
                      "--out", csv, NULL), ==, 0);
  g_autofree char *text = slurp(csv);
  g_auto(GStrv) lines = lines_of(text);
  g_assert_cmpuint(g_strv_length(lines), ==, 3);
  g_auto(GStrv) header = csv_fields(lines[0]);
  int loss = column(header, "loss_last");
  for (guint r = 1; r < 3; r++) {
    g_auto(GStrv) f = csv_fields(lines[r]);
    g_autofree char *o2 = NULL, *e2 = NULL;
    g_assert_cmpint(podsim_run(&o2, &e2, "run", "default", "--json", "--no-trace", "--steps", "2",
                        "--set", "numerics.evaluate=false", "--seed", f[0], NULL), ==, 0);
    json_object *o = json_tokener_parse(o2);
    g_assert_nonnull(o);
    g_assert_cmpfloat(g_ascii_strtod(f[loss], NULL), ==,
                      json_object_get_double(json_object_object_get(o, "loss_last")));
    json_object_put(o);
  }
  scratch_clear(dir);
}

/* compare: the rows, and B / A of the step times equal to the ratio of two
 * direct runs. */
static void test_compare(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "compare", EXP, "--set", "numerics.enabled=false",
                      "--set-b", "topology=tpu-v3-32", "--json", NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *a = json_object_object_get(o, "a"), *b = json_object_object_get(o, "b"),
              *ratio = json_object_object_get(o, "ratio"),
              *diff = json_object_object_get(o, "diff");
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  double sa = json_object_get_double(json_object_object_get(a, "step_time_s"));
  double sb = json_object_get_double(json_object_object_get(b, "step_time_s"));
  double run_a = run_step_time("256", "tpu-v3-8"), run_b = run_step_time("256", "tpu-v3-32");
  g_assert_cmpfloat(sa, ==, run_a);
  g_assert_cmpfloat(sb, ==, run_b);
  g_assert_cmpfloat(run_a, !=, run_b);
  double r = json_object_get_double(json_object_object_get(ratio, "step_time_s"));
  g_assert_cmpfloat(r, ==, run_b / run_a);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(diff, "step_time_s")), ==,
                    run_b - run_a);
  json_object *rb = json_object_object_get(ratio, "breakdown");
  g_assert_nonnull(json_object_object_get(rb, "collective"));
  g_assert_true(json_object_object_get_ex(rb, "pipeline_bubble", NULL));
  g_assert_null(json_object_object_get(rb, "pipeline_bubble")); /* 0 / 0 */
  g_assert_cmpint(json_object_get_int(json_object_object_get(b, "devices")), ==, 32);
  json_object_put(o);

  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "compare", EXP, "--set", "numerics.enabled=false",
                      "--set-b", "topology=tpu-v3-32", NULL), ==, 0);
  const char *rows[] = {"step time (us)", "  compute", "  collective", "  infeed_stall",
                        "  pipeline_bubble", "  host", "  other", "examples/s",
                        "MXU utilization (%)", "HBM peak (MiB)"};
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++)
    g_assert_nonnull(strstr(out, rows[i]));
  g_assert_nonnull(strstr(out, "--set-b topology=tpu-v3-32"));
  const char *line = strstr(out, "step time (us)");
  g_auto(GStrv) cells = g_strsplit_set(line + strlen("step time (us)"), " \n", -1);
  GPtrArray *nums = g_ptr_array_new();
  for (guint i = 0; cells[i] && nums->len < 4; i++)
    if (*cells[i])
      g_ptr_array_add(nums, cells[i]);
  g_assert_cmpuint(nums->len, ==, 4);
  g_autofree char *want_ratio = g_strdup_printf("%.4f", run_b / run_a);
  g_autofree char *want_a = g_strdup_printf("%.3f", run_a * 1e6);
  g_assert_cmpstr(nums->pdata[0], ==, want_a);
  g_assert_cmpstr(nums->pdata[3], ==, want_ratio);
  g_ptr_array_free(nums, TRUE);

  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "compare", EXP, "--set-b", "global_batch=100", NULL), ==, 2);
  g_assert_true(g_str_has_prefix(err, "podsim: compare: B: "));
  g_assert_nonnull(strstr(err, "global_batch: 100 is not divisible"));
  g_assert_cmpstr(out, ==, "");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = podsim_init();
  g_test_add_func("/sweep/grid-matches-runs", test_grid_matches_runs);
  g_test_add_func("/sweep/jobs-equal", test_jobs_equal);
  g_test_add_func("/sweep/failed-point", test_failed_point);
  g_test_add_func("/sweep/usage-errors", test_usage_errors);
  g_test_add_func("/sweep/resume", test_resume);
  g_test_add_func("/sweep/ranges", test_ranges);
  g_test_add_func("/sweep/jsonl", test_jsonl);
  g_test_add_func("/sweep/numerics-shared-data", test_numerics_shared_data);
  g_test_add_func("/compare/ratio", test_compare);
  return g_test_run();
}

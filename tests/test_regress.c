/* test_regress.c: `podsim regress` and the MPI sweep, through the binary
 * named by $PODSIM (set by `make test`), on temporary copies of the first
 * cases of tests/golden/step-times.txt: the copy passes; with one case's step time
 * moved by 1% it exits 1 naming that case with old, new and diff;
 * --update rewrites it (by a rename: no file left beside it) and it passes
 * again; a case that cannot run exits 1 and --update then leaves the file
 * alone; a malformed file exits 2 naming the file and line.  Then, when
 * podsim was built with MPI (`make MPI=1 test`) and mpirun is there, a
 * small timing-only sweep on two ranks against the same sweep in one
 * process, fresh and resumed; otherwise that test is skipped and says why. */
#include "support/cli.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXP "tests/data/good/experiments/mlp-what-if.json"

static const char *podsim;

static guint scratch_files(const char *dir)
{
  guint n = 0;
  GDir *d = g_dir_open(dir, 0, NULL);
  for (const char *name; d && (name = g_dir_read_name(d));)
    n++;
  if (d)
    g_dir_close(d);
  return n;
}

static gboolean is_case(const char *line)
{
  return *line && *line != '#';
}

/* The project's golden file, its comments and its first GOLDEN_CASES
 * cases: enough for regress's mechanics, which these tests hold; every
 * case is held to its prediction by test_golden.  (transfer full) */
#define GOLDEN_CASES 8
static char *golden_text(void)
{
  g_autofree char *path =
      g_build_filename(g_getenv("PODSIM_DATA_DIR"), "tests", "golden", "step-times.txt", NULL);
  g_autofree char *all = slurp(path);
  g_auto(GStrv) lines = g_strsplit(all, "\n", -1);
  GString *out = g_string_new(NULL);
  guint cases = 0;
  for (char **l = lines; *l; l++) {
    if (is_case(*l) && ++cases > GOLDEN_CASES)
      continue;
    if (**l)
      g_string_append_printf(out, "%s\n", *l);
  }
  return g_string_free(out, FALSE);
}

static guint count_cases(const char *text)
{
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  guint n = 0;
  for (char **l = lines; *l; l++)
    n += is_case(*l);
  return n;
}

/* The number after "key " in text, which must be there. */
static double number_after(const char *text, const char *key)
{
  const char *p = strstr(text, key);
  g_assert_nonnull(p);
  return g_ascii_strtod(p + strlen(key), NULL);
}

static void test_pass(void)
{
  char *dir = scratch_dir("podsim-regress");
  g_autofree char *file = g_build_filename(dir, "golden.txt", NULL);
  g_autofree char *text = golden_text();
  spew(file, text);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 0);
  guint n = count_cases(text);
  g_assert_cmpuint(n, >=, 5);
  g_autofree char *want = g_strdup_printf("regress: %s: %u cases run, 0 moved, %u within "
                                          "tolerance", file, n, n);
  g_assert_nonnull(strstr(out, want));
  g_assert_null(strstr(out, "moved:"));
  g_assert_cmpstr(err, ==, "");

  /* --json: every case, none moved */
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--json", "--file", file, NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *cases = json_object_object_get(o, "cases");
  g_assert_cmpuint(json_object_array_length(cases), ==, n);
  for (guint i = 0; i < n; i++) {
    json_object *c = json_object_array_get_idx(cases, i);
    g_assert_false(json_object_get_boolean(json_object_object_get(c, "moved")));
    double old = json_object_get_double(json_object_object_get(c, "old_s"));
    double now = json_object_get_double(json_object_object_get(c, "new_s"));
    g_assert_cmpfloat(fabs(now - old), <=, 1e-5 * old);
  }
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "run")), ==, (int)n);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "moved")), ==, 0);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "within")), ==, (int)n);
  json_object_put(o);
  scratch_clear(dir);
}

/* One case's step time moved by 1%: exit 1, that case named with old, new
 * and diff; --update puts the prediction back and regress passes again. */
static void test_moved_then_update(void)
{
  char *dir = scratch_dir("podsim-regress");
  g_autofree char *file = g_build_filename(dir, "golden.txt", NULL);
  g_autofree char *orig = golden_text();
  g_auto(GStrv) lines = g_strsplit(orig, "\n", -1);
  guint which = 0, seen = 0, n = count_cases(orig);
  for (guint i = 0; lines[i] && !which; i++)
    if (is_case(lines[i]) && ++seen == 3)
      which = i;
  g_assert_cmpuint(which, >, 0);
  char *tab = strchr(lines[which], '\t');
  g_assert_nonnull(tab);
  g_autofree char *args = g_strndup(lines[which], (gsize)(tab - lines[which]));
  double golden = g_ascii_strtod(tab + 1, NULL);
  char moved[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(moved, sizeof moved, "%.6g", golden * 1.01);
  g_autofree char *edited_line = g_strdup_printf("%s\t%s", args, moved);
  g_free(lines[which]);
  lines[which] = g_strdup(edited_line);
  g_autofree char *edited = g_strjoinv("\n", lines);
  spew(file, edited);

  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 1);
  g_test_message("%s", out);
  g_autofree char *named = g_strdup_printf("moved: %s (line %u): old %s s, new ", args,
                                           which + 1, moved);
  const char *row = strstr(out, named);
  g_assert_nonnull(row);
  g_autofree char *row_line = g_strndup(row, (gsize)(strchr(row, '\n') - row));
  double now = number_after(row_line, ", new ");
  double diff = number_after(row_line, ", diff ");
  g_assert_cmpfloat(fabs(now - golden), <=, 1e-5 * golden);
  g_assert_cmpfloat(fabs(diff - (now - g_ascii_strtod(moved, NULL))), <=, 1e-5 * golden);
  g_assert_nonnull(strstr(row_line, "(-0.99"));
  g_assert_true(strstr(row_line + 1, "moved:") == NULL && strstr(out, "moved:") == row);
  g_assert_null(strstr(row + strlen(row_line), "moved:"));
  g_autofree char *summary =
      g_strdup_printf("%u cases run, 1 moved, %u within tolerance", n, n - 1);
  g_assert_nonnull(strstr(out, summary));

  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--update", "--file", file, NULL), ==, 0);
  g_test_message("%s", out);
  g_autofree char *updated = g_strdup_printf("updated: %s (line %u): old %s s, new ", args,
                                             which + 1, moved);
  g_assert_nonnull(strstr(out, updated));
  g_assert_nonnull(strstr(out, "; rewrote "));
  g_assert_cmpuint(scratch_files(dir), ==, 1); /* the temporary file was renamed */
  g_autofree char *after = slurp(file);
  g_auto(GStrv) after_lines = g_strsplit(after, "\n", -1);
  g_assert_cmpuint(g_strv_length(after_lines), ==, g_strv_length(lines));
  for (guint i = 0; after_lines[i]; i++) {
    if (!is_case(lines[i])) { /* comments and blank lines stay as they were */
      g_assert_cmpstr(after_lines[i], ==, lines[i]);
      continue;
    }
    const char *t = strchr(after_lines[i], '\t');
    g_assert_nonnull(t);
    g_assert_cmpint(strncmp(after_lines[i], lines[i], (size_t)(t - after_lines[i]) + 1), ==,
                    0);
  }
  double restored = g_ascii_strtod(strchr(after_lines[which], '\t') + 1, NULL);
  g_assert_cmpfloat(fabs(restored - golden), <=, 1e-5 * golden);

  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 0);
  g_assert_nonnull(strstr(out, " 0 moved, "));
  /* --update with nothing to change leaves the file alone */
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--update", "--file", file, NULL), ==, 0);
  g_assert_nonnull(strstr(out, "already up to date"));
  scratch_clear(dir);
}

/* A case that cannot run is a failure, and --update then writes nothing. */
static void test_case_fails(void)
{
  char *dir = scratch_dir("podsim-regress");
  g_autofree char *file = g_build_filename(dir, "golden.txt", NULL);
  const char *text = "# one case that cannot load\n"
                     "no-such-experiment --set steps=2\t0.1\n";
  spew(file, text);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 1);
  g_assert_nonnull(strstr(out, "failed: no-such-experiment --set steps=2 (line 2): "));
  g_assert_nonnull(strstr(out, "1 case run, 0 moved, 0 within tolerance, 1 failed"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--update", "--file", file, NULL), ==, 1);
  g_assert_nonnull(strstr(err, "left as it was"));
  g_autofree char *after = slurp(file);
  g_assert_cmpstr(after, ==, text);
  scratch_clear(dir);
}

/* A malformed golden file: exit 2, "podsim: regress: FILE:LINE: ...", no
 * case run. */
static void test_malformed(void)
{
  static const struct {
    const char *text;
    guint line;
    const char *says;
  } bad[] = {
      {"# header\n\nresnet50-v3-8 0.0708068\n", 3, "no tab before the step time"},
      {"# header\nresnet50-v3-8\t0.07x\n", 2, "'0.07x' is not a step time"},
      {"resnet50-v3-8\t-1\n", 1, "'-1' is not a step time"},
      {"# h\nresnet50-v3-8\t0.07\nresnet50-v3-8 --sett a=b\t0.07\n", 3, "cannot read '--sett'"},
      {"resnet50-v3-8 --set\t0.07\n", 1, "cannot read '--set'"},
      {"\t0.07\n", 1, "does not start with an EXPERIMENT"},
      {"resnet50-v3-8\t0.07\n# again\nresnet50-v3-8\t0.07\n", 3, "the case of line 1 again"},
  };
  char *dir = scratch_dir("podsim-regress");
  g_autofree char *file = g_build_filename(dir, "golden.txt", NULL);
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    spew(file, bad[i].text);
    g_autofree char *out = NULL, *err = NULL;
    g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 2);
    g_autofree char *where = g_strdup_printf("podsim: regress: %s:%u: ", file, bad[i].line);
    g_assert_true(g_str_has_prefix(err, where));
    g_assert_nonnull(strstr(err, bad[i].says));
    g_assert_cmpstr(out, ==, "");
  }
  spew(file, "# only comments\n\n");
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", file, NULL), ==, 2);
  g_assert_nonnull(strstr(err, "no golden case"));
  g_free(out);
  g_free(err);
  g_autofree char *missing = g_build_filename(dir, "missing.txt", NULL);
  g_assert_cmpint(podsim_run(&out, &err, "regress", "--file", missing, NULL), ==, 2);
  g_assert_nonnull(strstr(err, "cannot read the golden file"));
  scratch_clear(dir);
}

/* ---- the MPI sweep ---------------------------------------------------- */

static gint by_text(gconstpointer a, gconstpointer b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The non-empty lines of text, sorted.  (transfer full) */
static char **sorted_lines(const char *text)
{
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  GPtrArray *keep = g_ptr_array_new();
  for (char **l = lines; *l; l++)
    if (**l)
      g_ptr_array_add(keep, g_strdup(*l));
  g_ptr_array_sort(keep, by_text);
  g_ptr_array_add(keep, NULL);
  return (char **)g_ptr_array_free(keep, FALSE);
}

static void assert_same_rows(const char *a_path, const char *b_path)
{
  g_autofree char *a = slurp(a_path), *b = slurp(b_path);
  g_auto(GStrv) sa = sorted_lines(a);
  g_auto(GStrv) sb = sorted_lines(b);
  g_assert_cmpuint(g_strv_length(sa), ==, g_strv_length(sb));
  for (guint i = 0; sa[i]; i++)
    g_assert_cmpstr(sa[i], ==, sb[i]);
}

/* mpirun [--allow-run-as-root] --oversubscribe -np 2 podsim sweep ... */
static int mpi_sweep(const char *mpirun, const char *out_path, char **out, char **err)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)mpirun);
  if (getuid() == 0)
    g_ptr_array_add(argv, "--allow-run-as-root");
  const char *rest[] = {"--oversubscribe", "-np", "2", podsim, "sweep", EXP,
                        "--set", "numerics.enabled=false",
                        "--vary", "global_batch=64,100,128,256",
                        "--vary", "topology=tpu-v3-8,tpu-v3-32",
                        "--out", out_path, NULL};
  for (guint i = 0; rest[i]; i++)
    g_ptr_array_add(argv, (gpointer)rest[i]);
  g_ptr_array_add(argv, NULL);
  int status = podsim_spawn((const char *const *)argv->pdata, out, err);
  g_ptr_array_free(argv, TRUE);
  return status;
}

/* Two ranks write the rows one process writes (global_batch=100 fails on
 * every topology: error rows, exit 1 both ways), and resume a file cut to
 * its header and two rows. */
static void test_mpi_sweep(void)
{
  g_autofree char *help = NULL, *herr = NULL;
  g_assert_cmpint(podsim_run(&help, &herr, "sweep", "--help", NULL), ==, 0);
  if (!strstr(help, "built with MPI")) {
    g_test_skip("podsim was built without MPI: `make MPI=1 test` builds it with OpenMPI and "
                "runs this test");
    return;
  }
  g_autofree char *mpirun = g_find_program_in_path("mpirun");
  if (!mpirun) {
    g_test_skip("podsim was built with MPI but mpirun is not on PATH (apt-get install "
                "openmpi-bin)");
    return;
  }
  char *dir = scratch_dir("podsim-regress");
  g_autofree char *one = g_build_filename(dir, "one.csv", NULL);
  g_autofree char *two = g_build_filename(dir, "two.csv", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", EXP, "--set", "numerics.enabled=false", "--vary",
                      "global_batch=64,100,128,256", "--vary", "topology=tpu-v3-8,tpu-v3-32",
                      "--out", one, NULL), ==, 1);
  g_free(out);
  g_free(err);
  g_assert_cmpint(mpi_sweep(mpirun, two, &out, &err), ==, 1);
  g_test_message("%s", err);
  g_assert_nonnull(strstr(err, "8 to run on 2 ranks"));
  g_assert_nonnull(strstr(err, "points run by rank 0..1:"));
  assert_same_rows(one, two);

  /* resume: the header and two rows left; rank 0 runs none of those again */
  g_autofree char *text = slurp(two);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 10);
  g_autofree char *cut = g_strdup_printf("%s\n%s\n%s\n", lines[0], lines[3], lines[6]);
  spew(two, cut);
  g_free(out);
  g_free(err);
  g_assert_cmpint(mpi_sweep(mpirun, two, &out, &err), ==, 1);
  g_assert_nonnull(strstr(err, "8 points, 2 already in"));
  g_assert_nonnull(strstr(err, "6 to run on 2 ranks"));
  assert_same_rows(one, two);
  scratch_clear(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = podsim_init();
  g_test_add_func("/regress/pass", test_pass);
  g_test_add_func("/regress/moved-then-update", test_moved_then_update);
  g_test_add_func("/regress/case-fails", test_case_fails);
  g_test_add_func("/regress/malformed", test_malformed);
  g_test_add_func("/sweep/mpi", test_mpi_sweep);
  return g_test_run();
}

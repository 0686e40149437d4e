/* test_cli.c: the podsim command line as a user meets it (the binary named
 * by $PODSIM, set by `make test`): exit statuses, --json output that parses
 * and keeps the contract's keys, describe output that reloads as an
 * experiment, and a failed run that leaves no trace file behind. */
#include <glib.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

static const char *podsim;

/* Runs podsim with args; returns its exit status, stdout and stderr. */
static int run(char **out, char **err, ...)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim);
  va_list ap;
  va_start(ap, err);
  for (const char *a; (a = va_arg(ap, const char *));)
    g_ptr_array_add(argv, (gpointer)a);
  va_end(ap);
  g_ptr_array_add(argv, NULL);
  int status = -1;
  GError *error = NULL;
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_assert_true(g_spawn_sync(dir, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, out,
                             err, &status, &error));
  g_assert_no_error(error);
  g_ptr_array_free(argv, TRUE);
  return g_spawn_check_wait_status(status, NULL) ? 0 : WEXITSTATUS(status);
}

static void test_version_and_help(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run(&out, &err, "--version", NULL), ==, 0);
  g_assert_true(g_str_has_prefix(out, "podsim "));
  g_free(out);
  g_free(err);
  g_assert_cmpint(run(&out, &err, "--help", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "run EXPERIMENT"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(run(&out, &err, "run", "--help", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "--set"));
}

static void test_usage_errors(void)
{
  struct {
    const char *a, *b, *c;
    const char *msg;
  } cases[] = {
      {"frobnicate", NULL, NULL, "unknown command 'frobnicate'"},
      {"run", NULL, NULL, "run needs exactly one EXPERIMENT"},
      {"run", "no-such-experiment", NULL, "no-such-experiment"},
      {"run", "default", "--bogus", "Unknown option --bogus"},
      {"list", "planets", NULL, "unknown kind 'planets'"},
      {"describe", "nothing-by-this-name", NULL, "nothing-by-this-name"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *out = NULL, *err = NULL;
    int st = run(&out, &err, cases[i].a, cases[i].b, cases[i].c, NULL);
    g_test_message("%s %s: %d: %s", cases[i].a, cases[i].b ? cases[i].b : "", st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_nonnull(strstr(err, cases[i].msg));
    g_assert_true(g_str_has_prefix(err, "podsim: "));
  }
}

static void test_list(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run(&out, &err, "list", "topologies", NULL), ==, 0);
  g_auto(GStrv) names = g_strsplit(out, "\n", -1);
  const char *want[] = {"tpu-v2-8", "tpu-v3-8", "tpu-v3-2048", "tpu-v4-8", "tpu-v4-8192"};
  for (guint i = 0; i < G_N_ELEMENTS(want); i++)
    g_assert_true(g_strv_contains((const char *const *)names, want[i]));
}

static void test_json_summary(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run(&out, &err, "run", "default", "--json", "--no-trace", "--steps", "20",
                      "--set", "numerics.evaluate=false", NULL),
                  ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  /* the keys DESIGN.md promises, never renamed */
  const char *keys[] = {"step_time_s", "breakdown", "examples_per_s", "mxu_utilization",
                        "hbm_peak_bytes", "loss_first", "loss_last", "events", "wall_s",
                        "events_per_s"};
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++)
    g_assert_true(json_object_object_get_ex(o, keys[i], NULL));
  json_object *b = json_object_object_get(o, "breakdown");
  double sum = 0;
  const char *cats[] = {"compute", "collective", "infeed_stall", "pipeline_bubble", "host",
                        "other"};
  for (guint i = 0; i < G_N_ELEMENTS(cats); i++) {
    json_object *v = NULL;
    g_assert_true(json_object_object_get_ex(b, cats[i], &v));
    sum += json_object_get_double(v);
  }
  double st = json_object_get_double(json_object_object_get(o, "step_time_s"));
  g_assert_cmpfloat(st, >, 0);
  g_assert_cmpfloat(fabs(sum - st), <, 1e-9 * st);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "steps")), ==, 20);
  json_object_put(o);
}

/* `describe experiment` prints the resolved config; saved to a file it
 * loads again and gives the same resolved config. */
static void test_describe_roundtrip(void)
{
  g_autofree char *out = NULL, *err = NULL, *out2 = NULL, *err2 = NULL;
  g_assert_cmpint(run(&out, &err, "describe", "experiment", "default", "--set",
                      "global_batch=128", NULL),
                  ==, 0);
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "resolved.json", NULL);
  g_assert_true(g_file_set_contents(path, out, -1, NULL));
  g_assert_cmpint(run(&out2, &err2, "describe", "experiment", path, NULL), ==, 0);
  json_object *a = json_tokener_parse(out), *b = json_tokener_parse(out2);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  g_assert_cmpint(json_object_get_int(json_object_object_get(a, "global_batch")), ==, 128);
  g_assert_true(json_object_equal(a, b));
  json_object_put(a);
  json_object_put(b);
  g_unlink(path);
  g_rmdir(dir);
}

/* A trace that cannot be written fails the run with exit 2 and leaves
 * nothing; a run that fails later (bad data directory) leaves no trace. */
static void test_trace_failures(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *bad = g_build_filename(dir, "missing", "t.json", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run(&out, &err, "run", "default", "--steps", "2", "--trace", bad, NULL), ==, 2);
  g_assert_nonnull(strstr(err, bad));
  g_free(out);
  g_free(err);
  g_autofree char *t = g_build_filename(dir, "t.json", NULL);
  g_assert_cmpint(run(&out, &err, "run", "default", "--steps", "2", "--trace", t, "--set",
                      "input.data_dir=/nonexistent", NULL),
                  ==, 2);
  g_assert_nonnull(strstr(err, "/nonexistent"));
  g_assert_false(g_file_test(t, G_FILE_TEST_EXISTS));
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_null(g_dir_read_name(d)); /* no temporary left either */
  g_dir_close(d);
  g_rmdir(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = g_getenv("PODSIM");
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  if (!podsim) {
    g_test_message("PODSIM is not set: `make test` sets it to the built binary");
    podsim = "./podsim";
  }
  g_test_add_func("/cli/version-and-help", test_version_and_help);
  g_test_add_func("/cli/usage-errors", test_usage_errors);
  g_test_add_func("/cli/list", test_list);
  g_test_add_func("/cli/json-summary", test_json_summary);
  g_test_add_func("/cli/describe-roundtrip", test_describe_roundtrip);
  g_test_add_func("/cli/trace-failures", test_trace_failures);
  return g_test_run();
}

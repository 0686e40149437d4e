/* test_api.c: the strings-in, strings-out API (run/api.h) against the
 * library it wraps: ps_api_run_json is ps_summary_to_json of the same run
 * (a run is deterministic, so every field but the wall-clock ones agrees),
 * an unknown key fails as bad input with the suggestion of the key meant,
 * and ps_api_describe shows what the loaders load.  The default experiment
 * with numerics off and a few steps: a fraction of a second. */
#include "model/layers.h"
#include "run/api.h"
#include "run/experiment.h"
#include "run/run.h"

#include <json-c/json.h>
#include <string.h>

static const char *const fast[] = {"numerics.enabled=false", "steps=20", "global_batch=128"};

/* o without the fields that measure the machine (wall_s, events_per_s). */
static json_object *without_wall(json_object *o)
{
  json_object_object_del(o, "wall_s");
  json_object_object_del(o, "events_per_s");
  return o;
}

static void test_run_json(void)
{
  GError *error = NULL;
  char *text = ps_api_run_json("default", fast, G_N_ELEMENTS(fast), &error);
  g_assert_no_error(error);
  g_assert_nonnull(text);

  const char *ov[] = {fast[0], fast[1], fast[2], NULL};
  PsExperiment *exp = ps_experiment_load("default", ov, &error);
  g_assert_no_error(error);
  PsRunOptions opt = {0};
  PsSummary sum;
  g_assert_true(ps_run(exp, &opt, &sum, &error));
  g_autofree char *direct = ps_summary_to_json(exp, &sum);
  ps_summary_clear(&sum);
  ps_experiment_free(exp);

  json_object *a = without_wall(json_tokener_parse(text));
  json_object *b = without_wall(json_tokener_parse(direct));
  g_assert_true(json_object_equal(a, b));
  g_assert_cmpint(json_object_get_int(json_object_object_get(a, "global_batch")), ==, 128);
  json_object_put(a);
  json_object_put(b);
  ps_api_free(text);
}

static void test_unknown_key(void)
{
  const char *const sets[] = {"numerics.enabled=false", "chip.peak_flops=1e12"};
  GError *error = NULL;
  g_assert_null(ps_api_run_json("default", sets, 2, &error));
  g_assert_nonnull(error);
  g_assert_cmpint(ps_api_error_status(error), ==, 2);
  g_assert_cmpint(ps_api_error_code(error), ==, PS_INPUT_ERROR_KEY);
  g_assert_true(g_str_has_suffix(ps_api_error_message(error),
                                 "unknown key 'chip' (expected one of: name, description, "
                                 "topology, model, global_batch, steps, epochs, steps_per_run, "
                                 "log_every, fuse_elementwise, fusion, attention_kernel, "
                                 "attention_blocks, strategy, input, optimizer, numerics, "
                                 "outside_compilation, collective, faults); "
                                 "did you mean --set topology.chip.peak_flops=1e12?"));
  ps_api_error_free(error);

  /* an experiment that is not there: bad input, no suggestion */
  error = NULL;
  g_assert_null(ps_api_run_json("no-such-experiment", NULL, 0, &error));
  g_assert_cmpint(ps_api_error_status(error), ==, 2);
  g_assert_cmpint(ps_api_error_code(error), ==, PS_INPUT_ERROR_FILE);
  g_assert_null(strstr(ps_api_error_message(error), "did you mean"));
  ps_api_error_free(error);
}

static void test_describe(void)
{
  GError *error = NULL;
  /* a topology's keys with and without the topology. prefix */
  const char *const with[] = {"topology.ici.bandwidth_Bps=1e9"};
  const char *const bare[] = {"ici.bandwidth_Bps=1e9"};
  char *t1 = ps_api_describe("topology", "tpu-v3-8", with, 1, &error);
  g_assert_no_error(error);
  char *t2 = ps_api_describe("topology", "tpu-v3-8", bare, 1, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(t1, ==, t2);
  json_object *tree = json_tokener_parse(t1), *ici = NULL, *bw = NULL;
  g_assert_true(json_object_object_get_ex(tree, "ici", &ici));
  g_assert_true(json_object_object_get_ex(ici, "bandwidth_Bps", &bw));
  g_assert_cmpfloat(json_object_get_double(bw), ==, 1e9);
  json_object_put(tree);
  ps_api_free(t1);
  ps_api_free(t2);

  /* a model: the table ps_model_describe writes */
  char *m = ps_api_describe("model", "cnn", NULL, 0, &error);
  g_assert_no_error(error);
  g_autofree char *path = ps_config_find("models", "cnn", &error);
  PsModel *model = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  GString *s = g_string_new(NULL);
  ps_model_describe(model, s);
  g_assert_cmpstr(m, ==, s->str);
  g_string_free(s, TRUE);
  ps_model_free(model);
  ps_api_free(m);

  /* an experiment: its resolved tree, with the override in it */
  char *e = ps_api_describe("experiment", "default", fast, G_N_ELEMENTS(fast), &error);
  g_assert_no_error(error);
  tree = json_tokener_parse(e);
  g_assert_cmpint(json_object_get_int(json_object_object_get(tree, "global_batch")), ==, 128);
  json_object_put(tree);
  ps_api_free(e);

  g_assert_null(ps_api_describe("widget", "cnn", NULL, 0, &error));
  g_assert_cmpint(ps_api_error_status(error), ==, 2);
  ps_api_error_free(error);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/api/run-json", test_run_json);
  g_test_add_func("/api/unknown-key", test_unknown_key);
  g_test_add_func("/api/describe", test_describe);
  return g_test_run();
}

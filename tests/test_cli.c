/* test_cli.c: the podsim command line as a user meets it (the binary named
 * by $PODSIM, set by `make test`): exit statuses, --json output that parses
 * and keeps the contract's keys, describe output that reloads as an
 * experiment, a failed run that leaves no trace file behind, the run's
 * header line (the slice, devices and replicas after --set), the
 * warning for a run that leaves devices idle, and --set hints that work
 * when pasted into `run` (an unknown key's error names the nearest valid
 * one, prefix included), and a summary that says what its lines hold (the
 * warm-up left out or not, steps_per_run, a host loop over 10% of the
 * step, one step's loss, numerics off for fast what-ifs), and describe
 * --kernels' MXU use of a convolution against its padding's closed form. */
#include "support/cli.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <string.h>

static const char *podsim;

static void test_version_and_help(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "--version", NULL), ==, 0);
  g_assert_true(g_str_has_prefix(out, "podsim "));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "--help", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "run EXPERIMENT"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "run", "--help", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "--set"));
}

static void test_usage_errors(void)
{
  struct {
    const char *a, *b, *c, *d, *e;
    const char *msg;
  } cases[] = {
      {"frobnicate", NULL, NULL, NULL, NULL, "unknown command 'frobnicate'"},
      {"run", NULL, NULL, NULL, NULL, "run needs exactly one EXPERIMENT"},
      {"run", "no-such-experiment", NULL, NULL, NULL, "no-such-experiment"},
      {"run", "default", "--bogus", NULL, NULL, "Unknown option --bogus"},
      {"run", "default", "--steps=0", NULL, NULL, "--steps must be at least 1, got 0"},
      {"run", "default", "--steps=-3", NULL, NULL, "--steps must be at least 1"},
      {"run", "default", "--trace=", NULL, NULL, "--trace needs a file name (or use --no-trace)"},
      {"list", "planets", NULL, NULL, NULL, "unknown kind 'planets'"},
      {"list", "experiments", "extra", NULL, NULL, "list: one KIND, got 2 words"},
      {"describe", "nothing-by-this-name", NULL, NULL, NULL, "nothing-by-this-name"},
      /* a value that opens JSON must be JSON, not a string by accident */
      {"run", "default", "--set", "strategy={\"kind\":", NULL,
       "--set strategy: the value opens a JSON object but is not valid JSON"},
      /* a bad --device prints no config first */
      {"describe", "default", "--program", "--device", "99", "--device 99: the plan has devices"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *out = NULL, *err = NULL;
    int st = podsim_run(&out, &err, cases[i].a, cases[i].b, cases[i].c, cases[i].d, cases[i].e,
                        NULL);
    g_test_message("%s %s: %d: %s", cases[i].a, cases[i].b ? cases[i].b : "", st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_nonnull(strstr(err, cases[i].msg));
    g_assert_true(g_str_has_prefix(err, "podsim: "));
    g_assert_cmpstr(out, ==, "");
  }
}

/* Durations and rates the picosecond clock cannot hold: exit 2 with a
 * message, never an assertion or a saturated answer. */
static void test_clock_overflow(void)
{
  const char *sets[] = {"topology.ici.latency_s=1e10", "topology.chip.peak_flops=1e-300",
                        "input.host_cost_per_example_s=1e300"};
  for (guint i = 0; i < G_N_ELEMENTS(sets); i++) {
    g_autofree char *out = NULL, *err = NULL;
    int st = podsim_run(&out, &err, "run", "resnet50-v3-8", "--no-trace", "--steps=2", "--set",
                 sets[i], NULL);
    g_test_message("%s: %d: %s", sets[i], st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_nonnull(strstr(err, "experiments/resnet50-v3-8.json: the simulated time would "
                                 "pass 2^63 ps"));
    g_assert_null(strstr(out, "step time"));
  }
}

static void test_list(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "list", "topologies", NULL), ==, 0);
  g_auto(GStrv) names = g_strsplit(out, "\n", -1);
  const char *want[] = {"tpu-v2-8", "tpu-v3-8", "tpu-v3-2048", "tpu-v4-8", "tpu-v4-8192"};
  for (guint i = 0; i < G_N_ELEMENTS(want); i++)
    g_assert_true(g_strv_contains((const char *const *)names, want[i]));
  /* counting order, one heading per generation naming its base file, a
   * blank line before each but the first, and the bases never among the
   * slices */
  const char *lines[] = {"# TPU v2: the slices of tpu-v2 (the generation's base file)",
                         "tpu-v2-8", "tpu-v2-32", "tpu-v2-128", "tpu-v2-256", "tpu-v2-512", "",
                         "# TPU v3: the slices of tpu-v3 (the generation's base file)",
                         "tpu-v3-8"};
  for (guint i = 0; i < G_N_ELEMENTS(lines); i++)
    g_assert_cmpstr(names[i], ==, lines[i]);
  const char *bases[] = {"tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"};
  for (guint i = 0; i < G_N_ELEMENTS(bases); i++)
    g_assert_false(g_strv_contains((const char *const *)names, bases[i]));
  int headings = 0;
  for (guint i = 0; names[i]; i++) {
    headings += names[i][0] == '#';
    if (names[i][0] == '#' && i > 0)
      g_assert_cmpstr(names[i - 1], ==, "");
  }
  g_assert_cmpint(headings, ==, G_N_ELEMENTS(bases));
}

/* A topology directory of one's own: a file that extends nothing and has
 * no slices is listed under "# other topologies", after the generations. */
static void test_list_other(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-list-XXXXXX", NULL);
  g_autofree char *topo = g_build_filename(dir, "topologies", NULL);
  g_assert_cmpint(g_mkdir(topo, 0755), ==, 0);
  g_autofree char *file = g_build_filename(topo, "my-ring.json", NULL);
  g_assert_true(g_file_set_contents(file, "{\"name\": \"my-ring\"}", -1, NULL));
  g_autofree char *out = NULL, *err = NULL;
  g_autofree char *saved = g_strdup(g_getenv("PODSIM_DATA_DIR"));
  g_setenv("PODSIM_DATA_DIR", dir, TRUE);
  int st = podsim_run(&out, &err, "list", "topologies", NULL);
  if (saved)
    g_setenv("PODSIM_DATA_DIR", saved, TRUE);
  else
    g_unsetenv("PODSIM_DATA_DIR");
  g_assert_cmpint(st, ==, 0);
  g_assert_nonnull(strstr(out, "\n\n# other topologies\nmy-ring\n"));
  g_assert_true(g_str_has_suffix(out, "# other topologies\nmy-ring\n"));
  g_unlink(file);
  g_rmdir(topo);
  g_rmdir(dir);
}

static void test_json_summary(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--json", "--no-trace", "--steps", "3",
                      "--set", "numerics.evaluate=false", NULL),
                  ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  /* the keys the run summary promises, never renamed */
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
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "steps")), ==, 3);
  json_object_put(o);
}

/* `describe experiment` prints the resolved config; saved to a file it
 * loads again and gives the same resolved config: the default experiment,
 * and maxtext-v5e (collective.on_core, and a one-slice topology whose
 * sources cite its data-center network). */
static void describe_roundtrip(const char *name, const char *set)
{
  g_autofree char *out = NULL, *err = NULL, *out2 = NULL, *err2 = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "experiment", name, "--set", set, NULL), ==,
                  0);
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "resolved.json", NULL);
  g_assert_true(g_file_set_contents(path, out, -1, NULL));
  g_assert_cmpint(podsim_run(&out2, &err2, "describe", "experiment", path, NULL), ==, 0);
  json_object *a = json_tokener_parse(out), *b = json_tokener_parse(out2);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  g_assert_true(json_object_equal(a, b));
  json_object_put(a);
  json_object_put(b);
  g_unlink(path);
  g_rmdir(dir);
}

static void test_describe_roundtrip(void)
{
  describe_roundtrip("default", "global_batch=128");
  describe_roundtrip("maxtext-v5e", "global_batch=512");
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "experiment", "maxtext-v5e", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "\"on_core\":[\n      \"reduce-scatter\",\n      \"all-gather\"\n    ]"));
  g_assert_nonnull(strstr(out, "\"dcn\":{"));
}

static char *version(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "--version", NULL), ==, 0);
  g_assert_true(g_str_has_prefix(out, "podsim "));
  return g_strstrip(g_strdup(out + strlen("podsim ")));
}

/* The first line of text.  (transfer full) */
static char *first_line(const char *text)
{
  const char *nl = strchr(text, '\n');
  return nl ? g_strndup(text, (gsize)(nl - text)) : g_strdup(text);
}

static guint count_lines(const char *text)
{
  guint n = 0;
  for (const char *c = text; *c; c++)
    n += *c == '\n';
  return n;
}

static json_object *strategy_of(json_object *resolved)
{
  json_object *so = NULL;
  g_assert_true(json_object_object_get_ex(resolved, "strategy", &so));
  g_assert_true(json_object_is_type(so, json_type_object));
  return so;
}

static int64_t int_member(json_object *o, const char *key)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
    g_error("no integer '%s' in %s", key, json_object_to_json_string(o));
  return json_object_get_int64(v);
}

static gboolean bool_member(json_object *o, const char *key)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_boolean))
    g_error("no boolean '%s' in %s", key, json_object_to_json_string(o));
  return json_object_get_boolean(v);
}

/* strategy.bucket_bytes, overlap and weight_update_sharding: defaults in
 * the resolved config, --set values (with units) in it, and the resolved
 * config reloads to itself. */
static void test_strategy_keys_roundtrip(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "experiment", "resnet50-v3-8", NULL), ==, 0);
  json_object *d = json_tokener_parse(out);
  g_assert_nonnull(d);
  json_object *so = strategy_of(d);
  g_assert_cmpint(int_member(so, "bucket_bytes"), ==, 31457280);
  g_assert_true(bool_member(so, "overlap"));
  g_assert_false(bool_member(so, "weight_update_sharding"));
  json_object_put(d);
  g_free(out);
  g_free(err);

  g_assert_cmpint(podsim_run(&out, &err, "describe", "experiment", "default", "--set",
                      "strategy.bucket_bytes=8MiB", "--set", "strategy.overlap=false", "--set",
                      "strategy.weight_update_sharding=true", NULL),
                  ==, 0);
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "resolved.json", NULL);
  g_assert_true(g_file_set_contents(path, out, -1, NULL));
  g_autofree char *out2 = NULL, *err2 = NULL;
  g_assert_cmpint(podsim_run(&out2, &err2, "describe", "experiment", path, NULL), ==, 0);
  json_object *a = json_tokener_parse(out), *b = json_tokener_parse(out2);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  so = strategy_of(a);
  g_assert_cmpint(int_member(so, "bucket_bytes"), ==, 8 * 1024 * 1024);
  g_assert_false(bool_member(so, "overlap"));
  g_assert_true(bool_member(so, "weight_update_sharding"));
  g_assert_true(json_object_equal(a, b));
  json_object_put(a);
  json_object_put(b);
  g_unlink(path);
  g_rmdir(dir);
}

/* A bad strategy value stops `run` before it starts: exit 2, one message
 * naming the file, the JSON path and the reason, nothing on stdout. */
static void test_bad_strategy_values(void)
{
  struct {
    const char *set[3]; /* --set overrides, NULL after the last */
    const char *msg;
  } cases[] = {
      {{"strategy.bucket_bytes=0"},
       "experiments/default.json: strategy.bucket_bytes: must be > 0, got 0"},
      {{"strategy.bucket_bytes=-25MB"},
       "experiments/default.json: strategy.bucket_bytes: must be > 0, got -25000000"},
      {{"strategy.bucket_bytes=25 furlongs"},
       "experiments/default.json: strategy.bucket_bytes: cannot read '25 furlongs' as a size"},
      {{"strategy.bucket_bytes=[1]"},
       "experiments/default.json: strategy.bucket_bytes: must be an integer, got array"},
      {{"strategy.overlap=\"no\""},
       "experiments/default.json: strategy.overlap: must be true or false, got string"},
      {{"strategy.weight_update_sharding=0"},
       "experiments/default.json: strategy.weight_update_sharding: must be true or false, got "
       "integer"},
      {{"strategy.kind=pipeline", "strategy.stages=3", "strategy.replicas=null"},
       "experiments/default.json: strategy.stages: 3 stages do not divide the 8 devices"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *const *set = cases[i].set;
    g_autofree char *out = NULL, *err = NULL;
    /* the argument list ends at the first NULL */
    int st = podsim_run(&out, &err, "run", "default", "--no-trace", "--set", set[0],
                 set[1] ? "--set" : NULL, set[1], set[2] ? "--set" : NULL, set[2], NULL);
    g_test_message("--set %s: %d: %s", set[0], st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_true(g_str_has_prefix(err, "podsim: "));
    if (!strstr(err, cases[i].msg))
      g_error("--set %s: stderr '%s' lacks '%s'", set[0], err, cases[i].msg);
    g_assert_cmpuint(count_lines(err), ==, 1);
    g_assert_cmpstr(out, ==, "");
  }
}

/* Leaving strategy.replicas out fills whichever slice --set topology
 * picks: the header names that slice and its replicas, no warning. */
static void test_run_header_what_if(void)
{
  g_autofree char *ver = version();
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--set", "topology=tpu-v3-32",
                      "--no-trace", "--steps", "2", NULL),
                  ==, 0);
  g_autofree char *header = first_line(out);
  g_autofree char *want = g_strdup_printf(
      "podsim %s: resnet50-v3-8: model resnet50 on tpu-v3-32 (32 devices: 32 replicas), "
      "global batch 1024, 2 steps, bf16, numerics off",
      ver);
  g_assert_cmpstr(header, ==, want);
  g_assert_null(strstr(err, "warning"));
  g_assert_null(strstr(header, "DVFS")); /* v3 has no power states */
  g_free(out);
  g_free(err);

  /* a chip with DVFS power states names the run's and its clock: the
   * default, p-state 3, or the one --set picks */
  static const struct {
    const char *set, *clock;
  } states[] = {{"topology.chip.p_state=3", ", DVFS p-state 3 (1.9 GHz)"},
                {"topology.chip.p_state=7", ", DVFS p-state 7 (2.2 GHz)"}};
  for (size_t i = 0; i < G_N_ELEMENTS(states); i++) {
    g_assert_cmpint(podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json",
                               "--set", "topology=tpu7x-8", "--set", states[i].set, "--set",
                               "steps_per_run=4", "--no-trace", NULL),
                    ==, 0);
    g_free(header);
    header = first_line(out);
    g_assert_true(g_str_has_suffix(header, states[i].clock));
    g_free(out);
    g_free(err);
  }

  /* the file's own slice; and a v4 slice counts megacore chips */
  g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--no-trace", "--steps", "2", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(out, ": model resnet50 on tpu-v3-8 (8 devices: 8 replicas), "));
  g_assert_null(strstr(err, "warning"));
  g_free(out);
  g_free(err);
  /* (one loop of the 4 steps: the fixture's steps_per_run 1 would warn of
   * the host loop, /cli/idle-warning checks that) */
  g_assert_cmpint(podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json", "--set",
                      "topology=tpu-v4-32", "--set", "steps_per_run=4", "--no-trace", NULL),
                  ==, 0);
  g_free(header);
  header = first_line(out);
  g_assert_nonnull(strstr(header, ": model fixture-mlp on tpu-v4-32 (16 devices: 16 replicas), "
                                  "global batch 256, 4 steps, f32, numerics off"));
  g_assert_null(strstr(err, "warning"));
  g_free(out);
  g_free(err);

  /* a pipeline left to its default: every device, stages named */
  g_assert_cmpint(podsim_run(&out, &err, "describe", "experiment",
                      "tests/data/good/experiments/mlp-what-if.json", "--set",
                      "strategy.kind=pipeline", "--set", "strategy.stages=2", "--set",
                      "topology=tpu-v3-32", NULL),
                  ==, 0);
  json_object *d = json_tokener_parse(out);
  g_assert_nonnull(d);
  g_assert_cmpint(int_member(strategy_of(d), "replicas"), ==, 16);
  json_object_put(d);
}

/* A run that leaves devices idle says so in one line on stderr, with the
 * counts and what to set; --json output stays clean JSON. */
static void test_idle_warning(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--set", "topology=tpu-v3-32", "--set",
                      "strategy.replicas=8", "--no-trace", "--steps", "2", NULL),
                  ==, 0);
  g_test_message("stderr: %s", err);
  g_assert_true(g_str_has_prefix(err, "podsim: warning: "));
  g_assert_cmpuint(count_lines(err), ==, 1);
  g_assert_nonnull(strstr(err, "experiments/resnet50-v3-8.json uses 8 of the 32 devices of "
                               "tpu-v3-32 (24 idle); set strategy.replicas=32 (or leave it "
                               "out) to use them all\n"));
  g_assert_nonnull(strstr(out, " on tpu-v3-32 (8 of 32 devices: 8 replicas), "));
  g_free(out);
  g_free(err);

  g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--set", "topology=tpu-v3-32", "--set",
                      "strategy.replicas=8", "--no-trace", "--steps", "2", "--json", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(err, "uses 8 of the 32 devices of tpu-v3-32 (24 idle)"));
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object_put(o);
  g_free(out);
  g_free(err);

  /* a global batch the full slice cannot split says so too */
  g_assert_cmpint(podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json", "--set",
                      "strategy.replicas=4", "--set", "global_batch=12", "--no-trace", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(err, "uses 4 of the 8 devices of tpu-v3-8 (4 idle); set "
                               "strategy.replicas=8 (or leave it out) and a global_batch "
                               "divisible by 8 to use them all\n"));
  g_free(out);
  g_free(err);

  /* A pipeline names replicas and stages (and, in the header, its
   * micro-batches and schedule). */
  podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json", "--set",
      "strategy.kind=pipeline", "--set", "strategy.stages=2", "--set", "strategy.replicas=1",
      "--no-trace", NULL);
  g_test_message("stderr: %s", err);
  g_assert_true(g_str_has_prefix(err, "podsim: warning: "));
  g_assert_nonnull(strstr(err, "mlp-what-if.json uses 2 of the 8 devices of tpu-v3-8 (1 replica "
                               "x 2 stages, 6 idle); set strategy.replicas=4 (or leave it out) "
                               "with strategy.stages=2 to use them all\n"));
  g_assert_nonnull(strstr(out, " on tpu-v3-8 (2 of 8 devices: 1 replica x 2 stages, 1 "
                               "micro-batch, gpipe), "));
  g_free(out);
  g_free(err);

  /* all devices busy: no idle warning, only the host loop's (the fixture
   * leaves steps_per_run at 1) */
  g_assert_cmpint(podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json", "--set",
                      "topology=tpu-v3-32", "--no-trace", NULL),
                  ==, 0);
  g_assert_cmpstr(err, ==, "podsim: warning: the host loop takes 73% of the step: steps_per_run is "
                           "1, so the host relaunches the device loop every step; raise it (--set "
                           "steps_per_run=N) to pay the relaunch less often\n");
  g_assert_nonnull(strstr(out, " on tpu-v3-32 (32 devices: 32 replicas), "));
}

/* A trace that cannot be written fails the run with exit 2 and leaves
 * nothing; a run that fails later (bad data directory) leaves no trace. */
static void test_trace_failures(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *bad = g_build_filename(dir, "missing", "t.json", NULL);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--steps", "2", "--trace", bad, NULL), ==, 2);
  g_assert_nonnull(strstr(err, bad));
  g_free(out);
  g_free(err);
  g_autofree char *t = g_build_filename(dir, "t.json", NULL);
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--steps", "2", "--trace", t, "--set",
                      "input.data_dir=/nonexistent", NULL),
                  ==, 2);
  g_assert_nonnull(strstr(err, "/nonexistent"));
  g_assert_false(g_file_test(t, G_FILE_TEST_EXISTS));
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_null(g_dir_read_name(d)); /* no temporary left either */
  g_dir_close(d);
  g_rmdir(dir);
}

/* One row of `podsim timeline`: FALSE for a comment or an empty line,
 * else its fields (asserted all there, the stage in [0, stages)). */
static gboolean timeline_row(const char *line, int stages, int *stage, double *start,
                             double *end, int *mb, char kind[16])
{
  if (line[0] == '#' || !line[0])
    return FALSE;
  g_assert_cmpint(sscanf(line, "%d %lf %lf %d %15s", stage, start, end, mb, kind), ==, 5);
  g_assert_cmpint(*stage, >=, 0);
  g_assert_cmpint(*stage, <, stages);
  return TRUE;
}

/* `podsim timeline` reads a pipeline's trace back: one row per compute op
 * of replica 0 in the last step, every stage's forwards and backwards for
 * every micro-batch, in time order per stage; `describe --stages` prints the
 * partition and `--device` picks the program printed. */
static void test_pipeline_timeline(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-cli-XXXXXX", NULL);
  g_autofree char *trace = g_build_filename(dir, "p.json", NULL);
  char *out, *err;
  const char *exp = "tests/data/good/experiments/mlp-what-if.json";
  g_assert_cmpint(podsim_run(&out, &err, "run", exp, "--set", "strategy.kind=pipeline", "--set",
                      "strategy.stages=2", "--set", "strategy.replicas=4", "--set",
                      "strategy.micro_batches=4", "--set", "numerics.enabled=false", "--steps",
                      "3", "--trace", trace, NULL),
                  ==, 0);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "timeline", trace, NULL), ==, 0);
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  int fwd[2] = {0, 0}, bwd[2] = {0, 0}, mb_seen[2] = {0, 0};
  double last_start[2] = {-1, -1};
  for (int i = 0; lines[i]; i++) {
    int stage, mb;
    double start, end;
    char kind[16];
    if (!timeline_row(lines[i], 2, &stage, &start, &end, &mb, kind))
      continue;
    g_assert_cmpfloat(end, >, start);
    g_assert_cmpfloat(start, >=, last_start[stage]); /* sorted by start within a stage */
    last_start[stage] = start;
    mb_seen[stage] |= 1 << mb;
    if (strcmp(kind, "FWD") == 0)
      fwd[stage]++;
    else if (strcmp(kind, "BWD") == 0)
      bwd[stage]++;
  }
  for (int s = 0; s < 2; s++) {
    g_assert_cmpint(mb_seen[s], ==, 0xf); /* micro-batches 0..3 */
    g_assert_cmpint(fwd[s], >=, 4);
    g_assert_cmpint(fwd[s] % 4, ==, 0);
    g_assert_cmpint(bwd[s], ==, fwd[s]);
  }
  g_free(out);
  g_free(err);
  /* a replicated run's trace has no stages: a clear error, exit 2 */
  g_assert_cmpint(podsim_run(&out, &err, "run", exp, "--steps", "2", "--set", "numerics.enabled=false",
                      "--trace", trace, NULL), ==, 0);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "timeline", trace, NULL), ==, 2);
  g_assert_nonnull(strstr(err, "no pipeline stage"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "timeline", "no/such/trace.json", NULL), ==, 2);
  g_assert_nonnull(strstr(err, "no/such/trace.json"));
  g_free(out);
  g_free(err);

  /* stages laid out over a mesh (2 stages x fsdp 4 of a shard plan): one
   * device a stage, so a stage's ops never overlap (all four devices'
   * interleaved did) */
  g_assert_cmpint(podsim_run(&out, &err, "run", "char-decoder-v4-8", "--set",
                             "strategy={\"kind\": \"shard\", \"mesh\": {\"stage\": 2, "
                             "\"fsdp\": 2}, \"micro_batches\": 4}",
                             "--set", "numerics.enabled=false", "--steps", "2", "--trace", trace,
                             NULL), ==, 0);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "timeline", trace, NULL), ==, 0);
  g_auto(GStrv) mesh_lines = g_strsplit(out, "\n", -1);
  double last_end[2] = {-1, -1};
  int rows = 0;
  for (int i = 0; mesh_lines[i]; i++) {
    int stage, mb;
    double start, end;
    char kind[16];
    if (!timeline_row(mesh_lines[i], 2, &stage, &start, &end, &mb, kind))
      continue;
    g_assert_cmpfloat(start, >=, last_end[stage] - 1e-3);
    last_end[stage] = end;
    rows++;
  }
  g_assert_cmpint(rows, >, 0);
  g_free(out);
  g_free(err);

  g_assert_cmpint(podsim_run(&out, &err, "describe", exp, "--set", "strategy.kind=pipeline", "--set",
                      "strategy.stages=2", "--set", "strategy.replicas=4", "--stages",
                      "--program", "--device", "1", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "2 stages of model"));
  g_assert_nonnull(strstr(out, "stage 1 of 2, replica 0 of 4: device 1"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "describe", exp, "--program", "--device", "99", NULL), ==, 2);
  g_free(out);
  g_free(err);
  g_unlink(trace);
  g_rmdir(dir);
}

/* SIGINT or SIGTERM in the middle of a run leaves neither the trace nor its
 * temporary file, and the process dies of the signal. */
static void test_interrupted_trace(void)
{
  static const int sigs[] = {SIGINT, SIGTERM};
  for (guint k = 0; k < G_N_ELEMENTS(sigs); k++) {
    g_autofree char *dir = g_dir_make_tmp("podsim-sig-XXXXXX", NULL);
    g_autofree char *trace = g_build_filename(dir, "t.json", NULL);
    const char *argv[] = {podsim, "run", "vit-pipeline", "--quiet", "--trace-max", "0",
                          "--trace", trace, NULL};
    GPid pid;
    GError *error = NULL;
    g_assert_true(g_spawn_async(g_getenv("PODSIM_DATA_DIR"), (char **)argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL |
                                    G_SPAWN_STDERR_TO_DEV_NULL,
                                NULL, NULL, &pid, &error));
    g_assert_no_error(error);
    /* wait until the temporary trace exists (the run is under way); up to
     * two minutes, as a loaded machine (CI's sanitizer builds beside it)
     * can take seconds to load the dataset before the trace is opened */
    gboolean seen = FALSE;
    for (int i = 0; i < 4800 && !seen; i++) {
      GDir *d = g_dir_open(dir, 0, NULL);
      for (const char *n; d && (n = g_dir_read_name(d));)
        seen |= g_str_has_prefix(n, "t.json.tmp-");
      if (d)
        g_dir_close(d);
      if (!seen)
        g_usleep(25000);
    }
    g_assert_true(seen);
    kill(pid, sigs[k]);
    int status = 0;
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_spawn_close_pid(pid);
    g_assert_true(WIFSIGNALED(status));
    g_assert_cmpint(WTERMSIG(status), ==, sigs[k]);
    GDir *d = g_dir_open(dir, 0, NULL);
    g_assert_null(g_dir_read_name(d)); /* nothing left behind */
    g_dir_close(d);
    g_rmdir(dir);
  }
}

/* The same losses whatever OpenBLAS kernel the CPU would pick: the
 * library's own GEMM (sim/model/gemm.c) sums in one order, so runs under
 * different OPENBLAS_CORETYPE values print identical losses.  (Skipped
 * without AVX2, where OpenBLAS would not take these kernels.) */
static void test_blas_pinned(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    g_test_skip("no AVX2/FMA: podsim keeps the CPU's own BLAS kernel");
    return;
  }
  static const char *const cores[] = {"Sandybridge", "SkylakeX", "Prescott", NULL};
  char *first = NULL;
  for (int i = 0; cores[i]; i++) {
    g_auto(GStrv) env = g_environ_setenv(g_get_environ(), "OPENBLAS_CORETYPE", cores[i], TRUE);
    env = g_environ_unsetenv(env, "PODSIM_BLAS_PINNED");
    env = g_environ_unsetenv(env, "PODSIM_BLAS_NATIVE");
    const char *argv[] = {podsim, "run", "default", "--steps", "30", "--no-trace", "--set",
                          "numerics.evaluate=false", "--set", "log_every=10", NULL};
    char *out = NULL, *err = NULL;
    int status = 0;
    GError *error = NULL;
    g_assert_true(g_spawn_sync(g_getenv("PODSIM_DATA_DIR"), (char **)argv, env,
                               G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status, &error));
    g_assert_no_error(error);
    g_assert_cmpint(status, ==, 0);
    /* the loss lines and the summary's loss */
    GString *losses = g_string_new(NULL);
    g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
    for (int k = 0; lines[k]; k++)
      if (strstr(lines[k], "loss "))
        g_string_append_printf(losses, "%s\n", strstr(lines[k], "loss "));
    g_assert_cmpuint(losses->len, >, 0);
    if (!first)
      first = g_string_free(losses, FALSE);
    else {
      g_assert_cmpstr(losses->str, ==, first);
      g_string_free(losses, TRUE);
    }
    g_free(out);
    g_free(err);
  }
  g_free(first);
#else
  g_test_skip("BLAS kernels are pinned on x86-64 only");
#endif
}

/* Runs podsim in dir (as PODSIM_DATA_DIR and working directory, the
 * shipped files still found beside the binary); the exit status. */
static int run_in(const char *dir, char **out, char **err, const char *const *args)
{
  g_autofree char *saved = g_strdup(g_getenv("PODSIM_DATA_DIR"));
  g_setenv("PODSIM_DATA_DIR", dir, TRUE);
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (char *)podsim_path());
  for (const char *const *a = args; *a; a++)
    g_ptr_array_add(argv, (char *)*a);
  g_ptr_array_add(argv, NULL);
  int st = podsim_spawn((const char *const *)argv->pdata, out, err);
  g_ptr_array_free(argv, TRUE);
  if (saved)
    g_setenv("PODSIM_DATA_DIR", saved, TRUE);
  else
    g_unsetenv("PODSIM_DATA_DIR");
  return st;
}

/* Whether path starts with gzip's magic bytes. */
static gboolean is_gzip_file(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  return g_file_get_contents(path, &text, &len, NULL) && len > 2 &&
         (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b;
}

/* --trace FILE.json.gz writes gzip that `podsim timeline` reads as it
 * reads the JSON (the same rows, and from the JSON pretty-printed); a
 * cut-short one, gzip or not, is an error naming it.
 * Without --trace, a trace whose JSON is estimated over 64 MB
 * (gpipe-amoebanet: 73 MB) is traces/NAME.json.gz, a smaller one
 * (resnet50-v3-8: 4 MB) traces/NAME.json. */
static void test_trace_gzip(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-gz-XXXXXX", NULL);
  g_autofree char *plain = g_build_filename(dir, "p.json", NULL);
  g_autofree char *gz = g_build_filename(dir, "p.json.gz", NULL);
  const char *paths[2] = {plain, gz};
  char *rows[2];
  for (int k = 0; k < 2; k++) {
    char *out, *err;
    g_assert_cmpint(podsim_run(&out, &err, "run", "tests/data/good/experiments/mlp-what-if.json",
                        "--set", "strategy.kind=pipeline", "--set", "strategy.stages=2", "--set",
                        "strategy.micro_batches=4", "--set", "numerics.enabled=false",
                        "--steps", "3", "--trace", paths[k], NULL),
                    ==, 0);
    g_assert_nonnull(strstr(out, paths[k]));
    g_free(out);
    g_free(err);
    g_assert_cmpint(is_gzip_file(paths[k]), ==, k == 1);
    g_assert_cmpint(podsim_run(&rows[k], &err, "timeline", paths[k], NULL), ==, 0);
    g_free(err);
  }
  /* the same rows after the header, which names the file; and from the
   * same trace pretty-printed (read whole, not a line at a time) */
  g_autofree char *pretty = g_build_filename(dir, "pretty.json", NULL);
  json_object *doc = json_object_from_file(plain);
  g_assert_nonnull(doc);
  g_assert_cmpint(json_object_to_file_ext(pretty, doc, JSON_C_TO_STRING_PRETTY), ==, 0);
  json_object_put(doc);
  char *out, *err;
  g_assert_cmpint(podsim_run(&out, &err, "timeline", pretty, NULL), ==, 0);
  g_assert_nonnull(strstr(rows[0], "\tFWD\n"));
  g_assert_cmpstr(strstr(rows[0], "\n# stage"), ==, strstr(rows[1], "\n# stage"));
  g_assert_cmpstr(strstr(rows[0], "\n# stage"), ==, strstr(out, "\n# stage"));
  g_free(rows[0]);
  g_free(rows[1]);
  g_free(out);
  g_free(err);
  /* cut short, gzip or not: an error naming the file, exit 2 */
  for (int k = 0; k < 2; k++) {
    g_autofree char *text = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(paths[k], &text, &len, NULL));
    g_assert_true(g_file_set_contents(paths[k], text, (gssize)(len / 2), NULL));
    g_assert_cmpint(podsim_run(&out, &err, "timeline", paths[k], NULL), ==, 2);
    g_assert_nonnull(strstr(err, paths[k]));
    g_assert_nonnull(strstr(err, k ? "cut-short gzip" : "cut short after line"));
    g_free(out);
    g_free(err);
  }

  const char *big[] = {"run", "gpipe-amoebanet", "--set", "numerics.enabled=false", "-q", NULL};
  g_assert_cmpint(run_in(dir, &out, &err, big), ==, 0);
  g_assert_nonnull(strstr(out, "trace            traces/gpipe-amoebanet.json.gz ("));
  g_autofree char *big_trace = g_build_filename(dir, "traces", "gpipe-amoebanet.json.gz", NULL);
  g_assert_true(is_gzip_file(big_trace));
  g_free(out);
  g_free(err);
  const char *small[] = {"run", "resnet50-v3-8", "--set", "numerics.enabled=false", "-q", NULL};
  g_assert_cmpint(run_in(dir, &out, &err, small), ==, 0);
  g_assert_nonnull(strstr(out, "trace            traces/resnet50-v3-8.json ("));
  g_autofree char *small_trace = g_build_filename(dir, "traces", "resnet50-v3-8.json", NULL);
  g_assert_false(is_gzip_file(small_trace));
  g_assert_true(g_file_test(small_trace, G_FILE_TEST_IS_REGULAR));
  g_free(out);
  g_free(err);
  scratch_remove(dir);
}

/* Every shipped experiment writes its trace under the default --trace-max
 * (vit-pipeline's JSON is estimated at 389 MB: it goes out as gzip, about
 * 65 MB by the estimate, 25 MB written).  Slow: every experiment runs. */
static void test_trace_every_experiment(void)
{
  if (!g_test_thorough()) {
    g_test_skip("slow: make test-slow");
    return;
  }
  g_autofree char *dir = g_dir_make_tmp("podsim-every-XXXXXX", NULL);
  g_autofree char *listing = NULL, *err = NULL;
  const char *list[] = {"list", "experiments", NULL};
  g_assert_cmpint(run_in(dir, &listing, &err, list), ==, 0);
  g_auto(GStrv) names = g_strsplit(g_strstrip(listing), "\n", -1);
  for (int i = 0; names[i]; i++) {
    char *out, *errs;
    const char *run[] = {"run", names[i], "--set", "numerics.enabled=false", "-q", NULL};
    g_assert_cmpint(run_in(dir, &out, &errs, run), ==, 0);
    if (strstr(errs, "no trace written"))
      g_error("%s: %s", names[i], errs);
    g_assert_nonnull(strstr(out, "open it at"));
    g_free(out);
    g_free(errs);
  }
  g_autofree char *vit = g_build_filename(dir, "traces", "vit-pipeline.json.gz", NULL);
  g_assert_true(is_gzip_file(vit));
  scratch_remove(dir);
}

/* A trace estimated over --trace-max is not written, with a warning that
 * says so and how to get it; the run itself succeeds.  --trace-max 0 has no
 * limit. */
static void test_trace_max(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-tmax-XXXXXX", NULL);
  g_autofree char *trace = g_build_filename(dir, "t.json", NULL);
  char *out, *err;
  g_assert_cmpint(podsim_run(&out, &err, "run", "vit-pipeline", "--steps", "20", "--set",
                      "numerics.enabled=false", "--trace", trace, "--trace-max", "1", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(err, "no trace written"));
  g_assert_nonnull(strstr(err, "--trace-max 1 MB"));
  g_assert_null(strstr(out, "open it at"));
  g_assert_false(g_file_test(trace, G_FILE_TEST_EXISTS));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "run", "vit-pipeline", "--steps", "20", "--set",
                      "numerics.enabled=false", "--trace", trace, "--trace-max", "0", NULL),
                  ==, 0);
  g_assert_true(g_file_test(trace, G_FILE_TEST_EXISTS));
  g_assert_null(strstr(err, "no trace written"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "run", "vit-pipeline", "--trace-max", "-3", NULL), ==, 2);
  g_free(out);
  g_free(err);
  g_unlink(trace);
  g_rmdir(dir);
}

/* --max-events stops a run that would go on: exit 2 naming the guard, and
 * no trace left; a limit the run stays under changes nothing. */
static void test_max_events(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-maxev-XXXXXX", NULL);
  g_autofree char *trace = g_build_filename(dir, "t.json", NULL);
  char *out, *err;
  g_assert_cmpint(podsim_run(&out, &err, "run", "vit-pipeline", "--steps", "20", "--set",
                      "numerics.enabled=false", "--trace", trace, "--max-events", "500", NULL),
                  ==, 2);
  g_assert_nonnull(strstr(err, "stopped after 500 events (--max-events)"));
  g_assert_false(g_file_test(trace, G_FILE_TEST_EXISTS));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "run", "vit-pipeline", "--steps", "2", "--set",
                      "numerics.enabled=false", "--no-trace", "--json", "--max-events",
                      "1000000", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "\"step_time_s\""));
  g_free(out);
  g_free(err);
  g_rmdir(dir);
}

/* Every --set hint `describe topology` prints runs as printed; an unknown
 * --set key's error suggests the key that exists. */
static void test_set_hints(void)
{
  char *out, *err;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "topology", "tpu-v3-8", NULL), ==, 0);
  guint hints = 0;
  for (const char *h = strstr(out, "--set "); h; h = strstr(h + 1, "--set ")) {
    g_autofree char *set = g_strndup(h + 6, strcspn(h + 6, " ),;\n"));
    g_autofree char *o = NULL, *e = NULL;
    int st = podsim_run(&o, &e, "run", "resnet50-v3-8", "--steps", "2", "--no-trace", "--json",
                        "--set", set, NULL);
    g_test_message("--set %s: %d %s", set, st, e);
    g_assert_cmpint(st, ==, 0);
    hints++;
  }
  g_assert_cmpuint(hints, >=, 3);
  g_free(out);
  g_free(err);
  struct {
    const char *set, *hint;
  } cases[] = {
      {"chip.peak_flops=140e12", "did you mean --set topology.chip.peak_flops=140e12?"},
      {"topology.chip.peak_flop=1e14", "did you mean --set topology.chip.peak_flops=1e14?"},
      {"global_bach=512", "did you mean --set global_batch=512?"},
      {"strategy.replica=2", "did you mean --set strategy.replicas=2?"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--no-trace", "--set",
                               cases[i].set, NULL), ==, 2);
    g_test_message("%s", err);
    g_assert_nonnull(strstr(err, cases[i].hint));
    g_free(out);
    g_free(err);
  }
}

/* out and err of `run default --no-trace` with numerics off, steps and
 * steps_per_run as given.  (transfer full) */
static void run_default(char **out, char **err, const char *steps, const char *per_run)
{
  g_autofree char *spr = g_strdup_printf("steps_per_run=%s", per_run);
  g_assert_cmpint(podsim_run(out, err, "run", "default", "--no-trace", "--steps", steps, "--set",
                             "numerics.enabled=false", "--set", spr, NULL), ==, 0);
}

static void test_summary_words(void)
{
  char *out, *err;
  run_default(&out, &err, "20", "1"); /* a hand-written experiment's default */
  g_assert_nonnull(strstr(out, "(mean of 19 steps after a warm-up loop of 1)"));
  g_assert_nonnull(strstr(out, "relaunches the device loop every step)"));
  g_assert_null(strstr(out, "every 1 steps"));
  g_assert_nonnull(strstr(out, "%  the infeed dequeue\n"));
  g_assert_nonnull(strstr(out, "%  the host loop below, outfeed, host calls\n"));
  g_assert_nonnull(strstr(err, "warning: the host loop takes 49% of the step: steps_per_run is 1"));
  g_assert_null(strstr(out, "what-ifs"));
  g_free(out);
  g_free(err);
  run_default(&out, &err, "5", "100"); /* one loop: nothing left out, nothing to raise */
  g_assert_nonnull(strstr(out, "(mean of 5 steps, no warm-up left out)"));
  g_assert_null(strstr(out, "after"));
  g_assert_null(strstr(err, "host loop takes"));
  g_free(out);
  g_free(err);
  run_default(&out, &err, "40", "20"); /* 5% of the step */
  g_assert_null(strstr(err, "host loop takes"));
  g_free(out);
  g_free(err);
  /* numerics on; under the sanitizers (make check-asan) without the test
   * set's evaluation, 10,000 images that take minutes there */
  const gboolean sanitized = g_getenv("PODSIM_TEST_SANITIZED") != NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--no-trace", "--quiet", "--steps", "2",
                             "--set", sanitized ? "numerics.evaluate=false" : "numerics.evaluate=true",
                             NULL),
                  ==, 0);
  g_assert_nonnull(strstr(out, "(one step's loss: the first step's, the last's)"));
  g_assert_true((strstr(out, "\ntest accuracy ") != NULL) == !sanitized);
  g_assert_nonnull(strstr(out, "what-ifs         add --set numerics.enabled=false"));
  /* by default every collective on the TensorCore, as XLA without offload */
  g_assert_nonnull(strstr(out, " over 8 replicas, on the TensorCore, chunks of"));
  g_assert_nonnull(strstr(out, "(on the core    all-reduce, reduce-scatter, all-gather: each "
                               "holds its TensorCore until done, collective.on_core)\n"));
  g_free(out);
  g_free(err);
  /* offloaded: asynchronous, overlapping backward, no line naming them */
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--no-trace", "--quiet", "--steps", "2",
                             "--set", "numerics.enabled=false", "--set", "collective.on_core=[]",
                             NULL),
                  ==, 0);
  g_assert_nonnull(strstr(out, ", overlapping backward, "));
  g_assert_null(strstr(out, "(on the core"));
  g_free(out);
  g_free(err);
  /* collectives on the TensorCore: the gradients' line and one line naming them */
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--no-trace", "--quiet", "--steps", "2",
                             "--set", "numerics.enabled=false", "--set",
                             "collective.on_core=[\"all-gather\", \"all-reduce\"]", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(out, " over 8 replicas, on the TensorCore, chunks of"));
  g_assert_nonnull(strstr(out, "(on the core    all-reduce, all-gather: each holds its "
                               "TensorCore until done, collective.on_core)\n"));
  g_free(out);
  g_free(err);
  /* weight-update sharding with only its all-gather held */
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--no-trace", "--quiet", "--steps", "2",
                             "--set", "numerics.enabled=false", "--set",
                             "strategy.weight_update_sharding=true", "--set",
                             "collective.on_core=[\"all-gather\"]", NULL),
                  ==, 0);
  g_assert_nonnull(strstr(out, ", the reduce-scatter overlapping backward, the all-gather on the "
                               "TensorCore, chunks of"));
  g_free(out);
  g_free(err);
}

/* describe --kernels gives each kernel's MXU use, the model's share of
 * the padded work: ResNet-50's 3x3 convolution of 64 channels on 56x56
 * (stage 1) laid out as XLA does (cost.c's conv_padded).  At 128 images a
 * replica the forward and input-gradient products use all of it and the
 * weight gradient, whose filters are padded to 128, half; at 64 the batch
 * is padded to 128, halving each; at 32 the channels are padded to 128,
 * a quarter for the first two, and the weight gradient pads only the input
 * channels, a half.  The summary's share is the totals' ratio. */
static void check_conv_use(int global_batch, const char *fwd, const char *wgrad)
{
  g_autofree char *gb = g_strdup_printf("global_batch=%d", global_batch);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "resnet50-v3-8", "--kernels", "--set", gb,
                             NULL), ==, 0);
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  int seen = 0;
  for (char **l = lines; *l; l++) {
    if (!strstr(*l, " stage1.block1.res.body.conv2 "))
      continue;
    const char *want = strstr(*l, " wgrad ") ? wgrad : fwd;
    g_assert_true(g_str_has_suffix(*l, want));
    seen++;
  }
  g_assert_cmpint(seen, ==, 3); /* conv, dgrad, wgrad */
  const char *sum = strstr(out, "\nMXU use: ");
  g_assert_nonnull(sum);
  double model = 0, padded = 0, pct = 0;
  g_assert_cmpint(sscanf(sum, "\nMXU use: %lf GFLOP of matrix products run as %lf padded to the "
                              "MXU (%lf%%", &model, &padded, &pct), ==, 3);
  g_assert_cmpfloat(fabs(pct - 100 * model / padded), <=, 0.06);
  g_assert_cmpfloat(pct, <=, 100);
}

static void test_describe_mxu_use(void)
{
  check_conv_use(1024, "100.0%", "50.0%");
  check_conv_use(512, "50.0%", "25.0%");
  check_conv_use(256, "25.0%", "50.0%");
}

/* describe --program names the algorithm "auto" chose, the one the run
 * reports. */
static void test_describe_chosen_algorithm(void)
{
  char *out, *err;
  g_assert_cmpint(podsim_run(&out, &err, "run", "resnet50-v3-8", "--no-trace", "--json", "--steps",
                             "2", NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  json_object *algo;
  g_assert_true(json_object_object_get_ex(o, "collective_algorithm", &algo));
  g_autofree char *want = g_strdup_printf("allreduce     %s (auto) member 0 of 8",
                                          json_object_get_string(algo));
  json_object_put(o);
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "describe", "resnet50-v3-8", "--program", NULL), ==, 0);
  g_test_message("want '%s'", want);
  g_assert_nonnull(strstr(out, want));
  g_assert_null(strstr(out, " auto  member"));
  g_free(out);
  g_free(err);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = podsim_init();
  g_test_add_func("/cli/version-and-help", test_version_and_help);
  g_test_add_func("/cli/usage-errors", test_usage_errors);
  g_test_add_func("/cli/list", test_list);
  g_test_add_func("/cli/describe/mxu-use", test_describe_mxu_use);
  g_test_add_func("/cli/list/other", test_list_other);
  g_test_add_func("/cli/clock-overflow", test_clock_overflow);
  g_test_add_func("/cli/json-summary", test_json_summary);
  g_test_add_func("/cli/describe-roundtrip", test_describe_roundtrip);
  g_test_add_func("/cli/trace-failures", test_trace_failures);
  g_test_add_func("/cli/strategy-keys-roundtrip", test_strategy_keys_roundtrip);
  g_test_add_func("/cli/bad-strategy-values", test_bad_strategy_values);
  g_test_add_func("/cli/run-header/what-if", test_run_header_what_if);
  g_test_add_func("/cli/idle-warning", test_idle_warning);
  g_test_add_func("/cli/pipeline-timeline", test_pipeline_timeline);
  g_test_add_func("/cli/interrupted-trace", test_interrupted_trace);
  /* 90 steps of numerics (about 14 s): `make test-slow`; make test has
   * tests/test_determinism.c's shorter check of the same */
  if (g_test_thorough())
    g_test_add_func("/cli/blas-pinned", test_blas_pinned);
  g_test_add_func("/cli/trace-max", test_trace_max);
  g_test_add_func("/cli/trace-gzip", test_trace_gzip);
  g_test_add_func("/cli/trace-every-experiment", test_trace_every_experiment);
  g_test_add_func("/cli/max-events", test_max_events);
  g_test_add_func("/cli/set-hints", test_set_hints);
  g_test_add_func("/cli/summary-words", test_summary_words);
  g_test_add_func("/cli/describe-chosen-algorithm", test_describe_chosen_algorithm);
  return g_test_run();
}

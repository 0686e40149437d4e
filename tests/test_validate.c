/* test_validate.c: `podsim validate` as a user meets it (the binary named
 * by $PODSIM, run in $PODSIM_DATA_DIR, as test_cli.c does): on hand-written
 * points in a temporary --dir whose measured times are known multiples of
 * what `podsim run --json` predicts for them, the signed error is exactly
 * predicted / measured - 1 and the calibration points (one or two) stay out of the
 * median and worst; a point that does not fit in HBM is a row without a
 * prediction and exit 1; a point file missing a field exits 2 naming it;
 * the table shows every row's source; --only filters; the shipped points
 * load; --help, the README and docs/model.md give those exit statuses (the README once
 * said 1 meant only an internal failure). */
#include "support/cli.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

static const char *podsim;

/* A hand-written point. */
typedef struct {
  const char *file, *name, *experiment, *model, *topology;
  int batch;
  int steps_per_run;   /* > 0: the point's "set" gives it */
  double factor;       /* measured = predicted x factor */
  gboolean calibration;
  const char *source;  /* the "source" object, as JSON */
  const char *source_text; /* how validate prints it */
} Spec;

static const Spec specs[] = {
    {"a-cal.json", "test-resnet50-v3-8", "resnet50-v3-8", "resnet50", "tpu-v3-8", 1024, 0, 0.5,
     TRUE,
     "{\"kind\": \"mlperf\", \"round\": \"v9.9\", \"submitter\": \"Nobody\", "
     "\"system\": \"test system A\"}",
     "MLPerf v9.9, Nobody, test system A"},
    {"b.json", "test-resnet50-v2-8", "resnet50-v3-8", "resnet50", "tpu-v2-8", 512, 0, 2.0, FALSE,
     "{\"kind\": \"mlperf\", \"round\": \"v8.8\", \"submitter\": \"Somebody\", "
     "\"system\": \"test system B\"}",
     "MLPerf v8.8, Somebody, test system B"},
    {"c.json", "test-transformer-v4-8", "scaling-transformer-big", "transformer-big",
     "tpu-v4-8", 128, 3, 0.8, FALSE,
     "{\"kind\": \"paper\", \"paper\": \"A. Author, Some Paper (2020)\", \"table\": \"Table 7\"}",
     "A. Author, Some Paper (2020), Table 7"},
};

/* What `podsim run --json` predicts for the spec's run, with the
 * overrides validate applies. */
static double predict(const Spec *s)
{
  g_autofree char *topo = g_strdup_printf("topology=%s", s->topology);
  g_autofree char *batch = g_strdup_printf("global_batch=%d", s->batch);
  int spr = s->steps_per_run > 0 ? s->steps_per_run : 2;
  g_autofree char *spr_set = g_strdup_printf("steps_per_run=%d", spr);
  g_autofree char *steps = g_strdup_printf("%d", 2 * spr);
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "run", s->experiment, "--json", "--no-trace", "--set", topo, "--set",
               batch, "--set", "numerics.enabled=false", "--set", "strategy.replicas=null",
               "--set", spr_set, "--steps", steps, NULL);
  g_test_message("run %s: %d: %s", s->name, st, err);
  g_assert_cmpint(st, ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  double t = json_object_get_double(json_object_object_get(o, "step_time_s"));
  json_object_put(o);
  g_assert_cmpfloat(t, >, 0);
  return t;
}

static void write_file(const char *dir, const char *file, const char *text)
{
  g_autofree char *path = g_build_filename(dir, file, NULL);
  GError *error = NULL;
  g_assert_true(g_file_set_contents(path, text, -1, &error));
  g_assert_no_error(error);
}

static char *point_json(const Spec *s, double measured)
{
  g_autofree char *set = s->steps_per_run > 0
                             ? g_strdup_printf(",\n  \"set\": [\"steps_per_run=%d\"]",
                                               s->steps_per_run)
                             : g_strdup("");
  return g_strdup_printf("{\n  \"name\": \"%s\",\n  \"model\": \"%s\",\n  \"topology\": \"%s\",\n"
                         "  \"global_batch\": %d,\n  \"precision\": \"bf16\",\n"
                         "  \"measured_step_s\": %.17g,\n  \"experiment\": \"%s\",\n"
                         "  \"source\": %s,\n  \"calibration\": %s%s\n}\n",
                         s->name, s->model, s->topology, s->batch, measured, s->experiment,
                         s->source, s->calibration ? "true" : "false", set);
}

static void remove_dir(char *dir)
{
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  for (const char *e; (e = g_dir_read_name(d));) {
    g_autofree char *p = g_build_filename(dir, e, NULL);
    g_assert_cmpint(g_unlink(p), ==, 0);
  }
  g_dir_close(d);
  g_assert_cmpint(g_rmdir(dir), ==, 0);
  g_free(dir);
}

/* A temporary --dir holding the three points of specs[], each measured
 * at factor x its prediction (returned in predicted[]).  (transfer full) */
static char *make_points(double *predicted)
{
  GError *error = NULL;
  char *dir = g_dir_make_tmp("podsim-validate-XXXXXX", &error);
  g_assert_no_error(error);
  for (guint i = 0; i < G_N_ELEMENTS(specs); i++) {
    predicted[i] = predict(&specs[i]);
    g_autofree char *text = point_json(&specs[i], predicted[i] * specs[i].factor);
    write_file(dir, specs[i].file, text);
  }
  return dir;
}

static json_object *row_named(json_object *rows, const char *name)
{
  for (size_t i = 0; i < json_object_array_length(rows); i++) {
    json_object *r = json_object_array_get_idx(rows, i);
    if (strcmp(json_object_get_string(json_object_object_get(r, "name")), name) == 0)
      return r;
  }
  g_assert_not_reached();
}

static double num(json_object *o, const char *key)
{
  json_object *v = NULL;
  g_assert_true(json_object_object_get_ex(o, key, &v));
  g_assert_nonnull(v);
  return json_object_get_double(v);
}

/* error = predicted / measured - 1 to 1e-9, for factors 0.5, 2 and 0.8
 * (errors +1, -0.5, +0.25); the calibration row (+1) is left out, so the
 * median is 0.375 and the worst 0.5 (with it they would be 0.5 and 1),
 * and of each generation's points v2 has the -0.5 and v4 the +0.25. */
static void test_exact_errors(void)
{
  double predicted[G_N_ELEMENTS(specs)];
  char *dir = make_points(predicted);
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "validate", "--json", "--dir", dir, NULL);
  g_test_message("validate: %d: %s", st, err);
  g_assert_cmpint(st, ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, G_N_ELEMENTS(specs));
  for (guint i = 0; i < G_N_ELEMENTS(specs); i++) {
    const Spec *s = &specs[i];
    json_object *r = row_named(rows, s->name);
    /* rows in file-name order */
    g_assert_true(r == json_object_array_get_idx(rows, i));
    double pred = num(r, "predicted_s"), meas = num(r, "measured_s"), e = num(r, "error");
    g_assert_cmpfloat(fabs(pred - predicted[i]), <=, 1e-12 * predicted[i]);
    g_assert_cmpfloat(fabs(meas - predicted[i] * s->factor), <=, 1e-15 * meas);
    g_assert_cmpfloat(fabs(e - (pred / meas - 1)), <, 1e-9);
    g_assert_cmpfloat(fabs(e - (1 / s->factor - 1)), <, 1e-9);
    g_assert_cmpstr(json_object_get_string(json_object_object_get(r, "model")), ==, s->model);
    g_assert_cmpstr(json_object_get_string(json_object_object_get(r, "topology")), ==,
                    s->topology);
    g_assert_cmpint(json_object_get_int(json_object_object_get(r, "global_batch")), ==,
                    s->batch);
    g_assert_cmpstr(json_object_get_string(json_object_object_get(r, "source")), ==,
                    s->source_text);
    g_assert_true(json_object_get_boolean(json_object_object_get(r, "calibration")) ==
                  s->calibration);
  }
  g_assert_cmpfloat(fabs(num(o, "median_abs_error") - 0.375), <, 1e-9);
  g_assert_cmpfloat(fabs(num(o, "worst_abs_error") - 0.5), <, 1e-9);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "failed")), ==, 0);
  /* by generation, the calibration point left out: v2 one point at -0.5,
   * v4 one at +0.25 */
  json_object *gens = json_object_object_get(o, "by_generation");
  g_assert_cmpint(json_object_array_length(gens), ==, 2);
  const struct {
    const char *gen;
    double median, mean;
  } want[] = {{"v2", 0.5, -0.5}, {"v4", 0.25, 0.25}};
  for (guint k = 0; k < G_N_ELEMENTS(want); k++) {
    json_object *g = json_object_array_get_idx(gens, k);
    g_assert_cmpstr(json_object_get_string(json_object_object_get(g, "generation")), ==,
                    want[k].gen);
    g_assert_cmpint(json_object_get_int(json_object_object_get(g, "points")), ==, 1);
    g_assert_cmpfloat(fabs(num(g, "median_abs_error") - want[k].median), <, 1e-9);
    g_assert_cmpfloat(fabs(num(g, "mean_error") - want[k].mean), <, 1e-9);
  }
  json_object_put(o);

  /* the table: every row's source, the calibration mark on its row only,
   * and the same summary */
  g_autofree char *text = NULL, *terr = NULL;
  g_assert_cmpint(podsim_run(&text, &terr, "validate", "--dir", dir, NULL), ==, 0);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  for (guint i = 0; i < G_N_ELEMENTS(specs); i++) {
    const char *line = NULL;
    for (char **l = lines; *l && !line; l++)
      if (g_str_has_prefix(*l, specs[i].name))
        line = *l;
    g_assert_nonnull(line);
    g_assert_nonnull(strstr(line, specs[i].source_text));
    g_autofree char *marked = g_strconcat(specs[i].name, " *", NULL);
    g_assert_true(g_str_has_prefix(line, marked) == specs[i].calibration);
    g_autofree char *pct = g_strdup_printf("%+.1f%%", 100 * (1 / specs[i].factor - 1));
    g_assert_nonnull(strstr(line, pct));
  }
  g_assert_nonnull(strstr(text, "median 37.5%, worst 50.0%"));
  g_assert_nonnull(strstr(text, "left out of the summary"));
  g_assert_nonnull(strstr(text, "  v2    1 point : median |error| 50.0%, mean error -50.0%\n"));
  g_assert_nonnull(strstr(text, "  v4    1 point : median |error| 25.0%, mean error +25.0%\n"));
  remove_dir(dir);
}

/* Two calibration points (one a generation): both rows marked, the
 * footnote gives each one's error, and the summary is the third point's
 * alone (+25.0%). */
static void test_two_calibrations(void)
{
  double predicted[G_N_ELEMENTS(specs)];
  char *dir = make_points(predicted);
  Spec b = specs[1];
  b.calibration = TRUE;
  g_autofree char *text_b = point_json(&b, predicted[1] * b.factor);
  write_file(dir, b.file, text_b);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "validate", "--dir", dir, NULL), ==, 0);
  g_assert_nonnull(strstr(out, "test-resnet50-v3-8 *"));
  g_assert_nonnull(strstr(out, "test-resnet50-v2-8 *"));
  g_assert_null(strstr(out, "test-transformer-v4-8 *"));
  g_assert_nonnull(strstr(out, "* calibration points (podsim's knobs may be fitted to them), left "
                               "out of the summary: test-resnet50-v3-8 +100.0%, "
                               "test-resnet50-v2-8 -50.0%\n"));
  g_assert_nonnull(strstr(out, "1 validation point: 1 predicted"));
  g_assert_nonnull(strstr(out, "median 25.0%, worst 25.0% (test-transformer-v4-8)"));
  remove_dir(dir);
}

/* --only keeps the points whose name contains the substring. */
static void test_only(void)
{
  double predicted[G_N_ELEMENTS(specs)];
  char *dir = make_points(predicted);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "validate", "--json", "--dir", dir, "--only", "v2-8", NULL),
                  ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, 1);
  g_assert_cmpstr(json_object_get_string(
                      json_object_object_get(json_object_array_get_idx(rows, 0), "name")),
                  ==, "test-resnet50-v2-8");
  json_object_put(o);
  g_autofree char *out2 = NULL, *err2 = NULL;
  g_assert_cmpint(podsim_run(&out2, &err2, "validate", "--dir", dir, "--only", "nothing-like-it", NULL),
                  ==, 2);
  g_assert_nonnull(strstr(err2, "nothing-like-it"));
  g_assert_cmpstr(out2, ==, "");
  remove_dir(dir);
}

/* The points kept apart for their simulation time (tests/measured/slow)
 * are whole point files: validate checks every file of the folder before
 * it filters by --only, so a filter that matches none exits 2 with that
 * message (not a file's), which runs nothing. */
static void test_slow_set_loads(void)
{
  const char *top = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *dir = g_build_filename(top ? top : ".", "tests", "measured", "slow", NULL);
  GError *error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  int n = 0;
  for (const char *f; (f = g_dir_read_name(d)) != NULL;)
    n += g_str_has_suffix(f, ".json");
  g_assert_cmpint(n, >=, 6);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "validate", "--dir", dir, "--only", "no-such-point", NULL),
                  ==, 2);
  g_assert_nonnull(strstr(err, "no point in"));
  g_assert_nonnull(strstr(err, "no-such-point"));
  g_assert_cmpstr(out, ==, "");
}

/* BERT-large at 32 sequences per v3 TensorCore needs more than its 16 GiB:
 * a row with the message and no prediction, left out of the summary, and
 * exit 1 after the other rows; --csv gives the same rows, the failure in
 * the last field. */
static void test_does_not_fit(void)
{
  double predicted[G_N_ELEMENTS(specs)];
  char *dir = make_points(predicted);
  Spec big = {"d.json", "test-bert-v3-8", "scaling-bert-large", "bert-large", "tpu-v3-8", 256,
              0, 1.0, FALSE,
              "{\"kind\": \"mlperf\", \"round\": \"v0.0\", \"submitter\": \"X\", "
              "\"system\": \"Y\"}",
              "MLPerf v0.0, X, Y"};
  g_autofree char *text = point_json(&big, 0.5);
  write_file(dir, big.file, text);
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "validate", "--json", "--dir", dir, NULL);
  g_test_message("validate: %d: %s", st, err);
  g_assert_cmpint(st, ==, 1);
  g_assert_nonnull(strstr(err, "1 of 4 points could not be simulated: test-bert-v3-8"));
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, 4);
  json_object *r = row_named(rows, "test-bert-v3-8"), *v = NULL;
  g_assert_true(json_object_object_get_ex(r, "predicted_s", &v) && v == NULL);
  g_assert_true(json_object_object_get_ex(r, "error", &v) && v == NULL);
  g_assert_cmpfloat(num(r, "measured_s"), ==, 0.5);
  const char *why = json_object_get_string(json_object_object_get(r, "failure"));
  g_assert_nonnull(why);
  g_assert_nonnull(strstr(why, "GiB per device"));
  /* the others still ran, and the summary is theirs alone */
  g_assert_cmpfloat(num(row_named(rows, "test-resnet50-v2-8"), "predicted_s"), >, 0);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "failed")), ==, 1);
  g_assert_cmpfloat(fabs(num(o, "median_abs_error") - 0.375), <, 1e-9);
  g_assert_cmpfloat(fabs(num(o, "worst_abs_error") - 0.5), <, 1e-9);

  g_autofree char *tout = NULL, *terr = NULL;
  g_assert_cmpint(podsim_run(&tout, &terr, "validate", "--dir", dir, NULL), ==, 1);
  g_assert_nonnull(strstr(tout, "not simulated: "));
  g_assert_nonnull(strstr(tout, "1 not simulated"));

  /* --csv: a header and one row a point, the same numbers as --json's
   * (every double read back exactly), the source quoted for its commas,
   * the failure in the last field of the point that did not run */
  g_autofree char *cout = NULL, *cerr = NULL;
  g_assert_cmpint(podsim_run(&cout, &cerr, "validate", "--csv", "--dir", dir, NULL), ==, 1);
  g_auto(GStrv) lines = g_strsplit(g_strchomp(cout), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 5);
  g_assert_cmpstr(lines[0], ==, "name,model,topology,generation,global_batch,predicted_s,"
                                "measured_s,error,calibration,source,failure");
  for (int i = 1; i < 5; i++) {
    g_auto(GStrv) f = g_strsplit(lines[i], ",", 9); /* the first 8 fields hold no comma */
    json_object *jr = row_named(rows, f[0]);
    g_assert_cmpstr(f[1], ==, json_object_get_string(json_object_object_get(jr, "model")));
    g_assert_cmpstr(f[2], ==, json_object_get_string(json_object_object_get(jr, "topology")));
    g_assert_cmpint(g_ascii_strtoll(f[4], NULL, 10), ==,
                    json_object_get_int64(json_object_object_get(jr, "global_batch")));
    g_assert_cmpfloat(g_ascii_strtod(f[6], NULL), ==, num(jr, "measured_s"));
    if (strcmp(f[0], "test-bert-v3-8") == 0) {
      g_assert_cmpstr(f[3], ==, "v3"); /* its topology's, though it did not load */
      g_assert_cmpstr(f[5], ==, "");
      g_assert_cmpstr(f[7], ==, "");
      g_assert_nonnull(strstr(f[8], "false,\"MLPerf v0.0, X, Y\",\""));
      g_assert_nonnull(strstr(f[8], "GiB per device"));
    } else {
      g_assert_cmpfloat(g_ascii_strtod(f[5], NULL), ==, num(jr, "predicted_s"));
      g_assert_cmpfloat(g_ascii_strtod(f[7], NULL), ==, num(jr, "error"));
      g_assert_true(g_str_has_suffix(f[8], "\","));
    }
  }
  g_autofree char *bout = NULL, *berr = NULL;
  g_assert_cmpint(podsim_run(&bout, &berr, "validate", "--csv", "--json", "--dir", dir, NULL),
                  ==, 2);
  g_assert_nonnull(strstr(berr, "--json and --csv"));
  g_assert_cmpstr(bout, ==, "");
  json_object_put(o);
  remove_dir(dir);
}

/* A point file without one of its fields exits 2, names the file and the
 * field, and prints nothing on stdout. */
static void test_missing_field(void)
{
  static const struct {
    const char *key, *sub; /* sub: inside "source" */
  } cases[] = {{"name", NULL},         {"model", NULL},      {"topology", NULL},
               {"global_batch", NULL}, {"measured_step_s", NULL}, {"experiment", NULL},
               {"source", NULL},       {"source", "round"},  {"source", "system"}};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    GError *error = NULL;
    char *dir = g_dir_make_tmp("podsim-validate-XXXXXX", &error);
    g_assert_no_error(error);
    g_autofree char *good = point_json(&specs[1], 0.1);
    json_object *o = json_tokener_parse(good);
    g_assert_nonnull(o);
    if (cases[i].sub)
      json_object_object_del(json_object_object_get(o, "source"), cases[i].sub);
    else
      json_object_object_del(o, cases[i].key);
    write_file(dir, "broken.json", json_object_to_json_string(o));
    json_object_put(o);
    g_autofree char *good2 = point_json(&specs[0], 0.1);
    write_file(dir, "fine.json", good2);

    g_autofree char *out = NULL, *err = NULL;
    int st = podsim_run(&out, &err, "validate", "--dir", dir, NULL);
    const char *field = cases[i].sub ? cases[i].sub : cases[i].key;
    g_test_message("without %s: %d: %s", field, st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_true(g_str_has_prefix(err, "podsim: validate: "));
    g_assert_nonnull(strstr(err, "broken.json"));
    g_autofree char *quoted = g_strdup_printf("'%s'", field);
    g_assert_nonnull(strstr(err, quoted));
    if (cases[i].sub)
      g_assert_nonnull(strstr(err, "source: missing required key"));
    g_assert_cmpstr(out, ==, "");
    remove_dir(dir);
  }
}

/* A wrong type, an unknown experiment or an unknown key is a bad file too. */
static void test_bad_values(void)
{
  static const struct {
    const char *from, *to, *msg;
  } cases[] = {
      {"\"experiment\": \"resnet50-v3-8\"", "\"experiment\": \"no-such-experiment\"",
       "broken.json: experiment: unknown experiment 'no-such-experiment'"},
      {"\"global_batch\": 512", "\"global_batch\": \"many\"", "broken.json: global_batch: "},
      {"\"calibration\": false", "\"calibration\": false, \"set\": [\"steps_per_run\"]",
       "broken.json: set[0]: must be a \"key=value\" string"},
      {"\"model\": \"resnet50\"", "\"model\": \"bert-large\"",
       "broken.json: model: 'bert-large', but experiment 'resnet50-v3-8' runs model 'resnet50'"},
      /* a misspelt key is a slip, not a comment */
      {"\"calibration\": false", "\"calibration\": false, \"measured_step_range_sec\": [1, 2]",
       "unknown key 'measured_step_range_sec'"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    GError *error = NULL;
    char *dir = g_dir_make_tmp("podsim-validate-XXXXXX", &error);
    g_assert_no_error(error);
    g_autofree char *good = point_json(&specs[1], 0.1);
    g_assert_nonnull(strstr(good, cases[i].from));
    g_auto(GStrv) parts = g_strsplit(good, cases[i].from, 2);
    g_autofree char *bad = g_strjoin(cases[i].to, parts[0], parts[1], NULL);
    write_file(dir, "broken.json", bad);
    g_autofree char *out = NULL, *err = NULL;
    int st = podsim_run(&out, &err, "validate", "--dir", dir, NULL);
    g_test_message("%s: %d: %s", cases[i].to, st, err);
    g_assert_cmpint(st, ==, 2);
    g_assert_nonnull(strstr(err, cases[i].msg));
    g_assert_cmpstr(out, ==, "");
    remove_dir(dir);
  }
}

/* The shipped points (tests/measured of the data directory, the default
 * --dir) all load; the two v0.5 ResNet-50 points run, both calibration
 * points (v2's and v3's mxu_efficiency is fitted to each), so each is
 * within 0.1% of its measured step and neither enters the summary, which
 * has no median then. */
static void test_shipped(void)
{
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "validate", "--json", "--only", "mlperf-v0.5-", NULL);
  g_test_message("validate: %d: %s", st, err);
  g_assert_cmpint(st, ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, 2);
  const char *names[] = {"mlperf-v0.5-google-resnet50-tpu-v3-8",
                         "mlperf-v0.5-google-resnet50-tpu-v2-8"};
  const double measured[] = {0.137274, 0.228947};
  for (int i = 0; i < 2; i++) {
    json_object *cal = row_named(rows, names[i]);
    g_assert_true(json_object_get_boolean(json_object_object_get(cal, "calibration")));
    g_assert_cmpfloat(num(cal, "measured_s"), ==, measured[i]);
    g_assert_cmpfloat(fabs(num(cal, "error")), <, 1e-3);
  }
  g_assert_nonnull(strstr(json_object_get_string(json_object_object_get(
                              row_named(rows, names[1]), "source")),
                          "MLPerf v0.5, Google, tpu-v2-8"));
  g_assert_null(json_object_object_get(o, "median_abs_error"));
  json_object_put(o);
}

/* BERT-large at 48 sequences per 32 GiB v4 chip trained in the MLPerf v0.7
 * run: with activations kept as XLA keeps them (bf16, one buffer per
 * tensor, GELU's output recomputed) the point is simulated, and validate
 * exits 0. */
static void test_bert_v4_fits(void)
{
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "validate", "--json", "--only",
                      "mlperf-v0.7-google-bert-tpu-v4-128", NULL);
  g_test_message("validate: %d: %s", st, err);
  g_assert_cmpint(st, ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, 1);
  json_object *r = row_named(rows, "mlperf-v0.7-google-bert-tpu-v4-128");
  g_assert_cmpfloat(num(r, "predicted_s"), >, 0);
  g_assert_cmpint(json_object_get_int(json_object_object_get(o, "failed")), ==, 0);
  json_object_put(o);
}

/* A point whose "settings" give the real run's steps_per_run L has its
 * host round trip spread over L steps: the prediction is the simulated
 * step less host_loop_s x (1 - 2 / L), host_loop_s from `podsim run` of the
 * same simulation (loops of 2). */
static void test_real_loop(void)
{
  const Spec *sp = &specs[1]; /* ResNet-50 on tpu-v2-8, loops of 2 */
  g_autofree char *topo = g_strdup_printf("topology=%s", sp->topology);
  g_autofree char *batch = g_strdup_printf("global_batch=%d", sp->batch);
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", sp->experiment, "--json", "--no-trace", "--set", topo,
                      "--set", batch, "--set", "numerics.enabled=false", "--set",
                      "strategy.replicas=null", "--set", "steps_per_run=2", "--steps", "4", NULL),
                  ==, 0);
  json_object *o = json_tokener_parse(out);
  double step = json_object_get_double(json_object_object_get(o, "step_time_s"));
  double loop = json_object_get_double(json_object_object_get(o, "host_loop_s"));
  json_object_put(o);
  g_assert_cmpfloat(loop, >, 0);
  const int L = 1000;
  double want = step - loop * (1.0 - 2.0 / L);
  GError *error = NULL;
  char *dir = g_dir_make_tmp("podsim-validate-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *text = point_json(sp, want);
  /* add the real run's loop to the point */
  char *close = strrchr(text, '}');
  *close = '\0';
  g_autofree char *with = g_strdup_printf("%s,\n  \"settings\": {\"steps_per_run\": %d}\n}\n",
                                          g_strchomp(text), L);
  write_file(dir, sp->file, with);
  g_free(out);
  g_free(err);
  out = err = NULL;
  podsim_run(&out, &err, "validate", "--json", "--dir", dir, NULL);
  json_object *v = json_tokener_parse(out);
  g_assert_nonnull(v);
  json_object *r = row_named(json_object_object_get(v, "rows"), sp->name);
  g_assert_cmpfloat(fabs(num(r, "predicted_s") - want), <=, 1e-12 * want);
  g_assert_cmpfloat(fabs(num(r, "error")), <=, 1e-9);
  json_object_put(v);
  remove_dir(dir);
}

/* The exit statuses the tests above hold validate to are the ones --help,
 * the README's validate reference and docs/model.md's exit statuses give. */
static void test_exit_documented(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "validate", "--help", NULL), ==, 0);
  g_auto(GStrv) help_lines = g_strsplit(out, "\n", -1);
  g_autofree char *help = g_strjoinv(" ", help_lines);
  g_assert_nonnull(strstr(help, "0 when every point ran, whatever its error"));
  g_assert_nonnull(strstr(help, "1 if a point could not be simulated"));
  g_assert_nonnull(strstr(help, "2 for a bad point file"));
  const char *top = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path = g_build_filename(top ? top : ".", "README.md", NULL);
  g_autofree char *model_path = g_build_filename(top ? top : ".", "docs", "model.md", NULL);
  g_autofree char *readme = NULL, *model = NULL;
  g_assert_true(g_file_get_contents(path, &readme, NULL, NULL));
  g_assert_true(g_file_get_contents(model_path, &model, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(readme, "\n", -1);
  g_autofree char *flat = g_strjoinv(" ", lines);
  const char *para = strstr(flat, "### podsim validate");
  g_assert_nonnull(para);
  g_assert_nonnull(strstr(para, "Exit status: 0 when every point ran, whatever its error; 1 if "
                                "a point could not be simulated"));
  g_auto(GStrv) model_lines = g_strsplit(model, "\n", -1);
  g_autofree char *model_flat = g_strjoinv(" ", model_lines);
  g_assert_nonnull(strstr(model_flat, "`validate` exits 1 when a point could not be simulated"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim = podsim_init();
  g_test_add_func("/validate/exact-errors", test_exact_errors);
  g_test_add_func("/validate/two-calibrations", test_two_calibrations);
  g_test_add_func("/validate/only", test_only);
  g_test_add_func("/validate/does-not-fit", test_does_not_fit);
  g_test_add_func("/validate/missing-field", test_missing_field);
  g_test_add_func("/validate/bad-values", test_bad_values);
  g_test_add_func("/validate/shipped", test_shipped);
  g_test_add_func("/validate/slow-set-loads", test_slow_set_loads);
  g_test_add_func("/validate/bert-v4-128-fits", test_bert_v4_fits);
  g_test_add_func("/validate/real-loop", test_real_loop);
  g_test_add_func("/validate/exit-documented", test_exit_documented);
  return g_test_run();
}

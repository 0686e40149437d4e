/* validate.c: `podsim validate` (see validate.h).
 *
 *   podsim validate [--json | --csv] [--dir DIR] [--only SUBSTRING]
 *
 * A point file (tests/measured/README.md) gives a run's shape (topology,
 * global_batch, precision), its measured step time and its source, and
 * names a timing-only base experiment ("experiment") with optional extra
 * overrides ("set").  The experiment is loaded with
 *   topology=T global_batch=B numerics.enabled=false strategy.replicas=null
 *   steps_per_run=2 steps=4 [numerics.precision=P]
 * and then the point's own "set", so the replicas are podsim's default
 * (every device of the slice) unless the point says otherwise.  It runs
 * with no trace: two host loops of two steps, the first (the warm-up loop)
 * left out of the step time.  When the point's "settings" give the real
 * run's steps_per_run (iterations per loop), its host round trip is spread
 * over that many steps: the prediction is the step time less the
 * simulated loop cost per step times (1 - simulated loop / real loop).
 * A point whose "set" gives steps_per_run but
 * not steps runs 2 x steps_per_run steps, at most MAX_STEPS (beyond
 * that there is no warm-up loop to leave out).  Points run on one thread
 * per processor, the costliest first; rows print in file-name order once
 * all have run.
 *
 * Invariant: every point file is read and every experiment loaded before
 * any point runs, so a bad file exits 2 with nothing on stdout; a point
 * that loads but cannot be simulated (it does not fit in HBM, its batch
 * does not divide) is a row with its message and no prediction, outside
 * the summary, and makes the exit status 1. */
#include "cli/validate.h"

#include "cli/cli-common.h"

#include "common/json.h"
#include "io/config.h"
#include "model/kernels.h"
#include "run/run.h"
#include "run/experiment.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define EXIT_INPUT 2
/* Steps per host loop when the point does not set it; the run is two
 * loops, the first one the warm-up. */
#define STEPS_PER_RUN 2
#define MAX_STEPS 8

typedef struct {
  char *file;
  char *name, *model, *topology, *precision, *experiment;
  char *source;            /* one line: round, submitter, system; or paper, table */
  char *generation;        /* the topology's TPU generation, once loaded */
  int64_t global_batch;
  double measured_s;
  gboolean calibration;
  int64_t loop_steps;      /* settings.steps_per_run of the real run, 0 if not given */
  int64_t sim_loop_steps;  /* steps_per_run of the simulation */
  GPtrArray *sets;         /* char *: the point's "set" */
  /* from loading and running */
  PsExperiment *exp;       /* loaded, until it has run; NULL if it cannot be */
  double cost;             /* devices x parameters: which points to start first */
  gboolean ran;
  double predicted_s;
  char *failure;           /* why there is no prediction */
} Point;

/* The median and worst |error| of the points that ran and are not
 * calibration points. */
typedef struct {
  guint summarized, failed;
  double median, worst;
  const Point *worst_point;
} Summary;

#define input_error(...) ps_cli_input_error("validate", __VA_ARGS__)

static void point_free(Point *p)
{
  if (!p)
    return;
  g_free(p->file);
  g_free(p->name);
  g_free(p->model);
  g_free(p->topology);
  g_free(p->precision);
  g_free(p->experiment);
  g_free(p->source);
  g_free(p->generation);
  if (p->sets)
    g_ptr_array_free(p->sets, TRUE);
  ps_experiment_free(p->exp);
  g_free(p->failure);
  g_free(p);
}

/* A required, non-empty string.  *out is (transfer none). */
static gboolean get_text(json_object *o, const char *file, const char *path, const char *key,
                         const char **out, GError **error)
{
  if (!ps_json_get_string(o, file, path, key, TRUE, out, error))
    return FALSE;
  if (**out)
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, key);
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: must not be empty", file, p);
  return FALSE;
}

/* "MLPerf v0.6, Google, tpu-v3-32 (16 chips, 32 TensorCores)" from
 * {"kind": "mlperf", "round", "submitter", "system"}, or "PAPER, TABLE"
 * from {"kind": "paper", "paper", "table"}.  (transfer full) */
static char *source_text(json_object *root, const char *file, GError **error)
{
  static const char *const kinds[] = {"mlperf", "paper", NULL};
  json_object *src = NULL;
  if (!json_object_object_get_ex(root, "source", &src) || !src) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY,
                "%s: (root): missing required key 'source'", file);
    return NULL;
  }
  int kind = 0;
  if (!ps_json_expect_object(src, file, "source", error) ||
      !ps_json_get_enum(src, file, "source", "kind", TRUE, kinds, &kind, error))
    return NULL;
  if (kind == 0) {
    const char *round = NULL, *submitter = NULL, *system = NULL;
    if (!get_text(src, file, "source", "round", &round, error) ||
        !get_text(src, file, "source", "submitter", &submitter, error) ||
        !get_text(src, file, "source", "system", &system, error))
      return NULL;
    return g_strdup_printf("MLPerf %s, %s, %s", round, submitter, system);
  }
  const char *paper = NULL, *table = NULL;
  if (!get_text(src, file, "source", "paper", &paper, error) ||
      !get_text(src, file, "source", "table", &table, error))
    return NULL;
  return g_strdup_printf("%s, %s", paper, table);
}

/* A point file's keys: those validate reads and those that document the
 * point (tests/measured/README.md); any other is a slip (a misspelt key
 * would be ignored). */
static const char *const point_keys[] = {
    "name",       "model",       "topology",  "global_batch", "precision",
    "experiment", "set",         "measured_step_s", "measured_step_range_s", "confidence",
    "uncertainty", "source",     "derivation", "settings",    "podsim",
    "calibration", "notes",      NULL};

/* Reads and checks one point file.  (transfer full) */
static Point *point_load(const char *path, GError **error)
{
  json_object *root = ps_json_load_file(path, error);
  if (!root)
    return NULL;
  Point *p = g_new0(Point, 1);
  p->file = g_strdup(path);
  p->sets = g_ptr_array_new_with_free_func(g_free);
  const char *name = NULL, *model = NULL, *topology = NULL, *experiment = NULL,
             *precision = NULL;
  if (!ps_json_expect_object(root, path, "", error) ||
      !ps_json_check_keys(root, path, "", point_keys, error) ||
      !get_text(root, path, "", "name", &name, error) ||
      !get_text(root, path, "", "model", &model, error) ||
      !get_text(root, path, "", "topology", &topology, error) ||
      !ps_json_get_int(root, path, "", "global_batch", TRUE, 1, INT64_MAX, &p->global_batch,
                       error) ||
      !ps_json_get_double(root, path, "", "measured_step_s", TRUE, 0, TRUE, INFINITY,
                          &p->measured_s, error) ||
      !get_text(root, path, "", "experiment", &experiment, error) ||
      !ps_json_get_string(root, path, "", "precision", FALSE, &precision, error) ||
      !ps_json_get_bool(root, path, "", "calibration", FALSE, &p->calibration, error))
    goto fail;
  p->source = source_text(root, path, error);
  if (!p->source)
    goto fail;
  json_object *settings = NULL;
  if (json_object_object_get_ex(root, "settings", &settings) && settings &&
      (!ps_json_expect_object(settings, path, "settings", error) ||
       !ps_json_get_int(settings, path, "settings", "steps_per_run", FALSE, 1, INT64_MAX,
                        &p->loop_steps, error)))
    goto fail;
  json_object *sets = NULL;
  if (json_object_object_get_ex(root, "set", &sets) && sets) {
    if (!json_object_is_type(sets, json_type_array)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE,
                  "%s: set: must be an array of \"key=value\" strings, got %s", path,
                  ps_json_type_name(sets));
      goto fail;
    }
    for (size_t i = 0; i < json_object_array_length(sets); i++) {
      json_object *v = json_object_array_get_idx(sets, i);
      const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
      const char *eq = s ? strchr(s, '=') : NULL;
      if (!eq || eq == s) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE,
                    "%s: set[%zu]: must be a \"key=value\" string such as \"steps_per_run=4\", "
                    "got %s",
                    path, i, s ? s : ps_json_type_name(v));
        goto fail;
      }
      g_ptr_array_add(p->sets, g_strdup(s));
    }
  }
  p->name = g_strdup(name);
  p->model = g_strdup(model);
  p->topology = g_strdup(topology);
  p->experiment = g_strdup(experiment);
  p->precision = g_strdup(precision);
  json_object_put(root);
  return p;
fail:
  json_object_put(root);
  point_free(p);
  return NULL;
}

/* Whether one of the point's overrides sets `key`. */
static gboolean sets_key(const Point *p, const char *key)
{
  for (guint i = 0; i < p->sets->len; i++) {
    const char *s = p->sets->pdata[i];
    g_autofree char *k = g_strndup(s, (gsize)(strchr(s, '=') - s));
    if (strcmp(g_strstrip(k), key) == 0)
      return TRUE;
  }
  return FALSE;
}

/* The experiment file the point names: a path is tried next to the point
 * file first, a name along the data search path.  (transfer full) */
static char *experiment_file(const Point *p, GError **error)
{
  const char *e = p->experiment;
  if ((strchr(e, '/') || g_str_has_suffix(e, ".json")) && !g_path_is_absolute(e)) {
    g_autofree char *dir = g_path_get_dirname(p->file);
    char *near = g_build_filename(dir, e, NULL);
    if (g_file_test(near, G_FILE_TEST_IS_REGULAR))
      return near;
    g_free(near);
  }
  char *found = ps_config_find("experiments", e, error);
  if (!found)
    g_prefix_error(error, "%s: experiment: ", p->file);
  return found;
}

/* The experiment with validate's overrides, then the point's.  (transfer
 * full) */
static PsExperiment *load_with(const char *file, const Point *p, int64_t steps, GError **error)
{
  GPtrArray *ov = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(ov, g_strdup_printf("topology=%s", p->topology));
  g_ptr_array_add(ov, g_strdup_printf("global_batch=%" G_GINT64_FORMAT, p->global_batch));
  g_ptr_array_add(ov, g_strdup("numerics.enabled=false"));
  g_ptr_array_add(ov, g_strdup("strategy.replicas=null"));
  g_ptr_array_add(ov, g_strdup_printf("steps_per_run=%d", STEPS_PER_RUN));
  g_ptr_array_add(ov, g_strdup_printf("steps=%" G_GINT64_FORMAT, steps));
  if (p->precision)
    g_ptr_array_add(ov, g_strdup_printf("numerics.precision=%s", p->precision));
  for (guint i = 0; i < p->sets->len; i++)
    g_ptr_array_add(ov, g_strdup(p->sets->pdata[i]));
  g_ptr_array_add(ov, NULL);
  PsExperiment *e = ps_experiment_load(file, (const char *const *)ov->pdata, error);
  g_ptr_array_free(ov, TRUE);
  return e;
}

/* Loads the point's experiment into p->exp.  FALSE: the point file is bad
 * (error set).  TRUE with p->exp NULL: the point's run cannot be simulated
 * as the file describes it, and p->failure says why. */
static gboolean point_prepare(Point *p, GError **error)
{
  g_autofree char *file = experiment_file(p, error);
  if (!file)
    return FALSE;
  GError *err = NULL;
  p->exp = load_with(file, p, 2 * STEPS_PER_RUN, &err);
  if (p->exp && !sets_key(p, "steps") && p->exp->steps_per_run != STEPS_PER_RUN) {
    int64_t want = MIN(2 * p->exp->steps_per_run, MAX_STEPS);
    if (want != p->exp->steps) {
      ps_experiment_free(p->exp);
      p->exp = load_with(file, p, want, &err);
    }
  }
  if (!p->exp) {
    if (err->domain == PS_INPUT_ERROR &&
        (err->code == PS_INPUT_ERROR_DOES_NOT_FIT || err->code == PS_INPUT_ERROR_VALUE)) {
      p->failure = g_strdup(err->message);
      g_error_free(err);
      /* its row still says its generation: the topology alone */
      PsTopology *t = ps_topology_load(p->topology, NULL, NULL);
      if (t) {
        p->generation = g_strdup(t->generation ? t->generation : "");
        ps_topology_free(t);
      }
      return TRUE;
    }
    g_propagate_prefixed_error(error, err, "%s: experiment '%s' with the point's overrides: ",
                               p->file, p->experiment);
    return FALSE;
  }
  if (strcmp(p->exp->model->name, p->model) != 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: model: '%s', but experiment '%s' runs model '%s'; name an experiment of "
                "'%s' or add \"model=%s\" to set",
                p->file, p->model, p->experiment, p->exp->model->name, p->model, p->model);
    return FALSE;
  }
  p->cost = (double)ps_experiment_devices_used(p->exp) * (double)p->exp->model->params;
  p->generation = g_strdup(p->exp->topology->generation ? p->exp->topology->generation : "");
  return TRUE;
}

/* A GThreadPool worker: runs one loaded point; touches only that point. */
static void run_point(gpointer data, gpointer user_data)
{
  Point *p = data;
  PsRunOptions opt = {0};
  PsSummary sum;
  GError *err = NULL;
  p->sim_loop_steps = p->exp->steps_per_run;
  if (ps_run(p->exp, &opt, &sum, &err)) {
    p->ran = TRUE;
    p->predicted_s = sum.step_time_s;
    /* the real run's loop: its host round trip is spread over loop_steps
     * steps, not the simulation's few (host_loop_s is that round trip per
     * simulated step) */
    if (p->loop_steps > p->sim_loop_steps)
      p->predicted_s -= sum.host_loop_s * (1.0 - (double)p->sim_loop_steps / (double)p->loop_steps);
  } else {
    p->failure = g_strdup(err->message);
    g_error_free(err);
  }
  ps_summary_clear(&sum);
  ps_experiment_free(p->exp);
  p->exp = NULL;
}

static gint by_cost_desc(gconstpointer a, gconstpointer b)
{
  const Point *pa = *(Point *const *)a, *pb = *(Point *const *)b;
  return pa->cost < pb->cost ? 1 : pa->cost > pb->cost ? -1 : 0;
}

/* Runs every loaded point, on one thread per processor. */
static gboolean run_all(GPtrArray *points, GError **error)
{
  g_autoptr(GPtrArray) todo = g_ptr_array_new();
  for (guint i = 0; i < points->len; i++)
    if (((Point *)points->pdata[i])->exp)
      g_ptr_array_add(todo, points->pdata[i]);
  if (todo->len == 0)
    return TRUE;
  g_ptr_array_sort(todo, by_cost_desc); /* the longest runs start first */
  ps_kernels_init(); /* once, before any thread runs a point */
  int threads = (int)MIN(g_get_num_processors(), todo->len);
  GThreadPool *pool = g_thread_pool_new(run_point, NULL, threads, TRUE, error);
  if (!pool)
    return FALSE;
  for (guint i = 0; i < todo->len; i++)
    g_thread_pool_push(pool, todo->pdata[i], NULL);
  g_thread_pool_free(pool, FALSE, TRUE); /* waits for every point */
  return TRUE;
}

static gint cmp_double(gconstpointer a, gconstpointer b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

static double rel_error(const Point *p)
{
  return p->predicted_s / p->measured_s - 1.0;
}

static Summary summarise(const GPtrArray *points)
{
  Summary s = {0};
  g_autoptr(GArray) abs_err = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    if (!p->ran) {
      s.failed++;
      continue;
    }
    if (p->calibration)
      continue;
    double e = fabs(rel_error(p));
    g_array_append_val(abs_err, e);
    if (!s.worst_point || e > s.worst) {
      s.worst = e;
      s.worst_point = p;
    }
  }
  s.summarized = abs_err->len;
  if (abs_err->len) {
    g_array_sort(abs_err, cmp_double);
    guint n = abs_err->len;
    double *v = (double *)(void *)abs_err->data;
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  return s;
}

/* The points of one TPU generation that ran and are not calibration
 * points: how many, their median |error| and their mean signed error
 * (which way podsim leans there). */
typedef struct {
  const char *generation;
  guint n;
  double median, mean;
} GenSummary;

static gint by_path(gconstpointer a, gconstpointer b);

/* One GenSummary per generation with such a point, by generation name
 * ("v2" < "v3" < ... < "v7").  (transfer full) */
static GArray *by_generation(const GPtrArray *points)
{
  GArray *out = g_array_new(FALSE, TRUE, sizeof(GenSummary));
  g_autoptr(GPtrArray) gens = g_ptr_array_new();
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    if (!p->ran || p->calibration || !p->generation)
      continue;
    gboolean seen = FALSE;
    for (guint k = 0; k < gens->len && !seen; k++)
      seen = strcmp(gens->pdata[k], p->generation) == 0;
    if (!seen)
      g_ptr_array_add(gens, p->generation);
  }
  g_ptr_array_sort(gens, by_path);
  for (guint k = 0; k < gens->len; k++) {
    g_autoptr(GArray) abs_err = g_array_new(FALSE, FALSE, sizeof(double));
    GenSummary g = {.generation = gens->pdata[k]};
    for (guint i = 0; i < points->len; i++) {
      const Point *p = points->pdata[i];
      if (!p->ran || p->calibration || !p->generation || strcmp(p->generation, g.generation))
        continue;
      double e = rel_error(p), a = fabs(e);
      g.mean += e;
      g_array_append_val(abs_err, a);
    }
    g.n = abs_err->len;
    g.mean /= g.n;
    g_array_sort(abs_err, cmp_double);
    double *v = (double *)(void *)abs_err->data;
    g.median = g.n % 2 ? v[g.n / 2] : 0.5 * (v[g.n / 2 - 1] + v[g.n / 2]);
    g_array_append_val(out, g);
  }
  return out;
}

static json_object *nullable_double(gboolean have, double v)
{
  return have ? ps_cli_json_exact_double(v) : NULL;
}

static void print_json(const GPtrArray *points, const Summary *s)
{
  json_object *o = json_object_new_object();
  json_object *rows = json_object_new_array();
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    json_object *r = json_object_new_object();
    json_object_object_add(r, "name", json_object_new_string(p->name));
    json_object_object_add(r, "model", json_object_new_string(p->model));
    json_object_object_add(r, "topology", json_object_new_string(p->topology));
    json_object_object_add(r, "global_batch", json_object_new_int64(p->global_batch));
    json_object_object_add(r, "predicted_s", nullable_double(p->ran, p->predicted_s));
    json_object_object_add(r, "measured_s", ps_cli_json_exact_double(p->measured_s));
    json_object_object_add(r, "error", nullable_double(p->ran, p->ran ? rel_error(p) : 0));
    json_object_object_add(r, "source", json_object_new_string(p->source));
    json_object_object_add(r, "calibration", json_object_new_boolean(p->calibration));
    json_object_object_add(r, "failure", p->failure && !p->ran
                                             ? json_object_new_string(p->failure)
                                             : NULL);
    json_object_array_add(rows, r);
  }
  json_object_object_add(o, "rows", rows);
  json_object_object_add(o, "median_abs_error", nullable_double(s->summarized > 0, s->median));
  json_object_object_add(o, "worst_abs_error", nullable_double(s->summarized > 0, s->worst));
  json_object_object_add(o, "failed", json_object_new_int((int)s->failed));
  g_autoptr(GArray) gens = by_generation(points);
  json_object *ga = json_object_new_array();
  for (guint k = 0; k < gens->len; k++) {
    const GenSummary *g = &g_array_index(gens, GenSummary, k);
    json_object *go = json_object_new_object();
    json_object_object_add(go, "generation", json_object_new_string(g->generation));
    json_object_object_add(go, "points", json_object_new_int((int)g->n));
    json_object_object_add(go, "median_abs_error", ps_cli_json_exact_double(g->median));
    json_object_object_add(go, "mean_error", ps_cli_json_exact_double(g->mean));
    json_object_array_add(ga, go);
  }
  json_object_object_add(o, "by_generation", ga);
  printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(o);
}

/* A CSV field: as is, or in double quotes (its quotes doubled) when it
 * holds a comma, a quote or a line break (RFC 4180). */
static void csv_field(const char *v, gboolean last)
{
  if (v && strpbrk(v, ",\"\r\n")) {
    putchar('"');
    for (const char *c = v; *c; c++) {
      if (*c == '"')
        putchar('"');
      putchar(*c);
    }
    putchar('"');
  } else if (v) {
    fputs(v, stdout);
  }
  putchar(last ? '\n' : ',');
}

/* v in the fewest significant digits (15 to 17) that read back as v. */
static void shortest(char *buf, size_t n, double v)
{
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, v);
    if (g_ascii_strtod(buf, NULL) == v)
      return;
  }
}

/* One row a point, the table's order; a point that did not run has empty
 * predicted_s and error and its failure; every double reads back exactly. */
static void print_csv(const GPtrArray *points)
{
  printf("name,model,topology,generation,global_batch,predicted_s,measured_s,error,"
         "calibration,source,failure\n");
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    char batch[32], pred[40] = "", meas[40], err[40] = "";
    snprintf(batch, sizeof batch, "%" G_GINT64_FORMAT, p->global_batch);
    shortest(meas, sizeof meas, p->measured_s);
    if (p->ran) {
      shortest(pred, sizeof pred, p->predicted_s);
      shortest(err, sizeof err, rel_error(p));
    }
    csv_field(p->name, FALSE);
    csv_field(p->model, FALSE);
    csv_field(p->topology, FALSE);
    csv_field(p->generation ? p->generation : "", FALSE);
    csv_field(batch, FALSE);
    csv_field(pred, FALSE);
    csv_field(meas, FALSE);
    csv_field(err, FALSE);
    csv_field(p->calibration ? "true" : "false", FALSE);
    csv_field(p->source, FALSE);
    csv_field(p->failure && !p->ran ? p->failure : "", TRUE);
  }
}

/* The footnote of several calibration points (one per TPU generation):
 * each one's error. */
static void print_calibration(const GPtrArray *points, guint n_cal)
{
  printf("* calibration points (podsim's knobs may be fitted to them), left out of the "
         "summary:");
  guint k = 0;
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    if (!p->calibration)
      continue;
    g_autofree char *err = p->ran ? g_strdup_printf("%+.1f%%", 100 * rel_error(p))
                                  : g_strdup("not simulated");
    printf("%s %s %s", k++ ? "," : "", p->name, err);
  }
  g_assert(k == n_cal);
  printf("\n");
}

static void print_table(const GPtrArray *points, const Summary *s, const char *dir)
{
  int wn = 4, wm = 5, wt = 8;
  const Point *cal = NULL;
  guint n_cal = 0;
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    wn = MAX(wn, (int)strlen(p->name) + (p->calibration ? 2 : 0));
    wm = MAX(wm, (int)strlen(p->model));
    wt = MAX(wt, (int)strlen(p->topology));
    if (p->calibration) {
      cal = p;
      n_cal++;
    }
  }
  printf("podsim validate: %u point%s in %s: predicted against measured step time\n\n",
         points->len, points->len == 1 ? "" : "s", dir);
  printf("%-*s  %-*s  %-*s  %12s  %13s  %12s  %8s  %s\n", wn, "name", wm, "model", wt,
         "topology", "global batch", "predicted(ms)", "measured(ms)", "error", "source");
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    g_autofree char *name = g_strconcat(p->name, p->calibration ? " *" : "", NULL);
    g_autofree char *pred = p->ran ? g_strdup_printf("%.3f", p->predicted_s * 1e3)
                                   : g_strdup("-");
    g_autofree char *err = p->ran ? g_strdup_printf("%+.1f%%", 100 * rel_error(p))
                                  : g_strdup("-");
    printf("%-*s  %-*s  %-*s  %12" G_GINT64_FORMAT "  %13s  %12.3f  %8s  %s\n", wn, name, wm,
           p->model, wt, p->topology, p->global_batch, pred, p->measured_s * 1e3, err,
           p->source);
    if (!p->ran)
      printf("    not simulated: %s\n", p->failure);
  }
  printf("\n");
  if (n_cal == 1 && cal->ran)
    printf("* calibration point (podsim's knobs may be fitted to it): %+.1f%%, left out of the "
           "summary\n",
           100 * rel_error(cal));
  else if (n_cal)
    print_calibration(points, n_cal);
  guint validation = points->len - n_cal;
  printf("%u validation point%s: %u predicted", validation, validation == 1 ? "" : "s",
         s->summarized);
  guint failed_validation = 0;
  for (guint i = 0; i < points->len; i++) {
    const Point *p = points->pdata[i];
    failed_validation += !p->ran && !p->calibration;
  }
  if (failed_validation)
    printf(", %u not simulated (left out)", failed_validation);
  printf("\n");
  if (s->summarized)
    printf("|error| over the %u predicted: median %.1f%%, worst %.1f%% (%s)\n", s->summarized,
           100 * s->median, 100 * s->worst, s->worst_point->name);
  g_autoptr(GArray) gens = by_generation(points);
  for (guint k = 0; k < gens->len && gens->len > 1; k++) {
    const GenSummary *g = &g_array_index(gens, GenSummary, k);
    printf("  %-4s %2u point%s: median |error| %.1f%%, mean error %+.1f%%\n", g->generation, g->n,
           g->n == 1 ? " " : "s", 100 * g->median, 100 * g->mean);
  }
}


static gint by_path(gconstpointer a, gconstpointer b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.json files of dir, sorted.  (transfer full) */
static GPtrArray *point_files(const char *dir, GError **error)
{
  GDir *d = g_dir_open(dir, 0, error);
  if (!d) {
    g_prefix_error(error, "--dir: ");
    return NULL;
  }
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  for (const char *e; (e = g_dir_read_name(d)) != NULL;) {
    if (e[0] == '.' || !g_str_has_suffix(e, ".json"))
      continue;
    char *full = g_build_filename(dir, e, NULL);
    if (g_file_test(full, G_FILE_TEST_IS_REGULAR))
      g_ptr_array_add(files, full);
    else
      g_free(full);
  }
  g_dir_close(d);
  g_ptr_array_sort(files, by_path);
  return files;
}

int ps_cli_validate(int argc, char **argv)
{
  g_autofree char *dir = NULL, *only = NULL;
  gboolean json = FALSE, csv = FALSE;
  GOptionEntry entries[] = {
      {"json", 'j', 0, G_OPTION_ARG_NONE, &json, "Print one JSON object instead of a table",
       NULL},
      {"csv", 0, 0, G_OPTION_ARG_NONE, &csv,
       "Print one CSV row a point (with a header) instead of a table", NULL},
      {"dir", 'd', 0, G_OPTION_ARG_FILENAME, &dir,
       "The point files (default: tests/measured of the data directory)", "DIR"},
      {"only", 'o', 0, G_OPTION_ARG_STRING, &only,
       "Only the points whose name contains SUBSTRING", "SUBSTRING"},
      {NULL}};
  g_set_prgname("podsim validate");
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("- predicted against published TPU step times");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Runs each measured point of tests/measured (a published TPU training step time)\n"
           "through its timing-only experiment at the point's topology and global batch, and\n"
           "prints predicted and measured step time, the signed error (predicted - measured)\n"
           "/ measured and the source, then the median and worst |error| over the points\n"
           "other than the calibration points (marked *: at most one per TPU generation,\n"
           "the point its topology file fits mxu_efficiency to). tests/measured/slow holds\n"
           "points kept apart for their simulation time (multislice rows of 16 and 32\n"
           "slices, minutes each): --dir with that folder runs them.\n"
           "Exit status: 0 when every point ran, whatever its error; 1 if a point could not\n"
           "be simulated (its row says why; the others still run and are summarised); 2 for\n"
           "a bad point file or option (nothing runs).");
  GError *error = NULL;
  int parse_status;
  if (!ps_cli_parse(ctx, "validate", &argc, &argv, &parse_status))
    return parse_status;
  if (argc > 1)
    return input_error("unexpected argument '%s' (see podsim validate --help)", argv[1]);
  if (json && csv)
    return input_error("--json and --csv: one output format at a time");
  if (!dir)
    dir = ps_cli_data_path("tests/measured", G_FILE_TEST_IS_DIR);

  g_autoptr(GPtrArray) files = point_files(dir, &error);
  if (!files) {
    int st = input_error("%s", error->message);
    g_error_free(error);
    return st;
  }
  if (files->len == 0)
    return input_error("%s: no point files (*.json)", dir);

  int status = 0;
  GPtrArray *points = g_ptr_array_new_with_free_func((GDestroyNotify)point_free);
  for (guint i = 0; i < files->len; i++) {
    Point *p = point_load(files->pdata[i], &error);
    if (!p)
      goto bad_input;
    if (only && !strstr(p->name, only))
      point_free(p);
    else
      g_ptr_array_add(points, p);
  }
  if (points->len == 0) {
    status = input_error("--only %s: no point in %s has a name containing it", only, dir);
    goto out;
  }
  for (guint i = 0; i < points->len; i++)
    if (!point_prepare(points->pdata[i], &error))
      goto bad_input;
  if (!run_all(points, &error)) {
    fprintf(stderr, "podsim: validate: %s\n", error->message);
    g_error_free(error);
    status = 1;
    goto out;
  }

  Summary s = summarise(points);
  if (json)
    print_json(points, &s);
  else if (csv)
    print_csv(points);
  else
    print_table(points, &s, dir);
  if (s.failed) {
    GString *names = g_string_new(NULL);
    for (guint i = 0; i < points->len; i++) {
      const Point *p = points->pdata[i];
      if (!p->ran)
        g_string_append_printf(names, "%s%s", names->len ? ", " : "", p->name);
    }
    fprintf(stderr, "podsim: validate: %u of %u point%s could not be simulated: %s\n", s.failed,
            points->len, points->len == 1 ? "" : "s", names->str);
    g_string_free(names, TRUE);
    status = 1;
  }
  goto out;

bad_input:
  status = input_error("%s", error->message);
  g_error_free(error);
out:
  g_ptr_array_free(points, TRUE);
  return status;
}

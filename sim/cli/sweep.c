/* sweep.c: `podsim sweep` (see sweep.h).
 *
 *   podsim sweep EXPERIMENT --vary KEY=V1,V2,... [--vary ...] [--set K=V]...
 *       --out FILE [--format csv|jsonl] [--jobs N] [--dry-run]
 *
 * Points are numbered in the order of nested loops over the --vary options,
 * the last one innermost.  Each point loads its own experiment (--set, then
 * its varied values, as --set overrides) and runs it with no trace and no
 * log; worker threads of a GThreadPool run points and hand their outcomes
 * through a GAsyncQueue to the calling thread, the only one that writes
 * the file or the terminal.  The Fashion-MNIST sets that numerics points
 * read are opened once per sweep, under a mutex, and shared read-only.
 * Rows carry no wall-clock field, so a sweep on N threads writes the rows
 * of one thread, in another order.
 *
 * Built with PS_WITH_MPI and started by an MPI launcher, the sweep runs on
 * every rank (sweep-mpi.c): rank 0 alone reads and writes --out and the
 * terminal.  It works out the points still to run, runs the ones the CSV
 * header waits for itself, as above, then hands out the rest one at a
 * time, to itself and the others, as each rank's points come back.  The other ranks run
 * theirs on their own thread pools and send each outcome back as JSON text
 * whose numbers keep the digits they were printed with, so rank 0 writes
 * the rows one process would have written.
 *
 * Invariant: the output file only ever grows by whole rows (one fwrite and
 * fflush each), the CSV header first and once; a point has a row only once
 * it finished, and a finished point's row is written before the writer
 * waits for another (in a fresh CSV, points that fail before the first one
 * runs wait for the header), so a re-run skips exactly the points done. */
#include "cli/sweep.h"

#include "cli/sweep-private.h"

#include "common/json.h"
#include "io/config.h"
#include "model/kernels.h"
#include "run/run.h"
#include "run/experiment.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_INPUT 2
#define MAX_POINTS 1000000
/* summary fields that measure the host running the simulator, not the
 * simulated pod: left out of rows so they repeat exactly */
static const char *const wall_clock_keys[] = {"wall_s", "events_per_s", NULL};

#define input_error(...) ps_cli_input_error("sweep", __VA_ARGS__)

static void vary_free(gpointer p)
{
  Vary *v = p;
  g_free(v->key);
  g_ptr_array_free(v->values, TRUE);
  g_free(v);
}

void ps_sweep_outcome_free(Outcome *o)
{
  if (o->flat)
    json_object_put(o->flat);
  g_free(o->error);
  g_free(o);
}

/* ---- values ----------------------------------------------------------- */

/* The whole of text as strict JSON, or FALSE; *out may be NULL (JSON null).
 * (transfer full) */
gboolean ps_sweep_parse_json_value(const char *text, json_object **out)
{
  json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  size_t len = strlen(text);
  /* the terminating NUL tells the tokener a bare number is complete */
  json_object *v = json_tokener_parse_ex(tok, text, (int)len + 1);
  gboolean ok = json_tokener_get_error(tok) == json_tokener_success &&
                json_tokener_get_parse_end(tok) >= len;
  json_tokener_free(tok);
  if (!ok) {
    if (v)
      json_object_put(v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* A value as the config reads it (JSON if it parses, else a string), in
 * one spelling, so that "64", 64 and "[2, 2]", [2,2] match on resume.
 * (transfer full) */
char *ps_sweep_canonical_json(json_object *v)
{
  if (v && json_object_is_type(v, json_type_string))
    return g_strdup(json_object_get_string(v));
  return g_strdup(v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE)
                    : "null");
}

char *ps_sweep_canonical_text(const char *text)
{
  json_object *v = NULL;
  if (!ps_sweep_parse_json_value(text, &v))
    return g_strdup(text);
  char *c = ps_sweep_canonical_json(v);
  if (v)
    json_object_put(v);
  return c;
}

/* Numbers a range prints: integers exactly, others to 15 significant
 * digits, which drops the rounding of A + i S (0.1:0.5:+0.1 gives 0.3, not
 * 0.30000000000000004).  (transfer full) */
static char *number_text(double x)
{
  if (fabs(x) < 9e15 && x == floor(x))
    return g_strdup_printf("%" G_GINT64_FORMAT, (gint64)x);
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.15g", x));
}

/* A number, or a quantity in the unit the key's name implies ("4MiB" for
 * a *_bytes key, "50GB/s" for *_Bps). */
static gboolean range_number(const char *key, const char *text, double *out)
{
  const char *leaf = strrchr(key, '.');
  return *text && ps_parse_quantity(leaf ? leaf + 1 : key, text, out) && isfinite(*out);
}

/* Appends A, A*F, ... or A, A+S, ... up to B when item is "A:B:xF" or
 * "A:B:+S"; FALSE (with *error unset) when item is not a range at all. */
static gboolean expand_range(const char *key, const char *item, GPtrArray *values,
                             GError **error)
{
  g_auto(GStrv) p = g_strsplit(item, ":", -1);
  if (g_strv_length(p) != 3 || (p[2][0] != 'x' && p[2][0] != '+'))
    return FALSE;
  double a, b, step;
  gboolean geometric = p[2][0] == 'x';
  if (!range_number(key, p[0], &a) || !range_number(key, p[1], &b) ||
      !(geometric ? range_number("", p[2] + 1, &step) : range_number(key, p[2] + 1, &step))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "--vary %s=%s: a range is A:B:xF (A, A*F, ... up to B) or A:B:+S (A, A+S, "
                "... up to B), with numbers (or quantities such as 4MiB for a *_bytes key)",
                key, item);
    return TRUE;
  }
  if (b < a || (geometric ? !(a > 0 && step > 1) : !(step > 0))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "--vary %s=%s: a range needs A <= B and %s", key, item,
                geometric ? "A > 0 and a factor F > 1" : "a step S > 0");
    return TRUE;
  }
  double tolerance = 1e-9 * MAX(fabs(a), fabs(b));
  for (guint i = 0;; i++) {
    double x = geometric ? a * pow(step, i) : a + step * i;
    if (x > b + tolerance)
      break;
    if (values->len >= MAX_POINTS) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "--vary %s=%s: more than %d values", key, item, MAX_POINTS);
      return TRUE;
    }
    g_ptr_array_add(values, number_text(x));
  }
  return TRUE;
}

/* Splits at the commas outside [], {} and "" so that array values such as
 * topology.torus.dims=[2,2],[4,4] stay whole.  (transfer full) */
static GPtrArray *split_items(const char *text)
{
  GPtrArray *items = g_ptr_array_new_with_free_func(g_free);
  int depth = 0;
  gboolean quoted = FALSE;
  const char *start = text;
  for (const char *c = text;; c++) {
    if (*c == '\0' || (*c == ',' && depth == 0 && !quoted)) {
      g_ptr_array_add(items, g_strstrip(g_strndup(start, (gsize)(c - start))));
      if (*c == '\0')
        break;
      start = c + 1;
    } else if (*c == '"' && (c == text || c[-1] != '\\')) {
      quoted = !quoted;
    } else if (!quoted && (*c == '[' || *c == '{')) {
      depth++;
    } else if (!quoted && (*c == ']' || *c == '}')) {
      depth--;
    }
  }
  return items;
}

/* "KEY=V1,V2,...", each item a value or a range.  (transfer full) */
static Vary *parse_vary(const char *arg, GError **error)
{
  const char *eq = strchr(arg, '=');
  g_autofree char *key = g_strstrip(g_strndup(arg, eq ? (gsize)(eq - arg) : strlen(arg)));
  if (!eq || !*key) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "--vary %s: expected KEY=V1,V2,... or KEY=A:B:xF or KEY=A:B:+S (e.g. "
                "global_batch=64:512:x2)",
                arg);
    return NULL;
  }
  Vary *v = g_new0(Vary, 1);
  v->key = g_steal_pointer(&key);
  v->values = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GPtrArray) items = split_items(eq + 1);
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < items->len; i++) {
    const char *item = items->pdata[i];
    GError *range_error = NULL;
    if (!*item) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "--vary %s: an empty value (two commas in a row, or one at an end)", arg);
      goto fail;
    }
    guint before = v->values->len;
    if (!expand_range(v->key, item, v->values, &range_error))
      g_ptr_array_add(v->values, g_strdup(item));
    if (range_error) {
      g_propagate_error(error, range_error);
      goto fail;
    }
    for (guint j = before; j < v->values->len; j++) {
      char *c = ps_sweep_canonical_text(v->values->pdata[j]);
      if (!g_hash_table_add(seen, c)) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "--vary %s: the value %s comes twice", v->key,
                    (char *)v->values->pdata[j]);
        goto fail;
      }
    }
  }
  return v;
fail:
  vary_free(v);
  return NULL;
}

/* ---- points ----------------------------------------------------------- */

const char *ps_sweep_point_value(const Sweep *sw, guint index, guint k)
{
  guint stride = 1;
  for (guint j = sw->varies->len; j-- > k + 1;)
    stride *= ((Vary *)sw->varies->pdata[j])->values->len;
  const Vary *v = sw->varies->pdata[k];
  return v->values->pdata[(index / stride) % v->values->len];
}

/* "global_batch=128 topology=tpu-v3-32".  (transfer full) */
char *ps_sweep_point_label(const Sweep *sw, guint index)
{
  GString *s = g_string_new(NULL);
  for (guint k = 0; k < sw->varies->len; k++)
    g_string_append_printf(s, "%s%s=%s", k ? " " : "", ((Vary *)sw->varies->pdata[k])->key,
                           ps_sweep_point_value(sw, index, k));
  return g_string_free(s, FALSE);
}

/* The point's canonical values, in --vary order; what resume matches on.
 * (transfer full) */
static char *point_key(const Sweep *sw, guint index)
{
  GString *s = g_string_new(NULL);
  for (guint k = 0; k < sw->varies->len; k++) {
    g_autofree char *c = ps_sweep_canonical_text(ps_sweep_point_value(sw, index, k));
    g_string_append_printf(s, "%s%s", k ? "\x1f" : "", c);
  }
  return g_string_free(s, FALSE);
}

int ps_sweep_vary_index(const Sweep *sw, const char *key)
{
  for (guint k = 0; k < sw->varies->len; k++)
    if (strcmp(((Vary *)sw->varies->pdata[k])->key, key) == 0)
      return (int)k;
  return -1;
}

/* The Fashion-MNIST sets a numerics point reads, opened by the first point
 * that needs them and shared by the rest. */
static gboolean point_datasets(Sweep *sw, const PsExperiment *exp, PsRunOptions *opt,
                               GError **error)
{
  if (!exp->numerics.enabled || exp->input.source != PS_SOURCE_FASHION_MNIST)
    return TRUE;
  gboolean ok = TRUE;
  g_mutex_lock(&sw->data_lock);
  for (int train = 1; train >= 0 && ok; train--) {
    if (!train && !exp->numerics.evaluate)
      break;
    g_autofree char *key = g_strdup_printf("%s\n%s", train ? "train" : "test",
                                           exp->input.data_dir);
    PsDataset *ds = g_hash_table_lookup(sw->datasets, key);
    if (!ds) {
      ds = ps_dataset_open_fashion_mnist(exp->input.data_dir, train, error);
      if (ds)
        g_hash_table_insert(sw->datasets, g_steal_pointer(&key), ds);
    }
    ok = ds != NULL;
    if (train)
      opt->fashion_train = ds;
    else
      opt->fashion_test = ds;
  }
  g_mutex_unlock(&sw->data_lock);
  return ok;
}

/* Copies src's fields into dst as "a", "b.c", ..., leaving out wall-clock
 * and varied keys. */
static void flatten(json_object *dst, const char *prefix, json_object *src, const Sweep *sw)
{
  json_object_object_foreach(src, k, v) {
    g_autofree char *name = prefix ? g_strconcat(prefix, ".", k, NULL) : g_strdup(k);
    if ((!prefix && g_strv_contains(wall_clock_keys, k)) || ps_sweep_vary_index(sw, name) >= 0)
      continue;
    if (v && json_object_is_type(v, json_type_object))
      flatten(dst, name, v, sw);
    else
      json_object_object_add(dst, name, json_object_get(v));
  }
}

/* Point index's overrides: --set, then each varied key at its value.
 * (transfer full: NULL-terminated) */
static GPtrArray *point_overrides(const Sweep *sw, guint index)
{
  GPtrArray *ov = g_ptr_array_new_with_free_func(g_free);
  for (char **s = sw->sets; s && *s; s++)
    g_ptr_array_add(ov, g_strdup(*s));
  for (guint k = 0; k < sw->varies->len; k++)
    g_ptr_array_add(ov, g_strdup_printf("%s=%s", ((Vary *)sw->varies->pdata[k])->key,
                                        ps_sweep_point_value(sw, index, k)));
  g_ptr_array_add(ov, NULL);
  return ov;
}

/* Whether a sweep's point is refused up front: a key the experiment does
 * not know (load_error), or a plan that compiles but whose step count
 * cannot fit the clock (ps_run_check).  *error is set then. */
static gboolean point_refused(PsExperiment *exp, GError *load_error, GError **error)
{
  if (g_error_matches(load_error, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY)) {
    g_propagate_error(error, load_error);
    return TRUE;
  }
  g_clear_error(&load_error);
  GError *check_error = NULL;
  if (!exp || ps_run_check(exp, NULL, &check_error))
    return FALSE;
  PsPlan *plan = ps_run_compile(exp, NULL); /* compiles: the steps failed */
  gboolean refused = plan != NULL;
  ps_plan_free(plan);
  if (refused)
    g_propagate_error(error, check_error);
  else
    g_error_free(check_error);
  return refused;
}

/* Before any point runs: the first point, and each value of each varied
 * key with the other keys at their first value, loaded.  A key the
 * experiment does not know (varied or set) is the command line's error,
 * the same at every point, and so is a step count past the clock; a value
 * that fails otherwise (an unknown topology, a batch that does not
 * divide) is its points' row. */
static gboolean sweep_check_keys(const Sweep *sw, GError **error)
{
  guint stride = sw->n_points;
  for (guint k = 0; k < sw->varies->len; k++) {
    const Vary *v = sw->varies->pdata[k];
    stride /= v->values->len;
    for (guint i = k == 0 ? 0 : 1; i < v->values->len; i++) {
      GPtrArray *ov = point_overrides(sw, i * stride);
      GError *load_error = NULL;
      PsExperiment *exp =
          ps_experiment_load(sw->experiment, (const char *const *)ov->pdata, &load_error);
      g_ptr_array_free(ov, TRUE);
      gboolean refused = point_refused(exp, load_error, error);
      ps_experiment_free(exp);
      if (refused)
        return FALSE;
    }
  }
  return TRUE;
}

static Outcome *point_run(Sweep *sw, guint index)
{
  Outcome *o = g_new0(Outcome, 1);
  o->index = index;
  gint64 t0 = g_get_monotonic_time();
  GPtrArray *ov = point_overrides(sw, index);
  GError *error = NULL;
  PsExperiment *exp = ps_experiment_load(sw->experiment, (const char *const *)ov->pdata, &error);
  g_ptr_array_free(ov, TRUE);
  PsRunOptions opt = {0};
  PsSummary sum;
  if (exp && point_datasets(sw, exp, &opt, &error) && ps_run(exp, &opt, &sum, &error)) {
    g_autofree char *text = ps_summary_to_json(exp, &sum);
    ps_summary_clear(&sum);
    json_object *root = json_tokener_parse(text);
    if (root) {
      o->flat = json_object_new_object();
      flatten(o->flat, NULL, root, sw);
      json_object_put(root);
    }
  }
  if (error) {
    o->error = g_strdup(error->message);
    g_error_free(error);
  } else if (!o->flat) {
    o->error = g_strdup("internal error: the run failed without a message");
  }
  ps_experiment_free(exp);
  o->wall_s = (double)(g_get_monotonic_time() - t0) / 1e6;
  return o;
}

void ps_sweep_pool_run(gpointer data, gpointer user_data)
{
  Sweep *sw = user_data;
  g_async_queue_push(sw->done, point_run(sw, GPOINTER_TO_UINT(data) - 1));
}

/* ---- the command ------------------------------------------------------ */

#ifdef PS_WITH_MPI
#define RANKS_HELP \
  "This podsim is built with MPI (make MPI=1): `mpirun -np K podsim sweep ...`\n" \
  "spreads the points over K processes (one per node, say, with --jobs threads\n" \
  "each).  Rank 0 reads --out, works out the points still to run, hands them out\n" \
  "as ranks free up, and alone writes the rows: those of one process, in another\n" \
  "order.  Run alone, it sweeps as one process.\n" \
  "\n"
#else
#define RANKS_HELP ""
#endif

static const char *const description =
    "KEY is any path --set takes: global_batch, topology, topology.torus.dims,\n"
    "topology.ici.bandwidth_Bps, input.workers, strategy.replicas,\n"
    "strategy.micro_batches, collective.chunk_bytes, numerics.precision, ...\n"
    "Each comma-separated item of a --vary is a value or a range: A:B:xF is A,\n"
    "A*F, A*F^2, ... up to B; A:B:+S is A, A+S, ... up to B (A and B may carry the\n"
    "key's unit, e.g. 256KiB:4MiB:x2).  Array values stay whole:\n"
    "--vary 'topology.torus.dims=[2,2],[4,4]'.\n"
    "\n"
    "Points are the Cartesian product of the --vary lists, the last one varying\n"
    "fastest.  Each point loads the experiment with --set, then its values, and\n"
    "runs it without a trace, with numerics only if the experiment has them on\n"
    "(Fashion-MNIST is then read once and shared by all points).  A row holds the\n"
    "varied values, every field of `podsim run --json` except the wall-clock ones\n"
    "(wall_s, events_per_s), nested ones flattened (breakdown.compute, ...), a\n"
    "list of names as its words (collective_on_core: all-reduce reduce-scatter\n"
    "all-gather), and an error column: empty, or why the point failed (bad\n"
    "config, does not fit, ...).  The CSV header is the varied keys, the fields\n"
    "of the first point that runs (alone, before the others start), then error;\n"
    "a field a later point adds is left out of the CSV with a warning, --format\n"
    "jsonl keeps it.\n"
    "\n"
    "Rows are appended as points finish.  Run the same command again to resume:\n"
    "points whose values already have a row in --out are skipped (failed ones\n"
    "too: delete a row to run its point again).  --jobs N runs N points at once;\n"
    "the rows are those of --jobs 1, in finishing order.  Progress goes to\n"
    "stderr.  Exit status: 0 every point ran, 1 some failed, 2 bad input.\n"
    "\n" RANKS_HELP
    "Example:\n"
    "  podsim sweep resnet50-v3-8 --vary global_batch=64:1024:x2 \\\n"
    "      --vary topology=tpu-v3-8,tpu-v3-32 --jobs 4 --out batch.csv";

/* The line a sweep starts with: its points, those already done, where the
 * others run. */
static void sweep_announce(const Sweep *sw, const Output *out, const GArray *todo, int jobs,
                           const Ranks *ranks)
{
  int threads = MIN(jobs, (int)MAX(todo->len, 1));
  g_autofree char *where = NULL;
  if (ranks->size > 1) {
    int all = 0;
    for (int k = 0; k < ranks->size; k++)
      all += ranks->threads[k];
    where = g_strdup_printf("%d ranks (%d thread%s in all)", ranks->size, all,
                            all == 1 ? "" : "s");
  } else {
    where = g_strdup_printf("%d thread%s", threads, threads == 1 ? "" : "s");
  }
  if (todo->len == 0)
    fprintf(stderr, "sweep: %u point%s, %u already in %s, none to run\n", sw->n_points,
            sw->n_points == 1 ? "" : "s", sw->n_points, out->path);
  else
    fprintf(stderr, "sweep: %u point%s, %u already in %s, %u to run on %s\n", sw->n_points,
            sw->n_points == 1 ? "" : "s", sw->n_points - todo->len, out->path, todo->len,
            where);
}

/* A fresh CSV needs its header before any row: points run here, in
 * order, from *next, until one gives the fields; the rows of those that
 * failed before it wait for it.  FALSE if the file could not be written. */
static gboolean sweep_run_header(Sweep *sw, Output *out, const GArray *todo, guint *next,
                                 Progress *prog, GError **error)
{
  GPtrArray *held = g_ptr_array_new_with_free_func((GDestroyNotify)ps_sweep_outcome_free);
  Outcome *first = NULL;
  while (*next < todo->len && !first) {
    Outcome *o = point_run(sw, g_array_index(todo, guint, (*next)++));
    ps_sweep_progress_point(prog, sw, o);
    if (o->flat)
      first = o;
    else
      g_ptr_array_add(held, o);
  }
  gboolean ok = ps_sweep_output_header(out, sw, first, error);
  for (guint h = 0; h < held->len && ok; h++)
    ok = ps_sweep_output_row(out, sw, held->pdata[h], error);
  if (ok && first)
    ok = ps_sweep_output_row(out, sw, first, error);
  g_ptr_array_free(held, TRUE);
  if (first)
    ps_sweep_outcome_free(first);
  return ok;
}

/* The points of todo from next on, on this process's --jobs threads, each
 * row written as its point comes back.  FALSE if one could not be: the
 * points not started are dropped, the others waited for. */
static gboolean sweep_run_pool(Sweep *sw, Output *out, const GArray *todo, guint next, int jobs,
                               Progress *prog, GError **error)
{
  GThreadPool *pool =
      g_thread_pool_new(ps_sweep_pool_run, sw, MIN(jobs, (int)(todo->len - next)), TRUE, error);
  if (!pool)
    return FALSE;
  for (guint t = next; t < todo->len; t++)
    g_thread_pool_push(pool, GUINT_TO_POINTER(g_array_index(todo, guint, t) + 1), NULL);
  for (guint got = next; got < todo->len;) {
    Outcome *o = prog->tty ? g_async_queue_timeout_pop(sw->done, G_USEC_PER_SEC)
                           : g_async_queue_pop(sw->done);
    if (!o) {
      ps_sweep_progress_draw(prog);
      continue;
    }
    got++;
    ps_sweep_progress_point(prog, sw, o);
    gboolean ok = ps_sweep_output_row(out, sw, o, error);
    ps_sweep_outcome_free(o);
    if (!ok) {
      g_thread_pool_free(pool, TRUE, TRUE);
      return FALSE;
    }
  }
  g_thread_pool_free(pool, FALSE, TRUE);
  return TRUE;
}

/* Runs the points of todo, appending their rows; the exit status. */
static int sweep_run(Sweep *sw, Output *out, const GArray *todo, guint failed_before, int jobs,
                     const Ranks *ranks)
{
  GError *error = NULL;
  int status = 0;
  sweep_announce(sw, out, todo, jobs, ranks);
  ps_kernels_init(); /* once here, before any thread runs a point */
  Progress prog = {.tty = isatty(fileno(stderr)), .total = todo->len,
                   .t0 = g_get_monotonic_time()};
  guint next = 0;
  if (out->format == FORMAT_CSV && !out->columns &&
      !sweep_run_header(sw, out, todo, &next, &prog, &error))
    goto fail;
#ifdef PS_WITH_MPI
  if (ranks->size > 1 && next < todo->len) {
    if (!ps_sweep_mpi_lead(sw, out, todo, next, ranks, &prog, &error))
      goto fail;
    next = todo->len;
  }
#endif
  if (next < todo->len && !sweep_run_pool(sw, out, todo, next, jobs, &prog, &error))
    goto fail;
  if (prog.tty)
    fprintf(stderr, "\n");
  guint failed = failed_before + prog.failed;
  if (!failed) {
    fprintf(stderr, "sweep: %u point%s in %s\n", sw->n_points, sw->n_points == 1 ? "" : "s",
            out->path);
  } else {
    g_autofree char *before =
        failed_before ? g_strdup_printf(" (%u in an earlier run)", failed_before) : g_strdup("");
    fprintf(stderr, "podsim: sweep: %u of %u point%s failed%s: see the error column of %s\n",
            failed, sw->n_points, sw->n_points == 1 ? "" : "s", before, out->path);
    status = 1;
  }
#ifdef PS_WITH_MPI
  if (ranks->size > 1)
    ps_sweep_mpi_stop(ranks, status);
#endif
  return status;

fail:
  fprintf(stderr, "%spodsim: sweep: %s\n", prog.tty ? "\n" : "", error->message);
  /* an output that cannot be written (full, gone) is the user's to fix */
  status = error->domain == G_FILE_ERROR ? EXIT_INPUT : 1;
  g_error_free(error);
#ifdef PS_WITH_MPI
  if (ranks->size > 1) /* the other ranks may be mid-point: stop them all */
    ps_sweep_mpi_abort();
#endif
  return status;
}

/* The --vary options, checked against each other and against --set. */
gboolean ps_sweep_add_varies(Sweep *sw, char **vary_args, GError **error)
{
  for (char **a = vary_args; *a; a++) {
    Vary *v = parse_vary(*a, error);
    if (!v)
      return FALSE;
    g_ptr_array_add(sw->varies, v);
    if (ps_sweep_vary_index(sw, v->key) != (int)sw->varies->len - 1) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "--vary %s comes twice; give all its values in one --vary", v->key);
      return FALSE;
    }
    for (char **s = sw->sets; s && *s; s++) {
      const char *eq = strchr(*s, '=');
      g_autofree char *k = g_strstrip(g_strndup(*s, eq ? (gsize)(eq - *s) : strlen(*s)));
      if (strcmp(k, v->key) == 0) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "%s is both set (--set %s) and varied: drop one", v->key, *s);
        return FALSE;
      }
    }
    if (sw->n_points > MAX_POINTS / v->values->len) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "more than %d points: vary fewer keys or values", MAX_POINTS);
      return FALSE;
    }
    sw->n_points *= v->values->len;
  }
  return TRUE;
}

void ps_sweep_options_clear(Options *o)
{
  g_strfreev(o->vary_args);
  g_strfreev(o->sets);
  g_free(o->out_path);
  g_free(o->format_name);
}

/* Fills o from the command line; 0, or EXIT_INPUT after a message. */
int ps_sweep_options_parse(Options *o, int argc, char **argv)
{
  o->jobs = G_MININT; /* left out: 1 */
  GOptionEntry entries[] = {
      {"vary", 'v', 0, G_OPTION_ARG_STRING_ARRAY, &o->vary_args,
       "A key and its values: KEY=V1,V2,... or KEY=A:B:xF or KEY=A:B:+S (repeatable)",
       "KEY=VALUES"},
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &o->sets,
       "Override a config field at every point (repeatable)", "PATH=VALUE"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &o->out_path,
       "The file rows are appended to (required; resumed if it exists)", "FILE"},
      {"format", 'f', 0, G_OPTION_ARG_STRING, &o->format_name,
       "csv or jsonl (default: jsonl for a .jsonl FILE, else csv)", "FORMAT"},
      {"jobs", 'j', 0, G_OPTION_ARG_INT, &o->jobs,
       "Points to run at once (default 1; 0: one per processor)", "N"},
      {"dry-run", 'n', 0, G_OPTION_ARG_NONE, &o->dry_run,
       "Print the points that would run, one a line, and run none", NULL},
      {NULL}};
  g_set_prgname("podsim sweep");
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("EXPERIMENT - run an experiment over a grid of config values");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Runs EXPERIMENT once per point of the product of the --vary lists and writes\n"
           "a row per point (values, summary, error) to --out, as CSV or JSON lines.");
  g_option_context_set_description(ctx, description);
  int parse_status;
  if (!ps_cli_parse(ctx, "sweep", &argc, &argv, &parse_status))
    return parse_status;
  if (argc != 2)
    return input_error("sweep needs exactly one EXPERIMENT%s (see podsim sweep --help)",
                       argc > 2 ? " (extra arguments)" : "");
  o->experiment = argv[1];
  if (!o->vary_args)
    return input_error("give at least one --vary KEY=V1,V2,... (see podsim sweep --help)");
  if (!o->out_path && !o->dry_run)
    return input_error("--out FILE is required (rows are appended to it as points finish)");
  if (o->out_path && !*o->out_path)
    return input_error("--out needs a file name");
  o->format = FORMAT_CSV;
  if (o->format_name && strcmp(o->format_name, "jsonl") == 0)
    o->format = FORMAT_JSONL;
  else if (o->format_name && strcmp(o->format_name, "csv") != 0)
    return input_error("--format %s: choose csv or jsonl", o->format_name);
  else if (!o->format_name && o->out_path && g_str_has_suffix(o->out_path, ".jsonl"))
    o->format = FORMAT_JSONL;
  if (o->dry_run && o->jobs != G_MININT)
    return input_error("--jobs %d: --dry-run runs no point, so it needs no threads", o->jobs);
  if (o->jobs == G_MININT)
    o->jobs = 1;
  if (o->jobs < 0)
    return input_error("--jobs %d: give a number of threads, or 0 for one per processor",
                       o->jobs);
  if (o->jobs == 0)
    o->jobs = (int)g_get_num_processors();
  return 0;
}

void ps_sweep_init(Sweep *sw, const Options *o)
{
  *sw = (Sweep){.experiment = o->experiment, .sets = o->sets, .n_points = 1};
  sw->varies = g_ptr_array_new_with_free_func(vary_free);
  sw->datasets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free,
                                       (GDestroyNotify)ps_dataset_free);
  sw->done = g_async_queue_new_full((GDestroyNotify)ps_sweep_outcome_free);
  g_mutex_init(&sw->data_lock);
}

void ps_sweep_clear(Sweep *sw)
{
  g_async_queue_unref(sw->done);
  g_hash_table_destroy(sw->datasets);
  g_mutex_clear(&sw->data_lock);
  g_ptr_array_free(sw->varies, TRUE);
}

/* The sweep as rank 0 (or the only process) runs it; the exit status. */
int ps_sweep_lead(int argc, char **argv, Ranks *ranks)
{
  Options o = {0};
  int status = ps_sweep_options_parse(&o, argc, argv);
  if (status) {
    ps_sweep_options_clear(&o);
    return status;
  }
  g_autofree char *found = NULL;
  GError *error = NULL;
  Sweep sw;
  ps_sweep_init(&sw, &o);
  Output out = {.path = o.out_path, .format = o.format};
  out.finished = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GArray *todo = g_array_new(FALSE, FALSE, sizeof(guint));
  guint failed_before = 0;

  if (!ps_sweep_add_varies(&sw, o.vary_args, &error) ||
      !(found = ps_config_find("experiments", sw.experiment, &error)) ||
      !sweep_check_keys(&sw, &error) ||
      (o.out_path && !ps_sweep_output_read(&out, &sw, &error))) {
    status = input_error("%s", error->message);
    g_error_free(error);
    goto out;
  }
  for (guint i = 0; i < sw.n_points; i++) {
    g_autofree char *key = point_key(&sw, i);
    gpointer seen = g_hash_table_lookup(out.finished, key);
    if (!seen)
      g_array_append_val(todo, i);
    failed_before += GPOINTER_TO_INT(seen) == 2;
  }
  if (o.dry_run) {
    if (out.cut_at >= 0)
      fprintf(stderr, "podsim: sweep: %s: its last row was cut short by an interrupted sweep; "
                      "a run would drop it and run its point again\n", out.path);
    for (guint t = 0; t < todo->len; t++) {
      g_autofree char *label = ps_sweep_point_label(&sw, g_array_index(todo, guint, t));
      printf("%s\n", label);
    }
  } else if (out.columns && out.columns->len == sw.varies->len + 1 && todo->len > 0) {
    status = input_error("%s holds only failed points (its header has no summary fields): "
                         "remove it to start again",
                         out.path);
  } else if (!ps_sweep_output_open(&out, &error)) {
    status = input_error("%s", error->message);
    g_error_free(error);
  } else {
#ifdef PS_WITH_MPI
    if (ranks->size > 1)
      ps_sweep_mpi_start(ranks, o.jobs);
#endif
    status = sweep_run(&sw, &out, todo, failed_before, o.jobs, ranks);
    fclose(out.f);
  }
out:
  if (out.columns)
    g_ptr_array_free(out.columns, TRUE);
  g_hash_table_destroy(out.finished);
  g_array_free(todo, TRUE);
  ps_sweep_clear(&sw);
  ps_sweep_options_clear(&o);
  return status;
}

#ifndef PS_WITH_MPI
/* The processes an MPI launcher started us among, 1 if none did. */
static int launched_processes(void)
{
  const char *n = g_getenv("OMPI_COMM_WORLD_SIZE");
  if (!n)
    n = g_getenv("PMI_SIZE");
  return n ? MAX(atoi(n), 1) : 1;
}
#endif

int ps_cli_sweep(int argc, char **argv)
{
#ifdef PS_WITH_MPI
  return ps_sweep_mpi_main(argc, argv);
#else
  Ranks ranks = {.rank = 0, .size = 1};
  int n = launched_processes();
  if (n > 1)
    return input_error("this podsim was built without MPI, so each of the %d processes "
                       "mpirun started would run the whole sweep and write --out: build it "
                       "with `make MPI=1` to spread the points over them, or run one podsim",
                       n);
  return ps_sweep_lead(argc, argv, &ranks);
#endif
}

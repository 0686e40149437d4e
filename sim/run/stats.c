/* stats.c: the run's statistics and its summary (see run.h): time per
 * category per device over the measured steps, the collectives' votes for
 * the reporting device, MXU FLOPs, live activation bytes, collective time
 * per mesh axis (exposed and busy), and the summary they make, as JSON or
 * as a table.
 * Invariant: every moment of a device's measured steps is in exactly one
 * category, so the reporting device's breakdown sums to its step time
 * ("other" takes what no op or wait accounts for); a device's collective
 * category is the sum of its exposed time over the axes. */
#include "run-private.h"

#include <math.h>
#include <string.h>

/* Time some collective of an axis was in flight on a device: a device's
 * spans of one axis merged as they end, disjoint and in order. */
typedef struct {
  ps_time_t start, end;
} Span;

static double *cat_of(Run *r, int device)
{
  return &r->cat[(size_t)device * PS_TIME_N_CATEGORIES];
}

void ps_run_stats_init(Run *r)
{
  r->cat = g_new0(double, (size_t)r->n_dev * PS_TIME_N_CATEGORIES);
  r->loop_wait = g_new0(double, r->n_dev);
  r->mxu_flops = g_new0(double, r->n_dev);
  r->t0 = g_new0(ps_time_t, r->n_dev);
  r->t1 = g_new0(ps_time_t, r->n_dev);
  r->live = g_new0(int64_t, r->n_dev);
  r->peak = g_new0(int64_t, r->n_dev);
  r->votes = g_new0(int64_t, r->n_dev);
  r->axis_exposed = g_new0(double, (size_t)r->n_dev * PS_N_AXES);
  r->axis_busy = g_new0(double, (size_t)r->n_dev * PS_N_AXES);
  r->coll_wait = g_new0(double, r->n_dev);
  r->spans = g_new0(GArray *, (size_t)r->n_dev * PS_N_AXES); /* made when first used */
}

void ps_run_stats_free(Run *r)
{
  g_free(r->cat);
  g_free(r->loop_wait);
  g_free(r->mxu_flops);
  g_free(r->t0);
  g_free(r->t1);
  g_free(r->votes);
  g_free(r->live);
  g_free(r->peak);
  g_free(r->axis_exposed);
  g_free(r->axis_busy);
  g_free(r->coll_wait);
  for (size_t i = 0; r->spans && i < (size_t)r->n_dev * PS_N_AXES; i++)
    if (r->spans[i])
      g_array_free(r->spans[i], TRUE);
  g_free(r->spans);
}

void ps_run_stats_op_done(Run *r, int device, int64_t step, const PsOp *op, PsTimeCategory c,
                          ps_time_t start, ps_time_t end)
{
  if (step >= r->warm) {
    cat_of(r, device)[c] += ps_time_to_s(end - start);
    r->mxu_flops[device] += op->mxu_flops;
  }
  /* a COLL_DONE's wait (reported just before the op ends) and the op's
   * own time go to its collective's axis */
  int coll = ps_plan_op_coll(r->plan, device, op);
  if (step >= r->warm && c == PS_TIME_COLLECTIVE && coll >= 0) {
    PsAxis a = r->plan->colls[coll].axis;
    r->axis_exposed[(size_t)device * PS_N_AXES + a] +=
        ps_time_to_s(end - start) + r->coll_wait[device];
    r->coll_wait[device] = 0;
  }
  if (op->act_bytes != 0) {
    r->live[device] += op->act_bytes;
    r->peak[device] = MAX(r->peak[device], r->live[device]);
  }
}

void ps_run_stats_wait(Run *r, int device, int64_t step, PsTimeCategory why, const char *what,
                       ps_time_t start, ps_time_t end)
{
  if (end <= start || step < r->warm)
    return;
  cat_of(r, device)[why] += ps_time_to_s(end - start);
  if (why == PS_TIME_COLLECTIVE)
    r->coll_wait[device] += ps_time_to_s(end - start);
  if (strcmp(what, PS_WAIT_HOST_LOOP) == 0)
    r->loop_wait[device] += ps_time_to_s(end - start);
}

/* A collective's span [start, end] on the device joins its axis's merged
 * spans: spans end in order (a collective is done when its event runs), so
 * it swallows the last merged spans that reach its start. */
void ps_run_stats_coll_done(Run *r, int device, int64_t step, int c, ps_time_t start,
                            ps_time_t end)
{
  if (step < r->warm || end <= start)
    return;
  GArray **at = &r->spans[(size_t)device * PS_N_AXES + r->plan->colls[c].axis];
  if (!*at)
    *at = g_array_new(FALSE, FALSE, sizeof(Span));
  GArray *a = *at;
  g_return_if_fail(a->len == 0 || end >= g_array_index(a, Span, a->len - 1).end);
  while (a->len > 0 && g_array_index(a, Span, a->len - 1).end >= start) {
    start = MIN(start, g_array_index(a, Span, a->len - 1).start);
    g_array_set_size(a, a->len - 1);
  }
  Span sp = {start, end};
  g_array_append_val(a, sp);
}

/* The step's merged spans of each axis: the time at least one of the
 * axis's collectives was in flight on the device. */
static void book_spans(Run *r, int device)
{
  double *busy = &r->axis_busy[(size_t)device * PS_N_AXES];
  for (int ax = 0; ax < PS_N_AXES; ax++) {
    GArray *a = r->spans[(size_t)device * PS_N_AXES + ax];
    for (guint i = 0; a && i < a->len; i++)
      busy[ax] += ps_time_to_s(g_array_index(a, Span, i).end - g_array_index(a, Span, i).start);
    if (a)
      g_array_set_size(a, 0);
  }
}

void ps_run_stats_step_done(Run *r, int device, int64_t step, ps_time_t end)
{
  book_spans(r, device);
  if (step == r->warm - 1)
    r->t0[device] = end;
  if (step == r->exp->steps - 1)
    r->t1[device] = end;
  StepState *st = ps_run_step_state(r, step);
  if (++st->done < r->n_dev)
    return;
  /* every device is past the step: vote for the one its collectives waited for */
  if (step >= r->warm && st->critical >= 0 &&
      ++r->votes[st->critical] > r->votes[r->voted])
    r->voted = st->critical;
  g_hash_table_remove(r->open_steps, &step);
}

void ps_run_stats_coll_arrived(Run *r, int64_t step, int last)
{
  ps_run_step_state(r, step)->critical = last;
}


/* The device whose view the breakdown gives.  Replicas: the one the
 * step's last collective most often waited for (device 0 without
 * collectives).  A pipeline: the busiest device (most compute, the first
 * on ties), the stage that sets the pace; its idle time is the bubble the
 * schedule and the partition leave. */
static int reporting_device(Run *r)
{
  if (ps_plan_axis_size(r->plan, PS_AXIS_STAGE) <= 1)
    return r->voted;
  int best = 0;
  for (int d = 1; d < r->n_dev; d++)
    if (cat_of(r, d)[PS_TIME_COMPUTE] > cat_of(r, best)[PS_TIME_COMPUTE])
      best = d;
  return best;
}

static void summarise(Run *r, PsSummary *s)
{
  const PsExperiment *exp = r->exp;
  int64_t steps = exp->steps;
  s->steps = steps;
  s->measured_steps = steps - r->warm;
  int d = reporting_device(r);
  s->reporting_device = d;
  /* the device's measured steps: after a warm-up loop, from its end of
   * that loop to its end of the last step, which in a steady state holds
   * one wait at a loop's end for the slice's other devices per loop; in a
   * single loop, from 0 to the moment every device is past the last step,
   * since no next loop holds that wait: the reporting device's lag behind
   * the slice (a pipeline's first stages draining after its last stages
   * are done, a multislice all-reduce completing apart) is its wait for
   * the others, the bubble in a pipeline */
  ps_time_t t0 = r->t0[d], t1 = r->t1[d], end = 0;
  for (int i = 0; i < r->n_dev; i++)
    end = MAX(end, r->t1[i]);
  if (r->warm == 0)
    t1 = end;
  double measured = ps_time_to_s(t1 - t0);
  double lag = ps_time_to_s(t1 - r->t1[d]);
  s->step_time_s = measured / (double)s->measured_steps;
  s->end_wait_s = MAX(0.0, lag) / (double)s->measured_steps;
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
    s->breakdown[c] = cat_of(r, d)[c] / (double)s->measured_steps;
    if (c == PS_TIME_PIPELINE_BUBBLE && ps_plan_axis_size(r->plan, PS_AXIS_STAGE) > 1)
      s->breakdown[c] += s->end_wait_s;
    if (c != PS_TIME_OTHER)
      sum += s->breakdown[c];
  }
  s->host_loop_s = r->loop_wait[d] / (double)s->measured_steps;
  /* "other" is what no op or wait accounts for: the INFEED dequeue, and
   * rounding of the sum of picoseconds turned into seconds */
  s->breakdown[PS_TIME_OTHER] = MAX(0.0, s->step_time_s - sum);
  s->examples_per_s = (double)exp->global_batch / s->step_time_s;
  s->mxu_utilization = r->mxu_flops[d] / (measured * ps_topology_device_peak_flops(exp->topology));
  const PsProgram *prog = ps_plan_program(r->plan, d);
  for (int i = 0; i < prog->n_ops; i++) {
    s->compute_mxu_s += prog->ops[i].mxu_s;
    s->compute_serial_s += prog->ops[i].serial_s;
    s->compute_memory_s += prog->ops[i].memory_s;
    s->compute_overhead_s += prog->ops[i].overhead_s;
    if (prog->ops[i].kind == PS_OP_COPY_START)
      *(prog->ops[i].to_host ? &s->copy_up_bytes : &s->copy_down_bytes) += prog->ops[i].bytes;
  }
  int64_t peak = 0;
  for (int i = 0; i < r->n_dev; i++)
    peak = MAX(peak, ps_plan_program(r->plan, i)->hbm_static_bytes + r->peak[i]);
  s->hbm_peak_bytes = peak;
  s->sim_time_s = ps_time_to_s(end);
  s->devices = r->n_dev;
  s->replicas = ps_plan_axis_size(r->plan, PS_AXIS_DATA);
  s->stages = ps_plan_axis_size(r->plan, PS_AXIS_STAGE);
  s->pipelined = ps_plan_has_axis(r->plan, PS_AXIS_STAGE);
  s->micro_batches = r->plan->micro_batches;
  s->buckets = r->plan->n_buckets;
}

/* Tokens, MFU and HFU (run.h).  PaLM's MFU (Chowdhery et al. 2022,
 * appendix B): model FLOPs per second over the peak of the chips used;
 * its HFU counts the FLOPs executed, re-materialization included. */
static void summarise_flops(Run *r, PsSummary *s)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  if (m->token_input && m->in_rank == 1) {
    s->sequence = m->in_shape[0];
    s->tokens_per_s = s->examples_per_s * (double)s->sequence;
  }
  int per_chip = ps_topology_devices_per_chip(exp->topology);
  s->chips = (r->n_dev + per_chip - 1) / per_chip;
  double peak = s->step_time_s * (double)s->chips * exp->topology->peak_flops;
  s->model_flops_per_step = ps_model_flops_per_example(m) * (double)exp->global_batch;
  double executed = 0;
  for (int d = 0; d < r->n_dev; d++)
    executed += r->mxu_flops[d];
  executed /= (double)s->measured_steps;
  s->mfu = peak > 0 ? s->model_flops_per_step / peak : 0;
  s->hfu = peak > 0 ? executed / peak : 0;
  s->model_flops_causal_per_step =
      ps_model_flops_causal_halved_per_example(m) * (double)exp->global_batch;
  s->mfu_causal = peak > 0 ? s->model_flops_causal_per_step / peak : 0;
  s->tflops_per_device = s->step_time_s > 0 && r->n_dev > 0
                             ? s->model_flops_causal_per_step / s->step_time_s /
                                   (double)r->n_dev / 1e12
                             : 0;
}

/* Collective time per axis, the mean over devices of each one's per step. */
static void summarise_axes(Run *r, PsSummary *s)
{
  for (int c = 0; c < r->plan->n_colls; c++) {
    const PsPlanColl *pc = &r->plan->colls[c];
    s->axis_colls[pc->axis]++;
    s->axis_colls_per_device[pc->axis] += (double)pc->n_members / (double)r->n_dev;
  }
  double n = (double)r->n_dev * (double)s->measured_steps;
  for (int a = 0; a < PS_N_AXES; a++) {
    for (int d = 0; d < r->n_dev; d++) {
      s->axis_exposed_s[a] += r->axis_exposed[(size_t)d * PS_N_AXES + a];
      s->axis_busy_s[a] += r->axis_busy[(size_t)d * PS_N_AXES + a];
    }
    s->axis_exposed_s[a] /= n;
    s->axis_busy_s[a] /= n;
  }
}

static void summarise_host_calls(Run *r, PsSummary *s)
{
  const PsExperiment *exp = r->exp;
  if (exp->n_host_calls == 0)
    return;
  json_object *arr = json_object_new_array();
  for (int i = 0; i < exp->n_host_calls; i++) {
    const PsHostCall *hc = &exp->host_calls[i];
    const PsHistogram *h = &r->histograms[i];
    json_object *o = json_object_new_object();
    json_object_object_add(o, "after", json_object_new_string(exp->model->layers[hc->after].name));
    json_object_object_add(o, "kind", json_object_new_string(
                                          hc->kind == PS_HOST_CALL_HISTOGRAM ? "histogram"
                                                                             : "roundtrip"));
    json_object_object_add(o, "calls_per_step", json_object_new_int(r->n_dev));
    if (h->counts) {
      json_object_object_add(o, "min", json_object_new_double(h->lo));
      json_object_object_add(o, "max", json_object_new_double(h->hi));
      json_object *c = json_object_new_array();
      for (int b = 0; b < hc->bins; b++)
        json_object_array_add(c, json_object_new_int64(h->counts[b]));
      json_object_object_add(o, "last_histogram", c);
    }
    json_object_array_add(arr, o);
  }
  s->host_calls_json = g_strdup(json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN));
  json_object_put(arr);
}

void ps_run_stats_summarise(Run *r, PsSummary *s)
{
  summarise(r, s);
  summarise_flops(r, s);
  summarise_axes(r, s);
  s->collective_algorithm =
      r->plan->n_colls > 0 ? ps_pod_coll_algorithm(r->pod, r->plan->n_colls - 1) : NULL;
  summarise_host_calls(r, s);
}

void ps_summary_clear(PsSummary *s)
{
  g_free(s->host_calls_json);
  s->host_calls_json = NULL;
  g_free(s->params);
  s->params = NULL;
}

/* ---- reporting ------------------------------------------------------ */

/* A key of the strategy's resolved object (as `describe` prints it), or
 * NULL: reports name a strategy's choices without knowing the strategy. */
static json_object *strategy_key(const PsExperiment *exp, const char *key)
{
  json_object *so = NULL, *v = NULL;
  if (json_object_object_get_ex(exp->resolved, "strategy", &so) && so)
    json_object_object_get_ex(so, key, &v);
  return v;
}

/* A boolean key, or a word other than "none" (the shard strategy's
 * "rematerialize"). */
static gboolean strategy_flag(const PsExperiment *exp, const char *key)
{
  json_object *v = strategy_key(exp, key);
  if (json_object_is_type(v, json_type_string))
    return strcmp(json_object_get_string(v), "none") != 0;
  return json_object_get_boolean(v);
}

static const char *strategy_word(const PsExperiment *exp, const char *key)
{
  json_object *v = strategy_key(exp, key);
  return v ? json_object_get_string(v) : "";
}

/* tokens/s (null for a model without tokens), MFU, HFU and the time per
 * axis (every axis, so that a sweep's columns do not depend on its first
 * point's plan). */
static void add_utilization_json(json_object *o, const PsSummary *s)
{
  json_object_object_add(o, "tokens_per_s",
                         s->sequence > 0 ? json_object_new_double(s->tokens_per_s) : NULL);
  json_object_object_add(o, "chips", json_object_new_int(s->chips));
  json_object_object_add(o, "model_flops_per_step",
                         json_object_new_double(s->model_flops_per_step));
  json_object_object_add(o, "mfu", json_object_new_double(s->mfu));
  json_object_object_add(o, "hfu", json_object_new_double(s->hfu));
  json_object_object_add(o, "model_flops_causal_per_step",
                         json_object_new_double(s->model_flops_causal_per_step));
  json_object_object_add(o, "mfu_causal", json_object_new_double(s->mfu_causal));
  json_object_object_add(o, "tflops_per_device", json_object_new_double(s->tflops_per_device));
  json_object *axes = json_object_new_object();
  for (int a = 0; a < PS_N_AXES; a++) {
    json_object *x = json_object_new_object();
    json_object_object_add(x, "collectives", json_object_new_int(s->axis_colls[a]));
    json_object_object_add(x, "collectives_per_device",
                           json_object_new_double(s->axis_colls_per_device[a]));
    json_object_object_add(x, "exposed_s", json_object_new_double(s->axis_exposed_s[a]));
    json_object_object_add(x, "busy_s", json_object_new_double(s->axis_busy_s[a]));
    json_object_object_add(axes, ps_axis_name(a), x);
  }
  json_object_object_add(o, "collective_axes", axes);
}

char *ps_summary_to_json(const PsExperiment *exp, const PsSummary *s)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "experiment", json_object_new_string(exp->name));
  json_object_object_add(o, "topology", json_object_new_string(exp->topology->name));
  json_object_object_add(o, "model", json_object_new_string(exp->model->name));
  json_object_object_add(o, "strategy", json_object_new_string(exp->strategy.kind));
  json_object_object_add(o, "devices", json_object_new_int(s->devices));
  json_object_object_add(o, "devices_in_topology",
                         json_object_new_int(ps_topology_devices(exp->topology)));
  json_object_object_add(o, "replicas", json_object_new_int(s->replicas));
  json_object_object_add(o, "stages", json_object_new_int(s->stages));
  json_object_object_add(o, "micro_batches", json_object_new_int(s->micro_batches));
  if (s->pipelined) {
    json_object_object_add(o, "schedule", json_object_new_string(strategy_word(exp, "schedule")));
    json_object_object_add(o, "rematerialize",
                           json_object_new_boolean(strategy_flag(exp, "rematerialize")));
  }
  json_object_object_add(o, "global_batch", json_object_new_int64(exp->global_batch));
  json_object_object_add(o, "precision", json_object_new_string(
                                           exp->numerics.precision == PS_PRECISION_BF16 ? "bf16"
                                                                                        : "f32"));
  if (exp->numerics.quantization != PS_QUANT_NONE) /* as "schedule": only when it applies */
    json_object_object_add(o, "quantization",
                           json_object_new_string(exp->numerics.quantization == PS_QUANT_FP8
                                                      ? "fp8"
                                                      : "int8"));
  json_object_object_add(o, "gradient_buckets", json_object_new_int(s->buckets));
  json_object_object_add(o, "overlap", json_object_new_boolean(strategy_flag(exp, "overlap")));
  json_object_object_add(o, "collective_on_core",
                         ps_config_on_core_to_json(exp->collective.on_core));
  json_object_object_add(o, "weight_update_sharding",
                         json_object_new_boolean(strategy_flag(exp, "weight_update_sharding")));
  json_object_object_add(o, "reporting_device", json_object_new_int(s->reporting_device));
  json_object_object_add(o, "steps", json_object_new_int64(s->steps));
  json_object_object_add(o, "measured_steps", json_object_new_int64(s->measured_steps));
  json_object_object_add(o, "step_time_s", json_object_new_double(s->step_time_s));
  json_object *b = json_object_new_object();
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    json_object_object_add(b, ps_time_category_name(c), json_object_new_double(s->breakdown[c]));
  json_object_object_add(o, "breakdown", b);
  if (s->collective_algorithm)
    json_object_object_add(o, "collective_algorithm",
                           json_object_new_string(s->collective_algorithm));
  json_object_object_add(o, "steps_per_run", json_object_new_int64(exp->steps_per_run));
  json_object_object_add(o, "host_loop_s", json_object_new_double(s->host_loop_s));
  json_object_object_add(o, "end_wait_s", json_object_new_double(s->end_wait_s));
  if (s->copy_up_bytes > 0 || s->copy_down_bytes > 0) {
    json_object *hc = json_object_new_object();
    json_object_object_add(hc, "up_bytes", json_object_new_double(s->copy_up_bytes));
    json_object_object_add(hc, "down_bytes", json_object_new_double(s->copy_down_bytes));
    json_object_object_add(o, "host_copies", hc);
  }
  json_object_object_add(o, "examples_per_s", json_object_new_double(s->examples_per_s));
  json_object_object_add(o, "mxu_utilization", json_object_new_double(s->mxu_utilization));
  add_utilization_json(o, s);
  json_object *cs = json_object_new_object();
  json_object_object_add(cs, "mxu_s", json_object_new_double(s->compute_mxu_s));
  json_object_object_add(cs, "memory_s", json_object_new_double(s->compute_memory_s));
  json_object_object_add(cs, "overhead_s", json_object_new_double(s->compute_overhead_s));
  json_object_object_add(cs, "serial_vector_s", json_object_new_double(s->compute_serial_s));
  json_object_object_add(o, "compute_split", cs);
  json_object_object_add(o, "hbm_peak_bytes", json_object_new_int64(s->hbm_peak_bytes));
  if (s->has_numerics) {
    json_object_object_add(o, "loss_first", json_object_new_double(s->loss_first));
    json_object_object_add(o, "loss_last", json_object_new_double(s->loss_last));
  }
  if (s->has_numerics && s->devices > 1)
    json_object_object_add(o, "replica_divergence", json_object_new_double(s->replica_divergence));
  if (s->has_accuracy) {
    json_object_object_add(o, "test_accuracy", json_object_new_double(s->test_accuracy));
    json_object_object_add(o, "test_loss", json_object_new_double(s->test_loss));
  }
  if (s->has_accuracy && s->per_token)
    json_object_object_add(o, "test_perplexity", json_object_new_double(s->test_perplexity));
  if (s->host_calls_json)
    json_object_object_add(o, "outside_compilation", json_tokener_parse(s->host_calls_json));
  json_object_object_add(o, "sim_time_s", json_object_new_double(s->sim_time_s));
  json_object_object_add(o, "events", json_object_new_int64((int64_t)s->events));
  json_object_object_add(o, "wall_s", json_object_new_double(s->wall_s));
  json_object_object_add(o, "events_per_s", json_object_new_double(s->events_per_s));
  char *text = g_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(o);
  return text;
}

/* The unit a step's times print in: the one that fits the step (us below
 * a millisecond, ms below a second, else s), shared by every row so they
 * line up. */
typedef struct {
  const char *name;
  double scale;
} TimeUnit;

static TimeUnit unit_for(double step_s)
{
  if (step_s < 1e-3)
    return (TimeUnit){"us", 1e6};
  if (step_s < 1.0)
    return (TimeUnit){"ms", 1e3};
  return (TimeUnit){"s ", 1.0};
}

/* What each category holds, in a TPU engineer's words. */
static const char *const category_notes[PS_TIME_N_CATEGORIES] = {
    [PS_TIME_COMPUTE] = "forward, backward and update kernels",
    [PS_TIME_COLLECTIVE] = "communication compute did not hide",
    [PS_TIME_INFEED_STALL] = "waiting for the host's next batch",
    [PS_TIME_PIPELINE_BUBBLE] = "waiting for other stages (and their drain)",
    [PS_TIME_HOST] = "the host loop below, outfeed, host calls",
    [PS_TIME_OTHER] = "the infeed dequeue",
};

static void print_time(FILE *f, TimeUnit u, int c, double s, double total, const char *note)
{
  fprintf(f, "  %-16s %10.3f %s  %5.1f%%  %s\n", ps_time_category_name(c), s * u.scale, u.name,
          total > 0 ? 100.0 * s / total : 0, note);
}

/* A line per mesh axis that has collectives: exposed and busy time. */
static void print_axes(const PsSummary *s, TimeUnit u, FILE *f)
{
  for (int a = 0; a < PS_N_AXES; a++) {
    if (s->axis_colls[a] == 0)
      continue;
    g_autofree char *label = g_strdup_printf("%s axis", ps_axis_name(a));
    double per = s->axis_colls_per_device[a];
    fprintf(f, "  (%-14s %10.3f %s exposed, %.3f %s busy, %.4g collective%s a device: means "
               "over devices)\n", label, s->axis_exposed_s[a] * u.scale, u.name,
            s->axis_busy_s[a] * u.scale, u.name, per, per == 1 ? "" : "s");
  }
}

/* How the gradients' collectives run beside backward: held on the
 * TensorCore (collective.on_core), overlapping it (strategy.overlap), or
 * with weight-update sharding one of each. */
static const char *gradients_timing(const PsExperiment *exp, gboolean wus, unsigned on_core)
{
  gboolean overlap = strategy_flag(exp, "overlap");
  unsigned rs = on_core & 1u << PS_COLL_REDUCE_SCATTER, ag = on_core & 1u << PS_COLL_ALL_GATHER;
  if (wus ? rs && ag : on_core & 1u << PS_COLL_ALL_REDUCE)
    return ", on the TensorCore";
  if (wus && overlap && ag)
    return ", the reduce-scatter overlapping backward, the all-gather on the TensorCore";
  if (wus && overlap && rs)
    return ", the reduce-scatter on the TensorCore, the all-gather overlapping backward";
  return overlap ? ", overlapping backward" : "";
}

void ps_summary_print(const PsExperiment *exp, const PsSummary *s, FILE *f)
{
  TimeUnit u = unit_for(s->step_time_s);
  int64_t warm = s->steps - s->measured_steps;
  g_autofree char *mean =
      warm > 0 ? g_strdup_printf("mean of %" G_GINT64_FORMAT " steps after a warm-up loop of %"
                                 G_GINT64_FORMAT, s->measured_steps, warm)
               : g_strdup_printf("mean of %" G_GINT64_FORMAT " step%s, no warm-up left out",
                                 s->measured_steps, s->measured_steps == 1 ? "" : "s");
  fprintf(f, "\nstep time        %10.3f %s  (%s)\n", s->step_time_s * u.scale, u.name, mean);
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    print_time(f, u, c, s->breakdown[c], s->step_time_s,
               c == PS_TIME_OTHER && s->stages <= 1 && s->end_wait_s * u.scale >= 5e-4
                   ? "the infeed dequeue; waiting for devices that end the step later"
                   : category_notes[c]);
  g_autofree char *every = exp->steps_per_run == 1
                               ? g_strdup("every step")
                               : g_strdup_printf("every %" G_GINT64_FORMAT " steps (steps_per_run)",
                                                 exp->steps_per_run);
  fprintf(f, "  (host loop      %10.3f %s per step: the host relaunches the device loop %s)\n",
          s->host_loop_s * u.scale, u.name, every);
  if (s->copy_up_bytes > 0 || s->copy_down_bytes > 0)
    fprintf(f, "  (host copies    %10.3f GB up, %.3f GB down a step and device over PCIe: "
               "their waits are host time)\n", s->copy_up_bytes / 1e9, s->copy_down_bytes / 1e9);
  fprintf(f, "  (compute        %10.3f %s MXU-bound, %.3f %s memory-bound (HBM or VPU), %.3f %s "
             "launch overhead)\n", s->compute_mxu_s * u.scale, u.name,
          s->compute_memory_s * u.scale, u.name, s->compute_overhead_s * u.scale, u.name);
  if (s->compute_serial_s > 0)
    fprintf(f, "  (softmax        %10.3f %s of the MXU-bound time: flash attention's softmax, in "
               "series with its block products)\n", s->compute_serial_s * u.scale, u.name);
  int64_t chunk = exp->collective.chunk_bytes;
  g_autofree char *chunk_text = chunk % 1048576 == 0
                                    ? g_strdup_printf("%" G_GINT64_FORMAT " MiB", chunk / 1048576)
                                    : g_strdup_printf("%.3g MB", chunk / 1e6);
  gboolean wus = strategy_flag(exp, "weight_update_sharding");
  unsigned on_core = exp->collective.on_core;
  if (s->collective_algorithm)
    fprintf(f, "  (gradients      %d bucket%s, %s %s over %d replica%s%s, chunks of %s)\n",
            s->buckets, s->buckets == 1 ? "" : "s",
            wus ? "reduce-scatter + all-gather" : "all-reduce", s->collective_algorithm,
            s->replicas, s->replicas == 1 ? "" : "s", gradients_timing(exp, wus, on_core),
            chunk_text);
  if (s->stages > 1) {
    int K = s->stages, M = s->micro_batches;
    fprintf(f, "  (pipeline       %d stages x %d micro-batch%s, %s%s: bubble %.1f%% of the step; "
               "with equal stages (K-1)/(M+K-1) = %.1f%%)\n", K, M, M == 1 ? "" : "es",
            strategy_word(exp, "schedule"),
            strategy_flag(exp, "rematerialize") ? ", re-materialized" : "",
            100.0 * s->breakdown[PS_TIME_PIPELINE_BUBBLE] / s->step_time_s,
            100.0 * (K - 1) / (M + K - 1));
  }
  print_axes(s, u, f);
  if (on_core) {
    g_autofree char *names = ps_config_on_core_text(on_core);
    fprintf(f, "  (on the core    %s: each holds its TensorCore until done, "
               "collective.on_core)\n", names);
  }
  fprintf(f, "examples/s       %10.0f\n", s->examples_per_s);
  if (s->sequence > 0)
    fprintf(f, "tokens/s         %10.0f  (examples/s x %" G_GINT64_FORMAT " tokens)\n",
            s->tokens_per_s, s->sequence);
  fprintf(f, "MXU utilization  %10.2f%%\n", 100.0 * s->mxu_utilization);
  fprintf(f, "MFU              %10.2f%%  (model FLOPs: %.4g per step, PaLM's count, over %d "
             "%s bf16 peak%s)\n", 100.0 * s->mfu, s->model_flops_per_step, s->chips,
          s->chips == 1 ? "chip's" : "chips'",
          exp->numerics.quantization != PS_QUANT_NONE
              ? "; the quantized products run at up to their faster peak, so it, HFU and "
                "MXU utilization may pass 100%"
              : "");
  if (s->model_flops_causal_per_step < s->model_flops_per_step)
    fprintf(f, "MFU, causal / 2  %10.2f%%  (causal attention's FLOPs halved, as MaxText counts: "
               "%.4g a step, %.1f TFLOP/s/device)\n",
            100.0 * s->mfu_causal, s->model_flops_causal_per_step, s->tflops_per_device);
  fprintf(f, "HFU              %10.2f%%  (matmul FLOPs executed, re-materialization "
             "included)\n", 100.0 * s->hfu);
  fprintf(f, "HBM peak         %10.2f MiB per device (of %.0f GiB)%s\n",
          s->hbm_peak_bytes / 1048576.0,
          ps_topology_device_hbm_bytes(exp->topology) / 1073741824.0,
          exp->masks_recomputed ? "  (dropout masks recomputed in backward to fit, "
                                  "as XLA rematerializes)" : "");
  if (s->has_numerics)
    fprintf(f, "loss             %10.4f -> %.4f  (one step's loss: the first step's, the last's)\n",
            s->loss_first, s->loss_last);
  if (s->has_accuracy)
    fprintf(f, "test accuracy    %10.2f%%%s\n", 100.0 * s->test_accuracy,
            s->per_token ? " of next tokens" : "");
  if (s->has_accuracy && s->per_token)
    fprintf(f, "test loss        %10.4f per token, perplexity %.3f\n", s->test_loss,
            s->test_perplexity);
  if (s->host_calls_json)
    fprintf(f, "host calls       %s\n", s->host_calls_json);
  fprintf(f, "simulated        %10.3f ms for %" G_GINT64_FORMAT " step%s; %" G_GUINT64_FORMAT
             " events in %.2f s wall (%.3g events/s%s)\n",
          s->sim_time_s * 1e3, s->steps, s->steps == 1 ? "" : "s", s->events, s->wall_s,
          s->events_per_s,
          s->has_numerics ? ", numerics included" : "");
}

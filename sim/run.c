/* run.c: a run end to end (see run.h).  Three observers ride on the pod:
 * numerics (real kernels on real batches, one net per replica), statistics
 * (time per category per step on device 0, MXU use, HBM) and the trace.
 * Invariant: observers never change what the pod does or when. */
#include "run.h"

#include "hw/cost.h"
#include "io/dataset.h"
#include "io/trace.h"
#include "model/kernels.h"
#include "model/net.h"

#include <math.h>
#include <string.h>

#define HOST_PID_BASE 100000
#define LINKS_PID 99999
#define SYNTHETIC_TEST_EXAMPLES 10000

typedef struct {
  float lo, hi;
  int64_t calls;
  int64_t *counts;
} PsHistogram;

/* What device 0's statistics need of each op of its program, computed
 * once rather than at every step. */
typedef struct {
  double mxu_flops;
  int64_t act_bytes;
} OpStats;

typedef struct {
  const PsExperiment *exp;
  const PsPlan *plan;
  OpStats *op_stats;    /* per op of device 0's program */
  PsPod *pod;
  FILE *log;
  /* numerics */
  gboolean numerics;
  PsDataset *train;
  PsSampler *sampler;
  PsNet **nets;
  PsOptimizer **opts;
  float *batch_x;       /* one global batch */
  int32_t *batch_y;
  int64_t drawn_step;   /* global batch currently in batch_x */
  double *step_loss;    /* per step, mean over replicas */
  int *step_outfed;
  PsHistogram *histograms; /* per host call, replica 0's last result */
  double log_loss_sum;
  int64_t log_loss_n;
  /* statistics: a step's breakdown is that of its critical device, the
   * replica the step's collective waited for (device 0 without one) */
  double *cat;          /* steps x PS_TIME_N_CATEGORIES, seconds */
  double *dev_cat;      /* devices x PS_TIME_N_CATEGORIES, the current step */
  int *critical;        /* per step, or -1 */
  double *loop_wait;    /* per step, device 0's wait for the host loop */
  ps_time_t *step_end;
  double *mxu_flops;    /* per step */
  int64_t hbm_static, hbm_act, hbm_peak;
  /* trace */
  PsTrace *trace;
} Run;

static double *cat_of(Run *r, int step)
{
  return &r->cat[(size_t)step * PS_TIME_N_CATEGORIES];
}

static double *dev_cat_of(Run *r, int device)
{
  return &r->dev_cat[(size_t)device * PS_TIME_N_CATEGORIES];
}

/* ---- numerics ------------------------------------------------------- */

static gboolean numerics_init(Run *r, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  int R = r->plan->replicas;
  if (exp->input.source == PS_SOURCE_FASHION_MNIST)
    r->train = ps_dataset_open_fashion_mnist(exp->input.data_dir, TRUE, error);
  else
    r->train = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                        (size_t)exp->input.synthetic_examples,
                                        exp->numerics.seed);
  if (!r->train)
    return FALSE;
  r->sampler = ps_sampler_new(r->train, exp->input.shuffle, exp->numerics.seed);
  r->nets = g_new0(PsNet *, R);
  r->opts = g_new0(PsOptimizer *, R);
  for (int i = 0; i < R; i++) {
    /* same seed: replicas start from identical weights, as a mirrored
     * variable does */
    r->nets[i] = ps_net_new(m, (int)r->plan->per_replica_batch, exp->numerics.precision,
                            exp->numerics.seed, error);
    if (!r->nets[i])
      return FALSE;
    size_t n = ps_net_n_params(r->nets[i]);
    const PsOptimizerConfig *o = &exp->optimizer;
    r->opts[i] = o->kind == PS_OPT_ADAM
                     ? ps_optimizer_new_adam(n, (float)o->learning_rate, (float)o->beta1,
                                             (float)o->beta2, (float)o->epsilon)
                     : ps_optimizer_new_sgd(n, (float)o->learning_rate, (float)o->momentum);
  }
  size_t elems = ps_dataset_example_elems(r->train);
  r->batch_x = g_new(float, (size_t)exp->global_batch * elems);
  r->batch_y = g_new(int32_t, (size_t)exp->global_batch);
  r->drawn_step = -1;
  return TRUE;
}

static void numerics_free(Run *r)
{
  if (r->nets)
    for (int i = 0; i < r->plan->replicas; i++) {
      ps_net_free(r->nets[i]);
      ps_optimizer_free(r->opts[i]);
    }
  g_free(r->nets);
  g_free(r->opts);
  if (r->sampler)
    ps_sampler_free(r->sampler);
  if (r->train)
    ps_dataset_free(r->train);
  g_free(r->batch_x);
  g_free(r->batch_y);
}

static void log_step(Run *r, int step, ps_time_t t)
{
  const PsExperiment *exp = r->exp;
  r->log_loss_sum += r->step_loss[step];
  r->log_loss_n++;
  if (!r->log || ((step + 1) % exp->log_every != 0 && step + 1 != exp->steps))
    return;
  fprintf(r->log, "step %6d  loss %.4f  (mean of last %" G_GINT64_FORMAT ")  sim time %.3f ms\n",
          step + 1, r->log_loss_sum / (double)r->log_loss_n, r->log_loss_n,
          ps_time_to_s(t) * 1e3);
  fflush(r->log);
  r->log_loss_sum = 0;
  r->log_loss_n = 0;
}

/* Outside compilation with numerics on: the host really computes on the
 * layer's output.  A histogram (over [min, max] of the tensor) is kept per
 * call for the summary; a roundtrip brings the tensor back unchanged. */
static void host_call_numerics(Run *r, int replica, const PsOp *op)
{
  if (replica != 0)
    return; /* every replica calls its host; the summary shows replica 0's */
  const PsHostCall *hc = &r->exp->host_calls[op->host_call];
  if (hc->kind != PS_HOST_CALL_HISTOGRAM)
    return;
  size_t n = 0;
  const float *x = ps_net_layer_output(r->nets[0], hc->after, &n);
  PsHistogram *h = &r->histograms[op->host_call];
  if (!h->counts)
    h->counts = g_new0(int64_t, hc->bins);
  float lo = x[0], hi = x[0];
  for (size_t i = 1; i < n; i++) {
    lo = fminf(lo, x[i]);
    hi = fmaxf(hi, x[i]);
  }
  memset(h->counts, 0, sizeof(int64_t) * (size_t)hc->bins);
  for (size_t i = 0; i < n; i++) {
    int b = hi > lo ? (int)((x[i] - lo) / (hi - lo) * hc->bins) : 0;
    h->counts[b < hc->bins ? b : hc->bins - 1]++;
  }
  h->lo = lo;
  h->hi = hi;
  h->calls++;
}

static void numerics_op(Run *r, int device, int step, const PsOp *op, ps_time_t end)
{
  const PsPlan *plan = r->plan;
  int replica = plan->programs[device].replica;
  PsNet *net = r->nets[replica];
  switch (op->kind) {
  case PS_OP_INFEED: {
    if (r->drawn_step != step) {
      ps_sampler_next(r->sampler, (int)r->exp->global_batch, r->batch_x, r->batch_y);
      r->drawn_step = step;
    }
    size_t elems = ps_dataset_example_elems(r->train);
    size_t off = (size_t)replica * (size_t)plan->per_replica_batch;
    ps_net_set_input(net, r->batch_x + off * elems, r->batch_y + off,
                     (int)plan->per_replica_batch);
    ps_net_zero_grads(net);
    break;
  }
  case PS_OP_FWD:
    for (int i = op->first; i <= op->last; i++)
      ps_net_forward_layer(net, i);
    break;
  case PS_OP_BWD:
    for (int i = op->last; i >= op->first; i--)
      ps_net_backward_layer(net, i, plan->loss_scale);
    break;
  case PS_OP_UPDATE:
    ps_optimizer_step(r->opts[replica], ps_net_params(net), ps_net_grads(net));
    break;
  case PS_OP_OUTFEED:
    r->step_loss[step] += ps_net_loss(net) / plan->replicas;
    if (++r->step_outfed[step] == plan->replicas)
      log_step(r, step, end);
    break;
  case PS_OP_HOST_CALL:
    host_call_numerics(r, replica, op);
    break;
  case PS_OP_ALL_REDUCE: /* the collective adds into collective_buffer() */
  case PS_OP_N_KINDS:
    break;
  }
}

/* cross_replica_sum: the collective adds the replicas' gradients into
 * each replica's own buffer, in the order its algorithm delivers them, and
 * leaves every replica the same sum. */
static float *collective_buffer(void *ctx, int device)
{
  Run *r = ctx;
  if (!r->numerics)
    return NULL;
  return ps_net_grads(r->nets[r->plan->programs[device].replica]);
}

/* ---- observer callbacks --------------------------------------------- */

static int chip_pid(Run *r, int device)
{
  return ps_pod_device_chip(r->pod, device) + 1;
}

static OpStats *op_stats_new(const PsExperiment *exp, const PsProgram *p)
{
  OpStats *st = g_new0(OpStats, p->n_ops);
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    if (op->kind != PS_OP_FWD && op->kind != PS_OP_BWD)
      continue;
    PsOpCost cost;
    ps_cost_layers(exp->topology, exp->model, op->first, op->last, op->batch,
                   exp->numerics.precision, exp->fuse_elementwise, op->kind == PS_OP_BWD, &cost);
    st[i].mxu_flops = cost.mxu_flops;
    for (int l = op->first; l <= op->last; l++)
      st[i].act_bytes += exp->model->layers[l].act_elems;
    st[i].act_bytes *= op->batch * ps_cost_act_bytes(exp->numerics.precision);
  }
  return st;
}

static void on_op_done(void *ctx, int device, int step, const PsOp *op, ps_time_t start,
                       ps_time_t end)
{
  Run *r = ctx;
  if (r->numerics)
    numerics_op(r, device, step, op, end);
  PsTimeCategory c = PS_TIME_OTHER;
  switch (op->kind) {
  case PS_OP_FWD:
  case PS_OP_BWD:
    c = PS_TIME_COMPUTE;
    break;
  case PS_OP_UPDATE:
    c = PS_TIME_COMPUTE;
    break;
  case PS_OP_ALL_REDUCE:
    c = PS_TIME_COLLECTIVE;
    break;
  case PS_OP_OUTFEED:
  case PS_OP_HOST_CALL:
    c = PS_TIME_HOST;
    break;
  default:
    break;
  }
  dev_cat_of(r, device)[c] += ps_time_to_s(end - start);
  if (device == 0) {
    switch (op->kind) {
    case PS_OP_FWD:
    case PS_OP_BWD: {
      const OpStats *st = &r->op_stats[op - r->plan->programs[0].ops];
      r->mxu_flops[step] += st->mxu_flops;
      /* activations live from their forward to their backward */
      r->hbm_act += op->kind == PS_OP_FWD ? st->act_bytes : -st->act_bytes;
      if (r->hbm_static + r->hbm_act > r->hbm_peak)
        r->hbm_peak = r->hbm_static + r->hbm_act;
      break;
    }
    default:
      break;
    }
  }
  if (r->trace) {
    ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device), op->name,
                      ps_op_kind_name(op->kind), start, end - start, NULL);
    if (device == 0 && (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD))
      ps_trace_counter(r->trace, chip_pid(r, device), "hbm core 0 (bytes)", end,
                       (double)(r->hbm_static + r->hbm_act));
  }
}

static void on_wait(void *ctx, int device, int step, PsTimeCategory why, const char *what,
                    ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  if (end <= start)
    return;
  dev_cat_of(r, device)[why] += ps_time_to_s(end - start);
  if (device == 0 && strcmp(what, PS_WAIT_HOST_LOOP) == 0)
    r->loop_wait[step] += ps_time_to_s(end - start);
  if (r->trace) {
    char name[64];
    g_snprintf(name, sizeof name, "wait: %s", what);
    ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device), name,
                      "wait", start, end - start, NULL);
  }
}

static void on_step_done(void *ctx, int device, int step, ps_time_t end)
{
  Run *r = ctx;
  if (device == 0)
    r->step_end[step] = end;
  double *dc = dev_cat_of(r, device);
  if (device == (r->critical[step] >= 0 ? r->critical[step] : 0))
    memcpy(cat_of(r, step), dc, sizeof(double) * PS_TIME_N_CATEGORIES);
  memset(dc, 0, sizeof(double) * PS_TIME_N_CATEGORIES);
}

static void on_infeed_depth(void *ctx, int device, int depth, ps_time_t t)
{
  Run *r = ctx;
  if (!r->trace)
    return;
  char name[64];
  g_snprintf(name, sizeof name, "infeed queue core %d (batches)",
             ps_pod_device_core(r->pod, device));
  ps_trace_counter(r->trace, chip_pid(r, device), name, t, depth);
}

static void on_host_work(void *ctx, int host, PsHostLane lane, const char *what, int device,
                         ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  if (!r->trace || end <= start)
    return;
  char args[64];
  if (device >= 0)
    g_snprintf(args, sizeof args, "{\"device\":%d}", device);
  ps_trace_complete(r->trace, HOST_PID_BASE + host, (int)lane, what, "host", start, end - start,
                    device >= 0 ? args : NULL);
}

static void on_collective(void *ctx, int step, const PsOp *op, int last, ps_time_t t)
{
  Run *r = ctx;
  r->critical[step] = last;
}

/* ---- the run -------------------------------------------------------- */

static void trace_metadata(Run *r)
{
  const PsTopology *t = r->exp->topology;
  int per_chip = ps_topology_devices_per_chip(t);
  int last_chip = -1;
  for (int d = 0; d < r->plan->n_programs; d++) {
    int chip = ps_pod_device_chip(r->pod, d);
    int host = ps_pod_chip_host(r->pod, chip);
    if (chip != last_chip) {
      char name[96];
      g_snprintf(name, sizeof name, "chip %d (%s, host %d)", chip, t->name, host);
      ps_trace_process(r->trace, chip + 1, name, chip + 1);
      if (chip == 0 || ps_pod_chip_host(r->pod, last_chip) != host) {
        g_snprintf(name, sizeof name, "host %d", host);
        ps_trace_process(r->trace, HOST_PID_BASE + host, name, HOST_PID_BASE + host);
        for (int lane = 0; lane < PS_HOST_N_LANES; lane++)
          ps_trace_thread(r->trace, HOST_PID_BASE + host, lane, ps_host_lane_name(lane), lane);
      }
      last_chip = chip;
    }
    int core = d % per_chip;
    char tname[48];
    g_snprintf(tname, sizeof tname, per_chip > 1 ? "core %d" : "megacore %d", core);
    ps_trace_thread(r->trace, chip + 1, core, tname, core);
  }
}

static void summarise(Run *r, PsSummary *s)
{
  const PsExperiment *exp = r->exp;
  int64_t steps = exp->steps;
  int64_t warm = steps > exp->steps_per_run ? exp->steps_per_run : 0;
  s->steps = steps;
  s->measured_steps = steps - warm;
  ps_time_t t0 = warm > 0 ? r->step_end[warm - 1] : 0;
  ps_time_t t1 = r->step_end[steps - 1];
  double measured = ps_time_to_s(t1 - t0);
  s->step_time_s = measured / (double)s->measured_steps;
  double flops = 0;
  for (int64_t k = warm; k < steps; k++)
    s->host_loop_s += r->loop_wait[k] / (double)s->measured_steps;
  for (int64_t k = warm; k < steps; k++) {
    for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
      s->breakdown[c] += cat_of(r, (int)k)[c];
    flops += r->mxu_flops[k];
  }
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
    s->breakdown[c] /= (double)s->measured_steps;
    if (c != PS_TIME_OTHER)
      sum += s->breakdown[c];
  }
  /* "other" is what no op or wait accounts for; by construction only the
   * INFEED dequeue and rounding */
  s->breakdown[PS_TIME_OTHER] = s->step_time_s - sum;
  s->examples_per_s = (double)exp->global_batch / s->step_time_s;
  s->mxu_utilization =
      flops / (measured * ps_topology_device_peak_flops(exp->topology));
  s->hbm_peak_bytes = r->hbm_peak;
  s->sim_time_s = ps_time_to_s(t1);
  if (r->numerics) {
    s->has_numerics = TRUE;
    s->loss_first = r->step_loss[0];
    s->loss_last = r->step_loss[steps - 1];
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
    json_object_object_add(o, "calls_per_step", json_object_new_int(r->plan->replicas));
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

void ps_summary_clear(PsSummary *s)
{
  g_free(s->host_calls_json);
  s->host_calls_json = NULL;
}

static gboolean evaluate(Run *r, PsSummary *s, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  PsDataset *test;
  if (exp->input.source == PS_SOURCE_FASHION_MNIST)
    test = ps_dataset_open_fashion_mnist(exp->input.data_dir, FALSE, error);
  else /* same class prototypes (same seed), fresh noise (a larger set) */
    test = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                    SYNTHETIC_TEST_EXAMPLES, exp->numerics.seed);
  if (!test)
    return FALSE;
  s->has_accuracy = TRUE;
  s->test_accuracy = ps_net_accuracy(r->nets[0], ps_dataset_images(test),
                                     ps_dataset_labels(test), ps_dataset_size(test));
  ps_dataset_free(test);
  return TRUE;
}

gboolean ps_run(const PsExperiment *exp, const PsRunOptions *opt, PsSummary *out,
                GError **error)
{
  gboolean ok = FALSE;
  Run r = {.exp = exp, .log = opt ? opt->log : NULL};
  memset(out, 0, sizeof *out);
  gint64 wall0 = g_get_monotonic_time();
  ps_kernels_init();

  PsPlan *plan = ps_strategy_compile(exp, error);
  if (!plan)
    return FALSE;
  r.plan = plan;
  PsEngine *engine = ps_engine_new();
  PsPodObserver obs = {&r,           on_op_done,   on_wait,       on_step_done,
                       on_infeed_depth, on_host_work, on_collective, collective_buffer};
  r.pod = ps_pod_new(engine, exp, plan, &obs, error);
  if (!r.pod) {
    ps_engine_free(engine);
    ps_plan_free(plan);
    return FALSE;
  }
  int64_t steps = exp->steps;
  r.cat = g_new0(double, (size_t)steps * PS_TIME_N_CATEGORIES);
  r.dev_cat = g_new0(double, (size_t)plan->n_programs * PS_TIME_N_CATEGORIES);
  r.critical = g_new(int, (size_t)steps);
  r.loop_wait = g_new0(double, (size_t)steps);
  for (int64_t k = 0; k < steps; k++)
    r.critical[k] = -1;
  r.step_end = g_new0(ps_time_t, (size_t)steps);
  r.mxu_flops = g_new0(double, (size_t)steps);
  r.step_loss = g_new0(double, (size_t)steps);
  r.step_outfed = g_new0(int, (size_t)steps);
  r.hbm_static = exp->model->params * 4 * (2 + plan->optimizer_slots);
  r.op_stats = op_stats_new(exp, &plan->programs[0]);
  r.hbm_peak = r.hbm_static;

  r.numerics = exp->numerics.enabled;
  r.histograms = g_new0(PsHistogram, exp->n_host_calls ? exp->n_host_calls : 1);
  if (r.numerics && !numerics_init(&r, error))
    goto out;
  if (opt && opt->trace_path) {
    r.trace = ps_trace_open(opt->trace_path, error);
    if (!r.trace)
      goto out;
    trace_metadata(&r);
    if (opt->trace_links && ps_pod_network(r.pod))
      ps_network_set_trace(ps_pod_network(r.pod), r.trace, LINKS_PID);
  }

  ps_pod_start(r.pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  g_assert(ps_pod_steps_done(r.pod) == steps);
  summarise(&r, out);
  out->collective_algorithm = ps_pod_collective_algorithm(r.pod);
  summarise_host_calls(&r, out);
  if (r.numerics && exp->numerics.evaluate && !evaluate(&r, out, error))
    goto out;
  out->events = ps_engine_events_run(engine);
  if (r.trace) {
    out->trace_events = ps_trace_events(r.trace);
    PsTrace *t = r.trace;
    r.trace = NULL;
    if (!ps_trace_close(t, error))
      goto out;
  }
  out->wall_s = (double)(g_get_monotonic_time() - wall0) / 1e6;
  out->events_per_s = out->wall_s > 0 ? (double)out->events / out->wall_s : 0;
  ok = TRUE;
out:
  if (!ok)
    ps_summary_clear(out);
  if (r.trace)
    ps_trace_abort(r.trace);
  numerics_free(&r);
  g_free(r.cat);
  g_free(r.op_stats);
  g_free(r.dev_cat);
  g_free(r.critical);
  g_free(r.loop_wait);
  g_free(r.step_end);
  g_free(r.mxu_flops);
  g_free(r.step_loss);
  g_free(r.step_outfed);
  for (int i = 0; i < exp->n_host_calls; i++)
    g_free(r.histograms[i].counts);
  g_free(r.histograms);
  ps_pod_free(r.pod);
  ps_engine_free(engine);
  ps_plan_free(plan);
  return ok;
}

/* ---- reporting ------------------------------------------------------ */

char *ps_summary_to_json(const PsExperiment *exp, const PsSummary *s)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "experiment", json_object_new_string(exp->name));
  json_object_object_add(o, "topology", json_object_new_string(exp->topology->name));
  json_object_object_add(o, "model", json_object_new_string(exp->model->name));
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
  json_object_object_add(o, "examples_per_s", json_object_new_double(s->examples_per_s));
  json_object_object_add(o, "mxu_utilization", json_object_new_double(s->mxu_utilization));
  json_object_object_add(o, "hbm_peak_bytes", json_object_new_int64(s->hbm_peak_bytes));
  if (s->has_numerics) {
    json_object_object_add(o, "loss_first", json_object_new_double(s->loss_first));
    json_object_object_add(o, "loss_last", json_object_new_double(s->loss_last));
  }
  if (s->has_accuracy)
    json_object_object_add(o, "test_accuracy", json_object_new_double(s->test_accuracy));
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

static void print_time(FILE *f, const char *label, double s, double total)
{
  fprintf(f, "  %-16s %10.3f us  %5.1f%%\n", label, s * 1e6, total > 0 ? 100.0 * s / total : 0);
}

void ps_summary_print(const PsExperiment *exp, const PsSummary *s, FILE *f)
{
  fprintf(f, "\nstep time        %10.3f us  (mean of %" G_GINT64_FORMAT " steps after warm-up)\n",
          s->step_time_s * 1e6, s->measured_steps);
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    print_time(f, ps_time_category_name(c), s->breakdown[c], s->step_time_s);
  fprintf(f, "  (host loop      %10.3f us per step: one round trip every %" G_GINT64_FORMAT
             " steps)\n", s->host_loop_s * 1e6, exp->steps_per_run);
  if (s->collective_algorithm)
    fprintf(f, "  (all-reduce     %s over %d replicas, in chunks of %" G_GINT64_FORMAT
               " bytes)\n",
            s->collective_algorithm, exp->strategy.replicas, exp->collective.chunk_bytes);
  fprintf(f, "examples/s       %10.0f\n", s->examples_per_s);
  fprintf(f, "MXU utilization  %10.2f%%\n", 100.0 * s->mxu_utilization);
  fprintf(f, "HBM peak         %10.2f MiB per device (of %.0f GiB)\n",
          s->hbm_peak_bytes / 1048576.0,
          ps_topology_device_hbm_bytes(exp->topology) / 1073741824.0);
  if (s->has_numerics)
    fprintf(f, "loss             %10.4f -> %.4f\n", s->loss_first, s->loss_last);
  if (s->has_accuracy)
    fprintf(f, "test accuracy    %10.2f%%\n", 100.0 * s->test_accuracy);
  if (s->host_calls_json)
    fprintf(f, "host calls       %s\n", s->host_calls_json);
  fprintf(f, "simulated        %10.3f ms for %" G_GINT64_FORMAT " steps; %" G_GUINT64_FORMAT
             " events in %.2f s wall (%.3g events/s%s)\n",
          s->sim_time_s * 1e3, s->steps, s->events, s->wall_s, s->events_per_s,
          s->has_numerics ? ", numerics included" : "");
}

/* run.c: a run end to end (see run.h).  The strategy compiles the plan, the
 * pod executes it, and three parties ride along: numerics (real kernels on
 * real batches, one net and one optimizer per device, the buffers that
 * collectives reduce), statistics (time per category per device, MXU use,
 * HBM) and the trace.
 * Invariant: numerics and observers never change what the pod does or
 * when; the breakdown is one device's, whose categories sum to its step. */
#include "run.h"

#include "hw/link-stats.h"
#include "io/dataset.h"
#include "io/trace.h"
#include "model/kernels.h"
#include "model/net.h"
#include "strategy/strategy.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOST_PID_BASE 100000
#define LINKS_PID 99999
#define SYNTHETIC_TEST_EXAMPLES 10000
/* trace threads of a chip: core c is tid c; its collective lanes follow */
#define COLL_TID(core, lane) (100 + (core) * 64 + (lane))
/* and its steps, one slice per step, on a track above the core's ops */
#define STEP_TID(core) (50 + (core))
#define HOST_TID(lane, sub) ((lane) + PS_HOST_N_LANES * (sub))

typedef struct {
  float lo, hi;
  int64_t calls;
  int64_t *counts;
} PsHistogram;

/* Intervals that may overlap, spread over as few trace threads as keep
 * each thread's slices disjoint (a greedy interval colouring: intervals
 * are reported in order of their ends). */
typedef struct {
  GArray *ends; /* ps_time_t, per lane: end of its last slice */
} Lanes;

/* A step some device is still in: nothing is kept per step beyond it. */
typedef struct {
  int outfed;
  int critical;         /* the last device to start the step's last collective */
  int done;             /* devices that finished the step */
  /* per device, its weighted loss: summed in device order once all have
   * outfed, so the step's loss never depends on which finished first */
  double loss[];
} StepState;

typedef struct {
  const PsExperiment *exp;
  const PsPlan *plan;
  PsPod *pod;
  FILE *log;
  int n_dev;
  int64_t warm;         /* steps of the warm-up loop, not measured */
  /* numerics */
  gboolean numerics;
  const PsDataset *train; /* own_train or the caller's */
  PsDataset *own_train;
  const PsDataset *fashion_train, *fashion_test; /* the caller's, or NULL */
  PsSampler *sampler;
  PsNet **nets;         /* per device */
  PsOptimizer **opts;
  int64_t *example_base; /* per device: its replica's first example */
  int64_t *grad_step;   /* per device: the step its gradients were zeroed for */
  double *loss_acc;     /* per device: micro-batch losses of the step so far */
  int *loss_n;
  GHashTable *messages; /* (src, dst, tag) -> GQueue of payloads in flight */
  float *batch_x;       /* one global batch */
  int32_t *batch_y;
  int64_t drawn_step;   /* global batch currently in batch_x */
  GHashTable *open_steps; /* int64 step -> StepState, while devices are in it */
  int outfeeders;       /* devices with an OUTFEED op */
  PsHistogram *histograms; /* per host call, device 0's last result */
  double loss_first, loss_last;
  double log_loss_sum;
  int64_t log_loss_n;
  /* statistics, per device, over the measured steps */
  double *cat;          /* n_dev x PS_TIME_N_CATEGORIES, seconds */
  double *loop_wait;    /* per device */
  double *mxu_flops;    /* per device */
  ps_time_t *t0, *t1;   /* per device: end of the warm-up, of the last step */
  ps_time_t *step_start; /* per device: when its current step began (trace) */
  int64_t *votes;       /* per device: steps whose last collective waited for it */
  int voted;            /* the device with the most votes, first to reach them */
  int64_t *live, *peak; /* per device: activation bytes live now, at the peak */
  /* trace */
  PsTrace *trace;
  Lanes *coll_lanes;    /* per device */
  GArray **flow_ends;   /* per device: FlowEnd of its collectives' messages (links) */
  GArray **coll_arrivals; /* per collective: ps_time_t its k-th round's last member began */
  int *coll_last;       /* per collective: that member, of the latest round */
  Lanes host_lanes[PS_HOST_N_LANES]; /* per lane, tids shared by all hosts */
  guint8 *host_named;   /* per host: bit per (lane, sub) named */
  int64_t *host_batches; /* per host: batches prepared so far (names slices) */
} Run;

/* One end of a collective message's flow, kept until the device's slice
 * of that collective round is drawn (the flow binds to it). */
typedef struct {
  int c;
  int64_t round;
  uint64_t id;
  ps_time_t t;
  PsCollMsgEvent what;
} FlowEnd;

static int lanes_pick(Lanes *l, ps_time_t start, ps_time_t end, gboolean *is_new)
{
  if (!l->ends)
    l->ends = g_array_new(FALSE, FALSE, sizeof(ps_time_t));
  for (guint i = 0; i < l->ends->len; i++)
    if (g_array_index(l->ends, ps_time_t, i) <= start) {
      g_array_index(l->ends, ps_time_t, i) = end;
      *is_new = FALSE;
      return (int)i;
    }
  g_array_append_val(l->ends, end);
  *is_new = TRUE;
  return (int)l->ends->len - 1;
}

static void lanes_clear(Lanes *l)
{
  if (l->ends)
    g_array_free(l->ends, TRUE);
  l->ends = NULL;
}

static double *cat_of(Run *r, int device)
{
  return &r->cat[(size_t)device * PS_TIME_N_CATEGORIES];
}

/* ---- numerics ------------------------------------------------------- */

static void message_queue_free(gpointer q)
{
  g_queue_free_full(q, g_free);
}

static gint64 message_key(int src, int dst, int tag)
{
  return ((gint64)src << 40) | ((gint64)dst << 20) | tag;
}

static gboolean numerics_init(Run *r, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  const PsPlan *plan = r->plan;
  if (exp->input.source == PS_SOURCE_FASHION_MNIST && r->fashion_train)
    r->train = r->fashion_train;
  else if (exp->input.source == PS_SOURCE_FASHION_MNIST)
    r->train = r->own_train = ps_dataset_open_fashion_mnist(exp->input.data_dir, TRUE, error);
  else
    r->train = r->own_train = ps_dataset_new_synthetic(m->in_shape, m->in_rank,
                                                       (int)m->classes,
                                                       (size_t)exp->input.synthetic_examples,
                                                       exp->numerics.seed);
  if (!r->train)
    return FALSE;
  r->sampler = ps_sampler_new(r->train, exp->input.shuffle, exp->numerics.seed);
  r->nets = g_new0(PsNet *, r->n_dev);
  r->opts = g_new0(PsOptimizer *, r->n_dev);
  r->example_base = g_new0(int64_t, r->n_dev);
  r->grad_step = g_new(int64_t, r->n_dev);
  r->loss_acc = g_new0(double, r->n_dev);
  r->loss_n = g_new0(int, r->n_dev);
  r->messages = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, message_queue_free);
  for (int d = 0; d < r->n_dev; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    int64_t max_batch = 1;
    int slots = 1;
    for (int i = 0; i < p->n_ops; i++) {
      const PsOp *op = &p->ops[i];
      if (op->kind != PS_OP_OUTFEED)
        max_batch = MAX(max_batch, op->batch);
      slots = MAX(slots, op->mb + 1);
    }
    r->grad_step[d] = -1;
    /* same seed: every device starts from identical weights, as a mirrored
     * variable does; a pipeline stage keeps a micro-batch per slot */
    r->nets[d] = ps_net_new_slots(m, (int)max_batch, slots, exp->numerics.precision,
                                  exp->numerics.seed, error);
    if (!r->nets[d])
      return FALSE;
    size_t n = ps_net_n_params(r->nets[d]);
    const PsOptimizerConfig *o = &exp->optimizer;
    r->opts[d] = o->kind == PS_OPT_ADAM
                     ? ps_optimizer_new_adam(n, (float)o->learning_rate, (float)o->beta1,
                                             (float)o->beta2, (float)o->epsilon)
                     : ps_optimizer_new_sgd(n, (float)o->learning_rate, (float)o->momentum);
    /* replica r of R takes examples [r B/R, (r+1) B/R) of the global batch */
    r->example_base[d] = (int64_t)plan->replica_of[d] * (exp->global_batch / plan->replicas);
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
    for (int i = 0; i < r->n_dev; i++) {
      ps_net_free(r->nets[i]);
      ps_optimizer_free(r->opts[i]);
    }
  g_free(r->nets);
  g_free(r->opts);
  g_free(r->example_base);
  g_free(r->grad_step);
  g_free(r->loss_acc);
  g_free(r->loss_n);
  if (r->messages)
    g_hash_table_destroy(r->messages);
  if (r->sampler)
    ps_sampler_free(r->sampler);
  ps_dataset_free(r->own_train);
  g_free(r->batch_x);
  g_free(r->batch_y);
}

static StepState *step_state(Run *r, int64_t step)
{
  StepState *st = g_hash_table_lookup(r->open_steps, &step);
  if (!st) {
    gint64 *key = g_new(gint64, 1);
    *key = step;
    st = g_malloc0(sizeof *st + (size_t)r->n_dev * sizeof st->loss[0]);
    st->critical = -1;
    g_hash_table_insert(r->open_steps, key, st);
  }
  return st;
}

static void log_step(Run *r, int64_t step, double loss, ps_time_t t)
{
  const PsExperiment *exp = r->exp;
  if (step == 0)
    r->loss_first = loss;
  if (step == exp->steps - 1)
    r->loss_last = loss;
  r->log_loss_sum += loss;
  r->log_loss_n++;
  if (!r->log || ((step + 1) % exp->log_every != 0 && step + 1 != exp->steps))
    return;
  fprintf(r->log, "step %6" G_GINT64_FORMAT "  loss %.4f  (mean of last %" G_GINT64_FORMAT
          ")  sim time %.3f ms\n", step + 1, r->log_loss_sum / (double)r->log_loss_n,
          r->log_loss_n, ps_time_to_s(t) * 1e3);
  fflush(r->log);
  r->log_loss_sum = 0;
  r->log_loss_n = 0;
}

/* Outside compilation with numerics on: the host really computes on the
 * layer's output.  A histogram (over [min, max] of the tensor) is kept per
 * call for the summary; a roundtrip brings the tensor back unchanged. */
static void host_call_numerics(Run *r, int device, const PsOp *op)
{
  if (r->plan->replica_of[device] != 0)
    return; /* every replica calls its host; the summary shows replica 0's */
  const PsHostCall *hc = &r->exp->host_calls[op->host_call];
  if (hc->kind != PS_HOST_CALL_HISTOGRAM)
    return;
  size_t n = 0;
  ps_net_select_slot(r->nets[device], op->mb);
  const float *x = ps_net_layer_output(r->nets[device], hc->after, &n);
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

/* A pipeline's messages carry activations (even tags) or their gradients
 * (odd tags) of layer op->first, for micro-batch op->mb: the sender's are
 * copied when it sends, the receiver's buffers filled when it receives. */
static float *message_buffer(PsNet *net, const PsOp *op, size_t *n)
{
  return op->tag % 2 == 0 ? ps_net_activation(net, op->first, n)
                          : ps_net_activation_grad(net, op->first, n);
}

/* OUTFEED: the device's loss of the step, the mean over its micro-batches
 * weighted among replicas; once every device outfed, their sum in device
 * order is the step's. */
static void outfeed_loss(Run *r, int device, int64_t step, const PsOp *op)
{
  StepState *st = step_state(r, step);
  if (r->loss_n[device] > 0)
    st->loss[device] += r->loss_acc[device] / r->loss_n[device] * op->loss_weight;
  r->loss_acc[device] = 0;
  r->loss_n[device] = 0;
  if (++st->outfed < r->outfeeders)
    return;
  double loss = 0;
  for (int d = 0; d < r->n_dev; d++)
    loss += st->loss[d];
  log_step(r, step, loss, ps_engine_now(ps_network_engine(ps_pod_network(r->pod))));
}

static void numerics_op(void *ctx, int device, int64_t step, const PsOp *op)
{
  Run *r = ctx;
  const PsPlan *plan = r->plan;
  PsNet *net = r->nets[device];
  if (r->grad_step[device] != step) { /* gradients accumulate over a step's micro-batches */
    ps_net_zero_grads(net);
    r->grad_step[device] = step;
  }
  switch (op->kind) {
  case PS_OP_INFEED: {
    if (r->drawn_step != step) {
      ps_sampler_next(r->sampler, (int)r->exp->global_batch, r->batch_x, r->batch_y);
      r->drawn_step = step;
    }
    size_t elems = ps_dataset_example_elems(r->train);
    size_t off = (size_t)(r->example_base[device] + op->example_off);
    ps_net_select_slot(net, op->mb);
    ps_net_set_input(net, r->batch_x + off * elems, r->batch_y + off, (int)op->batch);
    break;
  }
  case PS_OP_FWD:
  case PS_OP_RECOMPUTE:
    ps_net_select_slot(net, op->mb);
    for (int i = op->first; i <= op->last; i++)
      ps_net_forward_layer(net, i);
    if (op->kind == PS_OP_FWD && op->last == r->exp->model->n_layers - 1) {
      r->loss_acc[device] += ps_net_loss(net);
      r->loss_n[device]++;
    }
    break;
  case PS_OP_BWD:
    ps_net_select_slot(net, op->mb);
    for (int i = op->last; i >= op->first; i--)
      ps_net_backward_layer(net, i, plan->loss_scale);
    break;
  case PS_OP_SEND: {
    ps_net_select_slot(net, op->mb);
    size_t n = 0;
    const float *x = message_buffer(net, op, &n);
    g_assert(x != NULL);
    gint64 key = message_key(device, op->peer, op->tag);
    GQueue *q = g_hash_table_lookup(r->messages, &key);
    if (!q) {
      q = g_queue_new();
      g_hash_table_insert(r->messages, g_memdup2(&key, sizeof key), q);
    }
    g_queue_push_tail(q, g_memdup2(x, n * sizeof *x));
    break;
  }
  case PS_OP_RECV: {
    ps_net_select_slot(net, op->mb);
    if (op->labels) { /* the micro-batch of this step that stage 0 took */
      g_assert(r->drawn_step == step);
      size_t elems = ps_dataset_example_elems(r->train);
      size_t off = (size_t)(r->example_base[device] + op->example_off);
      ps_net_set_input(net, r->batch_x + off * elems, r->batch_y + off, (int)op->batch);
    } else if (op->tag % 2 == 0) {
      ps_net_set_batch(net, (int)op->batch);
    }
    gint64 key = message_key(op->peer, device, op->tag);
    GQueue *q = g_hash_table_lookup(r->messages, &key);
    g_assert(q != NULL && !g_queue_is_empty(q));
    g_autofree float *payload = g_queue_pop_head(q);
    size_t n = 0;
    float *x = message_buffer(net, op, &n);
    g_assert(x != NULL);
    memcpy(x, payload, n * sizeof *x);
    break;
  }
  case PS_OP_UPDATE: {
    int64_t off = op->param_off, len = op->param_len;
    const PsOptimizerConfig *oc = &r->exp->optimizer;
    if (oc->schedule == PS_LR_COSINE) /* step k of S: lr (1 + cos(pi k / S)) / 2 */
      ps_optimizer_set_lr(r->opts[device],
                          (float)(oc->learning_rate * 0.5 *
                                  (1.0 + cos(G_PI * (double)step / (double)r->exp->steps))));
    if (op->coll >= 0) { /* this device's shard of a reduce-scattered bucket */
      int64_t boff, blen;
      ps_pod_coll_block(r->pod, op->coll, device, &boff, &blen);
      off += boff;
      len = blen;
    }
    ps_optimizer_step_range(r->opts[device], ps_net_params(net), ps_net_grads(net),
                            (size_t)off, (size_t)len, step + 1);
    break;
  }
  case PS_OP_OUTFEED:
    outfeed_loss(r, device, step, op);
    break;
  case PS_OP_HOST_CALL:
    host_call_numerics(r, device, op);
    break;
  default: /* collectives reduce into coll_buffer() */
    break;
  }
}

/* The buffer a device hands to a collective: its gradients or its weights,
 * from the collective's offset.  The collective adds (or copies) the
 * members' elements into it in the order its algorithm delivers them. */
static float *numerics_coll_buffer(void *ctx, int device, int c)
{
  Run *r = ctx;
  const PsPlanColl *pc = &r->plan->colls[c];
  float *base = pc->buffer == PS_BUFFER_GRADS ? ps_net_grads(r->nets[device])
                                              : ps_net_params(r->nets[device]);
  return base + pc->offset;
}

/* ---- observer callbacks --------------------------------------------- */

static int chip_pid(Run *r, int device)
{
  return ps_pod_device_chip(r->pod, device) + 1;
}

static char *op_args(const PsOp *op, int64_t step)
{
  switch (op->kind) {
  case PS_OP_FWD:
  case PS_OP_BWD:
  case PS_OP_RECOMPUTE:
  case PS_OP_UPDATE:
    /* the time split as the cost model made it: MXU-bound kernels,
     * HBM/VPU-bound kernels, launches (us) */
    return g_strdup_printf("{\"step\":%" G_GINT64_FORMAT ",\"mb\":%d,\"kernels\":%d,"
                           "\"flops\":%.0f,\"mxu_flops\":%.0f,\"hbm_bytes\":%.0f,"
                           "\"bound\":\"%s\",\"mxu_us\":%.3f,\"memory_us\":%.3f,"
                           "\"launch_us\":%.3f}",
                           step, op->mb, op->kernels, op->flops, op->mxu_flops, op->hbm_bytes,
                           op->memory_bound ? "hbm" : "mxu", op->mxu_s * 1e6,
                           op->memory_s * 1e6, op->overhead_s * 1e6);
  default:
    return g_strdup_printf("{\"step\":%" G_GINT64_FORMAT ",\"mb\":%d,\"bytes\":%.0f}", step,
                           op->mb, op->bytes);
  }
}

static void on_op_done(void *ctx, int device, int64_t step, const PsOp *op, PsTimeCategory c,
                       ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  if (step >= r->warm) {
    cat_of(r, device)[c] += ps_time_to_s(end - start);
    r->mxu_flops[device] += op->mxu_flops;
  }
  if (op->act_bytes != 0) {
    r->live[device] += op->act_bytes;
    r->peak[device] = MAX(r->peak[device], r->live[device]);
  }
  if (r->trace && end > start) {
    g_autofree char *args = op_args(op, step);
    ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device), op->name,
                      ps_op_kind_name(op->kind), start, end - start, args);
    if (op->act_bytes != 0 && ps_pod_device_core(r->pod, device) == 0)
      ps_trace_counter(r->trace, chip_pid(r, device), "hbm core 0 (bytes)", end,
                       (double)(ps_plan_program(r->plan, device)->hbm_static_bytes +
                                r->live[device]));
  }
}

static void on_wait(void *ctx, int device, int64_t step, PsTimeCategory why, const char *what,
                    ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  if (end <= start)
    return;
  if (step >= r->warm) {
    cat_of(r, device)[why] += ps_time_to_s(end - start);
    if (strcmp(what, PS_WAIT_HOST_LOOP) == 0)
      r->loop_wait[device] += ps_time_to_s(end - start);
  }
  if (r->trace) {
    char name[96];
    g_snprintf(name, sizeof name, "wait: %s", what);
    ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device), name,
                      "wait", start, end - start, NULL);
  }
}

static void on_step_done(void *ctx, int device, int64_t step, ps_time_t end)
{
  Run *r = ctx;
  if (r->trace && end > r->step_start[device]) {
    char name[48], args[64];
    g_snprintf(name, sizeof name, "step %" G_GINT64_FORMAT, step);
    g_snprintf(args, sizeof args, "{\"step\":%" G_GINT64_FORMAT "}", step);
    ps_trace_complete(r->trace, chip_pid(r, device), STEP_TID(ps_pod_device_core(r->pod, device)),
                      name, "step", r->step_start[device], end - r->step_start[device], args);
  }
  if (r->trace)
    r->step_start[device] = end;
  if (step == r->warm - 1)
    r->t0[device] = end;
  if (step == r->exp->steps - 1)
    r->t1[device] = end;
  StepState *st = step_state(r, step);
  if (++st->done < r->n_dev)
    return;
  /* every device is past the step: vote for the one its collectives waited for */
  if (step >= r->warm && st->critical >= 0 &&
      ++r->votes[st->critical] > r->votes[r->voted])
    r->voted = st->critical;
  g_hash_table_remove(r->open_steps, &step);
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
  gboolean is_new;
  /* lanes are shared by hosts: a host may leave a gap in a lane, never overlap */
  int sub = lanes_pick(&r->host_lanes[lane], start, end, &is_new);
  int tid = HOST_TID(lane, sub);
  if (sub < 8 && !(r->host_named[host] & (1u << sub)) && sub > 0) {
    char name[64];
    for (int l = 0; l < PS_HOST_N_LANES; l++) {
      g_snprintf(name, sizeof name, "%s (%d)", ps_host_lane_name(l), sub + 1);
      ps_trace_thread(r->trace, HOST_PID_BASE + host, HOST_TID(l, sub), name, HOST_TID(l, sub));
    }
    r->host_named[host] |= (guint8)(1u << sub);
  }
  char args[64], name[96];
  if (device >= 0)
    g_snprintf(args, sizeof args, "{\"device\":%d}", device);
  /* distinct names: viewers merge back-to-back slices of one name */
  if (lane == PS_HOST_INPUT)
    g_snprintf(name, sizeof name, "%s %" G_GINT64_FORMAT, what, ++r->host_batches[host]);
  else if (device >= 0)
    g_snprintf(name, sizeof name, "%s: device %d", what, device);
  else
    g_snprintf(name, sizeof name, "%s", what);
  ps_trace_complete(r->trace, HOST_PID_BASE + host, tid, name, "host", start, end - start,
                    device >= 0 ? args : NULL);
}

static void on_coll_arrived(void *ctx, int64_t step, int c, int last, ps_time_t t)
{
  Run *r = ctx;
  step_state(r, step)->critical = last;
  if (r->coll_arrivals) {
    g_array_append_val(r->coll_arrivals[c], t);
    r->coll_last[c] = last;
  }
}

static void draw_flow_ends(Run *r, int device, int64_t round, int c, int pid, int tid,
                           ps_time_t start, ps_time_t end);
static void drop_flow_ends(Run *r, int device, int64_t round, int c);

static void on_coll_done(void *ctx, int device, int64_t step, int c, ps_time_t start,
                         ps_time_t end)
{
  Run *r = ctx;
  if (!r->trace)
    return;
  if (end > start) {
    gboolean is_new;
    int lane = lanes_pick(&r->coll_lanes[device], start, end, &is_new);
    int core = ps_pod_device_core(r->pod, device);
    int tid = COLL_TID(core, lane);
    if (is_new) {
      char name[64];
      g_snprintf(name, sizeof name, "core %d collectives (%d)", core, lane + 1);
      ps_trace_thread(r->trace, chip_pid(r, device), tid, name, tid);
    }
    const PsPlanColl *pc = &r->plan->colls[c];
    char args[160];
    g_snprintf(args, sizeof args, "{\"step\":%" G_GINT64_FORMAT ",\"bytes\":%" G_GINT64_FORMAT
               ",\"members\":%d,\"algorithm\":\"%s\"}", step, pc->count * pc->elem_bytes,
               pc->n_members, ps_pod_coll_algorithm(r->pod, c));
    if (ps_trace_complete(r->trace, chip_pid(r, device), tid, pc->name, "collective", start,
                          end - start, args) &&
        r->flow_ends)
      draw_flow_ends(r, device, step, c, chip_pid(r, device), tid, start, end);
    /* inside it, apart: the time until the round's last member began (its
     * data could not all have been summed before) */
    GArray *arr = r->coll_arrivals[c];
    ps_time_t all_in = step < (int64_t)arr->len ? g_array_index(arr, ps_time_t, step) : start;
    if (all_in > start && all_in < end) {
      char name[64];
      g_snprintf(name, sizeof name, "waiting for peers (device %d last)", r->coll_last[c]);
      ps_trace_complete(r->trace, chip_pid(r, device), tid, name, "wait", start,
                        all_in - start, NULL);
    }
  }
  if (r->flow_ends)
    drop_flow_ends(r, device, step, c);
}

/* The flows of device's messages in round `round` of collective c start
 * and end on its slice [start, end] of the round: at the time a message
 * left or arrived, kept inside the slice (a message that arrived before
 * the device began the round ends at the slice's start; one that arrived
 * as the round ended, a nanosecond before its end, so that a viewer finds
 * the slice there whatever it rounds).  The network's steps in between
 * sit at least a nanosecond inside its chunks (network.c), so each flow's
 * events are in time order. */
static void draw_flow_ends(Run *r, int device, int64_t round, int c, int pid, int tid,
                           ps_time_t start, ps_time_t end)
{
  const GArray *a = r->flow_ends[device];
  ps_time_t last = end - start >= 2000 ? end - 1000 : start;
  for (guint i = 0; i < a->len; i++) {
    const FlowEnd *fe = &g_array_index(a, FlowEnd, i);
    if (fe->c != c || fe->round != round)
      continue;
    ps_time_t t = MIN(MAX(fe->t, start), last);
    if (fe->what == PS_COLL_MSG_SENT)
      ps_trace_flow_start(r->trace, pid, tid, "message", fe->id, t);
    else
      ps_trace_flow_end(r->trace, pid, tid, "message", fe->id, t);
  }
}

static void drop_flow_ends(Run *r, int device, int64_t round, int c)
{
  GArray *a = r->flow_ends[device];
  guint kept = 0;
  for (guint i = 0; i < a->len; i++) {
    const FlowEnd *fe = &g_array_index(a, FlowEnd, i);
    if (fe->c != c || fe->round != round)
      g_array_index(a, FlowEnd, kept++) = *fe;
  }
  g_array_set_size(a, kept);
}

/* A collective's message, when the links are drawn: both ends of its
 * flow wait for the device's slice of the round (on_coll_done). */
static void on_coll_message(void *ctx, int c, PsCollMsgEvent what, int src, int dst,
                            int64_t round, uint64_t id, ps_time_t t)
{
  Run *r = ctx;
  if (!r->flow_ends)
    return;
  FlowEnd fe = {c, round, id, t, what};
  g_array_append_val(r->flow_ends[what == PS_COLL_MSG_SENT ? src : dst], fe);
}

/* A SEND's message: a flow from the sender's step slice as it leaves
 * (before the network draws its first chunk), through the links' chunks
 * when they are drawn, to the receiver's step slice when it arrives. */
static void on_message_sent(void *ctx, int src, int dst, int tag, double bytes, ps_time_t t,
                            uint64_t id)
{
  Run *r = ctx;
  if (r->trace)
    ps_trace_flow_start(r->trace, chip_pid(r, src), STEP_TID(ps_pod_device_core(r->pod, src)),
                        "message", id, t);
}

static void on_message(void *ctx, int src, int dst, int tag, double bytes, ps_time_t sent,
                       ps_time_t arrived, uint64_t id)
{
  Run *r = ctx;
  if (r->trace)
    ps_trace_flow_end(r->trace, chip_pid(r, dst), STEP_TID(ps_pod_device_core(r->pod, dst)),
                      "message", id, arrived);
}

/* ---- the run -------------------------------------------------------- */

static void trace_metadata(Run *r)
{
  const PsTopology *t = r->exp->topology;
  int per_chip = ps_topology_devices_per_chip(t);
  int last_chip = -1;
  for (int d = 0; d < r->n_dev; d++) {
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
    char tname[80];
    if (r->plan->stages > 1)
      g_snprintf(tname, sizeof tname, "%s %d: device %d, stage %d, replica %d",
                 per_chip > 1 ? "core" : "megacore", core, d, r->plan->stage_of[d],
                 r->plan->replica_of[d]);
    else
      g_snprintf(tname, sizeof tname, per_chip > 1 ? "core %d" : "megacore %d", core);
    ps_trace_thread(r->trace, chip + 1, core, tname, core);
    g_snprintf(tname, sizeof tname, "%s %d steps", per_chip > 1 ? "core" : "megacore", core);
    ps_trace_thread(r->trace, chip + 1, STEP_TID(core), tname, STEP_TID(core) - 100);
  }
}

/* The device whose view the breakdown gives.  Replicas: the one the
 * step's last collective most often waited for (device 0 without
 * collectives).  A pipeline: the busiest device (most compute, the first
 * on ties), the stage that sets the pace; its idle time is the bubble the
 * schedule and the partition leave. */
static int reporting_device(Run *r)
{
  if (r->plan->stages <= 1)
    return r->voted;
  int best = 0;
  for (int d = 1; d < r->n_dev; d++)
    if (cat_of(r, d)[PS_TIME_COMPUTE] > cat_of(r, best)[PS_TIME_COMPUTE])
      best = d;
  return best;
}

/* Parameters [*off, *off + *len) that device holds for its stage (all of
 * them without a pipeline). */
static void stage_params(Run *r, int device, size_t *off, size_t *len)
{
  const PsPlan *plan = r->plan;
  PsNet *net = r->nets[device];
  size_t n = ps_net_n_params(net), o, l;
  if (!plan->stage_first) {
    *off = 0;
    *len = n;
    return;
  }
  int s = plan->stage_of[device];
  int first = plan->stage_first[s], next = plan->stage_first[s + 1];
  ps_net_layer_params(net, first, &o, &l);
  *off = o;
  if (next < r->exp->model->n_layers) {
    ps_net_layer_params(net, next, &o, &l);
    *len = o - *off;
  } else {
    *len = n - *off;
  }
}

/* The device of replica 0 that runs stage s. */
static int stage_device(Run *r, int s)
{
  for (int d = 0; d < r->n_dev; d++)
    if (r->plan->replica_of[d] == 0 && r->plan->stage_of[d] == s)
      return d;
  g_assert_not_reached();
  return -1;
}

/* Replicas must end with identical weights: the largest difference of a
 * device's stage weights from replica 0's. */
static double replica_divergence(Run *r)
{
  double worst = 0;
  for (int i = 0; i < r->n_dev; i++) {
    if (r->plan->replica_of[i] == 0)
      continue;
    int d0 = stage_device(r, r->plan->stage_of[i]);
    size_t off, len;
    stage_params(r, i, &off, &len);
    const float *pi = ps_net_params(r->nets[i]) + off, *p0 = ps_net_params(r->nets[d0]) + off;
    for (size_t k = 0; k < len; k++)
      worst = fmax(worst, fabs((double)pi[k] - p0[k]));
  }
  return worst;
}

/* Copies every stage's weights of replica 0 into device 0's net, which
 * then holds the trained model whole (a no-op without a pipeline). */
static void gather_params(Run *r)
{
  for (int s = 1; s < r->plan->stages; s++) {
    int d = stage_device(r, s);
    size_t off, len;
    stage_params(r, d, &off, &len);
    memcpy(ps_net_params(r->nets[0]) + off, ps_net_params(r->nets[d]) + off,
           len * sizeof(float));
  }
}

static void summarise(Run *r, PsSummary *s)
{
  const PsExperiment *exp = r->exp;
  int64_t steps = exp->steps;
  s->steps = steps;
  s->measured_steps = steps - r->warm;
  int d = reporting_device(r);
  s->reporting_device = d;
  double measured = ps_time_to_s(r->t1[d] - r->t0[d]);
  s->step_time_s = measured / (double)s->measured_steps;
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
    s->breakdown[c] = cat_of(r, d)[c] / (double)s->measured_steps;
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
    s->compute_memory_s += prog->ops[i].memory_s;
    s->compute_overhead_s += prog->ops[i].overhead_s;
  }
  int64_t peak = 0;
  for (int i = 0; i < r->n_dev; i++)
    peak = MAX(peak, ps_plan_program(r->plan, i)->hbm_static_bytes + r->peak[i]);
  s->hbm_peak_bytes = peak;
  ps_time_t end = 0;
  for (int i = 0; i < r->n_dev; i++)
    end = MAX(end, r->t1[i]);
  s->sim_time_s = ps_time_to_s(end);
  s->devices = r->n_dev;
  s->replicas = r->plan->replicas;
  s->stages = r->plan->stages;
  s->micro_batches = r->plan->micro_batches;
  s->buckets = r->plan->n_buckets;
  if (r->numerics) {
    s->has_numerics = TRUE;
    s->loss_first = r->loss_first;
    s->loss_last = r->loss_last;
    s->replica_divergence = replica_divergence(r);
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

void ps_summary_clear(PsSummary *s)
{
  g_free(s->host_calls_json);
  s->host_calls_json = NULL;
  g_free(s->params);
  s->params = NULL;
}

static gboolean evaluate(Run *r, PsSummary *s, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  PsDataset *own = NULL;
  const PsDataset *test = r->fashion_test;
  if (exp->input.source == PS_SOURCE_FASHION_MNIST && !test)
    test = own = ps_dataset_open_fashion_mnist(exp->input.data_dir, FALSE, error);
  else if (exp->input.source != PS_SOURCE_FASHION_MNIST)
    /* same class prototypes (same seed), fresh noise (a larger set) */
    test = own = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                          SYNTHETIC_TEST_EXAMPLES, exp->numerics.seed);
  if (!test)
    return FALSE;
  s->has_accuracy = TRUE;
  s->test_accuracy = ps_net_accuracy(r->nets[0], ps_dataset_images(test),
                                     ps_dataset_labels(test), ps_dataset_size(test));
  ps_dataset_free(own);
  return TRUE;
}

static void run_free(Run *r)
{
  if (r->trace)
    ps_trace_abort(r->trace);
  numerics_free(r);
  g_free(r->cat);
  g_free(r->loop_wait);
  g_free(r->mxu_flops);
  g_free(r->t0);
  g_free(r->t1);
  g_free(r->votes);
  if (r->open_steps)
    g_hash_table_destroy(r->open_steps);
  g_free(r->live);
  g_free(r->peak);
  if (r->coll_lanes)
    for (int i = 0; i < r->n_dev; i++)
      lanes_clear(&r->coll_lanes[i]);
  g_free(r->coll_lanes);
  for (int c = 0; r->coll_arrivals && c < r->plan->n_colls; c++)
    g_array_free(r->coll_arrivals[c], TRUE);
  g_free(r->coll_arrivals);
  g_free(r->coll_last);
  for (int i = 0; r->flow_ends && i < r->n_dev; i++)
    g_array_free(r->flow_ends[i], TRUE);
  g_free(r->flow_ends);

  g_free(r->step_start);
  for (int l = 0; l < PS_HOST_N_LANES; l++)
    lanes_clear(&r->host_lanes[l]);
  g_free(r->host_named);
  g_free(r->host_batches);
  if (r->histograms)
    for (int i = 0; i < r->exp->n_host_calls; i++)
      g_free(r->histograms[i].counts);
  g_free(r->histograms);
}

/* ---- checks before a run ------------------------------------------- */

/* The longest compute of one step of any program: the sum of its ops'
 * times (kernels and launches).  Communication, waiting and the host only
 * add to a step, so every step takes at least this much simulated time. */
static ps_time_t step_lower_bound(const PsPlan *plan)
{
  ps_time_t most = 0;
  for (int p = 0; p < plan->n_programs; p++) {
    ps_time_t sum = 0;
    for (int i = 0; i < plan->programs[p].n_ops; i++)
      sum = ps_time_add(sum, plan->programs[p].ops[i].time);
    most = MAX(most, sum);
  }
  return most;
}

/* A step count the clock can hold at a step's lower bound: more would run
 * until the simulated time overflowed, for ever in wall time. */
static gboolean check_steps(const PsExperiment *exp, const PsPlan *plan, GError **error)
{
  ps_time_t step = MAX(step_lower_bound(plan), 1);
  int64_t most = PS_TIME_NEVER / step;
  if (exp->steps <= most && step < PS_TIME_NEVER)
    return TRUE;
  if (step == PS_TIME_NEVER)
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days) within one step: "
                "a duration too long or a rate too small for the simulator's clock (look at "
                "the topology's peak_flops, HBM bandwidth and the model's sizes)", exp->file);
  else
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days): steps: %"
                G_GINT64_FORMAT " steps cannot fit the simulator's clock, each computing for at "
                "least %.6g s; run at most %" G_GINT64_FORMAT " steps (fewer steps, or fewer "
                "epochs)", exp->file, exp->steps, ps_time_to_s(step), most);
  return FALSE;
}

/* An output file the run can write: not a directory, and where a file can
 * be created (a missing or read-only directory would only fail at the end
 * of the run).  Probed as the writers create theirs, with a temporary file
 * beside it, removed at once. */
static gboolean check_output(const char *path, const char *what, GError **error)
{
  if (!path)
    return TRUE;
  int err = 0;
  if (!*path) {
    err = ENOENT;
  } else if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    err = EISDIR;
  } else if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_autofree char *probe = g_strdup_printf("%s.tmp-XXXXXX", path);
    int fd = g_mkstemp_full(probe, O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) {
      err = errno;
    } else {
      close(fd);
      g_unlink(probe);
    }
  } /* else replaced, or written in place if not a regular file */
  if (!err)
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot write the %s: %s", path,
              what, g_strerror(err));
  return FALSE;
}

static gboolean check_run(const PsExperiment *exp, const PsPlan *plan,
                          const PsRunOptions *opt, GError **error)
{
  return check_steps(exp, plan, error) &&
         check_output(opt ? opt->trace_path : NULL, "trace", error) &&
         check_output(opt ? opt->links_csv : NULL, "link statistics", error);
}

gboolean ps_run_check(const PsExperiment *exp, const PsRunOptions *opt, GError **error)
{
  g_return_val_if_fail(exp != NULL, FALSE);
  PsPlan *plan = ps_strategy_compile(exp, error);
  if (!plan)
    return FALSE;
  gboolean ok = check_run(exp, plan, opt, error);
  ps_plan_free(plan);
  return ok;
}

int64_t ps_run_trace_estimate(const PsExperiment *exp, const PsPlan *plan, gboolean links)
{
  /* bytes of one event line, measured on shipped traces: an op slice with
   * its args about 260, a wait or collective slice about 150, a flow event
   * about 110, a counter sample about 90, a link's chunk with its args
   * about 220 (every op is counted, though those of no time are not drawn:
   * an upper side) */
  const double op_line = 260, short_line = 150, flow_line = 110, counter_line = 90,
               chunk_line = 220;
  double per_step = 0;
  for (int d = 0; d < plan->n_devices; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    int waits = 0;
    for (int i = 0; i < p->n_ops; i++) {
      const PsOp *op = &p->ops[i];
      waits += op->kind == PS_OP_COLL_DONE || op->kind == PS_OP_RECV || op->kind == PS_OP_INFEED;
      /* with links: the chunks of a batch over PCIe, of a SEND over ICI */
      if (links && (op->kind == PS_OP_INFEED || op->kind == PS_OP_SEND))
        per_step += MAX(1.0, op->bytes / (double)exp->collective.chunk_bytes) * chunk_line +
                    3 * flow_line;
    }
    /* an op, and the HBM counter it may move; the step slice; the host's
     * input slices and the infeed-depth counter, a few per device */
    per_step += p->n_ops * (op_line + counter_line) + waits * short_line + short_line +
                4 * (short_line + counter_line);
  }
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    per_step += pc->n_members * short_line;
    if (links) { /* chunks of a ring: 2 (n - 1) steps of count / n each, per member */
      double bytes = (double)pc->count * pc->elem_bytes;
      double chunks = MAX(1.0, bytes / pc->n_members / (double)exp->collective.chunk_bytes);
      double messages = 2.0 * (pc->n_members - 1) * pc->n_members;
      per_step += messages * (chunks * chunk_line + 3 * flow_line);
    }
  }
  double bytes = per_step * (double)exp->steps;
  return bytes > 9e18 ? INT64_MAX : (int64_t)bytes;
}

gboolean ps_run(const PsExperiment *exp, const PsRunOptions *opt, PsSummary *out,
                GError **error)
{
  gboolean ok = FALSE;
  Run r = {.exp = exp, .log = opt ? opt->log : NULL,
           .fashion_train = opt ? opt->fashion_train : NULL,
           .fashion_test = opt ? opt->fashion_test : NULL};
  memset(out, 0, sizeof *out);
  gint64 wall0 = g_get_monotonic_time();
  ps_kernels_init();

  PsPlan *plan = ps_strategy_compile(exp, error);
  if (!plan)
    return FALSE;
  if (!check_run(exp, plan, opt, error)) {
    ps_plan_free(plan);
    return FALSE;
  }
  r.plan = plan;
  r.n_dev = plan->n_devices;
  int64_t steps = exp->steps;
  r.warm = steps > exp->steps_per_run ? exp->steps_per_run : 0;
  r.cat = g_new0(double, (size_t)r.n_dev * PS_TIME_N_CATEGORIES);
  r.loop_wait = g_new0(double, r.n_dev);
  r.mxu_flops = g_new0(double, r.n_dev);
  r.t0 = g_new0(ps_time_t, r.n_dev);
  r.t1 = g_new0(ps_time_t, r.n_dev);
  r.live = g_new0(int64_t, r.n_dev);
  r.peak = g_new0(int64_t, r.n_dev);
  r.votes = g_new0(int64_t, r.n_dev);
  r.open_steps = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  for (int d = 0; d < r.n_dev; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    for (int i = 0; i < p->n_ops; i++)
      if (p->ops[i].kind == PS_OP_OUTFEED) {
        r.outfeeders++;
        break;
      }
  }
  r.histograms = g_new0(PsHistogram, exp->n_host_calls ? exp->n_host_calls : 1);
  r.numerics = exp->numerics.enabled;

  gboolean tracing = opt && opt->trace_path;
  if (tracing) {
    out->trace_estimate_bytes = ps_run_trace_estimate(exp, plan, opt->trace_links);
    if (opt->trace_max_bytes > 0 && out->trace_estimate_bytes > opt->trace_max_bytes) {
      out->trace_skipped = TRUE;
      tracing = FALSE;
    }
  }
  PsEngine *engine = ps_engine_new();
  PsPodObserver obs = {.ctx = &r,
                       .op_done = on_op_done,
                       .wait = on_wait,
                       .step_done = on_step_done,
                       .infeed_depth = on_infeed_depth,
                       .host_work = on_host_work,
                       .coll_arrived = on_coll_arrived,
                       .coll_done = on_coll_done,
                       .message_sent = tracing ? on_message_sent : NULL,
                       .message = tracing ? on_message : NULL,
                       /* messages through the links: only when they are drawn */
                       .coll_message = tracing && opt->trace_links ? on_coll_message : NULL};
  PsPodNumerics num = {.ctx = &r, .op = numerics_op, .coll_buffer = numerics_coll_buffer};
  r.pod = ps_pod_new(engine, exp, plan, &obs, r.numerics ? &num : NULL, error);
  if (!r.pod)
    goto out;
  if (r.numerics && !numerics_init(&r, error))
    goto out;
  if (tracing) {
    r.trace = ps_trace_open(opt->trace_path, error);
    if (!r.trace)
      goto out;
    r.coll_lanes = g_new0(Lanes, r.n_dev);
    r.coll_arrivals = g_new(GArray *, plan->n_colls > 0 ? plan->n_colls : 1);
    r.coll_last = g_new0(int, plan->n_colls > 0 ? plan->n_colls : 1);
    for (int c = 0; c < plan->n_colls; c++)
      r.coll_arrivals[c] = g_array_new(FALSE, FALSE, sizeof(ps_time_t));

    r.step_start = g_new0(ps_time_t, r.n_dev);
    r.host_named = g_new0(guint8, ps_topology_hosts(exp->topology));
    r.host_batches = g_new0(int64_t, ps_topology_hosts(exp->topology));
    trace_metadata(&r);
    if (opt->trace_links) {
      ps_network_set_trace(ps_pod_network(r.pod), r.trace, LINKS_PID);
      r.flow_ends = g_new(GArray *, r.n_dev);
      for (int i = 0; i < r.n_dev; i++)
        r.flow_ends[i] = g_array_new(FALSE, FALSE, sizeof(FlowEnd));
    }
  }

  if (opt && opt->max_events)
    ps_engine_set_max_events(engine, opt->max_events);
  ps_pod_start(r.pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  if (ps_engine_limited(engine)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: stopped after %" G_GUINT64_FORMAT " events (--max-events) at %.6g s of "
                "simulated time, before the run's end; run fewer steps or a smaller slice, or "
                "raise --max-events", exp->file, ps_engine_events_run(engine),
                ps_time_to_s(ps_engine_now(engine)));
    goto out;
  }
  if (ps_engine_overflowed(engine)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days) after %.6g s: "
                "a duration too long or a rate too small for the simulator's clock (look at "
                "the topology's latencies, bandwidths and peak_flops, and the input's "
                "host_cost_per_example_s)", exp->file, ps_time_to_s(ps_engine_now(engine)));
    goto out;
  }
  if (!ps_pod_check_finished(r.pod, error))
    goto out;
  summarise(&r, out);
  out->collective_algorithm =
      plan->n_colls > 0 ? ps_pod_coll_algorithm(r.pod, plan->n_colls - 1) : NULL;
  summarise_host_calls(&r, out);
  if (r.numerics)
    gather_params(&r);
  if (r.numerics && exp->numerics.evaluate && !evaluate(&r, out, error))
    goto out;
  if (r.numerics && opt && opt->keep_params) {
    out->n_params = ps_net_n_params(r.nets[0]);
    out->params = g_memdup2(ps_net_params(r.nets[0]), sizeof(float) * out->n_params);
  }
  out->events = ps_engine_events_run(engine);
  if (opt && opt->links_csv &&
      !ps_link_stats_write(ps_pod_network(r.pod), ps_engine_now(engine), opt->links_csv, error))
    goto out;
  if (r.trace) {
    out->trace_events = ps_trace_events(r.trace);
    PsTrace *t = r.trace;
    r.trace = NULL;
    GStatBuf st; /* the CSV we wrote, never a device or FIFO written in place */
    if (!ps_trace_close(t, error)) {
      if (opt->links_csv && g_lstat(opt->links_csv, &st) == 0 && S_ISREG(st.st_mode))
        g_unlink(opt->links_csv);
      goto out;
    }
  }
  out->wall_s = (double)(g_get_monotonic_time() - wall0) / 1e6;
  out->events_per_s = out->wall_s > 0 ? (double)out->events / out->wall_s : 0;
  ok = TRUE;
out:
  if (!ok)
    ps_summary_clear(out);
  run_free(&r);
  ps_pod_free(r.pod);
  ps_engine_free(engine);
  ps_plan_free(plan);
  return ok;
}

/* The plan the experiment compiles to, for `describe --program`.
 * (transfer full) */
PsPlan *ps_run_compile(const PsExperiment *exp, GError **error)
{
  return ps_strategy_compile(exp, error);
}

/* ---- reporting ------------------------------------------------------ */

char *ps_summary_to_json(const PsExperiment *exp, const PsSummary *s)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "experiment", json_object_new_string(exp->name));
  json_object_object_add(o, "topology", json_object_new_string(exp->topology->name));
  json_object_object_add(o, "model", json_object_new_string(exp->model->name));
  json_object_object_add(o, "strategy", json_object_new_string(
                                          exp->strategy.kind == PS_STRATEGY_PIPELINE
                                              ? "pipeline" : "replicate"));
  json_object_object_add(o, "devices", json_object_new_int(s->devices));
  json_object_object_add(o, "devices_in_topology",
                         json_object_new_int(ps_topology_devices(exp->topology)));
  json_object_object_add(o, "replicas", json_object_new_int(s->replicas));
  json_object_object_add(o, "stages", json_object_new_int(s->stages));
  json_object_object_add(o, "micro_batches", json_object_new_int(s->micro_batches));
  if (exp->strategy.kind == PS_STRATEGY_PIPELINE) {
    json_object_object_add(o, "schedule", json_object_new_string(
                                            exp->strategy.schedule == PS_SCHEDULE_1F1B ? "1f1b"
                                                                                      : "gpipe"));
    json_object_object_add(o, "rematerialize",
                           json_object_new_boolean(exp->strategy.rematerialize));
  }
  json_object_object_add(o, "global_batch", json_object_new_int64(exp->global_batch));
  json_object_object_add(o, "precision", json_object_new_string(
                                           exp->numerics.precision == PS_PRECISION_BF16 ? "bf16"
                                                                                        : "f32"));
  json_object_object_add(o, "gradient_buckets", json_object_new_int(s->buckets));
  json_object_object_add(o, "overlap", json_object_new_boolean(exp->strategy.overlap));
  json_object_object_add(o, "weight_update_sharding",
                         json_object_new_boolean(exp->strategy.weight_update_sharding));
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
  json_object_object_add(o, "examples_per_s", json_object_new_double(s->examples_per_s));
  json_object_object_add(o, "mxu_utilization", json_object_new_double(s->mxu_utilization));
  json_object *cs = json_object_new_object();
  json_object_object_add(cs, "mxu_s", json_object_new_double(s->compute_mxu_s));
  json_object_object_add(cs, "memory_s", json_object_new_double(s->compute_memory_s));
  json_object_object_add(cs, "overhead_s", json_object_new_double(s->compute_overhead_s));
  json_object_object_add(o, "compute_split", cs);
  json_object_object_add(o, "hbm_peak_bytes", json_object_new_int64(s->hbm_peak_bytes));
  if (s->has_numerics) {
    json_object_object_add(o, "loss_first", json_object_new_double(s->loss_first));
    json_object_object_add(o, "loss_last", json_object_new_double(s->loss_last));
  }
  if (s->has_numerics && s->devices > 1)
    json_object_object_add(o, "replica_divergence", json_object_new_double(s->replica_divergence));
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

static void print_time(FILE *f, TimeUnit u, const char *label, double s, double total)
{
  fprintf(f, "  %-16s %10.3f %s  %5.1f%%\n", label, s * u.scale, u.name,
          total > 0 ? 100.0 * s / total : 0);
}

void ps_summary_print(const PsExperiment *exp, const PsSummary *s, FILE *f)
{
  TimeUnit u = unit_for(s->step_time_s);
  fprintf(f, "\nstep time        %10.3f %s  (mean of %" G_GINT64_FORMAT " steps after warm-up)\n",
          s->step_time_s * u.scale, u.name, s->measured_steps);
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    print_time(f, u, ps_time_category_name(c), s->breakdown[c], s->step_time_s);
  fprintf(f, "  (host loop      %10.3f %s per step: one round trip every %" G_GINT64_FORMAT
             " steps)\n", s->host_loop_s * u.scale, u.name, exp->steps_per_run);
  fprintf(f, "  (compute        %10.3f %s MXU-bound, %.3f %s memory-bound (HBM or VPU), %.3f %s "
             "launch overhead)\n", s->compute_mxu_s * u.scale, u.name,
          s->compute_memory_s * u.scale, u.name, s->compute_overhead_s * u.scale, u.name);
  int64_t chunk = exp->collective.chunk_bytes;
  g_autofree char *chunk_text = chunk % 1048576 == 0
                                    ? g_strdup_printf("%" G_GINT64_FORMAT " MiB", chunk / 1048576)
                                    : g_strdup_printf("%.3g MB", chunk / 1e6);
  if (s->collective_algorithm)
    fprintf(f, "  (gradients      %d bucket%s, %s %s over %d replicas%s, chunks of %s)\n",
            s->buckets, s->buckets == 1 ? "" : "s",
            exp->strategy.weight_update_sharding ? "reduce-scatter + all-gather" : "all-reduce",
            s->collective_algorithm, s->replicas,
            exp->strategy.overlap ? ", overlapping backward" : "", chunk_text);
  if (s->stages > 1) {
    int K = s->stages, M = s->micro_batches;
    fprintf(f, "  (pipeline       %d stages x %d micro-batches, %s%s: bubble %.1f%% of the step; "
               "with equal stages (K-1)/(M+K-1) = %.1f%%)\n", K, M,
            exp->strategy.schedule == PS_SCHEDULE_1F1B ? "1f1b" : "gpipe",
            exp->strategy.rematerialize ? ", re-materialized" : "",
            100.0 * s->breakdown[PS_TIME_PIPELINE_BUBBLE] / s->step_time_s,
            100.0 * (K - 1) / (M + K - 1));
  }
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

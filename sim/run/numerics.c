/* numerics.c: the run's real arithmetic (see run-private.h).  Each device
 * has its own net and optimizer, started from the same weights; each op
 * runs its kernels on real batches as the pod ends it, a pipeline's
 * messages carry real activations and their gradients, and collectives
 * reduce the buffers ps_run_numerics_coll_buffer hands them.
 * Invariant: numerics never change what the pod does or when; every
 * replica of a stage ends with the same weights (replica_divergence says
 * by how much they do not). */
#include "run-private.h"

#include "model/kernels.h"

#include <math.h>
#include <string.h>

#define SYNTHETIC_TEST_EXAMPLES 10000

static void message_queue_free(gpointer q)
{
  g_queue_free_full(q, g_free);
}

static gint64 message_key(int src, int dst, int tag)
{
  return ((gint64)src << 40) | ((gint64)dst << 20) | tag;
}

static PsOptimizer *new_optimizer(const PsOptimizerConfig *o, const PsNet *net)
{
  size_t n = ps_net_n_params(net);
  if (o->kind == PS_OPT_SGD)
    return ps_optimizer_new_sgd(n, (float)o->learning_rate, (float)o->momentum);
  if (o->kind == PS_OPT_ADAM)
    return ps_optimizer_new_adam(n, (float)o->learning_rate, (float)o->beta1, (float)o->beta2,
                                 (float)o->epsilon);
  PsLayerwiseConfig c = {.lamb = o->kind == PS_OPT_LAMB, .lr = (float)o->learning_rate,
                         .momentum = (float)o->momentum, .eta = (float)o->trust_coefficient,
                         .beta1 = (float)o->beta1, .beta2 = (float)o->beta2,
                         .eps = (float)o->epsilon, .weight_decay = (float)o->weight_decay};
  int n_segs = 0;
  g_autofree PsOptSegment *segs = ps_net_opt_segments(net, &n_segs);
  return ps_optimizer_new_layerwise(&c, n, segs, n_segs);
}

gboolean ps_run_numerics_init(Run *r, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  const PsPlan *plan = r->plan;
  const PsInputConfig *in = &exp->input;
  if (in->source == PS_SOURCE_FASHION_MNIST && r->fashion_train)
    r->train = r->fashion_train;
  else if (in->source == PS_SOURCE_FASHION_MNIST)
    r->train = r->own_train = ps_dataset_open_fashion_mnist(in->data_dir, TRUE, error);
  else if (in->source == PS_SOURCE_TEXT)
    r->train = r->own_train = ps_dataset_open_text(in->text_file, in->sequence, in->stride,
                                                   in->test_fraction, TRUE, error);
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
  r->norm_cap = 1;
  for (int c = 0; c < plan->n_colls; c++)
    if (plan->colls[c].buffer == PS_BUFFER_NORM)
      r->norm_cap = MAX(r->norm_cap, plan->colls[c].offset + plan->colls[c].count);
  r->norm = g_new0(float, (size_t)r->n_dev * (size_t)r->norm_cap);
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
    r->opts[d] = new_optimizer(&exp->optimizer, r->nets[d]);
    if (exp->numerics.weight_precision == PS_PRECISION_BF16) { /* stored in bf16 */
      float *w = ps_net_params(r->nets[d]);
      ps_bf16_round_array(w, w, ps_net_n_params(r->nets[d]));
      ps_optimizer_set_state_bf16(r->opts[d], TRUE);
    }
    for (int c = 0; c < plan->n_colls; c++) /* statistics all-reduced in groups */
      if (plan->colls[c].buffer == PS_BUFFER_BN_STATS && ps_plan_coll_member(plan, c, d) >= 0)
        ps_net_set_batchnorm_group(r->nets[d], plan->colls[c].layer, plan->colls[c].n_members);
    /* replica r of R takes examples [r B/R, (r+1) B/R) of the global batch;
     * the fsdp axis splits the batch as the data axis does (data-major) */
    int F = ps_plan_axis_size(plan, PS_AXIS_FSDP);
    int64_t replica = (int64_t)ps_plan_coord(plan, d, PS_AXIS_DATA) * F +
                      ps_plan_coord(plan, d, PS_AXIS_FSDP);
    r->example_base[d] =
        replica * (exp->global_batch / ((int64_t)ps_plan_axis_size(plan, PS_AXIS_DATA) * F));
  }
  size_t elems = ps_dataset_example_elems(r->train);
  r->batch_x = g_new(float, (size_t)exp->global_batch * elems);
  r->batch_y = g_new(int32_t, (size_t)exp->global_batch * ps_dataset_labels_per_example(r->train));
  r->drawn_step = -1;
  return ps_run_fsdp_init(r, error) && ps_run_tensor_init(r, error) && ps_run_sequence_init(r, error) &&
         ps_run_ring_init(r, error);
}

void ps_run_numerics_free(Run *r)
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
  g_free(r->norm);
  g_free(r->loss_n);
  if (r->messages)
    g_hash_table_destroy(r->messages);
  if (r->sampler)
    ps_sampler_free(r->sampler);
  ps_dataset_free(r->own_train);
  g_free(r->batch_x);
  g_free(r->batch_y);
  ps_run_fsdp_free(r);
  ps_run_tensor_free(r);
  ps_run_sequence_free(r);
  ps_run_ring_free(r);
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
  if (ps_plan_coord(r->plan, device, PS_AXIS_DATA) != 0)
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

/* The device's share of the step's global batch (drawn by the step's
 * first INFEED) as its net's input, training: dropout's masks are keyed
 * by the step and the examples' places in the global batch. */
static void set_input(Run *r, PsNet *net, int device, int64_t step, const PsOp *op)
{
  size_t elems = ps_dataset_example_elems(r->train);
  size_t per = ps_dataset_labels_per_example(r->train);
  size_t off = (size_t)(r->example_base[device] + op->example_off);
  ps_net_set_input(net, r->batch_x + off * elems, r->batch_y + off * per, (int)op->batch);
  ps_net_set_dropout(net, step, (int64_t)off);
}

static void infeed_batch(Run *r, PsNet *net, int device, int64_t step, const PsOp *op)
{
  if (r->drawn_step != step) {
    ps_sampler_next(r->sampler, (int)r->exp->global_batch, r->batch_x, r->batch_y);
    r->drawn_step = step;
  }
  ps_net_select_slot(net, op->mb);
  set_input(r, net, device, step, op);
}

static void send_message(Run *r, PsNet *net, int device, const PsOp *op)
{
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
}

static void recv_message(Run *r, PsNet *net, int device, int64_t step, const PsOp *op)
{
  ps_net_select_slot(net, op->mb);
  if (op->labels) { /* the micro-batch of this step that stage 0 took */
    g_assert(r->drawn_step == step);
    set_input(r, net, device, step, op);
  } else if (op->tag % 2 == 0) {
    ps_net_set_batch(net, (int)op->batch);
    ps_net_set_dropout(net, step, r->example_base[device] + op->example_off);
  }
  gint64 key = message_key(op->peer, device, op->tag);
  GQueue *q = g_hash_table_lookup(r->messages, &key);
  g_assert(q != NULL && !g_queue_is_empty(q));
  g_autofree float *payload = g_queue_pop_head(q);
  size_t n = 0;
  float *x = message_buffer(net, op, &n);
  g_assert(x != NULL);
  memcpy(x, payload, n * sizeof *x);
}

float *ps_run_update_sums(Run *r, int device, const PsOp *op, int64_t *n)
{
  float *sums = ps_run_norm(r, device) + op->norm_slot;
  *n = op->update_pass ? 2 * (int64_t)ps_optimizer_layer_count(r->opts[device],
                                                               (size_t)op->param_off,
                                                               (size_t)op->param_len)
                       : 0;
  g_assert(op->norm_slot + *n <= r->norm_cap); /* the lowering counted these layers */
  if (op->update_pass == 1)
    memset(sums, 0, sizeof *sums * (size_t)*n);
  return sums;
}

void ps_run_update_piece(Run *r, int device, int64_t step, const PsOp *op, float *params,
                         const float *grads, size_t off, size_t len, float *sums)
{
  PsOptimizer *opt = r->opts[device];
  size_t roff = (size_t)op->param_off, rlen = (size_t)op->param_len;
  int layers = 0;
  if (op->update_pass == 1)
    layers = ps_optimizer_layer_sums(opt, params, grads, roff, rlen, off, len, step + 1, sums);
  else if (op->update_pass == 2)
    layers = ps_optimizer_layer_apply(opt, params, grads, roff, rlen, off, len, step + 1, sums);
  else
    ps_optimizer_step_range(opt, params, grads, off, len, step + 1);
  g_assert(layers >= 0); /* the op's range cuts no layer */
}

static void update_params(Run *r, PsNet *net, int device, int64_t step, const PsOp *op)
{
  int64_t off = op->param_off, len = op->param_len;
  const PsOptimizerConfig *oc = &r->exp->optimizer;
  if (oc->schedule == PS_LR_COSINE) /* step k of S: lr (1 + cos(pi k / S)) / 2 */
    ps_optimizer_set_lr(r->opts[device],
                        (float)(oc->learning_rate * 0.5 *
                                (1.0 + cos(G_PI * (double)step / (double)r->exp->steps))));
  if (ps_run_fsdp_update(r, device, step, op) || /* an fsdp mesh: the blocks it owns */
      ps_run_tensor_update(r, device, step, op))  /* a tensor mesh: its shard */
    return;
  /* a reduce-scattered bucket: this device's shard, in one piece or
   * several (multiring), scaled first when clipping the reduced gradient
   * (the norm's all-reduce left the replicas' sum of squares in norm) */
  int coll = ps_plan_op_coll(r->plan, device, op);
  double limit = oc->clip_norm, norm = sqrt((double)*ps_run_norm(r, device));
  float f = coll >= 0 && limit > 0 && !oc->clip_before_reduce && norm > limit &&
                    op->update_pass != 2 /* its first pass scaled them */
                ? (float)(limit / norm)
                : 1.0f;
  /* a layer-wise update in two passes: the layers' sums of squares of the
   * device's blocks, from the op's slot of NORM, which an all-reduce adds
   * up before the second pass */
  int64_t n_sums;
  float *sums = ps_run_update_sums(r, device, op, &n_sums);
  int pieces = 1;
  for (int k = 0; k < pieces; k++) {
    int64_t boff = 0, blen = len;
    if (coll >= 0)
      pieces = ps_pod_coll_block(r->pod, coll, device, k, &boff, &blen);
    float *g = ps_net_grads(net) + off + boff;
    for (int64_t i = 0; f != 1.0f && i < blen; i++)
      g[i] *= f;
    ps_run_update_piece(r, device, step, op, ps_net_params(net), ps_net_grads(net),
                        (size_t)(off + boff), (size_t)blen, sums);
  }
}

/* CLIP: gradient clipping by global norm over the op's range, the norm in
 * double.  Before the reduction (clip_local) the replica clips the
 * gradient of its own loss, its buffer over the plan's loss scale; after
 * it, the reduced gradient in its buffer.  A norm within the limit (or not
 * a number) leaves the gradient as it is. */
static void clip_grads(Run *r, PsNet *net, const PsOp *op)
{
  float *g = ps_net_grads(net) + op->param_off;
  double ss = 0;
  for (int64_t i = 0; i < op->param_len; i++)
    ss += (double)g[i] * (double)g[i];
  double norm = sqrt(ss), limit = r->exp->optimizer.clip_norm;
  if (op->clip_local)
    norm /= r->plan->loss_scale;
  if (!(norm > limit))
    return;
  float s = (float)(limit / norm);
  for (int64_t i = 0; i < op->param_len; i++)
    g[i] *= s;
}

/* CLIP of the reduced gradient's shards (weight-update sharding): the sum
 * of squares, in double, of the device's blocks of its gradient
 * reduce-scatters, into its NORM buffer for the all-reduce that adds the
 * replicas' up. */
static void clip_shard_norm(Run *r, PsNet *net, int device)
{
  const PsProgram *pr = ps_plan_program(r->plan, device);
  const float *grads = ps_net_grads(net);
  double ss = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    int c = pr->ops[i].kind == PS_OP_COLL_START ? ps_plan_op_coll(r->plan, device, &pr->ops[i])
                                                : -1;
    const PsPlanColl *pc = c >= 0 ? &r->plan->colls[c] : NULL;
    if (!pc || pc->op != PS_COLL_REDUCE_SCATTER || pc->buffer != PS_BUFFER_GRADS)
      continue;
    int pieces = 1;
    for (int k = 0; k < pieces; k++) {
      int64_t off = 0, len = 0;
      pieces = ps_pod_coll_block(r->pod, c, device, k, &off, &len);
      const float *g = grads + pc->offset + off;
      for (int64_t j = 0; j < len; j++)
        ss += (double)g[j] * (double)g[j];
    }
  }
  *ps_run_norm(r, device) = (float)ss;
}

/* OUTFEED: the device's loss of the step, the mean over its micro-batches
 * weighted among replicas; once every device outfed, their sum in device
 * order is the step's. */
static void outfeed_loss(Run *r, int device, int64_t step, const PsOp *op)
{
  StepState *st = ps_run_step_state(r, step);
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

/* The arithmetic of a FWD, RECOMPUTE or BWD (kind) of op's layers.  A
 * decomposed op (collective matmul) computes whole at its first ring
 * step, which comes before its first part: the ring then carries blocks
 * of its real result. */
static void compute(Run *r, PsNet *net, int device, const PsOp *op, PsOpKind kind)
{
  ps_net_select_slot(net, op->mb);
  if (kind == PS_OP_BWD) {
    for (int i = op->last; i >= op->first; i--) {
      ps_run_sequence_bwd_layer(r, device, i);
      ps_net_backward_layer(net, i, r->plan->loss_scale);
    }
    ps_run_tensor_bwd_done(r, device, op);
    return;
  }
  for (int i = op->first; i <= op->last; i++)
    if (!ps_run_tensor_skips(r, i))
      ps_net_forward_layer(net, i);
  if (kind == PS_OP_FWD && op->last == r->exp->model->n_layers - 1 &&
      !ps_run_tensor_skips(r, op->last)) {
    r->loss_acc[device] += ps_net_loss(net);
    r->loss_n[device]++;
  }
}

void ps_run_numerics_op(void *ctx, int device, int64_t step, const PsOp *op)
{
  Run *r = ctx;
  PsNet *net = r->nets[device];
  if (r->grad_step[device] != step) { /* gradients accumulate over a step's micro-batches */
    ps_net_zero_grads(net);
    r->grad_step[device] = step;
  }
  switch (op->kind) {
  case PS_OP_INFEED:
    infeed_batch(r, net, device, step, op);
    break;
  case PS_OP_FWD:
  case PS_OP_RECOMPUTE:
  case PS_OP_BWD:
    /* a part of a decomposed op: its first ring step computed it; a tail:
     * the op before it */
    if (op->parts == 0 && !op->tail)
      compute(r, net, device, op, op->kind);
    break;
  case PS_OP_SEND:
    if (op->parts > 0 && op->part == 1)
      compute(r, net, device, op, op->ring_bwd ? PS_OP_BWD : PS_OP_FWD);
    if (op->parts > 0)
      ps_run_ring_send(r, device, op);
    else
      send_message(r, net, device, op);
    break;
  case PS_OP_RECV:
    if (op->parts > 0)
      ps_run_ring_recv(r, device, op);
    else
      recv_message(r, net, device, step, op);
    break;
  case PS_OP_UPDATE:
    update_params(r, net, device, step, op);
    break;
  case PS_OP_CLIP:
    if (ps_run_fsdp_clip(r, device) || /* an fsdp mesh: the norm of its shards */
        ps_run_tensor_clip(r, device))  /* a tensor mesh: its owned share */
      break;
    if (op->clip_shards) /* weight-update sharding: its blocks of the reduce-scatters */
      clip_shard_norm(r, net, device);
    else
      clip_grads(r, net, op);
    break;
  case PS_OP_OUTFEED:
    outfeed_loss(r, device, step, op);
    break;
  case PS_OP_HOST_CALL:
    host_call_numerics(r, device, op);
    break;
  case PS_OP_COLL_DONE:
    ps_run_fsdp_coll_done(r, device, ps_plan_op_coll(r->plan, device, op));
    ps_run_tensor_coll_done(r, device, ps_plan_op_coll(r->plan, device, op));
    break;
  default: /* collectives reduce into coll_buffer() */
    break;
  }
}

/* The buffer a device hands to a collective: its gradients, its weights,
 * a layer's output or its gradient in its current slot, or its gradient
 * shards, from the collective's offset.  The collective adds (or copies)
 * the members' elements into it in the order its algorithm delivers them. */
float *ps_run_numerics_coll_buffer(void *ctx, int device, int c)
{
  Run *r = ctx;
  const PsPlanColl *pc = &r->plan->colls[c];
  PsNet *net = r->nets[device];
  float *own = ps_run_tensor_coll_buffer(r, device, c);
  if (own) /* the vocab-parallel loss's rows, a packed gradient bucket */
    return own;
  switch (pc->buffer) {
  case PS_BUFFER_GRADS:
    return ps_net_grads(net) + pc->offset;
  case PS_BUFFER_PARAMS:
    return ps_net_params(net) + pc->offset;
  case PS_BUFFER_BN_STATS:
  case PS_BUFFER_BN_GRAD_STATS:
    return ps_net_batchnorm_moments(net, pc->layer, pc->buffer == PS_BUFFER_BN_GRAD_STATS,
                                    NULL);
  case PS_BUFFER_ACT_GRADS:
    return ps_net_activation_grad(net, pc->layer, NULL) + pc->offset;
  case PS_BUFFER_GRAD_SHARDS:
    return ps_run_fsdp_shards(r, device, pc->offset);
  case PS_BUFFER_NORM:
    return ps_run_norm(r, device) + pc->offset;
  default:
    return ps_net_activation(net, pc->layer, NULL) + pc->offset;
  }
}

/* The parameter ranges device owns (transfer full): its fsdp blocks, its
 * tensor shard, or the plan's mesh; a device the plan gives none holds
 * them all. */
static GArray *param_ranges(Run *r, int device)
{
  GArray *out = ps_run_fsdp_ranges(r, device);
  if (out)
    out = ps_run_tensor_net_ranges(r, device, out);
  else
    out = ps_run_tensor_ranges(r, device);
  if (out)
    return out;
  const PsMesh *mesh = &r->plan->mesh;
  out = g_array_new(FALSE, FALSE, sizeof(PsParamRange));
  if (mesh->n_ranges[device] > 0) {
    g_array_append_vals(out, mesh->ranges[device], (guint)mesh->n_ranges[device]);
    return out;
  }
  PsParamRange all = {0, (int64_t)ps_net_n_params(r->nets[device])};
  g_array_append_val(out, all);
  return out;
}

int ps_run_peer0(const Run *r, int device, PsAxis axis)
{
  for (int d = 0; d < r->n_dev; d++) {
    gboolean same = ps_plan_coord(r->plan, d, axis) == 0;
    for (int a = 0; a < PS_N_AXES && same; a++)
      same = a == (int)axis || ps_plan_coord(r->plan, d, a) == ps_plan_coord(r->plan, device, a);
    if (same)
      return d;
  }
  g_assert_not_reached();
  return -1;
}

/* Replicas must end with identical weights: the largest difference of the
 * weights a device owns from replica 0's, and of a tensor group's copies
 * of a replicated weight from rank 0's. */
static double replica_divergence(Run *r)
{
  double worst = ps_run_tensor_divergence(r);
  for (int i = 0; i < r->n_dev; i++) {
    if (ps_plan_coord(r->plan, i, PS_AXIS_DATA) == 0)
      continue;
    int d0 = ps_run_peer0(r, i, PS_AXIS_DATA);
    g_autoptr(GArray) rgs = param_ranges(r, i);
    for (guint k = 0; k < rgs->len; k++) {
      const PsParamRange *rg = &g_array_index(rgs, PsParamRange, k);
      const float *pi = ps_net_params(r->nets[i]) + rg->off;
      const float *p0 = ps_net_params(r->nets[d0]) + rg->off;
      for (int64_t j = 0; j < rg->len; j++)
        worst = fmax(worst, fabs((double)pi[j] - p0[j]));
    }
  }
  return worst;
}

/* Copies the weights every other device of replica 0 owns into device 0's
 * net, which then holds the trained model whole (a no-op without a
 * pipeline or fsdp). */
static void gather_params(Run *r)
{
  for (int d = 1; d < r->n_dev; d++) {
    if (ps_plan_coord(r->plan, d, PS_AXIS_DATA) != 0)
      continue;
    g_autoptr(GArray) rgs = param_ranges(r, d);
    for (guint k = 0; k < rgs->len; k++) {
      const PsParamRange *rg = &g_array_index(rgs, PsParamRange, k);
      memcpy(ps_net_params(r->nets[0]) + rg->off, ps_net_params(r->nets[d]) + rg->off,
             (size_t)rg->len * sizeof(float));
    }
  }
}

static gboolean evaluate(Run *r, PsSummary *s, GError **error)
{
  const PsExperiment *exp = r->exp;
  const PsModel *m = exp->model;
  PsDataset *own = NULL;
  const PsDataset *test = r->fashion_test;
  const PsInputConfig *in = &exp->input;
  if (in->source == PS_SOURCE_FASHION_MNIST && !test)
    test = own = ps_dataset_open_fashion_mnist(in->data_dir, FALSE, error);
  else if (in->source == PS_SOURCE_TEXT) /* the held-out end of the text */
    test = own = ps_dataset_open_text(in->text_file, in->sequence, in->stride,
                                      in->test_fraction, FALSE, error);
  else if (in->source != PS_SOURCE_FASHION_MNIST)
    /* same class prototypes (same seed), fresh noise (a larger set) */
    test = own = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                          SYNTHETIC_TEST_EXAMPLES, exp->numerics.seed);
  if (!test)
    return FALSE;
  /* accuracy and loss per label: per token for a language model, whose
   * perplexity is exp(mean loss per token) */
  s->has_accuracy = TRUE;
  s->test_accuracy = ps_net_evaluate(r->nets[0], ps_dataset_images(test),
                                     ps_dataset_labels(test), ps_dataset_size(test),
                                     &s->test_loss);
  s->per_token = ps_dataset_labels_per_example(test) > 1;
  ps_dataset_free(own);
  return TRUE;
}

void ps_run_numerics_summarise(Run *r, PsSummary *s)
{
  ps_run_tensor_sync(r);
  s->has_numerics = TRUE;
  s->loss_first = r->loss_first;
  s->loss_last = r->loss_last;
  s->replica_divergence = replica_divergence(r);
}

gboolean ps_run_numerics_finish(Run *r, const PsRunOptions *opt, PsSummary *s, GError **error)
{
  gather_params(r);
  if (r->exp->numerics.evaluate && !evaluate(r, s, error))
    return FALSE;
  if (s->has_accuracy && s->per_token)
    s->test_perplexity = exp(s->test_loss);
  if (opt && opt->keep_params) {
    s->n_params = ps_net_n_params(r->nets[0]);
    s->params = g_memdup2(ps_net_params(r->nets[0]), sizeof(float) * s->n_params);
  }
  return TRUE;
}

/* lower.c: shared lowering of layers to costed ops, gradient buckets and
 * the one HBM rule (declared in strategy-private.h).
 *
 * Invariant: every op's cost comes from hw/cost.h, and whether a device's
 * share fits is decided by ps_lower_fits alone, with one optimizer-slot
 * rule (ps_lower_optimizer_slots). */
#include "strategy/strategy-private.h"

#include "hw/cost.h"
#include "strategy/cost-options.h"

#include <math.h>
#include <stdio.h>

static gboolean host_call_after(const PsExperiment *exp, int layer)
{
  for (int h = 0; h < exp->n_host_calls; h++)
    if (exp->host_calls[h].after == layer)
      return TRUE;
  return FALSE;
}

GArray *ps_lower_layer_groups(const PsExperiment *exp, int first, int last)
{
  const PsModel *m = exp->model;
  GArray *starts = g_array_new(FALSE, FALSE, sizeof(int));
  for (int i = first; i < last; i++) {
    /* a reshape is free: it also joins the op of the layer after it */
    gboolean joins = i > first && (ps_cost_fuses_into_producer(m->layers[i].kind) ||
                                   m->layers[i - 1].kind == PS_LAYER_FLATTEN);
    if (!(exp->fuse_elementwise && joins) || (i > first && host_call_after(exp, i - 1)))
      g_array_append_val(starts, i);
  }
  g_array_append_val(starts, last);
  return starts;
}

static void set_cost(PsOp *op, const PsOpCost *c)
{
  op->time = c->time;
  op->flops = c->flops;
  op->mxu_flops = c->mxu_flops;
  op->hbm_bytes = c->bytes;
  op->memory_bound = c->memory_bound;
  op->kernels = c->kernels;
  op->mxu_s = c->mxu_s;
  op->serial_s = c->serial_s;
  op->memory_s = c->memory_s;
  op->overhead_s = c->overhead_s;
}

int64_t ps_lower_param_offset(const PsModel *model, int layer)
{
  int64_t off = 0;
  for (int i = 0; i < layer; i++)
    off += model->layers[i].params;
  return off;
}

void ps_lower_compute_op(const PsExperiment *exp, PsOp *op)
{
  const PsModel *m = exp->model;
  static const char *const prefix[PS_OP_N_KINDS] = {[PS_OP_FWD] = "fwd", [PS_OP_BWD] = "bwd",
                                                    [PS_OP_RECOMPUTE] = "recompute"};
  g_return_if_fail(op->kind == PS_OP_FWD || op->kind == PS_OP_BWD ||
                   op->kind == PS_OP_RECOMPUTE);
  if (op->first == op->last)
    snprintf(op->name, sizeof op->name, "%s %s", prefix[op->kind], m->layers[op->first].name);
  else
    snprintf(op->name, sizeof op->name, "%s %s..%s", prefix[op->kind],
             m->layers[op->first].name, m->layers[op->last].name);
  PsOpCost c;
  PsCostOptions opt;
  ps_strategy_cost_options(exp, &opt);
  ps_cost_op(exp->topology, m, op->first, op->last, op->batch, &opt, op->kind == PS_OP_BWD,
             NULL, &c);
  set_cost(op, &c);
  int64_t act = 0;
  for (int l = op->first; l <= op->last; l++)
    act += ps_layer_kept_bytes(&m->layers[l], op->batch, ps_cost_act_bytes(exp->numerics.precision)) -
           (exp->masks_recomputed ? ps_layer_mask_bytes(&m->layers[l], op->batch) : 0);
  op->act_bytes = op->kind == PS_OP_BWD ? -act : act;
}

int ps_lower_optimizer_slots(const PsExperiment *exp)
{
  PsOptimizerKind k = exp->optimizer.kind;
  return k == PS_OPT_ADAM || k == PS_OPT_LAMB ? 2 : 1;
}

/* The weights the op's range [param_off, +param_len) holds that a
 * layer-wise optimizer adapts, and the layers they are in; a device
 * updating a shard of `params` of the range takes its share of them and
 * of the layers (plus one cut at its ends). */
static PsUpdateShape update_shape(const PsExperiment *exp, const PsOp *op, int64_t params,
                                  int grad_bytes)
{
  const PsModel *m = exp->model;
  PsUpdateShape u = {.kind = exp->optimizer.kind, .params = params,
                     .state_bytes = ps_lower_weight_bytes(exp), .pass = op->update_pass,
                     .grad_bytes = grad_bytes};
  int64_t off = 0, end = op->param_off + op->param_len, adapted = 0;
  for (int l = 0; l < m->n_layers; off += m->layers[l].params, l++) {
    int64_t a = ps_layer_adapted_params(&m->layers[l]);
    if (a == 0 || off + m->layers[l].params <= op->param_off || off >= end)
      continue;
    adapted += a; /* layers lie whole in a range (buckets, stages) */
    u.layers++;
  }
  if (op->param_len > params && op->param_len > 0) {
    double share = (double)params / (double)op->param_len;
    adapted = (int64_t)((double)adapted * share);
    u.layers = MIN(u.layers, (int)ceil(u.layers * share) + 1);
  }
  u.adapted = MIN(adapted, params);
  return u;
}

void ps_lower_update_op(const PsExperiment *exp, PsOp *op, int64_t params, int grad_bytes)
{
  PsOpCost c;
  PsUpdateShape u = update_shape(exp, op, params, grad_bytes);
  ps_cost_optimizer(exp->topology, &u, &c);
  op->kind = PS_OP_UPDATE;
  set_cost(op, &c);
}

PsOp ps_lower_clip_op(const PsExperiment *exp, int64_t params, int grad_bytes, int scale_bytes)
{
  PsOpCost c;
  ps_cost_clip(exp->topology, params, grad_bytes > 0 ? grad_bytes : ps_lower_weight_bytes(exp),
               scale_bytes, &c);
  PsOp op = {.kind = PS_OP_CLIP, .coll = -1, .param_len = params};
  set_cost(&op, &c);
  return op;
}

int ps_lower_weight_bytes(const PsExperiment *exp)
{
  return exp->numerics.weight_precision == PS_PRECISION_BF16 ? 2 : 4;
}

int ps_lower_reduce_bytes(const PsExperiment *exp, PsPrecision reduce_precision)
{
  return MIN(ps_strategy_reduce_bytes(reduce_precision), ps_lower_weight_bytes(exp));
}

int ps_lower_gather_bytes(const PsExperiment *exp)
{
  return MIN(ps_lower_weight_bytes(exp), ps_cost_act_bytes(exp->numerics.precision));
}

ps_time_t ps_lower_launch(const PsExperiment *exp)
{
  const double clock = exp->topology->clock_factor > 0 ? exp->topology->clock_factor : 1.0;
  return ps_time_from_s(exp->topology->op_overhead_s / clock); /* as cost.c's kernels */
}

void ps_lower_data_axis(PsPlan *plan, const PsModel *model, int n)
{
  ps_plan_set_axis(plan, PS_AXIS_DATA, n);
  for (int d = 0; d < n; d++) {
    ps_plan_set_coord(plan, d, PS_AXIS_DATA, d);
    ps_plan_add_params(plan, d, 0, model->params);
  }
}

PsOp ps_lower_infeed(const PsExperiment *exp, int64_t batch)
{
  const PsModel *m = exp->model;
  PsOp in = {.kind = PS_OP_INFEED, .batch = batch, .time = ps_lower_launch(exp),
             .bytes = (double)(batch * ps_shape_elems(m->in_shape, m->in_rank)) * 4.0};
  snprintf(in.name, sizeof in.name, "infeed dequeue");
  return in;
}

PsOp ps_lower_outfeed(const PsExperiment *exp, int64_t batch, double loss_weight)
{
  /* loss and correct count as two floats */
  PsOp out = {.kind = PS_OP_OUTFEED, .batch = batch, .bytes = 8.0, .time = ps_lower_launch(exp),
              .loss_weight = loss_weight};
  snprintf(out.name, sizeof out.name, "outfeed");
  return out;
}

gboolean ps_lower_fits(const PsExperiment *exp, const PsMemoryNeed *need, GError **error)
{
  const PsModel *m = exp->model;
  int slots = ps_lower_optimizer_slots(exp), wb = ps_lower_weight_bytes(exp);
  double weights = (double)need->params * wb * 2;
  double slot_bytes = (double)need->slot_params * wb * slots;
  double total = weights + slot_bytes + need->activations;
  int64_t have = ps_topology_device_hbm_bytes(exp->topology);
  if (total <= (double)have)
    return TRUE;
  /* one unit for the message, the largest that the device's HBM fills
   * (a topology edited down to a few bytes still reads) */
  static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
  int k = 3;
  double gib = 1073741824.0;
  while (k > 0 && (double)have < gib) {
    gib /= 1024.0;
    k--;
  }
  const char *u = units[k];
  ps_strategy_fail(error, PS_INPUT_ERROR_DOES_NOT_FIT, exp->file, need->path,
                   "model '%s'%s needs %.1f %s per device at batch %" G_GINT64_FORMAT
                   " (weights and gradients %.1f %s, %d optimizer slot%s %.1f %s%s, "
                   "activations %.1f %s at %d bytes at the peak), %s has %.1f %s per "
                   "device; %s",
                   m->name, need->what, total / gib, u, need->batch, weights / gib, u, slots,
                   slots == 1 ? "" : "s", slot_bytes / gib, u,
                   need->slot_params < need->params ? " for its shard of the weights" : "",
                   need->activations / gib, u, ps_cost_act_bytes(exp->numerics.precision),
                   exp->topology->name, (double)have / gib, u, need->advice);
  return FALSE;
}

gboolean ps_lower_memory(const PsExperiment *exp, PsProgram *p, const PsMemoryNeed *need,
                         GError **error)
{
  int slots = ps_lower_optimizer_slots(exp), wb = ps_lower_weight_bytes(exp);
  p->hbm_static_bytes = need->params * wb * 2 + need->slot_params * wb * slots;
  int64_t live = 0, peak = 0;
  for (int i = 0; i < p->n_ops; i++) {
    live += p->ops[i].act_bytes;
    peak = MAX(peak, live);
  }
  p->hbm_peak_bytes = p->hbm_static_bytes + peak;
  PsMemoryNeed n = *need;
  n.activations = (double)peak;
  return ps_lower_fits(exp, &n, error);
}

void ps_lower_host_calls(const PsExperiment *exp, const PsOp *fwd, GArray *ops)
{
  const PsModel *m = exp->model;
  int act_bytes = ps_cost_act_bytes(exp->numerics.precision);
  for (int h = 0; h < exp->n_host_calls; h++) {
    const PsHostCall *hc = &exp->host_calls[h];
    if (hc->after != fwd->last)
      continue;
    const PsLayer *l = &m->layers[hc->after];
    double elems = (double)(ps_shape_elems(l->out_shape, l->out_rank) * fwd->batch);
    PsOp call = {.kind = PS_OP_HOST_CALL, .batch = fwd->batch, .mb = fwd->mb, .host_call = h,
                 .first = hc->after, .last = hc->after};
    call.bytes = elems * act_bytes;
    call.bytes_back = hc->kind == PS_HOST_CALL_HISTOGRAM ? 4.0 * hc->bins : call.bytes;
    call.host_flops = elems * hc->flops_per_element;
    snprintf(call.name, sizeof call.name, "host call: %s %s",
             hc->kind == PS_HOST_CALL_HISTOGRAM ? "histogram of" : "roundtrip of", l->name);
    g_array_append_val(ops, call);
  }
}

/* ---- gradient buckets ------------------------------------------------ */

typedef struct {
  int first, last;       /* layers */
  int64_t off, count;    /* parameters (floats) */
} PsBucket;

static PsOp coll_op(PsOpKind kind, int c)
{
  PsOp op = {.kind = kind, .coll = c};
  snprintf(op.name, sizeof op.name, "%s c%d", kind == PS_OP_COLL_START ? "start" : "done", c);
  return op;
}

static int bucket_coll(PsBuckets *b, PsCollOp kind, const PsBucket *bk, int k,
                       PsBufferKind buf)
{
  static const char *const what[PS_COLL_N_OPS] = {"all-reduce", "reduce-scatter", "all-gather",
                                                  "broadcast", "send-recv"};
  const PsModel *m = b->exp->model;
  /* gradients travel in the reduce precision; the all-gathered weights
   * of weight-update sharding are the master copy, in the stored weights'
   * precision */
  int eb = buf == PS_BUFFER_GRADS ? ps_lower_reduce_bytes(b->exp, b->rep->reduce_precision)
                                  : ps_lower_weight_bytes(b->exp);
  PsPlanColl c = {.op = kind, .algo = b->exp->collective.algorithm, .n_members = b->n,
                  .members = (int *)b->members, .count = bk->count, .elem_bytes = eb,
                  .buffer = buf, .offset = bk->off};
  snprintf(c.name, sizeof c.name, "%s %sb%d %s..%s (%.1f MB)", what[kind], b->prefix, k,
           m->layers[bk->first].name, m->layers[bk->last].name, (double)bk->count * eb / 1e6);
  return ps_plan_add_coll(b->plan, &c);
}

void ps_lower_buckets_init(PsBuckets *b, const PsExperiment *exp, const PsReplication *rep,
                           PsPlan *plan, const char *prefix, const int *members, int n)
{
  *b = (PsBuckets){.exp = exp, .rep = rep, .plan = plan, .prefix = prefix, .members = members,
                   .n = n, .wus = rep->weight_update_sharding && n > 1,
                   .buckets = g_array_new(FALSE, FALSE, sizeof(PsBucket)),
                   .reduce = g_array_new(FALSE, FALSE, sizeof(int)),
                   .cur_first = -1, .cur_last = -1};
}

/* Bytes of a gradient element as the clip and the update read it: the
 * reduction's where replicas reduced it (XLA fuses the conversion of a
 * bf16 sum back to float32 into its consumer); 0, as the weights are
 * stored, with one replica. */
static int reduced_bytes(const PsBuckets *b)
{
  return b->n > 1 ? ps_lower_reduce_bytes(b->exp, b->rep->reduce_precision) : 0;
}

/* Each replica clips its own gradient before the reduction: then no
 * bucket can start before the whole backward pass and the norm. */
static gboolean clip_local(const PsBuckets *b)
{
  const PsOptimizerConfig *o = &b->exp->optimizer;
  return o->clip_norm > 0 && o->clip_before_reduce && b->n > 1;
}

/* The CLIP op over [param_off, + param_len): with `local` the norm and the
 * scaling pass (writing the reduction's element size), else the norm only
 * (the update takes the factor). */
static PsOp clip_op(const PsBuckets *b, int64_t param_off, int64_t param_len, gboolean local)
{
  PsOp op = ps_lower_clip_op(b->exp, param_len, local ? 0 : reduced_bytes(b),
                             local ? ps_lower_reduce_bytes(b->exp, b->rep->reduce_precision) : 0);
  op.param_off = param_off;
  op.clip_local = local;
  snprintf(op.name, sizeof op.name, "%s %sgradients", local ? "clip own" : "clip reduced",
           b->prefix);
  return op;
}

void ps_lower_buckets_add(PsBuckets *b, GArray *ops, const PsOp *bwd, gboolean closes)
{
  const PsModel *m = b->exp->model;
  if (b->n == 1)
    return;
  int64_t p = 0;
  for (int l = bwd->first; l <= bwd->last; l++)
    p += m->layers[l].params;
  if (p == 0 && b->cur_count == 0)
    return;
  if (b->cur_last < 0)
    b->cur_last = bwd->last;
  b->cur_first = bwd->first;
  b->cur_count += p;
  /* a bucket holds bucket_bytes on the wire, as XLA's all-reduce
   * combiner counts the combined operands' bytes */
  if (b->cur_count * ps_lower_reduce_bytes(b->exp, b->rep->reduce_precision) <
          b->rep->bucket_bytes && !closes)
    return;
  PsBucket bk = {b->cur_first, b->cur_last, ps_lower_param_offset(m, b->cur_first),
                 b->cur_count};
  int k = (int)b->buckets->len;
  int c = bucket_coll(b, b->wus ? PS_COLL_REDUCE_SCATTER : PS_COLL_ALL_REDUCE, &bk, k,
                      PS_BUFFER_GRADS);
  g_array_append_val(b->buckets, bk);
  g_array_append_val(b->reduce, c);
  if (b->rep->overlap && !clip_local(b)) {
    PsOp st = coll_op(PS_OP_COLL_START, c);
    g_array_append_val(ops, st);
  }
  b->cur_first = b->cur_last = -1;
  b->cur_count = 0;
}

int ps_lower_buckets_count(const PsBuckets *b)
{
  return (int)b->buckets->len;
}

/* A one-off all-reduce of `count` floats of norms over the replicas, now
 * (latency-bound: the norms' sums), from float `offset` of NORM. */
static void norms_now(PsBuckets *b, GArray *ops, int64_t offset, int64_t count,
                      const char *what)
{
  PsPlanColl c = {.op = PS_COLL_ALL_REDUCE, .algo = b->exp->collective.algorithm,
                  .n_members = b->n, .members = (int *)b->members, .count = count,
                  .elem_bytes = (int)sizeof(float), .buffer = PS_BUFFER_NORM,
                  .offset = offset};
  snprintf(c.name, sizeof c.name, "all-reduce %s%s (%" G_GINT64_FORMAT " B)", b->prefix, what,
           count * (int64_t)sizeof(float));
  int n = ps_plan_add_coll(b->plan, &c);
  PsOp st = coll_op(PS_OP_COLL_START, n), dn = coll_op(PS_OP_COLL_DONE, n);
  g_array_append_val(ops, st);
  g_array_append_val(ops, dn);
}

/* Under weight-update sharding, before any shard is updated: every
 * reduce-scatter done; when clipping the reduced gradient, the norm of the
 * device's shards (one read of them, as CLIP costs it) and the replicas'
 * sums of squares all-reduced (one float, NORM's first); with a layer-wise
 * optimizer, whose trust ratios need each layer's norms while a replica
 * holds a shard of it, the first pass of each shard's update (LAMB's
 * moments; the sums of squares of the shard's piece of each layer, two
 * floats an adapted layer: the weights' and the gradient's or update's,
 * from NORM's second), then those sums all-reduced; the second passes
 * follow, per bucket (ps_lower_buckets_finish). */
static void shards_whole(PsBuckets *b, GArray *ops, gboolean clip, gboolean layerwise)
{
  int nb = (int)b->buckets->len;
  int64_t shards = 0;
  for (int k = 0; k < nb; k++) {
    PsOp dn = coll_op(PS_OP_COLL_DONE, g_array_index(b->reduce, int, k));
    g_array_append_val(ops, dn);
    shards += (g_array_index(b->buckets, PsBucket, k).count + b->n - 1) / b->n;
  }
  if (clip) {
    PsOp op = ps_lower_clip_op(b->exp, shards, reduced_bytes(b), 0);
    op.clip_shards = TRUE;
    snprintf(op.name, sizeof op.name, "clip reduced %sgradients: norm of the shards",
             b->prefix);
    g_array_append_val(ops, op);
    norms_now(b, ops, 0, 1, "gradient norm");
  }
  if (layerwise) {
    int64_t layers = 0;
    for (int k = 0; k < nb; k++) {
      const PsBucket *bk = &g_array_index(b->buckets, PsBucket, k);
      PsOp up = {.coll = g_array_index(b->reduce, int, k), .param_off = bk->off,
                 .param_len = bk->count, .update_pass = 1, .norm_slot = 1 + 2 * (int)layers};
      ps_lower_update_op(b->exp, &up, (bk->count + b->n - 1) / b->n, reduced_bytes(b));
      snprintf(up.name, sizeof up.name, "update, pass one: shard of %sb%d", b->prefix, k);
      g_array_append_val(ops, up);
      for (int l = bk->first; l <= bk->last; l++)
        layers += ps_layer_adapted_params(&b->exp->model->layers[l]) > 0;
    }
    if (layers > 0)
      norms_now(b, ops, 1, 2 * layers, "layer norms");
  }
}

int64_t ps_lower_buckets_finish(PsBuckets *b, GArray *ops, int64_t param_off, int64_t param_len)
{
  const PsExperiment *exp = b->exp;
  int nb = (int)b->buckets->len;
  gboolean local = clip_local(b);
  if (local) {
    PsOp clip = clip_op(b, param_off, param_len, TRUE);
    g_array_append_val(ops, clip);
  }
  if (!b->rep->overlap || local)
    for (int k = 0; k < nb; k++) {
      PsOp st = coll_op(PS_OP_COLL_START, g_array_index(b->reduce, int, k));
      g_array_append_val(ops, st);
    }
  if (!b->wus) {
    for (int k = 0; k < nb; k++) {
      PsOp dn = coll_op(PS_OP_COLL_DONE, g_array_index(b->reduce, int, k));
      g_array_append_val(ops, dn);
    }
    if (exp->optimizer.clip_norm > 0 && !local && param_len > 0) {
      PsOp clip = clip_op(b, param_off, param_len, FALSE);
      g_array_append_val(ops, clip);
    }
    if (param_len > 0) {
      PsOp up = {.coll = -1, .param_off = param_off, .param_len = param_len};
      ps_lower_update_op(exp, &up, param_len, reduced_bytes(b));
      snprintf(up.name, sizeof up.name, "apply update");
      g_array_append_val(ops, up);
    }
    return param_len;
  }
  /* per bucket: wait for its shard, update it, start gathering it; when
   * clipping the reduced gradient, every shard first, for the norm */
  gboolean clip = exp->optimizer.clip_norm > 0 && !local;
  gboolean layerwise = exp->optimizer.kind == PS_OPT_LARS || exp->optimizer.kind == PS_OPT_LAMB;
  int64_t slot_params = 0, layers = 0;
  if (clip || layerwise)
    shards_whole(b, ops, clip, layerwise);
  GArray *gather = g_array_new(FALSE, FALSE, sizeof(int));
  for (int k = 0; k < nb; k++) {
    const PsBucket *bk = &g_array_index(b->buckets, PsBucket, k);
    int rs = g_array_index(b->reduce, int, k);
    if (!clip && !layerwise) {
      PsOp dn = coll_op(PS_OP_COLL_DONE, rs);
      g_array_append_val(ops, dn);
    }
    int64_t shard = (bk->count + b->n - 1) / b->n;
    slot_params += shard;
    PsOp up = {.coll = rs, .param_off = bk->off, .param_len = bk->count,
               .update_pass = layerwise ? 2 : 0, .norm_slot = 1 + 2 * (int)layers};
    for (int l = bk->first; layerwise && l <= bk->last; l++) /* its first pass's slot */
      layers += ps_layer_adapted_params(&exp->model->layers[l]) > 0;
    ps_lower_update_op(exp, &up, shard, reduced_bytes(b));
    snprintf(up.name, sizeof up.name, "apply update: shard of %sb%d", b->prefix, k);
    g_array_append_val(ops, up);
    int ag = bucket_coll(b, PS_COLL_ALL_GATHER, bk, k, PS_BUFFER_PARAMS);
    g_array_append_val(gather, ag);
    PsOp st = coll_op(PS_OP_COLL_START, ag);
    g_array_append_val(ops, st);
  }
  for (int k = 0; k < nb; k++) {
    PsOp dn = coll_op(PS_OP_COLL_DONE, g_array_index(gather, int, k));
    g_array_append_val(ops, dn);
  }
  g_array_free(gather, TRUE);
  return slot_params;
}

void ps_lower_buckets_clear(PsBuckets *b)
{
  g_array_free(b->buckets, TRUE);
  g_array_free(b->reduce, TRUE);
  b->buckets = b->reduce = NULL;
}

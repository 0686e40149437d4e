/* replicate.c: the data-parallel strategy (TPUStrategy, CrossShardOptimizer).
 *
 * Every replica holds the whole model and a 1/replicas share of the global
 * batch.  With a "mean" loss reduction the loss is scaled by 1/replicas
 * before gradients are taken and the gradients are then summed across
 * replicas (REFERENCE.md, [TF]); with "sum" there is no scaling.
 *
 * Gradients are reduced in buckets, as real systems do (PyTorch DDP's
 * gradient buckets, XLA's all-reduce combiner): walking backward, fused
 * ops' gradients join the current bucket until it holds bucket_bytes, and
 * the bucket's COLL_START follows the BWD op that produced its last
 * gradient, so its all-reduce runs under the rest of backward.  Every
 * COLL_DONE sits before the UPDATE.  With overlap off, all starts follow
 * the whole backward pass.  With weight-update sharding (Xu et al., 2020,
 * arXiv:2004.13336) each bucket is reduce-scattered instead, each replica
 * updates its 1/replicas shard of the bucket's weights (and keeps optimizer
 * slots for it only), and the weights are all-gathered before the step
 * ends.
 * Invariant: all replicas run one shared program, so their collectives line
 * up; buckets cover the parameters exactly once, in contiguous ranges. */
#include "strategy/strategy.h"

#include "hw/cost.h"
#include "strategy/strategy-private.h"

#include <stdio.h>

typedef struct {
  int first, last;       /* layers */
  int64_t off, count;    /* parameters (floats) */
} Bucket;

static void append(GArray *ops, const PsOp *op)
{
  g_array_append_val(ops, *op);
}

static int add_coll(PsPlan *plan, const PsExperiment *exp, PsCollOp kind, const Bucket *b,
                    int k, PsBufferKind buf, const int *members, int n)
{
  static const char *const what[PS_COLL_N_OPS] = {"all-reduce", "reduce-scatter", "all-gather",
                                                  "broadcast", "send-recv"};
  PsPlanColl c = {.op = kind, .algo = exp->collective.algorithm, .n_members = n,
                  .members = (int *)members, .count = b->count, .elem_bytes = 4,
                  .buffer = buf, .offset = b->off};
  snprintf(c.name, sizeof c.name, "%s b%d %s..%s (%.1f MB)", what[kind], k,
           exp->model->layers[b->first].name, exp->model->layers[b->last].name,
           (double)b->count * 4 / 1e6);
  return ps_plan_add_coll(plan, &c);
}

static PsOp coll_op(PsOpKind kind, int c)
{
  PsOp op = {.kind = kind, .coll = c};
  snprintf(op.name, sizeof op.name, "%s c%d", kind == PS_OP_COLL_START ? "start" : "done", c);
  return op;
}

static PsPlan *replicate_compile(const PsExperiment *exp, GError **error)
{
  const PsModel *m = exp->model;
  const PsStrategyConfig *s = &exp->strategy;
  const int R = s->replicas;
  const int64_t batch = exp->global_batch / R;
  const gboolean wus = s->weight_update_sharding && R > 1;
  PsPlan *plan = ps_plan_new(R);
  plan->strategy = "replicate";
  plan->replicas = R;
  plan->loss_scale = s->loss_reduction == PS_LOSS_MEAN ? 1.0f / (float)R : 1.0f;
  plan->optimizer_slots = ps_lower_optimizer_slots(exp);
  int *members = g_new(int, R);
  for (int r = 0; r < R; r++)
    members[r] = r;

  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  GArray *groups = ps_lower_layer_groups(exp, 0, m->n_layers);
  int n_groups = (int)groups->len - 1;
  int act_bytes = ps_cost_act_bytes(exp->numerics.precision);

  PsOp in = {.kind = PS_OP_INFEED, .batch = batch, .time = ps_lower_launch(exp),
             .bytes = (double)(batch * ps_shape_elems(m->in_shape, m->in_rank)) * 4.0};
  snprintf(in.name, sizeof in.name, "infeed dequeue");
  append(ops, &in);
  for (int g = 0; g < n_groups; g++) {
    PsOp f = {.kind = PS_OP_FWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_compute_op(exp, &f);
    append(ops, &f);
    for (int h = 0; h < exp->n_host_calls; h++) {
      const PsHostCall *hc = &exp->host_calls[h];
      if (hc->after != f.last)
        continue;
      const PsLayer *l = &m->layers[hc->after];
      double elems = (double)(ps_shape_elems(l->out_shape, l->out_rank) * batch);
      PsOp call = {.kind = PS_OP_HOST_CALL, .batch = batch, .host_call = h,
                   .first = hc->after, .last = hc->after};
      call.bytes = elems * act_bytes;
      call.bytes_back = hc->kind == PS_HOST_CALL_HISTOGRAM ? 4.0 * hc->bins : call.bytes;
      call.host_flops = elems * hc->flops_per_element;
      snprintf(call.name, sizeof call.name, "host call: %s %s",
               hc->kind == PS_HOST_CALL_HISTOGRAM ? "histogram of" : "roundtrip of", l->name);
      append(ops, &call);
    }
  }

  /* backward, closing a bucket when it holds bucket_bytes of gradients */
  GArray *buckets = g_array_new(FALSE, FALSE, sizeof(Bucket));
  GArray *reduce = g_array_new(FALSE, FALSE, sizeof(int)); /* per bucket: its all-reduce/RS */
  Bucket cur = {-1, -1, 0, 0};
  for (int g = n_groups - 1; g >= 0; g--) {
    PsOp b = {.kind = PS_OP_BWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_compute_op(exp, &b);
    append(ops, &b);
    if (R == 1)
      continue;
    int64_t p = 0;
    for (int l = b.first; l <= b.last; l++)
      p += m->layers[l].params;
    if (p == 0 && cur.count == 0)
      continue;
    if (cur.last < 0)
      cur.last = b.last;
    cur.first = b.first;
    cur.count += p;
    if (cur.count * 4 >= s->bucket_bytes || g == 0) {
      cur.off = ps_lower_param_offset(m, cur.first);
      int k = (int)buckets->len;
      int c = add_coll(plan, exp, wus ? PS_COLL_REDUCE_SCATTER : PS_COLL_ALL_REDUCE, &cur, k,
                       PS_BUFFER_GRADS, members, R);
      g_array_append_val(buckets, cur);
      g_array_append_val(reduce, c);
      if (s->overlap) {
        PsOp st = coll_op(PS_OP_COLL_START, c);
        append(ops, &st);
      }
      cur = (Bucket){-1, -1, 0, 0};
    }
  }
  int nb = (int)buckets->len;
  plan->n_buckets = nb;
  if (!s->overlap)
    for (int k = 0; k < nb; k++) {
      PsOp st = coll_op(PS_OP_COLL_START, g_array_index(reduce, int, k));
      append(ops, &st);
    }
  int64_t slot_params = m->params;
  if (!wus) {
    for (int k = 0; k < nb; k++) {
      PsOp dn = coll_op(PS_OP_COLL_DONE, g_array_index(reduce, int, k));
      append(ops, &dn);
    }
    PsOp up = {.coll = -1, .param_off = 0, .param_len = m->params};
    ps_lower_update_op(exp, &up, m->params);
    snprintf(up.name, sizeof up.name, "apply update");
    append(ops, &up);
  } else {
    /* per bucket: wait for its shard, update it, start gathering it */
    GArray *gather = g_array_new(FALSE, FALSE, sizeof(int));
    slot_params = 0;
    for (int k = 0; k < nb; k++) {
      const Bucket *b = &g_array_index(buckets, Bucket, k);
      int rs = g_array_index(reduce, int, k);
      PsOp dn = coll_op(PS_OP_COLL_DONE, rs);
      append(ops, &dn);
      int64_t shard = (b->count + R - 1) / R;
      slot_params += shard;
      PsOp up = {.coll = rs, .param_off = b->off, .param_len = b->count};
      ps_lower_update_op(exp, &up, shard);
      snprintf(up.name, sizeof up.name, "apply update: shard of b%d", k);
      append(ops, &up);
      int ag = add_coll(plan, exp, PS_COLL_ALL_GATHER, b, k, PS_BUFFER_PARAMS, members, R);
      g_array_append_val(gather, ag);
      PsOp st = coll_op(PS_OP_COLL_START, ag);
      append(ops, &st);
    }
    for (int k = 0; k < nb; k++) {
      PsOp dn = coll_op(PS_OP_COLL_DONE, g_array_index(gather, int, k));
      append(ops, &dn);
    }
    g_array_free(gather, TRUE);
  }
  /* loss and correct count as two floats */
  PsOp out = {.kind = PS_OP_OUTFEED, .batch = batch, .bytes = 8.0, .time = ps_lower_launch(exp),
              .loss_weight = 1.0 / R};
  snprintf(out.name, sizeof out.name, "outfeed");
  append(ops, &out);

  int prog = ps_plan_add_program(plan, (PsOp *)(void *)ops->data, (int)ops->len);
  g_assert(prog == 0);
  g_array_free(ops, TRUE);
  g_array_free(groups, TRUE);
  g_array_free(buckets, TRUE);
  g_array_free(reduce, TRUE);
  g_free(members);
  if (!ps_lower_memory(exp, &plan->programs[0], m->params, slot_params, "each replica",
                       R > 1 && !wus ? "lower global_batch, raise strategy.replicas, set "
                                       "strategy.weight_update_sharding=true, or use a pipeline"
                                     : "lower global_batch, raise strategy.replicas, or use a "
                                       "pipeline", error)) {
    ps_plan_free(plan);
    return NULL;
  }
  return plan;
}

const PsStrategy ps_strategy_replicate = {
    "replicate", "data parallelism: every device a replica, gradients all-reduced in buckets",
    replicate_compile};

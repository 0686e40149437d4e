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

static void append(GArray *ops, const PsOp *op)
{
  g_array_append_val(ops, *op);
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
  for (int r = 0; r < R; r++) {
    members[r] = r;
    plan->replica_of[r] = r;
  }

  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  GArray *groups = ps_lower_layer_groups(exp, 0, m->n_layers);
  int n_groups = (int)groups->len - 1;

  PsOp in = {.kind = PS_OP_INFEED, .batch = batch, .time = ps_lower_launch(exp),
             .bytes = (double)(batch * ps_shape_elems(m->in_shape, m->in_rank)) * 4.0};
  snprintf(in.name, sizeof in.name, "infeed dequeue");
  append(ops, &in);
  for (int g = 0; g < n_groups; g++) {
    PsOp f = {.kind = PS_OP_FWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_compute_op(exp, &f);
    append(ops, &f);
    ps_lower_host_calls(exp, &f, ops);
  }
  PsBuckets bk;
  ps_lower_buckets_init(&bk, exp, plan, "", members, R);
  for (int g = n_groups - 1; g >= 0; g--) {
    PsOp b = {.kind = PS_OP_BWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_compute_op(exp, &b);
    append(ops, &b);
    ps_lower_buckets_add(&bk, ops, &b, g == 0);
  }
  plan->n_buckets = ps_lower_buckets_count(&bk);
  int64_t slot_params = ps_lower_buckets_finish(&bk, ops, 0, m->params);
  ps_lower_buckets_clear(&bk);
  /* loss and correct count as two floats */
  PsOp out = {.kind = PS_OP_OUTFEED, .batch = batch, .bytes = 8.0, .time = ps_lower_launch(exp),
              .loss_weight = 1.0 / R};
  snprintf(out.name, sizeof out.name, "outfeed");
  append(ops, &out);

  int prog = ps_plan_add_program(plan, (PsOp *)(void *)ops->data, (int)ops->len);
  g_assert(prog == 0);
  g_array_free(ops, TRUE);
  g_array_free(groups, TRUE);
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

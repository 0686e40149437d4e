/* replicate.c: the data-parallel strategy (TPUStrategy, CrossShardOptimizer).
 *
 * Every replica holds the whole model and a 1/replicas share of the global
 * batch.  With a "mean" loss reduction the loss is scaled by 1/replicas
 * before gradients are taken and the gradients are then summed across
 * replicas ([TF], docs/references.md); with "sum" there is no scaling.
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
 * ends.  With strategy.batch_norm_group_size G > 1, batch-norm statistics
 * are all-reduced within groups of G replicas (batchnorm.c), each group
 * running its own copy of the program.
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

/* What to change when a replica does not fit. */
static const char *memory_advice(const PsReplication *r)
{
  return r->replicas > 1 && !r->weight_update_sharding
             ? "lower global_batch, raise strategy.replicas, set "
               "strategy.weight_update_sharding=true, or use a pipeline "
               "(strategy.kind=pipeline) with strategy.rematerialize=true"
             : "lower global_batch, raise strategy.replicas, or use a pipeline "
               "(strategy.kind=pipeline) with strategy.rematerialize=true";
}

/* A replica's HBM (without the activations): with weight-update sharding
 * it keeps optimizer slots for a 1/replicas shard of the weights (at load
 * time taken as the whole shard; the compiled plan rounds each bucket's). */
static PsMemoryNeed memory_need(const PsExperiment *exp, const PsReplication *r)
{
  const PsModel *m = exp->model;
  gboolean wus = r->weight_update_sharding && r->replicas > 1;
  return (PsMemoryNeed){.path = "global_batch", .what = "",
                        .batch = exp->global_batch / r->replicas, .params = m->params,
                        .slot_params = wus ? (m->params + r->replicas - 1) / r->replicas
                                           : m->params,
                        .advice = memory_advice(r)};
}

static gboolean replicate_parse(json_object *obj, const PsTopology *topo, const char *file,
                                void **config, GError **error)
{
  return ps_replica_parse(obj, topo, file, FALSE, config, error);
}

/* One stage only, and the replica's share of the batch fits (in doubles
 * from the per-example activations, so a huge batch cannot overflow into a
 * small number that "fits"). */
static gboolean replicate_check(const PsExperiment *exp, const void *config, GError **error)
{
  const PsReplicaConfig *c = config;
  const PsModel *m = exp->model;
  if (c->staging.stages > 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, exp->file, "strategy.stages",
                     "%d stages need strategy.kind = \"pipeline\" (got \"replicate\")",
                     c->staging.stages);
    return FALSE;
  }
  if (!ps_replica_check(exp, c, error))
    return FALSE;
  PsMemoryNeed need = memory_need(exp, &c->rep);
  int act_bytes = ps_cost_act_bytes(exp->numerics.precision);
  int64_t per_example = ps_model_memory_bytes(m, 0, m->n_layers, 1, 0, act_bytes) -
                        ps_model_memory_bytes(m, 0, m->n_layers, 0, 0, act_bytes) -
                        (exp->masks_recomputed ? ps_model_mask_bytes(m, 0, m->n_layers) : 0);
  need.activations = (double)per_example * (double)need.batch;
  return ps_lower_fits(exp, &need, error);
}

static PsPlan *replicate_compile(const PsExperiment *exp, const void *config, GError **error)
{
  const PsModel *m = exp->model;
  const PsReplication *s = &((const PsReplicaConfig *)config)->rep;
  const int R = s->replicas;
  const int64_t batch = exp->global_batch / R;
  PsPlan *plan = ps_plan_new(R);
  plan->loss_scale = ps_replica_loss_scale(s, 1);
  ps_lower_data_axis(plan, m, R);
  int *members = g_new(int, R);
  for (int r = 0; r < R; r++)
    members[r] = r;

  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  GArray *groups = ps_lower_layer_groups(exp, 0, m->n_layers);
  int n_groups = (int)groups->len - 1;

  PsOp in = ps_lower_infeed(exp, batch);
  append(ops, &in);
  for (int g = 0; g < n_groups; g++) {
    PsOp f = {.kind = PS_OP_FWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_bn_fwd(plan, exp, s, &f, ops);
  }
  PsBuckets bk;
  ps_lower_buckets_init(&bk, exp, s, plan, "", members, R);
  for (int g = n_groups - 1; g >= 0; g--) {
    PsOp b = {.kind = PS_OP_BWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    ps_lower_bn_bwd(plan, exp, s, &b, &bk, g == 0, ops);
  }
  plan->n_buckets = ps_lower_buckets_count(&bk);
  int64_t slot_params = ps_lower_buckets_finish(&bk, ops, 0, m->params);
  ps_lower_buckets_clear(&bk);
  PsOp out = ps_lower_outfeed(exp, batch, 1.0 / R);
  append(ops, &out);

  int prog = ps_plan_add_program(plan, (PsOp *)(void *)ops->data, (int)ops->len);
  g_assert(prog == 0);
  g_array_free(ops, TRUE);
  g_array_free(groups, TRUE);
  g_free(members);
  ps_lower_bn_programs(plan, s);
  PsMemoryNeed need = memory_need(exp, s);
  need.slot_params = slot_params;
  for (int p = 0; p < plan->n_programs; p++)
    if (!ps_lower_memory(exp, &plan->programs[p], &need, error)) {
      ps_plan_free(plan);
      return NULL;
    }
  return plan;
}

static json_object *replicate_to_json(const void *config)
{
  return ps_replica_to_json("replicate", config);
}

static int replicate_devices(const void *config)
{
  return ((const PsReplicaConfig *)config)->rep.replicas;
}

const PsStrategy ps_strategy_replicate = {
    .name = "replicate",
    .summary = "data parallelism: every device a replica, gradients all-reduced in buckets",
    .parse = replicate_parse,
    .check = replicate_check,
    .compile = replicate_compile,
    .to_json = replicate_to_json,
    .devices = replicate_devices,
    .describe = NULL,
    .free = ps_replica_free};

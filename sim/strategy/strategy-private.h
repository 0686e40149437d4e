/* strategy-private.h: what every strategy does the same way when it lowers layers
 * to ops: grouping layers into fused ops, costing ops on the experiment's
 * hardware, laying out parameters, and checking HBM.
 *
 * Invariant: pure functions of the experiment; costs come from hw/cost.h
 * only, so two strategies price the same op the same. */
#ifndef PS_STRATEGY_PRIVATE_H
#define PS_STRATEGY_PRIVATE_H

#include "io/config.h"
#include "program/program.h"

/* Layer groups that run as one op, [starts[g], starts[g + 1]), over the
 * layers [first, last): element-wise layers, reshapes and the loss join the
 * op of their producer when the experiment fuses, and a layer whose output
 * goes to the host ends its group.  (transfer full) */
GArray *ps_lower_layer_groups(const PsExperiment *exp, int first, int last);

/* Floats of parameters before layer `layer` (the flat layout of
 * model/net.h: layer after layer). */
int64_t ps_lower_param_offset(const PsModel *model, int layer);

/* Fills name and cost of a FWD, BWD or RECOMPUTE op whose kind, layers
 * and batch are set; act_bytes is what it keeps (FWD, RECOMPUTE) or frees
 * (BWD) of activations. */
void ps_lower_compute_op(const PsExperiment *exp, PsOp *op);
/* An UPDATE of `params` weights with the experiment's optimizer. */
void ps_lower_update_op(const PsExperiment *exp, PsOp *op, int64_t params);
/* The launch overhead of INFEED and OUTFEED ops. */
ps_time_t ps_lower_launch(const PsExperiment *exp);

/* Static HBM (weights and gradients of `params`, optimizer slots of
 * `slot_params`) and the peak with live activations, walking the ops in
 * order.  FALSE with PS_INPUT_ERROR_DOES_NOT_FIT naming `what` (e.g.
 * "device 0" or "stage 2") and the advice when the peak exceeds the
 * device's HBM. */
gboolean ps_lower_memory(const PsExperiment *exp, PsProgram *p, int64_t params,
                         int64_t slot_params, const char *what, const char *advice,
                         GError **error);

int ps_lower_optimizer_slots(const PsExperiment *exp);

/* The HOST_CALL ops (outside compilation) that follow a FWD op of `batch`
 * examples ending at layer fwd->last, appended to ops. */
void ps_lower_host_calls(const PsExperiment *exp, const PsOp *fwd, GArray *ops);

/* Gradient buckets of one group of replicas (all the replicas, or the R
 * copies of one pipeline stage), as real systems cut them (PyTorch DDP's
 * buckets, XLA's all-reduce combiner): walking backward, each fused op's
 * gradients join the current bucket until it holds bucket_bytes, and the
 * bucket's COLL_START follows the BWD op that produced its last gradient,
 * so its all-reduce runs under the rest of backward (with overlap; else
 * every start follows the backward pass).  With weight-update sharding
 * (Xu et al., 2020, arXiv:2004.13336) a bucket is reduce-scattered, each
 * replica updates its 1/R shard, and the weights are all-gathered.
 * Invariant: buckets cover the group's parameters once, in contiguous
 * ranges; with one member there are no buckets, only the update. */
typedef struct {
  const PsExperiment *exp;
  PsPlan *plan;
  const char *prefix;  /* for collective names: "" or "s3 " (static) */
  const int *members;  /* devices, in member order (not owned) */
  int n;
  gboolean wus;
  GArray *buckets;     /* PsBucket */
  GArray *reduce;      /* int: each bucket's all-reduce or reduce-scatter */
  int cur_first, cur_last;
  int64_t cur_count;
} PsBuckets;

void ps_lower_buckets_init(PsBuckets *b, const PsExperiment *exp, PsPlan *plan,
                           const char *prefix, const int *members, int n);
/* After the final BWD op of a layer group in this step; `closes` for the
 * group's last BWD (the stage's first layers), which ends the last bucket. */
void ps_lower_buckets_add(PsBuckets *b, GArray *ops, const PsOp *bwd, gboolean closes);
/* The tail of the step: starts when not overlapped, dones, the update of
 * parameters [param_off, + param_len) (or of each bucket's shard), and the
 * all-gathers.  Returns the parameters whose optimizer slots the device
 * keeps. */
int64_t ps_lower_buckets_finish(PsBuckets *b, GArray *ops, int64_t param_off,
                                int64_t param_len);
int ps_lower_buckets_count(const PsBuckets *b);
void ps_lower_buckets_clear(PsBuckets *b);

/* The strategies of the registry (strategy.c). */
#include "strategy/strategy.h"
extern const PsStrategy ps_strategy_replicate;
extern const PsStrategy ps_strategy_pipeline;

#endif

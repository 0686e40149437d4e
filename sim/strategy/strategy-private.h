/* strategy-private.h: what the strategies share.  The keys of a group of
 * replicas and of a pipeline's shape (replication.c), read alike by the
 * replicate and pipeline strategies; and what every strategy does the same
 * way when it lowers layers to ops (lower.c): grouping layers into fused
 * ops, costing ops on the experiment's hardware, laying out parameters,
 * and the one rule that decides whether a device's share fits in HBM.
 *
 * Invariant: pure functions of the experiment and the strategy's
 * configuration; costs come from hw/cost.h only, so two strategies price
 * the same op the same, and HBM is judged by ps_lower_fits only. */
#ifndef PS_STRATEGY_PRIVATE_H
#define PS_STRATEGY_PRIVATE_H

#include "io/config.h"
#include "program/program.h"
#include "strategy/partition.h"
#include "strategy/strategy.h"

/* ---- the keys of replicas and pipelines (replication.c) ------------- */

typedef enum { PS_LOSS_MEAN, PS_LOSS_SUM } PsLossReduction;
typedef enum { PS_SCHEDULE_GPIPE, PS_SCHEDULE_1F1B } PsSchedule;

/* Gradient buckets default to 30 MiB, the default of XLA's all-reduce
 * combiner (xla_gpu_all_reduce_combine_threshold_bytes = 30 * 1024 * 1024
 * in XLA's debug options; TPU's own threshold is not public): large enough
 * that a bucket's bandwidth time dwarfs its per-step latency, small enough
 * that the first bucket starts early in backward. */
#define PS_DEFAULT_BUCKET_BYTES INT64_C(31457280)

/* A group of replicas and how it reduces gradients. */
typedef struct {
  int replicas;            /* absent in the file: every device / stages */
  gboolean replicas_defaulted; /* which the messages say */
  PsLossReduction loss_reduction;
  int64_t bucket_bytes;    /* gradients are all-reduced in buckets of this size */
  gboolean overlap;        /* buckets all-reduce while the backward pass runs */
  gboolean weight_update_sharding; /* reduce-scatter, sharded update, all-gather */
  PsPrecision reduce_precision;    /* of the gradients on the wire */
  int bn_group;            /* batch_norm_group_size: replicas whose batch-norm
                              statistics are all-reduced (1: each its own) */
} PsReplication;

/* A pipeline's shape (stages 1: none). */
typedef struct {
  int stages;
  int micro_batches;
  PsSchedule schedule;
  gboolean rematerialize;
  PsPartitionKind partition;
  int n_partition;
  int *partition_layers;   /* GIVEN: layers per stage, n_partition == stages (owned) */
} PsStaging;

/* The configuration of the replicate and the pipeline strategies: both
 * read every key of both (so `--set strategy.kind=...` switches a file
 * between them); replicate refuses more than one stage. */
typedef struct {
  PsReplication rep;
  PsStaging staging;
} PsReplicaConfig;

/* Reads the keys; `pipelined`: the stages occupy devices of their own, so
 * replicas default to every device / stages.  (transfer full) */
gboolean ps_replica_parse(json_object *obj, const PsTopology *topo, const char *file,
                          gboolean pipelined, void **config, GError **error);
/* Batch divisible by replicas and micro-batches, devices enough, stages
 * and partition against the model. */
gboolean ps_replica_check(const PsExperiment *exp, const PsReplicaConfig *c, GError **error);
json_object *ps_replica_to_json(const char *kind, const PsReplicaConfig *c);
void ps_replica_free(void *config);
/* The loss scale applied to d(loss)/d(logits): 1/replicas for a "mean"
 * reduction, 1 for "sum", over the micro-batches whose gradients
 * accumulate into one update. */
float ps_replica_loss_scale(const PsReplication *rep, int micro_batches);

/* The order of a pipeline stage's micro-batches (pipeline.c): stage s of
 * K under `schedule` calls fwd(data, mb) and bwd(data, mb, final) for each
 * of the M micro-batches, gpipe all forwards then all backwards (last
 * first), 1f1b K - s - 1 warm-up forwards then one forward and one
 * backward alternately; `final` marks the step's last backward on the
 * stage, whose gradients are complete. */
typedef void (*PsPipelineFwd)(void *data, int mb);
typedef void (*PsPipelineBwd)(void *data, int mb, gboolean final);
void ps_pipeline_walk(PsSchedule schedule, int K, int s, int M, PsPipelineFwd fwd,
                      PsPipelineBwd bwd, void *data);

/* strategy.reduce_precision, a key replicate, pipeline and shard share:
 * the type gradients are reduced in ("f32", the default: a mixed-precision
 * step's gradients are f32; or "bf16"), which sets the bytes per element
 * of their all-reduces and reduce-scatters (ps_strategy_reduce_bytes) and,
 * with numerics, their rounding.  Left alone when the key is absent. */
gboolean ps_strategy_parse_reduce_precision(json_object *o, const char *file,
                                            PsPrecision *out, GError **error);
/* "f32" or "bf16".  (transfer none) */
const char *ps_strategy_reduce_precision_name(PsPrecision p);
/* Bytes a reduced gradient element takes on the wire: 4 or 2. */
int ps_strategy_reduce_bytes(PsPrecision p);

/* A PS_INPUT_ERROR "FILE: PATH: reason", as io's messages read. */
void ps_strategy_fail(GError **error, int code, const char *file, const char *path,
                      const char *fmt, ...) G_GNUC_PRINTF(5, 6);

/* ---- lowering (lower.c) ---------------------------------------------- */

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
/* An UPDATE of `params` weights with the experiment's optimizer, reading
 * gradients of grad_bytes each (0: as the weights are stored; the
 * reduction's element size where one reduced them). */
void ps_lower_update_op(const PsExperiment *exp, PsOp *op, int64_t params, int grad_bytes);
/* The launch overhead of INFEED and OUTFEED ops. */
ps_time_t ps_lower_launch(const PsExperiment *exp);
/* Devices 0 .. n - 1 along a data axis of n, each owning every parameter
 * of the model (replicas). */
void ps_lower_data_axis(PsPlan *plan, const PsModel *model, int n);
/* The INFEED dequeue of `batch` examples (float32 inputs). */
PsOp ps_lower_infeed(const PsExperiment *exp, int64_t batch);
/* The OUTFEED of a step's loss and correct count, weighted in the step's
 * loss by loss_weight. */
PsOp ps_lower_outfeed(const PsExperiment *exp, int64_t batch, double loss_weight);

/* What one device holds in HBM, for the one rule that decides whether it
 * fits: weights and gradients of `params` (4 bytes each), the optimizer's
 * slots for `slot_params` of them (fewer with weight-update sharding), and
 * the peak of live activations. */
typedef struct {
  const char *path;     /* the key the message names, e.g. "global_batch" */
  const char *what;     /* after the model's name: "" or " stage 2 (layers ...)" */
  int64_t batch;        /* examples the device takes per step */
  int64_t params;
  int64_t slot_params;
  double activations;   /* bytes, in doubles: a huge batch cannot wrap */
  const char *advice;   /* what to change */
} PsMemoryNeed;

/* The one HBM rule: TRUE when the need fits a device of the experiment's
 * topology; else FALSE with PS_INPUT_ERROR_DOES_NOT_FIT naming the model,
 * the need and its parts, the capacity and the advice. */
gboolean ps_lower_fits(const PsExperiment *exp, const PsMemoryNeed *need, GError **error);
/* Static HBM (weights, gradients and slots of `need`) and the peak with
 * live activations, walking the ops in order, stored in the program and
 * judged by ps_lower_fits. */
gboolean ps_lower_memory(const PsExperiment *exp, PsProgram *p, const PsMemoryNeed *need,
                         GError **error);

/* A CLIP op over `params` gradients of grad_bytes each (0: as the weights
 * are stored): the norm's pass over them, and with scale_bytes > 0 the
 * scaling pass writing that many bytes a gradient (else the update
 * applies the factor); param_off 0, not local. */
PsOp ps_lower_clip_op(const PsExperiment *exp, int64_t params, int grad_bytes, int scale_bytes);

/* Bytes of a stored weight, its gradient and each optimizer slot element:
 * numerics.weight_precision (4 for f32, 2 for bf16). */
int ps_lower_weight_bytes(const PsExperiment *exp);
/* Bytes of a reduced gradient element on the wire: the narrower of
 * strategy.reduce_precision and the gradients' own type (the weights':
 * bf16 weights have bf16 gradients, which "f32" does not widen). */
int ps_lower_reduce_bytes(const PsExperiment *exp, PsPrecision reduce_precision);
/* Bytes of a weight element in an fsdp all-gather before use: the
 * narrower of the stored weights and the step's compute precision (the
 * convert to the compute type runs on each device's shard, ahead of the
 * gather, as GSPMD partitions it and XLA's TPU compiler emits it). */
int ps_lower_gather_bytes(const PsExperiment *exp);

/* The one optimizer-slot rule: copies of the weights the optimizer keeps
 * (Adam's two moments; SGD's momentum, costed even at momentum 0). */
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
  const PsReplication *rep;
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

void ps_lower_buckets_init(PsBuckets *b, const PsExperiment *exp, const PsReplication *rep,
                           PsPlan *plan, const char *prefix, const int *members, int n);
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

/* The strategies of the built-in registry (strategy.c). */
extern const PsStrategy ps_strategy_replicate;
extern const PsStrategy ps_strategy_pipeline;

/* Cross-replica batch normalization (batchnorm.c): with rep->bn_group > 1,
 * a FWD or BWD op of layers that hold batch-norm layers is cut at each of
 * them around the all-reduce of its statistics (2 C floats) over the
 * replica's group; appended to ops, each BWD piece through the buckets.
 * Collectives are group 0's; ps_lower_bn_programs gives the other groups
 * programs of their own. */
void ps_lower_bn_fwd(PsPlan *plan, const PsExperiment *exp, const PsReplication *rep,
                     const PsOp *fwd, GArray *ops);
void ps_lower_bn_bwd(PsPlan *plan, const PsExperiment *exp, const PsReplication *rep,
                     const PsOp *bwd, PsBuckets *bk, gboolean closes, GArray *ops);
/* Adds programs for groups 1.. (their batch-norm collectives) after
 * program 0, and maps devices to them; replicas are devices 0..R-1. */
void ps_lower_bn_programs(PsPlan *plan, const PsReplication *rep);

#endif

/* partition.h: cutting a sequential model into the contiguous stages of a
 * pipeline.
 *
 * A stage boundary may fall before layer L only where the data flow allows
 * it: every layer from L on reads outputs of layer L - 1 or later (so a cut
 * never separates a residual block from its shortcut), and L starts a fused
 * op (a cut never splits an op XLA would fuse).  The layers between two
 * allowed boundaries form a *unit*; stages are runs of units.
 *
 * Three ways to choose the runs:
 * - "seed" (Lingvo's GPipe partitioner, seed 003): with c_i the fraction
 *   of the model's forward FLOPs in units 0..i, unit i goes to stage
 *   min(floor(c_i K), K - 1).  It can leave a stage empty, which is an
 *   error here.
 * - "optimal" (the default): the contiguous partition into exactly K
 *   non-empty stages that minimizes the most expensive stage, where a
 *   unit's cost is its forward plus backward time on the device for one
 *   micro-batch, from the cost model (binary search on the bottleneck with
 *   a greedy check, then a greedy fill that leaves a unit for every stage).
 * - a list of layers per stage from the experiment (strategy.partition).
 * Invariant: first[0] = 0 < first[1] < ... < first[K] = n_layers, and
 * every first[s] is an allowed boundary. */
#ifndef PS_PARTITION_H
#define PS_PARTITION_H

#include "io/config.h"

/* How a pipeline's layers are cut into stages. */
typedef enum { PS_PARTITION_OPTIMAL, PS_PARTITION_SEED, PS_PARTITION_GIVEN } PsPartitionKind;

typedef struct {
  int stages;
  int *first;          /* stages + 1 entries: stage s is layers [first[s], first[s+1]) */
  int64_t micro_batch; /* examples per micro-batch the figures below are for */
  /* per stage */
  double *fwd_flops;   /* forward FLOPs per example */
  int64_t *params;     /* weights (floats) */
  int64_t *act_bytes;  /* activations one micro-batch keeps for backward */
  double *time_s;      /* forward + backward of one micro-batch on the device */
} PsPartition;

/* TRUE if a stage may start at `layer` (0 < layer < n_layers) as far as
 * the data flow goes. */
gboolean ps_partition_cut_allowed(const PsModel *model, int layer);

/* The partition of `kind` into `stages` stages (GIVEN: `layers` per
 * stage, `stages` of them), costed at `micro_batch` examples.  NULL with a
 * PS_INPUT_ERROR naming the experiment's file and strategy.partition (or
 * strategy.stages) when the model cannot be cut that way.  (transfer full) */
PsPartition *ps_partition_compute(const PsExperiment *exp, int stages, int64_t micro_batch,
                                  PsPartitionKind kind, const int *layers, GError **error);
void ps_partition_free(PsPartition *p);

/* A table: stage, layers (first..last names), forward GFLOPs per
 * micro-batch, weights, activations per micro-batch, time per micro-batch
 * and its share of the slowest stage. */
void ps_partition_describe(const PsPartition *p, const PsExperiment *exp, GString *out);

/* The two choosers over unit costs (exposed for tests).  `first` receives
 * k + 1 unit indices.  The seed's returns FALSE when it leaves a stage
 * empty; optimal needs n >= k. */
gboolean ps_partition_seed_units(const double *cost, int n, int k, int *first);
void ps_partition_optimal_units(const double *cost, int n, int k, int *first);

#endif

/* shard-private.h: what the files of the shard strategy share (shard.c:
 * keys, checks and the registry entry; shard-mesh.c: the logical mesh on
 * the torus; shard-lower.c: layouts and the programs; shard-remat.c: what
 * rematerialization keeps and reruns; shard-local.c: a
 * layer's share on one device; shard-pipe.c: the pipeline stage axis, each stage a mesh).
 *
 * Invariant: a PsShardConfig that shard_parse returns has every default
 * filled in and its mesh sizes multiply to the devices it occupies; the
 * mesh mapping is a bijection from devices to mesh coordinates. */
#ifndef PS_SHARD_PRIVATE_H
#define PS_SHARD_PRIVATE_H

#include "strategy/strategy-private.h"

/* Rematerialization: none; full (only each block's input kept); attention
 * (its scores recomputed); minimal (the outputs of the weight products
 * kept, the rest recomputed: JAX's checkpoint_dots_with_no_batch_dims,
 * MaxText's remat_policy "minimal"). */
typedef enum {
  PS_REMAT_NONE,
  PS_REMAT_FULL,
  PS_REMAT_ATTENTION,
  PS_REMAT_MINIMAL,
  PS_REMAT_CUSTOM /* each unit's input and the products remat_keep names */
} PsRemat;

/* What rematerialization "custom" keeps (PsShardConfig.remat_keep, in HBM;
 * remat_offload, in the host's memory), as MaxText's remat_policy "custom"
 * names the checkpoints of a decoder layer (=device, =offload): its input, the query, key and value
 * projections, attention's context (the input of its output projection),
 * the output projection, the feed-forward's input products (a gated one's
 * two halves) and its output product. */
typedef enum {
  PS_KEEP_QUERY = 1 << 0,
  PS_KEEP_KEY = 1 << 1,
  PS_KEEP_VALUE = 1 << 2,
  PS_KEEP_CONTEXT = 1 << 3,
  PS_KEEP_OUT_PROJ = 1 << 4,
  PS_KEEP_WI0 = 1 << 5,
  PS_KEEP_WI1 = 1 << 6,
  PS_KEEP_WO = 1 << 7,
  PS_KEEP_INPUT = 1 << 8 /* the unit's input: every policy but "none" keeps it */
} PsRematKeep;

/* The five axes a shard mesh has, in the default order of increasing
 * communication (outermost first). */
#define PS_SHARD_AXES 5

typedef struct {
  int size[PS_N_AXES];          /* DATA, FSDP, TENSOR, SEQUENCE, STAGE, CONTEXT */
  gboolean mesh_given;          /* "mesh" in the file (else data = every device) */
  PsAxis order[PS_SHARD_AXES];  /* increasing communication: data .. tensor */
  gboolean order_given;
  gboolean collective_matmul;
  gboolean context_ring;        /* context parallelism as a ring (MaxText's
                                   context_parallel_strategy "ring"), not an
                                   all-gather of the keys and values */
  gboolean sequence_parallel;   /* the tensor group also splits the rows */
  PsRemat remat;
  unsigned remat_keep;          /* PsRematKeep bits kept in HBM, with remat "custom" */
  unsigned remat_offload;       /* PsRematKeep bits kept in host memory instead */
  gboolean prefetch;            /* next layer's fsdp all-gather under this one */
  gboolean regather;            /* fsdp: gather again before backward */
  int64_t bucket_bytes;
  PsLossReduction loss_reduction;
  PsPrecision reduce_precision; /* of the gradients' reductions */
  int micro_batches;            /* per data x fsdp row's batch, in a step */
  int vocab_tiling;             /* MaxText's num_vocab_tiling: the head's logits and
                                   the loss in this many tiles of positions, each
                                   tile's logits computed again in backward (1: none) */
  PsSchedule schedule;          /* of the stages' micro-batches */
  gboolean accumulate_whole;    /* fsdp with micro-batches: hold whole gradients and
                                   reduce-scatter them once ("whole"), else reduce-scatter
                                   each micro-batch's into the shards ("sharded") */
} PsShardConfig;

/* The language model's head of m: the dense layer whose output the loss
 * scores, in a model of token sequences; -1 for none. */
int ps_shard_vocab_head(const PsModel *m);

/* Devices the mesh occupies: the product of its sizes, stages included. */
int ps_shard_devices(const PsShardConfig *c);
/* The tensor x sequence group's size: the ways a layer's work is split. */
int ps_shard_model_ways(const PsShardConfig *c);
/* The ways the weights, their gradients and the optimizer's slots are
 * sharded: fsdp x context (MaxText shards a weight's embedding dimension
 * over both axes, so context parallelism is also ZeRO-3 over its group). */
int ps_shard_weight_ways(const PsShardConfig *c);

/* The axis the slices of a multislice topology go to: the outermost (first
 * in c->order) whose size `slices` divides; -1 when none does or slices
 * is 1. */
int ps_shard_dcn_axis(const PsShardConfig *c, int slices);
/* Each device's coordinate along each axis, coord[d * PS_N_AXES + a]
 * (transfer full): the rule of shard-mesh.c.  `how` (may be NULL) gets a
 * line per axis saying which physical axes it took. */
int *ps_shard_mesh_map(const PsTopology *topo, const PsShardConfig *c, GString *how);
/* The words ps_shard_mesh_map's `how` opens its line with where no
 * axis-aligned layout exists. */
#define PS_SHARD_ROW_MAJOR "no axis-aligned layout"

/* The groups a collective request runs over, one of each kind per
 * device: the tensor x sequence group, the fsdp (x context) group that
 * shards the weights, the data group, the context group, each within one
 * pipeline stage. */
typedef enum {
  PS_GROUP_MODEL,
  PS_GROUP_FSDP,
  PS_GROUP_DATA,
  PS_GROUP_CONTEXT,
  PS_GROUP_N
} PsShardGroup;

/* Device d's group of kind k is gid[k][d] and its place in it pos[k][d];
 * members[k] lists each group's devices in order, gid-major. */
typedef struct {
  int size[PS_GROUP_N];
  int *gid[PS_GROUP_N], *pos[PS_GROUP_N], *members[PS_GROUP_N];
} PsShardGroups;

/* From the mesh coordinates of ps_shard_mesh_map (n devices). */
void ps_shard_groups_init(PsShardGroups *gr, const PsShardConfig *c, const int *coord, int n);
void ps_shard_groups_clear(PsShardGroups *gr);

/* How a device's share of a layer is cut from it (shard-local.c): not at
 * all, by output columns, by the contraction (a row-parallel matmul), by
 * heads or vocabulary, by sequence rows. */
typedef enum { PS_LOC_NONE, PS_LOC_COL, PS_LOC_ROW, PS_LOC_DIV, PS_LOC_ROWS } PsShardLocal;

/* Layer L as one device of a group of k holds it, a vocabulary padded to
 * a multiple of k when `padded`. */
void ps_shard_local_layer(PsLayer *L, PsShardLocal how, int64_t k, gboolean padded);

/* The plan (transfer full), or NULL with a PS_INPUT_ERROR (HBM). */
PsPlan *ps_shard_lower(const PsExperiment *exp, const PsShardConfig *c, GError **error);
/* PsStrategy.kernels: device's kernels costed on its stage's local layers
 * (its share of the tensor x sequence group), as the lowering costs them. */
void ps_shard_kernels(const PsExperiment *exp, const void *config, const PsPlan *plan,
                      int device, GString *out);
/* Per-device HBM of the sharded step, without building programs for every
 * device: FALSE with PS_INPUT_ERROR_DOES_NOT_FIT and advice. */
gboolean ps_shard_check_memory(const PsExperiment *exp, const PsShardConfig *c,
                               GError **error);

/* ---- the stage axis (shard-pipe.c) ------------------------------------ */

/* Stages, micro-batches and numerics against the model and the batch:
 * FALSE with a PS_INPUT_ERROR naming strategy.mesh.stage or
 * strategy.micro_batches and what would fit. */
gboolean ps_shard_pipe_check(const PsExperiment *exp, const PsShardConfig *c, GError **error);
/* Each stage's first layer, stages + 1 entries (the last n_layers), cut
 * as the pipeline strategy cuts ("optimal", partition.h); {0, n_layers}
 * with one stage.  NULL with a PS_INPUT_ERROR.  (transfer full) */
int *ps_shard_pipe_bounds(const PsExperiment *exp, const PsShardConfig *c, GError **error);
/* For each device d, the device with its data, fsdp, tensor and sequence
 * coordinates in the stage before (peer[2 d]) and after (peer[2 d + 1]),
 * -1 at the ends.  (transfer full) */
int *ps_shard_pipe_peers(const PsShardConfig *c, const int *coord, int n);
/* A stage transfer of micro-batch mb (the pipeline strategy's tags: 2 mb
 * forward, 2 mb + 1 backward): a SEND or RECV of the boundary activations
 * (forward) or of their gradients, peer -1 for the stage before and +1 for
 * the stage after, resolved per device from ps_shard_pipe_peers. */
PsOp ps_shard_pipe_xfer(PsOpKind kind, int mb, gboolean backward, int peer, int64_t batch,
                        int layer, double bytes);
/* What `describe --stages` adds with more than one stage: the partition. */
gboolean ps_shard_pipe_describe(const PsExperiment *exp, const PsShardConfig *c, GString *out,
                                GError **error);

extern const PsStrategy ps_strategy_shard;

#endif

/* shard-private.h: what the files of the shard strategy share (shard.c:
 * keys, checks and the registry entry; shard-mesh.c: the logical mesh on
 * the torus; shard-lower.c: layouts, the per-device local model and the
 * programs).
 *
 * Invariant: a PsShardConfig that shard_parse returns has every default
 * filled in and its mesh sizes multiply to the devices it occupies; the
 * mesh mapping is a bijection from devices to mesh coordinates. */
#ifndef PS_SHARD_PRIVATE_H
#define PS_SHARD_PRIVATE_H

#include "strategy/strategy-private.h"

typedef enum { PS_REMAT_NONE, PS_REMAT_FULL, PS_REMAT_ATTENTION } PsRemat;

/* The four axes a shard mesh has, in the default order of increasing
 * communication (outermost first). */
#define PS_SHARD_AXES 4

typedef struct {
  int size[PS_N_AXES];          /* DATA, FSDP, TENSOR, SEQUENCE; STAGE 1 */
  gboolean mesh_given;          /* "mesh" in the file (else data = every device) */
  PsAxis order[PS_SHARD_AXES];  /* increasing communication: data .. tensor */
  gboolean order_given;
  gboolean collective_matmul;
  PsRemat remat;
  gboolean prefetch;            /* next layer's fsdp all-gather under this one */
  gboolean regather;            /* fsdp: gather again before backward */
  int64_t bucket_bytes;
  PsLossReduction loss_reduction;
  PsPrecision reduce_precision; /* of the gradients' reductions */
} PsShardConfig;

/* Devices the mesh occupies: the product of its sizes. */
int ps_shard_devices(const PsShardConfig *c);
/* The tensor x sequence group's size: the ways a layer's work is split. */
int ps_shard_model_ways(const PsShardConfig *c);

/* The axis the slices of a multislice topology go to: the outermost (first
 * in c->order) whose size `slices` divides; -1 when none does or slices
 * is 1. */
int ps_shard_dcn_axis(const PsShardConfig *c, int slices);
/* Each device's coordinate along each axis, coord[d * PS_N_AXES + a]
 * (transfer full): the rule of shard-mesh.c.  `how` (may be NULL) gets a
 * line per axis saying which physical axes it took. */
int *ps_shard_mesh_map(const PsTopology *topo, const PsShardConfig *c, GString *how);

/* The plan (transfer full), or NULL with a PS_INPUT_ERROR (HBM). */
PsPlan *ps_shard_lower(const PsExperiment *exp, const PsShardConfig *c, GError **error);
/* Per-device HBM of the sharded step, without building programs for every
 * device: FALSE with PS_INPUT_ERROR_DOES_NOT_FIT and advice. */
gboolean ps_shard_check_memory(const PsExperiment *exp, const PsShardConfig *c,
                               GError **error);

extern const PsStrategy ps_strategy_shard;

#endif

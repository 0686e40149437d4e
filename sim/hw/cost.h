/* cost.h: how long a core takes for an op, by the roofline of DESIGN.md.
 *
 * time = max(matmul FLOPs padded to the MXU / (peak x efficiency),
 *            HBM bytes / HBM bandwidth) + op overhead.
 * Matrix products pad k and n to the MXU size (128) and the batch-side rows
 * to PS_MXU_ROW_TILE (8), so a 100-wide layer costs like a 128-wide one.
 * Element-wise work costs only its HBM traffic; with fusion, element-wise
 * layers that follow a producer in the same op add no traffic of their own.
 * Invariant: pure functions of (topology, model, batch); no state. */
#ifndef PS_COST_H
#define PS_COST_H

#include "io/config.h"

/* Rows of a matmul are padded to a multiple of this (the batch side of a
 * v2/v3 vector register holds 8 rows; REFERENCE.md). */
#define PS_MXU_ROW_TILE 8
/* A float32-exact matmul on the MXU takes 6 bf16 passes (the TPU's
 * "highest" precision; JAX documents jax.lax.Precision.HIGHEST as 6-pass
 * bf16 on TPU).  bf16 inputs take one pass. */
#define PS_F32_MXU_PASSES 6

typedef struct {
  double flops;        /* useful FLOPs (all layers of the op) */
  double mxu_flops;    /* useful matmul FLOPs */
  double padded_flops; /* matmul FLOPs after padding, times passes */
  double bytes;        /* HBM traffic */
  ps_time_t time;
  gboolean memory_bound;
} PsOpCost;

/* Layers that XLA fuses into the op producing their input (element-wise
 * work, reshapes, the loss); strategies group ops by it. */
gboolean ps_cost_fuses_into_producer(PsLayerKind kind);

/* Bytes of one activation element in HBM. */
int ps_cost_act_bytes(PsPrecision prec);

/* Forward (backward when `backward`) of layers [first, last] as one op on
 * `batch` examples.  With `fused`, HBM traffic is the group's input,
 * weights and output only. */
void ps_cost_layers(const PsTopology *topo, const PsModel *model, int first, int last,
                    int64_t batch, PsPrecision prec, gboolean fused, gboolean backward,
                    PsOpCost *out);

/* The optimizer update over `params` weights with `slots` state vectors:
 * reads weights, gradients and slots, writes weights and slots (float32). */
void ps_cost_update(const PsTopology *topo, int64_t params, int slots, PsOpCost *out);

/* A host <-> device transfer of `bytes` over PCIe. */
ps_time_t ps_cost_pcie(const PsTopology *topo, double bytes);

#endif

/* cost.h: how long a core takes for an op, as the kernels XLA emits for it.
 *
 * An op (a group of layers, forward or backward) is lowered to kernels; each
 * kernel costs
 *     max(padded MXU FLOPs x passes / (peak x mxu_efficiency),
 *         HBM bytes / HBM bandwidth,
 *         vector-unit FLOPs / vpu_flops) + op_overhead_s (one launch),
 * and the op costs the sum of its kernels.  Matrix products pad the feature
 * sides to the MXU size (128) and the rows (batch side) to PS_MXU_ROW_TILE
 * (Cloud TPU performance guide, cloud.google.com/tpu/docs/performance-guide:
 * each core works on 8 x 128 vector registers, XLA pads tensors to 8 x 128
 * tiles, feature dimensions to multiples of 128 and the per-core batch to 8);
 * a convolution pads its batch and its channels one to 128 and the other
 * to 8, which way by the per-replica batch and the product (forward and
 * input gradient, or weight gradient), as Cloud TPU's notes on
 * tf.nn.conv_n_d give XLA's rule (cost.c, conv_padded).
 *
 * The lowering with fusion "xla" follows XLA's documented passes:
 * - a matmul or convolution takes its element-wise consumers (activations,
 *   a residual add whose other input is already in HBM, bias) into its
 *   output (XLA's instruction fusion, xla/service/instruction_fusion.cc,
 *   and the "Fusion" section of the Cloud TPU performance guide);
 * - training batch normalization is expanded into reductions and
 *   element-wise ops (openxla xla/service/batchnorm_expander.cc): forward, one
 *   statistics reduction kernel over the producer's output, and the
 *   normalization (with the activation after it) fused into the consumer
 *   (the next convolution's input, or the residual add's kernel);
 *   backward, one reduction kernel (sum dy, sum dy x-hat) and the rest
 *   fused into the producer's gradient kernels;
 * - backward of a matmul is an input-gradient and a weight-gradient product
 *   each
 *   reading the output gradient with the consumers' element-wise gradients
 *   (relu masks, normalization) fused into it;
 * - pools, embeddings, layer normalization and the loss are one kernel each
 *   way; the optimizer one kernel over the weights.
 * Fusion "none" gives every layer its own kernels (the unfused traffic of
 * model/layers.c); "ideal" makes element-wise and normalization work free
 * (the bound no compiler reaches).  none >= xla >= ideal in time.
 *
 * Invariant: pure functions of (topology, model, batch, options); no state.
 * Kernels are attributed to one layer (the one whose op launches them), so
 * an op's cost is the sum over its layers and any grouping of layers into
 * ops gives the same step compute time up to nothing. */
#ifndef PS_COST_H
#define PS_COST_H

#include "io/config.h"

/* Rows of a matmul are padded to a multiple of this: a vector register is
 * 8 sublanes x 128 lanes on v2, v3 and v4 ([SB] tpus.md: the VPU is an
 * (8, 128) SIMD machine; the Cloud TPU performance guide: 8 x 128 vector
 * registers), so the batch side is tiled by 8 on every generation here. */
#define PS_MXU_ROW_TILE 8
/* The per-replica batch from which XLA puts a convolution's batch, not
 * its channels, on the MXU side (cost.c's conv_padded; Cloud TPU
 * documentation, "Profile TensorFlow workloads"). */
#define PS_CONV_BATCH_MAJOR 64

typedef enum { PS_BOUND_MXU, PS_BOUND_HBM, PS_BOUND_VPU, PS_BOUND_LAUNCH } PsBound;

/* How an op is lowered: MXU passes, element bytes and fusion.  The caller
 * fills it (strategy/cost-options.h reads it off an experiment). */
typedef struct {
  int passes;     /* bf16 MXU passes per matmul (bf16 inputs: 1) */
  int act_bytes;  /* bytes of one activation element in HBM */
  PsFusion fusion;
  gboolean masks_recomputed; /* dropout masks drawn again in backward, never in HBM */
  /* With quantized weight products (numerics.quantization fp8 or int8): the
   * MXU time of such a product against the same product in bf16, the chip's
   * bf16 peak over its fp8 or int8 peak (0.5 on TPU7x in fp8, on v5e and
   * v6e in int8); 0 without quantization.  A product is quantized
   * when one operand is a weight, except the token embedding's lookup, a
   * language model's head (the dense layer the loss scores) and a
   * convolution, as MaxText's fp8_full rule quantizes its decoder layers'
   * dot_generals; its padded FLOPs count at this share. */
  double quant_share;
  /* In a forward run again for backward (rematerialization), the share of
   * layer `layer`'s product `mm` that runs again, 0 to 1: 0 where its output
   * was kept (rematerialization "minimal" keeps the weight products) or
   * nothing backward reads reaches it; the element-wise work runs again
   * whatever it says.  Asked with mm = -1, whether the layer runs at all
   * (0: nothing of it, e.g. a lookup whose output was kept).  NULL runs
   * every product. */
  double (*rerun)(const void *ud, int layer, int mm);
  const void *rerun_ud;
} PsCostOptions;

/* One kernel as the core launches it. */
typedef struct {
  int layer;          /* the layer whose op launches it */
  const char *what;   /* static: "conv", "dgrad", "wgrad", "bn stats", ... */
  double mxu_flops;   /* useful matmul FLOPs */
  double padded_flops;/* matmul FLOPs after padding, times passes; an fp8
                         product's at quant_share (bf16-peak time equivalent) */
  double padded_work; /* matmul FLOPs after padding, times passes, an fp8
                         product's counted once: what padding costs, at any rate */
  double vpu_flops;   /* element-wise FLOPs on the vector unit */
  double serial_vpu_flops; /* those of them that wait on the kernel's products and
                              feed the next (flash attention's softmax), so run in
                              series with the MXU, not beside it */
  double bytes;       /* HBM traffic */
  double busy_s;      /* max(MXU + serial VPU, HBM, VPU) time */
  double serial_s;    /* of busy_s, when MXU-bound: serial_vpu_flops at the
                         vector unit's rate */
  double launch_s;    /* launch overhead */
  ps_time_t time;     /* busy + launch */
  PsBound bound;      /* what the kernel waits for */
} PsKernel;

typedef struct {
  double flops;        /* useful FLOPs (all layers of the op) */
  double mxu_flops;    /* useful matmul FLOPs */
  double padded_flops; /* matmul FLOPs after padding, times passes */
  double bytes;        /* HBM traffic */
  ps_time_t time;
  gboolean memory_bound;
  int kernels;
  double mxu_s;        /* busy time of MXU-bound kernels */
  double serial_s;     /* of mxu_s: vector work in series with the products
                          (flash attention's softmax; PsKernel.serial_s) */
  double memory_s;     /* busy time of HBM- and VPU-bound kernels */
  double overhead_s;   /* launches */
} PsOpCost;

/* MXU passes of a matmul at `prec` with XLA precision passes `matmul_passes`
 * (1, 3, 6): bf16 inputs take one pass whatever the precision. */
int ps_cost_passes(PsPrecision prec, int matmul_passes);

/* Layers that XLA fuses into the op producing their input (element-wise
 * work, reshapes, the loss); strategies group ops by it. */
gboolean ps_cost_fuses_into_producer(PsLayerKind kind);

/* Bytes of one activation element in HBM. */
int ps_cost_act_bytes(PsPrecision prec);

/* Kernels launched by layers [first, last] forward (backward when
 * `backward`, in execution order: last to first) on `batch` examples,
 * appended to `kernels` (PsKernel) when it is not NULL; their sum in out. */
void ps_cost_op(const PsTopology *topo, const PsModel *model, int first, int last,
                int64_t batch, const PsCostOptions *opt, gboolean backward, GArray *kernels,
                PsOpCost *out);

/* ps_cost_op with default matmul precision and fusion "xla" when `fused`
 * ("none" otherwise). */
void ps_cost_layers(const PsTopology *topo, const PsModel *model, int first, int last,
                    int64_t batch, PsPrecision prec, gboolean fused, gboolean backward,
                    PsOpCost *out);

/* The optimizer update over `params` weights with `slots` state vectors:
 * one kernel reading weights, gradients and slots, writing weights and
 * slots (float32). */
void ps_cost_update(const PsTopology *topo, int64_t params, int slots, PsOpCost *out);
void ps_cost_update_kernel(const PsTopology *topo, int64_t params, int slots, PsKernel *out);

/* What an update touches: `params` weights, `adapted` of them in `layers`
 * ranges with a trust ratio of their own (LARS, LAMB). */
typedef struct {
  PsOptimizerKind kind;
  int64_t params, adapted;
  int layers;
  int state_bytes;  /* of a weight, gradient and slot element: 4 (0 means 4) or 2 */
  int pass;         /* LARS, LAMB: 1 or 2 for that pass alone, 0 both */
  int grad_bytes;   /* of a gradient element as the update reads it: 0 means
                     * state_bytes; 2 where a bf16 reduction left it so (XLA
                     * fuses the conversion back to float32 into the update) */
} PsUpdateShape;

/* The update's kernels (float32; each byte count below times
 * state_bytes / 4 where the weights, gradients and slots are stored in
 * bf16, a gradient's 4 bytes grad_bytes where it is read in bf16 after a
 * bf16 reduction):
 * - SGD, Adam: ps_cost_update's one kernel (1 and 2 slots);
 * - LARS: a reduction per adapted layer reading its weights and gradients
 *   (||w||, ||g||: 8 bytes and 4 FLOPs per adapted weight, one launch per
 *   layer), then the momentum update as SGD's with weight decay (20
 *   bytes, 5 FLOPs per weight and 2 per adapted weight);
 * - LAMB: pass one, a kernel per adapted layer and one for the rest,
 *   reading w, g, m, v and writing m, v while reducing ||w|| and ||u||
 *   (24 bytes, 12 FLOPs per weight); pass two, one kernel reading w, m, v
 *   and writing w with the ratio (16 bytes, 6 FLOPs per weight).
 * A pass's kernels are alike (memory-bound at one intensity), so the pass
 * costs its summed traffic's time plus a launch per kernel.  `pass` 1 or 2
 * costs LARS's or LAMB's first or second pass alone (a sharded update runs
 * them apart, the layers' norms all-reduced between); the two add up to
 * pass 0's cost. */
void ps_cost_optimizer(const PsTopology *topo, const PsUpdateShape *u, PsOpCost *out);

/* Gradient clipping by global norm over `params` gradients of grad_bytes
 * each (4 in float32, 2 where the weights are stored in bf16 or a bf16
 * reduction left them so): a
 * reduction reading them (grad_bytes, 2 FLOPs each: square, add); with
 * scale_bytes > 0 a second pass reads them again and writes each scaled,
 * in scale_bytes (the cross-replica reduction's element size: XLA fuses the
 * cast to it into the multiply), 1 FLOP each.  scale_bytes 0: the factor
 * is folded into the update that follows, no second pass. */
void ps_cost_clip(const PsTopology *topo, int64_t params, int grad_bytes, int scale_bytes,
                  PsOpCost *out);

const char *ps_cost_bound_name(PsBound bound);

/* A host <-> device transfer of `bytes` over PCIe. */
ps_time_t ps_cost_pcie(const PsTopology *topo, double bytes);

#endif

/* cost.c: ops lowered to kernels and each kernel costed by its roofline
 * (see cost.h for the lowering and its sources).
 *
 * The kernels of a layer depend only on the layer and its neighbours in
 * the data flow (input_from, shortcut_from, the first consumer), so an op
 * is costed by visiting its own layers only.  Invariant: with fusion
 * "xla" every element-wise layer's work is charged exactly to the kernel
 * XLA would fuse it into (duplicated where XLA duplicates it: an
 * element-wise gradient read by both gradient products of a matmul). */
#include "hw/cost.h"

#include <math.h>

/* Shares of a normalization's FLOPs (model/layers.c counts 8 forward, 12
 * backward per element): forward statistics (sum, square, sum) 3, the
 * normalization itself (subtract, scale, shift) the rest; backward
 * reductions (sum dy, sum dy * x-hat) 4, the element-wise gradient the
 * rest. */
#define NORM_STATS_SHARE (3.0 / 8.0)
#define NORM_BWD_REDUCE_SHARE (4.0 / 12.0)
/* Bytes of one per-channel statistic (float32). */
#define STAT_BYTES 4.0

static int64_t pad_to(int64_t x, int64_t tile)
{
  return (x + tile - 1) / tile * tile;
}

int ps_cost_act_bytes(PsPrecision prec)
{
  return prec == PS_PRECISION_BF16 ? 2 : 4;
}

int ps_cost_passes(PsPrecision prec, int matmul_passes)
{
  return prec == PS_PRECISION_BF16 ? 1 : MAX(matmul_passes, 1);
}

gboolean ps_cost_fuses_into_producer(PsLayerKind k)
{
  return ps_layer_kind_lower(k)->fuses_into_producer;
}

const char *ps_cost_bound_name(PsBound b)
{
  static const char *const names[] = {"MXU", "HBM", "VPU", "launch"};
  return names[b];
}

/* ---- kernels ---------------------------------------------------------- */

/* The core clock (chip.clock_factor) scales what the core computes, the
 * MXU's and the vector unit's rates and a launch's fixed cost, all
 * measured at the clock the factor is relative to; HBM's bandwidth does
 * not follow it. */
static void kernel_finish(const PsTopology *topo, PsKernel *k)
{
  const double clock = topo->clock_factor > 0 ? topo->clock_factor : 1.0;
  double peak = ps_topology_device_peak_flops(topo) * topo->mxu_efficiency * clock;
  double t_mxu = k->padded_flops / peak;
  double t_mem = k->bytes / ps_topology_device_hbm_bandwidth(topo);
  double vpu = topo->vpu_flops * clock / ps_topology_devices_per_chip(topo);
  double t_vpu = vpu > 0 ? k->vpu_flops / vpu : 0;
  double t_serial = vpu > 0 ? k->serial_vpu_flops / vpu : 0;
  t_mxu += t_serial;
  k->busy_s = fmax(t_mxu, fmax(t_mem, t_vpu));
  k->launch_s = topo->op_overhead_s / clock;
  k->bound = t_mxu >= t_mem && t_mxu >= t_vpu ? PS_BOUND_MXU
             : t_mem >= t_vpu                 ? PS_BOUND_HBM
                                              : PS_BOUND_VPU;
  k->serial_s = k->bound == PS_BOUND_MXU ? t_serial : 0;
  if (k->launch_s > k->busy_s)
    k->bound = PS_BOUND_LAUNCH;
  k->time = ps_time_from_s(k->busy_s + k->launch_s); /* PS_TIME_NEVER if too long */
}

typedef struct {
  const PsTopology *topo;
  const PsModel *m;
  int64_t batch;
  const PsCostOptions *opt;
  double eb;
  GArray *out;      /* PsKernel, or NULL */
  PsOpCost *sum;
} Ctx;

static void emit(Ctx *c, PsKernel *k)
{
  kernel_finish(c->topo, k);
  PsOpCost *s = c->sum;
  s->mxu_flops += k->mxu_flops;
  s->padded_flops += k->padded_flops;
  s->bytes += k->bytes;
  s->time = s->time == PS_TIME_NEVER || k->time == PS_TIME_NEVER ||
                    k->time > PS_TIME_NEVER - s->time
                ? PS_TIME_NEVER
                : s->time + k->time;
  s->kernels++;
  s->overhead_s += k->launch_s;
  if (k->bound == PS_BOUND_MXU) {
    s->mxu_s += k->busy_s;
    s->serial_s += k->serial_s;
  } else {
    s->memory_s += k->busy_s;
  }
  if (c->out)
    g_array_append_val(c->out, *k);
}

static const PsLayer *L(const Ctx *c, int i)
{
  return &c->m->layers[i];
}

static double out_elems(const Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  return (double)ps_shape_elems(l->out_shape, l->out_rank) * (double)c->batch;
}

static double in_elems(const Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  return (double)ps_shape_elems(l->in_shape, l->in_rank) * (double)c->batch;
}

/* How the layer table says a kind is lowered (model/layers.h). */
static PsLayerLowering lowering(const PsLayer *l)
{
  return ps_layer_kind_lower(l->kind)->lowering;
}

/* Element-wise on one input, a reshape included. */
static gboolean is_unary(const PsLayer *l)
{
  PsLayerLowering w = lowering(l);
  return w == PS_LOWER_UNARY || w == PS_LOWER_VIEW;
}

/* The share of matmul mm a kernel executes: forward (and the input
 * gradient, the same size) its done fraction, the weight-gradient kernel
 * the rest of backward's products (PsMatmul). */
static double mm_share(const PsMatmul *mm, gboolean wgrad)
{
  double done = mm->done > 0 ? mm->done : 1.0, bwd = mm->bwd > 0 ? mm->bwd : 2.0;
  return wgrad ? done * (bwd - 1.0) : done;
}

/* The share of layer l's product m that this forward runs
 * (PsCostOptions.rerun): all of it but in a rematerialized forward. */
static double rerun(const Ctx *c, const PsLayer *l, int m)
{
  return c->opt->rerun ? c->opt->rerun(c->opt->rerun_ud, (int)(l - c->m->layers), m) : 1.0;
}

/* Executed FLOPs of one product (of its weight-gradient share with
 * wgrad), times the batch. */
static double mm_one(const PsMatmul *mm, int64_t batch, gboolean wgrad)
{
  return 2.0 * (double)(mm->rows * batch) * (double)mm->k * (double)mm->n * (double)mm->count *
         mm_share(mm, wgrad);
}

/* Executed FLOPs of layer l's matmuls. */
static double mm_flops_sel(const PsLayer *l, int64_t batch, gboolean wgrad)
{
  double f = 0;
  for (int m = 0; m < l->n_mm; m++)
    f += mm_one(&l->mm[m], batch, wgrad);
  return f;
}

/* Forward's executed matmul FLOPs. */
static double mm_flops(const PsLayer *l, int64_t batch)
{
  return mm_flops_sel(l, batch, FALSE);
}

/* Forward's executed matmul FLOPs that run (rerun). */
static double mm_run_flops(const Ctx *c, const PsLayer *l)
{
  double f = 0;
  for (int m = 0; m < l->n_mm; m++)
    f += mm_one(&l->mm[m], c->batch, FALSE) * rerun(c, l, m);
  return f;
}

/* A convolution's padded MXU FLOPs, as XLA lays its dimensions out on a
 * TPU (Cloud TPU documentation, "Profile TensorFlow workloads", notes on
 * tf.nn.conv_n_d): of the batch and the feature dimensions, one is padded
 * to a multiple of 128 (here the MXU side) and the other to a multiple of
 * 8 (PS_MXU_ROW_TILE), by the most common batch of the module's
 * convolutions, which is the per-replica batch B (each layer's forward
 * and input-gradient convolutions outnumber its kernel-gradient one).
 *  - B >= 64: forward and input-gradient convolutions pad the batch to 128
 *    and the channels to 8; a kernel-gradient convolution, whose batch is
 *    the input channels and whose features are the batch (contracted) and
 *    the output channels, pads the input channels to 8 and the batch and
 *    the output channels to 128;
 *  - B < 64: each the other way round.
 * So 64 images a replica pay for 128 in every product while 128 pay for
 * themselves, and below 64 the 64-channel layers pay for 128 channels.
 * An input of under half a tile of channels (an RGB stem) has its window
 * folded into its channels before they are padded (assumption: MLPerf's
 * ResNet-50 on TPU does this with its space-to-depth stem).  The FLOPs
 * are 2 x output positions x padded batch x window x padded input
 * channels x padded output channels. */
static double conv_padded(const Ctx *c, const PsLayer *l, const PsMatmul *mm, gboolean wgrad)
{
  const int64_t tile = c->topo->mxu_size, row = PS_MXU_ROW_TILE;
  const gboolean big = c->batch >= PS_CONV_BATCH_MAJOR;
  int64_t gb = big ? tile : row, gi = big ? row : tile;
  int64_t go = wgrad == big ? tile : row;
  int64_t cin = l->in_shape[l->in_rank - 1], win = l->kernel * l->kernel;
  int64_t k = 2 * cin < tile ? pad_to(win * cin, gi) : win * pad_to(cin, gi);
  return 2.0 * (double)mm->rows * (double)pad_to(c->batch, gb) * (double)k *
         (double)pad_to(mm->n, go) * (double)mm->count;
}

/* Whether product mm of layer l runs with quantized (fp8 or int8) operands
 * (PsCostOptions.quant_share). */
static gboolean quantized(const Ctx *c, const PsLayer *l, const PsMatmul *mm)
{
  const PsLayerLowerInfo *k = ps_layer_kind_lower(l->kind);
  if (c->opt->quant_share <= 0 || mm->activations || k->gathers || k->window_contraction)
    return FALSE;
  int i = (int)(l - c->m->layers);
  return !(c->m->token_input && i + 1 < c->m->n_layers && c->m->layers[i + 1].input_from == i &&
           ps_layer_kind_lower(c->m->layers[i + 1].kind)->tensor == PS_TP_LOSS);
}

/* The rows a product's kernel pass walks over the batch: padded to
 * PS_MXU_ROW_TILE; a grouped product's to its tile t, plus a tile visited
 * again for each of the groups - 1 boundaries that falls inside a tile
 * (megablox's make_group_metadata), which under random routing is
 * (t - 1) / t of them: (groups - 1)(t - 1) rows. */
static double mm_rows(const Ctx *c, const PsMatmul *mm, PsMatmulPass pass)
{
  if (mm->groups <= 1)
    return (double)pad_to(mm->rows * c->batch, PS_MXU_ROW_TILE);
  int64_t t = MAX(mm->group_tile[pass], 1);
  return (double)pad_to(mm->rows * c->batch, t) + (double)(mm->groups - 1) * (double)(t - 1);
}

/* A layer's products on the MXU, padded: a matmul's rows (the batch side)
 * as mm_rows, its contraction and output sides to the MXU size
 * (performance guide), a product of two activations (attention's scores
 * and context) its contraction only (MaxText's Ironwood guide: the MXU is
 * efficient when the contraction is a multiple of its size); a convolution's as conv_padded lays it out, the
 * kernel-gradient product (PS_MM_WGRAD) its own way. */
static double mm_padded(const Ctx *c, const PsLayer *l, PsMatmulPass pass, double *work)
{
  const int64_t tile = c->topo->mxu_size;
  const gboolean conv = ps_layer_kind_lower(l->kind)->window_contraction;
  const gboolean wgrad = pass == PS_MM_WGRAD;
  double f = 0, wk = 0;
  for (int m = 0; m < l->n_mm; m++) {
    const PsMatmul *mm = &l->mm[m];
    double run = wgrad ? 1.0 : rerun(c, l, m); /* a kept output is not recomputed */
    if (run <= 0)
      continue;
    double one = run * (conv ? conv_padded(c, l, mm, wgrad)
                             : 2.0 * mm_rows(c, mm, pass) * (double)pad_to(mm->k, tile) *
                                   (double)(mm->activations ? mm->n : pad_to(mm->n, tile)) *
                                   (double)mm->count *
                                   mm_share(mm, wgrad));
    /* fp8 operands: one pass at the fp8 rate, whatever the step's precision */
    gboolean q = quantized(c, l, mm);
    f += one * (q ? c->opt->quant_share : (double)c->opt->passes);
    wk += one * (q ? 1.0 : (double)c->opt->passes); /* the MXU's work, at any rate */
  }
  *work = wk;
  return f;
}

/* The unfused traffic of layer i's kernel, elements at the activation
 * width. */
static double own_traffic(const Ctx *c, int i, gboolean backward)
{
  const PsLayer *l = L(c, i);
  if (ps_layer_kind_lower(l->kind)->gathers) {
    /* rows per example; backward also writes the table's dense gradient;
     * a lookup by matmul reads the whole table forward instead of rows */
    double per_ex = backward ? l->bwd_bytes : l->fwd_bytes;
    double table = backward ? STAT_BYTES * (double)l->params
                   : l->n_mm > 0 ? c->eb * (double)l->params
                                 : 0;
    return c->eb * per_ex * (double)c->batch + table;
  }
  double w = (double)l->params * (backward ? 2.0 : 1.0);
  double per_ex = (backward ? l->bwd_bytes : l->fwd_bytes) - w;
  return c->eb * (per_ex * (double)c->batch + w);
}

/* Per element of a dropout mask that is recomputed rather than kept
 * (PsCostOptions.masks_recomputed): the random draw and the compare,
 * again, in each backward kernel that applies it. */
#define DROPOUT_REDRAW_FLOPS 2.0

/* Bytes of layer i's dropout mask over the batch: written where it is
 * drawn (forward), read by each backward kernel that applies it; none
 * when the masks are recomputed, which never reach HBM. */
static double mask_bytes(const Ctx *c, int i)
{
  if (c->opt->masks_recomputed)
    return 0;
  return (double)PS_MASK_BYTES * (double)L(c, i)->mask_elems * (double)c->batch;
}

/* The vector work of drawing layer i's mask again in a backward kernel
 * that applies it, when the masks are recomputed; else 0. */
static double mask_redraw_flops(const Ctx *c, int i)
{
  if (!c->opt->masks_recomputed)
    return 0;
  return DROPOUT_REDRAW_FLOPS * (double)L(c, i)->mask_elems * (double)c->batch;
}

/* HBM traffic of a layer's own kernel: the unfused traffic of layers.c
 * (whose weight term counts once, not per example), and its mask. */
static double own_bytes(const Ctx *c, int i, gboolean backward)
{
  return own_traffic(c, i, backward) + mask_bytes(c, i);
}

/* The first layer after i that reads i's output (an ADD also through its
 * shortcut), or -1. */
static int consumer(const Ctx *c, int i)
{
  for (int j = i + 1; j < c->m->n_layers; j++) {
    const PsLayer *l = L(c, j);
    if (l->input_from == i || (lowering(l) == PS_LOWER_JOIN && l->shortcut_from == i))
      return j;
  }
  return -1;
}

/* Walking back from layer p through unary element-wise layers: the first
 * other layer (-1: the model input). */
static int chain_root(const Ctx *c, int p)
{
  while (p >= 0 && is_unary(L(c, p)))
    p = L(c, p)->input_from;
  return p;
}

/* Forward work deferred on layer p's output: a training batch
 * normalization's normalization and the activations after it, which XLA
 * fuses into the consumer; 0 when p's output is in HBM as it is. */
static double pending_flops(const Ctx *c, int p)
{
  double f = 0;
  while (p >= 0 && is_unary(L(c, p))) {
    f += L(c, p)->fwd_flops * (double)c->batch;
    p = L(c, p)->input_from;
  }
  if (p >= 0 && lowering(L(c, p)) == PS_LOWER_NORM_STATS)
    return f + (1.0 - NORM_STATS_SHARE) * L(c, p)->fwd_flops * (double)c->batch;
  return 0;
}

/* An ADD joins its body producer's output fusion unless the body ends in
 * a pending normalization (or is the model input). */
static gboolean add_fuses(const Ctx *c, int i)
{
  int r = chain_root(c, L(c, i)->input_from);
  return r >= 0 && lowering(L(c, r)) != PS_LOWER_NORM_STATS;
}

/* Output fusion: element-wise consumers of layer i's kernel output. */
static void fuse_consumers_fwd(Ctx *c, int i, PsKernel *k)
{
  int prev = i;
  for (int j = consumer(c, i); j >= 0; j = consumer(c, j)) {
    const PsLayer *l = L(c, j);
    if (l->input_from != prev)
      break;
    if (is_unary(l)) {
      k->vpu_flops += l->fwd_flops * (double)c->batch;
      k->bytes += mask_bytes(c, j); /* a dropout's mask, drawn here */
    } else if (lowering(l) == PS_LOWER_JOIN) {
      /* the shortcut is read; a pending normalization on it is applied */
      k->bytes += c->eb * out_elems(c, j);
      k->vpu_flops += l->fwd_flops * (double)c->batch + pending_flops(c, l->shortcut_from);
    } else {
      break;
    }
    prev = j;
  }
}

/* Backward: element-wise gradients of the layers after i (activation
 * masks, the residual fork, a normalization's element-wise gradient) are
 * fused into each kernel that reads i's output gradient. */
static void fuse_consumers_bwd(Ctx *c, int i, PsKernel *k)
{
  int prev = i;
  for (int j = consumer(c, i); j >= 0; j = consumer(c, j)) {
    const PsLayer *l = L(c, j);
    PsLayerLowering w = lowering(l);
    gboolean fed = l->input_from == prev || (w == PS_LOWER_JOIN && l->shortcut_from == prev);
    if (!fed)
      break;
    if (w == PS_LOWER_NORM_STATS) {
      k->vpu_flops += (1.0 - NORM_BWD_REDUCE_SHARE) * l->bwd_flops * (double)c->batch;
      k->bytes += c->eb * out_elems(c, j); /* x again, with dy */
      break;
    }
    if (!is_unary(l) && w != PS_LOWER_JOIN)
      break;
    k->vpu_flops += l->bwd_flops * (double)c->batch;
    if (w != PS_LOWER_VIEW && w != PS_LOWER_JOIN && l->saves != PS_SAVES_NONE)
      k->bytes += c->eb * out_elems(c, j); /* the saved activation */
    k->bytes += mask_bytes(c, j);          /* a dropout's mask */
    k->vpu_flops += mask_redraw_flops(c, j);
    prev = j;
  }
}

static PsKernel kernel(int layer, const char *what)
{
  return (PsKernel){.layer = layer, .what = what};
}

/* ---- forward, one function per lowering ------------------------------- */

/* Batch normalization: a reduction kernel (the statistics forward; sum dy
 * and sum dy x-hat backward) with the element-wise rest fused (xla:
 * pending into the consumer forward, into the producer's gradient kernels
 * backward), or a kernel of its own (none). */
static void norm_stats(Ctx *c, int i, gboolean backward)
{
  const PsLayer *l = L(c, i);
  const PsFusion fu = c->opt->fusion;
  const double b = (double)c->batch;
  if (fu == PS_FUSION_IDEAL)
    return;
  const double e = in_elems(c, i), p = (double)l->params;
  const double flops = backward ? l->bwd_flops : l->fwd_flops;
  const double share = backward ? NORM_BWD_REDUCE_SHARE : NORM_STATS_SHARE;
  PsKernel k = kernel(i, backward ? "bn grad reduce" : "bn stats");
  k.bytes = backward ? c->eb * 2.0 * e + STAT_BYTES * p : c->eb * e + 2 * STAT_BYTES * p / 2;
  k.vpu_flops = share * flops * b;
  if (fu == PS_FUSION_XLA) {
    if (backward)
      fuse_consumers_bwd(c, i, &k);
    else
      k.vpu_flops += pending_flops(c, l->input_from);
    emit(c, &k);
    return;
  }
  emit(c, &k);
  PsKernel n = kernel(i, backward ? "bn grad" : "bn normalize");
  n.bytes = c->eb * (backward ? 3.0 : 2.0) * e + c->eb * p;
  n.vpu_flops = (1.0 - share) * flops * b;
  emit(c, &n);
}

/* An activation or a residual add: fused into its producer (or pending
 * into its consumer) with xla, else a kernel of its own. */
static void elementwise_fwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  const PsFusion fu = c->opt->fusion;
  const gboolean join = lowering(l) == PS_LOWER_JOIN;
  if (fu == PS_FUSION_IDEAL)
    return;
  if (fu == PS_FUSION_XLA) {
    if (join ? add_fuses(c, i) : l->input_from >= 0)
      return; /* fused into its producer, or pending into its consumer */
  }
  PsKernel k = kernel(i, join ? "add" : "elementwise");
  k.bytes = own_bytes(c, i, FALSE);
  k.vpu_flops = l->fwd_flops * (double)c->batch;
  if (fu == PS_FUSION_XLA) {
    k.vpu_flops += pending_flops(c, l->input_from);
    if (join)
      k.vpu_flops += pending_flops(c, l->shortcut_from);
    fuse_consumers_fwd(c, i, &k);
  }
  emit(c, &k);
}

/* The layer's work in fusions apart from its kernels (PsLayer's apart_*:
 * a dropless mixture of experts' sort, gating and combination), one
 * kernel of that traffic and vector work; nothing for other layers. */
static void apart_kernel(Ctx *c, int i, gboolean backward)
{
  const PsLayer *l = L(c, i);
  double bytes = backward ? l->apart_bwd_bytes : l->apart_fwd_bytes;
  double flops = backward ? l->apart_bwd_flops : l->apart_fwd_flops;
  if (bytes <= 0 && flops <= 0)
    return;
  PsKernel k = kernel(i, backward ? "sort, gating, combine grad" : "sort, gating, combine");
  k.bytes = c->eb * bytes * (double)c->batch;
  k.vpu_flops = flops * (double)c->batch;
  emit(c, &k);
}

/* A producer: matmul, convolution, pool, embedding, normalization of
 * rows, the loss. */
static void producer_fwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  PsKernel k = kernel(i, ps_layer_kind_lower(l->kind)->kernel);
  k.mxu_flops = mm_flops(l, c->batch);
  k.padded_flops = mm_padded(c, l, PS_MM_FWD, &k.padded_work);
  k.bytes = own_bytes(c, i, FALSE) - c->eb * l->apart_fwd_bytes * (double)c->batch;
  k.vpu_flops = (l->fwd_flops - l->apart_fwd_flops) * (double)c->batch - k.mxu_flops;
  k.serial_vpu_flops = l->core_vec_fwd * (double)c->batch;
  apart_kernel(c, i, FALSE);
  double run = mm_run_flops(c, l);
  if (c->opt->rerun && l->n_mm > 0 && run < k.mxu_flops) {
    /* rematerialized with some products kept: attention's products of two
     * activations and their traffic where they run again, or the
     * element-wise work on a kept product, read and written once; and
     * each weight product that runs again, its rows in and out and its
     * weights */
    k.mxu_flops = run;
    gboolean core = FALSE;
    double rows_io = 0;
    for (int m = 0; m < l->n_mm; m++) {
      const PsMatmul *mm = &l->mm[m];
      double r = rerun(c, l, m);
      if (mm->activations)
        core = core || r > 0;
      else
        rows_io += r * ((double)(mm->rows * c->batch) * (double)(mm->k + mm->n * mm->count) +
                        (double)mm->k * (double)mm->n * (double)mm->count);
    }
    if (!core)
      k.serial_vpu_flops = 0;
    k.bytes = (core && l->core_bytes > 0 ? c->eb * l->core_bytes * (double)c->batch
                                         : 2.0 * c->eb * out_elems(c, i)) +
              c->eb * rows_io;
  }
  if (c->opt->fusion == PS_FUSION_XLA) {
    k.vpu_flops += pending_flops(c, l->input_from);
    fuse_consumers_fwd(c, i, &k);
  }
  emit(c, &k);
}

static void layer_fwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  const PsLayerLowerInfo *info = ps_layer_kind_lower(l->kind);
  if (info->lowering == PS_LOWER_VIEW)
    return; /* a view */
  if (c->opt->fusion == PS_FUSION_IDEAL && info->fuses_into_producer && l->input_from >= 0)
    return; /* free riders of their producer, the loss and layer norm too */
  if (c->opt->rerun && c->opt->rerun(c->opt->rerun_ud, i, -1) <= 0)
    return; /* a layer a rematerialized forward need not run at all */
  switch (info->lowering) {
  case PS_LOWER_NORM_STATS:
    norm_stats(c, i, FALSE);
    break;
  case PS_LOWER_UNARY:
  case PS_LOWER_JOIN:
    elementwise_fwd(c, i);
    break;
  default:
    producer_fwd(c, i);
    break;
  }
}

/* ---- backward, one function per lowering ------------------------------ */

static void elementwise_bwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  const PsFusion fu = c->opt->fusion;
  if (fu == PS_FUSION_IDEAL)
    return;
  if (fu == PS_FUSION_XLA && chain_root(c, l->input_from) >= 0)
    return; /* fused into the gradient kernels of its producer */
  PsKernel k = kernel(i, lowering(l) == PS_LOWER_JOIN ? "add grad" : "elementwise grad");
  k.bytes = own_bytes(c, i, TRUE);
  k.vpu_flops = l->bwd_flops * (double)c->batch + mask_redraw_flops(c, i);
  emit(c, &k);
}

/* Layer i's weight-gradient kernel: its products' share mm_w, their
 * padding, bytes and vector work given. */
static void wgrad_kernel(Ctx *c, int i, double mm_w, double bytes, double vpu_flops)
{
  PsKernel g = kernel(i, "wgrad");
  g.mxu_flops = mm_w;
  g.padded_flops = mm_padded(c, L(c, i), PS_MM_WGRAD, &g.padded_work);
  g.bytes = bytes;
  g.vpu_flops = vpu_flops;
  if (c->opt->fusion == PS_FUSION_XLA)
    fuse_consumers_bwd(c, i, &g);
  emit(c, &g);
}

/* A producer with matmuls: the input-gradient and the weight-gradient
 * products. */
static void matmul_bwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  const PsFusion fu = c->opt->fusion;
  const double b = (double)c->batch;
  double mm = mm_flops(l, c->batch), mm_w = mm_flops_sel(l, c->batch, TRUE);
  if (ps_layer_kind_lower(l->kind)->takes_ids) {
    /* ids have no gradient: the weight-gradient products alone */
    wgrad_kernel(c, i, mm_w, own_bytes(c, i, TRUE), fmax(l->bwd_flops * b - mm_w, 0));
    return;
  }
  double other = fmax((l->bwd_flops - l->apart_bwd_flops) * b - mm - mm_w, 0);
  double w = (double)l->params;
  /* inputs and outputs once (the fusions apart have kernels of their own) */
  double act = c->eb * (l->fwd_bytes - l->apart_fwd_bytes - w) * b;
  apart_kernel(c, i, TRUE);
  /* dx = dy W^T: reads dy, W and the saved operands, writes dx.  Kept
   * for the model's first layer too, although XLA drops it there as dead
   * code: the pipeline's equal-stage checks rely on equal layers costing
   * the same (a refinement left for later). */
  PsKernel d = kernel(i, "dgrad");
  d.mxu_flops = mm;
  d.padded_flops = mm_padded(c, l, PS_MM_DGRAD, &d.padded_work);
  d.bytes = act + c->eb * w + mask_bytes(c, i); /* attention's dropout mask */
  d.vpu_flops = other + mask_redraw_flops(c, i);
  d.serial_vpu_flops = l->core_vec_bwd * b;
  if (fu == PS_FUSION_XLA)
    fuse_consumers_bwd(c, i, &d);
  emit(c, &d);
  /* dW = x^T dy: reads x and dy, writes dW in float32; bias gradient */
  wgrad_kernel(c, i, mm_w, act + STAT_BYTES * w, l->bias ? out_elems(c, i) : 0);
}

static void producer_bwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  if (l->n_mm > 0) {
    matmul_bwd(c, i);
    return;
  }
  PsKernel k = kernel(i, ps_layer_kind_name(l->kind));
  k.bytes = own_bytes(c, i, TRUE);
  k.vpu_flops = l->bwd_flops * (double)c->batch + mask_redraw_flops(c, i);
  if (c->opt->fusion == PS_FUSION_XLA)
    fuse_consumers_bwd(c, i, &k);
  emit(c, &k);
}

static void layer_bwd(Ctx *c, int i)
{
  const PsLayer *l = L(c, i);
  const PsLayerLowerInfo *info = ps_layer_kind_lower(l->kind);
  if (info->lowering == PS_LOWER_VIEW)
    return;
  if (c->opt->fusion == PS_FUSION_IDEAL && info->fuses_into_producer && l->input_from >= 0)
    return;
  switch (info->lowering) {
  case PS_LOWER_NORM_STATS:
    norm_stats(c, i, TRUE);
    break;
  case PS_LOWER_UNARY:
  case PS_LOWER_JOIN:
    elementwise_bwd(c, i);
    break;
  default:
    producer_bwd(c, i);
    break;
  }
}

void ps_cost_op(const PsTopology *topo, const PsModel *model, int first, int last,
                int64_t batch, const PsCostOptions *opt, gboolean backward, GArray *kernels,
                PsOpCost *out)
{
  g_return_if_fail(first >= 0 && last < model->n_layers && first <= last);
  PsOpCost s = {0};
  Ctx c = {.topo = topo, .m = model, .batch = batch, .opt = opt, .eb = opt->act_bytes,
           .out = kernels, .sum = &s};
  for (int n = 0; n <= last - first; n++) {
    int i = backward ? last - n : first + n;
    const PsLayer *l = &model->layers[i];
    s.flops += (backward ? l->bwd_flops : l->fwd_flops) * (double)batch;
    if (backward)
      layer_bwd(&c, i);
    else
      layer_fwd(&c, i);
  }
  s.memory_bound = s.memory_s > s.mxu_s;
  *out = s;
}

void ps_cost_layers(const PsTopology *topo, const PsModel *model, int first, int last,
                    int64_t batch, PsPrecision prec, gboolean fused, gboolean backward,
                    PsOpCost *out)
{
  PsCostOptions o = {.passes = ps_cost_passes(prec, 1), .act_bytes = ps_cost_act_bytes(prec),
                     .fusion = fused ? PS_FUSION_XLA : PS_FUSION_NONE};
  ps_cost_op(topo, model, first, last, batch, &o, backward, NULL, out);
}

/* The one update kernel with weights and slots of eb bytes and gradients
 * of gb. */
static void update_kernel(const PsTopology *topo, int64_t params, int slots, int eb, int gb,
                          PsKernel *out)
{
  /* read w, g, slots; write w, slots; ~2 FLOPs per state vector element */
  PsKernel k = {.layer = -1, .what = "optimizer"};
  k.bytes = (double)params * (eb * (2.0 + 2.0 * slots) + gb);
  k.vpu_flops = (double)params * (2.0 + 3.0 * slots);
  kernel_finish(topo, &k);
  *out = k;
}

void ps_cost_update_kernel(const PsTopology *topo, int64_t params, int slots, PsKernel *out)
{
  update_kernel(topo, params, slots, 4, 4, out);
}

static void update_cost(const PsTopology *topo, int64_t params, int slots, int eb, int gb,
                        PsOpCost *out)
{
  PsKernel k;
  update_kernel(topo, params, slots, eb, gb, &k);
  PsOpCost c = {.flops = k.vpu_flops, .bytes = k.bytes, .time = k.time, .kernels = 1,
                .overhead_s = k.launch_s};
  if (k.bound == PS_BOUND_MXU)
    c.mxu_s = k.busy_s;
  else
    c.memory_s = k.busy_s;
  c.memory_bound = k.bound != PS_BOUND_MXU;
  *out = c;
}

void ps_cost_update(const PsTopology *topo, int64_t params, int slots, PsOpCost *out)
{
  update_cost(topo, params, slots, 4, 4, out);
}

/* Adds a pass of `launches` like kernels with that traffic and work. */
static void update_pass(const PsTopology *topo, const char *what, double bytes, double flops,
                        int launches, PsOpCost *c)
{
  if (launches <= 0)
    return;
  PsKernel k = {.layer = -1, .what = what, .bytes = bytes, .vpu_flops = flops};
  kernel_finish(topo, &k);
  double launch = k.launch_s * launches;
  c->flops += flops;
  c->bytes += bytes;
  c->kernels += launches;
  c->overhead_s += launch;
  if (k.bound == PS_BOUND_MXU)
    c->mxu_s += k.busy_s;
  else
    c->memory_s += k.busy_s;
  c->time += ps_time_from_s(k.busy_s + launch);
}

void ps_cost_clip(const PsTopology *topo, int64_t params, int grad_bytes, int scale_bytes,
                  PsOpCost *out)
{
  g_return_if_fail(topo != NULL && out != NULL && params >= 0 && grad_bytes > 0 &&
                   scale_bytes >= 0);
  PsOpCost c = {0};
  double p = (double)params;
  update_pass(topo, "clip", grad_bytes * p, 2.0 * p, 1, &c);
  if (scale_bytes > 0)
    update_pass(topo, "clip", (grad_bytes + scale_bytes) * p, p, 1, &c);
  c.memory_bound = c.memory_s >= c.mxu_s;
  *out = c;
}

void ps_cost_optimizer(const PsTopology *topo, const PsUpdateShape *u, PsOpCost *out)
{
  g_return_if_fail(topo != NULL && u != NULL && out != NULL);
  g_return_if_fail(u->params >= 0 && u->adapted >= 0 && u->adapted <= u->params);
  int eb = u->state_bytes > 0 ? u->state_bytes : 4;
  int gb = u->grad_bytes > 0 ? u->grad_bytes : eb;
  if (u->kind == PS_OPT_SGD || u->kind == PS_OPT_ADAM) {
    update_cost(topo, u->params, u->kind == PS_OPT_ADAM ? 2 : 1, eb, gb, out);
    return;
  }
  PsOpCost c = {0};
  double p = (double)u->params, a = (double)u->adapted;
  int layers = u->adapted > 0 ? MAX(u->layers, 1) : 0;
  gboolean one = u->pass != 2, two = u->pass != 1;
  if (u->kind == PS_OPT_LARS) {
    update_pass(topo, "optimizer", (eb + gb) * a, 4.0 * a, one ? layers : 0, &c);
    update_pass(topo, "optimizer", (4.0 * eb + gb) * p, 5.0 * p + 2.0 * a, two, &c);
  } else {
    update_pass(topo, "optimizer", (5.0 * eb + gb) * p, 12.0 * p,
                one ? layers + (u->params > u->adapted) : 0, &c);
    update_pass(topo, "optimizer", 4.0 * eb * p, 6.0 * p, two, &c);
  }
  c.memory_bound = c.memory_s >= c.mxu_s;
  *out = c;
}

ps_time_t ps_cost_pcie(const PsTopology *topo, double bytes)
{
  return ps_time_from_s(bytes / topo->pcie_bandwidth_Bps);
}

/* cost.c: the roofline cost model (see cost.h). */
#include "hw/cost.h"

#include <math.h>

static int64_t pad_to(int64_t x, int64_t tile)
{
  return (x + tile - 1) / tile * tile;
}

int ps_cost_act_bytes(PsPrecision prec)
{
  return prec == PS_PRECISION_BF16 ? 2 : 4;
}

gboolean ps_cost_fuses_into_producer(PsLayerKind k)
{
  switch (k) {
  case PS_LAYER_RELU:
  case PS_LAYER_GELU:
  case PS_LAYER_TANH:
  case PS_LAYER_BATCHNORM:
  case PS_LAYER_LAYERNORM:
  case PS_LAYER_ADD:
  case PS_LAYER_FLATTEN:
  case PS_LAYER_SOFTMAX_XENT:
    return TRUE;
  default:
    return FALSE;
  }
}

static ps_time_t roofline(const PsTopology *topo, PsOpCost *c)
{
  double peak = ps_topology_device_peak_flops(topo) * topo->mxu_efficiency;
  double t_mxu = c->padded_flops / peak;
  double t_mem = c->bytes / ps_topology_device_hbm_bandwidth(topo);
  c->memory_bound = t_mem > t_mxu;
  return ps_time_from_s(fmax(t_mxu, t_mem) + topo->op_overhead_s);
}

void ps_cost_layers(const PsTopology *topo, const PsModel *model, int first, int last,
                    int64_t batch, PsPrecision prec, gboolean fused, gboolean backward,
                    PsOpCost *out)
{
  g_return_if_fail(first >= 0 && last < model->n_layers && first <= last);
  const int64_t tile = topo->mxu_size;
  const int passes = prec == PS_PRECISION_BF16 ? 1 : PS_F32_MXU_PASSES;
  const double eb = ps_cost_act_bytes(prec);
  PsOpCost c = {0};
  for (int i = first; i <= last; i++) {
    const PsLayer *l = &model->layers[i];
    c.flops += (backward ? l->bwd_flops : l->fwd_flops) * (double)batch;
    for (int m = 0; m < l->n_mm; m++) {
      const PsMatmul *mm = &l->mm[m];
      double useful = 2.0 * (double)(mm->rows * batch) * (double)mm->k * (double)mm->n *
                      (double)mm->count;
      double padded = 2.0 * (double)pad_to(mm->rows * batch, PS_MXU_ROW_TILE) *
                      (double)pad_to(mm->k, tile) * (double)pad_to(mm->n, tile) *
                      (double)mm->count;
      /* backward: one product for the input gradient, one for the weights */
      int products = backward ? 2 : 1;
      c.mxu_flops += useful * products;
      c.padded_flops += padded * products * passes;
    }
    /* HBM traffic from shapes: forward reads x and W, writes y; backward
     * reads x, W and dy, writes dx and dW.  Inside a fused group an
     * element-wise layer's input and output never leave the core. */
    if (l->kind == PS_LAYER_FLATTEN)
      continue; /* a view: no traffic of its own */
    double in = (double)ps_shape_elems(l->in_shape, l->in_rank) * (double)batch;
    double outv = (double)ps_shape_elems(l->out_shape, l->out_rank) * (double)batch;
    double w = (double)l->params;
    if (fused && i > first && ps_cost_fuses_into_producer(l->kind))
      in = 0; /* produced inside the group */
    if (fused && i < last && ps_cost_fuses_into_producer(model->layers[i + 1].kind))
      outv = 0; /* consumed inside the group */
    c.bytes += eb * (backward ? 2.0 * in + outv + 2.0 * w : in + outv + w);
  }
  c.time = roofline(topo, &c);
  *out = c;
}

void ps_cost_update(const PsTopology *topo, int64_t params, int slots, PsOpCost *out)
{
  PsOpCost c = {0};
  /* read w, g, slots; write w, slots; ~2 FLOPs per state vector element */
  c.bytes = (double)params * 4.0 * (2.0 + 2.0 * slots + 1.0);
  c.flops = (double)params * (2.0 + 3.0 * slots);
  c.time = roofline(topo, &c);
  *out = c;
}

ps_time_t ps_cost_pcie(const PsTopology *topo, double bytes)
{
  return ps_time_from_s(bytes / topo->pcie_bandwidth_Bps);
}

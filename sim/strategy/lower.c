/* lower.c: shared lowering of layers to costed ops (see lower.h). */
#include "strategy/strategy-private.h"

#include "hw/cost.h"

#include <stdio.h>

static gboolean host_call_after(const PsExperiment *exp, int layer)
{
  for (int h = 0; h < exp->n_host_calls; h++)
    if (exp->host_calls[h].after == layer)
      return TRUE;
  return FALSE;
}

GArray *ps_lower_layer_groups(const PsExperiment *exp, int first, int last)
{
  const PsModel *m = exp->model;
  GArray *starts = g_array_new(FALSE, FALSE, sizeof(int));
  for (int i = first; i < last; i++) {
    /* a reshape is free: it also joins the op of the layer after it */
    gboolean joins = i > first && (ps_cost_fuses_into_producer(m->layers[i].kind) ||
                                   m->layers[i - 1].kind == PS_LAYER_FLATTEN);
    if (!(exp->fuse_elementwise && joins) || (i > first && host_call_after(exp, i - 1)))
      g_array_append_val(starts, i);
  }
  g_array_append_val(starts, last);
  return starts;
}

int64_t ps_lower_param_offset(const PsModel *model, int layer)
{
  int64_t off = 0;
  for (int i = 0; i < layer; i++)
    off += model->layers[i].params;
  return off;
}

void ps_lower_compute_op(const PsExperiment *exp, PsOp *op)
{
  const PsModel *m = exp->model;
  static const char *const prefix[PS_OP_N_KINDS] = {[PS_OP_FWD] = "fwd", [PS_OP_BWD] = "bwd",
                                                    [PS_OP_RECOMPUTE] = "recompute"};
  g_return_if_fail(op->kind == PS_OP_FWD || op->kind == PS_OP_BWD ||
                   op->kind == PS_OP_RECOMPUTE);
  if (op->first == op->last)
    snprintf(op->name, sizeof op->name, "%s %s", prefix[op->kind], m->layers[op->first].name);
  else
    snprintf(op->name, sizeof op->name, "%s %s..%s", prefix[op->kind],
             m->layers[op->first].name, m->layers[op->last].name);
  PsOpCost c;
  ps_cost_layers(exp->topology, m, op->first, op->last, op->batch, exp->numerics.precision,
                 exp->fuse_elementwise, op->kind == PS_OP_BWD, &c);
  op->time = c.time;
  op->flops = c.flops;
  op->mxu_flops = c.mxu_flops;
  op->hbm_bytes = c.bytes;
  op->memory_bound = c.memory_bound;
  int64_t act = 0;
  for (int l = op->first; l <= op->last; l++)
    act += m->layers[l].act_elems;
  act *= op->batch * ps_cost_act_bytes(exp->numerics.precision);
  op->act_bytes = op->kind == PS_OP_BWD ? -act : act;
}

int ps_lower_optimizer_slots(const PsExperiment *exp)
{
  return exp->optimizer.kind == PS_OPT_ADAM ? 2 : 1;
}

void ps_lower_update_op(const PsExperiment *exp, PsOp *op, int64_t params)
{
  PsOpCost c;
  ps_cost_update(exp->topology, params, ps_lower_optimizer_slots(exp), &c);
  op->kind = PS_OP_UPDATE;
  op->time = c.time;
  op->flops = c.flops;
  op->hbm_bytes = c.bytes;
  op->memory_bound = c.memory_bound;
}

ps_time_t ps_lower_launch(const PsExperiment *exp)
{
  return ps_time_from_s(exp->topology->op_overhead_s);
}

gboolean ps_lower_memory(const PsExperiment *exp, PsProgram *p, int64_t params,
                         int64_t slot_params, const char *what, const char *advice,
                         GError **error)
{
  int slots = ps_lower_optimizer_slots(exp);
  p->hbm_static_bytes = params * 4 * 2 + slot_params * 4 * slots;
  int64_t live = 0, peak = 0;
  for (int i = 0; i < p->n_ops; i++) {
    live += p->ops[i].act_bytes;
    peak = MAX(peak, live);
  }
  p->hbm_peak_bytes = p->hbm_static_bytes + peak;
  int64_t have = ps_topology_device_hbm_bytes(exp->topology);
  if (p->hbm_peak_bytes <= have)
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT,
              "%s: %s needs %.2f GiB of HBM (%.2f GiB weights, gradients and optimizer slots, "
              "%.2f GiB of activations at the peak), a %s device has %.2f GiB; %s",
              exp->file, what, p->hbm_peak_bytes / 1073741824.0,
              p->hbm_static_bytes / 1073741824.0, peak / 1073741824.0, exp->topology->name,
              have / 1073741824.0, advice);
  return FALSE;
}

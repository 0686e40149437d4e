/* kernels.c: lists the kernels of a device's step (see kernels.h), each
 * with its FLOPs, HBM bytes, time, bound and the share of the MXU work it
 * pays for that is the model's (the rest is padding: cost.c pads matmul
 * sides to the MXU and lays convolutions out as XLA does). */
#include "strategy/kernels.h"

#include "hw/cost.h"
#include "strategy/cost-options.h"
#include "strategy/strategy.h"

#include <string.h>

typedef struct {
  double by_bound[4], count[4];
  double mxu, padded; /* matrix FLOPs, and as the MXU runs them */
} Totals;

static void row(GString *out, const char *op, const char *layer, const PsKernel *k, Totals *t)
{
  g_string_append_printf(out, "%-28.28s %-30.30s %-14s %12.3f %12.3f %11.3f  %-6s", op, layer,
                         k->what, (k->mxu_flops + k->vpu_flops) / 1e9, k->bytes / 1e6,
                         ps_time_to_s(k->time) * 1e6, ps_cost_bound_name(k->bound));
  if (k->padded_work > 0)
    g_string_append_printf(out, " %6.1f%%\n", 100 * k->mxu_flops / k->padded_work);
  else
    g_string_append(out, "       -\n");
  t->by_bound[k->bound] += ps_time_to_s(k->time);
  t->count[k->bound] += 1;
  t->mxu += k->mxu_flops;
  t->padded += k->padded_work;
}

/* Whether backward op i of prog was split, its weight-gradient tail
 * following before the next compute op. */
static gboolean has_tail(const PsProgram *prog, int i)
{
  const PsOp *op = &prog->ops[i];
  for (int j = i + 1; j < prog->n_ops; j++) {
    const PsOp *x = &prog->ops[j];
    if (x->kind == PS_OP_BWD && x->tail && x->first == op->first && x->last == op->last)
      return TRUE;
    if (x->kind == PS_OP_FWD || x->kind == PS_OP_BWD || x->kind == PS_OP_RECOMPUTE)
      return FALSE;
  }
  return FALSE;
}

void ps_kernels_describe(const PsExperiment *exp, const PsPlan *plan, int device, GString *out)
{
  const PsStrategy *impl = exp->strategy.impl;
  if (impl && impl->kernels) {
    impl->kernels(exp, exp->strategy.config, plan, device, out);
    return;
  }
  ps_kernels_describe_model(exp, exp->model, NULL, NULL, ps_plan_program(plan, device), out);
}

void ps_kernels_describe_model(const PsExperiment *exp, const PsModel *m,
                               double (*rerun)(const void *ud, int layer, int mm),
                               const void *rerun_ud, const PsProgram *prog, GString *out)
{
  PsCostOptions opt;
  ps_strategy_cost_options(exp, &opt);
  static const char *const fusions[] = {"xla", "none", "ideal"};
  g_string_append_printf(out,
                         "kernels of one step (fusion %s, %d MXU pass%s per matmul, %d-byte "
                         "activations%s)\n",
                         fusions[opt.fusion], opt.passes, opt.passes == 1 ? "" : "es",
                         opt.act_bytes,
                         opt.quant_share > 0 ? "; weight products quantized, one pass at its peak"
                                           : "");
  g_string_append_printf(out, "%-28s %-30s %-14s %12s %12s %11s  %-6s %7s\n", "op", "layer",
                         "kernel", "GFLOP", "HBM MB", "time us", "bound", "MXU use");
  Totals t = {0};
  GArray *ks = g_array_new(FALSE, FALSE, sizeof(PsKernel));
  for (int i = 0; i < prog->n_ops; i++) {
    const PsOp *op = &prog->ops[i];
    if (op->part > 1)
      continue; /* listed whole at its first part */
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD || op->kind == PS_OP_RECOMPUTE) {
      PsOpCost c;
      g_array_set_size(ks, 0);
      opt.rerun = op->kind == PS_OP_RECOMPUTE ? rerun : NULL;
      opt.rerun_ud = rerun_ud;
      ps_cost_op(exp->topology, m, op->first, op->last, op->batch, &opt,
                 op->kind == PS_OP_BWD, ks, &c);
      /* a backward split into its input gradient and a tail of its
       * weight-gradient kernels (PsOp.tail) lists each part's kernels */
      gboolean split = op->kind == PS_OP_BWD && !op->tail && has_tail(prog, i);
      for (guint k = 0; k < ks->len; k++) {
        const PsKernel *kn = &g_array_index(ks, PsKernel, k);
        gboolean wgrad = strcmp(kn->what, "wgrad") == 0;
        if ((op->tail && !wgrad) || (split && wgrad))
          continue;
        row(out, op->name, m->layers[kn->layer].name, kn, &t);
      }
    } else if (op->kind == PS_OP_UPDATE || op->kind == PS_OP_CLIP) {
      /* passes over the weights (the optimizer's, or clipping's norm and
       * scaling); listed as one kernel whose cost is the op's */
      double busy = ps_time_to_s(op->time) - op->overhead_s;
      PsKernel k = {.layer = -1,
                    .what = op->kind == PS_OP_CLIP ? "clip" : "optimizer",
                    .bytes = op->hbm_bytes,
                    .vpu_flops = op->flops, .time = op->time,
                    .bound = op->overhead_s > busy ? PS_BOUND_LAUNCH
                             : op->memory_bound    ? PS_BOUND_HBM
                                                   : PS_BOUND_MXU};
      row(out, op->name, "(weights)", &k, &t);
    }
  }
  g_array_free(ks, TRUE);
  double total = t.by_bound[0] + t.by_bound[1] + t.by_bound[2] + t.by_bound[3];
  g_string_append_printf(out, "\n%.0f kernels, %.3f ms:",
                         t.count[0] + t.count[1] + t.count[2] + t.count[3], total * 1e3);
  for (int b = 0; b < 4; b++)
    g_string_append_printf(out, " %s-bound %.0f (%.3f ms)%s", ps_cost_bound_name((PsBound)b),
                           t.count[b], t.by_bound[b] * 1e3, b < 3 ? "," : "\n");
  if (t.padded > 0)
    g_string_append_printf(out,
                           "MXU use: %.3f GFLOP of matrix products run as %.3f padded to the "
                           "MXU (%.1f%% of its work the model's)\n",
                           t.mxu / 1e9, t.padded / 1e9, 100 * t.mxu / t.padded);
}

/* kernels.c: lists the kernels of a device's step (see kernels.h). */
#include "strategy/kernels.h"

#include "hw/cost.h"
#include "strategy/cost-options.h"

static void row(GString *out, const char *op, const char *layer, const PsKernel *k,
                double *by_bound, double *count)
{
  g_string_append_printf(out, "%-28.28s %-30.30s %-14s %12.3f %12.3f %11.3f  %s\n", op, layer,
                         k->what, (k->mxu_flops + k->vpu_flops) / 1e9, k->bytes / 1e6,
                         ps_time_to_s(k->time) * 1e6, ps_cost_bound_name(k->bound));
  by_bound[k->bound] += ps_time_to_s(k->time);
  count[k->bound] += 1;
}

void ps_kernels_describe(const PsExperiment *exp, const PsProgram *prog, GString *out)
{
  PsCostOptions opt;
  ps_strategy_cost_options(exp, &opt);
  const PsModel *m = exp->model;
  static const char *const fusions[] = {"xla", "none", "ideal"};
  g_string_append_printf(out,
                         "kernels of one step (fusion %s, %d MXU pass%s per matmul, %d-byte "
                         "activations)\n",
                         fusions[opt.fusion], opt.passes, opt.passes == 1 ? "" : "es",
                         opt.act_bytes);
  g_string_append_printf(out, "%-28s %-30s %-14s %12s %12s %11s  %s\n", "op", "layer", "kernel",
                         "GFLOP", "HBM MB", "time us", "bound");
  double by_bound[4] = {0}, count[4] = {0};
  GArray *ks = g_array_new(FALSE, FALSE, sizeof(PsKernel));
  for (int i = 0; i < prog->n_ops; i++) {
    const PsOp *op = &prog->ops[i];
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD || op->kind == PS_OP_RECOMPUTE) {
      PsOpCost c;
      g_array_set_size(ks, 0);
      ps_cost_op(exp->topology, m, op->first, op->last, op->batch, &opt,
                 op->kind == PS_OP_BWD, ks, &c);
      for (guint k = 0; k < ks->len; k++) {
        const PsKernel *kn = &g_array_index(ks, PsKernel, k);
        row(out, op->name, m->layers[kn->layer].name, kn, by_bound, count);
      }
    } else if (op->kind == PS_OP_UPDATE) {
      /* one kernel over the weights; its cost is the op's */
      double busy = ps_time_to_s(op->time) - op->overhead_s;
      PsKernel k = {.layer = -1, .what = "optimizer", .bytes = op->hbm_bytes,
                    .vpu_flops = op->flops, .time = op->time,
                    .bound = op->overhead_s > busy ? PS_BOUND_LAUNCH
                             : op->memory_bound    ? PS_BOUND_HBM
                                                   : PS_BOUND_MXU};
      row(out, op->name, "(weights)", &k, by_bound, count);
    }
  }
  g_array_free(ks, TRUE);
  double total = by_bound[0] + by_bound[1] + by_bound[2] + by_bound[3];
  g_string_append_printf(out, "\n%.0f kernels, %.3f ms:", count[0] + count[1] + count[2] + count[3],
                         total * 1e3);
  for (int b = 0; b < 4; b++)
    g_string_append_printf(out, " %s-bound %.0f (%.3f ms)%s", ps_cost_bound_name((PsBound)b),
                           count[b], by_bound[b] * 1e3, b < 3 ? "," : "\n");
}

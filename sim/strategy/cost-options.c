/* cost-options.c: cost-model options from an experiment (see
 * cost-options.h). */
#include "strategy/cost-options.h"

void ps_strategy_cost_options(const PsExperiment *exp, PsCostOptions *out)
{
  g_return_if_fail(exp != NULL && out != NULL);
  out->passes = ps_cost_passes(exp->numerics.precision, exp->numerics.matmul_passes);
  out->act_bytes = ps_cost_act_bytes(exp->numerics.precision);
  out->fusion = exp->fusion;
  out->masks_recomputed = exp->masks_recomputed;
  double qpeak = ps_config_quant_peak(exp->topology, exp->numerics.quantization);
  out->quant_share = qpeak > 0 ? exp->topology->peak_flops / qpeak : 0;
  out->rerun = NULL; /* set by the lowering for a rematerialized forward */
  out->rerun_ud = NULL;
}

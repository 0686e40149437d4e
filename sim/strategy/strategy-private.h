/* strategy-private.h: what every strategy does the same way when it lowers layers
 * to ops: grouping layers into fused ops, costing ops on the experiment's
 * hardware, laying out parameters, and checking HBM.
 *
 * Invariant: pure functions of the experiment; costs come from hw/cost.h
 * only, so two strategies price the same op the same. */
#ifndef PS_STRATEGY_PRIVATE_H
#define PS_STRATEGY_PRIVATE_H

#include "io/config.h"
#include "program/program.h"

/* Layer groups that run as one op, [starts[g], starts[g + 1]), over the
 * layers [first, last): element-wise layers, reshapes and the loss join the
 * op of their producer when the experiment fuses, and a layer whose output
 * goes to the host ends its group.  (transfer full) */
GArray *ps_lower_layer_groups(const PsExperiment *exp, int first, int last);

/* Floats of parameters before layer `layer` (the flat layout of
 * model/net.h: layer after layer). */
int64_t ps_lower_param_offset(const PsModel *model, int layer);

/* Fills name and cost of a FWD, BWD or RECOMPUTE op whose kind, layers
 * and batch are set; act_bytes is what it keeps (FWD, RECOMPUTE) or frees
 * (BWD) of activations. */
void ps_lower_compute_op(const PsExperiment *exp, PsOp *op);
/* An UPDATE of `params` weights with the experiment's optimizer. */
void ps_lower_update_op(const PsExperiment *exp, PsOp *op, int64_t params);
/* The launch overhead of INFEED and OUTFEED ops. */
ps_time_t ps_lower_launch(const PsExperiment *exp);

/* Static HBM (weights and gradients of `params`, optimizer slots of
 * `slot_params`) and the peak with live activations, walking the ops in
 * order.  FALSE with PS_INPUT_ERROR_DOES_NOT_FIT naming `what` (e.g.
 * "device 0" or "stage 2") and the advice when the peak exceeds the
 * device's HBM. */
gboolean ps_lower_memory(const PsExperiment *exp, PsProgram *p, int64_t params,
                         int64_t slot_params, const char *what, const char *advice,
                         GError **error);

int ps_lower_optimizer_slots(const PsExperiment *exp);

/* The strategies of the registry (strategy.c). */
#include "strategy/strategy.h"
extern const PsStrategy ps_strategy_replicate;

#endif

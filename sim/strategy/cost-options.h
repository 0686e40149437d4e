/* cost-options.h: the facts of an experiment the cost model needs, read
 * out of it here so that hw/cost.h never sees the experiment.
 * Invariant: the options depend only on the experiment's numerics
 * precision, matmul precision, fusion and whether its dropout masks are
 * recomputed. */
#ifndef PS_STRATEGY_COST_OPTIONS_H
#define PS_STRATEGY_COST_OPTIONS_H

#include "hw/cost.h"
#include "io/config.h"

/* Fills `out` from the experiment's precision, matmul passes and fusion. */
void ps_strategy_cost_options(const PsExperiment *exp, PsCostOptions *out);

#endif

/* kernels.h: the kernels of one step of a device's program, as the cost
 * model lowers its ops (hw/cost.h), for `podsim describe --kernels`.
 * Invariant: the kernels of an op sum to the op's time in the plan. */
#ifndef PS_KERNELS_LIST_H
#define PS_KERNELS_LIST_H

#include "io/config.h"
#include "program/program.h"

/* Appends a table of the kernels of `prog` (one step: every compute op in
 * order, each kernel with its FLOPs, HBM bytes, time and bound), then
 * totals per bound, to `out`. */
void ps_kernels_describe(const PsExperiment *exp, const PsProgram *prog, GString *out);

#endif

/* kernels.h: the kernels of one step of a device's program, as the cost
 * model lowers its ops (hw/cost.h), for `podsim describe --kernels`.
 * Invariant: the kernels of an op sum to the op's time in the plan. */
#ifndef PS_KERNELS_LIST_H
#define PS_KERNELS_LIST_H

#include "io/config.h"
#include "model/layers.h"
#include "program/program.h"

/* Appends a table of the kernels of `device`'s program in `plan` (one
 * step: every compute op in order, each kernel with its FLOPs, HBM bytes,
 * time and bound), then totals per bound, to `out`: as the experiment's
 * strategy costed them (PsStrategy.kernels), else on the whole model. */
void ps_kernels_describe(const PsExperiment *exp, const PsPlan *plan, int device, GString *out);

/* The same for `prog` with each compute op costed on `model` (a
 * strategy's local layers), a RECOMPUTE op running the share `rerun`
 * gives of each product (NULL: all of it).  An op run as parts (a
 * collective matmul) lists its whole kernels at its first part. */
void ps_kernels_describe_model(const PsExperiment *exp, const PsModel *model,
                               double (*rerun)(const void *ud, int layer, int mm),
                               const void *rerun_ud, const PsProgram *prog, GString *out);

#endif

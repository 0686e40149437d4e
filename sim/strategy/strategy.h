/* strategy.h: strategies compile an experiment (model, batch, topology)
 * into a plan (program/program.h), as XLA compiles a training step for a
 * pod.  They are registered by name in a const table, like the collective
 * algorithms; the experiment's strategy.kind names one.
 *
 * Invariant: a compiled plan passes ps_plan_validate, and every op carries
 * its cost on the experiment's hardware. */
#ifndef PS_STRATEGY_H
#define PS_STRATEGY_H

#include "io/config.h"
#include "program/program.h"

typedef struct {
  const char *name;
  const char *summary;
  /* (transfer full) NULL with a PS_INPUT_ERROR naming the experiment's file
   * and key when the strategy cannot run the experiment. */
  PsPlan *(*compile)(const PsExperiment *exp, GError **error);
} PsStrategy;

/* The table, NULL-terminated, and lookup by name. */
extern const PsStrategy *const ps_strategies[];
const PsStrategy *ps_strategy_find(const char *name);

/* Compiles with the strategy the experiment names.  (transfer full) */
PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error);

#endif

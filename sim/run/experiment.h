/* experiment.h: loading an experiment at the run layer.  io/config.h parses
 * the file (ps_experiment_parse); this loader adds what only the layers
 * above io may judge, so a caller gets an experiment that can run.
 *
 * Invariant: a PsExperiment returned by ps_experiment_load has passed every
 * check, its own and those of the layers above io, and carries its fully
 * resolved tree (e->resolved) for `describe`. */
#ifndef PS_RUN_EXPERIMENT_H
#define PS_RUN_EXPERIMENT_H

#include "io/config.h"

/* Loads an experiment, resolves topology and model by name, applies
 * overrides ("a.b=v", NULL-terminated, may be NULL) to the resolved tree,
 * then checks everything.  (transfer full) */
PsExperiment *ps_experiment_load(const char *name_or_path, const char *const *overrides,
                                 GError **error);

#endif

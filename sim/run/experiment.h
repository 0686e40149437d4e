/* experiment.h: loading an experiment at the run layer.  io/config.h parses
 * the file (ps_experiment_parse) and keeps its "strategy" object; this
 * loader finds the strategy the object's kind names in a registry
 * (strategy/strategy.h), has it read its keys and check them against the
 * rest of the experiment (HBM among them), and puts its resolved keys in
 * the tree `describe` prints.
 *
 * Invariant: a PsExperiment returned by a loader here has passed every
 * check, io's and its strategy's; e->strategy holds the entry and its
 * configuration, and e->resolved reloads as the same experiment. */
#ifndef PS_RUN_EXPERIMENT_H
#define PS_RUN_EXPERIMENT_H

#include "io/config.h"
#include "strategy/strategy.h"

/* Loads an experiment, resolves topology and model by name, applies
 * overrides ("a.b=v", NULL-terminated, may be NULL) to the resolved tree,
 * then checks everything, with the built-in strategies.  (transfer full) */
PsExperiment *ps_experiment_load(const char *name_or_path, const char *const *overrides,
                                 GError **error);

/* The same with the strategies of `reg` (NULL: the built-ins); the
 * registry must outlive the experiment.  (transfer full) */
PsExperiment *ps_experiment_load_with(const PsStrategyRegistry *reg, const char *name_or_path,
                                      const char *const *overrides, GError **error);

/* Devices the experiment's strategy occupies, 0 .. n - 1 (at most
 * ps_topology_devices(e->topology); fewer leaves devices idle). */
int ps_experiment_devices_used(const PsExperiment *e);

/* When loading experiment `name` with overrides `sets` ("a.b=v",
 * NULL-terminated, may be NULL) failed on an unknown key, appends to
 * error's message the override that would work ("; did you mean --set
 * KEY=VALUE?"): the culprit is the override whose key is not in the
 * resolved tree and names the unknown key.  Leaves any other error as
 * it is. */
void ps_experiment_suggest_key(const char *name, const char *const *sets, GError *error);

#endif

/* experiment.c: the run layer's experiment loader (see experiment.h): io's
 * parse, then the strategy's parse, check and resolved keys.
 *
 * Invariant: nothing here knows which strategies exist; the experiment's
 * strategy.kind is looked up in the registry the caller gives. */
#include "run/experiment.h"

/* Stragglers name devices the strategy occupies. */
static gboolean check_stragglers(const PsExperiment *e, GError **error)
{
  int used = ps_experiment_devices_used(e);
  for (int i = 0; i < e->faults.n_stragglers; i++) {
    int d = e->faults.stragglers[i].device;
    if (d >= 0 && d < used)
      continue;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: faults.stragglers[%d].device: device %d is not a device of this run: it "
                "uses devices 0..%d (strategy %s, on %d of %s's %d devices)",
                e->file, i, d, used - 1, e->strategy.kind, used, e->topology->name,
                ps_topology_devices(e->topology));
    return FALSE;
  }
  return TRUE;
}

PsExperiment *ps_experiment_load_with(const PsStrategyRegistry *reg, const char *name_or_path,
                                      const char *const *overrides, GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  PsExperiment *e = ps_experiment_parse(name_or_path, overrides, error);
  if (!e)
    return NULL;
  if (!ps_strategy_attach(reg, e, error) ||
      !e->strategy.impl->check(e, e->strategy.config, error) || !check_stragglers(e, error)) {
    ps_experiment_free(e);
    return NULL;
  }
  /* replaces io's placeholder, in its place among the keys */
  json_object_object_add(e->resolved, "strategy", e->strategy.impl->to_json(e->strategy.config));
  return e;
}

PsExperiment *ps_experiment_load(const char *name_or_path, const char *const *overrides,
                                 GError **error)
{
  return ps_experiment_load_with(NULL, name_or_path, overrides, error);
}

int ps_experiment_devices_used(const PsExperiment *e)
{
  g_return_val_if_fail(e != NULL && e->strategy.impl != NULL, 0);
  return e->strategy.impl->devices(e->strategy.config);
}

/* experiment.c: the run layer's experiment loader (see experiment.h): io's
 * parse, then the strategy's parse, check and resolved keys, then the
 * faults against what the layers above io know (stragglers against the
 * devices the strategy occupies, link faults against the slice's geometry,
 * hw/topology.h), in the order io once checked them.
 *
 * Invariant: nothing here knows which strategies exist; the experiment's
 * strategy.kind is looked up in the registry the caller gives. */
#include "run/experiment.h"

#include "hw/topology.h"

/* A slice straggler names a slice the strategy occupies (some of its
 * devices, numbered slice-major, in use), and no device straggler lies in
 * it. */
static gboolean check_slice_straggler(const PsExperiment *e, int i, int used, GError **error)
{
  const PsFaultsConfig *fc = &e->faults;
  int slice = fc->stragglers[i].slice;
  int per_slice = ps_topology_devices(e->topology) / e->topology->slices;
  if (slice * per_slice >= used) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: faults.stragglers[%d].slice: slice %d runs none of this run's devices: "
                "it uses devices 0..%d (strategy %s), slices 0..%d of %s's %d",
                e->file, i, slice, used - 1, e->strategy.kind, (used - 1) / per_slice,
                e->topology->name, e->topology->slices);
    return FALSE;
  }
  for (int j = 0; j < fc->n_stragglers; j++) {
    int d = fc->stragglers[j].device;
    if (d < 0 || d / per_slice != slice)
      continue;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: faults.stragglers[%d].device: device %d is in slice %d, already a straggler "
                "by faults.stragglers[%d]; give the device or the slice",
                e->file, j, d, slice, i);
    return FALSE;
  }
  return TRUE;
}

/* Stragglers name devices (or slices) the strategy occupies. */
static gboolean check_stragglers(const PsExperiment *e, GError **error)
{
  int used = ps_experiment_devices_used(e);
  for (int i = 0; i < e->faults.n_stragglers; i++) {
    int d = e->faults.stragglers[i].device;
    if (e->faults.stragglers[i].slice >= 0) {
      if (!check_slice_straggler(e, i, used, error))
        return FALSE;
      continue;
    }
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
      !e->strategy.impl->check(e, e->strategy.config, error) || !check_stragglers(e, error) ||
      !ps_geometry_check_link_faults(e->topology, &e->faults, e->file, error)) {
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

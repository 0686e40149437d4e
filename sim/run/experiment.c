/* experiment.c: the run layer's experiment loader (see experiment.h): io's
 * parse, then the checks of the layers above io (the link faults against
 * the slice's geometry, hw/topology.h).
 *
 * Invariant: an experiment leaves only after io's checks and these have
 * passed; io's tree is never checked twice. */
#include "run/experiment.h"

#include "hw/topology.h"

PsExperiment *ps_experiment_load(const char *name_or_path, const char *const *overrides,
                                 GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  PsExperiment *e = ps_experiment_parse(name_or_path, overrides, error);
  if (!e)
    return NULL;
  if (!ps_geometry_check_link_faults(e->topology, &e->faults, e->file, error)) {
    ps_experiment_free(e);
    return NULL;
  }
  return e;
}

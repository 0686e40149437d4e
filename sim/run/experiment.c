/* experiment.c: the run layer's experiment loader (see experiment.h). */
#include "run/experiment.h"

PsExperiment *ps_experiment_load(const char *name_or_path, const char *const *overrides,
                                 GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  return ps_experiment_parse(name_or_path, overrides, error);
}

/* fuzz_experiment.c: libFuzzer harness for the experiment loader.
 *
 * Each input is written to a file in the scratch directory and loaded with
 * ps_experiment_load, the path `podsim run FILE` takes: JSON syntax,
 * topology and model resolution by name ($PODSIM_DATA_DIR is the
 * repository) or inline, "extends", every schema check and the memory
 * check.  The experiment is freed, never run.  Invariant: the loader
 * either returns an experiment or a GError in PS_INPUT_ERROR, never both,
 * never neither. */
#include "fuzz-common.h"

#include "io/config.h"
#include "run/experiment.h"

#include <stdio.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  ps_fuzz_setup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  g_autofree char *path = g_build_filename(ps_fuzz_scratch(), "input.json", NULL);
  GError *err = NULL;
  if (!g_file_set_contents(path, (const char *)data, (gssize)size, &err))
    g_error("fuzz: cannot write %s: %s", path, err->message);
  PsExperiment *e = ps_experiment_load(path, NULL, &err);
  if (e) {
    g_assert_no_error(err);
    g_assert_nonnull(e->topology);
    g_assert_nonnull(e->model);
    g_assert_cmpint(ps_experiment_devices_used(e), <=, ps_topology_devices(e->topology));
    ps_experiment_free(e);
  } else {
    ps_fuzz_refused(&err);
  }
  return 0;
}

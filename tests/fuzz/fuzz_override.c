/* fuzz_override.c: libFuzzer harness for "--set a.b=v" overrides.
 *
 * The first byte of the input picks a shipped experiment (experiments/
 * *.json, in name order); the rest is split at newlines into at most
 * MAX_OVERRIDES strings, a NULL-terminated array handed to
 * ps_experiment_load as `podsim run NAME --set ... --set ...` would.  This
 * covers the override parser (paths, [i] indices, JSON and plain values,
 * topology/model replacement before resolution) and every check after it.
 * Invariant: as for the experiment harness, an experiment or a GError. */
#include "fuzz-common.h"

#include "io/config.h"
#include "run/experiment.h"

#include <string.h>

#define MAX_OVERRIDES 16

static char **experiments; /* absolute paths, NULL-terminated */
static guint n_experiments;

/* g_ptr_array_sort passes pointers to the elements. */
static gint compare_paths(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  ps_fuzz_setup();
  g_autofree char *dir = g_build_filename(ps_fuzz_repo(), "experiments", NULL);
  GDir *d = g_dir_open(dir, 0, NULL);
  GPtrArray *names = g_ptr_array_new();
  const char *n;
  while (d && (n = g_dir_read_name(d)) != NULL)
    if (g_str_has_suffix(n, ".json"))
      g_ptr_array_add(names, g_build_filename(dir, n, NULL));
  if (d)
    g_dir_close(d);
  if (names->len == 0)
    g_error("fuzz: no experiments in %s", dir);
  g_ptr_array_sort(names, compare_paths);
  n_experiments = names->len;
  g_ptr_array_add(names, NULL);
  experiments = (char **)g_ptr_array_free(names, FALSE);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size == 0)
    return 0;
  const char *file = experiments[data[0] % n_experiments];
  g_autofree char *text = ps_fuzz_text(data + 1, size - 1);
  char **lines = g_strsplit(text, "\n", MAX_OVERRIDES + 1);
  if (g_strv_length(lines) > MAX_OVERRIDES) {
    g_free(lines[MAX_OVERRIDES]);
    lines[MAX_OVERRIDES] = NULL;
  }
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(file, (const char *const *)lines, &err);
  if (e) {
    g_assert_no_error(err);
    g_assert_cmpint(ps_experiment_devices_used(e), <=, ps_topology_devices(e->topology));
    ps_experiment_free(e);
  } else {
    ps_fuzz_refused(&err);
  }
  g_strfreev(lines);
  return 0;
}

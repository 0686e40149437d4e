/* experiment.c: the run layer's experiment loader (see experiment.h): io's
 * parse, then the strategy's parse, check and resolved keys, then the
 * faults against what the layers above io know (stragglers against the
 * devices the strategy occupies, link faults against the slice's geometry,
 * hw/topology.h), in the order io once checked them; and the nearest
 * valid key for an override the experiment does not know.
 *
 * Invariant: nothing here knows which strategies exist; the experiment's
 * strategy.kind is looked up in the registry the caller gives. */
#include "run/experiment.h"

#include "hw/topology.h"

#include <string.h>

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

/* The strategy's check, with XLA's way out of a step that does not fit in
 * HBM as its dropout masks are kept: its rematerialization pass, given the
 * device's memory as a limit, recomputes what is cheap rather than keep it
 * (xla/service/hlo_rematerialization.cc), and a mask is a draw and a
 * compare away.  So a step whose need passes the check only without the
 * masks runs with them recomputed in backward (PsExperiment's
 * masks_recomputed); one that does not fit either way reports that
 * smaller need. */
static gboolean check_strategy(PsExperiment *e, GError **error)
{
  GError *kept = NULL;
  if (e->strategy.impl->check(e, e->strategy.config, &kept))
    return TRUE;
  if (!g_error_matches(kept, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT) ||
      ps_model_mask_bytes(e->model, 0, e->model->n_layers) == 0) {
    g_propagate_error(error, kept);
    return FALSE;
  }
  g_error_free(kept);
  e->masks_recomputed = TRUE;
  GError *recomputed = NULL;
  if (e->strategy.impl->check(e, e->strategy.config, &recomputed))
    return TRUE;
  if (recomputed->code == PS_INPUT_ERROR_DOES_NOT_FIT) {
    char *m = recomputed->message; /* say what was counted */
    recomputed->message = g_strdup_printf("%s (counting the dropout masks as recomputed in "
                                          "backward, not kept)", m);
    g_free(m);
  }
  g_propagate_error(error, recomputed);
  return FALSE;
}

PsExperiment *ps_experiment_load_with(const PsStrategyRegistry *reg, const char *name_or_path,
                                      const char *const *overrides, GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  PsExperiment *e = ps_experiment_parse(name_or_path, overrides, error);
  if (!e)
    return NULL;
  if (!ps_strategy_attach(reg, e, error) ||
      !check_strategy(e, error) || !check_stragglers(e, error) ||
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

/* ---- --set keys: the nearest valid one ------------------------------ */

/* Levenshtein distance between a and b. */
static size_t edit_distance(const char *a, const char *b)
{
  size_t n = strlen(b);
  g_autofree size_t *row = g_new(size_t, n + 1);
  for (size_t j = 0; j <= n; j++)
    row[j] = j;
  for (const char *p = a; *p; p++) {
    size_t diag = row[0];
    row[0]++;
    for (size_t j = 1; j <= n; j++) {
      size_t up = row[j];
      row[j] = MIN(MIN(row[j] + 1, row[j - 1] + 1), diag + (*p != b[j - 1]));
      diag = up;
    }
  }
  return row[n];
}

/* Adds every dotted path of o's members, objects and leaves alike, to
 * out (the prose under "sources" and "description" is no key to set). */
static void tree_paths(json_object *o, const char *prefix, GPtrArray *out)
{
  json_object_object_foreach(o, key, val) {
    if (!strcmp(key, "sources") || !strcmp(key, "description"))
      continue;
    char *path = *prefix ? g_strconcat(prefix, ".", key, NULL) : g_strdup(key);
    g_ptr_array_add(out, path);
    if (json_object_is_type(val, json_type_object))
      tree_paths(val, path, out);
  }
}

static gboolean has_path(GPtrArray *paths, const char *key)
{
  for (guint i = 0; i < paths->len; i++)
    if (!strcmp(g_ptr_array_index(paths, i), key))
      return TRUE;
  return FALSE;
}

/* The valid key nearest to `key`: key under the topology. or model.
 * prefix when it is there, else the path of least edit distance (to the
 * path or to it without that prefix), if close enough.  NULL if none. */
static const char *nearest_key(GPtrArray *paths, const char *key)
{
  static const char *const prefixes[] = {"topology.", "model."};
  for (size_t i = 0; i < G_N_ELEMENTS(prefixes); i++) {
    g_autofree char *full = g_strconcat(prefixes[i], key, NULL);
    for (guint j = 0; j < paths->len; j++)
      if (!strcmp(g_ptr_array_index(paths, j), full))
        return g_ptr_array_index(paths, j);
  }
  const char *best = NULL;
  size_t best_d = MAX((size_t)2, strlen(key) / 4) + 1;
  for (guint j = 0; j < paths->len; j++) {
    const char *p = g_ptr_array_index(paths, j), *bare = p;
    for (size_t i = 0; i < G_N_ELEMENTS(prefixes); i++)
      if (g_str_has_prefix(p, prefixes[i]))
        bare = p + strlen(prefixes[i]);
    size_t d = MIN(edit_distance(key, p), edit_distance(key, bare));
    if (d < best_d) {
      best_d = d;
      best = p;
    }
  }
  return best;
}

void ps_experiment_suggest_key(const char *name, const char *const *sets, GError *error)
{
  const char *k = error ? strstr(error->message, "unknown key '") : NULL;
  if (!k || !sets)
    return;
  k += strlen("unknown key '");
  g_autofree char *unknown = g_strndup(k, strcspn(k, "'"));
  PsExperiment *plain = ps_experiment_load(name, NULL, NULL);
  if (!plain)
    return;
  GPtrArray *paths = g_ptr_array_new_with_free_func(g_free);
  tree_paths(plain->resolved, "", paths);
  for (const char *const *s = sets; *s; s++) {
    g_autofree char *key = g_strndup(*s, strcspn(*s, "="));
    g_auto(GStrv) parts = g_strsplit(key, ".", -1);
    if (has_path(paths, key) || !g_strv_contains((const char *const *)parts, unknown))
      continue;
    const char *near = nearest_key(paths, key);
    if (near) {
      char *msg = g_strdup_printf("%s; did you mean --set %s%s?", error->message, near,
                                  *s + strlen(key));
      g_free(error->message);
      error->message = msg;
    }
    break;
  }
  g_ptr_array_unref(paths);
  ps_experiment_free(plain);
}

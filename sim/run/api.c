/* api.c: the strings-in, strings-out API (see api.h) over the run layer:
 * an experiment loaded as the command line loads it (with the suggestion
 * for an unknown key), run with no trace and no log, and its summary in
 * the JSON the command line prints (ps_summary_to_json, the one writer of
 * that object).
 *
 * Invariant: every override list is copied into a NULL-terminated array
 * that lives for the call only; nothing outlives a call but its result. */
#include "run/api.h"

#include "model/layers.h"
#include "run/experiment.h"
#include "run/run.h"

#include <string.h>

const char *ps_api_version(void)
{
  return PS_VERSION;
}

/* sets[0..n-1] as a NULL-terminated array, each entry with `strip` removed
 * from its front where it starts so.  (transfer container) */
static const char **override_array(const char *const *sets, int n, const char *strip)
{
  const char **ov = g_new0(const char *, MAX(n, 0) + 1);
  for (int i = 0; i < n; i++)
    ov[i] = sets[i] + (strip && g_str_has_prefix(sets[i], strip) ? strlen(strip) : 0);
  return ov;
}

/* Bad arguments from the caller's side are bad input, as at the command
 * line: FALSE with *error set. */
static gboolean check_args(const char *name, const char *const *sets, int n, GError **error)
{
  if (!name || !*name || n < 0 || (n > 0 && !sets)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "a name and a list of KEY=VALUE overrides are needed");
    return FALSE;
  }
  for (int i = 0; i < n; i++)
    if (!sets[i]) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "override %d is missing", i);
      return FALSE;
    }
  return ps_data_dirs_check(error);
}

static PsExperiment *load_experiment(const char *name, const char *const *sets, int n,
                                     GError **error)
{
  g_autofree const char **ov = override_array(sets, n, NULL);
  GError *load_error = NULL;
  PsExperiment *exp = ps_experiment_load(name, ov, &load_error);
  if (!exp) {
    ps_experiment_suggest_key(name, ov, load_error);
    g_propagate_error(error, load_error);
  }
  return exp;
}

char *ps_api_run_json(const char *experiment, const char *const *sets, int n, GError **error)
{
  if (!check_args(experiment, sets, n, error))
    return NULL;
  PsExperiment *exp = load_experiment(experiment, sets, n, error);
  if (!exp)
    return NULL;
  PsRunOptions opt = {0};
  PsSummary sum;
  char *text = NULL;
  if (ps_run(exp, &opt, &sum, error)) {
    text = ps_summary_to_json(exp, &sum);
    ps_summary_clear(&sum);
  }
  ps_experiment_free(exp);
  return text;
}

static char *describe_model(const char *name, GError **error)
{
  g_autofree char *path = ps_config_find("models", name, error);
  PsModel *m = path ? ps_model_load_file(path, error) : NULL;
  if (!m)
    return NULL;
  GString *s = g_string_new(NULL);
  ps_model_describe(m, s);
  ps_model_free(m);
  return g_string_free(s, FALSE);
}

char *ps_api_describe(const char *kind, const char *name, const char *const *sets, int n,
                      GError **error)
{
  if (!check_args(name, sets, n, error))
    return NULL;
  json_object *tree = NULL;
  if (kind && strcmp(kind, "experiment") == 0) {
    PsExperiment *exp = load_experiment(name, sets, n, error);
    if (!exp)
      return NULL;
    tree = json_object_get(exp->resolved);
    ps_experiment_free(exp);
  } else if (kind && strcmp(kind, "topology") == 0) {
    g_autofree const char **ov = override_array(sets, n, "topology.");
    PsTopology *t = ps_topology_load(name, ov, error);
    if (!t)
      return NULL;
    tree = ps_topology_to_json(t);
    ps_topology_free(t);
  } else if (kind && strcmp(kind, "model") == 0 && n == 0) {
    return describe_model(name, error);
  } else {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "describe: %s%s%s (experiment, topology or model; a model takes no --set)",
                kind ? "unknown kind '" : "no kind", kind ? kind : "", kind ? "'" : "");
    return NULL;
  }
  char *text = g_strdup(json_object_to_json_string_ext(tree, JSON_C_TO_STRING_PLAIN));
  json_object_put(tree);
  return text;
}

int ps_api_error_status(const GError *error)
{
  g_return_val_if_fail(error != NULL, 1);
  return error->domain == PS_INPUT_ERROR ? 2 : 1;
}

int ps_api_error_code(const GError *error)
{
  g_return_val_if_fail(error != NULL, -1);
  return error->domain == PS_INPUT_ERROR ? error->code : -1;
}

const char *ps_api_error_message(const GError *error)
{
  g_return_val_if_fail(error != NULL, NULL);
  return error->message;
}

void ps_api_error_free(GError *error)
{
  if (error)
    g_error_free(error);
}

void ps_api_free(char *text)
{
  g_free(text);
}

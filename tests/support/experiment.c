/* experiment.c: loading and running experiments in tests (see
 * experiment.h). */
#include "experiment.h"

#include "common/json.h"
#include "program/program.h"
#include "strategy/strategy.h"

#include <string.h>

PsTopology *topology_load(const char *name_or_path, const char *const *ov)
{
  GError *error = NULL;
  PsTopology *t = ps_topology_load(name_or_path, ov, &error);
  g_assert_no_error(error);
  g_assert_nonnull(t);
  return t;
}

PsExperiment *experiment_load(const char *path, const char *const *ov)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(path, ov, &error);
  g_assert_no_error(error);
  g_assert_nonnull(e);
  return e;
}

PsPlan *experiment_compile(const char *path, const char *const *ov, PsExperiment **out)
{
  GError *error = NULL;
  PsExperiment *e = experiment_load(path, ov);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_assert_true(ps_plan_validate(p, &error));
  *out = e;
  return p;
}

PsSummary experiment_run(const PsExperiment *e)
{
  PsSummary s;
  GError *error = NULL;
  PsRunOptions opt = {.keep_params = TRUE};
  gboolean ok = ps_run(e, &opt, &s, &error);
  g_assert_no_error(error);
  g_assert_true(ok);
  return s;
}

PsModel *model_parse_quoted(const char *text, GError **error)
{
  g_autofree char *t = g_strdelimit(g_strdup(text), "'", '"');
  GError *perr = NULL;
  json_object *o = ps_json_parse(t, "t.json", &perr);
  g_assert_no_error(perr);
  PsModel *m = ps_model_from_json(o, "t.json", "", error);
  json_object_put(o);
  return m;
}

void model_layer_refused(const char *layer, const char *want)
{
  g_autofree char *text = g_strdup_printf(
      "{'name': 'm', 'input': {'shape': [8], 'classes': 16, 'tokens': true},"
      " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': 8}, %s,"
      " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': "
      "'loss'}]}",
      layer);
  GError *error = NULL;
  g_assert_null(model_parse_quoted(text, &error));
  g_assert_nonnull(error);
  g_assert_true(error->domain == PS_INPUT_ERROR);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, want));
  g_error_free(error);
}

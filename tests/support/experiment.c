/* experiment.c: loading and running experiments in tests (see
 * experiment.h). */
#include "experiment.h"

#include "common/json.h"
#include "program/program.h"
#include "strategy/strategy.h"

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

/* test_strategy_registry.c: a strategy written here, in the test file,
 * compiles and runs through a registry without touching any other file.
 *
 * - "isolated": every device alone, no communication: each device runs the
 *   whole model on global_batch / devices examples and updates its own
 *   weights.  Loaded with "strategy": {"kind": "isolated"} through a
 *   registry of the built-ins plus it, run by ps_run: the step time is the
 *   sum of its ops' costs (closed form from the plan), no collective runs,
 *   and describe's tree holds its resolved keys;
 * - its keys and checks are its own: an unknown key, a batch the devices do
 *   not divide, and a kind no registry holds are errors naming the key;
 * - the built-in registry does not know it (no global registration);
 * - activations through a collective: a plan that all-gathers a layer's
 *   output (PS_BUFFER_ACTIVATIONS) runs with numerics on; with every device
 *   on the same examples the gather changes nothing, with different ones
 *   it does. */
#include "common/json.h"
#include "hw/cost.h"
#include "io/config.h"
#include "run/experiment.h"
#include "run/run.h"
#include "strategy/strategy-private.h"
#include "support/registry.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static char *tmpdir;

/* ---- the strategy ------------------------------------------------------ */

typedef struct {
  int devices;       /* every device of the slice */
  json_object *keys; /* the object as given, for to_json */
} IsolatedConfig;

static gboolean isolated_parse(json_object *obj, const PsTopology *topo, const char *file,
                               void **config, GError **error)
{
  static const char *const keys[] = {"kind", NULL};
  if (obj && !ps_json_check_keys(obj, file, "strategy", keys, error))
    return FALSE;
  IsolatedConfig *c = g_new0(IsolatedConfig, 1);
  c->devices = ps_topology_devices(topo);
  *config = c;
  return TRUE;
}

static gboolean isolated_check(const PsExperiment *exp, const void *config, GError **error)
{
  const IsolatedConfig *c = config;
  if (exp->global_batch % c->devices != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, exp->file, "global_batch",
                     "%" G_GINT64_FORMAT " examples do not split over %d devices",
                     exp->global_batch, c->devices);
    return FALSE;
  }
  return TRUE;
}

/* One program for every device: infeed, forward, backward, its own update,
 * outfeed; the mesh's data axis places device d on examples [d b, d b + b). */
static PsPlan *isolated_compile(const PsExperiment *exp, const void *config, GError **error)
{
  const IsolatedConfig *c = config;
  const PsModel *m = exp->model;
  const int N = c->devices;
  const int64_t b = exp->global_batch / N;
  PsPlan *plan = ps_plan_new(N);
  plan->loss_scale = 1.0f;
  ps_lower_data_axis(plan, m, N);
  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  GArray *groups = ps_lower_layer_groups(exp, 0, m->n_layers);
  int ng = (int)groups->len - 1;
  PsOp in = ps_lower_infeed(exp, b);
  g_array_append_val(ops, in);
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < ng; k++) {
      int g = pass == 0 ? k : ng - 1 - k;
      PsOp op = {.kind = pass == 0 ? PS_OP_FWD : PS_OP_BWD, .batch = b,
                 .first = g_array_index(groups, int, g),
                 .last = g_array_index(groups, int, g + 1) - 1};
      ps_lower_compute_op(exp, &op);
      g_array_append_val(ops, op);
    }
  PsOp up = {.coll = -1, .param_off = 0, .param_len = m->params};
  ps_lower_update_op(exp, &up, m->params, 0);
  g_array_append_val(ops, up);
  PsOp out = ps_lower_outfeed(exp, b, 1.0 / N);
  g_array_append_val(ops, out);
  ps_plan_add_program(plan, (PsOp *)(void *)ops->data, (int)ops->len);
  g_array_free(ops, TRUE);
  g_array_free(groups, TRUE);
  PsMemoryNeed need = {.path = "global_batch", .what = "", .batch = b, .params = m->params,
                       .slot_params = m->params, .advice = "lower global_batch"};
  if (!ps_lower_memory(exp, &plan->programs[0], &need, error)) {
    ps_plan_free(plan);
    return NULL;
  }
  return plan;
}

static json_object *isolated_to_json(const void *config)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "kind", json_object_new_string("isolated"));
  return o;
}

static int isolated_devices(const void *config)
{
  return ((const IsolatedConfig *)config)->devices;
}

static void isolated_free(void *config)
{
  g_free(config);
}

static const PsStrategy isolated = {
    .name = "isolated",
    .summary = "every device alone: the whole model on its share of the batch, no communication",
    .parse = isolated_parse,
    .check = isolated_check,
    .compile = isolated_compile,
    .to_json = isolated_to_json,
    .devices = isolated_devices,
    .describe = NULL,
    .free = isolated_free};

/* ---- activations through a collective ------------------------------------ */

/* "gathered": two devices, each the whole model; after the forward pass
 * they all-gather the output of layer GATHER_LAYER (each contributes its
 * block of the rows), and the backward pass reads the gathered rows.  With
 * "same": true both take the same examples (data coordinate 0), so the
 * gather changes nothing; else device d takes the d-th half of the batch. */
#define GATHER_LAYER 2

typedef struct {
  gboolean gather, same;
} GatheredConfig;

static gboolean gathered_parse(json_object *obj, const PsTopology *topo, const char *file,
                               void **config, GError **error)
{
  static const char *const keys[] = {"kind", "gather", "same", NULL};
  GatheredConfig *c = g_new0(GatheredConfig, 1);
  c->gather = TRUE;
  if (obj && (!ps_json_check_keys(obj, file, "strategy", keys, error) ||
              !ps_json_get_bool(obj, file, "strategy", "gather", FALSE, &c->gather, error) ||
              !ps_json_get_bool(obj, file, "strategy", "same", FALSE, &c->same, error))) {
    g_free(c);
    return FALSE;
  }
  *config = c;
  return TRUE;
}

static gboolean gathered_check(const PsExperiment *exp, const void *config, GError **error)
{
  return TRUE;
}

static PsPlan *gathered_compile(const PsExperiment *exp, const void *config, GError **error)
{
  const GatheredConfig *c = config;
  const PsModel *m = exp->model;
  const int64_t b = c->same ? exp->global_batch : exp->global_batch / 2;
  const PsLayer *l = &m->layers[GATHER_LAYER];
  PsPlan *plan = ps_plan_new(2);
  plan->loss_scale = c->same ? 1.0f : 0.5f;
  ps_plan_set_axis(plan, PS_AXIS_DATA, c->same ? 1 : 2);
  for (int d = 0; d < 2; d++) {
    ps_plan_set_coord(plan, d, PS_AXIS_DATA, c->same ? 0 : d);
    ps_plan_add_params(plan, d, 0, m->params);
  }
  int members[2] = {0, 1};
  PsPlanColl coll = {.op = PS_COLL_ALL_GATHER, .algo = "auto", .n_members = 2,
                     .members = members, .count = b * ps_shape_elems(l->out_shape, l->out_rank),
                     .elem_bytes = 4, .buffer = PS_BUFFER_ACTIVATIONS, .offset = 0,
                     .layer = GATHER_LAYER};
  g_snprintf(coll.name, sizeof coll.name, "all-gather %s", l->name);
  int ci = c->gather ? ps_plan_add_coll(plan, &coll) : -1;
  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  PsOp in = ps_lower_infeed(exp, b);
  g_array_append_val(ops, in);
  PsOp f = {.kind = PS_OP_FWD, .batch = b, .first = 0, .last = m->n_layers - 1};
  ps_lower_compute_op(exp, &f);
  g_array_append_val(ops, f);
  if (c->gather) {
    PsOp st = {.kind = PS_OP_COLL_START, .coll = ci}, dn = {.kind = PS_OP_COLL_DONE, .coll = ci};
    g_array_append_val(ops, st);
    g_array_append_val(ops, dn);
  }
  PsOp bw = {.kind = PS_OP_BWD, .batch = b, .first = 0, .last = m->n_layers - 1};
  ps_lower_compute_op(exp, &bw);
  g_array_append_val(ops, bw);
  PsOp up = {.coll = -1, .param_off = 0, .param_len = m->params};
  ps_lower_update_op(exp, &up, m->params, 0);
  g_array_append_val(ops, up);
  PsOp out = ps_lower_outfeed(exp, b, 0.5);
  g_array_append_val(ops, out);
  ps_plan_add_program(plan, (PsOp *)(void *)ops->data, (int)ops->len);
  g_array_free(ops, TRUE);
  return plan;
}

static json_object *gathered_to_json(const void *config)
{
  const GatheredConfig *c = config;
  json_object *o = json_object_new_object();
  json_object_object_add(o, "kind", json_object_new_string("gathered"));
  json_object_object_add(o, "gather", json_object_new_boolean(c->gather));
  json_object_object_add(o, "same", json_object_new_boolean(c->same));
  return o;
}

static int gathered_devices(const void *config)
{
  return 2;
}

static const PsStrategy gathered = {
    .name = "gathered",
    .summary = "two devices that all-gather a layer's output between forward and backward",
    .parse = gathered_parse,
    .check = gathered_check,
    .compile = gathered_compile,
    .to_json = gathered_to_json,
    .devices = gathered_devices,
    .describe = NULL,
    .free = isolated_free};

/* ---- helpers ----------------------------------------------------------- */

static const char *isolated_json =
    "{\"name\": \"alone\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 64, \"steps\": 12, \"steps_per_run\": 4,"
    " \"strategy\": {\"kind\": \"isolated\"},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 640,"
    "             \"host_cost_per_example_s\": 0, \"workers\": 4},"
    " \"numerics\": {\"enabled\": false}}";

static char *write_experiment(const char *name, const char *json)
{
  char *path = g_build_filename(tmpdir, name, NULL);
  g_assert_true(g_file_set_contents(path, json, -1, NULL));
  return path;
}

/* ---- tests ------------------------------------------------------------- */

static void test_isolated_runs(void)
{
  g_autofree char *path = write_experiment("alone.json", isolated_json);
  PsStrategyRegistry *reg = registry_with(&isolated);
  /* one device per host (a megacore chip each): no device waits at the
   * steps_per_run loop for another's infeed */
  const char *const ov[] = {"topology.host.loop_overhead_s=0", "topology.host.chips=1",
                            "topology.chip.megacore=true", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load_with(reg, path, ov, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(e->strategy.kind, ==, "isolated");
  g_assert_true(e->strategy.impl == &isolated);
  g_assert_cmpint(ps_experiment_devices_used(e), ==, 4);
  json_object *so = json_object_object_get(e->resolved, "strategy");
  g_assert_cmpstr(json_object_to_json_string_ext(so, JSON_C_TO_STRING_PLAIN), ==,
                  "{\"kind\":\"isolated\"}");

  PsPlan *plan = ps_run_compile(e, &error);
  g_assert_no_error(error);
  g_assert_cmpint(plan->n_devices, ==, 4);
  g_assert_cmpint(plan->n_colls, ==, 0);
  g_assert_cmpint(ps_plan_axis_size(plan, PS_AXIS_DATA), ==, 4);
  g_assert_false(ps_plan_has_axis(plan, PS_AXIS_STAGE));
  /* closed form: the ops back to back, each at the cost the plan gives it
   * (the infeed dequeue and the outfeed at the launch overhead) */
  ps_time_t step = 0;
  const PsProgram *p = ps_plan_program(plan, 0);
  int compute = 0;
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    g_assert_true(op->kind != PS_OP_COLL_START && op->kind != PS_OP_COLL_DONE);
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD || op->kind == PS_OP_UPDATE) {
      g_assert_cmpint(op->time, >, 0);
      compute++;
    }
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD)
      g_assert_cmpint(op->batch, ==, 64 / 4);
    step += op->time;
  }
  g_assert_cmpint(compute, >=, 3);

  g_autofree char *trace = g_build_filename(tmpdir, "alone-trace.json", NULL);
  PsSummary s;
  g_assert_true(ps_run(e, &(PsRunOptions){.trace_path = trace}, &s, &error));
  g_assert_no_error(error);
  g_test_message("step %.12g s, closed form %.12g s", s.step_time_s, ps_time_to_s(step));
  g_assert_cmpfloat(fabs(s.step_time_s - ps_time_to_s(step)), <, 1e-15);
  g_assert_cmpint(s.devices, ==, 4);
  g_assert_cmpint(s.buckets, ==, 0);
  g_assert_null(s.collective_algorithm);
  g_assert_cmpfloat(s.breakdown[PS_TIME_COLLECTIVE], ==, 0);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(trace, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"FWD\""));
  g_assert_null(strstr(text, "COLL_START"));
  g_assert_null(strstr(text, "all-reduce"));
  g_unlink(trace);
  ps_summary_clear(&s);
  ps_plan_free(plan);
  ps_experiment_free(e);
  registry_free(reg);
}

static void test_isolated_errors(void)
{
  g_autofree char *path = write_experiment("alone.json", isolated_json);
  PsStrategyRegistry *reg = registry_with(&isolated);
  static const struct {
    const char *set;
    const char *want;
  } cases[] = {
      {"strategy.replicas=2", "strategy: unknown key 'replicas'"},
      {"global_batch=63", "global_batch: 63 examples do not split over 8 devices"},
      {"strategy.kind=alone", "strategy.kind: must be one of: replicate, pipeline, shard, "
                              "isolated; got 'alone'"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *const ov[] = {cases[i].set, NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load_with(reg, path, ov, &error);
    g_assert_null(e);
    g_assert_nonnull(error);
    g_test_message("%s: %s", cases[i].set, error->message);
    g_assert_nonnull(strstr(error->message, cases[i].want));
    g_error_free(error);
  }
  registry_free(reg);
}

/* The built-in registry is const: it does not learn a test's strategy. */
static void test_builtin_does_not_know_it(void)
{
  g_assert_null(ps_strategy_find(NULL, "isolated"));
  g_assert_nonnull(ps_strategy_find(NULL, "replicate"));
  g_autofree char *path = write_experiment("alone.json", isolated_json);
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(path, NULL, &error);
  g_assert_null(e);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(error->message, "strategy.kind: must be one of: replicate, "
                                          "pipeline, shard; got 'isolated'"));
  g_error_free(error);
}

static PsSummary run_gathered(PsStrategyRegistry *reg, const char *path, const char *gather,
                               const char *same)
{
  const char *const ov[] = {"strategy.kind=gathered", gather, same, NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load_with(reg, path, ov, &error);
  g_assert_no_error(error);
  PsSummary s;
  gboolean ok = ps_run(e, &(PsRunOptions){0}, &s, &error);
  g_assert_no_error(error);
  g_assert_true(ok);
  g_assert_true(s.has_numerics);
  ps_experiment_free(e);
  return s;
}

/* Activations move through a collective with numerics on: gathering rows
 * every device already holds changes no number; gathering another
 * device's rows changes the gradients, so the weights and the loss. */
static void test_activations_through_collective(void)
{
  g_autofree char *path = write_experiment(
      "gathered.json",
      "{\"name\": \"gathered\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
      " \"global_batch\": 32, \"steps\": 6, \"steps_per_run\": 2,"
      " \"strategy\": {\"kind\": \"gathered\"},"
      " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 320},"
      " \"numerics\": {\"enabled\": true, \"seed\": 3}}");
  PsStrategyRegistry *reg = registry_with(&gathered);
  PsSummary same_on = run_gathered(reg, path, "strategy.gather=true", "strategy.same=true");
  PsSummary same_off = run_gathered(reg, path, "strategy.gather=false", "strategy.same=true");
  g_assert_cmpfloat(same_on.loss_last, ==, same_off.loss_last);
  g_assert_cmpfloat(same_on.breakdown[PS_TIME_COLLECTIVE], >, 0);
  PsSummary split_on = run_gathered(reg, path, "strategy.gather=true", "strategy.same=false");
  PsSummary split_off = run_gathered(reg, path, "strategy.gather=false", "strategy.same=false");
  g_test_message("loss after the steps: same examples %.9g / %.9g, split %.9g / %.9g",
                 same_on.loss_last, same_off.loss_last, split_on.loss_last,
                 split_off.loss_last);
  g_assert_cmpfloat(split_on.loss_first, ==, split_off.loss_first);
  g_assert_cmpfloat(split_on.loss_last, !=, split_off.loss_last);
  ps_summary_clear(&same_on);
  ps_summary_clear(&same_off);
  ps_summary_clear(&split_on);
  ps_summary_clear(&split_off);
  registry_free(reg);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  tmpdir = g_dir_make_tmp("podsim-registry-XXXXXX", NULL);
  g_assert_nonnull(tmpdir);
  g_test_add_func("/strategy-registry/isolated/runs", test_isolated_runs);
  g_test_add_func("/strategy-registry/isolated/errors", test_isolated_errors);
  g_test_add_func("/strategy-registry/builtin-is-const", test_builtin_does_not_know_it);
  g_test_add_func("/strategy-registry/activations-through-collective",
                  test_activations_through_collective);
  int rc = g_test_run();
  g_rmdir(tmpdir);
  g_free(tmpdir);
  return rc;
}

/* test_reports.c: what a run reports beyond its step time: model FLOPs,
 * MFU and HFU, tokens/s, and collective time per mesh axis, each against a
 * closed form written out here.
 *
 * - model FLOPs: a decoder written here (L pre-LN blocks of D wide, H
 *   heads, an F-wide MLP, a V-way output layer, sequences of S) gives
 *   PaLM's S (6N + 12 L H Q T) per sequence (Chowdhery et al. 2022,
 *   appendix B; Q = D / H, T = S), N the weights of its matmuls (the
 *   embedding table is a lookup; PaLM's N holds its table because its
 *   output layer reuses it, here the output layer's own weights),
 *   causal or not (PaLM does not halve causal attention); bert-large, an
 *   encoder, gives the same form with its 2-way span head, and 6 x all
 *   its parameters would count its embedding tables too;
 * - replicate: MFU is S (6N + 12LHQT) x global batch / (step x chips x
 *   peak per chip) (8 v3 cores are 4 chips); without re-materialization
 *   HFU equals it; tokens/s is examples/s x S, and a model that does not
 *   take tokens has none (null in --json);
 * - a pipeline that re-materializes executes each forward twice: HFU is
 *   4/3 of MFU;
 * - per axis: a strategy written here ("meshed") runs 4 one-chip devices
 *   on a 2x2 slice as tensor 2 x data 2: a ring all-reduce of 2 chunks
 *   along the tensor axis (chips x-adjacent) after the forward, one of 4
 *   chunks along the data axis (y-adjacent) after the backward.  A
 *   2-member ring all-reduce of n chunks of c bytes over one hop takes
 *   Tc = 2 (a + n round(c/B)) (test_exec.c's closed form with N = 2).
 *   Each COLL_DONE right after its start waits Tc: exposed = busy = Tc per
 *   axis.  With the data collective started before the backward (T_b <
 *   Tc), its exposed time is Tc - T_b and its busy time still Tc; the
 *   axes' exposed times sum to the breakdown's collective; describe
 *   --program names each collective's axis;
 * - compare shows exposed and busy rows for the axes either side uses,
 *   MFU and HFU, and --json nests each axis's difference; a sweep's CSV
 *   has their columns. */
#include "common/json.h"
#include "io/config.h"
#include "model/layers.h"
#include "run/experiment.h"
#include "run/run.h"
#include "strategy/strategy-private.h"
#include "support/cli.h"
#include "support/experiment.h"
#include "support/registry.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static char *tmpdir;

static char *write_file(const char *name, const char *text)
{
  char *path = g_build_filename(tmpdir, name, NULL);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  return path;
}

static void assert_rel(double got, double want, double tol)
{
  g_test_message("got %.15g, want %.15g", got, want);
  g_assert_cmpfloat(fabs(got - want), <=, tol * fabs(want));
}

/* ---- model FLOPs -------------------------------------------------------- */

typedef struct {
  int64_t L, D, H, F, V, S;
} Shape;

/* A pre-LN decoder of the shape, without biases. */
static char *decoder_json(const Shape *s, gboolean causal)
{
  return g_strdup_printf(
      "{\"name\": \"decoder\", \"input\": {\"shape\": [%" G_GINT64_FORMAT "], \"classes\": %"
      G_GINT64_FORMAT ", \"tokens\": true}, \"layers\": ["
      "{\"type\": \"embedding\", \"name\": \"embed\", \"vocab\": %" G_GINT64_FORMAT
      ", \"dim\": %" G_GINT64_FORMAT ", \"positions\": true},"
      "{\"type\": \"repeat\", \"name\": \"block\", \"count\": %" G_GINT64_FORMAT ", \"body\": ["
      " {\"type\": \"residual\", \"name\": \"a\", \"body\": ["
      "  {\"type\": \"layernorm\", \"name\": \"ln1\"},"
      "  {\"type\": \"attention\", \"name\": \"attn\", \"heads\": %" G_GINT64_FORMAT
      ", \"causal\": %s, \"bias\": false}]},"
      " {\"type\": \"residual\", \"name\": \"m\", \"body\": ["
      "  {\"type\": \"layernorm\", \"name\": \"ln2\"},"
      "  {\"type\": \"dense\", \"name\": \"fc1\", \"units\": %" G_GINT64_FORMAT ", \"bias\": false},"
      "  {\"type\": \"gelu\", \"name\": \"gelu\"},"
      "  {\"type\": \"dense\", \"name\": \"fc2\", \"units\": %" G_GINT64_FORMAT ", \"bias\": false}"
      " ]}]},"
      "{\"type\": \"layernorm\", \"name\": \"ln_f\"},"
      "{\"type\": \"dense\", \"name\": \"head\", \"units\": %" G_GINT64_FORMAT ", \"bias\": false},"
      "{\"type\": \"softmax_xent\", \"name\": \"loss\"}]}",
      s->S, s->V, s->V, s->D, s->L, s->H, causal ? "true" : "false", s->F, s->D, s->V);
}

/* PaLM's closed form per sequence: S (6N + 12 L H Q T). */
static double palm_flops(const Shape *s, int64_t N)
{
  double Q = (double)(s->D / s->H), T = (double)s->S;
  return (double)s->S * (6.0 * (double)N + 12.0 * (double)(s->L * s->H) * Q * T);
}

/* MaxText's with its causal attention halved: S (6N + 6 L H Q T). */
static double causal_halved_flops(const Shape *s, int64_t N)
{
  double Q = (double)(s->D / s->H), T = (double)s->S;
  return (double)s->S * (6.0 * (double)N + 6.0 * (double)(s->L * s->H) * Q * T);
}

/* The weights of the decoder's matmuls: per block the four D x D
 * projections and the MLP's two, then the output layer. */
static int64_t decoder_matmul_weights(const Shape *s)
{
  return s->L * (4 * s->D * s->D + 2 * s->D * s->F) + s->D * s->V;
}

static PsModel *load_model(const char *path)
{
  GError *error = NULL;
  PsModel *m = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  return m;
}

static void test_model_flops_palm(void)
{
  static const Shape shapes[] = {{3, 128, 4, 512, 512, 64}, {2, 96, 6, 384, 1000, 40}};
  for (guint i = 0; i < G_N_ELEMENTS(shapes); i++) {
    const Shape *s = &shapes[i];
    double counted[2];
    for (int causal = 0; causal < 2; causal++) {
      g_autofree char *json = decoder_json(s, causal);
      g_autofree char *path = write_file("decoder.json", json);
      PsModel *m = load_model(path);
      int64_t N = decoder_matmul_weights(s);
      /* N is every parameter but the tables (tokens, positions) and the
       * layer norms' gain and bias */
      g_assert_cmpint(N, ==, m->params - s->V * s->D - s->S * s->D - (2 * s->L + 1) * 2 * s->D);
      counted[causal] = ps_model_flops_per_example(m);
      assert_rel(counted[causal], palm_flops(s, N), 1e-15);
      /* MaxText's count halves the causal one's attention, not the other's */
      assert_rel(ps_model_flops_causal_halved_per_example(m),
                 causal ? causal_halved_flops(s, N) : palm_flops(s, N), 1e-15);
      ps_model_free(m);
    }
    g_assert_cmpfloat(counted[0], ==, counted[1]);
  }
}

/* An encoder: the same form; its embedding tables (31.8 M of its 334 M
 * parameters) are no matmul, so 6 x all parameters would overcount. */
static void test_model_flops_encoder(void)
{
  GError *error = NULL;
  g_autofree char *path = ps_config_find("models", "bert-large", &error);
  g_assert_no_error(error);
  PsModel *m = load_model(path);
  Shape s = {24, 1024, 16, 4096, 30522, 512};
  int64_t N = 24 * (4 * s.D * s.D + 2 * s.D * s.F) + s.D * 2; /* the 2-way span head */
  double got = ps_model_flops_per_example(m);
  assert_rel(got, palm_flops(&s, N), 1e-15);
  double all = palm_flops(&s, m->params);
  g_test_message("6 x all parameters: %.4g, %.1f%% more", all, 100.0 * (all / got - 1));
  g_assert_cmpfloat(all, >, 1.05 * got);
  ps_model_free(m);
}

/* ---- MFU, HFU, tokens --------------------------------------------------- */

static const Shape small = {3, 128, 4, 512, 512, 64};

static PsExperiment *load_experiment(const char *strategy, const char *const *ov)
{
  g_autofree char *model_json = decoder_json(&small, TRUE);
  g_autofree char *model = write_file("small-decoder.json", model_json);
  g_autofree char *json = g_strdup_printf(
      "{\"name\": \"reports\", \"topology\": \"tpu-v3-8\", \"model\": \"%s\","
      " \"global_batch\": 16, \"steps\": 4, \"steps_per_run\": 2, \"strategy\": %s,"
      " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 64,"
      "             \"host_cost_per_example_s\": 0, \"workers\": 4},"
      " \"numerics\": {\"enabled\": false}}", model, strategy);
  g_autofree char *path = write_file("reports.json", json);
  return experiment_load(path, ov);
}

static void test_mfu_replicate(void)
{
  PsExperiment *e = load_experiment("{\"kind\": \"replicate\"}", NULL);
  PsSummary s = experiment_run(e);
  g_assert_cmpint(s.devices, ==, 8);
  g_assert_cmpint(s.chips, ==, 4);
  double per_seq = palm_flops(&small, decoder_matmul_weights(&small));
  double want = per_seq * 16 / (s.step_time_s * 4 * 123e12);
  assert_rel(s.model_flops_per_step, per_seq * 16, 1e-15);
  assert_rel(s.mfu, want, 1e-12);
  assert_rel(s.hfu, s.mfu, 1e-12);
  /* the decoder is causal: MaxText's count, its MFU and its TFLOP/s over
   * the 8 devices */
  double halved = causal_halved_flops(&small, decoder_matmul_weights(&small)) * 16;
  assert_rel(s.model_flops_causal_per_step, halved, 1e-15);
  assert_rel(s.mfu_causal, halved / (s.step_time_s * 4 * 123e12), 1e-12);
  assert_rel(s.tflops_per_device, halved / s.step_time_s / 8 / 1e12, 1e-12);
  g_assert_cmpint(s.sequence, ==, small.S);
  g_assert_cmpfloat(s.tokens_per_s, ==, s.examples_per_s * (double)small.S);
  /* every collective of a replicate plan is along data */
  g_assert_cmpint(s.axis_colls[PS_AXIS_DATA], ==, s.buckets);
  g_assert_cmpfloat(s.axis_colls_per_device[PS_AXIS_DATA], ==, (double)s.buckets);
  g_assert_cmpfloat(s.axis_busy_s[PS_AXIS_DATA], >, 0);
  g_assert_cmpfloat(s.axis_busy_s[PS_AXIS_DATA], <, s.step_time_s);
  for (int a = 0; a < PS_N_AXES; a++)
    if (a != PS_AXIS_DATA)
      g_assert_cmpfloat(s.axis_busy_s[a] + s.axis_exposed_s[a], ==, 0);

  g_autofree char *text = ps_summary_to_json(e, &s);
  json_object *o = json_tokener_parse(text);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(o, "mfu")), ==, s.mfu);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(o, "mfu_causal")), ==,
                    s.mfu_causal);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(o, "tflops_per_device")), ==,
                    s.tflops_per_device);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(o, "tokens_per_s")), ==,
                    s.tokens_per_s);
  json_object *axes = json_object_object_get(o, "collective_axes"), *data;
  g_assert_true(json_object_object_get_ex(axes, "data", &data));
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(data, "exposed_s")), ==,
                    s.axis_exposed_s[PS_AXIS_DATA]);
  for (int a = 0; a < PS_N_AXES; a++)
    g_assert_true(json_object_object_get_ex(axes, ps_axis_name(a), NULL));
  json_object_put(o);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

/* A model without tokens has no tokens/s: null in the JSON, no line. */
static void test_tokens_none(void)
{
  PsExperiment *e = load_experiment("{\"kind\": \"replicate\"}", (const char *const[]){
                                        "model=mlp", NULL});
  PsSummary s = experiment_run(e);
  g_assert_cmpint(s.sequence, ==, 0);
  g_autofree char *text = ps_summary_to_json(e, &s);
  json_object *o = json_tokener_parse(text), *v = (json_object *)1;
  g_assert_true(json_object_object_get_ex(o, "tokens_per_s", &v));
  g_assert_null(v);
  json_object_put(o);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ps_summary_print(e, &s, f);
  fclose(f);
  g_assert_null(strstr(buf, "tokens/s"));
  g_assert_nonnull(strstr(buf, "MFU"));
  g_assert_null(strstr(buf, "causal / 2")); /* no causal attention: the same count */
  g_assert_cmpfloat(s.model_flops_causal_per_step, ==, s.model_flops_per_step);
  g_assert_nonnull(strstr(buf, "(data axis"));
  free(buf);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void test_hfu_rematerialize(void)
{
  PsExperiment *e = load_experiment("{\"kind\": \"pipeline\", \"stages\": 2, \"micro_batches\":"
                                    " 4, \"rematerialize\": true, \"replicas\": 1}", NULL);
  PsSummary s = experiment_run(e);
  g_assert_cmpint(s.devices, ==, 2);
  g_assert_cmpint(s.chips, ==, 1);
  double per_seq = palm_flops(&small, decoder_matmul_weights(&small));
  assert_rel(s.mfu, per_seq * 16 / (s.step_time_s * 123e12), 1e-12);
  assert_rel(s.hfu, 4.0 / 3.0 * s.mfu, 1e-12);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

/* ---- collective time per axis ------------------------------------------ */

/* "meshed": 4 devices, tensor coordinate x = d % 2, data coordinate
 * y = d / 2; with "overlap" the data all-reduce starts before the
 * backward. */
#define T_FWD_PS 20000000
#define T_BWD_PS 10000000
#define T_UPD_PS 5000000
#define CHUNK 262144
#define TENSOR_CHUNKS 2
#define DATA_CHUNKS 4

typedef struct {
  gboolean overlap;
} MeshedConfig;

static gboolean meshed_parse(json_object *obj, const PsTopology *topo, const char *file,
                             void **config, GError **error)
{
  static const char *const keys[] = {"kind", "overlap", NULL};
  MeshedConfig *c = g_new0(MeshedConfig, 1);
  if (obj && (!ps_json_check_keys(obj, file, "strategy", keys, error) ||
              !ps_json_get_bool(obj, file, "strategy", "overlap", FALSE, &c->overlap, error))) {
    g_free(c);
    return FALSE;
  }
  *config = c;
  return TRUE;
}

static gboolean meshed_check(const PsExperiment *exp, const void *config, GError **error)
{
  return TRUE;
}

static int add_pair(PsPlan *plan, int a, int b, PsAxis axis, int chunks)
{
  int members[2] = {a, b};
  PsPlanColl c = {.op = PS_COLL_ALL_REDUCE, .algo = "ring", .n_members = 2, .members = members,
                  .count = 2 * chunks * CHUNK, .elem_bytes = 1, .buffer = PS_BUFFER_GRADS,
                  .axis = axis};
  g_snprintf(c.name, sizeof c.name, "all-reduce %s %d+%d", ps_axis_name(axis), a, b);
  return ps_plan_add_coll(plan, &c);
}

static PsOp timed(PsOpKind kind, ps_time_t t)
{
  return (PsOp){.kind = kind, .time = t, .coll = -1, .batch = 2};
}

static PsPlan *meshed_compile(const PsExperiment *exp, const void *config, GError **error)
{
  const MeshedConfig *c = config;
  PsPlan *plan = ps_plan_new(4);
  plan->loss_scale = 0.5f;
  ps_plan_set_axis(plan, PS_AXIS_DATA, 2);
  ps_plan_set_axis(plan, PS_AXIS_TENSOR, 2);
  for (int d = 0; d < 4; d++) {
    ps_plan_set_coord(plan, d, PS_AXIS_TENSOR, d % 2);
    ps_plan_set_coord(plan, d, PS_AXIS_DATA, d / 2);
    ps_plan_add_params(plan, d, 0, exp->model->params);
  }
  int tensor[2] = {add_pair(plan, 0, 1, PS_AXIS_TENSOR, TENSOR_CHUNKS),
                   add_pair(plan, 2, 3, PS_AXIS_TENSOR, TENSOR_CHUNKS)};
  int data[2] = {add_pair(plan, 0, 2, PS_AXIS_DATA, DATA_CHUNKS),
                 add_pair(plan, 1, 3, PS_AXIS_DATA, DATA_CHUNKS)};
  for (int d = 0; d < 4; d++) {
    int t = tensor[d / 2], g = data[d % 2];
    PsOp ops[] = {ps_lower_infeed(exp, 2),
                  timed(PS_OP_FWD, T_FWD_PS),
                  {.kind = PS_OP_COLL_START, .coll = t},
                  {.kind = PS_OP_COLL_DONE, .coll = t},
                  {.kind = PS_OP_COLL_START, .coll = g},
                  timed(PS_OP_BWD, T_BWD_PS),
                  {.kind = PS_OP_COLL_DONE, .coll = g},
                  timed(PS_OP_UPDATE, T_UPD_PS),
                  ps_lower_outfeed(exp, 2, 0.25)};
    if (!c->overlap) { /* the backward before the data collective starts */
      ops[4] = ops[5];
      ops[5] = (PsOp){.kind = PS_OP_COLL_START, .coll = g};
    }
    plan->program_of[d] = ps_plan_add_program(plan, ops, G_N_ELEMENTS(ops));
  }
  return plan;
}

static json_object *meshed_to_json(const void *config)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "kind", json_object_new_string("meshed"));
  json_object_object_add(o, "overlap",
                         json_object_new_boolean(((const MeshedConfig *)config)->overlap));
  return o;
}

static int meshed_devices(const void *config)
{
  return 4;
}

static const PsStrategy meshed = {
    .name = "meshed",
    .summary = "tensor 2 x data 2 on four chips, one all-reduce along each axis",
    .parse = meshed_parse,
    .check = meshed_check,
    .compile = meshed_compile,
    .to_json = meshed_to_json,
    .devices = meshed_devices,
    .free = g_free};

static PsSummary run_meshed(gboolean overlap, double *tc_tensor, double *tc_data)
{
  PsStrategyRegistry *reg = registry_with(&meshed);
  g_autofree char *path = write_file(
      "meshed.json",
      "{\"name\": \"meshed\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
      " \"global_batch\": 8, \"steps\": 6, \"steps_per_run\": 2,"
      " \"strategy\": {\"kind\": \"meshed\"},"
      " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 64,"
      "             \"host_cost_per_example_s\": 0, \"workers\": 4},"
      " \"numerics\": {\"enabled\": false}}");
  g_autofree char *chunk = g_strdup_printf("collective.chunk_bytes=%d", CHUNK);
  /* asynchronous collectives, which the overlap can hide */
  const char *const ov[] = {"topology.chip.megacore=true", chunk,
                            overlap ? "strategy.overlap=true" : "strategy.overlap=false",
                            "collective.on_core=[]", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load_with(reg, path, ov, &error);
  g_assert_no_error(error);
  const PsTopology *t = e->topology;
  g_assert_cmpint(ps_topology_devices(t), ==, 4);
  g_assert_cmpint(t->ici_links_per_neighbor, ==, 1);
  ps_time_t a = ps_time_from_s(t->ici_latency_s);
  ps_time_t s = (ps_time_t)((double)CHUNK * ((double)PS_PS_PER_S / t->ici_bandwidth_Bps) + 0.5);
  *tc_tensor = ps_time_to_s(2 * (a + TENSOR_CHUNKS * s));
  *tc_data = ps_time_to_s(2 * (a + DATA_CHUNKS * s));
  PsPlan *plan = ps_run_compile(e, &error);
  g_assert_no_error(error);
  GString *text = g_string_new(NULL);
  ps_plan_describe_device(plan, 3, text);
  g_assert_nonnull(strstr(text->str, "member 1 of 2 along tensor"));
  g_assert_nonnull(strstr(text->str, "member 1 of 2 along data"));
  g_string_free(text, TRUE);
  ps_plan_free(plan);
  PsSummary sum = experiment_run(e);
  ps_experiment_free(e);
  registry_free(reg);
  return sum;
}

static void test_axes_exposed(void)
{
  double tc_t, tc_d;
  PsSummary s = run_meshed(FALSE, &tc_t, &tc_d);
  g_test_message("closed form: tensor %.6f us, data %.6f us; exposed %.6f, %.6f us",
                 tc_t * 1e6, tc_d * 1e6, s.axis_exposed_s[PS_AXIS_TENSOR] * 1e6,
                 s.axis_exposed_s[PS_AXIS_DATA] * 1e6);
  g_assert_cmpint(s.axis_colls[PS_AXIS_TENSOR], ==, 2);
  g_assert_cmpint(s.axis_colls[PS_AXIS_DATA], ==, 2);
  /* two groups of two on four devices: one of each a device */
  g_assert_cmpfloat(s.axis_colls_per_device[PS_AXIS_TENSOR], ==, 1.0);
  g_assert_cmpfloat(s.axis_colls_per_device[PS_AXIS_DATA], ==, 1.0);
  assert_rel(s.axis_exposed_s[PS_AXIS_TENSOR], tc_t, 1e-12);
  assert_rel(s.axis_busy_s[PS_AXIS_TENSOR], tc_t, 1e-12);
  assert_rel(s.axis_exposed_s[PS_AXIS_DATA], tc_d, 1e-12);
  assert_rel(s.axis_busy_s[PS_AXIS_DATA], tc_d, 1e-12);
  assert_rel(s.breakdown[PS_TIME_COLLECTIVE], tc_t + tc_d, 1e-12);
  ps_summary_clear(&s);

  s = run_meshed(TRUE, &tc_t, &tc_d);
  double t_bwd = ps_time_to_s(T_BWD_PS);
  g_assert_cmpfloat(t_bwd, <, tc_d);
  assert_rel(s.axis_exposed_s[PS_AXIS_TENSOR], tc_t, 1e-12);
  assert_rel(s.axis_exposed_s[PS_AXIS_DATA], tc_d - t_bwd, 1e-12);
  assert_rel(s.axis_busy_s[PS_AXIS_DATA], tc_d, 1e-12);
  assert_rel(s.breakdown[PS_TIME_COLLECTIVE], tc_t + tc_d - t_bwd, 1e-12);
  for (int x = 0; x < PS_N_AXES; x++)
    if (x != PS_AXIS_DATA && x != PS_AXIS_TENSOR)
      g_assert_cmpfloat(s.axis_exposed_s[x] + s.axis_busy_s[x], ==, 0);
  ps_summary_clear(&s);
}

/* ---- the command line ---------------------------------------------------- */

/* compare: the per-axis rows of the axes either side uses, MFU and HFU;
 * --json nests the axes' differences as the summary nests them. */
static void test_compare_rows(void)
{
  char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "compare", "resnet50-v3-8", "--set", "steps=2",
                             "--set-b", "global_batch=512", NULL), ==, 0);
  const char *rows[] = {"data exposed (us)", "data busy (us)", "MFU (%)", "HFU (%)"};
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++)
    g_assert_nonnull(strstr(out, rows[i]));
  g_assert_null(strstr(out, "tensor exposed"));
  g_assert_null(strstr(out, "tokens/s")); /* images */
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, "compare", "resnet50-v3-8", "--set", "steps=2",
                             "--set-b", "global_batch=512", "--json", NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  double side[2];
  const char *const names[] = {"a", "b"};
  for (int k = 0; k < 2; k++) {
    json_object *ax = json_object_object_get(json_object_object_get(o, names[k]),
                                             "collective_axes");
    side[k] = json_object_get_double(
        json_object_object_get(json_object_object_get(ax, "data"), "exposed_s"));
  }
  json_object *d = json_object_object_get(json_object_object_get(o, "diff"), "collective_axes");
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(
                        json_object_object_get(d, "data"), "exposed_s")), ==, side[1] - side[0]);
  g_assert_false(json_object_object_get_ex(d, "tensor", NULL));
  g_assert_true(json_object_object_get_ex(json_object_object_get(o, "diff"), "mfu", NULL));
  json_object_put(o);
  g_free(out);
  g_free(err);
}

/* compare: the compute split under compute, its softmax row only where
 * flash attention's softmax runs in series (not for ResNet-50 above);
 * --json nests the split's differences and ratios under compute_split as
 * the summary does: doubling the vector rate halves the softmax's time. */
static void test_compare_split(void)
{
  char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "compare", "resnet50-v3-8", "--set", "steps=2",
                             "--set-b", "global_batch=512", NULL), ==, 0);
  g_assert_nonnull(strstr(out, "    MXU-bound"));
  g_assert_nonnull(strstr(out, "    memory-bound"));
  g_assert_null(strstr(out, "softmax"));
  g_free(out);
  g_free(err);
  const char *flash[] = {"compare", "shard-llama2-7b", "--set", "steps=1", "--set",
                         "attention_kernel=flash", "--set-b", "topology.chip.vpu_flops=28e12",
                         NULL, NULL};
  g_assert_cmpint(podsim_run(&out, &err, flash[0], flash[1], flash[2], flash[3], flash[4],
                             flash[5], flash[6], flash[7], NULL), ==, 0);
  g_assert_nonnull(strstr(out, "    softmax (serial)"));
  g_free(out);
  g_free(err);
  g_assert_cmpint(podsim_run(&out, &err, flash[0], flash[1], flash[2], flash[3], flash[4],
                             flash[5], flash[6], flash[7], "--json", NULL), ==, 0);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  double v[2];
  const char *const names[] = {"a", "b"};
  for (int k = 0; k < 2; k++)
    v[k] = json_object_get_double(json_object_object_get(
        json_object_object_get(json_object_object_get(o, names[k]), "compute_split"),
        "serial_vector_s"));
  g_assert_cmpfloat(v[0], >, 0);
  json_object *d = json_object_object_get(json_object_object_get(o, "diff"), "compute_split");
  json_object *r = json_object_object_get(json_object_object_get(o, "ratio"), "compute_split");
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(d, "serial_vector_s")), ==,
                    v[1] - v[0]);
  g_assert_cmpfloat(fabs(json_object_get_double(json_object_object_get(r, "serial_vector_s")) -
                         0.5), <, 1e-9);
  g_assert_true(json_object_object_get_ex(d, "mxu_s", NULL));
  json_object_put(o);
  g_free(out);
  g_free(err);
}

/* sweep: the columns come from --json, so each row has MFU, HFU, tokens/s
 * (empty for images) and every axis's exposed and busy time. */
static void test_sweep_columns(void)
{
  char *dir = scratch_dir("podsim-reports");
  g_autofree char *csv = g_build_filename(dir, "axes.csv", NULL);
  char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "sweep", "default", "--set", "numerics.enabled=false",
                             "--set", "steps=2", "--vary", "global_batch=64,128", "--out", csv,
                             NULL), ==, 0);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(csv, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_auto(GStrv) header = g_strsplit(lines[0], ",", -1);
  const char *want[] = {"mfu", "hfu", "tokens_per_s", "chips", "collective_axes.data.exposed_s",
                        "collective_axes.tensor.busy_s", "collective_axes.fsdp.collectives"};
  for (guint i = 0; i < G_N_ELEMENTS(want); i++)
    g_assert_true(g_strv_contains((const char *const *)header, want[i]));
  g_free(out);
  g_free(err);
  scratch_clear(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim_init();
  tmpdir = g_dir_make_tmp("podsim-reports-XXXXXX", NULL);
  g_assert_nonnull(tmpdir);
  g_test_add_func("/reports/model-flops/palm", test_model_flops_palm);
  g_test_add_func("/reports/model-flops/encoder", test_model_flops_encoder);
  g_test_add_func("/reports/mfu/replicate", test_mfu_replicate);
  g_test_add_func("/reports/tokens/none", test_tokens_none);
  g_test_add_func("/reports/hfu/rematerialize", test_hfu_rematerialize);
  g_test_add_func("/reports/axes/exposed", test_axes_exposed);
  g_test_add_func("/reports/cli/compare", test_compare_rows);
  g_test_add_func("/reports/cli/compare-split", test_compare_split);
  g_test_add_func("/reports/cli/sweep", test_sweep_columns);
  int status = g_test_run();
  static const char *const files[] = {"decoder.json", "small-decoder.json", "reports.json",
                                      "meshed.json"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autofree char *path = g_build_filename(tmpdir, files[i], NULL);
    g_unlink(path);
  }
  g_rmdir(tmpdir);
  g_free(tmpdir);
  return status;
}

/* test_cost.c: the kernel cost model (hw/cost.h) against closed forms:
 * a dense layer's HBM traffic, a convolution's padded MXU FLOPs, the
 * kernels of a ResNet bottleneck block, MXU passes per precision, and the
 * order none >= xla >= ideal of the fusion modes. */
#include "hw/cost.h"
#include "strategy/cost-options.h"
#include "io/config.h"
#include "model/layers.h"
#include "run/experiment.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

static PsModel *model_from(const char *text)
{
  json_object *o = json_tokener_parse(text);
  g_assert_nonnull(o);
  GError *error = NULL;
  PsModel *m = ps_model_from_json(o, "test.json", "", &error);
  g_assert_no_error(error);
  json_object_put(o);
  return m;
}

static PsTopology *v3(void)
{
  return topology_load("tpu-v3-8", NULL);
}

static const PsCostOptions xla_bf16 = {.passes = 1, .act_bytes = 2, .fusion = PS_FUSION_XLA};

static int find_layer(const PsModel *m, const char *name)
{
  for (int i = 0; i < m->n_layers; i++)
    if (g_strcmp0(m->layers[i].name, name) == 0)
      return i;
  g_error("no layer %s", name);
  return -1;
}

/* y = x W over 512 -> 256 at batch 64 in bf16: forward reads x and W and
 * writes y; backward reads dy, W and x for the input gradient and x and dy
 * for the weight gradient, which it writes in float32. */
static void test_dense_bytes(void)
{
  PsModel *m = model_from("{\"name\": \"d\", \"input\": {\"shape\": [512], \"classes\": 256},"
                          " \"layers\": [{\"type\": \"dense\", \"units\": 256, \"bias\": false},"
                          " {\"type\": \"softmax_xent\"}]}");
  PsTopology *t = v3();
  const double B = 64, in = 512, out = 256, w = 512 * 256;
  PsOpCost c;
  ps_cost_op(t, m, 0, 0, (int64_t)B, &xla_bf16, FALSE, NULL, &c);
  g_assert_cmpint(c.kernels, ==, 1);
  g_assert_cmpfloat(c.bytes, ==, 2 * ((in + out) * B + w));
  ps_cost_op(t, m, 0, 0, (int64_t)B, &xla_bf16, TRUE, NULL, &c);
  g_assert_cmpint(c.kernels, ==, 2);
  g_assert_cmpfloat(c.bytes, ==, 2 * ((in + out) * B + w) + 2 * (in + out) * B + 4 * w);
  /* the roofline of the forward kernel */
  ps_cost_op(t, m, 0, 0, (int64_t)B, &xla_bf16, FALSE, NULL, &c);
  double t_mem = c.bytes / ps_topology_device_hbm_bandwidth(t);
  double t_mxu = 2 * B * 512 * 256 / (ps_topology_device_peak_flops(t) * t->mxu_efficiency);
  double want = fmax(t_mem, t_mxu) + t->op_overhead_s;
  g_assert_cmpfloat(fabs(ps_time_to_s(c.time) - want), <, 2e-12);
  ps_topology_free(t);
  ps_model_free(m);
}

/* The cost of an n x n by n x n bf16 matmul on one device of topology
 * name, as a dense layer of n units over a batch of n: the kernel's
 * roofline (its padding to the MXU included) and its fixed cost. */
static double matmul_time_any(const char *name, int64_t n, PsTopology **out, PsOpCost *c)
{
  /* the benchmarks' clock: on a chip with DVFS power states (v7) the state
   * its figures were measured at, p-state 7 (chip.reference_p_state) */
  static const char *const locked[] = {"chip.p_state=7", NULL};
  PsTopology *probe = topology_load(name, NULL);
  gboolean states = probe->n_p_states > 0;
  g_assert_true(!states || probe->reference_p_state == 7);
  ps_topology_free(probe);
  g_autofree char *text = g_strdup_printf(
      "{\"name\": \"mm\", \"input\": {\"shape\": [%" G_GINT64_FORMAT "], \"classes\": 8},"
      " \"layers\": [{\"type\": \"dense\", \"units\": %" G_GINT64_FORMAT ", \"bias\": false},"
      " {\"type\": \"dense\", \"units\": 8}, {\"type\": \"softmax_xent\"}]}",
      n, n);
  PsModel *m = model_from(text);
  PsTopology *t = topology_load(name, states ? locked : NULL);
  ps_cost_op(t, m, 0, 0, n, &xla_bf16, FALSE, NULL, c);
  ps_model_free(m);
  *out = t;
  return ps_time_to_s(c->time);
}

/* The same for a large one: unpadded, and the MXU term far above the HBM
 * one, so the kernel costs the measured rate. */
static double matmul_time(const char *name, int64_t n, PsTopology **out)
{
  PsOpCost c;
  double s = matmul_time_any(name, n, out, &c);
  g_assert_cmpfloat(c.padded_flops, ==, 2.0 * (double)n * (double)n * (double)n);
  g_assert_cmpfloat(c.bytes / ps_topology_device_hbm_bandwidth(*out), <, 0.1 * s);
  return s;
}

/* The generations whose mxu_efficiency is a published single-host matmul
 * rate ("measured:" in their topology files) reproduce it to 0.1%:
 *   v5e: XLA's bf16 8192^3 matmul on one chip, 6.047 ms (JAX
 *        documentation, Pallas TPU guide "Matrix Multiplication");
 *   v7:  a bf16 32768^3 matmul at 956.38 TFLOP/s on one device, a
 *        TensorCore (accelerator-microbenchmarks, Ironwood GEMM results).
 * v5p, which has no such figure, holds v5e's value (v6e's is fitted to
 * its single-host step: tests/measured, "calibration": true). */
static void test_matmul_points(void)
{
  PsTopology *t = NULL;
  double s = matmul_time("tpu-v5e-4", 8192, &t);
  g_assert_cmpfloat(fabs(s / 6.047e-3 - 1), <, 1e-3);
  const char *borrowers[] = {"tpu-v5p-8"};
  for (guint i = 0; i < G_N_ELEMENTS(borrowers); i++) {
    PsTopology *b = topology_load(borrowers[i], NULL);
    g_assert_cmpfloat(b->mxu_efficiency, ==, t->mxu_efficiency);
    ps_topology_free(b);
  }
  ps_topology_free(t);
  const double n = 32768;
  s = matmul_time("tpu7x-8", (int64_t)n, &t);
  g_assert_cmpfloat(fabs(2 * n * n * n / s / 956.38e12 - 1), <, 1e-3);
  ps_topology_free(t);
  /* v7's fixed cost of a kernel: the same table's 128^3 matmul, 2.590
   * TFLOP/s, 1.62 us, nearly all of it the kernel's fixed cost */
  PsOpCost c;
  s = matmul_time_any("tpu7x-8", 128, &t, &c);
  g_assert_cmpfloat(fabs(2.0 * 128 * 128 * 128 / s / 2.590e12 - 1), <, 0.02);
  ps_topology_free(t);
  /* the rest of the table, printed beside podsim (docs/fidelity.md) */
  static const double sizes[] = {256, 512, 1024, 2048, 4096, 16384};
  static const double rates[] = {18.286, 105.078, 349.727, 679.285, 892.945, 950.129};
  for (guint i = 0; i < G_N_ELEMENTS(sizes); i++) {
    s = matmul_time_any("tpu7x-8", (int64_t)sizes[i], &t, &c);
    double r = 2 * sizes[i] * sizes[i] * sizes[i] / s / 1e12;
    g_test_message("tpu7x %5.0f^3: measured %7.3f TFLOP/s, podsim %7.3f (%+.0f%% time)", sizes[i],
                   rates[i], r, (rates[i] / r - 1) * 100);
    g_assert_cmpfloat(r, >, 0.8 * rates[i]); /* podsim is never much slower */
    ps_topology_free(t);
  }
}

/* The core's clock (chip.clock_factor f): a kernel's MXU and vector-unit
 * times and its fixed cost take 1/f as long, its HBM time the same.  On
 * tpu7x-8, whose default DVFS state is slower than the benchmarks' locked
 * p-state 7: a 32768^3 matmul (MXU-bound) takes 1/f of its locked time; a
 * 16384 x 16384 dense layer at batch 1 (HBM-bound: its weights read once)
 * its HBM time plus 1/f of the fixed cost.  f is the run's p-state's clock
 * over the reference state's: XLA's TPU7x table, the default p-state 3 at
 * 1.9 GHz over p-state 7's 2.2 GHz (tpu7x.json's source), and 2.05 GHz
 * for p-state 5; the same recipe run's steps with and without the flag
 * (186.48 s, 213.68 s), almost all MXU-bound, are within 1.1% of it. */
static void test_clock_factor(void)
{
  PsTopology *t = topology_load("tpu7x-8", NULL);
  const double f = t->clock_factor;
  g_assert_cmpint(t->n_p_states, ==, 8);
  g_assert_cmpint(t->p_state, ==, 3);
  g_assert_cmpint(t->reference_p_state, ==, 7);
  g_assert_cmpfloat(fabs(f - 1.9 / 2.2), <, 1e-12);
  g_assert_cmpfloat(fabs(186.48 / 213.68 / f - 1), <, 0.011);
  static const char *const p5[] = {"chip.p_state=5", NULL};
  PsTopology *t5 = topology_load("tpu7x-8", p5);
  g_assert_cmpfloat(fabs(t5->clock_factor - 2.05 / 2.2), <, 1e-12);
  ps_topology_free(t5);
  PsTopology *locked = NULL;
  PsOpCost c;
  const double n = 32768;
  double s1 = matmul_time("tpu7x-8", (int64_t)n, &locked);
  g_assert_cmpfloat(locked->clock_factor, ==, 1.0);
  PsModel *m = model_from("{\"name\": \"mm\", \"input\": {\"shape\": [32768], \"classes\": 8},"
                          " \"layers\": [{\"type\": \"dense\", \"units\": 32768, \"bias\": false},"
                          " {\"type\": \"dense\", \"units\": 8}, {\"type\": \"softmax_xent\"}]}");
  ps_cost_op(t, m, 0, 0, (int64_t)n, &xla_bf16, FALSE, NULL, &c);
  g_test_message("32768^3 on tpu7x-8: %.6f ms locked, %.6f ms at clock %.4f", s1 * 1e3,
                 ps_time_to_s(c.time) * 1e3, f);
  g_assert_cmpfloat(fabs(ps_time_to_s(c.time) - s1 / f), <, 1e-9 * s1);
  ps_model_free(m);
  m = model_from("{\"name\": \"mv\", \"input\": {\"shape\": [16384], \"classes\": 8},"
                 " \"layers\": [{\"type\": \"dense\", \"units\": 16384, \"bias\": false},"
                 " {\"type\": \"dense\", \"units\": 8}, {\"type\": \"softmax_xent\"}]}");
  ps_cost_op(t, m, 0, 0, 1, &xla_bf16, FALSE, NULL, &c);
  double t_mem = c.bytes / ps_topology_device_hbm_bandwidth(t);
  g_assert_cmpfloat(c.memory_s, >, 0);
  g_assert_cmpfloat(fabs(ps_time_to_s(c.time) - (t_mem + t->op_overhead_s / f)), <, 2e-12);
  ps_model_free(m);
  ps_topology_free(locked);
  ps_topology_free(t);
  /* refused, each naming its key: a factor out of (0, 2]; a factor on a
   * chip that sets its clock by power state; a state the table lacks; a
   * state on a chip without one; a clock of 0 */
  static const struct {
    const char *topo, *set, *key;
  } bad[] = {{"tpu-v5p-8", "chip.clock_factor=0", "clock_factor"},
             {"tpu7x-8", "chip.clock_factor=1", "clock_factor"},
             {"tpu7x-8", "chip.p_state=8", "p_state"},
             {"tpu-v5p-8", "chip.p_state=1", "p_state"},
             {"tpu7x-8", "chip.p_state_clocks_ghz=[1.9, 0]", "p_state_clocks_ghz[1]"}};
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    const char *const ov[] = {bad[i].set, NULL};
    GError *error = NULL;
    g_assert_null(ps_topology_load(bad[i].topo, ov, &error));
    g_assert_nonnull(error);
    g_test_message("%s", error->message);
    g_assert_nonnull(strstr(error->message, bad[i].key));
    g_clear_error(&error);
  }
}

/* A 3x3 convolution of 64 channels to 100 filters on 5x5 images, laid out
 * as XLA pads a convolution's batch and features (cost.c's conv_padded):
 * at batch 3 (under 64) forward and input-gradient products pad the batch
 * to 8 and the channels to 128 (64 -> 128, 100 -> 128), the
 * weight-gradient one the input channels to 128 and the batch and filters
 * to 8 (100 -> 104); at batch 64 and 96 it is the other way round, the
 * batch padded to 128 (so 64 images cost what 128 do) and the channels to
 * 8.  An RGB input folds its window into its channels (27 -> 128 at batch
 * 3). */
static void check_conv(const PsTopology *t, const PsModel *m, int64_t B, double fwd, double wgrad)
{
  PsOpCost c;
  ps_cost_op(t, m, 0, 0, B, &xla_bf16, FALSE, NULL, &c);
  g_assert_cmpfloat(c.padded_flops, ==, fwd);
  ps_cost_op(t, m, 0, 0, B, &xla_bf16, TRUE, NULL, &c);
  g_assert_cmpfloat(c.padded_flops, ==, fwd + wgrad); /* input and weight gradients */
}

static void test_conv_padding(void)
{
  PsTopology *t = v3();
  PsModel *m = model_from("{\"name\": \"c\", \"input\": {\"shape\": [5, 5, 64], \"classes\": 10},"
                          " \"layers\": [{\"type\": \"conv2d\", \"filters\": 100, \"kernel\": 3,"
                          " \"padding\": \"same\", \"bias\": false}, {\"type\": \"flatten\"},"
                          " {\"type\": \"dense\", \"units\": 10}, {\"type\": \"softmax_xent\"}]}");
  PsOpCost c;
  ps_cost_op(t, m, 0, 0, 3, &xla_bf16, FALSE, NULL, &c);
  g_assert_cmpfloat(c.mxu_flops, ==, 2.0 * 3 * 25 * 9 * 64 * 100);
  check_conv(t, m, 3, 2.0 * 25 * 8 * 9 * 128 * 128, 2.0 * 25 * 8 * 9 * 128 * 104);
  check_conv(t, m, 64, 2.0 * 25 * 128 * 9 * 64 * 104, 2.0 * 25 * 128 * 9 * 64 * 128);
  check_conv(t, m, 96, 2.0 * 25 * 128 * 9 * 64 * 104, 2.0 * 25 * 128 * 9 * 64 * 128);
  ps_model_free(m);
  m = model_from("{\"name\": \"c\", \"input\": {\"shape\": [5, 5, 3], \"classes\": 10},"
                 " \"layers\": [{\"type\": \"conv2d\", \"filters\": 100, \"kernel\": 3,"
                 " \"padding\": \"same\", \"bias\": false}, {\"type\": \"flatten\"},"
                 " {\"type\": \"dense\", \"units\": 10}, {\"type\": \"softmax_xent\"}]}");
  ps_cost_op(t, m, 0, 0, 3, &xla_bf16, FALSE, NULL, &c);
  g_assert_cmpfloat(c.padded_flops, ==, 2.0 * 25 * 8 * 128 * 128);
  ps_model_free(m);
  ps_topology_free(t);
}

static int count_kernels(const PsTopology *t, const PsModel *m, int first, int last,
                         gboolean backward, const PsCostOptions *o)
{
  PsOpCost c;
  GArray *ks = g_array_new(FALSE, FALSE, sizeof(PsKernel));
  ps_cost_op(t, m, first, last, 32, o, backward, ks, &c);
  g_assert_cmpint((int)ks->len, ==, c.kernels);
  /* kernels sum to the op */
  ps_time_t sum = 0;
  for (guint i = 0; i < ks->len; i++)
    sum += g_array_index(ks, PsKernel, i).time;
  g_assert_cmpint(sum, ==, c.time);
  g_array_free(ks, TRUE);
  return c.kernels;
}

/* ResNet-50's first bottleneck block (projection shortcut) and second
 * (identity).  Forward: a kernel per convolution with the activation of
 * the batch norm before it fused into its input, a statistics kernel per
 * batch norm, and the residual add (with both normalizations and the relu)
 * as one kernel: 4 + 4 + 1 = 9, identity 3 + 3 + 1 = 7.  Backward: input-
 * and weight-gradient kernels per convolution and a reduction per batch
 * norm: 8 + 4 = 12, identity 6 + 3 = 9.  Unfused, every layer is its own
 * kernel and a batch norm two. */
/* Every kernel of every shipped model, forward and backward, at batches 1
 * and 8, fused and not: no negative traffic or FLOPs (an embedding's
 * gather once came out at minus the table's size per extra example), and
 * traffic that does not shrink as the batch grows. */
static void test_shipped_models_nonnegative(void)
{
  PsTopology *t = v3();
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *models = g_build_filename(dir && *dir ? dir : ".", "models", NULL);
  GDir *d = g_dir_open(models, 0, NULL);
  g_assert_nonnull(d);
  int checked = 0;
  for (const char *name; (name = g_dir_read_name(d));) {
    if (!g_str_has_suffix(name, ".json"))
      continue;
    g_autofree char *path = g_build_filename(models, name, NULL);
    GError *error = NULL;
    PsModel *m = ps_model_load_file(path, &error);
    g_assert_no_error(error);
    for (int bwd = 0; bwd < 2; bwd++) {
      double bytes_prev = -1;
      for (int64_t batch = 1; batch <= 8; batch *= 8) {
        GArray *ks = g_array_new(FALSE, FALSE, sizeof(PsKernel));
        PsOpCost c;
        PsCostOptions none = xla_bf16;
        none.fusion = PS_FUSION_NONE;
        ps_cost_op(t, m, 0, m->n_layers - 1, batch, &none, bwd, ks, &c);
        for (guint k = 0; k < ks->len; k++) {
          const PsKernel *kk = &g_array_index(ks, PsKernel, k);
          if (kk->bytes < 0 || kk->vpu_flops < 0 || kk->mxu_flops < 0)
            g_error("%s: layer %s: %s kernel with %.0f bytes, %.0f VPU FLOPs", name,
                    m->layers[kk->layer].name, kk->what, kk->bytes, kk->vpu_flops);
        }
        g_assert_cmpfloat(c.bytes, >, bytes_prev);
        bytes_prev = c.bytes;
        g_array_free(ks, TRUE);
      }
    }
    checked++;
    ps_model_free(m);
  }
  g_dir_close(d);
  g_assert_cmpint(checked, >=, 8);
  ps_topology_free(t);
}

static void test_bottleneck_kernels(void)
{
  PsTopology *t = v3();
  GError *error = NULL;
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path = g_build_filename(dir && *dir ? dir : ".", "models", "resnet50.json",
                                           NULL);
  PsModel *m = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  int b1 = find_layer(m, "stage1.block1.res.body.conv1");
  int a1 = find_layer(m, "stage1.block1.res.add");
  int b2 = find_layer(m, "stage1.block2.res.body.conv1");
  int a2 = find_layer(m, "stage1.block2.res.add");
  g_assert_cmpint(count_kernels(t, m, b1, a1 + 1, FALSE, &xla_bf16), ==, 9);
  g_assert_cmpint(count_kernels(t, m, b1, a1 + 1, TRUE, &xla_bf16), ==, 12);
  g_assert_cmpint(count_kernels(t, m, b2, a2 + 1, FALSE, &xla_bf16), ==, 7);
  g_assert_cmpint(count_kernels(t, m, b2, a2 + 1, TRUE, &xla_bf16), ==, 9);
  PsCostOptions none = xla_bf16;
  none.fusion = PS_FUSION_NONE;
  /* 4 conv + 4 x 2 bn + 2 relu + add + relu */
  g_assert_cmpint(count_kernels(t, m, b1, a1 + 1, FALSE, &none), ==, 16);
  PsCostOptions ideal = xla_bf16;
  ideal.fusion = PS_FUSION_IDEAL;
  g_assert_cmpint(count_kernels(t, m, b1, a1 + 1, FALSE, &ideal), ==, 4);
  g_assert_cmpint(count_kernels(t, m, b1, a1 + 1, TRUE, &ideal), ==, 8);
  ps_model_free(m);
  ps_topology_free(t);
}

/* XLA's precision config: float32 matmuls take 1, 3 or 6 bf16 passes;
 * bf16 inputs one pass whatever the setting; the experiment key sets it
 * and "default" is the default. */
static void test_precision_passes(void)
{
  g_assert_cmpint(ps_cost_passes(PS_PRECISION_F32, 1), ==, 1);
  g_assert_cmpint(ps_cost_passes(PS_PRECISION_F32, 3), ==, 3);
  g_assert_cmpint(ps_cost_passes(PS_PRECISION_F32, 6), ==, 6);
  for (int p = 1; p <= 6; p++)
    g_assert_cmpint(ps_cost_passes(PS_PRECISION_BF16, p), ==, 1);
  static const char *const names[] = {"default", "high", "highest"};
  static const int passes[] = {1, 3, 6};
  for (int i = 0; i < 3; i++) {
    g_autofree char *set = g_strdup_printf("numerics.matmul_precision=%s", names[i]);
    const char *ov[] = {"numerics.precision=f32", set, NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load("resnet50-v3-8", ov, &error);
    g_assert_no_error(error);
    PsCostOptions o;
    ps_strategy_cost_options(e, &o);
    g_assert_cmpint(o.passes, ==, passes[i]);
    g_assert_cmpint(o.act_bytes, ==, 4);
    PsOpCost c;
    ps_cost_op(e->topology, e->model, 0, 0, 8, &o, FALSE, NULL, &c);
    PsCostOptions one = o;
    one.passes = 1;
    PsOpCost c1;
    ps_cost_op(e->topology, e->model, 0, 0, 8, &one, FALSE, NULL, &c1);
    g_assert_cmpfloat(c.padded_flops, ==, passes[i] * c1.padded_flops);
    ps_experiment_free(e);
  }
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("resnet50-v3-8", NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpint(e->numerics.matmul_passes, ==, 1);
  g_assert_cmpint(e->fusion, ==, PS_FUSION_XLA);
  ps_experiment_free(e);
  const char *bad[] = {"numerics.matmul_precision=fastest", NULL};
  g_assert_null(ps_experiment_load("resnet50-v3-8", bad, &error));
  g_assert_nonnull(strstr(error->message, "matmul_precision"));
  g_clear_error(&error);
  /* the stored weights' precision: f32 by default, f32 or bf16 */
  e = ps_experiment_load("resnet50-v3-8", NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpint(e->numerics.weight_precision, ==, PS_PRECISION_F32);
  ps_experiment_free(e);
  const char *bad_w[] = {"numerics.weight_precision=f16", NULL};
  g_assert_null(ps_experiment_load("resnet50-v3-8", bad_w, &error));
  g_assert_nonnull(strstr(error->message, "numerics.weight_precision"));
  g_assert_nonnull(strstr(error->message, "f16"));
  g_assert_cmpint(error->code, ==, PS_INPUT_ERROR_VALUE);
  g_clear_error(&error);
  /* collective.on_core: all three kinds by default (XLA without its
   * SparseCore offload flags); [] for none; a list of distinct kinds */
  e = ps_experiment_load("resnet50-v3-8", NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(e->collective.on_core, ==,
                   1u << PS_COLL_ALL_REDUCE | 1u << PS_COLL_REDUCE_SCATTER |
                       1u << PS_COLL_ALL_GATHER);
  ps_experiment_free(e);
  const char *none[] = {"collective.on_core=[]", NULL};
  e = ps_experiment_load("resnet50-v3-8", none, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(e->collective.on_core, ==, 0);
  ps_experiment_free(e);
  const char *on[] = {"collective.on_core=[\"reduce-scatter\", \"all-gather\"]", NULL};
  e = ps_experiment_load("resnet50-v3-8", on, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(e->collective.on_core, ==,
                   1u << PS_COLL_REDUCE_SCATTER | 1u << PS_COLL_ALL_GATHER);
  ps_experiment_free(e);
  const char *bad_on[][2] = {{"collective.on_core=[\"all-gather\", \"all-gather\"]", NULL},
                             {"collective.on_core=[\"broadcast\"]", NULL},
                             {"collective.on_core=\"all-reduce\"", NULL}};
  for (guint i = 0; i < G_N_ELEMENTS(bad_on); i++) {
    g_assert_null(ps_experiment_load("resnet50-v3-8", bad_on[i], &error));
    g_assert_nonnull(strstr(error->message, "collective.on_core"));
    g_assert_cmpint(error->code, ==, PS_INPUT_ERROR_VALUE);
    g_clear_error(&error);
  }
}

/* One step of ResNet-50's compute on a v3 core: no fusion costs at least
 * XLA's fusion, which costs at least ideal fusion; fuse_elementwise=false
 * is fusion "none". */
static void test_fusion_order(void)
{
  double step[3];
  static const char *const names[] = {"none", "xla", "ideal"};
  for (int f = 0; f < 3; f++) {
    g_autofree char *set = g_strdup_printf("fusion=%s", names[f]);
    const char *ov[] = {set, NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load("resnet50-v3-8", ov, &error);
    g_assert_no_error(error);
    PsCostOptions o;
    ps_strategy_cost_options(e, &o);
    int n = e->model->n_layers;
    PsOpCost fwd, bwd;
    ps_cost_op(e->topology, e->model, 0, n - 1, 128, &o, FALSE, NULL, &fwd);
    ps_cost_op(e->topology, e->model, 0, n - 1, 128, &o, TRUE, NULL, &bwd);
    step[f] = ps_time_to_s(fwd.time + bwd.time);
    g_test_message("fusion %s: %.3f ms, %d kernels", names[f], step[f] * 1e3,
                   fwd.kernels + bwd.kernels);
    /* the op's cost is the sum of its layers' whatever the grouping */
    int half = n / 2;
    PsOpCost a, b;
    ps_cost_op(e->topology, e->model, 0, half, 128, &o, FALSE, NULL, &a);
    ps_cost_op(e->topology, e->model, half + 1, n - 1, 128, &o, FALSE, NULL, &b);
    g_assert_cmpint(a.time + b.time, ==, fwd.time);
    ps_experiment_free(e);
  }
  g_assert_cmpfloat(step[0], >, step[1]);
  g_assert_cmpfloat(step[1], >, step[2]);
  const char *ov[] = {"fuse_elementwise=false", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("resnet50-v3-8", ov, &error);
  g_assert_no_error(error);
  g_assert_cmpint(e->fusion, ==, PS_FUSION_NONE);
  ps_experiment_free(e);
}

/* Flash attention against its closed forms, one causal layer of S = 2048,
 * 4 heads of 128, blocks of 512: a causal head computes the blocks on and
 * below the diagonal, 512 x (512 + 1024 + 1536 + 2048) = 2,621,440
 * scores of S^2 = 4,194,304 (0.625); forward executes the projections
 * and 2 products of 2 x 128 FLOPs per score, backward twice the
 * projections and 7 such products (5 with one fused backward kernel, the
 * softmax's vector work then run again once: 1 + 5 FLOPs a score fewer);
 * the model's FLOPs (MFU) are the whole
 * S^2 either way; it keeps h S float32 log-sum-exps for backward instead
 * of h S^2 probabilities. */
static void test_flash_attention(void)
{
  const char *fmt =
      "{\"name\": \"fa\", \"input\": {\"shape\": [2048, 512], \"classes\": 512},"
      " \"layers\": [{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 4, \"causal\": true,"
      " \"bias\": false%s}, {\"type\": \"softmax_xent\"}]}";
  g_autofree char *plain_text = g_strdup_printf(fmt, "");
  g_autofree char *flash_text = g_strdup_printf(fmt, ", \"flash\": true");
  PsModel *plain = model_from(plain_text), *flash = model_from(flash_text);
  PsTopology *t = topology_load("tpu-v5e-4", NULL);
  const double S = 2048, D = 512, h = 4, dh = 128, seen = 512.0 * (512 + 1024 + 1536 + 2048);
  const double proj = 2 * S * D * 3 * D + 2 * S * D * D;
  g_assert_cmpfloat(flash->layers[0].mm[1].done, ==, seen / (S * S));
  g_assert_cmpfloat(ps_model_flops_per_example(flash), ==, ps_model_flops_per_example(plain));
  GString *d = g_string_new(NULL);
  ps_model_describe(flash, d);
  g_assert_null(strstr(d->str, "sliding window"));
  g_string_free(d, TRUE);
  g_assert_cmpfloat(ps_model_flops_per_example(flash), ==, 3 * (proj + 4 * h * dh * S * S));
  const int64_t B = 2;
  PsOpCost f, b, pf;
  ps_cost_op(t, flash, 0, 0, B, &xla_bf16, FALSE, NULL, &f);
  ps_cost_op(t, flash, 0, 0, B, &xla_bf16, TRUE, NULL, &b);
  ps_cost_op(t, plain, 0, 0, B, &xla_bf16, FALSE, NULL, &pf);
  g_assert_cmpfloat(fabs(f.mxu_flops - B * (proj + 4 * h * dh * seen)), <, 1e-9 * f.mxu_flops);
  g_assert_cmpfloat(fabs(b.mxu_flops - B * (2 * proj + 7 * 2 * h * dh * seen)), <,
                    1e-9 * b.mxu_flops);
  g_assert_cmpfloat(fabs(pf.mxu_flops - B * (proj + 4 * h * dh * S * S)), <, 1e-9 * pf.mxu_flops);
  /* one fused backward kernel: 5 products, the softmax's vector work once */
  g_autofree char *fused_text = g_strdup_printf(fmt, ", \"flash\": true, "
                                                     "\"flash_fused_backward\": true");
  PsModel *fused = model_from(fused_text);
  PsOpCost ff, fb;
  ps_cost_op(t, fused, 0, 0, B, &xla_bf16, FALSE, NULL, &ff);
  ps_cost_op(t, fused, 0, 0, B, &xla_bf16, TRUE, NULL, &fb);
  g_assert_cmpfloat(ff.mxu_flops, ==, f.mxu_flops);
  g_assert_cmpfloat(fabs(fb.mxu_flops - B * (2 * proj + 5 * 2 * h * dh * seen)), <,
                    1e-9 * fb.mxu_flops);
  g_assert_cmpfloat(fabs(flash->layers[0].bwd_flops - fused->layers[0].bwd_flops -
                         (2 * 2 * h * dh * seen + (1 + 5.0) * h * seen)),
                    <, 1e-9 * flash->layers[0].bwd_flops);
  g_assert_cmpfloat(ps_model_flops_per_example(fused), ==, ps_model_flops_per_example(plain));
  ps_model_free(fused);
  /* no score goes through HBM: the plain kernel moves 4 h S^2 score
   * elements and reads K and V once (2 S D); the flash kernel reads each
   * visible 512-row key and value block once per query head and block,
   * 2 h dh seen / 512 elements */
  const double moved = 4 * h * S * S + 2 * S * D - 2 * h * dh * seen / 512;
  g_assert_cmpfloat(fabs(pf.bytes - f.bytes - B * moved * xla_bf16.act_bytes), <, 1e-9 * pf.bytes);
  const int eb = 2;
  g_assert_cmpint(ps_model_memory_bytes(plain, 0, -1, B, 2, eb) -
                      ps_model_memory_bytes(flash, 0, -1, B, 2, eb),
                  ==, B * ((int64_t)(h * S * S) * eb - (int64_t)(h * S) * 4));
  ps_topology_free(t);
  ps_model_free(plain);
  ps_model_free(flash);
}

/* The kernel of layer 0 named `what` among a step's kernels. */
static const PsKernel *kernel_named(GArray *ks, const char *what)
{
  for (guint i = 0; i < ks->len; i++) {
    const PsKernel *k = &g_array_index(ks, PsKernel, i);
    if (k->layer == 0 && strcmp(k->what, what) == 0)
      return k;
  }
  g_error("no kernel %s", what);
  return NULL;
}

/* Flash attention's kernels on a 256-wide MXU (tpu7x), one causal layer
 * of S = 2048, D = 1024 in blocks of 512 (seen = 0.625 S^2 scores a head),
 * heads of 128 and of 256:
 *  - the score product contracts over the head (padded to 256: 2 x 256 x
 *    h x seen FLOPs on the MXU), the context product over the keys, its
 *    head side the output, not padded (2 x dh x h x seen): MaxText's
 *    Ironwood guide puts the under-used MXU of heads of 128 or 64 in the
 *    QK product, the MXU being efficient when the contraction is a
 *    multiple of 256;
 *  - the softmax's vector work (1 + 5 FLOPs a visible score forward,
 *    6 x 2 + 4 backward over the dk/dv and dq kernels' scores) waits on
 *    the score product and feeds the context one, so it adds to the MXU
 *    time: busy = padded / (peak x efficiency x clock) + vector / VPU. */
static void test_flash_mxu_softmax(void)
{
  const char *fmt =
      "{\"name\": \"fa\", \"input\": {\"shape\": [2048, 1024], \"classes\": 1024},"
      " \"layers\": [{\"type\": \"attention\", \"name\": \"attn\", \"heads\": %d, \"causal\": true,"
      " \"bias\": false, \"flash\": true, \"flash_block\": 512}, {\"type\": \"softmax_xent\"}]}";
  PsTopology *t = topology_load("tpu7x-8", NULL);
  const double S = 2048, D = 1024;
  const double clock = t->clock_factor > 0 ? t->clock_factor : 1.0;
  const double peak = ps_topology_device_peak_flops(t) * t->mxu_efficiency * clock;
  const double vpu = t->vpu_flops * clock / ps_topology_devices_per_chip(t);
  const int64_t B = 2;
  const double proj = 2 * S * D * 3 * D + 2 * S * D * D;
  /* causal blocks of 512 over 2048: 512 x (512 + 1024 + 1536 + 2048) */
  const double vis = 512.0 * (512 + 1024 + 1536 + 2048);
  const int heads[] = {8, 4};
  for (int c = 0; c < 2; c++) {
    const double h = heads[c], dh = D / h;
    g_autofree char *text = g_strdup_printf(fmt, heads[c]);
    PsModel *m = model_from(text);
    g_assert_cmpfloat(m->layers[0].core_vec_fwd, ==, 6 * h * vis);
    g_assert_cmpfloat(m->layers[0].core_vec_bwd, ==, 16 * h * vis);
    GArray *ks = g_array_new(FALSE, TRUE, sizeof(PsKernel));
    PsOpCost f, b;
    ps_cost_op(t, m, 0, 0, B, &xla_bf16, FALSE, ks, &f);
    ps_cost_op(t, m, 0, 0, B, &xla_bf16, TRUE, ks, &b);
    const PsKernel *fk = kernel_named(ks, "matmul");
    const double padded = B * (proj + 2 * h * vis * (256 + dh));
    g_assert_cmpfloat(fabs(fk->padded_work - padded), <, 1e-9 * padded);
    g_assert_cmpfloat(fk->serial_vpu_flops, ==, B * 6 * h * vis);
    g_assert_cmpint(fk->bound, ==, PS_BOUND_MXU);
    const double want = padded / peak + B * 6 * h * vis / vpu;
    g_assert_cmpfloat(fabs(fk->busy_s - want), <, 1e-9 * want);
    const PsKernel *dk = kernel_named(ks, "dgrad");
    g_assert_cmpfloat(dk->serial_vpu_flops, ==, B * 16 * h * vis);
    const double dwant = dk->padded_flops / peak + B * 16 * h * vis / vpu;
    g_assert_cmpfloat(fabs(dk->busy_s - dwant), <, 1e-9 * dwant);
    /* the op's split: the softmax's time is part of its MXU-bound time */
    g_assert_cmpfloat(fabs(f.serial_s - B * 6 * h * vis / vpu), <, 1e-9 * f.serial_s);
    g_assert_cmpfloat(fabs(b.serial_s - B * 16 * h * vis / vpu), <, 1e-9 * b.serial_s);
    g_assert_cmpfloat(f.serial_s, <, f.mxu_s);
    g_test_message("heads of %.0f: forward %.3f us (softmax %.3f us in series)", dh,
                   fk->busy_s * 1e6, B * 6 * h * vis / vpu * 1e6);
    g_array_free(ks, TRUE);
    ps_model_free(m);
  }
  ps_topology_free(t);
}

/* Score elements of a head at block granularity, by brute force: a b x b
 * block counts whole when any query of it sees any key of it (causal: j <=
 * i; window w: |i - j| < w). */
static double blocks_seen_rect(int S, int bq, int bk, gboolean causal, int w)
{
  double n = 0;
  for (int i0 = 0; i0 < S; i0 += bq)
    for (int j0 = 0; j0 < S; j0 += bk) {
      gboolean any = FALSE;
      for (int i = i0; i < MIN(S, i0 + bq) && !any; i++)
        for (int j = j0; j < MIN(S, j0 + bk) && !any; j++)
          any = (!causal || j <= i) && (w <= 0 || abs(i - j) < w);
      if (any)
        n += (double)MIN(bq, S - i0) * MIN(bk, S - j0);
    }
  return n;
}

static double blocks_seen(int S, int b, gboolean causal, int w)
{
  return blocks_seen_rect(S, b, b, causal, w);
}

/* A sliding window (MaxText's sliding_window_size): flash attention runs
 * the blocks some query of which sees some key within the window, as
 * splash attention skips the rest: one causal layer of S = 4096, window
 * 1024, blocks of 512 runs 512 x (512 + 1024 + 6 x 1536) = 5,505,024
 * scores a head, against 9,437,184 causal alone; brute-force block
 * counts for windows both ways and for ones that do not divide the
 * blocks.  Model FLOPs count S min(S, W) scores a head causal, S min(S,
 * 2W - 1) both ways; the kernels without flash run the whole square. */
static void test_flash_window(void)
{
  const char *fmt =
      "{\"name\": \"fw\", \"input\": {\"shape\": [%d, 512], \"classes\": 512},"
      " \"layers\": [{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 4,"
      " \"causal\": %s, \"bias\": false, \"window\": %d%s}, {\"type\": \"softmax_xent\"}]}";
  const double S = 4096, D = 512, h = 4, dh = 128, W = 1024;
  const double proj = 2 * S * D * 3 * D + 2 * S * D * D;
  g_autofree char *ft = g_strdup_printf(fmt, 4096, "true", 1024, ", \"flash\": true, "
                                                                  "\"flash_block\": 512");
  g_autofree char *pt = g_strdup_printf(fmt, 4096, "true", 1024, "");
  PsModel *flash = model_from(ft), *plain = model_from(pt);
  const double seen = 512.0 * (512 + 1024 + 6 * 1536);
  g_assert_cmpfloat(seen, ==, blocks_seen(4096, 512, TRUE, 1024));
  g_assert_cmpfloat(flash->layers[0].mm[1].done, ==, seen / (S * S));
  g_assert_cmpfloat(plain->layers[0].mm[1].done, ==, 0); /* the whole square, masked */
  g_assert_cmpfloat(ps_model_flops_per_example(flash), ==, 3 * (proj + 4 * h * dh * S * W));
  g_assert_cmpfloat(ps_model_flops_per_example(plain), ==, ps_model_flops_per_example(flash));
  PsTopology *t = topology_load("tpu-v5e-4", NULL);
  PsOpCost f;
  ps_cost_op(t, flash, 0, 0, 2, &xla_bf16, FALSE, NULL, &f);
  g_assert_cmpfloat(fabs(f.mxu_flops - 2 * (proj + 4 * h * dh * seen)), <, 1e-9 * f.mxu_flops);
  ps_topology_free(t);
  /* describe names the window and how many attention layers have it */
  GString *d = g_string_new(NULL);
  ps_model_describe(flash, d);
  g_assert_nonnull(strstr(d->str, "attn: a sliding window of 1024 positions (\"window\"), as 1 "
                                  "of the 1 attention layers"));
  g_string_free(d, TRUE);
  ps_model_free(flash);
  ps_model_free(plain);
  const struct {
    int S, b, w;
    gboolean causal;
  } cases[] = {{2048, 256, 600, TRUE}, {2048, 256, 600, FALSE}, {1000, 128, 300, FALSE},
               {1000, 128, 2000, TRUE}, {512, 512, 100, TRUE}};
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *blk = g_strdup_printf(", \"flash\": true, \"flash_block\": %d", cases[i].b);
    g_autofree char *text = g_strdup_printf(fmt, cases[i].S, cases[i].causal ? "true" : "false",
                                            cases[i].w, blk);
    PsModel *m = model_from(text);
    const double s = cases[i].S, w = cases[i].w;
    const double want = blocks_seen(cases[i].S, cases[i].b, cases[i].causal, cases[i].w);
    g_assert_cmpfloat(fabs(m->layers[0].mm[1].done * s * s - want), <, 1e-6);
    const double keys = MIN(s, cases[i].causal ? w : 2 * w - 1);
    const double pj = 2 * s * D * 3 * D + 2 * s * D * D;
    g_assert_cmpfloat(fabs(ps_model_flops_per_example(m) - 3 * (pj + 4 * h * dh * s * keys)), <,
                      1e-9 * ps_model_flops_per_example(m));
    ps_model_free(m);
  }
}

/* Each flash kernel with blocks of its own ("flash_blocks", splash
 * attention's BlockSizes): forward, dk/dv and dq each compute the scores
 * of the blocks their own mask skipping leaves, counted by brute force
 * over the blocks; backward executes 4 score-sized products over the dkv
 * kernel's scores and 3 over the dq kernel's (5 over the dkv kernel's
 * with the fused kernel).  Square blocks of the default give what
 * flash_block alone gives. */
static void test_flash_blocks(void)
{
  const char *fmt =
      "{\"name\": \"fb\", \"input\": {\"shape\": [%d, 512], \"classes\": 512},"
      " \"layers\": [{\"type\": \"attention\", \"name\": \"attn\", \"heads\": 4,"
      " \"causal\": %s, \"bias\": false, \"flash\": true%s%s}, {\"type\": \"softmax_xent\"}]}";
  const double D = 512, h = 4, dh = 128;
  PsTopology *t = topology_load("tpu-v5e-4", NULL);
  const struct {
    int S, w, q, kv, q_dkv, kv_dkv, q_dq, kv_dq;
    gboolean causal, fused;
  } cases[] = {{2048, 0, 512, 1024, 256, 2048, 1024, 256, TRUE, FALSE},
               {2048, 600, 1024, 1024, 512, 2048, 1024, 512, TRUE, FALSE},
               {1000, 300, 128, 256, 64, 512, 256, 128, FALSE, FALSE},
               {4096, 1024, 2048, 1024, 1024, 4096, 0, 0, TRUE, TRUE},
               {2048, 0, 2048, 2048, 1024, 4096, 0, 0, TRUE, TRUE}};
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    const double S = cases[i].S;
    g_autofree char *win =
        cases[i].w > 0 ? g_strdup_printf(", \"window\": %d", cases[i].w) : g_strdup("");
    g_autofree char *dq = cases[i].fused ? g_strdup(", \"flash_fused_backward\": true")
                                         : g_strdup_printf(", \"q_dq\": %d, \"kv_dq\": %d",
                                                           cases[i].q_dq, cases[i].kv_dq);
    g_autofree char *blk = g_strdup_printf(
        "%s, \"flash_blocks\": {\"q\": %d, \"kv\": %d, \"q_dkv\": %d, \"kv_dkv\": %d%s}",
        win, cases[i].q, cases[i].kv, cases[i].q_dkv, cases[i].kv_dkv,
        cases[i].fused ? "" : dq);
    g_autofree char *text = g_strdup_printf(fmt, cases[i].S, cases[i].causal ? "true" : "false",
                                            cases[i].fused ? dq : "", blk);
    PsModel *m = model_from(text);
    const double fwd = blocks_seen_rect(cases[i].S, cases[i].q, cases[i].kv, cases[i].causal,
                                        cases[i].w);
    const double dkv = blocks_seen_rect(cases[i].S, cases[i].q_dkv, cases[i].kv_dkv,
                                        cases[i].causal, cases[i].w);
    const double dqs = cases[i].fused ? 0
                                      : blocks_seen_rect(cases[i].S, cases[i].q_dq, cases[i].kv_dq,
                                                         cases[i].causal, cases[i].w);
    g_assert_cmpfloat(fabs(m->layers[0].mm[1].done * S * S - fwd), <, 1e-6);
    const double proj = 2 * S * D * 3 * D + 2 * S * D * D;
    const double prods = cases[i].fused ? 5 * dkv : 4 * dkv + 3 * dqs;
    PsOpCost f, b;
    ps_cost_op(t, m, 0, 0, 2, &xla_bf16, FALSE, NULL, &f);
    ps_cost_op(t, m, 0, 0, 2, &xla_bf16, TRUE, NULL, &b);
    g_assert_cmpfloat(fabs(f.mxu_flops - 2 * (proj + 4 * h * dh * fwd)), <, 1e-9 * f.mxu_flops);
    g_assert_cmpfloat(fabs(b.mxu_flops - 2 * (2 * proj + 2 * h * dh * prods)), <,
                      1e-9 * b.mxu_flops);
    ps_model_free(m);
  }
  /* blocks all of the default size cost what no flash_blocks does */
  g_autofree char *sq = g_strdup_printf(fmt, 2048, "true", "", ", \"flash_blocks\": {\"q\": "
                                        "512, \"kv_dkv\": 512}");
  g_autofree char *none = g_strdup_printf(fmt, 2048, "true", "", "");
  PsModel *a = model_from(sq), *n = model_from(none);
  g_assert_cmpfloat(a->layers[0].bwd_flops, ==, n->layers[0].bwd_flops);
  g_assert_cmpfloat(a->layers[0].fwd_bytes, ==, n->layers[0].fwd_bytes);
  ps_model_free(a);
  ps_model_free(n);
  ps_topology_free(t);
}

/* An embedding looked up as a one-hot matmul (MaxText's use_iota_embed),
 * V = 1000 rows of D = 256 over S = 512 ids at batch B = 3 on v5e (MXU
 * 128): forward runs 2 B S V D FLOPs padded to 2 pad8(B S) pad128(V) D
 * and reads the ids and the table once and writes y; backward is the
 * table's gradient alone (no input gradient: ids have none), the same
 * FLOPs, reading ids and dy and writing the float32 table.  A gather runs
 * no product; the model's FLOPs (PaLM's count) leave both out. */
static void test_embedding_matmul(void)
{
  const char *fmt = "{\"name\": \"e\", \"input\": {\"shape\": [512], \"classes\": 1000,"
                    " \"tokens\": true}, \"layers\": [{\"type\": \"embedding\", \"vocab\": 1000,"
                    " \"dim\": 256, \"positions\": false%s}, {\"type\": \"dense\", \"units\": 1000},"
                    " {\"type\": \"softmax_xent\"}]}";
  g_autofree char *mt = g_strdup_printf(fmt, ", \"lookup\": \"matmul\"");
  g_autofree char *gt = g_strdup_printf(fmt, "");
  PsModel *mm = model_from(mt), *ga = model_from(gt);
  PsTopology *t = topology_load("tpu-v5e-4", NULL);
  const double S = 512, V = 1000, D = 256, B = 3, eb = 2;
  PsOpCost f, b, gf, gb;
  ps_cost_op(t, mm, 0, 0, (int64_t)B, &xla_bf16, FALSE, NULL, &f);
  ps_cost_op(t, mm, 0, 0, (int64_t)B, &xla_bf16, TRUE, NULL, &b);
  g_assert_cmpfloat(f.mxu_flops, ==, 2 * B * S * V * D);
  g_assert_cmpfloat(f.padded_flops, ==, 2 * B * S * 1024 * D);
  g_assert_cmpfloat(f.bytes, ==, eb * (B * (S + S * D) + V * D));
  g_assert_cmpint(b.kernels, ==, 1);
  g_assert_cmpfloat(b.mxu_flops, ==, 2 * B * S * V * D);
  g_assert_cmpfloat(b.padded_flops, ==, f.padded_flops);
  g_assert_cmpfloat(b.bytes, ==, eb * B * (S + S * D) + 4 * V * D);
  /* MXU-bound here: forward costs its padded FLOPs at the measured rate */
  double peak = ps_topology_device_peak_flops(t) * t->mxu_efficiency;
  g_assert_cmpfloat(fabs(ps_time_to_s(f.time) - (f.padded_flops / peak + t->op_overhead_s)), <,
                    1e-12);
  ps_cost_op(t, ga, 0, 0, (int64_t)B, &xla_bf16, FALSE, NULL, &gf);
  ps_cost_op(t, ga, 0, 0, (int64_t)B, &xla_bf16, TRUE, NULL, &gb);
  g_assert_cmpfloat(gf.mxu_flops + gb.mxu_flops, ==, 0);
  g_assert_cmpfloat(ps_model_flops_per_example(mm), ==, ps_model_flops_per_example(ga));
  g_assert_cmpint(mm->params, ==, ga->params);
  /* describe says which lookup gives the embedding's FLOPs */
  GString *dm = g_string_new(NULL), *dg = g_string_new(NULL);
  ps_model_describe(mm, dm);
  ps_model_describe(ga, dg);
  g_assert_nonnull(strstr(dm->str, "looked up as a one-hot matmul"));
  g_assert_null(strstr(dg->str, "one-hot"));
  g_string_free(dm, TRUE);
  g_string_free(dg, TRUE);
  ps_topology_free(t);
  ps_model_free(mm);
  ps_model_free(ga);
}

/* The model file's mistakes about flash attention are refused, naming the
 * field. */
static void test_flash_errors(void)
{
  const char *bad[][2] = {
      {"\"flash\": true, \"dropout\": 0.1", "no dropout"},
      {"\"flash_block\": 128", "flash_block"},
      {"\"flash_fused_backward\": true", "flash_fused_backward"},
      {"\"flash\": true, \"flash_block\": 0", "flash_block"},
      {"\"flash_blocks\": {\"q\": 8}", "flash_blocks"},
      {"\"flash\": true, \"flash_blocks\": {\"q\": 0}", "flash_blocks.q"},
      {"\"flash\": true, \"flash_fused_backward\": true, \"flash_blocks\": {\"kv_dq\": 8}",
       "kv_dq"},
      {"\"window\": 0", "window"},
      {"\"window\": -4", "window"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_autofree char *text = g_strdup_printf(
        "{\"name\": \"fa\", \"input\": {\"shape\": [16, 8], \"classes\": 8},"
        " \"layers\": [{\"type\": \"attention\", \"heads\": 2, %s}, {\"type\": \"softmax_xent\"}]}",
        bad[i][0]);
    json_object *o = json_tokener_parse(text);
    GError *error = NULL;
    PsModel *m = ps_model_from_json(o, "bad.json", "", &error);
    g_assert_null(m);
    g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
    g_assert_nonnull(strstr(error->message, "bad.json"));
    g_assert_nonnull(strstr(error->message, bad[i][1]));
    g_clear_error(&error);
    json_object_put(o);
  }
  /* a misspelt block or a block list: refused, naming the key */
  const char *shape[][2] = {{"{\"k\": 8}", "unknown key 'k'"}, {"[8]", "must be an object"}};
  for (size_t i = 0; i < G_N_ELEMENTS(shape); i++) {
    g_autofree char *text = g_strdup_printf(
        "{\"name\": \"fa\", \"input\": {\"shape\": [16, 8], \"classes\": 8},"
        " \"layers\": [{\"type\": \"attention\", \"heads\": 2, \"flash\": true,"
        " \"flash_blocks\": %s}, {\"type\": \"softmax_xent\"}]}",
        shape[i][0]);
    json_object *o = json_tokener_parse(text);
    GError *error = NULL;
    g_assert_null(ps_model_from_json(o, "bad.json", "", &error));
    g_assert_nonnull(error);
    g_assert_nonnull(strstr(error->message, "bad.json: layers[0].flash_blocks"));
    g_assert_nonnull(strstr(error->message, shape[i][1]));
    g_clear_error(&error);
    json_object_put(o);
  }
}


/* numerics.quantization fp8 (MaxText's fp8_full), and int8: every product with a
 * weight operand runs at the chip's fp8 rate, so its padded FLOPs count at
 * bf16 peak / fp8 peak (0.5 on TPU7x: 2307 and 4614 TFLOP/s); the token
 * embedding, the head the loss scores and attention's products of two
 * activations keep the bf16 rate.  Layer by layer, forward and backward,
 * on Llama 3.1 70B. */
static void test_fp8(void)
{
  const char *fp8[] = {"numerics.quantization=fp8", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("maxtext-tpu7x", fp8, &error);
  g_assert_no_error(error);
  PsCostOptions q, b;
  ps_strategy_cost_options(e, &q);
  g_assert_cmpfloat(q.quant_share, ==, 2307e12 / 4614e12);
  b = q;
  b.quant_share = 0;
  const PsModel *m = e->model;
  int halved = 0, kept = 0, attn = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *l = &m->layers[i];
    if (l->n_mm == 0)
      continue;
    for (int bwd = 0; bwd <= 1; bwd++) {
      PsOpCost cq, cb;
      ps_cost_op(e->topology, m, i, i, 2, &q, bwd, NULL, &cq);
      ps_cost_op(e->topology, m, i, i, 2, &b, bwd, NULL, &cb);
      g_assert_cmpfloat(cq.mxu_flops, ==, cb.mxu_flops); /* the same work */
      /* and the same padded work, which `describe --kernels` divides by */
      GArray *kq = g_array_new(FALSE, FALSE, sizeof(PsKernel));
      PsOpCost unused;
      ps_cost_op(e->topology, m, i, i, 2, &q, bwd, kq, &unused);
      double work = 0;
      for (guint j = 0; j < kq->len; j++)
        work += g_array_index(kq, PsKernel, j).padded_work;
      g_assert_cmpfloat(fabs(work - cb.padded_flops), <=, 1e-12 * cb.padded_flops);
      g_array_free(kq, TRUE);
      gboolean head = i + 1 < m->n_layers && m->layers[i + 1].kind == PS_LAYER_SOFTMAX_XENT;
      if (l->kind == PS_LAYER_EMBEDDING || head) {
        g_assert_cmpfloat(cq.padded_flops, ==, cb.padded_flops);
        kept++;
      } else if (l->kind == PS_LAYER_ATTENTION) {
        /* its projections halve, its score and context products do not */
        g_assert_cmpfloat(cq.padded_flops, <, cb.padded_flops);
        g_assert_cmpfloat(cq.padded_flops, >, 0.5 * cb.padded_flops * (1 + 1e-9));
        attn++;
      } else {
        g_assert_cmpfloat(fabs(cq.padded_flops - 0.5 * cb.padded_flops), <=,
                          1e-12 * cb.padded_flops);
        halved++;
      }
    }
  }
  g_test_message("%d layer passes halved, %d kept, %d attention", halved, kept, attn);
  g_assert_cmpint(halved, >=, 2 * 2 * 80); /* the gated product and the down projection */
  g_assert_cmpint(kept, ==, 4);            /* the embedding and the head, each way */
  g_assert_cmpint(attn, ==, 2 * 80);
  ps_experiment_free(e);

  /* int8 (MaxText's quantization=int8) on v6e: its products at the int8
   * peak, 1836 against 918 TOP/s, a dense layer's padded FLOPs halved */
  const char *int8[] = {"numerics.quantization=int8", "topology=tpu-v6e-256", "model=llama3.1-8b",
                        "global_batch=256", "strategy.mesh.fsdp=256", NULL};
  e = ps_experiment_load("maxtext-tpu7x", int8, &error);
  g_assert_no_error(error);
  ps_strategy_cost_options(e, &q);
  g_assert_cmpfloat(q.quant_share, ==, 918e12 / 1836e12);
  b = q;
  b.quant_share = 0;
  int dense = 0;
  while (e->model->layers[dense].kind != PS_LAYER_SWIGLU)
    dense++;
  PsOpCost cq, cb;
  ps_cost_op(e->topology, e->model, dense, dense, 2, &q, FALSE, NULL, &cq);
  ps_cost_op(e->topology, e->model, dense, dense, 2, &b, FALSE, NULL, &cb);
  g_assert_cmpfloat(fabs(cq.padded_flops - 0.5 * cb.padded_flops), <=, 1e-12 * cb.padded_flops);
  ps_experiment_free(e);

  /* no fp8 rate on the chip, numerics on, an unknown value: errors naming the key */
  const char *v6e[] = {"numerics.quantization=fp8", "topology=tpu-v6e-256", NULL};
  const char *num[] = {"numerics.quantization=fp8", "numerics.enabled=true", NULL};
  const char *bad[] = {"numerics.quantization=int4", NULL};
  const char *no_int8[] = {"numerics.quantization=int8", NULL}; /* TPU7x lists no int8 peak */
  const char *const *cases[] = {v6e, num, bad, no_int8};
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    g_assert_null(ps_experiment_load("maxtext-tpu7x", cases[k], &error));
    g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
    g_test_message("%s", error->message);
    g_assert_nonnull(strstr(error->message, "numerics.quantization"));
    g_clear_error(&error);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  g_test_add_func("/cost/dense-bytes", test_dense_bytes);
  g_test_add_func("/cost/shipped-models-nonnegative", test_shipped_models_nonnegative);
  g_test_add_func("/cost/conv-padding", test_conv_padding);
  g_test_add_func("/cost/matmul-points", test_matmul_points);
  g_test_add_func("/cost/bottleneck-kernels", test_bottleneck_kernels);
  g_test_add_func("/cost/precision-passes", test_precision_passes);
  g_test_add_func("/cost/fusion-order", test_fusion_order);
  g_test_add_func("/cost/flash-attention", test_flash_attention);
  g_test_add_func("/cost/flash-errors", test_flash_errors);
  g_test_add_func("/cost/flash-window", test_flash_window);
  g_test_add_func("/cost/flash-mxu-softmax", test_flash_mxu_softmax);
  g_test_add_func("/cost/flash-blocks", test_flash_blocks);
  g_test_add_func("/cost/embedding-matmul", test_embedding_matmul);
  g_test_add_func("/cost/fp8", test_fp8);
  g_test_add_func("/cost/clock-factor", test_clock_factor);
  return g_test_run();
}

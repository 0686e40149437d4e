/* test_shard_numerics.c: real arithmetic on shard meshes (run/numerics*.c
 * over strategy/shard*.c) against a one-device reference computed here
 * with model/net.h on the same global batch.
 *
 * - /shard-numerics/fsdp/gradients: one step of SGD (lr 1, no momentum) of
 *   the char-level decoder on the fortunes text, on tpu-v4-8 with fsdp 4,
 *   data 2 x fsdp 2 and fsdp 2 x data 2 without prefetch or regather:
 *   the gathered weights give back the step's gradient g = p0 - p1, which
 *   must equal the one-device full-batch gradient within the bound below;
 *   the first step's loss equals the one-device loss;
 * - /shard-numerics/fsdp/replicas: five Adam steps on data 2 x fsdp 2:
 *   the data replicas' weights are identical (replica divergence 0) and
 *   equal those of the replicate strategy on the same batches;
 * - /shard-numerics/fsdp/clip, /shard-numerics/tensor/clip: the same with
 *   clipping by global norm, against the replicate strategy's clipping;
 * - /shard-numerics/tensor/gradients: the same step on tensor 4, tensor 2 x
 *   data 2, (data innermost) data 2 x tensor 2, tensor 2 x fsdp 2 (also
 *   without prefetch or regather) of the char decoder, and on tensor 2 x
 *   data 2 and tensor 2 x fsdp 2 of tiny-decoder (RMSNorm, SwiGLU, rotary,
 *   grouped-query attention), within the bound (see the tensor note below),
 *   and on tensor 4, 2 x data 2, 2 x fsdp 2 and 2 x sequence 2 of
 *   tests/data/models/cols-gather (a column-parallel matmul's output
 *   all-gathered by columns before a layernorm);
 * - /shard-numerics/tensor/replicas: as fsdp's, on data 2 x tensor 2, where
 *   the divergence also compares the tensor group's copies of the norms;
 * - /shard-numerics/tensor/partials: each partial-sum layer's T rank
 *   outputs add up to the full output and one rank's alone (an all-reduce
 *   that lost a member) is far from it; the ranks' ranges tile each layer.
 * - /shard-numerics/sequence/gradients: the same step on tensor 2 x
 *   sequence 2 (also with full rematerialization) on tpu-v4-8, and with
 *   data 2 or fsdp 2 on tpu-v4-16, within the bound;
 * - /shard-numerics/sequence/replicas: as fsdp's, on data 2 x tensor 2 x
 *   sequence 2 (with collective matmul too), the divergence also
 *   comparing the group's norm copies;
 * - /shard-numerics/window/gradients: a sliding window's model (flash
 *   blocks of 16, window 24) on fsdp 4 and tensor 2 x sequence 2 against
 *   its own one-device reference;
 * - /shard-numerics/collective-matmul/gradients: the step with
 *   collective matmul on tensor 4, tensor 2 x data 2, tensor 2 x sequence
 *   2 and (tpu-v4-16) tensor 2 x sequence 2 x fsdp 2, within the bound.
 *
 * The bound.  Each gradient element is a sum over the K = B S token rows
 * of the global batch (B windows of S tokens) of per-row terms t_r.  The
 * one-device kernel sums them in one order; the mesh sums each device's
 * B S / R rows, then the R partial sums in the collective's order: another
 * association of the same K terms.  Recursive float32 summation in any
 * order is within gamma_(K-1) sum |t_r| of the exact sum (Higham, Accuracy
 * and Stability of Numerical Algorithms, 2002, eq. 4.4; gamma_n = n u /
 * (1 - n u), u = 2^-24), so the two differ by at most 2 gamma_K sum |t_r|.
 * Per-row terms are not at hand, and within one window they may cancel
 * (a key's bias has a gradient that is zero but for rounding), so the
 * test bounds each layer's gradients norm-wise: sum |t_r| <= the layer's
 * largest sum over windows of |g_w| / B (each window's own gradient,
 * computed here).  Reading g back from p0 - p1 adds at most
 * u (|p0| + |p1|). */
#include "io/dataset.h"
#include "model/net-tensor.h"
#include "model/net.h"
#include "run/experiment.h"
#include "run/run.h"

#include <math.h>
#include <string.h>

static const char *exp_path = "experiments/char-decoder-v4-8.json";
#define U 5.9604644775390625e-08 /* 2^-24 */

typedef struct {
  size_t n;
  double loss;
  float *p0;    /* initial weights */
  float *grad;  /* full-batch gradient of the mean loss */
  double *abs;  /* per weight: its layer's largest sum over windows of
                   |window gradient| / B */
  int64_t K;    /* token rows of the batch */
} Reference;

/* The one-device step on the first global batch the run draws. */
static gboolean reference(const PsExperiment *e, Reference *ref)
{
  GError *error = NULL;
  const PsInputConfig *in = &e->input;
  PsDataset *ds = ps_dataset_open_text(in->text_file, in->sequence, in->stride,
                                       in->test_fraction, TRUE, &error);
  if (!ds) {
    g_test_skip(error->message);
    g_clear_error(&error);
    return FALSE;
  }
  int B = (int)e->global_batch;
  size_t elems = ps_dataset_example_elems(ds), per = ps_dataset_labels_per_example(ds);
  float *x = g_new(float, (size_t)B * elems);
  int32_t *y = g_new(int32_t, (size_t)B * per);
  PsSampler *s = ps_sampler_new(ds, in->shuffle, e->numerics.seed);
  ps_sampler_next(s, B, x, y);
  PsNet *net = ps_net_new(e->model, B, PS_PRECISION_F32, e->numerics.seed, &error);
  g_assert_no_error(error);
  ref->n = ps_net_n_params(net);
  ref->p0 = g_memdup2(ps_net_params(net), ref->n * sizeof(float));
  ps_net_zero_grads(net);
  ps_net_set_input(net, x, y, B);
  ps_net_forward(net);
  ref->loss = ps_net_loss(net);
  ps_net_backward(net, 1.0f);
  ref->grad = g_memdup2(ps_net_grads(net), ref->n * sizeof(float));
  ref->abs = g_new0(double, ref->n);
  for (int w = 0; w < B; w++) {
    ps_net_zero_grads(net);
    ps_net_set_input(net, x + (size_t)w * elems, y + (size_t)w * per, 1);
    ps_net_forward(net);
    ps_net_backward(net, 1.0f);
    const float *g = ps_net_grads(net);
    for (size_t i = 0; i < ref->n; i++)
      ref->abs[i] += fabs((double)g[i]) / B;
  }
  ref->K = (int64_t)B * (int64_t)per;
  for (int l = 0; l < e->model->n_layers; l++) {
    size_t off = 0, len = 0;
    ps_net_layer_params(net, l, &off, &len);
    double most = 0;
    for (size_t i = off; i < off + len; i++)
      most = MAX(most, ref->abs[i]);
    for (size_t i = off; i < off + len; i++)
      ref->abs[i] = most;
  }
  ps_net_free(net);
  ps_sampler_free(s);
  ps_dataset_free(ds);
  g_free(x);
  g_free(y);
  return TRUE;
}

static void reference_clear(Reference *ref)
{
  g_free(ref->p0);
  g_free(ref->grad);
  g_free(ref->abs);
}

static PsExperiment *load(const char *const *ov)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(exp_path, ov, &error);
  g_assert_no_error(error);
  return e;
}

/* One SGD step of the mesh (of model, NULL: the experiment's) on topo
 * (NULL: the experiment's); its gradient against ref. */
static const char *attention_kernel = "attention_kernel=model";

/* One more override of check_mesh_on's runs, or NULL. */
static const char *mesh_override;

static void check_mesh_on(const Reference *ref, const char *model, const char *topo,
                          const char *mesh, const char *extra)
{
  g_autofree char *strategy = g_strdup_printf("strategy={\"kind\": \"shard\", \"mesh\": %s%s}",
                                              mesh, extra);
  g_autofree char *m = g_strdup_printf("model=%s", model ? model : "char-decoder");
  g_autofree char *t = g_strdup_printf("topology=%s", topo ? topo : "tpu-v4-8");
  const char *ov[] = {"steps=1", "steps_per_run=1", "numerics.evaluate=false",
                      "optimizer={\"kind\": \"sgd\", \"learning_rate\": 1, \"momentum\": 0}",
                      strategy, m, t, attention_kernel, mesh_override, NULL};
  PsExperiment *e = load(ov);
  PsRunOptions opt = {.keep_params = TRUE};
  PsSummary s;
  GError *error = NULL;
  g_assert_true(ps_run(e, &opt, &s, &error));
  g_assert_no_error(error);
  g_assert_cmpuint(s.n_params, ==, ref->n);
  double gamma = 2 * (double)ref->K * U / (1 - (double)ref->K * U);
  double worst = 0;
  for (size_t i = 0; i < ref->n; i++) {
    double g = (double)ref->p0[i] - s.params[i];
    double bound = gamma * ref->abs[i] + U * (fabs(ref->p0[i]) + fabs(s.params[i]));
    double over = fabs(g - ref->grad[i]) / bound;
    if (over > 1)
      g_error("%s: gradient %zu is %.9g, one device %.9g; bound %.3g", mesh, i, g,
              ref->grad[i], bound);
    worst = MAX(worst, over);
  }
  g_test_message("%s: worst gradient difference %.3f of its bound", mesh, worst);
  /* the loss: a mean over K token losses, reassociated likewise */
  g_assert_cmpfloat(fabs(s.loss_first - ref->loss), <=, 2 * (double)ref->K * U * ref->loss);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void check_model_mesh(const Reference *ref, const char *model, const char *mesh,
                             const char *extra)
{
  check_mesh_on(ref, model, NULL, mesh, extra);
}

static void check_mesh(const Reference *ref, const char *mesh, const char *extra)
{
  check_model_mesh(ref, NULL, mesh, extra);
}

/* checks(ref) with the char decoder's one-device reference (skipped
 * without the text). */
static void with_reference(void (*checks)(const Reference *ref))
{
  const char *ov[] = {NULL};
  PsExperiment *e = load(ov);
  Reference ref;
  if (!reference(e, &ref)) {
    ps_experiment_free(e);
    return;
  }
  checks(&ref);
  reference_clear(&ref);
  ps_experiment_free(e);
}

static void fsdp_meshes(const Reference *ref)
{
  check_mesh(ref, "{\"fsdp\": 4}", "");
  check_mesh(ref, "{\"data\": 2, \"fsdp\": 2}", "");
  check_mesh(ref, "{\"fsdp\": 2, \"data\": 2}", ", \"prefetch\": false, \"regather\": false");
}

static void test_fsdp_gradients(void)
{
  with_reference(fsdp_meshes);
}

/* Five Adam steps of the mesh (on topo, NULL: the experiment's) against
 * the replicate strategy on the same batches: replicas identical (replica
 * divergence 0), weights close. */
static void check_replicas_with(const char *topo, const char *mesh, const char *extra,
                                PsSummary *out);
/* check_replicas_with's largest weight difference, of its last run */
static double last_worst;

static void check_replicas_on(const char *topo, const char *mesh)
{
  check_replicas_with(topo, mesh, NULL, NULL);
}

/* The same with one more override on both runs (NULL: none); out (NULL:
 * not kept) takes the mesh's summary. */
static void check_replicas_with(const char *topo, const char *mesh, const char *extra,
                                PsSummary *out)
{
  g_autofree char *st = g_strdup_printf("strategy={\"kind\": \"shard\", \"mesh\": %s}", mesh);
  g_autofree char *t = g_strdup_printf("topology=%s", topo ? topo : "tpu-v4-8");
  const char *rep[] = {"steps=5", "steps_per_run=5", "numerics.evaluate=false", extra, NULL};
  const char *sh[] = {"steps=5", "steps_per_run=5", "numerics.evaluate=false", st, t, extra,
                      NULL};
  if (!extra) {
    rep[3] = NULL;
    sh[5] = NULL;
  }
  PsSummary s[2];
  for (int k = 0; k < 2; k++) {
    PsExperiment *e = load(k ? sh : rep);
    if (!g_file_test(e->input.text_file, G_FILE_TEST_EXISTS)) {
      g_test_skip("no fortunes text");
      ps_experiment_free(e);
      return;
    }
    PsRunOptions opt = {.keep_params = TRUE};
    GError *error = NULL;
    g_assert_true(ps_run(e, &opt, &s[k], &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  /* every data replica reduces the same shards in one all-reduce */
  g_assert_cmpfloat(s[1].replica_divergence, ==, 0);
  /* five Adam steps of lr 0.003 from the same weights: a wrong gradient
   * moves weights by up to 5 lr = 0.015; the reassociated ones by less
   * than 2e-4.  The largest difference is an attention key bias, whose
   * gradient is zero but for rounding (the softmax ignores a shift of a
   * row's scores), which Adam turns into steps of about lr |g| / eps: 3.3e-5
   * on data 2 x fsdp 2, 8.5e-5 on data 2 x tensor 2. */
  g_assert_cmpuint(s[0].n_params, ==, s[1].n_params);
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < s[0].n_params; i++)
    if (fabs((double)s[0].params[i] - s[1].params[i]) > worst) {
      worst = fabs((double)s[0].params[i] - s[1].params[i]);
      wi = i;
    }
  g_test_message("%s vs replicate after 5 steps: %.3g at %zu", mesh, worst, wi);
  g_assert_cmpfloat(worst, <, 2e-4);
  last_worst = worst;
  g_assert_cmpfloat_with_epsilon(s[0].loss_last, s[1].loss_last, 1e-4 * s[0].loss_last);
  ps_summary_clear(&s[0]);
  if (out)
    *out = s[1];
  else
    ps_summary_clear(&s[1]);
}

static void check_replicas(const char *mesh)
{
  check_replicas_on(NULL, mesh);
}

static void test_fsdp_replicas(void)
{
  check_replicas("{\"data\": 2, \"fsdp\": 2}");
}

/* Clipping by global norm on an fsdp mesh: each device's norm of its
 * gradient shards, added up over the fsdp group, scales them as the
 * replicate strategy's clipping of the whole reduced gradient does (five
 * Adam steps, weights within the bound above), on data 2 x fsdp 2 and
 * fsdp 4; at 0.01 the limit is below every step's norm, so the clipped
 * run is far from the unclipped one (Adam's steps do not depend on a
 * constant scale of the gradient, but the scale changes with the norm
 * from step to step, and epsilon's share with it). */
/* Under the sanitizers (make check-asan sets PODSIM_TEST_SANITIZED) the
 * mesh lists below run their first mesh only: each mesh runs the same
 * code at another size, ten times slower there, and make test runs every
 * mesh unsanitized. */
static guint sanitized_meshes(guint n)
{
  if (g_getenv("PODSIM_TEST_SANITIZED") && n > 1) {
    g_test_message("sanitized build: the first of %u meshes (make test runs them all)", n);
    return 1;
  }
  return n;
}

static void clip_meshes(const char *const *meshes, guint n)
{
  n = sanitized_meshes(n);
  for (guint k = 0; k < n; k++) {
    PsSummary clipped = {0}, plain = {0};
    check_replicas_with(NULL, meshes[k], "optimizer.clip_norm=0.01", &clipped);
    /* clipped to 0.01, a gradient of rounding size (the key bias's) is a
     * hundredth of what Adam's lr |g| / eps turns into the 2e-4 above, so
     * the clipped runs agree within 2e-6; a norm off by a few percent
     * (replicated weights counted once per rank) moves them by 1e-5 */
    g_assert_cmpfloat(last_worst, <, 2e-6);
    check_replicas_with(NULL, meshes[k], NULL, &plain);
    if (clipped.n_params == 0 || plain.n_params == 0) {
      ps_summary_clear(&clipped);
      ps_summary_clear(&plain);
      return; /* skipped: no fortunes text */
    }
    double apart = 0;
    for (size_t i = 0; i < clipped.n_params; i++)
      apart = fmax(apart, fabs((double)clipped.params[i] - plain.params[i]));
    g_test_message("%s: clipped vs not after 5 steps: %.3g", meshes[k], apart);
    g_assert_cmpfloat(apart, >, 1e-3);
    ps_summary_clear(&clipped);
    ps_summary_clear(&plain);
  }
}

/* fsdp 8 on tpu-v4-16: a multiring reduce-scatter (auto's choice there)
 * rounds each stream's part up, giving some device more than ceil(count /
 * 8) floats (1042 of 1040 for the head); without a data axis each shard
 * slot takes as many as the largest blocks (it once overran the shards'
 * buffer, then was refused).  One SGD step's gradient against the
 * one-device reference, with multiring and with auto; five clipped SGD
 * steps against the replicate strategy. */
static void multiring_fsdp(const Reference *ref)
{
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"fsdp\": 8}", "");
  mesh_override = "collective.algorithm=multiring";
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"fsdp\": 8}", "");
  mesh_override = NULL;
}

static void test_fsdp_blocks_fit(void)
{
  with_reference(multiring_fsdp);
  /* clipped: each slot's blocks scaled, not the slots' first floats (a
   * device whose blocks leave part of a slot empty scaled its padding and
   * left the tail of its last blocks as they were: 0.093 off after these
   * five steps) */
  check_replicas_with("tpu-v4-16", "{\"fsdp\": 8}",
                      "optimizer={\"kind\": \"sgd\", \"learning_rate\": 1, \"momentum\": 0, "
                      "\"clip_norm\": 0.05}",
                      NULL);
}

/* LARS and LAMB on fsdp meshes: each device's update takes its blocks'
 * sums of squares of each layer (LAMB after its moments), the fsdp group
 * all-reduces them, and each block is stepped with its layer's whole
 * norms: five steps against the replicate strategy's (whole layers, one
 * pass), within check_replicas_with's bound of 2e-4 (each block taking its
 * own norms: 0.016 with LAMB, 7.8 with LARS); clipped too, the norm's
 * all-reduce first. */
static void layerwise_meshes(const char *const *meshes, guint n)
{
  const char *opts[] = {
      "optimizer={\"kind\": \"lamb\", \"learning_rate\": 0.003}",
      "optimizer={\"kind\": \"lars\", \"learning_rate\": 20}",
      "optimizer={\"kind\": \"lamb\", \"learning_rate\": 0.003, \"clip_norm\": 0.1}",
  };
  n = sanitized_meshes(n);
  for (guint k = 0; k < n; k++)
    for (guint o = 0; o < G_N_ELEMENTS(opts); o++) {
      g_test_message("%s", opts[o]);
      check_replicas_with(NULL, meshes[k], opts[o], NULL);
    }
}

static void test_fsdp_layerwise(void)
{
  const char *meshes[] = {"{\"fsdp\": 4}", "{\"data\": 2, \"fsdp\": 2}"};
  layerwise_meshes(meshes, G_N_ELEMENTS(meshes));
}

/* The same on tensor meshes: each device sums the squares of its owned
 * part of each split layer and 1/T of each layer its group holds whole
 * (ps_run_tensor_clip's rule; the char decoder's whole layers are its
 * norms, which no trust ratio adapts), the tensor x sequence group
 * all-reduces them between the passes (each piece's own norms: 0.016). */
static void test_tensor_layerwise(void)
{
  const char *meshes[] = {"{\"data\": 2, \"tensor\": 2}", "{\"tensor\": 2, \"sequence\": 2}"};
  layerwise_meshes(meshes, G_N_ELEMENTS(meshes));
}

/* A device updates its reduce-scatter's blocks and gathers its
 * all-gather's: on six devices with the gradients reduced in bf16, auto
 * times the reduce-scatter (2 bytes a weight) and the all-gather (4) as
 * different algorithms, which cut the layer differently (the weights
 * trained wrong, silently: the CNN's loss 3.33 against 2.42 on data 6).
 * Refused before the run, naming the collectives; with ring the run
 * matches data 6's (the same bf16 sums, reassociated). */
static void test_fsdp_gathers_match(void)
{
  const char *ov[] = {"topology=tpu-v4-8", "topology.torus.dims=[3,2,1]", "topology.host.chips=1",
                      "global_batch=24", "steps=4", "steps_per_run=4", "numerics.evaluate=false",
                      "strategy={\"kind\": \"shard\", \"mesh\": {\"fsdp\": 6}, "
                      "\"reduce_precision\": \"bf16\"}",
                      NULL, NULL};
  PsExperiment *e = load(ov);
  if (!g_file_test(e->input.text_file, G_FILE_TEST_EXISTS)) {
    g_test_skip("no fortunes text");
    ps_experiment_free(e);
    return;
  }
  PsRunOptions opt = {0};
  PsSummary s[2];
  GError *error = NULL;
  g_assert_false(ps_run(e, &opt, &s[0], &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(error->message, "collective.algorithm: with numerics.enabled=true on "
                                          "an fsdp axis, 'fsdp reduce-scatter"));
  g_assert_nonnull(strstr(error->message, "cut the layer's weights into different blocks"));
  g_clear_error(&error);
  ps_experiment_free(e);
  ov[8] = "collective.algorithm=ring";
  for (int k = 0; k < 2; k++) {
    if (k == 1)
      ov[7] = "strategy={\"kind\": \"shard\", \"mesh\": {\"data\": 6}, "
              "\"reduce_precision\": \"bf16\"}";
    e = load(ov);
    g_assert_true(ps_run(e, &opt, &s[k], &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  g_test_message("fsdp 6, ring: loss %.6f; data 6: %.6f", s[0].loss_last, s[1].loss_last);
  g_assert_cmpfloat(fabs(s[0].loss_last - s[1].loss_last), <, 1e-4 * s[1].loss_last);
  ps_summary_clear(&s[0]);
  ps_summary_clear(&s[1]);
}

static void test_fsdp_clip(void)
{
  const char *meshes[] = {"{\"data\": 2, \"fsdp\": 2}", "{\"fsdp\": 4}"};
  clip_meshes(meshes, G_N_ELEMENTS(meshes));
}

/* The same on tensor meshes: each device's owned gradients of its split
 * layers and a 1/T share of the replicated ones (norms, biases kept
 * whole), added up over the tensor x sequence group by the norm's
 * all-reduce (with fsdp, of its packed shards, over the fsdp group too);
 * on data 2 x tensor 2, tensor 4, tensor 2 x sequence 2 and tensor 2 x
 * fsdp 2. */
static void test_tensor_clip(void)
{
  const char *meshes[] = {"{\"data\": 2, \"tensor\": 2}", "{\"tensor\": 4}",
                          "{\"tensor\": 2, \"sequence\": 2}",
                          "{\"tensor\": 2, \"fsdp\": 2}"};
  clip_meshes(meshes, G_N_ELEMENTS(meshes));
}

/* Tensor meshes.  Beyond the batch split bounded above, a tensor mesh
 * reassociates two kinds of sums: each partial-sum layer's contraction
 * (the heads' output projection, the row-parallel matmul, the embedding's
 * rows and positions) is summed by rank and then across the group, and
 * the vocab-parallel loss shifts its exponentials by the ranks' mean
 * maximum instead of the row's maximum.  Each perturbs a per-row term t_r
 * by a relative O(n u), n at most the longest contraction (256), against
 * the batch's 2 gamma_K with K = 1024 token rows: the same bound holds,
 * with room (the tests print how much of it each weight uses). */
static void test_tensor_gradients(void)
{
  const char *models[] = {"char-decoder", "tiny-decoder", "tests/data/models/cols-gather.json"};
  for (int k = 0; k < 3; k++) {
    g_autofree char *m = g_strdup_printf("model=%s", models[k]);
    const char *ov[] = {m, NULL};
    PsExperiment *e = load(ov);
    Reference ref;
    if (!reference(e, &ref)) {
      ps_experiment_free(e);
      return;
    }
    /* tiny-decoder's 2 key/value heads do not split 4 ways */
    if (k != 1)
      check_model_mesh(&ref, models[k], "{\"tensor\": 4}", "");
    check_model_mesh(&ref, models[k], "{\"tensor\": 2, \"data\": 2}", "");
    check_model_mesh(&ref, models[k], "{\"tensor\": 2, \"fsdp\": 2}", "");
    if (k == 2) /* the columns gathered onto rows, and backward the rows' gradients */
      check_model_mesh(&ref, models[k], "{\"tensor\": 2, \"sequence\": 2}", "");
    if (k == 0) { /* data innermost: other groups, other devices */
      check_model_mesh(&ref, models[k], "{\"tensor\": 2, \"data\": 2}",
                       ", \"mesh_order\": [\"tensor\", \"fsdp\", \"sequence\", \"data\"]");
      check_model_mesh(&ref, models[k], "{\"fsdp\": 2, \"tensor\": 2}",
                       ", \"prefetch\": false, \"regather\": false");
    }
    reference_clear(&ref);
    ps_experiment_free(e);
  }
}

/* On tensor 2 x data 2, the replica divergence covers the tensor group's
 * copies of replicated weights (the norms) as well. */
static void test_tensor_replicas(void)
{
  check_replicas("{\"data\": 2, \"tensor\": 2}");
}

/* Net n's weights zero outside what rank t of T owns in every layer. */
static void keep_shard(PsNet *n, const int *split, int n_layers, int t, int T)
{
  g_autoptr(GArray) rgs = g_array_new(FALSE, FALSE, sizeof(PsNetRange));
  for (int l = 0; l < n_layers; l++) {
    GError *error = NULL;
    g_assert_true(ps_net_tensor_ranges(n, l, (PsTensorSplit)split[l], t, T, rgs, &error));
    g_assert_no_error(error);
  }
  size_t np = ps_net_n_params(n);
  float *keep = g_new0(float, np);
  for (guint k = 0; k < rgs->len; k++) {
    const PsNetRange *rg = &g_array_index(rgs, PsNetRange, k);
    for (size_t j = rg->off; j < rg->off + rg->len; j++) {
      g_assert_cmpfloat(keep[j], ==, 0); /* disjoint */
      keep[j] = 1;
    }
  }
  float *p = ps_net_params(n);
  for (size_t j = 0; j < np; j++)
    p[j] *= keep[j];
  g_free(keep);
}

/* The ranks' ranges tile each split layer's weights (every element owned
 * by exactly one rank) and every rank owns all of a replicated one. */
static void check_tiling(const PsNet *n, const int *split, int n_layers, int T)
{
  g_autofree int *cover = g_new0(int, ps_net_n_params(n));
  for (int t = 0; t < T; t++) {
    g_autoptr(GArray) rgs = g_array_new(FALSE, FALSE, sizeof(PsNetRange));
    for (int l = 0; l < n_layers; l++)
      g_assert_true(ps_net_tensor_ranges(n, l, (PsTensorSplit)split[l], t, T, rgs, NULL));
    for (guint k = 0; k < rgs->len; k++) {
      const PsNetRange *rg = &g_array_index(rgs, PsNetRange, k);
      for (size_t j = rg->off; j < rg->off + rg->len; j++)
        cover[j]++;
    }
  }
  for (int l = 0; l < n_layers; l++) {
    size_t off = 0, len = 0;
    ps_net_layer_params(n, l, &off, &len);
    for (size_t j = off; j < off + len; j++)
      g_assert_cmpint(cover[j], ==,
                      split[l] == PS_SPLIT_NONE || split[l] == PS_SPLIT_SEQUENCE ? T : 1);
  }
}

/* Each layer the lowering leaves as a partial sum (heads, row-parallel,
 * vocabulary embedding): the T ranks' outputs, each from its shard on the
 * full net's input to the layer, sum to the full output (to rounding: a
 * contraction regrouped, within 1e-5 of the output's largest magnitude),
 * and any one rank's alone, a tensor all-reduce that lost a member, is
 * far from it.  Also the ranks' ranges tile every layer's weights. */
static void check_partials(const char *model, int T)
{
  g_autofree char *m = g_strdup_printf("model=%s", model);
  g_autofree char *st = g_strdup_printf(
      "strategy={\"kind\": \"shard\", \"mesh\": {\"tensor\": %d, \"data\": %d}}", T, 4 / T);
  const char *ov[] = {m, st, NULL};
  PsExperiment *e = load(ov);
  GError *error = NULL;
  PsPlan *plan = ps_run_compile(e, &error);
  g_assert_no_error(error);
  const PsModel *md = e->model;
  enum { B = 2 };
  int S = (int)md->in_shape[0];
  float x[B * 64];
  int32_t y[B * 64];
  g_assert_cmpint(S, <=, 64);
  for (int i = 0; i < B * S; i++) {
    x[i] = (float)((i * 37 + 11) % 128);
    y[i] = (i * 53 + 7) % 128;
  }
  PsNet *full = ps_net_new(md, B, PS_PRECISION_F32, 1, &error);
  g_assert_no_error(error);
  ps_net_set_input(full, x, y, B);
  ps_net_forward(full);
  PsNet **rank = g_new(PsNet *, T);
  for (int t = 0; t < T; t++) {
    rank[t] = ps_net_new(md, B, PS_PRECISION_F32, 1, &error);
    keep_shard(rank[t], plan->layer_split, md->n_layers, t, T);
    ps_net_set_input(rank[t], x, y, B);
  }
  int checked = 0;
  for (int l = 0; l < md->n_layers; l++) {
    int sp = plan->layer_split[l];
    if (sp != PS_SPLIT_HEADS && sp != PS_SPLIT_ROWS &&
        !(sp == PS_SPLIT_VOCAB && l < md->n_layers - 1))
      continue;
    size_t n = 0;
    const float *want = ps_net_activation(full, l, &n);
    double big = 0, sum_err = 0, alone_err = 0;
    g_autofree double *sum = g_new0(double, n);
    for (int t = 0; t < T; t++) {
      int p = md->layers[l].input_from;
      if (p >= 0) {
        size_t np = 0;
        const float *src = ps_net_activation(full, p, &np);
        memcpy(ps_net_activation(rank[t], p, NULL), src, np * sizeof(float));
      }
      ps_net_forward_layer(rank[t], l);
      const float *got = ps_net_activation(rank[t], l, NULL);
      for (size_t j = 0; j < n; j++) {
        sum[j] += got[j];
        if (t == 0)
          alone_err = MAX(alone_err, fabs((double)got[j] - want[j]));
      }
    }
    for (size_t j = 0; j < n; j++) {
      big = MAX(big, fabs(want[j]));
      sum_err = MAX(sum_err, fabs(sum[j] - want[j]));
    }
    g_test_message("%s T=%d layer %s: sum off by %.3g, one rank alone by %.3g (max %.3g)",
                   model, T, md->layers[l].name, sum_err, alone_err, big);
    g_assert_cmpfloat(sum_err, <=, 1e-5 * big);
    g_assert_cmpfloat(alone_err, >, 0.05 * big);
    checked++;
  }
  g_assert_cmpint(checked, >=, 4); /* embedding, 2 x (attention, down projection) */
  check_tiling(full, plan->layer_split, md->n_layers, T);
  for (int l = 0; l < md->n_layers; l++) /* 3 ways do not divide the heads */
    if (plan->layer_split[l] == PS_SPLIT_HEADS) {
      g_autoptr(GArray) rgs = g_array_new(FALSE, FALSE, sizeof(PsNetRange));
      g_assert_false(ps_net_tensor_ranges(full, l, PS_SPLIT_HEADS, 0, 3, rgs, &error));
      g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
      g_assert_nonnull(strstr(error->message, "heads"));
      g_clear_error(&error);
    }
  for (int t = 0; t < T; t++)
    ps_net_free(rank[t]);
  g_free(rank);
  ps_net_free(full);
  ps_plan_free(plan);
  ps_experiment_free(e);
}

static void test_tensor_partials(void)
{
  check_partials("char-decoder", 2);
  check_partials("char-decoder", 4);
  check_partials("tiny-decoder", 2);
}

/* Sequence meshes (Korthikanti et al. 2022): the layers split over the
 * tensor x sequence group of 4, the norms and residual adds on a quarter
 * of the rows each, their gains' gradients summed by the plan's sequence
 * all-reduce.  The rows add no sum of their own (a row's norm is the
 * one-device kernel on the same row), so the tensor bound above holds.
 * On the 4 devices of tpu-v4-8 (also with full rematerialization), and
 * with data 2 or fsdp 2 on the 8 devices of tpu-v4-16; and the same
 * with the tensor group of 4 splitting the rows itself (sequence_parallel,
 * no sequence axis), also with fsdp 2 and "minimal" rematerialization, and
 * "custom" keeping the query, key and value projections and the context,
 * in HBM or offloaded to the host (the plan's copies change no number). */
static void sequence_meshes(const Reference *ref)
{
  check_mesh(ref, "{\"tensor\": 2, \"sequence\": 2}", "");
  check_mesh(ref, "{\"tensor\": 2, \"sequence\": 2}", ", \"rematerialize\": \"full\"");
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 2, \"sequence\": 2, \"data\": 2}", "");
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 2, \"sequence\": 2, \"fsdp\": 2}", "");
  /* the tensor group itself split by rows (sequence_parallel, Megatron-LM's
   * --sequence-parallel), no sequence axis */
  check_mesh(ref, "{\"tensor\": 4}", ", \"sequence_parallel\": true");
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 4, \"fsdp\": 2}",
                ", \"sequence_parallel\": true, \"rematerialize\": \"minimal\"");
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 4, \"fsdp\": 2}",
                ", \"sequence_parallel\": true, \"rematerialize\": \"custom\", "
                "\"remat_keep\": [\"query_proj\", \"key_proj\", \"value_proj\", \"context\"]");
  /* the same checkpoints in host memory: copies to the host and back in
   * the plan, the gradients unchanged */
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 4, \"fsdp\": 2}",
                ", \"sequence_parallel\": true, \"rematerialize\": \"custom\", "
                "\"remat_offload\": [\"decoder_layer_input\", \"query_proj\", \"key_proj\", "
                "\"value_proj\", \"context\"]");
}

static void test_sequence_gradients(void)
{
  with_reference(sequence_meshes);
}

/* Collective matmul: each op an all-reduce or reduce-scatter completes is
 * computed by every rank and its partial result reduce-scattered by the
 * ring steps between its parts, the blocks summed in ring order rather
 * than the collective's: one more association of the same terms, within
 * the same bound. */
static void ring_meshes(const Reference *ref)
{
  const char *cm = ", \"collective_matmul\": true";
  check_mesh(ref, "{\"tensor\": 4}", cm);
  check_mesh(ref, "{\"tensor\": 2, \"data\": 2}", cm);
  check_mesh(ref, "{\"tensor\": 2, \"sequence\": 2}", cm);
  check_mesh_on(ref, NULL, "tpu-v4-16", "{\"tensor\": 2, \"sequence\": 2, \"fsdp\": 2}", cm);
}

static void test_ring_gradients(void)
{
  with_reference(ring_meshes);
}

/* Flash attention on the sharded layouts against the one-device step of
 * the unfused kernels, within the same bound: attention_kernel=flash
 * (blocks of 512, the decoder's whole sequence of 64 in one: the same
 * sums but for the online softmax's rescaling), and the decoder with
 * blocks of 16 (tests/data/models/char-decoder-flash16.json: four query
 * blocks, causal heads skipping the six above the diagonal, running
 * maxima and sums across blocks). */
static void flash_meshes(const Reference *ref)
{
  attention_kernel = "attention_kernel=flash";
  check_mesh(ref, "{\"fsdp\": 4}", "");
  check_mesh(ref, "{\"tensor\": 2, \"sequence\": 2}", ", \"rematerialize\": \"full\"");
  attention_kernel = "attention_kernel=model";
  const char *blocks = "tests/data/models/char-decoder-flash16.json";
  check_model_mesh(ref, blocks, "{\"fsdp\": 4}", "");
  check_model_mesh(ref, blocks, "{\"tensor\": 4}", "");
  check_model_mesh(ref, blocks, "{\"tensor\": 2, \"sequence\": 2}", "");
}

static void test_flash_gradients(void)
{
  with_reference(flash_meshes);
}

/* A sliding window (tests/data/models/char-decoder-window24.json: the
 * char decoder with flash blocks of 16 and a causal window of 24): its
 * one-device reference, and the same step on fsdp 4 and on tensor 2 x
 * sequence 2, each head-split shard masking as the whole layer does. */
static void window_meshes(const Reference *ref)
{
  const char *m = "tests/data/models/char-decoder-window24.json";
  check_model_mesh(ref, m, "{\"fsdp\": 4}", "");
  check_model_mesh(ref, m, "{\"tensor\": 2, \"sequence\": 2}", "");
}

static void test_window_gradients(void)
{
  const char *ov[] = {"model=tests/data/models/char-decoder-window24.json", NULL};
  PsExperiment *e = load(ov);
  Reference ref;
  if (!reference(e, &ref)) {
    ps_experiment_free(e);
    return;
  }
  window_meshes(&ref);
  /* the window matters here: without it the first step's loss differs */
  const char *whole[] = {"model=tests/data/models/char-decoder-flash16.json", NULL};
  PsExperiment *f = load(whole);
  Reference fr;
  g_assert_true(reference(f, &fr));
  g_test_message("loss: window %.9g, whole %.9g", ref.loss, fr.loss);
  g_assert_cmpfloat(fabs(ref.loss - fr.loss), >, 1e-4 * fabs(fr.loss));
  reference_clear(&fr);
  ps_experiment_free(f);
  reference_clear(&ref);
  ps_experiment_free(e);
}

/* On data 2 x tensor 2 x sequence 2 the divergence covers the data
 * replicas and the group's copies of the norms (whose gradients each
 * device computed on its own rows). */
static void test_sequence_replicas(void)
{
  check_replicas_on("tpu-v4-16", "{\"data\": 2, \"tensor\": 2, \"sequence\": 2}");
  check_replicas_on("tpu-v4-16", "{\"data\": 2, \"tensor\": 2, \"sequence\": 2}, "
                                 "\"collective_matmul\": true");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard-numerics/fsdp/gradients", test_fsdp_gradients);
  g_test_add_func("/shard-numerics/fsdp/replicas", test_fsdp_replicas);
  g_test_add_func("/shard-numerics/fsdp/clip", test_fsdp_clip);
  g_test_add_func("/shard-numerics/fsdp/blocks-fit", test_fsdp_blocks_fit);
  g_test_add_func("/shard-numerics/fsdp/layerwise", test_fsdp_layerwise);
  g_test_add_func("/shard-numerics/fsdp/gathers-match", test_fsdp_gathers_match);
  g_test_add_func("/shard-numerics/tensor/layerwise", test_tensor_layerwise);
  g_test_add_func("/shard-numerics/tensor/clip", test_tensor_clip);
  g_test_add_func("/shard-numerics/tensor/gradients", test_tensor_gradients);
  g_test_add_func("/shard-numerics/tensor/replicas", test_tensor_replicas);
  g_test_add_func("/shard-numerics/tensor/partials", test_tensor_partials);
  g_test_add_func("/shard-numerics/sequence/gradients", test_sequence_gradients);
  g_test_add_func("/shard-numerics/sequence/replicas", test_sequence_replicas);
  g_test_add_func("/shard-numerics/collective-matmul/gradients", test_ring_gradients);
  g_test_add_func("/shard-numerics/flash/gradients", test_flash_gradients);
  g_test_add_func("/shard-numerics/window/gradients", test_window_gradients);
  return g_test_run();
}

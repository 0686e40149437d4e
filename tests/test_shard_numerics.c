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
 *   equal those of the replicate strategy on the same batches.
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

/* One SGD step of the mesh; its gradient against ref. */
static void check_mesh(const Reference *ref, const char *mesh, const char *extra)
{
  g_autofree char *strategy = g_strdup_printf("strategy={\"kind\": \"shard\", \"mesh\": %s%s}",
                                              mesh, extra);
  const char *ov[] = {"steps=1", "steps_per_run=1", "numerics.evaluate=false",
                      "optimizer={\"kind\": \"sgd\", \"learning_rate\": 1, \"momentum\": 0}",
                      strategy, NULL};
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

static void test_fsdp_gradients(void)
{
  const char *ov[] = {NULL};
  PsExperiment *e = load(ov);
  Reference ref;
  if (!reference(e, &ref)) {
    ps_experiment_free(e);
    return;
  }
  check_mesh(&ref, "{\"fsdp\": 4}", "");
  check_mesh(&ref, "{\"data\": 2, \"fsdp\": 2}", "");
  check_mesh(&ref, "{\"fsdp\": 2, \"data\": 2}", ", \"prefetch\": false, \"regather\": false");
  reference_clear(&ref);
  ps_experiment_free(e);
}

static void test_fsdp_replicas(void)
{
  const char *rep[] = {"steps=5", "steps_per_run=5", "numerics.evaluate=false", NULL};
  const char *sh[] = {"steps=5", "steps_per_run=5", "numerics.evaluate=false",
                      "strategy={\"kind\": \"shard\", \"mesh\": {\"data\": 2, \"fsdp\": 2}}",
                      NULL};
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
  /* five Adam steps of lr 0.003 from the same weights: the reassociated
   * gradients move each weight by far less than 1e-4 */
  g_assert_cmpuint(s[0].n_params, ==, s[1].n_params);
  double worst = 0;
  for (size_t i = 0; i < s[0].n_params; i++)
    worst = MAX(worst, fabs((double)s[0].params[i] - s[1].params[i]));
  g_test_message("fsdp vs replicate after 5 steps: %.3g", worst);
  g_assert_cmpfloat(worst, <, 1e-4);
  g_assert_cmpfloat_with_epsilon(s[0].loss_last, s[1].loss_last, 1e-4 * s[0].loss_last);
  ps_summary_clear(&s[0]);
  ps_summary_clear(&s[1]);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard-numerics/fsdp/gradients", test_fsdp_gradients);
  g_test_add_func("/shard-numerics/fsdp/replicas", test_fsdp_replicas);
  return g_test_run();
}

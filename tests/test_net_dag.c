/* test_net_dag.c: a network's numerics on one device, for nets that are
 * not a chain, and for nets cut into slots and stages (test_net.c checks
 * chains of layers against an independent interpreter).
 *
 * A miniature ViT and a net of residual blocks (identity and projection
 * shortcuts) are read from JSON through layers.c, as a user's model file
 * is; their gradients, of parameters and of every layer's output, are
 * checked against central differences of the net's own loss.  Slots: two
 * micro-batches in two slots add up to one pass over both.  Stages: nets
 * holding layer ranges, passing activations forward and gradients back
 * through ps_net_activation and ps_net_activation_grad, give the very
 * gradients of one net, also as a GPipe schedule of three stages. */
#include "common/json.h"
#include "model/kernels.h"
#include "model/net.h"

#include <math.h>
#include <string.h>

#include "support/nets.h"

/* ---- transformers, residuals, slots and stages ---------------------------- */

/* Models written as a user would, read through layers.c (' for "). */
static PsModel *model_json(const char *text)
{
  g_autofree char *t = g_strdelimit(g_strdup(text), "'", '"');
  GError *error = NULL;
  json_object *o = ps_json_parse(t, "test.json", &error);
  g_assert_no_error(error);
  PsModel *m = ps_model_from_json(o, "test.json", "", &error);
  g_assert_no_error(error);
  json_object_put(o);
  return m;
}

/* A ViT in miniature: (4, 6, 2) images, 2x2 patches (6 tokens of 8), two
 * pre-LN blocks (2 heads, MLP 12), final layernorm, token mean, 3 classes. */
static PsModel *make_vit(void)
{
  return model_json(
      "{'name': 'tiny-vit', 'input': {'shape': [4, 6, 2], 'classes': 3}, 'layers': ["
      "{'type': 'patch_embedding', 'size': 2, 'dim': 8},"
      "{'type': 'repeat', 'name': 'block', 'count': 2, 'body': ["
      " {'type': 'residual', 'name': 'attn', 'body': [{'type': 'layernorm'},"
      "  {'type': 'attention', 'heads': 2}]},"
      " {'type': 'residual', 'name': 'mlp', 'body': [{'type': 'layernorm'},"
      "  {'type': 'dense', 'units': 12}, {'type': 'gelu'}, {'type': 'dense', 'units': 8}]}]},"
      "{'type': 'layernorm'}, {'type': 'global_avgpool'}, {'type': 'dense', 'units': 3},"
      "{'type': 'softmax_xent'}]}");
}

/* Flatten of the input first (its gradient has no parameters before it),
 * a residual block with a projection shortcut, one with an identity
 * shortcut around another (the gelu's output is read twice, the block
 * input three times), a layernorm on a vector. */
static PsModel *make_residual(void)
{
  return model_json(
      "{'name': 'residual', 'input': {'shape': [2, 3], 'classes': 3}, 'layers': ["
      "{'type': 'flatten'},"
      "{'type': 'residual', 'name': 'proj', 'body': [{'type': 'dense', 'units': 5},"
      " {'type': 'tanh'}], 'shortcut': [{'type': 'dense', 'units': 5, 'bias': false}]},"
      "{'type': 'residual', 'name': 'id', 'body': [{'type': 'dense', 'units': 5},"
      " {'type': 'gelu'}, {'type': 'residual', 'name': 'inner', 'body': ["
      "  {'type': 'dense', 'units': 5}]}]},"
      "{'type': 'dense', 'units': 8}, {'type': 'layernorm'},"
      "{'type': 'residual', 'name': 'seq', 'body': [{'type': 'dense', 'units': 8}]},"
      "{'type': 'dense', 'units': 3}, {'type': 'softmax_xent'}]}");
}

static const NetCase dag_cases[] = {
  {"vit", make_vit},
  {"residual", make_residual},
};

/* Random inputs and labels, and every parameter away from its initial
 * value (layernorm gains off one, biases and positions off zero), so all
 * of them carry gradient. */
static void dag_fixture(Fixture *f, MakeModel make, int batch, int slots, uint64_t seed)
{
  GError *error = NULL;
  f->model = make();
  f->net = ps_net_new_slots(f->model, batch, slots, PS_PRECISION_F32, seed, &error);
  g_assert_no_error(error);
  GRand *r = g_rand_new_with_seed((guint32)seed + 2000);
  fixture_batch(f, batch, r);
  g_rand_free(r);
  /* a stream of its own, so nets of any batch get the same parameters */
  r = g_rand_new_with_seed((guint32)seed + 3000);
  float *p = ps_net_params(f->net);
  for (size_t i = 0; i < ps_net_n_params(f->net); i++)
    p[i] += (float)g_rand_double_range(r, -0.2, 0.2);
  g_rand_free(r);
}

/* The loss after a forward from layer `from` (the net input, or the
 * activation of layer from - 1 left as it is). */
static double loss_from(PsNet *net, int from, int n_layers)
{
  for (int i = from; i < n_layers; i++)
    ps_net_forward_layer(net, i);
  return ps_net_loss(net);
}

/* Central difference of the net's float loss in one float value *v,
 * Richardson-extrapolated from steps h and 2h: (4 d(h) - d(2h)) / 3
 * cancels the h^2 term, leaving h^4 f^(5) / 30, negligible at h = 1e-2
 * for these smooth nets.  What remains is float rounding: the loss of one
 * forward carries a relative error of some 1e-7 (a handful of roundings
 * at 2^-24 each through the layers), ~3e-7 absolute on a loss near 1, and
 * the extrapolated difference turns an error e in each loss into at most
 * (4 (2e / 2h) + 2e / 4h) / 3 = 1.5 e / h, i.e. 5e-5 at h = 1e-2. */
static double fd_value(PsNet *net, float *v, int from, int n_layers)
{
  const float h = 1e-2f, save = *v;
  double d[2];
  for (int j = 0; j < 2; j++) {
    float hj = h * (float)(j + 1);
    *v = save + hj;
    double hp = (double)*v - save;
    double lp = loss_from(net, from, n_layers);
    *v = save - hj;
    double hm = save - (double)*v;
    double lm = loss_from(net, from, n_layers);
    d[j] = (lp - lm) / (hp + hm);
  }
  *v = save;
  return (4 * d[0] - d[1]) / 3;
}

/* The FD error bound of fd_value (5e-5) with a factor 4 for the rounding
 * estimate, plus 1% of the entry for the bf16-free but many-layer float
 * kernels (their own relative error, test_kernels.c, is far below that). */
#define NET_FD_ATOL 2e-4
#define NET_FD_RTOL 1e-2

/* The whole net's gradient against central differences of its own loss:
 * a few parameters of every layer (its first and last, which are biases
 * or gains where it has them, and random ones), and the gradient of the
 * loss with respect to a few outputs of every layer, by perturbing that
 * output in place and running forward from the next layer (what a
 * pipeline stage boundary passes back). */
static void test_dag_gradient_fd(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  dag_fixture(&f, c->make, 3, 1, 31);
  const int n = f.model->n_layers;
  ps_net_zero_grads(f.net);
  ps_net_set_input(f.net, f.x, f.labels, f.batch);
  ps_net_forward(f.net);
  ps_net_backward(f.net, 1.0f);
  size_t np = ps_net_n_params(f.net);
  g_autofree float *g = g_memdup2(ps_net_grads(f.net), np * sizeof(float));
  g_assert_cmpuint(np, ==, (size_t)f.model->params);
  /* the activation gradients of this pass, copied out per layer */
  float **ag = g_new0(float *, n);
  for (int i = 0; i < n; i++) {
    size_t cnt = 0;
    const float *a = ps_net_activation_grad(f.net, i, &cnt);
    g_assert_true((a == NULL) == (i == n - 1)); /* only the loss keeps none */
    if (a)
      ag[i] = g_memdup2(a, cnt * sizeof(float));
  }
  float *p = ps_net_params(f.net);
  GRand *r = g_rand_new_with_seed(37);
  double worst = 0.0, worst_abs = 0.0, gmax = 0.0;
  int checked = 0, big = 0;
  for (int i = 0; i < n; i++) {
    size_t off, len;
    ps_net_layer_params(f.net, i, &off, &len);
    for (int k = 0; k < 6 && len > 0; k++) {
      size_t j = k == 0 ? 0 : k == 1 ? len - 1 : (size_t)g_rand_int_range(r, 0, (gint32)len);
      j += off;
      double fd = fd_value(f.net, &p[j], 0, n);
      double err = fabs(g[j] - fd) - (NET_FD_ATOL + NET_FD_RTOL * fabs(fd));
      worst_abs = MAX(worst_abs, fabs(g[j] - fd));
      if (err > 0)
        g_test_message("%s: layer %d (%s) param %zu: grad %.7g, differences %.7g", c->name,
                       i, f.model->layers[i].name, j, g[j], fd);
      worst = MAX(worst, err);
      gmax = MAX(gmax, fabs(fd));
      big += fabs(fd) > 10 * NET_FD_ATOL;
      checked++;
    }
  }
  /* outputs: forward again at the unperturbed parameters, then perturb */
  ps_net_set_input(f.net, f.x, f.labels, f.batch);
  ps_net_forward(f.net);
  for (int i = 0; i < n - 1; i++) {
    size_t cnt = 0;
    float *a = ps_net_activation(f.net, i, &cnt);
    for (int k = 0; k < 3; k++) {
      size_t j = (size_t)g_rand_int_range(r, 0, (gint32)cnt);
      double fd = fd_value(f.net, &a[j], i + 1, n);
      double err = fabs(ag[i][j] - fd) - (NET_FD_ATOL + NET_FD_RTOL * fabs(fd));
      worst_abs = MAX(worst_abs, fabs(ag[i][j] - fd));
      if (err > 0)
        g_test_message("%s: output of layer %d (%s) [%zu]: grad %.7g, differences %.7g",
                       c->name, i, f.model->layers[i].name, j, ag[i][j], fd);
      worst = MAX(worst, err);
      big += fabs(fd) > 10 * NET_FD_ATOL;
      checked++;
    }
    loss_from(f.net, i + 1, n); /* leave every activation consistent */
  }
  g_test_message("%s: %d values checked, %d above 10x the absolute tolerance, largest %.3g; "
                 "worst |grad - differences| %.3g", c->name, checked, big, gmax, worst_abs);
  g_assert_cmpfloat(worst, <=, 0.0);
  g_assert_cmpint(big * 2, >=, checked); /* the check is not vacuous */
  for (int i = 0; i < n; i++)
    g_free(ag[i]);
  g_free(ag);
  g_rand_free(r);
  fixture_clear(&f);
}

static void test_dag_train(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  dag_fixture(&f, c->make, 24, 1, 41);
  fixture_separate(&f);
  PsOptimizer *adam = ps_optimizer_new_adam(ps_net_n_params(f.net), 0.01f, 0.9f, 0.999f, 1e-7f);
  g_assert_cmpfloat(train(&f, adam, 150), <, 0.3);
  ps_optimizer_free(adam);
  fixture_clear(&f);
}

static const NetCase slot_cases[] = {
  {"mlp", make_mlp},
  {"cnn-flatten", make_cnn_flat},
  {"vit", make_vit},
  {"residual", make_residual},
};

/* Parameters of nets made with the same seed are the same whatever their
 * slots and max_batch; dag_fixture then moves them the same way. */
static void assert_same_params(PsNet *a, PsNet *b)
{
  size_t n = ps_net_n_params(a);
  g_assert_cmpuint(ps_net_n_params(b), ==, n);
  g_assert_cmpmem(ps_net_params(a), n * sizeof(float), ps_net_params(b), n * sizeof(float));
}

/* Two micro-batches of 3 in two slots of one net, run interleaved
 * (forward of both, then backward of the second, then of the first), each
 * with loss scale 1/2, give the gradient of one pass over the 6 examples.
 * The two differ only in the order float sums run (over 6 rows, or 3 and 3
 * then added): each sum of n terms is exact to n 2^-24 of its terms'
 * magnitudes, so with n in the hundreds 1e-5 of the largest gradient
 * covers it, while a lost or doubled micro-batch is off by half. */
static void test_slots(gconstpointer data)
{
  const NetCase *c = data;
  Fixture full, two;
  dag_fixture(&full, c->make, 6, 1, 43);
  dag_fixture(&two, c->make, 3, 2, 43);
  assert_same_params(full.net, two.net);
  g_assert_cmpint(ps_net_slots(two.net), ==, 2);
  g_assert_cmpint(ps_net_slots(full.net), ==, 1);
  const int n = full.model->n_layers;

  net_gradient(&full, 1.0f);
  double full_loss = ps_net_loss(full.net);
  size_t np = ps_net_n_params(full.net);
  const float *want = ps_net_grads(full.net);

  PsNet *net = two.net;
  ps_net_zero_grads(net);
  for (int s = 0; s < 2; s++) {
    ps_net_select_slot(net, s);
    ps_net_set_input(net, full.x + (size_t)s * 3 * full.in_elems, full.labels + s * 3, 3);
  }
  for (int s = 0; s < 2; s++) {
    ps_net_select_slot(net, s);
    ps_net_forward(net);
  }
  double loss[2];
  const float *out[2];
  for (int s = 1; s >= 0; s--) {
    ps_net_select_slot(net, s);
    loss[s] = ps_net_loss(net);
    out[s] = ps_net_layer_output(net, n - 2, NULL);
    ps_net_backward(net, 0.5f);
  }
  g_assert_true(out[0] != out[1]);
  g_test_message("%s: losses %.6f and %.6f, full batch %.6f", c->name, loss[0], loss[1],
                 full_loss);
  g_assert_cmpfloat(loss[0], !=, loss[1]);
  g_assert_cmpfloat(fabs(0.5 * (loss[0] + loss[1]) - full_loss), <=, 1e-6 * full_loss);

  const float *got = ps_net_grads(net);
  double gmax = 0.0;
  for (size_t i = 0; i < np; i++)
    gmax = MAX(gmax, fabs(want[i]));
  g_assert_cmpfloat(gmax, >, 1e-2);
  for (size_t i = 0; i < np; i++)
    g_assert_cmpfloat(fabs(got[i] - want[i]), <=, 1e-5 * gmax + 1e-5 * fabs(want[i]));

  /* each slot kept its own logits: they are the full batch's halves */
  for (int s = 0; s < 2; s++) {
    ps_net_select_slot(net, s);
    size_t cnt;
    const float *logits = ps_net_layer_output(net, n - 2, &cnt);
    const float *ref = ps_net_layer_output(full.net, n - 2, NULL) + s * cnt;
    g_assert_cmpuint(cnt, ==, 3 * (size_t)full.model->classes);
    for (size_t i = 0; i < cnt; i++)
      g_assert_cmpfloat(fabs(logits[i] - ref[i]), <=, 1e-5 * (1 + fabs(ref[i])));
  }
  fixture_clear(&full);
  fixture_clear(&two);
}

/* Pipeline stages as separate nets with the same weights: the first runs
 * layers [0, k], its output is copied into the second's
 * ps_net_activation(k), the second runs (k, end] forward and backward, its
 * ps_net_activation_grad(k) is copied back, and the first runs backward.
 * Each stage's parameter gradients and the loss are then bit for bit those
 * of one net end to end: every kernel runs on the same bits in the same
 * order, so no tolerance is needed. */
static void run_two_stages(const NetCase *c, int k)
{
  Fixture one, a, b;
  dag_fixture(&one, c->make, 4, 1, 47);
  dag_fixture(&a, c->make, 4, 1, 47);
  dag_fixture(&b, c->make, 4, 1, 47);
  assert_same_params(one.net, a.net);
  const int n = one.model->n_layers;
  net_gradient(&one, 1.0f);

  ps_net_zero_grads(a.net);
  ps_net_zero_grads(b.net);
  ps_net_set_input(a.net, a.x, a.labels, a.batch);
  /* the second stage needs the labels, not the images: give it zeros */
  g_autofree float *zeros = g_new0(float, b.in_elems * b.batch);
  ps_net_set_input(b.net, zeros, b.labels, b.batch);
  for (int i = 0; i <= k; i++)
    ps_net_forward_layer(a.net, i);
  size_t na, nb;
  const float *act = ps_net_activation(a.net, k, &na);
  float *dst = ps_net_activation(b.net, k, &nb);
  g_assert_cmpuint(na, ==, nb);
  g_assert_cmpuint(na, ==, (size_t)a.batch * (size_t)elems(one.model->layers[k].out_shape,
                                                            one.model->layers[k].out_rank));
  memcpy(dst, act, na * sizeof *dst);
  for (int i = k + 1; i < n; i++)
    ps_net_forward_layer(b.net, i);
  for (int i = n - 1; i > k; i--)
    ps_net_backward_layer(b.net, i, 1.0f);
  const float *dact = ps_net_activation_grad(b.net, k, &nb);
  float *ddst = ps_net_activation_grad(a.net, k, &na);
  g_assert_nonnull(dact);
  g_assert_nonnull(ddst);
  g_assert_cmpuint(na, ==, nb);
  memcpy(ddst, dact, na * sizeof *ddst);
  for (int i = k; i >= 0; i--)
    ps_net_backward_layer(a.net, i, 1.0f);

  g_assert_cmpfloat(ps_net_loss(b.net), ==, ps_net_loss(one.net));
  size_t off, len;
  ps_net_layer_params(one.net, k + 1 < n ? k + 1 : k, &off, &len);
  size_t split = k + 1 < n ? off : ps_net_n_params(one.net);
  size_t np = ps_net_n_params(one.net);
  const float *g1 = ps_net_grads(one.net);
  g_assert_cmpmem(ps_net_grads(a.net), split * sizeof(float), g1, split * sizeof(float));
  g_assert_cmpmem(ps_net_grads(b.net) + split, (np - split) * sizeof(float), g1 + split,
                  (np - split) * sizeof(float));
  /* and each stage left the other's parameters alone */
  for (size_t i = split; i < np; i++)
    g_assert_cmpfloat(ps_net_grads(a.net)[i], ==, 0.0f);
  for (size_t i = 0; i < split; i++)
    g_assert_cmpfloat(ps_net_grads(b.net)[i], ==, 0.0f);
  fixture_clear(&one);
  fixture_clear(&a);
  fixture_clear(&b);
}

typedef struct {
  const char *name;
  MakeModel make;
  int cuts[4];  /* last layer of the first stage; -1 ends the list */
} StageCase;

static const StageCase stage_cases[] = {
  /* block boundaries (the embedding; the ends of blocks 1 and 2), and a
   * last stage that is the loss alone */
  {"vit", make_vit, {0, 8, 16, 19}},
  /* the boundary is a FLATTEN (an alias of the pooling output), or the
   * pooling itself */
  {"cnn-flatten", make_cnn_flat, {3, 2, -1, -1}},
  /* a FLATTEN of the net input, whose gradient has no parameters before */
  {"residual", make_residual, {0, 4, -1, -1}},
  {"mlp", make_mlp, {1, 6, -1, -1}},
};

static void test_two_stages(gconstpointer data)
{
  const StageCase *c = data;
  const NetCase nc = {c->name, c->make};
  for (int i = 0; i < 4 && c->cuts[i] >= 0; i++)
    run_two_stages(&nc, c->cuts[i]);
}

/* GPipe on the miniature ViT: three stages (the embedding and block 1,
 * block 2, the head) as three nets of two slots, two micro-batches of 2
 * through all stages forward, then all backward in reverse, each with
 * loss scale 1/2, against one net over the batch of 4.  Within the
 * tolerance of test_slots (the sums differ only in order). */
static void test_gpipe(void)
{
  const int cuts[] = {-1, 8, 16, 20}; /* stage s holds (cuts[s], cuts[s + 1]] */
  Fixture one, st[3];
  dag_fixture(&one, make_vit, 4, 1, 53);
  for (int s = 0; s < 3; s++)
    dag_fixture(&st[s], make_vit, 2, 2, 53);
  const int n = one.model->n_layers;
  g_assert_cmpint(cuts[3], ==, n - 1);
  net_gradient(&one, 1.0f);
  for (int s = 0; s < 3; s++)
    ps_net_zero_grads(st[s].net);

  for (int mb = 0; mb < 2; mb++) {
    const float *x = one.x + (size_t)mb * 2 * one.in_elems;
    const int32_t *y = one.labels + mb * 2;
    for (int s = 0; s < 3; s++) {
      PsNet *net = st[s].net;
      ps_net_select_slot(net, mb);
      if (s == 0 || s == 2)
        ps_net_set_input(net, x, y, 2); /* the images; the labels */
      else
        ps_net_set_batch(net, 2);
      if (s > 0) {
        ps_net_select_slot(st[s - 1].net, mb);
        size_t cnt;
        const float *src = ps_net_activation(st[s - 1].net, cuts[s], &cnt);
        memcpy(ps_net_activation(net, cuts[s], NULL), src, cnt * sizeof *src);
      }
      for (int i = cuts[s] + 1; i <= cuts[s + 1]; i++)
        ps_net_forward_layer(net, i);
    }
  }
  double loss = 0.0;
  for (int mb = 1; mb >= 0; mb--) {
    for (int s = 2; s >= 0; s--) {
      PsNet *net = st[s].net;
      ps_net_select_slot(net, mb);
      if (s == 2)
        loss += 0.5 * ps_net_loss(net);
      if (s < 2) {
        ps_net_select_slot(st[s + 1].net, mb);
        size_t cnt;
        const float *src = ps_net_activation_grad(st[s + 1].net, cuts[s + 1], &cnt);
        memcpy(ps_net_activation_grad(net, cuts[s + 1], NULL), src, cnt * sizeof *src);
      }
      for (int i = cuts[s + 1]; i > cuts[s]; i--)
        ps_net_backward_layer(net, i, 0.5f);
    }
  }
  g_assert_cmpfloat(fabs(loss - ps_net_loss(one.net)), <=, 1e-6 * loss);
  size_t np = ps_net_n_params(one.net);
  const float *want = ps_net_grads(one.net);
  double gmax = 0.0;
  for (size_t i = 0; i < np; i++)
    gmax = MAX(gmax, fabs(want[i]));
  g_assert_cmpfloat(gmax, >, 1e-2);
  for (int s = 0; s < 3; s++) {
    size_t lo, hi, len;
    ps_net_layer_params(one.net, cuts[s] + 1, &lo, &len);
    if (s < 2)
      ps_net_layer_params(one.net, cuts[s + 1] + 1, &hi, &len);
    else
      hi = np;
    const float *got = ps_net_grads(st[s].net);
    for (size_t i = 0; i < np; i++) {
      double w = i >= lo && i < hi ? want[i] : 0.0;
      g_assert_cmpfloat(fabs(got[i] - w), <=, 1e-5 * gmax + 1e-5 * fabs(w));
    }
  }
  fixture_clear(&one);
  for (int s = 0; s < 3; s++)
    fixture_clear(&st[s]);
}

/* The activation views: the net input is writable and has no gradient,
 * the loss's output has none either, a FLATTEN shares its input's buffers
 * (and owns a gradient when its input is the net's), and the counts follow
 * the current slot's batch. */
static void test_activation_views(void)
{
  GError *error = NULL;
  PsModel *m = make_cnn_flat();
  PsNet *net = ps_net_new_slots(m, 5, 3, PS_PRECISION_F32, 1, &error);
  g_assert_no_error(error);
  size_t cnt = 99;
  ps_net_select_slot(net, 2);
  ps_net_set_batch(net, 4);
  float *in = ps_net_activation(net, -1, &cnt);
  g_assert_nonnull(in);
  g_assert_cmpuint(cnt, ==, 4 * 49);
  g_assert_null(ps_net_activation_grad(net, -1, &cnt));
  g_assert_cmpuint(cnt, ==, 0);
  g_assert_null(ps_net_activation_grad(net, m->n_layers - 1, NULL));
  g_assert_true(ps_net_activation(net, 3, NULL) == ps_net_activation(net, 2, NULL));
  g_assert_true(ps_net_activation_grad(net, 3, NULL) == ps_net_activation_grad(net, 2, NULL));
  g_assert_true(ps_net_activation(net, 3, NULL) == ps_net_layer_output(net, 3, &cnt));
  g_assert_cmpuint(cnt, ==, 4 * 4 * 4 * 2);
  /* other slots have their own buffers and batch (none set yet) */
  ps_net_select_slot(net, 0);
  ps_net_activation(net, 2, &cnt);
  g_assert_cmpuint(cnt, ==, 0);
  ps_net_select_slot(net, 1);
  float *other = ps_net_activation(net, 2, NULL);
  ps_net_select_slot(net, 2);
  g_assert_true(other != ps_net_activation(net, 2, NULL));
  ps_net_free(net);
  model_free(m);

  m = make_residual();
  net = ps_net_new(m, 2, PS_PRECISION_F32, 1, &error);
  g_assert_no_error(error);
  g_assert_cmpint(ps_net_slots(net), ==, 1);
  g_assert_true(ps_net_activation(net, 0, NULL) == ps_net_activation(net, -1, NULL));
  g_assert_nonnull(ps_net_activation_grad(net, 0, NULL));
  ps_net_free(net);
  model_free(m);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ps_kernels_init();
  for (size_t i = 0; i < G_N_ELEMENTS(dag_cases); i++) {
    g_autofree char *fd = g_strdup_printf("/net/%s/gradient-net-fd", dag_cases[i].name);
    g_autofree char *tr = g_strdup_printf("/net/%s/train", dag_cases[i].name);
    g_test_add_data_func(fd, &dag_cases[i], test_dag_gradient_fd);
    g_test_add_data_func(tr, &dag_cases[i], test_dag_train);
  }
  for (size_t i = 0; i < G_N_ELEMENTS(slot_cases); i++) {
    g_autofree char *path = g_strdup_printf("/net/slots/%s", slot_cases[i].name);
    g_test_add_data_func(path, &slot_cases[i], test_slots);
  }
  for (size_t i = 0; i < G_N_ELEMENTS(stage_cases); i++) {
    g_autofree char *path = g_strdup_printf("/net/stages/%s", stage_cases[i].name);
    g_test_add_data_func(path, &stage_cases[i], test_two_stages);
  }
  g_test_add_func("/net/gpipe/vit", test_gpipe);
  g_test_add_func("/net/activation-views", test_activation_views);
  return g_test_run();
}

/* test_net.c: a network's numerics on one device.
 *
 * Small MLPs and CNNs are built by hand as PsModel structs (shapes and
 * parameter counts worked out here, independently of net.c).  The net's
 * loss is checked against a plain-loop double-precision interpreter of the
 * same model written below, its gradients against central differences of
 * that interpreter (tight) and of ps_net_loss itself (float, looser), and
 * the training-loop properties the simulator relies on: loss goes down,
 * half-batch accumulation equals the full batch, loss_scale scales the
 * gradients exactly, same seed gives the same bits.  The models are
 * support/nets.c's; residual nets, slots and stages are test_net_dag.c's. */
#include "common/json.h"
#include "model/kernels.h"
#include "model/net.h"

#include "support/nets.h"

#include <math.h>
#include <string.h>

static const NetCase net_cases[] = {
  {"mlp", make_mlp},
  {"cnn", make_cnn},
  {"cnn-flatten", make_cnn_flat},
};

/* ---- an independent double-precision interpreter ------------------------ */

static double ref_act(PsLayerKind kind, double x)
{
  switch (kind) {
  case PS_LAYER_RELU:
    return x > 0 ? x : 0;
  case PS_LAYER_GELU:
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / G_PI) * (x + 0.044715 * x * x * x)));
  default:
    return tanh(x);
  }
}

/* A convolution of one example, weights (k, k, c, f) then bias. */
static void ref_conv(const PsLayer *l, const double *p, const double *cur, double *nxt)
{
  const int64_t *is = l->in_shape, *os = l->out_shape;
  int64_t h = is[0], w = is[1], c = is[2], k = l->kernel, st = l->stride ? l->stride : 1;
  int64_t oh = os[0], ow = os[1], f = l->filters;
  int64_t pt = 0, pl = 0;
  if (l->same_padding) {
    pt = MAX((oh - 1) * st + k - h, 0) / 2;
    pl = MAX((ow - 1) * st + k - w, 0) / 2;
  }
  const double *b = p + k * k * c * f;
  for (int64_t oy = 0; oy < oh; oy++)
    for (int64_t ox = 0; ox < ow; ox++)
      for (int64_t co = 0; co < f; co++) {
        double s = l->bias ? b[co] : 0.0;
        for (int64_t ky = 0; ky < k; ky++)
          for (int64_t kx = 0; kx < k; kx++) {
            int64_t iy = oy * st - pt + ky, ix = ox * st - pl + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w)
              continue;
            for (int64_t ci = 0; ci < c; ci++)
              s += cur[(iy * w + ix) * c + ci] * p[((ky * k + kx) * c + ci) * f + co];
          }
        nxt[(oy * ow + ox) * f + co] = s;
      }
}

/* A max or average pool of one example, valid windows. */
static void ref_pool(const PsLayer *l, const double *cur, double *nxt)
{
  const int64_t *is = l->in_shape, *os = l->out_shape;
  int64_t w = is[1], c = is[2], k = l->pool, st = l->stride ? l->stride : k;
  for (int64_t oy = 0; oy < os[0]; oy++)
    for (int64_t ox = 0; ox < os[1]; ox++)
      for (int64_t ch = 0; ch < c; ch++) {
        double acc = l->kind == PS_LAYER_MAXPOOL ? -INFINITY : 0.0;
        for (int64_t ky = 0; ky < k; ky++)
          for (int64_t kx = 0; kx < k; kx++) {
            double v = cur[((oy * st + ky) * w + ox * st + kx) * c + ch];
            acc = l->kind == PS_LAYER_MAXPOOL ? MAX(acc, v) : acc + v;
          }
        nxt[(oy * os[1] + ox) * c + ch] = l->kind == PS_LAYER_MAXPOOL ? acc : acc / (k * k);
      }
}

/* One example through the model, parameters laid out layer by layer,
 * weights then bias.  Returns its cross-entropy; *right gets argmax ==
 * label. */
static double ref_example(const PsModel *m, const double *p, const double *x0, int label,
                          int *right)
{
  size_t cap = 4096;
  double *cur = g_new0(double, cap), *nxt = g_new0(double, cap);
  size_t n0 = (size_t)elems(m->in_shape, m->in_rank);
  g_assert_cmpuint(n0, <=, cap);
  memcpy(cur, x0, n0 * sizeof *cur);
  double loss = 0.0;
  for (int li = 0; li < m->n_layers; li++) {
    const PsLayer *l = &m->layers[li];
    const int64_t *is = l->in_shape, *os = l->out_shape;
    size_t nin = (size_t)elems(is, l->in_rank), nout = (size_t)elems(os, l->out_rank);
    g_assert_cmpuint(nout, <=, cap);
    memset(nxt, 0, cap * sizeof *nxt);
    switch (l->kind) {
    case PS_LAYER_DENSE: {
      int64_t din = is[l->in_rank - 1], dout = l->units, groups = (int64_t)nin / din;
      const double *b = p + din * dout;
      for (int64_t g = 0; g < groups; g++)
        for (int64_t o = 0; o < dout; o++) {
          double s = l->bias ? b[o] : 0.0;
          for (int64_t i = 0; i < din; i++)
            s += cur[g * din + i] * p[i * dout + o];
          nxt[g * dout + o] = s;
        }
      break;
    }
    case PS_LAYER_RELU:
    case PS_LAYER_GELU:
    case PS_LAYER_TANH:
      for (size_t i = 0; i < nin; i++)
        nxt[i] = ref_act(l->kind, cur[i]);
      break;
    case PS_LAYER_CONV2D:
      ref_conv(l, p, cur, nxt);
      break;
    case PS_LAYER_MAXPOOL:
    case PS_LAYER_AVGPOOL:
      ref_pool(l, cur, nxt);
      break;
    case PS_LAYER_GLOBAL_AVGPOOL:
      for (int64_t q = 0; q < is[0] * is[1]; q++)
        for (int64_t ch = 0; ch < is[2]; ch++)
          nxt[ch] += cur[q * is[2] + ch] / (double)(is[0] * is[1]);
      break;
    case PS_LAYER_FLATTEN:
      memcpy(nxt, cur, nin * sizeof *nxt);
      break;
    case PS_LAYER_SOFTMAX_XENT: {
      double mx = -INFINITY, s = 0.0;
      int best = 0;
      for (size_t j = 0; j < nin; j++) {
        mx = MAX(mx, cur[j]);
        if (cur[j] > cur[best])
          best = (int)j;
      }
      for (size_t j = 0; j < nin; j++)
        s += exp(cur[j] - mx);
      loss = mx + log(s) - cur[label];
      *right = best == label;
      memcpy(nxt, cur, nin * sizeof *nxt);
      break;
    }
    default:
      g_assert_not_reached();
    }
    p += l->params;
    double *t = cur;
    cur = nxt;
    nxt = t;
  }
  g_free(cur);
  g_free(nxt);
  return loss;
}

static double ref_loss(const PsModel *m, const double *p, const float *x, const int32_t *labels,
                       int batch, int *correct)
{
  size_t n0 = (size_t)elems(m->in_shape, m->in_rank);
  double *xd = g_new(double, n0), s = 0.0;
  int right_total = 0;
  for (int b = 0; b < batch; b++) {
    for (size_t i = 0; i < n0; i++)
      xd[i] = x[b * n0 + i];
    int right = 0;
    s += ref_example(m, p, xd, labels[b], &right);
    right_total += right;
  }
  g_free(xd);
  if (correct)
    *correct = right_total;
  return s / batch;
}

/* ---- fixtures ----------------------------------------------------------- */

static double *params_double(Fixture *f)
{
  size_t n = ps_net_n_params(f->net);
  const float *p = ps_net_params(f->net);
  double *d = g_new(double, n);
  for (size_t i = 0; i < n; i++)
    d[i] = p[i];
  return d;
}

/* ---- forward and gradients ---------------------------------------------- */

/* The net's loss and correct count equal the double interpreter's on the
 * same parameters (float rounding only). */
static void test_forward_reference(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 5, 8, PS_PRECISION_F32, 3);
  g_assert_cmpuint(ps_net_n_params(f.net), ==, (size_t)f.model->params);
  double got = net_loss_at(&f);
  g_autofree double *p = params_double(&f);
  int right;
  double want = ref_loss(f.model, p, f.x, f.labels, f.batch, &right);
  g_test_message("%s: loss %.9f, reference %.9f", c->name, got, want);
  g_assert_cmpfloat(fabs(got - want), <=, 1e-5 * fabs(want));
  g_assert_cmpint(ps_net_correct(f.net), ==, right);
  fixture_clear(&f);
}

/* Every gradient entry against central differences (h = 1e-6) of the
 * double interpreter: accurate to ~1e-9, so the float kernels are held to
 * 1e-4 relative plus 1e-5 of the largest entry (see test_kernels.c). */
static void test_gradient_reference(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 4, 4, PS_PRECISION_F32, 5);
  net_gradient(&f, 1.0f);
  size_t n = ps_net_n_params(f.net);
  const float *g = ps_net_grads(f.net);
  double *p = params_double(&f), *fd = g_new(double, n);
  const double h = 1e-6;
  for (size_t i = 0; i < n; i++) {
    double save = p[i];
    p[i] = save + h;
    double lp = ref_loss(f.model, p, f.x, f.labels, f.batch, NULL);
    p[i] = save - h;
    double lm = ref_loss(f.model, p, f.x, f.labels, f.batch, NULL);
    p[i] = save;
    fd[i] = (lp - lm) / (2 * h);
  }
  double gmax = 0.0;
  for (size_t i = 0; i < n; i++)
    gmax = MAX(gmax, fabs(fd[i]));
  g_assert_cmpfloat(gmax, >, 1e-2);
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double excess = fabs(g[i] - fd[i]) - (1e-4 * fabs(fd[i]) + 1e-5 * gmax);
    if (excess > 0)
      g_test_message("%s: param %zu grad %.9g, differences %.9g", c->name, i, g[i], fd[i]);
    worst = MAX(worst, excess);
  }
  g_assert_cmpfloat(worst, <=, 0.0);
  g_free(p);
  g_free(fd);
  fixture_clear(&f);
}

/* The whole net against differences of its own float loss.  Float rounding
 * puts ~1e-7 of noise on the loss, i.e. ~5e-5 on a difference over 2h with
 * h = 1e-3, so we accept 3e-4 + 2% of the entry.  A ReLU or max-pool kink
 * crossed inside [-2h, 2h] makes the differences at h and 2h disagree;
 * such entries (few) are skipped, and counted. */
static void test_gradient_net_fd(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 4, 4, PS_PRECISION_F32, 9);
  net_gradient(&f, 1.0f);
  size_t n = ps_net_n_params(f.net);
  g_autofree float *g = g_memdup2(ps_net_grads(f.net), n * sizeof(float));
  float *p = ps_net_params(f.net);
  const float h = 1e-3f;
  size_t skipped = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    float save = p[i];
    double d[2];
    for (int j = 0; j < 2; j++) {
      float hj = h * (float)(j + 1);
      p[i] = save + hj;
      double hp = (double)p[i] - save; /* the step actually taken */
      double lp = net_loss_at(&f);
      p[i] = save - hj;
      double hm = save - (double)p[i];
      double lm = net_loss_at(&f);
      d[j] = (lp - lm) / (hp + hm);
    }
    p[i] = save;
    if (fabs(d[0] - d[1]) > 3e-4 + 2e-2 * fabs(d[0])) {
      skipped++;
      continue;
    }
    big += fabs(d[0]) > 1e-2;
    if (fabs(g[i] - d[0]) > 3e-4 + 2e-2 * fabs(d[0]))
      g_test_message("%s: param %zu grad %.6g, differences %.6g", c->name, i, g[i], d[0]);
    g_assert_cmpfloat(fabs(g[i] - d[0]), <=, 3e-4 + 2e-2 * fabs(d[0]));
  }
  g_test_message("%s: %zu params, %zu skipped at a kink, %zu above 1e-2", c->name, n, skipped,
                 big);
  g_assert_cmpuint(skipped * 10, <=, n);
  g_assert_cmpuint(big * 4, >=, n); /* the check is not vacuous */
  fixture_clear(&f);
}

/* ---- training-loop properties ------------------------------------------ */

static void test_train(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 32, 32, PS_PRECISION_F32, 11);
  /* A learnable batch: each class shifts the inputs its own way. */
  fixture_separate(&f);
  PsOptimizer *sgd = ps_optimizer_new_sgd(ps_net_n_params(f.net), 0.1f, 0.9f);
  g_assert_cmpfloat(train(&f, sgd, 150), <, 0.3);
  ps_optimizer_free(sgd);
  fixture_clear(&f);

  fixture_init(&f, c->make, 32, 32, PS_PRECISION_F32, 11);
  fixture_separate(&f);
  PsOptimizer *adam = ps_optimizer_new_adam(ps_net_n_params(f.net), 0.01f, 0.9f, 0.999f, 1e-7f);
  g_assert_cmpfloat(train(&f, adam, 150), <, 0.3);
  ps_optimizer_free(adam);
  fixture_clear(&f);
}

/* Two half-batches, each backward with loss_scale 1/2 (its mean loss times
 * its share of the batch), sum to the full batch's mean-loss gradient. */
static void test_accumulate(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 8, 8, PS_PRECISION_F32, 13);
  net_gradient(&f, 1.0f);
  double full_loss = ps_net_loss(f.net);
  size_t n = ps_net_n_params(f.net);
  g_autofree float *full = g_memdup2(ps_net_grads(f.net), n * sizeof(float));

  ps_net_zero_grads(f.net);
  double half_loss = 0.0;
  for (int h = 0; h < 2; h++) {
    ps_net_set_input(f.net, f.x + (size_t)h * 4 * f.in_elems, f.labels + h * 4, 4);
    ps_net_forward(f.net);
    half_loss += 0.5 * ps_net_loss(f.net);
    ps_net_backward(f.net, 0.5f);
  }
  const float *acc = ps_net_grads(f.net);
  double gmax = 0.0;
  for (size_t i = 0; i < n; i++)
    gmax = MAX(gmax, fabs(full[i]));
  g_assert_cmpfloat(gmax, >, 1e-2);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabs(acc[i] - full[i]), <=, 1e-5 * gmax + 1e-5 * fabs(full[i]));
  g_assert_cmpfloat(fabs(half_loss - full_loss), <=, 1e-6 * full_loss);

  /* And forgetting to zero doubles them. */
  net_gradient(&f, 1.0f);
  ps_net_backward(f.net, 1.0f);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabs(ps_net_grads(f.net)[i] - 2 * full[i]), <=,
                      1e-5 * gmax + 1e-5 * fabs(full[i]));
  fixture_clear(&f);
}

/* A power-of-two loss_scale scales every gradient exactly (each operation
 * downstream is linear in it and exact under scaling by 2^k), in float32
 * and in bfloat16; any other scale, to rounding. */
static void run_loss_scale(const NetCase *c, PsPrecision prec)
{
  Fixture f;
  fixture_init(&f, c->make, 6, 6, prec, 17);
  size_t n = ps_net_n_params(f.net);
  net_gradient(&f, 1.0f);
  g_autofree float *g1 = g_memdup2(ps_net_grads(f.net), n * sizeof(float));
  net_gradient(&f, 4.0f);
  const float *g4 = ps_net_grads(f.net);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    g_assert_cmpfloat(g4[i], ==, 4.0f * g1[i]);
    nonzero += g1[i] != 0.0f;
  }
  g_assert_cmpuint(nonzero * 2, >, n);
  net_gradient(&f, 0.125f);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(ps_net_grads(f.net)[i], ==, 0.125f * g1[i]);
  net_gradient(&f, 1.0f / 3.0f);
  double gmax = 0.0;
  for (size_t i = 0; i < n; i++)
    gmax = MAX(gmax, fabs(g1[i]));
  /* bf16 rounds the scaled gradients of the inputs of each GEMM: 2^-8
   * relative each, so allow 1e-2 there. */
  double tol = prec == PS_PRECISION_BF16 ? 1e-2 : 1e-6;
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabs(ps_net_grads(f.net)[i] - g1[i] / 3.0), <=, tol * gmax);
  fixture_clear(&f);
}

static void test_loss_scale(gconstpointer data)
{
  run_loss_scale(data, PS_PRECISION_F32);
  run_loss_scale(data, PS_PRECISION_BF16);
}

static void test_determinism(void)
{
  Fixture a, b, c;
  fixture_init(&a, make_cnn, 8, 8, PS_PRECISION_F32, 21);
  fixture_init(&b, make_cnn, 8, 8, PS_PRECISION_F32, 21);
  fixture_init(&c, make_cnn, 8, 8, PS_PRECISION_F32, 22);
  size_t n = ps_net_n_params(a.net);
  g_assert_cmpmem(ps_net_params(a.net), n * sizeof(float), ps_net_params(b.net),
                  n * sizeof(float));
  g_assert_true(memcmp(ps_net_params(a.net), ps_net_params(c.net), n * sizeof(float)) != 0);
  PsOptimizer *oa = ps_optimizer_new_adam(n, 0.01f, 0.9f, 0.999f, 1e-7f);
  PsOptimizer *ob = ps_optimizer_new_adam(n, 0.01f, 0.9f, 0.999f, 1e-7f);
  for (int s = 0; s < 5; s++) {
    net_gradient(&a, 1.0f);
    net_gradient(&b, 1.0f);
    ps_optimizer_step(oa, ps_net_params(a.net), ps_net_grads(a.net));
    ps_optimizer_step(ob, ps_net_params(b.net), ps_net_grads(b.net));
  }
  g_assert_cmpmem(ps_net_params(a.net), n * sizeof(float), ps_net_params(b.net),
                  n * sizeof(float));
  g_assert_cmpfloat(net_loss_at(&a), ==, net_loss_at(&b));
  ps_optimizer_free(oa);
  ps_optimizer_free(ob);
  fixture_clear(&a);
  fixture_clear(&b);
  fixture_clear(&c);
}

/* He-uniform (limit sqrt(6/fan_in)) before a ReLU, Glorot-uniform (limit
 * sqrt(6/(fan_in+fan_out))) otherwise; biases zero. */
static void test_init(void)
{
  int64_t in[] = {400};
  PsModel *m = model_new(1, in, 10);
  add(m, PS_LAYER_DENSE, 300, 0, 0, 0, 1);
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 200, 0, 0, 0, 1);
  add(m, PS_LAYER_TANH, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 10, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 4, PS_PRECISION_F32, 99, &error);
  g_assert_no_error(error);
  const float *p = ps_net_params(net);
  struct { int layer; double fan_in, limit; } want[] = {
    {0, 400, sqrt(6.0 / 400)},
    {2, 300, sqrt(6.0 / (300 + 200))},
    {4, 200, sqrt(6.0 / (200 + 10))},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(want); k++) {
    size_t off, len;
    ps_net_layer_params(net, want[k].layer, &off, &len);
    size_t units = (size_t)m->layers[want[k].layer].units;
    size_t nw = len - units;
    double mx = 0.0, sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < nw; i++) {
      double v = p[off + i];
      mx = MAX(mx, fabs(v));
      sum += v;
      sq += v * v;
    }
    double lim = want[k].limit;
    g_assert_cmpfloat(mx, <=, lim);
    g_assert_cmpfloat(mx, >, 0.99 * lim);
    /* uniform on [-L, L]: mean 0, variance L^2 / 3 */
    g_assert_cmpfloat(fabs(sum / nw), <, 0.05 * lim);
    g_assert_cmpfloat(fabs(sq / nw / (lim * lim / 3) - 1.0), <, 0.05);
    for (size_t i = nw; i < len; i++)
      g_assert_cmpfloat(p[off + i], ==, 0.0f);
  }
  ps_net_free(net);
  model_free(m);
}

static void test_layer_params(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 2, 2, PS_PRECISION_F32, 1);
  size_t expect = 0;
  for (int i = 0; i < f.model->n_layers; i++) {
    size_t off, len;
    ps_net_layer_params(f.net, i, &off, &len);
    g_assert_cmpuint(off, ==, expect);
    g_assert_cmpuint(len, ==, (size_t)f.model->layers[i].params);
    expect += len;
  }
  g_assert_cmpuint(expect, ==, ps_net_n_params(f.net));
  fixture_clear(&f);
}

/* Accuracy over 37 examples in batches of 16 (the last one short), against
 * argmax of the logits of a one-layer model computed here. */
static void test_accuracy(void)
{
  int64_t in[] = {5};
  PsModel *m = model_new(1, in, 4);
  add(m, PS_LAYER_DENSE, 4, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 16, PS_PRECISION_F32, 5, &error);
  g_assert_no_error(error);
  enum { N = 37 };
  float x[N * 5];
  int32_t labels[N];
  GRand *r = g_rand_new_with_seed(5);
  for (int i = 0; i < N * 5; i++)
    x[i] = (float)g_rand_double_range(r, -1, 1);
  const float *p = ps_net_params(net);
  int right = 0;
  for (int e = 0; e < N; e++) {
    int best = 0;
    double z[4];
    for (int o = 0; o < 4; o++) {
      z[o] = p[20 + o];
      for (int i = 0; i < 5; i++)
        z[o] += (double)x[e * 5 + i] * p[i * 4 + o];
      if (z[o] > z[best])
        best = o;
    }
    /* About half the labels right, half wrong. */
    labels[e] = g_rand_boolean(r) ? best : (best + 1) % 4;
    right += labels[e] == best;
  }
  g_assert_cmpint(right, >, 0);
  g_assert_cmpint(right, <, N);
  double acc = ps_net_accuracy(net, x, labels, N);
  g_assert_cmpfloat(acc, ==, (double)right / N);
  g_rand_free(r);
  ps_net_free(net);
  model_free(m);
}

/* bf16 numerics: close to float32 (inputs lose ~3 decimal digits) but not
 * the same. */
static void test_bf16(gconstpointer data)
{
  const NetCase *c = data;
  Fixture a, b;
  fixture_init(&a, c->make, 8, 8, PS_PRECISION_F32, 23);
  fixture_init(&b, c->make, 8, 8, PS_PRECISION_BF16, 23);
  double la = net_loss_at(&a), lb = net_loss_at(&b);
  g_test_message("%s: f32 loss %.7f, bf16 loss %.7f", c->name, la, lb);
  g_assert_cmpfloat(la, !=, lb);
  g_assert_cmpfloat(fabs(la - lb), <, 2e-2 * la);
  fixture_clear(&a);
  fixture_clear(&b);
}

/* ---- errors ------------------------------------------------------------- */

static void expect_error(PsModel *m, const char *needle1, const char *needle2)
{
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 4, PS_PRECISION_F32, 1, &error);
  g_assert_null(net);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("error: %s", error->message);
  g_assert_nonnull(strstr(error->message, needle1));
  if (needle2)
    g_assert_nonnull(strstr(error->message, needle2));
  g_error_free(error);
}

static void test_errors(void)
{
  int64_t seq[] = {4, 8};
  PsModel *m = model_new(2, seq, 3);
  add(m, PS_LAYER_DENSE, 8, 0, 0, 0, 1);
  PsLayer *bn = add(m, PS_LAYER_BATCHNORM, 0, 0, 0, 0, 0);
  g_free(bn->name);
  bn->name = g_strdup("block0.bn");
  bn->params = 2 * 8; /* a gain and a shift per feature */
  add(m, PS_LAYER_FLATTEN, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  /* batch normalization has a kernel: the net builds */
  GError *bn_error = NULL;
  PsNet *bn_net = ps_net_new(m, 4, PS_PRECISION_F32, 1, &bn_error);
  g_assert_no_error(bn_error);
  ps_net_free(bn_net);
  model_free(m);

  /* Attention whose heads do not divide the width. */
  m = model_new(2, seq, 3);
  PsLayer *att = add(m, PS_LAYER_ATTENTION, 0, 0, 0, 0, 0);
  att->heads = 3;
  att->params = 4 * 8 * 8;
  add(m, PS_LAYER_GLOBAL_AVGPOOL, 0, 0, 0, 0, 0)->out_shape[0] = 8;
  m->layers[1].out_rank = 1;
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  expect_error(m, "\"l0\"", "heads");
  model_free(m);

  /* A model without a loss at the end. */
  m = make_mlp();
  m->n_layers--;
  g_free(m->layers[m->n_layers].name);
  expect_error(m, "softmax_xent", NULL);
  model_free(m);

  /* Shapes that do not chain. */
  m = make_mlp();
  m->layers[2].in_shape[0] = 9;
  expect_error(m, "\"l2\"", "(9)");
  model_free(m);

  /* An output shape the kernel would not produce. */
  m = make_cnn();
  m->layers[0].out_shape[0] = 4;
  m->layers[1].in_shape[0] = 4;
  m->layers[1].out_shape[0] = 4;
  expect_error(m, "\"l0\"", "(6, 6, 3)");
  model_free(m);

  /* A parameter count that disagrees with the kernel's. */
  m = make_mlp();
  m->layers[0].params++;
  expect_error(m, "\"l0\"", "57");
  model_free(m);

  /* A layer fed by an earlier layer than the one before it: the wiring is
   * followed (residual shortcuts need it), so here the shapes disagree. */
  m = make_mlp();
  m->layers[3].input_from = 0;
  expect_error(m, "\"l3\"", "(8) feeding it");
  model_free(m);

  /* ... or by a later one. */
  m = make_mlp();
  m->layers[3].input_from = 5;
  expect_error(m, "\"l3\"", "earlier layer");
  model_free(m);

  /* "same" pooling is fine while it adds no padding (6x6 by 2), an error
   * once it would (5x5 by 2 gives 3x3 windows, one hanging over). */
  m = make_cnn();
  m->layers[2].same_padding = TRUE;
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 2, PS_PRECISION_F32, 1, &error);
  g_assert_no_error(error);
  ps_net_free(net);
  model_free(m);
  int64_t in5[] = {5, 5, 2};
  m = model_new(3, in5, 3);
  PsLayer *pool = add(m, PS_LAYER_MAXPOOL, 0, 2, 0, 1, 0);
  pool->out_shape[0] = pool->out_shape[1] = 3;
  add(m, PS_LAYER_FLATTEN, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  expect_error(m, "\"l0\"", "\"same\"");
  model_free(m);

  /* A loss that is not last. */
  m = make_mlp();
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  m->layers[m->n_layers - 1].kind = PS_LAYER_SOFTMAX_XENT;
  m->layers[m->n_layers - 2].out_rank = 1;
  expect_error(m, "\"l7\"", "last");
  model_free(m);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ps_kernels_init();
  for (size_t i = 0; i < G_N_ELEMENTS(net_cases); i++) {
    const NetCase *c = &net_cases[i];
    struct { const char *what; GTestDataFunc fn; } tests[] = {
      {"forward-reference", test_forward_reference},
      {"gradient-reference", test_gradient_reference},
      {"gradient-net-fd", test_gradient_net_fd},
      {"train", test_train},
      {"accumulate", test_accumulate},
      {"loss-scale", test_loss_scale},
      {"layer-params", test_layer_params},
      {"bf16", test_bf16},
    };
    for (size_t t = 0; t < G_N_ELEMENTS(tests); t++) {
      g_autofree char *path = g_strdup_printf("/net/%s/%s", c->name, tests[t].what);
      g_test_add_data_func(path, c, tests[t].fn);
    }
  }
  g_test_add_func("/net/determinism", test_determinism);
  g_test_add_func("/net/init", test_init);
  g_test_add_func("/net/accuracy", test_accuracy);
  g_test_add_func("/net/errors", test_errors);
  return g_test_run();
}

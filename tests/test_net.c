/* test_net.c: a network's numerics on one device.
 *
 * Small MLPs and CNNs are built by hand as PsModel structs (shapes and
 * parameter counts worked out here, independently of net.c).  The net's
 * loss is checked against a plain-loop double-precision interpreter of the
 * same model written below, its gradients against central differences of
 * that interpreter (tight) and of ps_net_loss itself (float, looser), and
 * the training-loop properties the simulator relies on: loss goes down,
 * half-batch accumulation equals the full batch, loss_scale scales the
 * gradients exactly, same seed gives the same bits.
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

/* ---- building models by hand -------------------------------------------- */

static PsModel *model_new(int rank, const int64_t *shape, int classes)
{
  PsModel *m = g_new0(PsModel, 1);
  m->name = g_strdup("test-model");
  m->in_rank = rank;
  memcpy(m->in_shape, shape, sizeof(int64_t) * rank);
  m->classes = classes;
  m->layers = g_new0(PsLayer, 32);
  return m;
}

/* Frees a model built here or read by layers.c. */
static void model_free(PsModel *m)
{
  for (int i = 0; i < m->n_layers; i++)
    g_free(m->layers[i].name);
  g_free(m->layers);
  g_free(m->name);
  g_free(m->file);
  g_free(m->description);
  g_free(m);
}

static int64_t elems(const int64_t *shape, int rank)
{
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

static int ceil_div(int64_t a, int64_t b)
{
  return (int)((a + b - 1) / b);
}

/* Appends a layer fed by the previous one; `a` is units or filters, `k` the
 * kernel or pool size, `s` the stride (0: default).  Output shape and
 * parameter count follow TensorFlow's conventions. */
static PsLayer *add(PsModel *m, PsLayerKind kind, int64_t a, int64_t k, int64_t s, int same,
                    int bias)
{
  g_assert_cmpint(m->n_layers, <, 32);
  PsLayer *l = &m->layers[m->n_layers];
  const PsLayer *prev = m->n_layers ? &m->layers[m->n_layers - 1] : NULL;
  l->kind = kind;
  l->name = g_strdup_printf("l%d", m->n_layers);
  l->input_from = m->n_layers - 1;
  l->shortcut_from = -1;
  l->in_rank = prev ? prev->out_rank : m->in_rank;
  memcpy(l->in_shape, prev ? prev->out_shape : m->in_shape, sizeof l->in_shape);
  l->out_rank = l->in_rank;
  memcpy(l->out_shape, l->in_shape, sizeof l->out_shape);
  l->bias = bias;
  l->same_padding = same;
  l->stride = s;
  const int64_t *in = l->in_shape;
  switch (kind) {
  case PS_LAYER_DENSE:
    l->units = a;
    l->out_shape[l->in_rank - 1] = a;
    l->params = in[l->in_rank - 1] * a + (bias ? a : 0);
    break;
  case PS_LAYER_CONV2D: {
    int st = s ? (int)s : 1;
    l->filters = a;
    l->kernel = k;
    l->out_shape[0] = same ? ceil_div(in[0], st) : ceil_div(in[0] - k + 1, st);
    l->out_shape[1] = same ? ceil_div(in[1], st) : ceil_div(in[1] - k + 1, st);
    l->out_shape[2] = a;
    l->params = k * k * in[2] * a + (bias ? a : 0);
    break;
  }
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL: {
    int st = s ? (int)s : (int)k;
    l->pool = k;
    l->out_shape[0] = ceil_div(in[0] - k + 1, st);
    l->out_shape[1] = ceil_div(in[1] - k + 1, st);
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL:
    l->out_rank = 1;
    l->out_shape[0] = in[2];
    l->out_shape[1] = l->out_shape[2] = 0;
    break;
  case PS_LAYER_FLATTEN:
    l->out_rank = 1;
    l->out_shape[0] = elems(in, l->in_rank);
    l->out_shape[1] = l->out_shape[2] = 0;
    break;
  default:
    break;
  }
  m->params += l->params;
  m->n_layers++;
  return l;
}

/* 6 -> 8 relu -> 7 gelu -> 5 tanh -> 3 classes */
static PsModel *make_mlp(void)
{
  int64_t in[] = {6};
  PsModel *m = model_new(1, in, 3);
  add(m, PS_LAYER_DENSE, 8, 0, 0, 0, 1);
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 7, 0, 0, 0, 1);
  add(m, PS_LAYER_GELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 5, 0, 0, 0, 0);
  add(m, PS_LAYER_TANH, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}

/* (6,6,2): conv3 same relu, maxpool 2, conv3 stride 2 same gelu, global
 * average, dense 3. */
static PsModel *make_cnn(void)
{
  int64_t in[] = {6, 6, 2};
  PsModel *m = model_new(3, in, 3);
  add(m, PS_LAYER_CONV2D, 3, 3, 1, 1, 1);
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_MAXPOOL, 0, 2, 0, 0, 0);
  add(m, PS_LAYER_CONV2D, 4, 3, 2, 1, 1);
  add(m, PS_LAYER_GELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_GLOBAL_AVGPOOL, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}

/* (7,7,1): conv3 valid tanh, overlapping avgpool 2 stride 1, flatten,
 * dense 3; a flatten between layers with parameters. */
static PsModel *make_cnn_flat(void)
{
  int64_t in[] = {7, 7, 1};
  PsModel *m = model_new(3, in, 3);
  add(m, PS_LAYER_CONV2D, 2, 3, 1, 0, 1);
  add(m, PS_LAYER_TANH, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_AVGPOOL, 0, 2, 1, 0, 0);
  add(m, PS_LAYER_FLATTEN, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}

typedef PsModel *(*MakeModel)(void);

typedef struct {
  const char *name;
  MakeModel make;
} NetCase;

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
    case PS_LAYER_CONV2D: {
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
      break;
    }
    case PS_LAYER_MAXPOOL:
    case PS_LAYER_AVGPOOL: {
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
      break;
    }
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

typedef struct {
  PsModel *model;
  PsNet *net;
  int batch;
  size_t in_elems;
  float *x;
  int32_t *labels;
} Fixture;

static void fixture_init(Fixture *f, MakeModel make, int batch, int max_batch,
                         PsPrecision prec, uint64_t seed)
{
  GError *error = NULL;
  f->model = make();
  f->net = ps_net_new(f->model, max_batch, prec, seed, &error);
  g_assert_no_error(error);
  g_assert_nonnull(f->net);
  f->batch = batch;
  f->in_elems = (size_t)elems(f->model->in_shape, f->model->in_rank);
  f->x = g_new(float, f->in_elems * batch);
  f->labels = g_new(int32_t, batch);
  GRand *r = g_rand_new_with_seed((guint32)seed + 1000);
  for (size_t i = 0; i < f->in_elems * batch; i++)
    f->x[i] = (float)g_rand_double_range(r, -1, 1);
  for (int b = 0; b < batch; b++)
    f->labels[b] = g_rand_int_range(r, 0, (gint32)f->model->classes);
  /* Non-zero biases, so their gradients and wiring are exercised too. */
  float *p = ps_net_params(f->net);
  for (int i = 0; i < f->model->n_layers; i++) {
    const PsLayer *l = &f->model->layers[i];
    if (!l->bias)
      continue;
    size_t off, len;
    ps_net_layer_params(f->net, i, &off, &len);
    int64_t nb = l->kind == PS_LAYER_DENSE ? l->units : l->filters;
    for (size_t j = off + len - (size_t)nb; j < off + len; j++)
      p[j] = (float)g_rand_double_range(r, -0.3, 0.3);
  }
  g_rand_free(r);
}

static void fixture_clear(Fixture *f)
{
  ps_net_free(f->net);
  model_free(f->model);
  g_free(f->x);
  g_free(f->labels);
}

static double net_loss_at(Fixture *f)
{
  ps_net_set_input(f->net, f->x, f->labels, f->batch);
  ps_net_forward(f->net);
  return ps_net_loss(f->net);
}

static void net_gradient(Fixture *f, float loss_scale)
{
  ps_net_zero_grads(f->net);
  ps_net_set_input(f->net, f->x, f->labels, f->batch);
  ps_net_forward(f->net);
  ps_net_backward(f->net, loss_scale);
}

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

static double train(Fixture *f, PsOptimizer *opt, int steps)
{
  double first = net_loss_at(f);
  for (int s = 0; s < steps; s++) {
    net_gradient(f, 1.0f);
    ps_optimizer_step(opt, ps_net_params(f->net), ps_net_grads(f->net));
  }
  double last = net_loss_at(f);
  g_test_message("loss %.4f -> %.4f after %d steps", first, last, steps);
  return last / first;
}

static void test_train(gconstpointer data)
{
  const NetCase *c = data;
  Fixture f;
  fixture_init(&f, c->make, 32, 32, PS_PRECISION_F32, 11);
  /* A learnable batch: each class shifts the inputs its own way. */
  for (int b = 0; b < f.batch; b++)
    for (size_t i = 0; i < f.in_elems; i++)
      f.x[b * f.in_elems + i] += 0.8f * (float)sin(1.7 * (i + 1) * (f.labels[b] + 1));
  PsOptimizer *sgd = ps_optimizer_new_sgd(ps_net_n_params(f.net), 0.1f, 0.9f);
  g_assert_cmpfloat(train(&f, sgd, 150), <, 0.3);
  ps_optimizer_free(sgd);
  fixture_clear(&f);

  fixture_init(&f, c->make, 32, 32, PS_PRECISION_F32, 11);
  for (int b = 0; b < f.batch; b++)
    for (size_t i = 0; i < f.in_elems; i++)
      f.x[b * f.in_elems + i] += 0.8f * (float)sin(1.7 * (i + 1) * (f.labels[b] + 1));
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
  f->batch = batch;
  f->in_elems = (size_t)elems(f->model->in_shape, f->model->in_rank);
  f->x = g_new(float, f->in_elems * batch);
  f->labels = g_new(int32_t, batch);
  GRand *r = g_rand_new_with_seed((guint32)seed + 2000);
  for (size_t i = 0; i < f->in_elems * batch; i++)
    f->x[i] = (float)g_rand_double_range(r, -1, 1);
  for (int b = 0; b < batch; b++)
    f->labels[b] = g_rand_int_range(r, 0, (gint32)f->model->classes);
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
  for (int b = 0; b < f.batch; b++)
    for (size_t i = 0; i < f.in_elems; i++)
      f.x[b * f.in_elems + i] += 0.8f * (float)sin(1.7 * (i + 1) * (f.labels[b] + 1));
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
  add(m, PS_LAYER_FLATTEN, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  expect_error(m, "block0.bn", "\"batchnorm\"");
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
  g_test_add_func("/net/determinism", test_determinism);
  g_test_add_func("/net/init", test_init);
  g_test_add_func("/net/accuracy", test_accuracy);
  g_test_add_func("/net/errors", test_errors);
  return g_test_run();
}

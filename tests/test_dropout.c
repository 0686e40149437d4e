/* test_dropout.c: the dropout layer and attention's dropout of its
 * probabilities, in numerics and in cost.
 *
 * The mask against statistics (the kept fraction of a large tensor within
 * a binomial bound of 1 - rate, the mean kept within its standard error)
 * and against itself (the same key gives the same mask, an example's mask
 * is the same whatever batch position or device holds it); the layer's
 * gradient against central differences with the mask fixed; attention's
 * dropout against a plain double loop applying the same mask; rate 0
 * against no layer at all, bit for bit; the cost model's bytes against
 * their closed form; a replicated run against one device on the same
 * global batch; a rate outside [0, 1) refused naming the file, the key
 * and the range.
 * Invariant: every check compares against an independent computation or a
 * statistical bound, never against a figure read off the code. */
#include "hw/cost.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/net.h"
#include "support/cli.h"
#include "support/experiment.h"
#include "support/numeric.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static PsModel *model_text(const char *text, GError **error)
{
  g_autofree char *json = g_strdup(text);
  for (char *c = json; *c; c++)
    if (*c == '\'')
      *c = '"';
  json_object *o = json_tokener_parse(json);
  g_assert_nonnull(o);
  PsModel *m = ps_model_from_json(o, "test.json", "", error);
  json_object_put(o);
  return m;
}

static PsModel *model_ok(const char *text)
{
  GError *err = NULL;
  PsModel *m = model_text(text, &err);
  g_assert_no_error(err);
  return m;
}

/* ---- the mask --------------------------------------------------------- */

/* Over n = 2^20 elements at rate r, the kept count is Binomial(n, 1 - r):
 * within 6 standard deviations of n (1 - r) (a false alarm under 1e-8);
 * the mean of the outputs of an all-ones input is 1 in expectation, with
 * standard error sqrt(r / ((1 - r) n)). */
static void test_kept_fraction(void)
{
  const size_t n = (size_t)1 << 20;
  g_autofree float *x = g_new(float, n);
  g_autofree float *y = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    x[i] = 1.0f;
  const float rates[] = {0.1f, 0.5f, 0.9f};
  PsDropoutKey key = {.seed = 7, .step = 3, .layer = 5, .first = 11};
  for (guint k = 0; k < G_N_ELEMENTS(rates); k++) {
    const double r = rates[k];
    ps_dropout_apply(&key, rates[k], x, y, 4, n / 4);
    size_t kept = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
      kept += y[i] != 0.0f;
      sum += y[i];
      if (y[i] != 0.0f)
        g_assert_cmpfloat(y[i], ==, (float)(1.0 / (1.0 - r)));
    }
    double sd = sqrt((double)n * r * (1 - r)), mean = sum / (double)n;
    double se = sqrt(r / ((1 - r) * (double)n));
    g_test_message("rate %.1f: kept %zu of %zu (expected %.0f, sd %.0f); mean %.5f (se %.5f)",
                   r, kept, n, (double)n * (1 - r), sd, mean, se);
    g_assert_cmpfloat(fabs((double)kept - (double)n * (1 - r)), <=, 6 * sd);
    g_assert_cmpfloat(fabs(mean - 1.0), <=, 6 * se);
  }
}

/* The same key gives the same mask; example e of a batch starting at f is
 * example e - 1 of one starting at f + 1 (what lets any device compute any
 * example's mask); another step or layer gives another mask, differing in
 * about 2 r (1 - r) of the elements. */
static void test_deterministic(void)
{
  const size_t per = 4096;
  const float rate = 0.3f;
  PsDropoutKey a = {.seed = 1, .step = 2, .layer = 3, .first = 40};
  PsDropoutKey b = a;
  b.first = 41;
  for (uint64_t j = 0; j < per; j++) {
    g_assert_cmpint(ps_dropout_keeps(&a, 1, j, rate), ==, ps_dropout_keeps(&a, 1, j, rate));
    g_assert_cmpint(ps_dropout_keeps(&a, 1, j, rate), ==, ps_dropout_keeps(&b, 0, j, rate));
  }
  PsDropoutKey other[3] = {a, a, a};
  other[0].step++;
  other[1].layer++;
  other[2].seed++;
  for (int k = 0; k < 3; k++) {
    size_t differ = 0;
    for (uint64_t j = 0; j < per; j++)
      differ += ps_dropout_keeps(&a, 0, j, rate) != ps_dropout_keeps(&other[k], 0, j, rate);
    double want = 2 * rate * (1 - rate) * per, sd = sqrt(want);
    g_assert_cmpfloat(fabs((double)differ - want), <=, 6 * sd);
  }
}

/* ---- the layer in a net ------------------------------------------------ */

static const char *const small =
    "{'input': {'shape': [3, 6], 'classes': 4}, 'layers': ["
    "{'type': 'dense', 'units': 8}, {'type': 'dropout', 'rate': %s},"
    "{'type': 'dense', 'units': 4}, {'type': 'softmax_xent'}]}";

/* A batch of `batch` examples (3 x 6 values in [-1, 1], 3 labels of 4
 * classes each) drawn from seed. */
static void small_batch(guint32 seed, float *x, int32_t *y, int batch)
{
  GRand *r = g_rand_new_with_seed(seed);
  fill_uniform(r, x, (size_t)batch * 18, -1, 1);
  for (int i = 0; i < batch * 3; i++)
    y[i] = (int32_t)g_rand_int_range(r, 0, 4);
  g_rand_free(r);
}

static PsNet *small_net(const char *rate, PsModel **model, const float *x, const int32_t *y,
                        int batch)
{
  g_autofree char *text = g_strdup_printf(small, rate);
  *model = model_ok(text);
  GError *err = NULL;
  PsNet *net = ps_net_new(*model, batch, PS_PRECISION_F32, 9, &err);
  g_assert_no_error(err);
  ps_net_set_input(net, x, y, batch);
  return net;
}

/* d(loss)/d(w) of every weight against central differences of the loss
 * (a double sum of float logits) with the mask fixed by its key: steps
 * of 1e-3 on weights of order 0.5, so the float logits' rounding (1e-7
 * relative) costs under 1e-4 of the difference quotient. */
static void test_gradient(void)
{
  enum { B = 2 };
  float x[B * 18];
  int32_t y[B * 3];
  small_batch(3, x, y, B);
  PsModel *m;
  PsNet *net = small_net("0.4", &m, x, y, B);
  ps_net_set_dropout(net, 5, 100);
  ps_net_zero_grads(net);
  ps_net_forward(net);
  ps_net_backward(net, 1.0f);
  size_t n = ps_net_n_params(net), dropped = 0;
  size_t nd = 0;
  const float *h = ps_net_layer_output(net, 1, &nd);
  for (size_t i = 0; i < nd; i++)
    dropped += h[i] == 0.0f;
  g_assert_cmpuint(dropped, >, 0); /* the mask does something */
  g_autofree float *g = g_memdup2(ps_net_grads(net), n * sizeof(float));
  float *w = ps_net_params(net);
  double worst = -INFINITY;
  const double step = 1e-3;
  for (size_t i = 0; i < n; i++) {
    float save = w[i];
    double lp, lm;
    w[i] = (float)(save + step);
    ps_net_set_dropout(net, 5, 100);
    ps_net_forward(net);
    lp = ps_net_loss(net);
    w[i] = (float)(save - step);
    ps_net_forward(net);
    lm = ps_net_loss(net);
    w[i] = save;
    double fd = (lp - lm) / (2 * step);
    worst = MAX(worst, fabs(fd - g[i]) - (1e-3 * fabs(fd) + 2e-4));
  }
  g_test_message("dropout net: %zu weights, %zu of %zu hidden values dropped; worst excess %.3g",
                 n, dropped, nd, worst);
  g_assert_cmpfloat(worst, <=, 0.0);
  ps_net_free(net);
  ps_model_free(m);
}

/* Rate 0 is no layer: the same weights (the dropout has none), the same
 * loss, gradients and outputs bit for bit, training or not; and it costs
 * nothing: the same FLOPs, kept bytes and step compute time. */
static void test_rate_zero(void)
{
  enum { B = 3 };
  float x[B * 18];
  int32_t y[B * 3];
  small_batch(4, x, y, B);
  PsModel *m0;
  PsNet *a = small_net("0", &m0, x, y, B);
  PsModel *m1 = model_ok("{'input': {'shape': [3, 6], 'classes': 4}, 'layers': ["
                         "{'type': 'dense', 'units': 8}, {'type': 'dense', 'units': 4},"
                         "{'type': 'softmax_xent'}]}");
  GError *err = NULL;
  PsNet *b = ps_net_new(m1, B, PS_PRECISION_F32, 9, &err);
  g_assert_no_error(err);
  ps_net_set_input(b, x, y, B);
  size_t n = ps_net_n_params(a);
  g_assert_cmpuint(n, ==, ps_net_n_params(b));
  g_assert_cmpmem(ps_net_params(a), n * 4, ps_net_params(b), n * 4);
  ps_net_set_dropout(a, 1, 0);
  ps_net_set_dropout(b, 1, 0);
  ps_net_zero_grads(a);
  ps_net_zero_grads(b);
  ps_net_forward(a);
  ps_net_forward(b);
  ps_net_backward(a, 1.0f);
  ps_net_backward(b, 1.0f);
  g_assert_cmpfloat(ps_net_loss(a), ==, ps_net_loss(b));
  g_assert_cmpmem(ps_net_grads(a), n * 4, ps_net_grads(b), n * 4);
  size_t na, nb;
  const float *ya = ps_net_layer_output(a, 2, &na), *yb = ps_net_layer_output(b, 1, &nb);
  g_assert_cmpmem(ya, na * 4, yb, nb * 4);

  g_assert_cmpfloat(m0->fwd_flops, ==, m1->fwd_flops);
  g_assert_cmpfloat(m0->bwd_flops, ==, m1->bwd_flops);
  g_assert_cmpint(ps_model_memory_bytes(m0, 0, -1, 32, 2, 2), ==,
                  ps_model_memory_bytes(m1, 0, -1, 32, 2, 2));
  PsTopology *t = topology_load("tpu-v4-8", NULL);
  for (int bwd = 0; bwd < 2; bwd++) {
    PsOpCost c0, c1;
    ps_cost_layers(t, m0, 0, m0->n_layers - 1, 32, PS_PRECISION_BF16, TRUE, bwd, &c0);
    ps_cost_layers(t, m1, 0, m1->n_layers - 1, 32, PS_PRECISION_BF16, TRUE, bwd, &c1);
    g_assert_cmpint(c0.time, ==, c1.time);
    g_assert_cmpfloat(c0.bytes, ==, c1.bytes);
  }
  ps_topology_free(t);
  ps_net_free(a);
  ps_net_free(b);
  ps_model_free(m0);
  ps_model_free(m1);
}

/* Without a key (a batch set for evaluation) the layer is the identity;
 * with one, every element is 0 or the input over 1 - rate, and a batch set
 * again runs without dropout until the key is given again. */
static void test_training_only(void)
{
  enum { B = 4 };
  float x[B * 18];
  int32_t y[B * 3];
  small_batch(5, x, y, B);
  PsModel *m;
  PsNet *net = small_net("0.5", &m, x, y, B);
  size_t n;
  ps_net_forward(net);
  const float *h = ps_net_layer_output(net, 0, &n), *d = ps_net_layer_output(net, 1, NULL);
  g_assert_cmpmem(h, n * 4, d, n * 4);
  ps_net_set_dropout(net, 0, 0);
  ps_net_forward(net);
  size_t zeros = 0;
  for (size_t i = 0; i < n; i++) {
    zeros += d[i] == 0.0f;
    g_assert_true(d[i] == 0.0f || d[i] == h[i] * 2.0f);
  }
  g_assert_cmpuint(zeros, >, 0);
  ps_net_set_input(net, x, y, B);
  ps_net_forward(net);
  g_assert_cmpmem(h, n * 4, d, n * 4);
  ps_net_free(net);
  ps_model_free(m);
}

/* ---- attention's probabilities ---------------------------------------- */

typedef struct {
  int batch, seq, dim, heads;
  float rate;
  PsDropoutKey key;
  const double *r;
} DropAttn;

/* c (m x n) = a (m x k, row stride lda) b (k x n, row stride ldb), in
 * double. */
static void ref_product(const double *a, int lda, const double *b, int ldb, int m, int k, int n,
                        double *c, int ldc)
{
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int t = 0; t < k; t++)
        s += a[i * lda + t] * b[t * ldb + j];
      c[i * ldc + j] = s;
    }
}

/* Plain loops in double: Q K V, per head P = softmax(Q K^T / sqrt(dh)),
 * P' = P o mask / (1 - rate) with the mask of element (h S + i) S + j,
 * context P' V, output projection; v = [x, W_qkv, W_o] (no biases). */
static void ref_drop_attention(const DropAttn *c, const double *v, double *y)
{
  const int S = c->seq, D = c->dim, H = c->heads, dh = D / H;
  const double *x = v, *wqkv = v + (size_t)c->batch * S * D, *wo = wqkv + 3 * D * D;
  double *qkv = g_new(double, (size_t)S * 3 * D), *ctx = g_new(double, (size_t)S * D);
  double *p = g_new(double, (size_t)S * S);
  for (int e = 0; e < c->batch; e++) {
    ref_product(x + (size_t)e * S * D, D, wqkv, 3 * D, S, D, 3 * D, qkv, 3 * D);
    for (int h = 0; h < H; h++) {
      for (int i = 0; i < S; i++) {
        double *row = p + (size_t)i * S, mx = -INFINITY, sum = 0;
        for (int j = 0; j < S; j++) {
          double dot = 0;
          for (int k = 0; k < dh; k++)
            dot += qkv[i * 3 * D + h * dh + k] * qkv[j * 3 * D + D + h * dh + k];
          mx = MAX(mx, row[j] = dot / sqrt((double)dh));
        }
        for (int j = 0; j < S; j++)
          sum += (row[j] = exp(row[j] - mx));
        for (int j = 0; j < S; j++) {
          uint64_t el = ((uint64_t)h * S + i) * S + j;
          gboolean keep = ps_dropout_keeps(&c->key, e, el, c->rate);
          row[j] = keep ? row[j] / sum / (1.0 - c->rate) : 0;
        }
      }
      ref_product(p, S, qkv + 2 * D + h * dh, 3 * D, S, S, dh, ctx + h * dh, D);
    }
    ref_product(ctx, D, wo, D, S, D, D, y + (size_t)e * S * D, D);
  }
  g_free(qkv);
  g_free(ctx);
  g_free(p);
}

static double drop_attn_objective(const double *v, const void *vc)
{
  const DropAttn *c = vc;
  size_t ny = (size_t)c->batch * c->seq * c->dim;
  double *y = g_new(double, ny);
  ref_drop_attention(c, v, y);
  double s = weighted_sum(c->r, y, ny);
  g_free(y);
  return s;
}

/* The kernel's forward and every gradient against the double loops with
 * the same mask (and its finite differences), with test_kernels.c's
 * tolerances; without a key the kernel is plain attention. */
static void test_attention(void)
{
  DropAttn c = {.batch = 2, .seq = 6, .dim = 8, .heads = 2, .rate = 0.25f,
                .key = {.seed = 3, .step = 8, .layer = 1, .first = 20}};
  PsAttnShape s = {.batch = c.batch, .seq = c.seq, .dim = c.dim, .heads = c.heads,
                   .dropout = c.rate, .key = &c.key};
  const size_t nx = (size_t)c.batch * c.seq * c.dim, nw = 4 * (size_t)c.dim * c.dim;
  const size_t nv = nx + nw;
  GRand *r = g_rand_new_with_seed(61);
  g_autofree float *v = g_new(float, nv);
  g_autofree float *y = g_new(float, nx);
  g_autofree float *y0 = g_new(float, nx);
  g_autofree float *dy = g_new(float, nx);
  g_autofree float *dv = g_new0(float, nv);
  g_autofree float *saved = g_new(float, ps_attention_saved(&s));
  g_autofree float *ws = g_new(float, ps_attention_workspace(&s));
  fill_uniform(r, v, nx, -1, 1);
  fill_uniform(r, v + nx, nw, -0.9, 0.9);
  fill_uniform(r, dy, nx, -1, 1);
  ps_attention_forward(PS_PRECISION_F32, &s, v, v + nx, NULL, y, saved, ws);
  ps_attention_backward(PS_PRECISION_F32, &s, v, v + nx, saved, dy, dv, dv + nx, NULL, ws);

  g_autofree double *vd = to_double(v, nv);
  g_autofree double *rd = to_double(dy, nx);
  g_autofree double *yref = g_new(double, nx);
  g_autofree double *g = g_new(double, nv);
  c.r = rd;
  ref_drop_attention(&c, vd, yref);
  assert_close("dropout attention y", y, yref, nx, 1.0);
  fd_gradient(drop_attn_objective, &c, vd, nv, g);
  assert_close("dropout attention dx", dv, g, nx, 1.0);
  assert_close("dropout attention dW", dv + nx, g + nx, nw, 1.0);

  /* no key: plain attention, bit for bit that of a shape without dropout */
  PsAttnShape plain = s;
  plain.dropout = 0;
  plain.key = NULL;
  s.key = NULL;
  ps_attention_forward(PS_PRECISION_F32, &s, v, v + nx, NULL, y, saved, ws);
  ps_attention_forward(PS_PRECISION_F32, &plain, v, v + nx, NULL, y0, saved, ws);
  g_assert_cmpmem(y, nx * 4, y0, nx * 4);
  g_rand_free(r);
}

/* ---- cost and memory --------------------------------------------------- */

/* dense (S, D) -> (S, F) then dropout, alone: with fusion "none" the
 * dropout's own kernels move 2 e eb + e bytes each way over e = B S F
 * elements (x and y, dy and dx at eb bytes, the one-byte mask); with
 * "xla" it rides in the dense kernels, which move exactly e more bytes
 * forward (the mask written) and e more in each of the two gradient
 * kernels (the mask read), and do 4 e more VPU FLOPs forward, 2 e each
 * backward kernel.  It keeps e mask bytes for backward. */
static void test_cost_bytes(void)
{
  const int64_t S = 16, D = 64, F = 256, B = 8, e = B * S * F, eb = 2;
  g_autofree char *with = g_strdup_printf(
      "{'input': {'shape': [%d, %d], 'classes': %d}, 'layers': [{'type': 'dense', "
      "'units': %d}, {'type': 'dropout', 'rate': 0.1}, {'type': 'softmax_xent'}]}",
      (int)S, (int)D, (int)F, (int)F);
  g_autofree char *without = g_strdup_printf(
      "{'input': {'shape': [%d, %d], 'classes': %d}, 'layers': [{'type': 'dense', "
      "'units': %d}, {'type': 'softmax_xent'}]}",
      (int)S, (int)D, (int)F, (int)F);
  PsModel *m = model_ok(with), *m0 = model_ok(without);
  PsTopology *t = topology_load("tpu-v4-8", NULL);
  PsCostOptions none = {.passes = 1, .act_bytes = (int)eb, .fusion = PS_FUSION_NONE};
  PsCostOptions xla = {.passes = 1, .act_bytes = (int)eb, .fusion = PS_FUSION_XLA};
  for (int bwd = 0; bwd < 2; bwd++) {
    PsOpCost c;
    ps_cost_op(t, m, 1, 1, B, &none, bwd, NULL, &c);
    g_assert_cmpfloat(c.bytes, ==, (double)(2 * e * eb + e));
    g_assert_cmpint(c.kernels, ==, 1);
    GArray *k1 = g_array_new(FALSE, FALSE, sizeof(PsKernel));
    GArray *k0 = g_array_new(FALSE, FALSE, sizeof(PsKernel));
    ps_cost_op(t, m, 0, 1, B, &xla, bwd, k1, &c);
    ps_cost_op(t, m0, 0, 0, B, &xla, bwd, k0, &c);
    g_assert_cmpuint(k1->len, ==, bwd ? 2 : 1);
    g_assert_cmpuint(k0->len, ==, k1->len);
    for (guint k = 0; k < k1->len; k++) {
      const PsKernel *a = &g_array_index(k1, PsKernel, k), *z = &g_array_index(k0, PsKernel, k);
      g_assert_cmpfloat(a->bytes - z->bytes, ==, (double)e);
      g_assert_cmpfloat(a->vpu_flops - z->vpu_flops, ==, (bwd ? 2.0 : 4.0) * (double)e);
    }
    g_array_free(k1, TRUE);
    g_array_free(k0, TRUE);
    /* masks recomputed: no mask byte in any kernel, and each gradient
     * kernel draws the mask again (2 e more VPU FLOPs: draw, compare) */
    PsCostOptions re = xla;
    re.masks_recomputed = TRUE;
    k1 = g_array_new(FALSE, FALSE, sizeof(PsKernel));
    k0 = g_array_new(FALSE, FALSE, sizeof(PsKernel));
    ps_cost_op(t, m, 0, 1, B, &re, bwd, k1, &c);
    ps_cost_op(t, m0, 0, 0, B, &xla, bwd, k0, &c);
    for (guint k = 0; k < k1->len; k++) {
      const PsKernel *a = &g_array_index(k1, PsKernel, k), *z = &g_array_index(k0, PsKernel, k);
      g_assert_cmpfloat(a->bytes, ==, z->bytes);
      g_assert_cmpfloat(a->vpu_flops - z->vpu_flops, ==, 4.0 * (double)e);
    }
    g_array_free(k1, TRUE);
    g_array_free(k0, TRUE);
  }
  g_assert_cmpint(m->layers[1].mask_elems, ==, S * F);
  g_assert_cmpint(ps_layer_mask_bytes(&m->layers[1], B), ==, e);
  g_assert_cmpint(ps_model_mask_bytes(m, 0, m->n_layers), ==, S * F);
  g_assert_cmpint(ps_model_mask_bytes(m0, 0, m0->n_layers), ==, 0);
  g_assert_cmpint(ps_layer_kept_bytes(&m->layers[1], B, (int)eb), ==, e);
  g_assert_cmpint(ps_model_memory_bytes(m, 0, -1, B, 2, (int)eb) -
                      ps_model_memory_bytes(m0, 0, -1, B, 2, (int)eb),
                  ==, e);

  /* attention's dropout: h S^2 B mask bytes written forward, read by the
   * gradient kernel, kept; 4 and 2 FLOPs per score */
  const int64_t h = 4;
  g_autofree char *at = g_strdup_printf(
      "{'input': {'shape': [%d, %d], 'classes': %d}, 'layers': [{'type': 'attention', "
      "'heads': %d, 'dropout': %s}, {'type': 'softmax_xent'}]}",
      (int)S, (int)D, (int)D, (int)h, "%s");
  g_autofree char *a1 = g_strdup_printf(at, "0.1"), *a0 = g_strdup_printf(at, "0");
  PsModel *ma = model_ok(a1), *mz = model_ok(a0);
  const double sc = (double)(h * S * S);
  g_assert_cmpfloat(ma->layers[0].fwd_flops - mz->layers[0].fwd_flops, ==, 4 * sc);
  g_assert_cmpfloat(ma->layers[0].bwd_flops - mz->layers[0].bwd_flops, ==, 2 * sc);
  for (int bwd = 0; bwd < 2; bwd++) {
    PsOpCost ca, cz;
    ps_cost_op(t, ma, 0, 0, B, &xla, bwd, NULL, &ca);
    ps_cost_op(t, mz, 0, 0, B, &xla, bwd, NULL, &cz);
    g_assert_cmpfloat(ca.bytes - cz.bytes, ==, sc * (double)B);
  }
  g_assert_cmpint(ps_layer_kept_bytes(&ma->layers[0], B, 2) -
                      ps_layer_kept_bytes(&mz->layers[0], B, 2),
                  ==, h * S * S * B);
  ps_topology_free(t);
  ps_model_free(m);
  ps_model_free(m0);
  ps_model_free(ma);
  ps_model_free(mz);
}

/* XLA's rematerialization to fit (run/experiment.c): BERT-large, dropout
 * 0.1, data-parallel on tpu-v4-128 (32 GiB per chip).  At 32 sequences a
 * chip the masks fit and are kept; at 48 (the MLPerf v0.7 run's) they
 * would not, so they are recomputed: the step's HBM peak is then exactly
 * the one with masks kept less their bytes, and the backward kernels read
 * no mask.  At 128 nothing fits, and the error says what it counted. */
static void test_masks_recomputed_to_fit(void)
{
  const char *exp = "experiments/scaling-bert-large.json";
  const char *b32[] = {"topology=tpu-v4-128", "strategy.replicas=64", "global_batch=2048",
                       "steps=2", NULL};
  const char *b48[] = {"topology=tpu-v4-128", "strategy.replicas=64", "global_batch=3072",
                       "steps=2", NULL};
  PsExperiment *e32 = experiment_load(exp, b32), *e48 = experiment_load(exp, b48);
  g_assert_false(e32->masks_recomputed);
  g_assert_true(e48->masks_recomputed);
  const PsModel *m = e48->model;
  int64_t masks = ps_model_mask_bytes(m, 0, m->n_layers);
  g_assert_cmpint(masks, >, 0);
  PsSummary s32 = experiment_run(e32), s48 = experiment_run(e48);
  /* per example the peak moves by the kept activations: 48 / 32 of the
   * 32-sequence activations, less 48 examples' masks */
  int64_t fixed = s32.hbm_peak_bytes - 32 * (ps_model_memory_bytes(m, 0, -1, 1, 0, 2) -
                                               ps_model_memory_bytes(m, 0, -1, 0, 0, 2));
  int64_t want = fixed + 48 * (ps_model_memory_bytes(m, 0, -1, 1, 0, 2) -
                               ps_model_memory_bytes(m, 0, -1, 0, 0, 2) - masks);
  g_test_message("HBM peak: 32 sequences %.2f GiB (masks kept), 48 %.2f GiB (recomputed; "
                 "%.2f GiB of masks not kept)", s32.hbm_peak_bytes / 1073741824.0,
                 s48.hbm_peak_bytes / 1073741824.0, 48.0 * masks / 1073741824.0);
  g_assert_cmpint(s48.hbm_peak_bytes, ==, want);
  g_assert_cmpint(s48.hbm_peak_bytes, <=, ps_topology_device_hbm_bytes(e48->topology));
  ps_summary_clear(&s32);
  ps_summary_clear(&s48);
  ps_experiment_free(e32);
  ps_experiment_free(e48);
  const char *b128[] = {"topology=tpu-v4-128", "strategy.replicas=64", "global_batch=8192",
                        NULL};
  GError *error = NULL;
  g_assert_null(ps_experiment_load(exp, b128, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT);
  g_assert_nonnull(strstr(error->message, "dropout masks as recomputed"));
  g_error_free(error);
}

/* ---- bad input --------------------------------------------------------- */

/* A rate outside [0, 1), or not a number, is refused naming the file, the
 * key's path and the range; at the CLI, exit status 2. */
static void test_bad_rate(void)
{
  const struct {
    const char *layer, *path;
  } cases[] = {
      {"{'type': 'dropout', 'rate': 1}", "layers[1].rate"},
      {"{'type': 'dropout', 'rate': -0.1}", "layers[1].rate"},
      {"{'type': 'dropout', 'rate': 'half'}", "layers[1].rate"},
      {"{'type': 'dropout'}", "layers[1]"},
      {"{'type': 'attention', 'heads': 2, 'dropout': 1.5}", "layers[1].dropout"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *text = g_strdup_printf(
        "{'input': {'shape': [4, 8], 'classes': 8}, 'layers': [{'type': 'dense', 'units': 8},"
        " %s, {'type': 'softmax_xent'}]}",
        cases[i].layer);
    GError *err = NULL;
    PsModel *m = model_text(text, &err);
    g_assert_null(m);
    g_assert_nonnull(err);
    g_test_message("%s: %s", cases[i].layer, err->message);
    g_assert_nonnull(strstr(err->message, "test.json"));
    g_assert_nonnull(strstr(err->message, cases[i].path));
    if (strstr(cases[i].layer, "1") && !strstr(cases[i].layer, "half"))
      g_assert_nonnull(strstr(err->message, "[0, 1)"));
    g_error_free(err);
  }
  g_autofree char *dir = g_dir_make_tmp("podsim-dropout-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "bad.json", NULL);
  g_assert_true(g_file_set_contents(
      path,
      "{\"input\": {\"shape\": [4, 8], \"classes\": 8}, \"layers\": [{\"type\": \"dropout\","
      " \"rate\": 1.0}, {\"type\": \"softmax_xent\"}]}",
      -1, NULL));
  g_autofree char *out = NULL, *err = NULL;
  int st = podsim_run(&out, &err, "describe", "model", path, NULL);
  g_test_message("podsim describe model: %d: %s", st, err);
  g_assert_cmpint(st, ==, 2);
  g_assert_nonnull(strstr(err, "bad.json"));
  g_assert_nonnull(strstr(err, "layers[0].rate"));
  g_assert_nonnull(strstr(err, "[0, 1)"));
  g_unlink(path);
  g_rmdir(dir);
}

/* ---- a replicated run -------------------------------------------------- */

static const char *const run_json =
    "{\"name\": \"dropout\", \"topology\": \"tpu-v3-8\", \"global_batch\": 32, \"steps\": 3,"
    " \"steps_per_run\": 3, \"strategy\": {\"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 256,"
    "             \"host_cost_per_example_s\": 0},"
    " \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.1, \"momentum\": 0},"
    " \"numerics\": {\"enabled\": true, \"precision\": \"f32\", \"seed\": 5},"
    " \"model\": {\"input\": {\"shape\": [8, 16], \"classes\": 4}, \"layers\": ["
    "   {\"type\": \"attention\", \"heads\": 2, \"dropout\": %s},"
    "   {\"type\": \"dropout\", \"rate\": %s},"
    "   {\"type\": \"dense\", \"units\": 32}, {\"type\": \"relu\"},"
    "   {\"type\": \"dropout\", \"rate\": %s}, {\"type\": \"dense\", \"units\": 16},"
    "   {\"type\": \"dropout\", \"rate\": %s},"
    "   {\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": 4},"
    "   {\"type\": \"softmax_xent\"}]}}";

static PsSummary run_with(const char *dir, const char *rate, const char *const *ov)
{
  g_autofree char *path = g_build_filename(dir, "dropout.json", NULL);
  g_autofree char *text = g_strdup_printf(run_json, rate, rate, rate, rate);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  PsExperiment *e = experiment_load(path, ov);
  PsSummary s = experiment_run(e);
  ps_experiment_free(e);
  g_unlink(path);
  return s;
}

static double max_diff(const PsSummary *a, const PsSummary *b)
{
  g_assert_cmpuint(a->n_params, ==, b->n_params);
  double d = 0;
  for (size_t i = 0; i < a->n_params; i++)
    d = MAX(d, fabs((double)a->params[i] - (double)b->params[i]));
  return d;
}

/* Each example's masks depend on its place in the global batch, not on
 * the device or the slot: 4 replicas of 8, a 2-stage pipeline of 4
 * micro-batches of 8 (its recomputation included) and 4 replicas of a
 * 2-way tensor split (Megatron's layout: heads, then a column- and a
 * row-parallel dense, each dropout on a whole or a split activation) end
 * where one device of 32 does, to the rounding that splitting a batch
 * costs (far inside what dropout itself moves the weights by, which the
 * run without it measures). */
static void test_replicas_match_one(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-dropout-XXXXXX", NULL);
  const char *one_ov[] = {"strategy.replicas=1", NULL};
  const char *const cases[][5] = {
      {"strategy.replicas=4", NULL},
      {"strategy.replicas=1", "strategy.kind=\"pipeline\"", "strategy.stages=2",
       "strategy.micro_batches=4", NULL},
      {"strategy.replicas=1", "strategy.kind=\"pipeline\"", "strategy.stages=2",
       "strategy.micro_batches=4", "strategy.rematerialize=true"},
      {"strategy={\"kind\": \"shard\", \"mesh\": {\"data\": 4, \"tensor\": 2}}", NULL},
  };
  PsSummary one = run_with(dir, "0.3", one_ov), none = run_with(dir, "0", one_ov);
  double moved = max_diff(&one, &none);
  g_assert_cmpfloat(moved, >, 1e-3);
  for (guint k = 0; k < G_N_ELEMENTS(cases); k++) {
    PsSummary other = run_with(dir, "0.3", cases[k]);
    double d = max_diff(&one, &other);
    g_test_message("%d replicas x %d stages of %d micro-batches: max |dw| against one "
                   "device %.3g; with vs without dropout %.3g",
                   other.replicas, other.stages, other.micro_batches, d, moved);
    g_assert_cmpint(other.replicas * other.stages, >, 1);
    g_assert_cmpfloat(other.replica_divergence, ==, 0.0);
    g_assert_cmpfloat(d, <=, 1e-3 * moved);
    g_assert_cmpfloat(fabs(one.loss_first - other.loss_first), <=, 1e-5 * one.loss_first);
    ps_summary_clear(&other);
  }
  ps_summary_clear(&one);
  ps_summary_clear(&none);
  g_rmdir(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim_init();
  g_test_add_func("/dropout/mask/kept-fraction", test_kept_fraction);
  g_test_add_func("/dropout/mask/deterministic", test_deterministic);
  g_test_add_func("/dropout/layer/gradient", test_gradient);
  g_test_add_func("/dropout/layer/rate-zero-is-no-layer", test_rate_zero);
  g_test_add_func("/dropout/layer/training-only", test_training_only);
  g_test_add_func("/dropout/attention/against-loops", test_attention);
  g_test_add_func("/dropout/cost/bytes", test_cost_bytes);
  g_test_add_func("/dropout/bad-rate", test_bad_rate);
  g_test_add_func("/dropout/memory/recomputed-to-fit", test_masks_recomputed_to_fit);
  g_test_add_func("/dropout/run/replicas-match-one", test_replicas_match_one);
  return g_test_run();
}

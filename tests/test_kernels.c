/* test_kernels.c: the numeric kernels against independent references.
 *
 * Every backward kernel is checked against central finite differences of a
 * plain-loop double-precision forward written here (objective: the sum of
 * the outputs times fixed random weights, which are also the dy fed to the
 * float kernel).  Forward kernels are checked against the same double loops,
 * bfloat16 rounding against known bit patterns and an arithmetic reference,
 * and the optimizers against hand-written update loops.
 *
 * Tolerances: the double differences (h = 1e-6) are accurate to about 1e-9
 * relative, so the error budget belongs to the float kernel, whose sums of
 * at most a few hundred terms carry a relative error around n * 2^-24 in the
 * worst case (about 1e-5) and far less in practice.  We accept
 * |got - want| <= 1e-4 |want| + 1e-5 max|want|, loose enough for float
 * accumulation in any order, tight enough that a wrong index, a missing
 * term or a wrong factor (errors of the size of a gradient entry) fails. */
#include "model/kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "support/numeric.h"

/* ---- bfloat16 ---------------------------------------------------------- */

static float from_bits(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t to_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void test_bf16_known(void)
{
  /* Hand-worked cases: bfloat16 keeps the top 16 bits of a float (8
   * significand bits), so between 1 and 2 its spacing is 2^-7. */
  struct { uint32_t in, out; } cases[] = {
    {0x3f800000u, 0x3f800000u}, /* 1 */
    {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: tie, to even (1) */
    {0x3f818000u, 0x3f820000u}, /* 1 + 3*2^-8: tie, to even (1 + 2^-6) */
    {0x3f808001u, 0x3f810000u}, /* just above the tie rounds up */
    {0x3f807fffu, 0x3f800000u}, /* just below the tie rounds down */
    {0xbf818000u, 0xbf820000u}, /* -(1 + 3*2^-8): ties to even, sign kept */
    {0xbf808000u, 0xbf800000u}, /* -(1 + 2^-8) */
    {0x3dcccccdu, 0x3dcd0000u}, /* 0.1f rounds up to 0.10009765625 */
    {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX is past the largest bf16: inf */
    {0x7f7f0000u, 0x7f7f0000u}, /* the largest bf16 is exact */
    {0x7f800000u, 0x7f800000u}, /* +inf */
    {0xff800000u, 0xff800000u}, /* -inf */
    {0x00000000u, 0x00000000u}, /* +0 */
    {0x80000000u, 0x80000000u}, /* -0 */
    {0x00008000u, 0x00000000u}, /* subnormal tie to even (0) */
    {0x00018000u, 0x00020000u}, /* subnormal tie to even (2 units) */
    {0x0000ffffu, 0x00010000u}, /* subnormal above the tie */
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    uint32_t got = to_bits(ps_bf16_round(from_bits(cases[i].in)));
    if (got != cases[i].out)
      g_test_message("bf16(0x%08x) = 0x%08x, want 0x%08x", cases[i].in, got, cases[i].out);
    g_assert_cmphex(got, ==, cases[i].out);
  }
  g_assert_cmpfloat(ps_bf16_round(1.0f + 0x1p-8f), ==, 1.0f);
  g_assert_cmpfloat(ps_bf16_round(1.0f + 3 * 0x1p-8f), ==, 1.0f + 0x1p-6f);

  /* NaNs stay NaN, including a signalling NaN whose payload lies only in
   * the low half (plain truncation would turn it into infinity). */
  uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff80ffffu, 0x7fbfffffu};
  for (size_t i = 0; i < G_N_ELEMENTS(nans); i++) {
    float r = ps_bf16_round(from_bits(nans[i]));
    g_assert_true(isnan(r));
    g_assert_cmphex(to_bits(r) & 0xffffu, ==, 0);
    g_assert_cmphex(to_bits(r) >> 31, ==, nans[i] >> 31);
  }
}

static void test_bf16_random(void)
{
  GRand *r = g_rand_new_with_seed(7);
  for (int i = 0; i < 200000; i++) {
    /* Random sign and significand, exponents well inside the normal range;
     * every fifth value is forced onto a tie. */
    uint32_t u = g_rand_int(r);
    uint32_t exp = (uint32_t)g_rand_int_range(r, 1, 254) << 23;
    u = (u & 0x807fffffu) | exp;
    if (i % 5 == 0)
      u = (u & 0xffff0000u) | 0x8000u;
    float x = from_bits(u);
    float want = bf16_reference(x);
    float got = ps_bf16_round(x);
    if (to_bits(got) != to_bits(want))
      g_test_message("bf16(0x%08x) = 0x%08x, want 0x%08x", u, to_bits(got), to_bits(want));
    g_assert_cmphex(to_bits(got), ==, to_bits(want));
  }
  float in[5] = {1.0f + 0x1p-8f, -3.5f, 0.1f, INFINITY, 1e-3f}, out[5];
  ps_bf16_round_array(in, out, 5);
  for (int i = 0; i < 5; i++)
    g_assert_cmphex(to_bits(out[i]), ==, to_bits(ps_bf16_round(in[i])));
  g_rand_free(r);
}

/* ---- GEMM -------------------------------------------------------------- */

/* C (m x n) = op(A) op(B) in double, with op(A) element (i, p) read from
 * A's row-major storage as flagged; `abs_sum` gets sum |a||b| per entry. */
static void ref_gemm(gboolean ta, gboolean tb, int m, int n, int k, const float *a,
                     const float *b, const float *c0, double *c, double *abs_sum)
{
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double s = c0 ? c0[(size_t)i * n + j] : 0.0, sa = 0.0;
      for (int p = 0; p < k; p++) {
        double av = ta ? a[(size_t)p * m + i] : a[(size_t)i * k + p];
        double bv = tb ? b[(size_t)j * k + p] : b[(size_t)p * n + j];
        s += av * bv;
        sa += fabs(av * bv);
      }
      c[(size_t)i * n + j] = s;
      if (abs_sum)
        abs_sum[(size_t)i * n + j] = sa;
    }
  }
}

static void test_gemm_transposes(void)
{
  GRand *r = g_rand_new_with_seed(11);
  const int m = 7, n = 5, k = 9;
  float a[63], b[45], c0[35], c[35];
  double want[35];
  fill_uniform(r, a, 63, -1, 1);
  fill_uniform(r, b, 45, -1, 1);
  fill_uniform(r, c0, 35, -1, 1);
  for (int ta = 0; ta < 2; ta++) {
    for (int tb = 0; tb < 2; tb++) {
      for (int acc = 0; acc < 2; acc++) {
        memcpy(c, c0, sizeof c);
        ps_gemm(PS_PRECISION_F32, ta, tb, m, n, k, a, b, acc, c);
        ref_gemm(ta, tb, m, n, k, a, b, acc ? c0 : NULL, want, NULL);
        for (int i = 0; i < m * n; i++)
          g_assert_cmpfloat(fabs(c[i] - want[i]), <=, 1e-5);
      }
    }
  }
  /* k = 0: the product is empty, so C is zero (or unchanged). */
  memcpy(c, c0, sizeof c);
  ps_gemm(PS_PRECISION_F32, FALSE, FALSE, m, n, 0, a, b, TRUE, c);
  g_assert_cmpmem(c, sizeof c, c0, sizeof c0);
  ps_gemm(PS_PRECISION_F32, FALSE, FALSE, m, n, 0, a, b, FALSE, c);
  for (int i = 0; i < m * n; i++)
    g_assert_cmpfloat(c[i], ==, 0.0f);
  g_rand_free(r);
}

static void test_gemm_bf16(void)
{
  GRand *r = g_rand_new_with_seed(13);
  const int m = 33, n = 17, k = 65;
  float *a = g_new(float, m * k), *b = g_new(float, k * n);
  float *ar = g_new(float, m * k), *br = g_new(float, k * n);
  float *c16 = g_new(float, m * n), *c32 = g_new(float, m * n), *cpre = g_new(float, m * n);
  double *want16 = g_new(double, m * n), *want32 = g_new(double, m * n);
  double *abs16 = g_new(double, m * n);
  fill_uniform(r, a, (size_t)m * k, -1, 1);
  fill_uniform(r, b, (size_t)k * n, -1, 1);
  float a0 = a[0];

  ps_gemm(PS_PRECISION_BF16, FALSE, TRUE, m, n, k, a, b, FALSE, c16);
  ps_gemm(PS_PRECISION_F32, FALSE, TRUE, m, n, k, a, b, FALSE, c32);
  g_assert_cmpfloat(a[0], ==, a0); /* inputs are not rounded in place */

  for (int i = 0; i < m * k; i++)
    ar[i] = bf16_reference(a[i]);
  for (int i = 0; i < k * n; i++)
    br[i] = bf16_reference(b[i]);
  /* Same sgemm on inputs rounded beforehand: bit-identical. */
  ps_gemm(PS_PRECISION_F32, FALSE, TRUE, m, n, k, ar, br, FALSE, cpre);
  g_assert_cmpmem(c16, sizeof(float) * m * n, cpre, sizeof(float) * m * n);

  /* Products of two bf16 values are exact in float, so the only error left
   * is float accumulation: within 1e-5 of sum |a||b| (k = 65 terms). */
  ref_gemm(FALSE, TRUE, m, n, k, ar, br, NULL, want16, abs16);
  ref_gemm(FALSE, TRUE, m, n, k, a, b, NULL, want32, NULL);
  double err16 = 0.0, diff32 = 0.0;
  for (int i = 0; i < m * n; i++) {
    g_assert_cmpfloat(fabs(c16[i] - want16[i]), <=, 1e-5 * abs16[i]);
    err16 = MAX(err16, fabs(c16[i] - want16[i]));
    diff32 = MAX(diff32, fabs(c16[i] - want32[i]));
  }
  /* ... and it is visibly not the float32 product. */
  g_test_message("bf16 gemm: max error vs bf16 reference %.3g, vs f32 product %.3g", err16,
                 diff32);
  g_assert_cmpfloat(diff32, >, 20.0 * err16);
  g_assert_cmpfloat(diff32, >, 1e-4);

  g_free(a); g_free(b); g_free(ar); g_free(br);
  g_free(c16); g_free(c32); g_free(cpre);
  g_free(want16); g_free(want32); g_free(abs16);
  g_rand_free(r);
}

/* ---- dense ------------------------------------------------------------- */

typedef struct {
  int rows, in, out;
  const double *r; /* objective weights over y */
} DenseCtx;

/* v = [x (rows x in), w (in x out), b (out)] */
static void ref_dense(const DenseCtx *c, const double *v, double *y)
{
  const double *x = v, *w = v + c->rows * c->in, *b = w + c->in * c->out;
  for (int i = 0; i < c->rows; i++)
    for (int o = 0; o < c->out; o++) {
      double s = b[o];
      for (int p = 0; p < c->in; p++)
        s += x[i * c->in + p] * w[p * c->out + o];
      y[i * c->out + o] = s;
    }
}

static double dense_objective(const double *v, const void *ctx)
{
  const DenseCtx *c = ctx;
  double y[64];
  ref_dense(c, v, y);
  return weighted_sum(c->r, y, (size_t)c->rows * c->out);
}

static void test_dense(void)
{
  GRand *r = g_rand_new_with_seed(17);
  enum { ROWS = 3, IN = 5, OUT = 4, NX = ROWS * IN, NW = IN * OUT, NV = NX + NW + OUT };
  float v[NV], dy[ROWS * OUT], y[ROWS * OUT];
  fill_uniform(r, v, NV, -1, 1);
  fill_uniform(r, dy, ROWS * OUT, -1, 1);
  const float *x = v, *w = v + NX, *b = v + NX + NW;

  g_autofree double *rd = to_double(dy, ROWS * OUT);
  g_autofree double *vd = to_double(v, NV);
  DenseCtx ctx = {ROWS, IN, OUT, rd};

  /* forward */
  double yref[ROWS * OUT];
  ref_dense(&ctx, vd, yref);
  ps_dense_forward(PS_PRECISION_F32, x, w, b, y, ROWS, IN, OUT);
  assert_close("dense y", y, yref, ROWS * OUT, 1.0);

  /* backward: dx overwritten (starts as garbage), dw and db accumulate
   * onto what is there. */
  double g[NV];
  fd_gradient(dense_objective, &ctx, vd, NV, g);
  float dx[NX], dw[NW], db[OUT], dw0[NW], db0[OUT];
  for (int i = 0; i < NX; i++)
    dx[i] = 1e30f;
  fill_uniform(r, dw0, NW, -1, 1);
  fill_uniform(r, db0, OUT, -1, 1);
  memcpy(dw, dw0, sizeof dw);
  memcpy(db, db0, sizeof db);
  ps_dense_backward(PS_PRECISION_F32, x, w, dy, dx, dw, db, ROWS, IN, OUT);
  for (int i = 0; i < NW; i++)
    dw[i] -= dw0[i];
  for (int i = 0; i < OUT; i++)
    db[i] -= db0[i];
  assert_close("dense dx", dx, g, NX, 1.0);
  assert_close("dense dw", dw, g + NX, NW, 1.0);
  assert_close("dense db", db, g + NX + NW, OUT, 1.0);

  /* No dx (first layer), no bias: dw alone, same values. */
  float dw2[NW] = {0};
  ps_dense_backward(PS_PRECISION_F32, x, w, dy, NULL, dw2, NULL, ROWS, IN, OUT);
  assert_close("dense dw (no dx)", dw2, g + NX, NW, 1.0);
  g_rand_free(r);
}

static void test_dense_bf16(void)
{
  GRand *r = g_rand_new_with_seed(19);
  enum { ROWS = 6, IN = 40, OUT = 9 };
  float x[ROWS * IN], w[IN * OUT], b[OUT], y[ROWS * OUT];
  fill_uniform(r, x, ROWS * IN, -1, 1);
  fill_uniform(r, w, IN * OUT, -1, 1);
  fill_uniform(r, b, OUT, -1, 1);
  ps_dense_forward(PS_PRECISION_BF16, x, w, b, y, ROWS, IN, OUT);
  for (int i = 0; i < ROWS; i++)
    for (int o = 0; o < OUT; o++) {
      double s = b[o], sa = fabs(b[o]);
      for (int p = 0; p < IN; p++) {
        double t = (double)bf16_reference(x[i * IN + p]) * bf16_reference(w[p * OUT + o]);
        s += t;
        sa += fabs(t);
      }
      g_assert_cmpfloat(fabs(y[i * OUT + o] - s), <=, 1e-5 * sa);
    }
  g_rand_free(r);
}

/* ---- element-wise activations ------------------------------------------ */

typedef enum { ACT_RELU, ACT_GELU, ACT_TANH } ActKind;

static double ref_act(ActKind kind, double x)
{
  switch (kind) {
  case ACT_RELU:
    return x > 0 ? x : 0;
  case ACT_GELU: /* tanh form, Hendrycks and Gimpel 2016 */
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / G_PI) * (x + 0.044715 * x * x * x)));
  case ACT_TANH:
    return tanh(x);
  }
  return 0;
}

typedef struct {
  ActKind kind;
  size_t n;
  const double *r;
} ActCtx;

static double act_objective(const double *v, const void *ctx)
{
  const ActCtx *c = ctx;
  double s = 0.0;
  for (size_t i = 0; i < c->n; i++)
    s += c->r[i] * ref_act(c->kind, v[i]);
  return s;
}

static void test_activation(gconstpointer data)
{
  ActKind kind = GPOINTER_TO_INT(data);
  GRand *r = g_rand_new_with_seed(23 + kind);
  enum { N = 200 };
  float x[N], y[N], dy[N], dx[N];
  /* Spread over [-4, 4], kept 0.05 away from ReLU's kink. */
  for (int i = 0; i < N; i++) {
    double v;
    do
      v = g_rand_double_range(r, -4, 4);
    while (fabs(v) < 0.05);
    x[i] = (float)v;
  }
  fill_uniform(r, dy, N, -1, 1);
  g_autofree double *xd = to_double(x, N);
  g_autofree double *rd = to_double(dy, N);

  double yref[N];
  for (int i = 0; i < N; i++)
    yref[i] = ref_act(kind, xd[i]);
  switch (kind) {
  case ACT_RELU: ps_relu_forward(x, y, N); break;
  case ACT_GELU: ps_gelu_forward(x, y, N); break;
  case ACT_TANH: ps_tanh_forward(x, y, N); break;
  }
  assert_close("activation y", y, yref, N, 1.0);

  ActCtx ctx = {kind, N, rd};
  double g[N];
  fd_gradient(act_objective, &ctx, xd, N, g);
  for (int i = 0; i < N; i++)
    dx[i] = NAN;
  switch (kind) {
  case ACT_RELU: ps_relu_backward(x, dy, dx, N); break;
  case ACT_GELU: ps_gelu_backward(x, dy, dx, N); break;
  case ACT_TANH: ps_tanh_backward(y, dy, dx, N); break;
  }
  assert_close("activation dx", dx, g, N, 1.0);
  g_rand_free(r);
}

/* The tanh form stays within 1e-3 of the exact GELU x Phi(x) (its error
 * peaks near |x| = 2 at a few 1e-4), which pins the two constants. */
static void test_gelu_exact(void)
{
  double worst = 0.0;
  for (int i = -600; i <= 600; i++) {
    float x = (float)(i / 100.0), y;
    ps_gelu_forward(&x, &y, 1);
    double exact = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    worst = MAX(worst, fabs(y - exact));
  }
  g_test_message("gelu: max |tanh form - exact| = %.3g", worst);
  g_assert_cmpfloat(worst, <, 1e-3);
  g_assert_cmpfloat(worst, >, 1e-5); /* it is the approximation, not erf */
}

/* ---- softmax cross-entropy --------------------------------------------- */

typedef struct {
  int batch, classes;
  const int32_t *labels;
} XentCtx;

static double ref_xent_row(const double *z, int classes, int label, double *probs)
{
  double m = z[0];
  for (int j = 1; j < classes; j++)
    m = MAX(m, z[j]);
  double s = 0.0;
  for (int j = 0; j < classes; j++)
    s += exp(z[j] - m);
  if (probs)
    for (int j = 0; j < classes; j++)
      probs[j] = exp(z[j] - m) / s;
  return m + log(s) - z[label];
}

static double xent_objective(const double *v, const void *ctx)
{
  const XentCtx *c = ctx;
  double s = 0.0;
  for (int i = 0; i < c->batch; i++)
    s += ref_xent_row(v + i * c->classes, c->classes, c->labels[i], NULL);
  return s;
}

static void test_softmax_xent(void)
{
  GRand *r = g_rand_new_with_seed(29);
  enum { B = 6, C = 5 };
  float z[B * C], probs[B * C], dz[B * C];
  int32_t labels[B];
  fill_uniform(r, z, B * C, -3, 3);
  for (int i = 0; i < B; i++)
    labels[i] = g_rand_int_range(r, 0, C);
  labels[0] = 0;
  z[0] = 5.0f; /* example 0 is surely right */
  g_autofree double *zd = to_double(z, B * C);

  double pref[B * C], sum = 0.0;
  int right = 0;
  for (int i = 0; i < B; i++) {
    sum += ref_xent_row(zd + i * C, C, labels[i], pref + i * C);
    int best = 0;
    for (int j = 1; j < C; j++)
      if (zd[i * C + j] > zd[i * C + best])
        best = j;
    right += best == labels[i];
  }
  int correct = -1;
  double got = ps_softmax_xent_forward(z, labels, probs, B, C, &correct);
  g_assert_cmpfloat(fabs(got - sum), <=, 1e-6 * sum);
  g_assert_cmpint(correct, ==, right);
  g_assert_cmpint(correct, >=, 1);
  assert_close("probs", probs, pref, B * C, 1.0);

  XentCtx ctx = {B, C, labels};
  double g[B * C];
  fd_gradient(xent_objective, &ctx, zd, B * C, g);
  ps_softmax_xent_backward(probs, labels, dz, B, C, 1.0f);
  assert_close("dlogits (sum)", dz, g, B * C, 1.0);
  ps_softmax_xent_backward(probs, labels, dz, B, C, 1.0f / B);
  assert_close("dlogits (mean)", dz, g, B * C, 1.0 / B);
  g_rand_free(r);
}

static void test_softmax_xent_stable(void)
{
  /* Logits far beyond exp's range: the loss is the closed form
   * max - z_label + log(sum exp(z - max)). */
  float z[6] = {1000.0f, 0.0f, -1000.0f, 1e4f, 1e4f, -1e4f};
  int32_t labels[2] = {1, 0};
  float probs[6];
  int correct;
  double loss = ps_softmax_xent_forward(z, labels, probs, 2, 3, &correct);
  g_assert_true(isfinite(loss));
  g_assert_cmpfloat(fabs(loss - (1000.0 + log(2.0))), <=, 1e-9);
  g_assert_cmpfloat(probs[0], ==, 1.0f);
  g_assert_cmpfloat(probs[1], ==, 0.0f);
  g_assert_cmpfloat(fabs(probs[3] - 0.5f), <=, 1e-7);
  g_assert_cmpint(correct, ==, 1); /* ties go to the first class: row 2 right */
}

/* ---- conv2d ------------------------------------------------------------ */

typedef struct {
  const char *name;
  int batch, h, w, cin, k, stride, same, cout;
} ConvCase;

static const ConvCase conv_cases[] = {
  {"same-k3-s1", 2, 5, 5, 3, 3, 1, 1, 4},
  {"valid-k3-s1", 2, 6, 5, 2, 3, 1, 0, 3},
  {"same-k3-s2-even", 2, 6, 6, 2, 3, 2, 1, 3},
  {"same-k3-s2-odd", 1, 7, 5, 2, 3, 2, 1, 2},
  {"valid-k3-s2", 1, 7, 6, 2, 3, 2, 0, 2},
  {"same-k4-s1", 1, 5, 5, 2, 4, 1, 1, 2},
  {"pointwise-k1", 2, 4, 3, 3, 1, 1, 0, 2},
  /* 3 x 12 channels: window rows long enough for the memcpy path */
  {"same-k3-s2-wide", 1, 5, 6, 12, 3, 2, 1, 2},
  {"valid-k3-s1-wide", 1, 5, 5, 11, 3, 1, 0, 2},
  /* 17 filters: a full block of 16 and a tail in the bias loops */
  {"same-k3-s1-cout17", 1, 4, 4, 2, 3, 1, 1, 17},
};

/* Output size and top/left padding, in TensorFlow's words: "SAME" gives
 * ceil(in / stride) outputs and pads max((out-1)*stride + k - in, 0) in
 * total, the smaller half before; "VALID" gives ceil((in - k + 1) / stride). */
static void ref_conv_geometry(int in, int k, int stride, int same, int *out, int *pad)
{
  if (same) {
    *out = (int)ceil((double)in / stride);
    *pad = MAX((*out - 1) * stride + k - in, 0) / 2;
  } else {
    *out = (int)ceil((double)(in - k + 1) / stride);
    *pad = 0;
  }
}

typedef struct {
  const ConvCase *c;
  int oh, ow, pt, pl;
  const double *r;
} ConvCtx;

static void conv_ctx_init(ConvCtx *ctx, const ConvCase *c, const double *r)
{
  ctx->c = c;
  ctx->r = r;
  ref_conv_geometry(c->h, c->k, c->stride, c->same, &ctx->oh, &ctx->pt);
  ref_conv_geometry(c->w, c->k, c->stride, c->same, &ctx->ow, &ctx->pl);
}

/* The library's shape of case c, ps_conv2d_shape applied. */
static PsConvShape conv_shape(const ConvCase *c)
{
  PsConvShape s = {.batch = c->batch, .h = c->h, .w = c->w, .cin = c->cin, .kernel = c->k,
                   .stride = c->stride, .same_padding = c->same, .cout = c->cout};
  ps_conv2d_shape(&s);
  return s;
}

static size_t conv_nx(const ConvCase *c) { return (size_t)c->batch * c->h * c->w * c->cin; }
static size_t conv_nw(const ConvCase *c) { return (size_t)c->k * c->k * c->cin * c->cout; }

/* v = [x (NHWC), w (k, k, cin, cout), b (cout)]; direct loops. */
static void ref_conv(const ConvCtx *ctx, const double *v, double *y)
{
  const ConvCase *c = ctx->c;
  const double *x = v, *w = v + conv_nx(c), *b = w + conv_nw(c);
  for (int n = 0; n < c->batch; n++)
    for (int oy = 0; oy < ctx->oh; oy++)
      for (int ox = 0; ox < ctx->ow; ox++)
        for (int co = 0; co < c->cout; co++) {
          double s = b[co];
          for (int ky = 0; ky < c->k; ky++)
            for (int kx = 0; kx < c->k; kx++) {
              int iy = oy * c->stride - ctx->pt + ky, ix = ox * c->stride - ctx->pl + kx;
              if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                continue;
              for (int ci = 0; ci < c->cin; ci++)
                s += x[((n * c->h + iy) * c->w + ix) * c->cin + ci] *
                     w[((ky * c->k + kx) * c->cin + ci) * c->cout + co];
            }
          y[((n * ctx->oh + oy) * ctx->ow + ox) * c->cout + co] = s;
        }
}

static double conv_objective(const double *v, const void *vctx)
{
  const ConvCtx *ctx = vctx;
  const ConvCase *c = ctx->c;
  size_t ny = (size_t)c->batch * ctx->oh * ctx->ow * c->cout;
  double *y = g_new(double, ny);
  ref_conv(ctx, v, y);
  double s = weighted_sum(ctx->r, y, ny);
  g_free(y);
  return s;
}

static void test_conv_shape_known(void)
{
  /* Worked by hand from TensorFlow's padding rules. */
  struct { int in, k, s, same, out, pad; } cases[] = {
    {5, 3, 2, 1, 3, 1}, /* total pad 2: one each side */
    {4, 3, 2, 1, 2, 0}, /* total pad 1: all of it after */
    {6, 5, 1, 1, 6, 2}, /* total pad 4 */
    {5, 4, 1, 1, 5, 1}, /* total pad 3: 1 before, 2 after */
    {28, 3, 1, 1, 28, 1},
    {7, 3, 2, 0, 3, 0},
    {6, 3, 2, 0, 2, 0},
    {224, 7, 2, 1, 112, 2}, /* ResNet stem: total pad 5 */
    {3, 3, 1, 0, 1, 0},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsConvShape s = {.batch = 1, .h = cases[i].in, .w = cases[i].in, .cin = 1,
                     .kernel = cases[i].k, .stride = cases[i].s,
                     .same_padding = cases[i].same, .cout = 1};
    ps_conv2d_shape(&s);
    g_assert_cmpint(s.out_h, ==, cases[i].out);
    g_assert_cmpint(s.out_w, ==, cases[i].out);
    g_assert_cmpint(s.pad_top, ==, cases[i].pad);
    g_assert_cmpint(s.pad_left, ==, cases[i].pad);
  }
}

static void test_conv(gconstpointer data)
{
  const ConvCase *c = data;
  GRand *r = g_rand_new_with_seed(31);
  ConvCtx ctx;
  conv_ctx_init(&ctx, c, NULL);
  PsConvShape s = conv_shape(c);
  g_assert_cmpint(s.out_h, ==, ctx.oh);
  g_assert_cmpint(s.out_w, ==, ctx.ow);
  g_assert_cmpint(s.pad_top, ==, ctx.pt);
  g_assert_cmpint(s.pad_left, ==, ctx.pl);

  size_t nx = conv_nx(c), nw = conv_nw(c), nv = nx + nw + c->cout;
  size_t ny = (size_t)c->batch * ctx.oh * ctx.ow * c->cout;
  float *v = g_new(float, nv), *y = g_new(float, ny), *dy = g_new(float, ny);
  float *dx = g_new(float, nx), *dw = g_new(float, nw), *db = g_new(float, c->cout);
  float *ws = g_new(float, ps_conv2d_workspace(&s) + 1);
  fill_uniform(r, v, nv, -1, 1);
  fill_uniform(r, dy, ny, -1, 1);
  double *vd = to_double(v, nv), *rd = to_double(dy, ny);
  double *yref = g_new(double, ny), *g = g_new(double, nv);
  ctx.r = rd;

  ref_conv(&ctx, vd, yref);
  ps_conv2d_forward(PS_PRECISION_F32, &s, v, v + nx, v + nx + nw, y, ws);
  assert_close("conv y", y, yref, ny, 1.0);

  fd_gradient(conv_objective, &ctx, vd, nv, g);
  for (size_t i = 0; i < nx; i++)
    dx[i] = 1e30f;
  memset(dw, 0, nw * sizeof *dw);
  memset(db, 0, c->cout * sizeof *db);
  ps_conv2d_backward(PS_PRECISION_F32, &s, v, v + nx, dy, dx, dw, db, ws);
  assert_close("conv dx", dx, g, nx, 1.0);
  assert_close("conv dw", dw, g + nx, nw, 1.0);
  assert_close("conv db", db, g + nx + nw, c->cout, 1.0);

  /* A second backward accumulates: dw and db double, dx stays. */
  float *dx2 = g_new(float, nx);
  ps_conv2d_backward(PS_PRECISION_F32, &s, v, v + nx, dy, dx2, dw, db, ws);
  g_assert_cmpmem(dx, nx * sizeof *dx, dx2, nx * sizeof *dx2);
  assert_close("conv dw twice", dw, g + nx, nw, 2.0);
  assert_close("conv db twice", db, g + nx + nw, c->cout, 2.0);

  g_free(v); g_free(y); g_free(dy); g_free(dx); g_free(dx2); g_free(dw); g_free(db);
  g_free(ws); g_free(vd); g_free(rd); g_free(yref); g_free(g);
  g_rand_free(r);
}

/* A layer large enough that the kernels split the batch into chunks: check
 * forward and backward against plain double loops (the adjoint formulas,
 * written directly rather than by differences, to keep it fast). */
static const ConvCase chunked_cases[] = {
  {"wide", 3, 40, 40, 96, 3, 1, 1, 3},   /* window rows copied with memcpy */
  {"narrow", 3, 172, 172, 8, 3, 1, 1, 2}, /* gathered through the table */
};

static void test_conv_chunked(gconstpointer data)
{
  const ConvCase c = *(const ConvCase *)data;
  GRand *r = g_rand_new_with_seed(37);
  ConvCtx ctx;
  conv_ctx_init(&ctx, &c, NULL);
  PsConvShape s = conv_shape(&c);
  size_t per_example = (size_t)s.out_h * s.out_w * c.k * c.k * c.cin;
  size_t wsn = ps_conv2d_workspace(&s);
  g_test_message("workspace %zu floats for %zu per example", wsn, per_example);
  /* one example per chunk (plus, for few channels, a one-example table) */
  g_assert_cmpuint(wsn, >=, per_example);
  g_assert_cmpuint(wsn, <=, 2 * per_example);
  g_assert_cmpuint(wsn, <, per_example * c.batch);

  size_t nx = conv_nx(&c), nw = conv_nw(&c), nv = nx + nw + c.cout;
  size_t ny = (size_t)c.batch * ctx.oh * ctx.ow * c.cout;
  float *v = g_new(float, nv), *y = g_new(float, ny), *dy = g_new(float, ny);
  float *dx = g_new(float, nx), *dw = g_new0(float, nw), *db = g_new0(float, c.cout);
  float *ws = g_new(float, wsn);
  fill_uniform(r, v, nv, -1, 1);
  fill_uniform(r, dy, ny, -1, 1);
  double *vd = to_double(v, nv), *yref = g_new(double, ny);
  double *dxref = g_new0(double, nx), *dwref = g_new0(double, nw);
  double *dbref = g_new0(double, c.cout);

  ref_conv(&ctx, vd, yref);
  ps_conv2d_forward(PS_PRECISION_F32, &s, v, v + nx, v + nx + nw, y, ws);
  assert_close("chunked conv y", y, yref, ny, 1.0);

  const double *x = vd, *w = vd + nx;
  for (int n = 0; n < c.batch; n++)
    for (int oy = 0; oy < ctx.oh; oy++)
      for (int ox = 0; ox < ctx.ow; ox++)
        for (int co = 0; co < c.cout; co++) {
          double g = dy[((n * ctx.oh + oy) * ctx.ow + ox) * c.cout + co];
          dbref[co] += g;
          for (int ky = 0; ky < c.k; ky++)
            for (int kx = 0; kx < c.k; kx++) {
              int iy = oy - ctx.pt + ky, ix = ox - ctx.pl + kx;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w)
                continue;
              size_t xi = (((size_t)n * c.h + iy) * c.w + ix) * c.cin;
              size_t wi = ((size_t)ky * c.k + kx) * c.cin * c.cout + co;
              for (int ci = 0; ci < c.cin; ci++) {
                dxref[xi + ci] += g * w[wi + (size_t)ci * c.cout];
                dwref[wi + (size_t)ci * c.cout] += g * x[xi + ci];
              }
            }
        }
  ps_conv2d_backward(PS_PRECISION_F32, &s, v, v + nx, dy, dx, dw, db, ws);
  assert_close("chunked conv dx", dx, dxref, nx, 1.0);
  assert_close("chunked conv dw", dw, dwref, nw, 1.0);
  assert_close("chunked conv db", db, dbref, c.cout, 1.0);

  /* Determinism: the same call gives the same bits. */
  float *dw2 = g_new0(float, nw), *dx2 = g_new(float, nx), *db2 = g_new0(float, c.cout);
  memset(dw, 0, nw * sizeof *dw);
  memset(db, 0, c.cout * sizeof *db);
  ps_conv2d_backward(PS_PRECISION_F32, &s, v, v + nx, dy, dx, dw, db, ws);
  ps_conv2d_backward(PS_PRECISION_F32, &s, v, v + nx, dy, dx2, dw2, db2, ws);
  g_assert_cmpmem(dw, nw * sizeof *dw, dw2, nw * sizeof *dw2);
  g_assert_cmpmem(dx, nx * sizeof *dx, dx2, nx * sizeof *dx2);

  g_free(v); g_free(y); g_free(dy); g_free(dx); g_free(dw); g_free(db); g_free(ws);
  g_free(dw2); g_free(dx2); g_free(db2);
  g_free(vd); g_free(yref); g_free(dxref); g_free(dwref); g_free(dbref);
  g_rand_free(r);
}

static void test_conv_bf16(void)
{
  const ConvCase c = {"bf16", 2, 6, 6, 4, 3, 1, 1, 5};
  GRand *r = g_rand_new_with_seed(41);
  ConvCtx ctx;
  conv_ctx_init(&ctx, &c, NULL);
  PsConvShape s = conv_shape(&c);
  size_t nx = conv_nx(&c), nw = conv_nw(&c), nv = nx + nw + c.cout;
  size_t ny = (size_t)c.batch * ctx.oh * ctx.ow * c.cout;
  float *v = g_new(float, nv), *y = g_new(float, ny), *ws = g_new(float, ps_conv2d_workspace(&s));
  double *vd = g_new(double, nv), *yref = g_new(double, ny), *y32 = g_new(double, ny);
  fill_uniform(r, v, nv, -1, 1);
  for (size_t i = 0; i < nv; i++)  /* inputs rounded, bias kept in float */
    vd[i] = i < nx + nw ? bf16_reference(v[i]) : v[i];
  ref_conv(&ctx, vd, yref);
  for (size_t i = 0; i < nv; i++)
    vd[i] = v[i];
  ref_conv(&ctx, vd, y32);
  ps_conv2d_forward(PS_PRECISION_BF16, &s, v, v + nx, v + nx + nw, y, ws);
  assert_close("bf16 conv y", y, yref, ny, 1.0);
  double diff = 0.0;
  for (size_t i = 0; i < ny; i++)
    diff = MAX(diff, fabs(y[i] - y32[i]));
  g_assert_cmpfloat(diff, >, 1e-4);
  g_free(v); g_free(y); g_free(ws); g_free(vd); g_free(yref); g_free(y32);
  g_rand_free(r);
}

/* ---- pooling ----------------------------------------------------------- */

typedef struct {
  const char *name;
  int batch, h, w, c, size, stride;
} PoolCase;

static const PoolCase pool_cases[] = {
  {"2x2-s2", 2, 4, 4, 3, 2, 2},
  {"3x3-s2-overlap", 1, 5, 5, 2, 3, 2},
  {"2x2-s1-overlap", 2, 5, 4, 2, 2, 1},
  {"2x2-s2-ragged", 1, 5, 7, 1, 2, 2},
  {"2x2-s2-c18", 1, 4, 4, 18, 2, 2}, /* a block of 16 channels and a tail */
};

typedef struct {
  const PoolCase *p;
  int max;
  int oh, ow;
  const double *r;
} PoolCtx;

/* Valid windows, TensorFlow's ceil((in - size + 1) / stride) outputs. */
static int ref_pool_out(int in, int size, int stride)
{
  return (int)ceil((double)(in - size + 1) / stride);
}

static void ref_pool(const PoolCtx *ctx, const double *x, double *y)
{
  const PoolCase *p = ctx->p;
  for (int n = 0; n < p->batch; n++)
    for (int oy = 0; oy < ctx->oh; oy++)
      for (int ox = 0; ox < ctx->ow; ox++)
        for (int ch = 0; ch < p->c; ch++) {
          double acc = ctx->max ? -INFINITY : 0.0;
          for (int ky = 0; ky < p->size; ky++)
            for (int kx = 0; kx < p->size; kx++) {
              double v = x[((n * p->h + oy * p->stride + ky) * p->w + ox * p->stride + kx) *
                           p->c + ch];
              acc = ctx->max ? MAX(acc, v) : acc + v;
            }
          y[((n * ctx->oh + oy) * ctx->ow + ox) * p->c + ch] =
              ctx->max ? acc : acc / (p->size * p->size);
        }
}

static double pool_objective(const double *v, const void *vctx)
{
  const PoolCtx *ctx = vctx;
  size_t ny = (size_t)ctx->p->batch * ctx->oh * ctx->ow * ctx->p->c;
  double *y = g_new(double, ny);
  ref_pool(ctx, v, y);
  double s = weighted_sum(ctx->r, y, ny);
  g_free(y);
  return s;
}

static void run_pool(const PoolCase *p, int max)
{
  GRand *r = g_rand_new_with_seed(43);
  PsPoolShape s = {.batch = p->batch, .h = p->h, .w = p->w, .c = p->c, .size = p->size,
                   .stride = p->stride};
  ps_pool_shape(&s);
  PoolCtx ctx = {p, max, ref_pool_out(p->h, p->size, p->stride),
                 ref_pool_out(p->w, p->size, p->stride), NULL};
  g_assert_cmpint(s.out_h, ==, ctx.oh);
  g_assert_cmpint(s.out_w, ==, ctx.ow);

  size_t nx = (size_t)p->batch * p->h * p->w * p->c;
  size_t ny = (size_t)p->batch * ctx.oh * ctx.ow * p->c;
  float *x = g_new(float, nx), *y = g_new(float, ny), *dy = g_new(float, ny);
  float *dx = g_new(float, nx);
  int32_t *arg = g_new(int32_t, ny);
  /* Distinct values at least 0.05 apart (a shuffled ladder), so no window
   * has a near-tie that a difference of 1e-6 could cross. */
  for (size_t i = 0; i < nx; i++)
    x[i] = (float)(0.05 * i - 0.025 * nx);
  for (size_t i = nx; i > 1; i--) {
    size_t j = (size_t)g_rand_int_range(r, 0, (gint32)i);
    float t = x[i - 1];
    x[i - 1] = x[j];
    x[j] = t;
  }
  fill_uniform(r, dy, ny, -1, 1);
  double *xd = to_double(x, nx), *rd = to_double(dy, ny);
  double *yref = g_new(double, ny), *g = g_new(double, nx);
  ctx.r = rd;

  ref_pool(&ctx, xd, yref);
  if (max)
    ps_maxpool_forward(&s, x, y, arg);
  else
    ps_avgpool_forward(&s, x, y);
  assert_close("pool y", y, yref, ny, 1.0);

  fd_gradient(pool_objective, &ctx, xd, nx, g);
  for (size_t i = 0; i < nx; i++)
    dx[i] = 1e30f;
  if (max)
    ps_maxpool_backward(&s, arg, dy, dx);
  else
    ps_avgpool_backward(&s, dy, dx);
  /* Rows and columns past the last window get exactly zero. */
  assert_close("pool dx", dx, g, nx, 1.0);
  if (max) {
    float y2[1024];
    g_assert_cmpuint(ny, <=, 1024);
    ps_maxpool_forward(&s, x, y2, NULL); /* argmax is optional */
    g_assert_cmpmem(y, ny * sizeof *y, y2, ny * sizeof *y2);
  }
  g_free(x); g_free(y); g_free(dy); g_free(dx); g_free(arg);
  g_free(xd); g_free(rd); g_free(yref); g_free(g);
  g_rand_free(r);
}

static void test_maxpool(gconstpointer data) { run_pool(data, 1); }
static void test_avgpool(gconstpointer data) { run_pool(data, 0); }

/* Far from zero GELU is x or 0 (its sigmoid saturates without overflow),
 * at zero exactly 0 with slope 1/2. */
static void test_gelu_tails(void)
{
  float x[] = {-1e4f, -200.0f, -30.0f, 0.0f, 30.0f, 200.0f, 1e4f};
  float y[G_N_ELEMENTS(x)], dx[G_N_ELEMENTS(x)], ones[G_N_ELEMENTS(x)];
  const size_t n = G_N_ELEMENTS(x);
  for (size_t i = 0; i < n; i++)
    ones[i] = 1.0f;
  ps_gelu_forward(x, y, n);
  ps_gelu_backward(x, ones, dx, n);
  for (size_t i = 0; i < n; i++) {
    g_assert_true(isfinite(y[i]) && isfinite(dx[i]));
    g_assert_cmpfloat(y[i], ==, x[i] > 0 ? x[i] : 0.0f * x[i]);
    g_assert_cmpfloat(dx[i], ==, x[i] > 0 ? 1.0f : (x[i] < 0 ? 0.0f : 0.5f));
  }
}

/* ---- optimizers -------------------------------------------------------- */

static void test_sgd_momentum(void)
{
  GRand *r = g_rand_new_with_seed(47);
  enum { N = 10, STEPS = 4 };
  const float lr = 0.05f, mom = 0.9f;
  float w[N], vel[N] = {0}, g[STEPS][N];
  double wd[N], vd[N] = {0};
  fill_uniform(r, w, N, -1, 1);
  fill_uniform(r, &g[0][0], N * STEPS, -1, 1);
  for (int i = 0; i < N; i++)
    wd[i] = w[i];
  for (int t = 0; t < STEPS; t++) {
    ps_sgd_momentum_update(w, g[t], vel, N, lr, mom);
    for (int i = 0; i < N; i++) {
      vd[i] = (double)mom * vd[i] + g[t][i];
      wd[i] -= (double)lr * vd[i];
    }
    for (int i = 0; i < N; i++) {
      g_assert_cmpfloat(fabs(w[i] - wd[i]), <=, 1e-6);
      g_assert_cmpfloat(fabs(vel[i] - vd[i]), <=, 1e-6);
    }
  }
  /* Without momentum it is plain gradient descent: w - lr g. */
  float w1 = 1.0f, v1 = 0.0f, g1 = 0.5f;
  ps_sgd_momentum_update(&w1, &g1, &v1, 1, 0.1f, 0.0f);
  g_assert_cmpfloat(fabs(w1 - 0.95f), <=, 1e-7);
  g_rand_free(r);
}

static void test_adam(void)
{
  GRand *r = g_rand_new_with_seed(53);
  enum { N = 10, STEPS = 5 };
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  float w[N], m[N] = {0}, v[N] = {0}, g[STEPS][N];
  double wd[N], md[N] = {0}, vd[N] = {0};
  fill_uniform(r, w, N, -1, 1);
  fill_uniform(r, &g[0][0], N * STEPS, -1, 1);
  for (int i = 0; i < N; i++)
    wd[i] = w[i];
  for (int t = 1; t <= STEPS; t++) {
    float w_before[N];
    memcpy(w_before, w, sizeof w);
    ps_adam_update(w, g[t - 1], m, v, N, lr, b1, b2, eps, t);
    for (int i = 0; i < N; i++) {
      double gi = g[t - 1][i];
      md[i] = b1 * md[i] + (1.0 - b1) * gi;
      vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
      double mh = md[i] / (1.0 - pow(b1, t)), vh = vd[i] / (1.0 - pow(b2, t));
      wd[i] -= lr * mh / (sqrt(vh) + eps);
    }
    for (int i = 0; i < N; i++)
      g_assert_cmpfloat(fabs(w[i] - wd[i]), <=, 1e-6);
    /* Closed form of the first step: bias correction makes m^ = g and
     * v^ = g^2, so each weight moves by lr g / (|g| + eps) ~ lr sign(g). */
    if (t == 1)
      for (int i = 0; i < N; i++) {
        double gi = g[0][i];
        g_assert_cmpfloat(fabs((w_before[i] - w[i]) - lr * gi / (fabs(gi) + eps)), <=, 1e-7);
      }
  }
  g_rand_free(r);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ps_kernels_init();

  g_test_add_func("/kernels/bf16/known", test_bf16_known);
  g_test_add_func("/kernels/bf16/random-seed7", test_bf16_random);
  g_test_add_func("/kernels/gemm/transposes", test_gemm_transposes);
  g_test_add_func("/kernels/gemm/bf16", test_gemm_bf16);
  g_test_add_func("/kernels/dense/backward", test_dense);
  g_test_add_func("/kernels/dense/bf16", test_dense_bf16);
  g_test_add_data_func("/kernels/relu/backward", GINT_TO_POINTER(ACT_RELU), test_activation);
  g_test_add_data_func("/kernels/gelu/backward", GINT_TO_POINTER(ACT_GELU), test_activation);
  g_test_add_data_func("/kernels/tanh/backward", GINT_TO_POINTER(ACT_TANH), test_activation);
  g_test_add_func("/kernels/gelu/exact", test_gelu_exact);
  g_test_add_func("/kernels/softmax-xent/backward", test_softmax_xent);
  g_test_add_func("/kernels/softmax-xent/stable", test_softmax_xent_stable);
  g_test_add_func("/kernels/conv2d/shape", test_conv_shape_known);
  for (size_t i = 0; i < G_N_ELEMENTS(conv_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/conv2d/backward/%s", conv_cases[i].name);
    g_test_add_data_func(path, &conv_cases[i], test_conv);
  }
  for (size_t i = 0; i < G_N_ELEMENTS(chunked_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/conv2d/chunked/%s", chunked_cases[i].name);
    g_test_add_data_func(path, &chunked_cases[i], test_conv_chunked);
  }
  g_test_add_func("/kernels/conv2d/bf16", test_conv_bf16);
  for (size_t i = 0; i < G_N_ELEMENTS(pool_cases); i++) {
    g_autofree char *mp = g_strdup_printf("/kernels/maxpool/backward/%s", pool_cases[i].name);
    g_autofree char *ap = g_strdup_printf("/kernels/avgpool/backward/%s", pool_cases[i].name);
    g_test_add_data_func(mp, &pool_cases[i], test_maxpool);
    g_test_add_data_func(ap, &pool_cases[i], test_avgpool);
  }
  g_test_add_func("/kernels/gelu/tails", test_gelu_tails);
  g_test_add_func("/kernels/optimizer/sgd-momentum", test_sgd_momentum);
  g_test_add_func("/kernels/optimizer/adam", test_adam);
  return g_test_run();
}

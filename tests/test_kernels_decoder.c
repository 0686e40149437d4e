/* test_kernels_decoder.c: the kernels of decoder-only language models
 * (RMS normalization, SwiGLU, grouped-query attention with an inner width
 * and rotary positions, the token embedding) against plain-loop
 * double-precision forwards written here and their central finite
 * differences.
 *
 * Tolerance (support/numeric.h, derived in test_kernels.c): |got - want|
 * <= 1e-4 |want| + 1e-5 max|want|.  The finite differences of a double
 * objective with h = 1e-6 carry a truncation error of order h^2 f''' and
 * a rounding error of order 1e-16 / h, both near 1e-10 relative here,
 * so the budget is the float kernel's: sums of at most a few hundred
 * products, each rounding by 2^-24 relative, stay below 1e-5 relative of
 * the largest entry, and no entry lies more than 1e-4 from its own value
 * unless it is a cancellation that the absolute term covers. */
#include "model/kernels.h"

#include <math.h>
#include <string.h>

#include "support/numeric.h"

/* ---- RMS normalization -------------------------------------------------- */

typedef struct {
  int rows, dim;
  const double *r;
} RowsCtx;

/* v = [x (rows x dim), gain (dim)]; Zhang and Sennrich 2019, eq. 4 with
 * eps inside the root. */
static void ref_rmsnorm(const RowsCtx *c, const double *v, double *y)
{
  const double *gain = v + (size_t)c->rows * c->dim;
  for (int i = 0; i < c->rows; i++) {
    const double *xr = v + (size_t)i * c->dim;
    double ms = 0.0;
    for (int j = 0; j < c->dim; j++)
      ms += xr[j] * xr[j] / c->dim;
    for (int j = 0; j < c->dim; j++)
      y[(size_t)i * c->dim + j] = gain[j] * xr[j] / sqrt(ms + 1e-5);
  }
}

static double rmsnorm_objective(const double *v, const void *ctx)
{
  const RowsCtx *c = ctx;
  size_t n = (size_t)c->rows * c->dim;
  g_autofree double *y = g_new(double, n);
  ref_rmsnorm(c, v, y);
  return weighted_sum(c->r, y, n);
}

/* y, dx and dgain (added onto what dgain held) against the references;
 * the saved statistic is 1/rms. */
static void test_rmsnorm(void)
{
  GRand *r = g_rand_new_with_seed(71);
  const int rows = 5, dim = 24;
  const size_t nx = (size_t)rows * dim, nv = nx + dim;
  g_autofree float *v = g_new(float, nv), *y = g_new(float, nx), *dy = g_new(float, nx);
  g_autofree float *dx = g_new(float, nx), *stats = g_new(float, rows);
  g_autofree float *dg = g_new(float, dim), *dg0 = g_new(float, dim);
  fill_uniform(r, v, nx, -1, 3);
  fill_uniform(r, v + nx, dim, 0.5, 1.5);
  fill_uniform(r, dy, nx, -1, 1);
  fill_uniform(r, dg0, dim, -1, 1);
  g_autofree double *vd = to_double(v, nv), *rd = to_double(dy, nx);
  g_autofree double *yref = g_new(double, nx), *g = g_new(double, nv);
  RowsCtx ctx = {rows, dim, rd};

  ref_rmsnorm(&ctx, vd, yref);
  ps_rmsnorm_forward(v, v + nx, y, stats, rows, dim);
  assert_close("rmsnorm y", y, yref, nx, 1.0);
  for (int i = 0; i < rows; i++) {
    double ms = 0.0;
    for (int j = 0; j < dim; j++)
      ms += vd[i * dim + j] * vd[i * dim + j] / dim;
    g_assert_cmpfloat(fabs(stats[i] * sqrt(ms + 1e-5) - 1), <=, 1e-6);
  }

  fd_gradient(rmsnorm_objective, &ctx, vd, nv, g);
  memcpy(dg, dg0, (size_t)dim * sizeof *dg);
  ps_rmsnorm_backward(v, v + nx, stats, dy, dx, dg, rows, dim);
  for (int j = 0; j < dim; j++)
    dg[j] -= dg0[j];
  assert_close("rmsnorm dx", dx, g, nx, 1.0);
  assert_close("rmsnorm dgain", dg, g + nx, (size_t)dim, 1.0);
  memset(dg, 0, (size_t)dim * sizeof *dg);
  ps_rmsnorm_backward(v, v + nx, stats, dy, NULL, dg, rows, dim);
  assert_close("rmsnorm dgain (no dx)", dg, g + nx, (size_t)dim, 1.0);
  g_rand_free(r);
}

/* ---- SwiGLU ------------------------------------------------------------- */

typedef struct {
  int rows, in, units;
  gboolean bias, gelu;
  const double *r;
} GluCtx;

/* The gate's activation in double: silu a sigmoid(a), or gelu's tanh
 * form 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))) (Hendrycks and
 * Gimpel 2016, eq. 2's approximation). */
static double ref_gate(double a, gboolean gelu)
{
  if (gelu)
    return 0.5 * a * (1.0 + tanh(sqrt(2.0 / G_PI) * (a + 0.044715 * a * a * a)));
  return a / (1.0 + exp(-a));
}

static size_t glu_nv(const GluCtx *c)
{
  return (size_t)c->rows * c->in + 2 * (size_t)c->in * c->units +
         (c->bias ? 2 * (size_t)c->units : 0);
}

/* v = [x (rows x in), W_g, W_u (in x units each), b_g, b_u]; Shazeer
 * 2020, eqs. 5 and 6: act(x W_g + b_g) * (x W_u + b_u). */
static void ref_swiglu(const GluCtx *c, const double *v, double *y)
{
  const size_t wn = (size_t)c->in * c->units;
  const double *x = v, *wg = v + (size_t)c->rows * c->in, *wu = wg + wn;
  const double *bg = c->bias ? wu + wn : NULL, *bu = c->bias ? bg + c->units : NULL;
  for (int i = 0; i < c->rows; i++)
    for (int o = 0; o < c->units; o++) {
      double a = bg ? bg[o] : 0.0, u = bu ? bu[o] : 0.0;
      for (int k = 0; k < c->in; k++) {
        a += x[(size_t)i * c->in + k] * wg[(size_t)k * c->units + o];
        u += x[(size_t)i * c->in + k] * wu[(size_t)k * c->units + o];
      }
      y[(size_t)i * c->units + o] = ref_gate(a, c->gelu) * u;
    }
}

static double swiglu_objective(const double *v, const void *ctx)
{
  const GluCtx *c = ctx;
  size_t n = (size_t)c->rows * c->units;
  g_autofree double *y = g_new(double, n);
  ref_swiglu(c, v, y);
  return weighted_sum(c->r, y, n);
}

/* y, dx, both weight gradients and (with biases) both bias gradients;
 * data: bit 0 biases, bit 1 a gelu gate (GeGLU). */
static void test_swiglu(gconstpointer data)
{
  const gboolean bias = GPOINTER_TO_INT(data) & 1, gelu = (GPOINTER_TO_INT(data) >> 1) & 1;
  const PsGluGate act = gelu ? PS_GLU_GELU : PS_GLU_SILU;
  GRand *r = g_rand_new_with_seed(73);
  GluCtx c = {6, 10, 7, bias, gelu, NULL};
  const size_t nx = (size_t)c.rows * c.in, ny = (size_t)c.rows * c.units, nv = glu_nv(&c);
  const size_t nw = 2 * (size_t)c.in * c.units;
  g_autofree float *v = g_new(float, nv), *y = g_new(float, ny), *dy = g_new(float, ny);
  g_autofree float *saved = g_new(float, 2 * ny), *dv = g_new0(float, nv);
  g_autofree float *ws = g_new(float, ps_swiglu_workspace(c.rows, c.in, c.units));
  fill_uniform(r, v, nx, -1, 1);
  fill_uniform(r, v + nx, nv - nx, -0.8, 0.8);
  fill_uniform(r, dy, ny, -1, 1);
  g_autofree double *vd = to_double(v, nv), *rd = to_double(dy, ny);
  g_autofree double *yref = g_new(double, ny), *g = g_new(double, nv);
  c.r = rd;

  ref_swiglu(&c, vd, yref);
  const float *b = bias ? v + nx + nw : NULL;
  ps_swiglu_forward(PS_PRECISION_F32, act, v, v + nx, b, y, saved, c.rows, c.in, c.units);
  assert_close("swiglu y", y, yref, ny, 1.0);

  fd_gradient(swiglu_objective, &c, vd, nv, g);
  for (size_t i = 0; i < nx; i++)
    dv[i] = 1e30f;
  ps_swiglu_backward(PS_PRECISION_F32, act, v, v + nx, saved, dy, dv, dv + nx,
                     bias ? dv + nx + nw : NULL, ws, c.rows, c.in, c.units);
  assert_close("swiglu dx", dv, g, nx, 1.0);
  assert_close("swiglu dW_g", dv + nx, g + nx, nw / 2, 1.0);
  assert_close("swiglu dW_u", dv + nx + nw / 2, g + nx + nw / 2, nw / 2, 1.0);
  if (bias)
    assert_close("swiglu db", dv + nx + nw, g + nx + nw, 2 * (size_t)c.units, 1.0);
  g_rand_free(r);
}

/* ---- grouped-query attention with rope ---------------------------------- */

typedef struct {
  const char *name;
  int batch, seq, dim, heads, kv_heads, inner;
  gboolean causal, rope, bias;
  int flash_block; /* 0: the plain kernels */
  int window;      /* 0: none; > 0: position i sees the j with |i - j| < window */
} GqaCase;

static const GqaCase gqa_cases[] = {
  {"gqa-4-2-rope-causal", 2, 5, 6, 4, 2, 8, TRUE, TRUE, FALSE, 0, 0},
  {"mqa-3-1-bias", 1, 4, 5, 3, 1, 6, FALSE, FALSE, TRUE, 0, 0},
  {"mha-rope", 1, 6, 8, 2, 2, 8, TRUE, TRUE, TRUE, 0, 0},
  /* flash attention: blocks that do not divide the sequence, causal heads
   * that skip blocks, a block as long as the sequence and one longer */
  {"flash-gqa-4-2-rope-causal-b2", 2, 5, 6, 4, 2, 8, TRUE, TRUE, FALSE, 2, 0},
  {"flash-mha-b4", 1, 7, 6, 2, 2, 6, FALSE, FALSE, TRUE, 4, 0},
  {"flash-mqa-3-1-causal-b3", 2, 7, 5, 3, 1, 6, TRUE, FALSE, TRUE, 3, 0},
  {"flash-mha-rope-causal-b1", 1, 4, 8, 2, 2, 8, TRUE, TRUE, FALSE, 1, 0},
  {"flash-causal-whole", 1, 6, 8, 2, 2, 8, TRUE, TRUE, TRUE, 6, 0},
  {"flash-causal-longer", 1, 5, 4, 2, 1, 4, TRUE, FALSE, FALSE, 512, 0},
  /* sliding windows: causal and both ways, plain and flash; flash blocks
   * wholly before the window are skipped, and with window 2 and blocks of
   * 3 rows 4 and 5 see nothing of the first key block their block visits */
  {"window-causal-2", 2, 6, 6, 4, 2, 8, TRUE, TRUE, FALSE, 0, 2},
  {"window-both-3", 1, 7, 5, 3, 1, 6, FALSE, FALSE, TRUE, 0, 3},
  {"flash-window-causal-3-b2", 2, 9, 6, 4, 2, 8, TRUE, TRUE, FALSE, 2, 3},
  {"flash-window-causal-2-b3", 1, 8, 6, 2, 2, 6, TRUE, FALSE, TRUE, 3, 2},
  {"flash-window-both-2-b2", 1, 8, 5, 3, 1, 6, FALSE, TRUE, FALSE, 2, 2},
  {"flash-window-wider", 1, 5, 4, 2, 1, 4, TRUE, FALSE, FALSE, 2, 64},
};

typedef struct {
  const GqaCase *c;
  const double *r;
} GqaCtx;

typedef struct {
  int dh, kvw, proj;
  size_t nx, nw, nb, nv;
} GqaSizes;

static GqaSizes gqa_sizes(const GqaCase *c)
{
  GqaSizes z;
  z.dh = c->inner / c->heads;
  z.kvw = c->kv_heads * z.dh;
  z.proj = c->inner + 2 * z.kvw;
  z.nx = (size_t)c->batch * c->seq * c->dim;
  z.nw = (size_t)c->dim * z.proj + (size_t)c->inner * c->dim;
  z.nb = c->bias ? (size_t)z.proj + c->dim : 0;
  z.nv = z.nx + z.nw + z.nb;
  return z;
}

/* Turns pair p of a head row at position i by i 10000^(-2p/dh) (Su et
 * al. 2021, eq. 34). */
static void ref_rope(double *row, int i, int dh)
{
  for (int p = 0; p < dh / 2; p++) {
    double a = i * pow(10000.0, -2.0 * p / dh), x0 = row[2 * p], x1 = row[2 * p + 1];
    row[2 * p] = x0 * cos(a) - x1 * sin(a);
    row[2 * p + 1] = x0 * sin(a) + x1 * cos(a);
  }
}

/* One example: projections, rope on each query and key head, per query
 * head h scores against key/value head h / (heads / kv_heads), softmax,
 * context, output projection. */
static void ref_gqa_example(const GqaCase *c, const GqaSizes *z, const double *x,
                            const double *w, const double *b, double *y)
{
  const int S = c->seq, D = c->dim, P = z->proj, dh = z->dh;
  g_autofree double *qkv = g_new(double, (size_t)S * P);
  g_autofree double *ctx = g_new(double, (size_t)S * c->inner);
  g_autofree double *p = g_new(double, S);
  for (int i = 0; i < S; i++)
    for (int o = 0; o < P; o++) {
      double s = b ? b[o] : 0.0;
      for (int k = 0; k < D; k++)
        s += x[i * D + k] * w[(size_t)k * P + o];
      qkv[(size_t)i * P + o] = s;
    }
  if (c->rope)
    for (int i = 0; i < S; i++)
      for (int hb = 0; hb < c->heads + c->kv_heads; hb++)
        ref_rope(qkv + (size_t)i * P + (size_t)hb * dh, i, dh);
  for (int h = 0; h < c->heads; h++) {
    int g = h / (c->heads / c->kv_heads);
    int qo = h * dh, ko = c->inner + g * dh, vo = c->inner + z->kvw + g * dh;
    for (int i = 0; i < S; i++) {
      int n = c->causal ? i + 1 : S, j0 = 0;
      if (c->window > 0) {
        j0 = MAX(0, i - c->window + 1);
        n = MIN(n, i + c->window);
      }
      double mx = -INFINITY, sum = 0.0;
      for (int j = j0; j < n; j++) {
        double s = 0.0;
        for (int k = 0; k < dh; k++)
          s += qkv[(size_t)i * P + qo + k] * qkv[(size_t)j * P + ko + k];
        p[j] = s / sqrt((double)dh);
        mx = fmax(mx, p[j]);
      }
      for (int j = j0; j < n; j++)
        sum += (p[j] = exp(p[j] - mx));
      for (int k = 0; k < dh; k++) {
        double s = 0.0;
        for (int j = j0; j < n; j++)
          s += p[j] / sum * qkv[(size_t)j * P + vo + k];
        ctx[(size_t)i * c->inner + qo + k] = s;
      }
    }
  }
  const double *wo = w + (size_t)D * P, *bo = b ? b + P : NULL;
  for (int i = 0; i < S; i++)
    for (int o = 0; o < D; o++) {
      double s = bo ? bo[o] : 0.0;
      for (int k = 0; k < c->inner; k++)
        s += ctx[(size_t)i * c->inner + k] * wo[(size_t)k * D + o];
      y[(size_t)i * D + o] = s;
    }
}

static double gqa_objective(const double *v, const void *vctx)
{
  const GqaCtx *ctx = vctx;
  const GqaCase *c = ctx->c;
  GqaSizes z = gqa_sizes(c);
  g_autofree double *y = g_new(double, z.nx);
  const size_t sd = (size_t)c->seq * c->dim;
  for (int e = 0; e < c->batch; e++)
    ref_gqa_example(c, &z, v + e * sd, v + z.nx, c->bias ? v + z.nx + z.nw : NULL, y + e * sd);
  return weighted_sum(ctx->r, y, z.nx);
}

/* The kernel's sizes are the closed form's; y and every gradient (input,
 * the projections, the biases) against the double loops. */
static void test_gqa(gconstpointer data)
{
  const GqaCase *c = data;
  GqaSizes z = gqa_sizes(c);
  PsAttnShape s = {.batch = c->batch, .seq = c->seq, .dim = c->dim, .heads = c->heads,
                   .causal = c->causal, .kv_heads = c->kv_heads, .inner = c->inner,
                   .rope = c->rope, .flash_block = c->flash_block, .window = c->window};
  g_assert_true(ps_attention_valid(&s));
  g_assert_cmpuint(ps_attention_weights(&s), ==, z.nw);
  g_assert_cmpuint(ps_attention_biases(&s), ==, (size_t)z.proj + c->dim);
  /* kept for backward: Q K V and the context, then per head the S x S
   * probabilities, or a flash kernel's S log-sum-exps */
  size_t per_head = c->flash_block > 0 ? (size_t)c->seq : (size_t)c->seq * c->seq;
  g_assert_cmpuint(ps_attention_saved(&s), ==,
                   (size_t)c->batch * ((size_t)c->seq * (z.proj + c->inner) +
                                       (size_t)c->heads * per_head));
  GRand *r = g_rand_new_with_seed(79);
  g_autofree float *v = g_new(float, z.nv), *y = g_new(float, z.nx);
  g_autofree float *dy = g_new(float, z.nx), *dv = g_new0(float, z.nv);
  g_autofree float *saved = g_new(float, ps_attention_saved(&s));
  g_autofree float *ws = g_new(float, ps_attention_workspace(&s));
  fill_uniform(r, v, z.nx, -1, 1);
  fill_uniform(r, v + z.nx, z.nw, -0.9, 0.9);
  fill_uniform(r, v + z.nx + z.nw, z.nb, -0.3, 0.3);
  fill_uniform(r, dy, z.nx, -1, 1);
  g_autofree double *vd = to_double(v, z.nv), *rd = to_double(dy, z.nx);
  g_autofree double *g = g_new(double, z.nv), *yref = g_new(double, z.nx);
  GqaCtx ctx = {c, rd};
  const size_t sd = (size_t)c->seq * c->dim;
  for (int e = 0; e < c->batch; e++)
    ref_gqa_example(c, &z, vd + e * sd, vd + z.nx, c->bias ? vd + z.nx + z.nw : NULL,
                    yref + e * sd);

  const float *w = v + z.nx, *b = c->bias ? v + z.nx + z.nw : NULL;
  ps_attention_forward(PS_PRECISION_F32, &s, v, w, b, y, saved, ws);
  assert_close("gqa y", y, yref, z.nx, 1.0);
  fd_gradient(gqa_objective, &ctx, vd, z.nv, g);
  for (size_t i = 0; i < z.nx; i++)
    dv[i] = 1e30f;
  ps_attention_backward(PS_PRECISION_F32, &s, v, w, saved, dy, dv, dv + z.nx,
                        c->bias ? dv + z.nx + z.nw : NULL, ws);
  const size_t nqkv = (size_t)c->dim * z.proj;
  assert_close("gqa dx", dv, g, z.nx, 1.0);
  assert_close("gqa dW_qkv", dv + z.nx, g + z.nx, nqkv, 1.0);
  assert_close("gqa dW_o", dv + z.nx + nqkv, g + z.nx + nqkv, z.nw - nqkv, 1.0);
  if (c->bias)
    assert_close("gqa db", dv + z.nx + z.nw, g + z.nx + z.nw, z.nb, 1.0);
  g_rand_free(r);
}

/* Rope makes a score depend on the two positions only through their
 * difference (Su et al. 2021, section 3.2): with every token the same, a
 * causal head's scores along each diagonal are equal, so row i's
 * probabilities over j <= i are row i+1's over j+1 <= i+1 once both are
 * renormalized.  Here, more simply: every query and key the same vector,
 * score(i, j) = f(i - j), checked on the kernel's saved probabilities of
 * a non-causal head: P[i][j] / P[i][k] = P[i+1][j+1] / P[i+1][k+1]. */
static void test_rope_relative(void)
{
  const int S = 6, D = 4;
  PsAttnShape s = {.batch = 1, .seq = S, .dim = D, .heads = 1, .rope = TRUE};
  g_autofree float *x = g_new(float, (size_t)S * D), *y = g_new(float, (size_t)S * D);
  g_autofree float *w = g_new(float, ps_attention_weights(&s));
  g_autofree float *saved = g_new(float, ps_attention_saved(&s));
  g_autofree float *ws = g_new(float, ps_attention_workspace(&s));
  GRand *r = g_rand_new_with_seed(83);
  float tok[4];
  fill_uniform(r, tok, D, -1, 1);
  for (int i = 0; i < S; i++)
    memcpy(x + (size_t)i * D, tok, sizeof tok);
  fill_uniform(r, w, ps_attention_weights(&s), -1.5, 1.5);
  ps_attention_forward(PS_PRECISION_F32, &s, x, w, NULL, y, saved, ws);
  const float *p = saved + (size_t)S * (3 * D + D);
  gboolean varies = FALSE;
  for (int i = 0; i + 1 < S; i++)
    for (int j = 0; j + 1 < S; j++) {
      double a = log(p[i * S + j] / p[i * S]);
      double b = log(p[(i + 1) * S + j + 1] / p[(i + 1) * S + 1]);
      g_assert_cmpfloat(fabs(a - b), <=, 1e-4);
      varies |= fabs(a) > 1e-3;
    }
  g_assert_true(varies); /* the rotation did something */
  g_rand_free(r);
}

/* ---- token embedding ---------------------------------------------------- */

/* Rows are the table's (plus positions), the backward a scatter-add that
 * sums the rows of repeated tokens. */
static void test_embedding(void)
{
  const int seq = 3, vocab = 5, dim = 4, rows = 6;
  const float ids[6] = {2, 0, 2, 4, 4, 4};
  float table[20], pos[12], y[24], dy[24], dt[20] = {0}, dp[12] = {0};
  for (int i = 0; i < 20; i++)
    table[i] = (float)(i + 1);
  for (int i = 0; i < 12; i++)
    pos[i] = 0.5f * (float)i;
  for (int i = 0; i < 24; i++)
    dy[i] = (float)(i % 7) - 3.0f;
  ps_embedding_forward(ids, table, pos, y, rows, seq, vocab, dim);
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < dim; j++)
      g_assert_cmpfloat(y[r * dim + j], ==,
                        table[(int)ids[r] * dim + j] + pos[(r % seq) * dim + j]);
  ps_embedding_forward(ids, table, NULL, y, rows, seq, vocab, dim);
  g_assert_cmpfloat(y[dim + 1], ==, table[1]);
  ps_embedding_backward(ids, dy, dt, dp, rows, seq, vocab, dim);
  for (int t = 0; t < vocab; t++)
    for (int j = 0; j < dim; j++) {
      float want = 0.0f;
      for (int r = 0; r < rows; r++)
        if ((int)ids[r] == t)
          want += dy[r * dim + j];
      g_assert_cmpfloat(dt[t * dim + j], ==, want);
    }
  for (int i = 0; i < seq; i++)
    for (int j = 0; j < dim; j++)
      g_assert_cmpfloat(dp[i * dim + j], ==, dy[i * dim + j] + dy[(i + seq) * dim + j]);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ps_kernels_init();
  g_test_add_func("/kernels/rmsnorm", test_rmsnorm);
  g_test_add_data_func("/kernels/swiglu/plain", GINT_TO_POINTER(FALSE), test_swiglu);
  g_test_add_data_func("/kernels/swiglu/bias", GINT_TO_POINTER(1), test_swiglu);
  g_test_add_data_func("/kernels/geglu/plain", GINT_TO_POINTER(2), test_swiglu);
  g_test_add_data_func("/kernels/geglu/bias", GINT_TO_POINTER(3), test_swiglu);
  for (size_t i = 0; i < G_N_ELEMENTS(gqa_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/attention-gqa/%s", gqa_cases[i].name);
    g_test_add_data_func(path, &gqa_cases[i], test_gqa);
  }
  g_test_add_func("/kernels/rope/relative", test_rope_relative);
  g_test_add_func("/kernels/embedding", test_embedding);
  return g_test_run();
}

/* test_kernels_transformer.c: the numeric kernels of transformer layers,
 * layer normalization, multi-head attention and patch embedding, against
 * independent references, as test_kernels.c checks the others.
 *
 * Every backward kernel is checked against central finite differences of a
 * plain-loop double-precision forward written here, with the tolerances of
 * test_kernels.c (support/numeric.h): |got - want| <= 1e-4 |want| + 1e-5
 * max|want|. */
#include "model/kernels.h"

#include <math.h>
#include <string.h>

#include "support/numeric.h"

/* ---- layer normalization ----------------------------------------------- */

typedef struct {
  const char *name;
  int rows, dim;
} NormCase;

static const NormCase norm_cases[] = {
  {"rows4-dim6", 4, 6},
  {"rows3-dim33", 3, 33},
  {"rows2-dim1", 2, 1}, /* one value per row: y = beta, dx = 0 */
};

typedef struct {
  int rows, dim;
  const double *r;
} NormCtx;

/* v = [x (rows x dim), gamma (dim), beta (dim)]; Ba et al. 2016, eqs. 3-4
 * with the biased variance and eps inside the root. */
static void ref_layernorm(const NormCtx *c, const double *v, double *y)
{
  const double *x = v, *gamma = v + c->rows * c->dim, *beta = gamma + c->dim;
  for (int i = 0; i < c->rows; i++) {
    const double *xr = x + i * c->dim;
    double mean = 0.0, var = 0.0;
    for (int j = 0; j < c->dim; j++)
      mean += xr[j] / c->dim;
    for (int j = 0; j < c->dim; j++)
      var += (xr[j] - mean) * (xr[j] - mean) / c->dim;
    for (int j = 0; j < c->dim; j++)
      y[i * c->dim + j] = gamma[j] * (xr[j] - mean) / sqrt(var + 1e-5) + beta[j];
  }
}

static double norm_objective(const double *v, const void *ctx)
{
  const NormCtx *c = ctx;
  size_t n = (size_t)c->rows * c->dim;
  double *y = g_new(double, n);
  ref_layernorm(c, v, y);
  double s = weighted_sum(c->r, y, n);
  g_free(y);
  return s;
}

/* Against the double loops and their central differences, with the same
 * tolerance as every kernel here (file comment).  The inputs sit off zero
 * (uniform in [-1, 3]) so that subtracting the mean matters, and the
 * parameter gradients must land on top of what dgamma and dbeta held. */
static void test_layernorm(gconstpointer data)
{
  const NormCase *nc = data;
  GRand *r = g_rand_new_with_seed(53);
  const int rows = nc->rows, dim = nc->dim;
  const size_t nx = (size_t)rows * dim, nv = nx + 2 * (size_t)dim;
  float *v = g_new(float, nv), *y = g_new(float, nx), *dy = g_new(float, nx);
  float *dx = g_new(float, nx), *stats = g_new(float, 2 * (size_t)rows);
  float *dgb = g_new(float, 2 * (size_t)dim), *dgb0 = g_new(float, 2 * (size_t)dim);
  fill_uniform(r, v, nx, -1, 3);
  fill_uniform(r, v + nx, 2 * (size_t)dim, 0.5, 1.5);
  fill_uniform(r, dy, nx, -1, 1);
  fill_uniform(r, dgb0, 2 * (size_t)dim, -1, 1);
  double *vd = to_double(v, nv), *rd = to_double(dy, nx);
  double *yref = g_new(double, nx), *g = g_new(double, nv);
  NormCtx ctx = {rows, dim, rd};

  ref_layernorm(&ctx, vd, yref);
  ps_layernorm_forward(v, v + nx, v + nx + dim, y, stats, rows, dim);
  assert_close("layernorm y", y, yref, nx, 1.0);
  /* the saved statistics are the row's mean and 1/sqrt(var + eps) */
  for (int i = 0; i < rows; i++) {
    double mean = 0.0, var = 0.0;
    for (int j = 0; j < dim; j++)
      mean += vd[i * dim + j] / dim;
    for (int j = 0; j < dim; j++)
      var += (vd[i * dim + j] - mean) * (vd[i * dim + j] - mean) / dim;
    g_assert_cmpfloat(fabs(stats[2 * i] - mean), <=, 1e-6 * (1 + fabs(mean)));
    g_assert_cmpfloat(fabs(stats[2 * i + 1] * sqrt(var + 1e-5) - 1), <=, 1e-6);
  }

  fd_gradient(norm_objective, &ctx, vd, nv, g);
  for (size_t i = 0; i < nx; i++)
    dx[i] = 1e30f;
  memcpy(dgb, dgb0, 2 * (size_t)dim * sizeof *dgb);
  ps_layernorm_backward(v, v + nx, stats, dy, dx, dgb, dgb + dim, rows, dim);
  for (int j = 0; j < 2 * dim; j++)
    dgb[j] -= dgb0[j];
  if (dim == 1) {
    /* a row of one value normalizes to 0 whatever x: dx and dgamma are 0 */
    for (size_t i = 0; i < nx; i++)
      g_assert_cmpfloat(dx[i], ==, 0.0f);
    g_assert_cmpfloat(fabs(dgb[0]), <=, 1e-6);
  } else {
    assert_close("layernorm dx", dx, g, nx, 1.0);
    assert_close("layernorm dgamma", dgb, g + nx, (size_t)dim, 1.0);
  }
  assert_close("layernorm dbeta", dgb + dim, g + nx + dim, (size_t)dim, 1.0);

  /* without dx (a first layer) the parameter gradients are the same */
  memset(dgb, 0, 2 * (size_t)dim * sizeof *dgb);
  ps_layernorm_backward(v, v + nx, stats, dy, NULL, dgb, dgb + dim, rows, dim);
  assert_close("layernorm dbeta (no dx)", dgb + dim, g + nx + dim, (size_t)dim, 1.0);

  g_free(v); g_free(y); g_free(dy); g_free(dx); g_free(stats); g_free(dgb); g_free(dgb0);
  g_free(vd); g_free(rd); g_free(yref); g_free(g);
  g_rand_free(r);
}

/* ---- multi-head self-attention ----------------------------------------- */

typedef struct {
  const char *name;
  int batch, seq, dim, heads, bias, causal;
} AttnCase;

static const AttnCase attn_cases[] = {
  {"b2-s5-d8-h2-bias", 2, 5, 8, 2, 1, 0},
  {"b1-s4-d6-h3-nobias", 1, 4, 6, 3, 0, 0},
  {"b2-s4-d4-h1-causal", 2, 4, 4, 1, 1, 1},
  {"b1-s6-d8-h4-causal", 1, 6, 8, 4, 0, 1},
};

typedef struct {
  const AttnCase *c;
  const double *r;
} AttnCtx;

static size_t attn_nx(const AttnCase *c) { return (size_t)c->batch * c->seq * c->dim; }
static size_t attn_nw(const AttnCase *c) { return 4 * (size_t)c->dim * c->dim; }
static size_t attn_nb(const AttnCase *c) { return c->bias ? 4 * (size_t)c->dim : 0; }

/* v = [x, W_qkv (D x 3D), W_o (D x D), b_qkv (3D), b_o (D)], straight from
 * Vaswani et al. 2017, eqs. 1 and section 3.2.2: Q K V projections, per
 * head softmax(Q K^T / sqrt(dh)) V (a causal row i over j <= i), the heads
 * concatenated, then the output projection. */
static void ref_attention(const AttnCase *c, const double *v, double *y)
{
  const int S = c->seq, D = c->dim, H = c->heads, dh = D / H;
  const double *x = v, *wqkv = v + attn_nx(c), *wo = wqkv + 3 * D * D;
  const double *bqkv = c->bias ? wo + D * D : NULL, *bo = c->bias ? bqkv + 3 * D : NULL;
  double *qkv = g_new(double, (size_t)S * 3 * D), *ctx = g_new(double, (size_t)S * D);
  double *p = g_new(double, S);
  for (int e = 0; e < c->batch; e++) {
    const double *xe = x + (size_t)e * S * D;
    for (int i = 0; i < S; i++)
      for (int o = 0; o < 3 * D; o++) {
        double s = bqkv ? bqkv[o] : 0.0;
        for (int k = 0; k < D; k++)
          s += xe[i * D + k] * wqkv[k * 3 * D + o];
        qkv[i * 3 * D + o] = s;
      }
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        int n = c->causal ? i + 1 : S;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; j++) {
          double s = 0.0;
          for (int k = 0; k < dh; k++)
            s += qkv[i * 3 * D + h * dh + k] * qkv[j * 3 * D + D + h * dh + k];
          p[j] = s / sqrt((double)dh);
          mx = MAX(mx, p[j]);
        }
        for (int j = 0; j < n; j++)
          sum += (p[j] = exp(p[j] - mx));
        for (int k = 0; k < dh; k++) {
          double s = 0.0;
          for (int j = 0; j < n; j++)
            s += p[j] / sum * qkv[j * 3 * D + 2 * D + h * dh + k];
          ctx[i * D + h * dh + k] = s;
        }
      }
    for (int i = 0; i < S; i++)
      for (int o = 0; o < D; o++) {
        double s = bo ? bo[o] : 0.0;
        for (int k = 0; k < D; k++)
          s += ctx[i * D + k] * wo[k * D + o];
        y[((size_t)e * S + i) * D + o] = s;
      }
  }
  g_free(qkv);
  g_free(ctx);
  g_free(p);
}

static double attn_objective(const double *v, const void *vctx)
{
  const AttnCtx *ctx = vctx;
  size_t ny = attn_nx(ctx->c);
  double *y = g_new(double, ny);
  ref_attention(ctx->c, v, y);
  double s = weighted_sum(ctx->r, y, ny);
  g_free(y);
  return s;
}

typedef struct {
  PsAttnShape s;
  size_t nx, nw, nb, nv;
  float *v, *y, *dy, *dx, *dv, *saved, *ws;
} AttnRun;

static void attn_run_init(AttnRun *a, const AttnCase *c, GRand *r)
{
  a->s = (PsAttnShape){.batch = c->batch, .seq = c->seq, .dim = c->dim, .heads = c->heads,
                       .causal = c->causal};
  a->nx = attn_nx(c);
  a->nw = attn_nw(c);
  a->nb = attn_nb(c);
  a->nv = a->nx + a->nw + a->nb;
  a->v = g_new(float, a->nv);
  a->y = g_new(float, a->nx);
  a->dy = g_new(float, a->nx);
  a->dx = g_new(float, a->nx);
  a->dv = g_new0(float, a->nv);
  a->saved = g_new(float, ps_attention_saved(&a->s));
  a->ws = g_new(float, ps_attention_workspace(&a->s));
  fill_uniform(r, a->v, a->nx, -1, 1);
  /* weights of Glorot size, so the scores spread over a few units */
  fill_uniform(r, a->v + a->nx, a->nw, -0.9, 0.9);
  fill_uniform(r, a->v + a->nx + a->nw, a->nb, -0.3, 0.3);
  fill_uniform(r, a->dy, a->nx, -1, 1);
}

static void attn_run_clear(AttnRun *a)
{
  g_free(a->v); g_free(a->y); g_free(a->dy); g_free(a->dx); g_free(a->dv);
  g_free(a->saved); g_free(a->ws);
}

static void attn_run(AttnRun *a, PsPrecision prec)
{
  const float *w = a->v + a->nx, *b = a->nb ? a->v + a->nx + a->nw : NULL;
  ps_attention_forward(prec, &a->s, a->v, w, b, a->y, a->saved, a->ws);
  for (size_t i = 0; i < a->nx; i++)
    a->dx[i] = 1e30f;
  memset(a->dv, 0, a->nv * sizeof *a->dv);
  ps_attention_backward(prec, &a->s, a->v, w, a->saved, a->dy, a->dx, a->dv + a->nx,
                        a->nb ? a->dv + a->nx + a->nw : NULL, a->ws);
  memcpy(a->dv, a->dx, a->nx * sizeof *a->dx);
}

/* Forward, and every gradient (input, both weight matrices, both biases)
 * against central differences of the double loops; the probabilities it
 * keeps sum to one per row (zero past the diagonal when causal). */
static void test_attention(gconstpointer data)
{
  const AttnCase *c = data;
  GRand *r = g_rand_new_with_seed(59);
  AttnRun a;
  attn_run_init(&a, c, r);
  g_assert_cmpuint(a.nw + a.nb, ==, 4 * (size_t)c->dim * c->dim + (c->bias ? 4 * c->dim : 0));
  double *vd = to_double(a.v, a.nv), *rd = to_double(a.dy, a.nx);
  double *yref = g_new(double, a.nx), *g = g_new(double, a.nv);
  AttnCtx ctx = {c, rd};

  ref_attention(c, vd, yref);
  attn_run(&a, PS_PRECISION_F32);
  assert_close("attention y", a.y, yref, a.nx, 1.0);

  const size_t sd = (size_t)c->seq * c->dim;
  const float *probs = a.saved + (size_t)c->batch * 4 * sd;
  for (int blk = 0; blk < c->batch * c->heads; blk++)
    for (int i = 0; i < c->seq; i++) {
      double sum = 0.0;
      for (int j = 0; j < c->seq; j++) {
        float pij = probs[((size_t)blk * c->seq + i) * c->seq + j];
        if (c->causal && j > i)
          g_assert_cmpfloat(pij, ==, 0.0f);
        sum += pij;
      }
      g_assert_cmpfloat(fabs(sum - 1.0), <=, 1e-6);
    }

  fd_gradient(attn_objective, &ctx, vd, a.nv, g);
  assert_close("attention dx", a.dv, g, a.nx, 1.0);
  assert_close("attention dW_qkv", a.dv + a.nx, g + a.nx, 3 * (size_t)c->dim * c->dim, 1.0);
  assert_close("attention dW_o", a.dv + a.nx + 3 * c->dim * c->dim,
               g + a.nx + 3 * c->dim * c->dim, (size_t)c->dim * c->dim, 1.0);
  if (c->bias) {
    assert_close("attention db_qkv", a.dv + a.nx + a.nw, g + a.nx + a.nw, 3 * (size_t)c->dim,
                 1.0);
    assert_close("attention db_o", a.dv + a.nx + a.nw + 3 * c->dim,
                 g + a.nx + a.nw + 3 * c->dim, (size_t)c->dim, 1.0);
  }

  /* dw accumulates: a second backward doubles it (to rounding: the GEMM
   * adds onto what is there); no dx is fine */
  g_autofree float *dw1 = g_memdup2(a.dv + a.nx, (a.nw + a.nb) * sizeof(float));
  const float *w = a.v + a.nx;
  ps_attention_backward(PS_PRECISION_F32, &a.s, a.v, w, a.saved, a.dy, NULL, a.dv + a.nx,
                        a.nb ? a.dv + a.nx + a.nw : NULL, a.ws);
  g_autofree double *dw1d = to_double(dw1, a.nw + a.nb);
  assert_close("attention dw (twice)", a.dv + a.nx, dw1d, a.nw + a.nb, 2.0);

  g_free(vd); g_free(rd); g_free(yref); g_free(g);
  attn_run_clear(&a);
  g_rand_free(r);
}

/* bfloat16: every product rounds its two inputs to 8 significant bits
 * (relative error at most 2^-9 each, so 2^-8 per product), and attention
 * chains four products (projection, scores, context, output) plus the
 * softmax between them: the output moves by a few times 2^-8 of its scale,
 * and the gradients, two more products deep, by a few times that.  We hold
 * y to 4% and the gradients to 8% of their largest entry (about 10 and 20
 * times 2^-8), and require a visible difference from float32 (over 1e-4),
 * which a path that skipped the rounding would not show. */
static void test_attention_bf16(void)
{
  const AttnCase c = {"bf16", 2, 6, 8, 2, 1, 0};
  GRand *r = g_rand_new_with_seed(61);
  AttnRun a, b;
  attn_run_init(&a, &c, r);
  g_rand_free(r);
  r = g_rand_new_with_seed(61);
  attn_run_init(&b, &c, r);
  attn_run(&a, PS_PRECISION_F32);
  attn_run(&b, PS_PRECISION_BF16);
  struct { const char *what; const float *f32, *bf; size_t n; double tol; } parts[] = {
    {"y", a.y, b.y, a.nx, 0.04},
    {"dx", a.dv, b.dv, a.nx, 0.08},
    {"dw", a.dv + a.nx, b.dv + b.nx, a.nw + a.nb, 0.08},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(parts); k++) {
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < parts[k].n; i++) {
      scale = MAX(scale, fabs(parts[k].f32[i]));
      diff = MAX(diff, fabs(parts[k].f32[i] - parts[k].bf[i]));
    }
    g_test_message("attention bf16 %s: max |bf16 - f32| %.3g of scale %.3g", parts[k].what,
                   diff, scale);
    g_assert_cmpfloat(diff, <=, parts[k].tol * scale);
    g_assert_cmpfloat(diff, >, 1e-4);
  }
  attn_run_clear(&a);
  attn_run_clear(&b);
  g_rand_free(r);
}

/* ---- patch embedding --------------------------------------------------- */

typedef struct {
  const char *name;
  int batch, h, w, c, patch, dim, positions;
} PatchCase;

static const PatchCase patch_cases[] = {
  {"b2-6x4x2-p2-pos", 2, 6, 4, 2, 2, 3, 1},
  {"b1-6x6x1-p3-nopos", 1, 6, 6, 1, 3, 4, 0},
  {"b2-4x4x3-p4-pos", 2, 4, 4, 3, 4, 5, 1}, /* one patch: the whole image */
};

typedef struct {
  const PatchCase *c;
  const double *r;
} PatchCtx;

static int patch_seq(const PatchCase *c) { return (c->h / c->patch) * (c->w / c->patch); }
static size_t patch_nx(const PatchCase *c) { return (size_t)c->batch * c->h * c->w * c->c; }
static size_t patch_k(const PatchCase *c) { return (size_t)c->patch * c->patch * c->c; }
static size_t patch_ny(const PatchCase *c) { return (size_t)c->batch * patch_seq(c) * c->dim; }

/* v = [x (NHWC), w (P P C x D), pos (S x D) if any, b (D)]: patch (gy, gx)
 * is token gy (W / P) + gx, its element (py, px, ch) row (py P + px) C + ch
 * of w (Dosovitskiy et al. 2021, eq. 1). */
static void ref_patch(const PatchCase *c, const double *v, double *y)
{
  const int P = c->patch, gw = c->w / P, S = patch_seq(c), D = c->dim;
  const size_t K = patch_k(c);
  const double *x = v, *w = v + patch_nx(c), *pos = c->positions ? w + K * D : NULL;
  const double *b = w + K * D + (c->positions ? (size_t)S * D : 0);
  for (int e = 0; e < c->batch; e++)
    for (int t = 0; t < S; t++)
      for (int o = 0; o < D; o++) {
        int gy = t / gw, gx = t % gw;
        double s = b[o] + (pos ? pos[t * D + o] : 0.0);
        for (int py = 0; py < P; py++)
          for (int px = 0; px < P; px++)
            for (int ch = 0; ch < c->c; ch++)
              s += x[(((size_t)e * c->h + gy * P + py) * c->w + gx * P + px) * c->c + ch] *
                   w[((size_t)(py * P + px) * c->c + ch) * D + o];
        y[((size_t)e * S + t) * D + o] = s;
      }
}

static double patch_objective(const double *v, const void *vctx)
{
  const PatchCtx *ctx = vctx;
  size_t ny = patch_ny(ctx->c);
  double *y = g_new(double, ny);
  ref_patch(ctx->c, v, y);
  double s = weighted_sum(ctx->r, y, ny);
  g_free(y);
  return s;
}

static void test_patch(gconstpointer data)
{
  const PatchCase *c = data;
  GRand *r = g_rand_new_with_seed(67);
  PsPatchShape s = {.batch = c->batch, .h = c->h, .w = c->w, .c = c->c, .patch = c->patch,
                    .dim = c->dim};
  g_assert_cmpint(ps_patch_seq(&s), ==, patch_seq(c));
  const size_t nx = patch_nx(c), K = patch_k(c), ny = patch_ny(c);
  const size_t npos = c->positions ? (size_t)patch_seq(c) * c->dim : 0;
  const size_t nv = nx + K * c->dim + npos + c->dim;
  float *v = g_new(float, nv), *y = g_new(float, ny), *dy = g_new(float, ny);
  float *dv = g_new0(float, nv), *dv0 = g_new(float, nv);
  float *ws = g_new(float, ps_patch_workspace(&s));
  fill_uniform(r, v, nv, -1, 1);
  fill_uniform(r, dy, ny, -1, 1);
  fill_uniform(r, dv0, nv, -1, 1);
  double *vd = to_double(v, nv), *rd = to_double(dy, ny);
  double *yref = g_new(double, ny), *g = g_new(double, nv);
  PatchCtx ctx = {c, rd};
  const float *w = v + nx, *pos = c->positions ? w + K * c->dim : NULL;
  const float *b = w + K * c->dim + npos;

  ref_patch(c, vd, yref);
  ps_patch_forward(PS_PRECISION_F32, &s, v, w, pos, b, y, ws);
  assert_close("patch y", y, yref, ny, 1.0);

  fd_gradient(patch_objective, &ctx, vd, nv, g);
  memcpy(dv, dv0, nv * sizeof *dv);
  for (size_t i = 0; i < nx; i++)
    dv[i] = 1e30f;
  float *dw = dv + nx, *dpos = c->positions ? dw + K * c->dim : NULL;
  float *db = dw + K * c->dim + npos;
  ps_patch_backward(PS_PRECISION_F32, &s, v, w, dy, dv, dw, dpos, db, ws);
  for (size_t i = nx; i < nv; i++)
    dv[i] -= dv0[i];
  assert_close("patch dx", dv, g, nx, 1.0);
  assert_close("patch dw", dw, g + nx, K * c->dim, 1.0);
  if (c->positions)
    assert_close("patch dpos", dpos, g + nx + K * c->dim, npos, 1.0);
  assert_close("patch db", db, g + nx + K * c->dim + npos, (size_t)c->dim, 1.0);

  /* bfloat16: one product, so the reference rounds x and w beforehand and
   * keeps bias and positions in float (as test_conv_bf16) */
  for (size_t i = 0; i < nx + K * c->dim; i++)
    vd[i] = bf16_reference(v[i]);
  ref_patch(c, vd, yref);
  ps_patch_forward(PS_PRECISION_BF16, &s, v, w, pos, b, y, ws);
  assert_close("bf16 patch y", y, yref, ny, 1.0);

  g_free(v); g_free(y); g_free(dy); g_free(dv); g_free(dv0); g_free(ws);
  g_free(vd); g_free(rd); g_free(yref); g_free(g);
  g_rand_free(r);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ps_kernels_init();

  for (size_t i = 0; i < G_N_ELEMENTS(norm_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/layernorm/backward/%s", norm_cases[i].name);
    g_test_add_data_func(path, &norm_cases[i], test_layernorm);
  }
  for (size_t i = 0; i < G_N_ELEMENTS(attn_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/attention/backward/%s", attn_cases[i].name);
    g_test_add_data_func(path, &attn_cases[i], test_attention);
  }
  g_test_add_func("/kernels/attention/bf16", test_attention_bf16);
  for (size_t i = 0; i < G_N_ELEMENTS(patch_cases); i++) {
    g_autofree char *path = g_strdup_printf("/kernels/patch/backward/%s", patch_cases[i].name);
    g_test_add_data_func(path, &patch_cases[i], test_patch);
  }
  return g_test_run();
}

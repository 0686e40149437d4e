/* kernels.c: float32 training kernels (dense, element-wise activations,
 * softmax cross-entropy, im2col convolution, pooling, layer normalization,
 * patch embedding, optimizers), their matrix products through the GEMM of
 * gemm.c (attention is in kernels-attention.c, the decoder's kernels in
 * kernels-decoder.c).
 *
 * Invariant: every kernel is a pure function of its inputs, runs on one
 * thread and visits data in a fixed order, so the same inputs always give
 * bit-identical outputs.  Forward kernels and dx overwrite their outputs;
 * dw and db are only ever added to. */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* Upper bound, in floats, of one im2col chunk; the conv kernels process
 * the batch a few examples at a time so the workspace stays near this
 * size (always at least one example). */
#define PS_CONV_CHUNK_FLOATS ((size_t)1 << 21)

/* Window rows (kernel x input channels) shorter than this many floats are
 * gathered element by element rather than copied with memcpy/memset. */
#define PS_IM2COL_SHORT_RUN 32

/* Hot element-wise loops run over blocks of PS_BLOCK floats with a
 * fixed-size inner loop whose results go to a local array, stored with
 * memcpy: the compiler's cheap vectorizer (-O2) turns such a block into
 * vector code, even when input and output might overlap; the tail is done
 * one by one. */
#define PS_BLOCK 16

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation of GELU
 * (Hendrycks and Gimpel, "Gaussian Error Linear Units", 2016, eq. 2). */
#define PS_GELU_C 0.7978845608028654f
#define PS_GELU_A 0.044715f

void ps_kernels_init(void)
{
  /* nothing to set up: the GEMM is the library's own, on the caller's thread */
}

/* ---- bfloat16 ---------------------------------------------------------- */

float ps_bf16_round(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    /* NaN: set the quiet bit (kept by truncation) and drop the low half. */
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    /* Round to nearest, ties to even on bit 16; infinities are unchanged
     * and values past the largest bfloat16 round to infinity. */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  float r;
  memcpy(&r, &u, sizeof r);
  return r;
}

void ps_bf16_round_array(const float *in, float *out, size_t n)
{
  g_return_if_fail(n == 0 || (in != NULL && out != NULL));
  for (size_t i = 0; i < n; i++)
    out[i] = ps_bf16_round(in[i]);
}

/* ---- dense ------------------------------------------------------------- */

/* Starts each output row at the bias, so the GEMM can accumulate onto it
 * (one pass over y fewer than adding the bias afterwards). */
static void fill_bias_rows(float *y, const float *b, size_t rows, int n)
{
  for (size_t r = 0; r < rows; r++)
    memcpy(y + r * n, b, (size_t)n * sizeof *y);
}

/* db += column sums of dy, over column blocks of PS_BLOCK (the tail one by
 * one), in a fixed order. */
static void sum_rows_into(const float *dy, float *db, size_t rows, int n)
{
  int full = n - n % PS_BLOCK;
  for (int j0 = 0; j0 < full; j0 += PS_BLOCK) {
    float acc[PS_BLOCK] = {0};
    for (size_t r = 0; r < rows; r++)
      for (int j = 0; j < PS_BLOCK; j++)
        acc[j] += dy[r * n + j0 + j];
    for (int j = 0; j < PS_BLOCK; j++)
      db[j0 + j] += acc[j];
  }
  for (size_t r = 0; r < rows; r++)
    for (int j = full; j < n; j++)
      db[j] += dy[r * n + j];
}

void ps_dense_forward(PsPrecision prec, const float *x, const float *w, const float *b,
                      float *y, int rows, int in, int out)
{
  if (b)
    fill_bias_rows(y, b, (size_t)rows, out);
  ps_gemm(prec, FALSE, FALSE, rows, out, in, x, w, b != NULL, y);
}

void ps_dense_backward(PsPrecision prec, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, int rows, int in, int out)
{
  /* dw (in x out) += x^T dy; db += column sums of dy; dx = dy w^T. */
  ps_gemm(prec, TRUE, FALSE, in, out, rows, x, dy, TRUE, dw);
  if (db)
    sum_rows_into(dy, db, (size_t)rows, out);
  if (dx)
    ps_gemm(prec, FALSE, TRUE, rows, in, out, dy, w, FALSE, dx);
}

/* ---- element-wise activations ----------------------------------------- */

/* ReLU is a branch-free select per block (random signs would mispredict a
 * branch per element). */
void ps_relu_forward(const float *x, float *y, size_t n)
{
  size_t i = 0;
  for (; i + PS_BLOCK <= n; i += PS_BLOCK) {
    float blk[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++) {
      float v = x[i + j];
      blk[j] = v > 0.0f ? v : 0.0f;
    }
    memcpy(y + i, blk, sizeof blk);
  }
  for (; i < n; i++)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void ps_relu_backward(const float *x, const float *dy, float *dx, size_t n)
{
  size_t i = 0;
  for (; i + PS_BLOCK <= n; i += PS_BLOCK) {
    float blk[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++) {
      float v = x[i + j], g = dy[i + j];
      blk[j] = v > 0.0f ? g : 0.0f;
    }
    memcpy(dx + i, blk, sizeof blk);
  }
  for (; i < n; i++)
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* Float <-> bits, for the branch-free selects below. */
static inline uint32_t f2u(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float u2f(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* e^-|x| without libm and without branches or selects, so that blocks of
 * it vectorize (GCC's cheap vectorizer gives up on control flow, and it
 * turns a select that yields a constant into a branch): |x| is capped at
 * 100 on its bits (NaN too), -|x| = n ln2 + r with |r| <= ln2 / 2, e^r by
 * its Taylor series to r^7 (truncation below 1e-8 relative), 2^n from the
 * exponent bits, 0 below the normal range.  ln 2 is split in two
 * (Cephes's expf constants, C1 = 0.693359375 exact in 9 bits, C2 =
 * -2.12194440e-4) so n C1 is exact; adding 1.5 2^23 rounds to an
 * integer.  (>> of a negative int is arithmetic in GCC.) */
static inline float exp_neg_abs(float x)
{
  const int32_t cap = 0x42c80000; /* 100.0f */
  int32_t over = (int32_t)(f2u(x) & 0x7fffffffu) - cap;
  float a = u2f((uint32_t)(cap + (over & (over >> 31))) | 0x80000000u);
  float nf = (a * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = a - nf * 0.693359375f + nf * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t k = (int32_t)nf + 127;
  k &= ~(k >> 31);
  return p * u2f((uint32_t)k << 23);
}

/* The tanh form 0.5 v (1 + tanh(u)) equals v s with s = sigmoid(2u),
 * which with e = exp(-|2u|) is 1 / (1 + e) for u >= 0 and e / (1 + e)
 * below: no cancellation, no overflow, and far cheaper than tanhf.  Its
 * derivative s (1 - s) is e / (1 + e)^2 on both sides. */
static inline float gelu_u2(float v)
{
  return 2.0f * PS_GELU_C * (v + PS_GELU_A * v * v * v);
}

/* The numerator of s: 1 when u2 >= 0 (sign bit clear), else e. */
static inline float gelu_num(float u2, float e)
{
  uint32_t neg = 0u - (f2u(u2) >> 31);
  return u2f((f2u(e) & neg) | (f2u(1.0f) & ~neg));
}

static inline float gelu_value(float v)
{
  float u2 = gelu_u2(v);
  float e = exp_neg_abs(u2);
  return v * gelu_num(u2, e) / (1.0f + e);
}

void ps_gelu_forward(const float *x, float *y, size_t n)
{
  size_t i = 0;
  for (; i + PS_BLOCK <= n; i += PS_BLOCK) {
    float blk[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++)
      blk[j] = gelu_value(x[i + j]);
    memcpy(y + i, blk, sizeof blk);
  }
  for (; i < n; i++)
    y[i] = gelu_value(x[i]);
}

/* d/dv [v s] = s + v s (1 - s) d(2u)/dv, d(2u)/dv = 2 c (1 + 3 a v^2). */
static inline float gelu_grad(float v, float g)
{
  float u2 = gelu_u2(v);
  float e = exp_neg_abs(u2);
  float inv = 1.0f / (1.0f + e);
  float du = 2.0f * PS_GELU_C * (1.0f + 3.0f * PS_GELU_A * v * v);
  return g * (gelu_num(u2, e) * inv + v * e * inv * inv * du);
}

void ps_gelu_backward(const float *x, const float *dy, float *dx, size_t n)
{
  size_t i = 0;
  for (; i + PS_BLOCK <= n; i += PS_BLOCK) {
    float blk[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++)
      blk[j] = gelu_grad(x[i + j], dy[i + j]);
    memcpy(dx + i, blk, sizeof blk);
  }
  for (; i < n; i++)
    dx[i] = gelu_grad(x[i], dy[i]);
}

void ps_tanh_forward(const float *x, float *y, size_t n)
{
  for (size_t i = 0; i < n; i++)
    y[i] = tanhf(x[i]);
}

void ps_tanh_backward(const float *y, const float *dy, float *dx, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

/* ---- softmax cross-entropy -------------------------------------------- */

double ps_softmax_xent_forward(const float *logits, const int32_t *labels, float *probs,
                               int batch, int classes, int *correct)
{
  g_return_val_if_fail(batch >= 0 && classes > 0, 0.0);
  double total = 0.0;
  int right = 0;
  for (int r = 0; r < batch; r++) {
    const float *z = logits + (size_t)r * classes;
    float *p = probs + (size_t)r * classes;
    int best = 0;
    for (int j = 1; j < classes; j++)
      if (z[j] > z[best])
        best = j;
    double zmax = z[best];
    double sum = 0.0;
    for (int j = 0; j < classes; j++)
      sum += exp((double)z[j] - zmax);
    double inv = 1.0 / sum;
    for (int j = 0; j < classes; j++)
      p[j] = (float)(exp((double)z[j] - zmax) * inv);
    int32_t label = labels[r];
    g_return_val_if_fail(label >= 0 && label < classes, total);
    total += log(sum) - ((double)z[label] - zmax);
    if (best == label)
      right++;
  }
  if (correct)
    *correct = right;
  return total;
}

void ps_softmax_xent_backward(const float *probs, const int32_t *labels, float *dlogits,
                              int batch, int classes, float scale)
{
  for (int r = 0; r < batch; r++) {
    const float *p = probs + (size_t)r * classes;
    float *d = dlogits + (size_t)r * classes;
    int32_t label = labels[r];
    g_return_if_fail(label >= 0 && label < classes);
    for (int j = 0; j < classes; j++)
      d[j] = scale * (p[j] - (j == label ? 1.0f : 0.0f));
  }
}

/* ---- convolution ------------------------------------------------------- */

void ps_conv2d_shape(PsConvShape *s)
{
  g_return_if_fail(s != NULL && s->kernel > 0 && s->stride > 0);
  if (s->same_padding) {
    /* TensorFlow's "SAME": out = ceil(in / stride); the total padding
     * makes the last window fit, the top/left side gets the smaller half. */
    s->out_h = (s->h + s->stride - 1) / s->stride;
    s->out_w = (s->w + s->stride - 1) / s->stride;
    int ph = MAX((s->out_h - 1) * s->stride + s->kernel - s->h, 0);
    int pw = MAX((s->out_w - 1) * s->stride + s->kernel - s->w, 0);
    s->pad_top = ph / 2;
    s->pad_left = pw / 2;
  } else {
    s->out_h = s->h >= s->kernel ? (s->h - s->kernel) / s->stride + 1 : 0;
    s->out_w = s->w >= s->kernel ? (s->w - s->kernel) / s->stride + 1 : 0;
    s->pad_top = 0;
    s->pad_left = 0;
  }
}

/* A 1x1, stride-1, unpadded convolution is a plain matrix product over the
 * input as it lies in memory; no im2col needed. */
static gboolean conv_is_pointwise(const PsConvShape *s)
{
  return s->kernel == 1 && s->stride == 1 && s->pad_top == 0 && s->pad_left == 0;
}

static size_t conv_col_width(const PsConvShape *s)
{
  return (size_t)s->kernel * s->kernel * s->cin;
}

static size_t conv_col_per_example(const PsConvShape *s)
{
  return (size_t)s->out_h * s->out_w * conv_col_width(s);
}

static int conv_chunk_examples(const PsConvShape *s)
{
  size_t per = conv_col_per_example(s);
  if (per == 0)
    return MAX(s->batch, 1);
  size_t nb = PS_CONV_CHUNK_FLOATS / per;
  return (int)CLAMP(nb, (size_t)1, (size_t)MAX(s->batch, 1));
}

/* With few input channels, window rows are too short for memcpy: im2col
 * then gathers through a table, built once per call, of where each column
 * entry of one example comes from in its image. */
static gboolean conv_uses_table(const PsConvShape *s)
{
  return (size_t)s->kernel * s->cin < PS_IM2COL_SHORT_RUN;
}

size_t ps_conv2d_workspace(const PsConvShape *s)
{
  g_return_val_if_fail(s != NULL, 0);
  if (conv_is_pointwise(s))
    return 0;
  size_t per = conv_col_per_example(s);
  return (size_t)conv_chunk_examples(s) * per + (conv_uses_table(s) ? per : 0);
}

/* The gather table lives in the float workspace; its int32 entries are
 * moved in and out with memcpy, which is how C lets one reinterpret bytes. */
static void table_set(float *table, size_t i, int32_t v)
{
  memcpy(table + i, &v, sizeof v);
}

static int32_t table_get(const float *table, size_t i)
{
  int32_t v;
  memcpy(&v, table + i, sizeof v);
  return v;
}

/* Entry q of one example's columns comes from image element table[q], or
 * is padding (-1). */
static void build_table(const PsConvShape *s, float *table)
{
  g_assert((size_t)s->h * s->w * s->cin <= G_MAXINT32);
  size_t q = 0;
  for (int oy = 0; oy < s->out_h; oy++)
    for (int ox = 0; ox < s->out_w; ox++)
      for (int ky = 0; ky < s->kernel; ky++)
        for (int kx = 0; kx < s->kernel; kx++) {
          int iy = oy * s->stride - s->pad_top + ky, ix = ox * s->stride - s->pad_left + kx;
          gboolean inside = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w;
          for (int ci = 0; ci < s->cin; ci++)
            table_set(table, q++, inside ? (int32_t)(((size_t)iy * s->w + ix) * s->cin + ci) : -1);
        }
}

/* The part of a window row that lies inside the image: kernel columns
 * [lo, hi) of the window starting at input column ix0. */
static void window_cols(const PsConvShape *s, int ix0, int *lo, int *hi)
{
  *lo = ix0 < 0 ? -ix0 : 0;
  *hi = MIN(s->kernel, s->w - ix0);
  if (*hi < *lo)
    *hi = *lo;
}

/* Lays out the windows of examples [b0, b0+nb) as rows of col: row (b, oy,
 * ox), columns (ky, kx, ci) to match the (kh, kw, cin, cout) weights;
 * zeros where a window hangs over the padding.  A window row is one
 * contiguous run of the input (kx, ci), so it is copied in one go. */
static void im2col(const PsConvShape *s, const float *x, int b0, int nb, float *col,
                   const float *table)
{
  const int k = s->kernel, cin = s->cin;
  const size_t run = (size_t)k * cin;
  float *dst = col;
  if (table) {
    const size_t per = conv_col_per_example(s);
    for (int b = b0; b < b0 + nb; b++, dst += per) {
      const float *img = x + (size_t)b * s->h * s->w * cin;
      for (size_t q = 0; q < per; q++) {
        int32_t from = table_get(table, q);
        dst[q] = from >= 0 ? img[from] : 0.0f;
      }
    }
    return;
  }
  for (int b = b0; b < b0 + nb; b++) {
    const float *img = x + (size_t)b * s->h * s->w * cin;
    for (int oy = 0; oy < s->out_h; oy++) {
      for (int ox = 0; ox < s->out_w; ox++) {
        int ix0 = ox * s->stride - s->pad_left, lo, hi;
        window_cols(s, ix0, &lo, &hi);
        for (int ky = 0; ky < k; ky++, dst += run) {
          int iy = oy * s->stride - s->pad_top + ky;
          if (iy < 0 || iy >= s->h) {
            memset(dst, 0, run * sizeof *dst);
            continue;
          }
          size_t a = (size_t)lo * cin, e = (size_t)hi * cin;
          if (a > 0)
            memset(dst, 0, a * sizeof *dst);
          memcpy(dst + a, img + ((size_t)iy * s->w + ix0 + lo) * cin, (e - a) * sizeof *dst);
          if (e < run)
            memset(dst + e, 0, (run - e) * sizeof *dst);
        }
      }
    }
  }
}

/* dst += src over n floats, by blocks. */
static void add_into(float *dst, const float *src, size_t n)
{
  size_t i = 0;
  for (; i + PS_BLOCK <= n; i += PS_BLOCK) {
    float blk[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++)
      blk[j] = dst[i + j] + src[i + j];
    memcpy(dst + i, blk, sizeof blk);
  }
  for (; i < n; i++)
    dst[i] += src[i];
}

/* The adjoint of im2col: adds each column entry back onto the input pixel
 * it was copied from (dx must be zeroed by the caller). */
static void col2im(const PsConvShape *s, const float *col, int b0, int nb, float *dx,
                   const float *table)
{
  const int k = s->kernel, cin = s->cin;
  const size_t run = (size_t)k * cin;
  const float *src = col;
  if (table) {
    const size_t per = conv_col_per_example(s);
    for (int b = b0; b < b0 + nb; b++, src += per) {
      float *img = dx + (size_t)b * s->h * s->w * cin;
      for (size_t q = 0; q < per; q++) {
        int32_t to = table_get(table, q);
        if (to >= 0)
          img[to] += src[q];
      }
    }
    return;
  }
  for (int b = b0; b < b0 + nb; b++) {
    float *img = dx + (size_t)b * s->h * s->w * cin;
    for (int oy = 0; oy < s->out_h; oy++) {
      for (int ox = 0; ox < s->out_w; ox++) {
        int ix0 = ox * s->stride - s->pad_left, lo, hi;
        window_cols(s, ix0, &lo, &hi);
        for (int ky = 0; ky < k; ky++, src += run) {
          int iy = oy * s->stride - s->pad_top + ky;
          if (iy < 0 || iy >= s->h)
            continue;
          add_into(img + ((size_t)iy * s->w + ix0 + lo) * cin, src + (size_t)lo * cin,
                   (size_t)(hi - lo) * cin);
        }
      }
    }
  }
}

/* The gather table, built after the chunk's columns in the workspace, or
 * NULL when the convolution does without. */
static float *conv_table(const PsConvShape *s, int chunk, float *workspace)
{
  if (!conv_uses_table(s))
    return NULL;
  float *table = workspace + (size_t)chunk * conv_col_per_example(s);
  build_table(s, table);
  return table;
}

void ps_conv2d_forward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                       const float *b, float *y, float *workspace)
{
  g_return_if_fail(s != NULL && x != NULL && w != NULL && y != NULL);
  const size_t pixels = (size_t)s->out_h * s->out_w;
  const int width = (int)conv_col_width(s);
  if (b)
    fill_bias_rows(y, b, s->batch * pixels, s->cout);
  if (conv_is_pointwise(s)) {
    ps_gemm(prec, FALSE, FALSE, (int)(s->batch * pixels), s->cout, width, x, w, b != NULL, y);
    return;
  }
  g_return_if_fail(workspace != NULL);
  const int chunk = conv_chunk_examples(s);
  float *table = conv_table(s, chunk, workspace);
  for (int b0 = 0; b0 < s->batch; b0 += chunk) {
    int nb = MIN(chunk, s->batch - b0);
    im2col(s, x, b0, nb, workspace, table);
    ps_gemm(prec, FALSE, FALSE, (int)(nb * pixels), s->cout, width, workspace, w, b != NULL,
            y + (size_t)b0 * pixels * s->cout);
  }
}

void ps_conv2d_backward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *db, float *workspace)
{
  g_return_if_fail(s != NULL && x != NULL && w != NULL && dy != NULL && dw != NULL);
  const size_t pixels = (size_t)s->out_h * s->out_w;
  const int width = (int)conv_col_width(s);
  if (db)
    sum_rows_into(dy, db, s->batch * pixels, s->cout);
  if (conv_is_pointwise(s)) {
    int rows = (int)(s->batch * pixels);
    ps_gemm(prec, TRUE, FALSE, width, s->cout, rows, x, dy, TRUE, dw);
    if (dx)
      ps_gemm(prec, FALSE, TRUE, rows, width, s->cout, dy, w, FALSE, dx);
    return;
  }
  g_return_if_fail(workspace != NULL);
  if (dx)
    memset(dx, 0, (size_t)s->batch * s->h * s->w * s->cin * sizeof *dx);
  const int chunk = conv_chunk_examples(s);
  float *table = conv_table(s, chunk, workspace);
  for (int b0 = 0; b0 < s->batch; b0 += chunk) {
    int nb = MIN(chunk, s->batch - b0);
    int rows = (int)(nb * pixels);
    const float *dyc = dy + (size_t)b0 * pixels * s->cout;
    /* dw += col^T dy, then the same buffer takes dcol = dy w^T. */
    im2col(s, x, b0, nb, workspace, table);
    ps_gemm(prec, TRUE, FALSE, width, s->cout, rows, workspace, dyc, TRUE, dw);
    if (dx) {
      ps_gemm(prec, FALSE, TRUE, rows, width, s->cout, dyc, w, FALSE, workspace);
      col2im(s, workspace, b0, nb, dx, table);
    }
  }
}

/* ---- pooling ----------------------------------------------------------- */

void ps_pool_shape(PsPoolShape *s)
{
  g_return_if_fail(s != NULL && s->size > 0 && s->stride > 0);
  s->out_h = s->h >= s->size ? (s->h - s->size) / s->stride + 1 : 0;
  s->out_w = s->w >= s->size ? (s->w - s->size) / s->stride + 1 : 0;
}

/* Folds one window position into the running max of an output pixel; the
 * later position wins only if strictly greater, so the first maximum in
 * window order is kept.  Branch-free: which input wins is data-dependent
 * and would mispredict. */
static void maxpool_fold(const float *src, float *out, int32_t *arg, int32_t base, int c)
{
  int ch = 0;
  if (!arg) {
    for (; ch < c; ch++) {
      float v = src[ch], o = out[ch];
      out[ch] = v > o ? v : o;
    }
    return;
  }
  for (; ch + PS_BLOCK <= c; ch += PS_BLOCK) {
    float o[PS_BLOCK];
    int32_t a[PS_BLOCK];
    for (int j = 0; j < PS_BLOCK; j++) {
      float v = src[ch + j], w = out[ch + j];
      int32_t better = -(int32_t)(v > w); /* all ones or zero */
      o[j] = v > w ? v : w;
      a[j] = (arg[ch + j] & ~better) | ((base + ch + j) & better);
    }
    memcpy(out + ch, o, sizeof o);
    memcpy(arg + ch, a, sizeof a);
  }
  for (; ch < c; ch++) {
    float v = src[ch], o = out[ch];
    int32_t better = -(int32_t)(v > o);
    out[ch] = v > o ? v : o;
    arg[ch] = (arg[ch] & ~better) | ((base + ch) & better);
  }
}

void ps_maxpool_forward(const PsPoolShape *s, const float *x, float *y, int32_t *argmax)
{
  g_return_if_fail(s != NULL && x != NULL && y != NULL);
  g_return_if_fail((double)s->batch * s->h * s->w * s->c <= (double)G_MAXINT32);
  const int c = s->c;
  float *out = y;
  int32_t *arg = argmax;
  for (int b = 0; b < s->batch; b++) {
    for (int oy = 0; oy < s->out_h; oy++) {
      for (int ox = 0; ox < s->out_w; ox++, out += c) {
        int32_t corner = (int32_t)((((size_t)b * s->h + (size_t)oy * s->stride) * s->w +
                                    (size_t)ox * s->stride) * c);
        memcpy(out, x + corner, (size_t)c * sizeof *out);
        if (arg)
          for (int ch = 0; ch < c; ch++)
            arg[ch] = corner + ch;
        for (int ky = 0; ky < s->size; ky++) {
          for (int kx = ky == 0 ? 1 : 0; kx < s->size; kx++) {
            int32_t base = corner + (int32_t)(((size_t)ky * s->w + kx) * c);
            maxpool_fold(x + base, out, arg, base, c);
          }
        }
        if (arg)
          arg += c;
      }
    }
  }
}

void ps_maxpool_backward(const PsPoolShape *s, const int32_t *argmax, const float *dy,
                         float *dx)
{
  g_return_if_fail(s != NULL && argmax != NULL && dy != NULL && dx != NULL);
  memset(dx, 0, (size_t)s->batch * s->h * s->w * s->c * sizeof *dx);
  size_t n = (size_t)s->batch * s->out_h * s->out_w * s->c;
  for (size_t i = 0; i < n; i++)
    dx[argmax[i]] += dy[i];
}

void ps_avgpool_forward(const PsPoolShape *s, const float *x, float *y)
{
  g_return_if_fail(s != NULL && x != NULL && y != NULL);
  const int c = s->c;
  const float inv = 1.0f / (float)(s->size * s->size);
  float *out = y;
  for (int b = 0; b < s->batch; b++) {
    for (int oy = 0; oy < s->out_h; oy++) {
      for (int ox = 0; ox < s->out_w; ox++, out += c) {
        memset(out, 0, (size_t)c * sizeof *out);
        for (int ky = 0; ky < s->size; ky++) {
          for (int kx = 0; kx < s->size; kx++) {
            const float *src = x + (((size_t)b * s->h + (size_t)oy * s->stride + ky) * s->w +
                                    (size_t)ox * s->stride + kx) * c;
            for (int ch = 0; ch < c; ch++)
              out[ch] += src[ch];
          }
        }
        for (int ch = 0; ch < c; ch++)
          out[ch] *= inv;
      }
    }
  }
}

void ps_avgpool_backward(const PsPoolShape *s, const float *dy, float *dx)
{
  g_return_if_fail(s != NULL && dy != NULL && dx != NULL);
  const int c = s->c;
  const float inv = 1.0f / (float)(s->size * s->size);
  memset(dx, 0, (size_t)s->batch * s->h * s->w * c * sizeof *dx);
  const float *g = dy;
  for (int b = 0; b < s->batch; b++) {
    for (int oy = 0; oy < s->out_h; oy++) {
      for (int ox = 0; ox < s->out_w; ox++, g += c) {
        for (int ky = 0; ky < s->size; ky++) {
          for (int kx = 0; kx < s->size; kx++) {
            float *dst = dx + (((size_t)b * s->h + (size_t)oy * s->stride + ky) * s->w +
                               (size_t)ox * s->stride + kx) * c;
            for (int ch = 0; ch < c; ch++)
              dst[ch] += g[ch] * inv;
          }
        }
      }
    }
  }
}

/* ---- layer normalization ----------------------------------------------- */

/* Sums of a row in PS_BLOCK partial sums (so they vectorize), then the
 * tail: of x, and of (x - m)^2. */
static float row_sum(const float *x, int n)
{
  float acc[PS_BLOCK] = {0}, s = 0.0f;
  int j = 0;
  for (; j + PS_BLOCK <= n; j += PS_BLOCK)
    for (int k = 0; k < PS_BLOCK; k++)
      acc[k] += x[j + k];
  for (int k = 0; k < PS_BLOCK; k++)
    s += acc[k];
  for (; j < n; j++)
    s += x[j];
  return s;
}

static float row_sq_dev(const float *x, float m, int n)
{
  float acc[PS_BLOCK] = {0}, s = 0.0f;
  int j = 0;
  for (; j + PS_BLOCK <= n; j += PS_BLOCK)
    for (int k = 0; k < PS_BLOCK; k++) {
      float d = x[j + k] - m;
      acc[k] += d * d;
    }
  for (int k = 0; k < PS_BLOCK; k++)
    s += acc[k];
  for (; j < n; j++)
    s += (x[j] - m) * (x[j] - m);
  return s;
}

void ps_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y,
                          float *stats, int rows, int dim)
{
  g_return_if_fail(rows >= 0 && dim > 0);
  g_return_if_fail(rows == 0 || (x && gamma && beta && y && stats));
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim;
    float *yr = y + (size_t)r * dim;
    /* two passes: the variance is not a difference of squares */
    const float m = row_sum(xr, dim) / (float)dim;
    const float rstd = 1.0f / sqrtf(row_sq_dev(xr, m, dim) / (float)dim + PS_LAYERNORM_EPS);
    int j = 0;
    for (; j + PS_BLOCK <= dim; j += PS_BLOCK) {
      float blk[PS_BLOCK];
      for (int k = 0; k < PS_BLOCK; k++)
        blk[k] = (xr[j + k] - m) * rstd * gamma[j + k] + beta[j + k];
      memcpy(yr + j, blk, sizeof blk);
    }
    for (; j < dim; j++)
      yr[j] = (xr[j] - m) * rstd * gamma[j] + beta[j];
    stats[2 * (size_t)r] = m;
    stats[2 * (size_t)r + 1] = rstd;
  }
}

/* With xhat = (x - mean) rstd and g = dy gamma:
 * dx = rstd (g - mean(g) - xhat mean(g xhat)), dgamma += dy xhat,
 * dbeta += dy (the mean and variance depend on every x of the row). */
void ps_layernorm_backward(const float *x, const float *gamma, const float *stats,
                           const float *dy, float *dx, float *dgamma, float *dbeta, int rows,
                           int dim)
{
  g_return_if_fail(rows >= 0 && dim > 0);
  g_return_if_fail(rows == 0 || (x && gamma && stats && dy && dgamma && dbeta));
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * dim, *dyr = dy + (size_t)r * dim;
    const float m = stats[2 * (size_t)r], rstd = stats[2 * (size_t)r + 1];
    float acc_g[PS_BLOCK] = {0}, acc_gx[PS_BLOCK] = {0}, sum_g = 0.0f, sum_gx = 0.0f;
    int j = 0;
    for (; j + PS_BLOCK <= dim; j += PS_BLOCK) {
      float dgb[PS_BLOCK], dbb[PS_BLOCK];
      memcpy(dgb, dgamma + j, sizeof dgb);
      memcpy(dbb, dbeta + j, sizeof dbb);
      for (int k = 0; k < PS_BLOCK; k++) {
        float xhat = (xr[j + k] - m) * rstd, g = dyr[j + k] * gamma[j + k];
        dgb[k] += dyr[j + k] * xhat;
        dbb[k] += dyr[j + k];
        acc_g[k] += g;
        acc_gx[k] += g * xhat;
      }
      memcpy(dgamma + j, dgb, sizeof dgb);
      memcpy(dbeta + j, dbb, sizeof dbb);
    }
    for (int k = 0; k < PS_BLOCK; k++) {
      sum_g += acc_g[k];
      sum_gx += acc_gx[k];
    }
    for (; j < dim; j++) {
      float xhat = (xr[j] - m) * rstd, g = dyr[j] * gamma[j];
      dgamma[j] += dyr[j] * xhat;
      dbeta[j] += dyr[j];
      sum_g += g;
      sum_gx += g * xhat;
    }
    if (!dx)
      continue;
    const float mean_g = sum_g / (float)dim, mean_gx = sum_gx / (float)dim;
    float *dxr = dx + (size_t)r * dim;
    j = 0;
    for (; j + PS_BLOCK <= dim; j += PS_BLOCK) {
      float blk[PS_BLOCK];
      for (int k = 0; k < PS_BLOCK; k++) {
        float xhat = (xr[j + k] - m) * rstd;
        blk[k] = rstd * (dyr[j + k] * gamma[j + k] - mean_g - xhat * mean_gx);
      }
      memcpy(dxr + j, blk, sizeof blk);
    }
    for (; j < dim; j++) {
      float xhat = (xr[j] - m) * rstd;
      dxr[j] = rstd * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

/* ---- patch embedding --------------------------------------------------- */

int ps_patch_seq(const PsPatchShape *s)
{
  g_return_val_if_fail(s != NULL && s->patch > 0, 0);
  return (s->h / s->patch) * (s->w / s->patch);
}

size_t ps_patch_workspace(const PsPatchShape *s)
{
  g_return_val_if_fail(s != NULL, 0);
  return (size_t)s->batch * ps_patch_seq(s) * s->patch * s->patch * s->c;
}

/* Image <-> patch rows (batch seq, patch^2 c): row py of a patch is one
 * contiguous run of patch c floats in the image, at this offset. */
static size_t patch_run_offset(const PsPatchShape *s, int b, int gy, int gx, int py)
{
  return (((size_t)b * s->h + (size_t)gy * s->patch + py) * s->w + (size_t)gx * s->patch) *
         s->c;
}

static void patch_gather(const PsPatchShape *s, const float *image, float *cols)
{
  const size_t run = (size_t)s->patch * s->c;
  for (int b = 0; b < s->batch; b++)
    for (int gy = 0; gy < s->h / s->patch; gy++)
      for (int gx = 0; gx < s->w / s->patch; gx++)
        for (int py = 0; py < s->patch; py++, cols += run)
          memcpy(cols, image + patch_run_offset(s, b, gy, gx, py), run * sizeof *cols);
}

static void patch_scatter(const PsPatchShape *s, const float *cols, float *image)
{
  const size_t run = (size_t)s->patch * s->c;
  for (int b = 0; b < s->batch; b++)
    for (int gy = 0; gy < s->h / s->patch; gy++)
      for (int gx = 0; gx < s->w / s->patch; gx++)
        for (int py = 0; py < s->patch; py++, cols += run)
          memcpy(image + patch_run_offset(s, b, gy, gx, py), cols, run * sizeof *cols);
}

void ps_patch_forward(PsPrecision prec, const PsPatchShape *s, const float *x, const float *w,
                      const float *pos, const float *b, float *y, float *workspace)
{
  g_return_if_fail(s != NULL && s->patch > 0 && s->h % s->patch == 0 && s->w % s->patch == 0);
  g_return_if_fail(x && w && y && workspace);
  const int seq = ps_patch_seq(s), k = s->patch * s->patch * s->c, D = s->dim;
  const size_t rows = (size_t)s->batch * seq;
  patch_gather(s, x, workspace);
  gboolean start = b != NULL || pos != NULL;
  for (size_t r = 0; r < rows && start; r++) {
    float *yr = y + r * D;
    const float *pr = pos ? pos + (r % (size_t)seq) * D : NULL;
    for (int j = 0; j < D; j++)
      yr[j] = (b ? b[j] : 0.0f) + (pr ? pr[j] : 0.0f);
  }
  ps_gemm(prec, FALSE, FALSE, (int)rows, D, k, workspace, w, start, y);
}

void ps_patch_backward(PsPrecision prec, const PsPatchShape *s, const float *x, const float *w,
                       const float *dy, float *dx, float *dw, float *dpos, float *db,
                       float *workspace)
{
  g_return_if_fail(s != NULL && s->patch > 0 && s->h % s->patch == 0 && s->w % s->patch == 0);
  g_return_if_fail(x && w && dy && dw && workspace);
  const int seq = ps_patch_seq(s), k = s->patch * s->patch * s->c, D = s->dim;
  const size_t rows = (size_t)s->batch * seq;
  patch_gather(s, x, workspace);
  ps_gemm(prec, TRUE, FALSE, k, D, (int)rows, workspace, dy, TRUE, dw);
  if (db)
    sum_rows_into(dy, db, rows, D);
  if (dpos)
    for (int b = 0; b < s->batch; b++)
      add_into(dpos, dy + (size_t)b * seq * D, (size_t)seq * D);
  if (dx) {
    ps_gemm(prec, FALSE, TRUE, (int)rows, k, D, dy, w, FALSE, workspace);
    patch_scatter(s, workspace, dx);
  }
}

/* ---- optimizers -------------------------------------------------------- */

void ps_sgd_momentum_update(float *w, const float *g, float *velocity, size_t n, float lr,
                            float momentum)
{
  for (size_t i = 0; i < n; i++) {
    velocity[i] = momentum * velocity[i] + g[i];
    w[i] -= lr * velocity[i];
  }
}

void ps_adam_update(float *w, const float *g, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float epsilon, int64_t t)
{
  g_return_if_fail(t >= 1);
  /* Kingma and Ba, "Adam", ICLR 2015, Algorithm 1, with the bias
   * corrections computed once per step in double. */
  const float c1 = (float)(1.0 / (1.0 - pow(beta1, (double)t)));
  const float c2 = (float)(1.0 / (1.0 - pow(beta2, (double)t)));
  for (size_t i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    float mhat = m[i] * c1;
    float vhat = v[i] * c2;
    w[i] -= lr * mhat / (sqrtf(vhat) + epsilon);
  }
}

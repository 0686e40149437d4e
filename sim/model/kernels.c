/* kernels.c: float32 training kernels (GEMM through CBLAS, dense, element-
 * wise activations, softmax cross-entropy, im2col convolution, pooling,
 * optimizers).
 *
 * Invariant: every kernel is a pure function of its inputs, runs on one
 * thread and visits data in a fixed order, so the same inputs always give
 * bit-identical outputs.  Forward kernels and dx overwrite their outputs;
 * dw and db are only ever added to. */
#include "kernels.h"

#include <cblas.h>
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
  openblas_set_num_threads(1);
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

/* ---- GEMM -------------------------------------------------------------- */

void ps_gemm(PsPrecision prec, gboolean trans_a, gboolean trans_b, int m, int n, int k,
             const float *a, const float *b, gboolean accumulate, float *c)
{
  g_return_if_fail(m >= 0 && n >= 0 && k >= 0);
  if (m == 0 || n == 0)
    return;
  g_return_if_fail(c != NULL);
  if (k == 0) {
    if (!accumulate)
      memset(c, 0, (size_t)m * n * sizeof *c);
    return;
  }
  g_return_if_fail(a != NULL && b != NULL);

  float *copy = NULL;
  size_t na = (size_t)m * k, nb = (size_t)k * n;
  if (prec == PS_PRECISION_BF16) {
    copy = g_new(float, na + nb);
    ps_bf16_round_array(a, copy, na);
    ps_bf16_round_array(b, copy + na, nb);
    a = copy;
    b = copy + na;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, trans_a ? m : k, b,
              trans_b ? k : n, accumulate ? 1.0f : 0.0f, c, n);
  g_free(copy);
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

void ps_gelu_forward(const float *x, float *y, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    float u = PS_GELU_C * (v + PS_GELU_A * v * v * v);
    y[i] = 0.5f * v * (1.0f + tanhf(u));
  }
}

void ps_gelu_backward(const float *x, const float *dy, float *dx, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    float t = tanhf(PS_GELU_C * (v + PS_GELU_A * v * v * v));
    float du = PS_GELU_C * (1.0f + 3.0f * PS_GELU_A * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
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
  float *table = NULL;
  if (conv_uses_table(s)) {
    table = workspace + (size_t)chunk * conv_col_per_example(s);
    build_table(s, table);
  }
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
  float *table = NULL;
  if (conv_uses_table(s)) {
    table = workspace + (size_t)chunk * conv_col_per_example(s);
    build_table(s, table);
  }
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

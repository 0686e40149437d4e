/* kernels-decoder.c: the kernels a decoder-only language model adds to
 * kernels.c (kernels.h): RMS normalization, the SwiGLU feed-forward input
 * and the token embedding's gather and scatter-add.
 *
 * Invariant: as every kernel, a pure single-threaded function of its
 * inputs visiting data in a fixed order; forward outputs and dx are
 * overwritten, parameter gradients only ever added to. */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* ---- RMS normalization -------------------------------------------------- */

void ps_rmsnorm_forward(const float *x, const float *gain, float *y, float *stats, int rows,
                        int dim)
{
  g_return_if_fail(x && gain && y && stats && rows >= 0 && dim > 0);
  for (int i = 0; i < rows; i++) {
    const float *xr = x + (size_t)i * dim;
    float *yr = y + (size_t)i * dim;
    float sq = 0.0f;
    for (int j = 0; j < dim; j++)
      sq += xr[j] * xr[j];
    const float r = 1.0f / sqrtf(sq / (float)dim + PS_RMSNORM_EPS);
    stats[i] = r;
    for (int j = 0; j < dim; j++)
      yr[j] = gain[j] * (xr[j] * r);
  }
}

/* With r = (mean(x^2) + eps)^(-1/2): dgain_j += dy_j x_j r and
 * dx_j = r gain_j dy_j - x_j r^3 / dim sum_k gain_k dy_k x_k. */
void ps_rmsnorm_backward(const float *x, const float *gain, const float *stats,
                         const float *dy, float *dx, float *dgain, int rows, int dim)
{
  g_return_if_fail(x && gain && stats && dy && dgain && rows >= 0 && dim > 0);
  for (int i = 0; i < rows; i++) {
    const float *xr = x + (size_t)i * dim, *dyr = dy + (size_t)i * dim;
    const float r = stats[i];
    float dot = 0.0f;
    for (int j = 0; j < dim; j++) {
      dot += gain[j] * dyr[j] * xr[j];
      dgain[j] += dyr[j] * (xr[j] * r);
    }
    if (!dx)
      continue;
    float *dxr = dx + (size_t)i * dim;
    const float c = r * r * r * dot / (float)dim;
    for (int j = 0; j < dim; j++)
      dxr[j] = r * gain[j] * dyr[j] - xr[j] * c;
  }
}

/* ---- SwiGLU ------------------------------------------------------------- */

static inline float sigmoidf(float a)
{
  return 1.0f / (1.0f + expf(-a));
}

size_t ps_swiglu_workspace(int rows, int in, int units)
{
  (void)in;
  return 2 * (size_t)rows * units;
}

void ps_swiglu_forward(PsPrecision prec, PsGluGate act, const float *x, const float *w,
                       const float *b, float *y, float *saved, int rows, int in, int units)
{
  g_return_if_fail(x && w && y && saved && rows >= 0 && in > 0 && units > 0);
  const size_t n = (size_t)rows * units;
  float *gate = saved, *up = saved + n;
  ps_dense_forward(prec, x, w, b, gate, rows, in, units);
  ps_dense_forward(prec, x, w + (size_t)in * units, b ? b + units : NULL, up, rows, in, units);
  if (act == PS_GLU_GELU) {
    ps_gelu_forward(gate, y, n);
    for (size_t i = 0; i < n; i++)
      y[i] *= up[i];
    return;
  }
  for (size_t i = 0; i < n; i++)
    y[i] = gate[i] * sigmoidf(gate[i]) * up[i];
}

/* du = dy act(a), da = dy u act'(a): for silu act'(a) = s (1 + a (1 -
 * s)), s = sigmoid(a); for gelu ps_gelu_backward's derivative.  Then
 * both projections as dense layers, dx their sum. */
void ps_swiglu_backward(PsPrecision prec, PsGluGate act, const float *x, const float *w,
                        const float *saved, const float *dy, float *dx, float *dw, float *db,
                        float *workspace, int rows, int in, int units)
{
  g_return_if_fail(x && w && saved && dy && dw && workspace && rows >= 0 && in > 0 &&
                   units > 0);
  const size_t n = (size_t)rows * units, wn = (size_t)in * units;
  const float *gate = saved, *up = saved + n;
  float *dgate = workspace, *dup = workspace + n;
  if (act == PS_GLU_GELU) {
    ps_gelu_forward(gate, dup, n);
    for (size_t i = 0; i < n; i++) {
      dup[i] *= dy[i];
      dgate[i] = dy[i] * up[i];
    }
    ps_gelu_backward(gate, dgate, dgate, n);
  } else {
    for (size_t i = 0; i < n; i++) {
      const float a = gate[i], s = sigmoidf(a);
      dup[i] = dy[i] * (a * s);
      dgate[i] = dy[i] * up[i] * (s * (1.0f + a * (1.0f - s)));
    }
  }
  ps_dense_backward(prec, x, w, dgate, dx, dw, db, rows, in, units);
  ps_dense_backward(prec, x, w + wn, dup, NULL, dw + wn, db ? db + units : NULL, rows, in,
                    units);
  if (dx)
    ps_gemm(prec, FALSE, TRUE, rows, in, units, dup, w + wn, TRUE, dx);
}

/* ---- token embedding ---------------------------------------------------- */

/* The row of token r, or -1 (a programming error: ids are checked when
 * they are set). */
static long embedding_row(const float *ids, int r, int vocab)
{
  const float id = ids[r];
  g_return_val_if_fail(id >= 0.0f && id < (float)vocab && id == floorf(id), -1);
  return (long)id;
}

void ps_embedding_forward(const float *ids, const float *table, const float *pos, float *y,
                          int rows, int seq, int vocab, int dim)
{
  g_return_if_fail(ids && table && y && rows >= 0 && seq > 0 && vocab > 0 && dim > 0);
  for (int r = 0; r < rows; r++) {
    long id = embedding_row(ids, r, vocab);
    if (id < 0)
      return;
    const float *src = table + (size_t)id * dim;
    float *yr = y + (size_t)r * dim;
    if (!pos) {
      memcpy(yr, src, (size_t)dim * sizeof *yr);
      continue;
    }
    const float *pr = pos + (size_t)(r % seq) * dim;
    for (int j = 0; j < dim; j++)
      yr[j] = src[j] + pr[j];
  }
}

void ps_embedding_backward(const float *ids, const float *dy, float *dtable, float *dpos,
                           int rows, int seq, int vocab, int dim)
{
  g_return_if_fail(ids && dy && dtable && rows >= 0 && seq > 0 && vocab > 0 && dim > 0);
  for (int r = 0; r < rows; r++) {
    long id = embedding_row(ids, r, vocab);
    if (id < 0)
      return;
    const float *dyr = dy + (size_t)r * dim;
    float *dt = dtable + (size_t)id * dim;
    for (int j = 0; j < dim; j++)
      dt[j] += dyr[j];
    if (dpos) {
      float *dp = dpos + (size_t)(r % seq) * dim;
      for (int j = 0; j < dim; j++)
        dp[j] += dyr[j];
    }
  }
}

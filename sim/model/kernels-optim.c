/* kernels-optim.c: the layer-wise optimizers LARS and LAMB over one
 * layer's parameters, and the training batch normalization kernels whose
 * statistics may be reduced across replicas between their two phases.
 *
 * LARS (You, Gitman and Ginsburg, "Large Batch Training of Convolutional
 * Networks", arXiv:1708.03888, 2017, Algorithm 1): a local learning rate
 * eta ||w|| / (||g|| + wd ||w||) per layer, applied to g + wd w through
 * momentum.  LAMB (You et al., "Large Batch Optimization for Deep
 * Learning", ICLR 2020, Algorithm 2): Adam's moments give r =
 * mhat / (sqrt(vhat) + eps), u = r + wd w, and the step is lr ||w|| / ||u||
 * times u.  Both take the ratio as 1 where a norm is zero (as the MLPerf
 * reference implementations do), and a layer that is not adapted (biases,
 * normalization gains) gets the plain momentum or Adam step without weight
 * decay.  The norms are real reductions over the layer's range,
 * accumulated in double in index order.
 *
 * Batch normalization (Ioffe and Szegedy, ICML 2015) over rows x C, the
 * statistics per channel over the rows: phase one writes each channel's
 * mean and mean square of this device's rows divided by the group size,
 * so the sum over a group of equal shares is the group batch's moments;
 * phase two normalizes with them.  Backward likewise: the means of dy and
 * dy xhat, then dx.
 * Invariant: every function is a pure function of its arguments, one
 * summation order. */
#include "model/kernels.h"

#include <math.h>

double ps_sum_squares(const float *x, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * (double)x[i];
  return s;
}

void ps_lars_apply(float *w, const float *g, float *velocity, size_t n, float lr,
                   float momentum, float eta, float weight_decay, double wn, double gn)
{
  double ratio = wn > 0 && gn > 0 ? eta * wn / (gn + weight_decay * wn) : 1.0;
  const float scaled = (float)(lr * ratio);
  for (size_t i = 0; i < n; i++) {
    velocity[i] = momentum * velocity[i] + scaled * (g[i] + weight_decay * w[i]);
    w[i] -= velocity[i];
  }
}

void ps_lars_update(float *w, const float *g, float *velocity, size_t n, float lr,
                    float momentum, float eta, float weight_decay, gboolean adapt)
{
  if (!adapt) {
    ps_sgd_momentum_update(w, g, velocity, n, lr, momentum);
    return;
  }
  ps_lars_apply(w, g, velocity, n, lr, momentum, eta, weight_decay,
                sqrt(ps_sum_squares(w, n)), sqrt(ps_sum_squares(g, n)));
}

/* Adam's bias corrections at step t: 1 / (1 - beta^t). */
static float bias_correction(float beta, int64_t t)
{
  return (float)(1.0 / (1.0 - pow(beta, (double)t)));
}

/* The update u of element i from its moments. */
static inline float lamb_u(const PsLambStep *s, float w, float m, float v)
{
  return m * s->c1 / (sqrtf(v * s->c2) + s->epsilon) + s->wd * w;
}

PsLambStep ps_lamb_step(float beta1, float beta2, float epsilon, float weight_decay,
                        gboolean adapt, int64_t t)
{
  PsLambStep s = {beta1, beta2, epsilon, adapt ? weight_decay : 0.0f, 1.0f, 1.0f};
  g_return_val_if_fail(t >= 1, s);
  s.c1 = bias_correction(beta1, t);
  s.c2 = bias_correction(beta2, t);
  return s;
}

double ps_lamb_moments(const PsLambStep *s, const float *w, const float *g, float *m, float *v,
                       size_t n)
{
  double un = 0.0;
  for (size_t i = 0; i < n; i++) {
    m[i] = s->beta1 * m[i] + (1.0f - s->beta1) * g[i];
    v[i] = s->beta2 * v[i] + (1.0f - s->beta2) * g[i] * g[i];
    float u = lamb_u(s, w[i], m[i], v[i]);
    un += (double)u * (double)u;
  }
  return un;
}

void ps_lamb_apply(const PsLambStep *s, float *w, const float *m, const float *v, size_t n,
                   float lr, gboolean adapt, double wn, double un)
{
  const float step = (float)(adapt && wn > 0 && un > 0 ? lr * wn / un : lr);
  for (size_t i = 0; i < n; i++)
    w[i] -= step * lamb_u(s, w[i], m[i], v[i]);
}

void ps_lamb_update(float *w, const float *g, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float epsilon, float weight_decay,
                    gboolean adapt, int64_t t)
{
  g_return_if_fail(t >= 1);
  PsLambStep s = ps_lamb_step(beta1, beta2, epsilon, weight_decay, adapt, t);
  /* pass one: the moments, and the norm of the update; pass two: the
   * update, recomputed from the moments */
  double un = sqrt(ps_lamb_moments(&s, w, g, m, v, n));
  ps_lamb_apply(&s, w, m, v, n, lr, adapt, sqrt(ps_sum_squares(w, n)), un);
}

/* ---- batch normalization ------------------------------------------------ */

void ps_batchnorm_moments(const float *x, int rows, int C, int group, float *moments)
{
  g_return_if_fail(rows >= 0 && C > 0 && group >= 1 && moments);
  double div = (double)MAX(rows, 1) * group;
  for (int c = 0; c < C; c++) {
    double s = 0.0, s2 = 0.0;
    for (int r = 0; r < rows; r++) {
      double v = x[(size_t)r * C + c];
      s += v;
      s2 += v * v;
    }
    moments[c] = (float)(s / div);
    moments[C + c] = (float)(s2 / div);
  }
}

void ps_batchnorm_normalize(const float *x, const float *gamma, const float *beta,
                            const float *moments, float *y, float *stats, int rows, int C)
{
  g_return_if_fail(rows >= 0 && C > 0);
  for (int c = 0; c < C; c++) {
    float mean = moments[c];
    float var = fmaxf(moments[C + c] - mean * mean, 0.0f);
    stats[c] = mean;
    stats[C + c] = 1.0f / sqrtf(var + PS_BATCHNORM_EPS);
  }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)r * C + c;
      y[i] = (x[i] - stats[c]) * stats[C + c] * gamma[c] + beta[c];
    }
}

void ps_batchnorm_grad_moments(const float *x, const float *stats, const float *dy, int rows,
                               int C, int group, float *dgamma, float *dbeta, float *moments)
{
  g_return_if_fail(rows >= 0 && C > 0 && group >= 1);
  double div = (double)MAX(rows, 1) * group;
  for (int c = 0; c < C; c++) {
    double s = 0.0, sx = 0.0;
    for (int r = 0; r < rows; r++) {
      size_t i = (size_t)r * C + c;
      double xhat = ((double)x[i] - stats[c]) * stats[C + c];
      s += dy[i];
      sx += (double)dy[i] * xhat;
    }
    dbeta[c] += (float)s;
    dgamma[c] += (float)sx;
    moments[c] = (float)(s / div);
    moments[C + c] = (float)(sx / div);
  }
}

void ps_batchnorm_input_grad(const float *x, const float *gamma, const float *stats,
                             const float *moments, const float *dy, float *dx, int rows, int C)
{
  g_return_if_fail(rows >= 0 && C > 0);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)r * C + c;
      float rstd = stats[C + c], xhat = (x[i] - stats[c]) * rstd;
      dx[i] = gamma[c] * rstd * (dy[i] - moments[c] - xhat * moments[C + c]);
    }
}

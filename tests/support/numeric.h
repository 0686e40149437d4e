/* numeric.h: what the numeric-kernel test binaries share: random fills,
 * float/double copies, the closeness check and central finite
 * differences (see test_kernels.c for the tolerances and why).
 * Invariant: header-only, every helper static inline, so a binary that
 * uses a few of them compiles without warnings. */
#ifndef PS_TEST_SUPPORT_NUMERIC_H
#define PS_TEST_SUPPORT_NUMERIC_H

#include <glib.h>
#include <math.h>

#define FD_H 1e-6
#define RTOL 1e-4
#define ATOL_FRAC 1e-5

/* ---- helpers ----------------------------------------------------------- */

static inline void fill_uniform(GRand *r, float *a, size_t n, double lo, double hi)
{
  for (size_t i = 0; i < n; i++)
    a[i] = (float)g_rand_double_range(r, lo, hi);
}

static inline double *to_double(const float *a, size_t n)
{
  double *d = g_new(double, n);
  for (size_t i = 0; i < n; i++)
    d[i] = a[i];
  return d;
}

/* The objective sum_i r[i] y[i] the finite-difference checks take the
 * gradient of, in index order. */
static inline double weighted_sum(const double *r, const double *y, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += r[i] * y[i];
  return s;
}

static inline double max_abs(const double *a, size_t n)
{
  double m = 0.0;
  for (size_t i = 0; i < n; i++)
    m = MAX(m, fabs(a[i]));
  return m;
}

/* Asserts got ~ want elementwise within RTOL |want| + ATOL_FRAC max|want|,
 * after scaling want by `scale`. */
static inline void assert_close(const char *what, const float *got, const double *want,
                                size_t n, double scale)
{
  double ref_max = fabs(scale) * max_abs(want, n);
  g_assert_cmpfloat(ref_max, >, 0.0);
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; i++) {
    double w = scale * want[i];
    double excess = fabs(got[i] - w) - (RTOL * fabs(w) + ATOL_FRAC * ref_max);
    if (i == 0 || excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  if (worst > 0.0)
    g_test_message("%s: entry %zu got %.9g want %.9g", what, worst_i, got[worst_i],
                   scale * want[worst_i]);
  g_assert_cmpfloat(worst, <=, 0.0);
}

/* Central differences of f over every entry of v. */
typedef double (*ObjFn)(const double *v, const void *ctx);

static inline void fd_gradient(ObjFn f, const void *ctx, double *v, size_t n, double *g)
{
  for (size_t i = 0; i < n; i++) {
    double save = v[i];
    v[i] = save + FD_H;
    double fp = f(v, ctx);
    v[i] = save - FD_H;
    double fm = f(v, ctx);
    v[i] = save;
    g[i] = (fp - fm) / (2.0 * FD_H);
  }
}

/* bfloat16 reference for normal floats: scale the significand to [128,
 * 256) (8 bits) and round it with the FPU's default ties-to-even
 * nearbyint. */
static inline float bf16_reference(float x)
{
  int e;
  double f = frexp((double)x, &e); /* |f| in [0.5, 1) */
  return (float)ldexp(nearbyint(ldexp(f, 8)), e - 8);
}

#endif

/* gemm.c: the library's own GEMM (ps_gemm, declared in kernels.h), through
 * which every matrix product of the kernels goes; no BLAS library.
 *
 * Invariant: each C(i, j) is summed in one order, p = 0 to k - 1, whatever
 * the CPU, so the same inputs give the same bits on every machine. */
#include "kernels.h"

#include <string.h>

/* The library's own GEMM, the same bits whatever BLAS or CPU is there:
 * C(i, j) is the float sum over p = 0, 1, ..., k - 1 in that order of
 * A(i, p) x B(p, j), each product and sum rounded on its own (no FMA:
 * -std=c11 keeps contraction off), then added to C when accumulating; the
 * vector width decides how many sums run side by side, never their order.
 * A and B are packed into p-major panels of GEMM_MR rows and GEMM_NR
 * columns (bf16-rounded for PS_PRECISION_BF16, zero past the edge), and
 * one tile of C is summed at a time in a local array the compiler keeps in
 * vector registers; on x86-64 with an AVX2 clone, picked at load time. */
#define GEMM_MR 8
#define GEMM_NR 8

/* Rounds a packed panel's n floats to bfloat16 in place (ps_bf16_round,
 * inlined for the compiler to vectorize). */
static void gemm_round_panel(float *x, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
      u = (u | 0x00400000u) & 0xffff0000u;
    else
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x[i], &u, sizeof u);
  }
}

/* A panel of `width` lines (A's rows, or B's columns) starting at line
 * `first`, p-major: panel[p * width + x] = line first + x's element p, for
 * p < k; lines past `count` are zero.  In src, element p of line x is at
 * p * ld + x when lines run along memory (`along`), else at x * ld + p. */
static void gemm_pack(PsPrecision prec, const float *src, gboolean along, size_t ld, int first,
                      int count, int k, int width, float *panel)
{
  int h = MIN(width, count - first);
  if (h < width)
    memset(panel, 0, (size_t)k * width * sizeof *panel);
  if (along)
    for (int p = 0; p < k; p++)
      memcpy(panel + (size_t)p * width, src + (size_t)p * ld + first, (size_t)h * sizeof *panel);
  else
    for (int x = 0; x < h; x++) {
      const float *line = src + (size_t)(first + x) * ld;
      for (int p = 0; p < k; p++)
        panel[(size_t)p * width + x] = line[p];
    }
  if (prec == PS_PRECISION_BF16)
    gemm_round_panel(panel, (size_t)k * width);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GEMM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GEMM_CLONES
#endif

/* AddressSanitizer leaves the tile alone: it reads only the two packed
 * panels ps_gemm allocates (k x GEMM_MR and k x GEMM_NR floats) and
 * gemm_pack writes in full, both instrumented, and writes only its own
 * out; instrumented, its sums leave the registers for memory and the
 * sanitized suites spend most of their time here (make check-asan). */
#if defined(__GNUC__)
#define GEMM_NO_ASAN __attribute__((no_sanitize("address,undefined")))
#else
#define GEMM_NO_ASAN
#endif

/* One tile: t(r, j) = sum over p, in order, of ap(p, r) bp(p, j). */
GEMM_CLONES GEMM_NO_ASAN static void gemm_tile(int k, const float *ap, const float *bp,
                                  float out[GEMM_MR][GEMM_NR])
{
#ifdef __clang__
#pragma clang fp contract(off) /* clang would fuse by default; gcc -std=c11 does not */
#endif
  float t[GEMM_MR][GEMM_NR] = {{0}};
  for (int p = 0; p < k; p++) {
    const float *x = ap + (size_t)p * GEMM_MR, *y = bp + (size_t)p * GEMM_NR;
    for (int r = 0; r < GEMM_MR; r++)
      for (int j = 0; j < GEMM_NR; j++)
        t[r][j] += x[r] * y[j];
  }
  memcpy(out, t, sizeof t);
}

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

  int panels_b = (n + GEMM_NR - 1) / GEMM_NR;
  float *bp = g_new(float, (size_t)panels_b * k * GEMM_NR);
  float *ap = g_new(float, (size_t)k * GEMM_MR);
  for (int q = 0; q < panels_b; q++)
    gemm_pack(prec, b, !trans_b, trans_b ? (size_t)k : (size_t)n, q * GEMM_NR, n, k, GEMM_NR,
              bp + (size_t)q * k * GEMM_NR); /* B is k x n, or n x k transposed */
  for (int i0 = 0; i0 < m; i0 += GEMM_MR) {
    int h = MIN(GEMM_MR, m - i0);
    gemm_pack(prec, a, trans_a, trans_a ? (size_t)m : (size_t)k, i0, m, k, GEMM_MR, ap);
    for (int q = 0; q < panels_b; q++) {
      int j0 = q * GEMM_NR, w = MIN(GEMM_NR, n - j0);
      float t[GEMM_MR][GEMM_NR];
      gemm_tile(k, ap, bp + (size_t)q * k * GEMM_NR, t);
      for (int r = 0; r < h; r++) {
        float *row = c + (size_t)(i0 + r) * n + j0;
        if (accumulate)
          for (int j = 0; j < w; j++)
            row[j] += t[r][j];
        else
          memcpy(row, t[r], (size_t)w * sizeof *row);
      }
    }
  }
  g_free(ap);
  g_free(bp);
}

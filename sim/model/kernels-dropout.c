/* kernels-dropout.c: the counter-based dropout mask and its application
 * (kernels.h).
 *
 * The draw of element `elem` of example `x` is the elem-th output of a
 * SplitMix64 stream (Steele, Lea and Flood, "Fast Splittable
 * Pseudorandom Number Generators", OOPSLA 2014: a state advanced by the
 * golden-ratio increment, each output a mix of the state) whose start is
 * the mix of (seed, step, layer, x) folded in turn; the top 24 bits of
 * the output are compared with rate 2^24.  Invariant: a pure function of
 * (key, example, element, rate): no state, so forward, a recomputation
 * and backward see one mask, and so do all devices holding the example. */
#include "kernels.h"

#include <math.h>

/* SplitMix64's increment and output mix (Steele et al. 2014, figure 1;
 * the mix constants are the "Mix13" variant of Stafford's finalizers that
 * java.util.SplittableRandom adopted). */
#define GOLDEN_GAMMA UINT64_C(0x9e3779b97f4a7c15)

static inline uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* The stream's start for example e of the key's batch. */
static uint64_t example_state(const PsDropoutKey *key, int64_t e)
{
  uint64_t h = mix64(key->seed + GOLDEN_GAMMA);
  h = mix64(h ^ (uint64_t)key->step);
  h = mix64(h ^ (uint64_t)key->layer);
  return mix64(h ^ (uint64_t)(key->first + e));
}

/* Elements whose 24-bit draw is below this are dropped. */
static uint32_t threshold(float rate)
{
  return (uint32_t)llround((double)rate * (double)(1u << 24));
}

static inline gboolean kept(uint64_t state, uint64_t elem, uint32_t thr)
{
  return (uint32_t)(mix64(state + (elem + 1) * GOLDEN_GAMMA) >> 40) >= thr;
}

gboolean ps_dropout_keeps(const PsDropoutKey *key, int64_t e, uint64_t elem, float rate)
{
  g_return_val_if_fail(key != NULL && rate >= 0.0f && rate < 1.0f, TRUE);
  return kept(example_state(key, e), elem, threshold(rate));
}

void ps_dropout_row(const PsDropoutKey *key, float rate, int64_t e, uint64_t off,
                    const float *x, float *y, size_t n)
{
  g_return_if_fail(key != NULL && rate >= 0.0f && rate < 1.0f && x && y);
  const uint64_t st = example_state(key, e);
  const uint32_t thr = threshold(rate);
  const float scale = (float)(1.0 / (1.0 - (double)rate));
  for (size_t i = 0; i < n; i++)
    y[i] = kept(st, off + i, thr) ? x[i] * scale : 0.0f;
}

void ps_dropout_apply(const PsDropoutKey *key, float rate, const float *x, float *y, int batch,
                      size_t per)
{
  g_return_if_fail(key != NULL && x != NULL && y != NULL && batch >= 0);
  for (int e = 0; e < batch; e++)
    ps_dropout_row(key, rate, e, 0, x + (size_t)e * per, y + (size_t)e * per, per);
}

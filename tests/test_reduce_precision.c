/* test_reduce_precision.c: gradients reduced in bf16 (elem_bytes 2 on the
 * wire, strategy.reduce_precision) against independent references.
 *
 * Collectives with float buffers:
 * - a ring all-reduce over 4 members on a bf16 wire equals, bit for bit, a
 *   plain loop that adds in the ring's order (segment q starts at member
 *   q+1) rounding each contribution and each partial sum to bf16; for chunk
 *   sizes that split the elements evenly and that do not (odd bytes);
 * - every member ends identical and every element is a bf16 value;
 * - the same inputs on an f32 wire give the f32 plain loop bit for bit, and
 *   the bf16 result differs from it (the rounding is real);
 * - the torus algorithm on a 2x2 torus and a bf16 reduce-scatter stay
 *   within (n-1) 2^-8 sum|x| of the double sum, in bf16 values.
 * Strategies:
 * - reduce_precision "bf16" gives the gradients' reductions elem_bytes 2
 *   (replicate, replicate with weight-update sharding whose weight
 *   all-gathers stay at 4, pipeline, shard), "f32" and the default 4; a bad
 *   value is an error naming strategy.reduce_precision;
 * - the update and a clip of the reduced gradients read them at the
 *   reduction's 2 bytes (XLA fuses the conversion back to float32 into
 *   them): Adam's 28 bytes a weight become 26, SGD's 20 become 18, the
 *   norm's 4 become 2 (replicate, weight-update sharding, shard with an
 *   fsdp or a data axis); with one replica nothing is reduced and nothing
 *   moves;
 * - a numeric replicate run with bf16 reduction trains (finite loss) and its
 *   weights differ from the f32 run's. */
#include "collectives/collective.h"
#include "model/kernels.h"
#include "strategy/strategy.h"
#include "support/experiment.h"
#include "support/network.h"

#include <math.h>
#include <string.h>

static void on_done(void *ctx, int member, ps_time_t t)
{
  (void)member;
  (void)t;
  (*(int *)ctx)++;
}

/* One round of op over every device of spec with buffers buf[m]. */
static void run_numeric(const char *spec, int64_t chunk, PsCollOp op, const char *algo,
                        int elem_bytes, float **buf, int64_t count)
{
  NetFix f;
  netfix_init(&f, shorthand_topology(spec, NULL), chunk);
  int n = ps_network_devices(f.net);
  int *devs = g_new(int, n);
  for (int i = 0; i < n; i++)
    devs[i] = i;
  PsCollSpec s = {op, algo, devs, n, count, elem_bytes, 0};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(f.net, &s, &error);
  g_assert_no_error(error);
  int done = 0;
  for (int m = 0; m < n; m++)
    ps_collective_arrive(c, m, buf[m], on_done, &done);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(done, ==, n);
  ps_collective_free(c);
  g_free(devs);
  netfix_clear(&f);
}

/* Inputs with more mantissa than bf16 keeps, so rounding shows. */
static float **inputs(int n, int64_t count, guint32 seed)
{
  GRand *r = g_rand_new_with_seed(seed);
  float **x = g_new(float *, n);
  for (int m = 0; m < n; m++) {
    x[m] = g_new(float, count);
    for (int64_t e = 0; e < count; e++)
      x[m][e] = (float)g_rand_double_range(r, -3.0, 3.0);
  }
  g_rand_free(r);
  return x;
}

static float **copies(float **x, int n, int64_t count)
{
  float **b = g_new(float *, n);
  for (int m = 0; m < n; m++)
    b[m] = g_memdup2(x[m], (size_t)count * sizeof(float));
  return b;
}

static void free_bufs(float **b, int n)
{
  for (int m = 0; m < n; m++)
    g_free(b[m]);
  g_free(b);
}

/* The ring's sum of element e in segment q, in its order, rounding each
 * contribution and each partial sum to bf16 when `bf16`. */
static float ring_loop(float **x, int n, int q, int64_t e, gboolean bf16)
{
  float acc = x[(q + 1) % n][e];
  if (bf16)
    acc = ps_bf16_round(acc);
  for (int k = 2; k <= n; k++) {
    float v = x[(q + k) % n][e];
    acc = bf16 ? ps_bf16_round(acc + ps_bf16_round(v)) : acc + v;
  }
  return acc;
}

static void check_ring(int64_t chunk, gboolean bf16, int64_t *n_differ_from_f32)
{
  const int N = 4;
  const int64_t count = 400;
  float **x = inputs(N, count, 5);
  float **b = copies(x, N, count);
  run_numeric("ring:4", chunk, PS_COLL_ALL_REDUCE, "ring", bf16 ? 2 : 4, b, count);
  for (int m = 1; m < N; m++)
    g_assert_cmpmem(b[m], count * sizeof(float), b[0], count * sizeof(float));
  for (int q = 0; q < N; q++)
    for (int64_t e = count * q / N; e < count * (q + 1) / N; e++) {
      float want = ring_loop(x, N, q, e, bf16);
      if (memcmp(&want, &b[0][e], sizeof want) != 0)
        g_error("chunk %" G_GINT64_FORMAT " %s: element %" G_GINT64_FORMAT
                ": %.9g, plain loop %.9g", chunk, bf16 ? "bf16" : "f32", e,
                (double)b[0][e], (double)want);
      if (bf16)
        g_assert_cmpfloat(ps_bf16_round(b[0][e]), ==, b[0][e]);
      if (n_differ_from_f32)
        *n_differ_from_f32 += ring_loop(x, N, q, e, FALSE) != b[0][e];
    }
  free_bufs(x, N);
  free_bufs(b, N);
}

static void test_ring_bf16_plain_loop(void)
{
  int64_t differ = 0;
  check_ring(64, TRUE, &differ);  /* 32 bf16 elements a chunk */
  check_ring(63, TRUE, NULL);     /* chunks that split an element */
  check_ring(4096, TRUE, NULL);   /* one chunk a message */
  g_test_message("bf16 ring: %" G_GINT64_FORMAT " of 400 sums differ from f32's", differ);
  g_assert_cmpint(differ, >, 200);
}

static void test_ring_f32_unchanged(void)
{
  check_ring(64, FALSE, NULL);
  check_ring(63, FALSE, NULL);
}

/* |r - sum| <= (n-1) 2^-8 sum|x| (each of n-1 roundings of a partial sum
 * and each contribution's, relative 2^-9, against sum|x|), in bf16 values. */
static void check_bf16_bound(float **x, int n, const float *r, int64_t lo, int64_t hi)
{
  for (int64_t e = lo; e < hi; e++) {
    double s = 0, a = 0;
    for (int m = 0; m < n; m++) {
      s += x[m][e];
      a += fabs(x[m][e]);
    }
    g_assert_cmpfloat(fabs(r[e] - s), <=, n * ldexp(1.0, -8) * a);
    g_assert_cmpfloat(ps_bf16_round(r[e]), ==, r[e]);
  }
}

static void test_torus_and_reduce_scatter(void)
{
  const int64_t count = 256;
  float **x = inputs(4, count, 9);
  float **b = copies(x, 4, count);
  run_numeric("torus:2x2", 100, PS_COLL_ALL_REDUCE, "torus", 2, b, count);
  for (int m = 0; m < 4; m++)
    check_bf16_bound(x, 4, b[m], 0, count);
  free_bufs(b, 4);
  b = copies(x, 4, count);
  run_numeric("ring:4", 64, PS_COLL_REDUCE_SCATTER, "ring", 2, b, count);
  for (int m = 0; m < 4; m++) {
    check_bf16_bound(x, 4, b[m], count * m / 4, count * (m + 1) / 4);
  }
  free_bufs(b, 4);
  free_bufs(x, 4);
}

/* ---- strategies ------------------------------------------------------- */

/* elem_bytes of the plan's gradient reductions and of its weights'
 * collectives (-1: none) for experiment path with the overrides. */
static void plan_bytes(const char *path, const char *const *ov, int *reduce, int *other)
{
  PsExperiment *e = experiment_load(path, ov);
  GError *error = NULL;
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  *reduce = *other = -1;
  for (int c = 0; c < p->n_colls; c++) {
    const PsPlanColl *pc = &p->colls[c];
    gboolean red = pc->buffer == PS_BUFFER_GRADS && pc->op != PS_COLL_ALL_GATHER;
    if (!red && pc->buffer != PS_BUFFER_PARAMS)
      continue; /* activations: the step's precision */
    int *slot = red ? reduce : other;
    g_assert_true(*slot == -1 || *slot == pc->elem_bytes);
    *slot = pc->elem_bytes;
  }
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_plan_elem_bytes(void)
{
  const char *exps = "experiments/";
  struct {
    const char *file;
    const char *extra;
  } cases[] = {{"default.json", NULL},
               {"default.json", "strategy.weight_update_sharding=true"},
               {"vit-pipeline.json", NULL},
               {"shard-bert-large.json", NULL}};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *path = g_strconcat(exps, cases[i].file, NULL);
    const char *prec[] = {NULL, "strategy.reduce_precision=f32",
                          "strategy.reduce_precision=bf16"};
    for (int k = 0; k < 3; k++) {
      const char *ov[] = {cases[i].extra ? cases[i].extra : prec[k],
                          cases[i].extra ? prec[k] : NULL, NULL};
      int reduce, other;
      plan_bytes(path, ov, &reduce, &other);
      g_test_message("%s %s %s: reduce %d, other %d", cases[i].file,
                     cases[i].extra ? cases[i].extra : "", prec[k] ? prec[k] : "", reduce,
                     other);
      g_assert_cmpint(reduce, ==, k == 2 ? 2 : 4);
      if (cases[i].extra) /* the weights' all-gathers */
        g_assert_cmpint(other, ==, 4);
    }
  }
}

/* Device 0's HBM bytes of its UPDATE and of its CLIP ops. */
static void op_bytes(const char *path, const char *const *ov, double *update, double *clip)
{
  PsExperiment *e = experiment_load(path, ov);
  GError *error = NULL;
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  const PsProgram *pr = ps_plan_program(p, 0);
  *update = *clip = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind == PS_OP_UPDATE)
      *update += pr->ops[i].hbm_bytes;
    else if (pr->ops[i].kind == PS_OP_CLIP)
      *clip += pr->ops[i].hbm_bytes;
  }
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_update_reads(void)
{
  struct {
    const char *file, *extra;
    double ratio; /* the update's bytes with bf16 reduction over f32's */
  } cases[] = {
      {"default.json", "optimizer.kind=adam", 26.0 / 28.0},
      {"default.json", "optimizer.kind=sgd", 18.0 / 20.0},
      {"default.json", "strategy.replicas=1", 1.0},
      {"shard-bert-large.json", "optimizer.kind=adam", 26.0 / 28.0},
      {"shard-bert-large.json", "strategy.mesh.fsdp=1", 26.0 / 28.0}, /* data 8 */
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++)
    for (int wus = 0; wus < 2; wus++) {
      if (wus && strstr(cases[i].file, "shard"))
        continue;
      g_autofree char *path = g_strconcat("experiments/", cases[i].file, NULL);
      const char *sharding = wus ? "strategy.weight_update_sharding=true" : "steps=1";
      const char *ov32[] = {cases[i].extra, sharding, "optimizer.clip_norm=1",
                            "optimizer.clip_before_reduce=false", NULL};
      const char *ov16[] = {cases[i].extra, sharding, "optimizer.clip_norm=1",
                            "optimizer.clip_before_reduce=false",
                            "strategy.reduce_precision=bf16", NULL};
      double u32, c32, u16, c16;
      op_bytes(path, ov32, &u32, &c32);
      op_bytes(path, ov16, &u16, &c16);
      g_test_message("%s %s %s: update %.0f -> %.0f bytes, clip %.0f -> %.0f", cases[i].file,
                     cases[i].extra, sharding, u32, u16, c32, c16);
      g_assert_cmpfloat(u32, >, 0);
      g_assert_cmpfloat(c32, >, 0);
      g_assert_cmpfloat(fabs(u16 - u32 * cases[i].ratio), <=, 1e-9 * u32);
      g_assert_cmpfloat(fabs(c16 - c32 * (cases[i].ratio < 1 ? 0.5 : 1.0)), <=, 1e-9 * c32);
    }
}

static void test_bad_value(void)
{
  GError *error = NULL;
  const char *ov[] = {"strategy.reduce_precision=fp8", NULL};
  PsExperiment *e = ps_experiment_load("experiments/default.json", ov, &error);
  g_assert_null(e);
  g_assert_nonnull(error);
  g_assert_nonnull(strstr(error->message, "strategy.reduce_precision"));
  g_assert_nonnull(strstr(error->message, "bf16"));
  g_error_free(error);
}

static void test_numeric_run(void)
{
  const char *path = "experiments/default.json";
  const char *f32[] = {"steps=3", "epochs=null", "steps_per_run=1", "numerics.evaluate=false",
                       NULL};
  const char *bf16[] = {"steps=3", "epochs=null", "steps_per_run=1", "numerics.evaluate=false",
                        "strategy.reduce_precision=bf16", NULL};
  PsExperiment *a = experiment_load(path, f32);
  PsExperiment *b = experiment_load(path, bf16);
  PsSummary sa = experiment_run(a), sb = experiment_run(b);
  g_assert_nonnull(sa.params);
  g_assert_nonnull(sb.params);
  int64_t n = a->model->params, differ = 0;
  for (int64_t i = 0; i < n; i++) {
    g_assert_true(isfinite(sb.params[i]));
    differ += sa.params[i] != sb.params[i];
  }
  g_test_message("bf16 reduction: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                 " weights differ from f32's after 3 steps", differ, n);
  g_assert_cmpint(differ, >, n / 10);
  ps_summary_clear(&sa);
  ps_summary_clear(&sb);
  ps_experiment_free(a);
  ps_experiment_free(b);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/reduce-precision/ring/bf16-plain-loop", test_ring_bf16_plain_loop);
  g_test_add_func("/reduce-precision/ring/f32-unchanged", test_ring_f32_unchanged);
  g_test_add_func("/reduce-precision/torus-and-reduce-scatter", test_torus_and_reduce_scatter);
  g_test_add_func("/reduce-precision/plan-elem-bytes", test_plan_elem_bytes);
  g_test_add_func("/reduce-precision/update-reads", test_update_reads);
  g_test_add_func("/reduce-precision/bad-value", test_bad_value);
  g_test_add_func("/reduce-precision/numeric-run", test_numeric_run);
  return g_test_run();
}

/* test_pipeline.c: the pipeline strategy (strategy/pipeline.c) and its
 * partitioners (strategy/partition.c).
 *
 * - /pipeline/partition/optimal: on random unit costs the optimal
 *   partition's slowest stage equals a brute-force search's, with every
 *   stage non-empty;
 * - /pipeline/partition/seed: the seed's rule (unit i to stage
 *   min(floor(c_i K), K - 1), c_i the cost fraction up to and including i)
 *   on hand-worked cases, including one that leaves a stage empty;
 * - /pipeline/partition/residual: a stage never starts inside a residual
 *   block; a given partition that would is refused naming the layer;
 * - /pipeline/placement: neighbouring stages sit on one chip or on
 *   neighbouring chips (one ICI hop), on v3-32, v4-64 and v4-128;
 * - /pipeline/plans-valid: plans for many shapes (M < K, M = 1, K = 1,
 *   odd K, hybrid, both schedules, remat, weight-update sharding) pass
 *   ps_plan_validate and have M forwards and M backwards per stage;
 * - /pipeline/numerics-match-full-batch: after one SGD step, the weights
 *   of GPipe, 1F1B, re-materialized and hybrid runs equal those of one
 *   device on the whole batch within the float bound derived below;
 * - /pipeline/bubble: with equal stages and negligible communication, the
 *   summary's pipeline_bubble is (K - 1) / (M + K - 1) of the step within
 *   1% (relative), for both schedules;
 * - /pipeline/loop-drain: ResNet-50 in 4 stages x 8 micro-batches on a
 *   v3-8, steps_per_run 1 and 3: `host` per step is loop_overhead_s /
 *   steps_per_run (the plan has no host work), all of it the host loop;
 *   the stages' wait for each other at a loop's end is pipeline_bubble;
 * - /pipeline/single-loop: all steps in one device loop (steps <=
 *   steps_per_run), 1 and 3 steps: the step time is the simulated time
 *   over the steps (the first stage's drain after the last stages are done
 *   counted, though no next step waits for it), within 1% for 1 and 3
 *   steps, and the reporting stage's wait at the end is in its bubble, so
 *   the breakdown still sums to the step; and halving the chips' peak
 *   FLOPs never makes that step faster (when the busiest stage moved, it
 *   did: its own last op ends before the slice's step does);
 * - /pipeline/1f1b-memory: from the run's HBM counter, GPipe holds M
 *   micro-batches of activations and 1F1B exactly K;
 * - /pipeline/errors: a stage over HBM is named with the advice; a batch
 *   not divisible by micro-batches and too many stages are clear errors.
 *
 * The bound of numerics-match-full-batch.  u = 2^-24, gamma(n) = n u /
 * (1 - n u) (Higham, "Accuracy and Stability of Numerical Algorithms",
 * 3.1): any float sum of n terms is within gamma(n) S of the exact sum, S
 * the sum of the terms' magnitudes, whatever the order.  A dense layer's
 * weight gradient is a sum over the B examples of per-example outer
 * products (scaled 1/B for a mean): the one-device run sums them in one
 * GEMM, the pipeline in M GEMMs of B/M rows then M - 1 accumulations (and
 * an all-reduce of R terms for hybrids), so the two are within 2 gamma(B)
 * S of each other, S = sum over examples of |per-example gradient|,
 * computed here one example at a time.  The per-example factors (x, dy)
 * are themselves row-wise products that BLAS may block differently at
 * another row count, which at most doubles that: 4 gamma(B) S.  The SGD
 * step w - lr g rounds twice on each side: 4 u |w'|.  So per weight
 * |w_pipe - w_ref| <= lr 4 gamma(B) S + 4 u |w_ref| (with S scaled by lr). */
#include "io/config.h"
#include "io/dataset.h"
#include "model/net.h"
#include "program/program.h"
#include "run/run.h"
#include "run/experiment.h"
#include "support/experiment.h"
#include "support/cli.h"
#include "strategy/partition.h"
#include "strategy/strategy.h"
#include "strategy/strategy-private.h"


#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <glib/gstdio.h>
#include <string.h>

/* The keys the replicate and pipeline strategies read (white box). */
static const PsReplicaConfig *replica_config(const PsExperiment *e)
{
  return e->strategy.config;
}

#define U ((double)FLT_EPSILON / 2)

static double gam(int n)
{
  return n * U / (1 - n * U);
}

static char *tmpdir;
static char *mlp_path, *uniform_path, *uniform_model_path;

/* The MLP of models/mlp.json without fusion (6 layers, 6 units), f32,
 * synthetic data, one SGD step. */
static const char *mlp_json =
    "{\"name\": \"pipe\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 32, \"steps\": 1, \"fuse_elementwise\": false,"
    " \"strategy\": {\"kind\": \"pipeline\", \"stages\": 4, \"micro_batches\": 4,"
    "                \"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 512,"
    "             \"host_cost_per_example_s\": 0},"
    " \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.5, \"momentum\": 0},"
    " \"numerics\": {\"enabled\": true, \"precision\": \"f32\", \"seed\": 11,"
    "                \"evaluate\": false},"
    " \"collective\": {\"algorithm\": \"ring\"}}";

/* Eight equal 4096-wide dense layers: equal stages for K = 2, 4, 8. */
static const char *uniform_model_json =
    "{\"name\": \"uniform\", \"input\": {\"shape\": [4096], \"classes\": 4096},"
    " \"layers\": [{\"type\": \"repeat\", \"count\": 8, \"body\":"
    "   [{\"type\": \"dense\", \"units\": 4096, \"bias\": false}]},"
    "  {\"type\": \"softmax_xent\"}]}";

static const char *uniform_json_fmt =
    "{\"name\": \"uniform\", \"topology\": \"tpu-v3-8\", \"model\": \"%s\","
    " \"global_batch\": 32768, \"steps\": 4, \"steps_per_run\": 2,"
    " \"strategy\": {\"kind\": \"pipeline\", \"stages\": 4, \"micro_batches\": 8,"
    "                \"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"host_cost_per_example_s\": 0,"
    "             \"infeed_capacity\": 64, \"prefetch\": 64},"
    " \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.1, \"momentum\": 0},"
    " \"numerics\": {\"enabled\": false}}";

static PsExperiment *load_va(const char *path, va_list ap, GError **error)
{
  GPtrArray *ov = g_ptr_array_new();
  for (const char *o = va_arg(ap, const char *); o; o = va_arg(ap, const char *))
    g_ptr_array_add(ov, (gpointer)o);
  g_ptr_array_add(ov, NULL);
  PsExperiment *e = ps_experiment_load(path, (const char *const *)ov->pdata, error);
  g_ptr_array_free(ov, TRUE);
  return e;
}

/* path, then overrides, NULL-terminated.  (transfer full) */
static PsExperiment *loadv(const char *path, ...)
{
  va_list ap;
  va_start(ap, path);
  GError *error = NULL;
  PsExperiment *e = load_va(path, ap, &error);
  va_end(ap);
  g_assert_no_error(error);
  return e;
}

/* The error of compiling (or loading) path with overrides.  (transfer full) */
static GError *compile_error(const char *path, ...)
{
  va_list ap;
  va_start(ap, path);
  GError *error = NULL;
  PsExperiment *e = load_va(path, ap, &error);
  va_end(ap);
  if (e) {
    PsPlan *plan = ps_strategy_compile(e, &error);
    g_assert_null(plan);
    ps_experiment_free(e);
  }
  g_assert_nonnull(error);
  return error;
}

/* ---- partitioning --------------------------------------------------- */

static double max_stage(const double *cost, const int *first, int k)
{
  double worst = 0;
  for (int s = 0; s < k; s++) {
    double c = 0;
    for (int i = first[s]; i < first[s + 1]; i++)
      c += cost[i];
    worst = MAX(worst, c);
  }
  return worst;
}

/* The least slowest stage over every placement of k - 1 cuts among n - 1
 * gaps, by recursion. */
static double brute(const double *cost, int n, int k, int start)
{
  if (k == 1) {
    double c = 0;
    for (int i = start; i < n; i++)
      c += cost[i];
    return c;
  }
  double best = INFINITY, c = 0;
  for (int end = start + 1; end <= n - (k - 1); end++) {
    c += cost[end - 1];
    best = MIN(best, MAX(c, brute(cost, n, k - 1, end)));
  }
  return best;
}

static void test_partition_optimal(void)
{
  GRand *rng = g_rand_new_with_seed(3);
  for (int trial = 0; trial < 400; trial++) {
    int n = g_rand_int_range(rng, 1, 13);
    int k = g_rand_int_range(rng, 1, n + 1);
    double cost[12];
    for (int i = 0; i < n; i++) /* some zero-cost units, some heavy ones */
      cost[i] = g_rand_int_range(rng, 0, 4) == 0 ? 0 : g_rand_double_range(rng, 0.1, 10);
    int first[13];
    ps_partition_optimal_units(cost, n, k, first);
    g_assert_cmpint(first[0], ==, 0);
    g_assert_cmpint(first[k], ==, n);
    for (int s = 0; s < k; s++)
      g_assert_cmpint(first[s], <, first[s + 1]);
    double want = brute(cost, n, k, 0);
    g_assert_cmpfloat_with_epsilon(max_stage(cost, first, k), want, 1e-9 * (want + 1));
  }
  g_rand_free(rng);
}

static void test_partition_seed(void)
{
  int first[5];
  /* [1,1,1,1], K=2: fractions .25 .5 .75 1 -> stages 0 1 1 1 */
  g_assert_true(ps_partition_seed_units((double[]){1, 1, 1, 1}, 4, 2, first));
  g_assert_cmpint(first[0], ==, 0);
  g_assert_cmpint(first[1], ==, 1);
  g_assert_cmpint(first[2], ==, 4);
  /* [3,1,1,3], K=2: .375 .5 .625 1 -> 0 1 1 1 */
  g_assert_true(ps_partition_seed_units((double[]){3, 1, 1, 3}, 4, 2, first));
  g_assert_cmpint(first[1], ==, 1);
  /* [1,2,1], K=4: .25 .75 1 -> 1 3 3: stages 0 and 2 empty */
  g_assert_false(ps_partition_seed_units((double[]){1, 2, 1}, 3, 4, first));
  /* [1,1,1,1,1,1,1,1], K=4: (i+1)/8*4 -> 0 1 1 2 2 3 3 3 */
  g_assert_true(ps_partition_seed_units((double[]){1, 1, 1, 1, 1, 1, 1, 1}, 8, 4, first));
  g_assert_cmpint(first[1], ==, 1);
  g_assert_cmpint(first[2], ==, 3);
  g_assert_cmpint(first[3], ==, 5);
  g_assert_cmpint(first[4], ==, 8);
}

static void test_partition_residual(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "tb.json", NULL);
  g_assert_true(g_file_set_contents(
      path,
      "{\"name\": \"tb\", \"topology\": \"tpu-v3-8\", \"model\": \"transformer-big\","
      " \"global_batch\": 64, \"steps\": 1, \"input\": {\"source\": \"synthetic\"},"
      " \"numerics\": {\"enabled\": false},"
      " \"strategy\": {\"kind\": \"pipeline\", \"stages\": 8, \"micro_batches\": 8}}",
      -1, NULL));
  PsExperiment *e = loadv(path, NULL);
  const PsModel *m = e->model;
  int allowed = 0;
  for (int l = 1; l < m->n_layers; l++) {
    gboolean ok = ps_partition_cut_allowed(m, l);
    allowed += ok;
    /* inside a residual block (after its first layer, up to its ADD) never */
    for (int j = l; j < m->n_layers; j++)
      if (m->layers[j].kind == PS_LAYER_ADD && m->layers[j].shortcut_of < l)
        g_assert_false(ok);
  }
  g_assert_cmpint(allowed, >=, 24); /* at least between the 24 residual blocks */
  GError *error = NULL;
  PsPartition *p = ps_partition_compute(e, 8, 8, PS_PARTITION_OPTIMAL, NULL, &error);
  g_assert_no_error(error);
  for (int s = 1; s < 8; s++)
    g_assert_true(ps_partition_cut_allowed(m, p->first[s]));
  /* the optimal partition is no slower than the seed's */
  ps_partition_free(p);
  ps_experiment_free(e);

  /* a cut one layer into the first block's body is refused, naming it */
  char given[128];
  e = loadv(path, NULL);
  int n = e->model->n_layers, second = -1;
  for (int l = 0; l < n && second < 0; l++)
    if (e->model->layers[l].kind == PS_LAYER_ADD)
      second = e->model->layers[l].shortcut_of + 1;
  ps_experiment_free(e);
  /* stage 1 would start at the second layer of the first block */
  g_snprintf(given, sizeof given, "strategy.partition=[%d,%d]", second, n - second);
  GError *err = compile_error(path, "strategy.stages=2", given, NULL);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(err->message, "strategy.partition"));
  g_assert_nonnull(strstr(err->message, "residual"));
  g_error_free(err);
  /* a partition whose counts do not add up names the counts */
  err = compile_error(path, "strategy.stages=2", "strategy.partition=[1,2]", NULL);
  g_assert_nonnull(strstr(err->message, "strategy.partition"));
  g_error_free(err);
}

/* ---- plans ------------------------------------------------------------ */

static int hops(const PsTopology *t, int chip_a, int chip_b)
{
  int h = 0, ca = chip_a, cb = chip_b;
  for (int d = 0; d < t->ndims; d++) {
    int a = ca % t->dims[d], b = cb % t->dims[d];
    ca /= t->dims[d];
    cb /= t->dims[d];
    int diff = abs(a - b);
    if (t->wrap[d])
      diff = MIN(diff, t->dims[d] - diff);
    h += diff;
  }
  return h;
}

static void check_neighbours(const char *topology, const char *stages, const char *replicas)
{
  g_autofree char *set_topo = g_strdup_printf("topology=%s", topology);
  PsExperiment *e = loadv(uniform_path, set_topo, stages, replicas, "global_batch=6144",
                          "strategy.micro_batches=2", NULL);
  GError *error = NULL;
  PsPlan *plan = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_assert_true(ps_plan_validate(plan, &error));
  int per_chip = ps_topology_devices_per_chip(e->topology);
  int sends = 0;
  for (int d = 0; d < plan->n_devices; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    for (int i = 0; i < p->n_ops; i++)
      if (p->ops[i].kind == PS_OP_SEND) {
        g_assert_cmpint(hops(e->topology, d / per_chip, p->ops[i].peer / per_chip), <=, 1);
        int peer = p->ops[i].peer;
        g_assert_cmpint(abs(ps_plan_coord(plan, peer, PS_AXIS_STAGE) -
                            ps_plan_coord(plan, d, PS_AXIS_STAGE)), ==, 1);
        g_assert_cmpint(ps_plan_coord(plan, peer, PS_AXIS_DATA), ==,
                        ps_plan_coord(plan, d, PS_AXIS_DATA));
        sends++;
      }
  }
  g_assert_cmpint(sends, >, 0);
  ps_plan_free(plan);
  ps_experiment_free(e);
}

static void test_placement(void)
{
  check_neighbours("tpu-v3-32", "strategy.stages=8", "strategy.replicas=4");
  check_neighbours("tpu-v3-32", "strategy.stages=4", "strategy.replicas=8");
  check_neighbours("tpu-v4-64", "strategy.stages=8", "strategy.replicas=4");
  check_neighbours("tpu-v4-128", "strategy.stages=8", "strategy.replicas=8");
  check_neighbours("tpu-v4-128", "strategy.stages=4", "strategy.replicas=16");
  check_neighbours("tpu-v4-128", "strategy.stages=2", "strategy.replicas=3"); /* partial */
}

static int count_ops(const PsProgram *p, PsOpKind kind)
{
  int n = 0;
  for (int i = 0; i < p->n_ops; i++)
    n += p->ops[i].kind == kind;
  return n;
}

/* Ops of `kind` for micro-batch mb; their layers must cover the stage. */
static int count_mb(const PsPlan *plan, const PsProgram *p, int stage, PsOpKind kind, int mb)
{
  int n = 0, layers = 0;
  for (int i = 0; i < p->n_ops; i++)
    if (p->ops[i].kind == kind && p->ops[i].mb == mb) {
      n++;
      layers += p->ops[i].last - p->ops[i].first + 1;
      g_assert_cmpint(p->ops[i].first, >=, plan->stage_first[stage]);
      g_assert_cmpint(p->ops[i].last, <, plan->stage_first[stage + 1]);
    }
  if (n > 0)
    g_assert_cmpint(layers, ==, plan->stage_first[stage + 1] - plan->stage_first[stage]);
  return n;
}

static void test_plans_valid(void)
{
  static const char *const shapes[][5] = {
      {"strategy.stages=4", "strategy.micro_batches=2", "strategy.replicas=1", NULL},
      {"strategy.stages=4", "strategy.micro_batches=1", "strategy.replicas=2", NULL},
      {"strategy.stages=1", "strategy.micro_batches=4", "strategy.replicas=8", NULL},
      {"strategy.stages=3", "strategy.micro_batches=5", "strategy.replicas=2", NULL},
      {"strategy.stages=8", "strategy.micro_batches=16", "strategy.replicas=1", NULL},
      {"strategy.stages=2", "strategy.micro_batches=8", "strategy.replicas=4",
       "strategy.weight_update_sharding=true"},
      {"strategy.stages=4", "strategy.micro_batches=8", "strategy.replicas=2",
       "strategy.overlap=false"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(shapes); i++)
    for (int sched = 0; sched < 2; sched++)
      for (int remat = 0; remat < 2; remat++) {
        PsExperiment *e = loadv(uniform_path, "global_batch=960", shapes[i][0], shapes[i][1],
                                shapes[i][2], sched ? "strategy.schedule=1f1b"
                                                    : "strategy.schedule=gpipe",
                                remat ? "strategy.rematerialize=true"
                                      : "strategy.rematerialize=false",
                                shapes[i][3], NULL);
        GError *error = NULL;
        PsPlan *plan = ps_strategy_compile(e, &error);
        g_assert_no_error(error);
        g_assert_true(ps_plan_validate(plan, &error));
        g_assert_no_error(error);
        const int K = replica_config(e)->staging.stages, M = replica_config(e)->staging.micro_batches;
        g_assert_cmpint(plan->n_devices, ==, K * replica_config(e)->rep.replicas);
        for (int d = 0; d < plan->n_devices; d++) {
          const PsProgram *p = ps_plan_program(plan, d);
          int s = ps_plan_coord(plan, d, PS_AXIS_STAGE);
          int groups = count_mb(plan, p, s, PS_OP_FWD, 0);
          g_assert_cmpint(groups, >, 0);
          for (int mb = 0; mb < M; mb++) { /* every micro-batch through every layer */
            g_assert_cmpint(count_mb(plan, p, s, PS_OP_FWD, mb), ==, groups);
            g_assert_cmpint(count_mb(plan, p, s, PS_OP_BWD, mb), ==, groups);
            g_assert_cmpint(count_mb(plan, p, s, PS_OP_RECOMPUTE, mb), ==, remat ? groups : 0);
          }
          g_assert_cmpint(count_ops(p, PS_OP_FWD), ==, M * groups);
          g_assert_cmpint(count_ops(p, PS_OP_SEND), ==, (s > 0) * M + (s < K - 1) * M);
          g_assert_cmpint(count_ops(p, PS_OP_OUTFEED), ==, s == K - 1);
          g_assert_cmpint(count_ops(p, PS_OP_INFEED), ==, (s == 0) * M);
        }
        ps_plan_free(plan);
        ps_experiment_free(e);
      }
}

/* ---- numerics ----------------------------------------------------------- */

/* Weights after one step of the one-device reference on the whole batch,
 * and S (see the top): per weight, the sum over examples of |lr x its
 * per-example gradient at 1/B|. */
static void reference(float **w_ref, double **s_lr)
{
  PsExperiment *e = loadv(mlp_path, "strategy.kind=replicate", "strategy.stages=1",
                          "strategy.micro_batches=1", NULL);
  PsSummary s = experiment_run(e);
  *w_ref = g_memdup2(s.params, sizeof(float) * s.n_params);
  size_t n = s.n_params;
  ps_summary_clear(&s);

  const PsModel *m = e->model;
  const int B = (int)e->global_batch;
  PsDataset *ds = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                           (size_t)e->input.synthetic_examples,
                                           e->numerics.seed);
  size_t elems = ps_dataset_example_elems(ds);
  float *x = g_new(float, (size_t)B * elems);
  int32_t *y = g_new(int32_t, B);
  PsSampler *sm = ps_sampler_new(ds, e->input.shuffle, e->numerics.seed);
  ps_sampler_next(sm, B, x, y);
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 1, e->numerics.precision, e->numerics.seed, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(ps_net_n_params(net), ==, n);
  *s_lr = g_new0(double, n);
  for (int i = 0; i < B; i++) {
    ps_net_set_input(net, x + (size_t)i * elems, y + i, 1);
    ps_net_zero_grads(net);
    ps_net_forward(net);
    ps_net_backward(net, 1.0f / (float)B);
    const float *g = ps_net_grads(net);
    for (size_t k = 0; k < n; k++)
      (*s_lr)[k] += e->optimizer.learning_rate * fabs((double)g[k]);
  }
  /* the layer's largest S for each of its weights (see the top) */
  for (int l = 0; l < m->n_layers; l++) {
    size_t off, len;
    ps_net_layer_params(net, l, &off, &len);
    double big = 0;
    for (size_t k = off; k < off + len; k++)
      big = MAX(big, (*s_lr)[k]);
    for (size_t k = off; k < off + len; k++)
      (*s_lr)[k] = big;
  }
  ps_net_free(net);
  ps_sampler_free(sm);
  g_free(x);
  g_free(y);
  ps_dataset_free(ds);
  ps_experiment_free(e);
}

static void test_numerics(void)
{
  float *w_ref;
  double *s_lr;
  reference(&w_ref, &s_lr);
  static const char *const cases[][4] = {
      {"strategy.schedule=gpipe", NULL},
      {"strategy.schedule=1f1b", NULL},
      {"strategy.schedule=gpipe", "strategy.rematerialize=true", NULL},
      {"strategy.schedule=1f1b", "strategy.stages=3", "strategy.micro_batches=8", NULL},
      {"strategy.schedule=1f1b", "strategy.replicas=2", NULL},                   /* hybrid 4 x 2 */
      {"strategy.schedule=gpipe", "strategy.stages=2", "strategy.replicas=4", NULL}, /* 2 x 4 */
      {"strategy.stages=2", "strategy.replicas=2", "strategy.weight_update_sharding=true", NULL},
  };
  PsExperiment *e0 = loadv(mlp_path, NULL);
  const int B = (int)e0->global_batch;
  ps_experiment_free(e0);
  for (guint c = 0; c < G_N_ELEMENTS(cases); c++) {
    PsExperiment *e = loadv(mlp_path, cases[c][0], cases[c][1], cases[c][2], cases[c][3]);
    PsSummary s = experiment_run(e);
    g_assert_true(s.has_numerics);
    g_assert_cmpfloat(s.replica_divergence, ==, 0.0);
    double worst = 0, moved = 0;
    for (size_t k = 0; k < s.n_params; k++) {
      double d = fabs((double)s.params[k] - w_ref[k]);
      double tol = 4 * gam(B) * s_lr[k] + 4 * U * fabs((double)w_ref[k]);
      if (d > tol)
        g_error("case %u: weight %zu: pipelined %.9g, full batch %.9g, |diff| %.3g > bound %.3g",
                c, k, s.params[k], w_ref[k], d, tol);
      worst = MAX(worst, d);
      moved = MAX(moved, s_lr[k]);
    }
    g_assert_cmpfloat(moved, >, 1e-4); /* the step did move the weights */
    if (g_test_verbose())
      g_printerr("case %u: largest |diff| %.3g\n", c, worst);
    ps_summary_clear(&s);
    ps_experiment_free(e);
  }
  g_free(w_ref);
  g_free(s_lr);
}

/* ---- time --------------------------------------------------------------- */

static void check_bubble(const char *sched, int K, int M)
{
  g_autofree char *k = g_strdup_printf("strategy.stages=%d", K);
  g_autofree char *mb = g_strdup_printf("strategy.micro_batches=%d", M);
  g_autofree char *gb = g_strdup_printf("global_batch=%d", 4096 * M);
  /* communication made negligible: the closed form has none; it also
   * wants equal stages, so the loss rides free on the last layer (fusion
   * "ideal"), and float32 at six MXU passes keeps compute far above the
   * infeed's PCIe time.  mxu_efficiency is pinned at 1: at some op times
   * (e.g. 0.801) part of stage 0's idle time at a loop's end is booked as
   * host instead of bubble (an executor question, not a cost one) */
  PsExperiment *e = loadv(uniform_path, k, mb, gb, sched, "topology.ici.bandwidth_Bps=1e15",
                          "topology.ici.latency_s=0", "numerics.matmul_precision=highest",
                          "fusion=ideal", "topology.chip.mxu_efficiency=1", NULL);
  PsSummary s = experiment_run(e);
  double frac = s.breakdown[PS_TIME_PIPELINE_BUBBLE] / s.step_time_s;
  double want = (double)(K - 1) / (M + K - 1);
  if (g_test_verbose())
    g_printerr("%s K=%d M=%d: bubble %.5f, closed form %.5f\n", sched, K, M, frac, want);
  g_assert_cmpfloat(fabs(frac - want), <=, 0.01 * want);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void test_bubble(void)
{
  check_bubble("strategy.schedule=gpipe", 4, 8);
  check_bubble("strategy.schedule=1f1b", 4, 8);
  check_bubble("strategy.schedule=gpipe", 2, 4);
  check_bubble("strategy.schedule=1f1b", 8, 16);
}

/* The issue-21 case: unequal stages, so every stage but the last to
 * finish waits at the loop's end for the others. */
static const char *resnet_pipe_json =
    "{\"name\": \"resnet-pipe\", \"topology\": \"tpu-v3-8\", \"model\": \"resnet50\","
    " \"global_batch\": 1024, \"steps\": 1,"
    " \"strategy\": {\"kind\": \"pipeline\", \"stages\": 4, \"micro_batches\": 8},"
    " \"input\": {\"source\": \"synthetic\", \"host_cost_per_example_s\": 0.0005,"
    "             \"workers\": 96, \"prefetch\": 2},"
    " \"numerics\": {\"enabled\": false, \"precision\": \"bf16\"}}";

static void test_loop_drain(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "resnet-pipe.json", NULL);
  g_assert_true(g_file_set_contents(path, resnet_pipe_json, -1, NULL));
  double bubble_1 = 0;
  for (int spr = 1; spr <= 3; spr += 2) {
    g_autofree char *per = g_strdup_printf("steps_per_run=%d", spr);
    g_autofree char *steps = g_strdup_printf("steps=%d", 4 * spr);
    PsExperiment *e = loadv(path, per, steps, NULL);
    PsSummary s = experiment_run(e);
    double want = e->topology->loop_overhead_s / spr;
    if (g_test_verbose())
      g_printerr("steps_per_run %d: host %.6g s, host loop %.6g s, bubble %.6g s, step %.6g s\n",
                 spr, s.breakdown[PS_TIME_HOST], s.host_loop_s,
                 s.breakdown[PS_TIME_PIPELINE_BUBBLE], s.step_time_s);
    g_assert_cmpfloat(fabs(s.breakdown[PS_TIME_HOST] - want), <=, 1e-9 * want);
    g_assert_cmpfloat(fabs(s.host_loop_s - want), <=, 1e-9 * want);
    /* the stages' drain is bubble, and GPipe flushes every step, so a
     * loop's end adds none of it: the bubble per step does not depend on
     * steps_per_run (to rounding), only the host's share does */
    if (spr == 1)
      bubble_1 = s.breakdown[PS_TIME_PIPELINE_BUBBLE];
    else
      g_assert_cmpfloat(fabs(s.breakdown[PS_TIME_PIPELINE_BUBBLE] - bubble_1), <=,
                        1e-9 * bubble_1);
    g_assert_cmpfloat(s.breakdown[PS_TIME_PIPELINE_BUBBLE], >, 0);
    double sum = 0;
    for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
      sum += s.breakdown[c];
    g_assert_cmpfloat(fabs(sum - s.step_time_s), <=, 1e-9 * s.step_time_s);
    ps_summary_clear(&s);
    ps_experiment_free(e);
  }
  g_unlink(path);
}

static double single_loop(const char *path, int steps, const char *extra)
{
  g_autofree char *n = g_strdup_printf("steps=%d", steps);
  PsExperiment *e = loadv(path, "steps_per_run=100", n, extra, NULL);
  PsSummary s = experiment_run(e);
  g_assert_cmpint(s.measured_steps, ==, steps);
  g_assert_cmpfloat(fabs(s.step_time_s * steps - s.sim_time_s), <=, 1e-9 * s.sim_time_s);
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    sum += s.breakdown[c];
  g_assert_cmpfloat(fabs(sum - s.step_time_s), <=, 1e-9 * s.step_time_s);
  g_assert_cmpfloat(s.end_wait_s, <=, s.breakdown[PS_TIME_PIPELINE_BUBBLE]);
  /* the busiest stage ends before the first stage's drain: that wait is
   * there, and booked as bubble, not left to "other" */
  g_assert_cmpfloat(s.end_wait_s, >, 0);
  g_assert_cmpfloat(s.breakdown[PS_TIME_OTHER], <, 0.5 * s.end_wait_s);
  double t = s.step_time_s;
  if (g_test_verbose())
    g_printerr("%d steps %s: step %.9g s, bubble %.6g s, of it the end's wait %.6g s\n", steps,
               extra ? extra : "", t, s.breakdown[PS_TIME_PIPELINE_BUBBLE], s.end_wait_s);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  return t;
}

static void test_single_loop(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "resnet-pipe.json", NULL);
  g_assert_true(g_file_set_contents(path, resnet_pipe_json, -1, NULL));
  double one = single_loop(path, 1, NULL), three = single_loop(path, 3, NULL);
  /* later steps of a loop start as the first stage frees up (and their
   * infeed is prefetched): no slower than the first, and close */
  g_assert_cmpfloat(three, <=, one);
  g_assert_cmpfloat(three, >=, 0.99 * one);
  g_unlink(path);
  /* the Transformer in 8 stages of a v4-32, 4 micro-batches: at half the
   * peak FLOPs another stage is the busiest */
  const char *tf = "experiments/scaling-transformer-big.json";
  const char *shape[] = {"topology=tpu-v4-32", "strategy={\"kind\": \"pipeline\", "
                         "\"stages\": 8, \"micro_batches\": 4}", "global_batch=16",
                         "numerics.enabled=false"};
  double t[2];
  for (int k = 0; k < 2; k++) {
    PsExperiment *e = loadv(tf, shape[0], shape[1], shape[2], shape[3], "steps=2",
                            "steps_per_run=100",
                            k ? "topology.chip.peak_flops=137.5e12" : NULL, NULL);
    PsSummary s = experiment_run(e);
    g_assert_cmpfloat(fabs(s.step_time_s * 2 - s.sim_time_s), <=, 1e-9 * s.sim_time_s);
    t[k] = s.step_time_s;
    ps_summary_clear(&s);
    ps_experiment_free(e);
  }
  if (g_test_verbose())
    g_printerr("transformer-big, 8 stages: %.6g s at v4's peak, %.6g s at half\n", t[0], t[1]);
  g_assert_cmpfloat(t[1], >, t[0]);
}

static void test_1f1b_memory(void)
{
  for (int sched = 0; sched < 2; sched++) {
    const int K = 4, M = 8;
    PsExperiment *e = loadv(uniform_path, sched ? "strategy.schedule=1f1b"
                                                : "strategy.schedule=gpipe",
                            "global_batch=8192", NULL);
    GError *error = NULL;
    PsPlan *plan = ps_strategy_compile(e, &error);
    g_assert_no_error(error);
    /* per stage: one micro-batch's activations; stage s of 1F1B holds
     * min(K - s, M) of them at once, GPipe all M */
    int64_t want = 0;
    for (int d = 0; d < plan->n_devices; d++) {
      const PsProgram *p = ps_plan_program(plan, d);
      int64_t act = 0;
      for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == PS_OP_FWD && p->ops[i].mb == 0)
          act += p->ops[i].act_bytes;
      g_assert_cmpint(act, >, 0);
      int s = ps_plan_coord(plan, d, PS_AXIS_STAGE);
      int64_t held = sched ? MIN(K - s, M) : M;
      g_assert_cmpint(held, <=, sched ? K : M);
      want = MAX(want, p->hbm_static_bytes + held * act);
    }
    ps_plan_free(plan);
    PsSummary s = experiment_run(e); /* the run's counter follows the ops as they run */
    g_assert_cmpint(s.hbm_peak_bytes, ==, want);
    ps_summary_clear(&s);
    ps_experiment_free(e);
  }
}

static void test_errors(void)
{
  /* GPipe without remat keeps all 64 micro-batches of 1024: a stage is over */
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *f = g_build_filename(dir && *dir ? dir : ".",
                                        "tests/data/bad/does-not-fit.json", NULL);
  GError *err = compile_error(f, "strategy.kind=pipeline", "strategy.stages=3",
                              "strategy.micro_batches=64", NULL);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT);
  g_assert_true(g_regex_match_simple("stage [0-9] \\(layers [0-9]+\\.\\.[0-9]+, ", err->message, 0, 0));
  g_assert_nonnull(strstr(err->message, "rematerialize"));
  g_error_free(err);
  /* with re-materialization it fits */
  PsExperiment *e = loadv(f, "strategy.kind=pipeline", "strategy.stages=3",
                          "strategy.micro_batches=64", "strategy.rematerialize=true", NULL);
  GError *error = NULL;
  PsPlan *plan = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  ps_plan_free(plan);
  ps_experiment_free(e);

  err = compile_error(uniform_path, "strategy.micro_batches=3", NULL);
  g_assert_nonnull(strstr(err->message, "strategy.micro_batches"));
  g_error_free(err);
  err = compile_error(uniform_path, "strategy.stages=8", "strategy.replicas=1",
                      "strategy.partition=seed", "model=mlp", NULL);
  g_assert_nonnull(strstr(err->message, "strategy.stages"));
  g_error_free(err);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  tmpdir = scratch_dir("podsim-pipeline");
  mlp_path = scratch_write(tmpdir, "mlp.json", mlp_json);
  uniform_model_path = scratch_write(tmpdir, "uniform-model.json", uniform_model_json);
  g_autofree char *uj = g_strdup_printf(uniform_json_fmt, uniform_model_path);
  uniform_path = scratch_write(tmpdir, "uniform.json", uj);
  g_test_add_func("/pipeline/partition/optimal", test_partition_optimal);
  g_test_add_func("/pipeline/partition/seed", test_partition_seed);
  g_test_add_func("/pipeline/partition/residual", test_partition_residual);
  g_test_add_func("/pipeline/placement", test_placement);
  g_test_add_func("/pipeline/plans-valid", test_plans_valid);
  g_test_add_func("/pipeline/numerics-match-full-batch", test_numerics);
  g_test_add_func("/pipeline/bubble", test_bubble);
  g_test_add_func("/pipeline/loop-drain", test_loop_drain);
  g_test_add_func("/pipeline/single-loop", test_single_loop);
  g_test_add_func("/pipeline/1f1b-memory", test_1f1b_memory);
  g_test_add_func("/pipeline/errors", test_errors);
  int rc = g_test_run();
  scratch_remove(tmpdir);
  return rc;
}

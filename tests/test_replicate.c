/* test_replicate.c: the data-parallel strategy (strategy/replicate.c) run
 * end to end with real numerics, checked against a reference trainer built
 * here from the same pieces (model/net.h on the same synthetic batches),
 * and with float rounding bounds derived below instead of guessed
 * tolerances.
 *
 * Notation: u = 2^-24 (float unit roundoff), gamma(n) = n u / (1 - n u),
 * the classic bound for any summation of n + 1 terms (or a dot product of
 * n products): |fl(sum) - sum| <= gamma(n) sum|terms| whatever the order
 * or tree (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1).
 * One SGD step without momentum is w' = fl(w - fl(lr g)) (kernels.c: the
 * velocity is 0 v + g = g exactly), so a float rounding of |x| costs at
 * most u|x|.  All replica counts here are powers of two, so 1/replicas,
 * 1/batch and their products are exact in float.
 *
 * - /replicate/mean-matches-one-replica: the reference trainer equals the
 *   one-replica run bit for bit at every step; N = 2, 4 and 8 replicas
 *   with a "mean" reduction take, at every step, one step on the float sum
 *   of their own gradients within the summation bound, and the one-replica
 *   step from the same weights within that bound plus the kernels' own
 *   (measured) batch-size rounding difference; after 4 steps the weights
 *   and losses still agree, and the weights did move;
 * - /replicate/replicas-identical: replica_divergence is exactly 0 (ring,
 *   auto, bidir, torus; overlap on, off; weight-update sharding; Adam);
 * - /replicate/sum-is-n-times-mean: one SGD step with "sum" moves each
 *   weight exactly N times as far as with "mean", up to the two final
 *   roundings;
 * - /replicate/bucketing-unchanged: one bucket per layer group vs one
 *   bucket: within the ring's reordering bound; overlap on vs off:
 *   bit-identical;
 * - /replicate/wus-unchanged: weight-update sharding on vs off,
 *   bit-identical (SGD and Adam; ring, auto, torus, bidir);
 * - /replicate/overlap-hides-communication: timing, ResNet-50: overlap
 *   exposes less collective time, shortens the step, leaves compute alone;
 *   one bucket without overlap exposes the collective's closed form;
 * - /replicate/default-replicas-all-devices: no strategy.replicas on a
 *   v3-8 means 8 replicas on 8 devices. */
#include "collectives/collective.h"
#include "hw/network.h"
#include "io/config.h"
#include "io/dataset.h"
#include "model/layers.h"
#include "model/net.h"
#include "run/run.h"
#include "run/experiment.h"
#include "support/experiment.h"
#include "support/cli.h"
#include "strategy/strategy-private.h"


#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* The keys the replicate and pipeline strategies read (white box). */
static const PsReplicaConfig *replica_config(const PsExperiment *e)
{
  return e->strategy.config;
}

#define U ((double)FLT_EPSILON / 2) /* 2^-24 */

static double gam(int n)
{
  return n * U / (1 - n * U);
}

static char *tmpdir;
static char *base_path;

/* The MLP of models/mlp.json (784-256-128-10, 235,146 parameters) on the
 * synthetic source: a global batch of 64 is 8 examples per replica at 8
 * replicas.  evaluate off: the test set is not needed here. */
static const char *base_json =
    "{\"name\": \"replicate\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 64, \"steps\": 4, \"steps_per_run\": 2,"
    " \"strategy\": {\"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 1024,"
    "             \"host_cost_per_example_s\": 0},"
    " \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.05, \"momentum\": 0},"
    " \"numerics\": {\"enabled\": true, \"precision\": \"f32\", \"seed\": 7,"
    "                \"evaluate\": false},"
    " \"collective\": {\"algorithm\": \"ring\"}}";

/* ---- runs ----------------------------------------------------------- */

static PsExperiment *load_va(const char *path, const char *first, va_list ap)
{
  GPtrArray *ov = g_ptr_array_new();
  for (const char *o = first; o; o = va_arg(ap, const char *))
    g_ptr_array_add(ov, (gpointer)o);
  g_ptr_array_add(ov, NULL);
  PsExperiment *e = experiment_load(path, (const char *const *)ov->pdata);
  g_ptr_array_free(ov, TRUE);
  return e;
}

/* An experiment file with overrides (NULL-terminated).  (transfer full) */
static PsExperiment *load_va_path(const char *path, const char *first, ...)
    G_GNUC_NULL_TERMINATED;
static PsExperiment *load_va_path(const char *path, const char *first, ...)
{
  va_list ap;
  va_start(ap, first);
  PsExperiment *e = load_va(path, first, ap);
  va_end(ap);
  return e;
}

/* The base experiment with overrides (NULL-terminated).  (transfer full) */
static PsExperiment *loadv(const char *first, ...) G_GNUC_NULL_TERMINATED;
static PsExperiment *loadv(const char *first, ...)
{
  va_list ap;
  va_start(ap, first);
  PsExperiment *e = load_va(base_path, first, ap);
  va_end(ap);
  return e;
}

static PsSummary run_exp(const PsExperiment *e)
{
  PsSummary s = experiment_run(e);
  if (e->numerics.enabled) {
    g_assert_true(s.has_numerics);
    g_assert_nonnull(s.params);
    /* every run here must end with identical replicas (see
     * /replicate/replicas-identical); the bounds below rely on it, since
     * they take device 0's weights as every replica's */
    g_assert_cmpfloat(s.replica_divergence, ==, 0.0);
  }
  return s;
}

/* Loads path with the overrides, runs it and frees it. */
static PsSummary run_va(const char *path, const char *first, va_list ap)
{
  PsExperiment *e = load_va(path, first, ap);
  PsSummary s = run_exp(e);
  ps_experiment_free(e);
  return s;
}

/* Runs the base experiment with overrides; the summary holds device 0's
 * final weights (ps_summary_clear frees them). */
static PsSummary runv(const char *first, ...) G_GNUC_NULL_TERMINATED;
static PsSummary runv(const char *first, ...)
{
  va_list ap;
  va_start(ap, first);
  PsSummary s = run_va(base_path, first, ap);
  va_end(ap);
  return s;
}

static double max_abs_diff(const float *a, const float *b, size_t n, size_t *n_differ)
{
  double m = 0;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    m = fmax(m, fabs((double)a[i] - b[i]));
    k += a[i] != b[i];
  }
  if (n_differ)
    *n_differ = k;
  return m;
}

/* ---- the reference trainer ------------------------------------------ */

/* What run/numerics.c does for one device, rebuilt from the public pieces: the same
 * synthetic set and sampler (same seed), the same initial weights, nets of
 * the batch sizes the replicas use. */
typedef struct {
  PsExperiment *e;
  PsDataset *ds;
  size_t n;       /* parameters */
  size_t elems;   /* per example */
  int B;          /* global batch */
  float lr;
  float *w0;      /* initial weights */
  float *x;       /* the global batch drawn last */
  int32_t *y;
  int64_t step;   /* whose batch x holds (1-based) */
  PsNet *nets[8]; /* by batch size, made on demand */
  int net_batch[8];
} Ref;

static void ref_init(Ref *r, PsExperiment *e)
{
  memset(r, 0, sizeof *r);
  const PsModel *m = e->model;
  g_assert_cmpint(e->input.source, ==, PS_SOURCE_SYNTHETIC);
  r->e = e;
  r->ds = ps_dataset_new_synthetic(m->in_shape, m->in_rank, (int)m->classes,
                                   (size_t)e->input.synthetic_examples, e->numerics.seed);
  r->elems = ps_dataset_example_elems(r->ds);
  r->B = (int)e->global_batch;
  r->lr = (float)e->optimizer.learning_rate;
  r->x = g_new(float, (size_t)r->B * r->elems);
  r->y = g_new(int32_t, r->B);
  GError *error = NULL;
  PsNet *net = ps_net_new(m, 1, e->numerics.precision, e->numerics.seed, &error);
  g_assert_no_error(error);
  r->n = ps_net_n_params(net);
  r->w0 = g_memdup2(ps_net_params(net), sizeof(float) * r->n);
  ps_net_free(net);
}

static void ref_clear(Ref *r)
{
  for (int i = 0; i < 8; i++)
    ps_net_free(r->nets[i]);
  ps_dataset_free(r->ds);
  g_free(r->w0);
  g_free(r->x);
  g_free(r->y);
  ps_experiment_free(r->e);
}

/* The global batch of step `step` (1-based): run/numerics.c draws one global batch
 * per step from one sampler, replica r taking examples [r B/R, (r+1) B/R). */
static void ref_draw(Ref *r, int64_t step)
{
  if (r->step == step)
    return;
  PsSampler *sm = ps_sampler_new(r->ds, r->e->input.shuffle, r->e->numerics.seed);
  for (int64_t k = 0; k < step; k++)
    ps_sampler_next(sm, r->B, r->x, r->y);
  ps_sampler_free(sm);
  r->step = step;
}

static PsNet *ref_net(Ref *r, int batch)
{
  int i = 0;
  while (i < 8 && r->nets[i] && r->net_batch[i] != batch)
    i++;
  g_assert_cmpint(i, <, 8);
  if (!r->nets[i]) {
    GError *error = NULL;
    r->nets[i] = ps_net_new(r->e->model, batch, r->e->numerics.precision, r->e->numerics.seed,
                            &error);
    g_assert_no_error(error);
    r->net_batch[i] = batch;
  }
  return r->nets[i];
}

/* Gradient at weights w of examples [first, first + batch) of the drawn
 * batch, as a replica computes it (zero, forward, backward with
 * loss_scale).  (transfer none: the net's buffer, valid until the next
 * call with this batch size) */
static const float *ref_grad(Ref *r, const float *w, int first, int batch, float loss_scale)
{
  PsNet *net = ref_net(r, batch);
  memcpy(ps_net_params(net), w, sizeof(float) * r->n);
  ps_net_set_input(net, r->x + (size_t)first * r->elems, r->y + first, batch);
  ps_net_zero_grads(net);
  ps_net_forward(net);
  ps_net_backward(net, loss_scale);
  return ps_net_grads(net);
}

/* The logits of the last ref_grad of this batch size.  (transfer none) */
static const float *ref_logits(Ref *r, int batch, size_t *n)
{
  const PsModel *m = r->e->model;
  int last = m->n_layers - 1;
  g_assert_cmpint(m->layers[last].kind, ==, PS_LAYER_SOFTMAX_XENT);
  return ps_net_layer_output(ref_net(r, batch), m->layers[last].input_from, n);
}

/* One SGD step (momentum 0) as the optimizer does it.  (transfer full) */
static float *sgd_step(const Ref *r, const float *w, const float *g)
{
  float *out = g_memdup2(w, sizeof(float) * r->n);
  PsOptimizer *o = ps_optimizer_new_sgd(r->n, r->lr, 0.0f);
  ps_optimizer_step(o, out, g);
  ps_optimizer_free(o);
  return out;
}

/* Per element, over the R replicas' gradients g_r at w on step `step`
 * (each computed as its replica does: batch B/R, loss scale `scale`):
 * G = sum g_r and A = sum |g_r|, in double.  The sim's replicas compute
 * these same g_r bit for bit (same weights, examples, batch size and
 * kernels); only the collective's summation order is theirs. */
static void ref_replica_sums(Ref *r, const float *w, int64_t step, int R, float scale,
                             double *G, double *A)
{
  ref_draw(r, step);
  int b = r->B / R;
  memset(G, 0, sizeof(double) * r->n);
  memset(A, 0, sizeof(double) * r->n);
  for (int k = 0; k < R; k++) {
    const float *g = ref_grad(r, w, k * b, b, scale);
    for (size_t i = 0; i < r->n; i++) {
      G[i] += g[i];
      A[i] += fabs((double)g[i]);
    }
  }
}

/* w_end must be one SGD step (momentum 0) from w_start on some float sum
 * of the R replica gradients (any order or tree: a ring, a torus, a
 * reduce-scatter), i.e. w_end = fl(w_start - fl(lr g)) with
 * |g - G| <= gamma(R-1) A.  Then
 *   |w_end - (w_start - lr G)| <= lr |g - G| + u lr |g| + u/(1-u) |w_end|
 *                             <= lr (gamma(R-1) + u (1 + gamma(R-1))) A
 *                                + u/(1-u) |w_end|,
 * plus the double evaluation of the reference (G sums R floats, then lr G
 * and the difference round: (R + 2) DBL_EPSILON of its terms).  Returns
 * the largest |difference| / bound. */
static double check_step_any_order(Ref *r, const float *w_start, const float *w_end,
                                   int64_t step, int R, float scale, double *max_diff)
{
  g_autofree double *G = g_new(double, r->n);
  g_autofree double *A = g_new(double, r->n);
  ref_replica_sums(r, w_start, step, R, scale, G, A);
  double lr = r->lr, worst = 0, md = 0;
  for (size_t i = 0; i < r->n; i++) {
    double want = (double)w_start[i] - lr * G[i];
    double d = fabs((double)w_end[i] - want);
    double bound = lr * (gam(R - 1) + U * (1 + gam(R - 1))) * A[i] +
                   U / (1 - U) * fabs((double)w_end[i]) +
                   (R + 2) * DBL_EPSILON * (fabs((double)w_start[i]) + lr * A[i]) +
                   lr * R * FLT_TRUE_MIN; /* subnormal sums: absolute */
    if (d > bound)
      g_error("step %" G_GINT64_FORMAT ", %d replicas, weight %zu: %.9g, reference %.9g, "
              "differs by %.3g > bound %.3g", step, R, i, w_end[i], want, d, bound);
    worst = fmax(worst, d / bound);
    md = fmax(md, d);
  }
  if (max_diff)
    *max_diff = md;
  return worst;
}

/* ---- 1. mean over N replicas = one replica on the global batch ------- */

/* Largest |logit difference| between the one-replica forward pass (batch
 * B at weights w1) and the N replicas' (batch B/N each at weights wN) on
 * the drawn batch; *LN and *L1 receive the losses they give (the replicas'
 * averaged as run/numerics.c does). */
static double logits_gap(Ref *r, int N, const float *w1, const float *wN, double *L1,
                         double *LN)
{
  const int B = r->B, b = B / N;
  size_t nz;
  ref_grad(r, w1, 0, B, 1.0f);
  *L1 = ps_net_loss(ref_net(r, B));
  const float *z = ref_logits(r, B, &nz);
  g_autofree float *z1 = g_memdup2(z, sizeof(float) * nz);
  double gap = 0;
  *LN = 0;
  for (int q = 0; q < N; q++) {
    ref_grad(r, wN, q * b, b, 1.0f / (float)N);
    *LN += ps_net_loss(ref_net(r, b)) / N;
    size_t nq;
    const float *zq = ref_logits(r, b, &nq);
    for (size_t i = 0; i < nq; i++)
      gap = fmax(gap, fabs((double)zq[i] - z1[(size_t)q * nq + i]));
  }
  return gap;
}

/* One replica, STEPS steps: the reference trainer equals it bit for bit,
 * every step (same init, same batches, same kernels, same optimizer), and
 * it trained; one[k] is the run of k steps.  How far the weights moved. */
static double check_one_replica(Ref *r, char (*steps_ov)[16], int steps, PsSummary *one)
{
  const size_t n = r->n;
  const int B = r->B;
  const float *prev = r->w0;
  for (int k = 1; k <= steps; k++) {
    one[k] = runv(steps_ov[k], NULL);
    g_assert_cmpuint(one[k].n_params, ==, n);
    g_assert_cmpint(one[k].replicas, ==, 1);
    ref_draw(r, k);
    g_autofree float *want = sgd_step(r, prev, ref_grad(r, prev, 0, B, 1.0f));
    g_assert_cmpint(memcmp(want, one[k].params, sizeof(float) * n), ==, 0);
    prev = one[k].params;
  }
  /* and it trained */
  size_t moved;
  double dist = max_abs_diff(one[steps].params, r->w0, n, &moved);
  g_test_message("1 replica: %d steps moved %zu of %zu weights, by up to %.3g; loss %.7f -> "
                 "%.7f", steps, moved, n, dist, one[steps].loss_first, one[steps].loss_last);
  g_assert_cmpuint(moved, >, n / 2);
  g_assert_cmpfloat(one[steps].loss_last, <, one[steps].loss_first);
  return dist;
}

/* Step k of N replicas from the weights prev to wN, against the bound of
 * test_mean_matches_one; G and A are scratch of r->n.  The step's largest
 * bound. */
static double check_replica_step(Ref *r, const float *prev, const float *wN_all, int k, int N,
                                 double *G, double *A)
{
  const size_t n = r->n;
  const int B = r->B;
  /* the simulator's part alone (check_step_any_order) */
  double md_any;
  double worst_any = check_step_any_order(r, prev, wN_all, k, N, 1.0f / (float)N, &md_any);
  /* against the one-replica step from the same weights */
  ref_draw(r, k);
  const float *g1 = ref_grad(r, prev, 0, B, 1.0f);
  g_autofree float *w1 = sgd_step(r, prev, g1);
  ref_replica_sums(r, prev, k, N, 1.0f / (float)N, G, A);
  double worst = 0, md = 0, mb = 0, kern = 0, gmax = 0;
  size_t differ = 0;
  const double lr = r->lr;
  for (size_t i = 0; i < n; i++) {
    double wN = wN_all[i], d = fabs(wN - w1[i]);
    double gap = fabs(G[i] - g1[i]);
    double bound = lr * (gap + gam(N - 1) * A[i] + U * (1 + gam(N - 1)) * A[i] +
                         U * fabs((double)g1[i]) + N * DBL_EPSILON * A[i]) +
                   U / (1 - U) * (fabs(wN) + fabs((double)w1[i]));
    if (d > bound)
      g_error("%d replicas, step %d, weight %zu: %.9g vs one replica's %.9g: %.3g > "
              "bound %.3g", N, k, i, wN, w1[i], d, bound);
    worst = fmax(worst, d / bound);
    md = fmax(md, d);
    mb = fmax(mb, bound);
    kern = fmax(kern, gap);
    gmax = fmax(gmax, fabs((double)g1[i]));
    differ += d != 0;
  }
  /* the kernels' part is rounding, not arithmetic: a float dot product
   * of length K errs by about sqrt(K) u of its absolute sum in practice
   * (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019), at most
   * sqrt(784) u ~ 2e-6 per layer here, compounding over three layers:
   * well under 1e-5 of the largest gradient (a wrong example split or
   * scale would differ at O(1)) */
  g_assert_cmpfloat(kern, <=, 1e-5 * gmax);
  g_test_message("%d replicas, step %d: vs one step on the exact sum of the replicas' "
                 "gradients: max %.3g, worst diff/bound %.3f; vs the one-replica step: %zu "
                 "weights differ, max %.3g, largest bound %.3g, worst diff/bound %.3f; "
                 "kernels: max |G - g1| %.3g (max |g1| %.3g)", N, k, md_any, worst_any,
                 differ, md, mb, worst, kern, gmax);
  return mb;
}

/* losses: run/numerics.c averages the replicas' mean losses, each computed
 * in double from float logits, so they are what the reference nets give
 * (up to the order of that average: 1e-14).  Per example the loss
 * logsumexp(z) - z_label moves by at most 2 max_j |dz_j| (its gradient
 * p - onehot has 1-norm <= 2): so the N-replica and the one-replica loss
 * differ by at most twice the largest gap between their logits, which the
 * kernels' rounding and (for the last step) the weights' difference make.
 * one[k] and rep[k] are the runs of k steps of 1 and N replicas. */
static void check_replica_losses(Ref *r, int N, int steps, const PsSummary *one,
                                 const PsSummary *rep)
{
  const struct {
    const char *what;
    int step;
    const float *w1, *wN;
    double sim1, simN;
  } losses[] = {
      {"first", 1, r->w0, r->w0, one[steps].loss_first, rep[steps].loss_first},
      {"last", steps, one[steps - 1].params, rep[steps - 1].params, one[steps].loss_last,
       rep[steps].loss_last},
  };
  for (guint i = 0; i < G_N_ELEMENTS(losses); i++) {
    ref_draw(r, losses[i].step);
    double L1, LN;
    double gap = logits_gap(r, N, losses[i].w1, losses[i].wN, &L1, &LN);
    double L = losses[i].sim1, dL = fabs(losses[i].simN - L);
    g_test_message("%d replicas: loss_%s %.12f vs one replica's %.12f: differ by %.3g "
                   "(relative %.3g); logits differ by up to %.3g", N, losses[i].what,
                   losses[i].simN, L, dL, dL / L, gap);
    g_assert_cmpfloat(fabs(L1 - losses[i].sim1), <=, 1e-14 * L);
    g_assert_cmpfloat(fabs(LN - losses[i].simN), <=, 1e-14 * L);
    g_assert_cmpfloat(dL, <=, 2 * gap + 1e-13 * L);
    /* and, as a number to remember, far inside 1e-4 relative */
    g_assert_cmpfloat(dL, <=, 1e-4 * L);
  }
}

/* Replicas run the same arithmetic as one replica on smaller batches, and
 * that is not the same float arithmetic: BLAS rounds a row of a product
 * differently with the row count (here 81% of the first layer's outputs
 * differ between batches of 8 and 64, by up to 1.4e-6, a few ulps), so the
 * replicas' gradients g_r do not even sum the one replica's per-example
 * terms, and a worst-case bound on that (gamma(784) through three layers)
 * exceeds the training step itself.  So the bound splits the difference
 * into what the simulator does and what the kernels do, both computed:
 * at step k from the same weights w (the N-replica run's after k-1 steps),
 *   G  = sum_r g_r (double; the g_r recomputed bit-exactly: same weights,
 *        examples, batch size B/N and loss scale 1/N as the replica),
 *   g1 = the batch-B gradient (the one-replica run's, bit-exact),
 * the N-replica run steps on g_N, a float sum of the g_r in the ring's
 * order, |g_N - G| <= gamma(N-1) A with A = sum_r |g_r|; so
 *   |w_N - w_1| <= lr (|G - g1| + gamma(N-1) A + u (1 + gamma(N-1)) A
 *                  + u |g1|) + u/(1-u) (|w_N| + |w_1|)
 * (fl(lr g) and the new weight each round once), plus N DBL_EPSILON A lr
 * for G's own double rounding.  The kernels' part |G - g1| is reported. */
static void test_mean_matches_one(void)
{
  enum { STEPS = 4 };
  Ref r;
  ref_init(&r, loadv(NULL, NULL));
  const size_t n = r.n;
  char steps_ov[STEPS + 1][16];
  for (int k = 1; k <= STEPS; k++)
    g_snprintf(steps_ov[k], sizeof steps_ov[k], "steps=%d", k);

  PsSummary one[STEPS + 1];
  double dist = check_one_replica(&r, steps_ov, STEPS, one);

  g_autofree double *G = g_new(double, n);
  g_autofree double *A = g_new(double, n);
  const int Ns[] = {2, 4, 8};
  for (guint t = 0; t < G_N_ELEMENTS(Ns); t++) {
    const int N = Ns[t];
    char rep_ov[32];
    g_snprintf(rep_ov, sizeof rep_ov, "strategy.replicas=%d", N);
    PsSummary rep[STEPS + 1];
    double sum_local = 0;
    const float *prev = r.w0;
    for (int k = 1; k <= STEPS; k++) {
      rep[k] = runv(steps_ov[k], rep_ov, NULL);
      g_assert_cmpint(rep[k].replicas, ==, N);
      /* every replica ends the step with device 0's weights, so the next
       * step starts from rep[k].params everywhere */
      g_assert_cmpfloat(rep[k].replica_divergence, ==, 0.0);
      sum_local += check_replica_step(&r, prev, rep[k].params, k, N, G, A);
      prev = rep[k].params;
    }
    /* global, after STEPS steps: the local differences carry into later
     * steps through the gradient, which changes by lr H delta for a weight
     * difference delta; at lr 0.05 and rounding-sized random-sign deltas
     * that is small against delta (not bounded here: the per-step checks
     * above are the rigorous part), so we allow twice the sum of the
     * per-step largest bounds; the weights moved 10^4 times farther. */
    size_t differ;
    double d = max_abs_diff(rep[STEPS].params, one[STEPS].params, n, &differ);
    g_test_message("%d replicas vs 1 after %d steps: %zu weights differ, max %.3g (bound "
                   "%.3g; moved up to %.3g)", N, STEPS, differ, d, 2 * sum_local, dist);
    g_assert_cmpfloat(d, <=, 2 * sum_local);
    g_assert_cmpfloat(dist, >, 1e4 * 2 * sum_local);
    check_replica_losses(&r, N, STEPS, one, rep);
    for (int k = 1; k <= STEPS; k++)
      ps_summary_clear(&rep[k]);
  }
  for (int k = 1; k <= STEPS; k++)
    ps_summary_clear(&one[k]);
  ref_clear(&r);
}

/* ---- 2. replicas end bit-identical ------------------------------------ */

/* Gather phases copy (collective.h), and with weight-update sharding the
 * all-gather copies each shard's owner's weights; so every replica holds
 * device 0's weights exactly, whatever the algorithm or schedule. */
static void test_replicas_identical(void)
{
  const struct {
    const char *what;
    const char *ov[4];
  } cases[] = {
      {"ring, overlap", {"collective.algorithm=\"ring\"", NULL}},
      {"ring, no overlap", {"collective.algorithm=\"ring\"", "strategy.overlap=false", NULL}},
      {"auto, overlap", {"collective.algorithm=\"auto\"", NULL}},
      {"auto, no overlap", {"collective.algorithm=\"auto\"", "strategy.overlap=false", NULL}},
      {"bidir, bucket per layer", {"collective.algorithm=\"bidir\"", "strategy.bucket_bytes=1",
                                   NULL}},
      {"torus, bucket per layer", {"collective.algorithm=\"torus\"", "strategy.bucket_bytes=1",
                                   NULL}},
      {"ring, sharded update", {"strategy.weight_update_sharding=true", NULL}},
      {"auto, sharded update per layer",
       {"collective.algorithm=\"auto\"", "strategy.weight_update_sharding=true",
        "strategy.bucket_bytes=1", NULL}},
      {"auto, sharded Adam", {"collective.algorithm=\"auto\"", "optimizer.kind=\"adam\"",
                              "optimizer.learning_rate=0.001",
                              "strategy.weight_update_sharding=true"}},
  };
  PsExperiment *e0 = loadv(NULL, NULL);
  Ref r;
  ref_init(&r, e0);
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *const *o = cases[i].ov;
    PsSummary s = runv("strategy.replicas=8", "steps=3", o[0], o[1], o[2], o[3], NULL);
    size_t moved;
    double dist = max_abs_diff(s.params, r.w0, r.n, &moved);
    g_test_message("%s (%s, %d buckets): divergence %g; %zu weights moved, up to %.3g; loss "
                   "%.6f -> %.6f", cases[i].what, s.collective_algorithm, s.buckets,
                   s.replica_divergence, moved, dist, s.loss_first, s.loss_last);
    g_assert_cmpint(s.replicas, ==, 8);
    g_assert_cmpuint(moved, >, r.n / 2); /* it trained, so 0 is not for lack of change */
    g_assert_cmpfloat(s.replica_divergence, ==, 0.0);
    ps_summary_clear(&s);
  }
  ref_clear(&r);
}

/* ---- 3. "sum" moves N times as far as "mean" ---------------------------- */

/* With "mean" each replica's dlogits are (1/N)(1/(B/N))(p - y), with "sum"
 * (1/(B/N))(p - y): a factor of N, a power of two, which commutes with
 * every float rounding after it (no under- or overflow here), so the
 * summed gradients are exactly g_sum = N g_mean, and fl(lr N g) =
 * N fl(lr g) (with or without a fused multiply-add, lr N g is exactly N
 * times lr g).  The only roundings that differ are the final ones, w =
 * fl(w0 - c), each within u|w|; the differences w0 - w are exact in double:
 *   |(w0 - w_sum) - N (w0 - w_mean)| <= u |w_sum| + N u |w_mean|. */
static void test_sum_is_n_times_mean(void)
{
  Ref r;
  ref_init(&r, loadv(NULL, NULL));
  const int Ns[] = {2, 4, 8};
  const char *algos[] = {"collective.algorithm=\"ring\"", "collective.algorithm=\"auto\""};
  for (guint t = 0; t < G_N_ELEMENTS(Ns); t++)
    for (guint a = 0; a < G_N_ELEMENTS(algos); a++) {
      const int N = Ns[t];
      char rep_ov[32];
      g_snprintf(rep_ov, sizeof rep_ov, "strategy.replicas=%d", N);
      PsSummary mean = runv(rep_ov, algos[a], "steps=1", "optimizer.learning_rate=0.001",
                            NULL);
      PsSummary sum = runv(rep_ov, algos[a], "steps=1", "optimizer.learning_rate=0.001",
                           "strategy.loss_reduction=\"sum\"", NULL);
      /* the same forward pass: the reported (mean) loss is the same */
      g_assert_cmpfloat(sum.loss_first, ==, mean.loss_first);
      double worst = 0, md = 0, dmax = 0;
      size_t moved = 0, exact = 0;
      for (size_t i = 0; i < r.n; i++) {
        double w0 = r.w0[i], ws = sum.params[i], wm = mean.params[i];
        double d = fabs((w0 - ws) - N * (w0 - wm));
        double bound = U * fabs(ws) + N * U * fabs(wm);
        if (d > bound)
          g_error("%d replicas, weight %zu: w0 %.9g, sum %.9g, mean %.9g: |%.6g - %d x %.6g| "
                  "= %.3g > %.3g", N, i, w0, ws, wm, w0 - ws, N, w0 - wm, d, bound);
        if (bound > 0)
          worst = fmax(worst, d / bound);
        md = fmax(md, d);
        dmax = fmax(dmax, fabs(w0 - wm));
        moved += wm != w0;
        exact += d == 0;
      }
      g_test_message("%d replicas, %s: %zu of %zu weights moved (mean: up to %.3g); "
                     "|(w0 - w_sum) - N (w0 - w_mean)| max %.3g, worst diff/bound %.3f, exact "
                     "in %zu", N, sum.collective_algorithm, moved, r.n, dmax, md, worst, exact);
      /* a step far above the rounding: most weights moved */
      g_assert_cmpuint(moved, >, r.n / 2);
      g_assert_cmpfloat(dmax, >, 1e3 * md);
      ps_summary_clear(&mean);
      ps_summary_clear(&sum);
    }
  ref_clear(&r);
}

/* ---- 4. bucketing changes the summation order only ---------------------- */

/* Every replica computes the same gradients whatever the buckets (they
 * only decide when all-reduces start), so two runs with different buckets
 * start step 1 with the same g_r and differ only in the order the ring
 * adds them: the ring cuts each bucket into N blocks and block q's sum
 * starts at member q+1, so a different bucket cut moves an element to
 * another block and another starting member.  Each sum is within
 * gamma(N-1) A of the exact one (A = sum_r |g_r|), so
 *   |w_a - w_b| <= lr (2 gamma(N-1) + 2 u (1 + gamma(N-1))) A
 *                  + u/(1-u) (|w_a| + |w_b|).
 * Overlap only moves the COLL_STARTs: the same buckets, the same blocks,
 * the same order of additions, so the weights are bit-identical.  After
 * step 1 the runs' weights differ, so later steps are checked against
 * their own previous weights (check_step_any_order). */
static void test_bucketing_unchanged(void)
{
  enum { STEPS = 3 };
  Ref r;
  ref_init(&r, loadv("strategy.replicas=8", NULL));
  const int N = 8;
  const char *tiny = "strategy.bucket_bytes=1", *huge = "strategy.bucket_bytes=1000000000000";
  const char *on = "strategy.overlap=true", *off = "strategy.overlap=false";
  PsSummary tiny_on = runv("strategy.replicas=8", tiny, on, NULL);
  PsSummary tiny_off = runv("strategy.replicas=8", tiny, off, NULL);
  PsSummary huge_on = runv("strategy.replicas=8", huge, on, NULL);
  PsSummary huge_off = runv("strategy.replicas=8", huge, off, NULL);
  g_assert_cmpint(tiny_on.steps, ==, STEPS + 1);
  /* one bucket per layer group with parameters (three dense layers) */
  g_assert_cmpint(tiny_on.buckets, ==, 3);
  g_assert_cmpint(tiny_off.buckets, ==, 3);
  g_assert_cmpint(huge_on.buckets, ==, 1);
  g_assert_cmpint(huge_off.buckets, ==, 1);
  g_assert_cmpint(memcmp(tiny_on.params, tiny_off.params, sizeof(float) * r.n), ==, 0);
  g_assert_cmpint(memcmp(huge_on.params, huge_off.params, sizeof(float) * r.n), ==, 0);
  size_t differ;
  double d = max_abs_diff(tiny_on.params, huge_on.params, r.n, &differ);
  g_test_message("after %d steps: overlap on = off bit for bit (3 buckets and 1 bucket); 3 "
                 "buckets vs 1: %zu weights differ, by up to %.3g", STEPS + 1, differ, d);

  /* step 1, same start */
  PsSummary a = runv("strategy.replicas=8", tiny, "steps=1", NULL);
  PsSummary b = runv("strategy.replicas=8", huge, "steps=1", NULL);
  g_autofree double *G = g_new(double, r.n);
  g_autofree double *A = g_new(double, r.n);
  ref_replica_sums(&r, r.w0, 1, N, 1.0f / N, G, A);
  double worst = 0, md = 0;
  differ = 0;
  for (size_t i = 0; i < r.n; i++) {
    double wa = a.params[i], wb = b.params[i], dd = fabs(wa - wb);
    double bound = r.lr * (2 * gam(N - 1) + 2 * U * (1 + gam(N - 1))) * A[i] +
                   U / (1 - U) * (fabs(wa) + fabs(wb));
    if (dd > bound)
      g_error("step 1, weight %zu: 3 buckets %.9g, 1 bucket %.9g: %.3g > bound %.3g", i, wa, wb,
              dd, bound);
    worst = fmax(worst, dd / bound);
    md = fmax(md, dd);
    differ += dd != 0;
  }
  g_test_message("step 1: 3 buckets vs 1: %zu weights differ, max %.3g, worst diff/bound %.3f",
                 differ, md, worst);
  /* the last step of each, from its own weights */
  PsSummary a2 = runv("strategy.replicas=8", tiny, "steps=3", NULL);
  PsSummary b2 = runv("strategy.replicas=8", huge, "steps=3", NULL);
  double wa = check_step_any_order(&r, a2.params, tiny_on.params, STEPS + 1, N, 1.0f / N, NULL);
  double wb = check_step_any_order(&r, b2.params, huge_on.params, STEPS + 1, N, 1.0f / N, NULL);
  g_test_message("step %d from each run's own weights: worst diff/bound 3 buckets %.3f, 1 "
                 "bucket %.3f", STEPS + 1, wa, wb);
  PsSummary *all[] = {&tiny_on, &tiny_off, &huge_on, &huge_off, &a, &b, &a2, &b2};
  for (guint i = 0; i < G_N_ELEMENTS(all); i++)
    ps_summary_clear(all[i]);
  ref_clear(&r);
}

/* ---- 5. weight-update sharding ------------------------------------------ */

/* The base run at 8 replicas for 3 steps with overrides o (up to 4, NULL
 * ends them early), weight-update sharding off and on: the largest
 * difference between their final weights (and how many differ), and the
 * largest move of the sharded run's from the start (and how many moved).
 * The caller clears the summaries. */
typedef struct {
  PsSummary off, on;
  size_t differ, moved;
  double d, dist;
} WusPair;

static WusPair wus_pair(const Ref *r, const char *const o[4])
{
  WusPair p;
  p.off = runv("strategy.replicas=8", "steps=3", o[0], o[1], o[2], o[3], NULL);
  p.on = runv("strategy.replicas=8", "steps=3", "strategy.weight_update_sharding=true", o[0],
              o[1], o[2], o[3], NULL);
  p.d = max_abs_diff(p.on.params, p.off.params, r->n, &p.differ);
  p.dist = max_abs_diff(p.on.params, r->w0, r->n, &p.moved);
  return p;
}

/* A ring reduce-scatter runs exactly the reduce phase of the ring
 * all-reduce (algorithms.c: all-reduce = reduce-scatter phases, then
 * all-gather phases), so a replica's block of the bucket holds the same
 * float sums as after the all-reduce; its owner updates it elementwise as
 * the full update would (ps_optimizer_step_range over a partition equals
 * ps_optimizer_step, SGD and Adam alike), and the all-gather copies.  So
 * sharding on and off give bit-identical weights: checked with SGD and
 * Adam, one bucket and one per layer, ring, torus and bidir (the torus
 * and multiring reduce-scatters are likewise the all-reduce's reduce
 * phases, multiring's block in pieces, one per stream).  With auto, which
 * picks per collective and may take butterfly for a small bucket (whose
 * exchanges no reduce-scatter repeats), the weights agree to rounding, a
 * thousandth of what the steps moved them.  Also checked against the
 * rounding bound on its own. */
static void test_wus_unchanged(void)
{
  Ref r;
  ref_init(&r, loadv("strategy.replicas=8", NULL));
  const struct {
    const char *what;
    const char *ov[4];
  } cases[] = {
      {"ring SGD", {"collective.algorithm=\"ring\"", NULL}},
      {"ring SGD, bucket per layer", {"collective.algorithm=\"ring\"",
                                      "strategy.bucket_bytes=1", NULL}},
      {"ring Adam", {"collective.algorithm=\"ring\"", "optimizer.kind=\"adam\"",
                     "optimizer.learning_rate=0.001", NULL}},
      {"auto SGD", {"collective.algorithm=\"auto\"", NULL}},
      {"auto Adam, bucket per layer", {"collective.algorithm=\"auto\"", "optimizer.kind=\"adam\"",
                                       "optimizer.learning_rate=0.001",
                                       "strategy.bucket_bytes=1"}},
      {"torus SGD, bucket per layer", {"collective.algorithm=\"torus\"",
                                       "strategy.bucket_bytes=1", NULL}},
      {"bidir Adam", {"collective.algorithm=\"bidir\"", "optimizer.kind=\"adam\"",
                      "optimizer.learning_rate=0.001", NULL}},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *const *o = cases[i].ov;
    WusPair p = wus_pair(&r, o);
    PsSummary off = p.off, on = p.on;
    size_t differ = p.differ, moved = p.moved;
    double d = p.d, dist = p.dist;
    g_test_message("%s (%d buckets; algorithms %s / %s): sharded vs not: %zu weights differ "
                   "(max %.3g); moved %zu, up to %.3g", cases[i].what, on.buckets,
                   on.collective_algorithm, off.collective_algorithm, differ, d, moved, dist);
    g_assert_cmpuint(moved, >, r.n / 2);
    if (strstr(o[0], "auto")) {
      /* auto may take butterfly for a small bucket's all-reduce, whose
       * exchanges add in an order no reduce-scatter has: the same sums to
       * within rounding (three steps of float sums over 8 replicas, far
       * below what the steps moved the weights) */
      g_assert_cmpfloat(d, <, 1e-3 * dist);
    } else {
      g_assert_cmpint(memcmp(on.params, off.params, sizeof(float) * r.n), ==, 0);
      g_assert_cmpfloat(on.loss_last, ==, off.loss_last);
    }
    ps_summary_clear(&on);
    ps_summary_clear(&off);
  }
  /* step 1 with sharding against the bound, independently of the above */
  PsSummary s = runv("strategy.replicas=8", "steps=1", "strategy.weight_update_sharding=true",
                     "strategy.bucket_bytes=1", NULL);
  double worst = check_step_any_order(&r, r.w0, s.params, 1, 8, 1.0f / 8, NULL);
  g_test_message("sharded step 1 vs exact sum: worst diff/bound %.3f", worst);
  ps_summary_clear(&s);
  ref_clear(&r);
}

/* A layer-wise optimizer under weight-update sharding: each replica takes
 * its shard's sums of squares of each layer (LAMB after its moments), an
 * all-reduce adds the replicas' up, and each shard is updated with its
 * layers' whole norms.  Against the same run unsharded, whose update takes
 * each layer's norms in one pass over the whole layer: the same weights
 * but for the norms' summation order (a float sum of 8 partial sums), far
 * below what three steps moved them; taking a shard's own norms instead
 * (each piece its own trust ratio) moves the weights by a sizeable part of
 * a step.  LARS and LAMB, one bucket and one a layer, ring and multiring
 * (a shard in pieces, one a stream), and with the reduced gradient
 * clipped first (its norm all-reduced before the layers' sums are taken). */
static void test_wus_layerwise(void)
{
  Ref r;
  ref_init(&r, loadv("strategy.replicas=8", NULL));
  const char *lars[] = {"optimizer.kind=\"lars\"", "optimizer.learning_rate=0.5"};
  const char *lamb[] = {"optimizer.kind=\"lamb\"", "optimizer.learning_rate=0.01"};
  const struct {
    const char *what;
    const char *const *opt;
    const char *ov[3];
  } cases[] = {
      {"LARS, ring", lars, {"collective.algorithm=\"ring\"", NULL}},
      {"LAMB, ring", lamb, {"collective.algorithm=\"ring\"", NULL}},
      {"LARS, ring, bucket per layer", lars,
       {"collective.algorithm=\"ring\"", "strategy.bucket_bytes=1", NULL}},
      {"LAMB, multiring, bucket per layer", lamb,
       {"collective.algorithm=\"multiring\"", "strategy.bucket_bytes=1", NULL}},
      {"LAMB, ring, clipped", lamb, {"collective.algorithm=\"ring\"", "optimizer.clip_norm=0.05"}},
      {"LARS, multiring, clipped", lars,
       {"collective.algorithm=\"multiring\"", "optimizer.clip_norm=0.05"}},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *const *k = cases[i].opt;
    const char *o[4] = {k[0], k[1], cases[i].ov[0], cases[i].ov[1]};
    WusPair p = wus_pair(&r, o);
    g_test_message("%s (%d buckets, %s): sharded vs not: %zu weights differ (max %.3g); "
                   "moved %zu, up to %.3g; loss %.6f / %.6f", cases[i].what, p.on.buckets,
                   p.on.collective_algorithm, p.differ, p.d, p.moved, p.dist, p.on.loss_last,
                   p.off.loss_last);
    g_assert_cmpstr(p.on.collective_algorithm, ==, p.off.collective_algorithm);
    g_assert_cmpuint(p.moved, >, r.n / 2);
    g_assert_cmpfloat(p.d, <, 1e-4 * p.dist);
    g_assert_cmpfloat(fabs(p.on.loss_last - p.off.loss_last), <, 1e-5 * fabs(p.off.loss_last));
    ps_summary_clear(&p.on);
    ps_summary_clear(&p.off);
  }
  ref_clear(&r);
}

/* ---- 8. gradient clipping by global norm -------------------------------- */

static double l2(const double *x, size_t n)
{
  double ss = 0;
  for (size_t i = 0; i < n; i++)
    ss += x[i] * x[i];
  return sqrt(ss);
}

/* One SGD step of R = 4 replicas (loss scale 1/R) with
 * optimizer.clip_norm c, checked in double against its definition.
 * Before the reduction replica r scales its gradient g_r by
 * s_r = min(1, c R / ||g_r||) (the norm of its own mean loss's gradient)
 * and the replicas sum fl(s_r g_r) in some order: check_step_any_order's
 * bound over A = sum s_r |g_r|, plus 2 u A for the float s_r and the
 * product.  After it every replica scales the float sum g (|g - G| <=
 * gamma(R-1) A, G = sum g_r) by s = min(1, c / ||g||), which is S =
 * min(1, c / ||G||) within S (gamma(R-1) ||A|| / (||G|| - gamma(R-1)
 * ||A||) + u): the bound carries that through s g - S G.  c is 0.3 times
 * the smallest norm, so every factor clips, and the clipped step must
 * differ from the unclipped one by far more than the bound. */
static void check_clip_step(Ref *r, gboolean before, gboolean wus)
{
  enum { R = 4 };
  const int b = r->B / R;
  const float scale = 1.0f / R;
  const size_t n = r->n;
  g_autofree double *G = g_new0(double, n);
  g_autofree double *A = g_new0(double, n);
  g_autofree double *Gs = g_new0(double, n);
  g_autofree double *As = g_new0(double, n);
  double own[R], c = INFINITY;
  ref_draw(r, 1);
  for (int k = 0; k < R; k++) {
    const float *g = ref_grad(r, r->w0, k * b, b, scale);
    double ss = 0;
    for (size_t i = 0; i < n; i++) {
      ss += (double)g[i] * g[i];
      G[i] += g[i];
      A[i] += fabs((double)g[i]);
    }
    own[k] = sqrt(ss) / scale;
    c = fmin(c, 0.3 * own[k]);
  }
  double S = fmin(1.0, c / l2(G, n)), dS = S * U;
  if (before) {
    for (int k = 0; k < R; k++) { /* the clipped sum, again replica by replica */
      const float *g = ref_grad(r, r->w0, k * b, b, scale);
      double sk = fmin(1.0, c / own[k]);
      for (size_t i = 0; i < n; i++) {
        Gs[i] += sk * g[i];
        As[i] += sk * fabs((double)g[i]);
      }
    }
  } else {
    double gA = gam(R - 1) * l2(A, n);
    dS += S * gA / (l2(G, n) - gA);
    if (wus) /* each replica's sum of squares of its shard rounded to float,
              * the R of them added in float by the norm's all-reduce */
      dS += S * (U + gam(R - 1));
    for (size_t i = 0; i < n; i++) {
      Gs[i] = S * G[i];
      As[i] = S * A[i];
    }
  }
  char rep_ov[32], clip_ov[64], where_ov[64];
  g_snprintf(rep_ov, sizeof rep_ov, "strategy.replicas=%d", R);
  g_snprintf(clip_ov, sizeof clip_ov, "optimizer.clip_norm=%.17g", c);
  g_snprintf(where_ov, sizeof where_ov, "optimizer.clip_before_reduce=%s",
             before ? "true" : "false");
  const char *wus_ov = wus ? "strategy.weight_update_sharding=true" : NULL;
  PsSummary s = runv("steps=1", rep_ov, clip_ov, where_ov, wus_ov, NULL);
  double lr = r->lr, worst = 0, apart = 0;
  for (size_t i = 0; i < n; i++) {
    double want = (double)r->w0[i] - lr * Gs[i];
    double err = before ? (gam(R - 1) + U * (1 + gam(R - 1)) + 2 * U) * As[i]
                        : dS * (fabs(G[i]) + gam(R - 1) * A[i]) + S * gam(R - 1) * A[i] +
                              2 * U * As[i];
    double bound = lr * err + U / (1 - U) * fabs((double)s.params[i]) +
                   (R + 4) * DBL_EPSILON * (fabs((double)r->w0[i]) + lr * A[i]) +
                   lr * R * FLT_TRUE_MIN;
    double d = fabs((double)s.params[i] - want);
    if (d > bound)
      g_error("clip %s the reduction%s, weight %zu: %.9g, reference %.9g, differs by %.3g > "
              "bound %.3g", before ? "before" : "after", wus ? " (sharded update)" : "", i,
              s.params[i], want, d, bound);
    worst = fmax(worst, d / bound);
    apart = fmax(apart, lr * fabs(G[i] - Gs[i]) / bound);
  }
  g_test_message("clip %s the reduction%s at %.4g (own norms %.4g %.4g %.4g %.4g, reduced "
                 "%.4g): worst diff/bound %.3f; the unclipped step is up to %.3g bounds away",
                 before ? "before" : "after", wus ? " (sharded update)" : "", c, own[0], own[1], own[2], own[3], l2(G, n),
                 worst, apart);
  g_assert_cmpfloat(worst, <=, 1.0);
  g_assert_cmpfloat(apart, >, 1e4);
  ps_summary_clear(&s);
  /* a limit above every norm leaves the step bit for bit as without one */
  PsSummary none = runv("steps=1", rep_ov, wus_ov, NULL);
  PsSummary loose = runv("steps=1", rep_ov, "optimizer.clip_norm=1e30", where_ov, wus_ov, NULL);
  g_assert_cmpmem(none.params, n * sizeof(float), loose.params, n * sizeof(float));
  ps_summary_clear(&none);
  ps_summary_clear(&loose);
}

static void test_clip_numerics(void)
{
  Ref r;
  ref_init(&r, loadv(NULL, NULL));
  check_clip_step(&r, TRUE, FALSE);
  check_clip_step(&r, FALSE, FALSE);
  check_clip_step(&r, TRUE, TRUE);
  check_clip_step(&r, FALSE, TRUE);
  ref_clear(&r);
}

/* ---- 6. overlap hides communication (timing only) ----------------------- */

static const char *resnet_json =
    "{\"name\": \"overlap\", \"topology\": \"tpu-v3-8\", \"model\": \"resnet50\","
    " \"global_batch\": 64, \"steps\": 3, \"steps_per_run\": 1,"
    " \"input\": {\"source\": \"synthetic\", \"host_cost_per_example_s\": 0},"
    " \"numerics\": {\"enabled\": false}}";

static PsSummary run_path(const char *path, const char *first, ...) G_GNUC_NULL_TERMINATED;
static PsSummary run_path(const char *path, const char *first, ...)
{
  va_list ap;
  va_start(ap, first);
  PsSummary s = run_va(path, first, ap);
  va_end(ap);
  return s;
}

/* With overlap each bucket's all-reduce runs under the rest of the
 * backward pass, so less of it is exposed (COLLECTIVE in the breakdown)
 * and the step is shorter, while the ops, and so COMPUTE, are the same.
 * With one bucket and no overlap nothing overlaps: every replica starts
 * the one all-reduce when its backward pass ends, and the device the
 * summary reports (the one the collective waited for, run.h) waits for
 * exactly that all-reduce: ps_collective_predict_s's closed form, which
 * test_collectives holds to the simulated time within 0.5%. */
static void test_overlap_hides_communication(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "overlap.json", NULL);
  g_assert_true(g_file_set_contents(path, resnet_json, -1, NULL));
  PsSummary on = run_path(path, "strategy.overlap=true", NULL);
  PsSummary off = run_path(path, "strategy.overlap=false", NULL);
  PsSummary one = run_path(path, "strategy.overlap=false", "strategy.bucket_bytes=1000000000000",
                           NULL);
  g_assert_false(on.has_numerics);
  g_assert_cmpint(on.replicas, ==, 8);
  g_assert_cmpint(on.buckets, ==, off.buckets);
  g_assert_cmpint(on.buckets, >, 1);
  g_assert_cmpint(one.buckets, ==, 1);
  const double *bon = on.breakdown, *boff = off.breakdown, *bone = one.breakdown;
  g_test_message("ResNet-50, 8 replicas, %d buckets: overlap: step %.6g s, collective %.6g s, "
                 "compute %.6g s; no overlap: step %.6g s, collective %.6g s, compute %.6g s; "
                 "one bucket, no overlap: step %.6g s, collective %.6g s, compute %.6g s",
                 on.buckets, on.step_time_s, bon[PS_TIME_COLLECTIVE], bon[PS_TIME_COMPUTE],
                 off.step_time_s, boff[PS_TIME_COLLECTIVE], boff[PS_TIME_COMPUTE],
                 one.step_time_s, bone[PS_TIME_COLLECTIVE], bone[PS_TIME_COMPUTE]);
  g_assert_cmpfloat(bon[PS_TIME_COLLECTIVE], <, boff[PS_TIME_COLLECTIVE]);
  g_assert_cmpfloat(on.step_time_s, <, off.step_time_s);
  /* the same ops in the same order: the same sum of the same durations */
  g_assert_cmpfloat(bon[PS_TIME_COMPUTE], ==, boff[PS_TIME_COMPUTE]);
  g_assert_cmpfloat(bone[PS_TIME_COMPUTE], ==, boff[PS_TIME_COMPUTE]);

  /* the closed form of the one all-reduce */
  PsExperiment *e = load_va_path(path, NULL, NULL);
  PsEngine *engine = ps_engine_new();
  PsNetwork *net = ps_network_new(engine, e->topology, e->collective.chunk_bytes);
  int devs[8];
  for (int i = 0; i < 8; i++)
    devs[i] = i;
  PsCollSpec spec = {.op = PS_COLL_ALL_REDUCE, .algo = e->collective.algorithm, .devices = devs,
                     .n_members = 8, .count = e->model->params, .elem_bytes = 4};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(net, &spec, &error);
  g_assert_no_error(error);
  double want = ps_collective_predict_s(c);
  g_test_message("one all-reduce of %.1f MB (%s): predicted %.6g s, exposed %.6g s (%+.3f%%)",
                 e->model->params * 4 / 1e6, ps_collective_algo(c), want,
                 bone[PS_TIME_COLLECTIVE], 100 * (bone[PS_TIME_COLLECTIVE] / want - 1));
  g_assert_cmpstr(ps_collective_algo(c), ==, one.collective_algorithm);
  g_assert_cmpfloat(fabs(bone[PS_TIME_COLLECTIVE] - want), <, 0.005 * want);
  ps_collective_free(c);
  ps_network_free(net);
  ps_engine_free(engine);
  ps_experiment_free(e);
  ps_summary_clear(&on);
  ps_summary_clear(&off);
  ps_summary_clear(&one);
}

/* Timing, ResNet-50 on 8 replicas in f32: clipping costs its closed form,
 * the passes over the P gradients at the device's HBM bandwidth plus a
 * launch each: before the reduction a norm (4 P bytes) and a scaling pass
 * (8 P), after it the norm only (the update takes the factor).  Before
 * the reduction no bucket can start until the norm is known, so the step
 * is the one without overlap plus the clip, with the same collective time
 * exposed; after it, the step with overlap plus the norm, which reads 2 P
 * bytes where the gradients are stored in bf16 (numerics.weight_precision). */
static void test_clip_timing(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "clip.json", NULL);
  g_assert_true(g_file_set_contents(path, resnet_json, -1, NULL));
  PsExperiment *e = load_va_path(path, NULL, NULL);
  double P = (double)e->model->params, bw = ps_topology_device_hbm_bandwidth(e->topology);
  double launch = e->topology->op_overhead_s;
  ps_experiment_free(e);
  PsSummary on = run_path(path, NULL, NULL);
  PsSummary off = run_path(path, "strategy.overlap=false", NULL);
  PsSummary before = run_path(path, "optimizer.clip_norm=1", "optimizer.clip_before_reduce=true",
                              NULL);
  PsSummary after = run_path(path, "optimizer.clip_norm=1", NULL);
  PsSummary on16 = run_path(path, "numerics.weight_precision=bf16", NULL);
  PsSummary after16 =
      run_path(path, "optimizer.clip_norm=1", "numerics.weight_precision=bf16", NULL);
  const struct {
    const char *what;
    const PsSummary *s, *base;
    double want;
  } cases[] = {{"before", &before, &off, 12 * P / bw + 2 * launch},
               {"after", &after, &on, 4 * P / bw + launch},
               {"after, bf16 gradients", &after16, &on16, 2 * P / bw + launch}};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const double *b = cases[i].s->breakdown, *b0 = cases[i].base->breakdown;
    double dc = b[PS_TIME_COMPUTE] - b0[PS_TIME_COMPUTE];
    double ds = cases[i].s->step_time_s - cases[i].base->step_time_s;
    g_test_message("clip %s the reduction: compute +%.6g s, step +%.6g s, closed form %.6g s; "
                   "collective exposed %.6g s against %.6g s", cases[i].what, dc, ds,
                   cases[i].want, b[PS_TIME_COLLECTIVE], b0[PS_TIME_COLLECTIVE]);
    g_assert_cmpfloat(fabs(dc - cases[i].want), <, 1e-6 * cases[i].want);
    g_assert_cmpfloat(fabs(ds - cases[i].want), <, 1e-3 * cases[i].want);
    g_assert_cmpfloat(fabs(b[PS_TIME_COLLECTIVE] - b0[PS_TIME_COLLECTIVE]), <,
                      1e-3 * b0[PS_TIME_COLLECTIVE] + 1e-9);
  }
  /* and clipping before the reduction exposes what overlap would hide */
  g_assert_cmpfloat(before.breakdown[PS_TIME_COLLECTIVE], >, on.breakdown[PS_TIME_COLLECTIVE]);
  /* under weight-update sharding the norm reads the replica's shards, an
   * eighth of the weights (each bucket's rounded up: within a weight a
   * bucket), after every reduce-scatter and before any update, and a
   * one-float all-reduce adds the replicas' sums up: the step grows by
   * more than the norm's kernel */
  PsSummary wus = run_path(path, "strategy.weight_update_sharding=true", NULL);
  PsSummary wus_clip = run_path(path, "strategy.weight_update_sharding=true",
                                "optimizer.clip_norm=1", NULL);
  double dc = wus_clip.breakdown[PS_TIME_COMPUTE] - wus.breakdown[PS_TIME_COMPUTE];
  double want = 4 * (P / 8) / bw + launch, slack = 4.0 * wus.buckets / bw;
  g_test_message("clip after the reduction, sharded update (%d buckets): compute +%.6g s, step "
                 "+%.6g s, closed form %.6g s", wus.buckets, dc,
                 wus_clip.step_time_s - wus.step_time_s, want);
  g_assert_cmpint(wus.buckets, >, 1);
  g_assert_cmpfloat(fabs(dc - want), <=, slack + 1e-6 * want);
  g_assert_cmpfloat(wus_clip.step_time_s - wus.step_time_s, >, want);
  ps_summary_clear(&wus);
  ps_summary_clear(&wus_clip);
  ps_summary_clear(&on);
  ps_summary_clear(&off);
  ps_summary_clear(&before);
  ps_summary_clear(&after);
  ps_summary_clear(&on16);
  ps_summary_clear(&after16);
}

/* Weight-update sharding with a layer-wise optimizer (the plan): a replica
 * updates its shard of each layer, whose trust ratio needs the layer's
 * norms, so every reduce-scatter is done, then each shard's first pass
 * (its sums of squares of each layer), then one all-reduce over the
 * replicas carries two floats (the weights' and the update's) for each
 * adapted layer, in the norms' buffer after the clipping norm's float,
 * then the second passes; Adam's plan has none, and one pass a shard. */
static void test_wus_layer_norms(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "wus-norms.json", NULL);
  g_assert_true(g_file_set_contents(path, resnet_json, -1, NULL));
  const char *kinds[] = {"optimizer.kind=lamb", "optimizer.kind=lars", "optimizer.kind=adam"};
  for (guint k = 0; k < G_N_ELEMENTS(kinds); k++) {
    PsExperiment *e = load_va_path(path, "strategy.weight_update_sharding=true", kinds[k], NULL);
    GError *error = NULL;
    PsPlan *plan = ps_run_compile(e, &error);
    g_assert_no_error(error);
    int64_t layers = 0;
    for (int l = 0; l < e->model->n_layers; l++)
      layers += ps_layer_adapted_params(&e->model->layers[l]) > 0;
    g_assert_cmpint(layers, >, 0);
    const PsProgram *pr = ps_plan_program(plan, 0);
    int norms = -1, last_rs_done = -1, n_norms = 0, last_pass1 = -1, first_pass2 = -1;
    int n_pass1 = 0, n_pass2 = 0, n_whole = 0, first_whole = -1;
    for (int i = 0; i < pr->n_ops; i++) {
      const PsOp *op = &pr->ops[i];
      int c = op->kind == PS_OP_COLL_START || op->kind == PS_OP_COLL_DONE
                  ? ps_plan_op_coll(plan, 0, op)
                  : -1;
      const PsPlanColl *pc = c >= 0 ? &plan->colls[c] : NULL;
      if (pc && op->kind == PS_OP_COLL_DONE && pc->op == PS_COLL_REDUCE_SCATTER)
        last_rs_done = i;
      if (pc && op->kind == PS_OP_COLL_START && pc->buffer == PS_BUFFER_NORM) {
        norms = i;
        n_norms++;
        g_assert_cmpint(pc->op, ==, PS_COLL_ALL_REDUCE);
        g_assert_cmpint(pc->count, ==, 2 * layers);
        g_assert_cmpint(pc->offset, ==, 1); /* after the clipping norm's float */
        g_assert_cmpint(pc->n_members, ==, 8);
      }
      if (op->kind != PS_OP_UPDATE)
        continue;
      if (op->update_pass == 1) {
        last_pass1 = i;
        n_pass1++;
      } else if (op->update_pass == 2) {
        first_pass2 = first_pass2 < 0 ? i : first_pass2;
        n_pass2++;
      } else {
        first_whole = first_whole < 0 ? i : first_whole;
        n_whole++;
      }
    }
    g_test_message("%s: %" G_GINT64_FORMAT " adapted layers, norms' all-reduce at op %d, last "
                   "reduce-scatter done at %d, updates: %d first passes (last at %d), %d "
                   "second (first at %d), %d whole (first at %d)", kinds[k], layers, norms,
                   last_rs_done, n_pass1, last_pass1, n_pass2, first_pass2, n_whole,
                   first_whole);
    if (k < 2) {
      /* every reduce-scatter, every first pass, the norms, every second pass */
      g_assert_cmpint(n_norms, ==, 1);
      g_assert_cmpint(n_pass1, ==, n_pass2);
      g_assert_cmpint(n_pass1, >, 0);
      g_assert_cmpint(n_whole, ==, 0);
      g_assert_cmpint(last_rs_done, <, last_pass1);
      g_assert_cmpint(last_pass1, <, norms);
      g_assert_cmpint(norms, <, first_pass2);
    } else {
      g_assert_cmpint(n_norms, ==, 0);
      g_assert_cmpint(n_pass1 + n_pass2, ==, 0);
      g_assert_cmpint(n_whole, >, 0);
    }
    ps_plan_free(plan);
    ps_experiment_free(e);
  }
}

/* ---- 7. replicas default to every device -------------------------------- */

static const char *default_json =
    "{\"name\": \"all-devices\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 64, \"steps\": 2,"
    " \"strategy\": {\"kind\": \"replicate\"},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 256,"
    "             \"host_cost_per_example_s\": 0},"
    " \"numerics\": {\"enabled\": true, \"seed\": 7, \"evaluate\": false}}";

static void test_default_replicas(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "all-devices.json", NULL);
  g_assert_true(g_file_set_contents(path, default_json, -1, NULL));
  PsExperiment *e = load_va_path(path, NULL, NULL);
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 8);
  g_assert_cmpint(ps_experiment_devices_used(e), ==, 8);
  ps_experiment_free(e);
  PsSummary s = run_path(path, NULL, NULL);
  g_assert_cmpint(s.replicas, ==, 8);
  g_assert_cmpint(s.devices, ==, 8);
  g_assert_cmpint(s.stages, ==, 1);
  g_assert_cmpfloat(s.replica_divergence, ==, 0.0);
  ps_summary_clear(&s);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  tmpdir = scratch_dir("podsim-test-replicate");
  base_path = scratch_write(tmpdir, "replicate.json", base_json);
  g_test_add_func("/replicate/mean-matches-one-replica", test_mean_matches_one);
  g_test_add_func("/replicate/replicas-identical", test_replicas_identical);
  g_test_add_func("/replicate/sum-is-n-times-mean", test_sum_is_n_times_mean);
  g_test_add_func("/replicate/bucketing-unchanged", test_bucketing_unchanged);
  g_test_add_func("/replicate/wus-unchanged", test_wus_unchanged);
  g_test_add_func("/replicate/overlap-hides-communication", test_overlap_hides_communication);
  g_test_add_func("/replicate/default-replicas-all-devices", test_default_replicas);
  g_test_add_func("/replicate/clip/numerics", test_clip_numerics);
  g_test_add_func("/replicate/clip/timing", test_clip_timing);
  g_test_add_func("/replicate/wus/layer-norms", test_wus_layer_norms);
  g_test_add_func("/replicate/wus/layerwise", test_wus_layerwise);
  int rc = g_test_run();
  scratch_remove(tmpdir);
  g_free(tmpdir);
  g_free(base_path);
  return rc;
}

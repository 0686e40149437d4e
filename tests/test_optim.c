/* test_optim.c: the layer-wise optimizers and batch normalization.
 * LARS and LAMB against a plain double-precision loop of their update
 * rules over a small set of layers (adapted and not), in one step and as
 * a sharded update takes it (pieces, their norms summed between two
 * passes); their update cost against its closed form (bytes, launches,
 * time; gradients read in bf16 after a bf16 reduction); the batch
 * normalization kernels against finite differences of a double-precision
 * forward, and G replicas' shares with their moments summed against one
 * device's whole batch, within a bound derived from float rounding. */
#include "hw/cost.h"
#include "model/kernels.h"
#include "model/net.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

#define N_PARAMS 40
static const PsOptSegment segs[] = {{0, 24, TRUE}, {24, 4, FALSE}, {28, 12, TRUE}};

static void fill(GRand *rng, float *x, size_t n, double scale)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(g_rand_double_range(rng, -1.0, 1.0) * scale);
}

/* Plain double loops of the rules (the papers' algorithms). */
static void ref_lars(double *w, const float *g, double *v, const PsLayerwiseConfig *c)
{
  for (int s = 0; s < 3; s++) {
    size_t o = segs[s].off, n = segs[s].len;
    double wn = 0, gn = 0;
    for (size_t i = o; i < o + n; i++) {
      wn += w[i] * w[i];
      gn += (double)g[i] * g[i];
    }
    wn = sqrt(wn);
    gn = sqrt(gn);
    double ratio = c->eta * wn / (gn + c->weight_decay * wn);
    for (size_t i = o; i < o + n; i++) {
      if (segs[s].adapt) {
        v[i] = c->momentum * v[i] + c->lr * ratio * (g[i] + c->weight_decay * w[i]);
        w[i] -= v[i];
      } else {
        v[i] = c->momentum * v[i] + g[i];
        w[i] -= c->lr * v[i];
      }
    }
  }
}

static void ref_lamb(double *w, const float *g, double *m, double *v, int t,
                     const PsLayerwiseConfig *c)
{
  for (int s = 0; s < 3; s++) {
    size_t o = segs[s].off, n = segs[s].len;
    double wd = segs[s].adapt ? c->weight_decay : 0, u[N_PARAMS], wn = 0, un = 0;
    for (size_t i = o; i < o + n; i++) {
      m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
      v[i] = c->beta2 * v[i] + (1 - c->beta2) * (double)g[i] * g[i];
      double mh = m[i] / (1 - pow(c->beta1, t)), vh = v[i] / (1 - pow(c->beta2, t));
      u[i] = mh / (sqrt(vh) + c->eps) + wd * w[i];
      wn += w[i] * w[i];
      un += u[i] * u[i];
    }
    double ratio = segs[s].adapt ? sqrt(wn) / sqrt(un) : 1.0;
    for (size_t i = o; i < o + n; i++)
      w[i] -= c->lr * ratio * u[i];
  }
}

/* One step as a sharded update takes it: three devices' pieces of the
 * range (cutting both adapted segments), each piece's sums of squares
 * added into one float array (the all-reduce), then each piece stepped. */
static void split_step(PsOptimizer *opt, float *w, const float *g, int64_t t)
{
  static const size_t cut[] = {0, 7, 26, N_PARAMS};
  float sums[4] = {0};
  g_assert_cmpint(ps_optimizer_layer_count(opt, 0, N_PARAMS), ==, 2);
  for (int k = 0; k < 3; k++)
    g_assert_cmpint(ps_optimizer_layer_sums(opt, w, g, 0, N_PARAMS, cut[k], cut[k + 1] - cut[k],
                                            t, sums), ==, 2);
  for (int k = 0; k < 3; k++)
    g_assert_cmpint(ps_optimizer_layer_apply(opt, w, g, 0, N_PARAMS, cut[k],
                                             cut[k + 1] - cut[k], t, sums), ==, 2);
}

static void check_layerwise(gboolean lamb, gboolean split)
{
  PsLayerwiseConfig c = {.lamb = lamb, .lr = 0.5f, .momentum = 0.9f, .eta = 0.02f,
                         .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f};
  PsOptimizer *opt = ps_optimizer_new_layerwise(&c, N_PARAMS, segs, 3);
  GRand *rng = g_rand_new_with_seed(7);
  float w[N_PARAMS], g[N_PARAMS];
  double wd[N_PARAMS], m[N_PARAMS] = {0}, v[N_PARAMS] = {0};
  fill(rng, w, N_PARAMS, 1.0);
  for (int i = 0; i < N_PARAMS; i++)
    wd[i] = w[i];
  for (int t = 1; t <= 4; t++) {
    fill(rng, g, N_PARAMS, 0.1);
    if (split)
      split_step(opt, w, g, t);
    else
      ps_optimizer_step(opt, w, g);
    if (lamb)
      ref_lamb(wd, g, m, v, t, &c);
    else
      ref_lars(wd, g, m, &c);
  }
  double moved = 0;
  for (int i = 0; i < N_PARAMS; i++) {
    /* float rounding of a few operations a step on weights of order 1 */
    g_assert_cmpfloat(fabs(w[i] - wd[i]), <=, 1e-5 * (1 + fabs(wd[i])));
    moved += fabs(w[i] - (float)wd[i]);
  }
  g_assert_cmpfloat(moved, <, 1e-3);
  g_rand_free(rng);
  ps_optimizer_free(opt);
}

static void test_lars_loop(void)
{
  check_layerwise(FALSE, FALSE);
}

static void test_lamb_loop(void)
{
  check_layerwise(TRUE, FALSE);
}

/* A segment's step touches only its range: a bias segment gets plain
 * momentum even where a weight beside it is huge. */
/* The two passes over pieces of the range, the norms' sums added up
 * between them, against the same plain loops: a trust ratio from each
 * piece's own norms would be far off (the pieces cut both layers). */
static void test_layerwise_split(void)
{
  check_layerwise(FALSE, TRUE);
  check_layerwise(TRUE, TRUE);
}

static void test_segments_independent(void)
{
  PsLayerwiseConfig c = {.lr = 0.1f, .momentum = 0.0f, .eta = 0.001f};
  PsOptimizer *opt = ps_optimizer_new_layerwise(&c, N_PARAMS, segs, 3);
  float w[N_PARAMS], g[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) {
    w[i] = i < 24 ? 1000.0f : 1.0f;
    g[i] = 1.0f;
  }
  ps_optimizer_step(opt, w, g);
  for (int i = 24; i < 28; i++)
    g_assert_cmpfloat(w[i], ==, 1.0f - 0.1f);
  /* adapted: ratio eta ||w|| / ||g|| = 0.001 * 1000 sqrt(24) / sqrt(24) = 1 */
  g_assert_cmpfloat(fabs(w[0] - (1000.0f - 0.1f)), <, 1e-3);
  ps_optimizer_free(opt);
}

/* ---- cost ---------------------------------------------------------------- */

static double pass_s(const PsTopology *t, double bytes, double flops, int launches)
{
  double vpu = t->vpu_flops / ps_topology_devices_per_chip(t);
  return fmax(bytes / ps_topology_device_hbm_bandwidth(t), vpu > 0 ? flops / vpu : 0) +
         launches * t->op_overhead_s;
}

static void test_update_cost(void)
{
  PsTopology *t = topology_load("tpu-v3-8", NULL);
  const int64_t P = 25000000, A = 24000000;
  const int L = 53;
  PsOpCost c;
  PsUpdateShape lars = {PS_OPT_LARS, P, A, L, 4, 0, 0};
  ps_cost_optimizer(t, &lars, &c);
  g_assert_cmpfloat(c.bytes, ==, 8.0 * A + 20.0 * P);
  g_assert_cmpint(c.kernels, ==, L + 1);
  double want = pass_s(t, 8.0 * A, 4.0 * A, L) + pass_s(t, 20.0 * P, 5.0 * P + 2.0 * A, 1);
  g_assert_cmpfloat(fabs(ps_time_to_s(c.time) - want), <, 1e-9);
  PsUpdateShape lamb = {PS_OPT_LAMB, P, A, L, 4, 0, 0};
  ps_cost_optimizer(t, &lamb, &c);
  g_assert_cmpfloat(c.bytes, ==, 40.0 * P);
  g_assert_cmpint(c.kernels, ==, L + 2);
  want = pass_s(t, 24.0 * P, 12.0 * P, L + 1) + pass_s(t, 16.0 * P, 6.0 * P, 1);
  g_assert_cmpfloat(fabs(ps_time_to_s(c.time) - want), <, 1e-9);
  /* a sharded update runs the two passes apart (pass 1, pass 2): each its
   * own closed form above, the two adding up to the whole */
  const struct {
    PsOptimizerKind kind;
    double bytes[2], flops[2];
    int launches[2];
  } passes[] = {
      {PS_OPT_LARS, {8.0 * A, 20.0 * P}, {4.0 * A, 5.0 * P + 2.0 * A}, {L, 1}},
      {PS_OPT_LAMB, {24.0 * P, 16.0 * P}, {12.0 * P, 6.0 * P}, {L + 1, 1}},
  };
  for (guint i = 0; i < G_N_ELEMENTS(passes); i++) {
    PsOpCost whole, part[2];
    PsUpdateShape u = {passes[i].kind, P, A, L, 4, 0, 0};
    ps_cost_optimizer(t, &u, &whole);
    for (int k = 0; k < 2; k++) {
      u.pass = k + 1;
      ps_cost_optimizer(t, &u, &part[k]);
      g_assert_cmpfloat(part[k].bytes, ==, passes[i].bytes[k]);
      g_assert_cmpint(part[k].kernels, ==, passes[i].launches[k]);
      want = pass_s(t, passes[i].bytes[k], passes[i].flops[k], passes[i].launches[k]);
      g_assert_cmpfloat(fabs(ps_time_to_s(part[k].time) - want), <, 1e-9);
    }
    g_assert_cmpfloat(part[0].bytes + part[1].bytes, ==, whole.bytes);
    g_assert_cmpint(part[0].kernels + part[1].kernels, ==, whole.kernels);
    g_assert_cmpfloat(fabs(ps_time_to_s(part[0].time + part[1].time - whole.time)), <, 1e-9);
  }
  /* SGD and Adam keep their one kernel */
  PsUpdateShape adam = {PS_OPT_ADAM, P, A, L, 4, 0, 0};
  ps_cost_optimizer(t, &adam, &c);
  g_assert_cmpfloat(c.bytes, ==, 28.0 * P);
  g_assert_cmpint(c.kernels, ==, 1);
  /* weights, gradients and slots in bf16: half the bytes, the same FLOPs */
  double flops = c.flops;
  adam.state_bytes = 2;
  ps_cost_optimizer(t, &adam, &c);
  g_assert_cmpfloat(c.bytes, ==, 14.0 * P);
  g_assert_cmpfloat(c.flops, ==, flops);
  lamb.state_bytes = 2;
  ps_cost_optimizer(t, &lamb, &c);
  g_assert_cmpfloat(c.bytes, ==, 20.0 * P);
  /* float32 state, gradients read in bf16 after a bf16 reduction: each
   * pass that reads g reads 2 bytes of it, not 4; the FLOPs stay */
  PsUpdateShape g16[] = {{PS_OPT_ADAM, P, A, L, 4, 0, 2},
                         {PS_OPT_SGD, P, A, L, 4, 0, 2},
                         {PS_OPT_LARS, P, A, L, 4, 0, 2},
                         {PS_OPT_LAMB, P, A, L, 4, 0, 2},
                         {PS_OPT_LAMB, P, A, L, 4, 2, 2}};
  const double g16_bytes[] = {26.0 * P, 18.0 * P, 6.0 * A + 18.0 * P, 22.0 * P + 16.0 * P,
                              16.0 * P};
  for (guint i = 0; i < G_N_ELEMENTS(g16); i++) {
    PsOpCost f32;
    PsUpdateShape u = g16[i];
    ps_cost_optimizer(t, &u, &c);
    u.grad_bytes = 0;
    ps_cost_optimizer(t, &u, &f32);
    g_assert_cmpfloat(c.bytes, ==, g16_bytes[i]);
    g_assert_cmpfloat(c.flops, ==, f32.flops);
    g_assert_cmpint(c.kernels, ==, f32.kernels);
  }
  ps_topology_free(t);
}

/* Weights and slots stored in bf16 (ps_optimizer_set_state_bf16): an Adam
 * step over [8, 32) of 40 against a plain double loop of Adam's rule from
 * the same state, rounded to bf16 (round to nearest even, ps_bf16_round)
 * after the step: weights and both moments equal the loop's within the
 * float32 arithmetic's error before rounding (so to the bf16 value, or its
 * neighbour where the two straddle a rounding boundary), every one of
 * them a bf16 value; outside the range nothing moves. */
static void test_adam_bf16_state(void)
{
  g_autoptr(GRand) rng = g_rand_new_with_seed(7);
  float w[N_PARAMS], g[N_PARAMS], w0[N_PARAMS];
  fill(rng, w, N_PARAMS, 1.0);
  fill(rng, g, N_PARAMS, 0.1);
  ps_bf16_round_array(w, w, N_PARAMS); /* stored in bf16 from the start */
  memcpy(w0, w, sizeof w);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  PsOptimizer *opt = ps_optimizer_new_adam(N_PARAMS, (float)lr, (float)b1, (float)b2, (float)eps);
  ps_optimizer_set_state_bf16(opt, TRUE);
  const size_t off = 8, len = 24;
  double m[N_PARAMS] = {0}, v[N_PARAMS] = {0}, ref[N_PARAMS];
  for (int t = 1; t <= 3; t++) {
    ps_optimizer_step_range(opt, w, g, off, len, t);
    for (size_t i = off; i < off + len; i++) {
      m[i] = ps_bf16_round((float)(b1 * m[i] + (1 - b1) * g[i]));
      v[i] = ps_bf16_round((float)(b2 * v[i] + (1 - b2) * (double)g[i] * g[i]));
      double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
      double prev = t == 1 ? w0[i] : ref[i];
      ref[i] = ps_bf16_round((float)(prev - lr * mh / (sqrt(vh) + eps)));
    }
    for (size_t i = off; i < off + len; i++) {
      g_assert_cmpfloat(w[i], ==, ps_bf16_round(w[i]));
      /* one bf16 ulp of the value at most (8 bits of mantissa) */
      g_assert_cmpfloat(fabs(w[i] - ref[i]), <=, fabs(ref[i]) * 0x1p-7 + 1e-30);
      ref[i] = w[i]; /* continue from what the optimizer stored */
    }
  }
  for (size_t i = 0; i < N_PARAMS; i++)
    if (i < off || i >= off + len)
      g_assert_cmpfloat(w[i], ==, w0[i]);
  ps_optimizer_free(opt);
}

/* ---- batch normalization ------------------------------------------------- */

#define BN_ROWS 16
#define BN_C 4

/* Double forward: y = gamma (x - mean) / sqrt(var + eps) + beta per channel. */
static void bn_ref(const double *x, const double *gamma, const double *beta, double *y, int rows)
{
  for (int c = 0; c < BN_C; c++) {
    double m = 0, v = 0;
    for (int r = 0; r < rows; r++)
      m += x[r * BN_C + c];
    m /= rows;
    for (int r = 0; r < rows; r++)
      v += (x[r * BN_C + c] - m) * (x[r * BN_C + c] - m);
    v /= rows;
    for (int r = 0; r < rows; r++)
      y[r * BN_C + c] = gamma[c] * (x[r * BN_C + c] - m) / sqrt(v + PS_BATCHNORM_EPS) + beta[c];
  }
}

static double bn_loss(const double *x, const double *gamma, const double *beta, const float *dy)
{
  double y[BN_ROWS * BN_C], l = 0;
  bn_ref(x, gamma, beta, y, BN_ROWS);
  for (int i = 0; i < BN_ROWS * BN_C; i++)
    l += y[i] * dy[i];
  return l;
}

/* d loss / d *p, p one of the inputs x, gamma, beta */
static double central_difference(double *x, double *gamma, double *beta, const float *dy,
                                 double *p)
{
  const double h = 1e-4, keep = *p;
  *p = keep + h;
  double up = bn_loss(x, gamma, beta, dy);
  *p = keep - h;
  double down = bn_loss(x, gamma, beta, dy);
  *p = keep;
  return (up - down) / (2 * h);
}

static void test_bn_finite_differences(void)
{
  GRand *rng = g_rand_new_with_seed(3);
  float x[BN_ROWS * BN_C], dy[BN_ROWS * BN_C], gamma[BN_C], beta[BN_C];
  fill(rng, x, BN_ROWS * BN_C, 2.0);
  fill(rng, dy, BN_ROWS * BN_C, 1.0);
  fill(rng, gamma, BN_C, 1.0);
  fill(rng, beta, BN_C, 1.0);
  float mom[2 * BN_C], stats[2 * BN_C], y[BN_ROWS * BN_C], dx[BN_ROWS * BN_C];
  float dg[BN_C] = {0}, db[BN_C] = {0};
  ps_batchnorm_moments(x, BN_ROWS, BN_C, 1, mom);
  ps_batchnorm_normalize(x, gamma, beta, mom, y, stats, BN_ROWS, BN_C);
  ps_batchnorm_grad_moments(x, stats, dy, BN_ROWS, BN_C, 1, dg, db, mom);
  ps_batchnorm_input_grad(x, gamma, stats, mom, dy, dx, BN_ROWS, BN_C);
  double xd[BN_ROWS * BN_C], gd[BN_C], bd[BN_C], yd[BN_ROWS * BN_C];
  for (int i = 0; i < BN_ROWS * BN_C; i++)
    xd[i] = x[i];
  for (int c = 0; c < BN_C; c++) {
    gd[c] = gamma[c];
    bd[c] = beta[c];
  }
  bn_ref(xd, gd, bd, yd, BN_ROWS);
  for (int i = 0; i < BN_ROWS * BN_C; i++)
    g_assert_cmpfloat(fabs(y[i] - yd[i]), <, 1e-5);
  for (int i = 0; i < BN_ROWS * BN_C; i++)
    g_assert_cmpfloat(fabs(central_difference(xd, gd, bd, dy, &xd[i]) - dx[i]), <, 1e-4);
  for (int c = 0; c < BN_C; c++) {
    g_assert_cmpfloat(fabs(central_difference(xd, gd, bd, dy, &gd[c]) - dg[c]), <, 1e-4);
    g_assert_cmpfloat(fabs(central_difference(xd, gd, bd, dy, &bd[c]) - db[c]), <, 1e-4);
  }
  g_rand_free(rng);
}

/* G replicas with BN_ROWS / G rows each, their moments summed (the
 * all-reduce): the outputs of one device's whole batch.  Bound: each
 * share's moment is a double sum rounded once to float, the sum of G
 * adds G - 1 roundings, so each moment is off by at most G u of the sum
 * of its terms' magnitudes (u = 2^-24); the variance then by the error of
 * E[x^2] plus 2 |mean| that of the mean, rstd by 1/2 rstd^3 that, and y
 * by |gamma| (rstd d(mean) + |x - mean| d(rstd)), doubled, plus a few ulp
 * of y for the normalization's own rounding. */
static void check_group(int G)
{
  GRand *rng = g_rand_new_with_seed(11 + G);
  float x[BN_ROWS * BN_C], gamma[BN_C], beta[BN_C];
  fill(rng, x, BN_ROWS * BN_C, 3.0);
  for (int i = 0; i < BN_ROWS * BN_C; i++)
    x[i] += 1.5f; /* a mean away from zero */
  fill(rng, gamma, BN_C, 1.0);
  fill(rng, beta, BN_C, 1.0);
  float mom[2 * BN_C], stats[2 * BN_C], y[BN_ROWS * BN_C];
  ps_batchnorm_moments(x, BN_ROWS, BN_C, 1, mom);
  ps_batchnorm_normalize(x, gamma, beta, mom, y, stats, BN_ROWS, BN_C);
  int rows = BN_ROWS / G;
  float sum[2 * BN_C] = {0}, part[2 * BN_C], yg[BN_ROWS * BN_C], sg[2 * BN_C];
  for (int k = 0; k < G; k++) {
    ps_batchnorm_moments(x + (size_t)k * rows * BN_C, rows, BN_C, G, part);
    for (int j = 0; j < 2 * BN_C; j++)
      sum[j] += part[j];
  }
  for (int k = 0; k < G; k++)
    ps_batchnorm_normalize(x + (size_t)k * rows * BN_C, gamma, beta, sum,
                           yg + (size_t)k * rows * BN_C, sg, rows, BN_C);
  const double u = 1.0 / (1 << 24);
  for (int c = 0; c < BN_C; c++) {
    double abs_mean = 0, sq = 0, m = stats[c], rstd = stats[BN_C + c];
    for (int r = 0; r < BN_ROWS; r++) {
      abs_mean += fabs(x[r * BN_C + c]) / BN_ROWS;
      sq += (double)x[r * BN_C + c] * x[r * BN_C + c] / BN_ROWS;
    }
    double dm = (G + 1) * u * abs_mean, dvar = (G + 1) * u * sq + 2 * fabs(m) * dm + 4 * u * sq;
    double drstd = 0.5 * rstd * rstd * rstd * dvar + 2 * u * rstd;
    for (int r = 0; r < BN_ROWS; r++) {
      int i = r * BN_C + c;
      double bound = 2 * fabs(gamma[c]) * (rstd * dm + fabs(x[i] - m) * drstd) +
                     8 * u * (fabs(y[i]) + fabs(beta[c]) + 1);
      g_assert_cmpfloat(fabs(yg[i] - y[i]), <=, bound);
    }
  }
  g_rand_free(rng);
}

static void test_bn_group(void)
{
  check_group(1);
  check_group(2);
  check_group(4);
  check_group(8);
}

/* ---- a run with statistics all-reduced in groups ------------------------ */

static PsSummary run_resnet(const char *replicas, const char *group)
{
  const char *const ov[] = {replicas, group, "global_batch=16", "steps=2", "steps_per_run=2",
                            "input.source=synthetic", "numerics.evaluate=false",
                            "optimizer.kind=lamb", "optimizer.learning_rate=0.01", NULL};
  PsExperiment *e = experiment_load("experiments/resnet-small-bn.json", ov);
  PsSummary s = experiment_run(e);
  ps_experiment_free(e);
  return s;
}

static double max_diff(const PsSummary *a, const PsSummary *b)
{
  g_assert_cmpuint(a->n_params, ==, b->n_params);
  double worst = 0;
  for (size_t i = 0; i < a->n_params; i++)
    worst = fmax(worst, fabs((double)a->params[i] - b->params[i]));
  return worst;
}

/* Two replicas of 8 examples whose batch norms all-reduce their moments
 * train as one device with the 16: the same first loss and, after two
 * steps, the same weights up to float rounding (the moments are summed in
 * another order, LAMB's steps are about 1e-2); with each replica's own
 * statistics they do not. */
static void test_bn_group_run(void)
{
  PsSummary one = run_resnet("strategy.replicas=1", "strategy.batch_norm_group_size=1");
  PsSummary grouped = run_resnet("strategy.replicas=2", "strategy.batch_norm_group_size=2");
  PsSummary local = run_resnet("strategy.replicas=2", "strategy.batch_norm_group_size=1");
  g_assert_cmpfloat(fabs(grouped.loss_first - one.loss_first), <, 1e-5 * one.loss_first);
  double d_grouped = max_diff(&grouped, &one), d_local = max_diff(&local, &one);
  g_test_message("weights after 2 steps: grouped %.3g, local %.3g from one device", d_grouped,
                 d_local);
  g_assert_cmpfloat(d_grouped, <, 1e-4);
  g_assert_cmpfloat(d_local, >, 10 * d_grouped);
  g_assert_cmpfloat(grouped.replica_divergence, ==, 0.0);
  ps_summary_clear(&one);
  ps_summary_clear(&grouped);
  ps_summary_clear(&local);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/optim/lars/plain-loop", test_lars_loop);
  g_test_add_func("/optim/lamb/plain-loop", test_lamb_loop);
  g_test_add_func("/optim/layerwise/segments", test_segments_independent);
  g_test_add_func("/optim/layerwise/split", test_layerwise_split);
  g_test_add_func("/optim/cost/closed-form", test_update_cost);
  g_test_add_func("/optim/adam/bf16-state", test_adam_bf16_state);
  g_test_add_func("/batchnorm/finite-differences", test_bn_finite_differences);
  g_test_add_func("/batchnorm/group-statistics", test_bn_group);
  g_test_add_func("/batchnorm/group-run", test_bn_group_run);
  return g_test_run();
}

/* test_whatif.c: the what-if faults of an experiment (faults.stragglers,
 * faults.slow_hosts, faults.links) against closed forms derived here.
 *
 * Notation: a = ICI latency per hop, B = link bandwidth, c = chunk bytes,
 * s = round(c / B) in picoseconds (the network rounds each chunk's
 * serialization once per link), N = ring members, m = n c = the bytes of
 * one ring step's message (S = N m all-reduced).
 *
 * Stragglers (the MLP fixture, timing only, steps_per_run 1, overlap off):
 * - delay d on one device, on a contention-free ring (8 megacore v3 chips
 *   in one wrapped ring, ring all-reduce): every device's every step grows
 *   by d.  Exactly d but for the ring's part sizes: with everyone arriving
 *   together the slowest chain of the 2(N-1) ring steps sets the end; with
 *   one member d late, the chain through that member does.  Both chains
 *   are 2(N-1) one-hop messages of parts that differ by at most one
 *   4-byte element, so |growth - d| <= 2(N-1)(round(4 / B) + 1) ps.  The
 *   straggler's compute grows by exactly d per step (the delay counts as
 *   compute), nobody else's changes;
 * - delay d on the v3-8 fixture as shipped (2x2 mesh of two-core chips,
 *   weight-update sharding) with the torus algorithm, which shares no link
 *   on this mesh (TORUS): members that do not need the straggler's data go
 *   ahead while it is late, so its own wait can only shrink:
 *   d - W <= growth <= d, W the straggler's collective wait per step
 *   without the fault (auto's multiring sends both cores' streams of a
 *   two-chip dimension over its one link, where a late message can queue
 *   behind another: up to a message more);
 * - slowdown f on one device (torus, as above): its compute ops take f
 *   times as long (to half a picosecond per op), nobody else's do, and
 *   every step grows by between (f - 1) C - W and (f - 1) C (C its compute
 *   per step).  Once f
 *   is large enough that the others wait for it with everything else done,
 *   the step is linear in f with slope C exactly: step(20) - step(10) =
 *   10 C; the run's breakdown then reports the straggler, with compute
 *   20 C.
 * A straggler slice (the fixture on 2 x tpu-v5e-8, hierarchical, every
 *   device of slice 1 a straggler): the bounds above with W the most any
 *   device of the slice waits for collectives, and one term more, Q: the
 *   cross-slice messages of a host's devices share its NIC, so a late
 *   slice's message can queue behind its host's others (Q = devices per
 *   host x one message of a 1/devices share of the float32 gradients at
 *   the NIC's bandwidth): delay d grows every step by d - W .. d + Q, a
 *   slowdown f by (f - 1) C - W .. (f - 1) C + Q, and once saturated
 *   (f = 80 and 160) the slope is C exactly.  DCN link faults (a NIC both
 *   ways, a leaf's spine link with one host per leaf) load, round-trip
 *   through `describe`'s tree and grow the step; bad slice and DCN entries
 *   are input errors naming the key (exit 2 at the CLI).  The closed form
 *   of the hierarchical all-reduce over a degraded NIC is
 *   test_multislice.c's.
 * Slow hosts: the infeed-bound ResNet-50 (cores need 73 ms, the host
 *   makes a batch in b x cost / workers = 160 ms) runs at exactly
 *   b x cost x f / workers per step with its host f = 2 times slower.
 * Links (a ring all-reduce on ring:8, S = N m, m = 4 chunks of 64 KiB):
 * - healthy: 2(N-1)(a + n s) (test_collectives' closed form);
 * - link 2 -> 3 (+x) failed: member 2's messages to member 3 go the other
 *   way round, N-1 hops over the - links, which no other ring message
 *   uses: T_d = (N-1) a + (n + N-2) s (network.h's h a + S/B + (h-1) c/B).
 *   Member p starts step t+1 when p-1's step-t message arrives, so the
 *   all-reduce ends after the slowest run of 2(N-1) consecutive ring edges;
 *   on a ring of N edges such a run covers N-2 edges twice, the detour among
 *   them: T = (2N-4)(a + n s) + 2 T_d = 2(N-1)(a + n s) + 2(N-2)(a + s),
 *   the healthy form plus twice the N-2 extra hops, each a + s (store and
 *   forward of one chunk).  Consecutive detour messages leave at least
 *   a + n s apart and hold each link n s, so they never queue.  Exact to
 *   the picosecond; the failed link carries nothing, the detour's links
 *   carry every one of member 2's 2(N-1) messages;
 * - link 2 -> 3 at bandwidth_factor f = 0.5 (s_f = round(c / (f B))):
 *   every message 2 sends crosses it, each the time n s_f, and it never
 *   idles as long as N a + (N-1) n s <= (N-1) n s_f (member 2's next message
 *   is ready before the link frees: the chain back from it either avoids
 *   the slow link, t (a + n s) <= t n s_f, or crossed it and came round
 *   the N-1 fast edges).  Then the all-reduce is the slow link's own
 *   closed form, 2(N-1) messages back to back and one latency:
 *   T = a + 2(N-1) n s_f (less than 2(N-1)(a + n s_f): the slow link's
 *   latency overlaps its next message);
 * - failing a link of a dimension without wrap-around, or two links that
 *   leave some pair of a ring no way, is an input error naming the link
 *   (the network's and the experiment's; `podsim run` exits 2).
 * Config: every new key checked, with the file, the JSON path and the
 * reason in the message; --set faults.stragglers=[...] works. */
#include "collectives/collective.h"
#include "exec/pod.h"
#include "io/config.h"
#include "run/run.h"
#include "run/experiment.h"
#include "support/experiment.h"
#include "support/network.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>

#define FIXTURE "tests/data/good/experiments/mlp-what-if.json"
#define INFEED_BOUND "experiments/resnet50-v3-8-infeed-bound.json"

/* The fixture on 8 megacore v3 chips in one wrapped ring: every ring
 * all-reduce message is one hop, no two share a link. */
#define RING_OVERRIDES                                                                     \
  "topology.torus.dims=[8]", "topology.torus.wrap=[true]", "topology.chip.megacore=true", \
      "strategy.weight_update_sharding=false", "collective.algorithm=ring"

/* Serialization of `bytes` on a link of bw bytes/s, rounded to the
 * picosecond as network.h says. */
static ps_time_t ser_ps(double bytes, double bw)
{
  return (ps_time_t)(bytes * ((double)PS_PS_PER_S / bw) + 0.5);
}

/* ---- a pod run, observed -------------------------------------------- */

typedef struct {
  int n, steps;
  ps_time_t *end;       /* n x steps: when each device ended each step */
  ps_time_t *compute;   /* per device: compute ops and straggler delays */
  int64_t *compute_ops; /* per device */
  ps_time_t *coll;      /* n x steps: collective waits */
  int *delays;          /* per device: straggler delays seen */
  ps_time_t *delay_len; /* per device: their total */
} Obs;

static void obs_op(void *ctx, int device, int64_t step, const PsOp *op, PsTimeCategory cat,
                   ps_time_t start, ps_time_t end)
{
  Obs *o = ctx;
  if (cat == PS_TIME_COMPUTE) {
    o->compute[device] += end - start;
    o->compute_ops[device]++;
  }
}

static void obs_wait(void *ctx, int device, int64_t step, PsTimeCategory why, const char *what,
                     ps_time_t start, ps_time_t end)
{
  Obs *o = ctx;
  if (why == PS_TIME_COMPUTE) {
    g_assert_cmpstr(what, ==, PS_WAIT_STRAGGLER);
    o->compute[device] += end - start;
    o->delays[device]++;
    o->delay_len[device] += end - start;
  } else if (why == PS_TIME_COLLECTIVE) {
    o->coll[device * o->steps + step] += end - start;
  }
}

static void obs_step(void *ctx, int device, int64_t step, ps_time_t end)
{
  Obs *o = ctx;
  o->end[device * o->steps + step] = end;
}

/* Compiles and runs exp on a pod of its own (exp stays the caller's). */
static void obs_run(const PsExperiment *exp, Obs *o)
{
  GError *error = NULL;
  PsPlan *plan = ps_run_compile(exp, &error);
  g_assert_no_error(error);
  o->n = plan->n_devices;
  o->steps = (int)exp->steps;
  o->end = g_new0(ps_time_t, (size_t)o->n * o->steps);
  o->coll = g_new0(ps_time_t, (size_t)o->n * o->steps);
  o->compute = g_new0(ps_time_t, o->n);
  o->compute_ops = g_new0(int64_t, o->n);
  o->delays = g_new0(int, o->n);
  o->delay_len = g_new0(ps_time_t, o->n);
  PsPodObserver obs = {.ctx = o, .op_done = obs_op, .wait = obs_wait, .step_done = obs_step};
  PsEngine *engine = ps_engine_new();
  PsPodConfig cfg = ps_run_pod_config(exp);
  PsPod *pod = ps_pod_new(engine, &cfg, plan, &obs, NULL, &error);
  g_assert_no_error(error);
  ps_pod_start(pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  g_assert_true(ps_pod_check_finished(pod, &error));
  g_assert_no_error(error);
  ps_pod_free(pod);
  ps_engine_free(engine);
  ps_plan_free(plan);
}

static void obs_clear(Obs *o)
{
  g_free(o->end);
  g_free(o->coll);
  g_free(o->compute);
  g_free(o->compute_ops);
  g_free(o->delays);
  g_free(o->delay_len);
}

/* Device d's step k (k >= 1): from the end of step k-1 to the end of k. */
static ps_time_t period(const Obs *o, int d, int k)
{
  return o->end[d * o->steps + k] - o->end[d * o->steps + k - 1];
}

static double step_time(const PsExperiment *e, PsSummary *s)
{
  GError *error = NULL;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, s, &error));
  g_assert_no_error(error);
  return s->step_time_s;
}

/* ---- stragglers ----------------------------------------------------- */

#define STRAGGLER 3

static void test_delay_ring(void)
{
  const double d_s = 2e-3;
  const char *base_ov[] = {RING_OVERRIDES, NULL};
  const char *slow_ov[] = {RING_OVERRIDES, "faults.stragglers=[{\"device\":3,\"delay_s\":0.002}]",
                           NULL};
  PsExperiment *e0 = experiment_load(FIXTURE, base_ov), *e1 = experiment_load(FIXTURE, slow_ov);
  g_assert_cmpint(e1->faults.n_stragglers, ==, 1);
  g_assert_cmpint(e1->faults.stragglers[0].device, ==, STRAGGLER);
  g_assert_cmpfloat(e1->faults.stragglers[0].delay_s, ==, d_s);
  g_assert_cmpfloat(e1->faults.stragglers[0].slowdown, ==, 1.0);
  Obs o0, o1;
  obs_run(e0, &o0);
  obs_run(e1, &o1);
  const int N = o0.n;
  g_assert_cmpint(N, ==, 8);
  const ps_time_t d = ps_time_from_s(d_s);
  const ps_time_t tol = 2 * (N - 1) * (ser_ps(4, e0->topology->ici_bandwidth_Bps) + 1);
  ps_time_t worst = 0;
  for (int dev = 0; dev < N; dev++) {
    for (int k = 1; k < o0.steps; k++) {
      ps_time_t grow = period(&o1, dev, k) - period(&o0, dev, k);
      worst = MAX(worst, llabs(grow - d));
      g_assert_cmpint(llabs(grow - d), <=, tol);
    }
    /* the delay is the straggler's compute, once per step; nobody else's */
    g_assert_cmpint(o1.delays[dev], ==, dev == STRAGGLER ? o1.steps : 0);
    g_assert_cmpint(o1.compute[dev] - o0.compute[dev], ==,
                    dev == STRAGGLER ? o1.steps * d : 0);
  }
  g_test_message("ring: every step grows by d = %" G_GINT64_FORMAT " ps to within %" G_GINT64_FORMAT
                 " ps (bound %" G_GINT64_FORMAT " ps)", d, worst, tol);
  PsSummary s0, s1;
  double t0 = step_time(e0, &s0), t1 = step_time(e1, &s1);
  g_test_message("step_time_s %.9f -> %.9f (+%.9f, d = %.9f)", t0, t1, t1 - t0, d_s);
  g_assert_cmpfloat(fabs(t1 - t0 - d_s), <=, ps_time_to_s(tol) + 1e-12);
  /* the breakdown counts it as the straggler's compute */
  g_assert_cmpint(s1.reporting_device, ==, STRAGGLER);
  g_assert_cmpfloat(fabs(s1.breakdown[PS_TIME_COMPUTE] - s0.breakdown[PS_TIME_COMPUTE] - d_s), <=,
                    1e-12);
  ps_summary_clear(&s0);
  ps_summary_clear(&s1);
  obs_clear(&o0);
  obs_clear(&o1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

/* The fixture's collectives pinned to the torus algorithm. */
#define TORUS "collective.algorithm=\"torus\""

static void test_delay_v3_8(void)
{
  const char *base_ov[] = {TORUS, NULL};
  const char *slow_ov[] = {"faults.stragglers=[{\"device\":3,\"delay_s\":\"2ms\"}]", TORUS,
                           NULL};
  PsExperiment *e0 = experiment_load(FIXTURE, base_ov), *e1 = experiment_load(FIXTURE, slow_ov);
  Obs o0, o1;
  obs_run(e0, &o0);
  obs_run(e1, &o1);
  const ps_time_t d = ps_time_from_s(2e-3);
  for (int dev = 0; dev < o0.n; dev++)
    for (int k = 1; k < o0.steps; k++) {
      ps_time_t grow = period(&o1, dev, k) - period(&o0, dev, k);
      ps_time_t W = o0.coll[STRAGGLER * o0.steps + k];
      g_assert_cmpint(W, >, 0);
      g_assert_cmpint(grow, <=, d);
      g_assert_cmpint(grow, >=, d - W);
      if (dev == 0 && k == 1)
        g_test_message("v3-8: step grows by %" G_GINT64_FORMAT " ps, d = %" G_GINT64_FORMAT
                       " ps, W = %" G_GINT64_FORMAT " ps", grow, d, W);
    }
  obs_clear(&o0);
  obs_clear(&o1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

static PsExperiment *with_slowdown(double f)
{
  g_autofree char *s =
      g_strdup_printf("faults.stragglers=[{\"device\":%d,\"slowdown\":%g}]", STRAGGLER, f);
  const char *ov[] = {s, TORUS, NULL};
  return experiment_load(FIXTURE, ov);
}

static void test_slowdown(void)
{
  const double f = 1.5;
  const char *base_ov[] = {TORUS, NULL};
  PsExperiment *e0 = experiment_load(FIXTURE, base_ov), *e1 = with_slowdown(f);
  Obs o0, o1;
  obs_run(e0, &o0);
  obs_run(e1, &o1);
  for (int dev = 0; dev < o0.n; dev++) {
    g_assert_cmpint(o1.compute_ops[dev], ==, o0.compute_ops[dev]);
    g_assert_cmpint(o1.delays[dev], ==, 0);
    if (dev != STRAGGLER) {
      g_assert_cmpint(o1.compute[dev], ==, o0.compute[dev]);
      continue;
    }
    /* each op rounded to the picosecond once */
    double want = f * (double)o0.compute[dev];
    g_assert_cmpfloat(fabs((double)o1.compute[dev] - want), <=, 0.5 * (double)o0.compute_ops[dev]);
  }
  const ps_time_t C = o0.compute[STRAGGLER] / o0.steps;
  const ps_time_t slack = o0.compute_ops[STRAGGLER] / o0.steps + 1;
  for (int dev = 0; dev < o0.n; dev++)
    for (int k = 1; k < o0.steps; k++) {
      ps_time_t grow = period(&o1, dev, k) - period(&o0, dev, k);
      ps_time_t W = o0.coll[STRAGGLER * o0.steps + k];
      ps_time_t full = (ps_time_t)((f - 1) * (double)C);
      g_assert_cmpint(grow, <=, full + slack);
      g_assert_cmpint(grow, >=, full - W - slack);
      g_assert_cmpint(grow, >, 0);
    }
  obs_clear(&o0);
  obs_clear(&o1);
  ps_experiment_free(e1);

  /* saturated: the slope is the straggler's compute */
  PsExperiment *e10 = with_slowdown(10), *e20 = with_slowdown(20);
  PsSummary s10, s20;
  double t10 = step_time(e10, &s10), t20 = step_time(e20, &s20);
  double Cs = ps_time_to_s(C);
  g_test_message("C = %.9f s; step(10) = %.9f, step(20) = %.9f, difference %.9f = %.6f C", Cs,
                 t10, t20, t20 - t10, (t20 - t10) / Cs);
  g_assert_cmpfloat(fabs((t20 - t10) - 10 * Cs), <=, 2 * ps_time_to_s(slack));
  /* the step follows the slowest: the breakdown is the straggler's */
  g_assert_cmpint(s20.reporting_device, ==, STRAGGLER);
  g_assert_cmpfloat(fabs(s20.breakdown[PS_TIME_COMPUTE] - 20 * Cs), <=, 20 * ps_time_to_s(slack));
  g_assert_cmpfloat(t20, >=, 20 * Cs);
  ps_summary_clear(&s10);
  ps_summary_clear(&s20);
  ps_experiment_free(e10);
  ps_experiment_free(e20);
  ps_experiment_free(e0);
}

/* ---- a straggler slice ---------------------------------------------- */

/* The fixture on two slices of tpu-v5e-8 (16 replicas, hierarchical
 * all-reduce across the DCN). */
#define SLICES_OVERRIDES \
  "topology=\"tpu-v5e-8\"", "topology.slices=2", "collective.algorithm=hierarchical"
#define SLICE_DEVICES 8 /* per slice */

static PsExperiment *with_slice_fault(const char *straggler)
{
  const char *ov[] = {SLICES_OVERRIDES, straggler, NULL};
  return experiment_load(FIXTURE, ov);
}

/* Q: the cross-slice messages of one host's devices back to back on its
 * NIC (each a 1/devices share of the float32 gradients), the most a late
 * slice's message can queue behind its host's others. */
static ps_time_t slice_queue(const PsExperiment *e)
{
  const PsTopology *t = e->topology;
  int devices = ps_topology_devices(t), per_host = devices / ps_topology_hosts(t);
  double m = 4.0 * (double)e->model->params / devices;
  return per_host * ser_ps(m, t->dcn.nic_bandwidth_Bps);
}

/* W: the most any device of slice 1 waits for collectives in step k
 * without the fault. */
static ps_time_t slice_wait(const Obs *o, int k)
{
  ps_time_t W = 0;
  for (int d = SLICE_DEVICES; d < 2 * SLICE_DEVICES; d++)
    W = MAX(W, o->coll[d * o->steps + k]);
  return W;
}

/* Slice 1 late by d: every device of it delayed once per step, nobody
 * else; every device's step grows by between d - W and d. */
static void test_slice_delay(void)
{
  PsExperiment *e0 = with_slice_fault(NULL);
  PsExperiment *e1 = with_slice_fault("faults.stragglers=[{\"slice\":1,\"delay_s\":\"2ms\"}]");
  g_assert_cmpint(e1->faults.stragglers[0].slice, ==, 1);
  g_assert_cmpint(e1->faults.stragglers[0].device, ==, -1);
  Obs o0, o1;
  obs_run(e0, &o0);
  obs_run(e1, &o1);
  g_assert_cmpint(o0.n, ==, 2 * SLICE_DEVICES);
  const ps_time_t d = ps_time_from_s(2e-3), Q = slice_queue(e0);
  for (int dev = 0; dev < o0.n; dev++) {
    gboolean slow = dev >= SLICE_DEVICES;
    g_assert_cmpint(o1.delays[dev], ==, slow ? o1.steps : 0);
    g_assert_cmpint(o1.compute[dev] - o0.compute[dev], ==, slow ? o1.steps * d : 0);
    for (int k = 1; k < o0.steps; k++) {
      ps_time_t grow = period(&o1, dev, k) - period(&o0, dev, k), W = slice_wait(&o0, k);
      g_assert_cmpint(grow, <=, d + Q);
      g_assert_cmpint(grow, >=, d - W);
      if (dev == 0 && k == 1)
        g_test_message("slice delay: step grows by %" G_GINT64_FORMAT " ps, d = %" G_GINT64_FORMAT
                       " ps, W = %" G_GINT64_FORMAT " ps, Q = %" G_GINT64_FORMAT " ps",
                       grow, d, W, Q);
    }
  }
  obs_clear(&o0);
  obs_clear(&o1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

static PsExperiment *with_slice_slowdown(double f)
{
  g_autofree char *s = g_strdup_printf("faults.stragglers=[{\"slice\":1,\"slowdown\":%g}]", f);
  return with_slice_fault(s);
}

/* Slice 1 f times slower: its devices' compute times f (to half a
 * picosecond per op), nobody else's; every step grows by between
 * (f - 1) C - W and (f - 1) C; saturated, the slope is C. */
static void test_slice_slowdown(void)
{
  const double f = 1.5;
  PsExperiment *e0 = with_slice_fault(NULL), *e1 = with_slice_slowdown(f);
  Obs o0, o1;
  obs_run(e0, &o0);
  obs_run(e1, &o1);
  for (int dev = 0; dev < o0.n; dev++) {
    g_assert_cmpint(o1.compute_ops[dev], ==, o0.compute_ops[dev]);
    double want = dev >= SLICE_DEVICES ? f * (double)o0.compute[dev] : (double)o0.compute[dev];
    g_assert_cmpfloat(fabs((double)o1.compute[dev] - want), <=, 0.5 * (double)o0.compute_ops[dev]);
  }
  const int S = SLICE_DEVICES; /* a device of slice 1; all of them alike */
  const ps_time_t C = o0.compute[S] / o0.steps;
  const ps_time_t slack = o0.compute_ops[S] / o0.steps + 1;
  const ps_time_t full = (ps_time_t)((f - 1) * (double)C), Q = slice_queue(e0);
  for (int dev = 0; dev < o0.n; dev++)
    for (int k = 1; k < o0.steps; k++) {
      ps_time_t grow = period(&o1, dev, k) - period(&o0, dev, k), W = slice_wait(&o0, k);
      g_assert_cmpint(grow, <=, full + slack + Q);
      g_assert_cmpint(grow, >=, full - W - slack);
      g_assert_cmpint(grow, >, 0);
      if (dev == 0 && k == 1)
        g_test_message("slice slowdown %.1f: step grows by %" G_GINT64_FORMAT
                       " ps, (f - 1) C = %" G_GINT64_FORMAT " ps, W = %" G_GINT64_FORMAT
                       " ps, Q = %" G_GINT64_FORMAT " ps",
                       f, grow, full, W, Q);
    }
  /* saturated: once the other slice waits for this one with everything
   * else done (f = 80 here: its compute beyond the healthy step by far more
   * than W + Q), the slope is C */
  g_assert_cmpint(79 * C, >, 4 * (slice_wait(&o0, 1) + Q));
  obs_clear(&o0);
  obs_clear(&o1);
  ps_experiment_free(e1);
  PsExperiment *e80 = with_slice_slowdown(80), *e160 = with_slice_slowdown(160);
  PsSummary s80, s160;
  double t80 = step_time(e80, &s80), t160 = step_time(e160, &s160), Cs = ps_time_to_s(C);
  g_test_message("slice: C = %.9f s; step(80) = %.9f, step(160) = %.9f, difference %.6f C", Cs,
                 t80, t160, (t160 - t80) / Cs);
  g_assert_cmpfloat(fabs((t160 - t80) - 80 * Cs), <=, 2 * ps_time_to_s(slack));
  g_assert_cmpint(s160.reporting_device, >=, SLICE_DEVICES);
  g_assert_cmpfloat(fabs(s160.breakdown[PS_TIME_COMPUTE] - 160 * Cs), <=,
                    160 * ps_time_to_s(slack));
  ps_summary_clear(&s80);
  ps_summary_clear(&s160);
  ps_experiment_free(e80);
  ps_experiment_free(e160);
  ps_experiment_free(e0);
}

/* ---- slow hosts ----------------------------------------------------- */

static void test_slow_host(void)
{
  const char *ov[] = {"faults.slow_hosts=[{\"host\":0,\"slowdown\":2}]", NULL};
  PsExperiment *e0 = experiment_load(INFEED_BOUND, NULL), *e1 = experiment_load(INFEED_BOUND, ov);
  g_assert_cmpint(e1->faults.n_slow_hosts, ==, 1);
  g_assert_cmpint(ps_topology_hosts(e1->topology), ==, 1);
  const PsInputConfig *in = &e0->input;
  double batch = (double)e0->global_batch;
  double host0 = batch * in->host_cost_per_example_s / in->workers;
  PsSummary s0, s1;
  double t0 = step_time(e0, &s0), t1 = step_time(e1, &s1);
  g_test_message("infeed-bound: %.6f s per step, %.6f s with the host 2x slower", t0, t1);
  /* the host sets the pace in both */
  g_assert_cmpfloat(fabs(t0 - host0), <=, 1e-9);
  g_assert_cmpfloat(fabs(t1 - 2 * host0), <=, 1e-9);
  g_assert_cmpfloat(s1.breakdown[PS_TIME_INFEED_STALL], >, s0.breakdown[PS_TIME_INFEED_STALL]);
  g_assert_cmpfloat(fabs(s1.breakdown[PS_TIME_COMPUTE] - s0.breakdown[PS_TIME_COMPUTE]), <=,
                    1e-12);
  ps_summary_clear(&s0);
  ps_summary_clear(&s1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

/* ---- links: a ring all-reduce on ring:8 ----------------------------- */

#define RING_N 8
#define CHUNK (64 * 1024)
#define CHUNKS 4 /* per ring step's message */

typedef NetFix Net;

static void net_init(Net *n, const char *spec, const char *override)
{
  const char *ov[] = {override, NULL};
  netfix_init(n, shorthand_topology(spec, ov), CHUNK);
}

static void net_clear(Net *n)
{
  netfix_clear(n);
}

static void on_done(void *ctx, int member, ps_time_t t)
{
  ps_time_t *last = ctx;
  *last = MAX(*last, t);
}

/* A ring all-reduce of N m bytes over every chip, all arriving at 0;
 * returns when the last member is done, and the closed-form prediction. */
static ps_time_t ring_allreduce(Net *n, double *predict_s)
{
  int devs[RING_N];
  for (int i = 0; i < RING_N; i++)
    devs[i] = i;
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, "ring", devs, RING_N,
                     (int64_t)RING_N * CHUNKS * CHUNK, 1, 0};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(n->net, &spec, &error);
  g_assert_no_error(error);
  ps_time_t last = 0;
  for (int m = 0; m < RING_N; m++)
    ps_collective_arrive(c, m, NULL, on_done, &last);
  ps_engine_run(n->engine, PS_TIME_NEVER);
  g_assert_cmpint(ps_collective_rounds_done(c), ==, 1);
  g_assert_cmpuint(ps_network_in_flight(n->net), ==, 0);
  if (predict_s)
    *predict_s = ps_collective_predict_s(c);
  ps_collective_free(c);
  return last;
}

static int64_t link_bytes(const Net *n, int link)
{
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(n->net, link, &info));
  return info.bytes;
}

static void test_failed_link_ring(void)
{
  const int N = RING_N, k = 2;
  const int64_t n = CHUNKS, m = n * CHUNK;
  Net h, f;
  net_init(&h, "ring:8", NULL);
  net_init(&f, "ring:8", NULL);
  const double B = h.topo->ici_bandwidth_Bps;
  const ps_time_t a = ps_time_from_s(h.topo->ici_latency_s), s = ser_ps(CHUNK, B);

  ps_time_t healthy = ring_allreduce(&h, NULL);
  g_assert_cmpint(healthy, ==, 2 * (N - 1) * (a + n * s));

  int failed = ps_network_ici_link(f.net, k, 0, +1);
  GError *error = NULL;
  g_assert_true(ps_network_degrade_link(f.net, failed, 0.0, &error));
  g_assert_no_error(error);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(f.net, failed, &info));
  g_assert_true(info.failed);
  g_assert_cmpfloat(info.bandwidth_factor, ==, 0.0);
  /* routes: k -> k+1 goes the other way, N-1 hops down; the way back and
   * routes that do not cross the link are unchanged */
  int route[RING_N];
  g_assert_cmpint(ps_network_route(f.net, k, k + 1, route, RING_N), ==, N - 1);
  for (int i = 0; i < N - 1; i++) {
    g_assert_true(ps_network_link_info(f.net, route[i], &info));
    g_assert_cmpint(info.ends.dir, ==, -1);
    g_assert_cmpint(info.ends.chip, ==, (k - i + N) % N);
  }
  g_assert_cmpint(ps_network_hops(f.net, k + 1, k), ==, 1);
  g_assert_cmpint(ps_network_hops(f.net, k - 1, k + 2), ==, N - 3); /* 3 hops + became 5 - */
  g_assert_cmpint(ps_network_hops(f.net, k + 1, k + 3), ==, 2);
  for (int x = 0; x < N; x++)
    for (int y = 0; y < N; y++) {
      int r[RING_N];
      int hops = ps_network_route(f.net, x, y, r, RING_N);
      for (int i = 0; i < hops; i++)
        g_assert_cmpint(r[i], !=, failed);
    }

  double predict;
  ps_time_t t = ring_allreduce(&f, &predict);
  ps_time_t want = 2 * (N - 1) * (a + n * s) + 2 * (N - 2) * (a + s);
  g_test_message("failed link: %" G_GINT64_FORMAT " ps (healthy %" G_GINT64_FORMAT
                 " ps), closed form %" G_GINT64_FORMAT " ps, prediction %.0f ps",
                 t, healthy, want, predict * 1e12);
  g_assert_cmpint(t, ==, want);
  /* the algorithm's own prediction follows the detour's route */
  g_assert_cmpfloat(fabs(predict - ps_time_to_s(want)) / ps_time_to_s(want), <, 1e-3);
  /* traffic took the other way: nothing on the failed link, member k's
   * 2(N-1) messages on every - link of the detour, nothing on k+1's */
  g_assert_cmpint(link_bytes(&f, failed), ==, 0);
  for (int c = 0; c < N; c++) {
    int down = ps_network_ici_link(f.net, c, 0, -1);
    g_assert_cmpint(link_bytes(&f, down), ==, c == k + 1 ? 0 : 2 * (N - 1) * m);
    int up = ps_network_ici_link(f.net, c, 0, +1);
    g_assert_cmpint(link_bytes(&f, up), ==, c == k ? 0 : 2 * (N - 1) * m);
  }
  net_clear(&h);
  net_clear(&f);
}

static void test_degraded_link_ring(void)
{
  const int N = RING_N, k = 2;
  const int64_t n = CHUNKS;
  const double factor = 0.5;
  Net d;
  net_init(&d, "ring:8", NULL);
  const double B = d.topo->ici_bandwidth_Bps;
  const ps_time_t a = ps_time_from_s(d.topo->ici_latency_s), s = ser_ps(CHUNK, B);
  const ps_time_t sf = ser_ps(CHUNK, factor * B);
  /* the condition under which the slow link never idles */
  g_assert_cmpint(N * a + (N - 1) * n * s, <=, (N - 1) * n * sf);
  int slow = ps_network_ici_link(d.net, k, 0, +1);
  GError *error = NULL;
  g_assert_true(ps_network_degrade_link(d.net, slow, factor, &error));
  g_assert_no_error(error);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(d.net, slow, &info));
  g_assert_false(info.failed);
  g_assert_cmpfloat(fabs(info.bandwidth_Bps - factor * B), <=, 1e-6 * B);
  g_assert_cmpint(ps_network_hops(d.net, k, k + 1), ==, 1); /* degraded, not avoided */
  ps_time_t t = ring_allreduce(&d, NULL);
  ps_time_t want = a + 2 * (N - 1) * n * sf;
  g_test_message("degraded link (x%.1f): %" G_GINT64_FORMAT " ps, closed form %" G_GINT64_FORMAT
                 " ps (every step at the slow link's speed would be %" G_GINT64_FORMAT " ps)",
                 factor, t, want, 2 * (N - 1) * (a + n * sf));
  g_assert_cmpint(t, ==, want);
  net_clear(&d);
}

/* Failures the network refuses, and the link stays as it was. */
static void test_network_refuses(void)
{
  GError *error = NULL;
  Net mesh;
  net_init(&mesh, "ring:8", "torus.wrap=[false]");
  int l = ps_network_ici_link(mesh.net, 2, 0, +1);
  g_assert_false(ps_network_degrade_link(mesh.net, l, 0.0, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(error->message, "chip (2) -> (3) +x"));
  g_assert_nonnull(strstr(error->message, "no wrap-around"));
  g_clear_error(&error);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(mesh.net, l, &info));
  g_assert_false(info.failed);
  g_assert_cmpint(ps_network_hops(mesh.net, 2, 3), ==, 1);
  /* degrading it is fine */
  g_assert_true(ps_network_degrade_link(mesh.net, l, 0.25, &error));
  g_assert_no_error(error);
  net_clear(&mesh);

  Net ring;
  net_init(&ring, "ring:8", NULL);
  int up = ps_network_ici_link(ring.net, 2, 0, +1);
  int back = ps_network_ici_link(ring.net, 3, 0, -1); /* the same cable, the other way */
  int other = ps_network_ici_link(ring.net, 5, 0, -1);
  g_assert_true(ps_network_degrade_link(ring.net, up, 0.0, &error));
  g_assert_true(ps_network_degrade_link(ring.net, back, 0.0, &error));
  g_assert_no_error(error);
  /* the ring is now a line: 2 and 3 reach each other the long way */
  g_assert_cmpint(ps_network_hops(ring.net, 2, 3), ==, RING_N - 1);
  g_assert_cmpint(ps_network_hops(ring.net, 3, 2), ==, RING_N - 1);
  /* 5 -> 4 failed too would cut 5 from 3 both ways round */
  g_assert_false(ps_network_degrade_link(ring.net, other, 0.0, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(error->message, "chip (5) -> (4) -x"));
  g_assert_nonnull(strstr(error->message, "no way"));
  g_clear_error(&error);
  g_assert_true(ps_network_link_info(ring.net, other, &info));
  g_assert_false(info.failed);
  g_assert_cmpint(ps_network_hops(ring.net, 5, 4), ==, 1);
  /* restoring a link restores its route */
  g_assert_true(ps_network_degrade_link(ring.net, up, 1.0, &error));
  g_assert_cmpint(ps_network_hops(ring.net, 2, 3), ==, 1);
  net_clear(&ring);

  Net twisted;
  net_init(&twisted, "torus:2x2x4", "torus.twisted=true");
  l = ps_network_ici_link(twisted.net, 0, 0, +1);
  g_assert_false(ps_network_degrade_link(twisted.net, l, 0.0, &error));
  g_assert_nonnull(strstr(error->message, "twisted"));
  g_clear_error(&error);
  net_clear(&twisted);
}

/* ---- links in an experiment ----------------------------------------- */

/* An experiment that fails a link: the run goes round it. */
static void test_failed_link_run(void)
{
  const char *base_ov[] = {RING_OVERRIDES, NULL};
  const char *ov[] = {RING_OVERRIDES,
                      "faults.links=[{\"chip\":2,\"dim\":0,\"dir\":\"+\",\"failed\":true}]",
                      NULL};
  PsExperiment *e0 = experiment_load(FIXTURE, base_ov), *e = experiment_load(FIXTURE, ov);
  g_assert_cmpint(e->faults.n_links, ==, 1);
  g_assert_cmpfloat(e->faults.links[0].bandwidth_factor, ==, 0.0);
  GError *error = NULL;
  PsPlan *plan = ps_run_compile(e, &error);
  g_assert_no_error(error);
  PsEngine *engine = ps_engine_new();
  PsPodConfig cfg = ps_run_pod_config(e);
  PsPod *pod = ps_pod_new(engine, &cfg, plan, NULL, NULL, &error);
  g_assert_no_error(error);
  ps_pod_start(pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  g_assert_true(ps_pod_check_finished(pod, &error));
  PsNetwork *net = ps_pod_network(pod);
  int failed = ps_network_ici_link(net, 2, 0, +1);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(net, failed, &info));
  g_assert_true(info.failed);
  g_assert_cmpint(info.bytes, ==, 0);
  g_assert_true(ps_network_link_info(net, ps_network_ici_link(net, 2, 0, -1), &info));
  g_assert_cmpint(info.bytes, >, 0);
  ps_pod_free(pod);
  ps_engine_free(engine);
  ps_plan_free(plan);
  PsSummary s0, s1;
  double t0 = step_time(e0, &s0), t1 = step_time(e, &s1);
  g_test_message("ring fixture: step %.9f s, %.9f s with chip 2 -> 3 failed", t0, t1);
  g_assert_cmpfloat(t1, >, t0);
  ps_summary_clear(&s0);
  ps_summary_clear(&s1);
  ps_experiment_free(e0);
  ps_experiment_free(e);
}

/* Loads FIXTURE with overrides and expects an input error whose message
 * holds every needle. */
static void expect_error(const char *const *ov, const char *const *needles)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(FIXTURE, ov, &error);
  g_assert_null(e);
  g_assert_nonnull(error);
  g_assert_true(error->domain == PS_INPUT_ERROR);
  g_test_message("%s", error->message);
  g_assert_true(g_str_has_prefix(error->message, FIXTURE ": "));
  for (int i = 0; needles[i]; i++)
    if (!strstr(error->message, needles[i]))
      g_error("expected '%s' in: %s", needles[i], error->message);
  g_error_free(error);
}

/* `podsim run FIXTURE --set ...` (sets NULL-terminated) exits 2, prints
 * nothing on stdout and every needle on stderr. */
static void expect_cli_exit2(const char *const *sets, const char *const *needles)
{
  const char *podsim = g_getenv("PODSIM");
  if (!podsim || !*podsim || !g_file_test(podsim, G_FILE_TEST_IS_EXECUTABLE)) {
    g_test_message("PODSIM is not set to the built CLI (make test sets it): CLI part skipped");
    return;
  }
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim);
  g_ptr_array_add(argv, "run");
  g_ptr_array_add(argv, FIXTURE);
  for (int i = 0; sets[i]; i++) {
    g_ptr_array_add(argv, "--set");
    g_ptr_array_add(argv, (gpointer)sets[i]);
  }
  g_ptr_array_add(argv, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  GError *error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             &err, &status, &error));
  g_ptr_array_free(argv, TRUE);
  g_assert_no_error(error);
  g_assert_true(WIFEXITED(status));
  g_assert_cmpint(WEXITSTATUS(status), ==, 2);
  g_assert_cmpstr(out, ==, "");
  for (int i = 0; needles[i]; i++)
    if (!strstr(err, needles[i]))
      g_error("expected '%s' in: %s", needles[i], err);
}

static void test_mesh_failure(void)
{
  const char *ov[] = {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"+\",\"failed\":true}]", NULL};
  expect_error(ov, (const char *const[]){"faults.links[0]", "chip (0,0) -> (1,0) +x",
                                         "no wrap-around", NULL});
  const char *ov2[] = {
      "faults.links=[{\"chip\":1,\"dim\":1,\"dir\":\"+\",\"bandwidth_factor\":0}]", NULL};
  expect_error(ov2, (const char *const[]){"faults.links[0]", "chip (1,0) -> (1,1) +y",
                                          "no wrap-around", NULL});

  expect_cli_exit2((const char *const[]){ov[0], NULL},
                   (const char *const[]){"chip (0,0) -> (1,0) +x", "faults.links[0]", NULL});
}

#define NIC_FAULT \
  "faults.links=[{\"dcn\":\"nic\",\"host\":1,\"dir\":\"both\",\"bandwidth_factor\":0.1}]"
#define LEAF_FAULT \
  "faults.links=[{\"dcn\":\"leaf\",\"leaf\":0,\"dir\":\"up\",\"bandwidth_factor\":0.1}]"

/* DCN link faults in a run: parsed, shown by `describe` in a form that
 * loads again, and the step grows when a NIC (or, with one host per leaf,
 * a leaf's spine link) the cross-slice traffic crosses is degraded. */
static void test_slice_dcn_run(void)
{
  const char *ov[] = {SLICES_OVERRIDES, NIC_FAULT,
                      "faults.stragglers=[{\"slice\":1,\"slowdown\":1.5}]", NULL};
  PsExperiment *e = experiment_load(FIXTURE, ov);
  g_assert_cmpint(e->faults.n_links, ==, 0);
  g_assert_cmpint(e->faults.n_dcn_links, ==, 1);
  const PsDcnLinkFault *f = &e->faults.dcn_links[0];
  g_assert_cmpint(f->entry, ==, 0);
  g_assert_cmpint(f->kind, ==, PS_DCN_FAULT_NIC);
  g_assert_cmpint(f->index, ==, 1);
  g_assert_true(f->both_ways);
  g_assert_cmpfloat(f->bandwidth_factor, ==, 0.1);
  g_autofree char *dir = g_dir_make_tmp("podsim-test-whatif-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "resolved.json", NULL);
  g_assert_cmpint(json_object_to_file(path, e->resolved), ==, 0);
  PsExperiment *again = experiment_load(path, NULL);
  g_assert_cmpint(again->faults.dcn_links[0].kind, ==, PS_DCN_FAULT_NIC);
  g_assert_cmpint(again->faults.dcn_links[0].index, ==, 1);
  g_assert_true(again->faults.dcn_links[0].both_ways);
  g_assert_cmpint(again->faults.stragglers[0].slice, ==, 1);
  g_assert_cmpfloat(again->faults.stragglers[0].slowdown, ==, 1.5);
  ps_experiment_free(again);
  g_remove(path);
  g_rmdir(dir);
  ps_experiment_free(e);

  static const char *const faults[] = {NIC_FAULT, LEAF_FAULT};
  for (int i = 0; i < 2; i++) {
    const char *base_ov[] = {SLICES_OVERRIDES, "topology.dcn.hosts_per_leaf=1", NULL};
    const char *slow_ov[] = {SLICES_OVERRIDES, "topology.dcn.hosts_per_leaf=1", faults[i], NULL};
    PsExperiment *e0 = experiment_load(FIXTURE, base_ov), *e1 = experiment_load(FIXTURE, slow_ov);
    PsSummary s0, s1;
    double t0 = step_time(e0, &s0), t1 = step_time(e1, &s1);
    g_test_message("%s: step %.3f us -> %.3f us", faults[i], t0 * 1e6, t1 * 1e6);
    g_assert_cmpfloat(t1, >, t0);
    g_assert_cmpfloat(s1.breakdown[PS_TIME_COLLECTIVE], >, s0.breakdown[PS_TIME_COLLECTIVE]);
    ps_summary_clear(&s0);
    ps_summary_clear(&s1);
    ps_experiment_free(e0);
    ps_experiment_free(e1);
  }
}

/* Slice and DCN faults: every key checked, exit 2 at the CLI. */
static void test_slice_errors(void)
{
  static const struct {
    const char *set;
    const char *needles[4];
  } cases[] = {
      {"faults.stragglers=[{\"slice\":2,\"slowdown\":2}]",
       {"faults.stragglers[0].slice", "slice 2 is out of range: tpu-v5e-8 has 2 slices (0..1)",
        NULL}},
      {"faults.stragglers=[{\"slice\":-1,\"slowdown\":2}]",
       {"faults.stragglers[0].slice", "out of range", NULL}},
      {"faults.stragglers=[{\"slice\":1,\"device\":3,\"slowdown\":2}]",
       {"faults.stragglers[0].slice", "not both", NULL}},
      {"faults.stragglers=[{\"slice\":1,\"slowdown\":2},{\"slice\":1,\"delay_s\":1}]",
       {"faults.stragglers[1].slice", "slice 1 is already a straggler", NULL}},
      {"faults.stragglers=[{\"slice\":1,\"slowdown\":2},{\"device\":9,\"slowdown\":2}]",
       {"faults.stragglers[1].device", "device 9 is in slice 1", NULL}},
      {"faults.links=[{\"dcn\":\"nic\",\"host\":2,\"dir\":\"up\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].host", "host 2 is out of range", "2 hosts (0..1)"}},
      {"faults.links=[{\"dcn\":\"leaf\",\"leaf\":1,\"dir\":\"up\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].leaf", "leaf 1 is out of range", "(0..0)"}},
      {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"up\",\"bandwidth_factor\":0}]",
       {"faults.links[0].bandwidth_factor", "may not fail", "no other way round"}},
      {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"up\",\"failed\":true}]",
       {"faults.links[0].failed", "may not fail", NULL}},
      {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"+\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].dir", "up, down, both", NULL}},
      {"faults.links=[{\"dcn\":\"spine\",\"host\":0,\"dir\":\"up\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].dcn", "nic, leaf", NULL}},
      {"faults.links=[{\"dcn\":\"nic\",\"leaf\":0,\"dir\":\"up\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].leaf", "named by host", NULL}},
      {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"both\",\"bandwidth_factor\":0.5},"
       "{\"dcn\":\"nic\",\"host\":0,\"dir\":\"down\",\"bandwidth_factor\":0.7}]",
       {"faults.links[1]", "dcn nic host 0 down is already named by faults.links[0]", NULL}},
      /* an ICI entry after a DCN one keeps its own number */
      {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"up\",\"bandwidth_factor\":0.5},"
       "{\"chip\":0,\"dim\":0,\"dir\":\"+\",\"failed\":true}]",
       {"faults.links[1]", "slice 0 chip (0,0) -> (1,0) +x", "no wrap-around"}},
  };
  for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *ov[] = {SLICES_OVERRIDES, cases[i].set, NULL};
    expect_error(ov, cases[i].needles);
  }
  /* one slice has no DCN */
  const char *one[] = {"faults.links=[{\"dcn\":\"nic\",\"host\":0,\"dir\":\"up\","
                       "\"bandwidth_factor\":0.5}]",
                       NULL};
  expect_error(one, (const char *const[]){"faults.links[0].dcn", "no data-center network", NULL});
  expect_cli_exit2((const char *const[]){"topology=\"tpu-v5e-8\"", "topology.slices=2",
                                         cases[0].set, NULL},
                   cases[0].needles);
  expect_cli_exit2((const char *const[]){"topology=\"tpu-v5e-8\"", "topology.slices=2",
                                         cases[7].set, NULL},
                   cases[7].needles);
}

/* ---- config --------------------------------------------------------- */

static void test_config_errors(void)
{
  static const struct {
    const char *set;
    const char *needles[3];
  } cases[] = {
      {"faults.stragglers=[{\"device\":3,\"slowdown\":0}]",
       {"faults.stragglers[0].slowdown", "must be > 0", NULL}},
      {"faults.stragglers=[{\"device\":3,\"slowdown\":-2}]",
       {"faults.stragglers[0].slowdown", "must be > 0", NULL}},
      {"faults.stragglers=[{\"device\":8,\"delay_s\":1e-3}]",
       {"faults.stragglers[0].device", "device 8 is not a device of this run", NULL}},
      {"faults.stragglers=[{\"device\":-1,\"delay_s\":1e-3}]",
       {"faults.stragglers[0].device", "device -1 is not a device of this run", NULL}},
      {"faults.stragglers=[{\"device\":1,\"delay_s\":-1}]",
       {"faults.stragglers[0].delay_s", ">= 0", NULL}},
      {"faults.stragglers=[{\"device\":1}]",
       {"faults.stragglers[0]", "give slowdown", NULL}},
      {"faults.stragglers=[{\"device\":1,\"speed\":2}]",
       {"faults.stragglers[0]", "unknown key 'speed'", NULL}},
      {"faults.stragglers=[{\"device\":1,\"slowdown\":2},{\"device\":1,\"delay_s\":1}]",
       {"faults.stragglers[1].device", "already a straggler", NULL}},
      {"faults.stragglers={\"device\":1}", {"faults.stragglers", "must be an array", NULL}},
      {"faults.slow_hosts=[{\"host\":1,\"slowdown\":2}]",
       {"faults.slow_hosts[0].host", "out of range", NULL}},
      {"faults.slow_hosts=[{\"host\":0}]",
       {"faults.slow_hosts[0]", "missing required key 'slowdown'", NULL}},
      {"faults.slow_hosts=[{\"host\":0,\"slowdown\":0}]",
       {"faults.slow_hosts[0].slowdown", "must be > 0", NULL}},
      {"faults.links=[{\"chip\":4,\"dim\":0,\"dir\":\"+\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].chip", "out of range", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":2,\"dir\":\"+\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].dim", "out of range", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"up\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0].dir", "must be one of: +, -", NULL}},
      {"faults.links=[{\"chip\":1,\"dim\":0,\"dir\":\"+\",\"bandwidth_factor\":0.5}]",
       {"faults.links[0]", "has no +x link", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"+\",\"bandwidth_factor\":1.5}]",
       {"faults.links[0].bandwidth_factor", "<= 1", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"+\"}]",
       {"faults.links[0]", "give bandwidth_factor", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"+\",\"bandwidth_factor\":0.5,"
       "\"failed\":true}]",
       {"faults.links[0].failed", "contradicts", NULL}},
      {"faults.links=[{\"chip\":0,\"dim\":0,\"dir\":\"+\",\"bandwidth_factor\":0.5,"
       "\"both_ways\":true},{\"chip\":1,\"dim\":0,\"dir\":\"-\",\"bandwidth_factor\":0.5}]",
       {"faults.links[1]", "chip (1,0) -> (0,0) -x is already named by faults.links[0]", NULL}},
      {"faults.wobble=1", {"faults", "unknown key 'wobble'", NULL}},
  };
  for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
    const char *ov[] = {cases[i].set, NULL};
    expect_error(ov, cases[i].needles);
  }
  /* a ring cut in two by failures in both directions */
  const char *ring_ov[] = {RING_OVERRIDES,
                           "faults.links=[{\"chip\":2,\"dim\":0,\"dir\":\"+\",\"failed\":true},"
                           "{\"chip\":3,\"dim\":0,\"dir\":\"-\",\"failed\":true},"
                           "{\"chip\":6,\"dim\":0,\"dir\":\"-\",\"failed\":true}]",
                           NULL};
  expect_error(ring_ov, (const char *const[]){"faults.links[2]", "chip (2) -> (3) +x",
                                              "chip (6) -> (5) -x", "no way", NULL});
  /* one cable failed both ways is fine on a ring */
  const char *cable_ov[] = {RING_OVERRIDES,
                            "faults.links=[{\"chip\":2,\"dim\":0,\"dir\":\"+\","
                            "\"both_ways\":true,\"failed\":true}]",
                            NULL};
  PsExperiment *e = experiment_load(FIXTURE, cable_ov);
  g_assert_true(e->faults.links[0].both_ways);
  ps_experiment_free(e);
}

/* --set reaches the new keys like any other, and `describe` shows them in
 * a form that loads again. */
static void test_config_override(void)
{
  const char *ov[] = {"faults.stragglers=[{\"device\":3,\"slowdown\":1.5}]",
                      "faults.stragglers[0].delay_s=1ms",
                      "faults.links=[{\"chip\":0,\"dim\":1,\"dir\":\"+\",\"bandwidth_factor\":0.5}]",
                      NULL};
  PsExperiment *e = experiment_load(FIXTURE, ov);
  g_assert_cmpint(e->faults.n_stragglers, ==, 1);
  g_assert_cmpint(e->faults.stragglers[0].device, ==, 3);
  g_assert_cmpfloat(e->faults.stragglers[0].slowdown, ==, 1.5);
  g_assert_cmpfloat(e->faults.stragglers[0].delay_s, ==, 1e-3);
  g_assert_cmpint(e->faults.n_links, ==, 1);
  g_assert_cmpint(e->faults.links[0].dir, ==, 1);
  g_assert_false(e->faults.links[0].both_ways);
  json_object *faults = NULL;
  g_assert_true(json_object_object_get_ex(e->resolved, "faults", &faults));
  g_autofree char *dir = g_dir_make_tmp("podsim-test-whatif-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "resolved.json", NULL);
  g_assert_cmpint(json_object_to_file(path, e->resolved), ==, 0);
  PsExperiment *again = experiment_load(path, NULL);
  g_assert_cmpint(again->faults.n_stragglers, ==, 1);
  g_assert_cmpfloat(again->faults.stragglers[0].delay_s, ==, 1e-3);
  g_assert_cmpfloat(again->faults.links[0].bandwidth_factor, ==, 0.5);
  ps_experiment_free(again);
  g_remove(path);
  g_rmdir(dir);
  ps_experiment_free(e);
  /* without faults, nothing changes in the resolved tree */
  e = experiment_load(FIXTURE, NULL);
  g_assert_false(json_object_object_get_ex(e->resolved, "faults", NULL));
  ps_experiment_free(e);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  g_test_add_func("/whatif/straggler/delay-ring", test_delay_ring);
  g_test_add_func("/whatif/straggler/delay-v3-8", test_delay_v3_8);
  g_test_add_func("/whatif/straggler/slowdown", test_slowdown);
  g_test_add_func("/whatif/slice/delay", test_slice_delay);
  g_test_add_func("/whatif/slice/slowdown", test_slice_slowdown);
  g_test_add_func("/whatif/slice/dcn-in-a-run", test_slice_dcn_run);
  g_test_add_func("/whatif/slice/errors", test_slice_errors);
  g_test_add_func("/whatif/slow-host/infeed-bound", test_slow_host);
  g_test_add_func("/whatif/link/failed-ring-allreduce", test_failed_link_ring);
  g_test_add_func("/whatif/link/degraded-ring-allreduce", test_degraded_link_ring);
  g_test_add_func("/whatif/link/network-refuses", test_network_refuses);
  g_test_add_func("/whatif/link/failed-in-a-run", test_failed_link_run);
  g_test_add_func("/whatif/link/mesh-failure-is-an-error", test_mesh_failure);
  g_test_add_func("/whatif/config/errors", test_config_errors);
  g_test_add_func("/whatif/config/override", test_config_override);
  return g_test_run();
}

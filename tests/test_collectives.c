/* test_collectives.c: collectives timed against closed forms written out
 * here, and computed against independent references.
 *
 * Timing (timing only, one byte per element):
 * - ring all-reduce of S bytes over N one-hop members takes
 *   2(N-1)(alpha + S/(N B)) within 0.5%, for any chunk size (a one-hop
 *   step of m bytes is alpha + m/B whatever the chunking: the link sends
 *   the chunks back to back and only the last one's latency shows);
 * - the chunk-size condition: on a ring whose neighbours are h hops apart a
 *   step costs h alpha + m/B + (h-1) c/B, so the alpha-beta form with
 *   alpha' = h alpha holds within 0.5% iff (h-1) c/B <= 0.005 (h alpha + m/B):
 *   checked on both sides, and the exact expression on both;
 * - bidirectional ring 2(N-1)(alpha + S/(2 N B));
 * - a ring over two chips' four cores (tpu-v3-8: on-chip edges, ICI edges)
 *   is bound by its ICI links, each carrying 2(N-1) messages of S/N bytes
 *   back to back: 2(N-1) S/(N B) within 0.5%, and its prediction (which
 *   keeps a link busy from the reduce-scatter into the all-gather) within
 *   0.1% of the simulated time;
 * - on a mesh without wrap-around (4x4, 3x4, 4x3, 2x6, 4x4x2, 3x3x2) the
 *   ring and the bidirectional ring go round a Hamiltonian cycle and meet
 *   the same two forms (bidir with two cores a chip too); on 3x3, which
 *   has none, the ring costs more;
 * - butterfly (recursive doubling) on ring:N, N = 2, 4, 8, 16, one chunk:
 *   sum over s of h_s (alpha + S/B), h_s = min(2^s, N - 2^s) hops (each
 *   message's bytes cross h_s links one after another); its prediction
 *   never below that;
 * - dimension-wise torus on X x Y (and X x Y x Z):
 *   2 sum_d (L_d - 1)(alpha + S_d/(2 L_d B)), S_d the data left before d;
 * - pipelined broadcast down a chain of D one-hop edges in P pieces of p
 *   bytes: D alpha + (P + D - 1) p/B (ring: D = N-1; bidir: D = N/2);
 * - a member arriving late delays the others by no less than its lateness;
 * - auto picks the algorithm with the smallest prediction (multiring for
 *   64 MiB on the tori).
 * Numerics (float buffers):
 * - all-reduce equals the double-precision sum within (N-1) eps sum|x|, and
 *   every member ends bit-identical, for every algorithm;
 * - the ring's result is bit-identical to a plain loop adding in the ring's
 *   order (segment q starts at member q+1);
 * - on adversarial inputs (1e8, 1, -1e8 mixed) ring, bidir and torus give
 *   bitwise different sums, each still identical across members;
 * - reduce-scatter leaves each member the ring's sum over its block;
 *   all-gather and broadcast copy exactly;
 * - replica groups [[0,2,4,6],[1,3,5,7]] reduce independently and at once;
 * - rounds: three all-reduces back to back, members re-arriving from their
 *   done callbacks.
 * The CLI (when $PODSIM names the built binary, as `make test` sets it):
 * - `podsim collective` runs on every shipped topology and prints the JSON
 *   contract; on ring:8 its times match 2(N-1)(alpha + S/(N B)) with the
 *   default and with --set ici.bandwidth_Bps / ici.latency_s;
 * - bad input exits 2 with a "podsim: " message;
 * - --trace writes a trace with the links process. */
#include "collectives/collective.h"
#include "support/experiment.h"
#include "support/network.h"

#include <float.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <sys/wait.h>
#include <math.h>
#include <string.h>

static PsTopology *topo(const char *spec, const char *o1, const char *o2)
{
  const char *ov[] = {o1, o2, NULL};
  return shorthand_topology(spec, ov);
}

/* ---- a harness: everyone arrives, record done times ------------------ */

typedef struct {
  PsCollective *c;
  ps_time_t *done;
  int n_done;
  /* rounds: re-arrive until `rounds` are done */
  int rounds;
  int *round_of;
  float **bufs;
  float **inputs;
  int64_t count;
} Run;

static void on_done(void *ctx, int member, ps_time_t t)
{
  Run *r = ctx;
  r->done[member] = t;
  r->n_done++;
}

static PsCollective *coll_new(NetFix *f, PsCollOp op, const char *algo, const int *devs, int n,
                              int64_t count, int eb, int root)
{
  PsCollSpec spec = {op, algo, devs, n, count, eb, root};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(f->net, &spec, &error);
  g_assert_no_error(error);
  g_assert_nonnull(c);
  return c;
}

static int *all_devices(NetFix *f)
{
  int n = ps_network_devices(f->net);
  int *d = g_new(int, n);
  for (int i = 0; i < n; i++)
    d[i] = i;
  return d;
}

/* Runs one round with every member arriving at the current time (or at
 * arrive[m] when given), buffers optional; returns the last done time
 * minus the start. */
static ps_time_t run_round(NetFix *f, PsCollective *c, float **bufs, const ps_time_t *late)
{
  int n = ps_collective_members(c);
  Run r = {.c = c, .done = g_new0(ps_time_t, n)};
  ps_time_t t0 = ps_engine_now(f->engine);
  for (int m = 0; m < n; m++)
    if (!late || late[m] == 0)
      ps_collective_arrive(c, m, bufs ? bufs[m] : NULL, on_done, &r);
  if (late) {
    /* arrive the late ones by running the engine up to their time */
    for (int m = 0; m < n; m++)
      if (late[m] > 0) {
        ps_engine_run(f->engine, t0 + late[m]);
        ps_collective_arrive(c, m, bufs ? bufs[m] : NULL, on_done, &r);
      }
  }
  ps_engine_run(f->engine, PS_TIME_NEVER);
  g_assert_cmpint(r.n_done, ==, n);
  ps_time_t last = 0;
  for (int m = 0; m < n; m++)
    last = MAX(last, r.done[m] - t0);
  g_free(r.done);
  g_assert_cmpuint(ps_network_in_flight(f->net), ==, 0);
  return last;
}

static double rel(double a, double b) { return fabs(a - b) / b; }

/* ---- timing --------------------------------------------------------- */

static void test_ring_alpha_beta(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int Ns[] = {2, 5, 8, 16};
  const int64_t S = 8 << 20;
  const int64_t chunks[] = {4096, 65536, 1 << 20, 8 << 20};
  for (guint i = 0; i < G_N_ELEMENTS(Ns); i++)
    for (guint k = 0; k < G_N_ELEMENTS(chunks); k++) {
      int N = Ns[i];
      char spec[32];
      g_snprintf(spec, sizeof spec, "ring:%d", N);
      NetFix f;
      netfix_init(&f, topo(spec, NULL, NULL), chunks[k]);
      int *devs = all_devices(&f);
      PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, N, S, 1, 0);
      double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
      double want = 2.0 * (N - 1) * (alpha + (double)S / (N * B));
      if (rel(t, want) > 0.005)
        g_error("ring N=%d chunk=%" G_GINT64_FORMAT ": %.9g s, formula %.9g s", N, chunks[k],
                t, want);
      g_assert_cmpfloat(rel(ps_collective_predict_s(c), want), <, 1e-5);
      ps_collective_free(c);
      g_free(devs);
      netfix_clear(&f);
    }
  /* the ring over a 2-D torus runs in snake order: every edge one hop */
  NetFix f;
  netfix_init(&f, topo("torus:4x4", NULL, NULL), 65536);
  int *devs = all_devices(&f);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, 16, S, 1, 0);
  double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
  g_assert_cmpfloat(rel(t, 2.0 * 15 * (alpha + (double)S / (16 * B))), <, 0.005);
  ps_collective_free(c);
  g_free(devs);
  netfix_clear(&f);
}

/* A mesh (no wrap-around) with an even number of chips has a Hamiltonian
 * cycle, so the ring and the bidirectional ring step one hop at a time
 * and meet their closed forms exactly as on a ring; the snake order they
 * used before closed across the whole grid (4x4: 3 hops back, 15% slower
 * at 8 MiB).  A 3x3 mesh has no such cycle (odd), so its ring must cost
 * more than the formula. */
static void test_ring_mesh_cycle(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int64_t S = 8 << 20;
  const struct {
    const char *spec, *wrap;
    int n;
  } meshes[] = {
      {"torus:4x4", "torus.wrap=[false,false]", 16},
      {"torus:3x4", "torus.wrap=[false,false]", 12},
      {"torus:4x3", "torus.wrap=[false,false]", 12},
      {"torus:2x6", "torus.wrap=[false,false]", 12},
      {"torus:4x4x2", "torus.wrap=[false,false,false]", 32},
      {"torus:3x3x2", "torus.wrap=[false,false,false]", 18},
  };
  for (guint i = 0; i < G_N_ELEMENTS(meshes); i++)
    for (int bidir = 0; bidir < 2; bidir++) {
      int N = meshes[i].n;
      NetFix f;
      netfix_init(&f, topo(meshes[i].spec, meshes[i].wrap, NULL), 65536);
      int *devs = all_devices(&f);
      PsCollective *c =
          coll_new(&f, PS_COLL_ALL_REDUCE, bidir ? "bidir" : "ring", devs, N, S, 1, 0);
      double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
      double want = 2.0 * (N - 1) * (alpha + (double)S / ((bidir ? 2.0 : 1.0) * N * B));
      if (rel(t, want) > 0.005)
        g_error("%s %s: %.9g s, one-hop formula %.9g s", meshes[i].spec,
                bidir ? "bidir" : "ring", t, want);
      ps_collective_free(c);
      g_free(devs);
      netfix_clear(&f);
    }
  /* two cores a chip: a chip's cores in turn (one on-chip step), so the
   * bidirectional ring still steps one ICI hop at most */
  {
    NetFix f;
    netfix_init(&f, topo("torus:4x4", "torus.wrap=[false,false]", "chip.cores=2"), 65536);
    int *devs = all_devices(&f);
    PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "bidir", devs, 32, S, 1, 0);
    double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
    g_assert_cmpfloat(rel(t, 2.0 * 31 * (alpha + (double)S / (2.0 * 32 * B))), <, 0.005);
    ps_collective_free(c);
    g_free(devs);
    netfix_clear(&f);
  }
  NetFix f;
  netfix_init(&f, topo("torus:3x3", "torus.wrap=[false,false]", NULL), 65536);
  int *devs = all_devices(&f);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, 9, S, 1, 0);
  double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
  g_assert_cmpfloat(t, >, 1.05 * 2.0 * 8 * (alpha + (double)S / (9 * B)));
  ps_collective_free(c);
  g_free(devs);
  netfix_clear(&f);
}

/* Butterfly (recursive doubling) on ring:N, N = 2^k: step s exchanges
 * whole buffers with the member 2^s away, h_s = min(2^s, N - 2^s) hops,
 * so the step costs h_s alpha + S/B + (h_s - 1) c/B plus what waits on a
 * shared link.  For S of one chunk no link is shared when it matters
 * (step s's two messages through a link leave 2^s apart), so the total is
 * sum_s [h_s alpha + h_s S/B]; the closed form counts the messages that
 * share a link as one larger one, so it is never below the events; and it
 * is at most N/4 of a ring's 2(N-1) latencies for 8 bytes. */
static void test_butterfly_closed_form(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int Ns[] = {2, 4, 8, 16};
  const int64_t sizes[] = {8, 4096};
  for (guint i = 0; i < G_N_ELEMENTS(Ns); i++)
    for (guint k = 0; k < G_N_ELEMENTS(sizes); k++) {
      int N = Ns[i];
      int64_t S = sizes[k];
      char spec[32];
      g_snprintf(spec, sizeof spec, "ring:%d", N);
      NetFix f;
      netfix_init(&f, topo(spec, NULL, NULL), 1 << 20);
      int *devs = all_devices(&f);
      PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "butterfly", devs, N, S, 1, 0);
      double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
      double want = 0;
      for (int d = 1; d < N; d *= 2) {
        int h = MIN(d, N - d);
        want += h * alpha + h * (double)S / B;
      }
      if (rel(t, want) > 1e-4)
        g_error("butterfly N=%d S=%" G_GINT64_FORMAT ": %.9g s, closed form %.9g s", N, S, t,
                want);
      g_assert_cmpfloat(ps_collective_predict_s(c), >=, t * (1 - 1e-9));
      if (S == 8)
        g_assert_cmpfloat(t, <, 2.0 * (N - 1) * alpha * (N > 2 ? 0.6 : 1.01));
      ps_collective_free(c);
      g_free(devs);
      netfix_clear(&f);
    }
}

/* Members 0,2,4,6 of ring:8: every ring edge is h = 2 hops, no two share
 * a link.  Step: h alpha + m/B + (h-1) c/B. */
static void test_ring_chunk_condition(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int N = 4, h = 2;
  const int64_t S = 8 << 20, m = S / N;
  const int devs[] = {0, 2, 4, 6};
  const int64_t small = 4096, big = m;
  for (int big_chunks = 0; big_chunks < 2; big_chunks++) {
    int64_t c = big_chunks ? big : small;
    NetFix f;
    netfix_init(&f, topo("ring:8", NULL, NULL), c);
    PsCollective *coll = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, N, S, 1, 0);
    double t = ps_time_to_s(run_round(&f, coll, NULL, NULL));
    double ab = 2.0 * (N - 1) * (h * alpha + (double)m / B);
    double exact = 2.0 * (N - 1) * (h * alpha + (double)m / B + (h - 1) * (double)c / B);
    gboolean condition = (h - 1) * (double)c / B <= 0.005 * (h * alpha + (double)m / B);
    g_assert_cmpint(condition, ==, !big_chunks);
    g_assert_cmpfloat(rel(t, exact), <, 2e-5); /* serialization rounds to the ps per chunk */
    if (condition)
      g_assert_cmpfloat(rel(t, ab), <, 0.005);
    else
      g_assert_cmpfloat(rel(t, ab), >, 0.005);
    ps_collective_free(coll);
    netfix_clear(&f);
  }
}

static void test_bidir_alpha_beta(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int64_t S = 8 << 20;
  for (int N = 3; N <= 9; N += 3) {
    char spec[32];
    g_snprintf(spec, sizeof spec, "ring:%d", N);
    NetFix f;
    netfix_init(&f, topo(spec, NULL, NULL), 65536);
    int *devs = all_devices(&f);
    PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "bidir", devs, N, S, 1, 0);
    double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
    double want = 2.0 * (N - 1) * (alpha + (double)S / (2.0 * N * B));
    g_assert_cmpfloat(rel(t, want), <, 0.005);
    ps_collective_free(c);
    g_free(devs);
    netfix_clear(&f);
  }
}

/* 2 sum_d (L_d - 1)(alpha + S_d / (2 L_d B)) with S_0 = S, S_{d+1} = S_d / L_d. */
static double torus_formula(const int *L, int nd, double S, double alpha, double B)
{
  double t = 0, Sd = S;
  for (int d = 0; d < nd; d++) {
    t += 2.0 * (L[d] - 1) * (alpha + Sd / (2.0 * L[d] * B));
    Sd /= L[d];
  }
  return t;
}

static void test_torus_formula(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int64_t S = 16 << 20;
  struct {
    const char *spec;
    int L[3], nd;
  } cases[] = {{"torus:4x4", {4, 4}, 2}, {"torus:4x8", {4, 8}, 2}, {"torus:8x3", {8, 3}, 2},
               {"torus:4x4x4", {4, 4, 4}, 3}};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    NetFix f;
    netfix_init(&f, topo(cases[i].spec, NULL, NULL), 65536);
    int n = ps_network_devices(f.net);
    int *devs = all_devices(&f);
    PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "torus", devs, n, S, 1, 0);
    double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
    double want = torus_formula(cases[i].L, cases[i].nd, (double)S, alpha, B);
    if (rel(t, want) > 0.005)
      g_error("%s: torus all-reduce %.9g s, formula %.9g s", cases[i].spec, t, want);
    g_assert_cmpfloat(rel(ps_collective_predict_s(c), want), <, 0.005);
    ps_collective_free(c);
    g_free(devs);
    netfix_clear(&f);
  }
}

/* A ring whose edges alternate between a chip's two cores and the ICI:
 * the ICI links carry every step's message back to back. */
static void test_ring_mixed_edges(void)
{
  const int64_t S = 64 << 20;
  const int N = 4;
  PsTopology *t = topology_load("tpu-v3-8", NULL);
  const double B = t->ici_bandwidth_Bps;
  NetFix f;
  netfix_init(&f, t, 1 << 20);
  int devs[] = {0, 1, 2, 3};
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, N, S, 1, 0);
  double sim = ps_time_to_s(run_round(&f, c, NULL, NULL));
  double bound = 2.0 * (N - 1) * (double)S / (N * B);
  g_test_message("ring over 2 chips' 4 cores: %.6g s simulated, ICI bound %.6g s, predicted "
                 "%.6g s", sim, bound, ps_collective_predict_s(c));
  g_assert_cmpfloat(rel(sim, bound), <, 0.005);
  g_assert_cmpfloat(rel(ps_collective_predict_s(c), sim), <, 0.001);
  ps_collective_free(c);
  netfix_clear(&f);
}

/* Reduce-scatter and all-gather alone: half an all-reduce each. */
static void test_rs_ag_timing(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int64_t S = 8 << 20;
  const int N = 8;
  for (int op = PS_COLL_REDUCE_SCATTER; op <= PS_COLL_ALL_GATHER; op++) {
    NetFix f;
    netfix_init(&f, topo("ring:8", NULL, NULL), 65536);
    int *devs = all_devices(&f);
    PsCollective *c = coll_new(&f, (PsCollOp)op, "ring", devs, N, S, 1, 0);
    double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
    g_assert_cmpfloat(rel(t, (N - 1) * (alpha + (double)S / (N * B))), <, 0.005);
    ps_collective_free(c);
    g_free(devs);
    netfix_clear(&f);
  }
}

static void test_broadcast_chain(void)
{
  const double alpha = 1e-6, B = 83e9;
  const int64_t S = 8 << 20, chunk = 65536;
  NetFix f;
  netfix_init(&f, topo("ring:8", NULL, NULL), chunk);
  int *devs = all_devices(&f);
  PsCollective *c = coll_new(&f, PS_COLL_BROADCAST, "ring", devs, 8, S, 1, 3);
  double t = ps_time_to_s(run_round(&f, c, NULL, NULL));
  int D = 7;
  double P = (double)S / chunk;
  double want = D * alpha + (P + D - 1) * chunk / B;
  g_assert_cmpfloat(rel(t, want), <, 0.005);
  g_assert_cmpfloat(rel(ps_collective_predict_s(c), want), <, 0.005);
  ps_collective_free(c);
  /* bidir: two chains from the root, 4 and 3 members long */
  c = coll_new(&f, PS_COLL_BROADCAST, "bidir", devs, 8, S, 1, 3);
  t = ps_time_to_s(run_round(&f, c, NULL, NULL));
  D = 4;
  want = D * alpha + (P + D - 1) * chunk / B;
  g_assert_cmpfloat(rel(t, want), <, 0.005);
  g_assert_cmpfloat(rel(ps_collective_predict_s(c), want), <, 0.005);
  ps_collective_free(c);
  g_free(devs);
  netfix_clear(&f);
}

static void test_sendrecv(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:8", NULL, NULL), 65536);
  int devs[] = {6, 1};
  float a[1000], b[1000];
  for (int i = 0; i < 1000; i++) {
    a[i] = (float)i * 0.5f;
    b[i] = -1;
  }
  PsCollective *c = coll_new(&f, PS_COLL_SEND_RECV, "auto", devs, 2, 1000, 4, 0);
  g_assert_cmpstr(ps_collective_algo(c), ==, "p2p");
  float *bufs[] = {a, b};
  Run r = {.c = c, .done = g_new0(ps_time_t, 2)};
  ps_collective_arrive(c, 0, bufs[0], on_done, &r);
  ps_collective_arrive(c, 1, bufs[1], on_done, &r);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r.done[0], ==, 0); /* the sender is free at once */
  /* 6 -> 1 on ring:8: 3 hops the short way (over the wrap) */
  double want = 3 * 1e-6 + 4000 / 83e9 + 2 * 4000 / 83e9;
  g_assert_cmpfloat(rel(ps_time_to_s(r.done[1]), want), <, 1e-6);
  g_assert_true(memcmp(a, b, sizeof a) == 0);
  g_free(r.done);
  ps_collective_free(c);
  netfix_clear(&f);
}

/* Member 2 arrives 1 ms late: nobody can finish before its data leaves, and
 * everything ends within one lone all-reduce of its arrival. */
static void test_latecomer(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:8", NULL, NULL), 65536);
  int *devs = all_devices(&f);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, 8, 1 << 20, 1, 0);
  ps_time_t alone = run_round(&f, c, NULL, NULL);
  ps_time_t late[8] = {0};
  late[2] = ps_time_from_s(1e-3);
  Run r = {.c = c, .done = g_new0(ps_time_t, 8)};
  ps_time_t t0 = ps_engine_now(f.engine);
  for (int m = 0; m < 8; m++)
    if (m != 2)
      ps_collective_arrive(c, m, NULL, on_done, &r);
  ps_engine_run(f.engine, t0 + late[2]);
  g_assert_cmpint(r.n_done, ==, 0);
  ps_collective_arrive(c, 2, NULL, on_done, &r);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r.n_done, ==, 8);
  for (int m = 0; m < 8; m++) {
    g_assert_cmpint(r.done[m] - t0, >, late[2]);
    g_assert_cmpint(r.done[m] - t0, <=, late[2] + alone);
  }
  g_free(r.done);
  ps_collective_free(c);
  g_free(devs);
  netfix_clear(&f);
}

static void test_auto(void)
{
  const char *specs[] = {"ring:8", "torus:8x8", "torus:4x4x4"};
  const int64_t sizes[] = {8, 1 << 20, 64 << 20};
  for (guint i = 0; i < G_N_ELEMENTS(specs); i++)
    for (guint k = 0; k < G_N_ELEMENTS(sizes); k++) {
      NetFix f;
      netfix_init(&f, topo(specs[i], NULL, NULL), 1 << 20);
      int n = ps_network_devices(f.net);
      int *devs = all_devices(&f);
      PsCollective *a = coll_new(&f, PS_COLL_ALL_REDUCE, "auto", devs, n, sizes[k], 1, 0);
      double best = INFINITY;
      /* multiring runs on the tori alone */
      const char *algos[] = {"ring", "bidir", "torus", "butterfly", "multiring"};
      for (int j = 0; j < (i > 0 ? 5 : 4); j++) {
        PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, algos[j], devs, n, sizes[k], 1, 0);
        best = MIN(best, ps_collective_predict_s(c));
        ps_collective_free(c);
      }
      g_assert_cmpfloat(ps_collective_predict_s(a), ==, best);
      g_assert_nonnull(strstr(ps_collective_why(a), ps_collective_algo(a)));
      if (k == 0) /* 8 bytes: latency alone, log2 N steps against 2(N-1) */
        g_assert_cmpstr(ps_collective_algo(a), ==, "butterfly");
      else if (i > 0 && k == 2)
        g_assert_cmpstr(ps_collective_algo(a), ==, "multiring");
      else if (i > 0)
        g_assert_true(strcmp(ps_collective_algo(a), "torus") == 0 ||
                      strcmp(ps_collective_algo(a), "multiring") == 0);
      ps_collective_free(a);
      g_free(devs);
      netfix_clear(&f);
    }
}

/* A cache of auto's choices: a collective like an earlier one (members,
 * operation, size) takes its algorithm and reason; one that differs in
 * any of them predicts afresh, and so picks as an uncached one does. */
static void test_auto_cache(void)
{
  NetFix f;
  netfix_init(&f, topo("torus:4x4", NULL, NULL), 1 << 20);
  int n = ps_network_devices(f.net);
  int *devs = all_devices(&f);
  int *rev = g_new(int, n);
  for (int i = 0; i < n; i++)
    rev[i] = devs[n - 1 - i];
  PsCollCache *cache = ps_coll_cache_new();
  const int64_t sizes[] = {8, 1 << 20, 8, 64 << 20, 1 << 20};
  for (guint k = 0; k < G_N_ELEMENTS(sizes); k++)
    for (int order = 0; order < 2; order++) {
      const int *members = order ? rev : devs;
      PsCollSpec spec = {PS_COLL_ALL_REDUCE, "auto", members, n, sizes[k], 1, 0};
      GError *error = NULL;
      PsCollective *cached = ps_collective_new_cached(f.net, &spec, cache, &error);
      g_assert_no_error(error);
      PsCollective *fresh = ps_collective_new(f.net, &spec, &error);
      g_assert_no_error(error);
      g_assert_cmpstr(ps_collective_algo(cached), ==, ps_collective_algo(fresh));
      g_assert_cmpstr(ps_collective_why(cached), ==, ps_collective_why(fresh));
      g_assert_cmpfloat(ps_collective_predict_s(cached), ==, ps_collective_predict_s(fresh));
      ps_collective_free(cached);
      ps_collective_free(fresh);
    }
  /* tiny messages pick butterfly (4 exchanges, 6 hops, against torus's 12
   * steps), large ones multiring: the cache keeps them apart */
  PsCollSpec small = {PS_COLL_ALL_REDUCE, "auto", devs, n, 8, 1, 0};
  PsCollSpec large = {PS_COLL_ALL_REDUCE, "auto", devs, n, 64 << 20, 1, 0};
  PsCollective *a = ps_collective_new_cached(f.net, &small, cache, NULL);
  PsCollective *b = ps_collective_new_cached(f.net, &large, cache, NULL);
  g_assert_cmpstr(ps_collective_algo(a), ==, "butterfly");
  g_assert_cmpstr(ps_collective_algo(b), ==, "multiring");
  g_assert_cmpfloat(ps_collective_predict_s(a), <, ps_collective_predict_s(b));
  ps_collective_free(a);
  ps_collective_free(b);
  ps_coll_cache_free(cache);
  g_free(rev);
  g_free(devs);
  netfix_clear(&f);
}

static void test_errors(void)
{
  NetFix f;
  netfix_init(&f, topo("torus:4x2", NULL, NULL), 1024);
  struct {
    PsCollOp op;
    const char *algo;
    int devs[4], n, root;
    const char *needle;
  } cases[] = {
      {PS_COLL_ALL_REDUCE, "tree", {0, 1}, 2, 0, "unknown collective algorithm"},
      {PS_COLL_ALL_REDUCE, "ring", {0, 1, 1}, 3, 0, "listed twice"},
      {PS_COLL_ALL_REDUCE, "ring", {0, 9}, 2, 0, "devices 0..7"},
      {PS_COLL_ALL_REDUCE, "ring", {0}, 0, 0, "at least one member"},
      {PS_COLL_SEND_RECV, "auto", {0, 1, 2}, 3, 0, "exactly two"},
      {PS_COLL_BROADCAST, "ring", {0, 1, 2}, 3, 5, "root"},
      {PS_COLL_ALL_REDUCE, "torus", {0, 1, 4}, 3, 0, "box"},
      {PS_COLL_ALL_REDUCE, "p2p", {0, 1}, 2, 0, "only runs send-recv"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsCollSpec spec = {cases[i].op, cases[i].algo, cases[i].devs, cases[i].n, 100, 4,
                       cases[i].root};
    GError *error = NULL;
    g_assert_null(ps_collective_new(f.net, &spec, &error));
    g_assert_nonnull(error);
    g_assert_true(error->domain == PS_INPUT_ERROR);
    if (!strstr(error->message, cases[i].needle))
      g_error("case %u: '%s' lacks '%s'", i, error->message, cases[i].needle);
    g_error_free(error);
  }
  netfix_clear(&f);
}

/* ---- numerics ------------------------------------------------------- */

typedef struct {
  int n;
  int64_t count;
  float **in;    /* inputs, kept */
  float **buf;   /* working buffers */
} Data;

static guint32 next_u32(guint64 *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (guint32)(*s >> 11);
}

static void data_init(Data *d, int n, int64_t count, guint64 seed, gboolean adversarial)
{
  d->n = n;
  d->count = count;
  d->in = g_new(float *, n);
  d->buf = g_new(float *, n);
  guint64 s = seed * 2654435761u + 1;
  for (int m = 0; m < n; m++) {
    d->in[m] = g_new(float, count);
    d->buf[m] = g_new(float, count);
  }
  for (int64_t e = 0; e < count; e++) {
    int big = (int)(next_u32(&s) % n), neg = (int)(next_u32(&s) % n);
    for (int m = 0; m < n; m++) {
      float v;
      if (adversarial)
        v = m == big ? 1e8f : m == neg ? -1e8f : (next_u32(&s) % 2 ? 1.0f : 3.0f);
      else
        v = (float)((int)(next_u32(&s) % 2000001) - 1000000) * 1e-3f;
      d->in[m][e] = v;
    }
  }
  for (int m = 0; m < n; m++)
    memcpy(d->buf[m], d->in[m], (size_t)count * sizeof(float));
}

static void data_reset(Data *d)
{
  for (int m = 0; m < d->n; m++)
    memcpy(d->buf[m], d->in[m], (size_t)d->count * sizeof(float));
}

static void data_clear(Data *d)
{
  for (int m = 0; m < d->n; m++) {
    g_free(d->in[m]);
    g_free(d->buf[m]);
  }
  g_free(d->in);
  g_free(d->buf);
}

/* |r - sum| <= (n-1) eps sum|x| + tiny, against a double-precision sum. */
static void check_sum(const Data *d, const float *r, int64_t lo, int64_t len)
{
  for (int64_t e = lo; e < lo + len; e++) {
    double s = 0, a = 0;
    for (int m = 0; m < d->n; m++) {
      s += d->in[m][e];
      a += fabs(d->in[m][e]);
    }
    double tol = (d->n - 1) * (double)FLT_EPSILON * a + 1e-30;
    if (fabs(r[e] - s) > tol)
      g_error("element %" G_GINT64_FORMAT ": %.9g, double sum %.9g (tolerance %.3g)", e,
              (double)r[e], s, tol);
  }
}

static void check_identical(const Data *d)
{
  for (int m = 1; m < d->n; m++)
    if (memcmp(d->buf[0], d->buf[m], (size_t)d->count * sizeof(float)) != 0)
      g_error("member %d differs from member 0", m);
}

static void allreduce_numerics(const char *spec, const char *o1, const char *algo,
                               gboolean adversarial, float *result_out)
{
  NetFix f;
  netfix_init(&f, topo(spec, o1, NULL), 256); /* 64 floats per chunk: many chunks */
  int n = ps_network_devices(f.net);
  int *devs = all_devices(&f);
  Data d;
  data_init(&d, n, 1003, 7, adversarial);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, algo, devs, n, d.count, 4, 0);
  run_round(&f, c, d.buf, NULL);
  check_identical(&d);
  check_sum(&d, d.buf[0], 0, d.count);
  if (result_out)
    memcpy(result_out, d.buf[0], (size_t)d.count * sizeof(float));
  ps_collective_free(c);
  data_clear(&d);
  g_free(devs);
  netfix_clear(&f);
}

static void test_numerics_allreduce(void)
{
  const char *algos[] = {"ring", "bidir", "torus"};
  for (int j = 0; j < 3; j++) {
    allreduce_numerics("ring:7", NULL, algos[j], FALSE, NULL);
    allreduce_numerics("torus:4x4", NULL, algos[j], FALSE, NULL);
    allreduce_numerics("torus:3x2x4", NULL, algos[j], FALSE, NULL);
    allreduce_numerics("torus:4x4", "chip.cores=2", algos[j], FALSE, NULL);
    allreduce_numerics("torus:4x4x8", "torus.twisted=true", algos[j], FALSE, NULL);
    allreduce_numerics("torus:3x3", "torus.wrap=[false,false]", algos[j], FALSE, NULL);
  }
  /* butterfly: power-of-two groups, on adversarial inputs too */
  allreduce_numerics("ring:8", NULL, "butterfly", FALSE, NULL);
  allreduce_numerics("torus:4x4", "chip.cores=2", "butterfly", FALSE, NULL);
  allreduce_numerics("torus:4x2x2", "torus.wrap=[false,false,false]", "butterfly", FALSE, NULL);
  allreduce_numerics("torus:4x4", NULL, "butterfly", TRUE, NULL);
}

/* The ring in listed order: segment q is x[q+1] + x[q+2] + ... + x[q],
 * added left to right; the events must give exactly that. */
static void test_numerics_ring_order(void)
{
  const int N = 6;
  NetFix f;
  netfix_init(&f, topo("ring:6", NULL, NULL), 64);
  int *devs = all_devices(&f);
  Data d;
  data_init(&d, N, 600, 11, TRUE);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, N, d.count, 4, 0);
  run_round(&f, c, d.buf, NULL);
  check_identical(&d);
  for (int q = 0; q < N; q++) {
    int64_t lo = d.count * q / N, hi = d.count * (q + 1) / N;
    for (int64_t e = lo; e < hi; e++) {
      float acc = d.in[(q + 1) % N][e];
      for (int k = 2; k <= N; k++)
        acc = acc + d.in[(q + k) % N][e];
      if (memcmp(&acc, &d.buf[0][e], sizeof acc) != 0)
        g_error("segment %d element %" G_GINT64_FORMAT ": %.9g, loop in ring order %.9g", q,
                e, (double)d.buf[0][e], (double)acc);
    }
  }
  ps_collective_free(c);
  data_clear(&d);
  g_free(devs);
  netfix_clear(&f);
}

static int count_diff(const float *a, const float *b, int64_t n)
{
  int k = 0;
  for (int64_t i = 0; i < n; i++)
    k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return k;
}

static void test_numerics_order_effects(void)
{
  float *ring = g_new(float, 1003), *bidir = g_new(float, 1003), *torus = g_new(float, 1003);
  allreduce_numerics("torus:4x4", NULL, "ring", TRUE, ring);
  allreduce_numerics("torus:4x4", NULL, "bidir", TRUE, bidir);
  allreduce_numerics("torus:4x4", NULL, "torus", TRUE, torus);
  int rb = count_diff(ring, bidir, 1003), rt = count_diff(ring, torus, 1003);
  g_test_message("ring vs bidir: %d of 1003 sums differ; ring vs torus: %d", rb, rt);
  g_assert_cmpint(rb, >, 0);
  g_assert_cmpint(rt, >, 0);
  g_free(ring);
  g_free(bidir);
  g_free(torus);
}

static void test_numerics_rs_ag(void)
{
  const char *algos[] = {"ring", "bidir", "torus"};
  for (int j = 0; j < 3; j++) {
    NetFix f;
    netfix_init(&f, topo("torus:4x2", NULL, NULL), 128);
    int n = 8, *devs = all_devices(&f);
    Data d;
    data_init(&d, n, 517, 3, FALSE);
    /* reduce-scatter: each block is the sum, and equal to the all-reduce's */
    PsCollective *rs = coll_new(&f, PS_COLL_REDUCE_SCATTER, algos[j], devs, n, d.count, 4, 0);
    run_round(&f, rs, d.buf, NULL);
    float **rsout = g_new(float *, n);
    int64_t covered = 0;
    for (int m = 0; m < n; m++) {
      int64_t off, len;
      ps_collective_block(rs, m, &off, &len);
      covered += len;
      check_sum(&d, d.buf[m], off, len);
      rsout[m] = g_memdup2(d.buf[m], (size_t)d.count * sizeof(float));
    }
    g_assert_cmpint(covered, ==, d.count);
    data_reset(&d);
    PsCollective *ar = coll_new(&f, PS_COLL_ALL_REDUCE, algos[j], devs, n, d.count, 4, 0);
    run_round(&f, ar, d.buf, NULL);
    for (int m = 0; m < n; m++) {
      int64_t off, len;
      ps_collective_block(rs, m, &off, &len);
      g_assert_true(memcmp(rsout[m] + off, d.buf[m] + off, (size_t)len * sizeof(float)) == 0);
      g_free(rsout[m]);
    }
    g_free(rsout);
    /* all-gather: member m contributes its block; everyone gets all, exactly */
    PsCollective *ag = coll_new(&f, PS_COLL_ALL_GATHER, algos[j], devs, n, d.count, 4, 0);
    float *want = g_new(float, d.count);
    for (int m = 0; m < n; m++) {
      int64_t off, len;
      ps_collective_block(ag, m, &off, &len);
      for (int64_t e = 0; e < d.count; e++)
        d.buf[m][e] = e >= off && e < off + len ? (float)(m * 1000 + e) * 0.25f : NAN;
      for (int64_t e = off; e < off + len; e++)
        want[e] = d.buf[m][e];
    }
    run_round(&f, ag, d.buf, NULL);
    for (int m = 0; m < n; m++)
      g_assert_true(memcmp(d.buf[m], want, (size_t)d.count * sizeof(float)) == 0);
    g_free(want);
    ps_collective_free(rs);
    ps_collective_free(ar);
    ps_collective_free(ag);
    data_clear(&d);
    g_free(devs);
    netfix_clear(&f);
  }
}

static void test_numerics_broadcast(void)
{
  const char *algos[] = {"ring", "bidir", "torus"};
  for (int j = 0; j < 3; j++) {
    NetFix f;
    netfix_init(&f, topo("torus:4x3", NULL, NULL), 64);
    int n = 12, *devs = all_devices(&f);
    Data d;
    data_init(&d, n, 999, 5, FALSE);
    PsCollective *c = coll_new(&f, PS_COLL_BROADCAST, algos[j], devs, n, d.count, 4, 5);
    run_round(&f, c, d.buf, NULL);
    for (int m = 0; m < n; m++)
      g_assert_true(memcmp(d.buf[m], d.in[5], (size_t)d.count * sizeof(float)) == 0);
    ps_collective_free(c);
    data_clear(&d);
    g_free(devs);
    netfix_clear(&f);
  }
}

/* [[0,2,4,6],[1,3,5,7]] on 2x2 chips of two cores: each group is one core
 * of every chip, a 2x2 grid; both reduce at once over shared links. */
static void test_replica_groups(void)
{
  const char *algos[] = {"ring", "torus", "auto"};
  for (int j = 0; j < 3; j++) {
    NetFix f;
    netfix_init(&f, topo("torus:2x2", "chip.cores=2", NULL), 256);
    Data d;
    data_init(&d, 8, 700, 9, FALSE);
    int g0[] = {0, 2, 4, 6}, g1[] = {1, 3, 5, 7};
    PsCollective *c0 = coll_new(&f, PS_COLL_ALL_REDUCE, algos[j], g0, 4, d.count, 4, 0);
    PsCollective *c1 = coll_new(&f, PS_COLL_ALL_REDUCE, algos[j], g1, 4, d.count, 4, 0);
    Run r = {.done = g_new0(ps_time_t, 4)};
    for (int m = 0; m < 4; m++) {
      ps_collective_arrive(c0, m, d.buf[g0[m]], on_done, &r);
      ps_collective_arrive(c1, m, d.buf[g1[m]], on_done, &r);
    }
    ps_engine_run(f.engine, PS_TIME_NEVER);
    g_assert_cmpint(r.n_done, ==, 8);
    for (int gi = 0; gi < 2; gi++) {
      const int *g = gi ? g1 : g0;
      Data sub = {4, d.count, g_new(float *, 4), g_new(float *, 4)};
      for (int m = 0; m < 4; m++) {
        sub.in[m] = d.in[g[m]];
        sub.buf[m] = d.buf[g[m]];
      }
      check_identical(&sub);
      check_sum(&sub, sub.buf[0], 0, d.count);
      g_free(sub.in);
      g_free(sub.buf);
    }
    g_free(r.done);
    ps_collective_free(c0);
    ps_collective_free(c1);
    data_clear(&d);
    netfix_clear(&f);
  }
}

/* Three rounds back to back: every member re-arrives from its own done
 * callback, possibly while others still finish the previous round. */
typedef struct {
  PsCollective *c;
  Data *d;
  int *rounds;
  int target;
  int finished;
} Rounds;

static void rounds_done(void *ctx, int member, ps_time_t t)
{
  Rounds *r = ctx;
  if (++r->rounds[member] < r->target) {
    /* the next round sums this round's result with a fresh contribution */
    for (int64_t e = 0; e < r->d->count; e++)
      r->d->buf[member][e] = r->d->in[member][e];
    ps_collective_arrive(r->c, member, r->d->buf[member], rounds_done, r);
  } else {
    r->finished++;
  }
}

static void test_rounds(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:5", NULL, NULL), 128);
  int *devs = all_devices(&f);
  Data d;
  data_init(&d, 5, 333, 13, FALSE);
  PsCollective *c = coll_new(&f, PS_COLL_ALL_REDUCE, "bidir", devs, 5, d.count, 4, 0);
  int rounds[5] = {0};
  Rounds r = {c, &d, rounds, 3, 0};
  /* members arrive staggered so rounds overlap */
  for (int m = 0; m < 5; m++) {
    ps_engine_run(f.engine, ps_time_from_s(m * 3e-6));
    ps_collective_arrive(c, m, d.buf[m], rounds_done, &r);
  }
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r.finished, ==, 5);
  g_assert_cmpint(ps_collective_rounds_done(c), ==, 3);
  check_identical(&d);
  check_sum(&d, d.buf[0], 0, d.count);
  ps_collective_free(c);
  data_clear(&d);
  g_free(devs);
  netfix_clear(&f);
}


/* ---- the timing-only fast path -------------------------------------- */

/* Done times of two collectives over one group whose rounds overlap
 * (members arrive staggered), and every link's statistics after. */
typedef struct {
  ps_time_t done[2][16];
  int64_t bytes[4096], chunks[4096];
  ps_time_t busy[4096];
} Outcome;

static void fast_path_case(gboolean general, gboolean buffers, Outcome *out)
{
  /* two lanes per neighbour, messages of several chunks, one degraded and
   * one failed link: the failure sends some messages two ways round, so
   * steps mix one-hop and rerouted messages */
  NetFix f;
  netfix_init(&f, topo("torus:4x4", "ici.links_per_neighbor=2", NULL), 3000);
  GError *error = NULL;
  g_assert_true(ps_network_degrade_link(f.net, ps_network_ici_link(f.net, 5, 0, 1), 0.5,
                                        &error));
  g_assert_true(ps_network_degrade_link(f.net, ps_network_ici_link(f.net, 9, 1, -1), 0.0,
                                        &error));
  g_assert_no_error(error);
  g_autofree char *dir = g_dir_make_tmp("podsim-fast-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "t.json", NULL);
  PsTrace *tr = NULL;
  if (general) {
    tr = ps_trace_open(path, &error);
    g_assert_no_error(error);
    ps_network_set_trace(f.net, tr, 7);
  }
  int *devs = all_devices(&f);
  int64_t count = 40000;
  PsCollective *c[2] = {coll_new(&f, PS_COLL_ALL_REDUCE, "torus", devs, 16, count, 4, 0),
                        coll_new(&f, PS_COLL_ALL_REDUCE, "ring", devs, 16, count / 3, 4, 0)};
  float **bufs = g_new0(float *, 32);
  for (int i = 0; i < 32; i++)
    bufs[i] = buffers ? g_new0(float, count) : NULL;
  Run r[2];
  for (int k = 0; k < 2; k++)
    r[k] = (Run){.c = c[k], .done = out->done[k]};
  for (int m = 0; m < 16; m++) {
    ps_engine_run(f.engine, ps_time_from_s((m % 5) * 1.3e-6));
    ps_collective_arrive(c[0], m, bufs[m], on_done, &r[0]);
    ps_engine_run(f.engine, ps_time_from_s((m % 5) * 1.3e-6 + 0.7e-6));
    ps_collective_arrive(c[1], (m * 7) % 16, bufs[16 + m], on_done, &r[1]);
  }
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r[0].n_done, ==, 16);
  g_assert_cmpint(r[1].n_done, ==, 16);
  g_assert_cmpint(ps_network_n_links(f.net), <=, 4096);
  for (int l = 0; l < ps_network_n_links(f.net); l++) {
    PsLinkInfo info;
    if (!ps_network_link_info(f.net, l, &info))
      continue;
    out->bytes[l] = info.bytes;
    out->chunks[l] = info.chunks;
    out->busy[l] = info.busy;
  }
  if (tr) {
    ps_network_set_trace(f.net, NULL, 0);
    ps_trace_abort(tr);
  }
  g_rmdir(dir);
  for (int i = 0; i < 32; i++)
    g_free(bufs[i]);
  g_free(bufs);
  ps_collective_free(c[0]);
  ps_collective_free(c[1]);
  g_free(devs);
  netfix_clear(&f);
}

/* Timing only, messages of one hop skip the network's chunk events
 * (ps_network_send_link, one event per step): the same done times to the
 * picosecond and the same link statistics as the general path (taken when
 * the network is traced, or when members pass buffers). */
static void test_fast_path_exact(void)
{
  Outcome *fast = g_new0(Outcome, 1), *traced = g_new0(Outcome, 1), *numerics = g_new0(Outcome, 1);
  fast_path_case(FALSE, FALSE, fast);
  fast_path_case(TRUE, FALSE, traced);
  fast_path_case(FALSE, TRUE, numerics);
  int64_t total = 0;
  for (int k = 0; k < 2; k++)
    for (int m = 0; m < 16; m++) {
      g_assert_cmpint(fast->done[k][m], >, 0);
      g_assert_cmpint(fast->done[k][m], ==, traced->done[k][m]);
      g_assert_cmpint(fast->done[k][m], ==, numerics->done[k][m]);
    }
  for (int l = 0; l < 4096; l++) {
    g_assert_cmpint(fast->bytes[l], ==, traced->bytes[l]);
    g_assert_cmpint(fast->chunks[l], ==, traced->chunks[l]);
    g_assert_cmpint(fast->busy[l], ==, traced->busy[l]);
    g_assert_cmpint(fast->bytes[l], ==, numerics->bytes[l]);
    g_assert_cmpint(fast->busy[l], ==, numerics->busy[l]);
    total += fast->bytes[l];
  }
  g_assert_cmpint(total, >, 0);
  g_free(fast);
  g_free(traced);
  g_free(numerics);
}

/* ---- the CLI -------------------------------------------------------- */

static const char *podsim_or_skip(void)
{
  const char *p = g_getenv("PODSIM");
  if (!p || !*p || !g_file_test(p, G_FILE_TEST_IS_EXECUTABLE)) {
    g_test_skip("PODSIM is not set to the built CLI (make test sets it)");
    return NULL;
  }
  return p;
}

/* Runs podsim with args (NULL-terminated); returns the exit status. */
static int run_cli(const char *podsim, const char *const *args, char **out, char **err)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim);
  g_ptr_array_add(argv, (gpointer) "collective");
  for (int i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  int status = 0;
  GError *error = NULL;
  gboolean ok = g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                             out, err, &status, &error);
  g_ptr_array_free(argv, TRUE);
  g_assert_no_error(error);
  g_assert_true(ok);
  g_assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static json_object *cli_json(const char *podsim, const char *const *args)
{
  g_autofree char *out = NULL, *err = NULL;
  int st = run_cli(podsim, args, &out, &err);
  if (st != 0)
    g_error("podsim collective exited %d: %s", st, err);
  json_object *o = json_tokener_parse(out);
  g_assert_nonnull(o);
  return o;
}

static void test_cli_every_topology(void)
{
  const char *podsim = podsim_or_skip();
  if (!podsim)
    return;
  char **names = ps_config_list("topologies");
  int n = 0;
  for (char **t = names; *t; t++, n++) {
    const char *args[] = {"--topology", *t, "--bytes", "64Ki", "--json", NULL};
    json_object *o = cli_json(podsim, args);
    json_object *rows = json_object_object_get(o, "rows"), *algo = json_object_object_get(o, "algo");
    g_assert_cmpstr(json_object_get_string(json_object_object_get(o, "topology")), ==, *t);
    g_assert_nonnull(algo);
    g_assert_cmpint(json_object_array_length(rows), ==, 1);
    json_object *r = json_object_array_get_idx(rows, 0);
    const char *keys[] = {"bytes", "time_s", "formula_s", "algbw_Bps", "busbw_Bps", "events",
                          "wall_s"};
    for (guint k = 0; k < G_N_ELEMENTS(keys); k++)
      g_assert_true(json_object_object_get_ex(r, keys[k], NULL));
    g_assert_cmpint(json_object_get_int64(json_object_object_get(r, "bytes")), ==, 65536);
    g_assert_cmpfloat(json_object_get_double(json_object_object_get(r, "time_s")), >, 0);
    g_assert_cmpfloat(json_object_get_double(json_object_object_get(r, "formula_s")), >, 0);
    json_object_put(o);
  }
  g_assert_cmpint(n, >=, 20);
  g_strfreev(names);
}

static void check_ring_rows(json_object *o, int N, double alpha, double B)
{
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, 3); /* 1Mi,...,4Mi */
  for (size_t i = 0; i < 3; i++) {
    json_object *r = json_object_array_get_idx(rows, i);
    double S = (double)json_object_get_int64(json_object_object_get(r, "bytes"));
    g_assert_cmpfloat(S, ==, (double)(1 << 20) * (1 << i));
    double t = json_object_get_double(json_object_object_get(r, "time_s"));
    double want = 2.0 * (N - 1) * (alpha + S / (N * B));
    g_assert_cmpfloat(rel(t, want), <, 0.005);
    double busbw = json_object_get_double(json_object_object_get(r, "busbw_Bps"));
    g_assert_cmpfloat(rel(busbw, S / t * 2.0 * (N - 1) / N), <, 1e-9);
  }
}

static void test_cli_ring_formula(void)
{
  const char *podsim = podsim_or_skip();
  if (!podsim)
    return;
  const char *a1[] = {"--topology", "ring:8", "--algo", "ring", "--bytes", "1Mi,...,4Mi",
                      "--json", NULL};
  json_object *o = cli_json(podsim, a1);
  g_assert_cmpstr(json_object_get_string(json_object_object_get(o, "algo")), ==, "ring");
  check_ring_rows(o, 8, 1e-6, 83e9);
  json_object_put(o);
  const char *a2[] = {"--topology", "ring:8", "--algo", "ring", "--bytes", "1Mi,2Mi,4Mi",
                      "--set", "ici.bandwidth_Bps=100e9", "--set", "ici.latency_s=5e-6",
                      "--json", NULL};
  o = cli_json(podsim, a2);
  check_ring_rows(o, 8, 5e-6, 100e9);
  json_object_put(o);
}

/* --bytes and --chunk take sizes as experiment files do: K, M, G are
 * powers of 1000, Ki, Mi, Gi powers of 1024, a B after either optional. */
static void test_cli_size_suffixes(void)
{
  const char *podsim = podsim_or_skip();
  if (!podsim)
    return;
  const char *args[] = {"--topology", "ring:4", "--bytes", "1K,1Ki,100M,100MiB,1GB", "--chunk",
                        "64K", "--json", NULL};
  json_object *o = cli_json(podsim, args);
  const int64_t want[] = {1000, 1024, 100000000, 104857600, 1000000000};
  json_object *rows = json_object_object_get(o, "rows");
  g_assert_cmpint(json_object_array_length(rows), ==, G_N_ELEMENTS(want));
  for (size_t i = 0; i < G_N_ELEMENTS(want); i++)
    g_assert_cmpint(json_object_get_int64(json_object_object_get(
                        json_object_array_get_idx(rows, i), "bytes")), ==, want[i]);
  g_assert_cmpint(json_object_get_int64(json_object_object_get(o, "chunk_bytes")), ==, 64000);
  json_object_put(o);
  /* the table names a size as it was given */
  const char *table[] = {"--topology", "ring:4", "--bytes", "1K,1Ki,100M,100Mi", NULL};
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run_cli(podsim, table, &out, &err), ==, 0);
  g_assert_nonnull(strstr(out, "chunk 1Mi\n"));
  g_auto(GStrv) sizes = g_strsplit(table[3], ",", -1);
  for (int i = 0; sizes[i]; i++) {
    g_autofree char *cell = g_strdup_printf("\n%12s ", sizes[i]);
    g_assert_nonnull(strstr(out, cell));
  }
}

static void test_cli_bad_input(void)
{
  const char *podsim = podsim_or_skip();
  if (!podsim)
    return;
  const char *cases[][12] = {
      {"--bytes", "1K", NULL},
      {"--topology", "ring:8", "--op", "alltoall", NULL},
      {"--topology", "ring:8", "--algo", "tree", NULL},
      {"--topology", "ring:8", "--bytes", "1X", NULL},
      {"--topology", "ring:8", "--bytes", "1m", NULL},
      {"--topology", "ring:8", "--bytes", "1.5", NULL},
      {"--topology", "ring:8", "--bytes", "...,8", NULL},
      {"--topology", "ring:8", "--bytes", "8M,...,1K", NULL},
      {"--topology", "ring:8", "--chunk", "0", NULL},
      {"--topology", "ring:8", "--bytes", "1G", "--chunk", "1", NULL},
      {"--topology", "no-such-topology", NULL},
      {"--topology", "ring:0", NULL},
      {"--topology", "torus:4", NULL},
      {"--topology", "ring:8", "--set", "ici.bandwidth_Bps=-1", NULL},
      {"--topology", "tpu-v3-8", "--set", "ici.no_such_key=1", NULL},
      {"--topology", "ring:8", "--group", "0,0", NULL},
      {"--topology", "ring:8", "--group", "0,x", NULL},
      {"--topology", "torus:4x2", "--algo", "torus", "--group", "0,1,4", NULL},
      {"--topology", "ring:8", "--op", "broadcast", "--root", "99", NULL},
      {"--topology", "ring:8", "--op", "sendrecv", NULL},
      {"--topology", "ring:8", "extra", NULL},
      {"--topology", "ring:8", "--no-such-option", NULL},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *out = NULL, *err = NULL;
    int st = run_cli(podsim, cases[i], &out, &err);
    if (st != 2 || !g_str_has_prefix(err, "podsim: ") || *out)
      g_error("case %u (%s %s): exit %d, stderr '%s', stdout '%s'", i, cases[i][0],
              cases[i][1] ? cases[i][1] : "", st, err, out);
  }
}

static void test_cli_trace(void)
{
  const char *podsim = podsim_or_skip();
  if (!podsim)
    return;
  g_autofree char *dir = g_dir_make_tmp("podsim-coll-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "t.json", NULL);
  const char *args[] = {"--topology", "torus:4x4", "--bytes", "64Ki", "--trace", path, NULL};
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(run_cli(podsim, args, &out, &err), ==, 0);
  json_object *root = json_object_from_file(path);
  g_assert_nonnull(root);
  json_object *evs = json_object_object_get(root, "traceEvents");
  int slices = 0, tracks = 0;
  for (size_t i = 0; i < json_object_array_length(evs); i++) {
    json_object *e = json_object_array_get_idx(evs, i);
    const char *ph = json_object_get_string(json_object_object_get(e, "ph"));
    const char *name = json_object_get_string(json_object_object_get(e, "name"));
    slices += strcmp(ph, "X") == 0;
    tracks += strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0;
  }
  /* the torus all-reduce uses both directions of every x and y link */
  g_assert_cmpint(tracks, ==, 16 * 4);
  g_assert_cmpint(slices, >, 0);
  json_object_put(root);
  g_remove(path);
  g_rmdir(dir);
}

/* ps_collective_run_round gives the time of the test harness's round (all
 * arriving at 0), for each algorithm and a second round alike. */
static void test_run_round(void)
{
  static const char *const algos[] = {"ring", "bidir", "torus"};
  for (size_t a = 0; a < G_N_ELEMENTS(algos); a++) {
    NetFix f1, f2;
    netfix_init(&f1, topo("torus:4x2", NULL, NULL), 4096);
    netfix_init(&f2, topo("torus:4x2", NULL, NULL), 4096);
    g_autofree int *d1 = all_devices(&f1);
    g_autofree int *d2 = all_devices(&f2);
    PsCollective *c1 = coll_new(&f1, PS_COLL_ALL_REDUCE, algos[a], d1, 8, 1 << 16, 1, 0);
    PsCollective *c2 = coll_new(&f2, PS_COLL_ALL_REDUCE, algos[a], d2, 8, 1 << 16, 1, 0);
    ps_time_t want = run_round(&f1, c1, NULL, NULL);
    g_assert_cmpint(want, >, 0);
    g_assert_cmpint(ps_collective_run_round(c2), ==, want);
    g_assert_cmpint(ps_collective_rounds_done(c2), ==, 1);
    ps_time_t second = run_round(&f1, c1, NULL, NULL);
    g_assert_cmpint(ps_collective_run_round(c2) - ps_engine_now(f2.engine), ==, 0);
    g_assert_cmpint(ps_engine_now(f2.engine), ==, ps_engine_now(f1.engine));
    g_assert_cmpint(second, ==, want);
    ps_collective_free(c1);
    ps_collective_free(c2);
    netfix_clear(&f1);
    netfix_clear(&f2);
  }
}

/* The names come from the algorithm table: each has a summary, "auto"
 * ends the list, and a name not in it has none. */
static void test_algo_names(void)
{
  g_auto(GStrv) names = ps_coll_algo_names();
  guint n = g_strv_length(names);
  g_assert_cmpuint(n, >=, 2);
  g_assert_cmpstr(names[n - 1], ==, "auto");
  gboolean ring = FALSE;
  for (guint i = 0; i < n; i++) {
    g_assert_nonnull(ps_coll_algo_summary(names[i]));
    ring = ring || strcmp(names[i], "ring") == 0;
  }
  g_assert_true(ring);
  g_assert_null(ps_coll_algo_summary("nope"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/collectives/algo-names", test_algo_names);
  g_test_add_func("/collectives/run-round", test_run_round);
  g_test_add_func("/collectives/ring/alpha-beta", test_ring_alpha_beta);
  g_test_add_func("/collectives/ring/chunk-condition", test_ring_chunk_condition);
  g_test_add_func("/collectives/ring/mesh-cycle", test_ring_mesh_cycle);
  g_test_add_func("/collectives/butterfly/closed-form", test_butterfly_closed_form);
  g_test_add_func("/collectives/bidir/alpha-beta", test_bidir_alpha_beta);
  g_test_add_func("/collectives/torus/formula", test_torus_formula);
  g_test_add_func("/collectives/ring/reducescatter-allgather", test_rs_ag_timing);
  g_test_add_func("/collectives/ring/mixed-edges", test_ring_mixed_edges);
  g_test_add_func("/collectives/broadcast/chain", test_broadcast_chain);
  g_test_add_func("/collectives/p2p/sendrecv", test_sendrecv);
  g_test_add_func("/collectives/arrival/latecomer", test_latecomer);
  g_test_add_func("/collectives/auto", test_auto);
  g_test_add_func("/collectives/auto/cache", test_auto_cache);
  g_test_add_func("/collectives/errors", test_errors);
  g_test_add_func("/collectives/numerics/allreduce", test_numerics_allreduce);
  g_test_add_func("/collectives/numerics/ring-order", test_numerics_ring_order);
  g_test_add_func("/collectives/numerics/order-effects", test_numerics_order_effects);
  g_test_add_func("/collectives/numerics/reducescatter-allgather", test_numerics_rs_ag);
  g_test_add_func("/collectives/numerics/broadcast", test_numerics_broadcast);
  g_test_add_func("/collectives/numerics/replica-groups", test_replica_groups);
  g_test_add_func("/collectives/numerics/rounds", test_rounds);
  g_test_add_func("/collectives/fast-path/exact", test_fast_path_exact);
  g_test_add_func("/collectives/cli/every-topology", test_cli_every_topology);
  g_test_add_func("/collectives/cli/ring-formula", test_cli_ring_formula);
  g_test_add_func("/collectives/cli/bad-input", test_cli_bad_input);
  g_test_add_func("/collectives/cli/size-suffixes", test_cli_size_suffixes);
  g_test_add_func("/collectives/cli/trace", test_cli_trace);
  return g_test_run();
}

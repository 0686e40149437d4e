/* test_fastpath.c: the collectives' fast path (collective.h,
 * ps_collective_set_fast_path) against the event path it stands for.
 *
 * - /fastpath/uncontended: for every algorithm that can take it (ring,
 *   bidir, torus, multiring, hierarchical, p2p) on several topologies,
 *   operations, sizes and chunk sizes, a timing-only round run with the
 *   fast path on and off gives every member the same end time to the
 *   picosecond, and every link the same bytes, chunks and busy time; the
 *   fast path really ran (ps_collective_fast_rounds);
 * - /fastpath/staggered: members arriving at different times, links idle
 *   meanwhile: the same, exactly;
 * - /fastpath/events-only: broadcast's pipelined trees, a traced network,
 *   float buffers and a group whose routes share a link (v3-8's two cores
 *   per chip) run as events;
 * - /fastpath/contended: two all-reduces over one ring, the second
 *   arriving while the first runs: with the fast path the first ends
 *   exactly as alone (it holds its links), the second queues behind it and
 *   ends no later than the first's end plus its own time alone; every link
 *   carries the same bytes as on the event path; and the run is the same
 *   twice over;
 * - /fastpath/shared: the groups of one request (every row of an 8x8
 *   torus, every xy-plane of a 4x4x4 one), made through one cache so that
 *   translated groups share a plan and its sweep (fastshared.c), run at
 *   once with arrival times that repeat from group to group and differ
 *   between them: every member ends, and every link carries, exactly as on
 *   the event path; every round took the fast path, with fewer plans than
 *   groups;
 * - /fastpath/joint: two collectives over one group (a large reduce-scatter
 *   and a small all-gather, as a sharded backward starts them together),
 *   each member arriving at both at the same moment (or at B 1.5 us after
 *   A), at times that differ between members: the two rounds are timed
 *   together (fastshared.c's
 *   joint run, both counted as fast rounds) and every member of each ends,
 *   and every link carries, exactly as on the event path; a third
 *   collective of the group arriving later runs after them;
 * - /fastpath/experiment: collective.fast_path=true on a data-parallel
 *   BERT-large step whose one gradient all-reduce starts after backward
 *   (nothing overlaps it) gives the same step time as the event path with
 *   fewer events; a fast_path that is not a boolean is refused, naming the
 *   key. */
#include "collectives/collective.h"
#include "run/experiment.h"
#include "run/run.h"
#include "support/network.h"

#include <string.h>

typedef struct {
  PsCollective *c;
  ps_time_t *done;
  int n_done;
  uint32_t ev_arrive;
} Round;

static void on_done(void *ctx, int member, ps_time_t t)
{
  Round *r = ctx;
  r->done[member] = t;
  r->n_done++;
}

static void on_arrive(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  Round *r = ctx;
  ps_collective_arrive(r->c, (int)ev->target, NULL, on_done, r);
}

typedef struct {
  const char *topo;        /* shorthand or a topology name */
  const char *ov;          /* one override or NULL */
  const char *ov2;
  const char *algo;
  PsCollOp op;
  int64_t bytes;
  int64_t chunk;
} Case;

static PsTopology *load(const Case *k)
{
  const char *ov[] = {k->ov, k->ov ? k->ov2 : NULL, NULL};
  if (ps_network_is_shorthand(k->topo))
    return shorthand_topology(k->topo, ov);
  GError *error = NULL;
  PsTopology *t = ps_topology_load(k->topo, ov, &error);
  g_assert_no_error(error);
  return t;
}

/* One round on a fresh network, member m arriving at offset[m] (NULL: all
 * at 0); end times into done, link statistics into links (n_links). */
static uint64_t run_round(const Case *k, gboolean fast, const ps_time_t *offset, ps_time_t *done,
                          PsLinkInfo **links, int *n_links)
{
  NetFix f;
  netfix_init(&f, load(k), k->chunk);
  int n = k->op == PS_COLL_SEND_RECV ? 2 : ps_network_devices(f.net);
  int *devs = g_new(int, n);
  for (int i = 0; i < n; i++)
    devs[i] = k->op == PS_COLL_SEND_RECV ? i * (ps_network_devices(f.net) - 1) : i;
  PsCollSpec spec = {k->op, k->algo, devs, n, k->bytes, 1, 0};
  GError *error = NULL;
  Round r = {ps_collective_new(f.net, &spec, &error), done, 0, 0};
  g_assert_no_error(error);
  ps_collective_set_fast_path(r.c, fast);
  r.ev_arrive = ps_engine_register(f.engine, "test-arrive", on_arrive, &r);
  for (int m = 0; m < n; m++)
    ps_engine_at(f.engine, offset ? offset[m] : 0, r.ev_arrive, (uint32_t)m, 0);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r.n_done, ==, n);
  uint64_t fast_rounds = ps_collective_fast_rounds(r.c);
  *n_links = ps_network_n_links(f.net);
  *links = g_new0(PsLinkInfo, *n_links);
  for (int l = 0; l < *n_links; l++)
    ps_network_link_info(f.net, l, &(*links)[l]);
  ps_collective_free(r.c);
  g_free(devs);
  netfix_clear(&f);
  return fast_rounds;
}

/* Fast and event paths agree exactly; returns the fast path's rounds. */
static uint64_t check_case(const Case *k, const ps_time_t *offset, int n)
{
  ps_time_t *ev = g_new0(ps_time_t, n), *fa = g_new0(ps_time_t, n);
  PsLinkInfo *le, *lf;
  int nle, nlf;
  g_assert_cmpuint(run_round(k, FALSE, offset, ev, &le, &nle), ==, 0);
  uint64_t rounds = run_round(k, TRUE, offset, fa, &lf, &nlf);
  if (g_test_verbose())
    g_printerr("%s %s %s %" G_GINT64_FORMAT " B chunk %" G_GINT64_FORMAT ": %s, end %.3f us\n",
               k->topo, k->algo, ps_coll_op_name(k->op), k->bytes, k->chunk,
               rounds ? "fast" : "events", ps_time_to_s(ev[0]) * 1e6);
  for (int m = 0; m < n; m++)
    g_assert_cmpint(fa[m], ==, ev[m]);
  g_assert_cmpint(nle, ==, nlf);
  for (int l = 0; l < nle; l++) {
    g_assert_cmpint(lf[l].bytes, ==, le[l].bytes);
    g_assert_cmpint(lf[l].chunks, ==, le[l].chunks);
    g_assert_cmpint(lf[l].busy, ==, le[l].busy);
  }
  g_free(ev);
  g_free(fa);
  g_free(le);
  g_free(lf);
  return rounds;
}

static int members_of(const Case *k)
{
  if (k->op == PS_COLL_SEND_RECV)
    return 2;
  PsTopology *t = load(k);
  PsEngine *e = ps_engine_new();
  PsNetwork *net = ps_network_new(e, t, k->chunk);
  int n = ps_network_devices(net);
  ps_network_free(net);
  ps_engine_free(e);
  ps_topology_free(t);
  return n;
}

static void test_uncontended(void)
{
  const int64_t MiB = INT64_C(1) << 20;
  const Case cases[] = {
      {"ring:8", NULL, NULL, "ring", PS_COLL_ALL_REDUCE, 8 * MiB + 13, MiB},
      {"ring:8", NULL, NULL, "bidir", PS_COLL_ALL_REDUCE, 3 * MiB, 65536},
      {"ring:5", NULL, NULL, "ring", PS_COLL_REDUCE_SCATTER, 1000003, 4096},
      {"torus:4x4", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 30 * MiB, MiB},
      {"torus:4x4", NULL, NULL, "torus", PS_COLL_ALL_GATHER, 777777, 65536},
      {"torus:4x4", NULL, NULL, "multiring", PS_COLL_ALL_REDUCE, 30 * MiB, MiB},
      {"torus:4x4x4", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 16 * MiB, MiB},
      {"torus:4x4x4", NULL, NULL, "multiring", PS_COLL_ALL_REDUCE, 16 * MiB + 5, MiB},
      {"torus:4x4x4", NULL, NULL, "multiring", PS_COLL_REDUCE_SCATTER, 5 * MiB, 65536},
      {"torus:3x4", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 12345678, MiB},
      {"torus:4x4", "torus.wrap=[false,true]", NULL, "torus", PS_COLL_ALL_REDUCE, 4 * MiB,
       65536},
      {"torus:4x4", "torus.wrap=[false,false]", NULL, "ring", PS_COLL_ALL_REDUCE, 4 * MiB, MiB},
      {"tpu-v3-8", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 20 * MiB, MiB},
      {"tpu-v4-32", NULL, NULL, "multiring", PS_COLL_ALL_REDUCE, 30 * MiB, MiB},
      {"tpu-v4-32", NULL, NULL, "ring", PS_COLL_ALL_REDUCE, 0, MiB},
      {"ring:4", "slices=2", "dcn.nic_bandwidth_Bps=12.5e9", "hierarchical", PS_COLL_ALL_REDUCE,
       8 * MiB, MiB},
      {"torus:4x4", NULL, NULL, "p2p", PS_COLL_SEND_RECV, 5 * MiB + 1, MiB},
  };
  int fast = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
    fast += check_case(&cases[i], NULL, members_of(&cases[i])) > 0;
  /* every case but v3-8's, whose two cores per chip share the chip's ICI
   * links, takes the fast path */
  g_assert_cmpint(fast, >=, (int)G_N_ELEMENTS(cases) - 2);
}

static void test_staggered(void)
{
  const Case k = {"torus:4x4", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 6 * (INT64_C(1) << 20),
                  INT64_C(1) << 20};
  ps_time_t offset[16];
  for (int m = 0; m < 16; m++)
    offset[m] = (ps_time_t)((m * 7) % 5) * 1500000; /* 0 .. 6 us */
  g_assert_cmpuint(check_case(&k, offset, 16), ==, 1);
}

static void test_events_only(void)
{
  const int64_t MiB = INT64_C(1) << 20;
  const Case bcast = {"ring:8", NULL, NULL, "ring", PS_COLL_BROADCAST, 4 * MiB, MiB};
  g_assert_cmpuint(check_case(&bcast, NULL, 8), ==, 0);
  /* v3-8: the two cores of a chip share its ICI links */
  const Case shared = {"tpu-v3-8", NULL, NULL, "torus", PS_COLL_ALL_REDUCE, 4 * MiB, MiB};
  g_assert_cmpuint(check_case(&shared, NULL, 8), ==, 0);
  /* float buffers carry numerics: events */
  NetFix f;
  netfix_init(&f, shorthand_topology("ring:4", NULL), MiB);
  int devs[] = {0, 1, 2, 3};
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, "ring", devs, 4, 1024, 4, 0};
  GError *error = NULL;
  ps_time_t done[4];
  Round r = {ps_collective_new(f.net, &spec, &error), done, 0, 0};
  g_assert_no_error(error);
  float *bufs[4];
  for (int m = 0; m < 4; m++) {
    bufs[m] = g_new(float, 1024);
    for (int i = 0; i < 1024; i++)
      bufs[m][i] = (float)(m + 1);
  }
  for (int m = 0; m < 4; m++)
    ps_collective_arrive(r.c, m, bufs[m], on_done, &r);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r.n_done, ==, 4);
  g_assert_cmpuint(ps_collective_fast_rounds(r.c), ==, 0);
  for (int m = 0; m < 4; m++) {
    g_assert_cmpfloat(bufs[m][17], ==, 10.0f);
    g_free(bufs[m]);
  }
  ps_collective_free(r.c);
  netfix_clear(&f);
}

/* Two all-reduces over ring:8, B arriving at tb; A's and B's last end. */
static void contended(gboolean fast, ps_time_t tb, ps_time_t *a_end, ps_time_t *b_end,
                      int64_t *bytes)
{
  NetFix f;
  netfix_init(&f, shorthand_topology("ring:8", NULL), INT64_C(1) << 20);
  int devs[8];
  for (int i = 0; i < 8; i++)
    devs[i] = i;
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, "ring", devs, 8, INT64_C(8) << 20, 1, 0};
  ps_time_t da[8], db[8];
  Round a = {ps_collective_new(f.net, &spec, NULL), da, 0, 0};
  Round b = {ps_collective_new(f.net, &spec, NULL), db, 0, 0};
  ps_collective_set_fast_path(a.c, fast);
  ps_collective_set_fast_path(b.c, fast);
  a.ev_arrive = ps_engine_register(f.engine, "arrive-a", on_arrive, &a);
  b.ev_arrive = ps_engine_register(f.engine, "arrive-b", on_arrive, &b);
  for (int m = 0; m < 8; m++) {
    ps_engine_at(f.engine, 0, a.ev_arrive, (uint32_t)m, 0);
    ps_engine_at(f.engine, tb, b.ev_arrive, (uint32_t)m, 0);
  }
  ps_engine_run(f.engine, PS_TIME_NEVER);
  *a_end = *b_end = 0;
  for (int m = 0; m < 8; m++) {
    *a_end = MAX(*a_end, da[m]);
    *b_end = MAX(*b_end, db[m]);
  }
  *bytes = 0;
  for (int l = 0; l < ps_network_n_links(f.net); l++) {
    PsLinkInfo info;
    if (ps_network_link_info(f.net, l, &info))
      *bytes += info.bytes;
  }
  ps_collective_free(a.c);
  ps_collective_free(b.c);
  netfix_clear(&f);
}

static void test_contended(void)
{
  ps_time_t alone, unused, tb = 50 * (PS_PS_PER_S / 1000000);
  int64_t bytes_alone, be, bf, bf2;
  contended(TRUE, PS_TIME_NEVER / 2, &alone, &unused, &bytes_alone);
  ps_time_t b_alone = unused - PS_TIME_NEVER / 2;
  g_assert_cmpint(tb, <, alone);
  ps_time_t ae, bev, af, bfa, af2, bfa2;
  contended(FALSE, tb, &ae, &bev, &be);
  contended(TRUE, tb, &af, &bfa, &bf);
  contended(TRUE, tb, &af2, &bfa2, &bf2);
  if (g_test_verbose())
    g_printerr("alone %.3f us; events: A %.3f B %.3f us; fast: A %.3f B %.3f us\n",
               ps_time_to_s(alone) * 1e6, ps_time_to_s(ae) * 1e6, ps_time_to_s(bev) * 1e6,
               ps_time_to_s(af) * 1e6, ps_time_to_s(bfa) * 1e6);
  /* events: B's chunks interleave with A's, which ends later than alone */
  g_assert_cmpint(ae, >, alone);
  /* fast: A holds its links and ends as alone; B queues behind it */
  g_assert_cmpint(af, ==, alone);
  g_assert_cmpint(bfa, >=, bev - (ae - alone));
  g_assert_cmpint(bfa, <=, alone + b_alone);
  g_assert_cmpint(be, ==, bf);
  g_assert_cmpint(af2, ==, af);
  g_assert_cmpint(bfa2, ==, bfa);
  g_assert_cmpint(bf2, ==, bf);
}

/* After a run of k collectives of n members each: every member done; the
 * links' bytes and busy times; the collectives freed.  Returns their fast
 * rounds. */
static uint64_t rounds_end(NetFix *f, Round *r, int k, int n, int64_t *link_bytes,
                           ps_time_t *link_busy)
{
  uint64_t fast_rounds = 0;
  for (int i = 0; i < k; i++) {
    g_assert_cmpint(r[i].n_done, ==, n);
    fast_rounds += ps_collective_fast_rounds(r[i].c);
    ps_collective_free(r[i].c);
  }
  for (int l = 0; l < ps_network_n_links(f->net); l++) {
    PsLinkInfo info = {0};
    ps_network_link_info(f->net, l, &info);
    link_bytes[l] = info.bytes;
    link_busy[l] = info.busy;
  }
  return fast_rounds;
}

/* Groups of one request, run at once: group g's member m arrives at
 * offset[(g % 3) * n + m] (so groups 0 and 3 arrive alike). */
typedef struct {
  const char *topo;
  int line_dim;            /* 0: rows along x; 2: xy-planes, one per z */
  const char *algo;
  PsCollOp op;
  int64_t bytes;
} Shared;

static void shared_run(const Shared *k, gboolean fast, ps_time_t *done, int64_t *link_bytes,
                       ps_time_t *link_busy, uint64_t *fast_rounds, guint *plans)
{
  NetFix f;
  netfix_init(&f, shorthand_topology(k->topo, NULL), INT64_C(1) << 16);
  const PsGeometry *geo = ps_network_geometry(f.net);
  int nx = ps_geometry_axis_extent(geo, 1), ny = ps_geometry_axis_extent(geo, 2);
  int nz = ps_geometry_axis_extent(geo, 3);
  int n_groups = k->line_dim == 0 ? ny * nz : nz, n = ps_network_devices(f.net) / n_groups;
  PsCollCache *cache = ps_coll_cache_new();
  Round *r = g_new0(Round, n_groups);
  for (int g = 0; g < n_groups; g++) {
    int devs[64];
    for (int m = 0; m < n; m++) {
      int c[PS_MAX_DIMS] = {m % nx, k->line_dim == 0 ? g % ny : m / nx,
                            k->line_dim == 0 ? g / ny : g};
      devs[m] = ps_network_chip_at(f.net, c);
    }
    PsCollSpec spec = {k->op, k->algo, devs, n, k->bytes, 2, 0};
    GError *error = NULL;
    r[g] = (Round){ps_collective_new_cached(f.net, &spec, cache, &error), done + g * n, 0, 0};
    g_assert_no_error(error);
    ps_collective_set_fast_path(r[g].c, fast);
    r[g].ev_arrive = ps_engine_register(f.engine, "test-arrive", on_arrive, &r[g]);
    for (int m = 0; m < n; m++)
      ps_engine_at(f.engine, (ps_time_t)((g % 3) * ((m * 5) % 7)) * 700000, r[g].ev_arrive,
                   (uint32_t)m, 0);
  }
  *plans = ps_coll_cache_plans(cache);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  *fast_rounds = rounds_end(&f, r, n_groups, n, link_bytes, link_busy);
  g_free(r);
  ps_coll_cache_free(cache);
  netfix_clear(&f);
}

static void test_shared(void)
{
  const Shared cases[] = {
      {"torus:8x8", 0, "bidir", PS_COLL_ALL_REDUCE, 3 << 20},
      {"torus:8x8", 0, "ring", PS_COLL_REDUCE_SCATTER, 1000003},
      {"torus:4x4x4", 2, "multiring", PS_COLL_ALL_GATHER, 5 << 18},
      {"torus:4x4x4", 2, "auto", PS_COLL_REDUCE_SCATTER, 7 << 18},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    ps_time_t ev[64] = {0}, fa[64] = {0}, be[2048] = {0}, bf[2048] = {0};
    int64_t ye[2048] = {0}, yf[2048] = {0};
    uint64_t rounds_ev, rounds_fa;
    guint plans, plans2;
    shared_run(&cases[i], FALSE, ev, ye, be, &rounds_ev, &plans);
    shared_run(&cases[i], TRUE, fa, yf, bf, &rounds_fa, &plans2);
    int groups = strcmp(cases[i].topo, "torus:8x8") == 0 ? 8 : 4;
    g_assert_cmpuint(rounds_ev, ==, 0);
    g_assert_cmpuint(rounds_fa, ==, (uint64_t)groups);
    g_assert_cmpuint(plans, <, (guint)groups);
    for (int m = 0; m < 64; m++)
      g_assert_cmpint(fa[m], ==, ev[m]);
    for (int l = 0; l < 2048; l++) {
      g_assert_cmpint(yf[l], ==, ye[l]);
      g_assert_cmpint(bf[l], ==, be[l]);
    }
  }
}

/* Three collectives over every device of topo, through one cache: A and
 * B arrive together (member m of B b_delay after member m of A), C later; end times into done
 * (3 x n), link statistics into link_bytes and link_busy. */
static void joint_run(const char *topo, const char *algo, ps_time_t b_delay, gboolean fast,
                      ps_time_t *done, int64_t *link_bytes, ps_time_t *link_busy,
                      uint64_t *fast_rounds)
{
  NetFix f;
  netfix_init(&f, shorthand_topology(topo, NULL), INT64_C(1) << 16);
  int n = ps_network_devices(f.net);
  int devs[64];
  for (int m = 0; m < n; m++)
    devs[m] = m;
  const PsCollOp ops[3] = {PS_COLL_REDUCE_SCATTER, PS_COLL_ALL_GATHER, PS_COLL_ALL_GATHER};
  const int64_t bytes[3] = {3 << 20, 12345, 1 << 20};
  PsCollCache *cache = ps_coll_cache_new();
  Round r[3];
  for (int k = 0; k < 3; k++) {
    PsCollSpec spec = {ops[k], algo, devs, n, bytes[k], 2, 0};
    GError *error = NULL;
    r[k] = (Round){ps_collective_new_cached(f.net, &spec, cache, &error), done + k * n, 0, 0};
    g_assert_no_error(error);
    ps_collective_set_fast_path(r[k].c, fast);
    r[k].ev_arrive = ps_engine_register(f.engine, "test-arrive", on_arrive, &r[k]);
  }
  for (int m = 0; m < n; m++) {
    ps_time_t t = (ps_time_t)((m * 3) % 4) * 900000;
    ps_engine_at(f.engine, t, r[0].ev_arrive, (uint32_t)m, 0);
    ps_engine_at(f.engine, t + b_delay, r[1].ev_arrive, (uint32_t)m, 0);
    ps_engine_at(f.engine, t + 200000000, r[2].ev_arrive, (uint32_t)m, 0);
  }
  ps_engine_run(f.engine, PS_TIME_NEVER);
  *fast_rounds = rounds_end(&f, r, 3, n, link_bytes, link_busy);
  ps_coll_cache_free(cache);
  netfix_clear(&f);
}

static void test_joint(void)
{
  const char *const cases[][2] = {{"torus:4x4", "multiring"}, {"ring:8", "bidir"},
                                  {"torus:4x4x2", "torus"}};
  for (size_t i = 0; i < 2 * G_N_ELEMENTS(cases); i++) {
    const char *topo = cases[i / 2][0], *algo = cases[i / 2][1];
    ps_time_t b_delay = i % 2 ? 1500000 : 0;
    ps_time_t ev[3 * 64] = {0}, fa[3 * 64] = {0}, be[512] = {0}, bf[512] = {0};
    int64_t ye[512] = {0}, yf[512] = {0};
    uint64_t rounds_ev, rounds_fa;
    joint_run(topo, algo, b_delay, FALSE, ev, ye, be, &rounds_ev);
    joint_run(topo, algo, b_delay, TRUE, fa, yf, bf, &rounds_fa);
    if (g_test_verbose())
      g_printerr("%s %s, B %.1f us later: %" G_GUINT64_FORMAT " fast rounds\n", topo, algo,
                 ps_time_to_s(b_delay) * 1e6, rounds_fa);
    g_assert_cmpuint(rounds_ev, ==, 0);
    g_assert_cmpuint(rounds_fa, >=, 2);
    for (int m = 0; m < 3 * 64; m++)
      if (fa[m] != ev[m] && g_test_verbose())
        g_printerr("  end %d: fast %" G_GINT64_FORMAT " events %" G_GINT64_FORMAT "\n", m, fa[m], ev[m]);
    for (int m = 0; m < 3 * 64; m++)
      g_assert_cmpint(fa[m], ==, ev[m]);
    for (int l = 0; l < 512; l++) {
      g_assert_cmpint(yf[l], ==, ye[l]);
      g_assert_cmpint(bf[l], ==, be[l]);
    }
  }
}

static void step_of(const char *fast, double *step_s, uint64_t *events)
{
  const char *ov[] = {"topology=tpu-v4-32", "strategy.replicas=16", "global_batch=64",
                      "steps=1", "steps_per_run=1", "strategy.overlap=false",
                      "strategy.bucket_bytes=1e12", fast, NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("scaling-bert-large", ov, &error);
  g_assert_no_error(error);
  PsSummary s;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &s, &error));
  g_assert_no_error(error);
  *step_s = s.step_time_s;
  *events = s.events;
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void test_experiment(void)
{
  double off_s, on_s;
  uint64_t off_ev, on_ev;
  step_of("collective.fast_path=false", &off_s, &off_ev);
  step_of("collective.fast_path=true", &on_s, &on_ev);
  if (g_test_verbose())
    g_printerr("step %.6f ms, %" G_GUINT64_FORMAT " events; fast path %.6f ms, %" G_GUINT64_FORMAT
               " events\n", off_s * 1e3, off_ev, on_s * 1e3, on_ev);
  g_assert_cmpfloat(on_s, ==, off_s);
  g_assert_cmpuint(on_ev, <, off_ev);
  const char *ov[] = {"collective.fast_path=3", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("scaling-bert-large", ov, &error);
  g_assert_null(e);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE);
  g_assert_nonnull(strstr(error->message, "fast_path"));
  g_error_free(error);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/fastpath/uncontended", test_uncontended);
  g_test_add_func("/fastpath/staggered", test_staggered);
  g_test_add_func("/fastpath/events-only", test_events_only);
  g_test_add_func("/fastpath/contended", test_contended);
  g_test_add_func("/fastpath/shared", test_shared);
  g_test_add_func("/fastpath/joint", test_joint);
  g_test_add_func("/fastpath/experiment", test_experiment);
  return g_test_run();
}

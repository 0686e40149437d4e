/* test_network.c: the interconnect against independent references.
 *
 * - chip numbering (x fastest) and neighbours: every link joins chips one
 *   step apart in its dimension, mesh edges have none, wrap-around rings
 *   close, the twisted torus's short-dimension wraps land k further along
 *   the long dimensions;
 * - routes: every route is a walk along existing links from source to
 *   destination whose length is the breadth-first shortest distance of the
 *   link graph (computed here, independently of the router), on tori,
 *   meshes and twisted tori; hops are in dimension order; the tie on an
 *   even ring goes + from even coordinates and - from odd ones; the
 *   route memo gives what the router does, before and after a link fails;
 * - timing, against closed forms: a message over h hops in n chunks of c
 *   bytes takes h alpha + S/B + (h-1) c/B exactly; two flows merging onto
 *   one link each take twice as long as alone (exact expressions of the
 *   FIFO interleaving); parallel lanes divide serialization; messages from
 *   one source queue one after the other; on-chip and PCIe paths;
 * - statistics (bytes per link) and the trace (one slice per chunk-hop, a
 *   named track per link direction, flows paired). */
#include "hw/network.h"
#include "support/network.h"

#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

static PsTopology *topo(const char *spec, const char *o1, const char *o2)
{
  const char *ov[] = {o1, o2, NULL};
  return shorthand_topology(spec, ov);
}

/* Records what arrived and when the last chunk did. */
typedef struct {
  ps_time_t done;
  int64_t bytes_seen;
  int chunks;
  int lasts;
} Arrival;

typedef struct {
  PsEngine *engine;
  Arrival a;
} Probe;

static void probe_deliver(void *ctx, const PsNetDelivery *d)
{
  Probe *p = ctx;
  p->a.bytes_seen += d->bytes;
  p->a.chunks++;
  if (d->last) {
    p->a.lasts++;
    p->a.done = ps_engine_now(p->engine);
  }
}

/* ---- geometry ------------------------------------------------------- */

static void test_numbering(void)
{
  NetFix f;
  netfix_init(&f, topo("torus:4x3x2", NULL, NULL), 1024);
  int c[PS_MAX_DIMS];
  ps_network_chip_coords(f.net, 1 + 4 * 2 + 12 * 1, c);
  g_assert_cmpint(c[0], ==, 1);
  g_assert_cmpint(c[1], ==, 2);
  g_assert_cmpint(c[2], ==, 1);
  g_assert_cmpint(ps_network_chip_at(f.net, c), ==, 21);
  /* every link joins chips one step apart (mod the ring) in its dimension */
  int dims[3] = {4, 3, 2}, n = 0;
  for (int l = 0; l < ps_network_n_links(f.net); l++) {
    PsLinkInfo info;
    if (!ps_network_link_info(f.net, l, &info) || info.ends.kind != PS_LINK_ICI)
      continue;
    n++;
    int a[PS_MAX_DIMS], b[PS_MAX_DIMS];
    ps_network_chip_coords(f.net, info.ends.chip, a);
    ps_network_chip_coords(f.net, info.ends.to_chip, b);
    for (int d = 0; d < 3; d++) {
      int want = d == info.ends.dim ? (a[d] + info.ends.dir + dims[d]) % dims[d] : a[d];
      g_assert_cmpint(b[d], ==, want);
    }
  }
  g_assert_cmpint(n, ==, 24 * 3 * 2); /* a size-2 ring has a direct and a wrap link */
  netfix_clear(&f);

  /* a mesh has no links off its edges */
  netfix_init(&f, topo("torus:4x3", "torus.wrap=[false,false]", NULL), 1024);
  n = 0;
  for (int l = 0; l < ps_network_n_links(f.net); l++) {
    PsLinkInfo info;
    if (ps_network_link_info(f.net, l, &info) && info.ends.kind == PS_LINK_ICI)
      n++;
  }
  g_assert_cmpint(n, ==, 2 * (3 * 3 + 4 * 2)); /* both directions of 3x3 x-edges, 4x2 y-edges */
  g_assert_cmpint(ps_network_ici_link(f.net, 3, 0, +1), ==, -1);
  g_assert_cmpint(ps_network_ici_link(f.net, 0, 1, -1), ==, -1);
  g_assert_cmpint(ps_network_ici_link(f.net, 0, 0, +1), >=, 0);
  netfix_clear(&f);
}

static void test_twist(void)
{
  /* 4x4x8: x and y short (k = 4), z long */
  NetFix f;
  netfix_init(&f, topo("torus:4x4x8", "torus.twisted=true", NULL), 1024);
  int a[PS_MAX_DIMS] = {3, 1, 2}, b[PS_MAX_DIMS];
  int l = ps_network_ici_link(f.net, ps_network_chip_at(f.net, a), 0, +1);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(f.net, l, &info));
  ps_network_chip_coords(f.net, info.ends.to_chip, b);
  g_assert_cmpint(b[0], ==, 0);
  g_assert_cmpint(b[1], ==, 1);
  g_assert_cmpint(b[2], ==, 6);
  /* an inner link is not twisted */
  a[0] = 1;
  l = ps_network_ici_link(f.net, ps_network_chip_at(f.net, a), 0, +1);
  ps_network_link_info(f.net, l, &info);
  ps_network_chip_coords(f.net, info.ends.to_chip, b);
  g_assert_cmpint(b[0], ==, 2);
  g_assert_cmpint(b[2], ==, 2);
  /* the long dimension's own wrap is plain */
  a[2] = 7;
  l = ps_network_ici_link(f.net, ps_network_chip_at(f.net, a), 2, +1);
  ps_network_link_info(f.net, l, &info);
  ps_network_chip_coords(f.net, info.ends.to_chip, b);
  g_assert_cmpint(b[0], ==, 1);
  g_assert_cmpint(b[2], ==, 0);
  netfix_clear(&f);

  /* 4x8x8: x short, both y and z long: the x wrap moves both by 4 */
  netfix_init(&f, topo("torus:4x8x8", "torus.twisted=true", NULL), 1024);
  int c[PS_MAX_DIMS] = {0, 1, 5};
  l = ps_network_ici_link(f.net, ps_network_chip_at(f.net, c), 0, -1);
  ps_network_link_info(f.net, l, &info);
  ps_network_chip_coords(f.net, info.ends.to_chip, b);
  g_assert_cmpint(b[0], ==, 3);
  g_assert_cmpint(b[1], ==, 5);
  g_assert_cmpint(b[2], ==, 1);
  netfix_clear(&f);
}

/* ---- routes --------------------------------------------------------- */

/* Breadth-first distances from `from` over the ICI links. */
static void bfs(PsNetwork *net, int chips, int from, int *dist, int **adj, int *deg)
{
  for (int i = 0; i < chips; i++)
    dist[i] = -1;
  int *q = g_new(int, chips), head = 0, tail = 0;
  dist[from] = 0;
  q[tail++] = from;
  while (head < tail) {
    int u = q[head++];
    for (int k = 0; k < deg[u]; k++) {
      int v = adj[u][k];
      if (dist[v] < 0) {
        dist[v] = dist[u] + 1;
        q[tail++] = v;
      }
    }
  }
  g_free(q);
}

static void check_routes_shortest(const char *spec, const char *o1, const char *o2)
{
  NetFix f;
  netfix_init(&f, topo(spec, o1, o2), 1024);
  int chips = ps_topology_chips(f.topo);
  int **adj = g_new0(int *, chips), *deg = g_new0(int, chips);
  for (int c = 0; c < chips; c++)
    adj[c] = g_new(int, 6);
  for (int l = 0; l < ps_network_n_links(f.net); l++) {
    PsLinkInfo info;
    if (ps_network_link_info(f.net, l, &info) && info.ends.kind == PS_LINK_ICI)
      adj[info.ends.chip][deg[info.ends.chip]++] = info.ends.to_chip;
  }
  int *dist = g_new(int, chips), route[256];
  for (int s = 0; s < chips; s++) {
    bfs(f.net, chips, s, dist, adj, deg);
    for (int d = 0; d < chips; d++) {
      int h = ps_network_route(f.net, s, d, route, 256);
      if (h != dist[d])
        g_error("%s: route %d -> %d has %d hops, shortest is %d", spec, s, d, h, dist[d]);
      /* a walk along links from s to d, dimensions never decreasing */
      int cur = s, last_dim = 0;
      for (int i = 0; i < h; i++) {
        PsLinkInfo info;
        g_assert_true(ps_network_link_info(f.net, route[i], &info));
        g_assert_cmpint(info.ends.chip, ==, cur);
        g_assert_cmpint(info.ends.dim, >=, last_dim);
        last_dim = info.ends.dim;
        cur = info.ends.to_chip;
      }
      g_assert_cmpint(cur, ==, d);
    }
  }
  for (int c = 0; c < chips; c++)
    g_free(adj[c]);
  g_free(adj);
  g_free(deg);
  g_free(dist);
  netfix_clear(&f);
}

static void test_routes_torus(void) { check_routes_shortest("torus:4x6", NULL, NULL); }
static void test_routes_torus3(void) { check_routes_shortest("torus:3x4x5", NULL, NULL); }
static void test_routes_mesh(void)
{
  check_routes_shortest("torus:5x3", "torus.wrap=[false,false]", NULL);
  check_routes_shortest("torus:4x4x3", "torus.wrap=[true,false,true]", NULL);
}
static void test_routes_twisted(void)
{
  check_routes_shortest("torus:4x4x8", "torus.twisted=true", NULL);
  check_routes_shortest("torus:8x4x8", "torus.twisted=true", NULL);
  check_routes_shortest("torus:8x8x4", "torus.twisted=true", NULL);
}

static void test_route_ties(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:6", NULL, NULL), 1024);
  int r[8];
  PsLinkInfo info;
  /* 0 -> 3: half-way round from an even coordinate: + direction */
  g_assert_cmpint(ps_network_route(f.net, 0, 3, r, 8), ==, 3);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.dir, ==, +1);
  /* 1 -> 4: from an odd coordinate: - direction */
  g_assert_cmpint(ps_network_route(f.net, 1, 4, r, 8), ==, 3);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.dir, ==, -1);
  /* 5 -> 0: one hop over the wrap */
  g_assert_cmpint(ps_network_route(f.net, 5, 0, r, 8), ==, 1);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.dir, ==, +1);
  netfix_clear(&f);
}

static void test_route_endpoints(void)
{
  /* 2 cores per chip, 2 chips per host on a 4-chip ring */
  NetFix f;
  netfix_init(&f, topo("ring:4", "chip.cores=2", "host.chips=2"), 1024);
  g_assert_cmpint(ps_network_devices(f.net), ==, 8);
  g_assert_cmpint(ps_network_endpoints(f.net), ==, 10);
  int r[8];
  PsLinkInfo info;
  /* cores of one chip: the on-chip path */
  g_assert_cmpint(ps_network_route(f.net, 2, 3, r, 8), ==, 1);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.kind, ==, PS_LINK_ON_CHIP);
  g_assert_cmpint(info.ends.chip, ==, 1);
  g_assert_cmpint(info.ends.from_core, ==, 0);
  g_assert_cmpint(info.ends.to_core, ==, 1);
  /* core 1 of chip 0 to core 0 of chip 1: one ICI hop, no on-chip hop */
  g_assert_cmpint(ps_network_route(f.net, 1, 2, r, 8), ==, 1);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.kind, ==, PS_LINK_ICI);
  /* host 1 to a core of its chip 3: PCIe only; to chip 0: PCIe then ICI from chip 2 */
  int h1 = ps_network_host_endpoint(f.net, 1);
  g_assert_cmpint(ps_network_route(f.net, h1, 7, r, 8), ==, 1);
  ps_network_link_info(f.net, r[0], &info);
  g_assert_cmpint(info.ends.kind, ==, PS_LINK_PCIE_DOWN);
  g_assert_cmpint(info.ends.host, ==, 1);
  g_assert_cmpint(ps_network_route(f.net, h1, 0, r, 8), ==, 1 + 2);
  g_assert_cmpint(ps_network_route(f.net, 0, h1, r, 8), ==, 2 + 1);
  ps_network_link_info(f.net, r[2], &info);
  g_assert_cmpint(info.ends.kind, ==, PS_LINK_PCIE_UP);
  netfix_clear(&f);
}

/* Every pair's route through the memo (first stored, then looked up), and
 * cut short by max, is ps_network_route's; after a link fails the memo
 * gives the new route round it, not the one it stored. */
static void check_memo_all_pairs(NetFix *f)
{
  int n = ps_network_endpoints(f->net);
  for (int pass = 0; pass < 2; pass++)
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        int want[16], got[16] = {0}, part[2] = {-1, -1};
        int h = ps_network_route(f->net, a, b, want, 16);
        g_assert_cmpint(ps_network_route_memo(f->net, a, b, got, 16), ==, h);
        for (int i = 0; i < h; i++)
          g_assert_cmpint(got[i], ==, want[i]);
        g_assert_cmpint(ps_network_route_memo(f->net, a, b, part, 1), ==, h);
        g_assert_cmpint(part[0], ==, h > 0 ? want[0] : -1);
        g_assert_cmpint(part[1], ==, -1);
      }
}

static void test_route_memo(void)
{
  NetFix f;
  netfix_init(&f, topo("torus:4x4", NULL, NULL), 1024);
  check_memo_all_pairs(&f);
  int r[16];
  g_assert_cmpint(ps_network_route_memo(f.net, 0, 1, r, 16), ==, 1);
  int direct = r[0];
  g_assert_true(ps_network_degrade_link(f.net, direct, 0.0, NULL));
  g_assert_cmpint(ps_network_route_memo(f.net, 0, 1, r, 16), ==, 3);
  for (int i = 0; i < 3; i++)
    g_assert_cmpint(r[i], !=, direct);
  check_memo_all_pairs(&f);
  netfix_clear(&f);
}

/* ---- timing --------------------------------------------------------- */

static ps_time_t send_alone(NetFix *f, int src, int dst, int64_t bytes)
{
  Probe p = {f->engine, {0}};
  ps_network_send(f->net, src, dst, bytes, probe_deliver, &p);
  ps_engine_run(f->engine, PS_TIME_NEVER);
  g_assert_cmpint(p.a.lasts, ==, 1);
  g_assert_cmpint(p.a.bytes_seen, ==, bytes);
  return p.a.done;
}

/* h hops, n chunks of c: T = h alpha + S/B + (h-1) c/B, to the picosecond
 * when c/B is a whole number of picoseconds (B = 100 GB/s, c = 64 KiB). */
static void test_hops_pipeline(void)
{
  const int64_t c = 65536, n = 64, S = n * c;
  const double B = 100e9, alpha = 1e-6;
  for (int h = 0; h <= 7; h++) {
    NetFix f;
    netfix_init(&f, topo("ring:8", "torus.wrap=[false]", "ici.bandwidth_Bps=100e9"), c);
    ps_time_t t0 = ps_engine_now(f.engine);
    ps_time_t t = send_alone(&f, 0, h, S) - t0;
    ps_time_t want = h == 0 ? 0
                            : h * ps_time_from_s(alpha) + ps_time_from_s(S / B) +
                                  (h - 1) * ps_time_from_s(c / B);
    g_assert_cmpint(t, ==, want);
    netfix_clear(&f);
  }
  /* a bandwidth whose c/B is not whole picoseconds: off by at most half a
   * picosecond per chunk and hop */
  NetFix f;
  netfix_init(&f, topo("ring:8", "torus.wrap=[false]", NULL), 10000);
  const double B3 = 83e9;
  int64_t S3 = 1000 * 10000;
  ps_time_t t = send_alone(&f, 0, 5, S3);
  double want = 5 * alpha + S3 / B3 + 4 * 10000 / B3;
  g_assert_cmpfloat(fabs(ps_time_to_s(t) - want), <=, (1000 + 4) * 0.5e-12);
  netfix_clear(&f);
}

/* Flow A (0,0)->(1,1) and flow B (2,0)->(1,1) on a 3x2 mesh: x first, so
 * both turn +y at (1,0) and share that link, each fed at full rate by its
 * own x link.  Alone: T1 = 2 alpha + (n+1) c/B.  Together the shared link
 * serves A0 B0 A1 B1 ... back to back from c/B + alpha on:
 * T_A = 2 alpha + 2n c/B, T_B = 2 alpha + (2n+1) c/B: each twice T1 as
 * n c/B dominates. */
static void test_contention(void)
{
  const int64_t c = 65536, n = 1024, S = n * c;
  const double B = 100e9, alpha = 1e-6, cb = c / B;
  NetFix f;
  netfix_init(&f, topo("torus:3x2", "torus.wrap=[false,false]", "ici.bandwidth_Bps=100e9"), c);
  int dst = 1 + 3 * 1;
  ps_time_t alone_a = send_alone(&f, 0, dst, S);
  netfix_clear(&f);
  netfix_init(&f, topo("torus:3x2", "torus.wrap=[false,false]", "ici.bandwidth_Bps=100e9"), c);
  ps_time_t alone_b = send_alone(&f, 2, dst, S);
  g_assert_cmpint(alone_a, ==, ps_time_from_s(2 * alpha) + (n + 1) * ps_time_from_s(cb));
  g_assert_cmpint(alone_b, ==, alone_a);
  netfix_clear(&f);

  netfix_init(&f, topo("torus:3x2", "torus.wrap=[false,false]", "ici.bandwidth_Bps=100e9"), c);
  Probe pa = {f.engine, {0}}, pb = {f.engine, {0}};
  ps_network_send(f.net, 0, dst, S, probe_deliver, &pa);
  ps_network_send(f.net, 2, dst, S, probe_deliver, &pb);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(pa.a.done, ==, ps_time_from_s(2 * alpha) + 2 * n * ps_time_from_s(cb));
  g_assert_cmpint(pb.a.done, ==, ps_time_from_s(2 * alpha) + (2 * n + 1) * ps_time_from_s(cb));
  double ra = (double)pa.a.done / (double)alone_a, rb = (double)pb.a.done / (double)alone_b;
  g_assert_cmpfloat(fabs(ra - 2.0), <, 0.01);
  g_assert_cmpfloat(fabs(rb - 2.0), <, 0.01);
  /* the shared link carried both flows, each feeder one */
  int shared = ps_network_ici_link(f.net, 1, 1, +1);
  PsLinkInfo info;
  g_assert_true(ps_network_link_info(f.net, shared, &info));
  g_assert_cmpint(info.bytes, ==, 2 * S);
  g_assert_cmpint(info.busy, ==, 2 * n * ps_time_from_s(cb));
  ps_network_link_info(f.net, ps_network_ici_link(f.net, 0, 0, +1), &info);
  g_assert_cmpint(info.bytes, ==, S);
  netfix_clear(&f);
}

/* Two messages from one source to one destination queue whole: the second
 * finishes at alpha + 2 S/B. */
static void test_fifo_same_source(void)
{
  const int64_t c = 65536, S = 16 * c;
  NetFix f;
  netfix_init(&f, topo("ring:4", "ici.bandwidth_Bps=100e9", NULL), c);
  Probe p1 = {f.engine, {0}}, p2 = {f.engine, {0}};
  ps_network_send(f.net, 0, 1, S, probe_deliver, &p1);
  ps_network_send(f.net, 0, 1, S, probe_deliver, &p2);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  ps_time_t cb = ps_time_from_s(c / 100e9), a = ps_time_from_s(1e-6);
  g_assert_cmpint(p1.a.done, ==, a + 16 * cb);
  g_assert_cmpint(p2.a.done, ==, a + 32 * cb);
  netfix_clear(&f);
}

/* k parallel lanes: one hop of n chunks takes alpha + ceil(n/k) c/B. */
static void test_lanes(void)
{
  const int64_t c = 65536, n = 30;
  for (int k = 1; k <= 4; k++) {
    char ov[64];
    g_snprintf(ov, sizeof ov, "ici.links_per_neighbor=%d", k);
    NetFix f;
    netfix_init(&f, topo("ring:4", "ici.bandwidth_Bps=100e9", ov), c);
    ps_time_t t = send_alone(&f, 0, 1, n * c);
    g_assert_cmpint(t, ==, ps_time_from_s(1e-6) + (n + k - 1) / k * ps_time_from_s(c / 100e9));
    netfix_clear(&f);
  }
}

static void test_onchip_pcie(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:4", "chip.cores=2", "chip.on_chip_bandwidth_Bps=500e9"), 1 << 20);
  int64_t S = 50 << 20;
  /* on-chip: no latency, 500 GB/s */
  ps_time_t t = send_alone(&f, 4, 5, S);
  g_assert_cmpfloat(fabs(ps_time_to_s(t) - S / 500e9), <, 1e-9);
  /* PCIe down from host 2 to its chip's core: 16 GB/s */
  ps_time_t t0 = ps_engine_now(f.engine);
  t = send_alone(&f, ps_network_host_endpoint(f.net, 2), 5, S) - t0;
  g_assert_cmpfloat(fabs(ps_time_to_s(t) - S / 16e9), <, 1e-9);
  /* a device to itself: at once */
  t0 = ps_engine_now(f.engine);
  t = send_alone(&f, 3, 3, S) - t0;
  g_assert_cmpint(t, ==, 0);
  netfix_clear(&f);
}

/* Zero-byte messages pay latency only; chunks are counted and sized. */
static void test_small_messages(void)
{
  NetFix f;
  netfix_init(&f, topo("ring:8", NULL, NULL), 1000);
  Probe p = {f.engine, {0}};
  ps_network_send(f.net, 0, 3, 0, probe_deliver, &p);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(p.a.done, ==, 3 * ps_time_from_s(1e-6));
  g_assert_cmpint(p.a.chunks, ==, 1);
  Probe q = {f.engine, {0}};
  ps_network_send(f.net, 0, 1, 2500, probe_deliver, &q);
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(q.a.chunks, ==, 3);
  g_assert_cmpint(q.a.bytes_seen, ==, 2500);
  g_assert_cmpint(ps_network_in_flight(f.net), ==, 0);
  g_assert_cmpuint(ps_network_messages(f.net), ==, 2);
  g_assert_cmpuint(ps_network_chunk_hops(f.net), ==, 3 + 3);
  netfix_clear(&f);
}

/* ---- trace ---------------------------------------------------------- */

static void test_trace(void)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-net-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "links.json", NULL);
  GError *error = NULL;
  PsTrace *tr = ps_trace_open(path, &error);
  g_assert_no_error(error);
  NetFix f;
  netfix_init(&f, topo("torus:3x3", NULL, NULL), 4096);
  ps_network_set_trace(f.net, tr, 7);
  Probe p1 = {f.engine, {0}}, p2 = {f.engine, {0}};
  ps_network_send(f.net, 0, 4, 3 * 4096, probe_deliver, &p1); /* (0,0)->(1,1): 2 hops */
  ps_network_send(f.net, 8, 2, 4096, probe_deliver, &p2);     /* (2,2)->(2,0): 1 hop, wrap */
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_true(ps_trace_close(tr, &error));
  g_assert_no_error(error);
  json_object *root = json_object_from_file(path);
  g_assert_nonnull(root);
  json_object *evs = json_object_object_get(root, "traceEvents");
  int slices = 0, starts = 0, ends = 0, threads = 0;
  gboolean saw_name = FALSE, saw_proc = FALSE;
  for (size_t i = 0; i < json_object_array_length(evs); i++) {
    json_object *e = json_object_array_get_idx(evs, i);
    const char *ph = json_object_get_string(json_object_object_get(e, "ph"));
    const char *name = json_object_get_string(json_object_object_get(e, "name"));
    int pid = json_object_get_int(json_object_object_get(e, "pid"));
    g_assert_cmpint(pid, ==, 7);
    if (strcmp(ph, "X") == 0)
      slices++;
    else if (strcmp(ph, "s") == 0)
      starts++;
    else if (strcmp(ph, "f") == 0)
      ends++;
    else if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) {
      threads++;
      const char *tn = json_object_get_string(
          json_object_object_get(json_object_object_get(e, "args"), "name"));
      if (strcmp(tn, "chip (0,0) -> (1,0) +x") == 0)
        saw_name = TRUE;
    } else if (strcmp(ph, "M") == 0 && strcmp(name, "process_name") == 0) {
      saw_proc = strcmp(json_object_get_string(json_object_object_get(
                            json_object_object_get(e, "args"), "name")),
                        "links") == 0;
    }
  }
  g_assert_cmpint(slices, ==, (int)ps_network_chunk_hops(f.net));
  g_assert_cmpint(slices, ==, 3 * 2 + 1);
  g_assert_cmpint(starts, ==, 2);
  g_assert_cmpint(ends, ==, 2);
  g_assert_cmpint(threads, ==, 3);
  g_assert_true(saw_name);
  g_assert_true(saw_proc);
  json_object_put(root);
  netfix_clear(&f);
  g_remove(path);
  g_rmdir(dir);
}

static void test_shorthand_errors(void)
{
  const char *bad[] = {"ring:", "ring:0", "ring:4x4", "torus:4", "torus:4x", "torus:2x2x2x2",
                       "mesh:4", "ring:-3"};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    GError *error = NULL;
    PsTopology *t = ps_network_shorthand(bad[i], NULL, &error);
    g_assert_null(t);
    g_assert_error(error, PS_INPUT_ERROR, error->code);
    g_error_free(error);
  }
  const char *ov[] = {"ici.bandwidth_Bps=-1", NULL};
  GError *error = NULL;
  g_assert_null(ps_network_shorthand("ring:4", ov, &error));
  g_assert_nonnull(strstr(error->message, "ici.bandwidth_Bps"));
  g_error_free(error);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/network/geometry/numbering", test_numbering);
  g_test_add_func("/network/geometry/twist", test_twist);
  g_test_add_func("/network/route/shortest/torus-2d", test_routes_torus);
  g_test_add_func("/network/route/shortest/torus-3d", test_routes_torus3);
  g_test_add_func("/network/route/shortest/mesh", test_routes_mesh);
  g_test_add_func("/network/route/shortest/twisted", test_routes_twisted);
  g_test_add_func("/network/route/ties", test_route_ties);
  g_test_add_func("/network/route/endpoints", test_route_endpoints);
  g_test_add_func("/network/route/memo", test_route_memo);
  g_test_add_func("/network/timing/hops-pipeline", test_hops_pipeline);
  g_test_add_func("/network/timing/contention", test_contention);
  g_test_add_func("/network/timing/fifo-same-source", test_fifo_same_source);
  g_test_add_func("/network/timing/lanes", test_lanes);
  g_test_add_func("/network/timing/on-chip-pcie", test_onchip_pcie);
  g_test_add_func("/network/timing/small-messages", test_small_messages);
  g_test_add_func("/network/trace", test_trace);
  g_test_add_func("/network/shorthand/errors", test_shorthand_errors);
  return g_test_run();
}

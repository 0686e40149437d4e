/* network.c: links, routes and chunks as timed events (see network.h).
 *
 * Each chunk costs one event per hop: when a chunk reaches a link, the lane
 * it will use and the time it starts are known at once (the link direction
 * is a FIFO served by its lanes, so a chunk starts when the earliest lane is
 * free, never before it arrives); the event fires when the chunk has crossed
 * the link and its latency, at the next chip.  Messages live in fixed-size
 * slabs so their addresses never move while callbacks send more.
 * What a hop touches is laid out to be one cache line each: a link's
 * figures, its lanes' times (lane 0 inline) and its counters in one, a
 * message's size and route in one.
 * Invariant: a lane's free time is the time it finishes the last chunk
 * given to it, and no chunk is given to a lane before that time; a message
 * is freed exactly when its last chunk is delivered. */
#include "hw/network.h"
#include "hw/route-memo-private.h"

#include "common/json.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define HOP_BITS 20
#define HOP_MASK ((UINT64_C(1) << HOP_BITS) - 1)
#define SLAB_SHIFT 10
#define SLAB_SIZE (1u << SLAB_SHIFT)
/* A message's route links kept in the message itself: the first 13 share
 * the message's first cache line with its size and hop count. */
#define MSG_ROUTE 29
/* The links a cached route keeps: a multislice route (torus, PCIe, NIC,
 * DCN and back) is often longer than the 14 one line would hold, and such
 * routes were found again for every message. */
#define INLINE_ROUTE MSG_ROUTE
/* Routes of recent (src, dst) pairs, in sets of ROUTE_WAYS entries:
 * collectives send to the same few neighbours over and over (a member of a
 * torus all-reduce to six).  At most 2^16 entries, about 16 per endpoint.
 * Direct-mapped, a third of a 3-D torus collective's pairs collided and
 * evicted each other on every message. */
#define ROUTE_CACHE_MAX_BITS 16
#define ROUTE_CACHE_PER_ENDPOINT 16u
#define ROUTE_WAYS 4

/* What every chunk-hop reads and writes, one cache line per link. */
typedef struct {
  ps_time_t free0;      /* lane 0's free time */
  double ps_per_byte;
  ps_time_t latency;
  int64_t pending;      /* chunk-hops of messages in flight still to join it */
  int64_t bytes;
  int64_t chunks;
  ps_time_t busy;
  int lanes;
  int first_lane;       /* lanes 1.. are lane_free[first_lane ..] */
} Link;
G_STATIC_ASSERT(sizeof(Link) == 64);

/* The rest of a link. */
typedef struct {
  gboolean present;
  gboolean failed;      /* ICI only: bandwidth factor 0, no route crosses it */
  double factor;        /* bandwidth multiplier (ps_network_degrade_link), 1 by default */
} LinkCold;

/* A cached route, two cache lines (a route of up to 15 links reads only
 * the first); its (src, dst) key is in route_keys, the keys of a set in one
 * line. */
typedef struct {
  int32_t hops;
  int32_t links[INLINE_ROUTE];
  int32_t pad[2];
} CachedRoute;
G_STATIC_ASSERT(sizeof(CachedRoute) == 128);
#define ROUTE_EMPTY UINT64_MAX

static inline uint64_t route_key(int src, int dst)
{
  return (uint64_t)(uint32_t)src << 32 | (uint32_t)dst;
}

typedef struct {
  /* what every hop reads */
  _Alignas(64) int64_t bytes;
  int32_t hops;
  int32_t inline_route[MSG_ROUTE]; /* the route when hops <= MSG_ROUTE */
  /* what a delivery reads */
  int32_t *heap_route;  /* the route when longer */
  uint64_t id;
  int64_t n_chunks;
  int64_t delivered;
  PsNetDeliverFn fn;
  void *ctx;
  ps_time_t sent;
  int src, dst;
  /* the rest */
  ps_time_t last_start; /* traced: latest start of a drawn chunk (its flow's end) */
  int last_link;        /* traced: that chunk's link, or -1 before one is drawn */
  gboolean flow_started; /* traced, not chained: the flow's start is drawn */
  gboolean chained;     /* traced: the sender's flow runs through it (send_chained) */
  uint32_t next_free;
  gboolean whole;       /* delivered once, whole (ps_network_send_whole) */
  int64_t left_last;    /* whole: chunks that have left the last link */
} Message;
G_STATIC_ASSERT(offsetof(Message, heap_route) == 128 && offsetof(Message, dst) < 192);

static inline const int32_t *msg_route(const Message *m)
{
  return m->hops <= MSG_ROUTE ? m->inline_route : m->heap_route;
}

struct PsNetwork {
  PsEngine *engine;
  const ps_time_t *now; /* the engine's clock (ps_engine_clock) */
  const PsTopology *topo;
  PsGeometry *geo;      /* chips, numbering, zones, link ids and routes */
  int64_t chunk;
  int devices, hosts, n_links;
  int n_failed;         /* failed ICI link directions */
  gboolean degraded;    /* some link's bandwidth was ever changed */
  guint8 *failed;       /* per link: failed (routes go round it) */
  Link *links;
  LinkCold *cold;
  PsLinkEnds *ends;     /* per link: its geometry, looked up once */
  ps_time_t *lane_free;  /* lanes past the first of every link */
  CachedRoute *route_cache;
  uint64_t *route_keys; /* per entry: route_key, ROUTE_EMPTY when empty */
  uint32_t route_mask;  /* entries - 1 */
  uint32_t route_victim; /* the way a miss in a full set replaces, mod ROUTE_WAYS */
  uint64_t routes_version; /* bumped whenever routes may have changed */
  PsRouteMemo *memo;    /* ps_network_route_memo's routes */
  Message **slabs;
  uint32_t n_slabs;
  uint32_t free_head;   /* UINT32_MAX when empty */
  uint32_t ev_hop;
  uint64_t next_id;
  uint64_t chunk_hops;
  uint64_t in_flight;
  /* per link pending counts kept (only ps_network_link_quiet reads them):
   * from the first moment nothing is in flight after ps_network_count_pending */
  gboolean count_pending;
  gboolean want_pending;
  PsTrace *trace;
  int trace_pid;
  guint8 *named;        /* per link: thread name written */
  /* per link, from the first ps_network_book_link: its statistics' chunk
   * count after the last such booking and that booking's latest join */
  int64_t *booked_chunks;
  ps_time_t *booked_join;
};

/* ---- routes --------------------------------------------------------- */

typedef PsRoute RouteBuf;

/* The route of (src, dst) into r, round the failed links. */
static void route_into(const PsNetwork *net, int src, int dst, RouteBuf *r)
{
  r->failed = net->n_failed > 0 ? net->failed : NULL;
  ps_geometry_route(net->geo, src, dst, r);
}

int ps_network_ici_link(const PsNetwork *net, int chip, int dim, int dir)
{
  return ps_geometry_ici_link(net->geo, chip, dim, dir);
}

int ps_network_route(const PsNetwork *net, int src, int dst, int *out, int max)
{
  g_return_val_if_fail(src >= 0 && src < ps_network_endpoints(net), 0);
  g_return_val_if_fail(dst >= 0 && dst < ps_network_endpoints(net), 0);
  RouteBuf r = {out, max, 0, NULL};
  route_into(net, src, dst, &r);
  return r.n;
}

int ps_network_route_memo(PsNetwork *net, int src, int dst, int *out, int max)
{
  g_return_val_if_fail(src >= 0 && src < ps_network_endpoints(net), 0);
  g_return_val_if_fail(dst >= 0 && dst < ps_network_endpoints(net), 0);
  int hops;
  const int32_t *r = ps_route_memo_find(net->memo, src, dst, &hops);
  int buf[32];
  g_autofree int *big = NULL;
  if (!r) { /* worked out once, then kept */
    hops = ps_network_route(net, src, dst, buf, 32);
    if (hops > 32) {
      big = g_new(int, hops);
      ps_network_route(net, src, dst, big, hops);
    }
    r = big ? big : buf;
    ps_route_memo_add(net->memo, src, dst, r, hops);
  }
  for (int i = 0; i < hops && i < max; i++)
    out[i] = r[i];
  return hops;
}

int ps_network_hops(const PsNetwork *net, int src, int dst)
{
  return ps_network_route(net, src, dst, NULL, 0);
}

/* ---- construction --------------------------------------------------- */

static void on_hop(PsEngine *engine, const PsEvent *ev, void *ctx);
static void hop_prefetch(const PsEvent *ev, int stage, void *ctx);

static void link_init(PsNetwork *net, int id, double bw, double latency_s, int lanes,
                      int *next_lane)
{
  Link *l = &net->links[id];
  net->cold[id].present = TRUE;
  net->cold[id].factor = 1.0;
  l->ps_per_byte = (double)PS_PS_PER_S / bw;
  l->latency = ps_time_from_s(latency_s);
  l->lanes = lanes;
  l->first_lane = *next_lane;
  *next_lane += lanes > 1 ? lanes - 1 : 0;
}

/* A link's bandwidth, latency and lanes, from the figures of its kind. */
static void link_figures(const PsTopology *t, PsLinkKind kind, double *bw, double *latency_s,
                         int *lanes)
{
  *bw = 0.0;
  *latency_s = 0.0;
  *lanes = 1;
  switch (kind) {
  case PS_LINK_ICI:
    *bw = t->ici_bandwidth_Bps;
    *latency_s = t->ici_latency_s;
    *lanes = t->ici_links_per_neighbor;
    break;
  case PS_LINK_ON_CHIP:
    *bw = t->on_chip_bandwidth_Bps;
    break;
  case PS_LINK_PCIE_DOWN:
  case PS_LINK_PCIE_UP:
    *bw = t->pcie_bandwidth_Bps;
    break;
  case PS_LINK_DCN_NIC_UP:
  case PS_LINK_DCN_NIC_DOWN:
    *bw = t->dcn.nic_bandwidth_Bps;
    *latency_s = t->dcn.nic_latency_s + t->dcn.hop_latency_s;
    break;
  case PS_LINK_DCN_LEAF_UP:
  case PS_LINK_DCN_LEAF_DOWN:
    *bw = t->dcn.hosts_per_leaf * t->dcn.nic_bandwidth_Bps / t->dcn.oversubscription;
    *latency_s = t->dcn.hop_latency_s;
    break;
  }
}

PsNetwork *ps_network_new(PsEngine *engine, const PsTopology *topo, int64_t chunk_bytes)
{
  g_return_val_if_fail(engine != NULL && topo != NULL && chunk_bytes > 0, NULL);
  PsNetwork *net = g_new0(PsNetwork, 1);
  net->engine = engine;
  net->now = ps_engine_clock(engine);
  net->topo = topo;
  net->geo = ps_geometry_new(topo);
  net->chunk = chunk_bytes;
  net->devices = ps_geometry_devices(net->geo);
  net->hosts = ps_geometry_hosts(net->geo);
  net->n_links = ps_geometry_n_links(net->geo);
  net->links = g_aligned_alloc0(net->n_links > 0 ? (gsize)net->n_links : 1, sizeof(Link), 64);
  net->cold = g_new0(LinkCold, net->n_links > 0 ? net->n_links : 1);
  net->ends = g_new0(PsLinkEnds, net->n_links > 0 ? net->n_links : 1);
  net->failed = g_new0(guint8, net->n_links > 0 ? net->n_links : 1);
  int lanes = 0;
  /* zone by zone, in link-id order */
  for (int id = 0; id < net->n_links; id++) {
    PsLinkEnds e;
    if (!ps_geometry_link_ends(net->geo, id, &e))
      continue;
    net->ends[id] = e;
    double bw, latency_s;
    int n_lanes;
    link_figures(topo, e.kind, &bw, &latency_s, &n_lanes);
    link_init(net, id, bw, latency_s, n_lanes, &lanes);
  }
  net->lane_free = g_new0(ps_time_t, lanes > 0 ? lanes : 1);
  net->free_head = UINT32_MAX;
  uint32_t entries = 64;
  while (entries < (1u << ROUTE_CACHE_MAX_BITS) &&
         entries < ROUTE_CACHE_PER_ENDPOINT * (uint32_t)ps_network_endpoints(net))
    entries *= 2;
  net->route_mask = entries - 1;
  net->route_cache = g_aligned_alloc(entries, sizeof(CachedRoute), 64);
  net->route_keys = g_aligned_alloc(entries, sizeof(uint64_t), 64);
  for (uint32_t i = 0; i < entries; i++)
    net->route_keys[i] = ROUTE_EMPTY;
  net->memo = ps_route_memo_new();
  net->ev_hop = ps_engine_register(engine, "net-chunk-hop", on_hop, net);
  ps_engine_set_prefetch(engine, net->ev_hop, hop_prefetch);
  return net;
}

void ps_network_free(PsNetwork *net)
{
  if (!net)
    return;
  for (uint32_t s = 0; s < net->n_slabs; s++) {
    for (uint32_t i = 0; i < SLAB_SIZE; i++)
      g_free(net->slabs[s][i].heap_route);
    g_aligned_free(net->slabs[s]);
  }
  g_free(net->slabs);
  g_aligned_free(net->links);
  g_free(net->cold);
  g_free(net->ends);
  g_free(net->lane_free);
  g_free(net->booked_chunks);
  g_free(net->booked_join);
  g_free(net->failed);
  ps_geometry_free(net->geo);
  g_aligned_free(net->route_cache);
  g_aligned_free(net->route_keys);
  ps_route_memo_free(net->memo);
  g_free(net->named);
  g_free(net);
}

/* ---- accessors ------------------------------------------------------ */

PsEngine *ps_network_engine(const PsNetwork *net) { return net->engine; }
const PsTopology *ps_network_topology(const PsNetwork *net) { return net->topo; }
int64_t ps_network_chunk_bytes(const PsNetwork *net) { return net->chunk; }
int ps_network_devices(const PsNetwork *net) { return net->devices; }
int ps_network_endpoints(const PsNetwork *net) { return net->devices + net->hosts; }
int ps_network_n_links(const PsNetwork *net) { return net->n_links; }
uint64_t ps_network_messages(const PsNetwork *net) { return net->next_id; }
uint64_t ps_network_next_message_id(const PsNetwork *net) { return net->next_id + 1; }
uint64_t ps_network_chunk_hops(const PsNetwork *net) { return net->chunk_hops; }
uint64_t ps_network_in_flight(const PsNetwork *net) { return net->in_flight; }

int ps_network_host_endpoint(const PsNetwork *net, int host)
{
  g_return_val_if_fail(host >= 0 && host < net->hosts, -1);
  return net->devices + host;
}

const PsGeometry *ps_network_geometry(const PsNetwork *net) { return net->geo; }

int ps_network_device_chip(const PsNetwork *net, int device)
{
  return ps_geometry_device_chip(net->geo, device);
}

int ps_network_device_core(const PsNetwork *net, int device)
{
  return ps_geometry_device_core(net->geo, device);
}

int ps_network_chip_host(const PsNetwork *net, int chip)
{
  return ps_geometry_chip_host(net->geo, chip);
}

void ps_network_chip_coords(const PsNetwork *net, int chip, int coords[PS_MAX_DIMS])
{
  ps_geometry_chip_coords(net->geo, chip, coords);
}

int ps_network_chip_at(const PsNetwork *net, const int coords[PS_MAX_DIMS])
{
  return ps_geometry_chip_at(net->geo, coords);
}

gboolean ps_network_link_info(const PsNetwork *net, int link, PsLinkInfo *out)
{
  g_return_val_if_fail(out != NULL, FALSE);
  if (link < 0 || link >= net->n_links || !net->cold[link].present)
    return FALSE;
  const Link *l = &net->links[link];
  const LinkCold *lc = &net->cold[link];
  *out = (PsLinkInfo){.ends = net->ends[link], .lanes = l->lanes,
                      .bandwidth_Bps = (double)PS_PS_PER_S / l->ps_per_byte,
                      .latency = l->latency, .bytes = l->bytes, .chunks = l->chunks,
                      .busy = l->busy, .bandwidth_factor = lc->factor, .failed = lc->failed};
  return TRUE;
}

char *ps_network_link_name(const PsNetwork *net, int link)
{
  return ps_geometry_link_name(net->geo, link);
}

/* ---- faults --------------------------------------------------------- */

/* A DCN link direction's bandwidth times factor (> 0: it has no other way
 * round, so it never fails). */
static gboolean degrade_dcn_link(PsNetwork *net, int link, PsLinkKind kind, double factor,
                                 GError **error)
{
  g_return_val_if_fail(kind == PS_LINK_DCN_NIC_UP || kind == PS_LINK_DCN_NIC_DOWN ||
                           kind == PS_LINK_DCN_LEAF_UP || kind == PS_LINK_DCN_LEAF_DOWN,
                       FALSE);
  if (factor == 0) {
    g_autofree char *name = ps_network_link_name(net, link);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "failing %s: the data-center network has no other way round it; degrade it "
                "(a factor > 0) instead",
                name);
    return FALSE;
  }
  double bw, latency_s;
  int lanes;
  link_figures(net->topo, kind, &bw, &latency_s, &lanes);
  net->cold[link].factor = factor;
  net->links[link].ps_per_byte = (double)PS_PS_PER_S / (bw * factor);
  return TRUE;
}

gboolean ps_network_degrade_link(PsNetwork *net, int link, double factor, GError **error)
{
  g_return_val_if_fail(net != NULL && factor >= 0 && factor < G_MAXDOUBLE, FALSE);
  PsLinkEnds e;
  g_return_val_if_fail(link >= 0 && link < net->n_links && net->cold[link].present, FALSE);
  g_return_val_if_fail(ps_geometry_link_ends(net->geo, link, &e), FALSE);
  net->degraded = TRUE;
  if (e.kind != PS_LINK_ICI)
    return degrade_dcn_link(net, link, e.kind, factor, error);
  Link *l = &net->links[link];
  LinkCold *lc = &net->cold[link];
  int dim = e.dim;
  const PsTopology *t = net->topo;
  if (factor == 0 && !lc->failed) {
    g_autofree char *name = ps_network_link_name(net, link);
    if (t->twisted || !t->wrap[dim]) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  t->twisted
                      ? "failing %s: rerouting round a failed link is not modelled on a "
                        "twisted torus; degrade it (a factor > 0) instead"
                      : "failing %s cuts dimension %c in two: it has no wrap-around, so "
                        "traffic between the chips on either side has no other way; degrade "
                        "it (a factor > 0) instead",
                  name, "xyz"[dim]);
      return FALSE;
    }
    lc->failed = TRUE;
    net->failed[link] = 1;
    int plus, minus;
    if (!ps_geometry_ring_connected(net->geo, net->failed, e.chip, dim, &plus, &minus)) {
      lc->failed = FALSE;
      net->failed[link] = 0;
      g_autofree char *pn = ps_network_link_name(net, plus);
      g_autofree char *mn = ps_network_link_name(net, minus);
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "failing %s: with %s and %s both failed, some chips of the %c ring have no "
                  "way to each other (each way round crosses a failed link); fail links of "
                  "one ring in one direction only, or the two directions of one cable",
                  name, pn, mn, "xyz"[dim]);
      return FALSE;
    }
    net->n_failed++;
  } else if (factor > 0 && lc->failed) {
    lc->failed = FALSE;
    net->failed[link] = 0;
    net->n_failed--;
  }
  lc->factor = factor;
  l->ps_per_byte = factor > 0 ? (double)PS_PS_PER_S / (t->ici_bandwidth_Bps * factor) : INFINITY;
  /* routes change; messages in flight keep the route they were sent on */
  net->routes_version++;
  for (uint32_t i = 0; i <= net->route_mask; i++)
    net->route_keys[i] = ROUTE_EMPTY;
  ps_route_memo_clear(net->memo);
  return TRUE;
}

/* ---- messages ------------------------------------------------------- */

static inline Message *msg_at(const PsNetwork *net, uint32_t idx)
{
  return &net->slabs[idx >> SLAB_SHIFT][idx & (SLAB_SIZE - 1)];
}

static uint32_t msg_alloc(PsNetwork *net)
{
  if (net->free_head == UINT32_MAX) {
    g_assert(net->n_slabs < (UINT32_MAX >> SLAB_SHIFT));
    net->slabs = g_renew(Message *, net->slabs, net->n_slabs + 1);
    net->slabs[net->n_slabs] = g_aligned_alloc0(SLAB_SIZE, sizeof(Message), 64);
    uint32_t base = net->n_slabs << SLAB_SHIFT;
    for (uint32_t i = SLAB_SIZE; i-- > 0;) {
      net->slabs[net->n_slabs][i].next_free = net->free_head;
      net->free_head = base + i;
    }
    net->n_slabs++;
  }
  uint32_t idx = net->free_head;
  net->free_head = msg_at(net, idx)->next_free;
  return idx;
}

static void msg_release(PsNetwork *net, uint32_t idx)
{
  Message *m = msg_at(net, idx);
  g_clear_pointer(&m->heap_route, g_free);
  m->next_free = net->free_head;
  net->free_head = idx;
}

static inline int64_t chunk_size(const PsNetwork *net, const Message *m, uint64_t chunk)
{
  int64_t off = (int64_t)chunk * net->chunk;
  int64_t left = m->bytes - off;
  return left < net->chunk ? left : net->chunk;
}

/* The trace process of a link's track: the DCN's links have their own
 * ("dcn links", pid - 1), the other links share "links". */
static int link_pid(const PsNetwork *net, int link)
{
  const PsZone *z = ps_geometry_zone(net->geo, ps_geometry_link_zone(net->geo, link));
  return z->kind == PS_ZONE_DCN ? net->trace_pid - 1 : net->trace_pid;
}

static const char *const link_cat[] = {"ici", "on-chip", "pcie", "pcie", "dcn", "dcn", "dcn", "dcn"};

/* FALSE when the chunk is too short for the trace to draw (trace.h). */
static gboolean trace_chunk(PsNetwork *net, const Message *m, int link, uint64_t chunk,
                            int64_t bytes, ps_time_t start, ps_time_t ser)
{
  if (!net->named[link]) {
    net->named[link] = 1;
    g_autofree char *name = ps_network_link_name(net, link);
    ps_trace_thread(net->trace, link_pid(net, link), link + 1, name, link);
  }
  PsLinkInfo info;
  ps_network_link_info(net, link, &info);
  char args[160];
  g_snprintf(args, sizeof args,
             "{\"message\":%" G_GUINT64_FORMAT ",\"chunk\":%" G_GUINT64_FORMAT
             ",\"bytes\":%" G_GINT64_FORMAT ",\"src\":%d,\"dst\":%d}",
             m->id, chunk, bytes, m->src, m->dst);
  return ps_trace_complete(net->trace, link_pid(net, link), link + 1, "chunk", link_cat[info.ends.kind],
                           start, ser, args);
}

/* A chunk's serialization on l, rounded to the picosecond. */
static inline ps_time_t chunk_ser(const Link *l, int64_t bytes)
{
  double ser_d = (double)bytes * l->ps_per_byte + 0.5;
  return ser_d >= (double)PS_TIME_NEVER ? PS_TIME_NEVER : (ps_time_t)ser_d;
}

/* A chunk of `bytes` joins link l's queue now: it takes the lane that
 * frees first.  Sets when it starts and its serialization. */
static inline void link_take(PsNetwork *net, Link *l, int64_t bytes, ps_time_t now,
                             ps_time_t *start_out, ps_time_t *ser_out)
{
  ps_time_t *best = &l->free0;
  for (int i = 1; i < l->lanes; i++)
    if (net->lane_free[l->first_lane + i - 1] < *best)
      best = &net->lane_free[l->first_lane + i - 1];
  ps_time_t start = *best > now ? *best : now;
  ps_time_t ser = chunk_ser(l, bytes);
  *best = ps_time_add(start, ser);
  l->bytes += bytes;
  l->chunks++;
  l->busy = ps_time_add(l->busy, ser);
  net->chunk_hops++;
  *start_out = start;
  *ser_out = ser;
}

/* Gives chunk `chunk` of m to the link of hop `hop`; returns when it
 * reaches the far end. */
static ps_time_t transmit(PsNetwork *net, Message *m, uint64_t chunk, int hop)
{
  int li = msg_route(m)[hop];
  Link *l = &net->links[li];
  int64_t bytes = chunk_size(net, m, chunk);
  ps_time_t start, ser;
  link_take(net, l, bytes, ps_engine_now(net->engine), &start, &ser);
  if (G_UNLIKELY(net->trace != NULL)) {
    /* flows bind only to chunks the trace draws */
    if (trace_chunk(net, m, li, chunk, bytes, start, ser)) {
      if (chunk == 0 && m->chained) {
        /* mid-chunk, a nanosecond or more inside: after the flow's start
         * on the sender's track, before its end on the receiver's */
        if (ser >= 2000)
          ps_trace_flow_step(net->trace, link_pid(net, li), li + 1, "message", m->id,
                             start + ser / 2);
      } else if (hop == 0 && chunk == 0 && !m->chained) {
        ps_trace_flow_start(net->trace, link_pid(net, li), li + 1, "message", m->id, start);
        m->flow_started = TRUE;
      }
      if (m->last_link < 0 || start >= m->last_start) {
        m->last_start = start;
        m->last_link = li;
      }
    }
  }
  return ps_time_add(ps_time_add(start, ser), l->latency);
}

static inline uint64_t hop_arg(uint64_t chunk, int done)
{
  return (chunk << HOP_BITS) | (uint64_t)done;
}

/* A chunk of m has left the last link of its route.  FALSE when its
 * delivery needs no event: m is delivered whole and this is not its last
 * chunk to leave, which, every link of the route having one lane, is the
 * last to arrive, so its event is where the events of every chunk would
 * have put the delivery with `last` set (the others deliver nothing the
 * sender reads; they count as delivered now). */
static inline gboolean last_hop_event(Message *m)
{
  if (!m->whole || ++m->left_last == m->n_chunks)
    return TRUE;
  m->delivered++;
  return FALSE;
}

static void on_hop(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsNetwork *net = ctx;
  uint32_t idx = ev->target;
  Message *m = msg_at(net, idx);
  uint64_t chunk = ev->arg.u >> HOP_BITS;
  int done = (int)(ev->arg.u & HOP_MASK);
  if (done < m->hops) {
    if (net->count_pending)
      net->links[msg_route(m)[done]].pending--;
    ps_time_t t = transmit(net, m, chunk, done);
    if (done + 1 < m->hops || last_hop_event(m))
      ps_engine_at(engine, t, net->ev_hop, idx, hop_arg(chunk, done + 1));
    return;
  }
  m->delivered++;
  PsNetDelivery d = {.message = m->id,
                     .src = m->src,
                     .dst = m->dst,
                     .offset = (int64_t)chunk * net->chunk,
                     .bytes = chunk_size(net, m, chunk),
                     .message_bytes = m->bytes,
                     .last = m->delivered == m->n_chunks,
                     .sent = m->sent};
  PsNetDeliverFn fn = m->fn;
  void *fctx = m->ctx;
  if (d.last) {
    if (net->trace && m->flow_started)
      ps_trace_flow_end(net->trace, link_pid(net, m->last_link), m->last_link + 1, "message",
                        m->id,
                        m->last_start);
    msg_release(net, idx);
    net->in_flight--;
    if (net->want_pending && net->in_flight == 0)
      net->count_pending = TRUE;
  }
  fn(fctx, &d);
}

/* The engine's hint for a hop event ahead (engine.h): its message's first
 * line (and what a delivery reads), then the link it will take or the
 * context it will deliver to. */
static void hop_prefetch(const PsEvent *ev, int stage, void *ctx)
{
  const PsNetwork *net = ctx;
  const Message *m = msg_at(net, ev->target);
  if (stage == 0) {
    __builtin_prefetch(m);
    __builtin_prefetch(&m->heap_route);
    return;
  }
  int done = (int)(ev->arg.u & HOP_MASK);
  if (done < m->hops)
    __builtin_prefetch(&net->links[msg_route(m)[done]]);
  else
    __builtin_prefetch(m->ctx);
}

/* The cached route of (src, dst), computing and caching it on a miss:
 * NULL when it is longer than INLINE_ROUTE (not cached; the caller
 * computes it). */
static const CachedRoute *route_cached(PsNetwork *net, int src, int dst)
{
  /* a multiply mixes only upwards: take the product's top bits (a
   * product's low bits would depend on the ids' low bits alone, and the
   * pairs of a torus collective collide there) */
  uint64_t key = route_key(src, dst);
  uint64_t h = key * UINT64_C(0x9E3779B97F4A7C15);
  uint32_t set = (uint32_t)(h >> 40) & net->route_mask & ~(uint32_t)(ROUTE_WAYS - 1);
  uint64_t *keys = &net->route_keys[set];
  for (int w = 0; w < ROUTE_WAYS; w++)
    if (keys[w] == key)
      return &net->route_cache[set + (uint32_t)w];
  /* a miss: an empty way, else the next in turn */
  int way = -1;
  for (int w = 0; w < ROUTE_WAYS && way < 0; w++)
    if (keys[w] == ROUTE_EMPTY)
      way = w;
  if (way < 0)
    way = (int)(net->route_victim++ % ROUTE_WAYS);
  int rbuf[INLINE_ROUTE];
  RouteBuf r = {rbuf, INLINE_ROUTE, 0, NULL};
  route_into(net, src, dst, &r);
  if (r.n > INLINE_ROUTE)
    return NULL;
  CachedRoute *cr = &net->route_cache[set + (uint32_t)way];
  keys[way] = key;
  cr->hops = r.n;
  for (int i = 0; i < r.n; i++)
    cr->links[i] = rbuf[i];
  return cr;
}

/* send_message's flags */
#define SEND_CHAINED 1 /* ps_network_send_chained */
#define SEND_WHOLE 2   /* ps_network_send_whole */

static uint64_t send_message(PsNetwork *net, int src, int dst, int64_t bytes,
                             PsNetDeliverFn fn, void *ctx, int flags);

uint64_t ps_network_send(PsNetwork *net, int src, int dst, int64_t bytes, PsNetDeliverFn fn,
                         void *ctx)
{
  return send_message(net, src, dst, bytes, fn, ctx, 0);
}

uint64_t ps_network_send_chained(PsNetwork *net, int src, int dst, int64_t bytes,
                                 PsNetDeliverFn fn, void *ctx)
{
  return send_message(net, src, dst, bytes, fn, ctx, SEND_CHAINED);
}

/* Whether a message down route may be delivered whole: not traced (a
 * trace draws chunks), and one lane on every link, so that its chunks keep
 * their order to the end (on two lanes a shorter last chunk may overtake). */
static gboolean may_deliver_whole(const PsNetwork *net, const int32_t *route, int hops)
{
  if (net->trace)
    return FALSE;
  for (int i = 0; i < hops; i++)
    if (net->links[route[i]].lanes != 1)
      return FALSE;
  return TRUE;
}

static uint64_t send_message(PsNetwork *net, int src, int dst, int64_t bytes,
                             PsNetDeliverFn fn, void *ctx, int flags)
{
  g_return_val_if_fail(net != NULL && fn != NULL && bytes >= 0, 0);
  g_return_val_if_fail(src >= 0 && src < ps_network_endpoints(net), 0);
  g_return_val_if_fail(dst >= 0 && dst < ps_network_endpoints(net), 0);
  uint32_t idx = msg_alloc(net);
  Message *m = msg_at(net, idx);
  const CachedRoute *cr = route_cached(net, src, dst);
  int hops;
  int32_t *route;
  if (cr) {
    G_STATIC_ASSERT(INLINE_ROUTE <= MSG_ROUTE);
    hops = cr->hops;
    route = m->inline_route;
    memcpy(route, cr->links, sizeof(int32_t) * (size_t)hops);
  } else {
    hops = ps_network_route(net, src, dst, NULL, 0);
    int *big = g_new(int, hops);
    RouteBuf r2 = {big, hops, 0, NULL};
    route_into(net, src, dst, &r2);
    route = hops <= MSG_ROUTE ? m->inline_route : (m->heap_route = g_new(int32_t, hops));
    for (int i = 0; i < hops; i++)
      route[i] = big[i];
    g_free(big);
  }
  g_assert(hops <= (int)HOP_MASK);
  m->src = src;
  m->dst = dst;
  m->hops = hops;
  m->bytes = bytes;
  m->n_chunks = bytes == 0 ? 1 : (bytes + net->chunk - 1) / net->chunk;
  g_assert((uint64_t)m->n_chunks < (UINT64_C(1) << (64 - HOP_BITS)));
  m->delivered = 0;
  m->fn = fn;
  m->ctx = ctx;
  m->sent = ps_engine_now(net->engine);
  m->last_start = 0;
  m->last_link = -1;
  m->flow_started = FALSE;
  m->chained = (flags & SEND_CHAINED) != 0;
  m->whole = (flags & SEND_WHOLE) && may_deliver_whole(net, route, hops);
  m->left_last = 0;
  m->id = ++net->next_id;
  net->in_flight++;
  if (net->count_pending)
    for (int i = 1; i < m->hops; i++)
      net->links[route[i]].pending += m->n_chunks;
  for (int64_t j = 0; j < m->n_chunks; j++) {
    if (m->hops == 0) {
      ps_engine_at(net->engine, m->sent, net->ev_hop, idx, hop_arg((uint64_t)j, 0));
    } else {
      ps_time_t t = transmit(net, m, (uint64_t)j, 0);
      if (m->hops > 1 || last_hop_event(m))
        ps_engine_at(net->engine, t, net->ev_hop, idx, hop_arg((uint64_t)j, 1));
    }
  }
  return m->id;
}

uint64_t ps_network_send_whole(PsNetwork *net, int src, int dst, int64_t bytes,
                               PsNetDeliverFn fn, void *ctx)
{
  return send_message(net, src, dst, bytes, fn, ctx, SEND_WHOLE);
}

int ps_network_direct_link(PsNetwork *net, int src, int dst)
{
  g_return_val_if_fail(net != NULL, -1);
  g_return_val_if_fail(src >= 0 && src < ps_network_endpoints(net), -1);
  g_return_val_if_fail(dst >= 0 && dst < ps_network_endpoints(net), -1);
  if (net->trace)
    return -1;
  const CachedRoute *cr = route_cached(net, src, dst);
  return cr && cr->hops == 1 ? cr->links[0] : -1;
}

uint64_t ps_network_routes_version(const PsNetwork *net) { return net->routes_version; }

gboolean ps_network_translation_symmetric(const PsNetwork *net)
{
  return !net->degraded && !net->topo->twisted && ps_geometry_slices(net->geo) == 1;
}

/* ps_network_send_link's chunks on a one-lane link, in closed form: the
 * first starts when the lane frees (or now), each of the others when the
 * one before has left, so the last leaves after the sum of their rounded
 * serializations and arrives a latency later, and the link's statistics
 * add up the same.  FALSE (nothing booked) where a sum would saturate. */
static gboolean send_link_closed(PsNetwork *net, Link *l, int64_t bytes, ps_time_t now,
                                 ps_time_t *last)
{
  int64_t full = bytes / net->chunk, rest = bytes - full * net->chunk;
  ps_time_t ser_full = chunk_ser(l, net->chunk), ser_rest = rest > 0 ? chunk_ser(l, rest) : 0;
  ps_time_t sum;
  if (ser_full >= PS_TIME_NEVER / 2 || ser_rest >= PS_TIME_NEVER / 2 ||
      __builtin_mul_overflow(full, ser_full, &sum) ||
      __builtin_add_overflow(sum, ser_rest, &sum))
    return FALSE;
  ps_time_t start = l->free0 > now ? l->free0 : now;
  ps_time_t end = ps_time_add(start, sum);
  if (end >= PS_TIME_NEVER / 2 || ps_time_add(l->busy, sum) >= PS_TIME_NEVER / 2)
    return FALSE;
  int64_t n = full + (rest > 0);
  l->free0 = end;
  l->bytes += bytes;
  l->chunks += n;
  l->busy += sum;
  net->chunk_hops += (uint64_t)n;
  *last = ps_time_add(end, l->latency);
  return TRUE;
}

/* ps_network_send_link's chunks the general way: in closed form on one
 * lane, else one by one. */
static G_GNUC_NO_INLINE ps_time_t send_link_chunks(PsNetwork *net, Link *l, int64_t bytes,
                                                   ps_time_t now)
{
  int64_t n_chunks = bytes <= net->chunk ? 1 : (bytes + net->chunk - 1) / net->chunk;
  ps_time_t last = 0;
  if (l->lanes == 1 && n_chunks > 1 && send_link_closed(net, l, bytes, now, &last)) {
    net->next_id++;
    return last;
  }
  for (int64_t j = 0; j < n_chunks; j++) {
    int64_t left = bytes - j * net->chunk;
    ps_time_t start, ser;
    link_take(net, l, left < net->chunk ? left : net->chunk, now, &start, &ser);
    ps_time_t arrive = ps_time_add(ps_time_add(start, ser), l->latency);
    if (arrive > last)
      last = arrive;
  }
  net->next_id++;
  return last;
}

ps_time_t ps_network_send_link(PsNetwork *net, int link, int64_t bytes)
{
  g_return_val_if_fail(net != NULL && bytes >= 0, PS_TIME_NEVER);
  g_return_val_if_fail(link >= 0 && link < net->n_links, PS_TIME_NEVER);
  if (net->trace)
    return PS_TIME_NEVER;
  /* every chunk joins the link now, as ps_network_send's first hop */
  Link *l = &net->links[link];
  ps_time_t now = *net->now;
  if (G_UNLIKELY(bytes > net->chunk || l->lanes != 1))
    return send_link_chunks(net, l, bytes, now);
  /* nearly every message of a large collective: one chunk on one lane, as
   * link_take books it */
  ps_time_t start = l->free0 > now ? l->free0 : now;
  ps_time_t ser = chunk_ser(l, bytes);
  ps_time_t end = ps_time_add(start, ser);
  l->free0 = end;
  l->bytes += bytes;
  l->chunks++;
  l->busy = ps_time_add(l->busy, ser);
  net->chunk_hops++;
  net->next_id++;
  return ps_time_add(end, l->latency);
}

void ps_network_prefetch_links(const PsNetwork *net, const int *links, int n)
{
  for (int i = 0; i < n; i++)
    if (links[i] >= 0 && links[i] < net->n_links)
      __builtin_prefetch(&net->links[links[i]], 1);
}

gboolean ps_network_is_traced(const PsNetwork *net) { return net->trace != NULL; }

void ps_network_count_pending(PsNetwork *net)
{
  g_return_if_fail(net != NULL);
  net->want_pending = TRUE;
  if (net->in_flight == 0)
    net->count_pending = TRUE;
}

gboolean ps_network_link_quiet(const PsNetwork *net, int link, ps_time_t t)
{
  g_return_val_if_fail(net != NULL && link >= 0 && link < net->n_links, FALSE);
  const Link *l = &net->links[link];
  if (!net->count_pending || l->pending != 0 || l->free0 > t)
    return FALSE;
  for (int i = 1; i < l->lanes; i++)
    if (net->lane_free[l->first_lane + i - 1] > t)
      return FALSE;
  return TRUE;
}

ps_time_t ps_network_book_message(PsNetwork *net, const int *route, int hops, int64_t bytes,
                                  ps_time_t t)
{
  g_return_val_if_fail(net != NULL && bytes >= 0 && hops >= 0, PS_TIME_NEVER);
  g_return_val_if_fail(net->trace == NULL, PS_TIME_NEVER);
  net->next_id++;
  if (hops == 0)
    return t;
  /* chunk by chunk down the route: each link sees the message's chunks in
   * order, as the events would give them to it */
  int64_t n_chunks = bytes == 0 ? 1 : (bytes + net->chunk - 1) / net->chunk;
  ps_time_t last = 0;
  for (int64_t j = 0; j < n_chunks; j++) {
    int64_t left = bytes - j * net->chunk;
    int64_t cb = left < net->chunk ? left : net->chunk;
    ps_time_t at = t;
    for (int i = 0; i < hops; i++) {
      Link *l = &net->links[route[i]];
      ps_time_t start, ser;
      link_take(net, l, cb, at, &start, &ser);
      at = ps_time_add(ps_time_add(start, ser), l->latency);
    }
    if (at > last)
      last = at;
  }
  return last;
}

ps_time_t ps_network_chunk_time(const PsNetwork *net, int link, int64_t bytes)
{
  g_return_val_if_fail(net != NULL && link >= 0 && link < net->n_links && bytes >= 0,
                       PS_TIME_NEVER);
  return chunk_ser(&net->links[link], bytes);
}

void ps_network_book_link(PsNetwork *net, int link, ps_time_t free, int64_t bytes,
                          int64_t chunks, ps_time_t busy, ps_time_t last_join)
{
  g_return_if_fail(net != NULL && link >= 0 && link < net->n_links && net->trace == NULL);
  Link *l = &net->links[link];
  g_return_if_fail(l->lanes == 1 && l->free0 <= free);
  l->free0 = free;
  l->bytes += bytes;
  l->chunks += chunks;
  l->busy = ps_time_add(l->busy, busy);
  net->chunk_hops += (uint64_t)chunks;
  if (!net->booked_chunks) {
    net->booked_chunks = g_new(int64_t, net->n_links);
    net->booked_join = g_new(ps_time_t, net->n_links);
    for (int i = 0; i < net->n_links; i++)
      net->booked_chunks[i] = -1;
  }
  net->booked_chunks[link] = l->chunks;
  net->booked_join[link] = last_join;
}

gboolean ps_network_link_state(const PsNetwork *net, int link, ps_time_t *free,
                               ps_time_t *booked_join)
{
  g_return_val_if_fail(net != NULL && link >= 0 && link < net->n_links, FALSE);
  const Link *l = &net->links[link];
  if (!net->count_pending || l->pending != 0 || l->lanes != 1)
    return FALSE;
  *free = l->free0;
  *booked_join = net->booked_chunks && net->booked_chunks[link] == l->chunks
                     ? net->booked_join[link]
                     : PS_TIME_NEVER;
  return TRUE;
}

void ps_network_count_messages(PsNetwork *net, uint64_t n)
{
  g_return_if_fail(net != NULL);
  net->next_id += n;
}

void ps_network_set_trace(PsNetwork *net, PsTrace *trace, int pid)
{
  net->trace = trace;
  net->trace_pid = pid;
  if (!trace)
    return;
  g_free(net->named);
  net->named = g_new0(guint8, net->n_links);
  ps_trace_process(trace, pid, "links", pid);
  if (ps_geometry_slices(net->geo) > 1)
    ps_trace_process(trace, pid - 1, "dcn links", pid - 1);
}

/* ---- shorthand topologies ------------------------------------------- */

gboolean ps_network_is_shorthand(const char *spec)
{
  return spec && (g_str_has_prefix(spec, "ring:") || g_str_has_prefix(spec, "torus:"));
}

static gboolean parse_dims(const char *text, int max, int *dims, int *n)
{
  g_auto(GStrv) parts = g_strsplit(text, "x", -1);
  *n = 0;
  for (int i = 0; parts[i]; i++) {
    char *end = NULL;
    if (*n == max || parts[i][0] < '0' || parts[i][0] > '9')
      return FALSE;
    gint64 v = g_ascii_strtoll(parts[i], &end, 10);
    if (*end || v < 1 || v > G_MAXINT)
      return FALSE;
    dims[(*n)++] = (int)v;
  }
  return *n > 0;
}

PsTopology *ps_network_shorthand(const char *spec, const char *const *overrides,
                                 GError **error)
{
  g_return_val_if_fail(spec != NULL, NULL);
  int dims[PS_MAX_DIMS], n = 0;
  gboolean ok = FALSE;
  if (g_str_has_prefix(spec, "ring:"))
    ok = parse_dims(spec + 5, 1, dims, &n) && !strchr(spec + 5, 'x');
  else if (g_str_has_prefix(spec, "torus:"))
    ok = parse_dims(spec + 6, PS_MAX_DIMS, dims, &n) && n >= 2;
  if (!ok) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: not a topology shorthand; use ring:N (e.g. ring:8) or torus:XxY[xZ] "
                "(e.g. torus:4x4, torus:4x4x4)",
                spec);
    return NULL;
  }
  GString *d = g_string_new(NULL), *w = g_string_new(NULL);
  for (int i = 0; i < n; i++) {
    g_string_append_printf(d, "%s%d", i ? "," : "", dims[i]);
    g_string_append_printf(w, "%strue", i ? "," : "");
  }
  /* Chip and host figures are one TensorCore of a v3 chip
   * (topologies/tpu-v3.json, which cites [GC-v3]); only the ICI figures
   * matter to collectives. */
  g_autofree char *text = g_strdup_printf(
      "{\"name\": \"%s\", \"generation\": \"shorthand\","
      " \"description\": \"%s: single-core chips, v3 ICI figures\","
      " \"chip\": {\"cores\": 1, \"megacore\": false, \"mxus_per_core\": 2,"
      " \"peak_flops\": 61.5e12, \"hbm_bytes\": 17179869184,"
      " \"hbm_bandwidth_Bps\": 450e9, \"on_chip_bandwidth_Bps\": 900e9},"
      " \"host\": {\"chips\": 1, \"cpu_threads\": 96, \"pcie_bandwidth_Bps\": 16e9,"
      " \"cpu_flops\": 3.1e12, \"loop_overhead_s\": 100e-6},"
      " \"torus\": {\"dims\": [%s], \"wrap\": [%s], \"twisted\": false},"
      " \"ici\": {\"bandwidth_Bps\": 83e9, \"latency_s\": 1e-6,"
      " \"links_per_neighbor\": 1}}",
      spec, spec, d->str, w->str);
  g_string_free(d, TRUE);
  g_string_free(w, TRUE);
  json_object *root = ps_json_parse(text, spec, error);
  if (!root)
    return NULL;
  PsTopology *t = NULL;
  g_autofree char *file = g_strdup_printf("<%s>", spec);
  for (const char *const *o = overrides; o && *o; o++) {
    const char *a = g_str_has_prefix(*o, "topology.") ? *o + 9 : *o;
    if (!ps_json_apply_override(root, a, "--set", error))
      goto out;
  }
  t = ps_topology_from_json(root, file, "", error);
out:
  json_object_put(root);
  return t;
}

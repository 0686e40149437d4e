/* network.h: the interconnect of a pod as timed events: ICI links between
 * torus neighbours, the on-chip path between the TensorCores of a chip, and
 * PCIe between each host and its chips.
 *
 * Model.  Every pair of torus neighbours is joined by one link in each
 * direction (ici_bandwidth_Bps per lane, ici_latency_s per hop), made of
 * ici_links_per_neighbor parallel lanes.  A dimension with wrap-around is a
 * ring, one without is a line (a mesh); a dimension of size 1 has no links.
 * A message is cut into chunks of chunk_bytes (the last may be shorter).  A
 * link direction is one FIFO queue served by its lanes: a chunk takes the
 * lane that frees first, occupies it for bytes / bandwidth, and reaches the
 * next chip `latency` after it left the lane.  Chunks are stored and
 * forwarded whole at every hop, so a message's chunks pipeline across hops.
 * A message's chunks all join its first link's queue when it is sent, so
 * two messages leaving on the same link go one after the other there; at
 * later hops, chunks of messages that meet interleave in arrival order.
 * Contention and pipelining come out of the events, not from formulas.  One message over h
 * uncontended one-lane hops, n chunks of c bytes (S = n c), takes exactly
 *     T = h * latency + S / B + (h - 1) * c / B
 * (the last chunk leaves the first link at S/B, then each further hop adds
 * its own serialization and every hop its latency); each serialization is
 * rounded to the picosecond once per chunk and link.
 *
 * Geometry.  Endpoints (devices, then hosts), chip coordinates, host
 * trays, wrap-around and twist, link ids (allocated per zone: the ICI
 * torus, the on-chip paths, PCIe), link names and routes are the slice's
 * PsGeometry (hw/topology.h), which the network builds from the topology
 * and routes every message with; the network adds time: lanes, queues,
 * chunks and faults.  Between the cores of one chip a message takes the
 * chip's on-chip path (on_chip_bandwidth_Bps, no latency; the topology
 * files cite the figure).  A chip's ICI router delivers to any of its
 * cores directly.  PCIe is one link per host and direction
 * (pcie_bandwidth_Bps, shared by its chips, no latency: the same figures
 * as hw/cost.c's ps_cost_pcie).
 *
 * DCN (multislice topologies, hw/topology.h's PS_ZONE_DCN).  Each host's
 * NIC is a link up to its leaf switch and one down from it
 * (dcn.nic_bandwidth_Bps, latency dcn.nic_latency_s + dcn.hop_latency_s
 * each); each leaf's uplink to the spine and downlink from it carry
 * hosts_per_leaf x NIC / oversubscription with dcn.hop_latency_s; the
 * spine itself does not block.  Chunks cross them as they cross ICI, so
 * slices' traffic contends on NICs and leaf uplinks.
 *
 * Faults (ps_network_degrade_link, the experiment's faults.links).  An
 * ICI link direction's bandwidth may be multiplied by a factor (all its
 * lanes; latency unchanged).  A factor of 0 fails it: a route that would
 * cross it in some dimension goes the other way round that dimension's
 * ring instead (still dimension order; only that dimension's direction
 * changes, so the detour costs n - 2h more hops on a ring of n where the
 * direct way took h).  A failure is refused where it would leave two chips
 * without a way: in a dimension without wrap-around, on a twisted torus
 * (whose wraps land shifted, so there is no plain other way round), or
 * where both ways round a ring would cross a failed link.  A DCN link
 * direction (a NIC's, a leaf's spine link) may be degraded, not failed.
 *
 * Invariant: on every link direction each lane carries one chunk at a time
 * and chunks leave a link in the order they reached it; no route crosses a
 * failed link; a message's deliver callback runs once per chunk, with
 * `last` set exactly once, after every chunk has arrived. */
#ifndef PS_NETWORK_H
#define PS_NETWORK_H

#include "engine/engine.h"
#include "hw/topology.h"
#include "io/config.h"
#include "io/trace.h"

typedef struct PsNetwork PsNetwork;

/* The chunk size of `podsim collective` when --chunk is not given. */
#define PS_NETWORK_DEFAULT_CHUNK (INT64_C(1) << 20)

/* A link direction and what it carried so far. */
typedef struct {
  PsLinkEnds ends;    /* what it joins (hw/topology.h) */
  int lanes;
  double bandwidth_Bps; /* per lane, bandwidth_factor applied (0 if failed) */
  double bandwidth_factor; /* 1 unless degraded */
  gboolean failed;    /* ICI: degraded to 0, no route crosses it */
  ps_time_t latency;
  int64_t bytes;      /* carried so far */
  int64_t chunks;
  ps_time_t busy;     /* serialization time summed over lanes */
} PsLinkInfo;

/* A chunk of a message reaching its destination. */
typedef struct {
  uint64_t message;   /* the id ps_network_send returned */
  int src, dst;
  int64_t offset;     /* of the chunk's first byte in the message */
  int64_t bytes;      /* of the chunk */
  int64_t message_bytes;
  gboolean last;      /* every chunk of the message has now arrived */
  ps_time_t sent;     /* when the message was sent */
} PsNetDelivery;

/* Runs inside an event handler at the chunk's arrival time; it may send.
 * `d` is valid only during the call. */
typedef void (*PsNetDeliverFn)(void *ctx, const PsNetDelivery *d);

/* (transfer full) topo must outlive the network.  chunk_bytes > 0 is the
 * size messages are cut into.  Registers its event types with engine. */
PsNetwork *ps_network_new(PsEngine *engine, const PsTopology *topo, int64_t chunk_bytes);
void ps_network_free(PsNetwork *net);

PsEngine *ps_network_engine(const PsNetwork *net);
const PsTopology *ps_network_topology(const PsNetwork *net);
/* The slice's geometry the network routes on.  (transfer none) */
const PsGeometry *ps_network_geometry(const PsNetwork *net);
int64_t ps_network_chunk_bytes(const PsNetwork *net);

int ps_network_devices(const PsNetwork *net);
int ps_network_endpoints(const PsNetwork *net); /* devices + hosts */
int ps_network_host_endpoint(const PsNetwork *net, int host);
int ps_network_device_chip(const PsNetwork *net, int device);
int ps_network_device_core(const PsNetwork *net, int device);
int ps_network_chip_host(const PsNetwork *net, int chip);
/* The geometry's (hw/topology.h).  coords[d] for d < ndims (the rest set to 0). */
void ps_network_chip_coords(const PsNetwork *net, int chip, int coords[PS_MAX_DIMS]);
int ps_network_chip_at(const PsNetwork *net, const int coords[PS_MAX_DIMS]);

/* Sends `bytes` (>= 0; an empty message is one empty chunk that still pays
 * every hop's latency) from endpoint src to endpoint dst.  Returns the
 * message id (1, 2, ...), also given to every delivery.  ctx is (transfer
 * none): it must stay valid until the delivery with `last` set. */
uint64_t ps_network_send(PsNetwork *net, int src, int dst, int64_t bytes, PsNetDeliverFn fn,
                         void *ctx);

/* ps_network_send for a sender that draws the message's flow itself: when
 * the network is traced, the sender writes the flow's start (ph "s") and
 * end (ph "f") on its own tracks with the message's id, and the network a
 * step (ph "t") at the message's first chunk on every link it crosses,
 * instead of a flow of its own from the first link to the last. */
uint64_t ps_network_send_chained(PsNetwork *net, int src, int dst, int64_t bytes,
                                 PsNetDeliverFn fn, void *ctx);

/* ps_network_send for a sender that reads only the delivery with `last`
 * set (a timing-only one): the chunks cross every link as ps_network_send's
 * do, with the same link statistics, and fn runs once, with `last` set,
 * exactly where and when (among the events of that time) ps_network_send's
 * would.  Where the route has a link of several lanes, or the network is
 * traced, it is ps_network_send. */
uint64_t ps_network_send_whole(PsNetwork *net, int src, int dst, int64_t bytes,
                               PsNetDeliverFn fn, void *ctx);

/* The fast path of a timing-only sender, for messages of one hop.
 * ps_network_direct_link gives the link of the one-hop route from src to
 * dst, or -1 when the route is not one hop or the network is traced (every
 * chunk then needs its events: use ps_network_send); it stays valid while
 * ps_network_routes_version() does.  ps_network_send_link puts a message's
 * chunks on that link now exactly as ps_network_send's would join it (same
 * lanes, same link statistics), with no delivery: it returns the time the
 * last chunk arrives (when ps_network_send would deliver `last`), and the
 * caller schedules what that arrival does (PS_TIME_NEVER, nothing sent, if
 * the network is traced). */
int ps_network_direct_link(PsNetwork *net, int src, int dst);
uint64_t ps_network_routes_version(const PsNetwork *net);
/* Whether moving every endpoint by the same even number of chips along
 * each dimension maps routes onto routes of the same hops and link
 * figures (so a collective's plan holds for every such translation of its
 * group): one slice, a torus that is not twisted, no link ever degraded or
 * failed.  Even, because a route exactly half-way round an even ring goes
 * the way the source's parity says. */
gboolean ps_network_translation_symmetric(const PsNetwork *net);
ps_time_t ps_network_send_link(PsNetwork *net, int link, int64_t bytes);
/* A hint, never a change: fetches what ps_network_send_link will read of
 * each of the n links into the cache (a caller that knows its next links
 * ahead; entries that are no link, such as -1, are skipped). */
void ps_network_prefetch_links(const PsNetwork *net, const int *links, int n);

/* The closed-form path of a sender that knows nothing else uses these
 * links (collectives' fast path, collective.h).  ps_network_count_pending:
 * the network counts, from the next moment no message is in flight, the
 * chunks still to join each link (not counted before: each message would
 * touch every link of its route when sent).  ps_network_link_quiet:
 * counting, no chunk of a message in flight is still to join `link` and
 * every lane of it is free by t (FALSE while not counting).
 * ps_network_book_message: a message of `bytes` sent at t (t may lie
 * ahead of the engine's clock) down `route` (h links), chunk by chunk, each link taking its chunks as the events would (same
 * lanes, rounding and link statistics), with no event; returns when the
 * last chunk arrives.  Exact when nothing else joins those links before
 * its chunks have left them; otherwise the message has gone first there.
 * Not on a traced network (PS_TIME_NEVER). */
gboolean ps_network_is_traced(const PsNetwork *net);
void ps_network_count_pending(PsNetwork *net);
gboolean ps_network_link_quiet(const PsNetwork *net, int link, ps_time_t t);
ps_time_t ps_network_book_message(PsNetwork *net, const int *route, int hops, int64_t bytes,
                                  ps_time_t t);

/* For a sender that times a round's chunks itself (collectives' shared
 * fast path): ps_network_chunk_time is a chunk's serialization on `link`
 * as ps_network_book_message rounds it; ps_network_book_link books on a
 * one-lane link what link by link booking would have left there: its lane
 * busy until `free` (not before its present free time), `chunks` chunks
 * of `bytes` in all taking `busy` of serialization, the last of them
 * joining the link at last_join; ps_network_count_messages counts n
 * messages so booked as sent.  ps_network_link_state: FALSE while the
 * network is not counting pending chunks (ps_network_count_pending), a
 * message in flight is still to join `link`, or it has several lanes;
 * else TRUE, *free the time its lane frees and *booked_join, when all it
 * carried since its last ps_network_book_link came from that booking, that
 * booking's last_join (else PS_TIME_NEVER).  Not on a traced network. */
ps_time_t ps_network_chunk_time(const PsNetwork *net, int link, int64_t bytes);
void ps_network_book_link(PsNetwork *net, int link, ps_time_t free, int64_t bytes,
                          int64_t chunks, ps_time_t busy, ps_time_t last_join);
gboolean ps_network_link_state(const PsNetwork *net, int link, ps_time_t *free,
                               ps_time_t *booked_join);
void ps_network_count_messages(PsNetwork *net, uint64_t n);

/* The link ids a message from src to dst crosses, in order, into out (at
 * most max); returns the route's length (which may exceed max). */
int ps_network_route(const PsNetwork *net, int src, int dst, int *out, int max);
int ps_network_hops(const PsNetwork *net, int src, int dst);
/* The same, remembered: a route asked for again is looked up (the routes a
 * collective's plans and predictions ask for, pair by pair, again for each
 * algorithm "auto" weighs and each collective of the same members). */
int ps_network_route_memo(PsNetwork *net, int src, int dst, int *out, int max);

int ps_network_n_links(const PsNetwork *net);
/* FALSE if `link` is not a link of this topology (a mesh edge, a dimension
 * of size 1). */
gboolean ps_network_link_info(const PsNetwork *net, int link, PsLinkInfo *out);
/* The ICI link leaving chip in dimension dim, direction dir (+1 / -1), or
 * -1 if there is none. */
int ps_network_ici_link(const PsNetwork *net, int chip, int dim, int dir);
/* Multiplies the bandwidth of ICI link direction `link` (from
 * ps_network_ici_link) by factor (>= 0; the topology's figure times
 * factor, so a second call replaces the first); 0 fails it and routes go
 * round it (see Faults above).  A DCN link direction
 * (ps_geometry_dcn_link) takes only a factor > 0: failing it is an input
 * error, as it has no other way round.  FALSE and a PS_INPUT_ERROR naming the link
 * when a failure would cut chips off from each other; the link is then
 * unchanged.  Messages already sent keep the route they were sent on. */
gboolean ps_network_degrade_link(PsNetwork *net, int link, double factor, GError **error);

/* "chip (1,2) -> (1,3) +y", "chip (0,0) core 0 -> core 1",
 * "host 3 -> chips (PCIe)".  (transfer full) */
char *ps_network_link_name(const PsNetwork *net, int link);

/* The id the next message sent will have (so that a sender can draw its
 * flow's start before the network draws the first chunk). */
uint64_t ps_network_next_message_id(const PsNetwork *net);

/* Totals so far: messages sent, chunk-hops carried, chunks delivered. */
uint64_t ps_network_messages(const PsNetwork *net);
uint64_t ps_network_chunk_hops(const PsNetwork *net);
/* Messages sent and not yet wholly delivered. */
uint64_t ps_network_in_flight(const PsNetwork *net);

/* Shorthand topologies for collectives and tests: "ring:N" (one ring of N
 * chips with wrap-around) and "torus:XxY" or "torus:XxYxZ" (wrap-around on
 * every dimension), made of single-core chips, one chip per host, so one
 * collective member per chip.  The ICI figures default to Cloud TPU v3's as
 * topologies/tpu-v3.json gives them (83 GB/s per link each way, 1 us per
 * hop, one link per neighbour).  overrides ("ici.bandwidth_Bps=100e9",
 * "torus.wrap=[false]", a leading "topology." is accepted; NULL-terminated,
 * may be NULL) are applied to the topology's JSON before it is checked, as
 * for any topology file.  NULL and a PS_INPUT_ERROR if spec is malformed
 * or the result fails the topology checks.  (transfer full) */
gboolean ps_network_is_shorthand(const char *spec);
PsTopology *ps_network_shorthand(const char *spec, const char *const *overrides,
                                 GError **error);

/* Optional trace hook (trace may be NULL to stop).  Writes process `pid`
 * named "links", a thread per link direction that carries something
 * (tid = link + 1, named by ps_network_link_name), a complete event per
 * chunk and hop (cat "ici", "on-chip", "pcie" or "dcn"; on several slices
 * the DCN's links are threads of their own process, pid - 1, named "dcn
 * links", so a message's flow crosses from process to process), and a flow from each
 * message's first chunk on its first link to its last chunk on its last
 * link (ps_network_send_chained: steps of the sender's flow instead, in
 * the middle of each first chunk of 2 ns or more).  (transfer none) trace must outlive its use. */
void ps_network_set_trace(PsNetwork *net, PsTrace *trace, int pid);

#endif

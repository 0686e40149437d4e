/* fastshared.c: the fast path's sweep (fastpath.c) made once for all the
 * groups of one shared plan (shape.c), and kept for the arrival times it
 * was made with (and the rounds of one group that share links timed
 * together), so that the thousands of groups of one request of a
 * sharded plan (every tensor group's all-reduce of a layer, every fsdp
 * group's gather) cost one sweep between them, not one each.
 *
 * Slots.  The groups of a shape are translations of each other, and on a
 * translation-symmetric network so are their routes (shape.c).  A link of
 * the shape's first group's round is a slot: its kind (ICI or on-chip), the
 * offset of the chip it leaves from member 0's chip, and its dimension and
 * direction (or its two cores); slot k of another group is that link moved
 * with its member 0.  The sweep runs on the slots, each a one-lane link
 * with the figures of the first group's link.
 *
 * When a link's earlier state matters.  A round is taken only where, on
 * each of its links, nothing is still to join (no message in flight) and
 * either the lane is free by the time the round's first chunk joins that
 * link, or all the link carries was booked by this path with its last
 * chunk joining before then (hw/network.h's ps_network_link_state): an
 * event run would then have given the round's chunks the same places in
 * the link's queue, behind everything that joined earlier.  The sweep
 * starts each slot from its lane's free time relative to the round's first
 * arrival (0 when free by then), so a round's member end times and what it
 * leaves on each link (when the lane frees, first and last joins, bytes,
 * chunks, busy time) are functions of its members' relative arrival times
 * and those free times, and a small memo of sweeps keyed on them serves
 * every group that arrives alike.  This is weaker than fastpath.c's test
 * (every lane free by the round's first arrival), and exact for the same
 * reasons.  The first arrival's test, before the others are known, takes
 * the joins of every member arriving then (every time in the sweep only
 * grows with the arrivals) and lets a link booked this way pass; the last
 * test, with the true joins, fails only where other traffic came meanwhile
 * or a booked chunk joins after the round's.
 *
 * Rounds that share links.  The rounds of one group's collectives that are
 * parked at once (a sharded backward starts a layer's gradient
 * reduce-scatter and the next layer's weight gather together, over the same
 * links) cannot be swept one after the other: their chunks interleave on
 * the links.  A round whose members have all arrived waits (collective.c's
 * fast_decide_at) until the first of its members could end, in case the
 * group's other rounds arrive by then; those that have are timed together
 * by the joint run, as the events would, member step by member step in
 * time order (the step's arrivals in the order they were scheduled, the
 * members' arrivals in the order they came), on one-hop routes whose
 * messages ps_network_send_link books whole; it is kept like the sweeps,
 * for the party's shapes, relative arrivals and links' free times, and
 * booked under the same test.
 * Invariant: an analysis is valid for the routes version it was made with;
 * a memo entry is the sweep of exactly its relative arrival times, and a
 * round booked from it changes each link as fastpath.c's sweep (and so the
 * events) would. */
#include "collectives/collective-private.h"

#include <string.h>

/* Sweeps kept per shape: a request's groups nearly all arrive alike. */
#define MEMO_SIZE 4

typedef struct {
  PsLinkKind kind;           /* PS_LINK_ICI or PS_LINK_ON_CHIP */
  int off[PS_MAX_DIMS];      /* the chip it leaves, from member 0's */
  int a, b;                  /* ICI: dimension and direction; on-chip: from and to core */
} Slot;

/* One sweep: arrive == NULL while the entry is empty. */
typedef struct {
  ps_time_t *arrive;         /* per member, relative to the first arrival */
  ps_time_t *prior;          /* per slot: when its lane frees before the round (>= 0) */
  ps_time_t *end;            /* per member, relative to the first arrival */
  ps_time_t *join, *last;    /* per slot: when the round's first and last chunks join it */
  ps_time_t *free;           /* per slot: when its lane frees after the round */
  uint64_t used;             /* the clock when last used */
} Memo;

/* A joint run of a party (see below), kept on its first round's shape:
 * the party's shapes, arrival times and order relative to the earliest,
 * and what the run gave, relative to the same: member ends, and per link
 * of the party (numbered as first met, round by round, slot by slot) the
 * round and slot it was first met as, its first join, lane free time and
 * totals. */
#define JOINT_MAX 4
#define JOINT_SLOT_BITS 20
#define JOINT_MEMO 8
typedef struct {
  int k, n_all, n_local, n_slots;
  PsCollFastShape *shape[JOINT_MAX];
  ps_time_t *arrive, *end;   /* n_all: the rounds' members one after another */
  uint64_t *ticket;
  ps_time_t *prior;          /* n_slots: the rounds' slots' lane free times before */
  int *rep;                  /* per link: round << JOINT_SLOT_BITS | slot */
  ps_time_t *join, *last, *free, *busy;
  int64_t *bytes, *chunks;
  uint64_t messages, used;
} JointMemo;

struct PsCollFastShape {
  const PsCollGroup *g;      /* the shape's first group: slots are its links */
  const PsCollAlgo *algo;
  const PsCollPlan *plan;
  PsCollParams p;
  int64_t chunk;
  uint64_t version;          /* ps_network_routes_version of the analysis */
  gboolean ok;
  int max_steps;
  int *n_steps;              /* per member */
  PsCollPeers pr;            /* each member's peers and routes (slot numbers) */
  int n_slots;
  Slot *slots;
  int *base;                 /* per slot: the first group's link */
  ps_time_t *latency;        /* per slot */
  int64_t *bytes, *chunks;   /* per slot: the round's, whatever the arrivals */
  ps_time_t *busy;
  uint64_t messages;
  gboolean one_hop;          /* every route is one link */
  Memo idle;                 /* every member arriving at once */
  Memo memo[MEMO_SIZE];
  uint64_t clock;
  Memo *sweeping;            /* the entry a sweep under way fills */
  JointMemo *joint[JOINT_MEMO]; /* joint runs of parties this shape leads */
  ps_time_t *acc, *rel;      /* scratch, per member */
  ps_time_t *prior;          /* scratch, per slot */
  ps_time_t *lane, *booked;  /* scratch, per slot: ps_network_link_state's */
};

static void memo_clear(Memo *mo)
{
  g_free(mo->arrive);
  g_free(mo->end);
  g_free(mo->prior);
  g_free(mo->join);
  g_free(mo->last);
  g_free(mo->free);
  memset(mo, 0, sizeof *mo);
}

static void joint_memo_free(JointMemo *jm)
{
  if (!jm)
    return;
  g_free(jm->arrive);
  g_free(jm->end);
  g_free(jm->ticket);
  g_free(jm->prior);
  g_free(jm->rep);
  g_free(jm->join);
  g_free(jm->last);
  g_free(jm->free);
  g_free(jm->busy);
  g_free(jm->bytes);
  g_free(jm->chunks);
  g_free(jm);
}

static void analysis_clear(PsCollFastShape *s)
{
  for (int i = 0; i < JOINT_MEMO; i++)
    g_clear_pointer(&s->joint[i], joint_memo_free);
  g_clear_pointer(&s->n_steps, g_free);
  ps_coll_peers_clear(&s->pr);
  g_clear_pointer(&s->slots, g_free);
  g_clear_pointer(&s->base, g_free);
  g_clear_pointer(&s->latency, g_free);
  g_clear_pointer(&s->bytes, g_free);
  g_clear_pointer(&s->chunks, g_free);
  g_clear_pointer(&s->busy, g_free);
  memo_clear(&s->idle);
  for (int i = 0; i < MEMO_SIZE; i++)
    memo_clear(&s->memo[i]);
  s->n_slots = 0;
  s->ok = FALSE;
}

/* The chip coordinates of member 0 of g. */
static void origin(const PsCollGroup *g, int c[PS_MAX_DIMS])
{
  const PsGeometry *geo = ps_network_geometry(g->net);
  ps_geometry_chip_coords(geo, ps_geometry_device_chip(geo, g->dev[0]), c);
}

/* A new slot for link (of the first group): FALSE if it cannot be one (a
 * link of several lanes, or of a kind that does not move with the chips). */
static gboolean slot_add(PsCollFastShape *s, GArray *slots, GArray *base, int link,
                         const int c0[PS_MAX_DIMS])
{
  const PsGeometry *geo = ps_network_geometry(s->g->net);
  PsLinkEnds e;
  PsLinkInfo info;
  if (!ps_geometry_link_ends(geo, link, &e) ||
      !ps_network_link_info(s->g->net, link, &info) || info.lanes != 1 ||
      (e.kind != PS_LINK_ICI && e.kind != PS_LINK_ON_CHIP))
    return FALSE;
  Slot sl = {e.kind, {0}, 0, 0};
  int c[PS_MAX_DIMS];
  ps_geometry_chip_coords(geo, e.chip, c);
  for (int d = 0; d < PS_MAX_DIMS; d++)
    sl.off[d] = c[d] - c0[d];
  sl.a = e.kind == PS_LINK_ICI ? e.dim : e.from_core;
  sl.b = e.kind == PS_LINK_ICI ? e.dir : e.to_core;
  g_array_append_val(slots, sl);
  g_array_append_val(base, link);
  return TRUE;
}

/* The per-route bookkeeping of an analysis under way. */
typedef struct {
  GArray *peers, *at, *hops, *routes, *slots, *base;
  GArray *owner;             /* int64_t per slot: the (sender, receiver) pair using it */
  int *slot_of;              /* per link of the network: its slot, or -1 */
  int c0[PS_MAX_DIMS];
} Walk;

/* Records member mi's route to peer (once); NULL if it may be, else why
 * not (static text). */
static const char *route_add(PsCollFastShape *s, Walk *w, int mi, int peer)
{
  for (guint k = (guint)s->pr.peer_at[mi]; k < w->peers->len; k++)
    if (g_array_index(w->peers, int, k) == peer)
      return NULL;
  int h;
  g_autofree int *r = ps_coll_route(s->g, mi, peer, &h);
  int64_t pair = (int64_t)mi * s->g->n + peer;
  int where = (int)w->routes->len;
  for (int i = 0; i < h; i++) {
    int k = w->slot_of[r[i]];
    if (k < 0) {
      if (!slot_add(s, w->slots, w->base, r[i], w->c0))
        return "a link of the round has several lanes or does not move with the chips";
      k = w->slot_of[r[i]] = (int)w->slots->len - 1;
      int64_t none = -1;
      g_array_append_val(w->owner, none);
    }
    int64_t *owner = &g_array_index(w->owner, int64_t, k);
    if (*owner >= 0 && *owner != pair)
      return "two pairs of members share a link";
    *owner = pair;
    g_array_append_val(w->routes, k);
  }
  g_array_append_val(w->peers, peer);
  g_array_append_val(w->at, where);
  g_array_append_val(w->hops, h);
  return NULL;
}

/* Walks every step of every member once: the peers, their routes as
 * slots, or why the sweep cannot stand for the events. */
static const char *walk(PsCollFastShape *s)
{
  const PsCollGroup *g = s->g;
  int nl = ps_network_n_links(g->net);
  Walk w = {g_array_new(FALSE, FALSE, sizeof(int)), g_array_new(FALSE, FALSE, sizeof(int)),
            g_array_new(FALSE, FALSE, sizeof(int)), g_array_new(FALSE, FALSE, sizeof(int)),
            g_array_new(FALSE, FALSE, sizeof(Slot)), g_array_new(FALSE, FALSE, sizeof(int)),
            g_array_new(FALSE, FALSE, sizeof(int64_t)), g_new(int, nl > 0 ? nl : 1), {0}};
  for (int i = 0; i < nl; i++)
    w.slot_of[i] = -1;
  origin(g, w.c0);
  const char *why = NULL;
  if (ps_geometry_slices(ps_network_geometry(g->net)) != 1)
    why = "the group's network has several slices";
  s->n_steps = g_new(int, g->n);
  s->pr.peer_at = g_new(int, g->n + 1);
  for (int m = 0; m < g->n && !why; m++) {
    s->pr.peer_at[m] = (int)w.peers->len;
    s->n_steps[m] = s->algo->n_steps(s->plan, m);
    s->max_steps = MAX(s->max_steps, s->n_steps[m]);
    for (int st = 0; st < s->n_steps[m] && !why; st++) {
      PsCollStep step;
      s->algo->step(s->plan, m, st, &step);
      for (int k = 0; k < step.n_send && !why; k++)
        why = step.send[k].peer_step != st
                  ? "a message is for a later step of its receiver (a pipelined tree)"
                  : route_add(s, &w, m, step.send[k].peer);
    }
  }
  s->pr.peer_at[g->n] = (int)w.peers->len;
  s->n_slots = (int)w.slots->len;
  s->pr.peer = (int *)g_array_free(w.peers, FALSE);
  s->pr.route_at = (int *)g_array_free(w.at, FALSE);
  s->pr.hops = (int *)g_array_free(w.hops, FALSE);
  s->pr.routes = (int *)g_array_free(w.routes, FALSE);
  s->slots = (Slot *)g_array_free(w.slots, FALSE);
  s->base = (int *)g_array_free(w.base, FALSE);
  g_array_free(w.owner, TRUE);
  g_free(w.slot_of);
  return why;
}

/* What a sweep keeps of one link: when its lane frees, the first and
 * last times a chunk joined it, and its bytes, chunks and busy time. */
typedef struct {
  ps_time_t *free, *join, *last;
  int64_t *bytes, *chunks;
  ps_time_t *busy;
} LinkTally;

/* A one-hop message of `bytes` in chunks of `chunk` joining `link` at t,
 * as hw/network.c books it: every chunk joins at t and they leave back to
 * back, so in closed form.  Returns when the lane frees (the last chunk
 * leaves). */
static ps_time_t one_hop(PsNetwork *net, int link, int64_t chunk, int64_t bytes, ps_time_t t,
                         const LinkTally *tl)
{
  int64_t full = bytes / chunk, rest = bytes - full * chunk;
  ps_time_t sum = (full > 0 ? full * ps_network_chunk_time(net, link, chunk) : 0) +
                  ps_network_chunk_time(net, link, rest);
  ps_time_t start = *tl->free > t ? *tl->free : t;
  if (t < *tl->join)
    *tl->join = t;
  *tl->last = MAX(*tl->last, t);
  *tl->free = start + sum;
  *tl->bytes += bytes;
  *tl->chunks += bytes == 0 ? 1 : full + (rest > 0);
  *tl->busy = ps_time_add(*tl->busy, sum);
  return *tl->free;
}

/* A chunk of cb bytes joins slot k at `at`; returns when it reaches the
 * far end (hw/network.c's link_take on one lane). */
static inline ps_time_t take(PsCollFastShape *s, Memo *mo, int k, int64_t cb, ps_time_t at)
{
  PsNetwork *net = s->g->net;
  ps_time_t start = mo->free[k] > at ? mo->free[k] : at;
  ps_time_t ser = ps_network_chunk_time(net, s->base[k], cb);
  if (at < mo->join[k])
    mo->join[k] = at;
  mo->last[k] = MAX(mo->last[k], at);
  mo->free[k] = ps_time_add(start, ser);
  s->bytes[k] += cb;
  s->chunks[k]++;
  s->busy[k] = ps_time_add(s->busy[k], ser);
  return ps_time_add(mo->free[k], s->latency[k]);
}

/* A message of `bytes` down slots r (h of them) sent at t, chunk by chunk
 * as ps_network_book_message; returns when its last chunk arrives.  On one
 * hop the chunks all join at t and leave back to back: in closed form. */
static ps_time_t book(void *ctx, const int *r, int h, int64_t bytes, ps_time_t t)
{
  PsCollFastShape *s = ctx;
  Memo *mo = s->sweeping;
  s->messages++;
  if (h == 0)
    return t;
  int64_t n_chunks = bytes == 0 ? 1 : (bytes + s->chunk - 1) / s->chunk;
  if (h == 1 && bytes > 0) {
    int k = r[0];
    LinkTally tl = {&mo->free[k], &mo->join[k], &mo->last[k], &s->bytes[k], &s->chunks[k],
                    &s->busy[k]};
    return ps_time_add(one_hop(s->g->net, s->base[k], s->chunk, bytes, t, &tl), s->latency[k]);
  }
  ps_time_t last = 0;
  for (int64_t j = 0; j < n_chunks; j++) {
    int64_t left = bytes - j * s->chunk;
    int64_t cb = left < s->chunk ? left : s->chunk;
    ps_time_t at = t;
    for (int i = 0; i < h; i++)
      at = take(s, mo, r[i], cb, at);
    if (at > last)
      last = at;
  }
  return last;
}

/* The sweep of fastpath.c's ps_coll_fast_run on the slots, from idle, for
 * mo->arrive: fills mo's end, join and free, and the per-slot totals. */
static void sweep(PsCollFastShape *s, Memo *mo)
{
  const PsCollGroup *g = s->g;
  for (int k = 0; k < s->n_slots; k++) {
    mo->join[k] = PS_TIME_NEVER;
    mo->last[k] = 0;
    mo->free[k] = mo->prior[k];
    s->bytes[k] = s->chunks[k] = 0;
    s->busy[k] = 0;
  }
  s->messages = 0;
  memcpy(mo->end, mo->arrive, sizeof(ps_time_t) * (size_t)g->n);
  s->sweeping = mo;
  ps_coll_sweep(s->algo, s->plan, g->n, s->n_steps, s->max_steps, &s->pr, s->p.elem_bytes,
                mo->end, s->acc, book, s);
  s->sweeping = NULL;
}

static void memo_alloc(const PsCollFastShape *s, Memo *mo)
{
  mo->arrive = g_new0(ps_time_t, s->g->n);
  mo->end = g_new(ps_time_t, s->g->n);
  mo->prior = g_new0(ps_time_t, s->n_slots);
  mo->join = g_new(ps_time_t, s->n_slots);
  mo->last = g_new(ps_time_t, s->n_slots);
  mo->free = g_new(ps_time_t, s->n_slots);
}

static void analyse(PsCollFastShape *s)
{
  analysis_clear(s);
  s->version = ps_network_routes_version(s->g->net);
  s->max_steps = 0;
  if (walk(s))
    return;
  s->latency = g_new(ps_time_t, s->n_slots);
  for (int k = 0; k < s->n_slots; k++) {
    PsLinkInfo info;
    ps_network_link_info(s->g->net, s->base[k], &info);
    s->latency[k] = info.latency;
  }
  s->bytes = g_new(int64_t, s->n_slots);
  s->chunks = g_new(int64_t, s->n_slots);
  s->busy = g_new(ps_time_t, s->n_slots);
  s->one_hop = TRUE;
  for (int k = 0; k < s->pr.peer_at[s->g->n]; k++)
    s->one_hop &= s->pr.hops[k] == 1;
  g_free(s->prior);
  g_free(s->lane);
  g_free(s->booked);
  s->prior = g_new0(ps_time_t, s->n_slots);
  s->lane = g_new(ps_time_t, s->n_slots);
  s->booked = g_new(ps_time_t, s->n_slots);
  memo_alloc(s, &s->idle);
  sweep(s, &s->idle);
  s->ok = TRUE;
}

PsCollFastShape *ps_coll_fast_shape_new(const PsCollGroup *g, const PsCollAlgo *algo,
                                        const PsCollPlan *plan, const PsCollParams *p)
{
  PsCollFastShape *s = g_new(PsCollFastShape, 1);
  *s = (PsCollFastShape){.g = g, .algo = algo, .plan = plan, .p = *p,
                         .chunk = ps_network_chunk_bytes(g->net), .version = UINT64_MAX};
  s->acc = g_new(ps_time_t, g->n);
  s->rel = g_new(ps_time_t, g->n);
  s->prior = s->lane = s->booked = NULL;
  return s;
}

void ps_coll_fast_shape_free(PsCollFastShape *s)
{
  if (!s)
    return;
  analysis_clear(s);
  g_free(s->acc);
  g_free(s->rel);
  g_free(s->prior);
  g_free(s->lane);
  g_free(s->booked);
  g_free(s);
}

gboolean ps_coll_fast_shape_usable(PsCollFastShape *s)
{
  if (s->version != ps_network_routes_version(s->g->net))
    analyse(s);
  return s->ok;
}

int ps_coll_fast_shape_slots(const PsCollFastShape *s) { return s->n_slots; }

gboolean ps_coll_fast_shape_links(const PsCollFastShape *s, const PsCollGroup *g, int *links)
{
  g_return_val_if_fail(s->ok && g->n == s->g->n, FALSE);
  const PsGeometry *geo = ps_network_geometry(g->net);
  int c0[PS_MAX_DIMS], dims[PS_MAX_DIMS];
  origin(g, c0);
  for (int d = 0; d < PS_MAX_DIMS; d++)
    dims[d] = ps_geometry_axis_extent(geo, 1 + d);
  for (int k = 0; k < s->n_slots; k++) {
    const Slot *sl = &s->slots[k];
    int c[PS_MAX_DIMS];
    for (int d = 0; d < PS_MAX_DIMS; d++) {
      c[d] = (c0[d] + sl->off[d]) % dims[d];
      if (c[d] < 0)
        c[d] += dims[d];
    }
    int chip = ps_geometry_chip_at(geo, c);
    links[k] = sl->kind == PS_LINK_ICI ? ps_geometry_ici_link(geo, chip, sl->a, sl->b)
                                       : ps_geometry_on_chip_link(geo, chip, sl->a, sl->b);
    if (links[k] < 0)
      return FALSE;
  }
  return TRUE;
}

/* Whether the round may join link at t behind what the link carries:
 * nothing in flight is still to join it, and its lane is free by then or
 * all it carries was booked by this path with its last join before t
 * (any time at all when `any`: the first arrival's test, before the
 * round's joins are known). */
static gboolean joinable(PsNetwork *net, int link, ps_time_t t, gboolean any)
{
  ps_time_t free, booked;
  return ps_network_link_state(net, link, &free, &booked) &&
         (free <= t || (booked != PS_TIME_NEVER && (any || booked < t)));
}

gboolean ps_coll_fast_shape_quiet(const PsCollFastShape *s, const int *links, ps_time_t first)
{
  g_return_val_if_fail(s->ok, FALSE);
  for (int k = 0; k < s->n_slots; k++)
    if (!joinable(s->g->net, links[k], ps_time_add(first, s->idle.join[k]), TRUE))
      return FALSE;
  return TRUE;
}

/* The sweep for the arrivals in s->rel: the idle one, a memo entry, or a
 * new sweep in place of the entry least recently used. */
static gboolean memo_is(const PsCollFastShape *s, const Memo *mo)
{
  return mo->arrive && memcmp(mo->arrive, s->rel, sizeof(ps_time_t) * (size_t)s->g->n) == 0 &&
         memcmp(mo->prior, s->prior, sizeof(ps_time_t) * (size_t)s->n_slots) == 0;
}

static Memo *memo_find(PsCollFastShape *s)
{
  size_t size = sizeof(ps_time_t) * (size_t)s->g->n;
  if (memo_is(s, &s->idle))
    return &s->idle;
  Memo *victim = &s->memo[0];
  for (int i = 0; i < MEMO_SIZE; i++) {
    Memo *mo = &s->memo[i];
    if (memo_is(s, mo)) {
      mo->used = ++s->clock;
      return mo;
    }
    if (!mo->arrive || (victim->arrive && mo->used < victim->used))
      victim = mo;
  }
  if (!victim->arrive)
    memo_alloc(s, victim);
  memcpy(victim->arrive, s->rel, size);
  memcpy(victim->prior, s->prior, sizeof(ps_time_t) * (size_t)s->n_slots);
  sweep(s, victim);
  victim->used = ++s->clock;
  return victim;
}

/* The sweep for arrivals t on links as they are now, or NULL if a link
 * has something still to join it. */
static const Memo *sweep_for(PsCollFastShape *s, const int *links, ps_time_t first,
                             const ps_time_t *t)
{
  for (int m = 0; m < s->g->n; m++)
    s->rel[m] = t[m] - first;
  for (int k = 0; k < s->n_slots; k++) {
    if (!ps_network_link_state(s->g->net, links[k], &s->lane[k], &s->booked[k]))
      return NULL;
    s->prior[k] = MAX(s->lane[k] - first, 0);
  }
  return memo_find(s);
}

ps_time_t ps_coll_fast_shape_first_end(PsCollFastShape *s, const int *links, ps_time_t first,
                                       const ps_time_t *t)
{
  g_return_val_if_fail(s->ok && s->version == ps_network_routes_version(s->g->net),
                       PS_TIME_NEVER);
  const Memo *mo = sweep_for(s, links, first, t);
  if (!mo)
    return PS_TIME_NEVER;
  ps_time_t end = PS_TIME_NEVER;
  for (int m = 0; m < s->g->n; m++)
    end = MIN(end, mo->end[m]);
  return ps_time_add(first, end);
}

gboolean ps_coll_fast_shape_run(PsCollFastShape *s, const int *links, ps_time_t first,
                                ps_time_t *t)
{
  g_return_val_if_fail(s->ok && s->version == ps_network_routes_version(s->g->net), FALSE);
  PsNetwork *net = s->g->net;
  const Memo *mo = sweep_for(s, links, first, t);
  if (!mo)
    return FALSE;
  for (int k = 0; k < s->n_slots; k++) {
    ps_time_t at = ps_time_add(first, mo->join[k]);
    if (s->lane[k] > at && (s->booked[k] == PS_TIME_NEVER || s->booked[k] >= at))
      return FALSE; /* joinable(), from what sweep_for read */
  }
  for (int k = 0; k < s->n_slots; k++)
    ps_network_book_link(net, links[k], ps_time_add(first, mo->free[k]), s->bytes[k],
                         s->chunks[k], s->busy[k], ps_time_add(first, mo->last[k]));
  ps_network_count_messages(net, s->messages);
  for (int m = 0; m < s->g->n; m++)
    t[m] = ps_time_add(first, mo->end[m]);
  return TRUE;
}

/* ---- rounds parked together on shared links ------------------------- */

/* A joint run's state: the party's rounds, their links numbered once, and
 * per round and member the step it is at and what it has received. */
typedef struct {
  PsCollJointRound *r;
  int k;
  PsNetwork *net;
  GHashTable *local;         /* real link -> local index + 1 */
  int n_local;
  GArray *link, *rep;        /* int per local link: the real link; round << 20 | slot */
  GArray *free, *join, *ljoin, *busy; /* ps_time_t per local link (ljoin: last join) */
  GArray *bytes, *chunks;    /* int64_t per local link */
  int **slot_local;          /* per round and slot: the local link */
  int **step;                /* per round and member */
  gboolean **waiting;
  int **sent;                /* per round, member x max_steps: messages sent to that step */
  ps_time_t **last;          /* per round, member x max_steps: their latest arrival */
  guint8 **early;            /* per round, member x max_steps: its arrival event has run */
  ps_time_t **end;           /* per round and member */
  PsHeap heap;
  uint64_t seq;
  uint64_t messages;
} Joint;

#define JOINT_START 0
#define JOINT_ARRIVE 1

static int joint_local(Joint *j, int round, int slot)
{
  int link = j->r[round].links[slot];
  int at = GPOINTER_TO_INT(g_hash_table_lookup(j->local, GINT_TO_POINTER(link)));
  if (at > 0)
    return at - 1;
  g_hash_table_insert(j->local, GINT_TO_POINTER(link), GINT_TO_POINTER(j->n_local + 1));
  int rep = round << JOINT_SLOT_BITS | slot;
  ps_time_t never = PS_TIME_NEVER, zero = 0;
  int64_t none = 0;
  g_array_append_val(j->link, link);
  g_array_append_val(j->rep, rep);
  g_array_append_val(j->free, zero);
  g_array_append_val(j->join, never);
  g_array_append_val(j->ljoin, zero);
  g_array_append_val(j->busy, zero);
  g_array_append_val(j->bytes, none);
  g_array_append_val(j->chunks, none);
  return j->n_local++;
}

/* A one-hop message of `bytes` on local link l at t, as
 * ps_network_send_link books it; returns its arrival. */
static ps_time_t joint_send(Joint *j, int l, int64_t chunk, int64_t bytes, ps_time_t t)
{
  int link = g_array_index(j->link, int, l);
  LinkTally tl = {&g_array_index(j->free, ps_time_t, l), &g_array_index(j->join, ps_time_t, l),
                  &g_array_index(j->ljoin, ps_time_t, l), &g_array_index(j->bytes, int64_t, l),
                  &g_array_index(j->chunks, int64_t, l), &g_array_index(j->busy, ps_time_t, l)};
  ps_time_t free = one_hop(j->net, link, chunk, bytes, t, &tl);
  PsLinkInfo info;
  ps_network_link_info(j->net, link, &info);
  j->messages++;
  return free + info.latency;
}

static void joint_push(Joint *j, int kind, int round, int m, int step, ps_time_t t,
                       uint64_t seq)
{
  PsEvent ev = {t, seq, (uint32_t)kind, (uint32_t)m,
                {.u = (uint64_t)round << 32 | (uint32_t)step}};
  ps_heap_push(&j->heap, &ev);
}

/* Member m of round i goes on from its current step at t, as
 * collective.c's member_run: posts each step's sends, goes on while the
 * step's messages have all arrived. */
static void joint_member_run(Joint *j, int i, int m, ps_time_t t)
{
  PsCollFastShape *s = j->r[i].shape;
  int ms = s->max_steps;
  while (j->step[i][m] < s->n_steps[m]) {
    int st = j->step[i][m];
    PsCollStep step;
    s->algo->step(s->plan, m, st, &step);
    for (int k = 0; k < step.n_send; k++) {
      const PsCollSend *snd = &step.send[k];
      int h;
      const int *r = ps_coll_peers_route(&s->pr, m, snd->peer, &h);
      ps_time_t a = joint_send(j, j->slot_local[i][r[0]], s->chunk, snd->len * s->p.elem_bytes, t);
      size_t at = (size_t)snd->peer * (size_t)ms + (size_t)st;
      j->last[i][at] = MAX(j->last[i][at], a);
      if (++j->sent[i][at] == s->algo->n_recv(s->plan, snd->peer, st))
        joint_push(j, JOINT_ARRIVE, i, snd->peer, st, MAX(j->last[i][at], t), j->seq++);
    }
    if (step.n_recv > 0 && !j->early[i][(size_t)m * (size_t)ms + (size_t)st]) {
      j->waiting[i][m] = TRUE;
      return;
    }
    j->step[i][m]++;
  }
  j->end[i][m] = t;
}

static void joint_free(Joint *j)
{
  for (int i = 0; i < j->k; i++) {
    g_free(j->slot_local[i]);
    g_free(j->step[i]);
    g_free(j->waiting[i]);
    g_free(j->sent[i]);
    g_free(j->last[i]);
    g_free(j->early[i]);
    g_free(j->end[i]);
  }
  g_free(j->end);
  g_free(j->slot_local);
  g_free(j->step);
  g_free(j->waiting);
  g_free(j->sent);
  g_free(j->last);
  g_free(j->early);
  g_hash_table_destroy(j->local);
  GArray *arrays[] = {j->link, j->rep,   j->free,  j->join,
                      j->ljoin, j->busy, j->bytes, j->chunks};
  for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
    if (arrays[i])
      g_array_free(arrays[i], TRUE);
  ps_heap_clear(&j->heap);
}

static void joint_init(Joint *j, PsNetwork *net, PsCollJointRound *r, int k)
{
  *j = (Joint){r, k, net, g_hash_table_new(NULL, NULL), 0,
               g_array_new(FALSE, FALSE, sizeof(int)), g_array_new(FALSE, FALSE, sizeof(int)),
               g_array_new(FALSE, FALSE, sizeof(ps_time_t)),
               g_array_new(FALSE, FALSE, sizeof(ps_time_t)),
               g_array_new(FALSE, FALSE, sizeof(ps_time_t)),
               g_array_new(FALSE, FALSE, sizeof(ps_time_t)),
               g_array_new(FALSE, FALSE, sizeof(int64_t)),
               g_array_new(FALSE, FALSE, sizeof(int64_t)), g_new(int *, k), g_new(int *, k),
               g_new(gboolean *, k), g_new(int *, k), g_new(ps_time_t *, k),
               g_new(guint8 *, k), g_new(ps_time_t *, k), {0}, 0, 0};
  ps_heap_init(&j->heap);
  for (int i = 0; i < k; i++) {
    PsCollFastShape *s = r[i].shape;
    size_t cells = (size_t)s->g->n * (size_t)MAX(s->max_steps, 1);
    j->slot_local[i] = g_new(int, MAX(s->n_slots, 1));
    for (int sl = 0; sl < s->n_slots; sl++)
      j->slot_local[i][sl] = joint_local(j, i, sl);
    j->step[i] = g_new0(int, s->g->n);
    j->waiting[i] = g_new0(gboolean, s->g->n);
    j->sent[i] = g_new0(int, cells);
    j->last[i] = g_new0(ps_time_t, cells);
    j->early[i] = g_new0(guint8, cells);
    j->end[i] = g_new(ps_time_t, s->g->n);
    for (int m = 0; m < s->g->n; m++) {
      joint_push(j, JOINT_START, i, m, 0, r[i].t[m], r[i].ticket[m]);
      j->seq = MAX(j->seq, r[i].ticket[m] + 1);
    }
  }
}

/* The events of the party's rounds, in (time, order) as the engine would
 * run them: each member's arrival (in the order they arrived), each
 * step's arrival of its last message (in the order scheduled). */
static void joint_loop(Joint *j)
{
  PsEvent ev;
  while (ps_heap_pop(&j->heap, &ev)) {
    int i = (int)(ev.arg.u >> 32), st = (int)(uint32_t)ev.arg.u, m = (int)ev.target;
    if (ev.type == JOINT_START) {
      joint_member_run(j, i, m, ev.time);
      continue;
    }
    PsCollFastShape *s = j->r[i].shape;
    j->early[i][(size_t)m * (size_t)s->max_steps + (size_t)st] = 1;
    if (j->waiting[i][m] && j->step[i][m] == st) {
      j->waiting[i][m] = FALSE;
      j->step[i][m]++;
      joint_member_run(j, i, m, ev.time);
    }
  }
}

/* The party's key: arrivals, their order and the links' lane free times,
 * relative to the earliest arrival; FALSE if a link has something still
 * to join it. */
typedef struct {
  int n_all, n_slots;
  ps_time_t base;
  ps_time_t *arrive, *prior;
  uint64_t *ticket;
} JointKey;

static gboolean joint_key(PsNetwork *net, const PsCollJointRound *r, int k, JointKey *key)
{
  key->base = PS_TIME_NEVER;
  uint64_t tbase = UINT64_MAX;
  for (int i = 0; i < k; i++)
    for (int m = 0; m < r[i].shape->g->n; m++) {
      key->base = MIN(key->base, r[i].t[m]);
      tbase = MIN(tbase, r[i].ticket[m]);
    }
  for (int i = 0, at = 0; i < k; i++)
    for (int m = 0; m < r[i].shape->g->n; m++, at++) {
      key->arrive[at] = r[i].t[m] - key->base;
      key->ticket[at] = r[i].ticket[m] - tbase;
    }
  for (int i = 0, at = 0; i < k; i++)
    for (int sl = 0; sl < r[i].shape->n_slots; sl++, at++) {
      ps_time_t free, booked;
      if (!ps_network_link_state(net, r[i].links[sl], &free, &booked))
        return FALSE;
      key->prior[at] = MAX(free - key->base, 0);
    }
  return TRUE;
}

static JointMemo *joint_find(PsCollFastShape *lead, const PsCollJointRound *r, int k,
                             const JointKey *key)
{
  for (int e = 0; e < JOINT_MEMO; e++) {
    JointMemo *jm = lead->joint[e];
    gboolean same = jm && jm->k == k && jm->n_all == key->n_all && jm->n_slots == key->n_slots;
    for (int i = 0; same && i < k; i++)
      same = jm->shape[i] == r[i].shape;
    if (same && memcmp(jm->arrive, key->arrive, sizeof(ps_time_t) * (size_t)key->n_all) == 0 &&
        memcmp(jm->ticket, key->ticket, sizeof(uint64_t) * (size_t)key->n_all) == 0 &&
        memcmp(jm->prior, key->prior, sizeof(ps_time_t) * (size_t)key->n_slots) == 0) {
      jm->used = ++lead->clock;
      return jm;
    }
  }
  return NULL;
}

static ps_time_t *rel_times(GArray *a, ps_time_t base)
{
  ps_time_t *out = (ps_time_t *)(void *)a->data;
  for (guint l = 0; l < a->len; l++)
    out[l] -= base;
  return (ps_time_t *)g_array_free(a, FALSE);
}

/* The run of the party, as a new memo entry (in place of the least
 * recently used). */
static JointMemo *joint_make(PsNetwork *net, PsCollJointRound *r, int k, const JointKey *key)
{
  Joint j;
  joint_init(&j, net, r, k);
  for (int i = 0, at = 0; i < k; i++)
    for (int sl = 0; sl < r[i].shape->n_slots; sl++, at++)
      g_array_index(j.free, ps_time_t, j.slot_local[i][sl]) = key->base + key->prior[at];
  joint_loop(&j);
  JointMemo *jm = g_new0(JointMemo, 1);
  *jm = (JointMemo){k, key->n_all, j.n_local, key->n_slots, {NULL},
                    g_memdup2(key->arrive, sizeof(ps_time_t) * (size_t)key->n_all),
                    g_new(ps_time_t, key->n_all),
                    g_memdup2(key->ticket, sizeof(uint64_t) * (size_t)key->n_all),
                    g_memdup2(key->prior, sizeof(ps_time_t) * (size_t)key->n_slots),
                    (int *)g_array_free(j.rep, FALSE), rel_times(j.join, key->base),
                    rel_times(j.ljoin, key->base), rel_times(j.free, key->base),
                    (ps_time_t *)g_array_free(j.busy, FALSE),
                    (int64_t *)g_array_free(j.bytes, FALSE),
                    (int64_t *)g_array_free(j.chunks, FALSE), j.messages, 0};
  j.rep = j.join = j.ljoin = j.free = j.busy = j.bytes = j.chunks = NULL;
  for (int i = 0, at = 0; i < k; i++) {
    jm->shape[i] = r[i].shape;
    for (int m = 0; m < r[i].shape->g->n; m++, at++)
      jm->end[at] = j.end[i][m] - key->base;
  }
  joint_free(&j);
  PsCollFastShape *lead = r[0].shape;
  int victim = 0;
  for (int e = 0; e < JOINT_MEMO; e++)
    if (!lead->joint[e] ||
        (lead->joint[victim] && lead->joint[e]->used < lead->joint[victim]->used))
      victim = e;
  joint_memo_free(lead->joint[victim]);
  lead->joint[victim] = jm;
  jm->used = ++lead->clock;
  return jm;
}

gboolean ps_coll_fast_joint_run(PsNetwork *net, PsCollJointRound *r, int k)
{
  if (k > JOINT_MAX)
    return FALSE;
  JointKey key = {0, 0, 0, NULL, NULL, NULL};
  for (int i = 0; i < k; i++) {
    if (!r[i].shape->ok || !r[i].shape->one_hop)
      return FALSE;
    key.n_all += r[i].shape->g->n;
    key.n_slots += r[i].shape->n_slots;
  }
  g_autofree ps_time_t *arrive = key.arrive = g_new(ps_time_t, key.n_all);
  g_autofree uint64_t *ticket = key.ticket = g_new(uint64_t, key.n_all);
  g_autofree ps_time_t *prior = key.prior = g_new(ps_time_t, MAX(key.n_slots, 1));
  if (!joint_key(net, r, k, &key))
    return FALSE;
  JointMemo *jm = joint_find(r[0].shape, r, k, &key);
  if (!jm)
    jm = joint_make(net, r, k, &key);
  ps_time_t base = key.base;
  g_autofree int *links = g_new(int, MAX(jm->n_local, 1));
  for (int l = 0; l < jm->n_local; l++) {
    int rep = jm->rep[l];
    links[l] = r[rep >> JOINT_SLOT_BITS].links[rep & ((1 << JOINT_SLOT_BITS) - 1)];
    if (!joinable(net, links[l], base + jm->join[l], FALSE))
      return FALSE;
  }
  for (int l = 0; l < jm->n_local; l++)
    ps_network_book_link(net, links[l], base + jm->free[l], jm->bytes[l], jm->chunks[l],
                         jm->busy[l], base + jm->last[l]);
  ps_network_count_messages(net, jm->messages);
  for (int i = 0, at = 0; i < k; i++)
    for (int m = 0; m < r[i].shape->g->n; m++, at++)
      r[i].t[m] = base + jm->end[at];
  return TRUE;
}

/* ---- the hub of a group's collectives ------------------------------- */

PsCollHub *ps_coll_hub_new(void)
{
  PsCollHub *h = g_new0(PsCollHub, 1);
  h->parked = g_ptr_array_new();
  return h;
}

void ps_coll_hub_unref(gpointer p)
{
  PsCollHub *h = p;
  if (h && --h->refs == 0) {
    g_ptr_array_free(h->parked, TRUE);
    g_free(h);
  }
}

PsCollHub *ps_coll_hub_join(PsCollHub *h)
{
  h->refs++;
  h->collectives++;
  return h;
}

void ps_coll_hub_leave(PsCollHub *h, gpointer collective)
{
  if (!h)
    return;
  g_ptr_array_remove(h->parked, collective);
  h->collectives--;
  ps_coll_hub_unref(h);
}

static void bytes_unref(gpointer b) { g_bytes_unref(b); }

GHashTable *ps_coll_hubs_new(void)
{
  return g_hash_table_new_full(g_bytes_hash, g_bytes_equal, bytes_unref, ps_coll_hub_unref);
}

PsCollHub *ps_coll_hub_for(GHashTable *hubs, const int *dev, int n)
{
  g_autoptr(GBytes) key = g_bytes_new(dev, sizeof(int) * (size_t)n);
  PsCollHub *h = hubs ? g_hash_table_lookup(hubs, key) : NULL;
  if (!h && (h = ps_coll_hub_new()) && hubs) {
    h->refs++; /* the table's */
    g_hash_table_insert(hubs, g_bytes_ref(key), h);
  }
  return ps_coll_hub_join(h);
}

/* ---- the order members end in ---------------------------------------- */

static gint by_end(gconstpointer a, gconstpointer b, gpointer end)
{
  const ps_time_t *t = end;
  int x = *(const int *)a, y = *(const int *)b;
  return t[x] != t[y] ? (t[x] > t[y]) - (t[x] < t[y]) : (x > y) - (x < y);
}

void ps_coll_fast_end_order(ps_time_t *end, int n, ps_time_t now, int *order)
{
  for (int i = 0; i < n; i++) {
    end[i] = MAX(end[i], now); /* (never earlier: sharing links only delays) */
    order[i] = i;
  }
  g_qsort_with_data(order, n, sizeof(int), by_end, (gpointer)end);
}

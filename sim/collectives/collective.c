/* collective.c: the executor that runs any algorithm of the table over the
 * network (see collective.h), plus the group's geometry and "auto".
 *
 * A member walks its steps: it posts the step's sends (each a network
 * message whose context is an Xfer naming receiver, round, step, elements,
 * and, with numerics, a copy of the elements), then waits for the step's
 * receives.  A chunk for the receiver's current (round, step) is applied at
 * once; one for a later step waits in the receiver's `early` list, kept
 * sorted by (round, step) and, within a key, in arrival order, and is
 * applied in arrival order when the receiver gets there (timing only, just
 * a message's last chunk is kept: the others carry nothing to apply).  No
 * chunk can be for an earlier step: a step completes only after every
 * message it expects has arrived whole, so the receiver's current key is
 * never above the list's smallest, and draining takes a prefix.
 * Invariant: member.pending counts the messages of its current step not yet
 * wholly applied; the member advances exactly when it reaches zero. */
#include "collectives/collective-private.h"
#include "model/kernels.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct Xfer Xfer;
struct Xfer {
  PsCollective *c;
  int src;        /* sending member */
  int dst;        /* receiving member */
  int step;       /* receiver's step */
  int64_t round;
  int64_t off, len;
  PsXferOp op;
  float *data;    /* the elements, copied when sent; NULL for timing only */
  Xfer *next_free;
};

typedef struct {
  Xfer *x;
  uint64_t key;   /* early_key(round, step) of the receiver's step */
  int64_t offset, bytes;
  gboolean last;
  int n;          /* x == NULL: timing-only messages that arrived together */
} Early;

/* Timing-only messages sent so far to a member for one (round, step). */
typedef struct {
  uint64_t key;   /* early_key(round, step) */
  int expected;   /* the messages that step waits for */
  int sent;       /* sent so far, by either path */
  int direct;     /* of them, ps_network_send_link's */
  ps_time_t last; /* the latest arrival of the direct ones */
} Inbox;

/* Peers whose link a member remembers: a member of a 3-D torus
 * all-reduce sends to six. */
#define PEER_MEMO 6
/* Inbox entries kept in the member itself, one cache line; more go to
 * its `more` array, which is empty while either slot is free. */
#define INBOX_SLOTS 2
#define INBOX_FREE UINT64_MAX

/* A member, laid out for the messages of a large group (thousands of
 * members, each touched at random), one cache line each: what its own
 * arrivals and steps read first, with the links to its peers; the rest of
 * what its steps read; the inbox its senders write; the rest. */
typedef struct {
  _Alignas(64) int64_t round; /* -1 before the first arrival */
  float *buf;
  int step;
  int pending;
  guint early_head, early_len;
  guint8 active;
  guint8 n_peers;
  /* per place in a step's sends, the peer memo entry that place sent to
   * last (steps of a phase send to the same peers in the same order) */
  guint8 hint[PEER_MEMO];
  /* the one-hop link to each of the first peers sent to (-1: not one hop),
   * in the first line: an arrival ahead fetches them (arrive_prefetch) */
  int peer_link[PEER_MEMO];
  /* second line */
  int peer[PEER_MEMO];
  int n_steps;
  guint early_cap;
  Early *early;      /* [early_head, early_len): sorted by key, then arrival */
  uint64_t peers_version; /* ps_network_routes_version when they were found */
  Inbox *more;       /* inbox entries past the slots */
  guint more_len, more_cap;
  /* third line: steps some but not all of whose messages were sent (key
   * INBOX_FREE: none) */
  Inbox slot[INBOX_SLOTS];
  /* cold */
  PsCollDoneFn done;
  void *ctx;
  int64_t finished;
} Member;
G_STATIC_ASSERT(offsetof(Member, peer) == 64 && offsetof(Member, slot) == 128 &&
                offsetof(Member, done) == 192 && sizeof(Member) == 256);

struct PsCollective {
  PsNetwork *net;
  PsEngine *engine;
  PsCollGroup g;
  PsCollParams p;
  PsCollShared *sh;     /* the plan, perhaps shared with translated groups */
  const PsCollAlgo *algo; /* sh's, for short */
  PsCollPlan *plan;
  char *why;
  Member *members;      /* NULL while at rest (see members_get) */
  gboolean own_devices; /* the group's devices are sh's group's (sh->links) */
  int64_t rest_round, rest_finished; /* every member's, while at rest */
  int64_t busy;         /* active members, early and inbox entries, events to run */
  Xfer *free_xfers;
  GPtrArray *all_xfers; /* every Xfer ever allocated, freed with the collective */
  int64_t live_xfers;
  uint32_t ev_done;
  uint32_t ev_arrive;   /* a timing-only message of one hop has arrived */
  PsCollMessageFn msg_fn; /* ps_collective_set_message_observer */
  void *msg_ctx;
  /* the fast path (fastpath.c; see fast_park) */
  gboolean fast_on;
  PsCollFast *fast;       /* NULL until first tried */
  uint32_t ev_fast_done;
  int64_t fast_round;     /* the last round decided, -1 before */
  int fast_arrived;       /* members arrived for it */
  gboolean fast_pending;  /* its members are parked, waiting for the last */
  int64_t events_round;   /* rounds up to this one run as events */
  ps_time_t fast_first;   /* the first arrival of the parked round */
  ps_time_t *arrival;     /* per member: arrival of the parked round, then its end */
  gboolean fast_shared;   /* the round tried takes its shape's sweep (fastshared.c) */
  int *fast_links;        /* the parked round's links, one per slot of the shape */
  uint64_t *ticket;       /* per member: its arrival's place in the hub's order */
  int *done_order;        /* the members of the round booked last, by end then index */
  PsCollHub *hub;         /* the group's parked rounds (see fast_decide) */
  uint32_t ev_fast_decide;
  uint64_t fast_rounds;   /* rounds run by the fast path */
};

/* ---- names ---------------------------------------------------------- */

static const char *const op_names[PS_COLL_N_OPS] = {"allreduce", "reducescatter", "allgather",
                                                    "broadcast", "sendrecv"};

const char *ps_coll_op_name(PsCollOp op)
{
  g_return_val_if_fail(op < PS_COLL_N_OPS, "?");
  return op_names[op];
}

gboolean ps_coll_op_parse(const char *name, PsCollOp *out)
{
  for (int i = 0; i < PS_COLL_N_OPS; i++)
    if (strcmp(name, op_names[i]) == 0) {
      *out = (PsCollOp)i;
      return TRUE;
    }
  return FALSE;
}

/* ---- transfers ------------------------------------------------------ */

static Xfer *xfer_new(PsCollective *c)
{
  Xfer *x = c->free_xfers;
  if (x)
    c->free_xfers = x->next_free;
  else {
    x = g_new0(Xfer, 1);
    if (!c->all_xfers)
      c->all_xfers = g_ptr_array_new();
    g_ptr_array_add(c->all_xfers, x);
  }
  c->live_xfers++;
  return x;
}

/* Every Xfer ever allocated, live or not (a run stopped early leaves some
 * in flight). */
static void xfers_free_all(PsCollective *c)
{
  if (!c->all_xfers)
    return;
  for (guint i = 0; i < c->all_xfers->len; i++) {
    Xfer *x = g_ptr_array_index(c->all_xfers, i);
    g_free(x->data);
    g_free(x);
  }
  g_ptr_array_free(c->all_xfers, TRUE);
  c->all_xfers = NULL;
  c->free_xfers = NULL;
  c->live_xfers = 0;
}

static void xfer_free(PsCollective *c, Xfer *x)
{
  g_free(x->data);
  x->data = NULL;
  x->next_free = c->free_xfers;
  c->free_xfers = x;
  c->live_xfers--;
}

/* Applies the elements whose last byte is in [offset, offset + bytes) of
 * the message (an element takes elem_bytes on the wire).  A bf16 wire
 * (elem_bytes 2) rounds every sum it writes to bf16, as a bf16 reduction
 * on the TPU does; its copies carry values that are bf16 already. */
static void apply_chunk(PsCollective *c, Member *m, const Xfer *x, int64_t offset, int64_t bytes)
{
  if (!x->data)
    return;
  g_assert(m->buf != NULL);
  int eb = c->p.elem_bytes;
  int64_t e0 = offset / eb, e1 = (offset + bytes) / eb;
  float *dst = m->buf + x->off;
  const float *src = x->data;
  if (x->op == PS_XFER_ADD && eb == 2) {
    for (int64_t e = e0; e < e1; e++)
      dst[e] = ps_bf16_round(dst[e] + src[e]);
  } else if (x->op == PS_XFER_ADD) {
    for (int64_t e = e0; e < e1; e++)
      dst[e] += src[e];
  } else {
    memcpy(dst + e0, src + e0, (size_t)(e1 - e0) * sizeof(float));
  }
}

static void member_run(PsCollective *c, int mi);
static void on_deliver(void *ctx, const PsNetDelivery *d);

static inline uint64_t early_key(int64_t round, int step)
{
  return ((uint64_t)round << 32) | (uint32_t)step;
}

/* An arrival event's argument: early_key, with the number of messages it
 * stands for in bits 32..39 (the round then fits in the 24 bits above). */
#define INBOX_COUNT_SHIFT 32
#define INBOX_MAX_ROUND (INT64_C(1) << 24)

/* Timing only, the arrivals of a step's messages matter together: the
 * step can go on once the last has arrived.  So messages of one hop
 * (ps_network_send_link, whose arrival time is known when sent) are
 * counted in the receiver's inbox for that (round, step), and one event at
 * the latest of their arrivals stands for all of them, scheduled when the
 * step's last message is sent.  Messages sent the general way are counted
 * too (so the step's count completes) and arrive by themselves. */
static Inbox *inbox_for(PsCollective *c, int peer, int64_t round, int step)
{
  Member *r = &c->members[peer];
  uint64_t key = ((uint64_t)round << 32) | (uint32_t)step;
  Inbox *in = NULL;
  for (int i = 0; i < INBOX_SLOTS; i++) {
    if (r->slot[i].key == key)
      return &r->slot[i];
    if (!in && r->slot[i].key == INBOX_FREE)
      in = &r->slot[i];
  }
  if (!in) {
    for (guint i = 0; i < r->more_len; i++)
      if (r->more[i].key == key)
        return &r->more[i];
    if (r->more_len == r->more_cap) {
      r->more_cap = r->more_cap ? 2 * r->more_cap : 4;
      r->more = g_renew(Inbox, r->more, r->more_cap);
    }
    in = &r->more[r->more_len++];
  }
  *in = (Inbox){key, c->algo->n_recv(c->plan, peer, step), 0, 0, 0};
  c->busy++;
  return in;
}

/* The inbox entry is complete: its arrival event (if any direct message
 * went), and the entry goes (a slot takes the last of `more`, if any). */
static void inbox_close(PsCollective *c, int peer, Inbox *in)
{
  Member *r = &c->members[peer];
  /* when the step's last message went the general way, its direct ones
   * may have arrived already: they count from now (the step still waits
   * for that last message) */
  ps_time_t now = ps_engine_now(c->engine);
  if (in->direct > 0) {
    c->busy++;
    ps_engine_at(c->engine, MAX(in->last, now), c->ev_arrive, (uint32_t)peer,
                 (in->key >> 32) << (INBOX_COUNT_SHIFT + 8) |
                     (uint64_t)in->direct << INBOX_COUNT_SHIFT | (uint32_t)in->key);
  }
  c->busy--;
  if (r->more_len > 0)
    *in = r->more[--r->more_len];
  else
    in->key = INBOX_FREE;
}

/* The one-hop link from member mi to member peer (-1: not one hop),
 * remembered per peer, for the send in place k of its step; m's memo is
 * current (peers_fresh). */
static int peer_link(PsCollective *c, Member *m, int mi, int peer, int k)
{
  if (k < PEER_MEMO) {
    int h = m->hint[k]; /* past n_peers, peer is -1 (members_get, peers_fresh) */
    if (m->peer[h] == peer)
      return m->peer_link[h];
  }
  for (int i = 0; i < m->n_peers; i++)
    if (m->peer[i] == peer) {
      if (k < PEER_MEMO)
        m->hint[k] = (guint8)i;
      return m->peer_link[i];
    }
  int link = ps_network_direct_link(c->net, c->g.dev[mi], c->g.dev[peer]);
  if (m->n_peers < PEER_MEMO) {
    if (k < PEER_MEMO)
      m->hint[k] = m->n_peers;
    m->peer[m->n_peers] = peer;
    m->peer_link[m->n_peers++] = link;
  }
  return link;
}

/* Forgets m's links if the routes may have changed since they were found. */
static inline void peers_fresh(PsCollective *c, Member *m)
{
  uint64_t version = ps_network_routes_version(c->net);
  if (m->peers_version != version) {
    m->n_peers = 0;
    for (int i = 0; i < PEER_MEMO; i++)
      m->peer[i] = -1;
    m->peers_version = version;
  }
}

/* A send names another member and elements of the buffer (0 <= peer <
 * n, 0 <= off, 0 <= len, off + len <= count), in unsigned compares. */
static inline void send_check(const PsCollective *c, int mi, const PsCollSend *s)
{
  g_assert((unsigned)s->peer < (unsigned)c->g.n && s->peer != mi);
  g_assert((uint64_t)s->off <= (uint64_t)c->p.count &&
           (uint64_t)s->len <= (uint64_t)(c->p.count - s->off));
}

/* A message of its own, delivered by the network to on_deliver. */
static void post_xfer(PsCollective *c, int mi, const PsCollSend *s)
{
  Member *m = &c->members[mi];
  Xfer *x = xfer_new(c);
  x->c = c;
  x->src = mi;
  x->dst = s->peer;
  x->round = m->round;
  x->step = s->peer_step;
  x->off = s->off;
  x->len = s->len;
  x->op = s->op;
  x->data = m->buf ? g_memdup2(m->buf + s->off, (size_t)s->len * sizeof(float)) : NULL;
  if (!c->msg_fn) {
    /* timing only, a message's chunks apply nothing: only its arrival counts */
    (x->data ? ps_network_send : ps_network_send_whole)(
        c->net, c->g.dev[mi], c->g.dev[s->peer], s->len * c->p.elem_bytes, on_deliver, x);
    return;
  }
  /* the flow's start first: a traced network draws the first chunk at once */
  uint64_t id = ps_network_next_message_id(c->net);
  c->msg_fn(c->msg_ctx, PS_COLL_MSG_SENT, mi, s->peer, m->round, id,
            ps_engine_now(c->engine));
  uint64_t sent = ps_network_send_chained(c->net, c->g.dev[mi], c->g.dev[s->peer],
                                          s->len * c->p.elem_bytes, on_deliver, x);
  g_assert(sent == id);
}

/* Posts a step's sends, timing only (no buffer, no observer): each is
 * counted in its receiver's inbox, and goes by ps_network_send_link when
 * its route is one hop, else the general way. */
static void post_direct(PsCollective *c, int mi, const PsCollStep *st)
{
  Member *m = &c->members[mi];
  peers_fresh(c, m);
  for (int k = 0; k < st->n_send; k++) {
    const PsCollSend *s = &st->send[k];
    send_check(c, mi, s);
    Inbox *in = inbox_for(c, s->peer, m->round, s->peer_step);
    in->sent++;
    int link = peer_link(c, m, mi, s->peer, k);
    ps_time_t t = link < 0 ? PS_TIME_NEVER
                           : ps_network_send_link(c->net, link, s->len * c->p.elem_bytes);
    if (t != PS_TIME_NEVER) {
      in->direct++;
      in->last = MAX(in->last, t); /* unpredictable: a select, not a branch */
    }
    if (in->sent == in->expected)
      inbox_close(c, s->peer, in);
    if (t == PS_TIME_NEVER)
      post_xfer(c, mi, s);
  }
}

void ps_collective_set_message_observer(PsCollective *c, PsCollMessageFn fn, void *ctx)
{
  g_return_if_fail(c != NULL);
  c->msg_fn = fn;
  c->msg_ctx = ctx;
}

/* Inserts e after every entry whose key is not above its own: arrivals
 * nearly always come in key order, so this is an append. */
static void early_insert(PsCollective *c, Member *m, const Early *e)
{
  c->busy++;
  if (m->early_head == m->early_len)
    m->early_head = m->early_len = 0;
  if (m->early_len == m->early_cap) {
    if (m->early_head > 0) {
      memmove(m->early, m->early + m->early_head,
              (m->early_len - m->early_head) * sizeof(Early));
      m->early_len -= m->early_head;
      m->early_head = 0;
    } else {
      m->early_cap = m->early_cap ? 2 * m->early_cap : 8;
      m->early = g_renew(Early, m->early, m->early_cap);
    }
  }
  guint i = m->early_len;
  while (i > m->early_head && m->early[i - 1].key > e->key)
    i--;
  memmove(m->early + i + 1, m->early + i, (m->early_len - i) * sizeof(Early));
  m->early[i] = *e;
  m->early_len++;
}

/* Timing-only messages of one hop (post_send's inbox) have arrived. */
static void on_arrive(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsCollective *c = ctx;
  Member *m = &c->members[ev->target];
  c->busy--;
  int n = (int)((ev->arg.u >> INBOX_COUNT_SHIFT) & 0xff);
  uint64_t key = early_key((int64_t)(ev->arg.u >> (INBOX_COUNT_SHIFT + 8)),
                           (int)(uint32_t)ev->arg.u);
  if (m->active && early_key(m->round, m->step) == key) {
    m->pending -= n;
    g_assert(m->pending >= 0);
    if (m->pending == 0) {
      m->step++;
      member_run(c, (int)ev->target);
    }
    return;
  }
  g_assert(key > early_key(m->round, m->step) || !m->active);
  Early e = {NULL, key, 0, 0, TRUE, n};
  early_insert(c, m, &e);
}

/* The engine's hint for an arrival ahead (engine.h): the member's first
 * two lines and what its step reads of the plan, then the links its next
 * step's sends will take (as remembered from its last steps; fetching the
 * peers' inboxes as well measured no faster). */
static void arrive_prefetch(const PsEvent *ev, int stage, void *ctx)
{
  const PsCollective *c = ctx;
  const Member *m = &c->members[ev->target];
  if (stage == 0) {
    __builtin_prefetch(m);
    __builtin_prefetch((const char *)m + 64);
    if (c->algo->prefetch)
      c->algo->prefetch(c->plan, (int)ev->target);
    return;
  }
  /* from the first line alone: links of an older routes version are only
   * fetched in vain */
  ps_network_prefetch_links(c->net, m->peer_link, m->n_peers);
}

static void on_deliver(void *ctx, const PsNetDelivery *d)
{
  Xfer *x = ctx;
  PsCollective *c = x->c;
  Member *m = &c->members[x->dst];
  if (d->last && c->msg_fn)
    c->msg_fn(c->msg_ctx, PS_COLL_MSG_ARRIVED, x->src, x->dst, x->round, d->message,
              ps_engine_now(c->engine));
  if (m->active && m->round == x->round && m->step == x->step) {
    apply_chunk(c, m, x, d->offset, d->bytes);
    if (d->last) {
      xfer_free(c, x);
      if (--m->pending == 0) {
        m->step++;
        member_run(c, (int)(m - c->members));
      }
    }
    return;
  }
  /* for a step the receiver has not reached */
  g_assert(x->round > m->round || (m->active && x->round == m->round && x->step > m->step));
  if (!x->data && !d->last)
    return;
  Early e = {x, early_key(x->round, x->step), d->offset, d->bytes, d->last, 0};
  early_insert(c, m, &e);
}

/* Applies what arrived early for the member's current step: the list's
 * prefix with its key. */
static void drain_early(PsCollective *c, Member *m)
{
  uint64_t key = early_key(m->round, m->step);
  while (m->early_head < m->early_len && m->early[m->early_head].key == key) {
    Early *e = &m->early[m->early_head++];
    c->busy--;
    if (!e->x) { /* timing-only messages (on_arrive) */
      m->pending -= e->n;
      continue;
    }
    apply_chunk(c, m, e->x, e->offset, e->bytes);
    if (e->last) {
      xfer_free(c, e->x);
      m->pending--;
    }
  }
  g_assert(m->early_head == m->early_len || m->early[m->early_head].key > key);
}

static void member_run(PsCollective *c, int mi)
{
  Member *m = &c->members[mi];
  while (m->step < m->n_steps) {
    PsCollStep st;
    c->algo->step(c->plan, mi, m->step, &st);
    if (!m->buf && m->round < INBOX_MAX_ROUND && !c->msg_fn) {
      post_direct(c, mi, &st);
    } else {
      for (int k = 0; k < st.n_send; k++) {
        send_check(c, mi, &st.send[k]);
        post_xfer(c, mi, &st.send[k]);
      }
    }
    m->pending = st.n_recv;
    drain_early(c, m);
    g_assert(m->pending >= 0);
    if (m->pending > 0)
      return;
    m->step++;
  }
  m->active = FALSE; /* busy: one active member less, one event more */
  m->finished++;
  ps_engine_at(c->engine, ps_engine_now(c->engine), c->ev_done, (uint32_t)mi,
               (uint64_t)m->round);
}

/* The members' state between rounds is two counts, so a collective at
 * rest (no member in a round, nothing in flight, no event to run) keeps
 * only those: a pod of thousands of devices has millions of memberships,
 * of which a few hundred collectives' are running at any time. */
/* The members' peer links kept between rounds (PsCollShared.links):
 * found once for the devices, not once per round (each a look-up in the
 * network's route cache, a few cache misses).  Per member, its peer and
 * peer_link arrays; members_get loads them. */
#define MEMO_INTS (2 * PEER_MEMO)

static void memo_save(PsCollective *c)
{
  uint64_t version = ps_network_routes_version(c->net);
  if (!c->own_devices || (c->sh->links && c->sh->links_version == version))
    return;
  if (!c->sh->links)
    c->sh->links = g_new(int, (size_t)c->g.n * MEMO_INTS);
  c->sh->links_version = version;
  for (int i = 0; i < c->g.n; i++) {
    const Member *m = &c->members[i];
    int *e = &c->sh->links[(size_t)i * MEMO_INTS];
    for (int k = 0; k < PEER_MEMO; k++) {
      gboolean ok = m->peers_version == version && k < m->n_peers;
      e[k] = ok ? m->peer[k] : -1;
      e[PEER_MEMO + k] = ok ? m->peer_link[k] : -1;
    }
  }
}

static Member *members_get(PsCollective *c)
{
  if (c->members)
    return c->members;
  c->members = g_aligned_alloc0((gsize)c->g.n, sizeof(Member), 64);
  uint64_t version = ps_network_routes_version(c->net);
  const int *memo = c->own_devices && c->sh->links && c->sh->links_version == version
                        ? c->sh->links
                        : NULL;
  for (int i = 0; i < c->g.n; i++) {
    Member *m = &c->members[i];
    m->round = c->rest_round;
    m->finished = c->rest_finished;
    m->n_steps = c->algo->n_steps(c->plan, i);
    m->step = c->rest_round < 0 ? 0 : m->n_steps;
    for (int k = 0; k < INBOX_SLOTS; k++)
      m->slot[k].key = INBOX_FREE;
    for (int k = 0; k < PEER_MEMO; k++) {
      m->peer[k] = memo ? memo[(size_t)i * MEMO_INTS + k] : -1;
      m->peer_link[k] = memo ? memo[(size_t)i * MEMO_INTS + PEER_MEMO + k] : -1;
      m->n_peers += m->peer[k] >= 0; /* a prefix */
    }
    m->peers_version = memo ? version : 0;
  }
  return c->members;
}

static void members_free(PsCollective *c)
{
  for (int i = 0; i < c->g.n; i++) {
    g_free(c->members[i].early);
    g_free(c->members[i].more);
  }
  g_aligned_free(c->members);
  c->members = NULL;
}

/* Puts the collective at rest if nothing is left of its rounds and every
 * member has run as many. */
static void members_rest(PsCollective *c)
{
  if (!c->members || c->busy > 0 || c->live_xfers > 0 || c->fast_pending)
    return;
  const Member *m0 = &c->members[0];
  for (int i = 1; i < c->g.n; i++)
    if (c->members[i].round != m0->round || c->members[i].finished != m0->finished)
      return;
  c->rest_round = m0->round;
  c->rest_finished = m0->finished;
  memo_save(c);
  members_free(c);
  xfers_free_all(c);
}

static void on_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsCollective *c = ctx;
  Member *m = &c->members[ev->target];
  c->busy--;
  if (m->done)
    m->done(m->ctx, (int)ev->target, ps_engine_now(engine));
  members_rest(c);
}

/* ---- the fast path --------------------------------------------------- */

/* A member of a round the fast path ran ends now. */
/* Members done_order[target .. arg) of a round the fast path ran end now,
 * in member order, as one event each scheduled in that order would. */
static void on_fast_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsCollective *c = ctx;
  c->busy--; /* the event */
  for (uint32_t i = ev->target; i < (uint32_t)ev->arg.u; i++) {
    int mi = c->done_order[i];
    Member *m = &c->members[mi];
    m->step = m->n_steps;
    m->active = FALSE;
    m->finished++;
    c->busy--;
    if (m->done)
      m->done(m->ctx, mi, ps_engine_now(engine));
  }
  members_rest(c);
}

/* Whether the group's rounds take its shape's sweep (fastshared.c): the
 * shape's links move onto the group's (a translation-symmetric network, or
 * the shape's first group itself) and the sweep stands for the events. */
static gboolean fast_shape_fits(PsCollective *c)
{
  PsCollShared *sh = c->sh;
  if (!sh->fast)
    sh->fast = ps_coll_fast_shape_new(&sh->g, c->algo, c->plan, &c->p);
  return ps_coll_fast_shape_usable(sh->fast) &&
         (ps_network_translation_symmetric(c->net) ||
          memcmp(c->g.dev, sh->g.dev, sizeof(int) * (size_t)c->g.n) == 0);
}

/* Whether round r may be tried on the fast path: timing only, no observer
 * or trace that wants every message, the round after one whose members
 * have all arrived, a sweep that can time it (the shape's, else its own). */
static gboolean fast_may_try(PsCollective *c, const Member *m)
{
  if (!c->fast_on || m->buf || c->msg_fn || ps_network_is_traced(c->net) ||
      m->round <= c->events_round || (c->fast_round >= 0 && c->fast_arrived < c->g.n))
    return FALSE;
  if (!c->arrival) {
    c->arrival = g_new(ps_time_t, c->g.n);
    c->ticket = g_new(uint64_t, c->g.n);
    c->done_order = g_new(int, c->g.n);
  }
  c->fast_shared = fast_shape_fits(c);
  if (c->fast_shared)
    return TRUE;
  if (!c->fast)
    c->fast = ps_coll_fast_new(&c->g, c->algo, c->plan, &c->p);
  return ps_coll_fast_usable(c->fast, NULL);
}

/* The first arrival's test (fastshared.c's or fastpath.c's). */
static gboolean fast_quiet_first(PsCollective *c, ps_time_t now)
{
  if (!c->fast_shared)
    return ps_coll_fast_quiet(c->fast, now);
  PsCollFastShape *s = c->sh->fast;
  c->fast_links = g_new(int, MAX(ps_coll_fast_shape_slots(s), 1));
  if (ps_coll_fast_shape_links(s, &c->g, c->fast_links) &&
      ps_coll_fast_shape_quiet(s, c->fast_links, now))
    return TRUE;
  g_clear_pointer(&c->fast_links, g_free);
  return FALSE;
}

/* The last arrival's test and, if it passes, the round booked, with each
 * member's end in c->arrival. */
static gboolean fast_book(PsCollective *c)
{
  if (c->fast_shared) {
    gboolean ok =
        ps_coll_fast_shape_run(c->sh->fast, c->fast_links, c->fast_first, c->arrival);
    g_clear_pointer(&c->fast_links, g_free);
    return ok;
  }
  if (!ps_coll_fast_quiet(c->fast, c->fast_first))
    return FALSE;
  ps_coll_fast_run(c->fast, c->arrival);
  return TRUE;
}

/* The parked round is booked (an event per member ends it) or run as
 * events from now (its links were used meanwhile). */
static void fast_finish(PsCollective *c, gboolean booked)
{
  c->fast_pending = FALSE;
  g_clear_pointer(&c->fast_links, g_free);
  g_ptr_array_remove(c->hub->parked, c);
  if (!booked) {
    for (int i = 0; i < c->g.n; i++)
      member_run(c, i);
    return;
  }
  c->fast_rounds++;
  /* an event per end time, for its members in member order */
  ps_coll_fast_end_order(c->arrival, c->g.n, ps_engine_now(c->engine), c->done_order);
  for (int i = 0, j; i < c->g.n; i = j) {
    for (j = i + 1; j < c->g.n && c->arrival[c->done_order[j]] == c->arrival[c->done_order[i]];)
      j++;
    c->busy++;
    ps_engine_at(c->engine, c->arrival[c->done_order[i]], c->ev_fast_done, (uint32_t)i,
                 (uint64_t)j);
  }
}

/* The last member of a parked round arrived while other rounds of the
 * group were parked: at the end of that moment, the rounds of the group
 * whose members have all arrived are timed together (fastshared.c's joint
 * run), or each alone if that cannot be. */
static void on_fast_decide(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsCollective *c = ctx;
  if (!c->fast_pending || (int64_t)ev->arg.u != c->fast_round)
    return;
  GPtrArray *party = g_ptr_array_new();
  for (guint i = 0; i < c->hub->parked->len; i++) {
    PsCollective *o = g_ptr_array_index(c->hub->parked, i);
    if (o->fast_arrived == o->g.n)
      g_ptr_array_add(party, o);
  }
  PsCollJointRound *r = g_new(PsCollJointRound, party->len);
  for (guint i = 0; i < party->len; i++) {
    PsCollective *o = g_ptr_array_index(party, i);
    r[i] = (PsCollJointRound){o->sh->fast, o->fast_links, o->arrival, o->ticket};
  }
  if (party->len > 1 && ps_coll_fast_joint_run(c->net, r, (int)party->len)) {
    for (guint i = 0; i < party->len; i++)
      fast_finish(g_ptr_array_index(party, i), TRUE);
  } else {
    for (guint i = 0; i < party->len; i++)
      fast_finish(g_ptr_array_index(party, i), fast_book(g_ptr_array_index(party, i)));
  }
  g_free(r);
  g_ptr_array_free(party, TRUE);
}

/* When to decide a round whose last member has arrived: now if other
 * rounds of the group are parked and have all arrived too, or if the
 * group has no other collective; else when the first of its members could
 * end, in case other rounds of the group come by then (they would share
 * its links). */
static ps_time_t fast_decide_at(PsCollective *c, ps_time_t now)
{
  gboolean waiting = FALSE, ready = FALSE;
  for (guint i = 0; i < c->hub->parked->len; i++) {
    const PsCollective *o = g_ptr_array_index(c->hub->parked, i);
    waiting |= o->fast_arrived < o->g.n;
    ready |= o != c && o->fast_arrived == o->g.n;
  }
  if (c->hub->collectives < 2 || (ready && !waiting))
    return now;
  ps_time_t t =
      ps_coll_fast_shape_first_end(c->sh->fast, c->fast_links, c->fast_first, c->arrival);
  return t == PS_TIME_NEVER ? now : MAX(now, t);
}

/* Member mi has arrived.  If the round's links pass the first arrival's
 * test, its members are parked (nothing sent) until the last arrives and
 * the round is decided (fast_decide_at): booked by a sweep, alone or with
 * the group's other parked rounds, or run as events from then if its links
 * were used meanwhile.  TRUE when the member is parked or done with. */
static gboolean fast_park(PsCollective *c, int mi)
{
  Member *m = &c->members[mi];
  ps_time_t now = ps_engine_now(c->engine);
  if (m->round == c->fast_round) {
    c->fast_arrived++;
    if (!c->fast_pending)
      return FALSE;
  } else if (!fast_may_try(c, m)) {
    c->events_round = MAX(c->events_round, m->round);
    return FALSE;
  } else {
    c->fast_round = m->round;
    c->fast_arrived = 1;
    c->fast_pending = fast_quiet_first(c, now);
    if (!c->fast_pending)
      return FALSE;
    c->fast_first = now;
    if (c->fast_shared)
      g_ptr_array_add(c->hub->parked, c);
  }
  c->arrival[mi] = now;
  c->ticket[mi] = c->hub->tickets++;
  if (c->fast_arrived < c->g.n)
    return TRUE;
  if (c->fast_shared)
    ps_engine_at(c->engine, fast_decide_at(c, now), c->ev_fast_decide, 0,
                 (uint64_t)c->fast_round);
  else
    fast_finish(c, fast_book(c));
  return TRUE;
}

void ps_collective_set_fast_path(PsCollective *c, gboolean on)
{
  g_return_if_fail(c != NULL);
  c->fast_on = on;
  if (on)
    ps_network_count_pending(c->net);
}

uint64_t ps_collective_fast_rounds(const PsCollective *c) { return c->fast_rounds; }

/* ---- construction and "auto" ---------------------------------------- */

static char *format_s(double s)
{
  if (s >= 1)
    return g_strdup_printf("%.3f s", s);
  if (s >= 1e-3)
    return g_strdup_printf("%.3f ms", s * 1e3);
  return g_strdup_printf("%.3f us", s * 1e6);
}

/* "auto": predicts every algorithm of the table that can run op on the
 * group and keeps the fastest (the first of equals), with its plan and the
 * reason. */
static void pick_fastest(PsCollective *c, PsCollOp op)
{
  GString *others = g_string_new(NULL);
  double best = 0;
  for (int i = 0; ps_coll_algos[i]; i++) {
    const PsCollAlgo *a = ps_coll_algos[i];
    if (a->explicit_only || a->unsupported(&c->sh->g, op))
      continue;
    PsCollPlan *plan = a->plan_new(&c->sh->g, &c->p);
    double t = a->predict_s(plan);
    g_autofree char *ts = format_s(t);
    g_string_append_printf(others, "%s%s %s", others->len ? ", " : "", a->name, ts);
    if (!c->algo || t < best) {
      if (c->plan)
        c->algo->plan_free(c->plan);
      c->algo = a;
      c->plan = plan;
      best = t;
    } else {
      a->plan_free(plan);
    }
  }
  g_assert(c->algo != NULL);
  c->why = g_strdup_printf("auto picked %s: fastest closed-form prediction (%s)",
                           c->algo->name, others->str);
  g_string_free(others, TRUE);
}

PsCollective *ps_collective_new(PsNetwork *net, const PsCollSpec *spec, GError **error)
{
  return ps_collective_new_cached(net, spec, NULL, error);
}

/* The plan of a group no equal shape has made yet: the algorithm named,
 * or the one an earlier collective of the same members picked, or "auto"'s
 * pick; on c->sh's group. */
static gboolean choose_plan(PsCollective *c, const PsCollSpec *spec, const PsCollAlgo *chosen,
                            const char *name, PsCollCache *cache, GError **error)
{
  const PsCollChoice *hit = NULL;
  if (chosen) {
    const char *why = chosen->unsupported(&c->sh->g, spec->op);
    if (why) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "algorithm '%s' cannot run %s on this group: %s", name,
                  ps_coll_op_name(spec->op), why);
      return FALSE;
    }
    c->algo = chosen;
    c->plan = chosen->plan_new(&c->sh->g, &c->p);
    c->why = g_strdup(chosen->summary);
  } else if ((hit = ps_coll_cache_find(cache, spec, c->p.chunk_bytes))) {
    /* the same group, operation and size as an earlier collective: the
     * same plan, without choosing it again */
    c->algo = hit->algo;
    c->p.variant = hit->variant;
    c->plan = hit->algo->plan_new(&c->sh->g, &c->p);
    c->p.variant = 0;
    c->why = g_strdup(hit->why);
  } else {
    pick_fastest(c, spec->op);
    if (cache)
      ps_coll_cache_add(cache, spec, c->p.chunk_bytes, c->algo,
                        c->algo->variant ? c->algo->variant(c->plan) : 0, c->why);
  }
  c->sh->algo = c->algo;
  c->sh->plan = c->plan;
  c->sh->why = c->why;
  return TRUE;
}

/* c's plan: a translated group's (same shape) when the cache has one on a
 * translation-symmetric network, else its own, which the cache then
 * offers to the groups of its shape. */
static gboolean attach_plan(PsCollective *c, const PsCollSpec *spec, const PsCollAlgo *chosen,
                            const char *name, PsCollCache *cache, GError **error)
{
  PsCollShape *shape = NULL;
  PsCollShared *sh = NULL;
  if (cache && ps_network_translation_symmetric(c->net)) {
    shape = ps_coll_shape_new(&c->g, spec, c->p.chunk_bytes);
    sh = g_hash_table_lookup(cache->shapes, shape);
  }
  if (sh) {
    ps_coll_shape_free(shape);
    c->sh = ps_coll_shared_ref(sh);
    c->own_devices = memcmp(c->g.dev, sh->g.dev, sizeof(int) * (size_t)c->g.n) == 0;
    g_free(c->g.grid_pos);
    g_free(c->g.at);
    c->g.grid_pos = sh->g.grid_pos;
    c->g.at = sh->g.at;
    c->g.grid_borrowed = TRUE;
    c->algo = sh->algo;
    c->plan = sh->plan;
    c->why = sh->why;
    return TRUE;
  }
  c->sh = ps_coll_shared_new(&c->g);
  c->own_devices = TRUE;
  if (!choose_plan(c, spec, chosen, name, cache, error)) {
    ps_coll_shape_free(shape);
    return FALSE;
  }
  if (shape)
    g_hash_table_insert(cache->shapes, shape, ps_coll_shared_ref(c->sh));
  return TRUE;
}

PsCollective *ps_collective_new_cached(PsNetwork *net, const PsCollSpec *spec,
                                       PsCollCache *cache, GError **error)
{
  g_return_val_if_fail(net != NULL && spec != NULL, NULL);
  if (spec->op >= PS_COLL_N_OPS) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "unknown collective operation %d",
                (int)spec->op);
    return NULL;
  }
  if (spec->count < 0 || spec->elem_bytes < 1) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "a collective needs count >= 0 and elem_bytes >= 1, got %" G_GINT64_FORMAT
                " and %d",
                spec->count, spec->elem_bytes);
    return NULL;
  }
  const char *name = spec->algo ? spec->algo : "auto";
  const PsCollAlgo *chosen = ps_coll_algo_find(name);
  if (!chosen && strcmp(name, "auto") != 0) {
    g_auto(GStrv) names = ps_coll_algo_names();
    g_autofree char *list = g_strjoinv(", ", names);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "unknown collective algorithm '%s'; choose one of %s", name, list);
    return NULL;
  }
  PsCollective *c = g_new0(PsCollective, 1);
  c->net = net;
  c->engine = ps_network_engine(net);
  if (!ps_coll_group_init(&c->g, net, spec->devices, spec->n_members, error))
    goto fail;
  if ((spec->op == PS_COLL_BROADCAST || spec->op == PS_COLL_SEND_RECV) &&
      (spec->root < 0 || spec->root >= spec->n_members)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "the root is member %d, but the group has members 0..%d", spec->root,
                spec->n_members - 1);
    goto fail;
  }
  if (spec->op == PS_COLL_SEND_RECV && spec->n_members != 2) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "send-recv needs a group of exactly two members (sender and receiver), got %d",
                spec->n_members);
    goto fail;
  }
  c->p = (PsCollParams){spec->op, spec->count, spec->elem_bytes, spec->root,
                        ps_network_chunk_bytes(net), 0};
  if (!attach_plan(c, spec, chosen, name, cache, error))
    goto fail;
  c->rest_round = -1;
  c->ev_done = ps_engine_register(c->engine, "collective-done", on_done, c);
  c->ev_arrive = ps_engine_register(c->engine, "collective-arrive", on_arrive, c);
  ps_engine_set_prefetch(c->engine, c->ev_arrive, arrive_prefetch);
  c->ev_fast_done = ps_engine_register(c->engine, "collective-fast-done", on_fast_done, c);
  c->ev_fast_decide = ps_engine_register(c->engine, "collective-fast-decide", on_fast_decide, c);
  c->hub = ps_coll_hub_for(cache ? cache->hubs : NULL, c->g.dev, c->g.n);
  c->fast_on = FALSE;
  c->fast_round = -1;
  c->events_round = -1;
  return c;
fail:
  ps_coll_shared_unref(c->sh);
  ps_coll_group_clear(&c->g);
  g_free(c);
  return NULL;
}

void ps_collective_free(PsCollective *c)
{
  if (!c)
    return;
  /* messages still in flight (a run stopped early) hold live Xfers too */
  if (c->members)
    members_free(c);
  xfers_free_all(c);
  ps_coll_fast_free(c->fast);
  g_free(c->arrival);
  g_free(c->fast_links);
  g_free(c->ticket);
  g_free(c->done_order);
  ps_coll_hub_leave(c->hub, c);
  ps_coll_shared_unref(c->sh);
  ps_coll_group_clear(&c->g);
  g_free(c);
}

/* ---- queries and arrival -------------------------------------------- */

const char *ps_collective_algo(const PsCollective *c) { return c->algo->name; }
const char *ps_collective_why(const PsCollective *c) { return c->why; }
double ps_collective_predict_s(const PsCollective *c) { return c->algo->predict_s(c->plan); }
int ps_collective_members(const PsCollective *c) { return c->g.n; }

void ps_collective_block(const PsCollective *c, int member, int64_t *off, int64_t *len)
{
  ps_collective_block_piece(c, member, 0, off, len);
}

int ps_collective_block_piece(const PsCollective *c, int member, int piece, int64_t *off,
                              int64_t *len)
{
  g_return_val_if_fail(member >= 0 && member < c->g.n && piece >= 0, 0);
  return c->algo->block(c->plan, member, piece, off, len);
}

int64_t ps_collective_rounds_done(const PsCollective *c)
{
  if (!c->members)
    return c->rest_finished;
  int64_t r = INT64_MAX;
  for (int i = 0; i < c->g.n; i++)
    r = MIN(r, c->members[i].finished);
  return r;
}

void ps_collective_arrive(PsCollective *c, int member, float *buf, PsCollDoneFn done, void *ctx)
{
  g_return_if_fail(c != NULL && member >= 0 && member < c->g.n);
  Member *m = &members_get(c)[member];
  g_assert(!m->active);
  g_assert(buf == NULL || c->p.elem_bytes == 4 || c->p.elem_bytes == 2);
  /* a bf16 wire: the member's contribution is rounded before it is sent */
  if (buf && c->p.elem_bytes == 2)
    ps_bf16_round_array(buf, buf, (size_t)c->p.count);
  m->round++;
  m->step = 0;
  m->active = TRUE;
  c->busy++;
  m->buf = buf;
  m->done = done;
  m->ctx = ctx;
  if (fast_park(c, member))
    return;
  member_run(c, member);
}

/* What ps_collective_run_round waits for. */
typedef struct {
  ps_time_t last;
  int done;
} RoundEnd;

static void on_round_member(void *ctx, int member, ps_time_t t)
{
  RoundEnd *f = ctx;
  f->last = MAX(f->last, t);
  f->done++;
}

ps_time_t ps_collective_run_round(PsCollective *c)
{
  g_return_val_if_fail(c != NULL, 0);
  RoundEnd end = {0, 0};
  for (int m = 0; m < c->g.n; m++)
    ps_collective_arrive(c, m, NULL, on_round_member, &end);
  ps_engine_run(c->engine, PS_TIME_NEVER);
  g_assert(end.done == c->g.n);
  return end.last;
}

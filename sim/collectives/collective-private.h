/* collective-private.h: what collective.c (the executor) and algorithms.c
 * (the algorithm table) share: the group's geometry, a step, and the table
 * entry each algorithm fills.
 *
 * Invariant: an algorithm is plain functions of (plan, member, step): it
 * never touches the network or the buffers; the executor alone does. */
#ifndef PS_COLLECTIVE_PRIVATE_H
#define PS_COLLECTIVE_PRIVATE_H

#include "collectives/collective.h"

/* Coordinates a member can vary in: the geometry's axes (hw/topology.h),
 * its core, then the torus dimensions. */
#define PS_COLL_MAX_AXES PS_GEOMETRY_MAX_AXES
/* Messages one step may send: a torus broadcast sends to up to one child
 * per axis in each of its two trees. */
#define PS_COLL_MAX_SENDS (2 * PS_COLL_MAX_AXES)

/* The members and where they sit.  When their (core, x, y, z) coordinates
 * form a box (every combination of the values present, once), the group
 * is a grid: its axes are the coordinates that vary, core first, and
 * grid_pos[m * n_axes + a] is member m's index along axis a (the rank of
 * its coordinate among the values present). */
typedef struct {
  PsNetwork *net;
  int n;
  int *dev;          /* member -> device */
  gboolean is_grid;
  int n_axes;
  int axis_size[PS_COLL_MAX_AXES];
  int axis_coord[PS_COLL_MAX_AXES]; /* the geometry's axis: 0 = core, 1 + d = dimension d */
  int *grid_pos;     /* n * n_axes */
  int *at;           /* grid index (axis 0 fastest) -> member */
  gboolean grid_borrowed; /* grid_pos and at belong to a shared plan's group */
} PsCollGroup;

/* A group of the n devices, or FALSE and a PS_INPUT_ERROR (no member, a
 * device out of range or listed twice); cleared by ps_coll_group_clear
 * (group.c). */
gboolean ps_coll_group_init(PsCollGroup *g, PsNetwork *net, const int *devices, int n,
                            GError **error);
void ps_coll_group_clear(PsCollGroup *g);

typedef enum { PS_XFER_ADD, PS_XFER_COPY } PsXferOp;

/* One message of a step: elements [off, off + len) of the sender's buffer
 * go to the same elements of member `peer`, which adds or copies them
 * during its step `peer_step`. */
typedef struct {
  int peer;
  int peer_step;
  int64_t off, len;
  PsXferOp op;
} PsCollSend;

typedef struct {
  int n_send;
  PsCollSend send[PS_COLL_MAX_SENDS];
  int n_recv;        /* messages this step waits for */
} PsCollStep;

typedef struct PsCollPlan PsCollPlan;

typedef struct {
  PsCollOp op;
  int64_t count;
  int elem_bytes;
  int root;
  int64_t chunk_bytes;
  /* 0: the algorithm chooses among its own plans (hierarchical: how it
   * crosses each slice) by prediction; k + 1: it takes its plan k, as
   * PsCollAlgo.variant said it chose for the same group and parameters */
  int variant;
} PsCollParams;

/* A collective algorithm: a table entry, chosen by name. */
typedef struct {
  const char *name;
  const char *summary;
  /* NULL if it can run op on g, else why not (static text). */
  const char *(*unsupported)(const PsCollGroup *g, PsCollOp op);
  PsCollPlan *(*plan_new)(const PsCollGroup *g, const PsCollParams *p);
  void (*plan_free)(PsCollPlan *plan);
  int (*n_steps)(const PsCollPlan *plan, int member);
  void (*step)(const PsCollPlan *plan, int member, int step, PsCollStep *out);
  /* step()'s n_recv, cheaper */
  int (*n_recv)(const PsCollPlan *plan, int member, int step);
  /* piece `piece` of member's block; returns how many pieces it has (1
   * but for multiring's reduce-scatter and all-gather) */
  int (*block)(const PsCollPlan *plan, int member, int piece, int64_t *off, int64_t *len);
  /* Closed-form time of one round, all members arriving together. */
  double (*predict_s)(const PsCollPlan *plan);
  /* Run only when named, never chosen by "auto". */
  gboolean explicit_only;
  /* The PsCollParams.variant that makes plan_new build this plan again
   * without choosing (the choice is a function of the group and the
   * parameters); NULL when plan_new never chooses. */
  int (*variant)(const PsCollPlan *plan);
  /* A hint, never a change (NULL: none): fetches what step() will read of
   * the plan for member into the cache (called a few events ahead). */
  void (*prefetch)(const PsCollPlan *plan, int member);
} PsCollAlgo;

/* The table (NULL-terminated) and lookup by name. */
extern const PsCollAlgo *const ps_coll_algos[];
const PsCollAlgo *ps_coll_algo_find(const char *name);

/* Time of one message of `bytes` from member a to member b with the
 * network idle: the same store-and-forward pipeline the events run. */
double ps_coll_message_s(const PsCollGroup *g, int a, int b, int64_t bytes, int64_t chunk);
/* The same over a route already found (h links). */
double ps_coll_route_message_s(const PsCollGroup *g, const int *route, int h, int64_t bytes,
                               int64_t chunk);
/* The links from member a to member b, *hops of them.  (transfer full) */
int *ps_coll_route(const PsCollGroup *g, int a, int b, int *hops);
/* The routes of every member m to peer[m] at once: route[m] (hops[m]
 * links) point into the block returned, which the caller frees. */
int *ps_coll_routes(const PsCollGroup *g, const int *peer, const int **route, int *hops);

/* Part j of L of [lo, lo + len). */
static inline void ps_coll_part_of(int64_t lo, int64_t len, int L, int j, int64_t *plo,
                                   int64_t *plen)
{
  int64_t a = len * j / L, b = len * (j + 1) / L;
  *plo = lo + a;
  *plen = b - a;
}

/* The lines of a grid group along its axis a: each member's position on
 * its line and the members one position after and before it (mod L), in
 * arrays of g->n. */
void ps_coll_grid_line(const PsCollGroup *g, int a, int *pos, int *next, int *prev);
/* The line through the grid's first k axes (lines.c): the snake, or the
 * grid's Hamiltonian cycle where that crosses fewer links (a mesh).  Grid
 * indices (axis 0 fastest); returns how many.  (transfer full) *out */
int ps_coll_line_order(const PsCollGroup *g, int k, int **out);
/* The group's members in ring order: the line through the whole grid,
 * else as the caller listed them.  (transfer full) */
int *ps_coll_ring_order(const PsCollGroup *g);
/* Whether a line closes in no more hops than it steps (judged on member
 * 0's line): a ring over a wrapped torus dimension does, a mesh line's
 * closing edge runs back across it. */
gboolean ps_coll_line_closes(const PsCollGroup *g, int L, const int *pos, const int *next);
/* Why a torus algorithm cannot run on a group that spans slices (static
 * text), or NULL when it lies within one slice. */
const char *ps_coll_spans_slices(const PsCollGroup *g);

/* The fast path (fastpath.c): a round timed by a sweep over its steps,
 * with no event, exactly as the events would time it when nothing else
 * uses its links.  ps_coll_fast_usable: whether the sweep can stand for the
 * events on this group (analysed once per routes version; *why_not, static
 * text, says why not).  ps_coll_fast_quiet: every link the round uses is
 * quiet from `since` on (hw/network.h).  ps_coll_fast_run: books the round
 * on the network with member m arriving at t[m], and leaves in t[m] the
 * time member m ends. */
/* The peers each member sends to in a round and the routes to them, as
 * the fast path's sweeps keep them: member m's are [peer_at[m],
 * peer_at[m + 1]) of peer, route_at and hops, route k being hops[k]
 * entries of routes from route_at[k] (link ids, or fastshared.c's slots). */
typedef struct {
  int *peer_at, *peer, *route_at, *hops, *routes;
} PsCollPeers;

static inline void ps_coll_peers_clear(PsCollPeers *p)
{
  g_clear_pointer(&p->peer_at, g_free);
  g_clear_pointer(&p->peer, g_free);
  g_clear_pointer(&p->route_at, g_free);
  g_clear_pointer(&p->hops, g_free);
  g_clear_pointer(&p->routes, g_free);
}

/* Member m's route to peer (one it sends to), *h entries. */
static inline const int *ps_coll_peers_route(const PsCollPeers *p, int m, int peer, int *h)
{
  for (int k = p->peer_at[m]; k < p->peer_at[m + 1]; k++)
    if (p->peer[k] == peer) {
      *h = p->hops[k];
      return p->routes + p->route_at[k];
    }
  g_assert_not_reached();
  return NULL;
}

/* The sweep both fast paths run (fastpath.c): every step of every member
 * in step order, member m's step s starting when its step s - 1 ended (at
 * t[m] for s = 0), its sends booked by book(ctx, route, hops, bytes, at)
 * (which returns the message's arrival), the step ending when it started
 * and every message it receives has arrived; leaves in t[m] the time
 * member m ends.  acc is scratch of n. */
typedef ps_time_t (*PsCollBookFn)(void *ctx, const int *route, int hops, int64_t bytes,
                                  ps_time_t at);
void ps_coll_sweep(const PsCollAlgo *algo, const PsCollPlan *plan, int n, const int *n_steps,
                   int max_steps, const PsCollPeers *pr, int elem_bytes, ps_time_t *t,
                   ps_time_t *acc, PsCollBookFn book, void *ctx);

typedef struct PsCollFast PsCollFast;
PsCollFast *ps_coll_fast_new(const PsCollGroup *g, const PsCollAlgo *algo,
                             const PsCollPlan *plan, const PsCollParams *p);
void ps_coll_fast_free(PsCollFast *f);
gboolean ps_coll_fast_usable(PsCollFast *f, const char **why_not);
gboolean ps_coll_fast_quiet(const PsCollFast *f, ps_time_t since);
void ps_coll_fast_run(PsCollFast *f, ps_time_t *t);

/* The fast path shared by the groups of one shape (fastshared.c): the
 * sweep made once on the first group's links as slots, which every group
 * of the shape moves onto its own, and kept for the members' arrival times
 * relative to the first.  ps_coll_fast_shape_usable: whether the sweep
 * stands for the events (analysed once per routes version; FALSE where
 * fastpath.c's sweep cannot, or a link has several lanes or is not ICI or
 * on-chip, or the network has several slices).  ps_coll_fast_shape_links:
 * group g's link for each of the ps_coll_fast_shape_slots slots (g of the
 * shape, on a translation-symmetric network or g the first group itself),
 * FALSE if one has none.  ps_coll_fast_shape_quiet: the first arrival's
 * test, at `first`.  ps_coll_fast_shape_run: with member m arriving at
 * t[m] (first the earliest), TRUE and the round booked on links, t[m] then
 * its end; FALSE, nothing booked, when a link is not free by the time the
 * round's first chunk joins it or something is still to join it. */
typedef struct PsCollFastShape PsCollFastShape;
PsCollFastShape *ps_coll_fast_shape_new(const PsCollGroup *g, const PsCollAlgo *algo,
                                        const PsCollPlan *plan, const PsCollParams *p);
void ps_coll_fast_shape_free(PsCollFastShape *s);
gboolean ps_coll_fast_shape_usable(PsCollFastShape *s);
int ps_coll_fast_shape_slots(const PsCollFastShape *s);
gboolean ps_coll_fast_shape_links(const PsCollFastShape *s, const PsCollGroup *g, int *links);
gboolean ps_coll_fast_shape_quiet(const PsCollFastShape *s, const int *links, ps_time_t first);
gboolean ps_coll_fast_shape_run(PsCollFastShape *s, const int *links, ps_time_t first,
                                ps_time_t *t);
/* The earliest any member would end were the round booked now alone
 * (sharing its links never makes a member end sooner), PS_TIME_NEVER if a
 * link has something still to join it. */
ps_time_t ps_coll_fast_shape_first_end(PsCollFastShape *s, const int *links, ps_time_t first,
                                       const ps_time_t *t);

/* Rounds parked at once on links they share (fastshared.c): each round's
 * shape (usable), its links (ps_coll_fast_shape_links), its members'
 * arrival times (in) and end times (out), and each arrival's place in the
 * order they came (distinct across the party; ties in time go by it).
 * ps_coll_fast_joint_run runs the party's steps as the events would, one
 * message of one hop at a time in time order, on the links as they are
 * idle; TRUE and every round booked when each link was free by the time
 * the party's first chunk joined it and nothing is still to join it,
 * FALSE (nothing booked) otherwise or when a route is longer than a hop. */
typedef struct {
  PsCollFastShape *shape;
  const int *links;
  ps_time_t *t;
  const uint64_t *ticket;
} PsCollJointRound;
gboolean ps_coll_fast_joint_run(PsNetwork *net, PsCollJointRound *r, int k);

/* The collectives of one group (the same devices, in the same order):
 * their rounds parked on the fast path's shape sweep, which share links,
 * so that rounds whose last members arrive at the same moment are timed
 * together (collective.c's on_fast_decide); and the count of arrivals,
 * for their order. */
typedef struct PsCollHub {
  int refs;
  int collectives;        /* of the group */
  GPtrArray *parked;      /* PsCollective * */
  uint64_t tickets;
} PsCollHub;
/* A hub with no reference and no collective; a collective joins it
 * (adding one of each) and leaves it (dropping both, and its parked round;
 * the hub is freed with its last reference). */
PsCollHub *ps_coll_hub_new(void);
void ps_coll_hub_unref(gpointer hub);
PsCollHub *ps_coll_hub_join(PsCollHub *hub);
void ps_coll_hub_leave(PsCollHub *hub, gpointer collective);
/* A table of hubs by their devices (ps_coll_hub_for's), and the hub of
 * the group dev[0..n) in it (made if missing; hubs NULL: a hub of its
 * own), joined. */
GHashTable *ps_coll_hubs_new(void);
PsCollHub *ps_coll_hub_for(GHashTable *hubs, const int *dev, int n);
/* Members 0..n-1 into order, by end time (raised to now if earlier),
 * then index. */
void ps_coll_fast_end_order(ps_time_t *end, int n, ps_time_t now, int *order);

/* Plans shared between groups that are translations of each other
 * (shape.c).  A shape is the key: the spec, the chunk, the members' cores
 * and chip coordinates relative to member 0's, and the parity of member
 * 0's; on a translation-symmetric network (hw/network.h) groups of equal
 * shape get equal plans.  A shared plan holds its own copy of the group it
 * was made on (the plan points to it) and is freed with its last
 * reference. */
typedef struct PsCollShape PsCollShape;
PsCollShape *ps_coll_shape_new(const PsCollGroup *g, const PsCollSpec *spec, int64_t chunk);
void ps_coll_shape_free(gpointer shape);
guint ps_coll_shape_hash(gconstpointer shape);
gboolean ps_coll_shape_equal(gconstpointer a, gconstpointer b);

typedef struct {
  int refs;
  PsCollFastShape *fast;   /* the fast path's sweep, NULL until a round tries it */
  PsCollGroup g;           /* the first group's (devices copied, grid tables owned) */
  const PsCollAlgo *algo;
  PsCollPlan *plan;        /* made on g */
  char *why;
  /* collective.c's: the one-hop links its members of g's own devices
   * found, kept between their rounds (NULL until a round of them ended) */
  int *links;
  uint64_t links_version;  /* ps_network_routes_version they hold for */
} PsCollShared;
/* A shared plan for group g, with no algorithm yet: takes g's grid tables,
 * which g then borrows. */
PsCollShared *ps_coll_shared_new(PsCollGroup *g);
PsCollShared *ps_coll_shared_ref(PsCollShared *sh);
void ps_coll_shared_unref(gpointer sh);

/* The cache (cache.c): "auto"'s choice for a spec, the shared plans by
 * shape, the hubs by devices. */
struct PsCollCache {
  GHashTable *entries; /* CacheEntry -> itself, hashed on the spec and members */
  GHashTable *shapes;  /* PsCollShape -> PsCollShared (a reference) */
  GHashTable *hubs;    /* GBytes of the devices -> PsCollHub (a reference) */
};
typedef struct {
  const PsCollAlgo *algo;
  int variant;    /* of algo's plan (PsCollParams.variant), 0 if none */
  const char *why;
} PsCollChoice;
/* The choice made for spec and chunk before, or NULL (cache may be NULL).
 * (transfer none) */
const PsCollChoice *ps_coll_cache_find(const PsCollCache *cache, const PsCollSpec *spec,
                                       int64_t chunk);
/* Records the choice for spec and chunk (why copied). */
void ps_coll_cache_add(PsCollCache *cache, const PsCollSpec *spec, int64_t chunk,
                       const PsCollAlgo *algo, int variant, const char *why);

/* The all-reduce over every link of a torus at once (multiring.c). */
extern const PsCollAlgo ps_coll_multiring_algo;
/* Recursive doubling, for small all-reduces (butterfly.c). */
extern const PsCollAlgo ps_coll_butterfly_algo;
/* Across slices: an in-slice algorithm, then a ring over the DCN
 * (hierarchical.c). */
extern const PsCollAlgo ps_coll_hierarchical_algo;

#endif

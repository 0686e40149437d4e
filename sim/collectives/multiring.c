/* multiring.c: "multiring", the all-reduce, reduce-scatter and all-gather
 * that drive every link of a torus at once, and their closed form; a table
 * entry beside algorithms.c's.
 *
 * The torus algorithm reduces one dimension at a time, so a chip of a 3-D
 * torus drives 2 of its 6 links.  Here the data is split into K = 2 n
 * streams, n the number of the group's ring dimensions (below), in shares
 * as long as the ring each starts on (stream_weight): stream k
 * walks the ring dimensions in the rotation starting with dimension
 * k mod n, going to the next member on each ring for k < n and to the
 * previous one for k >= n.  Its reduce-scatter runs phase i along
 * dimension (k + i) mod n (the classic ring of algorithms.c, L-1 steps,
 * each member then keeps part pos of its region), then its all-gather
 * runs the phases back.  At every phase each dimension is walked by two
 * streams, one each way, so every link of every chip carries one stream
 * (the scaling book's "over n axes at once, divide by n").  Phases last
 * max L - 1 steps; a shorter ring cuts each step's part into
 * floor((max L - 1) / (L - 1)) pieces sent one a step (ring_subs), so its
 * links idle only for the rest of that division, and no link carries two
 * streams (but on a dimension of two members, whose one link each way
 * both streams cross, and which sends whole parts).
 *
 * Dimensions.  The group's grid axes (collective-private.h) are sorted:
 *   ring dimensions: torus axes whose line closes in as few hops as it
 *       steps (wrap-around; on a subset of a dimension, every step and the
 *       closing edge alike), and axes of two members (one neighbour both
 *       ways);
 *   outer axes: the core axis of a chip with several devices (v2, v3), and
 *       torus lines without wrap-around (or whose wrap lands shifted, a
 *       twisted torus's short dimensions).  Each runs as one unidirectional
 *       ring phase over a member's whole region, before the streams (core
 *       first, so that the ICI links carry each chip's data once) and after
 *       them for the gather, as the torus algorithm does.  On chips of
 *       two devices, core 0 then runs the n streams going + and core 1 the
 *       n going - over its half, so the cores never share an ICI link
 *       direction.
 * A group with fewer than two ring dimensions is unsupported: over one,
 * the two streams are the torus algorithm's bidirectional ring, and auto
 * should not pick between equals on rounding.
 *
 * Reduce-scatter runs the all-reduce's reduce-scatter steps and all-gather
 * its gather steps, so a member's block is one piece per stream: 2 n
 * pieces (n on two-device chips), ps_collective_block_piece.
 *
 * Steps of a member's all-reduce: the outer reduce-scatter phases, n
 * stream phases of max L - 1 steps each (one message, a part or a piece of
 * one, per active stream and step, so up to 2 n sends and receives), the
 * n gather phases, the outer gather phases.
 *
 * Closed form (predict): the alpha-beta critical path of those steps.  A
 * message of m bytes over h uncontended hops costs h alpha + m/B +
 * (h-1) c/B (network.h), counted as large as all the messages of a step
 * that share its busiest link (both streams of a dimension of two
 * members); member r ends step s when it has ended step s-1 and each message
 * it receives in step s, sent when its sender ended step s-1, has arrived.
 * Every step of a phase is timed with the phase's largest part, so the
 * events never run past the prediction; a phase whose members start
 * together and whose streams take the same time on every member (a
 * uniform torus) costs one pass over the members, not one per step.
 * On an X^n torus with wrap-around, one device per chip, an all-reduce of
 * S bytes costs
 *   2 sum_{i=1..n} (X - 1)(alpha + S / (2 n X^i B)),
 * a bandwidth term of S (1 - 1/X^n) / (n B): the torus algorithm's divided
 * by n, for as many latency terms as torus's where the dimensions are
 * equal.  So "auto" takes it for large collectives on any torus whose
 * dimensions close (on a cube for all sizes; on 4x4x8, whose phases last
 * 7 steps each, torus keeps the smallest).
 *
 * Invariant: in every stream phase step, the parts a line's members send
 * for one stream are a permutation of that stream's parts on the line, so
 * each part is reduced exactly once per member and then copied, never
 * added, in the gather; every member ends bit-identical. */
#include "collectives/collective-private.h"

#include <math.h>
#include <string.h>

typedef struct {
  int L;
  int sub; /* a ring dimension's sub-steps per ring step (layout) */
  int *pos, *next, *prev; /* member -> ..., as ps_coll_grid_line */
} Line;

/* A region [lo, lo + len) that will be cut into L parts, len = q L + r
 * (L = 1 for a stream's last region), so that part j, [lo + q j +
 * floor(r j / L), ...), needs no division: inv = ceil(2^64 / L) gives
 * floor(x / L) as the high 64 bits of inv x for every 32-bit x (Lemire,
 * Kaser and Kurz, "Faster remainder by direct computation", Software:
 * Practice and Experience 49(6), 2019, theorem 1). */
typedef struct {
  int64_t lo, q;
  int32_t r, L;
  uint64_t inv;
} Region;

/* A member's place on the line of one ring dimension. */
typedef struct {
  int pos, next, prev;
} Place;

/* What a member's steps read of it: its outer region's index (its
 * positions on the outer axes, mixed radix), its places on the rings and,
 * per stream phase i and rotation kk, where the regions of its streams of
 * that rotation start in the table (stream_region's index less tab_at),
 * found once at plan time rather than at every step. */
typedef struct {
  int oc;
  Place at[PS_MAX_DIMS];
  int32_t base[PS_MAX_DIMS][PS_MAX_DIMS]; /* [i][kk] */
} Where;

static inline void region_set(Region *g, int64_t lo, int64_t len, int L)
{
  *g = (Region){lo, len / L, (int32_t)(len % L), L, UINT64_MAX / (uint64_t)L + 1};
}

/* Part j of the region (ps_coll_part_of's): r j < L^2, in 32 bits on any
 * line shorter than 65536, and one quotient, by inv (L = 1 has r = 0, and
 * inv 2^64 wrapped to 0): with r j = a L + e (e < L) and r < L, r (j + 1)
 * = a L + e + r, whose quotient is b = a + (e + r >= L). */
static inline void region_part(const Region *g, int j, int64_t *off, int64_t *len)
{
  int64_t a, b;
  if (G_LIKELY(g->L < 65536)) {
    uint32_t rj = (uint32_t)g->r * (uint32_t)j, L = (uint32_t)g->L;
    uint32_t qa = (uint32_t)(((unsigned __int128)g->inv * rj) >> 64);
    uint32_t e = rj - qa * L;
    a = qa;
    b = qa + (e + (uint32_t)g->r >= L);
  } else {
    a = (int64_t)g->r * j / g->L;
    b = (int64_t)g->r * (j + 1) / g->L;
  }
  *off = g->lo + g->q * j + a;
  *len = g->q + (b - a);
}

/* A stream active in a stream phase step: its phase's dimension d, its
 * rotation kk (k mod nd), its direction when every member runs both ways,
 * the part it sends, pos - dir u on the line, which of the part's sub
 * pieces (j), and its regions' offset in the table (tab_at). */
typedef struct {
  int8_t d, kk, dir;
  int8_t j, sub; /* its sub-part j of sub (1: the whole part) */
  int16_t u;
  int32_t tab_at;
} StreamAt;

/* Where a step falls (locate), what it receives and, in a stream phase,
 * its active streams: found once per plan, the same for every member. */
typedef struct {
  int outer, phase, t;
  gboolean gather;
  int n_recv;
  int n_act;
  StreamAt act[2 * PS_MAX_DIMS];
} StepAt;

typedef struct {
  const PsCollGroup *g;
  PsCollParams p;
  int n_outer;
  Line outer[PS_COLL_MAX_AXES];
  int nd; /* ring dimensions */
  Line ring[PS_MAX_DIMS];
  /* the two-core axis, whose core 0 runs the streams going + and core 1
   * those going -, or -1: every member runs both ways */
  int split;
  int K; /* streams per member: 2 nd, or nd when split */
  int span;        /* steps per stream phase: max sub (L - 1) */
  int outer_steps; /* sum of the outer axes' L - 1 */
  int total_steps;
  /* region before outer phase o (o = n_outer: after them): [o * n + m] */
  int64_t *olo, *olen;
  Where *where; /* [m] */
  /* Stream k's region before stream phase i depends on the member only
   * through its outer region (Where.oc) and its positions on the
   * dimensions of the phases before i, so the regions are a table of
   * n_oc * per_oc entries, not one per member (on a v4 pod, 1,638
   * instead of 98,304: a step's reads stay in cache).  Stream k's phase
   * i block of outer region oc starts at oc * per_oc + tab_at[k][i] and
   * is indexed by those positions, mixed radix, the first phase's
   * slowest. */
  int n_oc, per_oc;
  int tab_at[2 * PS_MAX_DIMS][PS_MAX_DIMS];
  Region *tab;
  StepAt *at; /* [s]: locate's answer and the receives, for each step */
} MultiPlan;

/* Stream k's region before stream phase i on member m. */
static inline Region *stream_region(const MultiPlan *p, int m, int k, int i)
{
  const Where *w = &p->where[m];
  int nd = p->nd, d = k < nd ? k : k - nd, x = 0;
  for (int a = 0; a < i; a++, d = d + 1 == nd ? 0 : d + 1)
    x = x * p->ring[d].L + w->at[d].pos;
  return &p->tab[(size_t)w->oc * p->per_oc + p->tab_at[k][i] + x];
}

/* ---- layout --------------------------------------------------------- */

static void line_init(const PsCollGroup *g, int a, Line *x)
{
  x->L = g->axis_size[a];
  x->pos = g_new(int, g->n);
  x->next = g_new(int, g->n);
  x->prev = g_new(int, g->n);
  ps_coll_grid_line(g, a, x->pos, x->next, x->prev);
}

static void line_clear(Line *x)
{
  g_free(x->pos);
  g_free(x->next);
  g_free(x->prev);
}

/* Sorts the grid's axes into outer axes and ring dimensions; the lines
 * are left allocated in both (the caller clears them). */
static void sort_axes(const PsCollGroup *g, MultiPlan *p)
{
  Line lines[PS_COLL_MAX_AXES];
  gboolean is_ring[PS_COLL_MAX_AXES];
  for (int a = 0; a < g->n_axes; a++) {
    line_init(g, a, &lines[a]);
    is_ring[a] = g->axis_coord[a] != 0 &&
                 (lines[a].L == 2 || ps_coll_line_closes(g, lines[a].L, lines[a].pos,
                                                         lines[a].next));
  }
  for (int a = 0; a < g->n_axes; a++) {
    if (is_ring[a])
      p->ring[p->nd++] = lines[a];
    else
      p->outer[p->n_outer++] = lines[a];
  }
}

/* The table of stream regions (MultiPlan.tab): its shape. */
static void table_shape(MultiPlan *p)
{
  int nd = p->nd;
  p->n_oc = 1;
  for (int o = 0; o < p->n_outer; o++)
    p->n_oc *= p->outer[o].L;
  p->per_oc = 0;
  for (int k = 0; k < p->K; k++) {
    int size = 1, d = k % nd;
    for (int i = 0; i < nd; i++, d = (d + 1) % nd) {
      p->tab_at[k][i] = p->per_oc;
      p->per_oc += size;
      size *= p->ring[d].L;
    }
  }
  g_assert((int64_t)p->n_oc * p->per_oc <= INT32_MAX); /* Where.base */
  p->tab = g_new0(Region, (size_t)p->n_oc * p->per_oc);
}

/* Sub-steps of a ring dimension: a stream phase lasts as many steps as
 * the longest ring has less one, max L - 1; a shorter ring of L > 2 cuts
 * each of its L - 1 steps' parts into sub = floor((max L - 1) / (L - 1))
 * pieces, one a step, so that its links stay busy for all but the rest of
 * that division (on 8x16x16 the 8-rings run 14 steps of the 16-rings' 15,
 * where whole parts kept them busy for 7).  A ring of two keeps 1: its one
 * link each way carries both its streams. */
static void ring_subs(MultiPlan *p)
{
  int most = 0;
  for (int d = 0; d < p->nd; d++)
    most = MAX(most, p->ring[d].L - 1);
  p->span = 0;
  for (int d = 0; d < p->nd; d++) {
    Line *x = &p->ring[d];
    x->sub = x->L == 2 ? 1 : CLAMP(most / (x->L - 1), 1, 127); /* StreamAt.sub */
    p->span = MAX(p->span, x->sub * (x->L - 1));
  }
}

/* Stream k's weight: the members of the ring its first phase walks times
 * that ring's sub-steps, over the streams sharing the ring's links (2 on a
 * ring of two, whose one link each way both directions cross).  A
 * stream's first phase sends L - 1 parts of its share / L, each in sub
 * pieces, one a step, and a phase's steps last as long as their largest
 * piece, so shares in proportion to L sub keep the pieces of a step
 * alike: on 16x16x8 the streams starting on the 8-ring, whose parts go in
 * two pieces, carry as much as the others and no step waits on them
 * (with whole parts, shares in proportion to L gave them half as much and
 * their links idled 8 of the phase's 15 steps; with equal shares and
 * whole parts the first 7 steps sent twice the 16-rings' parts).  On a
 * cube every weight is equal: equal shares. */
static int64_t stream_weight(const MultiPlan *p, int k)
{
  const Line *x = &p->ring[k % p->nd];
  return x->L == 2 ? 1 : (int64_t)x->L * x->sub;
}

/* Stream k's share of [lo, lo + len): the streams' weights cut it in
 * order, each boundary floor(len C / W) for C the weights before it. */
static void stream_share(const MultiPlan *p, int64_t lo, int64_t len, int k, int64_t *plo,
                         int64_t *plen)
{
  int64_t before = 0, total = 0;
  for (int j = 0; j < p->K; j++) {
    before += j < k ? stream_weight(p, j) : 0;
    total += stream_weight(p, j);
  } /* K <= 2 PS_MAX_DIMS: cheaper than keeping the sums, at plan time only */
  int64_t a = (int64_t)((__int128)len * before / total);
  int64_t b = (int64_t)((__int128)len * (before + stream_weight(p, k)) / total);
  *plo = lo + a;
  *plen = b - a;
}

static void layout(MultiPlan *p)
{
  const PsCollGroup *g = p->g;
  int n = g->n, no = p->n_outer, nd = p->nd;
  /* the core axis is the grid's first, so the first outer one */
  p->split = no > 0 && g->axis_coord[0] == 0 && p->outer[0].L == 2 ? 0 : -1;
  int K = p->K = p->split >= 0 ? nd : 2 * nd;
  p->olo = g_new(int64_t, (size_t)(no + 1) * n);
  p->olen = g_new(int64_t, (size_t)(no + 1) * n);
  p->where = g_new(Where, (size_t)n);
  ring_subs(p);
  table_shape(p);
  for (int m = 0; m < n; m++) {
    Where *w = &p->where[m];
    w->oc = 0;
    p->olo[m] = 0;
    p->olen[m] = p->p.count;
    for (int o = 0; o < no; o++) {
      w->oc = w->oc * p->outer[o].L + p->outer[o].pos[m];
      ps_coll_part_of(p->olo[o * n + m], p->olen[o * n + m], p->outer[o].L,
                      p->outer[o].pos[m], &p->olo[(o + 1) * n + m], &p->olen[(o + 1) * n + m]);
    }
    for (int d = 0; d < nd; d++)
      w->at[d] = (Place){p->ring[d].pos[m], p->ring[d].next[m], p->ring[d].prev[m]};
    for (int i = 0; i < nd; i++)
      for (int kk = 0; kk < nd; kk++)
        w->base[i][kk] =
            (int32_t)(stream_region(p, m, kk, i) - p->tab - p->tab_at[kk][i]);
    /* members sharing an entry write the same region into it */
    for (int k = 0; k < K; k++) {
      int64_t lo, len;
      stream_share(p, p->olo[no * n + m], p->olen[no * n + m], k, &lo, &len);
      for (int i = 0; i < nd; i++) {
        const Line *x = &p->ring[(k % nd + i) % nd];
        region_set(stream_region(p, m, k, i), lo, len, x->L);
        ps_coll_part_of(lo, len, x->L, x->pos[m], &lo, &len);
      }
    }
  }
  p->outer_steps = 0;
  for (int o = 0; o < no; o++)
    p->outer_steps += p->outer[o].L - 1;
  p->total_steps = p->outer_steps + nd * p->span;
  if (p->p.op == PS_COLL_ALL_REDUCE)
    p->total_steps *= 2;
}

/* ---- steps ---------------------------------------------------------- */

/* Where step s falls: an outer phase (*outer >= 0, its step *t, gather or
 * not) or a stream phase (*phase, its step *t). */
static void locate(const MultiPlan *p, int s, int *outer, int *phase, int *t, gboolean *gather)
{
  int os = p->outer_steps, ss = p->nd * p->span;
  if (p->p.op == PS_COLL_ALL_GATHER)
    s += os + ss; /* an all-reduce's gather steps */
  *outer = -1;
  *phase = -1;
  *gather = s >= os + ss;
  if (s < os || s >= os + 2 * ss) {
    int u = s < os ? s : s - os - 2 * ss, o = 0;
    if (s >= os)
      u = os - 1 - u; /* gather phases run the outer axes backwards */
    while (u >= p->outer[o].L - 1)
      u -= p->outer[o++].L - 1;
    *outer = o;
    *t = s < os ? u : p->outer[o].L - 2 - u;
    return;
  }
  int u = s - os;
  if (*gather) {
    u -= ss;
    *phase = p->nd - 1 - u / p->span;
  } else {
    *phase = u / p->span;
  }
  *t = u % p->span;
}

/* The table of the steps (MultiPlan.at). */
static void steps_index(MultiPlan *p)
{
  p->at = g_new(StepAt, MAX(1, p->total_steps));
  for (int s = 0; s < p->total_steps; s++) {
    StepAt *a = &p->at[s];
    locate(p, s, &a->outer, &a->phase, &a->t, &a->gather);
    a->n_recv = 0;
    a->n_act = 0;
    if (a->outer >= 0) {
      a->n_recv = 1;
      continue;
    }
    for (int d = 0; d < p->nd; d++)
      a->n_recv += a->t < p->ring[d].sub * (p->ring[d].L - 1) ? (p->split >= 0 ? 1 : 2) : 0;
    for (int k = 0; k < p->K; k++) {
      int nd = p->nd, kk = k < nd ? k : k - nd, d = (kk + a->phase) % nd;
      int sub = p->ring[d].sub, rs = a->t / sub; /* the ring step */
      if (rs < p->ring[d].L - 1)
        a->act[a->n_act++] = (StreamAt){(int8_t)d,
                                        (int8_t)kk,
                                        (int8_t)(k < nd ? 1 : -1),
                                        (int8_t)(a->t % sub),
                                        (int8_t)sub,
                                        (int16_t)(a->gather ? rs : 1 + rs),
                                        p->tab_at[k][a->phase]};
    }
  }
}

static void outer_step(const MultiPlan *p, int m, int s, int o, int t, gboolean gather,
                       PsCollStep *out)
{
  const Line *x = &p->outer[o];
  int n = p->g->n, pos = x->pos[m];
  int j = gather ? pos - t : pos - 1 - t;
  j = j < 0 ? j + x->L : j; /* -L < j < L */
  int64_t plo, plen;
  ps_coll_part_of(p->olo[o * n + m], p->olen[o * n + m], x->L, j, &plo, &plen);
  out->send[out->n_send++] =
      (PsCollSend){x->next[m], s, plo, plen, gather ? PS_XFER_COPY : PS_XFER_ADD};
  out->n_recv = 1;
}

/* +1 if member m's stream k goes to the next member on its rings, -1 if
 * to the previous one. */
static inline int stream_dir(const MultiPlan *p, int m, int k)
{
  if (p->split >= 0)
    return p->outer[p->split].pos[m] == 0 ? 1 : -1;
  return k < p->nd ? 1 : -1;
}

/* The sends of stream phase step a: one per stream still active on the
 * line of its phase.  Streams k and k + nd share a rotation, so their
 * regions' offsets in the table (stream_region) are found once. */
static void stream_step(const MultiPlan *p, int m, int s, const StepAt *a, PsCollStep *out)
{
  const Where *w = &p->where[m];
  const int32_t *base = w->base[a->phase];
  PsXferOp op = a->gather ? PS_XFER_COPY : PS_XFER_ADD;
  int split_dir = p->split >= 0 ? stream_dir(p, m, 0) : 0;
  for (int n = 0; n < a->n_act; n++) {
    const StreamAt *sa = &a->act[n];
    const Region *r = &p->tab[sa->tab_at + base[sa->kk]];
    const Place *at = &w->at[sa->d];
    int dir = split_dir ? split_dir : sa->dir, L = r->L;
    int j = at->pos - dir * sa->u; /* -L < j < 2L */
    /* into [0, L) without a branch: which way it wraps varies from member
     * to member */
    j += L & -(j < 0);
    j -= L & -(j >= L);
    PsCollSend *snd = &out->send[n];
    region_part(r, j, &snd->off, &snd->len);
    if (sa->sub > 1)
      ps_coll_part_of(snd->off, snd->len, sa->sub, sa->j, &snd->off, &snd->len);
    snd->peer = dir > 0 ? at->next : at->prev;
    snd->peer_step = s;
    snd->op = op;
  }
  out->n_send = a->n_act;
  out->n_recv = a->n_act;
}

static void multi_step(const PsCollPlan *plan, int m, int s, PsCollStep *out)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  const StepAt *a = &p->at[s];
  if (a->outer >= 0) {
    out->n_send = 0;
    outer_step(p, m, s, a->outer, a->t, a->gather, out);
    return;
  }
  stream_step(p, m, s, a, out);
}

static void multi_prefetch(const PsCollPlan *plan, int m)
{
  const Where *w = &((const MultiPlan *)plan)->where[m];
  __builtin_prefetch(w);
  __builtin_prefetch((const char *)(w + 1) - 1); /* it may span two lines */
}

static int multi_n_recv(const PsCollPlan *plan, int m, int s)
{
  return ((const MultiPlan *)plan)->at[s].n_recv;
}

static int multi_n_steps(const PsCollPlan *plan, int m)
{
  return ((const MultiPlan *)plan)->total_steps;
}

/* All-reduce: the whole buffer; else stream k's piece after its last
 * reduce-scatter phase, pieces in stream order (ascending). */
static int multi_block(const PsCollPlan *plan, int m, int piece, int64_t *off, int64_t *len)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  if (p->p.op == PS_COLL_ALL_REDUCE) {
    *off = 0;
    *len = p->p.count;
    return 1;
  }
  g_return_val_if_fail(piece < p->K, p->K);
  /* part (its position on the last dimension) of its last phase's region */
  int nd = p->nd, last = (piece % nd + nd - 1) % nd;
  region_part(stream_region(p, m, piece, nd - 1), p->where[m].at[last].pos, off, len);
  return p->K;
}

/* ---- closed form ---------------------------------------------------- */

/* A member's route to its neighbour on one line, one direction, with what
 * its message time needs. */
typedef struct {
  int h;
  int *links;
  int share;        /* messages of one step on its busiest link */
  gboolean used;    /* some stream of the member takes it */
  gboolean uniform; /* every link one lane, one bandwidth, one latency */
  double lat, bmin;
} Route;

/* The routes the prediction times, found for it alone (the steps never
 * need them): to the next member on each outer axis, both ways along
 * each ring dimension. */
typedef struct {
  Route *outer; /* [o * n + m] */
  Route *ring;  /* [(d * 2 + dir) * n + m], dir 0 going +, 1 going - */
} Routes;

static void route_init(const PsCollGroup *g, int a, int b, Route *r)
{
  r->links = ps_coll_route(g, a, b, &r->h);
  r->uniform = TRUE;
  r->lat = 0;
  r->bmin = INFINITY;
  PsLinkInfo first = {0};
  for (int i = 0; i < r->h; i++) {
    PsLinkInfo info;
    ps_network_link_info(g->net, r->links[i], &info);
    if (i == 0)
      first = info;
    if (info.lanes != 1 || info.bandwidth_Bps != first.bandwidth_Bps ||
        info.latency != first.latency)
      r->uniform = FALSE;
    r->lat += ps_time_to_s(info.latency);
    r->bmin = MIN(r->bmin, info.bandwidth_Bps * info.lanes);
  }
}

/* Each route's share: the most used routes of the set on one of its
 * links. */
static void routes_share(const PsCollGroup *g, Route *r, int n_routes)
{
  g_autofree int *load = g_new0(int, ps_network_n_links(g->net));
  for (int i = 0; i < n_routes; i++)
    for (int j = 0; j < r[i].h && r[i].used; j++)
      load[r[i].links[j]]++;
  for (int i = 0; i < n_routes; i++) {
    r[i].share = 1;
    for (int j = 0; j < r[i].h; j++)
      r[i].share = MAX(r[i].share, load[r[i].links[j]]);
  }
}

static void routes_find(const MultiPlan *p, Routes *R)
{
  const PsCollGroup *g = p->g;
  int n = g->n;
  R->outer = g_new0(Route, (size_t)MAX(1, p->n_outer) * n);
  for (int o = 0; o < p->n_outer; o++) {
    for (int m = 0; m < n; m++) {
      route_init(g, m, p->outer[o].next[m], &R->outer[o * n + m]);
      R->outer[o * n + m].used = TRUE;
    }
    routes_share(g, &R->outer[o * n], n);
  }
  R->ring = g_new0(Route, (size_t)2 * p->nd * n);
  for (int d = 0; d < p->nd; d++)
    for (int m = 0; m < n; m++) {
      route_init(g, m, p->ring[d].next[m], &R->ring[(d * 2) * n + m]);
      route_init(g, m, p->ring[d].prev[m], &R->ring[(d * 2 + 1) * n + m]);
      R->ring[(d * 2) * n + m].used = stream_dir(p, m, 0) > 0 || p->split < 0;
      R->ring[(d * 2 + 1) * n + m].used = stream_dir(p, m, 0) < 0 || p->split < 0;
    }
  /* every stream phase uses every dimension both ways at once */
  routes_share(g, R->ring, 2 * p->nd * n);
}

static void routes_free(const MultiPlan *p, Routes *R)
{
  int n = p->g->n;
  for (int i = 0; i < p->n_outer * n; i++)
    g_free(R->outer[i].links);
  for (int i = 0; i < 2 * p->nd * n; i++)
    g_free(R->ring[i].links);
  g_free(R->outer);
  g_free(R->ring);
}

/* ps_coll_route_message_s for the route's message of `bytes` times its
 * share, without looking the links up again where they are alike. */
static double route_time(const MultiPlan *p, const Route *r, int64_t bytes)
{
  int64_t b = bytes * r->share, chunk = p->p.chunk_bytes;
  if (r->h == 0)
    return 0.0;
  if (!r->uniform)
    return ps_coll_route_message_s(p->g, r->links, r->h, b, chunk);
  int64_t first = b < chunk ? b : chunk;
  return r->lat + (double)b / r->bmin + (r->h - 1) * (double)first / r->bmin;
}

/* One phase of the critical path: member m's message of slot s (an outer
 * axis' one, or a stream's) takes T[m * S + s] to reach peer[m * S + s]
 * and is sent in the phase's steps t < act[s]; member m ends step t when
 * it has ended step t - 1 and its step t's messages have arrived.  When
 * every member ends the previous phase together and each slot's time is
 * the same for every member, every member receives one message of each
 * active slot per step, so they all end each step together: the phase
 * costs the sum over its steps of the slowest active slot. */
static void sweep_phase(int n, int S, const double *T, const int *peer, const int *act,
                        int steps, double *V, double *W)
{
  gboolean uniform = TRUE;
  for (int m = 1; m < n && uniform; m++) {
    uniform = V[m] == V[0];
    for (int s = 0; s < S && uniform; s++)
      uniform = T[m * S + s] == T[s];
  }
  if (uniform) {
    double add = 0;
    for (int t = 0; t < steps; t++) {
      double step = 0;
      for (int s = 0; s < S; s++)
        if (t < act[s])
          step = MAX(step, T[s]);
      add += step;
    }
    for (int m = 0; m < n; m++)
      V[m] += add;
    return;
  }
  for (int t = 0; t < steps; t++) {
    memcpy(W, V, sizeof(double) * (size_t)n);
    for (int m = 0; m < n; m++)
      for (int s = 0; s < S; s++)
        if (t < act[s])
          W[peer[m * S + s]] = MAX(W[peer[m * S + s]], V[m] + T[m * S + s]);
    memcpy(V, W, sizeof(double) * (size_t)n);
  }
}

/* Outer phase o: one message a step to the next member, a part of the
 * member's region (its largest, so the events never outrun it). */
static void outer_phase(const MultiPlan *p, const Routes *R, int o, double *V, double *W,
                        double *T, int *peer)
{
  int n = p->g->n, L = p->outer[o].L, act = L - 1;
  for (int m = 0; m < n; m++) {
    int64_t part = (p->olen[o * n + m] + L - 1) / L;
    T[m] = route_time(p, &R->outer[o * n + m], part * p->p.elem_bytes);
    peer[m] = p->outer[o].next[m];
  }
  sweep_phase(n, 1, T, peer, &act, act, V, W);
}

/* Stream phase i: each stream's message along its dimension of the
 * phase, a piece of a part (its largest), for the first sub (L - 1) steps
 * of the phase's span. */
static void stream_phase(const MultiPlan *p, const Routes *R, int i, double *V, double *W,
                         double *T, int *peer)
{
  int n = p->g->n, K = p->K, nd = p->nd;
  int act[2 * PS_MAX_DIMS];
  for (int k = 0; k < K; k++) {
    const Line *x = &p->ring[(k % nd + i) % nd];
    act[k] = x->sub * (x->L - 1);
  }
  for (int m = 0; m < n; m++)
    for (int k = 0; k < K; k++) {
      int d = (k % nd + i) % nd, dir = stream_dir(p, m, k);
      const Line *x = &p->ring[d];
      const Region *g = stream_region(p, m, k, i);
      int64_t part = g->q + (g->r > 0);
      part = (part + x->sub - 1) / x->sub;
      const Route *r = &R->ring[(d * 2 + (dir > 0 ? 0 : 1)) * n + m];
      T[m * K + k] = route_time(p, r, part * p->p.elem_bytes);
      peer[m * K + k] = dir > 0 ? x->next[m] : x->prev[m];
    }
  sweep_phase(n, K, T, peer, act, p->span, V, W);
}

/* The phases in order: outer reduce-scatter, stream reduce-scatter,
 * stream gather (backwards), outer gather (backwards); reduce-scatter
 * runs the first half, all-gather the second. */
static double multi_predict(const PsCollPlan *plan)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  int n = p->g->n, no = p->n_outer, nd = p->nd, K = p->K;
  Routes R;
  routes_find(p, &R);
  double *V = g_new0(double, n), *W = g_new(double, n), *T = g_new(double, (size_t)n * K);
  int *peer = g_new(int, (size_t)n * K);
  gboolean scatter = p->p.op != PS_COLL_ALL_GATHER, gather = p->p.op != PS_COLL_REDUCE_SCATTER;
  for (int o = 0; o < no && scatter; o++)
    outer_phase(p, &R, o, V, W, T, peer);
  for (int i = 0; i < nd && scatter; i++)
    stream_phase(p, &R, i, V, W, T, peer);
  for (int i = nd - 1; i >= 0 && gather; i--)
    stream_phase(p, &R, i, V, W, T, peer);
  for (int o = no - 1; o >= 0 && gather; o--)
    outer_phase(p, &R, o, V, W, T, peer);
  double total = 0;
  for (int m = 0; m < n; m++)
    total = MAX(total, V[m]);
  g_free(V);
  g_free(W);
  g_free(T);
  g_free(peer);
  routes_free(p, &R);
  return total;
}

/* ---- the table entry ------------------------------------------------ */

static PsCollPlan *multi_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  MultiPlan *p = g_new0(MultiPlan, 1);
  p->g = g;
  p->p = *prm;
  sort_axes(g, p);
  g_assert(p->nd > 0);
  layout(p);
  steps_index(p);
  return (PsCollPlan *)p;
}

static void multi_free(PsCollPlan *plan)
{
  MultiPlan *p = (MultiPlan *)plan;
  if (!p)
    return;
  for (int o = 0; o < p->n_outer; o++)
    line_clear(&p->outer[o]);
  for (int d = 0; d < p->nd; d++)
    line_clear(&p->ring[d]);
  g_free(p->olo);
  g_free(p->olen);
  g_free(p->where);
  g_free(p->tab);
  g_free(p->at);
  g_free(p);
}

static const char *multi_unsupported(const PsCollGroup *g, PsCollOp op)
{
  if (op != PS_COLL_ALL_REDUCE && op != PS_COLL_REDUCE_SCATTER && op != PS_COLL_ALL_GATHER)
    return "multiring runs all-reduce, reduce-scatter and all-gather; use torus";
  if (!g->is_grid)
    return "the group's (core, x, y, z) coordinates do not form a box, so it has no torus "
           "axes; use ring or bidir";
  if (ps_coll_spans_slices(g))
    return ps_coll_spans_slices(g);
  int rings = 0;
  for (int a = 0; a < g->n_axes; a++) {
    if (g->axis_coord[a] == 0)
      continue;
    g_autofree int *pos = g_new(int, g->n), *next = g_new(int, g->n), *prev = g_new(int, g->n);
    ps_coll_grid_line(g, a, pos, next, prev);
    if (g->axis_size[a] == 2 || ps_coll_line_closes(g, g->axis_size[a], pos, next))
      rings++;
  }
  if (rings < 2)
    return "fewer than two torus dimensions of the group close into rings (wrap-around, or "
           "two members), and over one the streams are torus's bidirectional ring; use torus";
  return NULL;
}

const PsCollAlgo ps_coll_multiring_algo = {
    "multiring",
    "every torus link at once: 2n streams, each reducing the wrapped dimensions in its own "
    "rotation, one each way per dimension (lines without wrap-around and the core axis run "
    "first, as in torus)",
    multi_unsupported, multi_plan, multi_free, multi_n_steps, multi_step, multi_n_recv,
    multi_block, multi_predict, FALSE, NULL, multi_prefetch};

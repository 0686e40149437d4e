/* multiring.c: "multiring", the all-reduce, reduce-scatter and all-gather
 * that drive every link of a torus at once, and their closed form; a table
 * entry beside algorithms.c's.
 *
 * The torus algorithm reduces one dimension at a time, so a chip of a 3-D
 * torus drives 2 of its 6 links.  Here the data is split into K = 2 n
 * streams, n the number of the group's ring dimensions (below): stream k
 * walks the ring dimensions in the rotation starting with dimension
 * k mod n, going to the next member on each ring for k < n and to the
 * previous one for k >= n.  Its reduce-scatter runs phase i along
 * dimension (k + i) mod n (the classic ring of algorithms.c, L-1 steps,
 * each member then keeps part pos of its region), then its all-gather
 * runs the phases back.  At every phase each dimension is walked by two
 * streams, one each way, so every link of every chip carries one stream
 * (the scaling book's "over n axes at once, divide by n").  Phases last
 * max L - 1 steps; a stream on a shorter dimension idles for the rest, so
 * no link carries two streams (but on a dimension of two members, whose
 * one link each way both streams cross).
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
 * stream phases of max L - 1 steps each (one message per active stream
 * and step, so up to 2 n sends and receives), the n gather phases, the
 * outer gather phases.
 *
 * Closed form (predict): the alpha-beta critical path of those steps.  A
 * message of m bytes over h uncontended hops costs h alpha + m/B +
 * (h-1) c/B (network.h), counted as large as all the messages of a step
 * that share its busiest link (both streams of a dimension of two
 * members); member r ends step s when it has ended step s-1 and each message
 * it receives in step s, sent when its sender ended step s-1, has arrived.
 * On an X^n torus with wrap-around, one device per chip, an all-reduce of
 * S bytes costs
 *   2 sum_{i=1..n} (X - 1)(alpha + S / (2 n X^i B)),
 * a bandwidth term of S (1 - 1/X^n) / (n B): the torus algorithm's divided
 * by n.
 *
 * Invariant: in every stream phase step, the parts a line's members send
 * for one stream are a permutation of that stream's parts on the line, so
 * each part is reduced exactly once per member and then copied, never
 * added, in the gather; every member ends bit-identical. */
#include "collectives/collective-private.h"

#include <math.h>
#include <string.h>

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

typedef struct {
  int L;
  int *pos, *next, *prev; /* member -> ..., as ps_coll_grid_line */
} Line;

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
  int span;        /* steps per stream phase: max L - 1 */
  int outer_steps; /* sum of the outer axes' L - 1 */
  int total_steps;
  /* region before outer phase o (o = n_outer: after them): [o * n + m] */
  int64_t *olo, *olen;
  /* stream k's region before stream phase i: [(k * (nd + 1) + i) * n + m] */
  int64_t *slo, *slen;
  Route *oroute; /* [o * n + m]: to the next member on outer axis o */
  Route *sroute; /* [(d * 2 + dir) * n + m]: along ring dimension d */
} MultiPlan;

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

static void layout(MultiPlan *p)
{
  const PsCollGroup *g = p->g;
  int n = g->n, no = p->n_outer, nd = p->nd;
  /* the core axis is the grid's first, so the first outer one */
  p->split = no > 0 && g->axis_coord[0] == 0 && p->outer[0].L == 2 ? 0 : -1;
  int K = p->K = p->split >= 0 ? nd : 2 * nd;
  p->olo = g_new(int64_t, (size_t)(no + 1) * n);
  p->olen = g_new(int64_t, (size_t)(no + 1) * n);
  p->slo = g_new(int64_t, (size_t)K * (nd + 1) * n);
  p->slen = g_new(int64_t, (size_t)K * (nd + 1) * n);
  for (int m = 0; m < n; m++) {
    p->olo[m] = 0;
    p->olen[m] = p->p.count;
    for (int o = 0; o < no; o++)
      ps_coll_part_of(p->olo[o * n + m], p->olen[o * n + m], p->outer[o].L,
                      p->outer[o].pos[m], &p->olo[(o + 1) * n + m], &p->olen[(o + 1) * n + m]);
    for (int k = 0; k < K; k++) {
      int64_t *lo = &p->slo[(size_t)k * (nd + 1) * n], *len = &p->slen[(size_t)k * (nd + 1) * n];
      ps_coll_part_of(p->olo[no * n + m], p->olen[no * n + m], K, k, &lo[m], &len[m]);
      for (int i = 0; i < nd; i++) {
        const Line *x = &p->ring[(k % nd + i) % nd];
        ps_coll_part_of(lo[i * n + m], len[i * n + m], x->L, x->pos[m], &lo[(i + 1) * n + m],
                        &len[(i + 1) * n + m]);
      }
    }
  }
  p->span = 0;
  for (int d = 0; d < nd; d++)
    p->span = MAX(p->span, p->ring[d].L - 1);
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

/* Stream k's send in step t of stream phase i, if the stream is active. */
static gboolean stream_send(const MultiPlan *p, int m, int k, int i, int t, gboolean gather,
                            PsCollSend *out, int *dim)
{
  int nd = p->nd, n = p->g->n, dir = stream_dir(p, m, k);
  int d = (k < nd ? k : k - nd) + i; /* (k mod nd + i) mod nd */
  *dim = d >= nd ? d - nd : d;
  const Line *x = &p->ring[*dim];
  if (t >= x->L - 1)
    return FALSE;
  int pos = x->pos[m];
  int j = gather ? pos - dir * t : pos - dir * (1 + t);
  j = j < 0 ? j + x->L : j >= x->L ? j - x->L : j; /* -L < j < 2L */
  size_t r = ((size_t)k * (nd + 1) + i) * n + m;
  ps_coll_part_of(p->slo[r], p->slen[r], x->L, j, &out->off, &out->len);
  out->peer = dir > 0 ? x->next[m] : x->prev[m];
  out->op = gather ? PS_XFER_COPY : PS_XFER_ADD;
  return TRUE;
}

static void multi_step(const PsCollPlan *plan, int m, int s, PsCollStep *out)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  int o, i, t;
  gboolean gather;
  out->n_send = 0;
  out->n_recv = 0;
  locate(p, s, &o, &i, &t, &gather);
  if (o >= 0) {
    outer_step(p, m, s, o, t, gather, out);
    return;
  }
  for (int k = 0; k < p->K; k++) {
    int dim;
    PsCollSend *snd = &out->send[out->n_send];
    if (stream_send(p, m, k, i, t, gather, snd, &dim)) {
      snd->peer_step = s;
      out->n_send++;
      out->n_recv++;
    }
  }
}

static int multi_n_recv(const PsCollPlan *plan, int m, int s)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  int o, i, t, n = 0;
  gboolean gather;
  locate(p, s, &o, &i, &t, &gather);
  if (o >= 0)
    return 1;
  for (int d = 0; d < p->nd; d++)
    n += t < p->ring[d].L - 1 ? (p->split >= 0 ? 1 : 2) : 0;
  return n;
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
  size_t r = ((size_t)piece * (p->nd + 1) + p->nd) * p->g->n + m;
  *off = p->slo[r];
  *len = p->slen[r];
  return p->K;
}

/* ---- closed form ---------------------------------------------------- */

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

static void routes_find(MultiPlan *p)
{
  const PsCollGroup *g = p->g;
  int n = g->n;
  p->oroute = g_new0(Route, (size_t)MAX(1, p->n_outer) * n);
  for (int o = 0; o < p->n_outer; o++) {
    for (int m = 0; m < n; m++) {
      route_init(g, m, p->outer[o].next[m], &p->oroute[o * n + m]);
      p->oroute[o * n + m].used = TRUE;
    }
    routes_share(g, &p->oroute[o * n], n);
  }
  p->sroute = g_new0(Route, (size_t)2 * p->nd * n);
  for (int d = 0; d < p->nd; d++)
    for (int m = 0; m < n; m++) {
      route_init(g, m, p->ring[d].next[m], &p->sroute[(d * 2) * n + m]);
      route_init(g, m, p->ring[d].prev[m], &p->sroute[(d * 2 + 1) * n + m]);
      p->sroute[(d * 2) * n + m].used = stream_dir(p, m, 0) > 0 || p->split < 0;
      p->sroute[(d * 2 + 1) * n + m].used = stream_dir(p, m, 0) < 0 || p->split < 0;
    }
  /* every stream phase uses every dimension both ways at once */
  routes_share(g, p->sroute, 2 * p->nd * n);
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

static double multi_predict(const PsCollPlan *plan)
{
  const MultiPlan *p = (const MultiPlan *)plan;
  int n = p->g->n;
  double *V = g_new0(double, n), *W = g_new0(double, n);
  for (int s = 0; s < p->total_steps; s++) {
    int o, i, t;
    gboolean gather;
    locate(p, s, &o, &i, &t, &gather);
    memcpy(W, V, sizeof(double) * (size_t)n);
    for (int m = 0; m < n; m++) {
      PsCollStep st = {0};
      if (o >= 0) {
        outer_step(p, m, s, o, t, gather, &st);
        const PsCollSend *x = &st.send[0];
        double at = V[m] + route_time(p, &p->oroute[o * n + m], x->len * p->p.elem_bytes);
        W[x->peer] = MAX(W[x->peer], at);
        continue;
      }
      for (int k = 0; k < p->K; k++) {
        PsCollSend x;
        int d;
        if (!stream_send(p, m, k, i, t, gather, &x, &d))
          continue;
        const Route *r = &p->sroute[(d * 2 + (stream_dir(p, m, k) > 0 ? 0 : 1)) * n + m];
        double at = V[m] + route_time(p, r, x.len * p->p.elem_bytes);
        W[x.peer] = MAX(W[x.peer], at);
      }
    }
    memcpy(V, W, sizeof(double) * (size_t)n);
  }
  double total = 0;
  for (int m = 0; m < n; m++)
    total = MAX(total, W[m]);
  g_free(V);
  g_free(W);
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
  routes_find(p);
  return (PsCollPlan *)p;
}

static void multi_free(PsCollPlan *plan)
{
  MultiPlan *p = (MultiPlan *)plan;
  if (!p)
    return;
  int n = p->g->n;
  for (int o = 0; o < p->n_outer; o++) {
    for (int m = 0; m < n; m++)
      g_free(p->oroute[o * n + m].links);
    line_clear(&p->outer[o]);
  }
  for (int i = 0; i < 2 * p->nd * n; i++)
    g_free(p->sroute[i].links);
  for (int d = 0; d < p->nd; d++)
    line_clear(&p->ring[d]);
  g_free(p->oroute);
  g_free(p->sroute);
  g_free(p->olo);
  g_free(p->olen);
  g_free(p->slo);
  g_free(p->slen);
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
    multi_block, multi_predict,
    /* Not yet auto's: its 2n streams per member make a full-pod step's
     * events three times as many (bench_step's BERT-large on tpu-v4-8192,
     * 2.1 s -> 6.3 s of wall time), past make bench's 2 s; auto takes it
     * once uncontended collectives have a faster path than chunk events. */
    TRUE, NULL};

/* algorithms.c: the collective algorithms, one const table entry each, and
 * their closed-form predictions.
 *
 * All of them are built from two patterns over "axes": an axis cuts the
 * group into lines (rings) of L members, each member knowing its position
 * and its two neighbours on its line.
 *
 * Phases (all-reduce, reduce-scatter, all-gather).  A reduce-scatter phase
 * along an axis splits each member's current region into L parts and runs
 * the classic ring over the line in L-1 steps: at step t the member at
 * position p sends part (p-1-t) mod L to p+1, which adds it, so after L-1
 * steps position p holds the sum of part p over its line.  An all-gather
 * phase runs the same ring with copies: at step t, p sends part (p-t) mod L.
 * A bidirectional phase halves every part and runs a second ring the other
 * way round on the second halves (p sends part (p+1+t), resp. (p+t), to
 * p-1).  All-reduce = reduce-scatter phases over the axes in order, then
 * all-gather phases in reverse order, each on the region the previous
 * phase left.
 *
 *   ring   one axis: the whole group in ring order, one direction;
 *   bidir  the same ring, both directions (groups of more than two);
 *   torus  the grid's axes (core, then x, y, z), one phase each,
 *          bidirectional where the line closes in as few hops as it steps
 *          (a wrapped ring), else one direction (a mesh line).
 * Ring order: for a grid, the boustrophedon (snake) order over its axes,
 * core fastest, so consecutive members are neighbours and, on a torus with
 * even sides, the last is a neighbour of the first; on a mesh without
 * wrap-around, a Hamiltonian cycle of the grid where one exists (lines.c);
 * for any other group, the order the caller listed.
 *
 * Broadcast.  A pipelined tree: the root's buffer is cut into P pieces, no
 * larger than a network chunk and at least four per tree level (at most
 * 4096, at most one per element); at step k the root sends piece k to its
 * children, and every other member receives piece k at its step k and
 * forwards it at step k+1.  Every member has one parent, so no member waits
 * on two streams (two trees, each waiting on the other's pieces to step,
 * would deadlock).  ring: one chain round the ring; bidir: two chains from
 * the root, one each way, each half-way round (on a ring that does not
 * close in one hop, from the root to either end); torus: the same along
 * the first axis, then from every member reached along the next, and so
 * on, with the core axis last so that the data crosses each chip's ICI
 * links once.
 *
 * p2p: send-recv, one message.
 *
 * hierarchical (groups spanning slices) is hierarchical.c's: an in-slice
 * algorithm of this table, then a ring across the slices over the DCN.
 *
 * Predictions (alpha-beta with the network's own message time: a message of
 * m bytes over h uncontended hops costs h alpha + m/B + (h-1) c/B, see
 * network.h, so alpha + m/B for ring neighbours):
 *   phases: the critical path of the steps (phases_predict); for the ring
 *           on N one-hop members it is 2(N-1)(alpha + S/(N B)) for
 *           all-reduce (docs/references.md), 2(N-1)(alpha + S/(2 N B)) for bidir,
 *           and for the 2-D torus
 *           2[(X-1)(alpha + S/(2 X B)) + (Y-1)(alpha + S/(2 X Y B))];
 *   broadcast: the first piece down the tree's slowest path, plus (P-1)
 *           pieces through its slowest link: D alpha + (P+D-1) p/B for a
 *           chain of D one-hop edges and pieces of p bytes;
 *   p2p: one message.
 * Where a step's messages share a link the edge's message is counted as
 * large as all of them together; the overlap of one message's latency with
 * another's transfer, which the events show, is not.
 * Invariant: for every phase step, the parts sent by a line's members are a
 * permutation of the line's parts, so every part is reduced exactly once
 * per member and then copied, never added, in gather phases. */
#include "collectives/collective-private.h"

#include <math.h>
#include <string.h>

#define MAX_PIECES 4096

/* Distinct region lengths an axis splits, with their part boundaries, so
 * that a step costs no 64-bit division. */
#define MAX_SHAPES 16

typedef struct {
  int L;
  gboolean bidir;
  int *pos;  /* member -> position on its line */
  int *next; /* member -> member at position + 1 (mod L) */
  int *prev; /* member -> member at position - 1 (mod L) */
  int tree_half;               /* broadcast: the members the tree reaches going + */
  int n_shapes;                /* -1: too many, divide each time */
  int64_t shape_len[MAX_SHAPES];
  int64_t *bound[MAX_SHAPES];  /* L + 1 part starts relative to the region */
  guint8 *shape;               /* member -> index in shape_len */
} Axis;

typedef struct {
  int axis;
  gboolean reduce;
  int first; /* first step of the phase */
} Phase;

typedef enum { KIND_PHASES, KIND_TREES, KIND_P2P } PlanKind;

struct PsCollPlan {
  const PsCollGroup *g;
  PsCollParams p;
  PlanKind kind;
  int n_axes;
  Axis ax[PS_COLL_MAX_AXES];
  /* phases */
  int n_phases;
  Phase ph[2 * PS_COLL_MAX_AXES];
  int total_steps;
  int64_t *reg_lo, *reg_len; /* region before the RS phase of axis a: [a * n + m] */
  /* trees */
  gboolean two_way;
  int pieces;
};

/* ---- small helpers -------------------------------------------------- */

static inline int mod(int a, int n)
{
  int r = a % n;
  return r < 0 ? r + n : r;
}


/* ---- message time (shared with collective.c for tests) -------------- */

int *ps_coll_route(const PsCollGroup *g, int a, int b, int *hops)
{
  int buf[16];
  *hops = ps_network_route_memo(g->net, g->dev[a], g->dev[b], buf, 16);
  int *r = g_new(int, *hops > 0 ? *hops : 1);
  if (*hops <= 16)
    memcpy(r, buf, sizeof(int) * (size_t)*hops);
  else
    ps_network_route_memo(g->net, g->dev[a], g->dev[b], r, *hops);
  return r;
}

int *ps_coll_routes(const PsCollGroup *g, const int *peer, const int **route, int *hops)
{
  size_t cap = (size_t)g->n * 4 + 64, len = 0;
  int *block = g_new(int, cap), buf[64];
  size_t *at = g_new(size_t, g->n);
  for (int m = 0; m < g->n; m++) {
    int h = ps_network_route_memo(g->net, g->dev[m], g->dev[peer[m]], buf, 64);
    if (len + (size_t)h > cap) {
      cap = MAX(2 * cap, len + (size_t)h);
      block = g_renew(int, block, cap);
    }
    if (h <= 64)
      memcpy(block + len, buf, sizeof(int) * (size_t)h);
    else
      ps_network_route_memo(g->net, g->dev[m], g->dev[peer[m]], block + len, h);
    at[m] = len;
    hops[m] = h;
    len += (size_t)h;
  }
  for (int m = 0; m < g->n; m++)
    route[m] = block + at[m];
  g_free(at);
  return block;
}

double ps_coll_message_s(const PsCollGroup *g, int a, int b, int64_t bytes, int64_t chunk)
{
  int h;
  g_autofree int *route = ps_coll_route(g, a, b, &h);
  return ps_coll_route_message_s(g, route, h, bytes, chunk);
}

double ps_coll_route_message_s(const PsCollGroup *g, const int *route, int h, int64_t bytes,
                               int64_t chunk)
{
  if (h == 0)
    return 0.0;
  PsLinkInfo stack_info[16];
  g_autofree PsLinkInfo *heap_info = h > 16 ? g_new(PsLinkInfo, h) : NULL;
  PsLinkInfo *info = heap_info ? heap_info : stack_info;
  gboolean uniform = TRUE;
  ps_network_link_info(g->net, route[0], &info[0]);
  for (int i = 0; i < h; i++) {
    if (i > 0)
      ps_network_link_info(g->net, route[i], &info[i]);
    if (info[i].lanes != 1 || info[i].bandwidth_Bps != info[0].bandwidth_Bps ||
        info[i].latency != info[0].latency)
      uniform = FALSE;
  }
  int64_t n = bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
  int64_t first = bytes < chunk ? bytes : chunk;
  if (uniform || n * h > 200000) {
    double lat = 0, bmin = info[0].bandwidth_Bps * info[0].lanes;
    for (int i = 0; i < h; i++) {
      lat += ps_time_to_s(info[i].latency);
      bmin = MIN(bmin, info[i].bandwidth_Bps * info[i].lanes);
    }
    return lat + (double)bytes / bmin + (h - 1) * (double)first / bmin;
  }
  /* the store-and-forward pipeline, chunk by chunk, lane by lane */
  int lanes_total = 0;
  for (int i = 0; i < h; i++)
    lanes_total += info[i].lanes;
  double *free_at = g_new0(double, lanes_total), done = 0;
  for (int64_t j = 0; j < n; j++) {
    int64_t cb = MIN(chunk, bytes - j * chunk);
    double t = 0;
    int base = 0;
    for (int i = 0; i < h; i++) {
      int best = base;
      for (int k = base + 1; k < base + info[i].lanes; k++)
        if (free_at[k] < free_at[best])
          best = k;
      double start = MAX(t, free_at[best]);
      free_at[best] = start + (double)cb / info[i].bandwidth_Bps;
      t = free_at[best] + ps_time_to_s(info[i].latency);
      base += info[i].lanes;
    }
    done = MAX(done, t);
  }
  g_free(free_at);
  return done;
}

/* ---- axes ----------------------------------------------------------- */

static void axis_alloc(Axis *x, int n)
{
  x->pos = g_new(int, n);
  x->next = g_new(int, n);
  x->prev = g_new(int, n);
}

static void axis_clear(Axis *x)
{
  g_free(x->pos);
  g_free(x->next);
  g_free(x->prev);
  for (int k = 0; k < x->n_shapes; k++)
    g_free(x->bound[k]);
  g_free(x->shape);
}

static void ring_axis(const PsCollGroup *g, Axis *x)
{
  int *order = ps_coll_ring_order(g);
  axis_alloc(x, g->n);
  x->L = g->n;
  for (int i = 0; i < g->n; i++) {
    int m = order[i];
    x->pos[m] = i;
    x->next[m] = order[(i + 1) % g->n];
    x->prev[m] = order[(i + g->n - 1) % g->n];
  }
  g_free(order);
}

void ps_coll_grid_line(const PsCollGroup *g, int a, int *pos, int *next, int *prev)
{
  int L = g->axis_size[a];
  for (int m = 0; m < g->n; m++) {
    int idx_next = 0, idx_prev = 0;
    for (int b = g->n_axes - 1; b >= 0; b--) {
      int c = g->grid_pos[m * g->n_axes + b];
      int cn = b == a ? mod(c + 1, L) : c, cp = b == a ? mod(c - 1, L) : c;
      idx_next = idx_next * g->axis_size[b] + cn;
      idx_prev = idx_prev * g->axis_size[b] + cp;
    }
    pos[m] = g->grid_pos[m * g->n_axes + a];
    next[m] = g->at[idx_next];
    prev[m] = g->at[idx_prev];
  }
}

/* The lines along the grid's axis a. */
static void grid_axis(const PsCollGroup *g, int a, Axis *x)
{
  axis_alloc(x, g->n);
  x->L = g->axis_size[a];
  ps_coll_grid_line(g, a, x->pos, x->next, x->prev);
}

static void grid_axes(const PsCollGroup *g, PsCollPlan *p)
{
  p->n_axes = g->n_axes;
  for (int a = 0; a < g->n_axes; a++)
    grid_axis(g, a, &p->ax[a]);
}

gboolean ps_coll_line_closes(const PsCollGroup *g, int L, const int *pos, const int *next)
{
  int m = 0, step_max = 0, close = 0;
  for (int i = 0; i < L; i++) {
    int h = ps_network_hops(g->net, g->dev[m], g->dev[next[m]]);
    if (pos[m] == L - 1)
      close = h;
    else
      step_max = MAX(step_max, h);
    m = next[m];
  }
  return close <= step_max;
}

/* Bidirectional only where the line closes in no more hops than it steps
 * (a mesh line's closing edge runs back over the links the other
 * direction would use). */
static gboolean axis_closes(const PsCollGroup *g, const Axis *x)
{
  return ps_coll_line_closes(g, x->L, x->pos, x->next);
}

/* ---- phases --------------------------------------------------------- */

static void phases_layout(PsCollPlan *p)
{
  const PsCollGroup *g = p->g;
  int n = g->n, na = p->n_axes;
  p->reg_lo = g_new(int64_t, (size_t)(na + 1) * n);
  p->reg_len = g_new(int64_t, (size_t)(na + 1) * n);
  for (int m = 0; m < n; m++) {
    p->reg_lo[m] = 0;
    p->reg_len[m] = p->p.count;
    for (int a = 0; a < na; a++)
      ps_coll_part_of(p->reg_lo[a * n + m], p->reg_len[a * n + m], p->ax[a].L, p->ax[a].pos[m],
              &p->reg_lo[(a + 1) * n + m], &p->reg_len[(a + 1) * n + m]);
  }
  for (int a = 0; a < na; a++) {
    Axis *x = &p->ax[a];
    x->shape = g_new(guint8, n);
    x->n_shapes = 0;
    for (int m = 0; m < n && x->n_shapes >= 0; m++) {
      int64_t len = p->reg_len[a * n + m];
      int k = 0;
      while (k < x->n_shapes && x->shape_len[k] != len)
        k++;
      if (k == x->n_shapes) {
        if (k == MAX_SHAPES) {
          for (int j = 0; j < x->n_shapes; j++)
            g_free(x->bound[j]);
          x->n_shapes = -1;
          break;
        }
        x->shape_len[k] = len;
        x->bound[k] = g_new(int64_t, x->L + 1);
        for (int j = 0; j <= x->L; j++)
          x->bound[k][j] = len * j / x->L;
        x->n_shapes++;
      }
      x->shape[m] = (guint8)k;
    }
    if (x->n_shapes < 0)
      x->n_shapes = 0, x->shape_len[0] = -1;
  }
  int s = 0;
  gboolean rs = p->p.op == PS_COLL_ALL_REDUCE || p->p.op == PS_COLL_REDUCE_SCATTER;
  gboolean ag = p->p.op == PS_COLL_ALL_REDUCE || p->p.op == PS_COLL_ALL_GATHER;
  if (rs)
    for (int a = 0; a < na; a++) {
      if (p->ax[a].L < 2)
        continue;
      p->ph[p->n_phases++] = (Phase){a, TRUE, s};
      s += p->ax[a].L - 1;
    }
  if (ag)
    for (int a = na - 1; a >= 0; a--) {
      if (p->ax[a].L < 2)
        continue;
      p->ph[p->n_phases++] = (Phase){a, FALSE, s};
      s += p->ax[a].L - 1;
    }
  p->total_steps = s;
}

static void phases_step(const PsCollPlan *p, int m, int s, PsCollStep *out)
{
  int i = p->n_phases - 1;
  while (p->ph[i].first > s)
    i--;
  const Phase *ph = &p->ph[i];
  const Axis *x = &p->ax[ph->axis];
  int n = p->g->n, L = x->L, pos = x->pos[m], t = s - ph->first;
  int64_t lo = p->reg_lo[ph->axis * n + m], len = p->reg_len[ph->axis * n + m];
  out->n_send = 0;
  out->n_recv = 0;
  int ndir = x->bidir ? 2 : 1;
  const int64_t *bound = x->n_shapes > 0 ? x->bound[x->shape[m]] : NULL;
  for (int k = 0; k < ndir; k++) {
    int dir = k == 0 ? 1 : -1;
    int j = ph->reduce ? (dir > 0 ? pos - 1 - t : pos + 1 + t) : (dir > 0 ? pos - t : pos + t);
    j = j < 0 ? j + L : j >= L ? j - L : j; /* |j| < 2L */
    int64_t plo, plen;
    if (bound) {
      plo = lo + bound[j];
      plen = bound[j + 1] - bound[j];
    } else {
      ps_coll_part_of(lo, len, L, j, &plo, &plen);
    }
    if (x->bidir) {
      int64_t half = plen / 2;
      if (dir > 0) {
        plen = half;
      } else {
        plo += half;
        plen -= half;
      }
    }
    PsCollSend *snd = &out->send[out->n_send++];
    snd->peer = dir > 0 ? x->next[m] : x->prev[m];
    snd->peer_step = s;
    snd->off = plo;
    snd->len = plen;
    snd->op = ph->reduce ? PS_XFER_ADD : PS_XFER_COPY;
    out->n_recv++;
  }
}

/* The slowest link's bandwidth (times its lanes) along a route. */
static double route_bandwidth(const PsCollGroup *g, const int *route, int h)
{
  double bw = INFINITY;
  for (int i = 0; i < h; i++) {
    PsLinkInfo info;
    ps_network_link_info(g->net, route[i], &info);
    bw = MIN(bw, info.bandwidth_Bps * info.lanes);
  }
  return bw;
}

/* How many times its own size a message on route counts for, from the
 * step's load (messages) on each link: over links of one kind, the
 * busiest link's load, and the message is timed as that many times its
 * size; over a route that crosses kinds (*mixed: the ICI, PCIe, NIC and
 * leaf links of a DCN route), the largest load_l x B_min / B_l, so a fast
 * leaf uplink that carries many messages counts for what it takes at the
 * route's slowest bandwidth, and the message is timed at its own size
 * (its chunks pipeline across the hops) plus the others' bytes through
 * that bottleneck. */
static double route_share(const PsCollGroup *g, const int *route, int h, const int *load,
                          gboolean *mixed_out)
{
  int share = 1;
  gboolean mixed = FALSE;
  PsLinkInfo first;
  for (int j = 0; j < h; j++) {
    share = MAX(share, load[route[j]]);
    PsLinkInfo info;
    ps_network_link_info(g->net, route[j], j == 0 ? &first : &info);
    mixed = mixed || (j > 0 && info.ends.kind != first.ends.kind);
  }
  *mixed_out = mixed;
  if (!mixed)
    return share;
  double bmin = route_bandwidth(g, route, h), eff = 1.0;
  for (int j = 0; j < h; j++) {
    PsLinkInfo info;
    ps_network_link_info(g->net, route[j], &info);
    eff = MAX(eff, load[route[j]] * bmin / (info.bandwidth_Bps * info.lanes));
  }
  return eff;
}

/* The link of route that limits a message on it: the one whose step load
 * over its bandwidth is largest (the first on ties). */
static int route_bottleneck(const PsCollGroup *g, const int *route, int h, const int *load)
{
  int best = h > 0 ? route[0] : -1;
  double worst = -1;
  for (int j = 0; j < h; j++) {
    PsLinkInfo info;
    ps_network_link_info(g->net, route[j], &info);
    double t = load[route[j]] / (info.bandwidth_Bps * info.lanes);
    if (t > worst) {
      worst = t;
      best = route[j];
    }
  }
  return best;
}

/* Messages of one phase step that cross each link, over every line, from
 * the routes of each member to its next (k = 0) and previous (k = 1)
 * member: route[k][m], hops[k][m]. */
static int *phase_loads(const PsCollPlan *p, const Axis *x, const int **route[2],
                        int *hops[2])
{
  const PsCollGroup *g = p->g;
  int *load = g_new0(int, ps_network_n_links(g->net));
  for (int m = 0; m < g->n; m++)
    for (int k = 0; k < (x->bidir ? 2 : 1); k++)
      for (int i = 0; i < hops[k][m]; i++)
        load[route[k][m][i]]++;
  return load;
}

/* phase_steps' inner loops, two members at a time so that a compiler can
 * pair them in vector registers (the same sums and maxima as one at a
 * time).  Leaving: each member's messages start at the later of its end v
 * and its link's free time f, which moves on by its serialization s; they
 * arrive at start + t, in a. */
static void steps_leave(int n, const double *restrict v, double *restrict f,
                        const double *restrict s, const double *restrict t, double *restrict a)
{
  int i = 0;
  for (; i + 2 <= n; i += 2) {
    double s0 = MAX(v[i], f[i]), s1 = MAX(v[i + 1], f[i + 1]);
    f[i] = s0 + s[i];
    f[i + 1] = s1 + s[i + 1];
    a[i] = s0 + t[i];
    a[i + 1] = s1 + t[i + 1];
  }
  for (; i < n; i++) {
    double s0 = MAX(v[i], f[i]);
    f[i] = s0 + s[i];
    a[i] = s0 + t[i];
  }
}

/* Hearing: w = max(v, a), or with v NULL w = max(w, a). */
static void steps_hear(int n, double *restrict w, const double *restrict v,
                       const double *restrict a)
{
  const double *x = v ? v : w;
  int i = 0;
  for (; i + 2 <= n; i += 2) {
    double w0 = MAX(x[i], a[i]), w1 = MAX(x[i + 1], a[i + 1]);
    w[i] = w0;
    w[i + 1] = w1;
  }
  for (; i < n; i++)
    w[i] = MAX(x[i], a[i]);
}

/* The L - 1 steps of one phase along axis x (phases_predict's recurrence),
 * advancing each member's end V[m], from each member's message time
 * T[k][m] and serialization ser[k][m] (k = 0: to its next member, 1: to
 * its previous, when bidirectional).  A member's messages start no sooner
 * than its route's bottleneck link bn[k][m] is free (lfree, by link, kept
 * from phase to phase: a reduce-scatter's last message may still hold the
 * link when the all-gather's first would leave), and leave it busy until
 * their serialization ends.  The members are laid out line by line in
 * position order, so that a member's previous and next are its neighbours
 * in memory: the same sums and maxima as member by member, in loops a
 * compiler can vectorize. */
static void phase_steps(const Axis *x, int n, double *V, double *const T[2],
                        double *const ser[2], int *const bn[2], double *lfree)
{
  int L = x->L, ndir = x->bidir ? 2 : 1, *ord = g_new(int, n), len = 0;
  for (int m = 0; m < n; m++)
    if (x->pos[m] == 0)
      for (int i = 0, a = m; i < L; i++, a = x->next[a])
        ord[len++] = a;
  g_assert(len == n);
  double *buf = g_new(double, (size_t)n * (2 + 4 * (size_t)ndir));
  double *v = buf, *w = buf + n, *pt[2], *ps[2], *pf[2], *pa[2];
  for (int k = 0; k < ndir; k++) {
    pt[k] = buf + (size_t)n * (2 + 4 * k);
    ps[k] = pt[k] + n;
    pf[k] = ps[k] + n;
    pa[k] = pf[k] + n;
    for (int i = 0; i < n; i++) {
      pt[k][i] = T[k][ord[i]];
      ps[k][i] = ser[k][ord[i]];
      pf[k][i] = bn[k][ord[i]] >= 0 ? lfree[bn[k][ord[i]]] : 0;
    }
  }
  for (int i = 0; i < n; i++)
    v[i] = V[ord[i]];
  for (int step = 0; step < L - 1; step++) {
    for (int k = 0; k < ndir; k++)
      steps_leave(n, v, pf[k], ps[k], pt[k], pa[k]);
    for (int b = 0; b < n; b += L) {
      /* the line's first and last members wrap round */
      w[b] = MAX(v[b], pa[0][b + L - 1]);
      w[b + L - 1] = MAX(v[b + L - 1], pa[0][b + L - 2]);
      steps_hear(L - 2, w + b + 1, v + b + 1, pa[0] + b);
      if (ndir == 2) {
        w[b] = MAX(w[b], pa[1][b + 1]);
        w[b + L - 1] = MAX(w[b + L - 1], pa[1][b]);
        steps_hear(L - 2, w + b + 1, NULL, pa[1] + b + 2);
      }
    }
    double *tmp = v;
    v = w;
    w = tmp;
  }
  for (int i = 0; i < n; i++)
    V[ord[i]] = v[i];
  for (int k = 0; k < ndir; k++)
    for (int i = 0; i < n; i++)
      if (bn[k][ord[i]] >= 0)
        lfree[bn[k][ord[i]]] = MAX(lfree[bn[k][ord[i]]], pf[k][i]);
  g_free(buf);
  g_free(ord);
}

/* The alpha-beta critical path of the step graph: member m ends step s
 * when it has ended step s-1 and the step-s message from each neighbour it
 * hears from has arrived.  A message leaves when its sender has ended step
 * s-1 and the sender's previous message on that link has been serialized
 * (links are FIFO), and takes its uncontended time, counted as large as all
 * the step's messages that share its busiest link (the two cores of a v2/v3
 * chip each run a line over the chip's ICI links):
 *   L(a, s) = max(C(a, s-1), L(a, s-1) + ser(a)),
 *   C(m, s) = max(C(m, s-1), L(prev, s) + T(prev -> m), L(next, s) + T(next -> m)).
 * On a ring of N one-hop members it is 2(N-1)(alpha + S/(N B)); where one
 * edge is slower it sees that the slow edge delays only the members behind
 * it, and where edges are faster that the links still carry every step. */
static double phases_predict(const PsCollPlan *p)
{
  const PsCollGroup *g = p->g;
  int n = g->n;
  double *V = g_new0(double, n);
  double *T[2], *ser[2];
  const int **route[2];
  int *hops[2], *block[2] = {NULL, NULL}, *bn[2];
  double *lfree = g_new0(double, ps_network_n_links(g->net));
  for (int k = 0; k < 2; k++) {
    bn[k] = g_new(int, n);
    T[k] = g_new(double, n);
    ser[k] = g_new(double, n);
    route[k] = g_new0(const int *, n);
    hops[k] = g_new0(int, n);
  }
  for (int i = 0; i < p->n_phases; i++) {
    const Axis *x = &p->ax[p->ph[i].axis];
    int ndir = x->bidir ? 2 : 1;
    /* each route once per phase: on a pod's group they are most of the
     * prediction's work */
    for (int k = 0; k < ndir; k++) {
      g_free(block[k]);
      block[k] = ps_coll_routes(g, k == 0 ? x->next : x->prev, route[k], hops[k]);
    }
    int *load = phase_loads(p, x, route, hops);
    for (int m = 0; m < n; m++) {
      int64_t part = p->reg_len[p->ph[i].axis * n + m] / x->L;
      if (x->bidir)
        part = (part + 1) / 2;
      for (int k = 0; k < ndir; k++) {
        int h = hops[k][m];
        const int *r = route[k][m];
        gboolean mixed;
        double share = route_share(g, r, h, load, &mixed);
        bn[k][m] = route_bottleneck(g, r, h, load);
        int64_t own = part * p->p.elem_bytes;
        double bw = route_bandwidth(g, r, h);
        if (!mixed) {
          int64_t bytes = own * (int64_t)share;
          T[k][m] = ps_coll_route_message_s(g, r, h, bytes, p->p.chunk_bytes);
          ser[k][m] = (double)bytes / bw;
        } else {
          /* its own pipeline, then the others' bytes through the bottleneck */
          T[k][m] = ps_coll_route_message_s(g, r, h, own, p->p.chunk_bytes) + (share - 1) * own / bw;
          ser[k][m] = share * own / bw;
        }
      }
    }
    g_free(load);
    /* every member level and every edge alike: each step adds one edge */
    gboolean uniform = TRUE;
    for (int m = 0; m < n && uniform; m++)
      uniform = V[m] == V[0] && T[0][m] == T[0][0] && (!x->bidir || T[1][m] == T[0][0]);
    if (uniform) {
      for (int m = 0; m < n; m++)
        V[m] += (x->L - 1) * T[0][0];
      continue;
    }
    phase_steps(x, n, V, T, ser, bn, lfree);
  }
  double total = 0;
  for (int m = 0; m < n; m++)
    total = MAX(total, V[m]);
  g_free(V);
  g_free(lfree);
  for (int k = 0; k < 2; k++) {
    g_free(bn[k]);
    g_free(T[k]);
    g_free(ser[k]);
    g_free(block[k]);
    g_free(route[k]);
    g_free(hops[k]);
  }
  return total;
}

static void phases_block(const PsCollPlan *p, int m, int64_t *off, int64_t *len)
{
  *off = p->reg_lo[p->n_axes * p->g->n + m];
  *len = p->reg_len[p->n_axes * p->g->n + m];
}

/* ---- trees (broadcast) ---------------------------------------------- */

/* Highest axis on which m differs from the root, or 0 for the root. */
static int tree_top(const PsCollPlan *p, int m)
{
  for (int a = p->n_axes - 1; a >= 0; a--)
    if (p->ax[a].pos[m] != p->ax[a].pos[p->p.root])
      return a;
  return 0;
}

/* Along an axis the tree reaches the members d = 1 .. half positions after
 * the root going +, and (two-way) the rest going -; a member continues the
 * way it was reached, and one level with the root on an axis starts both.
 * half is L/2 on a line that closes in one step (a ring), else the members
 * above the root (a mesh line is split at the root, never crossed). */
static int tree_children(const PsCollPlan *p, int m, int *out)
{
  int n = 0, root = p->p.root;
  for (int b = tree_top(p, m); b < p->n_axes; b++) {
    const Axis *x = &p->ax[b];
    int L = x->L;
    if (L < 2)
      continue;
    int d = mod(x->pos[m] - x->pos[root], L), half = x->tree_half;
    if (d == 0) {
      out[n++] = x->next[m];
      if (L - 1 > half)
        out[n++] = x->prev[m];
    } else if (d <= half) {
      if (d + 1 <= half)
        out[n++] = x->next[m];
    } else if (d - 1 > half) {
      out[n++] = x->prev[m];
    }
  }
  return n;
}

/* Levels below the root. */
static int tree_depth(const PsCollPlan *p)
{
  const PsCollGroup *g = p->g;
  int *level = g_new0(int, g->n), *queue = g_new(int, g->n), head = 0, tail = 0, depth = 0;
  queue[tail++] = p->p.root;
  while (head < tail) {
    int m = queue[head++], kids[PS_COLL_MAX_SENDS];
    int nk = tree_children(p, m, kids);
    for (int i = 0; i < nk; i++) {
      level[kids[i]] = level[m] + 1;
      depth = MAX(depth, level[kids[i]]);
      queue[tail++] = kids[i];
    }
  }
  g_assert(tail == g->n);
  g_free(level);
  g_free(queue);
  return depth;
}

static void trees_layout(PsCollPlan *p)
{
  for (int a = 0; a < p->n_axes; a++) {
    Axis *x = &p->ax[a];
    if (!p->two_way)
      x->tree_half = x->L - 1;
    else if (x->L > 2 && axis_closes(p->g, x))
      x->tree_half = x->L / 2;
    else
      x->tree_half = x->L - 1 - x->pos[p->p.root];
  }
  /* pieces no larger than a chunk, and at least four per level so that a
   * small buffer still pipelines down a deep tree: T = D alpha + S/B +
   * (D-1) S/(P B) falls with P */
  int64_t chunk_elems = MAX(1, p->p.chunk_bytes / p->p.elem_bytes);
  int64_t pieces = (p->p.count + chunk_elems - 1) / chunk_elems;
  pieces = MAX(pieces, 4 * (int64_t)tree_depth(p));
  pieces = MIN(pieces, p->p.count);
  p->pieces = (int)CLAMP(pieces, 1, MAX_PIECES);
}

static void trees_step(const PsCollPlan *p, int m, int k, PsCollStep *out)
{
  out->n_send = 0;
  out->n_recv = 0;
  gboolean root = m == p->p.root;
  int piece = root ? k : k - 1;
  if (piece >= 0 && piece < p->pieces) {
    int kids[PS_COLL_MAX_SENDS];
    int nk = tree_children(p, m, kids);
    int64_t plo, plen;
    ps_coll_part_of(0, p->p.count, p->pieces, piece, &plo, &plen);
    for (int i = 0; i < nk; i++)
      out->send[out->n_send++] = (PsCollSend){kids[i], piece, plo, plen, PS_XFER_COPY};
  }
  if (!root && k < p->pieces)
    out->n_recv = 1;
}

static double trees_predict(const PsCollPlan *p)
{
  const PsCollGroup *g = p->g;
  int64_t piece = (p->p.count + p->pieces - 1) / p->pieces * p->p.elem_bytes;
  /* the first piece down every path, members in order of depth */
  double *arrive = g_new0(double, g->n), slow = 0, first = 0;
  int *queue = g_new(int, g->n), head = 0, tail = 0;
  queue[tail++] = p->p.root;
  while (head < tail) {
    int m = queue[head++], kids[PS_COLL_MAX_SENDS];
    int nk = tree_children(p, m, kids);
    for (int i = 0; i < nk; i++) {
      double e = ps_coll_message_s(g, m, kids[i], piece, p->p.chunk_bytes);
      double e0 = ps_coll_message_s(g, m, kids[i], 0, p->p.chunk_bytes);
      /* one piece's serialization through this edge's slowest link */
      slow = MAX(slow, e - e0);
      arrive[kids[i]] = arrive[m] + e;
      first = MAX(first, arrive[kids[i]]);
      queue[tail++] = kids[i];
    }
  }
  g_assert(tail == g->n);
  g_free(arrive);
  g_free(queue);
  return first + (p->pieces - 1) * slow;
}

/* ---- p2p ------------------------------------------------------------ */

static void p2p_step(const PsCollPlan *p, int m, int s, PsCollStep *out)
{
  out->n_send = 0;
  out->n_recv = 0;
  if (m == p->p.root)
    out->send[out->n_send++] = (PsCollSend){1 - m, 0, 0, p->p.count, PS_XFER_COPY};
  else
    out->n_recv = 1;
}

static double p2p_predict(const PsCollPlan *p)
{
  int r = p->p.root;
  return ps_coll_message_s(p->g, r, 1 - r, p->p.count * p->p.elem_bytes, p->p.chunk_bytes);
}

/* ---- plans ---------------------------------------------------------- */

static PsCollPlan *plan_alloc(const PsCollGroup *g, const PsCollParams *prm)
{
  PsCollPlan *p = g_new0(PsCollPlan, 1);
  p->g = g;
  p->p = *prm;
  return p;
}

static void plan_finish(PsCollPlan *p)
{
  if (p->p.op == PS_COLL_BROADCAST) {
    p->kind = KIND_TREES;
    trees_layout(p);
  } else if (p->p.op == PS_COLL_SEND_RECV) {
    p->kind = KIND_P2P;
  } else {
    p->kind = KIND_PHASES;
    phases_layout(p);
  }
}

static void plan_free(PsCollPlan *p)
{
  if (!p)
    return;
  for (int a = 0; a < p->n_axes; a++)
    axis_clear(&p->ax[a]);
  g_free(p->reg_lo);
  g_free(p->reg_len);
  g_free(p);
}

static PsCollPlan *ring_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  PsCollPlan *p = plan_alloc(g, prm);
  p->n_axes = 1;
  ring_axis(g, &p->ax[0]);
  p->ax[0].bidir = FALSE;
  p->two_way = FALSE;
  plan_finish(p);
  return p;
}

static PsCollPlan *bidir_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  PsCollPlan *p = plan_alloc(g, prm);
  p->n_axes = 1;
  ring_axis(g, &p->ax[0]);
  p->ax[0].bidir = g->n > 2;
  p->two_way = TRUE;
  plan_finish(p);
  return p;
}

static PsCollPlan *torus_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  PsCollPlan *p = plan_alloc(g, prm);
  grid_axes(g, p);
  if (prm->op == PS_COLL_BROADCAST && p->n_axes > 1 && g->axis_coord[0] == 0) {
    /* a broadcast crosses the chips first, then each chip's cores: so the
     * ICI links carry the data once per chip, not once per core */
    Axis core = p->ax[0];
    memmove(&p->ax[0], &p->ax[1], sizeof(Axis) * (size_t)(p->n_axes - 1));
    p->ax[p->n_axes - 1] = core;
  }
  for (int a = 0; a < p->n_axes; a++)
    p->ax[a].bidir = p->ax[a].L > 2 && axis_closes(g, &p->ax[a]);
  p->two_way = TRUE;
  plan_finish(p);
  return p;
}

/* The group's axis along its slices (the last, when it spans slices), or -1. */
static int slice_axis(const PsCollGroup *g)
{
  int a = g->n_axes - 1;
  return a >= 0 && g->axis_coord[a] == PS_GEOMETRY_SLICE_AXIS ? a : -1;
}

static PsCollPlan *p2p_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  PsCollPlan *p = plan_alloc(g, prm);
  plan_finish(p);
  return p;
}

static int plan_n_steps(const PsCollPlan *p, int m)
{
  switch (p->kind) {
  case KIND_PHASES:
    return p->total_steps;
  case KIND_TREES:
    return m == p->p.root ? p->pieces : p->pieces + 1;
  case KIND_P2P:
    return 1;
  }
  g_assert_not_reached();
}

static void plan_step(const PsCollPlan *p, int m, int s, PsCollStep *out)
{
  switch (p->kind) {
  case KIND_PHASES:
    phases_step(p, m, s, out);
    return;
  case KIND_TREES:
    trees_step(p, m, s, out);
    return;
  case KIND_P2P:
    p2p_step(p, m, s, out);
    return;
  }
  g_assert_not_reached();
}

/* plan_step's n_recv alone: a phase's steps each hear from one neighbour
 * per direction. */
static int plan_n_recv(const PsCollPlan *p, int m, int s)
{
  if (p->kind == KIND_PHASES) {
    int i = p->n_phases - 1;
    while (p->ph[i].first > s)
      i--;
    return p->ax[p->ph[i].axis].bidir ? 2 : 1;
  }
  PsCollStep st;
  plan_step(p, m, s, &st);
  return st.n_recv;
}

static int plan_block(const PsCollPlan *p, int m, int piece, int64_t *off, int64_t *len)
{
  if (p->kind == KIND_PHASES) {
    phases_block(p, m, off, len);
  } else {
    *off = 0;
    *len = p->p.count;
  }
  return 1;
}

static double plan_predict(const PsCollPlan *p)
{
  switch (p->kind) {
  case KIND_PHASES:
    return phases_predict(p);
  case KIND_TREES:
    return trees_predict(p);
  case KIND_P2P:
    return p2p_predict(p);
  }
  g_assert_not_reached();
}

/* ---- the table ------------------------------------------------------ */

static const char *ring_unsupported(const PsCollGroup *g, PsCollOp op)
{
  return op == PS_COLL_SEND_RECV ? "send-recv is point to point: use algorithm p2p or auto"
                                 : NULL;
}

static const char *torus_unsupported(const PsCollGroup *g, PsCollOp op)
{
  if (op == PS_COLL_SEND_RECV)
    return "send-recv is point to point: use algorithm p2p or auto";
  if (!g->is_grid)
    return "the group's (core, x, y, z) coordinates do not form a box, so it has no torus "
           "axes; use ring or bidir";
  return ps_coll_spans_slices(g);
}

const char *ps_coll_spans_slices(const PsCollGroup *g)
{
  return slice_axis(g) >= 0
             ? "the group spans slices, which no torus joins: use hierarchical (or ring, bidir)"
             : NULL;
}

static const char *p2p_unsupported(const PsCollGroup *g, PsCollOp op)
{
  return op == PS_COLL_SEND_RECV ? NULL : "p2p only runs send-recv";
}

static const PsCollAlgo ring_algo = {
    "ring", "unidirectional ring over the group (snake order on a grid; a Hamiltonian cycle on a mesh)",
    ring_unsupported,
    ring_plan, plan_free, plan_n_steps, plan_step, plan_n_recv, plan_block, plan_predict, FALSE,
    NULL, NULL};

static const PsCollAlgo bidir_algo = {
    "bidir", "two rings, one each way, each carrying half the data", ring_unsupported,
    bidir_plan, plan_free, plan_n_steps, plan_step, plan_n_recv, plan_block, plan_predict, FALSE,
    NULL, NULL};

static const PsCollAlgo torus_algo = {
    "torus",
    "dimension by dimension: reduce-scatter along each torus axis in turn, all-gather back "
    "(bidirectional rings on wrapped axes)",
    torus_unsupported, torus_plan, plan_free, plan_n_steps, plan_step, plan_n_recv, plan_block,
    plan_predict, FALSE, NULL, NULL};

static const PsCollAlgo p2p_algo = {"p2p", "one message from the sender to the receiver",
                                    p2p_unsupported, p2p_plan, plan_free, plan_n_steps,
                                    plan_step, plan_n_recv, plan_block, plan_predict, FALSE,
                                    NULL, NULL};

/* auto keeps the first of equal predictions: multiring, which equals torus
 * on a group with one ring dimension, after it */
const PsCollAlgo *const ps_coll_algos[] = {&ring_algo, &bidir_algo, &torus_algo,
                                           &ps_coll_multiring_algo, &ps_coll_butterfly_algo,
                                           &p2p_algo, &ps_coll_hierarchical_algo, NULL};

const PsCollAlgo *ps_coll_algo_find(const char *name)
{
  for (int i = 0; ps_coll_algos[i]; i++)
    if (strcmp(ps_coll_algos[i]->name, name) == 0)
      return ps_coll_algos[i];
  return NULL;
}

char **ps_coll_algo_names(void)
{
  GPtrArray *names = g_ptr_array_new();
  for (int i = 0; ps_coll_algos[i]; i++)
    g_ptr_array_add(names, g_strdup(ps_coll_algos[i]->name));
  g_ptr_array_add(names, g_strdup("auto"));
  g_ptr_array_add(names, NULL);
  return (char **)g_ptr_array_free(names, FALSE);
}

const char *ps_coll_algo_summary(const char *name)
{
  if (strcmp(name, "auto") == 0)
    return "the algorithm with the smallest closed-form prediction for this group";
  const PsCollAlgo *a = ps_coll_algo_find(name);
  return a ? a->summary : NULL;
}

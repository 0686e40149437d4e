/* butterfly.c: "butterfly", the recursive-doubling all-reduce for small
 * buffers, and its closed form; a table entry beside algorithms.c's.
 *
 * A ring all-reduce takes 2(N-1) steps whatever the size, so a few
 * kilobytes over a group of N pay 2(N-1) hop latencies: a batch-norm
 * statistic reduced over 4 chips, 6 of them.  Recursive doubling (Thakur,
 * Rabenseifner and Gropp, "Optimization of Collective Communication
 * Operations in MPICH", IJHPCA 2005) takes log2 N steps: at step s the
 * member at ring position p exchanges its whole buffer with the member at
 * position p XOR 2^s and adds what it receives, so after step s each
 * holds the sum over its block of 2^(s+1) positions, and after log2 N steps
 * the sum over all.  On a grid group a position is the grid index (axis 0
 * fastest; every axis of a power-of-two group is a power of two), so
 * step s's partners differ in one bit of one axis's coordinate and lie
 * along that axis, 2^k chips apart (step 0: the two cores of a chip, or
 * neighbours); on any other group, positions follow the order listed.  It sends N
 * times the bytes a ring does (the whole buffer log2 N times against
 * 2(N-1)/N of it), so "auto" takes it only where latency rules: small
 * buffers over groups of a few members.
 *
 * Closed form: step s costs the slowest of its messages, each the
 * network's own store-and-forward time over its route (h alpha + m/B +
 * (h-1) c/B) with m counted as large as all the step's messages that
 * share its busiest link; the total is their sum (every member waits for
 * its partner at every step, so the steps do not overlap).
 *
 * Numerics: both partners add the same two values (a + b and b + a are
 * the same float), so every member ends with bit-identical sums.
 *
 * Invariant: N is a power of two; every step, every member sends exactly
 * one message and receives exactly one, from the member it sends to. */
#include "collectives/collective-private.h"

#include <math.h>

typedef struct {
  const PsCollGroup *g;
  PsCollParams p;
  int steps;  /* log2 N */
  int *order; /* position -> member */
  int *pos;   /* member -> position */
} BflyPlan;

static int partner(const BflyPlan *p, int m, int s)
{
  return p->order[p->pos[m] ^ (1 << s)];
}

static void bfly_step(const PsCollPlan *plan, int m, int s, PsCollStep *out)
{
  const BflyPlan *p = (const BflyPlan *)plan;
  out->n_send = 1;
  out->send[0] = (PsCollSend){partner(p, m, s), s, 0, p->p.count, PS_XFER_ADD};
  out->n_recv = 1;
}

static int bfly_n_recv(const PsCollPlan *plan, int m, int s)
{
  (void)plan, (void)m, (void)s;
  return 1;
}

static int bfly_n_steps(const PsCollPlan *plan, int m)
{
  (void)m;
  return ((const BflyPlan *)plan)->steps;
}

static int bfly_block(const PsCollPlan *plan, int m, int piece, int64_t *off, int64_t *len)
{
  (void)m, (void)piece;
  *off = 0;
  *len = ((const BflyPlan *)plan)->p.count;
  return 1;
}

/* What a prediction reads per link: messages this step, and the figures
 * of the links the routes cross. */
typedef struct {
  int *load;      /* link -> messages of this step over it */
  double *lat;    /* link -> latency, s (NAN: not read yet) */
  double *bw;     /* link -> bandwidth over its lanes, B/s */
} Links;

static void link_read(const PsCollGroup *g, Links *L, int link)
{
  if (!isnan(L->lat[link]))
    return;
  PsLinkInfo info;
  ps_network_link_info(g->net, link, &info);
  L->lat[link] = ps_time_to_s(info.latency);
  L->bw[link] = info.bandwidth_Bps * info.lanes;
}

/* The slowest message of step s: the network's store-and-forward time
 * over its route, h alpha + m/B + (h-1) c/B with B its slowest link
 * (network.h), m counted as large as all the step's messages over its
 * busiest link.  In closed form, never chunk by chunk: a group of
 * thousands weighs it for every buffer size auto meets. */
static double step_s(const BflyPlan *p, int s, int64_t bytes, Links *L)
{
  const PsCollGroup *g = p->g;
  const int **route = g_new(const int *, g->n);
  int *hops = g_new(int, g->n), *peer = g_new(int, g->n);
  for (int m = 0; m < g->n; m++)
    peer[m] = partner(p, m, s);
  int *block = ps_coll_routes(g, peer, route, hops);
  for (int m = 0; m < g->n; m++)
    for (int i = 0; i < hops[m]; i++)
      L->load[route[m][i]]++;
  double worst = 0, first = (double)MIN(p->p.chunk_bytes, bytes);
  for (int m = 0; m < g->n; m++) {
    int share = 1;
    double lat = 0, bmin = INFINITY;
    for (int i = 0; i < hops[m]; i++) {
      int k = route[m][i];
      link_read(g, L, k);
      share = MAX(share, L->load[k]);
      lat += L->lat[k];
      bmin = MIN(bmin, L->bw[k]);
    }
    if (hops[m] > 0)
      worst = MAX(worst, lat + ((double)bytes * share + (hops[m] - 1) * first) / bmin);
  }
  for (int m = 0; m < g->n; m++) {
    for (int i = 0; i < hops[m]; i++)
      L->load[route[m][i]] = 0;
  }
  g_free(block);
  g_free(peer);
  g_free(route);
  g_free(hops);
  return worst;
}

static double bfly_predict(const PsCollPlan *plan)
{
  const BflyPlan *p = (const BflyPlan *)plan;
  int64_t bytes = p->p.count * p->p.elem_bytes;
  int n = ps_network_n_links(p->g->net);
  Links L = {g_new0(int, n), g_new(double, n), g_new(double, n)};
  for (int k = 0; k < n; k++)
    L.lat[k] = NAN;
  double t = 0;
  for (int s = 0; s < p->steps; s++)
    t += step_s(p, s, bytes, &L);
  g_free(L.load);
  g_free(L.lat);
  g_free(L.bw);
  return t;
}

static PsCollPlan *bfly_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  BflyPlan *p = g_new0(BflyPlan, 1);
  p->g = g;
  p->p = *prm;
  while ((1 << p->steps) < g->n)
    p->steps++;
  if (g->is_grid) {
    p->order = g_new(int, g->n);
    for (int i = 0; i < g->n; i++)
      p->order[i] = g->at[i];
  } else {
    p->order = ps_coll_ring_order(g);
  }
  p->pos = g_new(int, g->n);
  for (int i = 0; i < g->n; i++)
    p->pos[p->order[i]] = i;
  return (PsCollPlan *)p;
}

static void bfly_free(PsCollPlan *plan)
{
  BflyPlan *p = (BflyPlan *)plan;
  if (!p)
    return;
  g_free(p->order);
  g_free(p->pos);
  g_free(p);
}

static const char *bfly_unsupported(const PsCollGroup *g, PsCollOp op)
{
  if (op != PS_COLL_ALL_REDUCE)
    return "butterfly runs all-reduce only";
  if (g->n < 2 || (g->n & (g->n - 1)) != 0)
    return "butterfly needs a group of a power of two members; use ring";
  return NULL;
}

const PsCollAlgo ps_coll_butterfly_algo = {
    "butterfly",
    "recursive doubling: log2 N steps, each exchanging the whole buffer with the member "
    "2^s ring positions away (for small buffers: fewest latencies)",
    bfly_unsupported, bfly_plan, bfly_free, bfly_n_steps, bfly_step, bfly_n_recv, bfly_block,
    bfly_predict, FALSE, NULL, NULL};

/* hierarchical.c: "hierarchical", the all-reduce, reduce-scatter and
 * all-gather of a group that spans slices, as XLA reduces across slices,
 * and its closed form; a table entry beside algorithms.c's.
 *
 * The group is a grid whose last axis is the slice (collective-private.h),
 * so each slice holds the same P places and a member is (slice, its grid
 * index within the slice).  The algorithm runs three phases:
 *   1. a reduce-scatter within each slice by an in-slice algorithm of the
 *      table (torus, ring, bidir or multiring), each member then holding
 *      its block of the slice's sum: K pieces (K = 1, or multiring's 2n);
 *   2. over the DCN, a unidirectional ring along the slice axis among the
 *      S members holding the same block: reduce-scatter then all-gather of
 *      the block's pieces taken end to end, cut into S parts (so a member
 *      of every slice ends with the block summed over the group);
 *   3. an all-gather within each slice by the same in-slice algorithm.
 * Reduce-scatter runs phases 1 and the ring's reduce-scatter (a member's
 * block is its part of its in-slice block), all-gather the ring's gather
 * and phase 3.  The in-slice algorithm is the one whose closed form makes
 * the whole fastest (the first of equals: torus, ring, bidir, multiring),
 * which on a torus whose dimensions wrap is multiring for large buffers
 * (every ICI link at once) and on a mesh a ring round the chips; its plan
 * is made once, on slice 0's members, and every slice runs it (the slices
 * are copies of one another).
 *
 * The ring's parts.  A part that straddles two pieces is sent as one
 * message per piece.  So that a step sends one message where it can, the
 * S parts follow the pieces when one count divides the other (S = q K:
 * each piece cut in q; K = q S: q whole pieces each), and are the end to
 * end cut into S equal lengths otherwise.
 *
 * Closed form (predict): the in-slice algorithm's reduce-scatter and
 * all-gather predictions (every slice alike, each running alone on its
 * ICI) plus the DCN phase's d = 2(S-1) steps (S-1 for reduce-scatter or
 * all-gather alone).  In a DCN step every member sends its part, of m
 * bytes, to the same place in the next slice over a route device -> ICI
 * to its host's chip -> PCIe -> NIC -> (leaves) -> NIC -> PCIe -> ICI, and
 * the members of a host share its PCIe and NIC.  On each link l of those
 * routes, W(l) = bytes(l)/B_l, the time the step's bytes take on it;
 * head(l), the earliest a first chunk gets there (latency and one chunk's
 * serialization per hop before l); tail(l), the longest a last chunk
 * takes from l on (l's latency, then latency and serialization per hop
 * after it); cycle(l), the longest a message takes from its sender's
 * start through l (at its own size) to its receiver, who then sends its
 * next part.  The link serves a step's messages back to back, in the
 * order they came; each receiver's next part comes back to it at most a
 * cycle after its message started there, so each further step ends
 * max(W, cycle) after the one before, and the phase takes
 *   max_l [ head(l) + W(l) + (d-1) max(W(l), cycle(l)) + tail(l) ].
 * For a message alone on its route this is d times the network's own
 * store-and-forward time, sum(latency) + m/B_min + sum over the other
 * hops of c/B (the bottleneck taken at the slowest link); where a host's
 * chips share its NIC it is their parts' time on the NIC, step after
 * step, plus the first chunk's way to it and the last one's from it.  For
 * P members per slice of a 2-D X x X torus with wrap-around, bandwidth B
 * and hop latency a, an all-reduce of S_b bytes comes to
 *   2 [(X-1)(a + S_b/(4 X B)) + (X-1)(a + S_b/(4 X^2 B))]   (multiring)
 *   + the DCN phase of parts of S_b/(P S) bytes.
 *
 * Invariant: the ring's parts of a block are the same for every member
 * with the same place in its slice, so the S members that exchange a part
 * agree on it; every element is added once per member in the reduce
 * phases and copied in the gather phases, so every member ends
 * bit-identical. */
#include "collectives/collective-private.h"

#include <math.h>
#include <string.h>

/* Pieces of an in-slice block: multiring's 2n streams on a 3-D torus. */
#define MAX_PIECES (2 * PS_MAX_DIMS)

/* The in-slice algorithms, in the order the first of equals is kept. */
static const char *const intra_names[] = {"torus", "ring", "bidir", "multiring"};
#define N_INTRA ((int)G_N_ELEMENTS(intra_names))

/* Elements [off, off + len) of the buffer. */
typedef struct {
  int64_t off, len;
} HierSeg;

/* A member's grid index within its slice and its slice, read together. */
typedef struct {
  int local, slice;
} HierPlace;

typedef struct {
  const PsCollGroup *g;
  PsCollParams p;
  int S, P;                /* slices; members per slice */
  PsCollGroup sub;         /* slice 0's members, member i at its grid index i */
  const PsCollAlgo *intra; /* NULL with one member per slice */
  PsCollPlan *rs, *ag;     /* on sub; NULL where the operation has no such phase */
  /* steps: in-slice reduce-scatter, DCN reduce-scatter, DCN gather,
   * in-slice gather */
  int n_rs, d_rs, d_ag, n_ag, total_steps;
  HierPlace *at;           /* member -> its place */
  int K;                   /* pieces of every in-slice block */
  int64_t *piece_off;      /* [l * K + k] */
  int64_t *piece_len;
  int64_t *bound;          /* [l * (S + 1) + j]: part j's start, end to end */
  /* part j of place l's block: seg_n[l * S + j] segments from
   * seg[(l * S + j) * max_seg], found once (the steps read them; a
   * place's parts are max_seg * S * 16 bytes together) */
  int max_seg;
  guint8 *seg_n;
  HierSeg *seg;
  double dcn;              /* the DCN phase's closed form */
  double predict;          /* the whole closed form, found once */
} HierPlan;

/* The member at grid index `local` of slice s. */
static inline int member_at(const HierPlan *p, int s, int local)
{
  return p->g->at[s * p->P + local];
}

/* ---- the ring's parts ------------------------------------------------ */

/* Where part j of the block of place l lies: its segments (at most
 * MAX_PIECES, in ascending order), the empty part one empty segment. */
static int part_segments(const HierPlan *p, int l, int j, int64_t *off, int64_t *len)
{
  const int64_t *b = &p->bound[l * (p->S + 1)];
  int64_t u0 = b[j], u1 = b[j + 1], at = 0;
  int n = 0;
  for (int k = 0; k < p->K; k++) {
    int64_t po = p->piece_off[l * p->K + k], pl = p->piece_len[l * p->K + k];
    int64_t lo = MAX(u0, at), hi = MIN(u1, at + pl);
    if (hi > lo) {
      off[n] = po + (lo - at);
      len[n] = hi - lo;
      n++;
    }
    at += pl;
  }
  if (n == 0) {
    off[0] = p->K > 0 ? p->piece_off[l * p->K] : 0;
    len[0] = 0;
    n = 1;
  }
  return n;
}

/* The S parts of each place's block (HierPlan.bound). */
static void parts_layout(HierPlan *p)
{
  int S = p->S, K = p->K;
  p->bound = g_new(int64_t, (size_t)p->P * (S + 1));
  for (int l = 0; l < p->P; l++) {
    int64_t *b = &p->bound[l * (S + 1)], cum[MAX_PIECES + 1] = {0};
    for (int k = 0; k < K; k++)
      cum[k + 1] = cum[k] + p->piece_len[l * K + k];
    for (int j = 0; j <= S; j++) {
      if (S % K == 0) {
        int q = S / K, k = MIN(j / q, K - 1), i = j - k * q;
        b[j] = cum[k] + p->piece_len[l * K + k] * i / q;
      } else if (K % S == 0) {
        b[j] = cum[j * (K / S)];
      } else {
        b[j] = cum[K] * j / S;
      }
    }
  }
  int64_t off[MAX_PIECES], len[MAX_PIECES];
  p->max_seg = 1;
  for (int i = 0; i < p->P * S; i++)
    p->max_seg = MAX(p->max_seg, part_segments(p, i / S, i % S, off, len));
  p->seg_n = g_new(guint8, (size_t)p->P * S);
  p->seg = g_new(HierSeg, (size_t)p->P * S * p->max_seg);
  for (int i = 0; i < p->P * S; i++) {
    int n = part_segments(p, i / S, i % S, off, len);
    p->seg_n[i] = (guint8)n;
    for (int k = 0; k < n; k++)
      p->seg[(size_t)i * p->max_seg + k] = (HierSeg){off[k], len[k]};
  }
}

/* Part j of place l's segments, *n of them. */
static inline const HierSeg *part_at(const HierPlan *p, int l, int j, int *n)
{
  int i = l * p->S + j;
  *n = p->seg_n[i];
  return &p->seg[(size_t)i * p->max_seg];
}

/* ---- steps ------------------------------------------------------------ */

/* An in-slice step of plan `sub_plan`, its peers moved to member m's
 * slice and its steps to the hierarchical plan's (from `first`). */
static void intra_step(const HierPlan *p, const PsCollPlan *sub_plan, int m, int s, int first,
                       PsCollStep *out)
{
  HierPlace w = p->at[m];
  p->intra->step(sub_plan, w.local, s - first, out);
  int sl = w.slice;
  for (int k = 0; k < out->n_send; k++) {
    out->send[k].peer = member_at(p, sl, out->send[k].peer);
    out->send[k].peer_step += first;
  }
}

/* DCN step t of the ring (t < d_rs: reduce-scatter): the part member m
 * sends and the one it receives. */
static inline void dcn_parts(const HierPlan *p, int sl, int t, int *send, int *recv)
{
  int S = p->S, j = t < p->d_rs ? sl - 1 - t : sl - (t - p->d_rs); /* -S < j < S */
  j += j < 0 ? S : 0;
  *send = j;
  *recv = j == 0 ? S - 1 : j - 1;
}

static void hier_step(const PsCollPlan *plan, int m, int s, PsCollStep *out)
{
  const HierPlan *p = (const HierPlan *)plan;
  int dcn0 = p->n_rs, ag0 = p->n_rs + p->d_rs + p->d_ag;
  if (s < dcn0) {
    intra_step(p, p->rs, m, s, 0, out);
    return;
  }
  if (s >= ag0) {
    intra_step(p, p->ag, m, s, ag0, out);
    return;
  }
  HierPlace w = p->at[m];
  int t = s - dcn0, js, jr, l = w.local, n;
  dcn_parts(p, w.slice, t, &js, &jr);
  const HierSeg *seg = part_at(p, l, js, &n);
  int peer = member_at(p, w.slice + 1 == p->S ? 0 : w.slice + 1, l);
  PsXferOp op = t < p->d_rs ? PS_XFER_ADD : PS_XFER_COPY;
  for (int k = 0; k < n; k++)
    out->send[k] = (PsCollSend){peer, s, seg[k].off, seg[k].len, op};
  out->n_send = n;
  part_at(p, l, jr, &out->n_recv);
}

static int hier_n_recv(const PsCollPlan *plan, int m, int s)
{
  const HierPlan *p = (const HierPlan *)plan;
  int dcn0 = p->n_rs, ag0 = p->n_rs + p->d_rs + p->d_ag;
  if (s < dcn0)
    return p->intra->n_recv(p->rs, p->at[m].local, s);
  if (s >= ag0)
    return p->intra->n_recv(p->ag, p->at[m].local, s - ag0);
  int js, jr, n;
  dcn_parts(p, p->at[m].slice, s - dcn0, &js, &jr);
  part_at(p, p->at[m].local, jr, &n);
  return n;
}

static int hier_n_steps(const PsCollPlan *plan, int m)
{
  return ((const HierPlan *)plan)->total_steps;
}

/* All-reduce: the whole buffer; else the segments of the member's part
 * (its slice's) of its in-slice block. */
static int hier_block(const PsCollPlan *plan, int m, int piece, int64_t *off, int64_t *len)
{
  const HierPlan *p = (const HierPlan *)plan;
  if (p->p.op == PS_COLL_ALL_REDUCE) {
    *off = 0;
    *len = p->p.count;
    return 1;
  }
  int n;
  const HierSeg *seg = part_at(p, p->at[m].local, p->at[m].slice, &n);
  g_return_val_if_fail(piece < n, n);
  *off = seg[piece].off;
  *len = seg[piece].len;
  return n;
}

static void hier_prefetch(const PsCollPlan *plan, int m)
{
  const HierPlan *p = (const HierPlan *)plan;
  const PsCollPlan *sub = p->rs ? p->rs : p->ag;
  int l = p->at[m].local;
  if (p->intra && p->intra->prefetch && sub)
    p->intra->prefetch(sub, l);
  /* the place's parts, which its DCN steps read */
  const char *seg = (const char *)&p->seg[(size_t)l * p->S * p->max_seg];
  size_t bytes = (size_t)p->S * p->max_seg * sizeof(HierSeg);
  for (size_t b = 0; b < bytes && b < 256; b += 64)
    __builtin_prefetch(seg + b);
}

/* ---- closed form ------------------------------------------------------ */

/* The DCN phase's d steps (the file's closed form): in each, every
 * member's part (the largest of its place's parts) to the same place in
 * the next slice; per link, W (busy), head, tail and cycle, and the
 * slowest link sets the phase.  A part of several segments is a message
 * each, so its chunks are no larger than its largest segment. */
static double dcn_phase_s(const HierPlan *p, int d)
{
  const PsCollGroup *g = p->g;
  int n = g->n, nl = ps_network_n_links(g->net);
  double *busy = g_new0(double, nl), *head = g_new(double, nl), *tail = g_new0(double, nl);
  double *cycle = g_new0(double, nl);
  for (int i = 0; i < nl; i++)
    head[i] = INFINITY;
  int **route = g_new(int *, n), *hops = g_new(int, n);
  for (int m = 0; m < n; m++) {
    int l = p->at[m].local;
    int64_t part = 0, seg = 0;
    for (int j = 0; j < p->S; j++) {
      int ns;
      int64_t sum = 0;
      const HierSeg *sg = part_at(p, l, j, &ns);
      for (int k = 0; k < ns; k++) {
        sum += sg[k].len;
        seg = MAX(seg, sg[k].len);
      }
      part = MAX(part, sum);
    }
    int64_t bytes = part * p->p.elem_bytes, c = MIN(seg * p->p.elem_bytes, p->p.chunk_bytes);
    route[m] = ps_coll_route(g, m, member_at(p, (p->at[m].slice + 1) % p->S, l), &hops[m]);
    int h = hops[m];
    g_autofree double *lat = g_new(double, MAX(h, 1)), *ser = g_new(double, MAX(h, 1));
    g_autofree double *own = g_new(double, MAX(h, 1));
    double after = 0;
    for (int i = 0; i < h; i++) {
      PsLinkInfo info;
      ps_network_link_info(g->net, route[m][i], &info);
      lat[i] = ps_time_to_s(info.latency);
      ser[i] = (double)c / info.bandwidth_Bps;
      own[i] = (double)bytes / (info.bandwidth_Bps * info.lanes);
      busy[route[m][i]] += own[i];
      after += lat[i] + ser[i];
    }
    double before = 0;
    for (int i = 0; i < h; i++) {
      int k = route[m][i];
      after -= lat[i] + ser[i];
      head[k] = MIN(head[k], before);
      tail[k] = MAX(tail[k], lat[i] + after);
      cycle[k] = MAX(cycle[k], before + own[i] + lat[i] + after);
      before += lat[i] + ser[i];
    }
  }
  double phase = 0;
  for (int m = 0; m < n; m++) {
    for (int i = 0; i < hops[m]; i++) {
      int k = route[m][i];
      phase = MAX(phase, head[k] + (d - 1) * MAX(busy[k], cycle[k]) + busy[k] + tail[k]);
    }
    g_free(route[m]);
  }
  g_free(route);
  g_free(hops);
  g_free(busy);
  g_free(head);
  g_free(tail);
  g_free(cycle);
  return phase;
}

static double hier_predict(const PsCollPlan *plan)
{
  return ((const HierPlan *)plan)->predict;
}

/* ---- plans -------------------------------------------------------------- */

static void hier_free(PsCollPlan *plan)
{
  HierPlan *p = (HierPlan *)plan;
  if (!p)
    return;
  if (p->rs)
    p->intra->plan_free(p->rs);
  if (p->ag)
    p->intra->plan_free(p->ag);
  ps_coll_group_clear(&p->sub);
  g_free(p->at);
  g_free(p->piece_off);
  g_free(p->piece_len);
  g_free(p->bound);
  g_free(p->seg_n);
  g_free(p->seg);
  g_free(p);
}

/* The in-slice plans and the pieces of each place's block. */
static void intra_layout(HierPlan *p, const PsCollAlgo *intra)
{
  p->K = 1;
  p->piece_off = g_new0(int64_t, (size_t)p->P * MAX_PIECES);
  p->piece_len = g_new0(int64_t, (size_t)p->P * MAX_PIECES);
  if (!intra) {
    p->piece_len[0] = p->p.count;
    return;
  }
  p->intra = intra;
  PsCollParams sp = p->p;
  sp.variant = 0;
  if (p->p.op != PS_COLL_ALL_GATHER) {
    sp.op = PS_COLL_REDUCE_SCATTER;
    p->rs = intra->plan_new(&p->sub, &sp);
    p->n_rs = intra->n_steps(p->rs, 0);
  }
  if (p->p.op != PS_COLL_REDUCE_SCATTER) {
    sp.op = PS_COLL_ALL_GATHER;
    p->ag = intra->plan_new(&p->sub, &sp);
    p->n_ag = intra->n_steps(p->ag, 0);
  }
  const PsCollPlan *blocks = p->rs ? p->rs : p->ag;
  int64_t off, len;
  p->K = intra->block(blocks, 0, 0, &off, &len);
  g_assert(p->K >= 1 && p->K <= MAX_PIECES);
  for (int l = 0; l < p->P; l++)
    for (int k = 0; k < p->K; k++) {
      int K = intra->block(blocks, l, k, &p->piece_off[l * p->K + k],
                           &p->piece_len[l * p->K + k]);
      g_assert(K == p->K);
    }
}

/* Whether two plans' DCN phases are alike: the same parts, pieces of the
 * same lengths. */
static gboolean dcn_alike(const HierPlan *a, const HierPlan *b)
{
  size_t np = (size_t)a->P * MAX_PIECES, nb = (size_t)a->P * (a->S + 1);
  return a->K == b->K && memcmp(a->piece_len, b->piece_len, np * sizeof(int64_t)) == 0 &&
         memcmp(a->bound, b->bound, nb * sizeof(int64_t)) == 0;
}

/* The plan with the in-slice algorithm `intra` (NULL: one member per
 * slice); its DCN phase's closed form taken from `like` (NULL: none) when
 * the phases are alike. */
static HierPlan *hier_candidate(const PsCollGroup *g, const PsCollParams *prm,
                                const PsCollAlgo *intra, const HierPlan *like)
{
  HierPlan *p = g_new0(HierPlan, 1);
  p->g = g;
  p->p = *prm;
  p->S = g->axis_size[g->n_axes - 1];
  p->P = g->n / p->S;
  g_autofree int *devs = g_new(int, p->P);
  for (int l = 0; l < p->P; l++)
    devs[l] = g->dev[g->at[l]];
  GError *error = NULL;
  gboolean ok = ps_coll_group_init(&p->sub, g->net, devs, p->P, &error);
  g_assert_no_error(error);
  g_assert(ok && p->sub.is_grid);
  p->at = g_new(HierPlace, g->n);
  for (int i = 0; i < g->n; i++) {
    p->at[g->at[i]] = (HierPlace){i % p->P, i / p->P};
  }
  intra_layout(p, intra);
  parts_layout(p);
  p->d_rs = prm->op != PS_COLL_ALL_GATHER ? p->S - 1 : 0;
  p->d_ag = prm->op != PS_COLL_REDUCE_SCATTER ? p->S - 1 : 0;
  p->total_steps = p->n_rs + p->d_rs + p->d_ag + p->n_ag;
  if (like && dcn_alike(p, like))
    p->dcn = like->dcn;
  else
    p->dcn = p->d_rs + p->d_ag > 0 ? dcn_phase_s(p, p->d_rs + p->d_ag) : 0;
  p->predict = p->dcn;
  if (p->rs)
    p->predict += intra->predict_s(p->rs);
  if (p->ag)
    p->predict += intra->predict_s(p->ag);
  return p;
}

/* The in-slice algorithm k of intra_names, or NULL if it cannot run the
 * phases on the slice's members. */
static const PsCollAlgo *intra_algo(const PsCollGroup *sub, int k)
{
  const PsCollAlgo *a = ps_coll_algo_find(intra_names[k]);
  g_assert(a != NULL);
  if (a->unsupported(sub, PS_COLL_REDUCE_SCATTER) || a->unsupported(sub, PS_COLL_ALL_GATHER))
    return NULL;
  return a;
}

/* The candidate whose closed form is fastest, or the one prm->variant
 * names (the in-slice algorithm intra_names[variant - 1]). */
static PsCollPlan *hier_plan(const PsCollGroup *g, const PsCollParams *prm)
{
  if (g->n == g->axis_size[g->n_axes - 1]) {
    HierPlan *p = hier_candidate(g, prm, NULL, NULL);
    p->p.variant = 0;
    return (PsCollPlan *)p;
  }
  /* the slice's members, to ask each algorithm whether it runs there */
  PsCollGroup sub;
  int P = g->n / g->axis_size[g->n_axes - 1];
  g_autofree int *devs = g_new(int, P);
  for (int l = 0; l < P; l++)
    devs[l] = g->dev[g->at[l]];
  gboolean ok = ps_coll_group_init(&sub, g->net, devs, P, NULL);
  g_assert(ok);
  HierPlan *best = NULL;
  for (int k = 0; k < N_INTRA; k++) {
    if (prm->variant > 0 && prm->variant != k + 1)
      continue;
    const PsCollAlgo *a = intra_algo(&sub, k);
    if (!a)
      continue;
    HierPlan *p = hier_candidate(g, prm, a, best);
    p->p.variant = k + 1;
    if (!best || p->predict < best->predict) {
      hier_free((PsCollPlan *)best);
      best = p;
    } else {
      hier_free((PsCollPlan *)p);
    }
  }
  ps_coll_group_clear(&sub);
  g_assert(best != NULL);
  return (PsCollPlan *)best;
}

static int hier_variant(const PsCollPlan *plan)
{
  return ((const HierPlan *)plan)->p.variant;
}

static const char *hier_unsupported(const PsCollGroup *g, PsCollOp op)
{
  if (op != PS_COLL_ALL_REDUCE && op != PS_COLL_REDUCE_SCATTER && op != PS_COLL_ALL_GATHER)
    return "hierarchical runs all-reduce, reduce-scatter and all-gather";
  if (!ps_coll_spans_slices(g))
    return "the group does not span slices: use torus, ring or bidir";
  if (!g->is_grid)
    return "the group's members do not hold the same places in every slice (their (core, x, "
           "y, z, slice) coordinates do not form a box); use ring or bidir";
  return NULL;
}

const PsCollAlgo ps_coll_hierarchical_algo = {
    "hierarchical",
    "across slices: reduce-scatter within each slice over ICI (torus, a ring or multiring, as "
    "predicted fastest), all-reduce of each block across slices over the DCN (a ring among "
    "the members holding it), all-gather within each slice",
    hier_unsupported, hier_plan, hier_free, hier_n_steps, hier_step, hier_n_recv, hier_block,
    hier_predict, FALSE, hier_variant, hier_prefetch};

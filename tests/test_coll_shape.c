/* test_coll_shape.c: plans shared between translated groups, and
 * collectives that keep no member state between rounds, against the same
 * collectives built and run alone.
 *
 * - On a torus (wrap-around everywhere, nothing degraded), groups moved by
 *   even chip offsets share one plan in a cache (ps_coll_cache_plans counts
 *   one), an odd offset gets a plan of its own (a route half-way round an
 *   even ring goes the way its source's parity says); each collective made
 *   through the cache has the algorithm, reason, prediction, blocks and
 *   per-member done times, to the picosecond, of one made without it.
 * - On a network with a degraded link nothing is shared, and the times are
 *   still those of collectives made alone.
 * - Rounds run one after another (the collective at rest between them):
 *   each takes the same time, the ring's closed form 2(N-1)(alpha + S/(N B))
 *   within 0.5%, and rounds_done counts them.
 * - One-hop messages of many chunks on one-lane links (booked in closed
 *   form, hw/network.h's ps_network_send_link) give two overlapping
 *   collectives the same done times and every link the same bytes, chunks
 *   and busy time as chunk-by-chunk events (a message observer sends every
 *   message the general way).
 * - Messages of several hops delivered whole (hw/network.h's
 *   ps_network_send_whole) on rings of every other chip whose routes cross
 *   the other ring's: the same done times and link statistics as every
 *   chunk delivered, on one lane and on two. */
#include "collectives/collective.h"
#include "support/network.h"

#include <math.h>
#include <string.h>

typedef struct {
  PsCollective *c;
  ps_time_t done[64];
  int n_done;
} Round;

static void on_done(void *ctx, int member, ps_time_t t)
{
  Round *r = ctx;
  r->done[member] = t;
  r->n_done++;
}

/* One timing-only round alone on the network; done times from its start. */
static void run_round(PsEngine *e, PsCollective *c, ps_time_t *out)
{
  int n = ps_collective_members(c);
  Round r = {.c = c};
  ps_time_t t0 = ps_engine_now(e);
  for (int m = 0; m < n; m++)
    ps_collective_arrive(c, m, NULL, on_done, &r);
  ps_engine_run(e, PS_TIME_NEVER);
  g_assert_cmpint(r.n_done, ==, n);
  for (int m = 0; m < n; m++)
    out[m] = r.done[m] - t0;
}

/* The devices of the 4 x 2 block of chips at (x0, y0) on an 8 x 8 torus,
 * listed column by column (so the block's order is not the numbering's). */
static void block(const PsNetwork *net, int x0, int y0, int *devs)
{
  int k = 0;
  for (int x = 0; x < 4; x++)
    for (int y = 0; y < 2; y++) {
      int c[PS_MAX_DIMS] = {(x0 + x) % 8, (y0 + y) % 8, 0};
      int chip = ps_network_chip_at(net, c);
      g_assert_cmpint(ps_network_device_chip(net, chip), ==, chip);
      devs[k++] = chip;
    }
}

/* A collective made through cache and one made alone: the same plan. */
static void compare(NetFix *f, PsCollCache *cache, const PsCollSpec *spec)
{
  GError *error = NULL;
  PsCollective *a = ps_collective_new_cached(f->net, spec, cache, &error);
  g_assert_no_error(error);
  PsCollective *b = ps_collective_new(f->net, spec, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(ps_collective_algo(a), ==, ps_collective_algo(b));
  g_assert_cmpstr(ps_collective_why(a), ==, ps_collective_why(b));
  g_assert_cmpfloat(ps_collective_predict_s(a), ==, ps_collective_predict_s(b));
  for (int m = 0; m < spec->n_members; m++)
    for (int p = 0;; p++) {
      int64_t oa, la, ob, lb;
      int na = ps_collective_block_piece(a, m, p, &oa, &la);
      int nb = ps_collective_block_piece(b, m, p, &ob, &lb);
      g_assert_cmpint(na, ==, nb);
      g_assert_cmpint(oa, ==, ob);
      g_assert_cmpint(la, ==, lb);
      if (p + 1 >= na)
        break;
    }
  ps_time_t ta[64], tb[64];
  run_round(f->engine, a, ta);
  run_round(f->engine, b, tb);
  for (int m = 0; m < spec->n_members; m++)
    g_assert_cmpint(ta[m], ==, tb[m]);
  ps_collective_free(a);
  ps_collective_free(b);
}

static const struct {
  PsCollOp op;
  const char *algo;
  int64_t bytes;
} cases[] = {
    {PS_COLL_ALL_REDUCE, "auto", 1 << 20},
    {PS_COLL_REDUCE_SCATTER, "ring", 3 << 16},
    {PS_COLL_ALL_GATHER, "bidir", 1 << 18},
    {PS_COLL_ALL_REDUCE, "torus", 5 << 18},
    {PS_COLL_BROADCAST, "bidir", 1 << 16},
};

static void test_translated(void)
{
  NetFix f;
  netfix_init(&f, shorthand_topology("torus:8x8", NULL), 1 << 16);
  g_assert_true(ps_network_translation_symmetric(f.net));
  for (guint k = 0; k < G_N_ELEMENTS(cases); k++) {
    PsCollCache *cache = ps_coll_cache_new();
    const int even[][2] = {{0, 0}, {2, 2}, {4, 0}, {2, 6}};
    int devs[8];
    for (guint i = 0; i < G_N_ELEMENTS(even); i++) {
      block(f.net, even[i][0], even[i][1], devs);
      PsCollSpec spec = {cases[k].op, cases[k].algo, devs, 8, cases[k].bytes, 1, 0};
      compare(&f, cache, &spec);
      g_assert_cmpuint(ps_coll_cache_plans(cache), ==, 1);
    }
    block(f.net, 1, 0, devs);
    PsCollSpec odd = {cases[k].op, cases[k].algo, devs, 8, cases[k].bytes, 1, 0};
    compare(&f, cache, &odd);
    g_assert_cmpuint(ps_coll_cache_plans(cache), ==, 2);
    /* another size is another plan */
    odd.count = 2 * cases[k].bytes;
    compare(&f, cache, &odd);
    g_assert_cmpuint(ps_coll_cache_plans(cache), ==, 3);
    ps_coll_cache_free(cache);
  }
  netfix_clear(&f);
}

static void test_degraded(void)
{
  NetFix f;
  netfix_init(&f, shorthand_topology("torus:8x8", NULL), 1 << 16);
  int c0[PS_MAX_DIMS] = {3, 2, 0};
  int link = ps_network_ici_link(f.net, ps_network_chip_at(f.net, c0), 0, +1);
  g_assert_true(ps_network_degrade_link(f.net, link, 0.25, NULL));
  g_assert_false(ps_network_translation_symmetric(f.net));
  PsCollCache *cache = ps_coll_cache_new();
  const int at[][2] = {{0, 0}, {2, 2}, {0, 2}};
  int devs[8];
  for (guint i = 0; i < G_N_ELEMENTS(at); i++) {
    block(f.net, at[i][0], at[i][1], devs);
    PsCollSpec spec = {PS_COLL_ALL_REDUCE, "auto", devs, 8, 1 << 20, 1, 0};
    compare(&f, cache, &spec);
  }
  g_assert_cmpuint(ps_coll_cache_plans(cache), ==, 0);
  ps_coll_cache_free(cache);
  netfix_clear(&f);
}

static void test_rest_rounds(void)
{
  NetFix f;
  netfix_init(&f, shorthand_topology("ring:8", NULL), 1 << 20);
  int devs[8];
  for (int i = 0; i < 8; i++)
    devs[i] = i;
  const int64_t S = 8 << 20;
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, "ring", devs, 8, S, 1, 0};
  PsCollective *c = ps_collective_new(f.net, &spec, NULL);
  g_assert_nonnull(c);
  /* the topology's figures: 1 us a hop, 83 GB/s (network.h's shorthand) */
  double alpha = 1e-6, B = 83e9, N = 8;
  double expect = 2 * (N - 1) * (alpha + (double)S / (N * B));
  for (int k = 0; k < 3; k++) {
    g_assert_cmpint(ps_collective_rounds_done(c), ==, k);
    Round r = {.c = c};
    ps_time_t t0 = ps_engine_now(f.engine);
    for (int m = 0; m < 8; m++)
      ps_collective_arrive(c, m, NULL, on_done, &r);
    ps_engine_run(f.engine, PS_TIME_NEVER);
    g_assert_cmpint(r.n_done, ==, 8);
    ps_time_t last = 0;
    for (int m = 0; m < 8; m++)
      last = MAX(last, r.done[m] - t0);
    double s = ps_time_to_s(last);
    g_assert_cmpfloat(fabs(s - expect) / expect, <, 0.005);
  }
  g_assert_cmpint(ps_collective_rounds_done(c), ==, 3);
  ps_collective_free(c);
  netfix_clear(&f);
}

static void message_seen(void *ctx, PsCollMsgEvent what, int src, int dst, int64_t round,
                         uint64_t id, ps_time_t t)
{
  (*(int64_t *)ctx)++;
}

/* Two all-reduces (one over a[], one over b[], na and nb members) on the
 * shorthand topology spec (one override ov, or NULL) whose members arrive
 * staggered; done times and every link's statistics into out (32 done
 * times, then 3 per link). */
typedef struct {
  const char *spec, *ov;
  int a[16], na, b[16], nb;
} Overlap;

static void overlapping(const Overlap *o, gboolean general, int64_t *out)
{
  NetFix f;
  const char *ov[] = {o->ov, NULL};
  netfix_init(&f, shorthand_topology(o->spec, ov), 3000);
  PsCollSpec s0 = {PS_COLL_ALL_REDUCE, "ring", o->a, o->na, 40000, 4, 0};
  PsCollSpec s1 = {PS_COLL_ALL_REDUCE, "ring", o->b, o->nb, 13333, 4, 0};
  PsCollective *c[2] = {ps_collective_new(f.net, &s0, NULL), ps_collective_new(f.net, &s1, NULL)};
  g_assert_true(c[0] && c[1]);
  int64_t seen = 0;
  Round r[2] = {{.c = c[0]}, {.c = c[1]}};
  for (int k = 0; k < 2; k++)
    if (general)
      ps_collective_set_message_observer(c[k], message_seen, &seen);
  for (int m = 0; m < MAX(o->na, o->nb); m++) {
    ps_engine_run(f.engine, ps_time_from_s((m % 5) * 1.3e-6));
    if (m < o->na)
      ps_collective_arrive(c[0], m, NULL, on_done, &r[0]);
    ps_engine_run(f.engine, ps_time_from_s((m % 5) * 1.3e-6 + 0.7e-6));
    if (m < o->nb)
      ps_collective_arrive(c[1], (m * 7) % o->nb, NULL, on_done, &r[1]);
  }
  ps_engine_run(f.engine, PS_TIME_NEVER);
  g_assert_cmpint(r[0].n_done + r[1].n_done, ==, o->na + o->nb);
  g_assert_true(general ? seen > 0 : seen == 0);
  for (int k = 0; k < 2; k++)
    for (int m = 0; m < 16; m++)
      out[k * 16 + m] = r[k].done[m];
  for (int l = 0; l < ps_network_n_links(f.net) && l < 256; l++) {
    PsLinkInfo info = {0};
    ps_network_link_info(f.net, l, &info);
    out[32 + 3 * l] = info.bytes;
    out[33 + 3 * l] = info.chunks;
    out[34 + 3 * l] = info.busy;
  }
  ps_collective_free(c[0]);
  ps_collective_free(c[1]);
  netfix_clear(&f);
}

/* The same run timing only (one-hop messages booked in closed form, longer
 * ones delivered whole) and with every message observed (chunk by chunk,
 * every chunk delivered): the same to the picosecond. */
static void same_as_events(const Overlap *o)
{
  int64_t direct[32 + 3 * 256] = {0}, general[32 + 3 * 256] = {0};
  overlapping(o, FALSE, direct);
  overlapping(o, TRUE, general);
  int64_t bytes = 0;
  for (guint i = 0; i < G_N_ELEMENTS(direct); i++)
    g_assert_cmpint(direct[i], ==, general[i]);
  for (int l = 0; l < 256; l++)
    bytes += direct[32 + 3 * l];
  g_assert_cmpint(bytes, >, 0);
}

static void test_send_link_closed(void)
{
  Overlap o = {"torus:4x4", NULL, {0}, 16, {0}, 16};
  for (int i = 0; i < 16; i++)
    o.a[i] = o.b[i] = i;
  same_as_events(&o);
}

/* Rings of every other chip of an 8-ring, 2 hops a step, over links the
 * other ring's messages cross too; one lane (delivered whole) and two
 * (chunk by chunk, a shorter last chunk may overtake). */
static void test_send_whole(void)
{
  Overlap o = {"ring:8", NULL, {0, 2, 4, 6}, 4, {1, 3, 5, 7}, 4};
  same_as_events(&o);
  o.ov = "ici.links_per_neighbor=2";
  same_as_events(&o);
  Overlap t = {"torus:4x4", NULL, {0, 2, 8, 10, 5, 7, 13, 15}, 8, {1, 3, 9, 11}, 4};
  same_as_events(&t);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/collectives/shape/translated", test_translated);
  g_test_add_func("/collectives/shape/degraded", test_degraded);
  g_test_add_func("/collectives/shape/rest-rounds", test_rest_rounds);
  g_test_add_func("/collectives/send-link/closed-form", test_send_link_closed);
  g_test_add_func("/collectives/send-whole", test_send_whole);
  return g_test_run();
}

/* test_share.c: processor-sharing servers (exec/share.h) against closed
 * forms.  On a server of bandwidth W:
 * - one transfer of B bytes ends at B / W;
 * - k transfers of B begun together all end at k B / W, in the order they
 *   began;
 * - B begun at 0 and B begun at B / (2W): the first carries B/2 alone,
 *   then shares, ending at 1.5 B / W; the second has B/2 left then and
 *   ends alone at 2 B / W;
 * - servers are independent: a transfer on another server changes
 *   nothing;
 * - bytes carried equal bytes begun once all have ended;
 * - a transfer that would end past 2^63 ps is scheduled at PS_TIME_NEVER
 *   (no overflow) and does not end within any horizon.
 * Every end is within two ticks (picoseconds) of the real-valued one. */
#include "exec/share.h"

#include <math.h>

#define W 1e10
#define B 3e6

typedef struct {
  PsEngine *engine;
  GArray *ends; /* End, in callback order */
} Log;

typedef struct {
  int server;
  uint64_t item;
  ps_time_t at;
} End;

static void on_done(void *ctx, int server, uint64_t item)
{
  Log *log = ctx;
  End e = {server, item, ps_engine_now(log->engine)};
  g_array_append_val(log->ends, e);
}

typedef struct {
  Log log;
  PsShareSet *set;
} Bench;

static void bench_init(Bench *b, int servers)
{
  b->log.engine = ps_engine_new();
  b->log.ends = g_array_new(FALSE, FALSE, sizeof(End));
  b->set = ps_share_set_new(b->log.engine, servers, W, on_done, &b->log);
}

static void bench_clear(Bench *b)
{
  ps_share_set_free(b->set);
  ps_engine_free(b->log.engine);
  g_array_free(b->log.ends, TRUE);
}

static const End *end_at(const Bench *b, guint i)
{
  g_assert_cmpuint(i, <, b->log.ends->len);
  return &g_array_index(b->log.ends, End, i);
}

static void assert_near(ps_time_t got, double want_s)
{
  g_assert_cmpint(llabs(got - ps_time_from_s(want_s)), <=, 2);
}

static void test_alone_and_together(void)
{
  for (int k = 1; k <= 4; k++) {
    Bench b;
    bench_init(&b, 2);
    for (int i = 0; i < k; i++)
      ps_share_add(b.set, 1, B, (uint64_t)(10 + i));
    g_assert_cmpint(ps_share_active(b.set, 1), ==, k);
    ps_engine_run(b.log.engine, PS_TIME_NEVER);
    g_assert_cmpuint(b.log.ends->len, ==, (guint)k);
    for (int i = 0; i < k; i++) {
      g_assert_cmpint(end_at(&b, (guint)i)->server, ==, 1);
      g_assert_cmpuint(end_at(&b, (guint)i)->item, ==, (uint64_t)(10 + i));
      assert_near(end_at(&b, (guint)i)->at, k * B / W);
    }
    g_assert_cmpint(ps_share_active(b.set, 1), ==, 0);
    g_assert_cmpfloat(fabs(ps_share_carried(b.set, 1) - k * B), <, 1.0);
    g_assert_cmpfloat(ps_share_carried(b.set, 0), ==, 0);
    bench_clear(&b);
  }
}

/* Begins the second transfer at B / (2W) (an event of its own). */
static void begin_second(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  ps_share_add(ctx, 0, B, 2);
}

static void test_staggered(void)
{
  Bench b;
  bench_init(&b, 2);
  uint32_t ev = ps_engine_register(b.log.engine, "second", begin_second, b.set);
  ps_share_add(b.set, 0, B, 1);
  ps_share_add(b.set, 1, 5 * B, 3); /* another server: no effect on server 0 */
  ps_engine_after(b.log.engine, ps_time_from_s(B / (2 * W)), ev, 0, 0);
  ps_engine_run(b.log.engine, PS_TIME_NEVER);
  g_assert_cmpuint(b.log.ends->len, ==, 3);
  g_assert_cmpuint(end_at(&b, 0)->item, ==, 1);
  assert_near(end_at(&b, 0)->at, 1.5 * B / W);
  g_assert_cmpuint(end_at(&b, 1)->item, ==, 2);
  assert_near(end_at(&b, 1)->at, 2 * B / W);
  g_assert_cmpuint(end_at(&b, 2)->item, ==, 3);
  assert_near(end_at(&b, 2)->at, 5 * B / W);
  g_assert_cmpfloat(fabs(ps_share_carried(b.set, 0) - 2 * B), <, 1.0);
  bench_clear(&b);
}

/* A transfer of no bytes ends at once; one begun from a done callback
 * starts then. */
static void chain(void *ctx, int server, uint64_t item)
{
  Bench *b = ctx;
  on_done(&b->log, server, item);
  if (item < 3)
    ps_share_add(b->set, server, item == 0 ? 0 : B, item + 1);
}

static void test_chained(void)
{
  Bench b;
  b.log.engine = ps_engine_new();
  b.log.ends = g_array_new(FALSE, FALSE, sizeof(End));
  b.set = ps_share_set_new(b.log.engine, 1, W, chain, &b);
  ps_share_add(b.set, 0, 0, 0);
  ps_engine_run(b.log.engine, PS_TIME_NEVER);
  g_assert_cmpuint(b.log.ends->len, ==, 4);
  g_assert_cmpint(end_at(&b, 0)->at, ==, 0);
  g_assert_cmpint(end_at(&b, 1)->at, ==, 0);
  assert_near(end_at(&b, 2)->at, B / W);
  assert_near(end_at(&b, 3)->at, 2 * B / W);
  bench_clear(&b);
}

/* 1e12 bytes at 1e-3 B/s: 1e15 s, past the clock's 2^63 ps (106 days). */
static void test_beyond_the_clock(void)
{
  Log log = {ps_engine_new(), g_array_new(FALSE, FALSE, sizeof(End))};
  PsShareSet *set = ps_share_set_new(log.engine, 1, 1e-3, on_done, &log);
  ps_share_add(set, 0, 1e12, 1);
  ps_engine_run(log.engine, ps_time_from_s(3600));
  g_assert_cmpuint(log.ends->len, ==, 0);
  g_assert_cmpint(ps_share_active(set, 0), ==, 1);
  ps_share_set_free(set);
  ps_engine_free(log.engine);
  g_array_free(log.ends, TRUE);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/share/alone-and-together", test_alone_and_together);
  g_test_add_func("/share/staggered", test_staggered);
  g_test_add_func("/share/chained", test_chained);
  g_test_add_func("/share/beyond-the-clock", test_beyond_the_clock);
  return g_test_run();
}

/* test_engine.c: the event heap and the engine loop.
 *
 * Checks ordering by time, FIFO order among equal times, cancellation,
 * run-until, and that a million random events come out sorted with the
 * heap invariant holding after every mutation of the small cases. */
#include "engine/engine.h"

/* The same cases run against both queue implementations. */
typedef struct {
  const char *name;
  void (*init)(void *q);
  void (*clear)(void *q);
  void (*push)(void *q, const PsEvent *ev);
  gboolean (*pop)(void *q, PsEvent *out);
  gboolean (*check)(const void *q);
  size_t (*len)(const void *q);
} QueueImpl;

static void heap_init_(void *q) { ps_heap_init(q); }
static void heap_clear_(void *q) { ps_heap_clear(q); }
static void heap_push_(void *q, const PsEvent *e) { ps_heap_push(q, e); }
static gboolean heap_pop_(void *q, PsEvent *o) { return ps_heap_pop(q, o); }
static gboolean heap_check_(const void *q) { return ps_heap_check(q); }
static size_t heap_len_(const void *q) { return ((const PsHeap *)q)->len; }
static void queue_init_(void *q) { ps_queue_init(q); }
static void queue_clear_(void *q) { ps_queue_clear(q); }
static void queue_push_(void *q, const PsEvent *e) { ps_queue_push(q, e); }
static gboolean queue_pop_(void *q, PsEvent *o) { return ps_queue_pop(q, o); }
static gboolean queue_check_(const void *q) { return ps_queue_check(q); }
static size_t queue_len_(const void *q) { return ps_queue_len(q); }

static const QueueImpl impls[] = {
  {"heap", heap_init_, heap_clear_, heap_push_, heap_pop_, heap_check_, heap_len_},
  {"calendar", queue_init_, queue_clear_, queue_push_, queue_pop_, queue_check_, queue_len_},
};

typedef union {
  PsHeap heap;
  PsQueue queue;
} AnyQueue;

typedef struct {
  const QueueImpl *impl;
  guint32 seed;
} Case;

static void test_heap_order(gconstpointer data)
{
  const QueueImpl *q = ((const Case *)data)->impl;
  AnyQueue h;
  q->init(&h);
  ps_time_t times[] = {50, 10, 40, 10, 30, 0, 99, 20};
  for (guint i = 0; i < G_N_ELEMENTS(times); i++) {
    PsEvent e = {.time = times[i], .seq = i};
    q->push(&h, &e);
    g_assert_true(q->check(&h));
  }
  ps_time_t last = -1;
  uint64_t last_seq = 0;
  PsEvent out;
  guint n = 0;
  while (q->pop(&h, &out)) {
    g_assert_true(q->check(&h));
    g_assert_cmpint(out.time, >=, last);
    if (out.time == last)
      g_assert_cmpuint(out.seq, >, last_seq);
    last = out.time;
    last_seq = out.seq;
    n++;
  }
  g_assert_cmpuint(n, ==, G_N_ELEMENTS(times));
  g_assert_false(q->pop(&h, &out));
  q->clear(&h);
}

typedef struct {
  GArray *seen; /* uint32 targets in the order handled */
  GArray *times;
} Log;

static void log_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  Log *log = ctx;
  g_array_append_val(log->seen, ev->target);
  ps_time_t now = ps_engine_now(engine);
  g_assert_cmpint(now, ==, ev->time);
  g_array_append_val(log->times, now);
}

static void test_engine_ties_fifo(void)
{
  PsEngine *e = ps_engine_new();
  Log log = {g_array_new(FALSE, FALSE, sizeof(uint32_t)), g_array_new(FALSE, FALSE, sizeof(ps_time_t))};
  uint32_t t = ps_engine_register(e, "log", log_handler, &log);
  /* 100 events at the same time, scheduled in order 0..99, interleaved with
   * earlier and later ones: the equal-time ones must run in schedule order. */
  for (uint32_t i = 0; i < 100; i++) {
    ps_engine_at(e, 1000, t, i, 0);
    ps_engine_at(e, 2000 + i, t, 1000 + i, 0);
    ps_engine_at(e, 999 - i, t, 2000 + i, 0);
  }
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 300);
  /* first the 100 early ones (times 900..999 ascending => targets 2099..2000) */
  for (uint32_t i = 0; i < 100; i++)
    g_assert_cmpuint(g_array_index(log.seen, uint32_t, i), ==, 2099 - i);
  for (uint32_t i = 0; i < 100; i++)
    g_assert_cmpuint(g_array_index(log.seen, uint32_t, 100 + i), ==, i);
  for (uint32_t i = 0; i < 100; i++)
    g_assert_cmpuint(g_array_index(log.seen, uint32_t, 200 + i), ==, 1000 + i);
  g_array_free(log.seen, TRUE);
  g_array_free(log.times, TRUE);
  ps_engine_free(e);
}

static void test_engine_cancel_and_until(void)
{
  PsEngine *e = ps_engine_new();
  Log log = {g_array_new(FALSE, FALSE, sizeof(uint32_t)), g_array_new(FALSE, FALSE, sizeof(ps_time_t))};
  uint32_t t = ps_engine_register(e, "log", log_handler, &log);
  ps_engine_at(e, 10, t, 1, 0);
  uint64_t s2 = ps_engine_at(e, 20, t, 2, 0);
  ps_engine_at(e, 30, t, 3, 0);
  ps_engine_at(e, 40, t, 4, 0);
  ps_engine_cancel(e, s2);
  g_assert_cmpuint(ps_engine_run(e, 30), ==, 2); /* 1 and 3; 2 cancelled */
  g_assert_cmpint(ps_engine_now(e), ==, 30);
  g_assert_cmpuint(ps_engine_pending(e), ==, 1);
  g_assert_cmpuint(ps_engine_run(e, 35), ==, 0);
  g_assert_cmpint(ps_engine_now(e), ==, 35); /* the clock reaches `until` */
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 1);
  g_assert_cmpint(ps_engine_now(e), ==, 40);
  g_assert_cmpuint(log.seen->len, ==, 3);
  g_assert_cmpuint(g_array_index(log.seen, uint32_t, 1), ==, 3);
  g_assert_cmpuint(ps_engine_events_run(e), ==, 3);
  g_array_free(log.seen, TRUE);
  g_array_free(log.times, TRUE);
  ps_engine_free(e);
}

/* A handler that reschedules itself: a chain of `left` events 7 ps apart. */
typedef struct {
  uint32_t type;
  int left;
} Chain;

static void chain_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  Chain *c = ctx;
  if (--c->left > 0)
    ps_engine_after(engine, 7, c->type, ev->target, ev->arg.u + 1);
}

static void test_engine_self_scheduling(void)
{
  PsEngine *e = ps_engine_new();
  Chain c = {0, 1000};
  c.type = ps_engine_register(e, "chain", chain_handler, &c);
  ps_engine_at(e, 0, c.type, 0, 0);
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 1000);
  g_assert_cmpint(ps_engine_now(e), ==, 999 * 7);
  ps_engine_free(e);
}

static void test_heap_million_random(gconstpointer data)
{
  const Case *c = data;
  const QueueImpl *q = c->impl;
  GRand *rng = g_rand_new_with_seed(c->seed);
  AnyQueue h;
  q->init(&h);
  const int n = g_test_thorough() ? 10000000 : 1000000; /* the million */
  /* Few distinct times so ties are common. */
  for (int i = 0; i < n; i++) {
    PsEvent ev = {.time = g_rand_int_range(rng, 0, 50000), .seq = (uint64_t)i};
    if (i % 1000 == 0) /* a few far in the future, to stretch a calendar */
      ev.time = g_rand_int_range(rng, 0, G_MAXINT32) * INT64_C(1000);
    q->push(&h, &ev);
  }
  g_assert_true(q->check(&h));
  PsEvent prev = {.time = -1}, cur;
  int popped = 0;
  while (q->pop(&h, &cur)) {
    g_assert_true(cur.time > prev.time || (cur.time == prev.time && cur.seq > prev.seq));
    prev = cur;
    popped++;
  }
  g_assert_cmpint(popped, ==, n);
  q->clear(&h);
  g_rand_free(rng);
}

/* Interleaved push/pop (a steady state) compared with a sorted reference. */
static gint cmp_ev(gconstpointer a, gconstpointer b)
{
  const PsEvent *x = a, *y = b;
  if (x->time != y->time)
    return x->time < y->time ? -1 : 1;
  return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

static void test_heap_interleaved(gconstpointer data)
{
  const Case *c = data;
  const QueueImpl *q = c->impl;
  GRand *rng = g_rand_new_with_seed(c->seed);
  AnyQueue h;
  q->init(&h);
  GArray *ref = g_array_new(FALSE, FALSE, sizeof(PsEvent));
  uint64_t seq = 0;
  ps_time_t now = 0;
  for (int round = 0; round < 20000; round++) {
    int pushes = g_rand_int_range(rng, 0, 4);
    for (int i = 0; i < pushes; i++) {
      /* mostly near, sometimes equal to now, sometimes far ahead */
      ps_time_t dt = g_rand_int_range(rng, 0, 8) == 0 ? g_rand_int_range(rng, 0, 1000000)
                                                      : g_rand_int_range(rng, 0, 100);
      PsEvent ev = {.time = now + dt, .seq = seq++};
      q->push(&h, &ev);
      guint lo = 0, hi = ref->len; /* keep ref sorted: binary search */
      while (lo < hi) {
        guint mid = (lo + hi) / 2;
        if (cmp_ev(&g_array_index(ref, PsEvent, mid), &ev) < 0)
          lo = mid + 1;
        else
          hi = mid;
      }
      g_array_insert_val(ref, lo, ev);
    }
    if (round % 97 == 0)
      g_assert_true(q->check(&h));
    if (ref->len > 0 && g_rand_boolean(rng)) {
      PsEvent want = g_array_index(ref, PsEvent, 0), got;
      g_array_remove_index(ref, 0);
      g_assert_true(q->pop(&h, &got));
      g_assert_cmpint(got.time, ==, want.time);
      g_assert_cmpuint(got.seq, ==, want.seq);
      now = got.time;
    }
  }
  g_assert_cmpuint(q->len(&h), ==, ref->len);
  g_array_free(ref, TRUE);
  q->clear(&h);
  g_rand_free(rng);
}

static void test_time_conversion(void)
{
  g_assert_cmpint(ps_time_from_s(1.0), ==, PS_PS_PER_S);
  g_assert_cmpint(ps_time_from_s(1e-6), ==, 1000000);
  g_assert_cmpint(ps_time_from_s(1e-12), ==, 1);
  g_assert_cmpint(ps_time_from_s(2.5e-12), ==, 3); /* llround: half away */
  g_assert_cmpint(ps_time_from_s(1e300), ==, PS_TIME_NEVER);
  g_assert_cmpfloat_with_epsilon(ps_time_to_s(1500000), 1.5e-6, 1e-18);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/time/conversion", test_time_conversion);
  static Case cases[G_N_ELEMENTS(impls) * 2];
  for (guint i = 0; i < G_N_ELEMENTS(impls); i++) {
    Case *a = &cases[2 * i], *b = &cases[2 * i + 1];
    *a = (Case){&impls[i], 1};
    *b = (Case){&impls[i], 20261121};
    const char *n = impls[i].name;
    g_autofree char *p1 = g_strdup_printf("/engine/%s/order", n);
    g_autofree char *p2 = g_strdup_printf("/engine/%s/interleaved/seed=%u", n, a->seed);
    g_autofree char *p3 = g_strdup_printf("/engine/%s/million-random/seed=%u", n, a->seed);
    g_autofree char *p4 = g_strdup_printf("/engine/%s/million-random/seed=%u", n, b->seed);
    g_test_add_data_func(p1, a, test_heap_order);
    g_test_add_data_func(p2, a, test_heap_interleaved);
    g_test_add_data_func(p3, a, test_heap_million_random);
    g_test_add_data_func(p4, b, test_heap_million_random);
  }
  g_test_add_func("/engine/loop/ties-fifo", test_engine_ties_fifo);
  g_test_add_func("/engine/loop/cancel-and-until", test_engine_cancel_and_until);
  g_test_add_func("/engine/loop/self-scheduling", test_engine_self_scheduling);
  return g_test_run();
}

/* test_engine.c: the event queues and the engine loop.
 *
 * Checks ordering by time, FIFO order among equal times, cancellation,
 * run-until, that a million random events come out sorted, and, against
 * the 4-ary heap as reference, every pop of both queues under the
 * workloads that stress a ladder queue: equal times in bulk, far-future
 * outliers, growing and shrinking, pushes at the current time while the
 * front is drained, extreme times, out-of-order sequence numbers.  The
 * invariant checker runs after every mutation of the small cases.  A
 * prefetch hint leaves the events and their order as they were. */
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
  {"ladder", queue_init_, queue_clear_, queue_push_, queue_pop_, queue_check_, queue_len_},
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

/* A delay the clock cannot hold stops the engine with a flag, never an
 * assertion or a wrapped time; what ran before it ran, nothing after. */
static void test_engine_overflow(void)
{
  PsEngine *e = ps_engine_new();
  Log log = {g_array_new(FALSE, FALSE, sizeof(uint32_t)), g_array_new(FALSE, FALSE, sizeof(ps_time_t))};
  uint32_t t = ps_engine_register(e, "log", log_handler, &log);
  ps_engine_at(e, 10, t, 1, 0);
  ps_engine_at(e, PS_TIME_NEVER - 5, t, 2, 0); /* representable: runs */
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 2);
  g_assert_false(ps_engine_overflowed(e));
  ps_engine_after(e, 100, t, 3, 0); /* saturates at PS_TIME_NEVER */
  g_assert_true(ps_engine_overflowed(e));
  ps_engine_at(e, PS_TIME_NEVER - 1, t, 4, 0);
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 0);
  g_assert_cmpuint(log.seen->len, ==, 2);
  g_assert_cmpint(ps_time_add(PS_TIME_NEVER - 1, 5), ==, PS_TIME_NEVER);
  g_assert_cmpint(ps_time_add(40, 2), ==, 42);
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
    if (i % 1000 == 0) /* a few far in the future, to stretch a bucketed queue */
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

/* ---- model checking against the heap ---- */

/* A queue under test and the reference heap, fed the same events. */
typedef struct {
  const QueueImpl *impl;
  AnyQueue q;
  PsHeap ref;
  uint64_t seq;
  guint64 mutations;
  guint check_every; /* run the invariant checker every this many mutations */
  ps_time_t now;     /* time of the last pop */
} Model;

static void model_init(Model *m, const QueueImpl *impl, guint check_every)
{
  m->impl = impl;
  impl->init(&m->q);
  ps_heap_init(&m->ref);
  m->seq = 0;
  m->mutations = 0;
  m->check_every = check_every;
  m->now = INT64_MIN;
}

static void model_mutated(Model *m)
{
  if (++m->mutations % m->check_every == 0)
    g_assert_true(m->impl->check(&m->q));
  g_assert_cmpuint(m->impl->len(&m->q), ==, m->ref.len);
}

static void model_push_event(Model *m, const PsEvent *ev)
{
  m->impl->push(&m->q, ev);
  ps_heap_push(&m->ref, ev);
  model_mutated(m);
}

static void model_push(Model *m, ps_time_t time)
{
  PsEvent ev = {.time = time, .seq = m->seq, .type = 1, .target = (uint32_t)m->seq,
                .arg.u = m->seq * 3};
  m->seq++;
  model_push_event(m, &ev);
}

/* Pops from both and compares; FALSE when both are empty. */
static gboolean model_pop(Model *m)
{
  PsEvent got, want;
  gboolean g = m->impl->pop(&m->q, &got), w = ps_heap_pop(&m->ref, &want);
  g_assert_cmpint(g, ==, w);
  if (!g)
    return FALSE;
  g_assert_cmpint(got.time, ==, want.time);
  g_assert_cmpuint(got.seq, ==, want.seq);
  g_assert_cmpuint(got.target, ==, want.target);
  g_assert_cmpuint(got.arg.u, ==, want.arg.u);
  m->now = got.time;
  model_mutated(m);
  return TRUE;
}

static void model_finish(Model *m)
{
  while (model_pop(m))
    if (m->ref.len < 2000)
      m->check_every = 1;
  g_assert_true(m->impl->check(&m->q));
  m->impl->clear(&m->q);
  ps_heap_clear(&m->ref);
}

static ps_time_t rand_time(GRand *rng, ps_time_t lo, ps_time_t span)
{
  return lo + (ps_time_t)(g_rand_double(rng) * (double)span);
}

/* 20000 events at one time among 10000 before and 10000 after; while they
 * are drained, more are pushed at that same time (they must come last). */
static void test_bulk_equal_times(gconstpointer data)
{
  const Case *c = data;
  Model m;
  model_init(&m, c->impl, 997);
  for (int i = 0; i < 10000; i++) {
    model_push(&m, 5000);
    model_push(&m, 4000 + i % 1000);
    model_push(&m, 5000);
    model_push(&m, 5001 + i % 7);
  }
  int pops = 0;
  while (model_pop(&m)) {
    if (m.now == 5000 && ++pops % 3 == 0 && pops < 30000)
      model_push(&m, 5000);
    if (m.now == 5000 && pops % 11 == 0)
      model_push(&m, 5001);
  }
  model_finish(&m);
}

/* Hold with a few events 1e15 ps ahead and at PS_TIME_NEVER. */
static void test_far_outliers(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1);
  for (int i = 0; i < 2000; i++)
    model_push(&m, i % 100 == 0 ? INT64_C(1000000000000000) + i : rand_time(rng, 0, 1000000));
  model_push(&m, PS_TIME_NEVER);
  model_push(&m, PS_TIME_NEVER - 1);
  for (int round = 0; round < 20000; round++) {
    if (round == 3000)
      m.check_every = 101;
    g_assert_true(model_pop(&m));
    int r = g_rand_int_range(rng, 0, 100);
    ps_time_t t = r < 90 ? m.now + rand_time(rng, 0, 1000000)
                : r < 95 ? m.now + INT64_C(1000000000000000)
                : r < 99 ? m.now : PS_TIME_NEVER;
    model_push(&m, t < m.now ? PS_TIME_NEVER : t); /* m.now + 1e15 may overflow late */
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* Grows from empty to ~40000, changes the time scale by 1000, shrinks to
 * empty, grows again with many ties: every rung and bottom size. */
static void test_resize(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1999);
  ps_time_t now = 0;
  for (int i = 0; i < 60000; i++) {
    model_push(&m, now + rand_time(rng, 0, 10000));
    if (i % 3 == 2 && model_pop(&m))
      now = m.now;
  }
  for (int i = 0; i < 30000; i++) {
    model_pop(&m);
    model_push(&m, m.now + rand_time(rng, 0, 10000000));
  }
  while (m.ref.len > 0) {
    model_pop(&m);
    if (g_rand_int_range(rng, 0, 3) == 0)
      model_push(&m, m.now + rand_time(rng, 0, 10000000));
  }
  for (int i = 0; i < 30000; i++) {
    model_push(&m, m.now + g_rand_int_range(rng, 0, 10));
    if (i % 2)
      model_pop(&m);
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* ~300 pending; each pop pushes events at the popped time, just after it
 * and later, so the sorted front is pushed into while it is drained. */
static void test_push_at_now(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1);
  for (int i = 0; i < 300; i++)
    model_push(&m, rand_time(rng, 0, 5000));
  for (int round = 0; round < 20000; round++) {
    g_assert_true(model_pop(&m));
    int at_now = g_rand_int_range(rng, 0, 4);
    for (int i = 0; i < at_now && m.ref.len < 400; i++)
      model_push(&m, m.now);
    if (g_rand_boolean(rng))
      model_push(&m, m.now + 1);
    if (m.ref.len < 300)
      model_push(&m, m.now + rand_time(rng, 0, 5000));
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* A sorted front spanning a wide range, then many pushes inside it, in no
 * order, and pushes ahead of each pop: side overflows and is spread over a
 * new rung, again and again. */
static void test_front_overflow(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1);
  for (int rep = 0; rep < 3; rep++) {
    for (int i = 0; i < 20; i++)
      model_push(&m, m.now + i * INT64_C(1000000));
    model_pop(&m);
    for (int i = 0; i < 5000; i++) {
      model_push(&m, m.now + g_rand_int_range(rng, 1, 19000000));
      if (i % 4 == 0) {
        model_pop(&m);
        model_push(&m, m.now + g_rand_int_range(rng, 0, 10));
      }
    }
    while (model_pop(&m)) {
    } /* empty: the queue starts afresh */
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* Times 2^k apart for every k: each rung splits off only a few of them,
 * so the ladder reaches its most rungs and sorts what is left. */
static void test_geometric_times(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 13);
  for (int i = 0; i < 6200; i++)
    model_push(&m, (INT64_C(1) << g_rand_int_range(rng, 0, 62)) + g_rand_int_range(rng, 0, 3));
  for (int round = 0; round < 6000; round++) {
    model_pop(&m);
    ps_time_t d = (INT64_C(1) << g_rand_int_range(rng, 0, 40)) + g_rand_int_range(rng, 0, 3);
    model_push(&m, m.now + d);
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* Times at both ends of int64, pushed in random order, then popped with
 * pushes at or after the popped time. */
static void test_extreme_times(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  static const ps_time_t times[] = {INT64_MIN, INT64_MIN + 1, -INT64_C(1000000000000000000), -5, 0,
                                    1, INT64_MAX / 2, INT64_MAX - 1, INT64_MAX};
  Model m;
  model_init(&m, c->impl, 1);
  for (int i = 0; i < 2000; i++)
    model_push(&m, times[g_rand_int_range(rng, 0, G_N_ELEMENTS(times))]);
  while (model_pop(&m)) {
    int k = g_rand_int_range(rng, 0, G_N_ELEMENTS(times));
    if (times[k] >= m.now && m.seq < 4000)
      model_push(&m, times[k]);
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* The raw queue orders by seq even when seqs are pushed out of order
 * (the engine never does that): 3000 equal times, seq descending. */
static void test_seq_disorder(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1);
  for (int i = 0; i < 3000; i++) {
    PsEvent ev = {.time = 7, .seq = 100000 - (uint64_t)i, .target = (uint32_t)i};
    model_push_event(&m, &ev);
    PsEvent other = {.time = g_rand_int_range(rng, 0, 20), .seq = 200000 + (uint64_t)i};
    model_push_event(&m, &other);
    if (i == 500)
      m.check_every = 97;
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* Hold at tiny sizes, where the front holds most events. */
static void test_small_sizes(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  static const int sizes[] = {1, 2, 3, 5, 17, 100, 1000};
  for (guint s = 0; s < G_N_ELEMENTS(sizes); s++) {
    Model m;
    model_init(&m, c->impl, 1);
    for (int i = 0; i < sizes[s]; i++)
      model_push(&m, rand_time(rng, 0, 100));
    for (int round = 0; round < 3000; round++) {
      g_assert_true(model_pop(&m));
      model_push(&m, m.now + rand_time(rng, 0, 100));
    }
    model_finish(&m);
  }
  g_rand_free(rng);
}

/* Hold with 20000 pending under the bench's harder distributions. */
static void test_hold_bursty(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1999);
  for (int i = 0; i < 20000; i++)
    model_push(&m, g_rand_int_range(rng, 0, 20) * 1000);
  for (int round = 0; round < 60000; round++) {
    model_pop(&m);
    model_push(&m, m.now + g_rand_int_range(rng, 0, 20) * 1000);
  }
  model_finish(&m);
  g_rand_free(rng);
}

static void test_hold_heavy_tail(gconstpointer data)
{
  const Case *c = data;
  GRand *rng = g_rand_new_with_seed(c->seed);
  Model m;
  model_init(&m, c->impl, 1999);
  for (int i = 0; i < 20000; i++)
    model_push(&m, (ps_time_t)g_rand_int_range(rng, 0, 1000) << g_rand_int_range(rng, 0, 40));
  for (int round = 0; round < 60000; round++) {
    model_pop(&m);
    model_push(&m, m.now + ((ps_time_t)g_rand_int_range(rng, 0, 1000) << g_rand_int_range(rng, 0, 40)));
  }
  model_finish(&m);
  g_rand_free(rng);
}

/* ---- the engine against the heap ---- */

/* A hold model run twice: through the engine, and by hand on a PsHeap with
 * the engine's seq numbering.  The streams of (time, seq) must match. */
typedef struct {
  uint32_t type;
  int left;
  guint64 rng;
  GArray *log; /* PsEvent, in the order handled */
} EngineHold;

static ps_time_t hold_delay(guint64 *s)
{
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  uint64_t r = *s >> 33;
  switch (r % 4) {
  case 0:
    return 0; /* at now */
  case 1:
    return (ps_time_t)(r % 7) * 100; /* few distinct times */
  case 2:
    return (ps_time_t)(r % 100000);
  default:
    return (ps_time_t)(r % 8) << 40; /* far ahead */
  }
}

static void engine_hold_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  EngineHold *h = ctx;
  g_array_append_val(h->log, *ev);
  if (h->left-- > 0)
    ps_engine_after(engine, hold_delay(&h->rng), h->type, ev->target, ev->arg.u + 1);
}

static void test_engine_against_heap(void)
{
  const int pending = 5000, ops = 200000;
  PsEngine *e = ps_engine_new();
  EngineHold h = {0, ops, 42, g_array_new(FALSE, FALSE, sizeof(PsEvent))};
  h.type = ps_engine_register(e, "hold", engine_hold_handler, &h);
  for (int i = 0; i < pending; i++)
    ps_engine_at(e, hold_delay(&h.rng), h.type, (uint32_t)i, 0);
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, (guint64)(pending + ops));
  ps_engine_free(e);

  PsHeap ref;
  ps_heap_init(&ref);
  guint64 rng = 42, seq = 0;
  for (int i = 0; i < pending; i++) {
    PsEvent ev = {.time = hold_delay(&rng), .seq = seq++, .type = h.type, .target = (uint32_t)i};
    ps_heap_push(&ref, &ev);
  }
  int left = ops;
  PsEvent ev;
  for (guint i = 0; ps_heap_pop(&ref, &ev); i++) {
    g_assert_cmpuint(i, <, h.log->len);
    const PsEvent *got = &g_array_index(h.log, PsEvent, i);
    g_assert_cmpint(got->time, ==, ev.time);
    g_assert_cmpuint(got->seq, ==, ev.seq);
    g_assert_cmpuint(got->target, ==, ev.target);
    g_assert_cmpuint(got->arg.u, ==, ev.arg.u);
    if (left-- > 0) {
      PsEvent nx = {.time = ev.time + hold_delay(&rng), .seq = seq++, .type = h.type,
                    .target = ev.target, .arg.u = ev.arg.u + 1};
      ps_heap_push(&ref, &nx);
    }
  }
  ps_heap_clear(&ref);
  g_array_free(h.log, TRUE);
}

/* The hold model with and without a prefetch hint: the same events in the
 * same order, and every event a hint named is one that ran (engine.h: a
 * hint changes nothing). */
typedef struct {
  EngineHold h;  /* first: the handler's context is the hint's */
  int calls[2];  /* per stage */
  GArray *seqs;  /* uint64_t: the seq of every event hinted */
} HintedHold;

static void hold_prefetch(const PsEvent *ev, int stage, void *ctx)
{
  HintedHold *hh = ctx;
  g_assert_true(stage == 0 || stage == 1);
  hh->calls[stage]++;
  g_array_append_val(hh->seqs, ev->seq);
}

static void hold_run(gboolean hint, HintedHold *hh)
{
  const int pending = 2000;
  PsEngine *e = ps_engine_new();
  hh->h = (EngineHold){0, 50000, 7, g_array_new(FALSE, FALSE, sizeof(PsEvent))};
  hh->seqs = g_array_new(FALSE, FALSE, sizeof(uint64_t));
  hh->h.type = ps_engine_register(e, "hold", engine_hold_handler, hh);
  if (hint)
    ps_engine_set_prefetch(e, hh->h.type, hold_prefetch);
  for (int i = 0; i < pending; i++)
    ps_engine_at(e, hold_delay(&hh->h.rng), hh->h.type, (uint32_t)i, 0);
  ps_engine_run(e, PS_TIME_NEVER);
  ps_engine_free(e);
}

static int cmp_u64(gconstpointer a, gconstpointer b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void test_engine_prefetch(void)
{
  HintedHold plain = {0}, hinted = {0};
  hold_run(FALSE, &plain);
  hold_run(TRUE, &hinted);
  g_assert_cmpint(plain.calls[0] + plain.calls[1], ==, 0);
  g_assert_cmpint(hinted.calls[0], >, 1000);
  g_assert_cmpint(hinted.calls[1], >, 1000);
  g_assert_cmpuint(hinted.h.log->len, ==, plain.h.log->len);
  g_assert_cmpmem(hinted.h.log->data, hinted.h.log->len * sizeof(PsEvent), plain.h.log->data,
                  plain.h.log->len * sizeof(PsEvent));
  /* every seq hinted is the seq of an event that ran */
  GArray *ran = g_array_new(FALSE, FALSE, sizeof(uint64_t));
  for (guint i = 0; i < plain.h.log->len; i++)
    g_array_append_val(ran, g_array_index(plain.h.log, PsEvent, i).seq);
  g_array_sort(ran, cmp_u64);
  for (guint i = 0; i < hinted.seqs->len; i++) {
    uint64_t seq = g_array_index(hinted.seqs, uint64_t, i);
    g_assert_nonnull(bsearch(&seq, ran->data, ran->len, sizeof(uint64_t), cmp_u64));
  }
  g_array_free(ran, TRUE);
  for (int k = 0; k < 2; k++) {
    HintedHold *hh = k ? &hinted : &plain;
    g_array_free(hh->h.log, TRUE);
    g_array_free(hh->seqs, TRUE);
  }
}

/* Events at now scheduled by handlers run in the same call, after the
 * ones already pending at now; `until` stops before later ones. */
static void at_now_handler(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  log_handler(engine, ev, ctx);
  if (ev->arg.u > 0)
    ps_engine_after(engine, 0, ev->type, ev->target + 100, ev->arg.u - 1);
}

static void test_engine_until_and_now(void)
{
  PsEngine *e = ps_engine_new();
  Log log = {g_array_new(FALSE, FALSE, sizeof(uint32_t)), g_array_new(FALSE, FALSE, sizeof(ps_time_t))};
  uint32_t t = ps_engine_register(e, "at-now", at_now_handler, &log);
  ps_engine_at(e, 10, t, 1, 2); /* 1, then 101 and 201 at 10 */
  ps_engine_at(e, 10, t, 2, 0);
  ps_engine_at(e, 11, t, 3, 0);
  g_assert_cmpuint(ps_engine_run(e, 10), ==, 4);
  g_assert_cmpint(ps_engine_now(e), ==, 10);
  static const uint32_t want[] = {1, 2, 101, 201};
  for (guint i = 0; i < G_N_ELEMENTS(want); i++)
    g_assert_cmpuint(g_array_index(log.seen, uint32_t, i), ==, want[i]);
  g_assert_cmpuint(ps_engine_pending(e), ==, 1);
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 1);
  g_assert_cmpint(ps_engine_now(e), ==, 11);
  /* a delay of "never" does not wrap: the engine flags it and stops, the
   * clock where it was (a run that would pass 2^63 ps is an error, not an
   * answer at a saturated clock) */
  ps_engine_after(e, PS_TIME_NEVER, t, 4, 0);
  g_assert_true(ps_engine_overflowed(e));
  g_assert_cmpuint(ps_engine_run(e, PS_TIME_NEVER), ==, 0);
  g_assert_cmpint(ps_engine_now(e), ==, 11);
  g_array_free(log.seen, TRUE);
  g_array_free(log.times, TRUE);
  ps_engine_free(e);
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
  static const struct {
    const char *name;
    GTestDataFunc func;
    gboolean both_seeds;
  } tests[] = {
    {"order", test_heap_order, FALSE},
    {"interleaved", test_heap_interleaved, FALSE},
    {"million-random", test_heap_million_random, TRUE},
    {"bulk-equal-times", test_bulk_equal_times, FALSE},
    {"far-outliers", test_far_outliers, TRUE},
    {"resize", test_resize, TRUE},
    {"push-at-now", test_push_at_now, TRUE},
    {"front-overflow", test_front_overflow, TRUE},
    {"geometric-times", test_geometric_times, FALSE},
    {"extreme-times", test_extreme_times, FALSE},
    {"seq-disorder", test_seq_disorder, FALSE},
    {"small-sizes", test_small_sizes, FALSE},
    {"hold-bursty", test_hold_bursty, FALSE},
    {"hold-heavy-tail", test_hold_heavy_tail, FALSE},
  };
  for (guint i = 0; i < G_N_ELEMENTS(impls); i++) {
    cases[2 * i] = (Case){&impls[i], 1};
    cases[2 * i + 1] = (Case){&impls[i], 20261121};
    for (guint k = 0; k < G_N_ELEMENTS(tests); k++)
      for (guint s = 0; s < (tests[k].both_seeds ? 2u : 1u); s++) {
        const Case *c = &cases[2 * i + s];
        g_autofree char *path = g_strdup_printf("/engine/%s/%s/seed=%u", impls[i].name,
                                                tests[k].name, c->seed);
        g_test_add_data_func(path, c, tests[k].func);
      }
  }
  g_test_add_func("/engine/loop/ties-fifo", test_engine_ties_fifo);
  g_test_add_func("/engine/loop/overflow", test_engine_overflow);
  g_test_add_func("/engine/loop/cancel-and-until", test_engine_cancel_and_until);
  g_test_add_func("/engine/loop/self-scheduling", test_engine_self_scheduling);
  g_test_add_func("/engine/loop/against-heap", test_engine_against_heap);
  g_test_add_func("/engine/loop/prefetch", test_engine_prefetch);
  g_test_add_func("/engine/loop/until-and-now", test_engine_until_and_now);
  return g_test_run();
}

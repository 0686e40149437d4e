/* engine.c: the event loop over the ladder queue, with a handler per event type.
 *
 * Invariant: now never decreases; an event scheduled in the past is a
 * programming error. */
#include "engine.h"

typedef struct {
  char *name;           /* as registered, for a debugger to show */
  PsHandler handler;
  void *ctx;
  PsPrefetch prefetch;  /* NULL: none */
} HandlerEntry;

/* How far ahead of the running event the hints look (events). */
#define AHEAD_FAR 10
#define AHEAD_NEAR 5

struct PsEngine {
  PsQueue queue;
  ps_time_t now;
  uint64_t next_seq;
  uint64_t events_run;
  GArray *handlers;     /* HandlerEntry */
  GHashTable *cancelled; /* seq -> seq, NULL until the first cancel */
  gboolean stop;
  gboolean overflowed;  /* an event fell at or past PS_TIME_NEVER */
  uint64_t max_events;  /* 0: no limit */
  gboolean prefetching; /* some type has a hint */
  gboolean limited;     /* stopped at max_events */
};

PsEngine *ps_engine_new(void)
{
  PsEngine *e = g_new0(PsEngine, 1);
  ps_queue_init(&e->queue);
  e->handlers = g_array_new(FALSE, TRUE, sizeof(HandlerEntry));
  return e;
}

void ps_engine_free(PsEngine *engine)
{
  if (!engine)
    return;
  for (guint i = 0; i < engine->handlers->len; i++)
    g_free(g_array_index(engine->handlers, HandlerEntry, i).name);
  g_array_free(engine->handlers, TRUE);
  if (engine->cancelled)
    g_hash_table_destroy(engine->cancelled);
  ps_queue_clear(&engine->queue);
  g_free(engine);
}

uint32_t ps_engine_register(PsEngine *engine, const char *name, PsHandler handler, void *ctx)
{
  g_return_val_if_fail(engine && handler, 0);
  HandlerEntry h = {g_strdup(name), handler, ctx, NULL};
  g_array_append_val(engine->handlers, h);
  return engine->handlers->len - 1;
}

void ps_engine_set_prefetch(PsEngine *engine, uint32_t type, PsPrefetch prefetch)
{
  g_return_if_fail(engine && type < engine->handlers->len);
  g_array_index(engine->handlers, HandlerEntry, type).prefetch = prefetch;
  engine->prefetching = TRUE;
}

/* The hints of the events AHEAD_FAR and AHEAD_NEAR places ahead. */
static inline void prefetch_ahead(const PsEngine *engine)
{
  const PsEvent *ev = ps_queue_ahead(&engine->queue, AHEAD_FAR);
  const HandlerEntry *hs = (const HandlerEntry *)(void *)engine->handlers->data;
  if (ev && hs[ev->type].prefetch)
    hs[ev->type].prefetch(ev, 0, hs[ev->type].ctx);
  ev = ps_queue_ahead(&engine->queue, AHEAD_NEAR);
  if (ev && hs[ev->type].prefetch)
    hs[ev->type].prefetch(ev, 1, hs[ev->type].ctx);
}

/* Every way of scheduling ends here, with the queue's fast path inline:
 * ev has its time, type, target and arg; this gives it its seq. */
static inline uint64_t schedule(PsEngine *engine, PsEvent *ev)
{
  if (G_UNLIKELY(ev->time >= PS_TIME_NEVER)) {
    /* the clock would pass 2^63 ps: stop, and let the caller say so */
    engine->overflowed = TRUE;
    engine->stop = TRUE;
    return 0;
  }
  g_assert(ev->time >= engine->now);
  g_assert(ev->type < engine->handlers->len);
  ev->seq = engine->next_seq++;
  ps_queue_push_inline(&engine->queue, ev);
  return ev->seq;
}

uint64_t ps_engine_at(PsEngine *engine, ps_time_t time, uint32_t type, uint32_t target,
                      uint64_t arg)
{
  PsEvent ev = {.time = time, .type = type, .target = target, .arg.u = arg};
  return schedule(engine, &ev);
}

uint64_t ps_engine_after(PsEngine *engine, ps_time_t delay, uint32_t type, uint32_t target,
                         uint64_t arg)
{
  g_assert(delay >= 0);
  ps_time_t time = delay > PS_TIME_NEVER - engine->now ? PS_TIME_NEVER : engine->now + delay;
  PsEvent ev = {.time = time, .type = type, .target = target, .arg.u = arg};
  return schedule(engine, &ev);
}

void ps_engine_cancel(PsEngine *engine, uint64_t seq)
{
  if (!engine->cancelled)
    engine->cancelled = g_hash_table_new(g_int64_hash, g_int64_equal);
  uint64_t *key = g_new(uint64_t, 1);
  *key = seq;
  g_hash_table_add(engine->cancelled, key);
}

ps_time_t ps_engine_now(const PsEngine *engine) { return engine->now; }
const ps_time_t *ps_engine_clock(const PsEngine *engine) { return &engine->now; }
size_t ps_engine_pending(const PsEngine *engine) { return ps_queue_len(&engine->queue); }
uint64_t ps_engine_events_run(const PsEngine *engine) { return engine->events_run; }
gboolean ps_engine_overflowed(const PsEngine *engine) { return engine->overflowed; }

void ps_engine_set_max_events(PsEngine *engine, uint64_t max) { engine->max_events = max; }

gboolean ps_engine_limited(const PsEngine *engine) { return engine->limited; }

static gboolean take_cancelled(PsEngine *engine, uint64_t seq)
{
  if (!engine->cancelled || g_hash_table_size(engine->cancelled) == 0)
    return FALSE;
  gpointer orig = NULL;
  if (!g_hash_table_lookup_extended(engine->cancelled, &seq, &orig, NULL))
    return FALSE;
  g_hash_table_remove(engine->cancelled, &seq);
  g_free(orig);
  return TRUE;
}

uint64_t ps_engine_run(PsEngine *engine, ps_time_t until)
{
  uint64_t ran = 0;
  PsQueue *q = &engine->queue;
  PsEvent ev;
  engine->stop = engine->overflowed;
  while (!engine->stop) {
    if (until != PS_TIME_NEVER) {
      const PsEvent *next = ps_queue_peek(q);
      if (!next || next->time > until)
        break;
    }
    if (G_UNLIKELY(engine->max_events != 0 && engine->events_run >= engine->max_events)) {
      engine->limited = ps_queue_peek(q) != NULL;
      break;
    }
    if (!ps_queue_pop_inline(q, &ev))
      break;
    if (G_UNLIKELY(engine->cancelled != NULL) && take_cancelled(engine, ev.seq))
      continue;
    engine->now = ev.time;
    if (engine->prefetching)
      prefetch_ahead(engine);
    const HandlerEntry *h = &g_array_index(engine->handlers, HandlerEntry, ev.type);
    h->handler(engine, &ev, h->ctx);
    ran++;
    engine->events_run++;
  }
  /* Running until a time leaves the clock at that time, as if an empty
   * event had fired there. */
  if (!engine->stop && until != PS_TIME_NEVER && engine->now < until)
    engine->now = until;
  return ran;
}

/* engine.h: the discrete-event engine.  It orders time and nothing more:
 * it knows neither TPUs nor models.
 *
 * Invariant: events leave the queue in (time, seq) order, where seq is the
 * order in which they were scheduled; so events at equal times run first
 * in, first out and every run is deterministic. */
#ifndef PS_ENGINE_H
#define PS_ENGINE_H

#include "../common.h"

/* An event, stored by value in the queue (32 bytes). */
typedef struct {
  ps_time_t time;
  uint64_t seq;    /* set by the engine when scheduled */
  uint32_t type;   /* index of the handler registered for it */
  uint32_t target; /* which entity of that type (a core, a link...) */
  union {
    uint64_t u;
    int64_t i;
    void *p;
  } arg;
} PsEvent;

typedef struct PsEngine PsEngine;

/* Called for each event popped; ctx is the pointer given at registration. */
typedef void (*PsHandler)(PsEngine *engine, const PsEvent *event, void *ctx);

PsEngine *ps_engine_new(void);
void ps_engine_free(PsEngine *engine);

/* Registers a handler and returns the event type to schedule it with. */
uint32_t ps_engine_register(PsEngine *engine, const char *name, PsHandler handler, void *ctx);
const char *ps_engine_type_name(const PsEngine *engine, uint32_t type);

/* Schedules an event at absolute time `time` (>= now).  Returns its seq,
 * usable with ps_engine_cancel(). */
uint64_t ps_engine_at(PsEngine *engine, ps_time_t time, uint32_t type, uint32_t target,
                      uint64_t arg);
uint64_t ps_engine_at_ptr(PsEngine *engine, ps_time_t time, uint32_t type, uint32_t target,
                          void *arg);
/* Same, `delay` after now. */
uint64_t ps_engine_after(PsEngine *engine, ps_time_t delay, uint32_t type, uint32_t target,
                         uint64_t arg);

/* Marks a pending event cancelled; it is skipped when popped. */
void ps_engine_cancel(PsEngine *engine, uint64_t seq);

ps_time_t ps_engine_now(const PsEngine *engine);
size_t ps_engine_pending(const PsEngine *engine);
uint64_t ps_engine_events_run(const PsEngine *engine);

/* Runs events until the queue is empty, or until the next event is later
 * than `until` (PS_TIME_NEVER for no limit), or ps_engine_stop() is
 * called.  Returns the number of events run by this call. */
uint64_t ps_engine_run(PsEngine *engine, ps_time_t until);
void ps_engine_stop(PsEngine *engine);

/* The queues, exposed for tests and the benchmark.  PsHeap: a 4-ary
 * min-heap of PsEvent keyed on (time, seq). */
typedef struct {
  PsEvent *items;
  size_t len;
  size_t cap;
} PsHeap;

void ps_heap_init(PsHeap *heap);
void ps_heap_clear(PsHeap *heap);
void ps_heap_push(PsHeap *heap, const PsEvent *event);
/* Removes the smallest event into *out; FALSE if empty. */
gboolean ps_heap_pop(PsHeap *heap, PsEvent *out);
/* Checks the heap property everywhere (for tests). */
gboolean ps_heap_check(const PsHeap *heap);

/* The engine's queue: a calendar queue (buckets of adaptive width) with a
 * PsHeap in front; same order as PsHeap, amortized O(1) per operation on
 * the usual hold workloads.  Fields are private to queue.c. */
typedef struct {
  PsEvent ev;
  uint32_t next;        /* next slot in its bucket, far or free list */
} PsQueueSlot;

typedef struct {
  PsHeap near;          /* events before near_end, heap-ordered */
  PsQueueSlot *pool;    /* slots of bucketed and far events */
  size_t pool_cap;
  uint32_t free_head;
  uint32_t *bucket;     /* per bucket: first slot, or UINT32_MAX */
  size_t nb;            /* buckets in the window */
  size_t cur;           /* next bucket to drain */
  int shift;            /* bucket width is 2^shift ps */
  ps_time_t win_start;
  ps_time_t near_end;
  uint32_t far_head;
  size_t far_count;
  size_t len;
} PsQueue;

void ps_queue_init(PsQueue *q);
void ps_queue_clear(PsQueue *q);
void ps_queue_push(PsQueue *q, const PsEvent *event);
gboolean ps_queue_pop(PsQueue *q, PsEvent *out);
/* The smallest event, or NULL; valid until the next push or pop. */
const PsEvent *ps_queue_peek(PsQueue *q);
size_t ps_queue_len(const PsQueue *q);
gboolean ps_queue_check(const PsQueue *q);

#endif

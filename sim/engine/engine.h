/* engine.h: the discrete-event engine.  It orders time and nothing more:
 * it knows neither TPUs nor models.
 *
 * Invariant: events leave the queue in (time, seq) order, where seq is the
 * order in which they were scheduled; so events at equal times run first
 * in, first out and every run is deterministic. */
#ifndef PS_ENGINE_H
#define PS_ENGINE_H

#include "../common/common.h"

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

/* A hint, never a change: called with an event a few places ahead of the
 * one about to run (stage 0 farther ahead, stage 1 nearer), so that the
 * handler's state for it can be fetched into the cache by the time it
 * runs (stage 1 may read what stage 0 fetched).  It must not change any
 * state: the events and their order are the same with or without it. */
typedef void (*PsPrefetch)(const PsEvent *event, int stage, void *ctx);
/* Sets the hint of an event type (ctx: the handler's). */
void ps_engine_set_prefetch(PsEngine *engine, uint32_t type, PsPrefetch prefetch);

/* Schedules an event at absolute time `time` (>= now).  Returns its seq,
 * usable with ps_engine_cancel(). */
uint64_t ps_engine_at(PsEngine *engine, ps_time_t time, uint32_t type, uint32_t target,
                      uint64_t arg);
/* Same, `delay` (>= 0) after now; saturates at PS_TIME_NEVER. */
uint64_t ps_engine_after(PsEngine *engine, ps_time_t delay, uint32_t type, uint32_t target,
                         uint64_t arg);

/* Marks a pending event cancelled; it is skipped when popped. */
void ps_engine_cancel(PsEngine *engine, uint64_t seq);

ps_time_t ps_engine_now(const PsEngine *engine);
/* The engine's clock itself (transfer none), valid as long as the engine: a
 * read through it is ps_engine_now(), without the call, for hot paths that
 * ask for the time of every message. */
const ps_time_t *ps_engine_clock(const PsEngine *engine);
size_t ps_engine_pending(const PsEngine *engine);
uint64_t ps_engine_events_run(const PsEngine *engine);

/* Runs events until the queue is empty, or until the next event is later
 * than `until` (PS_TIME_NEVER for no limit), or the clock overflows (see
 * below).  Returns the number of events run by this call. */
uint64_t ps_engine_run(PsEngine *engine, ps_time_t until);
/* TRUE once an event was scheduled at or after PS_TIME_NEVER (a delay too
 * long for the picosecond clock, about 106 days): the engine then stopped,
 * dropped that event, and runs nothing more. */
gboolean ps_engine_overflowed(const PsEngine *engine);

/* At most `max` events in all (0: no limit, the default): ps_engine_run
 * stops before the event that would pass it, and ps_engine_limited() then
 * says so.  A guard for runs that would not end in reasonable time or
 * memory. */
void ps_engine_set_max_events(PsEngine *engine, uint64_t max);
gboolean ps_engine_limited(const PsEngine *engine);

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

/* The engine's queue: a ladder queue (Tang, Goh and Thng 2005) whose
 * buckets are chains of 1 KiB chunks, in front of a sorted array; same
 * order as PsHeap, amortized O(1) per operation (see queue.c).  Fields are
 * private to queue.c and the inline fast paths below. */
#define PS_QUEUE_CHUNK 32 /* events per chunk of a bucket (1 KiB) */
#define PS_QUEUE_RUNGS 8  /* most rungs in the ladder */

/* An unsorted bucket: a chain of chunks, all full but the last. */
typedef struct {
  uint32_t head, tail;  /* first and last chunk, when n > 0 */
  uint32_t n;           /* events in the bucket */
  uint32_t pad_;
} PsQueueBucket;

/* A rung: nb buckets of width 2^shift; bucket i holds the times in
 * [start + i * 2^shift, start + (i+1) * 2^shift), cut at `last`. */
typedef struct {
  PsQueueBucket *b;
  ps_time_t start;
  ps_time_t last;       /* the largest time this rung holds */
  uint32_t nb;
  uint32_t cur;         /* buckets before cur are empty and closed */
  int shift;
} PsQueueRung;

typedef struct {
  PsEvent ev[PS_QUEUE_CHUNK];
} PsQueueChunk;

typedef struct {
  PsEvent *bottom;      /* sorted; the next event is bottom[bpos] */
  size_t bpos, blen, bcap;
  ps_time_t bottom_last; /* bottom and side hold every event <= this */
  PsHeap side;          /* events pushed at or before bottom_last */
  size_t side_max;      /* side this big is spread over a new rung */
  PsQueueRung rung[PS_QUEUE_RUNGS]; /* rung[nrungs-1] is the finest */
  int nrungs;
  PsQueueBucket top;    /* every event after rung[0].last */
  ps_time_t top_min, top_max; /* of top's events, when it has some */
  PsQueueChunk *chunk;  /* the pool of chunks */
  uint32_t *next;       /* per chunk: next in its bucket or the free list */
  uint32_t nchunks;
  uint32_t free_chunk;  /* head of the free list */
  uint32_t nfree;       /* chunks on it */
  uint32_t *count;      /* scratch for the bottom's counting sort */
  size_t count_cap;
  size_t len;
} PsQueue;

void ps_queue_init(PsQueue *q);
void ps_queue_clear(PsQueue *q);
/* Adds a copy of *event (any time, even before one already popped). */
void ps_queue_push(PsQueue *q, const PsEvent *event);
/* Removes the smallest event in (time, seq) order into *out; FALSE if empty. */
gboolean ps_queue_pop(PsQueue *q, PsEvent *out);
/* The smallest event, or NULL; valid until the next push or pop. */
const PsEvent *ps_queue_peek(PsQueue *q);
size_t ps_queue_len(const PsQueue *q);
/* Checks every invariant of the structure (for tests; linear time). */
gboolean ps_queue_check(const PsQueue *q);

/* ps_queue_push() and ps_queue_pop() in two halves, for the engine's loop:
 * the common cases inline (a push into a rung's bucket while its last
 * chunk has room, a pop from the sorted front), the rest out of line.
 * Each function, either half, has the full semantics. */
void ps_queue_push_slow(PsQueue *q, const PsEvent *event);
gboolean ps_queue_pop_slow(PsQueue *q, PsEvent *out);

static inline gboolean ps_event_before(const PsEvent *a, const PsEvent *b)
{
  return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

static inline void ps_queue_push_inline(PsQueue *q, const PsEvent *event)
{
  if (G_LIKELY(event->time > q->bottom_last)) {
    /* the finest rung that holds its time, as ps_queue_push_slow finds */
    for (int i = q->nrungs - 1; i >= 0; i--) {
      PsQueueRung *r = &q->rung[i];
      if (event->time > r->last)
        continue;
      PsQueueBucket *b = &r->b[((uint64_t)event->time - (uint64_t)r->start) >> r->shift];
      uint32_t k = b->n % PS_QUEUE_CHUNK;
      if (G_LIKELY(k != 0)) {
        q->chunk[b->tail].ev[k] = *event;
        b->n++;
        q->len++;
        return;
      }
      break;
    }
  }
  ps_queue_push_slow(q, event);
}

/* The event k places after the next one in the sorted front, or NULL: the
 * one that will most likely run then (a hint; it ignores the side heap and
 * events pushed meanwhile). */
static inline const PsEvent *ps_queue_ahead(const PsQueue *q, size_t k)
{
  return q->bpos + k < q->blen ? &q->bottom[q->bpos + k] : NULL;
}

static inline gboolean ps_queue_pop_inline(PsQueue *q, PsEvent *out)
{
  if (G_LIKELY(q->bpos < q->blen &&
               (q->side.len == 0 || ps_event_before(&q->bottom[q->bpos], &q->side.items[0])))) {
    q->len--;
    *out = q->bottom[q->bpos++];
    return TRUE;
  }
  return ps_queue_pop_slow(q, out);
}

#endif

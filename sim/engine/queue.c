/* queue.c: the engine's event queue, a calendar queue with a small heap in
 * front (in the spirit of Brown's calendar queue and the ladder queue).
 *
 * Pending events live by value in a pool of slots.  Time is cut into a
 * window of `nb` buckets of width 2^shift starting at win_start; a bucket
 * is an unsorted singly linked list of slots.  Events earlier than the
 * drained frontier (near_end) sit in `near`, a (time, seq) heap; events
 * past the window sit in the unsorted `far` list.
 *
 * Invariant: every event in near < near_end <= every event in a bucket
 * < window end <= every event in far.  So the minimum of near is the
 * minimum of the queue; when near is empty the next non-empty bucket is
 * moved into it, and when the window is used up it is rebuilt from far
 * with a bucket width fitted to the events there. */
#include "engine.h"

#include <string.h>

#define NIL UINT32_MAX
#define MIN_BUCKETS 16
#define MAX_BUCKETS (1u << 21)
#define SAMPLE 64
#ifndef PREFETCH
#define PREFETCH 16 /* buckets ahead */
#endif
#ifndef PER_BUCKET
#define PER_BUCKET 2.0 /* target events per bucket */
#endif

static uint32_t slot_alloc(PsQueue *q)
{
  if (q->free_head == NIL) {
    size_t old = q->pool_cap;
    q->pool_cap = old ? old * 2 : 4096;
    g_assert(q->pool_cap < NIL);
    q->pool = g_renew(PsQueueSlot, q->pool, q->pool_cap);
    for (size_t i = old; i < q->pool_cap; i++)
      q->pool[i].next = i + 1 < q->pool_cap ? (uint32_t)(i + 1) : NIL;
    q->free_head = (uint32_t)old;
  }
  uint32_t s = q->free_head;
  q->free_head = q->pool[s].next;
  return s;
}

static inline void slot_free(PsQueue *q, uint32_t s)
{
  q->pool[s].next = q->free_head;
  q->free_head = s;
}

void ps_queue_init(PsQueue *q)
{
  memset(q, 0, sizeof *q);
  ps_heap_init(&q->near);
  q->free_head = NIL;
  q->far_head = NIL;
  q->nb = 0; /* no window yet: everything goes to far until the first pop */
  q->near_end = INT64_MIN;
}

void ps_queue_clear(PsQueue *q)
{
  g_free(q->pool);
  g_free(q->bucket);
  ps_heap_clear(&q->near);
  ps_queue_init(q);
}

/* Links slot s into a bucket or far, given that its time >= near_end. */
static inline void place(PsQueue *q, uint32_t s)
{
  uint64_t b = (uint64_t)(q->pool[s].ev.time - q->win_start) >> q->shift;
  if (b < q->nb) {
    q->pool[s].next = q->bucket[b];
    q->bucket[b] = s;
  } else {
    q->pool[s].next = q->far_head;
    q->far_head = s;
    q->far_count++;
  }
}

void ps_queue_push(PsQueue *q, const PsEvent *ev)
{
  q->len++;
  if (ev->time < q->near_end) {
    ps_heap_push(&q->near, ev);
    return;
  }
  uint32_t s = slot_alloc(q);
  q->pool[s].ev = *ev;
  place(q, s);
}

static int cmp_time(const void *a, const void *b)
{
  ps_time_t x = *(const ps_time_t *)a, y = *(const ps_time_t *)b;
  return (x > y) - (x < y);
}

/* Near and every bucket are empty: fit a new window to the events in far.
 * The bucket width comes from a sample's inter-quartile spacing, so a few
 * events far in the future do not stretch the buckets. */
static void rebuild(PsQueue *q)
{
  size_t n = q->far_count;
  ps_time_t sample[SAMPLE];
  size_t ns = 0, stride = n / SAMPLE + 1, i = 0;
  ps_time_t tmin = PS_TIME_NEVER;
  for (uint32_t s = q->far_head; s != NIL; s = q->pool[s].next, i++) {
    ps_time_t t = q->pool[s].ev.time;
    if (t < tmin)
      tmin = t;
    if (i % stride == 0 && ns < SAMPLE)
      sample[ns++] = t;
  }
  qsort(sample, ns, sizeof sample[0], cmp_time);
  /* spacing between events ~ (q3 - q1) / (half of n); aim at ~2 per bucket */
  double span = ns >= 4 ? (double)(sample[3 * ns / 4] - sample[ns / 4]) : 0.0;
  double width = span > 0 ? PER_BUCKET * span / (0.5 * (double)n) : 1.0;
  int shift = 0;
  while (shift < 62 && (double)(INT64_C(1) << (shift + 1)) <= width)
    shift++;
  size_t nb = MIN_BUCKETS;
  int log_nb = 4;
  while (nb < n && nb < MAX_BUCKETS) {
    nb *= 2;
    log_nb++;
  }
  if (shift > 61 - log_nb) /* keep the window end representable */
    shift = 61 - log_nb;
  if (nb != q->nb) {
    q->bucket = g_renew(uint32_t, q->bucket, nb);
    q->nb = nb;
  }
  memset(q->bucket, 0xff, nb * sizeof(uint32_t));
  q->shift = shift;
  q->win_start = tmin;
  q->cur = 0;
  q->near_end = tmin;
  uint32_t s = q->far_head;
  q->far_head = NIL;
  q->far_count = 0;
  while (s != NIL) {
    uint32_t nx = q->pool[s].next;
    place(q, s);
    s = nx;
  }
}

gboolean ps_queue_pop(PsQueue *q, PsEvent *out)
{
  if (q->len == 0)
    return FALSE;
  while (q->near.len == 0) {
    if (q->cur < q->nb) {
      uint32_t s = q->bucket[q->cur];
      q->bucket[q->cur] = NIL;
      /* The slots of the buckets about to be drained were written long ago
       * and are likely out of cache: fetch them ahead. */
      if (q->cur + PREFETCH < q->nb && q->bucket[q->cur + PREFETCH] != NIL)
        __builtin_prefetch(&q->pool[q->bucket[q->cur + PREFETCH]]);
      q->cur++;
      q->near_end += INT64_C(1) << q->shift;
      while (s != NIL) {
        uint32_t nx = q->pool[s].next;
        ps_heap_push(&q->near, &q->pool[s].ev);
        slot_free(q, s);
        s = nx;
      }
    } else {
      rebuild(q);
    }
  }
  q->len--;
  return ps_heap_pop(&q->near, out);
}

const PsEvent *ps_queue_peek(PsQueue *q)
{
  if (q->len == 0)
    return NULL;
  PsEvent ev;
  /* Pop and push back: cheap, since it lands in near. */
  ps_queue_pop(q, &ev);
  q->len++;
  ps_heap_push(&q->near, &ev);
  return &q->near.items[0];
}

size_t ps_queue_len(const PsQueue *q)
{
  return q->len;
}

gboolean ps_queue_check(const PsQueue *q)
{
  if (!ps_heap_check(&q->near))
    return FALSE;
  size_t count = q->near.len;
  for (size_t i = 0; i < q->near.len; i++)
    if (q->near.items[i].time >= q->near_end)
      return FALSE;
  ps_time_t win_end = q->nb ? q->win_start + ((ps_time_t)q->nb << q->shift) : q->near_end;
  for (size_t b = 0; b < q->nb; b++)
    for (uint32_t s = q->bucket[b]; s != NIL; s = q->pool[s].next) {
      ps_time_t lo = q->win_start + ((ps_time_t)b << q->shift);
      ps_time_t t = q->pool[s].ev.time;
      if (b < q->cur || t < lo || t >= lo + (INT64_C(1) << q->shift))
        return FALSE;
      count++;
    }
  for (uint32_t s = q->far_head; s != NIL; s = q->pool[s].next) {
    if (q->pool[s].ev.time < win_end)
      return FALSE;
    count++;
  }
  return count == q->len;
}

/* queue.c: the engine's event queue, a ladder queue (Tang, Goh and Thng,
 * "Ladder queue: an O(1) priority queue structure for large-scale discrete
 * event simulation", 2005) whose buckets are chains of contiguous chunks.
 *
 * Pending events live by value in one of three places, from the earliest:
 *   - bottom: a sorted array drained front to back, plus `side`, a small
 *     (time, seq) heap for events pushed into bottom's range once it is
 *     sorted that cannot go at either end of it (an event at now goes in
 *     front);
 *   - rungs, rung[nrungs-1] the finest: arrays of unsorted buckets of width
 *     2^shift.  A bucket is a chain of 1 KiB chunks, so a push appends to
 *     its last chunk and a drain reads memory sequentially;
 *   - top: one unsorted bucket for everything later than the rungs.
 * When bottom runs dry, the next non-empty bucket of the finest rung is
 * counting-sorted into it if it is small (then insertion-sorted: within a
 * bucket events are already in push order, so equal times cost nothing);
 * a big bucket is spread over a new, finer rung fitted to its events'
 * [min, max] (so a few events far in the future do not stretch the
 * buckets); an exhausted rung is dropped; with no rung left, top becomes
 * rung 0, made 4 times wider than top's events so that most later pushes
 * go straight to a rung.  Buckets aim at min(256, len/32) events: bottom
 * stays in L1/L2 and few pushes land in its range.  A side grown past
 * SIDE_MAX is spread over a new rung with bottom.  An event is so copied a
 * bounded number of times, nearly always within cache-sized pieces; at
 * most PS_QUEUE_RUNGS rungs, past which a big bucket is sorted instead.
 *
 * Invariant: every event of bottom and side <= bottom_last < every event
 * of rung[nrungs-1] <= rung[nrungs-1].last < ... < every event of rung[0]
 * <= rung[0].last < every event of top (comparing times); bottom is in
 * (time, seq) order; within a rung, bucket i holds only times of its range
 * and buckets before cur are empty.  So the minimum of bottom and side is
 * the minimum of the queue. */
#include "engine.h"

#include <string.h>

#define NIL UINT32_MAX
#define CHUNK PS_QUEUE_CHUNK
#define BOTTOM_TARGET 256 /* events per bucket a new rung aims at, at most */
#define LEN_DIV 32 /* ... and at most len/LEN_DIV, so few pushes go to side */
#define RUNG_MAX 1024 /* buckets per rung, at most */
#define STRETCH 2 /* rung 0 spans 2^STRETCH times top's events */
#define SMALL_SORT 16 /* fewer events are sorted by insertion alone */
#define SIDE_MAX 1024 /* a fuller side is spread over a new rung */

#define before ps_event_before

static int cmp_event(const void *a, const void *b)
{
  const PsEvent *x = a, *y = b;
  return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* Sorts a nearly sorted array: insertion sort, falling back to qsort when
 * the events turn out to be far from their places. */
static void sort_events(PsEvent *a, size_t n)
{
  size_t budget = 8 * n + 64;
  for (size_t i = 1; i < n; i++) {
    if (G_LIKELY(!before(&a[i], &a[i - 1])))
      continue;
    PsEvent x = a[i];
    size_t j = i;
    do {
      a[j] = a[j - 1];
      j--;
    } while (j > 0 && before(&x, &a[j - 1]));
    a[j] = x;
    if (i - j > budget) {
      qsort(a, n, sizeof *a, cmp_event);
      return;
    }
    budget -= i - j;
  }
}

/* The smallest shift such that range >> shift < n (n a power of two). */
static inline int fit_shift(uint64_t range, uint64_t n)
{
  int shift = 0;
  while ((range >> shift) >= n)
    shift++;
  return shift;
}

/* ---- chunks and buckets ---- */

/* Adds at least one chunk to the free list; chunk pointers move. */
static __attribute__((noinline)) void chunks_grow(PsQueue *q)
{
  uint32_t old = q->nchunks;
  uint32_t n = old ? old * 2 : 256;
  g_assert(n > old && n < NIL);
  q->chunk = g_renew(PsQueueChunk, q->chunk, n);
  q->next = g_renew(uint32_t, q->next, n);
  for (uint32_t i = old; i < n; i++)
    q->next[i] = i + 1 < n ? i + 1 : q->free_chunk;
  q->free_chunk = old;
  q->nfree += n - old;
  q->nchunks = n;
}

static inline void bucket_add(PsQueue *q, PsQueueBucket *b, const PsEvent *ev)
{
  uint32_t k = b->n % CHUNK;
  if (G_UNLIKELY(k == 0)) {
    if (G_UNLIKELY(q->free_chunk == NIL))
      chunks_grow(q);
    uint32_t c = q->free_chunk;
    q->free_chunk = q->next[c];
    q->nfree--;
    if (b->n == 0)
      b->head = c;
    else
      q->next[b->tail] = c;
    b->tail = c;
  }
  q->chunk[b->tail].ev[k] = *ev;
  b->n++;
}

/* Returns the chunks of b to the free list: O(1), they are chained. */
static inline void bucket_empty(PsQueue *q, PsQueueBucket *b)
{
  if (b->n == 0)
    return;
  q->next[b->tail] = q->free_chunk;
  q->free_chunk = b->head;
  q->nfree += (b->n + CHUNK - 1) / CHUNK;
  b->n = 0;
}

/* Runs body with `ev` set to each event of bucket b, in the order added,
 * fetching the next chunk ahead (chunks are spread over memory). */
#define BUCKET_FOREACH(q, b, ev, body)                                   \
  do {                                                                   \
    uint32_t c_ = (b)->head, left_ = (b)->n;                             \
    while (left_ > 0) {                                                  \
      uint32_t k_ = left_ < CHUNK ? left_ : CHUNK;                       \
      const PsEvent *p_ = (q)->chunk[c_].ev;                             \
      if (left_ > CHUNK) {                                               \
        const char *nx_ = (const char *)(q)->chunk[(q)->next[c_]].ev;    \
        for (size_t o_ = 0; o_ < sizeof(PsQueueChunk); o_ += 64)         \
          __builtin_prefetch(nx_ + o_);                                  \
      }                                                                  \
      for (uint32_t i_ = 0; i_ < k_; i_++) {                             \
        const PsEvent *ev = &p_[i_];                                     \
        body;                                                            \
      }                                                                  \
      left_ -= k_;                                                       \
      c_ = (q)->next[c_];                                                \
    }                                                                    \
  } while (0)

static void bucket_minmax(const PsQueue *q, const PsQueueBucket *b, ps_time_t *min, ps_time_t *max)
{
  ps_time_t mn = PS_TIME_NEVER, mx = INT64_MIN;
  BUCKET_FOREACH(q, b, ev, {
    mn = ev->time < mn ? ev->time : mn;
    mx = ev->time > mx ? ev->time : mx;
  });
  *min = mn;
  *max = mx;
}

/* ---- public ---- */

void ps_queue_init(PsQueue *q)
{
  memset(q, 0, sizeof *q);
  ps_heap_init(&q->side);
  q->bottom_last = INT64_MIN; /* no rung yet: pushes go to top */
  q->side_max = SIDE_MAX;
  q->free_chunk = NIL;
}

void ps_queue_clear(PsQueue *q)
{
  for (int i = 0; i < PS_QUEUE_RUNGS; i++)
    g_free(q->rung[i].b);
  g_free(q->bottom);
  g_free(q->chunk);
  g_free(q->next);
  g_free(q->count);
  ps_heap_clear(&q->side);
  ps_queue_init(q);
}

static gboolean respread_front(PsQueue *q, const PsEvent *ev);

void ps_queue_push_slow(PsQueue *q, const PsEvent *ev)
{
  ps_time_t t = ev->time;
  if (q->len == 0) {
    /* Empty: forget the old ranges, which may span far ahead. */
    q->nrungs = 0;
    q->bpos = q->blen = 0;
    q->bottom_last = INT64_MIN;
  }
  q->len++;
  if (G_UNLIKELY(t <= q->bottom_last)) {
    /* Into bottom's range: at either end of bottom if that keeps it
     * sorted (an event at now goes in front), else into side. */
    if (q->bpos == q->blen)
      q->bpos = q->blen = 0;
    if (q->blen < q->bcap && (q->blen == 0 || !before(ev, &q->bottom[q->blen - 1])))
      q->bottom[q->blen++] = *ev;
    else if (q->bpos > 0 && before(ev, &q->bottom[q->bpos]))
      q->bottom[--q->bpos] = *ev;
    else if (q->side.len < q->side_max || !respread_front(q, ev))
      ps_heap_push(&q->side, ev);
    return;
  }
  for (int i = q->nrungs - 1; i >= 0; i--) {
    PsQueueRung *r = &q->rung[i];
    if (G_LIKELY(t <= r->last)) {
      bucket_add(q, &r->b[((uint64_t)t - (uint64_t)r->start) >> r->shift], ev);
      return;
    }
  }
  if (q->top.n == 0 || t < q->top_min)
    q->top_min = t;
  if (q->top.n == 0 || t > q->top_max)
    q->top_max = t;
  bucket_add(q, &q->top, ev);
}

void ps_queue_push(PsQueue *q, const PsEvent *ev)
{
  ps_queue_push_inline(q, ev);
}

/* The first and last times bucket i of r may hold. */
static inline ps_time_t bucket_first(const PsQueueRung *r, uint32_t i)
{
  return (ps_time_t)((uint64_t)r->start + ((uint64_t)i << r->shift));
}

static inline ps_time_t bucket_last(const PsQueueRung *r, uint32_t i)
{
  uint64_t off = ((uint64_t)(i + 1) << r->shift) - 1; /* 2^64 - 1 for the last */
  if (off >= (uint64_t)r->last - (uint64_t)r->start)
    return r->last;
  return (ps_time_t)((uint64_t)r->start + off);
}

/* Moves the events of b, all in [lo, hi], into bottom in (time, seq)
 * order; bottom and side are empty. */
static void to_bottom(PsQueue *q, PsQueueBucket *b, ps_time_t lo, ps_time_t hi)
{
  size_t m = b->n;
  if (m > q->bcap) {
    q->bcap = m > 2 * q->bcap ? m : 2 * q->bcap;
    g_free(q->bottom);
    q->bottom = g_new(PsEvent, q->bcap);
  }
  PsEvent *out = q->bottom;
  if (m <= SMALL_SORT || lo == hi) {
    size_t j = 0;
    BUCKET_FOREACH(q, b, ev, out[j++] = *ev);
  } else {
    /* Counting sort on 2 to 4 sub-buckets per event; the insertion sort
     * below then orders the few events that share one. */
    size_t f = 1;
    while (f < 2 * m)
      f *= 2;
    uint64_t base = (uint64_t)lo;
    int shift = fit_shift((uint64_t)hi - base, f);
    f = (size_t)(((uint64_t)hi - base) >> shift) + 1;
    if (f + 1 > q->count_cap) {
      q->count_cap = 2 * (f + 1);
      g_free(q->count);
      q->count = g_new(uint32_t, q->count_cap);
    }
    uint32_t *count = q->count;
    memset(count, 0, (f + 1) * sizeof *count);
    BUCKET_FOREACH(q, b, ev, count[(((uint64_t)ev->time - base) >> shift) + 1]++);
    for (size_t i = 1; i <= f; i++)
      count[i] += count[i - 1];
    BUCKET_FOREACH(q, b, ev, out[count[((uint64_t)ev->time - base) >> shift]++] = *ev);
  }
  sort_events(out, m);
  q->bpos = 0;
  q->blen = m;
  bucket_empty(q, b);
}

/* Spreads the events of b, in [min, max], over a new rung of buckets of
 * about tgt events, cut at `last` (the last time b may hold).  When b's
 * range reaches well past max (always for top), the rung spans up to
 * 2^STRETCH times max - min, so that later pushes find a bucket in it
 * rather than in b again.  Returns the new rung. */
static PsQueueRung *spawn(PsQueue *q, PsQueueBucket *b, ps_time_t min, ps_time_t max,
                          ps_time_t last, size_t tgt)
{
  PsQueueRung *r = &q->rung[q->nrungs++];
  uint64_t range = (uint64_t)max - (uint64_t)min, room = (uint64_t)last - (uint64_t)min;
  int stretch = 0;
  while (stretch < STRETCH && range < room && range >> (63 - stretch) == 0) {
    range <<= 1;
    stretch++;
  }
  uint32_t nb = 2;
  while (nb < RUNG_MAX && nb * tgt < ((size_t)b->n << stretch))
    nb *= 2;
  if (!r->b)
    r->b = g_new(PsQueueBucket, RUNG_MAX);
  r->nb = nb;
  r->cur = 0;
  r->shift = fit_shift(range, nb);
  r->start = min;
  uint64_t span1 = ((uint64_t)nb << r->shift) - 1; /* right even if nb << shift is 2^64 */
  if (span1 >= room)
    r->last = last;
  else
    r->last = (ps_time_t)((uint64_t)min + span1);
  for (uint32_t i = 0; i < nb; i++)
    r->b[i].n = 0;
  /* no chunk may move while b's are read */
  while (q->nfree < b->n / CHUNK + nb + 1)
    chunks_grow(q);
  uint64_t base = (uint64_t)min;
  int shift = r->shift;
  BUCKET_FOREACH(q, b, ev, bucket_add(q, &r->b[((uint64_t)ev->time - base) >> shift], ev));
  bucket_empty(q, b);
  return r;
}

/* Events per bucket for a new rung: bottom's share of the events bounds
 * the share of pushes that land in side. */
static size_t bucket_target(const PsQueue *q)
{
  size_t tgt = q->len / LEN_DIV;
  return tgt < 8 ? 8 : tgt > BOTTOM_TARGET ? BOTTOM_TARGET : tgt;
}

/* Side is full and ev is for it: spreads bottom, side and ev over a new
 * finest rung spanning bottom's range instead, as a ladder queue spawns a
 * rung from an overgrown bottom (side would otherwise grow into a big
 * heap, e.g. when most pushes land a few picoseconds ahead).  FALSE if
 * the front cannot be split: one time only, or no rung left. */
static __attribute__((noinline)) gboolean respread_front(PsQueue *q, const PsEvent *ev)
{
  ps_time_t min = ev->time;
  for (size_t i = q->bpos; i < q->blen; i++)
    min = q->bottom[i].time < min ? q->bottom[i].time : min;
  for (size_t i = 0; i < q->side.len; i++)
    min = q->side.items[i].time < min ? q->side.items[i].time : min;
  if (q->nrungs == PS_QUEUE_RUNGS || min == q->bottom_last || min == INT64_MIN) {
    q->side_max = 2 * q->side.len; /* try again much later: keeps pushes O(1) amortized */
    return FALSE;
  }
  PsQueueBucket b = {0};
  for (size_t i = q->bpos; i < q->blen; i++)
    bucket_add(q, &b, &q->bottom[i]);
  for (size_t i = 0; i < q->side.len; i++)
    bucket_add(q, &b, &q->side.items[i]);
  bucket_add(q, &b, ev);
  q->bpos = q->blen = 0;
  q->side.len = 0;
  /* The rung must end exactly at bottom_last, where the next rung starts. */
  ps_time_t last = q->bottom_last;
  q->bottom_last = min - 1;
  spawn(q, &b, min, last, last, bucket_target(q));
  return TRUE;
}

/* Bottom and side are empty and the queue is not: fills bottom. */
static __attribute__((noinline)) void refill(PsQueue *q)
{
  size_t tgt = bucket_target(q);
  q->side_max = SIDE_MAX;
  for (;;) {
    PsQueueRung *r = NULL;
    PsQueueBucket *b;
    ps_time_t lo, hi, last;
    if (q->nrungs == 0) {
      b = &q->top;
      g_assert(b->n > 0);
      lo = q->top_min;
      hi = q->top_max;
      last = PS_TIME_NEVER;
    } else {
      r = &q->rung[q->nrungs - 1];
      while (r->cur < r->nb && r->b[r->cur].n == 0)
        r->cur++;
      if (r->cur == r->nb) {
        /* exhausted: bottom takes over its range */
        q->bottom_last = r->last;
        q->nrungs--;
        continue;
      }
      b = &r->b[r->cur];
      lo = bucket_first(r, r->cur);
      hi = last = bucket_last(r, r->cur);
      if (lo <= q->bottom_last) /* b's range starts at a finer rung's end */
        lo = q->bottom_last + 1;
      if (b->n > 4 * tgt)
        bucket_minmax(q, b, &lo, &hi);
    }
    if (b->n <= 4 * tgt || lo == hi || q->nrungs == PS_QUEUE_RUNGS) {
      if (r) {
        q->bottom_last = last;
        r->cur++;
      } else {
        q->bottom_last = hi; /* top stays open above it */
      }
      to_bottom(q, b, lo, hi);
      return;
    }
    /* No event lies between bottom_last and b's first one. */
    q->bottom_last = lo - 1;
    PsQueueRung *child = spawn(q, b, lo, hi, last, tgt);
    if (r && child->last == last)
      r->cur++; /* else b stays open for (child->last, last] */
  }
}

gboolean ps_queue_pop_slow(PsQueue *q, PsEvent *out)
{
  if (q->len == 0)
    return FALSE;
  q->len--;
  if (q->side.len > 0 &&
      (q->bpos == q->blen || before(&q->side.items[0], &q->bottom[q->bpos])))
    return ps_heap_pop(&q->side, out);
  if (q->bpos == q->blen)
    refill(q); /* side is empty too */
  *out = q->bottom[q->bpos++];
  return TRUE;
}

gboolean ps_queue_pop(PsQueue *q, PsEvent *out)
{
  return ps_queue_pop_inline(q, out);
}

const PsEvent *ps_queue_peek(PsQueue *q)
{
  if (q->len == 0)
    return NULL;
  if (q->side.len == 0) {
    if (q->bpos == q->blen)
      refill(q);
    return &q->bottom[q->bpos];
  }
  if (q->bpos < q->blen && before(&q->bottom[q->bpos], &q->side.items[0]))
    return &q->bottom[q->bpos];
  return &q->side.items[0];
}

size_t ps_queue_len(const PsQueue *q)
{
  return q->len;
}

/* Checks a bucket's chunk chain and that its times lie in [lo, hi]; adds
 * its events to *count and returns their min and max. */
static gboolean check_bucket(const PsQueue *q, const PsQueueBucket *b, ps_time_t lo, ps_time_t hi,
                             size_t *count, ps_time_t *min, ps_time_t *max)
{
  *min = PS_TIME_NEVER;
  *max = INT64_MIN;
  uint32_t c = b->head, left = b->n;
  while (left > 0) {
    if (c >= q->nchunks)
      return FALSE;
    uint32_t k = left < CHUNK ? left : CHUNK;
    for (uint32_t i = 0; i < k; i++) {
      ps_time_t t = q->chunk[c].ev[i].time;
      if (t < lo || t > hi)
        return FALSE;
      *min = t < *min ? t : *min;
      *max = t > *max ? t : *max;
    }
    left -= k;
    if (left == 0 && c != b->tail)
      return FALSE;
    c = q->next[c];
  }
  *count += b->n;
  return TRUE;
}

gboolean ps_queue_check(const PsQueue *q)
{
  ps_time_t mn, mx;
  if (!ps_heap_check(&q->side) || q->bpos > q->blen || q->blen > q->bcap)
    return FALSE;
  size_t count = q->side.len + (q->blen - q->bpos);
  for (size_t i = 0; i < q->side.len; i++)
    if (q->side.items[i].time > q->bottom_last)
      return FALSE;
  for (size_t i = q->bpos; i < q->blen; i++)
    if (q->bottom[i].time > q->bottom_last ||
        (i > q->bpos && before(&q->bottom[i], &q->bottom[i - 1])))
      return FALSE;
  if (q->nrungs < 0 || q->nrungs > PS_QUEUE_RUNGS)
    return FALSE;
  ps_time_t lo = q->bottom_last; /* the next place's events are > lo */
  size_t used = 0;
  for (int r = q->nrungs - 1; r >= 0; r--) {
    const PsQueueRung *g = &q->rung[r];
    /* a rung may end at bottom_last when bottom took its last bucket */
    if (g->last < lo || g->nb < 2 || g->nb > RUNG_MAX || g->cur > g->nb)
      return FALSE;
    for (uint32_t i = 0; i < g->nb; i++) {
      const PsQueueBucket *b = &g->b[i];
      if (b->n == 0)
        continue;
      ps_time_t first = bucket_first(g, i);
      if (i < g->cur || (i > 0 && first <= g->start) || first > g->last)
        return FALSE;
      if (lo == PS_TIME_NEVER ||
          !check_bucket(q, b, lo >= first ? lo + 1 : first, bucket_last(g, i), &count, &mn, &mx))
        return FALSE;
      used += (b->n + CHUNK - 1) / CHUNK;
    }
    lo = g->last;
  }
  if (q->top.n > 0) {
    if (lo == PS_TIME_NEVER || !check_bucket(q, &q->top, lo + 1, PS_TIME_NEVER, &count, &mn, &mx))
      return FALSE;
    if (mn != q->top_min || mx != q->top_max)
      return FALSE;
    used += (q->top.n + CHUNK - 1) / CHUNK;
  }
  /* every chunk is in exactly one bucket or free */
  size_t free_n = 0;
  for (uint32_t c = q->free_chunk; c != NIL && free_n <= q->nchunks; c = q->next[c])
    free_n++;
  if (free_n != q->nfree || used + free_n != q->nchunks)
    return FALSE;
  return count == q->len;
}

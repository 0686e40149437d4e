/* heap.c: the event queue, a 4-ary min-heap of events stored by value.
 *
 * Invariant: for every i > 0, items[(i-1)/4] <= items[i] in (time, seq)
 * order.  Sifting moves a hole instead of swapping, so each level costs one
 * copy of 32 bytes. */
#include "engine.h"

#include <string.h>

#define ARITY 4

static inline gboolean before(const PsEvent *a, const PsEvent *b)
{
  return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

void ps_heap_init(PsHeap *heap)
{
  heap->items = NULL;
  heap->len = 0;
  heap->cap = 0;
}

void ps_heap_clear(PsHeap *heap)
{
  g_free(heap->items);
  ps_heap_init(heap);
}

void ps_heap_push(PsHeap *heap, const PsEvent *event)
{
  if (heap->len == heap->cap) {
    heap->cap = heap->cap ? heap->cap * 2 : 1024;
    heap->items = g_renew(PsEvent, heap->items, heap->cap);
  }
  PsEvent *items = heap->items;
  size_t hole = heap->len++;
  while (hole > 0) {
    size_t parent = (hole - 1) / ARITY;
    if (!before(event, &items[parent]))
      break;
    items[hole] = items[parent];
    hole = parent;
  }
  items[hole] = *event;
}

gboolean ps_heap_pop(PsHeap *heap, PsEvent *out)
{
  if (heap->len == 0)
    return FALSE;
  PsEvent *items = heap->items;
  *out = items[0];
  size_t n = --heap->len;
  if (n == 0)
    return TRUE;
  const PsEvent last = items[n];
  size_t hole = 0;
  for (;;) {
    size_t first = hole * ARITY + 1;
    if (first >= n)
      break;
    size_t best = first;
    size_t end = first + ARITY < n ? first + ARITY : n;
    for (size_t c = first + 1; c < end; c++)
      if (before(&items[c], &items[best]))
        best = c;
    if (!before(&items[best], &last))
      break;
    items[hole] = items[best];
    hole = best;
  }
  items[hole] = last;
  return TRUE;
}

gboolean ps_heap_check(const PsHeap *heap)
{
  for (size_t i = 1; i < heap->len; i++)
    if (before(&heap->items[i], &heap->items[(i - 1) / ARITY]))
      return FALSE;
  return TRUE;
}

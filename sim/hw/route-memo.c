/* route-memo.c: route-memo-private.h's memo, an open-addressing table of
 * (src, dst) keys whose values are offsets into one array of routes (each
 * stored as its length, then its links).
 *
 * Invariant: the table is at most half full, so every probe ends at the
 * key or at an empty slot; the routes array only grows (offsets stay
 * valid) until the memo is cleared, and never past MEMO_MAX_INTS. */
#include "hw/route-memo-private.h"

#include <string.h>

#define MEMO_EMPTY UINT64_MAX
/* at most 16 M link ids (64 MiB) of routes: past that, routes are worked
 * out again on each call as without a memo */
#define MEMO_MAX_INTS (1u << 24)

struct PsRouteMemo {
  uint64_t *keys;  /* per slot: src << 32 | dst, MEMO_EMPTY when empty */
  uint32_t *at;    /* per slot: the route's offset in routes */
  uint32_t mask;   /* slots - 1 */
  uint32_t used;
  GArray *routes;  /* int32_t: hops, then the hops links, route after route */
};

static inline uint64_t memo_key(int src, int dst)
{
  return (uint64_t)(uint32_t)src << 32 | (uint32_t)dst;
}

/* the slot of key, or of the empty slot where it would go; the product's
 * top bits mix every bit of both ids */
static inline uint32_t memo_slot(const PsRouteMemo *memo, uint64_t key)
{
  uint32_t i = (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & memo->mask;
  while (memo->keys[i] != key && memo->keys[i] != MEMO_EMPTY)
    i = (i + 1) & memo->mask;
  return i;
}

static void memo_alloc(PsRouteMemo *memo, uint32_t slots)
{
  memo->mask = slots - 1;
  memo->keys = g_new(uint64_t, slots);
  memo->at = g_new(uint32_t, slots);
  memset(memo->keys, 0xff, sizeof(uint64_t) * slots);
  memo->used = 0;
}

PsRouteMemo *ps_route_memo_new(void)
{
  PsRouteMemo *memo = g_new0(PsRouteMemo, 1);
  memo_alloc(memo, 1024);
  memo->routes = g_array_new(FALSE, FALSE, sizeof(int32_t));
  return memo;
}

void ps_route_memo_free(PsRouteMemo *memo)
{
  if (!memo)
    return;
  g_free(memo->keys);
  g_free(memo->at);
  g_array_free(memo->routes, TRUE);
  g_free(memo);
}

void ps_route_memo_clear(PsRouteMemo *memo)
{
  memset(memo->keys, 0xff, sizeof(uint64_t) * (memo->mask + 1));
  memo->used = 0;
  g_array_set_size(memo->routes, 0);
}

const int32_t *ps_route_memo_find(const PsRouteMemo *memo, int src, int dst, int *hops)
{
  uint64_t key = memo_key(src, dst);
  uint32_t i = memo_slot(memo, key);
  if (memo->keys[i] == MEMO_EMPTY)
    return NULL;
  const int32_t *r = &g_array_index(memo->routes, int32_t, memo->at[i]);
  *hops = r[0];
  return r + 1;
}

/* twice the slots, every key moved to its new slot */
static void memo_grow(PsRouteMemo *memo)
{
  uint64_t *keys = memo->keys;
  uint32_t *at = memo->at, old = memo->mask + 1, used = memo->used;
  memo_alloc(memo, old * 2);
  for (uint32_t j = 0; j < old; j++)
    if (keys[j] != MEMO_EMPTY) {
      uint32_t i = memo_slot(memo, keys[j]);
      memo->keys[i] = keys[j];
      memo->at[i] = at[j];
    }
  memo->used = used;
  g_free(keys);
  g_free(at);
}

void ps_route_memo_add(PsRouteMemo *memo, int src, int dst, const int *links, int hops)
{
  if (hops < 0 || memo->routes->len + 1u + (guint)hops > MEMO_MAX_INTS)
    return;
  if (2 * (memo->used + 1) > memo->mask + 1)
    memo_grow(memo);
  uint64_t key = memo_key(src, dst);
  uint32_t i = memo_slot(memo, key);
  if (memo->keys[i] == key)
    return;
  memo->keys[i] = key;
  memo->at[i] = memo->routes->len;
  memo->used++;
  int32_t n = hops;
  g_array_append_val(memo->routes, n);
  for (int k = 0; k < hops; k++) {
    int32_t l = links[k];
    g_array_append_val(memo->routes, l);
  }
}

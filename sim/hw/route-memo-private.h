/* route-memo-private.h: a network's memo of the routes its collectives'
 * plans and predictions ask for (hw/network.h's ps_network_route_memo),
 * apart from the bounded route cache that messages use, so that asking
 * for a route again costs a look-up and the messages' cache keeps what the
 * run sends.
 *
 * Invariant: an entry holds exactly what ps_geometry_route gave for its
 * (src, dst) under the failed links in force when it was stored; the
 * network empties the memo whenever its routes may change. */
#ifndef PS_HW_ROUTE_MEMO_PRIVATE_H
#define PS_HW_ROUTE_MEMO_PRIVATE_H

#include <glib.h>
#include <stdint.h>

typedef struct PsRouteMemo PsRouteMemo;

PsRouteMemo *ps_route_memo_new(void);
void ps_route_memo_free(PsRouteMemo *memo);
/* Forgets every route (the network's routes changed). */
void ps_route_memo_clear(PsRouteMemo *memo);
/* The stored route of (src, dst): its links, *hops set; NULL if none. */
const int32_t *ps_route_memo_find(const PsRouteMemo *memo, int src, int dst, int *hops);
/* Stores (src, dst)'s route of hops links, unless the memo is full. */
void ps_route_memo_add(PsRouteMemo *memo, int src, int dst, const int *links, int hops);

#endif

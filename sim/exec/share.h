/* share.h: servers that split their bandwidth equally among the transfers
 * they carry (processor sharing): a chip's PCIe lanes each way, which its
 * cores' copies to and from host memory share.  One event type serves a
 * whole set of servers.
 *
 * A transfer of B bytes alone on a server of bandwidth W takes B / W; k
 * transfers of B bytes begun together all end at k B / W.  In general the
 * server's rate W is divided equally among the transfers in progress at
 * each moment, and a transfer ends when its bytes are carried.
 *
 * Invariant: a transfer's done callback runs once, at the time its last
 * byte is carried (rounded up to the engine's tick), transfers ending at
 * the same time in the order they began; a server never carries more
 * than W bytes a second in all. */
#ifndef PS_SHARE_H
#define PS_SHARE_H

#include "engine/engine.h"

typedef struct PsShareSet PsShareSet;

/* Runs inside an event handler when transfer `item` of server `server` ends. */
typedef void (*PsShareDoneFn)(void *ctx, int server, uint64_t item);

/* n servers of bandwidth_Bps (> 0) each; done is called with ctx. */
PsShareSet *ps_share_set_new(PsEngine *engine, int n, double bandwidth_Bps, PsShareDoneFn done,
                             void *ctx);
void ps_share_set_free(PsShareSet *set);

/* Begins a transfer of `bytes` (>= 0) on `server` now. */
void ps_share_add(PsShareSet *set, int server, double bytes, uint64_t item);

/* Transfers in progress on `server`. */
int ps_share_active(const PsShareSet *set, int server);

/* Bytes `server` has carried so far, over every transfer ended or not. */
double ps_share_carried(const PsShareSet *set, int server);

#endif

/* shard-offload.c: the copies between HBM and the host's memory that
 * rematerialization "custom" with remat_offload makes (docs/shard.md,
 * "remat_offload"): up to the host after a group's forward, at most
 * Lower.window in flight; down again ahead of the group's recompute, in
 * backward.  The lowering (shard-lower.c) asks; what a group offloads is
 * shard-remat.c's ps_shard_offload_bytes.
 *
 * Invariant: every copy this file starts it also waits for in the same
 * program (a tag per copy, Lower.copies), and the bytes it adds to HBM at
 * a start or a forward it takes out at the copy's done or the group's
 * backward. */
#include "strategy/shard-lower-private.h"

#include <stdio.h>

/* A copy between HBM and the host's memory (host offloading): its start,
 * `bytes` of group g's, or its done; act: what the op adds to the live
 * bytes in HBM. */
static void copy_op(Lower *w, PsOpKind kind, gboolean to_host, int tag, int g, double bytes,
                    int64_t act)
{
  PsOp op = {.kind = kind, .to_host = to_host, .tag = tag, .mb = w->mb, .batch = w->batch,
             .first = group_first(w, g), .last = group_last(w, g),
             .bytes = kind == PS_OP_COPY_START ? bytes : 0, .act_bytes = act};
  snprintf(op.name, sizeof op.name, "%s %s host %.40s",
           kind == PS_OP_COPY_START ? "start" : "done", to_host ? "to" : "from",
           w->m->layers[op.first].name);
  g_array_append_val(w->ops, op);
}

/* The forward's oldest copy to the host still in flight is done: its
 * bytes leave HBM. */
static void offload_done(Lower *w)
{
  UpCopy u = g_array_index(w->up, UpCopy, 0);
  copy_op(w, PS_OP_COPY_DONE, TRUE, u.tag, u.g, 0, -u.bytes);
  g_array_remove_index(w->up, 0);
}

/* After group g's forward: what it offloads goes up to the host (the
 * core goes on), once the oldest copy is waited for if the window is
 * full: at most `window` copies are in flight. */
void ps_shard_offload_after(Lower *w, int g)
{
  int64_t b = ps_shard_offload_bytes(w, g);
  if (b <= 0)
    return;
  while ((int)w->up->len >= w->window)
    offload_done(w);
  UpCopy u = {w->copies++, g, b};
  copy_op(w, PS_OP_COPY_START, TRUE, u.tag, g, (double)b, 0);
  g_array_append_val(w->up, u);
}

/* Backward brings group g's offloaded bytes back down, started once
 * (down[g] holds its tag), at least a group ahead of its use. */
static void prefetch(Lower *w, int *down, int g)
{
  if (g < 0 || down[g] >= 0)
    return;
  int64_t b = ps_shard_offload_bytes(w, g);
  if (b <= 0)
    return;
  down[g] = w->copies++;
  copy_op(w, PS_OP_COPY_START, FALSE, down[g], g, (double)b, b);
}

/* The forward's copies still in flight are all done (its end). */
void ps_shard_offload_flush(Lower *w)
{
  while (w->up->len > 0)
    offload_done(w);
}

/* Before group g's backward: what the host holds for it and for the next
 * groups that have any, up to the window, is on its way down. */
void ps_shard_prefetch_ahead(Lower *w, int *down, int g)
{
  prefetch(w, down, g);
  for (int h = g - 1, k = 1; h >= 0 && k < w->window; h--)
    if (ps_shard_offload_bytes(w, h) > 0) {
      prefetch(w, down, h);
      k++;
    }
}

/* Group g's copy from the host is done, if it has one. */
void ps_shard_prefetch_done(Lower *w, const int *down, int g)
{
  if (down[g] >= 0)
    copy_op(w, PS_OP_COPY_DONE, FALSE, down[g], g, 0, 0);
}

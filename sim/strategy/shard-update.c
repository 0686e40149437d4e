/* shard-update.c: the end of a sharded step's template before its
 * update: clipping by global norm (each device's norm of its gradient
 * shard, all-reduced over the fsdp and tensor x sequence groups) and, for
 * a layer-wise optimizer whose device updates a shard of each layer, the
 * update's first pass and the layers' norms all-reduced before its
 * second.
 * Invariant: it appends ops and requests to a Lower's template only. */
#include "strategy/shard-lower-private.h"

#include "model/layers.h"

#include <stdio.h>

/* Bytes of a gradient element as the clip and the update read it: the
 * reduction's where the fsdp or data axis reduced it (XLA fuses the
 * conversion back to float32 into its consumer), else as stored. */
int ps_shard_grad_bytes(const Lower *w)
{
  return w->Fw > 1 || w->D > 1 ? ps_lower_reduce_bytes(w->exp, w->c->reduce_precision) : 0;
}

/* Clipping by global norm (optimizer.clip_norm), as optax's
 * clip_by_global_norm does to GSPMD's reduced gradients: each device sums
 * the squares of the gradient shard it updates (one read of it, in
 * float32), the fsdp and then the tensor x sequence group all-reduce that
 * sum (a scalar: their latency), and the update applies the factor (XLA
 * fuses the scaling into it).  Data replicas hold the same shards, so
 * their group takes no part. */
void ps_shard_clip_norm(Lower *w)
{
  PsOp op = ps_lower_clip_op(w->exp, w->shard_params, ps_shard_grad_bytes(w), 0);
  op.clip_shards = w->Fw > 1 || w->M > 1;
  snprintf(op.name, sizeof op.name, "clip: norm of the gradient%s",
           op.clip_shards ? " shard" : "");
  ps_shard_emit(w, &op);
  if (w->Fw > 1)
    ps_shard_coll_now(w, ps_shard_add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_FSDP, PS_AXIS_FSDP,
                                          1, PS_BUFFER_NORM, "grad norm"));
  if (w->M > 1) /* a sequence axis comes with a tensor axis (check_mesh) */
    ps_shard_coll_now(w, ps_shard_add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_MODEL,
                                          PS_AXIS_TENSOR, 1, PS_BUFFER_NORM, "grad norm"));
}

/* A layer-wise optimizer (LARS, LAMB) whose device updates a shard of each
 * layer (fsdp, tensor): the first pass of its update (LAMB's moments; the
 * shard's sums of squares of each adapted layer of the stage), then the
 * fsdp and the tensor x sequence group all-reduce those sums (two floats a
 * layer, after the clipping norm's float), as the real runs all-reduce
 * the partial norms; the second pass (up, whose update_pass it sets)
 * follows.  Data replicas hold the same shards. */
void ps_shard_layer_norms(Lower *w, PsOp *up)
{
  gboolean layerwise =
      w->exp->optimizer.kind == PS_OPT_LARS || w->exp->optimizer.kind == PS_OPT_LAMB;
  if (!layerwise || (w->Fw <= 1 && w->M <= 1))
    return;
  int64_t layers = 0;
  for (int l = w->lo; l < w->hi; l++)
    layers += ps_layer_adapted_params(&w->m->layers[l]) > 0;
  PsOp one = *up;
  one.act_bytes = 0; /* the second pass frees what the update holds */
  one.update_pass = 1;
  one.norm_slot = 1;
  ps_lower_update_op(w->exp, &one, w->shard_params, ps_shard_grad_bytes(w));
  snprintf(one.name, sizeof one.name, "update, pass one: shard");
  ps_shard_emit(w, &one);
  up->update_pass = 2;
  up->norm_slot = 1;
  ps_lower_update_op(w->exp, up, w->shard_params, ps_shard_grad_bytes(w));
  if (layers == 0)
    return;
  for (int k = 0; k < 2; k++) {
    if (k == 0 ? w->Fw <= 1 : w->M <= 1)
      continue;
    int r = ps_shard_add_req(w, PS_COLL_ALL_REDUCE, k == 0 ? PS_GROUP_FSDP : PS_GROUP_MODEL,
                             k == 0 ? PS_AXIS_FSDP : PS_AXIS_TENSOR, 2 * layers,
                             PS_BUFFER_NORM, "layer norms");
    g_array_index(w->reqs, Req, r).offset = 1;
    ps_shard_coll_now(w, r);
  }
}

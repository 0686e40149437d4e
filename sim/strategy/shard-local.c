/* shard-local.c: one layer's share on one device of a tensor x sequence
 * group, for the shard strategy's local model (shard-lower.c): its work,
 * weights, matmul shapes and activations divided by how the layout splits
 * it (columns, contraction, heads or vocabulary, rows), a vocabulary the
 * group does not divide padded as GSPMD pads it.  The cost model then
 * prices the shard's own shapes, MXU padding included.
 *
 * Invariant: with k = 1 or PS_LOC_NONE the layer is left as it is; else
 * every split dimension is divided by k (at least 1 left). */
#include "strategy/shard-private.h"

/* The work of a layer split k ways; its parameters too unless it only
 * runs on a share of the rows (a norm's gains stay whole on every device:
 * Korthikanti et al. 2022 replicate them across the group). */
static void divide(PsLayer *L, int64_t k, gboolean rows)
{
  L->fwd_flops /= (double)k;
  L->bwd_flops /= (double)k;
  L->fwd_bytes /= (double)k;
  L->bwd_bytes /= (double)k;
  L->core_bytes /= (double)k;
  L->core_vec_fwd /= (double)k;
  L->core_vec_bwd /= (double)k;
  L->apart_fwd_flops /= (double)k;
  L->apart_bwd_flops /= (double)k;
  L->apart_fwd_bytes /= (double)k;
  L->apart_bwd_bytes /= (double)k;
  L->act_elems /= k;
  L->stat_elems /= k;
  L->mask_elems /= k;
  if (!rows)
    L->params /= k;
}

/* The vocabulary of a padded layer: the table's rows, the head's outputs,
 * the loss's logits. */
static int64_t vocab_of(const PsLayer *L)
{
  return L->vocab > 0 ? L->vocab : L->out_rank > 0 && L->units > 0 ? L->units
                                                                   : L->in_shape[L->in_rank - 1];
}

/* GSPMD's uneven sharding (Xu et al. 2021, arXiv:2105.04663, pads a dimension
 * the mesh does not divide to static equal shards): a dimension of V
 * that k does not divide is padded to k ceil(V / k), each device holding
 * ceil(V / k).  A table grows by its padded rows alone (a gather costs the
 * same, a lookup by matmul in proportion); a head's weights, FLOPs and traffic and the loss's logits grow in
 * proportion (the input's share of the traffic with them, an excess of
 * under k / V of it). */
static void pad_layer(PsLayer *L, int64_t k)
{
  int64_t v = vocab_of(L), padded = (v + k - 1) / k * k;
  if (L->vocab > 0) {
    L->params += (padded - v) * L->dim;
    if (L->lookup_matmul) { /* the one-hot product's contraction grows with the table */
      const PsMatmul *mm = &L->mm[0];
      double grow = 2.0 * (double)mm->rows * (double)(padded - v) * (double)mm->n;
      L->fwd_flops += grow;
      L->bwd_flops += grow;
      L->mm[0].k = padded;
    }
    return;
  }
  double r = (double)padded / (double)v;
  L->fwd_flops *= r;
  L->bwd_flops *= r;
  L->fwd_bytes *= r;
  L->bwd_bytes *= r;
  L->act_elems = L->act_elems / v * padded;
  L->stat_elems = L->stat_elems / v * padded;
  L->params = L->params / v * padded; /* a head's weights are per output */
  for (int j = 0; j < L->n_mm; j++)
    if (L->mm[j].n == v)
      L->mm[j].n = padded;
  if (L->out_shape[L->out_rank - 1] == v)
    L->out_shape[L->out_rank - 1] = padded;
  if (L->in_shape[L->in_rank - 1] == v)
    L->in_shape[L->in_rank - 1] = padded;
}

/* Layer l's share on one device of a group of k. */
void ps_shard_local_layer(PsLayer *L, PsShardLocal how, int64_t k, gboolean padded)
{
  if (how == PS_LOC_NONE || k == 1)
    return;
  if (padded)
    pad_layer(L, k);
  divide(L, k, how == PS_LOC_ROWS);
  for (int j = 0; j < L->n_mm; j++) {
    PsMatmul *mm = &L->mm[j];
    if (how == PS_LOC_ROWS)
      mm->rows = MAX(1, mm->rows / k);
    else if (how == PS_LOC_ROW)
      mm->k = MAX(1, mm->k / k);
    else if (how == PS_LOC_DIV && L->lookup_matmul)
      mm->k = MAX(1, mm->k / k); /* a lookup by matmul contracts over its share of the table */
    else if (how == PS_LOC_COL || (how == PS_LOC_DIV && j == 0 && mm->count == 1))
      mm->n = MAX(1, mm->n / k);
    else if (mm->count % k == 0)
      mm->count /= k; /* per head */
    else
      mm->k = MAX(1, mm->k / k);
  }
  if (how == PS_LOC_ROWS) {
    L->in_shape[0] = MAX(1, L->in_shape[0] / k);
    L->out_shape[0] = MAX(1, L->out_shape[0] / k);
  } else {
    if (how != PS_LOC_COL)
      L->in_shape[L->in_rank - 1] = MAX(1, L->in_shape[L->in_rank - 1] / k);
    if (how != PS_LOC_ROW)
      L->out_shape[L->out_rank - 1] = MAX(1, L->out_shape[L->out_rank - 1] / k);
  }
}

/* shard-remat.c: what each rematerialization policy of the shard
 * strategy keeps for backward and what its rerun forward computes again
 * (docs/shard.md, "rematerialize", "remat_keep", "remat_offload"): the
 * bytes a group's forward leaves live, the share of each product a
 * RECOMPUTE op runs, and what a unit's recompute brings back.  The
 * lowering (shard-lower.c) asks; this file only reads its state.
 *
 * Invariant: a product is rerun unless kept (in HBM or host memory) or
 * dead (nothing in backward reads it); what is kept in HBM is counted
 * once, by the group whose forward produced it. */
#include "strategy/shard-lower-private.h"

#include "model/layers.h"

int ps_shard_vocab_head(const PsModel *m)
{
  g_return_val_if_fail(m != NULL, -1);
  if (!m->token_input)
    return -1;
  for (int i = 0; i + 1 < m->n_layers; i++)
    if (m->layers[i].kind == PS_LAYER_DENSE && m->layers[i + 1].input_from == i &&
        ps_layer_kind_lower(m->layers[i + 1].kind)->tensor == PS_TP_LOSS)
      return i;
  return -1;
}

/* Whether vocabulary tiling (strategy.vocab_tiling > 1) runs layer l's
 * forward again in backward: each tile's logits are computed again from
 * the hidden states, through the final norm, the head and the loss
 * (MaxText's vocabulary_tiling.py: its custom VJP's backward takes
 * jax.vjp of logits_from_hidden_states and the cross entropy per tile,
 * at commit 48445cf00e73064e87886539714a8ba1794ee019). */
gboolean ps_shard_vocab_rerun(const Lower *w, int l)
{
  if (w->c->vocab_tiling <= 1)
    return FALSE;
  const int h = ps_shard_vocab_head(w->m);
  if (h < 0)
    return FALSE;
  const PsLayer *ml = w->m->layers;
  const gboolean norm = ml[l].kind == PS_LAYER_RMSNORM || ml[l].kind == PS_LAYER_LAYERNORM;
  return l == h || l == h + 1 || (norm && ml[h].input_from == l && l == h - 1);
}

/* The activation bytes group g's layers keep for backward (local); with
 * vocabulary tiling the loss keeps one tile's logits, not all of them
 * (its backward makes each tile's again). */
int64_t ps_shard_group_act(const Lower *w, int g)
{
  int64_t act = 0;
  const int h = w->c->vocab_tiling > 1 ? ps_shard_vocab_head(w->m) : -1;
  for (int l = group_first(w, g); l <= group_last(w, g); l++) {
    int64_t kept = ps_layer_kept_bytes(&w->local.layers[l], w->batch, w->act_b) -
                   (w->exp->masks_recomputed ? ps_layer_mask_bytes(&w->local.layers[l], w->batch)
                                             : 0);
    act += h >= 0 && l == h + 1 ? kept / w->c->vocab_tiling : kept;
  }
  return act;
}

/* Whether group g holds a layer vocabulary tiling runs again. */
gboolean ps_shard_group_vocab_rerun(const Lower *w, int g)
{
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    if (ps_shard_vocab_rerun(w, l))
      return TRUE;
  return FALSE;
}

/* Whether a full or minimal forward keeps layer l's output: it feeds a
 * residual join's shortcut (a block's input, from which backward
 * recomputes the rest), except that of the blocks of a repeat's iteration
 * (a unit: a decoder layer) only the first's is kept, the unit's input,
 * as a scan of rematerialized layers keeps (jax.checkpoint around each
 * layer: MaxText's remat_policy), the other blocks' inputs being
 * recomputed with the unit. */
static gboolean output_kept(const Lower *w, int l)
{
  const PsLayer *ml = w->m->layers;
  gboolean block_input = FALSE;
  for (int j = l + 1; j < w->m->n_layers && !block_input; j++)
    block_input = ps_layer_kind_lower(ml[j].kind)->lowering == PS_LOWER_JOIN &&
                  ml[j].shortcut_from == l;
  gboolean mid_unit = l + 1 < w->m->n_layers && ml[l + 1].unit != 0 &&
                      ml[l + 1].unit == ml[l].unit;
  return block_input && !mid_unit;
}

/* Whether layer l's output is the input of a residual join right after
 * it (the last layer of a block). */
static gboolean feeds_join(const Lower *w, int l)
{
  const PsLayer *ml = w->m->layers;
  return l + 1 < w->m->n_layers && ml[l + 1].input_from == l &&
         ps_layer_kind_lower(ml[l + 1].kind)->lowering == PS_LOWER_JOIN;
}

/* Whether backward reads nothing that layer l's forward computes: its
 * output feeds only a residual join whose output is kept (the last
 * projection of a unit: the next unit's input holds the sum), so a
 * rematerialized forward leaves it out, as JAX's partial evaluation and
 * XLA's dead-code elimination do. */
static gboolean output_dead(const Lower *w, int l)
{
  const PsLayer *ml = w->m->layers;
  int n = w->m->n_layers;
  if (!feeds_join(w, l) || !output_kept(w, l + 1))
    return FALSE;
  for (int k = l + 2; k < n; k++)
    if (ml[k].input_from == l || ml[k].shortcut_from == l)
      return FALSE;
  return TRUE;
}

/* The share of layer l's product m whose output rematerialization keeps
 * for backward: "minimal" each weight product's; "custom" those the mask
 * k names (remat_keep's, remat_offload's) (a share of the fused query, key and value projection
 * by their widths; of a gated feed-forward's two halves; attention's
 * context is the output of its second product of activations, the first's,
 * the scores, never kept); outside a unit (the embedding, the head) the
 * weight products, as "minimal". */
static double share_of(const Lower *w, int l, int m, unsigned k)
{
  const PsLayer *L = &w->m->layers[l];
  if (ps_shard_vocab_rerun(w, l))
    return 0; /* vocabulary tiling keeps no logits: backward makes them again */
  if (m >= L->n_mm || (w->c->remat != PS_REMAT_MINIMAL && w->c->remat != PS_REMAT_CUSTOM))
    return 0;
  if (w->c->remat == PS_REMAT_MINIMAL || L->unit == 0) /* outside a unit, as minimal */
    return L->mm[m].activations ? 0 : 1;
  switch (L->kind) {
  case PS_LAYER_ATTENTION: {
    if (L->kv_rank > 0) { /* latent: 0 the queries, 4 the keys' and values' up */
      double kw = (double)L->dim, vw = (double)L->heads * (double)L->v_dim;
      if (m == 0)
        return k & PS_KEEP_QUERY ? 1 : 0;
      if (m == 4)
        return ((k & PS_KEEP_KEY ? kw : 0) + (k & PS_KEEP_VALUE ? vw : 0)) / (kw + vw);
      if (m == 2)
        return k & PS_KEEP_CONTEXT ? 1 : 0;
      return m == 3 && (k & PS_KEEP_OUT_PROJ) ? 1 : 0;
    }
    double inner = (double)L->dim, kvw = (double)L->kv_heads * (double)(L->dim / L->heads);
    if (m == 0)
      return ((k & PS_KEEP_QUERY ? inner : 0) + (k & PS_KEEP_KEY ? kvw : 0) +
              (k & PS_KEEP_VALUE ? kvw : 0)) /
             (inner + 2 * kvw);
    if (m == 2)
      return k & PS_KEEP_CONTEXT ? 1 : 0;
    return m == 3 && (k & PS_KEEP_OUT_PROJ) ? 1 : 0;
  }
  case PS_LAYER_SWIGLU:
    return (k & PS_KEEP_WI0 ? 0.5 : 0) + (k & PS_KEEP_WI1 ? 0.5 : 0);
  case PS_LAYER_MOE: /* the experts' gate and up, and their down, as a dense block's; the
                       dispatch and combine are named nothing a policy keeps */
    switch (ps_moe_product(L, m)) {
    case PS_MOE_GATE_UP:
      return (k & PS_KEEP_WI0 ? 0.5 : 0) + (k & PS_KEEP_WI1 ? 0.5 : 0);
    case PS_MOE_DOWN:
      return k & PS_KEEP_WO ? 1 : 0;
    default:
      return 0;
    }
  case PS_LAYER_DENSE:
    if (feeds_join(w, l))
      return k & PS_KEEP_WO ? 1 : 0; /* the feed-forward's output product */
    return k & PS_KEEP_WI0 ? 1 : 0;
  default:
    return 0;
  }
}

/* Whether layer l is a lookup of token ids (an embedding) whose output
 * a full or minimal forward keeps (the first block's input): its backward
 * reads only the ids and dy, so nothing of its forward is run again, and
 * its product's output is that kept input, not a product of its own. */
static gboolean ids_lookup_kept(const Lower *w, int l)
{
  return ps_layer_kind_lower(w->m->layers[l].kind)->takes_ids && output_kept(w, l);
}

/* PsCostOptions.rerun for a rematerialized forward: nothing of a lookup
 * whose output is kept (ids_lookup_kept), not even asked for the layer
 * (m = -1), which otherwise runs; no product of a layer whose output
 * backward does not read (output_dead); else each product but its kept
 * share; attention's products of activations run again unless its
 * context was kept (the scores then are not needed either). */
double ps_shard_rerun_share(const void *ud, int l, int m)
{
  const Lower *w = ud;
  if (ps_shard_vocab_rerun(w, l))
    return 1;
  if (w->c->remat == PS_REMAT_NONE)
    return 0; /* only vocabulary tiling reruns a layer then */
  if (w->c->remat == PS_REMAT_ATTENTION) { /* the whole of a group with attention */
    int n = (int)w->starts->len - 1;
    for (int g = 0; g < n; g++)
      if (l >= group_first(w, g) && l <= group_last(w, g))
        return ps_shard_has_heads(w, g) ? 1 : 0;
    return 0;
  }
  if (ids_lookup_kept(w, l))
    return 0;
  if (m < 0)
    return 1;
  const PsLayer *L = &w->m->layers[l];
  if (output_dead(w, l)) {
    /* a mixture of experts is a whole block: its backward reads its own
     * scores, routed (dispatched) input and projections, and the routed
     * experts' outputs (the router weights' gradient: the weighted sum's,
     * or the combine product's second one), so only the combine and the
     * shared experts' down products, which make its output, are dead */
    gboolean shared_down = L->kind == PS_LAYER_MOE && L->shared_experts > 0 && m == 4;
    if (L->kind != PS_LAYER_MOE || shared_down || ps_moe_product(L, m) == PS_MOE_COMBINE)
      return 0;
  }
  unsigned k = w->c->remat_keep | w->c->remat_offload; /* kept anywhere */
  if (L->kind == PS_LAYER_ATTENTION && L->mm[m].activations)
    return 1 - share_of(w, l, 2, k);
  return 1 - share_of(w, l, m, k);
}

gboolean ps_shard_has_heads(const Lower *w, int g)
{
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    if (ps_layer_kind_lower(w->m->layers[l].kind)->tensor == PS_TP_HEADS)
      return TRUE;
  return FALSE;
}

/* Activation bytes of the scores of group g's attention (local); none
 * of a flash attention's, which never keeps them. */
int64_t ps_shard_score_bytes(const Lower *w, int g)
{
  int64_t b = 0;
  for (int l = group_first(w, g); l <= group_last(w, g); l++) {
    const PsLayer *L = &w->local.layers[l];
    if (ps_layer_kind_lower(L->kind)->tensor == PS_TP_HEADS && L->flash_block == 0)
      b += L->heads / w->M * L->in_shape[0] * w->m->layers[l].in_shape[0]; /* its rows
                                                     (a context axis's share) by every key */
  }
  return b * w->batch * w->act_b;
}

/* Bytes a full-remat forward keeps: the kept outputs of group g's layers
 * (output_kept), at their local size; none in HBM where "custom" offloads
 * the unit's input to the host. */
int64_t ps_shard_kept_bytes(const Lower *w, int g)
{
  if (w->c->remat == PS_REMAT_CUSTOM && (w->c->remat_offload & PS_KEEP_INPUT))
    return 0; /* in the host's memory */
  int64_t b = 0;
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    if (output_kept(w, l))
      b += ps_shape_elems(w->local.layers[l].out_shape, w->local.layers[l].out_rank);
  return b * w->batch * w->act_b;
}

/* The repeat iteration group g belongs to (its last layer's), 0 for none. */
static int group_unit(const Lower *w, int g)
{
  return w->m->layers[group_last(w, g)].unit;
}

/* Full remat recomputes a unit's blocks together, before the backward of
 * its last: the activations group g's RECOMPUTE brings back, its own and,
 * for a unit's last group, those of the unit's earlier groups (whose own
 * RECOMPUTE then adds none); every group's backward frees its own. */
int64_t ps_shard_recompute_live(const Lower *w, int g, int64_t own)
{
  int u = group_unit(w, g), n = (int)w->starts->len - 1;
  if (u == 0)
    return own;
  if (g + 1 < n && group_unit(w, g + 1) == u)
    return 0; /* brought back by the unit's last group */
  int64_t live = own;
  for (int h = g - 1; h >= 0 && group_unit(w, h) == u; h--)
    live += ps_shard_group_act(w, h);
  return live;
}

/* Bytes of group g's products' outputs that "minimal" or "custom" keeps
 * where `mask` says (share_of: "minimal" the matmuls with a weight
 * operand, projections, feed-forward, the head; "custom" those the mask
 * names, remat_keep's or remat_offload's; what `offload` goes to the
 * host, of a unit's layers only), which backward would
 * otherwise recompute, at their local size.  A product whose sum a
 * reduce-scatter completes onto rows is kept as its rows (GSPMD keeps the
 * scattered value, a 1/M of the partial sum); one whose output only
 * feeds a residual join whose output is itself kept (the last block of a
 * unit: the next unit's input holds the sum) is not needed by backward
 * and not kept, as JAX saves only the residuals backward reads; a mixture
 * of experts' down product is (its S k routed rows, the combination's
 * backward reads them), so its mlpwo is kept whole. */
static int64_t products_of(const Lower *w, int g, unsigned mask, gboolean offload)
{
  int64_t b = 0;
  const PsLayer *ml = w->m->layers;
  for (int l = group_first(w, g); l <= group_last(w, g); l++) {
    const PsLayer *L = &w->local.layers[l];
    if ((offload && ml[l].unit == 0) || ids_lookup_kept(w, l))
      continue; /* outside a unit kept in HBM, as "minimal" keeps it; a
                   lookup's output counted once, as the block input */
    int64_t out = ps_shape_elems(ml[l].out_shape, ml[l].out_rank) / w->C, own = 0;
    for (int m = 0; m < L->n_mm; m++)
      own += (int64_t)(share_of(w, l, m, mask) *
                       (double)(L->mm[m].rows * L->mm[m].n * L->mm[m].count));
    if (own > 0 && w->lp[l].out_comp == PS_COLL_REDUCE_SCATTER)
      own -= MIN(own, out - out / w->M); /* the sum kept as its rows */
    /* a mixture of experts' products are its routed rows, which its
     * backward reads whatever comes after it (the router weights'
     * gradient of the combination): kept whole */
    if (own > 0 && ml[l].kind != PS_LAYER_MOE && feeds_join(w, l) && output_kept(w, l + 1))
      own -= MIN(own, w->lp[l].out_comp == PS_COLL_REDUCE_SCATTER ? out / w->M : out);
    b += own;
  }
  return b * w->batch * w->act_b;
}

/* Bytes "minimal" or "custom" keeps of group g in HBM: each kept block
 * input, as full keeps, and the products remat_keep names. */
int64_t ps_shard_products_bytes(const Lower *w, int g)
{
  return products_of(w, g, w->c->remat_keep, FALSE) + ps_shard_kept_bytes(w, g);
}

/* Bytes "custom" offloads of group g to the host's memory: its
 * remat_offload products, counted as products_bytes counts the kept ones,
 * and, where decoder_layer_input is offloaded, the unit inputs it
 * produces (its rerun forward starts from them); 0 under another
 * policy. */
int64_t ps_shard_offload_bytes(const Lower *w, int g)
{
  if (w->c->remat != PS_REMAT_CUSTOM || w->c->remat_offload == 0)
    return 0;
  int64_t b = products_of(w, g, w->c->remat_offload, TRUE);
  if (w->c->remat_offload & PS_KEEP_INPUT)
    for (int l = group_first(w, g); l <= group_last(w, g); l++)
      if (output_kept(w, l))
        b += ps_shape_elems(w->local.layers[l].out_shape, w->local.layers[l].out_rank) *
             w->batch * w->act_b;
  return b;
}

/* layer-moe.c: moe, a mixture-of-experts feed-forward block (Shazeer et
 * al., "Outrageously Large Neural Networks", 2017, arXiv:1701.06538;
 * GShard, Lepikhin et al. 2020, arXiv:2006.16668), (S, D) -> (S, D), as an
 * entry of the layer table (layer-private.h): a router (D x E) scores each
 * position's E experts, the top k of them take it, each expert a gated
 * (SwiGLU) feed-forward of F units (W_g, W_u: D x F, W_o: F x D), and the
 * position's output is the router-weighted sum of its k experts' outputs;
 * "shared_experts" more of the same width every position passes through
 * as well (DeepSeekMoE's shared experts, Dai et al. 2024,
 * arXiv:2401.06066).  Keys: "experts" (E), "top_k" (k), "units" (F),
 * "shared_experts" (default 0).
 *
 * Costs, as a dropless grouped matmul (MaxText's sparse_matmul, megablox
 * or tokamax gmm) lays them out: the router's product (S x D by D x E);
 * the experts' gate, up and down products over the S k routed copies of
 * the positions, each expert taking its share (the grouped matmul's rows
 * of all groups together, padded once: routing balanced, as MaxText's
 * use_random_routing makes it and as its load balancing loss aims for;
 * an imbalance's straggling expert is not modelled), so the experts' FLOPs are 6 k D F a position;
 * the shared experts' on every position.  The grouped matmul visits its
 * rows in tiles of "group_tiles" rows (each of its six kernels its own,
 * MaxText's wi/wo_tile_{fwd,dlhs,drhs}_batch_seq; default 128, tokamax's
 * ragged_dot Config for a shape its tuned table lacks), and a group that
 * starts inside a tile visits that tile again (megablox's
 * make_group_metadata: tiles_m <= visits <= tiles_m + groups - 1): the
 * cost model adds (E - 1)(t - 1) rows a product, E - 1 boundaries each
 * inside a tile with probability (t - 1) / t under random routing.
 * Element-wise: the router's softmax and top-k (8 FLOPs a score forward, 10 backward), the
 * gating (SwiGLU's 5 and 8 an element) and the weighted combination
 * (2 and 4 an element of the k outputs).  Traffic: the input read, the
 * scores written and read, the routed copies of the input written (the
 * sort) and read, the projections as swiglu's, the experts' outputs
 * written and read by the combination, the output written, the weights
 * once.  Kept for backward: the scores, the routed input, both
 * projections and the experts' outputs.
 *
 * Dropless, the grouped matmuls are Pallas kernels, which XLA fuses
 * nothing into: the router's softmax and top-k, the sort (a gather of the
 * S k routed rows, written), the gating (silu(gate) x up: both
 * projections read, the product written) and the combination (the
 * experts' outputs gathered back and summed with the router's weights,
 * the output written) run as fusions of their own between them (MaxText's
 * moe.py: permute, apply_ffn_activation, unpermute).  They are the
 * layer's apart_* work, costed as kernels apart: forward the scores read,
 * 3 S k D (the sort's gather and write, the combination's gather), 3 S k F
 * (gating) and S D (the output); backward the combination's gradient (dy
 * and the experts' outputs read, their gradient written), the gating's
 * (its gradient, both projections read, both gradients written), the
 * sort's (the routed gradient gathered, dx written) and the router's.
 *
 * With "capacity_factor" cf > 0, as MaxText's dropping path lays it out
 * (its dense_matmul when capacity_factor > 0 and sparse_matmul is off;
 * GShard's expert capacity): each expert takes at most C = ceil(S k / E) cf
 * positions of a sequence (at least cf; truncated to an integer, as
 * MaxText's int()), the rest dropped.  The experts' products run over all
 * E C slots, full or not; the positions reach them by a dispatch product
 * of the input with a one-hot mask (S D by S x E C, contracted over S) and
 * leave by a combine product of the experts' outputs with the router-
 * weighted mask (E C D by S x E C, contracted over E C): 2 S E C D FLOPs
 * each on the MXU.  The dispatch mask has no gradient, so its backward is
 * one product (the input's gradient), the combine's two.  The masks cost
 * 2 FLOPs an element to build forward and 2 backward (the router's
 * gradient through the combine weights); the combine mask (S E C) is
 * written, read by both products and kept for backward.  The model FLOPs
 * of MFU leave the padding of the slots and both products out (they count
 * the useful 6 k D F a position, as the dropless layout's).
 *
 * Timing only (no numeric kernel); a tensor axis does not split it
 * (strategies refuse that).  Invariant: params = D E + (E + shared) 3 D F,
 * whatever the capacity. */
#include "model/layer-private.h"

#define PS_MOE_ROUTE_FWD 8.0
#define PS_MOE_ROUTE_BWD 10.0
#define PS_MOE_GATE_FWD 5.0 /* as swiglu */
#define PS_MOE_GATE_BWD 8.0
#define PS_MOE_COMBINE_FWD 2.0
#define PS_MOE_COMBINE_BWD 4.0
#define PS_MOE_MASK_FWD 2.0
#define PS_MOE_MASK_BWD 2.0
/* The largest capacity factor accepted: each expert then has room for
 * every routed copy many times over. */
#define PS_MOE_MAX_CAPACITY_FACTOR 1024.0

static const char *const keys_moe[] = {"type",           "name",           "experts",
                                       "top_k",          "units",          "shared_experts",
                                       "capacity_factor", "group_tiles",   NULL};
/* "group_tiles"' keys, in PsMatmulPass order for the gate and up products
 * (MaxText's wi) and the down product (wo). */
static const char *const keys_group_tiles[] = {"wi_fwd", "wi_dlhs", "wi_drhs", "wo_fwd",
                                               "wo_dlhs", "wo_drhs", NULL};
/* tokamax's ragged_dot on TPU, its Config's tile_m for a shape its tuned
 * table lacks (openxla/tokamax, tokamax/_src/ops/ragged_dot/
 * pallas_mosaic_tpu.py) */
#define PS_MOE_GROUP_TILE_DEFAULT 128

static gboolean group_tiles_parse(PsLayer *L, json_object *obj, const char *file,
                                  const char *path, GError **error)
{
  for (size_t k = 0; k < G_N_ELEMENTS(L->group_tiles); k++)
    L->group_tiles[k] = PS_MOE_GROUP_TILE_DEFAULT;
  json_object *gt = NULL;
  if (!json_object_object_get_ex(obj, "group_tiles", &gt))
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, "group_tiles");
  if (L->capacity_factor > 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s: the tiles are the dropless layout's grouped matmul's; with a "
                "capacity_factor the experts run as dense products: leave group_tiles out",
                file, p);
    return FALSE;
  }
  if (!ps_json_expect_object(gt, file, p, error) ||
      !ps_json_check_keys(gt, file, p, keys_group_tiles, error))
    return FALSE;
  for (size_t k = 0; k < G_N_ELEMENTS(L->group_tiles); k++)
    if (!ps_layer_get_dim(gt, file, p, keys_group_tiles[k], FALSE, &L->group_tiles[k], error))
      return FALSE;
  return TRUE;
}

static gboolean moe_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                          GError **error)
{
  L->bias = FALSE;
  L->shared_experts = 0;
  L->capacity_factor = 0;
  if (!ps_json_check_keys(obj, file, path, keys_moe, error) ||
      !ps_layer_get_dim(obj, file, path, "experts", TRUE, &L->experts, error) ||
      !ps_layer_get_dim(obj, file, path, "top_k", TRUE, &L->top_k, error) ||
      !ps_layer_get_dim(obj, file, path, "units", TRUE, &L->units, error) ||
      !ps_json_get_int(obj, file, path, "shared_experts", FALSE, 0, 1 << 16,
                       &L->shared_experts, error) ||
      !ps_json_get_double(obj, file, path, "capacity_factor", FALSE, 0, FALSE,
                          PS_MOE_MAX_CAPACITY_FACTOR, &L->capacity_factor, error) ||
      !group_tiles_parse(L, obj, file, path, error))
    return FALSE;
  if (L->top_k > L->experts) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, path,
                   "top_k %" G_GINT64_FORMAT " is more than the %" G_GINT64_FORMAT
                   " experts; use at most %" G_GINT64_FORMAT,
                   L->top_k, L->experts, L->experts);
    return FALSE;
  }
  return TRUE;
}

PsMoeProduct ps_moe_product(const PsLayer *L, int m)
{
  int extra = L->shared_experts > 0 ? 5 : 3; /* the first product after the experts' */
  if (m == 0)
    return PS_MOE_ROUTER;
  if (m == 1 || (m == 3 && extra == 5))
    return PS_MOE_GATE_UP;
  if (m == 2 || (m == 4 && extra == 5))
    return PS_MOE_DOWN;
  return m == extra ? PS_MOE_DISPATCH : PS_MOE_COMBINE;
}

static gboolean moe_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank > 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "moe needs a rank-1 or rank-2 (S, D) input, got %s", in->str);
    return FALSE;
  }
  int64_t s = in->rank == 2 ? in->shape[0] : 1, d = in->shape[in->rank - 1];
  int64_t e = L->experts, k = L->top_k, f = L->units, sh = L->shared_experts;
  /* the experts' rows: every routed copy when dropless (S k in all, each
   * expert its share, S k / E when balanced), else every slot */
  double cap = L->capacity_factor > 0 ? MAX(ceil((double)(s * k) / (double)e) *
                                                L->capacity_factor,
                                            L->capacity_factor)
                                      : 0;
  double rows_d = cap > 0 ? (double)e * floor(cap) : (double)(s * k);
  if (cap > 0 && floor(cap) < 1) {
    /* the least factor that gives one slot, 1 / ceil(S k / E), rounded up
     * to six decimals so that the value printed is itself accepted */
    double least = ceil(1e6 / ceil((double)(s * k) / (double)e)) / 1e6;
    g_autofree char *p = ps_json_path_join(in->path, "capacity_factor");
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, p,
                   "%g leaves each of the %" G_GINT64_FORMAT
                   " experts no slot for a sequence of %" G_GINT64_FORMAT
                   " positions (top_k %" G_GINT64_FORMAT "): every position would be "
                   "dropped; use at least %g, or 0 for no capacity (dropless)",
                   L->capacity_factor, e, s, k, least);
    return FALSE;
  }
  if (!ps_layer_check_size((double)(e + sh) * 3.0 * (double)d * (double)f, "expert weights",
                           in, error) ||
      !ps_layer_check_size(2.0 * rows_d * (double)f, "projections", in, error) ||
      !ps_layer_check_size((double)s * rows_d, "combine mask", in, error))
    return FALSE;
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->params = d * e + (e + sh) * 3 * d * f;
  L->capacity = (int64_t)floor(cap); /* MaxText's int() */
  int64_t rows = (int64_t)rows_d;
  ps_layer_add_matmul(L, s, d, e, 1);    /* the router's scores */
  ps_layer_add_matmul(L, rows, d, f, 2); /* the experts' gate and up */
  ps_layer_add_matmul(L, rows, f, d, 1); /* down */
  if (L->capacity == 0) /* dropless: one grouped matmul each, over E groups */
    for (int m = 1; m <= 2; m++) {
      L->mm[m].groups = e;
      memcpy(L->mm[m].group_tile, &L->group_tiles[3 * (m - 1)], sizeof L->mm[m].group_tile);
    }
  if (sh > 0) {
    ps_layer_add_matmul(L, s, d, sh * f, 2);  /* the shared experts' gate and up */
    ps_layer_add_matmul(L, s, sh * f, d, 1);  /* and down */
  }
  double slots = 0; /* elements of the combine mask, S E C */
  if (L->capacity > 0) {
    slots = (double)s * (double)rows;
    ps_layer_add_matmul(L, rows, s, d, 1); /* dispatch: S positions into E C slots */
    L->mm[L->n_mm - 1].activations = TRUE;
    L->mm[L->n_mm - 1].bwd = 1.0; /* the mask has no gradient */
    ps_layer_add_matmul(L, s, rows, d, 1); /* combine: E C slots back to S positions */
    L->mm[L->n_mm - 1].activations = TRUE;
  }
  double mm = ps_layer_matmul_flops(L);
  double scores = (double)(s * e), routed = (double)rows;
  double gated = (routed + (double)(s * sh)) * (double)f, comb = routed * (double)d;
  L->fwd_flops = mm + PS_MOE_ROUTE_FWD * scores + PS_MOE_GATE_FWD * gated +
                 (L->capacity > 0 ? PS_MOE_MASK_FWD * slots : PS_MOE_COMBINE_FWD * comb);
  L->bwd_flops = 2 * mm + PS_MOE_ROUTE_BWD * scores + PS_MOE_GATE_BWD * gated +
                 (L->capacity > 0 ? PS_MOE_MASK_BWD * slots : PS_MOE_COMBINE_BWD * comb);
  if (L->capacity > 0) /* the dispatch's backward is one product, not two */
    L->bwd_flops -= 2.0 * (double)rows * (double)s * (double)d;
  /* x read; scores written and read; routed copies (or slots) written and
   * read; the gated projections as swiglu's (5 an element) and read again
   * by the down products; the experts' outputs written and read; y
   * written; the weights; with a capacity, the combine mask written and
   * read by both products */
  double sd = (double)(s * d), shared_out = sh > 0 ? sd : 0;
  if (L->capacity > 0) {
    L->fwd_bytes = sd + 2.0 * scores + 2.0 * comb + 6.0 * gated + 2.0 * (comb + shared_out) +
                   sd + (double)L->params + 3.0 * slots;
    L->bwd_bytes = 2 * L->fwd_bytes;
  } else {
    /* the fusions between the grouped matmuls (the comment above); the
     * grouped matmuls also read the routed copies twice (gate and up are
     * two calls), counted in fwd_bytes with them */
    double gated_r = routed * (double)f;
    L->apart_fwd_flops = PS_MOE_ROUTE_FWD * scores + PS_MOE_GATE_FWD * gated_r +
                         PS_MOE_COMBINE_FWD * comb;
    L->apart_bwd_flops = PS_MOE_ROUTE_BWD * scores + PS_MOE_GATE_BWD * gated_r +
                         PS_MOE_COMBINE_BWD * comb;
    L->apart_fwd_bytes = scores + 3.0 * comb + 3.0 * gated_r + sd;
    L->apart_bwd_bytes = 2.0 * scores + 3.0 * comb + 5.0 * gated_r + 2.0 * sd;
    L->fwd_bytes = sd + scores + 3.0 * comb + 3.0 * gated + 2.0 * shared_out + (double)L->params +
                   L->apart_fwd_bytes;
    L->bwd_bytes = 2 * (L->fwd_bytes - L->apart_fwd_bytes) + L->apart_bwd_bytes;
  }
  L->saves = PS_SAVES_INPUT;
  L->act_elems = (int64_t)(scores + comb + 2.0 * gated + comb + slots);
  return TRUE;
}

const PsLayerOps ps_layer_moe = {
  .kind = PS_LAYER_MOE,
  .name = "moe",
  .keys = keys_moe,
  .parse = moe_parse,
  .shape = moe_shape,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_REPLICATED, .kernel = "moe"},
};

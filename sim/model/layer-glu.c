/* layer-glu.c: swiglu, the gated input half of a SwiGLU or GeGLU
 * feed-forward block (Shazeer, "GLU Variants Improve Transformer", 2020,
 * arXiv:2002.05202, eqs. 5 and 6), (.., D) -> (.., F) = act(x W_g) o (x
 * W_u), as an entry of the layer table (layer-private.h); a dense layer of
 * D units after it is the block's down projection.  Keys: "units" (F),
 * "bias" (default false, as in the paper and Llama 2), "activation"
 * ("silu", the default: SwiGLU; "gelu": GeGLU, gelu in its tanh form, as
 * Gemma's MLP and MaxText's mlp_activations ["gelu", "linear"]).
 *
 * Costs: two matrix products of (rows x D) by (D x F), backward twice
 * their FLOPs; silu and the product 5 FLOPs per output forward, 8
 * backward; gelu and the product 11 forward (the gelu layer's 10, and
 * the product), 20 backward (gelu's derivative, 16 as the gelu layer's
 * backward, its value from the same exponential, 2, and the gradient's
 * products by dy and by the up projection, 2); it keeps its input and
 * both projections' outputs.
 * Invariant: its weights are [W_g (D x F), W_u (D x F)] (and biases [b_g,
 * b_u]); the shape's parameter count equals the plan's w_len + b_len. */
#include "model/layer-private.h"

#define PS_SWIGLU_FWD 5.0
#define PS_SWIGLU_BWD 8.0
#define PS_GEGLU_FWD 11.0
#define PS_GEGLU_BWD 20.0

static const char *const keys_swiglu[] = {"type", "name", "units", "bias", "activation", NULL};
static const char *const glu_activations[] = {"silu", "gelu", NULL};

static gboolean swiglu_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                             GError **error)
{
  int act = 0;
  L->bias = FALSE;
  if (!ps_json_check_keys(obj, file, path, keys_swiglu, error) ||
      !ps_layer_get_dim(obj, file, path, "units", TRUE, &L->units, error) ||
      !ps_json_get_bool(obj, file, path, "bias", FALSE, &L->bias, error) ||
      !ps_json_get_enum(obj, file, path, "activation", FALSE, glu_activations, &act, error))
    return FALSE;
  L->gelu_gate = act == 1;
  return TRUE;
}

static gboolean swiglu_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank > 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "swiglu needs a rank-1 or rank-2 input, got %s; add a flatten first",
                   in->str);
    return FALSE;
  }
  int64_t rows = in->rank == 2 ? in->shape[0] : 1;
  int64_t d = in->shape[in->rank - 1], f = L->units;
  if (!ps_layer_check_size(2.0 * (double)d * (double)f, "weight matrices", in, error) ||
      !ps_layer_check_size(2.0 * (double)rows * (double)f, "projections", in, error))
    return FALSE;
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->out_shape[in->rank - 1] = f;
  L->params = 2 * d * f + (L->bias ? 2 * f : 0);
  ps_layer_add_matmul(L, rows, d, f, 2); /* gate and up projections */
  double mm = ps_layer_matmul_flops(L), out = (double)(rows * f);
  double nb = L->bias ? 2 * out : 0;
  L->fwd_flops = mm + (L->gelu_gate ? PS_GEGLU_FWD : PS_SWIGLU_FWD) * out + nb;
  L->bwd_flops = 2 * mm + (L->gelu_gate ? PS_GEGLU_BWD : PS_SWIGLU_BWD) * out + nb;
  /* x read, weights read, both projections written and read back, y
   * written */
  L->fwd_bytes = (double)in->elems + (double)L->params + 5.0 * out;
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->saves = PS_SAVES_INPUT;
  L->act_elems = 2 * rows * f; /* both projections */
  return TRUE;
}

/* A dense layer's plan with twice its weights, keeping both projections'
 * outputs for backward. */
static gboolean swiglu_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  if (!ps_layer_dense_plan(p, nl, error))
    return FALSE;
  nl->w_len *= 2;
  nl->b_len *= 2;
  nl->cache_elems = 2 * (size_t)nl->groups * nl->units;
  nl->glu = p->l->gelu_gate ? PS_GLU_GELU : PS_GLU_SILU;
  return TRUE;
}

/* Each projection Glorot-uniform, D in and F out. */
static void swiglu_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  ps_net_fill_uniform(rng, net->params + nl->w_off, nl->w_len,
                      sqrt(6.0 / ((double)nl->in_dim + nl->units)));
}

static size_t swiglu_workspace(const NetLayer *nl, int max_batch)
{
  return ps_swiglu_workspace(max_batch * nl->groups, nl->in_dim, nl->units);
}

static void swiglu_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_swiglu_forward(st->net->prec, nl->glu, st->x, st->w, st->b, st->sl->out, st->sl->cache,
                    st->batch * nl->groups, nl->in_dim, nl->units);
}

static gboolean swiglu_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_swiglu_backward(st->net->prec, nl->glu, st->x, st->w, st->sl->cache, st->dy, st->dx, st->dw,
                     st->db, st->net->workspace, st->batch * nl->groups, nl->in_dim,
                     nl->units);
  return TRUE;
}

const PsLayerOps ps_layer_swiglu = {
  .kind = PS_LAYER_SWIGLU,
  .name = "swiglu",
  .keys = keys_swiglu,
  .parse = swiglu_parse,
  .shape = swiglu_shape,
  .plan = swiglu_plan,
  .init = swiglu_init,
  .workspace = swiglu_workspace,
  .forward = swiglu_forward,
  .backward = swiglu_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_MATMUL, .kernel = "matmul"},
};

/* layer-attention.c: multi-head self-attention, (S, D) -> (S, D), as an
 * entry of the layer table (layer-private.h): Q, K, V projections, scores
 * Q K^T per head, softmax (causal: position i attends to j <= i only),
 * context P V, output projection.
 * Invariant: its four D x D projections are one weight block (and one
 * bias block of 4 D when it has biases). */
#include "model/layer-private.h"

static const char *const keys_attention[] = {"type", "name", "heads", "bias", "causal", NULL};

/* causal is a mask: the same counted cost, but the numerics honour it */
static gboolean attention_parse(PsLayer *L, json_object *obj, const char *file,
                                const char *path, GError **error)
{
  return ps_json_check_keys(obj, file, path, keys_attention, error) &&
         ps_layer_get_dim(obj, file, path, "heads", TRUE, &L->heads, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L->bias, error) &&
         ps_json_get_bool(obj, file, path, "causal", FALSE, &L->causal, error);
}

static gboolean attention_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "attention needs a rank-2 (S, D) input, got %s", in->str);
    return FALSE;
  }
  int64_t s = in->shape[0], d = in->shape[1], h = L->heads;
  if (d % h != 0) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "d_model %" G_GINT64_FORMAT " is not divisible by heads %" G_GINT64_FORMAT,
                   d, h);
    return FALSE;
  }
  if (!ps_layer_check_size(4.0 * (double)d * (double)d, "weights", in, error) ||
      !ps_layer_check_size((double)h * (double)s * (double)s, "score tensor", in, error))
    return FALSE;
  int64_t dh = d / h;
  L->out_rank = 2;
  L->out_shape[0] = s;
  L->out_shape[1] = d;
  L->dim = d;
  L->params = 4 * d * d + (L->bias ? 4 * d : 0);
  ps_layer_add_matmul(L, s, d, 3 * d, 1); /* Q, K, V projections */
  ps_layer_add_matmul(L, s, dh, s, h);    /* scores Q K^T per head */
  ps_layer_add_matmul(L, s, s, dh, h);    /* context P V per head */
  ps_layer_add_matmul(L, s, d, d, 1);     /* output projection */
  double mm = ps_layer_matmul_flops(L);
  double scores = (double)(h * s * s), sd = (double)(s * d);
  double nb = L->bias ? 4.0 * sd : 0;
  L->fwd_flops = mm + (1 + PS_SOFTMAX_FWD) * scores + nb;
  L->bwd_flops = 2 * mm + (1 + PS_SOFTMAX_BWD) * scores + nb;
  /* x, qkv written, q and k read, v read, context written and read, output
   * written: 10 S D; scores written, read and written by the softmax, read
   * by the context product: 4 h S^2 */
  L->fwd_bytes = 10.0 * sd + 4.0 * scores + (double)L->params;
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->act_elems = 5 * s * d + h * s * s; /* x, q, k, v, context, probabilities */
  return TRUE;
}

static gboolean attention_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  const PsLayer *l = p->l;
  int64_t d = p->shape[1];
  if (l->heads <= 0 || d % l->heads != 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": attention needs heads > 0 dividing d_model %" G_GINT64_FORMAT,
                p->where, p->lname, d);
    return FALSE;
  }
  nl->attn = (PsAttnShape){.batch = 1, .seq = (int)p->shape[0], .dim = (int)d,
                           .heads = (int)l->heads, .causal = l->causal};
  nl->w_len = 4 * (size_t)d * d;
  nl->b_len = l->bias ? 4 * (size_t)d : 0;
  nl->cache_elems = ps_attention_saved(&nl->attn);
  return TRUE;
}

/* The four D x D projections Glorot-uniform each. */
static void attention_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  ps_net_fill_uniform(rng, net->params + nl->w_off, nl->w_len,
                      sqrt(6.0 / (2.0 * nl->attn.dim)));
}

static size_t attention_workspace(const NetLayer *nl, int max_batch)
{
  PsAttnShape a = nl->attn;
  a.batch = max_batch;
  return ps_attention_workspace(&a);
}

static void attention_forward(const NetStep *st)
{
  PsAttnShape a = st->nl->attn;
  a.batch = st->batch;
  ps_attention_forward(st->net->prec, &a, st->x, st->w, st->b, st->sl->out, st->sl->cache,
                       st->net->workspace);
}

static gboolean attention_backward(const NetStep *st)
{
  PsAttnShape a = st->nl->attn;
  a.batch = st->batch;
  ps_attention_backward(st->net->prec, &a, st->x, st->w, st->sl->cache, st->dy, st->dx, st->dw,
                        st->db, st->net->workspace);
  return TRUE;
}

const PsLayerOps ps_layer_attention = {
  .kind = PS_LAYER_ATTENTION,
  .name = "attention",
  .keys = keys_attention,
  .parse = attention_parse,
  .shape = attention_shape,
  .ranks = 1u << 2,
  .plan = attention_plan,
  .init = attention_init,
  .workspace = attention_workspace,
  .forward = attention_forward,
  .backward = attention_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_HEADS, .kernel = "matmul"},
};

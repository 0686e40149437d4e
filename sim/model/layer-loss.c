/* layer-loss.c: softmax_xent, softmax and cross-entropy loss against the
 * labels, as an entry of the layer table (layer-private.h).
 *
 * Its input is a vector of `classes` logits (one label per example) or
 * rows of them, (S, V) for a language model's per-token logits (S labels
 * per example, the next tokens): each row is scored against its own label
 * and the loss is the mean over every row of every example, tokens and
 * examples alike, as language models report it (a per-token loss whose
 * exponential is the perplexity).
 * Costs: 5 FLOPs per logit forward (max, subtract, exp, sum, divide), 2
 * backward (p - onehot, scale); it keeps its probabilities.
 * Invariant: it is the model's last layer, over rows of `classes` logits
 * (net->labels_per rows per example); its output, the probabilities, has
 * no gradient (the loss is accumulated on the side); over a vector it
 * computes exactly what it did before rows existed (rows = batch). */
#include "model/layer-private.h"

static gboolean softmax_xent_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->fwd_flops = PS_SOFTMAX_FWD * (double)in->elems;
  L->bwd_flops = 2.0 * (double)in->elems;
  L->fwd_bytes = 2.0 * (double)in->elems;
  L->bwd_bytes = 2.0 * (double)in->elems;
  L->act_elems = in->elems;
  return TRUE;
}

static gboolean softmax_xent_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  if (p->i != p->model->n_layers - 1 || p->rank < 1 || p->rank > 2) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": softmax_xent must be the last layer, over a vector of "
                "logits or (S, V) logits per token", p->where, p->lname);
    return FALSE;
  }
  int64_t width = p->shape[p->rank - 1];
  if (p->model->classes > 0 && p->model->classes != width) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %" G_GINT64_FORMAT " logits for %" G_GINT64_FORMAT
                " classes", p->where, p->lname, width, p->model->classes);
    return FALSE;
  }
  return TRUE;
}

static void softmax_xent_forward(const NetStep *st)
{
  Slot *s = st->s;
  s->loss_sum = ps_softmax_xent_forward(st->x, s->labels, st->sl->out,
                                        st->batch * st->net->labels_per, st->net->classes,
                                        &s->correct);
}

static gboolean softmax_xent_backward(const NetStep *st)
{
  /* d(mean over rows)/d(logits): 1/rows per row, rows = batch x labels */
  int rows = st->batch * st->net->labels_per;
  if (st->dx)
    ps_softmax_xent_backward(st->sl->out, st->s->labels, st->dx, rows, st->net->classes,
                             st->loss_scale / (float)rows);
  return TRUE;
}

const PsLayerOps ps_layer_softmax_xent = {
  .kind = PS_LAYER_SOFTMAX_XENT,
  .name = "softmax_xent",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = softmax_xent_shape,
  .loss = TRUE,
  .plan = softmax_xent_plan,
  .forward = softmax_xent_forward,
  .backward = softmax_xent_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_LOSS, .fuses_into_producer = TRUE,
            .kernel = "softmax_xent"},
};

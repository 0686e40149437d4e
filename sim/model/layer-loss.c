/* layer-loss.c: softmax_xent, softmax and cross-entropy loss against the
 * labels, as an entry of the layer table (layer-private.h).
 *
 * Costs: 5 FLOPs per logit forward (max, subtract, exp, sum, divide), 2
 * backward (p - onehot, scale); it keeps its probabilities.
 * Invariant: it is the model's last layer, over a vector of `classes`
 * logits; its output, the probabilities, has no gradient (the loss is one
 * number per example, accumulated on the side). */
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
  if (p->i != p->model->n_layers - 1 || p->rank != 1) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": softmax_xent must be the last layer, over a vector of "
                "logits", p->where, p->lname);
    return FALSE;
  }
  if (p->model->classes > 0 && p->model->classes != p->shape[0]) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %" G_GINT64_FORMAT " logits for %" G_GINT64_FORMAT
                " classes", p->where, p->lname, p->shape[0], p->model->classes);
    return FALSE;
  }
  return TRUE;
}

static void softmax_xent_forward(const NetStep *st)
{
  Slot *s = st->s;
  s->loss_sum = ps_softmax_xent_forward(st->x, s->labels, st->sl->out, st->batch,
                                        st->net->classes, &s->correct);
}

static gboolean softmax_xent_backward(const NetStep *st)
{
  if (st->dx)
    ps_softmax_xent_backward(st->sl->out, st->s->labels, st->dx, st->batch, st->net->classes,
                             st->loss_scale / (float)st->batch);
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

/* layer-elementwise.c: the kinds that map each element on its own, relu,
 * gelu (tanh form), tanh and dropout, the reshape flatten, and the
 * residual join add (body output + shortcut output), as entries of the
 * layer table (layer-private.h).
 *
 * Costs, FLOPs per element forward / backward: relu 1 / 1, tanh 4 / 3, gelu
 * 10 / 16, dropout PS_DROPOUT_FWD / PS_DROPOUT_BWD, add 1 / 1 (the
 * backward one is the sum of the two gradients at the fork); relu and
 * gelu keep their input for backward (their output, never written, is
 * recomputed by the kernel that reads it), tanh its output, dropout its
 * mask alone (one byte an element; its output is written by the kernel it
 * is fused into); flatten is a view and moves nothing.  Dropout at rate 0
 * is the identity and costs nothing, as BERT's reference dropout()
 * returns its input unchanged then.
 * Invariant: the output has the input's elements in the input's order. */
#include "model/layer-private.h"

/* ---- activations -------------------------------------------------------- */

static gboolean relu_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  ps_layer_elementwise(L, in, 1, 1);
  L->saves = PS_SAVES_INPUT;
  return TRUE;
}

static gboolean gelu_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  ps_layer_elementwise(L, in, 10, 16);
  L->saves = PS_SAVES_INPUT;
  return TRUE;
}

static gboolean tanh_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  ps_layer_elementwise(L, in, 4, 3);
  L->saves = PS_SAVES_OUTPUT;
  return TRUE;
}

/* Same shape, nothing to plan. */
static gboolean same_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  return TRUE;
}

static void relu_forward(const NetStep *st)
{
  ps_relu_forward(st->x, st->sl->out, st->n);
}

static gboolean relu_backward(const NetStep *st)
{
  if (st->dx)
    ps_relu_backward(st->x, st->dy, st->dx, st->n);
  return TRUE;
}

static void gelu_forward(const NetStep *st)
{
  ps_gelu_forward(st->x, st->sl->out, st->n);
}

static gboolean gelu_backward(const NetStep *st)
{
  if (st->dx)
    ps_gelu_backward(st->x, st->dy, st->dx, st->n);
  return TRUE;
}

static void tanh_forward(const NetStep *st)
{
  ps_tanh_forward(st->x, st->sl->out, st->n);
}

static gboolean tanh_backward(const NetStep *st)
{
  if (st->dx)
    ps_tanh_backward(st->sl->out, st->dy, st->dx, st->n);
  return TRUE;
}

#define ACTIVATION(NAME, KIND)                                                       \
  const PsLayerOps ps_layer_##NAME = {                                               \
    .kind = KIND,                                                                    \
    .name = #NAME,                                                                   \
    .keys = ps_layer_keys_plain,                                                     \
    .parse = ps_layer_parse_plain,                                                   \
    .shape = NAME##_shape,                                                           \
    .plan = same_plan,                                                               \
    .forward = NAME##_forward,                                                       \
    .backward = NAME##_backward,                                                     \
    .lower = {.lowering = PS_LOWER_UNARY, .tensor = PS_TP_ELEMENTWISE,               \
              .fuses_into_producer = TRUE, .kernel = #NAME},                          \
  }

ACTIVATION(relu, PS_LAYER_RELU);
ACTIVATION(gelu, PS_LAYER_GELU);
ACTIVATION(tanh, PS_LAYER_TANH);

/* ---- dropout ------------------------------------------------------------ */

static const char *const keys_dropout[] = {"type", "name", "rate", NULL};

static gboolean dropout_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                              GError **error)
{
  L->bias = FALSE;
  return ps_json_check_keys(obj, file, path, keys_dropout, error) &&
         ps_layer_get_rate(obj, file, path, "rate", TRUE, &L->rate, error);
}

/* Forward reads x and writes y, backward reads dy and writes dx, each
 * way the mask too (mask_elems, at PS_MASK_BYTES); nothing at rate 0. */
static gboolean dropout_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  ps_layer_elementwise(L, in, PS_DROPOUT_FWD, PS_DROPOUT_BWD);
  L->bwd_bytes = 2.0 * (double)in->elems;
  L->saves = PS_SAVES_NONE;
  L->mask_elems = in->elems;
  if (L->rate == 0.0) {
    L->fwd_flops = L->bwd_flops = L->fwd_bytes = L->bwd_bytes = 0;
    L->mask_elems = 0;
  }
  return TRUE;
}

static gboolean dropout_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  nl->rate = (float)p->l->rate;
  return TRUE;
}

/* y = mask o x / (1 - rate) when training, else y = x; backward the
 * same map of dy (the mask is drawn again from its key). */
static void dropout_map(const NetStep *st, const float *in, float *out)
{
  PsDropoutKey key;
  if (st->nl->rate > 0.0f && ps_net_dropout_key(st->net, st->s, st->nl->index, &key))
    ps_dropout_apply(&key, st->nl->rate, in, out, st->batch, st->nl->out_elems);
  else if (out != in)
    memcpy(out, in, st->n * sizeof *out);
}

static void dropout_forward(const NetStep *st)
{
  dropout_map(st, st->x, st->sl->out);
}

static gboolean dropout_backward(const NetStep *st)
{
  if (st->dx)
    dropout_map(st, st->dy, st->dx);
  return TRUE;
}

const PsLayerOps ps_layer_dropout = {
  .kind = PS_LAYER_DROPOUT,
  .name = "dropout",
  .keys = keys_dropout,
  .parse = dropout_parse,
  .shape = dropout_shape,
  .plan = dropout_plan,
  .forward = dropout_forward,
  .backward = dropout_backward,
  .lower = {.lowering = PS_LOWER_UNARY, .tensor = PS_TP_ELEMENTWISE,
            .fuses_into_producer = TRUE, .kernel = "dropout"},
};

/* ---- flatten ------------------------------------------------------------ */

static gboolean flatten_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  L->out_rank = 1;
  L->out_shape[0] = in->elems;
  return TRUE;
}

static gboolean flatten_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  nl->out_rank = 1;
  nl->out_shape[0] = p->elems;
  nl->out_shape[1] = nl->out_shape[2] = 0;
  return TRUE;
}

/* Nothing to do: the output is the input buffer itself, and the readers
 * of its output write the gradient of its input. */
static void flatten_forward(const NetStep *st)
{
}

const PsLayerOps ps_layer_flatten = {
  .kind = PS_LAYER_FLATTEN,
  .name = "flatten",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = flatten_shape,
  .view = TRUE,
  .plan = flatten_plan,
  .forward = flatten_forward,
  .lower = {.lowering = PS_LOWER_VIEW, .tensor = PS_TP_ELEMENTWISE, .fuses_into_producer = TRUE,
            .kernel = "flatten"},
};

/* ---- add ---------------------------------------------------------------- */

/* Read x and the shortcut, write y; backward read dy, write both
 * gradients. */
static gboolean add_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->fwd_flops = (double)in->elems;
  L->bwd_flops = (double)in->elems;
  L->fwd_bytes = 3.0 * (double)in->elems;
  L->bwd_bytes = 3.0 * (double)in->elems;
  return TRUE;
}

static gboolean add_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  if (p->sc_rank != p->rank || memcmp(p->sc_shape, p->shape, sizeof(int64_t) * p->rank) != 0) {
    g_autofree char *a = ps_layer_shape_str(p->shape, p->rank);
    g_autofree char *b = ps_layer_shape_str(p->sc_shape, p->sc_rank);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": adds a %s input to a %s shortcut", p->where, p->lname, a, b);
    return FALSE;
  }
  return TRUE;
}

static void add_forward(const NetStep *st)
{
  const float *sc = ps_net_slot_output(st->s, st->nl->shortcut_from);
  for (size_t i = 0; i < st->n; i++)
    st->sl->out[i] = st->x[i] + sc[i];
}

/* Both inputs get dy, each overwritten by the pass's first write or added
 * to; no scratch needed. */
static gboolean add_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  Slot *s = st->s;
  float *targets[2] = {nl->input_from >= 0 ? s->layers[nl->input_from].dout : NULL,
                       nl->shortcut_from >= 0 ? s->layers[nl->shortcut_from].dout : NULL};
  gboolean first[2] = {nl->in_first, nl->sc_first};
  for (int t = 0; t < 2; t++) {
    if (!targets[t])
      continue;
    if (first[t])
      memcpy(targets[t], st->dy, st->n * sizeof *st->dy);
    else
      ps_net_add_to(targets[t], st->dy, st->n);
  }
  return FALSE;
}

/* Made by residual groups, never written in a model file. */
const PsLayerOps ps_layer_add = {
  .kind = PS_LAYER_ADD,
  .name = "add",
  .shape = add_shape,
  .join = TRUE,
  .plan = add_plan,
  .forward = add_forward,
  .backward = add_backward,
  .lower = {.lowering = PS_LOWER_JOIN, .tensor = PS_TP_ELEMENTWISE, .fuses_into_producer = TRUE,
            .kernel = "add"},
};

/* net.c: real numerics of a model on one device: parameters, gradients,
 * and per slot the activations and their gradients, stepped one layer at a
 * time.
 *
 * A layer reads the output of the layer its input_from names (an ADD also
 * that of its shortcut_from), the net input for -1; backward writes the
 * gradient of each such input.  An output read by several layers (a
 * residual block's input) gets the sum: kernels overwrite dx, so of the
 * layers writing into one gradient buffer the one whose backward runs
 * first in a pass (the highest index) overwrites it and the others compute
 * into a scratch buffer that is then added in.
 * Invariant: every buffer is allocated once in ps_net_new_slots for
 * max_batch examples per slot, so stepping a layer never allocates (bf16
 * GEMM copies aside); parameters and gradients are each one contiguous
 * vector in layer order, weights before bias; every layer's output but
 * the loss's has a gradient buffer in each slot, so backward of any layer
 * reading a layer's output writes that output's gradient (what a pipeline
 * stage passes back); a FLATTEN layer's output is the very buffer of its
 * input, and so is its output gradient unless that input is the net input
 * (which has no gradient). */
#include "model/layer-private.h"

/* ---- construction ------------------------------------------------------ */

static const char *model_where(const PsModel *model)
{
  if (model->file)
    return model->file;
  return model->name ? model->name : "model";
}

static gboolean shapes_equal(int rank_a, const int64_t *a, int rank_b, const int64_t *b)
{
  if (rank_a != rank_b)
    return FALSE;
  for (int d = 0; d < rank_a; d++)
    if (a[d] != b[d])
      return FALSE;
  return TRUE;
}

/* The rank and shape of producer p's output (the model input for -1). */
static void producer_shape(const PsModel *model, const NetLayer *planned, int p, int *rank,
                           const int64_t **shape)
{
  *rank = p < 0 ? model->in_rank : planned[p].out_rank;
  *shape = p < 0 ? model->in_shape : planned[p].out_shape;
}

/* "needs an (H, W, C) input": the ranks a kind's numerics take. */
static const char *ranks_wanted(unsigned ranks)
{
  if (ranks == (1u << 3))
    return "an (H, W, C)";
  if (ranks == (1u << 2))
    return "an (S, D)";
  return "an (S, D) or (H, W, C)";
}

/* Checks what every kind needs of layer i's input: an earlier producer,
 * the shape the model says, a rank the kind takes, a size numerics can
 * index; fills p. */
static gboolean plan_input(const PsModel *model, int i, const NetLayer *planned, NetPlan *p,
                           GError **error)
{
  const PsLayer *l = &model->layers[i];
  const PsLayerOps *ops = ps_layer_ops(l->kind);
  *p = (NetPlan){.model = model, .i = i, .l = l, .planned = planned,
                 .where = model_where(model), .lname = l->name ? l->name : "?",
                 .kname = ops->name};
  if (l->input_from < -1 || l->input_from >= i ||
      (ops->join && (l->shortcut_from < -1 || l->shortcut_from >= i))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": its input is not the output of an earlier layer", p->where,
                p->lname);
    return FALSE;
  }
  producer_shape(model, planned, l->input_from, &p->rank, &p->shape);
  if (ops->join)
    producer_shape(model, planned, l->shortcut_from, &p->sc_rank, &p->sc_shape);
  p->elems = ps_shape_elems(p->shape, p->rank);
  if (!shapes_equal(l->in_rank, l->in_shape, p->rank, p->shape)) {
    g_autofree char *got = ps_layer_shape_str(l->in_shape, l->in_rank);
    g_autofree char *want = ps_layer_shape_str(p->shape, p->rank);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input shape %s differs from the output %s feeding it",
                p->where, p->lname, got, want);
    return FALSE;
  }
  if (ops->ranks && !(ops->ranks & (1u << p->rank))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs %s input, got rank %d", p->where, p->lname,
                p->kname, ranks_wanted(ops->ranks), p->rank);
    return FALSE;
  }
  if (p->elems <= 0 || p->elems > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input of %" G_GINT64_FORMAT " elements per example is "
                "out of range for numerics", p->where, p->lname, p->elems);
    return FALSE;
  }
  return TRUE;
}

/* Works out layer i's output shape from its input (the output of the
 * layers before it, already in `planned`) and its hyper-parameters, fills
 * the kernel shapes in planned[i], and checks the result against what the
 * model says. */
static gboolean plan_layer(const PsModel *model, int i, NetLayer *planned, GError **error)
{
  const PsLayer *l = &model->layers[i];
  const PsLayerOps *ops = ps_layer_ops(l->kind);
  NetLayer *nl = &planned[i];
  NetPlan p;
  if (!plan_input(model, i, planned, &p, error))
    return FALSE;
  nl->input_from = l->input_from;
  nl->shortcut_from = ops->join ? l->shortcut_from : -1;
  nl->out_rank = p.rank;
  memcpy(nl->out_shape, p.shape, sizeof(int64_t) * PS_MAX_RANK);
  nl->in_elems = (size_t)p.elems;
  if (!ops->plan(&p, nl, error))
    return FALSE;

  int64_t params = (int64_t)(nl->w_len + nl->b_len);
  if (!ops->loss && !shapes_equal(l->out_rank, l->out_shape, nl->out_rank, nl->out_shape)) {
    g_autofree char *got = ps_layer_shape_str(l->out_shape, l->out_rank);
    g_autofree char *want = ps_layer_shape_str(nl->out_shape, nl->out_rank);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": output shape %s, but the %s kernel produces %s", p.where,
                p.lname, got, p.kname, want);
    return FALSE;
  }
  if (l->params != params) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %" G_GINT64_FORMAT " parameters, but the %s kernel has %"
                G_GINT64_FORMAT, p.where, p.lname, l->params, p.kname, params);
    return FALSE;
  }
  nl->out_elems = (size_t)ps_shape_elems(nl->out_shape, nl->out_rank);
  return TRUE;
}

/* The layer whose buffer holds producer p's output gradient (a FLATTEN of
 * a layer shares its input's). */
static int grad_owner(const PsNet *net, int p)
{
  while (p >= 0 && net->layers[p].aliased)
    p = net->layers[p].input_from;
  return p;
}

/* Marks, for each gradient buffer, which write of a backward pass comes
 * first: layers run backward from the last, an ADD's input before its
 * shortcut. */
static void plan_gradient_writes(PsNet *net)
{
  g_autofree gboolean *written = g_new0(gboolean, MAX(net->n_layers, 1));
  for (int i = net->n_layers - 1; i >= 0; i--) {
    NetLayer *nl = &net->layers[i];
    if (ps_layer_ops(nl->kind)->view)
      continue; /* writes nothing: its readers write through it */
    int o = grad_owner(net, nl->input_from);
    if (o >= 0) {
      nl->in_first = !written[o];
      written[o] = TRUE;
    }
    o = grad_owner(net, nl->shortcut_from);
    if (ps_layer_ops(nl->kind)->join && o >= 0) {
      nl->sc_first = !written[o];
      written[o] = TRUE;
    }
  }
}

void ps_net_fill_uniform(GRand *rng, float *w, size_t n, double limit)
{
  for (size_t j = 0; j < n; j++)
    w[j] = (float)g_rand_double_range(rng, -limit, limit);
}

/* He (limit sqrt(6 / fan_in)) when a ReLU follows, Glorot (limit
 * sqrt(6 / (fan_in + fan_out))) otherwise, as Keras's he_uniform and
 * glorot_uniform initializers define them. */
void ps_net_init_fan(PsNet *net, int i, GRand *rng, double fan_in, double fan_out)
{
  const NetLayer *nl = &net->layers[i];
  gboolean relu_next = i + 1 < net->n_layers && net->layers[i + 1].kind == PS_LAYER_RELU;
  double limit = relu_next ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
  ps_net_fill_uniform(rng, net->params + nl->w_off, nl->w_len, limit);
}

/* Each kind initialises its own weights (layer-*.c), layer after layer
 * from one stream; biases stay zero. */
static void init_weights(PsNet *net, GRand *rng)
{
  for (int i = 0; i < net->n_layers; i++) {
    const PsLayerOps *ops = ps_layer_ops(net->layers[i].kind);
    if (ops->init)
      ops->init(net, i, rng);
  }
}

static void slot_alloc(PsNet *net, Slot *s)
{
  const size_t mb = (size_t)net->max_batch;
  s->input = g_new0(float, net->in_elems * mb);
  s->labels = g_new0(int32_t, mb * (size_t)net->labels_per);
  s->layers = g_new0(SlotLayer, net->n_layers);
  for (int i = 0; i < net->n_layers; i++) {
    const NetLayer *nl = &net->layers[i];
    SlotLayer *sl = &s->layers[i];
    const PsLayerOps *ops = ps_layer_ops(nl->kind);
    if (ops->view) {
      int p = nl->input_from;
      sl->out = p >= 0 ? s->layers[p].out : s->input;
      sl->dout = p >= 0 ? s->layers[p].dout : g_new0(float, nl->out_elems * mb);
    } else {
      sl->out = g_new0(float, nl->out_elems * mb);
      if (!ops->loss)
        sl->dout = g_new0(float, nl->out_elems * mb);
    }
    if (nl->cache_elems)
      sl->cache = g_new0(float, nl->cache_elems * mb);
    if (nl->argmax)
      sl->argmax = g_new0(int32_t, nl->out_elems * mb);
  }
}

static void slot_free(PsNet *net, Slot *s)
{
  if (!s->layers)
    return;
  for (int i = 0; i < net->n_layers; i++) {
    SlotLayer *sl = &s->layers[i];
    if (net->layers[i].owns_out)
      g_free(sl->out);
    if (net->layers[i].owns_dout)
      g_free(sl->dout);
    g_free(sl->cache);
    g_free(sl->argmax);
  }
  g_free(s->layers);
  g_free(s->input);
  g_free(s->labels);
}

/* The kinds that have numeric kernels, as "dense, conv2d, ...".
 * (transfer full) */
static char *kinds_with_kernels(void)
{
  GString *s = g_string_new(NULL);
  for (int k = 0; ps_layer_table[k]; k++)
    if (ps_layer_table[k]->forward)
      g_string_append_printf(s, "%s%s%s", s->len ? ", " : "",
                             ps_layer_table[k]->join ? "residual " : "", ps_layer_table[k]->name);
  return g_string_free(s, FALSE);
}

/* What numerics need of the model as a whole. */
static gboolean check_model(const PsModel *model, GError **error)
{
  const char *where = model_where(model);
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *l = &model->layers[i];
    if (!ps_layer_ops(l->kind)->forward) {
      g_autofree char *kinds = kinds_with_kernels();
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": kind \"%s\" has no numeric kernel (numerics support "
                  "%s)", where, l->name ? l->name : "?", ps_layer_kind_name(l->kind), kinds);
      return FALSE;
    }
  }
  if (model->n_layers == 0 || !ps_layer_ops(model->layers[model->n_layers - 1].kind)->loss) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layers: numerics need a model ending in a softmax_xent layer", where);
    return FALSE;
  }
  return TRUE;
}

/* Plans every layer: shapes, parameter offsets, buffer ownership; the
 * largest workspace in *ws. */
static gboolean plan_layers(PsNet *net, const PsModel *model, size_t *ws, GError **error)
{
  const int max_batch = net->max_batch;
  size_t offset = 0;
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    nl->kind = model->layers[i].kind;
    nl->index = i;
    const PsLayerOps *ops = ps_layer_ops(nl->kind);
    if (!plan_layer(model, i, net->layers, error))
      return FALSE;
    if ((double)nl->out_elems * max_batch > (double)G_MAXINT32 ||
        (double)nl->in_elems * max_batch > (double)G_MAXINT32 ||
        (double)nl->cache_elems * max_batch > (double)G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": activations of %d examples are too large for numerics",
                  model_where(model), model->layers[i].name ? model->layers[i].name : "?",
                  max_batch);
      return FALSE;
    }
    nl->aliased = ops->view && nl->input_from >= 0;
    nl->owns_out = !ops->view;
    nl->owns_dout = !ops->loss && !nl->aliased;
    nl->w_off = offset;
    nl->b_off = offset + nl->w_len;
    offset += nl->w_len + nl->b_len;
    if (ops->workspace)
      *ws = MAX(*ws, ops->workspace(nl, max_batch));
  }
  net->n_params = offset;
  return TRUE;
}

PsNet *ps_net_new_slots(const PsModel *model, int max_batch, int slots, PsPrecision prec,
                        uint64_t seed, GError **error)
{
  g_return_val_if_fail(model != NULL, NULL);
  g_return_val_if_fail(max_batch > 0 && slots > 0, NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);

  const char *where = model_where(model);
  if (!check_model(model, error))
    return NULL;

  PsNet *net = g_new0(PsNet, 1);
  net->n_layers = model->n_layers;
  net->layers = g_new0(NetLayer, model->n_layers);
  net->max_batch = max_batch;
  net->prec = prec;
  net->seed = seed;

  /* Shapes, parameter offsets and the largest workspace. */
  int rank = model->in_rank;
  int64_t in_elems = rank >= 1 && rank <= PS_MAX_RANK ? ps_shape_elems(model->in_shape, rank) : 0;
  if (in_elems <= 0 || in_elems > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: input: shape of rank %d with %" G_GINT64_FORMAT " elements is out of "
                "range for numerics", where, rank, in_elems);
    goto fail_net;
  }
  net->in_elems = (size_t)in_elems;
  size_t ws = 0;
  if (!plan_layers(net, model, &ws, error))
    goto fail_net;
  /* the loss scores rows of `classes` logits, labels_per rows per example */
  const NetLayer *loss = &net->layers[net->n_layers - 1];
  net->classes = (int)loss->out_shape[loss->out_rank - 1];
  net->labels_per = (int)(loss->in_elems / (size_t)net->classes);
  plan_gradient_writes(net);
  size_t scratch = 0;
  for (int i = 0; i < net->n_layers; i++) {
    const NetLayer *nl = &net->layers[i];
    if ((nl->input_from >= 0 && !nl->in_first && !ps_layer_ops(nl->kind)->view) ||
        (nl->shortcut_from >= 0 && !nl->sc_first))
      scratch = MAX(scratch, nl->in_elems * (size_t)max_batch);
  }

  net->params = g_new0(float, MAX(net->n_params, 1));
  net->grads = g_new0(float, MAX(net->n_params, 1));
  net->workspace = ws ? g_new(float, ws) : NULL;
  net->scratch = scratch ? g_new(float, scratch) : NULL;
  net->n_slots = slots;
  net->slots = g_new0(Slot, slots);
  for (int s = 0; s < slots; s++)
    slot_alloc(net, &net->slots[s]);
  net->cur = &net->slots[0];

  uint32_t seed_words[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  GRand *rng = g_rand_new_with_seed_array(seed_words, 2);
  init_weights(net, rng);
  g_rand_free(rng);
  return net;

fail_net:
  ps_net_free(net);
  return NULL;
}

PsNet *ps_net_new(const PsModel *model, int max_batch, PsPrecision prec, uint64_t seed,
                  GError **error)
{
  return ps_net_new_slots(model, max_batch, 1, prec, seed, error);
}

void ps_net_free(PsNet *net)
{
  if (!net)
    return;
  for (int s = 0; s < net->n_slots; s++)
    slot_free(net, &net->slots[s]);
  g_free(net->slots);
  g_free(net->layers);
  g_free(net->params);
  g_free(net->grads);
  g_free(net->workspace);
  g_free(net->scratch);
  g_free(net);
}

/* ---- slots ------------------------------------------------------------- */

int ps_net_slots(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->n_slots;
}

void ps_net_select_slot(PsNet *net, int slot)
{
  g_return_if_fail(net != NULL && slot >= 0 && slot < net->n_slots);
  net->cur = &net->slots[slot];
}

void ps_net_set_input(PsNet *net, const float *x, const int32_t *labels, int batch)
{
  g_return_if_fail(net != NULL && x != NULL && labels != NULL);
  g_return_if_fail(batch > 0 && batch <= net->max_batch);
  size_t n_labels = (size_t)batch * (size_t)net->labels_per;
  for (size_t r = 0; r < n_labels; r++)
    g_return_if_fail(labels[r] >= 0 && labels[r] < net->classes);
  Slot *s = net->cur;
  memcpy(s->input, x, (size_t)batch * net->in_elems * sizeof *x);
  memcpy(s->labels, labels, n_labels * sizeof *labels);
  s->batch = batch;
  s->training = FALSE;
}

void ps_net_set_batch(PsNet *net, int batch)
{
  g_return_if_fail(net != NULL && batch > 0 && batch <= net->max_batch);
  net->cur->batch = batch;
  net->cur->training = FALSE;
}

void ps_net_set_dropout(PsNet *net, int64_t step, int64_t first_example)
{
  g_return_if_fail(net != NULL && step >= 0 && first_example >= 0);
  net->cur->training = TRUE;
  net->cur->step = step;
  net->cur->first = first_example;
}

gboolean ps_net_dropout_key(const PsNet *net, const Slot *s, int i, PsDropoutKey *key)
{
  if (!s->training)
    return FALSE;
  *key = (PsDropoutKey){.seed = net->seed, .step = s->step, .layer = i, .first = s->first};
  return TRUE;
}

static size_t layer_elems(const PsNet *net, int layer)
{
  return layer < 0 ? net->in_elems : net->layers[layer].out_elems;
}

float *ps_net_activation(PsNet *net, int layer, size_t *n)
{
  g_return_val_if_fail(net != NULL && layer >= -1 && layer < net->n_layers, NULL);
  if (n)
    *n = (size_t)net->cur->batch * layer_elems(net, layer);
  return layer < 0 ? net->cur->input : net->cur->layers[layer].out;
}

float *ps_net_activation_grad(PsNet *net, int layer, size_t *n)
{
  g_return_val_if_fail(net != NULL && layer >= -1 && layer < net->n_layers, NULL);
  float *g = layer < 0 ? NULL : net->cur->layers[layer].dout;
  if (n)
    *n = g ? (size_t)net->cur->batch * layer_elems(net, layer) : 0;
  return g;
}

/* ---- stepping ---------------------------------------------------------- */

/* Where backward puts the gradient of the output of `producer`: its own
 * buffer for the pass's first write, else the scratch buffer that
 * grad_done adds in.  NULL for the net input. */
static float *grad_target(PsNet *net, int producer, gboolean first)
{
  if (producer < 0)
    return NULL;
  return first ? net->cur->layers[producer].dout : net->scratch;
}

static void grad_done(PsNet *net, int producer, gboolean first, size_t n)
{
  if (producer >= 0 && !first)
    ps_net_add_to(net->cur->layers[producer].dout, net->scratch, n);
}

void ps_net_forward_layer(PsNet *net, int layer)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  Slot *s = net->cur;
  g_return_if_fail(s->batch > 0);
  const NetLayer *nl = &net->layers[layer];
  NetStep st = {.net = net, .s = s, .nl = nl, .sl = &s->layers[layer],
                .x = ps_net_slot_output(s, nl->input_from), .batch = s->batch,
                .n = (size_t)s->batch * nl->out_elems, .w = net->params + nl->w_off,
                .b = nl->b_len ? net->params + nl->b_off : NULL};
  ps_layer_ops(nl->kind)->forward(&st);
}

void ps_net_backward_layer(PsNet *net, int layer, float loss_scale)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  Slot *s = net->cur;
  g_return_if_fail(s->batch > 0);
  const NetLayer *nl = &net->layers[layer];
  const PsLayerOps *ops = ps_layer_ops(nl->kind);
  if (!ops->backward)
    return; /* a view: its readers wrote the gradient of its input already */
  SlotLayer *sl = &s->layers[layer];
  NetStep st = {.net = net, .s = s, .nl = nl, .sl = sl,
                .x = ps_net_slot_output(s, nl->input_from), .batch = s->batch,
                .n = (size_t)s->batch * nl->out_elems, .w = net->params + nl->w_off,
                .dx = grad_target(net, nl->input_from, nl->in_first), .dy = sl->dout,
                .dw = net->grads + nl->w_off, .db = nl->b_len ? net->grads + nl->b_off : NULL,
                .loss_scale = loss_scale};
  if (ops->backward(&st))
    grad_done(net, nl->input_from, nl->in_first, (size_t)s->batch * nl->in_elems);
}

void ps_net_forward(PsNet *net)
{
  g_return_if_fail(net != NULL);
  for (int i = 0; i < net->n_layers; i++)
    ps_net_forward_layer(net, i);
}

void ps_net_backward(PsNet *net, float loss_scale)
{
  g_return_if_fail(net != NULL);
  for (int i = net->n_layers - 1; i >= 0; i--)
    ps_net_backward_layer(net, i, loss_scale);
}

void ps_net_zero_grads(PsNet *net)
{
  g_return_if_fail(net != NULL);
  memset(net->grads, 0, net->n_params * sizeof *net->grads);
}

double ps_net_loss(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0.0);
  /* the mean over every scored row (rank 1: rows = batch, as it was) */
  int rows = net->cur->batch * net->labels_per;
  return rows > 0 ? net->cur->loss_sum / rows : 0.0;
}

int ps_net_labels_per_example(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->labels_per;
}

int ps_net_correct(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->cur->correct;
}

const float *ps_net_layer_output(const PsNet *net, int layer, size_t *n)
{
  g_return_val_if_fail(net != NULL && layer >= 0 && layer < net->n_layers, NULL);
  if (n)
    *n = (size_t)net->cur->batch * net->layers[layer].out_elems;
  return net->cur->layers[layer].out;
}

size_t ps_net_n_params(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->n_params;
}

float *ps_net_params(PsNet *net)
{
  g_return_val_if_fail(net != NULL, NULL);
  return net->params;
}

float *ps_net_grads(PsNet *net)
{
  g_return_val_if_fail(net != NULL, NULL);
  return net->grads;
}

void ps_net_layer_params(const PsNet *net, int layer, size_t *offset, size_t *len)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  const NetLayer *nl = &net->layers[layer];
  if (offset)
    *offset = nl->w_off;
  if (len)
    *len = nl->w_len + nl->b_len;
}

double ps_net_evaluate(PsNet *net, const float *x, const int32_t *labels, size_t n,
                       double *mean_loss)
{
  g_return_val_if_fail(net != NULL, 0.0);
  if (mean_loss)
    *mean_loss = 0.0;
  if (n == 0)
    return 0.0;
  g_return_val_if_fail(x != NULL && labels != NULL, 0.0);
  size_t right = 0, per = (size_t)net->labels_per;
  double loss = 0.0;
  net->bn_local = TRUE;
  for (size_t start = 0; start < n; start += (size_t)net->max_batch) {
    int batch = (int)MIN((size_t)net->max_batch, n - start);
    ps_net_set_input(net, x + start * net->in_elems, labels + start * per, batch);
    ps_net_forward(net);
    right += (size_t)net->cur->correct;
    loss += net->cur->loss_sum;
  }
  net->bn_local = FALSE;
  if (mean_loss)
    *mean_loss = loss / ((double)n * (double)per);
  return (double)right / ((double)n * (double)per);
}

double ps_net_accuracy(PsNet *net, const float *x, const int32_t *labels, size_t n)
{
  return ps_net_evaluate(net, x, labels, n, NULL);
}

/* ---- batch normalization across replicas -------------------------------- */

void ps_net_set_batchnorm_group(PsNet *net, int layer, int group)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers && group >= 1);
  g_return_if_fail(net->layers[layer].kind == PS_LAYER_BATCHNORM);
  net->layers[layer].bn_group = group;
}

float *ps_net_batchnorm_moments(PsNet *net, int layer, gboolean backward, size_t *n)
{
  g_return_val_if_fail(net != NULL && layer >= 0 && layer < net->n_layers, NULL);
  const NetLayer *nl = &net->layers[layer];
  g_return_val_if_fail(nl->kind == PS_LAYER_BATCHNORM && nl->bn_group >= 1, NULL);
  Slot *s = net->cur;
  SlotLayer *sl = &s->layers[layer];
  int rows = s->batch * nl->groups, C = nl->in_dim;
  float *moments = sl->cache + 2 * (size_t)C;
  const float *x = ps_net_slot_output(s, nl->input_from);
  if (backward)
    ps_batchnorm_grad_moments(x, sl->cache, sl->dout, rows, C, nl->bn_group,
                              net->grads + nl->w_off, net->grads + nl->b_off, moments);
  else
    ps_batchnorm_moments(x, rows, C, nl->bn_group, moments);
  if (n)
    *n = 2 * (size_t)C;
  return moments;
}

/* ---- optimizers -------------------------------------------------------- */

PsOptSegment *ps_net_opt_segments(const PsNet *net, int *n)
{
  g_return_val_if_fail(net != NULL && n != NULL, NULL);
  GArray *a = g_array_new(FALSE, FALSE, sizeof(PsOptSegment));
  for (int i = 0; i < net->n_layers; i++) {
    const NetLayer *nl = &net->layers[i];
    /* the MLPerf ResNet reference leaves batch normalization's parameters
     * and biases out of LARS's adaptation and weight decay, BERT's LAMB
     * the layer norms' and biases (exclude_from_layer_adaptation) */
    gboolean norm = nl->kind == PS_LAYER_BATCHNORM || nl->kind == PS_LAYER_LAYERNORM ||
                    nl->kind == PS_LAYER_RMSNORM;
    PsOptSegment w = {nl->w_off, nl->w_len, !norm}, b = {nl->b_off, nl->b_len, FALSE};
    if (w.len > 0)
      g_array_append_val(a, w);
    if (b.len > 0)
      g_array_append_val(a, b);
  }
  *n = (int)a->len;
  return (PsOptSegment *)g_array_free(a, FALSE);
}

typedef enum { OPT_SGD, OPT_ADAM, OPT_LARS, OPT_LAMB } OptKind;

struct PsOptimizer {
  OptKind kind;
  size_t n;
  float lr, momentum, beta1, beta2, eps, eta, wd;
  int64_t t;            /* Adam steps taken */
  float *slot1, *slot2; /* SGD, LARS: velocity; Adam, LAMB: m and v */
  gboolean state_bf16;  /* weights and slots rounded to bf16 after a step */
  PsOptSegment *segs;   /* LARS, LAMB: the layers, in order */
  int n_segs;
};

static PsOptimizer *optimizer_new(OptKind kind, size_t n, float lr, int slots)
{
  PsOptimizer *opt = g_new0(PsOptimizer, 1);
  opt->kind = kind;
  opt->n = n;
  opt->lr = lr;
  opt->slot1 = g_new0(float, MAX(n, 1));
  if (slots > 1)
    opt->slot2 = g_new0(float, MAX(n, 1));
  return opt;
}

PsOptimizer *ps_optimizer_new_sgd(size_t n, float lr, float momentum)
{
  PsOptimizer *opt = optimizer_new(OPT_SGD, n, lr, 1);
  opt->momentum = momentum;
  return opt;
}

PsOptimizer *ps_optimizer_new_adam(size_t n, float lr, float beta1, float beta2, float eps)
{
  PsOptimizer *opt = optimizer_new(OPT_ADAM, n, lr, 2);
  opt->beta1 = beta1;
  opt->beta2 = beta2;
  opt->eps = eps;
  return opt;
}

static gboolean segments_tile(const PsOptSegment *segs, int n_segs, size_t n)
{
  size_t end = 0;
  for (int i = 0; i < n_segs; i++) {
    if (segs[i].off != end)
      return FALSE;
    end += segs[i].len;
  }
  return end == n;
}

PsOptimizer *ps_optimizer_new_layerwise(const PsLayerwiseConfig *c, size_t n,
                                        const PsOptSegment *segs, int n_segs)
{
  g_return_val_if_fail(c != NULL && n_segs >= 0 && segments_tile(segs, n_segs, n), NULL);
  PsOptimizer *opt = optimizer_new(c->lamb ? OPT_LAMB : OPT_LARS, n, c->lr, c->lamb ? 2 : 1);
  opt->momentum = c->momentum;
  opt->beta1 = c->beta1;
  opt->beta2 = c->beta2;
  opt->eps = c->eps;
  opt->eta = c->eta;
  opt->wd = c->weight_decay;
  opt->segs = g_memdup2(segs, sizeof *segs * (size_t)MAX(n_segs, 1));
  opt->n_segs = n_segs;
  return opt;
}

/* Rounds the range's weights and slots to bf16 where the state is kept
 * in bf16. */
static void state_round(PsOptimizer *opt, float *params, size_t off, size_t len)
{
  if (!opt->state_bf16)
    return;
  ps_bf16_round_array(params + off, params + off, len);
  if (opt->slot1)
    ps_bf16_round_array(opt->slot1 + off, opt->slot1 + off, len);
  if (opt->slot2)
    ps_bf16_round_array(opt->slot2 + off, opt->slot2 + off, len);
}

/* LARS or LAMB over [off, off + len): each layer's piece in it. */
static void layerwise_step(PsOptimizer *opt, float *params, const float *grads, size_t off,
                           size_t len, int64_t t)
{
  for (int i = 0; i < opt->n_segs; i++) {
    const PsOptSegment *sg = &opt->segs[i];
    size_t a = MAX(sg->off, off), b = MIN(sg->off + sg->len, off + len);
    if (a >= b)
      continue;
    if (opt->kind == OPT_LARS)
      ps_lars_update(params + a, grads + a, opt->slot1 + a, b - a, opt->lr, opt->momentum,
                     opt->eta, opt->wd, sg->adapt);
    else
      ps_lamb_update(params + a, grads + a, opt->slot1 + a, opt->slot2 + a, b - a, opt->lr,
                     opt->beta1, opt->beta2, opt->eps, opt->wd, sg->adapt, t);
  }
}

void ps_optimizer_step_range(PsOptimizer *opt, float *params, const float *grads, size_t off,
                             size_t len, int64_t t)
{
  g_return_if_fail(opt != NULL && off + len <= opt->n && t >= 1);
  if (len == 0)
    return;
  switch (opt->kind) {
  case OPT_SGD:
    ps_sgd_momentum_update(params + off, grads + off, opt->slot1 + off, len, opt->lr,
                           opt->momentum);
    break;
  case OPT_ADAM:
    ps_adam_update(params + off, grads + off, opt->slot1 + off, opt->slot2 + off, len, opt->lr,
                   opt->beta1, opt->beta2, opt->eps, t);
    break;
  case OPT_LARS:
  case OPT_LAMB:
    layerwise_step(opt, params, grads, off, len, t);
    break;
  }
  state_round(opt, params, off, len);
}

/* The segments of [roff, roff + rlen), which must be whole ones: calls
 * fn for each one's piece in [off, off + len) with the index of its norms
 * among the range's adapted segments (-1 for one not adapted); returns
 * their count, or -1 if the range cuts a segment. */
typedef void (*PieceFn)(PsOptimizer *opt, const PsOptSegment *sg, size_t a, size_t b, int j,
                        void *data);
static int range_pieces(PsOptimizer *opt, size_t roff, size_t rlen, size_t off, size_t len,
                        PieceFn fn, void *data)
{
  int j = 0;
  for (int i = 0; i < opt->n_segs; i++) {
    const PsOptSegment *sg = &opt->segs[i];
    if (sg->off + sg->len <= roff || sg->off >= roff + rlen)
      continue;
    if (sg->off < roff || sg->off + sg->len > roff + rlen)
      return -1;
    size_t a = MAX(sg->off, off), b = MIN(sg->off + sg->len, off + len);
    if (a < b)
      fn(opt, sg, a, b, sg->adapt ? j : -1, data);
    j += sg->adapt;
  }
  return j;
}

typedef struct {
  const float *params, *grads;
  float *params_w; /* pass two */
  float *sums;
  PsLambStep lamb[2]; /* not adapted, adapted */
} PieceArgs;

static void piece_sums(PsOptimizer *opt, const PsOptSegment *sg, size_t a, size_t b, int j,
                       void *data)
{
  PieceArgs *p = data;
  double other = 0;
  if (opt->kind == OPT_LAMB)
    other = ps_lamb_moments(&p->lamb[sg->adapt], p->params + a, p->grads + a, opt->slot1 + a,
                            opt->slot2 + a, b - a);
  else if (j >= 0)
    other = ps_sum_squares(p->grads + a, b - a);
  if (j < 0)
    return;
  p->sums[2 * j] += (float)ps_sum_squares(p->params + a, b - a);
  p->sums[2 * j + 1] += (float)other;
}

static void piece_apply(PsOptimizer *opt, const PsOptSegment *sg, size_t a, size_t b, int j,
                        void *data)
{
  PieceArgs *p = data;
  double wn = j >= 0 ? sqrt(p->sums[2 * j]) : 0, on = j >= 0 ? sqrt(p->sums[2 * j + 1]) : 0;
  if (opt->kind == OPT_LAMB)
    ps_lamb_apply(&p->lamb[sg->adapt], p->params_w + a, opt->slot1 + a, opt->slot2 + a, b - a,
                  opt->lr, sg->adapt, wn, on);
  else if (sg->adapt)
    ps_lars_apply(p->params_w + a, p->grads + a, opt->slot1 + a, b - a, opt->lr, opt->momentum,
                  opt->eta, opt->wd, wn, on);
  else
    ps_sgd_momentum_update(p->params_w + a, p->grads + a, opt->slot1 + a, b - a, opt->lr,
                           opt->momentum);
}

static PieceArgs piece_args(const PsOptimizer *opt, const float *params, const float *grads,
                            int64_t t, float *sums)
{
  PieceArgs p = {.params = params, .grads = grads, .sums = sums};
  if (opt->kind == OPT_LAMB)
    for (int adapt = 0; adapt < 2; adapt++)
      p.lamb[adapt] = ps_lamb_step(opt->beta1, opt->beta2, opt->eps, opt->wd, adapt, t);
  return p;
}

int ps_optimizer_layer_sums(PsOptimizer *opt, const float *params, const float *grads,
                            size_t roff, size_t rlen, size_t off, size_t len, int64_t t,
                            float *sums)
{
  g_return_val_if_fail(opt != NULL && (opt->kind == OPT_LARS || opt->kind == OPT_LAMB), -1);
  g_return_val_if_fail(off >= roff && off + len <= roff + rlen && roff + rlen <= opt->n, -1);
  g_return_val_if_fail(t >= 1, -1);
  PieceArgs p = piece_args(opt, params, grads, t, sums);
  return range_pieces(opt, roff, rlen, off, len, piece_sums, &p);
}

int ps_optimizer_layer_apply(PsOptimizer *opt, float *params, const float *grads, size_t roff,
                             size_t rlen, size_t off, size_t len, int64_t t, const float *sums)
{
  g_return_val_if_fail(opt != NULL && (opt->kind == OPT_LARS || opt->kind == OPT_LAMB), -1);
  g_return_val_if_fail(off >= roff && off + len <= roff + rlen && roff + rlen <= opt->n, -1);
  g_return_val_if_fail(t >= 1, -1);
  PieceArgs p = piece_args(opt, params, grads, t, (float *)sums);
  p.params_w = params;
  int n = range_pieces(opt, roff, rlen, off, len, piece_apply, &p);
  if (n >= 0)
    state_round(opt, params, off, len);
  return n;
}

int ps_optimizer_layer_count(const PsOptimizer *opt, size_t roff, size_t rlen)
{
  g_return_val_if_fail(opt != NULL, -1);
  int j = 0;
  for (int i = 0; i < opt->n_segs; i++) {
    const PsOptSegment *sg = &opt->segs[i];
    if (sg->off >= roff && sg->off + sg->len <= roff + rlen)
      j += sg->adapt;
  }
  return j;
}

void ps_optimizer_set_state_bf16(PsOptimizer *opt, gboolean bf16)
{
  g_return_if_fail(opt != NULL);
  opt->state_bf16 = bf16;
}

void ps_optimizer_step(PsOptimizer *opt, float *params, const float *grads)
{
  g_return_if_fail(opt != NULL && (opt->n == 0 || (params != NULL && grads != NULL)));
  opt->t++;
  ps_optimizer_step_range(opt, params, grads, 0, opt->n, opt->t);
}

void ps_optimizer_set_lr(PsOptimizer *opt, float lr)
{
  g_return_if_fail(opt != NULL && lr >= 0);
  opt->lr = lr;
}

void ps_optimizer_free(PsOptimizer *opt)
{
  if (!opt)
    return;
  g_free(opt->slot1);
  g_free(opt->slot2);
  g_free(opt->segs);
  g_free(opt);
}

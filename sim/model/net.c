/* net.c: real numerics of a sequential model on one device: parameters,
 * gradients, activations and their gradients, stepped one layer at a time.
 *
 * Invariant: every buffer is allocated once in ps_net_new for max_batch
 * examples, so stepping a layer never allocates (bf16 GEMM copies aside);
 * parameters and gradients are each one contiguous vector in layer order,
 * weights before bias; a FLATTEN layer's output and output gradient are the
 * very buffers of the layer before it. */
#include "net.h"

#include "kernels.h"

#include <math.h>
#include <string.h>

typedef struct {
  PsLayerKind kind;
  size_t in_elems, out_elems;   /* per example */
  /* DENSE: y (rows x units) = x (rows x in_dim) W, rows = batch * groups */
  int in_dim, units, groups;
  PsConvShape conv;             /* batch filled in per call */
  PsPoolShape pool;             /* also GLOBAL_AVGPOOL's h, w, c */
  size_t w_off, w_len, b_off, b_len;
  float *out;                   /* max_batch * out_elems, or the previous one's */
  float *dout;                  /* gradient of out; NULL when nothing needs it */
  int32_t *argmax;              /* MAXPOOL */
  gboolean owns_out, owns_dout;
} NetLayer;

struct PsNet {
  int n_layers;
  NetLayer *layers;
  int max_batch;
  int batch;                    /* examples of the current input */
  PsPrecision prec;
  size_t in_elems;              /* per example */
  float *input;
  int32_t *labels;
  int classes;
  size_t n_params;
  float *params, *grads;
  float *workspace;             /* im2col, sized for the largest conv */
  double loss_sum;
  int correct;
};

/* ---- construction ------------------------------------------------------ */

static gboolean kind_has_kernel(PsLayerKind kind)
{
  switch (kind) {
  case PS_LAYER_DENSE:
  case PS_LAYER_RELU:
  case PS_LAYER_GELU:
  case PS_LAYER_TANH:
  case PS_LAYER_SOFTMAX_XENT:
  case PS_LAYER_CONV2D:
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL:
  case PS_LAYER_GLOBAL_AVGPOOL:
  case PS_LAYER_FLATTEN:
    return TRUE;
  default:
    return FALSE;
  }
}

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

static char *shape_str(int rank, const int64_t *shape)
{
  GString *s = g_string_new("(");
  for (int d = 0; d < rank; d++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, d ? ", " : "", shape[d]);
  g_string_append_c(s, ')');
  return g_string_free(s, FALSE);
}

/* Works out layer i's output shape from `rank`/`shape` (its input) and its
 * hyper-parameters, fills the kernel shapes in `nl`, and checks the result
 * against what the model says. */
static gboolean plan_layer(const PsModel *model, int i, int rank, const int64_t *shape,
                           NetLayer *nl, int *out_rank, int64_t *out_shape, int64_t *params,
                           GError **error)
{
  const PsLayer *l = &model->layers[i];
  const char *where = model_where(model);
  const char *lname = l->name ? l->name : "?";
  const char *kname = ps_layer_kind_name(l->kind);
  int64_t elems = ps_shape_elems(shape, rank);

  if (l->input_from != i - 1) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": its input is not the previous layer's output (numerics "
                "support sequential models only)", where, lname);
    return FALSE;
  }
  if (!shapes_equal(l->in_rank, l->in_shape, rank, shape)) {
    g_autofree char *got = shape_str(l->in_rank, l->in_shape);
    g_autofree char *want = shape_str(rank, shape);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input shape %s differs from the output %s feeding it",
                where, lname, got, want);
    return FALSE;
  }
  if ((l->kind == PS_LAYER_CONV2D || l->kind == PS_LAYER_MAXPOOL ||
       l->kind == PS_LAYER_AVGPOOL || l->kind == PS_LAYER_GLOBAL_AVGPOOL) && rank != 3) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs an (H, W, C) input, got rank %d", where, lname,
                kname, rank);
    return FALSE;
  }
  if (elems <= 0 || elems > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input of %" G_GINT64_FORMAT " elements per example is "
                "out of range for numerics", where, lname, elems);
    return FALSE;
  }

  *out_rank = rank;
  memcpy(out_shape, shape, sizeof(int64_t) * PS_MAX_RANK);
  *params = 0;
  nl->in_elems = (size_t)elems;

  switch (l->kind) {
  case PS_LAYER_DENSE:
    if (rank < 1 || l->units <= 0 || l->units > G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": dense needs units > 0 and an input of rank >= 1",
                  where, lname);
      return FALSE;
    }
    nl->in_dim = (int)shape[rank - 1];
    nl->units = (int)l->units;
    nl->groups = (int)(elems / nl->in_dim);
    out_shape[rank - 1] = l->units;
    nl->w_len = (size_t)nl->in_dim * nl->units;
    nl->b_len = l->bias ? (size_t)nl->units : 0;
    break;
  case PS_LAYER_CONV2D: {
    int stride = l->stride > 0 ? (int)l->stride : 1;
    if (l->kernel <= 0 || l->filters <= 0 || l->kernel > 1024 || l->filters > G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": conv2d needs kernel > 0 and filters > 0", where, lname);
      return FALSE;
    }
    PsConvShape *c = &nl->conv;
    *c = (PsConvShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1],
                       .cin = (int)shape[2], .kernel = (int)l->kernel, .stride = stride,
                       .same_padding = l->same_padding, .cout = (int)l->filters};
    ps_conv2d_shape(c);
    if (c->out_h <= 0 || c->out_w <= 0) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": kernel %d is larger than the %dx%d input", where, lname,
                  c->kernel, c->h, c->w);
      return FALSE;
    }
    out_shape[0] = c->out_h;
    out_shape[1] = c->out_w;
    out_shape[2] = c->cout;
    nl->w_len = (size_t)c->kernel * c->kernel * c->cin * c->cout;
    nl->b_len = l->bias ? (size_t)c->cout : 0;
    break;
  }
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL: {
    if (l->pool <= 0 || l->pool > 1024) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": %s needs pool > 0", where, lname, kname);
      return FALSE;
    }
    PsPoolShape *p = &nl->pool;
    *p = (PsPoolShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1], .c = (int)shape[2],
                       .size = (int)l->pool,
                       .stride = l->stride > 0 ? (int)l->stride : (int)l->pool};
    ps_pool_shape(p);
    if (l->same_padding) {
      /* "same" pooling equals "valid" exactly when it adds no padding:
       * ceil(in / stride) windows that already fit. */
      int need_h = (int)((shape[0] + p->stride - 1) / p->stride);
      int need_w = (int)((shape[1] + p->stride - 1) / p->stride);
      if (need_h != p->out_h || need_w != p->out_w) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "%s: layer \"%s\": %s with \"same\" padding over a %dx%d input "
                    "would pad, and the pooling kernels have valid windows only",
                    where, lname, kname, p->h, p->w);
        return FALSE;
      }
    }
    if (p->out_h <= 0 || p->out_w <= 0) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": pool %d is larger than the %dx%d input", where, lname,
                  p->size, p->h, p->w);
      return FALSE;
    }
    out_shape[0] = p->out_h;
    out_shape[1] = p->out_w;
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL:
    nl->pool = (PsPoolShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1],
                             .c = (int)shape[2]};
    *out_rank = 1;
    out_shape[0] = shape[2];
    out_shape[1] = out_shape[2] = 0;
    break;
  case PS_LAYER_FLATTEN:
    *out_rank = 1;
    out_shape[0] = elems;
    out_shape[1] = out_shape[2] = 0;
    break;
  case PS_LAYER_SOFTMAX_XENT:
    if (i != model->n_layers - 1 || rank != 1) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": softmax_xent must be the last layer, over a vector of "
                  "logits", where, lname);
      return FALSE;
    }
    if (model->classes > 0 && model->classes != shape[0]) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": %" G_GINT64_FORMAT " logits for %" G_GINT64_FORMAT
                  " classes", where, lname, shape[0], model->classes);
      return FALSE;
    }
    break;
  default: /* RELU, GELU, TANH: same shape */
    break;
  }

  *params = (int64_t)(nl->w_len + nl->b_len);
  if (l->kind != PS_LAYER_SOFTMAX_XENT &&
      !shapes_equal(l->out_rank, l->out_shape, *out_rank, out_shape)) {
    g_autofree char *got = shape_str(l->out_rank, l->out_shape);
    g_autofree char *want = shape_str(*out_rank, out_shape);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": output shape %s, but the %s kernel produces %s", where,
                lname, got, kname, want);
    return FALSE;
  }
  if (l->params != *params) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %" G_GINT64_FORMAT " parameters, but the %s kernel has %"
                G_GINT64_FORMAT, where, lname, l->params, kname, *params);
    return FALSE;
  }
  nl->out_elems = (size_t)ps_shape_elems(out_shape, *out_rank);
  return TRUE;
}

/* Uniform weights: He (limit sqrt(6 / fan_in)) when a ReLU follows, Glorot
 * (limit sqrt(6 / (fan_in + fan_out))) otherwise, as Keras's he_uniform and
 * glorot_uniform initializers define them; biases stay zero. */
static void init_weights(PsNet *net, const PsModel *model, GRand *rng)
{
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    double fan_in, fan_out;
    if (nl->kind == PS_LAYER_DENSE) {
      fan_in = nl->in_dim;
      fan_out = nl->units;
    } else if (nl->kind == PS_LAYER_CONV2D) {
      double area = (double)nl->conv.kernel * nl->conv.kernel;
      fan_in = area * nl->conv.cin;
      fan_out = area * nl->conv.cout;
    } else {
      continue;
    }
    gboolean relu_next = i + 1 < net->n_layers && net->layers[i + 1].kind == PS_LAYER_RELU;
    double limit = relu_next ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    float *w = net->params + nl->w_off;
    for (size_t j = 0; j < nl->w_len; j++)
      w[j] = (float)g_rand_double_range(rng, -limit, limit);
  }
}

PsNet *ps_net_new(const PsModel *model, int max_batch, PsPrecision prec, uint64_t seed,
                  GError **error)
{
  g_return_val_if_fail(model != NULL, NULL);
  g_return_val_if_fail(max_batch > 0, NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);

  const char *where = model_where(model);
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *l = &model->layers[i];
    if (!kind_has_kernel(l->kind)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": kind \"%s\" has no numeric kernel (numerics support "
                  "dense, relu, gelu, tanh, conv2d, maxpool, avgpool, global_avgpool, "
                  "flatten, softmax_xent)", where, l->name ? l->name : "?",
                  ps_layer_kind_name(l->kind));
      return NULL;
    }
  }
  if (model->n_layers == 0 ||
      model->layers[model->n_layers - 1].kind != PS_LAYER_SOFTMAX_XENT) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layers: numerics need a model ending in a softmax_xent layer", where);
    return NULL;
  }
  if (model->token_input) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: input: numerics need a float input, not token ids", where);
    return NULL;
  }

  PsNet *net = g_new0(PsNet, 1);
  net->n_layers = model->n_layers;
  net->layers = g_new0(NetLayer, model->n_layers);
  net->max_batch = max_batch;
  net->prec = prec;

  /* Shapes, parameter offsets and the largest workspace. */
  int rank = model->in_rank;
  int64_t shape[PS_MAX_RANK] = {0};
  memcpy(shape, model->in_shape, sizeof(int64_t) * (size_t)CLAMP(rank, 0, PS_MAX_RANK));
  int64_t in_elems = ps_shape_elems(shape, rank);
  if (rank < 1 || rank > PS_MAX_RANK || in_elems <= 0 || in_elems > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: input: shape of rank %d with %" G_GINT64_FORMAT " elements is out of "
                "range for numerics", where, rank, in_elems);
    goto fail_net;
  }
  net->in_elems = (size_t)in_elems;
  size_t offset = 0, ws = 0;
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    nl->kind = model->layers[i].kind;
    int out_rank;
    int64_t out_shape[PS_MAX_RANK], params;
    if (!plan_layer(model, i, rank, shape, nl, &out_rank, out_shape, &params, error))
      goto fail_net;
    if ((double)nl->out_elems * max_batch > (double)G_MAXINT32 ||
        (double)nl->in_elems * max_batch > (double)G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": activations of %d examples are too large for numerics",
                  where, model->layers[i].name ? model->layers[i].name : "?", max_batch);
      goto fail_net;
    }
    nl->w_off = offset;
    nl->b_off = offset + nl->w_len;
    offset += nl->w_len + nl->b_len;
    if (nl->kind == PS_LAYER_CONV2D) {
      PsConvShape c = nl->conv;
      c.batch = max_batch;
      ws = MAX(ws, ps_conv2d_workspace(&c));
    }
    rank = out_rank;
    memcpy(shape, out_shape, sizeof shape);
  }
  net->classes = (int)net->layers[net->n_layers - 1].in_elems;
  net->n_params = offset;

  /* Buffers.  A layer's output gradient is needed only when some layer at
   * or before it has parameters. */
  net->params = g_new0(float, MAX(net->n_params, 1));
  net->grads = g_new0(float, MAX(net->n_params, 1));
  net->input = g_new0(float, net->in_elems * max_batch);
  net->labels = g_new0(int32_t, max_batch);
  net->workspace = ws ? g_new(float, ws) : NULL;
  gboolean params_so_far = FALSE;
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    params_so_far = params_so_far || nl->w_len + nl->b_len > 0;
    if (nl->kind == PS_LAYER_FLATTEN) {
      nl->out = i ? net->layers[i - 1].out : net->input;
      nl->dout = i ? net->layers[i - 1].dout : NULL;
    } else {
      nl->out = g_new0(float, nl->out_elems * max_batch);
      nl->owns_out = TRUE;
      if (params_so_far && nl->kind != PS_LAYER_SOFTMAX_XENT) {
        nl->dout = g_new0(float, nl->out_elems * max_batch);
        nl->owns_dout = TRUE;
      }
    }
    if (nl->kind == PS_LAYER_MAXPOOL)
      nl->argmax = g_new0(int32_t, nl->out_elems * max_batch);
  }

  uint32_t seed_words[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  GRand *rng = g_rand_new_with_seed_array(seed_words, 2);
  init_weights(net, model, rng);
  g_rand_free(rng);
  return net;

fail_net:
  ps_net_free(net);
  return NULL;
}

void ps_net_free(PsNet *net)
{
  if (!net)
    return;
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    if (nl->owns_out)
      g_free(nl->out);
    if (nl->owns_dout)
      g_free(nl->dout);
    g_free(nl->argmax);
  }
  g_free(net->layers);
  g_free(net->params);
  g_free(net->grads);
  g_free(net->input);
  g_free(net->labels);
  g_free(net->workspace);
  g_free(net);
}

/* ---- stepping ---------------------------------------------------------- */

void ps_net_set_input(PsNet *net, const float *x, const int32_t *labels, int batch)
{
  g_return_if_fail(net != NULL && x != NULL && labels != NULL);
  g_return_if_fail(batch > 0 && batch <= net->max_batch);
  for (int r = 0; r < batch; r++)
    g_return_if_fail(labels[r] >= 0 && labels[r] < net->classes);
  memcpy(net->input, x, (size_t)batch * net->in_elems * sizeof *x);
  memcpy(net->labels, labels, (size_t)batch * sizeof *labels);
  net->batch = batch;
}

static const float *layer_input(const PsNet *net, int i)
{
  return i ? net->layers[i - 1].out : net->input;
}

static void global_avgpool_forward(const PsPoolShape *p, const float *x, float *y)
{
  const size_t hw = (size_t)p->h * p->w;
  const float inv = 1.0f / (float)hw;
  for (int b = 0; b < p->batch; b++) {
    float *out = y + (size_t)b * p->c;
    const float *img = x + (size_t)b * hw * p->c;
    memset(out, 0, (size_t)p->c * sizeof *out);
    for (size_t q = 0; q < hw; q++)
      for (int ch = 0; ch < p->c; ch++)
        out[ch] += img[q * p->c + ch];
    for (int ch = 0; ch < p->c; ch++)
      out[ch] *= inv;
  }
}

static void global_avgpool_backward(const PsPoolShape *p, const float *dy, float *dx)
{
  const size_t hw = (size_t)p->h * p->w;
  const float inv = 1.0f / (float)hw;
  for (int b = 0; b < p->batch; b++) {
    const float *g = dy + (size_t)b * p->c;
    float *img = dx + (size_t)b * hw * p->c;
    for (size_t q = 0; q < hw; q++)
      for (int ch = 0; ch < p->c; ch++)
        img[q * p->c + ch] = g[ch] * inv;
  }
}

void ps_net_forward_layer(PsNet *net, int layer)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  g_return_if_fail(net->batch > 0);
  NetLayer *nl = &net->layers[layer];
  const float *x = layer_input(net, layer);
  const int batch = net->batch;
  const size_t n = (size_t)batch * nl->out_elems;
  const float *w = net->params + nl->w_off;
  const float *b = nl->b_len ? net->params + nl->b_off : NULL;

  switch (nl->kind) {
  case PS_LAYER_DENSE:
    ps_dense_forward(net->prec, x, w, b, nl->out, batch * nl->groups, nl->in_dim, nl->units);
    break;
  case PS_LAYER_RELU:
    ps_relu_forward(x, nl->out, n);
    break;
  case PS_LAYER_GELU:
    ps_gelu_forward(x, nl->out, n);
    break;
  case PS_LAYER_TANH:
    ps_tanh_forward(x, nl->out, n);
    break;
  case PS_LAYER_CONV2D: {
    PsConvShape c = nl->conv;
    c.batch = batch;
    ps_conv2d_forward(net->prec, &c, x, w, b, nl->out, net->workspace);
    break;
  }
  case PS_LAYER_MAXPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    ps_maxpool_forward(&p, x, nl->out, nl->argmax);
    break;
  }
  case PS_LAYER_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    ps_avgpool_forward(&p, x, nl->out);
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    global_avgpool_forward(&p, x, nl->out);
    break;
  }
  case PS_LAYER_FLATTEN:
    break; /* out is the input buffer itself */
  case PS_LAYER_SOFTMAX_XENT:
    net->loss_sum = ps_softmax_xent_forward(x, net->labels, nl->out, batch, net->classes,
                                            &net->correct);
    break;
  default:
    g_assert_not_reached();
  }
}

void ps_net_backward_layer(PsNet *net, int layer, float loss_scale)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  g_return_if_fail(net->batch > 0);
  NetLayer *nl = &net->layers[layer];
  const float *x = layer_input(net, layer);
  float *dx = layer ? net->layers[layer - 1].dout : NULL;
  const float *dy = nl->dout;
  const int batch = net->batch;
  const size_t n = (size_t)batch * nl->out_elems;
  const float *w = net->params + nl->w_off;
  float *dw = net->grads + nl->w_off;
  float *db = nl->b_len ? net->grads + nl->b_off : NULL;

  switch (nl->kind) {
  case PS_LAYER_DENSE:
    ps_dense_backward(net->prec, x, w, dy, dx, dw, db, batch * nl->groups, nl->in_dim,
                      nl->units);
    break;
  case PS_LAYER_RELU:
    if (dx)
      ps_relu_backward(x, dy, dx, n);
    break;
  case PS_LAYER_GELU:
    if (dx)
      ps_gelu_backward(x, dy, dx, n);
    break;
  case PS_LAYER_TANH:
    if (dx)
      ps_tanh_backward(nl->out, dy, dx, n);
    break;
  case PS_LAYER_CONV2D: {
    PsConvShape c = nl->conv;
    c.batch = batch;
    ps_conv2d_backward(net->prec, &c, x, w, dy, dx, dw, db, net->workspace);
    break;
  }
  case PS_LAYER_MAXPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    if (dx)
      ps_maxpool_backward(&p, nl->argmax, dy, dx);
    break;
  }
  case PS_LAYER_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    if (dx)
      ps_avgpool_backward(&p, dy, dx);
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    if (dx)
      global_avgpool_backward(&p, dy, dx);
    break;
  }
  case PS_LAYER_FLATTEN:
    break; /* dx is dy itself */
  case PS_LAYER_SOFTMAX_XENT:
    if (dx)
      ps_softmax_xent_backward(nl->out, net->labels, dx, batch, net->classes,
                               loss_scale / (float)batch);
    break;
  default:
    g_assert_not_reached();
  }
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
  return net->batch > 0 ? net->loss_sum / net->batch : 0.0;
}

int ps_net_correct(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->correct;
}

const float *ps_net_layer_output(const PsNet *net, int layer, size_t *n)
{
  g_return_val_if_fail(net != NULL && layer >= 0 && layer < net->n_layers, NULL);
  const NetLayer *l = &net->layers[layer];
  if (n)
    *n = (size_t)net->batch * l->out_elems;
  return l->out;
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

/* Overwrites the current input, activations, loss and correct count. */
double ps_net_accuracy(PsNet *net, const float *x, const int32_t *labels, size_t n)
{
  g_return_val_if_fail(net != NULL, 0.0);
  if (n == 0)
    return 0.0;
  g_return_val_if_fail(x != NULL && labels != NULL, 0.0);
  size_t right = 0;
  for (size_t start = 0; start < n; start += (size_t)net->max_batch) {
    int batch = (int)MIN((size_t)net->max_batch, n - start);
    ps_net_set_input(net, x + start * net->in_elems, labels + start, batch);
    ps_net_forward(net);
    right += (size_t)net->correct;
  }
  return (double)right / (double)n;
}

/* ---- optimizers -------------------------------------------------------- */

typedef enum { OPT_SGD, OPT_ADAM } OptKind;

struct PsOptimizer {
  OptKind kind;
  size_t n;
  float lr, momentum, beta1, beta2, eps;
  int64_t t;            /* Adam steps taken */
  float *slot1, *slot2; /* SGD: velocity; Adam: m and v */
};

PsOptimizer *ps_optimizer_new_sgd(size_t n, float lr, float momentum)
{
  PsOptimizer *opt = g_new0(PsOptimizer, 1);
  opt->kind = OPT_SGD;
  opt->n = n;
  opt->lr = lr;
  opt->momentum = momentum;
  opt->slot1 = g_new0(float, MAX(n, 1));
  return opt;
}

PsOptimizer *ps_optimizer_new_adam(size_t n, float lr, float beta1, float beta2, float eps)
{
  PsOptimizer *opt = g_new0(PsOptimizer, 1);
  opt->kind = OPT_ADAM;
  opt->n = n;
  opt->lr = lr;
  opt->beta1 = beta1;
  opt->beta2 = beta2;
  opt->eps = eps;
  opt->slot1 = g_new0(float, MAX(n, 1));
  opt->slot2 = g_new0(float, MAX(n, 1));
  return opt;
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
  }
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
  g_free(opt);
}

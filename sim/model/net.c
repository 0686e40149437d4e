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
#include "net.h"

#include "kernels.h"

#include <math.h>
#include <string.h>

typedef struct {
  PsLayerKind kind;
  int input_from, shortcut_from; /* producers, -1 for the net input */
  int out_rank;
  int64_t out_shape[PS_MAX_RANK];
  size_t in_elems, out_elems;   /* per example */
  /* DENSE: y (rows x units) = x (rows x in_dim) W, rows = batch * groups;
   * LAYERNORM: groups rows of in_dim per example */
  int in_dim, units, groups;
  PsConvShape conv;             /* batch filled in per call */
  PsPoolShape pool;             /* also GLOBAL_AVGPOOL's h, w, c */
  PsAttnShape attn;
  PsPatchShape patch;
  gboolean positions;           /* PATCH_EMBEDDING: pos table after W */
  size_t w_off, w_len, b_off, b_len;
  size_t cache_elems;           /* per example, kept from forward for backward */
  gboolean aliased;             /* FLATTEN of a layer: out and dout are its input's */
  gboolean owns_out, owns_dout; /* a FLATTEN's out is its input's, even the net input */
  /* backward's write into the gradient of input_from / shortcut_from is
   * the first of the pass into that buffer (overwrite) or not (add) */
  gboolean in_first, sc_first;
} NetLayer;

typedef struct {
  float *out;                   /* max_batch * out_elems, or its input's */
  float *dout;                  /* gradient of out; NULL for softmax_xent */
  float *cache;                 /* layernorm statistics, attention's Q K V, ... */
  int32_t *argmax;              /* MAXPOOL */
} SlotLayer;

typedef struct {
  SlotLayer *layers;
  float *input;
  int32_t *labels;
  int batch;                    /* examples of the current input */
  double loss_sum;
  int correct;
} Slot;

struct PsNet {
  int n_layers;
  NetLayer *layers;
  int max_batch;
  PsPrecision prec;
  size_t in_elems;              /* per example */
  int classes;
  size_t n_params;
  float *params, *grads;
  float *workspace;             /* im2col, attention, patches: the largest */
  float *scratch;               /* a gradient to be added into another */
  int n_slots;
  Slot *slots;
  Slot *cur;
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
  case PS_LAYER_LAYERNORM:
  case PS_LAYER_ATTENTION:
  case PS_LAYER_ADD:
  case PS_LAYER_PATCH_EMBEDDING:
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

/* The rank and shape of producer p's output (the model input for -1). */
static void producer_shape(const PsModel *model, const NetLayer *planned, int p, int *rank,
                           const int64_t **shape)
{
  *rank = p < 0 ? model->in_rank : planned[p].out_rank;
  *shape = p < 0 ? model->in_shape : planned[p].out_shape;
}

/* Works out layer i's output shape from its input (the output of the
 * layers before it, already in `planned`) and its hyper-parameters, fills
 * the kernel shapes in planned[i], and checks the result against what the
 * model says. */
static gboolean plan_layer(const PsModel *model, int i, NetLayer *planned, GError **error)
{
  const PsLayer *l = &model->layers[i];
  NetLayer *nl = &planned[i];
  const char *where = model_where(model);
  const char *lname = l->name ? l->name : "?";
  const char *kname = ps_layer_kind_name(l->kind);

  if (l->input_from < -1 || l->input_from >= i ||
      (l->kind == PS_LAYER_ADD && (l->shortcut_from < -1 || l->shortcut_from >= i))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": its input is not the output of an earlier layer", where,
                lname);
    return FALSE;
  }
  nl->input_from = l->input_from;
  nl->shortcut_from = l->kind == PS_LAYER_ADD ? l->shortcut_from : -1;
  int rank;
  const int64_t *shape;
  producer_shape(model, planned, l->input_from, &rank, &shape);
  int64_t elems = ps_shape_elems(shape, rank);

  if (!shapes_equal(l->in_rank, l->in_shape, rank, shape)) {
    g_autofree char *got = shape_str(l->in_rank, l->in_shape);
    g_autofree char *want = shape_str(rank, shape);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input shape %s differs from the output %s feeding it",
                where, lname, got, want);
    return FALSE;
  }
  if ((l->kind == PS_LAYER_CONV2D || l->kind == PS_LAYER_MAXPOOL ||
       l->kind == PS_LAYER_AVGPOOL || l->kind == PS_LAYER_PATCH_EMBEDDING) && rank != 3) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs an (H, W, C) input, got rank %d", where, lname,
                kname, rank);
    return FALSE;
  }
  if ((l->kind == PS_LAYER_ATTENTION && rank != 2) ||
      (l->kind == PS_LAYER_GLOBAL_AVGPOOL && rank != 2 && rank != 3)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs an (S, D)%s input, got rank %d", where, lname,
                kname, l->kind == PS_LAYER_GLOBAL_AVGPOOL ? " or (H, W, C)" : "", rank);
    return FALSE;
  }
  if (elems <= 0 || elems > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": input of %" G_GINT64_FORMAT " elements per example is "
                "out of range for numerics", where, lname, elems);
    return FALSE;
  }

  int *out_rank = &nl->out_rank;
  int64_t *out_shape = nl->out_shape;
  *out_rank = rank;
  memcpy(out_shape, shape, sizeof(int64_t) * PS_MAX_RANK);
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
    /* (S, D) is pooled as an S x 1 image of D channels */
    nl->pool = (PsPoolShape){.batch = 1, .h = (int)shape[0],
                             .w = rank == 3 ? (int)shape[1] : 1, .c = (int)shape[rank - 1]};
    *out_rank = 1;
    out_shape[0] = shape[rank - 1];
    out_shape[1] = out_shape[2] = 0;
    break;
  case PS_LAYER_FLATTEN:
    *out_rank = 1;
    out_shape[0] = elems;
    out_shape[1] = out_shape[2] = 0;
    break;
  case PS_LAYER_LAYERNORM:
    nl->in_dim = (int)shape[rank - 1];
    nl->groups = (int)(elems / nl->in_dim);
    nl->w_len = (size_t)nl->in_dim; /* gamma */
    nl->b_len = (size_t)nl->in_dim; /* beta */
    nl->cache_elems = 2 * (size_t)nl->groups;
    break;
  case PS_LAYER_ATTENTION: {
    int64_t d = shape[1];
    if (l->heads <= 0 || d % l->heads != 0) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": attention needs heads > 0 dividing d_model %" G_GINT64_FORMAT,
                  where, lname, d);
      return FALSE;
    }
    nl->attn = (PsAttnShape){.batch = 1, .seq = (int)shape[0], .dim = (int)d,
                             .heads = (int)l->heads, .causal = l->causal};
    nl->w_len = 4 * (size_t)d * d;
    nl->b_len = l->bias ? 4 * (size_t)d : 0;
    nl->cache_elems = ps_attention_saved(&nl->attn);
    break;
  }
  case PS_LAYER_ADD: {
    int sr;
    const int64_t *ss;
    producer_shape(model, planned, l->shortcut_from, &sr, &ss);
    if (!shapes_equal(sr, ss, rank, shape)) {
      g_autofree char *a = shape_str(rank, shape);
      g_autofree char *b = shape_str(sr, ss);
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": adds a %s input to a %s shortcut", where, lname, a, b);
      return FALSE;
    }
    break;
  }
  case PS_LAYER_PATCH_EMBEDDING: {
    int64_t p = l->kernel;
    if (p <= 0 || shape[0] % p != 0 || shape[1] % p != 0 || l->dim <= 0 ||
        l->dim > G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": patch_embedding needs dim > 0 and a patch size dividing "
                  "the %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " input", where, lname, shape[0],
                  shape[1]);
      return FALSE;
    }
    nl->patch = (PsPatchShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1],
                               .c = (int)shape[2], .patch = (int)p, .dim = (int)l->dim};
    nl->positions = l->positions;
    int seq = ps_patch_seq(&nl->patch);
    *out_rank = 2;
    out_shape[0] = seq;
    out_shape[1] = l->dim;
    out_shape[2] = 0;
    nl->w_len = (size_t)(p * p * shape[2] + (l->positions ? seq : 0)) * (size_t)l->dim;
    nl->b_len = (size_t)l->dim;
    break;
  }
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

  int64_t params = (int64_t)(nl->w_len + nl->b_len);
  if (l->kind != PS_LAYER_SOFTMAX_XENT &&
      !shapes_equal(l->out_rank, l->out_shape, *out_rank, out_shape)) {
    g_autofree char *got = shape_str(l->out_rank, l->out_shape);
    g_autofree char *want = shape_str(*out_rank, out_shape);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": output shape %s, but the %s kernel produces %s", where,
                lname, got, kname, want);
    return FALSE;
  }
  if (l->params != params) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %" G_GINT64_FORMAT " parameters, but the %s kernel has %"
                G_GINT64_FORMAT, where, lname, l->params, kname, params);
    return FALSE;
  }
  nl->out_elems = (size_t)ps_shape_elems(out_shape, *out_rank);
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
    if (nl->kind == PS_LAYER_FLATTEN)
      continue; /* writes nothing: its readers write through it */
    int o = grad_owner(net, nl->input_from);
    if (o >= 0) {
      nl->in_first = !written[o];
      written[o] = TRUE;
    }
    o = grad_owner(net, nl->shortcut_from);
    if (nl->kind == PS_LAYER_ADD && o >= 0) {
      nl->sc_first = !written[o];
      written[o] = TRUE;
    }
  }
}

static void fill_uniform(GRand *rng, float *w, size_t n, double limit)
{
  for (size_t j = 0; j < n; j++)
    w[j] = (float)g_rand_double_range(rng, -limit, limit);
}

/* Uniform weights: He (limit sqrt(6 / fan_in)) when a ReLU follows, Glorot
 * (limit sqrt(6 / (fan_in + fan_out))) otherwise, as Keras's he_uniform and
 * glorot_uniform initializers define them; attention's four D x D
 * projections Glorot each; position embeddings uniform with standard
 * deviation 0.02 (the normal(0.02) of the ViT reference implementation,
 * github.com/google-research/vision_transformer, models_vit.py); layernorm
 * gains one; biases zero. */
static void init_weights(PsNet *net, GRand *rng)
{
  for (int i = 0; i < net->n_layers; i++) {
    NetLayer *nl = &net->layers[i];
    float *w = net->params + nl->w_off;
    double fan_in, fan_out;
    switch (nl->kind) {
    case PS_LAYER_DENSE:
      fan_in = nl->in_dim;
      fan_out = nl->units;
      break;
    case PS_LAYER_CONV2D: {
      double area = (double)nl->conv.kernel * nl->conv.kernel;
      fan_in = area * nl->conv.cin;
      fan_out = area * nl->conv.cout;
      break;
    }
    case PS_LAYER_ATTENTION:
      fill_uniform(rng, w, nl->w_len, sqrt(6.0 / (2.0 * nl->attn.dim)));
      continue;
    case PS_LAYER_PATCH_EMBEDDING: {
      const PsPatchShape *p = &nl->patch;
      size_t k = (size_t)p->patch * p->patch * p->c;
      fill_uniform(rng, w, k * p->dim, sqrt(6.0 / ((double)k + p->dim)));
      fill_uniform(rng, w + k * p->dim, nl->w_len - k * p->dim, 0.02 * sqrt(3.0));
      continue;
    }
    case PS_LAYER_LAYERNORM:
      for (size_t j = 0; j < nl->w_len; j++)
        w[j] = 1.0f;
      continue;
    default:
      continue;
    }
    gboolean relu_next = i + 1 < net->n_layers && net->layers[i + 1].kind == PS_LAYER_RELU;
    double limit = relu_next ? sqrt(6.0 / fan_in) : sqrt(6.0 / (fan_in + fan_out));
    fill_uniform(rng, w, nl->w_len, limit);
  }
}

static void slot_alloc(PsNet *net, Slot *s)
{
  const size_t mb = (size_t)net->max_batch;
  s->input = g_new0(float, net->in_elems * mb);
  s->labels = g_new0(int32_t, mb);
  s->layers = g_new0(SlotLayer, net->n_layers);
  for (int i = 0; i < net->n_layers; i++) {
    const NetLayer *nl = &net->layers[i];
    SlotLayer *sl = &s->layers[i];
    if (nl->kind == PS_LAYER_FLATTEN) {
      int p = nl->input_from;
      sl->out = p >= 0 ? s->layers[p].out : s->input;
      sl->dout = p >= 0 ? s->layers[p].dout : g_new0(float, nl->out_elems * mb);
    } else {
      sl->out = g_new0(float, nl->out_elems * mb);
      if (nl->kind != PS_LAYER_SOFTMAX_XENT)
        sl->dout = g_new0(float, nl->out_elems * mb);
    }
    if (nl->cache_elems)
      sl->cache = g_new0(float, nl->cache_elems * mb);
    if (nl->kind == PS_LAYER_MAXPOOL)
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

PsNet *ps_net_new_slots(const PsModel *model, int max_batch, int slots, PsPrecision prec,
                        uint64_t seed, GError **error)
{
  g_return_val_if_fail(model != NULL, NULL);
  g_return_val_if_fail(max_batch > 0 && slots > 0, NULL);
  g_return_val_if_fail(error == NULL || *error == NULL, NULL);

  const char *where = model_where(model);
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *l = &model->layers[i];
    if (!kind_has_kernel(l->kind)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": kind \"%s\" has no numeric kernel (numerics support "
                  "dense, relu, gelu, tanh, conv2d, maxpool, avgpool, global_avgpool, "
                  "flatten, layernorm, attention, patch_embedding, residual add, "
                  "softmax_xent)", where, l->name ? l->name : "?",
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
  int64_t in_elems = rank >= 1 && rank <= PS_MAX_RANK ? ps_shape_elems(model->in_shape, rank) : 0;
  if (in_elems <= 0 || in_elems > G_MAXINT32) {
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
    if (!plan_layer(model, i, net->layers, error))
      goto fail_net;
    if ((double)nl->out_elems * max_batch > (double)G_MAXINT32 ||
        (double)nl->in_elems * max_batch > (double)G_MAXINT32 ||
        (double)nl->cache_elems * max_batch > (double)G_MAXINT32) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": activations of %d examples are too large for numerics",
                  where, model->layers[i].name ? model->layers[i].name : "?", max_batch);
      goto fail_net;
    }
    nl->aliased = nl->kind == PS_LAYER_FLATTEN && nl->input_from >= 0;
    nl->owns_out = nl->kind != PS_LAYER_FLATTEN;
    nl->owns_dout = nl->kind != PS_LAYER_SOFTMAX_XENT && !nl->aliased;
    nl->w_off = offset;
    nl->b_off = offset + nl->w_len;
    offset += nl->w_len + nl->b_len;
    if (nl->kind == PS_LAYER_CONV2D) {
      PsConvShape c = nl->conv;
      c.batch = max_batch;
      ws = MAX(ws, ps_conv2d_workspace(&c));
    } else if (nl->kind == PS_LAYER_ATTENTION) {
      PsAttnShape a = nl->attn;
      a.batch = max_batch;
      ws = MAX(ws, ps_attention_workspace(&a));
    } else if (nl->kind == PS_LAYER_PATCH_EMBEDDING) {
      PsPatchShape p = nl->patch;
      p.batch = max_batch;
      ws = MAX(ws, ps_patch_workspace(&p));
    }
  }
  net->classes = (int)net->layers[net->n_layers - 1].in_elems;
  net->n_params = offset;
  plan_gradient_writes(net);
  size_t scratch = 0;
  for (int i = 0; i < net->n_layers; i++) {
    const NetLayer *nl = &net->layers[i];
    if ((nl->input_from >= 0 && !nl->in_first && nl->kind != PS_LAYER_FLATTEN) ||
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
  for (int r = 0; r < batch; r++)
    g_return_if_fail(labels[r] >= 0 && labels[r] < net->classes);
  Slot *s = net->cur;
  memcpy(s->input, x, (size_t)batch * net->in_elems * sizeof *x);
  memcpy(s->labels, labels, (size_t)batch * sizeof *labels);
  s->batch = batch;
}

void ps_net_set_batch(PsNet *net, int batch)
{
  g_return_if_fail(net != NULL && batch > 0 && batch <= net->max_batch);
  net->cur->batch = batch;
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

static float *slot_output(Slot *s, int producer)
{
  return producer < 0 ? s->input : s->layers[producer].out;
}

/* Where backward puts the gradient of the output of `producer`: its own
 * buffer for the pass's first write, else the scratch buffer that
 * grad_done adds in.  NULL for the net input. */
static float *grad_target(PsNet *net, int producer, gboolean first)
{
  if (producer < 0)
    return NULL;
  return first ? net->cur->layers[producer].dout : net->scratch;
}

static void add_to(float *dst, const float *src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dst[i] += src[i];
}

static void grad_done(PsNet *net, int producer, gboolean first, size_t n)
{
  if (producer >= 0 && !first)
    add_to(net->cur->layers[producer].dout, net->scratch, n);
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
  Slot *s = net->cur;
  g_return_if_fail(s->batch > 0);
  NetLayer *nl = &net->layers[layer];
  SlotLayer *sl = &s->layers[layer];
  const float *x = slot_output(s, nl->input_from);
  const int batch = s->batch;
  const size_t n = (size_t)batch * nl->out_elems;
  const float *w = net->params + nl->w_off;
  const float *b = nl->b_len ? net->params + nl->b_off : NULL;

  switch (nl->kind) {
  case PS_LAYER_DENSE:
    ps_dense_forward(net->prec, x, w, b, sl->out, batch * nl->groups, nl->in_dim, nl->units);
    break;
  case PS_LAYER_RELU:
    ps_relu_forward(x, sl->out, n);
    break;
  case PS_LAYER_GELU:
    ps_gelu_forward(x, sl->out, n);
    break;
  case PS_LAYER_TANH:
    ps_tanh_forward(x, sl->out, n);
    break;
  case PS_LAYER_CONV2D: {
    PsConvShape c = nl->conv;
    c.batch = batch;
    ps_conv2d_forward(net->prec, &c, x, w, b, sl->out, net->workspace);
    break;
  }
  case PS_LAYER_MAXPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    ps_maxpool_forward(&p, x, sl->out, sl->argmax);
    break;
  }
  case PS_LAYER_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    ps_avgpool_forward(&p, x, sl->out);
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL: {
    PsPoolShape p = nl->pool;
    p.batch = batch;
    global_avgpool_forward(&p, x, sl->out);
    break;
  }
  case PS_LAYER_FLATTEN:
    break; /* out is the input buffer itself */
  case PS_LAYER_LAYERNORM:
    ps_layernorm_forward(x, w, b, sl->out, sl->cache, batch * nl->groups, nl->in_dim);
    break;
  case PS_LAYER_ATTENTION: {
    PsAttnShape a = nl->attn;
    a.batch = batch;
    ps_attention_forward(net->prec, &a, x, w, b, sl->out, sl->cache, net->workspace);
    break;
  }
  case PS_LAYER_ADD: {
    const float *sc = slot_output(s, nl->shortcut_from);
    for (size_t i = 0; i < n; i++)
      sl->out[i] = x[i] + sc[i];
    break;
  }
  case PS_LAYER_PATCH_EMBEDDING: {
    PsPatchShape p = nl->patch;
    p.batch = batch;
    size_t proj = (size_t)p.patch * p.patch * p.c * p.dim;
    ps_patch_forward(net->prec, &p, x, w, nl->positions ? w + proj : NULL, b, sl->out,
                     net->workspace);
    break;
  }
  case PS_LAYER_SOFTMAX_XENT:
    s->loss_sum = ps_softmax_xent_forward(x, s->labels, sl->out, batch, net->classes,
                                          &s->correct);
    break;
  default:
    g_assert_not_reached();
  }
}

void ps_net_backward_layer(PsNet *net, int layer, float loss_scale)
{
  g_return_if_fail(net != NULL && layer >= 0 && layer < net->n_layers);
  Slot *s = net->cur;
  g_return_if_fail(s->batch > 0);
  NetLayer *nl = &net->layers[layer];
  SlotLayer *sl = &s->layers[layer];
  if (nl->kind == PS_LAYER_FLATTEN)
    return; /* its readers wrote the gradient of its input already */
  const float *x = slot_output(s, nl->input_from);
  float *dx = grad_target(net, nl->input_from, nl->in_first);
  const float *dy = sl->dout;
  const int batch = s->batch;
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
      ps_tanh_backward(sl->out, dy, dx, n);
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
      ps_maxpool_backward(&p, sl->argmax, dy, dx);
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
  case PS_LAYER_LAYERNORM:
    ps_layernorm_backward(x, w, sl->cache, dy, dx, dw, db, batch * nl->groups, nl->in_dim);
    break;
  case PS_LAYER_ATTENTION: {
    PsAttnShape a = nl->attn;
    a.batch = batch;
    ps_attention_backward(net->prec, &a, x, w, sl->cache, dy, dx, dw, db, net->workspace);
    break;
  }
  case PS_LAYER_ADD: {
    /* both inputs get dy; no scratch needed, so return from here */
    float *targets[2] = {nl->input_from >= 0 ? s->layers[nl->input_from].dout : NULL,
                         nl->shortcut_from >= 0 ? s->layers[nl->shortcut_from].dout : NULL};
    gboolean first[2] = {nl->in_first, nl->sc_first};
    for (int t = 0; t < 2; t++) {
      if (!targets[t])
        continue;
      if (first[t])
        memcpy(targets[t], dy, n * sizeof *dy);
      else
        add_to(targets[t], dy, n);
    }
    return;
  }
  case PS_LAYER_PATCH_EMBEDDING: {
    PsPatchShape p = nl->patch;
    p.batch = batch;
    size_t proj = (size_t)p.patch * p.patch * p.c * p.dim;
    ps_patch_backward(net->prec, &p, x, w, dy, dx, dw, nl->positions ? dw + proj : NULL, db,
                      net->workspace);
    break;
  }
  case PS_LAYER_SOFTMAX_XENT:
    if (dx)
      ps_softmax_xent_backward(sl->out, s->labels, dx, batch, net->classes,
                               loss_scale / (float)batch);
    break;
  default:
    g_assert_not_reached();
  }
  grad_done(net, nl->input_from, nl->in_first, (size_t)batch * nl->in_elems);
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
  return net->cur->batch > 0 ? net->cur->loss_sum / net->cur->batch : 0.0;
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
    right += (size_t)net->cur->correct;
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

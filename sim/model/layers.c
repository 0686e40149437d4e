/* layers.c: model descriptions (models/NAME.json) flattened into a list of
 * layers with per-example shapes and costs.
 *
 * Groups are expanded as they are read: "repeat" copies its body `count`
 * times, copy i named NAME<i> (NAME_<i> when NAME ends in a digit, so that
 * nested or numbered repeats never make one name twice); "residual"
 * becomes its body layers, then its shortcut layers (fed by the block
 * input), then an ADD layer.  Invariant: every layer's
 * in_shape is the out_shape of the layer named by its input_from (the
 * model input when -1), names are unique, and the last layer is the only
 * SOFTMAX_XENT.
 *
 * Cost conventions (per example; a multiply-add is 2 FLOPs everywhere):
 * - matmul layers (dense, conv2d, attention, patch_embedding): forward =
 *   2*rows*k*n per product; backward = twice that (gradient of the input
 *   and of the weights); a bias adds 1 FLOP per output forward and 1
 *   backward (its gradient is a sum).  Backward HBM traffic is taken as twice the forward
 *   traffic (it reads the output gradient and both operands and writes two
 *   gradients).
 * - element-wise work, FLOPs per element (rough, transcendental = 1 op of
 *   a few FLOPs as below): relu 1 fwd / 1 bwd; tanh 4 / 3; gelu (tanh
 *   form) 10 / 16; batchnorm and layernorm 8 / 12 (statistics, normalize,
 *   scale and shift); softmax 5 / 4 per logit (max, subtract, exp, sum,
 *   divide); its backward is 2 per logit for softmax_xent (p - onehot,
 *   scale) and 4 per score inside attention (the Jacobian product dP ->
 *   dS); attention scaling of scores 1 / 1; add 1 / 1 (the
 *   backward one is the sum of the two gradients at the fork); max pool
 *   size^2 per output / 1 per output; avg pool size^2 + 1 per output /
 *   size^2 per output; global average pool 1 per input / 1 per input (over
 *   pixels of an image or tokens of a sequence); a patch embedding's
 *   position table is added like its bias, 1 FLOP per output forward and 1
 *   backward (cutting an image into patches is a reshape and moves no
 *   FLOPs).
 * - HBM traffic in elements, unfused: each op reads its inputs (and
 *   weights) and writes its outputs; normalizations read the input twice
 *   (statistics, then normalize); flatten is a view and moves nothing.
 * - act_elems: what backward needs: matmul layers keep their input
 *   (attention also q, k, v, the probabilities and the context),
 *   activations their output, max pool its argmax, normalizations their
 *   input plus per-channel statistics, softmax_xent its probabilities.
 */
#include "model/layers.h"

#include "common/json.h"

#include <math.h>
#include <string.h>

/* Limits that keep a typo ("count": 1e9) from exhausting memory. */
#define MAX_REPEAT 100000
#define MAX_LAYERS 1000000
#define MAX_DIM (INT64_C(1) << 30)
/* Largest tensor or weight count, so that int64 products cannot overflow. */
#define MAX_ELEMS 1e15

typedef enum {
  ITEM_RESIDUAL = PS_LAYER_N_KINDS,
  ITEM_REPEAT,
} ItemGroup;

static const char *const kind_names[PS_LAYER_N_KINDS] = {
  [PS_LAYER_DENSE] = "dense",
  [PS_LAYER_RELU] = "relu",
  [PS_LAYER_GELU] = "gelu",
  [PS_LAYER_TANH] = "tanh",
  [PS_LAYER_SOFTMAX_XENT] = "softmax_xent",
  [PS_LAYER_CONV2D] = "conv2d",
  [PS_LAYER_MAXPOOL] = "maxpool",
  [PS_LAYER_AVGPOOL] = "avgpool",
  [PS_LAYER_GLOBAL_AVGPOOL] = "global_avgpool",
  [PS_LAYER_BATCHNORM] = "batchnorm",
  [PS_LAYER_LAYERNORM] = "layernorm",
  [PS_LAYER_EMBEDDING] = "embedding",
  [PS_LAYER_ATTENTION] = "attention",
  [PS_LAYER_FLATTEN] = "flatten",
  [PS_LAYER_ADD] = "add",
  [PS_LAYER_PATCH_EMBEDDING] = "patch_embedding",
};

/* Types a model file may name, in the order error messages list them
 * ("add" is made by residual groups, never written). */
static const char *const item_types[] = {
  "dense", "conv2d", "maxpool", "avgpool", "global_avgpool", "batchnorm", "layernorm",
  "embedding", "patch_embedding", "attention", "relu", "gelu", "tanh", "flatten",
  "softmax_xent", "residual", "repeat", NULL,
};

/* Allowed keys per layer kind (each also takes "type" and "name"). */
static const char *const keys_none[] = {"type", "name", NULL};
static const char *const keys_dense[] = {"type", "name", "units", "bias", NULL};
static const char *const keys_conv[] = {"type",    "name", "filters", "kernel", "stride",
                                        "padding", "bias", NULL};
static const char *const keys_pool[] = {"type", "name", "size", "stride", "padding", NULL};
static const char *const keys_embedding[] = {"type", "name", "vocab", "dim", "positions", NULL};
static const char *const keys_patch[] = {"type", "name", "size", "dim", "positions", NULL};
static const char *const keys_attention[] = {"type", "name", "heads", "bias", "causal", NULL};
static const char *const keys_residual[] = {"type", "name", "body", "shortcut", NULL};
static const char *const keys_repeat[] = {"type", "name", "count", "first", "body", NULL};
static const char *const padding_choices[] = {"valid", "same", NULL};

/* FLOPs per element of the element-wise ops (see the file comment). */
static const double RELU_FWD = 1, RELU_BWD = 1;
static const double TANH_FWD = 4, TANH_BWD = 3;
static const double GELU_FWD = 10, GELU_BWD = 16;
static const double NORM_FWD = 8, NORM_BWD = 12;
static const double SOFTMAX_FWD = 5, SOFTMAX_BWD = 4;

const char *ps_layer_kind_name(PsLayerKind kind)
{
  g_return_val_if_fail(kind >= 0 && kind < PS_LAYER_N_KINDS, "?");
  return kind_names[kind];
}

int64_t ps_shape_elems(const int64_t *shape, int rank)
{
  g_return_val_if_fail(rank >= 0 && rank <= PS_MAX_RANK, 0);
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= shape[i];
  return n;
}

/* ------------------------------------------------------------- tensors */

/* The value flowing between layers while a model is built. */
typedef struct {
  int rank;
  int64_t shape[PS_MAX_RANK];
  gboolean tokens; /* integer token ids, only an embedding may take them */
  int src;         /* producing layer, -1 for the model input */
} Tensor;

static char *shape_str(const int64_t *shape, int rank)
{
  GString *s = g_string_new("(");
  for (int i = 0; i < rank; i++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c(s, ')');
  return g_string_free(s, FALSE);
}

static gboolean same_shape(const Tensor *a, const Tensor *b)
{
  if (a->rank != b->rank)
    return FALSE;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i])
      return FALSE;
  return TRUE;
}

/* ------------------------------------------------------------- builder */

typedef struct {
  const char *file;
  GArray *layers;    /* PsLayer, names owned */
  GHashTable *names; /* layer name -> JSON path (owned) */
  int repeats;       /* repeat groups being expanded around the current item */
} Builder;

static void set_error(GError **error, int code, const char *file, const char *path,
                      const char *fmt, ...) G_GNUC_PRINTF(5, 6);

static void set_error(GError **error, int code, const char *file, const char *path,
                      const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *reason = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, PS_INPUT_ERROR, code, "%s: %s: %s", file, (path && *path) ? path : "(root)",
              reason);
}

static gboolean add_name(Builder *b, const char *name, const char *path, GError **error)
{
  const char *prev = g_hash_table_lookup(b->names, name);
  if (prev) {
    set_error(error, PS_INPUT_ERROR_VALUE, b->file, path,
              "duplicate layer name '%s' (also used at %s)%s", name, prev,
              b->repeats > 0 ? "; a repeat names its copies NAME<i>, or NAME_<i> when NAME "
                               "ends in a digit: rename the layer or the repeat"
                             : "");
    return FALSE;
  }
  g_hash_table_insert(b->names, g_strdup(name), g_strdup(path));
  return TRUE;
}

/* Appends L (taking its name) and makes it the producer of t. */
static gboolean push_layer(Builder *b, PsLayer *L, const char *path, Tensor *t, GError **error)
{
  if (b->layers->len >= MAX_LAYERS) {
    set_error(error, PS_INPUT_ERROR_VALUE, b->file, path, "more than %d layers", MAX_LAYERS);
    g_free(L->name);
    return FALSE;
  }
  if (!add_name(b, L->name, path, error)) {
    g_free(L->name);
    return FALSE;
  }
  g_array_append_val(b->layers, *L);
  t->rank = L->out_rank;
  memcpy(t->shape, L->out_shape, sizeof t->shape);
  t->tokens = FALSE;
  t->src = (int)b->layers->len - 1;
  return TRUE;
}

/* Reads a size hyper-parameter: an integer in [1, MAX_DIM]. */
static gboolean get_dim(json_object *obj, const char *file, const char *path, const char *key,
                        gboolean required, int64_t *out, GError **error)
{
  int64_t v = *out;
  if (!ps_json_get_int(obj, file, path, key, required, 1, INT64_MAX, &v, error))
    return FALSE;
  if (v > MAX_DIM) {
    g_autofree char *p = ps_json_path_join(path, key);
    set_error(error, PS_INPUT_ERROR_VALUE, file, p,
              "must be at most %" G_GINT64_FORMAT ", got %" G_GINT64_FORMAT, MAX_DIM, v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* Fails when a weight or tensor count (computed in doubles) is too large
 * for the int64 arithmetic that follows. */
static gboolean check_size(double n, const char *what, const char *file, const char *path,
                           GError **error)
{
  if (n <= MAX_ELEMS)
    return TRUE;
  set_error(error, PS_INPUT_ERROR_VALUE, file, path, "%s of %.3g elements is too large", what, n);
  return FALSE;
}

static void add_matmul(PsLayer *L, int64_t rows, int64_t k, int64_t n, int64_t count)
{
  g_assert(L->n_mm < PS_MAX_MATMULS);
  L->mm[L->n_mm++] = (PsMatmul){.rows = rows, .k = k, .n = n, .count = count};
}

static double matmul_flops(const PsLayer *L)
{
  double f = 0;
  for (int i = 0; i < L->n_mm; i++)
    f += 2.0 * (double)L->mm[i].rows * (double)L->mm[i].k * (double)L->mm[i].n *
         (double)L->mm[i].count;
  return f;
}

/* Output size of a window sweep along one axis. */
static int64_t sweep_out(int64_t in, int64_t window, int64_t stride, gboolean same)
{
  if (same)
    return (in + stride - 1) / stride;
  return (in - window) / stride + 1;
}

/* Element-wise layer: out = in, cost per element. */
static void elementwise(PsLayer *L, const Tensor *in, double fwd, double bwd)
{
  int64_t e = ps_shape_elems(in->shape, in->rank);
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->fwd_flops = fwd * (double)e;
  L->bwd_flops = bwd * (double)e;
  L->fwd_bytes = 2.0 * (double)e;       /* read x, write y */
  L->bwd_bytes = 3.0 * (double)e;       /* read dy and the saved tensor, write dx */
  L->act_elems = e;
}

/* Fills shapes and costs of a plain layer whose hyper-parameters are set.
 * `in` is its input; errors name `path`. */
static gboolean layer_compute(PsLayer *L, const Tensor *in, gboolean positions,
                              const char *file, const char *path, GError **error)
{
  g_autofree char *ins = shape_str(in->shape, in->rank);
  int64_t e_in = ps_shape_elems(in->shape, in->rank);
  const char *kn = kind_names[L->kind];

  L->in_rank = in->rank;
  memcpy(L->in_shape, in->shape, sizeof L->in_shape);

  if (in->tokens && L->kind != PS_LAYER_EMBEDDING) {
    set_error(error, PS_INPUT_ERROR_VALUE, file, path,
              "%s cannot take token ids; put an embedding first", kn);
    return FALSE;
  }

  switch (L->kind) {
  case PS_LAYER_DENSE: {
    if (in->rank > 2) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "dense needs a rank-1 or rank-2 input, got %s; add a flatten first", ins);
      return FALSE;
    }
    int64_t rows = in->rank == 2 ? in->shape[0] : 1;
    int64_t d = in->shape[in->rank - 1];
    if (!check_size((double)d * (double)L->units, "weight matrix", file, path, error) ||
        !check_size((double)rows * (double)L->units, "output", file, path, error))
      return FALSE;
    L->out_rank = in->rank;
    memcpy(L->out_shape, in->shape, sizeof L->out_shape);
    L->out_shape[in->rank - 1] = L->units;
    L->params = d * L->units + (L->bias ? L->units : 0);
    add_matmul(L, rows, d, L->units, 1);
    double mm = matmul_flops(L), nb = L->bias ? (double)(rows * L->units) : 0;
    L->fwd_flops = mm + nb;
    L->bwd_flops = 2 * mm + nb;
    L->fwd_bytes = (double)e_in + (double)L->params + (double)(rows * L->units);
    L->bwd_bytes = 2 * L->fwd_bytes;
    L->act_elems = e_in;
    return TRUE;
  }
  case PS_LAYER_CONV2D: {
    if (in->rank != 3) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "conv2d needs a rank-3 (H, W, C) input, got %s", ins);
      return FALSE;
    }
    int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2];
    if (!L->same_padding && (L->kernel > h || L->kernel > w)) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "kernel %" G_GINT64_FORMAT " is larger than the input %s with \"valid\" padding",
                L->kernel, ins);
      return FALSE;
    }
    int64_t oh = sweep_out(h, L->kernel, L->stride, L->same_padding);
    int64_t ow = sweep_out(w, L->kernel, L->stride, L->same_padding);
    double kk = (double)L->kernel * (double)L->kernel;
    if (!check_size(kk * (double)c * (double)L->filters, "kernel", file, path, error) ||
        !check_size(kk * (double)c * (double)(oh * ow), "patch matrix", file, path, error) ||
        !check_size((double)(oh * ow) * (double)L->filters, "output", file, path, error))
      return FALSE;
    L->out_rank = 3;
    L->out_shape[0] = oh;
    L->out_shape[1] = ow;
    L->out_shape[2] = L->filters;
    L->params = L->kernel * L->kernel * c * L->filters + (L->bias ? L->filters : 0);
    add_matmul(L, oh * ow, L->kernel * L->kernel * c, L->filters, 1);
    double mm = matmul_flops(L), nb = L->bias ? (double)(oh * ow * L->filters) : 0;
    L->fwd_flops = mm + nb;
    L->bwd_flops = 2 * mm + nb;
    L->fwd_bytes = (double)e_in + (double)L->params + (double)(oh * ow * L->filters);
    L->bwd_bytes = 2 * L->fwd_bytes;
    L->act_elems = e_in;
    return TRUE;
  }
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL: {
    if (in->rank != 3) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "%s needs a rank-3 (H, W, C) input, got %s", kn, ins);
      return FALSE;
    }
    int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2];
    if (!L->same_padding && (L->pool > h || L->pool > w)) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "pool size %" G_GINT64_FORMAT " is larger than the input %s with \"valid\" "
                "padding",
                L->pool, ins);
      return FALSE;
    }
    int64_t oh = sweep_out(h, L->pool, L->stride, L->same_padding);
    int64_t ow = sweep_out(w, L->pool, L->stride, L->same_padding);
    int64_t e_out = oh * ow * c;
    double win = (double)(L->pool * L->pool);
    L->out_rank = 3;
    L->out_shape[0] = oh;
    L->out_shape[1] = ow;
    L->out_shape[2] = c;
    if (L->kind == PS_LAYER_MAXPOOL) {
      L->fwd_flops = win * (double)e_out;
      L->bwd_flops = (double)e_out;
      L->act_elems = e_out; /* argmax */
      L->fwd_bytes = (double)e_in + 2.0 * (double)e_out;
      L->bwd_bytes = 2.0 * (double)e_out + (double)e_in;
    } else {
      L->fwd_flops = (win + 1) * (double)e_out;
      L->bwd_flops = win * (double)e_out;
      L->act_elems = 0;
      L->fwd_bytes = (double)e_in + (double)e_out;
      L->bwd_bytes = (double)e_out + (double)e_in;
    }
    return TRUE;
  }
  case PS_LAYER_GLOBAL_AVGPOOL: {
    /* the mean over pixels (H, W, C) or over tokens (S, D) */
    if (in->rank != 3 && in->rank != 2) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "global_avgpool needs a rank-3 (H, W, C) or rank-2 (S, D) input, got %s", ins);
      return FALSE;
    }
    int64_t c = in->shape[in->rank - 1];
    L->out_rank = 1;
    L->out_shape[0] = c;
    L->fwd_flops = (double)e_in + (double)c;
    L->bwd_flops = (double)e_in;
    L->fwd_bytes = (double)e_in + (double)c;
    L->bwd_bytes = (double)c + (double)e_in;
    L->act_elems = 0;
    return TRUE;
  }
  case PS_LAYER_BATCHNORM:
  case PS_LAYER_LAYERNORM: {
    int64_t c = in->shape[in->rank - 1];
    L->out_rank = in->rank;
    memcpy(L->out_shape, in->shape, sizeof L->out_shape);
    L->params = 2 * c;
    L->fwd_flops = NORM_FWD * (double)e_in;
    L->bwd_flops = NORM_BWD * (double)e_in;
    /* forward: two passes over x, write y; backward: two passes over dy
     * and x, write dx; parameters read and (backward) written */
    L->fwd_bytes = 3.0 * (double)e_in + (double)L->params;
    L->bwd_bytes = 5.0 * (double)e_in + 2.0 * (double)L->params;
    /* batchnorm keeps a mean and variance per channel, layernorm per row */
    L->act_elems = e_in + (L->kind == PS_LAYER_BATCHNORM ? 2 * c : 2 * (e_in / c));
    return TRUE;
  }
  case PS_LAYER_EMBEDDING: {
    if (!in->tokens || in->rank != 1) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "embedding needs token ids as input (input.tokens = true, shape [S]), got %s",
                ins);
      return FALSE;
    }
    if (!check_size((double)L->vocab * (double)L->dim, "embedding table", file, path, error) ||
        !check_size((double)in->shape[0] * (double)L->dim, "output", file, path, error))
      return FALSE;
    int64_t s = in->shape[0], sd = s * L->dim;
    gboolean pos = positions;
    L->out_rank = 2;
    L->out_shape[0] = s;
    L->out_shape[1] = L->dim;
    L->params = L->vocab * L->dim + (pos ? sd : 0);
    L->fwd_flops = pos ? (double)sd : 0;           /* gather, then add positions */
    L->bwd_flops = (double)sd;                     /* scatter-add of rows */
    L->fwd_bytes = (double)s + (pos ? 3.0 : 2.0) * (double)sd; /* ids, rows, (pos), y */
    L->bwd_bytes = (double)s + (pos ? 3.0 : 2.0) * (double)sd;
    L->act_elems = s;
    return TRUE;
  }
  case PS_LAYER_PATCH_EMBEDDING: {
    /* Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
     * Image Recognition at Scale", ICLR 2021, arXiv:2010.11929, eq. 1: the
     * image cut into non-overlapping PxP patches, each flattened and
     * projected to D, plus a learned position embedding per patch. */
    if (in->rank != 3) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "patch_embedding needs a rank-3 (H, W, C) input, got %s", ins);
      return FALSE;
    }
    int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2], p = L->kernel;
    if (h % p != 0 || w % p != 0) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "patch size %" G_GINT64_FORMAT " does not divide the input %s into whole "
                "patches; H and W must be multiples of it",
                p, ins);
      return FALSE;
    }
    int64_t s = (h / p) * (w / p), k = p * p * c;
    if (!check_size((double)k * (double)L->dim, "projection", file, path, error) ||
        !check_size((double)s * (double)L->dim, "output", file, path, error))
      return FALSE;
    int64_t sd = s * L->dim;
    L->out_rank = 2;
    L->out_shape[0] = s;
    L->out_shape[1] = L->dim;
    L->params = k * L->dim + L->dim + (L->positions ? sd : 0);
    add_matmul(L, s, k, L->dim, 1);
    double mm = matmul_flops(L), adds = (double)sd * (L->positions ? 2 : 1);
    L->fwd_flops = mm + adds;
    L->bwd_flops = 2 * mm + adds;
    L->fwd_bytes = (double)e_in + (double)L->params + (double)sd;
    L->bwd_bytes = 2 * L->fwd_bytes;
    L->act_elems = e_in;
    return TRUE;
  }
  case PS_LAYER_ATTENTION: {
    if (in->rank != 2) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "attention needs a rank-2 (S, D) input, got %s", ins);
      return FALSE;
    }
    int64_t s = in->shape[0], d = in->shape[1], h = L->heads;
    if (d % h != 0) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, path,
                "d_model %" G_GINT64_FORMAT " is not divisible by heads %" G_GINT64_FORMAT, d, h);
      return FALSE;
    }
    if (!check_size(4.0 * (double)d * (double)d, "weights", file, path, error) ||
        !check_size((double)h * (double)s * (double)s, "score tensor", file, path, error))
      return FALSE;
    int64_t dh = d / h;
    L->out_rank = 2;
    L->out_shape[0] = s;
    L->out_shape[1] = d;
    L->dim = d;
    L->params = 4 * d * d + (L->bias ? 4 * d : 0);
    add_matmul(L, s, d, 3 * d, 1); /* Q, K, V projections */
    add_matmul(L, s, dh, s, h);    /* scores Q K^T per head */
    add_matmul(L, s, s, dh, h);    /* context P V per head */
    add_matmul(L, s, d, d, 1);     /* output projection */
    double mm = matmul_flops(L);
    double scores = (double)(h * s * s), sd = (double)(s * d);
    double nb = L->bias ? 4.0 * sd : 0;
    L->fwd_flops = mm + (1 + SOFTMAX_FWD) * scores + nb;
    L->bwd_flops = 2 * mm + (1 + SOFTMAX_BWD) * scores + nb;
    /* x, qkv written, q and k read, v read, context written and read, output
     * written: 10 S D; scores written, read and written by the softmax, read
     * by the context product: 4 h S^2 */
    L->fwd_bytes = 10.0 * sd + 4.0 * scores + (double)L->params;
    L->bwd_bytes = 2 * L->fwd_bytes;
    L->act_elems = 5 * s * d + h * s * s; /* x, q, k, v, context, probabilities */
    return TRUE;
  }
  case PS_LAYER_RELU:
    elementwise(L, in, RELU_FWD, RELU_BWD);
    return TRUE;
  case PS_LAYER_GELU:
    elementwise(L, in, GELU_FWD, GELU_BWD);
    return TRUE;
  case PS_LAYER_TANH:
    elementwise(L, in, TANH_FWD, TANH_BWD);
    return TRUE;
  case PS_LAYER_FLATTEN:
    L->out_rank = 1;
    L->out_shape[0] = e_in;
    return TRUE;
  case PS_LAYER_SOFTMAX_XENT: {
    /* the output is the probabilities (the loss is one number per
     * example, accumulated on the side) */
    L->out_rank = in->rank;
    memcpy(L->out_shape, in->shape, sizeof L->out_shape);
    L->fwd_flops = SOFTMAX_FWD * (double)e_in;
    L->bwd_flops = 2.0 * (double)e_in;
    L->fwd_bytes = 2.0 * (double)e_in;
    L->bwd_bytes = 2.0 * (double)e_in;
    L->act_elems = e_in;
    return TRUE;
  }
  case PS_LAYER_ADD:
  case PS_LAYER_N_KINDS:
    break;
  }
  g_assert_not_reached();
  return FALSE;
}

static gboolean build_list(Builder *b, json_object *arr, const char *path, const char *prefix,
                           gboolean elide_single, Tensor *t, GError **error);

static char *name_join(const char *prefix, const char *seg)
{
  if (!prefix || !*prefix)
    return g_strdup(seg);
  if (!seg || !*seg)
    return g_strdup(prefix);
  return g_strdup_printf("%s.%s", prefix, seg);
}

/* Reads an array-valued key; absent -> *out NULL. */
static gboolean get_array(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, gboolean nonempty, json_object **out,
                          GError **error)
{
  json_object *v = NULL;
  *out = NULL;
  if (!json_object_object_get_ex(obj, key, &v) || v == NULL) {
    if (required) {
      set_error(error, PS_INPUT_ERROR_KEY, file, path, "missing required key '%s'", key);
      return FALSE;
    }
    return TRUE;
  }
  g_autofree char *p = ps_json_path_join(path, key);
  if (!json_object_is_type(v, json_type_array)) {
    set_error(error, PS_INPUT_ERROR_TYPE, file, p, "must be an array of layers");
    return FALSE;
  }
  if (nonempty && json_object_array_length(v) == 0) {
    set_error(error, PS_INPUT_ERROR_VALUE, file, p, "must not be empty");
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean item_residual(Builder *b, json_object *obj, const char *path, const char *name,
                              Tensor *t, GError **error)
{
  const char *file = b->file;
  json_object *body, *shortcut;
  if (!ps_json_check_keys(obj, file, path, keys_residual, error) ||
      !get_array(obj, file, path, "body", TRUE, TRUE, &body, error) ||
      !get_array(obj, file, path, "shortcut", FALSE, FALSE, &shortcut, error))
    return FALSE;

  Tensor in = *t;
  int first = (int)b->layers->len;
  g_autofree char *bpath = ps_json_path_join(path, "body");
  g_autofree char *bname = name_join(name, "body");
  if (!build_list(b, body, bpath, bname, FALSE, t, error))
    return FALSE;
  Tensor sc = in;
  if (shortcut && json_object_array_length(shortcut) > 0) {
    g_autofree char *spath = ps_json_path_join(path, "shortcut");
    g_autofree char *sname = name_join(name, "shortcut");
    if (!build_list(b, shortcut, spath, sname, FALSE, &sc, error))
      return FALSE;
  }
  if (!same_shape(t, &sc) || sc.tokens) {
    g_autofree char *bs = shape_str(t->shape, t->rank);
    g_autofree char *ss = shape_str(sc.shape, sc.rank);
    set_error(error, PS_INPUT_ERROR_VALUE, file, path,
              "residual body output %s does not match the shortcut output %s%s", bs, ss,
              shortcut ? "" : " (identity shortcut)");
    return FALSE;
  }
  PsLayer L = {0};
  L.kind = PS_LAYER_ADD;
  L.name = name_join(name, "add");
  L.in_rank = L.out_rank = t->rank;
  memcpy(L.in_shape, t->shape, sizeof L.in_shape);
  memcpy(L.out_shape, t->shape, sizeof L.out_shape);
  L.shortcut_of = first;
  L.input_from = t->src;
  L.shortcut_from = sc.src;
  int64_t e = ps_shape_elems(t->shape, t->rank);
  L.fwd_flops = (double)e;
  L.bwd_flops = (double)e;
  L.fwd_bytes = 3.0 * (double)e;
  L.bwd_bytes = 3.0 * (double)e;
  return push_layer(b, &L, path, t, error);
}

static gboolean item_repeat(Builder *b, json_object *obj, const char *path, const char *name,
                            Tensor *t, GError **error)
{
  const char *file = b->file;
  json_object *body;
  int64_t count = 0, first = 1;
  if (!ps_json_check_keys(obj, file, path, keys_repeat, error) ||
      !ps_json_get_int(obj, file, path, "count", TRUE, 1, INT64_MAX, &count, error) ||
      !ps_json_get_int(obj, file, path, "first", FALSE, 0, G_MAXINT, &first, error) ||
      !get_array(obj, file, path, "body", TRUE, TRUE, &body, error))
    return FALSE;
  if (count > MAX_REPEAT) {
    g_autofree char *p = ps_json_path_join(path, "count");
    set_error(error, PS_INPUT_ERROR_VALUE, file, p,
              "must be at most %d, got %" G_GINT64_FORMAT, MAX_REPEAT, count);
    return FALSE;
  }
  g_autofree char *bpath = ps_json_path_join(path, "body");
  /* NAME<i>, or NAME_<i> when NAME ends in a digit (an unnamed repeat,
   * repeat1, or an iteration of an enclosing one, x1): "x1" + "11" would
   * be "x11" + "1" */
  size_t len = strlen(name);
  const char *sep = len > 0 && g_ascii_isdigit(name[len - 1]) ? "_" : "";
  gboolean ok = TRUE;
  b->repeats++;
  for (int64_t i = 0; i < count && ok; i++) {
    g_autofree char *iname = g_strdup_printf("%s%s%" G_GINT64_FORMAT, name, sep, first + i);
    ok = build_list(b, body, bpath, iname, TRUE, t, error);
  }
  b->repeats--;
  return ok;
}

static gboolean item_layer(Builder *b, json_object *obj, const char *path, const char *name,
                           PsLayerKind kind, Tensor *t, GError **error)
{
  const char *file = b->file;
  PsLayer L = {0};
  L.kind = kind;
  L.stride = 1;
  L.bias = TRUE;
  L.shortcut_of = -1;
  L.shortcut_from = -1;
  L.input_from = t->src;
  gboolean ok = TRUE, positions = TRUE;
  int padding = -1;
  switch (kind) {
  case PS_LAYER_DENSE:
    ok = ps_json_check_keys(obj, file, path, keys_dense, error) &&
         get_dim(obj, file, path, "units", TRUE, &L.units, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L.bias, error);
    break;
  case PS_LAYER_CONV2D:
    padding = 1; /* same */
    ok = ps_json_check_keys(obj, file, path, keys_conv, error) &&
         get_dim(obj, file, path, "filters", TRUE, &L.filters, error) &&
         get_dim(obj, file, path, "kernel", TRUE, &L.kernel, error) &&
         get_dim(obj, file, path, "stride", FALSE, &L.stride, error) &&
         ps_json_get_enum(obj, file, path, "padding", FALSE, padding_choices, &padding, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L.bias, error);
    break;
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL:
    padding = 0; /* valid */
    L.bias = FALSE;
    ok = ps_json_check_keys(obj, file, path, keys_pool, error) &&
         get_dim(obj, file, path, "size", TRUE, &L.pool, error);
    L.stride = L.pool;
    ok = ok && get_dim(obj, file, path, "stride", FALSE, &L.stride, error) &&
         ps_json_get_enum(obj, file, path, "padding", FALSE, padding_choices, &padding, error);
    break;
  case PS_LAYER_EMBEDDING: {
    L.bias = FALSE;
    ok = ps_json_check_keys(obj, file, path, keys_embedding, error) &&
         get_dim(obj, file, path, "vocab", TRUE, &L.vocab, error) &&
         get_dim(obj, file, path, "dim", TRUE, &L.dim, error) &&
         ps_json_get_bool(obj, file, path, "positions", FALSE, &positions, error);
    break;
  }
  case PS_LAYER_PATCH_EMBEDDING:
    ok = ps_json_check_keys(obj, file, path, keys_patch, error) &&
         get_dim(obj, file, path, "size", TRUE, &L.kernel, error) &&
         get_dim(obj, file, path, "dim", TRUE, &L.dim, error) &&
         ps_json_get_bool(obj, file, path, "positions", FALSE, &positions, error);
    L.stride = L.kernel;
    break;
  case PS_LAYER_ATTENTION:
    /* a mask: the same counted cost, but the numerics honour it */
    ok = ps_json_check_keys(obj, file, path, keys_attention, error) &&
         get_dim(obj, file, path, "heads", TRUE, &L.heads, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L.bias, error) &&
         ps_json_get_bool(obj, file, path, "causal", FALSE, &L.causal, error);
    break;
  default:
    L.bias = FALSE;
    ok = ps_json_check_keys(obj, file, path, keys_none, error);
    break;
  }
  if (!ok)
    return FALSE;
  L.same_padding = padding == 1;
  L.positions = (kind == PS_LAYER_EMBEDDING || kind == PS_LAYER_PATCH_EMBEDDING) && positions;
  if (!layer_compute(&L, t, positions, file, path, error))
    return FALSE;
  L.name = g_strdup(name);
  return push_layer(b, &L, path, t, error);
}

/* Index of a type string in item_types mapped to a kind or group; -1 if
 * unknown. */
static int item_kind(const char *type)
{
  for (int k = 0; k < PS_LAYER_N_KINDS; k++)
    if (k != PS_LAYER_ADD && strcmp(kind_names[k], type) == 0)
      return k;
  if (strcmp(type, "residual") == 0)
    return ITEM_RESIDUAL;
  if (strcmp(type, "repeat") == 0)
    return ITEM_REPEAT;
  return -1;
}

static gboolean build_item(Builder *b, json_object *obj, const char *path, const char *name,
                           Tensor *t, GError **error)
{
  const char *type = NULL;
  if (!ps_json_expect_object(obj, b->file, path, error) ||
      !ps_json_get_string(obj, b->file, path, "type", TRUE, &type, error))
    return FALSE;
  int k = item_kind(type);
  if (k < 0) {
    g_autofree char *p = ps_json_path_join(path, "type");
    g_autofree char *list = g_strjoinv(", ", (char **)item_types);
    set_error(error, PS_INPUT_ERROR_VALUE, b->file, p,
              "unknown layer type '%s' (expected one of: %s)", type, list);
    return FALSE;
  }
  if (k == ITEM_RESIDUAL)
    return item_residual(b, obj, path, name, t, error);
  if (k == ITEM_REPEAT)
    return item_repeat(b, obj, path, name, t, error);
  return item_layer(b, obj, path, name, (PsLayerKind)k, t, error);
}

/* Builds the items of `arr` in order.  Unnamed items are called TYPE<n>,
 * n counting items of that type in this list from 1; with elide_single a
 * list of one unnamed item gives it the prefix itself as its name. */
static gboolean build_list(Builder *b, json_object *arr, const char *path, const char *prefix,
                           gboolean elide_single, Tensor *t, GError **error)
{
  size_t n = json_object_array_length(arr);
  g_autoptr(GHashTable) ordinals = g_hash_table_new(g_str_hash, g_str_equal);
  for (size_t i = 0; i < n; i++) {
    json_object *item = json_object_array_get_idx(arr, i);
    g_autofree char *ipath = ps_json_path_index(path, (int)i);
    const char *type = NULL, *given = NULL;
    if (!ps_json_expect_object(item, b->file, ipath, error) ||
        !ps_json_get_string(item, b->file, ipath, "type", TRUE, &type, error) ||
        !ps_json_get_string(item, b->file, ipath, "name", FALSE, &given, error))
      return FALSE;
    if (given && (!*given || strpbrk(given, " \t\n") != NULL)) {
      g_autofree char *np = ps_json_path_join(ipath, "name");
      set_error(error, PS_INPUT_ERROR_VALUE, b->file, np,
                "must be a non-empty name without spaces, got '%s'", given);
      return FALSE;
    }
    int ord = GPOINTER_TO_INT(g_hash_table_lookup(ordinals, type)) + 1;
    g_hash_table_insert(ordinals, (gpointer)type, GINT_TO_POINTER(ord));
    g_autofree char *seg = given ? g_strdup(given) : g_strdup_printf("%s%d", type, ord);
    g_autofree char *name =
        (elide_single && n == 1 && !given) ? g_strdup(prefix) : name_join(prefix, seg);
    if (!build_item(b, item, ipath, name, t, error))
      return FALSE;
  }
  return TRUE;
}

/* --------------------------------------------------------------- model */

static const char *const keys_model[] = {"name", "description", "notes", "input", "layers", NULL};
static const char *const keys_input[] = {"shape", "classes", "tokens", NULL};

void ps_model_free(PsModel *model)
{
  if (!model)
    return;
  for (int i = 0; i < model->n_layers; i++)
    g_free(model->layers[i].name);
  g_free(model->layers);
  g_free(model->name);
  g_free(model->file);
  g_free(model->description);
  g_free(model);
}

static gboolean read_input(PsModel *m, json_object *obj, const char *file, const char *path,
                           GError **error)
{
  json_object *in = NULL, *shape = NULL;
  g_autofree char *ipath = ps_json_path_join(path, "input");
  if (!json_object_object_get_ex(obj, "input", &in) || !in) {
    set_error(error, PS_INPUT_ERROR_KEY, file, path, "missing required key 'input'");
    return FALSE;
  }
  if (!ps_json_check_keys(in, file, ipath, keys_input, error) ||
      !ps_json_get_int(in, file, ipath, "classes", TRUE, 1, MAX_DIM, &m->classes, error) ||
      !ps_json_get_bool(in, file, ipath, "tokens", FALSE, &m->token_input, error))
    return FALSE;
  g_autofree char *spath = ps_json_path_join(ipath, "shape");
  if (!json_object_object_get_ex(in, "shape", &shape) || !shape) {
    set_error(error, PS_INPUT_ERROR_KEY, file, ipath, "missing required key 'shape'");
    return FALSE;
  }
  size_t rank = json_object_is_type(shape, json_type_array) ? json_object_array_length(shape) : 0;
  if (rank < 1 || rank > PS_MAX_RANK) {
    set_error(error, PS_INPUT_ERROR_TYPE, file, spath,
              "must be an array of 1 to %d positive integers", PS_MAX_RANK);
    return FALSE;
  }
  m->in_rank = (int)rank;
  for (size_t i = 0; i < rank; i++) {
    json_object *d = json_object_array_get_idx(shape, i);
    g_autofree char *dp = ps_json_path_index(spath, (int)i);
    double v = d && (json_object_is_type(d, json_type_int) || json_object_is_type(d, json_type_double))
                   ? json_object_get_double(d)
                   : -1;
    if (!(v >= 1 && v <= (double)MAX_DIM && v == floor(v))) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, dp, "must be a positive integer, got %s",
                d ? json_object_to_json_string(d) : "null");
      return FALSE;
    }
    m->in_shape[i] = (int64_t)v;
  }
  if (!check_size((double)ps_shape_elems(m->in_shape, m->in_rank), "input", file, spath, error))
    return FALSE;
  if (m->token_input && rank != 1) {
    set_error(error, PS_INPUT_ERROR_VALUE, file, spath,
              "token input must have shape [S], got rank %zu", rank);
    return FALSE;
  }
  return TRUE;
}

static gboolean layer_numeric(const PsLayer *L)
{
  switch (L->kind) {
  case PS_LAYER_DENSE:
  case PS_LAYER_RELU:
  case PS_LAYER_GELU:
  case PS_LAYER_TANH:
  case PS_LAYER_CONV2D:
  case PS_LAYER_GLOBAL_AVGPOOL:
  case PS_LAYER_FLATTEN:
  case PS_LAYER_SOFTMAX_XENT:
  case PS_LAYER_LAYERNORM:
  case PS_LAYER_ATTENTION:
  case PS_LAYER_ADD:
  case PS_LAYER_PATCH_EMBEDDING:
    return TRUE;
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL:
    return !L->same_padding;
  default:
    return FALSE;
  }
}

PsModel *ps_model_from_json(json_object *obj, const char *file, const char *path,
                            GError **error)
{
  g_return_val_if_fail(file != NULL, NULL);
  if (!path)
    path = "";
  const char *name = NULL, *desc = NULL, *notes = NULL;
  if (!ps_json_check_keys(obj, file, path, keys_model, error) ||
      !ps_json_get_string(obj, file, path, "name", FALSE, &name, error) ||
      !ps_json_get_string(obj, file, path, "description", FALSE, &desc, error) ||
      !ps_json_get_string(obj, file, path, "notes", FALSE, &notes, error))
    return NULL;

  PsModel *m = g_new0(PsModel, 1);
  m->file = g_strdup(file);
  if (name) {
    m->name = g_strdup(name);
  } else {
    g_autofree char *base = g_path_get_basename(file);
    char *dot = strrchr(base, '.');
    if (dot && dot != base)
      *dot = '\0';
    m->name = g_strdup(base);
  }
  m->description = g_strdup(desc ? desc : "");

  Builder b = {
    .file = file,
    .layers = g_array_new(FALSE, TRUE, sizeof(PsLayer)),
    .names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
  };
  json_object *layers = NULL;
  g_autofree char *lpath = ps_json_path_join(path, "layers");
  if (!read_input(m, obj, file, path, error) ||
      !get_array(obj, file, path, "layers", TRUE, TRUE, &layers, error))
    goto fail;

  Tensor t = {.rank = m->in_rank, .tokens = m->token_input, .src = -1};
  memcpy(t.shape, m->in_shape, sizeof t.shape);
  if (!build_list(&b, layers, lpath, "", FALSE, &t, error))
    goto fail;

  /* softmax_xent: exactly one, last, over input.classes */
  m->n_layers = (int)b.layers->len;
  m->layers = (PsLayer *)(void *)b.layers->data;
  for (int i = 0; i < m->n_layers; i++) {
    PsLayer *L = &m->layers[i];
    if (L->kind == PS_LAYER_SOFTMAX_XENT && i != m->n_layers - 1) {
      set_error(error, PS_INPUT_ERROR_VALUE, file, g_hash_table_lookup(b.names, L->name),
                "softmax_xent must be the last layer (layer '%s' is #%d of %d)", L->name, i,
                m->n_layers);
      goto fail_layers;
    }
  }
  PsLayer *last = &m->layers[m->n_layers - 1];
  if (last->kind != PS_LAYER_SOFTMAX_XENT) {
    set_error(error, PS_INPUT_ERROR_VALUE, file, lpath,
              "the last layer must be softmax_xent (the loss), got %s",
              kind_names[last->kind]);
    goto fail_layers;
  }
  int64_t width = last->in_shape[last->in_rank - 1];
  if (width != m->classes) {
    g_autofree char *cp = ps_json_path_join(path, "input.classes");
    set_error(error, PS_INPUT_ERROR_VALUE, file, g_hash_table_lookup(b.names, last->name),
              "softmax_xent input width %" G_GINT64_FORMAT " does not match %s = %" G_GINT64_FORMAT,
              width, cp, m->classes);
    goto fail_layers;
  }

  /* Each layer is within MAX_ELEMS, but many of them can sum past int64:
   * the totals are checked in doubles first. */
  double total_params = 0, total_act = 0;
  for (int i = 0; i < m->n_layers; i++) {
    total_params += (double)m->layers[i].params;
    total_act += (double)m->layers[i].act_elems;
  }
  if (!check_size(total_params, "the model's parameter count", file, lpath, error) ||
      !check_size(total_act, "the model's activation count per example", file, lpath, error))
    goto fail_layers;

  m->numerics_supported = TRUE;
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *L = &m->layers[i];
    m->params += L->params;
    m->fwd_flops += L->fwd_flops;
    m->bwd_flops += L->bwd_flops;
    m->act_elems += L->act_elems;
    if (!layer_numeric(L))
      m->numerics_supported = FALSE;
  }
  g_array_free(b.layers, FALSE);
  g_hash_table_destroy(b.names);
  return m;

fail_layers:
  /* the layers array is owned by m from here */
  g_array_free(b.layers, FALSE);
  b.layers = NULL;
  g_hash_table_destroy(b.names);
  ps_model_free(m);
  return NULL;
fail:
  for (guint i = 0; i < b.layers->len; i++)
    g_free(g_array_index(b.layers, PsLayer, i).name);
  g_array_free(b.layers, TRUE);
  g_hash_table_destroy(b.names);
  ps_model_free(m);
  return NULL;
}

PsModel *ps_model_load_file(const char *file, GError **error)
{
  g_return_val_if_fail(file != NULL, NULL);
  json_object *root = ps_json_load_file(file, error);
  if (!root)
    return NULL;
  PsModel *m = ps_model_from_json(root, file, "", error);
  json_object_put(root);
  return m;
}

int64_t ps_model_memory_bytes(const PsModel *model, int first, int last, int64_t batch,
                              int optimizer_slots, int act_bytes)
{
  g_return_val_if_fail(model != NULL, 0);
  if (last < 0 || last > model->n_layers)
    last = model->n_layers;
  g_return_val_if_fail(first >= 0 && first <= last, 0);
  g_return_val_if_fail(batch >= 0 && optimizer_slots >= 0 && act_bytes >= 0, 0);
  int64_t params = 0, act = 0;
  for (int i = first; i < last; i++) {
    params += model->layers[i].params;
    act += model->layers[i].act_elems;
  }
  /* In doubles, saturating at INT64_MAX: a huge batch must read as "does
   * not fit", not wrap around to a small number. */
  double need = (double)params * 4 * (2 + optimizer_slots) +
                (double)act * (double)batch * act_bytes;
  if (need >= 9.2e18)
    return INT64_MAX;
  return params * 4 * (2 + optimizer_slots) + act * batch * act_bytes;
}

void ps_model_describe(const PsModel *model, GString *out)
{
  g_return_if_fail(model != NULL && out != NULL);
  int w = 4;
  for (int i = 0; i < model->n_layers; i++)
    w = MAX(w, (int)strlen(model->layers[i].name));
  w = MIN(w, 48);
  g_autofree char *ins = shape_str(model->in_shape, model->in_rank);
  g_string_append_printf(out, "model %s (%s)\n", model->name, model->file);
  if (model->description && *model->description)
    g_string_append_printf(out, "  %s\n", model->description);
  g_string_append_printf(out, "input %s%s, %" G_GINT64_FORMAT " classes\n\n", ins,
                         model->token_input ? " token ids" : "", model->classes);
  g_string_append_printf(out, "%5s  %-*s  %-15s  %-18s  %14s  %14s\n", "#", w, "name", "kind",
                         "output", "params", "fwd MFLOP/ex");
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *L = &model->layers[i];
    g_autofree char *os = shape_str(L->out_shape, L->out_rank);
    g_string_append_printf(out, "%5d  %-*s  %-15s  %-18s  %14" G_GINT64_FORMAT "  %14.3f\n", i,
                           w, L->name, kind_names[L->kind], os, L->params,
                           L->fwd_flops / 1e6);
  }
  g_string_append_printf(out,
                         "\n%d layers, %" G_GINT64_FORMAT " parameters (%.2f M)\n"
                         "per example: forward %.4g GFLOP, backward %.4g GFLOP, "
                         "%.4g M activation elements kept for backward\n"
                         "numerics: %s\n",
                         model->n_layers, model->params, (double)model->params / 1e6,
                         model->fwd_flops / 1e9, model->bwd_flops / 1e9,
                         (double)model->act_elems / 1e6,
                         model->numerics_supported ? "supported" : "timing only");
}

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
 * What a kind means (its keys, output shape, parameters, costs, numerics
 * and lowering) is its entry in the layer table (layer-private.h), one
 * layer-*.c file per family; this file builds the list and keeps the
 * conventions every entry follows.
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
 *   dS); attention scaling of scores 1 / 1; dropout 4 / 2 per element
 *   (per score on attention's probabilities); add 1 / 1 (the
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
 * - kept for backward, as XLA's buffer assignment lays out a training
 *   step (one buffer per tensor, however many backward kernels read it):
 *   each kind says which tensor between layers its backward reads
 *   (`saves`: matmul layers and normalizations their input, relu and gelu
 *   their input, tanh its output) and what it keeps of its own
 *   (attention's q, k, v, context and softmax probabilities, never the
 *   scores before the softmax; max pool's argmax; softmax_xent's
 *   probabilities; a norm's float32 statistics).  share_kept() then
 *   counts each tensor once, with the first layer that needs it, so it
 *   is live from that layer's forward to its backward, the last to read
 *   it.  A tensor the cost model never writes is not kept: the output of
 *   an element-wise kind fused into its producer (relu, gelu) and of
 *   batch normalization (deferred into its consumer) is recomputed from
 *   their kept input by each kernel that reads it: XLA's instruction
 *   fusion duplicates a cheap producer (relu's maximum, batch norm's
 *   scale and shift) into every consumer, backward's included
 *   (xla/service/instruction_fusion.cc, IsExpensive and
 *   FusionWouldDuplicate), and its rematerialization under the HBM limit
 *   recomputes an instruction whose operands stay live anyway, as gelu's
 *   (kept for gelu's own backward), for the whole of its output
 *   (xla/service/hlo_rematerialization.cc, MemoryReducedIfRematerialized).
 *   A dropout keeps its mask, one byte an element (mask_elems, at
 *   PS_MASK_BYTES), and attention with dropout the mask of its
 *   probabilities, not the dropped-out probabilities (made again from
 *   the kept softmax output and mask by the kernels that read them).
 *   For a transformer layer this is Korthikanti et al. 2022's count
 *   (section 4.1) with gelu's output and the dropped-out probabilities
 *   recomputed.
 */
#include "model/layer-private.h"

/* Limits that keep a typo ("count": 1e9) from exhausting memory. */
#define MAX_REPEAT 100000
#define MAX_LAYERS 1000000
#define MAX_DIM PS_LAYER_MAX_DIM
/* Largest tensor or weight count, so that int64 products cannot overflow. */
#define MAX_ELEMS 1e15

static const char *const keys_residual[] = {"type", "name", "body", "shortcut", NULL};
static const char *const keys_repeat[] = {"type", "name", "count", "first", "body", NULL};
static const char *const padding_choices[] = {"valid", "same", NULL};
const char *const ps_layer_keys_plain[] = {"type", "name", NULL};

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

char *ps_layer_shape_str(const int64_t *shape, int rank)
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
  int unit;          /* the outermost repeat's iteration being expanded (0: none) */
  int units;         /* iterations of outermost repeats so far */
} Builder;

void ps_layer_error(GError **error, int code, const char *file, const char *path,
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
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, b->file, path,
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
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, b->file, path, "more than %d layers", MAX_LAYERS);
    g_free(L->name);
    return FALSE;
  }
  if (!add_name(b, L->name, path, error)) {
    g_free(L->name);
    return FALSE;
  }
  L->unit = b->unit;
  g_array_append_val(b->layers, *L);
  t->rank = L->out_rank;
  memcpy(t->shape, L->out_shape, sizeof t->shape);
  t->tokens = FALSE;
  t->src = (int)b->layers->len - 1;
  return TRUE;
}

gboolean ps_layer_get_dim(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, int64_t *out, GError **error)
{
  int64_t v = *out;
  if (!ps_json_get_int(obj, file, path, key, required, 1, INT64_MAX, &v, error))
    return FALSE;
  if (v > MAX_DIM) {
    g_autofree char *p = ps_json_path_join(path, key);
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, p,
                   "must be at most %" G_GINT64_FORMAT ", got %" G_GINT64_FORMAT, MAX_DIM, v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean check_size(double n, const char *what, const char *file, const char *path,
                           GError **error)
{
  if (n <= MAX_ELEMS)
    return TRUE;
  ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, path, "%s of %.3g elements is too large",
                 what, n);
  return FALSE;
}

gboolean ps_layer_check_size(double n, const char *what, const PsLayerIn *in, GError **error)
{
  return check_size(n, what, in->file, in->path, error);
}

gboolean ps_layer_get_padding(PsLayer *L, json_object *obj, const char *file, const char *path,
                              gboolean same, GError **error)
{
  int padding = same ? 1 : 0;
  if (!ps_json_get_enum(obj, file, path, "padding", FALSE, padding_choices, &padding, error))
    return FALSE;
  L->same_padding = padding == 1;
  return TRUE;
}

gboolean ps_layer_get_rate(json_object *obj, const char *file, const char *path, const char *key,
                           gboolean required, double *out, GError **error)
{
  double v = *out;
  if (!ps_json_get_double(obj, file, path, key, required, -G_MAXDOUBLE, FALSE, G_MAXDOUBLE, &v,
                          error))
    return FALSE;
  if (!(v >= 0.0 && v < 1.0)) {
    g_autofree char *p = ps_json_path_join(path, key);
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, p,
                   "must be in [0, 1) (the fraction of elements dropped; 0 for none), got %g",
                   v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

gboolean ps_layer_parse_plain(PsLayer *L, json_object *obj, const char *file, const char *path,
                              GError **error)
{
  L->bias = FALSE;
  return ps_json_check_keys(obj, file, path, ps_layer_keys_plain, error);
}

void ps_layer_add_matmul(PsLayer *L, int64_t rows, int64_t k, int64_t n, int64_t count)
{
  g_assert(L->n_mm < PS_MAX_MATMULS);
  L->mm[L->n_mm++] = (PsMatmul){.rows = rows, .k = k, .n = n, .count = count};
}

static double matmul_flops(const PsLayer *L, gboolean weights_only)
{
  double f = 0;
  for (int i = 0; i < L->n_mm; i++)
    if (!weights_only || !L->mm[i].activations)
      f += 2.0 * (double)L->mm[i].rows * (double)L->mm[i].k * (double)L->mm[i].n *
           (double)L->mm[i].count;
  return f;
}

double ps_layer_matmul_flops(const PsLayer *L)
{
  return matmul_flops(L, FALSE);
}

double ps_layer_weight_matmul_flops(const PsLayer *L)
{
  return matmul_flops(L, TRUE);
}

int64_t ps_layer_sweep_out(int64_t in, int64_t window, int64_t stride, gboolean same)
{
  if (same)
    return (in + stride - 1) / stride;
  return (in - window) / stride + 1;
}

void ps_layer_elementwise(PsLayer *L, const PsLayerIn *in, double fwd, double bwd)
{
  int64_t e = ps_shape_elems(in->shape, in->rank);
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->fwd_flops = fwd * (double)e;
  L->bwd_flops = bwd * (double)e;
  L->fwd_bytes = 2.0 * (double)e;       /* read x, write y */
  L->bwd_bytes = 3.0 * (double)e;       /* read dy and the saved tensor, write dx */
}

/* Fills shapes and costs of a plain layer whose hyper-parameters are set.
 * `t` is its input; errors name `path`. */
static gboolean layer_compute(PsLayer *L, const Tensor *t, const char *file, const char *path,
                              GError **error)
{
  const PsLayerOps *ops = ps_layer_ops(L->kind);
  g_autofree char *ins = ps_layer_shape_str(t->shape, t->rank);
  PsLayerIn in = {.rank = t->rank, .shape = t->shape, .elems = ps_shape_elems(t->shape, t->rank),
                  .tokens = t->tokens, .str = ins, .file = file, .path = path};

  L->in_rank = t->rank;
  memcpy(L->in_shape, t->shape, sizeof L->in_shape);
  if (t->tokens && !ops->takes_tokens) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, path,
                   "%s cannot take token ids; put an embedding first", ops->name);
    return FALSE;
  }
  return ops->shape(L, &in, error);
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
      ps_layer_error(error, PS_INPUT_ERROR_KEY, file, path, "missing required key '%s'", key);
      return FALSE;
    }
    return TRUE;
  }
  g_autofree char *p = ps_json_path_join(path, key);
  if (!json_object_is_type(v, json_type_array)) {
    ps_layer_error(error, PS_INPUT_ERROR_TYPE, file, p, "must be an array of layers");
    return FALSE;
  }
  if (nonempty && json_object_array_length(v) == 0) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, p, "must not be empty");
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
    g_autofree char *bs = ps_layer_shape_str(t->shape, t->rank);
    g_autofree char *ss = ps_layer_shape_str(sc.shape, sc.rank);
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, path,
                   "residual body output %s does not match the shortcut output %s%s", bs, ss,
                   shortcut ? "" : " (identity shortcut)");
    return FALSE;
  }
  PsLayer L = {0};
  L.kind = PS_LAYER_ADD;
  L.shortcut_of = first;
  L.input_from = t->src;
  L.shortcut_from = sc.src;
  if (!layer_compute(&L, t, file, path, error))
    return FALSE;
  L.name = name_join(name, "add");
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
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, p,
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
  const gboolean outermost = b->repeats == 0;
  b->repeats++;
  for (int64_t i = 0; i < count && ok; i++) {
    g_autofree char *iname = g_strdup_printf("%s%s%" G_GINT64_FORMAT, name, sep, first + i);
    if (outermost)
      b->unit = ++b->units;
    ok = build_list(b, body, bpath, iname, TRUE, t, error);
  }
  b->repeats--;
  if (outermost)
    b->unit = 0;
  return ok;
}

static gboolean item_layer(Builder *b, json_object *obj, const char *path, const char *name,
                           const PsLayerOps *ops, Tensor *t, GError **error)
{
  PsLayer L = {0};
  L.kind = ops->kind;
  L.stride = 1;
  L.bias = TRUE;
  L.shortcut_of = -1;
  L.shortcut_from = -1;
  L.input_from = t->src;
  if (!ops->parse(&L, obj, b->file, path, error) || !layer_compute(&L, t, b->file, path, error))
    return FALSE;
  L.name = g_strdup(name);
  return push_layer(b, &L, path, t, error);
}

/* The kind a model file's "type" names, or NULL (a group, or unknown). */
static const PsLayerOps *item_kind(const char *type)
{
  for (int k = 0; ps_layer_table[k]; k++)
    if (ps_layer_table[k]->keys && strcmp(ps_layer_table[k]->name, type) == 0)
      return ps_layer_table[k];
  return NULL;
}

/* "dense, conv2d, ..., residual, repeat": the types a file may name, in
 * the table's order.  (transfer full) */
static char *item_types(void)
{
  GString *s = g_string_new(NULL);
  for (int k = 0; ps_layer_table[k]; k++)
    if (ps_layer_table[k]->keys)
      g_string_append_printf(s, "%s, ", ps_layer_table[k]->name);
  g_string_append(s, "residual, repeat");
  return g_string_free(s, FALSE);
}

static gboolean build_item(Builder *b, json_object *obj, const char *path, const char *name,
                           Tensor *t, GError **error)
{
  const char *type = NULL;
  if (!ps_json_expect_object(obj, b->file, path, error) ||
      !ps_json_get_string(obj, b->file, path, "type", TRUE, &type, error))
    return FALSE;
  if (strcmp(type, "residual") == 0)
    return item_residual(b, obj, path, name, t, error);
  if (strcmp(type, "repeat") == 0)
    return item_repeat(b, obj, path, name, t, error);
  const PsLayerOps *ops = item_kind(type);
  if (!ops) {
    g_autofree char *p = ps_json_path_join(path, "type");
    g_autofree char *list = item_types();
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, b->file, p,
                   "unknown layer type '%s' (expected one of: %s)", type, list);
    return FALSE;
  }
  return item_layer(b, obj, path, name, ops, t, error);
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
      ps_layer_error(error, PS_INPUT_ERROR_VALUE, b->file, np,
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
    ps_layer_error(error, PS_INPUT_ERROR_KEY, file, path, "missing required key 'input'");
    return FALSE;
  }
  if (!ps_json_check_keys(in, file, ipath, keys_input, error) ||
      !ps_json_get_int(in, file, ipath, "classes", TRUE, 1, MAX_DIM, &m->classes, error) ||
      !ps_json_get_bool(in, file, ipath, "tokens", FALSE, &m->token_input, error))
    return FALSE;
  g_autofree char *spath = ps_json_path_join(ipath, "shape");
  if (!json_object_object_get_ex(in, "shape", &shape) || !shape) {
    ps_layer_error(error, PS_INPUT_ERROR_KEY, file, ipath, "missing required key 'shape'");
    return FALSE;
  }
  size_t rank = json_object_is_type(shape, json_type_array) ? json_object_array_length(shape) : 0;
  if (rank < 1 || rank > PS_MAX_RANK) {
    ps_layer_error(error, PS_INPUT_ERROR_TYPE, file, spath,
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
      ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, dp, "must be a positive integer, got %s",
                     d ? json_object_to_json_string(d) : "null");
      return FALSE;
    }
    m->in_shape[i] = (int64_t)v;
  }
  if (!check_size((double)ps_shape_elems(m->in_shape, m->in_rank), "input", file, spath, error))
    return FALSE;
  if (m->token_input && rank != 1) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, spath,
                   "token input must have shape [S], got rank %zu", rank);
    return FALSE;
  }
  return TRUE;
}

static gboolean layer_numeric(const PsLayer *L)
{
  const PsLayerOps *ops = ps_layer_ops(L->kind);
  return ops->forward != NULL && (!ops->numeric || ops->numeric(L));
}

/* The loss: exactly one, last, over input.classes. */
static gboolean check_loss(const PsModel *m, GHashTable *names, const char *file,
                           const char *path, const char *lpath, GError **error)
{
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *L = &m->layers[i];
    if (ps_layer_ops(L->kind)->loss && i != m->n_layers - 1) {
      ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, g_hash_table_lookup(names, L->name),
                     "%s must be the last layer (layer '%s' is #%d of %d)",
                     ps_layer_kind_name(L->kind), L->name, i, m->n_layers);
      return FALSE;
    }
  }
  const PsLayer *last = &m->layers[m->n_layers - 1];
  if (!ps_layer_ops(last->kind)->loss) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, lpath,
                   "the last layer must be softmax_xent (the loss), got %s",
                   ps_layer_kind_name(last->kind));
    return FALSE;
  }
  int64_t width = last->in_shape[last->in_rank - 1];
  if (width != m->classes) {
    g_autofree char *cp = ps_json_path_join(path, "input.classes");
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, file, g_hash_table_lookup(names, last->name),
                   "%s input width %" G_GINT64_FORMAT " does not match %s = %" G_GINT64_FORMAT,
                   ps_layer_kind_name(last->kind), width, cp, m->classes);
    return FALSE;
  }
  return TRUE;
}

/* Numerics hold every parameter in float32 with its gradient and up to
 * two optimizer slots (16 bytes) on each simulated device: past 2^28
 * parameters (4 GiB of those per device) a model is timing only, however
 * many of its layers have kernels. */
#define PS_NUMERICS_MAX_PARAMS (INT64_C(1) << 28)

/* The tensor layer i's output is: a view's output is its input's buffer.
 * -1 is the model input. */
static int tensor_of(const PsModel *m, int i)
{
  while (i >= 0 && ps_layer_ops(m->layers[i].kind)->view)
    i = m->layers[i].input_from;
  return i;
}

/* A tensor no kernel writes: the output of relu or gelu (fused into its
 * producer, keeping its input) or of batch normalization (deferred into
 * its consumer); whoever reads it recomputes it from the kept input. */
static gboolean recomputed(const PsModel *m, int t)
{
  if (t < 0)
    return FALSE;
  const PsLayer *L = &m->layers[t];
  PsLayerLowering how = ps_layer_kind_lower(L->kind)->lowering;
  return (how == PS_LOWER_UNARY && L->saves == PS_SAVES_INPUT) ||
         how == PS_LOWER_NORM_STATS;
}

/* The tensor layer i's backward reads besides its own, or PS_NO_TENSOR. */
#define PS_NO_TENSOR (-2)
static int needed(const PsModel *m, int i)
{
  const PsLayer *L = &m->layers[i];
  if (L->saves == PS_SAVES_NONE)
    return PS_NO_TENSOR;
  return tensor_of(m, L->saves == PS_SAVES_INPUT ? L->input_from : i);
}

/* Adds to act_elems the tensors between layers that backward reads, each
 * once, to the first layer (in forward order) that needs it. */
static void share_kept(PsModel *m)
{
  gboolean *counted = g_new0(gboolean, m->n_layers + 1); /* [t + 1] */
  for (int i = 0; i < m->n_layers; i++) {
    PsLayer *L = &m->layers[i];
    int t = needed(m, i);
    if (t == PS_NO_TENSOR || counted[t + 1] || recomputed(m, t))
      continue;
    counted[t + 1] = TRUE;
    L->act_elems += t < 0 ? ps_shape_elems(m->in_shape, m->in_rank)
                          : ps_shape_elems(m->layers[t].out_shape, m->layers[t].out_rank);
  }
  g_free(counted);
}

int64_t ps_model_boundary_elems(const PsModel *model, int first, int last)
{
  g_return_val_if_fail(model != NULL && first >= 0 && first <= last &&
                           last <= model->n_layers, 0);
  if (first == 0)
    return 0;
  /* for each tensor made before `first` ([t + 1]): whether a layer before
   * `first` keeps it, whether one in the range needs it */
  gboolean *before = g_new0(gboolean, first + 1), *inside = g_new0(gboolean, first + 1);
  for (int i = 0; i < last; i++) {
    int t = needed(model, i);
    if (t != PS_NO_TENSOR && t < first)
      (i < first ? before : inside)[t + 1] = TRUE;
  }
  int64_t elems = 0;
  for (int t = -1; t < first; t++)
    /* kept by an earlier layer, or never written: this range holds it */
    if (inside[t + 1] && (before[t + 1] || recomputed(model, t)))
      elems += t < 0 ? ps_shape_elems(model->in_shape, model->in_rank)
                     : ps_shape_elems(model->layers[t].out_shape, model->layers[t].out_rank);
  g_free(before);
  g_free(inside);
  return elems;
}

int64_t ps_layer_mask_bytes(const PsLayer *L, int64_t batch)
{
  g_return_val_if_fail(L != NULL && batch >= 0, 0);
  return L->mask_elems * PS_MASK_BYTES * batch;
}

int64_t ps_model_mask_bytes(const PsModel *model, int first, int last)
{
  g_return_val_if_fail(model != NULL && first >= 0 && last <= model->n_layers, 0);
  int64_t b = 0;
  for (int i = first; i < last; i++)
    b += ps_layer_mask_bytes(&model->layers[i], 1);
  return b;
}

int64_t ps_layer_kept_bytes(const PsLayer *L, int64_t batch, int act_bytes)
{
  g_return_val_if_fail(L != NULL && batch >= 0 && act_bytes >= 0, 0);
  return (L->act_elems * act_bytes + L->stat_elems * 4 + L->mask_elems * PS_MASK_BYTES) * batch;
}

/* The model's totals per example, and whether numerics support it. */
static gboolean sum_totals(PsModel *m, const char *file, const char *lpath, GError **error)
{
  /* Each layer is within MAX_ELEMS, but many of them can sum past int64:
   * the totals are checked in doubles first. */
  /* one layer gains at most one tensor (each within MAX_ELEMS): no
   * overflow before the check */
  share_kept(m);
  double total_params = 0, total_act = 0;
  for (int i = 0; i < m->n_layers; i++) {
    total_params += (double)m->layers[i].params;
    total_act += (double)m->layers[i].act_elems + (double)m->layers[i].stat_elems +
                 (double)m->layers[i].mask_elems;
  }
  if (!check_size(total_params, "the model's parameter count", file, lpath, error) ||
      !check_size(total_act, "the model's activation count per example", file, lpath, error))
    return FALSE;

  /* one label per row of logits: 1 for a vector, S for per-token (S, V) */
  const PsLayer *last = &m->layers[m->n_layers - 1];
  m->labels_per_example = 1;
  for (int k = 0; k + 1 < last->in_rank; k++)
    m->labels_per_example *= last->in_shape[k];
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
  if (m->params > PS_NUMERICS_MAX_PARAMS)
    m->numerics_supported = FALSE;
  return TRUE;
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

  m->n_layers = (int)b.layers->len;
  m->layers = (PsLayer *)(void *)b.layers->data;
  if (!check_loss(m, b.names, file, path, lpath, error) || !sum_totals(m, file, lpath, error))
    goto fail_layers;
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
    act += ps_layer_kept_bytes(&model->layers[i], 1, act_bytes);
  }
  act += ps_model_boundary_elems(model, first, last) * act_bytes;
  /* In doubles, saturating at INT64_MAX: a huge batch must read as "does
   * not fit", not wrap around to a small number. */
  double need = (double)params * 4 * (2 + optimizer_slots) + (double)act * (double)batch;
  if (need >= 9.2e18)
    return INT64_MAX;
  return params * 4 * (2 + optimizer_slots) + act * batch;
}

/* Model FLOPs as PaLM counts them (Chowdhery et al. 2022, appendix B):
 * the matmuls of a forward and a backward pass, the backward's two
 * products (input and weight gradients) each the forward's size, so 3x
 * the forward's; re-materialization and padding are not the model's.  For
 * a decoder this is PaLM's 6N + 12 L H Q T per token: each weight matrix
 * a token passes through gives 6 FLOPs per weight, and attention's score
 * and context products 4 L H Q T forward, over the whole T x T square
 * (PaLM does not halve causal attention, nor does this; a sliding window
 * narrows T to the keys it lets a query see).  Token embedding
 * lookups are no matmul and count nothing; PaLM's N holds its embedding
 * because its output layer reuses that table, which here is the output
 * dense layer's matmul. */
int64_t ps_layer_adapted_params(const PsLayer *L)
{
  g_return_val_if_fail(L != NULL, 0);
  switch (L->kind) {
  case PS_LAYER_BATCHNORM:
  case PS_LAYER_LAYERNORM:
  case PS_LAYER_RMSNORM:
    return 0;
  case PS_LAYER_DENSE:
    return L->bias ? L->params - L->units : L->params;
  case PS_LAYER_CONV2D:
    return L->bias ? L->params - L->filters : L->params;
  default:
    return L->params;
  }
}

/* An attention layer's score and context FLOPs over the whole square of
 * its sequence (its matmuls 1 and 2), and the share of that square model
 * FLOPs count (the window's, ps_attention_model_scores); 0 for another
 * layer. */
static double attention_square_flops(const PsLayer *L, double *counted)
{
  *counted = 1.0;
  if (L->kind != PS_LAYER_ATTENTION || L->n_mm < 3)
    return 0;
  const int64_t s = L->in_shape[0];
  *counted = ps_attention_model_scores(L, s) / ((double)s * (double)s);
  double f = 0;
  for (int m = 1; m <= 2; m++)
    f += 2.0 * (double)L->mm[m].rows * (double)L->mm[m].k * (double)L->mm[m].n *
         (double)L->mm[m].count;
  return f;
}

/* The score and context FLOPs an attention layer's window hides from a
 * query: none without one. */
static double window_unseen(const PsLayer *L)
{
  double counted;
  double f = attention_square_flops(L, &counted);
  return f * (1.0 - counted);
}

/* The FLOPs a mixture of experts with a capacity spends beyond the useful
 * ones: its dispatch and combine products and its experts' empty slots
 * (E C rows where S k are routed; fewer slots than S k, a factor under 1,
 * subtract, so the model FLOPs stay S k's); none when dropless. */
static double moe_overhead(const PsLayer *L)
{
  if (L->kind != PS_LAYER_MOE || L->capacity <= 0)
    return 0;
  const double routed = (double)(L->in_rank == 2 ? L->in_shape[0] : 1) * (double)L->top_k;
  double f = 0;
  for (int m = 0; m < L->n_mm; m++) {
    const PsMatmul *mm = &L->mm[m];
    double one = 2.0 * (double)mm->rows * (double)mm->k * (double)mm->n * (double)mm->count;
    PsMoeProduct r = ps_moe_product(L, m);
    if (r == PS_MOE_DISPATCH || r == PS_MOE_COMBINE)
      f += one;
    else if ((r == PS_MOE_GATE_UP || r == PS_MOE_DOWN) && m <= 2)
      f += one * (1.0 - routed / (double)mm->rows); /* the routed experts': negative
                                                       when the slots hold fewer than
                                                       the S k routed copies */
  }
  return f;
}

double ps_model_flops_per_example(const PsModel *model)
{
  g_return_val_if_fail(model != NULL, 0);
  double fwd = 0;
  for (int i = 0; i < model->n_layers; i++)
    if (model->layers[i].kind != PS_LAYER_EMBEDDING)
      fwd += ps_layer_matmul_flops(&model->layers[i]) - window_unseen(&model->layers[i]) -
             moe_overhead(&model->layers[i]);
  return 3.0 * fwd;
}

double ps_model_flops_causal_halved_per_example(const PsModel *model)
{
  g_return_val_if_fail(model != NULL, 0);
  double halved = 0;
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *L = &model->layers[i];
    double counted;
    double f = attention_square_flops(L, &counted);
    if (L->causal)
      halved += 0.5 * f * counted;
  }
  return ps_model_flops_per_example(model) - 3.0 * halved;
}

void ps_model_describe(const PsModel *model, GString *out)
{
  g_return_if_fail(model != NULL && out != NULL);
  int w = 4;
  for (int i = 0; i < model->n_layers; i++)
    w = MAX(w, (int)strlen(model->layers[i].name));
  w = MIN(w, 48);
  g_autofree char *ins = ps_layer_shape_str(model->in_shape, model->in_rank);
  g_string_append_printf(out, "model %s (%s)\n", model->name, model->file);
  if (model->description && *model->description)
    g_string_append_printf(out, "  %s\n", model->description);
  g_string_append_printf(out, "input %s%s, %" G_GINT64_FORMAT " classes\n\n", ins,
                         model->token_input ? " token ids" : "", model->classes);
  g_string_append_printf(out, "%5s  %-*s  %-15s  %-18s  %14s  %14s\n", "#", w, "name", "kind",
                         "output", "params", "fwd MFLOP/ex");
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *L = &model->layers[i];
    g_autofree char *os = ps_layer_shape_str(L->out_shape, L->out_rank);
    g_string_append_printf(out, "%5d  %-*s  %-15s  %-18s  %14" G_GINT64_FORMAT "  %14.3f\n", i,
                           w, L->name, ps_layer_kind_name(L->kind), os, L->params,
                           L->fwd_flops / 1e6);
  }
  g_string_append_printf(out,
                         "\n%d layers, %" G_GINT64_FORMAT " parameters (%.2f M)\n"
                         "per example: forward %.4g GFLOP, backward %.4g GFLOP, "
                         "%.4g M activation elements kept for backward\n"
                         "numerics: %s%s\n",
                         model->n_layers, model->params, (double)model->params / 1e6,
                         model->fwd_flops / 1e9, model->bwd_flops / 1e9,
                         (double)model->act_elems / 1e6,
                         model->numerics_supported ? "supported" : "timing only",
                         model->params > PS_NUMERICS_MAX_PARAMS
                             ? " (over the 2^28 parameters numerics compute)"
                             : "");
  for (int i = 0; i < model->n_layers; i++)
    if (model->layers[i].lookup_matmul)
      g_string_append_printf(out,
                             "%s: looked up as a one-hot matmul (\"lookup\": \"matmul\"), its "
                             "FLOPs the product's; the model FLOPs of MFU leave it out\n",
                             model->layers[i].name);
  /* each expert capacity once: how many mixtures of experts have it, the first */
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *L = &model->layers[i];
    gboolean seen = FALSE;
    for (int j = 0; j < i && !seen; j++)
      seen = model->layers[j].kind == PS_LAYER_MOE && model->layers[j].capacity == L->capacity;
    if (L->kind != PS_LAYER_MOE || L->capacity <= 0 || seen)
      continue;
    int n = 0;
    for (int j = 0; j < model->n_layers; j++)
      n += model->layers[j].kind == PS_LAYER_MOE && model->layers[j].capacity == L->capacity;
    g_string_append_printf(out,
                           "%s: each expert takes at most %" G_GINT64_FORMAT
                           " positions of a sequence (\"capacity_factor\": %g), the rest "
                           "dropped; positions reach the experts and return through dispatch and "
                           "combine products "
                           "(%d such layer%s); the model FLOPs of MFU leave those and the empty "
                           "slots out\n",
                           L->name, L->capacity, L->capacity_factor, n, n == 1 ? "" : "s");
  }
  /* each sliding window once: how many attention layers have it, the first */
  for (int i = 0; i < model->n_layers; i++) {
    const PsLayer *L = &model->layers[i];
    gboolean seen = FALSE;
    for (int j = 0; j < i && !seen; j++)
      seen = model->layers[j].kind == PS_LAYER_ATTENTION && model->layers[j].window == L->window;
    if (L->kind != PS_LAYER_ATTENTION || L->window <= 0 || seen)
      continue;
    int n = 0, all = 0;
    for (int j = 0; j < model->n_layers; j++) {
      all += model->layers[j].kind == PS_LAYER_ATTENTION;
      n += model->layers[j].kind == PS_LAYER_ATTENTION && model->layers[j].window == L->window;
    }
    g_string_append_printf(out,
                           "%s: a sliding window of %" G_GINT64_FORMAT " positions (\"window\"), "
                           "as %d of the %d attention layers\n",
                           L->name, L->window, n, all);
  }
}

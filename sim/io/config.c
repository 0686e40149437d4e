/* config.c: experiment configs and what every config shares: tree
 * helpers, --set overrides on the resolved tree, and every check io can
 * make of a user's experiment (topology files are read by topology.c, names
 * are found along the data search path by lookup.c, the "faults" section
 * by config-faults.c, the strategy section by the strategy it names, at the
 * run layer).
 *
 * Invariant: a PsTopology or PsExperiment leaves this file only after all
 * of its checks have passed; every failure is a PS_INPUT_ERROR whose
 * message reads "FILE: JSON.PATH: reason" and says what to change. */
#include "io/config-private.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Fashion-MNIST: 60,000 training images of 28x28x1 in 10 classes. */
#define FASHION_MNIST_TRAIN 60000
#define FASHION_MNIST_ELEMS 784
#define FASHION_MNIST_CLASSES 10
#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"


const char *ps_config__where(const char *path)
{
  return (path && *path) ? path : "(root)";
}

void ps_config__fail(GError **error, int code, const char *file, const char *path, const char *fmt,
                 ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *reason = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, PS_INPUT_ERROR, code, "%s: %s: %s", file, ps_config__where(path), reason);
}

/* A double that prints as written by a person ("1e-06", not
 * "9.9999999999999995e-07").  (transfer full) */
json_object *ps_config__new_double(double d)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(buf, sizeof buf, "%.15g", d);
  if (!strpbrk(buf, ".eEni"))
    g_strlcat(buf, ".0", sizeof buf);
  return json_object_new_double_s(d, buf);
}


double ps_config__gib(int64_t bytes)
{
  return (double)bytes / GIB;
}

/* ======================================================= tree helpers */

/* (transfer full) */
json_object *ps_config__deep_copy(json_object *src)
{
  json_object *dst = NULL;
  if (src && json_object_deep_copy(src, &dst, NULL) != 0)
    g_error("config: out of memory copying a JSON tree");
  return dst;
}

/* Recursively writes src's keys over dst: objects merge, anything else
 * (numbers, strings, arrays) replaces. */
void ps_config__merge_over(json_object *dst, json_object *src)
{
  json_object_object_foreach(src, key, val) {
    json_object *d = NULL;
    if (val && json_object_is_type(val, json_type_object) &&
        json_object_object_get_ex(dst, key, &d) && d && json_object_is_type(d, json_type_object))
      ps_config__merge_over(d, val);
    else
      json_object_object_add(dst, key, ps_config__deep_copy(val));
  }
}

/* The member `key` of obj when it must be an object: NULL and TRUE when
 * absent and optional.  *sub is (transfer none). */
gboolean ps_config__get_object(json_object *obj, const char *file, const char *path, const char *key,
                           gboolean required, json_object **sub, GError **error)
{
  json_object *v = NULL;
  *sub = NULL;
  if (!json_object_object_get_ex(obj, key, &v) || v == NULL) {
    if (required) {
      ps_config__fail(error, PS_INPUT_ERROR_KEY, file, path, "missing required key '%s'", key);
      return FALSE;
    }
    return TRUE;
  }
  g_autofree char *p = ps_json_path_join(path, key);
  if (!ps_json_expect_object(v, file, p, error))
    return FALSE;
  *sub = v;
  return TRUE;
}

/* An array element as an integer (an integral double counts). */
gboolean ps_config__elem_int(json_object *v, int64_t *out)
{
  if (json_object_is_type(v, json_type_int)) {
    *out = json_object_get_int64(v);
    return TRUE;
  }
  if (json_object_is_type(v, json_type_double)) {
    double d = json_object_get_double(v);
    if (fabs(d) < 9e18 && d == floor(d)) {
      *out = (int64_t)d;
      return TRUE;
    }
  }
  return FALSE;
}

/* The key of an assignment "a.b=v", stripped.  (transfer full) */
char *ps_config__override_key(const char *assignment)
{
  const char *eq = strchr(assignment, '=');
  char *k = eq ? g_strndup(assignment, (gsize)(eq - assignment)) : g_strdup(assignment);
  return g_strstrip(k);
}

/* ======================================================== experiment */

static const char *const experiment_keys[] = {
    "name",          "description", "topology",         "model",    "global_batch",
    "steps",         "epochs",      "steps_per_run",    "log_every", "fuse_elementwise",
    "fusion",        "attention_kernel", "attention_blocks",
    "strategy",      "input",       "optimizer",        "numerics", "outside_compilation",
    "collective",    "faults",      NULL};
static const char *const collective_keys[] = {"algorithm", "chunk_bytes", "max_in_flight",
                                                 "fast_path", "on_core", NULL};
/* collective.on_core's names, in PsCollOp order (collectives/collective.h) */
static const char *const on_core_kinds[] = {"all-reduce", "reduce-scatter", "all-gather", NULL};
/* collective.on_core's default: every kind on the TensorCore, as XLA runs
 * them unless its SparseCore offload flags move them (TPU v2 to v5e have
 * no such offload; the Trillium and Ironwood recipes set the flags,
 * xla_tpu_enable_sparse_core_collective_offload_* and their library's
 * ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE, to turn it on) */
#define ON_CORE_DEFAULT 7u

json_object *ps_config_on_core_to_json(unsigned on_core)
{
  json_object *a = json_object_new_array();
  for (int k = 0; on_core_kinds[k]; k++)
    if (on_core & (1u << k))
      json_object_array_add(a, json_object_new_string(on_core_kinds[k]));
  return a;
}

char *ps_config_on_core_text(unsigned on_core)
{
  GString *names = g_string_new(NULL);
  for (int k = 0; on_core_kinds[k]; k++)
    if (on_core & (1u << k))
      g_string_append_printf(names, "%s%s", names->len ? ", " : "", on_core_kinds[k]);
  return g_string_free(names, FALSE);
}
static const char *const collective_algorithms[] = {"auto",  "ring",      "bidir",
                                                     "torus", "multiring", "hierarchical",
                                                     NULL};
static const char *const host_call_keys[] = {"after", "kind", "bins", "flops_per_element", NULL};
static const char *const host_call_kinds[] = {"histogram", "roundtrip", NULL};
static const char *const input_keys[] = {"source",   "data_dir",        "host_cost_per_example_s",
                                         "workers",  "prefetch",        "infeed_capacity",
                                         "synthetic_examples", "shuffle", "outfeed_capacity",
                                         "file", "sequence", "stride", "test_fraction", NULL};
static const char *const optimizer_keys[] = {"kind",         "learning_rate",     "momentum",
                                             "beta1",        "beta2",             "epsilon",
                                             "schedule",     "weight_decay",      "trust_coefficient",
                                             "clip_norm",    "clip_before_reduce", NULL};
static const char *const lr_schedules[] = {"constant", "cosine", NULL};
static const char *const numerics_keys[] = {"enabled",          "precision",
                                            "seed",             "evaluate",
                                            "matmul_precision", "weight_precision",
                                            "quantization",     NULL};
static const char *const quantizations[] = {"none", "fp8", "int8", NULL};
/* XLA's PrecisionConfig (jax.lax.Precision): bf16 MXU passes of a float32
 * matmul are 1, 3 and 6 (docs.jax.dev "Matmul precision"; jax issue #1856:
 * the TPU default multiplies float32 in bfloat16 with float32 accumulation). */
static const char *const matmul_precisions[] = {"default", "high", "highest", NULL};
static const int matmul_precision_passes[] = {1, 3, 6};
static const char *const fusions[] = {"xla", "none", "ideal", NULL};
/* "attention_kernel": every attention layer as its model file says, or
 * all of them flash attention, or none (the scores kept whole). */
static const char *const attention_kernels[] = {"model", "flash", "unfused", NULL};

static const char *const sources[] = {"fashion-mnist", "synthetic", "text", NULL};
static const char *const optimizer_kinds[] = {"sgd", "adam", "lars", "lamb", NULL};
static const char *const precisions[] = {"f32", "bf16", NULL};

/* Where each part of the resolved tree came from, for messages. */
typedef struct {
  char *file;           /* the experiment file */
  char *topo_file;      /* file holding the topology, and its path there */
  char *topo_path;
  char *model_file;
  char *model_path;
  json_object *root;    /* the resolved tree (owned) */
} Resolution;

static void resolution_clear(Resolution *r)
{
  g_free(r->file);
  g_free(r->topo_file);
  g_free(r->topo_path);
  g_free(r->model_file);
  g_free(r->model_path);
  if (r->root)
    json_object_put(r->root);
  memset(r, 0, sizeof *r);
}

/* Replaces root.topology (a name, a path or an inline object) by the
 * topology's tree with its bases merged in. */
static gboolean resolve_topology(Resolution *r, GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(r->root, "topology", &v) || !v) {
    ps_config__fail(error, PS_INPUT_ERROR_KEY, r->file, "", "missing required key 'topology' (a name such "
         "as \"tpu-v3-8\", a path, or an object; see `podsim list topologies`)");
    return FALSE;
  }
  g_autoptr(GPtrArray) chain = g_ptr_array_new_with_free_func(g_free);
  json_object *tree;
  if (json_object_is_type(v, json_type_string)) {
    char *tfile = ps_config__find_config("topologies", json_object_get_string(v), r->file, "topology",
                              FALSE, error);
    if (!tfile)
      return FALSE;
    g_ptr_array_add(chain, g_canonicalize_filename(tfile, NULL));
    tree = ps_config__topology_tree_load(tfile, chain, error);
    r->topo_file = tfile;
    r->topo_path = g_strdup("");
  } else if (json_object_is_type(v, json_type_object)) {
    tree = ps_config__topology_merge_extends(v, r->file, "topology", chain, error);
    r->topo_file = g_strdup(r->file);
    r->topo_path = g_strdup("topology");
  } else {
    ps_config__fail(error, PS_INPUT_ERROR_TYPE, r->file, "topology",
         "must be a topology name, a path or an object, got %s", ps_json_type_name(v));
    return FALSE;
  }
  if (!tree)
    return FALSE;
  json_object_object_add(r->root, "topology", tree);
  return TRUE;
}

static gboolean resolve_model(Resolution *r, GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(r->root, "model", &v) || !v) {
    ps_config__fail(error, PS_INPUT_ERROR_KEY, r->file, "",
         "missing required key 'model' (a name, a path, or an object; see `podsim list "
         "models`)");
    return FALSE;
  }
  if (json_object_is_type(v, json_type_string)) {
    char *mfile = ps_config__find_config("models", json_object_get_string(v), r->file, "model", FALSE,
                              error);
    if (!mfile)
      return FALSE;
    r->model_file = mfile;
    r->model_path = g_strdup("");
    json_object *tree = ps_json_load_file(mfile, error);
    if (!tree)
      return FALSE;
    if (!ps_json_expect_object(tree, mfile, "", error)) {
      json_object_put(tree);
      return FALSE;
    }
    json_object_object_add(r->root, "model", tree);
    return TRUE;
  }
  if (json_object_is_type(v, json_type_object)) {
    r->model_file = g_strdup(r->file);
    r->model_path = g_strdup("model");
    return TRUE;
  }
  ps_config__fail(error, PS_INPUT_ERROR_TYPE, r->file, "model",
       "must be a model name, a path or an object, got %s", ps_json_type_name(v));
  return FALSE;
}

/* "strategy": an object whose "kind" (a string, when given) names the
 * strategy that reads the rest (strategy/strategy.h), at the run layer. */
static gboolean parse_strategy_section(json_object *root, const char *file,
                                       PsStrategySection *s, GError **error)
{
  json_object *o;
  const char *kind = NULL;
  if (!ps_config__get_object(root, file, "", "strategy", FALSE, &o, error) ||
      (o && !ps_json_get_string(o, file, "strategy", "kind", FALSE, &kind, error)))
    return FALSE;
  s->kind = g_strdup(kind);
  s->json = o ? json_object_get(o) : NULL;
  return TRUE;
}

static gboolean parse_input(json_object *root, const char *file, PsInputConfig *in,
                            GError **error)
{
  in->source = PS_SOURCE_SYNTHETIC;
  in->host_cost_per_example_s = 0;
  in->workers = 1;
  in->prefetch = 2;
  in->infeed_capacity = 2;
  in->outfeed_capacity = 2;
  in->synthetic_examples = 60000;
  in->shuffle = TRUE;
  const char *dir = DEFAULT_DATA_DIR;
  json_object *o;
  if (!ps_config__get_object(root, file, "", "input", FALSE, &o, error))
    return FALSE;
  if (o) {
    const char *p = "input";
    int src = in->source;
    if (!ps_json_check_keys(o, file, p, input_keys, error) ||
        !ps_json_get_enum(o, file, p, "source", FALSE, sources, &src, error) ||
        !ps_json_get_string(o, file, p, "data_dir", FALSE, &dir, error) ||
        !ps_json_get_double(o, file, p, "host_cost_per_example_s", FALSE, 0, FALSE, INFINITY,
                            &in->host_cost_per_example_s, error) ||
        !ps_json_get_int32(o, file, p, "workers", FALSE, 1, 1 << 16, &in->workers, error) ||
        !ps_json_get_int32(o, file, p, "prefetch", FALSE, 1, 1 << 20, &in->prefetch, error) ||
        !ps_json_get_int32(o, file, p, "infeed_capacity", FALSE, 1, 1 << 20,
                           &in->infeed_capacity, error) ||
        !ps_json_get_int32(o, file, p, "outfeed_capacity", FALSE, 1, 1 << 20,
                           &in->outfeed_capacity, error) ||
        !ps_json_get_int(o, file, p, "synthetic_examples", FALSE, 1, INT64_MAX,
                         &in->synthetic_examples, error) ||
        !ps_json_get_bool(o, file, p, "shuffle", FALSE, &in->shuffle, error))
      return FALSE;
    in->source = (PsSourceKind)src;
  }
  in->data_dir = g_strdup(dir);
  return ps_config__parse_text(o, file, in, error);
}

static gint cmp_host_call(gconstpointer a, gconstpointer b)
{
  return ((const PsHostCall *)a)->after - ((const PsHostCall *)b)->after;
}

/* "outside_compilation": [{"after": LAYER, "kind": "histogram"|"roundtrip",
 * "bins": N, "flops_per_element": F}, ...] */
static gboolean parse_host_calls(json_object *root, const char *file, PsExperiment *e,
                                 GError **error)
{
  json_object *arr = NULL;
  if (!json_object_object_get_ex(root, "outside_compilation", &arr) || !arr)
    return TRUE;
  if (!json_object_is_type(arr, json_type_array)) {
    ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, "outside_compilation", "must be an array, got %s",
         ps_json_type_name(arr));
    return FALSE;
  }
  int n = (int)json_object_array_length(arr);
  e->host_calls = g_new0(PsHostCall, n ? n : 1);
  for (int i = 0; i < n; i++) {
    g_autofree char *p = ps_json_path_index("outside_compilation", i);
    json_object *o = json_object_array_get_idx(arr, i);
    PsHostCall *h = &e->host_calls[i];
    const char *after = NULL;
    int kind = PS_HOST_CALL_HISTOGRAM;
    h->bins = 32;
    h->flops_per_element = 4;
    if (!ps_json_expect_object(o, file, p, error) ||
        !ps_json_check_keys(o, file, p, host_call_keys, error) ||
        !ps_json_get_string(o, file, p, "after", TRUE, &after, error) ||
        !ps_json_get_enum(o, file, p, "kind", FALSE, host_call_kinds, &kind, error) ||
        !ps_json_get_int32(o, file, p, "bins", FALSE, 1, 1 << 20, &h->bins, error) ||
        !ps_json_get_double(o, file, p, "flops_per_element", FALSE, 0, FALSE, 1e9,
                            &h->flops_per_element, error))
      return FALSE;
    h->kind = (PsHostCallKind)kind;
    h->after = -1;
    for (int l = 0; l < e->model->n_layers; l++)
      if (strcmp(e->model->layers[l].name, after) == 0)
        h->after = l;
    if (h->after < 0 || h->after == e->model->n_layers - 1) {
      g_autofree char *kp = ps_json_path_join(p, "after");
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp,
           h->after < 0 ? "no layer named '%s' in model '%s' (see `podsim describe model %s`)"
                        : "'%s' is the loss of model '%s': pick a layer before it%s",
           after, e->model->name, h->after < 0 ? e->model->name : "");
      return FALSE;
    }
    e->n_host_calls++;
  }
  qsort(e->host_calls, (size_t)n, sizeof(PsHostCall), cmp_host_call);
  for (int i = 1; i < n; i++)
    if (e->host_calls[i].after == e->host_calls[i - 1].after) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, "outside_compilation",
           "two calls after layer '%s'; merge them into one",
           e->model->layers[e->host_calls[i].after].name);
      return FALSE;
    }
  return TRUE;
}

/* "on_core": a list of collective kinds the TensorCore runs itself, each
 * at most once. */
static gboolean parse_on_core(json_object *o, const char *file, PsCollectiveConfig *c,
                              GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, "on_core", &v) || !v)
    return TRUE;
  if (!json_object_is_type(v, json_type_array))
    goto bad;
  c->on_core = 0;
  for (size_t i = 0; i < json_object_array_length(v); i++) {
    json_object *x = json_object_array_get_idx(v, i);
    const char *s = json_object_is_type(x, json_type_string) ? json_object_get_string(x) : "";
    int k = 0;
    while (on_core_kinds[k] && strcmp(on_core_kinds[k], s) != 0)
      k++;
    if (!on_core_kinds[k] || (c->on_core & (1u << k))) {
      g_autofree char *path = g_strdup_printf("collective.on_core[%zu]", i);
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, path,
                      "%s %s: each entry is one of \"all-reduce\", \"reduce-scatter\" and "
                      "\"all-gather\" (the collective kinds the TensorCore runs itself, not "
                      "offloaded to the SparseCores), at most once",
                      on_core_kinds[k] ? "repeats" : "is not a collective kind:",
                      json_object_to_json_string_ext(x, JSON_C_TO_STRING_PLAIN));
      return FALSE;
    }
    c->on_core |= 1u << k;
  }
  return TRUE;
bad:
  ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, "collective.on_core",
                  "must be a list of distinct collective kinds among \"all-reduce\", "
                  "\"reduce-scatter\" and \"all-gather\" (the ones the TensorCore runs "
                  "itself, not offloaded to the SparseCores), e.g. [\"all-gather\", "
                  "\"reduce-scatter\"]; [] for none (all offloaded); the default is all three");
  return FALSE;
}

/* "collective": {"algorithm": "auto"|"ring"|"bidir"|"torus"|"multiring", "chunk_bytes",
 *                "max_in_flight", "fast_path"} */
static gboolean parse_collective(json_object *root, const char *file, PsCollectiveConfig *c,
                                 GError **error)
{
  int algo = 0;
  c->chunk_bytes = INT64_C(1) << 20;
  c->max_in_flight = 1; /* XLA's all_reduce_overlap_limit (config.h) */
  c->fast_path = FALSE;
  c->on_core = ON_CORE_DEFAULT;
  json_object *o;
  if (!ps_config__get_object(root, file, "", "collective", FALSE, &o, error))
    return FALSE;
  if (o && (!ps_json_check_keys(o, file, "collective", collective_keys, error) ||
            !ps_json_get_enum(o, file, "collective", "algorithm", FALSE, collective_algorithms,
                              &algo, error) ||
            !ps_json_get_int(o, file, "collective", "chunk_bytes", FALSE, 1, INT64_C(1) << 40,
                             &c->chunk_bytes, error) ||
            !ps_json_get_int(o, file, "collective", "max_in_flight", FALSE, 0, 1 << 20,
                             &c->max_in_flight, error) ||
            !ps_json_get_bool(o, file, "collective", "fast_path", FALSE, &c->fast_path,
                              error) ||
            !parse_on_core(o, file, c, error)))
    return FALSE;
  c->algorithm = g_strdup(collective_algorithms[algo]);
  return TRUE;
}

/* A probability-like parameter in [0, 1). */
static gboolean get_unit_interval(json_object *o, const char *file, const char *p,
                                  const char *key, double *out, GError **error)
{
  double v = *out;
  if (!ps_json_get_double(o, file, p, key, FALSE, 0, FALSE, INFINITY, &v, error))
    return FALSE;
  if (v >= 1.0) {
    g_autofree char *kp = ps_json_path_join(p, key);
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp, "must be >= 0 and < 1, got %g", v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean parse_optimizer(json_object *root, const char *file, PsOptimizerConfig *opt,
                                GError **error)
{
  opt->kind = PS_OPT_SGD;
  opt->learning_rate = 0.01;
  opt->momentum = 0.9;
  opt->beta1 = 0.9;
  opt->beta2 = 0.999;
  opt->epsilon = 1e-7;
  opt->weight_decay = 0.0;
  opt->trust_coefficient = 0.001; /* You et al. 2017, section 4: eta = 0.001 */
  opt->clip_norm = 0.0; /* no clipping */
  opt->clip_before_reduce = FALSE;
  json_object *o;
  if (!ps_config__get_object(root, file, "", "optimizer", FALSE, &o, error))
    return FALSE;
  if (!o)
    return TRUE;
  const char *p = "optimizer";
  int kind = opt->kind, sched = PS_LR_CONSTANT;
  if (!ps_json_check_keys(o, file, p, optimizer_keys, error) ||
      !ps_json_get_enum(o, file, p, "kind", FALSE, optimizer_kinds, &kind, error) ||
      !ps_json_get_double(o, file, p, "learning_rate", FALSE, 0, TRUE, INFINITY,
                          &opt->learning_rate, error) ||
      !get_unit_interval(o, file, p, "momentum", &opt->momentum, error) ||
      !get_unit_interval(o, file, p, "beta1", &opt->beta1, error) ||
      !get_unit_interval(o, file, p, "beta2", &opt->beta2, error) ||
      !ps_json_get_double(o, file, p, "epsilon", FALSE, 0, TRUE, INFINITY, &opt->epsilon,
                          error) ||
      !ps_json_get_enum(o, file, p, "schedule", FALSE, lr_schedules, &sched, error) ||
      !ps_json_get_double(o, file, p, "weight_decay", FALSE, 0, FALSE, INFINITY,
                          &opt->weight_decay, error) ||
      !ps_json_get_double(o, file, p, "trust_coefficient", FALSE, 0, TRUE, INFINITY,
                          &opt->trust_coefficient, error) ||
      !ps_json_get_double(o, file, p, "clip_norm", FALSE, 0, FALSE, INFINITY, &opt->clip_norm,
                          error) ||
      !ps_json_get_bool(o, file, p, "clip_before_reduce", FALSE, &opt->clip_before_reduce,
                        error))
    return FALSE;
  opt->kind = (PsOptimizerKind)kind;
  opt->schedule = (PsLrSchedule)sched;
  return TRUE;
}

static gboolean parse_numerics(json_object *root, const char *file, gboolean default_enabled,
                               PsNumericsConfig *n, GError **error)
{
  n->enabled = default_enabled;
  n->precision = PS_PRECISION_F32;
  n->seed = 1;
  n->evaluate = TRUE;
  n->matmul_passes = 1;
  n->weight_precision = PS_PRECISION_F32;
  json_object *o;
  if (!ps_config__get_object(root, file, "", "numerics", FALSE, &o, error))
    return FALSE;
  if (!o)
    return TRUE;
  const char *p = "numerics";
  int prec = n->precision, wprec = n->weight_precision;
  int64_t seed = 1;
  int mp = 0, quant = PS_QUANT_NONE;
  if (!ps_json_check_keys(o, file, p, numerics_keys, error) ||
      !ps_json_get_enum(o, file, p, "matmul_precision", FALSE, matmul_precisions, &mp,
                        error) ||
      !ps_json_get_bool(o, file, p, "enabled", FALSE, &n->enabled, error) ||
      !ps_json_get_enum(o, file, p, "precision", FALSE, precisions, &prec, error) ||
      !ps_json_get_enum(o, file, p, "weight_precision", FALSE, precisions, &wprec, error) ||
      !ps_json_get_int(o, file, p, "seed", FALSE, 0, INT64_MAX, &seed, error) ||
      !ps_json_get_bool(o, file, p, "evaluate", FALSE, &n->evaluate, error) ||
      !ps_json_get_enum(o, file, p, "quantization", FALSE, quantizations, &quant, error))
    return FALSE;
  n->quantization = (PsQuantization)quant;
  n->precision = (PsPrecision)prec;
  n->weight_precision = (PsPrecision)wprec;
  n->seed = (uint64_t)seed;
  n->matmul_passes = matmul_precision_passes[mp];
  return TRUE;
}

static char *shape_text(const int64_t *shape, int rank)
{
  GString *s = g_string_new("(");
  for (int i = 0; i < rank; i++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c(s, ')');
  return g_string_free(s, FALSE);
}

/* What io can judge of the whole: the numerics and input against the
 * model.  The strategy's checks run at the run layer (run/experiment.h). */
static gboolean check_experiment(PsExperiment *e, GError **error)
{
  const char *f = e->file;
  const PsModel *m = e->model;

  const char *q = quantizations[e->numerics.quantization];
  if (e->numerics.quantization != PS_QUANT_NONE &&
      ps_config_quant_peak(e->topology, e->numerics.quantization) <= 0) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "numerics.quantization",
         "%s runs the weight products at the chip's %s rate, but %s gives none "
         "(chip.%s_peak_flops; %s); use numerics.quantization=\"none\" or such a topology",
         q, q, e->topology->name, q,
         e->numerics.quantization == PS_QUANT_FP8 ? "TPU7x has one, twice its bf16 peak"
                                                  : "v5e, v5p and v6e have one");
    return FALSE;
  }
  if (e->numerics.quantization != PS_QUANT_NONE && e->numerics.enabled) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "numerics.quantization",
         "%s is timing only: its operands are not rounded to %s by the numeric kernels; "
         "set numerics.enabled=false or numerics.quantization=\"none\"",
         q, q);
    return FALSE;
  }
  if (e->numerics.enabled && !m->numerics_supported) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "numerics.enabled",
         "model '%s' is timing-only (a layer without a numeric kernel, or over 2^28 "
         "parameters); set "
         "numerics.enabled=false (e.g. --set numerics.enabled=false)",
         m->name);
    return FALSE;
  }
  /* numerics materialize the synthetic set: keep it within 4 GiB of floats */
  if (e->numerics.enabled && e->input.source == PS_SOURCE_SYNTHETIC) {
    int64_t elems = MAX(ps_shape_elems(m->in_shape, m->in_rank), 1);
    int64_t most = (INT64_C(1) << 30) / elems;
    if (e->input.synthetic_examples > most) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.synthetic_examples",
           "%" G_GINT64_FORMAT " examples of %" G_GINT64_FORMAT " values would take %.3g GiB "
           "in memory with numerics on; use at most %" G_GINT64_FORMAT " for model '%s', or "
           "numerics.enabled=false",
           e->input.synthetic_examples, elems,
           (double)e->input.synthetic_examples * (double)elems * 4.0 / GIB, most, m->name);
      return FALSE;
    }
  }
  if (e->input.source == PS_SOURCE_FASHION_MNIST) {
    int64_t elems = ps_shape_elems(m->in_shape, m->in_rank);
    if (elems != FASHION_MNIST_ELEMS || m->classes != FASHION_MNIST_CLASSES || m->token_input) {
      g_autofree char *shape = shape_text(m->in_shape, m->in_rank);
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, f, "input.source",
           "fashion-mnist gives 28x28x1 images (784 values) in 10 classes, but model '%s' "
           "takes %s%s = %" G_GINT64_FORMAT " values with %" G_GINT64_FORMAT
           " classes; use input.source=\"synthetic\" or a model with a (28, 28, 1) input and "
           "10 classes",
           m->name, m->token_input ? "tokens " : "", shape, elems, m->classes);
      return FALSE;
    }
  }
  return TRUE;
}

/* The resolved tree for `describe`: every default filled in, loadable as
 * an experiment again.  (transfer full) */
static json_object *experiment_to_json(const PsExperiment *e, json_object *root)
{
  json_object *o = json_object_new_object();
  json_object *v = NULL;
  json_object_object_add(o, "name", json_object_new_string(e->name));
  if (json_object_object_get_ex(root, "description", &v) && v)
    json_object_object_add(o, "description", ps_config__deep_copy(v));
  json_object *sources_obj = NULL;
  json_object *topo = NULL;
  if (json_object_object_get_ex(root, "topology", &topo) && topo)
    json_object_object_get_ex(topo, "sources", &sources_obj);
  json_object_object_add(o, "topology", ps_config__topology_to_json(e->topology, sources_obj));
  json_object *model = NULL;
  json_object_object_get_ex(root, "model", &model);
  json_object_object_add(o, "model", ps_config__deep_copy(model));
  json_object_object_add(o, "global_batch", json_object_new_int64(e->global_batch));
  json_object_object_add(o, "steps", json_object_new_int64(e->steps));
  json_object_object_add(o, "epochs", ps_config__new_double(e->epochs));
  json_object_object_add(o, "steps_per_run", json_object_new_int64(e->steps_per_run));
  json_object_object_add(o, "log_every", json_object_new_int64(e->log_every));
  json_object_object_add(o, "fuse_elementwise", json_object_new_boolean(e->fuse_elementwise));
  json_object_object_add(o, "fusion", json_object_new_string(fusions[e->fusion]));
  json_object_object_add(o, "attention_kernel",
                         json_object_new_string(attention_kernels[e->attention_kernel]));

  /* the loader puts the strategy's own keys here (ps_experiment_load) */
  json_object_object_add(o, "strategy", json_object_new_object());

  const PsInputConfig *in = &e->input;
  json_object *io = json_object_new_object();
  json_object_object_add(io, "source", json_object_new_string(sources[in->source]));
  json_object_object_add(io, "data_dir", json_object_new_string(in->data_dir));
  json_object_object_add(io, "host_cost_per_example_s",
                         ps_config__new_double(in->host_cost_per_example_s));
  json_object_object_add(io, "workers", json_object_new_int(in->workers));
  json_object_object_add(io, "prefetch", json_object_new_int(in->prefetch));
  json_object_object_add(io, "infeed_capacity", json_object_new_int(in->infeed_capacity));
  json_object_object_add(io, "outfeed_capacity", json_object_new_int(in->outfeed_capacity));
  json_object_object_add(io, "synthetic_examples", json_object_new_int64(in->synthetic_examples));
  json_object_object_add(io, "shuffle", json_object_new_boolean(in->shuffle));
  ps_config__text_to_json(in, io);
  json_object_object_add(o, "input", io);

  const PsOptimizerConfig *opt = &e->optimizer;
  json_object *oo = json_object_new_object();
  json_object_object_add(oo, "kind", json_object_new_string(optimizer_kinds[opt->kind]));
  json_object_object_add(oo, "learning_rate", ps_config__new_double(opt->learning_rate));
  json_object_object_add(oo, "momentum", ps_config__new_double(opt->momentum));
  json_object_object_add(oo, "beta1", ps_config__new_double(opt->beta1));
  json_object_object_add(oo, "beta2", ps_config__new_double(opt->beta2));
  json_object_object_add(oo, "epsilon", ps_config__new_double(opt->epsilon));
  json_object_object_add(oo, "schedule", json_object_new_string(lr_schedules[opt->schedule]));
  json_object_object_add(oo, "weight_decay", ps_config__new_double(opt->weight_decay));
  json_object_object_add(oo, "trust_coefficient", ps_config__new_double(opt->trust_coefficient));
  json_object_object_add(oo, "clip_norm", ps_config__new_double(opt->clip_norm));
  json_object_object_add(oo, "clip_before_reduce",
                         json_object_new_boolean(opt->clip_before_reduce));
  json_object_object_add(o, "optimizer", oo);

  const PsNumericsConfig *n = &e->numerics;
  json_object *no = json_object_new_object();
  json_object_object_add(no, "enabled", json_object_new_boolean(n->enabled));
  json_object_object_add(no, "precision", json_object_new_string(precisions[n->precision]));
  json_object_object_add(no, "seed", json_object_new_int64((int64_t)n->seed));
  json_object_object_add(no, "evaluate", json_object_new_boolean(n->evaluate));
  json_object_object_add(no, "weight_precision",
                         json_object_new_string(precisions[n->weight_precision]));
  json_object_object_add(no, "quantization",
                         json_object_new_string(quantizations[n->quantization]));
  for (int i = 0; matmul_precisions[i]; i++)
    if (matmul_precision_passes[i] == n->matmul_passes)
      json_object_object_add(no, "matmul_precision",
                             json_object_new_string(matmul_precisions[i]));
  json_object_object_add(o, "numerics", no);
  json_object *co = json_object_new_object();
  json_object_object_add(co, "algorithm", json_object_new_string(e->collective.algorithm));
  json_object_object_add(co, "chunk_bytes", json_object_new_int64(e->collective.chunk_bytes));
  json_object_object_add(co, "max_in_flight",
                         json_object_new_int64(e->collective.max_in_flight));
  json_object_object_add(co, "fast_path", json_object_new_boolean(e->collective.fast_path));
  json_object_object_add(co, "on_core", ps_config_on_core_to_json(e->collective.on_core));
  json_object_object_add(o, "collective", co);
  if (e->n_host_calls > 0) {
    json_object *hc = json_object_new_array();
    for (int i = 0; i < e->n_host_calls; i++) {
      const PsHostCall *h = &e->host_calls[i];
      json_object *ho = json_object_new_object();
      json_object_object_add(ho, "after", json_object_new_string(e->model->layers[h->after].name));
      json_object_object_add(ho, "kind", json_object_new_string(host_call_kinds[h->kind]));
      json_object_object_add(ho, "bins", json_object_new_int(h->bins));
      json_object_object_add(ho, "flops_per_element", ps_config__new_double(h->flops_per_element));
      json_object_array_add(hc, ho);
    }
    json_object_object_add(o, "outside_compilation", hc);
  }
  json_object *faults = ps_config__faults_to_json(&e->faults);
  if (faults)
    json_object_object_add(o, "faults", faults);
  return o;
}

/* Sets "flash" on every attention layer of a model's layer list, those
 * inside blocks included (removing "flash_block", "flash_blocks" and
 * "flash_fused_backward" when it turns flash off), for
 * "attention_kernel"; the resolved model then says so.  Returns how many
 * of them are latent attention (a "kv_lora_rank"), which is flash only. */
static int set_attention_kernel(json_object *layers, gboolean flash)
{
  int latent = 0;
  if (!json_object_is_type(layers, json_type_array))
    return 0;
  for (size_t i = 0; i < json_object_array_length(layers); i++) {
    json_object *l = json_object_array_get_idx(layers, i), *type = NULL;
    if (!json_object_is_type(l, json_type_object))
      continue;
    if (json_object_object_get_ex(l, "type", &type) &&
        g_strcmp0(json_object_get_string(type), "attention") == 0) {
      latent += json_object_object_get_ex(l, "kv_lora_rank", NULL);
      json_object_object_add(l, "flash", json_object_new_boolean(flash));
      if (!flash) {
        json_object_object_del(l, "flash_block");
        json_object_object_del(l, "flash_fused_backward");
        json_object_object_del(l, "flash_blocks");
      }
    }
    json_object_object_foreach(l, key, val)
    {
      (void)key;
      if (json_object_is_type(val, json_type_array))
        latent += set_attention_kernel(val, flash);
    }
  }
  return latent;
}

/* "attention_blocks": each flash kernel's blocks for every flash attention
 * layer of the model (a run's MaxText sa_block_* flags), written over the
 * layers' own "flash_blocks", and with "fused_backward" (splash attention's
 * BlockSizes.use_fused_bwd_kernel, MaxText's sa_use_fused_bwd_kernel) over
 * their "flash_fused_backward"; a layer with the fused backward kernel
 * takes no dq blocks (MaxText ignores them there too).  Checked here so
 * that a mistake names the experiment's key. */
static const char *const attention_block_keys[] = {"q",    "kv",    "q_dkv",          "kv_dkv",
                                                   "q_dq", "kv_dq", "fused_backward", NULL};
#define N_ATTENTION_BLOCKS 6 /* the sizes among them, before fused_backward */

static int set_attention_blocks(json_object *layers, json_object *blocks)
{
  int n = 0;
  if (!json_object_is_type(layers, json_type_array))
    return 0;
  for (size_t i = 0; i < json_object_array_length(layers); i++) {
    json_object *l = json_object_array_get_idx(layers, i), *type = NULL, *v = NULL;
    if (!json_object_is_type(l, json_type_object))
      continue;
    if (json_object_object_get_ex(l, "type", &type) &&
        g_strcmp0(json_object_get_string(type), "attention") == 0 &&
        json_object_object_get_ex(l, "flash", &v) && json_object_get_boolean(v)) {
      json_object *b = ps_config__deep_copy(blocks), *fused = NULL;
      if (json_object_object_get_ex(b, "fused_backward", &fused)) {
        json_object_object_add(l, "flash_fused_backward", json_object_get(fused));
        json_object_object_del(b, "fused_backward");
      }
      if (json_object_object_get_ex(l, "flash_fused_backward", &v) && json_object_get_boolean(v)) {
        json_object_object_del(b, "q_dq");
        json_object_object_del(b, "kv_dq");
      }
      json_object_object_add(l, "flash_blocks", b);
      n++;
    }
    json_object_object_foreach(l, key, val)
    {
      (void)key;
      if (json_object_is_type(val, json_type_array))
        n += set_attention_blocks(val, blocks);
    }
  }
  return n;
}

static gboolean apply_attention_blocks(json_object *root, json_object *model, const char *f,
                                       GError **error)
{
  json_object *blocks = NULL;
  if (!json_object_object_get_ex(root, "attention_blocks", &blocks))
    return TRUE;
  if (!ps_json_expect_object(blocks, f, "attention_blocks", error) ||
      !ps_json_check_keys(blocks, f, "attention_blocks", attention_block_keys, error))
    return FALSE;
  for (int k = 0; k < N_ATTENTION_BLOCKS; k++) {
    int64_t v = 0;
    if (!ps_json_get_int(blocks, f, "attention_blocks", attention_block_keys[k], FALSE, 1,
                         G_MAXINT32, &v, error))
      return FALSE;
  }
  gboolean fused = FALSE;
  if (!ps_json_get_bool(blocks, f, "attention_blocks", "fused_backward", FALSE, &fused, error))
    return FALSE;
  if (set_attention_blocks(json_object_object_get(model, "layers"), blocks) == 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: attention_blocks: the model has no flash attention layer to take them; "
                "set \"attention_kernel\": \"flash\" or leave attention_blocks out",
                f);
    return FALSE;
  }
  return TRUE;
}

static PsExperiment *experiment_parse(Resolution *r, GError **error)
{
  json_object *root = r->root;
  const char *f = r->file;
  if (!ps_json_check_keys(root, f, "", experiment_keys, error))
    return NULL;
  PsExperiment *e = g_new0(PsExperiment, 1);
  e->file = g_strdup(f);
  const char *name = NULL;
  if (!ps_json_get_string(root, f, "", "name", FALSE, &name, error))
    goto fail;
  e->name = name ? g_strdup(name) : ps_config__name_from_file(f);

  json_object *topo = NULL, *model = NULL;
  json_object_object_get_ex(root, "topology", &topo);
  json_object_object_get_ex(root, "model", &model);
  if (!ps_json_expect_object(topo, f, "topology", error) ||
      !ps_json_expect_object(model, f, "model", error))
    goto fail;
  e->topology = ps_topology_from_json(topo, r->topo_file, r->topo_path, error);
  if (!e->topology)
    goto fail;
  int kernel = 0;
  if (!ps_json_get_enum(root, f, "", "attention_kernel", FALSE, attention_kernels, &kernel,
                        error))
    goto fail;
  const int latent =
      kernel > 0 ? set_attention_kernel(json_object_object_get(model, "layers"), kernel == 1) : 0;
  if (latent > 0 && kernel == 2) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: attention_kernel: \"unfused\" turns flash attention off, but the model's "
                "latent attention (kv_lora_rank) runs as flash only; use \"flash\" or \"model\"",
                f);
    goto fail;
  }
  if (!apply_attention_blocks(root, model, f, error))
    goto fail;
  e->model = ps_model_from_json(model, r->model_file, r->model_path, error);
  if (!e->model)
    goto fail;
  e->attention_kernel = kernel;

  e->epochs = 1.0;
  e->steps_per_run = 1;
  e->fuse_elementwise = TRUE;
  int64_t steps = 0, log_every = 0;
  if (!ps_json_get_int(root, f, "", "global_batch", TRUE, 1, INT64_MAX, &e->global_batch,
                       error) ||
      !ps_json_get_int(root, f, "", "steps", FALSE, 1, INT64_MAX, &steps, error) ||
      !ps_json_get_double(root, f, "", "epochs", FALSE, 0, TRUE, 1e6, &e->epochs, error) ||
      !ps_json_get_int(root, f, "", "steps_per_run", FALSE, 1, INT64_MAX,
                       &e->steps_per_run, error) ||
      !ps_json_get_int(root, f, "", "log_every", FALSE, 1, INT64_MAX, &log_every,
                       error) ||
      !ps_json_get_bool(root, f, "", "fuse_elementwise", FALSE, &e->fuse_elementwise, error))
    goto fail;
  /* "fusion" wins; the older "fuse_elementwise": false means "none" */
  int fusion = e->fuse_elementwise ? PS_FUSION_XLA : PS_FUSION_NONE;
  if (!ps_json_get_enum(root, f, "", "fusion", FALSE, fusions, &fusion, error))
    goto fail;
  e->fusion = (PsFusion)fusion;
  e->fuse_elementwise = e->fusion != PS_FUSION_NONE;

  if (!parse_strategy_section(root, f, &e->strategy, error) ||
      !parse_input(root, f, &e->input, error) ||
      !parse_optimizer(root, f, &e->optimizer, error) ||
      !parse_numerics(root, f,
                      e->model->numerics_supported && ps_config__input_feeds(&e->input, e->model),
                      &e->numerics, error) ||
      !parse_host_calls(root, f, e, error) || !parse_collective(root, f, &e->collective, error) ||
      !ps_config__check_input_model(e, error))
    goto fail;

  if (steps == 0) {
    double examples = e->input.source == PS_SOURCE_FASHION_MNIST ? (double)FASHION_MNIST_TRAIN
                      : e->input.source == PS_SOURCE_TEXT ? (double)e->input.text_train_windows
                                                          : (double)e->input.synthetic_examples;
    double n = ceil(e->epochs * examples / (double)e->global_batch);
    steps = n < 1 ? 1 : n > 1e12 ? (int64_t)1e12 : (int64_t)n;
  }
  e->steps = steps;
  e->log_every = log_every ? log_every : MAX(1, steps / 10);

  if (!check_experiment(e, error) || !ps_config__parse_faults(root, f, e, error))
    goto fail;
  e->resolved = experiment_to_json(e, root);
  return e;
fail:
  ps_experiment_free(e);
  return NULL;
}

PsExperiment *ps_experiment_parse(const char *name_or_path, const char *const *overrides,
                                  GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  static const char *const whole[] = {"topology", "model", NULL};
  Resolution r = {0};
  PsExperiment *e = NULL;
  r.file = ps_config_find("experiments", name_or_path, error);
  if (!r.file)
    goto out;
  r.root = ps_json_load_file(r.file, error);
  if (!r.root || !ps_json_expect_object(r.root, r.file, "", error))
    goto out;
  /* "--set topology=tpu-v4-32" picks another topology before it is
   * resolved; every other override applies to the resolved tree. */
  if (!ps_config__apply_overrides(r.root, overrides, whole, NULL, error) || !resolve_topology(&r, error) ||
      !resolve_model(&r, error) || !ps_config__apply_overrides(r.root, overrides, NULL, whole, error))
    goto out;
  e = experiment_parse(&r, error);
out:
  resolution_clear(&r);
  return e;
}

void ps_experiment_free(PsExperiment *e)
{
  if (!e)
    return;
  g_free(e->name);
  g_free(e->file);
  ps_topology_free(e->topology);
  if (e->model)
    ps_model_free(e->model);
  g_free(e->input.data_dir);
  g_free(e->input.text_file);
  g_free(e->host_calls);
  g_free(e->faults.stragglers);
  g_free(e->faults.slow_hosts);
  g_free(e->faults.links);
  g_free(e->faults.link_entries);
  g_free(e->faults.dcn_links);
  g_free(e->collective.algorithm);
  g_free(e->strategy.kind);
  if (e->strategy.json)
    json_object_put(e->strategy.json);
  if (e->strategy.config && e->strategy.free_config)
    e->strategy.free_config(e->strategy.config);
  if (e->resolved)
    json_object_put(e->resolved);
  g_free(e);
}

const char *ps_config_precision_text(const PsNumericsConfig *n)
{
  g_return_val_if_fail(n != NULL, "?");
  gboolean bf16 = n->precision == PS_PRECISION_BF16;
  switch (n->quantization) {
  case PS_QUANT_FP8:
    return bf16 ? "bf16 (fp8 weight products)" : "f32 (fp8 weight products)";
  case PS_QUANT_INT8:
    return bf16 ? "bf16 (int8 weight products)" : "f32 (int8 weight products)";
  default:
    return bf16 ? "bf16" : "f32";
  }
}

double ps_config_quant_peak(const PsTopology *t, PsQuantization q)
{
  g_return_val_if_fail(t != NULL, 0);
  return q == PS_QUANT_FP8 ? t->fp8_peak_flops : q == PS_QUANT_INT8 ? t->int8_peak_flops : 0;
}

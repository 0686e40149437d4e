/* shard.c: the shard strategy, SPMD sharding over a logical device mesh
 * as GSPMD lays out a training step (Xu et al., "GSPMD", 2021; MaxText's
 * data, fsdp, tensor, sequence and context axes): its keys with their defaults,
 * their checks against the model, batch and slice, and the registry
 * entry.  The mesh is mapped onto the torus by shard-mesh.c, each
 * layer is lowered by shard-lower.c, and a pipeline stage axis (each stage
 * a mesh) is cut and joined by shard-pipe.c; docs/shard.md says what each
 * key does.
 *
 * Invariant: a configuration that shard_check accepts uses every device
 * of the slice, its tensor x sequence ways divide every split dimension of
 * the model, its data x fsdp x micro-batches divide the global batch and
 * its stages are at most the model's cuttable units. */
#include "strategy/shard-private.h"

#include "common/json.h"
#include "hw/cost.h"

#include <string.h>

static const char *const keys[] = {"kind",           "mesh",     "mesh_order",
                                   "collective_matmul", "sequence_parallel",
                                   "rematerialize", "remat_keep", "remat_offload", "prefetch",
                                   "regather",       "bucket_bytes", "loss_reduction",
                                   "reduce_precision", "micro_batches", "schedule", "vocab_tiling",
                                   "accumulate", "context_strategy", NULL};
static const char *const mesh_keys[] = {"data", "fsdp", "tensor", "sequence", "context", NULL};
static const PsAxis mesh_axes[] = {PS_AXIS_DATA, PS_AXIS_FSDP, PS_AXIS_TENSOR,
                                   PS_AXIS_SEQUENCE, PS_AXIS_CONTEXT};
/* strategy.context_strategy: MaxText's context_parallel_strategy */
static const char *const context_strategies[] = {"all_gather", "ring", NULL};
static const char *const remats[] = {"none", "full", "attention_only", "minimal", "custom",
                                     NULL};
/* remat_keep's and remat_offload's names (MaxText's checkpoint names of a
 * decoder layer) and their bits; the unit's input is kept by every policy
 * but "none", in HBM unless remat_offload names it. */
static const struct {
  const char *name;
  unsigned bits;
} keep_names[] = {{"decoder_layer_input", PS_KEEP_INPUT},
                  {"query_proj", PS_KEEP_QUERY},
                  {"key_proj", PS_KEEP_KEY},
                  {"value_proj", PS_KEEP_VALUE},
                  {"context", PS_KEEP_CONTEXT},
                  {"out_proj", PS_KEEP_OUT_PROJ},
                  {"mlpwi", PS_KEEP_WI0 | PS_KEEP_WI1},
                  {"mlpwi_0", PS_KEEP_WI0},
                  {"mlpwi_1", PS_KEEP_WI1},
                  {"mlpwo", PS_KEEP_WO}};
static const char *const loss_reductions[] = {"mean", "sum", NULL};
static const char *const schedules[] = {"gpipe", "1f1b", NULL};
static const char *const accumulates[] = {"sharded", "whole", NULL};
static const char *const mesh_keys_all[] = {"data", "fsdp", "tensor", "sequence", "context",
                                            "stage", NULL};

int ps_shard_devices(const PsShardConfig *c)
{
  int n = c->size[PS_AXIS_STAGE];
  for (int i = 0; i < PS_SHARD_AXES; i++)
    n *= c->size[mesh_axes[i]];
  return n;
}

int ps_shard_model_ways(const PsShardConfig *c)
{
  return c->size[PS_AXIS_TENSOR] * c->size[PS_AXIS_SEQUENCE];
}

int ps_shard_weight_ways(const PsShardConfig *c)
{
  return c->size[PS_AXIS_FSDP] * c->size[PS_AXIS_CONTEXT];
}

static gboolean parse_mesh(json_object *o, const char *file, PsShardConfig *c, GError **error)
{
  json_object *m = NULL;
  if (!json_object_object_get_ex(o, "mesh", &m) || !m)
    return TRUE;
  if (!ps_json_expect_object(m, file, "strategy.mesh", error) ||
      !ps_json_check_keys(m, file, "strategy.mesh", mesh_keys_all, error))
    return FALSE;
  c->mesh_given = TRUE;
  /* -1 (MaxText's "the rest"): the devices the other axes leave, one axis
   * at most (shard_parse) */
  for (int i = 0; i < PS_SHARD_AXES; i++)
    if (!ps_json_get_int32(m, file, "strategy.mesh", mesh_keys[i], FALSE, -1, 1 << 20,
                           &c->size[mesh_axes[i]], error))
      return FALSE;
  if (!ps_json_get_int32(m, file, "strategy.mesh", "stage", FALSE, -1, 1 << 20,
                         &c->size[PS_AXIS_STAGE], error))
    return FALSE;
  for (int a = 0; a < PS_N_AXES; a++)
    if (c->size[a] == 0 && json_object_object_get_ex(m, ps_axis_name((PsAxis)a), NULL)) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.mesh",
                       "%s: 0 is not a size; give 1 or more, or -1 for the devices the other "
                       "axes leave", ps_axis_name((PsAxis)a));
      return FALSE;
    }
  return TRUE;
}

/* The one axis given as -1 takes the devices the others leave.  FALSE
 * with an error naming the mesh if two are -1 or the rest does not
 * divide. */
static gboolean fill_rest(PsShardConfig *c, const PsTopology *topo, const char *file,
                          GError **error)
{
  int rest = -1, others = 1, minus = 0;
  for (int a = 0; a < PS_N_AXES; a++) {
    if (c->size[a] == -1) {
      rest = a;
      minus++;
    } else if (c->size[a] > 0) {
      others *= c->size[a];
    }
  }
  if (minus == 0)
    return TRUE;
  int devices = ps_topology_devices(topo);
  if (minus > 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.mesh",
                     "-1 (the devices the other axes leave) may be given for one axis only, "
                     "got %d", minus);
    return FALSE;
  }
  if (devices % others != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.mesh",
                     "%s -1: the other axes' product %d does not divide %s's %d devices",
                     ps_axis_name((PsAxis)rest), others, topo->name, devices);
    return FALSE;
  }
  c->size[rest] = devices / others;
  if (c->size[PS_AXIS_DATA] == 0)
    c->size[PS_AXIS_DATA] = 1;
  return TRUE;
}

/* "mesh_order": the five axis names, outermost (least communication)
 * first; each exactly once.  A list of the other four (written before the
 * context axis) gets "context" just before "tensor", where the default
 * has it. */
static gboolean parse_order(json_object *o, const char *file, PsShardConfig *c,
                            GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, "mesh_order", &v) || !v)
    return TRUE;
  gboolean seen[PS_SHARD_AXES] = {FALSE};
  if (!json_object_is_type(v, json_type_array))
    goto bad;
  int len = (int)json_object_array_length(v), at = 0;
  if (len != PS_SHARD_AXES && len != PS_SHARD_AXES - 1)
    goto bad;
  for (int i = 0; i < len; i++) {
    json_object *x = json_object_array_get_idx(v, i);
    const char *s = json_object_is_type(x, json_type_string) ? json_object_get_string(x) : "";
    int k = 0;
    while (k < PS_SHARD_AXES && strcmp(mesh_keys[k], s) != 0)
      k++;
    if (k == PS_SHARD_AXES || seen[k])
      goto bad;
    seen[k] = TRUE;
    if (len < PS_SHARD_AXES && mesh_axes[k] == PS_AXIS_TENSOR)
      c->order[at++] = PS_AXIS_CONTEXT;
    c->order[at++] = mesh_axes[k];
  }
  if (len < PS_SHARD_AXES && seen[4])
    goto bad; /* four names, context among them: one is missing */
  c->order_given = TRUE;
  return TRUE;
bad:
  ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.mesh_order",
                   "must list each of \"data\", \"fsdp\", \"sequence\", \"context\", "
                   "\"tensor\" once, outermost first (the default is [\"data\", \"fsdp\", "
                   "\"sequence\", \"context\", \"tensor\"]; without \"context\" it goes "
                   "just before \"tensor\"), got %s",
                   json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
  return FALSE;
}

/* "remat_keep" or "remat_offload" (key): an array of keep_names, each at
 * most once, into *mask; only with rematerialize "custom". */
static gboolean parse_keep(json_object *o, const char *file, const PsShardConfig *c,
                           const char *key, unsigned *mask, GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !v)
    return TRUE;
  GString *all = g_string_new(NULL);
  for (size_t k = 0; k < G_N_ELEMENTS(keep_names); k++)
    g_string_append_printf(all, "%s\"%s\"", k ? ", " : "", keep_names[k].name);
  const char *why = NULL;
  char *got = NULL;
  g_autofree char *path = g_strconcat("strategy.", key, NULL);
  g_autofree char *off = g_strdup_printf("is read only with strategy.rematerialize \"custom\" "
                                         "(--set %s=null leaves it out)",
                                         path);
  if (c->remat != PS_REMAT_CUSTOM) {
    why = off;
  } else if (!json_object_is_type(v, json_type_array)) {
    why = "must be an array of names";
  } else {
    *mask = 0;
    gboolean seen[G_N_ELEMENTS(keep_names)] = {FALSE};
    for (size_t i = 0; i < json_object_array_length(v) && !why; i++) {
      json_object *x = json_object_array_get_idx(v, i);
      const char *s = json_object_is_type(x, json_type_string) ? json_object_get_string(x) : "";
      size_t k = 0;
      while (k < G_N_ELEMENTS(keep_names) && strcmp(keep_names[k].name, s) != 0)
        k++;
      if (k == G_N_ELEMENTS(keep_names) || seen[k]) {
        why = k == G_N_ELEMENTS(keep_names) ? "names what a decoder layer does not have"
                                            : "names a checkpoint twice";
        got = g_strdup(json_object_to_json_string_ext(x, JSON_C_TO_STRING_PLAIN));
        break;
      }
      seen[k] = TRUE;
      *mask |= keep_names[k].bits;
    }
  }
  if (why)
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, path, "%s%s%s (the names: %s)", why,
                     got ? ": " : "", got ? got : "", all->str);
  g_free(got);
  g_string_free(all, TRUE);
  return why == NULL;
}

/* The names of mask's bits, each bit under one name (mlpwi for both
 * halves).  (transfer full) */
static json_object *keep_json(unsigned mask)
{
  json_object *a = json_object_new_array();
  gboolean both = (mask & (PS_KEEP_WI0 | PS_KEEP_WI1)) == (PS_KEEP_WI0 | PS_KEEP_WI1);
  for (size_t k = 0; k < G_N_ELEMENTS(keep_names); k++) {
    unsigned b = keep_names[k].bits;
    if ((b & mask) != b || (both && (b == PS_KEEP_WI0 || b == PS_KEEP_WI1)))
      continue;
    json_object_array_add(a, json_object_new_string(keep_names[k].name));
  }
  return a;
}

static gboolean parse_keys(json_object *o, const char *file, PsShardConfig *c, GError **error)
{
  const char *p = "strategy";
  int remat = c->remat, red = c->loss_reduction, sched = c->schedule,
      acc = c->accumulate_whole ? 1 : 0, ctx = c->context_ring ? 1 : 0;
  if (!ps_json_check_keys(o, file, p, keys, error) || !parse_mesh(o, file, c, error) ||
      !parse_order(o, file, c, error) ||
      !ps_json_get_bool(o, file, p, "collective_matmul", FALSE, &c->collective_matmul,
                        error) ||
      !ps_json_get_bool(o, file, p, "sequence_parallel", FALSE, &c->sequence_parallel,
                        error) ||
      !ps_json_get_enum(o, file, p, "rematerialize", FALSE, remats, &remat, error) ||
      !ps_json_get_bool(o, file, p, "prefetch", FALSE, &c->prefetch, error) ||
      !ps_json_get_bool(o, file, p, "regather", FALSE, &c->regather, error) ||
      !ps_json_get_int(o, file, p, "bucket_bytes", FALSE, 1, INT64_C(1) << 40,
                       &c->bucket_bytes, error) ||
      !ps_json_get_enum(o, file, p, "loss_reduction", FALSE, loss_reductions, &red, error) ||
      !ps_strategy_parse_reduce_precision(o, file, &c->reduce_precision, error) ||
      !ps_json_get_int32(o, file, p, "micro_batches", FALSE, 1, 1 << 24, &c->micro_batches,
                         error) ||
      !ps_json_get_int32(o, file, p, "vocab_tiling", FALSE, 1, 1 << 24, &c->vocab_tiling,
                         error) ||
      !ps_json_get_enum(o, file, p, "schedule", FALSE, schedules, &sched, error) ||
      !ps_json_get_enum(o, file, p, "accumulate", FALSE, accumulates, &acc, error) ||
      !ps_json_get_enum(o, file, p, "context_strategy", FALSE, context_strategies, &ctx, error))
    return FALSE;
  c->context_ring = ctx == 1;
  c->schedule = (PsSchedule)sched;
  /* one stage's micro-batches are gradient accumulation: each one's
   * forward then its backward (1f1b's order on one stage), unless the
   * file asks for another order */
  if (c->size[PS_AXIS_STAGE] <= 1 && !json_object_object_get_ex(o, "schedule", NULL))
    c->schedule = PS_SCHEDULE_1F1B;
  c->accumulate_whole = acc == 1;
  c->remat = (PsRemat)remat;
  c->loss_reduction = (PsLossReduction)red;
  if (!parse_keep(o, file, c, "remat_keep", &c->remat_keep, error) ||
      !parse_keep(o, file, c, "remat_offload", &c->remat_offload, error))
    return FALSE;
  unsigned both = c->remat_keep & c->remat_offload;
  for (size_t k = 0; k < G_N_ELEMENTS(keep_names) && both; k++)
    if (keep_names[k].bits & both) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.remat_offload",
                       "names \"%s\", which strategy.remat_keep names too: a checkpoint is "
                       "kept in HBM or in the host's memory, not both",
                       keep_names[k].name);
      return FALSE;
    }
  if (!(c->remat_offload & PS_KEEP_INPUT))
    c->remat_keep |= PS_KEEP_INPUT;
  return TRUE;
}

static gboolean shard_parse(json_object *obj, const PsTopology *topo, const char *file,
                            void **config, GError **error)
{
  PsShardConfig *c = g_new0(PsShardConfig, 1);
  for (int a = 0; a < PS_N_AXES; a++)
    c->size[a] = 1;
  c->size[PS_AXIS_DATA] = 0; /* absent: what the other axes leave */
  memcpy(c->order, mesh_axes, sizeof c->order);
  c->order[2] = PS_AXIS_SEQUENCE; /* data, fsdp, sequence, context, tensor (MaxText's order) */
  c->order[3] = PS_AXIS_CONTEXT;
  c->order[4] = PS_AXIS_TENSOR;
  c->prefetch = TRUE;
  c->regather = TRUE;
  c->bucket_bytes = PS_DEFAULT_BUCKET_BYTES;
  c->loss_reduction = PS_LOSS_MEAN;
  c->micro_batches = 1;
  c->vocab_tiling = 1;
  c->schedule = PS_SCHEDULE_GPIPE;
  if ((obj && !parse_keys(obj, file, c, error)) || !fill_rest(c, topo, file, error)) {
    g_free(c);
    return FALSE;
  }
  if (c->size[PS_AXIS_DATA] == 0) {
    /* mesh.data left out: every device the other axes leave (1 when they
     * do not divide the slice, which the check then reports) */
    int rest = ps_topology_devices(topo),
        others = c->size[PS_AXIS_FSDP] * c->size[PS_AXIS_TENSOR] *
                 c->size[PS_AXIS_SEQUENCE] * c->size[PS_AXIS_CONTEXT] * c->size[PS_AXIS_STAGE];
    c->size[PS_AXIS_DATA] = rest % others == 0 ? rest / others : 1;
  }
  *config = c;
  return TRUE;
}

/* "strategy.mesh.tensor = 3 does not divide the 16 heads of layer 'x';
 * use 1, 2, 4, 8 or 16". */
static gboolean divides(const PsExperiment *e, const char *key, int ways, int64_t n,
                        const char *what, const char *layer, GError **error)
{
  if (n % ways == 0)
    return TRUE;
  GString *fit = g_string_new(NULL);
  for (int64_t k = 1; k <= n && k <= 4096; k++)
    if (n % k == 0)
      g_string_append_printf(fit, "%s%" G_GINT64_FORMAT, fit->len ? ", " : "", k);
  ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, key,
                   "%d does not divide the %" G_GINT64_FORMAT " %s%s%s%s; use one of %s", ways,
                   n, what, layer ? " of layer '" : "", layer ? layer : "", layer ? "'" : "",
                   fit->str);
  g_string_free(fit, TRUE);
  return FALSE;
}

/* The model's split dimensions against the tensor x sequence ways. */
static gboolean check_model(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  const PsModel *m = e->model;
  int ways = ps_shard_model_ways(c);
  const char *key = c->size[PS_AXIS_SEQUENCE] > 1 ? "strategy.mesh.tensor x sequence"
                                                   : "strategy.mesh.tensor";
  if (ways == 1)
    return TRUE;
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *l = &m->layers[i];
    PsTensorRole r = ps_layer_kind_lower(l->kind)->tensor;
    gboolean latent = l->kind == PS_LAYER_ATTENTION && l->kv_rank > 0;
    if (l->kind == PS_LAYER_MOE || latent) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, key,
                       "%d: the %s '%s' is not split by a tensor axis here (%s); lay the model "
                       "out over %s",
                       ways, latent ? "latent attention" : "mixture of experts", l->name,
                       latent ? "its latents are shared by the heads"
                              : "MaxText shards its experts' width over one",
                       latent ? "fsdp and data" : "fsdp, data and context");
      return FALSE;
    }
    if (r == PS_TP_HEADS &&
        (!divides(e, key, ways, l->heads, "heads", l->name, error) ||
         !divides(e, key, ways, l->in_shape[l->in_rank - 1], "hidden units", l->name, error)))
      return FALSE;
    if ((c->size[PS_AXIS_SEQUENCE] > 1 || c->sequence_parallel) &&
        (r == PS_TP_NORM || r == PS_TP_ELEMENTWISE) &&
        l->out_rank == 2 && !divides(e, key, ways, l->out_shape[0], "sequence positions",
                                     l->name, error))
      return FALSE;
  }
  return TRUE;
}

/* "data 2 x fsdp 4 x tensor 1 x sequence 1", with " x context C" when
 * there is one.  (transfer full) */
static char *mesh_str(const PsShardConfig *c)
{
  g_autofree char *ctx = c->size[PS_AXIS_CONTEXT] > 1
                             ? g_strdup_printf(" x context %d", c->size[PS_AXIS_CONTEXT])
                             : g_strdup("");
  return g_strdup_printf("data %d x fsdp %d x tensor %d x sequence %d%s", c->size[PS_AXIS_DATA],
                         c->size[PS_AXIS_FSDP], c->size[PS_AXIS_TENSOR],
                         c->size[PS_AXIS_SEQUENCE], ctx);
}

/* Context parallelism (MaxText's ici_context_parallelism) splits each
 * example's sequence: a model of token sequences whose length the
 * context ways divide, not with the sequence axis or Megatron's sequence
 * parallelism (both split the rows over the tensor group). */
static gboolean check_context(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  int C = c->size[PS_AXIS_CONTEXT];
  const PsModel *m = e->model;
  if (C == 1)
    return TRUE;
  if (!m->token_input || m->in_rank != 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.context",
                     "%d splits each example's token sequence, but model '%s' does not take "
                     "token sequences; use context = 1", C, m->name);
    return FALSE;
  }
  if (c->size[PS_AXIS_SEQUENCE] > 1 || c->sequence_parallel) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.context",
                     "%d with %s is not modelled (both split the rows); use one of them",
                     C, c->sequence_parallel ? "strategy.sequence_parallel"
                                             : "strategy.mesh.sequence");
    return FALSE;
  }
  if (!divides(e, "strategy.mesh.context", C, m->in_shape[0], "positions of a sequence", NULL,
               error))
    return FALSE;
  /* every layer but the loss keeps one row per position: a layer that
   * pools over them would need the whole sequence */
  for (int i = 0; i < m->n_layers; i++) {
    const PsLayer *l = &m->layers[i];
    if (ps_layer_kind_lower(l->kind)->tensor == PS_TP_LOSS)
      continue;
    if (l->kind == PS_LAYER_ATTENTION && l->kv_rank > 0) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.context",
                       "%d: the latent attention '%s' of model '%s' is not split by a context "
                       "axis here; use context = 1",
                       C, l->name, m->name);
      return FALSE;
    }
    if (l->out_rank < 2 || l->out_shape[0] != m->in_shape[0]) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.context",
                       "%d splits each sequence's positions, but layer '%s' of model '%s' "
                       "does not keep one row per position (it pools or reshapes them); use "
                       "context = 1",
                       C, l->name, m->name);
      return FALSE;
    }
  }
  return TRUE;
}

static gboolean check_mesh(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  g_autofree char *mesh = mesh_str(c);
  int devices = ps_topology_devices(e->topology), n = ps_shard_devices(c);
  int P = c->size[PS_AXIS_STAGE];
  if (P > 1 && n != devices) {
    int rest = n / P;
    g_autofree char *fit =
        devices % rest == 0
            ? g_strdup_printf("use strategy.mesh.stage = %d, or change the other axes",
                              devices / rest)
            : g_strdup_printf("no stage count fits a mesh of %d devices; choose sizes whose "
                              "product with the stages is %d", rest, devices);
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.stage",
                     "%d stages x %s = %d devices, but %s has %d; %s", P, mesh, n,
                     e->topology->name, devices, fit);
    return FALSE;
  }
  if (n != devices) {
    /* a product that fits: data alone changed, else fsdp, else tensor x
     * sequence must divide the devices first */
    int D = c->size[PS_AXIS_DATA];
    int ts = c->size[PS_AXIS_TENSOR] * c->size[PS_AXIS_SEQUENCE] * c->size[PS_AXIS_CONTEXT];
    g_autofree char *fit =
        devices % (n / D) == 0 ? g_strdup_printf("e.g. data = %d", devices / (n / D))
        : devices % (ts * D) == 0
            ? g_strdup_printf("e.g. fsdp = %d", devices / (ts * D))
        : devices % ts == 0
            ? g_strdup_printf("e.g. data = 1, fsdp = %d", devices / ts)
            : g_strdup_printf("%s = %d does not divide %d",
                              c->size[PS_AXIS_CONTEXT] > 1 ? "tensor x sequence x context"
                                                           : "tensor x sequence",
                              ts, devices);
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh",
                     "%s = %d devices, but %s has %d; choose sizes whose product is %d (%s)",
                     mesh, n, e->topology->name, devices, devices, fit);
    return FALSE;
  }
  int slices = e->topology->slices;
  if (slices > 1 && ps_shard_dcn_axis(c, slices) < 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh",
                     "no axis divides over the %d slices of the topology (topology.slices): "
                     "the slices go to the outermost axis of strategy.mesh_order whose size "
                     "is a multiple of %d; make one, e.g. data, a multiple of %d",
                     slices, slices, slices);
    return FALSE;
  }
  if (c->size[PS_AXIS_SEQUENCE] > 1 && c->size[PS_AXIS_TENSOR] == 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.sequence",
                     "%d needs a tensor axis (sequence parallelism shards what tensor "
                     "parallelism leaves whole); set strategy.mesh.tensor > 1, e.g. "
                     "tensor = %d and sequence = 1",
                     c->size[PS_AXIS_SEQUENCE], c->size[PS_AXIS_SEQUENCE]);
    return FALSE;
  }
  if (c->sequence_parallel && c->size[PS_AXIS_TENSOR] == 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.sequence_parallel",
                     "true needs a tensor axis whose group splits the rows; set "
                     "strategy.mesh.tensor > 1 or sequence_parallel = false");
    return FALSE;
  }
  if (c->context_ring && c->size[PS_AXIS_CONTEXT] == 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.context_strategy",
                     "\"ring\" passes keys and values around a context group; set "
                     "strategy.mesh.context > 1 or context_strategy = \"all_gather\"");
    return FALSE;
  }
  if (c->context_ring && c->collective_matmul) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.context_strategy",
                     "\"ring\" and strategy.collective_matmul would both decompose the "
                     "attention's ops into ring steps, which podsim does not combine; use "
                     "one of them");
    return FALSE;
  }
  if (c->collective_matmul && ps_shard_model_ways(c) == 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.collective_matmul",
                     "true needs a tensor axis to decompose over; set strategy.mesh.tensor "
                     "> 1 or collective_matmul = false");
    return FALSE;
  }
  int64_t rows = (int64_t)c->size[PS_AXIS_DATA] * c->size[PS_AXIS_FSDP];
  if (e->global_batch % rows != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "global_batch",
                     "%" G_GINT64_FORMAT " is not divisible by strategy.mesh.data x fsdp = %"
                     G_GINT64_FORMAT "; use a multiple of %" G_GINT64_FORMAT,
                     e->global_batch, rows, rows);
    return FALSE;
  }
  return TRUE;
}

/* Real numerics run on data x fsdp meshes (run/numerics-fsdp.c) and on
 * tensor (x sequence) x fsdp x data meshes (run/numerics-tensor.c,
 * numerics-sequence.c), with collective matmul or without
 * (numerics-ring.c), a layer-wise optimizer on data x fsdp and on data x
 * tensor (x sequence) meshes, not on tensor x fsdp; the rest is timing
 * only. */
static gboolean check_numerics(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  int M = ps_shard_model_ways(c);
  const char *why = NULL;
  if (c->size[PS_AXIS_CONTEXT] > 1)
    why = "a context axis (its attention's gathered keys and values are timed, not computed)";
  if (M > 1 && c->size[PS_AXIS_FSDP] > 1 &&
      (e->optimizer.kind == PS_OPT_LARS || e->optimizer.kind == PS_OPT_LAMB))
    why = "a layer-wise optimizer (optimizer.kind lars or lamb) on a tensor x fsdp mesh "
          "(its trust ratios would need each layer's norms over the group's packed "
          "shards)";
  if (why) {
    g_autofree char *mesh = mesh_str(c);
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "numerics.enabled",
                     "true is not yet supported with %s (strategy.mesh is %s); "
                     "numerics.enabled=false runs it (timing only)%s",
                     why, mesh, c->size[PS_AXIS_CONTEXT] > 1 ? ""
                         : ", as does optimizer.kind sgd or adam, or a data-only mesh");
    return FALSE;
  }
  for (int i = 0; i < e->model->n_layers && M > 1; i++) {
    const PsLayer *l = &e->model->layers[i];
    if (ps_layer_kind_lower(l->kind)->tensor == PS_TP_HEADS && l->kv_heads % M != 0) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file,
                       c->size[PS_AXIS_SEQUENCE] > 1 ? "strategy.mesh.tensor x sequence"
                                                     : "strategy.mesh.tensor",
                       "%d does not divide the %" G_GINT64_FORMAT " key/value heads of layer "
                       "'%s', which numerics.enabled=true splits by heads; use a group "
                       "dividing %" G_GINT64_FORMAT " or numerics.enabled=false",
                       M, l->kv_heads, l->name, l->kv_heads);
      return FALSE;
    }
  }
  return TRUE;
}

/* Clipping by global norm: of the reduced gradient (as GSPMD and optax
 * do), timed, and with numerics the norm of every device's owned shard
 * added up over its group (run/numerics-fsdp.c, numerics-tensor.c); its
 * norm across pipeline stages is not modelled. */
static gboolean check_clip(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  if (e->optimizer.clip_before_reduce) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "optimizer.clip_before_reduce",
                     "a sharded step clips the reduced gradient (GSPMD reduces it inside "
                     "backward), so clipping each replica's own gradient is for "
                     "strategy.kind replicate only; set optimizer.clip_before_reduce=false");
    return FALSE;
  }
  if (c->size[PS_AXIS_STAGE] > 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "optimizer.clip_norm",
                     "clipping by global norm is modelled without pipeline stages (got "
                     "strategy.mesh.stage %d); set optimizer.clip_norm=0 or drop the stages",
                     c->size[PS_AXIS_STAGE]);
    return FALSE;
  }
  return TRUE;
}

/* Vocabulary tiling (MaxText's num_vocab_tiling) splits the positions a
 * device scores into tiles: a language model's head, and as many tiles as
 * divide the positions of a device's micro-batch (MaxText reshapes them
 * to tiles x positions / tiles). */
static gboolean check_vocab_tiling(const PsExperiment *e, const PsShardConfig *c,
                                   GError **error)
{
  const int N = c->vocab_tiling;
  const PsModel *m = e->model;
  if (N <= 1)
    return TRUE;
  if (ps_shard_vocab_head(m) < 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.vocab_tiling",
                     "%d tiles a language model's logits, but model '%s' has no dense head "
                     "feeding a loss over token sequences; use vocab_tiling = 1",
                     N, m->name);
    return FALSE;
  }
  int64_t rows = (int64_t)c->size[PS_AXIS_DATA] * c->size[PS_AXIS_FSDP] * c->micro_batches;
  int64_t positions = e->global_batch / MAX(rows, 1) * (m->in_shape[0] / c->size[PS_AXIS_CONTEXT]);
  return divides(e, "strategy.vocab_tiling", N, positions,
                 "positions a device scores in a micro-batch", NULL, error);
}

static gboolean shard_check(const PsExperiment *e, const void *config, GError **error)
{
  const PsShardConfig *c = config;
  if (e->optimizer.clip_norm > 0 && !check_clip(e, c, error))
    return FALSE;
  if (!check_mesh(e, c, error) || !check_context(e, c, error) || !check_model(e, c, error) ||
      !check_vocab_tiling(e, c, error) || !ps_shard_pipe_check(e, c, error))
    return FALSE;
  if (e->numerics.enabled && !check_numerics(e, c, error))
    return FALSE;
  return ps_shard_check_memory(e, c, error);
}

static PsPlan *shard_compile(const PsExperiment *exp, const void *config, GError **error)
{
  return ps_shard_lower(exp, config, error);
}

static json_object *shard_to_json(const void *config)
{
  const PsShardConfig *c = config;
  json_object *so = json_object_new_object();
  json_object_object_add(so, "kind", json_object_new_string("shard"));
  json_object *m = json_object_new_object();
  for (int i = 0; i < PS_SHARD_AXES; i++)
    json_object_object_add(m, mesh_keys[i], json_object_new_int(c->size[mesh_axes[i]]));
  if (c->vocab_tiling > 1)
    json_object_object_add(so, "vocab_tiling", json_object_new_int(c->vocab_tiling));
  if (c->size[PS_AXIS_STAGE] > 1 || c->micro_batches > 1) {
    /* the stage axis's keys, shown when they are used */
    json_object_object_add(m, "stage", json_object_new_int(c->size[PS_AXIS_STAGE]));
    json_object_object_add(so, "micro_batches", json_object_new_int(c->micro_batches));
    json_object_object_add(so, "schedule", json_object_new_string(schedules[c->schedule]));
    json_object_object_add(so, "accumulate",
                           json_object_new_string(accumulates[c->accumulate_whole ? 1 : 0]));
  }
  json_object_object_add(so, "mesh", m);
  json_object *order = json_object_new_array();
  for (int i = 0; i < PS_SHARD_AXES; i++)
    json_object_array_add(order, json_object_new_string(ps_axis_name(c->order[i])));
  json_object_object_add(so, "mesh_order", order);
  json_object_object_add(so, "collective_matmul", json_object_new_boolean(c->collective_matmul));
  if (c->size[PS_AXIS_CONTEXT] > 1) /* shown where there is a context axis */
    json_object_object_add(so, "context_strategy",
                           json_object_new_string(context_strategies[c->context_ring ? 1 : 0]));
  json_object_object_add(so, "sequence_parallel",
                         json_object_new_boolean(c->sequence_parallel ||
                                                 c->size[PS_AXIS_SEQUENCE] > 1));
  json_object_object_add(so, "rematerialize", json_object_new_string(remats[c->remat]));
  if (c->remat == PS_REMAT_CUSTOM) {
    json_object_object_add(so, "remat_keep", keep_json(c->remat_keep));
    json_object_object_add(so, "remat_offload", keep_json(c->remat_offload));
  }
  json_object_object_add(so, "prefetch", json_object_new_boolean(c->prefetch));
  json_object_object_add(so, "regather", json_object_new_boolean(c->regather));
  json_object_object_add(so, "bucket_bytes", json_object_new_int64(c->bucket_bytes));
  json_object_object_add(so, "loss_reduction",
                         json_object_new_string(loss_reductions[c->loss_reduction]));
  json_object_object_add(
      so, "reduce_precision",
      json_object_new_string(ps_strategy_reduce_precision_name(c->reduce_precision)));
  return so;
}

static int shard_devices(const void *config)
{
  return ps_shard_devices(config);
}

/* What `describe --stages` adds: the mesh and where each axis lies. */
static gboolean shard_describe(const PsExperiment *exp, const void *config, GString *out,
                               GError **error)
{
  const PsShardConfig *c = config;
  g_autofree char *stages = c->size[PS_AXIS_STAGE] > 1
                                ? g_strdup_printf("stage %d x ", c->size[PS_AXIS_STAGE])
                                : g_strdup("");
  g_autofree char *mesh = mesh_str(c);
  g_string_append_printf(out, "mesh: %s%s on %s\n", stages, mesh, exp->topology->name);
  g_free(ps_shard_mesh_map(exp->topology, c, out));
  return ps_shard_pipe_describe(exp, c, out, error);
}

const PsStrategy ps_strategy_shard = {
    .name = "shard",
    .summary = "SPMD sharding over a device mesh: data, fsdp, tensor, sequence and context axes, "
               "optionally in pipeline stages",
    .parse = shard_parse,
    .check = shard_check,
    .compile = shard_compile,
    .to_json = shard_to_json,
    .devices = shard_devices,
    .describe = shard_describe,
    .kernels = ps_shard_kernels,
    .free = g_free};

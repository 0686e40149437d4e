/* replication.c: the keys the replicate and pipeline strategies share
 * (strategy-private.h): a group of replicas and how it reduces gradients,
 * and a pipeline's shape; their defaults, their checks against the rest of
 * the experiment, and the resolved object `describe` prints.
 *
 * Invariant: a PsReplicaConfig that ps_replica_parse returns has every
 * default filled in (replicas from the topology the overrides chose), and
 * one that ps_replica_check accepts occupies at most the slice's devices,
 * splits the global batch evenly over replicas and micro-batches, and has
 * at most one stage per layer. */
#include "strategy/strategy-private.h"

#include "common/json.h"

#include <string.h>

/* Largest replica count we accept (well past any real pod), and bucket:
 * past a tebibyte a bucket is "all the gradients at once" anyway; the
 * bound keeps the sums downstream far from overflow. */
#define MAX_REPLICAS ((1 << 20) * 8)
#define MAX_BUCKET_BYTES (INT64_C(1) << 40)

static const char *const keys[] = {"kind",          "replicas",      "loss_reduction",
                                   "stages",        "micro_batches", "schedule",
                                   "rematerialize", "bucket_bytes",  "overlap",
                                   "weight_update_sharding", "partition",
                                   "reduce_precision", "batch_norm_group_size", NULL};
static const char *const loss_reductions[] = {"mean", "sum", NULL};
static const char *const schedules[] = {"gpipe", "1f1b", NULL};
static const char *const partitions[] = {"optimal", "seed", NULL};
static const char *const reduce_precisions[] = {"f32", "bf16", NULL};

gboolean ps_strategy_parse_reduce_precision(json_object *o, const char *file,
                                            PsPrecision *out, GError **error)
{
  int prec = *out;
  if (!ps_json_get_enum(o, file, "strategy", "reduce_precision", FALSE, reduce_precisions,
                        &prec, error))
    return FALSE;
  *out = (PsPrecision)prec;
  return TRUE;
}

const char *ps_strategy_reduce_precision_name(PsPrecision p)
{
  return reduce_precisions[p == PS_PRECISION_BF16 ? 1 : 0];
}

int ps_strategy_reduce_bytes(PsPrecision p)
{
  return p == PS_PRECISION_BF16 ? 2 : 4;
}

void ps_strategy_fail(GError **error, int code, const char *file, const char *path,
                      const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *reason = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, PS_INPUT_ERROR, code, "%s: %s: %s", file, path, reason);
}

/* strategy.replicas when the file leaves it out (or sets it to null):
 * every device of the slice, as the overrides left it, divided among the
 * stages of a pipeline. */
static gboolean default_replicas(const char *file, const PsTopology *topo, int stages,
                                 PsReplication *rep, GError **error)
{
  int devices = ps_topology_devices(topo);
  if (stages > devices) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.stages",
              "%d stages need %d devices, %s has %d; use at most %d stages or pick a larger "
              "topology",
              stages, stages, topo->name, devices, devices);
    return FALSE;
  }
  if (devices % stages != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.stages",
              "%d stages do not divide the %d devices of %s, so strategy.replicas has no "
              "default; use stages that divide %d, or set strategy.replicas (%d uses %d "
              "devices)",
              stages, devices, topo->name, devices, devices / stages, devices / stages * stages);
    return FALSE;
  }
  rep->replicas = devices / stages;
  return TRUE;
}

/* "partition": "optimal" | "seed" | [layers of stage 0, of stage 1, ...];
 * the list is checked against the stages and the model later. */
static gboolean parse_partition(json_object *o, const char *file, PsStaging *st,
                                GError **error)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, "partition", &v) || !v)
    return TRUE;
  if (json_object_is_type(v, json_type_string)) {
    int kind = PS_PARTITION_OPTIMAL;
    if (!ps_json_get_enum(o, file, "strategy", "partition", FALSE, partitions, &kind, error))
      return FALSE;
    st->partition = (PsPartitionKind)kind;
    return TRUE;
  }
  if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0 ||
      json_object_array_length(v) > (1 << 16)) {
    ps_strategy_fail(error, PS_INPUT_ERROR_TYPE, file, "strategy.partition",
              "must be \"optimal\", \"seed\" or a non-empty array of layer counts, one per "
              "stage (e.g. [3, 4, 4]), got %s", ps_json_type_name(v));
    return FALSE;
  }
  int n = (int)json_object_array_length(v);
  st->partition = PS_PARTITION_GIVEN;
  st->partition_layers = g_new0(int, n);
  for (int i = 0; i < n; i++) {
    json_object *x = json_object_array_get_idx(v, i);
    g_autofree char *p = ps_json_path_index("strategy.partition", i);
    int64_t k = json_object_is_type(x, json_type_int) ? json_object_get_int64(x) : 0;
    if (k < 1 || k > (1 << 24)) {
      ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, p,
                "must be a whole number of layers, at least 1, got %s",
                json_object_to_json_string_ext(x, JSON_C_TO_STRING_PLAIN));
      return FALSE;
    }
    st->partition_layers[i] = (int)k;
  }
  st->n_partition = n;
  return TRUE;
}

static gboolean parse_keys(json_object *o, const char *file, PsReplicaConfig *c,
                           GError **error)
{
  const char *p = "strategy";
  PsReplication *r = &c->rep;
  PsStaging *s = &c->staging;
  int red = r->loss_reduction, sched = s->schedule;
  if (!ps_json_check_keys(o, file, p, keys, error) ||
      !ps_json_get_int32(o, file, p, "replicas", FALSE, 1, MAX_REPLICAS, &r->replicas,
                         error) ||
      !ps_json_get_enum(o, file, p, "loss_reduction", FALSE, loss_reductions, &red, error) ||
      !ps_json_get_int32(o, file, p, "stages", FALSE, 1, 1 << 16, &s->stages, error) ||
      !ps_json_get_int32(o, file, p, "micro_batches", FALSE, 1, 1 << 24, &s->micro_batches,
                         error) ||
      !ps_json_get_enum(o, file, p, "schedule", FALSE, schedules, &sched, error) ||
      !ps_json_get_bool(o, file, p, "rematerialize", FALSE, &s->rematerialize, error) ||
      !ps_json_get_int(o, file, p, "bucket_bytes", FALSE, 1, INT64_MAX, &r->bucket_bytes,
                       error) ||
      !ps_json_get_bool(o, file, p, "overlap", FALSE, &r->overlap, error) ||
      !ps_json_get_bool(o, file, p, "weight_update_sharding", FALSE,
                        &r->weight_update_sharding, error) ||
      !ps_strategy_parse_reduce_precision(o, file, &r->reduce_precision, error) ||
      !ps_json_get_int32(o, file, p, "batch_norm_group_size", FALSE, 1, MAX_REPLICAS,
                         &r->bn_group, error))
    return FALSE;
  r->loss_reduction = (PsLossReduction)red;
  s->schedule = (PsSchedule)sched;
  if (!parse_partition(o, file, s, error))
    return FALSE;
  if (r->bucket_bytes > MAX_BUCKET_BYTES) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, file, "strategy.bucket_bytes",
              "must be at most 1TiB (%" G_GINT64_FORMAT " bytes), got %" G_GINT64_FORMAT,
              (int64_t)MAX_BUCKET_BYTES, r->bucket_bytes);
    return FALSE;
  }
  return TRUE;
}

/* Runs after the overrides, on the topology they chose, so a what-if on
 * another slice fills that slice by default. */
gboolean ps_replica_parse(json_object *obj, const PsTopology *topo, const char *file,
                          gboolean pipelined, void **config, GError **error)
{
  PsReplicaConfig *c = g_new0(PsReplicaConfig, 1);
  c->rep = (PsReplication){.replicas = 0, /* absent until read */
                           .loss_reduction = PS_LOSS_MEAN,
                           .bucket_bytes = PS_DEFAULT_BUCKET_BYTES,
                           .overlap = TRUE, .bn_group = 1};
  c->staging = (PsStaging){.stages = 1, .micro_batches = 1, .schedule = PS_SCHEDULE_GPIPE,
                           .partition = PS_PARTITION_OPTIMAL};
  if (obj && !parse_keys(obj, file, c, error))
    goto fail;
  c->rep.replicas_defaulted = c->rep.replicas == 0;
  if (c->rep.replicas_defaulted &&
      !default_replicas(file, topo, pipelined ? c->staging.stages : 1, &c->rep, error))
    goto fail;
  *config = c;
  return TRUE;
fail:
  ps_replica_free(c);
  return FALSE;
}

static gboolean check_batch(const PsExperiment *e, const PsReplicaConfig *c, GError **error)
{
  const PsReplication *r = &c->rep;
  const PsStaging *s = &c->staging;
  if (e->global_batch % r->replicas != 0) {
    g_autofree char *why =
        r->replicas_defaulted
            ? g_strdup_printf(" (by default every device of %s%s)", e->topology->name,
                              s->stages > 1 ? " over strategy.stages" : "")
            : g_strdup("");
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "global_batch",
                     "%" G_GINT64_FORMAT " is not divisible by strategy.replicas = %d%s; use a "
                     "multiple of %d or %s strategy.replicas",
                     e->global_batch, r->replicas, why, r->replicas,
                     r->replicas_defaulted ? "set" : "change");
    return FALSE;
  }
  int64_t per_replica = e->global_batch / r->replicas;
  if (per_replica % s->micro_batches != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.micro_batches",
                     "the per-replica batch %" G_GINT64_FORMAT " (global_batch %" G_GINT64_FORMAT
                     " / %d replicas) is not divisible by micro_batches = %d; pick "
                     "micro_batches that divides %" G_GINT64_FORMAT,
                     per_replica, e->global_batch, r->replicas, s->micro_batches, per_replica);
    return FALSE;
  }
  return TRUE;
}

static gboolean check_stages(const PsExperiment *e, const PsReplicaConfig *c, GError **error)
{
  const PsModel *m = e->model;
  const PsStaging *s = &c->staging;
  if (s->stages > m->n_layers) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.stages",
                     "%d stages but model '%s' has only %d layers; use at most %d stages",
                     s->stages, m->name, m->n_layers, m->n_layers);
    return FALSE;
  }
  if (s->partition != PS_PARTITION_GIVEN)
    return TRUE;
  int64_t sum = 0;
  for (int i = 0; i < s->n_partition; i++)
    sum += s->partition_layers[i];
  if (s->n_partition != s->stages || sum != m->n_layers) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.partition",
                     "gives %d stages holding %" G_GINT64_FORMAT " layers, but strategy.stages "
                     "is %d and model '%s' has %d layers; give one layer count per stage, "
                     "summing to %d (see `podsim describe model %s` for the layers)",
                     s->n_partition, sum, s->stages, m->name, m->n_layers, m->n_layers,
                     m->name);
    return FALSE;
  }
  return TRUE;
}

/* Gradient clipping by global norm: each replica's own gradient before the
 * reduction, or the reduced one (in shards under weight-update sharding,
 * whose norm an all-reduce adds up); not over pipeline stages, which
 * would need a reduction of their own. */
static gboolean check_clip(const PsExperiment *e, const PsReplicaConfig *c, GError **error)
{
  const PsOptimizerConfig *o = &e->optimizer;
  if (o->clip_norm <= 0)
    return TRUE;
  if (c->staging.stages > 1) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "optimizer.clip_norm",
                     "clipping by global norm is modelled without pipeline stages (got %d); "
                     "set optimizer.clip_norm=0 or strategy.stages=1", c->staging.stages);
    return FALSE;
  }
  return TRUE;
}

gboolean ps_replica_check(const PsExperiment *e, const PsReplicaConfig *c, GError **error)
{
  const PsReplication *r = &c->rep;
  const PsStaging *s = &c->staging;
  if (!check_batch(e, c, error))
    return FALSE;
  int devices = ps_topology_devices(e->topology);
  int64_t needed = (int64_t)r->replicas * s->stages;
  if (needed > devices) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file,
                     s->stages > 1 ? "strategy" : "strategy.replicas",
                     "needs %" G_GINT64_FORMAT " devices, %s has %d (replicas %d x stages %d); "
                     "lower strategy.replicas%s or pick a larger topology",
                     needed, e->topology->name, devices, r->replicas, s->stages,
                     s->stages > 1 ? " or strategy.stages" : "");
    return FALSE;
  }
  /* MLPerf ResNet's distributed_group_size: groups of whole replicas */
  if (r->bn_group > 1 && (s->stages > 1 || r->replicas % r->bn_group != 0)) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.batch_norm_group_size",
                     s->stages > 1 ? "groups batch-norm statistics of replicas without a "
                                     "pipeline; got %d with %d stages"
                                   : "must divide strategy.replicas (%d), got %d",
                     s->stages > 1 ? r->bn_group : r->replicas,
                     s->stages > 1 ? s->stages : r->bn_group);
    return FALSE;
  }
  return check_clip(e, c, error) && check_stages(e, c, error);
}

json_object *ps_replica_to_json(const char *kind, const PsReplicaConfig *c)
{
  const PsReplication *r = &c->rep;
  const PsStaging *s = &c->staging;
  json_object *so = json_object_new_object();
  json_object_object_add(so, "kind", json_object_new_string(kind));
  json_object_object_add(so, "replicas", json_object_new_int(r->replicas));
  json_object_object_add(so, "loss_reduction",
                         json_object_new_string(loss_reductions[r->loss_reduction]));
  json_object_object_add(so, "stages", json_object_new_int(s->stages));
  json_object_object_add(so, "micro_batches", json_object_new_int(s->micro_batches));
  json_object_object_add(so, "schedule", json_object_new_string(schedules[s->schedule]));
  json_object_object_add(so, "rematerialize", json_object_new_boolean(s->rematerialize));
  if (s->partition == PS_PARTITION_GIVEN) {
    json_object *pa = json_object_new_array();
    for (int i = 0; i < s->n_partition; i++)
      json_object_array_add(pa, json_object_new_int(s->partition_layers[i]));
    json_object_object_add(so, "partition", pa);
  } else {
    json_object_object_add(so, "partition", json_object_new_string(partitions[s->partition]));
  }
  json_object_object_add(so, "bucket_bytes", json_object_new_int64(r->bucket_bytes));
  json_object_object_add(so, "overlap", json_object_new_boolean(r->overlap));
  json_object_object_add(so, "weight_update_sharding",
                         json_object_new_boolean(r->weight_update_sharding));
  json_object_object_add(
      so, "reduce_precision",
      json_object_new_string(ps_strategy_reduce_precision_name(r->reduce_precision)));
  if (r->bn_group > 1) /* absent: each replica its own statistics */
    json_object_object_add(so, "batch_norm_group_size", json_object_new_int(r->bn_group));
  return so;
}

void ps_replica_free(void *config)
{
  PsReplicaConfig *c = config;
  if (!c)
    return;
  g_free(c->staging.partition_layers);
  g_free(c);
}

float ps_replica_loss_scale(const PsReplication *rep, int micro_batches)
{
  return (rep->loss_reduction == PS_LOSS_MEAN ? 1.0f / (float)rep->replicas : 1.0f) /
         (float)micro_batches;
}

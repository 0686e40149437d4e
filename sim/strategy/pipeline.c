/* pipeline.c: the pipeline strategy (GPipe, seed 003; PipeDream-Flush).
 *
 * The model is cut into K stages (strategy/partition.h), each on its own
 * device; the per-replica batch is split into M micro-batches.  A stage
 * receives a micro-batch's activations from the stage before it (RECV),
 * runs its layers forward, and sends its output on (SEND); backward runs
 * the other way with the gradients of those activations.  Stage 0 takes
 * the examples and their labels from its infeed; the labels travel with
 * the activations to the last stage, which computes the loss (so one host
 * queue feeds a pipeline, as in GPipe, where the input is fed to the first
 * partition).  Gradients accumulate over the micro-batches
 * (the loss is scaled by 1/M on top of the replicas' scaling), so one step
 * is one optimizer update of the whole batch, as GPipe's synchronous
 * update does.
 *
 * Schedules:
 * - gpipe: all M forwards, then all M backwards (last micro-batch first);
 *   a stage holds the activations of all M micro-batches.
 * - 1f1b (PipeDream-Flush, Narayanan et al., "Memory-Efficient
 *   Pipeline-Parallel DNN Training", ICML 2021): stage s runs
 *   min(K - s - 1, M) warm-up forwards, then alternates one forward and
 *   one backward, then drains the remaining backwards; it holds at most
 *   K - s micro-batches of activations.
 * Both have the same bubble with equal stages: (K - 1) / (M + K - 1) of
 * the step (Huang et al. 2019, section 2.3).
 * Re-materialization keeps only each stage's input per micro-batch and
 * recomputes the forward (RECOMPUTE) right before its backward, ahead of
 * the RECV of the gradient it waits for.
 *
 * Placement: a pipeline replica's K stages sit on consecutive positions of
 * a snake through the slice (the cores of a chip, then chips along x, every
 * other row reversed, every other plane reversed in y), so neighbouring
 * stages are on one chip or on neighbouring chips; replica r takes
 * positions [rK, (r+1)K).  On S > 1 slices the stages go in S equal runs,
 * run j on slice j (see place()), and the pipeline fills every slice.
 * The devices used are always 0 .. KR - 1.  With R > 1, stage s of every replica forms a group
 * whose gradients are all-reduced in buckets, overlapped with the last
 * micro-batch's backward, as in the replicate strategy.
 * Invariant: every SEND has its RECV (tag 2 mb forward, 2 mb + 1
 * backward), each stage's collectives are shared by its R devices and
 * started in the same order by each. */
#include "strategy/strategy.h"

#include "hw/cost.h"
#include "hw/topology.h"
#include "io/config.h"
#include "strategy/partition.h"
#include "strategy/strategy-private.h"

#include <stdio.h>
#include <string.h>

/* Position p of the snake -> device (see the placement note above): the
 * chips of a plane row by row, every other row reversed in x, every other
 * plane reversed in y, so consecutive chips are one hop apart.  Only rows
 * and planes the `used` positions fill are reversed, so the devices used
 * are always 0 .. used - 1 (the last, partial row goes forward). */
static int snake_device(const PsGeometry *g, int p, int used)
{
  int per_chip = ps_geometry_devices_per_chip(g);
  int X = ps_geometry_axis_extent(g, 1), Y = ps_geometry_axis_extent(g, 2);
  int chip_pos = p / per_chip, core = p % per_chip;
  int used_chips = (used + per_chip - 1) / per_chip;
  int z = chip_pos / (X * Y), yi = (chip_pos / X) % Y, xi = chip_pos % X;
  int y = z % 2 == 1 && (z + 1) * X * Y <= used_chips ? Y - 1 - yi : yi;
  int seq_row = chip_pos / X;
  int x = seq_row % 2 == 1 && (seq_row + 1) * X <= used_chips ? X - 1 - xi : xi;
  int c[PS_MAX_DIMS] = {x, y, z};
  return ps_geometry_device_at(g, ps_geometry_chip_at(g, c), core);
}

/* Replica r's stage s -> dev[r K + s]: on one slice the snake's
 * position r K + s; on S > 1 slices (S divides K, and the pipeline fills
 * every slice: pipeline_check) the stages in consecutive runs of K / S,
 * run j on slice j, so a replica crosses the DCN at S - 1 stage
 * boundaries, one SEND/RECV each way per micro-batch, and in each slice
 * the replicas' runs lie along its snake. */
static void place(const PsTopology *topo, int K, int R, int *dev)
{
  g_autoptr(PsGeometry) geo = ps_geometry_new(topo);
  int S = ps_geometry_slices(geo), per = K / S;
  int slice_devices = ps_geometry_devices(geo) / S;
  for (int r = 0; r < R; r++)
    for (int s = 0; s < K; s++) {
      int j = s / per, q = r * per + s % per;
      dev[r * K + s] = j * slice_devices + snake_device(geo, q, R * per);
    }
}

typedef struct {
  const PsExperiment *exp;
  const PsStaging *staging;
  const PsPartition *part;
  int s, K, M;
  int64_t b;             /* micro-batch */
  GArray *groups;        /* the stage's fused ops */
  GArray *ops;
  PsBuckets *bk;
  int64_t in_bytes;      /* the stage's input activation, one micro-batch */
  int64_t held_bytes;    /* what backward needs of it that no layer of the
                            stage counts (ps_model_boundary_elems) */
  int64_t out_bytes;     /* its output */
} Stage;

static void append(GArray *ops, const PsOp *op)
{
  g_array_append_val(ops, *op);
}

static int n_groups(const Stage *st)
{
  return (int)st->groups->len - 1;
}

static PsOp group_op(const Stage *st, PsOpKind kind, int g, int mb)
{
  PsOp op = {.kind = kind, .batch = st->b, .mb = mb,
             .first = g_array_index(st->groups, int, g),
             .last = g_array_index(st->groups, int, g + 1) - 1};
  ps_lower_compute_op(st->exp, &op);
  /* "fwd a..b mb3": the micro-batch after the layers, the name cut to fit */
  char suffix[16];
  int n = snprintf(suffix, sizeof suffix, " mb%d", mb);
  size_t keep = MIN(strlen(op.name), sizeof op.name - 1 - (size_t)n);
  memcpy(op.name + keep, suffix, (size_t)n + 1);
  return op;
}

static void forward(Stage *st, int mb)
{
  const PsExperiment *exp = st->exp;
  const int first = st->part->first[st->s], last = st->part->first[st->s + 1] - 1;
  gboolean remat = st->staging->rematerialize;
  if (st->s == 0) {
    PsOp in = ps_lower_infeed(exp, st->b);
    in.mb = mb;
    in.example_off = mb * st->b;
    snprintf(in.name, sizeof in.name, "infeed dequeue mb%d", mb);
    append(st->ops, &in);
  }
  if (st->s > 0) {
    PsOp rv = {.kind = PS_OP_RECV, .batch = st->b, .mb = mb, .peer = st->s - 1, .tag = 2 * mb,
               .first = first - 1, .last = first - 1, .labels = st->s == st->K - 1,
               .example_off = mb * st->b};
    snprintf(rv.name, sizeof rv.name, "recv activations mb%d", mb);
    append(st->ops, &rv);
  }
  for (int g = 0; g < n_groups(st); g++) {
    PsOp f = group_op(st, PS_OP_FWD, g, mb);
    if (remat) /* only the stage's input stays, for the recomputation */
      f.act_bytes = g == 0 ? st->in_bytes : 0;
    else if (g == 0)
      f.act_bytes += st->held_bytes;
    append(st->ops, &f);
    ps_lower_host_calls(exp, &f, st->ops);
  }
  if (st->s < st->K - 1) {
    /* the micro-batch's labels ride along (int32), for the last stage's loss */
    PsOp sd = {.kind = PS_OP_SEND, .batch = st->b, .mb = mb, .peer = st->s + 1, .tag = 2 * mb,
               .first = last, .last = last, .bytes = (double)st->out_bytes + 4.0 * st->b};
    snprintf(sd.name, sizeof sd.name, "send activations mb%d", mb);
    append(st->ops, &sd);
  }
}

/* `final`: the step's last backward on this stage, whose gradients
 * complete the buckets. */
static void backward(Stage *st, int mb, gboolean final)
{
  const int first = st->part->first[st->s], last = st->part->first[st->s + 1] - 1;
  gboolean remat = st->staging->rematerialize;
  /* the recomputation needs only the stage's input, so it runs before the
   * gradient arrives and fills part of the wait (Huang et al. 2019, 2.3) */
  if (remat)
    for (int g = 0; g < n_groups(st); g++) {
      PsOp f = group_op(st, PS_OP_RECOMPUTE, g, mb);
      append(st->ops, &f);
    }
  if (st->s < st->K - 1) {
    PsOp rv = {.kind = PS_OP_RECV, .batch = st->b, .mb = mb, .peer = st->s + 1,
               .tag = 2 * mb + 1, .first = last, .last = last};
    snprintf(rv.name, sizeof rv.name, "recv gradients mb%d", mb);
    append(st->ops, &rv);
  }
  for (int g = n_groups(st) - 1; g >= 0; g--) {
    PsOp b = group_op(st, PS_OP_BWD, g, mb);
    if (g == 0)
      b.act_bytes -= remat ? st->in_bytes : st->held_bytes;
    append(st->ops, &b);
    if (final)
      ps_lower_buckets_add(st->bk, st->ops, &b, g == 0);
  }
  if (st->s > 0) {
    PsOp sd = {.kind = PS_OP_SEND, .batch = st->b, .mb = mb, .peer = st->s - 1,
               .tag = 2 * mb + 1, .first = first - 1, .last = first - 1,
               .bytes = (double)st->in_bytes};
    snprintf(sd.name, sizeof sd.name, "send gradients mb%d", mb);
    append(st->ops, &sd);
  }
}

void ps_pipeline_walk(PsSchedule schedule, int K, int s, int M, PsPipelineFwd fwd,
                      PsPipelineBwd bwd, void *data)
{
  if (schedule == PS_SCHEDULE_GPIPE) {
    for (int mb = 0; mb < M; mb++)
      fwd(data, mb);
    for (int mb = M - 1; mb >= 0; mb--)
      bwd(data, mb, mb == 0);
    return;
  }
  int warm = MIN(K - s - 1, M);
  for (int mb = 0; mb < warm; mb++)
    fwd(data, mb);
  for (int i = 0; i < M - warm; i++) {
    fwd(data, warm + i);
    bwd(data, i, i == M - 1);
  }
  for (int mb = M - warm; mb < M; mb++)
    bwd(data, mb, mb == M - 1);
}

static void forward_cb(void *st, int mb)
{
  forward(st, mb);
}

static void backward_cb(void *st, int mb, gboolean final)
{
  backward(st, mb, final);
}

static void schedule(Stage *st)
{
  ps_pipeline_walk(st->staging->schedule, st->K, st->s, st->M, forward_cb, backward_cb, st);
}

static const char *memory_advice(const PsStaging *sc)
{
  if (sc->rematerialize)
    return "use more strategy.stages, more strategy.micro_batches, or a smaller global_batch";
  if (sc->schedule == PS_SCHEDULE_GPIPE)
    return "set strategy.rematerialize=true, use strategy.schedule=\"1f1b\" (at most "
           "stages micro-batches in flight), or more strategy.stages";
  return "set strategy.rematerialize=true or use more strategy.stages";
}

static PsPartition *partition(const PsExperiment *exp, const PsReplicaConfig *c,
                              GError **error)
{
  const PsStaging *sc = &c->staging;
  return ps_partition_compute(exp, sc->stages,
                              exp->global_batch / c->rep.replicas / sc->micro_batches,
                              sc->partition, sc->partition_layers, error);
}

static PsPlan *pipeline_compile(const PsExperiment *exp, const void *config, GError **error)
{
  const PsModel *m = exp->model;
  const PsReplicaConfig *c = config;
  const PsStaging *sc = &c->staging;
  const int K = sc->stages, R = c->rep.replicas, M = sc->micro_batches;
  const int64_t b = exp->global_batch / R / M;
  const int act = ps_cost_act_bytes(exp->numerics.precision);
  PsPartition *part = partition(exp, c, error);
  if (!part)
    return NULL;
  const int N = K * R;
  int *dev = g_new(int, N);
  place(exp->topology, K, R, dev);
  PsPlan *plan = ps_plan_new(N);
  plan->micro_batches = M;
  plan->loss_scale = ps_replica_loss_scale(&c->rep, M);
  ps_plan_set_axis(plan, PS_AXIS_DATA, R);
  ps_plan_set_axis(plan, PS_AXIS_STAGE, K);
  plan->stage_first = g_memdup2(part->first, sizeof(int) * (size_t)(K + 1));
  int *members = g_new(int, R);
  gboolean ok = TRUE;
  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  for (int s = 0; s < K && ok; s++) {
    const int first = part->first[s], last = part->first[s + 1] - 1;
    const PsLayer *lf = &m->layers[first], *ll = &m->layers[last];
    for (int r = 0; r < R; r++) {
      members[r] = dev[r * K + s];
      ps_plan_set_coord(plan, members[r], PS_AXIS_STAGE, s);
      ps_plan_set_coord(plan, members[r], PS_AXIS_DATA, r);
      ps_plan_add_params(plan, members[r], ps_lower_param_offset(m, first), part->params[s]);
    }
    char prefix[16];
    snprintf(prefix, sizeof prefix, "s%d ", s);
    PsBuckets bk;
    ps_lower_buckets_init(&bk, exp, &c->rep, plan, g_intern_string(prefix), members, R);
    g_array_set_size(ops, 0);
    Stage st = {.exp = exp, .staging = sc, .part = part, .s = s, .K = K, .M = M, .b = b,
                .groups = ps_lower_layer_groups(exp, first, last + 1), .ops = ops, .bk = &bk,
                .in_bytes = ps_shape_elems(lf->in_shape, lf->in_rank) * b * act,
                .held_bytes = ps_model_boundary_elems(m, first, last + 1) * b * act,
                .out_bytes = ps_shape_elems(ll->out_shape, ll->out_rank) * b * act};
    schedule(&st);
    plan->n_buckets += ps_lower_buckets_count(&bk);
    int64_t off = ps_lower_param_offset(m, first);
    int64_t slot_params = ps_lower_buckets_finish(&bk, ops, off, part->params[s]);
    ps_lower_buckets_clear(&bk);
    g_array_free(st.groups, TRUE);
    if (s == K - 1) {
      PsOp out = ps_lower_outfeed(exp, b * M, 1.0 / R);
      append(ops, &out);
    }
    /* one program per device: the same ops, with the peers of its replica */
    PsProgram tmpl = {.n_ops = (int)ops->len, .ops = (PsOp *)(void *)ops->data};
    g_autofree char *what = g_strdup_printf(" stage %d (layers %d..%d, %s..%s)", s, first,
                                            last, lf->name, ll->name);
    PsMemoryNeed need = {.path = "strategy", .what = what, .batch = b * M,
                         .params = part->params[s], .slot_params = slot_params,
                         .advice = memory_advice(sc)};
    if (!ps_lower_memory(exp, &tmpl, &need, error)) {
      ok = FALSE;
      break;
    }
    PsOp *copy = g_memdup2(ops->data, sizeof(PsOp) * ops->len);
    for (int r = 0; r < R; r++) {
      for (guint i = 0; i < ops->len; i++) {
        const PsOp *o = &g_array_index(ops, PsOp, i);
        if (o->kind == PS_OP_SEND || o->kind == PS_OP_RECV)
          copy[i].peer = dev[r * K + o->peer];
      }
      int prog = ps_plan_add_program(plan, copy, (int)ops->len);
      plan->programs[prog].hbm_static_bytes = tmpl.hbm_static_bytes;
      plan->programs[prog].hbm_peak_bytes = tmpl.hbm_peak_bytes;
      plan->program_of[dev[r * K + s]] = prog;
    }
    g_free(copy);
  }
  g_array_free(ops, TRUE);
  g_free(members);
  g_free(dev);
  ps_partition_free(part);
  if (!ok) {
    ps_plan_free(plan);
    return NULL;
  }
  return plan;
}

static gboolean pipeline_parse(json_object *obj, const PsTopology *topo, const char *file,
                               void **config, GError **error)
{
  return ps_replica_parse(obj, topo, file, TRUE, config, error);
}

/* Whether each stage fits is judged when the plan is compiled: it needs
 * the partition and the schedule's micro-batches in flight. */
static gboolean pipeline_check(const PsExperiment *exp, const void *config, GError **error)
{
  const PsReplicaConfig *c = config;
  int S = exp->topology->slices, K = c->staging.stages;
  if (S > 1 && K % S != 0) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, exp->file, "strategy.stages",
                     "%d stages do not divide over the %d slices of the topology "
                     "(topology.slices): the stages go to the slices in equal runs; use a "
                     "multiple of %d, e.g. %d",
                     K, S, S, (K + S - 1) / S * S);
    return FALSE;
  }
  int devices = ps_topology_devices(exp->topology), R = c->rep.replicas;
  if (S > 1 && (int64_t)R * K != devices) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, exp->file, "strategy.replicas",
                     "a pipeline across %d slices fills them: replicas x stages must be their "
                     "%d devices, not %d x %d; leave strategy.replicas out (%d) or use fewer "
                     "slices",
                     S, devices, R, K, devices / K);
    return FALSE;
  }
  return ps_replica_check(exp, config, error);
}

static json_object *pipeline_to_json(const void *config)
{
  return ps_replica_to_json("pipeline", config);
}

static int pipeline_devices(const void *config)
{
  const PsReplicaConfig *c = config;
  return c->rep.replicas * c->staging.stages;
}

/* The partition's table (strategy/partition.h). */
static gboolean pipeline_describe(const PsExperiment *exp, const void *config, GString *out,
                                  GError **error)
{
  PsPartition *part = partition(exp, config, error);
  if (!part)
    return FALSE;
  ps_partition_describe(part, exp, out);
  ps_partition_free(part);
  return TRUE;
}

const PsStrategy ps_strategy_pipeline = {
    .name = "pipeline",
    .summary = "GPipe pipeline: stages on neighbouring devices, micro-batches, gpipe or 1f1b "
               "schedule, optionally replicated",
    .parse = pipeline_parse,
    .check = pipeline_check,
    .compile = pipeline_compile,
    .to_json = pipeline_to_json,
    .devices = pipeline_devices,
    .describe = pipeline_describe,
    .free = ps_replica_free};

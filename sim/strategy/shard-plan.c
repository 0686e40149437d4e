/* shard-plan.c: the sharded step's plan from the lowering's stage
 * templates (shard-lower.c): the collective instances of each group, each
 * device's program (shared unless ring steps or stage transfers name
 * peers of its own), the mesh and tensor-split tables, and the HBM checks.
 * Invariant: every request of a template becomes one instance per group
 * of devices that differ only along its axis. */
#include "strategy/shard-lower-private.h"

#include "model/net-tensor.h"

#include <string.h>

/* ---- devices, groups and the plan --------------------------------------- */

/* Bytes per element on the wire: activations in the step's precision,
 * reduced gradients in strategy.reduce_precision, weights gathered before
 * use in the compute precision (ps_lower_gather_bytes: a float32 master
 * copy is converted on the shard, then gathered), other weights as they
 * are stored. */
static int req_elem_bytes(const Lower *w, const Req *q)
{
  if (q->buffer == PS_BUFFER_NORM)
    return (int)sizeof(float);
  if (q->buffer == PS_BUFFER_ACTIVATIONS || q->buffer == PS_BUFFER_ACT_GRADS)
    return w->act_b;
  if ((q->buffer == PS_BUFFER_GRADS || q->buffer == PS_BUFFER_GRAD_SHARDS) &&
      q->op != PS_COLL_ALL_GATHER)
    return ps_lower_reduce_bytes(w->exp, w->c->reduce_precision);
  if (q->buffer == PS_BUFFER_PARAMS && q->op == PS_COLL_ALL_GATHER)
    return ps_lower_gather_bytes(w->exp);
  return ps_lower_weight_bytes(w->exp);
}

/* The instance of request r for device d's group, made on first use. */
static int instance(const Lower *w, PsPlan *plan, const PsShardGroups *gr, int **inst, int r, int d)
{
  const Req *q = &g_array_index(w->reqs, Req, r);
  int k = q->group, gid = gr->gid[k][d];
  if (inst[r][gid] >= 0)
    return inst[r][gid];
  PsPlanColl c = {.op = q->op, .algo = w->exp->collective.algorithm,
                  .n_members = gr->size[k], .members = gr->members[k] + gid * gr->size[k],
                  .count = q->count, .buffer = q->buffer, .offset = q->offset,
                  .layer = q->layer, .axis = q->axis,
                  .elem_bytes = req_elem_bytes(w, q)};
  memcpy(c.name, q->name, sizeof c.name);
  inst[r][gid] = ps_plan_add_coll(plan, &c);
  return inst[r][gid];
}

/* Device d's slots (a slot per request: the template's COLL_START/DONE
 * name requests), resolved to its groups' instances in the order its ops
 * meet them; then its program: the template itself, shared by every
 * device of the stage, unless ring steps (collective matmul over the
 * tensor group, ring attention over the context group) or stage transfers
 * (peer: ps_shard_pipe_peers) name peers of its own. */
static void device_program(const Lower *w, PsPlan *plan, const PsShardGroups *gr, int **inst, int d,
                           const int *peer, PsOp *ops, int *shared)
{
  int n = (int)w->ops->len, M = gr->size[PS_GROUP_MODEL], C = gr->size[PS_GROUP_CONTEXT];
  const int *ring = gr->members[PS_GROUP_MODEL] + gr->gid[PS_GROUP_MODEL][d] * M;
  const int *cring = gr->members[PS_GROUP_CONTEXT] + gr->gid[PS_GROUP_CONTEXT][d] * C;
  int me = gr->pos[PS_GROUP_MODEL][d], cme = gr->pos[PS_GROUP_CONTEXT][d];
  const PsOp *tmpl = (const PsOp *)w->ops->data;
  gboolean peers = FALSE;
  for (int i = 0; i < n; i++) {
    const PsOp *op = &tmpl[i];
    if (op->kind == PS_OP_COLL_START)
      ps_plan_set_slot(plan, d, op->coll, instance(w, plan, gr, inst, op->coll, d));
    peers = peers || op->kind == PS_OP_SEND || op->kind == PS_OP_RECV;
  }
  if (!peers) {
    if (*shared < 0)
      *shared = ps_plan_add_program(plan, tmpl, n);
    plan->program_of[d] = *shared;
    return;
  }
  memcpy(ops, tmpl, sizeof(PsOp) * (size_t)n);
  for (int i = 0; i < n; i++)
    if ((ops[i].kind == PS_OP_SEND || ops[i].kind == PS_OP_RECV) && ops[i].ctx_ring)
      ops[i].peer = cring[(cme + ops[i].peer + C) % C];
    else if (ops[i].kind == PS_OP_SEND || ops[i].kind == PS_OP_RECV)
      ops[i].peer = ring[(me + ops[i].peer + M) % M];
  for (guint j = 0; j < w->xfer->len; j++) {
    int i = g_array_index(w->xfer, int, j);
    ops[i].peer = peer[2 * d + (tmpl[i].peer > 0)];
  }
  plan->program_of[d] = ps_plan_add_program(plan, ops, n);
}

/* Each layer's split of its weights over the tensor group, for numerics:
 * what its local kind and tensor role make of it. */
static int *layer_splits(const Lower *w)
{
  int *split = g_new0(int, MAX(w->m->n_layers, 1));
  for (int i = 0; i < w->m->n_layers; i++) {
    PsTensorRole role = ps_layer_kind_lower(w->m->layers[i].kind)->tensor;
    PsShardLocal k = w->lp[i].local;
    split[i] = k == PS_LOC_COL    ? PS_SPLIT_COLS
               : k == PS_LOC_ROW  ? PS_SPLIT_ROWS
               : k == PS_LOC_ROWS ? PS_SPLIT_SEQUENCE
               : k != PS_LOC_DIV  ? PS_SPLIT_NONE
               : role == PS_TP_HEADS ? PS_SPLIT_HEADS
               : role == PS_TP_VOCAB || w->lp[i].vocab_loss ? PS_SPLIT_VOCAB
                                                            : PS_SPLIT_NONE;
  }
  return split;
}

/* The plan's axes (stage only when there are stages) and what each
 * device owns: its stage's layers [first[s], first[s + 1]). */
static void set_mesh(PsPlan *plan, const PsShardConfig *c, const int *coord, int n,
                     const PsModel *m, const int *first)
{
  static const PsAxis axes[] = {PS_AXIS_DATA,     PS_AXIS_FSDP,    PS_AXIS_TENSOR,
                                PS_AXIS_SEQUENCE, PS_AXIS_CONTEXT, PS_AXIS_STAGE};
  int n_axes = PS_SHARD_AXES + (c->size[PS_AXIS_STAGE] > 1);
  for (int i = 0; i < n_axes; i++)
    ps_plan_set_axis(plan, axes[i], c->size[axes[i]]);
  for (int d = 0; d < n; d++) {
    for (int i = 0; i < n_axes; i++)
      ps_plan_set_coord(plan, d, axes[i], coord[d * PS_N_AXES + axes[i]]);
    int s = coord[d * PS_N_AXES + PS_AXIS_STAGE];
    int64_t off = ps_lower_param_offset(m, first[s]);
    if (n_axes == PS_SHARD_AXES)
      ps_plan_add_params(plan, d, 0, m->params);
    else
      ps_plan_add_params(plan, d, off, ps_lower_param_offset(m, first[s + 1]) - off);
  }
}

/* " sharded" or " sharded, stage 1 (layers 24..47)".  (transfer full) */
char *ps_shard_stage_what(const Lower *w)
{
  if (w->P == 1)
    return g_strdup(" sharded");
  return g_strdup_printf(" sharded, stage %d (layers %d..%d)", w->stage, w->lo, w->hi - 1);
}

gboolean ps_shard_check_memory(const PsExperiment *exp, const PsShardConfig *c,
                               GError **error)
{
  int *first = ps_shard_pipe_bounds(exp, c, error);
  gboolean ok = first != NULL;
  for (int s = 0; ok && s < c->size[PS_AXIS_STAGE]; s++) {
    Lower w;
    ps_shard_lower_init(&w, exp, c, s, first[s], first[s + 1]);
    ok = ps_shard_template_fits(&w, error);
    ps_shard_lower_clear(&w);
  }
  g_free(first);
  return ok;
}

/* Stage w->stage's collective instances and its devices' programs, with
 * their HBM (once the template fits). */
static gboolean stage_programs(Lower *w, PsPlan *plan, const PsShardGroups *gr, const int *coord,
                               const int *peer, GError **error)
{
  int n = plan->n_devices, n_req = (int)w->reqs->len, p0 = plan->n_programs;
  int **inst = g_new(int *, MAX(n_req, 1));
  for (int r = 0; r < n_req; r++) {
    int ng = n / gr->size[g_array_index(w->reqs, Req, r).group];
    inst[r] = g_new(int, ng);
    for (int j = 0; j < ng; j++)
      inst[r][j] = -1;
  }
  PsOp *ops = g_new(PsOp, w->ops->len);
  int shared = -1;
  for (int d = 0; d < n; d++)
    if (coord[d * PS_N_AXES + PS_AXIS_STAGE] == w->stage)
      device_program(w, plan, gr, inst, d, peer, ops, &shared);
  g_free(ops);
  for (int r = 0; r < n_req; r++)
    g_free(inst[r]);
  g_free(inst);
  if (!ps_shard_template_fits(w, error))
    return FALSE;
  g_autofree char *what = ps_shard_stage_what(w);
  PsMemoryNeed need = {.path = "strategy.mesh", .what = what, .batch = w->batch * w->mbs,
                       .params = w->shard_params, .slot_params = w->shard_params,
                       .advice = ""};
  for (int p = p0; p < plan->n_programs; p++)
    ps_lower_memory(w->exp, &plan->programs[p], &need, NULL);
  return TRUE;
}

/* The plan's tables beside the programs: loss scale, mesh, tensor splits
 * and, with stages, the partition and micro-batches. */
static void plan_tables(PsPlan *plan, const Lower *w, const int *coord, const int *first)
{
  const PsShardConfig *c = w->c;
  int P = c->size[PS_AXIS_STAGE];
  float rows = (float)(w->D * w->F) * (float)w->mbs;
  plan->loss_scale = c->loss_reduction == PS_LOSS_MEAN ? 1.0f / rows : 1.0f;
  set_mesh(plan, c, coord, plan->n_devices, w->m, first);
  if (w->M > 1)
    plan->layer_split = layer_splits(w);
  if (P > 1 || w->mbs > 1)
    plan->micro_batches = w->mbs;
  if (P > 1)
    plan->stage_first = g_memdup2(first, sizeof(int) * (size_t)(P + 1));
}

PsPlan *ps_shard_lower(const PsExperiment *exp, const PsShardConfig *c, GError **error)
{
  int P = c->size[PS_AXIS_STAGE], n = ps_shard_devices(c), n_slots = 0;
  int *first = ps_shard_pipe_bounds(exp, c, error);
  if (!first)
    return NULL;
  Lower *w = g_new(Lower, P);
  for (int s = 0; s < P; s++) {
    ps_shard_lower_init(&w[s], exp, c, s, first[s], first[s + 1]);
    n_slots = MAX(n_slots, (int)w[s].reqs->len);
  }
  g_autoptr(GString) how = g_string_new(NULL);
  int *coord = ps_shard_mesh_map(exp->topology, c, how);
  int *peer = ps_shard_pipe_peers(c, coord, n);
  PsPlan *plan = ps_plan_new(n);
  plan_tables(plan, &w[0], coord, first);
  for (int s = 0; s < P; s++)
    plan->n_buckets += w[s].buckets;
  if (strstr(how->str, PS_SHARD_ROW_MAJOR))
    plan->warning = g_strdup_printf(
        "strategy.mesh: data %d x fsdp %d x tensor %d x sequence %d x context %d (x %d stages) "
        "does not "
        "split into whole axes of %s's torus, so its devices are taken in order (row-major) "
        "and its groups are blocks whose collectives cannot use every link (jax's "
        "create_device_mesh makes such a mesh only with allow_split_physical_axes); sizes "
        "that are products of the torus's axes are faster (podsim describe --stages shows "
        "the layout)",
        c->size[PS_AXIS_DATA], c->size[PS_AXIS_FSDP], c->size[PS_AXIS_TENSOR],
        c->size[PS_AXIS_SEQUENCE], c->size[PS_AXIS_CONTEXT], P, exp->topology->name);
  PsShardGroups gr;
  ps_shard_groups_init(&gr, c, coord, n);
  if (n_slots > 0)
    ps_plan_use_slots(plan, n_slots);
  gboolean ok = TRUE;
  for (int s = 0; s < P && ok; s++)
    ok = stage_programs(&w[s], plan, &gr, coord, peer, error);
  for (int s = 0; s < P; s++)
    ps_shard_lower_clear(&w[s]);
  ps_shard_groups_clear(&gr);
  g_free(w);
  g_free(peer);
  g_free(coord);
  g_free(first);
  if (!ok) {
    ps_plan_free(plan);
    return NULL;
  }
  return plan;
}

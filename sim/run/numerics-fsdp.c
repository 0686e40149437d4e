/* numerics-fsdp.c: real arithmetic on an fsdp mesh (ZeRO-3).  Every
 * device's net holds the whole flat parameter and gradient buffers, but a
 * device owns only its blocks of each fsdp reduce-scatter of gradients
 * (the collective's ps_pod_coll_block pieces, the same as the pieces it
 * contributes to the all-gather of those weights).  When the reduce-scatter
 * is done its blocks hold the fsdp group's sum; they are copied into the
 * device's gradient shards, a flat buffer laid out as the lowering lays
 * out its data all-reduce buckets (each reduce-scatter in the order of its
 * start, ceil(count / fsdp) floats), so the data axis reduces exactly the
 * shards; without a data axis each takes as many floats as its largest
 * blocks (multiring's streams round their parts up).  The update copies
 * them back and steps only the owned blocks.
 *
 * On a tensor x fsdp mesh the flat buffers are the device's packed tensor
 * shard (numerics-tensor.c): its owned weights and gradients in layer
 * order, where the lowering's fsdp collectives count them.
 *
 * Invariant: after a step, every device's owned blocks hold the weights a
 * one-device run on the global batch would (up to the order of float
 * sums); the weights it does not own are stale until the next all-gather
 * of them, and nothing reads them before it. */
#include "run-private.h"

#include <math.h>
#include <string.h>

/* The flat weights or gradients the fsdp collectives cut into blocks, and
 * collective c's place in them. */
static float *flat(Run *r, int device, gboolean grads)
{
  float *packed = ps_run_tensor_packed(r, device, grads);
  if (packed)
    return packed;
  return grads ? ps_net_grads(r->nets[device]) : ps_net_params(r->nets[device]);
}

static int64_t flat_off(Run *r, int c)
{
  int64_t off = ps_run_tensor_packed_off(r, c);
  return off >= 0 ? off : r->plan->colls[c].offset;
}

static gboolean is_shard_rs(const PsPlanColl *pc)
{
  return pc->op == PS_COLL_REDUCE_SCATTER && pc->buffer == PS_BUFFER_GRADS &&
         pc->axis == PS_AXIS_FSDP;
}

/* The most floats any device's blocks of reduce-scatter c hold: its
 * count over F, or more where the algorithm's streams each round their
 * parts up (multiring). */
static int64_t blocks_most(Run *r, int c)
{
  const PsPlanColl *pc = &r->plan->colls[c];
  int64_t most = 0;
  for (int m = 0; m < pc->n_members; m++) {
    int d = pc->members[m], pieces = 1;
    int64_t total = 0;
    for (int k = 0; k < pieces; k++) {
      int64_t off = 0, len = 0;
      pieces = ps_pod_coll_block(r->pod, c, d, k, &off, &len);
      total += len;
    }
    most = MAX(most, total);
  }
  return most;
}

/* The floats reduce-scatter c's slot of the shards holds: with a data
 * axis, ceil(count / F), the plan's layout of the shards, which the data
 * axis's all-reduces of them follow (an error if some device's blocks do
 * not fit it); without one, as many as its largest blocks, the layout
 * being the run's own.  -1 on error. */
static int64_t slot_floats(Run *r, int c, int F, GError **error)
{
  const PsPlanColl *pc = &r->plan->colls[c];
  int64_t room = (pc->count + F - 1) / F, most = blocks_most(r, c);
  if (ps_plan_axis_size(r->plan, PS_AXIS_DATA) <= 1)
    return MAX(room, most);
  if (most > room) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: collective.algorithm: with numerics.enabled=true on a data x fsdp mesh, "
                "the reduce-scatter '%s' gives a device %" G_GINT64_FORMAT " gradients, "
                "more than the %" G_GINT64_FORMAT " (its %" G_GINT64_FORMAT " over fsdp %d) "
                "its shard holds for the data axis's all-reduce: its algorithm rounds each "
                "stream's part up; set collective.algorithm to bidir, ring or torus, or "
                "numerics.enabled=false",
                r->exp->file, pc->name, most, room, pc->count, F);
    return -1;
  }
  return room;
}

/* Whether member m's blocks of collectives a and b are the same pieces. */
static gboolean same_blocks(Run *r, int a, int b, int device)
{
  int pa = 1, pb = 1;
  for (int k = 0; k < pa; k++) {
    int64_t oa = 0, la = 0, ob = 0, lb = 0;
    pa = ps_pod_coll_block(r->pod, a, device, k, &oa, &la);
    pb = ps_pod_coll_block(r->pod, b, device, k < pb ? k : 0, &ob, &lb);
    if (pa != pb || oa != ob || la != lb)
      return FALSE;
  }
  return TRUE;
}

/* A device updates the blocks its fsdp reduce-scatter of a layer's
 * gradients gave it and hands the same blocks to the all-gathers of the
 * layer's weights; two algorithms can cut a buffer differently (auto picks
 * each collective's by its bytes, and a bf16 reduction of float32
 * weights gives the two different sizes), which would gather stale
 * weights.  An
 * error naming collective.algorithm if some all-gather's blocks are not
 * its reduce-scatter's. */
static gboolean gathers_match(Run *r, int c, GError **error)
{
  const PsPlan *plan = r->plan;
  const PsPlanColl *rs = &plan->colls[c];
  for (int a = 0; a < plan->n_colls; a++) {
    const PsPlanColl *ag = &plan->colls[a];
    if (ag->op != PS_COLL_ALL_GATHER || ag->buffer != PS_BUFFER_PARAMS ||
        ag->axis != PS_AXIS_FSDP || ag->offset != rs->offset || ag->count != rs->count ||
        ag->n_members != rs->n_members ||
        memcmp(ag->members, rs->members, sizeof(int) * (size_t)rs->n_members) != 0)
      continue;
    for (int m = 0; m < rs->n_members; m++)
      if (!same_blocks(r, c, a, rs->members[m])) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "%s: collective.algorithm: with numerics.enabled=true on an fsdp axis, "
                    "'%s' (%s) and '%s' (%s) cut the layer's weights into different blocks "
                    "(auto picks each by its bytes: %d and %d a weight), so a device would "
                    "gather weights it did not update; set collective.algorithm to ring, "
                    "bidir or torus, or numerics.enabled=false",
                    r->exp->file, rs->name, ps_pod_coll_algorithm(r->pod, c), ag->name,
                    ps_pod_coll_algorithm(r->pod, a), rs->elem_bytes, ag->elem_bytes);
        return FALSE;
      }
  }
  return TRUE;
}

gboolean ps_run_fsdp_init(Run *r, GError **error)
{
  const PsPlan *plan = r->plan;
  int F = ps_plan_axis_size(plan, PS_AXIS_FSDP);
  if (F <= 1)
    return TRUE;
  r->shard_off = g_new(int64_t, MAX(plan->n_colls, 1));
  int64_t *floats = g_new(int64_t, MAX(plan->n_colls, 1));
  for (int c = 0; c < plan->n_colls; c++)
    r->shard_off[c] = floats[c] = -1;
  int64_t most = 1;
  for (int d = 0; d < r->n_dev; d++) { /* by device: programs may be shared */
    const PsProgram *pr = ps_plan_program(plan, d);
    int64_t off = 0;
    for (int i = 0; i < pr->n_ops; i++) {
      const PsOp *op = &pr->ops[i];
      int c = op->kind == PS_OP_COLL_START ? ps_plan_op_coll(plan, d, op) : -1;
      if (c < 0 || !is_shard_rs(&plan->colls[c]))
        continue;
      if (floats[c] < 0 &&
          (!gathers_match(r, c, error) || (floats[c] = slot_floats(r, c, F, error)) < 0)) {
        g_free(floats);
        return FALSE;
      }
      r->shard_off[c] = off;
      off += floats[c];
    }
    most = MAX(most, off);
  }
  g_free(floats);
  r->shards = g_new(float *, r->n_dev);
  for (int d = 0; d < r->n_dev; d++)
    r->shards[d] = g_new0(float, (size_t)most);
  r->clip_ss = g_new0(double, r->n_dev);
  return TRUE;
}

void ps_run_fsdp_free(Run *r)
{
  if (r->shards)
    for (int d = 0; d < r->n_dev; d++)
      g_free(r->shards[d]);
  g_free(r->shards);
  g_free(r->shard_off);
  g_free(r->clip_ss);
  r->shards = NULL;
  r->shard_off = NULL;
  r->clip_ss = NULL;
}

/* Copies device's pieces of reduce-scatter c between its gradients and
 * its shards (to_shards: gradients -> shards). */
static void move_blocks(Run *r, int device, int c, gboolean to_shards)
{
  float *grads = flat(r, device, TRUE) + flat_off(r, c);
  float *shard = r->shards[device] + r->shard_off[c];
  int pieces = 1;
  for (int k = 0; k < pieces; k++) {
    int64_t off = 0, len = 0;
    pieces = ps_pod_coll_block(r->pod, c, device, k, &off, &len);
    if (to_shards)
      memcpy(shard, grads + off, (size_t)len * sizeof *shard);
    else
      memcpy(grads + off, shard, (size_t)len * sizeof *shard);
    shard += len;
  }
}

void ps_run_fsdp_coll_done(Run *r, int device, int c)
{
  if (r->shard_off && r->shard_off[c] >= 0)
    move_blocks(r, device, c, TRUE);
}

float *ps_run_fsdp_shards(Run *r, int device, int64_t off)
{
  g_return_val_if_fail(r->shards != NULL, NULL);
  return r->shards[device] + off;
}

/* The fsdp reduce-scatters device starts, in program order (transfer full). */
static GArray *device_rs(Run *r, int device)
{
  GArray *cs = g_array_new(FALSE, FALSE, sizeof(int));
  const PsProgram *pr = ps_plan_program(r->plan, device);
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    int c = ps_plan_op_coll(r->plan, device, &pr->ops[i]);
    if (r->shard_off[c] >= 0)
      g_array_append_val(cs, c);
  }
  return cs;
}

GArray *ps_run_fsdp_ranges(Run *r, int device)
{
  if (!r->shard_off)
    return NULL;
  GArray *out = g_array_new(FALSE, FALSE, sizeof(PsParamRange));
  g_autoptr(GArray) cs = device_rs(r, device);
  for (guint j = 0; j < cs->len; j++) {
    int c = g_array_index(cs, int, j);
    int pieces = 1;
    for (int k = 0; k < pieces; k++) {
      PsParamRange rg = {0, 0};
      pieces = ps_pod_coll_block(r->pod, c, device, k, &rg.off, &rg.len);
      rg.off += flat_off(r, c);
      g_array_append_val(out, rg);
    }
  }
  return out;
}

gboolean ps_run_fsdp_clip(Run *r, int device)
{
  if (!r->shard_off)
    return FALSE;
  /* each reduce-scatter's blocks, where move_blocks put them; with a
   * tensor axis, packed gradients, whose replicated layers count 1/T */
  double ss = 0;
  g_autoptr(GArray) cs = device_rs(r, device);
  for (guint j = 0; j < cs->len; j++) {
    int c = g_array_index(cs, int, j), pieces = 1;
    const float *shard = r->shards[device] + r->shard_off[c];
    for (int k = 0; k < pieces; k++) {
      int64_t off = 0, len = 0;
      pieces = ps_pod_coll_block(r->pod, c, device, k, &off, &len);
      ss += ps_run_tensor_pack_ss(r, device, flat_off(r, c) + off, shard, len);
      shard += len;
    }
  }
  r->clip_ss[device] = ss;
  /* what the norm's all-reduces add up; clip_shards sums clip_ss */
  *ps_run_norm(r, device) = (float)ss;
  return TRUE;
}

/* Scales device's shards as clipping by global norm does: the norm over
 * its fsdp x tensor x sequence group's shards (every member has run its
 * CLIP: the norm's all-reduces, done before the update, waited for them;
 * none runs the next step's before this update, whose weights its
 * all-gathers need).  The data replicas hold the same shards and are not
 * counted again. */
static void clip_shards(Run *r, int device)
{
  static const PsAxis others[] = {PS_AXIS_DATA, PS_AXIS_STAGE};
  double ss = 0;
  for (int e = 0; e < r->n_dev; e++) {
    gboolean same = TRUE;
    for (guint a = 0; a < G_N_ELEMENTS(others) && same; a++)
      same = ps_plan_coord(r->plan, e, others[a]) == ps_plan_coord(r->plan, device, others[a]);
    if (same)
      ss += r->clip_ss[e];
  }
  double norm = sqrt(ss), limit = r->exp->optimizer.clip_norm;
  if (!(norm > limit))
    return; /* within the limit, or not a number: as clip_grads */
  /* each reduce-scatter's blocks, from its slot (which may hold more than
   * this device's blocks: ring's uneven ones, multiring's rounded up) */
  float f = (float)(limit / norm);
  g_autoptr(GArray) cs = device_rs(r, device);
  for (guint j = 0; j < cs->len; j++) {
    int c = g_array_index(cs, int, j), pieces = 1;
    float *s = r->shards[device] + r->shard_off[c];
    for (int k = 0; k < pieces; k++) {
      int64_t off = 0, len = 0;
      pieces = ps_pod_coll_block(r->pod, c, device, k, &off, &len);
      for (int64_t i = 0; i < len; i++)
        s[i] *= f;
      s += len;
    }
  }
}

gboolean ps_run_fsdp_update(Run *r, int device, int64_t step, const PsOp *op)
{
  if (!r->shard_off)
    return FALSE;
  if (r->exp->optimizer.clip_norm > 0 && op->update_pass != 2) /* once */
    clip_shards(r, device);
  g_autoptr(GArray) cs = device_rs(r, device);
  for (guint j = 0; j < cs->len; j++)
    move_blocks(r, device, g_array_index(cs, int, j), FALSE);
  /* a layer-wise update in two passes (an fsdp mesh without a tensor
   * axis: the flat layout is the net's): its blocks' sums of squares of
   * each layer of the op's range, from the op's slot of NORM, which the
   * fsdp group's all-reduce adds up before the second pass */
  int64_t n_sums;
  float *sums = ps_run_update_sums(r, device, op, &n_sums);
  float *params = flat(r, device, FALSE), *grads = flat(r, device, TRUE);
  g_autoptr(GArray) rgs = ps_run_fsdp_ranges(r, device);
  for (guint j = 0; j < rgs->len; j++) {
    const PsParamRange *rg = &g_array_index(rgs, PsParamRange, j);
    ps_run_update_piece(r, device, step, op, params, grads, (size_t)rg->off, (size_t)rg->len,
                        sums);
  }
  return TRUE;
}

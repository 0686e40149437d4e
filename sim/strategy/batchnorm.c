/* batchnorm.c: batch normalization whose statistics are all-reduced across
 * a group of replicas, as the MLPerf ResNet-50 submissions on TPU pods ran
 * it (their distributed_group_size flag: the mean and the mean square of
 * each channel summed over the group's per-replica batches, forward, and
 * the two per-channel sums of the gradient backward).
 *
 * A compute op is cut at each batch-norm layer: forward, the layers before
 * it, then the all-reduce of its 2 C moments (the numerics compute the
 * device's share as the collective takes its buffer), then the layer and
 * the rest; backward, the layers above it, the all-reduce of its 2 C
 * gradient moments, then the layer and those below.  Each is a small
 * collective (members: the group, axis data) whose latency the core waits
 * for.  Groups are consecutive replicas: group k is replicas kG .. kG+G-1,
 * and runs a program whose batch-norm collectives are its own.
 * Invariant: the pieces of an op cover its layers once, in order; a group's
 * collectives are group 0's index plus the group's number. */
#include "strategy/strategy-private.h"

#include <stdio.h>

static int bn_channels(const PsLayer *L)
{
  return (int)L->in_shape[L->in_rank - 1];
}

/* One collective per group, consecutive indices; returns group 0's. */
static int add_colls(PsPlan *plan, const PsExperiment *exp, const PsReplication *rep, int layer,
                     gboolean backward)
{
  const PsLayer *L = &exp->model->layers[layer];
  int G = rep->bn_group, first = -1;
  int *members = g_new(int, G);
  for (int k = 0; k < rep->replicas / G; k++) {
    for (int i = 0; i < G; i++)
      members[i] = k * G + i;
    PsPlanColl c = {.op = PS_COLL_ALL_REDUCE, .algo = exp->collective.algorithm,
                    .n_members = G, .members = members, .count = 2 * bn_channels(L),
                    .elem_bytes = 4,
                    .buffer = backward ? PS_BUFFER_BN_GRAD_STATS : PS_BUFFER_BN_STATS,
                    .layer = layer, .axis = PS_AXIS_DATA};
    snprintf(c.name, sizeof c.name, "all-reduce bn %s%s g%d", backward ? "grad " : "", L->name,
             k);
    int idx = ps_plan_add_coll(plan, &c);
    if (first < 0)
      first = idx;
  }
  g_free(members);
  return first;
}

static void append_coll(GArray *ops, int c)
{
  PsOp st = {.kind = PS_OP_COLL_START, .coll = c}, dn = {.kind = PS_OP_COLL_DONE, .coll = c};
  snprintf(st.name, sizeof st.name, "start %d", c);
  snprintf(dn.name, sizeof dn.name, "done %d", c);
  g_array_append_val(ops, st);
  g_array_append_val(ops, dn);
}

static gboolean grouped(const PsExperiment *exp, const PsReplication *rep, int l)
{
  return rep->bn_group > 1 && exp->model->layers[l].kind == PS_LAYER_BATCHNORM;
}

static void append_piece(const PsExperiment *exp, const PsOp *whole, int first, int last,
                         GArray *ops, PsOp *out)
{
  PsOp o = {.kind = whole->kind, .batch = whole->batch, .mb = whole->mb, .first = first,
            .last = last};
  ps_lower_compute_op(exp, &o);
  g_array_append_val(ops, o);
  *out = o;
}

void ps_lower_bn_fwd(PsPlan *plan, const PsExperiment *exp, const PsReplication *rep,
                     const PsOp *fwd, GArray *ops)
{
  int cur = fwd->first;
  PsOp piece;
  for (int l = fwd->first; l <= fwd->last; l++) {
    if (!grouped(exp, rep, l))
      continue;
    if (l > cur) {
      append_piece(exp, fwd, cur, l - 1, ops, &piece);
      ps_lower_host_calls(exp, &piece, ops);
    }
    append_coll(ops, add_colls(plan, exp, rep, l, FALSE));
    cur = l;
  }
  append_piece(exp, fwd, cur, fwd->last, ops, &piece);
  ps_lower_host_calls(exp, &piece, ops);
}

void ps_lower_bn_bwd(PsPlan *plan, const PsExperiment *exp, const PsReplication *rep,
                     const PsOp *bwd, PsBuckets *bk, gboolean closes, GArray *ops)
{
  int hi = bwd->last;
  PsOp piece;
  for (int l = bwd->last; l >= bwd->first; l--) {
    if (!grouped(exp, rep, l))
      continue;
    if (l < hi) {
      append_piece(exp, bwd, l + 1, hi, ops, &piece);
      ps_lower_buckets_add(bk, ops, &piece, FALSE);
    }
    append_coll(ops, add_colls(plan, exp, rep, l, TRUE));
    hi = l;
  }
  append_piece(exp, bwd, bwd->first, hi, ops, &piece);
  ps_lower_buckets_add(bk, ops, &piece, closes);
}

void ps_lower_bn_programs(PsPlan *plan, const PsReplication *rep)
{
  int G = rep->bn_group, K = rep->replicas / G;
  if (G <= 1 || K <= 1)
    return;
  const PsProgram *p0 = &plan->programs[0];
  int n = p0->n_ops;
  PsOp *ops = g_memdup2(p0->ops, sizeof(PsOp) * (size_t)n);
  for (int k = 1; k < K; k++) {
    for (int i = 0; i < n; i++) {
      PsOp *o = &ops[i];
      gboolean coll = o->kind == PS_OP_COLL_START || o->kind == PS_OP_COLL_DONE;
      if (coll && (plan->colls[p0->ops[i].coll].buffer == PS_BUFFER_BN_STATS ||
                   plan->colls[p0->ops[i].coll].buffer == PS_BUFFER_BN_GRAD_STATS))
        o->coll = p0->ops[i].coll + k;
    }
    int prog = ps_plan_add_program(plan, ops, n);
    p0 = &plan->programs[0]; /* the table may have moved */
    for (int i = 0; i < G; i++)
      plan->program_of[k * G + i] = prog;
  }
  g_free(ops);
}

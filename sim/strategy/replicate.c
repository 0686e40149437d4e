/* replicate.c: the data-parallel strategy (TPUStrategy, CrossShardOptimizer).
 *
 * Every replica holds the whole model and a 1/replicas share of the global
 * batch.  With a "mean" loss reduction the loss is scaled by 1/replicas
 * before gradients are taken and the gradients are then summed across
 * replicas (REFERENCE.md, [TF]); with "sum" there is no scaling.
 * Element-wise layers are fused into the op of the layer that produces
 * their input when the experiment asks for fusion (as XLA does).
 * Invariant: all replicas get identical programs, so collectives line up. */
#include "program/program.h"

#include "hw/cost.h"

#include <stdio.h>

static void op_name(PsOp *op, const PsModel *m, const char *prefix)
{
  if (op->first == op->last)
    snprintf(op->name, sizeof op->name, "%s %s", prefix, m->layers[op->first].name);
  else
    snprintf(op->name, sizeof op->name, "%s %s..%s", prefix, m->layers[op->first].name,
             m->layers[op->last].name);
}

static gboolean host_call_after(const PsExperiment *exp, int layer)
{
  for (int h = 0; h < exp->n_host_calls; h++)
    if (exp->host_calls[h].after == layer)
      return TRUE;
  return FALSE;
}

/* Groups of layers that run as one op: [starts[g], starts[g+1]).  A layer
 * whose output goes to the host ends its group. */
static GArray *layer_groups(const PsExperiment *exp)
{
  const PsModel *m = exp->model;
  GArray *starts = g_array_new(FALSE, FALSE, sizeof(int));
  for (int i = 0; i < m->n_layers; i++) {
    /* a reshape is free: it also joins the op of the layer after it */
    gboolean joins = i > 0 && (ps_cost_fuses_into_producer(m->layers[i].kind) ||
                               m->layers[i - 1].kind == PS_LAYER_FLATTEN);
    if (!(exp->fuse_elementwise && joins) || (i > 0 && host_call_after(exp, i - 1)))
      g_array_append_val(starts, i);
  }
  int end = m->n_layers;
  g_array_append_val(starts, end);
  return starts;
}

static void build_program(PsProgram *p, const PsExperiment *exp, int64_t batch, int replicas)
{
  const PsModel *m = exp->model;
  GArray *ops = g_array_new(FALSE, TRUE, sizeof(PsOp));
  GArray *groups = layer_groups(exp);
  int act_bytes = ps_cost_act_bytes(exp->numerics.precision);
  int n_groups = (int)groups->len - 1;
  int64_t in_elems = ps_shape_elems(m->in_shape, m->in_rank);

  PsOp op = {.kind = PS_OP_INFEED, .batch = batch, .bytes = (double)(batch * in_elems) * 4.0};
  snprintf(op.name, sizeof op.name, "infeed dequeue");
  g_array_append_val(ops, op);
  for (int g = 0; g < n_groups; g++) {
    PsOp f = {.kind = PS_OP_FWD, .batch = batch};
    f.first = g_array_index(groups, int, g);
    f.last = g_array_index(groups, int, g + 1) - 1;
    op_name(&f, m, "fwd");
    g_array_append_val(ops, f);
    for (int h = 0; h < exp->n_host_calls; h++) {
      const PsHostCall *hc = &exp->host_calls[h];
      if (hc->after != f.last)
        continue;
      const PsLayer *l = &m->layers[hc->after];
      double elems = (double)(ps_shape_elems(l->out_shape, l->out_rank) * batch);
      PsOp call = {.kind = PS_OP_HOST_CALL, .batch = batch, .host_call = h,
                   .first = hc->after, .last = hc->after};
      call.bytes = elems * act_bytes;
      call.bytes_back = hc->kind == PS_HOST_CALL_HISTOGRAM ? 4.0 * hc->bins : call.bytes;
      call.host_flops = elems * hc->flops_per_element;
      snprintf(call.name, sizeof call.name, "host call: %s %s",
               hc->kind == PS_HOST_CALL_HISTOGRAM ? "histogram of" : "roundtrip of", l->name);
      g_array_append_val(ops, call);
    }
  }
  for (int g = n_groups - 1; g >= 0; g--) {
    PsOp b = {.kind = PS_OP_BWD, .batch = batch};
    b.first = g_array_index(groups, int, g);
    b.last = g_array_index(groups, int, g + 1) - 1;
    op_name(&b, m, "bwd");
    g_array_append_val(ops, b);
  }
  if (replicas > 1) {
    PsOp ar = {.kind = PS_OP_ALL_REDUCE, .batch = batch, .bytes = (double)m->params * 4.0};
    snprintf(ar.name, sizeof ar.name, "all-reduce gradients");
    g_array_append_val(ops, ar);
  }
  PsOp up = {.kind = PS_OP_UPDATE, .batch = batch};
  snprintf(up.name, sizeof up.name, "apply update");
  g_array_append_val(ops, up);
  /* loss and correct count as two floats */
  PsOp out = {.kind = PS_OP_OUTFEED, .batch = batch, .bytes = 8.0};
  snprintf(out.name, sizeof out.name, "outfeed");
  g_array_append_val(ops, out);

  p->n_ops = (int)ops->len;
  p->ops = (PsOp *)(void *)g_array_free(ops, FALSE);
  g_array_free(groups, TRUE);
}

PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error)
{
  if (exp->strategy.kind != PS_STRATEGY_REPLICATE) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: strategy.kind: the pipeline strategy is not available in this version; "
                "use \"replicate\"",
                exp->file);
    return NULL;
  }
  int replicas = exp->strategy.replicas;
  PsPlan *plan = g_new0(PsPlan, 1);
  plan->replicas = replicas;
  plan->per_replica_batch = exp->global_batch / replicas;
  plan->loss_scale =
      exp->strategy.loss_reduction == PS_LOSS_MEAN ? 1.0f / (float)replicas : 1.0f;
  plan->optimizer_slots = exp->optimizer.kind == PS_OPT_ADAM ? 2 : 1;
  plan->n_programs = replicas;
  plan->programs = g_new0(PsProgram, replicas);
  for (int r = 0; r < replicas; r++) {
    plan->programs[r].device = r;
    plan->programs[r].replica = r;
    build_program(&plan->programs[r], exp, plan->per_replica_batch, replicas);
  }
  return plan;
}

void ps_plan_free(PsPlan *plan)
{
  if (!plan)
    return;
  for (int i = 0; i < plan->n_programs; i++)
    g_free(plan->programs[i].ops);
  g_free(plan->programs);
  g_free(plan);
}

const char *ps_op_kind_name(PsOpKind kind)
{
  static const char *const names[PS_OP_N_KINDS] = {"INFEED", "FWD",     "BWD",      "ALL_REDUCE",
                                                    "UPDATE", "OUTFEED", "HOST_CALL"};
  g_return_val_if_fail(kind < PS_OP_N_KINDS, "?");
  return names[kind];
}

void ps_program_describe(const PsProgram *p, GString *out)
{
  g_string_append_printf(out, "device %d (replica %d): %d ops per step\n", p->device, p->replica,
                         p->n_ops);
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    g_string_append_printf(out, "  %3d  %-10s batch %-6" G_GINT64_FORMAT " %s", i,
                           ps_op_kind_name(op->kind), op->batch, op->name);
    if (op->bytes > 0)
      g_string_append_printf(out, "  (%.0f bytes)", op->bytes);
    g_string_append_c(out, '\n');
  }
}

/* shard-pipe.c: the shard strategy's pipeline stage axis, each stage a
 * mesh (GSPMD's pipelining of sharded stages; Narayanan et al., "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
 * SC 2021, compose tensor and pipeline parallelism the same way).
 *
 * strategy.mesh.stage = P cuts the model into P contiguous stages as the
 * pipeline strategy cuts it (partition.h, "optimal": balanced by the cost
 * of each unit's forward and backward); stage s is a mesh of data x fsdp x
 * tensor x sequence devices that runs the shard lowering (shard-lower.c)
 * of its layers alone, for strategy.micro_batches micro-batches in the
 * pipeline strategy's schedules (ps_pipeline_walk: gpipe or 1f1b).  Between
 * stages each device sends its share of a micro-batch's boundary
 * activations to the device with the same mesh coordinates in the next
 * stage, and the gradients back, with the pipeline strategy's SEND/RECV
 * tags; a RECV's wait is the pipeline's bubble.  A stage's collectives span
 * only its own devices; its fsdp reduce-scatters and data all-reduces
 * follow the last micro-batch's backward (gradients accumulate until then).
 * The stage axis is outermost on the torus (shard-mesh.c), and takes the
 * slices of a multislice topology when it is a multiple of them.
 *
 * Invariant: with one stage and one micro-batch the plan is the shard
 * strategy's without the axis, op for op; with more, every SEND of a
 * device has its RECV at its peer with the same tag. */
#include "strategy/shard-private.h"


#include <stdio.h>

/* Runs of layers a stage boundary may not fall inside (partition.h). */
static int units(const PsModel *m)
{
  int n = m->n_layers > 0 ? 1 : 0;
  for (int l = 1; l < m->n_layers; l++)
    n += ps_partition_cut_allowed(m, l);
  return n;
}

static gboolean check_numerics(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  int P = c->size[PS_AXIS_STAGE];
  if (!e->numerics.enabled || (P == 1 && c->micro_batches == 1))
    return TRUE;
  ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file,
                   P > 1 ? "strategy.mesh.stage" : "strategy.micro_batches",
                   "%d is timing only: numerics.enabled=true is not yet supported with "
                   "pipeline stages or micro-batches under the shard strategy; set "
                   "numerics.enabled=false, or strategy.mesh.stage = 1 and "
                   "strategy.micro_batches = 1",
                   P > 1 ? P : c->micro_batches);
  return FALSE;
}

gboolean ps_shard_pipe_check(const PsExperiment *e, const PsShardConfig *c, GError **error)
{
  const PsModel *m = e->model;
  int P = c->size[PS_AXIS_STAGE], U = units(m);
  if (P > U) {
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.mesh.stage",
                     "%d stages, but model '%s' can be cut into at most %d (a stage "
                     "boundary cannot fall inside a residual block); use at most %d",
                     P, m->name, U, U);
    return FALSE;
  }
  int64_t rows = (int64_t)c->size[PS_AXIS_DATA] * c->size[PS_AXIS_FSDP];
  int64_t per_row = e->global_batch / rows, M = c->micro_batches;
  if (per_row % M != 0) {
    GString *fit = g_string_new(NULL);
    for (int64_t k = 1; k <= per_row && fit->len < 60; k++)
      if (per_row % k == 0)
        g_string_append_printf(fit, "%s%" G_GINT64_FORMAT, fit->len ? ", " : "", k);
    ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, e->file, "strategy.micro_batches",
                     "%" G_GINT64_FORMAT " does not divide the batch of each data x fsdp row, "
                     "%" G_GINT64_FORMAT " (global_batch %" G_GINT64_FORMAT " / data %d x "
                     "fsdp %d); use one of %s",
                     M, per_row, e->global_batch, c->size[PS_AXIS_DATA],
                     c->size[PS_AXIS_FSDP], fit->str);
    g_string_free(fit, TRUE);
    return FALSE;
  }
  return check_numerics(e, c, error);
}

static PsPartition *partition(const PsExperiment *exp, const PsShardConfig *c, GError **error)
{
  int64_t rows = (int64_t)c->size[PS_AXIS_DATA] * c->size[PS_AXIS_FSDP];
  return ps_partition_compute(exp, c->size[PS_AXIS_STAGE],
                              exp->global_batch / rows / c->micro_batches,
                              PS_PARTITION_OPTIMAL, NULL, error);
}

int *ps_shard_pipe_bounds(const PsExperiment *exp, const PsShardConfig *c, GError **error)
{
  int P = c->size[PS_AXIS_STAGE];
  if (P == 1) {
    int *first = g_new(int, 2);
    first[0] = 0;
    first[1] = exp->model->n_layers;
    return first;
  }
  PsPartition *part = partition(exp, c, error);
  if (!part)
    return NULL;
  int *first = g_memdup2(part->first, sizeof(int) * (size_t)(P + 1));
  ps_partition_free(part);
  return first;
}

int *ps_shard_pipe_peers(const PsShardConfig *c, const int *coord, int n)
{
  int P = c->size[PS_AXIS_STAGE], inner = n / P;
  int F = c->size[PS_AXIS_FSDP], S = c->size[PS_AXIS_SEQUENCE], T = c->size[PS_AXIS_TENSOR],
      C = c->size[PS_AXIS_CONTEXT];
  int *at = g_new(int, n), *key = g_new(int, n), *peer = g_new(int, 2 * (size_t)n);
  for (int d = 0; d < n; d++) {
    const int *x = coord + (size_t)d * PS_N_AXES;
    key[d] = (((x[PS_AXIS_DATA] * F + x[PS_AXIS_FSDP]) * C + x[PS_AXIS_CONTEXT]) * S +
              x[PS_AXIS_SEQUENCE]) * T + x[PS_AXIS_TENSOR];
    at[x[PS_AXIS_STAGE] * inner + key[d]] = d;
  }
  for (int d = 0; d < n; d++) {
    int s = coord[(size_t)d * PS_N_AXES + PS_AXIS_STAGE];
    peer[2 * d] = s > 0 ? at[(s - 1) * inner + key[d]] : -1;
    peer[2 * d + 1] = s + 1 < P ? at[(s + 1) * inner + key[d]] : -1;
  }
  g_free(at);
  g_free(key);
  return peer;
}

PsOp ps_shard_pipe_xfer(PsOpKind kind, int mb, gboolean backward, int peer, int64_t batch,
                        int layer, double bytes)
{
  g_return_val_if_fail(kind == PS_OP_SEND || kind == PS_OP_RECV, (PsOp){0});
  PsOp op = {.kind = kind, .batch = batch, .mb = mb, .peer = peer,
             .tag = 2 * mb + (backward ? 1 : 0), .first = layer, .last = layer,
             .example_off = mb * batch, .bytes = kind == PS_OP_SEND ? bytes : 0};
  snprintf(op.name, sizeof op.name, "stage %s %s mb%d", kind == PS_OP_SEND ? "send" : "recv",
           backward ? "gradients" : "activations", mb);
  return op;
}

gboolean ps_shard_pipe_describe(const PsExperiment *exp, const PsShardConfig *c, GString *out,
                                GError **error)
{
  if (c->size[PS_AXIS_STAGE] == 1)
    return TRUE;
  PsPartition *part = partition(exp, c, error);
  if (!part)
    return FALSE;
  g_string_append_printf(out, "each stage a mesh of %d devices, %d micro-batches, %s "
                              "schedule; unsharded figures per micro-batch:\n",
                         ps_shard_devices(c) / c->size[PS_AXIS_STAGE], c->micro_batches,
                         c->schedule == PS_SCHEDULE_GPIPE ? "gpipe" : "1f1b");
  ps_partition_describe(part, exp, out);
  ps_partition_free(part);
  return TRUE;
}

/* numerics-ring.c: real arithmetic of collective matmul (Wang et al.,
 * ASPLOS 2023): an op whose output (or, backward, input gradient) a
 * reduce-scatter over the tensor x sequence group completes runs as M
 * partial ops with M - 1 ring steps of collective-permute between them
 * (strategy/shard-lower.c).  The decomposed op is computed whole at its
 * first ring step (numerics.c), each device's net holding its partial
 * result; the steps then carry it as a ring reduce-scatter: step s sends
 * the block of ring position (rank - s), as the device has summed it so
 * far, to the next member, and adds the block the previous member sends
 * into its block of position (rank - s - 1).  After step M - 1 a device's
 * own block (rank) holds the group's sum, in another order than a
 * reduce-scatter collective's.  The blocks are those the group's
 * all-gathers and reduce-scatters of a buffer of that size give each
 * member (ps_pod_coll_block), so the all-gather that follows (or the
 * sequence rows) takes each device's summed block.
 *
 * Invariant: every ring step's buffer has a partition, the same in every
 * collective of the group over a buffer of its size; init refuses a plan
 * where that does not hold. */
#include "run-private.h"

#include "hw/cost.h"
#include "model/kernels.h"

#include <string.h>

typedef struct {
  int M;
  GArray **member; /* per ring position: PsParamRange, sorted */
} Partition;

struct PsRingNum {
  GHashTable *parts;    /* int64 (count, rank-0 device) -> Partition */
  GHashTable *messages; /* int64 (src, dst, tag) -> GQueue of payloads */
  int *rank0;           /* per device: its group's rank-0 device */
};

static void partition_free(gpointer p)
{
  Partition *pt = p;
  for (int m = 0; m < pt->M; m++)
    g_array_free(pt->member[m], TRUE);
  g_free(pt->member);
  g_free(pt);
}

static void queue_free(gpointer q)
{
  g_queue_free_full(q, g_free);
}

static gint64 part_key(const Run *r, int64_t count, int rank0)
{
  return count * r->n_dev + rank0;
}

static gint64 message_key(int src, int dst, int tag)
{
  return ((gint64)src << 40) | ((gint64)dst << 20) | tag;
}

static gboolean refuse(Run *r, const char *what, const char *why, GError **error)
{
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
              "%s: numerics.enabled=true with strategy.collective_matmul = true: %s %s; "
              "numerics.enabled=false runs it (timing only)",
              r->exp->file, what, why);
  return FALSE;
}

/* Collective c's blocks as a partition, or checked against the one
 * recorded for its size and group. */
static gboolean record(Run *r, int c, GError **error)
{
  const PsPlanColl *pc = &r->plan->colls[c];
  gint64 key = part_key(r, pc->count, pc->members[0]);
  Partition *old = g_hash_table_lookup(r->ring->parts, &key);
  Partition *pt = g_new0(Partition, 1);
  pt->M = pc->n_members;
  pt->member = g_new0(GArray *, pt->M);
  gboolean same = !old || old->M == pt->M;
  for (int m = 0; m < pt->M; m++) {
    pt->member[m] = ps_run_coll_blocks(r, c, pc->members[m]);
    same = same && (!old || (old->member[m]->len == pt->member[m]->len &&
                             memcmp(old->member[m]->data, pt->member[m]->data,
                                    sizeof(PsParamRange) * pt->member[m]->len) == 0));
  }
  if (old) {
    partition_free(pt);
    return same || refuse(r, pc->name, "gives the group's members other blocks than an "
                                       "earlier collective of its size", error);
  }
  g_hash_table_insert(r->ring->parts, g_memdup2(&key, sizeof key), pt);
  return TRUE;
}

static int64_t ring_elems(const Run *r, const PsOp *op)
{
  const PsModel *m = r->exp->model;
  int l = op->ring_bwd ? m->layers[op->first].input_from : op->last;
  return ps_shape_elems(m->layers[l].out_shape, m->layers[l].out_rank) * op->batch;
}

/* Every ring step of every program has a partition of its buffer. */
static gboolean check_steps(Run *r, GError **error)
{
  for (int d = 0; d < r->n_dev; d++) {
    const PsProgram *pr = ps_plan_program(r->plan, d);
    for (int i = 0; i < pr->n_ops; i++) {
      const PsOp *op = &pr->ops[i];
      if (op->parts == 0 || (op->kind != PS_OP_SEND && op->kind != PS_OP_RECV))
        continue;
      gint64 key = part_key(r, ring_elems(r, op), r->ring->rank0[d]);
      const Partition *pt = g_hash_table_lookup(r->ring->parts, &key);
      if (!pt || pt->M != op->parts)
        return refuse(r, op->name, "has no all-gather or reduce-scatter of its group over "
                                   "a buffer of its size to take the blocks from", error);
    }
  }
  return TRUE;
}

gboolean ps_run_ring_init(Run *r, GError **error)
{
  const PsPlan *plan = r->plan;
  gboolean rings = FALSE;
  for (int p = 0; p < plan->n_programs && !rings; p++)
    for (int i = 0; i < plan->programs[p].n_ops && !rings; i++)
      rings = plan->programs[p].ops[i].parts > 0;
  if (!rings)
    return TRUE;
  PsRingNum *rn = r->ring = g_new0(PsRingNum, 1);
  rn->parts = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, partition_free);
  rn->messages = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, queue_free);
  rn->rank0 = g_new(int, r->n_dev);
  for (int d = 0; d < r->n_dev; d++)
    rn->rank0[d] = ps_run_peer0(r, ps_run_peer0(r, d, PS_AXIS_TENSOR), PS_AXIS_SEQUENCE);
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    gboolean model = pc->axis == PS_AXIS_TENSOR || pc->axis == PS_AXIS_SEQUENCE;
    gboolean blocks = pc->op == PS_COLL_ALL_GATHER || pc->op == PS_COLL_REDUCE_SCATTER;
    gboolean acts = pc->buffer == PS_BUFFER_ACTIVATIONS || pc->buffer == PS_BUFFER_ACT_GRADS;
    if (model && blocks && acts && !record(r, c, error))
      return FALSE;
  }
  return check_steps(r, error);
}

void ps_run_ring_free(Run *r)
{
  PsRingNum *rn = r->ring;
  if (!rn)
    return;
  g_hash_table_destroy(rn->parts);
  g_hash_table_destroy(rn->messages);
  g_free(rn->rank0);
  g_free(rn);
  r->ring = NULL;
}

/* The ring step's buffer and the ranges of the block of position
 * (rank - back) of it. */
static float *ring_block(Run *r, int device, const PsOp *op, int back, const GArray **ranges)
{
  PsNet *net = r->nets[device];
  ps_net_select_slot(net, op->mb);
  size_t n = 0;
  float *buf = op->ring_bwd
                   ? ps_net_activation_grad(net, r->exp->model->layers[op->first].input_from, &n)
                   : ps_net_activation(net, op->last, &n);
  gint64 key = part_key(r, (int64_t)n, r->ring->rank0[device]);
  const Partition *pt = g_hash_table_lookup(r->ring->parts, &key);
  g_assert(buf != NULL && pt != NULL);
  int b = ((ps_run_model_rank(r->plan, device) - back) % pt->M + pt->M) % pt->M;
  *ranges = pt->member[b];
  return buf;
}

void ps_run_ring_send(Run *r, int device, const PsOp *op)
{
  const GArray *rgs = NULL;
  const float *buf = ring_block(r, device, op, op->part, &rgs);
  int64_t n = 0;
  for (guint k = 0; k < rgs->len; k++)
    n += g_array_index(rgs, PsParamRange, k).len;
  float *payload = g_new(float, (size_t)MAX(n, 1)), *p = payload;
  for (guint k = 0; k < rgs->len; k++) {
    const PsParamRange *rg = &g_array_index(rgs, PsParamRange, k);
    memcpy(p, buf + rg->off, (size_t)rg->len * sizeof *p);
    p += rg->len;
  }
  if (ps_cost_act_bytes(r->exp->numerics.precision) == 2) /* a bf16 wire, as timed */
    ps_bf16_round_array(payload, payload, (size_t)n);
  gint64 key = message_key(device, op->peer, op->tag);
  GQueue *q = g_hash_table_lookup(r->ring->messages, &key);
  if (!q) {
    q = g_queue_new();
    g_hash_table_insert(r->ring->messages, g_memdup2(&key, sizeof key), q);
  }
  g_queue_push_tail(q, payload);
}

void ps_run_ring_recv(Run *r, int device, const PsOp *op)
{
  const GArray *rgs = NULL;
  float *buf = ring_block(r, device, op, op->part + 1, &rgs);
  gint64 key = message_key(op->peer, device, op->tag);
  GQueue *q = g_hash_table_lookup(r->ring->messages, &key);
  g_assert(q != NULL && !g_queue_is_empty(q));
  g_autofree float *payload = g_queue_pop_head(q);
  const float *p = payload;
  for (guint k = 0; k < rgs->len; k++) {
    const PsParamRange *rg = &g_array_index(rgs, PsParamRange, k);
    for (int64_t j = 0; j < rg->len; j++)
      buf[rg->off + j] += p[j];
    p += rg->len;
  }
}

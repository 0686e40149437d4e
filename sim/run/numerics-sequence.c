/* numerics-sequence.c: real arithmetic on a mesh with a sequence axis
 * (Megatron-LM's sequence parallelism, Korthikanti et al. 2022), on top of
 * numerics-tensor.c, which splits the layers over the whole tensor x
 * sequence group.  Between a reduce-scatter of a partial sum onto rows and
 * the all-gather of those rows before the next split layer, each device
 * holds only its rows of the activation: its blocks of the plan's sequence
 * reduce-scatters and all-gathers (ps_pod_coll_block).  Its net computes
 * the norms and element-wise layers on every row, but only its own rows
 * are right; the all-gather overwrites the rest before any split layer
 * reads them.
 *
 * Backward, before a row layer (PS_SPLIT_SEQUENCE) runs, the rows of its
 * output gradient the device does not hold are zeroed: its input gradient
 * is then zero there too (a norm's, an add's, an activation's gradient of
 * a zero row is zero), so a later reduce-scatter of a gradient that a row
 * layer and a split layer both add to sums each row once, and the layer's
 * weight gradients (a norm's gains and biases) are the sums over the
 * device's rows alone, which the plan's sequence all-reduce of them
 * completes across the group.
 *
 * Invariant: every sequence reduce-scatter and all-gather of activations
 * or their gradients gives a device the same blocks, and they are whole
 * rows; init refuses a plan whose collectives do not (a row cut between
 * two devices has no device that can normalize it). */
#include "run-private.h"

#include "model/net-tensor.h"

#include <string.h>

struct PsSequenceNum {
  int64_t count;  /* elements of a row layer's output on a device */
  GArray **own;   /* per device: PsParamRange of the rows it holds, sorted */
};

static gint range_cmp(gconstpointer a, gconstpointer b)
{
  const PsParamRange *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int ps_run_model_rank(const PsPlan *plan, int d)
{
  return ps_plan_coord(plan, d, PS_AXIS_SEQUENCE) * ps_plan_axis_size(plan, PS_AXIS_TENSOR) +
         ps_plan_coord(plan, d, PS_AXIS_TENSOR);
}

GArray *ps_run_coll_blocks(Run *r, int c, int d)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(PsParamRange));
  int pieces = 1;
  for (int k = 0; k < pieces; k++) {
    PsParamRange rg = {0, 0};
    pieces = ps_pod_coll_block(r->pod, c, d, k, &rg.off, &rg.len);
    if (rg.len > 0)
      g_array_append_val(out, rg);
  }
  g_array_sort(out, range_cmp);
  return out;
}

static gboolean same_blocks(const GArray *a, const GArray *b)
{
  return a->len == b->len &&
         memcmp(a->data, b->data, sizeof(PsParamRange) * a->len) == 0;
}

static int64_t row_width(const PsModel *m, int layer)
{
  const PsLayer *l = layer >= 0 ? &m->layers[layer] : NULL;
  return l ? l->out_shape[l->out_rank - 1] : m->in_shape[m->in_rank - 1];
}

static gboolean refuse(Run *r, const PsPlanColl *pc, const char *why, GError **error)
{
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
              "%s: numerics.enabled=true with sequence parallelism: the collective "
              "'%s' (collective.algorithm \"%s\") %s; the devices' norms need whole rows, "
              "the same on every such collective (collective.algorithm \"ring\" gives "
              "them), or numerics.enabled=false runs it (timing only)",
              r->exp->file, pc->name, pc->algo, why);
  return FALSE;
}

/* One sequence collective's blocks against the rows and the others'. */
static gboolean check_coll(Run *r, int c, GError **error)
{
  PsSequenceNum *sn = r->sequence;
  const PsPlanColl *pc = &r->plan->colls[c];
  if (sn->count == 0)
    sn->count = pc->count;
  if (pc->count != sn->count)
    return refuse(r, pc, "has another size than the first (the rows of layers of two "
                         "widths)", error);
  int64_t width = row_width(r->exp->model, pc->layer);
  for (int m = 0; m < pc->n_members; m++) {
    int d = pc->members[m];
    GArray *b = ps_run_coll_blocks(r, c, d);
    for (guint k = 0; k < b->len; k++) {
      const PsParamRange *rg = &g_array_index(b, PsParamRange, k);
      if (rg->off % width != 0 || rg->len % width != 0) {
        g_array_free(b, TRUE);
        return refuse(r, pc, "gives a device a block that cuts a row", error);
      }
    }
    if (!sn->own[d]) {
      sn->own[d] = b;
    } else {
      gboolean same = same_blocks(sn->own[d], b);
      g_array_free(b, TRUE);
      if (!same)
        return refuse(r, pc, "gives a device other rows than an earlier one", error);
    }
  }
  return TRUE;
}

gboolean ps_run_sequence_init(Run *r, GError **error)
{
  const PsPlan *plan = r->plan;
  gboolean on_rows = FALSE; /* a layer runs on rows: sequence parallelism */
  for (int l = 0; plan->layer_split && l < r->exp->model->n_layers; l++)
    on_rows = on_rows || plan->layer_split[l] == PS_SPLIT_SEQUENCE;
  if (!on_rows)
    return TRUE;
  PsSequenceNum *sn = r->sequence = g_new0(PsSequenceNum, 1);
  sn->own = g_new0(GArray *, r->n_dev);
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    gboolean rows = pc->op == PS_COLL_REDUCE_SCATTER || pc->op == PS_COLL_ALL_GATHER;
    gboolean acts = pc->buffer == PS_BUFFER_ACTIVATIONS || pc->buffer == PS_BUFFER_ACT_GRADS;
    if (pc->axis == PS_AXIS_SEQUENCE && rows && acts && !check_coll(r, c, error))
      return FALSE;
  }
  const PsModel *m = r->exp->model;
  int64_t batch = r->exp->global_batch / ((int64_t)ps_plan_axis_size(plan, PS_AXIS_DATA) *
                                          ps_plan_axis_size(plan, PS_AXIS_FSDP));
  for (int l = 0; l < m->n_layers; l++) {
    if (plan->layer_split[l] != PS_SPLIT_SEQUENCE)
      continue;
    int64_t n = ps_shape_elems(m->layers[l].out_shape, m->layers[l].out_rank) * batch;
    gboolean held = TRUE;
    for (int d = 0; d < r->n_dev; d++)
      held = held && sn->own[d] != NULL;
    if (n != sn->count || !held) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: numerics.enabled=true with sequence parallelism: layer '%s' "
                  "runs on rows of %" G_GINT64_FORMAT " elements, but no sequence "
                  "collective splits rows of that size; numerics.enabled=false runs it "
                  "(timing only)",
                  r->exp->file, m->layers[l].name, n);
      return FALSE;
    }
  }
  return TRUE;
}

void ps_run_sequence_free(Run *r)
{
  PsSequenceNum *sn = r->sequence;
  if (!sn)
    return;
  for (int d = 0; d < r->n_dev; d++)
    if (sn->own[d])
      g_array_free(sn->own[d], TRUE);
  g_free(sn->own);
  g_free(sn);
  r->sequence = NULL;
}

void ps_run_sequence_bwd_layer(Run *r, int device, int layer)
{
  PsSequenceNum *sn = r->sequence;
  if (!sn || r->plan->layer_split[layer] != PS_SPLIT_SEQUENCE)
    return;
  size_t n = 0;
  float *dy = ps_net_activation_grad(r->nets[device], layer, &n);
  g_assert(dy != NULL && (int64_t)n == sn->count);
  const GArray *own = sn->own[device];
  int64_t at = 0;
  for (guint k = 0; k < own->len; k++) {
    const PsParamRange *rg = &g_array_index(own, PsParamRange, k);
    memset(dy + at, 0, (size_t)(rg->off - at) * sizeof *dy);
    at = rg->off + rg->len;
  }
  memset(dy + at, 0, (size_t)((int64_t)n - at) * sizeof *dy);
}

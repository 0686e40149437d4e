/* numerics-tensor.c: real arithmetic on a tensor (x sequence x fsdp x data)
 * mesh (Megatron-LM's layouts, Shoeybi et al. 2019).  The layers split
 * over the whole tensor x sequence group, T below being its size and a
 * device's rank ps_run_model_rank (numerics-sequence.c adds the rows).
 * Each device's net keeps full-size weight blocks, but a device owns only
 * its rank's part of each split layer
 * (model/net-tensor.h: attention's heads, column- and row-parallel
 * matmuls, the vocabulary of the embedding and of the head's logits); the
 * rest is held at exactly zero, so its kernels compute exactly its shard's
 * partial sums, which the plan's tensor all-reduces of activations and of
 * their gradients complete.  Norms and any layer the lowering keeps whole
 * are replicated: every rank owns them all.
 *
 * Three places need more than the net's own kernels:
 *  - the vocab-parallel loss: the loss layer's forward is replaced by the
 *    three phases of net-tensor.h around the plan's "loss max" and "loss
 *    sum" all-reduces (whose buffers are per-row scratch here);
 *  - the data axis's gradient buckets reduce the device's owned gradients
 *    packed in layer order (the lowering counts each layer's local
 *    parameters, weights / T): packed into a buffer when the device joins
 *    the all-reduce, copied back when it is done;
 *  - with an fsdp axis too, the fsdp collectives and update (numerics-
 *    fsdp.c) work on the packed weights and gradients: an fsdp all-gather
 *    of weights is unpacked into the net when done, an fsdp
 *    reduce-scatter packs the net's gradients when the device joins it;
 *  - the update steps only the owned ranges, and backward zeroes the
 *    gradients of the rest (an embedding's scatter-add or a bias's sum
 *    would otherwise write them);
 *  - the all-gather of a column-split activation (a column-parallel
 *    matmul's output, or an element-wise layer's of it, read whole by a
 *    layer the lowering keeps whole): each device's blocks of the
 *    collective carry its own columns row by row, so the gathered buffer
 *    holds every rank's columns, put back in place when it is done (a
 *    device's activation holds its own columns and zeros, so the
 *    collective's contiguous blocks of it would not).
 *
 * Invariant: between ops, every element a device does not own is zero in
 * its weights and (after its layer's backward) its gradients; the owned
 * elements of all ranks tile every layer's block. */
#include "run-private.h"

#include "model/net-tensor.h"

#include <math.h>
#include <string.h>

typedef enum {
  ROLE_NONE, ROLE_SHIFT, ROLE_SUMS, ROLE_BUCKET, ROLE_GATHER, ROLE_SCATTER, ROLE_COLS
} Role;

typedef struct {
  GArray *ranges;    /* PsNetRange it owns, sorted */
  int *first;        /* per layer (n_layers + 1 entries): its first range */
  int64_t *pack_off; /* per layer (n_layers + 1): its place in pack */
  float *pack;       /* owned gradients, packed (the data buckets, fsdp) */
  float *packp;      /* with fsdp: owned weights, packed (NULL without) */
  float *shift, *sums; /* the loss's per-row all-reduced scratch */
  int lo, hi;        /* the loss's owned logit columns */
  float *cols;       /* a column gather's buffer (ncols floats) */
  int64_t ncols;
} TensorDev;

struct PsTensorNum {
  int T, n_layers;
  gboolean fsdp;     /* tensor x fsdp: the fsdp module works on the packs */
  gboolean vocab_loss;
  guint8 *role;      /* per collective */
  TensorDev *dev;    /* per device */
};

static void zero_unowned(const TensorDev *td, const PsNet *net, float *buf, int layer)
{
  size_t off = 0, len = 0;
  ps_net_layer_params(net, layer, &off, &len);
  size_t at = off;
  for (int k = td->first[layer]; k < td->first[layer + 1]; k++) {
    const PsNetRange *rg = &g_array_index(td->ranges, PsNetRange, k);
    memset(buf + at, 0, (rg->off - at) * sizeof *buf);
    at = rg->off + rg->len;
  }
  memset(buf + at, 0, (off + len - at) * sizeof *buf);
}

/* Copies the owned elements of the layers a collective covers (from
 * pc->layer, pc->count of them) between a net buffer and its pack. */
static void move_bucket(const TensorDev *td, float *net, float *pack, const PsPlanColl *pc,
                        gboolean to_pack)
{
  int64_t end = td->pack_off[pc->layer] + pc->count;
  float *p = pack + td->pack_off[pc->layer];
  for (int k = td->first[pc->layer]; k < (int)td->ranges->len; k++) {
    const PsNetRange *rg = &g_array_index(td->ranges, PsNetRange, k);
    if (p - pack >= end)
      break;
    if (to_pack)
      memcpy(p, net + rg->off, rg->len * sizeof *p);
    else
      memcpy(net + rg->off, p, rg->len * sizeof *p);
    p += rg->len;
  }
}

static gboolean dev_init(Run *r, int d, GError **error)
{
  PsTensorNum *tn = r->tensor;
  TensorDev *td = &tn->dev[d];
  PsNet *net = r->nets[d];
  int t = ps_run_model_rank(r->plan, d), n = tn->n_layers;
  td->ranges = g_array_new(FALSE, FALSE, sizeof(PsNetRange));
  td->first = g_new0(int, n + 1);
  td->pack_off = g_new0(int64_t, n + 1);
  for (int l = 0; l < n; l++) {
    GError *e = NULL;
    td->first[l] = (int)td->ranges->len;
    if (!ps_net_tensor_ranges(net, l, (PsTensorSplit)r->plan->layer_split[l], t, tn->T,
                              td->ranges, &e)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: numerics.enabled=true on a tensor x sequence group of %d "
                  "(strategy.mesh.tensor x sequence): layer '%s': %s",
                  r->exp->file, tn->T, r->exp->model->layers[l].name, e->message);
      g_error_free(e);
      return FALSE;
    }
    td->pack_off[l + 1] = td->pack_off[l];
    for (guint k = (guint)td->first[l]; k < td->ranges->len; k++)
      td->pack_off[l + 1] += (int64_t)g_array_index(td->ranges, PsNetRange, k).len;
  }
  td->first[n] = (int)td->ranges->len;
  for (int l = 0; l < n; l++) /* the shard: its owned part of the common start */
    zero_unowned(td, net, ps_net_params(net), l);
  td->pack = g_new0(float, (size_t)MAX(td->pack_off[n], 1));
  const PsModel *m = r->exp->model;
  const PsLayer *loss = &m->layers[n - 1];
  int V = (int)loss->out_shape[loss->out_rank - 1];
  td->lo = t * V / tn->T;
  td->hi = (t + 1) * V / tn->T;
  size_t rows = (size_t)r->exp->global_batch * (size_t)MAX(m->labels_per_example, 1);
  td->shift = g_new0(float, rows);
  td->sums = g_new0(float, rows);
  return TRUE;
}

/* A data bucket of `count` floats from layer first must end on a layer
 * boundary of the device's packed gradients. */
static gboolean bucket_fits(const TensorDev *td, int n, int first, int64_t count)
{
  for (int l = first + 1; l <= n; l++)
    if (td->pack_off[l] - td->pack_off[first] == count)
      return TRUE;
  return FALSE;
}

/* Whether layer p's output is split by columns: a column-parallel
 * matmul's, or an element-wise layer's of one (the layout it keeps). */
static gboolean cols_split(const PsPlan *plan, const PsModel *m, int p)
{
  while (p >= 0 && plan->layer_split[p] == PS_SPLIT_NONE) {
    const PsLayerLowerInfo *lw = ps_layer_kind_lower(m->layers[p].kind);
    if (lw->tensor != PS_TP_ELEMENTWISE || lw->lowering != PS_LOWER_UNARY)
      return FALSE;
    p = m->layers[p].input_from;
  }
  return p >= 0 && plan->layer_split[p] == PS_SPLIT_COLS;
}

/* Copies between an activation of `width` columns and a column gather's
 * buffer: device d's blocks of collective c, in order, hold d's columns
 * (rank t's width / T of them) of every row in turn. */
static void move_cols(Run *r, int c, int d, float *act, float *buf, gboolean to_buf)
{
  const PsPlanColl *pc = &r->plan->colls[c];
  const PsLayer *l = &r->exp->model->layers[pc->layer];
  int64_t width = l->out_shape[l->out_rank - 1], w = width / r->tensor->T;
  int64_t col0 = ps_run_model_rank(r->plan, d) * w, e = 0;
  g_autoptr(GArray) blocks = ps_run_coll_blocks(r, c, d);
  for (guint k = 0; k < blocks->len; k++) {
    const PsParamRange *rg = &g_array_index(blocks, PsParamRange, k);
    for (int64_t i = rg->off; i < rg->off + rg->len; i++, e++) {
      float *a = act + (e / w) * width + col0 + e % w;
      if (to_buf)
        buf[i] = *a;
      else
        *a = buf[i];
    }
  }
}

static gboolean set_roles(Run *r, GError **error)
{
  PsTensorNum *tn = r->tensor;
  const PsPlan *plan = r->plan;
  tn->role = g_new0(guint8, MAX(plan->n_colls, 1));
  for (int d = 0; d < r->n_dev; d++) { /* by device: programs may be shared */
    const PsProgram *pr = ps_plan_program(plan, d);
    int loss_seen = 0;
    for (int i = 0; i < pr->n_ops; i++) {
      if (pr->ops[i].kind != PS_OP_COLL_START)
        continue;
      int c = ps_plan_op_coll(plan, d, &pr->ops[i]);
      const PsPlanColl *pc = &plan->colls[c];
      if (tn->vocab_loss && pc->buffer == PS_BUFFER_ACTIVATIONS &&
          pc->layer == tn->n_layers - 1) {
        tn->role[c] = loss_seen++ == 0 ? ROLE_SHIFT : ROLE_SUMS;
      } else if (pc->op == PS_COLL_ALL_GATHER && pc->buffer == PS_BUFFER_ACTIVATIONS &&
                 cols_split(plan, r->exp->model, pc->layer)) {
        tn->role[c] = ROLE_COLS;
      } else if ((pc->buffer == PS_BUFFER_GRADS || pc->buffer == PS_BUFFER_PARAMS) &&
                 pc->layer >= 0 && (pc->axis == PS_AXIS_DATA || pc->axis == PS_AXIS_FSDP)) {
        if (!bucket_fits(&tn->dev[d], tn->n_layers, pc->layer, pc->count)) {
          g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                      "%s: numerics.enabled=true on a tensor x sequence group of %d: the "
                      "collective '%s' of %" G_GINT64_FORMAT " floats does not cover whole "
                      "layers of a device's shard",
                      r->exp->file, tn->T, pc->name, pc->count);
          return FALSE;
        }
        tn->role[c] = pc->axis == PS_AXIS_DATA ? ROLE_BUCKET
                      : pc->buffer == PS_BUFFER_PARAMS ? ROLE_GATHER
                                                       : ROLE_SCATTER;
      }
    }
  }
  return TRUE;
}

gboolean ps_run_tensor_init(Run *r, GError **error)
{
  int T = ps_plan_axis_size(r->plan, PS_AXIS_TENSOR) *
          ps_plan_axis_size(r->plan, PS_AXIS_SEQUENCE); /* the group's ways */
  if (T <= 1 || !r->plan->layer_split)
    return TRUE;
  PsTensorNum *tn = r->tensor = g_new0(PsTensorNum, 1);
  tn->T = T;
  tn->n_layers = r->exp->model->n_layers;
  tn->vocab_loss = r->plan->layer_split[tn->n_layers - 1] == PS_SPLIT_VOCAB;
  tn->fsdp = ps_plan_axis_size(r->plan, PS_AXIS_FSDP) > 1;
  tn->dev = g_new0(TensorDev, r->n_dev);
  for (int d = 0; d < r->n_dev; d++) {
    if (!dev_init(r, d, error))
      return FALSE;
    TensorDev *td = &tn->dev[d];
    if (tn->fsdp) { /* the weights' pack starts as the net's */
      PsPlanColl all = {.layer = 0, .count = td->pack_off[tn->n_layers]};
      td->packp = g_new0(float, (size_t)MAX(all.count, 1));
      move_bucket(td, ps_net_params(r->nets[d]), td->packp, &all, TRUE);
    }
  }
  return set_roles(r, error);
}

void ps_run_tensor_free(Run *r)
{
  PsTensorNum *tn = r->tensor;
  if (!tn)
    return;
  for (int d = 0; d < r->n_dev; d++) {
    TensorDev *td = &tn->dev[d];
    if (td->ranges)
      g_array_free(td->ranges, TRUE);
    g_free(td->first);
    g_free(td->pack_off);
    g_free(td->pack);
    g_free(td->packp);
    g_free(td->shift);
    g_free(td->sums);
    g_free(td->cols);
  }
  g_free(tn->dev);
  g_free(tn->role);
  g_free(tn);
  r->tensor = NULL;
}

gboolean ps_run_tensor_skips(const Run *r, int layer)
{
  return r->tensor && r->tensor->vocab_loss && layer == r->tensor->n_layers - 1;
}

float *ps_run_tensor_coll_buffer(Run *r, int device, int c)
{
  PsTensorNum *tn = r->tensor;
  if (!tn || tn->role[c] == ROLE_NONE)
    return NULL;
  TensorDev *td = &tn->dev[device];
  PsNet *net = r->nets[device];
  const PsPlanColl *pc = &r->plan->colls[c];
  switch (tn->role[c]) {
  case ROLE_SHIFT:
    ps_net_vocab_loss_shift(net, td->lo, td->hi, tn->T, td->shift);
    return td->shift;
  case ROLE_SUMS: /* the shift is the group's by now */
    ps_net_vocab_loss_sums(net, td->lo, td->hi, td->shift, td->sums);
    return td->sums;
  case ROLE_GATHER: /* the owned blocks are the pack's, unpacked when done */
    return td->packp + td->pack_off[pc->layer];
  case ROLE_COLS:
    if (td->ncols < pc->count) {
      g_free(td->cols);
      td->cols = g_new0(float, (size_t)pc->count);
      td->ncols = pc->count;
    }
    move_cols(r, c, device, ps_net_activation(net, pc->layer, NULL), td->cols, TRUE);
    return td->cols;
  default: /* a data bucket or an fsdp reduce-scatter */
    move_bucket(td, ps_net_grads(net), td->pack, pc, TRUE);
    return td->pack + td->pack_off[pc->layer];
  }
}

void ps_run_tensor_coll_done(Run *r, int device, int c)
{
  PsTensorNum *tn = r->tensor;
  if (!tn)
    return;
  TensorDev *td = &tn->dev[device];
  PsNet *net = r->nets[device];
  if (tn->role[c] == ROLE_SUMS) {
    ps_net_vocab_loss_finish(net, td->lo, td->hi, tn->T, td->shift, td->sums);
    r->loss_acc[device] += ps_net_loss(net);
    r->loss_n[device]++;
  } else if (tn->role[c] == ROLE_BUCKET) {
    move_bucket(td, ps_net_grads(net), td->pack, &r->plan->colls[c], FALSE);
  } else if (tn->role[c] == ROLE_GATHER) {
    move_bucket(td, ps_net_params(net), td->packp, &r->plan->colls[c], FALSE);
  } else if (tn->role[c] == ROLE_COLS) {
    const PsPlanColl *pc = &r->plan->colls[c];
    float *act = ps_net_activation(net, pc->layer, NULL);
    for (int m = 0; m < pc->n_members; m++)
      move_cols(r, c, pc->members[m], act, td->cols, FALSE);
  }
}

void ps_run_tensor_bwd_done(Run *r, int device, const PsOp *op)
{
  if (!r->tensor)
    return;
  for (int l = op->first; l <= op->last; l++)
    zero_unowned(&r->tensor->dev[device], r->nets[device], ps_net_grads(r->nets[device]), l);
}

gboolean ps_run_tensor_clip(Run *r, int device)
{
  if (!r->tensor || r->tensor->fsdp)
    return FALSE;
  const TensorDev *td = &r->tensor->dev[device];
  const float *g = ps_net_grads(r->nets[device]);
  double split = 0, whole = 0;
  for (int l = 0; l < r->tensor->n_layers; l++) {
    int how = r->plan->layer_split[l];
    double *acc = how == PS_SPLIT_NONE || how == PS_SPLIT_SEQUENCE ? &whole : &split;
    for (int k = td->first[l]; k < td->first[l + 1]; k++) {
      const PsNetRange *rg = &g_array_index(td->ranges, PsNetRange, k);
      for (size_t i = rg->off; i < rg->off + rg->len; i++)
        *acc += (double)g[i] * (double)g[i];
    }
  }
  /* every rank holds the replicated layers' same gradient: each adds its
   * 1/T share, so that the group's sum counts them once */
  *ps_run_norm(r, device) = (float)(split + whole / r->tensor->T);
  return TRUE;
}

double ps_run_tensor_pack_ss(Run *r, int device, int64_t at, const float *x, int64_t len)
{
  double split = 0, whole = 0;
  if (!r->tensor) {
    for (int64_t i = 0; i < len; i++)
      split += (double)x[i] * (double)x[i];
    return split;
  }
  const TensorDev *td = &r->tensor->dev[device];
  int l = 0;
  for (int64_t i = 0; i < len; i++) {
    while (l < r->tensor->n_layers - 1 && at + i >= td->pack_off[l + 1])
      l++;
    int how = r->plan->layer_split[l];
    double sq = (double)x[i] * (double)x[i];
    if (how == PS_SPLIT_NONE || how == PS_SPLIT_SEQUENCE)
      whole += sq;
    else
      split += sq;
  }
  return split + whole / r->tensor->T;
}

/* A layer-wise update's first pass over device's owned ranges: each
 * adapted layer's sums of squares into sums, its replicated layers' (held
 * whole by every rank of the group) over the group's size, so that the
 * group's all-reduce counts them once, as ps_run_tensor_clip does. */
static void tensor_layer_sums(Run *r, int device, int64_t step, const PsOp *op, float *sums,
                              int64_t n_sums)
{
  const TensorDev *td = &r->tensor->dev[device];
  PsNet *net = r->nets[device];
  g_autofree float *whole = g_new0(float, (size_t)MAX(n_sums, 1));
  for (int l = 0; l < r->tensor->n_layers; l++) {
    int how = r->plan->layer_split[l];
    float *to = how == PS_SPLIT_NONE || how == PS_SPLIT_SEQUENCE ? whole : sums;
    for (int k = td->first[l]; k < td->first[l + 1]; k++) {
      const PsNetRange *rg = &g_array_index(td->ranges, PsNetRange, k);
      ps_run_update_piece(r, device, step, op, ps_net_params(net), ps_net_grads(net), rg->off,
                          rg->len, to);
    }
  }
  for (int64_t i = 0; i < n_sums; i++)
    sums[i] += whole[i] / (float)r->tensor->T;
}

gboolean ps_run_tensor_update(Run *r, int device, int64_t step, const PsOp *op)
{
  if (!r->tensor)
    return FALSE;
  const GArray *rgs = r->tensor->dev[device].ranges;
  PsNet *net = r->nets[device];
  /* clipping (ps_run_tensor_clip): the group's norm, all-reduced; a
   * layer-wise update's first pass scales, its second does not */
  double limit = r->exp->optimizer.clip_norm, norm = sqrt((double)*ps_run_norm(r, device));
  float f = limit > 0 && !r->tensor->fsdp && norm > limit && op->update_pass != 2
                ? (float)(limit / norm)
                : 1.0f;
  for (guint k = 0; f != 1.0f && k < rgs->len; k++) {
    const PsNetRange *rg = &g_array_index(rgs, PsNetRange, k);
    float *g = ps_net_grads(net) + rg->off;
    for (size_t i = 0; i < rg->len; i++)
      g[i] *= f;
  }
  /* a layer-wise update in two passes: the layers' sums of squares from
   * the op's slot of NORM (zeroed first), which the tensor group's
   * all-reduce adds up before the second pass */
  int64_t n_sums;
  float *sums = ps_run_update_sums(r, device, op, &n_sums);
  if (op->update_pass == 1) {
    tensor_layer_sums(r, device, step, op, sums, n_sums);
    return TRUE;
  }
  for (guint k = 0; k < rgs->len; k++) {
    const PsNetRange *rg = &g_array_index(rgs, PsNetRange, k);
    ps_run_update_piece(r, device, step, op, ps_net_params(net), ps_net_grads(net), rg->off,
                        rg->len, sums);
  }
  return TRUE;
}

GArray *ps_run_tensor_ranges(Run *r, int device)
{
  if (!r->tensor)
    return NULL;
  const GArray *rgs = r->tensor->dev[device].ranges;
  GArray *out = g_array_sized_new(FALSE, FALSE, sizeof(PsParamRange), rgs->len);
  for (guint k = 0; k < rgs->len; k++) {
    const PsNetRange *rg = &g_array_index(rgs, PsNetRange, k);
    PsParamRange p = {(int64_t)rg->off, (int64_t)rg->len};
    g_array_append_val(out, p);
  }
  return out;
}

double ps_run_tensor_divergence(Run *r)
{
  double worst = 0;
  if (!r->tensor)
    return 0;
  for (int d = 0; d < r->n_dev; d++) {
    if (ps_run_model_rank(r->plan, d) == 0)
      continue;
    int d0 = ps_run_peer0(r, ps_run_peer0(r, d, PS_AXIS_TENSOR), PS_AXIS_SEQUENCE);
    const float *p = ps_net_params(r->nets[d]);
    const float *p0 = ps_net_params(r->nets[d0]);
    for (int l = 0; l < r->tensor->n_layers; l++) {
      int split = r->plan->layer_split[l];
      if (split != PS_SPLIT_NONE && split != PS_SPLIT_SEQUENCE)
        continue;
      size_t off = 0, len = 0;
      ps_net_layer_params(r->nets[d], l, &off, &len);
      for (size_t j = off; j < off + len; j++)
        worst = fmax(worst, fabs((double)p[j] - p0[j]));
    }
  }
  return worst;
}

float *ps_run_tensor_packed(Run *r, int device, gboolean grads)
{
  if (!r->tensor || !r->tensor->fsdp)
    return NULL;
  return grads ? r->tensor->dev[device].pack : r->tensor->dev[device].packp;
}

int64_t ps_run_tensor_packed_off(Run *r, int c)
{
  if (!r->tensor || !r->tensor->fsdp || r->tensor->role[c] == ROLE_NONE)
    return -1;
  return r->tensor->dev[0].pack_off[r->plan->colls[c].layer]; /* equal on every rank */
}

void ps_run_tensor_sync(Run *r)
{
  if (!r->tensor || !r->tensor->fsdp)
    return;
  for (int d = 0; d < r->n_dev; d++) {
    TensorDev *td = &r->tensor->dev[d];
    PsPlanColl all = {.layer = 0, .count = td->pack_off[r->tensor->n_layers]};
    move_bucket(td, ps_net_params(r->nets[d]), td->packp, &all, FALSE);
  }
}

GArray *ps_run_tensor_net_ranges(Run *r, int device, GArray *packed)
{
  if (!r->tensor || !r->tensor->fsdp)
    return packed;
  const TensorDev *td = &r->tensor->dev[device];
  GArray *out = g_array_new(FALSE, FALSE, sizeof(PsParamRange));
  for (guint j = 0; j < packed->len; j++) {
    const PsParamRange *pr = &g_array_index(packed, PsParamRange, j);
    int64_t at = 0; /* the pack offset of range k */
    for (guint k = 0; k < td->ranges->len; k++) {
      const PsNetRange *rg = &g_array_index(td->ranges, PsNetRange, k);
      int64_t lo = MAX(at, pr->off), hi = MIN(at + (int64_t)rg->len, pr->off + pr->len);
      if (lo < hi) {
        PsParamRange n = {(int64_t)rg->off + (lo - at), hi - lo};
        g_array_append_val(out, n);
      }
      at += (int64_t)rg->len;
    }
  }
  g_array_free(packed, TRUE);
  return out;
}

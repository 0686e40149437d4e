/* shard-lower.c: a training step sharded over the mesh of shard.c, per
 * layer, as GSPMD and Megatron-LM lay it out.
 *
 * Layouts.  Between layers an activation is whole on every device of the
 * tensor x sequence group, split along its last dimension, a partial sum,
 * or (with a sequence axis) split along its rows.  Walking the layers in
 * order, each kind's tensor role (PsTensorRole, model/layers.h) says what
 * layout it needs and what it leaves, never its kind: a matmul on a whole
 * input is column-parallel (split output), on a split one row-parallel
 * (partial output); attention is split by heads (partial output); a
 * token embedding by vocabulary (partial); norms need completed rows;
 * element-wise work keeps its layout; the loss over split logits reduces
 * its max and sum across the group (Shoeybi et al. 2019).  Completing a
 * partial sum is an all-reduce, or with sequence parallelism a
 * reduce-scatter onto rows, and rows become whole by an all-gather
 * (Korthikanti et al. 2022); backward runs the conjugates (an all-reduce
 * of the input gradient where forward entered a split region from a whole
 * input, an all-gather where forward reduce-scattered or gathered split
 * columns onto rows, a reduce-scatter where it gathered rows).  A layer run on rows keeps its weights whole
 * (a norm's gains), so each device's gradient of them covers its rows
 * only: a sequence all-reduce over the group completes it.
 *
 * The local model.  Each device's share of each layer (shard-local.c) is
 * a PsModel of its own (same layers, divided by the layout: a column-parallel matmul's
 * outputs, a row-parallel one's contraction, heads, vocabulary, rows), so
 * ops are costed by hw/cost.h on the shard's shapes, MXU padding
 * included, exactly as any other op.  The plan's layer_split tells real
 * numerics (run/numerics-tensor.c) how each layer's weights are split.
 *
 * fsdp (ZeRO-3): each op's weights are all-gathered over the fsdp axis
 * before its forward (the next op's gather started before this op runs
 * when prefetching) and again before its backward unless kept; its
 * gradients are reduce-scattered after its backward, and each device's
 * shard is all-reduced over the data axis in buckets.
 *
 * Collective matmul (Wang et al., ASPLOS 2023): a forward op whose output
 * an all-reduce or reduce-scatter completes runs as T partial ops with
 * T - 1 ring steps of collective-permute (SEND/RECV) between them, the
 * all-reduce keeping only its all-gather half; in backward likewise the
 * op whose input gradient an all-reduce (or with sequence parallelism a
 * reduce-scatter) completes.  The all-gathers of rows before a matmul are
 * not decomposed.
 *
 * Pipeline stages (shard-pipe.c): a stage lowers its layers [lo, hi) alone
 * for each micro-batch in its schedule's order, between the RECV and SEND
 * of the boundary activations (and of their gradients in backward); only
 * the last backward reduces the gradients.
 *
 * Invariant: every device of a stage runs the same sequence of ops; each collective
 * request becomes one instance per group of devices that differ only
 * along its axis, so every group's members start it in the same order.
 * The programs name requests as plan slots (program.h), so the devices
 * share one program unless collective matmul's ring steps name peers. */
#include "strategy/shard-lower-private.h"

#include "hw/cost.h"
#include "model/net-tensor.h"
#include "strategy/cost-options.h"
#include "strategy/kernels.h"

#include <stdio.h>
#include <string.h>


static const char *const coll_word[PS_COLL_N_OPS] = {"all-reduce", "reduce-scatter",
                                                     "all-gather", "broadcast", "permute"};

/* Elements of layer p's output (p < 0: the input) on a device: its
 * examples, its share of their positions with a context axis. */
static int64_t out_elems(const Lower *w, int p)
{
  const PsModel *m = w->m;
  return (p < 0 ? ps_shape_elems(m->in_shape, m->in_rank)
                : ps_shape_elems(m->layers[p].out_shape, m->layers[p].out_rank)) *
         w->batch / w->C;
}

/* ---- layouts ---------------------------------------------------------- */

static void need(Lower *w, Layout *cur, int i, int slot, int p, Layout target)
{
  Comp *c = &w->lp[i].comp[slot];
  Layout x = p < 0 ? L_WHOLE : cur[p];
  c->producer = p;
  c->fwd = c->bwd = NO_COLL;
  if (x == target || (target == L_ROWS && p >= 0 && w->rows_kept[p]))
    return; /* (a gathered residual still has its rows: Megatron-SP keeps both) */
  if (x == L_ROWS && p >= 0)
    w->rows_kept[p] = TRUE;
  if (x == L_PARTIAL) {
    c->fwd = target == L_ROWS ? PS_COLL_REDUCE_SCATTER : PS_COLL_ALL_REDUCE;
    c->bwd = target == L_ROWS ? PS_COLL_ALL_GATHER : NO_COLL;
  } else if (x == L_SPLIT) {
    c->fwd = PS_COLL_ALL_GATHER;
    /* onto rows: backward holds the gradient of its rows only, and the
     * split layer needs every row of its columns */
    c->bwd = target == L_ROWS ? PS_COLL_ALL_GATHER : NO_COLL;
  } else if (x == L_ROWS) {
    c->fwd = PS_COLL_ALL_GATHER;
    c->bwd = PS_COLL_REDUCE_SCATTER;
  } else {
    c->bwd = PS_COLL_ALL_GATHER; /* whole -> rows: a local slice forward */
  }
  if (p >= 0) {
    cur[p] = target;
    if (c->fwd != NO_COLL && w->lp[p].out_comp == NO_COLL)
      w->lp[p].out_comp = c->fwd;
  }
}

/* Whether layer i's output is a language model's logits: the head, whose
 * width is the vocabulary, of a model of tokens (a classifier's head that
 * the group does not divide stays whole). */
static gboolean feeds_loss(const PsModel *m, int i)
{
  return m->token_input && i + 1 < m->n_layers && m->layers[i + 1].input_from == i &&
         ps_layer_kind_lower(m->layers[i + 1].kind)->tensor == PS_TP_LOSS;
}

/* Whether a vocabulary of v splits over k devices, padded where k does not
 * divide it: so long as the last device holds a real row (a 2-way head over
 * 4 stays whole). */
static gboolean splits_padded(int64_t v, int64_t k)
{
  return (v + k - 1) / k * (k - 1) < v;
}

/* One layer's needs and output layout (see the file's comment). */
static Layout plan_layer(Lower *w, Layout *cur, int i)
{
  const PsLayer *l = &w->m->layers[i];
  LayerPlan *lp = &w->lp[i];
  int p = l->input_from;
  Layout in = p < 0 ? L_WHOLE : cur[p];
  Layout done = w->sp ? L_ROWS : L_WHOLE;
  switch (ps_layer_kind_lower(l->kind)->tensor) {
  case PS_TP_ELEMENTWISE:
    if (ps_layer_kind_lower(l->kind)->lowering == PS_LOWER_JOIN) {
      Layout s = l->shortcut_from < 0 ? L_WHOLE : cur[l->shortcut_from];
      if (s != in || in == L_PARTIAL) {
        need(w, cur, i, 0, p, done);
        need(w, cur, i, 1, l->shortcut_from, done);
      }
    } else if (in == L_PARTIAL) {
      need(w, cur, i, 0, p, done);
    }
    in = p < 0 ? L_WHOLE : cur[p];
    lp->local = in == L_SPLIT ? PS_LOC_DIV : in == L_ROWS ? PS_LOC_ROWS : PS_LOC_NONE;
    return in;
  case PS_TP_NORM:
    need(w, cur, i, 0, p, done);
    lp->local = w->sp ? PS_LOC_ROWS : PS_LOC_NONE;
    return done;
  case PS_TP_MATMUL:
    if (in == L_SPLIT) {
      lp->local = PS_LOC_ROW;
      return L_PARTIAL;
    }
    need(w, cur, i, 0, p, L_WHOLE);
    if (l->units % w->M != 0 && !(feeds_loss(w->m, i) && splits_padded(l->units, w->M)))
      return L_WHOLE;
    lp->padded = l->units % w->M != 0;
    lp->local = PS_LOC_COL;
    lp->enter = lp->comp[0].bwd == NO_COLL;
    return L_SPLIT;
  case PS_TP_HEADS:
    need(w, cur, i, 0, p, L_WHOLE);
    lp->local = PS_LOC_DIV;
    lp->enter = lp->comp[0].bwd == NO_COLL;
    return L_PARTIAL;
  case PS_TP_VOCAB:
    if (p >= 0)
      need(w, cur, i, 0, p, L_WHOLE);
    if (!splits_padded(l->vocab, w->M))
      return L_WHOLE;
    lp->padded = l->vocab % w->M != 0;
    lp->local = PS_LOC_DIV;
    return L_PARTIAL;
  case PS_TP_LOSS:
    if (in == L_SPLIT) {
      lp->local = PS_LOC_DIV;
      lp->vocab_loss = TRUE;
      lp->padded = i > 0 && lp[-1].padded;
      return L_WHOLE;
    }
    need(w, cur, i, 0, p, L_WHOLE);
    return L_WHOLE;
  case PS_TP_REPLICATED:
  default:
    need(w, cur, i, 0, p, L_WHOLE);
    return L_WHOLE;
  }
}

static void plan_layouts(Lower *w)
{
  int n = w->m->n_layers;
  w->lp = g_new0(LayerPlan, n);
  Layout *cur = g_new0(Layout, n);
  w->rows_kept = g_new0(gboolean, n);
  for (int i = 0; i < n; i++) {
    w->lp[i].comp[0].producer = w->lp[i].comp[1].producer = -2;
    w->lp[i].comp[0].fwd = w->lp[i].comp[0].bwd = NO_COLL;
    w->lp[i].comp[1].fwd = w->lp[i].comp[1].bwd = NO_COLL;
    w->lp[i].out_comp = NO_COLL;
  }
  for (int i = 0; i < n && w->M > 1; i++)
    cur[i] = w->lp[i].out = plan_layer(w, cur, i);
  g_free(cur);
  g_free(w->rows_kept);
  w->rows_kept = NULL;
}

/* ---- the local model -------------------------------------------------- */

/* A layer's share of each example's positions on one device of a context
 * group of C (MaxText's context parallelism, balanced: the causal
 * attention's work is dealt out evenly, as its load-balanced reordering
 * does): every row-wise cost and activation divided by C, its queries
 * too, so attention's products run C-th of the queries against every key
 * (the gathered keys and values: context_kv).  The device still reads
 * the whole gathered weights, so their traffic is put back. */
static void context_local(PsLayer *L, int C)
{
  if (C == 1)
    return;
  ps_shard_local_layer(L, PS_LOC_ROWS, C, FALSE);
  if (ps_layer_kind_lower(L->kind)->gathers)
    return; /* its traffic is per example; the cost model adds the table's */
  double back = (double)L->params * (1.0 - 1.0 / C); /* bytes hold the weights' once */
  L->fwd_bytes += back;
  L->bwd_bytes += 2.0 * back;
}

static void build_local(Lower *w)
{
  w->local = *w->m;
  w->local.layers = g_memdup2(w->m->layers, sizeof(PsLayer) * (size_t)w->m->n_layers);
  w->local.params = 0;
  for (int i = 0; i < w->m->n_layers; i++) {
    ps_shard_local_layer(&w->local.layers[i], w->lp[i].local, w->M, w->lp[i].padded);
    context_local(&w->local.layers[i], w->C);
    w->local.params += w->local.layers[i].params;
  }
}

/* ---- the template ----------------------------------------------------- */

static int add_req(Lower *w, PsCollOp op, PsShardGroup g, PsAxis axis, int64_t count,
                   PsBufferKind buf, int layer, const char *what)
{
  Req r = {.op = op, .group = g, .axis = axis, .count = MAX(count, 1), .buffer = buf,
           .layer = layer};
  if ((buf == PS_BUFFER_GRADS || buf == PS_BUFFER_PARAMS) && layer >= 0)
    r.offset = ps_lower_param_offset(w->m, layer);
  snprintf(r.name, sizeof r.name, "%s %s %s", ps_axis_name(axis), coll_word[op], what);
  g_array_append_val(w->reqs, r);
  return (int)w->reqs->len - 1;
}

static void emit(Lower *w, const PsOp *op)
{
  g_array_append_val(w->ops, *op);
}

static void coll(Lower *w, PsOpKind kind, int req)
{
  PsOp op = {.kind = kind, .coll = req};
  snprintf(op.name, sizeof op.name, "%s %.57s", kind == PS_OP_COLL_START ? "start" : "done",
           g_array_index(w->reqs, Req, req).name);
  emit(w, &op);
}

static void coll_now(Lower *w, int req)
{
  coll(w, PS_OP_COLL_START, req);
  coll(w, PS_OP_COLL_DONE, req);
}

int ps_shard_add_req(Lower *w, PsCollOp op, PsShardGroup g, PsAxis axis, int64_t count,
                     PsBufferKind buf, const char *what)
{
  return add_req(w, op, g, axis, count, buf, -1, what);
}

void ps_shard_emit(Lower *w, const PsOp *op)
{
  emit(w, op);
}

void ps_shard_coll_now(Lower *w, int req)
{
  coll_now(w, req);
}

static PsAxis model_axis(const Lower *w, int op)
{
  return w->sp && op != PS_COLL_ALL_REDUCE ? PS_AXIS_SEQUENCE : PS_AXIS_TENSOR;
}


static int64_t group_params(const Lower *w, int g)
{
  int64_t p = 0;
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    p += w->local.layers[l].params;
  return p;
}

/* Bytes of group g's weights once all-gathered: held from the gather's
 * DONE until the kernels that read them end (ps_lower_gather_bytes). */
static int64_t gathered_bytes(const Lower *w, int g)
{
  return group_params(w, g) * ps_lower_gather_bytes(w->exp);
}

/* Groups of ps_lower_layer_groups, cut again before any layer that needs
 * a collective at its input or after its backward. */
static void cut_groups(Lower *w)
{
  GArray *base = ps_lower_layer_groups(w->exp, w->lo, w->hi);
  w->starts = g_array_new(FALSE, FALSE, sizeof(int));
  int b = 0;
  for (int i = w->lo; i < w->hi; i++) {
    const LayerPlan *lp = &w->lp[i];
    gboolean cut = b < (int)base->len && g_array_index(base, int, b) == i;
    if (cut)
      b++;
    if (i > 0 && lp[-1].vocab_loss)
      cut = TRUE;
    if (cut || lp->enter || lp->comp[0].producer != -2 || lp->comp[1].producer != -2 ||
        (i > 0 && w->lp[i - 1].out_comp != NO_COLL))
      g_array_append_val(w->starts, i);
  }
  g_array_append_val(w->starts, w->hi);
  g_array_free(base, TRUE);
}

/* The op's name: "fwd layer3.attn [heads/4]". */
static void name_op(const Lower *w, PsOp *op, int first)
{
  static const char *const tag[] = {"", "cols", "rows", "split", "seq"};
  const LayerPlan *lp = &w->lp[first];
  if (lp->local == PS_LOC_NONE || w->M == 1)
    return;
  const char *what = tag[lp->local];
  if (ps_layer_kind_lower(w->m->layers[first].kind)->tensor == PS_TP_HEADS)
    what = "heads";
  else if (ps_layer_kind_lower(w->m->layers[first].kind)->tensor == PS_TP_VOCAB ||
           lp->vocab_loss)
    what = "vocab";
  char suffix[32];
  int n = snprintf(suffix, sizeof suffix, " [%s/%d%s]", what, w->M, lp->padded ? ", padded" : "");
  size_t keep = MIN(strlen(op->name), sizeof op->name - 1 - (size_t)n);
  memcpy(op->name + keep, suffix, (size_t)n + 1);
}


static PsOp compute_op(const Lower *w, PsOpKind kind, int g)
{
  PsOp op = {.kind = kind, .batch = w->batch, .mb = w->mb, .first = group_first(w, g),
             .last = group_last(w, g)};
  ps_lower_compute_op(w->exp, &op); /* the name and the whole op's activations */
  PsOpCost cost;
  PsCostOptions opt;
  ps_strategy_cost_options(w->exp, &opt);
  /* a rematerialized forward runs what backward needs and was not kept
   * (ps_shard_rerun_share) */
  if (kind == PS_OP_RECOMPUTE) {
    opt.rerun = ps_shard_rerun_share;
    opt.rerun_ud = w;
  }
  ps_cost_op(w->exp->topology, &w->local, op.first, op.last, op.batch, &opt,
             kind == PS_OP_BWD, NULL, &cost);
  op.time = cost.time;
  op.flops = cost.flops;
  op.mxu_flops = cost.mxu_flops;
  op.hbm_bytes = cost.bytes;
  op.memory_bound = cost.memory_bound;
  op.kernels = cost.kernels;
  op.mxu_s = cost.mxu_s;
  op.serial_s = cost.serial_s;
  op.memory_s = cost.memory_s;
  op.overhead_s = cost.overhead_s;
  int64_t act = ps_shard_group_act(w, g);
  op.act_bytes = kind == PS_OP_BWD ? -act : act;
  name_op(w, &op, op.first);
  return op;
}

/* Part s (0-based) of op run as n parts: 1/n of its work, its live-bytes
 * change on the first part, " s+1/n" after its name. */
static PsOp op_part(const PsOp *op, int s, int n)
{
  PsOp part = *op;
  part.time = op->time / n;
  part.flops /= n;
  part.mxu_flops /= n;
  part.hbm_bytes /= n;
  part.mxu_s /= n;
  part.serial_s /= n;
  part.memory_s /= n;
  part.overhead_s /= n;
  part.act_bytes = s == 0 ? op->act_bytes : 0;
  part.part = s + 1;
  part.parts = n;
  char suffix[24];
  int k = snprintf(suffix, sizeof suffix, " %d/%d", s + 1, n);
  size_t keep = MIN(strlen(part.name), sizeof part.name - 1 - (size_t)k);
  memcpy(part.name + keep, suffix, (size_t)k + 1);
  return part;
}

/* op as M partial ops with M - 1 ring steps of `bytes` each between them
 * (SEND to the next member, RECV from the previous). */
static void emit_decomposed(Lower *w, const PsOp *op, double bytes)
{
  for (int s = 0; s < w->M; s++) {
    PsOp part = op_part(op, s, w->M);
    if (s + 1 < w->M) {
      PsOp sd = {.kind = PS_OP_SEND, .peer = 1, .tag = w->tag, .bytes = bytes,
                 .batch = w->batch, .first = op->first, .last = op->last, .part = s + 1,
                 .parts = w->M, .ring_bwd = op->kind == PS_OP_BWD};
      snprintf(sd.name, sizeof sd.name, "tensor permute %d of %.20s", s + 1, op->name);
      emit(w, &sd);
    }
    emit(w, &part);
    if (s + 1 < w->M) {
      PsOp rv = {.kind = PS_OP_RECV, .peer = -1, .tag = w->tag++, .batch = w->batch,
                 .first = op->first, .last = op->last, .part = s + 1, .parts = w->M,
                 .ring_bwd = op->kind == PS_OP_BWD};
      snprintf(rv.name, sizeof rv.name, "tensor permute %d of %.20s", s + 1, op->name);
      emit(w, &rv);
    }
  }
}

static const char *lname(const Lower *w, int p)
{
  return p < 0 ? "input" : w->m->layers[p].name;
}

/* Forward completions at layer i's inputs. */
static void forward_comps(Lower *w, int i)
{
  for (int s = 0; s < 2; s++) {
    const Comp *c = &w->lp[i].comp[s];
    if (c->fwd == NO_COLL)
      continue;
    int64_t n = out_elems(w, c->producer);
    char what[48];
    snprintf(what, sizeof what, "%.36s out", lname(w, c->producer));
    gboolean decomposed = w->c->collective_matmul && c->producer >= 0 &&
                          (c->fwd == PS_COLL_ALL_REDUCE || c->fwd == PS_COLL_REDUCE_SCATTER);
    if (decomposed && c->fwd == PS_COLL_REDUCE_SCATTER)
      continue; /* the producer's ring steps did it */
    int op = decomposed ? PS_COLL_ALL_GATHER : c->fwd;
    coll_now(w, add_req(w, op, PS_GROUP_MODEL, model_axis(w, op), n, PS_BUFFER_ACTIVATIONS,
                        c->producer, what));
  }
}

/* Whether layer i's backward runs as ring steps (collective matmul): the
 * all-reduce of its input gradient (with sequence parallelism, the
 * reduce-scatter) completes it. */
static gboolean ring_backward(const Lower *w, int i)
{
  const LayerPlan *lp = &w->lp[i];
  if (!w->c->collective_matmul || w->M == 1 || w->m->layers[i].input_from < 0)
    return FALSE;
  return lp->enter || (lp->comp[0].bwd == PS_COLL_REDUCE_SCATTER && lp->comp[0].producer >= 0);
}

/* Whether a collective completes an input gradient of layer i's backward
 * (not decomposed into ring steps). */
static gboolean has_backward_comps(const Lower *w, int i)
{
  const LayerPlan *lp = &w->lp[i];
  for (int s = 0; s < 2; s++)
    if (lp->comp[s].bwd != NO_COLL && lp->comp[s].producer >= 0)
      return TRUE;
  return lp->enter && w->m->layers[i].input_from >= 0;
}

/* The collectives that complete the input gradients of layer i's
 * backward, started (their requests in reqs, at most 3), or none. */
static int backward_comps(Lower *w, int i, gboolean ring, int *reqs)
{
  const LayerPlan *lp = &w->lp[i];
  int n = 0;
  for (int s = 0; s < 2; s++) {
    const Comp *c = &lp->comp[s];
    if (c->bwd == NO_COLL || c->producer < 0) /* no gradient for the net's input */
      continue;
    if (ring && s == 0 && c->bwd == PS_COLL_REDUCE_SCATTER)
      continue; /* the ring steps reduced and scattered it */
    char what[48];
    snprintf(what, sizeof what, "%.32s out-grad", lname(w, c->producer));
    reqs[n++] = add_req(w, c->bwd, PS_GROUP_MODEL, model_axis(w, c->bwd),
                        out_elems(w, c->producer), PS_BUFFER_ACT_GRADS, c->producer, what);
  }
  if (lp->enter && w->m->layers[i].input_from >= 0) {
    char what[48];
    snprintf(what, sizeof what, "%.34s in-grad", w->m->layers[i].name);
    int p = w->m->layers[i].input_from;
    int op = ring ? PS_COLL_ALL_GATHER : PS_COLL_ALL_REDUCE;
    reqs[n++] = add_req(w, op, PS_GROUP_MODEL, PS_AXIS_TENSOR, out_elems(w, p),
                        PS_BUFFER_ACT_GRADS, p, what);
  }
  for (int k = 0; k < n; k++)
    coll(w, PS_OP_COLL_START, reqs[k]);
  return n;
}

/* Splits group g's backward `bw` into the op that computes the input
 * gradient and a tail of the weight-gradient kernels ("wgrad"), which
 * depend on nothing the input gradient's collective waits for: XLA's
 * latency-hiding scheduler runs them while that collective is in flight,
 * as Megatron-LM overlaps its tensor-parallel all-reduce of the input
 * gradient with the weight gradient.  The tail frees the activations
 * (the weight gradients read them last).  FALSE, bw unchanged, when the
 * group has no weight-gradient kernel, or has products of two activations
 * (attention's), whose backward kernels the cost model does not separate
 * from its projections' weight gradients: its input gradient's collective
 * then waits for the whole. */
static gboolean split_wgrad(const Lower *w, int g, PsOp *bw, PsOp *tail)
{
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    for (int m = 0; m < w->local.layers[l].n_mm; m++)
      if (w->local.layers[l].mm[m].activations)
        return FALSE;
  PsCostOptions opt;
  ps_strategy_cost_options(w->exp, &opt);
  GArray *k = g_array_new(FALSE, FALSE, sizeof(PsKernel));
  PsOpCost whole;
  ps_cost_op(w->exp->topology, &w->local, bw->first, bw->last, bw->batch, &opt, TRUE, k,
             &whole);
  *tail = *bw;
  tail->time = 0;
  tail->flops = tail->mxu_flops = tail->hbm_bytes = 0;
  tail->mxu_s = tail->memory_s = tail->overhead_s = 0;
  tail->kernels = 0;
  tail->memory_bound = FALSE;
  for (guint j = 0; j < k->len; j++) {
    const PsKernel *x = &g_array_index(k, PsKernel, j);
    if (strcmp(x->what, "wgrad") != 0)
      continue;
    tail->time += x->time;
    tail->flops += x->mxu_flops + x->vpu_flops;
    tail->mxu_flops += x->mxu_flops;
    tail->hbm_bytes += x->bytes;
    *(x->bound == PS_BOUND_MXU ? &tail->mxu_s : &tail->memory_s) += x->busy_s;
    tail->overhead_s += x->launch_s;
    tail->kernels++;
  }
  g_array_free(k, TRUE);
  if (tail->kernels == 0 || tail->time >= bw->time)
    return FALSE;
  tail->memory_bound = tail->memory_s > tail->mxu_s;
  tail->tail = TRUE;
  bw->time -= tail->time;
  bw->flops -= tail->flops;
  bw->mxu_flops -= tail->mxu_flops;
  bw->hbm_bytes -= tail->hbm_bytes;
  bw->mxu_s -= tail->mxu_s;
  bw->memory_s -= tail->memory_s;
  bw->overhead_s -= tail->overhead_s;
  bw->kernels -= tail->kernels;
  bw->act_bytes = 0;
  size_t keep = MIN(strlen(tail->name), sizeof tail->name - 1 - 6);
  memcpy(tail->name + keep, " wgrad", 7);
  return TRUE;
}


/* ---- context parallelism: attention's keys and values ------------------ */

/* Elements of layer l's keys and values over every position of a
 * device's examples (its heads' share of the tensor group): what each
 * member of the context group holds once they are gathered, as MaxText's
 * context parallelism all-gathers them before attention (each device's
 * queries attend to every key); 0 without heads or a context axis. */
static int64_t context_kv(const Lower *w, int l)
{
  const PsLayer *L = &w->m->layers[l];
  if (w->C == 1 || ps_layer_kind_lower(L->kind)->tensor != PS_TP_HEADS || L->heads <= 0)
    return 0;
  int64_t dh = L->dim / L->heads, kvw = L->kv_heads * dh;
  if (w->M > 1 && w->lp[l].local != PS_LOC_NONE)
    kvw = MAX(dh, kvw / w->M);
  return 2 * w->batch * L->in_shape[0] * kvw;
}

/* Bytes the gathered keys and values of layer l add to the device's own. */
static int64_t context_kv_extra(const Lower *w, int l)
{
  return context_kv(w, l) / w->C * (w->C - 1) * w->act_b;
}

/* Whether the gathered keys and values stay in HBM from forward to
 * backward: only when nothing is rematerialized (XLA keeps them as the
 * attention's residuals); else backward gathers them again. */
static gboolean context_kv_kept(const Lower *w)
{
  return w->c->remat == PS_REMAT_NONE;
}

/* Before group g's attention: its keys and values all-gathered over the
 * context group, live from the gather's DONE; the bytes they add. */
static int64_t context_gather(Lower *w, int g, const char *when)
{
  int64_t held = 0;
  for (int l = group_first(w, g); l <= group_last(w, g); l++) {
    int64_t n = context_kv(w, l);
    if (n == 0)
      continue;
    char what[48];
    snprintf(what, sizeof what, "%.32s k,v %s", w->m->layers[l].name, when);
    coll_now(w, add_req(w, PS_COLL_ALL_GATHER, PS_GROUP_CONTEXT, PS_AXIS_CONTEXT, n,
                        PS_BUFFER_ACTIVATIONS, l, what));
    g_array_index(w->ops, PsOp, w->ops->len - 1).act_bytes = context_kv_extra(w, l);
    held += context_kv_extra(w, l);
  }
  return held;
}

/* After group g's backward: the gradients of its gathered keys and values,
 * partial sums over the context group, reduce-scattered onto each
 * device's positions; the gathered copies freed. */
static void context_scatter(Lower *w, int g)
{
  for (int l = group_first(w, g); l <= group_last(w, g); l++) {
    int64_t n = context_kv(w, l);
    if (n == 0)
      continue;
    char what[48];
    snprintf(what, sizeof what, "%.33s k,v grad", w->m->layers[l].name);
    coll_now(w, add_req(w, PS_COLL_REDUCE_SCATTER, PS_GROUP_CONTEXT, PS_AXIS_CONTEXT, n,
                        PS_BUFFER_ACT_GRADS, l, what));
    g_array_index(w->ops, PsOp, w->ops->len - 1).act_bytes = -context_kv_extra(w, l);
  }
}

/* Ring attention (strategy.context_strategy "ring"; MaxText's
 * context_parallel_strategy=ring, after Liu et al. 2023, "Ring Attention
 * with Blockwise Transformers", arXiv:2310.01889): no all-gather; group
 * g's op runs as C parts, each against one device's block of keys and
 * values, and between parts each device passes the block it holds to the
 * next device of its context group while the part computes (forward the
 * keys and values, backward with their gradients' partial sums: twice
 * the bytes), so a step's transfer shows only where it outlasts a part.
 * The bytes of one block of group g's keys and values; 0 without the
 * ring or without attention in the group. */
static double context_ring_bytes(const Lower *w, int g)
{
  if (!w->c->context_ring)
    return 0;
  double b = 0;
  for (int l = group_first(w, g); l <= group_last(w, g); l++)
    b += (double)context_kv(w, l) / w->C * w->act_b;
  return b;
}

/* Op as C parts over the context ring with `bytes` passed between them
 * (context_ring_bytes); the op's live-bytes change rides on its first
 * part, and the block arriving while a part computes (a second buffer
 * beside the one in use) is live from the first part to the last. */
static void emit_context_ring(Lower *w, const PsOp *op, double bytes)
{
  for (int s = 0; s < w->C; s++) {
    PsOp part = op_part(op, s, w->C);
    part.ctx_ring = TRUE;
    if (s == 0)
      part.act_bytes += (int64_t)bytes;
    if (s == w->C - 1)
      part.act_bytes -= (int64_t)bytes;
    PsOp step = {.peer = 1, .tag = w->tag, .bytes = bytes, .batch = w->batch,
                 .first = op->first, .last = op->last, .part = s + 1, .parts = w->C,
                 .ring_bwd = op->kind == PS_OP_BWD, .ctx_ring = TRUE};
    snprintf(step.name, sizeof step.name, "context ring %d of %.22s", s + 1, op->name);
    if (s + 1 < w->C) {
      step.kind = PS_OP_SEND;
      emit(w, &step);
    }
    emit(w, &part);
    if (s + 1 < w->C) {
      step.kind = PS_OP_RECV;
      step.peer = -1;
      step.bytes = 0;
      step.tag = w->tag++;
      emit(w, &step);
    }
  }
}

/* Op as emit does, or as ring attention's parts when group g has them. */
static void emit_context(Lower *w, const PsOp *op, int g, double factor)
{
  double bytes = context_ring_bytes(w, g) * factor;
  if (bytes > 0 && w->C > 1)
    emit_context_ring(w, op, bytes);
  else
    emit(w, op);
}

/* The fsdp all-gather of group g's weights (a request), or -1. */
static int gather_req(Lower *w, int g, const char *when)
{
  if (w->Fw == 1 || group_params(w, g) == 0)
    return -1;
  char what[48];
  snprintf(what, sizeof what, "%.30s w %s", w->m->layers[group_first(w, g)].name, when);
  return add_req(w, PS_COLL_ALL_GATHER, PS_GROUP_FSDP, PS_AXIS_FSDP, group_params(w, g),
                 PS_BUFFER_PARAMS, group_first(w, g), what);
}

static int next_param_group(const Lower *w, int g, int dir, int n)
{
  for (g += dir; g >= 0 && g < n; g += dir)
    if (group_params(w, g) > 0)
      return g;
  return -1;
}

static void shard_forward(Lower *w, int *pending)
{
  int n = (int)w->starts->len - 1;
  int next = w->Fw > 1 ? next_param_group(w, -1, 1, n) : -1;
  if (next >= 0 && w->c->prefetch) {
    pending[next] = gather_req(w, next, "fwd");
    coll(w, PS_OP_COLL_START, pending[next]);
  }
  for (int g = 0; g < n; g++) {
    int first = group_first(w, g), last = group_last(w, g);
    int64_t wbytes = gathered_bytes(w, g), kv = 0;
    gboolean kv_done = FALSE;
    if (w->Fw > 1 && wbytes > 0) {
      if (!w->c->prefetch) {
        pending[g] = gather_req(w, g, "fwd");
        coll(w, PS_OP_COLL_START, pending[g]);
      }
      /* this group's keys and values before the next group's weights:
       * an all-gather started after that prefetch waits for it */
      kv = w->c->context_ring ? 0 : context_gather(w, g, "fwd");
      kv_done = TRUE;
      int nx = next_param_group(w, g, 1, n);
      if (w->c->prefetch && nx >= 0) {
        pending[nx] = gather_req(w, nx, "fwd");
        coll(w, PS_OP_COLL_START, pending[nx]);
      }
      coll(w, PS_OP_COLL_DONE, pending[g]);
      g_array_index(w->ops, PsOp, w->ops->len - 1).act_bytes = wbytes;
    }
    forward_comps(w, first);
    if (!kv_done && !w->c->context_ring)
      kv = context_gather(w, g, "fwd");
    PsOp f = compute_op(w, PS_OP_FWD, g);
    if (w->c->remat == PS_REMAT_FULL)
      f.act_bytes = ps_shard_kept_bytes(w, g);
    else if (w->c->remat == PS_REMAT_MINIMAL || w->c->remat == PS_REMAT_CUSTOM)
      f.act_bytes = ps_shard_products_bytes(w, g);
    else if (w->c->remat == PS_REMAT_ATTENTION)
      f.act_bytes -= ps_shard_score_bytes(w, g);
    if (w->Fw > 1 && wbytes > 0) /* the gathered copy, live from its DONE */
      f.act_bytes -= w->c->regather ? wbytes : 0;
    f.act_bytes += ps_shard_offload_bytes(w, g); /* in HBM until its copy is done */
    if (!context_kv_kept(w))
      f.act_bytes -= kv; /* backward gathers them again */
    const LayerPlan *lp = &w->lp[last];
    gboolean ring = w->c->collective_matmul && w->M > 1 &&
                    (lp->out_comp == PS_COLL_ALL_REDUCE || lp->out_comp == PS_COLL_REDUCE_SCATTER);
    if (ring)
      emit_decomposed(w, &f, (double)out_elems(w, last) * w->act_b / w->M);
    else
      emit_context(w, &f, g, 1.0);
    ps_lower_host_calls(w->exp, &f, w->ops);
    ps_shard_offload_after(w, g);
    if (lp->vocab_loss) {
      int64_t rows = w->batch * MAX(w->m->labels_per_example, 1) / w->C; /* its positions' */
      coll_now(w, add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_MODEL, PS_AXIS_TENSOR, rows,
                          PS_BUFFER_ACTIVATIONS, last, "loss max"));
      coll_now(w, add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_MODEL, PS_AXIS_TENSOR, rows,
                          PS_BUFFER_ACTIVATIONS, last, "loss sum"));
    }
  }
  ps_shard_offload_flush(w);
}

/* ---- backward, gradients and the update -------------------------------- */

typedef struct {
  GArray *rs;       /* fsdp reduce-scatters of the open bucket (requests) */
  GArray *ready;    /* of a closed bucket, flushed after the next op */
  GArray *done;     /* requests whose DONE is still owed */
  GArray *norm;     /* sequence all-reduces of row layers' gradients, not yet done */
  int64_t floats;
  int first, last;
  int k;
} Buckets;

/* With a sequence axis each device runs a row layer (a norm) on its own
 * rows, so its gradients of the layer's (replicated) weights are partial
 * sums: an all-reduce over the tensor x sequence group completes them,
 * started after the layer's backward and done before anything reads the
 * gradients (norm_done). */
static void norm_grads(Lower *w, Buckets *b, int g)
{
  for (int l = group_first(w, g); l <= group_last(w, g) && w->sp; l++) {
    if (w->lp[l].local != PS_LOC_ROWS || w->local.layers[l].params == 0)
      continue;
    char what[48];
    snprintf(what, sizeof what, "%.38s grad", w->m->layers[l].name);
    int r = add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_MODEL, PS_AXIS_SEQUENCE,
                    w->local.layers[l].params, PS_BUFFER_GRADS, l, what);
    coll(w, PS_OP_COLL_START, r);
    g_array_append_val(b->norm, r);
  }
}

static void norm_done(Lower *w, Buckets *b)
{
  for (guint j = 0; j < b->norm->len; j++)
    coll(w, PS_OP_COLL_DONE, g_array_index(b->norm, int, j));
  g_array_set_size(b->norm, 0);
}

static void flush_bucket(Lower *w, Buckets *b, GArray *rs, int first, int last,
                         int64_t floats)
{
  norm_done(w, b);
  for (guint j = 0; j < rs->len; j++)
    coll(w, PS_OP_COLL_DONE, g_array_index(rs, int, j));
  g_array_set_size(rs, 0);
  if (w->D == 1)
    return;
  char what[48];
  snprintf(what, sizeof what, "b%d %.16s..%.16s", b->k++, w->m->layers[first].name,
           w->m->layers[last].name);
  /* with fsdp the bucket is the device's shards of its ops' gradients */
  int r = add_req(w, PS_COLL_ALL_REDUCE, PS_GROUP_DATA, PS_AXIS_DATA, floats,
                  w->Fw > 1 ? PS_BUFFER_GRAD_SHARDS : PS_BUFFER_GRADS, first, what);
  if (w->Fw > 1)
    g_array_index(w->reqs, Req, r).offset = w->shard_params - floats;
  coll(w, PS_OP_COLL_START, r);
  g_array_append_val(b->done, r);
}

static void gradients(Lower *w, Buckets *b, int g, gboolean closes)
{
  int64_t p = group_params(w, g);
  if (b->ready->len > 0) {
    flush_bucket(w, b, b->ready, b->first, b->last, b->floats);
    b->floats = 0;
    b->last = -1;
  }
  if (p == 0 && !closes)
    return;
  if (p > 0) {
    int64_t shard = (p + w->Fw - 1) / w->Fw;
    w->shard_params += shard;
    if (w->Fw > 1) {
      norm_done(w, b);
      char what[48];
      snprintf(what, sizeof what, "%.36s grad", w->m->layers[group_first(w, g)].name);
      int r = add_req(w, PS_COLL_REDUCE_SCATTER, PS_GROUP_FSDP, PS_AXIS_FSDP, p, PS_BUFFER_GRADS,
                      group_first(w, g), what);
      coll(w, PS_OP_COLL_START, r);
      g_array_append_val(b->rs, r);
    }
    if (b->last < 0)
      b->last = group_last(w, g);
    b->first = group_first(w, g);
    b->floats += shard;
  }
  if (b->floats == 0 ||
      (b->floats * ps_lower_reduce_bytes(w->exp, w->c->reduce_precision) < w->c->bucket_bytes &&
       !closes))
    return;
  if (w->Fw > 1 && !closes) { /* wait one op for the reduce-scatters */
    g_array_append_vals(b->ready, b->rs->data, b->rs->len);
    g_array_set_size(b->rs, 0);
    return;
  }
  flush_bucket(w, b, b->rs, b->first, b->last, b->floats);
  b->floats = 0;
  b->last = -1;
}

static void shard_backward(Lower *w, int *pending)
{
  int n = (int)w->starts->len - 1;
  gboolean gather = w->Fw > 1 && w->c->regather;
  Buckets b = {.rs = g_array_new(FALSE, FALSE, sizeof(int)),
               .ready = g_array_new(FALSE, FALSE, sizeof(int)),
               .done = g_array_new(FALSE, FALSE, sizeof(int)),
               .norm = g_array_new(FALSE, FALSE, sizeof(int)), .last = -1};
  int first_pg = gather ? next_param_group(w, n, -1, n) : -1;
  if (first_pg >= 0 && w->c->prefetch) {
    pending[first_pg] = gather_req(w, first_pg, "bwd");
    coll(w, PS_OP_COLL_START, pending[first_pg]);
  }
  g_autofree int *down = g_new(int, n > 0 ? n : 1);
  for (int g = 0; g < n; g++)
    down[g] = -1;
  for (int g = n - 1; g >= 0; g--) {
    ps_shard_prefetch_ahead(w, down, g);
    gboolean kv_done = FALSE;
    if (gather && group_params(w, g) > 0) {
      if (!w->c->prefetch) {
        pending[g] = gather_req(w, g, "bwd");
        coll(w, PS_OP_COLL_START, pending[g]);
      }
      if (!context_kv_kept(w) && !w->c->context_ring)
        context_gather(w, g, "bwd"); /* before the next group's prefetch */
      kv_done = TRUE;
      int nx = next_param_group(w, g, -1, n);
      if (w->c->prefetch && nx >= 0) {
        pending[nx] = gather_req(w, nx, "bwd");
        coll(w, PS_OP_COLL_START, pending[nx]);
      }
      coll(w, PS_OP_COLL_DONE, pending[g]);
      g_array_index(w->ops, PsOp, w->ops->len - 1).act_bytes = gathered_bytes(w, g);
    }
    ps_shard_prefetch_done(w, down, g);
    if (!context_kv_kept(w) && !kv_done && !w->c->context_ring)
      context_gather(w, g, "bwd");
    PsOp bw = compute_op(w, PS_OP_BWD, g);
    bw.act_bytes -= w->Fw > 1 ? gathered_bytes(w, g) : 0;
    if (w->c->remat == PS_REMAT_FULL) {
      PsOp r = compute_op(w, PS_OP_RECOMPUTE, g);
      r.act_bytes = ps_shard_recompute_live(w, g, r.act_bytes);
      emit_context(w, &r, g, 1.0); /* the ring again, forward */
      bw.act_bytes -= ps_shard_kept_bytes(w, g);
    } else if (w->c->remat == PS_REMAT_MINIMAL || w->c->remat == PS_REMAT_CUSTOM) {
      /* forward kept the products; the rest is live again until backward
       * frees the whole group's, as without rematerialization */
      PsOp r = compute_op(w, PS_OP_RECOMPUTE, g);
      /* in HBM already: what it kept, and what its copy brought back */
      int64_t kept = ps_shard_products_bytes(w, g) + ps_shard_offload_bytes(w, g),
              own = r.act_bytes;
      r.act_bytes -= MIN(own, kept);
      bw.act_bytes -= MAX(kept - own, 0); /* frees what both left */
      emit(w, &r);
    } else if (w->c->remat == PS_REMAT_ATTENTION && ps_shard_has_heads(w, g)) {
      PsOp r = compute_op(w, PS_OP_RECOMPUTE, g);
      r.act_bytes = ps_shard_score_bytes(w, g);
      emit(w, &r);
    } else if (ps_shard_group_vocab_rerun(w, g)) {
      /* vocabulary tiling without rematerialization: each tile's logits
       * again, one tile live at a time (counted with the loss's) */
      PsOp r = compute_op(w, PS_OP_RECOMPUTE, g);
      r.act_bytes = 0;
      emit(w, &r);
    }
    int first = group_first(w, g);
    gboolean ring = ring_backward(w, first);
    PsOp tail;
    gboolean split = !ring && w->M > 1 && has_backward_comps(w, first) &&
                     split_wgrad(w, g, &bw, &tail);
    if (ring)
      emit_decomposed(w, &bw, (double)out_elems(w, w->m->layers[first].input_from) * w->act_b /
                                  w->M);
    else
      emit_context(w, &bw, g, 2.0); /* keys and values, and their gradients */
    int reqs[3], nr = backward_comps(w, first, ring, reqs);
    if (split)
      emit(w, &tail);
    for (int k = 0; k < nr; k++)
      coll(w, PS_OP_COLL_DONE, reqs[k]);
    if (!w->c->context_ring)
      context_scatter(w, g); /* the ring brought each block's gradient home */
    if (w->final) { /* (the step's last micro-batch) */
      norm_grads(w, &b, g);
      gradients(w, &b, g, g == 0);
    } else if (w->Fw > 1 && !w->c->accumulate_whole && group_params(w, g) > 0) {
      /* an earlier micro-batch's gradients reduce-scattered into the
       * shards the step accumulates (GSPMD's accumulator sharded as the
       * weights are), done by the end of its backward */
      char what[48];
      snprintf(what, sizeof what, "%.33s grad mb", w->m->layers[group_first(w, g)].name);
      int r = add_req(w, PS_COLL_REDUCE_SCATTER, PS_GROUP_FSDP, PS_AXIS_FSDP,
                      group_params(w, g), PS_BUFFER_GRADS, group_first(w, g), what);
      coll(w, PS_OP_COLL_START, r);
      g_array_append_val(b.done, r);
    }
  }
  norm_done(w, &b);
  for (guint j = 0; j < b.rs->len; j++)
    coll(w, PS_OP_COLL_DONE, g_array_index(b.rs, int, j));
  for (guint j = 0; j < b.done->len; j++)
    coll(w, PS_OP_COLL_DONE, g_array_index(b.done, int, j));
  if (w->final)
    w->buckets = b.k; /* the data axis's all-reduces of the step's gradients */
  g_array_free(b.rs, TRUE);
  g_array_free(b.ready, TRUE);
  g_array_free(b.done, TRUE);
  g_array_free(b.norm, TRUE);
}

/* A stage transfer of the current micro-batch (shard-pipe.c): forward the
 * device's share of the stage's output, backward the gradient of its
 * input (the labels ride with the activations, as in the pipeline
 * strategy).  A boundary whole on every device of the tensor group goes
 * as Megatron-LM's scatter/gather does (Narayanan et al. 2021, section
 * 4.1): each sends 1/T of it, and the receivers all-gather it over their
 * group; rows or a split go as they are, partial sums whole. */
static void xfer(Lower *w, PsOpKind kind, gboolean backward)
{
  gboolean send = kind == PS_OP_SEND;
  int p = (send != backward) ? w->hi - 1 : w->lo - 1; /* the boundary's producer */
  Layout at = w->lp[p].out;
  double bytes = (double)out_elems(w, p) * w->act_b / (w->M > 1 && at != L_PARTIAL ? w->M : 1);
  PsOp op = ps_shard_pipe_xfer(kind, w->mb, backward, send != backward ? 1 : -1, w->batch, p,
                               bytes + (send && !backward ? 4.0 * w->batch : 0));
  int i = (int)w->ops->len;
  g_array_append_val(w->xfer, i);
  emit(w, &op);
  if (!send && w->M > 1 && at == L_WHOLE)
    coll_now(w, add_req(w, PS_COLL_ALL_GATHER, PS_GROUP_MODEL, PS_AXIS_TENSOR, out_elems(w, p),
                        backward ? PS_BUFFER_ACT_GRADS : PS_BUFFER_ACTIVATIONS, p,
                        backward ? "stage out-grad" : "stage in"));
}

static void pipe_forward(void *data, int mb)
{
  Lower *w = data;
  w->mb = mb;
  if (w->stage == 0) {
    PsOp in = ps_lower_infeed(w->exp, w->batch);
    in.mb = mb;
    in.example_off += mb * w->batch;
    emit(w, &in);
  } else {
    xfer(w, PS_OP_RECV, FALSE);
  }
  shard_forward(w, w->pending);
  if (w->stage < w->P - 1)
    xfer(w, PS_OP_SEND, FALSE);
}

static void pipe_backward(void *data, int mb, gboolean final)
{
  Lower *w = data;
  w->mb = mb;
  w->final = final;
  if (w->stage < w->P - 1)
    xfer(w, PS_OP_RECV, TRUE);
  shard_backward(w, w->pending);
  if (w->stage > 0)
    xfer(w, PS_OP_SEND, TRUE);
}

/* The template program of every device of the stage (colls are request
 * indices): its micro-batches in the schedule's order (one stage, one
 * micro-batch: infeed, forward, backward), the norm when clipping, the
 * update (a layer-wise one in two passes, the layers' norms all-reduced
 * between them), the outfeed. */
static void build_template(Lower *w)
{
  int n = (int)w->starts->len - 1;
  w->pending = g_new(int, n);
  ps_pipeline_walk(w->c->schedule, w->P, w->stage, w->mbs, pipe_forward, pipe_backward, w);
  int64_t off = ps_lower_param_offset(w->m, w->lo);
  PsOp up = {.coll = -1, .param_off = off, .param_len = ps_lower_param_offset(w->m, w->hi) - off};
  if (w->P == 1)
    up.param_len = w->m->params;
  ps_lower_update_op(w->exp, &up, w->shard_params, ps_shard_grad_bytes(w));
  snprintf(up.name, sizeof up.name, w->Fw > 1 || w->M > 1 ? "apply update: shard" : "apply update");
  if (w->exp->optimizer.clip_norm > 0)
    ps_shard_clip_norm(w);
  if (w->mbs > 1 && w->Fw > 1 && w->c->accumulate_whole) {
    /* micro-batches accumulate whole gradients until the last one's
     * reduce-scatter ("accumulate": "whole"): held from the first op to
     * the update */
    int64_t whole = w->shard_params * (w->Fw - 1) * ps_lower_weight_bytes(w->exp);
    g_array_index(w->ops, PsOp, 0).act_bytes += whole;
    up.act_bytes = -whole;
  }
  ps_shard_layer_norms(w, &up);
  emit(w, &up);
  if (w->stage == w->P - 1) {
    PsOp out = ps_lower_outfeed(w->exp, w->batch * w->mbs,
                                1.0 / ((double)w->D * w->F * w->M * w->C));
    emit(w, &out);
  }
  g_free(w->pending);
  w->pending = NULL;
}

/* Stage `stage` of the mesh, layers [lo, hi). */

void ps_shard_lower_init(Lower *w, const PsExperiment *exp, const PsShardConfig *c, int stage,
                       int lo, int hi)
{
  *w = (Lower){.exp = exp, .c = c, .m = exp->model, .M = ps_shard_model_ways(c),
               .F = c->size[PS_AXIS_FSDP], .D = c->size[PS_AXIS_DATA],
               .C = c->size[PS_AXIS_CONTEXT], .Fw = ps_shard_weight_ways(c),
               .sp = c->size[PS_AXIS_SEQUENCE] > 1 || c->sequence_parallel,
               .act_b = ps_cost_act_bytes(exp->numerics.precision),
               .reqs = g_array_new(FALSE, FALSE, sizeof(Req)),
               .ops = g_array_new(FALSE, TRUE, sizeof(PsOp)),
               .stage = stage, .P = c->size[PS_AXIS_STAGE], .mbs = c->micro_batches,
               .lo = lo, .hi = hi, .xfer = g_array_new(FALSE, FALSE, sizeof(int)),
               .up = g_array_new(FALSE, FALSE, sizeof(UpCopy))};
  w->batch = exp->global_batch / ((int64_t)w->D * w->F * w->mbs);
  plan_layouts(w);
  build_local(w);
  cut_groups(w);
  w->window = PS_HOST_COPIES_IN_FLIGHT;
  build_template(w);
  while (w->copies > 0 && w->window > 1 && !ps_shard_template_fits(w, NULL)) {
    w->window /= 2; /* fewer copies in flight, fewer of their bytes in HBM */
    g_array_set_size(w->ops, 0);
    g_array_set_size(w->reqs, 0);
    g_array_set_size(w->xfer, 0);
    w->tag = w->copies = 0;
    w->shard_params = 0;
    build_template(w);
  }
}

void ps_shard_lower_clear(Lower *w)
{
  g_free(w->lp);
  g_free(w->local.layers);
  g_array_free(w->starts, TRUE);
  g_array_free(w->reqs, TRUE);
  g_array_free(w->ops, TRUE);
  g_array_free(w->xfer, TRUE);
  g_array_free(w->up, TRUE);
}

void ps_shard_kernels(const PsExperiment *exp, const void *config, const PsPlan *plan,
                      int device, GString *out)
{
  const PsShardConfig *c = config;
  int *first = ps_shard_pipe_bounds(exp, c, NULL); /* the plan compiled: they exist */
  g_return_if_fail(first != NULL);
  int s = c->size[PS_AXIS_STAGE] > 1 ? ps_plan_coord(plan, device, PS_AXIS_STAGE) : 0;
  Lower w;
  ps_shard_lower_init(&w, exp, c, s, first[s], first[s + 1]);
  ps_kernels_describe_model(exp, &w.local, ps_shard_rerun_share, &w,
                            ps_plan_program(plan, device), out);
  ps_shard_lower_clear(&w);
  g_free(first);
}

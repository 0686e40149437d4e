/* shard-lower-private.h: what the lowering of a sharded step
 * (shard-lower.c) shares with the rematerialization policies
 * (shard-remat.c), the plan (shard-plan.c), the host-offloading copies (shard-offload.c), the HBM
 * check (shard-fit.c) and the ops before the update (shard-update.c): the
 * lowering's state, the layouts and requests of its template, its op
 * groups, what each policy keeps and reruns, and the copies it makes.
 *
 * Invariant: a Lower's op groups (starts) cover its stage's layers in
 * order; the rematerialization functions read a Lower and never change
 * it; the offloading ones only append copy ops to its template and keep
 * its copies' count and window state (copies, up). */
#ifndef PS_SHARD_LOWER_PRIVATE_H
#define PS_SHARD_LOWER_PRIVATE_H

#include "strategy/shard-private.h"

typedef enum { L_WHOLE, L_SPLIT, L_PARTIAL, L_ROWS } Layout;
#define NO_COLL (-1)

/* A completion of producer's output before a layer, and its conjugate. */
typedef struct {
  int producer;       /* -2: none */
  int fwd, bwd;       /* PsCollOp or NO_COLL */
  gboolean fused;     /* done by the producer's collective matmul */
} Comp;

typedef struct {
  Comp comp[2];       /* input_from, shortcut_from */
  gboolean enter;     /* backward all-reduce of the input gradient */
  gboolean vocab_loss;
  gboolean padded;    /* a vocabulary T does not divide, padded to ceil(V/T) a device */
  PsShardLocal local;
  int out_comp;       /* how a consumer completes this output (NO_COLL) */
  Layout out;         /* the layout the layer leaves its output in */
} LayerPlan;

/* A collective the template refers to; one instance per group. */
typedef struct {
  PsCollOp op;
  PsShardGroup group;
  PsAxis axis;
  int64_t count;
  PsBufferKind buffer;
  int64_t offset;
  int layer;
  char name[64];
} Req;

typedef struct {
  const PsExperiment *exp;
  const PsShardConfig *c;
  const PsModel *m;
  PsModel local;
  int M, F, D;
  int C;              /* context ways: each example's positions split C ways */
  int Fw;             /* weight shards: fsdp x context (ps_shard_weight_ways) */
  int buckets;        /* the data axis's gradient all-reduces (buckets) a step, 0 without */
  gboolean sp;
  int64_t batch;
  int act_b;
  LayerPlan *lp;
  gboolean *rows_kept; /* a layer's output, gathered, still held in rows */
  GArray *starts;     /* op groups */
  GArray *reqs;       /* Req */
  GArray *ops;        /* the template */
  int tag;
  int copies;         /* copies to and from the host lowered so far (their tags) */
  GArray *up;         /* the forward's copies to the host not yet done (UpCopy) */
  int window;         /* copies to or from the host in flight at most */
  int64_t shard_params;
  int stage, P, mbs;  /* this stage of P, micro-batches per step */
  int lo, hi;         /* the stage's layers [lo, hi) */
  int mb;             /* the micro-batch being lowered */
  gboolean final;     /* its backward completes the gradients */
  int *pending;       /* per op group: its fsdp gather's request */
  GArray *xfer;       /* indices of the stage SEND/RECV ops in the template */
} Lower;

/* A copy to the host the forward started and has not yet waited for. */
typedef struct {
  int tag, g;
  int64_t bytes;
} UpCopy;

/* The first and last layer of op group g. */
static inline int group_first(const Lower *w, int g)
{
  return g_array_index(w->starts, int, g);
}

static inline int group_last(const Lower *w, int g)
{
  return g_array_index(w->starts, int, g + 1) - 1;
}

/* ---- rematerialization (shard-remat.c) ----------------------------------- */

/* The activation bytes group g's layers keep for backward (local). */
int64_t ps_shard_group_act(const Lower *w, int g);
/* Whether strategy.vocab_tiling runs layer l's forward again in backward
 * (the final norm, the head and the loss), and whether group g has one. */
gboolean ps_shard_vocab_rerun(const Lower *w, int l);
gboolean ps_shard_group_vocab_rerun(const Lower *w, int g);
/* PsCostOptions.rerun for a rematerialized forward (ud: the Lower). */
double ps_shard_rerun_share(const void *ud, int l, int m);
/* Whether group g holds an attention layer. */
gboolean ps_shard_has_heads(const Lower *w, int g);
/* Activation bytes of the scores of group g's attention (local). */
int64_t ps_shard_score_bytes(const Lower *w, int g);
/* Bytes a full-remat forward keeps of group g in HBM. */
int64_t ps_shard_kept_bytes(const Lower *w, int g);
/* What full remat's RECOMPUTE of group g brings back (own: its own). */
int64_t ps_shard_recompute_live(const Lower *w, int g, int64_t own);
/* Bytes "minimal" or "custom" keeps of group g in HBM. */
int64_t ps_shard_products_bytes(const Lower *w, int g);
/* Bytes "custom" offloads of group g to the host (remat_offload). */
int64_t ps_shard_offload_bytes(const Lower *w, int g);

/* ---- host offloading (shard-offload.c) ------------------------------------ */

/* Copies to or from the host a device has in flight each way at most:
 * XLA's xla_tpu_host_transfer_overlap_limit as MaxText's host-offloading
 * flags set it (24: HOST_OFFLOAD_FLAGS in benchmarks/xla_flags_library.py,
 * which Google's Trillium recipes with offloaded checkpoints pass, e.g.
 * tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-8), read as the
 * number of transfers the scheduler keeps in flight.  A copy holds its
 * bytes in HBM until done, so lower_init halves the window until the
 * step fits, as the scheduler's memory-pressure tracking
 * (xla_tpu_enable_scheduler_memory_pressure_tracking, same flags) would. */
#define PS_HOST_COPIES_IN_FLIGHT 24

/* After group g's forward: its offloaded bytes go up to the host. */
void ps_shard_offload_after(Lower *w, int g);
/* At the forward's end: every copy up is done. */
void ps_shard_offload_flush(Lower *w);
/* Before group g's backward: its bytes and the window's next come down
 * (down[h]: the tag of group h's copy, -1 before it starts). */
void ps_shard_prefetch_ahead(Lower *w, int *down, int g);
/* Group g's copy down is done, if it has one. */
void ps_shard_prefetch_done(Lower *w, const int *down, int g);

/* ---- fitting HBM (shard-fit.c) ---------------------------------------------- */

/* Whether the template's peak of live activations, with the stage's shards
 * of weights, gradients and slots, fits a device's HBM; else FALSE with an
 * error naming strategy.mesh and what to change. */
gboolean ps_shard_template_fits(Lower *w, GError **error);
/* " sharded" or " sharded, stage 1 (layers 24..47)".  (transfer full) */
char *ps_shard_stage_what(const Lower *w);

/* ---- the lowering's state (shard-lower.c) and the plan (shard-plan.c) -------- */

/* Stage `stage` of the mesh, layers [lo, hi): its layouts, local model, op
 * groups and template, with the window of host copies that fits. */
void ps_shard_lower_init(Lower *w, const PsExperiment *exp, const PsShardConfig *c, int stage,
                         int lo, int hi);
void ps_shard_lower_clear(Lower *w);

/* ---- the template's requests and ops (shard-lower.c) ------------------------ */

/* A request for a collective of no layer's buffer (a norm); its index. */
int ps_shard_add_req(Lower *w, PsCollOp op, PsShardGroup g, PsAxis axis, int64_t count,
                     PsBufferKind buf, const char *what);
/* Appends op to the template. */
void ps_shard_emit(Lower *w, const PsOp *op);
/* Request req's collective started and waited for, now. */
void ps_shard_coll_now(Lower *w, int req);

/* ---- before the update (shard-update.c) ------------------------------------- */

/* Bytes of a gradient element as the clip and the update read it (0: as
 * the weights are stored). */
int ps_shard_grad_bytes(const Lower *w);
/* The clipping norm: the device's CLIP op, its groups' all-reduces. */
void ps_shard_clip_norm(Lower *w);
/* A layer-wise update of shards: its first pass and the layers' norms'
 * all-reduces; up becomes the second pass.  Else nothing. */
void ps_shard_layer_norms(Lower *w, PsOp *up);

#endif

/* run-private.h: what the files of a run share (sim/run/): the Run that
 * one ps_run() fills, and each file's entry points.  run.c orchestrates
 * (compiles the plan, builds the pod, fans the pod's reports out, runs,
 * writes the outputs); numerics.c does the real arithmetic on the ops;
 * stats.c counts time per category and reports the summary;
 * trace-observer.c writes the trace.
 *
 * Invariant: each part of the Run below belongs to one file, which alone
 * allocates, writes and frees it; the others only read it (statistics read
 * the numerics' losses and histograms; the trace reads the statistics'
 * live bytes).  The open steps are shared, and run.c owns their table. */
#ifndef PS_RUN_PRIVATE_H
#define PS_RUN_PRIVATE_H

#include "run.h"

#include "io/dataset.h"
#include "io/trace.h"
#include "model/net.h"

typedef struct PsTensorNum PsTensorNum;
typedef struct PsSequenceNum PsSequenceNum;
typedef struct PsRingNum PsRingNum;

typedef struct {
  float lo, hi;
  int64_t calls;
  int64_t *counts;
} PsHistogram;

/* Intervals that may overlap, spread over as few trace threads as keep
 * each thread's slices disjoint (a greedy interval colouring: intervals
 * are reported in order of their ends). */
typedef struct {
  GArray *ends; /* ps_time_t, per lane: end of its last slice */
} Lanes;

/* A step some device is still in: nothing is kept per step beyond it. */
typedef struct {
  int outfed;
  int critical;         /* the last device to start the step's last collective */
  int done;             /* devices that finished the step */
  /* per device, its weighted loss: summed in device order once all have
   * outfed, so the step's loss never depends on which finished first */
  double loss[];
} StepState;

typedef struct {
  const PsExperiment *exp;
  const PsPlan *plan;
  PsPod *pod;
  FILE *log;
  int n_dev;
  int64_t warm;         /* steps of the warm-up loop, not measured */
  /* numerics */
  gboolean numerics;
  const PsDataset *train; /* own_train or the caller's */
  PsDataset *own_train;
  const PsDataset *fashion_train, *fashion_test; /* the caller's, or NULL */
  PsSampler *sampler;
  PsNet **nets;         /* per device */
  PsOptimizer **opts;
  int64_t *example_base; /* per device: its replica's first example */
  int64_t *grad_step;   /* per device: the step its gradients were zeroed for */
  double *loss_acc;     /* per device: micro-batch losses of the step so far */
  float *norm;          /* per device, norm_cap floats: PS_BUFFER_NORM (its first, the
                           clipping sum of squares; then a sharded layer-wise
                           update's sums of squares, two a layer); ps_run_norm */
  int64_t norm_cap;     /* the most floats a NORM collective of the plan carries */
  int *loss_n;
  GHashTable *messages; /* (src, dst, tag) -> GQueue of payloads in flight */
  float *batch_x;       /* one global batch */
  int32_t *batch_y;
  int64_t drawn_step;   /* global batch currently in batch_x */
  /* fsdp (numerics-fsdp.c): NULL without an fsdp axis */
  int64_t *shard_off;   /* per collective: its block's place in the shards, or -1 */
  float **shards;       /* per device: its gradient shards (PS_BUFFER_GRAD_SHARDS) */
  double *clip_ss;      /* per device: the sum of squares of its shards at CLIP */
  PsTensorNum *tensor;  /* numerics-tensor.c: NULL without a tensor axis */
  PsSequenceNum *sequence; /* numerics-sequence.c: NULL without a sequence axis */
  PsRingNum *ring;      /* numerics-ring.c: NULL without collective matmul */
  GHashTable *open_steps; /* int64 step -> StepState, while devices are in it (run.c) */
  int outfeeders;       /* devices with an OUTFEED op */
  PsHistogram *histograms; /* per host call, device 0's last result (run.c allocates) */
  double loss_first, loss_last;
  double log_loss_sum;
  int64_t log_loss_n;
  /* statistics, per device, over the measured steps */
  double *cat;          /* n_dev x PS_TIME_N_CATEGORIES, seconds */
  double *loop_wait;    /* per device */
  double *mxu_flops;    /* per device */
  ps_time_t *t0, *t1;   /* per device: end of the warm-up, of the last step */
  int64_t *votes;       /* per device: steps whose last collective waited for it */
  int voted;            /* the device with the most votes, first to reach them */
  int64_t *live, *peak; /* per device: activation bytes live now, at the peak */
  /* per device x PS_N_AXES, seconds: the COLL_DONE waits (and collective
   * ops' own time) of the axis's collectives, and the time at least one
   * of them was in flight */
  double *axis_exposed, *axis_busy;
  double *coll_wait;    /* per device: its open COLL_DONE's wait, booked when the op ends */
  GArray **spans;       /* per device and axis: this step's merged collective spans
                           (stats.c's Span), NULL until used */
  /* trace */
  PsTrace *trace;
  ps_time_t *step_start; /* per device: when its current step began */
  Lanes *coll_lanes;    /* per device */
  GArray **flow_ends;   /* per device: FlowEnd of its collectives' messages (links) */
  GArray **coll_arrivals; /* per collective: ps_time_t its k-th round's last member began */
  int *coll_last;       /* per collective: that member, of the latest round */
  Lanes *host_lanes;    /* [host * PS_HOST_N_LANES + lane]: its sub-lanes */
  int *host_subs;       /* [host * PS_HOST_N_LANES + lane]: sub-lanes 0 ..
                           host_subs - 1 have their thread names (0 from the start) */
  int64_t *host_batches; /* per host: batches prepared so far (names slices) */
} Run;

/* numerics-fsdp.c: an fsdp mesh's numerics.  Each device holds the whole
 * net, but owns only its blocks of the fsdp reduce-scatters of its
 * gradients: their sums are copied into its shards when the reduce-scatter
 * is done (where the data all-reduce finds them), back when it updates,
 * and the optimizer updates those blocks only; the other weights are
 * stale until the next all-gather overwrites them.  init fails
 * (PS_INPUT_ERROR) when a device's blocks of a reduce-scatter outgrow the
 * ceil(count / fsdp) floats the plan gives its shard. */
gboolean ps_run_fsdp_init(Run *r, GError **error);
void ps_run_fsdp_free(Run *r);
void ps_run_fsdp_coll_done(Run *r, int device, int c);
/* TRUE if it updated device's blocks (an fsdp mesh; op's pass of a
 * layer-wise update, op->update_pass), else FALSE. */
gboolean ps_run_fsdp_update(Run *r, int device, int64_t step, const PsOp *op);
float *ps_run_fsdp_shards(Run *r, int device, int64_t off);
/* The parameter ranges device owns, in an array (transfer full), or NULL
 * without an fsdp axis. */
GArray *ps_run_fsdp_ranges(Run *r, int device);
/* CLIP on an fsdp mesh: the sum of squares of device's shards, which its
 * update adds up over its fsdp group (the members the norm's all-reduce
 * has waited for) to scale them by min(1, clip_norm / norm).  FALSE
 * without an fsdp axis. */
gboolean ps_run_fsdp_clip(Run *r, int device);

/* numerics-tensor.c: the numerics of a mesh with a tensor axis.  Each device keeps
 * full-size weights, zero outside its rank's shard of each split layer;
 * the loss's forward is vocab-parallel around the plan's two loss
 * all-reduces (coll_buffer hands them per-row scratch), the data buckets
 * reduce the owned gradients packed, and the update steps the owned
 * ranges only.  Every entry is a no-op (NULL, FALSE) without a tensor
 * axis.  init fails (PS_INPUT_ERROR) when a layer cannot be split. */
gboolean ps_run_tensor_init(Run *r, GError **error);
void ps_run_tensor_free(Run *r);
/* TRUE for the loss layer when its forward is the vocab-parallel one. */
gboolean ps_run_tensor_skips(const Run *r, int layer);
float *ps_run_tensor_coll_buffer(Run *r, int device, int c);
void ps_run_tensor_coll_done(Run *r, int device, int c);
/* After a BWD op: zeroes the gradients device does not own. */
void ps_run_tensor_bwd_done(Run *r, int device, const PsOp *op);
/* UPDATE on a tensor mesh without fsdp: device's owned ranges (op's pass
 * of a layer-wise update, op->update_pass).  FALSE off a tensor mesh. */
gboolean ps_run_tensor_update(Run *r, int device, int64_t step, const PsOp *op);
/* CLIP on a tensor (x sequence) mesh without fsdp: device's share of the
 * squared global norm into its NORM buffer (its split layers' owned
 * gradients, its replicated layers' over the group's size), which the
 * model group's all-reduce adds up; the update then scales its owned
 * gradients by min(1, clip_norm / norm).  FALSE without a tensor axis or
 * with fsdp (numerics-fsdp.c clips those). */
gboolean ps_run_tensor_clip(Run *r, int device);
/* numerics.c.  A layer-wise update's pass (op->update_pass 1 or 2): its
 * slot of device's NORM, its *n floats zeroed for pass one (0 for a whole
 * update). */
float *ps_run_update_sums(Run *r, int device, const PsOp *op, int64_t *n);
/* Steps piece [off, off + len) of op's range as its pass says: the whole
 * update, pass one's sums of squares into sums, or pass two with them. */
void ps_run_update_piece(Run *r, int device, int64_t step, const PsOp *op, float *params,
                         const float *grads, size_t off, size_t len, float *sums);
/* Device's PS_BUFFER_NORM: its clipping sum of squares first. */
static inline float *ps_run_norm(Run *r, int device)
{
  return r->norm + (size_t)device * (size_t)r->norm_cap;
}
/* The sum of squares of x, len gradients at position at of device's
 * packed gradients (tensor x fsdp), each of a layer its tensor x sequence
 * group holds whole counted 1/T (the group's sum counts it once); plain
 * without a tensor axis. */
double ps_run_tensor_pack_ss(Run *r, int device, int64_t at, const float *x, int64_t len);
/* The parameter ranges device owns (transfer full), or NULL. */
GArray *ps_run_tensor_ranges(Run *r, int device);
/* The largest difference of a replicated weight from tensor rank 0's. */
double ps_run_tensor_divergence(Run *r);
/* Tensor x fsdp: the device's packed weights or gradients, which the fsdp
 * module cuts into blocks, and collective c's place in them; NULL and -1
 * otherwise. */
float *ps_run_tensor_packed(Run *r, int device, gboolean grads);
int64_t ps_run_tensor_packed_off(Run *r, int c);
/* Tensor x fsdp: every device's packed weights into its net (the owned
 * blocks current, the rest as last gathered), before the run's end. */
void ps_run_tensor_sync(Run *r);
/* Tensor x fsdp: packed ranges (consumed) as the net's ranges (transfer
 * full); otherwise packed itself. */
GArray *ps_run_tensor_net_ranges(Run *r, int device, GArray *packed);

/* numerics-sequence.c: a sequence axis's rows.  init records which rows of
 * a row layer's output each device holds (its blocks of the sequence
 * reduce-scatters and all-gathers) and fails (PS_INPUT_ERROR) when they
 * are not whole rows, the same for every such collective; bwd_layer,
 * before a row layer's backward, zeroes the rows of its output gradient
 * the device does not hold.  No-ops without a sequence axis. */
gboolean ps_run_sequence_init(Run *r, GError **error);
void ps_run_sequence_free(Run *r);
void ps_run_sequence_bwd_layer(Run *r, int device, int layer);
/* Device d's blocks of collective c (its ps_pod_coll_block pieces), sorted
 * by offset, empty ones left out (transfer full). */
GArray *ps_run_coll_blocks(Run *r, int c, int d);
/* The device's rank in its tensor x sequence group (sequence-major), which
 * is its member index in the group's collectives and its ring position. */
int ps_run_model_rank(const PsPlan *plan, int d);

/* numerics-ring.c: collective matmul's ring steps (SEND/RECV ops with
 * parts > 0) as a reduce-scatter of the decomposed op's real result: step
 * s sends the block of ring position (rank - s) and adds the one received
 * into the block of (rank - s - 1), so that after the last step a device
 * holds its own block summed over the group, the block the group's
 * all-gathers (and sequence rows) give it.  init fails (PS_INPUT_ERROR)
 * when the group's collectives of a ring's buffer disagree on the blocks
 * or there are none; no-ops without ring steps. */
gboolean ps_run_ring_init(Run *r, GError **error);
void ps_run_ring_free(Run *r);
void ps_run_ring_send(Run *r, int device, const PsOp *op);
void ps_run_ring_recv(Run *r, int device, const PsOp *op);

/* run.c: the step's state, made when first asked for.  (transfer none) */
StepState *ps_run_step_state(Run *r, int64_t step);

/* numerics.c.  init fails with PS_INPUT_ERROR when the data cannot be read;
 * op and coll_buffer are the pod's PsPodNumerics (ctx: the Run). */
gboolean ps_run_numerics_init(Run *r, GError **error);
void ps_run_numerics_free(Run *r);
void ps_run_numerics_op(void *ctx, int device, int64_t step, const PsOp *op);
float *ps_run_numerics_coll_buffer(void *ctx, int device, int c);
/* The device at coordinate 0 along axis and at device's place along every
 * other axis (replica 0's, tensor rank 0's). */
int ps_run_peer0(const Run *r, int device, PsAxis axis);
/* After the run: the losses and the replicas' divergence into s. */
void ps_run_numerics_summarise(Run *r, PsSummary *s);
/* After the run: gathers the trained model into device 0, evaluates it
 * (when the experiment asks) and copies its weights out (opt->keep_params). */
gboolean ps_run_numerics_finish(Run *r, const PsRunOptions *opt, PsSummary *s,
                                GError **error);

/* stats.c: the statistics' share of the pod's reports, and the summary. */
void ps_run_stats_init(Run *r);
void ps_run_stats_free(Run *r);
void ps_run_stats_op_done(Run *r, int device, int64_t step, const PsOp *op, PsTimeCategory c,
                          ps_time_t start, ps_time_t end);
void ps_run_stats_wait(Run *r, int device, int64_t step, PsTimeCategory why, const char *what,
                       ps_time_t start, ps_time_t end);
void ps_run_stats_step_done(Run *r, int device, int64_t step, ps_time_t end);
void ps_run_stats_coll_arrived(Run *r, int64_t step, int last);
void ps_run_stats_coll_done(Run *r, int device, int64_t step, int c, ps_time_t start,
                            ps_time_t end);
void ps_run_stats_summarise(Run *r, PsSummary *s);

/* trace-observer.c: nothing is drawn while r->trace is NULL.  open fails
 * with the trace writer's error; free aborts a trace still open. */
gboolean ps_run_trace_open(Run *r, const char *path, gboolean links, GError **error);
void ps_run_trace_free(Run *r);
void ps_run_trace_op_done(Run *r, int device, int64_t step, const PsOp *op, ps_time_t start,
                          ps_time_t end);
void ps_run_trace_wait(Run *r, int device, const char *what, ps_time_t start, ps_time_t end);
void ps_run_trace_step_done(Run *r, int device, int64_t step, ps_time_t end);
void ps_run_trace_coll_arrived(Run *r, int c, int last, ps_time_t t);
/* the reports only the trace takes, as PsPodObserver's (ctx: the Run) */
void ps_run_trace_infeed_depth(void *ctx, int device, int depth, ps_time_t t);
void ps_run_trace_host_work(void *ctx, int host, PsHostLane lane, const char *what, int device,
                            ps_time_t start, ps_time_t end);
void ps_run_trace_coll_done(void *ctx, int device, int64_t step, int c, ps_time_t start,
                            ps_time_t end);
void ps_run_trace_coll_message(void *ctx, int c, PsCollMsgEvent what, int src, int dst,
                               int64_t round, uint64_t id, ps_time_t t);
void ps_run_trace_message_sent(void *ctx, int src, int dst, int tag, double bytes, ps_time_t t,
                               uint64_t id);
void ps_run_trace_message(void *ctx, int src, int dst, int tag, double bytes, ps_time_t sent,
                          ps_time_t arrived, uint64_t id);

#endif

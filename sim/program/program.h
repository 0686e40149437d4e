/* program.h: the contract between strategies and the executor.  A strategy
 * compiles a model and a batch into a *plan*: one small program of ops per
 * device, run once per step, plus the table of collective instances the
 * programs refer to.  Plain data that can be printed (`podsim describe
 * --program`).  As in XLA's HLO schedule, communication is asynchronous: a
 * COLL_START hands a collective to the network and the core goes on; the
 * matching COLL_DONE waits for it.  Where the compiler puts the done decides
 * how much communication overlaps compute.
 *
 * Every op carries its cost, computed once at compile time (kernel time,
 * FLOPs, HBM bytes), so the executor times ops without knowing what they
 * compute.  Fields that only numerics read (loss scale, example offsets,
 * loss weights) ride along; the executor ignores them.
 *
 * Shared programs.  Devices whose programs differ only in which group's
 * instance of a collective they join (every tensor group runs its own
 * all-reduce of the same layer) share one program when the plan has
 * *slots*: then an op's `coll` names a slot, and device d's instance for
 * slot s is coll_of[s * n_devices + d] (ps_plan_op_coll resolves it; a
 * plan without slots, n_slots 0, names instances directly; slot-major, as
 * the devices of a mesh reach a slot at about the same time).  A plan of 4,096
 * devices then holds one program and a table of ints, not 4,096 programs.
 *
 * Invariant (ps_plan_validate checks it): in every program, each
 * COLL_START c (resolved through the slots, if any) is followed by exactly one COLL_DONE c before the program
 * ends, and the device is a member of c; every collective's members run
 * the same sequence of starts of it (once per step); SENDs from a to b with
 * tag t are as many per step as RECVs at b from a with tag t; each
 * COPY_START t is followed by exactly one COPY_DONE t before the program
 * ends, and no two COPY_STARTs of a program share a tag. */
#ifndef PS_PROGRAM_H
#define PS_PROGRAM_H

#include "collectives/collective.h"

typedef enum {
  PS_OP_INFEED,     /* dequeue one (micro-)batch from the device's infeed queue */
  PS_OP_FWD,        /* forward of layers [first, last] for micro-batch mb */
  PS_OP_BWD,        /* backward of layers [last .. first] for micro-batch mb */
  PS_OP_RECOMPUTE,  /* forward again, in backward, of layers [first, last] */
  PS_OP_COLL_START, /* hand collective instance `coll` to the network */
  PS_OP_COLL_DONE,  /* wait until this device's part of `coll` is complete */
  PS_OP_SEND,       /* `bytes` to device `peer` with `tag`, over ICI */
  PS_OP_RECV,       /* wait for the message from `peer` with `tag` */
  PS_OP_UPDATE,     /* optimizer over params [param_off, +param_len), or a shard */
  PS_OP_HOST_CALL,  /* outside compilation: a round trip to the host */
  PS_OP_OUTFEED,    /* the step's loss and metrics to the host */
  PS_OP_CLIP,       /* gradient clipping by global norm over params
                       [param_off, +param_len): the norm, and with clip_local
                       the scaling of the device's own gradient */
  PS_OP_COPY_START, /* hand a copy of `bytes` between the device's HBM and its
                       host's memory (to_host: up, else down) to PCIe; the core
                       goes on (XLA's host offloading: a copy-start) */
  PS_OP_COPY_DONE,  /* wait until the copy with this `tag` is complete */
  PS_OP_N_KINDS
} PsOpKind;

typedef struct {
  PsOpKind kind;
  int first, last;      /* layer range: FWD/BWD/RECOMPUTE; HOST_CALL: its layer */
  int mb;               /* micro-batch, 0 without pipelining */
  int64_t batch;        /* examples the op processes */
  int64_t example_off;  /* INFEED (and RECV with labels): first example of the
                           global batch it takes */
  int coll;             /* COLL_START/DONE: index in plan->colls; UPDATE: the
                           reduce-scatter whose block this device updates, or -1 */
  int peer, tag;        /* SEND/RECV; COPY_START/DONE: tag names the copy */
  gboolean to_host;     /* COPY_START/DONE: device to host (else host to device) */
  gboolean labels;      /* RECV: the labels of examples [example_off, + batch)
                           arrive with the activations (a pipeline's last stage) */
  int host_call;        /* HOST_CALL: index in the experiment's host_calls */
  int64_t param_off, param_len; /* UPDATE: parameters (floats) it covers */
  double bytes;         /* INFEED/OUTFEED/SEND/COPY_START payload; HOST_CALL: up
                           to the host */
  double bytes_back;    /* HOST_CALL: result back down */
  double host_flops;    /* HOST_CALL: work on the host */
  double loss_weight;   /* OUTFEED: weight of this device's loss in the step's */
  int part, parts;      /* collective matmul: part `part` (1-based) of an op run as
                           `parts` partial ops (FWD/BWD), or the ring step between
                           parts part and part + 1 (SEND/RECV, whose first/last are
                           the op's layers); 0 when not decomposed */
  gboolean ring_bwd;    /* a ring step of a decomposed BWD (else FWD) */
  gboolean ctx_ring;    /* a part or ring step of an op decomposed over the
                           context group (ring attention: its keys and values
                           passed around the group), not the tensor group;
                           peer is relative to the device's place in it */
  gboolean tail;        /* BWD: the weight-gradient kernels of the BWD op before
                           it, run while that op's input gradient is in its
                           collective (their numerics done with that op) */
  gboolean clip_local;  /* CLIP: of the device's own gradient, before the
                           cross-replica reduction (else of the reduced one) */
  gboolean clip_shards; /* CLIP: of the reduced gradient's blocks the device
                           updates (weight-update sharding, a shard mesh's
                           shards): their sum of squares, which an all-reduce
                           adds up; param_len counts them (no range) */
  int update_pass;      /* UPDATE of a layer-wise optimizer's shard (weight-update
                           sharding): 1, its first pass (LAMB's moments, the
                           shard's sums of squares of each layer into NORM from
                           norm_slot, which an all-reduce adds up); 2, its
                           second (the weights, with the layers' whole norms);
                           0, both at once */
  int norm_slot;        /* UPDATE with update_pass: the NORM float of its
                           bucket's first adapted layer's norms */
  /* cost on the core, from the compiler */
  ps_time_t time;       /* kernel time plus launch overhead; 0 for communication */
  double flops;         /* useful FLOPs */
  double mxu_flops;     /* useful matrix FLOPs */
  double hbm_bytes;     /* HBM traffic */
  gboolean memory_bound;
  int kernels;          /* kernels launched (FWD/BWD/RECOMPUTE/UPDATE) */
  double mxu_s, memory_s, overhead_s; /* time split: MXU-bound kernels,
                           HBM/VPU-bound kernels, launches (hw/cost.h) */
  double serial_s;      /* of mxu_s: vector work in series with the products
                           (flash attention's softmax) */
  int64_t act_bytes;    /* activations it leaves live (FWD, RECOMPUTE: > 0) or
                           frees (BWD: < 0) in HBM */
  char name[64];        /* for traces: "fwd dense_1+relu_1" */
} PsOp;

typedef struct {
  int n_ops;
  PsOp *ops;
  int64_t hbm_static_bytes; /* weights, gradients, optimizer slots */
  int64_t hbm_peak_bytes;   /* static plus the peak of live activations */
} PsProgram;

/* Which per-device buffer a collective reads and writes with numerics on:
 * gradients or parameters (offsets in the flat layout of model/net.h),
 * activations or their gradients (a layer's output in the device's
 * current slot, of the examples it holds), or the gradient shards: the
 * device's own blocks of the fsdp reduce-scatters of GRADS, in the order
 * of their starts, each taking ceil(count / fsdp) floats (what a data
 * all-reduce of an fsdp mesh reduces).
 * BN_STATS, BN_GRAD_STATS: a batch-normalization layer's (`layer`)
 * per-channel moments of the device's share of its group's batch, forward
 * (mean, mean square) and backward (means of dy and dy xhat).
 * NORM: the device's sum of squares of the gradient it clips (one float,
 * what a clipping norm's all-reduce adds up). */
typedef enum {
  PS_BUFFER_GRADS,
  PS_BUFFER_PARAMS,
  PS_BUFFER_ACTIVATIONS,
  PS_BUFFER_BN_STATS,
  PS_BUFFER_BN_GRAD_STATS,
  PS_BUFFER_ACT_GRADS,
  PS_BUFFER_GRAD_SHARDS,
  PS_BUFFER_NORM
} PsBufferKind;

/* The axes a plan lays its devices out along (GSPMD's device mesh): data
 * (replicas), stage (pipeline stages), and room for fsdp, tensor,
 * sequence and context sharding. */
typedef enum {
  PS_AXIS_DATA,
  PS_AXIS_STAGE,
  PS_AXIS_FSDP,
  PS_AXIS_TENSOR,
  PS_AXIS_SEQUENCE,
  PS_AXIS_CONTEXT,
  PS_N_AXES
} PsAxis;

/* Parameters (floats, in the flat layout of model/net.h) a device holds. */
typedef struct {
  int64_t off, len;
} PsParamRange;

/* The mesh: each axis's size (0: the plan has no such axis), each
 * device's coordinate along each axis (0 along an axis it lacks), and the
 * parameter ranges each device owns. */
typedef struct {
  int size[PS_N_AXES];
  int *coord;               /* device d, axis a: coord[d * PS_N_AXES + a] (owned) */
  int *n_ranges;            /* per device */
  PsParamRange **ranges;    /* per device (owned) */
} PsMesh;

/* One collective instance: the same collective runs once per step. */
typedef struct {
  PsCollOp op;
  char *algo;           /* a collectives/ table name or "auto" (owned) */
  int n_members;
  int *members;         /* devices in member order (owned) */
  int64_t count;        /* elements per member */
  int elem_bytes;
  PsBufferKind buffer;  /* numerics: elements [offset, offset + count) of it */
  int64_t offset;
  int layer;            /* ACTIVATIONS: whose output (-1: the net's input) */
  PsAxis axis;          /* the mesh axis it communicates along (reports book
                           its time there): PS_AXIS_DATA unless set */
  char name[64];        /* "all-reduce bucket 2 (layers 40..47)" */
} PsPlanColl;

typedef struct {
  int n_devices;            /* devices 0 .. n_devices - 1 run programs */
  int *program_of;          /* device -> index in programs */
  int n_programs;
  PsProgram *programs;      /* devices with identical programs share one */
  int n_colls;
  PsPlanColl *colls;
  int n_slots;              /* 0: ops name instances in colls directly */
  int *coll_of;             /* device d, slot s: coll_of[s * n_devices + d], or -1 (owned) */
  /* what the compiler decided, for reports and numerics (the executor
   * never reads these) */
  PsMesh mesh;
  int micro_batches;
  int *stage_first;         /* stages + 1 entries: stage s runs layers
                               [stage_first[s], stage_first[s + 1]) (owned) */
  int *layer_split;         /* per model layer: how the tensor group splits its
                               weights (PsTensorSplit, model/net-tensor.h);
                               NULL without a tensor axis (owned) */
  float loss_scale;         /* applied to d(loss)/d(logits): 1/replicas for "mean",
                               1/(replicas x micro_batches) in a pipeline */
  int n_buckets;
  char *warning;            /* what the compiler warns of in its layout, or NULL (owned) */
} PsPlan;

/* An empty plan for n_devices, each with program 0; the caller fills in
 * programs and collectives.  (transfer full) */
PsPlan *ps_plan_new(int n_devices);
void ps_plan_free(PsPlan *plan);
const PsProgram *ps_plan_program(const PsPlan *plan, int device);
/* Appends a program (ops copied) and returns its index. */
int ps_plan_add_program(PsPlan *plan, const PsOp *ops, int n_ops);
/* Appends a collective (members and algo copied) and returns its index. */
int ps_plan_add_coll(PsPlan *plan, const PsPlanColl *coll);
/* Declares an axis of `size` devices (>= 1). */
void ps_plan_set_axis(PsPlan *plan, PsAxis axis, int size);
/* Places device along a declared axis at coordinate c (0 <= c < size). */
void ps_plan_set_coord(PsPlan *plan, int device, PsAxis axis, int c);
/* Adds [off, off + len) to the parameters device owns. */
void ps_plan_add_params(PsPlan *plan, int device, int64_t off, int64_t len);
gboolean ps_plan_has_axis(const PsPlan *plan, PsAxis axis);
/* Devices along the axis: 1 when the plan has no such axis. */
int ps_plan_axis_size(const PsPlan *plan, PsAxis axis);
int ps_plan_coord(const PsPlan *plan, int device, PsAxis axis);
const char *ps_axis_name(PsAxis axis);
/* "gradients", "parameters", "activations". */
const char *ps_buffer_name(PsBufferKind kind);

/* The member index of device in collective c, or -1. */
int ps_plan_coll_member(const PsPlan *plan, int c, int device);

/* Gives the plan n_slots slots (>= 1), every device's unresolved (-1),
 * and sets device's instance for slot s to collective c. */
void ps_plan_use_slots(PsPlan *plan, int n_slots);
void ps_plan_set_slot(PsPlan *plan, int device, int slot, int c);
/* The collective instance that op (COLL_START/DONE, or UPDATE's block)
 * names on device: op->coll itself without slots, else through the table;
 * -1 stays -1. */
int ps_plan_op_coll(const PsPlan *plan, int device, const PsOp *op);

/* Each device's collectives with its member index in each, for lookups
 * on plans of thousands of devices and collectives (memory: one pair of
 * ints per membership). */
typedef struct {
  int n_devices;
  int *start;   /* device d's entries are [start[d], start[d + 1]) */
  int *coll;    /* ascending within a device */
  int *member;
} PsPlanMembers;

PsPlanMembers *ps_plan_members_new(const PsPlan *plan);
void ps_plan_members_free(PsPlanMembers *pm);
/* device's member index in collective c, or -1. */
int ps_plan_members_find(const PsPlanMembers *pm, int device, int c);

/* Checks the invariant above; FALSE with a message naming the device, the
 * op and the problem.  (Strategies must produce valid plans; hand-written
 * plans in tests check theirs.) */
gboolean ps_plan_validate(const PsPlan *plan, GError **error);

const char *ps_op_kind_name(PsOpKind kind);
/* One line per op of device's program, with costs; then the collectives it
 * takes part in. */
void ps_plan_describe_device(const PsPlan *plan, int device, GString *out);

#endif

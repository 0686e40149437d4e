/* program.h: what a strategy compiles a model and a batch into: one small
 * program of ops per device, run once per step.  Plain data that can be
 * printed (`podsim describe --program`).
 *
 * Invariant: every device's program begins with INFEED and ends with
 * OUTFEED; FWD ops cover the layers in order and BWD ops in reverse, each
 * layer exactly once per micro-batch; an ALL_REDUCE op appears in the same
 * position on every member of its replica group. */
#ifndef PS_PROGRAM_H
#define PS_PROGRAM_H

#include "io/config.h"

typedef enum {
  PS_OP_INFEED,     /* dequeue one batch from the device's infeed queue */
  PS_OP_FWD,        /* forward of layers [first, last] */
  PS_OP_BWD,        /* backward of layers [last .. first] */
  PS_OP_ALL_REDUCE, /* sum gradients across the replica group */
  PS_OP_UPDATE,     /* apply the optimizer to the device's weights */
  PS_OP_OUTFEED,    /* send the step's loss and metrics to the host */
  PS_OP_HOST_CALL,  /* outside compilation: a round trip to the host */
  PS_OP_N_KINDS
} PsOpKind;

typedef struct {
  PsOpKind kind;
  int first, last;      /* layer range, FWD/BWD */
  int64_t batch;        /* examples the op processes */
  double bytes;         /* INFEED/OUTFEED/ALL_REDUCE payload; HOST_CALL to host */
  double bytes_back;    /* HOST_CALL: result back to the device */
  double host_flops;    /* HOST_CALL: work on the host */
  int host_call;        /* HOST_CALL: index in the experiment's host_calls */
  int group;            /* ALL_REDUCE: replica group id */
  char name[64];        /* for traces: "fwd dense_1+relu_1" */
} PsOp;

typedef struct {
  int device;
  int replica;
  int n_ops;
  PsOp *ops;
} PsProgram;

typedef struct {
  int n_programs;
  PsProgram *programs;  /* one per participating device, by device index */
  int replicas;
  int64_t per_replica_batch;
  float loss_scale;     /* applied to d(loss)/d(logits): 1/replicas for "mean" */
  int optimizer_slots;
} PsPlan;

/* Compiles the experiment's strategy.  Replicate: device r runs replica r
 * of the global batch.  (transfer full) */
PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error);
void ps_plan_free(PsPlan *plan);

const char *ps_op_kind_name(PsOpKind kind);
void ps_program_describe(const PsProgram *program, GString *out);

#endif

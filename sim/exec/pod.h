/* pod.h: the hardware that executes programs: TensorCores (devices) that
 * run their program op by op, hosts that prepare input batches with their
 * CPU workers and push them over PCIe into each device's bounded infeed
 * queue, and the steps_per_run loop the host drives.
 *
 * The pod knows costs, never strategies: it times the ops it is given.
 * Observers are told what happened; they never steer it (numerics run in
 * the op_done callback, before the device's next op starts).
 * Invariant: a device's infeed queue never holds more than its capacity,
 * counting batches still in flight over PCIe, and its outfeed queue never
 * more than its capacity. */
#ifndef PS_POD_H
#define PS_POD_H

#include "engine/engine.h"
#include "hw/network.h"
#include "program/program.h"

typedef enum {
  PS_TIME_COMPUTE,
  PS_TIME_COLLECTIVE,
  PS_TIME_INFEED_STALL,
  PS_TIME_PIPELINE_BUBBLE,
  PS_TIME_HOST,
  PS_TIME_OTHER,
  PS_TIME_N_CATEGORIES
} PsTimeCategory;

const char *ps_time_category_name(PsTimeCategory c);

/* What a host's time goes to, one trace track each. */
typedef enum {
  PS_HOST_INPUT,      /* the input pipeline's workers */
  PS_HOST_PCIE_DOWN,  /* host to device: infeed, host-call results */
  PS_HOST_PCIE_UP,    /* device to host: outfeed, host-call tensors */
  PS_HOST_CALLS,      /* outside-compilation work */
  PS_HOST_N_LANES
} PsHostLane;

const char *ps_host_lane_name(PsHostLane lane);

/* The name of the wait between two steps_per_run loops. */
#define PS_WAIT_HOST_LOOP "host loop"

typedef struct {
  void *ctx;
  /* An op ran on a device from start to end. */
  void (*op_done)(void *ctx, int device, int step, const PsOp *op, ps_time_t start,
                  ps_time_t end);
  /* A device waited; `what` names the wait ("infeed empty", "host loop",
   * "outfeed full"), `why` is its category.  (Waiting for collective peers
   * is part of the ALL_REDUCE op itself.) */
  void (*wait)(void *ctx, int device, int step, PsTimeCategory why, const char *what,
               ps_time_t start, ps_time_t end);
  /* A device finished a step. */
  void (*step_done)(void *ctx, int device, int step, ps_time_t end);
  /* A device's infeed queue depth changed. */
  void (*infeed_depth)(void *ctx, int device, int depth, ps_time_t t);
  /* A host finished a piece of work on one of its lanes (device is -1 when
   * the work is for no device in particular). */
  void (*host_work)(void *ctx, int host, PsHostLane lane, const char *what, int device,
                    ps_time_t start, ps_time_t end);
  /* All members of a collective have arrived, `last` the latest of them
   * (the one the others waited for). */
  void (*collective)(void *ctx, int step, const PsOp *op, int last, ps_time_t t);
  /* The buffer a device contributes to a collective (its gradients), which
   * receives the result; NULL (or no callback) for timing only. */
  float *(*collective_buffer)(void *ctx, int device);
} PsPodObserver;

typedef struct PsPod PsPod;

/* (transfer full); exp and plan must outlive the pod.  With several
 * replicas it builds the interconnect and their all-reduce; fails
 * (PS_INPUT_ERROR) if the experiment's collective algorithm cannot run on
 * the replica group. */
PsPod *ps_pod_new(PsEngine *engine, const PsExperiment *exp, const PsPlan *plan,
                  const PsPodObserver *observer, GError **error);

/* The interconnect, or NULL with a single replica.  (transfer none) */
PsNetwork *ps_pod_network(const PsPod *pod);
/* The all-reduce algorithm in use ("ring", "torus", ...), or NULL. */
const char *ps_pod_collective_algorithm(const PsPod *pod);
void ps_pod_free(PsPod *pod);

/* Schedules the start of the run (hosts begin preparing, the first device
 * loop is launched).  Then ps_engine_run() drives it to the end. */
void ps_pod_start(PsPod *pod);

/* Steps every device has finished. */
int64_t ps_pod_steps_done(const PsPod *pod);

/* Where devices and hosts are: device d is core (d % per_chip) of chip
 * (d / per_chip); chip c is on host (c / chips_per_host). */
int ps_pod_device_chip(const PsPod *pod, int device);
int ps_pod_device_core(const PsPod *pod, int device);
int ps_pod_chip_host(const PsPod *pod, int chip);

#endif

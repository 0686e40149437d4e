/* pod.h: the executor.  It interprets a plan (program/program.h) on the
 * hardware models: TensorCores that run their program op by op, hosts that
 * prepare input batches with their CPU workers and push them over PCIe into
 * each device's bounded infeed queue, the ICI network that carries
 * collectives and point-to-point messages, and the steps_per_run loop the
 * host drives.
 *
 * The pod knows costs, never strategies: it never reads `strategy.*`,
 * replicas or stages.  Everything it needs is in the plan (ops with their
 * compile-time costs, the collective table) and in the hardware (topology,
 * input pipeline, steps).  Numerics plug in through PsPodNumerics (they
 * own the buffers collectives reduce); observers are told what happened
 * and never steer it.
 *
 * Time categories come from what a device waits for: an empty infeed
 * queue is infeed_stall, a COLL_DONE whose collective is not finished is
 * collective (exposed communication only), a RECV and a pipeline's wait
 * at a loop's end for the host's other devices are pipeline_bubble, the
 * host loop (for a pipeline its relaunch only), a full outfeed queue,
 * outfeed and host calls are host;
 * FWD/BWD/RECOMPUTE/UPDATE are compute; the INFEED dequeue is other.
 *
 * Faults (PsPodConfig.faults, what-if knobs).  A straggler device's
 * compute ops (FWD/BWD/RECOMPUTE/UPDATE) take `slowdown` times their
 * compile-time cost, and every step of it begins with `delay_s` of
 * nothing else, reported as a wait named PS_WAIT_STRAGGLER in category
 * compute (the device is busy being slow, not waiting for anyone).  A slow
 * host's CPU work (its input workers' per-example cost and outside
 * compilation) takes `slowdown` times as long; its PCIe and loop overhead
 * do not change.  Link faults are applied to the network before the
 * collectives are built (so "auto" predicts on the degraded network).
 * Invariant: depth + inflight <= capacity for every device's infeed queue,
 * and every moment of a device's time is in exactly one op or one wait. */
#ifndef PS_POD_H
#define PS_POD_H

#include "collectives/collective.h"
#include "engine/engine.h"
#include "hw/network.h"
#include "io/config.h"
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

/* The name of the wait between two steps_per_run loops once every device
 * of the host has arrived: the host's relaunch (category host). */
#define PS_WAIT_HOST_LOOP "host loop"
/* The name of a pipeline device's wait at a loop's end for the host's
 * other devices to arrive (the drain; category pipeline_bubble). */
#define PS_WAIT_LOOP_DRAIN "loop drain"
/* The name of a straggler's per-step delay (category compute). */
#define PS_WAIT_STRAGGLER "straggler delay"

typedef struct {
  void *ctx;
  /* An op ran on a device from start to end (zero-length ops included). */
  void (*op_done)(void *ctx, int device, int64_t step, const PsOp *op, PsTimeCategory cat,
                  ps_time_t start, ps_time_t end);
  /* A device waited; `what` names the wait ("infeed empty", "host loop",
   * "loop drain", "outfeed full", a collective's or a message's name, or
   * PS_WAIT_STRAGGLER, the one wait of category compute). */
  void (*wait)(void *ctx, int device, int64_t step, PsTimeCategory why, const char *what,
               ps_time_t start, ps_time_t end);
  /* A device finished a step. */
  void (*step_done)(void *ctx, int device, int64_t step, ps_time_t end);
  /* A device's infeed queue depth changed. */
  void (*infeed_depth)(void *ctx, int device, int depth, ps_time_t t);
  /* A host finished a piece of work on one of its lanes (device is -1 when
   * the work is for no device in particular). */
  void (*host_work)(void *ctx, int host, PsHostLane lane, const char *what, int device,
                    ps_time_t start, ps_time_t end);
  /* Every member of collective c has started this step's round; `last` is
   * the device that started last (the one the others' data waited for). */
  void (*coll_arrived)(void *ctx, int64_t step, int c, int last, ps_time_t t);
  /* Device's part of collective c ran from its COLL_START to completion. */
  void (*coll_done)(void *ctx, int device, int64_t step, int c, ps_time_t start,
                    ps_time_t end);
  /* A SEND's message from src leaves now, as message id (traces). */
  void (*message_sent)(void *ctx, int src, int dst, int tag, double bytes, ps_time_t t,
                       uint64_t id);
  /* A SEND's message from src reached dst; id is the network's message
   * id. */
  void (*message)(void *ctx, int src, int dst, int tag, double bytes, ps_time_t sent,
                  ps_time_t arrived, uint64_t id);
  /* Set for traces that draw messages (the network traced): SEND messages
   * go by ps_network_send_chained, and every message of collective c
   * (device src's round `round` to device dst) is reported when sent and
   * when it has wholly arrived at t, so that the observer draws each
   * flow's ends (collective.h: ps_collective_set_message_observer). */
  void (*coll_message)(void *ctx, int c, PsCollMsgEvent what, int src, int dst,
                       int64_t round, uint64_t id, ps_time_t t);
} PsPodObserver;

/* The data plane: real arithmetic riding on the ops. */
typedef struct {
  void *ctx;
  /* Runs when an op ends on a device, before the device's next op starts. */
  void (*op)(void *ctx, int device, int64_t step, const PsOp *op);
  /* The buffer (plan->colls[c].count floats) that device contributes to
   * collective c and that receives its result; NULL for timing only.
   * (transfer none) valid until the device's COLL_DONE of c. */
  float *(*coll_buffer)(void *ctx, int device, int c);
} PsPodNumerics;

typedef struct PsPod PsPod;

/* What the pod needs besides the plan: the hardware and the run's shape,
 * never the experiment (the caller builds it; run.h's ps_run_pod_config
 * from an experiment).  Every pointer is (transfer none) and must outlive
 * the pod. */
typedef struct {
  const char *file;                     /* named in error messages; NULL: "<pod>" */
  const PsTopology *topology;           /* checked (io/config.h) */
  const PsInputConfig *input;           /* queue capacities, host cost, workers */
  int64_t steps;                        /* every device runs this many */
  int64_t steps_per_run;                /* the host loop's length */
  const PsCollectiveConfig *collective; /* chunk size, in-flight limit */
  const PsFaultsConfig *faults;         /* all counts 0 for none */
} PsPodConfig;

/* (transfer full); what cfg points to and plan must outlive the pod.
 * Builds the network (always: PCIe is part of it) and one collective per
 * plan collective.  Fails with PS_INPUT_ERROR if the plan is invalid, uses
 * more devices than the topology has, a collective's algorithm cannot run
 * on its group, a straggler is not a device of the plan, or a link fault
 * names no link or cuts chips off from each other
 * (ps_geometry_check_link_faults).  observer and numerics may be NULL. */
PsPod *ps_pod_new(PsEngine *engine, const PsPodConfig *cfg, const PsPlan *plan,
                  const PsPodObserver *observer, const PsPodNumerics *numerics,
                  GError **error);
void ps_pod_free(PsPod *pod);

/* The interconnect.  (transfer none) */
PsNetwork *ps_pod_network(const PsPod *pod);
/* The algorithm collective c runs ("ring", "torus", ...). */
const char *ps_pod_coll_algorithm(const PsPod *pod, int c);
/* Piece `piece` of the elements of collective c that are device's own
 * block (the shard a reduce-scatter leaves it, relative to the
 * collective's offset); returns the number of pieces
 * (ps_collective_block_piece). */
int ps_pod_coll_block(const PsPod *pod, int c, int device, int piece, int64_t *off,
                      int64_t *len);

/* Schedules the start of the run (hosts begin preparing, the first device
 * loop is launched).  Then ps_engine_run() drives it to the end. */
void ps_pod_start(PsPod *pod);

/* Steps every device has finished. */
int64_t ps_pod_steps_done(const PsPod *pod);
/* After the engine ran dry: FALSE if some device did not finish every
 * step (a plan that deadlocks), naming the first stuck device and op. */
gboolean ps_pod_check_finished(const PsPod *pod, GError **error);

/* Where devices and hosts are, as the slice's geometry numbers them
 * (hw/topology.h): device d is core (d % per_chip) of chip (d / per_chip);
 * chip c is on the host whose tray holds it. */
int ps_pod_device_chip(const PsPod *pod, int device);
int ps_pod_device_core(const PsPod *pod, int device);
int ps_pod_chip_host(const PsPod *pod, int chip);

#endif

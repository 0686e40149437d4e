/* pod.c: devices, hosts and infeed queues as timed events (see pod.h).
 *
 * A device runs its program one op at a time: the op's cost comes from the
 * roofline (hw/cost.h) and an OP_DONE event ends it.  INFEED takes a batch
 * from the device's queue or stalls until one arrives.  A host prepares
 * batches with its workers (prefetch buffer), then sends them over its one
 * PCIe link to its devices in turn, one batch per local device, blocking
 * while the next device's queue is full, as TPUStrategy's per-host enqueue
 * loop does.  Every steps_per_run steps the device loop returns to the host,
 * which relaunches it after a round trip.
 * Each direction of a host's PCIe carries one transfer at a time, first
 * come first served; infeed batches go down only when nothing else waits.
 * An OUTFEED op queues the step's outputs for the host (blocking only when
 * the outfeed queue is full); a HOST_CALL op sends a tensor up, lets the
 * host compute on one CPU thread, and waits for the result to come down.
 * Invariant: depth + inflight <= capacity for every device, and every
 * moment of a device's time is in exactly one op or one wait. */
#include "exec/pod.h"

#include "collectives/collective.h"
#include "hw/cost.h"

typedef struct {
  PsPod *pod;
  int index;
  const PsProgram *prog;
  const ps_time_t *cost; /* per op of prog: FWD/BWD/UPDATE time, computed once */
  int host;
  int pc;
  int64_t step;
  int depth, inflight, capacity;
  int out_depth;
  gboolean waiting_infeed, waiting_outfeed;
  ps_time_t wait_start;
  ps_time_t op_start;
} Device;

typedef enum { XFER_INFEED, XFER_OUTFEED, XFER_CALL_UP, XFER_CALL_DOWN } XferKind;

typedef struct {
  XferKind kind;
  int device;
  double bytes;
} Xfer;

/* One direction of a host's PCIe: one transfer at a time, FIFO. */
typedef struct {
  gboolean busy;
  ps_time_t start;
  Xfer cur;
  GQueue pending; /* Xfer * */
} PcieLink;

typedef struct {
  int index;
  GArray *devs; /* int: local device indices */
  int rr;
  int64_t to_prepare;
  int prepared;
  gboolean prep_busy;
  ps_time_t prep_start;
  PcieLink down, up;
  int loop_arrived;
} Host;

struct PsPod {
  PsEngine *engine;
  const PsExperiment *exp;
  const PsPlan *plan;
  PsPodObserver obs;
  Device *devices;
  int n_devices;
  Host *hosts;
  int n_hosts;
  GPtrArray *costs;     /* owned ps_time_t arrays, shared by identical programs */
  int per_chip;
  int64_t steps_done;
  /* gradients cross the interconnect: one all-reduce over the replicas,
   * reused step after step (NULL with one replica) */
  PsNetwork *net;
  PsCollective *allreduce;
  int coll_arrived;     /* replicas at the current step's all-reduce */
  uint32_t ev_op_done, ev_prep_done, ev_pcie_done, ev_loop_start, ev_call_done;
};

const char *ps_time_category_name(PsTimeCategory c)
{
  static const char *const names[PS_TIME_N_CATEGORIES] = {
      "compute", "collective", "infeed_stall", "pipeline_bubble", "host", "other"};
  g_return_val_if_fail(c < PS_TIME_N_CATEGORIES, "?");
  return names[c];
}

const char *ps_host_lane_name(PsHostLane lane)
{
  static const char *const names[PS_HOST_N_LANES] = {"input pipeline", "pcie to devices",
                                                     "pcie from devices", "outside compilation"};
  g_return_val_if_fail(lane < PS_HOST_N_LANES, "?");
  return names[lane];
}

int ps_pod_device_chip(const PsPod *pod, int device) { return device / pod->per_chip; }
int ps_pod_device_core(const PsPod *pod, int device) { return device % pod->per_chip; }
int ps_pod_chip_host(const PsPod *pod, int chip)
{
  return chip / pod->exp->topology->chips_per_host;
}
int64_t ps_pod_steps_done(const PsPod *pod) { return pod->steps_done; }

static ps_time_t now(const PsPod *pod) { return ps_engine_now(pod->engine); }

static void run_op(PsPod *pod, Device *d);
static void host_try_transfer(PsPod *pod, Host *h);

/* ---- host: input pipeline and PCIe ---------------------------------- */

static void host_prepare_maybe(PsPod *pod, Host *h)
{
  const PsInputConfig *in = &pod->exp->input;
  if (h->prep_busy || h->to_prepare == 0 || h->prepared >= in->prefetch)
    return;
  /* Workers process examples continuously, across batch boundaries, as a
   * parallel map does: a batch of b takes b x cost / workers. */
  double b = (double)pod->plan->per_replica_batch;
  h->prep_busy = TRUE;
  h->prep_start = now(pod);
  ps_engine_after(pod->engine, ps_time_from_s(b * in->host_cost_per_example_s / in->workers),
                  pod->ev_prep_done, (uint32_t)h->index, 0);
}

static void on_prep_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  h->prep_busy = FALSE;
  h->prepared++;
  h->to_prepare--;
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, h->index, PS_HOST_INPUT, "prepare batch", -1, h->prep_start,
                       now(pod));
  host_try_transfer(pod, h);
  host_prepare_maybe(pod, h);
}

static void link_start(PsPod *pod, Host *h, PcieLink *link, Xfer x)
{
  link->busy = TRUE;
  link->start = now(pod);
  link->cur = x;
  ps_engine_after(pod->engine, ps_cost_pcie(pod->exp->topology, x.bytes), pod->ev_pcie_done,
                  (uint32_t)h->index, link == &h->up);
}

static void link_submit(PsPod *pod, Host *h, PcieLink *link, XferKind kind, int device,
                        double bytes)
{
  Xfer x = {kind, device, bytes};
  if (!link->busy) {
    link_start(pod, h, link, x);
    return;
  }
  Xfer *q = g_new(Xfer, 1);
  *q = x;
  g_queue_push_tail(&link->pending, q);
}

static void host_try_transfer(PsPod *pod, Host *h)
{
  if (h->down.busy || !g_queue_is_empty(&h->down.pending) || h->prepared == 0)
    return;
  Device *d = &pod->devices[g_array_index(h->devs, int, h->rr)];
  if (d->depth + d->inflight >= d->capacity)
    return; /* the enqueue blocks on this device's full queue */
  h->prepared--;
  d->inflight++;
  link_start(pod, h, &h->down, (Xfer){XFER_INFEED, d->index, d->prog->ops[0].bytes});
  host_prepare_maybe(pod, h);
}

static void finish_op_after(PsPod *pod, Device *d, ps_time_t dt)
{
  d->op_start = now(pod);
  ps_engine_after(pod->engine, dt, pod->ev_op_done, (uint32_t)d->index, 0);
}

static void set_depth(PsPod *pod, Device *d, int delta)
{
  d->depth += delta;
  g_assert(d->depth >= 0 && d->depth + d->inflight <= d->capacity);
  if (pod->obs.infeed_depth)
    pod->obs.infeed_depth(pod->obs.ctx, d->index, d->depth, now(pod));
}

static void outfeed_enqueue(PsPod *pod, Device *d, const PsOp *op)
{
  d->out_depth++;
  g_assert(d->out_depth <= pod->exp->input.outfeed_capacity);
  link_submit(pod, &pod->hosts[d->host], &pod->hosts[d->host].up, XFER_OUTFEED, d->index,
              op->bytes);
  finish_op_after(pod, d, ps_time_from_s(pod->exp->topology->op_overhead_s));
}

/* One CPU thread's share of the host's FLOP rate. */
static ps_time_t host_call_time(const PsPod *pod, const PsOp *op)
{
  const PsTopology *t = pod->exp->topology;
  return ps_time_from_s(op->host_flops / (t->cpu_flops / t->cpu_threads));
}

static void transfer_done(PsPod *pod, Host *h, const Xfer *x, ps_time_t start)
{
  Device *d = &pod->devices[x->device];
  static const char *const what[] = {"infeed batch", "outfeed", "host call: tensor up",
                                     "host call: result down"};
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, h->index,
                       x->kind == XFER_INFEED || x->kind == XFER_CALL_DOWN ? PS_HOST_PCIE_DOWN
                                                                           : PS_HOST_PCIE_UP,
                       what[x->kind], d->index, start, now(pod));
  switch (x->kind) {
  case XFER_INFEED:
    d->inflight--;
    set_depth(pod, d, +1);
    h->rr = (h->rr + 1) % (int)h->devs->len;
    if (d->waiting_infeed) {
      d->waiting_infeed = FALSE;
      if (pod->obs.wait)
        pod->obs.wait(pod->obs.ctx, d->index, (int)d->step, PS_TIME_INFEED_STALL, "infeed empty",
                      d->wait_start,
                      now(pod));
      set_depth(pod, d, -1);
      finish_op_after(pod, d, ps_time_from_s(pod->exp->topology->op_overhead_s));
    }
    break;
  case XFER_OUTFEED: /* the host drains it */
    d->out_depth--;
    if (d->waiting_outfeed) {
      d->waiting_outfeed = FALSE;
      if (pod->obs.wait)
        pod->obs.wait(pod->obs.ctx, d->index, (int)d->step, PS_TIME_HOST, "outfeed full",
                      d->wait_start, now(pod));
      outfeed_enqueue(pod, d, &d->prog->ops[d->pc]);
    }
    break;
  case XFER_CALL_UP:
    ps_engine_after(pod->engine, host_call_time(pod, &d->prog->ops[d->pc]), pod->ev_call_done,
                    (uint32_t)h->index, (uint64_t)d->index);
    break;
  case XFER_CALL_DOWN: /* the op ends; op_start was set when the call began */
    ps_engine_after(pod->engine, 0, pod->ev_op_done, (uint32_t)d->index, 0);
    break;
  }
}

static void on_pcie_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  PcieLink *link = ev->arg.u ? &h->up : &h->down;
  Xfer x = link->cur;
  ps_time_t start = link->start;
  link->busy = FALSE;
  Xfer *next = g_queue_pop_head(&link->pending);
  if (next) {
    link_start(pod, h, link, *next);
    g_free(next);
  }
  transfer_done(pod, h, &x, start);
  host_try_transfer(pod, h);
}

static void on_call_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  Device *d = &pod->devices[ev->arg.u];
  const PsOp *op = &d->prog->ops[d->pc];
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, h->index, PS_HOST_CALLS, op->name, d->index,
                       now(pod) - host_call_time(pod, op), now(pod));
  link_submit(pod, h, &h->down, XFER_CALL_DOWN, d->index, op->bytes_back);
}

/* ---- host: the steps_per_run loop ----------------------------------- */

static void loop_arrive(PsPod *pod, Device *d)
{
  Host *h = &pod->hosts[d->host];
  d->wait_start = now(pod);
  if (++h->loop_arrived == (int)h->devs->len) {
    h->loop_arrived = 0;
    ps_engine_after(pod->engine, ps_time_from_s(pod->exp->topology->loop_overhead_s),
                    pod->ev_loop_start, (uint32_t)h->index, 0);
  }
}

static void on_loop_start(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  for (guint i = 0; i < h->devs->len; i++) {
    Device *d = &pod->devices[g_array_index(h->devs, int, i)];
    if (pod->obs.wait)
      pod->obs.wait(pod->obs.ctx, d->index, (int)d->step, PS_TIME_HOST, PS_WAIT_HOST_LOOP,
                    d->wait_start, now(pod));
    run_op(pod, d);
  }
}

/* ---- devices -------------------------------------------------------- */

/* A replica's sum is in its buffer: its ALL_REDUCE op ends. */
static void on_allreduce_done(void *ctx, int member, ps_time_t t)
{
  Device *d = ctx;
  ps_engine_after(d->pod->engine, 0, d->pod->ev_op_done, (uint32_t)d->index, 0);
}

/* Replica d reaches the all-reduce: its sends begin now; the op lasts until
 * its own result is complete, which includes waiting for late peers' data.
 * The last replica to arrive is the one the step waited for. */
static void collective_arrive(PsPod *pod, Device *d, const PsOp *op)
{
  d->op_start = now(pod);
  if (++pod->coll_arrived == pod->plan->replicas) {
    pod->coll_arrived = 0;
    if (pod->obs.collective)
      pod->obs.collective(pod->obs.ctx, (int)d->step, op, d->index, now(pod));
  }
  float *buf = pod->obs.collective_buffer ? pod->obs.collective_buffer(pod->obs.ctx, d->index)
                                          : NULL;
  ps_collective_arrive(pod->allreduce, d->prog->replica, buf, on_allreduce_done, d);
}

static void run_op(PsPod *pod, Device *d)
{
  const PsExperiment *exp = pod->exp;
  const PsTopology *topo = exp->topology;
  const PsOp *op = &d->prog->ops[d->pc];
  switch (op->kind) {
  case PS_OP_INFEED:
    if (d->depth == 0) {
      d->waiting_infeed = TRUE;
      d->wait_start = now(pod);
      return;
    }
    set_depth(pod, d, -1);
    host_try_transfer(pod, &pod->hosts[d->host]);
    finish_op_after(pod, d, ps_time_from_s(topo->op_overhead_s));
    return;
  case PS_OP_FWD:
  case PS_OP_BWD:
  case PS_OP_UPDATE:
    finish_op_after(pod, d, d->cost[d->pc]);
    return;
  case PS_OP_OUTFEED:
    if (d->out_depth >= exp->input.outfeed_capacity) {
      d->waiting_outfeed = TRUE;
      d->wait_start = now(pod);
      return;
    }
    outfeed_enqueue(pod, d, op);
    return;
  case PS_OP_HOST_CALL:
    d->op_start = now(pod);
    link_submit(pod, &pod->hosts[d->host], &pod->hosts[d->host].up, XFER_CALL_UP, d->index,
                op->bytes);
    return;
  case PS_OP_ALL_REDUCE:
    collective_arrive(pod, d, op);
    return;
  case PS_OP_N_KINDS:
    break;
  }
  g_assert_not_reached();
}

static void on_op_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Device *d = &pod->devices[ev->target];
  const PsOp *op = &d->prog->ops[d->pc];
  if (pod->obs.op_done)
    pod->obs.op_done(pod->obs.ctx, d->index, (int)d->step, op, d->op_start, now(pod));
  if (++d->pc < d->prog->n_ops) {
    run_op(pod, d);
    return;
  }
  d->pc = 0;
  if (pod->obs.step_done)
    pod->obs.step_done(pod->obs.ctx, d->index, (int)d->step, now(pod));
  d->step++;
  if (d == &pod->devices[0])
    pod->steps_done = d->step;
  if (d->step == pod->exp->steps)
    return;
  if (d->step % pod->exp->steps_per_run == 0)
    loop_arrive(pod, d);
  else
    run_op(pod, d);
}

/* The fixed cost of each compute op of a program. */
static ps_time_t *program_costs(const PsPod *pod, const PsProgram *p)
{
  const PsExperiment *exp = pod->exp;
  ps_time_t *cost = g_new0(ps_time_t, p->n_ops);
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    PsOpCost c;
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD) {
      ps_cost_layers(exp->topology, exp->model, op->first, op->last, op->batch,
                     exp->numerics.precision, exp->fuse_elementwise, op->kind == PS_OP_BWD, &c);
      cost[i] = c.time;
    } else if (op->kind == PS_OP_UPDATE) {
      ps_cost_update(exp->topology, exp->model->params, pod->plan->optimizer_slots, &c);
      cost[i] = c.time;
    }
  }
  return cost;
}

/* Programs whose compute ops cost the same (replicas of one model). */
static gboolean same_costs(const PsProgram *a, const PsProgram *b)
{
  if (a->n_ops != b->n_ops)
    return FALSE;
  for (int i = 0; i < a->n_ops; i++) {
    const PsOp *x = &a->ops[i], *y = &b->ops[i];
    if (x->kind != y->kind || x->first != y->first || x->last != y->last || x->batch != y->batch)
      return FALSE;
  }
  return TRUE;
}

/* The interconnect and the replicas' all-reduce, when there are several. */
static gboolean build_collective(PsPod *pod, GError **error)
{
  const PsExperiment *exp = pod->exp;
  const PsProgram *p0 = &pod->plan->programs[0];
  const PsOp *ar = NULL;
  for (int i = 0; i < p0->n_ops; i++)
    if (p0->ops[i].kind == PS_OP_ALL_REDUCE)
      ar = &p0->ops[i];
  if (!ar)
    return TRUE;
  pod->net = ps_network_new(pod->engine, exp->topology, exp->collective.chunk_bytes);
  int *members = g_new(int, pod->plan->replicas);
  for (int r = 0; r < pod->plan->replicas; r++)
    members[r] = pod->plan->programs[r].device;
  /* gradients are float32: count them, so numerics can ride along */
  PsCollSpec spec = {.op = PS_COLL_ALL_REDUCE, .algo = exp->collective.algorithm,
                     .devices = members, .n_members = pod->plan->replicas,
                     .count = (int64_t)(ar->bytes / 4), .elem_bytes = 4};
  GError *err = NULL;
  pod->allreduce = ps_collective_new(pod->net, &spec, &err);
  g_free(members);
  if (!pod->allreduce) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: collective.algorithm: %s",
                exp->file, err->message);
    g_error_free(err);
    return FALSE;
  }
  return TRUE;
}

PsNetwork *ps_pod_network(const PsPod *pod)
{
  return pod->net;
}

const char *ps_pod_collective_algorithm(const PsPod *pod)
{
  return pod->allreduce ? ps_collective_algo(pod->allreduce) : NULL;
}

PsPod *ps_pod_new(PsEngine *engine, const PsExperiment *exp, const PsPlan *plan,
                  const PsPodObserver *observer, GError **error)
{
  PsPod *pod = g_new0(PsPod, 1);
  pod->engine = engine;
  pod->exp = exp;
  pod->plan = plan;
  if (observer)
    pod->obs = *observer;
  pod->per_chip = ps_topology_devices_per_chip(exp->topology);
  pod->n_devices = plan->n_programs;
  pod->devices = g_new0(Device, pod->n_devices);
  pod->costs = g_ptr_array_new_with_free_func(g_free);
  pod->n_hosts = ps_topology_hosts(exp->topology);
  pod->hosts = g_new0(Host, pod->n_hosts);
  for (int i = 0; i < pod->n_hosts; i++) {
    pod->hosts[i].index = i;
    pod->hosts[i].devs = g_array_new(FALSE, FALSE, sizeof(int));
  }
  for (int i = 0; i < pod->n_devices; i++) {
    Device *d = &pod->devices[i];
    /* programs are indexed by device (PsPlan), so events target d->index */
    g_assert(plan->programs[i].device == i);
    d->pod = pod;
    d->index = i;
    d->prog = &plan->programs[i];
    d->capacity = exp->input.infeed_capacity;
    if (i > 0 && same_costs(&plan->programs[i], pod->devices[i - 1].prog)) {
      d->cost = pod->devices[i - 1].cost;
    } else {
      d->cost = program_costs(pod, &plan->programs[i]);
      g_ptr_array_add(pod->costs, (gpointer)d->cost);
    }
    d->host = ps_pod_chip_host(pod, ps_pod_device_chip(pod, d->index));
    g_assert(d->host < pod->n_hosts);
    g_array_append_val(pod->hosts[d->host].devs, i);
  }
  for (int i = 0; i < pod->n_hosts; i++)
    pod->hosts[i].to_prepare = exp->steps * (int64_t)pod->hosts[i].devs->len;
  pod->ev_op_done = ps_engine_register(engine, "op-done", on_op_done, pod);
  pod->ev_prep_done = ps_engine_register(engine, "prep-done", on_prep_done, pod);
  pod->ev_pcie_done = ps_engine_register(engine, "pcie-done", on_pcie_done, pod);
  pod->ev_loop_start = ps_engine_register(engine, "loop-start", on_loop_start, pod);
  pod->ev_call_done = ps_engine_register(engine, "host-call-done", on_call_done, pod);
  if (!build_collective(pod, error)) {
    ps_pod_free(pod);
    return NULL;
  }
  return pod;
}

void ps_pod_free(PsPod *pod)
{
  if (!pod)
    return;
  for (int i = 0; i < pod->n_hosts; i++) {
    g_array_free(pod->hosts[i].devs, TRUE);
    g_queue_clear_full(&pod->hosts[i].down.pending, g_free);
    g_queue_clear_full(&pod->hosts[i].up.pending, g_free);
  }
  if (pod->allreduce)
    ps_collective_free(pod->allreduce);
  if (pod->net)
    ps_network_free(pod->net);
  g_ptr_array_free(pod->costs, TRUE);
  g_free(pod->hosts);
  g_free(pod->devices);
  g_free(pod);
}

void ps_pod_start(PsPod *pod)
{
  for (int i = 0; i < pod->n_hosts; i++) {
    Host *h = &pod->hosts[i];
    if (h->devs->len == 0)
      continue;
    host_prepare_maybe(pod, h);
    /* the host launches the first device loop */
    for (guint k = 0; k < h->devs->len; k++)
      pod->devices[g_array_index(h->devs, int, k)].wait_start = 0;
    ps_engine_after(pod->engine, ps_time_from_s(pod->exp->topology->loop_overhead_s),
                    pod->ev_loop_start, (uint32_t)i, 0);
  }
}

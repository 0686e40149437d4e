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
 * Invariant: depth + inflight <= capacity for every device, and every
 * moment of a device's time is in exactly one op or one wait. */
#include "hw/pod.h"

#include "hw/cost.h"

typedef struct {
  int index;
  const PsProgram *prog;
  int host;
  int pc;
  int64_t step;
  int depth, inflight, capacity;
  gboolean waiting_infeed;
  ps_time_t wait_start;
  ps_time_t op_start;
} Device;

typedef struct {
  int index;
  GArray *devs; /* int: local device indices */
  int rr;
  int64_t to_prepare;
  int prepared;
  gboolean prep_busy;
  ps_time_t prep_start;
  gboolean pcie_busy;
  ps_time_t pcie_start;
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
  int per_chip;
  int64_t steps_done;
  /* the one collective in flight: all replicas wait for each other */
  int coll_arrived;
  GArray *coll_waiting; /* int device */
  uint32_t ev_op_done, ev_prep_done, ev_pcie_done, ev_loop_start;
};

const char *ps_time_category_name(PsTimeCategory c)
{
  static const char *const names[PS_TIME_N_CATEGORIES] = {
      "compute", "collective", "infeed_stall", "pipeline_bubble", "host", "other"};
  g_return_val_if_fail(c < PS_TIME_N_CATEGORIES, "?");
  return names[c];
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
  int64_t b = pod->plan->per_replica_batch;
  /* each worker thread handles whole examples */
  int64_t rounds = (b + in->workers - 1) / in->workers;
  h->prep_busy = TRUE;
  h->prep_start = now(pod);
  ps_engine_after(pod->engine, ps_time_from_s((double)rounds * in->host_cost_per_example_s),
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
    pod->obs.host_work(pod->obs.ctx, h->index, "prepare batch", -1, h->prep_start, now(pod));
  host_try_transfer(pod, h);
  host_prepare_maybe(pod, h);
}

static void host_try_transfer(PsPod *pod, Host *h)
{
  if (h->pcie_busy || h->prepared == 0)
    return;
  Device *d = &pod->devices[g_array_index(h->devs, int, h->rr)];
  if (d->depth + d->inflight >= d->capacity)
    return; /* the enqueue blocks on this device's full queue */
  h->prepared--;
  d->inflight++;
  h->pcie_busy = TRUE;
  h->pcie_start = now(pod);
  double bytes = d->prog->ops[0].bytes;
  ps_engine_after(pod->engine, ps_cost_pcie(pod->exp->topology, bytes), pod->ev_pcie_done,
                  (uint32_t)h->index, (uint64_t)d->index);
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

static void on_pcie_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  Device *d = &pod->devices[ev->arg.u];
  h->pcie_busy = FALSE;
  d->inflight--;
  set_depth(pod, d, +1);
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, h->index, "pcie to device", d->index, h->pcie_start,
                       now(pod));
  h->rr = (h->rr + 1) % (int)h->devs->len;
  if (d->waiting_infeed) {
    d->waiting_infeed = FALSE;
    if (pod->obs.wait)
      pod->obs.wait(pod->obs.ctx, d->index, (int)d->step, PS_TIME_INFEED_STALL, d->wait_start,
                    now(pod));
    set_depth(pod, d, -1);
    finish_op_after(pod, d, ps_time_from_s(pod->exp->topology->op_overhead_s));
  }
  host_try_transfer(pod, h);
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
      pod->obs.wait(pod->obs.ctx, d->index, (int)d->step, PS_TIME_HOST, d->wait_start, now(pod));
    run_op(pod, d);
  }
}

/* ---- devices -------------------------------------------------------- */

/* Until the interconnect model lands, an all-reduce costs the alpha-beta
 * ring closed form 2(N-1)(alpha + S/(N B)) once every replica has arrived. */
static ps_time_t collective_time(const PsPod *pod, const PsOp *op)
{
  const PsTopology *t = pod->exp->topology;
  double n = pod->plan->replicas;
  return ps_time_from_s(2.0 * (n - 1.0) *
                        (t->ici_latency_s + op->bytes / (n * t->ici_bandwidth_Bps)));
}

static void collective_arrive(PsPod *pod, Device *d, const PsOp *op)
{
  d->wait_start = now(pod);
  g_array_append_val(pod->coll_waiting, d->index);
  if (++pod->coll_arrived < pod->plan->replicas)
    return;
  if (pod->obs.collective)
    pod->obs.collective(pod->obs.ctx, (int)d->step, op, now(pod));
  ps_time_t dt = collective_time(pod, op);
  for (guint i = 0; i < pod->coll_waiting->len; i++) {
    Device *w = &pod->devices[g_array_index(pod->coll_waiting, int, i)];
    if (pod->obs.wait && w->wait_start < now(pod))
      pod->obs.wait(pod->obs.ctx, w->index, (int)w->step, PS_TIME_COLLECTIVE, w->wait_start,
                    now(pod));
    finish_op_after(pod, w, dt);
  }
  g_array_set_size(pod->coll_waiting, 0);
  pod->coll_arrived = 0;
}

static void run_op(PsPod *pod, Device *d)
{
  const PsExperiment *exp = pod->exp;
  const PsTopology *topo = exp->topology;
  const PsOp *op = &d->prog->ops[d->pc];
  PsOpCost cost;
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
    ps_cost_layers(topo, exp->model, op->first, op->last, op->batch, exp->numerics.precision,
                   exp->fuse_elementwise, op->kind == PS_OP_BWD, &cost);
    finish_op_after(pod, d, cost.time);
    return;
  case PS_OP_UPDATE:
    ps_cost_update(topo, exp->model->params, pod->plan->optimizer_slots, &cost);
    finish_op_after(pod, d, cost.time);
    return;
  case PS_OP_OUTFEED:
    finish_op_after(pod, d,
                    ps_cost_pcie(topo, op->bytes) + ps_time_from_s(topo->op_overhead_s));
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

PsPod *ps_pod_new(PsEngine *engine, const PsExperiment *exp, const PsPlan *plan,
                  const PsPodObserver *observer)
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
    d->index = i;
    d->prog = &plan->programs[i];
    d->capacity = exp->input.infeed_capacity;
    d->host = ps_pod_chip_host(pod, ps_pod_device_chip(pod, d->index));
    g_assert(d->host < pod->n_hosts);
    g_array_append_val(pod->hosts[d->host].devs, i);
  }
  for (int i = 0; i < pod->n_hosts; i++)
    pod->hosts[i].to_prepare = exp->steps * (int64_t)pod->hosts[i].devs->len;
  pod->coll_waiting = g_array_new(FALSE, FALSE, sizeof(int));
  pod->ev_op_done = ps_engine_register(engine, "op-done", on_op_done, pod);
  pod->ev_prep_done = ps_engine_register(engine, "prep-done", on_prep_done, pod);
  pod->ev_pcie_done = ps_engine_register(engine, "pcie-done", on_pcie_done, pod);
  pod->ev_loop_start = ps_engine_register(engine, "loop-start", on_loop_start, pod);
  return pod;
}

void ps_pod_free(PsPod *pod)
{
  if (!pod)
    return;
  for (int i = 0; i < pod->n_hosts; i++)
    g_array_free(pod->hosts[i].devs, TRUE);
  g_array_free(pod->coll_waiting, TRUE);
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

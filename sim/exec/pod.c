/* pod.c: a plan interpreted on cores, hosts, PCIe and ICI (see pod.h).
 *
 * A device runs its program one op at a time.  An op with a cost on the
 * core ends with an OP_DONE event `op->time` later; communication ops take
 * no core time: COLL_START hands the device's buffer to its collective and
 * the device goes on, COLL_DONE and RECV either find their data complete
 * and pass, or the device waits until it is.  INFEED takes a batch from the
 * device's queue or stalls until one arrives.
 *
 * A host prepares batches with its workers (prefetch buffer), then sends
 * them over PCIe (the network's PCIe links: one model for infeed, outfeed
 * and host calls) to its devices that take infeed, in turn, one batch in
 * flight at a time, blocking while the next device's queue is full, as
 * TPUStrategy's per-host enqueue loop does.  Every steps_per_run steps the
 * device loop returns to the host, which relaunches it after a round trip.
 * An OUTFEED op queues the step's outputs for the host (blocking only when
 * the outfeed queue is full); a HOST_CALL op sends a tensor up, lets the
 * host compute on one CPU thread, and waits for the result to come down.
 * COPY_START puts a copy between HBM and host memory (host offloading) on
 * the same PCIe links and the core goes on; COPY_DONE waits for it (a
 * wait of category host).
 * Faults (pod.h) scale a straggler's compute ops and a slow host's CPU
 * work, and put a straggler's delay before the first op of each step.
 * Invariant: depth + inflight <= capacity for every device, and every
 * moment of a device's time is in exactly one op or one wait. */
#include "exec/pod.h"

#include "exec/share.h"

#include <string.h>

typedef enum {
  WAIT_NONE,
  WAIT_INFEED,
  WAIT_OUTFEED,
  WAIT_COLL,
  WAIT_RECV,
  WAIT_LOOP,
  WAIT_HOST_CALL,
  WAIT_DELAY,
  WAIT_COPY
} WaitKind;

typedef struct {
  PsPod *pod;
  int index;
  const PsProgram *prog;
  int host;
  int pc;
  int64_t step;
  int64_t infeed_bytes;  /* of one INFEED op */
  int depth, inflight, capacity;
  int out_depth;
  WaitKind waiting;
  ps_time_t wait_start;
  ps_time_t op_start;
  GHashTable *mailbox;   /* (src << 20 | tag) -> messages arrived, not yet received */
  double slowdown;       /* straggler: factor on compute ops' times, 1 otherwise */
  ps_time_t delay;       /* straggler: time added at the start of every step */
  int64_t delayed_step;  /* the last step whose delay has begun */
  int coll_busy[PS_COLL_N_OPS]; /* collectives of each kind begun, not yet done */
  GArray *coll_queue;    /* int: collectives started beyond max_in_flight, in order */
  int64_t *copy_rounds;  /* per copy tag: copies complete (steps), NULL without copies */
  GQueue copy_queue[2];  /* per direction (0 down, 1 up): copies (pc of their
                            COPY_START) after the one on the lanes, in order */
  gboolean copy_busy[2]; /* a copy of the device's is on its chip's lanes */
  ps_time_t copy_began[2]; /* when that copy went on them */
} Device;

/* A device's part in one collective (its device is the plan's member;
 * a pod has one per membership, millions on a sharded pod, so two
 * fields). */
typedef struct {
  int64_t rounds_done;
  ps_time_t started;
} Member;

typedef struct {
  PsPod *pod;
  int index;
  PsCollective *coll;
  Member *members;
  int arrived;           /* members that started the current round */
  int64_t round;         /* the round being gathered */
  int last;              /* device that started the round last */
  gboolean by_coord;     /* member m is the device whose coordinate along
                            the collective's axis is m (member_of) */
} Coll;

typedef struct {
  int index;
  GArray *devs;          /* int: local devices that run a program */
  GArray *infeed_devs;   /* int: those that take infeed */
  int rr;
  int64_t to_prepare;
  int64_t batch_examples;
  int prepared;
  gboolean prep_busy, sending;
  ps_time_t prep_start;
  int loop_arrived;
  ps_time_t loop_full;   /* when the last of devs reached the loop's end */
  double slowdown;       /* slow host: factor on its CPU work, 1 otherwise */
} Host;

typedef enum { XFER_INFEED, XFER_OUTFEED, XFER_CALL_UP, XFER_CALL_DOWN, XFER_SEND } XferKind;

/* Context of one network message the pod sent. */
typedef struct {
  PsPod *pod;
  XferKind kind;
  int host, device;      /* SEND: device is the receiver */
  int src, tag;          /* SEND */
  double bytes;
  uint64_t id;           /* SEND: the network's message id */
  void *next_free;
} Xfer;

struct PsPod {
  PsEngine *engine;
  PsPodConfig cfg;       /* what it points to outlives the pod */
  PsGeometry *geo;       /* where devices, chips and hosts are */
  const PsPlan *plan;
  PsPodObserver obs;
  PsPodNumerics num;
  Device *devices;
  int n_devices;
  Host *hosts;
  int n_hosts;
  int64_t devices_finished;
  PsNetwork *net;
  Coll *colls;
  GPtrArray *xfers;      /* every Xfer allocated (freed with the pod) */
  Xfer *free_xfers;
  PsPlanMembers *members; /* each device's collectives and its index in each; NULL
                             when every member index is a coordinate (member_of) */
  uint32_t ev_op_done, ev_prep_done, ev_loop_start, ev_call_done, ev_delay_done;
  PsShareSet *copies[2]; /* chips' PCIe lanes down and up (host offloading), or NULL */
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

int ps_pod_device_chip(const PsPod *pod, int device)
{
  return ps_geometry_device_chip(pod->geo, device);
}

int ps_pod_device_core(const PsPod *pod, int device)
{
  return ps_geometry_device_core(pod->geo, device);
}

int ps_pod_chip_host(const PsPod *pod, int chip)
{
  return ps_geometry_chip_host(pod->geo, chip);
}

int64_t ps_pod_steps_done(const PsPod *pod)
{
  int64_t s = INT64_MAX;
  for (int i = 0; i < pod->n_devices; i++)
    s = MIN(s, pod->devices[i].step);
  return s;
}
PsNetwork *ps_pod_network(const PsPod *pod) { return pod->net; }

const char *ps_pod_coll_algorithm(const PsPod *pod, int c)
{
  g_return_val_if_fail(c >= 0 && c < pod->plan->n_colls, NULL);
  return ps_collective_algo(pod->colls[c].coll);
}

/* device's member index in collective c: its coordinate along c's axis
 * when the plan lists every member so (a sharded plan does), else the
 * plan's table of memberships (a search among the device's). */
static inline int member_of(const PsPod *pod, int device, int c)
{
  if (pod->colls[c].by_coord)
    return pod->plan->mesh.coord[(size_t)device * PS_N_AXES + pod->plan->colls[c].axis];
  return ps_plan_members_find(pod->members, device, c);
}

int ps_pod_coll_block(const PsPod *pod, int c, int device, int piece, int64_t *off,
                      int64_t *len)
{
  g_return_val_if_fail(c >= 0 && c < pod->plan->n_colls, 0);
  int m = member_of(pod, device, c);
  g_return_val_if_fail(m >= 0, 0);
  return ps_collective_block_piece(pod->colls[c].coll, m, piece, off, len);
}

static ps_time_t now(const PsPod *pod) { return ps_engine_now(pod->engine); }

static void device_run(PsPod *pod, Device *d);
static void host_try_transfer(PsPod *pod, Host *h);
static void on_deliver(void *ctx, const PsNetDelivery *dl);

static PsTimeCategory op_category(PsOpKind k)
{
  switch (k) {
  case PS_OP_FWD:
  case PS_OP_BWD:
  case PS_OP_RECOMPUTE:
  case PS_OP_UPDATE:
  case PS_OP_CLIP:
    return PS_TIME_COMPUTE;
  case PS_OP_COLL_START:
  case PS_OP_COLL_DONE:
    return PS_TIME_COLLECTIVE;
  case PS_OP_SEND:
  case PS_OP_RECV:
    return PS_TIME_PIPELINE_BUBBLE;
  case PS_OP_OUTFEED:
  case PS_OP_HOST_CALL:
  case PS_OP_COPY_START:
  case PS_OP_COPY_DONE:
    return PS_TIME_HOST;
  default:
    return PS_TIME_OTHER;
  }
}

static Xfer *xfer_new(PsPod *pod)
{
  Xfer *x = pod->free_xfers;
  if (x) {
    pod->free_xfers = x->next_free;
    return x;
  }
  x = g_new0(Xfer, 1);
  g_ptr_array_add(pod->xfers, x);
  return x;
}

static void xfer_free(PsPod *pod, Xfer *x)
{
  x->next_free = pod->free_xfers;
  pod->free_xfers = x;
}

static void send_xfer(PsPod *pod, XferKind kind, int host, int device, int src, int dst,
                      double bytes)
{
  Xfer *x = xfer_new(pod);
  *x = (Xfer){pod, kind, host, device, -1, -1, bytes, 0, NULL};
  ps_network_send(pod->net, src, dst, (int64_t)bytes, on_deliver, x);
}

static int host_ep(const PsPod *pod, int host)
{
  return ps_network_host_endpoint(pod->net, host);
}

/* ---- host: input pipeline and PCIe ---------------------------------- */

static void host_prepare_maybe(PsPod *pod, Host *h)
{
  const PsInputConfig *in = pod->cfg.input;
  if (h->prep_busy || h->to_prepare == 0 || h->prepared >= in->prefetch)
    return;
  /* Workers process examples continuously, across batch boundaries, as a
   * parallel map does: a batch of b takes b x cost / workers. */
  double b = (double)h->batch_examples;
  h->prep_busy = TRUE;
  h->prep_start = now(pod);
  ps_engine_after(pod->engine,
                  ps_time_from_s(b * in->host_cost_per_example_s * h->slowdown / in->workers),
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

/* The enqueue loop: one batch in flight, to the host's infeed devices in
 * turn, waiting on the next one's full queue. */
static void host_try_transfer(PsPod *pod, Host *h)
{
  if (h->sending || h->prepared == 0)
    return;
  Device *d = &pod->devices[g_array_index(h->infeed_devs, int, h->rr)];
  if (d->depth + d->inflight >= d->capacity)
    return;
  h->prepared--;
  h->sending = TRUE;
  d->inflight++;
  send_xfer(pod, XFER_INFEED, h->index, d->index, host_ep(pod, h->index), d->index,
            (double)d->infeed_bytes);
  host_prepare_maybe(pod, h);
}

static void set_depth(PsPod *pod, Device *d, int delta)
{
  d->depth += delta;
  g_assert(d->depth >= 0 && d->depth + d->inflight <= d->capacity);
  if (pod->obs.infeed_depth)
    pod->obs.infeed_depth(pod->obs.ctx, d->index, d->depth, now(pod));
}

/* One CPU thread's share of the host's FLOP rate (slowed on a slow host). */
static ps_time_t host_call_time(const PsPod *pod, const Host *h, const PsOp *op)
{
  const PsTopology *t = pod->cfg.topology;
  return ps_time_from_s(op->host_flops * h->slowdown / (t->cpu_flops / t->cpu_threads));
}

static void end_wait(PsPod *pod, Device *d, PsTimeCategory why, const char *what)
{
  d->waiting = WAIT_NONE;
  if (pod->obs.wait && now(pod) > d->wait_start)
    pod->obs.wait(pod->obs.ctx, d->index, d->step, why, what, d->wait_start, now(pod));
}

static void start_wait(Device *d, WaitKind k)
{
  d->waiting = k;
  d->wait_start = ps_engine_now(d->pod->engine);
}

static void finish_op_after(PsPod *pod, Device *d, ps_time_t dt)
{
  ps_engine_after(pod->engine, dt, pod->ev_op_done, (uint32_t)d->index, 0);
}

static void outfeed_enqueue(PsPod *pod, Device *d, const PsOp *op)
{
  d->out_depth++;
  g_assert(d->out_depth <= pod->cfg.input->outfeed_capacity);
  send_xfer(pod, XFER_OUTFEED, d->host, d->index, d->index, host_ep(pod, d->host), op->bytes);
  d->op_start = now(pod);
  finish_op_after(pod, d, op->time);
}

static void mailbox_arrive(PsPod *pod, const Xfer *x, ps_time_t sent)
{
  Device *d = &pod->devices[x->device];
  gint64 key = ((gint64)x->src << 20) | x->tag;
  if (pod->obs.message)
    pod->obs.message(pod->obs.ctx, x->src, x->device, x->tag, x->bytes, sent, now(pod),
                     x->id);
  const PsOp *op = &d->prog->ops[d->pc];
  if (d->waiting == WAIT_RECV && op->peer == x->src && op->tag == x->tag) {
    /* a ring step (collective matmul, ring attention) waits for
     * communication its parts did not hide; a stage transfer, for the
     * other stage */
    end_wait(pod, d, op->parts > 0 ? PS_TIME_COLLECTIVE : PS_TIME_PIPELINE_BUBBLE, op->name);
    d->op_start = now(pod);
    finish_op_after(pod, d, 0);
    return;
  }
  gpointer v = g_hash_table_lookup(d->mailbox, &key);
  gint64 *k = g_new(gint64, 1);
  *k = key;
  g_hash_table_replace(d->mailbox, k, GINT_TO_POINTER(GPOINTER_TO_INT(v) + 1));
}

static gboolean mailbox_take(Device *d, int src, int tag)
{
  gint64 key = ((gint64)src << 20) | tag;
  int n = GPOINTER_TO_INT(g_hash_table_lookup(d->mailbox, &key));
  if (n == 0)
    return FALSE;
  if (n == 1)
    g_hash_table_remove(d->mailbox, &key);
  else
    g_hash_table_insert(d->mailbox, g_memdup2(&key, sizeof key), GINT_TO_POINTER(n - 1));
  return TRUE;
}

/* ---- host offloading: copies between HBM and the host's memory -------- */

static void copy_arrive(void *ctx, int chip, uint64_t item);

/* A device's copies go over its chip's PCIe lanes one at a time each
 * way, in the order it started them (one DMA queue); the copies of a
 * chip's devices share its lanes equally (PsShareSet). */
static void copy_issue(PsPod *pod, Device *d, const PsOp *op)
{
  d->copy_busy[op->to_host ? 1 : 0] = TRUE;
  d->copy_began[op->to_host ? 1 : 0] = now(pod);
  ps_share_add(pod->copies[op->to_host ? 1 : 0], ps_pod_device_chip(pod, d->index), op->bytes,
               (uint64_t)d->index << 32 | (uint32_t)(op - d->prog->ops));
}

/* COPY_START: the copy is queued for its chip's PCIe lanes; the core goes
 * on. */
static void copy_start(PsPod *pod, Device *d, const PsOp *op)
{
  if (!pod->copies[0]) {
    /* a chip's lanes: the host's PCIe figure is its chips' (hw/network.h) */
    const PsTopology *t = pod->cfg.topology;
    int chips = ps_geometry_chips(pod->geo);
    double bw = t->pcie_bandwidth_Bps / MAX(t->chips_per_host, 1);
    for (int k = 0; k < 2; k++)
      pod->copies[k] = ps_share_set_new(pod->engine, chips, bw, copy_arrive, pod);
  }
  int dir = op->to_host ? 1 : 0;
  if (d->copy_busy[dir])
    g_queue_push_tail(&d->copy_queue[dir], GINT_TO_POINTER(op - d->prog->ops));
  else
    copy_issue(pod, d, op);
}

/* A device's copy (item: device << 32 | the pc of its COPY_START) has
 * arrived; the device's next in that direction goes on the lanes. */
static void copy_arrive(void *ctx, int chip, uint64_t item)
{
  PsPod *pod = ctx;
  Device *d = &pod->devices[item >> 32];
  const PsOp *done = &d->prog->ops[item & 0xffffffffu];
  int tag = done->tag, dir = done->to_host ? 1 : 0;
  (void)chip;
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, d->host, dir ? PS_HOST_PCIE_UP : PS_HOST_PCIE_DOWN,
                       dir ? "copy to host" : "copy from host", d->index, d->copy_began[dir],
                       now(pod));
  d->copy_busy[dir] = FALSE;
  if (!g_queue_is_empty(&d->copy_queue[dir]))
    copy_issue(pod, d, &d->prog->ops[GPOINTER_TO_INT(g_queue_pop_head(&d->copy_queue[dir]))]);
  d->copy_rounds[tag]++;
  const PsOp *op = &d->prog->ops[d->pc];
  if (d->waiting == WAIT_COPY && op->tag == tag) {
    end_wait(pod, d, PS_TIME_HOST, op->name);
    d->op_start = now(pod);
    finish_op_after(pod, d, 0);
  }
}

static void on_deliver(void *ctx, const PsNetDelivery *dl)
{
  Xfer *x = ctx;
  if (!dl->last)
    return;
  PsPod *pod = x->pod;
  Device *d = &pod->devices[x->device];
  static const char *const what[] = {"infeed batch", "outfeed", "host call: tensor up",
                                     "host call: result down", "send"};
  if (x->kind != XFER_SEND && pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, x->host,
                       x->kind == XFER_INFEED || x->kind == XFER_CALL_DOWN ? PS_HOST_PCIE_DOWN
                                                                           : PS_HOST_PCIE_UP,
                       what[x->kind], d->index, dl->sent, now(pod));
  Host *h = x->host >= 0 ? &pod->hosts[x->host] : NULL;
  switch (x->kind) {
  case XFER_INFEED:
    h->sending = FALSE;
    d->inflight--;
    set_depth(pod, d, +1);
    h->rr = (h->rr + 1) % (int)h->infeed_devs->len;
    if (d->waiting == WAIT_INFEED) {
      end_wait(pod, d, PS_TIME_INFEED_STALL, "infeed empty");
      set_depth(pod, d, -1);
      d->op_start = now(pod);
      finish_op_after(pod, d, d->prog->ops[d->pc].time);
    }
    host_try_transfer(pod, h);
    break;
  case XFER_OUTFEED: /* the host drains it */
    d->out_depth--;
    if (d->waiting == WAIT_OUTFEED) {
      end_wait(pod, d, PS_TIME_HOST, "outfeed full");
      outfeed_enqueue(pod, d, &d->prog->ops[d->pc]);
    }
    break;
  case XFER_CALL_UP:
    ps_engine_after(pod->engine, host_call_time(pod, h, &d->prog->ops[d->pc]), pod->ev_call_done,
                    (uint32_t)h->index, (uint64_t)d->index);
    break;
  case XFER_CALL_DOWN: /* the op ends; op_start was set when the call began */
    d->waiting = WAIT_NONE;
    finish_op_after(pod, d, 0);
    break;
  case XFER_SEND:
    mailbox_arrive(pod, x, dl->sent);
    break;
  }
  xfer_free(pod, x);
}

static void on_call_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  Device *d = &pod->devices[ev->arg.u];
  const PsOp *op = &d->prog->ops[d->pc];
  if (pod->obs.host_work)
    pod->obs.host_work(pod->obs.ctx, h->index, PS_HOST_CALLS, op->name, d->index,
                       now(pod) - host_call_time(pod, h, op), now(pod));
  send_xfer(pod, XFER_CALL_DOWN, h->index, d->index, host_ep(pod, h->index), d->index,
            op->bytes_back);
}

/* ---- host: the steps_per_run loop ----------------------------------- */

static void loop_arrive(PsPod *pod, Device *d)
{
  Host *h = &pod->hosts[d->host];
  start_wait(d, WAIT_LOOP);
  if (++h->loop_arrived == (int)h->devs->len) {
    h->loop_arrived = 0;
    h->loop_full = now(pod);
    ps_engine_after(pod->engine, ps_time_from_s(pod->cfg.topology->loop_overhead_s),
                    pod->ev_loop_start, (uint32_t)h->index, 0);
  }
}

/* A pipeline's device waits at the loop's end in two parts: until the
 * host's last device arrives, for the other stages to drain
 * (pipeline_bubble, PS_WAIT_LOOP_DRAIN); from then on, for the host to
 * relaunch the loop (host, PS_WAIT_HOST_LOOP).  Replicas' whole wait is
 * the host loop, as it always was (their arrivals differ by little). */
static void on_loop_start(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Host *h = &pod->hosts[ev->target];
  gboolean drain = ps_plan_axis_size(pod->plan, PS_AXIS_STAGE) > 1;
  for (guint i = 0; i < h->devs->len; i++) {
    Device *d = &pod->devices[g_array_index(h->devs, int, i)];
    if (drain && h->loop_full > d->wait_start) {
      if (pod->obs.wait)
        pod->obs.wait(pod->obs.ctx, d->index, d->step, PS_TIME_PIPELINE_BUBBLE,
                      PS_WAIT_LOOP_DRAIN, d->wait_start, h->loop_full);
      d->wait_start = h->loop_full;
    }
    end_wait(pod, d, PS_TIME_HOST, PS_WAIT_HOST_LOOP);
    device_run(pod, d);
  }
}

/* ---- collectives ---------------------------------------------------- */

static void coll_begin(PsPod *pod, Device *d, int c);

/* A collective's message, reported with device ids (traces). */
static void on_coll_message(void *ctx, PsCollMsgEvent what, int src, int dst, int64_t round,
                            uint64_t id, ps_time_t t)
{
  Coll *c = ctx;
  PsPod *pod = c->pod;
  const PsPlanColl *pc = &pod->plan->colls[c->index];
  pod->obs.coll_message(pod->obs.ctx, c->index, what, pc->members[src], pc->members[dst],
                        round, id, t);
}

static void on_coll_done(void *ctx, int member, ps_time_t t)
{
  Coll *c = ctx;
  PsPod *pod = c->pod;
  Member *m = &c->members[member];
  Device *d = &pod->devices[pod->plan->colls[c->index].members[member]];
  m->rounds_done++;
  if (pod->obs.coll_done)
    pod->obs.coll_done(pod->obs.ctx, d->index, m->rounds_done - 1, c->index, m->started, t);
  /* the device's next queued collective of this kind begins now */
  PsCollOp kind = pod->plan->colls[c->index].op;
  d->coll_busy[kind]--;
  for (guint i = 0; i < d->coll_queue->len; i++) {
    int next = g_array_index(d->coll_queue, int, i);
    if (pod->plan->colls[next].op == kind) {
      g_array_remove_index(d->coll_queue, i);
      coll_begin(pod, d, next);
      break;
    }
  }
  const PsOp *op = &d->prog->ops[d->pc];
  if (d->waiting == WAIT_COLL && ps_plan_op_coll(pod->plan, d->index, op) == c->index) {
    end_wait(pod, d, PS_TIME_COLLECTIVE, pod->plan->colls[c->index].name);
    d->op_start = now(pod);
    finish_op_after(pod, d, 0);
  }
}

/* Device d joins collective c's round now. */
static void coll_begin(PsPod *pod, Device *d, int c_index)
{
  Coll *c = &pod->colls[c_index];
  int mi = member_of(pod, d->index, c_index);
  Member *m = &c->members[mi];
  d->coll_busy[pod->plan->colls[c_index].op]++;
  m->started = now(pod);
  c->last = d->index;
  if (++c->arrived == ps_collective_members(c->coll)) {
    c->arrived = 0;
    if (pod->obs.coll_arrived)
      pod->obs.coll_arrived(pod->obs.ctx, d->step, c_index, d->index, now(pod));
  }
  float *buf = pod->num.coll_buffer ? pod->num.coll_buffer(pod->num.ctx, d->index, c_index)
                                    : NULL;
  ps_collective_arrive(c->coll, mi, buf, on_coll_done, c);
}

/* COLL_START: the collective begins now, or after the device's earlier
 * ones of its kind when max_in_flight of them are running.  Returns its
 * index. */
static int coll_start(PsPod *pod, Device *d, const PsOp *op)
{
  int64_t limit = pod->cfg.collective->max_in_flight;
  int c = ps_plan_op_coll(pod->plan, d->index, op);
  if (limit > 0 && d->coll_busy[pod->plan->colls[c].op] >= limit)
    g_array_append_val(d->coll_queue, c);
  else
    coll_begin(pod, d, c);
  return c;
}

/* TRUE while collective c's round of the device's step is not done. */
static gboolean coll_pending(const PsPod *pod, const Device *d, int c)
{
  return pod->colls[c].members[member_of(pod, d->index, c)].rounds_done <= d->step;
}

/* ---- devices -------------------------------------------------------- */

/* Starts the op at pc.  TRUE if it completed at once (zero core time,
 * nothing to wait for); else an event or an arrival will end it. */
static gboolean start_op(PsPod *pod, Device *d)
{
  const PsOp *op = &d->prog->ops[d->pc];
  d->op_start = now(pod);
  switch (op->kind) {
  case PS_OP_INFEED:
    if (d->depth == 0) {
      start_wait(d, WAIT_INFEED);
      return FALSE;
    }
    set_depth(pod, d, -1);
    host_try_transfer(pod, &pod->hosts[d->host]);
    break;
  case PS_OP_FWD:
  case PS_OP_BWD:
  case PS_OP_RECOMPUTE:
  case PS_OP_UPDATE:
  case PS_OP_CLIP:
    break;
  case PS_OP_OUTFEED:
    if (d->out_depth >= pod->cfg.input->outfeed_capacity) {
      start_wait(d, WAIT_OUTFEED);
      return FALSE;
    }
    outfeed_enqueue(pod, d, op);
    return FALSE;
  case PS_OP_HOST_CALL:
    d->waiting = WAIT_HOST_CALL;
    send_xfer(pod, XFER_CALL_UP, d->host, d->index, d->index, host_ep(pod, d->host), op->bytes);
    return FALSE;
  case PS_OP_COLL_START: {
    int c = coll_start(pod, d, op);
    /* asynchronous, the core goes on; on the TensorCore it holds the core */
    if (!(pod->cfg.collective->on_core & (1u << pod->plan->colls[c].op)) ||
        !coll_pending(pod, d, c))
      break;
    start_wait(d, WAIT_COLL);
    return FALSE;
  }
  case PS_OP_COLL_DONE:
    if (!coll_pending(pod, d, ps_plan_op_coll(pod->plan, d->index, op)))
      break;
    start_wait(d, WAIT_COLL);
    return FALSE;
  case PS_OP_SEND: {
    Xfer *x = xfer_new(pod);
    *x = (Xfer){pod, XFER_SEND, -1, op->peer, d->index, op->tag, op->bytes, 0, NULL};
    if (pod->obs.message_sent)
      pod->obs.message_sent(pod->obs.ctx, d->index, op->peer, op->tag, op->bytes, now(pod),
                            ps_network_next_message_id(pod->net));
    x->id = pod->obs.coll_message
                ? ps_network_send_chained(pod->net, d->index, op->peer, (int64_t)op->bytes,
                                          on_deliver, x)
                : ps_network_send(pod->net, d->index, op->peer, (int64_t)op->bytes, on_deliver,
                                  x);
    break;
  }
  case PS_OP_RECV:
    if (mailbox_take(d, op->peer, op->tag))
      break;
    start_wait(d, WAIT_RECV);
    return FALSE;
  case PS_OP_COPY_START:
    copy_start(pod, d, op);
    break;
  case PS_OP_COPY_DONE:
    if (d->copy_rounds[op->tag] > d->step)
      break;
    start_wait(d, WAIT_COPY);
    return FALSE;
  case PS_OP_N_KINDS:
    g_assert_not_reached();
  }
  ps_time_t t = op->time;
  if (d->slowdown != 1.0 && op_category(op->kind) == PS_TIME_COMPUTE)
    t = (ps_time_t)((double)t * d->slowdown + 0.5);
  if (t > 0) {
    finish_op_after(pod, d, t);
    return FALSE;
  }
  return TRUE;
}

/* The op at pc ended now.  TRUE if the device should start its next op. */
static gboolean end_op(PsPod *pod, Device *d)
{
  const PsOp *op = &d->prog->ops[d->pc];
  if (pod->num.op)
    pod->num.op(pod->num.ctx, d->index, d->step, op);
  if (pod->obs.op_done)
    pod->obs.op_done(pod->obs.ctx, d->index, d->step, op, op_category(op->kind), d->op_start,
                     now(pod));
  if (++d->pc < d->prog->n_ops)
    return TRUE;
  d->pc = 0;
  if (pod->obs.step_done)
    pod->obs.step_done(pod->obs.ctx, d->index, d->step, now(pod));
  d->step++;
  if (d->step == pod->cfg.steps) {
    pod->devices_finished++;
    return FALSE;
  }
  if (d->step % pod->cfg.steps_per_run == 0) {
    loop_arrive(pod, d);
    return FALSE;
  }
  return TRUE;
}

/* Runs ops from pc until one takes time or waits.  A straggler's step
 * begins with its delay. */
static void device_run(PsPod *pod, Device *d)
{
  do {
    if (d->pc == 0 && d->delay > 0 && d->delayed_step < d->step) {
      d->delayed_step = d->step;
      start_wait(d, WAIT_DELAY);
      ps_engine_after(pod->engine, d->delay, pod->ev_delay_done, (uint32_t)d->index, 0);
      return;
    }
    if (!start_op(pod, d))
      return;
  } while (end_op(pod, d));
}

static void on_delay_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Device *d = &pod->devices[ev->target];
  end_wait(pod, d, PS_TIME_COMPUTE, PS_WAIT_STRAGGLER);
  device_run(pod, d);
}

static void on_op_done(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsPod *pod = ctx;
  Device *d = &pod->devices[ev->target];
  if (end_op(pod, d))
    device_run(pod, d);
}

/* ---- construction --------------------------------------------------- */

static gboolean build_colls(PsPod *pod, GError **error)
{
  const PsPlan *plan = pod->plan;
  pod->colls = g_new0(Coll, plan->n_colls > 0 ? plan->n_colls : 1);
  g_autoptr(PsCollCache) cache = ps_coll_cache_new();
  gboolean all_by_coord = TRUE;
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    PsCollSpec spec = {.op = pc->op, .algo = pc->algo, .devices = pc->members,
                       .n_members = pc->n_members, .count = pc->count,
                       .elem_bytes = pc->elem_bytes};
    GError *err = NULL;
    pod->colls[c].coll = ps_collective_new_cached(pod->net, &spec, cache, &err);
    pod->colls[c].pod = pod;
    pod->colls[c].index = c;
    if (!pod->colls[c].coll) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: collective.algorithm: %s cannot run: %s", pod->cfg.file, pc->name,
                  err->message);
      g_error_free(err);
      return FALSE;
    }
    pod->colls[c].members = g_new0(Member, pc->n_members);
    pod->colls[c].by_coord = TRUE;
    for (int m = 0; m < pc->n_members && pod->colls[c].by_coord; m++)
      pod->colls[c].by_coord =
          pc->axis < PS_N_AXES && ps_plan_coord(plan, pc->members[m], pc->axis) == m;
    all_by_coord &= pod->colls[c].by_coord;
    if (pod->obs.coll_message)
      ps_collective_set_message_observer(pod->colls[c].coll, on_coll_message, &pod->colls[c]);
    ps_collective_set_fast_path(pod->colls[c].coll, pod->cfg.collective->fast_path);
  }
  /* the table of memberships only where some member index is not a coordinate */
  if (!all_by_coord)
    pod->members = ps_plan_members_new(plan);
  return TRUE;
}

/* The faults on devices, hosts and links. */
/* Every device of the straggler's slice this plan runs is a straggler. */
static void apply_slice_straggler(PsPod *pod, const PsStraggler *s)
{
  for (int d = 0; d < pod->n_devices; d++)
    if (ps_geometry_endpoint_slice(pod->geo, d) == s->slice) {
      pod->devices[d].slowdown = s->slowdown;
      pod->devices[d].delay = ps_time_from_s(s->delay_s);
    }
}

/* A DCN link fault: its one or two link directions' bandwidth times the
 * factor (> 0, and the host or leaf exists: ps_geometry_check_link_faults). */
static void apply_dcn_link_fault(PsPod *pod, const PsDcnLinkFault *f)
{
  int links[2], n = ps_geometry_dcn_fault_links(pod->geo, f, links);
  for (int k = 0; k < n; k++) {
    gboolean ok = ps_network_degrade_link(pod->net, links[k], f->bandwidth_factor, NULL);
    g_assert(ok);
  }
}

static gboolean apply_faults(PsPod *pod, GError **error)
{
  const PsFaultsConfig *fc = pod->cfg.faults;
  for (int i = 0; i < fc->n_stragglers; i++) {
    const PsStraggler *s = &fc->stragglers[i];
    if (s->slice >= 0) {
      apply_slice_straggler(pod, s);
      continue;
    }
    if (s->device >= pod->n_devices) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: faults.stragglers[%d].device: device %d runs no program in this plan "
                  "(devices 0..%d)",
                  pod->cfg.file, i, s->device, pod->n_devices - 1);
      return FALSE;
    }
    pod->devices[s->device].slowdown = s->slowdown;
    pod->devices[s->device].delay = ps_time_from_s(s->delay_s);
  }
  for (int i = 0; i < fc->n_slow_hosts; i++)
    pod->hosts[fc->slow_hosts[i].host].slowdown = fc->slow_hosts[i].slowdown;
  for (int i = 0; i < fc->n_dcn_links; i++)
    apply_dcn_link_fault(pod, &fc->dcn_links[i]);
  for (int i = 0; i < fc->n_links; i++) {
    const PsLinkFault *f = &fc->links[i];
    int link = ps_network_ici_link(pod->net, f->chip, f->dim, f->dir);
    g_assert(link >= 0); /* ps_geometry_check_link_faults checked that it exists */
    GError *err = NULL;
    gboolean ok = ps_network_degrade_link(pod->net, link, f->bandwidth_factor, &err);
    if (ok && f->both_ways) {
      PsLinkInfo info;
      ps_network_link_info(pod->net, link, &info);
      int back = ps_network_ici_link(pod->net, info.ends.to_chip, f->dim, -f->dir);
      ok = ps_network_degrade_link(pod->net, back, f->bandwidth_factor, &err);
    }
    if (!ok) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: faults.links[%d]: %s",
                  pod->cfg.file, fc->link_entries ? fc->link_entries[i] : i, err->message);
      g_error_free(err);
      return FALSE;
    }
  }
  return TRUE;
}

static void key_free(gpointer p) { g_free(p); }

PsPod *ps_pod_new(PsEngine *engine, const PsPodConfig *cfg, const PsPlan *plan,
                  const PsPodObserver *observer, const PsPodNumerics *numerics,
                  GError **error)
{
  g_return_val_if_fail(engine != NULL && cfg != NULL && plan != NULL, NULL);
  g_return_val_if_fail(cfg->topology && cfg->input && cfg->collective && cfg->faults, NULL);
  const PsTopology *topo = cfg->topology;
  const char *file = cfg->file ? cfg->file : "<pod>";
  if (plan->n_devices > ps_topology_devices(topo)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the plan needs %d devices, %s has %d", file, plan->n_devices,
                topo->name, ps_topology_devices(topo));
    return NULL;
  }
  if (!ps_plan_validate(plan, error) ||
      !ps_geometry_check_link_faults(topo, cfg->faults, file, error))
    return NULL;
  PsPod *pod = g_new0(PsPod, 1);
  pod->engine = engine;
  pod->cfg = *cfg;
  pod->cfg.file = file;
  pod->geo = ps_geometry_new(topo);
  pod->plan = plan;
  if (observer)
    pod->obs = *observer;
  if (numerics)
    pod->num = *numerics;
  pod->n_devices = plan->n_devices;
  pod->devices = g_new0(Device, pod->n_devices);
  pod->xfers = g_ptr_array_new_with_free_func(g_free);
  pod->n_hosts = ps_geometry_hosts(pod->geo);
  pod->hosts = g_new0(Host, pod->n_hosts);
  for (int i = 0; i < pod->n_hosts; i++) {
    pod->hosts[i].index = i;
    pod->hosts[i].slowdown = 1.0;
    pod->hosts[i].devs = g_array_new(FALSE, FALSE, sizeof(int));
    pod->hosts[i].infeed_devs = g_array_new(FALSE, FALSE, sizeof(int));
  }
  for (int i = 0; i < pod->n_devices; i++) {
    Device *d = &pod->devices[i];
    d->pod = pod;
    d->index = i;
    d->prog = ps_plan_program(plan, i);
    d->slowdown = 1.0;
    d->delayed_step = -1;
    d->capacity = cfg->input->infeed_capacity;
    d->mailbox = g_hash_table_new_full(g_int64_hash, g_int64_equal, key_free, NULL);
    d->coll_queue = g_array_new(FALSE, FALSE, sizeof(int));
    d->host = ps_pod_chip_host(pod, ps_pod_device_chip(pod, i));
    Host *h = &pod->hosts[d->host];
    g_array_append_val(h->devs, i);
    int infeeds = 0, copies = 0;
    for (int k = 0; k < d->prog->n_ops; k++) {
      if (d->prog->ops[k].kind == PS_OP_COPY_START)
        copies = MAX(copies, d->prog->ops[k].tag + 1);
      if (d->prog->ops[k].kind == PS_OP_INFEED) {
        if (infeeds++ == 0) {
          d->infeed_bytes = (int64_t)d->prog->ops[k].bytes;
          /* a host's batches are all the size of its first device's */
          if (h->infeed_devs->len == 0)
            h->batch_examples = d->prog->ops[k].batch;
        }
      }
    }
    if (copies > 0)
      d->copy_rounds = g_new0(int64_t, copies);
    if (infeeds > 0) {
      g_array_append_val(h->infeed_devs, i);
      h->to_prepare += cfg->steps * infeeds;
    }
  }
  pod->net = ps_network_new(engine, topo, cfg->collective->chunk_bytes);
  pod->ev_op_done = ps_engine_register(engine, "op-done", on_op_done, pod);
  pod->ev_prep_done = ps_engine_register(engine, "prep-done", on_prep_done, pod);
  pod->ev_loop_start = ps_engine_register(engine, "loop-start", on_loop_start, pod);
  pod->ev_call_done = ps_engine_register(engine, "host-call-done", on_call_done, pod);
  pod->ev_delay_done = ps_engine_register(engine, "straggler-delay-done", on_delay_done, pod);
  if (!apply_faults(pod, error) || !build_colls(pod, error)) {
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
    g_array_free(pod->hosts[i].infeed_devs, TRUE);
  }
  for (int i = 0; i < pod->n_devices; i++) {
    g_hash_table_destroy(pod->devices[i].mailbox);
    if (pod->devices[i].coll_queue)
      g_array_free(pod->devices[i].coll_queue, TRUE);
    g_free(pod->devices[i].copy_rounds);
    g_queue_clear(&pod->devices[i].copy_queue[0]);
    g_queue_clear(&pod->devices[i].copy_queue[1]);
  }
  if (pod->colls)
    for (int c = 0; c < pod->plan->n_colls; c++) {
      if (pod->colls[c].coll)
        ps_collective_free(pod->colls[c].coll);
      g_free(pod->colls[c].members);
    }
  g_free(pod->colls);
  ps_plan_members_free(pod->members);
  if (pod->net)
    ps_network_free(pod->net);
  ps_share_set_free(pod->copies[0]);
  ps_share_set_free(pod->copies[1]);
  ps_geometry_free(pod->geo);
  g_ptr_array_free(pod->xfers, TRUE);
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
    h->loop_full = now(pod);
    for (guint k = 0; k < h->devs->len; k++)
      start_wait(&pod->devices[g_array_index(h->devs, int, k)], WAIT_LOOP);
    ps_engine_after(pod->engine, ps_time_from_s(pod->cfg.topology->loop_overhead_s),
                    pod->ev_loop_start, (uint32_t)i, 0);
  }
}

gboolean ps_pod_check_finished(const PsPod *pod, GError **error)
{
  static const char *const waits[] = {"running", "waiting for infeed", "waiting for outfeed",
                                      "waiting for a collective", "waiting for a message",
                                      "waiting for the host loop", "waiting for a host call",
                                      "in its straggler delay", "waiting for a host copy"};
  G_STATIC_ASSERT(G_N_ELEMENTS(waits) == WAIT_COPY + 1);
  for (int i = 0; i < pod->n_devices; i++) {
    const Device *d = &pod->devices[i];
    if (d->step == pod->cfg.steps)
      continue;
    const PsOp *op = &d->prog->ops[d->pc];
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "the plan deadlocks: device %d stopped in step %" G_GINT64_FORMAT " at op %d "
                "(%s %s), %s", i, d->step, d->pc, ps_op_kind_name(op->kind), op->name,
                waits[d->waiting]);
    return FALSE;
  }
  return TRUE;
}

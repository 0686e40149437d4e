/* trace-observer.c: the run's Chrome/Perfetto trace (io/trace.h): per
 * chip a track per core for its ops and waits, one for its steps and lanes
 * for its collectives; per host a track per lane; counters for HBM and the
 * infeed queues; flows for messages, through the links' chunks when they
 * are drawn (hw/network.c draws those).
 * Invariant: every slice of one track is disjoint from the others on it
 * (lanes_pick spreads overlapping ones over lanes), and the trace only
 * observes: nothing here changes what the pod does or when. */
#include "run-private.h"

#include <math.h>
#include <string.h>

#define HOST_PID_BASE 100000
#define LINKS_PID 99999 /* and LINKS_PID - 1, the DCN's links (hw/network.h) */
/* several slices: the sort indices of slice s's processes start here,
 * after the links' (its chips first, then its hosts from half way) */
#define SLICE_SORT(s) (LINKS_PID + 1 + (s) * 100000)
/* trace threads of a chip: core c is tid c; its collective lanes follow */
#define COLL_TID(core, lane) (100 + (core) * 64 + (lane))
/* and its steps, one slice per step, on a track above the core's ops */
#define STEP_TID(core) (50 + (core))
#define HOST_TID(lane, sub) ((lane) + PS_HOST_N_LANES * (sub))

/* One end of a collective message's flow, kept until the device's slice
 * of that collective round is drawn (the flow binds to it). */
typedef struct {
  int c;
  int64_t round;
  uint64_t id;
  ps_time_t t;
  PsCollMsgEvent what;
} FlowEnd;

static int lanes_pick(Lanes *l, ps_time_t start, ps_time_t end, gboolean *is_new)
{
  if (!l->ends)
    l->ends = g_array_new(FALSE, FALSE, sizeof(ps_time_t));
  for (guint i = 0; i < l->ends->len; i++)
    if (g_array_index(l->ends, ps_time_t, i) <= start) {
      g_array_index(l->ends, ps_time_t, i) = end;
      *is_new = FALSE;
      return (int)i;
    }
  g_array_append_val(l->ends, end);
  *is_new = TRUE;
  return (int)l->ends->len - 1;
}

static void lanes_clear(Lanes *l)
{
  if (l->ends)
    g_array_free(l->ends, TRUE);
  l->ends = NULL;
}

static int chip_pid(Run *r, int device)
{
  return ps_pod_device_chip(r->pod, device) + 1;
}

/* Whether op's slice carries the cost model's figures (kernels, FLOPs,
 * bytes and the time's split), else a transfer's bytes. */
static gboolean has_cost_args(const PsOp *op)
{
  PsOpKind k = op->kind;
  return k == PS_OP_FWD || k == PS_OP_BWD || k == PS_OP_RECOMPUTE || k == PS_OP_UPDATE ||
         k == PS_OP_CLIP;
}

static char *op_args(const PsOp *op, int64_t step)
{
  if (has_cost_args(op))
    /* the time split as the cost model made it: MXU-bound kernels (of
     * which flash attention's softmax in series), HBM/VPU-bound kernels,
     * launches (us) */
    return g_strdup_printf("{\"step\":%" G_GINT64_FORMAT ",\"mb\":%d,\"kernels\":%d,"
                           "\"flops\":%.0f,\"mxu_flops\":%.0f,\"hbm_bytes\":%.0f,"
                           "\"bound\":\"%s\",\"mxu_us\":%.3f,\"softmax_us\":%.3f,"
                           "\"memory_us\":%.3f,\"launch_us\":%.3f}",
                           step, op->mb, op->kernels, op->flops, op->mxu_flops, op->hbm_bytes,
                           op->memory_bound ? "hbm" : "mxu", op->mxu_s * 1e6,
                           op->serial_s * 1e6, op->memory_s * 1e6, op->overhead_s * 1e6);
  return g_strdup_printf("{\"step\":%" G_GINT64_FORMAT ",\"mb\":%d,\"bytes\":%.0f}", step,
                         op->mb, op->bytes);
}

void ps_run_trace_op_done(Run *r, int device, int64_t step, const PsOp *op, ps_time_t start,
                          ps_time_t end)
{
  if (!r->trace)
    return;
  if (end > start) {
    g_autofree char *args = op_args(op, step);
    ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device),
                      op->name, ps_op_kind_name(op->kind), start, end - start, args);
  }
  /* HBM moves with ops that take no time too (a copy's start or done) */
  if (op->act_bytes != 0 && ps_pod_device_core(r->pod, device) == 0)
    ps_trace_counter(r->trace, chip_pid(r, device), "hbm core 0 (bytes)", end,
                     (double)(ps_plan_program(r->plan, device)->hbm_static_bytes +
                              r->live[device]));
}

void ps_run_trace_wait(Run *r, int device, const char *what, ps_time_t start, ps_time_t end)
{
  if (!r->trace || end <= start)
    return;
  char name[96];
  g_snprintf(name, sizeof name, "wait: %s", what);
  ps_trace_complete(r->trace, chip_pid(r, device), ps_pod_device_core(r->pod, device), name,
                    "wait", start, end - start, NULL);
}

void ps_run_trace_step_done(Run *r, int device, int64_t step, ps_time_t end)
{
  if (!r->trace)
    return;
  if (end > r->step_start[device]) {
    char name[48], args[64];
    g_snprintf(name, sizeof name, "step %" G_GINT64_FORMAT, step);
    g_snprintf(args, sizeof args, "{\"step\":%" G_GINT64_FORMAT "}", step);
    ps_trace_complete(r->trace, chip_pid(r, device), STEP_TID(ps_pod_device_core(r->pod, device)),
                      name, "step", r->step_start[device], end - r->step_start[device], args);
  }
  r->step_start[device] = end;
}

void ps_run_trace_infeed_depth(void *ctx, int device, int depth, ps_time_t t)
{
  Run *r = ctx;
  if (!r->trace)
    return;
  char name[64];
  g_snprintf(name, sizeof name, "infeed queue core %d (batches)",
             ps_pod_device_core(r->pod, device));
  ps_trace_counter(r->trace, chip_pid(r, device), name, t, depth);
}

void ps_run_trace_host_work(void *ctx, int host, PsHostLane lane, const char *what, int device,
                            ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  if (!r->trace || end <= start || ps_trace_drops(start, end - start))
    return; /* a slice the file leaves out takes no track */
  gboolean is_new;
  /* each host's lane is sub-lanes of its own, the first free one taken */
  int hl = host * PS_HOST_N_LANES + (int)lane;
  int sub = lanes_pick(&r->host_lanes[hl], start, end, &is_new);
  int tid = HOST_TID(lane, sub);
  /* a sub-lane is named when first drawn on (sub-lanes are taken in order) */
  for (; r->host_subs[hl] <= sub; r->host_subs[hl]++) {
    int s = r->host_subs[hl];
    char name[64];
    g_snprintf(name, sizeof name, "%s (%d)", ps_host_lane_name(lane), s + 1);
    ps_trace_thread(r->trace, HOST_PID_BASE + host, HOST_TID(lane, s), name, HOST_TID(lane, s));
  }
  char args[64], name[96];
  if (device >= 0)
    g_snprintf(args, sizeof args, "{\"device\":%d}", device);
  /* distinct names: viewers merge back-to-back slices of one name */
  if (lane == PS_HOST_INPUT)
    g_snprintf(name, sizeof name, "%s %" G_GINT64_FORMAT, what, ++r->host_batches[host]);
  else if (device >= 0)
    g_snprintf(name, sizeof name, "%s: device %d", what, device);
  else
    g_snprintf(name, sizeof name, "%s", what);
  ps_trace_complete(r->trace, HOST_PID_BASE + host, tid, name, "host", start, end - start,
                    device >= 0 ? args : NULL);
}

void ps_run_trace_coll_arrived(Run *r, int c, int last, ps_time_t t)
{
  if (r->coll_arrivals) {
    g_array_append_val(r->coll_arrivals[c], t);
    r->coll_last[c] = last;
  }
}

static void draw_flow_ends(Run *r, int device, int64_t round, int c, int pid, int tid,
                           ps_time_t start, ps_time_t end);
static void drop_flow_ends(Run *r, int device, int64_t round, int c);

void ps_run_trace_coll_done(void *ctx, int device, int64_t step, int c, ps_time_t start,
                            ps_time_t end)
{
  Run *r = ctx;
  if (!r->trace)
    return;
  if (end > start) {
    gboolean is_new;
    int lane = lanes_pick(&r->coll_lanes[device], start, end, &is_new);
    int core = ps_pod_device_core(r->pod, device);
    int tid = COLL_TID(core, lane);
    if (is_new) {
      char name[64];
      g_snprintf(name, sizeof name, "core %d collectives (%d)", core, lane + 1);
      ps_trace_thread(r->trace, chip_pid(r, device), tid, name, tid);
    }
    const PsPlanColl *pc = &r->plan->colls[c];
    char args[200];
    g_snprintf(args, sizeof args, "{\"step\":%" G_GINT64_FORMAT ",\"bytes\":%" G_GINT64_FORMAT
               ",\"members\":%d,\"algorithm\":\"%s\",\"axis\":\"%s\"}", step,
               pc->count * pc->elem_bytes, pc->n_members, ps_pod_coll_algorithm(r->pod, c),
               ps_axis_name(pc->axis));
    if (ps_trace_complete(r->trace, chip_pid(r, device), tid, pc->name, "collective", start,
                          end - start, args) &&
        r->flow_ends)
      draw_flow_ends(r, device, step, c, chip_pid(r, device), tid, start, end);
    /* inside it, apart: the time until the round's last member began (its
     * data could not all have been summed before) */
    GArray *arr = r->coll_arrivals[c];
    ps_time_t all_in = step < (int64_t)arr->len ? g_array_index(arr, ps_time_t, step) : start;
    if (all_in > start && all_in < end) {
      char name[64];
      g_snprintf(name, sizeof name, "waiting for peers (device %d last)", r->coll_last[c]);
      ps_trace_complete(r->trace, chip_pid(r, device), tid, name, "wait", start,
                        all_in - start, NULL);
    }
  }
  if (r->flow_ends)
    drop_flow_ends(r, device, step, c);
}

/* The flows of device's messages in round `round` of collective c start
 * and end on its slice [start, end] of the round: at the time a message
 * left or arrived, kept inside the slice (a message that arrived before
 * the device began the round ends at the slice's start; one that arrived
 * as the round ended, a nanosecond before its end, so that a viewer finds
 * the slice there whatever it rounds).  The network's steps in between
 * sit at least a nanosecond inside its chunks (network.c), so each flow's
 * events are in time order. */
static void draw_flow_ends(Run *r, int device, int64_t round, int c, int pid, int tid,
                           ps_time_t start, ps_time_t end)
{
  const GArray *a = r->flow_ends[device];
  ps_time_t last = end - start >= 2000 ? end - 1000 : start;
  for (guint i = 0; i < a->len; i++) {
    const FlowEnd *fe = &g_array_index(a, FlowEnd, i);
    if (fe->c != c || fe->round != round)
      continue;
    ps_time_t t = MIN(MAX(fe->t, start), last);
    if (fe->what == PS_COLL_MSG_SENT)
      ps_trace_flow_start(r->trace, pid, tid, "message", fe->id, t);
    else
      ps_trace_flow_end(r->trace, pid, tid, "message", fe->id, t);
  }
}

static void drop_flow_ends(Run *r, int device, int64_t round, int c)
{
  GArray *a = r->flow_ends[device];
  guint kept = 0;
  for (guint i = 0; i < a->len; i++) {
    const FlowEnd *fe = &g_array_index(a, FlowEnd, i);
    if (fe->c != c || fe->round != round)
      g_array_index(a, FlowEnd, kept++) = *fe;
  }
  g_array_set_size(a, kept);
}

/* A collective's message, when the links are drawn: both ends of its
 * flow wait for the device's slice of the round (on_coll_done). */
void ps_run_trace_coll_message(void *ctx, int c, PsCollMsgEvent what, int src, int dst,
                               int64_t round, uint64_t id, ps_time_t t)
{
  Run *r = ctx;
  if (!r->flow_ends)
    return;
  FlowEnd fe = {c, round, id, t, what};
  g_array_append_val(r->flow_ends[what == PS_COLL_MSG_SENT ? src : dst], fe);
}

/* A SEND's message: a flow from the sender's step slice as it leaves
 * (before the network draws its first chunk), through the links' chunks
 * when they are drawn, to the receiver's step slice when it arrives. */
void ps_run_trace_message_sent(void *ctx, int src, int dst, int tag, double bytes, ps_time_t t,
                               uint64_t id)
{
  Run *r = ctx;
  if (r->trace)
    ps_trace_flow_start(r->trace, chip_pid(r, src), STEP_TID(ps_pod_device_core(r->pod, src)),
                        "message", id, t);
}

void ps_run_trace_message(void *ctx, int src, int dst, int tag, double bytes, ps_time_t sent,
                          ps_time_t arrived, uint64_t id)
{
  Run *r = ctx;
  if (r->trace)
    ps_trace_flow_end(r->trace, chip_pid(r, dst), STEP_TID(ps_pod_device_core(r->pod, dst)),
                      "message", id, arrived);
}

static void trace_metadata(Run *r)
{
  const PsTopology *t = r->exp->topology;
  int per_chip = ps_topology_devices_per_chip(t);
  /* a device is a core, or the chip's cores acting as one (megacore); a
   * chip of one core is named as a core */
  const char *kind = per_chip == 1 && t->megacore ? "megacore" : "core";
  int last_chip = -1;
  for (int d = 0; d < r->n_dev; d++) {
    int chip = ps_pod_device_chip(r->pod, d);
    int host = ps_pod_chip_host(r->pod, chip);
    if (chip != last_chip) {
      char name[96], label[32] = "";
      int sl = chip / ps_topology_slice_chips(t), multi = t->slices > 1;
      /* several slices: each a run of processes, its chips then its hosts,
       * below the links, whose names and labels say which */
      if (multi)
        g_snprintf(label, sizeof label, "slice %d", sl);
      int chip_sort = multi ? SLICE_SORT(sl) + chip - sl * ps_topology_slice_chips(t) : chip;
      g_snprintf(name, sizeof name, "%s%schip %d (%s, host %d)", label, multi ? " " : "", chip,
                 t->name, host);
      ps_trace_process(r->trace, chip + 1, name, chip_sort + 1);
      if (multi)
        ps_trace_process_labels(r->trace, chip + 1, label);
      if (chip == 0 || ps_pod_chip_host(r->pod, last_chip) != host) {
        g_snprintf(name, sizeof name, "%s%shost %d", label, multi ? " " : "", host);
        ps_trace_process(r->trace, HOST_PID_BASE + host, name,
                         multi ? SLICE_SORT(sl) + SLICE_SORT(0) / 2 + host : HOST_PID_BASE + host);
        if (multi)
          ps_trace_process_labels(r->trace, HOST_PID_BASE + host, label);
        for (int lane = 0; lane < PS_HOST_N_LANES; lane++)
          ps_trace_thread(r->trace, HOST_PID_BASE + host, lane, ps_host_lane_name(lane), lane);
      }
      last_chip = chip;
    }
    int core = d % per_chip;
    char tname[80];
    if (ps_plan_axis_size(r->plan, PS_AXIS_STAGE) > 1)
      g_snprintf(tname, sizeof tname, "%s %d: device %d, stage %d, replica %d",
                 kind, core, d,
                 ps_plan_coord(r->plan, d, PS_AXIS_STAGE),
                 ps_plan_coord(r->plan, d, PS_AXIS_DATA));
    else
      g_snprintf(tname, sizeof tname, "%s %d", kind, core);
    ps_trace_thread(r->trace, chip + 1, core, tname, core);
    g_snprintf(tname, sizeof tname, "%s %d steps", kind, core);
    ps_trace_thread(r->trace, chip + 1, STEP_TID(core), tname, STEP_TID(core) - 100);
  }
}

gboolean ps_run_trace_open(Run *r, const char *path, gboolean links, GError **error)
{
  const PsPlan *plan = r->plan;
  r->trace = ps_trace_open(path, error);
  if (!r->trace)
    return FALSE;
  r->coll_lanes = g_new0(Lanes, r->n_dev);
  r->coll_arrivals = g_new(GArray *, plan->n_colls > 0 ? plan->n_colls : 1);
  r->coll_last = g_new0(int, plan->n_colls > 0 ? plan->n_colls : 1);
  for (int c = 0; c < plan->n_colls; c++)
    r->coll_arrivals[c] = g_array_new(FALSE, FALSE, sizeof(ps_time_t));

  r->step_start = g_new0(ps_time_t, r->n_dev);
  int host_lanes = ps_topology_hosts(r->exp->topology) * PS_HOST_N_LANES;
  r->host_lanes = g_new0(Lanes, host_lanes);
  r->host_subs = g_new(int, host_lanes);
  for (int h = 0; h < host_lanes; h++)
    r->host_subs[h] = 1; /* sub 0 is named with the host (trace_metadata) */
  r->host_batches = g_new0(int64_t, ps_topology_hosts(r->exp->topology));
  trace_metadata(r);
  if (links) {
    ps_network_set_trace(ps_pod_network(r->pod), r->trace, LINKS_PID);
    r->flow_ends = g_new(GArray *, r->n_dev);
    for (int i = 0; i < r->n_dev; i++)
      r->flow_ends[i] = g_array_new(FALSE, FALSE, sizeof(FlowEnd));
  }
  return TRUE;
}

void ps_run_trace_free(Run *r)
{
  if (r->trace)
    ps_trace_abort(r->trace);
  if (r->coll_lanes)
    for (int i = 0; i < r->n_dev; i++)
      lanes_clear(&r->coll_lanes[i]);
  g_free(r->coll_lanes);
  for (int c = 0; r->coll_arrivals && c < r->plan->n_colls; c++)
    g_array_free(r->coll_arrivals[c], TRUE);
  g_free(r->coll_arrivals);
  g_free(r->coll_last);
  for (int i = 0; r->flow_ends && i < r->n_dev; i++)
    g_array_free(r->flow_ends[i], TRUE);
  g_free(r->flow_ends);

  g_free(r->step_start);
  for (int l = 0; r->host_lanes && l < ps_topology_hosts(r->exp->topology) * PS_HOST_N_LANES;
       l++)
    lanes_clear(&r->host_lanes[l]);
  g_free(r->host_lanes);
  r->host_lanes = NULL;
  g_free(r->host_subs);
  g_free(r->host_batches);
}

/* Characters of x printed as %.0f. */
static double digits(double x)
{
  return x >= 10 ? floor(log10(x)) + 1 : 1;
}

/* Bytes of op's slice line: the line's fixed text (about 110: pid, tid,
 * category, start, duration, step and micro-batch), its name, and a
 * compute op's figures (op_args: about 130 besides its three counts). */
static double op_line_bytes(const PsOp *op)
{
  double line = 110 + (double)strlen(op->name);
  if (has_cost_args(op))
    return line + 130 + digits(op->flops) + digits(op->mxu_flops) + digits(op->hbm_bytes);
  return line + 10 + digits(op->bytes);
}

int64_t ps_run_trace_estimate(const PsExperiment *exp, const PsPlan *plan, gboolean links)
{
  /* bytes of one event line, measured on shipped traces: an op slice as
   * op_line_bytes counts it (220-320), a wait slice about 150, a
   * collective's slice on a member about 130 and its name, a flow event
   * about 110, a counter sample about 95, a link's chunk with its args
   * about 220.  An op is drawn when it takes a nanosecond or more (the
   * file's unit) and moves its chip's HBM counter (core 0's) when it
   * changes what is live; every wait is counted as if it waited: an upper
   * side */
  const double short_line = 150, flow_line = 110, counter_line = 95, chunk_line = 220;
  const int per_chip = ps_topology_devices_per_chip(exp->topology);
  double per_step = 0;
  for (int d = 0; d < plan->n_devices; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    int waits = 0;
    for (int i = 0; i < p->n_ops; i++) {
      const PsOp *op = &p->ops[i];
      waits += op->kind == PS_OP_COLL_DONE || op->kind == PS_OP_RECV || op->kind == PS_OP_INFEED;
      per_step += (op->time >= 1000 ? op_line_bytes(op) : 0) +
                  (op->act_bytes != 0 ? counter_line / per_chip : 0);
      /* with links: the chunks of a batch over PCIe, of a SEND over ICI */
      if (links && (op->kind == PS_OP_INFEED || op->kind == PS_OP_SEND))
        per_step += MAX(1.0, op->bytes / (double)exp->collective.chunk_bytes) * chunk_line +
                    3 * flow_line;
      /* a host call's arguments up and result down over PCIe */
      if (links && op->kind == PS_OP_HOST_CALL)
        per_step += (MAX(1.0, op->bytes / (double)exp->collective.chunk_bytes) +
                     MAX(1.0, op->bytes_back / (double)exp->collective.chunk_bytes)) *
                        chunk_line + 6 * flow_line;
    }
    /* an op, and the HBM counter it may move; the step slice; the host's
     * input slices and the infeed-depth counter, a few per device */
    per_step += waits * short_line + short_line + 4 * (short_line + counter_line);
  }
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    per_step += pc->n_members * (130 + (double)strlen(pc->name));
    if (links) { /* chunks of a ring: 2 (n - 1) steps of count / n each, per member */
      double bytes = (double)pc->count * pc->elem_bytes;
      double chunks = MAX(1.0, bytes / pc->n_members / (double)exp->collective.chunk_bytes);
      double messages = 2.0 * (pc->n_members - 1) * pc->n_members;
      per_step += messages * (chunks * chunk_line + 3 * flow_line);
    }
  }
  /* the sum of the lines came 0.8-1.1 times the shipped experiments'
   * traces (the least where host calls and link chunks add lines it does
   * not count): 1.3 of it keeps to the upper side */
  double bytes = 1.3 * per_step * (double)exp->steps;
  return bytes > 9e18 ? INT64_MAX : (int64_t)bytes;
}

/* test_exec.c: the executor (exec/pod.h) on hand-written plans, checked
 * against closed forms written out here.
 *
 * - ping-pong: device A sends S = n c bytes to B, B sends them back, N
 *   steps.  One message over h hops of L lanes (bandwidth B, latency a,
 *   chunks of c bytes) takes T = h a + (ceil(n/L) + h - 1) c/B (network.h's
 *   h a + S/B + (h-1) c/B for one lane), each chunk's serialization rounded
 *   to the picosecond once per link, so the simulator must give exactly
 *   T_ps = h a + (ceil(n/L) + h - 1) round(c/B) and that lies within half a
 *   picosecond per chunk-hop of the real-valued T.  A round trip is 2T;
 *   with a host loop of l every steps_per_run steps, A's step k ends at
 *   (1 + floor(k/spr)) l + 2(k+1)T; A's waits are all pipeline_bubble
 *   (2T per step) apart from the loop (host).  Cases: neighbouring chips,
 *   two hops, two lanes over two hops, four lanes over one hop, and the two
 *   cores of one chip (on_chip_bandwidth_Bps, no latency).
 * - disjoint groups: on a 4x2 torus (rows wrap), a ring all-reduce of S
 *   bytes over the core-0 devices of row 0 takes 2(N-1)(a + n round(c/B))
 *   (m = S/N = n c per step), equal to ps_collective_predict_s within half
 *   a picosecond per chunk-hop, alone or with the same all-reduce running
 *   on row 1 at the same time (no shared link: exactly the same time).  The
 *   core-1 devices of row 0 share every link, each a FIFO: the group that
 *   sends first ends its first step at a + (4(N-1) - 1) n round(c/B), the
 *   other at a + 4(N-1) n round(c/B); from then on the links never idle
 *   (a < n c/B), so every step lasts 4(N-1) n round(c/B), latency hidden.
 * - overlap: COLL_START, compute of T, COLL_DONE: a step lasts max(T, Tc)
 *   and the collective wait is max(0, Tc - T); START, DONE, compute: T + Tc;
 *   T + Tc either way when collective.on_core names the collective's kind.
 * - deadlock: two devices that RECV from each other first, or that start
 *   two collectives in opposite orders, pass ps_plan_validate but stop;
 *   ps_pod_check_finished names the device and the op.  ps_plan_validate
 *   (and so ps_pod_new) rejects a COLL_START without COLL_DONE, an unmatched
 *   SEND, a COLL_START by a non-member, a member that never starts, a
 *   member that is not a device of the plan.
 * - copies to and from the host: on tpu-v3-8 (4 chips of 2 cores, one
 *   host, PCIe W = pcie_bandwidth_Bps / 4 a chip each way), COPY_START of
 *   B bytes, compute of T, COPY_DONE: a step lasts max(T, B/W) and the
 *   host wait is max(0, B/W - T) when the device is alone on its chip;
 *   max(T, 2B/W) when the chip's other core copies B the same way at the
 *   same time (the lanes shared equally); max(T, B/W) when the other copy
 *   is on another chip or goes the other way; a device's two copies one
 *   way go one after the other: the first done at B/W, the second at
 *   2B/W.  ps_plan_validate rejects a COPY_DONE without its start, a start
 *   without its done, a tag started twice and a done in the wrong
 *   direction.
 * - breakdown: in a plan with every kind of wait (infeed over PCIe, a
 *   collective, messages, outfeed, host loops), each device's op_done spans
 *   and waits tile [0, end of its last step] with no gap and no overlap. */
#include "collectives/collective.h"
#include "exec/pod.h"
#include "io/config.h"
#include "program/program.h"
#include "run/experiment.h"
#include "run/run.h"
#include "support/cli.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

static char *tmpdir;
static char *exp_path;

static const char *exp_json =
    "{\"name\": \"exec\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 32, \"steps\": 4, \"steps_per_run\": 4,"
    " \"strategy\": {\"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 640,"
    "             \"host_cost_per_example_s\": 0, \"workers\": 4},"
    " \"numerics\": {\"enabled\": false}}";

static PsExperiment *load(const char *const *ov)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(exp_path, ov, &error);
  g_assert_no_error(error);
  g_assert_nonnull(e);
  return e;
}

/* ---- ops ------------------------------------------------------------ */

static PsOp op_new(PsOpKind kind, const char *name)
{
  PsOp op;
  memset(&op, 0, sizeof op);
  op.kind = kind;
  op.coll = -1;
  op.peer = -1;
  op.host_call = -1;
  g_strlcpy(op.name, name, sizeof op.name);
  return op;
}

static PsOp op_compute(PsOpKind kind, ps_time_t t, const char *name)
{
  PsOp op = op_new(kind, name);
  op.time = t;
  return op;
}

static PsOp op_msg(PsOpKind kind, int peer, int tag, double bytes, const char *name)
{
  PsOp op = op_new(kind, name);
  op.peer = peer;
  op.tag = tag;
  op.bytes = bytes;
  return op;
}

static PsOp op_coll(PsOpKind kind, int c)
{
  PsOp op = op_new(kind, kind == PS_OP_COLL_START ? "start" : "done");
  op.coll = c;
  return op;
}

/* A program for devices that take no part: one op of no time.  (A program
 * must have an op: the executor reads ops[0].) */
static int add_idle(PsPlan *plan)
{
  PsOp idle = op_compute(PS_OP_FWD, 0, "idle");
  return ps_plan_add_program(plan, &idle, 1);
}

static int add_allreduce(PsPlan *plan, const int *members, int n, int64_t bytes,
                         const char *name)
{
  PsPlanColl c;
  memset(&c, 0, sizeof c);
  c.op = PS_COLL_ALL_REDUCE;
  c.algo = (char *)"ring";
  c.n_members = n;
  c.members = (int *)members;
  c.count = bytes;
  c.elem_bytes = 1;
  c.buffer = PS_BUFFER_GRADS;
  g_strlcpy(c.name, name, sizeof c.name);
  return ps_plan_add_coll(plan, &c);
}

/* ---- an observer that records everything ---------------------------- */

typedef struct {
  ps_time_t start, end;
  PsTimeCategory cat;
  gboolean wait;
  PsOpKind kind;   /* ops only */
  int64_t step;
  char what[64];
} Span;

typedef struct {
  int n;
  GArray **spans;    /* per device: Span, in report order */
  GArray **steps;    /* per device: ps_time_t end of each step */
  int coll_done;
  int messages;
  GArray *colls;     /* CollSpan of every collective a device finished */
} Rec;

typedef struct {
  int device, c;
  ps_time_t start, end;
} CollSpan;

static void rec_op(void *ctx, int device, int64_t step, const PsOp *op, PsTimeCategory cat,
                   ps_time_t start, ps_time_t end)
{
  Rec *r = ctx;
  g_assert_cmpint(device, <, r->n);
  g_assert_cmpint(start, <=, end);
  Span s = {start, end, cat, FALSE, op->kind, step, ""};
  g_strlcpy(s.what, op->name, sizeof s.what);
  g_array_append_val(r->spans[device], s);
}

static void rec_wait(void *ctx, int device, int64_t step, PsTimeCategory why, const char *what,
                     ps_time_t start, ps_time_t end)
{
  Rec *r = ctx;
  g_assert_cmpint(device, <, r->n);
  g_assert_cmpint(start, <, end);
  Span s = {start, end, why, TRUE, PS_OP_N_KINDS, step, ""};
  g_strlcpy(s.what, what, sizeof s.what);
  g_array_append_val(r->spans[device], s);
}

static void rec_step(void *ctx, int device, int64_t step, ps_time_t end)
{
  Rec *r = ctx;
  g_assert_cmpint(step, ==, (int64_t)r->steps[device]->len);
  g_array_append_val(r->steps[device], end);
}

static void rec_coll_done(void *ctx, int device, int64_t step, int c, ps_time_t start,
                          ps_time_t end)
{
  Rec *r = ctx;
  g_assert_cmpint(start, <=, end);
  r->coll_done++;
  CollSpan cs = {device, c, start, end};
  g_array_append_val(r->colls, cs);
}

static void rec_message(void *ctx, int src, int dst, int tag, double bytes, ps_time_t sent,
                        ps_time_t arrived, uint64_t id)
{
  Rec *r = ctx;
  g_assert_cmpint(sent, <, arrived);
  r->messages++;
}

typedef struct {
  PsExperiment *exp;
  PsPlan *plan;
  PsEngine *engine;
  PsPod *pod;
  Rec rec;
} Sim;

/* Takes ownership of exp and plan. */
static void sim_init(Sim *s, PsExperiment *exp, PsPlan *plan)
{
  s->exp = exp;
  s->plan = plan;
  s->engine = ps_engine_new();
  s->rec.n = plan->n_devices;
  s->rec.spans = g_new(GArray *, plan->n_devices);
  s->rec.steps = g_new(GArray *, plan->n_devices);
  for (int d = 0; d < plan->n_devices; d++) {
    s->rec.spans[d] = g_array_new(FALSE, FALSE, sizeof(Span));
    s->rec.steps[d] = g_array_new(FALSE, FALSE, sizeof(ps_time_t));
  }
  s->rec.coll_done = s->rec.messages = 0;
  s->rec.colls = g_array_new(FALSE, FALSE, sizeof(CollSpan));
  PsPodObserver obs = {.ctx = &s->rec, .op_done = rec_op, .wait = rec_wait,
                       .step_done = rec_step, .coll_done = rec_coll_done,
                       .message = rec_message};
  GError *error = NULL;
  PsPodConfig cfg = ps_run_pod_config(exp);
  s->pod = ps_pod_new(s->engine, &cfg, plan, &obs, NULL, &error);
  g_assert_no_error(error);
  g_assert_nonnull(s->pod);
}

/* Runs to the end; the plan must finish. */
static void sim_run(Sim *s)
{
  ps_pod_start(s->pod);
  ps_engine_run(s->engine, PS_TIME_NEVER);
  GError *error = NULL;
  g_assert_true(ps_pod_check_finished(s->pod, &error));
  g_assert_no_error(error);
  g_assert_cmpint(ps_pod_steps_done(s->pod), ==, s->exp->steps);
  g_assert_cmpuint(ps_network_in_flight(ps_pod_network(s->pod)), ==, 0);
  for (int d = 0; d < s->plan->n_devices; d++)
    g_assert_cmpuint(s->rec.steps[d]->len, ==, (guint)s->exp->steps);
}

static void sim_clear(Sim *s)
{
  ps_pod_free(s->pod);
  ps_engine_free(s->engine);
  for (int d = 0; d < s->plan->n_devices; d++) {
    g_array_free(s->rec.spans[d], TRUE);
    g_array_free(s->rec.steps[d], TRUE);
  }
  g_free(s->rec.spans);
  g_free(s->rec.steps);
  g_array_free(s->rec.colls, TRUE);
  ps_plan_free(s->plan);
  ps_experiment_free(s->exp);
}

static ps_time_t step_end(const Sim *s, int device, int64_t step)
{
  return g_array_index(s->rec.steps[device], ps_time_t, step);
}

static ps_time_t last_end(const Sim *s, int device)
{
  return step_end(s, device, s->exp->steps - 1);
}

/* Waits of one category on device (all if cat is N_CATEGORIES), summed. */
static ps_time_t waited(const Sim *s, int device, PsTimeCategory cat)
{
  ps_time_t t = 0;
  const GArray *a = s->rec.spans[device];
  for (guint i = 0; i < a->len; i++) {
    const Span *sp = &g_array_index(a, Span, i);
    if (sp->wait && (cat == PS_TIME_N_CATEGORIES || sp->cat == cat))
      t += sp->end - sp->start;
  }
  return t;
}

/* Serialization of `bytes` on a link of bw bytes/s, rounded to the
 * picosecond as network.h says. */
static ps_time_t ser_ps(double bytes, double bw)
{
  return (ps_time_t)(bytes * ((double)PS_PS_PER_S / bw) + 0.5);
}

/* ---- 1. ping-pong --------------------------------------------------- */

typedef struct {
  int a, b;           /* devices */
  int hops;           /* expected */
  const char *lanes;  /* override of ici.links_per_neighbor, or NULL */
} PingCase;

static void ping_pong_case(const PingCase *pc)
{
  const int64_t c = 256 * 1024, n = 6, S = n * c;
  const int N = 6, spr = 3;
  const char *ov[] = {"steps=6", "steps_per_run=3", "collective.chunk_bytes=262144",
                      pc->lanes, NULL};
  PsExperiment *e = load(ov);
  g_assert_cmpint(e->steps, ==, N);
  g_assert_cmpint(e->steps_per_run, ==, spr);
  g_assert_cmpint(e->collective.chunk_bytes, ==, c);
  const PsTopology *t = e->topology;

  PsPlan *plan = ps_plan_new(MAX(pc->a, pc->b) + 1);
  int idle = add_idle(plan);
  PsOp pa[] = {op_msg(PS_OP_SEND, pc->b, 0, (double)S, "ping"),
               op_msg(PS_OP_RECV, pc->b, 1, 0, "wait for pong")};
  PsOp pb[] = {op_msg(PS_OP_RECV, pc->a, 0, 0, "wait for ping"),
               op_msg(PS_OP_SEND, pc->a, 1, (double)S, "pong")};
  int prog_a = ps_plan_add_program(plan, pa, 2), prog_b = ps_plan_add_program(plan, pb, 2);
  for (int d = 0; d < plan->n_devices; d++)
    plan->program_of[d] = d == pc->a ? prog_a : d == pc->b ? prog_b : idle;
  g_assert_true(ps_plan_validate(plan, NULL));

  Sim s;
  sim_init(&s, e, plan);
  PsNetwork *net = ps_pod_network(s.pod);
  int h = ps_network_hops(net, pc->a, pc->b);
  g_assert_cmpint(h, ==, pc->hops);
  g_assert_cmpint(ps_network_hops(net, pc->b, pc->a), ==, h);
  gboolean on_chip = ps_pod_device_chip(s.pod, pc->a) == ps_pod_device_chip(s.pod, pc->b);
  /* the closed form from the topology's figures */
  double B = on_chip ? t->on_chip_bandwidth_Bps : t->ici_bandwidth_Bps;
  double alpha = on_chip ? 0.0 : t->ici_latency_s;
  int L = on_chip ? 1 : t->ici_links_per_neighbor;
  int64_t rounds = (n + L - 1) / L; /* chunks one lane carries */
  double T_real = h * alpha + (double)(rounds + h - 1) * (double)c / B;
  if (L == 1)
    g_assert_cmpfloat(fabs(T_real - (h * alpha + S / B + (h - 1) * c / B)), <, 1e-18);
  ps_time_t T = h * ps_time_from_s(alpha) + (rounds + h - 1) * ser_ps((double)c, B);
  g_assert_cmpfloat(fabs((double)T - T_real * 1e12), <=, 0.5 * (double)(rounds + h - 1) + 1e-3);
  ps_time_t loop = ps_time_from_s(t->loop_overhead_s);
  g_assert_cmpint(loop, >, 0);

  sim_run(&s);
  g_test_message("ping-pong %d <-> %d: %d hop(s), %d lane(s), %g B/s: T = %" G_GINT64_FORMAT
                 " ps (closed form %.3f ps), A ends at %" G_GINT64_FORMAT " ps", pc->a, pc->b, h,
                 L, B, T, T_real * 1e12, last_end(&s, pc->a));
  /* A: step k ends at (1 + k / spr) loops + 2 (k + 1) T */
  for (int k = 0; k < N; k++)
    g_assert_cmpint(step_end(&s, pc->a, k), ==, (1 + k / spr) * loop + 2 * (k + 1) * T);
  /* B sends its last pong T before A receives it */
  g_assert_cmpint(last_end(&s, pc->b), ==, 2 * loop + (2 * N - 1) * T);
  /* A's waits: the RECV, always a pipeline bubble of the round trip; the
   * host loop twice */
  g_assert_cmpint(waited(&s, pc->a, PS_TIME_PIPELINE_BUBBLE), ==, 2 * N * T);
  g_assert_cmpint(waited(&s, pc->a, PS_TIME_HOST), ==, 2 * loop);
  g_assert_cmpint(waited(&s, pc->a, PS_TIME_N_CATEGORIES), ==, 2 * N * T + 2 * loop);
  int bubbles = 0;
  const GArray *sa = s.rec.spans[pc->a];
  for (guint i = 0; i < sa->len; i++) {
    const Span *sp = &g_array_index(sa, Span, i);
    if (sp->wait && sp->cat == PS_TIME_PIPELINE_BUBBLE) {
      g_assert_cmpint(sp->end - sp->start, ==, 2 * T);
      g_assert_cmpstr(sp->what, ==, "wait for pong");
      bubbles++;
    } else if (sp->wait) {
      g_assert_cmpint(sp->cat, ==, PS_TIME_HOST);
      g_assert_cmpstr(sp->what, ==, PS_WAIT_HOST_LOOP);
    } else {
      /* SEND and RECV take no core time */
      g_assert_cmpint(sp->end, ==, sp->start);
      g_assert_cmpint(sp->cat, ==, PS_TIME_PIPELINE_BUBBLE);
    }
  }
  g_assert_cmpint(bubbles, ==, N);
  g_assert_cmpint(s.rec.messages, ==, 2 * N);
  sim_clear(&s);
}

static void test_ping_pong(void)
{
  /* tpu-v3-8: 2x2 chips without wrap-around, 2 cores per chip: device d
   * is on chip d / 2, chip (1,0) = 1 is one hop from chip 0, chip (1,1) = 3
   * two hops */
  static const PingCase cases[] = {
      {0, 2, 1, NULL},
      {0, 6, 2, NULL},
      {0, 6, 2, "topology.ici.links_per_neighbor=2"},
      {2, 7, 1, "topology.ici.links_per_neighbor=4"},
      {0, 1, 1, NULL}, /* the two cores of chip 0: on-chip path */
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++)
    ping_pong_case(&cases[i]);
}

/* ---- 2. concurrent groups ------------------------------------------- */

/* Rows of a 4x2 torus whose rows wrap: chip x + 4 y, device 2 chip + core. */
static const char *const torus_ov[] = {
    "topology.torus.dims=[4,2]", "topology.torus.wrap=[true,false]",
    "collective.chunk_bytes=262144", "steps=3", "steps_per_run=3", NULL};
static const int row0_core0[] = {0, 2, 4, 6};
static const int row1_core0[] = {8, 10, 12, 14};
static const int row0_core1[] = {1, 3, 5, 7};
#define GROUP_N 4
#define AR_BYTES (4 * 4 * 262144) /* m = S / N = 4 chunks per ring step */

/* Runs a ring all-reduce of AR_BYTES on each group given; other devices
 * idle.  For each group: the end of its first step after the loop
 * (first[g]) and the length of every later step (steady[g]; they must all
 * be equal), each the latest over the group's members. */
static void run_groups(const int *const *groups, int n_groups, ps_time_t *first,
                       ps_time_t *steady, double *predict_s)
{
  PsExperiment *e = load(torus_ov);
  PsPlan *plan = ps_plan_new(16);
  int idle = add_idle(plan);
  for (int d = 0; d < 16; d++)
    plan->program_of[d] = idle;
  for (int g = 0; g < n_groups; g++) {
    char name[32];
    g_snprintf(name, sizeof name, "all-reduce %d", g);
    int c = add_allreduce(plan, groups[g], GROUP_N, AR_BYTES, name);
    PsOp ops[] = {op_coll(PS_OP_COLL_START, c), op_coll(PS_OP_COLL_DONE, c)};
    int p = ps_plan_add_program(plan, ops, 2);
    for (int m = 0; m < GROUP_N; m++)
      plan->program_of[groups[g][m]] = p;
  }
  Sim s;
  sim_init(&s, e, plan);
  for (int g = 0; g < n_groups; g++)
    g_assert_cmpstr(ps_pod_coll_algorithm(s.pod, g), ==, "ring");
  if (predict_s) {
    /* the same collective on a network of its own, for its prediction */
    PsEngine *eng = ps_engine_new();
    PsNetwork *net = ps_network_new(eng, e->topology, e->collective.chunk_bytes);
    PsCollSpec spec = {PS_COLL_ALL_REDUCE, "ring", groups[0], GROUP_N, AR_BYTES, 1, 0};
    GError *error = NULL;
    PsCollective *coll = ps_collective_new(net, &spec, &error);
    g_assert_no_error(error);
    *predict_s = ps_collective_predict_s(coll);
    ps_collective_free(coll);
    ps_network_free(net);
    ps_engine_free(eng);
  }
  sim_run(&s);
  ps_time_t loop = ps_time_from_s(e->topology->loop_overhead_s);
  g_assert_cmpint(s.rec.coll_done, ==, n_groups * GROUP_N * e->steps);
  g_assert_cmpint(e->steps, >=, 3);
  for (int g = 0; g < n_groups; g++) {
    first[g] = steady[g] = 0;
    for (int m = 0; m < GROUP_N; m++) {
      first[g] = MAX(first[g], step_end(&s, groups[g][m], 0) - loop);
      steady[g] = MAX(steady[g], step_end(&s, groups[g][m], 1) - step_end(&s, groups[g][m], 0));
    }
    for (int k = 2; k < e->steps; k++) {
      ps_time_t w = 0;
      for (int m = 0; m < GROUP_N; m++)
        w = MAX(w, step_end(&s, groups[g][m], k) - step_end(&s, groups[g][m], k - 1));
      g_assert_cmpint(w, ==, steady[g]);
    }
    /* the members' only wait (besides the loop) is the collective */
    for (int m = 0; m < GROUP_N; m++) {
      int d = groups[g][m];
      g_assert_cmpint(waited(&s, d, PS_TIME_COLLECTIVE) + waited(&s, d, PS_TIME_HOST), ==,
                      last_end(&s, d));
    }
  }
  sim_clear(&s);
}

static void test_disjoint_groups(void)
{
  PsExperiment *e = load(torus_ov);
  const PsTopology *t = e->topology;
  g_assert_cmpint(ps_topology_devices(t), ==, 16);
  g_assert_cmpint(t->ici_links_per_neighbor, ==, 1);
  const int N = GROUP_N;
  const int64_t c = e->collective.chunk_bytes, m = AR_BYTES / N, n = m / c;
  g_assert_cmpint(n * c, ==, m);
  double B = t->ici_bandwidth_Bps, alpha = t->ici_latency_s;
  /* every ring edge one hop (row 0 wraps from chip 3 to chip 0) */
  ps_time_t s_ps = ser_ps((double)c, B), a_ps = ps_time_from_s(alpha);
  ps_time_t Tc = 2 * (N - 1) * (a_ps + n * s_ps);
  double Tc_real = 2.0 * (N - 1) * (alpha + (double)m / B);
  double chunk_hops = 2.0 * (N - 1) * n;
  g_assert_cmpfloat(fabs((double)Tc - Tc_real * 1e12), <=, 0.5 * chunk_hops);
  ps_experiment_free(e);

  ps_time_t first[2], steady[2];
  double predict = 0;
  const int *one[] = {row0_core0};
  run_groups(one, 1, first, steady, &predict);
  g_test_message("ring all-reduce of %d bytes over 4 one-hop members: %" G_GINT64_FORMAT
                 " ps alone, closed form %" G_GINT64_FORMAT " ps (%.3f real), predict %.3f ps",
                 AR_BYTES, first[0], Tc, Tc_real * 1e12, predict * 1e12);
  g_assert_cmpint(first[0], ==, Tc);
  g_assert_cmpint(steady[0], ==, Tc);
  g_assert_cmpfloat(fabs(predict * 1e12 - (double)first[0]), <=, 0.5 * chunk_hops + 1e-3);

  /* row 1 at the same time: no link in common, not a picosecond more */
  const int *two[] = {row0_core0, row1_core0};
  run_groups(two, 2, first, steady, NULL);
  for (int g = 0; g < 2; g++) {
    g_assert_cmpint(first[g], ==, Tc);
    g_assert_cmpint(steady[g], ==, Tc);
  }

  /* the other cores of row 0: every link carries both rings.  Each link
   * is a FIFO that takes a whole message's chunks when it is sent, so on
   * each ring step the group that sent first (group 0, device 0 starts
   * before device 1) goes first.  Step 0: group 0's last message leaves
   * after 2(2(N-1)) - 1 messages' serializations, group 1's after
   * 2(2(N-1)); then the links never idle (a < n c/B: a message's latency
   * hides behind the other group's), so every later step is both groups'
   * bytes over one link: 2(N-1) 2 n c/B, the latency gone. */
  g_assert_cmpint(a_ps, <, n * s_ps);
  const ps_time_t busy = 2 * (N - 1) * 2 * n * s_ps;
  const int *shared[] = {row0_core0, row0_core1};
  run_groups(shared, 2, first, steady, NULL);
  g_test_message("sharing every link: first steps end %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
                 " ps, then %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT " ps per step "
                 "(closed form %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                 " ps)", first[0], first[1], steady[0], steady[1], a_ps + busy - n * s_ps,
                 a_ps + busy, busy);
  g_assert_cmpint(first[1], >, Tc);
  g_assert_cmpint(first[0], ==, a_ps + busy - n * s_ps);
  g_assert_cmpint(first[1], ==, a_ps + busy);
  g_assert_cmpint(steady[0], ==, busy);
  g_assert_cmpint(steady[1], ==, busy);
}

/* ---- 3. overlap ----------------------------------------------------- */

/* Row 0's ring all-reduce with a compute op of T; `after` puts the compute
 * after the COLL_DONE instead of between START and DONE; `on_core` is
 * collective.on_core.  Returns the step time (all steps equal) and device
 * 0's collective wait per step. */
static void run_overlap_on(ps_time_t T, gboolean after, unsigned on_core, ps_time_t *step,
                           ps_time_t *wait)
{
  PsExperiment *e = load(torus_ov);
  e->collective.on_core = on_core;
  PsPlan *plan = ps_plan_new(16);
  int idle = add_idle(plan);
  for (int d = 0; d < 16; d++)
    plan->program_of[d] = idle;
  int c = add_allreduce(plan, row0_core0, GROUP_N, AR_BYTES, "gradients");
  PsOp fwd = op_compute(PS_OP_BWD, T, "bwd");
  PsOp ops[3] = {op_coll(PS_OP_COLL_START, c), fwd, op_coll(PS_OP_COLL_DONE, c)};
  if (after) {
    ops[1] = op_coll(PS_OP_COLL_DONE, c);
    ops[2] = fwd;
  }
  int p = ps_plan_add_program(plan, ops, 3);
  for (int m = 0; m < GROUP_N; m++)
    plan->program_of[row0_core0[m]] = p;
  Sim s;
  sim_init(&s, e, plan);
  sim_run(&s);
  ps_time_t loop = ps_time_from_s(e->topology->loop_overhead_s);
  *step = step_end(&s, 0, 0) - loop;
  for (int k = 1; k < e->steps; k++)
    g_assert_cmpint(step_end(&s, 0, k) - step_end(&s, 0, k - 1), ==, *step);
  *wait = waited(&s, 0, PS_TIME_COLLECTIVE) / e->steps;
  g_assert_cmpint(waited(&s, 0, PS_TIME_COLLECTIVE), ==, *wait * e->steps);
  /* device 0's time: loop, compute, collective wait */
  ps_time_t compute = 0;
  const GArray *a = s.rec.spans[0];
  for (guint i = 0; i < a->len; i++) {
    const Span *sp = &g_array_index(a, Span, i);
    if (!sp->wait && sp->cat == PS_TIME_COMPUTE) {
      g_assert_cmpint(sp->end - sp->start, ==, T);
      compute += T;
    }
  }
  g_assert_cmpint(compute, ==, e->steps * T);
  g_assert_cmpint(loop + compute + waited(&s, 0, PS_TIME_COLLECTIVE), ==, last_end(&s, 0));
  sim_clear(&s);
}

static void run_overlap(ps_time_t T, gboolean after, ps_time_t *step, ps_time_t *wait)
{
  run_overlap_on(T, after, 0, step, wait);
}

static void test_overlap(void)
{
  ps_time_t Tc, w;
  run_overlap(0, FALSE, &Tc, &w);
  g_assert_cmpint(w, ==, Tc);
  g_assert_cmpint(Tc, >, 0);
  /* compute shorter, equal to and longer than the collective */
  const ps_time_t Ts[] = {Tc / 3, Tc, 2 * Tc + 12345};
  for (guint i = 0; i < G_N_ELEMENTS(Ts); i++) {
    ps_time_t T = Ts[i], step, wait;
    run_overlap(T, FALSE, &step, &wait);
    g_test_message("overlap: Tc %" G_GINT64_FORMAT " ps, compute %" G_GINT64_FORMAT
                   " ps: step %" G_GINT64_FORMAT " ps, exposed %" G_GINT64_FORMAT " ps",
                   Tc, T, step, wait);
    g_assert_cmpint(step, ==, MAX(T, Tc));
    g_assert_cmpint(wait, ==, MAX(0, Tc - T));
    run_overlap(T, TRUE, &step, &wait);
    g_assert_cmpint(step, ==, T + Tc);
    g_assert_cmpint(wait, ==, Tc);
    /* an all-reduce the TensorCore runs itself holds the core from its
     * start: nothing overlaps it, wherever its COLL_DONE is */
    run_overlap_on(T, FALSE, 1u << PS_COLL_ALL_REDUCE, &step, &wait);
    g_assert_cmpint(step, ==, T + Tc);
    g_assert_cmpint(wait, ==, Tc);
    /* on the core are other kinds only: the all-reduce stays asynchronous */
    run_overlap_on(T, FALSE, 1u << PS_COLL_ALL_GATHER | 1u << PS_COLL_REDUCE_SCATTER, &step,
                   &wait);
    g_assert_cmpint(step, ==, MAX(T, Tc));
    g_assert_cmpint(wait, ==, MAX(0, Tc - T));
  }
}


/* ---- collective.max_in_flight ----------------------------------------- */

/* Two all-reduces of AR_BYTES over row 0's core-0 devices, started one
 * after the other, then both waited for: with max_in_flight = 1 the second
 * begins on each device when the first is done there, so (the ring being
 * symmetric and otherwise idle) each runs alone in T, the time of one, and
 * a step lasts 2 T; with no limit both start at once and share the links,
 * which hides latency: a step lasts less than 2 T. */
static ps_time_t run_two_allreduces(const char *limit, int n_colls, Sim *out)
{
  /* asynchronous collectives: the limit is what orders them */
  const char *ov[] = {torus_ov[0], torus_ov[1], torus_ov[2], "steps=2", "steps_per_run=2",
                      limit, "collective.on_core=[]", NULL};
  PsPlan *plan = ps_plan_new(16);
  int idle = add_idle(plan);
  for (int d = 0; d < 16; d++)
    plan->program_of[d] = idle;
  int c0 = add_allreduce(plan, row0_core0, GROUP_N, AR_BYTES, "first");
  int c1 = add_allreduce(plan, row0_core0, GROUP_N, AR_BYTES, "second");
  PsOp two[] = {op_coll(PS_OP_COLL_START, c0), op_coll(PS_OP_COLL_START, c1),
                op_coll(PS_OP_COLL_DONE, c0), op_coll(PS_OP_COLL_DONE, c1)};
  PsOp one[] = {op_coll(PS_OP_COLL_START, c0), op_coll(PS_OP_COLL_DONE, c0),
                op_coll(PS_OP_COLL_START, c1), op_coll(PS_OP_COLL_DONE, c1)};
  /* n_colls 1: the same two, one after the other in the program */
  int p = ps_plan_add_program(plan, n_colls == 2 ? two : one, 4);
  for (int m = 0; m < GROUP_N; m++)
    plan->program_of[row0_core0[m]] = p;
  sim_init(out, load(ov), plan);
  sim_run(out);
  ps_time_t loop = ps_time_from_s(out->exp->topology->loop_overhead_s);
  return step_end(out, row0_core0[0], 0) - loop;
}

static void test_max_in_flight(void)
{
  Sim seq, lim, free_;
  /* the program itself waits for the first before starting the second */
  ps_time_t two_T = run_two_allreduces("collective.max_in_flight=0", 1, &seq);
  ps_time_t limited = run_two_allreduces("collective.max_in_flight=1", 2, &lim);
  ps_time_t unlimited = run_two_allreduces("collective.max_in_flight=0", 2, &free_);
  g_test_message("two all-reduces: one after the other %" G_GINT64_FORMAT
                 " ps, limit 1 %" G_GINT64_FORMAT " ps, no limit %" G_GINT64_FORMAT " ps",
                 two_T, limited, unlimited);
  g_assert_cmpint(lim.exp->collective.max_in_flight, ==, 1);
  g_assert_cmpint(limited, ==, two_T);
  g_assert_cmpint(unlimited, <, two_T);
  /* limit 1: on every device the second begins when the first ends there */
  for (int m = 0; m < GROUP_N; m++) {
    ps_time_t end0 = -1, start1 = -2, start1_free = -2, start0_free = -3;
    for (guint i = 0; i < lim.rec.colls->len; i++) {
      const CollSpan *cs = &g_array_index(lim.rec.colls, CollSpan, i);
      if (cs->device == row0_core0[m] && cs->c == 0 && end0 < 0)
        end0 = cs->end;
      if (cs->device == row0_core0[m] && cs->c == 1 && start1 < -1)
        start1 = cs->start;
    }
    for (guint i = 0; i < free_.rec.colls->len; i++) {
      const CollSpan *cs = &g_array_index(free_.rec.colls, CollSpan, i);
      if (cs->device == row0_core0[m] && cs->c == 0 && start0_free < -2)
        start0_free = cs->start;
      if (cs->device == row0_core0[m] && cs->c == 1 && start1_free < -1)
        start1_free = cs->start;
    }
    g_assert_cmpint(start1, ==, end0);
    g_assert_cmpint(start1_free, ==, start0_free);
  }
  sim_clear(&seq);
  sim_clear(&lim);
  sim_clear(&free_);
  /* a bad value names the key */
  GError *error = NULL;
  const char *bad[] = {"collective.max_in_flight=-1", NULL};
  g_assert_null(ps_experiment_load(exp_path, bad, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_nonnull(strstr(error->message, "max_in_flight"));
  g_error_free(error);
}

/* ---- 4. deadlocks and invalid plans --------------------------------- */

/* Each RECVs from the other before sending. */
static void test_deadlock(void)
{
  PsPlan *plan = ps_plan_new(2);
  PsOp p0[] = {op_msg(PS_OP_RECV, 1, 0, 0, "recv from 1"),
               op_msg(PS_OP_SEND, 1, 0, 1024, "send to 1")};
  PsOp p1[] = {op_msg(PS_OP_RECV, 0, 0, 0, "recv from 0"),
               op_msg(PS_OP_SEND, 0, 0, 1024, "send to 0")};
  plan->program_of[0] = ps_plan_add_program(plan, p0, 2);
  plan->program_of[1] = ps_plan_add_program(plan, p1, 2);
  GError *error = NULL;
  g_assert_true(ps_plan_validate(plan, &error)); /* well formed, just stuck */
  g_assert_no_error(error);
  Sim s;
  sim_init(&s, load(NULL), plan);
  ps_pod_start(s.pod);
  ps_engine_run(s.engine, PS_TIME_NEVER);
  g_assert_cmpint(ps_pod_steps_done(s.pod), ==, 0);
  g_assert_false(ps_pod_check_finished(s.pod, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "device 0 "));
  g_assert_nonnull(strstr(error->message, "step 0"));
  g_assert_nonnull(strstr(error->message, "op 0"));
  g_assert_nonnull(strstr(error->message, "RECV recv from 1"));
  g_assert_nonnull(strstr(error->message, "waiting for a message"));
  g_clear_error(&error);
  /* neither got past the loop and its RECV */
  g_assert_cmpuint(s.rec.steps[0]->len, ==, 0);
  g_assert_cmpuint(s.rec.steps[1]->len, ==, 0);
  sim_clear(&s);
}

/* Two collectives started in opposite orders by their two members: valid,
 * but each waits for the other's start.  The pod is then freed with each
 * collective's round half begun and its messages parked at the member that
 * never arrived (which must neither warn nor leak). */
static void test_deadlock_collective_order(void)
{
  PsPlan *plan = ps_plan_new(2);
  const int both[] = {0, 1};
  int c0 = add_allreduce(plan, both, 2, 4096, "first");
  int c1 = add_allreduce(plan, both, 2, 4096, "second");
  PsOp p0[] = {op_coll(PS_OP_COLL_START, c0), op_coll(PS_OP_COLL_DONE, c0),
               op_coll(PS_OP_COLL_START, c1), op_coll(PS_OP_COLL_DONE, c1)};
  PsOp p1[] = {op_coll(PS_OP_COLL_START, c1), op_coll(PS_OP_COLL_DONE, c1),
               op_coll(PS_OP_COLL_START, c0), op_coll(PS_OP_COLL_DONE, c0)};
  plan->program_of[0] = ps_plan_add_program(plan, p0, 4);
  plan->program_of[1] = ps_plan_add_program(plan, p1, 4);
  g_assert_true(ps_plan_validate(plan, NULL));
  Sim s;
  const char *async[] = {"collective.on_core=[]", NULL};
  sim_init(&s, load(async), plan);
  ps_pod_start(s.pod);
  ps_engine_run(s.engine, PS_TIME_NEVER);
  GError *error = NULL;
  g_assert_false(ps_pod_check_finished(s.pod, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "device 0 "));
  g_assert_nonnull(strstr(error->message, "op 1"));
  g_assert_nonnull(strstr(error->message, "COLL_DONE done"));
  g_assert_nonnull(strstr(error->message, "waiting for a collective"));
  g_clear_error(&error);
  g_assert_cmpint(s.rec.coll_done, ==, 0);
  sim_clear(&s);
}

/* ps_plan_validate's message for a broken plan, which ps_pod_new must
 * refuse with the same error. */
static void expect_invalid(PsPlan *plan, const char *const *needles)
{
  GError *error = NULL;
  g_assert_false(ps_plan_validate(plan, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("%s", error->message);
  for (int i = 0; needles[i]; i++)
    if (!strstr(error->message, needles[i]))
      g_error("\"%s\" does not say \"%s\"", error->message, needles[i]);
  g_autofree char *msg = g_strdup(error->message);
  g_clear_error(&error);
  PsExperiment *e = load(NULL);
  PsEngine *engine = ps_engine_new();
  PsPodConfig cfg = ps_run_pod_config(e);
  PsPod *pod = ps_pod_new(engine, &cfg, plan, NULL, NULL, &error);
  g_assert_null(pod);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_cmpstr(error->message, ==, msg);
  g_clear_error(&error);
  ps_engine_free(engine);
  ps_experiment_free(e);
  ps_plan_free(plan);
}

static void test_invalid_plans(void)
{
  const int both[] = {0, 1};
  /* COLL_START without COLL_DONE on device 1 */
  {
    PsPlan *plan = ps_plan_new(2);
    int c = add_allreduce(plan, both, 2, 4096, "grads");
    PsOp ok[] = {op_coll(PS_OP_COLL_START, c), op_coll(PS_OP_COLL_DONE, c)};
    PsOp bad[] = {op_compute(PS_OP_FWD, 1000, "fwd"), op_coll(PS_OP_COLL_START, c)};
    plan->program_of[0] = ps_plan_add_program(plan, ok, 2);
    plan->program_of[1] = ps_plan_add_program(plan, bad, 2);
    expect_invalid(plan, (const char *const[]){"device 1", "grads", "never done", NULL});
  }
  /* a SEND nobody receives */
  {
    PsPlan *plan = ps_plan_new(2);
    PsOp p0[] = {op_msg(PS_OP_SEND, 1, 3, 100, "to 1"), op_msg(PS_OP_SEND, 1, 4, 100, "to 1")};
    PsOp p1[] = {op_msg(PS_OP_RECV, 0, 3, 0, "from 0")};
    plan->program_of[0] = ps_plan_add_program(plan, p0, 2);
    plan->program_of[1] = ps_plan_add_program(plan, p1, 1);
    expect_invalid(plan, (const char *const[]){"device 0", "device 1", "tag 4", NULL});
  }
  /* a COLL_START by a device that is not a member */
  {
    PsPlan *plan = ps_plan_new(3);
    int c = add_allreduce(plan, both, 2, 4096, "pair");
    PsOp ops[] = {op_coll(PS_OP_COLL_START, c), op_coll(PS_OP_COLL_DONE, c)};
    int p = ps_plan_add_program(plan, ops, 2);
    for (int d = 0; d < 3; d++)
      plan->program_of[d] = p;
    expect_invalid(plan, (const char *const[]){"device 2", "op 0", "not a member", NULL});
  }
  /* a member that never starts its collective */
  {
    PsPlan *plan = ps_plan_new(2);
    int c = add_allreduce(plan, both, 2, 4096, "pair");
    PsOp ops[] = {op_coll(PS_OP_COLL_START, c), op_coll(PS_OP_COLL_DONE, c)};
    plan->program_of[0] = ps_plan_add_program(plan, ops, 2);
    plan->program_of[1] = add_idle(plan);
    expect_invalid(plan, (const char *const[]){"device 1", "never starts", NULL});
  }
  /* a member outside the plan's devices */
  {
    PsPlan *plan = ps_plan_new(2);
    const int far[] = {0, 5};
    add_allreduce(plan, far, 2, 4096, "far");
    plan->program_of[0] = plan->program_of[1] = add_idle(plan);
    expect_invalid(plan, (const char *const[]){"far", "not a device of the plan", NULL});
  }
}

/* ---- copies to and from the host ------------------------------------ */

#define COPY_BYTES 8e6

static PsOp op_copy(PsOpKind kind, int tag, gboolean to_host)
{
  PsOp op = op_new(kind, kind == PS_OP_COPY_START ? "copy start" : "copy done");
  op.tag = tag;
  op.to_host = to_host;
  op.bytes = kind == PS_OP_COPY_START ? COPY_BYTES : 0;
  return op;
}

/* Devices `who` (n of them, -1 ends early) run `ops`, the rest idle; the
 * step of device who[0] after the loop, and its host wait per step. */
static void run_copies(const int *who, int n, const PsOp *ops, int n_ops, ps_time_t *step,
                       ps_time_t *wait)
{
  PsExperiment *e = load(NULL);
  PsPlan *plan = ps_plan_new(8);
  int idle = add_idle(plan), p = ps_plan_add_program(plan, ops, n_ops);
  for (int d = 0; d < 8; d++)
    plan->program_of[d] = idle;
  for (int i = 0; i < n; i++)
    plan->program_of[who[i]] = p;
  Sim s;
  sim_init(&s, e, plan);
  sim_run(&s);
  ps_time_t loop = ps_time_from_s(e->topology->loop_overhead_s);
  *step = step_end(&s, who[0], 0) - loop;
  for (int k = 1; k < e->steps; k++) /* the loop returns every steps_per_run = steps */
    g_assert_cmpint(step_end(&s, who[0], k) - step_end(&s, who[0], k - 1), ==, *step);
  *wait = (waited(&s, who[0], PS_TIME_HOST) - loop) / e->steps;
  sim_clear(&s);
}

static void test_copies(void)
{
  PsExperiment *e = load(NULL);
  double w = e->topology->pcie_bandwidth_Bps / e->topology->chips_per_host;
  ps_time_t one = ps_time_from_s(COPY_BYTES / w);
  ps_experiment_free(e);
  const ps_time_t Ts[] = {one / 3, 3 * one};
  for (guint i = 0; i < G_N_ELEMENTS(Ts); i++) {
    ps_time_t T = Ts[i], step, wait;
    PsOp up[] = {op_copy(PS_OP_COPY_START, 0, TRUE), op_compute(PS_OP_FWD, T, "fwd"),
                 op_copy(PS_OP_COPY_DONE, 0, TRUE)};
    run_copies((const int[]){0}, 1, up, 3, &step, &wait);
    g_test_message("copy of %g bytes at %g B/s, compute %" G_GINT64_FORMAT " ps: step %"
                   G_GINT64_FORMAT " ps, host wait %" G_GINT64_FORMAT " ps", COPY_BYTES, w, T,
                   step, wait);
    g_assert_cmpint(llabs(step - MAX(T, one)), <=, 2);
    g_assert_cmpint(llabs(wait - MAX(0, one - T)), <=, 2);
    /* the chip's two cores (devices 0 and 1) share its lanes */
    run_copies((const int[]){0, 1}, 2, up, 3, &step, &wait);
    g_assert_cmpint(llabs(step - MAX(T, 2 * one)), <=, 2);
    /* two chips (devices 0 and 2) do not */
    run_copies((const int[]){0, 2}, 2, up, 3, &step, &wait);
    g_assert_cmpint(llabs(step - MAX(T, one)), <=, 2);
    /* one way up and one down at once: each direction its own lanes */
    PsOp both[] = {op_copy(PS_OP_COPY_START, 0, TRUE), op_copy(PS_OP_COPY_START, 1, FALSE),
                   op_compute(PS_OP_FWD, T, "fwd"), op_copy(PS_OP_COPY_DONE, 1, FALSE),
                   op_copy(PS_OP_COPY_DONE, 0, TRUE)};
    run_copies((const int[]){0}, 1, both, 5, &step, &wait);
    g_assert_cmpint(llabs(step - MAX(T, one)), <=, 2);
    /* two copies up: one after the other, the first waited for alone */
    PsOp two[] = {op_copy(PS_OP_COPY_START, 0, TRUE), op_copy(PS_OP_COPY_START, 1, TRUE),
                  op_copy(PS_OP_COPY_DONE, 0, TRUE), op_compute(PS_OP_FWD, T, "fwd"),
                  op_copy(PS_OP_COPY_DONE, 1, TRUE)};
    run_copies((const int[]){0}, 1, two, 5, &step, &wait);
    g_assert_cmpint(llabs(step - MAX(one + T, 2 * one)), <=, 4);
  }
}

static void test_invalid_copies(void)
{
  struct {
    PsOp ops[3];
    int n;
    const char *needle;
  } cases[] = {
      {{op_copy(PS_OP_COPY_DONE, 0, TRUE)}, 1, "not started"},
      {{op_copy(PS_OP_COPY_START, 0, TRUE)}, 1, "never done"},
      {{op_copy(PS_OP_COPY_START, 2, TRUE), op_copy(PS_OP_COPY_DONE, 2, TRUE),
        op_copy(PS_OP_COPY_START, 2, TRUE)},
       3,
       "started twice"},
      {{op_copy(PS_OP_COPY_START, 0, TRUE), op_copy(PS_OP_COPY_DONE, 0, FALSE)},
       2,
       "other direction"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsPlan *plan = ps_plan_new(2);
    plan->program_of[0] = ps_plan_add_program(plan, cases[i].ops, cases[i].n);
    plan->program_of[1] = add_idle(plan);
    expect_invalid(plan, (const char *const[]){"device 0", cases[i].needle, NULL});
  }
}

/* ---- 5. every moment categorized ------------------------------------ */

static gint cmp_span(gconstpointer a, gconstpointer b)
{
  const Span *x = a, *y = b;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  /* zero-length spans before the one they start */
  return (x->end > y->end) - (x->end < y->end);
}

static void test_breakdown_sums(void)
{
  /* tpu-v3-8, 8 devices on one host: each takes a 4 MB batch over the
   * host's PCIe (about 62 us each, round-robin: the queues drain faster
   * than they fill), computes, all-reduces over all 8 while computing,
   * passes a message to its neighbour core, updates, outfeeds; a host loop
   * every 3 of 7 steps */
  const char *ov[] = {"steps=7", "steps_per_run=3", "collective.chunk_bytes=65536", NULL};
  PsExperiment *e = load(ov);
  const int D = 8;
  PsPlan *plan = ps_plan_new(D);
  int all[8];
  for (int d = 0; d < D; d++)
    all[d] = d;
  int c = add_allreduce(plan, all, D, 1 << 20, "grads");
  for (int d = 0; d < D; d++) {
    PsOp in = op_compute(PS_OP_INFEED, ps_time_from_s(e->topology->op_overhead_s), "infeed");
    in.batch = 4;
    in.bytes = 4e6;
    int peer = d ^ 1;
    PsOp out = op_compute(PS_OP_OUTFEED, 1000, "outfeed");
    out.bytes = 4096;
    /* odd devices compute longer, so even ones wait for their message */
    ps_time_t fwd = ps_time_from_s(d % 2 ? 40e-6 : 25e-6);
    PsOp ops[] = {in,
                  op_compute(PS_OP_FWD, fwd, "fwd"),
                  op_coll(PS_OP_COLL_START, c),
                  op_compute(PS_OP_BWD, ps_time_from_s(10e-6), "bwd"),
                  op_msg(PS_OP_SEND, peer, 7, 300e3, "activations out"),
                  op_msg(PS_OP_RECV, peer, 7, 0, "activations in"),
                  op_coll(PS_OP_COLL_DONE, c),
                  op_compute(PS_OP_UPDATE, ps_time_from_s(5e-6), "update"),
                  out};
    plan->program_of[d] = ps_plan_add_program(plan, ops, G_N_ELEMENTS(ops));
  }
  Sim s;
  sim_init(&s, e, plan);
  sim_run(&s);
  ps_time_t by_cat[PS_TIME_N_CATEGORIES] = {0};
  for (int d = 0; d < D; d++) {
    GArray *a = s.rec.spans[d];
    g_array_sort(a, cmp_span);
    ps_time_t at = 0, sum = 0;
    for (guint i = 0; i < a->len; i++) {
      const Span *sp = &g_array_index(a, Span, i);
      if (sp->start != at)
        g_error("device %d: %s \"%s\" [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] does not "
                "start where the previous span ended (%" G_GINT64_FORMAT ")", d,
                sp->wait ? "wait" : "op", sp->what, sp->start, sp->end, at);
      at = sp->end;
      sum += sp->end - sp->start;
      by_cat[sp->cat] += sp->end - sp->start;
    }
    g_assert_cmpint(at, ==, last_end(&s, d));
    g_assert_cmpint(sum, ==, last_end(&s, d));
    /* op_done once per op and step */
    int ops = 0;
    for (guint i = 0; i < a->len; i++)
      ops += !g_array_index(a, Span, i).wait;
    g_assert_cmpint(ops, ==, 9 * e->steps);
  }
  for (int k = 0; k < PS_TIME_N_CATEGORIES; k++)
    g_test_message("%-16s %" G_GINT64_FORMAT " ps over all devices", ps_time_category_name(k),
                   by_cat[k]);
  /* the plan exercises every category */
  for (int k = 0; k < PS_TIME_N_CATEGORIES; k++)
    g_assert_cmpint(by_cat[k], >, 0);
  sim_clear(&s);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  tmpdir = scratch_dir("podsim-test-exec");
  exp_path = scratch_write(tmpdir, "exec.json", exp_json);
  g_test_add_func("/exec/ping-pong", test_ping_pong);
  g_test_add_func("/exec/disjoint-groups-concurrent", test_disjoint_groups);
  g_test_add_func("/exec/overlap", test_overlap);
  g_test_add_func("/exec/max-in-flight", test_max_in_flight);
  g_test_add_func("/exec/deadlock", test_deadlock);
  g_test_add_func("/exec/deadlock/collective-order", test_deadlock_collective_order);
  g_test_add_func("/exec/invalid-plans", test_invalid_plans);
  g_test_add_func("/exec/breakdown-sums", test_breakdown_sums);
  g_test_add_func("/exec/copies", test_copies);
  g_test_add_func("/exec/invalid-copies", test_invalid_copies);
  int rc = g_test_run();
  scratch_remove(tmpdir);
  g_free(exp_path);
  g_free(tmpdir);
  return rc;
}

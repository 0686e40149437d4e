/* test_run.c: whole runs, checked against the acceptance figures
 * and against closed forms of the cost model.
 *
 * - the default experiment (the CNN data-parallel on the 8 cores of a
 *   v3-8, bf16, one epoch of Fashion-MNIST) reaches >= 89% test accuracy,
 *   the loss falls, the replicas end bit-identical, and its trace shows
 *   the 8 cores, their infeed queues and a bucket's all-reduce running
 *   while backward still computes;
 * - the trace parses, holds fwd/bwd/update complete events that never
 *   overlap on the core's track, and the infeed depth counter never exceeds
 *   the queue's capacity;
 * - two runs with the same seed write byte-identical traces;
 * - the step time equals the sum of the roofline op costs plus the host
 *   loop overhead amortized over steps_per_run (picosecond exact);
 * - MXU padding: a 100-wide layer costs exactly what a 128-wide one does;
 * - a host slower than the core stalls the core by the closed form.
 * (timing checks run with numerics off; time never depends on them) */
#include "hw/cost.h"
#include "io/config.h"
#include "run/run.h"
#include "run/experiment.h"
#include "support/experiment.h"
#include "support/cli.h"
#include "strategy/strategy-private.h"


#include <glib/gstdio.h>
#include <json-c/json.h>
#include <math.h>
#include <string.h>

/* The keys the replicate and pipeline strategies read (white box). */
static const PsReplicaConfig *replica_config(const PsExperiment *e)
{
  return e->strategy.config;
}

static char *tmpdir;

static char *write_experiment(const char *name, const char *json)
{
  return scratch_write(tmpdir, name, json);
}

/* Events of one kind on one track, sorted by start time. */
typedef struct {
  double ts, dur;
  const char *name;
} Slice;

static gint cmp_slice(gconstpointer a, gconstpointer b)
{
  const Slice *x = a, *y = b;
  return (x->ts > y->ts) - (x->ts < y->ts);
}

/* The default experiment's summary: accuracy, loss, replicas, breakdown. */
static void check_default_summary(const PsSummary *s)
{
  g_test_message("test accuracy %.4f, loss %.4f -> %.4f", s->test_accuracy, s->loss_first,
                 s->loss_last);
  g_assert_true(s->has_accuracy);
  g_assert_cmpfloat(s->test_accuracy, >=, 0.89);
  g_assert_cmpfloat(s->loss_last, <, 0.5 * s->loss_first);
  g_assert_cmpint(s->replicas, ==, 8);
  g_assert_cmpint(s->buckets, >=, 2);
  g_assert_cmpfloat(s->replica_divergence, ==, 0.0);
  g_assert_cmpfloat(s->breakdown[PS_TIME_COLLECTIVE], >, 0);

  /* the breakdown accounts for the whole step */
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
    g_assert_cmpfloat(s->breakdown[c], >=, -1e-15);
    sum += s->breakdown[c];
  }
  g_assert_cmpfloat(fabs(sum - s->step_time_s), <, 1e-9 * s->step_time_s);
  g_assert_cmpfloat(s->breakdown[PS_TIME_COMPUTE], >, 0);
}

/* What the default trace's events say, gathered in one pass. */
typedef struct {
  GArray *core;  /* Slice: chip 0 core 0's own track */
  GArray *colls; /* Slice: chip 0's collectives */
  int fwd, bwd, upd, counters;
  GHashTable *core_tracks; /* "pid/tid" of the cores' own tracks */
} DefaultTrace;

static void scan_default_event(DefaultTrace *t, json_object *ev, const PsExperiment *e)
{
  const char *ph = json_object_get_string(json_object_object_get(ev, "ph"));
  int pid = json_object_get_int(json_object_object_get(ev, "pid"));
  const char *name = json_object_get_string(json_object_object_get(ev, "name"));
  if (strcmp(ph, "C") == 0 && g_str_has_prefix(name, "infeed queue")) {
    json_object *args = json_object_object_get(ev, "args");
    json_object *v = NULL;
    json_object_object_get_ex(args, "value", &v);
    g_assert_nonnull(v);
    double depth = json_object_get_double(v);
    g_assert_cmpfloat(depth, >=, 0);
    g_assert_cmpfloat(depth, <=, e->input.infeed_capacity);
    t->counters++;
  }
  if (strcmp(ph, "X") != 0)
    return;
  int tid = json_object_get_int(json_object_object_get(ev, "tid"));
  Slice sl = {json_object_get_double(json_object_object_get(ev, "ts")),
              json_object_get_double(json_object_object_get(ev, "dur")), name};
  if (pid < 100 && tid < 2) /* a core's own track: chips 1..4, cores 0..1 */
    g_hash_table_add(t->core_tracks, g_strdup_printf("%d/%d", pid, tid));
  if (pid == 1 && tid >= 100 && g_str_has_prefix(name, "all-reduce"))
    g_array_append_val(t->colls, sl);
  if (pid != 1 || tid != 0)
    return;
  g_array_append_val(t->core, sl);
  t->fwd += g_str_has_prefix(name, "fwd ");
  t->bwd += g_str_has_prefix(name, "bwd ");
  t->upd += strcmp(name, "apply update") == 0;
}

/* Some all-reduce of core 0 overlaps one of its backward ops. */
static gboolean coll_overlaps_backward(const DefaultTrace *t)
{
  for (guint i = 0; i < t->colls->len; i++) {
    const Slice *c = &g_array_index(t->colls, Slice, i);
    for (guint k = 0; k < t->core->len; k++) {
      const Slice *b = &g_array_index(t->core, Slice, k);
      if (g_str_has_prefix(b->name, "bwd ") && b->ts < c->ts + c->dur &&
          c->ts < b->ts + b->dur)
        return TRUE;
    }
  }
  return FALSE;
}

static void check_default_trace(const char *trace, const PsExperiment *e)
{
  json_object *root = json_object_from_file(trace);
  g_assert_nonnull(root);
  json_object *events = json_object_object_get(root, "traceEvents");
  g_assert_true(json_object_is_type(events, json_type_array));
  DefaultTrace t = {.core = g_array_new(FALSE, FALSE, sizeof(Slice)),
                    .colls = g_array_new(FALSE, FALSE, sizeof(Slice)),
                    .core_tracks = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
  for (size_t i = 0; i < json_object_array_length(events); i++)
    scan_default_event(&t, json_object_array_get_idx(events, i), e);
  g_assert_cmpint(t.upd, ==, e->steps);
  g_assert_cmpint(t.fwd, >=, e->steps);
  g_assert_cmpint(t.bwd, ==, t.fwd);
  g_assert_cmpint(t.counters, >=, 2 * e->steps);
  g_assert_cmpint(g_hash_table_size(t.core_tracks), ==, 8);
  g_assert_true(coll_overlaps_backward(&t));
  g_array_free(t.colls, TRUE);
  g_hash_table_destroy(t.core_tracks);
  g_array_sort(t.core, cmp_slice);
  for (guint i = 1; i < t.core->len; i++) {
    const Slice *a = &g_array_index(t.core, Slice, i - 1), *b = &g_array_index(t.core, Slice, i);
    /* microseconds printed with 6 decimals: exact to the picosecond, but
     * read back as doubles, so allow one rounding step */
    g_assert_cmpfloat(a->ts + a->dur, <=, b->ts + 1e-6);
  }
  g_array_free(t.core, TRUE);
  json_object_put(root);
}

/* One epoch of the default experiment (slow: `make test-slow`, -m thorough). */
static void test_default_epoch(void)
{
  g_autofree char *trace = g_build_filename(tmpdir, "default.json", NULL);
  PsExperiment *e = experiment_load("default", NULL);
  g_assert_cmpint(e->numerics.enabled, ==, TRUE);
  g_assert_cmpint(e->numerics.precision, ==, PS_PRECISION_BF16);
  g_assert_cmpint(e->input.source, ==, PS_SOURCE_FASHION_MNIST);
  g_assert_cmpstr(e->model->name, ==, "cnn");
  g_assert_cmpint(ps_experiment_devices_used(e), ==, ps_topology_devices(e->topology));
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 8);
  /* one epoch */
  g_assert_cmpint(e->steps, ==, (60000 + e->global_batch - 1) / e->global_batch);
  PsRunOptions opt = {.trace_path = trace, .log = NULL};
  PsSummary s;
  GError *error = NULL;
  g_assert_true(ps_run(e, &opt, &s, &error));
  g_assert_no_error(error);
  check_default_summary(&s);
  check_default_trace(trace, e);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static const char *synthetic_json =
    "{\"name\": \"small\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\","
    " \"global_batch\": 32, \"steps\": 20, \"steps_per_run\": 5,"
    " \"strategy\": {\"replicas\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 640,"
    "             \"host_cost_per_example_s\": 0, \"workers\": 4},"
    " \"numerics\": {\"enabled\": true, \"seed\": 7}}";

static void test_deterministic_trace(void)
{
  g_autofree char *exp_path = write_experiment("small.json", synthetic_json);
  g_autofree char *t1 = g_build_filename(tmpdir, "a.json", NULL);
  g_autofree char *t2 = g_build_filename(tmpdir, "b.json", NULL);
  PsSummary s1, s2;
  /* the training steps are the point, not the test-set evaluation */
  const char *quiet[] = {"numerics.evaluate=false", NULL};
  for (int i = 0; i < 2; i++) {
    PsExperiment *e = experiment_load(exp_path, quiet);
    PsRunOptions opt = {.trace_path = i ? t2 : t1};
    GError *error = NULL;
    g_assert_true(ps_run(e, &opt, i ? &s2 : &s1, &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  g_autofree char *a = NULL, *b = NULL;
  gsize la, lb;
  g_assert_true(g_file_get_contents(t1, &a, &la, NULL));
  g_assert_true(g_file_get_contents(t2, &b, &lb, NULL));
  g_assert_cmpuint(la, ==, lb);
  g_assert_true(memcmp(a, b, la) == 0);
  g_assert_cmpfloat(s1.loss_last, ==, s2.loss_last);
  g_assert_cmpfloat(s1.step_time_s, ==, s2.step_time_s);
  /* a different seed changes the numbers but not the time */
  const char *ov[] = {"numerics.seed=8", "numerics.evaluate=false", NULL};
  PsExperiment *e = experiment_load(exp_path, ov);
  PsSummary s3;
  GError *error = NULL;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &s3, &error));
  g_assert_cmpfloat(s3.loss_last, !=, s1.loss_last);
  g_assert_cmpfloat(s3.step_time_s, ==, s1.step_time_s);
  ps_experiment_free(e);
}

/* With an instant host and numerics off, a step is its ops back to back:
 * infeed dequeue (op overhead), each FWD/BWD op, the update, the outfeed;
 * plus one host loop overhead per steps_per_run steps. */
static void test_step_time_closed_form(void)
{
  g_autofree char *exp_path = write_experiment("closed.json", synthetic_json);
  const char *ov[] = {"numerics.enabled=false", "steps=40", "steps_per_run=8",
                      "topology.host.loop_overhead_s=1e-3", NULL};
  PsExperiment *e = experiment_load(exp_path, ov);
  const PsTopology *t = e->topology;
  GError *error = NULL;
  PsPlan *plan = ps_run_compile(e, &error);
  g_assert_no_error(error);
  ps_time_t step = 0;
  const PsProgram *p = ps_plan_program(plan, 0);
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    PsOpCost c;
    switch (op->kind) {
    case PS_OP_INFEED:
      step += ps_time_from_s(t->op_overhead_s);
      break;
    case PS_OP_FWD:
    case PS_OP_BWD:
      ps_cost_layers(t, e->model, op->first, op->last, op->batch, e->numerics.precision,
                     e->fuse_elementwise, op->kind == PS_OP_BWD, &c);
      step += c.time;
      break;
    case PS_OP_UPDATE:
      ps_cost_update(t, e->model->params, ps_lower_optimizer_slots(e), &c);
      step += c.time;
      break;
    case PS_OP_OUTFEED: /* queued for the host, which drains it in the background */
      step += ps_time_from_s(t->op_overhead_s);
      break;
    default:
      g_assert_not_reached();
    }
  }
  PsSummary s;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &s, &error));
  g_assert_no_error(error);
  /* warm-up is the first loop; 4 loops of 8 steps are measured */
  g_assert_cmpint(s.measured_steps, ==, 32);
  double want = ps_time_to_s(step) + 1e-3 / 8;
  g_test_message("step %.9g s, closed form %.9g s", s.step_time_s, want);
  g_assert_cmpfloat(fabs(s.step_time_s - want), <, 1e-15);
  g_assert_cmpfloat(fabs(s.breakdown[PS_TIME_HOST] - (1e-3 / 8 + t->op_overhead_s)), <, 1e-15);
  /* the summary's amortized loop cost is overhead / steps_per_run */
  g_assert_cmpfloat(fabs(s.host_loop_s - 1e-3 / 8), <, 1e-15);
  g_assert_cmpfloat(s.breakdown[PS_TIME_INFEED_STALL], ==, 0);
  ps_plan_free(plan);
  ps_experiment_free(e);
}

/* A dense layer of 100 outputs costs what a 128-wide one does on the MXU;
 * a 129-wide one costs as much as 256. */
static void test_mxu_padding(void)
{
  const char *tmpl =
      "{\"name\": \"w\", \"input\": {\"shape\": [512], \"classes\": 10}, \"layers\": ["
      "{\"type\": \"dense\", \"units\": %d, \"bias\": false}, {\"type\": \"dense\", "
      "\"units\": 10}, {\"type\": \"softmax_xent\"}]}";
  g_autofree char *tp = NULL;
  GError *error = NULL;
  PsTopology *t = ps_topology_load("tpu-v3-8", (const char *const[]){
      "chip.op_overhead_s=0", "chip.hbm_bandwidth_Bps=1e18", "chip.mxu_efficiency=1",
      NULL}, &error);
  g_assert_no_error(error);
  double times[4];
  int widths[] = {100, 128, 129, 256};
  for (int i = 0; i < 4; i++) {
    g_autofree char *text = g_strdup_printf(tmpl, widths[i]);
    g_autofree char *name = g_strdup_printf("w%d.json", widths[i]);
    g_autofree char *path = write_experiment(name, text);
    PsModel *m = ps_model_load_file(path, &error);
    g_assert_no_error(error);
    PsOpCost c;
    ps_cost_layers(t, m, 0, 0, 64, PS_PRECISION_BF16, TRUE, FALSE, &c);
    times[i] = ps_time_to_s(c.time);
    /* closed form: 2 * pad8(64) * pad128(512) * pad128(w) / peak */
    double n_pad = widths[i] <= 128 ? 128 : 256;
    double want = 2.0 * 64 * 512 * n_pad / (ps_topology_device_peak_flops(t) * t->mxu_efficiency);
    g_assert_cmpfloat(fabs(times[i] - want), <, 1e-12);
    g_assert_cmpfloat(c.mxu_flops, ==, 2.0 * 64 * 512 * widths[i]);
    ps_model_free(m);
  }
  g_assert_cmpfloat(times[0], ==, times[1]);
  g_assert_cmpfloat(times[2], ==, times[3]);
  g_assert_cmpfloat(times[2], ==, 2 * times[1]);
  ps_topology_free(t);
}

/* Host slower than the core: each batch takes P = b * c / w to prepare
 * and the core needs C < P per step, so in steady state a step lasts P and
 * the core stalls P - C - (transfer overlap is hidden) per step. */
static void test_infeed_stall_closed_form(void)
{
  g_autofree char *exp_path = write_experiment("stall.json", synthetic_json);
  const char *ov[] = {"numerics.enabled=false", "steps=30", "steps_per_run=10",
                      "input.host_cost_per_example_s=1e-5", "input.workers=4",
                      "topology.host.loop_overhead_s=0", NULL};
  PsExperiment *e = experiment_load(exp_path, ov);
  PsSummary fast, slow;
  GError *error = NULL;
  /* the same run with an instant host gives the core's own step time C */
  const char *ov_fast[] = {"numerics.enabled=false", "steps=30", "steps_per_run=10",
                           "input.host_cost_per_example_s=0", "topology.host.loop_overhead_s=0",
                           NULL};
  PsExperiment *ef = experiment_load(exp_path, ov_fast);
  g_assert_true(ps_run(ef, &(PsRunOptions){0}, &fast, &error));
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &slow, &error));
  g_assert_no_error(error);
  double P = 32 * 1e-5 / 4; /* 32 examples x 10 us over 4 workers */
  double C = fast.step_time_s;
  g_assert_cmpfloat(C, <, P);
  g_test_message("core %.3g s/step, host %.3g s/batch, simulated %.3g s/step", C, P,
                 slow.step_time_s);
  /* Batch k is ready at (k+1)P and on the device T later, so step k ends
   * at (k+1)P + T + C: after the warm-up loop (which holds the fill) a step
   * lasts exactly P, of which P - C is spent waiting for infeed. */
  g_assert_cmpint(slow.measured_steps, ==, 20);
  g_assert_cmpfloat(fabs(slow.step_time_s - P), <, 1e-15);
  g_assert_cmpfloat(fabs(slow.breakdown[PS_TIME_INFEED_STALL] - (P - C)), <, 1e-15);
  ps_experiment_free(e);
  ps_experiment_free(ef);
}

/* Outside compilation with nothing else on PCIe (all batches are in the
 * infeed queues before the first step): each call costs exactly the
 * tensor's trip up, the host's work on one CPU thread, and the result's
 * trip down. */
static void test_host_call_closed_form(void)
{
  g_autofree char *exp_path = write_experiment("call.json", synthetic_json);
  const char *base[] = {"numerics.enabled=false", "steps=8", "steps_per_run=8",
                        "input.infeed_capacity=8", "input.prefetch=8",
                        "topology.host.loop_overhead_s=1e-3", NULL};
  const char *with[] = {"numerics.enabled=false", "steps=8", "steps_per_run=8",
                        "input.infeed_capacity=8", "input.prefetch=8",
                        "topology.host.loop_overhead_s=1e-3",
                        "outside_compilation=[{\"after\": \"relu1\", \"kind\": \"histogram\","
                        " \"bins\": 16, \"flops_per_element\": 5}]",
                        NULL};
  PsExperiment *e0 = experiment_load(exp_path, base), *e1 = experiment_load(exp_path, with);
  PsSummary s0, s1;
  GError *error = NULL;
  g_assert_true(ps_run(e0, &(PsRunOptions){0}, &s0, &error));
  g_assert_true(ps_run(e1, &(PsRunOptions){0}, &s1, &error));
  g_assert_no_error(error);
  const PsTopology *t = e1->topology;
  double elems = 32.0 * 256; /* batch x relu1's width */
  ps_time_t up = ps_cost_pcie(t, elems * 4), down = ps_cost_pcie(t, 16 * 4.0);
  ps_time_t work = ps_time_from_s(elems * 5 / (t->cpu_flops / t->cpu_threads));
  double want = ps_time_to_s(up + work + down);
  double got = s1.step_time_s - s0.step_time_s;
  g_test_message("host call %.6g s per step, closed form %.6g s", got, want);
  g_assert_cmpfloat(fabs(got - want), <, 1e-15);
  g_assert_cmpfloat(fabs((s1.breakdown[PS_TIME_HOST] - s0.breakdown[PS_TIME_HOST]) - want), <,
                    1e-15);
  g_assert_nonnull(s1.host_calls_json);
  ps_summary_clear(&s0);
  ps_summary_clear(&s1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

/* With numerics on, the host really computes the histogram of the ReLU's
 * output: it counts every element once and sees no negative value. */
static void test_host_call_numerics(void)
{
  g_autofree char *exp_path = write_experiment("calln.json", synthetic_json);
  const char *ov[] = {"steps=3", "outside_compilation=[{\"after\": \"relu1\", \"bins\": 8}]",
                      NULL};
  PsExperiment *e = experiment_load(exp_path, ov);
  PsSummary s;
  GError *error = NULL;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &s, &error));
  g_assert_no_error(error);
  json_object *arr = json_tokener_parse(s.host_calls_json);
  g_assert_nonnull(arr);
  json_object *call = json_object_array_get_idx(arr, 0);
  json_object *counts = json_object_object_get(call, "last_histogram");
  g_assert_cmpuint(json_object_array_length(counts), ==, 8);
  int64_t total = 0;
  for (size_t b = 0; b < 8; b++)
    total += json_object_get_int64(json_object_array_get_idx(counts, b));
  g_assert_cmpint(total, ==, 32 * 256);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(call, "min")), >=, 0.0);
  g_assert_cmpfloat(json_object_get_double(json_object_object_get(call, "max")), >, 0.0);
  json_object_put(arr);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

/* Data parallelism is only a change of where the arithmetic runs: with a
 * "mean" loss reduction, 4 replicas of 8 examples each train exactly as 1
 * replica of 32 (the loss is scaled by 1/4 and the gradients summed over
 * the interconnect), up to float rounding; "sum" takes 4x larger steps and
 * visibly diverges. */
static void test_replicas_match_single(void)
{
  g_autofree char *exp_path = write_experiment("rep.json", synthetic_json);
  const char *one[] = {"steps=12", "optimizer.kind=\"sgd\"", "optimizer.learning_rate=0.05",
                       NULL};
  const char *four[] = {"steps=12", "optimizer.kind=\"sgd\"", "optimizer.learning_rate=0.05",
                        "strategy.replicas=4", NULL};
  const char *four_sum[] = {"steps=12", "optimizer.kind=\"sgd\"", "optimizer.learning_rate=0.05",
                            "strategy.replicas=4", "strategy.loss_reduction=\"sum\"", NULL};
  PsSummary s1, s4, s4s;
  GError *error = NULL;
  PsExperiment *e1 = experiment_load(exp_path, one), *e4 = experiment_load(exp_path, four),
               *e4s = experiment_load(exp_path, four_sum);
  g_assert_true(ps_run(e1, &(PsRunOptions){0}, &s1, &error));
  g_assert_true(ps_run(e4, &(PsRunOptions){0}, &s4, &error));
  g_assert_true(ps_run(e4s, &(PsRunOptions){0}, &s4s, &error));
  g_assert_no_error(error);
  g_test_message("loss after 12 steps: 1 replica %.7f, 4 replicas mean %.7f, sum %.7f",
                 s1.loss_last, s4.loss_last, s4s.loss_last);
  /* the same first batch: the mean of 4 replica means equals the mean of 32 */
  g_assert_cmpfloat(fabs(s4.loss_first - s1.loss_first), <, 1e-6 * s1.loss_first);
  g_assert_cmpfloat(fabs(s4.loss_last - s1.loss_last), <, 1e-5 * s1.loss_last);
  g_assert_cmpfloat(fabs(s4.test_accuracy - s1.test_accuracy), <=, 2e-4);
  g_assert_cmpfloat(fabs(s4s.loss_last - s1.loss_last), >, 1e-3 * s1.loss_last);
  g_assert_nonnull(s4.collective_algorithm);
  g_assert_cmpfloat(s4.breakdown[PS_TIME_COLLECTIVE], >, 0);
  ps_experiment_free(e1);
  ps_experiment_free(e4);
  ps_experiment_free(e4s);
}

/* Every shipped experiment's summary adds up: each breakdown category is
 * >= 0, they sum to the step time, the host loop is part of `host`, and
 * examples/s is the global batch over the step.  Timing only, a few steps
 * in loops of 2 so the warm-up loop is left out. */
static void test_shipped_summaries(void)
{
  char **names = ps_config_list("experiments");
  g_assert_nonnull(names);
  int n = 0;
  for (int i = 0; names[i]; i++) {
    const char *const ov[] = {"numerics.enabled=false", "steps_per_run=2", "steps=4", NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load(names[i], ov, &error);
    if (!e)
      g_error("%s: %s", names[i], error->message);
    PsSummary s;
    if (!ps_run(e, &(PsRunOptions){0}, &s, &error))
      g_error("%s: %s", names[i], error->message);
    double sum = 0;
    for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
      g_assert_cmpfloat(s.breakdown[c], >=, 0.0);
      sum += s.breakdown[c];
    }
    if (fabs(sum - s.step_time_s) > 1e-9 * s.step_time_s + 1e-12)
      g_error("%s: breakdown sums to %.9g s, step %.9g s", names[i], sum, s.step_time_s);
    g_assert_cmpfloat(s.host_loop_s, <=, s.breakdown[PS_TIME_HOST] * (1 + 1e-12) + 1e-15);
    g_assert_cmpfloat(fabs(s.examples_per_s * s.step_time_s - (double)e->global_batch), <=,
                      1e-9 * (double)e->global_batch);
    ps_summary_clear(&s);
    ps_experiment_free(e);
    n++;
  }
  g_assert_cmpint(n, >=, 10);
  g_strfreev(names);
}

/* The trace-size estimate --trace-max acts on (ps_run_trace_estimate) is
 * no less than the trace written and no more than 1.6 times it (2.5 with
 * every link chunk, whose count is coarser): on a data-parallel run, the
 * same with links, a pipeline with links, two language models' (a
 * pipeline, a mesh), whose ops' names and figures make longer lines, and
 * host calls and a decoder's chunks, lines it leaves out. */
static void test_trace_estimate(void)
{
  struct {
    const char *name;
    const char *ov[5];
    gboolean links;
  } cases[] = {
      {"resnet50-v3-8", {"steps=2", "steps_per_run=2", NULL}, FALSE},
      {"resnet50-v3-8", {"steps=2", "steps_per_run=2", NULL}, TRUE},
      {"vit-pipeline", {"steps=3", "numerics.enabled=false", NULL}, TRUE},
      {"default", {"steps=30", NULL}, FALSE},
      {"gpipe-transformer", {"steps=2", "numerics.enabled=false", NULL}, FALSE},
      {"shard-llama2-7b", {"steps=1", NULL}, FALSE},
      /* host calls, and a decoder's link chunks: lines the count leaves out */
      {"mlp-outside-compilation", {"steps=2", NULL}, FALSE},
      {"mlp-outside-compilation", {"steps=2", NULL}, TRUE},
      {"char-decoder-v4-8", {"steps=2", "numerics.enabled=false", NULL}, TRUE},
  };
  g_autofree char *path = g_build_filename(tmpdir, "estimate.json", NULL);
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsExperiment *e = experiment_load(cases[i].name, cases[i].ov);
    PsRunOptions opt = {.trace_path = path, .trace_links = cases[i].links};
    PsSummary s;
    GError *error = NULL;
    g_assert_true(ps_run(e, &opt, &s, &error));
    g_assert_no_error(error);
    GStatBuf st;
    g_assert_cmpint(g_stat(path, &st), ==, 0);
    double ratio = (double)s.trace_estimate_bytes / (double)st.st_size;
    g_test_message("%s%s: estimate %" G_GINT64_FORMAT " bytes, trace %lld: x%.2f",
                   cases[i].name, cases[i].links ? " --trace-links" : "",
                   s.trace_estimate_bytes, (long long)st.st_size, ratio);
    g_assert_cmpfloat(ratio, >=, 1.0);
    g_assert_cmpfloat(ratio, <=, cases[i].links ? 2.5 : 1.6);
    ps_summary_clear(&s);
    ps_experiment_free(e);
    g_unlink(path);
  }
}

/* Every track a trace draws on has a name, and a host's tracks past its
 * first of each lane are named only where something is drawn: the 32
 * devices of shard-llama2-7b in float32 (timing only; its last weight
 * gradients' reduce-scatter ends the step on every device) outfeed at the same instant at
 * the end of the step, four to a host, on sub-lanes "outfeed (2)" ..
 * "(4)" of each host (past eight such sub-lanes they were once left
 * bare, and a lane's sub-lanes were numbered across hosts, naming
 * thousands of empty tracks). */
static void test_trace_tracks_named(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "named.json", NULL);
  const char *const ov[] = {"steps=1", "numerics.precision=f32", NULL};
  PsExperiment *e = experiment_load("shard-llama2-7b", ov);
  PsRunOptions opt = {.trace_path = path};
  PsSummary s;
  GError *error = NULL;
  g_assert_true(ps_run(e, &opt, &s, &error));
  g_assert_no_error(error);
  json_object *root = json_object_from_file(path);
  json_object *events = json_object_object_get(root, "traceEvents");
  GHashTable *named = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
  GHashTable *drawn = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
  int max_host_tid = 0;
  for (size_t i = 0; i < json_object_array_length(events); i++) {
    json_object *ev = json_object_array_get_idx(events, i);
    const char *ph = json_object_get_string(json_object_object_get(ev, "ph"));
    const char *name = json_object_get_string(json_object_object_get(ev, "name"));
    int pid = json_object_get_int(json_object_object_get(ev, "pid"));
    int tid = json_object_get_int(json_object_object_get(ev, "tid"));
    gint64 *key = g_new(gint64, 1);
    *key = (gint64)pid * 100000 + tid;
    if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0)
      g_hash_table_add(named, key);
    else if (strcmp(ph, "X") == 0) {
      g_hash_table_add(drawn, key);
      if (pid >= 100000)
        max_host_tid = MAX(max_host_tid, tid);
    } else
      g_free(key);
  }
  GHashTableIter it;
  gpointer k;
  g_hash_table_iter_init(&it, drawn);
  while (g_hash_table_iter_next(&it, &k, NULL))
    if (!g_hash_table_contains(named, k))
      g_error("a slice on unnamed track pid %d tid %d", (int)(*(gint64 *)k / 100000),
              (int)(*(gint64 *)k % 100000));
  /* a host's first track of each lane is named with the host; the others
   * only where drawn on */
  g_hash_table_iter_init(&it, named);
  while (g_hash_table_iter_next(&it, &k, NULL)) {
    gint64 key = *(gint64 *)k;
    if (key / 100000 >= 100000 && key % 100000 >= PS_HOST_N_LANES &&
        !g_hash_table_contains(drawn, k))
      g_error("an empty named track pid %d tid %d", (int)(key / 100000), (int)(key % 100000));
  }
  g_assert_cmpint(max_host_tid, >=, PS_HOST_N_LANES); /* sub-lanes were drawn on */
  g_hash_table_destroy(named);
  g_hash_table_destroy(drawn);
  json_object_put(root);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  g_unlink(path);
}

/* On a collective's track, the time until the round's last member began
 * is a slice of its own inside the collective's: same start, ending when
 * the last device's slice of that collective and step starts.  ResNet-50
 * on tpu-v3-8, step 0, where the hosts feed the cores one after another. */
static void test_trace_waiting_for_peers(void)
{
  g_autofree char *path = g_build_filename(tmpdir, "peers.json", NULL);
  const char *const ov[] = {"steps=1", "steps_per_run=1", NULL};
  PsExperiment *e = experiment_load("resnet50-v3-8", ov);
  PsRunOptions opt = {.trace_path = path};
  PsSummary s;
  GError *error = NULL;
  g_assert_true(ps_run(e, &opt, &s, &error));
  json_object *root = json_object_from_file(path);
  json_object *events = json_object_object_get(root, "traceEvents");
  /* per collective name: the latest start over devices; per (pid, tid,
   * start): the collective slice's end */
  GHashTable *last_start = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  typedef struct {
    double v[4]; /* pid, tid, ts, end */
  } Row;
  GArray *waits = g_array_new(FALSE, FALSE, sizeof(Row));
  GArray *colls = g_array_new(FALSE, FALSE, sizeof(Row));
  for (size_t i = 0; i < json_object_array_length(events); i++) {
    json_object *ev = json_object_array_get_idx(events, i);
    if (strcmp(json_object_get_string(json_object_object_get(ev, "ph")), "X") != 0)
      continue;
    const char *cat = json_object_get_string(json_object_object_get(ev, "cat"));
    const char *name = json_object_get_string(json_object_object_get(ev, "name"));
    Row rw = {{json_object_get_int(json_object_object_get(ev, "pid")),
               json_object_get_int(json_object_object_get(ev, "tid")),
               json_object_get_double(json_object_object_get(ev, "ts")), 0}};
    double *row = rw.v;
    row[3] = row[2] + json_object_get_double(json_object_object_get(ev, "dur"));
    if (cat && strcmp(cat, "collective") == 0) {
      g_array_append_val(colls, rw);
      double *ls = g_hash_table_lookup(last_start, name);
      if (!ls)
        g_hash_table_insert(last_start, g_strdup(name), g_memdup2(&row[2], sizeof(double)));
      else if (row[2] > *ls)
        *ls = row[2];
    } else if (g_str_has_prefix(name, "waiting for peers")) {
      g_array_append_val(waits, rw);
    }
  }
  g_assert_cmpuint(waits->len, >, 0);
  for (guint i = 0; i < waits->len; i++) {
    const double *w = g_array_index(waits, Row, i).v;
    gboolean inside = FALSE;
    for (guint k = 0; k < colls->len && !inside; k++) {
      const double *c = g_array_index(colls, Row, k).v;
      inside = c[0] == w[0] && c[1] == w[1] && c[2] == w[2] && w[3] <= c[3];
    }
    g_assert_true(inside);
    /* it ends as the last device began: one of the collectives' latest starts */
    gboolean matches = FALSE;
    GHashTableIter it;
    gpointer v;
    g_hash_table_iter_init(&it, last_start);
    while (g_hash_table_iter_next(&it, NULL, &v))
      matches |= fabs(*(double *)v - w[3]) < 2e-3;
    g_assert_true(matches);
  }
  g_array_free(waits, TRUE);
  g_array_free(colls, TRUE);
  g_hash_table_destroy(last_start);
  json_object_put(root);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  g_unlink(path);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  tmpdir = scratch_dir("podsim-test-run");
  g_test_add_func("/run/step-time/closed-form", test_step_time_closed_form);
  g_test_add_func("/run/cost/mxu-padding", test_mxu_padding);
  g_test_add_func("/run/infeed/stall-closed-form", test_infeed_stall_closed_form);
  g_test_add_func("/run/trace/deterministic", test_deterministic_trace);
  g_test_add_func("/run/outside-compilation/closed-form", test_host_call_closed_form);
  g_test_add_func("/run/outside-compilation/histogram", test_host_call_numerics);
  g_test_add_func("/run/replicate/mean-matches-single", test_replicas_match_single);
  g_test_add_func("/run/shipped-summaries-add-up", test_shipped_summaries);
  if (g_test_thorough()) /* 30 steps of numerics and ResNet-50 link traces, about 11 s */
    g_test_add_func("/run/trace/estimate", test_trace_estimate);
  g_test_add_func("/run/trace/waiting-for-peers", test_trace_waiting_for_peers);
  g_test_add_func("/run/trace/tracks-named", test_trace_tracks_named);
  /* 76 s of numerics: `make test-slow` (-m thorough) runs it, `make test` does not */
  if (g_test_thorough())
    g_test_add_func("/run/default/cnn-data-parallel-epoch", test_default_epoch);
  int rc = g_test_run();
  scratch_remove(tmpdir);
  g_free(tmpdir);
  return rc;
}

/* run.c: a run end to end (see run.h).  The strategy compiles the plan, the
 * pod executes it, and three parties ride along: numerics (numerics.c: real
 * kernels on real batches, one net and one optimizer per device, the
 * buffers that collectives reduce), statistics (stats.c: time per category
 * per device, MXU use, HBM) and the trace (trace-observer.c).  This file
 * handles the options, fans the pod's reports out to statistics and the
 * trace, runs the engine and writes the outputs.
 * Invariant: numerics and observers never change what the pod does or
 * when; the breakdown is one device's, whose categories sum to its step. */
#include "run-private.h"

#include "hw/link-stats.h"
#include "model/kernels.h"
#include "strategy/strategy.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

StepState *ps_run_step_state(Run *r, int64_t step)
{
  StepState *st = g_hash_table_lookup(r->open_steps, &step);
  if (!st) {
    gint64 *key = g_new(gint64, 1);
    *key = step;
    st = g_malloc0(sizeof *st + (size_t)r->n_dev * sizeof st->loss[0]);
    st->critical = -1;
    g_hash_table_insert(r->open_steps, key, st);
  }
  return st;
}

/* ---- the pod's reports, to statistics and to the trace -------------- */

/* Statistics first: the trace's HBM counter shows the live bytes they
 * just counted. */
static void on_op_done(void *ctx, int device, int64_t step, const PsOp *op, PsTimeCategory c,
                       ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  ps_run_stats_op_done(r, device, step, op, c, start, end);
  ps_run_trace_op_done(r, device, step, op, start, end);
}

static void on_wait(void *ctx, int device, int64_t step, PsTimeCategory why, const char *what,
                    ps_time_t start, ps_time_t end)
{
  Run *r = ctx;
  ps_run_stats_wait(r, device, step, why, what, start, end);
  ps_run_trace_wait(r, device, what, start, end);
}

static void on_step_done(void *ctx, int device, int64_t step, ps_time_t end)
{
  Run *r = ctx;
  ps_run_trace_step_done(r, device, step, end);
  ps_run_stats_step_done(r, device, step, end);
}

static void on_coll_arrived(void *ctx, int64_t step, int c, int last, ps_time_t t)
{
  Run *r = ctx;
  ps_run_stats_coll_arrived(r, step, last);
  ps_run_trace_coll_arrived(r, c, last, t);
}

static void on_coll_done(void *ctx, int device, int64_t step, int c, ps_time_t start,
                         ps_time_t end)
{
  Run *r = ctx;
  ps_run_stats_coll_done(r, device, step, c, start, end);
  ps_run_trace_coll_done(r, device, step, c, start, end);
}

/* ---- checks before a run ------------------------------------------- */

/* The longest compute of one step of any program: the sum of its ops'
 * times (kernels and launches).  Communication, waiting and the host only
 * add to a step, so every step takes at least this much simulated time. */
static ps_time_t step_lower_bound(const PsPlan *plan)
{
  ps_time_t most = 0;
  for (int p = 0; p < plan->n_programs; p++) {
    ps_time_t sum = 0;
    for (int i = 0; i < plan->programs[p].n_ops; i++)
      sum = ps_time_add(sum, plan->programs[p].ops[i].time);
    most = MAX(most, sum);
  }
  return most;
}

/* A step count the clock can hold at a step's lower bound: more would run
 * until the simulated time overflowed, for ever in wall time. */
static gboolean check_steps(const PsExperiment *exp, const PsPlan *plan, GError **error)
{
  ps_time_t step = MAX(step_lower_bound(plan), 1);
  int64_t most = PS_TIME_NEVER / step;
  if (exp->steps <= most && step < PS_TIME_NEVER)
    return TRUE;
  if (step == PS_TIME_NEVER)
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days) within one step: "
                "a duration too long or a rate too small for the simulator's clock (look at "
                "the topology's peak_flops, HBM bandwidth and the model's sizes)", exp->file);
  else
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days): steps: %"
                G_GINT64_FORMAT " steps cannot fit the simulator's clock, each computing for at "
                "least %.6g s; run at most %" G_GINT64_FORMAT " steps (fewer steps, or fewer "
                "epochs)", exp->file, exp->steps, ps_time_to_s(step), most);
  return FALSE;
}

/* An output file the run can write: not a directory, and where a file can
 * be created (a missing or read-only directory would only fail at the end
 * of the run).  Probed as the writers create theirs, with a temporary file
 * beside it, removed at once. */
static gboolean check_output(const char *path, const char *what, GError **error)
{
  if (!path)
    return TRUE;
  int err = 0;
  if (!*path) {
    err = ENOENT;
  } else if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    err = EISDIR;
  } else if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_autofree char *probe = g_strdup_printf("%s.tmp-XXXXXX", path);
    sigset_t saved; /* an interrupt must not leave the probe behind */
    ps_fatal_signals_hold(&saved);
    int fd = g_mkstemp_full(probe, O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) {
      err = errno;
    } else {
      close(fd);
      g_unlink(probe);
    }
    ps_fatal_signals_restore(&saved);
  } /* else replaced, or written in place if not a regular file */
  if (!err)
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot write the %s: %s", path,
              what, g_strerror(err));
  return FALSE;
}

static gboolean check_run(const PsExperiment *exp, const PsPlan *plan,
                          const PsRunOptions *opt, GError **error)
{
  return check_steps(exp, plan, error) &&
         check_output(opt ? opt->trace_path : NULL, "trace", error) &&
         check_output(opt ? opt->links_csv : NULL, "link statistics", error);
}

gboolean ps_run_check(const PsExperiment *exp, const PsRunOptions *opt, GError **error)
{
  g_return_val_if_fail(exp != NULL, FALSE);
  PsPlan *plan = ps_strategy_compile(exp, error);
  if (!plan)
    return FALSE;
  gboolean ok = check_run(exp, plan, opt, error);
  ps_plan_free(plan);
  return ok;
}

/* ---- the run -------------------------------------------------------- */

static void run_init(Run *r, const PsPlan *plan)
{
  const PsExperiment *exp = r->exp;
  r->plan = plan;
  r->n_dev = plan->n_devices;
  int64_t steps = exp->steps;
  r->warm = steps > exp->steps_per_run ? exp->steps_per_run : 0;
  ps_run_stats_init(r);
  r->open_steps = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  for (int d = 0; d < r->n_dev; d++) {
    const PsProgram *p = ps_plan_program(plan, d);
    for (int i = 0; i < p->n_ops; i++)
      if (p->ops[i].kind == PS_OP_OUTFEED) {
        r->outfeeders++;
        break;
      }
  }
  r->histograms = g_new0(PsHistogram, exp->n_host_calls ? exp->n_host_calls : 1);
  r->numerics = exp->numerics.enabled;
}

static void run_free(Run *r)
{
  ps_run_trace_free(r);
  ps_run_numerics_free(r);
  ps_run_stats_free(r);
  if (r->open_steps)
    g_hash_table_destroy(r->open_steps);
  if (r->histograms)
    for (int i = 0; i < r->exp->n_host_calls; i++)
      g_free(r->histograms[i].counts);
  g_free(r->histograms);
}

/* Whether the run writes a trace: one is asked for and its estimate is
 * within the options' limit (else the summary says it was skipped). */
static gboolean trace_wanted(const Run *r, const PsRunOptions *opt, PsSummary *out)
{
  if (!opt || !opt->trace_path)
    return FALSE;
  out->trace_estimate_bytes = ps_trace_written_bytes(
      opt->trace_path, ps_run_trace_estimate(r->exp, r->plan, opt->trace_links));
  if (opt->trace_max_bytes > 0 && out->trace_estimate_bytes > opt->trace_max_bytes) {
    out->trace_skipped = TRUE;
    return FALSE;
  }
  return TRUE;
}

/* Runs the engine dry; fails with PS_INPUT_ERROR when it stopped early
 * (the event limit, the clock's end) or a device did not finish. */
static gboolean simulate(Run *r, PsEngine *engine, const PsRunOptions *opt, GError **error)
{
  const PsExperiment *exp = r->exp;
  if (opt && opt->max_events)
    ps_engine_set_max_events(engine, opt->max_events);
  ps_pod_start(r->pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  if (ps_engine_limited(engine)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: stopped after %" G_GUINT64_FORMAT " events (--max-events) at %.6g s of "
                "simulated time, before the run's end; run fewer steps or a smaller slice, or "
                "raise --max-events", exp->file, ps_engine_events_run(engine),
                ps_time_to_s(ps_engine_now(engine)));
    return FALSE;
  }
  if (ps_engine_overflowed(engine)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: the simulated time would pass 2^63 ps (about 106 days) after %.6g s: "
                "a duration too long or a rate too small for the simulator's clock (look at "
                "the topology's latencies, bandwidths and peak_flops, and the input's "
                "host_cost_per_example_s)", exp->file, ps_time_to_s(ps_engine_now(engine)));
    return FALSE;
  }
  return ps_pod_check_finished(r->pod, error);
}

/* The links' CSV, then the trace closed: neither is left on disk when
 * the other fails. */
static gboolean write_outputs(Run *r, PsEngine *engine, const PsRunOptions *opt, PsSummary *out,
                              GError **error)
{
  if (opt && opt->links_csv &&
      !ps_link_stats_write(ps_pod_network(r->pod), ps_engine_now(engine), opt->links_csv, error))
    return FALSE;
  if (r->trace) {
    out->trace_events = ps_trace_events(r->trace);
    PsTrace *t = r->trace;
    r->trace = NULL;
    GStatBuf st; /* the CSV we wrote, never a device or FIFO written in place */
    if (!ps_trace_close(t, error)) {
      if (opt->links_csv && g_lstat(opt->links_csv, &st) == 0 && S_ISREG(st.st_mode))
        g_unlink(opt->links_csv);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean ps_run(const PsExperiment *exp, const PsRunOptions *opt, PsSummary *out,
                GError **error)
{
  gboolean ok = FALSE;
  Run r = {.exp = exp, .log = opt ? opt->log : NULL,
           .fashion_train = opt ? opt->fashion_train : NULL,
           .fashion_test = opt ? opt->fashion_test : NULL};
  memset(out, 0, sizeof *out);
  gint64 wall0 = g_get_monotonic_time();
  ps_kernels_init();

  PsPlan *plan = ps_strategy_compile(exp, error);
  if (!plan)
    return FALSE;
  if (!check_run(exp, plan, opt, error)) {
    ps_plan_free(plan);
    return FALSE;
  }
  run_init(&r, plan);
  gboolean tracing = trace_wanted(&r, opt, out);
  PsEngine *engine = ps_engine_new();
  PsPodObserver obs = {.ctx = &r,
                       .op_done = on_op_done,
                       .wait = on_wait,
                       .step_done = on_step_done,
                       .infeed_depth = ps_run_trace_infeed_depth,
                       .host_work = ps_run_trace_host_work,
                       .coll_arrived = on_coll_arrived,
                       .coll_done = on_coll_done,
                       .message_sent = tracing ? ps_run_trace_message_sent : NULL,
                       .message = tracing ? ps_run_trace_message : NULL,
                       /* messages through the links: only when they are drawn */
                       .coll_message = tracing && opt->trace_links ? ps_run_trace_coll_message
                                                                   : NULL};
  PsPodNumerics num = {.ctx = &r, .op = ps_run_numerics_op,
                       .coll_buffer = ps_run_numerics_coll_buffer};
  PsPodConfig pod_cfg = ps_run_pod_config(exp);
  r.pod = ps_pod_new(engine, &pod_cfg, plan, &obs, r.numerics ? &num : NULL, error);
  if (!r.pod)
    goto out;
  if (r.numerics && !ps_run_numerics_init(&r, error))
    goto out;
  if (tracing && !ps_run_trace_open(&r, opt->trace_path, opt->trace_links, error))
    goto out;
  if (!simulate(&r, engine, opt, error))
    goto out;
  ps_run_stats_summarise(&r, out);
  if (r.numerics)
    ps_run_numerics_summarise(&r, out);
  if (r.numerics && !ps_run_numerics_finish(&r, opt, out, error))
    goto out;
  out->events = ps_engine_events_run(engine);
  if (!write_outputs(&r, engine, opt, out, error))
    goto out;
  out->wall_s = (double)(g_get_monotonic_time() - wall0) / 1e6;
  out->events_per_s = out->wall_s > 0 ? (double)out->events / out->wall_s : 0;
  ok = TRUE;
out:
  if (!ok)
    ps_summary_clear(out);
  run_free(&r);
  ps_pod_free(r.pod);
  ps_engine_free(engine);
  ps_plan_free(plan);
  return ok;
}

PsPodConfig ps_run_pod_config(const PsExperiment *exp)
{
  return (PsPodConfig){.file = exp->file, .topology = exp->topology, .input = &exp->input,
                       .steps = exp->steps, .steps_per_run = exp->steps_per_run,
                       .collective = &exp->collective, .faults = &exp->faults};
}

/* The plan the experiment compiles to, for `describe --program`.
 * (transfer full) */
PsPlan *ps_run_compile(const PsExperiment *exp, GError **error)
{
  return ps_strategy_compile(exp, error);
}

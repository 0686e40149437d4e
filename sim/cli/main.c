/* main.c: the podsim command line.
 *
 *   podsim run EXPERIMENT [--set k=v]... [--steps N] [--seed N]
 *              [--trace FILE | --no-trace] [--json]
 *   podsim list topologies|models|experiments
 *   podsim describe [experiment|topology|model] NAME [--set k=v]... [--program]
 *   podsim --version | --help
 *
 * Exit status: 0 success, 2 bad input (config, data, command line),
 * 1 internal failure.  Errors go to stderr as "podsim: <message>". */
#include "cli/collective.h"
#include "cli/compare.h"
#include "cli/list.h"
#include "cli/regress.h"
#include "cli/sweep.h"
#include "cli/timeline.h"
#include "cli/validate.h"
#include "io/config.h"
#include "io/trace.h"
#include "run/run.h"
#include "run/experiment.h"
#include "strategy/kernels.h"

#include <errno.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXIT_INPUT 2

static const char *const usage_text =
    "Commands:\n"
    "  run EXPERIMENT        simulate a training run and print where the time goes\n"
    "  list KIND             list topologies, models or experiments\n"
    "  describe [KIND] NAME  print a resolved experiment, topology or model\n"
    "  collective            time a collective on the simulated interconnect\n"
    "  timeline TRACE        one pipelined step's ops from a trace, for gnuplot\n"
    "  sweep EXPERIMENT      run an experiment over a grid of config values, to CSV\n"
    "  compare A [B]         two experiments (or one with two --set) side by side\n"
    "  validate              predicted against published TPU step times (tests/measured)\n"
    "  regress               golden step-time predictions against the current model\n"
    "\n"
    "EXPERIMENT, NAME: a name from experiments/, topologies/, models/, or a path.\n"
    "Those folders (and validate's tests/measured) are looked up, first to last, in:\n"
    "  $PODSIM_DATA_DIR     when set, before any other\n"
    "  PREFIX/share/podsim  of the tree podsim is installed in (found at run time\n"
    "                       beside the binary: BINDIR/../share/podsim), or else the\n"
    "                       source tree it was built in\n"
    "  .                    the working directory\n"
    "Every command takes --help for its options and output, e.g. `podsim run --help`.";

static int fail(GError *error)
{
  if (!error) { /* a failure that forgot to say why is a bug, not bad input */
    fprintf(stderr, "podsim: internal error: a step failed without an error message\n");
    return 1;
  }
  int status = error->domain == PS_INPUT_ERROR ? EXIT_INPUT : 1;
  fprintf(stderr, "podsim: %s\n", error->message);
  g_error_free(error);
  return status;
}

static int usage_error(GOptionContext *ctx, const char *fmt, const char *arg)
{
  fprintf(stderr, "podsim: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n\n");
  if (ctx) {
    g_autofree char *help = g_option_context_get_help(ctx, TRUE, NULL);
    fputs(help, stderr);
  }
  return EXIT_INPUT;
}

/* Makes the parent directory of a default trace path if it is missing. */
static void ensure_parent(const char *path)
{
  g_autofree char *dir = g_path_get_dirname(path);
  if (g_mkdir_with_parents(dir, 0755) != 0)
    return; /* ps_trace_open reports the real error */
}

/* A trace whose JSON is estimated over this is written gzip-compressed
 * when no --trace names it: below it, the JSON opens as fast in a viewer
 * and stays greppable (the default experiment's is 37 MB). */
#define DEFAULT_TRACE_GZIP_BYTES (64 * 1000 * 1000)

/* traces/EXPERIMENT.json, or .json.gz when its JSON would be over
 * DEFAULT_TRACE_GZIP_BYTES.  (transfer full) */
static char *default_trace_path(const PsExperiment *exp, gboolean links)
{
  PsPlan *plan = ps_run_compile(exp, NULL); /* a failure is reported by the run */
  gboolean large = plan && ps_run_trace_estimate(exp, plan, links) > DEFAULT_TRACE_GZIP_BYTES;
  if (plan)
    ps_plan_free(plan);
  return g_strdup_printf("traces/%s.json%s", exp->name, large ? ".gz" : "");
}

/* A word of the strategy's resolved keys ("gpipe"), or "". */
static const char *strategy_word(const PsExperiment *e, const char *key)
{
  json_object *so = NULL, *v = NULL;
  if (json_object_object_get_ex(e->resolved, "strategy", &so) && so)
    json_object_object_get_ex(so, key, &v);
  return v ? json_object_get_string(v) : "";
}

/* "8 replicas", "2 replicas x 4 stages", from the plan's mesh.
 * (transfer full) */
static char *placement_text(const PsExperiment *e, const PsPlan *plan, gboolean schedule)
{
  int R = ps_plan_axis_size(plan, PS_AXIS_DATA), K = ps_plan_axis_size(plan, PS_AXIS_STAGE);
  int M = plan->micro_batches;
  g_autofree char *stages =
      !ps_plan_has_axis(plan, PS_AXIS_STAGE) ? g_strdup("")
      : schedule ? g_strdup_printf(" x %d stage%s, %d micro-batch%s, %s", K, K == 1 ? "" : "s",
                                   M, M == 1 ? "" : "es", strategy_word(e, "schedule"))
                 : g_strdup_printf(" x %d stage%s", K, K == 1 ? "" : "s");
  return g_strdup_printf("%d replica%s%s", R, R == 1 ? "" : "s", stages);
}

/* The line a run opens with: what runs where, as resolved after --set, e.g.
 * "podsim 0.1.0: resnet50-v3-8: model resnet50 on tpu-v3-32 (32 devices:
 * 32 replicas), global batch 1024, 10 steps, bf16, numerics off".
 * (transfer full) */
static char *run_header(const PsExperiment *e, const PsPlan *plan)
{
  int used = plan->n_devices, devices = ps_topology_devices(e->topology);
  g_autofree char *of = used < devices ? g_strdup_printf("%d of %d", used, devices)
                                       : g_strdup_printf("%d", devices);
  g_autofree char *placement = placement_text(e, plan, TRUE);
  g_autofree char *clock = ps_topology_clock_text(e->topology);
  return g_strdup_printf(
      "podsim %s: %s: model %s on %s (%s device%s: %s), global batch %" G_GINT64_FORMAT
      ", %" G_GINT64_FORMAT " step%s, %s, numerics %s%s",
      PS_VERSION, e->name, e->model->name, e->topology->name, of, devices == 1 ? "" : "s",
      placement, e->global_batch, e->steps, e->steps == 1 ? "" : "s",
      ps_config_precision_text(&e->numerics),
      e->numerics.enabled ? "on" : "off", clock);
}

/* One line on stderr when the plan leaves devices of the slice idle,
 * saying what to set to use them all. */
static void warn_idle_devices(const PsExperiment *e, const PsPlan *plan)
{
  int used = plan->n_devices, devices = ps_topology_devices(e->topology);
  if (used >= devices)
    return;
  int K = ps_plan_axis_size(plan, PS_AXIS_STAGE);
  g_autofree char *what = K > 1 ? placement_text(e, plan, FALSE) : NULL;
  g_autofree char *fix = NULL;
  if (devices % K != 0) {
    fix = g_strdup_printf("strategy.stages=%d does not divide %d; pick strategy.stages and "
                          "strategy.replicas whose product is %d to use them all",
                          K, devices, devices);
  } else {
    int want = devices / K;
    g_autofree char *with =
        K > 1 ? g_strdup_printf(" with strategy.stages=%d", K) : g_strdup("");
    g_autofree char *batch =
        e->global_batch % want != 0
            ? g_strdup_printf(" and a global_batch divisible by %d", want)
            : g_strdup("");
    fix = g_strdup_printf("set strategy.replicas=%d (or leave it out)%s%s to use them all",
                          want, with, batch);
  }
  fprintf(stderr, "podsim: warning: %s uses %d of the %d devices of %s (%s%s%d idle); %s\n",
          e->file, used, devices, e->topology->name, what ? what : "", what ? ", " : "",
          devices - used, fix);
}

/* Before a run: the idle-device warning and the header line (on `log`),
 * from the plan's mesh; FALSE when the plan does not compile. */
static gboolean announce_run(const PsExperiment *exp, FILE *log, GError **error)
{
  PsPlan *plan = ps_run_compile(exp, error);
  if (!plan)
    return FALSE;
  warn_idle_devices(exp, plan);
  if (plan->warning)
    fprintf(stderr, "podsim: warning: %s: %s\n", exp->file, plan->warning);
  if (log) {
    g_autofree char *header = run_header(exp, plan);
    fprintf(log, "%s\n", header);
    fflush(log);
  }
  ps_plan_free(plan);
  return TRUE;
}

/* After a run: the summary (text or JSON) and where its files went. */
static void print_run(const PsExperiment *exp, const PsRunOptions *opt, const PsSummary *sum,
                      gboolean json, gint64 trace_max_mb)
{
  if (sum->trace_skipped)
    fprintf(stderr, "podsim: warning: no trace written: %s would take about %.0f MB, over "
                    "--trace-max %" G_GINT64_FORMAT " MB; raise --trace-max (0: no limit), "
                    "run fewer steps, or use --no-trace\n",
            opt->trace_path, sum->trace_estimate_bytes / 1e6, trace_max_mb);
  /* (a run of one loop pays one launch whatever steps_per_run is) */
  if (sum->measured_steps < sum->steps && sum->host_loop_s > 0.1 * sum->step_time_s) {
    g_autofree char *every =
        exp->steps_per_run == 1 ? g_strdup("every step")
                                : g_strdup_printf("every %" G_GINT64_FORMAT " steps",
                                                  exp->steps_per_run);
    fprintf(stderr, "podsim: warning: the host loop takes %.0f%% of the step: steps_per_run is %"
                    G_GINT64_FORMAT ", so the host relaunches the device loop %s; raise it "
                    "(--set steps_per_run=N) to pay the relaunch less often\n",
            100.0 * sum->host_loop_s / sum->step_time_s, exp->steps_per_run, every);
  }
  if (json) {
    g_autofree char *text = ps_summary_to_json(exp, sum);
    printf("%s\n", text);
    return;
  }
  ps_summary_print(exp, sum, stdout);
  if (opt->trace_path && !sum->trace_skipped)
    printf("trace            %s (%" G_GUINT64_FORMAT
           " events): open it at https://ui.perfetto.dev or chrome://tracing\n",
           opt->trace_path, sum->trace_events);
  if (opt->links_csv)
    printf("links            %s (one row per link direction)\n", opt->links_csv);
  if (exp->numerics.enabled)
    printf("what-ifs         add --set numerics.enabled=false: the same step times without the "
           "arithmetic, in a fraction of the wall time\n");
}

/* An integer option left out. */
#define UNSET G_MININT64
/* run --trace-max's default, in MB (its help says it) */
#define TRACE_MAX_MB_DEFAULT 256

/* What `podsim run` was given; UNSET where an option was left out. */
typedef struct {
  char **sets;
  gint64 steps, seed, trace_max_mb, max_events;
  char *trace, *links_csv;
  gboolean no_trace, json, quiet, trace_links;
} RunArgs;

static void run_args_clear(RunArgs *a)
{
  g_strfreev(a->sets);
  g_free(a->trace);
  g_free(a->links_csv);
}

static GOptionContext *run_context(RunArgs *a)
{
  GOptionEntry entries[] = {
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &a->sets,
       "Override a config field, e.g. --set global_batch=256 or "
       "--set topology.ici.bandwidth_Bps=50GB/s (repeatable)",
       "PATH=VALUE"},
      {"steps", 'n', 0, G_OPTION_ARG_INT64, &a->steps, "Number of steps (same as --set steps=N)",
       "N"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &a->seed,
       "Seed for data order and weights (numerics on only)", "N"},
      {"trace", 't', 0, G_OPTION_ARG_FILENAME, &a->trace,
       "Write a Chrome/Perfetto trace here, gzip-compressed if FILE ends in .gz (default "
       "traces/EXPERIMENT.json, or .json.gz when the JSON would be over 64 MB)", "FILE"},
      {"no-trace", 0, 0, G_OPTION_ARG_NONE, &a->no_trace, "Do not write a trace", NULL},
      {"trace-links", 0, 0, G_OPTION_ARG_NONE, &a->trace_links,
       "Also trace every chunk on every interconnect link (large on big slices)", NULL},
      {"links-csv", 0, 0, G_OPTION_ARG_FILENAME, &a->links_csv,
       "At the end, write what every link direction carried (bytes, chunks, busy "
       "time, utilization) here as CSV", "FILE"},
      {"trace-max", 0, 0, G_OPTION_ARG_INT64, &a->trace_max_mb,
       "Write no trace when it would take more than this many MB on disk (estimated before "
       "the run, compressed for a .gz trace; default " G_STRINGIFY(TRACE_MAX_MB_DEFAULT)
       ", 0 for no limit)", "MB"},
      {"max-events", 0, 0, G_OPTION_ARG_INT64, &a->max_events,
       "Stop with an error after N simulator events, N at least 1 (default: no limit; the "
       "summary's last line counts a run's events)", "N"},
      {"json", 'j', 0, G_OPTION_ARG_NONE, &a->json, "Print the summary as one JSON object", NULL},
      {"quiet", 'q', 0, G_OPTION_ARG_NONE, &a->quiet, "Do not print the loss while training", NULL},
      {NULL}};
  GOptionContext *ctx = g_option_context_new("EXPERIMENT - simulate a training run");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Simulates the experiment's training steps on the simulated TPU slice, running\n"
           "the model's real arithmetic when numerics are on, and reports the step time,\n"
           "its breakdown, throughput, MXU utilization, HBM use, loss and accuracy.");
  return ctx;
}

/* The options that cannot go together or say nothing: a usage error
 * (exit 2) naming them, else 0. */
static int run_args_check(GOptionContext *ctx, const RunArgs *a)
{
  if (a->seed != UNSET && a->seed < 0)
    return usage_error(ctx, "--seed must be 0 or more, got %s", "a negative number");
  if (a->steps != UNSET && a->steps < 1)
    return usage_error(ctx, "--steps must be at least 1, got %s",
                       a->steps == 0 ? "0" : "a negative number");
  if (a->trace && !*a->trace)
    return usage_error(ctx, "--trace needs a file name%s", " (or use --no-trace)");
  if (a->no_trace && (a->trace || a->trace_links || a->trace_max_mb != UNSET))
    return usage_error(ctx, "--no-trace writes no trace, so %s says nothing: give one or the "
                            "other",
                       a->trace ? "--trace" : a->trace_links ? "--trace-links" : "--trace-max");
  if (a->links_csv && !*a->links_csv)
    return usage_error(ctx, "--links-csv needs a file name%s", "");
  if (a->max_events != UNSET && a->max_events < 1)
    return usage_error(ctx, "--max-events %s: give a limit of at least 1 event (leave the "
                            "option out for no limit)",
                       a->max_events == 0 ? "0" : "below 0");
  if (a->trace_max_mb != UNSET && (a->trace_max_mb < 0 || a->trace_max_mb > G_MAXINT64 / 1000000))
    return usage_error(ctx, "--trace-max must be a number of MB, 0 or more%s", "");
  return 0;
}

/* --set, then --steps and --seed as the overrides they stand for.
 * (transfer full: NULL-terminated, free with g_ptr_array_unref) */
static GPtrArray *run_overrides(const RunArgs *a)
{
  GPtrArray *ov = g_ptr_array_new_with_free_func(g_free);
  for (char **s = a->sets; s && *s; s++)
    g_ptr_array_add(ov, g_strdup(*s));
  if (a->steps != UNSET)
    g_ptr_array_add(ov, g_strdup_printf("steps=%" G_GINT64_FORMAT, a->steps));
  if (a->seed != UNSET)
    g_ptr_array_add(ov, g_strdup_printf("numerics.seed=%" G_GINT64_FORMAT, a->seed));
  g_ptr_array_add(ov, NULL);
  return ov;
}

/* Loads the experiment and checks everything the run needs before it
 * simulates: the options against it, the step count, the output paths.
 * NULL after printing why, with *status set.  (transfer full) */
static PsExperiment *run_prepare(GOptionContext *ctx, RunArgs *a, char *name, int *status)
{
  GError *error = NULL;
  GPtrArray *ov = run_overrides(a);
  PsExperiment *exp = ps_experiment_load(name, (const char *const *)ov->pdata, &error);
  g_ptr_array_unref(ov);
  if (!exp) {
    ps_experiment_suggest_key(name, (const char *const *)a->sets, error);
    *status = fail(error);
    return NULL;
  }
  if (a->seed != UNSET && !exp->numerics.enabled) {
    *status = usage_error(ctx, "--seed: %s runs with numerics off (numerics.enabled=false), "
                               "where no weight or data order depends on a seed", exp->file);
    ps_experiment_free(exp);
    return NULL;
  }
  if (!a->trace && !a->no_trace) {
    a->trace = default_trace_path(exp, a->trace_links);
    ensure_parent(a->trace);
  }
  PsRunOptions opt = {.trace_path = a->no_trace ? NULL : a->trace, .links_csv = a->links_csv};
  if (!ps_run_check(exp, &opt, &error)) {
    *status = fail(error);
    ps_experiment_free(exp);
    return NULL;
  }
  return exp;
}

static int cmd_run(int argc, char **argv)
{
  RunArgs a = {.steps = UNSET, .seed = UNSET, .trace_max_mb = UNSET, .max_events = UNSET};
  g_autoptr(GOptionContext) ctx = run_context(&a);
  GError *error = NULL;
  int status = 0;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    status = usage_error(ctx, "%s", error->message);
    g_error_free(error);
  } else if (argc != 2) {
    status = usage_error(ctx, "run needs exactly one EXPERIMENT%s",
                         argc > 2 ? " (extra arguments)" : "");
  } else {
    status = run_args_check(ctx, &a);
  }
  PsExperiment *exp = status ? NULL : run_prepare(ctx, &a, argv[1], &status);
  if (!exp) {
    run_args_clear(&a);
    return status;
  }
  FILE *log = a.json || a.quiet ? NULL : stdout;
  if (!announce_run(exp, log, &error)) {
    ps_experiment_free(exp);
    run_args_clear(&a);
    return fail(error);
  }
  gint64 trace_max_mb = a.trace_max_mb == UNSET ? TRACE_MAX_MB_DEFAULT : a.trace_max_mb;
  PsRunOptions opt = {.trace_path = a.no_trace ? NULL : a.trace, .trace_links = a.trace_links,
                      .log = log, .trace_max_bytes = trace_max_mb * 1000000,
                      .max_events = a.max_events == UNSET ? 0 : (uint64_t)a.max_events,
                      .links_csv = a.links_csv};
  PsSummary sum;
  if (ps_run(exp, &opt, &sum, &error)) {
    print_run(exp, &opt, &sum, a.json, trace_max_mb);
    ps_summary_clear(&sum);
  } else {
    status = fail(error);
  }
  ps_experiment_free(exp);
  run_args_clear(&a);
  return status;
}

static void print_json(json_object *o)
{
  printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* The value at a dotted path of tree, or NULL.  (transfer none) */
static json_object *tree_at(json_object *tree, const char *dotted)
{
  g_auto(GStrv) parts = g_strsplit(dotted, ".", -1);
  for (int i = 0; parts[i] && tree; i++)
    if (!json_object_object_get_ex(tree, parts[i], &tree))
      return NULL;
  return tree;
}

/* Per-chip peaks, DCN, naming and largest slice where the file gives them,
 * then every sourced figure with its value and citation. */
static void describe_generation(const PsTopology *t)
{
  printf("  per chip: %.1f TFLOP/s bf16", t->peak_flops / 1e12);
  if (t->int8_peak_flops > 0)
    printf(", %.1f TOP/s int8", t->int8_peak_flops / 1e12);
  if (t->fp8_peak_flops > 0)
    printf(", %.1f TFLOP/s fp8", t->fp8_peak_flops / 1e12);
  printf("; %d MXU%s of %dx%d per core\n", t->mxus_per_core, t->mxus_per_core == 1 ? "" : "s",
         t->mxu_size, t->mxu_size);
  if (t->dcn_bandwidth_Bps > 0)
    printf("  DCN %.1f GB/s per host\n", t->dcn_bandwidth_Bps / 1e9);
  if (*t->name_counts || t->max_slice_chips > 0)
    printf("  slice names count %s; largest slice %d chips\n",
           *t->name_counts ? (strcmp(t->name_counts, "cores") ? "chips" : "TensorCores") : "?",
           t->max_slice_chips);
  if (!t->sources)
    return;
  json_object *tree = ps_topology_to_json(t);
  printf("  figures and sources:\n");
  json_object_object_foreach(t->sources, key, cite) {
    json_object *v = tree_at(tree, key);
    if (v && json_object_is_type(v, json_type_double))
      printf("    %s = %g\n", key, json_object_get_double(v));
    else
      printf("    %s = %s\n", key, v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "?");
    printf("      %s\n", json_object_get_string(cite));
  }
  json_object_put(tree);
}

static void describe_topology(const PsTopology *t)
{
  printf("%s: %s\n", t->name, t->description ? t->description : "");
  printf("  chips %d (", ps_topology_chips(t));
  if (t->slices > 1)
    printf("%d slices, each ", t->slices);
  printf("torus");
  for (int i = 0; i < t->ndims; i++)
    printf("%s%d%s", i ? " x " : " ", t->dims[i], t->wrap[i] ? "w" : "");
  printf("), hosts %d, devices %d (%d TensorCore%s per chip%s)\n", ps_topology_hosts(t),
         ps_topology_devices(t), t->cores_per_chip, t->cores_per_chip == 1 ? "" : "s",
         t->megacore ? ", megacore" : "");
  printf("  per device: %.1f TFLOP/s bf16, %.1f GiB HBM at %.0f GB/s\n",
         ps_topology_device_peak_flops(t) / 1e12,
         ps_topology_device_hbm_bytes(t) / 1073741824.0,
         ps_topology_device_hbm_bandwidth(t) / 1e9);
  printf("  ICI %.1f GB/s per link one way, %.2f us per hop; PCIe %.1f GB/s per host\n",
         t->ici_bandwidth_Bps / 1e9, t->ici_latency_s * 1e6, t->pcie_bandwidth_Bps / 1e9);
  if (t->slices > 1)
    printf("  DCN %.1f GB/s per host NIC one way, %.1f us NIC latency; leaf-spine, %d hosts "
           "per leaf, oversubscription %g, %.2f us per hop\n",
           t->dcn.nic_bandwidth_Bps / 1e9, t->dcn.nic_latency_s * 1e6, t->dcn.hosts_per_leaf,
           t->dcn.oversubscription, t->dcn.hop_latency_s * 1e6);
  describe_generation(t);
}

/* What `podsim describe` was given. */
typedef struct {
  char **sets;
  gboolean program, stages, kernels;
  int device; /* G_MININT: left out */
} DescribeArgs;

static GOptionContext *describe_context(DescribeArgs *a)
{
  GOptionEntry entries[] = {
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &a->sets,
       "Override a config field of an experiment or topology (repeatable)", "PATH=VALUE"},
      {"program", 'p', 0, G_OPTION_ARG_NONE, &a->program,
       "For an experiment: also print the program compiled for a device", NULL},
      {"device", 'd', 0, G_OPTION_ARG_INT, &a->device,
       "The device whose program --program or kernels --kernels prints (default 0)", "N"},
      {"stages", 0, 0, G_OPTION_ARG_NONE, &a->stages,
       "For a pipeline experiment: also print each stage's layers, FLOPs, weights, "
       "activations and time", NULL},
      {"kernels", 'k', 0, G_OPTION_ARG_NONE, &a->kernels,
       "For an experiment: also print the kernels of one step of a device (--device) with "
       "FLOPs, HBM bytes, time and bound (MXU, HBM, VPU or launch)", NULL},
      {NULL}};
  GOptionContext *ctx =
      g_option_context_new("[experiment|topology|model] NAME - print a resolved config");
  g_option_context_add_main_entries(ctx, entries, NULL);
  return ctx;
}

/* The first kind that knows the name, or NULL.  (transfer none) */
static const char *describe_kind_of(const char *name)
{
  static const char *const dirs[][2] = {
      {"experiments", "experiment"}, {"topologies", "topology"}, {"models", "model"}};
  for (guint i = 0; i < G_N_ELEMENTS(dirs); i++) {
    g_autofree char *p = ps_config_find(dirs[i][0], name, NULL);
    if (p)
      return dirs[i][1];
  }
  return NULL;
}

/* The options that say nothing for this kind: a usage error, else 0. */
static int describe_args_check(GOptionContext *ctx, const DescribeArgs *a, const char *kind)
{
  const char *exp_only = a->program ? "--program" : a->stages ? "--stages"
                         : a->kernels ? "--kernels" : a->device != G_MININT ? "--device" : NULL;
  if (strcmp(kind, "experiment") != 0 && exp_only)
    return usage_error(ctx, "describe: %s describes an experiment's plan, not a topology or "
                            "a model", exp_only);
  if (strcmp(kind, "model") == 0 && a->sets)
    return usage_error(ctx, "describe: --set overrides an experiment's or a topology's "
                            "fields, not a model's%s", "");
  if (a->device != G_MININT && !a->program && !a->kernels)
    return usage_error(ctx, "describe: --device picks whose --program or --kernels to print; "
                            "give one of them too%s", "");
  return 0;
}

/* --stages: what the strategy adds to describe (a pipeline's partition);
 * a usage error for a strategy that adds nothing. */
static int describe_stages(GOptionContext *ctx, const PsExperiment *exp)
{
  const PsStrategy *impl = exp->strategy.impl;
  if (!impl->describe)
    return usage_error(ctx, "describe: --stages: %s is not a pipeline (its strategy does not "
                            "split the layers into stages)", exp->file);
  GError *error = NULL;
  GString *s = g_string_new(NULL);
  if (!impl->describe(exp, exp->strategy.config, s, &error)) {
    g_string_free(s, TRUE);
    return fail(error);
  }
  printf("\n%s", s->str);
  g_string_free(s, TRUE);
  return 0;
}

/* Names in the plan the algorithm "auto" picks for each collective, as
 * "ring (auto)": the pod the run would build makes the choices. */
static gboolean name_chosen_algorithms(const PsExperiment *exp, PsPlan *plan, GError **error)
{
  PsEngine *engine = ps_engine_new();
  PsPodConfig cfg = ps_run_pod_config(exp);
  PsPod *pod = ps_pod_new(engine, &cfg, plan, NULL, NULL, error);
  for (int c = 0; pod && c < plan->n_colls; c++) {
    if (strcmp(plan->colls[c].algo, "auto") != 0)
      continue;
    g_free(plan->colls[c].algo);
    plan->colls[c].algo = g_strdup_printf("%s (auto)", ps_pod_coll_algorithm(pod, c));
  }
  gboolean ok = pod != NULL;
  ps_pod_free(pod);
  ps_engine_free(engine);
  return ok;
}

/* The plan of exp, or NULL with the error printed (status set) when it
 * does not compile or has no device `device`. */
static PsPlan *device_plan(const PsExperiment *exp, int device, int *status)
{
  GError *error = NULL;
  PsPlan *plan = ps_run_compile(exp, &error);
  if (!plan) {
    *status = fail(error);
    return NULL;
  }
  if (device < 0 || device >= plan->n_devices) {
    fprintf(stderr, "podsim: describe: --device %d: the plan has devices 0..%d\n", device,
            plan->n_devices - 1);
    ps_plan_free(plan);
    *status = EXIT_INPUT;
    return NULL;
  }
  return plan;
}

/* --program, --kernels: a device's program or kernels. */
static int describe_device(const PsExperiment *exp, const DescribeArgs *a)
{
  GError *error = NULL;
  int device = a->device == G_MININT ? 0 : a->device, status = 0;
  PsPlan *plan = device_plan(exp, device, &status);
  if (!plan)
    return status;
  if (a->program && !name_chosen_algorithms(exp, plan, &error)) {
    ps_plan_free(plan);
    return fail(error);
  }
  GString *s = g_string_new(NULL);
  if (a->program)
    ps_plan_describe_device(plan, device, s);
  if (a->kernels) {
    g_string_append(s, a->program ? "\n" : "");
    ps_kernels_describe(exp, plan, device, s);
  }
  printf("\n%s", s->str);
  g_string_free(s, TRUE);
  ps_plan_free(plan);
  return 0;
}

static int describe_experiment(GOptionContext *ctx, const DescribeArgs *a, const char *name)
{
  GError *error = NULL;
  PsExperiment *exp = ps_experiment_load(name, (const char *const *)a->sets, &error);
  if (!exp) {
    ps_experiment_suggest_key(name, (const char *const *)a->sets, error);
    return fail(error);
  }
  int status = 0;
  if (a->stages && !exp->strategy.impl->describe)
    status = describe_stages(ctx, exp); /* refused before anything prints */
  if (!status && (a->program || a->kernels) && a->device != G_MININT) {
    PsPlan *plan = device_plan(exp, a->device, &status); /* a bad --device prints nothing */
    if (plan)
      ps_plan_free(plan);
  }
  if (!status)
    print_json(exp->resolved);
  if (!status && a->stages)
    status = describe_stages(ctx, exp);
  if (!status && (a->program || a->kernels))
    status = describe_device(exp, a);
  ps_experiment_free(exp);
  return status;
}

static int describe_model(const char *name)
{
  GError *error = NULL;
  g_autofree char *path = ps_config_find("models", name, &error);
  if (!path)
    return fail(error);
  PsModel *m = ps_model_load_file(path, &error);
  if (!m)
    return fail(error);
  GString *s = g_string_new(NULL);
  ps_model_describe(m, s);
  fputs(s->str, stdout);
  g_string_free(s, TRUE);
  ps_model_free(m);
  return 0;
}

/* describe after its options: which kind of NAME, then that kind's output. */
static int describe_named(GOptionContext *ctx, const DescribeArgs *a, int argc, char **argv)
{
  if (argc != 2 && argc != 3)
    return usage_error(ctx, "describe needs a NAME%s", argc > 3 ? " (extra arguments)" : "");
  const char *kind = argc == 3 ? argv[1] : NULL, *name = argv[argc - 1];
  if (kind && strcmp(kind, "experiment") && strcmp(kind, "topology") && strcmp(kind, "model"))
    return usage_error(ctx, "describe: unknown kind '%s' (experiment, topology or model)", kind);
  if (!kind && !(kind = describe_kind_of(name))) {
    fprintf(stderr, "podsim: describe: no experiment, topology or model named '%s'\n", name);
    return EXIT_INPUT;
  }
  int status = describe_args_check(ctx, a, kind);
  if (status)
    return status;
  if (strcmp(kind, "experiment") == 0)
    return describe_experiment(ctx, a, name);
  if (strcmp(kind, "model") == 0)
    return describe_model(name);
  /* a topology's keys as `run` takes them (topology.chip...) work here too */
  GPtrArray *sets = g_ptr_array_new();
  for (char **s = a->sets; s && *s; s++)
    g_ptr_array_add(sets, *s + (g_str_has_prefix(*s, "topology.") ? strlen("topology.") : 0));
  g_ptr_array_add(sets, NULL);
  GError *error = NULL;
  PsTopology *t = ps_topology_load(name, (const char *const *)sets->pdata, &error);
  g_ptr_array_free(sets, TRUE);
  if (!t)
    return fail(error);
  describe_topology(t);
  ps_topology_free(t);
  return 0;
}

static int cmd_describe(int argc, char **argv)
{
  DescribeArgs a = {.device = G_MININT};
  g_autoptr(GOptionContext) ctx = describe_context(&a);
  GError *error = NULL;
  int status;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    status = usage_error(ctx, "%s", error->message);
    g_error_free(error);
  } else {
    status = describe_named(ctx, &a, argc, argv);
  }
  g_strfreev(a.sets);
  return status;
}

/* SIGINT, SIGTERM, SIGHUP: remove the trace being written, then die of
 * the signal as if unhandled (the shell sees the usual status). */
static void on_fatal_signal(int sig)
{
  ps_trace_remove_unfinished();
  signal(sig, SIG_DFL);
  raise(sig);
}

static int dispatch(int argc, char **argv)
{
  struct sigaction sa = {.sa_handler = on_fatal_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  /* the terminal's character set for GOption's help ("[OPTION…]"); numbers
   * stay in the C locale (LC_NUMERIC untouched) */
  setlocale(LC_CTYPE, "");
  GError *dir_error = NULL;
  if (argc >= 2 && argv[1][0] != '-' && !ps_data_dirs_check(&dir_error))
    return fail(dir_error); /* every command looks names up there */
  /* GOption's usage lines name the program: "podsim run [OPTION?] ..." */
  if (argc >= 2 && strcmp(argv[1], "run") == 0) {
    g_set_prgname("podsim run");
    return cmd_run(argc - 1, argv + 1);
  }
  if (argc >= 2 && strcmp(argv[1], "list") == 0)
    return ps_cli_list(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "describe") == 0) {
    g_set_prgname("podsim describe");
    return cmd_describe(argc - 1, argv + 1);
  }
  if (argc >= 2 && strcmp(argv[1], "collective") == 0) return ps_cli_collective(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "sweep") == 0) return ps_cli_sweep(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "compare") == 0) return ps_cli_compare(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "validate") == 0) return ps_cli_validate(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "regress") == 0) return ps_cli_regress(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "timeline") == 0) {
    g_set_prgname("podsim timeline");
    return ps_cli_timeline(argc - 1, argv + 1);
  }

  gboolean version = FALSE;
  GOptionEntry entries[] = {
      {"version", 'V', 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
      {NULL}};
  g_autoptr(GOptionContext) ctx = g_option_context_new("COMMAND [ARGS...] - TPU pod simulator");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_description(ctx, usage_text);
  GError *error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    int st = usage_error(ctx, "%s", error->message);
    g_error_free(error);
    return st;
  }
  if (version) {
    printf("podsim %s\n", PS_VERSION);
    return 0;
  }
  if (argc < 2)
    return usage_error(ctx, "missing COMMAND%s", "");
  return usage_error(ctx, "unknown command '%s'", argv[1]);
}

/* Every command's output goes through stdout's buffer: an output that
 * could not be written (a full disk, /dev/full, a closed pipe) fails the
 * command, with exit status 2, rather than passing for a run that printed. */
int main(int argc, char **argv)
{
  int status = dispatch(argc, argv);
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "podsim: standard output: %s\n",
            errno ? g_strerror(errno) : "write error");
    return status == 0 ? 2 : status;
  }
  return status;
}

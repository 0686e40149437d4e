/* compare.c: `podsim compare` (see compare.h).
 *
 *   podsim compare A [B] [--set k=v]... [--set-a k=v]... [--set-b k=v]... [--json]
 *
 * A is loaded with --set then --set-a, B (A again when left out) with --set
 * then --set-b; both are loaded and checked (ps_run_check) before either
 * runs, then each runs as `podsim run --no-trace --quiet` would.  The
 * rows are the step time, its breakdown with the compute split under
 * compute (MXU-bound, memory-bound, launch overhead, and flash attention's
 * softmax in series where either side has any), the collective time
 * exposed and busy along each mesh axis either side has collectives on, examples/s,
 * tokens/s (token-input models), MXU utilization, MFU, HFU and HBM peak;
 * each shows A, B, B - A and B / A.
 * Invariant: nothing is printed to stdout unless both runs succeeded; a
 * ratio whose A is 0 is "-" in the table and null in the JSON. */
#include "cli/compare.h"

#include "cli/cli-common.h"

#include "io/config.h"
#include "run/run.h"
#include "run/experiment.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_INPUT 2

/* One row of the table: where its value is and how it prints. */
typedef struct {
  const char *label;
  const char *key;      /* in the JSON diff/ratio (NULL for a breakdown category) */
  int category;         /* breakdown index, or -1 */
  int axis;             /* mesh axis of a collective_axes row, or -1 */
  gboolean busy;        /* that row: busy_s (else exposed_s) */
  const char *split;    /* a compute_split row: its key there, or NULL */
  double scale;         /* printed value = value x scale */
  const char *format;   /* of a printed value */
  const char *dformat;  /* of a printed difference */
} Metric;

static const Metric metrics[] = {
    {"step time (us)", "step_time_s", -1, -1, FALSE, NULL, 1e6, "%14.3f", "%+14.3f"},
    {NULL, NULL, 0, -1, FALSE, NULL, 1e6, "%14.3f", "%+14.3f"}, /* one per breakdown category */
    {NULL, "collective_axes", -1, 0, FALSE, NULL, 1e6, "%14.3f", "%+14.3f"}, /* two per axis used */
    {"examples/s", "examples_per_s", -1, -1, FALSE, NULL, 1, "%14.0f", "%+14.0f"},
    {"tokens/s", "tokens_per_s", -1, -1, FALSE, NULL, 1, "%14.0f", "%+14.0f"},
    {"MXU utilization (%)", "mxu_utilization", -1, -1, FALSE, NULL, 100, "%14.2f", "%+14.2f"},
    {"MFU (%)", "mfu", -1, -1, FALSE, NULL, 100, "%14.2f", "%+14.2f"},
    {"HFU (%)", "hfu", -1, -1, FALSE, NULL, 100, "%14.2f", "%+14.2f"},
    {"HBM peak (MiB)", "hbm_peak_bytes", -1, -1, FALSE, NULL, 1.0 / 1048576, "%14.2f", "%+14.2f"},
};

/* The compute split, printed under the compute row: the summary's
 * compute_split keys. */
static const Metric split_rows[] = {
    {"    MXU-bound", "compute_split", -1, -1, FALSE, "mxu_s", 1e6, "%14.3f", "%+14.3f"},
    {"    memory-bound", "compute_split", -1, -1, FALSE, "memory_s", 1e6, "%14.3f", "%+14.3f"},
    {"    launch overhead", "compute_split", -1, -1, FALSE, "overhead_s", 1e6, "%14.3f", "%+14.3f"},
    {"    softmax (serial)", "compute_split", -1, -1, FALSE, "serial_vector_s", 1e6, "%14.3f",
     "%+14.3f"},
};

#define input_error(...) ps_cli_input_error("compare", __VA_ARGS__)

static double metric_value(const Metric *m, const PsSummary *s)
{
  if (m->category >= 0)
    return s->breakdown[m->category];
  if (m->axis >= 0)
    return m->busy ? s->axis_busy_s[m->axis] : s->axis_exposed_s[m->axis];
  if (m->split) {
    if (strcmp(m->split, "mxu_s") == 0)
      return s->compute_mxu_s;
    if (strcmp(m->split, "memory_s") == 0)
      return s->compute_memory_s;
    if (strcmp(m->split, "overhead_s") == 0)
      return s->compute_overhead_s;
    return s->compute_serial_s;
  }
  if (strcmp(m->key, "step_time_s") == 0)
    return s->step_time_s;
  if (strcmp(m->key, "examples_per_s") == 0)
    return s->examples_per_s;
  if (strcmp(m->key, "tokens_per_s") == 0)
    return s->tokens_per_s;
  if (strcmp(m->key, "mxu_utilization") == 0)
    return s->mxu_utilization;
  if (strcmp(m->key, "mfu") == 0)
    return s->mfu;
  if (strcmp(m->key, "hfu") == 0)
    return s->hfu;
  return (double)s->hbm_peak_bytes;
}

/* The table's rows in order: the breakdown placeholder becomes a row per
 * category, with the compute split under compute (its softmax row only
 * when either side has flash attention's softmax in series), the axes' a
 * row of exposed and one of busy time per axis either side has
 * collectives along; tokens/s only when both sides count tokens. */
static GArray *metric_rows(const PsSummary *a, const PsSummary *b)
{
  GArray *rows = g_array_new(FALSE, FALSE, sizeof(Metric));
  for (guint i = 0; i < G_N_ELEMENTS(metrics); i++) {
    Metric m = metrics[i];
    if (m.label && (strcmp(m.key, "tokens_per_s") != 0 || (a->sequence && b->sequence))) {
      g_array_append_val(rows, m);
    } else if (m.category >= 0) {
      for (int c = 0; c < PS_TIME_N_CATEGORIES; c++) {
        m.label = ps_time_category_name(c);
        m.category = c;
        g_array_append_val(rows, m);
        for (guint k = 0; c == PS_TIME_COMPUTE && k < G_N_ELEMENTS(split_rows); k++)
          if (strcmp(split_rows[k].split, "serial_vector_s") != 0 ||
              a->compute_serial_s > 0 || b->compute_serial_s > 0)
            g_array_append_val(rows, split_rows[k]);
      }
    } else if (m.axis >= 0) {
      for (int x = 0; x < PS_N_AXES; x++)
        for (int busy = 0; busy < 2 && (a->axis_colls[x] || b->axis_colls[x]); busy++) {
          m.label = busy ? "busy" : "exposed";
          m.axis = x;
          m.busy = busy;
          g_array_append_val(rows, m);
        }
    }
  }
  return rows;
}

/* Loads and runs one side; its GError names the side. */
/* One side loaded (--set, then its own) and checked as a run would check
 * it (ps_run_check), before either side runs; errors say which side.
 * (transfer full) */
static PsExperiment *load_side(const char *side, const char *name, char **sets, char **own,
                               GError **error)
{
  GPtrArray *ov = g_ptr_array_new();
  for (char **s = sets; s && *s; s++)
    g_ptr_array_add(ov, *s);
  for (char **s = own; s && *s; s++)
    g_ptr_array_add(ov, *s);
  g_ptr_array_add(ov, NULL);
  PsExperiment *exp = ps_experiment_load(name, (const char *const *)ov->pdata, error);
  g_ptr_array_free(ov, TRUE);
  if (exp && !ps_run_check(exp, NULL, error)) {
    ps_experiment_free(exp);
    exp = NULL;
  }
  if (!exp)
    g_prefix_error(error, "%s: ", side);
  return exp;
}

/* Both sides loaded and checked, then run as `podsim run --no-trace
 * --quiet` would.  FALSE with *error (whose side it names) otherwise. */
static gboolean run_sides(const char *name_a, const char *name_b, char **sets, char **set_a,
                          char **set_b, PsExperiment **ea, PsExperiment **eb, PsSummary *a,
                          PsSummary *b, GError **error)
{
  PsRunOptions opt = {0}; /* no trace, no log */
  if (!(*ea = load_side("A", name_a, sets, set_a, error)) ||
      !(*eb = load_side("B", name_b, sets, set_b, error)))
    return FALSE;
  if (!ps_run(*ea, &opt, a, error)) {
    g_prefix_error(error, "A: ");
    return FALSE;
  }
  if (!ps_run(*eb, &opt, b, error)) {
    g_prefix_error(error, "B: ");
    return FALSE;
  }
  return TRUE;
}

/* "resnet50-v3-8: model resnet50 on tpu-v3-8, 8 replicas, global batch
 * 1024, bf16, numerics off".  (transfer full) */
static char *side_text(const PsExperiment *e, const PsSummary *s)
{
  g_autofree char *stages =
      s->stages > 1 ? g_strdup_printf(" x %d stages, %d micro-batches", s->stages,
                                      s->micro_batches)
                    : g_strdup("");
  g_autofree char *clock = ps_topology_clock_text(e->topology);
  return g_strdup_printf("%s: model %s on %s, %d replica%s%s, global batch %" G_GINT64_FORMAT
                         ", %s, numerics %s%s",
                         e->name, e->model->name, e->topology->name, s->replicas,
                         s->replicas == 1 ? "" : "s", stages, e->global_batch,
                         ps_config_precision_text(&e->numerics),
                         e->numerics.enabled ? "on" : "off", clock);
}

static void print_sets(const char *flag, char **sets)
{
  for (char **s = sets; s && *s; s++)
    printf(" %s %s", flag, *s);
}

static void print_table(const GArray *rows, const PsExperiment *ea, const PsSummary *a,
                        const PsExperiment *eb, const PsSummary *b, char **sets, char **set_a,
                        char **set_b)
{
  g_autofree char *ta = side_text(ea, a), *tb = side_text(eb, b);
  printf("A  %s\n", ta);
  if (sets || set_a) {
    printf("  ");
    print_sets("--set", sets);
    print_sets("--set-a", set_a);
    printf("\n");
  }
  printf("B  %s\n", tb);
  if (sets || set_b) {
    printf("  ");
    print_sets("--set", sets);
    print_sets("--set-b", set_b);
    printf("\n");
  }
  printf("\n%-22s %14s %14s %14s %10s\n", "", "A", "B", "B - A", "B / A");
  for (guint i = 0; i < rows->len; i++) {
    const Metric *m = &g_array_index(rows, Metric, i);
    double va = metric_value(m, a), vb = metric_value(m, b);
    g_autofree char *label =
        m->category >= 0 ? g_strdup_printf("  %s", m->label)
        : m->axis >= 0   ? g_strdup_printf("%s %s (us)", ps_axis_name(m->axis), m->label)
                         : g_strdup(m->label);
    printf("%-22s ", label);
    printf(m->format, va * m->scale);
    printf(" ");
    printf(m->format, vb * m->scale);
    printf(" ");
    char d[64];
    snprintf(d, sizeof d, m->dformat, (vb - va) * m->scale);
    char *minus = strchr(d, '-');
    if (minus && strtod(d, NULL) == 0) /* a difference that rounds to zero has no sign */
      *minus = '+';
    printf("%s", d);
    if (va != 0)
      printf(" %10.4f\n", vb / va);
    else
      printf(" %10s\n", "-");
  }
}

/* o's object under key, made empty when missing.  (transfer none) */
static json_object *nested(json_object *o, const char *key)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !v) {
    v = json_object_new_object();
    json_object_object_add(o, key, v);
  }
  return v;
}

static void print_json(const GArray *rows, const PsExperiment *ea, const PsSummary *a,
                       const PsExperiment *eb, const PsSummary *b)
{
  g_autofree char *ja = ps_summary_to_json(ea, a), *jb = ps_summary_to_json(eb, b);
  json_object *o = json_object_new_object();
  json_object_object_add(o, "a", json_tokener_parse(ja));
  json_object_object_add(o, "b", json_tokener_parse(jb));
  json_object *diff = json_object_new_object(), *ratio = json_object_new_object();
  for (guint i = 0; i < rows->len; i++) {
    const Metric *m = &g_array_index(rows, Metric, i);
    double va = metric_value(m, a), vb = metric_value(m, b);
    json_object *d = m->key && strcmp(m->key, "hbm_peak_bytes") == 0
                         ? json_object_new_int64(b->hbm_peak_bytes - a->hbm_peak_bytes)
                         : json_object_new_double(vb - va);
    json_object *r = va != 0 ? json_object_new_double(vb / va) : NULL;
    if (m->split) {
      json_object_object_add(nested(diff, m->key), m->split, d);
      json_object_object_add(nested(ratio, m->key), m->split, r);
      continue;
    }
    if (m->category < 0 && m->axis < 0) {
      json_object_object_add(diff, m->key, d);
      json_object_object_add(ratio, m->key, r);
      continue;
    }
    /* the breakdown and the axes nest as the summary nests them */
    const char *outer = m->category >= 0 ? "breakdown" : m->key;
    const char *inner = m->category >= 0 ? m->label : m->busy ? "busy_s" : "exposed_s";
    json_object *dn = nested(diff, outer), *rn = nested(ratio, outer);
    if (m->axis >= 0) {
      dn = nested(dn, ps_axis_name(m->axis));
      rn = nested(rn, ps_axis_name(m->axis));
    }
    json_object_object_add(dn, inner, d);
    json_object_object_add(rn, inner, r);
  }
  json_object_object_add(o, "diff", diff);
  json_object_object_add(o, "ratio", ratio);
  printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(o);
}

int ps_cli_compare(int argc, char **argv)
{
  g_auto(GStrv) sets = NULL, set_a = NULL, set_b = NULL;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &sets,
       "Override a config field of both A and B (repeatable)", "PATH=VALUE"},
      {"set-a", 'a', 0, G_OPTION_ARG_STRING_ARRAY, &set_a,
       "Override a config field of A only, after --set (repeatable)", "PATH=VALUE"},
      {"set-b", 'b', 0, G_OPTION_ARG_STRING_ARRAY, &set_b,
       "Override a config field of B only, after --set (repeatable)", "PATH=VALUE"},
      {"json", 'j', 0, G_OPTION_ARG_NONE, &json,
       "Print one object {\"a\": summary, \"b\": summary, \"diff\": {...}, \"ratio\": {...}}",
       NULL},
      {NULL}};
  g_set_prgname("podsim compare");
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("A [B] - run two experiments and compare them side by side");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Runs A and B (A again when B is left out, so that --set-a and --set-b make\n"
           "the difference) without traces and prints their step time, its breakdown\n"
           "(compute split into MXU-bound, memory-bound and launch time, and flash\n"
           "attention's softmax in series where either side has it), the collective\n"
           "time exposed and busy along each mesh axis, examples/s, tokens/s, MXU\n"
           "utilization, MFU, HFU and HBM peak, with B - A and B / A per row.");
  g_option_context_set_description(
      ctx, "Examples:\n"
           "  podsim compare resnet50-v3-8 --set-b topology.ici.bandwidth_Bps=40GB/s\n"
           "  podsim compare scaling-resnet50-32 scaling-resnet50-128 --set steps=20 --json");
  GError *error = NULL;
  int parse_status;
  if (!ps_cli_parse(ctx, "compare", &argc, &argv, &parse_status))
    return parse_status;
  if (argc < 2 || argc > 3)
    return input_error("give one or two EXPERIMENTs, got %d (see podsim compare --help)",
                       argc - 1);
  if (argc == 2 && !set_a && !set_b)
    return input_error("A alone is compared with itself: give B, or --set-a or --set-b to make "
                       "one side differ (see podsim compare --help)");
  const char *name_a = argv[1], *name_b = argc == 3 ? argv[2] : argv[1];
  PsSummary a = {0}, b = {0};
  PsExperiment *ea = NULL, *eb = NULL;
  int status = 0;
  if (!run_sides(name_a, name_b, sets, set_a, set_b, &ea, &eb, &a, &b, &error)) {
    status = error->domain == PS_INPUT_ERROR ? EXIT_INPUT : 1;
    fprintf(stderr, "podsim: compare: %s\n", error->message);
    g_error_free(error);
  } else {
    g_autoptr(GArray) rows = metric_rows(&a, &b);
    if (json)
      print_json(rows, ea, &a, eb, &b);
    else
      print_table(rows, ea, &a, eb, &b, sets, set_a, set_b);
  }
  ps_summary_clear(&a);
  ps_summary_clear(&b);
  ps_experiment_free(ea);
  ps_experiment_free(eb);
  return status;
}

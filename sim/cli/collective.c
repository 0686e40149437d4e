/* collective.c: `podsim collective` (see collective.h).
 *
 *   podsim collective --topology NAME|FILE|ring:N|torus:XxY[xZ] [--set k=v]...
 *       [--op allreduce|reducescatter|allgather|broadcast|sendrecv]
 *       [--algo ring|bidir|torus|multiring|p2p|auto] [--bytes LIST] [--chunk SIZE]
 *       [--group D,D,...] [--root M] [--json] [--trace FILE]
 *
 * The --algo names are the algorithm table's (ps_coll_algo_names).  Every
 * size runs on a fresh engine and network, every member arriving at
 * time 0 (timing only: one byte per element); the time is when the last
 * member is done.  Bus bandwidth uses nccl-tests' factors: 2(n-1)/n for
 * all-reduce, (n-1)/n for reduce-scatter and all-gather, 1 otherwise.
 * Invariant: nothing is printed to stdout unless every input was valid, and
 * bad input exits 2 with one "podsim: ..." line. */
#include "cli/collective.h"

#include "cli/cli-common.h"

#include "collectives/collective.h"
#include "common/json.h"
#include "io/trace.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define EXIT_INPUT 2
/* Chunks per buffer at most, so one message never queues more events than
 * memory holds comfortably. */
#define MAX_CHUNKS_PER_BUFFER (INT64_C(1) << 24)

static int fail(GError *error)
{
  int status = error->domain == PS_INPUT_ERROR ? EXIT_INPUT : 1;
  fprintf(stderr, "podsim: %s\n", error->message);
  g_error_free(error);
  return status;
}

#define input_error(...) ps_cli_input_error("collective", __VA_ARGS__)

/* "8", "100M", "64Ki", "1GB", "1GiB": bytes with an SI (K, M, G: powers of
 * 1000) or binary (Ki, Mi, Gi: powers of 1024) prefix, as experiment files
 * take sizes (ps_parse_quantity); whole, up to 2^40. */
static gboolean parse_size(const char *text, int64_t *out)
{
  double v;
  if (!ps_parse_quantity("buffer_bytes", text, &v) || v < 0 || v > 1099511627776.0 ||
      v != floor(v))
    return FALSE;
  *out = (int64_t)v;
  return TRUE;
}

/* "8,1Ki,...,1Gi": sizes in order; "..." doubles from the size before it up
 * to the size after it. */
static GArray *parse_sizes(const char *text, GError **error)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(int64_t));
  g_auto(GStrv) parts = g_strsplit(text, ",", -1);
  gboolean pending_dots = FALSE;
  for (int i = 0; parts[i]; i++) {
    g_strstrip(parts[i]);
    if (strcmp(parts[i], "...") == 0) {
      if (out->len == 0 || pending_dots || !parts[i + 1]) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                    "collective: --bytes %s: '...' must stand between two sizes, e.g. "
                    "8,...,1G",
                    text);
        goto fail;
      }
      pending_dots = TRUE;
      continue;
    }
    int64_t v;
    if (!parse_size(parts[i], &v)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "collective: --bytes %s: '%s' is not a size; use bytes, K/M/G (powers of "
                  "1000) or Ki/Mi/Gi (powers of 1024), up to 1024Gi, e.g. 8,1Ki,...,1Gi",
                  text, parts[i]);
      goto fail;
    }
    if (pending_dots) {
      int64_t prev = g_array_index(out, int64_t, out->len - 1);
      if (prev <= 0 || v <= prev) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "collective: --bytes %s: '...' needs a positive size before it and a "
                    "larger one after it",
                    text);
        goto fail;
      }
      for (int64_t x = prev * 2; x < v; x *= 2)
        g_array_append_val(out, x);
      pending_dots = FALSE;
    }
    g_array_append_val(out, v);
  }
  if (out->len == 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX, "collective: --bytes is empty");
    goto fail;
  }
  return out;
fail:
  g_array_free(out, TRUE);
  return NULL;
}

static GArray *parse_group(const char *text, GError **error)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(int));
  g_auto(GStrv) parts = g_strsplit(text, ",", -1);
  for (int i = 0; parts[i]; i++) {
    char *end = NULL;
    g_strstrip(parts[i]);
    gint64 v = g_ascii_strtoll(parts[i], &end, 10);
    if (!*parts[i] || *end || v < 0 || v > G_MAXINT) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "collective: --group %s: '%s' is not a device number", text, parts[i]);
      g_array_free(out, TRUE);
      return NULL;
    }
    int d = (int)v;
    g_array_append_val(out, d);
  }
  return out;
}

static double bus_factor(PsCollOp op, int n)
{
  switch (op) {
  case PS_COLL_ALL_REDUCE:
    return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  case PS_COLL_REDUCE_SCATTER:
  case PS_COLL_ALL_GATHER:
    return n > 1 ? (double)(n - 1) / n : 0.0;
  default:
    return 1.0;
  }
}

typedef struct {
  int64_t bytes;
  double time_s, formula_s, algbw, busbw, wall_s;
  uint64_t events;
} Row;

/* One size on a fresh engine; fills row; writes the trace if asked. */
static gboolean run_size(const PsTopology *topo, PsCollOp op, const char *algo,
                         const GArray *group, int root, int64_t bytes, int64_t chunk,
                         const char *trace_path, Row *row, char **picked, char **why,
                         GError **error)
{
  double w0 = (double)g_get_monotonic_time() / 1e6;
  PsEngine *engine = ps_engine_new();
  PsNetwork *net = ps_network_new(engine, topo, chunk);
  PsCollSpec spec = {op, algo, (const int *)(void *)group->data, (int)group->len, bytes, 1,
                     root};
  PsCollective *c = ps_collective_new(net, &spec, error);
  gboolean ok = c != NULL;
  if (!ok)
    g_prefix_error(error, "collective: ");
  PsTrace *trace = NULL;
  if (ok && trace_path) {
    trace = ps_trace_open(trace_path, error);
    ok = trace != NULL;
    if (ok)
      ps_network_set_trace(net, trace, 1);
  }
  if (ok) {
    ps_time_t last = ps_collective_run_round(c);
    row->bytes = bytes;
    row->time_s = ps_time_to_s(last);
    row->formula_s = ps_collective_predict_s(c);
    row->algbw = row->time_s > 0 ? (double)bytes / row->time_s : 0.0;
    row->busbw = row->algbw * bus_factor(op, (int)group->len);
    row->events = ps_engine_events_run(engine);
    g_free(*picked);
    g_free(*why);
    *picked = g_strdup(ps_collective_algo(c));
    *why = g_strdup(ps_collective_why(c));
    if (trace) {
      ps_network_set_trace(net, NULL, 0);
      ok = ps_trace_close(trace, error);
    }
  } else if (trace) {
    ps_trace_abort(trace);
  }
  ps_collective_free(c);
  ps_network_free(net);
  ps_engine_free(engine);
  row->wall_s = (double)g_get_monotonic_time() / 1e6 - w0;
  return ok;
}

/* A size as --bytes takes it back: binary (Ki, Mi, Gi) or SI (K, M, G),
 * whichever prefix is the largest that divides it, else bytes. */
static char *human_size(int64_t b)
{
  static const struct {
    const char *p;
    int64_t f;
  } units[] = {{"Gi", INT64_C(1) << 30}, {"G", 1000000000}, {"Mi", INT64_C(1) << 20},
               {"M", 1000000}, {"Ki", 1024}, {"K", 1000}};
  for (size_t i = 0; i < G_N_ELEMENTS(units); i++)
    if (b >= units[i].f && b % units[i].f == 0)
      return g_strdup_printf("%" G_GINT64_FORMAT "%s", b / units[i].f, units[i].p);
  return g_strdup_printf("%" G_GINT64_FORMAT, b);
}

/* The command line, as parsed. */
typedef struct {
  char *topo_name, *op_name, *algo, *bytes_text, *chunk_text, *group_text, *trace;
  char **sets;
  gint root;
  gboolean json;
} Options;

static void options_clear(Options *o)
{
  g_free(o->topo_name);
  g_free(o->op_name);
  g_free(o->algo);
  g_free(o->bytes_text);
  g_free(o->chunk_text);
  g_free(o->group_text);
  g_free(o->trace);
  g_strfreev(o->sets);
}

/* "ring, bidir, torus, p2p or auto": the table's names.  (transfer full) */
static char *algo_choices(void)
{
  g_auto(GStrv) names = ps_coll_algo_names();
  guint n = g_strv_length(names);
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < n; i++)
    g_string_append_printf(s, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", names[i]);
  return g_string_free(s, FALSE);
}

/* The --topology help, with the ICI figures of ring:N and torus:XxY read
 * from the shorthand itself.  (transfer full) */
static char *topology_help(void)
{
  PsTopology *t = ps_network_shorthand("ring:2", NULL, NULL);
  g_autofree char *ici =
      t ? g_strdup_printf(": %.4g GB/s per link each way, %.3g us per hop",
                          t->ici_bandwidth_Bps / 1e9, t->ici_latency_s * 1e6)
        : g_strdup("");
  if (t)
    ps_topology_free(t);
  return g_strdup_printf("A topology name or file (see `podsim list topologies`), or ring:N or "
                         "torus:XxY[xZ] (single-core chips, Cloud TPU v3 ICI figures%s)",
                         ici);
}

/* Parses argv into o; FALSE with *status when the command must stop. */
static gboolean parse_options(Options *o, int *argc, char ***argv, int *status)
{
  g_autofree char *choices = algo_choices();
  g_autofree char *topo_help = topology_help();
  g_autofree char *algo_help = g_strdup_printf(
      "%s (default auto: the fastest prediction; p2p runs sendrecv)", choices);
  GOptionEntry entries[] = {
      {"topology", 't', 0, G_OPTION_ARG_STRING, &o->topo_name, topo_help, "TOPOLOGY"},
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &o->sets,
       "Override a topology field, e.g. --set ici.bandwidth_Bps=100e9 or --set "
       "ici.latency_s=2e-6 (repeatable)",
       "PATH=VALUE"},
      {"op", 'o', 0, G_OPTION_ARG_STRING, &o->op_name,
       "allreduce (default), reducescatter, allgather, broadcast or sendrecv", "OP"},
      {"algo", 'a', 0, G_OPTION_ARG_STRING, &o->algo, algo_help, "ALGO"},
      {"bytes", 'b', 0, G_OPTION_ARG_STRING, &o->bytes_text,
       "Buffer sizes per member: bytes, K/M/G (powers of 1000, as in experiment files) or "
       "Ki/Mi/Gi (powers of 1024), an optional B after; comma-separated; '...' doubles "
       "between its neighbours (default 8,...,64Mi)",
       "LIST"},
      {"chunk", 'c', 0, G_OPTION_ARG_STRING, &o->chunk_text,
       "Size messages are cut into on the links, as --bytes (default 1Mi)", "SIZE"},
      {"group", 'g', 0, G_OPTION_ARG_STRING, &o->group_text,
       "Devices taking part, e.g. 0,2,4,6 (default: every device of the topology)", "D,D,..."},
      {"root", 'r', 0, G_OPTION_ARG_INT, &o->root,
       "broadcast: the root (a member index); sendrecv: the sender (default 0)", "M"},
      {"json", 'j', 0, G_OPTION_ARG_NONE, &o->json, "Print one JSON object instead of a table",
       NULL},
      {"trace", 0, 0, G_OPTION_ARG_FILENAME, &o->trace,
       "Write a Chrome/Perfetto trace of the last size: a track per link direction, a slice "
       "per chunk, flows from send to receive",
       "FILE"},
      {NULL}};
  g_set_prgname("podsim collective");
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("- time a collective on the simulated interconnect");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_summary(
      ctx, "Simulates a collective over the topology's links, chunk by chunk, for each size,\n"
           "and prints time, algorithm and bus bandwidth beside the algorithm's closed form\n"
           "(the columns of nccl-tests).");
  g_option_context_set_description(
      ctx, "Examples:\n"
           "  podsim collective --topology ring:8 --algo ring --bytes 1Ki,...,1Gi\n"
           "  podsim collective --topology tpu-v4-8192 --bytes 100MB   (100e6 bytes; 100MiB is 100 x 2^20)\n"
           "  podsim collective --topology torus:4x4 --op allgather --set ici.latency_s=2e-6");
  return ps_cli_parse(ctx, "collective", argc, argv, status);
}

/* A shorthand (ring:N, torus:XxY) or a topology file, with --set applied.
 * (transfer full) */
static PsTopology *load_topology(const char *name, char **sets, GError **error)
{
  GPtrArray *ov = g_ptr_array_new();
  for (char **s = sets; s && *s; s++)
    g_ptr_array_add(ov, *s);
  g_ptr_array_add(ov, NULL);
  PsTopology *topo;
  if (ps_network_is_shorthand(name)) {
    topo = ps_network_shorthand(name, (const char *const *)ov->pdata, error);
  } else {
    /* --set paths are the topology file's own; accept a leading "topology." */
    for (guint i = 0; i + 1 < ov->len; i++)
      if (g_str_has_prefix(ov->pdata[i], "topology."))
        ov->pdata[i] = (char *)ov->pdata[i] + 9;
    topo = ps_topology_load(name, (const char *const *)ov->pdata, error);
  }
  g_ptr_array_free(ov, TRUE);
  return topo;
}

/* The members: --group, or every device.  (transfer full) */
static GArray *member_group(const char *text, int n_dev, GError **error)
{
  if (text)
    return parse_group(text, error);
  GArray *group = g_array_sized_new(FALSE, FALSE, sizeof(int), n_dev);
  for (int d = 0; d < n_dev; d++)
    g_array_append_val(group, d);
  return group;
}

/* What a run printed is about. */
typedef struct {
  const PsTopology *topo;
  PsCollOp op;
  const char *requested, *picked, *why;
  guint members;
  int64_t chunk;
  const char *trace;
} Report;

static void print_json(const Report *rp, const GArray *rows)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "topology", json_object_new_string(rp->topo->name));
  json_object_object_add(o, "op", json_object_new_string(ps_coll_op_name(rp->op)));
  json_object_object_add(o, "algo", json_object_new_string(rp->picked));
  json_object_object_add(o, "requested_algo", json_object_new_string(rp->requested));
  json_object_object_add(o, "why", json_object_new_string(rp->why));
  json_object_object_add(o, "members", json_object_new_int((int)rp->members));
  json_object_object_add(o, "chunk_bytes", json_object_new_int64(rp->chunk));
  json_object *arr = json_object_new_array();
  for (guint i = 0; i < rows->len; i++) {
    const Row *r = &g_array_index(rows, Row, i);
    json_object *ro = json_object_new_object();
    json_object_object_add(ro, "bytes", json_object_new_int64(r->bytes));
    json_object_object_add(ro, "time_s", json_object_new_double(r->time_s));
    json_object_object_add(ro, "formula_s", json_object_new_double(r->formula_s));
    json_object_object_add(ro, "algbw_Bps", json_object_new_double(r->algbw));
    json_object_object_add(ro, "busbw_Bps", json_object_new_double(r->busbw));
    json_object_object_add(ro, "events", json_object_new_int64((int64_t)r->events));
    json_object_object_add(ro, "wall_s", json_object_new_double(r->wall_s));
    json_object_array_add(arr, ro);
  }
  json_object_object_add(o, "rows", arr);
  printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
  json_object_put(o);
}

static void print_table(const Report *rp, const GArray *rows)
{
  const PsTopology *topo = rp->topo;
  g_autofree char *cs = human_size(rp->chunk);
  printf("# podsim collective: %s on %s, %u member%s, algorithm %s, chunk %s\n",
         ps_coll_op_name(rp->op), topo->name, rp->members, rp->members == 1 ? "" : "s",
         rp->picked, cs);
  printf("# %s\n", rp->why);
  printf("# ICI %.4g GB/s per link each way x %d, %.3g us per hop; on-chip %.4g GB/s\n",
         topo->ici_bandwidth_Bps / 1e9, topo->ici_links_per_neighbor,
         topo->ici_latency_s * 1e6, topo->on_chip_bandwidth_Bps / 1e9);
  if (topo->slices > 1)
    printf("# %d slices; DCN %.4g GB/s per host NIC each way, %.3g us NIC latency, %d hosts per "
           "leaf, oversubscription %g, %.3g us per switch hop\n",
           topo->slices, topo->dcn.nic_bandwidth_Bps / 1e9, topo->dcn.nic_latency_s * 1e6,
           topo->dcn.hosts_per_leaf, topo->dcn.oversubscription, topo->dcn.hop_latency_s * 1e6);
  printf("#\n# %10s %14s %12s %12s %14s %9s %12s %9s\n", "size", "time(us)", "algbw(GB/s)",
         "busbw(GB/s)", "formula(us)", "sim/form", "events", "wall(s)");
  for (guint i = 0; i < rows->len; i++) {
    const Row *r = &g_array_index(rows, Row, i);
    g_autofree char *hs = human_size(r->bytes);
    printf("  %10s %14.3f %12.3f %12.3f %14.3f %9.4f %12" G_GUINT64_FORMAT " %9.3f\n", hs,
           r->time_s * 1e6, r->algbw / 1e9, r->busbw / 1e9, r->formula_s * 1e6,
           r->formula_s > 0 ? r->time_s / r->formula_s : 1.0, r->events, r->wall_s);
  }
  if (rp->trace)
    printf("# trace of the last size: %s (open it at https://ui.perfetto.dev)\n", rp->trace);
}

/* Runs every size and prints the report; the exit status. */
static int run_sizes(const Options *o, const PsTopology *topo, PsCollOp op, const char *algo,
                     const GArray *sizes, int64_t chunk, const GArray *group)
{
  GError *error = NULL;
  g_autoptr(GArray) rows = g_array_new(FALSE, FALSE, sizeof(Row));
  g_autofree char *picked = NULL, *why = NULL;
  for (guint i = 0; i < sizes->len; i++) {
    Row row;
    int64_t b = g_array_index(sizes, int64_t, i);
    const char *tp = o->trace && i + 1 == sizes->len ? o->trace : NULL;
    if (!run_size(topo, op, algo, group, o->root, b, chunk, tp, &row, &picked, &why, &error))
      return fail(error);
    g_array_append_val(rows, row);
  }
  Report rp = {.topo = topo, .op = op, .requested = algo, .picked = picked, .why = why,
               .members = group->len, .chunk = chunk, .trace = o->trace};
  if (o->json)
    print_json(&rp, rows);
  else
    print_table(&rp, rows);
  return 0;
}

static int collective_main(const Options *o, int argc, char **argv)
{
  GError *error = NULL;
  if (argc > 1)
    return input_error("unexpected argument '%s' (see podsim collective --help)", argv[1]);
  if (!o->topo_name)
    return input_error("--topology is required, e.g. --topology ring:8 or --topology "
                       "tpu-v3-32 (see podsim list topologies)");
  PsCollOp op = PS_COLL_ALL_REDUCE;
  if (o->op_name && !ps_coll_op_parse(o->op_name, &op))
    return input_error("--op %s: choose allreduce, reducescatter, allgather, broadcast or "
                       "sendrecv",
                       o->op_name);
  const char *algo_name = o->algo ? o->algo : "auto";
  if (!ps_coll_algo_summary(algo_name)) {
    g_autofree char *choices = algo_choices();
  g_autofree char *topo_help = topology_help();
    return input_error("--algo %s: choose %s", algo_name, choices);
  }
  g_autoptr(GArray) sizes = parse_sizes(o->bytes_text ? o->bytes_text : "8,...,64Mi", &error);
  if (!sizes)
    return fail(error);
  int64_t chunk = PS_NETWORK_DEFAULT_CHUNK;
  if (o->chunk_text && (!parse_size(o->chunk_text, &chunk) || chunk < 1))
    return input_error("--chunk %s: not a size of at least 1 byte; use bytes, K/M/G or Ki/Mi/Gi",
                       o->chunk_text);
  int64_t largest = 0;
  for (guint i = 0; i < sizes->len; i++)
    largest = MAX(largest, g_array_index(sizes, int64_t, i));
  if (largest / chunk > MAX_CHUNKS_PER_BUFFER)
    return input_error("--chunk %s cuts %" G_GINT64_FORMAT " bytes into more than %" G_GINT64_FORMAT
                       " chunks; use a chunk of at least %" G_GINT64_FORMAT " bytes",
                       o->chunk_text, largest, MAX_CHUNKS_PER_BUFFER,
                       largest / MAX_CHUNKS_PER_BUFFER + 1);

  PsTopology *topo = load_topology(o->topo_name, o->sets, &error);
  if (!topo)
    return fail(error);
  GArray *group = member_group(o->group_text, ps_topology_devices(topo), &error);
  int status = group ? run_sizes(o, topo, op, algo_name, sizes, chunk, group) : fail(error);
  if (group)
    g_array_free(group, TRUE);
  ps_topology_free(topo);
  return status;
}

int ps_cli_collective(int argc, char **argv)
{
  Options o = {0};
  int status;
  if (!parse_options(&o, &argc, &argv, &status))
    goto out;
  status = collective_main(&o, argc, argv);
out:
  options_clear(&o);
  return status;
}

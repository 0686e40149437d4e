/* timeline.c: `podsim timeline TRACE [--step N] [--replica R]` (see
 * timeline.h).
 *
 * The trace names each device's thread "core C: device D, stage S, replica
 * R" (run/trace-observer.c) and gives each compute slice its kind as category (FWD, BWD,
 * RECOMPUTE) and its step and micro-batch in args.  A gzip-compressed
 * trace (.json.gz, as `run` writes a large one) reads as the JSON does.  Rows come out sorted
 * by stage then start, times in microseconds from the step's first op:
 *   # stage  start_us  end_us  mb  kind */
#include "cli/timeline.h"

#include "common/json.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define EXIT_INPUT 2

typedef struct {
  int stage;
  double start, end;
  int mb;
  const char *kind;
} Row;

static int cmp_row(const void *a, const void *b)
{
  const Row *x = a, *y = b;
  if (x->stage != y->stage)
    return x->stage - y->stage;
  return (x->start > y->start) - (x->start < y->start);
}

static gint64 thread_key(int pid, int tid)
{
  return ((gint64)pid << 32) | (guint32)tid;
}

static int get_int(json_object *o, const char *key, int fallback)
{
  json_object *v;
  return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int(v) : fallback;
}

static const char *get_str(json_object *o, const char *key)
{
  json_object *v;
  return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
             ? json_object_get_string(v)
             : NULL;
}

/* Threads of the chosen replica -> stage + 1, from the thread names.
 * (transfer full) */
static GHashTable *replica_stages(json_object *events, int replica)
{
  GHashTable *stage_of = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
  size_t n = json_object_array_length(events);
  for (size_t i = 0; i < n; i++) {
    json_object *ev = json_object_array_get_idx(events, i);
    const char *ph = get_str(ev, "ph"), *name = get_str(ev, "name");
    if (!ph || strcmp(ph, "M") != 0 || !name || strcmp(name, "thread_name") != 0)
      continue;
    json_object *args = NULL;
    json_object_object_get_ex(ev, "args", &args);
    const char *tname = get_str(args, "name");
    const char *at = tname ? strstr(tname, ", stage ") : NULL;
    int s, r;
    if (!at || sscanf(at, ", stage %d, replica %d", &s, &r) != 2 || r != replica)
      continue;
    gint64 key = thread_key(get_int(ev, "pid", -1), get_int(ev, "tid", -1));
    g_hash_table_insert(stage_of, g_memdup2(&key, sizeof key), GINT_TO_POINTER(s + 1));
  }
  return stage_of;
}

/* The last step any stage ran a forward op of, -1 if none. */
static int last_step(json_object *events)
{
  int step = -1;
  size_t n = json_object_array_length(events);
  for (size_t i = 0; i < n; i++) {
    json_object *ev = json_object_array_get_idx(events, i), *args = NULL;
    json_object_object_get_ex(ev, "args", &args);
    const char *cat = get_str(ev, "cat");
    if (cat && strcmp(cat, "FWD") == 0)
      step = MAX(step, get_int(args, "step", -1));
  }
  return step;
}

/* The compute slices of step on the threads of stage_of, start times
 * from the step's first op, sorted by stage then start.  (transfer full) */
static GArray *step_rows(json_object *events, GHashTable *stage_of, int step)
{
  GArray *rows = g_array_new(FALSE, FALSE, sizeof(Row));
  double t0 = G_MAXDOUBLE;
  size_t n = json_object_array_length(events);
  for (size_t i = 0; i < n; i++) {
    json_object *ev = json_object_array_get_idx(events, i), *args = NULL, *v;
    const char *ph = get_str(ev, "ph"), *cat = get_str(ev, "cat");
    if (!ph || strcmp(ph, "X") != 0 || !cat ||
        (strcmp(cat, "FWD") && strcmp(cat, "BWD") && strcmp(cat, "RECOMPUTE")))
      continue;
    json_object_object_get_ex(ev, "args", &args);
    if (get_int(args, "step", -1) != step)
      continue;
    gint64 key = thread_key(get_int(ev, "pid", -1), get_int(ev, "tid", -1));
    int s = GPOINTER_TO_INT(g_hash_table_lookup(stage_of, &key)) - 1;
    if (s < 0)
      continue;
    Row row = {.stage = s, .mb = get_int(args, "mb", 0), .kind = cat};
    row.start = json_object_object_get_ex(ev, "ts", &v) ? json_object_get_double(v) : 0;
    row.end = row.start + (json_object_object_get_ex(ev, "dur", &v) ? json_object_get_double(v)
                                                                  : 0);
    t0 = MIN(t0, row.start);
    g_array_append_val(rows, row);
  }
  for (guint i = 0; i < rows->len; i++) {
    g_array_index(rows, Row, i).start -= t0;
    g_array_index(rows, Row, i).end -= t0;
  }
  g_array_sort(rows, cmp_row);
  return rows;
}

/* The trace's JSON, gunzipped when it is gzip (zlib reads a plain file
 * as it is).  (transfer full) NULL with an error naming the file. */
static json_object *load_trace(const char *file, GError **error)
{
  gzFile gz = gzopen(file, "rb");
  if (!gz) {
    int e = errno ? errno : ENOMEM;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read: %s", file,
                g_strerror(e));
    return NULL;
  }
  gzbuffer(gz, 1 << 20);
  GString *text = g_string_new(NULL);
  char chunk[1 << 16];
  int n;
  while ((n = gzread(gz, chunk, sizeof chunk)) > 0)
    g_string_append_len(text, chunk, n);
  int zerr = Z_OK;
  const char *why = gzerror(gz, &zerr); /* a cut-short stream may end with n == 0 */
  if (zerr == Z_OK && n >= 0)
    why = NULL;
  /* (zlib's message starts with the file's name) */
  if (why && g_str_has_prefix(why, file) && g_str_has_prefix(why + strlen(file), ": "))
    why += strlen(file) + 2;
  g_autofree char *reason = why ? g_strdup(zerr == Z_ERRNO ? g_strerror(errno) : why) : NULL;
  gzclose(gz);
  json_object *root = NULL;
  if (reason)
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                "%s: cannot read: %s (a corrupt or cut-short gzip file?)", file, reason);
  else if (memchr(text->str, '\0', text->len))
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: cannot read: contains a NUL byte (not a JSON trace)", file);
  else
    root = ps_json_parse(text->str, file, error);
  g_string_free(text, TRUE);
  return root;
}

/* The rows of one step and replica from file's events; the exit status. */
static int print_timeline(const char *file, json_object *events, int step, int replica)
{
  GHashTable *stage_of = replica_stages(events, replica);
  int rc = 0;
  if (g_hash_table_size(stage_of) == 0) {
    fprintf(stderr, "podsim: timeline: %s: no pipeline stage of replica %d in the trace (a "
                    "trace of a run with strategy.kind=pipeline is needed)\n", file, replica);
    g_hash_table_destroy(stage_of);
    return EXIT_INPUT;
  }
  if (step < 0)
    step = last_step(events);
  GArray *rows = step_rows(events, stage_of, step);
  if (rows->len == 0) {
    fprintf(stderr, "podsim: timeline: %s: no compute op of step %d for replica %d\n", file,
            step, replica);
    rc = EXIT_INPUT;
  } else {
    printf("# %s, step %d, replica %d\n# stage\tstart_us\tend_us\tmb\tkind\n", file, step,
           replica);
    for (guint i = 0; i < rows->len; i++) {
      const Row *r = &g_array_index(rows, Row, i);
      printf("%d\t%.3f\t%.3f\t%d\t%s\n", r->stage, r->start, r->end, r->mb, r->kind);
    }
  }
  g_array_free(rows, TRUE);
  g_hash_table_destroy(stage_of);
  return rc;
}

int ps_cli_timeline(int argc, char **argv)
{
  int step = G_MININT, replica = 0;
  GOptionEntry entries[] = {
      {"step", 0, 0, G_OPTION_ARG_INT, &step,
       "The step to show, 0 or more (default: the last step in the trace)", "N"},
      {"replica", 0, 0, G_OPTION_ARG_INT, &replica,
       "The pipeline replica to show, 0 or more (default 0)", "R"},
      {NULL}};
  g_autoptr(GOptionContext) ctx = g_option_context_new(
      "TRACE - print one step of a pipeline's compute ops from a trace (.json or .json.gz), "
      "for gnuplot");
  g_option_context_set_description(
      ctx, "Rows: stage, start and end (us, from the step's first op), micro-batch, kind "
           "(FWD, BWD, RECOMPUTE).\nplots/pipeline-timeline.sh draws them.");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || argc != 2) {
    fprintf(stderr, "podsim: timeline: %s\n",
            error ? error->message : "needs one TRACE file (see podsim timeline --help)");
    g_clear_error(&error);
    return EXIT_INPUT;
  }
  if ((step != G_MININT && step < 0) || replica < 0) {
    fprintf(stderr, "podsim: timeline: --%s %d: steps and replicas count from 0\n",
            replica < 0 ? "replica" : "step", replica < 0 ? replica : step);
    return EXIT_INPUT;
  }
  const char *file = argv[1];
  json_object *root = load_trace(file, &error);
  if (!root) {
    fprintf(stderr, "podsim: timeline: %s\n", error->message);
    g_error_free(error);
    return EXIT_INPUT;
  }
  json_object *events;
  int rc;
  if (!json_object_object_get_ex(root, "traceEvents", &events) ||
      !json_object_is_type(events, json_type_array)) {
    fprintf(stderr, "podsim: timeline: %s: traceEvents: missing or not an array (not a "
                    "podsim trace?)\n", file);
    rc = EXIT_INPUT;
  } else {
    rc = print_timeline(file, events, step == G_MININT ? -1 : step, replica);
  }
  json_object_put(root);
  return rc;
}

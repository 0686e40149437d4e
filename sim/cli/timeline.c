/* timeline.c: `podsim timeline TRACE [--step N] [--replica R]` (see
 * timeline.h).
 *
 * The trace names each device's thread "core C: device D, stage S, replica
 * R" (run/trace-observer.c) and gives each compute slice its kind as category (FWD, BWD,
 * RECOMPUTE) and its step and micro-batch in args.  A gzip-compressed
 * trace (.json.gz, as `run` writes a large one) reads as the JSON does.
 * The writer puts one event per line, so the file is read a line at a
 * time and only thread names and compute slices are parsed and kept (the
 * 277 MB of vit-pipeline's full trace are never one tree in memory); a
 * trace laid out otherwise is parsed whole.  Rows come out sorted by stage
 * then start, times in microseconds from the step's first op:
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

/* What the timeline needs of a trace: every thread's stage and replica
 * (from its name) and every compute slice, read event by event so a large
 * trace is never held whole as a tree. */
typedef struct {
  gint64 thread;
  int stage, replica;
} Thread;

typedef struct {
  gint64 thread;
  int step, mb;
  const char *kind; /* static: "FWD", "BWD" or "RECOMPUTE" */
  double ts, dur;
} Op;

typedef struct {
  GArray *threads; /* of Thread */
  GArray *ops;     /* of Op */
} Events;

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

static double get_double(json_object *o, const char *key)
{
  json_object *v;
  return o && json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static const char *get_str(json_object *o, const char *key)
{
  json_object *v;
  return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
             ? json_object_get_string(v)
             : NULL;
}

/* Keeps what ev says of a pipeline's thread or compute op, if anything. */
static void take_event(Events *e, json_object *ev)
{
  static const char *const kinds[] = {"FWD", "BWD", "RECOMPUTE"};
  const char *ph = get_str(ev, "ph"), *name = get_str(ev, "name");
  json_object *args = NULL;
  json_object_object_get_ex(ev, "args", &args);
  gint64 key = thread_key(get_int(ev, "pid", -1), get_int(ev, "tid", -1));
  if (ph && strcmp(ph, "M") == 0 && name && strcmp(name, "thread_name") == 0) {
    const char *tname = get_str(args, "name");
    const char *at = tname ? strstr(tname, ", stage ") : NULL;
    Thread t = {.thread = key};
    if (at && sscanf(at, ", stage %d, replica %d", &t.stage, &t.replica) == 2)
      g_array_append_val(e->threads, t);
    return;
  }
  const char *cat = get_str(ev, "cat");
  if (!ph || strcmp(ph, "X") != 0 || !cat)
    return;
  for (guint k = 0; k < G_N_ELEMENTS(kinds); k++)
    if (strcmp(cat, kinds[k]) == 0) {
      Op op = {.thread = key, .step = get_int(args, "step", -1), .mb = get_int(args, "mb", 0),
               .kind = kinds[k], .ts = get_double(ev, "ts"), .dur = get_double(ev, "dur")};
      g_array_append_val(e->ops, op);
    }
}

/* Threads of the chosen replica -> stage + 1: one thread a stage, its
 * first named (the stage's lowest device), so that a stage laid out over
 * a mesh (fsdp, tensor: devices of one replica and stage) gives one
 * device's ops, not all of theirs interleaved.  (transfer full) */
static GHashTable *replica_stages(const Events *e, int replica)
{
  GHashTable *stage_of = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
  g_autoptr(GHashTable) taken = g_hash_table_new(g_direct_hash, g_direct_equal);
  for (guint i = 0; i < e->threads->len; i++) {
    const Thread *t = &g_array_index(e->threads, Thread, i);
    if (t->replica != replica || g_hash_table_contains(taken, GINT_TO_POINTER(t->stage + 1)))
      continue;
    g_hash_table_add(taken, GINT_TO_POINTER(t->stage + 1));
    g_hash_table_insert(stage_of, g_memdup2(&t->thread, sizeof t->thread),
                        GINT_TO_POINTER(t->stage + 1));
  }
  return stage_of;
}

/* The last step any stage ran a forward op of, -1 if none. */
static int last_step(const Events *e)
{
  int step = -1;
  for (guint i = 0; i < e->ops->len; i++) {
    const Op *op = &g_array_index(e->ops, Op, i);
    if (strcmp(op->kind, "FWD") == 0)
      step = MAX(step, op->step);
  }
  return step;
}

/* The compute slices of step on the threads of stage_of, start times
 * from the step's first op, sorted by stage then start.  (transfer full) */
static GArray *step_rows(const Events *e, GHashTable *stage_of, int step)
{
  GArray *rows = g_array_new(FALSE, FALSE, sizeof(Row));
  double t0 = G_MAXDOUBLE;
  for (guint i = 0; i < e->ops->len; i++) {
    const Op *op = &g_array_index(e->ops, Op, i);
    int s = GPOINTER_TO_INT(g_hash_table_lookup(stage_of, &op->thread)) - 1;
    if (op->step != step || s < 0)
      continue;
    Row row = {.stage = s, .mb = op->mb, .kind = op->kind, .start = op->ts,
               .end = op->ts + op->dur};
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

/* zlib's error on gz after reading, as a GError naming file; FALSE if
 * there was one.  (A cut-short gzip stream may end reads with no count
 * below 0, so the stream's state is what says.) */
static gboolean gz_check(gzFile gz, const char *file, GError **error)
{
  int zerr = Z_OK;
  const char *why = gzerror(gz, &zerr);
  if (zerr == Z_OK)
    return TRUE;
  /* (zlib's message starts with the file's name) */
  if (why && g_str_has_prefix(why, file) && g_str_has_prefix(why + strlen(file), ": "))
    why += strlen(file) + 2;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
              "%s: cannot read: %s (a corrupt or cut-short gzip file?)", file,
              zerr == Z_ERRNO ? g_strerror(errno) : why);
  return FALSE;
}

/* One event line of podsim's writer ('{...}' with a ',' before or after);
 * FALSE with an error when it is not JSON. */
static gboolean take_line(Events *e, char *line, const char *file, int lineno, GError **error)
{
  g_strstrip(line);
  if (*line == ',')
    line++;
  size_t n = strlen(line);
  if (n > 0 && line[n - 1] == ',')
    line[--n] = '\0';
  /* only thread names and complete slices matter: skip the rest unparsed */
  if (n == 0 || (!strstr(line, "\"thread_name\"") && !strstr(line, "\"ph\":\"X\"")))
    return TRUE;
  json_object *ev = json_tokener_parse(line);
  if (!ev || !json_object_is_type(ev, json_type_object)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: line %d: not a JSON event (a trace podsim wrote has one per line)", file,
                lineno);
    json_object_put(ev);
    return FALSE;
  }
  take_event(e, ev);
  json_object_put(ev);
  return TRUE;
}

/* Reads podsim's one-event-per-line layout through gz; FALSE with an
 * error, or with *other set when the file is laid out otherwise. */
static gboolean read_lines(gzFile gz, const char *file, Events *e, gboolean *other,
                           GError **error)
{
  GString *line = g_string_new(NULL);
  char chunk[1 << 16];
  int lineno = 0;
  gboolean ok = TRUE, ended = FALSE;
  *other = FALSE;
  while (ok && !*other && gzgets(gz, chunk, sizeof chunk)) {
    g_string_append(line, chunk);
    if (line->len == 0 || line->str[line->len - 1] != '\n')
      continue; /* a line longer than the chunk */
    lineno++;
    if (lineno == 1)
      *other = strcmp(g_strstrip(line->str), "{\"traceEvents\":[") != 0;
    else if (line->str[0] == ']')
      ended = TRUE;
    else if (!ended)
      ok = take_line(e, line->str, file, lineno, error);
    g_string_truncate(line, 0);
  }
  g_string_free(line, TRUE);
  if (ok && !*other)
    ok = gz_check(gz, file, error);
  if (ok && !*other && !ended) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: cut short after line %d (no closing ']' of traceEvents)", file, lineno);
    ok = FALSE;
  }
  return ok;
}

/* Reads the whole document (a trace laid out otherwise, e.g. pretty-printed)
 * and takes its events; FALSE with an error. */
static gboolean read_whole(gzFile gz, const char *file, Events *e, GError **error)
{
  GString *text = g_string_new(NULL);
  char chunk[1 << 16];
  int n;
  while ((n = gzread(gz, chunk, sizeof chunk)) > 0)
    g_string_append_len(text, chunk, n);
  json_object *root = NULL, *events = NULL;
  gboolean ok = gz_check(gz, file, error);
  if (ok && memchr(text->str, '\0', text->len)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: cannot read: contains a NUL byte (not a JSON trace)", file);
    ok = FALSE;
  }
  if (ok)
    ok = (root = ps_json_parse(text->str, file, error)) != NULL;
  g_string_free(text, TRUE);
  if (ok && (!json_object_object_get_ex(root, "traceEvents", &events) ||
             !json_object_is_type(events, json_type_array))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: traceEvents: missing or not an array (not a podsim trace?)", file);
    ok = FALSE;
  }
  for (size_t i = 0; ok && i < json_object_array_length(events); i++)
    take_event(e, json_object_array_get_idx(events, i));
  if (root)
    json_object_put(root);
  return ok;
}

/* The trace's threads and compute ops, gunzipped when it is gzip (zlib
 * reads a plain file as it is); FALSE with an error naming the file. */
static gboolean load_trace(const char *file, Events *e, GError **error)
{
  gzFile gz = gzopen(file, "rb");
  if (!gz) {
    int err = errno ? errno : ENOMEM;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read: %s", file,
                g_strerror(err));
    return FALSE;
  }
  gzbuffer(gz, 1 << 20);
  gboolean other = FALSE;
  gboolean ok = read_lines(gz, file, e, &other, error);
  if (ok && other) {
    g_array_set_size(e->threads, 0);
    g_array_set_size(e->ops, 0);
    ok = gzrewind(gz) == 0 && read_whole(gz, file, e, error);
  }
  gzclose(gz);
  return ok;
}

/* The rows of one step and replica from file's events; the exit status. */
static int print_timeline(const char *file, const Events *events, int step, int replica)
{
  GHashTable *stage_of = replica_stages(events, replica);
  int rc = 0;
  if (g_hash_table_size(stage_of) == 0) {
    fprintf(stderr, "podsim: timeline: %s: no pipeline stage of replica %d in the trace (a "
                    "trace of a pipelined run is needed: strategy.kind=pipeline, or a shard "
                    "mesh with a stage axis)\n", file, replica);
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
           "(FWD, BWD, RECOMPUTE), one device a stage (its lowest, where a stage is a mesh).\n"
           "plots/pipeline-timeline.sh draws them.");
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
  Events events = {g_array_new(FALSE, FALSE, sizeof(Thread)), g_array_new(FALSE, FALSE, sizeof(Op))};
  int rc;
  if (!load_trace(file, &events, &error)) {
    fprintf(stderr, "podsim: timeline: %s\n", error->message);
    g_error_free(error);
    rc = EXIT_INPUT;
  } else {
    rc = print_timeline(file, &events, step == G_MININT ? -1 : step, replica);
  }
  g_array_free(events.threads, TRUE);
  g_array_free(events.ops, TRUE);
  return rc;
}

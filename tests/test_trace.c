/* test_trace.c: the Chrome Trace Event writer.
 *
 * Every test writes into its own temporary directory and reads the result
 * back with json-c; expected timestamps are built from the picosecond
 * integers by string surgery, not by the writer's arithmetic.  Checks:
 * every field of every kind of event, JSON escaping, the temporary name
 * and the rename, abort, errors that name the path, write errors at
 * close, byte-identical output for identical calls; a ".gz" path written
 * as gzip that zlib inflates to the very bytes of the plain file, with its
 * temporary name and its write errors handled alike. */
#include "io/trace.h"

#include "support/cli.h"

#include <glib/gstdio.h>
#include <json-c/json.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

typedef ScratchFile Fixture;

static void fixture_setup(Fixture *fx, gconstpointer data)
{
  scratch_file_init(fx, "podsim-trace", "run.json");
}

static void fixture_teardown(Fixture *fx, gconstpointer data)
{
  scratch_file_clear(fx);
}

/* ps to the nearest whole nanosecond, halves up. */
static int64_t nearest_ns(int64_t ps)
{
  return ps / 1000 + (ps % 1000 >= 500 ? 1 : 0);
}

/* The decimal text of ps in microseconds, rounded to the nanosecond, with
 * exactly three decimals: a point inserted into the zero-padded integer
 * number of nanoseconds. */
static char *expected_us(int64_t ps)
{
  g_assert_cmpint(ps, >=, 0);
  char digits[32];
  g_snprintf(digits, sizeof digits, "%04lld", (long long)nearest_ns(ps));
  size_t len = strlen(digits);
  return g_strdup_printf("%.*s.%s", (int)(len - 3), digits, digits + len - 3);
}

static json_object *get(json_object *o, const char *key)
{
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v))
    g_error("key \"%s\" missing in %s", key, json_object_to_json_string(o));
  return v;
}

static gboolean has(json_object *o, const char *key)
{
  return json_object_object_get_ex(o, key, NULL);
}

static const char *get_str(json_object *o, const char *key)
{
  json_object *v = get(o, key);
  g_assert_true(json_object_is_type(v, json_type_string));
  return json_object_get_string(v);
}

static int get_int(json_object *o, const char *key)
{
  json_object *v = get(o, key);
  g_assert_true(json_object_is_type(v, json_type_int));
  return json_object_get_int(v);
}

/* A time field: its text exactly, and its value as a number. */
static void assert_time(json_object *o, const char *key, int64_t ps)
{
  json_object *v = get(o, key);
  g_assert_true(json_object_is_type(v, json_type_double));
  g_autofree char *want = expected_us(ps);
  g_assert_cmpstr(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), ==, want);
  /* within half a nanosecond */
  g_assert_cmpfloat(fabs(json_object_get_double(v) - (double)ps / 1e6), <=,
                    0.5e-3 + 1e-15 * MAX(1.0, (double)ps / 1e6));
}

/* A duration: the slice ends no later than the end's timestamp in any
 * double arithmetic a viewer does on the values it reads: ts + dur;
 * speedscope's (ts - m) + dur against end - m, m the first timestamp of
 * the thread (here: 0, a tenth, a third, half, all of ts, and ts less
 * one ulp); catapult's ts / 1000 + dur / 1000 against end / 1000.  And dur
 * is within 12 ulps of end of the exact duration (or 0). */
static void assert_dur(json_object *o, int64_t start, int64_t dur)
{
  json_object *v = get(o, "dur");
  g_assert_true(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int));
  double d = json_object_get_double(v);
  g_autofree char *ts = expected_us(start), *end = expected_us(start + dur);
  double s = g_ascii_strtod(ts, NULL), e = g_ascii_strtod(end, NULL);
  g_assert_cmpfloat(d, >=, 0);
  g_assert_cmpfloat(s + d, <=, e);
  const double shifts[] = {0, s / 10, s / 3, s / 2, s, nextafter(s, 0)};
  for (guint i = 0; i < G_N_ELEMENTS(shifts); i++)
    g_assert_cmpfloat((s - shifts[i]) + d, <=, e - shifts[i]);
  g_assert_cmpfloat(s / 1000 + d / 1000, <=, e / 1000);
  double ulp = nextafter(e, INFINITY) - e;
  g_assert_cmpfloat(fabs(d - (e - s)), <=, 12 * ulp + 1e-12);
}

static json_object *read_trace(const char *path, size_t *n_events)
{
  json_object *root = json_object_from_file(path);
  if (!root)
    g_error("%s does not parse as JSON: %s", path, json_util_get_last_err());
  g_assert_true(json_object_is_type(root, json_type_object));
  g_assert_cmpstr(get_str(root, "displayTimeUnit"), ==, "ns");
  g_assert_cmpstr(get_str(get(root, "otherData"), "generator"), ==, "podsim");
  json_object *events = get(root, "traceEvents");
  g_assert_true(json_object_is_type(events, json_type_array));
  *n_events = json_object_array_length(events);
  return root;
}

static json_object *event_at(json_object *root, size_t i)
{
  return json_object_array_get_idx(get(root, "traceEvents"), i);
}

#define NASTY "q\"b\\s/n\nt\tc\x01" "d\x1f" "e\x7f" "mu\xc2\xb5" "bad\xff" "cut\xe2\x82"

/* The same sequence of calls, used by several tests. */
static void write_sample(PsTrace *t)
{
  ps_trace_process(t, 1, "host 0", 0);
  ps_trace_thread(t, 1, 7, "infeed", 2);
  ps_trace_process(t, 2, NASTY, 1);
  ps_trace_complete(t, 2, 3, "FWD(dense1, 0)", "compute", 1, 1234567890123,
                    "{\"layer\":\"dense1\",\"flops\":12}");
  ps_trace_complete(t, 2, 3, NASTY, NULL, 0, 0, NULL);
  ps_trace_counter(t, 1, "infeed depth", 999999, 3.0);
  ps_trace_counter(t, 2, "HBM bytes", 1000000, 0.1);
  ps_trace_counter(t, 2, "HBM bytes", 2000000, -2.5e300);
  ps_trace_flow_start(t, 1, 7, "send", G_MAXUINT64, 5000000);
  ps_trace_flow_end(t, 2, 3, "send", G_MAXUINT64, 6000001);
  ps_trace_instant(t, 2, 3, "step end", INT64_C(9223372036854775807));
}

/* The sample's file, as text: strict JSON, no raw control characters
 * inside strings (json-c would accept them), one event per line, and the
 * escapes as written. */
static void check_sample_text(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &text, &len, NULL));
  gsize newlines = 0;
  for (gsize i = 0; i < len; i++) {
    guchar c = (guchar)text[i];
    if (c == '\n')
      newlines++;
    else
      g_assert_cmpuint(c, >=, 0x20);
  }
  g_assert_cmpuint(newlines, ==, 14 + 2);
  g_assert_nonnull(strstr(text, "\"q\\\"b\\\\s/n\\nt\\tc\\u0001d\\u001fe\x7f" "mu\xc2\xb5"
                                "bad\\ufffdcut\\ufffd\\ufffd\""));
  g_assert_true(g_utf8_validate(text, (gssize)len, NULL));
}

/* The sample's metadata: process and thread names and sort indices. */
static void check_sample_metadata(json_object *root, const char *nasty_json)
{
  json_object *e = event_at(root, 0);
  g_assert_cmpstr(get_str(e, "ph"), ==, "M");
  g_assert_cmpint(get_int(e, "pid"), ==, 1);
  g_assert_cmpstr(get_str(e, "name"), ==, "process_name");
  g_assert_cmpstr(get_str(get(e, "args"), "name"), ==, "host 0");
  e = event_at(root, 1);
  g_assert_cmpstr(get_str(e, "name"), ==, "process_sort_index");
  g_assert_cmpint(get_int(get(e, "args"), "sort_index"), ==, 0);
  e = event_at(root, 2);
  g_assert_cmpstr(get_str(e, "ph"), ==, "M");
  g_assert_cmpstr(get_str(e, "name"), ==, "thread_name");
  g_assert_cmpint(get_int(e, "pid"), ==, 1);
  g_assert_cmpint(get_int(e, "tid"), ==, 7);
  g_assert_cmpstr(get_str(get(e, "args"), "name"), ==, "infeed");
  e = event_at(root, 3);
  g_assert_cmpstr(get_str(e, "name"), ==, "thread_sort_index");
  g_assert_cmpint(get_int(e, "tid"), ==, 7);
  g_assert_cmpint(get_int(get(e, "args"), "sort_index"), ==, 2);
  e = event_at(root, 4);
  g_assert_cmpstr(get_str(get(e, "args"), "name"), ==, nasty_json);
  e = event_at(root, 5);
  g_assert_cmpint(get_int(get(e, "args"), "sort_index"), ==, 1);
  g_assert_cmpint(get_int(e, "pid"), ==, 2);
}

/* The sample's complete events. */
static void check_sample_complete(json_object *root, const char *nasty_json)
{
  json_object *e = event_at(root, 6);
  g_assert_cmpstr(get_str(e, "ph"), ==, "X");
  g_assert_cmpint(get_int(e, "pid"), ==, 2);
  g_assert_cmpint(get_int(e, "tid"), ==, 3);
  g_assert_cmpstr(get_str(e, "name"), ==, "FWD(dense1, 0)");
  g_assert_cmpstr(get_str(e, "cat"), ==, "compute");
  assert_time(e, "ts", 1);
  assert_dur(e, 1, 1234567890123);
  g_assert_cmpstr(json_object_to_json_string_ext(get(e, "ts"), JSON_C_TO_STRING_PLAIN), ==,
                  "0.000");
  g_assert_cmpstr(get_str(get(e, "args"), "layer"), ==, "dense1");
  g_assert_cmpint(get_int(get(e, "args"), "flops"), ==, 12);
  e = event_at(root, 7);
  g_assert_cmpstr(get_str(e, "name"), ==, nasty_json);
  g_assert_false(has(e, "cat"));
  g_assert_false(has(e, "args"));
  assert_time(e, "ts", 0);
  assert_dur(e, 0, 0);
}

/* The sample's counters. */
static void check_sample_counters(json_object *root)
{
  json_object *e = event_at(root, 8);
  g_assert_cmpstr(get_str(e, "ph"), ==, "C");
  g_assert_cmpint(get_int(e, "pid"), ==, 1);
  g_assert_cmpstr(get_str(e, "name"), ==, "infeed depth");
  assert_time(e, "ts", 999999);
  g_assert_cmpfloat(json_object_get_double(get(get(e, "args"), "value")), ==, 3.0);
  e = event_at(root, 9);
  assert_time(e, "ts", 1000000);
  g_assert_cmpfloat(json_object_get_double(get(get(e, "args"), "value")), ==, 0.1);
  e = event_at(root, 10);
  g_assert_cmpstr(get_str(e, "name"), ==, "HBM bytes");
  g_assert_cmpfloat(json_object_get_double(get(get(e, "args"), "value")), ==, -2.5e300);
}

/* The sample's flow: same name, category and id at both ends; the end
 * binds to the enclosing slice. */
static void check_sample_flows(json_object *root)
{
  json_object *s = event_at(root, 11);
  json_object *f = event_at(root, 12);
  g_assert_cmpstr(get_str(s, "ph"), ==, "s");
  g_assert_cmpstr(get_str(f, "ph"), ==, "f");
  g_assert_cmpint(get_int(s, "pid"), ==, 1);
  g_assert_cmpint(get_int(s, "tid"), ==, 7);
  g_assert_cmpint(get_int(f, "pid"), ==, 2);
  g_assert_cmpint(get_int(f, "tid"), ==, 3);
  g_assert_cmpstr(get_str(s, "name"), ==, "send");
  g_assert_cmpstr(get_str(f, "name"), ==, "send");
  g_assert_cmpstr(get_str(s, "cat"), ==, get_str(f, "cat"));
  g_assert_cmpstr(get_str(s, "id"), ==, get_str(f, "id"));
  g_assert_cmpuint(g_ascii_strtoull(get_str(s, "id"), NULL, 16), ==, G_MAXUINT64);
  g_assert_false(has(s, "bp"));
  g_assert_cmpstr(get_str(f, "bp"), ==, "e");
  assert_time(s, "ts", 5000000);
  assert_time(f, "ts", 6000001);
}

/* The sample's instant, at the largest time there is. */
static void check_sample_instant(json_object *root)
{
  json_object *e = event_at(root, 13);
  g_assert_cmpstr(get_str(e, "ph"), ==, "i");
  g_assert_cmpstr(get_str(e, "s"), ==, "t");
  g_assert_cmpint(get_int(e, "pid"), ==, 2);
  g_assert_cmpint(get_int(e, "tid"), ==, 3);
  g_assert_cmpstr(get_str(e, "name"), ==, "step end");
  g_assert_cmpstr(json_object_to_json_string_ext(get(e, "ts"), JSON_C_TO_STRING_PLAIN), ==,
                  "9223372036854.776");
}

static void test_events(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  g_assert_nonnull(t);
  write_sample(t);
  g_assert_cmpuint(ps_trace_events(t), ==, 14);
  g_assert_true(ps_trace_close(t, &error));
  g_assert_no_error(error);
  check_sample_text(fx->path);

  size_t n = 0;
  json_object *root = read_trace(fx->path, &n);
  g_assert_cmpuint(n, ==, 14);
  const char *nasty_json = "q\"b\\s/n\nt\tc\x01" "d\x1f" "e\x7f" "mu\xc2\xb5"
                           "bad\xef\xbf\xbd" "cut\xef\xbf\xbd\xef\xbf\xbd";
  check_sample_metadata(root, nasty_json);
  check_sample_complete(root, nasty_json);
  check_sample_counters(root);
  check_sample_flows(root);
  check_sample_instant(root);
  json_object_put(root);
}

static void test_timestamps(Fixture *fx, gconstpointer data)
{
  /* Many complete events at awkward times; every one must read back with
   * exactly the text built independently from its integer. */
  GError *error = NULL;
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  GRand *rng = g_rand_new_with_seed(20240601);
  enum { N = 2000 };
  int64_t starts[N], durs[N];
  for (int i = 0; i < N; i++) {
    int digits = g_rand_int_range(rng, 0, 19);
    int64_t scale = 1;
    for (int k = 0; k < digits; k++)
      scale *= 10;
    starts[i] = (int64_t)(g_rand_double(rng) * (double)scale);
    durs[i] = i % 7 == 0 ? 999999 : g_rand_int_range(rng, 0, 3000000);
    ps_trace_complete(t, 1, 1, "op", "c", starts[i], durs[i], NULL);
  }
  g_rand_free(rng);
  g_assert_true(ps_trace_close(t, &error));
  g_assert_no_error(error);
  size_t n = 0;
  json_object *root = read_trace(fx->path, &n);
  /* a slice that starts and ends in the same nanosecond is not written */
  size_t written = 0;
  for (int i = 0; i < N; i++) {
    if (durs[i] > 0 && nearest_ns(starts[i] + durs[i]) == nearest_ns(starts[i]))
      continue;
    json_object *e = event_at(root, written++);
    assert_time(e, "ts", starts[i]);
    assert_dur(e, starts[i], durs[i]);
  }
  g_assert_cmpuint(n, ==, written);
  g_assert_cmpuint(written, >, N / 2);
  json_object_put(root);
}

static void test_large(Fixture *fx, gconstpointer data)
{
  /* Well past the stdio buffer, so the file is written in many pieces. */
  GError *error = NULL;
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  ps_trace_process(t, 1, "chip", 0);
  enum { N = 60000 };
  for (int i = 0; i < N; i++) {
    ps_trace_complete(t, 1, i % 4, "BWD(layer, micro-batch)", "compute", (int64_t)i * 1000,
                      900, "{\"i\":1}");
    if (i % 10 == 0)
      ps_trace_counter(t, 1, "hbm", (int64_t)i * 1000, i);
  }
  uint64_t written = ps_trace_events(t);
  g_assert_cmpuint(written, ==, 2 + N + N / 10);
  g_assert_true(ps_trace_close(t, &error));
  GStatBuf st;
  g_assert_cmpint(g_stat(fx->path, &st), ==, 0);
  g_assert_cmpint(st.st_size, >, 4 << 20);
  size_t n = 0;
  json_object *root = read_trace(fx->path, &n);
  g_assert_cmpuint(n, ==, written);
  json_object *last = event_at(root, n - 1);
  g_assert_cmpstr(get_str(last, "ph"), ==, "X");
  assert_time(last, "ts", (int64_t)(N - 1) * 1000);
  json_object_put(root);
}

static void test_empty(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(ps_trace_events(t), ==, 0);
  g_assert_true(ps_trace_close(t, &error));
  size_t n = 1;
  json_object *root = read_trace(fx->path, &n);
  g_assert_cmpuint(n, ==, 0);
  json_object_put(root);
}

static void test_temporary(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  mode_t old_mask = umask(022);
  PsTrace *t = ps_trace_open(fx->path, &error);
  umask(old_mask);
  g_assert_no_error(error);
  write_sample(t);
  /* Before close: only "run.json.tmp-XXXXXX", never "run.json". */
  g_assert_false(g_file_test(fx->path, G_FILE_TEST_EXISTS));
  g_autofree char *before = scratch_list(fx->dir);
  g_assert_true(g_str_has_prefix(before, "run.json.tmp-"));
  g_assert_cmpuint(strlen(before), ==, strlen("run.json.tmp-XXXXXX"));
  g_assert_true(ps_trace_close(t, &error));
  g_assert_no_error(error);
  g_autofree char *after = scratch_list(fx->dir);
  g_assert_cmpstr(after, ==, "run.json");
  /* An ordinary file for the umask, not mkstemp's private 0600. */
  GStatBuf st;
  g_assert_cmpint(g_stat(fx->path, &st), ==, 0);
  g_assert_cmpint(st.st_mode & 0777, ==, 0644);
}

static void test_replace_existing(Fixture *fx, gconstpointer data)
{
  /* An old trace keeps its content until the new one is complete, and
   * after an abort. */
  GError *error = NULL;
  g_assert_true(g_file_set_contents(fx->path, "old", -1, &error));
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  write_sample(t);
  g_autofree char *mid = NULL;
  g_assert_true(g_file_get_contents(fx->path, &mid, NULL, NULL));
  g_assert_cmpstr(mid, ==, "old");
  ps_trace_abort(t);
  g_autofree char *kept = NULL;
  g_assert_true(g_file_get_contents(fx->path, &kept, NULL, NULL));
  g_assert_cmpstr(kept, ==, "old");

  t = ps_trace_open(fx->path, &error);
  write_sample(t);
  g_assert_true(ps_trace_close(t, &error));
  size_t n = 0;
  json_object *root = read_trace(fx->path, &n);
  g_assert_cmpuint(n, ==, 14);
  json_object_put(root);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "run.json");
}

static void test_abort(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  write_sample(t);
  ps_trace_abort(t);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "");
}

static void test_missing_dir(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  g_autofree char *bad = g_build_filename(fx->dir, "no-such-dir", "run.json", NULL);
  PsTrace *t = ps_trace_open(bad, &error);
  g_assert_null(t);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, bad));
  g_assert_nonnull(strstr(error->message, g_strerror(ENOENT)));
  g_clear_error(&error);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "");
}

static void test_rename_fails(Fixture *fx, gconstpointer data)
{
  /* The target is a non-empty directory: rename fails at close, the error
   * names the path and the temporary is removed. */
  GError *error = NULL;
  g_assert_cmpint(g_mkdir(fx->path, 0755), ==, 0);
  g_autofree char *inner = g_build_filename(fx->path, "keep", NULL);
  g_assert_true(g_file_set_contents(inner, "x", -1, NULL));
  PsTrace *t = ps_trace_open(fx->path, &error);
  g_assert_no_error(error);
  write_sample(t);
  g_assert_false(ps_trace_close(t, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, fx->path));
  g_clear_error(&error);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "run.json");
  g_assert_true(g_file_test(fx->path, G_FILE_TEST_IS_DIR));
  g_unlink(inner);
  g_rmdir(fx->path);
}

/* In a subprocess limited to limit bytes per file: writing path fails
 * part-way with EFBIG; close must report it, name the path and leave
 * nothing in dir.  Counter samples that all differ, so gzip cannot shrink
 * them below the limit. */
static void write_error_child(const char *path, const char *dir, rlim_t limit)
{
  struct rlimit lim;
  g_assert_cmpint(getrlimit(RLIMIT_FSIZE, &lim), ==, 0);
  lim.rlim_cur = limit;
  g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &lim), ==, 0);
  signal(SIGXFSZ, SIG_IGN);
  GError *error = NULL;
  PsTrace *t = ps_trace_open(path, &error);
  g_assert_no_error(error);
  for (int i = 0; i < 200000; i++)
    ps_trace_counter(t, 1, "hbm", (int64_t)i * 1000, 1.0 / (i + 1));
  g_assert_false(ps_trace_close(t, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, path));
  g_assert_nonnull(strstr(error->message, g_strerror(EFBIG)));
  g_clear_error(&error);
  g_autofree char *listing = scratch_list(dir);
  g_assert_cmpstr(listing, ==, "");
}

static void test_write_error(Fixture *fx, gconstpointer data)
{
  /* A file-size limit makes write(2) fail with EFBIG part-way through.
   * Run in a subprocess so the limit does not outlive the test. */
  if (g_test_subprocess()) {
    write_error_child(fx->path, fx->dir, 64 * 1024);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
}

static void test_negative_time(Fixture *fx, gconstpointer data)
{
  if (g_test_subprocess()) {
    PsTrace *t = ps_trace_open(fx->path, NULL);
    scratch_remove(fx->dir); /* the crash below skips the teardown */
    ps_trace_complete(t, 1, 1, "op", NULL, -1, 5, NULL);
    return;
  }
  g_test_trap_subprocess(NULL, 0, 0);
  g_test_trap_assert_failed();
  g_test_trap_assert_stderr("*start >= 0*");
}

static void test_negative_duration(Fixture *fx, gconstpointer data)
{
  if (g_test_subprocess()) {
    PsTrace *t = ps_trace_open(fx->path, NULL);
    scratch_remove(fx->dir); /* the crash below skips the teardown */
    ps_trace_complete(t, 1, 1, "op", NULL, 10, -1, NULL);
    return;
  }
  g_test_trap_subprocess(NULL, 0, 0);
  g_test_trap_assert_failed();
  g_test_trap_assert_stderr("*dur >= 0*");
}

static void test_deterministic(Fixture *fx, gconstpointer data)
{
  GError *error = NULL;
  g_autofree char *other = g_build_filename(fx->dir, "again.json", NULL);
  const char *paths[2] = {fx->path, other};
  for (int k = 0; k < 2; k++) {
    PsTrace *t = ps_trace_open(paths[k], &error);
    g_assert_no_error(error);
    write_sample(t);
    for (int i = 0; i < 1000; i++)
      ps_trace_counter(t, 1, "hbm", i, 1.0 / (i + 1));
    g_assert_true(ps_trace_close(t, &error));
  }
  g_autofree char *a = NULL, *b = NULL;
  gsize la = 0, lb = 0;
  g_assert_true(g_file_get_contents(paths[0], &a, &la, NULL));
  g_assert_true(g_file_get_contents(paths[1], &b, &lb, NULL));
  g_assert_cmpuint(la, ==, lb);
  g_assert_cmpmem(a, la, b, lb);
  /* and the doubles read back exactly */
  size_t n = 0;
  json_object *root = read_trace(paths[0], &n);
  for (int i = 0; i < 1000; i++) {
    json_object *e = event_at(root, 14 + (size_t)i);
    g_assert_cmpfloat(json_object_get_double(get(get(e, "args"), "value")), ==,
                      1.0 / (i + 1));
  }
  json_object_put(root);
}

/* The whole of a gzip file inflated by zlib, and whether it is gzip at
 * all (its magic bytes).  (transfer full) */
static char *gunzip_file(const char *path, gsize *len, gboolean *is_gzip)
{
  g_autofree char *raw = NULL;
  gsize raw_len = 0;
  g_assert_true(g_file_get_contents(path, &raw, &raw_len, NULL));
  *is_gzip = raw_len >= 2 && (unsigned char)raw[0] == 0x1f && (unsigned char)raw[1] == 0x8b;
  z_stream z = {0};
  g_assert_cmpint(inflateInit2(&z, 15 + 16), ==, Z_OK);
  GString *out = g_string_new(NULL);
  z.next_in = (Bytef *)raw;
  z.avail_in = (uInt)raw_len;
  int rc;
  do {
    unsigned char buf[4096];
    z.next_out = buf;
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    g_assert_true(rc == Z_OK || rc == Z_STREAM_END);
    g_string_append_len(out, (const char *)buf, (gssize)(sizeof buf - z.avail_out));
  } while (rc != Z_STREAM_END);
  g_assert_cmpuint(z.avail_in, ==, 0); /* one member, nothing after its trailer */
  inflateEnd(&z);
  *len = out->len;
  return g_string_free(out, FALSE);
}

/* Equal calls to "run.json" and "run.json.gz": the second is gzip, far
 * smaller, and inflates (zlib checks its CRC and length) to the bytes of
 * the first; while written, only its temporary name is on disk. */
static void test_gzip(Fixture *fx, gconstpointer data)
{
  g_autofree char *gz = g_strconcat(fx->path, ".gz", NULL);
  g_assert_true(ps_trace_path_is_gzip(gz));
  g_assert_false(ps_trace_path_is_gzip(fx->path));
  const char *paths[2] = {fx->path, gz};
  GError *error = NULL;
  for (int k = 0; k < 2; k++) {
    PsTrace *t = ps_trace_open(paths[k], &error);
    g_assert_no_error(error);
    write_sample(t);
    for (int i = 0; i < 100000; i++) /* past stdio's and zlib's buffers */
      ps_trace_complete(t, 1, 2, "matmul", "FWD", (int64_t)i * 1000000, 700000,
                        "{\"layer\":\"dense1\"}");
    if (k == 1) {
      g_autofree char *during = scratch_list(fx->dir);
      g_assert_true(g_str_has_prefix(during, "run.json,run.json.gz.tmp-"));
      g_assert_false(g_file_test(gz, G_FILE_TEST_EXISTS));
    }
    g_assert_true(ps_trace_close(t, &error));
    g_assert_no_error(error);
  }
  g_autofree char *plain = NULL;
  gsize plain_len = 0, inflated_len = 0;
  gboolean is_gzip = FALSE;
  g_assert_true(g_file_get_contents(fx->path, &plain, &plain_len, NULL));
  g_autofree char *inflated = gunzip_file(gz, &inflated_len, &is_gzip);
  g_assert_true(is_gzip);
  g_assert_cmpmem(inflated, inflated_len, plain, plain_len);
  GStatBuf st;
  g_assert_cmpint(g_stat(gz, &st), ==, 0);
  g_test_message("JSON %" G_GSIZE_FORMAT " bytes, gzip %lld", plain_len, (long long)st.st_size);
  g_assert_cmpint(st.st_size * PS_TRACE_GZIP_RATIO, <, (gint64)plain_len);
  g_assert_cmpint(ps_trace_written_bytes(gz, 6000000), ==, 6000000 / PS_TRACE_GZIP_RATIO);
  g_assert_cmpint(ps_trace_written_bytes(fx->path, 6000000), ==, 6000000);
  g_unlink(gz);
}

/* A gzip trace that cannot be written (a file-size limit part-way) fails
 * at close naming the path and the cause, and leaves nothing behind; an
 * aborted one leaves nothing either. */
static void test_gzip_errors(Fixture *fx, gconstpointer data)
{
  g_autofree char *gz = g_strconcat(fx->path, ".gz", NULL);
  if (g_test_subprocess()) {
    write_error_child(gz, fx->dir, 16 * 1024);
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
  PsTrace *t = ps_trace_open(gz, NULL);
  write_sample(t);
  ps_trace_abort(t);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD("/trace/events", test_events);
  ADD("/trace/timestamps", test_timestamps);
  ADD("/trace/large", test_large);
  ADD("/trace/empty", test_empty);
  ADD("/trace/temporary", test_temporary);
  ADD("/trace/replace-existing", test_replace_existing);
  ADD("/trace/abort", test_abort);
  ADD("/trace/missing-dir", test_missing_dir);
  ADD("/trace/rename-fails", test_rename_fails);
  ADD("/trace/write-error", test_write_error);
  ADD("/trace/negative-time", test_negative_time);
  ADD("/trace/negative-duration", test_negative_duration);
  ADD("/trace/deterministic", test_deterministic);
  ADD("/trace/gzip", test_gzip);
  ADD("/trace/gzip-errors", test_gzip_errors);
#undef ADD
  return g_test_run();
}

/* test_json.c: typed JSON getters, quantities with units, overrides and the
 * "FILE: PATH: reason" messages of sim/common/json.c.
 *
 * Invariant checked throughout: a failing getter sets an error in
 * PS_INPUT_ERROR whose message names the file and the JSON path, and leaves
 * its output untouched. */
#include "common/json.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <unistd.h>
#include <math.h>
#include <string.h>

static json_object *parse_ok(const char *text)
{
  GError *err = NULL;
  json_object *o = ps_json_parse(text, "t.json", &err);
  g_assert_no_error(err);
  g_assert_nonnull(o);
  return o;
}

/* Asserts err is set with `code` and contains every NULL-terminated needle. */
static void assert_error(GError **err, int code, ...)
{
  g_assert_nonnull(*err);
  g_assert_true((*err)->domain == PS_INPUT_ERROR);
  if ((*err)->code != code)
    g_error("expected code %d, got %d: %s", code, (*err)->code, (*err)->message);
  va_list ap;
  va_start(ap, code);
  const char *needle;
  while ((needle = va_arg(ap, const char *)) != NULL) {
    if (!strstr((*err)->message, needle))
      g_error("message '%s' lacks '%s'", (*err)->message, needle);
  }
  va_end(ap);
  g_clear_error(err);
}

static void assert_rel(double got, double want)
{
  if (!(fabs(got - want) <= 1e-12 * fabs(want)))
    g_error("got %.17g, want %.17g", got, want);
}

/* ------------------------------------------------------------- parsing */

static void test_syntax_line(void)
{
  GError *err = NULL;
  const char *text = "{\n  \"a\": 1,\n  \"b\": [1, 2,,]\n}\n";
  g_assert_null(ps_json_parse(text, "bad.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "bad.json: ", "line 3", NULL);

  /* the error on the very last line of a longer text */
  GString *s = g_string_new("{\n");
  for (int i = 0; i < 40; i++)
    g_string_append_printf(s, "  \"k%d\": %d,\n", i, i);
  g_string_append(s, "  \"last\": tru\n}\n"); /* line 42 */
  g_assert_null(ps_json_parse(s->str, "long.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "long.json: line 42", NULL);
  g_string_free(s, TRUE);

  g_assert_null(ps_json_parse("{\"a\": 1} trailing", "t.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "t.json: line 1", NULL);
  g_assert_null(ps_json_parse("   \n", "empty.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "empty.json", "empty", NULL);
  g_assert_null(ps_json_parse("{\"a\": [1,\n2", "eof.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "eof.json: line 2", NULL);

  /* strict JSON: what json-c's lenient mode would accept is refused */
  g_assert_null(ps_json_parse("{\"a\": 1,}", "comma.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "comma.json: line 1", NULL);
  g_assert_null(ps_json_parse("{\"a\": [1, 2,]}", "comma2.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "comma2.json: line 1", NULL);
  g_assert_null(ps_json_parse("{'a': 1}", "quote.json", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "quote.json: line 1", NULL);
}

static void test_load_file(void)
{
  GError *err = NULL;
  g_assert_null(ps_json_load_file("/nonexistent/dir/x.json", &err));
  assert_error(&err, PS_INPUT_ERROR_FILE, "/nonexistent/dir/x.json: cannot read: ",
               g_strerror(ENOENT), NULL);

  char *path = NULL;
  int fd = g_file_open_tmp("podsim-json-XXXXXX.json", &path, NULL);
  g_assert_cmpint(fd, >=, 0);
  close(fd);
  g_assert_true(g_file_set_contents(path, "{\"x\": {\"y\": 3}}", -1, NULL));
  json_object *o = ps_json_load_file(path, &err);
  g_assert_no_error(err);
  int64_t y = 0;
  json_object *x = json_object_object_get(o, "x");
  g_assert_true(ps_json_get_int(x, path, "x", "y", TRUE, 0, 10, &y, &err));
  g_assert_cmpint(y, ==, 3);
  json_object_put(o);

  g_assert_true(g_file_set_contents(path, "{\n\"x\": 1\n\"y\": 2}", -1, NULL));
  g_assert_null(ps_json_load_file(path, &err));
  g_autofree char *want = g_strdup_printf("%s: line 3", path);
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, want, NULL);
  remove(path);
  g_free(path);
}

static void test_paths(void)
{
  g_autofree char *a = ps_json_path_join("", "c");
  g_autofree char *b = ps_json_path_join("a.b", "c");
  g_autofree char *c = ps_json_path_index("layers", 3);
  g_autofree char *d = ps_json_path_join(c, "units");
  g_assert_cmpstr(a, ==, "c");
  g_assert_cmpstr(b, ==, "a.b.c");
  g_assert_cmpstr(c, ==, "layers[3]");
  g_assert_cmpstr(d, ==, "layers[3].units");
}

/* ------------------------------------------------------------- getters */

static void test_get_int(void)
{
  json_object *o = parse_ok("{\"chip\": {\"n\": 7, \"neg\": -5, \"big\": 1e6, \"half\": 1.5,"
                            " \"s\": \"seven\", \"zero\": 0, \"hbm_bytes\": \"32GiB\","
                            " \"nul\": null}}");
  json_object *chip = json_object_object_get(o, "chip");
  GError *err = NULL;
  int64_t v = 42;

  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "n", TRUE, 1, 100, &v, &err));
  g_assert_cmpint(v, ==, 7);
  /* integral doubles are integers */
  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "big", TRUE, 1, INT64_MAX, &v, &err));
  g_assert_cmpint(v, ==, 1000000);
  /* quantity strings for unit keys, when integral */
  g_assert_true(
      ps_json_get_int(chip, "t.json", "chip", "hbm_bytes", TRUE, 1, INT64_MAX, &v, &err));
  g_assert_cmpint(v, ==, INT64_C(32) * 1024 * 1024 * 1024);

  v = 42;
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "neg", TRUE, 1, INT64_MAX, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "t.json: chip.neg: must be > 0, got -5", NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "zero", TRUE, 1, INT64_MAX, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "t.json: chip.zero: must be > 0, got 0", NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "n", TRUE, 8, 16, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "chip.n: must be between 8 and 16, got 7", NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "n", TRUE, 0, 4, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "chip.n: must be between 0 and 4, got 7", NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "half", TRUE, 0, 9, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "t.json: chip.half: must be an integer, got 1.5",
               NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "s", TRUE, 0, 9, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "t.json: chip.s: must be an integer, got string",
               NULL);
  g_assert_false(ps_json_get_int(chip, "t.json", "chip", "foo", TRUE, 0, 9, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_KEY, "t.json: chip: missing required key 'foo'", NULL);
  g_assert_cmpint(v, ==, 42); /* untouched by every failure */

  /* absent optional (or null) keeps the default */
  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "foo", FALSE, 0, 9, &v, &err));
  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "nul", FALSE, 0, 9, &v, &err));
  g_assert_cmpint(v, ==, 42);

  /* root-level problems say (root) */
  g_assert_false(ps_json_get_int(o, "t.json", "", "x", TRUE, 0, 9, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_KEY, "t.json: (root): missing required key 'x'", NULL);
  /* a non-object */
  json_object *arr = parse_ok("[1]");
  g_assert_false(ps_json_get_int(arr, "t.json", "list", "x", TRUE, 0, 9, &v, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "t.json: list: must be an object, got array", NULL);
  json_object_put(arr);

  int i32 = -1;
  g_assert_true(ps_json_get_int32(chip, "t.json", "chip", "n", TRUE, 0, 10, &i32, &err));
  g_assert_cmpint(i32, ==, 7);
  g_assert_false(
      ps_json_get_int32(chip, "t.json", "chip", "big", TRUE, 0, 1000, &i32, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "chip.big", "1000000", NULL);
  g_assert_cmpint(i32, ==, 7);
  json_object_put(o);
}

static void test_get_double(void)
{
  json_object *o = parse_ok(
      "{\"link\": {\"bandwidth_Bps\": \"100GB/s\", \"latency_s\": \"1us\", \"bad_Bps\":"
      " \"100 parsecs\", \"x\": 0, \"y\": 2, \"peak_flops\": \"123 TFLOP/s\", \"n\": 5,"
      " \"word\": \"fast\", \"slow_s\": \"1 GB\"}}");
  json_object *l = json_object_object_get(o, "link");
  GError *err = NULL;
  double d = -1;

  g_assert_true(ps_json_get_double(l, "t.json", "link", "bandwidth_Bps", TRUE, 0, TRUE,
                                   INFINITY, &d, &err));
  assert_rel(d, 1e11);
  g_assert_true(ps_json_get_double(l, "t.json", "link", "latency_s", TRUE, 0, TRUE, INFINITY,
                                   &d, &err));
  assert_rel(d, 1e-6);
  g_assert_true(ps_json_get_double(l, "t.json", "link", "peak_flops", TRUE, 0, TRUE, INFINITY,
                                   &d, &err));
  assert_rel(d, 123e12);
  g_assert_true(ps_json_get_double(l, "t.json", "link", "n", TRUE, 0, TRUE, INFINITY, &d, &err));
  assert_rel(d, 5);

  d = -1;
  g_assert_false(ps_json_get_double(l, "t.json", "link", "bad_Bps", TRUE, 0, TRUE, INFINITY, &d,
                                    &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX,
               "t.json: link.bad_Bps: cannot read '100 parsecs' as a bandwidth (e.g. "
               "\"100GB/s\")",
               NULL);
  g_assert_false(ps_json_get_double(l, "t.json", "link", "slow_s", TRUE, 0, TRUE, INFINITY, &d,
                                    &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "link.slow_s: cannot read '1 GB' as a time", NULL);
  g_assert_false(
      ps_json_get_double(l, "t.json", "link", "word", TRUE, 0, TRUE, INFINITY, &d, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "link.word: must be a number, got string", NULL);
  g_assert_false(
      ps_json_get_double(l, "t.json", "link", "x", TRUE, 0, TRUE, INFINITY, &d, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "t.json: link.x: must be > 0, got 0", NULL);
  g_assert_false(ps_json_get_double(l, "t.json", "link", "y", TRUE, 0, FALSE, 1, &d, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "link.y: must be >= 0 and <= 1, got 2", NULL);
  g_assert_cmpfloat(d, ==, -1);
  /* min inclusive accepts the bound */
  g_assert_true(
      ps_json_get_double(l, "t.json", "link", "x", TRUE, 0, FALSE, INFINITY, &d, &err));
  g_assert_cmpfloat(d, ==, 0);
  json_object_put(o);
}

static void test_get_other(void)
{
  json_object *o =
      parse_ok("{\"on\": true, \"name\": \"v3\", \"num\": 1, \"kind\": \"pipeline\"}");
  GError *err = NULL;
  gboolean b = FALSE;
  const char *s = NULL;
  int e = -1;
  static const char *const kinds[] = {"replicate", "pipeline", NULL};

  g_assert_true(ps_json_get_bool(o, "t.json", "", "on", TRUE, &b, &err));
  g_assert_true(b);
  g_assert_false(ps_json_get_bool(o, "t.json", "", "num", TRUE, &b, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "t.json: num: must be true or false, got integer",
               NULL);
  g_assert_true(ps_json_get_string(o, "t.json", "", "name", TRUE, &s, &err));
  g_assert_cmpstr(s, ==, "v3");
  g_assert_false(ps_json_get_string(o, "t.json", "", "on", TRUE, &s, &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "t.json: on: must be a string, got boolean", NULL);
  g_assert_true(ps_json_get_enum(o, "t.json", "", "kind", TRUE, kinds, &e, &err));
  g_assert_cmpint(e, ==, 1);
  g_assert_false(ps_json_get_enum(o, "t.json", "", "name", TRUE, kinds, &e, &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE,
               "t.json: name: must be one of: replicate, pipeline; got 'v3'", NULL);
  g_assert_cmpint(e, ==, 1);
  json_object_put(o);
}

static void test_check_keys(void)
{
  json_object *o = parse_ok("{\"chip\": {\"a\": 1, \"b\": 2, \"foo\": 3}}");
  json_object *chip = json_object_object_get(o, "chip");
  GError *err = NULL;
  static const char *const abc[] = {"a", "b", "c", NULL};
  static const char *const abfoo[] = {"a", "b", "foo", NULL};
  g_assert_false(ps_json_check_keys(chip, "topo.json", "chip", abc, &err));
  assert_error(&err, PS_INPUT_ERROR_KEY,
               "topo.json: chip: unknown key 'foo' (expected one of: a, b, c)", NULL);
  g_assert_true(ps_json_check_keys(chip, "topo.json", "chip", abfoo, &err));
  g_assert_false(ps_json_check_keys(o, "topo.json", "", abc, &err));
  assert_error(&err, PS_INPUT_ERROR_KEY, "topo.json: (root): unknown key 'chip'", NULL);
  g_assert_true(ps_json_expect_object(chip, "t.json", "chip", &err));
  json_object_put(o);
  /* a key set to null counts as absent: an override "strategy.replicas=null"
   * is no error where the strategy has no such key (podsim validate sets it
   * on every point) */
  o = parse_ok("{\"a\": 1, \"replicas\": null}");
  g_assert_true(ps_json_check_keys(o, "t.json", "", abc, &err));
  g_assert_no_error(err);
  json_object_put(o);
}

/* ------------------------------------------------------------ quantities */

static void test_quantity(void)
{
  const double Ki = 1024.0, Gi = Ki * Ki * Ki;
  static const struct {
    const char *key, *text;
    double want;
  } good[] = {
    {"bandwidth_Bps", "100GB/s", 100e9},
    {"bandwidth_Bps", "16GiB/s", 16.0 * 1073741824.0},
    {"bandwidth_Bps", "16 GiB/s", 16.0 * 1073741824.0},
    {"bandwidth_Bps", "500Gb/s", 500e9 / 8},
    {"bandwidth_Bps", "62.5e9", 62.5e9},
    {"bandwidth_Bps", "1.5 MB/s", 1.5e6},
    {"bandwidth_Bps", "900 B/s", 900},
    {"latency_s", "1us", 1e-6},
    {"latency_s", "2.5 ms", 2.5e-3},
    {"latency_s", "10ns", 10e-9},
    {"latency_s", "7ps", 7e-12},
    {"latency_s", "3 s", 3},
    {"latency_s", "0.5", 0.5},
    {"hbm_bytes", "32GiB", 34359738368.0},
    {"hbm_bytes", "16 GB", 16e9},
    {"hbm_bytes", "4KiB", 4096},
    {"hbm_bytes", "2 KB", 2000},
    {"hbm_bytes", "3MiB", 3.0 * 1048576},
    {"hbm_bytes", "1TB", 1e12},
    {"hbm_bytes", "1TiB", 1099511627776.0},
    {"hbm_bytes", "12 B", 12},
    /* the prefix alone, as `collective --bytes` takes it: SI, and binary with i */
    {"hbm_bytes", "100M", 100e6},
    {"hbm_bytes", "64Ki", 65536},
    {"hbm_bytes", "2 Gi", 2.0 * 1073741824.0},
    {"hbm_bytes", "1k", 1000},
    {"peak_flops", "123T", 123e12},
    {"peak_flops", "45e12", 45e12},
    {"peak_flops", "123 TFLOP/s", 123e12},
    {"peak_flops", "2P", 2e15},
    {"cpu_flops", "1.5G", 1.5e9},
    {"count", "12", 12},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
    double v = -1;
    if (!ps_parse_quantity(good[i].key, good[i].text, &v))
      g_error("%s = '%s' not read", good[i].key, good[i].text);
    assert_rel(v, good[i].want);
  }
  assert_rel(16.0 * Gi, 17179869184.0);

  static const struct {
    const char *key, *text;
  } bad[] = {
    {"bandwidth_Bps", "100 parsecs"}, {"bandwidth_Bps", "GB/s"}, {"bandwidth_Bps", "100GB"},
    {"latency_s", "1 GB"},            {"latency_s", "1e"},       {"hbm_bytes", "0x10"},
    {"hbm_bytes", "inf"},             {"hbm_bytes", "nan B"},    {"hbm_bytes", ""},
    {"peak_flops", "12 parsecs"},     {"count", "12k"},          {"hbm_bytes", "1.2.3GB"},
    {"hbm_bytes", "1m"},              {"hbm_bytes", "1 iB"},     {"hbm_bytes", "1MB/s"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    double v = -1;
    if (ps_parse_quantity(bad[i].key, bad[i].text, &v))
      g_error("%s = '%s' wrongly read as %g", bad[i].key, bad[i].text, v);
    g_assert_cmpfloat(v, ==, -1);
  }
}

/* ------------------------------------------------------------ overrides */

static void test_override(void)
{
  json_object *o = parse_ok("{\"chip\": {\"cores\": 2, \"name\": \"v3\"},"
                            " \"layers\": [{\"units\": 8}, {\"units\": 16}], \"n\": 1}");
  GError *err = NULL;
  int64_t v = 0;
  const char *s = NULL;

  g_assert_true(ps_json_apply_override(o, "chip.cores=4", "--set", &err));
  g_assert_no_error(err);
  json_object *chip = json_object_object_get(o, "chip");
  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "cores", TRUE, 1, 8, &v, &err));
  g_assert_cmpint(v, ==, 4);

  /* nested creation, typed values */
  g_assert_true(ps_json_apply_override(o, "host.pcie.bandwidth_Bps=16GB/s", "--set", &err));
  g_assert_true(ps_json_apply_override(o, "host.pcie.on=true", "--set", &err));
  g_assert_true(ps_json_apply_override(o, "host.name=\"quoted\"", "--set", &err));
  g_assert_true(ps_json_apply_override(o, "host.list=[1, 2, 3]", "--set", &err));
  g_assert_true(ps_json_apply_override(o, "host.obj={\"k\": 5}", "--set", &err));
  g_assert_no_error(err);
  json_object *pcie = NULL, *host = json_object_object_get(o, "host");
  g_assert_true(json_object_object_get_ex(host, "pcie", &pcie));
  g_assert_true(json_object_is_type(pcie, json_type_object));
  double bw = 0;
  g_assert_true(ps_json_get_double(pcie, "t.json", "host.pcie", "bandwidth_Bps", TRUE, 0, TRUE,
                                   INFINITY, &bw, &err));
  assert_rel(bw, 16e9);
  g_assert_true(json_object_get_boolean(json_object_object_get(pcie, "on")));
  g_assert_true(ps_json_get_string(host, "t.json", "host", "name", TRUE, &s, &err));
  g_assert_cmpstr(s, ==, "quoted");
  g_assert_cmpint(json_object_array_length(json_object_object_get(host, "list")), ==, 3);
  g_assert_cmpint(
      json_object_get_int(json_object_object_get(json_object_object_get(host, "obj"), "k")), ==,
      5);

  /* array index syntax */
  g_assert_true(ps_json_apply_override(o, "layers[1].units=64", "--set", &err));
  json_object *l1 = json_object_array_get_idx(json_object_object_get(o, "layers"), 1);
  g_assert_cmpint(json_object_get_int(json_object_object_get(l1, "units")), ==, 64);
  g_assert_true(ps_json_apply_override(o, "layers[0]={\"units\": 3}", "--set", &err));
  json_object *l0 = json_object_array_get_idx(json_object_object_get(o, "layers"), 0);
  g_assert_cmpint(json_object_get_int(json_object_object_get(l0, "units")), ==, 3);
  g_assert_no_error(err);

  /* errors */
  g_assert_false(ps_json_apply_override(o, "n.b.c=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "--set n.b.c: 'n' is not an object", NULL);
  g_assert_false(ps_json_apply_override(o, "chip.cores.x.y=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "--set chip.cores.x.y: 'chip.cores' is not an object",
               NULL);
  g_assert_false(ps_json_apply_override(o, "chip.cores", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "--set chip.cores", "PATH=VALUE", NULL);
  g_assert_false(ps_json_apply_override(o, "layers[5].units=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_VALUE, "--set layers[5].units", "[5]", NULL);
  g_assert_false(ps_json_apply_override(o, "chip[0].x=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_TYPE, "'chip' is not an array", NULL);
  g_assert_false(ps_json_apply_override(o, "a..b=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "--set a..b=1", "empty key", NULL);
  g_assert_false(ps_json_apply_override(o, "=1", "--set", &err));
  assert_error(&err, PS_INPUT_ERROR_SYNTAX, "empty key", NULL);

  /* the value is taken verbatim after the first '=' */
  g_assert_true(ps_json_apply_override(o, "chip.name=a=b", "--set", &err));
  g_assert_cmpstr(json_object_get_string(json_object_object_get(chip, "name")), ==, "a=b");
  /* null restores the default: the getter sees the key as absent */
  g_assert_true(ps_json_apply_override(o, "chip.cores=null", "--set", &err));
  v = 99;
  g_assert_true(ps_json_get_int(chip, "t.json", "chip", "cores", FALSE, 1, 8, &v, &err));
  g_assert_cmpint(v, ==, 99);
  json_object_put(o);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/json/parse/syntax-line", test_syntax_line);
  g_test_add_func("/json/parse/load-file", test_load_file);
  g_test_add_func("/json/paths", test_paths);
  g_test_add_func("/json/get/int", test_get_int);
  g_test_add_func("/json/get/double-units", test_get_double);
  g_test_add_func("/json/get/bool-string-enum", test_get_other);
  g_test_add_func("/json/check-keys", test_check_keys);
  g_test_add_func("/json/quantity", test_quantity);
  g_test_add_func("/json/override", test_override);
  return g_test_run();
}

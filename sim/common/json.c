/* json.c: typed, path-tracking reads from json-c trees, quantities with
 * units, and "--set a.b.c=value" overrides.
 *
 * Invariant: every user error leaves here as a GError in PS_INPUT_ERROR
 * whose message reads "FILE: PATH: reason" (PATH "(root)" for the top
 * level), and a getter that fails never writes its *out.
 *
 * Reading rules: integers are JSON integers, or JSON numbers with an
 * integral value (1e6), or, for keys with a unit suffix, quantity strings
 * that come out integral ("32GiB"); 1.5 is a type error.  A key set to null
 * counts as absent (so an override "x=null" restores the default).  SI
 * prefixes are decimal (k or K, M, G, T, P), binary ones end in i (Ki, Mi,
 * Gi, Ti, Pi); "Gb/s" is bits and divides by 8. */
#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- paths */

static const char *where(const char *path)
{
  return (path && *path) ? path : "(root)";
}

char *ps_json_path_join(const char *path, const char *key)
{
  g_return_val_if_fail(key != NULL, NULL);
  if (!path || !*path)
    return g_strdup(key);
  return g_strdup_printf("%s.%s", path, key);
}

char *ps_json_path_index(const char *path, int index)
{
  return g_strdup_printf("%s[%d]", path ? path : "", index);
}

const char *ps_json_type_name(json_object *v)
{
  switch (json_object_get_type(v)) {
  case json_type_null: return "null";
  case json_type_boolean: return "boolean";
  case json_type_double: return "number";
  case json_type_int: return "integer";
  case json_type_string: return "string";
  case json_type_array: return "array";
  case json_type_object: return "object";
  }
  return "unknown";
}

/* ------------------------------------------------------------- parsing */

/* 1-based line and column of byte `offset` in text. */
static void line_col(const char *text, size_t offset, int *line, int *col)
{
  int l = 1, c = 1;
  for (size_t i = 0; i < offset && text[i]; i++) {
    if (text[i] == '\n') {
      l++;
      c = 1;
    } else {
      c++;
    }
  }
  *line = l;
  *col = c;
}

static gboolean only_space(const char *s)
{
  for (; *s; s++)
    if (!g_ascii_isspace(*s))
      return FALSE;
  return TRUE;
}

/* Parses all of text[0..len) as one JSON value with tokener flags `flags`.
 * On failure returns NULL and sets *fail_offset and *reason (static). */
static json_object *parse_whole(const char *text, size_t len, int flags, size_t *fail_offset,
                                const char **reason)
{
  json_tokener *tok = json_tokener_new();
  json_tokener_set_flags(tok, flags);
  /* Passing the terminating NUL tells the tokener the input ends here, so a
   * bare number or literal at the end is complete. */
  json_object *obj = json_tokener_parse_ex(tok, text, (int)len + 1);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);

  if (obj == NULL) {
    *fail_offset = end;
    if (only_space(text)) {
      *reason = "empty document";
      return NULL;
    }
    if (jerr == json_tokener_success) {
      *reason = "the value is null";
    } else if (jerr == json_tokener_continue) {
      *reason = "unexpected end of input";
    } else {
      *reason = json_tokener_error_desc(jerr);
    }
    return NULL;
  }
  for (size_t i = end; i < len; i++) {
    if (!g_ascii_isspace(text[i])) {
      json_object_put(obj);
      *fail_offset = i;
      *reason = "unexpected text after the JSON value";
      return NULL;
    }
  }
  return obj;
}

/* The offset of the first single quote outside a double-quoted string, or
 * len: json-c's strict mode still takes 'single-quoted' names. */
static size_t single_quote_at(const char *text, size_t len)
{
  gboolean in_string = FALSE;
  for (size_t i = 0; i < len; i++) {
    if (in_string) {
      if (text[i] == '\\' && i + 1 < len)
        i++;
      else if (text[i] == '"')
        in_string = FALSE;
    } else if (text[i] == '"') {
      in_string = TRUE;
    } else if (text[i] == '\'') {
      return i;
    }
  }
  return len;
}

json_object *ps_json_parse(const char *text, const char *origin, GError **error)
{
  g_return_val_if_fail(text != NULL, NULL);
  size_t len = strlen(text);
  size_t off = single_quote_at(text, len);
  const char *reason = "strings and names take double quotes, not single quotes";
  json_object *obj = NULL;
  if (off == len)
    obj = parse_whole(text, len, JSON_TOKENER_STRICT, &off, &reason);
  if (!obj) {
    int line, col;
    /* The tokener stops at the offending byte. */
    line_col(text, off, &line, &col);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: line %d, column %d: invalid JSON: %s", origin ? origin : "<text>", line,
                col, reason);
  }
  return obj;
}

json_object *ps_json_load_file(const char *path, GError **error)
{
  g_return_val_if_fail(path != NULL, NULL);
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read: %s", path,
                g_strerror(e));
    return NULL;
  }
  GString *buf = g_string_new(NULL);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    g_string_append_len(buf, chunk, (gssize)n);
  int failed = ferror(f);
  int e = errno;
  fclose(f);
  if (failed) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read: %s", path,
                g_strerror(e));
    g_string_free(buf, TRUE);
    return NULL;
  }
  if (memchr(buf->str, '\0', buf->len) != NULL) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s: cannot read: contains a NUL byte (not a JSON text file)", path);
    g_string_free(buf, TRUE);
    return NULL;
  }
  json_object *obj = ps_json_parse(buf->str, path, error);
  g_string_free(buf, TRUE);
  return obj;
}

/* ---------------------------------------------------------- structure */

gboolean ps_json_expect_object(json_object *obj, const char *file, const char *path,
                               GError **error)
{
  if (json_object_is_type(obj, json_type_object))
    return TRUE;
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s: %s: must be an object, got %s",
              file, where(path), ps_json_type_name(obj));
  return FALSE;
}

gboolean ps_json_check_keys(json_object *obj, const char *file, const char *path,
                            const char *const *allowed, GError **error)
{
  g_return_val_if_fail(allowed != NULL, FALSE);
  if (!ps_json_expect_object(obj, file, path, error))
    return FALSE;
  json_object_object_foreach(obj, key, val) {
    if (!val)
      continue; /* null counts as absent, whatever the key */
    gboolean ok = FALSE;
    for (const char *const *a = allowed; *a; a++) {
      if (strcmp(*a, key) == 0) {
        ok = TRUE;
        break;
      }
    }
    if (!ok) {
      g_autofree char *list = g_strjoinv(", ", (char **)allowed);
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY,
                  "%s: %s: unknown key '%s' (expected one of: %s)", file, where(path), key,
                  list);
      return FALSE;
    }
  }
  return TRUE;
}

/* Looks key up in obj.  Absent: error if required, else *val = NULL and
 * TRUE (the caller keeps its default). */
static gboolean lookup(json_object *obj, const char *file, const char *path, const char *key,
                       gboolean required, json_object **val, GError **error)
{
  g_return_val_if_fail(key != NULL, FALSE);
  if (!ps_json_expect_object(obj, file, path, error))
    return FALSE;
  /* A key set to null counts as absent (json-c stores null as NULL), so
   * "--set a.b=null" restores a default. */
  *val = NULL;
  if (json_object_object_get_ex(obj, key, val) && *val != NULL)
    return TRUE;
  *val = NULL;
  if (required) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY, "%s: %s: missing required key '%s'",
                file, where(path), key);
    return FALSE;
  }
  return TRUE;
}

/* ------------------------------------------------------------ quantities */

typedef enum { UNIT_NONE, UNIT_TIME, UNIT_BANDWIDTH, UNIT_SIZE, UNIT_RATE } UnitKind;

static gboolean has_suffix(const char *s, const char *suffix)
{
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static UnitKind unit_kind(const char *key)
{
  if (!key)
    return UNIT_NONE;
  if (has_suffix(key, "_s"))
    return UNIT_TIME;
  if (has_suffix(key, "_Bps"))
    return UNIT_BANDWIDTH;
  if (has_suffix(key, "_bytes"))
    return UNIT_SIZE;
  if (has_suffix(key, "flops"))
    return UNIT_RATE;
  return UNIT_NONE;
}

static const char *unit_kind_name(UnitKind k)
{
  switch (k) {
  case UNIT_TIME: return "time";
  case UNIT_BANDWIDTH: return "bandwidth";
  case UNIT_SIZE: return "size";
  case UNIT_RATE: return "FLOP rate";
  case UNIT_NONE: break;
  }
  return "number";
}

static const char *unit_kind_example(UnitKind k)
{
  switch (k) {
  case UNIT_TIME: return "1.5us";
  case UNIT_BANDWIDTH: return "100GB/s";
  case UNIT_SIZE: return "32GiB";
  case UNIT_RATE: return "123T";
  case UNIT_NONE: break;
  }
  return "1";
}

/* Reads a decimal number ([+-]digits[.digits][e[+-]digits]) at *s and
 * advances *s past it.  No hex, inf or nan. */
static gboolean scan_number(const char **s, double *out)
{
  const char *p = *s;
  const char *start = p;
  if (*p == '+' || *p == '-')
    p++;
  gboolean digits = FALSE;
  while (g_ascii_isdigit(*p)) {
    p++;
    digits = TRUE;
  }
  if (*p == '.') {
    p++;
    while (g_ascii_isdigit(*p)) {
      p++;
      digits = TRUE;
    }
  }
  if (!digits)
    return FALSE;
  if (*p == 'e' || *p == 'E') {
    const char *q = p + 1;
    if (*q == '+' || *q == '-')
      q++;
    if (g_ascii_isdigit(*q)) {
      while (g_ascii_isdigit(*q))
        q++;
      p = q;
    }
  }
  g_autofree char *num = g_strndup(start, (gsize)(p - start));
  *out = g_ascii_strtod(num, NULL);
  *s = p;
  return isfinite(*out);
}

/* Reads an optional SI (k/K, M, G, T, P: powers of 1000) or binary (Ki, Mi,
 * Gi, Ti, Pi: powers of 1024) prefix at *s. */
static double scan_prefix(const char **s)
{
  static const struct {
    const char *p;
    double f;
  } prefixes[] = {
    {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
    {"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0},
    {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(prefixes); i++) {
    size_t n = strlen(prefixes[i].p);
    if (strncmp(*s, prefixes[i].p, n) == 0) {
      *s += n;
      return prefixes[i].f;
    }
  }
  return 1.0;
}

/* Multiplier of a whole unit string (after the number) for kind k; 0 if the
 * unit does not belong to that kind.  An empty unit means the base unit. */
static double unit_factor(UnitKind k, const char *u)
{
  if (*u == '\0')
    return 1.0;
  switch (k) {
  case UNIT_TIME: {
    static const struct {
      const char *u;
      double f;
    } t[] = {{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6},
             {"ms", 1e-3}, {"s", 1.0}};
    for (size_t i = 0; i < G_N_ELEMENTS(t); i++)
      if (strcmp(u, t[i].u) == 0)
        return t[i].f;
    return 0;
  }
  case UNIT_BANDWIDTH: {
    double f = scan_prefix(&u);
    if (strcmp(u, "B/s") == 0 || strcmp(u, "Bps") == 0)
      return f;
    if (strcmp(u, "b/s") == 0 || strcmp(u, "bps") == 0)
      return f / 8.0;
    return 0;
  }
  case UNIT_SIZE: { /* "16GB", "32GiB", or the prefix alone: "100M", "64Ki" */
    const char *after = u;
    double f = scan_prefix(&after);
    return strcmp(after, "B") == 0 || (*after == '\0' && after != u) ? f : 0;
  }
  case UNIT_RATE: {
    double f = scan_prefix(&u);
    if (*u == '\0' || strcmp(u, "FLOP/s") == 0 || strcmp(u, "FLOPS") == 0 ||
        strcmp(u, "flop/s") == 0 || strcmp(u, "flops") == 0)
      return f;
    return 0;
  }
  case UNIT_NONE:
    break;
  }
  return 0;
}

gboolean ps_parse_quantity(const char *key, const char *text, double *out)
{
  g_return_val_if_fail(text != NULL && out != NULL, FALSE);
  UnitKind k = unit_kind(key);
  const char *p = text;
  while (g_ascii_isspace(*p))
    p++;
  double v;
  if (!scan_number(&p, &v))
    return FALSE;
  while (g_ascii_isspace(*p))
    p++;
  g_autofree char *unit = g_strdup(p);
  g_strchomp(unit);
  double f = k == UNIT_NONE ? (*unit ? 0 : 1.0) : unit_factor(k, unit);
  if (f == 0)
    return FALSE;
  *out = v * f;
  return isfinite(*out);
}

/* ------------------------------------------------------------- getters */

/* Writes "must be >= 1" style bounds for integers; ">= 1" reads as "> 0". */
static char *int_bounds(int64_t min, int64_t max)
{
  g_autofree char *lo = NULL;
  if (min == 1)
    lo = g_strdup("> 0");
  else if (min != INT64_MIN)
    lo = g_strdup_printf(">= %" G_GINT64_FORMAT, min);
  if (max == INT64_MAX)
    return g_strdup_printf("must be %s", lo ? lo : "a valid integer");
  if (!lo)
    return g_strdup_printf("must be <= %" G_GINT64_FORMAT, max);
  return g_strdup_printf("must be between %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT, min,
                         max);
}

/* Integers: a JSON integer, a JSON double with an integral value (1e6), or
 * for keys with a unit suffix a quantity string that comes out integral
 * ("32GiB").  Anything else is a type error. */
gboolean ps_json_get_int(json_object *obj, const char *file, const char *path, const char *key,
                         gboolean required, int64_t min, int64_t max, int64_t *out,
                         GError **error)
{
  json_object *v;
  if (!lookup(obj, file, path, key, required, &v, error))
    return FALSE;
  if (!v)
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, key);
  int64_t x;
  double d;
  gboolean is_double = FALSE;
  switch (json_object_get_type(v)) {
  case json_type_int:
    errno = 0;
    x = json_object_get_int64(v);
    if (errno == ERANGE) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: integer out of range",
                  file, p);
      return FALSE;
    }
    break;
  case json_type_double:
    d = json_object_get_double(v);
    is_double = TRUE;
    break;
  case json_type_string:
    if (unit_kind(key) != UNIT_NONE) {
      const char *s = json_object_get_string(v);
      if (!ps_parse_quantity(key, s, &d)) {
        UnitKind k = unit_kind(key);
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                    "%s: %s: cannot read '%s' as a %s (e.g. \"%s\")", file, p, s,
                    unit_kind_name(k), unit_kind_example(k));
        return FALSE;
      }
      is_double = TRUE;
      break;
    }
    /* fall through */
  default:
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s: %s: must be an integer, got %s",
                file, p, ps_json_type_name(v));
    return FALSE;
  }
  if (is_double) {
    if (!(fabs(d) < 9.2e18) || d != floor(d)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE,
                  "%s: %s: must be an integer, got %.17g", file, p, d);
      return FALSE;
    }
    x = (int64_t)d;
  }
  if (x < min || x > max) {
    g_autofree char *b = int_bounds(min, max);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: %s, got %" G_GINT64_FORMAT,
                file, p, b, x);
    return FALSE;
  }
  *out = x;
  return TRUE;
}

gboolean ps_json_get_int32(json_object *obj, const char *file, const char *path,
                           const char *key, gboolean required, int min, int max, int *out,
                           GError **error)
{
  int64_t v = 0;
  json_object *probe = NULL;
  if (!lookup(obj, file, path, key, required, &probe, error))
    return FALSE;
  if (!probe)
    return TRUE;
  if (!ps_json_get_int(obj, file, path, key, required, min, max, &v, error))
    return FALSE;
  *out = (int)v;
  return TRUE;
}

gboolean ps_json_get_double(json_object *obj, const char *file, const char *path,
                            const char *key, gboolean required, double min,
                            gboolean min_exclusive, double max, double *out, GError **error)
{
  json_object *v;
  if (!lookup(obj, file, path, key, required, &v, error))
    return FALSE;
  if (!v)
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, key);
  double d;
  UnitKind k = unit_kind(key);
  switch (json_object_get_type(v)) {
  case json_type_int:
  case json_type_double:
    d = json_object_get_double(v);
    break;
  case json_type_string:
    if (k != UNIT_NONE) {
      const char *s = json_object_get_string(v);
      if (!ps_parse_quantity(key, s, &d)) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                    "%s: %s: cannot read '%s' as a %s (e.g. \"%s\")", file, p, s,
                    unit_kind_name(k), unit_kind_example(k));
        return FALSE;
      }
      break;
    }
    /* fall through */
  default:
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s: %s: must be a number, got %s",
                file, p, ps_json_type_name(v));
    return FALSE;
  }
  if (!isfinite(d)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: must be a finite number",
                file, p);
    return FALSE;
  }
  gboolean low = min_exclusive ? !(d > min) : !(d >= min);
  gboolean high = !(d <= max);
  if (low || high) {
    const char *op = min_exclusive ? ">" : ">=";
    gboolean has_min = isfinite(min), has_max = isfinite(max) && max < G_MAXDOUBLE;
    if (has_min && has_max)
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: %s: must be %s %g and <= %g, got %g", file, p, op, min, max, d);
    else if (has_min)
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: must be %s %g, got %g",
                  file, p, op, min, d);
    else
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: must be <= %g, got %g",
                  file, p, max, d);
    return FALSE;
  }
  *out = d;
  return TRUE;
}

gboolean ps_json_get_bool(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, gboolean *out, GError **error)
{
  json_object *v;
  if (!lookup(obj, file, path, key, required, &v, error))
    return FALSE;
  if (!v)
    return TRUE;
  if (!json_object_is_type(v, json_type_boolean)) {
    g_autofree char *p = ps_json_path_join(path, key);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE,
                "%s: %s: must be true or false, got %s", file, p, ps_json_type_name(v));
    return FALSE;
  }
  *out = json_object_get_boolean(v) ? TRUE : FALSE;
  return TRUE;
}

gboolean ps_json_get_string(json_object *obj, const char *file, const char *path,
                            const char *key, gboolean required, const char **out,
                            GError **error)
{
  json_object *v;
  if (!lookup(obj, file, path, key, required, &v, error))
    return FALSE;
  if (!v)
    return TRUE;
  if (!json_object_is_type(v, json_type_string)) {
    g_autofree char *p = ps_json_path_join(path, key);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s: %s: must be a string, got %s",
                file, p, ps_json_type_name(v));
    return FALSE;
  }
  *out = json_object_get_string(v);
  return TRUE;
}

gboolean ps_json_get_enum(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, const char *const *choices, int *out,
                          GError **error)
{
  g_return_val_if_fail(choices != NULL, FALSE);
  const char *s = NULL;
  if (!ps_json_get_string(obj, file, path, key, required, &s, error))
    return FALSE;
  if (!s)
    return TRUE;
  for (int i = 0; choices[i]; i++) {
    if (strcmp(choices[i], s) == 0) {
      *out = i;
      return TRUE;
    }
  }
  g_autofree char *p = ps_json_path_join(path, key);
  g_autofree char *list = g_strjoinv(", ", (char **)choices);
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
              "%s: %s: must be one of: %s; got '%s'", file, p, list, s);
  return FALSE;
}

/* ------------------------------------------------------------ overrides */

/* One step of an override path: a key, then zero or more [index]. */
typedef struct {
  char *key;
  GArray *indices; /* int */
} PathStep;

static void path_steps_free(GPtrArray *steps)
{
  g_ptr_array_free(steps, TRUE);
}

static void path_step_free(gpointer p)
{
  PathStep *s = p;
  g_free(s->key);
  g_array_free(s->indices, TRUE);
  g_free(s);
}

/* Splits "a.b[2].c" into steps; NULL and a reason on bad syntax. */
static GPtrArray *split_path(const char *path, const char **reason)
{
  GPtrArray *steps = g_ptr_array_new_with_free_func(path_step_free);
  const char *p = path;
  for (;;) {
    const char *start = p;
    while (*p && *p != '.' && *p != '[')
      p++;
    if (p == start) {
      *reason = "empty key in path";
      goto fail;
    }
    PathStep *st = g_new0(PathStep, 1);
    st->key = g_strndup(start, (gsize)(p - start));
    st->indices = g_array_new(FALSE, FALSE, sizeof(int));
    g_ptr_array_add(steps, st);
    while (*p == '[') {
      p++;
      char *end;
      long idx = strtol(p, &end, 10);
      if (end == p || *end != ']' || idx < 0 || idx > G_MAXINT) {
        *reason = "bad array index in path (expected [N])";
        goto fail;
      }
      int i = (int)idx;
      g_array_append_val(st->indices, i);
      p = end + 1;
    }
    if (*p == '\0')
      break;
    if (*p != '.') {
      *reason = "unexpected character in path";
      goto fail;
    }
    p++;
  }
  return steps;
fail:
  path_steps_free(steps);
  return NULL;
}

/* A --set value: JSON, or else the text as a string; text that opens an
 * object or an array must be JSON (a quoting slip is an error, not a
 * string).  FALSE with error on that. */
static gboolean parse_value(const char *text, json_object **out, const char *origin,
                            const char *path, GError **error)
{
  size_t off;
  const char *reason;
  *out = NULL;
  g_autofree char *stripped = g_strstrip(g_strdup(text));
  if (strcmp(stripped, "null") == 0)
    return TRUE; /* json-c represents null as NULL */
  json_object *v = parse_whole(text, strlen(text), JSON_TOKENER_STRICT, &off, &reason);
  if (v) {
    *out = v;
    return TRUE;
  }
  if (stripped[0] == '{' || stripped[0] == '[') {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s %s: the value opens a JSON %s but is not valid JSON (%s at character %zu); "
                "quote it for the shell, e.g. --set '%s=...'",
                origin, path, stripped[0] == '{' ? "object" : "array", reason, off + 1, path);
    return FALSE;
  }
  *out = json_object_new_string(text);
  return TRUE;
}

gboolean ps_json_apply_override(json_object *root, const char *assignment, const char *origin,
                                GError **error)
{
  g_return_val_if_fail(root != NULL && assignment != NULL, FALSE);
  if (!origin)
    origin = "--set";
  const char *eq = strchr(assignment, '=');
  if (!eq) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                "%s %s: expected PATH=VALUE (e.g. chip.hbm_bytes=32GiB)", origin, assignment);
    return FALSE;
  }
  g_autofree char *path = g_strndup(assignment, (gsize)(eq - assignment));
  g_strstrip(path);
  const char *reason = NULL;
  GPtrArray *steps = split_path(path, &reason);
  if (!steps) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX, "%s %s: %s", origin, assignment,
                reason);
    return FALSE;
  }

  gboolean ok = FALSE;
  GString *walked = g_string_new(NULL); /* the path so far, for messages */
  json_object *cur = root;
  for (guint s = 0; s < steps->len; s++) {
    PathStep *st = g_ptr_array_index(steps, s);
    gboolean last_step = s + 1 == steps->len;
    if (!json_object_is_type(cur, json_type_object)) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s %s: '%s' is not an object",
                  origin, path, where(walked->str));
      goto out;
    }
    if (walked->len)
      g_string_append_c(walked, '.');
    g_string_append(walked, st->key);

    if (last_step && st->indices->len == 0) {
      json_object *v;
      if (!parse_value(eq + 1, &v, origin, path, error))
        goto out;
      json_object_object_add(cur, st->key, v);
      ok = TRUE;
      goto out;
    }
    json_object *next = NULL;
    if (!json_object_object_get_ex(cur, st->key, &next) || next == NULL) {
      if (st->indices->len) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY, "%s %s: '%s' does not exist",
                    origin, path, walked->str);
        goto out;
      }
      next = json_object_new_object();
      json_object_object_add(cur, st->key, next);
    }
    cur = next;
    for (guint i = 0; i < st->indices->len; i++) {
      int idx = g_array_index(st->indices, int, i);
      if (!json_object_is_type(cur, json_type_array)) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_TYPE, "%s %s: '%s' is not an array",
                    origin, path, walked->str);
        goto out;
      }
      if ((size_t)idx >= json_object_array_length(cur)) {
        g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                    "%s %s: '%s' has %zu elements, no [%d]", origin, path, walked->str,
                    json_object_array_length(cur), idx);
        goto out;
      }
      g_string_append_printf(walked, "[%d]", idx);
      if (last_step && i + 1 == st->indices->len) {
        json_object *v;
        if (!parse_value(eq + 1, &v, origin, path, error))
          goto out;
        json_object_array_put_idx(cur, (size_t)idx, v);
        ok = TRUE;
        goto out;
      }
      cur = json_object_array_get_idx(cur, (size_t)idx);
    }
  }
out:
  g_string_free(walked, TRUE);
  path_steps_free(steps);
  return ok;
}

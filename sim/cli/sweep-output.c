/* sweep-output.c: the file a sweep appends its rows to (see sweep.c):
 * reading what an earlier sweep left there (the points it finished, a last
 * row an interrupted write cut short), opening it to append, and each
 * row, as CSV or JSON lines.  Only the writer (rank 0's calling thread)
 * calls these. */
#include "cli/sweep-private.h"

#include "common/json.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void csv_cell(GString *s, const char *text)
{
  size_t n = strlen(text);
  if (n == 0 || (!strpbrk(text, ",\"\n\r") && text[0] != ' ' && text[n - 1] != ' ')) {
    g_string_append(s, text);
    return;
  }
  g_string_append_c(s, '"');
  for (const char *c = text; *c; c++) {
    if (*c == '"')
      g_string_append_c(s, '"');
    g_string_append_c(s, *c);
  }
  g_string_append_c(s, '"');
}

/* CSV records of text (RFC 4180: quoted fields may hold commas, quotes
 * doubled, newlines); *complete is the length of the whole records, any
 * text after it a row cut short.  (transfer full: GStrv each) */
static GPtrArray *csv_parse(const char *text, size_t len, size_t *complete)
{
  GPtrArray *records = g_ptr_array_new_with_free_func((GDestroyNotify)g_strfreev);
  GPtrArray *fields = g_ptr_array_new();
  GString *cell = g_string_new(NULL);
  gboolean quoted = FALSE;
  *complete = 0;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < len && text[i + 1] == '"')
        g_string_append_c(cell, text[++i]);
      else if (c == '"')
        quoted = FALSE;
      else
        g_string_append_c(cell, c);
    } else if (c == '"') {
      quoted = TRUE;
    } else if (c == ',' || c == '\n') {
      g_ptr_array_add(fields, g_strdup(cell->str));
      g_string_truncate(cell, 0);
      if (c == '\n') {
        g_ptr_array_add(fields, NULL);
        g_ptr_array_add(records, g_ptr_array_free(fields, FALSE));
        fields = g_ptr_array_new();
        *complete = i + 1;
      }
    } else if (c != '\r') {
      g_string_append_c(cell, c);
    }
  }
  g_ptr_array_set_free_func(fields, g_free);
  g_ptr_array_free(fields, TRUE);
  g_string_free(cell, TRUE);
  return records;
}

/* Notes that the file holds point key (owned); two rows of one point mean
 * the file comes from a sweep that varied more keys. */
static gboolean finished_add(Output *out, char *key, gboolean failed, guint line,
                             GError **error)
{
  if (g_hash_table_contains(out->finished, key)) {
    g_free(key);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: line %u repeats the values of an earlier row: the file comes from a "
                "sweep that varied other keys; give another --out, or the same --vary keys "
                "to resume it",
                out->path, line);
    return FALSE;
  }
  g_hash_table_insert(out->finished, key, GINT_TO_POINTER(failed ? 2 : 1));
  return TRUE;
}

/* Reads the CSV header and rows already in the file: the points they hold
 * go to out->finished (when they belong to this sweep). */
static gboolean read_csv(Output *out, const Sweep *sw, const char *text, size_t len,
                         size_t *complete, GError **error)
{
  g_autoptr(GPtrArray) records = csv_parse(text, len, complete);
  if (records->len == 0)
    return TRUE;
  char **header = records->pdata[0];
  guint nv = sw->varies->len, ncol = g_strv_length(header);
  gboolean same = ncol >= nv + 1 && strcmp(header[ncol - 1], "error") == 0;
  int *col = g_newa(int, nv);
  for (guint k = 0; k < nv && same; k++) {
    col[k] = -1;
    for (guint c = 0; c < nv; c++)
      if (strcmp(header[c], ((Vary *)sw->varies->pdata[k])->key) == 0)
        col[k] = (int)c;
    same = col[k] >= 0;
  }
  if (!same) {
    GString *first = g_string_new(NULL);
    for (guint c = 0; c < MIN(ncol, nv + 1); c++)
      g_string_append_printf(first, "%s%s", c ? "," : "", header[c]);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: its header (%s%s) is not that of a sweep varying these keys: give "
                "another --out, or the same --vary keys to resume it",
                out->path, first->str, ncol > nv + 1 ? ",..." : "");
    g_string_free(first, TRUE);
    return FALSE;
  }
  out->columns = g_ptr_array_new_with_free_func(g_free);
  for (guint c = 0; c < ncol; c++)
    g_ptr_array_add(out->columns, g_strdup(header[c]));
  for (guint r = 1; r < records->len; r++) {
    char **row = records->pdata[r];
    if (g_strv_length(row) != ncol) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "%s: row %u has %u fields, its header %u: not a file podsim sweep wrote",
                  out->path, r + 1, g_strv_length(row), ncol);
      return FALSE;
    }
    GString *key = g_string_new(NULL);
    for (guint k = 0; k < nv; k++) {
      g_autofree char *c = ps_sweep_canonical_text(row[col[k]]);
      g_string_append_printf(key, "%s%s", k ? "\x1f" : "", c);
    }
    if (!finished_add(out, g_string_free(key, FALSE), *row[ncol - 1] != '\0', r + 1, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean read_jsonl(Output *out, const Sweep *sw, const char *text, size_t len,
                           size_t *complete, GError **error)
{
  *complete = 0;
  guint line = 0;
  for (size_t start = 0; start < len; line++) {
    const char *nl = memchr(text + start, '\n', len - start);
    if (!nl)
      break; /* a row cut short */
    g_autofree char *row = g_strndup(text + start, (gsize)(nl - (text + start)));
    start = (size_t)(nl - text) + 1;
    *complete = start;
    json_object *o = NULL;
    if (!ps_sweep_parse_json_value(row, &o) || !o ||
        !json_object_is_type(o, json_type_object)) {
      if (o)
        json_object_put(o);
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_SYNTAX,
                  "%s: line %u is not a JSON object: not a file podsim sweep wrote", out->path,
                  line + 1);
      return FALSE;
    }
    GString *key = g_string_new(NULL);
    gboolean mine = TRUE;
    for (guint k = 0; k < sw->varies->len && mine; k++) {
      json_object *v = NULL;
      mine = json_object_object_get_ex(o, ((Vary *)sw->varies->pdata[k])->key, &v);
      g_autofree char *c = ps_sweep_canonical_json(v);
      g_string_append_printf(key, "%s%s", k ? "\x1f" : "", c);
    }
    json_object *err = NULL;
    gboolean failed = json_object_object_get_ex(o, "error", &err) && err != NULL;
    json_object_put(o);
    if (!mine)
      g_string_free(key, TRUE);
    else if (!finished_add(out, g_string_free(key, FALSE), failed, line + 1, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean read_rows(Output *out, const Sweep *sw, const char *text, size_t len,
                          size_t *complete, GError **error)
{
  if (out->columns)
    g_ptr_array_free(out->columns, TRUE);
  out->columns = NULL;
  g_hash_table_remove_all(out->finished);
  return out->format == FORMAT_CSV ? read_csv(out, sw, text, len, complete, error)
                                   : read_jsonl(out, sw, text, len, complete, error);
}

/* Reads what an earlier sweep left in the file, and notes (cut_at) a
 * last row an interrupted write cut short, to be dropped before the file
 * is written (output_open): reading changes nothing, so a refused file or
 * a dry run leaves it as it was.  A last row that lacks only its newline
 * (every field there) is whole: add_newline. */
gboolean ps_sweep_output_read(Output *out, const Sweep *sw, GError **error)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  GError *read_error = NULL;
  out->cut_at = -1;
  /* a device or a pipe (/dev/null, /dev/full) holds no earlier rows, and
   * reading one may never end */
  GStatBuf st;
  if (g_stat(out->path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return TRUE;
  if (!g_file_get_contents(out->path, &text, &len, &read_error)) {
    gboolean missing = g_error_matches(read_error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
    if (!missing)
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read: %s", out->path,
                  read_error->message);
    g_error_free(read_error);
    return missing;
  }
  size_t complete = 0;
  /* a CSV row's error cell is its last and empty when the point ran: a
   * row cut inside a failed point's message still has every field */
  gboolean ends_whole = len > 0 && (out->format != FORMAT_CSV || text[len - 1] == ',');
  if (ends_whole && text[len - 1] != '\n') {
    g_autofree char *ended = g_strdup_printf("%s\n", text);
    if (strlen(ended) == len + 1 && read_rows(out, sw, ended, len + 1, &complete, NULL) &&
        complete == len + 1) {
      out->add_newline = TRUE;
      return TRUE;
    }
  }
  if (!read_rows(out, sw, text, len, &complete, error))
    return FALSE;
  if (complete < len)
    out->cut_at = (gint64)complete;
  return TRUE;
}

/* Opens the file to append rows, first dropping a last row cut short or
 * ending a whole one that lacks its newline. */
gboolean ps_sweep_output_open(Output *out, GError **error)
{
  if (out->cut_at >= 0) {
    if (truncate(out->path, (off_t)out->cut_at) != 0) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE,
                  "%s: cannot drop its cut last row: %s", out->path, g_strerror(errno));
      return FALSE;
    }
    fprintf(stderr, "podsim: sweep: %s: dropped a last row an interrupted sweep cut short\n",
            out->path);
  }
  if (!(out->f = fopen(out->path, "a"))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot open for writing: %s",
                out->path, g_strerror(errno));
    return FALSE;
  }
  if (out->add_newline && (fputc('\n', out->f) == EOF || fflush(out->f) != 0)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot write: %s", out->path,
                g_strerror(errno));
    fclose(out->f);
    out->f = NULL;
    return FALSE;
  }
  return TRUE;
}

static gboolean output_write(Output *out, const GString *line, GError **error)
{
  if (fwrite(line->str, 1, line->len, out->f) != line->len || fflush(out->f) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot write: %s",
                out->path, g_strerror(errno));
    return FALSE;
  }
  return TRUE;
}

/* The CSV header: the varied keys, the first point that ran's summary
 * fields, "error". */
gboolean ps_sweep_output_header(Output *out, const Sweep *sw, const Outcome *first, GError **error)
{
  out->columns = g_ptr_array_new_with_free_func(g_free);
  for (guint k = 0; k < sw->varies->len; k++)
    g_ptr_array_add(out->columns, g_strdup(((Vary *)sw->varies->pdata[k])->key));
  if (first && first->flat) {
    json_object_object_foreach(first->flat, k, v) {
      (void)v;
      g_ptr_array_add(out->columns, g_strdup(k));
    }
  }
  g_ptr_array_add(out->columns, g_strdup("error"));
  g_autoptr(GString) line = g_string_new(NULL);
  for (guint c = 0; c < out->columns->len; c++) {
    if (c)
      g_string_append_c(line, ',');
    csv_cell(line, out->columns->pdata[c]);
  }
  g_string_append_c(line, '\n');
  return output_write(out, line, error);
}

/* A list of strings (collective_on_core) as its words, space-separated,
 * so that the cell holds no comma (cut and awk read the file as it is). */
static gboolean csv_words(GString *line, json_object *v)
{
  if (!json_object_is_type(v, json_type_array))
    return FALSE;
  g_autoptr(GString) words = g_string_new(NULL);
  for (size_t i = 0; i < json_object_array_length(v); i++) {
    json_object *x = json_object_array_get_idx(v, i);
    if (!json_object_is_type(x, json_type_string))
      return FALSE;
    g_string_append_printf(words, "%s%s", i ? " " : "", json_object_get_string(x));
  }
  csv_cell(line, words->str);
  return TRUE;
}

static void csv_value(GString *line, json_object *v)
{
  if (!v)
    return;
  if (json_object_is_type(v, json_type_string))
    csv_cell(line, json_object_get_string(v));
  else if (csv_words(line, v))
    return;
  else
    csv_cell(line, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
}

gboolean ps_sweep_output_row(Output *out, const Sweep *sw, const Outcome *o, GError **error)
{
  g_autoptr(GString) line = g_string_new(NULL);
  guint nv = sw->varies->len;
  if (out->format == FORMAT_JSONL) {
    json_object *row = json_object_new_object();
    for (guint k = 0; k < nv; k++) {
      const char *text = ps_sweep_point_value(sw, o->index, k);
      json_object *v = NULL;
      if (!ps_sweep_parse_json_value(text, &v))
        v = json_object_new_string(text);
      json_object_object_add(row, ((Vary *)sw->varies->pdata[k])->key, v);
    }
    if (o->flat) {
      json_object_object_foreach(o->flat, k, v)
        json_object_object_add(row, k, json_object_get(v));
    }
    json_object_object_add(row, "error", o->error ? json_object_new_string(o->error) : NULL);
    g_string_append(line, json_object_to_json_string_ext(row, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(row);
  } else {
    for (guint c = 0; c < out->columns->len; c++) {
      const char *name = out->columns->pdata[c];
      int k = ps_sweep_vary_index(sw, name);
      if (c)
        g_string_append_c(line, ',');
      if (c + 1 == out->columns->len)
        csv_cell(line, o->error ? o->error : "");
      else if (k >= 0)
        csv_cell(line, ps_sweep_point_value(sw, o->index, (guint)k));
      else if (o->flat)
        csv_value(line, json_object_object_get(o->flat, name));
    }
    if (o->flat && !out->warned_dropped) {
      GString *dropped = g_string_new(NULL);
      json_object_object_foreach(o->flat, k, v) {
        (void)v;
        gboolean found = FALSE;
        for (guint c = 0; c < out->columns->len && !found; c++)
          found = strcmp(out->columns->pdata[c], k) == 0;
        if (!found)
          g_string_append_printf(dropped, "%s%s", dropped->len ? ", " : "", k);
      }
      if (dropped->len) {
        g_autofree char *label = ps_sweep_point_label(sw, o->index);
        fprintf(stderr,
                "podsim: sweep: warning: %s: fields not in the header of %s are left out "
                "(%s); --format jsonl keeps every field of every point\n",
                label, out->path, dropped->str);
        out->warned_dropped = TRUE;
      }
      g_string_free(dropped, TRUE);
    }
  }
  g_string_append_c(line, '\n');
  return output_write(out, line, error);
}


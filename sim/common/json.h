/* json.h: typed, path-tracking reads from json-c trees.
 *
 * Every user-facing error produced here has the form
 *   FILE: PATH: REASON
 * where PATH is the dotted JSON path ("chip.hbm_bytes", "layers[3].units")
 * and the GError is in PS_INPUT_ERROR.  Invariant: a getter that returns
 * FALSE has set *error and left *out untouched. */
#ifndef PS_JSON_H
#define PS_JSON_H

#include "common.h"

#include <json-c/json.h>

/* Parses a file.  (transfer full) on success; NULL and a message naming the
 * file (and line for syntax errors) on failure. */
json_object *ps_json_load_file(const char *path, GError **error);
/* Parses text; `origin` names it in messages. */
json_object *ps_json_parse(const char *text, const char *origin, GError **error);

/* The JSON type of v as messages name it ("integer", "number", "string",
 * "array", ...).  (transfer none) */
const char *ps_json_type_name(json_object *v);

/* "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".  (transfer full) */
char *ps_json_path_join(const char *path, const char *key);
/* "layers" + 3 -> "layers[3]".  (transfer full) */
char *ps_json_path_index(const char *path, int index);

/* Fails with "unknown key 'x' (expected one of: a, b, c)" for any key of
 * obj not in the NULL-terminated `allowed`. */
gboolean ps_json_check_keys(json_object *obj, const char *file, const char *path,
                            const char *const *allowed, GError **error);

/* Fails unless obj is a JSON object ("must be an object, got array"). */
gboolean ps_json_expect_object(json_object *obj, const char *file, const char *path,
                               GError **error);

/* Getters.  If the key is absent: required -> error "missing required key";
 * not required -> *out keeps its default and TRUE is returned.  Numbers are
 * checked against [min, max] inclusive. */
gboolean ps_json_get_int(json_object *obj, const char *file, const char *path, const char *key,
                         gboolean required, int64_t min, int64_t max, int64_t *out,
                         GError **error);
gboolean ps_json_get_int32(json_object *obj, const char *file, const char *path,
                           const char *key, gboolean required, int min, int max, int *out,
                           GError **error);
/* Accepts a JSON number or, by the key's suffix, a string with units:
 * "_s" -> time ("1us", "2.5 ms"), "_Bps" -> bandwidth ("100GB/s", "16 GiB/s"),
 * "_bytes" -> size ("32GiB", "16 GB", "100M"; K/M/G are powers of 1000,
 * Ki/Mi/Gi of 1024, the B optional), "flops" -> rate ("123T", "45e12").
 * `min_exclusive`: when TRUE the value must be > min, else >= min. */
gboolean ps_json_get_double(json_object *obj, const char *file, const char *path,
                            const char *key, gboolean required, double min,
                            gboolean min_exclusive, double max, double *out, GError **error);
gboolean ps_json_get_bool(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, gboolean *out, GError **error);
/* *out is (transfer none), valid while obj lives. */
gboolean ps_json_get_string(json_object *obj, const char *file, const char *path,
                            const char *key, gboolean required, const char **out,
                            GError **error);
/* The string must be one of `choices` (NULL-terminated); *out is its index. */
gboolean ps_json_get_enum(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, const char *const *choices, int *out,
                          GError **error);

/* Parses a quantity with an SI or binary suffix for the unit kind implied
 * by `key` (see ps_json_get_double).  FALSE if `text` is not one. */
gboolean ps_parse_quantity(const char *key, const char *text, double *out);

/* Applies an override "a.b.c=value" to root: value is parsed as JSON if it
 * can be (numbers, true/false, quoted strings, objects), else taken as a
 * plain string.  Missing intermediate objects are created; the schema check
 * that follows reports keys that do not belong.  `origin` names the
 * override in messages ("--set"). */
gboolean ps_json_apply_override(json_object *root, const char *assignment, const char *origin,
                                GError **error);

#endif

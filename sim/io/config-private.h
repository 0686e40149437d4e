/* config-private.h: what config.c (experiments), config-faults.c (their
 * faults), lookup.c (the search path) and topology.c (topology files)
 * share: tree helpers, lookup, overrides, and the error helper whose
 * messages read "FILE: JSON.PATH: reason".  Not installed. */
#ifndef PS_CONFIG_PRIVATE_H
#define PS_CONFIG_PRIVATE_H

#include "io/config.h"
#include "common/json.h"

/* Largest torus side and chip count we accept (well past any real pod). */
#define MAX_DIM 4096
#define MAX_CHIPS (1 << 20)
#define GIB (1024.0 * 1024.0 * 1024.0)

json_object *ps_config__deep_copy(json_object *src);
gboolean ps_config__is_file(const char *path);
/* A JSON path as messages name it: "(root)" for the empty one. */
const char *ps_config__where(const char *path);
void ps_config__fail(GError **error, int code, const char *file, const char *path, const char *fmt,
                     ...) G_GNUC_PRINTF(5, 6);
char *ps_config__find_config(const char *kind, const char *name, const char *ref_file,
                         const char *ref_path, gboolean same_kind, GError **error);
void ps_config__merge_over(json_object *dst, json_object *src);
gboolean ps_config__get_object(json_object *obj, const char *file, const char *path, const char *key,
                           gboolean required, json_object **sub, GError **error);
json_object *ps_config__new_double(double d);
char *ps_config__override_key(const char *assignment);
gboolean ps_config__elem_int(json_object *v, int64_t *out);
double ps_config__gib(int64_t bytes);
json_object *ps_config__topology_tree_load(const char *file, GPtrArray *chain, GError **error);
json_object *ps_config__topology_to_json(const PsTopology *t, json_object *sources);
char *ps_config__name_from_file(const char *file);
gboolean ps_config__apply_overrides(json_object *root, const char *const *overrides,
                                const char *const *only, const char *const *skip,
                                GError **error);
/* The text input's keys (config-text.c): parse (o may be NULL: the
 * defaults), add them to the resolved "input" object (text only), tell
 * whether numerics can feed the model from the input (the default of
 * numerics.enabled), and check the input against the model (for text:
 * read the corpus, count its windows). */
gboolean ps_config__parse_text(json_object *o, const char *file, PsInputConfig *in,
                               GError **error);
void ps_config__text_to_json(const PsInputConfig *in, json_object *io);
gboolean ps_config__input_feeds(const PsInputConfig *in, const PsModel *m);
gboolean ps_config__check_input_model(PsExperiment *e, GError **error);
/* An experiment's "faults" (config-faults.c): parsed into e and checked
 * against the rest of e, and the resolved section (NULL when empty). */
gboolean ps_config__parse_faults(json_object *root, const char *file, PsExperiment *e,
                                 GError **error);
json_object *ps_config__faults_to_json(const PsFaultsConfig *fc);
json_object *ps_config__topology_merge_extends(json_object *obj, const char *file, const char *path,
                                           GPtrArray *chain, GError **error);

#endif

/* topology.c: topology files: "extends" inheritance between them (and
 * "slices" as a list naming each slice, which must all resolve to one), the
 * chip, host, torus and ICI sections with their checks, the slices and
 * the DCN between them, the derived figures (chips, hosts, devices of all
 * slices, per-device peak and HBM), and the resolved form that `podsim
 * describe` prints.
 *
 * Invariant: a PsTopology leaves this file only after all of its checks
 * have passed: positive sizes, dims and wrap of equal length, chips a
 * multiple of the chips per host (or a single partial host), host trays
 * (when given) that tile the torus, no more chips than the generation's
 * largest slice, narrow-type peaks no lower than bf16's, at least one
 * slice, and for several a DCN with a positive NIC bandwidth and an
 * oversubscription of at least 1. */
#include "io/config-private.h"

#include <math.h>
#include <string.h>

/* ========================================================== topology */

static const char *const topology_keys[] = {"name",  "generation", "description", "extends", "chip",
                                            "host",  "torus",      "ici",         "sources",
                                            "name_counts", "max_slice_chips", "slices", "dcn", NULL};
static const char *const dcn_keys[] = {"nic_bandwidth_Bps", "nic_latency_s", "hosts_per_leaf",
                                       "oversubscription", "hop_latency_s", NULL};
static const char *const name_counts_choices[] = {"chips", "cores", NULL};
static const char *const chip_keys[] = {"cores",
                                        "megacore",
                                        "mxus_per_core",
                                        "mxu_size",
                                        "peak_flops",
                                        "hbm_bytes",
                                        "hbm_bandwidth_Bps",
                                        "mxu_efficiency",
                                        "op_overhead_s",
                                        "vpu_flops",
                                        "on_chip_bandwidth_Bps",
                                        "int8_peak_flops",
                                        "fp8_peak_flops",
                                        "clock_factor",
                                        "p_state_clocks_ghz",
                                        "p_state",
                                        "reference_p_state",
                                        NULL};
static const char *const host_keys[] = {"chips",     "cpu_threads",     "pcie_bandwidth_Bps",
                                        "cpu_flops", "loop_overhead_s",
                                        "dcn_bandwidth_Bps", "tray", NULL};
static const char *const torus_keys[] = {"dims", "wrap", "twisted", NULL};
static const char *const ici_keys[] = {"bandwidth_Bps", "latency_s", "links_per_neighbor", NULL};

/* Resolves "extends" of the topology object obj found at file:path: the
 * named base (itself resolved) with obj's keys merged over it.  `chain`
 * holds the canonical files being resolved, to report cycles.  Returns a
 * new tree without "extends" (transfer full). */
/* Loads a topology file with its bases merged in.  (transfer full) */
json_object *ps_config__topology_tree_load(const char *file, GPtrArray *chain, GError **error)
{
  json_object *obj = ps_json_load_file(file, error);
  if (!obj)
    return NULL;
  if (!ps_json_expect_object(obj, file, "", error)) {
    json_object_put(obj);
    return NULL;
  }
  json_object *merged = ps_config__topology_merge_extends(obj, file, "", chain, error);
  json_object_put(obj);
  return merged;
}

/* The first path below `at` where the trees a and b differ, into `diff`
 * ("" when equal); the keys of a first, then those only b has. */
static gboolean first_diff(json_object *a, json_object *b, const char *at, GString *diff)
{
  if (json_object_equal(a, b))
    return FALSE;
  if (json_object_is_type(a, json_type_object) && json_object_is_type(b, json_type_object)) {
    json_object *pair[2] = {a, b};
    for (int k = 0; k < 2; k++) {
      json_object_object_foreach(pair[k], key, va) {
        json_object *vb = NULL;
        json_object_object_get_ex(pair[1 - k], key, &vb);
        g_autofree char *sub = ps_json_path_join(at, key);
        if ((!vb || k == 0) && first_diff(va, vb, sub, diff))
          return TRUE;
      }
    }
  }
  g_string_assign(diff, at);
  return TRUE;
}

/* The named slice's resolved tree without the keys that only name or
 * describe it (transfer full), or NULL. */
static json_object *slice_tree(const char *name, const char *file, const char *path,
                               GPtrArray *chain, GError **error)
{
  g_autofree char *found = ps_config__find_config("topologies", name, file, path, TRUE, error);
  if (!found)
    return NULL;
  json_object *tree = ps_config__topology_tree_load(found, chain, error);
  static const char *const naming[] = {"name", "description", "sources", NULL};
  for (int i = 0; tree && naming[i]; i++)
    json_object_object_del(tree, naming[i]);
  return tree;
}

/* "slices": ["tpu-v5e-256", "tpu-v5e-256"], a list naming each slice: they
 * must be one slice (the same figures once resolved), and the object
 * becomes {"extends": that slice, "slices": their count, ...}
 * (transfer full), or NULL naming the first slice that disagrees and the
 * first key where it does. */
static json_object *slices_list(json_object *obj, json_object *list, const char *file,
                                const char *path, GPtrArray *chain, GError **error)
{
  g_autofree char *sp = ps_json_path_join(path, "slices");
  size_t n = json_object_array_length(list);
  if (n < 1 || json_object_object_get_ex(obj, "extends", NULL)) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, sp,
                    n < 1 ? "an empty list names no slice; name at least one topology"
                          : "a list of slices names the slice itself: drop \"extends\", or "
                            "give \"slices\" as a count");
    return NULL;
  }
  json_object *first = NULL;
  const char *first_name = NULL;
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(list, i);
    g_autofree char *ep = g_strdup_printf("%s[%zu]", sp, i);
    if (!json_object_is_type(e, json_type_string)) {
      ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, ep, "must be a topology name");
      json_object_put(first);
      return NULL;
    }
    json_object *t = slice_tree(json_object_get_string(e), file, ep, chain, error);
    GString *diff = g_string_new(NULL);
    if (t && first && first_diff(first, t, "", diff))
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ep,
                      "'%s' is not the slice '%s' is (they differ at %s): the slices of a "
                      "multislice topology are copies of one; name one topology for every slice",
                      json_object_get_string(e), first_name, diff->str);
    gboolean ok = t && diff->len == 0;
    g_string_free(diff, TRUE);
    if (!ok || first) {
      json_object_put(t);
      if (!ok) {
        json_object_put(first);
        return NULL;
      }
      continue;
    }
    first = t;
    first_name = json_object_get_string(e);
  }
  json_object_put(first);
  json_object *copy = ps_config__deep_copy(obj);
  json_object_object_add(copy, "extends", json_object_new_string(first_name));
  json_object_object_add(copy, "slices", json_object_new_int((int)n));
  return copy;
}

json_object *ps_config__topology_merge_extends(json_object *obj, const char *file, const char *path,
                                           GPtrArray *chain, GError **error)
{
  json_object *ext = NULL, *list = NULL;
  if (json_object_object_get_ex(obj, "slices", &list) &&
      json_object_is_type(list, json_type_array)) {
    json_object *named = slices_list(obj, list, file, path, chain, error);
    if (!named)
      return NULL;
    json_object *merged = ps_config__topology_merge_extends(named, file, path, chain, error);
    json_object_put(named);
    return merged;
  }
  if (!json_object_object_get_ex(obj, "extends", &ext) || ext == NULL)
    return ps_config__deep_copy(obj);
  const char *base_name = NULL;
  if (!ps_json_get_string(obj, file, path, "extends", TRUE, &base_name, error))
    return NULL;
  g_autofree char *ext_path = ps_json_path_join(path, "extends");
  g_autofree char *base_file = ps_config__find_config("topologies", base_name, file, ext_path, TRUE, error);
  if (!base_file)
    return NULL;
  char *canon = g_canonicalize_filename(base_file, NULL);
  for (guint i = 0; i < chain->len; i++) {
    if (strcmp(chain->pdata[i], canon) == 0) {
      GString *cycle = g_string_new(NULL);
      for (guint j = i; j < chain->len; j++) {
        g_autofree char *b = g_path_get_basename(chain->pdata[j]);
        g_string_append_printf(cycle, "%s -> ", b);
      }
      g_autofree char *b = g_path_get_basename(canon);
      g_string_append(cycle, b);
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ext_path,
           "'%s' leads to a cycle of extends (%s); remove one of them", base_name, cycle->str);
      g_string_free(cycle, TRUE);
      g_free(canon);
      return NULL;
    }
  }
  g_ptr_array_add(chain, canon);
  json_object *base = ps_config__topology_tree_load(base_file, chain, error);
  g_ptr_array_remove_index(chain, chain->len - 1);
  if (!base)
    return NULL;
  json_object *mine = ps_config__deep_copy(obj);
  json_object_object_del(mine, "extends");
  ps_config__merge_over(base, mine);
  json_object_put(mine);
  return base;
}

/* True if the dotted `key` ("chip.peak_flops") names a member of root. */
static gboolean tree_has_path(json_object *root, const char *key)
{
  g_auto(GStrv) parts = g_strsplit(key, ".", -1);
  json_object *cur = root;
  for (int i = 0; parts[i]; i++) {
    json_object *next = NULL;
    if (!json_object_is_type(cur, json_type_object) || parts[i][0] == '\0' ||
        !json_object_object_get_ex(cur, parts[i], &next) || next == NULL)
      return FALSE;
    cur = next;
  }
  return TRUE;
}

static gboolean parse_sources(json_object *root, const char *file, const char *path,
                              PsTopology *t, GError **error)
{
  json_object *src = NULL;
  if (!ps_config__get_object(root, file, path, "sources", FALSE, &src, error))
    return FALSE;
  if (!src)
    return TRUE;
  g_autofree char *sp = ps_json_path_join(path, "sources");
  json_object_object_foreach(src, key, val) {
    g_autofree char *kp = ps_json_path_join(sp, key);
    if (!val || !json_object_is_type(val, json_type_string)) {
      ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, kp, "must be a string (a citation), got %s",
           val ? ps_json_type_name(val) : "null");
      return FALSE;
    }
    if (strcmp(key, "sources") == 0 || strncmp(key, "sources.", 8) == 0 ||
        !tree_has_path(root, key)) {
      ps_config__fail(error, PS_INPUT_ERROR_KEY, file, kp,
           "cites '%s', which is not a key of this topology (use a dotted path such as "
           "\"chip.peak_flops\")",
           key);
      return FALSE;
    }
  }
  t->sources = ps_config__deep_copy(src);
  return TRUE;
}

/* An optional int8 or fp8 peak: positive, and no lower than the bf16
 * peak (a narrower type never runs slower through the MXU). */
static gboolean parse_narrow_peak(json_object *c, const char *file, const char *p,
                                  const char *key, double bf16, double *out, GError **error)
{
  *out = 0;
  if (!ps_json_get_double(c, file, p, key, FALSE, 0, TRUE, INFINITY, out, error))
    return FALSE;
  if (*out > 0 && *out < bf16) {
    g_autofree char *kp = ps_json_path_join(p, key);
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp,
                    "%g is below chip.peak_flops (%g): a narrower type never runs slower "
                    "through the MXU; give at least the bf16 peak or leave the key out",
                    *out, bf16);
    return FALSE;
  }
  return TRUE;
}

/* A chip's DVFS power states: with "p_state_clocks_ghz" (each state's
 * core clock, GHz), "p_state" (the state a run sets) and
 * "reference_p_state" (the state its figures were measured at) are
 * required and clock_factor is their clocks' ratio, so "clock_factor"
 * itself is refused; without the table neither state key may be given. */
static gboolean parse_p_states(json_object *c, const char *file, const char *p, PsTopology *t,
                               GError **error)
{
  json_object *arr = NULL;
  t->n_p_states = 0;
  t->p_state = t->reference_p_state = 0;
  if (!json_object_object_get_ex(c, "p_state_clocks_ghz", &arr) || !arr) {
    const char *const keys[] = {"p_state", "reference_p_state"};
    for (int i = 0; i < 2; i++)
      if (json_object_object_get_ex(c, keys[i], NULL)) {
        g_autofree char *kp = ps_json_path_join(p, keys[i]);
        ps_config__fail(error, PS_INPUT_ERROR_KEY, file, kp,
                        "needs chip.p_state_clocks_ghz, the core clock of each power state; "
                        "this chip has none (set chip.clock_factor for a slower clock)");
        return FALSE;
      }
    return TRUE;
  }
  g_autofree char *ap = ps_json_path_join(p, "p_state_clocks_ghz");
  if (json_object_object_get_ex(c, "clock_factor", NULL)) {
    g_autofree char *kp = ps_json_path_join(p, "clock_factor");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp,
                    "this chip sets its clock by power state: set chip.p_state instead "
                    "(chip.p_state_clocks_ghz gives each state's clock)");
    return FALSE;
  }
  if (!json_object_is_type(arr, json_type_array)) {
    ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, ap,
                    "must be an array of 1 to %d clocks in GHz, got %s", PS_MAX_P_STATES,
                    ps_json_type_name(arr));
    return FALSE;
  }
  size_t n = json_object_array_length(arr);
  if (n < 1 || n > PS_MAX_P_STATES) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ap,
                    "must list 1 to %d power states' clocks, got %zu", PS_MAX_P_STATES, n);
    return FALSE;
  }
  for (size_t i = 0; i < n; i++) {
    json_object *v = json_object_array_get_idx(arr, i);
    g_autofree char *ep = ps_json_path_index(ap, (int)i);
    if (!v || !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))) {
      ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, ep, "must be a clock in GHz, got %s",
                      v ? ps_json_type_name(v) : "null");
      return FALSE;
    }
    double ghz = json_object_get_double(v);
    if (!(ghz > 0 && ghz <= 100)) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ep,
                      "must be a clock in GHz, above 0 and at most 100, got %g", ghz);
      return FALSE;
    }
    t->p_state_clocks_ghz[i] = ghz;
  }
  t->n_p_states = (int)n;
  if (!ps_json_get_int32(c, file, p, "p_state", TRUE, 0, (int)n - 1, &t->p_state, error) ||
      !ps_json_get_int32(c, file, p, "reference_p_state", TRUE, 0, (int)n - 1,
                         &t->reference_p_state, error))
    return FALSE;
  t->clock_factor = t->p_state_clocks_ghz[t->p_state] / t->p_state_clocks_ghz[t->reference_p_state];
  return TRUE;
}

static gboolean parse_chip(json_object *root, const char *file, const char *path, PsTopology *t,
                           GError **error)
{
  json_object *c;
  if (!ps_config__get_object(root, file, path, "chip", TRUE, &c, error))
    return FALSE;
  g_autofree char *p = ps_json_path_join(path, "chip");
  int64_t hbm = 0;
  t->megacore = FALSE;
  t->mxu_size = 128;
  t->mxu_efficiency = 1.0;
  t->op_overhead_s = 1e-6;
  t->vpu_flops = 0; /* absent: element-wise work bound by HBM only */
  t->clock_factor = 1.0;
  if (!ps_json_check_keys(c, file, p, chip_keys, error) ||
      !ps_json_get_int32(c, file, p, "cores", TRUE, 1, 1024, &t->cores_per_chip, error) ||
      !ps_json_get_bool(c, file, p, "megacore", FALSE, &t->megacore, error) ||
      !ps_json_get_int32(c, file, p, "mxus_per_core", TRUE, 1, 1024, &t->mxus_per_core,
                         error) ||
      !ps_json_get_int32(c, file, p, "mxu_size", FALSE, 1, 65536, &t->mxu_size, error) ||
      !ps_json_get_double(c, file, p, "peak_flops", TRUE, 0, TRUE, INFINITY, &t->peak_flops,
                          error) ||
      !ps_json_get_int(c, file, p, "hbm_bytes", TRUE, 1, INT64_MAX, &hbm, error) ||
      !ps_json_get_double(c, file, p, "hbm_bandwidth_Bps", TRUE, 0, TRUE, INFINITY,
                          &t->hbm_bandwidth_Bps, error) ||
      !ps_json_get_double(c, file, p, "mxu_efficiency", FALSE, 0, TRUE, 1.0,
                          &t->mxu_efficiency, error) ||
      !ps_json_get_double(c, file, p, "op_overhead_s", FALSE, 0, FALSE, INFINITY,
                          &t->op_overhead_s, error) ||
      !ps_json_get_double(c, file, p, "vpu_flops", FALSE, 0, FALSE, INFINITY, &t->vpu_flops,
                          error) ||
      !ps_json_get_double(c, file, p, "clock_factor", FALSE, 0, TRUE, 2.0, &t->clock_factor,
                          error) ||
      !parse_p_states(c, file, p, t, error) ||
      !ps_json_get_double(c, file, p, "on_chip_bandwidth_Bps", TRUE, 0, TRUE, INFINITY,
                          &t->on_chip_bandwidth_Bps, error) ||
      !parse_narrow_peak(c, file, p, "int8_peak_flops", t->peak_flops, &t->int8_peak_flops,
                         error) ||
      !parse_narrow_peak(c, file, p, "fp8_peak_flops", t->peak_flops, &t->fp8_peak_flops,
                         error))
    return FALSE;
  t->hbm_bytes = hbm;
  return TRUE;
}

static gboolean parse_host(json_object *root, const char *file, const char *path, PsTopology *t,
                           GError **error)
{
  json_object *h;
  if (!ps_config__get_object(root, file, path, "host", TRUE, &h, error))
    return FALSE;
  g_autofree char *p = ps_json_path_join(path, "host");
  return ps_json_check_keys(h, file, p, host_keys, error) &&
         ps_json_get_int32(h, file, p, "chips", TRUE, 1, MAX_CHIPS, &t->chips_per_host,
                           error) &&
         ps_json_get_int32(h, file, p, "cpu_threads", TRUE, 1, 1 << 16, &t->cpu_threads,
                           error) &&
         ps_json_get_double(h, file, p, "pcie_bandwidth_Bps", TRUE, 0, TRUE, INFINITY,
                            &t->pcie_bandwidth_Bps, error) &&
         ps_json_get_double(h, file, p, "cpu_flops", TRUE, 0, TRUE, INFINITY, &t->cpu_flops,
                            error) &&
         ps_json_get_double(h, file, p, "loop_overhead_s", TRUE, 0, FALSE, INFINITY,
                            &t->loop_overhead_s, error) &&
         ps_json_get_double(h, file, p, "dcn_bandwidth_Bps", FALSE, 0, TRUE, INFINITY,
                            &t->dcn_bandwidth_Bps, error);
}

static char *dims_text(const PsTopology *t)
{
  GString *s = g_string_new(NULL);
  for (int i = 0; i < t->ndims; i++)
    g_string_append_printf(s, "%s%d", i ? "x" : "", t->dims[i]);
  return g_string_free(s, FALSE);
}

/* Cloud TPU v4 twisted tori: k x k x 2k or k x 2k x 2k, in any order. */
static gboolean twistable_shape(const PsTopology *t)
{
  int d[3] = {t->dims[0], t->dims[1], t->dims[2]};
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (d[j] < d[i]) {
        int x = d[i];
        d[i] = d[j];
        d[j] = x;
      }
  return (d[0] == d[1] && d[2] == 2 * d[0]) || (d[1] == 2 * d[0] && d[2] == d[1]);
}

static gboolean parse_torus(json_object *root, const char *file, const char *path, PsTopology *t,
                            GError **error)
{
  json_object *tor;
  if (!ps_config__get_object(root, file, path, "torus", TRUE, &tor, error))
    return FALSE;
  g_autofree char *p = ps_json_path_join(path, "torus");
  if (!ps_json_check_keys(tor, file, p, torus_keys, error))
    return FALSE;

  g_autofree char *dp = ps_json_path_join(p, "dims");
  json_object *dims = NULL;
  if (!json_object_object_get_ex(tor, "dims", &dims) || !dims) {
    ps_config__fail(error, PS_INPUT_ERROR_KEY, file, p, "missing required key 'dims'");
    return FALSE;
  }
  if (!json_object_is_type(dims, json_type_array)) {
    ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, dp, "must be an array of 1 to 3 integers, got %s",
         ps_json_type_name(dims));
    return FALSE;
  }
  size_t n = json_object_array_length(dims);
  if (n < 1 || n > PS_MAX_DIMS) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, dp,
         "must have 1 to %d entries (a 1-D, 2-D or 3-D torus), got %zu", PS_MAX_DIMS, n);
    return FALSE;
  }
  t->ndims = (int)n;
  int64_t chips = 1;
  for (size_t i = 0; i < n; i++) {
    json_object *v = json_object_array_get_idx(dims, i);
    g_autofree char *ep = ps_json_path_index(dp, (int)i);
    int64_t x;
    if (!v || !ps_config__elem_int(v, &x)) {
      ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, ep, "must be an integer, got %s",
           v ? ps_json_type_name(v) : "null");
      return FALSE;
    }
    if (x < 1 || x > MAX_DIM) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ep,
           "must be between 1 and %d chips, got %" G_GINT64_FORMAT, MAX_DIM, x);
      return FALSE;
    }
    t->dims[i] = (int)x;
    chips *= x;
  }
  if (chips > MAX_CHIPS) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, dp,
         "%" G_GINT64_FORMAT " chips is more than the %d this simulator accepts", chips,
         MAX_CHIPS);
    return FALSE;
  }

  for (int i = 0; i < PS_MAX_DIMS; i++)
    t->wrap[i] = FALSE;
  json_object *wrap = NULL;
  if (json_object_object_get_ex(tor, "wrap", &wrap) && wrap) {
    g_autofree char *wp = ps_json_path_join(p, "wrap");
    if (!json_object_is_type(wrap, json_type_array)) {
      ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, wp,
           "must be an array of true/false, one per entry of torus.dims, got %s",
           ps_json_type_name(wrap));
      return FALSE;
    }
    size_t m = json_object_array_length(wrap);
    if (m != n) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, wp,
           "has %zu entries but torus.dims has %zu; give one true/false per dimension", m, n);
      return FALSE;
    }
    for (size_t i = 0; i < m; i++) {
      json_object *v = json_object_array_get_idx(wrap, i);
      if (!v || !json_object_is_type(v, json_type_boolean)) {
        g_autofree char *ep = ps_json_path_index(wp, (int)i);
        ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, ep, "must be true or false, got %s",
             v ? ps_json_type_name(v) : "null");
        return FALSE;
      }
      t->wrap[i] = json_object_get_boolean(v) ? TRUE : FALSE;
    }
  }

  t->twisted = FALSE;
  if (!ps_json_get_bool(tor, file, p, "twisted", FALSE, &t->twisted, error))
    return FALSE;
  if (t->twisted) {
    g_autofree char *tp = ps_json_path_join(p, "twisted");
    g_autofree char *shape = dims_text(t);
    gboolean all_wrap = t->ndims == 3 && t->wrap[0] && t->wrap[1] && t->wrap[2];
    if (t->ndims != 3 || !all_wrap || !twistable_shape(t)) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, tp,
           "a twisted torus needs a 3-D k x k x 2k or k x 2k x 2k shape with wrap-around on "
           "every axis (as Cloud TPU v4 offers), got %s%s; set torus.twisted=false",
           shape, all_wrap ? "" : " without full wrap-around");
      return FALSE;
    }
  }
  return TRUE;
}

/* host.tray (optional, after the torus): one extent >= 1 per torus
 * dimension, chips_per_host chips in all.  Whether it tiles the torus is
 * checked once a slice smaller than a host has been made one host. */
static gboolean parse_tray(json_object *root, const char *file, const char *path,
                           PsTopology *t, GError **error)
{
  json_object *h = NULL, *tray = NULL;
  json_object_object_get_ex(root, "host", &h);
  if (!json_object_object_get_ex(h, "tray", &tray) || !tray)
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, "host.tray");
  if (!json_object_is_type(tray, json_type_array) ||
      json_object_array_length(tray) != (size_t)t->ndims) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, p,
                    "must be an array of %d integers, the host's box of chips along each "
                    "entry of torus.dims (e.g. [2, 2, 1] for a 2x2x1 tray)",
                    t->ndims);
    return FALSE;
  }
  int64_t product = 1;
  for (int d = 0; d < t->ndims; d++) {
    json_object *v = json_object_array_get_idx(tray, d);
    g_autofree char *ep = ps_json_path_index(p, d);
    int64_t x;
    if (!v || !ps_config__elem_int(v, &x) || x < 1 || x > MAX_DIM) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, ep,
                      "must be an integer between 1 and %d chips", MAX_DIM);
      return FALSE;
    }
    t->host_tray[d] = (int)x;
    product *= x;
  }
  if (product != t->chips_per_host) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, p,
                    "holds %" G_GINT64_FORMAT " chips but host.chips is %d; make them agree",
                    product, t->chips_per_host);
    return FALSE;
  }
  return TRUE;
}

/* The trays tile the torus: each extent divides its dimension. */
static gboolean check_tray_tiles(const PsTopology *t, const char *file, const char *path,
                                 GError **error)
{
  for (int d = 0; d < t->ndims && t->host_tray[0] > 0; d++)
    if (t->dims[d] % t->host_tray[d] != 0) {
      g_autofree char *p = ps_json_path_join(path, "host.tray");
      g_autofree char *shape = dims_text(t);
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, p,
                      "trays of %d chips along %c do not tile torus.dims %s (%d chips along "
                      "%c); change host.tray or torus.dims",
                      t->host_tray[d], "xyz"[d], shape, t->dims[d], "xyz"[d]);
      return FALSE;
    }
  return TRUE;
}

static gboolean parse_ici(json_object *root, const char *file, const char *path, PsTopology *t,
                          GError **error)
{
  json_object *ici;
  if (!ps_config__get_object(root, file, path, "ici", TRUE, &ici, error))
    return FALSE;
  g_autofree char *p = ps_json_path_join(path, "ici");
  t->ici_links_per_neighbor = 1;
  return ps_json_check_keys(ici, file, p, ici_keys, error) &&
         ps_json_get_double(ici, file, p, "bandwidth_Bps", TRUE, 0, TRUE, INFINITY,
                            &t->ici_bandwidth_Bps, error) &&
         ps_json_get_double(ici, file, p, "latency_s", TRUE, 0, FALSE, INFINITY,
                            &t->ici_latency_s, error) &&
         ps_json_get_int32(ici, file, p, "links_per_neighbor", FALSE, 1, 64,
                           &t->ici_links_per_neighbor, error);
}

/* DCN defaults where the file gives none; each is an assumption, stated
 * with its reason in the "dcn" section of topologies/tpu-v5e.json. */
#define DCN_NIC_LATENCY_S 10e-6
#define DCN_HOSTS_PER_LEAF 32
#define DCN_HOP_LATENCY_S 1e-6

/* "slices" and "dcn": copies of the slice and the network between them.
 * The DCN's figures are read (and checked) whenever a "dcn" section is
 * given or slices > 1; a multislice topology needs a NIC bandwidth. */
static gboolean parse_dcn(json_object *root, const char *file, const char *path, PsTopology *t,
                          GError **error)
{
  t->slices = 1;
  if (!ps_json_get_int32(root, file, path, "slices", FALSE, 1, MAX_CHIPS, &t->slices, error))
    return FALSE;
  json_object *d = NULL;
  if ((int64_t)t->slices * ps_topology_slice_chips(t) > MAX_CHIPS) {
    g_autofree char *sp = ps_json_path_join(path, "slices");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, sp,
                    "%d slices of %d chips is more than the %d chips this simulator accepts",
                    t->slices, ps_topology_slice_chips(t), MAX_CHIPS);
    return FALSE;
  }
  if (!ps_config__get_object(root, file, path, "dcn", FALSE, &d, error))
    return FALSE;
  t->dcn.nic_bandwidth_Bps = t->dcn_bandwidth_Bps;
  t->dcn.nic_latency_s = DCN_NIC_LATENCY_S;
  t->dcn.hosts_per_leaf = DCN_HOSTS_PER_LEAF;
  t->dcn.oversubscription = 1.0;
  t->dcn.hop_latency_s = DCN_HOP_LATENCY_S;
  g_autofree char *p = ps_json_path_join(path, "dcn");
  if (d && (!ps_json_check_keys(d, file, p, dcn_keys, error) ||
            !ps_json_get_double(d, file, p, "nic_bandwidth_Bps", FALSE, 0, TRUE, INFINITY,
                                &t->dcn.nic_bandwidth_Bps, error) ||
            !ps_json_get_double(d, file, p, "nic_latency_s", FALSE, 0, FALSE, INFINITY,
                                &t->dcn.nic_latency_s, error) ||
            !ps_json_get_int32(d, file, p, "hosts_per_leaf", FALSE, 1, MAX_CHIPS,
                               &t->dcn.hosts_per_leaf, error) ||
            !ps_json_get_double(d, file, p, "oversubscription", FALSE, 1, FALSE, INFINITY,
                                &t->dcn.oversubscription, error) ||
            !ps_json_get_double(d, file, p, "hop_latency_s", FALSE, 0, FALSE, INFINITY,
                                &t->dcn.hop_latency_s, error)))
    return FALSE;
  if (t->slices > 1 && !(t->dcn.nic_bandwidth_Bps > 0)) {
    g_autofree char *np = ps_json_path_join(p, "nic_bandwidth_Bps");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, np,
                    "%d slices need a data-center network: give dcn.nic_bandwidth_Bps (or "
                    "host.dcn_bandwidth_Bps), each host's NIC bandwidth one way, > 0",
                    t->slices);
    return FALSE;
  }
  return TRUE;
}

/* The name a file gives when it has no "name": its basename without
 * ".json".  (transfer full) */
char *ps_config__name_from_file(const char *file)
{
  char *base = g_path_get_basename(file);
  if (g_str_has_suffix(base, ".json"))
    base[strlen(base) - 5] = '\0';
  return base;
}

/* "name_counts" and "max_slice_chips": what a slice name's number counts,
 * and the largest slice, which the torus may not exceed. */
static gboolean parse_generation_facts(json_object *root, const char *file, const char *path,
                                       PsTopology *t, GError **error)
{
  int counts = -1;
  if (!ps_json_get_enum(root, file, path, "name_counts", FALSE, name_counts_choices, &counts,
                        error) ||
      !ps_json_get_int32(root, file, path, "max_slice_chips", FALSE, 1, MAX_CHIPS,
                         &t->max_slice_chips, error))
    return FALSE;
  t->name_counts = g_strdup(counts >= 0 ? name_counts_choices[counts] : "");
  int chips = ps_topology_slice_chips(t);
  if (t->max_slice_chips > 0 && chips > t->max_slice_chips) {
    g_autofree char *mp = ps_json_path_join(path, "max_slice_chips");
    g_autofree char *shape = dims_text(t);
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, mp,
                    "the slice's %d chips (torus.dims %s) are more than this generation's "
                    "largest slice of %d; use several slices, or raise max_slice_chips for a "
                    "what-if",
                    chips, shape, t->max_slice_chips);
    return FALSE;
  }
  return TRUE;
}

static PsTopology *topology_parse(json_object *root, const char *file, const char *path,
                                  GError **error)
{
  if (!ps_json_check_keys(root, file, path, topology_keys, error))
    return NULL;
  PsTopology *t = g_new0(PsTopology, 1);
  const char *name = NULL, *gen = NULL, *desc = NULL;
  if (!ps_json_get_string(root, file, path, "name", FALSE, &name, error) ||
      !ps_json_get_string(root, file, path, "generation", FALSE, &gen, error) ||
      !ps_json_get_string(root, file, path, "description", FALSE, &desc, error))
    goto fail;
  t->file = g_strdup(file);
  t->name = name ? g_strdup(name) : (path && *path) ? g_strdup("inline") : ps_config__name_from_file(file);
  t->generation = g_strdup(gen ? gen : "");
  t->description = g_strdup(desc ? desc : "");
  if (!parse_chip(root, file, path, t, error) || !parse_host(root, file, path, t, error) ||
      !parse_torus(root, file, path, t, error) || !parse_ici(root, file, path, t, error) ||
      !parse_sources(root, file, path, t, error) ||
      !parse_generation_facts(root, file, path, t, error) ||
      !parse_tray(root, file, path, t, error) || !parse_dcn(root, file, path, t, error))
    goto fail;

  int chips = ps_topology_slice_chips(t);
  if (chips < t->chips_per_host) {
    /* A slice smaller than a host: one host with just these chips. */
    t->chips_per_host = chips;
    for (int d = 0; d < t->ndims && t->host_tray[0] > 0; d++)
      t->host_tray[d] = t->dims[d];
  } else if (chips % t->chips_per_host != 0) {
    g_autofree char *hp = ps_json_path_join(path, "host.chips");
    g_autofree char *shape = dims_text(t);
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, hp,
         "the slice's %d chips (torus.dims %s) are not divisible by host.chips = %d; change "
         "torus.dims or host.chips",
         chips, shape, t->chips_per_host);
    goto fail;
  }
  if (!check_tray_tiles(t, file, path, error))
    goto fail;
  return t;
fail:
  ps_topology_free(t);
  return NULL;
}

PsTopology *ps_topology_from_json(json_object *obj, const char *file, const char *path,
                                  GError **error)
{
  g_return_val_if_fail(obj != NULL && file != NULL, NULL);
  if (!ps_json_expect_object(obj, file, path, error))
    return NULL;
  g_autoptr(GPtrArray) chain = g_ptr_array_new_with_free_func(g_free);
  if (!(path && *path) && ps_config__is_file(file))
    g_ptr_array_add(chain, g_canonicalize_filename(file, NULL));
  json_object *merged = ps_config__topology_merge_extends(obj, file, path, chain, error);
  if (!merged)
    return NULL;
  PsTopology *t = topology_parse(merged, file, path, error);
  json_object_put(merged);
  return t;
}

/* Applies NULL-terminated overrides to root.  Those whose key is listed
 * in `only` (or all, when only is NULL) and not in `skip`. */
gboolean ps_config__apply_overrides(json_object *root, const char *const *overrides,
                                const char *const *only, const char *const *skip,
                                GError **error)
{
  if (!overrides)
    return TRUE;
  for (const char *const *o = overrides; *o; o++) {
    g_autofree char *key = ps_config__override_key(*o);
    if (only && !g_strv_contains(only, key))
      continue;
    if (skip && g_strv_contains(skip, key))
      continue;
    if (!ps_json_apply_override(root, *o, "--set", error))
      return FALSE;
  }
  return TRUE;
}

PsTopology *ps_topology_load(const char *name_or_path, const char *const *overrides,
                             GError **error)
{
  g_return_val_if_fail(name_or_path != NULL, NULL);
  g_autofree char *file = ps_config_find("topologies", name_or_path, error);
  if (!file)
    return NULL;
  g_autoptr(GPtrArray) chain = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(chain, g_canonicalize_filename(file, NULL));
  json_object *tree = ps_config__topology_tree_load(file, chain, error);
  if (!tree)
    return NULL;
  PsTopology *t = NULL;
  if (ps_config__apply_overrides(tree, overrides, NULL, NULL, error))
    t = topology_parse(tree, file, "", error);
  json_object_put(tree);
  return t;
}

void ps_topology_free(PsTopology *t)
{
  if (!t)
    return;
  g_free(t->name);
  g_free(t->file);
  g_free(t->generation);
  g_free(t->description);
  g_free(t->name_counts);
  if (t->sources)
    json_object_put(t->sources);
  g_free(t);
}

int ps_topology_slice_chips(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL, 0);
  int n = 1;
  for (int i = 0; i < t->ndims; i++)
    n *= t->dims[i];
  return n;
}

int ps_topology_chips(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL, 0);
  return ps_topology_slice_chips(t) * (t->slices > 1 ? t->slices : 1);
}

int ps_topology_hosts(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL && t->chips_per_host > 0, 0);
  return ps_topology_chips(t) / t->chips_per_host;
}

char *ps_topology_clock_text(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL, NULL);
  if (t->n_p_states <= 0)
    return g_strdup("");
  return g_strdup_printf(", DVFS p-state %d (%g GHz)", t->p_state,
                         t->p_state_clocks_ghz[t->p_state]);
}

int ps_topology_devices_per_chip(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL, 0);
  return t->megacore ? 1 : t->cores_per_chip;
}

int ps_topology_devices(const PsTopology *t)
{
  return ps_topology_chips(t) * ps_topology_devices_per_chip(t);
}

double ps_topology_device_peak_flops(const PsTopology *t)
{
  return t->peak_flops / ps_topology_devices_per_chip(t);
}

double ps_topology_device_hbm_bandwidth(const PsTopology *t)
{
  return t->hbm_bandwidth_Bps / ps_topology_devices_per_chip(t);
}

int64_t ps_topology_device_hbm_bytes(const PsTopology *t)
{
  return t->hbm_bytes / ps_topology_devices_per_chip(t);
}

/* The topology as a loadable JSON object, every default filled in;
 * `sources` (may be NULL) is copied.  (transfer full) */
json_object *ps_config__topology_to_json(const PsTopology *t, json_object *sources)
{
  json_object *o = json_object_new_object();
  json_object_object_add(o, "name", json_object_new_string(t->name));
  json_object_object_add(o, "generation", json_object_new_string(t->generation));
  json_object_object_add(o, "description", json_object_new_string(t->description));
  if (t->name_counts && *t->name_counts)
    json_object_object_add(o, "name_counts", json_object_new_string(t->name_counts));
  if (t->max_slice_chips > 0)
    json_object_object_add(o, "max_slice_chips", json_object_new_int(t->max_slice_chips));

  json_object *c = json_object_new_object();
  json_object_object_add(c, "cores", json_object_new_int(t->cores_per_chip));
  json_object_object_add(c, "megacore", json_object_new_boolean(t->megacore));
  json_object_object_add(c, "mxus_per_core", json_object_new_int(t->mxus_per_core));
  json_object_object_add(c, "mxu_size", json_object_new_int(t->mxu_size));
  json_object_object_add(c, "peak_flops", ps_config__new_double(t->peak_flops));
  json_object_object_add(c, "hbm_bytes", json_object_new_int64(t->hbm_bytes));
  json_object_object_add(c, "hbm_bandwidth_Bps", ps_config__new_double(t->hbm_bandwidth_Bps));
  json_object_object_add(c, "mxu_efficiency", ps_config__new_double(t->mxu_efficiency));
  json_object_object_add(c, "op_overhead_s", ps_config__new_double(t->op_overhead_s));
  json_object_object_add(c, "vpu_flops", ps_config__new_double(t->vpu_flops));
  if (t->n_p_states > 0) {
    json_object *clocks = json_object_new_array();
    for (int i = 0; i < t->n_p_states; i++)
      json_object_array_add(clocks, ps_config__new_double(t->p_state_clocks_ghz[i]));
    json_object_object_add(c, "p_state_clocks_ghz", clocks);
    json_object_object_add(c, "p_state", json_object_new_int(t->p_state));
    json_object_object_add(c, "reference_p_state", json_object_new_int(t->reference_p_state));
  } else {
    json_object_object_add(c, "clock_factor", ps_config__new_double(t->clock_factor));
  }
  json_object_object_add(c, "on_chip_bandwidth_Bps",
                         ps_config__new_double(t->on_chip_bandwidth_Bps));
  if (t->int8_peak_flops > 0)
    json_object_object_add(c, "int8_peak_flops", ps_config__new_double(t->int8_peak_flops));
  if (t->fp8_peak_flops > 0)
    json_object_object_add(c, "fp8_peak_flops", ps_config__new_double(t->fp8_peak_flops));
  json_object_object_add(o, "chip", c);

  json_object *h = json_object_new_object();
  json_object_object_add(h, "chips", json_object_new_int(t->chips_per_host));
  json_object_object_add(h, "cpu_threads", json_object_new_int(t->cpu_threads));
  json_object_object_add(h, "pcie_bandwidth_Bps", ps_config__new_double(t->pcie_bandwidth_Bps));
  json_object_object_add(h, "cpu_flops", ps_config__new_double(t->cpu_flops));
  json_object_object_add(h, "loop_overhead_s", ps_config__new_double(t->loop_overhead_s));
  if (t->dcn_bandwidth_Bps > 0)
    json_object_object_add(h, "dcn_bandwidth_Bps", ps_config__new_double(t->dcn_bandwidth_Bps));
  if (t->host_tray[0] > 0) {
    json_object *tray = json_object_new_array();
    for (int i = 0; i < t->ndims; i++)
      json_object_array_add(tray, json_object_new_int(t->host_tray[i]));
    json_object_object_add(h, "tray", tray);
  }
  json_object_object_add(o, "host", h);

  json_object *tor = json_object_new_object();
  json_object *dims = json_object_new_array();
  json_object *wrap = json_object_new_array();
  for (int i = 0; i < t->ndims; i++) {
    json_object_array_add(dims, json_object_new_int(t->dims[i]));
    json_object_array_add(wrap, json_object_new_boolean(t->wrap[i]));
  }
  json_object_object_add(tor, "dims", dims);
  json_object_object_add(tor, "wrap", wrap);
  json_object_object_add(tor, "twisted", json_object_new_boolean(t->twisted));
  json_object_object_add(o, "torus", tor);

  json_object *ici = json_object_new_object();
  json_object_object_add(ici, "bandwidth_Bps", ps_config__new_double(t->ici_bandwidth_Bps));
  json_object_object_add(ici, "latency_s", ps_config__new_double(t->ici_latency_s));
  json_object_object_add(ici, "links_per_neighbor",
                         json_object_new_int(t->ici_links_per_neighbor));
  json_object_object_add(o, "ici", ici);

  if (t->slices > 1)
    json_object_object_add(o, "slices", json_object_new_int(t->slices));
  /* the network between slices, also on one slice where the file gives it
   * (its sources cite it, and --set slices=S uses it) */
  if (t->slices > 1 || t->dcn.nic_bandwidth_Bps > 0) {
    json_object *d = json_object_new_object();
    json_object_object_add(d, "nic_bandwidth_Bps", ps_config__new_double(t->dcn.nic_bandwidth_Bps));
    json_object_object_add(d, "nic_latency_s", ps_config__new_double(t->dcn.nic_latency_s));
    json_object_object_add(d, "hosts_per_leaf", json_object_new_int(t->dcn.hosts_per_leaf));
    json_object_object_add(d, "oversubscription", ps_config__new_double(t->dcn.oversubscription));
    json_object_object_add(d, "hop_latency_s", ps_config__new_double(t->dcn.hop_latency_s));
    json_object_object_add(o, "dcn", d);
  }
  if (sources)
    json_object_object_add(o, "sources", ps_config__deep_copy(sources));
  return o;
}


json_object *ps_topology_to_json(const PsTopology *t)
{
  g_return_val_if_fail(t != NULL, NULL);
  return ps_config__topology_to_json(t, t->sources);
}

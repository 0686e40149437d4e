/* config-faults.c: an experiment's "faults" section (stragglers, slow
 * hosts or slices, degraded or failed ICI and DCN links): read and checked
 * against the run the rest of the experiment resolved to, and written back
 * into the resolved experiment.  The rest of the experiment is config.c's.
 *
 * Invariant: as config.c's, every failure is a PS_INPUT_ERROR whose message
 * reads "FILE: JSON.PATH: reason". */
#include "io/config-private.h"

#include <math.h>
#include <string.h>

/* "faults": {"stragglers": [{"device" | "slice", "slowdown", "delay_s"}],
 *            "slow_hosts": [{"host", "slowdown"}],
 *            "links": [{"chip", "dim", "dir", "both_ways", "bandwidth_factor",
 *                       "failed"},
 *                      {"dcn": "nic", "host", "dir": "up" | "down" | "both",
 *                       "bandwidth_factor"},
 *                      {"dcn": "leaf", "leaf", "dir", "bandwidth_factor"}]}
 * Checked against the run the rest of the experiment resolved to: a
 * straggler must be a device the run uses (or a slice of the topology), a
 * link's chip and dimension in range; a DCN link needs several slices and
 * a factor > 0.  Whether a link exists and failed links leave a way between every
 * two chips is geometry: ps_geometry_check_link_faults (hw/topology.h),
 * called by the run layer's loader (run/experiment.h). */
static const char *const faults_keys[] = {"stragglers", "slow_hosts", "links", NULL};
static const char *const straggler_keys[] = {"device", "slice", "slowdown", "delay_s", NULL};
static const char *const slow_host_keys[] = {"host", "slowdown", NULL};
static const char *const link_fault_keys[] = {"chip",      "dim",    "dir", "both_ways",
                                              "bandwidth_factor", "failed", NULL};
static const char *const link_dirs[] = {"+", "-", NULL};
static const char *const dcn_link_fault_keys[] = {"dcn",  "host", "leaf", "dir", "bandwidth_factor",
                                                  "failed", NULL};
static const char *const dcn_link_kinds[] = {"nic", "leaf", NULL};
static const char *const dcn_link_dirs[] = {"up", "down", "both", NULL};

/* Past these a slowdown or a delay is surely a typo; they also keep every
 * slowed op time far from overflowing picoseconds. */
#define MAX_SLOWDOWN 1e6
#define MAX_DELAY_S 3600.0
#define MAX_FAULTS (1 << 16)

static gboolean has_key(json_object *o, const char *key)
{
  json_object *v = NULL;
  return json_object_object_get_ex(o, key, &v) && v != NULL;
}

/* faults.<key> when it must be an array: *arr NULL when absent. */
static gboolean get_fault_list(json_object *o, const char *file, const char *key,
                               json_object **arr, GError **error)
{
  json_object *v = NULL;
  *arr = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !v)
    return TRUE;
  g_autofree char *p = ps_json_path_join("faults", key);
  if (!json_object_is_type(v, json_type_array)) {
    ps_config__fail(error, PS_INPUT_ERROR_TYPE, file, p,
                    "must be an array of objects (e.g. [{\"%s\": 0, ...}]), got %s",
                    strcmp(key, "links") == 0        ? "chip"
                    : strcmp(key, "slow_hosts") == 0 ? "host"
                                                     : "device",
                    ps_json_type_name(v));
    return FALSE;
  }
  if (json_object_array_length(v) > MAX_FAULTS) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, p, "has %zu entries, more than the %d accepted",
                    json_object_array_length(v), MAX_FAULTS);
    return FALSE;
  }
  *arr = v;
  return TRUE;
}

/* Entry faults.stragglers[i] (path p) names exactly one of "device" and
 * "slice": into s->device or s->slice, the other -1.  A slice must be one
 * of the topology's; neither key gives the error a missing device does. */
static gboolean parse_straggler_target(json_object *o, const char *file, const char *p,
                                       const PsTopology *t, PsStraggler *s, GError **error)
{
  s->device = -1;
  s->slice = -1;
  if (!has_key(o, "slice"))
    return ps_json_get_int32(o, file, p, "device", TRUE, G_MININT, G_MAXINT, &s->device, error);
  g_autofree char *sp = ps_json_path_join(p, "slice");
  if (has_key(o, "device")) {
    ps_config__fail(error, PS_INPUT_ERROR_KEY, file, sp,
                    "give one of device (one device) and slice (every device of a slice), "
                    "not both");
    return FALSE;
  }
  if (!ps_json_get_int32(o, file, p, "slice", TRUE, G_MININT, G_MAXINT, &s->slice, error))
    return FALSE;
  if (s->slice < 0 || s->slice >= t->slices) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, sp,
                    "slice %d is out of range: %s has %d slice%s (0..%d)", s->slice, t->name,
                    t->slices, t->slices == 1 ? "" : "s", t->slices - 1);
    return FALSE;
  }
  return TRUE;
}

/* FALSE when stragglers[i] names the device or slice an earlier entry does. */
static gboolean check_straggler_distinct(const PsFaultsConfig *fc, int i, const char *file,
                                         const char *p, GError **error)
{
  const PsStraggler *s = &fc->stragglers[i];
  gboolean slice = s->slice >= 0;
  g_autofree char *kp = ps_json_path_join(p, slice ? "slice" : "device");
  for (int j = 0; j < i; j++) {
    const PsStraggler *o = &fc->stragglers[j];
    if (slice ? o->slice != s->slice : o->slice >= 0 || o->device != s->device)
      continue;
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp,
                    "%s %d is already a straggler in faults.stragglers[%d]; merge the two "
                    "entries",
                    slice ? "slice" : "device", slice ? s->slice : s->device, j);
    return FALSE;
  }
  return TRUE;
}

static gboolean parse_stragglers(json_object *arr, const char *file, PsExperiment *e,
                                 GError **error)
{
  PsFaultsConfig *fc = &e->faults;
  int n = (int)json_object_array_length(arr);
  fc->stragglers = g_new0(PsStraggler, n ? n : 1);
  for (int i = 0; i < n; i++) {
    g_autofree char *p = ps_json_path_index("faults.stragglers", i);
    json_object *o = json_object_array_get_idx(arr, i);
    PsStraggler *s = &fc->stragglers[i];
    s->slowdown = 1.0;
    s->delay_s = 0.0;
    if (!ps_json_expect_object(o, file, p, error) ||
        !ps_json_check_keys(o, file, p, straggler_keys, error) ||
        !parse_straggler_target(o, file, p, e->topology, s, error) ||
        !ps_json_get_double(o, file, p, "slowdown", FALSE, 0, TRUE, MAX_SLOWDOWN, &s->slowdown,
                            error) ||
        !ps_json_get_double(o, file, p, "delay_s", FALSE, 0, FALSE, MAX_DELAY_S, &s->delay_s,
                            error))
      return FALSE;
    fc->n_stragglers++;
    if (!has_key(o, "slowdown") && !has_key(o, "delay_s")) {
      ps_config__fail(error, PS_INPUT_ERROR_KEY, file, p,
                      "give slowdown (a factor > 0 on the device's compute), delay_s (seconds "
                      "added to each of its steps), or both");
      return FALSE;
    }
    /* whether the run uses the device (or the slice) is checked with the
     * strategy (ps_experiment_load, run/experiment.h) */
    if (!check_straggler_distinct(fc, i, file, p, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean parse_slow_hosts(json_object *arr, const char *file, PsExperiment *e,
                                 GError **error)
{
  PsFaultsConfig *fc = &e->faults;
  int n = (int)json_object_array_length(arr);
  int hosts = ps_topology_hosts(e->topology);
  fc->slow_hosts = g_new0(PsSlowHost, n ? n : 1);
  for (int i = 0; i < n; i++) {
    g_autofree char *p = ps_json_path_index("faults.slow_hosts", i);
    json_object *o = json_object_array_get_idx(arr, i);
    PsSlowHost *h = &fc->slow_hosts[i];
    if (!ps_json_expect_object(o, file, p, error) ||
        !ps_json_check_keys(o, file, p, slow_host_keys, error) ||
        !ps_json_get_int32(o, file, p, "host", TRUE, G_MININT, G_MAXINT, &h->host, error) ||
        !ps_json_get_double(o, file, p, "slowdown", TRUE, 0, TRUE, MAX_SLOWDOWN, &h->slowdown,
                            error))
      return FALSE;
    fc->n_slow_hosts++;
    g_autofree char *hp = ps_json_path_join(p, "host");
    if (h->host < 0 || h->host >= hosts) {
      ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, hp,
                      "host %d is out of range: %s has %d host%s (0..%d)", h->host,
                      e->topology->name, hosts, hosts == 1 ? "" : "s", hosts - 1);
      return FALSE;
    }
    for (int j = 0; j < i; j++)
      if (fc->slow_hosts[j].host == h->host) {
        ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, hp,
                        "host %d is already slowed by faults.slow_hosts[%d]; merge the two "
                        "entries",
                        h->host, j);
        return FALSE;
      }
  }
  return TRUE;
}

/* Entry faults.links[i] (path p) naming "dcn" into f: a NIC ("host") or
 * a leaf switch ("leaf"), a direction and a bandwidth factor > 0 (a DCN
 * link has no other way round, so it may not fail).  Whether the host or
 * leaf exists is geometry (ps_geometry_check_link_faults). */
static gboolean parse_dcn_link_fault(json_object *o, const char *file, const char *p,
                                     const PsTopology *t, PsDcnLinkFault *f, GError **error)
{
  int kind = 0, dir = 0;
  f->index = -1;
  f->bandwidth_factor = 1.0;
  if (!ps_json_check_keys(o, file, p, dcn_link_fault_keys, error) ||
      !ps_json_get_enum(o, file, p, "dcn", TRUE, dcn_link_kinds, &kind, error))
    return FALSE;
  const char *what = dcn_link_kinds[kind][0] == 'n' ? "host" : "leaf";
  const char *other = what[0] == 'h' ? "leaf" : "host";
  g_autofree char *kp = ps_json_path_join(p, "dcn");
  if (t->slices < 2) {
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, kp,
                    "%s has one slice and so no data-center network; give the topology "
                    "\"slices\" > 1",
                    t->name);
    return FALSE;
  }
  if (has_key(o, other)) {
    g_autofree char *op = ps_json_path_join(p, other);
    ps_config__fail(error, PS_INPUT_ERROR_KEY, file, op, "a \"dcn\": \"%s\" link is named by %s",
                    dcn_link_kinds[kind], what);
    return FALSE;
  }
  if (!ps_json_get_int32(o, file, p, what, TRUE, G_MININT, G_MAXINT, &f->index, error) ||
      !ps_json_get_enum(o, file, p, "dir", TRUE, dcn_link_dirs, &dir, error) ||
      (!has_key(o, "failed") &&
       !ps_json_get_double(o, file, p, "bandwidth_factor", TRUE, 0, FALSE, 1.0,
                           &f->bandwidth_factor, error)))
    return FALSE;
  if (has_key(o, "failed") || f->bandwidth_factor == 0) {
    const char *key = has_key(o, "failed") ? "failed" : "bandwidth_factor";
    g_autofree char *fp = ps_json_path_join(p, key);
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, fp,
                    "a DCN link may not fail: the data-center network has no other way round "
                    "it; give a bandwidth_factor > 0 (at most 1)");
    return FALSE;
  }
  f->kind = kind == 0 ? PS_DCN_FAULT_NIC : PS_DCN_FAULT_LEAF;
  f->dir = dir == 1 ? -1 : 1;
  f->both_ways = dir == 2;
  return TRUE;
}

/* Entry faults.links[i] (path p) into f: its keys and types, bandwidth
 * factor or failure, chip and dimension in range.  Whether the link exists
 * and may fail is geometry (ps_geometry_check_link_faults). */
static gboolean parse_link_fault(json_object *o, const char *file, const char *p,
                                 const PsTopology *t, PsLinkFault *f, GError **error)
{
  int dir = 0;
  gboolean failed = FALSE;
  f->bandwidth_factor = 1.0;
  if (!ps_json_expect_object(o, file, p, error) ||
      !ps_json_check_keys(o, file, p, link_fault_keys, error) ||
      !ps_json_get_int32(o, file, p, "chip", TRUE, G_MININT, G_MAXINT, &f->chip, error) ||
      !ps_json_get_int32(o, file, p, "dim", TRUE, G_MININT, G_MAXINT, &f->dim, error) ||
      !ps_json_get_enum(o, file, p, "dir", TRUE, link_dirs, &dir, error) ||
      !ps_json_get_bool(o, file, p, "both_ways", FALSE, &f->both_ways, error) ||
      !ps_json_get_double(o, file, p, "bandwidth_factor", FALSE, 0, FALSE, 1.0,
                          &f->bandwidth_factor, error) ||
      !ps_json_get_bool(o, file, p, "failed", FALSE, &failed, error))
    return FALSE;
  f->dir = dir == 0 ? 1 : -1;
  if (!has_key(o, "bandwidth_factor") && !failed) {
    ps_config__fail(error, PS_INPUT_ERROR_KEY, file, p,
                    "give bandwidth_factor (0 to 1, multiplies the link's bandwidth; 0 "
                    "fails it) or \"failed\": true");
    return FALSE;
  }
  if (failed && has_key(o, "bandwidth_factor") && f->bandwidth_factor != 0) {
    g_autofree char *fp = ps_json_path_join(p, "failed");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, fp,
                    "true contradicts bandwidth_factor %g; give one of them", f->bandwidth_factor);
    return FALSE;
  }
  if (failed)
    f->bandwidth_factor = 0.0;
  int chips = ps_topology_chips(t);
  if (f->chip < 0 || f->chip >= chips) {
    g_autofree char *cp = ps_json_path_join(p, "chip");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, cp,
                    "chip %d is out of range: %s has %d chips (0..%d, numbered x fastest)",
                    f->chip, t->name, chips, chips - 1);
    return FALSE;
  }
  if (f->dim < 0 || f->dim >= t->ndims) {
    g_autofree char *dp = ps_json_path_join(p, "dim");
    ps_config__fail(error, PS_INPUT_ERROR_VALUE, file, dp,
                    "dimension %d is out of range: %s's torus has %d dimension%s (0 = x%s)",
                    f->dim, t->name, t->ndims, t->ndims == 1 ? "" : "s",
                    t->ndims == 3 ? ", 1 = y, 2 = z" : t->ndims == 2 ? ", 1 = y" : "");
    return FALSE;
  }
  return TRUE;
}

/* faults.links as parsed: whether each link exists, may fail and leaves
 * every chip a way to the others is geometry, checked by the run layer
 * (ps_geometry_check_link_faults, hw/topology.h). */
static gboolean parse_link_faults(json_object *arr, const char *file, PsExperiment *e,
                                  GError **error)
{
  PsFaultsConfig *fc = &e->faults;
  int n = (int)json_object_array_length(arr);
  fc->links = g_new0(PsLinkFault, n ? n : 1);
  fc->link_entries = g_new0(int, n ? n : 1);
  fc->dcn_links = g_new0(PsDcnLinkFault, n ? n : 1);
  for (int i = 0; i < n; i++) {
    g_autofree char *p = ps_json_path_index("faults.links", i);
    json_object *o = json_object_array_get_idx(arr, i);
    if (json_object_is_type(o, json_type_object) && has_key(o, "dcn")) {
      PsDcnLinkFault *f = &fc->dcn_links[fc->n_dcn_links];
      f->entry = i;
      if (!parse_dcn_link_fault(o, file, p, e->topology, f, error))
        return FALSE;
      fc->n_dcn_links++;
      continue;
    }
    if (!parse_link_fault(o, file, p, e->topology, &fc->links[fc->n_links], error))
      return FALSE;
    fc->link_entries[fc->n_links++] = i;
  }
  return TRUE;
}

gboolean ps_config__parse_faults(json_object *root, const char *file, PsExperiment *e,
                                 GError **error)
{
  json_object *o, *arr;
  if (!ps_config__get_object(root, file, "", "faults", FALSE, &o, error))
    return FALSE;
  if (!o)
    return TRUE;
  if (!ps_json_check_keys(o, file, "faults", faults_keys, error))
    return FALSE;
  if (!get_fault_list(o, file, "stragglers", &arr, error) ||
      (arr && !parse_stragglers(arr, file, e, error)) ||
      !get_fault_list(o, file, "slow_hosts", &arr, error) ||
      (arr && !parse_slow_hosts(arr, file, e, error)) ||
      !get_fault_list(o, file, "links", &arr, error) ||
      (arr && !parse_link_faults(arr, file, e, error)))
    return FALSE;
  return TRUE;
}

/* An ICI faults.links entry as loadable JSON.  (transfer full) */
static json_object *link_fault_to_json(const PsLinkFault *f)
{
  json_object *lo = json_object_new_object();
  json_object_object_add(lo, "chip", json_object_new_int(f->chip));
  json_object_object_add(lo, "dim", json_object_new_int(f->dim));
  json_object_object_add(lo, "dir", json_object_new_string(f->dir > 0 ? "+" : "-"));
  json_object_object_add(lo, "both_ways", json_object_new_boolean(f->both_ways));
  json_object_object_add(lo, "bandwidth_factor", ps_config__new_double(f->bandwidth_factor));
  return lo;
}

/* A DCN faults.links entry as loadable JSON.  (transfer full) */
static json_object *dcn_link_fault_to_json(const PsDcnLinkFault *f)
{
  gboolean nic = f->kind == PS_DCN_FAULT_NIC;
  json_object *lo = json_object_new_object();
  json_object_object_add(lo, "dcn", json_object_new_string(nic ? "nic" : "leaf"));
  json_object_object_add(lo, nic ? "host" : "leaf", json_object_new_int(f->index));
  json_object_object_add(lo, "dir", json_object_new_string(f->both_ways ? "both"
                                                           : f->dir > 0  ? "up"
                                                                         : "down"));
  json_object_object_add(lo, "bandwidth_factor", ps_config__new_double(f->bandwidth_factor));
  return lo;
}

/* faults.links in the file's order: the ICI and DCN entries merged back
 * by their entry numbers.  (transfer full) */
static json_object *link_faults_to_json(const PsFaultsConfig *fc)
{
  json_object *a = json_object_new_array();
  int i = 0, j = 0;
  for (int entry = 0; entry < fc->n_links + fc->n_dcn_links; entry++)
    if (j < fc->n_dcn_links && fc->dcn_links[j].entry == entry)
      json_object_array_add(a, dcn_link_fault_to_json(&fc->dcn_links[j++]));
    else
      json_object_array_add(a, link_fault_to_json(&fc->links[i++]));
  return a;
}

/* The faults as a loadable object (a failed link as bandwidth_factor 0),
 * or NULL when there are none.  (transfer full) */
json_object *ps_config__faults_to_json(const PsFaultsConfig *fc)
{
  if (fc->n_stragglers + fc->n_slow_hosts + fc->n_links + fc->n_dcn_links == 0)
    return NULL;
  json_object *o = json_object_new_object();
  if (fc->n_stragglers) {
    json_object *a = json_object_new_array();
    for (int i = 0; i < fc->n_stragglers; i++) {
      const PsStraggler *s = &fc->stragglers[i];
      json_object *so = json_object_new_object();
      if (s->slice >= 0)
        json_object_object_add(so, "slice", json_object_new_int(s->slice));
      else
        json_object_object_add(so, "device", json_object_new_int(s->device));
      json_object_object_add(so, "slowdown", ps_config__new_double(s->slowdown));
      json_object_object_add(so, "delay_s", ps_config__new_double(s->delay_s));
      json_object_array_add(a, so);
    }
    json_object_object_add(o, "stragglers", a);
  }
  if (fc->n_slow_hosts) {
    json_object *a = json_object_new_array();
    for (int i = 0; i < fc->n_slow_hosts; i++) {
      json_object *ho = json_object_new_object();
      json_object_object_add(ho, "host", json_object_new_int(fc->slow_hosts[i].host));
      json_object_object_add(ho, "slowdown", ps_config__new_double(fc->slow_hosts[i].slowdown));
      json_object_array_add(a, ho);
    }
    json_object_object_add(o, "slow_hosts", a);
  }
  if (fc->n_links + fc->n_dcn_links)
    json_object_object_add(o, "links", link_faults_to_json(fc));
  return o;
}


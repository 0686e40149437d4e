/* test_generations.c: the TPU generations shipped as topology files.
 *
 * Every shipped topology loads, and what podsim derives from it (chips,
 * hosts, devices, per-device peak and HBM) equals a plain computation from
 * its own fields; a slice's name N counts what its generation's
 * "name_counts" says; no slice is over its generation's largest; every
 * figure the file sets has a citation, and the calibration knobs say
 * whether they were fitted or assumed.  The per-link ICI and per-host DCN
 * figures equal the per-chip figures Cloud TPU publishes, divided out.
 * The new keys fail with an error naming them; `podsim list topologies`
 * counts as people do (tpu-v4-8 before tpu-v4-16) and `podsim describe
 * topology` prints the sources.  Data are found under $PODSIM_DATA_DIR
 * (the project root under `make test`), else ".". */
#include "io/config.h"
#include "support/cli.h"
#include "support/experiment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (INT64_C(1) << 30)

/* The number after the last '-' of a slice name, or 0 for a base file. */
static int slice_number(const char *name)
{
  const char *dash = strrchr(name, '-');
  if (!dash || !g_ascii_isdigit(dash[1]))
    return 0;
  return atoi(dash + 1);
}

static void check_derived(const PsTopology *t)
{
  int chips = 1;
  for (int d = 0; d < t->ndims; d++)
    chips *= t->dims[d];
  int per_chip = t->megacore ? 1 : t->cores_per_chip;
  g_assert_cmpint(ps_topology_chips(t), ==, chips);
  g_assert_cmpint(ps_topology_devices(t), ==, chips * per_chip);
  /* chips_per_host is the file's host.chips, or the whole slice when the
   * slice is smaller than a host */
  g_assert_cmpint(chips % t->chips_per_host, ==, 0);
  g_assert_cmpint(ps_topology_hosts(t), ==, chips / t->chips_per_host);
  g_assert_cmpfloat(ps_topology_device_peak_flops(t), ==, t->peak_flops / per_chip);
  g_assert_cmpint(ps_topology_device_hbm_bytes(t), ==, t->hbm_bytes / per_chip);
  if (t->max_slice_chips > 0)
    g_assert_cmpint(chips, <=, t->max_slice_chips);
  int n = slice_number(t->name);
  if (n > 0 && *t->name_counts)
    g_assert_cmpint(n, ==, strcmp(t->name_counts, "chips") == 0 ? chips
                                                                  : chips * t->cores_per_chip);
}

static void check_cited(const PsTopology *t, const char *key)
{
  json_object *cite = NULL;
  if (!t->sources || !json_object_object_get_ex(t->sources, key, &cite) ||
      json_object_get_string_len(cite) < 10)
    g_error("%s: no source for %s", t->name, key);
}

/* Every figure the file sets has a citation; the two calibration knobs
 * say which they are: fitted to a step time of tests/measured
 * ("calibration:"), measured directly by a published single-chip
 * benchmark of the knob itself ("measured:", v5e's and v7's matmul rates), or
 * assumed ("assumption:", which says what it borrows). */
static void check_sources(const PsTopology *t)
{
  static const char *const always[] = {
      "chip.cores",          "chip.mxus_per_core",     "chip.mxu_size",
      "chip.peak_flops",     "chip.hbm_bytes",         "chip.hbm_bandwidth_Bps",
      "chip.mxu_efficiency", "chip.op_overhead_s",     "chip.on_chip_bandwidth_Bps",
      "host.chips",          "host.cpu_threads",       "host.pcie_bandwidth_Bps",
      "host.cpu_flops",      "host.loop_overhead_s",   "torus.dims",
      "torus.wrap",          "ici.bandwidth_Bps",      "ici.latency_s",
      "ici.links_per_neighbor", NULL};
  for (const char *const *k = always; *k; k++)
    check_cited(t, *k);
  if (t->vpu_flops > 0)
    check_cited(t, "chip.vpu_flops");
  if (t->megacore || *t->name_counts)
    check_cited(t, "chip.megacore");
  if (*t->name_counts)
    check_cited(t, "name_counts");
  if (t->max_slice_chips > 0)
    check_cited(t, "max_slice_chips");
  if (t->int8_peak_flops > 0)
    check_cited(t, "chip.int8_peak_flops");
  if (t->fp8_peak_flops > 0)
    check_cited(t, "chip.fp8_peak_flops");
  if (t->dcn_bandwidth_Bps > 0)
    check_cited(t, "host.dcn_bandwidth_Bps");
  const char *knobs[] = {"chip.mxu_efficiency", "chip.op_overhead_s"};
  for (guint i = 0; i < G_N_ELEMENTS(knobs); i++) {
    json_object *cite = NULL;
    json_object_object_get_ex(t->sources, knobs[i], &cite);
    const char *s = json_object_get_string(cite);
    if (!g_str_has_prefix(s, "calibration:") && !g_str_has_prefix(s, "assumption:") &&
        !g_str_has_prefix(s, "measured:"))
      g_error("%s: %s is not 'calibration:', 'measured:' or 'assumption:': %s", t->name,
              knobs[i], s);
  }
}

static void test_every_topology(void)
{
  g_auto(GStrv) names = ps_config_list("topologies");
  guint generations = 0;
  for (guint i = 0; names[i]; i++) {
    PsTopology *t = topology_load(names[i], NULL);
    check_derived(t);
    check_sources(t);
    if (*t->name_counts && slice_number(t->name) == 0)
      generations++;
    ps_topology_free(t);
  }
  g_assert_cmpuint(generations, >=, 4); /* v5e, v5p, v6e, v7 */
}

/* Wrap-around as each generation's documentation gives it: 2-D pods of
 * 16 x 16 wrap an axis only at 16; 3-D pods of 4x4x4 cubes wrap every
 * axis of a slice of whole cubes and none below. */
static void test_wrap_rules(void)
{
  g_auto(GStrv) names = ps_config_list("topologies");
  guint checked = 0;
  for (guint i = 0; names[i]; i++) {
    PsTopology *t = topology_load(names[i], NULL);
    if (*t->name_counts && slice_number(t->name) > 0) {
      gboolean cube = TRUE;
      for (int d = 0; d < t->ndims; d++)
        cube = cube && t->dims[d] % 4 == 0;
      for (int d = 0; d < t->ndims; d++)
        g_assert_cmpint(t->wrap[d], ==, (t->ndims == 2 ? t->dims[d] == 16 : cube));
      g_assert_true(t->ndims == 2 ? t->max_slice_chips == 256 : t->max_slice_chips > 4096);
      checked++;
    }
    ps_topology_free(t);
  }
  g_assert_cmpuint(checked, >=, 28);
}

typedef struct {
  const char *name;
  int chips, hosts, devices;
  double peak, hbm_gib, mxu;
  double ici_bidi_per_chip; /* published, bytes/s both ways over all ports */
  int ports;
  double dcn_gbps_per_chip; /* published, Gb/s */
} Published;

/* The largest slice of each generation against figures computed by hand
 * from the Cloud TPU pages the files cite. */
static void test_published_figures(void)
{
  static const Published rows[] = {
      {"tpu-v5e-256", 256, 32, 256, 197e12, 16, 128, 400e9, 4, 25},
      {"tpu-v6e-256", 256, 32, 256, 918e12, 32, 256, 800e9, 4, 100},
      {"tpu-v5p-12288", 6144, 1536, 6144, 459e12, 95, 128, 1200e9, 6, 50},
      {"tpu7x-18432", 9216, 2304, 18432, 2307e12 / 2, 96, 256, 1200e9, 6, 100},
  };
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++) {
    const Published *r = &rows[i];
    PsTopology *t = topology_load(r->name, NULL);
    g_assert_cmpint(ps_topology_chips(t), ==, r->chips);
    g_assert_cmpint(ps_topology_hosts(t), ==, r->hosts);
    g_assert_cmpint(ps_topology_devices(t), ==, r->devices);
    g_assert_cmpfloat(ps_topology_device_peak_flops(t), ==, r->peak);
    g_assert_cmpint(ps_topology_device_hbm_bytes(t), ==, (int64_t)(r->hbm_gib * GIB));
    g_assert_cmpint(t->mxu_size, ==, (int)r->mxu);
    /* one link, one way = per-chip bidirectional / ports / 2 */
    g_assert_cmpint(2 * t->ndims * t->ici_links_per_neighbor, ==, r->ports);
    g_assert_cmpfloat_with_epsilon(t->ici_bandwidth_Bps, r->ici_bidi_per_chip / r->ports / 2, 1);
    /* a host's NIC = per-chip Gb/s x chips per host / 8 bits */
    g_assert_cmpfloat_with_epsilon(t->dcn_bandwidth_Bps,
                                   r->dcn_gbps_per_chip * 1e9 * t->chips_per_host / 8, 1);
    ps_topology_free(t);
  }
}

typedef struct {
  const char *topology;
  const char *set;
  const char *message; /* substring of the error */
} BadCase;

static const BadCase bad_cases[] = {
    {"tpu-v5e-256", "torus.dims=[32, 16]", "max_slice_chips: the slice's 512 chips"},
    {"tpu-v5p-8", "max_slice_chips=0", "max_slice_chips"},
    {"tpu-v6e-8", "chip.int8_peak_flops=1e12", "chip.int8_peak_flops: 1e+12 is below"},
    {"tpu7x-8", "chip.fp8_peak_flops=-1", "chip.fp8_peak_flops"},
    {"tpu-v5e-8", "host.dcn_bandwidth_Bps=0", "host.dcn_bandwidth_Bps"},
    {"tpu-v5e-8", "name_counts=wafers", "name_counts"},
};

static void test_bad_keys(void)
{
  for (guint i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
    const BadCase *c = &bad_cases[i];
    const char *const ov[] = {c->set, NULL};
    GError *err = NULL;
    PsTopology *t = ps_topology_load(c->topology, ov, &err);
    g_assert_null(t);
    g_assert_nonnull(err);
    if (!strstr(err->message, c->message))
      g_error("%s --set %s: '%s' lacks '%s'", c->topology, c->set, err->message, c->message);
    g_clear_error(&err);
    /* and through the command line: exit 2 with the message */
    g_autofree char *out = NULL, *errs = NULL;
    g_assert_cmpint(podsim_run(&out, &errs, "describe", "topology", c->topology, "--set", c->set,
                               NULL),
                    ==, 2);
    g_assert_nonnull(strstr(errs, c->message));
  }
}

static void test_cli_list_natural(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "list", "topologies", NULL), ==, 0);
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  /* (the generation bases head their groups: tests/test_cli.c's /cli/list) */
  const char *order[] = {"tpu-v2-8",  "tpu-v2-32",     "tpu-v2-128", "tpu-v4-8",  "tpu-v4-16",
                         "tpu-v4-8192", "tpu-v5e-4",   "tpu-v5e-256", "tpu-v5p-8", "tpu-v5p-12288",
                         "tpu-v6e-256", "tpu7x-8",     "tpu7x-18432"};
  int last = -1;
  for (guint i = 0; i < G_N_ELEMENTS(order); i++) {
    int at = -1;
    for (int j = 0; lines[j]; j++)
      if (strcmp(lines[j], order[i]) == 0)
        at = j;
    if (at <= last)
      g_error("'%s' is listed at %d, not after line %d", order[i], at, last);
    last = at;
  }
}

static void test_cli_describe_sources(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "describe", "topology", "tpu-v5p-12288", NULL), ==, 0);
  const char *want[] = {"6144 chips", "hosts 1536", "918.0 TOP/s int8", "DCN 25.0 GB/s per host",
                        "slice names count TensorCores; largest slice 6144 chips",
                        "figures and sources:", "chip.peak_flops = 4.59e+14", "[GC-v5p]",
                        "torus.dims = [16,16,24]"};
  for (guint i = 0; i < G_N_ELEMENTS(want); i++)
    if (!strstr(out, want[i]))
      g_error("describe topology tpu-v5p-12288 lacks '%s':\n%s", want[i], out);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim_init();
  g_test_add_func("/generations/every-topology/derived-and-sourced", test_every_topology);
  g_test_add_func("/generations/wrap-rules", test_wrap_rules);
  g_test_add_func("/generations/published-figures", test_published_figures);
  g_test_add_func("/generations/bad-keys", test_bad_keys);
  g_test_add_func("/generations/cli/list-natural-order", test_cli_list_natural);
  g_test_add_func("/generations/cli/describe-sources", test_cli_describe_sources);
  return g_test_run();
}

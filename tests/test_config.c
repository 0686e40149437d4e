/* test_config.c: topology and experiment configs.
 *
 * Every shipped topology loads and its derived numbers (chips, devices,
 * hosts, HBM per device, wrap-around) follow from its file and the slice's
 * name; "extends" merges deeply; --set overrides reach numbers, strings,
 * arrays and whole sub-configs; and a table of bad inputs (fixtures under
 * tests/data/bad/ and overrides) each fail with the right GError code and
 * a message naming the file, the JSON path and the reason.  When $PODSIM
 * names the CLI, the same bad inputs must make `podsim describe
 * experiment` exit 2 with that message on stderr.  Data are found under
 * $PODSIM_DATA_DIR (the project root under `make test`), else ".". */
#include "io/config.h"
#include "common/json.h"
#include "run/experiment.h"
#include "strategy/strategy-private.h"
#include "support/experiment.h"


#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The keys the replicate and pipeline strategies read (white box). */
static const PsReplicaConfig *replica_config(const PsExperiment *e)
{
  return e->strategy.config;
}

#define GIB (INT64_C(1) << 30)

static const char *data_dir(void)
{
  const char *d = g_getenv("PODSIM_DATA_DIR");
  return d && *d ? d : ".";
}

/* (transfer full) */
static char *data_path(const char *rel)
{
  return g_build_filename(data_dir(), rel, NULL);
}

#define GOOD_EXPERIMENT "tests/data/good/experiments/mlp-v3-8.json"
/* The same MLP without strategy.replicas, and the bucket keys set. */
#define WHAT_IF_EXPERIMENT "tests/data/good/experiments/mlp-what-if.json"

/* ------------------------------------------------------ topologies */

/* The slices Cloud TPU documents, named by TensorCore count. */
static const char *const expected_topologies[] = {
    "tpu-v2",      "tpu-v2-8",    "tpu-v2-32",   "tpu-v2-128",  "tpu-v2-256",  "tpu-v2-512",
    "tpu-v3",      "tpu-v3-8",    "tpu-v3-32",   "tpu-v3-64",   "tpu-v3-128",  "tpu-v3-256",
    "tpu-v3-512",  "tpu-v3-1024", "tpu-v3-2048", "tpu-v4",      "tpu-v4-8",    "tpu-v4-16",
    "tpu-v4-32",   "tpu-v4-64",   "tpu-v4-128",  "tpu-v4-256",  "tpu-v4-512",  "tpu-v4-1024",
    "tpu-v4-2048", "tpu-v4-4096", "tpu-v4-8192", NULL};

static void test_list_sorted_and_complete(void)
{
  g_auto(GStrv) names = ps_config_list("topologies");
  g_assert_nonnull(names);
  guint n = g_strv_length(names);
  for (guint i = 1; i < n; i++)
    g_assert_cmpint(strcmp(names[i - 1], names[i]), <, 0); /* sorted, unique */
  for (const char *const *e = expected_topologies; *e; e++) {
    if (!g_strv_contains((const char *const *)names, *e))
      g_error("topology %s is not listed", *e);
  }
  g_auto(GStrv) none = ps_config_list("no-such-kind");
  g_assert_nonnull(none);
  g_assert_cmpuint(g_strv_length(none), ==, 0);
}

/* Every listed topology loads; chips, hosts and devices agree with its
 * fields; a tpu-vN-M slice has M TensorCores and the wrap-around its
 * generation's documented rule gives. */
static void test_all_topologies_load(void)
{
  g_auto(GStrv) names = ps_config_list("topologies");
  guint slices = 0;
  for (guint i = 0; names[i]; i++) {
    PsTopology *t = topology_load(names[i], NULL);
    g_assert_cmpstr(t->name, ==, names[i]);
    g_assert_true(g_str_has_suffix(t->file, ".json"));
    int chips = 1;
    for (int d = 0; d < t->ndims; d++)
      chips *= t->dims[d];
    g_assert_cmpint(ps_topology_chips(t), ==, chips);
    g_assert_cmpint(ps_topology_hosts(t) * t->chips_per_host, ==, chips);
    g_assert_cmpint(ps_topology_devices(t), ==,
                    chips * (t->megacore ? 1 : t->cores_per_chip));
    g_assert_cmpfloat(ps_topology_device_peak_flops(t) * ps_topology_devices_per_chip(t), ==,
                      t->peak_flops);
    g_assert_cmpint(ps_topology_device_hbm_bytes(t) * ps_topology_devices_per_chip(t), ==,
                    t->hbm_bytes);
    g_assert_cmpfloat(t->ici_bandwidth_Bps, >, 0);
    g_assert_cmpfloat(t->mxu_efficiency, >, 0);
    g_assert_cmpfloat(t->mxu_efficiency, <=, 1);

    /* Slices of the generations shipped here; names count TensorCores. */
    int gen = 0, cores = 0;
    if (sscanf(names[i], "tpu-v%d-%d", &gen, &cores) == 2 && gen >= 2 && gen <= 4) {
      slices++;
      g_assert_cmpint(t->mxu_size, ==, 128);
      g_assert_cmpint(chips * t->cores_per_chip, ==, cores);
      g_assert_cmpstr(t->generation, ==, gen == 2 ? "v2" : gen == 3 ? "v3" : "v4");
      if (gen == 4) {
        gboolean cube = t->ndims == 3 && t->dims[0] % 4 == 0 && t->dims[1] % 4 == 0 &&
                        t->dims[2] % 4 == 0;
        g_assert_true(t->megacore);
        for (int d = 0; d < t->ndims; d++)
          g_assert_cmpint(t->wrap[d], ==, cube);
      } else {
        int pod_side = gen == 2 ? 16 : 32;
        g_assert_cmpint(t->ndims, ==, 2);
        g_assert_false(t->megacore);
        for (int d = 0; d < t->ndims; d++)
          g_assert_cmpint(t->wrap[d], ==, t->dims[d] == pod_side);
      }
    }
    ps_topology_free(t);
  }
  g_assert_cmpuint(slices, >=, 24);
}

/* Every shipped topology cites a source for each hardware figure. */
static void test_all_topologies_sourced(void)
{
  static const char *const figures[] = {
      "chip.cores",           "chip.mxus_per_core",      "chip.peak_flops",
      "chip.hbm_bytes",       "chip.hbm_bandwidth_Bps",  "chip.on_chip_bandwidth_Bps",
      "host.chips",           "host.cpu_threads",        "host.pcie_bandwidth_Bps",
      "host.cpu_flops",       "host.loop_overhead_s",    "torus.dims",
      "torus.wrap",           "ici.bandwidth_Bps",       "ici.latency_s",
      NULL};
  g_auto(GStrv) names = ps_config_list("topologies");
  g_autofree char *f = data_path(GOOD_EXPERIMENT);
  for (guint i = 0; names[i]; i++) {
    g_autofree char *set = g_strdup_printf("topology=%s", names[i]);
    const char *const ov[] = {set, "strategy.replicas=1", NULL};
    GError *err = NULL;
    PsExperiment *e = ps_experiment_load(f, ov, &err);
    g_assert_no_error(err);
    json_object *topo = NULL, *sources = NULL, *cite = NULL;
    g_assert_true(json_object_object_get_ex(e->resolved, "topology", &topo));
    g_assert_true(json_object_object_get_ex(topo, "sources", &sources));
    for (const char *const *k = figures; *k; k++) {
      if (!json_object_object_get_ex(sources, *k, &cite) || !cite ||
          json_object_get_string_len(cite) < 10)
        g_error("%s: no source for %s", names[i], *k);
    }
    ps_experiment_free(e);
  }
}

static void test_derived_numbers(void)
{
  PsTopology *t = topology_load("tpu-v3-2048", NULL);
  g_assert_cmpint(ps_topology_chips(t), ==, 1024);
  g_assert_cmpint(ps_topology_devices(t), ==, 2048);
  g_assert_cmpint(ps_topology_hosts(t), ==, 256);
  g_assert_true(t->wrap[0] && t->wrap[1]);
  ps_topology_free(t);

  t = topology_load("tpu-v4-8192", NULL);
  g_assert_cmpint(ps_topology_chips(t), ==, 4096);
  g_assert_cmpint(ps_topology_devices(t), ==, 4096);
  g_assert_cmpint(ps_topology_hosts(t), ==, 1024);
  g_assert_cmpint(ps_topology_device_hbm_bytes(t), ==, 32 * GIB);
  g_assert_cmpfloat(ps_topology_device_peak_flops(t), ==, 275e12);
  g_assert_true(t->wrap[0] && t->wrap[1] && t->wrap[2]);
  ps_topology_free(t);

  t = topology_load("tpu-v3-8", NULL);
  g_assert_cmpint(ps_topology_chips(t), ==, 4);
  g_assert_cmpint(ps_topology_devices(t), ==, 8);
  g_assert_cmpint(ps_topology_hosts(t), ==, 1);
  g_assert_cmpint(ps_topology_device_hbm_bytes(t), ==, 16 * GIB);
  g_assert_cmpfloat(ps_topology_device_peak_flops(t), ==, 61.5e12);
  g_assert_cmpfloat(ps_topology_device_hbm_bandwidth(t), ==, 450e9);
  g_assert_cmpint(t->mxus_per_core, ==, 2);
  g_assert_false(t->wrap[0] || t->wrap[1]);
  ps_topology_free(t);

  t = topology_load("tpu-v2-8", NULL);
  g_assert_cmpint(ps_topology_device_hbm_bytes(t), ==, 8 * GIB);
  g_assert_cmpint(t->mxus_per_core, ==, 1);
  ps_topology_free(t);

  t = topology_load("tpu-v3-1024", NULL);
  g_assert_cmpint(t->dims[0], ==, 16);
  g_assert_cmpint(t->dims[1], ==, 32);
  g_assert_false(t->wrap[0]);
  g_assert_true(t->wrap[1]);
  ps_topology_free(t);

  t = topology_load("tpu-v4-32", NULL); /* 2x2x4: below a cube, no wrap */
  g_assert_cmpint(ps_topology_hosts(t), ==, 4);
  g_assert_false(t->wrap[0] || t->wrap[1] || t->wrap[2]);
  ps_topology_free(t);

  t = topology_load("tpu-v4", NULL); /* a base is one host */
  g_assert_cmpint(ps_topology_chips(t), ==, 4);
  g_assert_cmpint(ps_topology_devices(t), ==, 4);
  ps_topology_free(t);
}

static void test_topology_overrides(void)
{
  const char *const num[] = {"ici.bandwidth_Bps=5e10", NULL};
  PsTopology *t = topology_load("tpu-v3-8", num);
  g_assert_cmpfloat(t->ici_bandwidth_Bps, ==, 5e10);
  ps_topology_free(t);

  const char *const units[] = {"ici.latency_s=2us", "chip.hbm_bytes=\"8GiB\"",
                               "ici.bandwidth_Bps=100GB/s", NULL};
  t = topology_load("tpu-v3-8", units);
  g_assert_cmpfloat(fabs(t->ici_latency_s - 2e-6), <, 1e-18);
  g_assert_cmpint(t->hbm_bytes, ==, 8 * GIB);
  g_assert_cmpfloat(t->ici_bandwidth_Bps, ==, 100e9);
  ps_topology_free(t);

  const char *const strings[] = {"description=a what-if", "generation=v3x", NULL};
  t = topology_load("tpu-v3-8", strings);
  g_assert_cmpstr(t->description, ==, "a what-if");
  g_assert_cmpstr(t->generation, ==, "v3x");
  ps_topology_free(t);

  const char *const nested[] = {"torus.dims=[8,4]", "torus.wrap=[false,true]", "host.chips=8",
                                NULL};
  t = topology_load("tpu-v3-8", nested);
  g_assert_cmpint(ps_topology_chips(t), ==, 32);
  g_assert_cmpint(ps_topology_hosts(t), ==, 4);
  g_assert_cmpint(ps_topology_devices(t), ==, 64);
  g_assert_false(t->wrap[0]);
  g_assert_true(t->wrap[1]);
  ps_topology_free(t);

  const char *const index[] = {"torus.dims[2]=8", "torus.wrap[2]=true", NULL};
  t = topology_load("tpu-v4-128", index);
  g_assert_cmpint(ps_topology_chips(t), ==, 128);
  ps_topology_free(t);

  struct {
    const char *set;
    int code;
    const char *needle;
  } bad[] = {
      {"ici.bandwidth_Bps=-1", PS_INPUT_ERROR_VALUE, "ici.bandwidth_Bps: must be > 0"},
      {"ici.bandwidth_Bps=fast", PS_INPUT_ERROR_SYNTAX, "cannot read 'fast' as a bandwidth"},
      {"chip.bogus=1", PS_INPUT_ERROR_KEY, "chip: unknown key 'bogus'"},
      {"chip.cores.x=1", PS_INPUT_ERROR_TYPE, "'chip.cores' is not an object"},
      {"no-equals-sign", PS_INPUT_ERROR_SYNTAX, "expected PATH=VALUE"},
      {"torus.dims=[4,4,4,4]", PS_INPUT_ERROR_VALUE, "torus.dims: must have 1 to 3 entries"},
      {"torus.dims=[3,3]", PS_INPUT_ERROR_VALUE, "9 chips (torus.dims 3x3) are not divisible by host.chips = 4"},
      {"torus.twisted=true", PS_INPUT_ERROR_VALUE, "torus.twisted"},
      {"chip.megacore=yes", PS_INPUT_ERROR_TYPE, "chip.megacore: must be true or false"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    const char *const ov[] = {bad[i].set, NULL};
    GError *err = NULL;
    PsTopology *b = ps_topology_load("tpu-v3-8", ov, &err);
    g_assert_null(b);
    g_assert_error(err, PS_INPUT_ERROR, bad[i].code);
    if (!strstr(err->message, bad[i].needle))
      g_error("--set %s: '%s' lacks '%s'", bad[i].set, err->message, bad[i].needle);
    g_error_free(err);
  }
}

static PsTopology *topology_from_text(const char *text, GError **err)
{
  json_object *obj = ps_json_parse(text, "<test>", err);
  g_assert_nonnull(obj);
  PsTopology *t = ps_topology_from_json(obj, "<test>", "", err);
  json_object_put(obj);
  return t;
}

/* "extends" merges objects key by key and replaces arrays whole. */
static void test_extends_merges_deeply(void)
{
  GError *err = NULL;
  PsTopology *t = topology_from_text(
      "{\"extends\": \"tpu-v3\", \"chip\": {\"hbm_bytes\": \"16GiB\"},"
      " \"torus\": {\"dims\": [4, 8], \"wrap\": [true, false]}}",
      &err);
  g_assert_no_error(err);
  g_assert_cmpint(t->hbm_bytes, ==, 16 * GIB);         /* from here */
  g_assert_cmpfloat(t->peak_flops, ==, 123e12);        /* from the base's chip */
  g_assert_cmpint(t->cores_per_chip, ==, 2);
  g_assert_cmpfloat(t->ici_bandwidth_Bps, ==, 83e9);   /* from the base's ici */
  g_assert_cmpint(ps_topology_chips(t), ==, 32);
  g_assert_true(t->wrap[0]);
  g_assert_false(t->wrap[1]);
  g_assert_cmpstr(t->name, ==, "tpu-v3");
  ps_topology_free(t);

  /* Two levels: a slice file extends its generation's base. */
  t = topology_from_text("{\"name\": \"mine\", \"extends\": \"tpu-v4-128\","
                         " \"ici\": {\"latency_s\": \"500ns\"}}",
                         &err);
  g_assert_no_error(err);
  g_assert_cmpstr(t->name, ==, "mine");
  g_assert_cmpint(ps_topology_chips(t), ==, 64);
  g_assert_true(t->megacore);
  g_assert_cmpfloat(fabs(t->ici_latency_s - 5e-7), <, 1e-18);
  g_assert_cmpfloat(t->ici_bandwidth_Bps, ==, 45e9);
  ps_topology_free(t);

  /* A slice smaller than one host is one host with that many chips. */
  t = topology_from_text("{\"extends\": \"tpu-v3\", \"torus\": {\"dims\": [1, 2]}}", &err);
  g_assert_no_error(err);
  g_assert_cmpint(ps_topology_chips(t), ==, 2);
  g_assert_cmpint(ps_topology_hosts(t), ==, 1);
  g_assert_cmpint(t->chips_per_host, ==, 2);
  g_assert_false(t->wrap[0] || t->wrap[1]); /* default: no wrap */
  ps_topology_free(t);

  /* Without a base every section is required. */
  t = topology_from_text("{\"name\": \"empty\"}", &err);
  g_assert_null(t);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_KEY);
  g_assert_nonnull(strstr(err->message, "<test>: (root): missing required key 'chip'"));
  g_clear_error(&err);
}

static void test_find(void)
{
  GError *err = NULL;
  g_autofree char *f = ps_config_find("topologies", "tpu-v3-8", &err);
  g_assert_no_error(err);
  g_assert_true(g_str_has_suffix(f, "topologies/tpu-v3-8.json"));
  g_assert_true(g_file_test(f, G_FILE_TEST_IS_REGULAR));

  g_autofree char *good = data_path(GOOD_EXPERIMENT);
  g_autofree char *same = ps_config_find("experiments", good, &err);
  g_assert_no_error(err);
  g_assert_cmpstr(same, ==, good);

  char *none = ps_config_find("topologies", "tpu-v9-8", &err);
  g_assert_null(none);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(err->message, "unknown topology 'tpu-v9-8'"));
  g_assert_nonnull(strstr(err->message, "podsim list topologies"));
  g_clear_error(&err);

  none = ps_config_find("models", "nowhere/x.json", &err);
  g_assert_null(none);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(err->message, "nowhere/x.json: cannot read: No such file"));
  g_clear_error(&err);
}

/* ------------------------------------------------------ experiments */

static PsExperiment *load_good(const char *const *overrides)
{
  g_autofree char *f = data_path(GOOD_EXPERIMENT);
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(f, overrides, &err);
  g_assert_no_error(err);
  g_assert_nonnull(e);
  return e;
}

/* "attention_kernel" sets every attention layer of the model, those in
 * repeated blocks too: flash with the default block, or none; "model"
 * leaves the model file's choice; anything else is refused naming the
 * field. */
static void test_attention_kernel(void)
{
  static const char *const kernels[] = {"model", "flash", "unfused"};
  static const int64_t want[] = {512, 512, 0}; /* maxtext-32b's layers say flash */
  for (int k = 0; k < 3; k++) {
    g_autofree char *f = data_path("experiments/maxtext-v5e.json");
    g_autofree char *set = g_strdup_printf("attention_kernel=%s", kernels[k]);
    const char *ov[] = {set, NULL};
    GError *err = NULL;
    PsExperiment *e = ps_experiment_load(f, ov, &err);
    g_assert_no_error(err);
    int attention = 0;
    for (int i = 0; i < e->model->n_layers; i++)
      if (e->model->layers[i].kind == PS_LAYER_ATTENTION) {
        g_assert_cmpint(e->model->layers[i].flash_block, ==, want[k]);
        attention++;
      }
    g_assert_cmpint(attention, ==, 32);
    ps_experiment_free(e);
  }
  g_autofree char *f = data_path("experiments/maxtext-v5e.json");
  const char *ov[] = {"attention_kernel=fast", NULL};
  GError *err = NULL;
  g_assert_null(ps_experiment_load(f, ov, &err));
  g_assert_nonnull(err);
  g_assert_nonnull(strstr(err->message, "attention_kernel"));
  g_assert_nonnull(strstr(err->message, "fast"));
  g_error_free(err);
}

/* "attention_blocks" gives every flash attention layer of the model its
 * kernels' blocks (the run's sa_block_* flags), in repeated blocks too;
 * a fused backward kernel keeps no dq blocks (it has none), its dk/dv
 * blocks are the experiment's; "fused_backward" sets the layers' fused
 * kernel either way; a model with no flash layer, a misspelt block, a
 * block of 0 and a fused_backward not a boolean are refused naming the
 * experiment's key. */
static void test_attention_blocks(void)
{
  g_autofree char *f = data_path("experiments/maxtext-v5e.json");
  const char *ov[] = {"attention_blocks={\"q\": 1024, \"kv_dkv\": 2048, \"q_dq\": 256}", NULL};
  g_autofree char *f7 = data_path("experiments/maxtext-tpu7x.json"); /* fused backward */
  for (int k = 0; k < 2; k++) {
    GError *err = NULL;
    PsExperiment *e = ps_experiment_load(k == 0 ? f : f7, ov, &err);
    g_assert_no_error(err);
    int attention = 0;
    for (int i = 0; i < e->model->n_layers; i++) {
      const PsLayer *L = &e->model->layers[i];
      if (L->kind != PS_LAYER_ATTENTION)
        continue;
      g_assert_cmpint(L->flash_q[PS_FLASH_FWD], ==, 1024);
      g_assert_cmpint(L->flash_kv[PS_FLASH_FWD], ==, L->flash_block);
      g_assert_cmpint(L->flash_kv[PS_FLASH_DKV], ==, 2048);
      g_assert_cmpint(L->flash_q[PS_FLASH_DKV], ==, L->flash_block);
      g_assert_cmpint(L->flash_q[PS_FLASH_DQ], ==, L->flash_fused_bwd ? L->flash_block : 256);
      g_assert_true(L->flash_fused_bwd == (k == 1));
      attention++;
    }
    g_assert_cmpint(attention, >, 0);
    ps_experiment_free(e);
  }
  /* "fused_backward" turns each layer's fused kernel on or off: off, the
   * dq blocks reach the layers; on, they are dropped */
  const char *sep[] = {
      "attention_blocks={\"q_dq\": 256, \"kv_dq\": 128, \"fused_backward\": false}", NULL};
  const char *fuse[] = {"attention_blocks={\"q_dq\": 256, \"fused_backward\": true}", NULL};
  for (int k = 0; k < 2; k++) {
    GError *err = NULL;
    PsExperiment *e = ps_experiment_load(k == 0 ? f7 : f, k == 0 ? sep : fuse, &err);
    g_assert_no_error(err);
    int attention = 0;
    for (int i = 0; i < e->model->n_layers; i++) {
      const PsLayer *L = &e->model->layers[i];
      if (L->kind != PS_LAYER_ATTENTION)
        continue;
      g_assert_true(L->flash_fused_bwd == (k == 1));
      g_assert_cmpint(L->flash_q[PS_FLASH_DQ], ==, k == 0 ? 256 : L->flash_block);
      g_assert_cmpint(L->flash_kv[PS_FLASH_DQ], ==, k == 0 ? 128 : L->flash_block);
      attention++;
    }
    g_assert_cmpint(attention, >, 0);
    ps_experiment_free(e);
  }
  const char *bad[][3] = {
      {"attention_kernel=unfused", "attention_blocks={\"q\": 512}", "no flash attention layer"},
      {"attention_blocks={\"fused_backward\": 1}", NULL, "attention_blocks.fused_backward"},
      {"attention_blocks={\"k\": 512}", NULL, "unknown key 'k'"},
      {"attention_blocks={\"kv\": 0}", NULL, "attention_blocks.kv"},
      {"attention_blocks=[512]", NULL, "attention_blocks"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    const char *o[] = {bad[i][0], bad[i][1], NULL};
    GError *err = NULL;
    g_assert_null(ps_experiment_load(f, o, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "maxtext-v5e.json"));
    g_assert_nonnull(strstr(err->message, bad[i][2]));
    g_error_free(err);
  }
}

static void test_experiment_defaults(void)
{
  PsExperiment *e = load_good(NULL);
  g_assert_cmpstr(e->name, ==, "fixture-mlp-v3-8");
  g_assert_cmpstr(e->topology->name, ==, "tpu-v3-8");
  g_assert_cmpstr(e->model->name, ==, "fixture-mlp");
  g_assert_cmpint(e->global_batch, ==, 256);
  g_assert_cmpint(e->steps, ==, 235); /* ceil(60000 / 256) */
  g_assert_cmpint(e->log_every, ==, 23);
  g_assert_cmpfloat(e->epochs, ==, 1.0);
  g_assert_cmpint(e->steps_per_run, ==, 1);
  g_assert_true(e->fuse_elementwise);
  g_assert_cmpstr(e->strategy.kind, ==, "replicate");
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 8);
  g_assert_cmpint(replica_config(e)->rep.loss_reduction, ==, PS_LOSS_MEAN);
  g_assert_cmpint(replica_config(e)->staging.stages, ==, 1);
  g_assert_cmpint(replica_config(e)->staging.micro_batches, ==, 1);
  g_assert_cmpint(replica_config(e)->staging.schedule, ==, PS_SCHEDULE_GPIPE);
  g_assert_false(replica_config(e)->staging.rematerialize);
  g_assert_cmpint(PS_DEFAULT_BUCKET_BYTES, ==, 30 * 1024 * 1024); /* XLA combiner default */
  g_assert_cmpint(replica_config(e)->rep.bucket_bytes, ==, PS_DEFAULT_BUCKET_BYTES);
  g_assert_true(replica_config(e)->rep.overlap);
  g_assert_false(replica_config(e)->rep.weight_update_sharding);
  g_assert_cmpint(ps_experiment_devices_used(e), ==, 8);
  g_assert_cmpint(e->input.source, ==, PS_SOURCE_FASHION_MNIST);
  g_assert_cmpstr(e->input.data_dir, ==, "/usr/share/datasets/fashion-mnist");
  g_assert_cmpint(e->input.workers, ==, 1);
  g_assert_cmpint(e->input.prefetch, ==, 2);
  g_assert_cmpint(e->input.infeed_capacity, ==, 2);
  g_assert_cmpint(e->input.synthetic_examples, ==, 60000);
  g_assert_true(e->input.shuffle);
  g_assert_cmpint(e->optimizer.kind, ==, PS_OPT_SGD);
  g_assert_cmpfloat(e->optimizer.learning_rate, ==, 0.01);
  g_assert_cmpfloat(e->optimizer.momentum, ==, 0.9);
  g_assert_cmpfloat(e->optimizer.beta2, ==, 0.999);
  g_assert_cmpfloat(e->optimizer.epsilon, ==, 1e-7);
  g_assert_true(e->numerics.enabled); /* the MLP has kernels */
  g_assert_cmpint(e->numerics.precision, ==, PS_PRECISION_F32);
  g_assert_cmpuint(e->numerics.seed, ==, 1);
  g_assert_true(e->numerics.evaluate);

  /* The resolved tree holds the defaults and the looked-up subtrees. */
  json_object *r = e->resolved, *v = NULL;
  g_assert_true(json_object_object_get_ex(r, "steps", &v));
  g_assert_cmpint(json_object_get_int64(v), ==, 235);
  g_assert_true(json_object_object_get_ex(r, "topology", &v));
  json_object *chip = NULL, *peak = NULL;
  g_assert_true(json_object_object_get_ex(v, "chip", &chip));
  g_assert_true(json_object_object_get_ex(chip, "peak_flops", &peak));
  g_assert_cmpfloat(json_object_get_double(peak), ==, 123e12);
  g_assert_true(json_object_object_get_ex(r, "model", &v));
  g_assert_true(json_object_object_get_ex(v, "layers", &v));
  g_assert_cmpuint(json_object_array_length(v), ==, 5);
  json_object *so = NULL;
  g_assert_true(json_object_object_get_ex(r, "strategy", &so));
  g_assert_true(json_object_object_get_ex(so, "bucket_bytes", &v));
  g_assert_cmpint(json_object_get_int64(v), ==, 31457280);
  g_assert_true(json_object_object_get_ex(so, "overlap", &v));
  g_assert_true(json_object_get_boolean(v));
  g_assert_true(json_object_object_get_ex(so, "weight_update_sharding", &v));
  g_assert_false(json_object_get_boolean(v));
  ps_experiment_free(e);

  /* A timing-only model defaults to numerics off. */
  const char *const timing[] = {"model=../models/timing-only.json", NULL};
  e = load_good(timing);
  g_assert_false(e->model->numerics_supported);
  g_assert_false(e->numerics.enabled);
  ps_experiment_free(e);
}

static void test_experiment_overrides(void)
{
  const char *const batch[] = {"global_batch=512", NULL};
  PsExperiment *e = load_good(batch);
  g_assert_cmpint(e->global_batch, ==, 512);
  g_assert_cmpint(e->steps, ==, 118); /* ceil(60000 / 512) */
  ps_experiment_free(e);

  const char *const topo[] = {"topology=tpu-v3-32", "strategy.replicas=32", NULL};
  e = load_good(topo);
  g_assert_cmpstr(e->topology->name, ==, "tpu-v3-32");
  g_assert_cmpint(ps_topology_devices(e->topology), ==, 32);
  g_assert_cmpint(ps_topology_hosts(e->topology), ==, 4);
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 32);
  ps_experiment_free(e);

  const char *const ici[] = {"topology.ici.bandwidth_Bps=5e10", "topology.ici.latency_s=2us",
                             NULL};
  e = load_good(ici);
  g_assert_cmpfloat(e->topology->ici_bandwidth_Bps, ==, 5e10);
  g_assert_cmpfloat(fabs(e->topology->ici_latency_s - 2e-6), <, 1e-18);
  ps_experiment_free(e);

  const char *const model[] = {"model=../models/rgb32.json", "input.source=synthetic", NULL};
  e = load_good(model);
  g_assert_cmpstr(e->model->name, ==, "fixture-rgb32");
  g_assert_cmpint(e->input.source, ==, PS_SOURCE_SYNTHETIC);
  ps_experiment_free(e);

  const char *const epochs[] = {"input.source=synthetic", "input.synthetic_examples=1000",
                                "epochs=2", NULL};
  e = load_good(epochs);
  g_assert_cmpint(e->steps, ==, 8); /* ceil(2 * 1000 / 256) */
  g_assert_cmpint(e->log_every, ==, 1);
  ps_experiment_free(e);

  const char *const enums[] = {"numerics.precision=bf16", "optimizer.kind=adam",
                               "strategy.loss_reduction=sum", "numerics.seed=42",
                               "steps=3", "log_every=2", "optimizer.schedule=cosine", NULL};
  e = load_good(enums);
  g_assert_cmpint(e->optimizer.schedule, ==, PS_LR_COSINE);
  g_assert_cmpint(e->numerics.precision, ==, PS_PRECISION_BF16);
  g_assert_cmpint(e->optimizer.kind, ==, PS_OPT_ADAM);
  g_assert_cmpint(replica_config(e)->rep.loss_reduction, ==, PS_LOSS_SUM);
  g_assert_cmpuint(e->numerics.seed, ==, 42);
  g_assert_cmpint(e->steps, ==, 3);
  g_assert_cmpint(e->log_every, ==, 2);
  ps_experiment_free(e);

  /* null restores a default: for replicas, every device of the slice. */
  const char *const reset[] = {"strategy.replicas=null", NULL};
  e = load_good(reset);
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 8);
  ps_experiment_free(e);
  const char *const reset_topo[] = {"strategy.replicas=null", "topology=tpu-v3-32", NULL};
  e = load_good(reset_topo);
  g_assert_cmpint(replica_config(e)->rep.replicas, ==, 32);
  ps_experiment_free(e);
}

static PsExperiment *load_what_if(const char *const *overrides)
{
  g_autofree char *f = data_path(WHAT_IF_EXPERIMENT);
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(f, overrides, &err);
  g_assert_no_error(err);
  g_assert_nonnull(e);
  return e;
}

static int64_t resolved_strategy_int(const PsExperiment *e, const char *key)
{
  json_object *so = NULL, *v = NULL;
  g_assert_true(json_object_object_get_ex(e->resolved, "strategy", &so));
  if (!json_object_object_get_ex(so, key, &v) || !json_object_is_type(v, json_type_int))
    g_error("resolved strategy lacks an integer '%s'", key);
  return json_object_get_int64(v);
}

/* bucket_bytes takes a byte count or a size with units (SI MB = 10^6, MiB
 * = 2^20); overlap and weight_update_sharding are booleans; all three
 * reach the resolved tree. */
static void test_strategy_exchange_keys(void)
{
  PsExperiment *e = load_what_if(NULL);
  g_assert_cmpint(replica_config(e)->rep.bucket_bytes, ==, 4 * 1024 * 1024);
  g_assert_false(replica_config(e)->rep.overlap);
  g_assert_true(replica_config(e)->rep.weight_update_sharding);
  g_assert_cmpint(resolved_strategy_int(e, "bucket_bytes"), ==, 4 * 1024 * 1024);
  ps_experiment_free(e);

  struct {
    const char *set;
    int64_t bytes;
  } sizes[] = {
      {"strategy.bucket_bytes=25MB", 25000000},
      {"strategy.bucket_bytes=\"25 MiB\"", 25 * 1024 * 1024},
      {"strategy.bucket_bytes=1.5kB", 1500},
      {"strategy.bucket_bytes=1048576", 1048576},
      {"strategy.bucket_bytes=2e6", 2000000},
      {"strategy.bucket_bytes=1", 1},
      {"strategy.bucket_bytes=1TiB", INT64_C(1) << 40},
      {"strategy.bucket_bytes=null", PS_DEFAULT_BUCKET_BYTES},
  };
  for (guint i = 0; i < G_N_ELEMENTS(sizes); i++) {
    const char *const ov[] = {sizes[i].set, NULL};
    e = load_what_if(ov);
    if (replica_config(e)->rep.bucket_bytes != sizes[i].bytes)
      g_error("--set %s: bucket_bytes %" G_GINT64_FORMAT ", expected %" G_GINT64_FORMAT,
              sizes[i].set, replica_config(e)->rep.bucket_bytes, sizes[i].bytes);
    g_assert_cmpint(resolved_strategy_int(e, "bucket_bytes"), ==, sizes[i].bytes);
    ps_experiment_free(e);
  }

  /* weight-update sharding is accepted for a pipeline too */
  const char *const pipe[] = {"strategy.kind=pipeline", "strategy.stages=2",
                              "strategy.overlap=true", NULL};
  e = load_what_if(pipe);
  g_assert_cmpstr(e->strategy.kind, ==, "pipeline");
  g_assert_true(replica_config(e)->rep.weight_update_sharding);
  g_assert_true(replica_config(e)->rep.overlap);
  ps_experiment_free(e);
}

/* strategy.replicas left out is every device of the slice the overrides
 * chose (divided by the stages of a pipeline), written into the resolved
 * tree; given, it stays what it was. */
static void test_replicas_default(void)
{
  struct {
    const char *set[4];
    int replicas, stages;
  } cases[] = {
      {{NULL}, 8, 1},
      {{"topology=tpu-v3-32", NULL}, 32, 1},
      {{"topology=tpu-v4-32", NULL}, 16, 1}, /* megacore: a chip is one device */
      {{"topology.torus.dims=[4,4]", NULL}, 32, 1},
      {{"strategy.kind=pipeline", "strategy.stages=4", NULL}, 2, 4},
      {{"strategy.kind=pipeline", "strategy.stages=4", "topology=tpu-v3-32"}, 8, 4},
      {{"strategy.kind=pipeline", "strategy.stages=4", "topology=tpu-v4-8"}, 1, 4},
      {{"strategy.replicas=2", "topology=tpu-v3-32", NULL}, 2, 1},
      {{"strategy.kind=pipeline", "strategy.stages=2", "strategy.replicas=1"}, 1, 2},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsExperiment *e = load_what_if(cases[i].set);
    if (replica_config(e)->rep.replicas != cases[i].replicas || replica_config(e)->staging.stages != cases[i].stages)
      g_error("case %u (%s ...): %d replicas x %d stages, expected %d x %d", i,
              cases[i].set[0] ? cases[i].set[0] : "no --set", replica_config(e)->rep.replicas,
              replica_config(e)->staging.stages, cases[i].replicas, cases[i].stages);
    g_assert_cmpint(ps_experiment_devices_used(e), ==, cases[i].replicas * cases[i].stages);
    g_assert_cmpint(resolved_strategy_int(e, "replicas"), ==, cases[i].replicas);
    ps_experiment_free(e);
  }

  /* The resolved tree carries the number, so it reloads with it even on
   * another slice. */
  const char *const v3_32[] = {"topology=tpu-v3-32", NULL};
  PsExperiment *e = load_what_if(v3_32);
  GError *err = NULL;
  char *tmp = NULL;
  int fd = g_file_open_tmp("podsim-replicas-XXXXXX.json", &tmp, &err);
  g_assert_no_error(err);
  close(fd);
  g_assert_true(g_file_set_contents(
      tmp, json_object_to_json_string_ext(e->resolved, JSON_C_TO_STRING_PRETTY), -1, &err));
  PsExperiment *again = ps_experiment_load(tmp, NULL, &err);
  g_assert_no_error(err);
  g_assert_cmpint(replica_config(again)->rep.replicas, ==, 32);
  g_assert_true(json_object_equal(e->resolved, again->resolved));
  ps_experiment_free(again);
  const char *const smaller[] = {"topology=tpu-v3-64", NULL};
  again = ps_experiment_load(tmp, smaller, &err); /* explicit now: 32 of 64 */
  g_assert_no_error(err);
  g_assert_cmpint(replica_config(again)->rep.replicas, ==, 32);
  g_assert_cmpint(ps_experiment_devices_used(again), ==, 32);
  ps_experiment_free(again);
  ps_experiment_free(e);
  g_unlink(tmp);
  g_free(tmp);
}

/* The HBM check of replication at load time: the per-replica batch (a
 * pipeline's stages are checked by its strategy: test_pipeline.c). */
static void test_replicate_memory(void)
{
  g_autofree char *f = data_path("tests/data/bad/does-not-fit.json");
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(f, NULL, &err);
  g_assert_null(e);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT);
  g_assert_nonnull(strstr(err->message, "global_batch"));
  g_clear_error(&err);

  const char *const replicas[] = {"strategy.replicas=8", NULL}; /* 8192 per core */
  e = ps_experiment_load(f, replicas, &err);
  g_assert_no_error(err);
  ps_experiment_free(e);

  /* 3.8 GiB of weights, gradients and momentum, plus 32768 examples of
   * 36,874 activations kept (the input 4096, the relus' inputs 2 x 16384
   * with their outputs recomputed, the probabilities 10): 2.3 GiB in bf16
   * fits in 8 GiB, 4.5 in f32 not. */
  const char *const bf16[] = {"global_batch=32768", "numerics.precision=bf16", NULL};
  e = ps_experiment_load(f, bf16, &err);
  g_assert_no_error(err);
  ps_experiment_free(e);
  const char *const f32[] = {"global_batch=32768", NULL};
  e = ps_experiment_load(f, f32, &err);
  g_assert_null(e);
  g_assert_error(err, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT);
  g_clear_error(&err);
}

/* `describe`'s resolved tree is itself a loadable experiment that
 * resolves to the same tree. */
static void test_resolved_round_trip(void)
{
  PsExperiment *e = load_good((const char *const[]){"topology.ici.bandwidth_Bps=7e10", NULL});
  GError *err = NULL;
  char *tmp = NULL;
  int fd = g_file_open_tmp("podsim-resolved-XXXXXX.json", &tmp, &err);
  g_assert_no_error(err);
  close(fd);
  const char *text = json_object_to_json_string_ext(e->resolved, JSON_C_TO_STRING_PRETTY);
  g_assert_true(g_file_set_contents(tmp, text, -1, &err));
  PsExperiment *again = ps_experiment_load(tmp, NULL, &err);
  g_assert_no_error(err);
  g_assert_true(json_object_equal(e->resolved, again->resolved));
  g_assert_cmpfloat(again->topology->ici_bandwidth_Bps, ==, 7e10);
  g_assert_cmpint(again->steps, ==, e->steps);
  g_assert_cmpint(again->model->n_layers, ==, e->model->n_layers);
  ps_experiment_free(again);
  ps_experiment_free(e);
  g_unlink(tmp);
  g_free(tmp);
}

/* ------------------------------------------------------ bad inputs */

typedef struct {
  const char *name;      /* test path leaf */
  const char *file;      /* experiment, relative to the data dir */
  const char *set[4];    /* --set overrides */
  int code;
  const char *needles[4]; /* the file, the JSON path, the reason */
} BadCase;

#define BAD(f) "tests/data/bad/" f

static const BadCase bad_cases[] = {
    {"syntax", BAD("syntax.json"), {NULL}, PS_INPUT_ERROR_SYNTAX,
     {"bad/syntax.json: ", "line 4, column 3", "invalid JSON"}},
    {"not-an-object", BAD("not-an-object.json"), {NULL}, PS_INPUT_ERROR_TYPE,
     {"bad/not-an-object.json: ", "(root)", "must be an object, got array"}},
    {"wrong-type/batch", BAD("wrong-type.json"), {NULL}, PS_INPUT_ERROR_TYPE,
     {"bad/wrong-type.json: ", "global_batch: ", "must be an integer, got string"}},
    {"wrong-type/topology", BAD("topology-wrong-type.json"), {NULL}, PS_INPUT_ERROR_TYPE,
     {"bad/topology-wrong-type.json: ", "topology: ", "a path or an object, got integer"}},
    {"unknown-key/top", BAD("unknown-key-top.json"), {NULL}, PS_INPUT_ERROR_KEY,
     {"bad/unknown-key-top.json: ", "(root)", "unknown key 'global_bach'"}},
    {"unknown-key/nested", BAD("unknown-key-nested.json"), {NULL}, PS_INPUT_ERROR_KEY,
     {"bad/unknown-key-nested.json: ", "strategy: ", "unknown key 'replica'"}},
    {"unknown-key/topology-file", BAD("topology-unknown-key.json"), {NULL}, PS_INPUT_ERROR_KEY,
     {"topologies/topo-unknown-key.json: ", "chip: ", "unknown key 'hbm_gb'"}},
    {"missing-key", BAD("missing-batch.json"), {NULL}, PS_INPUT_ERROR_KEY,
     {"bad/missing-batch.json: ", "(root)", "missing required key 'global_batch'"}},
    {"negative/batch", BAD("negative-batch.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/negative-batch.json: ", "global_batch: ", "must be > 0, got -8"}},
    {"negative/hbm", BAD("negative-hbm.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"topologies/topo-negative-hbm.json: ", "chip.hbm_bytes: ", "must be > 0, got -1"}},
    {"zero/steps", BAD("zero-steps.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/zero-steps.json: ", "steps: ", "must be > 0, got 0"}},
    {"zero/cores", BAD("zero-cores.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/zero-cores.json: ", "topology.chip.cores: ", "got 0"}},
    {"not-divisible/replicas", BAD("batch-not-divisible.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/batch-not-divisible.json: ", "global_batch: ",
      "1000 is not divisible by strategy.replicas = 3"}},
    {"not-divisible/micro-batches", BAD("micro-batches.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/micro-batches.json: ", "strategy.micro_batches: ",
      "per-replica batch 16 (global_batch 64 / 4 replicas) is not divisible by "
      "micro_batches = 5"}},
    {"not-divisible/default-replicas", BAD("micro-batches.json"),
     {"global_batch=66", "strategy.micro_batches=1", NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/micro-batches.json: ", "global_batch: ",
      "66 is not divisible by strategy.replicas = 4 (by default every device of tpu-v3-8 over "
      "strategy.stages)", "set strategy.replicas"}},
    {"not-divisible/stages-into-devices", BAD("stages-not-dividing.json"), {NULL},
     PS_INPUT_ERROR_VALUE,
     {"bad/stages-not-dividing.json: ", "strategy.stages: ",
      "3 stages do not divide the 8 devices of tpu-v3-8",
      "set strategy.replicas (2 uses 6 devices)"}},
    {"stages/over-devices", WHAT_IF_EXPERIMENT,
     {"strategy.kind=pipeline", "strategy.stages=16", NULL}, PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "strategy.stages: ",
      "16 stages need 16 devices, tpu-v3-8 has 8"}},
    {"bucket-bytes/unit-in-file", BAD("bucket-bytes-unit.json"), {NULL}, PS_INPUT_ERROR_SYNTAX,
     {"bad/bucket-bytes-unit.json: ", "strategy.bucket_bytes: ",
      "cannot read '25 MBs' as a size"}},
    {"clip/negative", WHAT_IF_EXPERIMENT, {"optimizer.clip_norm=-1", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "optimizer.clip_norm: ", "must be >= 0, got -1"}},
    {"clip/where-type", WHAT_IF_EXPERIMENT, {"optimizer.clip_before_reduce=1", NULL},
     PS_INPUT_ERROR_TYPE,
     {"good/experiments/mlp-what-if.json: ", "optimizer.clip_before_reduce: ",
      "must be true or false, got integer"}},
    {"clip/stages", WHAT_IF_EXPERIMENT,
     {"optimizer.clip_norm=1", "strategy.kind=pipeline", "strategy.stages=2", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "optimizer.clip_norm: ",
      "modelled without pipeline stages (got 2)", "set optimizer.clip_norm=0"}},
    {"optimizer/schedule", WHAT_IF_EXPERIMENT, {"optimizer.schedule=linear", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "optimizer.schedule: ",
      "must be one of: constant, cosine; got 'linear'"}},
    {"bucket-bytes/zero", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=0", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ", "must be > 0, got 0"}},
    {"bucket-bytes/negative", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=-4096", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "must be > 0, got -4096"}},
    {"bucket-bytes/negative-units", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=-1MB", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "must be > 0, got -1000000"}},
    {"bucket-bytes/unknown-unit", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=25 parsecs", NULL},
     PS_INPUT_ERROR_SYNTAX,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "cannot read '25 parsecs' as a size (e.g. \"32GiB\")"}},
    {"bucket-bytes/wrong-type", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=true", NULL},
     PS_INPUT_ERROR_TYPE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "must be an integer, got boolean"}},
    {"bucket-bytes/fraction", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=1.5B", NULL},
     PS_INPUT_ERROR_TYPE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "must be an integer, got 1.5"}},
    {"bucket-bytes/too-large", WHAT_IF_EXPERIMENT, {"strategy.bucket_bytes=2TiB", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-what-if.json: ", "strategy.bucket_bytes: ",
      "must be at most 1TiB (1099511627776 bytes), got 2199023255552"}},
    {"overlap/wrong-type", WHAT_IF_EXPERIMENT, {"strategy.overlap=1", NULL}, PS_INPUT_ERROR_TYPE,
     {"good/experiments/mlp-what-if.json: ", "strategy.overlap: ",
      "must be true or false, got integer"}},
    {"weight-update-sharding/wrong-type", WHAT_IF_EXPERIMENT,
     {"strategy.weight_update_sharding=yes", NULL}, PS_INPUT_ERROR_TYPE,
     {"good/experiments/mlp-what-if.json: ", "strategy.weight_update_sharding: ",
      "must be true or false, got string"}},
    {"not-divisible/hosts", BAD("host-not-dividing.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/host-not-dividing.json: ", "topology.host.chips: ",
      "6 chips (torus.dims 2x3) are not divisible by host.chips = 4"}},
    {"missing-file/experiment", BAD("no-such-experiment.json"), {NULL}, PS_INPUT_ERROR_FILE,
     {"bad/no-such-experiment.json: ", "cannot read: ", "No such file or directory"}},
    {"missing-file/model", BAD("missing-model-file.json"), {NULL}, PS_INPUT_ERROR_FILE,
     {"bad/missing-model-file.json: ", "model: ",
      "no-such-file.json: cannot read: No such file or directory"}},
    {"unknown-name/topology", BAD("unknown-topology.json"), {NULL}, PS_INPUT_ERROR_FILE,
     {"bad/unknown-topology.json: ", "topology: ",
      "unknown topology 'tpu-v9-8' (see `podsim list topologies`"}},
    {"unknown-name/model", BAD("unknown-model.json"), {NULL}, PS_INPUT_ERROR_FILE,
     {"bad/unknown-model.json: ", "model: ", "unknown model 'no-such-model'"}},
    {"unknown-name/extends", BAD("extends-unknown.json"), {NULL}, PS_INPUT_ERROR_FILE,
     {"bad/extends-unknown.json: ", "topology.extends: ", "unknown topology 'tpu-v7-8'"}},
    {"does-not-fit", BAD("does-not-fit.json"), {NULL}, PS_INPUT_ERROR_DOES_NOT_FIT,
     {"bad/does-not-fit.json: ", "global_batch: ",
      "model 'fixture-wide' needs 12.8 GiB per device at batch 65536",
      "tpu-v2-8 has 8.0 GiB per device"}},
    {"too-many-replicas", BAD("too-many-replicas.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/too-many-replicas.json: ", "strategy.replicas: ", "needs 64 devices, tpu-v3-8 has 8"}},
    {"stages/over-layers", BAD("stages-over-layers.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/stages-over-layers.json: ", "strategy.stages: ",
      "8 stages but model 'fixture-mlp' has only 5 layers"}},
    {"stages/not-pipeline", BAD("stages-without-pipeline.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/stages-without-pipeline.json: ", "strategy.stages: ",
      "need strategy.kind = \"pipeline\""}},
    {"torus/wrap-length", BAD("wrap-mismatch.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/wrap-mismatch.json: ", "topology.torus.wrap: ", "has 1 entries but torus.dims has 2"}},
    {"torus/four-dims", BAD("dims-4.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/dims-4.json: ", "topology.torus.dims: ", "must have 1 to 3 entries", "got 4"}},
    {"torus/twisted-2d", BAD("twisted-2d.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/twisted-2d.json: ", "topology.torus.twisted: ", "needs a 3-D", "got 4x4"}},
    {"extends-cycle", BAD("extends-cycle.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"topologies/topo-cycle-b.json: ", "extends: ",
      "cycle of extends (topo-cycle-a.json -> topo-cycle-b.json -> topo-cycle-a.json)"}},
    {"bad-enum", BAD("bad-enum.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/bad-enum.json: ", "strategy.kind: ",
      "must be one of: replicate, pipeline, shard; got 'data-parallel'"}},
    {"bad-range/momentum", BAD("bad-momentum.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/bad-momentum.json: ", "optimizer.momentum: ", "must be >= 0 and < 1, got 1.5"}},
    {"bad-unit", BAD("bad-unit.json"), {NULL}, PS_INPUT_ERROR_SYNTAX,
     {"bad/bad-unit.json: ", "topology.ici.latency_s: ", "cannot read '100 parsecs' as a time"}},
    {"sources/unknown-path", BAD("sources-bad-key.json"), {NULL}, PS_INPUT_ERROR_KEY,
     {"bad/sources-bad-key.json: ", "topology.sources.chip.peak_flop: ",
      "not a key of this topology"}},
    {"input/synthetic-too-large", GOOD_EXPERIMENT,
     {"input.source=synthetic", "input.synthetic_examples=4611686018427387904",
      "numerics.enabled=true", NULL},
     PS_INPUT_ERROR_VALUE,
     {"mlp-v3-8.json: ", "input.synthetic_examples: ", "in memory with numerics on",
      "numerics.enabled=false"}},
    {"numerics/timing-only", BAD("numerics-timing-only.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/numerics-timing-only.json: ", "numerics.enabled: ",
      "model 'fixture-timing-only' is timing-only", "set numerics.enabled=false"}},
    {"fashion-mnist/shape", BAD("fmnist-wrong-shape.json"), {NULL}, PS_INPUT_ERROR_VALUE,
     {"bad/fmnist-wrong-shape.json: ", "input.source: ",
      "model 'fixture-rgb32' takes (32, 32, 3) = 3072 values"}},
    {"set/syntax", GOOD_EXPERIMENT, {"global_batch", NULL}, PS_INPUT_ERROR_SYNTAX,
     {"--set ", "global_batch", "expected PATH=VALUE"}},
    {"set/through-non-object", GOOD_EXPERIMENT, {"global_batch.per_core=32", NULL},
     PS_INPUT_ERROR_TYPE, {"--set ", "global_batch.per_core", "'global_batch' is not an object"}},
    {"set/bad-index", GOOD_EXPERIMENT, {"topology.torus.dims[5]=4", NULL}, PS_INPUT_ERROR_VALUE,
     {"--set ", "topology.torus.dims", "has 2 elements, no [5]"}},
    {"set/unknown-key", GOOD_EXPERIMENT, {"topology.ici.bandwith_Bps=5e10", NULL},
     PS_INPUT_ERROR_KEY, {"topologies/tpu-v3-8.json: ", "ici: ", "unknown key 'bandwith_Bps'"}},
    {"set/negative", GOOD_EXPERIMENT, {"topology.ici.bandwidth_Bps=-5e10", NULL},
     PS_INPUT_ERROR_VALUE,
     {"topologies/tpu-v3-8.json: ", "ici.bandwidth_Bps: ", "must be > 0, got -5e+10"}},
    {"set/bad-unit", GOOD_EXPERIMENT, {"topology.ici.bandwidth_Bps=100 parsecs", NULL},
     PS_INPUT_ERROR_SYNTAX,
     {"topologies/tpu-v3-8.json: ", "ici.bandwidth_Bps: ",
      "cannot read '100 parsecs' as a bandwidth"}},
    {"set/not-divisible", GOOD_EXPERIMENT, {"global_batch=1001", NULL}, PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-v3-8.json: ", "global_batch: ",
      "1001 is not divisible by strategy.replicas = 8"}},
    {"set/unknown-topology", GOOD_EXPERIMENT, {"topology=tpu-v9-8", NULL}, PS_INPUT_ERROR_FILE,
     {"good/experiments/mlp-v3-8.json: ", "topology: ", "unknown topology 'tpu-v9-8'"}},
    {"set/too-many-replicas", GOOD_EXPERIMENT, {"topology=tpu-v4-8", NULL},
     PS_INPUT_ERROR_VALUE,
     {"good/experiments/mlp-v3-8.json: ", "strategy.replicas: ", "needs 8 devices, tpu-v4-8 has 4"}},
};

static GError *load_bad(const BadCase *c)
{
  g_autofree char *f = data_path(c->file);
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(f, c->set, &err);
  if (e)
    g_error("%s: loaded, expected an error", c->name);
  ps_experiment_free(e);
  g_assert_nonnull(err);
  return err;
}

static void test_bad_input(gconstpointer data)
{
  const BadCase *c = data;
  GError *err = load_bad(c);
  g_assert_error(err, PS_INPUT_ERROR, c->code);
  for (int i = 0; i < 4 && c->needles[i]; i++)
    if (!strstr(err->message, c->needles[i]))
      g_error("%s: message '%s' lacks '%s'", c->name, err->message, c->needles[i]);
  g_error_free(err);
}

/* The CLI reports the same message on stderr and exits 2. */
static void test_bad_input_cli(gconstpointer data)
{
  const BadCase *c = data;
  const char *podsim = g_getenv("PODSIM");
  if (!podsim || !*podsim) {
    g_test_skip("PODSIM is not set (make test sets it to the built CLI)");
    return;
  }
  if (!g_file_test(podsim, G_FILE_TEST_IS_EXECUTABLE)) {
    g_test_skip("PODSIM does not name an executable");
    return;
  }
  GError *expected = load_bad(c);
  g_autofree char *f = data_path(c->file);
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim);
  g_ptr_array_add(argv, (gpointer) "describe");
  g_ptr_array_add(argv, (gpointer) "experiment");
  g_ptr_array_add(argv, f);
  for (int i = 0; i < 4 && c->set[i]; i++) {
    g_ptr_array_add(argv, (gpointer) "--set");
    g_ptr_array_add(argv, (gpointer)c->set[i]);
  }
  g_ptr_array_add(argv, NULL);
  g_autofree char *out = NULL, *errtext = NULL;
  int status = 0;
  GError *spawn_err = NULL;
  gboolean ran = g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                              &errtext, &status, &spawn_err);
  g_ptr_array_free(argv, TRUE);
  g_assert_no_error(spawn_err);
  g_assert_true(ran);
  g_assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) != 2 || !strstr(errtext, expected->message))
    g_error("%s: podsim exited %d with stderr '%s', expected 2 and '%s'", c->name,
            WEXITSTATUS(status), errtext, expected->message);
  g_error_free(expected);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/config/topology/list", test_list_sorted_and_complete);
  g_test_add_func("/config/attention-kernel", test_attention_kernel);
  g_test_add_func("/config/attention-blocks", test_attention_blocks);
  g_test_add_func("/config/topology/all-load", test_all_topologies_load);
  g_test_add_func("/config/topology/sourced", test_all_topologies_sourced);
  g_test_add_func("/config/topology/derived", test_derived_numbers);
  g_test_add_func("/config/topology/overrides", test_topology_overrides);
  g_test_add_func("/config/topology/extends", test_extends_merges_deeply);
  g_test_add_func("/config/find", test_find);
  g_test_add_func("/config/experiment/defaults", test_experiment_defaults);
  g_test_add_func("/config/experiment/overrides", test_experiment_overrides);
  g_test_add_func("/config/experiment/strategy-exchange-keys", test_strategy_exchange_keys);
  g_test_add_func("/config/experiment/replicas-default", test_replicas_default);
  g_test_add_func("/config/experiment/replicate-memory", test_replicate_memory);
  g_test_add_func("/config/experiment/resolved-round-trip", test_resolved_round_trip);
  for (guint i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
    g_autofree char *p = g_strdup_printf("/config/bad/%s", bad_cases[i].name);
    g_test_add_data_func(p, &bad_cases[i], test_bad_input);
  }
  for (guint i = 0; i < G_N_ELEMENTS(bad_cases); i++) {
    g_autofree char *p = g_strdup_printf("/config/cli/bad/%s", bad_cases[i].name);
    g_test_add_data_func(p, &bad_cases[i], test_bad_input_cli);
  }
  return g_test_run();
}

/* test_multislice.c: several slices joined by the data-center network
 * (topology "slices" and "dcn", hw/topology.h's PS_ZONE_DCN) and the
 * hierarchical collectives across them.
 *
 * - /multislice/topology: slices numbered slice-major (devices, chips,
 *   hosts), a torus zone per slice and the DCN zone; a route between
 *   slices is PCIe up, NIC up, (leaf up, leaf down when the hosts' leaves
 *   differ), NIC down, PCIe down, with the links' names; one slice keeps
 *   its zones and link ids (the same count as without the keys);
 * - /multislice/named-slices: a topology file's "slices" as a list naming
 *   each slice (all one topology) is that many copies of it;
 * - /multislice/closed-form: hierarchical all-reduce of S bytes over P
 *   slices of a ring of four single-chip hosts (no link shared: every
 *   device has its own host, NIC and PCIe) takes the slice's own
 *   all-reduce plus 2(P-1) cross-slice steps, each one message of
 *   S/(4P) bytes over the DCN route, whose store-and-forward time is
 *   sum(latency) + sum(c/B_l) + (n-1) c/B_min for n chunks of c bytes:
 *   within 0.5%, for P = 2 and 4, and the library's prediction
 *   (ps_collective_predict_s) within 0.5% too;
 * - /multislice/dcn-bandwidth: halving the NIC bandwidth grows the
 *   simulated time by what the closed form's cross-slice steps grow,
 *   within 0.5%;
 * - /multislice/degraded-nic: host 0's NIC at a quarter of its bandwidth
 *   both ways (a faults.links "dcn" entry) makes each cross-slice step
 *   the degraded route's message time: the simulated all-reduce matches
 *   the closed form and the prediction (ps_collective_predict_s) within
 *   0.5%, and grows over the healthy one by 2(P-1) times the message's
 *   growth within 0.5%;
 * - /multislice/oversubscription: leaves of four hosts at 4:1 carry one
 *   NIC's bandwidth up to the spine, so each cross-slice step grows by
 *   three messages' serialization (within 5%), as the prediction's
 *   busiest-link share says (within 5%);
 * - /multislice/auto: auto picks hierarchical for 2 x tpu-v5e-256, whose
 *   flat ring crosses the DCN on every step;
 * - /multislice/multiring-phases: hierarchical all-reduce over 2 and 4
 *   slices of torus:4x4 (every chip its own host and NIC) takes one
 *   slice's multiring reduce-scatter, 2(P-1) DCN messages of the member's
 *   part and the multiring all-gather, within 0.5%, as does the
 *   prediction; its in-slice phases cost the slice's own multiring
 *   all-reduce (within 0.5%) and less than 0.6 of its torus one;
 *   reduce-scatter takes the first half (within 0.5%);
 * - /multislice/v5e-pod: 2 and 16 x tpu-v5e-256 at 64 MiB, a host's chips
 *   sharing its PCIe and NIC: the prediction within 2% of the events, and
 *   two slices within 1.15 x one slice's multiring all-reduce plus the DCN
 *   steps' NIC time;
 * - /multislice/numerics: hierarchical all-reduce with float buffers over
 *   2 and 3 slices (of torus:2x2, ring:4 and torus:4x4, multiring within
 *   each slice): every member within (N-1) eps sum|x| of the
 *   double-precision sum, and all bit-identical; reduce-scatter over
 *   torus:4x4 slices leaves blocks that tile the buffer, each the sum
 *   within that bound, and all-gather of them leaves every member the
 *   owners' values, bit for bit;
 * - /multislice/replicate: the data-parallel strategy on 2 x tpu-v5e-8
 *   (16 replicas, numerics on, hierarchical and auto) runs to the end and
 *   ends with identical replicas; its trace names each slice's chips and
 *   hosts and labels them with it, sorts each slice's processes together
 *   below the links, and has the DCN's links as tracks of a process of
 *   their own ("dcn links");
 * - /multislice/pipeline: two stages on two one-chip slices: the
 *   activations (with their labels) go up host 0's NIC and their
 *   gradients up host 1's, once a step each (the link statistics), and
 *   the step exceeds the same pipeline on two neighbouring chips of one
 *   slice by the DCN messages' closed-form time less the ICI ones', within
 *   0.5%;
 * - /multislice/shard: the shard strategy's data axis on 2 x tpu-v5e-4
 *   (tensor 4 in each slice) takes the slices: every data all-reduce
 *   joins one device of each slice, the tensor groups stay within one,
 *   and the all-reduce takes, by hierarchical, the closed form's two DCN
 *   messages of half the bucket within 0.5%, and by auto (butterfly) one
 *   message of the whole bucket each way at once, which is faster;
 * - /multislice/errors: slices 0, a DCN bandwidth of 0 and an
 *   oversubscription below 1, pipeline stages that do not divide over the
 *   slices or do not fill them, a shard mesh with no axis the slices
 *   divide, a topology file naming slices that disagree (shape,
 *   generation: the first entry that differs and the key where): exit 2
 *   naming the key (`podsim collective`, `podsim run`). */
#include "collectives/collective.h"
#include "run/experiment.h"
#include "hw/topology.h"
#include "run/run.h"
#include "strategy/strategy.h"
#include "support/cli.h"

#include <float.h>
#include <json-c/json.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

/* A network on a shorthand slice with overrides (NULL-terminated), or on
 * a topology already loaded (spec NULL). */
typedef struct {
  PsTopology *topo;
  PsEngine *engine;
  PsNetwork *net;
} Net;

static void net_init(Net *n, PsTopology *loaded, const char *spec, ...) G_GNUC_NULL_TERMINATED;
static void net_init(Net *n, PsTopology *loaded, const char *spec, ...)
{
  n->topo = loaded;
  if (spec) {
    GPtrArray *ov = g_ptr_array_new();
    va_list ap;
    va_start(ap, spec);
    for (const char *o = va_arg(ap, const char *); o; o = va_arg(ap, const char *))
      g_ptr_array_add(ov, (gpointer)o);
    va_end(ap);
    g_ptr_array_add(ov, NULL);
    GError *error = NULL;
    n->topo = ps_network_shorthand(spec, (const char *const *)ov->pdata, &error);
    g_assert_no_error(error);
    g_ptr_array_free(ov, TRUE);
  }
  n->engine = ps_engine_new();
  n->net = ps_network_new(n->engine, n->topo, PS_NETWORK_DEFAULT_CHUNK);
}

static void net_clear(Net *n)
{
  ps_network_free(n->net);
  ps_engine_free(n->engine);
  ps_topology_free(n->topo);
}

static PsCollective *coll(Net *n, const char *algo, const int *devs, int members, int64_t count,
                          int elem_bytes)
{
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, algo, devs, members, count, elem_bytes, 0};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(n->net, &spec, &error);
  g_assert_no_error(error);
  return c;
}

static int *range(int n)
{
  int *d = g_new(int, n);
  for (int i = 0; i < n; i++)
    d[i] = i;
  return d;
}

/* A temporary file holding json (transfer full: the caller unlinks it). */
static char *write_json(const char *json)
{
  GError *error = NULL;
  char *path = NULL;
  int fd = g_file_open_tmp("multislice-XXXXXX.json", &path, &error);
  g_assert_no_error(error);
  close(fd);
  g_assert_true(g_file_set_contents(path, json, -1, &error));
  return path;
}

/* ---- topology ------------------------------------------------------- */

static void expect_route(Net *n, int src, int dst, const char *const *names)
{
  int route[32];
  int h = ps_network_route(n->net, src, dst, route, 32);
  int k = 0;
  while (names[k])
    k++;
  g_assert_cmpint(h, ==, k);
  for (int i = 0; i < h; i++) {
    g_autofree char *name = ps_network_link_name(n->net, route[i]);
    g_assert_cmpstr(name, ==, names[i]);
  }
}

/* "slices" as a list naming each slice: the count of copies of it. */
static void test_named_slices(void)
{
  g_autofree char *path = write_json("{\"name\": \"two\", \"slices\": [\"tpu-v5e-8\","
                                     " \"tpu-v5e-8\"], \"dcn\": {\"hosts_per_leaf\": 4}}");
  GError *error = NULL;
  PsTopology *t = ps_topology_load(path, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpint(t->slices, ==, 2);
  g_assert_cmpint(ps_topology_devices(t), ==, 16);
  g_assert_cmpint(t->dcn.hosts_per_leaf, ==, 4);
  g_assert_cmpstr(t->name, ==, "two");
  ps_topology_free(t);
  g_unlink(path);
}

static void test_topology(void)
{
  Net one, n;
  net_init(&one, NULL, "torus:2x2", NULL);
  net_init(&n, NULL, "torus:2x2", "slices=3", "dcn.nic_bandwidth_Bps=12.5e9",
           "dcn.hosts_per_leaf=8", NULL);
  const PsGeometry *g1 = ps_network_geometry(one.net), *g = ps_network_geometry(n.net);
  g_assert_cmpint(ps_geometry_n_zones(g1), ==, 3);
  g_assert_cmpint(ps_geometry_slices(g1), ==, 1);
  g_assert_cmpint(ps_geometry_n_axes(g1), ==, PS_GEOMETRY_SLICE_AXIS);
  g_assert_cmpint(ps_geometry_n_zones(g), ==, 1 + 3 + 2);
  g_assert_cmpint(ps_geometry_zone(g, 0)->kind, ==, PS_ZONE_DCN);
  g_assert_cmpint(ps_network_devices(n.net), ==, 12);
  g_assert_cmpint(ps_geometry_hosts(g), ==, 12);
  g_assert_cmpint(ps_geometry_dcn_leaves(g), ==, 2);
  /* per slice, the single slice's ICI links; then NICs and leaves */
  const PsZone *dcn = ps_geometry_zone(g, 0);
  g_assert_cmpint(dcn->n_links, ==, 2 * 12 + 2 * 2);
  for (int s = 0; s < 3; s++) {
    const PsZone *z = ps_geometry_zone(g, 1 + s);
    g_assert_cmpint(z->kind, ==, PS_ZONE_TORUS);
    g_assert_cmpint(z->first_member, ==, 4 * s);
    g_assert_cmpint(z->n_links, ==, ps_geometry_zone(g1, 0)->n_links);
    g_assert_cmpint(z->parent, ==, 0);
  }
  /* slice-major numbering: device 5 is chip 1 of slice 1, at (1,0) */
  int ax[PS_GEOMETRY_MAX_AXES];
  ps_geometry_device_axes(g, 5, ax);
  g_assert_cmpint(ax[1], ==, 1);
  g_assert_cmpint(ax[2], ==, 0);
  g_assert_cmpint(ax[PS_GEOMETRY_SLICE_AXIS], ==, 1);
  g_assert_cmpint(ps_geometry_endpoint_slice(g, 12 + 9), ==, 2);
  g_assert_cmpint(ps_geometry_chip_host(g, 9), ==, 9);
  g_assert_cmpint(ps_geometry_neighbour(g, 5, 0, +1), ==, 4);
  /* within a slice, the torus of that slice */
  expect_route(&n, 4, 5, (const char *const[]){"slice 1 chip (0,0) -> (1,0) +x", NULL});
  /* hosts 1 and 5 share leaf 0; hosts 1 and 9 do not */
  expect_route(&n, 1, 5,
               (const char *const[]){"chips -> host 1 (PCIe)", "dcn nic host 1 up",
                                     "dcn nic host 5 down", "host 5 -> chips (PCIe)", NULL});
  expect_route(&n, 1, 9,
               (const char *const[]){"chips -> host 1 (PCIe)", "dcn nic host 1 up",
                                     "dcn leaf 0 up", "dcn leaf 1 down", "dcn nic host 9 down",
                                     "host 9 -> chips (PCIe)", NULL});
  PsLinkInfo nic, leaf;
  g_assert_true(ps_network_link_info(n.net, ps_geometry_dcn_link(g, PS_LINK_DCN_NIC_UP, 1), &nic));
  g_assert_true(
      ps_network_link_info(n.net, ps_geometry_dcn_link(g, PS_LINK_DCN_LEAF_UP, 0), &leaf));
  g_assert_cmpfloat_with_epsilon(nic.bandwidth_Bps, 12.5e9, 1);
  g_assert_cmpfloat_with_epsilon(leaf.bandwidth_Bps, 8 * 12.5e9, 1);
  g_assert_cmpint(nic.ends.host, ==, 1);
  g_assert_cmpint(leaf.ends.leaf, ==, 0);
  net_clear(&one);
  net_clear(&n);
}

/* ---- timing against the closed form ---------------------------------- */

/* One uncontended message of m bytes along the route from src to dst:
 * sum(latency) + sum(c/B_l) + (n-1) c/B_min, n chunks of c bytes. */
static double message_s(Net *n, int src, int dst, int64_t m)
{
  int route[32];
  int h = ps_network_route(n->net, src, dst, route, 32);
  int64_t c = MIN(m, ps_network_chunk_bytes(n->net));
  int64_t chunks = (m + c - 1) / c;
  g_assert_cmpint(chunks * c, ==, m);
  double t = 0, bmin = INFINITY;
  for (int i = 0; i < h; i++) {
    PsLinkInfo li;
    ps_network_link_info(n->net, route[i], &li);
    t += ps_time_to_s(li.latency) + (double)c / li.bandwidth_Bps;
    bmin = MIN(bmin, li.bandwidth_Bps);
  }
  return t + (double)(chunks - 1) * c / bmin;
}

/* The simulated time of one all-reduce round of S bytes over the first
 * `members` devices. */
static double sim_s(Net *n, const char *algo, int members, int64_t S, double *predict)
{
  g_autofree int *devs = range(members);
  PsCollective *c = coll(n, algo, devs, members, S, 1);
  if (predict)
    *predict = ps_collective_predict_s(c);
  double t = ps_time_to_s(ps_collective_run_round(c));
  ps_collective_free(c);
  return t;
}

#define S_BYTES (INT64_C(64) << 20)

/* Hierarchical over P slices of ring:4 against the slice's own all-reduce
 * plus 2(P-1) DCN steps; returns the simulated time. */
static double check_closed_form(int P, const char *nic_bw)
{
  g_autofree char *sl = g_strdup_printf("slices=%d", P);
  Net one, n;
  net_init(&one, NULL, "ring:4", NULL);
  net_init(&n, NULL, "ring:4", sl, nic_bw, NULL);
  double intra = sim_s(&one, "torus", 4, S_BYTES, NULL);
  double step = message_s(&n, 0, 4, S_BYTES / (4 * P));
  double form = intra + 2 * (P - 1) * step, predict;
  double t = sim_s(&n, "hierarchical", 4 * P, S_BYTES, &predict);
  if (g_test_verbose())
    g_printerr("P=%d %s: simulated %.3f us, closed form %.3f us (slice %.3f + 2(P-1) x %.3f), "
               "prediction %.3f us\n",
               P, nic_bw, t * 1e6, form * 1e6, intra * 1e6, step * 1e6, predict * 1e6);
  g_assert_cmpfloat(fabs(t - form), <=, 0.005 * form);
  g_assert_cmpfloat(fabs(t - predict), <=, 0.005 * predict);
  /* the flat ring stays available and crosses the DCN on its own terms */
  double flat = sim_s(&n, "ring", 4 * P, S_BYTES, NULL);
  g_assert_cmpfloat(flat, >, 0);
  net_clear(&one);
  net_clear(&n);
  return t;
}

static void test_closed_form(void)
{
  check_closed_form(2, "dcn.nic_bandwidth_Bps=12.5e9");
  check_closed_form(4, "dcn.nic_bandwidth_Bps=12.5e9");
}

static void test_dcn_bandwidth(void)
{
  for (int P = 2; P <= 4; P += 2) {
    double fast = check_closed_form(P, "dcn.nic_bandwidth_Bps=12.5e9");
    double slow = check_closed_form(P, "dcn.nic_bandwidth_Bps=6.25e9");
    /* the growth the closed form's cross-slice steps predict */
    Net a, b;
    g_autofree char *sl = g_strdup_printf("slices=%d", P);
    net_init(&a, NULL, "ring:4", sl, "dcn.nic_bandwidth_Bps=12.5e9", NULL);
    net_init(&b, NULL, "ring:4", sl, "dcn.nic_bandwidth_Bps=6.25e9", NULL);
    int64_t m = S_BYTES / (4 * P);
    double grow = 2 * (P - 1) * (message_s(&b, 0, 4, m) - message_s(&a, 0, 4, m));
    g_assert_cmpfloat(grow, >, 0);
    g_assert_cmpfloat(fabs((slow - fast) - grow), <=, 0.005 * grow);
    net_clear(&a);
    net_clear(&b);
  }
}

/* Host 0's NIC at bandwidth_factor f both ways (faults.links' "dcn":
 * "nic"): member 0's cross-slice messages each cross a slow link, so every
 * cross-slice step takes the degraded route's message time; the slice's
 * own all-reduce is unchanged. */
static void test_degraded_nic(void)
{
  const int P = 2;
  const double f = 0.25;
  const int64_t m = S_BYTES / (4 * P);
  Net one, h, d;
  net_init(&one, NULL, "ring:4", NULL);
  net_init(&h, NULL, "ring:4", "slices=2", "dcn.nic_bandwidth_Bps=12.5e9", NULL);
  net_init(&d, NULL, "ring:4", "slices=2", "dcn.nic_bandwidth_Bps=12.5e9", NULL);
  const PsGeometry *g = ps_network_geometry(d.net);
  PsDcnLinkFault fault = {.kind = PS_DCN_FAULT_NIC, .index = 0, .dir = +1, .both_ways = TRUE,
                          .bandwidth_factor = f};
  int links[2];
  g_assert_cmpint(ps_geometry_dcn_fault_links(g, &fault, links), ==, 2);
  g_assert_cmpint(links[0], ==, ps_geometry_dcn_link(g, PS_LINK_DCN_NIC_UP, 0));
  g_assert_cmpint(links[1], ==, ps_geometry_dcn_link(g, PS_LINK_DCN_NIC_DOWN, 0));
  for (int k = 0; k < 2; k++) {
    GError *error = NULL;
    /* a DCN link has no other way round: it may not fail */
    g_assert_false(ps_network_degrade_link(d.net, links[k], 0.0, &error));
    g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
    g_assert_nonnull(strstr(error->message, "no other way round"));
    g_clear_error(&error);
    g_assert_true(ps_network_degrade_link(d.net, links[k], f, &error));
    g_assert_no_error(error);
    PsLinkInfo li;
    g_assert_true(ps_network_link_info(d.net, links[k], &li));
    g_assert_false(li.failed);
    g_assert_cmpfloat(fabs(li.bandwidth_Bps - f * 12.5e9), <=, 1e-6 * 12.5e9);
  }
  double intra = sim_s(&one, "torus", 4, S_BYTES, NULL), predict_h, predict_d;
  double th = sim_s(&h, "hierarchical", 4 * P, S_BYTES, &predict_h);
  double td = sim_s(&d, "hierarchical", 4 * P, S_BYTES, &predict_d);
  double form = intra + 2 * (P - 1) * MAX(message_s(&d, 0, 4, m), message_s(&d, 4, 0, m));
  double grow = 2 * (P - 1) * (message_s(&d, 0, 4, m) - message_s(&h, 0, 4, m));
  g_test_message("NIC x%.2f: simulated %.3f us (healthy %.3f us), closed form %.3f us, "
                 "prediction %.3f us; growth %.3f us, closed form's %.3f us",
                 f, td * 1e6, th * 1e6, form * 1e6, predict_d * 1e6, (td - th) * 1e6, grow * 1e6);
  g_assert_cmpfloat(td, >, th);
  g_assert_cmpfloat(fabs(td - form), <=, 0.005 * form);
  g_assert_cmpfloat(fabs(td - predict_d), <=, 0.005 * predict_d);
  g_assert_cmpfloat(fabs((td - th) - grow), <=, 0.005 * grow);
  /* the prediction follows the degraded bandwidth */
  g_assert_cmpfloat(predict_d - predict_h, >, 0.9 * grow);
  net_clear(&one);
  net_clear(&h);
  net_clear(&d);
}

/* Leaves of one slice's four hosts at 4:1: each leaf's uplink carries a
 * NIC's bandwidth, so the four members' cross-slice messages queue there
 * and each step takes three more messages' time. */
static void test_oversubscription(void)
{
  Net a, b;
  net_init(&a, NULL, "ring:4", "slices=2", "dcn.nic_bandwidth_Bps=12.5e9", "dcn.hosts_per_leaf=4",
           NULL);
  net_init(&b, NULL, "ring:4", "slices=2", "dcn.nic_bandwidth_Bps=12.5e9", "dcn.hosts_per_leaf=4",
           "dcn.oversubscription=4", NULL);
  PsLinkInfo leaf;
  ps_network_link_info(b.net, ps_geometry_dcn_link(ps_network_geometry(b.net),
                                                   PS_LINK_DCN_LEAF_UP, 0), &leaf);
  g_assert_cmpfloat_with_epsilon(leaf.bandwidth_Bps, 12.5e9, 1);
  double predict;
  double open = sim_s(&a, "hierarchical", 8, S_BYTES, NULL);
  double shared = sim_s(&b, "hierarchical", 8, S_BYTES, &predict);
  double grow = 2 * 1 * 3 * (double)(S_BYTES / 8) / 12.5e9;
  if (g_test_verbose())
    g_printerr("1:1 %.3f us, 4:1 %.3f us (prediction %.3f us), growth %.3f us, form %.3f us\n",
               open * 1e6, shared * 1e6, predict * 1e6, (shared - open) * 1e6, grow * 1e6);
  g_assert_cmpfloat(fabs((shared - open) - grow), <=, 0.05 * grow);
  g_assert_cmpfloat(fabs(shared - predict), <=, 0.05 * shared);
  net_clear(&a);
  net_clear(&b);
}

static void test_auto(void)
{
  GError *error = NULL;
  const char *ov[] = {"slices=2", NULL};
  PsTopology *t = ps_topology_load("tpu-v5e-256", ov, &error);
  g_assert_no_error(error);
  Net n;
  net_init(&n, t, NULL, NULL);
  int N = ps_network_devices(n.net);
  g_assert_cmpint(N, ==, 512);
  g_autofree int *devs = range(N);
  PsCollective *c = coll(&n, "auto", devs, N, S_BYTES, 1);
  g_assert_cmpstr(ps_collective_algo(c), ==, "hierarchical");
  ps_collective_free(c);
  /* torus refuses a group spanning slices; hierarchical one within a slice */
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, "torus", devs, N, S_BYTES, 1, 0};
  g_assert_null(ps_collective_new(n.net, &spec, &error));
  g_assert_nonnull(strstr(error->message, "spans slices"));
  g_clear_error(&error);
  spec = (PsCollSpec){PS_COLL_ALL_REDUCE, "hierarchical", devs, 256, S_BYTES, 1, 0};
  g_assert_null(ps_collective_new(n.net, &spec, &error));
  g_assert_nonnull(strstr(error->message, "does not span slices"));
  g_clear_error(&error);
  net_clear(&n);
}

/* ---- the in-slice phases on a torus --------------------------------- */

/* One round of op over the first `members` devices, S bytes, from the
 * network's present time; returns the simulated time (and the prediction,
 * the pieces of member 0's block). */
static double sim_op_s(Net *n, const char *algo, PsCollOp op, int members, int64_t S,
                       double *predict, int *pieces)
{
  g_autofree int *devs = range(members);
  PsCollSpec spec = {op, algo, devs, members, S, 1, 0};
  GError *error = NULL;
  PsCollective *c = ps_collective_new(n->net, &spec, &error);
  g_assert_no_error(error);
  if (predict)
    *predict = ps_collective_predict_s(c);
  if (pieces) {
    int64_t off, len;
    *pieces = ps_collective_block_piece(c, 0, 0, &off, &len);
  }
  ps_time_t t0 = ps_engine_now(n->engine);
  double t = ps_time_to_s(ps_collective_run_round(c) - t0);
  ps_collective_free(c);
  return t;
}

/* P slices of torus:4x4, every chip its own host (no DCN link shared):
 * hierarchical all-reduce of S bytes takes one slice's multiring
 * reduce-scatter, 2(P-1) DCN steps, each one member's part S/(16 P) over
 * its route (for P = 2 two of multiring's four pieces, two messages back
 * to back: the store-and-forward time of their sum), and the slice's
 * multiring all-gather, within 0.5%; the prediction too.  The in-slice
 * phases are multiring's, half the torus algorithm's all-reduce: within
 * 0.5% of the slice's own multiring all-reduce, below 0.6 x its torus
 * one (the in-slice phases the hierarchical plan ran before, two
 * dimensions one after the other). */
static void check_multiring_phases(int P)
{
  g_autofree char *sl = g_strdup_printf("slices=%d", P);
  Net one, n;
  net_init(&one, NULL, "torus:4x4", NULL);
  net_init(&n, NULL, "torus:4x4", sl, "dcn.nic_bandwidth_Bps=12.5e9", "dcn.hosts_per_leaf=64",
           NULL);
  g_assert_cmpint(ps_geometry_hosts(ps_network_geometry(n.net)), ==, 16 * P);
  double rs = sim_op_s(&one, "multiring", PS_COLL_REDUCE_SCATTER, 16, S_BYTES, NULL, NULL);
  double ag = sim_op_s(&one, "multiring", PS_COLL_ALL_GATHER, 16, S_BYTES, NULL, NULL);
  double flat = sim_op_s(&one, "multiring", PS_COLL_ALL_REDUCE, 16, S_BYTES, NULL, NULL);
  double torus = sim_op_s(&one, "torus", PS_COLL_ALL_REDUCE, 16, S_BYTES, NULL, NULL);
  double step = message_s(&n, 0, 16, S_BYTES / (16 * P));
  double form = rs + 2 * (P - 1) * step + ag, predict;
  int pieces;
  double t = sim_op_s(&n, "hierarchical", PS_COLL_ALL_REDUCE, 16 * P, S_BYTES, &predict, NULL);
  g_test_message("P=%d: simulated %.3f us, closed form %.3f us (multiring RS %.3f + 2(P-1) x "
                 "%.3f + AG %.3f), prediction %.3f us; in-slice %.3f us, flat multiring %.3f "
                 "us, torus %.3f us",
                 P, t * 1e6, form * 1e6, rs * 1e6, step * 1e6, ag * 1e6, predict * 1e6,
                 (t - 2 * (P - 1) * step) * 1e6, flat * 1e6, torus * 1e6);
  g_assert_cmpfloat(fabs(t - form), <=, 0.005 * form);
  g_assert_cmpfloat(fabs(t - predict), <=, 0.005 * form);
  g_assert_cmpfloat(t - 2 * (P - 1) * step, <=, 1.005 * flat);
  g_assert_cmpfloat(t - 2 * (P - 1) * step, <, 0.6 * torus);
  /* reduce-scatter leaves a member its part of multiring's four pieces */
  double trs = sim_op_s(&n, "hierarchical", PS_COLL_REDUCE_SCATTER, 16 * P, S_BYTES, NULL,
                        &pieces);
  g_assert_cmpint(pieces, ==, P == 2 ? 2 : 1);
  g_assert_cmpfloat(fabs(trs - (rs + (P - 1) * step)), <=, 0.005 * trs);
  net_clear(&one);
  net_clear(&n);
}

static void test_multiring_phases(void)
{
  check_multiring_phases(2);
  check_multiring_phases(4);
}

/* Two and sixteen tpu-v5e-256 slices, 64 MiB: a host's eight chips send
 * their parts through its PCIe and NIC at once, and the prediction (the
 * busiest link's bytes between the first chunk's arrival and the last
 * one's way on) is within 2% of the events; two slices take no more than
 * one slice's multiring all-reduce and the two DCN steps' NIC time (each
 * host's 8 parts of S/512 bytes at 25 GB/s) with 15% to spare for the
 * DCN's latencies and the ICI hops to and from each host's chip (the
 * in-slice phases by the torus algorithm took 1.9 times that). */
static void test_v5e_pod(void)
{
  for (int slices = 2; slices <= 16; slices += 14) {
    GError *error = NULL;
    g_autofree char *sl = g_strdup_printf("slices=%d", slices);
    const char *ov[] = {sl, NULL};
    PsTopology *t = ps_topology_load("tpu-v5e-256", ov, &error);
    g_assert_no_error(error);
    Net n;
    net_init(&n, t, NULL, NULL);
    double predict;
    double th = sim_op_s(&n, "hierarchical", PS_COLL_ALL_REDUCE, 256 * slices, S_BYTES,
                         &predict, NULL);
    double flat = sim_op_s(&n, "multiring", PS_COLL_ALL_REDUCE, 256, S_BYTES, NULL, NULL);
    double nic = 2 * (slices - 1) * 8.0 * (double)(S_BYTES / (256 * slices)) / 25e9;
    g_test_message("%d x v5e-256: simulated %.3f us, prediction %.3f us; one slice's "
                   "multiring %.3f us, DCN steps' NIC time %.3f us",
                   slices, th * 1e6, predict * 1e6, flat * 1e6, nic * 1e6);
    g_assert_cmpfloat(fabs(th - predict), <=, 0.02 * th);
    if (slices == 2)
      g_assert_cmpfloat(th, <=, 1.15 * (flat + nic));
    net_clear(&n);
  }
}

/* N buffers of count floats uniform in [-1, 1), and per element their
 * sum and sum of magnitudes in double.  (transfer full) */
static float **random_buffers(GRand *rng, int N, int64_t count, double **sum, double **abs_sum)
{
  float **buf = g_new(float *, N);
  *sum = g_new0(double, count);
  *abs_sum = g_new0(double, count);
  for (int m = 0; m < N; m++) {
    buf[m] = g_new(float, count);
    for (int64_t i = 0; i < count; i++) {
      buf[m][i] = (float)g_rand_double_range(rng, -1, 1);
      (*sum)[i] += buf[m][i];
      (*abs_sum)[i] += fabs(buf[m][i]);
    }
  }
  return buf;
}

/* ---- numerics ------------------------------------------------------- */

typedef struct {
  int done;
} Done;

static void on_done(void *ctx, int member, ps_time_t t)
{
  ((Done *)ctx)->done++;
}

static void check_numerics(const char *spec, int P)
{
  g_autofree char *sl = g_strdup_printf("slices=%d", P);
  Net n;
  net_init(&n, NULL, spec, sl, "dcn.nic_bandwidth_Bps=12.5e9", NULL);
  int N = ps_network_devices(n.net);
  const int64_t count = 10007; /* no block divides it evenly */
  g_autofree int *devs = range(N);
  PsCollective *c = coll(&n, "hierarchical", devs, N, count, 4);
  GRand *rng = g_rand_new_with_seed(11);
  double *sum, *abs_sum;
  float **buf = random_buffers(rng, N, count, &sum, &abs_sum);
  Done d = {0};
  for (int m = 0; m < N; m++)
    ps_collective_arrive(c, m, buf[m], on_done, &d);
  ps_engine_run(n.engine, PS_TIME_NEVER);
  g_assert_cmpint(d.done, ==, N);
  for (int64_t i = 0; i < count; i++)
    g_assert_cmpfloat(fabs(buf[0][i] - sum[i]), <=, (N - 1) * FLT_EPSILON * abs_sum[i]);
  for (int m = 1; m < N; m++)
    g_assert_cmpmem(buf[m], count * sizeof(float), buf[0], count * sizeof(float));
  for (int m = 0; m < N; m++)
    g_free(buf[m]);
  g_free(buf);
  g_free(sum);
  g_free(abs_sum);
  g_rand_free(rng);
  ps_collective_free(c);
  net_clear(&n);
}

/* Reduce-scatter then all-gather with float buffers over P slices of
 * torus:4x4, whose in-slice phases are multiring's (four pieces a block):
 * the members' blocks (ps_collective_block_piece) tile the buffer, each
 * holds the double-precision sum within (N-1) eps sum|x|; the all-gather
 * of those blocks leaves every member the same buffer, bit for bit, each
 * element the value its owner held. */
static void check_scatter_gather(int P)
{
  g_autofree char *sl = g_strdup_printf("slices=%d", P);
  Net n;
  net_init(&n, NULL, "torus:4x4", sl, "dcn.nic_bandwidth_Bps=12.5e9", NULL);
  int N = ps_network_devices(n.net);
  const int64_t count = 10007;
  g_autofree int *devs = range(N);
  GError *error = NULL;
  PsCollSpec spec = {PS_COLL_REDUCE_SCATTER, "hierarchical", devs, N, count, 4, 0};
  PsCollective *rs = ps_collective_new(n.net, &spec, &error);
  g_assert_no_error(error);
  spec.op = PS_COLL_ALL_GATHER;
  PsCollective *ag = ps_collective_new(n.net, &spec, &error);
  g_assert_no_error(error);
  GRand *rng = g_rand_new_with_seed(13);
  double *sum, *abs_sum;
  float **buf = random_buffers(rng, N, count, &sum, &abs_sum);
  Done d = {0};
  for (int m = 0; m < N; m++)
    ps_collective_arrive(rs, m, buf[m], on_done, &d);
  ps_engine_run(n.engine, PS_TIME_NEVER);
  g_assert_cmpint(d.done, ==, N);
  /* the blocks tile [0, count): each element owned once */
  int *owner = g_new(int, count), max_pieces = 0;
  for (int64_t i = 0; i < count; i++)
    owner[i] = -1;
  for (int m = 0; m < N; m++) {
    int64_t off, len;
    int pieces = ps_collective_block_piece(rs, m, 0, &off, &len);
    max_pieces = MAX(max_pieces, pieces);
    for (int k = 0; k < pieces; k++) {
      ps_collective_block_piece(rs, m, k, &off, &len);
      for (int64_t i = off; i < off + len; i++) {
        g_assert_cmpint(owner[i], ==, -1);
        owner[i] = m;
        g_assert_cmpfloat(fabs(buf[m][i] - sum[i]), <=, (N - 1) * FLT_EPSILON * abs_sum[i]);
      }
    }
  }
  for (int64_t i = 0; i < count; i++)
    g_assert_cmpint(owner[i], >=, 0);
  /* multiring's four pieces, two to a part over two slices */
  g_assert_cmpint(max_pieces, >, 1);
  g_autofree float *want = g_new(float, count);
  for (int64_t i = 0; i < count; i++)
    want[i] = buf[owner[i]][i];
  d.done = 0;
  for (int m = 0; m < N; m++)
    ps_collective_arrive(ag, m, buf[m], on_done, &d);
  ps_engine_run(n.engine, PS_TIME_NEVER);
  g_assert_cmpint(d.done, ==, N);
  for (int m = 0; m < N; m++)
    g_assert_cmpmem(buf[m], count * sizeof(float), want, count * sizeof(float));
  for (int m = 0; m < N; m++)
    g_free(buf[m]);
  g_free(buf);
  g_free(owner);
  g_free(sum);
  g_free(abs_sum);
  g_rand_free(rng);
  ps_collective_free(rs);
  ps_collective_free(ag);
  net_clear(&n);
}

static void test_numerics(void)
{
  check_numerics("torus:2x2", 2);
  check_numerics("torus:2x2", 3);
  check_numerics("ring:4", 4);
  /* multiring within each slice: parts of two of its pieces (2 slices),
   * and parts across pieces' ends (3 slices) */
  check_numerics("torus:4x4", 2);
  check_numerics("torus:4x4", 3);
  check_scatter_gather(2);
  check_scatter_gather(3);
}

/* ---- the replicate strategy ------------------------------------------ */

static const char *exp_json =
    "{\"name\": \"multislice\", \"topology\": \"tpu-v5e-8\", \"model\": \"mlp\","
    " \"global_batch\": 64, \"steps\": 4, \"steps_per_run\": 2,"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 1024,"
    "             \"host_cost_per_example_s\": 0},"
    " \"optimizer\": {\"kind\": \"sgd\", \"learning_rate\": 0.05, \"momentum\": 0},"
    " \"numerics\": {\"enabled\": true, \"precision\": \"f32\", \"seed\": 7,"
    "                \"evaluate\": false}}";

static char *write_experiment(void)
{
  return write_json(exp_json);
}

/* A process metadata event's value in a trace's events (-1 or NULL when
 * missing). */
static json_object *process_meta(json_object *events, int pid, const char *what)
{
  for (size_t i = 0; i < json_object_array_length(events); i++) {
    json_object *e = json_object_array_get_idx(events, i), *v, *args;
    if (json_object_object_get_ex(e, "name", &v) &&
        strcmp(json_object_get_string(v), what) == 0 &&
        json_object_object_get_ex(e, "pid", &v) && json_object_get_int(v) == pid &&
        json_object_object_get_ex(e, "args", &args))
      return args;
  }
  return NULL;
}

static int sort_of(json_object *events, int pid)
{
  json_object *args = process_meta(events, pid, "process_sort_index"), *v;
  g_assert_nonnull(args);
  g_assert_true(json_object_object_get_ex(args, "sort_index", &v));
  return json_object_get_int(v);
}

/* 2 x tpu-v5e-8 (chips 0..7 on host 0, 8..15 on host 1; chip c is pid
 * c + 1, host h pid 100000 + h): the DCN's links, then the other links,
 * then slice 0's chips and host, then slice 1's; each slice's processes
 * labelled with it. */
static void check_trace_order(const char *path)
{
  json_object *root = json_object_from_file(path), *events;
  g_assert_nonnull(root);
  g_assert_true(json_object_object_get_ex(root, "traceEvents", &events));
  int order[] = {99998, 99999, 1, 8, 100000, 9, 16, 100001};
  for (size_t i = 0; i + 1 < G_N_ELEMENTS(order); i++)
    g_assert_cmpint(sort_of(events, order[i]), <, sort_of(events, order[i + 1]));
  json_object *args = process_meta(events, 99998, "process_name"), *v;
  g_assert_true(args && json_object_object_get_ex(args, "name", &v));
  g_assert_cmpstr(json_object_get_string(v), ==, "dcn links");
  static const int pids[] = {9, 100001};
  for (int i = 0; i < 2; i++) {
    args = process_meta(events, pids[i], "process_labels");
    g_assert_true(args && json_object_object_get_ex(args, "labels", &v));
    g_assert_cmpstr(json_object_get_string(v), ==, "slice 1");
  }
  json_object_put(root);
}

static void test_replicate(void)
{
  g_autofree char *path = write_experiment();
  static const char *const algos[] = {"collective.algorithm=hierarchical",
                                      "collective.algorithm=auto", NULL};
  for (int i = 0; algos[i]; i++) {
    const char *ov[] = {"topology.slices=2", algos[i], NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load(path, ov, &error);
    g_assert_no_error(error);
    g_assert_cmpint(ps_topology_devices(e->topology), ==, 16);
    PsSummary s;
    g_autofree char *trace = g_strconcat(path, ".trace.json", NULL);
    PsRunOptions opt = {.keep_params = TRUE, .trace_path = i == 0 ? trace : NULL,
                        .trace_links = TRUE};
    g_assert_true(ps_run(e, &opt, &s, &error));
    if (i == 0) {
      /* each slice a run of processes, the DCN's links tracks */
      g_autofree char *text = slurp(trace);
      g_assert_nonnull(strstr(text, "\"slice 1 chip 8 (tpu-v5e-8, host 1)\""));
      g_assert_nonnull(strstr(text, "\"slice 1 host 1\""));
      g_assert_nonnull(strstr(text, "\"dcn nic host 0 up\""));
      check_trace_order(trace);
      g_unlink(trace);
    }
    g_assert_no_error(error);
    g_assert_true(s.has_numerics);
    g_assert_cmpfloat(s.replica_divergence, ==, 0.0);
    g_assert_true(isfinite(s.loss_last));
    g_assert_cmpfloat(s.loss_last, <, s.loss_first);
    ps_summary_clear(&s);
    ps_experiment_free(e);
  }
  g_unlink(path);
}

/* ---- pipeline stages and shard axes across slices ---------------------- */

static const char *pipe_json =
    "{\"name\": \"pipe\", \"topology\": \"tpu-v5e-4\", \"model\": \"mlp\","
    " \"global_batch\": 64, \"steps\": 3, \"steps_per_run\": 1,"
    " \"strategy\": {\"kind\": \"pipeline\", \"stages\": 2, \"micro_batches\": 1},"
    " \"input\": {\"source\": \"synthetic\", \"synthetic_examples\": 1024,"
    "             \"host_cost_per_example_s\": 0},"
    " \"numerics\": {\"enabled\": false, \"precision\": \"bf16\"}}";

/* The bytes column of the link named `name` in a links CSV. */
static double csv_bytes(const char *csv, const char *name)
{
  g_autofree char *text = slurp(csv);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_autofree char *quoted = g_strdup_printf(",\"%s\"", name);
  for (int i = 0; lines[i]; i++)
    if (g_str_has_suffix(lines[i], quoted)) {
      g_auto(GStrv) f = g_strsplit(lines[i], ",", -1);
      return g_ascii_strtod(f[14], NULL);
    }
  g_error("no link '%s' in %s", name, csv);
  return 0;
}

/* Runs the 2-stage pipeline (one micro-batch) with overrides; its step
 * time, and the sum over its sends (each once a step) of their
 * uncontended message times on its own topology. */
static double pipe_run(const char *path, const char *const *ov, const char *csv, double *msgs,
                       double *act_bytes)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(path, ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  Net n = {.engine = ps_engine_new()};
  n.net = ps_network_new(n.engine, e->topology, PS_NETWORK_DEFAULT_CHUNK);
  *msgs = 0;
  for (int d = 0; d < p->n_devices; d++) {
    const PsProgram *pr = ps_plan_program(p, d);
    for (int i = 0; i < pr->n_ops; i++)
      if (pr->ops[i].kind == PS_OP_SEND) {
        *msgs += message_s(&n, d, pr->ops[i].peer, (int64_t)pr->ops[i].bytes);
        if (d == 0)
          *act_bytes = pr->ops[i].bytes;
      }
  }
  ps_network_free(n.net);
  ps_engine_free(n.engine);
  PsRunOptions opt = {.links_csv = csv};
  PsSummary s;
  g_assert_true(ps_run(e, &opt, &s, &error));
  g_assert_no_error(error);
  double t = s.step_time_s;
  ps_summary_clear(&s);
  ps_plan_free(p);
  ps_experiment_free(e);
  return t;
}

/* Two stages on two one-chip slices against the same two stages on
 * neighbouring chips of one slice: the activations cross the DCN (host
 * 0's NIC up carries them, host 1's their gradients), and the step grows
 * by exactly the DCN messages' closed-form time over the ICI ones'
 * (uncontended: one message on the route at a time). */
static void test_pipeline(void)
{
  g_autofree char *path = write_json(pipe_json);
  g_autofree char *csv = g_strconcat(path, ".links.csv", NULL);
  const char *one[] = {"topology.torus.dims=[2,1]", NULL};
  const char *two[] = {"topology.torus.dims=[1,1]", "topology.slices=2", NULL};
  double m1, m2, act = 0;
  double t1 = pipe_run(path, one, NULL, &m1, &act);
  double t2 = pipe_run(path, two, csv, &m2, &act);
  if (g_test_verbose())
    g_printerr("one slice %.3f us, two %.3f us: grew %.3f us, closed form %.3f us\n", t1 * 1e6,
               t2 * 1e6, (t2 - t1) * 1e6, (m2 - m1) * 1e6);
  g_assert_cmpfloat(m2 - m1, >, 0);
  g_assert_cmpfloat(fabs((t2 - t1) - (m2 - m1)), <=, 0.005 * (m2 - m1));
  /* 3 steps, one micro-batch each: the activations (and labels) once a
   * step up host 0's NIC, the gradients of the same tensor (no labels)
   * up host 1's */
  g_assert_cmpfloat(csv_bytes(csv, "dcn nic host 0 up"), ==, 3 * act);
  g_assert_cmpfloat(csv_bytes(csv, "dcn nic host 1 up"), ==, 3 * (act - 4.0 * 64));
  g_unlink(csv);
  g_unlink(path);
}

/* The shard strategy's data axis on two slices (tensor 4 in each of two
 * tpu-v5e-4): data takes the slices, so each data all-reduce joins one
 * device of each slice over the DCN; auto picks hierarchical, whose
 * round with one member per slice is 2(P-1) messages of a half each. */
static void test_shard(void)
{
  const char *ov[] = {"topology=tpu-v5e-4", "topology.slices=2", "strategy.mesh.data=2",
                      "collective.algorithm=auto", NULL};
  GError *error = NULL;
  PsExperiment *e =
      ps_experiment_load("tests/data/good/experiments/shard-mlp-v4-8.json", ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_autoptr(PsGeometry) g = ps_geometry_new(e->topology);
  Net n = {.engine = ps_engine_new()};
  n.net = ps_network_new(n.engine, e->topology, PS_NETWORK_DEFAULT_CHUNK);
  int data = 0;
  for (int c = 0; c < p->n_colls; c++) {
    const PsPlanColl *pc = &p->colls[c];
    if (pc->axis != PS_AXIS_DATA) {
      /* the tensor axis stays within a slice */
      for (int m = 1; m < pc->n_members; m++)
        g_assert_cmpint(ps_geometry_endpoint_slice(g, pc->members[m]), ==,
                        ps_geometry_endpoint_slice(g, pc->members[0]));
      continue;
    }
    data++;
    g_assert_cmpint(pc->n_members, ==, 2);
    g_assert_cmpint(ps_geometry_endpoint_slice(g, pc->members[0]), !=,
                    ps_geometry_endpoint_slice(g, pc->members[1]));
    /* the bucket's size in whole chunks a half (message_s's closed form) */
    int64_t unit = 2 * ps_network_chunk_bytes(n.net);
    int64_t bytes = MAX(pc->count * pc->elem_bytes / unit, 1) * unit;
    double form = message_s(&n, pc->members[0], pc->members[1], bytes / 2) +
                  message_s(&n, pc->members[1], pc->members[0], bytes / 2);
    /* auto: butterfly, the two members exchanging whole buffers at once,
     * one message each way (one latency less than the ring's two steps) */
    double swap = MAX(message_s(&n, pc->members[0], pc->members[1], bytes),
                      message_s(&n, pc->members[1], pc->members[0], bytes));
    g_assert_cmpfloat(swap, <, form);
    /* one member a slice: hierarchical's cross-slice ring of two, the
     * closed form's two messages */
    for (int k = 0; k < 2; k++) {
      PsCollective *cl = coll(&n, k ? "hierarchical" : "auto", pc->members, 2, bytes, 1);
      const char *algo = ps_collective_algo(cl);
      ps_time_t t0 = ps_engine_now(n.engine);
      double t = ps_time_to_s(ps_collective_run_round(cl) - t0);
      if (g_test_verbose())
        g_printerr("%s (%s): %" G_GINT64_FORMAT " bytes, %.3f us, closed form %.3f us\n",
                   pc->name, algo, bytes, t * 1e6, form * 1e6);
      g_assert_cmpstr(algo, ==, k ? "hierarchical" : "butterfly");
      double want = k ? form : swap;
      g_assert_cmpfloat(fabs(t - want), <=, 0.005 * want);
      ps_collective_free(cl);
    }
  }
  g_assert_cmpint(data, >, 0);
  ps_network_free(n.net);
  ps_engine_free(n.engine);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* ---- bad input ------------------------------------------------------- */

static void expect_exit2(const char *const *args, const char *key)
{
  const char *argv[16] = {podsim_path()};
  for (int i = 0; args[i]; i++)
    argv[i + 1] = args[i];
  g_autofree char *err = NULL;
  g_assert_cmpint(podsim_spawn(argv, NULL, &err), ==, 2);
  if (!strstr(err, key))
    g_error("expected '%s' in: %s", key, err);
}

static void test_errors(void)
{
  expect_exit2((const char *const[]){"collective", "-t", "tpu-v5e-8", "--set", "slices=0",
                                     "-b", "1M", NULL},
               "slices");
  expect_exit2((const char *const[]){"collective", "-t", "tpu-v5e-8", "--set", "slices=-2",
                                     "-b", "1M", NULL},
               "slices");
  expect_exit2((const char *const[]){"collective", "-t", "tpu-v5e-8", "--set", "slices=2",
                                     "--set", "dcn.nic_bandwidth_Bps=0", "-b", "1M", NULL},
               "dcn.nic_bandwidth_Bps");
  expect_exit2((const char *const[]){"collective", "-t", "tpu-v5e-8", "--set", "slices=2",
                                     "--set", "dcn.oversubscription=0.5", "-b", "1M", NULL},
               "dcn.oversubscription");
  /* a generation without a DCN figure needs one for several slices */
  expect_exit2((const char *const[]){"collective", "-t", "tpu-v4-8", "--set", "slices=2", "-b",
                                     "1M", NULL},
               "dcn.nic_bandwidth_Bps");
  g_autofree char *path = write_experiment();
  expect_exit2((const char *const[]){"run", path, "--set", "topology.slices=0", NULL},
               "slices: must be between 1");
  g_unlink(path);
  /* a pipeline's stages in equal runs over the slices, filling them */
  g_autofree char *pipe = write_json(pipe_json);
  expect_exit2((const char *const[]){"run", pipe, "--set", "topology.slices=4", NULL},
               "strategy.stages: 2 stages do not divide over the 4 slices");
  expect_exit2((const char *const[]){"run", pipe, "--set", "topology.slices=2", "--set",
                                     "strategy.replicas=1", NULL},
               "strategy.replicas: a pipeline across 2 slices fills them");
  g_unlink(pipe);
  /* a topology file naming its slices: copies of one, else the first
   * that differs and where */
  static const char *const disagree[][2] = {
      {"[\"tpu-v5e-8\", \"tpu-v5e-8\", \"tpu-v5e-16\"]",
       "slices[2]: 'tpu-v5e-16' is not the slice 'tpu-v5e-8' is (they differ at torus.dims)"},
      {"[\"tpu-v5e-16\", \"tpu-v6e-16\"]",
       "slices[1]: 'tpu-v6e-16' is not the slice 'tpu-v5e-16' is (they differ at generation)"}};
  for (size_t i = 0; i < G_N_ELEMENTS(disagree); i++) {
    g_autofree char *json = g_strdup_printf("{\"name\": \"mixed\", \"slices\": %s}",
                                            disagree[i][0]);
    g_autofree char *topo = write_json(json);
    expect_exit2((const char *const[]){"collective", "-t", topo, "-b", "1M", NULL},
                 disagree[i][1]);
    g_unlink(topo);
  }
  /* a shard mesh none of whose axes the slices divide */
  expect_exit2((const char *const[]){"run", "tests/data/good/experiments/shard-mlp-v4-8.json",
                                     "--set", "topology=tpu-v5e-4", "--set", "topology.slices=4",
                                     "--set", "strategy.mesh.data=2", "--set",
                                     "strategy.mesh.fsdp=2", "--set", "strategy.mesh.tensor=2",
                                     "--set", "strategy.mesh.sequence=2", NULL},
               "strategy.mesh: no axis divides over the 4 slices");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim_init();
  g_test_add_func("/multislice/topology", test_topology);
  g_test_add_func("/multislice/named-slices", test_named_slices);
  g_test_add_func("/multislice/closed-form", test_closed_form);
  g_test_add_func("/multislice/dcn-bandwidth", test_dcn_bandwidth);
  g_test_add_func("/multislice/degraded-nic", test_degraded_nic);
  g_test_add_func("/multislice/oversubscription", test_oversubscription);
  g_test_add_func("/multislice/auto", test_auto);
  g_test_add_func("/multislice/multiring-phases", test_multiring_phases);
  g_test_add_func("/multislice/v5e-pod", test_v5e_pod);
  g_test_add_func("/multislice/numerics", test_numerics);
  g_test_add_func("/multislice/replicate", test_replicate);
  g_test_add_func("/multislice/pipeline", test_pipeline);
  g_test_add_func("/multislice/shard", test_shard);
  g_test_add_func("/multislice/errors", test_errors);
  return g_test_run();
}

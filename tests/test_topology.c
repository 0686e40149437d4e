/* test_topology.c: the slice's geometry (hw/topology.h) against plain
 * references written here.
 *
 * - coordinates: chip -> coordinates -> chip and device -> (chip, core) ->
 *   device round-trip, coordinates within the dims, x fastest;
 * - neighbours: ps_geometry_neighbour equals a plain loop over the
 *   coordinates (wrap on rings, none off mesh edges or along a dimension
 *   of size 1, the twist moving the long coordinates by k on a short
 *   dimension's wrap), and going back the other way returns;
 * - host trays: each host owns exactly one box of host.tray chips, its
 *   first chip the box's corner, the boxes tile the torus; without
 *   host.tray, chip c is on host c / chips_per_host; io refuses trays that
 *   do not tile or do not hold host.chips;
 * - zones: the link-id ranges are disjoint, in table order and cover every
 *   id; every link lies in the zone of its kind and its name is the text
 *   users see;
 * - routes: between chips, as many hops as the torus distance (the
 *   shortest way round each ring, straight along a mesh), each link
 *   leaving where the previous one arrived; host routes start or end on
 *   their PCIe link;
 * - link-fault checks: the messages of ps_geometry_check_link_faults. */
#include "hw/network.h"
#include "hw/topology.h"

#include <string.h>

G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsTopology, ps_topology_free)

#define N_SAMPLES 7

/* A shorthand topology with up to four overrides (NULL-terminated). */
static PsTopology *topo(const char *spec, const char *o1, const char *o2, const char *o3,
                        const char *o4)
{
  const char *ov[] = {o1, o2, o3, o4, NULL};
  GError *error = NULL;
  PsTopology *t = ps_network_shorthand(spec, ov, &error);
  g_assert_no_error(error);
  g_assert_nonnull(t);
  return t;
}

/* The topologies most tests run over: rings, tori, meshes, mixed wrap,
 * multi-core chips, a twisted torus. */
static PsTopology *sample(int i)
{
  switch (i) {
  case 0: return topo("ring:8", NULL, NULL, NULL, NULL);
  case 1: return topo("ring:5", "torus.wrap=[false]", NULL, NULL, NULL);
  case 2: return topo("torus:4x3", NULL, NULL, NULL, NULL);
  case 3: return topo("torus:4x4x2", "torus.wrap=[true,false,true]", "chip.cores=2", NULL, NULL);
  case 4: return topo("torus:3x1x4", "torus.wrap=[false,false,false]", NULL, NULL, NULL);
  case 5: return topo("torus:4x4x8", "torus.twisted=true", NULL, NULL, NULL);
  case 6: return topo("torus:2x4x4", "torus.twisted=true", "chip.cores=2", "chip.megacore=true",
                      NULL);
  default: return NULL;
  }
}

static void test_coords(void)
{
  for (int i = 0; i < N_SAMPLES; i++) {
    g_autoptr(PsTopology) t = sample(i);
    g_autoptr(PsGeometry) g = ps_geometry_new(t);
    int chips = ps_geometry_chips(g);
    g_assert_cmpint(chips, ==, ps_topology_chips(t));
    for (int c = 0; c < chips; c++) {
      int xyz[PS_MAX_DIMS];
      ps_geometry_chip_coords(g, c, xyz);
      int expect = 0;
      for (int d = PS_MAX_DIMS - 1; d >= 0; d--) {
        int n = d < t->ndims ? t->dims[d] : 1;
        g_assert_cmpint(xyz[d], >=, 0);
        g_assert_cmpint(xyz[d], <, n);
        expect = expect * n + xyz[d];
      }
      g_assert_cmpint(expect, ==, c);
      g_assert_cmpint(ps_geometry_chip_at(g, xyz), ==, c);
    }
    int per = ps_geometry_devices_per_chip(g);
    g_assert_cmpint(ps_geometry_devices(g), ==, ps_topology_devices(t));
    for (int d = 0; d < ps_geometry_devices(g); d++) {
      int chip = ps_geometry_device_chip(g, d), core = ps_geometry_device_core(g, d);
      g_assert_cmpint(chip, ==, d / per);
      g_assert_cmpint(ps_geometry_device_at(g, chip, core), ==, d);
      int ax[PS_GEOMETRY_MAX_AXES], xyz[PS_MAX_DIMS];
      ps_geometry_device_axes(g, d, ax);
      ps_geometry_chip_coords(g, chip, xyz);
      g_assert_cmpint(ax[0], ==, core);
      for (int k = 1; k < ps_geometry_n_axes(g); k++) {
        g_assert_cmpint(ax[k], ==, xyz[k - 1]);
        g_assert_cmpint(ax[k], <, ps_geometry_axis_extent(g, k));
      }
    }
  }
}

/* The neighbour by the definitions alone. */
static int plain_neighbour(const PsTopology *t, int chip, int dim, int dir)
{
  int c[PS_MAX_DIMS] = {0}, rest = chip;
  for (int d = 0; d < t->ndims; d++) {
    c[d] = rest % t->dims[d];
    rest /= t->dims[d];
  }
  int n = t->dims[dim];
  if (n == 1)
    return -1;
  int x = c[dim] + dir;
  if (x < 0 || x >= n) {
    if (!t->wrap[dim])
      return -1;
    x = (x + n) % n;
    int k = t->twisted ? MIN(t->dims[0], MIN(t->dims[1], t->dims[2])) : 0;
    if (t->twisted && n == k)
      for (int d = 0; d < t->ndims; d++)
        if (t->dims[d] != k)
          c[d] = (c[d] + k) % t->dims[d];
  }
  c[dim] = x;
  int out = 0;
  for (int d = t->ndims - 1; d >= 0; d--)
    out = out * t->dims[d] + c[d];
  return out;
}

static void test_neighbours(void)
{
  int twisted_moves = 0;
  for (int i = 0; i < N_SAMPLES; i++) {
    g_autoptr(PsTopology) t = sample(i);
    g_autoptr(PsGeometry) g = ps_geometry_new(t);
    for (int c = 0; c < ps_geometry_chips(g); c++)
      for (int d = 0; d < t->ndims; d++)
        for (int s = -1; s <= 1; s += 2) {
          int n = ps_geometry_neighbour(g, c, d, s);
          g_assert_cmpint(n, ==, plain_neighbour(t, c, d, s));
          int link = ps_geometry_ici_link(g, c, d, s);
          g_assert_cmpint(link >= 0, ==, n >= 0);
          if (n < 0)
            continue;
          g_assert_cmpint(ps_geometry_neighbour(g, n, d, -s), ==, c);
          PsLinkEnds e;
          g_assert_true(ps_geometry_link_ends(g, link, &e));
          g_assert_cmpint(e.kind, ==, PS_LINK_ICI);
          g_assert_cmpint(e.chip, ==, c);
          g_assert_cmpint(e.to_chip, ==, n);
          g_assert_cmpint(e.dim, ==, d);
          g_assert_cmpint(e.dir, ==, s);
          int a[PS_MAX_DIMS], b[PS_MAX_DIMS];
          ps_geometry_chip_coords(g, c, a);
          ps_geometry_chip_coords(g, n, b);
          for (int o = 0; o < t->ndims; o++)
            if (o != d && a[o] != b[o])
              twisted_moves++;
        }
  }
  /* the twist moved some long coordinate, so the comparison saw it */
  g_assert_cmpint(twisted_moves, >, 0);
}

/* Every host owns one box of the tray's shape at its first chip. */
static void check_trays(const PsGeometry *g, const PsTopology *t, const int tray[PS_MAX_DIMS])
{
  int hosts = ps_geometry_hosts(g), chips = ps_geometry_chips(g);
  g_autofree int *count = g_new0(int, hosts);
  for (int c = 0; c < chips; c++) {
    int h = ps_geometry_chip_host(g, c);
    g_assert_cmpint(h, >=, 0);
    g_assert_cmpint(h, <, hosts);
    count[h]++;
    int a[PS_MAX_DIMS], f[PS_MAX_DIMS];
    ps_geometry_chip_coords(g, c, a);
    ps_geometry_chip_coords(g, ps_geometry_host_first_chip(g, h), f);
    for (int d = 0; d < PS_MAX_DIMS; d++) {
      g_assert_cmpint(f[d] % tray[d], ==, 0);
      g_assert_cmpint(a[d] - f[d], >=, 0);
      g_assert_cmpint(a[d] - f[d], <, tray[d]);
    }
  }
  for (int h = 0; h < hosts; h++)
    g_assert_cmpint(count[h], ==, t->chips_per_host);
}

static void test_trays(void)
{
  /* a v4-like host: 2x2x1 trays on a 4x4x4 torus (not runs of 4) */
  g_autoptr(PsTopology) t =
      topo("torus:4x4x4", "host.chips=4", "host.tray=[2,2,1]", NULL, NULL);
  g_autoptr(PsGeometry) g = ps_geometry_new(t);
  g_assert_cmpint(ps_geometry_hosts(g), ==, 16);
  int tray[PS_MAX_DIMS];
  g_assert_true(ps_geometry_tray(g, tray));
  g_assert_cmpint(tray[0], ==, 2);
  g_assert_cmpint(tray[1], ==, 2);
  g_assert_cmpint(tray[2], ==, 1);
  check_trays(g, t, tray);
  /* chip (2,1,0) = 6 is on the second tray along x; (0,2,0) = 8 on the
   * first of the second row; hosts x fastest */
  g_assert_cmpint(ps_geometry_chip_host(g, 6), ==, 1);
  g_assert_cmpint(ps_geometry_chip_host(g, 8), ==, 2);
  g_assert_cmpint(ps_geometry_host_first_chip(g, 3), ==, 10);
  /* host 3's PCIe meets the torus at chip 10 */
  int dev = ps_geometry_device_at(g, 0, 0), host3 = ps_geometry_devices(g) + 3;
  int out[16];
  PsRoute r = {out, 16, 0, NULL};
  ps_geometry_route(g, host3, dev, &r);
  g_assert_cmpint(r.n, ==, 1 + 2 + 2);
  g_assert_cmpint(out[0], ==, ps_geometry_pcie_link(g, 3, FALSE));
  PsLinkEnds e;
  g_assert_true(ps_geometry_link_ends(g, out[1], &e));
  g_assert_cmpint(e.chip, ==, 10);

  /* without host.tray: runs of numbers, c / chips_per_host */
  g_autoptr(PsTopology) u = topo("torus:4x4x4", "host.chips=8", NULL, NULL, NULL);
  g_autoptr(PsGeometry) h = ps_geometry_new(u);
  for (int c = 0; c < ps_geometry_chips(h); c++)
    g_assert_cmpint(ps_geometry_chip_host(h, c), ==, c / 8);
  g_assert_true(ps_geometry_tray(h, tray)); /* 4x2x1, a box */
  g_assert_cmpint(tray[0] * 10 + tray[1], ==, 42);
  check_trays(h, u, tray);
  /* runs of 8 on a 6x4 mesh are no box */
  g_autoptr(PsTopology) v = topo("torus:6x4", "host.chips=8", NULL, NULL, NULL);
  g_autoptr(PsGeometry) w = ps_geometry_new(v);
  g_assert_false(ps_geometry_tray(w, tray));
  g_assert_cmpint(ps_geometry_chip_host(w, 7), ==, 0);
  g_assert_cmpint(ps_geometry_chip_host(w, 8), ==, 1);
}

static void expect_topology_error(const char *o1, const char *o2, const char *needle)
{
  const char *ov[] = {o1, o2, NULL};
  GError *error = NULL;
  PsTopology *t = ps_network_shorthand("torus:4x6", ov, &error);
  g_assert_null(t);
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  if (!strstr(error->message, needle))
    g_error("\"%s\" does not say \"%s\"", error->message, needle);
  g_error_free(error);
}

static void test_tray_errors(void)
{
  expect_topology_error("host.chips=3", "host.tray=[3,1]",
                        "trays of 3 chips along x do not tile torus.dims 4x6 (4 chips along x)");
  expect_topology_error("host.chips=4", "host.tray=[1,4]", "4 chips along y do not tile");
  expect_topology_error("host.chips=4", "host.tray=[2,3]", "holds 6 chips but host.chips is 4");
  expect_topology_error("host.chips=4", "host.tray=[2,2,1]", "must be an array of 2 integers");
  expect_topology_error("host.chips=4", "host.tray=[0,4]", "between 1 and");
  /* a slice smaller than a tray is one host */
  g_autoptr(PsTopology) t = topo("torus:2x1", "host.chips=4", "host.tray=[2,2]", NULL, NULL);
  g_assert_cmpint(ps_topology_hosts(t), ==, 1);
  g_assert_cmpint(t->host_tray[0] * 10 + t->host_tray[1], ==, 21);
}

static void test_zones(void)
{
  for (int i = 0; i < N_SAMPLES; i++) {
    g_autoptr(PsTopology) t = sample(i);
    g_autoptr(PsGeometry) g = ps_geometry_new(t);
    int next = 0, kinds = 0;
    for (int z = 0; z < ps_geometry_n_zones(g); z++) {
      const PsZone *zone = ps_geometry_zone(g, z);
      g_assert_cmpint(zone->first_link, ==, next);
      g_assert_cmpint(zone->n_links, >=, 0);
      g_assert_cmpint(zone->parent, <, z);
      g_assert_nonnull(ps_geometry_zone_kind_name(zone->kind));
      kinds |= 1 << zone->kind;
      next += zone->n_links;
    }
    /* every kind; the DCN only where there are slices to join */
    g_assert_cmpint(kinds, ==, ((1 << PS_ZONE_N_KINDS) - 1) & ~(t->slices > 1 ? 0 : 1 << PS_ZONE_DCN));
    g_assert_cmpint(next, ==, ps_geometry_n_links(g));
    g_assert_cmpint(ps_geometry_link_zone(g, next), ==, -1);
    static const PsZoneKind zone_of_kind[] = {PS_ZONE_TORUS, PS_ZONE_CHIP, PS_ZONE_PCIE,
                                              PS_ZONE_PCIE, PS_ZONE_DCN, PS_ZONE_DCN,
                                              PS_ZONE_DCN, PS_ZONE_DCN};
    for (int l = 0; l < next; l++) {
      int z = ps_geometry_link_zone(g, l);
      const PsZone *zone = ps_geometry_zone(g, z);
      g_assert_cmpint(l, >=, zone->first_link);
      g_assert_cmpint(l, <, zone->first_link + zone->n_links);
      PsLinkEnds e;
      g_autofree char *name = ps_geometry_link_name(g, l);
      if (!ps_geometry_link_ends(g, l, &e)) {
        g_assert_cmpint(zone->kind, ==, PS_ZONE_TORUS); /* a mesh edge, a dim of 1 */
        g_assert_true(g_str_has_prefix(name, "no link "));
        continue;
      }
      g_assert_cmpint(zone_of_kind[e.kind], ==, zone->kind);
      g_assert_true(g_str_has_prefix(name, e.kind <= PS_LINK_ON_CHIP ? "chip (" : e.kind ==
                                     PS_LINK_PCIE_DOWN ? "host " : "chips -> host "));
    }
  }
  g_autoptr(PsTopology) t = sample(3);
  g_autoptr(PsGeometry) g = ps_geometry_new(t);
  int c[PS_MAX_DIMS] = {1, 2, 1};
  int chip = ps_geometry_chip_at(g, c);
  g_autofree char *up = ps_geometry_link_name(g, ps_geometry_ici_link(g, chip, 1, +1));
  g_assert_cmpstr(up, ==, "chip (1,2,1) -> (1,3,1) +y");
  g_autofree char *core = ps_geometry_link_name(g, ps_geometry_on_chip_link(g, chip, 1, 0));
  g_assert_cmpstr(core, ==, "chip (1,2,1) core 1 -> core 0");
  g_autofree char *pcie = ps_geometry_link_name(g, ps_geometry_pcie_link(g, 3, TRUE));
  g_assert_cmpstr(pcie, ==, "chips -> host 3 (PCIe)");
}

/* The torus distance between chips a and b, ring by ring. */
static int torus_distance(const PsGeometry *g, const PsTopology *t, int a, int b)
{
  int ca[PS_MAX_DIMS], cb[PS_MAX_DIMS], hops = 0;
  ps_geometry_chip_coords(g, a, ca);
  ps_geometry_chip_coords(g, b, cb);
  for (int d = 0; d < t->ndims; d++) {
    int dx = ABS(ca[d] - cb[d]);
    hops += t->wrap[d] ? MIN(dx, t->dims[d] - dx) : dx;
  }
  return hops;
}

static void test_routes(void)
{
  for (int i = 0; i < 5; i++) { /* the samples without a twist */
    g_autoptr(PsTopology) t = sample(i);
    g_autoptr(PsGeometry) g = ps_geometry_new(t);
    int per = ps_geometry_devices_per_chip(g), chips = ps_geometry_chips(g);
    int out[64];
    for (int a = 0; a < chips; a++)
      for (int b = 0; b < chips; b++) {
        PsRoute r = {out, 64, 0, NULL};
        ps_geometry_route(g, ps_geometry_device_at(g, a, 0), ps_geometry_device_at(g, b, per - 1),
                          &r);
        if (a == b) {
          g_assert_cmpint(r.n, ==, per > 1 ? 1 : 0);
          continue;
        }
        g_assert_cmpint(r.n, ==, torus_distance(g, t, a, b));
        int at = a;
        for (int k = 0; k < r.n; k++) {
          PsLinkEnds e;
          g_assert_true(ps_geometry_link_ends(g, out[k], &e));
          g_assert_cmpint(e.chip, ==, at);
          at = e.to_chip;
        }
        g_assert_cmpint(at, ==, b);
      }
    /* a device to a host of another chip ends on that host's PCIe up */
    int host = ps_geometry_hosts(g) - 1, last = chips - 1;
    PsRoute r = {out, 64, 0, NULL};
    ps_geometry_route(g, 0, ps_geometry_devices(g) + host, &r);
    g_assert_cmpint(out[r.n - 1], ==, ps_geometry_pcie_link(g, host, TRUE));
    g_assert_cmpint(r.n, ==, 1 + torus_distance(g, t, 0, last));
  }
}

/* ps_geometry_check_link_faults on faults given as parsed. */
static void expect_fault_error(const PsTopology *t, const PsLinkFault *links, int n,
                               const char *message)
{
  PsFaultsConfig fc = {.n_links = n, .links = (PsLinkFault *)links};
  GError *error = NULL;
  g_assert_false(ps_geometry_check_link_faults(t, &fc, "f.json", &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_assert_cmpstr(error->message, ==, message);
  g_error_free(error);
}

static void test_fault_checks(void)
{
  g_autoptr(PsTopology) ring = topo("torus:8x1", "torus.wrap=[true,false]", NULL, NULL, NULL);
  PsLinkFault ok[] = {{2, 0, +1, TRUE, 0.0}, {5, 0, +1, FALSE, 0.5}};
  PsFaultsConfig fc = {.n_links = 2, .links = ok};
  GError *error = NULL;
  g_assert_true(ps_geometry_check_link_faults(ring, &fc, "f.json", &error));
  g_assert_no_error(error);
  PsLinkFault dim1[] = {{0, 1, +1, FALSE, 0.5}};
  expect_fault_error(ring, dim1, 1,
                     "f.json: faults.links[0].dim: dimension y of torus:8x1 has size 1: there "
                     "are no ICI links along it");
  PsLinkFault cut[] = {{2, 0, +1, FALSE, 0.0}, {6, 0, -1, FALSE, 0.0}};
  expect_fault_error(ring, cut, 2,
                     "f.json: faults.links[1]: with chip (2,0) -> (3,0) +x and chip (6,0) -> "
                     "(5,0) -x both failed (faults.links[0] and [1]), chip (6,0) and chip (3,0) "
                     "have no way to each other round the x ring (each way crosses a failed "
                     "link); fail links of one ring in one direction only, or the two "
                     "directions of one cable");
  PsLinkFault twice[] = {{2, 0, +1, TRUE, 0.5}, {3, 0, -1, FALSE, 0.5}};
  expect_fault_error(ring, twice, 2,
                     "f.json: faults.links[1]: chip (3,0) -> (2,0) -x is already named by "
                     "faults.links[0]; give each link direction once");
  g_autoptr(PsTopology) mesh = topo("torus:4x4", "torus.wrap=[false,true]", NULL, NULL, NULL);
  PsLinkFault edge[] = {{3, 0, +1, FALSE, 0.5}};
  expect_fault_error(mesh, edge, 1,
                     "f.json: faults.links[0]: chip 3 (3,0) has no +x link: it is at the edge "
                     "of dimension x, which has no wrap-around (torus.wrap[0] = false)");
  PsLinkFault line[] = {{1, 0, +1, FALSE, 0.0}};
  expect_fault_error(mesh, line, 1,
                     "f.json: faults.links[0]: failing chip (1,0) -> (2,0) +x cuts dimension x "
                     "in two: it has no wrap-around (torus.wrap[0] = false), so traffic "
                     "between the chips on either side has no other way; degrade it with a "
                     "bandwidth_factor > 0 instead");
  g_autoptr(PsTopology) tw = sample(5);
  PsLinkFault twist[] = {{0, 2, -1, FALSE, 0.0}};
  expect_fault_error(tw, twist, 1,
                     "f.json: faults.links[0]: failing chip (0,0,0) -> (0,0,7) -z: rerouting "
                     "round a failed link is not modelled on a twisted torus; degrade it with "
                     "a bandwidth_factor > 0 instead");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/topology/coords/round-trip", test_coords);
  g_test_add_func("/topology/neighbours/plain-loop", test_neighbours);
  g_test_add_func("/topology/trays/tile", test_trays);
  g_test_add_func("/topology/trays/errors", test_tray_errors);
  g_test_add_func("/topology/zones/disjoint-covering", test_zones);
  g_test_add_func("/topology/routes/torus-distance", test_routes);
  g_test_add_func("/topology/faults/checks", test_fault_checks);
  return g_test_run();
}

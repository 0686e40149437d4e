/* topology.c: the geometry of a slice, or of several joined by the
 * data-center network (see topology.h): coordinates, neighbours with wrap
 * and twist, device, chip and host numbering (slice-major), host trays,
 * the zone table with each kind's links, names and routes (the torus of
 * each slice, on-chip, PCIe, DCN), and the link-fault checks on parsed
 * figures.
 *
 * Invariant: the tables built by ps_geometry_new (neighbours, chip ->
 * host, host -> first chip, zones) are never changed afterwards, so every
 * query is a pure function of the topology. */
#include "hw/topology.h"

#include "common/json.h"

#include <string.h>

struct PsGeometry {
  const PsTopology *topo;
  int ndims;
  int dims[PS_MAX_DIMS];
  gboolean wrap[PS_MAX_DIMS];
  gboolean twisted;
  int twist_k;                    /* twisted: the short dimensions' size */
  gboolean is_short[PS_MAX_DIMS]; /* twisted: a dimension of size k */
  int chips, per_chip, devices, hosts; /* of all slices together */
  int slices, slice_chips, slice_hosts;
  int32_t *nbr;        /* torus-local link id -> the chip it reaches, or -1 */
  int32_t *chip_host;  /* chip -> host */
  int32_t *host_first; /* host -> its tray's lowest chip */
  gboolean tray_is_box;
  int tray[PS_MAX_DIMS];
  PsZone *zones;
  int n_zones;
  int torus, on_chip, pcie; /* their indices in zones (torus: slice 0's; slice s's is torus + s) */
  int dcn;                  /* the DCN zone's index, -1 for a single slice */
  int leaves;               /* DCN leaf switches */
};

/* A zone kind's operations; `local` is a link's id within its zone. */
typedef struct {
  const char *name;
  int (*n_links)(const PsGeometry *g, const PsZone *z);
  gboolean (*ends)(const PsGeometry *g, const PsZone *z, int local, PsLinkEnds *out);
  void (*name_link)(GString *s, const PsGeometry *g, const PsLinkEnds *e);
  /* from and to are members: chips (torus), devices of one chip (chip),
   * a host and a device of its tray, either way (PCIe) */
  void (*route)(const PsGeometry *g, const PsZone *z, int from, int to, PsRoute *r);
} ZoneOps;

static const ZoneOps zone_ops[PS_ZONE_N_KINDS];

static int mod(int a, int n)
{
  int r = a % n;
  return r < 0 ? r + n : r;
}

static void route_push(PsRoute *r, int link)
{
  if (r->n < r->max)
    r->out[r->n] = link;
  r->n++;
}

/* ---- coordinates and numbering -------------------------------------- */

void ps_geometry_chip_coords(const PsGeometry *g, int chip, int c[PS_MAX_DIMS])
{
  g_return_if_fail(chip >= 0 && chip < g->chips);
  chip %= g->slice_chips;
  for (int d = 0; d < PS_MAX_DIMS; d++) {
    if (d < g->ndims) {
      c[d] = chip % g->dims[d];
      chip /= g->dims[d];
    } else {
      c[d] = 0;
    }
  }
}

int ps_geometry_chip_at(const PsGeometry *g, const int c[PS_MAX_DIMS])
{
  int chip = 0;
  for (int d = g->ndims - 1; d >= 0; d--) {
    g_return_val_if_fail(c[d] >= 0 && c[d] < g->dims[d], -1);
    chip = chip * g->dims[d] + c[d];
  }
  return chip;
}

/* The neighbour from the coordinates, twist applied (construction only). */
static int neighbour_compute(const PsGeometry *g, int chip, int dim, int dir)
{
  int n = g->dims[dim];
  if (n == 1)
    return -1;
  int c[PS_MAX_DIMS];
  ps_geometry_chip_coords(g, chip, c);
  int x = c[dim] + dir;
  if (x < 0 || x >= n) {
    if (!g->wrap[dim])
      return -1;
    x = mod(x, n);
    if (g->twisted && g->is_short[dim])
      for (int l = 0; l < g->ndims; l++)
        if (!g->is_short[l])
          c[l] = mod(c[l] + g->twist_k, g->dims[l]);
  }
  c[dim] = x;
  return ps_geometry_chip_at(g, c);
}

static int ici_local(const PsGeometry *g, int chip, int dim, int dir)
{
  return (chip * g->ndims + dim) * 2 + (dir < 0 ? 1 : 0);
}

int ps_geometry_neighbour(const PsGeometry *g, int chip, int dim, int dir)
{
  g_return_val_if_fail(chip >= 0 && chip < g->chips && dim >= 0 && dim < g->ndims, -1);
  int base = chip - chip % g->slice_chips;
  int n = g->nbr[ici_local(g, chip - base, dim, dir)];
  return n < 0 ? -1 : base + n;
}

int ps_geometry_device_chip(const PsGeometry *g, int device)
{
  g_return_val_if_fail(device >= 0 && device < g->devices, -1);
  return device / g->per_chip;
}

int ps_geometry_device_core(const PsGeometry *g, int device)
{
  g_return_val_if_fail(device >= 0 && device < g->devices, -1);
  return device % g->per_chip;
}

int ps_geometry_device_at(const PsGeometry *g, int chip, int core)
{
  g_return_val_if_fail(chip >= 0 && chip < g->chips && core >= 0 && core < g->per_chip, -1);
  return chip * g->per_chip + core;
}

int ps_geometry_chip_host(const PsGeometry *g, int chip)
{
  g_return_val_if_fail(chip >= 0 && chip < g->chips, -1);
  return g->chip_host[chip];
}

int ps_geometry_host_first_chip(const PsGeometry *g, int host)
{
  g_return_val_if_fail(host >= 0 && host < g->hosts, -1);
  return g->host_first[host];
}

gboolean ps_geometry_tray(const PsGeometry *g, int tray[PS_MAX_DIMS])
{
  memcpy(tray, g->tray, sizeof g->tray);
  return g->tray_is_box;
}

const PsTopology *ps_geometry_topology(const PsGeometry *g) { return g->topo; }
int ps_geometry_chips(const PsGeometry *g) { return g->chips; }
int ps_geometry_devices(const PsGeometry *g) { return g->devices; }
int ps_geometry_devices_per_chip(const PsGeometry *g) { return g->per_chip; }
int ps_geometry_hosts(const PsGeometry *g) { return g->hosts; }
int ps_geometry_slices(const PsGeometry *g) { return g->slices; }
int ps_geometry_slice_chips(const PsGeometry *g) { return g->slice_chips; }

int ps_geometry_endpoint_slice(const PsGeometry *g, int endpoint)
{
  g_return_val_if_fail(endpoint >= 0 && endpoint < g->devices + g->hosts, -1);
  if (endpoint < g->devices)
    return endpoint / g->per_chip / g->slice_chips;
  return (endpoint - g->devices) / g->slice_hosts;
}

/* ---- axes ------------------------------------------------------------ */

int ps_geometry_n_axes(const PsGeometry *g)
{
  return g->slices > 1 ? PS_GEOMETRY_MAX_AXES : PS_GEOMETRY_SLICE_AXIS;
}

int ps_geometry_axis_extent(const PsGeometry *g, int axis)
{
  g_return_val_if_fail(axis >= 0 && axis < PS_GEOMETRY_MAX_AXES, 0);
  if (axis == 0)
    return g->per_chip;
  if (axis == PS_GEOMETRY_SLICE_AXIS)
    return g->slices;
  return axis - 1 < g->ndims ? g->dims[axis - 1] : 1;
}

const char *ps_geometry_axis_name(int axis)
{
  static const char *const names[PS_GEOMETRY_MAX_AXES] = {"core", "x", "y", "z", "slice"};
  g_return_val_if_fail(axis >= 0 && axis < PS_GEOMETRY_MAX_AXES, NULL);
  return names[axis];
}

void ps_geometry_device_axes(const PsGeometry *g, int device, int coord[PS_GEOMETRY_MAX_AXES])
{
  int c[PS_MAX_DIMS];
  ps_geometry_chip_coords(g, ps_geometry_device_chip(g, device), c);
  coord[0] = ps_geometry_device_core(g, device);
  for (int d = 0; d < PS_MAX_DIMS; d++)
    coord[1 + d] = c[d];
  coord[PS_GEOMETRY_SLICE_AXIS] = ps_geometry_device_chip(g, device) / g->slice_chips;
}

/* ---- hosts and trays ------------------------------------------------ */

/* host.tray given: hosts by tray position, x fastest. */
static void trays_from_shape(PsGeometry *g, const int tray[PS_MAX_DIMS])
{
  int per[PS_MAX_DIMS];
  for (int d = 0; d < PS_MAX_DIMS; d++) {
    g->tray[d] = d < g->ndims ? tray[d] : 1;
    per[d] = d < g->ndims ? g->dims[d] / g->tray[d] : 1;
    g_assert(d >= g->ndims || per[d] * g->tray[d] == g->dims[d]);
  }
  g->tray_is_box = TRUE;
  for (int h = 0; h < g->slice_hosts; h++)
    g->host_first[h] = -1;
  for (int chip = 0; chip < g->slice_chips; chip++) {
    int c[PS_MAX_DIMS];
    ps_geometry_chip_coords(g, chip, c);
    int h = 0;
    for (int d = PS_MAX_DIMS - 1; d >= 0; d--)
      h = h * per[d] + c[d] / g->tray[d];
    g_assert(h < g->slice_hosts);
    g->chip_host[chip] = h;
    if (g->host_first[h] < 0)
      g->host_first[h] = chip;
  }
}

/* No host.tray: runs of chips_per_host numbers; tray_is_box when each run
 * is the same box (the run fills whole lower dimensions, then part of
 * one). */
static void trays_from_runs(PsGeometry *g, int per_host)
{
  for (int chip = 0; chip < g->chips; chip++)
    g->chip_host[chip] = chip / per_host;
  for (int h = 0; h < g->hosts; h++)
    g->host_first[h] = h * per_host;
  int left = per_host;
  g->tray_is_box = TRUE;
  for (int d = 0; d < PS_MAX_DIMS; d++) {
    int n = d < g->ndims ? g->dims[d] : 1;
    if (left % n == 0) {
      g->tray[d] = n;
      left /= n;
    } else {
      g->tray[d] = left;
      g->tray_is_box = g->tray_is_box && n % left == 0;
      left = 1;
    }
  }
  g->tray_is_box = g->tray_is_box && left == 1;
}

/* ---- construction --------------------------------------------------- */

static void add_zone(PsGeometry *g, PsZoneKind kind, int parent, int first_member,
                     int n_members, int *next_link)
{
  PsZone *z = &g->zones[g->n_zones++];
  *z = (PsZone){.kind = kind, .parent = parent, .first_link = *next_link,
                .first_member = first_member, .n_members = n_members};
  z->n_links = zone_ops[kind].n_links(g, z);
  *next_link += z->n_links;
}

/* The zone table: in a multislice topology the DCN first (the root),
 * then each slice's torus (the root when there is one slice), then the
 * on-chip paths and PCIe of every slice, in that order of link ids; a
 * single slice has exactly the zones and link ids it always had. */
static void add_zones(PsGeometry *g)
{
  gboolean multi = g->slices > 1;
  g->zones = g_new0(PsZone, g->slices + 3);
  int next_link = 0;
  g->dcn = -1;
  if (multi) {
    int per_leaf = g->topo->dcn.hosts_per_leaf > 0 ? g->topo->dcn.hosts_per_leaf : 1;
    g->leaves = (g->hosts + per_leaf - 1) / per_leaf;
    g->dcn = g->n_zones;
    add_zone(g, PS_ZONE_DCN, -1, 0, g->hosts, &next_link);
  }
  g->torus = g->n_zones;
  for (int s = 0; s < g->slices; s++)
    add_zone(g, PS_ZONE_TORUS, g->dcn, s * g->slice_chips, g->slice_chips, &next_link);
  g->on_chip = g->n_zones;
  add_zone(g, PS_ZONE_CHIP, g->torus, 0, g->chips, &next_link);
  g->pcie = g->n_zones;
  add_zone(g, PS_ZONE_PCIE, g->torus, 0, g->hosts, &next_link);
}

PsGeometry *ps_geometry_new(const PsTopology *topo)
{
  g_return_val_if_fail(topo != NULL && topo->chips_per_host > 0, NULL);
  PsGeometry *g = g_new0(PsGeometry, 1);
  g->topo = topo;
  g->ndims = topo->ndims;
  for (int d = 0; d < g->ndims; d++) {
    g->dims[d] = topo->dims[d];
    g->wrap[d] = topo->wrap[d];
  }
  g->twisted = topo->twisted;
  if (g->twisted) {
    g_assert(g->ndims == 3);
    g->twist_k = MIN(g->dims[0], MIN(g->dims[1], g->dims[2]));
    for (int d = 0; d < 3; d++) {
      g->is_short[d] = g->dims[d] == g->twist_k;
      g_assert(g->dims[d] == g->twist_k || g->dims[d] == 2 * g->twist_k);
    }
  }
  g->slices = topo->slices > 1 ? topo->slices : 1;
  g->chips = ps_topology_chips(topo);
  g->slice_chips = g->chips / g->slices;
  g->per_chip = ps_topology_devices_per_chip(topo);
  g->devices = g->chips * g->per_chip;
  g->hosts = ps_topology_hosts(topo);
  g->slice_hosts = g->hosts / g->slices;
  g->chip_host = g_new(int32_t, g->chips);
  g->host_first = g_new(int32_t, g->hosts);
  if (topo->host_tray[0] > 0)
    trays_from_shape(g, topo->host_tray);
  else
    trays_from_runs(g, topo->chips_per_host);
  /* every further slice repeats slice 0's hosts */
  for (int c = g->slice_chips; c < g->chips; c++)
    g->chip_host[c] = c / g->slice_chips * g->slice_hosts + g->chip_host[c % g->slice_chips];
  for (int h = g->slice_hosts; h < g->hosts; h++)
    g->host_first[h] = h / g->slice_hosts * g->slice_chips + g->host_first[h % g->slice_hosts];
  add_zones(g);
  int n_ici = g->zones[g->torus].n_links;
  g->nbr = g_new(int32_t, n_ici > 0 ? n_ici : 1);
  for (int c = 0; c < g->slice_chips; c++)
    for (int d = 0; d < g->ndims; d++)
      for (int s = 0; s < 2; s++)
        g->nbr[ici_local(g, c, d, s ? -1 : 1)] = neighbour_compute(g, c, d, s ? -1 : 1);
  return g;
}

void ps_geometry_free(PsGeometry *g)
{
  if (!g)
    return;
  g_free(g->nbr);
  g_free(g->chip_host);
  g_free(g->host_first);
  g_free(g->zones);
  g_free(g);
}

/* ---- the torus zone ------------------------------------------------- */

static int torus_n_links(const PsGeometry *g, const PsZone *z)
{
  return z->n_members * g->ndims * 2;
}

static gboolean torus_ends(const PsGeometry *g, const PsZone *z, int local, PsLinkEnds *e)
{
  if (g->nbr[local] < 0)
    return FALSE;
  e->kind = PS_LINK_ICI;
  e->chip = z->first_member + local / 2 / g->ndims;
  e->dim = local / 2 % g->ndims;
  e->dir = local % 2 ? -1 : 1;
  e->to_chip = z->first_member + g->nbr[local];
  return TRUE;
}

/* "slice 1 " before a chip's name in a multislice topology; nothing in
 * one slice, whose names stay as they were. */
static void append_slice(GString *s, const PsGeometry *g, int chip)
{
  if (g->slices > 1)
    g_string_append_printf(s, "slice %d ", chip / g->slice_chips);
}

void ps_geometry_append_chip(GString *s, const PsGeometry *g, int chip)
{
  int c[PS_MAX_DIMS];
  ps_geometry_chip_coords(g, chip, c);
  g_string_append_c(s, '(');
  for (int d = 0; d < g->ndims; d++)
    g_string_append_printf(s, "%s%d", d ? "," : "", c[d]);
  g_string_append_c(s, ')');
}

static void torus_name(GString *s, const PsGeometry *g, const PsLinkEnds *e)
{
  append_slice(s, g, e->chip);
  g_string_append(s, "chip ");
  ps_geometry_append_chip(s, g, e->chip);
  g_string_append(s, " -> ");
  ps_geometry_append_chip(s, g, e->to_chip);
  g_string_append_printf(s, " %c%c", e->dir > 0 ? '+' : '-', "xyz"[e->dim]);
}

/* Hops and direction to go round dimension d from a to b (no twist). */
static int ring_way(const PsGeometry *g, int d, int a, int b, int *dir)
{
  int n = g->dims[d];
  if (!g->wrap[d]) {
    *dir = b >= a ? 1 : -1;
    return b >= a ? b - a : a - b;
  }
  int fwd = mod(b - a, n), back = n - fwd;
  if (fwd == 0) {
    *dir = 1;
    return 0;
  }
  if (fwd < back || (fwd == back && a % 2 == 0)) {
    *dir = 1;
    return fwd;
  }
  *dir = -1;
  return back;
}

/* The twisted torus's hops and directions per dimension (see Routes). */
static void twisted_way(const PsGeometry *g, const int a[PS_MAX_DIMS], const int b[PS_MAX_DIMS],
                        int hops[PS_MAX_DIMS], int dir[PS_MAX_DIMS])
{
  int shorts[PS_MAX_DIMS], ns = 0;
  for (int d = 0; d < g->ndims; d++)
    if (g->is_short[d])
      shorts[ns++] = d;
  int best_total = INT32_MAX;
  /* masks 0, 1, 2, 3: fewest wraps first, then lower dimensions; the
   * first of equal totals wins */
  for (int mask = 0; mask < (1 << ns); mask++) {
    int h[PS_MAX_DIMS] = {0}, dr[PS_MAX_DIMS] = {1, 1, 1};
    int wraps = 0, total = 0;
    for (int i = 0; i < ns; i++) {
      int d = shorts[i], n = g->dims[d], dx = b[d] - a[d];
      if (mask & (1 << i)) {
        wraps++;
        h[d] = n - (dx < 0 ? -dx : dx);
        dr[d] = dx > 0 ? -1 : 1;
      } else {
        h[d] = dx < 0 ? -dx : dx;
        dr[d] = dx < 0 ? -1 : 1;
      }
      total += h[d];
    }
    for (int d = 0; d < g->ndims; d++) {
      if (g->is_short[d])
        continue;
      int target = mod(b[d] - wraps * g->twist_k, g->dims[d]);
      h[d] = ring_way(g, d, a[d], target, &dr[d]);
      total += h[d];
    }
    if (total < best_total) {
      best_total = total;
      memcpy(hops, h, sizeof h);
      memcpy(dir, dr, sizeof dr);
    }
  }
}

/* TRUE if going `hops` hops from chip along dim in direction dir crosses
 * a failed link. */
static gboolean path_failed(const PsGeometry *g, const PsZone *z, const guint8 *failed,
                            int chip, int dim, int dir, int hops)
{
  for (int i = 0; i < hops; i++) {
    int local = ici_local(g, chip, dim, dir);
    if (failed[z->first_link + local])
      return TRUE;
    chip = g->nbr[local];
  }
  return FALSE;
}

static void torus_route(const PsGeometry *g, const PsZone *z, int from, int to, PsRoute *r)
{
  if (from == to)
    return;
  from -= z->first_member; /* chips of the slice from here on */
  to -= z->first_member;
  int a[PS_MAX_DIMS], b[PS_MAX_DIMS];
  ps_geometry_chip_coords(g, from, a);
  ps_geometry_chip_coords(g, to, b);
  int hops[PS_MAX_DIMS] = {0}, dir[PS_MAX_DIMS] = {1, 1, 1};
  if (!g->twisted)
    for (int d = 0; d < g->ndims; d++)
      hops[d] = ring_way(g, d, a[d], b[d], &dir[d]);
  else
    twisted_way(g, a, b, hops, dir);
  int cur = from;
  for (int d = 0; d < g->ndims; d++) {
    /* a failed link on the way: the other way round the ring, which the
     * network made sure is clear (never on a twisted torus or a mesh
     * dimension) */
    if (r->failed && hops[d] > 0 && path_failed(g, z, r->failed, cur, d, dir[d], hops[d])) {
      g_assert(g->wrap[d] && !g->twisted);
      dir[d] = -dir[d];
      hops[d] = g->dims[d] - hops[d];
      g_assert(!path_failed(g, z, r->failed, cur, d, dir[d], hops[d]));
    }
    for (int i = 0; i < hops[d]; i++) {
      int local = ici_local(g, cur, d, dir[d]);
      g_assert(g->nbr[local] >= 0);
      route_push(r, z->first_link + local);
      cur = g->nbr[local];
    }
  }
  g_assert(cur == to);
}

/* ---- the on-chip zone ----------------------------------------------- */

static int chip_n_links(const PsGeometry *g, const PsZone *z)
{
  return z->n_members * g->per_chip * (g->per_chip - 1);
}

static gboolean chip_ends(const PsGeometry *g, const PsZone *z, int local, PsLinkEnds *e)
{
  int c = g->per_chip;
  e->kind = PS_LINK_ON_CHIP;
  e->chip = z->first_member + local / (c * (c - 1));
  e->from_core = local % (c * (c - 1)) / (c - 1);
  int t = local % (c - 1);
  e->to_core = t < e->from_core ? t : t + 1;
  return TRUE;
}

static void chip_name(GString *s, const PsGeometry *g, const PsLinkEnds *e)
{
  append_slice(s, g, e->chip);
  g_string_append(s, "chip ");
  ps_geometry_append_chip(s, g, e->chip);
  g_string_append_printf(s, " core %d -> core %d", e->from_core, e->to_core);
}

int ps_geometry_on_chip_link(const PsGeometry *g, int chip, int from, int to)
{
  g_return_val_if_fail(from != to && from >= 0 && to >= 0 && from < g->per_chip &&
                           to < g->per_chip, -1);
  const PsZone *z = &g->zones[g->on_chip];
  int c = g->per_chip;
  return z->first_link + (chip - z->first_member) * c * (c - 1) + from * (c - 1) +
         (to < from ? to : to - 1);
}

static void chip_route(const PsGeometry *g, const PsZone *z, int from, int to, PsRoute *r)
{
  route_push(r, ps_geometry_on_chip_link(g, ps_geometry_device_chip(g, from),
                                         ps_geometry_device_core(g, from),
                                         ps_geometry_device_core(g, to)));
}

/* ---- the PCIe zone -------------------------------------------------- */

static int pcie_n_links(const PsGeometry *g, const PsZone *z)
{
  return 2 * z->n_members;
}

static gboolean pcie_ends(const PsGeometry *g, const PsZone *z, int local, PsLinkEnds *e)
{
  e->kind = local % 2 ? PS_LINK_PCIE_UP : PS_LINK_PCIE_DOWN;
  e->host = z->first_member + local / 2;
  return TRUE;
}

static void pcie_name(GString *s, const PsGeometry *g, const PsLinkEnds *e)
{
  if (e->kind == PS_LINK_PCIE_DOWN)
    g_string_append_printf(s, "host %d -> chips (PCIe)", e->host);
  else
    g_string_append_printf(s, "chips -> host %d (PCIe)", e->host);
}

int ps_geometry_pcie_link(const PsGeometry *g, int host, gboolean up)
{
  g_return_val_if_fail(host >= 0 && host < g->hosts, -1);
  const PsZone *z = &g->zones[g->pcie];
  return z->first_link + (host - z->first_member) * 2 + (up ? 1 : 0);
}

static void pcie_route(const PsGeometry *g, const PsZone *z, int from, int to, PsRoute *r)
{
  if (from >= g->devices)
    route_push(r, ps_geometry_pcie_link(g, from - g->devices, FALSE));
  else
    route_push(r, ps_geometry_pcie_link(g, to - g->devices, TRUE));
}

/* ---- the DCN zone ---------------------------------------------------- */

/* Local ids: 2h (NIC up, host h to its leaf), 2h + 1 (NIC down); then,
 * after the hosts', 2l (leaf l up to the spine), 2l + 1 (spine down to
 * leaf l).  Members: the hosts; leaf l serves hosts [l, l + 1) x
 * hosts_per_leaf. */
static int dcn_n_links(const PsGeometry *g, const PsZone *z)
{
  return 2 * z->n_members + 2 * g->leaves;
}

static int dcn_leaf(const PsGeometry *g, int host)
{
  return host / g->topo->dcn.hosts_per_leaf;
}

static gboolean dcn_ends(const PsGeometry *g, const PsZone *z, int local, PsLinkEnds *e)
{
  gboolean up = local % 2 == 0;
  if (local < 2 * z->n_members) {
    e->kind = up ? PS_LINK_DCN_NIC_UP : PS_LINK_DCN_NIC_DOWN;
    e->host = z->first_member + local / 2;
    e->leaf = dcn_leaf(g, e->host);
  } else {
    e->kind = up ? PS_LINK_DCN_LEAF_UP : PS_LINK_DCN_LEAF_DOWN;
    e->leaf = (local - 2 * z->n_members) / 2;
  }
  return TRUE;
}

static void dcn_name(GString *s, const PsGeometry *g, const PsLinkEnds *e)
{
  gboolean up = e->kind == PS_LINK_DCN_NIC_UP || e->kind == PS_LINK_DCN_LEAF_UP;
  if (e->kind == PS_LINK_DCN_NIC_UP || e->kind == PS_LINK_DCN_NIC_DOWN)
    g_string_append_printf(s, "dcn nic host %d %s", e->host, up ? "up" : "down");
  else
    g_string_append_printf(s, "dcn leaf %d %s", e->leaf, up ? "up" : "down");
}

int ps_geometry_dcn_link(const PsGeometry *g, PsLinkKind kind, int index)
{
  g_return_val_if_fail(g->dcn >= 0, -1);
  const PsZone *z = &g->zones[g->dcn];
  switch (kind) {
  case PS_LINK_DCN_NIC_UP:
  case PS_LINK_DCN_NIC_DOWN:
    g_return_val_if_fail(index >= 0 && index < g->hosts, -1);
    return z->first_link + 2 * index + (kind == PS_LINK_DCN_NIC_DOWN);
  case PS_LINK_DCN_LEAF_UP:
  case PS_LINK_DCN_LEAF_DOWN:
    g_return_val_if_fail(index >= 0 && index < g->leaves, -1);
    return z->first_link + 2 * z->n_members + 2 * index + (kind == PS_LINK_DCN_LEAF_DOWN);
  default:
    g_return_val_if_reached(-1);
  }
}

/* from and to are hosts: NIC up, through the spine when their leaves
 * differ, NIC down. */
static void dcn_route(const PsGeometry *g, const PsZone *z, int from, int to, PsRoute *r)
{
  if (from == to)
    return;
  int lf = dcn_leaf(g, from), lt = dcn_leaf(g, to);
  route_push(r, ps_geometry_dcn_link(g, PS_LINK_DCN_NIC_UP, from));
  if (lf != lt) {
    route_push(r, ps_geometry_dcn_link(g, PS_LINK_DCN_LEAF_UP, lf));
    route_push(r, ps_geometry_dcn_link(g, PS_LINK_DCN_LEAF_DOWN, lt));
  }
  route_push(r, ps_geometry_dcn_link(g, PS_LINK_DCN_NIC_DOWN, to));
}

int ps_geometry_dcn_leaves(const PsGeometry *g) { return g->leaves; }

static const ZoneOps zone_ops[PS_ZONE_N_KINDS] = {
    [PS_ZONE_TORUS] = {"torus", torus_n_links, torus_ends, torus_name, torus_route},
    [PS_ZONE_CHIP] = {"on-chip", chip_n_links, chip_ends, chip_name, chip_route},
    [PS_ZONE_PCIE] = {"pcie", pcie_n_links, pcie_ends, pcie_name, pcie_route},
    [PS_ZONE_DCN] = {"dcn", dcn_n_links, dcn_ends, dcn_name, dcn_route},
};

/* The failed link directions of one ring (dimension dim through chip)
 * must leave a way between every two of its chips.  A route that meets a
 * failed link goes the other way round, so two chips are cut off exactly
 * when both ways meet one: a failed + link leaving position p and a
 * failed - link leaving position q cut the pair (q, p + 1) unless
 * q = p + 1, that is unless they are the two directions of one cable. */
gboolean ps_geometry_ring_connected(const PsGeometry *g, const guint8 *failed, int chip, int dim,
                                    int *plus, int *minus)
{
  g_return_val_if_fail(failed != NULL && dim >= 0 && dim < g->ndims, FALSE);
  int n = g->dims[dim], base = chip - chip % g->slice_chips;
  int c[PS_MAX_DIMS];
  ps_geometry_chip_coords(g, chip, c);
  for (int p = 0; p < n; p++) {
    c[dim] = p;
    int up = ps_geometry_ici_link(g, base + ps_geometry_chip_at(g, c), dim, +1);
    if (up < 0 || !failed[up])
      continue;
    for (int q = 0; q < n; q++) {
      c[dim] = q;
      int down = ps_geometry_ici_link(g, base + ps_geometry_chip_at(g, c), dim, -1);
      if (down >= 0 && failed[down] && q != (p + 1) % n) {
        *plus = up;
        *minus = down;
        return FALSE;
      }
    }
  }
  return TRUE;
}

/* ---- links and routes across zones ---------------------------------- */

int ps_geometry_n_zones(const PsGeometry *g) { return g->n_zones; }

const PsZone *ps_geometry_zone(const PsGeometry *g, int zone)
{
  g_return_val_if_fail(zone >= 0 && zone < g->n_zones, NULL);
  return &g->zones[zone];
}

const char *ps_geometry_zone_kind_name(PsZoneKind kind)
{
  g_return_val_if_fail(kind < PS_ZONE_N_KINDS, NULL);
  return zone_ops[kind].name;
}

int ps_geometry_link_zone(const PsGeometry *g, int link)
{
  for (int i = 0; i < g->n_zones; i++)
    if (link >= g->zones[i].first_link && link < g->zones[i].first_link + g->zones[i].n_links)
      return i;
  return -1;
}

int ps_geometry_n_links(const PsGeometry *g)
{
  const PsZone *last = &g->zones[g->n_zones - 1];
  return last->first_link + last->n_links;
}

gboolean ps_geometry_link_ends(const PsGeometry *g, int link, PsLinkEnds *out)
{
  g_return_val_if_fail(out != NULL, FALSE);
  int zi = ps_geometry_link_zone(g, link);
  if (zi < 0)
    return FALSE;
  const PsZone *z = &g->zones[zi];
  PsLinkEnds e = {.chip = -1, .to_chip = -1, .dim = -1, .dir = 0, .from_core = -1,
                  .to_core = -1, .host = -1, .leaf = -1};
  if (!zone_ops[z->kind].ends(g, z, link - z->first_link, &e))
    return FALSE;
  *out = e;
  return TRUE;
}

int ps_geometry_ici_link(const PsGeometry *g, int chip, int dim, int dir)
{
  g_return_val_if_fail(chip >= 0 && chip < g->chips && dim >= 0 && dim < g->ndims, -1);
  int local = ici_local(g, chip % g->slice_chips, dim, dir);
  return g->nbr[local] >= 0 ? g->zones[g->torus + chip / g->slice_chips].first_link + local : -1;
}

char *ps_geometry_link_name(const PsGeometry *g, int link)
{
  PsLinkEnds e;
  if (!ps_geometry_link_ends(g, link, &e))
    return g_strdup_printf("no link %d", link);
  GString *s = g_string_new(NULL);
  zone_ops[g->zones[ps_geometry_link_zone(g, link)].kind].name_link(s, g, &e);
  return g_string_free(s, FALSE);
}

static void zone_route(const PsGeometry *g, int zone, int from, int to, PsRoute *r)
{
  const PsZone *z = &g->zones[zone];
  zone_ops[z->kind].route(g, z, from, to, r);
}

/* The torus zone that holds chip. */
static int torus_of(const PsGeometry *g, int chip)
{
  return g->torus + chip / g->slice_chips;
}

/* Between endpoints of different slices: to the source's host (through
 * its slice's torus to the host's first chip, then PCIe up), the DCN,
 * then from the destination's host (PCIe down, its slice's torus). */
static void cross_slice_route(const PsGeometry *g, int src, int dst, PsRoute *r)
{
  int nd = g->devices, sh, dh;
  if (src < nd) {
    int sc = src / g->per_chip;
    sh = g->chip_host[sc];
    zone_route(g, torus_of(g, sc), sc, g->host_first[sh], r);
    route_push(r, ps_geometry_pcie_link(g, sh, TRUE));
  } else {
    sh = src - nd;
  }
  dh = dst < nd ? g->chip_host[dst / g->per_chip] : dst - nd;
  zone_route(g, g->dcn, sh, dh, r);
  if (dst < nd) {
    route_push(r, ps_geometry_pcie_link(g, dh, FALSE));
    zone_route(g, torus_of(g, g->host_first[dh]), g->host_first[dh], dst / g->per_chip, r);
  }
}

void ps_geometry_route(const PsGeometry *g, int src, int dst, PsRoute *r)
{
  g_return_if_fail(src >= 0 && src < g->devices + g->hosts);
  g_return_if_fail(dst >= 0 && dst < g->devices + g->hosts);
  if (src == dst)
    return;
  if (g->slices > 1 &&
      ps_geometry_endpoint_slice(g, src) != ps_geometry_endpoint_slice(g, dst)) {
    cross_slice_route(g, src, dst, r);
    return;
  }
  int nd = g->devices;
  if (src < nd && dst < nd) {
    int sc = src / g->per_chip, dc = dst / g->per_chip;
    if (sc == dc)
      zone_route(g, g->on_chip, src, dst, r);
    else
      zone_route(g, torus_of(g, sc), sc, dc, r);
    return;
  }
  if (src >= nd) {
    int sh = src - nd;
    zone_route(g, g->pcie, src, g->host_first[sh] * g->per_chip, r);
    if (dst >= nd) {
      int dh = dst - nd;
      zone_route(g, torus_of(g, g->host_first[sh]), g->host_first[sh], g->host_first[dh], r);
      zone_route(g, g->pcie, g->host_first[dh] * g->per_chip, dst, r);
    } else if (g->chip_host[dst / g->per_chip] != sh) {
      zone_route(g, torus_of(g, g->host_first[sh]), g->host_first[sh], dst / g->per_chip, r);
    }
    return;
  }
  int dh = dst - nd, sc = src / g->per_chip;
  if (g->chip_host[sc] != dh)
    zone_route(g, torus_of(g, sc), sc, g->host_first[dh], r);
  zone_route(g, g->pcie, src, dst, r);
}

/* ---- link-fault checks ---------------------------------------------- */

/* One link direction a fault entry names. */
typedef struct {
  int chip, dim, dir;
  gboolean failed;
  int entry;
} LinkDir;

static void fault_fail(GError **error, const char *file, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static void fault_fail(GError **error, const char *file, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *reason = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: %s", file, path, reason);
}

/* "chip (1,0) -> (0,0) -x".  (transfer full) */
static char *ici_name(const PsGeometry *g, int chip, int dim, int dir)
{
  return ps_geometry_link_name(g, ps_geometry_ici_link(g, chip, dim, dir));
}

/* Entry i names a link that exists and may fail as it asks. */
static gboolean check_link_fault(const PsGeometry *g, const PsLinkFault *f, int i,
                                 const char *file, GError **error)
{
  const PsTopology *t = g->topo;
  g_autofree char *p = ps_json_path_index("faults.links", i);
  g_autofree char *dp = ps_json_path_join(p, "dim");
  char axis = "xyz"[f->dim], sign = f->dir > 0 ? '+' : '-';
  if (t->dims[f->dim] == 1) {
    fault_fail(error, file, dp, "dimension %c of %s has size 1: there are no ICI links along it",
               axis, t->name);
    return FALSE;
  }
  if (ps_geometry_neighbour(g, f->chip, f->dim, f->dir) < 0) {
    GString *c = g_string_new(NULL);
    ps_geometry_append_chip(c, g, f->chip);
    fault_fail(error, file, p,
               "chip %d %s has no %c%c link: it is at the edge of dimension %c, which has no "
               "wrap-around (torus.wrap[%d] = false)",
               f->chip, c->str, sign, axis, axis, f->dim);
    g_string_free(c, TRUE);
    return FALSE;
  }
  g_autofree char *name = ici_name(g, f->chip, f->dim, f->dir);
  if (f->bandwidth_factor == 0 && !t->wrap[f->dim]) {
    fault_fail(error, file, p,
               "failing %s cuts dimension %c in two: it has no wrap-around (torus.wrap[%d] = "
               "false), so traffic between the chips on either side has no other way; degrade "
               "it with a bandwidth_factor > 0 instead",
               name, axis, f->dim);
    return FALSE;
  }
  if (f->bandwidth_factor == 0 && t->twisted) {
    fault_fail(error, file, p,
               "failing %s: rerouting round a failed link is not modelled on a twisted torus; "
               "degrade it with a bandwidth_factor > 0 instead",
               name);
    return FALSE;
  }
  return TRUE;
}

/* Failed links must leave a way between every two chips.  In a ring
 * (dims with wrap-around; mesh dims reject any failure before this), a
 * route that meets a failed link goes the other way round, so two chips
 * are cut off exactly when both ways meet one: a failed + link leaving
 * position p and a failed - link leaving position q cut the pair
 * (q, p + 1) unless q = p + 1, i.e. unless the two are the directions of
 * one cable. */
static gboolean check_cuts(const PsGeometry *g, const LinkDir *ld, int n, const char *file,
                           GError **error)
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      const LinkDir *u = &ld[i], *v = &ld[j];
      if (!u->failed || !v->failed || u->dim != v->dim || u->dir < 0 || v->dir > 0)
        continue;
      int cu[PS_MAX_DIMS], cv[PS_MAX_DIMS], d = u->dim, len = g->dims[d];
      ps_geometry_chip_coords(g, u->chip, cu);
      ps_geometry_chip_coords(g, v->chip, cv);
      gboolean same_ring = u->chip / g->slice_chips == v->chip / g->slice_chips;
      for (int k = 0; k < g->ndims; k++)
        if (k != d && cu[k] != cv[k])
          same_ring = FALSE;
      if (!same_ring || cv[d] == (cu[d] + 1) % len)
        continue;
      int later = MAX(u->entry, v->entry), earlier = MIN(u->entry, v->entry);
      g_autofree char *p = ps_json_path_index("faults.links", later);
      g_autofree char *un = ici_name(g, u->chip, d, +1);
      g_autofree char *vn = ici_name(g, v->chip, d, -1);
      cu[d] = (cu[d] + 1) % len;
      GString *a = g_string_new(NULL), *b = g_string_new(NULL);
      ps_geometry_append_chip(a, g, v->chip);
      ps_geometry_append_chip(b, g, ps_geometry_chip_at(g, cu) + u->chip - u->chip % g->slice_chips);
      fault_fail(error, file, p,
                 "with %s and %s both failed (faults.links[%d] and [%d]), chip %s and chip %s "
                 "have no way to each other round the %c ring (each way crosses a failed "
                 "link); fail links of one ring in one direction only, or the two directions "
                 "of one cable",
                 un, vn, earlier, later, a->str, b->str, "xyz"[d]);
      g_string_free(a, TRUE);
      g_string_free(b, TRUE);
      return FALSE;
    }
  return TRUE;
}

int ps_geometry_dcn_fault_links(const PsGeometry *g, const PsDcnLinkFault *f, int links[2])
{
  g_return_val_if_fail(g != NULL && f != NULL && g->dcn >= 0, 0);
  gboolean nic = f->kind == PS_DCN_FAULT_NIC;
  g_return_val_if_fail(f->index >= 0 && f->index < (nic ? g->hosts : g->leaves), 0);
  PsLinkKind up = nic ? PS_LINK_DCN_NIC_UP : PS_LINK_DCN_LEAF_UP;
  PsLinkKind down = nic ? PS_LINK_DCN_NIC_DOWN : PS_LINK_DCN_LEAF_DOWN;
  int n = 0;
  if (f->both_ways || f->dir > 0)
    links[n++] = ps_geometry_dcn_link(g, up, f->index);
  if (f->both_ways || f->dir < 0)
    links[n++] = ps_geometry_dcn_link(g, down, f->index);
  return n;
}

/* The DCN entries of faults.links: a multislice topology, a host or leaf
 * that exists, and no DCN link direction named twice. */
static gboolean check_dcn_link_faults(const PsGeometry *g, const PsFaultsConfig *faults,
                                      const char *file, GError **error)
{
  for (int i = 0; i < faults->n_dcn_links; i++) {
    const PsDcnLinkFault *f = &faults->dcn_links[i];
    gboolean nic = f->kind == PS_DCN_FAULT_NIC;
    g_autofree char *p = ps_json_path_index("faults.links", f->entry);
    g_autofree char *kp = ps_json_path_join(p, nic ? "host" : "leaf");
    int count = nic ? g->hosts : g->leaves;
    if (g->dcn < 0) {
      fault_fail(error, file, p, "%s has one slice and so no data-center network",
                 g->topo->name);
      return FALSE;
    }
    if (f->index < 0 || f->index >= count) {
      fault_fail(error, file, kp,
                 "%s %d is out of range: %s's data-center network has %d %s%s (0..%d)",
                 nic ? "host" : "leaf", f->index, g->topo->name, count,
                 nic ? "host" : "leaf switch", count == 1 ? "" : nic ? "s" : "es", count - 1);
      return FALSE;
    }
    int mine[2], n = ps_geometry_dcn_fault_links(g, f, mine);
    for (int j = 0; j < i; j++) {
      int theirs[2], m = ps_geometry_dcn_fault_links(g, &faults->dcn_links[j], theirs);
      for (int a = 0; a < n; a++)
        for (int b = 0; b < m; b++)
          if (mine[a] == theirs[b]) {
            g_autofree char *name = ps_geometry_link_name(g, mine[a]);
            fault_fail(error, file, p,
                       "%s is already named by faults.links[%d]; give each link direction once",
                       name, faults->dcn_links[j].entry);
            return FALSE;
          }
    }
  }
  return TRUE;
}

gboolean ps_geometry_check_link_faults(const PsTopology *t, const PsFaultsConfig *faults,
                                       const char *file, GError **error)
{
  g_return_val_if_fail(t != NULL && faults != NULL && file != NULL, FALSE);
  if (faults->n_links + faults->n_dcn_links == 0)
    return TRUE;
  g_autoptr(PsGeometry) g = ps_geometry_new(t);
  if (!check_dcn_link_faults(g, faults, file, error))
    return FALSE;
  int n = faults->n_links;
  g_autofree LinkDir *ld = g_new0(LinkDir, 2 * (size_t)n);
  int n_ld = 0;
  for (int i = 0; i < n; i++) {
    const PsLinkFault *f = &faults->links[i];
    g_return_val_if_fail(f->chip >= 0 && f->chip < g->chips && f->dim >= 0 &&
                             f->dim < g->ndims, FALSE);
    int entry = faults->link_entries ? faults->link_entries[i] : i;
    if (!check_link_fault(g, f, entry, file, error))
      return FALSE;
    int first = n_ld;
    ld[n_ld++] = (LinkDir){f->chip, f->dim, f->dir, f->bandwidth_factor == 0, entry};
    if (f->both_ways)
      ld[n_ld++] = (LinkDir){ps_geometry_neighbour(g, f->chip, f->dim, f->dir), f->dim, -f->dir,
                             f->bandwidth_factor == 0, entry};
    for (int k = first; k < n_ld; k++)
      for (int j = 0; j < first; j++)
        if (ld[j].chip == ld[k].chip && ld[j].dim == ld[k].dim && ld[j].dir == ld[k].dir) {
          g_autofree char *p = ps_json_path_index("faults.links", entry);
          g_autofree char *dup = ici_name(g, ld[k].chip, ld[k].dim, ld[k].dir);
          fault_fail(error, file, p,
                     "%s is already named by faults.links[%d]; give each link direction once",
                     dup, ld[j].entry);
          return FALSE;
        }
  }
  return check_cuts(g, ld, n_ld, file, error);
}

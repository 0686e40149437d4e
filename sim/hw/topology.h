/* topology.h: the geometry of a slice, built once from the parsed figures
 * (io/config.h's PsTopology): chips and their coordinates, wrap-around and
 * twist, neighbours, the numbering of devices, chips and hosts, the host
 * trays, the interconnect's zones with their link ids and routes, and the
 * names a user sees for links.  Everything that asks "where is this chip",
 * "which link joins these two" or "which host owns it" asks here; nothing
 * else derives coordinates.
 *
 * Numbering.  Chip c has coordinates row-major with x fastest:
 * c = x + X * (y + Y * z), the order torus.dims lists them in.  Device d
 * is core (d % per_chip) of chip (d / per_chip), per_chip = the chip's
 * cores, or 1 when the chip is a megacore.  Endpoints of the network are
 * the devices 0..D-1, then the hosts: endpoint D + h is host h.
 *
 * Slices (topology "slices": S > 1).  S copies of the slice, numbered
 * slice-major: chip c is chip c % C of slice c / C (C the slice's chips),
 * its coordinates those within its slice; devices and hosts likewise
 * (slice s's hosts follow slice s-1's, each slice's trays the same).
 * Everything above holds within each slice.
 *
 * Host trays.  A host owns a tray of chips: a box of host.tray chips
 * (e.g. a v4 host's four chips are 2x2x1) repeated to tile the torus;
 * hosts are numbered by their tray's position, x fastest, and a host's
 * first chip is its tray's lowest-numbered one (the corner nearest the
 * origin).  Without host.tray, host h owns chips [h * chips_per_host,
 * (h + 1) * chips_per_host), a run of numbers, as topology files always
 * had it (the same hosts as a tray whenever the run is a box).
 *
 * Twisted torus (torus.twisted, 3-D k x k x 2k or k x 2k x 2k only, as
 * Cloud TPU v4 offers them [GC-v4]).  The twist of Camara et al.,
 * "Twisted Torus Topologies for Enhanced Interconnection Networks", IEEE
 * TPDS 21(12), 2010: the wrap-around link of each short dimension (size
 * k) lands k further along every long dimension (size 2k), that is from
 * (.., k-1 ,..) in + to (.., 0, ..) with each long coordinate moved by k
 * mod 2k (and back the same way in -).
 *
 * Zones (SimGrid's NetZones are the model).  The interconnect is a table
 * of zones, each of one kind, owning a contiguous range of link ids
 * (allocated in table order when the geometry is built, so no file hard
 * codes where a kind's links start) and a range of members:
 *   PS_ZONE_TORUS  a slice's ICI torus; members: its chips.  Link
 *                  (chip, dim, dir) is local id (chip * ndims + dim) * 2
 *                  + (dir < 0); ids of mesh edges and of dimensions of
 *                  size 1 are no link.  Routes: dimension order.
 *   PS_ZONE_CHIP   the on-chip paths between the cores of each chip, one
 *                  link per ordered pair of cores; members: the chips.
 *   PS_ZONE_PCIE   each host's PCIe to its tray, one link down and one up
 *                  per host; members: the hosts.
 *   PS_ZONE_DCN    the data-center network between slices (only when
 *                  slices > 1): each host's NIC, up to its leaf switch and
 *                  down from it (local ids 2h, 2h + 1), then each leaf's
 *                  uplink to the spine and downlink from it (2H + 2l,
 *                  2H + 2l + 1); leaf l serves hosts l x hosts_per_leaf
 *                  onwards; members: the hosts.  Routes: NIC up, leaf up
 *                  and leaf down when the hosts' leaves differ, NIC down.
 * In table order (and so link ids): the DCN (multislice only), one
 * torus zone per slice (members: that slice's chips), the chip zone and
 * the PCIe zone (both over every slice); a single slice has exactly the
 * three zones and link ids it always had.
 * A zone kind is one entry of a table of operations (its link count, what
 * a link joins, its name, a route between two of its members), so a new
 * network is a new kind and a new zone, not new cases across files: the
 * data-center network joining several slices' hosts (a NIC per host,
 * leaf-spine) is a PS_ZONE_DCN whose members are hosts, and a route
 * between slices goes device -> PCIe up -> DCN -> PCIe down -> device,
 * crossing zones through hosts as ps_geometry_route already crosses from
 * PCIe into the torus.  Zones nest: each names its parent (-1 for the
 * root); in one slice the torus is the root and the chip and PCIe zones
 * hang from it; with several, the DCN is the root and the tori hang from
 * it (the chip and PCIe zones name slice 0's torus).
 *
 * Routes (ps_geometry_route).  Between devices of one chip: the chip
 * zone's link.  Between devices of different chips: the torus zone, x,
 * then y, then z, the shortest way round each ring; on an even ring, a
 * destination exactly half-way round goes in the + direction when the
 * source's coordinate in that dimension is even and in the - direction
 * when it is odd.  On a twisted torus the route chooses, per short
 * dimension, the direct way or the way over the wrap (which moves the
 * long coordinates by k), then the shortest way round each long ring; of
 * the choices it takes the fewest hops, ties to the fewest wrap crossings,
 * then the lowest dimensions.  A route whose way in a dimension would
 * cross a failed link (PsRoute.failed) goes the other way round that ring
 * (the network refuses failures that leave no other way).  Host h to a
 * device: PCIe down, then, for a chip of another host, the torus from
 * host h's first chip; the reverse way back.  Between endpoints of two
 * slices: from a device, its slice's torus to its host's first chip and
 * PCIe up; the DCN from that host to the destination's; then PCIe down
 * and the torus from the host's first chip to a destination device.
 *
 * Axes.  A device's coordinates as collective groups see them: axis 0 is
 * its core within the chip, axis 1 + d torus dimension d, and the last
 * (PS_GEOMETRY_SLICE_AXIS) its slice.
 *
 * Invariant: every chip is in exactly one host's tray; every link id is in
 * exactly one zone's range and the ranges cover [0, ps_geometry_n_links);
 * ps_geometry_neighbour(c, d, s) = n implies ps_geometry_neighbour(n, d,
 * -s) = c; a route's links join end to end from its source to its
 * destination. */
#ifndef PS_TOPOLOGY_H
#define PS_TOPOLOGY_H

#include "io/config.h"

typedef struct PsGeometry PsGeometry;

typedef enum {
  PS_LINK_ICI,       /* between torus neighbours, one direction */
  PS_LINK_ON_CHIP,   /* between two cores of one chip, one direction */
  PS_LINK_PCIE_DOWN, /* host to its chips */
  PS_LINK_PCIE_UP,   /* chips to their host */
  PS_LINK_DCN_NIC_UP,    /* a host's NIC to its leaf switch */
  PS_LINK_DCN_NIC_DOWN,  /* a leaf switch to a host's NIC */
  PS_LINK_DCN_LEAF_UP,   /* a leaf switch to the spine */
  PS_LINK_DCN_LEAF_DOWN  /* the spine to a leaf switch */
} PsLinkKind;

/* What a link joins. */
typedef struct {
  PsLinkKind kind;
  int chip;               /* ICI, on-chip: the chip it leaves; PCIe: -1 */
  int to_chip;            /* ICI: the neighbour (twist applied); else -1 */
  int dim, dir;           /* ICI: dimension and +1 / -1; else -1, 0 */
  int from_core, to_core; /* on-chip only; else -1 */
  int host;               /* PCIe, DCN NIC; else -1 */
  int leaf;               /* DCN: the leaf switch; else -1 */
} PsLinkEnds;

typedef enum {
  PS_ZONE_TORUS,
  PS_ZONE_CHIP,
  PS_ZONE_PCIE,
  PS_ZONE_DCN,
  PS_ZONE_N_KINDS
} PsZoneKind;

/* One zone of the table. */
typedef struct {
  PsZoneKind kind;
  int parent;              /* index of the enclosing zone, -1 for the root */
  int first_link, n_links; /* its link ids: [first_link, first_link + n_links) */
  int first_member, n_members; /* chips (torus, chip) or hosts (PCIe) */
} PsZone;

/* A route being written: link ids go to out[0..max) (out may be NULL when
 * max is 0), n counts them all; failed (may be NULL) is indexed by link
 * id, nonzero for a failed link. */
typedef struct {
  int *out;
  int max;
  int n;
  const guint8 *failed;
} PsRoute;

/* (transfer full) topo (transfer none) must have passed the topology
 * checks and outlive the geometry. */
PsGeometry *ps_geometry_new(const PsTopology *topo);
void ps_geometry_free(PsGeometry *g);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PsGeometry, ps_geometry_free)

const PsTopology *ps_geometry_topology(const PsGeometry *g);
int ps_geometry_chips(const PsGeometry *g);
int ps_geometry_devices(const PsGeometry *g);
int ps_geometry_devices_per_chip(const PsGeometry *g);
int ps_geometry_hosts(const PsGeometry *g);
/* Slices (1 unless the topology has several), and chips of each. */
int ps_geometry_slices(const PsGeometry *g);
int ps_geometry_slice_chips(const PsGeometry *g);
/* The slice of an endpoint (a device or a host). */
int ps_geometry_endpoint_slice(const PsGeometry *g, int endpoint);

/* coords[d] for d < ndims (the rest set to 0), within the chip's slice;
 * ps_geometry_chip_at gives slice 0's chip. */
void ps_geometry_chip_coords(const PsGeometry *g, int chip, int coords[PS_MAX_DIMS]);
int ps_geometry_chip_at(const PsGeometry *g, const int coords[PS_MAX_DIMS]);
/* The chip one hop from chip along dim in direction dir (+1 / -1), twist
 * applied; -1 at a mesh edge or in a dimension of size 1. */
int ps_geometry_neighbour(const PsGeometry *g, int chip, int dim, int dir);

int ps_geometry_device_chip(const PsGeometry *g, int device);
int ps_geometry_device_core(const PsGeometry *g, int device);
int ps_geometry_device_at(const PsGeometry *g, int chip, int core);
int ps_geometry_chip_host(const PsGeometry *g, int chip);
/* The lowest-numbered chip of host's tray (where its traffic enters the
 * torus). */
int ps_geometry_host_first_chip(const PsGeometry *g, int host);
/* The tray's extent in each dimension (1 beyond ndims); a run of numbers
 * that is no box (no host.tray, chips_per_host not a box's size) gives
 * FALSE. */
gboolean ps_geometry_tray(const PsGeometry *g, int tray[PS_MAX_DIMS]);

/* Collective axes (see Axes above). */
#define PS_GEOMETRY_MAX_AXES (2 + PS_MAX_DIMS)
#define PS_GEOMETRY_SLICE_AXIS (1 + PS_MAX_DIMS)
/* The axes a device has: the slice axis only in a multislice topology
 * (ps_geometry_device_axes still writes it, 0, in one slice). */
int ps_geometry_n_axes(const PsGeometry *g);
/* Positions along axis (cores per chip; a torus dimension's size, 1
 * beyond ndims; slices). */
int ps_geometry_axis_extent(const PsGeometry *g, int axis);
/* "core", "x", "y", "z", "slice".  (transfer none) */
const char *ps_geometry_axis_name(int axis);
void ps_geometry_device_axes(const PsGeometry *g, int device, int coord[PS_GEOMETRY_MAX_AXES]);

/* The zone table. */
int ps_geometry_n_zones(const PsGeometry *g);
const PsZone *ps_geometry_zone(const PsGeometry *g, int zone);
/* The zone whose range holds link, or -1. */
int ps_geometry_link_zone(const PsGeometry *g, int link);
/* "torus", "on-chip", "pcie".  (transfer none) */
const char *ps_geometry_zone_kind_name(PsZoneKind kind);

/* Every zone's links together. */
int ps_geometry_n_links(const PsGeometry *g);
/* FALSE if link is no link (out of range, a mesh edge, a dimension of
 * size 1). */
gboolean ps_geometry_link_ends(const PsGeometry *g, int link, PsLinkEnds *out);
/* The ICI link leaving chip along dim in direction dir, or -1. */
int ps_geometry_ici_link(const PsGeometry *g, int chip, int dim, int dir);
int ps_geometry_on_chip_link(const PsGeometry *g, int chip, int from_core, int to_core);
int ps_geometry_pcie_link(const PsGeometry *g, int host, gboolean up);
/* A DCN link of kind PS_LINK_DCN_*: of host `index` (NIC) or leaf
 * `index` (leaf); only in a multislice topology. */
int ps_geometry_dcn_link(const PsGeometry *g, PsLinkKind kind, int index);
int ps_geometry_dcn_leaves(const PsGeometry *g);
/* The DCN link directions a DCN link fault names (its host's NIC or its
 * leaf's spine link; up, down or both) into links: how many (1 or 2). */
int ps_geometry_dcn_fault_links(const PsGeometry *g, const PsDcnLinkFault *f, int links[2]);
/* "chip (1,2) -> (1,3) +y", "chip (0,0) core 0 -> core 1",
 * "host 3 -> chips (PCIe)", "chips -> host 3 (PCIe)", "dcn nic host 3
 * up", "dcn leaf 1 down", "no link 7"; chips of a multislice topology
 * begin "slice 1 chip ...".
 * (transfer full) */
char *ps_geometry_link_name(const PsGeometry *g, int link);
/* "(1,2)": chip's coordinates as link names write them.  Appends to s. */
void ps_geometry_append_chip(GString *s, const PsGeometry *g, int chip);

/* The route from endpoint src to endpoint dst (see Routes above), written
 * into r. */
void ps_geometry_route(const PsGeometry *g, int src, int dst, PsRoute *r);

/* Whether the failed links (failed[link] nonzero) of the ring along dim
 * through chip leave a way between every two of its chips (see Routes);
 * FALSE with *plus and *minus set to a + and a - link that together cut
 * it. */
gboolean ps_geometry_ring_connected(const PsGeometry *g, const guint8 *failed, int chip, int dim,
                                    int *plus, int *minus);

/* Link-fault checks on parsed figures (faults.links entries whose chip
 * and dim are in range): each names an ICI link that exists (not along a
 * dimension of size 1, not off a mesh edge), a failure only where a route
 * can go round it (a ring of a torus that is not twisted), no link
 * direction twice, and failures that leave a way between every two chips.
 * The DCN entries (faults->dcn_links) name a host or leaf switch of a
 * multislice topology's data-center network, no link direction twice.
 * FALSE and a PS_INPUT_ERROR "FILE: faults.links[i]: reason" otherwise. */
gboolean ps_geometry_check_link_faults(const PsTopology *t, const PsFaultsConfig *faults,
                                       const char *file, GError **error);

#endif

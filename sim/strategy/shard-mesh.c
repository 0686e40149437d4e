/* shard-mesh.c: the logical mesh (data, fsdp, sequence, context, tensor) laid on
 * the slice's physical axes, as JAX's mesh_utils.create_device_mesh lays
 * a mesh on a TPU torus (its _create_device_mesh_for_nd_torus).
 *
 * The rule.  The physical axes are the torus dimensions x, y, z, then the
 * cores of a chip when a chip has more than one device, then the slices
 * of a multislice topology, each with its extent.  The logical axes are
 * taken from the most communication-heavy to the least (by default
 * tensor, context, sequence, fsdp, data; "mesh_order" lists them the other way,
 * outermost first).  Each takes the first subset of still-free physical
 * axes whose extents multiply to its size, trying subsets of as many axes
 * as there are first, then one fewer, down to one, each size's subsets in
 * lexicographic order of their indices (itertools.combinations), so a
 * heavy axis spreads over as many links as it can; an axis of size 1
 * takes none.  When no subset fits, the first free physical axis whose
 * extent the size divides is cut: the logical axis takes its inner part
 * (size consecutive positions) and the outer part stays free as an axis
 * of its own (JAX refuses such meshes; this keeps each group on
 * neighbouring chips).  Along a logical axis the coordinate is
 * mixed-radix over its physical axes, the last of them fastest, in
 * boustrophedon order (the faster digit runs backwards when the slower
 * one is odd), so consecutive coordinates are torus neighbours and a ring
 * over the axis takes one hop a step (JAX reshapes row-major: the members
 * of each group are the same, only their order differs).  Only when no
 * cut fits either is the mesh laid out row-major over the device
 * numbering (x fastest), the heaviest axis fastest.
 * A pipeline stage axis (shard-pipe.c) is outermost of all, after data:
 * it takes what the others leave, so each stage is a block of neighbouring
 * chips and consecutive stages neighbouring blocks, and the slices of a
 * multislice topology go to it first (stages across the DCN).
 * The groups of each kind (ps_shard_groups_init) are the devices that
 * differ only along its axes.
 * Invariant: the mapping is a bijection from devices to mesh coordinates,
 * and the members of a group along an axis differ only along the
 * physical axes that axis took. */
#include "strategy/shard-private.h"

#include "hw/topology.h"

#include <string.h>

/* Physical axes: geometry axis ids (topology.h) with extent > 1, each
 * possibly a part of one: positions (pos / stride) % extent of it. */
#define MAX_PHYS (PS_GEOMETRY_MAX_AXES + PS_SHARD_AXES + 1)
/* The logical axes outermost first: the stage, then c->order. */
#define N_ORDER (PS_SHARD_AXES + 1)
typedef struct {
  int n;
  int geo[MAX_PHYS];
  int extent[MAX_PHYS];
  int stride[MAX_PHYS];
} Physical;

static void physical_axes(const PsGeometry *g, Physical *p)
{
  p->n = 0;
  int order[PS_GEOMETRY_MAX_AXES], k = 0;
  for (int d = 1; d <= PS_MAX_DIMS; d++)
    order[k++] = d; /* x, y, z */
  order[k++] = 0;   /* cores */
  if (ps_geometry_n_axes(g) > PS_GEOMETRY_SLICE_AXIS)
    order[k++] = PS_GEOMETRY_SLICE_AXIS;
  for (int i = 0; i < k; i++) {
    int e = ps_geometry_axis_extent(g, order[i]);
    if (e > 1) {
      p->geo[p->n] = order[i];
      p->stride[p->n] = 1;
      p->extent[p->n++] = e;
    }
  }
}

/* The first subset (bit mask over p's axes) of `k` free axes whose
 * extents multiply to size, in combinations order; 0 when none. */
static unsigned find_subset(const Physical *p, unsigned used, int k, int size)
{
  int idx[MAX_PHYS];
  if (k > p->n)
    return 0;
  for (int i = 0; i < k; i++)
    idx[i] = i;
  for (;;) {
    unsigned mask = 0;
    int64_t prod = 1;
    for (int i = 0; i < k; i++) {
      mask |= 1u << idx[i];
      prod *= p->extent[idx[i]];
    }
    if (!(mask & used) && prod == size)
      return mask;
    int i = k - 1;
    while (i >= 0 && idx[i] == p->n - k + i)
      i--;
    if (i < 0)
      return 0;
    idx[i]++;
    for (int j = i + 1; j < k; j++)
      idx[j] = idx[j - 1] + 1;
  }
}

/* No set fits: the first free axis that size divides is cut in two, the
 * inner part (consecutive positions, size of them) taken, the outer part
 * left free as an axis of its own. */
static unsigned split_axis(Physical *p, unsigned used, int size)
{
  for (int j = 0; j < p->n && p->n < MAX_PHYS; j++) {
    if ((used & (1u << j)) || p->extent[j] % size != 0 || p->extent[j] == size)
      continue;
    p->geo[p->n] = p->geo[j];
    p->extent[p->n] = p->extent[j] / size;
    p->stride[p->n++] = p->stride[j] * size;
    p->extent[j] = size;
    return 1u << j;
  }
  return 0;
}

/* The slices go first, whole, to the outermost axis (first in c->order)
 * whose size they divide, as MaxText's dcn_data_parallelism puts data
 * across slices: only that axis's collectives cross the DCN; the axis
 * keeps size / slices to find on the torus.  Returns the physical axes
 * taken (none in one slice, or when no axis fits: the check refuses
 * that, ps_shard_dcn_axis). */
static unsigned dcn_axis(const Physical *p, const PsShardConfig *c, unsigned took[PS_N_AXES],
                         int need[PS_N_AXES])
{
  int j = p->n - 1;
  if (j < 0 || p->geo[j] != PS_GEOMETRY_SLICE_AXIS)
    return 0;
  int a = ps_shard_dcn_axis(c, p->extent[j]);
  if (a < 0)
    return 0;
  took[a] = 1u << j;
  need[a] /= p->extent[j];
  return took[a];
}

int ps_shard_dcn_axis(const PsShardConfig *c, int slices)
{
  if (slices > 1 && c->size[PS_AXIS_STAGE] % slices == 0)
    return PS_AXIS_STAGE;
  for (int i = 0; slices > 1 && i < PS_SHARD_AXES; i++)
    if (c->size[c->order[i]] % slices == 0)
      return c->order[i];
  return -1;
}

/* Row-major fallback: device d's coordinates, heaviest axis fastest. */
static void fallback(const PsShardConfig *c, const PsAxis *ord, int n, int *coord)
{
  for (int d = 0; d < n; d++) {
    int rest = d;
    for (int i = N_ORDER - 1; i >= 0; i--) {
      PsAxis a = ord[i];
      coord[d * PS_N_AXES + a] = rest % c->size[a];
      rest /= c->size[a];
    }
  }
}

int *ps_shard_mesh_map(const PsTopology *topo, const PsShardConfig *c, GString *how)
{
  g_autoptr(PsGeometry) g = ps_geometry_new(topo);
  int n = ps_geometry_devices(g);
  g_return_val_if_fail(n == ps_shard_devices(c), NULL);
  int *coord = g_new0(int, (size_t)n * PS_N_AXES);
  Physical p;
  physical_axes(g, &p);
  unsigned used = 0, took[PS_N_AXES] = {0};
  int need[PS_N_AXES];
  for (int a = 0; a < PS_N_AXES; a++)
    need[a] = c->size[a];
  used = dcn_axis(&p, c, took, need);
  PsAxis ord[N_ORDER] = {PS_AXIS_STAGE};
  memcpy(ord + 1, c->order, sizeof c->order);
  gboolean ok = TRUE;
  for (int i = N_ORDER - 1; i >= 0 && ok; i--) {
    PsAxis a = ord[i];
    if (need[a] == 1)
      continue;
    unsigned m = 0;
    for (int k = p.n; k >= 1 && !m; k--)
      m = find_subset(&p, used, k, need[a]);
    if (!m)
      m = split_axis(&p, used, need[a]);
    took[a] |= m;
    used |= m;
    ok = m != 0;
  }
  if (!ok) {
    fallback(c, ord, n, coord);
    if (how)
      g_string_append(how, "  " PS_SHARD_ROW_MAJOR ": row-major over devices, "
                           "the heaviest axis fastest\n");
    return coord;
  }
  for (int d = 0; d < n; d++) {
    int pos[PS_GEOMETRY_MAX_AXES];
    ps_geometry_device_axes(g, d, pos);
    for (int i = 0; i < N_ORDER; i++) {
      PsAxis a = ord[i];
      int x = 0;
      for (int j = 0; j < p.n; j++)
        if (took[a] & (1u << j)) /* boustrophedon: odd rows run back */
        {
          int at = pos[p.geo[j]] / p.stride[j] % p.extent[j];
          x = x * p.extent[j] + (x % 2 ? p.extent[j] - 1 - at : at);
        }
      coord[d * PS_N_AXES + a] = x;
    }
  }
  for (int i = N_ORDER - 1; how && i >= 0; i--) {
    PsAxis a = ord[i];
    if (a == PS_AXIS_STAGE && c->size[a] == 1)
      continue;
    g_string_append_printf(how, "  %-8s %3d:", ps_axis_name(a), c->size[a]);
    for (int j = 0; j < p.n; j++)
      if (took[a] & (1u << j))
        g_string_append_printf(how, " %s(%d%s)", ps_geometry_axis_name(p.geo[j]), p.extent[j],
                               p.stride[j] > 1 ? ", outer" : p.extent[j] <
                               ps_geometry_axis_extent(g, p.geo[j]) ? ", inner" : "");
    g_string_append(how, took[a] ? "\n" : " -\n");
  }
  return coord;
}

void ps_shard_groups_init(PsShardGroups *gr, const PsShardConfig *c, const int *coord, int n)
{
  int D = c->size[PS_AXIS_DATA], F = c->size[PS_AXIS_FSDP], T = c->size[PS_AXIS_TENSOR],
      S = c->size[PS_AXIS_SEQUENCE], C = c->size[PS_AXIS_CONTEXT];
  gr->size[PS_GROUP_MODEL] = T * S;
  gr->size[PS_GROUP_FSDP] = F * C;
  gr->size[PS_GROUP_DATA] = D;
  gr->size[PS_GROUP_CONTEXT] = C;
  for (int k = 0; k < PS_GROUP_N; k++) {
    gr->gid[k] = g_new(int, n);
    gr->pos[k] = g_new(int, n);
    gr->members[k] = g_new(int, n);
  }
  for (int d = 0; d < n; d++) {
    const int *x = coord + d * PS_N_AXES;
    int dd = x[PS_AXIS_DATA], f = x[PS_AXIS_FSDP], t = x[PS_AXIS_TENSOR],
        s = x[PS_AXIS_SEQUENCE], cx = x[PS_AXIS_CONTEXT],
        st = x[PS_AXIS_STAGE]; /* a group is one stage's */
    gr->gid[PS_GROUP_MODEL][d] = ((st * D + dd) * F + f) * C + cx;
    gr->pos[PS_GROUP_MODEL][d] = s * T + t;
    /* the weights' group: fsdp x context, context fastest and running back
     * on odd fsdp rows, so consecutive members stay neighbours */
    gr->gid[PS_GROUP_FSDP][d] = ((st * D + dd) * S + s) * T + t;
    gr->pos[PS_GROUP_FSDP][d] = f * C + (f % 2 ? C - 1 - cx : cx);
    gr->gid[PS_GROUP_DATA][d] = (((st * F + f) * C + cx) * S + s) * T + t;
    gr->pos[PS_GROUP_DATA][d] = dd;
    gr->gid[PS_GROUP_CONTEXT][d] = (((st * D + dd) * F + f) * S + s) * T + t;
    gr->pos[PS_GROUP_CONTEXT][d] = cx;
    for (int k = 0; k < PS_GROUP_N; k++)
      gr->members[k][gr->gid[k][d] * gr->size[k] + gr->pos[k][d]] = d;
  }
}

void ps_shard_groups_clear(PsShardGroups *gr)
{
  for (int k = 0; k < PS_GROUP_N; k++) {
    g_free(gr->gid[k]);
    g_free(gr->pos[k]);
    g_free(gr->members[k]);
  }
}

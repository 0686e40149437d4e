/* group.c: a collective's group (collective-private.h's PsCollGroup):
 * its members' devices, checked, and where they sit, a grid when their
 * coordinates form a box.
 * Invariant: a group's devices are distinct devices of the network; when
 * is_grid, at[] and grid_pos[] are inverse maps between members and grid
 * indices. */
#include "collectives/collective-private.h"

#include <string.h>

gboolean ps_coll_group_init(PsCollGroup *g, PsNetwork *net, const int *devices, int n,
                            GError **error)
{
  memset(g, 0, sizeof *g);
  g->net = net;
  int nd = ps_network_devices(net);
  if (n < 1) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "a collective needs at least one member, got %d", n);
    return FALSE;
  }
  for (int i = 0; i < n; i++)
    if (devices[i] < 0 || devices[i] >= nd) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "member %d is device %d, but the topology has devices 0..%d", i, devices[i],
                  nd - 1);
      return FALSE;
    }
  /* repeats, by a bit per device of the network (a pod builds a group per
   * collective, of up to every device); the smallest repeated one named */
  g_autofree guint64 *seen = g_new0(guint64, (size_t)nd / 64 + 1);
  int repeated = -1;
  for (int i = 0; i < n; i++) {
    guint64 bit = G_GUINT64_CONSTANT(1) << (devices[i] % 64);
    if (seen[devices[i] / 64] & bit)
      repeated = repeated < 0 ? devices[i] : MIN(repeated, devices[i]);
    seen[devices[i] / 64] |= bit;
  }
  if (repeated >= 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "device %d is listed twice in the group", repeated);
    return FALSE;
  }
  g->n = n;
  g->dev = g_memdup2(devices, sizeof(int) * (size_t)n);

  /* coordinates on the geometry's axes (core, x, y, z) and the values
   * present in each */
  const PsGeometry *geo = ps_network_geometry(net);
  int extent[PS_COLL_MAX_AXES];
  for (int k = 0; k < PS_COLL_MAX_AXES; k++)
    extent[k] = ps_geometry_axis_extent(geo, k);
  int *coord = g_new(int, (size_t)n * PS_COLL_MAX_AXES);
  int *rank[PS_COLL_MAX_AXES];
  int count[PS_COLL_MAX_AXES];
  for (int k = 0; k < PS_COLL_MAX_AXES; k++)
    rank[k] = g_new0(int, extent[k]);
  for (int i = 0; i < n; i++) {
    ps_geometry_device_axes(geo, devices[i], &coord[i * PS_COLL_MAX_AXES]);
    for (int k = 0; k < PS_COLL_MAX_AXES; k++)
      rank[k][coord[i * PS_COLL_MAX_AXES + k]] = 1;
  }
  int64_t product = 1;
  for (int k = 0; k < PS_COLL_MAX_AXES; k++) {
    count[k] = 0;
    for (int v = 0; v < extent[k]; v++)
      rank[k][v] = rank[k][v] ? count[k]++ : -1;
    product *= count[k];
    if (count[k] > 1) {
      g->axis_coord[g->n_axes] = k;
      g->axis_size[g->n_axes] = count[k];
      g->n_axes++;
    }
  }
  g->is_grid = product == n;
  if (g->is_grid) {
    g->grid_pos = g_new(int, (size_t)n * (g->n_axes > 0 ? g->n_axes : 1));
    g->at = g_new(int, n);
    for (int i = 0; i < n; i++)
      g->at[i] = -1;
    for (int i = 0; i < n && g->is_grid; i++) {
      int idx = 0;
      for (int a = g->n_axes - 1; a >= 0; a--) {
        int k = g->axis_coord[a];
        int r = rank[k][coord[i * PS_COLL_MAX_AXES + k]];
        g->grid_pos[i * g->n_axes + a] = r;
        idx = idx * g->axis_size[a] + r;
      }
      if (g->at[idx] >= 0)
        g->is_grid = FALSE;
      g->at[idx] = i;
    }
  }
  for (int k = 0; k < PS_COLL_MAX_AXES; k++)
    g_free(rank[k]);
  g_free(coord);
  return TRUE;
}

void ps_coll_group_clear(PsCollGroup *g)
{
  g_free(g->dev);
  if (!g->grid_borrowed) {
    g_free(g->grid_pos);
    g_free(g->at);
  }
}

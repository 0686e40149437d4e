/* lines.c: the order a ring visits a grid group in: the boustrophedon
 * (snake) over the grid's axes, axis 0 fastest, or, on a mesh without
 * wrap-around, where the snake's last member is far from its first, a
 * Hamiltonian cycle of the grid.
 *
 * Invariant: an order lists every grid index of the axes it covers once;
 * consecutive indices are grid neighbours, and so are the last and the
 * first wherever the order is a cycle. */
#include "collectives/collective-private.h"

/* The boustrophedon (snake) order over a grid of k axes of the given
 * sizes, axis 0 fastest: the grid indices, consecutive ones neighbours.
 * Fills out[] (the product of the sizes) and returns how many. */
static int snake_sizes(const int *size, int k, int *out)
{
  int n = 1;
  for (int a = 0; a < k; a++)
    n *= size[a];
  int c[PS_COLL_MAX_AXES] = {0}, dir[PS_COLL_MAX_AXES];
  for (int a = 0; a < k; a++)
    dir[a] = 1;
  for (int i = 0; i < n; i++) {
    int idx = 0;
    for (int a = k - 1; a >= 0; a--)
      idx = idx * size[a] + c[a];
    out[i] = idx;
    /* step the lowest axis that can move; reverse the ones below it */
    for (int a = 0; a < k; a++) {
      int x = c[a] + dir[a];
      if (x >= 0 && x < size[a]) {
        c[a] = x;
        for (int b = 0; b < a; b++)
          dir[b] = -dir[b];
        break;
      }
    }
  }
  return n;
}

/* The snake over the grid's first k axes.  (transfer full) *out */
static int snake(const PsCollGroup *g, int k, int **out)
{
  int n = 1;
  for (int a = 0; a < k; a++)
    n *= g->axis_size[a];
  *out = g_new(int, n);
  return snake_sizes(g->axis_size, k, *out);
}

/* A Hamiltonian cycle of a U x V grid, V even: (u, v) pairs in cycle
 * order, every one a grid neighbour of the next and the last of the first.
 * Row v = 0 left to right, the rows v >= 1 snaking over u >= 1, then back
 * down column u = 0. */
static void cycle_uv(int U, int V, int *u, int *v)
{
  int i = 0;
  for (int x = 0; x < U; x++, i++)
    u[i] = x, v[i] = 0;
  for (int y = 1; y < V; y++)
    for (int k = 0; k < U - 1; k++, i++) {
      u[i] = y % 2 ? U - 1 - k : 1 + k;
      v[i] = y;
    }
  for (int y = V - 1; y >= 1; y--, i++)
    u[i] = 0, v[i] = y;
}

/* A ring over the grid's first k axes whose every step is between
 * neighbours, for a mesh (no wrap-around) where a snake's closing edge
 * would run back across the grid: a Hamiltonian cycle of the chip axes
 * among them (the first chip axis against the snake of the others), a
 * chip's cores visited in turn, in alternating order.  The grid indices
 * in ring order, or NULL when there is none (fewer than two chip axes, or
 * an odd number of chips).  (transfer full) */
static int *grid_cycle(const PsCollGroup *g, int k)
{
  int lo = k > 0 && g->axis_coord[0] == 0; /* a core axis first */
  int K = lo ? g->axis_size[0] : 1;
  if (k - lo < 2)
    return NULL;
  int U = g->axis_size[lo];
  int V = 1;
  for (int a = lo + 1; a < k; a++)
    V *= g->axis_size[a];
  if ((U * V) % 2)
    return NULL;
  int C = U * V;
  g_autofree int *rows = g_new(int, V);
  snake_sizes(g->axis_size + lo + 1, k - lo - 1, rows);
  g_autofree int *cu = g_new(int, C);
  g_autofree int *cv = g_new(int, C);
  if (V % 2) /* then U is even: the cycle over (v, u) */
    cycle_uv(V, U, cv, cu);
  else
    cycle_uv(U, V, cu, cv);
  int *order = g_new(int, C * K);
  for (int i = 0, r = 0; i < C; i++)
    for (int j = 0; j < K; j++, r++)
      order[r] = (i % 2 ? K - 1 - j : j) + K * (cu[i] + U * rows[cv[i]]);
  return order;
}

/* Links crossed going once round the line of grid indices order[0..L). */
static int line_hops(const PsCollGroup *g, const int *order, int L)
{
  int h = 0;
  for (int i = 0; i < L; i++)
    h += ps_network_hops(g->net, g->dev[g->at[order[i]]], g->dev[g->at[order[(i + 1) % L]]]);
  return h;
}

int ps_coll_line_order(const PsCollGroup *g, int k, int **out)
{
  int L = snake(g, k, out);
  int *cycle = grid_cycle(g, k);
  if (cycle && line_hops(g, cycle, L) < line_hops(g, *out, L)) {
    g_free(*out);
    *out = cycle;
  } else {
    g_free(cycle);
  }
  return L;
}

int *ps_coll_ring_order(const PsCollGroup *g)
{
  int *order;
  if (!g->is_grid) {
    order = g_new(int, g->n);
    for (int i = 0; i < g->n; i++)
      order[i] = i;
    return order;
  }
  ps_coll_line_order(g, g->n_axes, &order);
  for (int i = 0; i < g->n; i++)
    order[i] = g->at[order[i]];
  return order;
}

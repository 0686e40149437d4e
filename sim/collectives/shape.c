/* shape.c: one plan for the collectives whose groups are translations of
 * each other, as the groups of one request of a sharded plan are (every
 * tensor group's all-reduce of a layer, every fsdp group's gather).
 *
 * A plan is a function of the group's geometry only through its members'
 * coordinates and the routes between them: its steps name members, never
 * devices, and its choices ("auto", torus or not, a line that closes) and
 * predictions read hop counts and link figures.  Where the network is
 * translation-symmetric (ps_network_translation_symmetric: one slice, not
 * twisted, no degraded link), moving every member by the same vector of
 * even chip offsets moves every route onto one of the same hops and
 * figures, so the plan of one group is the plan of the other.  A shape is
 * what decides that: the operation, size and algorithm asked for, the
 * members' cores, their chip coordinates relative to member 0's, and the
 * parity of member 0's.
 * Invariant: two groups of equal shape get equal plans, and a shared plan
 * lives while any collective or cache holds a reference to it. */
#include "collectives/collective-private.h"

#include <string.h>

struct PsCollShape {
  PsCollOp op;
  int64_t count, chunk;
  int elem_bytes, root, n;
  char *algo;                    /* as asked, "auto" for NULL */
  int parity[PS_COLL_MAX_AXES];  /* of member 0's coordinates */
  int *rel;                      /* n x PS_COLL_MAX_AXES: core, chip offsets, slice */
  guint hash;
};

PsCollShape *ps_coll_shape_new(const PsCollGroup *g, const PsCollSpec *spec, int64_t chunk)
{
  PsCollShape *s = g_new0(PsCollShape, 1);
  *s = (PsCollShape){spec->op, spec->count, chunk, spec->elem_bytes, spec->root, g->n,
                     g_strdup(spec->algo ? spec->algo : "auto"), {0}, NULL, 0};
  const PsGeometry *geo = ps_network_geometry(g->net);
  s->rel = g_new(int, (size_t)g->n * PS_COLL_MAX_AXES);
  int base[PS_COLL_MAX_AXES];
  ps_geometry_device_axes(geo, g->dev[0], base);
  for (int k = 0; k < PS_COLL_MAX_AXES; k++)
    s->parity[k] = base[k] & 1;
  guint h = (guint)s->op * 31u + (guint)s->n;
  h = h * 31u + (guint)(s->count ^ (s->count >> 32)) + (guint)s->elem_bytes * 7u;
  h = h * 31u + (guint)s->root + (guint)chunk + g_str_hash(s->algo);
  for (int i = 0; i < g->n; i++) {
    int *r = &s->rel[i * PS_COLL_MAX_AXES];
    ps_geometry_device_axes(geo, g->dev[i], r);
    /* the core and the slice as they are; the torus dimensions relative */
    for (int k = 1; k < PS_GEOMETRY_SLICE_AXIS; k++)
      r[k] -= base[k];
    for (int k = 0; k < PS_COLL_MAX_AXES; k++)
      h = h * 31u + (guint)r[k];
  }
  for (int k = 0; k < PS_COLL_MAX_AXES; k++)
    h = h * 3u + (guint)s->parity[k];
  s->hash = h;
  return s;
}

void ps_coll_shape_free(gpointer p)
{
  PsCollShape *s = p;
  if (!s)
    return;
  g_free(s->algo);
  g_free(s->rel);
  g_free(s);
}

guint ps_coll_shape_hash(gconstpointer p) { return ((const PsCollShape *)p)->hash; }

gboolean ps_coll_shape_equal(gconstpointer pa, gconstpointer pb)
{
  const PsCollShape *a = pa, *b = pb;
  return a->hash == b->hash && a->op == b->op && a->count == b->count &&
         a->chunk == b->chunk && a->elem_bytes == b->elem_bytes && a->root == b->root &&
         a->n == b->n && strcmp(a->algo, b->algo) == 0 &&
         memcmp(a->parity, b->parity, sizeof a->parity) == 0 &&
         memcmp(a->rel, b->rel, sizeof(int) * (size_t)a->n * PS_COLL_MAX_AXES) == 0;
}

/* ---- shared plans ---------------------------------------------------- */

PsCollShared *ps_coll_shared_new(PsCollGroup *g)
{
  PsCollShared *sh = g_new0(PsCollShared, 1);
  sh->refs = 1;
  sh->g = *g;
  sh->g.dev = g_memdup2(g->dev, sizeof(int) * (size_t)g->n);
  /* the grid tables move to the shared group; g borrows them */
  g->grid_borrowed = TRUE;
  sh->g.grid_borrowed = FALSE;
  return sh;
}

PsCollShared *ps_coll_shared_ref(PsCollShared *sh)
{
  sh->refs++;
  return sh;
}

void ps_coll_shared_unref(gpointer p)
{
  PsCollShared *sh = p;
  if (!sh || --sh->refs > 0)
    return;
  ps_coll_fast_shape_free(sh->fast);
  if (sh->plan)
    sh->algo->plan_free(sh->plan);
  g_free(sh->why);
  g_free(sh->links);
  g_free(sh->g.dev);
  g_free(sh->g.grid_pos);
  g_free(sh->g.at);
  g_free(sh);
}

/* cache.c: what a pod's collectives made so far leave for the next ones
 * (collective.h's PsCollCache): the algorithm "auto" picked for a group,
 * operation and size, the plans shared by translated groups (shape.c) and
 * the hubs of the groups' collectives (fastshared.c).
 * Invariant: an entry is found only for the same operation, size, element
 * size, root, chunk and members, in the same order. */
#include "collectives/collective-private.h"

#include <string.h>

/* "auto"'s choices so far: a spec (its members copied) and the algorithm
 * its predictions picked, with the reason. */
typedef struct {
  PsCollSpec spec;
  int *members;
  int64_t chunk;
  PsCollChoice choice; /* its why owned */
} CacheEntry;

static guint entry_hash(gconstpointer p)
{
  const CacheEntry *e = p;
  guint h = (guint)e->spec.op * 31u + (guint)e->spec.n_members;
  h = h * 31u + (guint)(e->spec.count ^ (e->spec.count >> 32));
  h = h * 31u + (guint)e->spec.elem_bytes * 7u + (guint)e->spec.root;
  h = h * 31u + (guint)(e->chunk ^ (e->chunk >> 32));
  for (int i = 0; i < e->spec.n_members; i++)
    h = h * 31u + (guint)e->members[i];
  return h;
}

static gboolean entry_equal(gconstpointer pa, gconstpointer pb)
{
  const CacheEntry *a = pa, *b = pb;
  return a->spec.op == b->spec.op && a->spec.count == b->spec.count &&
         a->spec.elem_bytes == b->spec.elem_bytes && a->spec.root == b->spec.root &&
         a->chunk == b->chunk && a->spec.n_members == b->spec.n_members &&
         memcmp(a->members, b->members, sizeof(int) * (size_t)a->spec.n_members) == 0;
}

static void entry_free(gpointer p)
{
  CacheEntry *e = p;
  g_free(e->members);
  g_free((char *)e->choice.why);
  g_free(e);
}

PsCollCache *ps_coll_cache_new(void)
{
  PsCollCache *cache = g_new0(PsCollCache, 1);
  cache->entries = g_hash_table_new_full(entry_hash, entry_equal, entry_free, NULL);
  cache->shapes = g_hash_table_new_full(ps_coll_shape_hash, ps_coll_shape_equal,
                                        ps_coll_shape_free, ps_coll_shared_unref);
  cache->hubs = ps_coll_hubs_new();
  return cache;
}

void ps_coll_cache_free(PsCollCache *cache)
{
  if (!cache)
    return;
  g_hash_table_destroy(cache->entries);
  g_hash_table_destroy(cache->shapes);
  g_hash_table_destroy(cache->hubs);
  g_free(cache);
}

guint ps_coll_cache_plans(const PsCollCache *cache)
{
  return g_hash_table_size(cache->shapes);
}

const PsCollChoice *ps_coll_cache_find(const PsCollCache *cache, const PsCollSpec *spec,
                                       int64_t chunk)
{
  if (!cache)
    return NULL;
  CacheEntry key = {*spec, (int *)spec->devices, chunk, {NULL, 0, NULL}};
  const CacheEntry *e = g_hash_table_lookup(cache->entries, &key);
  return e ? &e->choice : NULL;
}

void ps_coll_cache_add(PsCollCache *cache, const PsCollSpec *spec, int64_t chunk,
                       const PsCollAlgo *algo, int variant, const char *why)
{
  CacheEntry *e = g_new(CacheEntry, 1);
  *e = (CacheEntry){*spec, g_memdup2(spec->devices, sizeof(int) * (size_t)spec->n_members),
                    chunk, {algo, variant, g_strdup(why)}};
  e->spec.devices = NULL;
  e->spec.algo = NULL;
  g_hash_table_add(cache->entries, e);
}

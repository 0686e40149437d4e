/* network.c: the interconnect tests' shared fixture (see network.h). */
#include "network.h"

PsTopology *shorthand_topology(const char *spec, const char *const *ov)
{
  GError *error = NULL;
  PsTopology *t = ps_network_shorthand(spec, ov, &error);
  g_assert_no_error(error);
  g_assert_nonnull(t);
  return t;
}

void netfix_init(NetFix *f, PsTopology *t, int64_t chunk)
{
  f->topo = t;
  f->engine = ps_engine_new();
  f->net = ps_network_new(f->engine, t, chunk);
}

void netfix_clear(NetFix *f)
{
  ps_network_free(f->net);
  ps_engine_free(f->engine);
  ps_topology_free(f->topo);
}

/* network.h: what the tests of the interconnect and the collectives share:
 * a shorthand topology parsed or the test fails, and a network on its own
 * engine.
 * Invariant: a NetFix owns its topology, engine and network, freed together
 * by netfix_clear. */
#ifndef PS_TEST_SUPPORT_NETWORK_H
#define PS_TEST_SUPPORT_NETWORK_H

#include "hw/network.h"

/* The shorthand spec ("ring:8", "torus:4x4") with the overrides ov
 * (NULL-terminated; NULL for none), asserting it parses.  (transfer full) */
PsTopology *shorthand_topology(const char *spec, const char *const *ov);

typedef struct {
  PsTopology *topo;
  PsEngine *engine;
  PsNetwork *net;
} NetFix;

/* A fresh engine and a network over t cut in chunks of chunk bytes; takes
 * t (transfer full). */
void netfix_init(NetFix *f, PsTopology *t, int64_t chunk);
/* Frees the network, the engine and the topology. */
void netfix_clear(NetFix *f);

#endif

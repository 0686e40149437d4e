/* registry.h: a strategy registry for the tests that write a strategy of
 * their own (strategy/strategy.h): the built-ins, then theirs, with no
 * global registration.
 * Invariant: the registry holds the built-ins in their order and the
 * test's entry last; freeing it frees no strategy. */
#ifndef PS_TEST_SUPPORT_REGISTRY_H
#define PS_TEST_SUPPORT_REGISTRY_H

#include "strategy/strategy.h"

/* The built-ins plus extra (transfer none: it must outlive the registry).
 * (transfer full: registry_free) */
PsStrategyRegistry *registry_with(const PsStrategy *extra);
void registry_free(PsStrategyRegistry *reg);

#endif

/* registry.c: see registry.h. */
#include "registry.h"

#include <string.h>

PsStrategyRegistry *registry_with(const PsStrategy *extra)
{
  const PsStrategyRegistry *builtin = ps_strategy_builtin();
  int n = 0;
  while (builtin->entries[n])
    n++;
  const PsStrategy **entries = g_new0(const PsStrategy *, n + 2);
  memcpy(entries, builtin->entries, sizeof(PsStrategy *) * (size_t)n);
  entries[n] = extra;
  PsStrategyRegistry *reg = g_new0(PsStrategyRegistry, 1);
  reg->entries = entries;
  return reg;
}

void registry_free(PsStrategyRegistry *reg)
{
  g_free((gpointer)reg->entries);
  g_free(reg);
}

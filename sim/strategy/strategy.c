/* strategy.c: the registry of strategies (see strategy.h). */
#include "strategy/strategy.h"

#include "strategy/strategy-private.h"

#include <string.h>

const PsStrategy *const ps_strategies[] = {&ps_strategy_replicate, &ps_strategy_pipeline, NULL};

const PsStrategy *ps_strategy_find(const char *name)
{
  for (int i = 0; ps_strategies[i]; i++)
    if (strcmp(ps_strategies[i]->name, name) == 0)
      return ps_strategies[i];
  return NULL;
}

PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error)
{
  const char *name = exp->strategy.kind == PS_STRATEGY_PIPELINE ? "pipeline" : "replicate";
  const PsStrategy *s = ps_strategy_find(name);
  g_assert(s != NULL);
  /* the pod validates every plan it is given (ps_plan_validate), strategies'
   * and hand-written ones alike, so it is not checked twice here */
  return s->compile(exp, error);
}

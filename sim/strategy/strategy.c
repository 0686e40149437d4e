/* strategy.c: registries of strategies (see strategy.h): the built-in one,
 * lookup by name, and hanging the strategy an experiment names on it.
 *
 * Invariant: the built-in table is const; an experiment's strategy
 * section, once attached, holds an entry and the configuration that
 * entry's parse returned (freed with the experiment). */
#include "strategy/strategy.h"

#include "strategy/shard-private.h"
#include "strategy/strategy-private.h"

#include <string.h>

static const PsStrategy *const builtin_entries[] = {&ps_strategy_replicate,
                                                    &ps_strategy_pipeline, &ps_strategy_shard,
                                                    NULL};
static const PsStrategyRegistry builtin = {builtin_entries};

const PsStrategyRegistry *ps_strategy_builtin(void)
{
  return &builtin;
}

const PsStrategy *ps_strategy_find(const PsStrategyRegistry *reg, const char *name)
{
  g_return_val_if_fail(name != NULL, NULL);
  if (!reg)
    reg = &builtin;
  for (int i = 0; reg->entries[i]; i++)
    if (strcmp(reg->entries[i]->name, name) == 0)
      return reg->entries[i];
  return NULL;
}

/* "must be one of: a, b; got 'c'", as an unknown value of any key reads. */
static void unknown_kind(const PsStrategyRegistry *reg, const PsExperiment *exp,
                         GError **error)
{
  GString *list = g_string_new(NULL);
  for (int i = 0; reg->entries[i]; i++)
    g_string_append_printf(list, "%s%s", i ? ", " : "", reg->entries[i]->name);
  ps_strategy_fail(error, PS_INPUT_ERROR_VALUE, exp->file, "strategy.kind",
                   "must be one of: %s; got '%s'", list->str, exp->strategy.kind);
  g_string_free(list, TRUE);
}

gboolean ps_strategy_attach(const PsStrategyRegistry *reg, PsExperiment *exp, GError **error)
{
  g_return_val_if_fail(exp != NULL && exp->strategy.impl == NULL, FALSE);
  if (!reg)
    reg = &builtin;
  g_return_val_if_fail(reg->entries[0] != NULL, FALSE);
  PsStrategySection *sec = &exp->strategy;
  const PsStrategy *s = sec->kind ? ps_strategy_find(reg, sec->kind) : reg->entries[0];
  if (!s) {
    unknown_kind(reg, exp, error);
    return FALSE;
  }
  void *config = NULL;
  if (!s->parse(sec->json, exp->topology, exp->file, &config, error))
    return FALSE;
  sec->impl = s;
  sec->config = config;
  sec->free_config = s->free;
  if (!sec->kind)
    sec->kind = g_strdup(s->name);
  return TRUE;
}

PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error)
{
  g_return_val_if_fail(exp != NULL && exp->strategy.impl != NULL, NULL);
  /* the pod validates every plan it is given (ps_plan_validate), strategies'
   * and hand-written ones alike, so it is not checked twice here */
  return exp->strategy.impl->compile(exp, exp->strategy.config, error);
}

/* strategy.h: strategies compile an experiment (model, batch, topology)
 * into a plan (program/program.h), as XLA compiles a training step for a
 * pod.  A strategy is one const table entry: its name, how it reads its
 * keys of the experiment's "strategy" object (with their defaults), how it
 * checks them against the rest of the experiment, how it compiles, and how
 * it prints its keys back.  Registries of entries are looked up by the
 * experiment's strategy.kind; the built-in one is const, and a caller may
 * pass its own (a test's strategy runs without touching any other file).
 *
 * Invariant: a compiled plan passes ps_plan_validate, every op carries its
 * cost on the experiment's hardware, and nothing outside strategy/ knows
 * which strategies exist: they are reached through a registry only. */
#ifndef PS_STRATEGY_H
#define PS_STRATEGY_H

#include "io/config.h"
#include "program/program.h"

/* A strategy's configuration is its own (void * in the handlers, cast
 * inside each strategy's file). */
struct PsStrategy {
  const char *name;
  const char *summary;
  /* Reads `obj` (the experiment's "strategy" object, NULL when the file
   * has none) of `file`; the keys it does not know are errors, and
   * defaults may depend on `topo` (the slice the overrides chose).  Sets
   * *config (transfer full, freed by `free`) or returns FALSE with a
   * PS_INPUT_ERROR naming the file and the key. */
  gboolean (*parse)(json_object *obj, const PsTopology *topo, const char *file, void **config,
                    GError **error);
  /* Checks config against the rest of the experiment (batch, model,
   * devices, HBM where it can be judged before compiling); FALSE with a
   * PS_INPUT_ERROR a user can act on. */
  gboolean (*check)(const PsExperiment *exp, const void *config, GError **error);
  /* (transfer full) NULL with a PS_INPUT_ERROR naming the experiment's file
   * and key when the strategy cannot run the experiment. */
  PsPlan *(*compile)(const PsExperiment *exp, const void *config, GError **error);
  /* The keys with every default filled in, "kind" first: reloads as the
   * same configuration.  (transfer full) */
  json_object *(*to_json)(const void *config);
  /* Devices the plan occupies (devices 0 .. n - 1). */
  int (*devices)(const void *config);
  /* What `describe --stages` adds (e.g. a pipeline's partition), or NULL
   * when the strategy has nothing to add. */
  gboolean (*describe)(const PsExperiment *exp, const void *config, GString *out,
                       GError **error);
  /* What `describe --kernels` lists for `device` of `plan`: its compute
   * ops' kernels as the strategy costed them (e.g. on its local shard of
   * the model); NULL: each op costed on the experiment's whole layers. */
  void (*kernels)(const PsExperiment *exp, const void *config, const PsPlan *plan, int device,
                  GString *out);
  void (*free)(void *config);
};
typedef struct PsStrategy PsStrategy;

/* A registry: a NULL-terminated array of entries, the first the default
 * for an experiment whose strategy has no "kind". */
typedef struct {
  const PsStrategy *const *entries;
} PsStrategyRegistry;

/* The built-in strategies (const, shared). */
const PsStrategyRegistry *ps_strategy_builtin(void);
/* The entry named `name` in `reg` (NULL: the built-ins), or NULL. */
const PsStrategy *ps_strategy_find(const PsStrategyRegistry *reg, const char *name);
/* The entry the experiment's strategy.kind names in `reg` (NULL: the
 * built-ins; a NULL kind: the registry's first), parsed from the
 * experiment's strategy object and hung on exp->strategy; FALSE with a
 * PS_INPUT_ERROR on strategy.kind or the strategy's keys. */
gboolean ps_strategy_attach(const PsStrategyRegistry *reg, PsExperiment *exp, GError **error);

/* Compiles with the strategy attached to the experiment (by
 * ps_experiment_load).  (transfer full) */
PsPlan *ps_strategy_compile(const PsExperiment *exp, GError **error);

#endif

/* experiment.h: what the tests that load topologies and load and run whole
 * experiments share: loads and a run that fail the test on any error.
 * Invariant: a value returned here is valid; an error never reaches the
 * caller. */
#ifndef PS_TEST_SUPPORT_EXPERIMENT_H
#define PS_TEST_SUPPORT_EXPERIMENT_H

#include "run/experiment.h"
#include "run/run.h"

/* The topology name_or_path with the overrides ov (NULL-terminated; NULL
 * for none), asserting it loads.  (transfer full) */
PsTopology *topology_load(const char *name_or_path, const char *const *ov);
/* The experiment file path with the overrides ov (NULL-terminated; NULL
 * for none), asserting it loads.  (transfer full) */
PsExperiment *experiment_load(const char *path, const char *const *ov);
/* The experiment file path with the overrides ov compiled by its
 * strategy, asserting it loads, compiles and validates (every SEND meets
 * its RECV); *out is the experiment.  (transfer full) */
PsPlan *experiment_compile(const char *path, const char *const *ov, PsExperiment **out);
/* A model from JSON text written with ' for " (file "t.json"); NULL and
 * *error when it does not load (a parse error of the text fails the test).
 * (transfer full) */
PsModel *model_parse_quoted(const char *text, GError **error);
/* Asserts that a model of 8 token positions, an embedding of 8, the layer
 * `layer` (JSON object text, ' for "), a dense head and a loss is refused
 * with an input error whose message contains `want`, which the test log
 * shows. */
void model_layer_refused(const char *layer, const char *want);
/* Runs e keeping device 0's final weights, asserting the run succeeds
 * (ps_summary_clear frees the summary). */
PsSummary experiment_run(const PsExperiment *e);

#endif

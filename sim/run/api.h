/* api.h: a small, stable API of strings in and strings out, for programs
 * that load libpodsim without its headers (Python's ctypes: python/podsim).
 * No struct of the library crosses it: an experiment is named, overrides
 * are "KEY=VALUE" strings as `podsim run --set` takes them, and results
 * come back as the JSON text the command line prints.
 *
 * Invariant: each call loads, runs and frees everything it needs (no state
 * between calls, so calls on several threads are independent); a result is
 * NULL exactly when *error is set, with the message the command line
 * prints after "podsim: ", and ps_api_error_status() is the exit status it
 * would exit with. */
#ifndef PS_RUN_API_H
#define PS_RUN_API_H

#include <glib.h>

/* The version of the library ("0.1.0").  (transfer none) */
const char *ps_api_version(void);

/* Runs experiment (a name or a path) with overrides sets[0..n-1] and no
 * trace: the summary object `podsim run --json --no-trace` prints, as JSON
 * text.  An override naming a key the experiment does not know fails with
 * the command line's suggestion of the key meant.  (transfer full: free
 * with ps_api_free) */
char *ps_api_run_json(const char *experiment, const char *const *sets, int n, GError **error);

/* What `podsim describe KIND NAME --set ...` shows: for "experiment" its
 * resolved tree and for "topology" the topology, every default filled in,
 * as JSON text (the topology's keys with or without the "topology."
 * prefix); for "model" the text table.  (transfer full: free with
 * ps_api_free) */
char *ps_api_describe(const char *kind, const char *name, const char *const *sets, int n,
                      GError **error);

/* The command line's exit status for error: 2 bad input, 1 internal. */
int ps_api_error_status(const GError *error);
/* The PsInputError code (common/common.h: 3 an unknown or missing key, ...)
 * of a bad-input error; -1 for an internal one. */
int ps_api_error_code(const GError *error);
/* error's message.  (transfer none) */
const char *ps_api_error_message(const GError *error);
void ps_api_error_free(GError *error);
/* Frees a result of this API (NULL is fine). */
void ps_api_free(char *text);

#endif

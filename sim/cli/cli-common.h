/* cli-common.h: what every podsim subcommand does the same way.
 *
 * Invariant: messages go to stderr as "podsim: CMD: ..."; bad input is exit
 * status 2 (EXIT_INPUT). */
#ifndef PS_CLI_COMMON_H
#define PS_CLI_COMMON_H

#include <glib.h>
#include <json-c/json.h>

#define PS_CLI_EXIT_INPUT 2

/* Prints "podsim: CMD: <message>" on stderr and returns PS_CLI_EXIT_INPUT. */
int ps_cli_input_error(const char *cmd, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* g_option_context_parse for subcommand cmd ("sweep"): FALSE after printing
 * the parser's error ("... (see podsim sweep --help)") with *status set to
 * PS_CLI_EXIT_INPUT. */
gboolean ps_cli_parse(GOptionContext *ctx, const char *cmd, int *argc, char ***argv,
                      int *status);

/* DATA_DIR/rel for the first of ps_data_dirs() (io/config.h) where it
 * passes `test`, searched as experiments are: $PODSIM_DATA_DIR, the
 * installed or source tree, the working directory; else rel itself.
 * (transfer full) */
char *ps_cli_data_path(const char *rel, GFileTest test);

/* A JSON number in the shortest of %.15g and %.17g that reads back exactly
 * (0.137274, not 0.13727400000000001).  (transfer full) */
json_object *ps_cli_json_exact_double(double v);

#endif

/* cli-common.c: shared pieces of the subcommands (see cli-common.h). */
#include "cli/cli-common.h"

#include <stdarg.h>
#include <stdio.h>

#ifndef PS_DATA_DIR
#define PS_DATA_DIR "/usr/local/share/podsim"
#endif

int ps_cli_input_error(const char *cmd, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  fprintf(stderr, "podsim: %s: %s\n", cmd, msg);
  return PS_CLI_EXIT_INPUT;
}

char *ps_cli_data_path(const char *rel, GFileTest test)
{
  const char *env = g_getenv("PODSIM_DATA_DIR");
  const char *roots[] = {env && *env ? env : NULL, PS_DATA_DIR};
  for (guint i = 0; i < G_N_ELEMENTS(roots); i++) {
    if (!roots[i])
      continue;
    char *p = g_build_filename(roots[i], rel, NULL);
    if (g_file_test(p, test))
      return p;
    g_free(p);
  }
  return g_strdup(rel);
}

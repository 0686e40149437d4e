/* cli-common.c: shared pieces of the subcommands (see cli-common.h). */
#include "cli/cli-common.h"

#include "io/config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ps_cli_input_error(const char *cmd, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  fprintf(stderr, "podsim: %s: %s\n", cmd, msg);
  return PS_CLI_EXIT_INPUT;
}

gboolean ps_cli_parse(GOptionContext *ctx, const char *cmd, int *argc, char ***argv,
                      int *status)
{
  GError *error = NULL;
  if (g_option_context_parse(ctx, argc, argv, &error))
    return TRUE;
  *status = ps_cli_input_error(cmd, "%s (see podsim %s --help)", error->message, cmd);
  g_error_free(error);
  return FALSE;
}

char *ps_cli_data_path(const char *rel, GFileTest test)
{
  g_auto(GStrv) dirs = ps_data_dirs();
  for (char **d = dirs; *d; d++) {
    char *p = strcmp(*d, ".") == 0 ? g_strdup(rel) : g_build_filename(*d, rel, NULL);
    if (g_file_test(p, test))
      return p;
    g_free(p);
  }
  return g_strdup(rel);
}

json_object *ps_cli_json_exact_double(double v)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(buf, sizeof buf, "%.15g", v);
  if (g_ascii_strtod(buf, NULL) != v)
    g_ascii_formatd(buf, sizeof buf, "%.17g", v);
  return json_object_new_double_s(v, buf);
}

/* cli.h: what the tests of the podsim command line share: the binary under
 * test, a run of it, and scratch files.
 *
 * The binary is $PODSIM (`make test` sets it to the built one; ./podsim
 * otherwise), run in $PODSIM_DATA_DIR (set to "." if unset), so experiment
 * names resolve in the source tree. */
#ifndef PS_TEST_CLI_H
#define PS_TEST_CLI_H

#include <glib.h>
#include <stdarg.h>

/* Call once after g_test_init: sets the defaults above.  Returns the
 * binary's path.  (transfer none) */
const char *podsim_init(void);
/* The binary podsim_init found.  (transfer none) */
const char *podsim_path(void);

/* Runs the binary with args (NULL-terminated) in $PODSIM_DATA_DIR; returns
 * its exit status, stdout and stderr (transfer full; NULL not to capture
 * one). */
int podsim_run(char **out, char **err, ...) G_GNUC_NULL_TERMINATED;
/* The same with the args as a va_list. */
int podsim_run_va(char **out, char **err, va_list args);
/* The same for any command: argv NULL-terminated, argv[0] the program. */
int podsim_spawn(const char *const *argv, char **out, char **err);

/* A fresh temporary directory named after prefix ("podsim-sweep").
 * (transfer full) */
char *scratch_dir(const char *prefix);
/* Removes dir's files, then dir, and frees the string. */
void scratch_clear(char *dir);
/* Removes dir and everything below it (a missing dir is no error). */
void scratch_remove(const char *dir);
/* The names of dir's entries, sorted, comma-separated.  (transfer full) */
char *scratch_list(const char *dir);

/* A fixture for g_test_add: a fresh directory and one file name in it. */
typedef struct {
  char *dir;
  char *path;
} ScratchFile;

/* Makes fx->dir (named after prefix) and fx->path = dir/name. */
void scratch_file_init(ScratchFile *fx, const char *prefix, const char *name);
/* Removes fx->dir with all it holds and frees both strings. */
void scratch_file_clear(ScratchFile *fx);
/* A file's whole text, asserting it reads.  (transfer full) */
char *slurp(const char *path);
/* Writes text as the file's whole content, asserting it does. */
void spew(const char *path, const char *text);
/* Writes text as dir/name and returns that path.  (transfer full) */
char *scratch_write(const char *dir, const char *name, const char *text);

#endif

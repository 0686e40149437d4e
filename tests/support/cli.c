/* cli.c: the command-line tests' shared pieces (see cli.h). */
#include "cli.h"

#include <glib/gstdio.h>
#include <stdarg.h>
#include <sys/wait.h>

static const char *binary;

const char *podsim_init(void)
{
  binary = g_getenv("PODSIM");
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  if (!binary) {
    g_test_message("PODSIM is not set: `make test` sets it to the built binary");
    binary = "./podsim";
  }
  return binary;
}

const char *podsim_path(void)
{
  g_assert_nonnull(binary); /* podsim_init first */
  return binary;
}

int podsim_spawn(const char *const *argv, char **out, char **err)
{
  int status = -1;
  GError *error = NULL;
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_assert_true(g_spawn_sync(dir, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, out, err,
                             &status, &error));
  g_assert_no_error(error);
  return g_spawn_check_wait_status(status, NULL) ? 0 : WEXITSTATUS(status);
}

int podsim_run_va(char **out, char **err, va_list args)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)podsim_path());
  for (const char *a; (a = va_arg(args, const char *));)
    g_ptr_array_add(argv, (gpointer)a);
  g_ptr_array_add(argv, NULL);
  int status = podsim_spawn((const char *const *)argv->pdata, out, err);
  g_ptr_array_free(argv, TRUE);
  return status;
}

int podsim_run(char **out, char **err, ...)
{
  va_list ap;
  va_start(ap, err);
  int status = podsim_run_va(out, err, ap);
  va_end(ap);
  return status;
}

char *scratch_dir(const char *prefix)
{
  GError *error = NULL;
  g_autofree char *tmpl = g_strdup_printf("%s-XXXXXX", prefix);
  char *dir = g_dir_make_tmp(tmpl, &error);
  g_assert_no_error(error);
  return dir;
}

void scratch_clear(char *dir)
{
  GDir *d = g_dir_open(dir, 0, NULL);
  for (const char *n; d && (n = g_dir_read_name(d));) {
    g_autofree char *p = g_build_filename(dir, n, NULL);
    g_unlink(p);
  }
  if (d)
    g_dir_close(d);
  g_rmdir(dir);
  g_free(dir);
}

void scratch_remove(const char *dir)
{
  GDir *d = g_dir_open(dir, 0, NULL);
  if (!d)
    return;
  for (const char *n; (n = g_dir_read_name(d));) {
    g_autofree char *p = g_build_filename(dir, n, NULL);
    if (g_file_test(p, G_FILE_TEST_IS_DIR))
      scratch_remove(p);
    else
      g_unlink(p);
  }
  g_dir_close(d);
  g_rmdir(dir);
}

/* g_ptr_array_sort passes pointers to the elements. */
static gint compare_names(gconstpointer a, gconstpointer b)
{
  return g_strcmp0(*(char *const *)a, *(char *const *)b);
}

char *scratch_list(const char *dir)
{
  GDir *d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  for (const char *n; (n = g_dir_read_name(d));)
    g_ptr_array_add(names, g_strdup(n));
  g_dir_close(d);
  g_ptr_array_sort(names, compare_names);
  g_ptr_array_add(names, NULL);
  char *joined = g_strjoinv(",", (char **)names->pdata);
  g_ptr_array_free(names, TRUE);
  return joined;
}

void scratch_file_init(ScratchFile *fx, const char *prefix, const char *name)
{
  fx->dir = scratch_dir(prefix);
  fx->path = g_build_filename(fx->dir, name, NULL);
}

void scratch_file_clear(ScratchFile *fx)
{
  scratch_remove(fx->dir);
  g_free(fx->dir);
  g_free(fx->path);
}

char *slurp(const char *path)
{
  char *text = NULL;
  GError *error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  g_assert_no_error(error);
  return text;
}

void spew(const char *path, const char *text)
{
  GError *error = NULL;
  g_assert_true(g_file_set_contents(path, text, -1, &error));
  g_assert_no_error(error);
}

char *scratch_write(const char *dir, const char *name, const char *text)
{
  char *path = g_build_filename(dir, name, NULL);
  spew(path, text);
  return path;
}

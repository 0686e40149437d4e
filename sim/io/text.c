/* text.c: the character-level corpus (text.h): reading a file or a
 * directory of text files into tokens, the train/test split and the
 * windows.
 *
 * Invariant: ps_text_read returns at least one token or an error; the
 * files of a directory are read in strcmp order of their names, so the
 * stream does not depend on the order the file system lists them. */
#include "text.h"

#include <string.h>

static gint compare_names(gconstpointer a, gconstpointer b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends a file's bytes as tokens; a file of a directory holding a NUL
 * byte is not text and is skipped. */
static gboolean append_file(GByteArray *out, const char *path, gboolean skip_binary,
                            GError **error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  g_autoptr(GError) err = NULL;
  if (!g_file_get_contents(path, &data, &len, &err)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot read it (%s)", path,
                err->message);
    return FALSE;
  }
  if (skip_binary && memchr(data, '\0', len))
    return TRUE;
  guint8 *bytes = (guint8 *)data;
  for (gsize i = 0; i < len; i++)
    bytes[i] = ps_text_token(bytes[i]);
  g_byte_array_append(out, bytes, (guint)len);
  return TRUE;
}

/* The regular, non-symlink files of a directory, sorted.  (transfer full) */
static GPtrArray *directory_files(const char *dir, GError **error)
{
  g_autoptr(GError) err = NULL;
  GDir *d = g_dir_open(dir, 0, &err);
  if (!d) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: cannot list it (%s)", dir,
                err->message);
    return NULL;
  }
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  const char *name;
  while ((name = g_dir_read_name(d))) {
    char *path = g_build_filename(dir, name, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_REGULAR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK))
      g_ptr_array_add(files, path);
    else
      g_free(path);
  }
  g_dir_close(d);
  g_ptr_array_sort(files, compare_names);
  return files;
}

guint8 *ps_text_read(const char *path, size_t *n, GError **error)
{
  g_return_val_if_fail(path != NULL && n != NULL, NULL);
  *n = 0;
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE, "%s: no such file or directory",
                path);
    return NULL;
  }
  GByteArray *out = g_byte_array_new();
  gboolean dir = g_file_test(path, G_FILE_TEST_IS_DIR);
  if (dir) {
    g_autoptr(GPtrArray) files = directory_files(path, error);
    if (!files)
      goto fail;
    for (guint i = 0; i < files->len; i++)
      if (!append_file(out, files->pdata[i], TRUE, error))
        goto fail;
  } else if (!append_file(out, path, FALSE, error)) {
    goto fail;
  }
  if (out->len == 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                dir ? "%s: the directory holds no text file (a regular file without NUL bytes)"
                    : "%s: the file is empty",
                path);
    goto fail;
  }
  *n = out->len;
  return g_byte_array_free(out, FALSE);

fail:
  g_byte_array_free(out, TRUE);
  return NULL;
}

size_t ps_text_train_end(size_t n, double test_fraction)
{
  g_return_val_if_fail(test_fraction >= 0 && test_fraction < 1, n);
  return n - (size_t)((double)n * test_fraction);
}

size_t ps_text_windows(size_t len, int64_t seq, int64_t stride)
{
  g_return_val_if_fail(seq > 0 && stride > 0, 0);
  if (len < (size_t)seq + 1)
    return 0;
  return (len - (size_t)seq - 1) / (size_t)stride + 1;
}

void ps_text_window(const guint8 *part, size_t k, int64_t seq, int64_t stride, float *x,
                    int32_t *labels)
{
  const guint8 *w = part + k * (size_t)stride;
  for (int64_t j = 0; j < seq; j++) {
    x[j] = (float)w[j];
    labels[j] = w[j + 1];
  }
}

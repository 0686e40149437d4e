/* fuzz-common.c: setup shared by the harnesses (see fuzz-common.h).
 *
 * Invariant: the scratch directory is made once per process and removed
 * at exit; nothing here allocates per input except ps_fuzz_text and
 * ps_fuzz_json. */
#include "fuzz-common.h"

#include "common/common.h"
#include "common/json.h"

#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PS_FUZZ_REPO
#define PS_FUZZ_REPO "."
#endif

static char *repo;
static char *scratch;
static char *scratch_exp;

static void remove_scratch(void)
{
  if (!scratch)
    return;
  g_autofree char *good = g_build_filename(scratch, "good", NULL);
  g_autofree char *bad = g_build_filename(scratch, "bad", NULL);
  g_unlink(good);
  g_unlink(bad);
  GDir *d = g_dir_open(scratch_exp, 0, NULL);
  if (d) {
    const char *n;
    while ((n = g_dir_read_name(d)) != NULL) {
      g_autofree char *p = g_build_filename(scratch_exp, n, NULL);
      g_unlink(p);
    }
    g_dir_close(d);
  }
  g_rmdir(scratch_exp);
  g_rmdir(scratch);
}

void ps_fuzz_setup(void)
{
  if (repo)
    return;
  const char *env = g_getenv("PODSIM_DATA_DIR");
  repo = g_canonicalize_filename(env && *env ? env : PS_FUZZ_REPO, NULL);
  g_setenv("PODSIM_DATA_DIR", repo, TRUE);
  g_log_set_always_fatal(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);

  GError *err = NULL;
  scratch = g_dir_make_tmp("podsim-fuzz-XXXXXX", &err);
  if (!scratch)
    g_error("fuzz: cannot make a scratch directory: %s", err->message);
  scratch_exp = g_build_filename(scratch, "experiments", NULL);
  g_mkdir(scratch_exp, 0700);
  g_autofree char *good = g_build_filename(repo, "tests", "data", "good", NULL);
  g_autofree char *bad = g_build_filename(repo, "tests", "data", "bad", NULL);
  g_autofree char *lgood = g_build_filename(scratch, "good", NULL);
  g_autofree char *lbad = g_build_filename(scratch, "bad", NULL);
  if (symlink(good, lgood) != 0 || symlink(bad, lbad) != 0)
    g_warning("fuzz: cannot link the fixtures into %s", scratch);
  atexit(remove_scratch);
}

const char *ps_fuzz_repo(void)
{
  return repo;
}

const char *ps_fuzz_scratch(void)
{
  return scratch_exp;
}

char *ps_fuzz_text(const uint8_t *data, size_t size)
{
  char *s = g_malloc(size + 1);
  if (size)
    memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

json_object *ps_fuzz_json(const uint8_t *data, size_t size, const char *file)
{
  g_autofree char *text = ps_fuzz_text(data, size);
  GError *err = NULL;
  json_object *obj = ps_json_parse(text, file, &err);
  if (!obj) {
    g_assert_nonnull(err);
    g_clear_error(&err);
  }
  return obj;
}

void ps_fuzz_refused(GError **err)
{
  g_assert_nonnull(*err);
  g_assert_true((*err)->domain == PS_INPUT_ERROR);
  g_assert_nonnull((*err)->message);
  g_clear_error(err);
}

/* test_fuzz_regressions.c: inputs the fuzzers of tests/fuzz/ once crashed
 * on, loaded again through the same entry points.
 *
 * tests/fuzz/regressions/ holds one folder per harness: experiment/ (a file
 * for ps_experiment_load), topology/ and model/ (JSON for
 * ps_topology_from_json and ps_model_from_json), override/ (the first line
 * names a shipped experiment, each further line is one "--set" override).
 * Each input must come back as a clean GError in PS_INPUT_ERROR with a
 * message, or, for a file named ok-*, load without error; the sanitizer
 * build (make check-asan) checks that nothing is touched out of bounds or
 * leaked on the way.  Data are found under $PODSIM_DATA_DIR, else ".". */
#include "common/json.h"
#include "io/config.h"
#include "model/layers.h"
#include "run/experiment.h"

#include <string.h>

static const char *data_dir(void)
{
  const char *d = g_getenv("PODSIM_DATA_DIR");
  return d && *d ? d : ".";
}

/* Fails the test unless the outcome matches what the file's name says. */
static void check_outcome(const char *file, gboolean loaded, GError *err)
{
  g_autofree char *base = g_path_get_basename(file);
  if (g_str_has_prefix(base, "ok-")) {
    if (!loaded)
      g_error("%s: expected to load, got '%s'", file, err ? err->message : "(no error)");
    g_assert_no_error(err);
    return;
  }
  if (loaded)
    g_error("%s: loaded, expected an error", file);
  g_assert_nonnull(err);
  g_assert_true(err->domain == PS_INPUT_ERROR);
  g_assert_cmpuint(strlen(err->message), >, 0);
  g_test_message("%s: %s", base, err->message);
}

static void load_experiment(const char *file)
{
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(file, NULL, &err);
  check_outcome(file, e != NULL, err);
  ps_experiment_free(e);
  g_clear_error(&err);
}

static void load_topology(const char *file)
{
  GError *err = NULL;
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
  json_object *obj = ps_json_parse(text, file, &err);
  PsTopology *t = obj ? ps_topology_from_json(obj, file, "", &err) : NULL;
  check_outcome(file, t != NULL, err);
  ps_topology_free(t);
  if (obj)
    json_object_put(obj);
  g_clear_error(&err);
}

static void load_model(const char *file)
{
  GError *err = NULL;
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
  json_object *obj = ps_json_parse(text, file, &err);
  PsModel *m = obj ? ps_model_from_json(obj, file, "", &err) : NULL;
  check_outcome(file, m != NULL, err);
  ps_model_free(m);
  if (obj)
    json_object_put(obj);
  g_clear_error(&err);
}

static void load_override(const char *file)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(file, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_assert_nonnull(lines[0]);
  /* a trailing newline ends the last override, it does not add an empty one */
  guint n = g_strv_length(lines);
  if (n > 1 && *lines[n - 1] == '\0') {
    g_free(lines[n - 1]);
    lines[n - 1] = NULL;
  }
  GError *err = NULL;
  PsExperiment *e = ps_experiment_load(lines[0], (const char *const *)lines + 1, &err);
  check_outcome(file, e != NULL, err);
  ps_experiment_free(e);
  g_clear_error(&err);
}

typedef struct {
  const char *dir;
  void (*load)(const char *file);
} Harness;

static const Harness harnesses[] = {
    {"experiment", load_experiment},
    {"topology", load_topology},
    {"model", load_model},
    {"override", load_override},
};

static void test_regressions(gconstpointer data)
{
  const Harness *h = data;
  g_autofree char *dir = g_build_filename(data_dir(), "tests", "fuzz", "regressions", h->dir, NULL);
  GDir *d = g_dir_open(dir, 0, NULL);
  if (!d) {
    g_test_skip("no regression inputs");
    return;
  }
  GPtrArray *files = g_ptr_array_new_with_free_func(g_free);
  const char *n;
  while ((n = g_dir_read_name(d)) != NULL)
    if (n[0] != '.')
      g_ptr_array_add(files, g_build_filename(dir, n, NULL));
  g_dir_close(d);
  for (guint i = 0; i < files->len; i++)
    h->load(g_ptr_array_index(files, i));
  g_ptr_array_free(files, TRUE);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS(harnesses); i++) {
    g_autofree char *p = g_strdup_printf("/fuzz/regressions/%s", harnesses[i].dir);
    g_test_add_data_func(p, &harnesses[i], test_regressions);
  }
  return g_test_run();
}

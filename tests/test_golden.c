/* test_golden.c: step-time predictions against tests/golden/step-times.txt.
 *
 * Each line is "EXPERIMENT [--set K=V]...<TAB>step_time_s" with six
 * significant digits; a prediction that moves by more than that fails, so
 * a change to the cost model is a deliberate `make golden` with a reason
 * in the commit.  Every case runs with numerics off (time never depends on
 * them) and no trace. */
#include "io/config.h"
#include "run.h"

#include <math.h>
#include <string.h>

typedef struct {
  char *args;   /* the command part */
  double want;
} Case;

static void run_case(gconstpointer data)
{
  const Case *c = data;
  g_auto(GStrv) argv = g_strsplit(c->args, " ", -1);
  GPtrArray *ov = g_ptr_array_new();
  for (int i = 1; argv[i]; i++) {
    if (strcmp(argv[i], "--set") == 0 && argv[i + 1])
      g_ptr_array_add(ov, argv[++i]);
    else if (*argv[i])
      g_error("golden case '%s': cannot read argument '%s'", c->args, argv[i]);
  }
  g_ptr_array_add(ov, NULL);
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(argv[0], (const char *const *)ov->pdata, &error);
  g_assert_no_error(error);
  PsSummary s;
  g_assert_true(ps_run(e, &(PsRunOptions){0}, &s, &error));
  g_assert_no_error(error);
  g_test_message("%s: %.6g s (golden %.6g s)", c->args, s.step_time_s, c->want);
  g_assert_cmpfloat(fabs(s.step_time_s - c->want), <=, 1e-5 * c->want);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  g_ptr_array_free(ov, TRUE);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  const char *top = g_getenv("PODSIM_DATA_DIR");
  if (!top)
    g_setenv("PODSIM_DATA_DIR", top = ".", TRUE);
  g_autofree char *path = g_build_filename(top, "tests", "golden", "step-times.txt", NULL);
  g_autofree char *text = NULL;
  GError *error = NULL;
  if (!g_file_get_contents(path, &text, NULL, &error))
    g_error("%s", error->message);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  GPtrArray *cases = g_ptr_array_new();
  for (char **l = lines; *l; l++) {
    if (**l == '#' || **l == '\0')
      continue;
    char *tab = strchr(*l, '\t');
    if (!tab)
      g_error("%s: line '%s' has no tab before the step time", path, *l);
    Case *c = g_new0(Case, 1);
    c->args = g_strndup(*l, (gsize)(tab - *l));
    c->want = g_ascii_strtod(tab + 1, NULL);
    g_assert_cmpfloat(c->want, >, 0);
    g_ptr_array_add(cases, c);
    g_autofree char *name = g_strdelimit(g_strdup(c->args), "/ ", '_');
    g_autofree char *tpath = g_strdup_printf("/golden/%s", name);
    g_test_add_data_func(tpath, c, run_case);
  }
  g_assert_cmpuint(cases->len, >=, 5);
  int rc = g_test_run();
  for (guint i = 0; i < cases->len; i++) {
    Case *c = g_ptr_array_index(cases, i);
    g_free(c->args);
    g_free(c);
  }
  g_ptr_array_free(cases, TRUE);
  return rc;
}

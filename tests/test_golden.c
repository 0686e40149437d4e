/* test_golden.c: step-time predictions against tests/golden/step-times.txt.
 *
 * Each line is "EXPERIMENT [--set K=V]...<TAB>step_time_s" with six
 * significant digits; a prediction that moves by more than that fails, so
 * a change to the cost model is a deliberate `make golden` with a reason
 * in the commit.  Every case runs with numerics off (time never depends on
 * them) and no trace.  The file is read, and each case run, by the code
 * `podsim regress` uses (cli/regress.h), so both hold the same cases to
 * the same tolerance; a malformed line stops the test. */
#include "cli/regress.h"

#include <math.h>
#include <string.h>

static void run_case(gconstpointer data)
{
  const PsGoldenCase *c = data;
  double got = 0;
  GError *error = NULL;
  gboolean ok = ps_golden_run(c, &got, &error);
  g_assert_no_error(error);
  g_assert_true(ok);
  g_test_message("%s: %.6g s (golden %.6g s)", c->args, got, c->want);
  g_assert_cmpfloat(fabs(got - c->want), <=, 1e-5 * c->want);
  g_assert_true(ps_golden_within(got, c->want));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  const char *top = g_getenv("PODSIM_DATA_DIR");
  if (!top)
    g_setenv("PODSIM_DATA_DIR", top = ".", TRUE);
  g_autofree char *path = g_build_filename(top, "tests", "golden", "step-times.txt", NULL);
  GError *error = NULL;
  PsGolden *golden = ps_golden_read(path, &error);
  if (!golden)
    g_error("%s", error->message);
  g_assert_cmpuint(ps_golden_n_cases(golden), >=, 5);
  for (guint i = 0; i < ps_golden_n_cases(golden); i++) {
    const PsGoldenCase *c = ps_golden_case(golden, i);
    g_assert_cmpfloat(c->want, >, 0);
    g_autofree char *name = g_strdelimit(g_strdup(c->args), "/ ", '_');
    g_autofree char *tpath = g_strdup_printf("/golden/%s", name);
    g_test_add_data_func(tpath, c, run_case);
  }
  int rc = g_test_run();
  ps_golden_free(golden);
  return rc;
}

/* test_determinism.c: libpodsim gives the same numbers by itself, whatever
 * the environment says about BLAS.
 *
 * This program uses only the public header (include/podsim/podsim.h), as a
 * program embedding libpodsim would.  It runs itself again under several
 * OPENBLAS_CORETYPE values (OpenBLAS reads the variable when it loads, so
 * each needs a process of its own); each child trains the default CNN a
 * few steps and prints its losses and a checksum of its final weights, and
 * the parent asserts every child printed the same bytes: the kernels'
 * GEMM is the library's own, with one summation order on every machine. */
#include "../include/podsim/podsim.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define CHILD_ENV "PODSIM_TEST_DETERMINISM_CHILD"

static const char *self;

/* In a child: the run's losses and a hash of its weights' bits, on stdout. */
static int child_main(void)
{
  static const char *const ov[] = {"steps=3", "numerics.evaluate=false", NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("default", ov, &error);
  if (!e) {
    fprintf(stderr, "%s\n", error->message);
    return 1;
  }
  PsRunOptions opt = {.keep_params = TRUE};
  PsSummary s;
  if (!ps_run(e, &opt, &s, &error)) {
    fprintf(stderr, "%s\n", error->message);
    return 1;
  }
  guint32 hash = 2166136261u; /* FNV-1a over the weights' bytes */
  const unsigned char *bytes = (const unsigned char *)s.params;
  for (size_t i = 0; i < s.n_params * sizeof(float); i++)
    hash = (hash ^ bytes[i]) * 16777619u;
  printf("loss %.9g -> %.9g, %zu weights, hash %08x\n", s.loss_first, s.loss_last, s.n_params,
         hash);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  return 0;
}

static char *run_child(const char *core)
{
  g_auto(GStrv) env = g_environ_setenv(g_get_environ(), CHILD_ENV, "1", TRUE);
  env = core ? g_environ_setenv(env, "OPENBLAS_CORETYPE", core, TRUE)
             : g_environ_unsetenv(env, "OPENBLAS_CORETYPE");
  const char *argv[] = {self, NULL};
  char *out = NULL, *err = NULL;
  int status = 0;
  GError *error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, env, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                             &status, &error));
  g_assert_no_error(error);
  g_test_message("OPENBLAS_CORETYPE=%s: %s%s", core ? core : "(unset)", out, err);
  g_assert_true(WIFEXITED(status));
  g_assert_cmpint(WEXITSTATUS(status), ==, 0);
  g_assert_true(g_str_has_prefix(out, "loss "));
  g_free(err);
  return out;
}

static void test_any_blas_core(void)
{
  static const char *const cores[] = {"Haswell", "Prescott", NULL};
  char *first = run_child(cores[0]);
  for (guint i = 1; i < G_N_ELEMENTS(cores); i++) {
    g_autofree char *out = run_child(cores[i]);
    g_assert_cmpstr(out, ==, first);
  }
  g_free(first);
}

int main(int argc, char **argv)
{
  if (g_getenv(CHILD_ENV))
    return child_main();
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("PODSIM_DATA_DIR"))
    g_setenv("PODSIM_DATA_DIR", ".", TRUE);
  self = argv[0];
  g_test_add_func("/determinism/any-blas-core", test_any_blas_core);
  return g_test_run();
}

/* test_hostile.c: inputs a new user tries that must be refused up front.
 *
 * Every case runs the podsim binary ($PODSIM, tests/support/cli.h) and
 * asserts exit status 2, a message on stderr naming the file or option,
 * the field and the reason, nothing on stdout (no run header, no summary:
 * nothing was simulated) and no output file left behind:
 * - a step count (from --steps, --set steps=, a file) whose simulated time
 *   cannot fit the picosecond clock;
 * - compare and sweep find a missing experiment, an unknown key or such a
 *   step count before they run anything;
 * - outputs that cannot be written (/dev/full, a missing directory, a
 *   directory) fail loudly and leave the device alone;
 * - $PODSIM_DATA_DIR naming no directory;
 * - options that would say nothing in their combination. */
#include "support/cli.h"

#include <glib/gstdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static char *scratch;

/* Runs podsim with the NULL-terminated args and asserts a refusal: exit
 * status 2, nothing on stdout, and each of the '|'-separated needles in
 * stderr. */
static void refused(const char *needles, ...)
{
  g_autofree char *out = NULL, *err = NULL;
  va_list ap;
  va_start(ap, needles);
  int status = podsim_run_va(&out, &err, ap);
  va_end(ap);
  g_test_message("stderr: %s", err);
  g_assert_cmpint(status, ==, 2);
  g_assert_cmpstr(out, ==, "");
  g_auto(GStrv) each = g_strsplit(needles, "|", -1);
  for (char **n = each; *n; n++) {
    if (!strstr(err, *n))
      g_test_message("missing from stderr: %s", *n);
    g_assert_nonnull(strstr(err, *n));
  }
  g_assert_null(strstr(err, "warning")); /* refused before any run's warnings */
}

static char *scratch_path(const char *name)
{
  return g_build_filename(scratch, name, NULL);
}

/* A step count past the clock at a step's lower bound, however given. */
static void test_steps_past_clock(void)
{
  static const char *const counts[] = {"1099511627776", "9223372036854775807",
                                       "4611686018427387904"};
  g_autofree char *trace = scratch_path("t.json");
  for (guint i = 0; i < G_N_ELEMENTS(counts); i++) {
    g_autofree char *set = g_strdup_printf("steps=%s", counts[i]);
    g_autofree char *needles = g_strdup_printf("experiments/default.json|steps: %s|clock",
                                               counts[i]);
    refused(needles, "run", "default", "--steps", counts[i], "--trace", trace, NULL);
    refused(needles, "run", "default", "--set", set, "--trace", trace, NULL);
    refused(needles, "run", "default", "--set", set, "--set", "numerics.enabled=false",
            "--no-trace", "--json", NULL);
    g_assert_false(g_file_test(trace, G_FILE_TEST_EXISTS));
    g_autofree char *file = scratch_path("huge.json");
    g_autofree char *json = g_strdup_printf(
        "{\"name\": \"huge\", \"topology\": \"tpu-v3-8\", \"model\": \"mlp\", "
        "\"global_batch\": 64, \"steps\": %s, \"steps_per_run\": 4, \"log_every\": %s, "
        "\"input\": {\"source\": \"synthetic\"}}",
        counts[i], counts[i]);
    spew(file, json);
    g_autofree char *in_file = g_strdup_printf("huge.json|steps: %s|clock", counts[i]);
    refused(in_file, "run", file, "--trace", trace, NULL);
    refused(in_file, "compare", "default", file, NULL);
    g_autofree char *csv = scratch_path("s.csv");
    g_autofree char *vary = g_strdup_printf("steps=2,%s", counts[i]);
    refused(needles, "sweep", "default", "--vary", vary, "--out", csv, NULL);
    refused(needles, "sweep", "default", "--set", set, "--vary", "global_batch=64,128", "--out",
            csv, NULL);
    g_assert_false(g_file_test(csv, G_FILE_TEST_EXISTS));
    g_unlink(file);
  }
  g_assert_false(g_file_test(trace, G_FILE_TEST_EXISTS));
}

/* compare checks both sides before it runs either. */
static double children_cpu_s(void)
{
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

static void test_compare_checks_first(void)
{
  double cpu0 = children_cpu_s();
  refused("B: |unknown experiment 'nonexistent'", "compare", "default", "nonexistent", NULL);
  refused("B: |unknown key 'nope'", "compare", "default", "--set-b", "nope=1", NULL);
  refused("B: |steps: 9223372036854775807|clock", "compare", "default", "--set-b",
          "steps=9223372036854775807", NULL);
  refused("A: |unknown experiment 'nonexistent'", "compare", "nonexistent", "default", NULL);
  /* one run of default alone (938 steps of numerics) takes over a minute of
   * CPU; the four refusals together take well under ten seconds even under
   * the sanitizers.  CPU time, not wall time: a loaded machine stretches
   * the latter, not the former */
  double cpu = children_cpu_s() - cpu0;
  g_test_message("four refusals: %.2f s of CPU", cpu);
  g_assert_cmpfloat(cpu, <, 10.0);
}

/* An unknown key, varied or set, stops a sweep before its first point. */
static void test_sweep_unknown_key(void)
{
  g_autofree char *csv = scratch_path("s.csv");
  refused("unknown key 'nope'", "sweep", "default", "--vary", "nope=1,2", "--out", csv, NULL);
  refused("strategy|unknown key 'nope'", "sweep", "default", "--vary", "global_batch=64,128",
          "--vary", "strategy.nope=1,2", "--out", csv, NULL);
  refused("unknown key 'nope'", "sweep", "default", "--vary", "global_batch=64,128", "--set",
          "nope=3", "--out", csv, NULL);
  refused("unknown key 'nope'", "sweep", "default", "--vary", "nope=1,2", "--dry-run", NULL);
  g_assert_false(g_file_test(csv, G_FILE_TEST_EXISTS));
}

/* Outputs that cannot be written: loud, exit 2, nothing half-written, and
 * a device stays a device. */
static void test_unwritable_outputs(void)
{
  g_autofree char *out = NULL, *err = NULL;
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--steps", "2", "--set",
                             "numerics.enabled=false", "--no-trace", "--links-csv", "/dev/full",
                             NULL), ==, 2);
  g_assert_nonnull(strstr(err, "podsim: /dev/full: cannot write the link statistics: "));
  g_assert_null(strstr(out, "links            /dev/full"));
  g_clear_pointer(&out, g_free);
  g_clear_pointer(&err, g_free);
  g_assert_cmpint(podsim_run(&out, &err, "run", "default", "--steps", "2", "--set",
                             "numerics.enabled=false", "--trace", "/dev/full", "--links-csv",
                             "/dev/null", NULL), ==, 2);
  g_assert_nonnull(strstr(err, "podsim: /dev/full: cannot write the trace: "));
  GStatBuf st;
  g_assert_cmpint(g_stat("/dev/full", &st), ==, 0);
  g_assert_true(S_ISCHR(st.st_mode));
  g_assert_cmpint(g_stat("/dev/null", &st), ==, 0);
  g_assert_true(S_ISCHR(st.st_mode));

  /* refused before the run: a missing directory, a directory */
  g_autofree char *missing = scratch_path("no/such/dir/links.csv");
  refused("no/such/dir/links.csv|link statistics|No such file or directory", "run", "default",
          "--no-trace", "--links-csv", missing, NULL);
  g_autofree char *trace = scratch_path("no/t.json");
  refused("no/t.json|trace|No such file or directory", "run", "default", "--trace", trace, NULL);
  refused("trace|Is a directory", "run", "default", "--trace", scratch, NULL);
  refused("link statistics|Is a directory", "run", "default", "--no-trace", "--links-csv",
          scratch, NULL);
  g_autofree char *csv = scratch_path("no/s.csv");
  refused("no/s.csv", "sweep", "default", "--vary", "global_batch=64,128", "--out", csv, NULL);
}

/* $PODSIM_DATA_DIR set to no directory is an error naming it. */
static void test_data_dir_missing(void)
{
  static const char *const values[] = {"/nonexistent", "/dev/null"};
  for (guint i = 0; i < G_N_ELEMENTS(values); i++) {
    g_autofree char *var = g_strdup_printf("PODSIM_DATA_DIR=%s", values[i]);
    static const char *const cmds[][3] = {
        {"list", "experiments", NULL}, {"run", "default", NULL}, {"describe", "default", NULL}};
    for (guint c = 0; c < G_N_ELEMENTS(cmds); c++) {
      const char *argv[] = {"/usr/bin/env", var, podsim_path(), cmds[c][0], cmds[c][1], NULL};
      g_autofree char *out = NULL, *err = NULL;
      g_assert_cmpint(podsim_spawn(argv, &out, &err), ==, 2);
      g_assert_cmpstr(out, ==, "");
      g_assert_nonnull(strstr(err, var));
      g_assert_nonnull(strstr(err, i == 0 ? "no such directory" : "not a directory"));
    }
  }
}

/* Options that would say nothing where they are given. */
static void test_silent_options(void)
{
  g_autofree char *trace = scratch_path("t.json");
  refused("--stages|experiments/default.json|not a pipeline", "describe", "default", "--stages",
          NULL);
  refused("--device|--program or --kernels", "describe", "default", "--device", "1", NULL);
  refused("--program|topology", "describe", "tpu-v3-8", "--program", NULL);
  refused("--kernels|topology", "describe", "topology", "tpu-v3-8", "--kernels", NULL);
  refused("--set|model", "describe", "model", "cnn", "--set", "x=1", NULL);
  refused("--max-events 0|no limit", "run", "default", "--max-events", "0", "--trace", trace,
          NULL);
  refused("--max-events", "run", "default", "--max-events", "-1", "--trace", trace, NULL);
  refused("--no-trace|--trace", "run", "default", "--no-trace", "--trace", trace, NULL);
  refused("--no-trace|--trace-links", "run", "default", "--no-trace", "--trace-links", NULL);
  refused("--no-trace|--trace-max", "run", "default", "--no-trace", "--trace-max", "5", NULL);
  refused("--seed|numerics off", "run", "default", "--set", "numerics.enabled=false", "--seed",
          "3", "--trace", trace, NULL);
  refused("--seed", "run", "default", "--seed", "-3", "--trace", trace, NULL);
  refused("--steps", "run", "default", "--steps", "-1", "--trace", trace, NULL);
  refused("--trace-max", "run", "default", "--trace-max", "-1", "--trace", trace, NULL);
  refused("compare|itself", "compare", "default", NULL);
  refused("compare|itself", "compare", "default", "--set", "steps=2", NULL);
  refused("sweep|--jobs 2|--dry-run", "sweep", "default", "--vary", "steps=1,2", "--dry-run",
          "--jobs", "2", NULL);
  refused("timeline|--step -2", "timeline", "--step", "-2", "no-such.json", NULL);
  refused("timeline|--replica -1", "timeline", "--replica", "-1", "no-such.json", NULL);
  g_assert_false(g_file_test(trace, G_FILE_TEST_EXISTS));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  podsim_init();
  scratch = scratch_dir("podsim-hostile");
  g_test_add_func("/hostile/steps-past-clock", test_steps_past_clock);
  g_test_add_func("/hostile/compare-checks-first", test_compare_checks_first);
  g_test_add_func("/hostile/sweep-unknown-key", test_sweep_unknown_key);
  g_test_add_func("/hostile/unwritable-outputs", test_unwritable_outputs);
  g_test_add_func("/hostile/data-dir-missing", test_data_dir_missing);
  g_test_add_func("/hostile/silent-options", test_silent_options);
  int rc = g_test_run();
  scratch_clear(scratch);
  return rc;
}

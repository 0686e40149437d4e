/* regress.h: `podsim regress`, which runs the golden step-time cases of
 * tests/golden/step-times.txt again and reports every case whose prediction
 * moved beyond the tolerance (old, new, difference), or with --update
 * rewrites the file with the new predictions; and the golden file's reader
 * and tolerance rule, which tests/test_golden.c shares.
 *
 * A golden file is lines "EXPERIMENT [--set KEY=VALUE]...<TAB>step_time_s"
 * (the step time to six significant digits), '#' comment lines and blank
 * lines.  A case runs as test_golden runs it: the experiment loaded with
 * its --set overrides, simulated with no trace and no log.
 *
 * Invariant: ps_cli_regress returns the exit status: 0 no case moved (with
 * --update: the file holds the new predictions), 1 a case moved or could
 * not run (with --update: the file is left as it was), 2 bad input (an
 * option, or a malformed golden file: "podsim: regress: FILE:LINE: ..." on
 * stderr, nothing run). */
#ifndef PS_REGRESS_CLI_H
#define PS_REGRESS_CLI_H

#include <glib.h>

/* A prediction moved when |new - old| > PS_GOLDEN_TOLERANCE * old. */
#define PS_GOLDEN_TOLERANCE 1e-5

/* One case of a golden file. */
typedef struct {
  char *args;        /* "EXPERIMENT [--set K=V]...", as in the file */
  char *experiment;  /* its first word */
  char **sets;       /* the --set values, NULL-terminated (never NULL) */
  double want;       /* the golden step time, seconds (> 0) */
  guint line;        /* where it is in the file, from 1 */
} PsGoldenCase;

typedef struct PsGolden PsGolden;

/* Reads and checks a golden file; NULL and a PS_INPUT_ERROR "PATH:LINE:
 * ..." for a malformed line, or one without any case.  (transfer full) */
PsGolden *ps_golden_read(const char *path, GError **error);
void ps_golden_free(PsGolden *g);

guint ps_golden_n_cases(const PsGolden *g);
/* (transfer none) */
const PsGoldenCase *ps_golden_case(const PsGolden *g, guint i);

/* Simulates case c and sets *step_time_s; FALSE and *error if the case
 * cannot be loaded or run. */
gboolean ps_golden_run(const PsGoldenCase *c, double *step_time_s, GError **error);

/* TRUE when a prediction of got for a golden want is within tolerance. */
gboolean ps_golden_within(double got, double want);

/* argv[0] is "regress". */
int ps_cli_regress(int argc, char **argv);

#endif

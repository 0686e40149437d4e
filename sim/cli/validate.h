/* validate.h: `podsim validate`, which runs the published TPU training
 * step times of tests/measured (one JSON file per point) through podsim and
 * prints each prediction beside its measurement, with the signed error and
 * the source, and the median and worst absolute error of the points that
 * are not the calibration point.
 *
 * Invariant: it returns the process's exit status: 0 every point ran, 1 a
 * point could not be simulated (its row says why; left out of the
 * summary), 2 bad input (a bad point file or option: one "podsim:
 * validate: ..." line on stderr naming the file and field, nothing on
 * stdout). */
#ifndef PS_VALIDATE_CLI_H
#define PS_VALIDATE_CLI_H

/* argv[0] is "validate". */
int ps_cli_validate(int argc, char **argv);

#endif

/* compare.h: `podsim compare`, which runs two experiments (or one twice
 * with different overrides) and prints their step time, its breakdown,
 * throughput, MXU utilization and HBM peak side by side with the
 * difference B - A and the ratio B / A.
 *
 * Invariant: it returns the process's exit status: 0 success, 2 bad input
 * (a "podsim: compare: ..." message on stderr), 1 internal failure; it
 * never writes a trace. */
#ifndef PS_COMPARE_CLI_H
#define PS_COMPARE_CLI_H

/* argv[0] is "compare". */
int ps_cli_compare(int argc, char **argv);

#endif

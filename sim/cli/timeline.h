/* timeline.h: `podsim timeline`, which reads a run's trace and prints the
 * compute ops of one step of a pipeline, one row per op (stage, start,
 * end, micro-batch, kind), for plots/pipeline-timeline.gp.
 *
 * Invariant: it returns the process's exit status: 0 success, 2 bad input
 * (a "podsim: ..." message on stderr naming the file), 1 internal failure. */
#ifndef PS_TIMELINE_CLI_H
#define PS_TIMELINE_CLI_H

/* argv[0] is "timeline". */
int ps_cli_timeline(int argc, char **argv);

#endif

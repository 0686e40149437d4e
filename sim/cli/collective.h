/* collective.h: `podsim collective`, which times one collective over a
 * range of sizes on a topology and prints it beside its closed form, as
 * nccl-tests does for real hardware.
 *
 * Invariant: it returns the process's exit status: 0 success, 2 bad input
 * (a "podsim: ..." message on stderr), 1 internal failure. */
#ifndef PS_COLLECTIVE_CLI_H
#define PS_COLLECTIVE_CLI_H

/* argv[0] is "collective". */
int ps_cli_collective(int argc, char **argv);

#endif

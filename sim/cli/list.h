/* list.h: `podsim list topologies|models|experiments`, the names the
 * other commands accept.
 *
 * Invariant: it returns the process's exit status: 0 success, 2 bad input
 * (an unknown kind), and prints every name it finds exactly once. */
#ifndef PS_LIST_CLI_H
#define PS_LIST_CLI_H

/* argv[0] is "list". */
int ps_cli_list(int argc, char **argv);

#endif

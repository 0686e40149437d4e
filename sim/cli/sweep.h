/* sweep.h: `podsim sweep`, which runs an experiment at every point of the
 * Cartesian product of --vary lists over config keys and writes one row per
 * point (the varied values, the run's summary flattened, an error column)
 * to a CSV or JSON-lines file, on several threads and resumably; built
 * with PS_WITH_MPI (make MPI=1) and started by mpirun, on several
 * processes too, rank 0 alone writing the file.
 *
 * Invariant: it returns the process's exit status: 0 every point ran, 1 a
 * point failed (its row holds the message) or the output could not be
 * written, 2 bad input (a "podsim: sweep: ..." message on stderr); under
 * MPI every rank returns rank 0's status. */
#ifndef PS_SWEEP_CLI_H
#define PS_SWEEP_CLI_H

/* argv[0] is "sweep". */
int ps_cli_sweep(int argc, char **argv);

#endif

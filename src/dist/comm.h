// dist/comm.h — the only interface to the process world. Model code calls these,
// never MPI directly (DESIGN.md invariant 4). Issue 2 needs only the world; the
// dp/tp/pp/cp groups arrive with the process-grid issue.
#ifndef FEMTOTRON_COMM_H
#define FEMTOTRON_COMM_H

// Initialise MPI (safe to call when launched without mpirun: a 1-rank world).
void comm_init(int *argc, char ***argv);
void comm_finalize(void);

// Rank and size of the world; 0 and 1 before comm_init.
int comm_world_rank(void);
int comm_world_size(void);

// Number of ranks of this job on this node (shared-memory domain).
int comm_local_size(void);

// End the whole job with this exit code (MPI_Abort when MPI is up). Never returns.
void comm_abort(int code) __attribute__((noreturn));

// Sum a double over every rank of the world (in place).
void comm_world_sum_double(double *value);

#endif

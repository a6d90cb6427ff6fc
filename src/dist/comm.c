// dist/comm.c — MPI world: init, abort, small reductions.
#include "dist/comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int mpi_up = 0;

void comm_init(int *argc, char ***argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    // Errors in MPI calls abort the job rather than return codes nobody checks.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    mpi_up = 1;
}

void comm_finalize(void) {
    if (mpi_up) MPI_Finalize();
    mpi_up = 0;
}

int comm_world_rank(void) {
    int r = 0;
    if (mpi_up) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int comm_world_size(void) {
    int n = 1;
    if (mpi_up) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    if (mpi_up && comm_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void comm_world_sum_double(double *value) {
    if (!mpi_up || comm_world_size() == 1) return;
    MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int comm_local_size(void) {
    if (!mpi_up) return 1;
    MPI_Comm local;
    int n = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    return n;
}

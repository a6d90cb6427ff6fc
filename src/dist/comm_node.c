// dist/comm_node.c — the world and where this process runs: its rank and size in
// the world, ending the job, the rank and local rank its launcher gave it (before
// MPI starts), the ranks sharing its node, their leader and host names, and the
// default thread count. Split from dist/comm.c; no state of its own (one rank, or
// MPI not started or finished: the world is this process alone).
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"

// MPI is between comm_init's MPI_Init and comm_finalize's MPI_Finalize.
static int mpi_running(void) {
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
}

int comm_world_rank(void) {
    int r = 0;
    if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int comm_world_size(void) {
    int n = 1;
    if (mpi_running()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

void comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    if (mpi_running() && comm_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int comm_lowest_failed(int failed) {
    int first = failed ? comm_world_rank() : INT_MAX;
    if (mpi_running()) MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return first == INT_MAX ? -1 : first;
}

// The first of the variables that is set and a number >= 0, else `none`.
static int launcher_env(const char *open_mpi, const char *pmi, int none) {
    const char *v = getenv(open_mpi);
    if (!v) v = getenv(pmi);
    if (!v || !*v) return none;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n < 0 || n > INT_MAX ? none : (int)n;
}

int comm_launched_size(void) {
    int n = launcher_env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    return n > 0 ? n : 1;
}

int comm_launched_rank(void) { return launcher_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0); }

int comm_launched_local_rank(void) {
    int r = launcher_env("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", -1);  // Open MPI, MPICH/Intel MPI
    return r >= 0 ? r : launcher_env("SLURM_LOCALID", "PMI_LOCAL_RANK", 0);    // Slurm, PMI
}

int comm_local_size(void) {
    if (comm_world_size() == 1) return 1;
    MPI_Comm local;
    int n = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    return n;
}

int comm_node_leader(void) {
    if (comm_world_size() == 1) return 0;
    MPI_Comm local;
    int leader = comm_world_rank();
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    return leader;
}

void comm_host_names(char (*names)[64]) {
    char me[64] = {0};
    if (gethostname(me, sizeof me - 1) != 0) snprintf(me, sizeof me, "rank%d", comm_world_rank());
    if (comm_world_size() == 1) {
        memcpy(names[0], me, sizeof me);
        return;
    }
    MPI_Allgather(me, (int)sizeof me, MPI_CHAR, names, (int)sizeof me, MPI_CHAR, MPI_COMM_WORLD);
}

int comm_default_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) < cores)
        return CPU_COUNT(&mask) > 0 ? CPU_COUNT(&mask) : 1;
    int local = comm_local_size();
    int t = (int)(cores / (local > 0 ? local : 1));
    return t < 1 ? 1 : t;
}

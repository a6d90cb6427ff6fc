// dist/comm_device.h — dist/comm.c's use of the device collectives library at the
// grid's start (dist/comm_device.c); nothing outside dist/comm.c includes it.
#ifndef FEMTOTRON_COMM_DEVICE_H
#define FEMTOTRON_COMM_DEVICE_H

#include <mpi.h>

#include "config.h"
#include "dist/comm.h"

// parallel.comm resolved: 1 when the fp32 collectives of GPU buffers go through
// NCCL (every grid group of more than one rank then has its communicator, made
// here from groups, the grid's MPI communicators), 0 for MPI. Fatal for nccl
// where it cannot run (the CPU build, ranks sharing a GPU); auto falls back to MPI
// with a note. Collective over the world: every rank calls it, after the groups.
int comm_device_setup(const ParallelConfig *p, const MPI_Comm groups[GROUP_COUNT]);

#endif

// dist/comm_stage.h — MPI over GPU buffers, staged through pinned host memory
// (issue 14: ranks that share a GPU, or parallel.comm = mpi, carry the collectives
// of GPU buffers over MPI). MPI here is not CUDA-aware: it must not read or write
// a GPU buffer itself (managed memory would work, page fault by page fault, each
// page migrating to the host and back for every collective). So a collective on
// a GPU buffer copies its input into its request slot's pinned staging, runs MPI
// there, and copies its result back when the request completes (comm_test or
// comm_wait). Used by dist/comm.c alone; the CPU build never stages (no buffer
// is GPU memory there: devcomm_usable is 0).
#ifndef FEMTOTRON_COMM_STAGE_H
#define FEMTOTRON_COMM_STAGE_H

#include <stddef.h>

// 1 when buf is GPU (or managed) memory: MPI must see its staging instead.
int stage_wanted(const void *buf);
// Request slot `slot`'s pinned staging, at least `bytes` (grown as needed, kept for
// the slot's later requests; contents not kept across a growth).
void *stage_area(int slot, size_t bytes);
// Copy between a GPU buffer and host memory, complete on return (the device has
// finished the ops queued on the buffer: comm.c waits first).
void stage_copy(void *dst, const void *src, size_t bytes);
// When slot's request completes: copy `bytes` at offset `off` of its staging to dst.
void stage_result(int slot, void *dst, size_t off, size_t bytes);
// The slot's request has completed: its result, if any, goes back now (once).
void stage_complete(int slot);
// Bytes staged so far in and out, for the run's end-of-run line (comm_staged_bytes).
size_t stage_bytes(void);
// Free every staging area (comm_finalize).
void stage_free_all(void);

#endif

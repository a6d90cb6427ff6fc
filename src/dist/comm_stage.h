// dist/comm_stage.h — MPI over GPU buffers, staged through pinned host memory
// (issue 14: ranks that share a GPU, or parallel.comm = mpi, carry the collectives
// of GPU buffers over MPI). MPI here is not CUDA-aware: it must not read or write
// a GPU buffer itself (managed memory would work, page fault by page fault, each
// page migrating to the host and back for every collective). So a collective on
// a GPU buffer copies its input into its request slot's pinned staging, runs MPI
// there, and copies its result back when the request completes (comm_test or
// comm_wait calls stage_complete). Used by dist/comm.c alone; the CPU build never
// stages (no buffer is GPU memory there: devcomm_usable is 0), and each function
// below then hands MPI the caller's buffers as they are.
//
// Every caller has waited for the device's queued ops on its buffers first
// (dist/comm.c, buffers_ready).
#ifndef FEMTOTRON_COMM_STAGE_H
#define FEMTOTRON_COMM_STAGE_H

#include <stddef.h>

// 1 when buf is GPU (or managed) memory: MPI must see its staging instead.
int stage_wanted(const void *buf);
// MPI's side of an in-place buffer of `bytes` for request slot `slot`: buf itself,
// or its staged copy, whose result goes back to buf when the request completes.
void *stage_inplace(int slot, void *buf, size_t bytes);
// MPI's side of a send buffer: buf itself, or its staged copy (nothing comes back).
const void *stage_send(int slot, const void *buf, size_t bytes);
// MPI's side of a receive buffer: buf itself, or staging copied to buf at completion.
void *stage_recv(int slot, void *buf, size_t bytes);
// A collective from in (in_bytes) into out (out_bytes): NULL when neither is GPU
// memory (MPI takes them as they are), else one staging of [input | output], the
// input copied in now (with keep_out, the output's old contents too, for the
// parts no rank writes), the output copied back at completion: MPI reads the
// returned address and writes at returned + in_bytes.
char *stage_in_out(int slot, const void *in, size_t in_bytes, void *out, size_t out_bytes, int keep_out);
// A copy between buffers of one rank (a group of one): the device's when either is
// GPU memory (the host must not touch it), else memcpy.
void stage_local_copy(void *dst, const void *src, size_t bytes);
// Slot `slot`'s request has completed: its staged result, if any, goes back now (once).
void stage_complete(int slot);
// Bytes staged so far in and out, for the run's end-of-run line (comm_staged_bytes).
size_t stage_bytes(void);
// Free every staging area (comm_finalize).
void stage_free_all(void);

#endif

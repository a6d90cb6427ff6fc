// dist/comm.h — the only interface to the process world. Model, engines, parallel
// layers and trainer call these, never MPI directly (docs/DESIGN.md, invariant 4:
// communication in one place).
//
// The process grid is dp x pp x cp x tp, numbered as dist/grid.h says (tp fastest).
// One communicator per dimension, plus the dp x cp group over which gradients are
// reduced (context-parallel ranks hold the same weights, as data-parallel ones do),
// and the embedding group: the first and the last pipeline stage of one pipeline
// (same dp, cp and tp coordinates), which both hold a tied embedding and sum its
// gradient (Megatron-LM's embedding group). A rank of a middle stage, or of a run
// with one stage, is alone in its embedding group.
// The communicators, the request table and the watchdog's timeout are this
// process's communicator context, a per-process singleton; grid coordinates are
// not kept here: whoever needs them computes them with grid_coords.
#ifndef FEMTOTRON_COMM_H
#define FEMTOTRON_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

// GROUP_EP: the expert-parallel group, parallel.ep consecutive ranks of one dp x cp
// group (dist/grid.h: grid_ep_rank); its ranks exchange tokens with all-to-all(v).
// GROUP_EDP: the expert-data-parallel group, the ranks of one dp x cp group that
// hold the same experts (the same grid_ep_rank): expert gradients are reduced and
// ZeRO-sharded over it, as the dense ones are over GROUP_DPCP.
// GROUP_BENCH is not part of the grid: `femtotron bench calibrate` sets it with
// comm_bench_group to time collectives on sub-groups of the world.
typedef enum {
    GROUP_WORLD, GROUP_DP, GROUP_PP, GROUP_CP, GROUP_TP, GROUP_DPCP, GROUP_EMBED, GROUP_EP, GROUP_EDP,
    GROUP_BENCH,
    GROUP_COUNT
} GroupId;

// Initialise MPI (safe to call when launched without mpirun: a 1-rank world).
void comm_init(int *argc, char ***argv);
void comm_finalize(void);

// The device's queue, installed by a backend whose ops return before they finish
// (the CUDA one, at ops_init; an upward edge, docs/DESIGN.md): how the host waits
// for it (sync: ops_sync) and the stream the ops run on. MPI reads and writes
// buffers in host memory, so a collective over MPI first waits for the queue: what
// the ops queued on the buffer is then complete, and none of them is still to read
// what MPI will write. NCCL's streams wait for `stream` by events instead, and it
// for them (dist/device_comm.h). NULL, NULL (the CPU backend): nothing to wait for.
void comm_set_device_queue(void (*sync)(void), void *stream);
// The watchdog of device collectives the queue waits for (dist/device_comm.h):
// fatal, naming the operation and the group, when one has not finished within
// parallel.timeout_s. The backend calls it while the host waits for its queue.
void comm_watch_device(void);

// The ranks an MPI launcher (mpirun, mpiexec, srun) started and this process's
// place among them, read from the launcher's environment (Open MPI's
// OMPI_COMM_WORLD_SIZE/RANK, MPICH's and Slurm's PMI_SIZE/RANK) without starting
// MPI: for the commands that run as one process (main.c). 1 and 0 when none did.
int comm_launched_size(void);
int comm_launched_rank(void);
// This process's place among the launched ranks of its node (Open MPI, MPICH/Intel
// MPI, Slurm, PMI), 0 when none: which GPU a rank takes (ops_init).
int comm_launched_local_rank(void);

// Rank and size of the world; 0 and 1 before comm_init.
int comm_world_rank(void);
int comm_world_size(void);

// Number of ranks of this job on this node (shared-memory domain).
int comm_local_size(void);
// World rank of the lowest rank of this job on this node: the node's leader, which
// does what is done once per node (the MFU peak, bench/run_peak.h). Collective.
int comm_node_leader(void);
// Every rank's host name (gethostname, at most 63 characters), in world rank
// order: names (world size, 64). Collective over the world: train's parallel.auto
// maps the job's nodes onto a measured link matrix by name (plan/plan_auto.h).
void comm_host_names(char (*names)[64]);

// Threads per rank when none are configured: the cores this rank may run on.
// When the launcher bound the rank to some cores (mpirun binds small jobs to one
// core each), those; otherwise the node's cores shared among its ranks.
int comm_default_threads(void);

// End the whole job with this exit code (MPI_Abort when MPI is up). Never returns.
void comm_abort(int code) __attribute__((noreturn));

// For a check every rank runs alike (configuration validation): every rank says
// whether it failed and all learn the lowest rank that did, or -1 when none did.
// Collective over the world; before the grid exists, so no watchdog.
int comm_lowest_failed(int failed);

// End this rank normally (MPI_Finalize, then exit(code)): for an end every rank
// reaches together, where MPI_Abort would add the launcher's abort banner.
void comm_exit(int code) __attribute__((noreturn));

// Build the grid's communicators from a validated parallel config (grid_coords of
// this rank decides its groups). Every collective below waits at most
// p->timeout_s seconds, then aborts the job with a message naming the rank, the
// operation and the group.
void comm_grid_init(const ParallelConfig *p);
int group_rank(GroupId g);
// Bytes this process copied between GPU buffers and pinned host memory to carry
// collectives over MPI (dist/comm_stage.h); 0 on the CPU build and under NCCL.
size_t comm_staged_bytes(void);
int group_size(GroupId g);
const char *group_name(GroupId g);

// Make GROUP_BENCH the blocks of `size` consecutive world ranks (world ranks
// r*size .. r*size+size-1; the last block is smaller when size does not divide the
// world), replacing the previous one. Collective: every rank calls it with the same
// size. Until the first call GROUP_BENCH is the world.
void comm_bench_group(int size);

// ---- blocking collectives (sum reductions; in place where it says so) ----
void group_barrier(GroupId g);
void group_allreduce_sum_f32(GroupId g, float *buf, size_t n);    // in place
void group_allreduce_sum_f64(GroupId g, double *buf, size_t n);   // in place
void group_allreduce_max_f64(GroupId g, double *buf, size_t n);   // in place
void group_allreduce_sum_u64(GroupId g, uint64_t *buf, size_t n); // in place, modulo 2^64
void group_allreduce_max_f32(GroupId g, float *buf, size_t n);    // in place
// buf (size * chunk): every rank's chunk r sits at buf + r*chunk; gathers in place.
void group_allgather_f32(GroupId g, float *buf, size_t chunk);
// in (size * chunk) -> out (chunk): out = sum over ranks of their in[r*chunk ..].
void group_reduce_scatter_f32(GroupId g, const float *in, float *out, size_t chunk);
void group_broadcast_bytes(GroupId g, void *buf, size_t bytes, int root);
// All-to-all: send(size * count) -> recv(size * count); rank r's block i goes to rank
// i, where it lands as block r (the expert-parallel token counts).
void group_alltoall_i32(GroupId g, const int32_t *send, int32_t *recv, int count);
// All-to-all with per-rank counts and displacements (elements): the expert-parallel
// dispatch and combine of token rows. Counts are int (MPI's), so one call moves at
// most INT_MAX elements per peer. Over NCCL where the group's collectives go (a send
// and a receive per peer in one NCCL group; the ops' stream waits for it, not the host).
void group_alltoallv_f32(GroupId g, const float *send, const int *send_counts, const int *send_displs,
                         float *recv, const int *recv_counts, const int *recv_displs);

// ---- non-blocking collectives: start now, progress with comm_test, finish with comm_wait ----
typedef struct {
    int slot;  // index into comm.c's request table; -1 when idle
} CommRequest;
#define COMM_REQUEST_IDLE ((CommRequest){-1})

CommRequest group_iallreduce_sum_f32(GroupId g, float *buf, size_t n);  // in place
CommRequest group_ireduce_scatter_f32(GroupId g, const float *in, float *out, size_t chunk);
CommRequest group_iallgather_f32(GroupId g, float *buf, size_t chunk);  // in place
// Buckets rarely divide evenly: len elements split into `size` parts of
// chunk = ceil(len / size) elements; part r = [r*chunk, min((r+1)*chunk, len)), so
// the last parts may be shorter or empty.
size_t comm_split_chunk(size_t len, int size);
size_t comm_split_part(size_t len, int size, int r);  // length of part r
// Sum over the group of in(len) -> out(part of this rank). With in == NULL the
// input is taken from out(len) and the part lands at its start (in place).
CommRequest group_ireduce_scatter_split_f32(GroupId g, const float *in, float *out, size_t len);
// buf(len): every rank's own part, in place -> the whole buf on every rank.
CommRequest group_iallgather_split_f32(GroupId g, float *buf, size_t len);

// Point-to-point inside a group (pipeline activations and their gradients, the
// ring's key/value blocks). Messages of one (group, sender, receiver, tag) are
// received in the order they were sent; other tags may pass them (MPI's rule).
CommRequest group_isend_f32(GroupId g, const float *buf, size_t n, int dest, int tag);
CommRequest group_irecv_f32(GroupId g, float *buf, size_t n, int src, int tag);

// One end of a point-to-point link: this rank sends (send = 1) to, or receives
// from, group rank `peer` the messages of `tag`.
typedef struct {
    int peer, tag, send;
} CommLink;
// Where the group's collectives go through NCCL (parallel.comm = nccl, or auto with
// a GPU per rank), its point-to-point messages of GPU buffers do too once their
// link is open: a communicator of its own per (group, sender, receiver, tag), so
// that they keep MPI's matching and overlap and the ops' stream waits for them by
// events, never the host (dist/device_comm.h, "Links"). Collective over g, before
// the first message: every member passes the ends it will use; an end whose peer
// did not pass the opposite one is fatal, naming both. Links already open are
// kept; messages without a link go over MPI. Does nothing where the group's
// collectives go over MPI.
void group_open_links(GroupId g, const CommLink *ends, int n);
// Messages this process sent or received over links (dist/device_comm.h), in bytes.
size_t comm_link_bytes(void);

// Drive MPI's progress engine; returns 1 when the request has completed.
int comm_test(CommRequest *r);
// Wait for completion (aborting after parallel.timeout_s); the request becomes idle.
void comm_wait(CommRequest *r, const char *what);

#endif

// dist/device_comm.h — the collectives library for buffers in GPU memory (NCCL),
// used by dist/comm.c and dist/comm_device.c alone (docs/DESIGN.md, invariant 4:
// communication in one place). One implementation per binary, chosen at link time as ops/ is:
// dist/device_comm_none.c in ./femtotron (no library: every collective is MPI's)
// and dist/device_comm_nccl.cu in ./femtotron-cuda (NCCL).
//
// What goes through it (parallel.comm = nccl, or auto with a GPU per rank): the
// fp32 sums, maxima, reduce-scatters and all-gathers of the grid's groups
// (tensor-parallel partial sums, gradient buckets, ZeRO, cross-entropy statistics),
// on buffers the library can address, the all-to-all(v) exchanges of expert
// parallelism, and the point-to-point messages of the links dist/comm.c opens
// (pipeline activations and gradients, the ring's K/V blocks: comm.h,
// group_open_links). The host-side scalars and counts stay on MPI.
//
// Links. NCCL's send and receive block their stream until the peer's matching call
// runs, and a communicator's calls run in the order they were issued, whatever the
// stream. MPI matches a receive to the oldest send of the same (source, tag) and
// lets messages of other tags pass. So a link is a communicator of its own for the
// messages of one (group, sender, receiver, tag), with a stream of its own: its
// messages are matched in order as MPI's of one tag are, and no message waits for
// another link's, so a schedule that cannot deadlock over MPI's non-blocking calls
// cannot deadlock here (the ops' stream waits where the host waited over MPI).
// Links are split from their group's communicator (ncclCommSplit, no shared
// resources) before the first step, one collective round per link of the group.
//
// Ordering, by events, with no host wait (issue 14): each group has its own
// stream (collectives of one group keep their order, as every member issues them
// in the same order; different groups never wait on each other's queue). A
// collective enqueued on it first waits for an event recorded on the backend's
// compute stream (devcomm_set_compute_stream), so it reads its buffer after the
// ops queued before it; comm_wait makes the compute stream wait for the
// collective's event (devcomm_event_follow), so the ops queued after it read its
// result. comm_test polls the event instead. The watchdog (devcomm_watch, called
// while the host waits for the compute stream) ends the job when a followed
// collective has not finished within parallel.timeout_s of its enqueue, or NCCL
// reports an error, naming the operation and the group. Every member of a group
// must take the same library for one collective: comm.c decides on the
// full-length buffer, never on a rank's own (possibly empty) part.
#ifndef FEMTOTRON_DEVICE_COMM_H
#define FEMTOTRON_DEVICE_COMM_H

#include <stddef.h>

#define DEVCOMM_ID_BYTES 128  // ncclUniqueId
#define DEVCOMM_MAX_GROUPS 16  // >= GROUP_COUNT (dist/comm.h)
#define DEVCOMM_MAX_LINKS 128  // point-to-point links of this rank (slots DEVCOMM_MAX_GROUPS ..): 8 per chunk, 4 for the ring

// 1 when this binary has a device collectives library, else 0.
int devcomm_available(void);
// GPUs this process sees (0 without the library).
int devcomm_gpu_count(void);
// The PCI bus id of the GPU this process runs on ("0000:1b:00.0"), into id: the
// same physical GPU gives the same string in every process of a node, whatever
// CUDA_VISIBLE_DEVICES each one sees. "" without the library.
#define DEVCOMM_GPU_ID_BYTES 64
void devcomm_gpu_id(char id[DEVCOMM_GPU_ID_BYTES]);

// A fresh unique id for a new communicator (its rank 0 calls this; comm.c
// broadcasts it to the others over MPI).
void devcomm_unique_id(unsigned char id[DEVCOMM_ID_BYTES]);
// Create group `slot`'s communicator: `size` ranks, this one `rank`, from id.
// Every member calls it; it waits at most timeout_s for the others, then dies
// naming the group (`name`).
void devcomm_group_init(int slot, const char *name, const unsigned char id[DEVCOMM_ID_BYTES], int rank, int size,
                        double timeout_s);
// 1 when group `slot` (or link slot) has a communicator.
int devcomm_group_ready(int slot);
// One link of group `slot` (see the top): every member of the group calls this
// once per link of the group, in the same order, `end` 0 for the link's sender,
// 1 for its receiver, -1 for the members that are neither. Returns the link's slot
// (>= DEVCOMM_MAX_GROUPS) on its two ends, -1 elsewhere; `name` (copied) names it
// in errors and the watchdog's message. Waits at most the group's timeout.
int devcomm_link_split(int slot, int end, const char *name);
// Destroy every communicator (comm_finalize).
void devcomm_finalize(void);
// 1 when p is memory the library can read and write (device or managed memory),
// 0 for plain host memory (which then goes through MPI).
int devcomm_usable(const void *p);

// Enqueue one collective on group `slot` and return an event number for
// devcomm_event_test (>= 0). n, chunk, len in floats. Sums and maxima in fp32.
int devcomm_allreduce_f32(int slot, float *buf, size_t n, int max);            // in place
int devcomm_reduce_scatter_f32(int slot, const float *in, float *out, size_t chunk);
int devcomm_allgather_f32(int slot, float *buf, size_t chunk);                  // in place
// The uneven splits of dist/comm.h (part r of len: comm_split_part): the sum of
// in(len) -> out(part of this rank); in == NULL: in place from out(len), the part
// landing at out's start. And buf(len): every rank's part -> everyone's whole buf.
int devcomm_reduce_scatter_split_f32(int slot, const float *in, float *out, size_t len);
int devcomm_allgather_split_f32(int slot, float *buf, size_t len);

// All-to-all with per-rank counts and displacements (floats), MPI_Alltoallv's
// meaning: send's part for rank r (send_counts[r] at send_displs[r]) lands in r's
// recv at its recv_displs[this rank]; what no rank sends is left as it was. One
// NCCL group of a send and a receive per peer with a count (they progress
// independently, so no order among them can deadlock). Enqueued like a collective.
int devcomm_alltoallv_f32(int slot, const float *send, const int *send_counts, const int *send_displs, float *recv,
                          const int *recv_counts, const int *recv_displs);

// A link's message (link: a slot of devcomm_link_split), n floats, enqueued like
// a collective (after the compute stream's ops so far) and returning its event: the
// sender's end sends buf, the receiver's end receives into buf. The two ends' n
// must be equal.
int devcomm_send_f32(int link, const float *buf, size_t n);
int devcomm_recv_f32(int link, float *buf, size_t n);

// 1 when the collective behind event ev has finished (the event is then free
// again), 0 while it runs; fatal, naming `what` and the group, on an NCCL error.
int devcomm_event_test(int ev, const char *what);
// The backend's compute stream (a cudaStream_t, NULL for none): what the
// collectives enqueued from now on wait for, and what devcomm_event_follow makes
// wait. Set once, by comm_set_device_queue (dist/comm.h).
void devcomm_set_compute_stream(void *stream);
// The compute stream waits for the collective behind event ev (the event is then
// free again) without the host waiting; the collective is watched (devcomm_watch)
// until it has finished. 0, doing nothing, when no compute stream was set (the
// caller polls devcomm_event_test instead).
int devcomm_event_follow(int ev, const char *what);
// The watchdog of followed collectives: fatal when one has not finished after
// parallel.timeout_s from its enqueue, or NCCL reports an error, naming the
// operation (`what` of devcomm_event_follow) and the group. Called while the host
// waits for the compute stream (comm_watch_device).
void devcomm_watch(void);
// MPI over GPU buffers (parallel.comm = mpi, or ranks sharing a GPU) goes through
// pinned host memory (dist/comm_stage.c): `bytes` of it (fatal when out of it),
// freed by devcomm_host_free; devcomm_copy copies between a GPU buffer and host
// memory, complete on return. The CPU build never calls them (devcomm_usable is 0).
void *devcomm_host_alloc(size_t bytes);
void devcomm_host_free(void *p);
void devcomm_copy(void *dst, const void *src, size_t bytes);
// Abort every communicator. Not on the timeout paths (ncclCommAbort can block
// before the message is out; die() ending the job ends NCCL's work too).
void devcomm_abort_all(void);

#endif

// dist/comm.c — MPI: the world, the dp x pp x cp x tp grid and its groups, and the
// collectives, every one of them guarded by the parallel.timeout_s watchdog. The
// fp32 collectives of GPU buffers go through NCCL instead where parallel.comm
// says so (dist/device_comm.h; the CUDA build); those of GPU buffers over MPI are
// staged through pinned host memory (dist/comm_stage.h). Where the process runs
// (launcher ranks, the node's ranks) is dist/comm_node.c.
#define _GNU_SOURCE  // POSIX clocks and nanosleep
#include "dist/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm_device.h"
#include "dist/comm_links.h"
#include "dist/comm_stage.h"
#include "dist/device_comm.h"
#include "dist/grid.h"
#include "util.h"

// The communicator context: one per process (docs/DESIGN.md, "Per-process
// singletons"). Nothing outside dist/ sees MPI; dist/comm_device.c (parallel.comm
// at the grid's start) gets the groups from comm_grid_init.
static int mpi_up = 0;
static MPI_Comm groups[GROUP_COUNT];
static int groups_up = 0;   // the grid's groups (GROUP_DP .. GROUP_EMBED) exist
static int bench_up = 0;    // GROUP_BENCH was split off (comm_bench_group)
static double timeout_s = 300.0;
static int device_comm = 0;  // parallel.comm resolved to NCCL (comm_grid_init)

#define MAX_REQUESTS 256
static MPI_Request requests[MAX_REQUESTS];
static const char *request_group[MAX_REQUESTS];
// A request carried by the device library: its event (>= 0) while in flight,
// REQ_DEVICE_DONE once finished, REQ_MPI for an MPI request.
#define REQ_MPI (-1)
#define REQ_DEVICE_DONE (-2)
static int request_event[MAX_REQUESTS];
// Per-request count/displacement arrays for the uneven (v) collectives: they must
// live until the request completes. (MAX_REQUESTS, world size) each, allocated once.
static int *slot_counts, *slot_displs;

static void (*buffer_sync)(void);  // comm_set_device_queue: the device's queue, NULL on the CPU

static const char *const GROUP_NAMES[GROUP_COUNT] = {"world", "dp", "pp", "cp", "tp", "dp x cp", "embedding",
                                                     "ep", "edp", "bench"};

void comm_set_device_queue(void (*sync)(void), void *stream) {
    buffer_sync = sync;
    devcomm_set_compute_stream(stream);
}

void comm_watch_device(void) {
    if (device_comm) devcomm_watch();
}

// Before MPI touches a buffer, or the host copies one: the device has finished
// every op queued so far (comm.h, comm_set_device_queue). NCCL needs no such wait:
// its stream waits for the device's by an event (dist/device_comm.h).
static void buffers_ready(void) {
    if (buffer_sync) buffer_sync();
}

void comm_init(int *argc, char ***argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    // Errors in MPI calls end the job rather than return codes nobody checks.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    mpi_up = 1;
    for (int i = 0; i < GROUP_COUNT; i++) groups[i] = MPI_COMM_WORLD;
    for (int i = 0; i < MAX_REQUESTS; i++) requests[i] = MPI_REQUEST_NULL, request_event[i] = REQ_MPI;
    size_t n = (size_t)MAX_REQUESTS * (size_t)comm_world_size();
    slot_counts = xcalloc(n * sizeof(int), "collective counts");
    slot_displs = xcalloc(n * sizeof(int), "collective displacements");
    util_set_job(comm_world_rank(), comm_world_size(), comm_abort);  // die() ends the job
}

void comm_finalize(void) {
    if (!mpi_up) return;
    if (device_comm) devcomm_finalize();
    device_comm = 0;
    comm_links_free();
    stage_free_all();
    if (groups_up)
        for (int i = 1; i <= GROUP_EDP; i++) MPI_Comm_free(&groups[i]);
    if (bench_up) MPI_Comm_free(&groups[GROUP_BENCH]);
    groups_up = bench_up = 0;
    free(slot_counts);
    free(slot_displs);
    MPI_Finalize();
    mpi_up = 0;
    util_set_job(0, 1, NULL);
}

void comm_exit(int code) {
    fflush(stdout);
    fflush(stderr);
    comm_finalize();
    exit(code);
}

// ---------------------------------------------------------------------- grid

void comm_grid_init(const ParallelConfig *p) {
    timeout_s = p->timeout_s;
    if (!mpi_up) return;
    // A group holds the ranks that share every coordinate outside it: the colour
    // is built from those coordinates, the key orders members by their own one.
    const GridCoords g = grid_coords(p, comm_world_rank());
    // The embedding group: the two end stages of each pipeline; every other rank
    // gets a colour of its own (past the pipelines' colours), a group of one.
    const int ends = g.pp == 0 || g.pp == p->pp - 1;
    const int pipeline = (g.dp * p->cp + g.cp) * p->tp + g.tp;
    const int dpcp = grid_dpcp_index(p, g), blocks = p->dp * p->cp / p->ep;
    int colour[GROUP_EDP + 1] = {
        0,
        (g.pp * p->cp + g.cp) * p->tp + g.tp,   // dp
        pipeline,                               // pp
        (g.dp * p->pp + g.pp) * p->tp + g.tp,   // cp
        (g.dp * p->pp + g.pp) * p->cp + g.cp,   // tp
        g.pp * p->tp + g.tp,                    // dp x cp
        ends ? pipeline : p->dp * p->cp * p->tp + comm_world_rank(),  // embedding
        (g.pp * p->tp + g.tp) * blocks + dpcp / p->ep,                // ep: a block of dp x cp
        (g.pp * p->tp + g.tp) * p->ep + grid_ep_rank(p, g),           // edp: same experts
    };
    int key[GROUP_EDP + 1] = {comm_world_rank(), g.dp, g.pp, g.cp, g.tp, dpcp, g.pp, grid_ep_rank(p, g),
                              dpcp / p->ep};
    for (int i = 1; i <= GROUP_EDP; i++)
        MPI_Comm_split(MPI_COMM_WORLD, colour[i], key[i], &groups[i]);
    groups_up = 1;
    device_comm = comm_device_setup(p, groups);
}

void comm_bench_group(int size) {
    if (size < 1) die("comm_bench_group: size %d must be positive", size);
    if (!mpi_up) return;
    if (bench_up) MPI_Comm_free(&groups[GROUP_BENCH]);
    int rank = comm_world_rank();
    MPI_Comm_split(MPI_COMM_WORLD, rank / size, rank % size, &groups[GROUP_BENCH]);
    bench_up = 1;
}

int group_rank(GroupId g) {
    int r = 0;
    if (mpi_up) MPI_Comm_rank(groups[g], &r);
    return r;
}

int group_size(GroupId g) {
    int n = 1;
    if (mpi_up) MPI_Comm_size(groups[g], &n);
    return n;
}

const char *group_name(GroupId g) { return GROUP_NAMES[g]; }

size_t comm_staged_bytes(void) { return stage_bytes(); }

// ------------------------------------------------------------ request table

static CommRequest take_slot(GroupId g) {
    for (int i = 0; i < MAX_REQUESTS; i++)
        if (requests[i] == MPI_REQUEST_NULL && request_group[i] == NULL) {
            request_group[i] = GROUP_NAMES[g];
            return (CommRequest){i};
        }
    die("more than %d communication requests in flight", MAX_REQUESTS);
}

// A slot for an MPI request on buffers: after the device has finished with them.
static CommRequest mpi_slot(GroupId g) {
    buffers_ready();
    return take_slot(g);
}

// The device request of slot i: 1 once finished.
static int device_done(int i, const char *what) {
    if (request_event[i] >= 0 && devcomm_event_test(request_event[i], what)) request_event[i] = REQ_DEVICE_DONE;
    return request_event[i] == REQ_DEVICE_DONE;
}

int comm_test(CommRequest *r) {
    if (r->slot < 0) return 1;
    if (request_event[r->slot] != REQ_MPI) return device_done(r->slot, "a collective");
    int done = 0;
    MPI_Test(&requests[r->slot], &done, MPI_STATUS_IGNORE);
    if (done) stage_complete(r->slot);  // a staged result goes back to its GPU buffer
    return done;
}

// The slot of a finished (or followed) request free again.
static void release_slot(CommRequest *r) {
    request_event[r->slot] = REQ_MPI;
    request_group[r->slot] = NULL;
    r->slot = -1;
}

void comm_wait(CommRequest *r, const char *what) {
    if (r->slot < 0) return;
    // A device collective still in flight: the device's queue waits for it, not
    // the host (dist/device_comm.h), and the watch times it from here on.
    const int ev = request_event[r->slot];
    if (ev >= 0 && devcomm_event_follow(ev, what)) {
        release_slot(r);
        return;
    }
    // Poll rather than block in MPI_Wait, so that a collective that never completes
    // (a rank stuck or gone without the launcher noticing) ends the job with a
    // message instead of a hang.
    double deadline = now_seconds() + timeout_s;
    int done = 0;
    struct timespec nap = {0, 20000};  // 20 us between polls
    const int device = request_event[r->slot] != REQ_MPI;
    for (long polls = 0;; polls++) {
        if (device) done = device_done(r->slot, what);
        else MPI_Test(&requests[r->slot], &done, MPI_STATUS_IGNORE);
        if (done) break;
        if ((polls & 255) == 0 && now_seconds() > deadline) {
            // die() ends the job (MPI_Abort), which also ends NCCL's kernels; no
            // ncclCommAbort first: it can block, and the message must come out.
            die("%s on the %s group has not finished after parallel.timeout_s = %g s; another "
                "rank is probably stuck or dead — aborting the job",
                what, request_group[r->slot], timeout_s);
        }
        if (polls > 1000) nanosleep(&nap, NULL);
    }
    if (!device) stage_complete(r->slot);  // a staged result goes back to its GPU buffer
    release_slot(r);
}

// --------------------------------------------------------------- collectives

// MPI counts are int: big buffers go through in pieces of at most INT_MAX/2 elements.
#define MAX_PIECE ((size_t)(INT_MAX / 2))

// 1 when this collective goes through the device library: NCCL chosen, the group
// has a communicator, and the buffer is GPU (or managed) memory; its stream then
// waits for the ops queued on the buffers by an event (dist/device_comm.h). Else
// 0, after the host has waited for those ops (buffers_ready), as MPI reads them.
static int on_device(GroupId g, const void *buf) {
    if (device_comm && devcomm_group_ready((int)g) && devcomm_usable(buf)) return 1;
    buffers_ready();
    return 0;
}

// A request for a collective the device library enqueued (event ev).
static CommRequest device_request(GroupId g, int ev) {
    CommRequest r = take_slot(g);
    request_event[r.slot] = ev;
    return r;
}

// One fp32 all-reduce in place, a sum (max 0) or a maximum (max 1).
static CommRequest iallreduce_f32(GroupId g, float *buf, size_t n, int max) {
    if (n > MAX_PIECE) die("%s of %zu floats exceeds the per-call limit", max ? "all-reduce (max)" : "all-reduce", n);
    // In place over one rank: nothing to do, so nothing to wait for (a GPU step's
    // gradient buckets under dp 1 would otherwise each wait for the device).
    if (group_size(g) == 1) return COMM_REQUEST_IDLE;
    if (on_device(g, buf)) return device_request(g, devcomm_allreduce_f32((int)g, buf, n, max));
    CommRequest r = take_slot(g);
    MPI_Iallreduce(MPI_IN_PLACE, stage_inplace(r.slot, buf, n * sizeof(float)), (int)n, MPI_FLOAT,
                   max ? MPI_MAX : MPI_SUM, groups[g], &requests[r.slot]);
    return r;
}

CommRequest group_iallreduce_sum_f32(GroupId g, float *buf, size_t n) { return iallreduce_f32(g, buf, n, 0); }

CommRequest group_ireduce_scatter_f32(GroupId g, const float *in, float *out, size_t chunk) {
    if (chunk > MAX_PIECE) die("reduce-scatter of %zu elements per rank exceeds the per-call limit", chunk);
    // Decided on the whole input (every rank passes a full-length one), never on this
    // rank's part: all members must take the same library.
    if (on_device(g, in)) return device_request(g, devcomm_reduce_scatter_f32((int)g, in, out, chunk));
    CommRequest r = take_slot(g);
    const size_t in_bytes = (size_t)group_size(g) * chunk * sizeof(float);
    char *h = stage_in_out(r.slot, in, in_bytes, out, chunk * sizeof(float), 0);
    MPI_Ireduce_scatter_block(h ? (const void *)h : in, h ? (void *)(h + in_bytes) : out, (int)chunk, MPI_FLOAT,
                              MPI_SUM, groups[g], &requests[r.slot]);
    return r;
}

CommRequest group_iallgather_f32(GroupId g, float *buf, size_t chunk) {
    if (chunk > MAX_PIECE) die("all-gather of %zu elements per rank exceeds the per-call limit", chunk);
    if (group_size(g) == 1) return COMM_REQUEST_IDLE;  // in place over one rank: nothing to do
    if (on_device(g, buf)) return device_request(g, devcomm_allgather_f32((int)g, buf, chunk));
    CommRequest r = take_slot(g);
    float *b = stage_inplace(r.slot, buf, (size_t)group_size(g) * chunk * sizeof(float));
    MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, (int)chunk, MPI_FLOAT, groups[g], &requests[r.slot]);
    return r;
}

size_t comm_split_chunk(size_t len, int size) { return (len + (size_t)size - 1) / (size_t)size; }

size_t comm_split_part(size_t len, int size, int r) {
    size_t chunk = comm_split_chunk(len, size), lo = (size_t)r * chunk;
    if (lo >= len) return 0;
    return len - lo < chunk ? len - lo : chunk;
}

// Fill the slot's counts and displacements for an uneven split of len over g.
static void split_counts(CommRequest r, GroupId g, size_t len) {
    int n = group_size(g);
    size_t chunk = comm_split_chunk(len, n);
    if (chunk > MAX_PIECE) die("collective of %zu elements per rank exceeds the per-call limit", chunk);
    int *counts = slot_counts + (size_t)r.slot * comm_world_size();
    int *displs = slot_displs + (size_t)r.slot * comm_world_size();
    for (int i = 0; i < n; i++) {
        counts[i] = (int)comm_split_part(len, n, i);
        displs[i] = (int)((size_t)i * chunk < len ? (size_t)i * chunk : len);
    }
}

CommRequest group_ireduce_scatter_split_f32(GroupId g, const float *in, float *out, size_t len) {
    // Decided on the full-length buffer (in, else out), never on this rank's part,
    // which may be empty and point past its allocation: all members must agree.
    if (on_device(g, in ? (const void *)in : (const void *)out))
        return device_request(g, devcomm_reduce_scatter_split_f32((int)g, in, out, len));
    CommRequest r = take_slot(g);
    split_counts(r, g, len);
    const int *counts = slot_counts + (size_t)r.slot * comm_world_size();
    // Staged: [the whole input (in, else out itself) | this rank's part].
    const size_t in_bytes = len * sizeof(float);
    char *h = stage_in_out(r.slot, in ? in : out, in_bytes, out, (size_t)counts[group_rank(g)] * sizeof(float), 0);
    if (h)
        MPI_Ireduce_scatter(h, h + in_bytes, counts, MPI_FLOAT, MPI_SUM, groups[g], &requests[r.slot]);
    else
        MPI_Ireduce_scatter(in ? in : MPI_IN_PLACE, out, counts, MPI_FLOAT, MPI_SUM, groups[g], &requests[r.slot]);
    return r;
}

CommRequest group_iallgather_split_f32(GroupId g, float *buf, size_t len) {
    if (group_size(g) == 1) return COMM_REQUEST_IDLE;  // in place over one rank: nothing to do
    if (on_device(g, buf)) return device_request(g, devcomm_allgather_split_f32((int)g, buf, len));
    CommRequest r = take_slot(g);
    split_counts(r, g, len);
    size_t base = (size_t)r.slot * comm_world_size();
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, stage_inplace(r.slot, buf, len * sizeof(float)), slot_counts + base,
                    slot_displs + base, MPI_FLOAT, groups[g], &requests[r.slot]);
    return r;
}

// ---------------------------------------------------------- point-to-point

void group_open_links(GroupId g, const CommLink *ends, int n) {
    if (device_comm && devcomm_group_ready((int)g)) comm_links_open(g, groups[g], ends, n);
}

size_t comm_link_bytes(void) { return comm_links_bytes(); }

CommRequest group_isend_f32(GroupId g, const float *buf, size_t n, int dest, int tag) {
    if (n > MAX_PIECE) die("send of %zu elements exceeds the per-call limit", n);
    const int link = comm_links_device_end(g, group_rank(g), dest, tag, buf, n);
    if (link >= 0) return device_request(g, devcomm_send_f32(link, buf, n));
    CommRequest r = mpi_slot(g);
    MPI_Isend(stage_send(r.slot, buf, n * sizeof(float)), (int)n, MPI_FLOAT, dest, tag, groups[g], &requests[r.slot]);
    return r;
}

CommRequest group_irecv_f32(GroupId g, float *buf, size_t n, int src, int tag) {
    if (n > MAX_PIECE) die("receive of %zu elements exceeds the per-call limit", n);
    const int link = comm_links_device_end(g, src, group_rank(g), tag, buf, n);
    if (link >= 0) return device_request(g, devcomm_recv_f32(link, buf, n));
    CommRequest r = mpi_slot(g);
    MPI_Irecv(stage_recv(r.slot, buf, n * sizeof(float)), (int)n, MPI_FLOAT, src, tag, groups[g], &requests[r.slot]);
    return r;
}

void group_allreduce_sum_f32(GroupId g, float *buf, size_t n) {
    if (!mpi_up || group_size(g) == 1) return;
    for (size_t off = 0; off < n; off += MAX_PIECE) {
        size_t len = n - off < MAX_PIECE ? n - off : MAX_PIECE;
        CommRequest r = group_iallreduce_sum_f32(g, buf + off, len);
        comm_wait(&r, "all-reduce");
    }
}

// Host scalars or counters (n of type t) in place: no device work to wait for.
static void allreduce_host(GroupId g, void *buf, size_t n, MPI_Datatype t, MPI_Op op, const char *what) {
    if (!mpi_up || group_size(g) == 1) return;
    if (n > MAX_PIECE) die("%s of %zu values exceeds the per-call limit", what, n);
    CommRequest r = take_slot(g);
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, op, groups[g], &requests[r.slot]);
    comm_wait(&r, what);
}

void group_allreduce_sum_f64(GroupId g, double *buf, size_t n) {
    allreduce_host(g, buf, n, MPI_DOUBLE, MPI_SUM, "all-reduce");
}

void group_allreduce_max_f64(GroupId g, double *buf, size_t n) {
    allreduce_host(g, buf, n, MPI_DOUBLE, MPI_MAX, "all-reduce (max)");
}

void group_allreduce_sum_u64(GroupId g, uint64_t *buf, size_t n) {
    allreduce_host(g, buf, n, MPI_UINT64_T, MPI_SUM, "all-reduce");
}

void group_allreduce_max_f32(GroupId g, float *buf, size_t n) {
    if (!mpi_up || group_size(g) == 1) return;
    CommRequest r = iallreduce_f32(g, buf, n, 1);
    comm_wait(&r, "all-reduce (max)");
}

void group_allgather_f32(GroupId g, float *buf, size_t chunk) {
    if (!mpi_up || group_size(g) == 1) return;
    CommRequest r = group_iallgather_f32(g, buf, chunk);
    comm_wait(&r, "all-gather");
}

void group_reduce_scatter_f32(GroupId g, const float *in, float *out, size_t chunk) {
    if (!mpi_up || group_size(g) == 1) {
        buffers_ready();
        if (out != in) stage_local_copy(out, in, chunk * sizeof(float));
        return;
    }
    CommRequest r = group_ireduce_scatter_f32(g, in, out, chunk);
    comm_wait(&r, "reduce-scatter");
}

void group_alltoall_i32(GroupId g, const int32_t *send, int32_t *recv, int count) {
    if (!mpi_up || group_size(g) == 1) {
        buffers_ready();
        stage_local_copy(recv, send, sizeof(int32_t) * (size_t)count);
        return;
    }
    CommRequest r = mpi_slot(g);
    const size_t bytes = sizeof(int32_t) * (size_t)count * (size_t)group_size(g);  // each side, whole
    char *h = stage_in_out(r.slot, send, bytes, recv, bytes, 0);
    MPI_Ialltoall(h ? (const void *)h : send, count, MPI_INT32_T, h ? (void *)(h + bytes) : recv, count,
                  MPI_INT32_T, groups[g], &requests[r.slot]);
    comm_wait(&r, "all-to-all");
}

void group_alltoallv_f32(GroupId g, const float *send, const int *send_counts, const int *send_displs,
                         float *recv, const int *recv_counts, const int *recv_displs) {
    if (!mpi_up || group_size(g) == 1) {
        buffers_ready();
        stage_local_copy(recv + recv_displs[0], send + send_displs[0], sizeof(float) * (size_t)send_counts[0]);
        return;
    }
    // Decided on the send buffer, a planned one on every member.
    if (on_device(g, send)) {
        CommRequest d = device_request(
            g, devcomm_alltoallv_f32((int)g, send, send_counts, send_displs, recv, recv_counts, recv_displs));
        comm_wait(&d, "all-to-all(v)");
        return;
    }
    CommRequest r = take_slot(g);  // on_device waited for the device
    // Staged: [send extent | receive extent], the receive extent copied in too, so
    // that what no rank sends (gaps between the parts) comes back as it was.
    size_t es = 0, er = 0;  // floats up to the end of the last part
    for (int i = 0; i < group_size(g); i++) {
        const size_t a = (size_t)send_displs[i] + (size_t)send_counts[i];
        const size_t b = (size_t)recv_displs[i] + (size_t)recv_counts[i];
        es = a > es ? a : es;
        er = b > er ? b : er;
    }
    char *h = stage_in_out(r.slot, send, es * sizeof(float), recv, er * sizeof(float), 1);
    MPI_Ialltoallv(h ? (const void *)h : send, send_counts, send_displs, MPI_FLOAT,
                   h ? (void *)(h + es * sizeof(float)) : recv, recv_counts, recv_displs, MPI_FLOAT, groups[g],
                   &requests[r.slot]);
    comm_wait(&r, "all-to-all(v)");
}

void group_barrier(GroupId g) {
    if (!mpi_up || group_size(g) == 1) return;
    CommRequest r = take_slot(g);  // no buffer
    MPI_Ibarrier(groups[g], &requests[r.slot]);
    comm_wait(&r, "barrier");
}

void group_broadcast_bytes(GroupId g, void *buf, size_t bytes, int root) {
    if (!mpi_up || group_size(g) == 1) return;
    if (bytes > MAX_PIECE) die("broadcast of %zu bytes exceeds the per-call limit", bytes);
    CommRequest r = mpi_slot(g);
    MPI_Ibcast(stage_inplace(r.slot, buf, bytes), (int)bytes, MPI_BYTE, root, groups[g], &requests[r.slot]);
    comm_wait(&r, "broadcast");
}

// dist/device_comm_nccl.cu — dist/device_comm.h over NCCL, linked into
// ./femtotron-cuda (host code only; nvcc compiles it with the CUDA kernels so
// that the CPU build needs no CUDA headers). See device_comm.h for what goes
// through it and the ordering rules.
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL call can
// hang the host. A call may return ncclInProgress while NCCL enqueues in the
// background; settle() polls ncclCommGetAsyncError until it is done, bounded by
// parallel.timeout_s, so that a dead or stuck peer ends the job with a message
// naming the operation and the group (after ncclCommAbort) instead of a hang.
//
// Ordering (device_comm.h): by events between the compute stream and each group's
// stream, never by the host. A collective is enqueued behind an event recorded on
// the compute stream; comm_wait makes the compute stream wait for the collective's
// event. What the host then no longer sees, a collective that never finishes (a
// dead peer), the watch catches: each group remembers its oldest followed
// collective not yet seen finished, and devcomm_watch, run while the host waits
// for the compute stream (ops_sync), ends the job once that one is older than
// parallel.timeout_s.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "dist/comm.h"  // comm_split_chunk, comm_split_part: the uneven parts
#include "dist/device_comm.h"
#include "util.h"
}

static_assert(sizeof(ncclUniqueId) == DEVCOMM_ID_BYTES, "DEVCOMM_ID_BYTES must be ncclUniqueId's size");

#define MAX_EVENTS 256

typedef struct {
    ncclComm_t comm;  // NULL until devcomm_group_init (or devcomm_link_split)
    cudaStream_t stream;
    char name[80];  // in messages: "dp group", "pp group's link 0->1 (tag 2)"
    int rank, size;
    cudaEvent_t ready;  // recorded on the compute stream; the next collective waits for it
    cudaEvent_t tail;   // recorded on the group's stream after the last followed collective
    int watched;        // a followed collective is not yet seen finished (tail pending)
    double watched_since;    // the oldest such one's enqueue (now_seconds)
    char watched_what[64];   // and its name
} Group;

#define MAX_SLOTS (DEVCOMM_MAX_GROUPS + DEVCOMM_MAX_LINKS)  // the groups', then the links'
static Group g_groups[MAX_SLOTS];
static cudaEvent_t g_events[MAX_EVENTS];  // created on first use, reused
static int g_event_group[MAX_EVENTS];     // group slot + 1 while in flight, 0 when free
static double g_event_issued[MAX_EVENTS]; // when its collective was enqueued (now_seconds)
static cudaStream_t g_compute;            // the backend's stream (devcomm_set_compute_stream)
static double g_timeout_s = 300.0;

#define CUDA_OK(call)                                                                                   \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) die("CUDA error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

static Group *group(int slot) {
    if (slot < 0 || slot >= MAX_SLOTS || !g_groups[slot].comm)
        die("device collectives: group %d has no NCCL communicator", slot);
    return &g_groups[slot];
}

static void check(ncclResult_t r, Group *g, const char *what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    die("NCCL error in %s on the %s: %s (%s)", what, g->name, ncclGetErrorString(r),
        g->comm ? ncclGetLastError(g->comm) : "");
}

// Wait until the communicator has no call in progress (see the top of the file).
static void settle(Group *g, const char *what) {
    const double deadline = now_seconds() + g_timeout_s;
    struct timespec nap = {0, 20000};  // 20 us
    for (;;) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &st);
        if (r != ncclSuccess) check(r, g, what);
        if (st != ncclInProgress) {
            check(st, g, what);
            return;
        }
        if (now_seconds() > deadline) {  // die() ends the job, NCCL's threads with it
            die("%s on the %s: NCCL has not finished enqueuing after parallel.timeout_s = %g s; another "
                "rank is probably stuck or dead — aborting the job", what, g->name, g_timeout_s);
        }
        nanosleep(&nap, NULL);
    }
}

// An event after the group's last enqueued collective: the request comm.c polls.
static int record(int slot) {
    Group *g = group(slot);
    for (int i = 0; i < MAX_EVENTS; i++) {
        if (g_event_group[i]) continue;
        if (!g_events[i]) CUDA_OK(cudaEventCreateWithFlags(&g_events[i], cudaEventDisableTiming));
        CUDA_OK(cudaEventRecord(g_events[i], g->stream));
        g_event_group[i] = slot + 1;
        g_event_issued[i] = now_seconds();
        return i;
    }
    die("more than %d NCCL collectives in flight", MAX_EVENTS);
}

// Before enqueueing on g: its stream waits for the ops queued so far on the compute
// stream (they write the buffers the collective reads, or read what it will write).
static Group *after_compute(int slot) {
    Group *g = group(slot);
    if (g_compute) {
        CUDA_OK(cudaEventRecord(g->ready, g_compute));
        CUDA_OK(cudaStreamWaitEvent(g->stream, g->ready, 0));
    }
    return g;
}

// A group's stream and its two events (the top of the file).
static void make_queue(Group *g) {
    CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&g->tail, cudaEventDisableTiming));
    g->watched = 0;
}

extern "C" int devcomm_available(void) { return 1; }

extern "C" int devcomm_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" void devcomm_gpu_id(char id[DEVCOMM_GPU_ID_BYTES]) {
    int dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetPCIBusId(id, DEVCOMM_GPU_ID_BYTES, dev));
}

extern "C" void devcomm_unique_id(unsigned char id[DEVCOMM_ID_BYTES]) {
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) die("NCCL: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    memcpy(id, &uid, sizeof uid);
}

extern "C" void devcomm_group_init(int slot, const char *name, const unsigned char id[DEVCOMM_ID_BYTES], int rank,
                                   int size, double timeout_s) {
    if (slot < 0 || slot >= DEVCOMM_MAX_GROUPS) die("device collectives: group slot %d out of range", slot);
    Group *g = &g_groups[slot];
    if (g->comm) die("device collectives: the %s group's communicator exists already", name);
    snprintf(g->name, sizeof g->name, "%s group", name);
    g->rank = rank;
    g->size = size;
    g_timeout_s = timeout_s;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    make_queue(g);
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, size, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
        die("NCCL: creating the %s group's communicator (%d ranks, this one %d) failed: %s", name, size, rank,
            ncclGetErrorString(r));
    settle(g, "creating the communicator");
}

extern "C" int devcomm_group_ready(int slot) {
    return slot >= 0 && slot < MAX_SLOTS && g_groups[slot].comm != NULL;
}

// A link: a communicator of its two ends split from the group's (device_comm.h),
// with resources of its own (splitShare 0), so that its calls are ordered among
// themselves alone. Non-blocking like every communicator here: the split is
// settled on the parent and on the link.
extern "C" int devcomm_link_split(int slot, int end, const char *name) {
    Group *parent = group(slot);
    int link = -1;
    if (end >= 0) {
        for (int s = DEVCOMM_MAX_GROUPS; s < MAX_SLOTS && link < 0; s++)
            if (!g_groups[s].comm) link = s;
        if (link < 0) die("device collectives: more than %d point-to-point links on this rank", DEVCOMM_MAX_LINKS);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.splitShare = 0;
    ncclComm_t comm = NULL;
    check(ncclCommSplit(parent->comm, end >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, end >= 0 ? end : 0, &comm, &config), parent,
          "splitting a point-to-point link");
    settle(parent, "splitting a point-to-point link");
    if (link < 0) return -1;
    if (!comm) die("NCCL: splitting the %s off the %s gave no communicator", name, parent->name);
    Group *g = &g_groups[link];
    snprintf(g->name, sizeof g->name, "%s", name);
    g->comm = comm;
    g->rank = end;
    g->size = 2;
    make_queue(g);
    settle(g, "splitting a point-to-point link");
    return link;
}

extern "C" void devcomm_finalize(void) {
    for (int s = 0; s < MAX_SLOTS; s++) {
        Group *g = &g_groups[s];
        if (!g->comm) continue;
        check(ncclCommFinalize(g->comm), g, "finalising the communicator");
        settle(g, "finalising the communicator");
        ncclCommDestroy(g->comm);
        g->comm = NULL;
        cudaStreamDestroy(g->stream);
        cudaEventDestroy(g->ready);
        cudaEventDestroy(g->tail);
        g->watched = 0;
    }
}

extern "C" int devcomm_usable(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();  // plain host memory may leave an error behind
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Pinned host memory for MPI's staging (dist/comm_stage.c): a copy to or from it is
// a DMA at full bus speed, where MPI on managed memory would fault pages over.
extern "C" void *devcomm_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        die("out of pinned host memory: %zu bytes to stage a collective through", bytes);
    }
    return p;
}

extern "C" void devcomm_host_free(void *p) { CUDA_OK(cudaFreeHost(p)); }

// On the legacy default stream, which the backend's non-blocking stream does not
// wait for: the callers have waited for the device's queued ops first (comm.c).
extern "C" void devcomm_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

extern "C" void devcomm_abort_all(void) {
    for (int s = 0; s < MAX_SLOTS; s++)
        if (g_groups[s].comm) {
            ncclCommAbort(g_groups[s].comm);
            g_groups[s].comm = NULL;
        }
}

extern "C" int devcomm_allreduce_f32(int slot, float *buf, size_t n, int max) {
    Group *g = after_compute(slot);
    check(ncclAllReduce(buf, buf, n, ncclFloat32, max ? ncclMax : ncclSum, g->comm, g->stream), g, "all-reduce");
    settle(g, "all-reduce");
    return record(slot);
}

extern "C" int devcomm_reduce_scatter_f32(int slot, const float *in, float *out, size_t chunk) {
    Group *g = after_compute(slot);
    check(ncclReduceScatter(in, out, chunk, ncclFloat32, ncclSum, g->comm, g->stream), g, "reduce-scatter");
    settle(g, "reduce-scatter");
    return record(slot);
}

extern "C" int devcomm_allgather_f32(int slot, float *buf, size_t chunk) {
    Group *g = after_compute(slot);
    // In place: this rank's chunk already sits at buf + rank * chunk.
    check(ncclAllGather(buf + (size_t)g->rank * chunk, buf, chunk, ncclFloat32, g->comm, g->stream), g, "all-gather");
    settle(g, "all-gather");
    return record(slot);
}

// Uneven parts: one ncclReduce per part, rooted at its owner, in one group call.
// In place (in == NULL): part r is reduced where it lies, at out + r * chunk (the
// owner's send and receive buffers the same: NCCL's in-place reduce), so no part
// is written before every rank has read it; then this rank's part moves to out's
// start, behind the group on the stream (disjoint ranges: a part is at most chunk
// long and lies at least chunk from the start). No scratch copy of the input.
extern "C" int devcomm_reduce_scatter_split_f32(int slot, const float *in, float *out, size_t len) {
    Group *g = after_compute(slot);
    const float *src = in ? in : out;
    const size_t chunk = comm_split_chunk(len, g->size);  // part r starts at r * chunk
    float *own = in ? out : out + (size_t)g->rank * chunk;  // where this rank's part is reduced to
    check(ncclGroupStart(), g, "reduce-scatter (uneven)");
    for (int r = 0; r < g->size; r++) {
        const size_t n = comm_split_part(len, g->size, r);
        if (n) check(ncclReduce(src + (size_t)r * chunk, own, n, ncclFloat32, ncclSum, r, g->comm, g->stream), g,
                     "reduce-scatter (uneven)");
    }
    check(ncclGroupEnd(), g, "reduce-scatter (uneven)");
    const size_t mine = comm_split_part(len, g->size, g->rank);
    if (own != out && mine)
        CUDA_OK(cudaMemcpyAsync(out, own, mine * sizeof(float), cudaMemcpyDefault, g->stream));
    settle(g, "reduce-scatter (uneven)");
    return record(slot);
}

// Uneven parts: one in-place ncclBroadcast per part, rooted at its owner.
extern "C" int devcomm_allgather_split_f32(int slot, float *buf, size_t len) {
    Group *g = after_compute(slot);
    const size_t chunk = comm_split_chunk(len, g->size);
    check(ncclGroupStart(), g, "all-gather (uneven)");
    for (int r = 0; r < g->size; r++) {
        const size_t n = comm_split_part(len, g->size, r);
        if (n) check(ncclBroadcast(buf + (size_t)r * chunk, buf + (size_t)r * chunk, n, ncclFloat32, r, g->comm, g->stream), g,
                     "all-gather (uneven)");
    }
    check(ncclGroupEnd(), g, "all-gather (uneven)");
    settle(g, "all-gather (uneven)");
    return record(slot);
}

extern "C" int devcomm_alltoallv_f32(int slot, const float *send, const int *send_counts, const int *send_displs,
                                     float *recv, const int *recv_counts, const int *recv_displs) {
    Group *g = after_compute(slot);
    check(ncclGroupStart(), g, "all-to-all(v)");
    for (int r = 0; r < g->size; r++) {  // a zero count on one side is zero on the other: both skip
        if (send_counts[r])
            check(ncclSend(send + send_displs[r], (size_t)send_counts[r], ncclFloat32, r, g->comm, g->stream), g,
                  "all-to-all(v)");
        if (recv_counts[r])
            check(ncclRecv(recv + recv_displs[r], (size_t)recv_counts[r], ncclFloat32, r, g->comm, g->stream), g,
                  "all-to-all(v)");
    }
    check(ncclGroupEnd(), g, "all-to-all(v)");
    settle(g, "all-to-all(v)");
    return record(slot);
}

// A link's message: its sender's end sends, its receiver's end receives, the peer
// being the link's other rank.
static int link_message(int link, float *buf, size_t n, int send) {
    if (link < DEVCOMM_MAX_GROUPS) die("device collectives: slot %d is a group, not a point-to-point link", link);
    Group *g = after_compute(link);
    if ((g->rank == 0) != send)
        die("device collectives: a %s on the %s, whose end here %s", send ? "send" : "receive", g->name,
            g->rank == 0 ? "sends" : "receives");
    const char *what = send ? "point-to-point send" : "point-to-point receive";
    check(send ? ncclSend(buf, n, ncclFloat32, 1 - g->rank, g->comm, g->stream)
               : ncclRecv(buf, n, ncclFloat32, 1 - g->rank, g->comm, g->stream),
          g, what);
    settle(g, what);
    return record(link);
}

extern "C" int devcomm_send_f32(int link, const float *buf, size_t n) { return link_message(link, (float *)buf, n, 1); }
extern "C" int devcomm_recv_f32(int link, float *buf, size_t n) { return link_message(link, buf, n, 0); }

extern "C" void devcomm_set_compute_stream(void *stream) { g_compute = (cudaStream_t)stream; }

// The group of in-flight event ev (fatal when ev is not in flight).
static Group *event_owner(int ev) {
    if (ev < 0 || ev >= MAX_EVENTS || !g_event_group[ev]) die("device collectives: event %d is not in flight", ev);
    return group(g_event_group[ev] - 1);
}

// 1 when the work before event e on g's stream has finished, 0 while it runs; fatal,
// naming `what` and the group, on an NCCL or CUDA error.
static int finished(cudaEvent_t e, Group *g, const char *what) {
    ncclResult_t st = ncclSuccess;
    check(ncclCommGetAsyncError(g->comm, &st), g, what);
    check(st, g, what);
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaErrorNotReady) return 0;
    if (q != cudaSuccess) die("CUDA error while %s ran on the %s: %s", what, g->name, cudaGetErrorString(q));
    return 1;
}

extern "C" int devcomm_event_follow(int ev, const char *what) {
    if (!g_compute) return 0;
    Group *g = event_owner(ev);
    CUDA_OK(cudaStreamWaitEvent(g_compute, g_events[ev], 0));
    // Watch from this collective's enqueue unless an older one is still unseen (a
    // query, not a wait: the group's earlier work may well be done by now).
    if (g->watched && finished(g->tail, g, g->watched_what)) g->watched = 0;
    if (!g->watched) {
        g->watched = 1;
        g->watched_since = g_event_issued[ev];
        snprintf(g->watched_what, sizeof g->watched_what, "%s", what);
    }
    CUDA_OK(cudaEventRecord(g->tail, g->stream));
    g_event_group[ev] = 0;  // the stream's wait captured it: free for the next collective
    return 1;
}

extern "C" void devcomm_watch(void) {
    for (int s = 0; s < MAX_SLOTS; s++) {
        Group *g = &g_groups[s];
        if (!g->comm || !g->watched) continue;
        if (finished(g->tail, g, g->watched_what)) g->watched = 0;
        else if (now_seconds() - g->watched_since > g_timeout_s)  // die() ends the job, NCCL's kernels with it
            die("%s on the %s has not finished after parallel.timeout_s = %g s; another rank is probably "
                "stuck or dead — aborting the job", g->watched_what, g->name, g_timeout_s);
    }
}

extern "C" int devcomm_event_test(int ev, const char *what) {
    Group *g = event_owner(ev);
    if (!finished(g_events[ev], g, what)) return 0;
    g_event_group[ev] = 0;
    return 1;
}

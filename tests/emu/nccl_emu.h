// tests/emu/nccl_emu.h — the NCCL calls of src/dist/device_comm_nccl.cu on the
// host, over MPI, so that parallel.comm = nccl runs on machines without GPUs (one
// "GPU" per rank: CUDA_EMU_DEVICES, tests/emu/cuda_emu.h). A communicator is an
// MPI communicator split from the world by its unique id (every rank of the
// world creates the grid's communicators in the same order, dist/comm_device.c);
// one of one rank needs no MPI. A collective is queued on its stream as the
// device's work is (cuda_emu.h) and runs as the MPI call when the host next
// waits: in the order each rank issued them, which every member of a group
// shares. Communicators are non-blocking: a group whose ranks are not all there
// (fewer processes in the world than it was created for) stays "in progress",
// so the caller's watchdog fires as on a stuck peer. NCCL_EMU_HANG_AT=k stages a
// peer that dies after joining: this process's k-th collective or message never
// finishes (cuda_emu.h's stalled queue), for the watchdog of collectives the
// device waits for. Each collective is queued on its group's stream: CUDA_EMU_STREAMS
// (cuda_emu.h) runs those streams before or after the ops' stream wherever the
// events allow, which shows a missing event. Point-to-point links (ncclCommSplit
// of a group's communicator, ncclSend and ncclRecv): a message is asynchronous
// work on its link's stream, which gets a queue of its own (cuda_emu.h): a send
// copies its buffer and starts a synchronous MPI send (it finishes once the peer's
// receive has matched it, as NCCL's send holds its stream until the peer's receive
// runs), a receive starts an MPI receive and writes its buffer when that finishes;
// the two counts must be equal, as NCCL requires. What it cannot check: NCCL's own
// algorithms, streams truly running at once, and anything about the hardware.
#ifndef FEMTOTRON_NCCL_EMU_H
#define FEMTOTRON_NCCL_EMU_H

#include <mpi.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "cuda_emu.h"

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct {
    int blocking;
    int splitShare;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1, 0}
#define NCCL_SPLIT_NOCOLOR (-1)

struct EmuNcclComm {
    MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_NULL for one rank
    int rank = 0, size = 1;
    bool stalled = false;  // its peers never came: in progress for ever
};
typedef EmuNcclComm *ncclComm_t;

inline const char *ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclInProgress ? "operation in progress" : "invalid argument";
}
inline const char *ncclGetLastError(ncclComm_t) { return ""; }

// A fresh id: this process and a counter (the ids of one job differ).
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static unsigned counter;
    memset(id, 0, sizeof *id);
    const unsigned v[2] = {(unsigned)getpid(), ++counter};
    memcpy(id->internal, v, sizeof v);
    return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int size, ncclUniqueId id, int rank, ncclConfig_t *) {
    EmuNcclComm *m = new EmuNcclComm;
    m->rank = rank;
    m->size = size;
    *c = m;
    if (size == 1) return ncclSuccess;
    int up = 0, world = 1;
    MPI_Initialized(&up);
    if (up) MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (!up || world < size) {  // the peers are not in this job: they never join
        m->stalled = true;
        return ncclInProgress;
    }
    unsigned v[2];
    memcpy(v, id.internal, sizeof v);
    const int colour = (int)((v[0] * 2654435761u + v[1]) & 0x3fffffffu);
    MPI_Comm_split(MPI_COMM_WORLD, colour, rank, &m->comm);
    int got = 0;
    MPI_Comm_size(m->comm, &got);
    if (got != size) emu_fail("an emulated NCCL communicator got a different size than it was created with");
    return ncclSuccess;
}
// Collective over the parent: the ranks of one colour make a communicator, the
// others (NCCL_SPLIT_NOCOLOR) get none.
inline ncclResult_t ncclCommSplit(ncclComm_t parent, int colour, int key, ncclComm_t *out, ncclConfig_t *) {
    *out = nullptr;
    if (parent->stalled) return ncclInProgress;
    if (parent->size == 1) emu_fail("ncclCommSplit of a communicator of one rank");
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(parent->comm, colour < 0 ? MPI_UNDEFINED : colour, key, &c);
    if (c == MPI_COMM_NULL) return ncclSuccess;
    EmuNcclComm *m = new EmuNcclComm;
    m->comm = c;
    MPI_Comm_rank(c, &m->rank);
    MPI_Comm_size(c, &m->size);
    *out = m;
    return ncclSuccess;
}
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *st) {
    *st = c->stalled ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
}
inline ncclResult_t ncclCommFinalize(ncclComm_t) {
    emu::flush();
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    delete c;
    return ncclSuccess;
}
inline ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }
// Between ncclGroupStart and ncclGroupEnd collectives are queued in order as
// outside; sends and receives are gathered (emu_group) and queued at the end as one
// piece of work, run like a collective: every send and receive started at once,
// finished together (in a group they progress independently, so no order among
// them may deadlock).
struct EmuGroupMessage {
    void *buf;
    size_t n;
    int peer;
    ncclComm_t comm;
    bool send;
};
inline int emu_group_depth;
inline std::vector<EmuGroupMessage> emu_group;
inline cudaStream_t emu_group_stream;
inline ncclResult_t ncclGroupStart() {
    emu_group_depth++;
    return ncclSuccess;
}
inline bool emu_hang_now();
inline ncclResult_t ncclGroupEnd() {
    if (--emu_group_depth > 0 || emu_group.empty()) return ncclSuccess;
    std::vector<EmuGroupMessage> batch;
    batch.swap(emu_group);
    emu::enqueue(
        [batch]() {
            std::vector<std::vector<float>> data(batch.size());
            std::vector<MPI_Request> req(batch.size());
            for (size_t i = 0; i < batch.size(); i++) {
                const EmuGroupMessage &m = batch[i];
                if (m.send) data[i].assign((const float *)m.buf, (const float *)m.buf + m.n);
                else data[i].resize(m.n);
                if (m.send) MPI_Isend(data[i].data(), (int)m.n, MPI_FLOAT, m.peer, 1, m.comm->comm, &req[i]);
                else MPI_Irecv(data[i].data(), (int)m.n, MPI_FLOAT, m.peer, 1, m.comm->comm, &req[i]);
            }
            MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
            for (size_t i = 0; i < batch.size(); i++)
                if (!batch[i].send) memcpy(batch[i].buf, data[i].data(), batch[i].n * sizeof(float));
        },
        emu_group_stream, nullptr, emu_hang_now());
    return ncclSuccess;
}

// Whether this process's next collective or message is NCCL_EMU_HANG_AT's (counting from 1).
inline bool emu_hang_now() {
    static long issued;
    static const long hang_at = getenv("NCCL_EMU_HANG_AT") ? atol(getenv("NCCL_EMU_HANG_AT")) : 0;
    return ++issued == hang_at;
}
// Queue one collective (fp32 only, as femtotron uses).
inline ncclResult_t emu_nccl(ncclComm_t c, ncclDataType_t t, cudaStream_t stream, const std::function<void()> &run) {
    if (t != ncclFloat32) return ncclInvalidArgument;
    if (c->stalled) return ncclInProgress;
    emu::enqueue(run, stream, nullptr, emu_hang_now());  // the hang_at-th never runs
    return ncclSuccess;
}
inline MPI_Op emu_mpi_op(ncclRedOp_t op) { return op == ncclMax ? MPI_MAX : MPI_SUM; }

inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                  ncclComm_t c, cudaStream_t stream) {
    return emu_nccl(c, t, stream, [=]() {
        if (c->size == 1) {
            if (send != recv) memmove(recv, send, n * 4);
            return;
        }
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)n, MPI_FLOAT, emu_mpi_op(op), c->comm);
    });
}
inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t stream) {
    return emu_nccl(c, t, stream, [=]() {
        // NCCL allows recv = send + rank * n (in place): read the input first.
        std::vector<float> in((const float *)send, (const float *)send + n * c->size);
        if (c->size == 1) memcpy(recv, in.data(), n * 4);
        else MPI_Reduce_scatter_block(in.data(), recv, (int)n, MPI_FLOAT, emu_mpi_op(op), c->comm);
    });
}
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t n, ncclDataType_t t, ncclComm_t c,
                                  cudaStream_t stream) {
    return emu_nccl(c, t, stream, [=]() {
        std::vector<float> mine((const float *)send, (const float *)send + n);  // send may lie in recv
        if (c->size == 1) memcpy(recv, mine.data(), n * 4);
        else MPI_Allgather(mine.data(), (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, c->comm);
    });
}
inline ncclResult_t ncclReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                               ncclComm_t c, cudaStream_t stream) {
    return emu_nccl(c, t, stream, [=]() {
        std::vector<float> in((const float *)send, (const float *)send + n);
        if (c->size == 1) memcpy(recv, in.data(), n * 4);
        else MPI_Reduce(in.data(), c->rank == root ? recv : nullptr, (int)n, MPI_FLOAT, emu_mpi_op(op), root, c->comm);
    });
}
inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                                  cudaStream_t stream) {
    return emu_nccl(c, t, stream, [=]() {
        if (c->rank == root && send != recv) memmove(recv, send, n * 4);
        if (c->size > 1) MPI_Bcast(recv, (int)n, MPI_FLOAT, root, c->comm);
    });
}

// Point-to-point (see the top). The message's state lives with its queued work.
struct EmuMessage {
    std::vector<float> data;
    MPI_Request req = MPI_REQUEST_NULL;
};
// NCCL_EMU_HANG_AT's message: it never finishes, holding its link's stream.
inline ncclResult_t emu_never_message(cudaStream_t stream) {
    emu::own_queue(stream);
    emu::enqueue([]() {}, stream, nullptr, true);
    return ncclSuccess;
}
// One message (see the top): send = 1 sends buf, else receives into it.
inline ncclResult_t emu_message(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream,
                                bool send) {
    if (t != ncclFloat32) return ncclInvalidArgument;
    if (c->stalled) return ncclInProgress;
    if (emu_group_depth > 0) {  // gathered until ncclGroupEnd (see there)
        if (!emu_group.empty() && emu_group_stream != stream)
            emu_fail("ncclSend/ncclRecv of one NCCL group on different streams");
        emu_group.push_back(EmuGroupMessage{buf, n, peer, c, send});
        emu_group_stream = stream;
        return ncclSuccess;
    }
    if (emu_hang_now()) return emu_never_message(stream);
    std::shared_ptr<EmuMessage> m = std::make_shared<EmuMessage>();
    emu::enqueue_async(
        [=]() {
            if (m->req == MPI_REQUEST_NULL && send) {  // starting: a send reads its buffer now
                m->data.assign((const float *)buf, (const float *)buf + n);
                MPI_Issend(m->data.data(), (int)n, MPI_FLOAT, peer, 0, c->comm, &m->req);
            } else if (m->req == MPI_REQUEST_NULL) {  // room for one more float: a longer send shows
                m->data.resize(n + 1);
                MPI_Irecv(m->data.data(), (int)n + 1, MPI_FLOAT, peer, 0, c->comm, &m->req);
            }
            int done = 0, got = 0;
            MPI_Status st;
            MPI_Test(&m->req, &done, &st);
            if (!done || send) return done != 0;
            MPI_Get_count(&st, MPI_FLOAT, &got);
            if ((size_t)got != n) {
                char what[160];
                snprintf(what, sizeof what, "ncclRecv of %zu floats matched an ncclSend of %d: NCCL requires equal counts",
                         n, got);
                emu_fail(what);
            }
            memcpy(buf, m->data.data(), n * sizeof(float));  // a receive writes its buffer now
            return true;
        },
        stream);
    return ncclSuccess;
}
inline ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    return emu_message((void *)buf, n, t, peer, c, stream, true);
}
inline ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    return emu_message(buf, n, t, peer, c, stream, false);
}

#endif

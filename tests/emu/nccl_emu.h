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
// peer that dies after joining: this process's k-th collective never finishes
// (cuda_emu.h's stalled queue), for the watchdog of collectives the device waits
// for. Each collective is queued on its group's stream: CUDA_EMU_STREAMS
// (cuda_emu.h) runs those streams before or after the ops' stream wherever the
// events allow, which shows a missing event. What it cannot check: NCCL's own
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
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1}

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
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }  // the calls between are queued in order anyway
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

// Queue one collective (fp32 only, as femtotron uses).
inline ncclResult_t emu_nccl(ncclComm_t c, ncclDataType_t t, cudaStream_t stream, const std::function<void()> &run) {
    if (t != ncclFloat32) return ncclInvalidArgument;
    if (c->stalled) return ncclInProgress;
    static long issued;
    static const long hang_at = getenv("NCCL_EMU_HANG_AT") ? atol(getenv("NCCL_EMU_HANG_AT")) : 0;
    emu::enqueue(run, stream, nullptr, ++issued == hang_at);  // the hang_at-th never runs
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

#endif

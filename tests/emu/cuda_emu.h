// tests/emu/cuda_emu.h — the part of CUDA that femtotron's CUDA backend uses, run
// on the host, so its kernels and the host code around them are tested on
// machines without a GPU (in CI): the kernels' language (qualifiers, thread and
// block indices, __syncthreads, __syncwarp, static and dynamic shared memory,
// bf16, WMMA fragments), the launch, and the runtime calls of src/ops/*.cu.
// cuBLASLt is tests/emu/cublaslt_emu.h; tests/emu/include/ puts both where the
// .cu files include <cuda_runtime.h>, <cublasLt.h>, <cuda_bf16.h> and <mma.h>;
// tests/emu/cu2cpp.py rewrites the `<<<...>>>` launches into emu_kernel_call.
//
// Threads. A block's threads are user-level contexts on the calling thread, run in index order; a barrier suspends the thread and the scheduler
// resumes the waiting threads once every live thread of the block (__syncthreads)
// or of the warp (__syncwarp) has arrived, or fails naming the deadlock. A kernel
// whose first block never reaches a barrier runs its later blocks as plain calls.
// Blocks run one after another (in grid order, or reversed: CUDA_EMU_ORDER below),
// so a function-level static is the block's shared memory: tests/emu/cu2cpp.py
// declares each `__shared__ T name[N];` as a static EmuStaticShared (below; this
// header's __shared__ is a name that fails to compile, so a form cu2cpp does not
// rewrite, or a header it does not read, cannot silently keep stale contents).
// Those arrays and the dynamic shared memory (one buffer per block) are filled with
// NaN bytes before each block, as cudaMalloc'd memory is once, so a read of what no
// thread of the block wrote shows up, instead of what the last block left there.
//
// WMMA (m16n16k16, bf16 operands, fp32 accumulators): a fragment holds the whole
// 16x16 tile (a GPU spreads it over the warp in an unspecified layout, which the
// kernels must not rely on: they never touch its elements), and lane 0 does each
// operation for the warp. The documented rules are checked: the pointer 256-bit
// aligned, ldm a multiple of 16 bytes, every lane of the warp making the same calls.
//
// Streams. Work is queued, not run: a launch, a cuBLASLt product, an async copy
// or memset between device (or managed) memory runs when the host next waits
// (cudaStreamSynchronize, cudaDeviceSynchronize, cudaFree, a copy into plain host
// memory, which CUDA completes before returning). So host code that reads a buffer
// an op has not finished sees the old contents, as it may on a GPU, instead of the
// answer: a missing wait fails the tests. The order between streams is
// CUDA_EMU_STREAMS's: `order` (the default) runs all streams in the order the host
// issued the work; `side-first` runs the work of the other streams (NCCL's group
// streams) as early as their stream order and events allow, and `side-last` as
// late, the process's first stream (the ops' stream) and the default stream being
// the main one. Each stream keeps its order and cudaStreamWaitEvent holds a
// stream until the event's record has run; the other streams are kept in one
// queue, in issue order, which keeps every rank's collectives in issue order too.
// So a missing event between the ops' stream and a collective's stream shows as
// wrong numbers in one of the two modes (a collective reading its buffer before the
// op writing it ran, or an op reading the collective's result before it arrived).
// A stream that carries point-to-point messages (NCCL's links, nccl_emu.h) gets a
// queue of its own (own_queue): a message waits for its peer, and on a GPU it holds
// its own stream only. Its messages are asynchronous work: started when they reach
// the head of their queue (a send reads its buffer then), finished when MPI says
// so (a receive writes its buffer then); the queue's later work waits for that.
// These queues act as early as they can in `order` and `side-first`, and in
// `side-last` only while the main stream cannot run, so a missing event around a
// message shows too. A host wait polls messages in flight until they finish.
// A copy out of plain host memory reads it when issued (CUDA stages pageable memory then); a copy out of pinned memory (cudaMallocHost) reads
// it when it runs, as a GPU's DMA does, so host code that rewrites pinned memory
// before its copy ran sends the new contents. CUDA_EMU_SYNC=1 runs everything at once.
//
// Launch checks as on sm_90: at most 1024 threads, grid y and z at most 65535,
// dynamic shared memory above 48 KiB only after cudaFuncSetAttribute allowed it and
// never above 227 KiB; a bad launch leaves its error for cudaGetLastError.
//
// Files: this head (the language's qualifiers, vector types, the runtime's types),
// then cuda_emu_streams.h, cuda_emu_blocks.h, cuda_emu_runtime.h and
// cuda_emu_device.h (their own heads say what each holds).
//
// What it cannot check: the order of memory accesses between the lanes of a warp
// (only lane 0 touches WMMA tiles here), timing and races between blocks (they do not overlap
// here), register and shared-memory limits beyond the above, speed, and anything
// the hardware does differently from its documentation.
#ifndef FEMTOTRON_CUDA_EMU_H
#define FEMTOTRON_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <type_traits>
#include <vector>

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// tests/emu/cu2cpp.py rewrites each `__shared__ T name[N];` (EmuStaticShared, below);
// one it did not see (in a header, say) fails to compile, naming why.
#define __shared__ shared_memory_not_rewritten_by_tests_emu_cu2cpp_py

[[noreturn]] inline void emu_fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    fflush(stderr);
    abort();
}

struct alignas(8) int2 {  // as CUDA's: 8-byte aligned, one 64-bit access
    int x, y;
};
inline int2 make_int2(int x, int y) { return int2{x, y}; }
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(8) uint2 {
    unsigned x, y;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---------------------------------------------------------------- runtime types
typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorNotReady = 600,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
} cudaError_t;
typedef cudaError_t cudaError;
struct EmuStream;
typedef EmuStream *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged };
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
enum cudaDeviceAttr { cudaDevAttrConcurrentManagedAccess = 89 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
#define cudaStreamNonBlocking 0x01
#define cudaMemAttachGlobal 0x01

// Its parts, in order:
#include "cuda_emu_streams.h"
#include "cuda_emu_blocks.h"
#include "cuda_emu_runtime.h"
#include "cuda_emu_device.h"

#endif

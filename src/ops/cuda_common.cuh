// ops/cuda_common.cuh — what every CUDA kernel file of the backend shares: the
// error checks, the launch shape helpers and the per-process state (the stream,
// the cuBLASLt handle and workspace, a scratch buffer). Included by the .cu files
// of ops/ only; the layers above see ops.h alone (docs/DESIGN.md, invariant 6:
// the backend boundary).
//
// Ordering rule: every op is queued on one stream and returns at once (cuda_done
// checks the launch only). Planned buffers are CUDA managed memory
// (ops/buffers_cuda.cu); host code that reads or writes them directly waits for
// the stream first (ops_sync): the collectives over MPI (dist/comm.c, through
// comm_set_device_queue; NCCL's follow the stream by events), validation before filling a slot's token ids, the
// scalars read back (a step's loss and gradient norm's sums, together), the host-run
// MoE ops, checkpoints and initialisation (docs/DESIGN.md lists them). A training
// step's token ids arrive by queued uploads from pinned staging (no wait).
#ifndef FEMTOTRON_CUDA_COMMON_CUH
#define FEMTOTRON_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "util.h"
}

// Fatal on a CUDA error, naming the call and where it was made.
#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t err_ = (call);                                                              \
        if (err_ != cudaSuccess)                                                                \
            die("CUDA error in %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
    } while (0)

// The stream every op runs on (created by ops_init). An op's first call opens its
// time in the profile (FEMTOTRON_CUDA_PROFILE, ops/op_profile_cuda.cu).
cudaStream_t cuda_stream(void);
// The same stream, without the profile's hook.
cudaStream_t cuda_stream_raw(void);
// The profile (ops/op_profile_cuda.cu): an op opens at its first use of the stream
// and closes at cuda_done (what: its name, which sets its kind), each an event on
// the stream; ops_sync reports its time blocked, and the events are read then.
// No-ops unless FEMTOTRON_CUDA_PROFILE is set.
void cuda_profile_open(void);
void cuda_profile_close(const char *what);
void cuda_profile_wait(double seconds);
// 1 when FEMTOTRON_CUDA_PROFILE is set.
int cuda_profile_on(void);
// Close what the current op queued so far as an op of its own named `what` (when
// it queued anything): a product's operand rounding, apart from its kernel.
void cuda_profile_split(const char *what);
// The op closing next is a matrix product of cuBLASLt's shape m x n x k, operand
// and output types `types`, listed by shape with its TFLOP/s (2 m n k a call).
void cuda_profile_product(const char *what, int m, int n, int k, const char *types);
// After a kernel launch: fatal on a launch error (see the ordering rule above; an
// error while the kernel runs shows at the next wait). `what` names the op.
void cuda_done(const char *what);
// The backend's work buffers, by part (laid out as ops_cuda_workspace says): at
// least `bytes` of part `part`, reused by every op that needs it. The installed
// workspace's part (ops.h: ops_set_workspace; fatal, naming `what`, when it holds
// fewer), else a buffer the backend grows itself (contents not kept).
enum { WS_LT, WS_SCRATCH, WS_HALF0, WS_HALF1, WS_HALF2, WS_ATT, WS_PARTS };
void *cuda_work_buffer(int part, size_t bytes, const char *what);
// Part WS_SCRATCH: the row losses and reduction partials.
void *cuda_scratch(size_t bytes);
// A device-visible copy of n int32 values at p: p itself when it is managed or
// device memory (every planned buffer), else a copy in scratch slot `slot` (0..2)
// (token ids or positions the caller holds in plain host memory).
const int32_t *cuda_device_ints(const int32_t *p, size_t n, int slot);

// The id checks' records (ops_check_ids), allocated once by ops_init, not in a step.
void cuda_id_checks_init(void);
// After a host wait: fatal when an id check queued since the previous wait found an
// id outside its vocabulary (ops_check_ids, ops/embedding_cuda.cu). ops_sync calls it.
void cuda_report_id_checks(void);

// The kept bf16 weight copy's slice (an __nv_bfloat16 array) for an optimizer
// update of the weights [p, p + n) (ops/matmul_cuda.cu, ops_keep_bf16_weights):
// NULL when no copy is kept or the range is outside the arena. The update writes
// the updated weights there, rounded as the products would round them, and the
// slice then counts as rounded for the generation the next
// ops_bf16_weights_changed() starts: no rounding pass over it in the next step.
void *cuda_bf16_copy_for_update(const float *p, size_t n);

// The most blocks cuda_blocks gives one launch: kernels that take more elements
// than CUDA_MAX_BLOCKS * threads loop over them (grid-stride).
#define CUDA_MAX_BLOCKS ((size_t)65535u * 32u)

// Blocks for n independent elements, `threads` per block.
static inline unsigned cuda_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > CUDA_MAX_BLOCKS ? CUDA_MAX_BLOCKS : b));
}

#endif

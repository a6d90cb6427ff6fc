// ops/cuda_workspace.h — the sizes of the CUDA backend's own work buffers (ops.h,
// "the CUDA backend's own work buffers"): the step's bounds and the parts they
// size. Pure functions, in both builds (ops/cuda_workspace.c). Its own header, out
// of ops.h, because tests/gpu/cpu_ref.h reads ops.h twice (the CPU kernels' names,
// then the CUDA ones) and these types and functions exist once.
#ifndef FEMTOTRON_CUDA_WORKSPACE_H
#define FEMTOTRON_CUDA_WORKSPACE_H

#include <stddef.h>

typedef struct {
    size_t rows;      // most rows (tokens) of one matrix product or cross-entropy call
    size_t in_cols;   // widest input (in_dim) of a matrix product
    size_t out_cols;  // widest output gradient (out_dim) a product's backward may copy into slot 0:
                      // every product's but the head's, whose bf16 dlogits are read where the loss
                      // wrote them (ops_cuda_bf16_in_place): the head's widest piece only where
                      // one is not (llama_op_bounds)
    size_t weight;    // most elements, as ops_cuda_operand_elements counts them, of a weight
                      // a product reads from outside the kept bf16 copy (0: none does)
    int bf16;         // bf16 products (training.precision)
    size_t att_qkv;   // elements of one attention call's q|k|v, (B*S, (H+2KV)*hd) (0: no attention)
    size_t att_out;   // elements of its output, (B*S, H*hd)
    size_t att_scores;  // elements of its score matrix as cuDNN pads it (ops_cuda_cudnn_scores)
    int cudnn_attention;  // training.attention = cudnn (with bf16): the att part below
} OpsBounds;
// The parts of the CUDA workspace for bounds b, in bytes (each a multiple of 256,
// laid out in this order), and their total. Pure, in both builds (ops/cuda_workspace.c):
// the CPU build plans GPU runs too.
typedef struct {
    size_t lt;       // cuBLASLt's workspace (OPS_CUDA_LT_WORKSPACE)
    size_t scratch;  // (max(rows, OPS_CUDA_SUM_BLOCKS)) doubles: row losses, sum partials; or, if
                     // larger, (OPS_CUDA_COL_CHUNKS, in_cols) floats: column sums' partials
    size_t half[3];  // bf16 operand copies, slots 0..2 (0 bytes in fp32)
    size_t att;      // cuDNN attention's buffers (ops_cuda_cudnn_parts without the copies; 0 bytes
                     // unless cudnn_attention)
    size_t total;    // the parts + 256 bytes of slack to align the first to 256
} OpsCudaWorkspace;
#define OPS_CUDA_LT_WORKSPACE ((size_t)32 << 20)  // llm.c's size on Hopper (GPU_NOTES.md)
#define OPS_CUDA_SUM_BLOCKS 256  // sum_squares' fixed grid: its partials' order never changes
// Column sums over the rows (RMSNorm's weight gradient) run in at most this many
// fixed chunks of rows, then add the chunks' partials in order: parallel over rows
// and columns, the same association every run. Their width is the hidden size,
// which every layer's q|k|v product reads, so in_cols bounds it. 512: the one-pass
// backward (ops/kernels_cuda.cu) runs a block a chunk, so chunks of 16 rows at
// SmolLM-1.7B's 8192 tokens give 512 blocks, about 4 a multiprocessor.
#define OPS_CUDA_COL_CHUNKS 512
OpsCudaWorkspace ops_cuda_workspace(const OpsBounds *b);
// The CPU backend's work buffers for bounds b, in bytes: bf16 products' operand
// copies in the same three slots (half[0..2]; 0 in fp32), nothing else.
size_t ops_cpu_workspace_bytes(const OpsBounds *b);
// The att part for cuDNN's attention (ops/attention_cuda.cu), in bytes, each a
// multiple of 256, in this order: the bf16 copies of q|k|v (att_qkv), of the
// output and of its gradient (att_out each), cuDNN's bf16 q|k|v gradient
// (att_qkv), and cuDNN's own workspace. `copies` 0 leaves out the four copies,
// which only the fp32 ops on cuDNN use (a cudnn training run keeps q|k|v, the
// output and their gradients in bf16 itself and calls the bf16 ops, ops.h): cuDNN's
// workspace alone, which is what the memory plan counts. cuDNN's workspace is reserved as OPS_CUDA_CUDNN_RESERVE
// because only cuDNN knows its size once it has picked a kernel (an op asking
// more is fatal, naming both sizes). The reserve has two terms:
// - 2 bytes a padded score (att_scores): on Hopper the deterministic backward
//   (the only one we ask for) is cuDNN's "dP workspace" decomposition, which
//   stores dP for every (query, key) pair in bf16, B*H*S_pad*S_pad*2 bytes
//   (cudnn-frontend's scaled_dot_product_flash_attention.h; cudnn-frontend PR
//   398: quadratic in S until cuDNN 9.25's ordered-dQ engine). At SmolLM-1.7B's
//   micro-batch (B 4, H 32, S 2048) that is 1.07 GB, the largest part by far;
// - 5 floats an output value: the fp32 query-gradient accumulator and row sums
//   of the other backward kernels, and the forward's, with 32 MiB of slack.
enum { CUDNN_QKV16, CUDNN_O16, CUDNN_DO16, CUDNN_DQKV16, CUDNN_WS, CUDNN_PARTS };
#define OPS_CUDA_CUDNN_RESERVE(att_out, att_scores) \
    (5 * 4 * (size_t)(att_out) + 2 * (size_t)(att_scores) + ((size_t)32 << 20))
void ops_cuda_cudnn_parts(size_t att_qkv, size_t att_out, size_t att_scores, int copies, size_t part[CUDNN_PARTS]);
// B*H*S_pad*S_pad: one attention call's scores with S padded to a multiple of 128
// (cuDNN pads to 64 queries and 128 keys; 128 for both is the safe bound).
size_t ops_cuda_cudnn_scores(size_t B, size_t H, size_t S);
// Elements of the bf16 copy of an (rows, cols) operand: its rows padded to 8 values
// (16 bytes, for cuBLASLt's vector loads).
size_t ops_cuda_operand_elements(size_t rows, size_t cols);
// Whether the CUDA backend's products read a bf16 operand as it is, rows ld16 values
// apart and starting col0 values into a planned buffer (planned buffers start 64-byte
// aligned, util.h): both 16-byte aligned, as cuBLASLt's vector loads need; else it reads
// a padded copy in slot 0 (matmul_backward_ld16, on the loss's bf16 dlogits: a head
// piece starting at row r0 of a (Vl, D) head reads columns [r0, r1) of rows CE_LD16(Vl)
// apart). The planner asks it of every head piece, so slot 0 has room for the copy
// only where one is made; the backend's check on the address agrees for planned buffers.
int ops_cuda_bf16_in_place(size_t ld16, size_t col0);
#endif

// ops/cuda_workspace.c — the sizes of the CUDA backend's own work buffers
// (ops/cuda_workspace.h), a pure function compiled into both builds: the planner of the
// CPU build predicts a GPU run's memory with it, the CUDA backend carves its
// installed workspace with it, so the two cannot drift apart.
#include "ops/cuda_workspace.h"

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

size_t ops_cuda_operand_elements(size_t rows, size_t cols) { return rows * round_up(cols, 8); }

int ops_cuda_bf16_in_place(size_t ld16, size_t col0) { return ld16 % 8 == 0 && col0 % 8 == 0; }

size_t ops_cuda_cudnn_scores(size_t B, size_t H, size_t S) { return B * H * round_up(S, 128) * round_up(S, 128); }

void ops_cuda_cudnn_parts(size_t att_qkv, size_t att_out, size_t att_scores, int copies, size_t part[CUDNN_PARTS]) {
    part[CUDNN_QKV16] = part[CUDNN_DQKV16] = copies ? round_up(2 * att_qkv, 256) : 0;
    part[CUDNN_O16] = part[CUDNN_DO16] = copies ? round_up(2 * att_out, 256) : 0;
    part[CUDNN_WS] = round_up(OPS_CUDA_CUDNN_RESERVE(att_out, att_scores), 256);
}

OpsCudaWorkspace ops_cuda_workspace(const OpsBounds *b) {
    OpsCudaWorkspace w = {0};
    w.lt = OPS_CUDA_LT_WORKSPACE;
    const size_t sums = b->rows > OPS_CUDA_SUM_BLOCKS ? b->rows : OPS_CUDA_SUM_BLOCKS;
    const size_t rows_bytes = sums * sizeof(double), cols_bytes = OPS_CUDA_COL_CHUNKS * b->in_cols * sizeof(float);
    w.scratch = round_up(rows_bytes > cols_bytes ? rows_bytes : cols_bytes, 256);
    if (b->bf16) {
        // Slot 0 holds a backward's output gradient (rows, out) or, outside the kept
        // copy, a forward's weight; slot 1 an input (rows, in); slot 2 a backward's
        // weight outside the kept copy. bf16: 2 bytes each.
        const size_t dout = ops_cuda_operand_elements(b->rows, b->out_cols);
        w.half[0] = round_up(2 * (dout > b->weight ? dout : b->weight), 256);
        w.half[1] = round_up(2 * ops_cuda_operand_elements(b->rows, b->in_cols), 256);
        w.half[2] = round_up(2 * b->weight, 256);
    }
    if (b->bf16 && b->cudnn_attention) {
        size_t part[CUDNN_PARTS];
        ops_cuda_cudnn_parts(b->att_qkv, b->att_out, b->att_scores, 0, part);  // a run calls the bf16 ops
        for (int i = 0; i < CUDNN_PARTS; i++) w.att += part[i];
    }
    // + 256 of slack: the backend starts the first part 256-byte aligned (cuBLASLt's
    // workspace) in a planned buffer that is only 64-byte aligned (util.h).
    w.total = 256 + w.lt + w.scratch + w.half[0] + w.half[1] + w.half[2] + w.att;
    return w;
}

size_t ops_cpu_workspace_bytes(const OpsBounds *b) {
    const OpsCudaWorkspace w = ops_cuda_workspace(b);
    return w.half[0] + w.half[1] + w.half[2];
}

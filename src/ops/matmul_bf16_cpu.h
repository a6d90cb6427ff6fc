// ops/matmul_bf16_cpu.h — the CPU's bf16 products (ops/matmul_bf16_cpu.c), for
// the CPU kernels only: the layers above see ops.h's matmul_* and
// ops_set_matmul_bf16.
#ifndef FEMTOTRON_MATMUL_BF16_CPU_H
#define FEMTOTRON_MATMUL_BF16_CPU_H

#include <stdint.h>

// The bf16 operand a product reads for the fp32 x(rows, cols), rows ld apart: the
// kept copy of a weight in the arena (ops_keep_bf16_weights), else x rounded to the
// nearest bf16 into the contiguous scratch of `slot` (0-2: the operands of one
// product take different slots), rows cols apart. Valid until that slot is used
// again.
const uint16_t *cpu_bf16_operand(int slot, const float *x, int rows, int cols, int ld);

// Row-major C(M, N) = alpha op(A) op(B) + beta C: A and B bf16 (op: transposed
// where ta / tb), the exact products summed in fp32, C fp32.
void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                   int ldb, float beta, float *C, int ldc);

// The attention's bf16 tile products (ops/attention_cpu.c): on AMX (ops/amx_tiles.h)
// where cpu_attention_amx(hd) says so (bf16 products on, AMX on this CPU and
// allowed, hd a multiple of 32, not turned off), else cpu_gemm_bf16.
// cpu_attention_use_amx(0) turns AMX off (tests and the bench compare the two).
int cpu_attention_amx(int hd);
void cpu_attention_use_amx(int on);

// AdamW's share of the kept copy: where param(n) lies in the kept arena and bf16
// products are on, the copy's slice for param, which the update writes with the
// new values rounded to the nearest bf16 (the next generation then reads it without
// rounding it again; ops_bf16_weights_changed); else NULL.
uint16_t *cpu_bf16_copy_for_update(const float *param, size_t n);

#endif

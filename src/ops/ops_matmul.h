// ops/ops_matmul.h — the matrix products of the kernel API (ops/ops.h includes it;
// read that header's conventions first): fp32 and bf16 operands, plain and with
// leading dimensions, the residual add in the epilogue. Implemented by
// ops/matmul_cpu.c (with ops/matmul_bf16_cpu.c) and ops/matmul_cuda.cu. Its own
// file because the products are the largest part of the API; tests/gpu/cpu_ref.h
// reads it twice with ops.h (both guards reopened).
#ifndef FEMTOTRON_OPS_MATMUL_H
#define FEMTOTRON_OPS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

// ---- linear layers (Hugging Face nn.Linear layout: weight is (out, in)) ----

// out(N, out_dim) = in(N, in_dim) @ weight(out_dim, in_dim)^T
void matmul_forward(float *out, const float *in, const float *weight,
                    int N, int in_dim, int out_dim);

// The same with out's rows ld_out floats apart: out is a column block of a wider
// (N, ld_out) matrix (a piece of the output head's logits).
void matmul_forward_ld(float *out, int ld_out, const float *in, const float *weight,
                       int N, int in_dim, int out_dim);

// out(N, out_dim) = add(N, out_dim) + in @ weight^T, the residual add after an o
// or down projection: bit for bit matmul_forward then residual_forward(out, out,
// add) where the product's sums are the same, one fp32 rounding of the sum.
// CUDA adds in the product's epilogue (cuBLASLt's C = add, D = out), saving the
// add's pass over three (N, out_dim) fp32 matrices. out must not alias add.
void matmul_forward_add(float *out, const float *add, const float *in, const float *weight,
                        int N, int in_dim, int out_dim);

// Products on operands kept as bf16 (a bf16 run's activations, model/activations.h),
// read as they are: CUDA with bf16 products hands them to cuBLASLt as operands
// (rows of a width that is not a multiple of 8, whose columns would be misaligned,
// copied with padding first, as a rounded fp32 operand would be), which are the
// operands the fp32 ops would have rounded the widened values to, so the same
// products. A backend that cannot read bf16 (the CPU's sgemm; CUDA with fp32
// products) widens each into its scratch first: for an input x16 that scratch
// may be x16's own buffer (x16 at its start, room for the floats), widened in
// place, after which x16's values are gone; an output gradient's scratch lies
// apart from it (a caller may ask for din and dweight in separate calls, each
// widening it again). CUDA with bf16 products leaves every scratch alone.
//
// out(N, out_dim) = in16(N, in_dim) widened @ weight(out_dim, in_dim)^T; scratch
// (N, in_dim) fp32 (a bf16 run's down projection, q|k|v).
void matmul_forward_from_bf16(float *out, const uint16_t *in16, float *scratch, const float *weight,
                              int N, int in_dim, int out_dim);
// The same plus add(N, out_dim), as matmul_forward_add (out must not alias add).
void matmul_forward_from_bf16_add(float *out, const float *add, const uint16_t *in16, float *scratch,
                                  const float *weight, int N, int in_dim, int out_dim);
// The same with out16(N, out_dim) bf16, each value rounded to the nearest bf16
// (ties to even) from the fp32 sums as it is written (cuBLASLt's D type bf16, no
// split-K partial sums in bf16): a bf16 run's gate|up. out_scratch(N, out_dim)
// fp32: where the backend cannot write bf16 from a product, the product goes
// there, then round_to_bf16.
void matmul_forward_bf16(uint16_t *out16, float *out_scratch, const uint16_t *in16, float *in_scratch,
                         const float *weight, int N, int in_dim, int out_dim);
// matmul_backward with the input kept as bf16 (scratch as above, read only when
// dweight is wanted): dweight += dout^T @ in16 widened; din (+)= dout @ weight.
void matmul_backward_from_bf16(float *din, float *dweight, const float *dout, const uint16_t *in16,
                               float *scratch, const float *weight, int N, int in_dim, int out_dim,
                               int accumulate_din);
// matmul_backward with the output gradient dout16(N, out_dim) and the input
// in16(N, in_dim) kept as bf16 (a bf16 run's gate|up and q|k|v: their gradients
// written as bf16 by swiglu_backward_to_bf16 and rope_backward_to_bf16, their
// inputs by rmsnorm_*_to_bf16): dweight += dout16^T @ in16; din (+)= dout16 @
// weight. dscratch(N, out_dim), in_scratch(N, in_dim) fp32 as above (in16 read,
// and in_scratch used, only when dweight is wanted).
void matmul_backward_bf16(float *din, float *dweight, const uint16_t *dout16, float *dscratch,
                          const uint16_t *in16, float *in_scratch, const float *weight, int N, int in_dim,
                          int out_dim, int accumulate_din);
// The input gradient alone, written as bf16: din16(N, in_dim) = dout(N, out_dim) @
// weight, each value rounded to the nearest bf16 from the fp32 sums as it is
// written (cuBLASLt's D type bf16, as matmul_forward_bf16): a bf16 run's down
// product, whose input gradient only SwiGLU's backward reads, and o's in the split
// backward under cuDNN. din_scratch(N, in_dim) fp32: where the backend cannot
// write bf16 from a product, the product goes there, then is rounded; apart from
// din16, or din16's own buffer on the CPU (as matmul_backward_from_bf16_to_bf16).
void matmul_backward_input_to_bf16(uint16_t *din16, float *din_scratch, const float *dout, const float *weight,
                                   int N, int in_dim, int out_dim);
// Both gradients of matmul_backward_from_bf16 (dweight += dout^T @ in16 widened;
// dweight NULL: not wanted), with din16(N, in_dim) written as bf16 as
// matmul_backward_input_to_bf16 writes it, the two products reading one bf16
// rounding of dout: the o product under cuDNN's attention (LlamaModel.att_bf16),
// whose input gradient only cuDNN's backward reads, as bf16. in_scratch(N, in_dim)
// as matmul_backward_from_bf16's scratch. din_scratch(N, in_dim) fp32, which only a
// backend that rounds after its product uses (the CPU; CUDA with fp32 products):
// it may be din16's own buffer (din16 at its start), then narrowed in place, which
// only the CPU does (CUDA's cuDNN runs have bf16 products; it refuses the case
// with fp32 ones, as it refuses NULL there).
void matmul_backward_from_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight, const float *dout,
                                       const uint16_t *in16, float *in_scratch, const float *weight, int N,
                                       int in_dim, int out_dim);
// The same from the output gradient dout16(N, out_dim) kept as bf16, read as it is
// (the residual stream's gradient as a norm's backward wrote it beside the fp32
// values: ops.h, rmsnorm_backward_with_bf16): din16 (NULL: not wanted) and
// dweight (NULL: not wanted; in16 unread) as above from the same operand. Needs
// bf16 products (fatal otherwise: a backend with fp32 ones reads the fp32
// gradient, unrounded). din_scratch(N, in_dim) fp32 as above, for the CPU only.
void matmul_backward_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight, const uint16_t *dout16,
                                  const uint16_t *in16, const float *weight, int N, int in_dim, int out_dim);

// matmul_backward_ld with the output gradient kept as bf16, dout16(N, out_dim) with
// rows ld16 values apart (a column block of cross_entropy_forward_backward_bf16's
// dlogits, ld16 = CE_LD16(Vl)), read as it is by bf16 products (through a padded
// copy where its columns would not be 16-byte aligned). Needs bf16 products: a
// backend with fp32 ones would have to widen it, and the logits' own buffer is
// the only room for that (fatal).
void matmul_backward_ld16(float *din, float *dweight, const uint16_t *dout16, size_t ld16, const float *in,
                          const float *weight, int N, int in_dim, int out_dim, int accumulate_din);

// dweight(out_dim, in_dim) += dout(N, out_dim)^T @ in(N, in_dim)
// din(N, in_dim) (+)= dout @ weight       (accumulate_din: 0 overwrite, 1 add)
// din or dweight may be NULL (that gradient not wanted).
void matmul_backward(float *din, float *dweight, const float *dout, const float *in,
                     const float *weight, int N, int in_dim, int out_dim,
                     int accumulate_din);

// The same with dout's rows ld_dout floats apart (a column block of the logits).
void matmul_backward_ld(float *din, float *dweight, const float *dout, int ld_dout, const float *in,
                        const float *weight, int N, int in_dim, int out_dim, int accumulate_din);

#endif

// parallel_layers/tensor_parallel.h — the tensor-parallel pieces a model is built
// from: Megatron-style column- and row-parallel linear layers (Shoeybi et al. 2019)
// with sequence parallelism (Korthikanti et al. 2022), the vocab-parallel embedding
// and cross-entropy, and the norm-weight gradient of a sequence-parallel norm.
//
// Shapes: N tokens of the micro-batch (B*S), Nr = the rows of the residual stream
// this rank holds (tp_rows: N/tp with sequence parallel, else N), D hidden,
// V vocabulary, Vl = ceil(V/tp) vocabulary rows per rank (padded).
//
//   column-parallel (q|k|v, gate|up, head): x --gather--> X(N, D) @ W_shard^T
//   row-parallel (o, down):                 Y_shard @ W_shard^T --reduce--> y(Nr, D)
//
//   without sequence parallel: gather is the identity and reduce an all-reduce (the
//   f and g operators of the Megatron paper); their backwards swap roles: the
//   gradient entering a row-parallel layer is used as is, and the input gradient of
//   a column-parallel layer is all-reduced.
//   with sequence parallel: the residual stream, norms and dropout-free adds run on
//   token shards (rank r holds rows [r*N/tp, (r+1)*N/tp) of every (N, D) activation);
//   gather is an all-gather of the shards, reduce a reduce-scatter.
//
// The embedding and the output head are vocab-parallel; the cross-entropy is
// computed on vocabulary shards (a max and two sums over the group) without ever
// gathering the logits.
//
// Nothing here knows the model: each piece takes the group (TensorParallel), its
// buffers and its dimensions. Communication goes through dist/comm.h (GROUP_TP).
#ifndef FEMTOTRON_TENSOR_PARALLEL_H
#define FEMTOTRON_TENSOR_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

// This rank's place in its tensor-parallel group.
typedef struct {
    int size, rank;  // group size and this rank's index (1, 0: no tensor parallelism)
    int sp;          // sequence parallel (only ever set when size > 1)
} TensorParallel;

// The rows of a vocab-parallel table (embedding, head) a rank holds.
typedef struct {
    int V;      // the whole vocabulary
    int rows;   // Vl = ceil(V / tp): rows held on every rank (vocab padded to a multiple of tp)
    int v0;     // global id of the first row held here
    int valid;  // rows of the slice that exist globally (the rest is padding: never
                // trained, never saved)
} VocabShard;

// The group of `size` ranks, this one being `rank`; sp only takes effect when size > 1.
TensorParallel tp_group(int size, int rank, int sp);
// Rank tp->rank's slice of a vocabulary of V ids.
VocabShard tp_vocab_shard(const TensorParallel *tp, int V);

// Rows of the residual stream this rank holds: N / tp with sequence parallel, else N.
int tp_rows(const TensorParallel *tp, int N);

// The full (N, D) activation from this rank's x(tp_rows, D): x itself without
// sequence parallel, else `full` after an all-gather.
const float *tp_gather(const TensorParallel *tp, const float *x, float *full, int N, int D);
// The same for a bf16 x16(tp_rows, D), D even: x16 itself, or the first half of
// full(N, D floats) after an all-gather of its bits.
const uint16_t *tp_gather_bf16(const TensorParallel *tp, const uint16_t *x16, float *full, int N, int D);

// partial(N, D) summed over the group into out(tp_rows, D). Without sequence parallel
// the all-reduce is in place and out must equal partial; with it, a reduce-scatter.
void tp_reduce(const TensorParallel *tp, float *partial, float *out, int N, int D);
// buf(n) = its sum over the group, in place (nothing when tp = 1).
void tp_allreduce_sum(const TensorParallel *tp, float *buf, size_t n);
// The same, split in two so that independent work can run while it travels.
CommRequest tp_reduce_start(const TensorParallel *tp, float *partial, float *out, int N, int D);
void tp_reduce_finish(CommRequest *r);

// ---- linear layers (weights in nn.Linear layout (out, in), this rank's slice) ----

// Column-parallel forward: out(N, out_local) = gather(x)(N, D) @ w(out_local, D)^T;
// x(tp_rows, D), full(N, D) scratch for the gather.
void tp_column_forward(const TensorParallel *tp, float *out, const float *x, float *full,
                       const float *w, int N, int D, int out_local);
// The same with the input x16(tp_rows, D) kept as bf16 (ops.h:
// matmul_forward_from_bf16), gathered as bf16; a backend that cannot read bf16
// widens the gathered rows in place (x16's buffer, or full: room for N x D floats
// either way), so x16 is read once. And with the output kept as bf16 too (ops.h:
// matmul_forward_bf16): out16(N, out_local); out_scratch(N, out_local) fp32 for a
// backend that rounds after.
void tp_column_forward_from_bf16(const TensorParallel *tp, float *out, uint16_t *x16, float *full, const float *w,
                                 int N, int D, int out_local);
void tp_column_forward_bf16(const TensorParallel *tp, uint16_t *out16, float *out_scratch, uint16_t *x16, float *full,
                            const float *w, int N, int D, int out_local);
// Column-parallel backward: dw(out_local, D) += dout^T @ gather(x); din(tp_rows, D) =
// dout @ w summed over the group. The sum travels while the weight gradient is
// computed (overlap). full(N, D) and partial(N, D) are scratch (partial unused
// without sequence parallel: the all-reduce runs in place in din).
void tp_column_backward(const TensorParallel *tp, float *din, float *dw, const float *dout,
                        const float *x, const float *w, float *full, float *partial, int N, int D,
                        int out_local);
// The same with the output gradient dout16(N, out_local) and the input x16
// (tp_rows, D) kept as bf16 (ops.h: matmul_backward_bf16; x16 gathered and read
// as by tp_column_forward_from_bf16); dscratch(N, out_local) fp32, apart from
// dout16, for a backend that widens it. din or dw may be NULL (x16 and w with
// them): the halves tp_column_backward_input and _weight below, the same kernels.
void tp_column_backward_bf16(const TensorParallel *tp, float *din, float *dw, const uint16_t *dout16,
                             float *dscratch, uint16_t *x16, const float *w, float *full, float *partial, int N,
                             int D, int out_local);
// Row-parallel forward: out(tp_rows, D) = add + the sum over the group of
// x(N, in_local) @ w(D, in_local)^T, add(tp_rows, D) the residual stream (NULL:
// none; not aliasing out). partial(N, D) scratch (sequence parallel only; else in
// place in out). On one rank the add is the product's (ops.h: matmul_forward_add,
// in the epilogue on CUDA); on several, after the reduction.
void tp_row_forward(const TensorParallel *tp, float *out, const float *add, const float *x, const float *w,
                    float *partial, int N, int in_local, int D);
// Row-parallel backward: dw(D, in_local) += gather(dout)^T @ x; din(N, in_local) =
// gather(dout) @ w (overwritten). dout(tp_rows, D); full(N, D) scratch.
void tp_row_backward(const TensorParallel *tp, float *din, float *dw, const float *dout,
                     const float *x, const float *w, float *full, int N, int in_local, int D);
// The same two with the input x16(N, in_local) kept as bf16 (ops.h:
// matmul_*_from_bf16); xscratch(N, in_local) fp32 for a backend that widens it.
// In both row-parallel backwards din may be NULL (w then too): the weight gradient
// alone, the same kernels as tp_row_backward_weight runs.
void tp_row_forward_from_bf16(const TensorParallel *tp, float *out, const float *add, const uint16_t *x16,
                              float *xscratch, const float *w, float *partial, int N, int in_local, int D);
void tp_row_backward_from_bf16(const TensorParallel *tp, float *din, float *dw, const float *dout,
                               const uint16_t *x16, float *xscratch, const float *w, float *full, int N,
                               int in_local, int D);
// The same with din written as bf16, din16(N, in_local) (ops.h:
// matmul_backward_from_bf16_to_bf16: one rounding of gather(dout) for both
// products; din_scratch NULL where the products are bf16): the o product under
// cuDNN's attention, whose input gradient cuDNN reads as bf16.
void tp_row_backward_from_bf16_to_bf16(const TensorParallel *tp, uint16_t *din16, float *din_scratch, float *dw,
                                       const float *dout, const uint16_t *x16, float *xscratch, const float *w,
                                       float *full, int N, int in_local, int D);

// RMSNorm backward with a replicated weight, from the forward's kept xhat(Nr, D) and
// rstd(Nr) (ops.h: rmsnorm_backward): din(Nr, D) += ..., dweight(D) += ...
// With sequence parallel each rank sees only its token shard, so the weight's
// contribution is summed over the group (into dw_scratch(D)) before it joins dweight.
// din16(Nr, D) (NULL: not wanted): din's sums rounded to bf16 as written (ops.h:
// rmsnorm_backward_with_bf16).
void tp_norm_backward(const TensorParallel *tp, float *din, uint16_t *din16, float *dweight, const float *dout,
                      const float *xhat, const float *weight, const float *rstd, float *dw_scratch,
                      int Nr, int D);

// ---- the same backwards split in two (zero-bubble pipeline schedules) ----
// The input gradient (what the previous layer waits for) and the weight gradient
// (what nobody waits for) computed separately, the second possibly much later from
// what the first was given: each half runs exactly the kernels, with the same
// arguments, that the fused backward above runs for it, so the results are the same
// bits. The input halves need the weights, the weight halves only the layer input
// and the output gradient (both re-gathered under sequence parallel, as above).

// din(tp_rows, D) = dout @ w summed over the group (column-parallel).
void tp_column_backward_input(const TensorParallel *tp, float *din, const float *dout, const float *w,
                              float *partial, int N, int D, int out_local);
// dw(out_local, D) += dout^T @ gather(x) (column-parallel); full(N, D) scratch.
void tp_column_backward_weight(const TensorParallel *tp, float *dw, const float *dout, const float *x,
                               float *full, int N, int D, int out_local);
// din(N, in_local) = gather(dout) @ w (row-parallel); full(N, D) scratch.
void tp_row_backward_input(const TensorParallel *tp, float *din, const float *dout, const float *w,
                           float *full, int N, int in_local, int D);
// The same written as bf16 (ops.h: matmul_backward_input_to_bf16): din16(N,
// in_local) = gather(dout) @ w rounded; din_scratch(N, in_local) fp32 for a
// backend that rounds after the product.
void tp_row_backward_input_to_bf16(const TensorParallel *tp, uint16_t *din16, float *din_scratch, const float *dout,
                                   const float *w, float *full, int N, int in_local, int D);
// dw(D, in_local) += gather(dout)^T @ x (row-parallel); full(N, D) scratch.
void tp_row_backward_weight(const TensorParallel *tp, float *dw, const float *dout, const float *x,
                            float *full, int N, int in_local, int D);
// din(Nr, D) += the norm's input gradient (no communication); din16(Nr, D) (NULL:
// not wanted) its sums rounded to bf16 as written, as tp_norm_backward's.
void tp_norm_backward_input(float *din, uint16_t *din16, const float *dout, const float *xhat, const float *weight,
                            const float *rstd, int Nr, int D);
// dweight(D) += the norm weight's gradient sum(dout * xhat), summed over the group
// under sequence parallel.
void tp_norm_backward_weight(const TensorParallel *tp, float *dweight, const float *dout, const float *xhat,
                             float *dw_scratch, int Nr, int D);

// ---- vocab-parallel embedding and loss ----

// out(tp_rows, D) = table rows of the tokens(N) from this rank's slice table(Vl, D)
// (zero rows elsewhere, summed over the group); full(N, D) is scratch.
void tp_embedding_forward(const TensorParallel *tp, const VocabShard *vs, float *out,
                          const int32_t *tokens, const float *table, float *full, int N, int D);
// dtable(Vl, D) += the rows of this slice's tokens, from dout(tp_rows, D).
void tp_embedding_backward(const TensorParallel *tp, const VocabShard *vs, float *dtable,
                           const float *dout, const int32_t *tokens, float *full, int N, int D);

// Vocab-parallel cross-entropy over logits(N, Vl) of a vocabulary of V: adds the
// SUM of the losses of the N tokens (the same on every rank of the group) to
// *loss_sum (a planned buffer of one double, ops.h); with want_grads the logits
// become dlogits * grad_scale: fp32 (CE_GRADS_F32), or bf16 in place, rows
// CE_LD16(Vl) apart (CE_GRADS_BF16, ops.h). stats(3N) is scratch.
void tp_cross_entropy(const TensorParallel *tp, const VocabShard *vs, int V, float *logits,
                      const int32_t *targets, int N, float grad_scale, int want_grads, float *stats,
                      double *loss_sum);

#endif

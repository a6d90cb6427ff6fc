// parallel/tensor_parallel.h — Megatron-style tensor parallelism (Shoeybi et al. 2019)
// with sequence parallelism (Korthikanti et al. 2022), as two conjugate operators:
//
//   column-parallel block (q|k|v, gate|up):   x --tp_gather--> [X full] @ W_shard^T
//   row-parallel block (o, down):             [Y_shard @ W_shard^T] --tp_reduce--> y
//
//   without sequence parallel: tp_gather is the identity and tp_reduce an all-reduce
//   (the f and g operators of the Megatron paper); their backwards swap roles: the
//   gradient entering a row-parallel block is used as is, and the input gradient of
//   a column-parallel block is all-reduced.
//   with sequence parallel: the residual stream, norms and dropout-free adds run on
//   token shards (rank r holds rows [r*N/tp, (r+1)*N/tp) of every (N, D) activation);
//   tp_gather is an all-gather of the shards, tp_reduce a reduce-scatter.
//
// The embedding and the output head are vocab-parallel; the cross-entropy is
// computed on vocabulary shards (a max and two sums over the group) without ever
// gathering the logits.
#ifndef FEMTOTRON_TENSOR_PARALLEL_H
#define FEMTOTRON_TENSOR_PARALLEL_H

#include <stdint.h>

#include "dist/comm.h"
#include "model/llama.h"

// Rows of the residual stream this rank holds: N / tp with sequence parallel, else N.
int tp_rows(const LlamaModel *m, int N);

// Column-parallel input: the full (N, D) activation from this rank's x(tp_rows, D).
// Returns x itself without sequence parallel, else `full` after an all-gather.
const float *tp_gather(const LlamaModel *m, const float *x, float *full, int N, int D);

// Row-parallel output (and column-parallel input gradient): partial(N, D) summed
// over the group into out(tp_rows, D). Without sequence parallel the all-reduce is in
// place and out must equal partial; with it, a reduce-scatter into out.
void tp_reduce(const LlamaModel *m, float *partial, float *out, int N, int D);
// The same, split in two so that independent work can run while it travels.
CommRequest tp_reduce_start(const LlamaModel *m, float *partial, float *out, int N, int D);
void tp_reduce_finish(CommRequest *r);

// Replicated parameters' gradient contributions computed on token shards
// (sequence parallel): sum g(n) over the group in place.
void tp_sum_replicated(const LlamaModel *m, float *g, size_t n);

// Vocab-parallel embedding: out(tp_rows, D) from this rank's table slice (Vl, D);
// full(N, D) is scratch.
void tp_embedding_forward(const LlamaModel *m, float *out, const int32_t *tokens,
                          const float *table, float *full, int N);
// dtable(Vl, D) += the rows of this slice's tokens, from dout(tp_rows, D).
void tp_embedding_backward(const LlamaModel *m, float *dtable, const float *dout,
                           const int32_t *tokens, float *full, int N);

// Vocab-parallel cross-entropy over logits(N, Vl): returns the SUM of the losses of
// the N tokens (the same on every rank of the group); with want_grads the logits
// become dlogits * grad_scale. stats(3N) is scratch.
double tp_cross_entropy(const LlamaModel *m, float *logits, const int32_t *targets, int N,
                        float grad_scale, int want_grads, float *stats);

#endif

// parallel/context_parallel.h — context parallelism: each sequence is split over the
// cp group, and attention runs as a ring (Liu et al. 2023, "Ring Attention").
//
// Zigzag split: the S tokens of a sequence are cut into 2*cp chunks of C = S/(2cp);
// rank r holds chunks r and 2cp-1-r (in that order), so every rank does the same
// amount of causal attention work (an early chunk sees few keys, a late one many).
// RoPE uses each token's global position.
//
// Forward of one layer: the rank's own key/value block (kv heads only: grouped-query
// heads are not expanded) travels around the ring; at step j a rank folds the block
// of rank r - j into its running (output, max, sum) with the tiled kernel of ops.h,
// while the next block is already on its way (non-blocking receive and send posted
// before the compute). Partial outputs merge through the online-softmax state, which
// is the log-sum-exp merge. Fully masked key tiles are skipped inside the kernel.
// Backward: the same ring, each block travelling with its key/value gradients; a
// rank adds the contribution of its queries to the block it holds and accumulates
// its own query gradient locally; after the last step every block's gradient takes
// one more hop home to its owner.
#ifndef FEMTOTRON_CONTEXT_PARALLEL_H
#define FEMTOTRON_CONTEXT_PARALLEL_H

#include <stdint.h>

#include "model/llama.h"

// Global positions of rank r's S/cp tokens of a sequence of S tokens: pos(S/cp).
void cp_positions(int S, int cp, int r, int *pos);
// This rank's tokens of B full sequences: full(B, S) -> local(B, S/cp).
void cp_take_local(const int32_t *full, int32_t *local, int B, int S, int cp, int r);

// Attention of one layer over the ring: qkv(B*Sl, (Hl+2KVl)*hd) after RoPE ->
// out(B*Sl, Hl*hd), lse(B, Hl, Sl). Uses a's attention scratch and ring buffers.
void cp_attention_forward(const LlamaModel *m, Activations *a, const float *qkv, float *out,
                          float *lse);
// dqkv(B*Sl, (Hl+2KVl)*hd) (overwritten) from dout(B*Sl, Hl*hd).
void cp_attention_backward(const LlamaModel *m, Activations *a, float *dqkv, const float *dout,
                           const float *qkv, const float *out, const float *lse);

#endif

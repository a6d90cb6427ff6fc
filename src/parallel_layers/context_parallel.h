// parallel_layers/context_parallel.h — context parallelism: each sequence is split
// over the cp group, and attention runs as a ring (Liu et al. 2023, "Ring Attention").
//
// Shapes: B sequences, S = this rank's tokens of each (seq_length / cp), H / KV =
// this rank's query / key-value heads, hd = head dim; qkv rows are tokens laid out
// [q heads (H*hd) | k heads (KV*hd) | v heads (KV*hd)] as in ops/ops.h.
//
// Zigzag split: the tokens of a sequence are cut into 2*cp chunks of C =
// seq_length/(2cp); rank r holds chunks r and 2cp-1-r (in that order), so every
// rank does the same amount of causal attention work (an early chunk sees few
// keys, a late one many). RoPE uses each token's global position.
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
//
// Nothing here knows the model: the ring takes the group (ContextParallel), the
// attention shape and its buffers (RingAttention). Communication goes through
// dist/comm.h (GROUP_CP).
#ifndef FEMTOTRON_CONTEXT_PARALLEL_H
#define FEMTOTRON_CONTEXT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

// This rank's place in its context-parallel group.
typedef struct {
    int size, rank;  // group size and this rank's index (1, 0: no context parallelism)
} ContextParallel;

// One layer's attention on this rank: its shape and the buffers the ring uses
// (scratch, shared by every layer; the caller plans them, cp_ring_floats sizes the ring).
typedef struct {
    int B, S;           // sequences, this rank's tokens of each
    int H, KV, hd;      // this rank's query heads, key/value heads, head dim
    const int *pos;     // (S) global position of each local token
    const int *pos_of;  // (cp, S) positions of every cp rank's tokens (pos_of[rank] = pos)
    float *m, *l;       // (B, H, S) running max and sum of the online softmax
    float *rowdot;      // (B, H, S) sum(dout * out) per attention row
    float *scratch;     // (attention_scratch_floats) per-thread tiles
    float *ring;        // (cp_ring_floats) cp > 1: (6, B*S, 2*KV*hd) blocks of k|v or dk|dv:
                        // the forward uses 2 (the block held, the next), the backward 5
                        // (k|v held and next, two partial gradient sums, the incoming one)
} RingAttention;

// Floats of the ring buffer for B sequences of S local tokens with KV heads of hd
// (0 without context parallelism).
size_t cp_ring_floats(const ContextParallel *cp, int B, int S, int KV, int hd);

// buf(n) = its sum over the context-parallel group, in place (nothing when cp = 1):
// statistics of whole sequences whose tokens are spread over the group.
void cp_allreduce_sum(const ContextParallel *cp, float *buf, size_t n);
// Open the ring's links (dist/comm.h: group_open_links, over NCCL where the cp
// group's collectives go): key/value blocks and their gradients, to the next rank
// and from the previous one. Collective over the cp group, before the first step.
void cp_open_links(const ContextParallel *cp);

// Global positions of rank r's S/cp tokens of a sequence of S tokens: pos(S/cp).
void cp_positions(int S, int cp, int r, int *pos);
// This rank's tokens of B full sequences: full(B, S) -> local(B, S/cp).
void cp_take_local(const int32_t *full, int32_t *local, int B, int S, int cp, int r);

// Causal attention of one layer over the ring: qkv(B*S, (H+2KV)*hd) after RoPE ->
// out(B*S, H*hd), lse(B, H, S). With cp = 1, the single-block kernel.
void ring_attention_forward(const ContextParallel *cp, const RingAttention *ra, const float *qkv,
                            float *out, float *lse);
// dqkv(B*S, (H+2KV)*hd) (overwritten) from dout(B*S, H*hd).
void ring_attention_backward(const ContextParallel *cp, const RingAttention *ra, float *dqkv,
                             const float *dout, const float *qkv, const float *out,
                             const float *lse);

#endif

// model/activation_plan.h — the activation plan of one pipeline stage: the size of
// every buffer of Activations (model/activations.h) for a micro-batch of B
// sequences of S tokens, their allocation in one arena, and the token-position
// tables. Planned once before step 1 (docs/DESIGN.md, invariant 3: all memory
// planned); the planner calls the same size functions, so what it predicts is what
// is allocated. Shapes: B sequences of S tokens (the legend of model/llama.h).
#ifndef FEMTOTRON_ACTIVATION_PLAN_H
#define FEMTOTRON_ACTIVATION_PLAN_H

#include <stddef.h>

#include "model/activations.h"
#include "model/llama.h"

// Allocate for stage `su` (counted as MEM_ACTIVATIONS, util.h); with share_scratch
// non-NULL the backward scratch is borrowed from it instead of allocated.
void activations_alloc(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                       const Activations *share_scratch);
void activations_free(Activations *a);
// A slot of a pool shared by several stages (the pipeline's chunks): an arena of
// `bytes`, at least activations_bytes of every stage it will hold, shaped for su;
// activations_reshape carves it again for another stage (the RoPE tables and
// positions stay; nothing else is kept), re-pointing the shared scratch.
void activations_alloc_pool(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                            const Activations *share_scratch, size_t bytes);
void activations_reshape(Activations *a, const LlamaModel *m, StageUnits su, const Activations *share_scratch);
// Bytes of the arena activations_alloc allocates (every buffer of the struct but the
// position tables; with_scratch: the slot that owns the shared backward scratch).
size_t activations_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch);
// Everything activations_alloc allocates: the arena (activations_bytes) and the
// token-position tables.
size_t activations_alloc_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch);

// The weight-gradient stash of stage `su` (model/activations.h: what a split
// backward's input half keeps for its weight half): its bytes, its allocation
// (MEM_ACTIVATIONS) and release.
size_t wstash_bytes(const LlamaModel *m, StageUnits su, int B, int S);
// One layer's slot of the stash's dgu and dqkv for N tokens, in floats: the
// gradient in fp32, or in bf16 (m->mlp_bf16, m->qkv_bf16), rounded up to 16 floats
// so that every slot starts 64-byte aligned as the scratch it stands in for does.
// Floats of one layer's q|k|v (N, QKV) and attention output (N, A) slots: N x QKV
// and N x A, or their bf16 halves under m->att_bf16, rounded up to 16 floats.
size_t activations_qkv_slot(const LlamaModel *m, size_t N);
size_t activations_attn_slot(const LlamaModel *m, size_t N);
// A layer's kept bf16 norm output (Nr, D) and SwiGLU output (N, Fl) in floats
// (LlamaModel.inputs16_kept; rounded up as the slots above).
size_t activations_norm16_slot(const LlamaModel *m, size_t Nr);
size_t activations_h16_slot(const LlamaModel *m, size_t N);
size_t wstash_dgu_slot(const LlamaModel *m, size_t N);
size_t wstash_dqkv_slot(const LlamaModel *m, size_t N);
// A layer's d_down and d_o in the stash, in floats: (Nr, D) fp32, or the bf16 halves
// rounded up as the slots above where the products read it as bf16 (dres16_mlp,
// dres16_o).
size_t wstash_down_slot(const LlamaModel *m, size_t Nr);
size_t wstash_o_slot(const LlamaModel *m, size_t Nr);
void wstash_alloc(WeightGradStash *st, const LlamaModel *m, StageUnits su, int B, int S);
void wstash_free(WeightGradStash *st);

#endif

// model/param_table.h — the parameter table: where each tensor of the model lives
// in a rank's ONE flat fp32 buffer (docs/DESIGN.md, invariant 2: one flat buffer
// per kind), which slice of the global tensor that is, and its Hugging Face name.
// Gradients and AdamW moments use the same layout in buffers of their own.
// model/llama_build.c fills the table (llama_build); checkpoints, data-parallel
// buckets, ZeRO shards and the memory planner are all computed from it.
//
// Shapes: D hidden, F intermediate (SwiGLU width), H query heads, KV key/value
// heads, hd head dim, V vocabulary, L layers.
// Order inside the buffer (chosen so that fused GEMMs read contiguous weights):
//   model.embed_tokens.weight                       (V, D)
//   per layer l:
//     model.layers.l.input_layernorm.weight         (D)
//     model.layers.l.self_attn.q_proj.weight        (H*hd, D)   \ contiguous: one
//     model.layers.l.self_attn.k_proj.weight        (KV*hd, D)   > fused qkv GEMM
//     model.layers.l.self_attn.v_proj.weight        (KV*hd, D)  /  ((H+2KV)*hd, D)
//     model.layers.l.self_attn.o_proj.weight        (D, H*hd)
//     model.layers.l.post_attention_layernorm.weight (D)
//     model.layers.l.mlp.gate_proj.weight           (F, D)  \ contiguous: one fused
//     model.layers.l.mlp.up_proj.weight             (F, D)  / gate|up GEMM (2F, D)
//     model.layers.l.mlp.down_proj.weight           (D, F)
//   a Mixtral (mixture-of-experts) layer has, in place of the three mlp tensors:
//     model.layers.l.block_sparse_moe.gate.weight   (E, D)  the router
//     shared experts (n_shared_experts > 0): ...shared_experts.gate_proj/up_proj/down_proj
//     per expert e, contiguous (one fused w1|w3 GEMM):
//       model.layers.l.block_sparse_moe.experts.e.w1.weight  (F, D)  gate
//       model.layers.l.block_sparse_moe.experts.e.w3.weight  (F, D)  up
//       model.layers.l.block_sparse_moe.experts.e.w2.weight  (D, F)  down
//   model.norm.weight                               (D)
//   lm_head.weight                                  (V, D)   only if not tied
// With tensor parallelism a rank holds a slice of each matrix (SplitKind), so the
// shapes above are global and its buffer holds the local slices, in the same order.
// A mixture-of-experts layer lists its router and shared experts before its experts,
// and with expert parallelism (parallel.ep) a rank holds E/ep of the experts: the
// others stay in the table with their global shape and nothing held (local_shape[0]
// 0, numel 0), so every rank's table names every tensor in the same order.
#ifndef FEMTOTRON_PARAM_TABLE_H
#define FEMTOTRON_PARAM_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define PARAM_NAME_MAX 96

// How tensor parallelism cuts a tensor (Megatron-LM): column-parallel layers
// (q, k, v, gate, up) and the vocab-parallel embedding and head split the rows of
// the (out, in) weight, row-parallel layers (o, down) split the columns, and the
// norm weights are replicated on every tensor-parallel rank.
typedef enum { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS } SplitKind;

// One tensor of the flat buffer: the slice this rank holds of a global tensor.
typedef struct {
    char name[PARAM_NAME_MAX];  // Hugging Face name
    int ndim;                   // 1 or 2
    int64_t shape[2];           // global shape (shape[1] = 1 when ndim == 1)
    int64_t local_shape[2];     // shape of the slice held here (vocab padding included)
    SplitKind split;
    int64_t start;              // first global row (SPLIT_ROWS) or column (SPLIT_COLS) held
    int64_t valid;              // rows/columns of the slice that exist globally (the rest of a
                                // vocab slice is padding: never trained, never saved)
    int replica_writer;         // 1 where this rank writes the tensor (replicated: tp rank 0 only)
    size_t offset;              // first element in the flat buffer
    size_t numel;               // elements held by this rank (local_shape product)
    int weight_decay;           // 1 for matrices (ndim >= 2), 0 for norm weights
    int expert;                 // 1 for a mixture-of-experts expert's tensor (w1, w3, w2)
} ParamInfo;

// Global element index (row-major in the global shape) of local element e of p,
// or -1 when e is vocab padding.
int64_t param_global_index(const ParamInfo *p, size_t e);

// Offsets (in elements) of one decoder layer's tensors in the flat buffer.
typedef struct {
    size_t ln1, qkv, o, ln2, gate_up, down;  // q/k/v and gate/up are fused views
    size_t router, experts;                  // mixture of experts: gate (E, D), the experts' block
} LayerOffsets;

#endif

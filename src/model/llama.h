// model/llama.h — the Llama parameter table and one stage's forward/backward.
//
// DESIGN.md invariant 2: all parameters of a rank live in ONE flat fp32 buffer,
// gradients in another with the same layout, AdamW moments in two more. The
// table below maps each piece of that buffer to its Hugging Face name and shape.
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
//   model.norm.weight                               (D)
//   lm_head.weight                                  (V, D)   only if not tied
#ifndef FEMTOTRON_LLAMA_H
#define FEMTOTRON_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define PARAM_NAME_MAX 96

// One tensor of the flat buffer.
typedef struct {
    char name[PARAM_NAME_MAX];  // Hugging Face name
    int ndim;                   // 1 or 2
    int64_t shape[2];           // global shape (shape[1] = 1 when ndim == 1)
    size_t offset;              // first element in the flat buffer
    size_t numel;               // elements held by this rank
    int weight_decay;           // 1 for matrices (ndim >= 2), 0 for norm weights
} ParamInfo;

// Offsets (in elements) of one decoder layer's tensors in the flat buffer.
typedef struct {
    size_t ln1, qkv, o, ln2, gate_up, down;  // q/k/v and gate/up are fused views
} LayerOffsets;

// A unit is the granule in which parameters are gathered (ZeRO-3) and gradients
// are handed over (data-parallel buckets): unit 0 = the embedding, unit 1 + l =
// decoder layer l, unit L + 1 = the final norm and (untied) the output head. Units
// are contiguous in the flat buffer: unit u covers [unit_lo[u], unit_lo[u + 1]).
typedef struct {
    ModelConfig cfg;
    int n_units;                 // L + 2
    size_t *unit_lo;             // (n_units + 1)
    int D, F, L, H, KV, hd, V;   // shorthands from cfg (F = intermediate, hd = D / H)
    int n_params;
    ParamInfo *params;           // (n_params)
    size_t num_elements;         // total elements of the flat buffer
    size_t embed, final_norm, head;  // offsets; head == embed when tied
    LayerOffsets *layer;         // (L)
} LlamaModel;

// Build the table from a model config (no weights allocated).
void llama_build(LlamaModel *m, const ModelConfig *cfg);
void llama_free(LlamaModel *m);

// Find a tensor by Hugging Face name; NULL when absent.
const ParamInfo *llama_find(const LlamaModel *m, const char *name);

// Matmul parameters (everything multiplied in a GEMM: q,k,v,o,gate,up,down, head;
// the embedding lookup is not a matmul unless tied, where it is the head).
size_t llama_matmul_params(const LlamaModel *m);
// Model FLOPs per token for training: 6*N_matmul + 6*L*S*D (causal attention,
// QK^T and PV each counted once over the causal half: 2*(2*S*D)/2 per token
// forward, x3 for forward+backward).
double llama_flops_per_token(const LlamaModel *m, int seq_length);

// Activations of one micro-batch of B sequences of S tokens: every buffer the
// backward needs, planned once (DESIGN.md invariant 3).
typedef struct {
    int B, S;
    float *arena;            // one allocation holding every buffer below
    float *cos_t, *sin_t;    // (S, hd/2) RoPE tables
    float *resid;            // (L+1, N, D) residual stream entering each layer / final
    float *ln1, *ln1_rstd;   // (L, N, D), (L, N)
    float *qkv;              // (L, N, (H+2KV)*hd) after RoPE
    float *probs;            // (L, B, H, S, S)
    float *attn;             // (L, N, H*hd) attention output (o_proj input)
    float *resid_mid;        // (L, N, D) residual after attention
    float *ln2, *ln2_rstd;   // (L, N, D), (L, N)
    float *gu;               // (L, N, 2F) gate|up pre-activations
    float *mlp_h;            // (L, N, F) silu(gate)*up (down_proj input)
    float *lnf, *lnf_rstd;   // (N, D), (N)
    float *logits;           // (N, V) logits, then dlogits in place
    // backward scratch
    float *dresid;           // (N, D) gradient of the residual stream
    float *dbuf_d;           // (N, D)
    float *dqkv;             // (N, (H+2KV)*hd)
    float *dattn_scratch;    // (B, H, S, S)
    float *dgu;              // (N, 2F)
    float *dbuf_i;           // (N, F)
    size_t bytes;            // total bytes of everything above
} Activations;

void activations_alloc(Activations *a, const LlamaModel *m, int B, int S, double rope_theta);
void activations_free(Activations *a);
// Bytes activations_alloc would allocate (for the memory report and planner).
size_t activations_bytes(const LlamaModel *m, int B, int S);

// How the model reaches its weights and gradients, unit by unit. The data-parallel
// engine implements it (parallel/data_parallel.c): with whole buffers it returns
// pointers into them; under ZeRO-3 it gathers a unit's parameters on acquire and
// frees them on release; under ZeRO-2 it hands out gradient windows and starts
// reducing a bucket as soon as grads_done has been called for all its units.
// Pointers returned for unit u address element unit_lo[u] of the flat order.
typedef struct {
    void *ctx;
    const float *(*acquire_params)(void *ctx, int unit);
    void (*release_params)(void *ctx, int unit);
    float *(*grads)(void *ctx, int unit);     // where unit u's gradients accumulate
    void (*grads_done)(void *ctx, int unit);  // unit u's gradients of this micro-batch are final
} ParamAccess;

// Forward of a micro-batch: tokens(B*S) -> logits; with targets, returns the SUM of
// the cross-entropy over the B*S tokens and leaves dlogits * grad_scale in
// a->logits (ready for llama_backward).
double llama_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                     const int32_t *tokens, const int32_t *targets, float grad_scale);
// Loss only (no dlogits): the SUM of the cross-entropy over B*S tokens.
double llama_forward_loss(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                          const int32_t *tokens, const int32_t *targets);
// Backward of the micro-batch last passed to llama_forward: grads += dL/dparams.
void llama_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                    const int32_t *tokens);

// ParamAccess over whole buffers (one rank holding everything): grads may be NULL
// for forward-only use. The struct it fills must outlive its use.
typedef struct {
    const float *params;
    float *grads;
    const LlamaModel *model;
} WholeBuffers;
ParamAccess param_access_whole(WholeBuffers *wb);

#endif

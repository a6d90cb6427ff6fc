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
} ParamInfo;

// Global element index (row-major in the global shape) of local element e of p,
// or -1 when e is vocab padding.
int64_t param_global_index(const ParamInfo *p, size_t e);

// Offsets (in elements) of one decoder layer's tensors in the flat buffer.
typedef struct {
    size_t ln1, qkv, o, ln2, gate_up, down;  // q/k/v and gate/up are fused views
} LayerOffsets;

// Activation recomputation (training.recompute): what a layer keeps for backward.
//   RECOMPUTE_NONE      every buffer its backward reads
//   RECOMPUTE_SELECTIVE the linear layers' inputs and q/k/v; the attention core
//                       (scores, softmax, probabilities x values) is redone in backward
//   RECOMPUTE_FULL      only the layer input; the whole layer is redone in backward
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;
// Parse "none" / "selective" / "full" (validated by config_validate).
Recompute recompute_from_name(const char *name);

// A unit is the granule in which parameters are gathered (ZeRO-3) and gradients
// are handed over (data-parallel buckets): unit 0 = the embedding, unit 1 + l =
// decoder layer l, unit L + 1 = the final norm and (untied) the output head. Units
// are contiguous in the flat buffer: unit u covers [unit_lo[u], unit_lo[u + 1]).
typedef struct {
    ModelConfig cfg;
    int n_units;                 // L + 2
    size_t *unit_lo;             // (n_units + 1)
    int D, F, L, H, KV, hd, V;   // shorthands from cfg (F = intermediate, hd = D / H)
    // Tensor parallelism: this rank holds heads, FFN columns and a vocab slice.
    int tp, tp_rank;             // group size and this rank's index (1, 0 without TP)
    int sp;                      // sequence parallel: norms and residual on token shards
    int Hl, KVl, Fl, Vl;         // local query heads, kv heads, FFN width, vocab rows (padded)
    int v0, v_valid;             // first global vocab id of the slice, real (unpadded) rows
    int cp, cp_rank;             // context parallelism: this rank holds 1/cp of each sequence
    Recompute recompute;         // activation recomputation (RECOMPUTE_NONE after llama_build)
    int n_params;
    ParamInfo *params;           // (n_params)
    size_t num_elements;         // total elements of the flat buffer
    size_t embed, final_norm, head;  // offsets; head == embed when tied
    LayerOffsets *layer;         // (L)
} LlamaModel;

// Build the table from a model config (no weights allocated), for one rank.
void llama_build(LlamaModel *m, const ModelConfig *cfg);
// The same for tensor-parallel rank tp_rank of tp (sp: sequence parallel).
void llama_build_tp(LlamaModel *m, const ModelConfig *cfg, int tp, int tp_rank, int sp);
void llama_free(LlamaModel *m);

// Find a tensor by Hugging Face name; NULL when absent.
const ParamInfo *llama_find(const LlamaModel *m, const char *name);

// Parameters of the whole model (global shapes), whatever this rank holds.
size_t llama_global_params(const LlamaModel *m);

// Matmul parameters (everything multiplied in a GEMM: q,k,v,o,gate,up,down, head;
// the embedding lookup is not a matmul unless tied, where it is the head).
size_t llama_matmul_params(const LlamaModel *m);
// Model FLOPs per token for training: 6*N_matmul + 6*L*S*D (causal attention,
// QK^T and PV each counted once over the causal half: 2*(2*S*D)/2 per token
// forward, x3 for forward+backward).
double llama_flops_per_token(const LlamaModel *m, int seq_length);

// The units one pipeline stage runs, [u0, u1]: 0 is the embedding, 1 + l layer l,
// L + 1 the final norm and head. A single rank runs them all.
typedef struct {
    int u0, u1;
} StageUnits;
StageUnits llama_all_units(const LlamaModel *m);

// Activations of one micro-batch of B sequences of S tokens on one stage: every
// buffer its backward needs, planned once (DESIGN.md invariant 3). `nl` = layers
// of the stage; layer slots are local (slot i = layer l0 + i). Several in-flight
// micro-batches (pipeline schedules) each get their own saved buffers and share
// one set of backward scratch buffers. Shapes are per rank: with tensor
// parallelism Hl = H/tp heads, Fl = F/tp, Vl vocab rows; Nr = N/tp rows of the
// residual stream with sequence parallel (else N = B*S). With context parallelism
// S is this rank's share of each sequence (seq_length / cp, two zigzag chunks).
// Recomputation (LlamaModel.recompute) sets what is kept per layer (slots nl):
//   none       every layer buffer below, nk = nlse = nl
//   selective  all but lse (nlse = 1): one layer's lse in the shared scratch, rebuilt
//              by re-running the layer's attention in its backward
//   full       only resid (nk = nlse = 1): ln1 .. mlp_h are ONE layer's working set in
//              the shared scratch, rebuilt by re-running the layer forward in its backward
// Buffers with a single slot belong to the scratch: the micro-batches share them.
typedef struct {
    int B, S;
    int l0, nl;              // first layer and number of layers of the stage
    int has_embed, has_head; // first / last stage
    float *arena;            // one allocation holding every buffer this struct owns
    float *cos_t, *sin_t;    // (S, hd/2) RoPE tables
    float *resid;            // (nl+1, Nr, D) residual stream entering each layer; slot nl = output
    float *ln1, *ln1_rstd;   // (nk, Nr, D), (nk, Nr)
    float *qkv;              // (nk, N, (Hl+2KVl)*hd) after RoPE
    float *lse;              // (nlse, B, Hl, S) log-sum-exp of each attention row
    float *attn;             // (nk, N, Hl*hd) attention output (o_proj input)
    float *resid_mid;        // (nk, Nr, D) residual after attention
    float *ln2, *ln2_rstd;   // (nk, Nr, D), (nk, Nr)
    float *gu;               // (nk, N, 2Fl) gate|up pre-activations
    float *mlp_h;            // (nk, N, Fl) silu(gate)*up (down_proj input)
    float *lnf, *lnf_rstd;   // (Nr, D), (Nr)  last stage only
    float *logits;           // (N, Vl) logits, then dlogits in place; last stage only
    // backward scratch (shared between in-flight micro-batches)
    float *dresid;           // (Nr, D) gradient of the residual stream
    float *dbuf_d;           // (Nr, D)
    float *dqkv;             // (N, (Hl+2KVl)*hd)
    float *att_m, *att_l;    // (B, Hl, S) running max and sum of the online softmax
    float *att_rowdot;       // (B, Hl, S) sum(dout * out) per attention row
    float *att_scratch;      // (attention_scratch_floats) per-thread tiles
    float *ring;             // cp > 1: (2, B*S, 4*KVl*hd) ring blocks + (2, B*S, 2*KVl*hd) homing
    int *pos;                // (S) global position of each local token
    int *pos_of;             // (cp, S) positions of every cp rank's tokens
    float *dgu;              // (N, 2Fl)
    float *dbuf_i;           // (N, Fl)
    // tensor-parallel scratch (tp > 1 only)
    float *tp_full;          // (N, D) a gathered activation
    float *tp_partial;       // (N, D) a partial sum before its reduction
    float *tp_stats;         // (3N) vocab-parallel loss statistics
    float *tp_dw;            // (D) a norm weight's gradient contribution (sequence parallel)
    size_t bytes;            // bytes this struct allocated
} Activations;

// Allocate for stage `su`; with share_scratch non-NULL the scratch buffers are
// borrowed from it instead of allocated.
void activations_alloc(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                       double rope_theta, const Activations *share_scratch);
void activations_free(Activations *a);
// Bytes of the arena activations_alloc allocates (every buffer of the struct but the
// position tables; with_scratch: the slot that owns the shared backward scratch).
size_t activations_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch);
// Everything activations_alloc allocates (counted as MEM_ACTIVATIONS, util.h): the
// arena (activations_bytes) and the token-position tables.
size_t activations_alloc_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch);

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

// Forward of one stage for a micro-batch. The first stage reads tokens(B*S), the
// others x_in(B*S, D) (the previous stage's output). A middle stage leaves its
// output in a->resid slot nl (llama_stage_output). The last stage computes the
// logits; with want_grads it returns the SUM of the cross-entropy over the B*S
// tokens and leaves dlogits * grad_scale in a->logits for the backward; without,
// it returns the same sum and leaves the logits untouched (validation).
double llama_stage_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                           const int32_t *tokens, const float *x_in, const int32_t *targets,
                           float grad_scale, int want_grads);
// (N, D) output of a non-last stage after llama_stage_forward.
float *llama_stage_output(const LlamaModel *m, Activations *a);
// Backward of the micro-batch whose forward filled `a`: grads += dL/dparams. The
// last stage starts from its dlogits, the others from dx_out(B*S, D). Returns the
// gradient w.r.t. the stage input (B*S, D) for a non-first stage (valid until the
// next backward), NULL on the first stage.
const float *llama_stage_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                  const int32_t *tokens, const float *dx_out);

// ParamAccess over whole buffers (one rank holding everything): grads may be NULL
// for forward-only use. The struct it fills must outlive its use.
typedef struct {
    const float *params;
    float *grads;
    const LlamaModel *model;
} WholeBuffers;
ParamAccess param_access_whole(WholeBuffers *wb);

#endif

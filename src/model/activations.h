// model/activations.h — the buffers one micro-batch's forward writes on one stage
// for its backward, and the backward's scratch. model/activation_plan.c sizes and
// allocates them (once, before step 1); model/llama.c's forward writes them and its
// backward reads them.
// Shapes (the legend of model/llama.h): B sequences, S this rank's tokens of each,
// N = B*S, Nr residual rows held here, D hidden, Hl/KVl local query/kv heads, hd
// head dim, A = Hl*hd, Fl local FFN width, Vl local vocab rows, nl layers of the
// stage, nk/nlse the layer slots kept (below).
//
// Layer slots are local to the stage (slot i = layer l0 + i). Several in-flight
// micro-batches (pipeline schedules) each get their own saved buffers and share one
// set of backward scratch buffers. Shapes are per rank: with tensor parallelism
// Hl = H/tp heads, Fl = F/tp, Vl vocab rows, Nr = N/tp rows of the residual stream
// with sequence parallel (else N); with context parallelism S is this rank's share
// of each sequence (seq_length / cp, two zigzag chunks).
// Recomputation (LlamaModel.recompute) sets how many layer slots are kept:
//   none       every layer buffer below, nk = nlse = nl, the residual stream once
//              (nres = 1: updated in place, no layer's backward reads it)
//   selective  all but lse (nlse = 1): one layer's lse in the shared scratch, rebuilt
//              by re-running the layer's attention in its backward
//   full       only resid, per layer (nres = nl + 1; nk = nlse = 1): ln1 .. mlp_h are
//              ONE layer's working set in the shared scratch, rebuilt by re-running
//              the layer forward in its backward
// A norm keeps one (Nr, D) tensor: its normalized input xhat = x * rstd, from which
// its backward computes (ops.h: rmsnorm_backward) and the product after it gets its
// input w * xhat again (rmsnorm_rebuild, into `normed`); neither the norm's input
// nor its output is kept. The residual after attention is a forward working buffer.
// Buffers with a single slot belong to the scratch: the micro-batches share them.
#ifndef FEMTOTRON_ACTIVATIONS_H
#define FEMTOTRON_ACTIVATIONS_H

#include "model/llama.h"
#include "model/moe.h"

typedef struct Activations {
    int B, S;
    int l0, nl;              // first layer and number of layers of the stage
    int has_embed, has_head; // first / last stage
    float *arena;            // one allocation holding every buffer this struct owns
    float *cos_t, *sin_t;    // (S, hd/2) RoPE tables
    float *resid;            // (nres, Nr, D) residual stream: full recomputation: entering each
                             // layer, slot nl the output; else one slot, in place (the stage
                             // input, then each layer's output, the stage output at the end)
    float *ln1, *ln1_rstd;   // (nk, Nr, D), (nk, Nr) first norm's xhat and rstd
    float *qkv;              // (nk, N, (Hl+2KVl)*hd) after RoPE
    float *lse;              // (nlse, B, Hl, S) log-sum-exp of each attention row
    float *attn;             // (nk, N, A) attention output (o_proj input)
    float *ln2, *ln2_rstd;   // (nk, Nr, D), (nk, Nr) second norm's xhat and rstd
    float *gu;               // (nk, N, 2Fl) gate|up pre-activations
    float *mlp_h;            // (nk, N, Fl) silu(gate)*up (down_proj input)
    uint16_t *gu16;          // (nk, N, 2Fl) bf16 runs of a dense model (LlamaModel.mlp_bf16), in
                             // place of gu and mlp_h (both NULL): gate|up kept as bf16 (ops.h:
                             // round_to_bf16), a quarter of the bytes the two fp32 buffers take.
                             // The forward writes gate|up as bf16 from its product (ops.h:
                             // matmul_forward_bf16; the scratch dgu where a backend rounds
                             // after) and the SwiGLU output from the kept values, as bf16 into
                             // dgu (model/llama_layer.h: mlp_h16), down_proj's bf16 input; the
                             // backward rebuilds that output the same way, bit for bit, before
                             // the down projection's weight gradient needs it
    float *ln1_16, *ln2_16;  // (nk, Nr, D) bf16 halves each (LlamaModel.inputs16_kept, else NULL):
                             // the norms' outputs, q|k|v's and gate|up's inputs, as written
    float *h16;              // (nk, N, Fl) bf16 halves (inputs16_kept): the SwiGLU output, down's input
    float *lnf, *lnf_rstd;   // (Nr, D), (Nr)  last stage only: the final norm's output, rstd
    float *lnf_xhat;         // (Nr, D) last stage only: the final norm's xhat
    float *logits;           // (N, Vl) logits, then dlogits in place; last stage only
    int dlogits16;           // 1: the forward left dlogits as bf16 in place, rows CE_LD16(Vl)
                             // apart (bf16 products: ops.h, cross_entropy_forward_backward_bf16)
    // scratch (shared between in-flight micro-batches)
    float *resid_mid;        // (Nr, D) forward: the residual after attention
    float *normed;           // (Nr, D) a norm's output w * xhat (forward, rebuilt in backward);
                             // under bf16 activations as bf16 (Nr, D halves) where the product
                             // after it reads bf16 (LlamaModel.qkv_bf16, mlp_bf16), and the
                             // room to widen it in place for a backend that must
    float *dresid;           // (Nr, D) gradient of the residual stream
    float *dbuf_d;           // (Nr, D) a block's input gradient before the residual add
    float *dqkv;             // (N, (Hl+2KVl)*hd)
    float *att_m, *att_l;    // (B, Hl, S) running max and sum of the online softmax
    float *att_rowdot;       // (B, Hl, S) sum(dout * out) per attention row
    float *att_scratch;      // (attention_scratch_floats) per-thread tiles
    float *ring;             // (cp_ring_floats) cp > 1: ring blocks + homing messages
    int *pos;                // (S) global position of each local token
    int *pos_of;             // (cp, S) positions of every cp rank's tokens
    float *dgu;              // (N, 2Fl)
    float *dbuf_i;           // (N, max(Fl, A)): the gradient entering SwiGLU (N, Fl), or
                             // under bf16 activations gate|up's in bf16 (N, 2Fl halves),
                             // then the attention output's (N, A), then under bf16
                             // activations q|k|v's in bf16 (N, QKV halves: the plan makes
                             // room for it, model/activation_plan.c)
    // tensor-parallel scratch (tp > 1 only)
    float *tp_full;          // (N, D) a gathered activation
    float *tp_partial;       // (N, D) a partial sum before its reduction
    float *tp_stats;         // (3N) vocab-parallel loss statistics
    float *tp_dw;            // (D) a norm weight's gradient contribution (sequence parallel)
    // mixture of experts (E > 0; model/moe.h), in place of gu, mlp_h and dgu:
    float *moe;              // (nk, moe_saved_floats) each layer slot's routing and expert rows
    float *moe_scr;          // (moe_scratch_floats) backward scratch, shared
    float *moe_stats;        // (4, B, E) load-balancing loss: counts, probability sums over the
                             // layers so far, the loss's gradient per probability (moe_aux), and
                             // that gradient's copy being sent to the previous pipeline stage
    double moe_aux;          // sum over the B sequences of their load-balancing loss (last forward)
    double moe_ep_s;         // seconds in expert-parallel dispatch and combine since the engine reset it
    size_t bytes;            // bytes of the arena
} Activations;

// What the input-gradient half of a split backward keeps for the weight-gradient
// half (zero-bubble pipeline schedules, model/llama.h: llama_stage_backward_input
// and _weight). A linear layer's weight gradient is dout^T @ x and a norm weight's
// sum(dout * x * rstd): x and rstd are the forward's saved activations, still held
// (the activation slot stays busy until the weight half), so only the gradients
// of the layers' outputs are new. dgu and dqkv have the shapes of gu and qkv, which
// only the input half reads: they take the layer's own gu and qkv slots, and are
// planned here (NULL otherwise) only under full recomputation, where gu and qkv are
// the shared working layer. Per layer slot i (shapes of model/llama.h):
typedef struct WeightGradStash {
    float *arena;            // one allocation holding every buffer below
    float *d_down;           // (nl, Nr, D) gradient of the layer output = of down_proj's output
    float *dgu;              // (nl, N, 2Fl) gradient of gate|up's output (full recomputation;
                             // always under bf16 activations, as bf16), wstash_dgu_slot apart
    float *d_ln2;            // (nl, Nr, D) gradient of the second norm's output
    float *d_o;              // (nl, Nr, D) gradient of o_proj's output
    float *dqkv;             // (nl, N, (Hl+2KVl)*hd) gradient of q|k|v's output, RoPE undone (full;
                             // as bf16 under bf16 activations), wstash_dqkv_slot apart
    float *d_ln1;            // (nl, Nr, D) gradient of the first norm's output
    float *norm_w;           // (nl, 2, D) the layer's two norm weights, copied by the input half:
                             // the weight half rebuilds the products' inputs w * xhat from them
                             // without acquiring the layer again
    float *d_lnf;            // (Nr, D) last stage: gradient of the final norm's output
    float *d_embed;          // (Nr, D) first stage: gradient of the embedding's output
    size_t bytes;            // bytes of the arena
} WeightGradStash;

// The buffers layer slot i's backward reads, written by its forward: the layer's own
// slots, or the one working layer in the shared scratch for what recomputation
// drops. x and out are one buffer (the stream, in place) unless under full
// recomputation, which keeps every layer's input.
typedef struct {
    float *x;                 // (Nr, D) layer input
    float *ln1, *ln1_rstd;    // (Nr, D), (Nr) xhat and rstd
    float *qkv;               // (N, (Hl+2KVl)*hd) local heads, after RoPE
    float *lse;               // (B, Hl, S)
    float *attn;              // (N, A)
    float *mid;               // (Nr, D) residual after attention (scratch: forward only)
    float *ln2, *ln2_rstd;    // (Nr, D), (Nr) xhat and rstd
    float *gu;                // (N, 2Fl)   NULL under LlamaModel.mlp_bf16
    float *h;                 // (N, Fl)    NULL under LlamaModel.mlp_bf16
    uint16_t *gu16;           // (N, 2Fl) bf16, under LlamaModel.mlp_bf16 (else NULL)
    uint16_t *ln1_16, *ln2_16;  // (Nr, D) bf16 each, under LlamaModel.inputs16_kept (else NULL)
    uint16_t *h16;            // (N, Fl) bf16, under LlamaModel.inputs16_kept (else NULL)
    float *out;               // (Nr, D) layer output (the next layer's input)
} LayerSaved;

// Layer slot i's buffers in a.
LayerSaved layer_saved(const LlamaModel *m, const Activations *a, int i);

// The mixture-of-experts block's shape for a's micro-batch, layer slot i's saved
// routing and expert rows, and the shared scratch (model/moe.h).
MoeDims activations_moe_dims(const LlamaModel *m, const Activations *a);
MoeSaved activations_moe_saved(const LlamaModel *m, const Activations *a, int i);
MoeScratch activations_moe_scratch(const LlamaModel *m, Activations *a);  // times into a->moe_ep_s

// The ring attention view of a's attention buffers (parallel_layers/context_parallel.h).
RingAttention activations_ring(const LlamaModel *m, const Activations *a);

#endif

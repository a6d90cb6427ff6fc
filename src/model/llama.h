// model/llama.h — the Llama model of one rank: its shard of the parameters and the
// forward and backward of one pipeline stage.
//
// Shape legend (every header of model/ uses these letters):
//   B   sequences in a micro-batch          S   this rank's tokens of each sequence
//                                               (seq_length, or seq_length / cp)
//   N   tokens of the micro-batch (B*S)     Nr  rows of the residual stream held here
//                                               (N / tp with sequence parallel, else N)
//   D   hidden size                         F   intermediate (SwiGLU) width
//   H   query heads                         KV  key/value heads
//   hd  head dim (model.head_dim, D / H)    V   vocabulary
//   L   decoder layers                      A   attention output width here (Hl*hd)
//   Hl, KVl, Fl, Vl  this rank's share of H, KV, F and V (tensor parallelism; Vl padded)
//   E, K  experts per layer and experts per token (mixture of experts, model/moe.h)
//
// A model is built for one shard (ModelShard: its tensor- and context-parallel
// coordinates and its recomputation mode) and never patched afterwards. It holds no
// weights: the engines own the flat buffers and hand them in through ParamAccess
// (model/param_access.h); activations live in Activations (model/activations.h),
// planned by model/activation_plan.h. The tensor- and context-parallel pieces the
// layers are built from come from parallel_layers/; the kernels from ops/ops.h.
#ifndef FEMTOTRON_LLAMA_H
#define FEMTOTRON_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dist/grid.h"
#include "model/param_table.h"
#include "ops/ops.h"
#include "parallel_layers/context_parallel.h"
#include "parallel_layers/expert_parallel.h"
#include "parallel_layers/tensor_parallel.h"

// Which shard of the model a rank builds: everything the model needs to know about
// the layout, given at construction.
typedef struct {
    TensorParallel tp;    // heads, FFN columns and vocabulary rows held; sequence parallel
    ContextParallel cp;   // this rank's share of every sequence
    Recompute recompute;  // what a layer keeps for its backward (config.h)
    ExpertParallel ep;    // mixture of experts: the experts this rank computes (model/moe.h)
    int bf16_acts;        // 1: bf16 activations (training.precision = bf16): the dense MLP
                          // keeps gate|up in bf16 and rebuilds the SwiGLU output, and the
                          // gate|up and q|k|v gradients are bf16 (below)
    int att_bf16;         // 1: q|k|v and the attention output kept as bf16 (LlamaModel.att_bf16;
                          // bf16_acts with training.attention = cudnn)
    int keep16;           // 1 (training.keep_bf16_inputs): with bf16_acts and bf16 products, not
                          // under full recomputation, a dense layer keeps its products' bf16
                          // inputs made outside a product (LlamaModel.inputs16_kept)
    int products16;       // 1: the ops' products are bf16 (training.precision = bf16: ops.h,
                          // ops_set_matmul_bf16; a unit test sets both), with bf16_acts: the
                          // residual stream's gradient reaches the down and o products as bf16
                          // (LlamaModel.dres16_mlp, dres16_o)
} ModelShard;

// One rank holding the whole model, no recomputation (generation, tests).
ModelShard model_whole(void);
// Tensor-parallel rank `rank` of `size` (sp: sequence parallel), nothing else split.
ModelShard model_tp_shard(int size, int rank, int sp);
// The shard of the rank at grid coordinates `at` of the run cfg.
ModelShard model_shard_of(const Config *cfg, GridCoords at);

// Units (model/param_access.h): 0 = embedding, 1 + l = layer l, L + 1 = final norm
// and (untied) head. Units are contiguous in the flat buffer.
typedef struct {
    ModelConfig cfg;
    int D, F, L, H, KV, hd, V;   // global shapes (hd: model_head_dim)
    double *rope_freq;           // (hd/2) RoPE inverse frequencies, scaling applied (model/rope.h)
    // The shard (ModelShard), fixed at llama_build:
    TensorParallel tp;
    ContextParallel cp;
    Recompute recompute;
    VocabShard vocab;            // this rank's rows of the embedding and of the head
    int Hl, KVl, Fl, Vl;         // local query heads, kv heads, FFN width, vocab rows (padded)
    int E, K;                    // mixture of experts (model/moe.h): experts, experts per token; E = 0: dense
    int Fs, Fsl;                 // shared experts' width (n_shared_experts * F; 0: none) and its tp share
    int moe_aux;                 // 1: the load-balancing loss is part of the training loss
    ExpertParallel ep;           // expert parallelism (parallel_layers/expert_parallel.h)
    int mlp_bf16;                // 1 (a dense model with ModelShard.bf16_acts): each layer keeps
                                 // its gate|up pre-activations as bf16 (Activations.gu16) and
                                 // not the SwiGLU output, which its backward rebuilds
                                 // (model/activations.h)
    int qkv_bf16;                // 1 (ModelShard.bf16_acts): q|k|v's input (the first norm's
                                 // output) and output gradient are written as bf16 by the norm
                                 // and RoPE's backward and read as they are by the q|k|v
                                 // products (ops.h: rmsnorm_forward_to_bf16,
                                 // rope_backward_to_bf16); mlp_bf16 does the same for gate|up
    int att_bf16;                // 1 (ModelShard.att_bf16, with qkv_bf16; cp 1): the attention's
                                 // q|k|v and output are kept as bf16 in their fp32 slots (the
                                 // q|k|v product writes bf16, RoPE rotates it in place, cuDNN
                                 // reads it and writes a bf16 output, which the o product reads
                                 // as it is: ops.h attention_forward_bf16), and cuDNN's bf16 q|k|v
                                 // gradient goes through RoPE's backward as bf16: no fp32 copy of
                                 // either is written or rounded again
    int inputs16_kept;           // 1 (ModelShard.keep16, a dense model with mlp_bf16): each layer
                                 // keeps its two norms' bf16 outputs and its SwiGLU output (bf16),
                                 // the q|k|v, gate|up and down products' inputs, for the backward's
                                 // weight gradients (LayerSaved.ln1_16, ln2_16, h16), which rebuild
                                 // none of them; needs bf16 products, which read them as they are
    int dres16_mlp, dres16_o;    // 1 (ModelShard.products16, with mlp_bf16 / att_bf16): the down
                                 // products / the o product read the residual stream's gradient as
                                 // bf16, written by the norms' backwards (model/llama.c: dres16; the
                                 // split backward's stash holds it so, in half its fp32 room)
    // The parameter table (model/param_table.h):
    int n_params;
    ParamInfo *params;           // (n_params)
    size_t num_elements;         // total elements of the flat buffer
    size_t embed, final_norm, head;  // offsets; head == embed when tied
    LayerOffsets *layer;         // (L)
    int n_units;                 // L + 2
    size_t *unit_lo;             // (n_units + 1) first element of each unit, then the end
} LlamaModel;

// Build the table from a model config for one shard (no weights allocated).
void llama_build(LlamaModel *m, const ModelConfig *cfg, ModelShard shard);
void llama_free(LlamaModel *m);

// Find a tensor by Hugging Face name; NULL when absent.
const ParamInfo *llama_find(const LlamaModel *m, const char *name);

// Parameters of the whole model (global shapes), whatever this rank holds.
size_t llama_global_params(const LlamaModel *m);

// Matmul parameters (everything multiplied in a GEMM: q,k,v,o,gate,up,down, head;
// the embedding lookup is not a matmul unless tied, where it is the head).
size_t llama_matmul_params(const LlamaModel *m);
// A mixture-of-experts layer counts what one token multiplies: the router (E*D) and
// its K experts (3*D*F each) — the active parameters, not all E experts.
// Model FLOPs per token for training: 6*N_matmul + 6*L*S*H*hd (causal attention,
// QK^T and PV each counted once over the causal half: 2*(2*S*H*hd)/2 per token
// forward, x3 for forward+backward; H*hd = D unless model.head_dim says otherwise).
double llama_flops_per_token(const LlamaModel *m, int seq_length);

// Nr: rows of the (N, D) residual stream this rank holds (what a pipeline stage
// sends to the next).
int llama_rows(const LlamaModel *m, int N);

// The widest operands the ops see in a step of B sequences of S tokens here (ops.h:
// OpsBounds, which sizes the CUDA backend's work buffers): whether this rank runs
// the output head (the last pipeline stage), bf16 products or not, and whether
// every weight a product reads lies in the kept bf16 copy (weights_kept; not under
// ZeRO-3, whose gathered weights are rounded per product), and the largest piece of
// the row tables (piece_max, DataParallel's: 0 for whole units), whose boundaries
// decide where the head's products can read the loss's bf16 gradient in place.
OpsBounds llama_op_bounds(const LlamaModel *m, int B, int S, int has_head, int bf16, int weights_kept,
                          size_t piece_max);

// This rank's tokens of B whole sequences of seq_length tokens: full(B, seq_length)
// -> local(B, S) (the zigzag chunks under context parallelism, else a copy).
void llama_local_tokens(const LlamaModel *m, const int32_t *full, int32_t *local, int B,
                        int seq_length);

// The units one pipeline stage runs, [u0, u1]: 0 is the embedding, 1 + l layer l,
// L + 1 the final norm and head. A single rank runs them all.
typedef struct {
    int u0, u1;
} StageUnits;
StageUnits llama_all_units(const LlamaModel *m);

struct Activations;   // model/activations.h
struct WeightGradStash;  // model/activations.h
struct ParamAccess;   // model/param_access.h

// Forward of one stage for a micro-batch. The first stage reads tokens(N), the
// others x_in(Nr, D) (the previous stage's output). A middle stage leaves its
// output in a->resid slot nl (llama_stage_output). The last stage computes the
// logits and ADDS the sum of the cross-entropy over the N tokens to *loss_sum (a
// planned buffer of one double, ops.h: the host reads it once per step, not per
// micro-batch); with want_grads it leaves dlogits * grad_scale in a->logits for
// the backward, without it leaves the logits untouched (validation). It returns
// the part of the loss known on the host: 0, or with the load-balancing loss on
// (m->moe_aux) in a training forward, on context-parallel rank 0,
// router_aux_loss_coef * seq_length * sum over its B sequences of their aux loss
// (so that the trainer's division by the step's tokens makes it the coefficient
// times the mean over sequences), leaving that sum of aux losses in a->moe_aux.
// The micro-batch's loss is the addition to *loss_sum plus the return value.

double llama_stage_forward(const LlamaModel *m, const struct ParamAccess *pa,
                           struct Activations *a, const int32_t *tokens, const float *x_in,
                           const int32_t *targets, float grad_scale, int want_grads,
                           double *loss_sum);
// (Nr, D) output of a non-last stage after llama_stage_forward.
float *llama_stage_output(const LlamaModel *m, struct Activations *a);
// Backward of the micro-batch whose forward filled `a`: grads += dL/dparams. The
// last stage starts from its dlogits, the others from dx_out(Nr, D). Returns the
// gradient w.r.t. the stage input (Nr, D) for a non-first stage (valid until the
// next backward), NULL on the first stage.
const float *llama_stage_backward(const LlamaModel *m, const struct ParamAccess *pa,
                                  struct Activations *a, const int32_t *tokens,
                                  const float *dx_out);

// The same backward split in two (zero-bubble pipeline schedules, Qi et al. 2023):
// B, the input gradients the previous stage waits for, then later W, the weight
// gradients nobody waits for. B takes the same arguments as llama_stage_backward,
// returns the same input gradient and calls no grads/grads_done; it keeps in `st`
// the gradients of every layer's outputs (model/activations.h: WeightGradStash).
// W, run before `a` is reused, accumulates every weight gradient from `st` and the
// activations in `a` and calls grads_done unit by unit, in the order the fused
// backward does. B then W gives the fused backward's gradients bit for bit: each
// half runs the same kernels with the same arguments (parallel_layers/
// tensor_parallel.h: the split pieces). Under full recomputation both halves
// rebuild the layer's working set (W once more: the cost of deferring).
const float *llama_stage_backward_input(const LlamaModel *m, const struct ParamAccess *pa,
                                        struct Activations *a, const float *dx_out,
                                        struct WeightGradStash *st);
void llama_stage_backward_weight(const LlamaModel *m, const struct ParamAccess *pa,
                                 struct Activations *a, const int32_t *tokens,
                                 const struct WeightGradStash *st);

#endif

// model/llama_layer.h — what the two files of a stage's backward share inside
// model/: the attention half of a layer (model/llama_attention.c), the forward of
// one decoder layer (model/llama.c), which full
// recomputation re-runs in the fused backward (llama.c) and in both halves of the
// split one (model/llama_split.c), the address of a tensor inside a unit, and the
// rows of a row table (embedding, head) inside one of its pieces.
#ifndef FEMTOTRON_LLAMA_LAYER_H
#define FEMTOTRON_LLAMA_LAYER_H

#include "model/activations.h"
#include "model/llama.h"

// Address of the tensor at flat offset `off` inside unit u, whose data starts at
// `base` (needs a LlamaModel *m in scope).
#define AT(base, u, off) ((base) + ((off) - m->unit_lo[u]))

struct ParamAccess;

// One layer's weights (or gradient destinations) as the model reaches them: w
// addresses the unit (AT(w, u, off) for any tensor but the experts) and experts the
// block of this rank's experts, which under expert parallelism is a piece of its
// own that the engine may keep apart (model/param_access.h).
typedef struct {
    const float *w;        // unit u from unit_lo[u]
    const float *experts;  // (El experts) this rank's experts, NULL without experts
} LayerWeights;
typedef struct {
    float *g;        // unit u's gradients from unit_lo[u]
    float *experts;  // (El experts) this rank's experts' gradients, NULL without experts
} LayerGrads;
LayerWeights llama_layer_acquire(const LlamaModel *m, const struct ParamAccess *pa, int u);
void llama_layer_release(const LlamaModel *m, const struct ParamAccess *pa, int u);
LayerGrads llama_layer_grads(const LlamaModel *m, const struct ParamAccess *pa, int u);
void llama_layer_grads_done(const LlamaModel *m, const struct ParamAccess *pa, int u);

// Forward of layer slot i with its unit's weights lw. With `recompute` (full
// recomputation, from a backward) it stops once every buffer the backward reads is
// rebuilt, before the layer output, which is kept (and for the last layer of a
// stage may still be on its way to the next stage, so it must not be written).
void llama_layer_forward_with(const LlamaModel *m, Activations *a, LayerWeights lw, int i, int recompute);

// Under bf16 activations (m->mlp_bf16) the SwiGLU output h(N, Fl), down's input,
// lives as bf16 in the first N*Fl halves of the scratch dgu(N, 2Fl) while the
// forward or the down backward reads it (dbuf_i: the room to widen it).
#define mlp_h16(a) ((uint16_t *)(a)->dgu)

// The down projection's backward from the dense MLP's kept SwiGLU input s->gu (or
// s->gu16 under m->mlp_bf16): its weight gradient dw += dout(Nr, D)^T h and, with
// din not NULL, its input gradient din(N, Fl) = dout @ w (w: the down weight; NULL
// when din is), reading h as kept (s->h) or rebuilt (mlp_bf16: as bf16 into
// mlp_h16, bit for bit the forward's; the weight gradient alone, din NULL: the
// fused backward makes the bf16 input gradient itself). din must lie apart from
// dbuf_i. dout16 (not NULL: the weight gradient alone, under LlamaModel.dres16_mlp)
// is dout as bf16, read as it is (the split backward's stash), in dout's place.
void llama_down_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, float *din, float *dw,
                         const float *dout, const uint16_t *dout16, const float *w);

// A norm's output as bf16 (Nr, D), as the product after it read it in the forward,
// for that product's weight gradient: `kept` itself where the layer keeps it
// (LayerSaved.ln1_16, ln2_16 under m->inputs16_kept), else rebuilt from the kept
// xhat with the norm's weight w into a->normed, bit for bit the forward's.
uint16_t *llama_norm16(Activations *a, uint16_t *kept, const float *xhat, const float *w, int Nr, int D);

// The dense MLP's backward (model/llama_mlp.c), a->dresid(Nr, D) its output
// gradient: the down and gate|up weight gradients into g (the unit's, AT(g, u, .);
// w its weights, lo its offsets), gate|up's input gradient into dd(Nr, D)
// (a->normed rebuilt on the way). Under bf16 activations down's input gradient
// comes first, as bf16 (dh16, in dgu's second half; dbuf_i the room for a backend
// that rounds after the product); SwiGLU's backward then reads gate|up once to
// write gate|up's gradient as bf16 into dbuf_i and rebuild down's input h16
// beside it (mlp_h16, bit for bit the forward's), which down's weight gradient
// reads (dh16's room, read by then, is the room to widen it). Both gate|up
// products read the bf16 gradient as it is; dgu, free by then, is the room to
// widen it for a backend that must. dout16 (N, D) (NULL: dresid, gathered, and
// rounded by each product that reads it): under bf16 products the gathered
// output gradient as bf16, which both down products read as it is.
void llama_dense_mlp_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, const float *w, float *g,
                              const LayerOffsets *lo, int u, float *dd, const uint16_t *dout16);

// The attention half of layer unit u (model/llama_attention.c), with its weights w
// (the unit's, AT(w, u, .)): rmsnorm1 of s->x, the q|k|v product, RoPE and the
// attention core into s's buffers, and mid = x + the o product into s->mid (on one
// tensor-parallel rank the add is the product's: in its epilogue on CUDA).
void llama_attention_forward(const LlamaModel *m, Activations *a, const LayerSaved *s, const float *w, int u);
// The o product's backward: dw += dout(Nr, D)^T attn and, with din not NULL, din(N,
// A) = dout @ w (w: the o weight; NULL when din is), reading the kept output s->attn
// as it is stored (bf16 under m->att_bf16; a->dqkv: the room to widen it). Under
// m->att_bf16 din is written as bf16 (N, A) halves, as cuDNN's backward reads it.
// dout16 (not NULL: the weight gradient alone, under LlamaModel.dres16_o) is dout as
// bf16, read as it is (the split backward's stash), in dout's place.
void llama_o_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, float *din, float *dw,
                      const float *dout, const uint16_t *dout16, const float *w);
// The attention core's backward from its output gradient in a->dbuf_i (N, A; bf16
// under m->att_bf16, as llama_o_backward and the split B write it): the
// output and lse rebuilt first under selective recomputation, then the q|k|v
// gradient through RoPE's backward, into dqkv16 (N, QKV) as bf16 under
// m->qkv_bf16 (it may be a->dbuf_i: dout is read first; under att_bf16 it may be
// a->dqkv, where cuDNN writes: then rotated in place), else in a->dqkv in place.
void llama_attention_core_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, uint16_t *dqkv16);

// Rows [*r0, *r1) of a (rows, D) table at flat offset `off` that lie in the flat
// range [lo, hi) of a piece (model/param_access.h: pieces are whole rows).
void llama_piece_rows(const LlamaModel *m, size_t off, int rows, size_t lo, size_t hi, int *r0, int *r1);

// The head's products on the columns [r0, r1) of dlogits, as matmul_backward_ld:
// din(N, D) (+)= dlogits[:, r0:r1] @ w and dw += dlogits[:, r0:r1]^T @ x_full (w,
// dw: the head's rows r0 .. r1-1), dlogits in a->logits as the forward left them
// (fp32, or bf16 under a->dlogits16).
void llama_head_products(const LlamaModel *m, const Activations *a, float *din, float *dw, const float *x_full,
                         const float *w, int r0, int r1, int N, int accumulate_din);

// The embedding's backward (model/llama.c): every token's gradient dout(Nr, D)
// scattered into this rank's rows of the table, piece by piece, each piece handed
// over when done; the fused backward passes the residual gradient, the split one
// its stash.
void llama_embed_backward(const LlamaModel *m, const struct ParamAccess *pa, Activations *a,
                          const int32_t *tokens, const float *dout, int N);

#endif

// model/activations.h — the layer buffers a backward reads (model/activations.c
// plans and allocates them; model/llama.c's forward writes them, its backward
// reads them).
#ifndef FEMTOTRON_ACTIVATIONS_H
#define FEMTOTRON_ACTIVATIONS_H

#include "model/llama.h"

// The buffers layer i's backward reads, written by its forward: the layer's own
// slots, or the one working layer in the shared scratch for what recomputation
// drops (see Activations in llama.h). The residual stream is kept per layer always.
typedef struct {
    float *x;                 // (Nr, D) layer input
    float *ln1, *ln1_rstd;    // (Nr, D), (Nr)
    float *qkv;               // (N, (Hl+2KVl)*hd) local heads, after RoPE
    float *lse;               // (B, Hl, S)
    float *attn;              // (N, Hl*hd)
    float *mid;               // (Nr, D) residual after attention
    float *ln2, *ln2_rstd;    // (Nr, D), (Nr)
    float *gu;                // (N, 2Fl)
    float *h;                 // (N, Fl)
    float *out;               // (Nr, D) layer output (the next layer's input)
} LayerSaved;

// Layer slot i's buffers in a.
LayerSaved layer_saved(const LlamaModel *m, const Activations *a, int i);

#endif

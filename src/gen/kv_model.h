// gen/kv_model.h — a Llama model for inference: the weights in one flat buffer laid
// out by llama_build (model/llama.h), a key/value cache, and a forward over new
// tokens built from the kernels of ops/ops.h alone (the attention over the cache is
// the flash attention's block ops, ops.h), so on a GPU every buffer stays on the
// device and a forward waits for it once, for the logits. No gradients, no MPI.
// The prompt goes through in chunks; each generated token is one forward.
// Shapes: L layers, T cache positions, C tokens per forward (a prompt chunk), D
// hidden, F intermediate, H query heads, KV key/value heads, hd head dim, V vocabulary.
#ifndef FEMTOTRON_KV_MODEL_H
#define FEMTOTRON_KV_MODEL_H

#include <stdint.h>

#include "config.h"
#include "model/llama.h"

typedef struct {
    ModelConfig cfg;
    LlamaModel m;
    float *params;            // (m.num_elements) flat weights, llama_build's layout
    int T;                    // cache capacity in positions
    int C;                    // most tokens per forward (prompt chunk)
    int pos;                  // positions filled so far
    float *kv_cache;          // (L, T, 2*KV*hd): per position [keys (after RoPE) | values], the
                              // key/value block layout of the attention ops (ops.h)
    int *positions;           // (T) 0 .. T-1: the cache's key positions, and from pos on a forward's
                              // query positions
    // activations of one forward of up to C tokens
    float *x;                 // (C, D) residual stream
    float *h;                 // (C, D) normed input of a block
    float *rstd;              // (C)
    float *qkv;               // (C, (H+2KV)*hd)
    float *att;               // (C, H*hd)
    float *tmp;               // (C, D) block output before the residual add
    float *gu;                // (C, 2F) gate|up (a mixture of experts: of its shared experts, Fs)
    float *mh;                // (C, F) silu(gate)*up
    float *moe, *moe_scr;     // mixture of experts: one layer's routing and expert rows, and the
                              // block's scratch, for C tokens (model/moe.h; NULL when dense)
    float *cos_t, *sin_t;     // (T, hd/2) RoPE tables of every cache position, made at load
    float *att_m, *att_l, *lse;  // (H, C) the attention's running max and sum, and log-sum-exp
    float *scratch;           // (attention_scratch_floats(hd)) the attention kernels' scratch, for
    int scratch_threads;      // the thread count scratch_threads (regrown when it rises)
    float *logits;            // (V) of the last token of the last forward
} KVModel;

// The model directory `dir` names: a checkpoint.dir stands for its newest
// checkpoint; anything else (a step directory, a Hugging Face directory) for itself.
void kv_model_resolve(const char *dir, char *out, size_t size);
// Load a model directory as kv_model_resolve gives it: a femtotron checkpoint or a
// Hugging Face Llama directory (config.json + safetensors). The cache holds
// `positions` positions (at most max_position_embeddings).
void kv_model_load(KVModel *km, const char *resolved, int positions);
void kv_model_free(KVModel *km);

// Run tokens(n) at positions km->pos .. km->pos+n-1 (in chunks of C), append their
// keys and values to the cache and leave the logits of the last one in km->logits.
void kv_model_forward(KVModel *km, const int32_t *tokens, int n);

#endif

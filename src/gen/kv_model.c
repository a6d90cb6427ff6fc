// gen/kv_model.c — Llama inference with a key/value cache (see kv_model.h).
#define _POSIX_C_SOURCE 200809L
#include "gen/kv_model.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "model/moe.h"
#include "ops/ops.h"
#include "util.h"

#define PROMPT_CHUNK 128  // tokens per prompt forward: bounds the activation memory

void kv_model_resolve(const char *dir, char *out, size_t size) {
    // A checkpoint.dir holds step_NNNNNNN directories; the newest is the checkpoint.
    if (checkpoint_latest(dir, out, size)) return;
    if (snprintf(out, size, "%s", dir) >= (int)size) die("generate: --model path is too long: %s", dir);
}

void kv_model_load(KVModel *km, const char *resolved, int positions) {
    memset(km, 0, sizeof *km);
    char config[CFG_PATH_MAX + 16];
    snprintf(config, sizeof config, "%s/config.json", resolved);
    if (!path_is_file(config))
        die("generate: %s has no config.json: --model needs a femtotron checkpoint (or its "
            "checkpoint.dir) or a Hugging Face Llama directory", resolved);
    Config c;
    config_defaults(&c);
    config_set(&c, "model.from", resolved);
    config_resolve_model(&c);
    km->cfg = c.model;
    const ModelConfig *mc = &km->cfg;
    if (mc->num_attention_heads <= 0 || mc->head_dim < 0 ||
        (mc->head_dim == 0 && mc->hidden_size % mc->num_attention_heads != 0) ||
        mc->num_key_value_heads <= 0 || mc->num_attention_heads % mc->num_key_value_heads != 0 ||
        model_head_dim(mc) % 2 != 0)
        die("generate: %s/config.json: hidden_size %d, %d heads, %d key/value heads do not make "
            "a Llama attention layout", resolved, mc->hidden_size, mc->num_attention_heads,
            mc->num_key_value_heads);
    llama_build(&km->m, mc, model_whole());
    checkpoint_verify(resolved);  // a femtotron checkpoint: every file against its manifest
    const LlamaModel *m = &km->m;
    km->params = buf_alloc(MEM_PARAMS, m->num_elements * sizeof(float), "model weights");
    load_hf_weights(resolved, m, km->params);

    if (positions < 1) positions = 1;
    if (positions > mc->max_position_embeddings) positions = mc->max_position_embeddings;
    km->T = positions;
    km->C = positions < PROMPT_CHUNK ? positions : PROMPT_CHUNK;
    // The dense MLP's buffers: its width F, or a mixture of experts' shared experts' Fs.
    const size_t D = (size_t)m->D, F = (size_t)(m->E > 0 ? (m->Fs > 0 ? m->Fs : 1) : m->F), hd = (size_t)m->hd,
                 T = (size_t)km->T,
                 C = (size_t)km->C, kvr = (size_t)m->KV * hd, qkvr = (size_t)(m->H + 2 * m->KV) * hd;
    km->kv_cache = buf_alloc(MEM_ACTIVATIONS, (size_t)m->L * T * 2 * kvr * sizeof(float), "key/value cache");
    km->positions = buf_alloc(MEM_ACTIVATIONS, T * sizeof(int), "cache positions");
    int *pos = xmalloc(T * sizeof(int), "cache positions");  // (T)
    for (size_t p = 0; p < T; p++) pos[p] = (int)p;
    ops_upload(km->positions, pos, T * sizeof(int));
    free(pos);
    km->x = buf_alloc(MEM_ACTIVATIONS, C * D * sizeof(float), "generate activations");
    km->h = buf_alloc(MEM_ACTIVATIONS, C * D * sizeof(float), "generate activations");
    km->rstd = buf_alloc(MEM_ACTIVATIONS, C * sizeof(float), "generate activations");
    km->qkv = buf_alloc(MEM_ACTIVATIONS, C * qkvr * sizeof(float), "generate activations");
    km->att = buf_alloc(MEM_ACTIVATIONS, C * (size_t)m->H * hd * sizeof(float), "generate activations");
    km->tmp = buf_alloc(MEM_ACTIVATIONS, C * D * sizeof(float), "generate activations");
    km->gu = buf_alloc(MEM_ACTIVATIONS, C * 2 * F * sizeof(float), "generate activations");
    km->mh = buf_alloc(MEM_ACTIVATIONS, C * F * sizeof(float), "generate activations");
    km->cos_t = buf_alloc(MEM_ACTIVATIONS, T * hd / 2 * sizeof(float), "RoPE table");
    km->sin_t = buf_alloc(MEM_ACTIVATIONS, T * hd / 2 * sizeof(float), "RoPE table");
    rope_tables(km->cos_t, km->sin_t, (int)T, (int)hd, m->rope_freq, 0);  // every position, once
    km->att_m = buf_alloc(MEM_ACTIVATIONS, C * (size_t)m->H * sizeof(float), "attention rows");
    km->att_l = buf_alloc(MEM_ACTIVATIONS, C * (size_t)m->H * sizeof(float), "attention rows");
    km->lse = buf_alloc(MEM_ACTIVATIONS, C * (size_t)m->H * sizeof(float), "attention rows");
    km->logits = buf_alloc(MEM_ACTIVATIONS, (size_t)m->V * sizeof(float), "logits");
    if (m->E > 0) {  // one layer at a time: the routing and expert rows of C tokens
        const MoeDims md = {(int)C, 1, (int)C, m->D, m->F, m->E, m->K, {1, 0}};
        km->moe = buf_alloc(MEM_ACTIVATIONS, moe_saved_floats(&md) * sizeof(float), "generate expert rows");
        km->moe_scr = buf_alloc(MEM_ACTIVATIONS, moe_scratch_floats(&md) * sizeof(float), "generate expert scratch");
    }
}

void kv_model_free(KVModel *km) {
    ops_sync();  // no op may still use the buffers
    float *bufs[] = {km->params, km->kv_cache, km->x, km->h, km->rstd, km->qkv, km->att, km->tmp,
                     km->gu, km->mh, km->cos_t, km->sin_t, km->att_m, km->att_l, km->lse,
                     km->scratch, km->logits, km->moe, km->moe_scr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) buf_free(bufs[i]);
    buf_free(km->positions);
    llama_free(&km->m);
    memset(km, 0, sizeof *km);
}

// One forward of n <= C tokens at positions km->pos ..
static void forward_chunk(KVModel *km, const int32_t *tokens, int n) {
    const LlamaModel *m = &km->m;
    const float *P = km->params;
    const int D = m->D, F = m->F, H = m->H, KV = m->KV, hd = m->hd, pos0 = km->pos;
    const int qkv_dim = (H + 2 * KV) * hd, kvr = KV * hd, span = pos0 + n;
    const float eps = (float)km->cfg.rms_norm_eps;
    // Rows pos0 .. pos0+n-1 of the RoPE tables, and the queries' positions: every op
    // is queued (a GPU runs them later than they are called), and the host waits
    // once, for the logits at the end.
    const float *cos_t = km->cos_t + (size_t)pos0 * hd / 2, *sin_t = km->sin_t + (size_t)pos0 * hd / 2;
    const int *qpos = km->positions + pos0;
    embedding_forward(km->x, tokens, P + m->embed, n, D, m->V);
    for (int l = 0; l < m->L; l++) {
        const LayerOffsets *lo = &m->layer[l];
        float *kv = km->kv_cache + (size_t)l * km->T * 2 * kvr;  // (T, 2*KV*hd) of layer l
        // attention block: the chunk's keys and values (adjacent in each qkv row) join
        // the cache, then its queries attend to positions 0 .. pos0+n-1 (causal)
        rmsnorm_forward(km->h, NULL, km->rstd, km->x, P + lo->ln1, n, D, eps);
        matmul_forward(km->qkv, km->h, P + lo->qkv, n, D, qkv_dim);
        rope_forward(km->qkv, cos_t, sin_t, 1, n, H, KV, hd);
        copy_rows_f32(kv + (size_t)pos0 * 2 * kvr, 2 * (size_t)kvr, km->qkv + (size_t)H * hd, (size_t)qkv_dim,
                      (size_t)n, 2 * (size_t)kvr);
        attention_block_init(km->att, km->att_m, km->att_l, 1, n, H, hd);
        attention_block_forward(km->att, km->att_m, km->att_l, km->qkv, qkv_dim, kv, 2 * kvr, 0, kvr, qpos,
                                km->positions, 1, n, span, H, KV, hd, km->scratch);
        attention_block_finish(km->att, km->lse, km->att_m, km->att_l, 1, n, H, hd);
        matmul_forward(km->tmp, km->att, P + lo->o, n, H * hd, D);
        residual_forward(km->x, km->x, km->tmp, (size_t)n * D);
        // MLP block (or Mixtral's sparse block, model/moe.h, plus its shared experts)
        rmsnorm_forward(km->h, NULL, km->rstd, km->x, P + lo->ln2, n, D, eps);
        if (m->E > 0) {
            const MoeDims md = {n, 1, n, D, F, m->E, m->K, {1, 0}};
            const MoeSaved ms = moe_saved_at(&md, km->moe);
            const MoeScratch sc = moe_scratch_at(&md, km->moe_scr);
            moe_forward(&md, &ms, &sc, km->tmp, km->h, P + lo->router, P + lo->experts);
            residual_forward(km->x, km->x, km->tmp, (size_t)n * D);
            if (m->Fs == 0) continue;
            matmul_forward(km->gu, km->h, P + lo->gate_up, n, D, 2 * m->Fs);
            swiglu_forward(km->mh, km->gu, n, m->Fs);
            matmul_forward(km->tmp, km->mh, P + lo->down, n, m->Fs, D);
            residual_forward(km->x, km->x, km->tmp, (size_t)n * D);
            continue;
        }
        matmul_forward(km->gu, km->h, P + lo->gate_up, n, D, 2 * F);
        swiglu_forward(km->mh, km->gu, n, F);
        matmul_forward(km->tmp, km->mh, P + lo->down, n, F, D);
        residual_forward(km->x, km->x, km->tmp, (size_t)n * D);
    }
    // Only the last token's logits are needed.
    const float *last = km->x + (size_t)(n - 1) * D;
    rmsnorm_forward(km->h, NULL, km->rstd, last, P + m->final_norm, 1, D, eps);
    matmul_forward(km->logits, km->h, P + m->head, 1, D, m->V);
    ops_sync();  // the sampler reads the logits on the host
    km->pos += n;
}

void kv_model_forward(KVModel *km, const int32_t *tokens, int n) {
    // The attention kernels' scratch, sized for the thread count in force now.
    if (!km->scratch || omp_get_max_threads() > km->scratch_threads) {
        ops_sync();  // no op may still use the old one
        buf_free(km->scratch);
        km->scratch_threads = omp_get_max_threads();
        km->scratch = buf_alloc(MEM_ACTIVATIONS, attention_scratch_floats(km->m.hd) * sizeof(float),
                                "attention scratch");
    }
    if (km->pos + n > km->T)
        die("generate: %d positions would pass the cache of %d (max_position_embeddings %d)",
            km->pos + n, km->T, km->cfg.max_position_embeddings);
    for (int i = 0; i < n; i += km->C) {
        int k = n - i < km->C ? n - i : km->C;
        for (int t = 0; t < k; t++)
            if (tokens[i + t] < 0 || tokens[i + t] >= km->m.V)
                die("generate: token id %d is outside the model's vocabulary of %d", tokens[i + t],
                    km->m.V);
        forward_chunk(km, tokens + i, k);
    }
}

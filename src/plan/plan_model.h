// plan/plan_model.h — the model as the planner sees it: shapes only.
//
// A preset name (smollm-135m ... llama-3.1-405b, mixture-of-experts shapes
// mixtral-8x7b, qwen-moe-a2.7b and deepseek-moe-16b, and the GPT models of
// Korthikanti et al. 2022 used to validate the time model) or a Hugging Face
// config.json (LlamaConfig or MixtralConfig keys) gives the shapes; the planner never
// allocates the model.
#ifndef FEMTOTRON_PLAN_MODEL_H
#define FEMTOTRON_PLAN_MODEL_H

#include "config.h"

typedef struct {
    char name[64];
    int L, D, F, H, KV, V;  // layers, width, MLP width, query heads, kv heads, vocab
    int tied;               // output head shares the embedding
    int ffn_mats;           // 3: SwiGLU (gate, up, down); 2: GPT's GELU MLP (fc1, fc2)
    int flash;              // attention keeps no S x S scores (FlashAttention, femtotron);
                            // 0: Megatron-LM 2022, which stores scores, softmax and dropout mask
    int hd;                 // head dim when it is not D / H (model.head_dim), else 0
    int E, K, Fs;           // mixture of experts: experts per layer (0: dense MLP), experts per
                            // token, shared experts' width (0: none); F is then each expert's width
} PlanModel;

// The head dim: pm->hd, or D / H.
int plan_head_dim(const PlanModel *pm);

// Fill pm from a preset name or, failing that, from a path: a config.json file or
// a directory holding one. Dies naming the argument and listing the presets.
void plan_model_resolve(PlanModel *pm, const char *name_or_path);
// Shapes of a run config's model section (femtotron's own runs).
void plan_model_from_config(PlanModel *pm, const ModelConfig *mc);
// The preset table, for --help: name i (NULL past the end).
const char *plan_model_preset_name(int i);

// Parameters of one decoder layer (every expert of a mixture of experts: what is
// stored), of the embedding and of the untied head.
double plan_layer_params(const PlanModel *pm);
double plan_total_params(const PlanModel *pm);
// The parameters one token multiplies: a mixture of experts counts its router, its k
// experts and the shared experts (= plan_total_params for a dense model).
double plan_active_params(const PlanModel *pm);
// Model FLOPs per token for training (6 x matmul parameters + causal attention
// 6*L*S*H*hd, the same definition as llama_flops_per_token; a mixture of experts
// counts the active experts only): the MFU numerator.
double plan_flops_per_token(const PlanModel *pm, int seq_length);

#endif

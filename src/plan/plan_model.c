// plan/plan_model.c — model presets and shapes for the planner.
#include "plan/plan_model.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

// Shapes from each model's published config.json (Hugging Face hub) and, for the
// GPT rows, Table 3 of Korthikanti et al. 2022 (sequence 2048, vocabulary 51200).
static const PlanModel PRESETS[] = {
    //  name               L     D      F       H    KV   V       tied ffn flash hd (0: D/H) E  K  Fs
    {"smollm-135m",        30,   576,   1536,   9,   3,   49152,  1,   3,  1, 0, 0, 0, 0},
    {"smollm-360m",        32,   960,   2560,   15,  5,   49152,  1,   3,  1, 0, 0, 0, 0},
    {"smollm-1.7b",        24,   2048,  8192,   32,  32,  49152,  1,   3,  1, 0, 0, 0, 0},
    {"llama-3.1-8b",       32,   4096,  14336,  32,  8,   128256, 0,   3,  1, 0, 0, 0, 0},
    {"llama-3.1-70b",      80,   8192,  28672,  64,  8,   128256, 0,   3,  1, 0, 0, 0, 0},
    {"llama-3.1-405b",     126,  16384, 53248,  128, 8,   128256, 0,   3,  1, 0, 0, 0, 0},
    // Mixture of experts: Mixtral-8x7B's config.json; Qwen1.5-MoE-A2.7B's shape (60
    // experts of 1408, top-4, a shared expert of 5632, here ungated as femtotron's);
    // DeepSeekMoE-16B's (64 experts of 1408, top-6, 2 shared; its first layer, dense
    // there, is a MoE layer here).
    {"mixtral-8x7b",       32,   4096,  14336,  32,  8,   32000,  0,   3,  1, 0, 8,  2, 0},
    {"qwen-moe-a2.7b",     24,   2048,  1408,   16,  16,  151936, 0,   3,  1, 0, 60, 4, 5632},
    {"deepseek-moe-16b",   28,   2048,  1408,   16,  16,  102400, 0,   3,  1, 0, 64, 6, 2816},
    {"gpt-22b",            48,   6144,  24576,  64,  64,  51200,  1,   2,  0, 0, 0, 0, 0},
    {"gpt-175b",           96,   12288, 49152,  96,  96,  51200,  1,   2,  0, 0, 0, 0, 0},
    {"gpt-530b",           105,  20480, 81920,  128, 128, 51200,  1,   2,  0, 0, 0, 0, 0},
    {"gpt-1t",             128,  25600, 102400, 160, 160, 51200,  1,   2,  0, 0, 0, 0, 0},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *plan_model_preset_name(int i) { return i >= 0 && i < N_PRESETS ? PRESETS[i].name : NULL; }

void plan_model_from_config(PlanModel *pm, const ModelConfig *mc) {
    memset(pm, 0, sizeof *pm);
    snprintf(pm->name, sizeof pm->name, "%.63s", mc->from[0] ? mc->from : "run config");
    pm->L = mc->num_hidden_layers;
    pm->D = mc->hidden_size;
    pm->F = mc->intermediate_size;
    pm->H = mc->num_attention_heads;
    pm->KV = mc->num_key_value_heads;
    pm->V = mc->vocab_size;
    pm->tied = mc->tie_word_embeddings;
    pm->ffn_mats = 3;
    pm->flash = 1;
    pm->hd = mc->head_dim;
    pm->E = mc->num_local_experts;
    pm->K = pm->E > 0 ? mc->num_experts_per_tok : 0;
    pm->Fs = pm->E > 0 ? mc->n_shared_experts * mc->intermediate_size : 0;
}

int plan_head_dim(const PlanModel *pm) { return pm->hd > 0 ? pm->hd : pm->D / pm->H; }

void plan_model_resolve(PlanModel *pm, const char *arg) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(arg, PRESETS[i].name) == 0) {
            *pm = PRESETS[i];
            return;
        }
    // A Hugging Face model directory or its config.json: read it through the run
    // config's model.from machinery, which validates every key it takes.
    struct stat st;
    if (stat(arg, &st) != 0) {
        char list[1024] = "";
        for (int i = 0; i < N_PRESETS; i++) {
            if (i) strcat(list, ", ");
            strcat(list, PRESETS[i].name);  // ten names of < 20 characters
        }
        die("--model %s: not a preset and no such file or directory (presets: %s)", arg, list);
    }
    char dir[CFG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", arg);
    if (!S_ISDIR(st.st_mode)) {  // a config.json: model.from takes its directory
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
        if (strcmp(base, "config.json") != 0)
            die("--model %s: a Hugging Face config must be named config.json (or give its directory)", arg);
    }
    Config c;
    config_defaults(&c);
    config_set(&c, "model.from", dir);
    plan_model_from_config(pm, &c.model);
    snprintf(pm->name, sizeof pm->name, "%.63s", arg);
}

// The MLP's matmul parameters: all E experts (stored) or the k a token uses (active),
// with the router and the shared experts; a dense model's one MLP either way.
static double mlp_params(const PlanModel *pm, int active) {
    const double D = pm->D;
    if (pm->E == 0) return pm->ffn_mats * D * pm->F;
    return (double)pm->E * D + (active ? pm->K : pm->E) * 3.0 * D * pm->F + 3.0 * D * pm->Fs;
}

static double attention_params(const PlanModel *pm) {
    const double D = pm->D, hd = plan_head_dim(pm);
    return D * (pm->H + 2.0 * pm->KV) * hd + (double)pm->H * hd * D;
}

double plan_layer_params(const PlanModel *pm) {
    return attention_params(pm) + mlp_params(pm, 0) + 2.0 * pm->D;  // + the two norm weights
}

double plan_total_params(const PlanModel *pm) {
    double embed = (double)pm->V * pm->D;
    return pm->L * plan_layer_params(pm) + embed * (pm->tied ? 1 : 2) + pm->D;
}

double plan_active_params(const PlanModel *pm) {
    return plan_total_params(pm) - pm->L * (mlp_params(pm, 0) - mlp_params(pm, 1));
}

double plan_flops_per_token(const PlanModel *pm, int seq_length) {
    const double D = pm->D, hd = plan_head_dim(pm);
    double matmul = pm->L * (attention_params(pm) + mlp_params(pm, 1)) + (double)pm->V * D;
    return 6.0 * matmul + 6.0 * pm->L * (double)seq_length * pm->H * hd;
}

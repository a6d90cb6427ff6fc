// plan/plan_model.c — model presets and shapes for the planner.
#include "plan/plan_model.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

// Shapes from each model's published config.json (Hugging Face hub) and, for the
// GPT rows, Table 3 of Korthikanti et al. 2022 (sequence 2048, vocabulary 51200).
static const PlanModel PRESETS[] = {
    //  name               L     D      F       H    KV   V       tied ffn flash hd (0: D/H)
    {"smollm-135m",        30,   576,   1536,   9,   3,   49152,  1,   3,  1, 0},
    {"smollm-360m",        32,   960,   2560,   15,  5,   49152,  1,   3,  1, 0},
    {"smollm-1.7b",        24,   2048,  8192,   32,  32,  49152,  1,   3,  1, 0},
    {"llama-3.1-8b",       32,   4096,  14336,  32,  8,   128256, 0,   3,  1, 0},
    {"llama-3.1-70b",      80,   8192,  28672,  64,  8,   128256, 0,   3,  1, 0},
    {"llama-3.1-405b",     126,  16384, 53248,  128, 8,   128256, 0,   3,  1, 0},
    {"gpt-22b",            48,   6144,  24576,  64,  64,  51200,  1,   2,  0, 0},
    {"gpt-175b",           96,   12288, 49152,  96,  96,  51200,  1,   2,  0, 0},
    {"gpt-530b",           105,  20480, 81920,  128, 128, 51200,  1,   2,  0, 0},
    {"gpt-1t",             128,  25600, 102400, 160, 160, 51200,  1,   2,  0, 0},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *plan_model_preset_name(int i) { return i >= 0 && i < N_PRESETS ? PRESETS[i].name : NULL; }

void plan_model_from_config(PlanModel *pm, const ModelConfig *mc) {
    if (mc->num_local_experts > 0)
        die("the planner does not model mixture-of-experts layers yet (model.num_local_experts = %d): "
            "give the layout (parallel.dp, tp, pp, cp, zero) by hand", mc->num_local_experts);
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

double plan_layer_params(const PlanModel *pm) {
    const double D = pm->D, hd = plan_head_dim(pm);
    double attn = D * (pm->H + 2.0 * pm->KV) * hd + (double)pm->H * hd * D;
    return attn + pm->ffn_mats * D * pm->F + 2.0 * D;  // + the two norm weights
}

double plan_total_params(const PlanModel *pm) {
    double embed = (double)pm->V * pm->D;
    return pm->L * plan_layer_params(pm) + embed * (pm->tied ? 1 : 2) + pm->D;
}

double plan_flops_per_token(const PlanModel *pm, int seq_length) {
    const double D = pm->D, hd = plan_head_dim(pm);
    double matmul = pm->L * (D * (pm->H + 2.0 * pm->KV) * hd + pm->H * hd * D + pm->ffn_mats * D * pm->F) +
                    (double)pm->V * D;
    return 6.0 * matmul + 6.0 * pm->L * (double)seq_length * pm->H * hd;
}

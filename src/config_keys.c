// config_keys.c — the run configuration's key table and what reads it: defaults,
// lookups, and setting one key from override text or a JSON value.
//
// ONE table of keys (below) drives the defaults, JSON loading, `--section.key value`
// overrides, unknown-key errors, --help, JSON output and the Hugging Face
// config.json; adding a key is one line there plus its field in config.h. Cross-key
// rules live in config_validate.c.
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "util.h"

#define KEY(sec, name, type, def, help) \
    {#sec, #name, type, offsetof(Config, sec.name), def, NULL, help, NULL}
#define MKEY(name, type, def, hf_def, help) \
    {"model", #name, type, offsetof(Config, model.name), def, hf_def, help, NULL}
#define EKEY(sec, name, names, def, help) \
    {#sec, #name, KT_ENUM, offsetof(Config, sec.name), def, NULL, help, names}

// The spellings of the enum-valued keys, indexed by the enum's value (config.h).
const char *const RECOMPUTE_NAMES[] = {"none", "selective", "full", NULL};
const char *const PP_SCHEDULE_NAMES[] = {"afab", "1f1b", "interleaved", "zb-h1", "zb-v", NULL};
const char *const RANK_ORDER_NAMES[] = {"dp-pp-cp-tp", "pp-dp-cp-tp", NULL};
const char *const ROPE_TYPE_NAMES[] = {"default", "linear", "llama3", NULL};
const char *const LR_SCHEDULE_NAMES[] = {"cosine", "linear", "constant", "wsd", NULL};
const char *const DECAY_SHAPE_NAMES[] = {"linear", "cosine", "1-sqrt", NULL};
const char *const CKPT_DTYPE_NAMES[] = {"fp32", "bf16", NULL};
const char *const DEVICE_NAMES[] = {"cpu", "cuda", NULL};
const char *const PRECISION_NAMES[] = {"auto", "fp32", "bf16", NULL};
const char *const ATTENTION_NAMES[] = {"femtotron", "cudnn", NULL};
const char *const COMM_NAMES[] = {"auto", "nccl", "mpi", NULL};
_Static_assert(sizeof(Recompute) == sizeof(int) && sizeof(PpSchedule) == sizeof(int) &&
                   sizeof(RankOrder) == sizeof(int) && sizeof(RopeType) == sizeof(int) &&
                   sizeof(LrSchedule) == sizeof(int) && sizeof(DecayShape) == sizeof(int) &&
                   sizeof(CkptDtype) == sizeof(int) && sizeof(Device) == sizeof(int) &&
                   sizeof(Precision) == sizeof(int) && sizeof(AttentionKernels) == sizeof(int),
               "KT_ENUM keys store their value through an int");

const char *recompute_name(Recompute r) { return RECOMPUTE_NAMES[r]; }
const char *pp_schedule_name(PpSchedule s) { return PP_SCHEDULE_NAMES[s]; }
const char *rank_order_name(RankOrder o) { return RANK_ORDER_NAMES[o]; }
const char *rope_type_name(RopeType t) { return ROPE_TYPE_NAMES[t]; }
const char *lr_schedule_name(LrSchedule s) { return LR_SCHEDULE_NAMES[s]; }
const char *device_name(Device d) { return DEVICE_NAMES[d]; }
const char *precision_name(Precision p) { return PRECISION_NAMES[p]; }

int training_decay_steps(const TrainingConfig *t) {
    if (t->lr_schedule != LR_WSD) return 0;
    return t->decay_steps > 0 ? t->decay_steps : (int)floor(t->decay_fraction * t->steps + 0.5);
}

int model_head_dim(const ModelConfig *m) {
    if (m->head_dim > 0) return m->head_dim;
    return m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads : 0;
}

int config_name_index(const char *const *names, const char *name) {
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

const KeyDef CFG_KEYS[] = {
    // Hugging Face LlamaConfig keys. num_key_value_heads has no fixed HF default:
    // transformers uses num_attention_heads when the key is absent.
    MKEY(hidden_size, KT_INT, "256", "4096", "width of the residual stream (D)"),
    MKEY(intermediate_size, KT_INT, "768", "11008", "hidden width of the SwiGLU MLP"),
    MKEY(num_hidden_layers, KT_INT, "4", "32", "decoder layers (L)"),
    MKEY(num_attention_heads, KT_INT, "4", "32", "query heads (H)"),
    MKEY(num_key_value_heads, KT_INT, "2", NULL,
         "key/value heads (grouped-query attention); must divide num_attention_heads"),
    MKEY(vocab_size, KT_INT, "257", "32000",
         "vocabulary size (257 = byte-level tokenizer: 256 bytes + end-of-text)"),
    MKEY(max_position_embeddings, KT_INT, "1024", "2048",
         "longest sequence the model is built for; training.seq_length <= this"),
    MKEY(rms_norm_eps, KT_DOUBLE, "1e-5", "1e-6", "epsilon inside RMSNorm"),
    MKEY(rope_theta, KT_DOUBLE, "10000", "10000", "RoPE base frequency"),
    // rope_scaling, flattened: read from and written to config.json as the
    // rope_scaling object (config_hf.c, config_output.c), not as top-level keys.
    {"model", "rope_type", KT_ENUM, offsetof(Config, model.rope_type), "default", "default",
     "RoPE scaling (config.json rope_scaling): default (none), linear or llama3", ROPE_TYPE_NAMES},
    MKEY(rope_factor, KT_DOUBLE, "1", "1", "linear, llama3: context extension factor"),
    MKEY(rope_low_freq_factor, KT_DOUBLE, "1", "1",
         "llama3: wavelengths above original_max_position_embeddings / this are divided by factor"),
    MKEY(rope_high_freq_factor, KT_DOUBLE, "4", "4",
         "llama3: wavelengths below original_max_position_embeddings / this are kept"),
    MKEY(rope_original_max_position_embeddings, KT_INT, "8192", "8192",
         "llama3: the context length the model was trained at before scaling"),
    MKEY(head_dim, KT_INT, "0", "0", "width of each attention head (0 = hidden_size / num_attention_heads)"),
    MKEY(initializer_range, KT_DOUBLE, "0.02", "0.02", "std of the normal init of every matrix"),
    MKEY(tie_word_embeddings, KT_BOOL, "false", "false",
         "output head shares the embedding matrix"),
    // MixtralConfig keys (mixture of experts); a Llama config.json leaves them dense.
    MKEY(num_local_experts, KT_INT, "0", "0",
         "mixture of experts (Mixtral): experts per layer (E); 0 = the dense Llama MLP"),
    MKEY(num_experts_per_tok, KT_INT, "2", "2", "mixture of experts: experts each token is routed to (top-k)"),
    MKEY(router_aux_loss_coef, KT_DOUBLE, "0.001", "0.001",
         "mixture of experts: weight of the load-balancing loss (added when output_router_logits)"),
    MKEY(output_router_logits, KT_BOOL, "false", "false",
         "mixture of experts: add router_aux_loss_coef * the load-balancing loss to the training loss"),
    MKEY(n_shared_experts, KT_INT, "0", "0",
         "mixture of experts: shared experts (DeepSeek): a SwiGLU of n * intermediate_size every token "
         "goes through, added to the routed output (not a Mixtral tensor: transformers' Mixtral cannot load it)"),
    MKEY(from, KT_STRING, "", NULL,
         "local Hugging Face model directory: its config.json gives the model keys not set here"),

    KEY(data, train, KT_SOURCES, "",
        "training token shards: llm.c .bin file or glob, or a weighted mixture \"A/*.bin:0.7,B/*.bin:0.3\" "
        "(in JSON: [{\"path\": ..., \"weight\": ...}, ...]) (required)"),
    KEY(data, val, KT_SOURCES, "",
        "validation token shards: file or glob, or a mixture as data.train, each source scored "
        "on its own (\"\" = none)"),
    KEY(data, shuffle, KT_BOOL, "false", "seeded permutation of the sequences every epoch"),

    KEY(training, seed, KT_U64, "1234", "seed of initialisation and data order"),
    KEY(training, steps, KT_INT, "100", "optimizer steps in total (resumed steps count)"),
    KEY(training, seq_length, KT_INT, "256", "tokens per sequence (S)"),
    KEY(training, micro_batch_size, KT_INT, "8", "sequences per micro-batch per data-parallel rank (B)"),
    KEY(training, grad_acc_steps, KT_INT, "0",
         "micro-batches per optimizer step (0 = derive from global_batch_size)"),
    KEY(training, global_batch_size, KT_INT, "0",
         "sequences per optimizer step (0 = grad_acc_steps * micro_batch_size * dp)"),
    KEY(training, lr, KT_DOUBLE, "3e-4", "peak learning rate (after warmup)"),
    KEY(training, min_lr, KT_DOUBLE, "3e-5", "lowest learning rate, reached at the end of the decay"),
    KEY(training, warmup_steps, KT_INT, "10", "steps of linear warmup, from init_lr to lr"),
    KEY(training, init_lr, KT_DOUBLE, "0", "learning rate the warmup starts from"),
    EKEY(training, lr_schedule, LR_SCHEDULE_NAMES, "cosine",
         "after warmup: cosine or linear decay to min_lr at the last step, constant at lr, or wsd "
         "(warmup-stable-decay: lr until the final decay_steps, then decay_shape to min_lr)"),
    KEY(training, decay_steps, KT_INT, "0", "wsd: steps of the final decay (0 = decay_fraction of steps)"),
    KEY(training, decay_fraction, KT_DOUBLE, "0.2", "wsd: the final decay as a fraction of training.steps"),
    EKEY(training, decay_shape, DECAY_SHAPE_NAMES, "linear", "wsd: shape of the decay: linear, cosine or 1-sqrt"),
    KEY(training, weight_decay, KT_DOUBLE, "0.1", "AdamW decoupled weight decay (matrices only)"),
    KEY(training, beta1, KT_DOUBLE, "0.9", "AdamW first-moment decay"),
    KEY(training, beta2, KT_DOUBLE, "0.95", "AdamW second-moment decay"),
    KEY(training, eps, KT_DOUBLE, "1e-8", "AdamW epsilon"),
    KEY(training, grad_clip, KT_DOUBLE, "1.0", "max global gradient L2 norm (0 = no clipping)"),
    KEY(training, threads, KT_INT, "0", "threads per rank (0 = cores / ranks on the node)"),
    KEY(training, peak_flops, KT_DOUBLE, "0", "peak FLOP/s per rank for MFU (0 = parallel.profile's, else the node's sgemm peak, measured once and cached)"),
    KEY(training, max_bad_steps, KT_INT, "5",
        "stop after this many steps in a row with a non-finite loss or gradient norm"),
    EKEY(training, recompute, RECOMPUTE_NAMES, "none",
         "activation recomputation: none, selective (attention core redone in backward) or full "
         "(each layer redone from its input)"),
    KEY(training, keep_bf16_inputs, KT_BOOL, "false",
        "precision bf16, recompute none or selective, a dense model: each layer keeps its two norms' and its "
        "SwiGLU's bf16 outputs (the q|k|v, gate|up and down products' inputs) for the backward's weight "
        "gradients instead of rebuilding them there: 2 (2 hidden_size + intermediate_size) bytes a token a "
        "layer more activations, about 1% less step time on a GPU; the same numbers, bit for bit"),
    EKEY(training, device, DEVICE_NAMES, "cpu",
         "where the step runs: cpu (./femtotron, make) or cuda (./femtotron-cuda, make cuda; in progress)"),
    EKEY(training, precision, PRECISION_NAMES, "auto",
         "fp32 or bf16 (cuda only: matrix-product operands rounded to bf16, their sums and every other "
         "op in fp32); auto = bf16 on cuda, fp32 on cpu"),
    EKEY(training, attention, ATTENTION_NAMES, "femtotron",
         "attention kernels: femtotron (its own, every device and layout) or cudnn (cuDNN's fused flash "
         "attention: cuda, bf16 and parallel.cp = 1; cuDNN 9 loaded at run time)"),

    KEY(parallel, dp, KT_INT, "1", "data-parallel ranks"),
    KEY(parallel, tp, KT_INT, "1", "tensor-parallel ranks"),
    KEY(parallel, pp, KT_INT, "1", "pipeline-parallel stages"),
    KEY(parallel, ep, KT_INT, "1",
        "expert-parallel ranks (mixture of experts): each computes E/ep experts for the tokens of its ep "
        "group, taken from within dp x cp; must divide dp * cp and num_local_experts"),
    KEY(parallel, cp, KT_INT, "1", "context-parallel ranks"),
    KEY(parallel, zero, KT_INT, "0", "ZeRO stage (0 = none, 1 = optimizer state, 2 = +gradients, 3 = +parameters)"),
    KEY(parallel, sequence_parallel, KT_BOOL, "false",
        "with tp > 1: norms, residual adds and the loss input on token shards (all-gather/reduce-scatter)"),
    EKEY(parallel, order, RANK_ORDER_NAMES, "dp-pp-cp-tp",
         "rank order, outermost first (tp fastest): dp-pp-cp-tp or pp-dp-cp-tp"),
    KEY(parallel, bucket_mb, KT_DOUBLE, "25", "data-parallel gradient bucket size (MiB)"),
    KEY(parallel, overlap, KT_BOOL, "true",
        "reduce each gradient bucket during backward as soon as it is complete (false: after backward)"),
    EKEY(parallel, pp_schedule, PP_SCHEDULE_NAMES, "1f1b",
         "pipeline schedule: 1f1b, afab (all forwards, then all backwards) or interleaved"),
    KEY(parallel, pp_virtual, KT_INT, "1", "model chunks per pipeline rank (interleaved schedule; 1 otherwise)"),
    KEY(parallel, pp_layers, KT_STRING, "",
        "layers per (virtual) pipeline stage, e.g. \"3,3,2\" (\"\" = balance estimated cost)"),
    KEY(parallel, pp_costs, KT_STRING, "flops",
        "per-pass costs the zero-bubble schedules (zb-h1, zb-v) build their lists for: \"flops\" (predicted "
        "from the model), \"unit\" (equal F, I, W), \"measure\" (flops, then rebuilt within the planned memory "
        "for the passes timed in the run's second step, agreed over all ranks) or F:I:W per (virtual) stage, "
        "e.g. measured ms \"18:20:16,19:21:16\""),
    {"parallel", "auto", KT_BOOL, offsetof(Config, parallel.auto_layout), "false", NULL,
     "let the planner choose dp, tp, pp, cp, zero, micro-batch, schedule and recompute for the "
     "world size (explicit layout keys are replaced; the choice is printed)", NULL},
    KEY(parallel, memory_gb, KT_DOUBLE, "0",
        "memory budget per rank for parallel.auto in GiB (0 = this machine's RAM / ranks)"),
    KEY(parallel, profile, KT_STRING, "",
        "hardware profile JSON written by `femtotron bench calibrate`; parallel.auto needs one (it does "
        "not calibrate at start)"),
    KEY(parallel, timeout_s, KT_DOUBLE, "300", "abort the job when a collective has not finished after this many seconds"),
    EKEY(parallel, comm, COMM_NAMES, "auto",
         "collectives of buffers: nccl (the CUDA build, one rank per GPU), mpi, or auto (nccl where every rank "
         "of a node has a GPU of its own, else mpi)"),

    KEY(checkpoint, dir, KT_STRING, "", "checkpoint directory (\"\" = no checkpoints)"),
    KEY(checkpoint, every, KT_INT, "0", "save every N steps (0 = only at the end)"),
    KEY(checkpoint, resume, KT_BOOL, "false", "continue from the newest checkpoint in DIR"),
    KEY(checkpoint, async, KT_BOOL, "false",
        "snapshot the state and write checkpoints in a background thread while training goes on"),
    KEY(checkpoint, keep, KT_INT, "0",
        "keep the newest N checkpoints, deleting older ones after each save (0 = keep all)"),
    KEY(checkpoint, keep_every, KT_INT, "0",
        "with keep: also keep every checkpoint whose step is a multiple of this (0 = none)"),
    EKEY(checkpoint, dtype, CKPT_DTYPE_NAMES, "fp32",
         "weights in model.safetensors: fp32, or bf16 (half the size; the fp32 master weights "
         "go into optimizer.safetensors, so resume stays exact)"),

    KEY(logging, metrics, KT_STRING, "", "JSON-lines metrics file (\"\" = none)"),
    KEY(logging, every, KT_INT, "1", "print and log every N steps"),
    KEY(logging, val_every, KT_INT, "0", "validate every N steps (0 = never; needs data.val)"),
    KEY(logging, val_batches, KT_INT, "4", "micro-batches per validation"),
    KEY(logging, verbose, KT_BOOL, "false", "every rank prints its grid coordinates at start-up"),
    KEY(logging, trace, KT_STRING, "",
        "Chrome trace-event JSON timeline of every rank's forward/backward/send/recv/reduce/optimizer (opens in Perfetto)"),
};
const int CFG_NKEYS = (int)(sizeof CFG_KEYS / sizeof CFG_KEYS[0]);
_Static_assert(sizeof CFG_KEYS / sizeof CFG_KEYS[0] <= 64 * CFG_KEYS_WORDS, "Config.keys_set: raise CFG_KEYS_WORDS");

int cfg_key_given(const Config *c, int i) { return (int)(c->keys_set[i / 64] >> (i % 64) & 1); }
void cfg_mark_given(Config *c, int i) { c->keys_set[i / 64] |= (uint64_t)1 << (i % 64); }

const char *const CFG_SECTIONS[] = {"model", "data", "training", "parallel", "checkpoint", "logging"};
const int CFG_NSECTIONS = (int)(sizeof CFG_SECTIONS / sizeof CFG_SECTIONS[0]);

// ---------------------------------------------------------------- table lookups

void *cfg_field_ptr(Config *c, const KeyDef *k) { return (char *)c + k->offset; }

int cfg_key_index(const char *section, size_t section_len, const char *key) {
    for (int i = 0; i < CFG_NKEYS; i++)
        if (strlen(CFG_KEYS[i].section) == section_len &&
            strncmp(CFG_KEYS[i].section, section, section_len) == 0 && strcmp(CFG_KEYS[i].key, key) == 0)
            return i;
    return -1;
}

int cfg_is_section(const char *s) {
    for (int i = 0; i < CFG_NSECTIONS; i++)
        if (strcmp(CFG_SECTIONS[i], s) == 0) return 1;
    return 0;
}

int cfg_is_model_from(const KeyDef *k) {
    return strcmp(k->section, "model") == 0 && strcmp(k->key, "from") == 0;
}

int cfg_is_moe_key(const KeyDef *k) {
    static const char *const moe[] = {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                                      "output_router_logits", "n_shared_experts"};
    if (strcmp(k->section, "model") != 0) return 0;
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        if (strcmp(k->key, moe[i]) == 0) return 1;
    return 0;
}

// What a value of this type must look like, for error messages.
static const char *type_expect(KeyType t) {
    switch (t) {
    case KT_INT: return "an integer";
    case KT_U64: return "a non-negative integer";
    case KT_DOUBLE: return "a finite number";
    case KT_BOOL: return "true or false";
    case KT_STRING: return "a string";
    case KT_ENUM: return "one of its names";
    case KT_SOURCES: return "a path, a glob or a list of sources";
    }
    return "?";
}

// Edit distance, for "did you mean" hints on misspelt keys.
static int edit_distance(const char *a, const char *b) {
    enum { N = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= N || lb >= N) return N;
    int row[N], prev[N];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, row, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

void cfg_die_unknown_key(const char *origin, const char *dotted) {
    int best = -1, best_d = 4;
    for (int i = 0; i < CFG_NKEYS; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s.%s", CFG_KEYS[i].section, CFG_KEYS[i].key);
        int d = edit_distance(dotted, name);
        if (d < best_d) best_d = d, best = i;
    }
    if (best >= 0)
        die("%s: unknown key \"%s\" (did you mean \"%s.%s\"?)", origin, dotted,
            CFG_KEYS[best].section, CFG_KEYS[best].key);
    die("%s: unknown key \"%s\" (see ./femtotron train --help for every key)", origin, dotted);
}

// ---------------------------------------------------------------- setting values

// An enum key from its spelling; anything else is refused with every spelling listed.
static void set_enum(void *p, const KeyDef *k, const char *text, const char *origin) {
    int v = config_name_index(k->names, text);
    if (v >= 0) {
        *(int *)p = v;
        return;
    }
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; k->names[i] && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s\"%s\"",
                                 i == 0 ? "" : k->names[i + 1] ? ", " : " or ", k->names[i]);
    die("%s: %s.%s = \"%s\": must be %s", origin, k->section, k->key, text, list);
}

// Parse `text` by the key's type into c. Used for the defaults in the table and
// for command-line overrides, so both accept exactly the same spellings.
void cfg_set_text(Config *c, const KeyDef *k, const char *text, const char *origin) {
    void *p = cfg_field_ptr(c, k);
    char *end = NULL;
    errno = 0;
    switch (k->type) {
    case KT_INT: {
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno || v < INT_MIN || v > INT_MAX) break;
        *(int *)p = (int)v;
        return;
    }
    case KT_U64: {
        // strtoull accepts "-1" (wrapping it), so refuse any sign ourselves.
        if (text[0] < '0' || text[0] > '9') break;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end || errno) break;
        *(uint64_t *)p = (uint64_t)v;
        return;
    }
    case KT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v)) break;
        *(double *)p = v;
        return;
    }
    case KT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) {
            *(bool *)p = true;
            return;
        }
        if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) {
            *(bool *)p = false;
            return;
        }
        die("%s: \"%s.%s\" must be true, false, 1 or 0, got \"%s\"", origin, k->section, k->key, text);
    case KT_STRING:
    case KT_SOURCES: {
        const size_t max = k->type == KT_SOURCES ? CFG_DATA_MAX : CFG_PATH_MAX;
        if (strlen(text) >= max)
            die("%s: \"%s.%s\" is %zu characters long; the limit is %zu", origin, k->section, k->key,
                strlen(text), max - 1);
        memcpy(p, text, strlen(text) + 1);
        return;
    }
    case KT_ENUM:
        set_enum(p, k, text, origin);
        return;
    }
    die("%s: \"%s.%s\" must be %s, got \"%s\"", origin, k->section, k->key, type_expect(k->type), text);
}

// Set from a JSON value, which must have the key's JSON type. `name` is how the
// key is spelt in that file ("training.steps" in a run config, "hidden_size" in a
// Hugging Face config.json).
void cfg_set_json(Config *c, const KeyDef *k, const cJSON *v, const char *origin, const char *name) {
    void *p = cfg_field_ptr(c, k);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
    switch (k->type) {
    case KT_INT:
        if (!cJSON_IsNumber(v) || d != floor(d) || d < INT_MIN || d > INT_MAX) break;
        *(int *)p = (int)d;
        return;
    case KT_U64:
        // A JSON number holds integers exactly only up to 2^53; larger seeds are
        // written (by config_to_json) and accepted as decimal strings.
        if (cJSON_IsString(v) && v->valuestring[0] >= '0' && v->valuestring[0] <= '9') {
            char *end;
            errno = 0;
            unsigned long long u = strtoull(v->valuestring, &end, 10);
            if (*end || errno) break;
            *(uint64_t *)p = (uint64_t)u;
            return;
        }
        if (!cJSON_IsNumber(v) || d != floor(d) || d < 0 || d > JSON_MAX_EXACT) break;
        *(uint64_t *)p = (uint64_t)d;
        return;
    case KT_DOUBLE:
        if (!cJSON_IsNumber(v)) break;
        *(double *)p = d;
        return;
    case KT_BOOL:
        if (!cJSON_IsBool(v)) break;
        *(bool *)p = cJSON_IsTrue(v);
        return;
    case KT_ENUM:
        if (!cJSON_IsString(v)) break;
        set_enum(p, k, v->valuestring, origin);
        return;
    case KT_STRING:
        if (!cJSON_IsString(v)) break;
        if (strlen(v->valuestring) >= CFG_PATH_MAX)
            die("%s: \"%s\" is %zu characters long; the limit is %d", origin, name,
                strlen(v->valuestring), CFG_PATH_MAX - 1);
        memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
        return;
    case KT_SOURCES: {
        if (!cJSON_IsString(v) && !cJSON_IsArray(v)) break;
        char *text = cJSON_IsString(v) ? v->valuestring : cJSON_PrintUnformatted(v);
        if (!text) die("%s: out of memory reading \"%s\"", origin, name);
        size_t len = strlen(text);
        if (len < CFG_DATA_MAX) memcpy(p, text, len + 1);
        if (text != v->valuestring) free(text);
        if (len >= CFG_DATA_MAX)
            die("%s: \"%s\" is %zu characters long; the limit is %d", origin, name, len, CFG_DATA_MAX - 1);
        return;
    }
    }
    char *shown = cJSON_PrintUnformatted(v);
    if (shown && strlen(shown) > 40) strcpy(shown + 37, "...");
    die("%s: \"%s\" must be %s (JSON %s), got %s", origin, name, type_expect(k->type),
        k->type == KT_SOURCES ? "string or array"
        : k->type == KT_STRING || k->type == KT_ENUM ? "string"
        : k->type == KT_BOOL ? "true/false" : "number",
        shown ? shown : "?");
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < CFG_NKEYS; i++) cfg_set_text(c, &CFG_KEYS[i], CFG_KEYS[i].def, "built-in default");
    memset(c->keys_set, 0, sizeof c->keys_set);
}

// config.h — the run configuration: Hugging Face LlamaConfig keys for the model,
// plus data, training, parallel, checkpoint and logging sections.
// Loaded from JSON (config_load), overridden by `--section.key value` arguments,
// validated before any work (config_validate). Every key is documented in README.md.
#ifndef FEMTOTRON_CONFIG_H
#define FEMTOTRON_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define CFG_PATH_MAX 1024
#define CFG_KEYS_WORDS 2  // Config.keys_set: room for 128 keys

// Options with a fixed set of values are parsed once, when the config is loaded,
// into these enums; everything downstream (trainer, engines, model, planner) uses
// the enum. Each has a NULL-terminated table of its spellings, indexed by value
// (config_keys.c), and a name function for messages.
//
// training.recompute — what a layer keeps for its backward (Korthikanti et al. 2022):
//   none       every buffer its backward reads
//   selective  the linear layers' inputs and q/k/v; the attention core (its
//              log-sum-exp) is redone in backward
//   full       only the layer input; the whole layer is redone in backward
typedef enum { RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } Recompute;
// parallel.pp_schedule — engines/pipeline_schedule.h describes each.
typedef enum { PP_AFAB, PP_1F1B, PP_INTERLEAVED, PP_ZB_H1, PP_ZB_V } PpSchedule;
// parallel.order — rank numbering, outermost dimension first, tp always fastest
// (dist/grid.h).
typedef enum { ORDER_DP_PP_CP_TP, ORDER_PP_DP_CP_TP } RankOrder;
// model.rope_type: plain RoPE or a context-extension scaling (model/rope.h).
typedef enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3 } RopeType;
// training.lr_schedule and training.decay_shape (train/schedule.h).
typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD } LrSchedule;
typedef enum { DECAY_LINEAR, DECAY_COSINE, DECAY_1_SQRT } DecayShape;
// checkpoint.dtype: how model.safetensors stores the weights (io/checkpoint.h).
typedef enum { CKPT_DTYPE_FP32, CKPT_DTYPE_BF16 } CkptDtype;
// training.device: which backend the run needs; each binary runs one (docs/DESIGN.md,
// invariant 6: the backend boundary): ./femtotron is cpu, ./femtotron-cuda is cuda.
typedef enum { DEVICE_CPU, DEVICE_CUDA } Device;
// training.precision: auto resolves at validation to bf16 on cuda and fp32 on cpu.
typedef enum { PRECISION_AUTO, PRECISION_FP32, PRECISION_BF16 } Precision;
// training.attention: whose kernels run a rank's attention (ops.h:
// ops_set_attention_cudnn): femtotron's own, or cuDNN's fused ones (cuda, bf16, cp 1).
typedef enum { ATTENTION_FEMTOTRON, ATTENTION_CUDNN } AttentionKernels;
// parallel.comm: what carries the collectives of buffers (dist/comm.c): auto = NCCL
// where the binary has it and every rank of a node has a GPU of its own, else MPI.
typedef enum { COMM_AUTO, COMM_NCCL, COMM_MPI } CommLibrary;

extern const char *const RECOMPUTE_NAMES[];    // "none", "selective", "full", NULL
extern const char *const PP_SCHEDULE_NAMES[];  // "afab", "1f1b", "interleaved", "zb-h1", "zb-v", NULL
extern const char *const RANK_ORDER_NAMES[];   // "dp-pp-cp-tp", "pp-dp-cp-tp", NULL
extern const char *const ROPE_TYPE_NAMES[];    // "default", "linear", "llama3", NULL
extern const char *const LR_SCHEDULE_NAMES[];  // "cosine", "linear", "constant", "wsd", NULL
extern const char *const DECAY_SHAPE_NAMES[];  // "linear", "cosine", "1-sqrt", NULL
extern const char *const CKPT_DTYPE_NAMES[];   // "fp32", "bf16", NULL
extern const char *const DEVICE_NAMES[];       // "cpu", "cuda", NULL
extern const char *const PRECISION_NAMES[];    // "auto", "fp32", "bf16", NULL
extern const char *const ATTENTION_NAMES[];    // "femtotron", "cudnn", NULL
extern const char *const COMM_NAMES[];         // "auto", "nccl", "mpi", NULL
const char *recompute_name(Recompute r);
const char *pp_schedule_name(PpSchedule s);
const char *rank_order_name(RankOrder o);
const char *rope_type_name(RopeType t);
const char *lr_schedule_name(LrSchedule s);
const char *device_name(Device d);
const char *precision_name(Precision p);
// Index of `name` in a NULL-terminated table of spellings, or -1.
int config_name_index(const char *const *names, const char *name);

typedef struct {
    // Hugging Face LlamaConfig keys (same names, same meaning).
    int hidden_size;              // D
    int intermediate_size;        // I (SwiGLU hidden width)
    int num_hidden_layers;        // L
    int num_attention_heads;      // H
    int num_key_value_heads;      // KV (grouped-query attention; H % KV == 0)
    int vocab_size;               // V
    int max_position_embeddings;  // longest sequence RoPE is configured for
    double rms_norm_eps;
    double rope_theta;
    // rope_scaling of Hugging Face's config.json, flattened (model/rope.h):
    RopeType rope_type;           // default (plain), linear or llama3
    double rope_factor;           // linear, llama3: how much longer the context is
    double rope_low_freq_factor;  // llama3: wavelengths above L / this are interpolated
    double rope_high_freq_factor; // llama3: wavelengths below L / this are kept
    int rope_original_max_position_embeddings;  // llama3: L, the context trained before scaling
    int head_dim;                 // hd of every attention head (0 = hidden_size / num_attention_heads)
    double initializer_range;     // std of the normal init of every matrix
    bool tie_word_embeddings;     // output head shares model.embed_tokens.weight
    // Mixture of experts (Hugging Face MixtralConfig keys, model_type "mixtral"): every
    // decoder layer's MLP is a sparse block of E SwiGLU experts of width
    // intermediate_size and a router (model/moe.h). 0 = the dense Llama MLP.
    int num_local_experts;        // E (0: dense)
    int num_experts_per_tok;      // k: experts each token is routed to (top-k)
    double router_aux_loss_coef;  // weight of the load-balancing loss in the training loss
    bool output_router_logits;    // true: the load-balancing loss is added (MixtralConfig's switch)
    int n_shared_experts;         // DeepSeek-style shared experts: a SwiGLU of n * intermediate_size
                                  // every token goes through, added to the routed experts' output
    char from[CFG_PATH_MAX];      // "" or a Hugging Face model directory to start from
} ModelConfig;

// hd: model.head_dim, or hidden_size / num_attention_heads when it is 0.
int model_head_dim(const ModelConfig *m);

// data.train / data.val: one file or glob of llm.c token shards, or a weighted
// mixture of several (config_data_sources below; data/mixture.h).
#define CFG_DATA_MAX 8192
typedef struct {
    char train[CFG_DATA_MAX];  // shards, or a mixture of sources
    char val[CFG_DATA_MAX];    // "" or validation shards, or a mixture
    bool shuffle;              // seeded permutation of sequences per epoch
} DataConfig;

// One source of a data mixture: a file or glob of shards and its weight.
#define CFG_MAX_SOURCES 32
typedef struct {
    char path[CFG_PATH_MAX];
    double weight;  // > 0, as given (data/mixture.c normalises)
} DataSource;

// Parse data.train or data.val (key names it in errors) into at most
// CFG_MAX_SOURCES sources (out: CFG_MAX_SOURCES); returns their count (0 for "").
// Three spellings:
//   "web/*.bin"                                    one source, weight 1
//   "web/*.bin:0.7,code/*.bin:0.3"                 the command-line form: every
//                                                  comma-separated item ends in :WEIGHT
//   [{"path": "web/*.bin", "weight": 0.7}, ...]    a JSON config's list (stored as
//                                                  that JSON text)
// A string none of whose items ends in :NUMBER is one path (commas and colons
// allowed). Fatal, naming the key, on a malformed list, a weight that is not a
// finite positive number, an empty path, or too many sources.
int config_data_sources(const char *spec, const char *key, DataSource *out);

typedef struct {
    uint64_t seed;
    int steps;             // optimizer steps to train (total, counting resumed ones)
    int seq_length;        // S: tokens per sequence (targets are shifted by one)
    int micro_batch_size;  // B: sequences per micro-batch per data-parallel rank
    int grad_acc_steps;    // micro-batches per optimizer step (0 = derive)
    int global_batch_size; // G: sequences per optimizer step (0 = derive)
    double lr, min_lr;
    double init_lr;        // where the warmup starts
    int warmup_steps;
    LrSchedule lr_schedule;  // after warmup: cosine, linear, constant or wsd (train/schedule.h)
    int decay_steps;         // wsd: steps of the final decay (0: decay_fraction of steps)
    double decay_fraction;   // wsd: the final decay as a fraction of training.steps
    DecayShape decay_shape;  // wsd: linear, cosine or 1-sqrt (train/schedule.h)
    double weight_decay, beta1, beta2, eps;
    double grad_clip;      // max global gradient L2 norm; 0 disables clipping
    int threads;           // threads per rank (0 = cores / ranks on the node)
    double peak_flops;     // FLOP/s per rank for MFU (0 = measure GEMM peak)
    int max_bad_steps;     // stop after this many non-finite steps in a row
    Recompute recompute;   // activation recomputation
    int keep_bf16_inputs;  // 1: under bf16 and recompute none or selective, a dense layer keeps its
                           // norms' and SwiGLU's bf16 outputs for the backward (ModelShard.keep16)
    Device device;         // cpu or cuda: the backend the binary must be built with
    Precision precision;   // fp32 or bf16 (auto until config_validate resolves it)
    AttentionKernels attention;  // femtotron's attention kernels or cuDNN's
} TrainingConfig;

// wsd: the steps of the final decay, decay_steps or decay_fraction * steps rounded
// (0 for the other schedules).
int training_decay_steps(const TrainingConfig *t);

typedef struct {
    int dp, tp, pp, cp;  // process grid; product = world size
    int zero;            // ZeRO stage 0..3
    int ep;              // expert parallelism: experts split over ep ranks taken from within dp x cp
    bool sequence_parallel;  // norms and residual stream on token shards (tp > 1)
    RankOrder order;     // rank order, outermost first
    double bucket_mb;    // data-parallel gradient bucket size in MiB
    bool overlap;        // reduce gradient buckets during backward (false: after it)
    double timeout_s;    // abort the job when a collective takes longer than this
    CommLibrary comm;    // NCCL or MPI for the collectives of buffers (auto: see CommLibrary)
    PpSchedule pp_schedule;  // pipeline schedule
    int pp_virtual;      // model chunks per pipeline rank (interleaved schedule)
    char pp_layers[CFG_PATH_MAX];    // "" (balanced) or layers per (virtual) stage, "3,3,2"
    char pp_costs[CFG_PATH_MAX];     // zero-bubble lists' per-pass costs: "flops", "unit" or "f:i:w,..." per stage
    bool auto_layout;    // parallel.auto: the planner picks dp/tp/pp/cp/zero/... for the world size
    double memory_gb;    // per-rank memory budget of the planner (0 = this machine's RAM / ranks)
    char profile[CFG_PATH_MAX];  // "" or a hardware profile JSON from `femtotron bench`
} ParallelConfig;

typedef struct {
    char dir[CFG_PATH_MAX];  // "" disables checkpoints
    int every;               // save every N steps (0 = only at the end)
    bool resume;             // continue from the newest checkpoint in DIR
    bool async;              // write checkpoints from a snapshot in a background thread
    int keep;                // keep the newest N checkpoints (0 = all)
    int keep_every;          // ... and every checkpoint whose step is a multiple of this (0 = none)
    CkptDtype dtype;         // model.safetensors in fp32, or bf16 (fp32 master weights kept
                             // in optimizer.safetensors for an exact resume)
} CheckpointConfig;

typedef struct {
    char metrics[CFG_PATH_MAX];  // "" or path of the JSON-lines metrics file
    int every;                   // print/log every N steps
    int val_every;               // validation every N steps (0 = never)
    int val_batches;             // micro-batches per validation
    bool verbose;                // every rank prints its grid coordinates at start-up
    char trace[CFG_PATH_MAX];    // "" or path of a Chrome trace-event JSON timeline
} LoggingConfig;

typedef struct {
    ModelConfig model;
    DataConfig data;
    TrainingConfig training;
    ParallelConfig parallel;
    CheckpointConfig checkpoint;
    LoggingConfig logging;
    // Internal to the config_*.c files: bit i (word i / 64) is set when key i of the key table
    // (config_keys.c) was given by a config file or config_set (not left at its
    // default). model.from fills only the model keys whose bit is clear, so an
    // explicit key always wins whatever order the file and overrides arrive in.
    uint64_t keys_set[CFG_KEYS_WORDS];
} Config;

// Fill every field with its documented default.
void config_defaults(Config *c);

// Read a run config JSON file into c (on top of whatever c holds). Unknown
// sections/keys and wrong types are fatal errors naming the key (die()).
// If model.from is set, the model keys are read from FROM/config.json first;
// keys given inline then override them.
void config_load_file(Config *c, const char *path);

// Parse a JSON text (same rules as config_load_file; `origin` names it in errors).
void config_load_json(Config *c, const char *json_text, const char *origin);

// Apply one override `section.key` = `value` (value parsed by the key's type).
void config_set(Config *c, const char *dotted_key, const char *value);

// Apply argv-style overrides: each "--section.key value" pair; returns the number
// of argv entries consumed. Anything else is a fatal error naming the argument.
int config_apply_args(Config *c, int argc, char **argv);

// Precedence of the model keys: defaults < FROM/config.json < the run config's
// model section < command-line overrides. Every key given by a file or config_set
// is remembered (Config.keys_set); when model.from is non-empty this fills every
// model key NOT given explicitly from FROM/config.json (transformers' LlamaConfig
// default where that file lacks the key). Dies naming the feature when the file
// asks for something this trainer cannot honour (rope_scaling, biases, ...).
// Idempotent; config_load_json, config_set("model.from") and config_validate call
// it, so main.c needs only: config_defaults, config_load_file, config_apply_args,
// config_validate. Fields assigned directly (not via config_set) count as not
// explicit and are replaced when model.from is set.
void config_resolve_model(Config *c);

// Check every value and every cross-key constraint (heads divisible by kv heads,
// seq_length <= max_position_embeddings, dp*tp*pp*cp == world_size, batch sizes
// that divide, ...). Derives grad_acc_steps / global_batch_size. Fatal on error.
void config_validate(Config *c, int world_size);

// After config_validate: fatal unless the binary's backend (the caller passes
// ops_backend(), which config cannot include) is training.device, and unless
// training.precision is fp32 or the backend has bf16 kernels (bf16_ready). Each
// message names the binary to build and run instead.
void config_check_backend(const Config *c, Device backend, int bf16_ready);

// The part of config_validate that decides whether a layout can train this model
// and batch (model, training and parallel values, the batch sizes, the tensor-,
// context- and pipeline-parallel rules), without the data, checkpoint and logging
// keys and without reading model.from. The planner offers only layouts this
// accepts (plan.c), so it never proposes what `train` refuses. Fatal on error.
void config_validate_layout(Config *c, int world_size);

// Print the config reference (every key, type, default, meaning) for --help.
void config_print_help(void);

// Write the model section as a Hugging Face config.json (LlamaForCausalLM). Every
// key of model.from's config.json this file does not write itself is kept as it
// was there (bos/eos/pad ids, use_cache, ...); bos_id / eos_id (>= 0) fill
// bos_token_id / eos_token_id where that source does not give them (-1: unknown).
// torch_dtype says how the weights are stored ("float32" or "bfloat16").
void config_write_hf_json(const ModelConfig *m, const char *path, int64_t bos_id, int64_t eos_id,
                          CkptDtype dtype);
// generation_config.json beside it: model.from's own when it has one, else the
// bos/eos ids of the config.json at config_path (when it names them).
void config_write_generation_json(const ModelConfig *m, const char *config_path, const char *path);

// Write the whole config as JSON text (for checkpoints' trainer state). Caller frees.
char *config_to_json(const Config *c);

#endif

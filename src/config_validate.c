// config_validate.c — the rules a run configuration must satisfy before any work
// (config_validate): each key's range, the cross-key rules of the model, batch,
// tensor, context and pipeline parallelism, and the derived batch sizes.
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// ---------------------------------------------------------------- validation

static void need_int_min(const char *name, int v, int min) {
    if (v < min) die("%s = %d: must be at least %d", name, v, min);
}

static void need_positive(const char *name, double v) {
    if (!(v > 0)) die("%s = %g: must be greater than 0", name, v);
}

static void need_nonnegative(const char *name, double v) {
    if (!(v >= 0)) die("%s = %g: must be 0 or more", name, v);
}

static void validate_model(const ModelConfig *m) {
    need_int_min("model.hidden_size", m->hidden_size, 1);
    need_int_min("model.intermediate_size", m->intermediate_size, 1);
    need_int_min("model.num_hidden_layers", m->num_hidden_layers, 1);
    need_int_min("model.num_attention_heads", m->num_attention_heads, 1);
    need_int_min("model.num_key_value_heads", m->num_key_value_heads, 1);
    need_int_min("model.vocab_size", m->vocab_size, 2);
    need_int_min("model.max_position_embeddings", m->max_position_embeddings, 1);
    need_int_min("model.head_dim", m->head_dim, 0);
    if (m->head_dim == 0 && m->hidden_size % m->num_attention_heads != 0)
        die("model.hidden_size = %d is not divisible by model.num_attention_heads = %d (or give "
            "model.head_dim)", m->hidden_size, m->num_attention_heads);
    int hd = model_head_dim(m);
    if (hd % 2 != 0)
        die("head dim = %d (%s) is odd: RoPE rotates pairs, so it must be even", hd,
            m->head_dim ? "model.head_dim" : "model.hidden_size / model.num_attention_heads");
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        die("model.num_attention_heads = %d is not divisible by model.num_key_value_heads = %d",
            m->num_attention_heads, m->num_key_value_heads);
    need_positive("model.rms_norm_eps", m->rms_norm_eps);
    need_positive("model.rope_theta", m->rope_theta);
    if (m->rope_type != ROPE_DEFAULT && !(m->rope_factor >= 1))
        die("model.rope_factor = %g with model.rope_type = \"%s\": must be at least 1 (it stretches "
            "the context)", m->rope_factor, rope_type_name(m->rope_type));
    if (m->rope_type == ROPE_LLAMA3) {
        need_positive("model.rope_low_freq_factor", m->rope_low_freq_factor);
        if (!(m->rope_high_freq_factor > m->rope_low_freq_factor))
            die("model.rope_high_freq_factor = %g must exceed model.rope_low_freq_factor = %g (llama3 "
                "RoPE blends between the two wavelengths)", m->rope_high_freq_factor, m->rope_low_freq_factor);
        need_int_min("model.rope_original_max_position_embeddings", m->rope_original_max_position_embeddings, 1);
    }
    need_nonnegative("model.initializer_range", m->initializer_range);
    need_int_min("model.num_local_experts", m->num_local_experts, 0);
    need_int_min("model.n_shared_experts", m->n_shared_experts, 0);
    if (m->n_shared_experts > 0 && m->num_local_experts == 0)
        die("model.n_shared_experts = %d needs a mixture-of-experts model (model.num_local_experts > 0)",
            m->n_shared_experts);
    if (m->num_local_experts > 0) {
        if (m->num_experts_per_tok < 1 || m->num_experts_per_tok > m->num_local_experts)
            die("model.num_experts_per_tok = %d: must be between 1 and model.num_local_experts = %d",
                m->num_experts_per_tok, m->num_local_experts);
        need_nonnegative("model.router_aux_loss_coef", m->router_aux_loss_coef);
    }
}

// training.precision "auto" becomes bf16 on cuda and fp32 on cpu (bf16 on the CPU
// is asked for by name: the oneMKL build has its products, config_check_backend).
static void resolve_precision(TrainingConfig *t) {
    if (t->precision == PRECISION_AUTO) t->precision = t->device == DEVICE_CUDA ? PRECISION_BF16 : PRECISION_FP32;
}

void config_check_backend(const Config *c, Device backend, int bf16_ready) {
    const TrainingConfig *t = &c->training;
    if (t->device != backend && backend == DEVICE_CPU)
        die("training.device = %s, but this is the CPU build (./femtotron): build the CUDA one with "
            "`make cuda` and run ./femtotron-cuda on a machine with an NVIDIA GPU, or set training.device = cpu",
            device_name(t->device));
    if (t->device != backend)
        die("training.device = %s, but this is the CUDA build (./femtotron-cuda): run ./femtotron "
            "(`make`) for the CPU, or set training.device = cuda", device_name(t->device));
    if (c->parallel.comm == COMM_NCCL && backend == DEVICE_CPU)
        die("parallel.comm = nccl: this is the CPU build (./femtotron), which has no NCCL; build ./femtotron-cuda "
            "with `make cuda`, or set parallel.comm = mpi or auto");
    if (t->precision == PRECISION_BF16 && !bf16_ready && backend == DEVICE_CPU)
        die("training.precision = bf16 on the CPU needs the oneMKL build, whose BLAS has a bf16 product "
            "(bash scripts/install_mkl.sh && make BLAS=mkl build-mkl/femtotron; AMX runs it on recent Xeons): "
            "this build's BLAS has none; set training.precision = fp32, or run ./femtotron-cuda (make cuda) "
            "with training.device = cuda on a GPU");
    if (t->precision == PRECISION_BF16 && !bf16_ready)
        die("training.precision = bf16 (the default on cuda): this build has no bf16 kernels; set "
            "training.precision = fp32");
}

static void validate_training(TrainingConfig *t, int max_pos) {
    resolve_precision(t);
    need_int_min("training.steps", t->steps, 1);
    need_int_min("training.seq_length", t->seq_length, 1);
    if (t->seq_length > max_pos)
        die("training.seq_length = %d exceeds model.max_position_embeddings = %d", t->seq_length, max_pos);
    need_int_min("training.micro_batch_size", t->micro_batch_size, 1);
    need_int_min("training.grad_acc_steps", t->grad_acc_steps, 0);
    need_int_min("training.global_batch_size", t->global_batch_size, 0);
    need_positive("training.lr", t->lr);
    need_nonnegative("training.min_lr", t->min_lr);
    if (t->min_lr > t->lr) die("training.min_lr = %g exceeds training.lr = %g", t->min_lr, t->lr);
    need_int_min("training.warmup_steps", t->warmup_steps, 0);
    need_nonnegative("training.init_lr", t->init_lr);
    if (t->init_lr > t->lr) die("training.init_lr = %g exceeds training.lr = %g", t->init_lr, t->lr);
    need_int_min("training.decay_steps", t->decay_steps, 0);
    if (!(t->decay_fraction > 0 && t->decay_fraction <= 1))
        die("training.decay_fraction = %g: must be in (0, 1]", t->decay_fraction);
    if (t->lr_schedule != LR_WSD && (t->decay_steps > 0 || t->decay_shape != DECAY_LINEAR))
        die("training.decay_steps / training.decay_shape shape the final decay of lr_schedule \"wsd\"; "
            "training.lr_schedule is \"%s\"", lr_schedule_name(t->lr_schedule));
    if (t->lr_schedule == LR_WSD) {
        int D = training_decay_steps(t);
        if (D < 1)
            die("training.lr_schedule \"wsd\": the decay has 0 steps (training.decay_fraction = %g of "
                "training.steps = %d); raise decay_fraction or give training.decay_steps",
                t->decay_fraction, t->steps);
        if (D > t->steps - t->warmup_steps)
            die("training.lr_schedule \"wsd\": %d decay steps do not fit after %d warmup steps in "
                "training.steps = %d", D, t->warmup_steps, t->steps);
    }
    need_nonnegative("training.weight_decay", t->weight_decay);
    if (!(t->beta1 >= 0 && t->beta1 < 1)) die("training.beta1 = %g: must be in [0, 1)", t->beta1);
    if (!(t->beta2 >= 0 && t->beta2 < 1)) die("training.beta2 = %g: must be in [0, 1)", t->beta2);
    need_positive("training.eps", t->eps);
    need_nonnegative("training.grad_clip", t->grad_clip);
    need_int_min("training.threads", t->threads, 0);
    need_nonnegative("training.peak_flops", t->peak_flops);
    need_int_min("training.max_bad_steps", t->max_bad_steps, 1);
}

static void validate_parallel(const ParallelConfig *p, int world_size) {
    need_int_min("parallel.dp", p->dp, 1);
    need_int_min("parallel.tp", p->tp, 1);
    need_int_min("parallel.pp", p->pp, 1);
    need_int_min("parallel.cp", p->cp, 1);
    need_int_min("parallel.ep", p->ep, 1);
    if (p->zero < 0 || p->zero > 3) die("parallel.zero = %d: must be 0, 1, 2 or 3", p->zero);
    need_positive("parallel.bucket_mb", p->bucket_mb);
    need_int_min("parallel.pp_virtual", p->pp_virtual, 1);
    if (p->pp_virtual > 1 && p->pp_schedule != PP_INTERLEAVED && p->pp_schedule != PP_ZB_V)
        die("parallel.pp_virtual = %d needs parallel.pp_schedule \"interleaved\" or \"zb-v\" (it is \"%s\")",
            p->pp_virtual, pp_schedule_name(p->pp_schedule));
    if (p->pp_schedule == PP_ZB_V && p->pp_virtual != 2)
        die("parallel.pp_schedule \"zb-v\" places two chunks per rank in a V: it needs parallel.pp_virtual = 2 "
            "(it is %d)", p->pp_virtual);
    need_positive("parallel.timeout_s", p->timeout_s);
    need_nonnegative("parallel.memory_gb", p->memory_gb);
    long long n = (long long)p->dp * p->tp * p->pp * p->cp;
    if (n != world_size)
        die("parallel.dp * tp * pp * cp = %d * %d * %d * %d = %lld, but the job has %d rank%s; they must be equal",
            p->dp, p->tp, p->pp, p->cp, n, world_size, world_size == 1 ? "" : "s");
}

// Pipeline constraints that involve the model and the batch.
// Tensor-parallel constraints: every rank gets whole heads and an equal FFN slice.
static void validate_tensor(const Config *c) {
    const int tp = c->parallel.tp;
    const ModelConfig *m = &c->model;
    if (m->num_attention_heads % tp != 0)
        die("model.num_attention_heads = %d is not divisible by parallel.tp = %d", m->num_attention_heads, tp);
    if (m->num_key_value_heads % tp != 0)
        die("model.num_key_value_heads = %d is not divisible by parallel.tp = %d (key/value heads are "
            "split over tensor-parallel ranks, not replicated)", m->num_key_value_heads, tp);
    if (m->intermediate_size % tp != 0)
        die("model.intermediate_size = %d is not divisible by parallel.tp = %d", m->intermediate_size, tp);
    const int cp = c->parallel.cp;
    if (cp > 1 && c->training.seq_length % (2 * cp) != 0)
        die("parallel.cp = %d: training.seq_length = %d must be divisible by 2 * cp = %d (each rank "
            "holds two of the 2*cp chunks of every sequence)", cp, c->training.seq_length, 2 * cp);
    // Sequence parallelism splits each rank's tokens (after the cp split) over tp:
    // name both counts, so the number that failed is the one printed.
    const int B = c->training.micro_batch_size, S = c->training.seq_length;
    const long long tokens = (long long)B * S, per_rank = (long long)B * (S / cp);
    if (c->parallel.sequence_parallel && tp > 1 && per_rank % tp != 0) {
        if (cp > 1)
            die("parallel.sequence_parallel: the micro-batch's %lld tokens (training.micro_batch_size * "
                "training.seq_length = %d * %d) split over parallel.cp = %d leave %lld per rank, not "
                "divisible by parallel.tp = %d", tokens, B, S, cp, per_rank, tp);
        die("parallel.sequence_parallel: the micro-batch's %lld tokens (training.micro_batch_size * "
            "training.seq_length = %d * %d) are not divisible by parallel.tp = %d", tokens, B, S, tp);
    }
}

// Mixture-of-experts layers: what this version composes them with.
static void validate_moe(const Config *c) {
    const ParallelConfig *p = &c->parallel;
    const ModelConfig *m = &c->model;
    if (p->ep > 1 && m->num_local_experts == 0)
        die("parallel.ep = %d needs a mixture-of-experts model (model.num_local_experts > 0)", p->ep);
    if (p->ep > 1 && (p->dp * p->cp) % p->ep != 0)
        die("parallel.ep = %d does not divide parallel.dp * parallel.cp = %d * %d = %d (expert-parallel "
            "ranks are taken from within the data- and context-parallel group)", p->ep, p->dp, p->cp,
            p->dp * p->cp);
    if (p->ep > 1 && m->num_local_experts % p->ep != 0)
        die("parallel.ep = %d does not divide model.num_local_experts = %d (each rank computes the same "
            "number of experts)", p->ep, m->num_local_experts);
    if (m->num_local_experts == 0) return;
    // The split backward of the zero-bubble schedules (model/llama_split.c) is
    // written for the dense MLP; an expert layer's backward is not split yet.
    if (p->pp_schedule == PP_ZB_H1 || p->pp_schedule == PP_ZB_V)
        die("parallel.pp_schedule \"%s\" with a mixture-of-experts model (model.num_local_experts = %d) is not "
            "supported: the zero-bubble schedules split the dense MLP's backward only; use 1f1b or interleaved",
            pp_schedule_name(p->pp_schedule), m->num_local_experts);
}

// parallel.pp_costs: "flops", "unit", or one "F:I:W" triple of positive numbers
// per virtual stage (engines/pipeline_zb.h: pp_costs_of_spec reads it).
static void validate_pp_costs(const ParallelConfig *p, int chunks) {
    const char *spec = p->pp_costs;
    if (!strcmp(spec, "flops") || !strcmp(spec, "unit")) return;
    if (!strcmp(spec, "measure")) {
        if (p->pp_schedule != PP_ZB_H1 && p->pp_schedule != PP_ZB_V)
            die("parallel.pp_costs = \"measure\" times the passes to rebuild the zero-bubble schedules' lists "
                "(zb-h1, zb-v), not parallel.pp_schedule \"%s\"", pp_schedule_name(p->pp_schedule));
        return;
    }
    if (p->pp_schedule != PP_ZB_H1 && p->pp_schedule != PP_ZB_V)
        die("parallel.pp_costs = \"%s\": per-stage costs shape only the zero-bubble schedules (zb-h1, zb-v), "
            "not parallel.pp_schedule \"%s\"", spec, pp_schedule_name(p->pp_schedule));
    int n = 0;
    for (const char *q = spec; *q; n++) {
        for (int j = 0; j < 3; j++) {
            char *end;
            double x = strtod(q, &end);
            if (end == q || !(x > 0.0) || x > 1e300)
                die("parallel.pp_costs = \"%s\": stage %d: expected three positive numbers F:I:W (forward, "
                    "input-gradient and weight-gradient costs), or \"flops\", \"unit\" or \"measure\"", spec, n);
            if (j < 2 && *end != ':')
                die("parallel.pp_costs = \"%s\": stage %d: expected F:I:W separated by ':'", spec, n);
            if (j == 2 && *end && *end != ',')
                die("parallel.pp_costs = \"%s\": unexpected '%c' after stage %d's costs", spec, *end, n);
            q = *end ? end + 1 : end;
        }
    }
    if (n != chunks)
        die("parallel.pp_costs = \"%s\" gives costs of %d stages; expected %d (parallel.pp * parallel.pp_virtual)",
            spec, n, chunks);
}

static void validate_pipeline(const Config *c) {
    const ParallelConfig *p = &c->parallel;
    int chunks = p->pp * p->pp_virtual, L = c->model.num_hidden_layers;
    if (chunks > L)
        die("parallel.pp * parallel.pp_virtual = %d * %d = %d pipeline stages but the model has only "
            "%d layers (model.num_hidden_layers): a stage would be empty", p->pp, p->pp_virtual, chunks, L);
    if (p->pp_schedule == PP_INTERLEAVED && c->training.grad_acc_steps % p->pp != 0)
        die("parallel.pp_schedule \"interleaved\" needs the micro-batches per step "
            "(training.grad_acc_steps = %d) to be a multiple of parallel.pp = %d",
            c->training.grad_acc_steps, p->pp);
    validate_pp_costs(p, chunks);
    if (!p->pp_layers[0]) return;
    int n = 0, sum = 0;
    for (const char *q = p->pp_layers; *q;) {
        char *end;
        long k = strtol(q, &end, 10);
        if (end == q || k < 1)
            die("parallel.pp_layers = \"%s\": expected positive layer counts separated by commas, "
                "one per stage (an empty stage is not allowed)", p->pp_layers);
        n++;
        sum += (int)k;
        q = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("parallel.pp_layers = \"%s\": unexpected '%c'", p->pp_layers, *end);
    }
    if (n != chunks || sum != L)
        die("parallel.pp_layers = \"%s\" gives %d stages with %d layers; expected %d stages "
            "(parallel.pp * parallel.pp_virtual) with %d layers in total", p->pp_layers, n, sum, chunks, L);
}

// G = A * B * dp; whichever of G (global_batch_size) and A (grad_acc_steps) is 0
// is derived from the other.
static void derive_batch(TrainingConfig *t, int dp) {
    long long B = t->micro_batch_size, per_acc = B * dp;
    if (t->global_batch_size == 0 && t->grad_acc_steps == 0) t->grad_acc_steps = 1;
    if (t->global_batch_size == 0) {
        long long g = t->grad_acc_steps * per_acc;
        if (g > INT_MAX)
            die("training.global_batch_size = training.grad_acc_steps * training.micro_batch_size * parallel.dp "
                "= %d * %lld * %d is too large", t->grad_acc_steps, B, dp);
        t->global_batch_size = (int)g;
    } else if (t->grad_acc_steps == 0) {
        if (t->global_batch_size % per_acc != 0)
            die("training.global_batch_size = %d is not a multiple of training.micro_batch_size * parallel.dp "
                "= %lld * %d = %lld", t->global_batch_size, B, dp, per_acc);
        t->grad_acc_steps = (int)(t->global_batch_size / per_acc);
    } else if ((long long)t->grad_acc_steps * per_acc != t->global_batch_size) {
        die("training.global_batch_size = %d but training.grad_acc_steps * training.micro_batch_size * "
            "parallel.dp = %d * %lld * %d = %lld; set one of global_batch_size and grad_acc_steps to 0 to "
            "derive it", t->global_batch_size, t->grad_acc_steps, B, dp, (long long)t->grad_acc_steps * per_acc);
    }
}

// training.keep_bf16_inputs keeps bf16 outputs that only a dense bf16 layer writes,
// and that only a layer with its own slots can keep (full recomputation keeps each
// layer's input alone): anywhere else it would change nothing, so it is refused.
static void validate_keep_bf16_inputs(const Config *c) {
    const TrainingConfig *t = &c->training;
    if (!t->keep_bf16_inputs) return;
    if (t->precision != PRECISION_BF16)
        die("training.keep_bf16_inputs = true needs training.precision = bf16 (an fp32 run has no bf16 outputs "
            "to keep)");
    if (t->recompute == RECOMPUTE_FULL)
        die("training.keep_bf16_inputs = true with training.recompute = full: full recomputation keeps only "
            "each layer's input (set recompute none or selective, or keep_bf16_inputs false)");
    if (c->model.num_local_experts > 0)
        die("training.keep_bf16_inputs = true with a mixture-of-experts model (model.num_local_experts = %d): "
            "its MLP rows stay fp32 and are kept anyway", c->model.num_local_experts);
}

// training.attention = cudnn: cuDNN's kernels take bf16 on a GPU, and mask causally
// by index, which the ring's blocks of context parallelism are not (their keys are
// another rank's chunks): with cp > 1 the key would change nothing, so it is refused.
static void validate_attention(const Config *c) {
    const TrainingConfig *t = &c->training;
    if (t->attention != ATTENTION_CUDNN) return;
    if (t->device != DEVICE_CUDA)
        die("training.attention = cudnn needs training.device = cuda (cuDNN runs on NVIDIA GPUs; "
            "set training.attention = femtotron)");
    if (t->precision != PRECISION_BF16)
        die("training.attention = cudnn needs training.precision = bf16 (cuDNN's fused attention takes bf16; "
            "set training.attention = femtotron for fp32)");
    if (c->parallel.cp > 1)
        die("training.attention = cudnn with parallel.cp = %d: the ring's blocks of keys from other ranks need "
            "femtotron's kernels, which take positions (set training.attention = femtotron, or parallel.cp = 1)",
            c->parallel.cp);
}

void config_validate_layout(Config *c, int world_size) {
    validate_model(&c->model);
    validate_training(&c->training, c->model.max_position_embeddings);
    validate_parallel(&c->parallel, world_size);
    validate_attention(c);
    validate_keep_bf16_inputs(c);
    derive_batch(&c->training, c->parallel.dp);
    validate_pipeline(c);
    validate_tensor(c);
    validate_moe(c);
}

void config_validate(Config *c, int world_size) {
    config_resolve_model(c);
    config_validate_layout(c, world_size);
    if (!c->data.train[0])
        die("data.train is not set: give a token shard file or glob (see ./femtotron prepare)");
    DataSource *src = xmalloc(CFG_MAX_SOURCES * sizeof *src, "data sources");  // (CFG_MAX_SOURCES)
    config_data_sources(c->data.train, "data.train", src);  // fatal when malformed
    config_data_sources(c->data.val, "data.val", src);
    free(src);
    need_int_min("checkpoint.every", c->checkpoint.every, 0);
    need_int_min("checkpoint.keep", c->checkpoint.keep, 0);
    need_int_min("checkpoint.keep_every", c->checkpoint.keep_every, 0);
    if (c->checkpoint.keep_every > 0 && c->checkpoint.keep == 0)
        die("checkpoint.keep_every = %d needs checkpoint.keep (with keep = 0 every checkpoint is kept)",
            c->checkpoint.keep_every);
    if ((c->checkpoint.keep > 0 || c->checkpoint.every > 0 || c->checkpoint.dtype != CKPT_DTYPE_FP32) &&
        !c->checkpoint.dir[0])
        die("checkpoint.%s is set but checkpoint.dir is not: give the directory to save into",
            c->checkpoint.keep > 0 ? "keep" : c->checkpoint.every > 0 ? "every" : "dtype");
    if (c->checkpoint.resume && !c->checkpoint.dir[0])
        die("checkpoint.resume = true but checkpoint.dir is not set: give the directory to resume from");
    need_int_min("logging.every", c->logging.every, 1);
    need_int_min("logging.val_every", c->logging.val_every, 0);
    need_int_min("logging.val_batches", c->logging.val_batches, 1);
    if (c->logging.val_every > 0 && !c->data.val[0])
        die("logging.val_every = %d but data.val is not set: give validation shards or set "
            "logging.val_every to 0", c->logging.val_every);
}

// train/trainer.c — one rank's training: micro-batches, gradient accumulation and
// reduction, clipping, AdamW, validation, checkpoints.
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "parallel/context_parallel.h"
#include "train/schedule.h"
#include "train/trace.h"
#include "util.h"

void trainer_build_model(LlamaModel *m, const Config *cfg, int tp_i, int cp_i) {
    llama_build_tp(m, &cfg->model, cfg->parallel.tp, tp_i, cfg->parallel.sequence_parallel);
    m->cp = cfg->parallel.cp;
    m->cp_rank = cp_i;
    m->recompute = recompute_from_name(cfg->training.recompute);  // before the activations are planned
}

void trainer_sequence_buffers(int32_t **tokens, int32_t **targets, const Config *cfg,
                              MemTally *plan_only) {
    const size_t full = (size_t)cfg->training.micro_batch_size * cfg->training.seq_length;
    *tokens = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");   // (B*S)
    *targets = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");  // (B*S)
}

void trainer_init(Trainer *t, const Config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    const TrainingConfig *tc = &cfg->training;
    const Grid *g = comm_grid();
    trainer_build_model(&t->model, cfg, g->tp_i, g->cp_i);
    trainer_sequence_buffers(&t->full_tokens, &t->full_targets, cfg, NULL);
    pp_init(&t->pipe, &t->model, cfg);
    dp_init(&t->dp, &t->model, &cfg->parallel, t->pipe.held);
    t->pieces = xmalloc(sizeof(CkptPiece) * (size_t)dp_max_pieces(&t->dp), "checkpoint pieces");
    dp_init_params(&t->dp, tc->seed, cfg->model.from);
    tokens_open(&t->train_data, cfg->data.train, tc->seq_length, cfg->model.vocab_size,
                cfg->data.shuffle, tc->seed);
    t->has_val = cfg->data.val[0] != '\0';
    if (t->has_val)
        tokens_open(&t->val_data, cfg->data.val, tc->seq_length, cfg->model.vocab_size, false,
                    tc->seed);
}

void trainer_free(Trainer *t) {
    tokens_close(&t->train_data);
    if (t->has_val) tokens_close(&t->val_data);
    pp_free(&t->pipe);
    buf_free(t->full_tokens);
    buf_free(t->full_targets);
    dp_free(&t->dp);
    free(t->pieces);
    llama_free(&t->model);
}

MemoryReport memory_report(const size_t bytes[MEM_KINDS]) {
    MemoryReport r = {bytes[MEM_PARAMS], bytes[MEM_GRADS], bytes[MEM_OPTIMIZER],
                      bytes[MEM_ACTIVATIONS], bytes[MEM_COMM]};
    return r;
}

MemoryReport trainer_memory(const Trainer *t) {
    (void)t;  // one trainer per process: the counters are its buffers
    size_t bytes[MEM_KINDS];
    for (int k = 0; k < MEM_KINDS; k++) bytes[k] = mem_allocated((MemKind)k);
    return memory_report(bytes);
}

// Micro-batch `micro` of the current step for this rank: data-parallel rank r
// takes global positions t*G + (micro*dp + r)*B .. + B - 1, so the ranks
// interleave and the set is exactly the step's global batch. Validation
// (batch_step < 0) takes the fixed positions micro*B .. of the val data.
// Under context parallelism every cp rank reads the same sequences and keeps its
// two zigzag chunks of each.
static void fill_batch(void *ctx, int micro, int32_t *tokens, int32_t *targets) {
    Trainer *t = ctx;
    const TrainingConfig *tc = &t->cfg.training;
    const uint64_t B = (uint64_t)tc->micro_batch_size;
    const Grid *g = comm_grid();
    int32_t *in = g->cp > 1 ? t->full_tokens : tokens, *tg = g->cp > 1 ? t->full_targets : targets;
    if (t->batch_step < 0) {
        tokens_fill_batch(&t->val_data, (uint64_t)micro * B, (int)B, in, tg);
    } else {
        uint64_t p0 = (uint64_t)t->batch_step * (uint64_t)tc->global_batch_size +
                      ((uint64_t)micro * (uint64_t)t->cfg.parallel.dp + (uint64_t)g->dp_i) * B;
        tokens_fill_batch(&t->train_data, p0, (int)B, in, tg);
    }
    if (g->cp > 1) {
        cp_take_local(in, tokens, (int)B, tc->seq_length, g->cp, g->cp_i);
        cp_take_local(tg, targets, (int)B, tc->seq_length, g->cp, g->cp_i);
    }
}

static void trace_cb(void *ctx, const char *what, int chunk, int micro, double t0, double t1) {
    Trainer *t = ctx;
    trace_event(what, t0, t1, t->batch_step + 1, chunk, micro);
}

double trainer_compute_grads(Trainer *t, int step) {
    const TrainingConfig *tc = &t->cfg.training;
    const uint64_t G = (uint64_t)tc->global_batch_size;
    // Invariant 1: every micro-batch's loss is divided by the token count of the
    // whole global batch, so summing over micro-batches and ranks gives the
    // gradient of the global mean — with or without a pipeline.
    const float grad_scale = (float)(1.0 / ((double)G * tc->seq_length));
    PpCallbacks cb = {t, fill_batch, trace_enabled() ? trace_cb : NULL};
    t->batch_step = step;
    dp_begin_step(&t->dp, tc->grad_acc_steps);
    double loss_sum = pp_run_step(&t->pipe, &t->model, &t->dp.access, &cb, grad_scale);
    double t0 = now_seconds();
    dp_finish_grads(&t->dp);
    trace_event("reduce-wait", t0, now_seconds(), step + 1, -1, -1);
    // The loss lives on the last pipeline stage of every data- and context-parallel rank.
    group_allreduce_sum_f64(GROUP_DPCP, &loss_sum, 1);
    group_allreduce_sum_f64(GROUP_PP, &loss_sum, 1);
    return loss_sum / ((double)G * tc->seq_length);
}

StepResult trainer_step(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    StepResult r = {0};
    r.step = t->state.step + 1;
    r.loss = trainer_compute_grads(t, t->state.step);
    r.grad_norm = dp_grad_norm(&t->dp);
    r.lr = lr_at_step(r.step, tc->steps, tc->warmup_steps, tc->lr, tc->min_lr);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        // Never let a NaN/inf into the weights or the moments. Every rank sees the
        // same reduced loss and norm, so every rank skips together.
        r.skipped = 1;
        if (++t->bad_steps >= tc->max_bad_steps)
            die("step %d: loss %g, gradient norm %g: %d steps in a row with a non-finite loss or "
                "gradient norm (training.max_bad_steps = %d); stopping. Lower training.lr or "
                "resume from the last checkpoint",
                r.step, r.loss, r.grad_norm, t->bad_steps, tc->max_bad_steps);
    } else {
        t->bad_steps = 0;
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1.
        double coef = tc->grad_clip > 0.0 ? tc->grad_clip / (r.grad_norm + 1e-6) : 1.0;
        double t0 = now_seconds();
        dp_clip_and_update(&t->dp, coef, (float)r.lr, tc, r.step);
        trace_event("optimizer", t0, now_seconds(), r.step, -1, -1);
    }
    t->state.step = r.step;
    t->state.consumed_sequences += (uint64_t)tc->global_batch_size;
    return r;
}

double trainer_validate(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    const int nb = t->cfg.logging.val_batches;
    PpCallbacks cb = {t, fill_batch, trace_enabled() ? trace_cb : NULL};
    // Every data-parallel rank evaluates the same fixed batches (ZeRO-3 gathers
    // are collective, so all ranks must run the same forwards).
    t->batch_step = -1;
    double sum = pp_run_forward(&t->pipe, &t->model, &t->dp.access, &cb, nb);
    group_allreduce_sum_f64(GROUP_PP, &sum, 1);
    group_allreduce_sum_f64(GROUP_CP, &sum, 1);  // each cp rank scored its share of the tokens
    return sum / ((double)nb * tc->micro_batch_size * tc->seq_length);
}

void trainer_save(Trainer *t) {
    int np = dp_save_pieces(&t->dp, t->pieces);
    checkpoint_save_pieces(t->cfg.checkpoint.dir, &t->cfg, &t->model, t->pieces, np, &t->state);
}

void trainer_load(Trainer *t, const char *ckpt_dir) {
    int np = dp_load_pieces(&t->dp, t->pieces);
    checkpoint_load_pieces(ckpt_dir, &t->model, t->pieces, np, &t->state);
}

// train/trainer.c — one rank's training: micro-batches, gradient accumulation and
// reduction, clipping, AdamW, validation, checkpoints.
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "train/schedule.h"
#include "util.h"

void trainer_init(Trainer *t, const Config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    const TrainingConfig *tc = &cfg->training;
    llama_build(&t->model, &cfg->model);
    dp_init(&t->dp, &t->model, &cfg->parallel);
    t->pieces = xmalloc(sizeof(CkptPiece) * (size_t)dp_max_pieces(&t->dp), "checkpoint pieces");
    activations_alloc(&t->act, &t->model, tc->micro_batch_size, tc->seq_length,
                      cfg->model.rope_theta);
    size_t tokens = (size_t)tc->micro_batch_size * tc->seq_length;
    t->inputs = xmalloc(tokens * sizeof(int32_t), "input tokens");    // (B*S)
    t->targets = xmalloc(tokens * sizeof(int32_t), "target tokens");  // (B*S)
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
    activations_free(&t->act);
    dp_free(&t->dp);
    free(t->pieces);
    free(t->inputs);
    free(t->targets);
    llama_free(&t->model);
}

MemoryReport trainer_memory(const Trainer *t) {
    MemoryReport r;
    dp_memory(&t->dp, &r.params, &r.grads, &r.optimizer);
    r.activations = t->act.bytes;
    r.batch = 2 * (size_t)t->act.B * t->act.S * sizeof(int32_t);
    return r;
}

double trainer_compute_grads(Trainer *t, int step) {
    const TrainingConfig *tc = &t->cfg.training;
    const int B = tc->micro_batch_size, S = tc->seq_length, A = tc->grad_acc_steps;
    const int dp_size = t->cfg.parallel.dp, dp_i = comm_grid()->dp_i;
    const uint64_t G = (uint64_t)tc->global_batch_size;
    // Invariant 1: every micro-batch's loss is divided by the token count of the
    // whole global batch, so summing over micro-batches and ranks gives the
    // gradient of the global mean.
    const float grad_scale = (float)(1.0 / ((double)G * S));
    double loss_sum = 0.0;
    for (int a = 0; a < A; a++) {
        // Micro-batch a of data-parallel rank r holds global positions
        // t*G + (a*dp + r)*B .. + B - 1: the ranks interleave, the set is the step's.
        uint64_t p0 = (uint64_t)step * G + ((uint64_t)a * dp_size + dp_i) * B;
        tokens_fill_batch(&t->train_data, p0, B, t->inputs, t->targets);
        dp_begin_micro(&t->dp, a, A);
        loss_sum += llama_forward(&t->model, &t->dp.access, &t->act, t->inputs, t->targets,
                                  grad_scale);
        llama_backward(&t->model, &t->dp.access, &t->act, t->inputs);
        dp_finish_grads(&t->dp);
    }
    group_allreduce_sum_f64(GROUP_DP, &loss_sum, 1);
    return loss_sum / ((double)G * S);
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
        dp_clip_and_update(&t->dp, coef, (float)r.lr, tc, r.step);
    }
    t->state.step = r.step;
    t->state.consumed_sequences += (uint64_t)tc->global_batch_size;
    return r;
}

double trainer_validate(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    const int B = tc->micro_batch_size, S = tc->seq_length;
    const int nb = t->cfg.logging.val_batches;
    double sum = 0.0;
    // Every rank evaluates the same fixed batches (ZeRO-3 gathers are collective,
    // so all ranks must run the same forwards).
    for (int k = 0; k < nb; k++) {
        tokens_fill_batch(&t->val_data, (uint64_t)k * B, B, t->inputs, t->targets);
        sum += llama_forward_loss(&t->model, &t->dp.access, &t->act, t->inputs, t->targets);
    }
    return sum / ((double)nb * B * S);
}

void trainer_save(Trainer *t) {
    int np = dp_save_pieces(&t->dp, t->pieces);
    checkpoint_save_pieces(t->cfg.checkpoint.dir, &t->cfg, &t->model, t->pieces, np, &t->state);
}

void trainer_load(Trainer *t, const char *ckpt_dir) {
    int np = dp_load_pieces(&t->dp, t->pieces);
    checkpoint_load_pieces(ckpt_dir, &t->model, t->pieces, np, &t->state);
}

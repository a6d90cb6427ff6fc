// train/trainer.c — one rank's training: micro-batches, gradient accumulation and
// reduction, clipping, AdamW, validation, checkpoints.
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "train/schedule.h"
#include "train/trace.h"
#include "util.h"

void trainer_init(Trainer *t, const Config *cfg, GridCoords at) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    const TrainingConfig *tc = &cfg->training;
    rank_build(&t->rank, cfg, at, NULL);
    const size_t max_pieces = (size_t)dp_max_pieces(&t->rank.dp);
    t->pieces = xmalloc(sizeof(CkptPiece) * max_pieces, "checkpoint pieces");
    t->ckpt.async = cfg->checkpoint.async;
    t->ckpt.pieces = xmalloc(sizeof(CkptPiece) * max_pieces, "checkpoint pieces");
    t->ckpt.snap = xmalloc(sizeof(CkptPiece) * max_pieces, "checkpoint pieces");
    dp_init_params(&t->rank.dp, tc->seed, cfg->model.from);
    mixture_open(&t->train_data, cfg->data.train, "data.train", tc->seq_length,
                 cfg->model.vocab_size, cfg->data.shuffle, tc->seed);
    t->has_val = cfg->data.val[0] != '\0';
    if (t->has_val) {
        mixture_open(&t->val_data, cfg->data.val, "data.val", tc->seq_length, cfg->model.vocab_size,
                     false, tc->seed);
        t->val_loss_by_source = xcalloc((size_t)t->val_data.n * sizeof(double), "validation losses");
    }
}

void trainer_free(Trainer *t) {
    mixture_close(&t->train_data);
    if (t->has_val) mixture_close(&t->val_data);
    free(t->val_loss_by_source);
    checkpointer_finish(t);
    rank_free(&t->rank);
    free(t->pieces);
    free(t->ckpt.pieces);
    free(t->ckpt.snap);
}

// Micro-batch `micro` of the current step for this rank: data-parallel rank r
// takes global positions t*G + (micro*dp + r)*B .. + B - 1, so the ranks
// interleave and the set is exactly the step's global batch (which sequence a
// position reads: data/mixture.h). Validation (batch_step < 0) takes the fixed
// positions micro*B .. of one val source (val_source).
// Under context parallelism every cp rank reads the same sequences and keeps its
// two zigzag chunks of each.
static void fill_batch(void *ctx, int micro, int32_t *tokens, int32_t *targets) {
    Trainer *t = ctx;
    const TrainingConfig *tc = &t->cfg.training;
    const uint64_t B = (uint64_t)tc->micro_batch_size;
    const int split = t->cfg.parallel.cp > 1;  // read whole sequences, keep this rank's share
    int32_t *in = split ? t->rank.full_tokens : tokens, *tg = split ? t->rank.full_targets : targets;
    if (t->batch_step < 0) {
        tokens_fill_batch(&t->val_data.src[t->val_source], (uint64_t)micro * B, (int)B, in, tg);
    } else {
        uint64_t p0 = (uint64_t)t->batch_step * (uint64_t)tc->global_batch_size +
                      ((uint64_t)micro * (uint64_t)t->cfg.parallel.dp + (uint64_t)t->rank.at.dp) * B;
        mixture_fill_batch(&t->train_data, p0, (int)B, in, tg);
    }
    if (split) {
        llama_local_tokens(&t->rank.model, in, tokens, (int)B, tc->seq_length);
        llama_local_tokens(&t->rank.model, tg, targets, (int)B, tc->seq_length);
    }
}

static void trace_cb(void *ctx, const char *what, int chunk, int micro, double t0, double t1) {
    Trainer *t = ctx;
    trace_event(what, t0, t1, t->batch_step + 1, chunk, micro);
}

// The clock of a trace phase's start or end: while a trace is written, after the
// device's queued work (a GPU's ops return before they finish), so that a phase
// holds its kernels' time, not its launches'.
static double trace_clock(void) {
    if (trace_enabled()) ops_sync();
    return now_seconds();
}

double trainer_compute_grads(Trainer *t, int step) {
    const TrainingConfig *tc = &t->cfg.training;
    const uint64_t G = (uint64_t)tc->global_batch_size;
    // Invariant 1 (layout-independent numerics), rule 3: every micro-batch's loss is
    // divided by the token count of the whole global batch, so summing over
    // micro-batches and ranks gives the gradient of the global mean — with or
    // without a pipeline.
    const float grad_scale = (float)(1.0 / ((double)G * tc->seq_length));
    PpCallbacks cb = {t, fill_batch, trace_enabled() ? trace_cb : NULL};
    t->batch_step = step;
    dp_begin_step(&t->rank.dp, tc->grad_acc_steps);
    // The step's scalars accumulate on the device (ops.h): [0] the cross-entropy,
    // [1] and [2] the gradient norm's sums of squares; read back once, below.
    double *scalars = t->rank.step_scalars;  // (3)
    zero_f64(scalars, 3);
    const double host_loss = pp_run_step(&t->rank.pipe, &t->rank.model, &t->rank.dp.access, &cb, grad_scale,
                                         scalars);
    double t0 = trace_clock();
    dp_finish_grads(&t->rank.dp);
    trace_event("reduce-wait", t0, trace_clock(), step + 1, -1, -1);
    dp_grad_sumsq(&t->rank.dp, scalars + 1);
    double read[3];
    ops_download(read, scalars, sizeof read);  // the step's one wait for the device
    t->grad_sumsq[0] = read[1], t->grad_sumsq[1] = read[2];
    double loss_sum = read[0] + host_loss;
    // The loss lives on the last pipeline stage of every data- and context-parallel rank.
    if (t->rank.model.moe_aux) {  // with the load-balancing loss beside it (model/moe.h)
        double sums[2] = {loss_sum, t->rank.pipe.moe_aux};
        group_allreduce_sum_f64(GROUP_DPCP, sums, 2);
        group_allreduce_sum_f64(GROUP_PP, sums, 2);
        t->aux_loss = sums[1] / (double)G;
        return sums[0] / ((double)G * tc->seq_length);
    }
    group_allreduce_sum_f64(GROUP_DPCP, &loss_sum, 1);
    group_allreduce_sum_f64(GROUP_PP, &loss_sum, 1);
    return loss_sum / ((double)G * tc->seq_length);
}

StepResult trainer_step(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    StepResult r = {0};
    ops_bf16_weights_changed();  // the last update or a load wrote the weights since
    r.step = t->state.step + 1;
    r.loss = trainer_compute_grads(t, t->state.step);
    r.aux_loss = t->aux_loss;
    r.ep_ms = 1e3 * t->rank.pipe.moe_ep_s;
    r.grad_norm = dp_grad_norm(&t->rank.dp, t->grad_sumsq);
    r.lr = lr_at_step(tc, r.step);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        // Never let a NaN/inf into the weights or the moments. Every rank sees the
        // same reduced loss and norm, so every rank skips together.
        r.skipped = 1;
        if (++t->bad_steps >= tc->max_bad_steps) {
            char good[CFG_PATH_MAX + 64] = "";
            const char *dir = t->cfg.checkpoint.dir;
            if (dir[0] && !checkpoint_newest_finite(dir, good, sizeof good)) good[0] = '\0';
            const char *good_step = "a step with a finite loss and gradient norm";
            die("step %d: loss %g, gradient norm %g: %d steps in a row with a non-finite loss or "
                "gradient norm (training.max_bad_steps = %d); stopping. Lower training.lr, %s%s%s%s%s",
                r.step, r.loss, r.grad_norm, t->bad_steps, tc->max_bad_steps,
                good[0] ? "and resume from " : "and start again",
                good[0] ? good : (dir[0] ? " (no checkpoint of " : ""),
                good[0] ? ", the newest checkpoint of " : "", dir[0] ? good_step : "",
                good[0] ? " (move the newer step directories out of checkpoint.dir first)"
                        : (dir[0] ? " exists)" : ""));
        }
    } else {
        t->bad_steps = 0;
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1.
        double coef = tc->grad_clip > 0.0 ? tc->grad_clip / (r.grad_norm + 1e-6) : 1.0;
        double t0 = trace_clock();
        dp_clip_and_update(&t->rank.dp, coef, (float)r.lr, tc, r.step);
        trace_event("optimizer", t0, trace_clock(), r.step, -1, -1);
    }
    t->state.step = r.step;
    t->state.consumed_sequences += (uint64_t)tc->global_batch_size;
    // NaN marks a skipped step (non-finite loss or gradient norm) in the checkpoint, so
    // the max_bad_steps message can name the newest checkpoint of a good step.
    t->state.loss = r.skipped ? (double)NAN : r.loss;
    return r;
}

double trainer_validate(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    const int nb = t->cfg.logging.val_batches;
    ops_bf16_weights_changed();  // the step just taken updated the weights
    PpCallbacks cb = {t, fill_batch, trace_enabled() ? trace_cb : NULL};
    // Every data-parallel rank evaluates the same fixed batches (ZeRO-3 gathers
    // are collective, so all ranks must run the same forwards).
    t->batch_step = -1;
    double mean = 0;
    for (int k = 0; k < t->val_data.n; k++) {
        t->val_source = k;
        zero_f64(t->rank.step_scalars, 1);
        pp_run_forward(&t->rank.pipe, &t->rank.model, &t->rank.dp.access, &cb, nb, t->rank.step_scalars);
        double sum;
        ops_download(&sum, t->rank.step_scalars, sizeof sum);
        group_allreduce_sum_f64(GROUP_PP, &sum, 1);
        group_allreduce_sum_f64(GROUP_CP, &sum, 1);  // each cp rank scored its share of the tokens
        t->val_loss_by_source[k] = sum / ((double)nb * tc->micro_batch_size * tc->seq_length);
        mean += t->val_data.w[k] * t->val_loss_by_source[k];  // one source: w = 1 exactly
    }
    return mean;
}

void trainer_load(Trainer *t, const char *ckpt_dir) {
    int np = dp_load_pieces(&t->rank.dp, t->pieces);
    ops_sync();  // the host writes the pieces: no op may still read or write them
    checkpoint_load_pieces(ckpt_dir, &t->rank.model, t->pieces, np, &t->state);
}

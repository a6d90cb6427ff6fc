// train/trainer.c — buffers, gradient accumulation, clipping and AdamW.
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/init.h"
#include "ops/ops.h"
#include "train/schedule.h"
#include "util.h"

void trainer_init(Trainer *t, const Config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    const TrainingConfig *tc = &cfg->training;
    llama_build(&t->model, &cfg->model);
    const size_t n = t->model.num_elements;
    t->params = xmalloc(n * sizeof(float), "parameters");
    t->grads = xcalloc(n * sizeof(float), "gradients");
    t->m = xcalloc(n * sizeof(float), "AdamW first moments");
    t->v = xcalloc(n * sizeof(float), "AdamW second moments");
    activations_alloc(&t->act, &t->model, tc->micro_batch_size, tc->seq_length,
                      cfg->model.rope_theta);
    size_t tokens = (size_t)tc->micro_batch_size * tc->seq_length;
    t->inputs = xmalloc(tokens * sizeof(int32_t), "input tokens");
    t->targets = xmalloc(tokens * sizeof(int32_t), "target tokens");

    if (cfg->model.from[0])
        load_hf_weights(cfg->model.from, &t->model, t->params);
    else
        llama_init_params(&t->model, t->params, tc->seed);

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
    free(t->params);
    free(t->grads);
    free(t->m);
    free(t->v);
    free(t->inputs);
    free(t->targets);
    llama_free(&t->model);
}

MemoryReport trainer_memory(const Trainer *t) {
    MemoryReport r;
    size_t n = t->model.num_elements * sizeof(float);
    size_t tokens = (size_t)t->act.B * t->act.S;
    r.params = n;
    r.grads = n;
    r.optimizer = 2 * n;
    r.activations = t->act.bytes;
    r.batch = 2 * tokens * sizeof(int32_t);
    return r;
}

double trainer_compute_grads(Trainer *t, int step) {
    const TrainingConfig *tc = &t->cfg.training;
    const int B = tc->micro_batch_size, S = tc->seq_length;
    const uint64_t G = (uint64_t)tc->global_batch_size;
    // Invariant 1: every micro-batch's loss is divided by the token count of the
    // whole global batch, so accumulation computes the gradient of the global mean.
    const float grad_scale = (float)(1.0 / ((double)G * S));
    memset(t->grads, 0, t->model.num_elements * sizeof(float));
    double loss_sum = 0.0;
    for (int a = 0; a < tc->grad_acc_steps; a++) {
        uint64_t p0 = (uint64_t)step * G + (uint64_t)a * B;  // global positions of this micro-batch
        tokens_fill_batch(&t->train_data, p0, B, t->inputs, t->targets);
        loss_sum += llama_forward(&t->model, t->params, &t->act, t->inputs, t->targets,
                                  grad_scale);
        llama_backward(&t->model, t->params, t->grads, &t->act, t->inputs);
    }
    return loss_sum / ((double)G * S);
}

StepResult trainer_step(Trainer *t) {
    const TrainingConfig *tc = &t->cfg.training;
    StepResult r = {0};
    r.step = t->state.step + 1;
    r.loss = trainer_compute_grads(t, t->state.step);
    r.grad_norm = sqrt(sum_squares(t->grads, t->model.num_elements));
    r.lr = lr_at_step(r.step, tc->steps, tc->warmup_steps, tc->lr, tc->min_lr);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        r.skipped = 1;  // never let a NaN/inf into the weights or the moments
    } else {
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1.
        if (tc->grad_clip > 0.0) {
            double coef = tc->grad_clip / (r.grad_norm + 1e-6);
            if (coef < 1.0) scale_inplace(t->grads, t->model.num_elements, (float)coef);
        }
        for (int i = 0; i < t->model.n_params; i++) {
            const ParamInfo *p = &t->model.params[i];
            adamw_update(t->params + p->offset, t->grads + p->offset, t->m + p->offset,
                         t->v + p->offset, p->numel, (float)r.lr, (float)tc->beta1,
                         (float)tc->beta2, (float)tc->eps,
                         p->weight_decay ? (float)tc->weight_decay : 0.0f, r.step);
        }
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
    for (int k = 0; k < nb; k++) {
        tokens_fill_batch(&t->val_data, (uint64_t)k * B, B, t->inputs, t->targets);
        sum += llama_forward_loss(&t->model, t->params, &t->act, t->inputs, t->targets);
    }
    return sum / ((double)nb * B * S);
}

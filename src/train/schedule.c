// train/schedule.c — warmup, then cosine, linear, constant or warmup-stable-decay
// (train/schedule.h).
#include "train/schedule.h"

#include <math.h>

#include "util.h"

double lr_at_step(const TrainingConfig *tc, int s) {
    const int W = tc->warmup_steps, T = tc->steps;
    const double lr = tc->lr, lo = tc->min_lr;
    if (s <= W) return tc->init_lr + (lr - tc->init_lr) * (double)s / (double)W;
    switch (tc->lr_schedule) {
        case LR_CONSTANT:
            return lr;
        case LR_COSINE:
        case LR_LINEAR: {
            if (T <= W) return lo;
            double p = (double)(s - W) / (double)(T - W);
            if (p > 1.0) p = 1.0;
            if (tc->lr_schedule == LR_LINEAR) return lr - (lr - lo) * p;
            return lo + 0.5 * (lr - lo) * (1.0 + cos(FT_PI * p));
        }
        case LR_WSD: {
            const int D = training_decay_steps(tc), start = T - D;
            if (s <= start || D <= 0) return lr;
            double q = (double)(s - start) / (double)D;
            if (q > 1.0) q = 1.0;
            switch (tc->decay_shape) {
                case DECAY_LINEAR: return lr - (lr - lo) * q;
                case DECAY_COSINE: return lo + 0.5 * (lr - lo) * (1.0 + cos(FT_PI * q));
                case DECAY_1_SQRT: return lo + (lr - lo) * (1.0 - sqrt(q));
            }
            break;
        }
    }
    die("internal: unknown learning-rate schedule %d", (int)tc->lr_schedule);
}

void lr_check_resume(const TrainingConfig *old, const TrainingConfig *now, int done) {
    for (int s = 1; s <= done; s++) {
        double a = lr_at_step(old, s), b = lr_at_step(now, s);
        if (a == b) continue;
        die("resuming at step %d: the learning-rate schedule now gives step %d the rate %.6g, but the "
            "run took it at %.6g (checkpoint: lr_schedule %s, steps %d, warmup_steps %d; now: "
            "lr_schedule %s, steps %d, warmup_steps %d). Changing the schedule of steps already "
            "taken is refused: keep the checkpoint's schedule keys, or use lr_schedule \"wsd\" from "
            "the start (its stable phase can be extended while the decay has not begun), or start "
            "a new run from the checkpoint's weights with model.from (fresh optimizer state)",
            done, s, b, a, lr_schedule_name(old->lr_schedule), old->steps, old->warmup_steps,
            lr_schedule_name(now->lr_schedule), now->steps, now->warmup_steps);
    }
}

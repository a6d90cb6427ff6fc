// train/schedule.h — the learning-rate schedule (training.lr_schedule).
//
// Step s is 1-based, T = training.steps, W = warmup_steps, lr / min_lr / init_lr
// the training keys:
//   warmup    s <= W:  init_lr + (lr - init_lr) * s / W
//   cosine    min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2,  p = (s - W) / (T - W)
//   linear    lr - (lr - min_lr) * p
//   constant  lr
//   wsd       warmup-stable-decay (Hu et al. 2024, MiniCPM; SmolLM2): lr until the
//             decay starts at step T - D (D = decay_steps, or decay_fraction * T
//             rounded), then over the last D steps, with q = (s - (T - D)) / D:
//               linear  lr - (lr - min_lr) q
//               cosine  min_lr + (lr - min_lr) (1 + cos(pi q)) / 2
//               1-sqrt  min_lr + (lr - min_lr) (1 - sqrt(q))      (Hägele et al. 2024)
// Every decaying schedule reaches min_lr exactly at the last step.
#ifndef FEMTOTRON_SCHEDULE_H
#define FEMTOTRON_SCHEDULE_H

#include "config.h"

double lr_at_step(const TrainingConfig *tc, int s);

// Resuming at step `done` of a run whose checkpoint recorded `old`: the schedule of
// the steps already taken must not change (a cosine re-stretched to new
// training.steps would give the completed steps other rates than they had). Dies
// naming the first such step and what to do; returns quietly when every step 1..done
// has the same rate under both (e.g. wsd still in its stable phase, constant, or
// unchanged keys).
void lr_check_resume(const TrainingConfig *old, const TrainingConfig *now, int done);

#endif

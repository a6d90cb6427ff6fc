// train/schedule.h — the learning-rate schedule.
#ifndef FEMTOTRON_SCHEDULE_H
#define FEMTOTRON_SCHEDULE_H

// Learning rate of optimizer step s (1-based) of `steps`:
//   s <= warmup:  lr * s / warmup                                  (linear warmup)
//   s >  warmup:  min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup) / (steps - warmup))) / 2
// so the cosine reaches min_lr exactly at the last step.
double lr_at_step(int s, int steps, int warmup, double lr, double min_lr);

#endif

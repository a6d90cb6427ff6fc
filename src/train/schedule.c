// train/schedule.c — linear warmup, then cosine decay to min_lr at the last step.
#include "train/schedule.h"

#include <math.h>

double lr_at_step(int s, int steps, int warmup, double lr, double min_lr) {
    if (s <= warmup) return lr * (double)s / (double)warmup;
    if (steps <= warmup) return min_lr;
    double progress = (double)(s - warmup) / (double)(steps - warmup);
    if (progress > 1.0) progress = 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}

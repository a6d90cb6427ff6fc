// train/progress.c — the console lines of a run (progress.h).
#define _POSIX_C_SOURCE 200809L  // localtime_r
#include "train/progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util.h"

void format_duration(char *out, size_t size, double seconds) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    if (seconds > 1e9) seconds = 1e9;  // an ETA from a first step that took no time
    unsigned long s = (unsigned long)(seconds + 0.5);
    snprintf(out, size, "%lu:%02lu:%02lu", s / 3600, s / 60 % 60, s % 60);
}

void progress_start(Progress *p) {
    memset(p, 0, sizeof *p);
    p->t_start = now_seconds();
    p->best_val = NAN;
    // ISO-8601 local time with its zone as +HH:MM (strftime's %z gives +HHMM).
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[40], zone[8];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(zone, sizeof zone, "%z", &tm);
    printf("started %s%.3s:%.2s (local time)\n", when, zone, zone + 3);
    fflush(stdout);
}

void progress_loop(Progress *p, int first_step, int total_steps) {
    p->t_loop = now_seconds();
    p->first_step = first_step;
    p->total_steps = total_steps;
}

void progress_count(Progress *p, int step, double tokens, double step_s, double val_loss) {
    p->steps++;
    p->last_step = step;
    p->tokens += tokens;
    p->step_seconds += step_s;
    if (!isnan(val_loss) && (isnan(p->best_val) || val_loss < p->best_val)) {
        p->best_val = val_loss;
        p->best_val_step = step;
    }
}

void progress_print_step(const Progress *p, const Trainer *t, const StepResult *r, double tokens_per_s,
                         double mfu, double step_s, double val_loss) {
    printf("step %5d/%d | loss %.6f | lr %.3e | grad_norm %.4f | %7.0f tok/s | mfu %5.1f%% | %7.1f ms%s",
           r->step, p->total_steps, r->loss, r->lr, r->grad_norm, tokens_per_s, 100.0 * mfu, 1e3 * step_s,
           r->skipped ? " | SKIPPED (non-finite)" : "");
    const int val_sources = t->has_val ? t->val_data.n : 0;
    if (!isnan(val_loss)) {
        printf(" | val_loss %.6f", val_loss);
        for (int k = 0; val_sources > 1 && k < val_sources; k++)
            printf("%s%.6f%s", k ? " " : " (by source: ", t->val_loss_by_source[k],
                   k == val_sources - 1 ? ")" : "");
    }
    // The ETA's rate is this run's wall time per step so far, so validation and
    // checkpoint saves are in it.
    const double now = now_seconds();
    const int done = r->step - p->first_step;
    char elapsed[32], eta[32];
    format_duration(elapsed, sizeof elapsed, now - p->t_start);
    format_duration(eta, sizeof eta, done > 0 ? (now - p->t_loop) / done * (p->total_steps - r->step) : 0);
    printf(" | %s elapsed, ETA %s\n", elapsed, eta);
    fflush(stdout);
}

void progress_summary(const Progress *p, const Config *cfg, double flops_per_token, double peak_total) {
    char wall[32], loop[32];
    format_duration(wall, sizeof wall, now_seconds() - p->t_start);
    format_duration(loop, sizeof loop, now_seconds() - p->t_loop);
    const double tps = p->step_seconds > 0 ? p->tokens / p->step_seconds : 0;
    printf("done: %d steps in this run", p->steps);
    if (p->steps > 0) printf(" (%d..%d of %d)", p->first_step + 1, p->last_step, p->total_steps);
    printf(" | %.0f tokens | wall time %s (training %s) | mean %.0f tok/s | mean mfu %.1f%%\n", p->tokens,
           wall, loop, tps, 100.0 * flops_per_token * tps / peak_total);
    if (!isnan(p->best_val)) printf("  best val_loss %.6f at step %d\n", p->best_val, p->best_val_step);
    if (cfg->checkpoint.dir[0]) printf("  checkpoints: %s/latest\n", cfg->checkpoint.dir);
    if (cfg->logging.metrics[0]) printf("  metrics: %s\n", cfg->logging.metrics);
    fflush(stdout);
}

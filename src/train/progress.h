// train/progress.h — what a person watching a run reads on the console (rank 0):
// the start-up date, each logged step with elapsed time and ETA, and the summary
// at the end. (Checkpoint lines: train/checkpointer.c; the machine-readable record
// of the same run: train/metrics_log.h.)
#ifndef FEMTOTRON_PROGRESS_H
#define FEMTOTRON_PROGRESS_H

#include "train/trainer.h"

typedef struct {
    double t_start;        // now_seconds() at start-up (elapsed counts from here)
    double t_loop;         // when the first step of this run began (the ETA's rate)
    int first_step;        // the step the run started from (0, or the resumed one)
    int total_steps;       // training.steps
    int steps, last_step;  // steps taken by this run, and the last of them
    double tokens;         // tokens trained on by this run
    double step_seconds;   // the steps' own time (tokens/s and MFU exclude validation and saves)
    double best_val;       // NaN until validation ran
    int best_val_step;
} Progress;

// "started 2026-11-24T01:34:08+00:00 (local time), ..." and the clock starts.
void progress_start(Progress *p);
// The first step of this run is about to begin (after start-up and any resume).
void progress_loop(Progress *p, int first_step, int total_steps);
// Count one step (every step, logged or not) and its validation loss (NaN: none).
void progress_count(Progress *p, int step, double tokens, double step_s, double val_loss);
// "step N/M | loss ... | 0:01:23 elapsed, ETA 0:04:10" (with val_loss when not NaN).
void progress_print_step(const Progress *p, const Trainer *t, const StepResult *r, double tokens_per_s,
                         double mfu, double step_s, double val_loss);
// The summary: steps, tokens, wall time, mean tokens/s and MFU, best validation
// loss, where the checkpoints and metrics are. peak_total: FLOP/s of all ranks.
void progress_summary(const Progress *p, const Config *cfg, double flops_per_token, double peak_total);

// "H:MM:SS" (out: 32 bytes hold any).
void format_duration(char *out, size_t size, double seconds);

#endif

// train/metrics_log.h — logging.metrics: the JSON-lines record of a run (rank 0 only).
//
// One line per record, flushed as it is written, so the file can be read (and
// plotted) while the run goes on:
//   a step       every step, whatever logging.every says (that only thins the
//                console): {"step", "loss", "lr", "grad_norm", "tokens",
//                "tokens_per_s", "mfu", "step_ms", "skipped"[, "source_tokens"]
//                [, "val_loss"[, "val_loss_by_source"]], "time"}
//   an event     {"event": "val", "step", "val_loss"[, "val_loss_by_source"], "time"}
//                {"event": "checkpoint", "step", "path", "bytes", "seconds", "time"}
// A record without "event" is a step. "time" is the wall-clock time the record was
// written, in Unix seconds with milliseconds. A resume first cuts the file back to
// the checkpoint's step (metrics_open), so no step appears twice.
#ifndef FEMTOTRON_METRICS_LOG_H
#define FEMTOTRON_METRICS_LOG_H

#include <stdio.h>

typedef struct MetricsLog {
    FILE *f;  // NULL: no logging.metrics, or not rank 0 (every call is then a no-op)
} MetricsLog;

// Everything a step record holds (non-finite loss and norm are written as null).
typedef struct {
    int step;
    double loss, lr, grad_norm, tokens, tokens_per_s, mfu, step_ms;
    int skipped;
    const double *source_tokens;  // (n_sources) or NULL
    int n_sources;
    double aux_loss;              // NaN: no load-balancing loss (dense, or output_router_logits off)
    double ep_ms;                 // NaN: no expert parallelism; else rank 0's ms in dispatch + combine
    double val_loss;              // NaN: no validation this step
    const double *val_by_source;  // (n_val_sources) or NULL
    int n_val_sources;
} StepRecord;

// Open PATH ("" gives a log that writes nothing). resume_step > 0: keep the records
// of steps <= resume_step (and no partial last line), rewriting the file through a
// temporary and a rename, then append; 0: start the file afresh.
void metrics_open(MetricsLog *m, const char *path, int resume_step);
void metrics_close(MetricsLog *m);

void metrics_step(MetricsLog *m, const StepRecord *r);
void metrics_val(MetricsLog *m, int step, double val_loss, const double *by_source, int n_sources);
void metrics_checkpoint(MetricsLog *m, int step, const char *path, double bytes, double seconds);

// Keep the lines of text (length n) whose "step" is <= max_step; drop a last line
// without its newline. Writes the result to out (at least n bytes), returns its
// length. Pure, for metrics_open and its unit test.
size_t metrics_keep_until(const char *text, size_t n, int max_step, char *out);

#endif

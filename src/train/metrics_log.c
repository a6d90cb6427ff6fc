// train/metrics_log.c — the JSON-lines metrics file (metrics_log.h).
#define _POSIX_C_SOURCE 200809L  // clock_gettime
#include "train/metrics_log.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "util.h"

// Wall-clock time, Unix seconds (now_seconds is monotonic: no use to a reader).
static double unix_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// A number as JSON text: 17 significant digits, or null when not finite (JSON has
// no NaN or infinity: a skipped step's values).
static void json_number(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fprintf(f, "null");
}

static void json_list(FILE *f, const double *v, int n) {
    fprintf(f, "[");
    for (int i = 0; i < n; i++) {
        if (i) fprintf(f, ", ");
        json_number(f, v[i]);
    }
    fprintf(f, "]");
}

// A JSON string, escaped by cJSON: the path of a checkpoint may hold quotes or
// backslashes.
static void json_string(FILE *f, const char *s) {
    cJSON *str = cJSON_CreateString(s);
    char *text = str ? cJSON_PrintUnformatted(str) : NULL;
    if (!text) die("out of memory writing logging.metrics");
    fputs(text, f);
    cJSON_free(text);
    cJSON_Delete(str);
}

// Every record ends with its time; flushed so that readers see whole lines.
static void end_record(FILE *f) {
    fprintf(f, ", \"time\": %.3f}\n", unix_seconds());
    fflush(f);
}

// The step of one line: the number after its first "step": key, or -1.
static long line_step(const char *line, const char *end) {
    static const char key[] = "\"step\":";
    for (const char *p = line; p + sizeof key - 1 <= end; p++)
        if (memcmp(p, key, sizeof key - 1) == 0) return strtol(p + sizeof key - 1, NULL, 10);
    return -1;
}

size_t metrics_keep_until(const char *text, size_t n, int max_step, char *out) {
    size_t k = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(text + at, '\n', n - at);
        if (!nl) break;  // a partial last line: the killed run's last write
        size_t len = (size_t)(nl - (text + at)) + 1;
        long s = line_step(text + at, nl);
        if (s >= 0 && s <= max_step) {
            memcpy(out + k, text + at, len);
            k += len;
        }
        at += len;
    }
    return k;
}

// Cut PATH back to the records of steps <= step: written whole to PATH.tmp, then
// renamed over PATH, so a crash here leaves the old file or the new one.
static void truncate_to_step(const char *path, int step) {
    if (!path_is_file(path)) return;
    char *text = read_text_file(path);
    size_t n = strlen(text);
    char *kept = xmalloc(n + 1, "metrics");
    size_t k = metrics_keep_until(text, n, step, kept);
    char tmp[CFG_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) die_errno("logging.metrics: cannot write %s", tmp);
    if (fwrite(kept, 1, k, f) != k || fclose(f) != 0) die_errno("logging.metrics: cannot write %s", tmp);
    if (rename(tmp, path) != 0) die_errno("logging.metrics: cannot rename %s to %s", tmp, path);
    free(kept);
    free(text);
}

void metrics_open(MetricsLog *m, const char *path, int resume_step) {
    m->f = NULL;
    if (!path[0]) return;
    if (resume_step > 0) truncate_to_step(path, resume_step);
    m->f = fopen(path, resume_step > 0 ? "a" : "w");
    if (!m->f) die_errno("logging.metrics: cannot open %s", path);
}

void metrics_close(MetricsLog *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}

void metrics_step(MetricsLog *m, const StepRecord *r) {
    FILE *f = m->f;
    if (!f) return;
    fprintf(f, "{\"step\": %d, \"loss\": ", r->step);
    json_number(f, r->loss);
    fprintf(f, ", \"lr\": %.17g, \"grad_norm\": ", r->lr);
    json_number(f, r->grad_norm);
    fprintf(f, ", \"tokens\": %.0f, \"tokens_per_s\": %.3f, \"mfu\": %.6f, \"step_ms\": %.3f, \"skipped\": %s",
            r->tokens, r->tokens_per_s, r->mfu, r->step_ms, r->skipped ? "true" : "false");
    if (!isnan(r->aux_loss)) {
        fprintf(f, ", \"aux_loss\": ");
        json_number(f, r->aux_loss);
    }
    if (!isnan(r->ep_ms)) fprintf(f, ", \"ep_ms\": %.3f", r->ep_ms);
    if (r->source_tokens) {
        fprintf(f, ", \"source_tokens\": ");
        json_list(f, r->source_tokens, r->n_sources);
    }
    if (!isnan(r->val_loss)) {
        fprintf(f, ", \"val_loss\": ");
        json_number(f, r->val_loss);
        if (r->val_by_source) {
            fprintf(f, ", \"val_loss_by_source\": ");
            json_list(f, r->val_by_source, r->n_val_sources);
        }
    }
    end_record(f);
}

void metrics_val(MetricsLog *m, int step, double val_loss, const double *by_source, int n_sources) {
    FILE *f = m->f;
    if (!f) return;
    fprintf(f, "{\"event\": \"val\", \"step\": %d, \"val_loss\": ", step);
    json_number(f, val_loss);
    if (by_source) {
        fprintf(f, ", \"val_loss_by_source\": ");
        json_list(f, by_source, n_sources);
    }
    end_record(f);
}

void metrics_checkpoint(MetricsLog *m, int step, const char *path, double bytes, double seconds) {
    FILE *f = m->f;
    if (!f) return;
    fprintf(f, "{\"event\": \"checkpoint\", \"step\": %d, \"path\": ", step);
    json_string(f, path);
    fprintf(f, ", \"bytes\": %.0f, \"seconds\": %.3f", bytes, seconds);
    end_record(f);
}

// train/plot_cmd.c — `femtotron plot [--output OUT.png] METRICS.jsonl [MORE.jsonl ...]`.
//
// Each metrics file's step records become the columns of a data file in a temporary
// directory; a gnuplot script draws six panels into one PNG (loss and val_loss
// against steps and against tokens, learning rate, gradient norm, tokens/s, MFU),
// one line per file, labelled with its name, so several runs overlay. A run still
// going is fine: its partial last line (being written) is left out.
#define _GNU_SOURCE  // mkdtemp
#include "train/plot_cmd.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define PLOT_MAX_FILES 16

static void plot_usage(void) {
    printf("usage: femtotron plot [--output OUT.png] METRICS.jsonl [MORE.jsonl ...]\n\n"
           "Draws the logging.metrics files of training runs as one PNG with gnuplot: loss and\n"
           "validation loss against steps and against tokens, learning rate, gradient norm,\n"
           "tokens/s and MFU. Several files overlay, each labelled with its name. Works on the\n"
           "file of a run still going (its partial last line is ignored).\n\n"
           "  --output OUT.png   where to write (default: the first file's name with .png for .jsonl)\n");
}

// A number field of a record, NaN when absent or null (a skipped step's loss).
static double field(const cJSON *rec, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// gnuplot reads "NaN" as a missing point.
static void put(FILE *f, double v) { fprintf(f, isnan(v) ? " NaN" : " %.10g", v); }

// The step records of one metrics file as columns "step tokens loss lr grad_norm
// tokens_per_s mfu%" into steps_path, and "step tokens val_loss" into val_path.
// Returns the number of validation points; dies naming the file when it has no step
// record or a line that is not JSON.
static int read_metrics(const char *path, const char *steps_path, const char *val_path) {
    if (!path_is_file(path)) die("plot: %s: no such file (give logging.metrics files of femtotron train)", path);
    char *text = read_text_file(path);
    FILE *steps = fopen(steps_path, "w"), *val = fopen(val_path, "w");
    if (!steps || !val) die_errno("plot: cannot write %s", steps_path);
    int n_steps = 0, n_val = 0, line_no = 0;
    double tokens = 0;  // cumulative: the records hold each step's tokens
    for (char *line = text, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        line_no++;
        *nl = '\0';  // a last line without its newline is still being written: not read
        if (strspn(line, " \t\r") == strlen(line)) continue;
        cJSON *rec = cJSON_Parse(line);
        if (!cJSON_IsObject(rec)) die("plot: %s line %d is not a JSON object: %.80s", path, line_no, line);
        if (!cJSON_GetObjectItemCaseSensitive(rec, "event") && !isnan(field(rec, "step"))) {
            tokens += isnan(field(rec, "tokens")) ? 0 : field(rec, "tokens");
            fprintf(steps, "%d", (int)field(rec, "step"));
            put(steps, tokens);
            put(steps, field(rec, "loss"));
            put(steps, field(rec, "lr"));
            put(steps, field(rec, "grad_norm"));
            put(steps, field(rec, "tokens_per_s"));
            put(steps, 100.0 * field(rec, "mfu"));
            fprintf(steps, "\n");
            n_steps++;
            if (!isnan(field(rec, "val_loss"))) {
                fprintf(val, "%d", (int)field(rec, "step"));
                put(val, tokens);
                put(val, field(rec, "val_loss"));
                fprintf(val, "\n");
                n_val++;
            }
        }
        cJSON_Delete(rec);
    }
    if (fclose(steps) != 0 || fclose(val) != 0) die_errno("plot: cannot write %s", steps_path);
    free(text);
    if (n_steps == 0)
        die("plot: %s holds no step record yet (empty, or not a logging.metrics file of femtotron train)", path);
    return n_val;
}

// A gnuplot single-quoted string: a quote is written twice.
static void quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

// One panel: column `col` of every file against column `x` (1 step, 2 tokens), and
// the validation loss when `with_val`.
static void panel(FILE *g, const char *dir, const char *const *names, const int *n_val, int n, const char *title,
                  const char *xlabel, int x, int col, int with_val) {
    fprintf(g, "set title '%s'\nset xlabel '%s'\nplot", title, xlabel);
    for (int i = 0; i < n; i++) {
        fprintf(g, "%s '%s/steps%d.dat' using %d:%d with lines linecolor %d title ", i ? "," : "", dir, i, x, col,
                i + 1);
        quoted(g, names[i]);
        if (with_val && n_val[i] > 0) {
            fprintf(g, ", '%s/val%d.dat' using %d:3 with linespoints dashtype 2 pointtype 7 linecolor %d title ",
                    dir, i, x, i + 1);
            char label[1100];
            snprintf(label, sizeof label, "%s (val)", names[i]);
            quoted(g, label);
        }
    }
    fprintf(g, "\n");
}

int plot_main(int argc, char **argv) {
    const char *output = NULL;
    const char *files[PLOT_MAX_FILES];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            plot_usage();
            return 0;
        } else if (strcmp(argv[i], "--output") == 0) {
            if (i + 1 >= argc) die("plot: --output needs a file name (e.g. --output loss.png)");
            output = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            die("plot: unknown option %s (see femtotron plot --help)", argv[i]);
        } else {
            if (n == PLOT_MAX_FILES) die("plot: at most %d metrics files in one plot", PLOT_MAX_FILES);
            files[n++] = argv[i];
        }
    }
    if (n == 0) die("plot: give at least one metrics file: femtotron plot [--output OUT.png] METRICS.jsonl ...");
    char out[4096];
    if (output) {
        snprintf(out, sizeof out, "%s", output);
    } else {  // runs/x/metrics.jsonl -> runs/x/metrics.png
        snprintf(out, sizeof out, "%s", files[0]);
        size_t len = strlen(out);
        if (len > 6 && strcmp(out + len - 6, ".jsonl") == 0) out[len - 6] = '\0';
        strncat(out, ".png", sizeof out - strlen(out) - 1);
    }
    if (system("command -v gnuplot >/dev/null 2>&1") != 0)
        die("plot: gnuplot is not installed (apt-get install gnuplot-nox)");

    char dir[] = "/tmp/femtotron_plot.XXXXXX";
    if (!mkdtemp(dir)) die_errno("plot: cannot make a temporary directory");
    int n_val[PLOT_MAX_FILES];
    char path[sizeof dir + 32], val_path[sizeof dir + 32];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/steps%d.dat", dir, i);
        snprintf(val_path, sizeof val_path, "%s/val%d.dat", dir, i);
        n_val[i] = read_metrics(files[i], path, val_path);
    }
    char script[sizeof dir + 32];
    snprintf(script, sizeof script, "%s/plot.gp", dir);
    FILE *g = fopen(script, "w");
    if (!g) die_errno("plot: cannot write %s", script);
    fprintf(g, "set terminal pngcairo size 1600,1200 noenhanced\nset output ");
    quoted(g, out);
    fprintf(g, "\nset grid\nset key top right\nset multiplot layout 3,2\n");
    panel(g, dir, files, n_val, n, "loss", "step", 1, 3, 1);
    panel(g, dir, files, n_val, n, "loss against tokens", "tokens", 2, 3, 1);
    panel(g, dir, files, n_val, n, "learning rate", "step", 1, 4, 0);
    panel(g, dir, files, n_val, n, "gradient norm (before clipping)", "step", 1, 5, 0);
    panel(g, dir, files, n_val, n, "tokens/s", "step", 1, 6, 0);
    panel(g, dir, files, n_val, n, "MFU (%)", "step", 1, 7, 0);
    fprintf(g, "unset multiplot\n");
    if (fclose(g) != 0) die_errno("plot: cannot write %s", script);
    char cmd[sizeof script + 64];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", script);
    int rc = system(cmd);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/steps%d.dat", dir, i);
        snprintf(val_path, sizeof val_path, "%s/val%d.dat", dir, i);
        unlink(path);
        unlink(val_path);
    }
    unlink(script);
    rmdir(dir);
    if (rc != 0) die("plot: gnuplot failed (exit status %d) writing %s", rc, out);
    printf("plot: wrote %s (%d metrics file%s)\n", out, n, n > 1 ? "s" : "");
    return 0;
}

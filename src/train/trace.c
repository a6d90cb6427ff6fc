// train/trace.c — per-rank event files merged into one Chrome trace at the end.
#define _POSIX_C_SOURCE 200809L
#include "train/trace.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "dist/comm.h"
#include "util.h"

static FILE *trace_file = NULL;
static char trace_path[CFG_PATH_MAX];
static double origin = 0.0;
static int first_event = 1;

void trace_open(const char *path, double t_origin) {
    if (!path || !path[0]) return;
    snprintf(trace_path, sizeof trace_path, "%s", path);
    char mine[CFG_PATH_MAX + 32];
    snprintf(mine, sizeof mine, "%s.rank%d", path, comm_world_rank());
    trace_file = fopen(mine, "w");
    if (!trace_file) die_errno("logging.trace: cannot write %s", mine);
    // One time origin for every rank (rank 0's), so that events of different ranks
    // line up: CLOCK_MONOTONIC is shared by the processes of one node.
    origin = t_origin;
    group_broadcast_bytes(GROUP_WORLD, &origin, sizeof origin, 0);
    first_event = 1;
}

int trace_enabled(void) { return trace_file != NULL; }

void trace_event(const char *name, double t0, double t1, int step, int chunk, int micro) {
    if (!trace_file) return;
    // The process's CPU time when the event is written (its end), in microseconds:
    // the CPU a rank got between two consecutive events against their wall time
    // tells a pass that computed from one that waited for a core another process
    // held (bench/pp_bubble.sh reads it).
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    // Timestamps in microseconds; one process, one track per rank.
    fprintf(trace_file,
            "%s{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.1f, \"dur\": %.1f, "
            "\"args\": {\"step\": %d, \"chunk\": %d, \"micro\": %d, \"cpu_us\": %.1f}}",
            first_event ? "" : ",\n", name, comm_world_rank(), 1e6 * (t0 - origin),
            1e6 * (t1 - t0), step, chunk, micro, 1e6 * (double)cpu.tv_sec + 1e-3 * (double)cpu.tv_nsec);
    first_event = 0;
}

void trace_close(void) {
    int on = trace_file != NULL;
    if (!on) return;
    fclose(trace_file);
    trace_file = NULL;
    group_barrier(GROUP_WORLD);
    if (comm_world_rank() != 0) return;
    FILE *out = fopen(trace_path, "w");
    if (!out) die_errno("logging.trace: cannot write %s", trace_path);
    fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    int wrote = 0;
    for (int r = 0; r < comm_world_size(); r++) {
        char part[CFG_PATH_MAX + 32];
        snprintf(part, sizeof part, "%s.rank%d", trace_path, r);
        FILE *in = fopen(part, "r");
        if (!in) die_errno("logging.trace: rank %d's events %s are missing", r, part);
        char buf[65536];
        size_t n, total = 0;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
            if (total == 0 && wrote) fputs(",\n", out);
            fwrite(buf, 1, n, out);
            total += n;
        }
        wrote |= total > 0;
        fclose(in);
        unlink(part);
        fprintf(out, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                     "\"args\": {\"name\": \"rank %d\"}}",
                wrote ? ",\n" : "", r, r);
        wrote = 1;
    }
    fprintf(out, "\n]}\n");
    if (fclose(out) != 0) die_errno("logging.trace: cannot finish %s", trace_path);
}

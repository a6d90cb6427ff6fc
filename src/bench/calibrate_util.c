// bench/calibrate_util.c — timing a call on every rank at once, and aggregating
// the ranks' measurements (see bench/calibrate.c for what is measured).
#include "bench/calibrate_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double calib_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void *calib_alloc(size_t bytes, const char *what) { return buf_alloc(MEM_ACTIVATIONS, bytes, what); }

void calib_world_median(const double *x, double *out, int k) {
    int ws = comm_world_size(), me = comm_world_rank();
    double *all = xcalloc((size_t)ws * k * sizeof(double), "calibration gather");  // (ws, k)
    memcpy(all + (size_t)me * k, x, (size_t)k * sizeof(double));
    group_allreduce_sum_f64(GROUP_WORLD, all, (size_t)ws * k);
    double *col = xmalloc((size_t)ws * sizeof(double), "calibration column");  // (ws)
    for (int i = 0; i < k; i++) {
        for (int r = 0; r < ws; r++) col[r] = all[(size_t)r * k + i];
        out[i] = calib_median(col, ws);
    }
    free(col);
    free(all);
}

int calib_agree_reps(double warm, const CalibOpts *o, int lo, int hi) {
    group_allreduce_max_f64(GROUP_WORLD, &warm, 1);
    double r = o->target_s / (warm > 1e-9 ? warm : 1e-9);
    return r < lo ? lo : r > hi ? hi : (int)r;
}

#define BATCHES 3

// A warm-up call, then BATCHES batches of the same number of calls on every rank,
// each timed from a world barrier before it to a world barrier after it, the
// longest of the ranks' spans: a batch lasts from the first rank's start to the
// slowest rank's end, so when ranks outnumber cores the time is the whole
// machine's work over its throughput, the share a rank really gets when all
// compute at once, as in training. (A rank's own span is shorter when the
// scheduler let it leave the first barrier late, after the others had started:
// it would report more than its share.) The best batch's time per call, the same
// on every rank.
double calib_time_call(CalibCall c, const CalibOpts *o) {
    group_barrier(GROUP_WORLD);
    double t0 = now_seconds();
    c.fn(c.ctx);
    ops_sync();  // a GPU's ops return before they finish: a batch ends when they have
    group_barrier(GROUP_WORLD);
    double warm = now_seconds() - t0;  // calib_agree_reps takes the maximum over ranks
    CalibOpts per_batch = *o;
    per_batch.target_s = o->target_s / BATCHES;
    int calls = calib_agree_reps(warm, &per_batch, 1, 100000);
    // A call that fills a batch alone is long enough to need no warm-up: the
    // warm-up call is then the first batch (calls is the same on every rank).
    double best = calls == 1 ? warm : 1e30;
    for (int b = calls == 1 ? 1 : 0; b < BATCHES; b++) {
        group_barrier(GROUP_WORLD);
        t0 = now_seconds();
        for (int i = 0; i < calls; i++) c.fn(c.ctx);
        ops_sync();
        group_barrier(GROUP_WORLD);
        double dt = (now_seconds() - t0) / calls;
        group_allreduce_max_f64(GROUP_WORLD, &dt, 1);
        if (dt < best) best = dt;
    }
    return best;
}

static int cmp_point(const void *a, const void *b) {
    return cmp_double(&((const CalibPoint *)a)->work, &((const CalibPoint *)b)->work);
}

// Sorted by work, equal works averaged, and while there are more than
// HW_CURVE_MAX, the two neighbours closest in log(work) merged (geometric mean of
// work, mean of rate).
void calib_fold_curve(RateCurve *c, CalibPoint *p, int n) {
    qsort(p, (size_t)n, sizeof *p, cmp_point);
    int m = 0;
    for (int i = 0; i < n;) {
        int j = i;
        double sum = 0;
        while (j < n && p[j].work <= p[i].work * (1 + 1e-9)) sum += p[j++].rate;
        p[m].work = p[i].work;
        p[m].rate = sum / (j - i);
        m++;
        i = j;
    }
    while (m > HW_CURVE_MAX) {
        int best = 0;
        for (int i = 1; i + 1 < m; i++)
            if (p[i + 1].work / p[i].work < p[best + 1].work / p[best].work) best = i;
        p[best].work = sqrt(p[best].work * p[best + 1].work);
        p[best].rate = 0.5 * (p[best].rate + p[best + 1].rate);
        memmove(p + best + 1, p + best + 2, (size_t)(m - best - 2) * sizeof *p);
        m--;
    }
    c->n = m;
    for (int i = 0; i < m; i++) {
        c->work[i] = p[i].work;
        c->rate[i] = p[i].rate;
    }
}

void calib_fill_random(float *x, size_t n, unsigned seed) {
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

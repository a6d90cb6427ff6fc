// bench/calibrate_collectives.c — alpha-beta fits of the collectives femtotron
// calls (all-reduce, reduce-scatter, all-gather, p2p), measured on groups of 2, 4,
// ... consecutive ranks while every group of that size runs at once.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/calibrate_util.h"
#include "dist/comm.h"
#include "util.h"

#define MAX_SIZES 8

// t = alpha + beta*x by least squares constrained through the smallest message
// (x[0], t[0]): that point, pure latency in practice, sets alpha; the slope
// minimises the squared time errors, so the large messages, which dominate the
// time of a training step, set beta. Plain least squares would let them decide
// alpha too (often negative, clamped to 0: no latency at all); weighting by 1/t^2
// (relative error) fits the latency but misses the large messages by a factor of
// 2-3 where they fall out of cache. alpha, beta >= 0. x(n) ascending, n <= MAX_SIZES.
static void fit_alpha_beta(const double *x, const double *t_measured, int n, double *alpha, double *beta) {
    // A larger message never takes less time: a time above a later one is noise
    // (a rank descheduled during that measurement), lowered to the later one.
    double t[MAX_SIZES] = {0}, later = INFINITY;
    for (int i = n - 1; i >= 0; i--) later = t[i] = t_measured[i] < later ? t_measured[i] : later;
    double sxy = 0, sxx = 0;
    for (int i = 1; i < n; i++) {
        sxy += (x[i] - x[0]) * (t[i] - t[0]);
        sxx += (x[i] - x[0]) * (x[i] - x[0]);
    }
    double b = sxx > 0 && sxy > 0 ? sxy / sxx : 0, a = t[0] - b * x[0];
    if (a < 0) {  // the line through the origin instead
        double sxt = 0, sx2 = 0;
        for (int i = 0; i < n; i++) sxt += x[i] * t[i], sx2 += x[i] * x[i];
        a = 0, b = sxt / sx2;
    }
    *alpha = a;
    *beta = b;
}

// Seconds of one call of `kind` on GROUP_BENCH (size g) on a message of `bytes`:
// this rank's median over repeats. Ranks outside any full group (g does not divide
// the world, only for p2p) keep the repeat count and barriers but do not time.
static double time_collective(CollKind kind, int g, size_t bytes, float *x, float *y, const CalibOpts *o) {
    size_t n = bytes / sizeof(float);
    int me = group_rank(GROUP_BENCH), active = group_size(GROUP_BENCH) == g;
    double samples[64];
    int reps = 0;
    for (int r = -1; r < reps; r++) {  // r = -1: the warm-up, which sets reps
        group_barrier(GROUP_WORLD);
        double t0 = now_seconds();
        if (active) switch (kind) {
            case COLL_ALLREDUCE: group_allreduce_sum_f32(GROUP_BENCH, x, n); break;
            case COLL_REDUCE_SCATTER: group_reduce_scatter_f32(GROUP_BENCH, x, y, n / g); break;
            case COLL_ALLGATHER: group_allgather_f32(GROUP_BENCH, x, n / g); break;
            case COLL_P2P: {
                CommRequest q;
                for (int leg = 0; leg < 2; leg++) {  // ping then pong
                    if (me == leg) q = group_isend_f32(GROUP_BENCH, x, n, 1 - me, 77);
                    else q = group_irecv_f32(GROUP_BENCH, y, n, 1 - me, 77);
                    comm_wait(&q, leg == 0 ? "calibration ping" : "calibration pong");
                }
                break;
            }
            default: break;
        }
        double dt = now_seconds() - t0;
        if (kind == COLL_P2P) dt *= 0.5;  // one way
        if (r < 0) reps = calib_agree_reps(dt, o, 5, 40);
        else samples[r] = dt;
    }
    return active ? calib_median(samples, reps) : 0.0;
}

void calib_measure_collectives(Hardware *hw, const CalibOpts *o) {
    int ws = comm_world_size(), intra = comm_local_size() == ws;
    size_t max_bytes = o->quick ? (size_t)1 << 20 : (size_t)16 << 20;
    size_t sizes[MAX_SIZES];
    int ns = 0;
    for (size_t b = 4096; b <= max_bytes && ns < MAX_SIZES; b *= 4) sizes[ns++] = b;
    float *x = calib_alloc(max_bytes, "calibration message"), *y = calib_alloc(max_bytes, "calibration message");
    // Zeros: repeated sums in place stay finite (the values do not change the speed).
    memset(x, 0, max_bytes);
    memset(y, 0, max_bytes);
    int groups[32], ng = 0;
    for (int g = 2; g < ws; g *= 2)
        if (ws % g == 0) groups[ng++] = g;
    groups[ng++] = ws;
    hw->n_coll = 0;
    for (int gi = 0; gi < ng; gi++) {
        int g = groups[gi];
        comm_bench_group(g);
        for (int k = 0; k < COLL_KINDS; k++) {
            if (k == COLL_P2P) continue;
            double bytes[MAX_SIZES], t[MAX_SIZES];
            for (int s = 0; s < ns; s++) {
                // Whole-buffer bytes (hardware.h): a multiple of g floats.
                size_t chunk = sizes[s] / sizeof(float) / (size_t)g;
                bytes[s] = (double)(chunk * g * sizeof(float));
                t[s] = time_collective((CollKind)k, g, (size_t)bytes[s], x, y, o);
            }
            group_allreduce_max_f64(GROUP_WORLD, t, (size_t)ns);
            CollFit *f = &hw->coll[hw->n_coll++];
            *f = (CollFit){(CollKind)k, g, intra, 0, 0};
            fit_alpha_beta(bytes, t, ns, &f->alpha, &f->beta);
        }
    }
    comm_bench_group(2);  // pairs 2i, 2i+1
    double bytes[MAX_SIZES], t[MAX_SIZES];
    for (int s = 0; s < ns; s++) {
        bytes[s] = (double)sizes[s];
        t[s] = time_collective(COLL_P2P, 2, sizes[s], x, y, o);
    }
    group_allreduce_max_f64(GROUP_WORLD, t, (size_t)ns);
    CollFit *f = &hw->coll[hw->n_coll++];
    *f = (CollFit){COLL_P2P, 2, intra, 0, 0};
    fit_alpha_beta(bytes, t, ns, &f->alpha, &f->beta);
    buf_free(x);
    buf_free(y);
    // The ring fallback from the largest all-reduce: t = 2(n-1) lat + 2(n-1)/n B/bw.
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *a = &hw->coll[i];
        if (a->kind != COLL_ALLREDUCE || a->ranks != ws) continue;
        hw->intra_lat = a->alpha / (2.0 * (ws - 1));
        hw->intra_bw = a->beta > 0 ? 2.0 * (ws - 1) / ws / a->beta : hw->mem_bw;
    }
    hw->inter_lat = hw->intra_lat;
    hw->inter_bw = hw->intra_bw;
}

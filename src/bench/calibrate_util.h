// bench/calibrate_util.h — what the parts of `femtotron bench calibrate` share:
// its options, timing a call on every rank at once, aggregation over the ranks,
// and the measurements each part makes (calibrate_kernels.c: GEMM, attention and
// elementwise rates; calibrate_collectives.c: alpha-beta fits of collectives).
#ifndef FEMTOTRON_CALIBRATE_UTIL_H
#define FEMTOTRON_CALIBRATE_UTIL_H

#include <stddef.h>

#include "plan/hardware.h"

typedef struct {
    int quick;        // smaller shapes and messages, shorter batches
    double target_s;  // seconds of repeats per measurement (after the warm-up)
    int head_dim;     // head dim of the attention curves (the model's)
    int gpu;          // the ops run on a GPU: larger GEMM shapes
    int bf16;         // bf16 products (--precision bf16): every GEMM operand read as bf16
    int cudnn;        // --attention cudnn: the attention curves time the bf16 ops a cudnn run
                      // calls (attention_forward_bf16 / attention_backward_bf16, ops.h)
} CalibOpts;

// A call to time: fn(ctx).
typedef struct {
    void (*fn)(const void *ctx);
    const void *ctx;
} CalibCall;

// A zeroed buffer the backend's ops can use (device memory on a GPU; the host
// can address it too); free with buf_free.
void *calib_alloc(size_t bytes, const char *what);
// Median of v(n) (sorts v).
double calib_median(double *v, int n);
// x(k) on every rank -> out(k) = per index the median over the world's ranks.
void calib_world_median(const double *x, double *out, int k);
// The same number of repeats on every rank: enough to fill target_s after a
// warm-up that took the slowest rank `warm` seconds, clamped to [lo, hi].
int calib_agree_reps(double warm, const CalibOpts *o, int lo, int hi);
// Seconds per call of c while every rank runs its own calls at once (see the .c).
double calib_time_call(CalibCall c, const CalibOpts *o);

// One measured point of a rate curve.
typedef struct {
    double work, rate;
} CalibPoint;
// Points (any order) -> curve (sorted, equal works averaged, at most HW_CURVE_MAX).
void calib_fold_curve(RateCurve *c, CalibPoint *p, int n);
// Deterministic values in [-1, 1).
void calib_fill_random(float *x, size_t n, unsigned seed);

void calib_measure_gemm(RateCurve *c, const CalibOpts *o);
void calib_measure_attention(RateCurve *fwd, RateCurve *bwd, const CalibOpts *o);
double calib_measure_mem_bw(const CalibOpts *o);
void calib_measure_collectives(Hardware *hw, const CalibOpts *o);

#endif

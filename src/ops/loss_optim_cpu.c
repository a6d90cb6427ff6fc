// ops/loss_optim_cpu.c — the CPU kernels of ops.h for cross-entropy (whole and
// vocab-parallel shards), the sum of squares and AdamW, in fp32 with double sums
// (the CUDA ones: ops/loss_optim_cuda.cu). Row maxima and sums carry `omp simd
// reduction`, as in ops/cpu.c.
#include <math.h>
#include <omp.h>

#include "ops/adamw_element.h"
#include "ops/bf16.h"
#include "ops/fast_exp.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"
#include "util.h"

// ---------------------------------------------------------------- cross-entropy

// grads16: each row's gradient narrowed to bf16 in place once it is complete (ops.h:
// rows CE_LD16(V) values apart, the same values rounded).
static void cross_entropy(float *logits, const int32_t *targets, int N, int V, float grad_scale, int grads16,
                          double *loss_sum) {
    ops_check_ids(targets, N, V, "cross-entropy target");
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float target_logit = x[targets[n]], sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) {
            x[j] = fast_expf(x[j] - mx);
            sum += x[j];
        }
        // -log softmax[target] = log(sum) + max - x_target
        loss += (double)logf(sum) + (double)mx - (double)target_logit;
        float inv = grad_scale / sum;
        for (int j = 0; j < V; j++) x[j] *= inv;
        x[targets[n]] -= grad_scale;
        if (grads16) bf16_narrow_in_place(x, (size_t)V);
    }
    *loss_sum += loss;
}

void cross_entropy_forward_backward(float *logits, const int32_t *targets, int N, int V,
                                    float grad_scale, double *loss_sum) {
    cross_entropy(logits, targets, N, V, grad_scale, 0, loss_sum);
}

void cross_entropy_forward_backward_bf16(float *logits, const int32_t *targets, int N, int V,
                                         float grad_scale, double *loss_sum) {
    cross_entropy(logits, targets, N, V, grad_scale, 1, loss_sum);
}

void cross_entropy_forward(const float *logits, const int32_t *targets, int N, int V, double *loss_sum) {
    ops_check_ids(targets, N, V, "cross-entropy target");
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float mx = x[0], sum = 0.0f;
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) sum += fast_expf(x[j] - mx);
        loss += (double)logf(sum) + (double)mx - (double)x[targets[n]];
    }
    *loss_sum += loss;
}

void ce_shard_max(const float *logits, int N, int Vl, int valid, float *rowmax) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < valid; j++) mx = x[j] > mx ? x[j] : mx;
        rowmax[n] = mx;
    }
}

void ce_shard_sums(const float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                   const float *rowmax, float *sumexp, float *tlogit) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float sum = 0.0f, mx = rowmax[n];
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < valid; j++) sum += fast_expf(x[j] - mx);
        sumexp[n] = sum;
        int t = targets[n] - v0;
        tlogit[n] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
}

void ce_shard_finish(float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                     const float *rowmax, const float *sumexp, const float *tlogit,
                     float grad_scale, int want_grads, double *loss_sum) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        loss += (double)logf(sumexp[n]) + (double)rowmax[n] - (double)tlogit[n];
        if (!want_grads) continue;
        float *x = logits + (size_t)n * Vl, inv = grad_scale / sumexp[n];
        for (int j = 0; j < valid; j++) x[j] = fast_expf(x[j] - rowmax[n]) * inv;
        for (int j = valid; j < Vl; j++) x[j] = 0.0f;
        int t = targets[n] - v0;
        if (t >= 0 && t < valid) x[t] -= grad_scale;
        if (want_grads == CE_GRADS_BF16) bf16_narrow_in_place(x, (size_t)Vl);
    }
    *loss_sum += loss;
}

// -------------------------------------------------------------------- optimizer

void sum_squares(const float *x, size_t n, double *acc) {
    double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    *acc += s;
}

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                  float grad_scale, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t) {
    // Bias corrections in double, as PyTorch computes them in Python floats.
    const float bc1 = (float)(1.0 - pow(beta1, t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
    const float step_size = lr / bc1;
    const float decay = 1.0f - lr * weight_decay;
    // bf16 products: the weights' bf16 copy written here, the same values the first
    // product would round (a pass over the parameters fewer)
    uint16_t *copy16 = cpu_bf16_copy_for_update(param, n);  // (n) bf16 or NULL
    if (copy16) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++)
            copy16[i] = bf16_from_f32(
                adamw_element(param, grad, m, v, i, grad_scale, beta1, beta2, eps, bc2_sqrt, step_size, decay));
        return;
    }
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        adamw_element(param, grad, m, v, i, grad_scale, beta1, beta2, eps, bc2_sqrt, step_size, decay);
}

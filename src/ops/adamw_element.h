// ops/adamw_element.h — PyTorch's AdamW on one element (ops.h: adamw_update), the
// same expressions for the CPU loop (ops/loss_optim_cpu.c) and the CUDA kernel
// (ops/loss_optim_cuda.cu), so the two backends cannot drift apart: m and v
// updated in place, then the weight decayed and stepped; returns the new weight,
// also stored. bc2_sqrt = sqrt(1 - beta2^t) and step_size = lr / (1 - beta1^t)
// (the bias corrections, computed once per call in double), decay = 1 - lr wd.
#ifndef FEMTOTRON_ADAMW_ELEMENT_H
#define FEMTOTRON_ADAMW_ELEMENT_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define ADAMW_HOST_DEVICE __host__ __device__
#else
#define ADAMW_HOST_DEVICE
#endif

static inline ADAMW_HOST_DEVICE float adamw_element(float *param, const float *grad, float *m, float *v, size_t i,
                                                    float grad_scale, float beta1, float beta2, float eps,
                                                    float bc2_sqrt, float step_size, float decay) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    return param[i] = param[i] * decay - step_size * mi / denom;
}

#endif

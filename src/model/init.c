// model/init.c — Philox4x32-10 counter-based generator and parameter initialisation.
// Every element is a pure function of (seed, tensor name, global element index),
// so the initial weights do not depend on how tensors are split over ranks.
#include "model/init.h"

#include <math.h>
#include <string.h>

#include "util.h"

// Philox4x32-10 constants (Salmon, Moraes, Dror, Shaw: "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011).
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static void stream_block(uint64_t seed, const char *name, uint64_t stream, uint64_t index,
                         uint32_t out[4]) {
    uint32_t key[2] = {(uint32_t)seed, fnv1a32(name) ^ (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    philox4x32(key, ctr, out);
}

// Box-Muller on the first two words of the block for (key, index).
static double normal_from_key(const uint32_t key[2], uint64_t index) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0}, w[4];
    philox4x32(key, ctr, w);
    double u1 = ((double)w[0] + 1.0) / 4294967296.0;  // (0, 1]
    double u2 = (double)w[1] / 4294967296.0;          // [0, 1)
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

double init_normal(uint64_t seed, const char *name, uint64_t index) {
    uint32_t key[2] = {(uint32_t)seed, fnv1a32(name) ^ (uint32_t)(seed >> 32)};
    return normal_from_key(key, index);
}

uint64_t init_random_u64(uint64_t seed, const char *name, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    stream_block(seed, name, stream, index, w);
    return ((uint64_t)w[1] << 32) | w[0];
}

void llama_init_range(const LlamaModel *m, uint64_t seed, size_t lo, size_t hi, float *dst) {
    const double std = m->cfg.initializer_range;
    for (int p = 0; p < m->n_params; p++) {
        const ParamInfo *pi = &m->params[p];
        size_t a = pi->offset > lo ? pi->offset : lo;
        size_t b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
        if (a >= b) continue;
        float *x = dst + (a - lo);
        if (pi->ndim == 1) {  // RMSNorm weights start at one
            for (size_t e = a; e < b; e++) x[e - a] = 1.0f;
            continue;
        }
        // The element's index in the GLOBAL tensor is the generator's counter, so a
        // tensor-parallel slice draws exactly its part; vocab padding rows are zero.
        const uint32_t key[2] = {(uint32_t)seed, fnv1a32(pi->name) ^ (uint32_t)(seed >> 32)};
#pragma omp parallel for schedule(static)
        for (size_t e = a; e < b; e++) {
            int64_t g = param_global_index(pi, e - pi->offset);
            x[e - a] = g < 0 ? 0.0f : (float)(std * normal_from_key(key, (uint64_t)g));
        }
    }
}

void llama_init_params(const LlamaModel *m, float *params, uint64_t seed) {
    llama_init_range(m, seed, 0, m->num_elements, params);
}

// ops/bf16.h — bfloat16 as the host stores it: the upper 16 bits of an fp32 (1
// sign, 8 exponent, 7 mantissa bits), held in a uint16_t (C has no bf16 type).
// The CPU ops that read or write bf16 activations and the safetensors reader and
// writer share these two conversions; the CUDA kernels use cuda_bf16.h's
// __float2bfloat16_rn / __bfloat162float, which round and widen the same way.
#ifndef FEMTOTRON_BF16_H
#define FEMTOTRON_BF16_H

#include <stdint.h>
#include <string.h>

// fp32 -> bf16 bits, rounded to nearest (ties to even), NaN kept a (quiet) NaN.
static inline uint16_t bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    // Add just under half an ulp of the kept part, plus its lowest bit: ties go to
    // the even neighbour; an overflow past the largest finite value rounds to inf.
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// bf16 bits -> fp32: shifting the bits back is exact for every value, subnormals,
// infinities and NaN payloads included.
static inline float bf16_to_f32(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// dst(rows, cols) = x(rows, cols) rounded by bf16_from_f32, their rows ld_dst and
// ld_x values apart: the rounded copy every bf16 product's operand goes through.
static inline void bf16_round_rows(uint16_t *dst, size_t ld_dst, const float *x, size_t ld_x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        uint16_t *d = dst + (size_t)r * ld_dst;
        const float *xr = x + (size_t)r * ld_x;
        for (int c = 0; c < cols; c++) d[c] = bf16_from_f32(xr[c]);
    }
}

// x(n) rounded by bf16_from_f32 in place: value j's bf16 lands at ((uint16_t *)x)[j],
// bytes 2j and 2j+1, inside float j/2, which lies at or before j; so, in ascending
// order, no float is written over before it is read. Chunks of 64 go through a
// local copy, so the reads (as float) and the writes (as bytes) stay apart for a
// compiler that assumes the two types never alias. The second half of x's bytes
// is left as it was. (A bf16 loss gradient: cross_entropy_forward_backward_bf16.)
static inline void bf16_narrow_in_place(float *x, size_t n) {
    unsigned char *bytes = (unsigned char *)x;
    uint16_t chunk[64];  // (64) bf16
    for (size_t j0 = 0; j0 < n; j0 += 64) {
        const size_t c = n - j0 < 64 ? n - j0 : 64;
        for (size_t k = 0; k < c; k++) chunk[k] = bf16_from_f32(x[j0 + k]);
        memcpy(bytes + 2 * j0, chunk, 2 * c);
    }
}

#endif

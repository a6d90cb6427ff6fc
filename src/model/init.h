// model/init.h — counter-based initialisation by global index (docs/DESIGN.md,
// invariant 1: layout-independent numerics, rule 1).
//
// Generator: Philox4x32-10 (Salmon et al. 2011, as in cuRAND/JAX/PyTorch CUDA).
//   key     = (low 32 bits of seed, fnv1a32(tensor name) ^ high 32 bits of seed)
//   counter = (element index low 32, element index high 32, stream, 0)
// Element i of a tensor is normal(0, std) from Box-Muller on the first two words:
//   u1 = (w0 + 1) / 2^32 in (0, 1],  u2 = w1 / 2^32 in [0, 1)
//   z  = sqrt(-2 ln u1) * cos(2 pi u2)                 (computed in double)
// so any rank can generate any slice of any tensor, whatever the layout.
#ifndef FEMTOTRON_INIT_H
#define FEMTOTRON_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "model/llama.h"

// Philox4x32-10 block: 4 random 32-bit words for (key, counter).
void philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);

// Standard normal number for element `index` of the stream keyed by (seed, name).
double init_normal(uint64_t seed, const char *name, uint64_t index);

// Uniform 64-bit word for `index` of stream (seed, name, stream) — used for shuffles.
uint64_t init_random_u64(uint64_t seed, const char *name, uint64_t stream, uint64_t index);

// Initialise the flat parameter buffer: normal(0, initializer_range) for every
// matrix (embedding included), ones for norm weights.
void llama_init_params(const LlamaModel *m, float *params, uint64_t seed);

// The same values for the flat range [lo, hi) only: dst(hi - lo). Any rank can
// initialise any slice, and gets exactly what a single rank would hold there.
void llama_init_range(const LlamaModel *m, uint64_t seed, size_t lo, size_t hi, float *dst);

#endif

// gen/sampler.h — choosing the next token from logits, as Hugging Face generate()
// does with its warpers, in this order: temperature, top-k, top-p (nucleus).
// Shapes: V the model's vocabulary size.
//   temperature <= 0: greedy (argmax; the lowest id among equal maxima)
//   top_k > 0: keep the k largest logits (ties at the k-th kept as well)
//   top_p < 1: keep, in descending probability, each token whose predecessors' mass
//              is below top_p (so at least one)
// The draw is reproducible: u = (init_random_u64(seed, "generate", 0, step) >> 11)
// / 2^53 in [0, 1), and the token is the first whose cumulative probability in
// id order exceeds u times the kept mass.
#ifndef FEMTOTRON_SAMPLER_H
#define FEMTOTRON_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature;
    int top_k;               // 0 = off
    float top_p;             // 1 = off
    uint64_t seed;
    int V;
    const uint8_t *allowed;  // (V) 1 for ids that may be drawn (decodable tokens)
    float *prob;             // (V) scratch
    int32_t *order;          // (V) scratch
} Sampler;

void sampler_init(Sampler *s, int V, const uint8_t *allowed, float temperature, int top_k,
                  float top_p, uint64_t seed);
void sampler_free(Sampler *s);
// The token for generation step `step` (0, 1, ...) from logits(V).
int32_t sampler_next(Sampler *s, const float *logits, uint64_t step);

#endif

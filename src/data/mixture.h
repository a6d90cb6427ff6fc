// data/mixture.h — a weighted mixture of token datasets (data.train / data.val with
// several sources): which sequence every global position reads.
//
// Sources k = 0..K-1 in the order data.train lists them, weights w_k normalised to
// sum to 1. The rule (Megatron-LM's dataset blending):
//   position p = 0, 1, 2, ... goes to the source with the largest deficit
//       w_k * (p + 1) - c_k(p)          (ties: the lowest k)
//   where c_k(p) counts the positions before p that went to source k, and reads
//   that source's own position c_k(p) under its data-order rule (data/tokens.h:
//   wrap-around epochs, and with data.shuffle a permutation per epoch seeded with
//   the run's seed + k).
// So after any n positions every source has had w_k * n of them to within one
// (tests/unit/test_mixture.c measures it), within every step as over the run; and
// the sequence at a position is a function of the seed and the position alone:
// the loss curve does not depend on the layout, and a resume is exact. With one
// source, position p is simply that source's position p.
//
// Positions are mapped by a cursor that walks forward from 0 (O(K) per position,
// cached): reads that move forward, as training does, cost nothing extra; a read
// behind the cursor (a new run resuming at step s) walks from 0 again.
#ifndef FEMTOTRON_MIXTURE_H
#define FEMTOTRON_MIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "data/tokens.h"

// Where the rule stands after `pos` positions.
typedef struct {
    uint64_t pos;
    uint64_t *count;  // (K) c_k(pos)
} MixtureCursor;

typedef struct {
    int n;                  // K sources
    DataSource *spec;       // (K) paths and weights as given
    double *w;              // (K) weights normalised to sum 1
    TokenDataset *src;      // (K) each source's shards
    MixtureCursor read;     // serves mixture_fill_batch
    MixtureCursor stats;    // serves mixture_counts (metrics), independent of reads
} DataMixture;

// Open every source of data.train or data.val (spec; key names it in messages) as
// tokens_open does. Sources prepared by `femtotron prepare` must agree on the
// tokenizer (prepare.json: vocabulary, end- and beginning-of-text ids, and the
// tokenizer.json itself); a mixture of two tokenizations is fatal, naming both.
void mixture_open(DataMixture *m, const char *spec, const char *key, int S, int vocab_size,
                  bool shuffle, uint64_t seed);
void mixture_close(DataMixture *m);

// The source (*k) and its own position (*q) of global position p.
void mixture_locate(DataMixture *m, uint64_t p, int *k, uint64_t *q);

// Sequences at global positions p0 .. p0+B-1: inputs(B*S), targets(B*S).
void mixture_fill_batch(DataMixture *m, uint64_t p0, int B, int32_t *inputs, int32_t *targets);

// c_k(p): how many of the positions before p each source served, out (K).
void mixture_counts(DataMixture *m, uint64_t p, uint64_t *out);

#endif

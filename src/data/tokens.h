// data/tokens.h — llm.c token shards and the data-order rule (README: "Data order";
// docs/DESIGN.md, invariant 1: layout-independent numerics, rule 2).
//
// Shapes: S tokens per sequence (training.seq_length), B sequences per
// micro-batch, G sequences per global batch, N_seq sequences in the data set.
//
// Shard: 256 int32 header (header[0] = magic 20240520 with uint16 tokens or
// 20240801 with uint32 tokens, header[1] = version, header[2] = token count), then
// the tokens. Shards are taken in lexicographic order of their paths. Shard f with
// n tokens holds floor((n - 1) / S) sequences; sequence j is tokens[j*S .. j*S + S]
// (S + 1 tokens: inputs are the first S, targets the last S); sequences never span
// two shards. Global sequence numbers run across shards in that order.
// Step t (from 0) uses global positions p = t*G .. t*G + G - 1 (G = global batch):
//   without shuffle: sequence p mod N_seq;
//   with shuffle: sequence perm_e[p mod N_seq], e = p / N_seq, where perm_e is the
//   Fisher-Yates permutation of epoch e:
//     perm = identity [0, 1, ..., N_seq - 1]
//     for i = N_seq - 1 down to 1:
//       j = init_random_u64(seed, "data.shuffle", e, i) % (i + 1)   (model/init.h)
//       swap(perm[i], perm[j])
//   (the seed is the run's seed; the plain modulo is part of the rule, bias and all,
//   so that any tool holding init_random_u64 reproduces a batch exactly).
// Shard paths come from glob(3) of the pattern (a plain path works too), sorted
// by strcmp, not by locale.
//
// Live inputs: shards are read with pread, one sequence at a time, into a buffer
// allocated at open (no mapping, so a file truncated under a run is an error
// message, never a SIGBUS). Before each read the shard's size and modification time
// are compared with those it had when it was opened, and every token id read is
// checked against vocab_size, so a shard changed or corrupted while a run uses it
// stops the run naming the file, and no id outside the vocabulary reaches the model.
#ifndef FEMTOTRON_TOKENS_H
#define FEMTOTRON_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_files;
    char **paths;             // (n_files) sorted
    int *wide;                // (n_files) 1 for uint32 tokens, 0 for uint16
    int *fds;                 // (n_files) open read-only
    uint64_t *bytes;          // (n_files) size when opened
    int64_t *mtime_ns;        // (n_files) modification time when opened
    uint32_t vocab_size;      // every id read must be below it
    uint8_t *buf;             // ((S + 1) * 4) one sequence's raw tokens
    uint64_t *first_seq;      // (n_files + 1) prefix sums of sequences per file
    uint64_t n_seq;           // total sequences
    int S;                    // sequence length
    bool shuffle;
    uint64_t seed;
    uint64_t perm_epoch;      // epoch whose permutation is cached in perm
    uint64_t *perm;           // (n_seq) cached permutation or NULL
} TokenDataset;

// Open a file or glob of shards, validate headers, sizes and every token id
// (< vocab_size); fatal errors name the file and the problem. Needs at least one
// sequence of S+1 tokens.
void tokens_open(TokenDataset *ds, const char *pattern, int S, int vocab_size,
                 bool shuffle, uint64_t seed);
void tokens_close(TokenDataset *ds);

// Global sequence index used at global position p (data-order rule above).
uint64_t tokens_sequence_at(TokenDataset *ds, uint64_t p);

// Copy global sequence `seq`: inputs(S) and targets(S) as int32. Fatal, naming the
// shard, when it changed since it was opened or holds an id >= vocab_size there.
void tokens_read_sequence(TokenDataset *ds, uint64_t seq, int32_t *inputs, int32_t *targets);

// Fill a micro-batch of B sequences taken at global positions p0 .. p0+B-1:
// inputs(B*S), targets(B*S).
void tokens_fill_batch(TokenDataset *ds, uint64_t p0, int B, int32_t *inputs,
                       int32_t *targets);

// Write an llm.c shard (uint16 when every token < 65536 and !force_wide, else uint32).
void tokens_write_shard(const char *path, const uint32_t *tokens, size_t n, int force_wide);

#endif

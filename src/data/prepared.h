// data/prepared.h — what `femtotron prepare` records beside its shards, so that a
// run trained on them, and every checkpoint of it, knows its tokenizer:
//   DIR/prepare.json   {"format": "femtotron-prepare-1", "tokenizer": "byte-level" or
//                       "tokenizer.json", "vocab_size": N, "eot_token_id": E,
//                       "bos_token_id": B or null}
//   DIR/tokenizer.json (and tokenizer_config.json, special_tokens_map.json when they
//                       sat beside the --tokenizer file): copies, for checkpoints.
#ifndef FEMTOTRON_PREPARED_H
#define FEMTOTRON_PREPARED_H

#include <stdint.h>

#include "config.h"

// Hugging Face tokenizer files a prepared directory (and a checkpoint) may carry.
#define PREPARED_TOKENIZER_FILES 3
extern const char *const PREPARED_TOKENIZER_FILE[PREPARED_TOKENIZER_FILES];

typedef struct {
    char dir[CFG_PATH_MAX];  // the directory holding prepare.json
    int byte_level;          // the built-in byte tokenizer (no tokenizer files)
    uint32_t vocab_size;     // ids the tokenizer makes
    int64_t eot_id;          // end-of-text written after every document
    int64_t bos_id;          // beginning-of-text token, -1 when the tokenizer has none
} PreparedInfo;

struct Tokenizer;
// The beginning-of-text token of a tokenizer: tokenizer_config.json's "bos_token"
// beside tokenizer_path when it names one, else <|begin_of_text|> or <s>; -1 if none
// (byte-level: none).
int64_t prepared_bos_id(const struct Tokenizer *tok, const char *tokenizer_path);

// prepare: write DIR/prepare.json and copy the tokenizer files (tokenizer_path NULL:
// byte-level).
void prepared_write(const char *dir, const char *tokenizer_path, uint32_t vocab_size, int64_t eot_id,
                    int64_t bos_id);

// The record of the directory holding the first file that matches `train_glob` (the
// run's data.train): 1 when it has a prepare.json, else 0 (shards made elsewhere).
// A prepare.json that cannot be read is fatal, naming it.
int prepared_find(const char *train_glob, PreparedInfo *info);

#endif

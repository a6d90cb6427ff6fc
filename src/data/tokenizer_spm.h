// data/tokenizer_spm.h — the loader parts of a character-level ("SentencePiece-
// style") BPE tokenizer.json (tokenizer_spm_load.c), called by tokenizer_load.c.
// Each dies naming the file and what it does not support. Not a public API.
#ifndef FEMTOTRON_TOKENIZER_SPM_H
#define FEMTOTRON_TOKENIZER_SPM_H

#include <cJSON.h>

#include "data/tokenizer_impl.h"
#include "data/tokenizer_json.h"

// The normalizer: Prepend, Replace (String pattern), Sequence of those; null: none.
void tok_load_normalizer(const Ctx *c, Tokenizer *t, const cJSON *n);
// A Metaspace pre-tokenizer's replacement, prepend_scheme (or add_prefix_space) and split.
void tok_load_metaspace(const Ctx *c, Tokenizer *t, const cJSON *p);
// The decoder chain: Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
void tok_load_char_decoder(const Ctx *c, Tokenizer *t, const cJSON *d);
// After the vocabulary is loaded: <0xNN> ids, one-character ASCII ids, and the
// adjacent character pairs inside tokens (where tokenizer_bpe.c may cut a word).
void tok_build_char_tables(Tokenizer *t);

#endif

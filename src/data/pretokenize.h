// data/pretokenize.h — the split patterns of byte-level BPE tokenizers, matched by
// hand (no regex library), exactly as Oniguruma's leftmost-first alternation
// matches them inside Hugging Face `tokenizers`:
//
// GPT-2 (ByteLevel pre-tokenizer with use_regex, or a Split with this pattern):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Llama 3 / tiktoken cl100k (a Split pre-tokenizer), with {1,3} digits; Qwen2 uses
// the same pattern with a single \p{N}:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every character starts a match of these patterns, so splitting a text is: match
// at 0, then at the end of that match, and so on. Bytes that are not valid UTF-8
// count as one character of none of the classes (like punctuation).
#ifndef FEMTOTRON_PRETOKENIZE_H
#define FEMTOTRON_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

// The pattern strings as they appear in tokenizer.json (JSON-decoded).
extern const char *const PRETOK_GPT2_PATTERN;
extern const char *const PRETOK_LLAMA3_PATTERN;
extern const char *const PRETOK_QWEN2_PATTERN;  // Llama 3's with \p{N} instead of \p{N}{1,3}

// Length in bytes (>= 1) of the GPT-2 pattern's match at s[i] (i < n).
size_t pretok_match_gpt2(const uint8_t *s, size_t n, size_t i);
// Length in bytes (>= 1) of the Llama 3 pattern's match at s[i]; max_digits is 3
// (Llama 3) or 1 (Qwen2).
size_t pretok_match_llama3(const uint8_t *s, size_t n, size_t i, int max_digits);

#endif

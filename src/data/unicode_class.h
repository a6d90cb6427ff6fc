// data/unicode_class.h — the Unicode character classes the pre-tokenizer patterns
// of GPT-2 / Llama 3 tokenizers need (\p{L}, \p{N}, \s), and strict UTF-8 decoding.
// The classes come from a generated range table (unicode_class_table.h, Unicode
// version in UNICODE_TABLE_VERSION); code points below U+10000 are looked up in a
// 64 KiB table built from it on first use, the rest by binary search.
#ifndef FEMTOTRON_UNICODE_CLASS_H
#define FEMTOTRON_UNICODE_CLASS_H

#include <stddef.h>
#include <stdint.h>

enum {
    UC_LETTER = 1,  // \p{L}: general category Lu, Ll, Lt, Lm, Lo
    UC_NUMBER = 2,  // \p{N}: Nd, Nl, No (also Rust's char::is_numeric)
    UC_SPACE = 4,   // \s as Oniguruma reads it: U+0009..U+000D, U+0085, Zs, Zl, Zp
};

// Code point returned for a byte that does not start a valid UTF-8 sequence; its
// class is 0 (neither letter, number nor space).
#define UTF8_INVALID 0xFFFFFFFFu

// Class bits of a code point (0 for UTF8_INVALID).
int unicode_class(uint32_t cp);

// Decode the character at s[0..n) (n >= 1): returns its length in bytes and sets
// *cp. Overlong forms, surrogates, values above U+10FFFF and truncated sequences
// are invalid: length 1, *cp = UTF8_INVALID.
size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

// The Unicode version of the table ("14.0.0").
const char *unicode_table_version(void);

#endif

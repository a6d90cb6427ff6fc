// data/byte_tokenizer.h — the byte-level tokenizer: one token per byte of UTF-8
// text, plus one end-of-text token. Vocabulary: 257 ids.
//   ids 0..255  the byte with that value (any bytes pass, valid UTF-8 or not, so
//               encode/decode is a lossless round trip);
//   id 256      end-of-text, written AFTER every document (the last one included),
//               so a shard is doc0 EOT doc1 EOT ... and every document, the first
//               too, is preceded by an EOT or the start of the data.
// Decoding writes id 256 as the visible text "<|endoftext|>" (GPT-2's spelling),
// so generated text shows where the model ended a document.
#ifndef FEMTOTRON_BYTE_TOKENIZER_H
#define FEMTOTRON_BYTE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define BYTE_VOCAB_SIZE 257
#define BYTE_EOT 256
#define BYTE_EOT_TEXT "<|endoftext|>"

// Ids of raw text, no end-of-text (for prompts): ids(n); returns n.
size_t byte_encode(const uint8_t *text, size_t n, uint32_t *ids);

// Ids of one document: its bytes then BYTE_EOT: ids(n + 1); returns n + 1.
size_t byte_encode_document(const uint8_t *text, size_t n, uint32_t *ids);

// Text of one id: one byte for 0..255, BYTE_EOT_TEXT for 256; *len gets its
// length (the byte may be 0, so use len, not strlen). Dies for ids >= 257.
const char *byte_token_text(uint32_t id, size_t *len);

// Decode ids(n) into out (room for byte_decoded_length(ids, n) bytes; not
// NUL-terminated); returns the number of bytes written.
size_t byte_decoded_length(const uint32_t *ids, size_t n);
size_t byte_decode(const uint32_t *ids, size_t n, char *out);

#endif

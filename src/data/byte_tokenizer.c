// data/byte_tokenizer.c — byte-level tokenizer (rules in byte_tokenizer.h).
#include "data/byte_tokenizer.h"

#include <string.h>

#include "util.h"

// (256) one char per byte value, so byte_token_text can return a pointer into it.
static const char byte_chars[256] = {
#define B4(n) (char)(n), (char)((n) + 1), (char)((n) + 2), (char)((n) + 3)
#define B16(n) B4(n), B4((n) + 4), B4((n) + 8), B4((n) + 12)
#define B64(n) B16(n), B16((n) + 16), B16((n) + 32), B16((n) + 48)
    B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
};

size_t byte_encode(const uint8_t *text, size_t n, uint32_t *ids) {
    for (size_t i = 0; i < n; i++) ids[i] = text[i];
    return n;
}

size_t byte_encode_document(const uint8_t *text, size_t n, uint32_t *ids) {
    byte_encode(text, n, ids);
    ids[n] = BYTE_EOT;
    return n + 1;
}

const char *byte_token_text(uint32_t id, size_t *len) {
    if (id < 256) {
        *len = 1;
        return &byte_chars[id];
    }
    if (id == BYTE_EOT) {
        *len = sizeof(BYTE_EOT_TEXT) - 1;
        return BYTE_EOT_TEXT;
    }
    die("byte tokenizer: id %u is outside its vocabulary of %d ids", id, BYTE_VOCAB_SIZE);
}

size_t byte_decoded_length(const uint32_t *ids, size_t n) {
    size_t total = 0, len;
    for (size_t i = 0; i < n; i++) {
        byte_token_text(ids[i], &len);
        total += len;
    }
    return total;
}

size_t byte_decode(const uint32_t *ids, size_t n, char *out) {
    size_t pos = 0, len;
    for (size_t i = 0; i < n; i++) {
        const char *s = byte_token_text(ids[i], &len);
        memcpy(out + pos, s, len);
        pos += len;
    }
    return pos;
}

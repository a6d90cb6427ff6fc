// tests/fuzz/fuzz_tokenizer.c — a Hugging Face tokenizer.json on any bytes:
// tokenizer_load, and when it loads, an encode and decode of a fixed text.
#include "fuzz.h"

#include "data/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *path = fuzz_file("tokenizer.json", data, n);
    FUZZ_TRY({
        Tokenizer *t = tokenizer_load(path);
        TokenizerState *st = tokenizer_state_new(t);
        TokenList ids = {0};
        static const char text[] = "Hello, world! 123 héllo\n\t<|endoftext|>";
        tokenizer_encode_with_specials(st, (const uint8_t *)text, sizeof text - 1, &ids);
        size_t len;
        free(tokenizer_decode(t, ids.ids, ids.n, &len));
        token_list_free(&ids);
        tokenizer_state_free(st);
        tokenizer_free(t);
    });
    return 0;
}

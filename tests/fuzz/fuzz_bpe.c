// tests/fuzz/fuzz_bpe.c — the byte-level BPE encoder on any text, with the oracle
// decode(encode(x)) == x: a GPT-2 style tokenizer.json (the 256 byte characters,
// a few merges, the GPT-2 split pattern) is written once, and every input must
// come back byte for byte.
#include "fuzz.h"

#include "data/tokenizer.h"

static Tokenizer *bpe;
static TokenizerState *state;

// GPT-2's bytes_to_unicode: the code point standing for byte b, as UTF-8 (JSON-safe).
static void byte_char(int b, char *out) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, cp = b;
    if (!printable) {
        int k = 0;
        for (int c = 0; c < b; c++) k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
        cp = 256 + k;
    }
    if (cp == '"' || cp == '\\') sprintf(out, "\\%c", cp);
    else if (cp < 0x80) sprintf(out, "%c", cp);
    else sprintf(out, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static char json[16384];
    size_t k = (size_t)snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    char c[8];
    for (int b = 0; b < 256; b++) {
        byte_char(b, c);
        k += (size_t)snprintf(json + k, sizeof json - k, "\"%s\": %d, ", c, b);
    }
    // merges: "Ġ t" -> Ġt, "t h" -> th, "th e" -> the, "Ġ the" -> Ġthe, "i n" -> in
    k += (size_t)snprintf(json + k, sizeof json - k,
                          "\"\\u0120t\": 256, \"th\": 257, \"the\": 258, \"\\u0120the\": 259, \"in\": 260}, "
                          "\"merges\": [\"\\u0120 t\", \"t h\", \"th e\", \"\\u0120 the\", \"i n\"]}, "
                          "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                          "\"trim_offsets\": true, \"use_regex\": true}, "
                          "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                          "\"trim_offsets\": true, \"use_regex\": true}, "
                          "\"added_tokens\": [{\"id\": 261, \"content\": \"<|endoftext|>\", \"special\": true}]}");
    const char *path = fuzz_file("bpe.json", (const uint8_t *)json, k);
    bpe = tokenizer_load(path);
    state = tokenizer_state_new(bpe);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    TokenList ids = {0};
    tokenizer_encode(state, data, n, &ids);
    size_t len = 0;
    char *back = tokenizer_decode(bpe, ids.ids, ids.n, &len);
    if (len != n || memcmp(back, data, n) != 0) {
        fprintf(stderr, "decode(encode(x)) != x: %zu bytes in, %zu bytes back\n", n, len);
        abort();
    }
    free(back);
    token_list_free(&ids);
    return 0;
}

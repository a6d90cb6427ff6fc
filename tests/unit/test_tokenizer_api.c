// tests/unit/test_tokenizer_api.c — the tokenizer API (data/tokenizer.h).
//
// Without arguments (run by tests/run_all.sh): self-checks that need no
// tokenizer.json — strict UTF-8 decoding, Unicode classes of characters from
// several scripts, the split patterns on hand-analysed strings, the byte-level
// tokenizer's round trip.
// As a tool for tests/shell/test_tokenizer.sh (which compares with Hugging Face
// `tokenizers`):
//   test_tokenizer_api encode TOKENIZER.json TEXTS.jsonl [--specials]
//       one line of space-separated ids per {"text": ...} line
//   test_tokenizer_api decode TOKENIZER.json < IDS
//       per line of ids, one line with the hex of the decoded bytes
//   test_tokenizer_api shown TOKENIZER.json < IDS
//       per line of ids, the hex of their tokenizer_token_bytes concatenated (what
//       generate streams)
//   test_tokenizer_api cuts TOKENIZER.json FILE
//       encodes FILE whole and cut at every safe cut position tokenizer_safe_cut
//       finds; prints "cuts N identical" or exits 1 naming the first difference
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/byte_tokenizer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/unicode_class.h"
#include "util.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("cannot open %s", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *n = len;
    return buf;
}

static int cmd_encode(const char *tok_path, const char *texts, int specials) {
    Tokenizer *t = tokenizer_load(tok_path);
    TokenizerState *st = tokenizer_state_new(t);
    FILE *f = fopen(texts, "rb");
    if (!f) die_errno("cannot open %s", texts);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    TokenList ids = {0};
    while ((got = getline(&line, &cap, f)) > 0) {
        cJSON *j = cJSON_ParseWithLength(line, (size_t)got);
        const cJSON *s = j ? cJSON_GetObjectItemCaseSensitive(j, "text") : NULL;
        if (!cJSON_IsString(s)) die("%s: a line without a \"text\" string", texts);
        ids.n = 0;
        const uint8_t *p = (const uint8_t *)s->valuestring;
        if (specials) tokenizer_encode_with_specials(st, p, strlen(s->valuestring), &ids);
        else tokenizer_encode(st, p, strlen(s->valuestring), &ids);
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %u" : "%u", ids.ids[i]);
        putchar('\n');
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    token_list_free(&ids);
    tokenizer_state_free(st);
    tokenizer_free(t);
    return 0;
}

static int cmd_decode(const char *tok_path) {
    Tokenizer *t = tokenizer_load(tok_path);
    char *line = NULL;
    size_t cap = 0;
    TokenList ids = {0};
    while (getline(&line, &cap, stdin) > 0) {
        ids.n = 0;
        char *p = line, *end;
        for (;;) {
            unsigned long v = strtoul(p, &end, 10);
            if (end == p) break;
            token_list_push(&ids, (uint32_t)v);
            p = end;
        }
        size_t len;
        char *text = tokenizer_decode(t, ids.ids, ids.n, &len);
        for (size_t i = 0; i < len; i++) printf("%02x", (uint8_t)text[i]);
        putchar('\n');
        free(text);
    }
    free(line);
    token_list_free(&ids);
    tokenizer_free(t);
    return 0;
}

static int cmd_shown(const char *tok_path) {
    Tokenizer *t = tokenizer_load(tok_path);
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *p = line, *end;
        for (;;) {
            unsigned long v = strtoul(p, &end, 10);
            if (end == p) break;
            size_t len;
            const uint8_t *b = tokenizer_token_bytes(t, (uint32_t)v, &len);
            if (!b) die("shown: id %lu is no token", v);
            for (size_t i = 0; i < len; i++) printf("%02x", b[i]);
            p = end;
        }
        putchar('\n');
    }
    free(line);
    tokenizer_free(t);
    return 0;
}

static int cmd_cuts(const char *tok_path, const char *file) {
    Tokenizer *t = tokenizer_load(tok_path);
    TokenizerState *st = tokenizer_state_new(t);
    size_t n;
    uint8_t *text = (uint8_t *)slurp(file, &n);
    TokenList whole = {0}, parts = {0};
    tokenizer_encode(st, text, n, &whole);
    size_t start = 0, cuts = 0;
    for (size_t p = tokenizer_safe_cut(t, text, n, 1); p; p = tokenizer_safe_cut(t, text, n, p + 1)) {
        tokenizer_encode(st, text + start, p - start, &parts);
        start = p;
        cuts++;
    }
    tokenizer_encode(st, text + start, n - start, &parts);
    int ok = whole.n == parts.n && memcmp(whole.ids, parts.ids, whole.n * sizeof(uint32_t)) == 0;
    if (!ok) {
        size_t i = 0;
        while (i < whole.n && i < parts.n && whole.ids[i] == parts.ids[i]) i++;
        fprintf(stderr, "cut encoding differs at token %zu (whole %zu tokens, parts %zu)\n", i,
                whole.n, parts.n);
        return 1;
    }
    printf("cuts %zu identical (%zu tokens)\n", cuts, whole.n);
    token_list_free(&whole);
    token_list_free(&parts);
    tokenizer_state_free(st);
    tokenizer_free(t);
    free(text);
    return 0;
}

// s with \n and \t written as escapes, for one-line test names (static buffer).
static const char *esc(const char *s, int which) {
    static char bufs[3][512];
    char *o = bufs[which];
    size_t k = 0;
    for (; *s && k < 500; s++) {
        if (*s == '\n') o[k++] = '\\', o[k++] = 'n';
        else if (*s == '\t') o[k++] = '\\', o[k++] = 't';
        else o[k++] = *s;
    }
    o[k] = 0;
    return o;
}

// Pieces of s under a split pattern, joined with '|'.
static void split_join(const char *s, int llama3, char *out) {
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        size_t m = llama3 ? pretok_match_llama3((const uint8_t *)s, n, i, 3)
                          : pretok_match_gpt2((const uint8_t *)s, n, i);
        if (i) out[k++] = '|';
        memcpy(out + k, s + i, m);
        k += m;
        i += m;
    }
    out[k] = 0;
}

static void self_checks(void) {
    // UTF-8: valid characters of 1..4 bytes, then invalid forms, each 1 byte.
    const struct { const char *s; size_t len; uint32_t cp; } u8[] = {
        {"A", 1, 'A'}, {"\xc3\xa9", 2, 0xE9}, {"\xe6\x9d\xb1", 3, 0x6771},
        {"\xf0\x9f\x8e\x89", 4, 0x1F389}, {"\xc0\x80", 1, UTF8_INVALID} /* overlong */,
        {"\xed\xa0\x80", 1, UTF8_INVALID} /* surrogate */, {"\xe6\x9d", 1, UTF8_INVALID} /* truncated */,
        {"\x80", 1, UTF8_INVALID}, {"\xf4\x90\x80\x80", 1, UTF8_INVALID} /* > U+10FFFF */,
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof u8 / sizeof u8[0]; i++) {
        uint32_t cp;
        size_t len = utf8_decode((const uint8_t *)u8[i].s, strlen(u8[i].s), &cp);
        ok &= len == u8[i].len && cp == u8[i].cp;
    }
    CHECK(ok, "utf8_decode: valid 1-4 byte characters; overlong, surrogate, truncated, stray and too-large forms are 1 invalid byte");

    // Classes of characters whose category is well known.
    const struct { uint32_t cp; int cls; } uc[] = {
        {'a', UC_LETTER}, {0xE9, UC_LETTER} /* é */, {0x3B1, UC_LETTER} /* α */,
        {0x6771, UC_LETTER} /* 東 */, {0x3042, UC_LETTER} /* あ */, {0x20000, UC_LETTER} /* CJK ext B */,
        {'7', UC_NUMBER}, {0x663, UC_NUMBER} /* Arabic-Indic 3, Nd */, {0x2167, UC_NUMBER} /* Ⅷ, Nl */,
        {0xBD, UC_NUMBER} /* ½, No */, {0xB2, UC_NUMBER} /* ², No */,
        {'\t', UC_SPACE}, {0x85, UC_SPACE}, {0xA0, UC_SPACE}, {0x2003, UC_SPACE}, {0x3000, UC_SPACE},
        {0x2028, UC_SPACE}, {0x301, 0} /* combining acute, Mn */, {0x1F389, 0} /* 🎉, So */,
        {0x200B, 0} /* zero width space, Cf */, {'!', 0}, {0x110000, 0},
    };
    ok = 1;
    for (size_t i = 0; i < sizeof uc / sizeof uc[0]; i++) {
        if (unicode_class(uc[i].cp) != uc[i].cls) {
            fprintf(stderr, "U+%04X: class %d, expected %d\n", uc[i].cp, unicode_class(uc[i].cp), uc[i].cls);
            ok = 0;
        }
    }
    CHECK(ok, "Unicode classes (table %s): letters, numbers (Nd, Nl, No), spaces and others across scripts",
          unicode_table_version());

    // Split patterns on strings analysed by hand from the regexes.
    const struct { int llama3; const char *in, *want; } sp[] = {
        {0, "Hello world", "Hello| world"},
        {0, "a  b", "a| | b"},                   // \s+(?!\S) leaves the last space to " b"
        {0, "x \n\ny", "x| \n|\n|y"},      // " ?" takes a space only, not a newline
        {0, "I'm don't 'S", "I|'m| don|'t| '|S"},  // GPT-2 contractions are case-sensitive
        {0, "abc123 456!!", "abc|123| 456|!!"},
        {0, "end   ", "end|   "},               // trailing run taken whole
        {1, "I'M don't", "I|'M| don|'t"},          // Llama 3's (?i:...)
        {1, "12345 x", "123|45| x"},               // \p{N}{1,3}, no space before digits
        {1, "a  1", "a| | |1"},                  // digits take no space: the last one stands alone
        {1, "Hi!\n\nYo", "Hi|!\n\n|Yo"},           // punctuation takes following newlines
        {1, "a \n \nb", "a| \n \n|b"},             // \s*[\r\n]+ ends after the last newline
        {1, "(hello", "(hello"},                   // one non-letter may lead letters
        {1, "x\tword", "x|\tword"},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        split_join(sp[i].in, sp[i].llama3, buf);
        CHECK(strcmp(buf, sp[i].want) == 0, "%s split of \"%s\": got \"%s\", want \"%s\"",
              sp[i].llama3 ? "llama3" : "gpt2", esc(sp[i].in, 0), esc(buf, 1), esc(sp[i].want, 2));
    }

    // Byte-level tokenizer through the common interface.
    Tokenizer *t = tokenizer_byte_level();
    TokenizerState *st = tokenizer_state_new(t);
    uint8_t bytes[300];
    for (int i = 0; i < 300; i++) bytes[i] = (uint8_t)(i * 37 + 11);
    TokenList ids = {0};
    tokenizer_encode(st, bytes, sizeof bytes, &ids);
    size_t len;
    char *back = tokenizer_decode(t, ids.ids, ids.n, &len);
    CHECK(ids.n == 300 && len == 300 && memcmp(back, bytes, 300) == 0 &&
          tokenizer_state_invalid_utf8(st) > 0,
          "byte-level: 300 arbitrary bytes round trip, invalid UTF-8 counted");
    uint32_t eot = BYTE_EOT;
    char *e = tokenizer_decode(t, &eot, 1, &len);
    CHECK(tokenizer_default_eot(t) == BYTE_EOT && tokenizer_vocab_size(t) == BYTE_VOCAB_SIZE &&
          strcmp(e, BYTE_EOT_TEXT) == 0, "byte-level: vocab 257, end-of-text 256 decodes as %s",
          BYTE_EOT_TEXT);
    free(e);
    free(back);
    token_list_free(&ids);
    tokenizer_state_free(st);
    tokenizer_free(t);
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "encode"))
        return cmd_encode(argv[2], argv[3], argc > 4 && !strcmp(argv[4], "--specials"));
    if (argc == 3 && !strcmp(argv[1], "decode")) return cmd_decode(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "shown")) return cmd_shown(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "cuts")) return cmd_cuts(argv[2], argv[3]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_tokenizer_api [encode TOK TEXTS.jsonl [--specials] | decode TOK | cuts TOK FILE]\n");
        return 2;
    }
    self_checks();
    return check_summary();
}

// data/pretokenize.c — the GPT-2 and Llama 3 split patterns matched by hand.
//
// Each function walks the alternatives of its pattern in order and returns the
// first that matches, with the greedy quantifiers and the backtracking Oniguruma
// would do; the comments name the alternative each branch decides.
#include "data/pretokenize.h"

#include "data/unicode_class.h"

const char *const PRETOK_GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char *const PRETOK_LLAMA3_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const PRETOK_QWEN2_PATTERN =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

#define OTHER 0  // class of a character that is neither letter, number nor space

typedef struct {
    uint32_t cp;
    size_t len;
    int cls;
} Char;

static inline Char char_at(const uint8_t *s, size_t n, size_t i) {
    Char c;
    if (s[i] < 0x80) {  // ASCII fast path
        static const uint8_t ascii_class[128] = {
            ['\t'] = UC_SPACE, ['\n'] = UC_SPACE, ['\v'] = UC_SPACE, ['\f'] = UC_SPACE,
            ['\r'] = UC_SPACE, [' '] = UC_SPACE,
            ['0'] = UC_NUMBER, ['1'] = UC_NUMBER, ['2'] = UC_NUMBER, ['3'] = UC_NUMBER,
            ['4'] = UC_NUMBER, ['5'] = UC_NUMBER, ['6'] = UC_NUMBER, ['7'] = UC_NUMBER,
            ['8'] = UC_NUMBER, ['9'] = UC_NUMBER,
#define L2(a) [a] = UC_LETTER, [a + 1] = UC_LETTER
#define L8(a) L2(a), L2(a + 2), L2(a + 4), L2(a + 6)
            L8('A'), L8('A' + 8), L8('A' + 16), L2('A' + 24),
            L8('a'), L8('a' + 8), L8('a' + 16), L2('a' + 24),
#undef L8
#undef L2
        };
        c.cp = s[i];
        c.len = 1;
        c.cls = ascii_class[s[i]];
        return c;
    }
    c.len = utf8_decode(s + i, n - i, &c.cp);
    c.cls = c.cp == UTF8_INVALID ? OTHER : unicode_class(c.cp);
    return c;
}

// End of the maximal run from i of characters whose class has a bit of `mask`
// (mask 0: characters of class OTHER).
static size_t run_end(const uint8_t *s, size_t n, size_t i, int mask) {
    while (i < n) {
        Char c = char_at(s, n, i);
        if (mask ? !(c.cls & mask) : c.cls != OTHER) break;
        i += c.len;
    }
    return i;
}

// Start of the last character of s[i..j) (j > i).
static size_t last_char_start(const uint8_t *s, size_t i, size_t j) {
    size_t k = j - 1;
    // Step back over continuation bytes, but not past i and not more than 3; a
    // valid sequence is re-checked, an invalid one counts byte by byte.
    while (k > i && j - k < 4 && (s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    if (utf8_decode(s + k, j - k, &cp) != j - k) k = j - 1;
    return k;
}

// The whitespace alternatives \s+(?!\S)|\s+ at a whitespace character i whose run
// ends at j: the lookahead fails before a non-space, so the first alternative gives
// back the run's last character (it then precedes a space); with a one-character
// run that leaves nothing and \s+ takes the run whole.
static size_t whitespace_tail(const uint8_t *s, size_t n, size_t i, size_t j) {
    if (j == n) return j - i;
    size_t last = last_char_start(s, i, j);
    return last > i ? last - i : j - i;
}

static int lower_ascii(int b) { return b >= 'A' && b <= 'Z' ? b + 32 : b; }

// 's 't 're 've 'm 'll 'd at s[i] == '\''; returns the length or 0.
static size_t contraction(const uint8_t *s, size_t n, size_t i, int fold_case) {
    if (i + 1 >= n) return 0;
    int a = fold_case ? lower_ascii(s[i + 1]) : s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    int b = fold_case ? lower_ascii(s[i + 2]) : s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

size_t pretok_match_gpt2(const uint8_t *s, size_t n, size_t i) {
    if (s[i] == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
        size_t k = contraction(s, n, i, 0);
        if (k) return k;
    }
    Char c = char_at(s, n, i);
    size_t start = i;
    if (c.cp == ' ' && i + 1 < n) {
        // " ?" takes the space when the class after it can follow.
        Char d = char_at(s, n, i + 1);
        if (d.cls & UC_LETTER) return run_end(s, n, i + 1, UC_LETTER) - start;  //  ?\p{L}+
        if (d.cls & UC_NUMBER) return run_end(s, n, i + 1, UC_NUMBER) - start;  //  ?\p{N}+
        if (d.cls == OTHER) return run_end(s, n, i + 1, 0) - start;  //  ?[^\s\p{L}\p{N}]+
    }
    if (c.cls & UC_LETTER) return run_end(s, n, i, UC_LETTER) - start;
    if (c.cls & UC_NUMBER) return run_end(s, n, i, UC_NUMBER) - start;
    if (c.cls == OTHER) return run_end(s, n, i, 0) - start;
    return whitespace_tail(s, n, i, run_end(s, n, i, UC_SPACE));  // \s+(?!\S)|\s+
}

size_t pretok_match_llama3(const uint8_t *s, size_t n, size_t i, int max_digits) {
    if (s[i] == '\'') {  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        size_t k = contraction(s, n, i, 1);
        if (k) return k;
    }
    Char c = char_at(s, n, i);
    // [^\r\n\p{L}\p{N}]?\p{L}+ : any one character but CR, LF, letters and numbers
    // (spaces and punctuation included) may lead a run of letters.
    if (c.cp != '\r' && c.cp != '\n' && !(c.cls & (UC_LETTER | UC_NUMBER)) && i + c.len < n) {
        Char d = char_at(s, n, i + c.len);
        if (d.cls & UC_LETTER) return run_end(s, n, i + c.len, UC_LETTER) - i;
    }
    if (c.cls & UC_LETTER) return run_end(s, n, i, UC_LETTER) - i;
    if (c.cls & UC_NUMBER) {  // \p{N}{1,3}
        size_t j = i;
        for (int k = 0; k < max_digits && j < n; k++) {
            Char d = char_at(s, n, j);
            if (!(d.cls & UC_NUMBER)) break;
            j += d.len;
        }
        return j - i;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    size_t j = 0;
    if (c.cp == ' ' && i + 1 < n && char_at(s, n, i + 1).cls == OTHER) j = run_end(s, n, i + 1, 0);
    else if (c.cls == OTHER) j = run_end(s, n, i, 0);
    if (j) {
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j - i;
    }
    // c is whitespace from here on.
    size_t end = run_end(s, n, i, UC_SPACE);
    // \s*[\r\n]+ : \s* backs off until a CR or LF follows, so the match ends just
    // after the run's last CR or LF.
    for (size_t k = end; k > i; k--)
        if (s[k - 1] == '\r' || s[k - 1] == '\n') return k - i;
    return whitespace_tail(s, n, i, end);  // \s+(?!\S)|\s+
}

// data/unicode_class.c — Unicode classes for the pre-tokenizer (rules in unicode_class.h).
#define _POSIX_C_SOURCE 200809L
#include "data/unicode_class.h"

#include <pthread.h>

#include "data/unicode_class_table.h"

#define N_RANGES(t) (sizeof(t) / sizeof((t)[0]))

// (65536) class bits of every code point of the Basic Multilingual Plane.
static uint8_t bmp_class[65536];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static void fill(const uint32_t (*r)[2], size_t n, uint8_t bit) {
    for (size_t i = 0; i < n; i++)
        for (uint32_t cp = r[i][0]; cp <= r[i][1] && cp < 65536; cp++) bmp_class[cp] |= bit;
}

static void build_bmp(void) {
    fill(unicode_letter_ranges, N_RANGES(unicode_letter_ranges), UC_LETTER);
    fill(unicode_number_ranges, N_RANGES(unicode_number_ranges), UC_NUMBER);
    fill(unicode_space_ranges, N_RANGES(unicode_space_ranges), UC_SPACE);
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;  // binary search for the last range starting at or before cp
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][0] <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && cp <= r[lo - 1][1];
}

int unicode_class(uint32_t cp) {
    if (cp < 65536) {
        pthread_once(&bmp_once, build_bmp);
        return bmp_class[cp];
    }
    if (cp > 0x10FFFF) return 0;
    int c = 0;
    if (in_ranges(unicode_letter_ranges, N_RANGES(unicode_letter_ranges), cp)) c |= UC_LETTER;
    if (in_ranges(unicode_number_ranges, N_RANGES(unicode_number_ranges), cp)) c |= UC_NUMBER;
    if (in_ranges(unicode_space_ranges, N_RANGES(unicode_space_ranges), cp)) c |= UC_SPACE;
    return c;
}

size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (b >= 0xC2 && b <= 0xDF) len = 2, v = b & 0x1F, min = 0x80;
    else if (b >= 0xE0 && b <= 0xEF) len = 3, v = b & 0x0F, min = 0x800;
    else if (b >= 0xF0 && b <= 0xF4) len = 4, v = b & 0x07, min = 0x10000;
    else goto invalid;  // continuation byte, C0/C1 (always overlong) or F5..FF
    if (len > n) goto invalid;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) goto invalid;
        v = (v << 6) | (s[k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto invalid;
    *cp = v;
    return len;
invalid:
    *cp = UTF8_INVALID;
    return 1;
}

const char *unicode_table_version(void) { return UNICODE_TABLE_VERSION; }

// ops/amx_tiles.h — bf16 tile products on Intel AMX (Advanced Matrix Extensions:
// Sapphire Rapids and later), for the CPU attention kernels' small products
// (ops/attention_amx_cpu.c), and the packing of their operands. Static functions:
// one translation unit includes it.
//
// Why not oneMKL's bf16 product there. The attention's products are 32 x 128 x 64
// and the like, thousands a layer. oneMKL runs each on AMX too, but packs both
// operands and sets its kernels up on every call: on a gpt2-sized layer that was
// half of its time in them (bench/tools/attention_alone.c under perf), and the
// layer ran at 190 GFLOP/s against the 2.1-2.4 TFLOP/s of its large products. Here
// the operands are packed once, where the kernel copies them anyway (keys and
// values once a chunk for every query tile of it), and each product is a few
// dozen tile instructions.
//
// The numerics are those of every bf16 product here: exact products of bf16
// values, summed in fp32 (TDPBF16PS, as oneMKL's AMX kernels), in another order.
//
// AMX in brief. Eight tile registers of up to 16 rows x 64 bytes; TDPBF16PS
// C(16 x 16 fp32) += A(16 x 32 bf16) B, with B "VNNI"-packed: B's row r holds, for
// each of its 16 columns n, the pair (B[2r][n], B[2r+1][n]) as one 32-bit word
// (the first in the low half). The tile data registers need the kernel's leave
// (arch_prctl ARCH_REQ_XCOMP_PERM) once per process, and a tile configuration
// (LDTILECFG) in each thread before use.
#ifndef FEMTOTRON_AMX_TILES_H
#define FEMTOTRON_AMX_TILES_H

#include <stdint.h>
#include <string.h>

#include "ops/bf16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
long syscall(long number, ...);  // unistd.h declares it only under _DEFAULT_SOURCE
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

// 1 when this CPU has AMX-BF16 and the kernel lets this process use the tile data
// registers; asked once (the first call: make it outside parallel regions).
static int amx_usable(void) {
    static int state = -1;  // -1 not asked yet, 0 no, 1 yes
    if (state < 0) {
        unsigned a, b, c, d;
        // CPUID leaf 7, sub-leaf 0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        const int has = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1);
        // ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): Linux 5.16+.
        state = has && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }
    return state;
}

// Every tile 16 rows of 64 bytes (palette 1).
AMX_TARGET static void amx_configure(void) {
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;
    _tile_loadconfig(&cfg);
}

// C(M, N) = A(M, K) B(K, N), or += with accumulate: A bf16 rows lda values apart;
// B VNNI-packed, (K/2, N) 32-bit words, rows ldb words apart; C fp32 rows ldc apart.
// M, N and K multiples of 32: blocks of 2 x 2 tiles of C (tiles 0-3), with A's two
// row tiles (4, 5) and B's two column tiles (6, 7) loaded once per 32 of K for four
// products. Configures the tiles itself (oneMKL's kernels, run on the same thread
// between two calls, load their own configuration).
AMX_TARGET static void amx_gemm(float *C, int ldc, const uint16_t *A, int lda, const uint32_t *B, int ldb, int M,
                                int N, int K, int accumulate) {
    amx_configure();
    const size_t sc = sizeof(float) * (size_t)ldc, sa = sizeof(uint16_t) * (size_t)lda, sb = 4 * (size_t)ldb;
    for (int m = 0; m < M; m += 32)
        for (int n = 0; n < N; n += 32) {
            float *c0 = C + (size_t)m * ldc + n, *c1 = c0 + (size_t)16 * ldc;
            if (accumulate) {
                _tile_loadd(0, c0, sc);
                _tile_loadd(1, c0 + 16, sc);
                _tile_loadd(2, c1, sc);
                _tile_loadd(3, c1 + 16, sc);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int k = 0; k < K; k += 32) {
                _tile_loadd(4, A + (size_t)m * lda + k, sa);
                _tile_loadd(5, A + (size_t)(m + 16) * lda + k, sa);
                _tile_loadd(6, B + (size_t)(k / 2) * ldb + n, sb);
                _tile_loadd(7, B + (size_t)(k / 2) * ldb + n + 16, sb);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c0, sc);
            _tile_stored(1, c0 + 16, sc);
            _tile_stored(2, c1, sc);
            _tile_stored(3, c1 + 16, sc);
        }
}

// dst(16, 16) 32-bit words = src(16, 16) transposed (rows ldd and lds words apart):
// the usual four rounds of AVX-512 shuffles (32-bit, 64-bit, 128-bit and 256-bit
// interleaves). Every CPU with AMX has AVX-512.
__attribute__((target("avx512f"))) static void amx_transpose16(uint32_t *dst, int ldd, const uint32_t *src, int lds) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + (size_t)i * lds);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + (size_t)i * ldd, r[i]);
}

// Back to the tiles' initial state (smaller context switches), at the end of a
// thread's share of a kernel.
AMX_TARGET static void amx_done(void) { _tile_release(); }
#else
static int amx_usable(void) { return 0; }
static void amx_gemm(float *C, int ldc, const uint16_t *A, int lda, const uint32_t *B, int ldb, int M, int N, int K,
                     int accumulate) {
    (void)C, (void)ldc, (void)A, (void)lda, (void)B, (void)ldb, (void)M, (void)N, (void)K, (void)accumulate;
}
static void amx_done(void) {}
static void amx_transpose16(uint32_t *dst, int ldd, const uint32_t *src, int lds) {
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) dst[(size_t)j * ldd + i] = src[(size_t)i * lds + j];
}
#endif

// dst(cols, rows) words = src(rows, cols) transposed, rows and cols multiples of 16.
static void amx_transpose_words(uint32_t *dst, int ldd, const uint32_t *src, int lds, int rows, int cols) {
    for (int i = 0; i < rows; i += 16)
        for (int j = 0; j < cols; j += 16)
            amx_transpose16(dst + (size_t)j * ldd + i, ldd, src + (size_t)i * lds + j, lds);
}

static inline uint32_t amx_pair(float lo, float hi) {
    return (uint32_t)bf16_from_f32(lo) | (uint32_t)bf16_from_f32(hi) << 16;
}

// An A operand: dst(rows_pad, cols) bf16 = x(rows, cols) rounded (rows ld apart),
// rows past `rows` zero.
static void amx_round_rows(uint16_t *dst, const float *x, int ld, int rows, int rows_pad, int cols) {
    bf16_round_rows(dst, cols, x, ld, rows, cols);
    memset(dst + (size_t)rows * cols, 0, sizeof(uint16_t) * (size_t)(rows_pad - rows) * cols);
}

// VNNI B operand from rows that are B's columns: dst(cols / 2, KC) words with
// dst[r][j] = (x[j][2r], x[j][2r + 1]) rounded, for the rows j < n of x(n, cols)
// (rows ld apart), zero for n <= j < n_pad (a multiple of 16; cols of 32). E.g.
// K^T for Q K^T: the pairs run along the head dimension. A row rounded to bf16 is
// its pairs, so: the rows rounded into tmp (n_pad, cols) bf16, then transposed as
// 32-bit words.
static void amx_pack_columns(uint32_t *dst, int KC, const float *x, int ld, int n, int n_pad, int cols,
                             uint16_t *tmp) {
    amx_round_rows(tmp, x, ld, n, n_pad, cols);
    amx_transpose_words(dst, KC, (const uint32_t *)tmp, cols / 2, n_pad, cols / 2);
}

// VNNI B operand from B's rows: dst(n_pad / 2, cols) words with dst[r][c] =
// (x[2r][c], x[2r + 1][c]) rounded, rows of x past n read as zero (n_pad even). E.g.
// V for P V: the pairs run along the keys.
static void amx_pack_rows(uint32_t *dst, const float *x, int ld, int n, int n_pad, int cols) {
    for (int r = 0; r < n_pad / 2; r++) {
        const float *a = x + (size_t)(2 * r) * ld;  // (its next row only where there is one)
        uint32_t *d = dst + (size_t)r * cols;
        if (2 * r + 1 < n)
            for (int c = 0; c < cols; c++) d[c] = amx_pair(a[c], a[ld + c]);
        else if (2 * r < n)
            for (int c = 0; c < cols; c++) d[c] = amx_pair(a[c], 0.0f);
        else
            memset(d, 0, sizeof(uint32_t) * (size_t)cols);
    }
}

// The same from bf16 rows: dst(rows / 2, cols) words of pairs of x16(rows, cols),
// rows ld values apart (dst's cols words apart).
static void amx_pair_rows16(uint32_t *dst, const uint16_t *x16, int ld, int rows, int cols) {
    for (int r = 0; r < rows / 2; r++) {
        const uint16_t *a = x16 + (size_t)(2 * r) * ld, *b = a + ld;
        uint32_t *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = (uint32_t)a[c] | (uint32_t)b[c] << 16;
    }
}

#endif

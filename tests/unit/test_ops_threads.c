// tests/unit/test_ops.c's kernels under threads, and the BLAS they run on: the
// products and the attention on 1 and 2 threads (bit for bit), the products cut
// into blocks of rows among the threads (ops/matmul_cpu.c) against double loops and
// against one thread, and OpenBLAS's kernel family matched to the CPU
// (ops/blas_cores.c). Method and helpers as test_ops.c (ops_reference.h).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/blas_cores.h"
#include "ops/matmul_cpu.h"
#include "ops/ops.h"
#include "ops_reference.h"

static void test_threads(void) {
    int N = 200, I = 256, O = 320;  // large enough for BLAS to split the work
    rng_seed(110);
    float *in = fnew((size_t)N * I), *w = fnew((size_t)O * I), *dout = fnew((size_t)N * O);
    fill(in, (size_t)N * I, -1, 1);
    fill(w, (size_t)O * I, -1, 1);
    fill(dout, (size_t)N * O, -1, 1);
    float *o[2], *di[2], *dw[2];
    int B = 2, S = 16, H = 4, KV = 2, hd = 8;
    size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd;
    size_t np = (size_t)B * H * S;  // lse rows
    int *pos = positions(S);
    float *qkv = fnew(nq), *R = fnew(no), *ao[2], *pr[2], *dq[2];
    fill(qkv, nq, -2, 2);
    fill(R, no, -1, 1);
    for (int k = 0; k < 2; k++) {
        ops_set_threads(k + 1);
        o[k] = fnew((size_t)N * O);
        di[k] = fnew((size_t)N * I);
        dw[k] = fnew((size_t)O * I);
        matmul_forward(o[k], in, w, N, I, O);
        matmul_backward(di[k], dw[k], dout, in, w, N, I, O, 0);
        ao[k] = fnew(no);
        pr[k] = fnew(np);
        dq[k] = fnew(nq);
        float *scr = fnew(attention_scratch_floats(hd));
        attention_forward(ao[k], pr[k], fnew(np), fnew(np), qkv, pos, B, S, H, KV, hd, scr);
        attention_backward(dq[k], fnew(np), R, qkv, ao[k], pr[k], pos, B, S, H, KV, hd, scr);
    }
    ops_set_threads(2);
    double e1 = nerr_ff(o[1], o[0], (size_t)N * O);
    CHECK(e1 <= 1e-6, "matmul_forward 1 vs 2 threads (err %.1e%s)", e1, e1 == 0 ? ", bitwise" : "");
    double e2 = fmax(nerr_ff(di[1], di[0], (size_t)N * I), nerr_ff(dw[1], dw[0], (size_t)O * I));
    CHECK(e2 <= 1e-6, "matmul_backward 1 vs 2 threads (err %.1e%s)", e2, e2 == 0 ? ", bitwise" : "");
    double e3 = fmax(nerr_ff(ao[1], ao[0], no), nerr_ff(pr[1], pr[0], np));
    CHECK(e3 <= 1e-6, "attention_forward 1 vs 2 threads (err %.1e%s)", e3, e3 == 0 ? ", bitwise" : "");
    double e4 = nerr_ff(dq[1], dq[0], nq);
    CHECK(e4 <= 1e-6, "attention_backward 1 vs 2 threads (err %.1e%s)", e4, e4 == 0 ? ", bitwise" : "");
    tfree_all();
}

// Products cut into blocks of rows, one a thread (ops/matmul_cpu.c, sgemm_rows, with
// OpenBLAS on OpenMP's threads): 3 threads over row counts that are not multiples
// of 16 or of 3, so the blocks are uneven and the last one holds the tail. First
// that the three products are cut into 3 (and a product too small for it, or one
// called inside a parallel region, is not), then each against double loops (the
// forward's out, the backward's din += dout @ W into a filled buffer and dW +=
// dout^T in, whose rows are the transposed operand's columns), and bit for bit
// against the same products on one thread, which runs each as one sgemm.
static void test_rows_split(void) {
    int N = 419, I = 160, O = 203;  // rows 419 (forward, din), 203 (dW): blocks of 64-147 rows, >= 4e6 multiply-adds
    ops_set_threads(3);
#if defined(FEMTOTRON_BLIS) || defined(FEMTOTRON_MKL) || defined(FEMTOTRON_SCIPY_OPENBLAS)
    const int cut = 1;  // these builds' BLAS threads its products itself
#else
    const int cut = 3;
#endif
    int blocks_fwd = matmul_cpu_row_blocks(N, O, I), blocks_din = matmul_cpu_row_blocks(N, I, O),
        blocks_dw = matmul_cpu_row_blocks(O, I, N), blocks_small = matmul_cpu_row_blocks(419, 8, 8), blocks_inner = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
        blocks_inner = matmul_cpu_row_blocks(N, O, I);
    }
    CHECK(blocks_fwd == cut && blocks_din == cut && blocks_dw == cut,
          "3 threads: forward, din and dW products cut into %d blocks of rows (%d, %d, %d)", cut, blocks_fwd,
          blocks_din, blocks_dw);
    CHECK(blocks_small == 1 && blocks_inner == 1,
          "3 threads: one call for 419x8x8 (%d blocks) and inside a parallel region (%d)", blocks_small,
          blocks_inner);
    rng_seed(111);
    size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    float *in = fnew(nin), *w = fnew(nw), *dout = fnew(nout), *din0 = fnew(nin), *dw0 = fnew(nw);
    fill(in, nin, -1, 1);
    fill(w, nw, -1, 1);
    fill(dout, nout, -1, 1);
    fill(din0, nin, -1, 1);
    fill(dw0, nw, -1, 1);
    double *out_ref = dnew(nout), *din_ref = to_d(din0, nin), *dw_ref = to_d(dw0, nw);
    matmul_d(out_ref, to_d(in, nin), to_d(w, nw), N, I, O);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double d = dout[(size_t)n * O + o];
            for (int i = 0; i < I; i++) {
                din_ref[(size_t)n * I + i] += d * w[(size_t)o * I + i];
                dw_ref[(size_t)o * I + i] += d * in[(size_t)n * I + i];
            }
        }
    float *out[2], *din[2], *dw[2];
    for (int k = 0; k < 2; k++) {
        ops_set_threads(k ? 1 : 3);
        out[k] = fnew(nout);
        din[k] = fcopy(din0, nin);
        dw[k] = fcopy(dw0, nw);
        matmul_forward(out[k], in, w, N, I, O);
        matmul_backward(din[k], dw[k], dout, in, w, N, I, O, 1);
    }
    ops_set_threads(2);
    double e1 = nerr_f(out[0], out_ref, nout), e2 = nerr_f(din[0], din_ref, nin), e3 = nerr_f(dw[0], dw_ref, nw);
    CHECK(e1 < TOL_FWD, "3 threads: matmul_forward N=%d in=%d out=%d vs double loop (err %.2e)", N, I, O, e1);
    CHECK(e2 < TOL_FWD, "3 threads: matmul_backward din += dout @ W vs double loop (err %.2e)", e2);
    CHECK(e3 < TOL_FWD, "3 threads: matmul_backward dW += dout^T in vs double loop (err %.2e)", e3);
    int same = memcmp(out[0], out[1], nout * sizeof(float)) == 0 && memcmp(din[0], din[1], nin * sizeof(float)) == 0 &&
               memcmp(dw[0], dw[1], nw * sizeof(float)) == 0;
    CHECK(same, "3 threads: the forward's and backward's products bit for bit those of 1 thread");
    tfree_all();
}

// OpenBLAS's fallback corrected (ops/blas_cores.c): an SSE core OpenBLAS fell back
// to is replaced by the widest family the CPU's features allow; a core it
// recognised, a CPU without AVX and an unknown choice are left alone.
static void test_blas_cores(void) {
    const unsigned avx = BLAS_CPU_AVX, avx2 = avx | BLAS_CPU_AVX2_FMA, avx512 = avx2 | BLAS_CPU_AVX512,
                   bf16 = avx512 | BLAS_CPU_AVX512_BF16;
    struct {
        const char *chosen;
        unsigned features;
        const char *want;  // NULL: keep OpenBLAS's choice
    } cases[] = {
        {"Prescott", bf16, "Cooperlake"},  // Emerald Rapids under OpenBLAS 0.3.21
        {"Prescott", avx512, "SkylakeX"},  {"Nehalem", avx2, "Haswell"},
        {"Core2", avx, "Sandybridge"},     {"Prescott", 0, NULL},
        {"Haswell", bf16, NULL},           {"Zen", avx512, NULL},
        {"SkylakeX", bf16, NULL},          {"Sandybridge", avx512, NULL},
        {NULL, bf16, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = blas_core_upgrade(cases[i].chosen, cases[i].features);
        CHECK(got == cases[i].want || (got && cases[i].want && strcmp(got, cases[i].want) == 0),
              "blas_core_upgrade(%s, features 0x%x) = %s", cases[i].chosen ? cases[i].chosen : "NULL",
              cases[i].features, cases[i].want ? cases[i].want : "keep");
    }
    // The feature bits nest as the families do: AVX-512 implies AVX2 and FMA, which imply AVX.
    unsigned f = blas_cpu_features();
    CHECK((!(f & BLAS_CPU_AVX512_BF16) || (f & BLAS_CPU_AVX512)) && (!(f & BLAS_CPU_AVX512) || (f & BLAS_CPU_AVX2_FMA)) &&
              (!(f & BLAS_CPU_AVX2_FMA) || (f & BLAS_CPU_AVX)),
          "blas_cpu_features on this CPU (0x%x) nest: bf16 => AVX-512 => AVX2+FMA => AVX", f);
}

int main(void) {
    ops_set_threads(2);
    test_threads();
    test_rows_split();
    test_blas_cores();
    return check_summary();
}

// tests/gpu/gpu_ops.c — every op of ops.h on the GPU against the same op on the CPU
// (tests/gpu/run.sh builds and runs it; it needs an NVIDIA GPU). Inputs are seeded
// random numbers; each CUDA result must be within 1e-5 of the CPU's in relative
// max-norm: max|gpu - cpu| / max|cpu| (fp32: both sum in different orders, BLAS
// tiles against cuBLASLt's, so bit equality is not expected; 1e-5 is ~80 float
// ulps of the largest entry, far above the rounding of sums of <= a few hundred
// terms and far below any indexing or formula error). Also: repeated runs of the
// order-sensitive ops are bit-identical (issue 14's determinism), planned buffers
// are counted, host <-> buffer copies round-trip; the bf16 products equal the
// fp32 products of bf16-rounded operands and the tensor-core attention is within
// bf16's tolerance of the CPU's fp32 attention (bf16_kernel_checks.h). Ends on "N passed,
// N failed".
#define _POSIX_C_SOURCE 200809L  // setenv (FEMTOTRON_ATTENTION), popen
#include "cpu_ref.h"  // first: the CPU kernels as cpu_*, then ops.h for the CUDA ones

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "io/safetensors.h"
#include "ops/bf16.h"
#include "util.h"

#define TOL 1e-5

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) {  // uniform in [-1, 1) (xorshift64*)
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

// One operand on both sides: h (host, for the CPU op) and d (a planned buffer,
// for the CUDA op), holding the same values.
typedef struct {
    float *h, *d;
    size_t n;
} Pair;

static Pair pair_fill(size_t n, float scale) {
    Pair p = {xmalloc((n ? n : 1) * sizeof(float), "cpu operand"), buf_alloc(MEM_ACTIVATIONS, n * sizeof(float), "gpu operand"), n};
    for (size_t i = 0; i < n; i++) p.h[i] = urand() * scale;
    ops_upload(p.d, p.h, n * sizeof(float));
    return p;
}

static void pair_free(Pair p) {
    free(p.h);
    buf_free(p.d);
}

// Relative max-norm difference of the GPU side from the CPU side.
static double pair_diff(Pair p) {
    float *g = xmalloc((p.n ? p.n : 1) * sizeof(float), "gpu result");
    ops_download(g, p.d, p.n * sizeof(float));
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < p.n; i++) {
        double d = fabs((double)g[i] - (double)p.h[i]);
        num = d > num || isnan(d) ? d : num;
        den = fmax(den, fabs((double)p.h[i]));
    }
    free(g);
    return den > 0 ? num / den : num;
}

static void expect_close(const char *what, Pair p) {
    double e = pair_diff(p);
    CHECK(e <= TOL, "%-44s rel. max-norm %.2e <= %.0e (%zu values)", what, e, TOL, p.n);
}

static void expect_scalar(const char *what, double gpu, double cpu) {
    double e = rel_diff(gpu, cpu);
    CHECK(e <= TOL, "%-44s %.9g vs cpu %.9g (rel %.2e)", what, gpu, cpu, e);
}

// A loss or norm accumulator on the GPU: a planned buffer of one double holding
// `start`; acc_read reads it back.
static double *acc_new(double start) {
    double *a = buf_alloc(MEM_ACTIVATIONS, sizeof(double), "gpu accumulator");  // (1)
    ops_upload(a, &start, sizeof start);
    return a;
}
static double acc_read(double *a) {
    double v;
    ops_download(&v, a, sizeof v);
    buf_free(a);
    return v;
}

static int32_t *ids_both(int n, int lo, int hi, int32_t **dev) {  // host ids in [lo, hi), and a buffer copy
    int32_t *h = xmalloc((size_t)n * sizeof(int32_t), "ids");
    for (int i = 0; i < n; i++) h[i] = lo + (int)((urand() + 1.0f) * 0.5f * (float)(hi - lo)) % (hi - lo);
    *dev = buf_alloc(MEM_ACTIVATIONS, (size_t)n * sizeof(int32_t), "gpu ids");
    ops_upload(*dev, h, (size_t)n * sizeof(int32_t));
    return h;
}

static void test_buffers(void) {
    size_t before = mem_allocated(MEM_GRADS);
    float *b = buf_alloc(MEM_GRADS, 1000 * sizeof(float), "counted");
    CHECK(mem_allocated(MEM_GRADS) == before + 4000, "buf_alloc on the GPU counts its bytes (4000)");
    buf_free(b);
    CHECK(mem_allocated(MEM_GRADS) == before, "buf_free uncounts them");
    Pair a = pair_fill(1000, 1.0f), c = pair_fill(1000, 1.0f);
    copy_f32(c.d, a.d, 1000);
    cpu_copy_f32(c.h, a.h, 1000);
    expect_close("copy_f32", c);
    float bad = c.h[500] + 1e-3f, good = c.h[500];  // the comparison sees one wrong value
    ops_upload(c.d + 500, &bad, sizeof bad);
    CHECK(pair_diff(c) > TOL, "one value off by 1e-3 fails the comparison (%.2e)", pair_diff(c));
    ops_upload(c.d + 500, &good, sizeof good);
    move_f32(a.d + 10, a.d, 900);  // overlapping, moved up: copies of 10 from the end
    cpu_move_f32(a.h + 10, a.h, 900);
    expect_close("move_f32 (overlapping ranges, moved up)", a);
    move_f32(a.d + 3, a.d + 80, 907);  // overlapping, moved down: copies of 77 from the start
    cpu_move_f32(a.h + 3, a.h + 80, 907);
    expect_close("move_f32 (overlapping ranges, moved down)", a);
    move_f32(a.d + 500, a.d, 400);  // disjoint: one copy (ZeRO-1's reduced part)
    cpu_move_f32(a.h + 500, a.h, 400);
    expect_close("move_f32 (disjoint ranges)", a);
    zero_f32(a.d + 5, 500);
    cpu_zero_f32(a.h + 5, 500);
    expect_close("zero_f32", a);
    copy_rows_f32(c.d + 3, 40, a.d + 1, 33, 20, 17);
    cpu_copy_rows_f32(c.h + 3, 40, a.h + 1, 33, 20, 17);
    expect_close("copy_rows_f32", c);
    {  // row permutations (the MoE dispatch): rows of 17, a fixed permutation of 20
        int32_t *perm = buf_alloc(MEM_ACTIVATIONS, 20 * sizeof(int32_t), "permutation");  // (20)
        for (int r = 0; r < 20; r++) perm[r] = (r * 7 + 3) % 20;
        gather_rows_f32(c.d, a.d, perm, 20, 17);
        cpu_gather_rows_f32(c.h, a.h, perm, 20, 17);
        expect_close("gather_rows_f32", c);
        scatter_rows_f32(c.d, a.d, perm, 20, 17);
        cpu_scatter_rows_f32(c.h, a.h, perm, 20, 17);
        expect_close("scatter_rows_f32", c);
        buf_free(perm);
    }
    pair_free(a);
    pair_free(c);
}

static void test_matmul(void) {
    const int N = 37, in = 96, out = 80, ld = 130;
    Pair x = pair_fill((size_t)N * in, 1.0f), w = pair_fill((size_t)out * in, 0.1f);
    Pair y = pair_fill((size_t)N * out, 1.0f), ywide = pair_fill((size_t)N * ld, 1.0f);
    matmul_forward(y.d, x.d, w.d, N, in, out);
    cpu_matmul_forward(y.h, x.h, w.h, N, in, out);
    expect_close("matmul_forward", y);
    matmul_forward_ld(ywide.d + 7, ld, x.d, w.d, N, in, out);  // a column block at an odd offset
    cpu_matmul_forward_ld(ywide.h + 7, ld, x.h, w.h, N, in, out);
    expect_close("matmul_forward_ld (column block at offset 7)", ywide);
    Pair dw = pair_fill((size_t)out * in, 1.0f), dx = pair_fill((size_t)N * in, 1.0f);
    for (int acc = 0; acc < 2; acc++) {
        matmul_backward(dx.d, dw.d, y.d, x.d, w.d, N, in, out, acc);
        cpu_matmul_backward(dx.h, dw.h, y.h, x.h, w.h, N, in, out, acc);
        expect_close(acc ? "matmul_backward din (accumulate)" : "matmul_backward din (overwrite)", dx);
        expect_close("matmul_backward dweight (+=)", dw);
    }
    matmul_backward(NULL, dw.d, y.d, x.d, w.d, N, in, out, 0);
    cpu_matmul_backward(NULL, dw.h, y.h, x.h, w.h, N, in, out, 0);
    expect_close("matmul_backward dweight only (din NULL)", dw);
    matmul_backward_ld(dx.d, dw.d, ywide.d + 7, ld, x.d, w.d, N, in, out, 1);
    cpu_matmul_backward_ld(dx.h, dw.h, ywide.h + 7, ld, x.h, w.h, N, in, out, 1);
    expect_close("matmul_backward_ld din", dx);
    expect_close("matmul_backward_ld dweight", dw);
    // Determinism: the same product twice gives the same bits.
    float *a1 = xmalloc(dw.n * sizeof(float), "a1"), *a2 = xmalloc(dw.n * sizeof(float), "a2");
    zero_f32(dw.d, dw.n);
    matmul_backward(NULL, dw.d, y.d, x.d, w.d, N, in, out, 0);
    ops_download(a1, dw.d, dw.n * sizeof(float));
    zero_f32(dw.d, dw.n);
    matmul_backward(NULL, dw.d, y.d, x.d, w.d, N, in, out, 0);
    ops_download(a2, dw.d, dw.n * sizeof(float));
    CHECK(!memcmp(a1, a2, dw.n * sizeof(float)), "matmul_backward dweight twice: bit-identical");
    free(a1);
    free(a2);
    // More shapes than the backend keeps plans for (256; mixture-of-experts runs
    // make new ones every step): every one still computes, and so does the first
    // shape again after its plan was dropped.
    Pair xs = pair_fill((size_t)300 * in, 1.0f), ys = pair_fill((size_t)300 * out, 1.0f);  // (300, in), (300, out)
    double worst = 0.0;
    for (int n = 1; n <= 300; n++) {
        matmul_forward(ys.d, xs.d, w.d, n, in, out);
        cpu_matmul_forward(ys.h, xs.h, w.h, n, in, out);
        worst = fmax(worst, pair_diff(ys));
    }
    matmul_forward(ys.d, xs.d, w.d, N, in, out);
    cpu_matmul_forward(ys.h, xs.h, w.h, N, in, out);
    worst = fmax(worst, pair_diff(ys));
    CHECK(worst <= TOL, "matmul_forward over 300 shapes (more than the plan cache holds), rel. max-norm %.2e <= %.0e",
          worst, TOL);
    pair_free(xs), pair_free(ys);
    pair_free(x), pair_free(w), pair_free(y), pair_free(ywide), pair_free(dw), pair_free(dx);
}

#include "bf16_checks.h"         // the bf16 products, with the helpers above
#include "bf16_kernel_checks.h"  // the bf16 attention and element-wise kernels
#include "bf16_step_checks.h"    // the loss's bf16 gradient, the kept weight copy, AdamW writing it
#include "cudnn_checks.h"  // cuDNN's fused attention (training.attention = cudnn)
#include "op_checks.h"       // the ops between the products
#include "runtime_checks.h"  // uploads, id checks, the workspace, refusals

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--bad-id")) return bad_id_child(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "--attention-kernel")) return attention_kernel_child(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "--beyond-workspace")) return beyond_workspace_child(atoi(argv[2]));
    ops_init(0);  // dies, saying so, without a GPU
    // Built against the CUDA objects (make cuda) this compares the GPU with the CPU;
    // built against the CPU objects (tests/shell/test_cuda_build.sh) it compares the
    // CPU with itself: a check of the driver, not of a backend.
    CHECK(!strcmp(cpu_ops_backend_name(), "cpu"), "the %s backend against the cpu one", ops_backend_name());
    test_buffers();
    test_norm_backward_paths();
    test_matmul();
    if (ops_has_bf16()) {
        test_matmul_bf16(37, 96, 80, 130);
        test_matmul_bf16(29, 64, 257, 301);
        test_matmul_forward_bf16(37, 96, 260);
        test_matmul_forward_bf16(29, 64, 258);
        test_matmul_forward_bf16(29, 130, 64);  // 130: an input not a multiple of 8, through a padded copy
        test_matmul_from_bf16(37, 96, 80);
        test_matmul_from_bf16(29, 130, 64);  // 130: not a multiple of 8, through a padded copy
        test_matmul_forward_add(37, 96, 80);
        test_matmul_input_to_bf16(37, 96, 80);
        test_matmul_input_to_bf16(29, 130, 64);  // din rows of 130: 4-byte aligned bf16 output rows
        test_matmul_forward_add(29, 130, 66);  // in 130 through a padded copy; out 66: C and D 8-byte aligned rows
        test_matmul_from_bf16_to_bf16(37, 96, 80);
        test_matmul_from_bf16_to_bf16(29, 130, 64);  // din rows of 130 (4-byte aligned), the input through a padded copy
        test_matmul_bf16_to_bf16(37, 96, 80);
        test_matmul_bf16_to_bf16(29, 130, 66);  // dout rows of 66 through a padded copy, din rows of 130
        test_matmul_backward_bf16(37, 96, 80);
        test_matmul_backward_bf16(29, 64, 130);
        test_matmul_backward_bf16(29, 130, 64);
        test_cross_entropy_bf16(1000, 8, 320);  // rows 2000 bf16 apart, column 8: read as they are
        test_cross_entropy_bf16(1000, 3, 257);  // column 3: 6-byte aligned, through a padded copy
        test_cross_entropy_bf16(1001, 0, 1001);  // rows 2002 apart: 4-byte aligned, a padded copy
        test_kept_weights();
        test_adamw_writes_copy();
        test_attention_bf16(32, "mma");
        test_attention_bf16(64, "mma");
        test_attention_bf16(128, "mma");
        test_attention_bf16(64, "wmma");
        test_attention_bf16(128, "wmma");
        test_attention_kernels_agree(64);
        test_attention_kernels_agree(128);
        test_attention_kernel_refused(argv[0]);
        test_workspace(argv[0]);
    }
    else printf("(the %s backend has no bf16 products: their checks did not run)\n", ops_backend_name());
    test_embedding();
    test_column_sums();
    test_norm_residual_swiglu();
    test_bf16_activations();
    test_rope();
    test_attention();
    test_cross_entropy();
    test_optimizer();
    test_moe_dispatch();
    test_queued_upload();
    test_bad_ids(argv[0]);
    // cuDNN's attention last: a shape cuDNN has no plan for ends the process, naming
    // cuDNN's reason (as training would), and only these checks are lost with it.
    if (ops_has_bf16()) {
        test_attention_cudnn(64, 256);
        test_cudnn_reserve_at_scale();
        test_attention_cudnn(128, 256);
        test_attention_cudnn(64, 150);  // a sequence not a multiple of cuDNN's tiles
    }
    return check_summary();
}

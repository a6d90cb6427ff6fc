// bench/tools/attention_gpu.c — the attention ops of whichever backend it is linked
// with (make cuda: build-cuda/tests/attention_gpu; make emu: build-emu/tests/...),
// timed alone: attention_forward and attention_backward, as a training step calls
// them (fp32 q|k|v packed per token, the causal mask, GQA), on seeded random inputs
// in planned buffers. Precision "bf16" turns on bf16 products, which picks the
// tensor-core kernels; FEMTOTRON_ATTENTION (mma | wmma | cudnn) picks their family
// (cudnn: cuDNN's fused kernels, with the bf16 copies in and out of the fp32 ops).
// Precision "bf16-kept" times attention_forward_bf16 and attention_backward_bf16
// instead, on bf16 q|k|v and output, as a training run with training.attention =
// cudnn calls them (LlamaModel.att_bf16): cuDNN's kernels with only dout rounded.
//
//   attention_gpu B S H KV hd runs fp32|bf16|bf16-kept
//   -> "attention B S H KV hd precision P kernel K fwd_ms F bwd_ms G fwd_tflops X bwd_tflops Y"
//
// F and G are medians over `runs` timed calls after two warm-ups, each timed from a
// host wait to the next (ops_sync), so they hold the whole op: the block init, the
// kernels, the finish or rowdot pass. FLOPs by FlashAttention's convention, so
// that the figures compare with PyTorch's (bench/tools/attention_torch.py): the
// causal pairs S(S+1)/2 per (sequence, head), forward 4 hd a pair (S = Q K^T and
// P V), backward 10 hd a pair (2.5x: S again, dP, dV, dQ, dK). The kernels' own
// extra work (the dQ and dK/dV kernels each form S and dP) is not counted.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops.h"
#include "util.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// A planned buffer of n floats, uniform in [-scale, scale), seeded.
static float *random_buffer(size_t n, float scale, unsigned *seed, const char *what) {
    float *host = xmalloc(n * sizeof(float), what);
    for (size_t i = 0; i < n; i++) host[i] = scale * ((float)rand_r(seed) / RAND_MAX * 2.0f - 1.0f);
    float *buf = buf_alloc(MEM_ACTIVATIONS, n * sizeof(float), what);
    ops_upload(buf, host, n * sizeof(float));
    free(host);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s B S H KV hd runs fp32|bf16|bf16-kept\n", argv[0]);
        return 2;
    }
    const int B = atoi(argv[1]), S = atoi(argv[2]), H = atoi(argv[3]), KV = atoi(argv[4]), hd = atoi(argv[5]),
              runs = atoi(argv[6]);
    const char *precision = argv[7];
    if (B < 1 || S < 1 || H < 1 || KV < 1 || H % KV || hd < 1 || runs < 1 ||
        (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "bf16-kept"))) {
        fprintf(stderr, "attention_gpu: B S H KV hd runs must be positive, KV divide H, precision fp32, bf16 or "
                        "bf16-kept\n");
        return 2;
    }
    ops_init(0);
    const int kept = !strcmp(precision, "bf16-kept"), bf16 = kept || !strcmp(precision, "bf16");
    if (bf16 && !ops_has_bf16()) {
        fprintf(stderr, "attention_gpu: the %s backend has no bf16 products\n", ops_backend_name());
        return 2;
    }
    ops_set_matmul_bf16(bf16);
    const size_t ld = (size_t)(H + 2 * KV) * hd, nq = (size_t)B * S * ld;
    const size_t no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    unsigned seed = 1;
    float *qkv = random_buffer(nq, 1.5f, &seed, "qkv");      // (B*S, (H + 2 KV) hd)
    float *dout = random_buffer(no, 1.0f, &seed, "dout");    // (B*S, H hd)
    float *out = random_buffer(no, 1.0f, &seed, "out");      // (B*S, H hd)
    float *dqkv = random_buffer(nq, 1.0f, &seed, "dqkv");    // (B*S, (H + 2 KV) hd)
    float *lse = random_buffer(nr, 1.0f, &seed, "lse");      // (B, H, S)
    float *m = random_buffer(nr, 1.0f, &seed, "m");          // (B, H, S)
    float *l = random_buffer(nr, 1.0f, &seed, "l");          // (B, H, S)
    float *rowdot = random_buffer(nr, 1.0f, &seed, "rowdot");  // (B, H, S)
    const size_t ns = attention_scratch_floats(hd);
    float *scratch = ns ? random_buffer(ns, 1.0f, &seed, "scratch") : NULL;
    int *pos_h = xmalloc(sizeof(int) * S, "positions");
    for (int i = 0; i < S; i++) pos_h[i] = i;
    int *pos = buf_alloc(MEM_ACTIVATIONS, sizeof(int) * S, "positions");  // (S)
    ops_upload(pos, pos_h, sizeof(int) * S);
    // bf16-kept: the bf16 q|k|v and dout (rounded once, here), output and q|k|v gradient
    uint16_t *qkv16 = kept ? buf_alloc(MEM_ACTIVATIONS, nq * 2, "bf16 qkv") : NULL;    // (B*S, (H + 2 KV) hd)
    uint16_t *out16 = kept ? buf_alloc(MEM_ACTIVATIONS, no * 2, "bf16 out") : NULL;    // (B*S, H hd)
    uint16_t *dout16 = kept ? buf_alloc(MEM_ACTIVATIONS, no * 2, "bf16 dout") : NULL;  // (B*S, H hd)
    uint16_t *dqkv16 = kept ? buf_alloc(MEM_ACTIVATIONS, nq * 2, "bf16 dqkv") : NULL;  // (B*S, (H + 2 KV) hd)
    if (kept) round_to_bf16(qkv16, qkv, nq), round_to_bf16(dout16, dout, no);

    double *tf = xmalloc(sizeof(double) * runs, "times"), *tb = xmalloc(sizeof(double) * runs, "times");
    for (int r = -2; r < runs; r++) {  // two warm-ups
        ops_sync();
        const double t0 = now();
        if (kept) attention_forward_bf16(out16, lse, qkv16, pos, B, S, H, KV, hd);
        else attention_forward(out, lse, m, l, qkv, pos, B, S, H, KV, hd, scratch);
        ops_sync();
        const double t1 = now();
        if (kept) attention_backward_bf16(dqkv16, dout16, qkv16, out16, lse, pos, B, S, H, KV, hd);
        else attention_backward(dqkv, rowdot, dout, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
        ops_sync();
        const double t2 = now();
        if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
    }
    qsort(tf, runs, sizeof(double), cmp_double);
    qsort(tb, runs, sizeof(double), cmp_double);
    const double f = tf[runs / 2], b = tb[runs / 2];
    const double pairs = (double)B * H * S * (S + 1) / 2.0;
    const char *pick = getenv("FEMTOTRON_ATTENTION");
    const char *kernel = kept ? "cudnn-kept" : !bf16 ? "fp32" : pick && *pick ? pick : "default";
    printf("attention B %d S %d H %d KV %d hd %d precision %s kernel %s fwd_ms %.3f bwd_ms %.3f "
           "fwd_tflops %.4g bwd_tflops %.4g\n",
           B, S, H, KV, hd, precision, kernel, f * 1e3, b * 1e3, 4.0 * hd * pairs / f / 1e12,
           10.0 * hd * pairs / b / 1e12);
    return 0;
}

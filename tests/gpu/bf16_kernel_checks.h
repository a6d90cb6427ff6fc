// tests/gpu/bf16_kernel_checks.h — gpu_ops.c's checks of the kernels a bf16 run
// uses besides the matrix products: the tensor-core attention
// (ops/flash_attention.cuh) and the element-wise kernels reading and writing bf16
// (RoPE, SwiGLU, the norms, rounding and widening). Included once, by gpu_ops.c,
// after bf16_checks.h (its helpers: bf16_twin, bf16_compare, rounded_copy): one
// translation unit, so the PASS/FAIL counts of check.h are one.
#ifndef FEMTOTRON_GPU_BF16_KERNEL_CHECKS_H
#define FEMTOTRON_GPU_BF16_KERNEL_CHECKS_H

// Attention with bf16 products: the tensor-core kernels round Q, K, V, dO, P and
// dS to bf16 and keep the softmax and every sum in fp32. Against the CPU's fp32
// attention on the same (unrounded) inputs they differ by the bf16 rounding: the
// same kernels run on CPU threads (tests/emu/test_flash_emu.cpp) differ from an
// fp64 attention of the unrounded inputs by at most 5.7e-3 (max-norm, relative to
// the largest value, over four shapes), so BF16_ATT_TOL = 2e-2 leaves 3.5x room;
// an indexing or mask error moves whole rows, O(0.1) and more. The rounding must
// show (the tensor-core path ran: more than 1e-4 from the GPU's fp32 kernels), and
// two runs must give the same bits (no atomics).
#define BF16_ATT_TOL 2e-2

static void expect_bf16_close(const char *what, Pair p) {
    double e = pair_diff(p);
    CHECK(e <= BF16_ATT_TOL, "%-44s rel. max-norm %.2e <= %.0e (%zu values)", what, e, BF16_ATT_TOL, p.n);
}

static int same_bits(const float *dev, size_t n, const float *before) {  // the buffer still holds `before`
    float *now = xmalloc((n ? n : 1) * sizeof(float), "bf16 attention rerun");
    ops_download(now, dev, n * sizeof(float));
    int same = !memcmp(now, before, n * sizeof(float));
    free(now);
    return same;
}

// Positions 0 .. S-1 in a planned buffer (returned) and on the host (*host).
static int *causal_positions(int S, int **host) {
    *host = xmalloc(S * sizeof(int), "pos");
    for (int p = 0; p < S; p++) (*host)[p] = p;
    int *pos = buf_alloc(MEM_ACTIVATIONS, S * sizeof(int), "gpu pos");
    ops_upload(pos, *host, S * sizeof(int));
    return pos;
}

// `kernel` is FEMTOTRON_ATTENTION's value for the run (ops/attention_cuda.cu): mma
// (ops/flash_mma.cuh) or wmma (ops/flash_attention.cuh); each is checked here.
static void test_attention_bf16(int hd, const char *kernel) {
    const int B = 2, S = 150, H = 4, KV = 2, ld = (H + 2 * KV) * hd;
    char what[96];
    setenv("FEMTOTRON_ATTENTION", kernel, 1);
    float *scratch = xmalloc((cpu_attention_scratch_floats(hd) + 1) * sizeof(float), "cpu attention scratch");
    int *pos_h, *pos = causal_positions(S, &pos_h);
    Pair qkv = pair_fill((size_t)B * S * ld, 1.5f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill(lse.n, 1.0f), l = pair_fill(lse.n, 1.0f);
    Pair dout = pair_fill(out.n, 1.0f), dqkv = pair_fill(qkv.n, 1.0f), rowdot = pair_fill(lse.n, 1.0f);
    float *fp32_out = xmalloc(out.n * sizeof(float), "fp32 attention out");

    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);  // fp32 kernels first
    ops_download(fp32_out, out.d, out.n * sizeof(float));
    ops_set_matmul_bf16(1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_forward(out.h, lse.h, m.h, l.h, qkv.h, pos_h, B, S, H, KV, hd, scratch);
    float *gpu_out = xmalloc(out.n * sizeof(float), "bf16 attention out");
    ops_download(gpu_out, out.d, out.n * sizeof(float));
    double moved = 0.0, big = 0.0;
    for (size_t i = 0; i < out.n; i++) {
        moved = fmax(moved, fabs((double)gpu_out[i] - fp32_out[i]));
        big = fmax(big, fabs((double)fp32_out[i]));
    }
    CHECK(moved > 1e-4 * big, "bf16 attention (%s, hd %d) differs from the fp32 kernels' (rel. %.2e > 1e-4): tensor cores ran",
          kernel, hd, moved / big);
    snprintf(what, sizeof what, "bf16 attention_forward out (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, out);
    snprintf(what, sizeof what, "bf16 attention_forward lse (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, lse);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_backward(dqkv.h, rowdot.h, dout.h, qkv.h, out.h, lse.h, pos_h, B, S, H, KV, hd, scratch);
    snprintf(what, sizeof what, "bf16 attention_backward dqkv (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, dqkv);
    float *first = xmalloc(dqkv.n * sizeof(float), "first dqkv");
    ops_download(first, dqkv.d, dqkv.n * sizeof(float));
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    CHECK(same_bits(out.d, out.n, gpu_out) && same_bits(dqkv.d, dqkv.n, first),
          "bf16 attention (%s, hd %d) twice: out and dqkv bit-identical", kernel, hd);

    // Ring steps: queries at 40..189 against keys at 0..69 in their own buffer
    // (Sk != Sq; every query sees some of them), then keys at 150..199 (rows
    // before position 150 see none of them: fully masked).
    const int Sk = 70, Sk2 = 50, ldkv = 2 * KV * hd;
    int qpos[150], kpos[70], kpos2[50];
    for (int p = 0; p < S; p++) qpos[p] = 40 + p;
    for (int p = 0; p < Sk; p++) kpos[p] = p;
    for (int p = 0; p < Sk2; p++) kpos2[p] = 150 + p;
    Pair kv = pair_fill((size_t)B * Sk * ldkv, 1.5f), kv2 = pair_fill((size_t)B * Sk2 * ldkv, 1.5f);
    Pair dkv = pair_fill(kv.n, 1.0f), dkv2 = pair_fill(kv2.n, 1.0f), dq = pair_fill(qkv.n, 1.0f);
    attention_block_init(out.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_init(out.h, m.h, l.h, B, S, H, hd);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, NULL);
    cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, scratch);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd, NULL);
    cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd,
                                scratch);
    attention_block_finish(out.d, lse.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_finish(out.h, lse.h, m.h, l.h, B, S, H, hd);
    snprintf(what, sizeof what, "bf16 ring blocks out (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, out);
    attention_rowdot(rowdot.d, dout.d, out.d, B, S, H, hd);
    cpu_attention_rowdot(rowdot.h, dout.h, out.h, B, S, H, hd);
    attention_block_backward(dq.d, dkv.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos, B, S,
                             Sk, H, KV, hd, NULL);
    cpu_attention_block_backward(dq.h, dkv.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos, B,
                                 S, Sk, H, KV, hd, scratch);
    attention_block_backward(dq.d, dkv2.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos2, B,
                             S, Sk2, H, KV, hd, NULL);
    cpu_attention_block_backward(dq.h, dkv2.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos2,
                                 B, S, Sk2, H, KV, hd, scratch);
    snprintf(what, sizeof what, "bf16 ring blocks dq (+=, %s, hd %d)", kernel, hd);
    expect_bf16_close(what, dq);
    snprintf(what, sizeof what, "bf16 ring blocks dkv, dkv2 (+=, %s, hd %d)", kernel, hd);
    double e = fmax(pair_diff(dkv), pair_diff(dkv2));
    CHECK(e <= BF16_ATT_TOL, "%-44s rel. max-norm %.2e <= %.0e", what, e, BF16_ATT_TOL);
    ops_set_matmul_bf16(0);
    unsetenv("FEMTOTRON_ATTENTION");
    free(scratch), free(pos_h), free(fp32_out), free(gpu_out), free(first);
    buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l), pair_free(dout), pair_free(dqkv);
    pair_free(rowdot), pair_free(kv), pair_free(kv2), pair_free(dkv), pair_free(dkv2), pair_free(dq);
}

// The two tensor-core families on the same problem: both ran (their bits differ:
// they round P and sum in different places) and agree within the bf16 tolerance.
static void test_attention_kernels_agree(int hd) {
    const int B = 2, S = 150, H = 4, KV = 2, ld = (H + 2 * KV) * hd;
    int *pos_h, *pos = causal_positions(S, &pos_h);
    Pair qkv = pair_fill((size_t)B * S * ld, 1.5f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill(lse.n, 1.0f), l = pair_fill(lse.n, 1.0f);
    ops_set_matmul_bf16(1);
    setenv("FEMTOTRON_ATTENTION", "wmma", 1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    ops_download(out.h, out.d, out.n * sizeof(float));  // the wmma result as the reference side
    setenv("FEMTOTRON_ATTENTION", "mma", 1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    const double e = pair_diff(out);
    CHECK(e > 0 && e <= BF16_ATT_TOL, "attention (hd %d): the mma and wmma kernels both ran (bits differ) and agree "
          "within %.0e (%.2e)", hd, BF16_ATT_TOL, e);
    // attention_forward's one kernel (mma) against the block ops it folds in: the same bits.
    float *whole = xmalloc(out.n * sizeof(float), "whole out"), *whole_lse = xmalloc(lse.n * sizeof(float), "lse");
    ops_download(whole, out.d, out.n * sizeof(float));
    ops_download(whole_lse, lse.d, lse.n * sizeof(float));
    attention_block_init(out.d, m.d, l.d, B, S, H, hd);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, qkv.d, ld, H * hd, (H + KV) * hd, pos, pos, B, S, S, H, KV, hd,
                            NULL);
    attention_block_finish(out.d, lse.d, m.d, l.d, B, S, H, hd);
    CHECK(same_bits(out.d, out.n, whole) && same_bits(lse.d, lse.n, whole_lse),
          "attention_forward (mma, hd %d) in one kernel: the bits of block init + forward + finish", hd);
    free(whole), free(whole_lse);
    ops_set_matmul_bf16(0);
    unsetenv("FEMTOTRON_ATTENTION");
    free(pos_h);
    buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l);
}

// bf16 activations (ops.h: a dense MLP's gate|up kept as bf16): round_to_bf16 on
// the GPU gives the CPU's bits exactly (both round to nearest, ties to even), and
// SwiGLU forward and backward reading the kept bf16 gu are within TOL of the CPU's
// (the same formula on the same widened values; expf against the CPU's fast_expf).
// At F = 130 the rows of F values do not start 8-byte aligned (the kernels take a
// value a thread), at 128 they do (4 a thread).
static void test_bf16_activations_at(int F) {
    const int N = 29;
    const size_t ngu = (size_t)N * 2 * F;
    Pair gu = pair_fill(ngu, 3.0f), d = pair_fill((size_t)N * F, 1.0f);
    Pair dgu = pair_fill(ngu, 1.0f), wide = pair_fill((size_t)N * F, 1.0f);
    const size_t no = (size_t)N * F;
    uint16_t *o16_d = buf_alloc(MEM_ACTIVATIONS, no * sizeof(uint16_t), "bf16 swiglu");  // (N, F)
    uint16_t *o16_h = xmalloc(no * sizeof(uint16_t), "bf16 swiglu"), *o16_g = xmalloc(no * sizeof(uint16_t), "bf16");
    uint16_t *g16_h = xmalloc(ngu * sizeof(uint16_t), "bf16 gu"), *back = xmalloc(ngu * sizeof(uint16_t), "bf16 gu");
    uint16_t *g16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 gu");  // (N, 2F)
    round_to_bf16(g16_d, gu.d, ngu);
    cpu_round_to_bf16(g16_h, gu.h, ngu);
    ops_download(back, g16_d, ngu * sizeof(uint16_t));
    size_t same = 0;
    for (size_t i = 0; i < ngu; i++) same += back[i] == g16_h[i];
    CHECK(same == ngu, "round_to_bf16: %zu of %zu values the CPU's bits", same, ngu);
    // The output rounded to bf16: the GPU's expf and the CPU's may differ in the
    // last fp32 bit, which moves a value lying on a bf16 midpoint by 1 ulp (rare).
    swiglu_forward_bf16(o16_d, g16_d, N, F);
    cpu_swiglu_forward_bf16(o16_h, g16_h, N, F);
    ops_download(o16_g, o16_d, no * sizeof(uint16_t));
    int ulp;
    same = bf16_compare(o16_g, o16_h, no, &ulp);
    CHECK(ulp <= 1 && same * 100 >= no * 99,
          "swiglu_forward_bf16, F %d: %zu of %zu the CPU's bits, at most %d ulp apart", F, same, no, ulp);
    widen_from_bf16(wide.d, o16_d, no);
    cpu_widen_from_bf16(wide.h, o16_g, no);
    CHECK(pair_diff(wide) == 0.0, "widen_from_bf16: the CPU's values exactly (rel. %.2e)", pair_diff(wide));
    // The gradient rounded to bf16 as it is written: as the forward's output.
    uint16_t *dg16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 dgu");  // (N, 2F)
    uint16_t *dg16_h = xmalloc(ngu * sizeof(uint16_t), "bf16 dgu"), *dg16_g = xmalloc(ngu * sizeof(uint16_t), "bf16");
    swiglu_backward_to_bf16(dg16_d, d.d, g16_d, N, F);
    cpu_swiglu_backward_to_bf16(dg16_h, d.h, g16_h, N, F);
    ops_download(dg16_g, dg16_d, ngu * sizeof(uint16_t));
    same = bf16_compare(dg16_g, dg16_h, ngu, &ulp);
    CHECK(ulp <= 1 && same * 100 >= ngu * 99,
          "swiglu_backward_to_bf16, F %d: %zu of %zu the CPU's bits, at most %d ulp apart", F, same, ngu, ulp);
    // And in fp32 terms: the 1-ulp moves allowed above (a value on a bf16 midpoint)
    // are 2^-8 of that value at most, so within 2^-8 of the largest (the inputs'
    // order of checks shifted once, and such a move showed as 7.9e-5 > 1e-5).
    widen_from_bf16(dgu.d, dg16_d, ngu);
    cpu_widen_from_bf16(dgu.h, dg16_h, ngu);
    const double wide_e = pair_diff(dgu);
    CHECK(wide_e <= 1.0 / 256, "swiglu_backward_to_bf16 (widened) rel. max-norm %.2e <= 2^-8 (%zu values)", wide_e,
          ngu);
    // swiglu_backward_bf16: dout kept as bf16 (down's input gradient), widened, so
    // the gradient is swiglu_backward_to_bf16's of the widened dout bit for bit, and
    // the SwiGLU output it rebuilds beside it is swiglu_forward_bf16's bit for bit
    // (the down product's weight gradient reads it in the forward's place); with h16
    // NULL the same gradient. Against the CPU as above.
    uint16_t *d16_d = bf16_twin(d, "bf16 dout");  // (N, F); d: its widened values
    uint16_t *h16_d = buf_alloc(MEM_ACTIVATIONS, no * sizeof(uint16_t), "rebuilt swiglu");  // (N, F)
    uint16_t *dk16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 dgu");      // (N, 2F)
    uint16_t *dk16_g = xmalloc(ngu * sizeof(uint16_t), "bf16"), *h16_g = xmalloc(no * sizeof(uint16_t), "bf16");
    uint16_t *d16_h = xmalloc(no * sizeof(uint16_t), "bf16 dout");
    cpu_round_to_bf16(d16_h, d.h, no);
    swiglu_backward_to_bf16(dg16_d, d.d, g16_d, N, F);
    swiglu_backward_bf16(dk16_d, h16_d, d16_d, g16_d, N, F);
    ops_download(dg16_g, dg16_d, ngu * sizeof(uint16_t));
    ops_download(dk16_g, dk16_d, ngu * sizeof(uint16_t));
    ops_download(h16_g, h16_d, no * sizeof(uint16_t));
    int fused_ok = !memcmp(dk16_g, dg16_g, ngu * sizeof(uint16_t)) && !memcmp(h16_g, o16_g, no * sizeof(uint16_t));
    swiglu_backward_bf16(dk16_d, NULL, d16_d, g16_d, N, F);
    ops_download(dk16_g, dk16_d, ngu * sizeof(uint16_t));
    fused_ok &= !memcmp(dk16_g, dg16_g, ngu * sizeof(uint16_t));
    CHECK(fused_ok, "swiglu_backward_bf16, F %d: swiglu_backward_to_bf16's bits on the widened dout, and the rebuilt "
          "output swiglu_forward_bf16's (with and without the rebuild)", F);
    cpu_swiglu_backward_bf16(dg16_h, h16_g, d16_h, g16_h, N, F);  // (h16_g: the CPU's rebuild now)
    same = bf16_compare(dk16_g, dg16_h, ngu, &ulp);
    int hulp;
    const size_t hsame = bf16_compare(h16_g, o16_h, no, &hulp);
    CHECK(ulp <= 1 && same * 100 >= ngu * 99 && hsame == no,
          "swiglu_backward_bf16 on the CPU, F %d: the GPU's within 1 ulp (%zu of %zu bits equal, at most %d ulp); its "
          "rebuild the CPU's swiglu_forward_bf16 bit for bit (%zu of %zu)", F, same, ngu, ulp, hsame, no);
    buf_free(d16_d), buf_free(h16_d), buf_free(dk16_d);
    free(dk16_g), free(h16_g), free(d16_h);
    // The norms' bf16 outputs: the GPU's fp32 row sums may differ from the CPU's in
    // the last bit (another order), which moves a value on a bf16 midpoint by 1 ulp.
    const int Nn = 21, D = 96;
    const size_t nn = (size_t)Nn * D;
    Pair nx = pair_fill(nn, 2.0f), nw = pair_fill((size_t)D, 1.0f), xh = pair_fill(nn, 1.0f), rs = pair_fill(Nn, 1.0f);
    uint16_t *n16_d = buf_alloc(MEM_ACTIVATIONS, nn * sizeof(uint16_t), "bf16 norm output");  // (Nn, D)
    uint16_t *n16_g = xmalloc(nn * sizeof(uint16_t), "bf16"), *n16_h = xmalloc(nn * sizeof(uint16_t), "bf16");
    uint16_t *b16_g = xmalloc(nn * sizeof(uint16_t), "bf16");
    rmsnorm_forward_to_bf16(n16_d, xh.d, rs.d, nx.d, nw.d, Nn, D, 1e-5f);
    cpu_rmsnorm_forward_to_bf16(n16_h, xh.h, rs.h, nx.h, nw.h, Nn, D, 1e-5f);
    ops_download(n16_g, n16_d, nn * sizeof(uint16_t));
    expect_close("rmsnorm_forward_to_bf16 xhat", xh);
    expect_close("rmsnorm_forward_to_bf16 rstd", rs);
    same = bf16_compare(n16_g, n16_h, nn, &ulp);
    rmsnorm_rebuild_to_bf16(n16_d, xh.d, nw.d, Nn, D);
    ops_download(b16_g, n16_d, nn * sizeof(uint16_t));
    CHECK(ulp <= 1 && same * 100 >= nn * 99 && !memcmp(b16_g, n16_g, nn * sizeof(uint16_t)),
          "rmsnorm_forward_to_bf16: %zu of %zu the CPU's bits, at most %d ulp apart; rmsnorm_rebuild_to_bf16 gives "
          "the forward's bits", same, nn, ulp);
    buf_free(n16_d);
    free(n16_g), free(n16_h), free(b16_g);
    pair_free(nx), pair_free(nw), pair_free(xh), pair_free(rs);
    buf_free(g16_d), buf_free(o16_d), buf_free(dg16_d);
    free(g16_h), free(back), free(o16_h), free(o16_g), free(dg16_h), free(dg16_g);
    pair_free(gu), pair_free(d), pair_free(dgu), pair_free(wide);
}

static void test_bf16_activations(void) {
    test_bf16_activations_at(130);
    test_bf16_activations_at(128);
}

#endif

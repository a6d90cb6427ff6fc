// tests/gpu/op_checks.h — gpu_ops.c's checks of the ops between the products, each
// on the GPU against the CPU's: the embedding, column sums, RMSNorm's backward
// paths, the norm, residual and SwiGLU, RoPE (fp32 and bf16), attention, the
// cross-entropy, AdamW and the experts' dispatch. Included once, by gpu_ops.c,
// after its helpers and the bf16 checks' (one translation unit: one PASS/FAIL count).
#ifndef FEMTOTRON_GPU_OP_CHECKS_H
#define FEMTOTRON_GPU_OP_CHECKS_H

static void test_embedding(void) {
    const int N = 50, D = 72, V = 30;  // repeated ids: the scatter adds
    int32_t *tok_d, *tok = ids_both(N, 0, V, &tok_d);
    Pair table = pair_fill((size_t)V * D, 1.0f), out = pair_fill((size_t)N * D, 1.0f), dout = pair_fill((size_t)N * D, 1.0f);
    Pair dtable = pair_fill((size_t)V * D, 1.0f);
    embedding_forward(out.d, tok_d, table.d, N, D, V);
    cpu_embedding_forward(out.h, tok, table.h, N, D, V);
    expect_close("embedding_forward", out);
    embedding_backward(dtable.d, dout.d, tok_d, N, D, V);
    cpu_embedding_backward(dtable.h, dout.h, tok, N, D, V);
    expect_close("embedding_backward (repeated ids)", dtable);
    embedding_backward(dtable.d, dout.d, tok, N, D, V);  // ids in plain host memory: staged
    cpu_embedding_backward(dtable.h, dout.h, tok, N, D, V);
    expect_close("embedding_backward (ids in host memory)", dtable);
    const int v0 = 10, rows = 12;
    Pair part = pair_fill((size_t)rows * D, 1.0f), dpart = pair_fill((size_t)rows * D, 1.0f);
    embedding_forward_range(out.d, tok_d, part.d, N, D, v0, rows);
    cpu_embedding_forward_range(out.h, tok, part.h, N, D, v0, rows);
    expect_close("embedding_forward_range", out);
    embedding_copy_range(out.d, tok_d, table.d, N, D, 0, 9);
    cpu_embedding_copy_range(out.h, tok, table.h, N, D, 0, 9);
    expect_close("embedding_copy_range", out);
    embedding_backward_range(dpart.d, dout.d, tok_d, N, D, v0, rows);
    cpu_embedding_backward_range(dpart.h, dout.h, tok, N, D, v0, rows);
    expect_close("embedding_backward_range", dpart);
    free(tok);
    buf_free(tok_d);
    pair_free(table), pair_free(out), pair_free(dout), pair_free(dtable), pair_free(part), pair_free(dpart);
}

// The sums over many rows, at sizes where the CUDA kernels split the work: RMSNorm's
// weight gradient over at most 512 fixed chunks of rows (1001 rows: 2 a chunk, 501
// chunks, the last partial), the embedding's gradient over 64 buckets of table rows
// and tokens staged 1024 at a time (3000 tokens of a 257-entry vocabulary: each id
// about 12 times, across the stagings). The embedding's keeps the CPU's order per
// entry: its bits are the CPU's; both give the same bits twice.
static void test_column_sums(void) {
    const int N = 1001, D = 96, NT = 3000, V = 257;
    Pair dy = pair_fill((size_t)N * D, 1.0f), xh = pair_fill((size_t)N * D, 1.0f), w = pair_fill(D, 1.0f);
    Pair dw = pair_fill(D, 1.0f);
    float *dw0 = xmalloc(D * sizeof(float), "dw0"), *first = xmalloc(D * sizeof(float), "first dw");
    memcpy(dw0, dw.h, D * sizeof(float));
    rmsnorm_backward(NULL, dw.d, dy.d, xh.d, w.d, NULL, N, D);
    cpu_rmsnorm_backward(NULL, dw.h, dy.h, xh.h, w.h, NULL, N, D);
    expect_close("rmsnorm_backward dweight, 1001 rows in 501 chunks", dw);
    ops_download(first, dw.d, D * sizeof(float));
    ops_upload(dw.d, dw0, D * sizeof(float));
    rmsnorm_backward(NULL, dw.d, dy.d, xh.d, w.d, NULL, N, D);
    CHECK(same_bits(dw.d, D, first), "rmsnorm_backward dweight over 1001 rows twice: bit-identical");

    int32_t *tok_d, *tok = ids_both(NT, 0, V, &tok_d);
    Pair dout = pair_fill((size_t)NT * D, 1.0f), dtable = pair_fill((size_t)V * D, 1.0f);
    embedding_backward(dtable.d, dout.d, tok_d, NT, D, V);
    cpu_embedding_backward(dtable.h, dout.h, tok, NT, D, V);
    const double e = pair_diff(dtable);
    CHECK(e == 0.0, "embedding_backward, 3000 tokens over 64 buckets and 3 stagings: the CPU's bits (rel. %.2e)", e);
    free(tok), free(dw0), free(first);
    buf_free(tok_d);
    pair_free(dy), pair_free(xh), pair_free(w), pair_free(dw), pair_free(dout), pair_free(dtable);
}

// RMSNorm's backward on each of its paths: one pass for rows of up to 4096 values
// (a multiple of 4, aligned; 1, 2 or 4 groups of 4 a thread: D 96, 2048 and 2052),
// a pass a gradient for wider or unaligned rows (D 4100, 97). On each, both
// gradients in one call equal the input gradient alone then the weight gradient
// alone (the zero-bubble split's halves) bit for bit, and the CPU's within TOL;
// and with the bf16 copy (rmsnorm_backward_with_bf16) the same bits, the copy
// those sums rounded, bit for bit.
static void test_norm_backward_paths(void) {
    const int Ds[] = {96, 2048, 2052, 4100, 97}, N = 37;
    for (size_t i = 0; i < sizeof Ds / sizeof Ds[0]; i++) {
        const int D = Ds[i];
        const size_t n = (size_t)N * D;
        Pair dy = pair_fill(n, 1.0f), xh = pair_fill(n, 1.0f), w = pair_fill(D, 1.0f), rstd = pair_fill(N, 1.0f);
        Pair dx = pair_fill(n, 1.0f), dw = pair_fill(D, 1.0f), dx2 = pair_fill(n, 1.0f), dw2 = pair_fill(D, 1.0f);
        copy_f32(dx2.d, dx.d, n);  // both accumulate from the same values
        copy_f32(dw2.d, dw.d, (size_t)D);
        rmsnorm_backward(dx.d, dw.d, dy.d, xh.d, w.d, rstd.d, N, D);
        rmsnorm_backward(dx2.d, NULL, dy.d, xh.d, w.d, rstd.d, N, D);
        rmsnorm_backward(NULL, dw2.d, dy.d, xh.d, NULL, NULL, N, D);
        float *a = xmalloc(n * sizeof(float), "dx"), *b = xmalloc(D * sizeof(float), "dw");
        ops_download(a, dx.d, n * sizeof(float));
        ops_download(b, dw.d, D * sizeof(float));
        CHECK(same_bits(dx2.d, n, a) && same_bits(dw2.d, (size_t)D, b),
              "rmsnorm_backward, D %d: both gradients in one call = the input gradient, then the weight gradient, "
              "alone, bit for bit", D);
        // again with the copy, from the same start (the host sides still hold it)
        Pair dx3 = pair_fill(n, 1.0f), dw3 = pair_fill(D, 1.0f);
        ops_upload(dx3.d, dx.h, n * sizeof(float)), ops_upload(dw3.d, dw.h, D * sizeof(float));
        uint16_t *d16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "bf16 din");  // (N, D)
        uint16_t *g16 = xmalloc(n * sizeof(uint16_t), "bf16 din"), *want16 = xmalloc(n * sizeof(uint16_t), "rounded");
        rmsnorm_backward_with_bf16(dx3.d, d16, dw3.d, dy.d, xh.d, w.d, rstd.d, N, D);
        ops_download(g16, d16, n * sizeof(uint16_t));
        cpu_round_to_bf16(want16, a, n);
        CHECK(same_bits(dx3.d, n, a) && same_bits(dw3.d, (size_t)D, b) && !memcmp(g16, want16, n * sizeof(uint16_t)),
              "rmsnorm_backward_with_bf16, D %d: rmsnorm_backward's din and dweight bit for bit, the copy din rounded",
              D);
        buf_free(d16), free(g16), free(want16), pair_free(dx3), pair_free(dw3);
        cpu_rmsnorm_backward(dx.h, dw.h, dy.h, xh.h, w.h, rstd.h, N, D);
        char what[64];
        snprintf(what, sizeof what, "rmsnorm_backward din, D %d", D);
        expect_close(what, dx);
        snprintf(what, sizeof what, "rmsnorm_backward dweight, D %d", D);
        expect_close(what, dw);
        free(a), free(b);
        pair_free(dy), pair_free(xh), pair_free(w), pair_free(rstd), pair_free(dx), pair_free(dw), pair_free(dx2),
            pair_free(dw2);
    }
}

static void test_norm_residual_swiglu(void) {
    const int N = 29, D = 300, F = 130;
    Pair x = pair_fill((size_t)N * D, 2.0f), w = pair_fill(D, 1.0f), y = pair_fill((size_t)N * D, 1.0f);
    Pair rstd = pair_fill(N, 1.0f), dy = pair_fill((size_t)N * D, 1.0f), dx = pair_fill((size_t)N * D, 1.0f);
    Pair dw = pair_fill(D, 1.0f), xh = pair_fill((size_t)N * D, 1.0f), yb = pair_fill((size_t)N * D, 1.0f);
    rmsnorm_forward(y.d, xh.d, rstd.d, x.d, w.d, N, D, 1e-5f);
    cpu_rmsnorm_forward(y.h, xh.h, rstd.h, x.h, w.h, N, D, 1e-5f);
    expect_close("rmsnorm_forward out", y);
    expect_close("rmsnorm_forward xhat", xh);
    expect_close("rmsnorm_forward rstd", rstd);
    rmsnorm_rebuild(yb.d, xh.d, w.d, N, D);
    cpu_rmsnorm_rebuild(yb.h, xh.h, w.h, N, D);
    expect_close("rmsnorm_rebuild out", yb);
    rmsnorm_backward(dx.d, dw.d, dy.d, xh.d, w.d, rstd.d, N, D);
    cpu_rmsnorm_backward(dx.h, dw.h, dy.h, xh.h, w.h, rstd.h, N, D);
    expect_close("rmsnorm_backward din (+=)", dx);
    expect_close("rmsnorm_backward dweight (+=)", dw);
    residual_forward(y.d, y.d, x.d, y.n);  // out aliases a
    cpu_residual_forward(y.h, y.h, x.h, y.n);
    expect_close("residual_forward (out = a)", y);
    // The element-wise kernels take 4 values a thread where every row starts
    // 16-byte aligned (D = 300 above), else one: the same ops on rows one value on.
    rmsnorm_rebuild(yb.d + 1, xh.d + 1, w.d, N - 1, D);
    cpu_rmsnorm_rebuild(yb.h + 1, xh.h + 1, w.h, N - 1, D);
    expect_close("rmsnorm_rebuild out, rows not 16-byte aligned", yb);
    residual_forward(y.d + 1, y.d + 1, x.d + 1, y.n - 1);
    cpu_residual_forward(y.h + 1, y.h + 1, x.h + 1, y.n - 1);
    expect_close("residual_forward, not 16-byte aligned", y);
    // SwiGLU at F = 130 (rows of F values not 16-byte aligned: one a thread) and 128
    // (4 a thread).
    for (int Fi = F; Fi >= F - 2; Fi -= 2) {
        Pair gu = pair_fill((size_t)N * 2 * Fi, 3.0f), o = pair_fill((size_t)N * Fi, 1.0f);
        Pair d = pair_fill((size_t)N * Fi, 1.0f), dgu = pair_fill((size_t)N * 2 * Fi, 1.0f);
        char what[64];
        swiglu_forward(o.d, gu.d, N, Fi);
        cpu_swiglu_forward(o.h, gu.h, N, Fi);
        snprintf(what, sizeof what, "swiglu_forward, F %d", Fi);
        expect_close(what, o);
        swiglu_backward(dgu.d, d.d, gu.d, N, Fi);
        cpu_swiglu_backward(dgu.h, d.h, gu.h, N, Fi);
        snprintf(what, sizeof what, "swiglu_backward, F %d", Fi);
        expect_close(what, dgu);
        pair_free(gu), pair_free(o), pair_free(d), pair_free(dgu);
    }
    pair_free(x), pair_free(w), pair_free(y), pair_free(rstd), pair_free(dy), pair_free(dx), pair_free(dw);
    pair_free(xh), pair_free(yb);
}

static void test_rope(void) {
    const int B = 2, S = 19, H = 4, KV = 2, hd = 16, half = hd / 2;
    double freq[8];
    for (int i = 0; i < half; i++) freq[i] = pow(10000.0, -2.0 * i / hd);
    Pair c = pair_fill((size_t)S * half, 1.0f), s = pair_fill((size_t)S * half, 1.0f);
    rope_tables(c.d, s.d, S, hd, freq, 5);
    cpu_rope_tables(c.h, s.h, S, hd, freq, 5);
    expect_close("rope_tables cos", c);
    expect_close("rope_tables sin", s);
    int pos[19];
    for (int p = 0; p < S; p++) pos[p] = 3 * p + 1;
    rope_tables_at(c.d, s.d, pos, S, hd, freq);
    cpu_rope_tables_at(c.h, s.h, pos, S, hd, freq);
    expect_close("rope_tables_at cos", c);
    Pair qkv = pair_fill((size_t)B * S * (H + 2 * KV) * hd, 1.0f);
    rope_forward(qkv.d, c.d, s.d, B, S, H, KV, hd);
    cpu_rope_forward(qkv.h, c.h, s.h, B, S, H, KV, hd);
    expect_close("rope_forward", qkv);
    rope_backward(qkv.d, c.d, s.d, B, S, H, KV, hd);
    cpu_rope_backward(qkv.h, c.h, s.h, B, S, H, KV, hd);
    expect_close("rope_backward", qkv);
    // rope_backward_to_bf16: the rotation's values rounded, its input untouched; the
    // GPU's and the CPU's fp32 values may differ in the last bit (fused multiply-adds),
    // which moves a value on a bf16 midpoint by 1 ulp (rare)
    const size_t nq = qkv.n;
    uint16_t *q16_d = buf_alloc(MEM_ACTIVATIONS, nq * sizeof(uint16_t), "bf16 dqkv");  // (B*S, (H+2KV)*hd)
    uint16_t *q16_h = xmalloc(nq * sizeof(uint16_t), "bf16 dqkv"), *q16_g = xmalloc(nq * sizeof(uint16_t), "bf16");
    float *before = xmalloc(nq * sizeof(float), "dqkv");
    ops_download(before, qkv.d, nq * sizeof(float));
    rope_backward_to_bf16(q16_d, qkv.d, c.d, s.d, B, S, H, KV, hd);
    cpu_rope_backward_to_bf16(q16_h, qkv.h, c.h, s.h, B, S, H, KV, hd);
    ops_download(q16_g, q16_d, nq * sizeof(uint16_t));
    int ulp;
    size_t same = bf16_compare(q16_g, q16_h, nq, &ulp);
    CHECK(ulp <= 1 && same * 100 >= nq * 99 && same_bits(qkv.d, nq, before),
          "rope_backward_to_bf16: %zu of %zu the CPU's bits, at most %d ulp apart; its input untouched", same, nq, ulp);
    // The bf16 to bf16 pair (LlamaModel.att_bf16) on those bf16 values: the forward in
    // place, the backward from it into another buffer, each against the CPU's; v's
    // columns untouched by the forward and copied by the backward, bit for bit.
    const int row = (H + 2 * KV) * hd, v0 = (H + KV) * hd;
    uint16_t *r16_d = buf_alloc(MEM_ACTIVATIONS, nq * sizeof(uint16_t), "bf16 rotated");  // (B*S, row) each
    uint16_t *r16_h = xmalloc(nq * sizeof(uint16_t), "bf16 rotated"), *in16 = xmalloc(nq * sizeof(uint16_t), "bf16");
    memcpy(in16, q16_h, nq * sizeof(uint16_t));
    ops_upload(q16_d, q16_h, nq * sizeof(uint16_t));
    rope_forward_bf16(q16_d, c.d, s.d, B, S, H, KV, hd);
    cpu_rope_forward_bf16(q16_h, c.h, s.h, B, S, H, KV, hd);
    ops_download(q16_g, q16_d, nq * sizeof(uint16_t));
    same = bf16_compare(q16_g, q16_h, nq, &ulp);
    int v_kept = 1, moved = 0;
    for (size_t t = 0; t < (size_t)B * S; t++)
        for (int j = 0; j < row; j++) {
            const size_t e = t * row + j;
            if (j >= v0 && (q16_g[e] != in16[e] || q16_h[e] != in16[e])) v_kept = 0;
            if (j < v0 && q16_g[e] != in16[e]) moved++;
        }
    CHECK(ulp <= 1 && same * 100 >= nq * 99 && v_kept && moved * 2 > B * S * v0,
          "rope_forward_bf16 in place: %zu of %zu the CPU's bits, at most %d ulp apart; %d of %d q|k values moved, "
          "v untouched", same, nq, ulp, moved, B * S * v0);
    rope_backward_bf16(r16_d, q16_d, c.d, s.d, B, S, H, KV, hd);
    cpu_rope_backward_bf16(r16_h, q16_h, c.h, s.h, B, S, H, KV, hd);
    uint16_t *r16_g = xmalloc(nq * sizeof(uint16_t), "bf16 rotated back");
    ops_download(r16_g, r16_d, nq * sizeof(uint16_t));
    same = bf16_compare(r16_g, r16_h, nq, &ulp);
    int v_copied = 1;
    double err = 0.0, norm = 0.0;  // the rotation back against the forward's input: two bf16 roundings apart
    for (size_t t = 0; t < (size_t)B * S; t++)
        for (int j = 0; j < row; j++) {
            const size_t e = t * row + j;
            if (j >= v0 && r16_g[e] != q16_g[e]) v_copied = 0;
            const double x = bf16_to_f32(in16[e]), y = bf16_to_f32(r16_g[e]);
            err += (y - x) * (y - x), norm += x * x;
        }
    err = sqrt(err / norm);
    CHECK(ulp <= 1 && same * 100 >= nq * 99 && v_copied && err < 1e-2,
          "rope_backward_bf16: %zu of %zu the CPU's bits, at most %d ulp apart; v copied; the forward undone within "
          "%.1e (2-norm, relative)", same, nq, ulp, err);
    // In place (cuDNN's gradient rotated where it lies, the fused backward): the
    // result apart, bit for bit, with v's columns never written
    rope_backward_bf16(q16_d, q16_d, c.d, s.d, B, S, H, KV, hd);
    ops_download(in16, q16_d, nq * sizeof(uint16_t));
    CHECK(memcmp(in16, r16_g, nq * sizeof(uint16_t)) == 0,
          "rope_backward_bf16 in place: the bits it writes into another buffer");
    buf_free(q16_d), buf_free(r16_d);
    free(q16_h), free(q16_g), free(before), free(r16_h), free(r16_g), free(in16);
    pair_free(c), pair_free(s), pair_free(qkv);
}

static void test_attention(void) {
    // S above the CPU kernel's 128-key chunk and 32-query tile (several of each)
    const int B = 2, S = 150, H = 4, KV = 2, hd = 16, ld = (H + 2 * KV) * hd;
    float *scratch = xmalloc((cpu_attention_scratch_floats(hd) + 1) * sizeof(float), "cpu attention scratch");
    float *gscratch = buf_alloc(MEM_ACTIVATIONS, attention_scratch_floats(hd) * sizeof(float), "gpu scratch");
    int *pos_h = xmalloc(S * sizeof(int), "pos");
    for (int p = 0; p < S; p++) pos_h[p] = p;
    int *pos = buf_alloc(MEM_ACTIVATIONS, S * sizeof(int), "gpu pos");
    ops_upload(pos, pos_h, S * sizeof(int));
    Pair qkv = pair_fill((size_t)B * S * ld, 1.0f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill((size_t)B * H * S, 1.0f), l = pair_fill((size_t)B * H * S, 1.0f);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, gscratch);
    cpu_attention_forward(out.h, lse.h, m.h, l.h, qkv.h, pos_h, B, S, H, KV, hd, scratch);
    expect_close("attention_forward out", out);
    expect_close("attention_forward lse", lse);
    Pair dout = pair_fill(out.n, 1.0f), dqkv = pair_fill(qkv.n, 1.0f), rowdot = pair_fill(lse.n, 1.0f);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, gscratch);
    cpu_attention_backward(dqkv.h, rowdot.h, dout.h, qkv.h, out.h, lse.h, pos_h, B, S, H, KV, hd, scratch);
    expect_close("attention_backward dqkv", dqkv);
    expect_close("attention_backward rowdot", rowdot);
    // Ring steps: queries at positions 40..189 against a key block at 0..69 (partly
    // visible), then one of Sk2 = 50 keys at 150..199 (Sk != Sq; rows before
    // position 150 see none of it: fully masked there), keys and values in their own
    // (B*Sk, 2*KV*hd) buffers; positions from plain host memory (staged).
    const int Sk = 70, Sk2 = 50, ldkv = 2 * KV * hd;
    int *qpos = xmalloc(S * sizeof(int), "qpos"), *kpos = xmalloc(Sk * sizeof(int), "kpos");
    int *kpos2 = xmalloc(Sk2 * sizeof(int), "kpos2");
    for (int p = 0; p < S; p++) qpos[p] = 40 + p;
    for (int p = 0; p < Sk; p++) kpos[p] = p;
    for (int p = 0; p < Sk2; p++) kpos2[p] = 150 + p;
    Pair kv = pair_fill((size_t)B * Sk * ldkv, 1.0f), dkv = pair_fill(kv.n, 1.0f), dq = pair_fill(qkv.n, 1.0f);
    Pair kv2 = pair_fill((size_t)B * Sk2 * ldkv, 1.0f), dkv2 = pair_fill(kv2.n, 1.0f);
    attention_block_init(out.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_init(out.h, m.h, l.h, B, S, H, hd);
    for (int pass = 0; pass < 2; pass++) {  // the same block twice: the running max rescales
        attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, gscratch);
        cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, scratch);
    }
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd,
                            gscratch);
    cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd,
                                scratch);
    expect_close("attention_block_forward m", m);
    expect_close("attention_block_forward l", l);
    attention_block_finish(out.d, lse.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_finish(out.h, lse.h, m.h, l.h, B, S, H, hd);
    expect_close("attention_block_finish out", out);
    expect_close("attention_block_finish lse", lse);
    attention_rowdot(rowdot.d, dout.d, out.d, B, S, H, hd);
    cpu_attention_rowdot(rowdot.h, dout.h, out.h, B, S, H, hd);
    expect_close("attention_rowdot", rowdot);
    attention_block_backward(dq.d, dkv.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos, B, S, Sk, H, KV, hd, gscratch);
    cpu_attention_block_backward(dq.h, dkv.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos, B, S, Sk, H, KV, hd, scratch);
    expect_close("attention_block_backward dq (+=)", dq);
    expect_close("attention_block_backward dkv (+=)", dkv);
    attention_block_backward(dq.d, dkv2.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos2, B, S,
                             Sk2, H, KV, hd, gscratch);
    cpu_attention_block_backward(dq.h, dkv2.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos2,
                                 B, S, Sk2, H, KV, hd, scratch);
    expect_close("attention_block_backward, Sk != Sq, masked rows: dq", dq);
    expect_close("attention_block_backward, Sk != Sq, masked rows: dkv", dkv2);
    free(scratch), free(pos_h), free(qpos), free(kpos), free(kpos2);
    buf_free(gscratch), buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l), pair_free(dout), pair_free(dqkv);
    pair_free(rowdot), pair_free(kv), pair_free(dkv), pair_free(dq), pair_free(kv2), pair_free(dkv2);
}

static void test_cross_entropy(void) {
    const int N = 33, V = 1000;
    int32_t *tgt_d, *tgt = ids_both(N, 0, V, &tgt_d);
    Pair lg = pair_fill((size_t)N * V, 4.0f);
    double lc = 0.0, *acc = acc_new(0.0);
    cpu_cross_entropy_forward(lg.h, tgt, N, V, &lc);
    cross_entropy_forward(lg.d, tgt_d, N, V, acc);
    expect_scalar("cross_entropy_forward loss sum", acc_read(acc), lc);
    lc = 1.25, acc = acc_new(1.25);  // the ops add to what the accumulator holds
    cross_entropy_forward_backward(lg.d, tgt_d, N, V, 1.0f / N, acc);
    cpu_cross_entropy_forward_backward(lg.h, tgt, N, V, 1.0f / N, &lc);
    expect_scalar("cross_entropy_forward_backward adds its sum", acc_read(acc), lc);
    expect_close("cross_entropy_forward_backward dlogits", lg);
    // A vocabulary shard: ids 400 .. 400+valid-1, padding columns after them.
    const int Vl = 320, valid = 300, v0 = 400;
    Pair sh = pair_fill((size_t)N * Vl, 4.0f), mx = pair_fill(N, 1.0f), se = pair_fill(N, 1.0f), tl = pair_fill(N, 1.0f);
    ce_shard_max(sh.d, N, Vl, valid, mx.d);
    cpu_ce_shard_max(sh.h, N, Vl, valid, mx.h);
    expect_close("ce_shard_max", mx);
    ce_shard_sums(sh.d, tgt_d, N, Vl, valid, v0, mx.d, se.d, tl.d);
    cpu_ce_shard_sums(sh.h, tgt, N, Vl, valid, v0, mx.h, se.h, tl.h);
    expect_close("ce_shard_sums sumexp", se);
    expect_close("ce_shard_sums target logit", tl);
    double b = -3.0;
    acc = acc_new(-3.0);
    ce_shard_finish(sh.d, tgt_d, N, Vl, valid, v0, mx.d, se.d, tl.d, 0.5f, 1, acc);
    cpu_ce_shard_finish(sh.h, tgt, N, Vl, valid, v0, mx.h, se.h, tl.h, 0.5f, 1, &b);
    expect_scalar("ce_shard_finish adds its loss sum", acc_read(acc), b);
    expect_close("ce_shard_finish dlogits (padding 0)", sh);
    free(tgt);
    buf_free(tgt_d);
    pair_free(lg), pair_free(sh), pair_free(mx), pair_free(se), pair_free(tl);
}

static void test_optimizer(void) {
    const size_t n = 100003;
    Pair x = pair_fill(n, 1.0f);
    double *acc = acc_new(0.0), b = 0.0;
    sum_squares(x.d, n, acc);
    cpu_sum_squares(x.h, n, &b);
    const double a = acc_read(acc);
    expect_scalar("sum_squares", a, b);
    acc = acc_new(0.0);
    sum_squares(x.d, n, acc);
    CHECK(acc_read(acc) == a, "sum_squares twice: bit-identical");
    acc = acc_new(0.5);
    sum_squares(x.d, n / 2, acc);
    sum_squares(x.d + n / 2, n - n / 2, acc);
    double b2 = 0.5;
    cpu_sum_squares(x.h, n / 2, &b2);
    cpu_sum_squares(x.h + n / 2, n - n / 2, &b2);
    expect_scalar("sum_squares adds to its accumulator", acc_read(acc), b2);
    Pair p = pair_fill(n, 1.0f), g = pair_fill(n, 0.01f), m = pair_fill(n, 0.001f), v = pair_fill(n, 0.0f);
    for (size_t i = 0; i < n; i++) v.h[i] = fabsf(v.h[i]) + 1e-6f;
    ops_upload(v.d, v.h, n * sizeof(float));
    for (int t = 1; t <= 3; t++) {
        adamw_update(p.d, g.d, m.d, v.d, n, 0.5f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        cpu_adamw_update(p.h, g.h, m.h, v.h, n, 0.5f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    expect_close("adamw_update param (3 steps)", p);
    expect_close("adamw_update m", m);
    expect_close("adamw_update v", v);
    pair_free(x), pair_free(p), pair_free(g), pair_free(m), pair_free(v);
}

// The mixture-of-experts data movement (ops/moe_dispatch_cuda.cu) against the CPU's,
// on a routing the host made (moe_route and moe_group run on the host in both builds).
static void test_moe_dispatch(void) {
    const int N = 37, K = 2, E = 5, D = 70;
    const size_t NK = (size_t)N * K;
    float *probs = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * N * E, "router");       // (N, E)
    int32_t *sel = buf_alloc(MEM_ACTIVATIONS, sizeof(int32_t) * NK, "selection");    // (N, K)
    int32_t *start = buf_alloc(MEM_ACTIVATIONS, sizeof(int32_t) * (E + 1), "starts");  // (E+1)
    int32_t *slot_of = buf_alloc(MEM_ACTIVATIONS, sizeof(int32_t) * NK, "slot_of");  // (N*K)
    int32_t *row_of = buf_alloc(MEM_ACTIVATIONS, sizeof(int32_t) * NK, "row_of");    // (N*K)
    Pair wts = pair_fill(NK, 1.0f);
    float *logits = xmalloc(sizeof(float) * N * E, "logits");  // (N, E)
    for (int i = 0; i < N * E; i++) logits[i] = 3.0f * urand();
    ops_upload(probs, logits, sizeof(float) * N * E);
    moe_route(probs, sel, wts.d, N, E, K);
    moe_group(start, slot_of, row_of, sel, N, E, K);
    ops_download(wts.h, wts.d, NK * sizeof(float));
    int32_t *slot_h = xmalloc(sizeof(int32_t) * NK, "slot_of"), *row_h = xmalloc(sizeof(int32_t) * NK, "row_of");
    ops_download(slot_h, slot_of, sizeof(int32_t) * NK);
    ops_download(row_h, row_of, sizeof(int32_t) * NK);
    Pair x = pair_fill((size_t)N * D, 1.0f), xg = pair_fill(NK * D, 1.0f), y = pair_fill(NK * D, 1.0f);
    Pair out = pair_fill((size_t)N * D, 1.0f), dout = pair_fill((size_t)N * D, 1.0f);
    Pair dy = pair_fill(NK * D, 1.0f), dwts = pair_fill(NK, 1.0f), dx = pair_fill((size_t)N * D, 1.0f);
    moe_dispatch(xg.d, x.d, slot_of, N, K, D);
    cpu_moe_dispatch(xg.h, x.h, slot_h, N, K, D);
    expect_close("moe_dispatch", xg);
    moe_combine(out.d, y.d, wts.d, row_of, N, K, D);
    cpu_moe_combine(out.h, y.h, wts.h, row_h, N, K, D);
    expect_close("moe_combine", out);
    moe_combine_backward(dy.d, dwts.d, dout.d, y.d, wts.d, row_of, N, K, D);
    cpu_moe_combine_backward(dy.h, dwts.h, dout.h, y.h, wts.h, row_h, N, K, D);
    expect_close("moe_combine_backward dy", dy);
    expect_close("moe_combine_backward dwts", dwts);
    moe_dispatch_backward(dx.d, dy.d, row_of, N, K, D);
    cpu_moe_dispatch_backward(dx.h, dy.h, row_h, N, K, D);
    expect_close("moe_dispatch_backward (+=)", dx);
    float *first = xmalloc(sizeof(float) * NK, "dwts");  // (N*K)
    ops_download(first, dwts.d, sizeof(float) * NK);
    moe_combine_backward(dy.d, dwts.d, dout.d, y.d, wts.d, row_of, N, K, D);
    float *again = xmalloc(sizeof(float) * NK, "dwts");  // (N*K)
    ops_download(again, dwts.d, sizeof(float) * NK);
    CHECK(!memcmp(first, again, sizeof(float) * NK), "moe_combine_backward twice: bit-identical dwts");
    free(logits), free(slot_h), free(row_h), free(first), free(again);
    buf_free(probs), buf_free(sel), buf_free(start), buf_free(slot_of), buf_free(row_of);
    pair_free(wts), pair_free(x), pair_free(xg), pair_free(y), pair_free(out), pair_free(dout), pair_free(dy);
    pair_free(dwts), pair_free(dx);
}

#endif

// tests/gpu/bf16_step_checks.h — gpu_ops.c's checks of what a bf16 training step
// does around its products: the loss's gradient written as bf16 in place and the
// head's products reading it, the bf16 copy of the weights kept between steps,
// and AdamW writing that copy. Included once, by gpu_ops.c, after bf16_checks.h
// (its helpers): one translation unit, so the PASS/FAIL counts of check.h are one.
#ifndef FEMTOTRON_GPU_BF16_STEP_CHECKS_H
#define FEMTOTRON_GPU_BF16_STEP_CHECKS_H

// The loss's bf16 gradient (cross_entropy_forward_backward_bf16, ce_shard_finish with
// CE_GRADS_BF16) against the fp32 op on the same logits on the GPU: each row's
// values, in the first half of its own bytes, the fp32 gradient rounded (at most 1
// ulp apart, at most one value a row not the same bits: nvcc may fuse the target's
// p - grad_scale with the product before it in one form and not the other), the
// same loss; padding columns 0. Then matmul_backward_ld16 on column blocks of that
// bf16 dlogits (read as it is at r0 % 8 == 0 with rows 2V a multiple of 8 apart,
// through a padded copy otherwise) against the CPU's fp32 product of the widened
// values. V = 1000 and Vl = 1003: rows that take each path.
// The bf16 rows of raw (N rows ld16 halves apart, V values each) into got(N, V), the
// fp32 rows f(N, V) rounded into want(N, V): the rows with more than one value not
// the same bits; *pad counts values from column `valid` on that are not 0.
static int bf16_rows_against(const float *f, const float *raw, int N, int V, size_t ld16, int valid, uint16_t *want,
                             uint16_t *got, int *pad) {
    int rows_off = 0;
    *pad = 0;
    for (int r = 0; r < N; r++) {
        int off = 0;
        for (int j = 0; j < V; j++) {
            const size_t i = (size_t)r * V + j;
            want[i] = bf16_from_f32(f[i]);
            got[i] = ((const uint16_t *)raw)[(size_t)r * ld16 + j];
            off += got[i] != want[i];
            *pad += j >= valid && got[i] != 0;
        }
        rows_off += off > 1;
    }
    return rows_off;
}

static void test_cross_entropy_bf16(int V, int r0, int cols) {
    const int N = 19;
    const size_t n = (size_t)N * V, ld16 = CE_LD16(V);
    int32_t *tgt_d, *tgt = ids_both(N, 0, V, &tgt_d);
    Pair lg = pair_fill(n, 4.0f), g32 = pair_fill(n, 0.0f);
    copy_f32(g32.d, lg.d, n);
    double *acc32 = acc_new(0.5), *acc16 = acc_new(0.5);
    cross_entropy_forward_backward(g32.d, tgt_d, N, V, 0.7f, acc32);
    cross_entropy_forward_backward_bf16(lg.d, tgt_d, N, V, 0.7f, acc16);
    const double l32 = acc_read(acc32), l16 = acc_read(acc16);
    float *f = xmalloc(n * sizeof(float), "fp32 dlogits"), *raw = xmalloc(n * sizeof(float), "bf16 dlogits");
    ops_download(f, g32.d, n * sizeof(float)), ops_download(raw, lg.d, n * sizeof(float));
    uint16_t *want = xmalloc(n * sizeof(uint16_t), "rounded"), *got = xmalloc(n * sizeof(uint16_t), "bf16");
    int pad, ulp, rows_off = bf16_rows_against(f, raw, N, V, ld16, V, want, got, &pad);
    size_t same = bf16_compare(got, want, n, &ulp);
    CHECK(l16 == l32 && ulp <= 1 && rows_off == 0,
          "cross_entropy_forward_backward_bf16 (V %d): the fp32 gradient rounded in place (%zu of %zu the same bits, "
          "at most %d ulp apart, %d rows with more than one off), loss %.17g vs %.17g",
          V, same, n, ulp, rows_off, l16, l32);
    // the head's products on columns [r0, r0 + cols) of the bf16 dlogits
    const int D = 72;
    Pair x = pair_fill((size_t)N * D, 1.0f), w = pair_fill((size_t)cols * D, 0.1f);
    Pair din = pair_fill((size_t)N * D, 1.0f), dw = pair_fill((size_t)cols * D, 1.0f);
    float *wide = xmalloc(n * sizeof(float), "widened dlogits"), *wr = rounded_copy(w), *xr = rounded_copy(x);
    for (size_t i = 0; i < n; i++) wide[i] = bf16_to_f32(got[i]);
    ops_set_matmul_bf16(1);
    for (int acc = 0; acc < 2; acc++) {
        matmul_backward_ld16(din.d, dw.d, (const uint16_t *)lg.d + r0, ld16, x.d, w.d, N, D, cols, acc);
        cpu_matmul_backward_ld(din.h, dw.h, wide + r0, V, xr, wr, N, D, cols, acc);
    }
    char what[96];
    snprintf(what, sizeof what, "matmul_backward_ld16 din (cols %d.., rows %zu apart)", r0, ld16);
    expect_close(what, din);
    snprintf(what, sizeof what, "matmul_backward_ld16 dweight (cols %d.., rows %zu apart)", r0, ld16);
    expect_close(what, dw);
    // a vocabulary shard: ids v0 .. v0+valid-1, padding columns after them
    const int Vl = V, valid = V - 5, v0 = 300;
    Pair sh = pair_fill(n, 4.0f), s32 = pair_fill(n, 0.0f), st = pair_fill(3 * (size_t)N, 1.0f);
    copy_f32(s32.d, sh.d, n);
    for (int i = 0; i < N; i++) tgt[i] = v0 + tgt[i] % valid + (i == 2 ? valid : 0);  // row 2's in another shard
    ops_upload(tgt_d, tgt, (size_t)N * sizeof(int32_t));
    ce_shard_max(sh.d, N, Vl, valid, st.d);
    ce_shard_sums(sh.d, tgt_d, N, Vl, valid, v0, st.d, st.d + N, st.d + 2 * N);
    acc32 = acc_new(0.0), acc16 = acc_new(0.0);
    ce_shard_finish(s32.d, tgt_d, N, Vl, valid, v0, st.d, st.d + N, st.d + 2 * N, 0.7f, CE_GRADS_F32, acc32);
    ce_shard_finish(sh.d, tgt_d, N, Vl, valid, v0, st.d, st.d + N, st.d + 2 * N, 0.7f, CE_GRADS_BF16, acc16);
    ops_download(f, s32.d, n * sizeof(float)), ops_download(raw, sh.d, n * sizeof(float));
    rows_off = bf16_rows_against(f, raw, N, Vl, ld16, valid, want, got, &pad);
    same = bf16_compare(got, want, n, &ulp);
    const double s32l = acc_read(acc32), s16l = acc_read(acc16);
    CHECK(s16l == s32l && ulp <= 1 && rows_off == 0 && pad == 0,
          "ce_shard_finish CE_GRADS_BF16 (Vl %d): the fp32 gradient rounded in place (%zu of %zu the same bits, at "
          "most %d ulp apart, %d rows with more than one off), padding 0 (%d not), the same loss",
          Vl, same, n, ulp, rows_off, pad);
    free(tgt), free(f), free(raw), free(want), free(got), free(wide), free(wr), free(xr);
    buf_free(tgt_d);
    pair_free(lg), pair_free(g32), pair_free(x), pair_free(w), pair_free(din), pair_free(dw), pair_free(sh);
    pair_free(s32), pair_free(st);
}

// The bf16 copy of the weights (ops_keep_bf16_weights): a product whose weight
// lies in the kept arena reads its bf16 copy, rounded once per generation. So the
// product equals the CPU's product of the rounded operands (exact, as above); new
// weights written without ops_bf16_weights_changed() are not seen (the copy is
// kept: the trainer says "changed" before every step and validation), and after
// it they are; the backward's din reads the copy too.
static void test_kept_weights(void) {
    const int N = 24, in = 64, out = 48;
    const size_t off = 40, nw = (size_t)out * in, n = off + nw + 16;  // the weight inside the arena
    Pair arena = pair_fill(n, 0.1f), x = pair_fill((size_t)N * in, 1.0f), y = pair_fill((size_t)N * out, 1.0f);
    Pair dy = pair_fill((size_t)N * out, 1.0f), dx = pair_fill((size_t)N * in, 1.0f), dw = pair_fill(nw, 1.0f);
    void *copy = buf_alloc(MEM_PARAMS, 2 * n, "bf16 weight copy");
    float *xr = rounded_copy(x), *dyr = rounded_copy(dy), *old_wr = rounded_range(arena.h + off, nw);
    const float *w = arena.d + off;
    ops_set_matmul_bf16(1);
    ops_keep_bf16_weights(arena.d, n, copy);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, old_wr, N, in, out);
    expect_close("kept bf16 weights: matmul_forward", y);
    for (size_t i = 0; i < n; i++) arena.h[i] = urand() * 0.1f;  // new weights, nobody says so
    ops_upload(arena.d, arena.h, n * sizeof(float));
    float *new_wr = rounded_range(arena.h + off, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    expect_close("kept bf16 weights: new weights unseen until ops_bf16_weights_changed", y);
    ops_bf16_weights_changed();
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, new_wr, N, in, out);
    expect_close("kept bf16 weights: seen after ops_bf16_weights_changed", y);
    matmul_backward(dx.d, dw.d, dy.d, x.d, w, N, in, out, 0);
    cpu_matmul_backward(dx.h, dw.h, dyr, xr, new_wr, N, in, out, 0);
    expect_close("kept bf16 weights: matmul_backward din", dx);
    expect_close("kept bf16 weights: matmul_backward dweight", dw);
    ops_keep_bf16_weights(NULL, 0, NULL);
    ops_set_matmul_bf16(0);
    free(xr), free(dyr), free(old_wr), free(new_wr);
    buf_free(copy);
    pair_free(arena), pair_free(x), pair_free(y), pair_free(dy), pair_free(dx), pair_free(dw);
}

// AdamW writes the kept copy (issue 21): right after an update of a weight in the
// arena, the copy's slice holds the updated weight rounded to bf16, bit for bit
// (without the write it would still hold the old weight's rounding), and after
// ops_bf16_weights_changed the product reads it: the CPU's product of the rounded
// updated weights. An update of half the weight, after the weights were written
// by the host (a load), leaves the other half of the copy stale: the product must
// then round the whole weight again, not take the half-written copy as fresh.
static void test_adamw_writes_copy(void) {
    const int N = 16, in = 32, out = 24;
    const size_t off = 8, nw = (size_t)out * in, n = off + nw + 8;  // the weight inside the arena
    Pair arena = pair_fill(n, 0.1f), x = pair_fill((size_t)N * in, 1.0f), y = pair_fill((size_t)N * out, 1.0f);
    Pair g = pair_fill(nw, 1.0f), m = pair_fill(nw, 0.0f), v = pair_fill(nw, 0.0f);
    void *copy = buf_alloc(MEM_PARAMS, 2 * n, "bf16 weight copy");
    float *xr = rounded_copy(x), *w_h = xmalloc(nw * sizeof(float), "updated weight");  // (nw)
    uint16_t *c_h = xmalloc(nw * sizeof(uint16_t), "downloaded copy");                    // (nw)
    float *w = arena.d + off;
    ops_set_matmul_bf16(1);
    ops_keep_bf16_weights(arena.d, n, copy);
    matmul_forward(y.d, x.d, w, N, in, out);  // rounds the weight into the copy
    adamw_update(w, g.d, m.d, v.d, nw, 1.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    ops_download(w_h, w, nw * sizeof(float));
    ops_download(c_h, (uint16_t *)copy + off, nw * sizeof(uint16_t));
    size_t same = 0;
    for (size_t i = 0; i < nw; i++) same += c_h[i] == bf16_from_f32(w_h[i]);
    CHECK(same == nw, "adamw_update writes the kept bf16 copy: %zu of %zu values are the updated weights rounded",
          same, nw);
    ops_bf16_weights_changed();
    float *wr = rounded_range(w_h, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, wr, N, in, out);
    expect_close("kept bf16 weights: the product reads the copy AdamW wrote", y);
    free(wr);
    for (size_t i = 0; i < n; i++) arena.h[i] = urand() * 0.1f;  // a load: new weights everywhere
    ops_upload(arena.d, arena.h, n * sizeof(float));
    ops_bf16_weights_changed();
    adamw_update(w, g.d, m.d, v.d, nw / 2, 1.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2);  // half the weight
    ops_bf16_weights_changed();
    ops_download(w_h, w, nw * sizeof(float));
    wr = rounded_range(w_h, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, wr, N, in, out);
    expect_close("kept bf16 weights: half a weight updated by AdamW, the whole weight rounded again", y);
    ops_keep_bf16_weights(NULL, 0, NULL);
    ops_set_matmul_bf16(0);
    free(wr), free(xr), free(w_h), free(c_h);
    buf_free(copy);
    pair_free(arena), pair_free(x), pair_free(y), pair_free(g), pair_free(m), pair_free(v);
}

#endif

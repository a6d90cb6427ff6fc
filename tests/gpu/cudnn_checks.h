// tests/gpu/cudnn_checks.h — cuDNN's fused attention (training.attention = cudnn,
// ops/cudnn_attention.h) against the CPU's fp32 attention, included by gpu_ops.c
// after bf16_kernel_checks.h (BF16_ATT_TOL, causal_positions; gpu_ops.c's Pair helpers).
//
// Where cuDNN cannot load (a machine without cuDNN 9) the checks print SKIP with
// the reason, unless FEMTOTRON_TEST_CUDNN=require (set by tests/gpu/run.sh on a
// real GPU), where that is a failure. The emulated build (version 0) runs them
// against tests/emu/cudnn_attention_emu.cpp's stand-in, which has no workspace to
// check.
#include "ops/cudnn_attention.h"
#include "ops/cuda_workspace.h"

// Every value of the device buffer is a bf16 value (its low 16 bits zero): the
// result came through cuDNN's bf16 output, not femtotron's fp32 one.
static int all_bf16(const float *dev, size_t n) {
    uint32_t *h = xmalloc((n ? n : 1) * sizeof(uint32_t), "bf16 check");
    ops_download(h, dev, n * sizeof(float));
    size_t odd = 0;
    for (size_t i = 0; i < n; i++) odd += (h[i] & 0xffffu) != 0;
    free(h);
    return odd == 0;
}

// cuDNN loaded, or the reason it did not (SKIP, or FAIL where required). 1 = go on.
static int cudnn_ready(const char *what) {
    const char *why = cudnn_attention_load();
    if (!why) return 1;
    const char *req = getenv("FEMTOTRON_TEST_CUDNN");
    if (req && !strcmp(req, "require")) CHECK(0, "%s: cuDNN must load here (FEMTOTRON_TEST_CUDNN=require): %s", what, why);
    else printf("SKIP %s: %s\n", what, why);
    return 0;
}

// cuDNN's own workspace for this shape's plans (forward and backward) within the
// reserve the memory plan counts (ops_cuda_cudnn_parts).
static void expect_workspace_fits(int B, int S, int H, int KV, int hd) {
    size_t part[CUDNN_PARTS];
    ops_cuda_cudnn_parts((size_t)B * S * (H + 2 * KV) * hd, (size_t)B * S * H * hd, ops_cuda_cudnn_scores(B, H, S), 0,
                         part);
    const size_t wf = cudnn_attention_workspace(0, B, S, H, KV, hd), wb = cudnn_attention_workspace(1, B, S, H, KV, hd);
    CHECK(wf <= part[CUDNN_WS] && wb <= part[CUDNN_WS],
          "cuDNN's workspace at B %d S %d H %d/%d hd %d (forward %zu, backward %zu bytes) within the planned reserve %zu",
          B, S, H, KV, hd, wf, wb, part[CUDNN_WS]);
}

// The bf16 ops (attention_forward_bf16 / attention_backward_bf16, what a model
// with bf16 q|k|v calls) on q|k|v rounded to bf16: the same cuDNN graphs as the
// fp32 ops' (out_fp32, dqkv_fp32: their results on the same q|k|v and dout), so
// the same bits once widened, with no copy of q|k|v or the output made; and within
// the tolerance of the CPU's reference (ops.h: the fp32 attention of the widened
// values, rounded).
static void expect_bf16_ops(Pair qkv, Pair dout, Pair lse, const float *out_fp32, const float *dqkv_fp32,
                            const int *pos, const int *pos_h, int B, int S, int H, int KV, int hd) {
    const size_t nq = qkv.n, no = (size_t)B * S * H * hd, nl = lse.n;
    uint16_t *qkv16 = buf_alloc(MEM_ACTIVATIONS, nq * 2, "bf16 q|k|v");   // (B*S, (H+2KV)*hd)
    uint16_t *o16 = buf_alloc(MEM_ACTIVATIONS, no * 2, "bf16 out");       // (B*S, H*hd)
    uint16_t *d16 = buf_alloc(MEM_ACTIVATIONS, nq * 2, "bf16 dq|dk|dv");  // (B*S, (H+2KV)*hd)
    float *lse2 = buf_alloc(MEM_ACTIVATIONS, nl * sizeof(float), "lse");  // (B, H, S)
    float *wide = buf_alloc(MEM_ACTIVATIONS, nq * sizeof(float), "widened");
    float *h = xmalloc(nq * sizeof(float), "host"), *hl = xmalloc(nl * sizeof(float), "host lse");
    float *lse_fp32 = xmalloc(nl * sizeof(float), "lse of the fp32 ops");
    ops_download(lse_fp32, lse.d, nl * sizeof(float));
    round_to_bf16(qkv16, qkv.d, nq);
    attention_forward_bf16(o16, lse2, qkv16, pos, B, S, H, KV, hd);
    widen_from_bf16(wide, o16, no);
    CHECK(same_bits(wide, no, out_fp32) && same_bits(lse2, nl, lse_fp32),
          "attention_forward_bf16 (hd %d, S %d): the fp32 op's output and lse, bit for bit", hd, S);
    uint16_t *do16 = buf_alloc(MEM_ACTIVATIONS, no * 2, "bf16 dout");  // (B*S, H*hd): as the o product writes it
    round_to_bf16(do16, dout.d, no);
    attention_backward_bf16(d16, do16, qkv16, o16, lse2, pos, B, S, H, KV, hd);
    widen_from_bf16(wide, d16, nq);
    CHECK(same_bits(wide, nq, dqkv_fp32), "attention_backward_bf16 (hd %d, S %d): the fp32 op's dqkv, bit for bit", hd,
          S);
    // The CPU's reference on the same bf16 values.
    uint16_t *q16h = xmalloc(nq * 2, "host q|k|v"), *o16h = xmalloc(no * 2, "host out"), *d16h = xmalloc(nq * 2, "d");
    uint16_t *douth = xmalloc(no * 2, "host dout");
    ops_download(q16h, qkv16, nq * 2);
    ops_download(douth, do16, no * 2);
    cpu_attention_forward_bf16(o16h, hl, q16h, pos_h, B, S, H, KV, hd);
    cpu_attention_backward_bf16(d16h, douth, q16h, o16h, hl, pos_h, B, S, H, KV, hd);
    Pair o = {wide, h, no}, d = {wide, h, nq};
    widen_from_bf16(wide, o16, no);
    cpu_widen_from_bf16(h, o16h, no);
    char what[96];
    snprintf(what, sizeof what, "attention_forward_bf16 vs the CPU (hd %d, S %d)", hd, S);
    expect_bf16_close(what, o);
    widen_from_bf16(wide, d16, nq);
    cpu_widen_from_bf16(h, d16h, nq);
    snprintf(what, sizeof what, "attention_backward_bf16 vs the CPU (hd %d, S %d)", hd, S);
    expect_bf16_close(what, d);
    buf_free(qkv16), buf_free(o16), buf_free(d16), buf_free(do16), buf_free(lse2), buf_free(wide);
    free(h), free(hl), free(lse_fp32), free(q16h), free(o16h), free(d16h), free(douth);
}

// B 2, S tokens, 4 query heads on 2 key/value heads (grouped-query) of width hd.
static void test_attention_cudnn(int hd, int S) {
    char what[112];
    snprintf(what, sizeof what, "cuDNN attention (hd %d, S %d)", hd, S);
    if (!cudnn_ready(what)) return;
    const int B = 2, H = 4, KV = 2, ld = (H + 2 * KV) * hd;
    static int said;
    if (!said++) {
        if (cudnn_attention_version()) printf("cuDNN %ld loaded\n", cudnn_attention_version());
        else printf("cuDNN emulated (tests/emu/cudnn_attention_emu.cpp)\n");
    }
    float *scratch = xmalloc((cpu_attention_scratch_floats(hd) + 1) * sizeof(float), "cpu attention scratch");
    int *pos_h, *pos = causal_positions(S, &pos_h);
    Pair qkv = pair_fill((size_t)B * S * ld, 1.5f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill(lse.n, 1.0f), l = pair_fill(lse.n, 1.0f);
    Pair dout = pair_fill(out.n, 1.0f), dqkv = pair_fill(qkv.n, 1.0f), rowdot = pair_fill(lse.n, 1.0f);
    ops_set_matmul_bf16(1);
    setenv("FEMTOTRON_ATTENTION", "cudnn", 1);

    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_forward(out.h, lse.h, m.h, l.h, qkv.h, pos_h, B, S, H, KV, hd, scratch);
    snprintf(what, sizeof what, "cuDNN attention_forward out (hd %d, S %d)", hd, S);
    expect_bf16_close(what, out);
    snprintf(what, sizeof what, "cuDNN attention_forward lse (hd %d, S %d)", hd, S);
    expect_bf16_close(what, lse);
    CHECK(all_bf16(out.d, out.n), "cuDNN attention (hd %d, S %d): every output value is bf16 (cuDNN's output ran)",
          hd, S);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_backward(dqkv.h, rowdot.h, dout.h, qkv.h, out.h, lse.h, pos_h, B, S, H, KV, hd, scratch);
    snprintf(what, sizeof what, "cuDNN attention_backward dqkv (hd %d, S %d)", hd, S);
    expect_bf16_close(what, dqkv);
    CHECK(all_bf16(dqkv.d, dqkv.n), "cuDNN attention (hd %d, S %d): every q|k|v gradient value is bf16", hd, S);

    // Twice: the same bits (the backward's deterministic algorithm).
    float *first_out = xmalloc(out.n * sizeof(float), "first out"), *first_d = xmalloc(dqkv.n * sizeof(float), "d");
    ops_download(first_out, out.d, out.n * sizeof(float));
    ops_download(first_d, dqkv.d, dqkv.n * sizeof(float));
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    CHECK(same_bits(out.d, out.n, first_out) && same_bits(dqkv.d, dqkv.n, first_d),
          "cuDNN attention (hd %d, S %d) twice: out and dqkv bit-identical", hd, S);
    expect_bf16_ops(qkv, dout, lse, first_out, first_d, pos, pos_h, B, S, H, KV, hd);

    // training.attention's switch (ops_set_attention_cudnn) with FEMTOTRON_ATTENTION
    // unset takes cuDNN (the same bits); FEMTOTRON_ATTENTION=mma then times
    // femtotron's kernel instead (fp32 outputs, within the tolerance of cuDNN's).
    unsetenv("FEMTOTRON_ATTENTION");
    ops_set_attention_cudnn(1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    CHECK(same_bits(out.d, out.n, first_out), "ops_set_attention_cudnn(1): attention_forward runs cuDNN (hd %d)", hd);
    setenv("FEMTOTRON_ATTENTION", "mma", 1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    CHECK(!all_bf16(out.d, out.n), "FEMTOTRON_ATTENTION=mma over ops_set_attention_cudnn(1): femtotron's kernel "
          "ran (fp32 outputs, hd %d)", hd);
    ops_download(out.h, out.d, out.n * sizeof(float));
    ops_upload(out.d, first_out, out.n * sizeof(float));  // pair_diff: device = cuDNN's, host = mma's
    const double e = pair_diff(out);
    CHECK(e > 0 && e <= BF16_ATT_TOL, "cuDNN and femtotron's mma kernel (hd %d, S %d): both ran (bits differ) and "
          "agree within %.0e (%.2e)", hd, S, BF16_ATT_TOL, e);
    ops_set_attention_cudnn(0);
    unsetenv("FEMTOTRON_ATTENTION");

    ops_set_matmul_bf16(0);
    free(scratch), free(pos_h), free(first_out), free(first_d);
    buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l), pair_free(dout), pair_free(dqkv);
    pair_free(rowdot);
    // cuDNN's own workspace for these plans (emulated: the sizes cudnn-frontend
    // gives Hopper's deterministic backward, tests/emu/cudnn_attention_emu.cpp).
    expect_workspace_fits(B, S, H, KV, hd);
}

// The planned workspace's cuDNN part at a training shape (SmolLM-1.7B's attention,
// one micro-batch of 4 x 2048): cuDNN's plans' workspaces fit the reserve, so a
// training run with training.attention = cudnn stays within its memory plan. On
// Hopper the deterministic backward keeps dP for every score pair (1.07 GB here):
// the emulation reports that size too, so CI checks the reserve's formula, and a
// real GPU checks it against what cuDNN's chosen plan asks.
static void test_cudnn_reserve_at_scale(void) {
    if (!cudnn_ready("cuDNN's workspace at SmolLM-1.7B's shape")) return;
    expect_workspace_fits(4, 2048, 32, 32, 64);
    expect_workspace_fits(4, 2048, 32, 8, 64);  // Llama-3.2-1B's grouped-query heads
}

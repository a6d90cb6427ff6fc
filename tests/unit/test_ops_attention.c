// tests/unit/test_ops_attention.c — independent tests of RoPE (its tables, the
// published frequency scalings, forward and backward, fp32 and bf16) and of the
// causal grouped-query attention kernels of src/ops/ops.h (whole, in blocks as the
// context-parallel ring folds them, forward and backward), by test_ops.c's method:
// naive double loops and central finite differences (ops_reference.h).

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/bf16.h"
#include "ops/ops.h"
#include "ops_reference.h"

// -------------------------------------------------------------------- RoPE ----

typedef struct { double *x, *tmp, *cs, *sn, *R; int B, S, H, KV, hd; } rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->S * (c->H + 2 * c->KV) * c->hd;
    memcpy(c->tmp, c->x, n * sizeof(double));
    rope_d(c->tmp, c->cs, c->sn, c->B, c->S, c->H, c->KV, c->hd);
    return dot_d(c->tmp, c->R, n);
}

// max |table - formula| with angle(p, i) = p * theta^(-2i/hd), p = pos0 + s
static void tables_err(const float *cs, const float *sn, int S, int hd, double theta, int pos0,
                       double *ec, double *es) {
    *ec = *es = 0.0;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < hd / 2; i++) {
            double ang = (double)(pos0 + s) * pow(theta, -2.0 * i / hd);
            *ec = fmax(*ec, fabs(cs[s * (hd / 2) + i] - cos(ang)));
            *es = fmax(*es, fabs(sn[s * (hd / 2) + i] - sin(ang)));
        }
}

// Meta's apply_scaling (llama-models, Llama 3.1), transliterated: the reference
// for model/rope.c's llama3 frequencies.
static double meta_apply_scaling(double freq, double scale_factor, double low_freq_factor,
                                 double high_freq_factor, double old_context_len) {
    const double low_freq_wavelen = old_context_len / low_freq_factor;
    const double high_freq_wavelen = old_context_len / high_freq_factor;
    const double wavelen = 2 * 3.14159265358979323846 / freq;
    if (wavelen < high_freq_wavelen) return freq;
    if (wavelen > low_freq_wavelen) return freq / scale_factor;
    const double smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1 - smooth) * freq / scale_factor + smooth * freq;
}

static void test_rope_frequencies(void) {
    // Llama 3.1's values: hd 128, theta 5e5, factor 8, low 1, high 4, L 8192.
    ModelConfig mc;
    memset(&mc, 0, sizeof mc);
    mc.rope_theta = 500000.0;
    mc.rope_type = ROPE_LLAMA3;
    mc.rope_factor = 8.0;
    mc.rope_low_freq_factor = 1.0;
    mc.rope_high_freq_factor = 4.0;
    mc.rope_original_max_position_embeddings = 8192;
    double f[64], plain[64];
    rope_frequencies(&mc, 128, f);
    rope_plain_frequencies(128, 500000.0, plain);
    int kept = 0, scaled = 0, blended = 0;
    double worst = 0;
    for (int i = 0; i < 64; i++) {
        double want = meta_apply_scaling(1.0 / pow(500000.0, 2.0 * i / 128), 8, 1, 4, 8192);
        worst = fmax(worst, fabs(f[i] - want) / want);
        if (f[i] == plain[i]) kept++;
        else if (f[i] == plain[i] / 8) scaled++;
        else if (f[i] < plain[i] && f[i] > plain[i] / 8) blended++;
    }
    CHECK(worst < 1e-14, "llama3 RoPE frequencies = Meta's apply_scaling (worst rel %.1e)", worst);
    // Wavelength 2 pi 5e5^(i/64) < 2048 for i <= 28, > 8192 for i >= 35: 29 kept, 6 blended, 29 scaled.
    CHECK(kept == 29 && blended == 6 && scaled == 29, "llama3 RoPE: %d kept, %d blended, %d divided by 8 (29/6/29)",
          kept, blended, scaled);
    mc.rope_type = ROPE_LINEAR;
    mc.rope_factor = 4.0;
    rope_frequencies(&mc, 128, f);
    int exact = 1;
    for (int i = 0; i < 64; i++) exact &= f[i] == plain[i] / 4;
    CHECK(exact, "linear RoPE frequencies = plain / factor (positions divided by 4)");
    mc.rope_type = ROPE_DEFAULT;
    rope_frequencies(&mc, 128, f);
    exact = 1;
    for (int i = 0; i < 64; i++) exact &= f[i] == plain[i];
    CHECK(exact, "default RoPE frequencies = theta^(-2i/hd)");
}

static void test_rope(void) {
    int B = 2, S = 5, H = 4, KV = 2, hd = 8, half = hd / 2, pos0 = 3;
    double theta = 10000.0;
    float *cs = fnew((size_t)S * half), *sn = fnew((size_t)S * half);
    rope_tables_theta(cs, sn, S, hd, theta, pos0);
    double ec, es;
    tables_err(cs, sn, S, hd, theta, pos0, &ec, &es);
    CHECK(ec < 2e-6, "rope_tables cos = cos(p theta^(-2i/hd)), pos0=%d (max abs err %.2e)", pos0, ec);
    CHECK(es < 2e-6, "rope_tables sin = sin(p theta^(-2i/hd)), pos0=%d (max abs err %.2e)", pos0, es);
    {   // large positions (a context-parallel chunk far into the sequence), Llama-3 theta:
        // theta comes in double and the angle must be formed in double; an fp32 angle
        // p * inv_freq would be off by ~1e-4 rad here and fail this bound
        int S2 = 3, hd2 = 64, p2 = 4000;
        float *c2 = fnew((size_t)S2 * hd2 / 2), *s2 = fnew((size_t)S2 * hd2 / 2);
        rope_tables_theta(c2, s2, S2, hd2, 500000.0, p2);
        tables_err(c2, s2, S2, hd2, 500000.0, p2, &ec, &es);
        CHECK(ec < 1e-5 && es < 1e-5, "rope_tables hd=64 theta=5e5 pos0=%d (max abs err %.2e, %.2e)", p2, ec, es);
    }

    // rope_forward with tables computed here (independent of rope_tables), and
    // theta small so that all angles are large and every pair really turns.
    size_t W = (size_t)(H + 2 * KV) * hd, nq = (size_t)B * S * W;
    rng_seed(40);
    float *tc = fnew((size_t)S * half), *ts = fnew((size_t)S * half);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            double ang = (double)(7 + s) * pow(50.0, -2.0 * i / hd);
            tc[s * half + i] = (float)cos(ang);
            ts[s * half + i] = (float)sin(ang);
        }
    float *x = fnew(nq), *y = fnew(nq), *R = fnew(nq);
    fill(x, nq, -1, 1);
    fill(R, nq, -1, 1);
    memcpy(y, x, nq * sizeof(float));
    rope_forward(y, tc, ts, B, S, H, KV, hd);
    rope_ctx c = {to_d(x, nq), dnew(nq), to_d(tc, (size_t)S * half), to_d(ts, (size_t)S * half),
                  to_d(R, nq), B, S, H, KV, hd};
    double *ref = to_d(x, nq);
    rope_d(ref, c.cs, c.sn, B, S, H, KV, hd);
    double e = nerr_f(y, ref, nq);
    CHECK(e < TOL_FWD, "rope_forward rotate-half on q and k heads, row t uses table row t %% S (err %.2e)", e);
    int v_same = 1;
    for (int n = 0; n < B * S; n++) {
        size_t off = (size_t)n * W + (size_t)(H + KV) * hd;
        v_same &= memcmp(y + off, x + off, (size_t)KV * hd * sizeof(float)) == 0;
    }
    CHECK(v_same, "rope_forward leaves the v heads bit for bit unchanged");

    // backward is the transpose: <rope(x), r> == <x, rope_backward(r)>
    float *g = fcopy(R, nq);
    rope_backward(g, tc, ts, B, S, H, KV, hd);
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < nq; i++) {
        lhs += (double)y[i] * R[i];
        rhs += (double)x[i] * g[i];
    }
    CHECK(rel_diff(lhs, rhs) < 1e-5, "rope_backward is the transpose: <rope(x),r>=%.9f <x,rope^T(r)>=%.9f", lhs, rhs);
    double *gfd = dnew(nq);
    fd_grad(rope_loss, &c, c.x, nq, gfd);
    double e2 = nerr_f(g, gfd, nq);
    CHECK(e2 < TOL_BWD, "rope_backward vs FD on every element of qkv (v passes through) (err %.2e)", e2);
    // rope_backward_to_bf16: rope_backward's values (v's too) rounded to bf16, its
    // input left as it is
    uint16_t *g16 = talloc(nq * sizeof(uint16_t)), *gref16 = talloc(nq * sizeof(uint16_t));
    for (size_t i = 0; i < nq; i++) g16[i] = 0x7fc0;  // garbage (NaN): overwritten
    float *Rkept = fcopy(R, nq);
    rope_backward_to_bf16(g16, R, tc, ts, B, S, H, KV, hd);
    round_to_bf16(gref16, g, nq);
    CHECK(!memcmp(g16, gref16, nq * sizeof(uint16_t)) && !memcmp(R, Rkept, nq * sizeof(float)),
          "rope_backward_to_bf16 = rope_backward rounded to bf16, bit for bit (v heads too), its input kept");
    // a rotation is orthogonal: the transpose undoes the forward
    float *back = fcopy(y, nq);
    rope_backward(back, tc, ts, B, S, H, KV, hd);
    double e3 = nerr_ff(back, x, nq);
    CHECK(e3 < 1e-6, "rope_backward(rope_forward(x)) == x (err %.2e)", e3);
    // the kernel tables drive the kernel rotation as the formula says
    float *y2 = fcopy(x, nq);
    rope_forward(y2, cs, sn, B, S, H, KV, hd);
    double *ref2 = to_d(x, nq), *cd = dnew((size_t)S * half), *sd = dnew((size_t)S * half);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            double ang = (double)(pos0 + s) * pow(theta, -2.0 * i / hd);
            cd[s * half + i] = cos(ang);
            sd[s * half + i] = sin(ang);
        }
    rope_d(ref2, cd, sd, B, S, H, KV, hd);
    double e4 = nerr_f(y2, ref2, nq);
    CHECK(e4 < 1e-5, "rope_tables + rope_forward vs the double formula, pos0=%d (err %.2e)", pos0, e4);
    tfree_all();
}

// --------------------------------------------------------------- attention ----

typedef struct { double *x, *tmp, *out, *R, *cs, *sn; int B, S, H, KV, hd, with_rope; } att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    size_t n = (size_t)c->B * c->S * (c->H + 2 * c->KV) * c->hd;
    const double *in = c->x;
    if (c->with_rope) {
        memcpy(c->tmp, c->x, n * sizeof(double));
        rope_d(c->tmp, c->cs, c->sn, c->B, c->S, c->H, c->KV, c->hd);
        in = c->tmp;
    }
    attention_d(c->out, NULL, in, c->B, c->S, c->H, c->KV, c->hd);
    return dot_d(c->out, c->R, (size_t)c->B * c->S * c->H * c->hd);
}

// log sum_j<=t exp(score_j) for every (b, h, t), in double: the saved log-sum-exp.
static void lse_d(double *lse, const double *qkv, int B, int S, int H, int KV, int hd) {
    int W = (H + 2 * KV) * hd, group = H / KV;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < S; t++) {
                const double *q = qkv + (size_t)(b * S + t) * W + (size_t)h * hd;
                double mx = -INFINITY, z = 0.0, sc[512];
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + (size_t)(b * S + j) * W + (size_t)(H + h / group) * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    sc[j] = s / sqrt((double)hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= t; j++) z += exp(sc[j] - mx);
                lse[((size_t)b * H + h) * S + t] = mx + log(z);
            }
}

static void test_attention(void) {
    // Small S: everything against the textbook and central differences. Large S:
    // several 64-row query tiles and two 128-key chunks (and skipped masked tiles); the backward is checked on a
    // sample of elements, central differences being O(n) forwards each.
    static const int cfg[][5] = {  // B, S, H, KV, hd
        {2, 6, 4, 2, 4}, {2, 5, 4, 4, 8}, {2, 7, 4, 1, 4}, {1, 150, 4, 2, 8}};
    for (int k = 0; k < 4; k++) {
        int B = cfg[k][0], S = cfg[k][1], H = cfg[k][2], KV = cfg[k][3], hd = cfg[k][4];
        size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd;
        size_t nr = (size_t)B * H * S;
        rng_seed(50 + k);
        int *pos = positions(S);
        float *qkv = fnew(nq), *out = fnew(no), *lse = fnew(nr), *mrun = fnew(nr), *lrun = fnew(nr);
        float *R = fnew(no), *scratch = fnew(attention_scratch_floats(hd));
        fill(qkv, nq, -2, 2);  // scores of a few units: peaked, non-trivial softmax
        fill(R, no, -1, 1);
        fill(out, no, 7, 8);  // garbage: the forward writes every entry
        attention_forward(out, lse, mrun, lrun, qkv, pos, B, S, H, KV, hd, scratch);
        double *ref = dnew(no), *lref = dnew(nr);
        att_ctx c = {to_d(qkv, nq), NULL, dnew(no), to_d(R, no), NULL, NULL, B, S, H, KV, hd, 0};
        attention_d(ref, NULL, c.x, B, S, H, KV, hd);
        lse_d(lref, c.x, B, S, H, KV, hd);
        double e = nerr_f(out, ref, no);
        CHECK(e < TOL_FWD, "attention_forward H=%d KV=%d hd=%d S=%d vs textbook masked softmax (err %.2e)", H, KV, hd, S, e);
        double el = nerr_f(lse, lref, nr);
        CHECK(el < TOL_FWD, "attention_forward S=%d saves lse = log sum exp(visible scores) (err %.2e)", S, el);

        float *dqkv = fnew(nq), *rowdot = fnew(nr);
        fill(dqkv, nq, 300, 400);  // garbage: dqkv is overwritten
        fill(scratch, attention_scratch_floats(hd), -500, 500);  // garbage: scratch is workspace
        attention_backward(dqkv, rowdot, R, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
        if (S < 64) {
            double *g = dnew(nq);
            fd_grad(att_loss, &c, c.x, nq, g);
            double eb = nerr_f(dqkv, g, nq);
            CHECK(eb < TOL_BWD, "attention_backward H=%d KV=%d dq,dk,dv vs FD, overwrites garbage dqkv (err %.2e)", H, KV, eb);
        } else {
            // Central differences on 120 sampled elements of q, k and v.
            double worst = 0.0, scale = 0.0;
            for (size_t i = 0; i < nq; i++) scale = fmax(scale, fabs(dqkv[i]));
            for (int t = 0; t < 120; t++) {
                size_t i = (size_t)(rng_unif() * (double)nq) % nq;
                double x0 = c.x[i], hstep = 1e-6;
                c.x[i] = x0 + hstep;
                double lp = att_loss(&c);
                c.x[i] = x0 - hstep;
                double lm = att_loss(&c);
                c.x[i] = x0;
                worst = fmax(worst, fabs((lp - lm) / (2 * hstep) - dqkv[i]) / scale);
            }
            CHECK(worst < TOL_BWD, "attention_backward S=%d (3 tiles, masked tiles skipped) vs FD on 120 elements (err %.2e)", S, worst);
        }
        tfree_all();
    }

    // Blocks: a two-rank zigzag split (context parallelism) simulated in one process.
    // Rank r holds chunks r and 3-r of a sequence of 4C tokens; its queries fold in
    // its own key/value block and the other rank's, in either order. Output, lse and
    // gradients must equal the full-sequence attention at those positions. C = 72:
    // a rank's block (144 keys) spans two key chunks (128), the second one across
    // the zigzag jump, and three query tiles (64).
    {
        int B = 2, C = 72, S = 4 * C, Sl = 2 * C, H = 4, KV = 2, hd = 8, W = (H + 2 * KV) * hd;
        size_t nq = (size_t)B * S * W, no = (size_t)B * S * H * hd;
        rng_seed(77);
        int *pos = positions(S);
        float *qkv = fnew(nq), *R = fnew(no), *scratch = fnew(attention_scratch_floats(hd));
        fill(qkv, nq, -2, 2);
        fill(R, no, -1, 1);
        float *full = fnew(no), *flse = fnew((size_t)B * H * S), *fm = fnew((size_t)B * H * S), *fl = fnew((size_t)B * H * S);
        float *fdq = fnew(nq), *frd = fnew((size_t)B * H * S);
        attention_forward(full, flse, fm, fl, qkv, pos, B, S, H, KV, hd, scratch);
        attention_backward(fdq, frd, R, qkv, full, flse, pos, B, S, H, KV, hd, scratch);
        int lpos[2][144];  // (2, Sl)
        float *lq[2], *lR[2];  // per rank: (B*Sl, W) and (B*Sl, H*hd)
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < C; i++) {
                lpos[r][i] = r * C + i;
                lpos[r][C + i] = (3 - r) * C + i;
            }
            lq[r] = fnew((size_t)B * Sl * W);
            lR[r] = fnew((size_t)B * Sl * H * hd);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    memcpy(lq[r] + ((size_t)b * Sl + i) * W, qkv + ((size_t)b * S + lpos[r][i]) * W, sizeof(float) * W);
                    memcpy(lR[r] + ((size_t)b * Sl + i) * H * hd, R + ((size_t)b * S + lpos[r][i]) * H * hd, sizeof(float) * H * hd);
                }
        }
        double ef = 0, eg = 0, fscale = 0, gscale = 0;
        float *dkv[2] = {fnew((size_t)B * Sl * W), fnew((size_t)B * Sl * W)};  // each rank's k/v gradient
        for (int r = 0; r < 2; r++) {
            size_t nr = (size_t)B * H * Sl;
            float *o = fnew((size_t)B * Sl * H * hd), *lse = fnew(nr), *m = fnew(nr), *l = fnew(nr);
            attention_block_init(o, m, l, B, Sl, H, hd);
            for (int j = 0; j < 2; j++) {  // own block first, then the other rank's (ring order)
                int src = (r + j) % 2;
                attention_block_forward(o, m, l, lq[r], W, lq[src], W, H * hd, (H + KV) * hd,
                                        lpos[r], lpos[src], B, Sl, Sl, H, KV, hd, scratch);
            }
            attention_block_finish(o, lse, m, l, B, Sl, H, hd);
            float *rd = fnew(nr), *dq = fnew((size_t)B * Sl * W);
            attention_rowdot(rd, lR[r], o, B, Sl, H, hd);
            for (int j = 0; j < 2; j++) {
                int src = (r + j) % 2;
                attention_block_backward(dq, dkv[src], lq[r], W, lq[src], W, H * hd, (H + KV) * hd,
                                         lR[r], lse, rd, lpos[r], lpos[src], B, Sl, Sl, H, KV, hd, scratch);
            }
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    const float *want = full + ((size_t)b * S + lpos[r][i]) * H * hd;
                    const float *got = o + ((size_t)b * Sl + i) * H * hd;
                    for (int d = 0; d < H * hd; d++) {
                        ef = fmax(ef, fabs(want[d] - got[d]));
                        fscale = fmax(fscale, fabs(want[d]));
                    }
                    const float *wq = fdq + ((size_t)b * S + lpos[r][i]) * W, *gq = dq + ((size_t)b * Sl + i) * W;
                    for (int d = 0; d < H * hd; d++) {
                        eg = fmax(eg, fabs(wq[d] - gq[d]));
                        gscale = fmax(gscale, fabs(wq[d]));
                    }
                }
        }
        for (int r = 0; r < 2; r++)  // key/value gradients gathered from both ranks' queries
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    const float *wk = fdq + ((size_t)b * S + lpos[r][i]) * W, *gk = dkv[r] + ((size_t)b * Sl + i) * W;
                    for (int d = H * hd; d < W; d++) eg = fmax(eg, fabs(wk[d] - gk[d]));
                }
        CHECK(ef / fscale < TOL_FWD, "ring blocks (zigzag, 2 ranks) merge to the full attention output (err %.2e)", ef / fscale);
        CHECK(eg / gscale < TOL_FWD, "ring blocks: dq and the accumulated dk, dv equal the full gradient (err %.2e)", eg / gscale);
        tfree_all();
    }

    // composite: rope -> attention, chained kernel backward (attention then rope)
    // vs FD through the double rope + attention, with respect to the pre-RoPE qkv.
    int B = 2, S = 6, H = 4, KV = 2, hd = 8, half = hd / 2;
    size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    rng_seed(60);
    int *pos = positions(S);
    float *x = fnew(nq), *R = fnew(no), *cs = fnew((size_t)S * half), *sn = fnew((size_t)S * half);
    fill(x, nq, -2, 2);
    fill(R, no, -1, 1);
    rope_tables_theta(cs, sn, S, hd, 100.0, 2);
    float *q = fcopy(x, nq), *out = fnew(no), *lse = fnew(nr), *m = fnew(nr), *l = fnew(nr), *dq = fnew(nq);
    float *scr = fnew(attention_scratch_floats(hd));
    rope_forward(q, cs, sn, B, S, H, KV, hd);
    attention_forward(out, lse, m, l, q, pos, B, S, H, KV, hd, scr);
    attention_backward(dq, m, R, q, out, lse, pos, B, S, H, KV, hd, scr);
    rope_backward(dq, cs, sn, B, S, H, KV, hd);
    att_ctx c = {to_d(x, nq), dnew(nq), dnew(no), to_d(R, no), to_d(cs, (size_t)S * half),
                 to_d(sn, (size_t)S * half), B, S, H, KV, hd, 1};
    double *ref = dnew(no);
    memcpy(c.tmp, c.x, nq * sizeof(double));
    rope_d(c.tmp, c.cs, c.sn, B, S, H, KV, hd);
    attention_d(ref, NULL, c.tmp, B, S, H, KV, hd);
    double e = nerr_f(out, ref, no);
    CHECK(e < TOL_FWD, "rope + attention forward vs double composite (err %.2e)", e);
    double *g = dnew(nq);
    fd_grad(att_loss, &c, c.x, nq, g);
    double eb = nerr_f(dq, g, nq);
    CHECK(eb < TOL_BWD, "attention_backward then rope_backward vs FD of rope+attention (err %.2e)", eb);
    tfree_all();
}

int main(void) {
    ops_set_threads(2);
    test_rope();
    test_rope_frequencies();
    test_attention();
    return check_summary();
}

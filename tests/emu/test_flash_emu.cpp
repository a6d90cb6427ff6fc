// tests/emu/test_flash_emu.cpp — the tensor-core attention kernels, both families:
// src/ops/flash_attention.cuh (WMMA, "wmma") and src/ops/flash_mma.cuh (mma.sync
// with the scores in registers, "mma"), run on the CPU under tests/emu/cuda_emu.h,
// against a naive fp64 attention: forward, the ring's block-by-block folding
// (Sk != Sq, zigzag positions, rows that see no key), and the backward's
// accumulation into dq and dkv, at every head dimension each family takes, with
// rows both 16-byte aligned (the mma kernels' 128-bit loads) and not. The two
// families must also agree with each other, and each be bit-identical run to run.
//
// Tolerances. The reference reads the same bf16-rounded Q, K, V and dO as the
// kernels, so what is left is the rounding of P and dS to bf16 (relative error at
// most 2^-9 each) and fp32 sums: a few 1e-3 of the largest output. The checks
// allow 1e-2 (max-norm, relative to the largest reference value); the
// measured figures are printed beside them. A second comparison, with the
// unrounded inputs, must show a difference (the kernels do round) and gives the
// figure tests/gpu/gpu_ops.c allows between the GPU kernels and the CPU's fp32 ops.
#include "cuda_emu.h"
#include "ops/flash_attention.cuh"
#include "ops/flash_mma.cuh"
#include "../unit/check.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>


static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand() {  // uniform in [-1, 1)
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 0x2545f4914f6cdd1dull) >> 40) / (float)(1u << 23) - 1.0f;
}
static std::vector<float> random_vec(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto &x : v) x = scale * urand();
    return v;
}
static std::vector<float> rounded(const std::vector<float> &v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
    return r;
}
// max |a - b| / max |b|
static double rel_err(const std::vector<float> &a, const std::vector<double> &b) {
    double d = 0, s = 0;
    for (size_t i = 0; i < a.size(); i++) {
        d = std::max(d, std::fabs((double)a[i] - b[i]));
        s = std::max(s, std::fabs(b[i]));
    }
    return s > 0 ? d / s : d;
}

// A launch the emulator refused (its configuration, or shared memory the kernel
// was not allowed) is fatal: the figures after it would mean nothing. Then wait
// for the queued kernels (the emulator runs them when the host waits).
static void launched_ok(const char *name, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("FAIL %s: the %s launch failed: %s\n", name, what, cudaGetErrorString(e));
        exit(1);
    }
}

// One attention problem: queries of one block, keys and values of another (as a
// ring step sees them), positions for the mask.
struct Problem {
    int B, Sq, Sk, H, KV, hd, ldq, ldkv, koff, voff;
    std::vector<float> q, kv, dout;  // (B*Sq, ldq), (B*Sk, ldkv), (B*Sq, H*hd)
    std::vector<int> qpos, kpos;
};

// Naive attention in fp64 over (q, kv) as given: out (B*Sq, H*hd), lse (B*H*Sq);
// with dout, also rowdot = sum dout*out and dq (B*Sq, H*hd), dk, dv (B*Sk, KV*hd).
struct Ref {
    std::vector<double> out, lse, rowdot, dq, dk, dv;
};
static Ref reference(const Problem &p, const std::vector<float> &q, const std::vector<float> &kv,
                     const std::vector<float> &dout) {
    const int hd = p.hd, grp = p.H / p.KV;
    const double scale = 1.0 / std::sqrt((double)hd);
    Ref r;
    r.out.assign((size_t)p.B * p.Sq * p.H * hd, 0.0);
    r.lse.assign((size_t)p.B * p.H * p.Sq, -INFINITY);
    r.rowdot.assign(r.lse.size(), 0.0);
    r.dq.assign(r.out.size(), 0.0);
    r.dk.assign((size_t)p.B * p.Sk * p.KV * hd, 0.0);
    r.dv.assign(r.dk.size(), 0.0);
    auto Q = [&](int b, int i, int h, int d) { return (double)q[((size_t)b * p.Sq + i) * p.ldq + h * hd + d]; };
    auto K = [&](int b, int j, int g, int d) { return (double)kv[((size_t)b * p.Sk + j) * p.ldkv + p.koff + g * hd + d]; };
    auto V = [&](int b, int j, int g, int d) { return (double)kv[((size_t)b * p.Sk + j) * p.ldkv + p.voff + g * hd + d]; };
    std::vector<double> s(p.Sk), dp(p.Sk);
    for (int b = 0; b < p.B; b++)
        for (int h = 0; h < p.H; h++)
            for (int i = 0; i < p.Sq; i++) {
                const int g = h / grp;
                const size_t row = ((size_t)b * p.H + h) * p.Sq + i, o0 = ((size_t)b * p.Sq + i) * p.H * hd + h * hd;
                double mx = -INFINITY;
                for (int j = 0; j < p.Sk; j++) {
                    if (p.kpos[j] > p.qpos[i]) continue;
                    double acc = 0;
                    for (int d = 0; d < hd; d++) acc += Q(b, i, h, d) * K(b, j, g, d);
                    s[j] = acc * scale;
                    mx = std::max(mx, s[j]);
                }
                if (mx == -INFINITY) continue;  // the row sees no key: out = 0, lse = -inf
                double sum = 0;
                for (int j = 0; j < p.Sk; j++)
                    if (p.kpos[j] <= p.qpos[i]) sum += std::exp(s[j] - mx);
                const double lse = mx + std::log(sum);
                r.lse[row] = lse;
                for (int j = 0; j < p.Sk; j++)
                    if (p.kpos[j] <= p.qpos[i])
                        for (int d = 0; d < hd; d++) r.out[o0 + d] += std::exp(s[j] - lse) * V(b, j, g, d);
                if (dout.empty()) continue;
                double rd = 0;
                for (int d = 0; d < hd; d++) rd += (double)dout[o0 + d] * r.out[o0 + d];
                r.rowdot[row] = rd;
                for (int j = 0; j < p.Sk; j++) {
                    if (p.kpos[j] > p.qpos[i]) continue;
                    double dpj = 0;
                    for (int d = 0; d < hd; d++) dpj += (double)dout[o0 + d] * V(b, j, g, d);
                    const double P = std::exp(s[j] - lse), dS = P * (dpj - rd) * scale;
                    const size_t k0 = ((size_t)b * p.Sk + j) * p.KV * hd + g * hd;
                    for (int d = 0; d < hd; d++) {
                        r.dq[o0 + d] += dS * K(b, j, g, d);
                        r.dk[k0 + d] += dS * Q(b, i, h, d);
                        r.dv[k0 + d] += P * dout[o0 + d];
                    }
                }
            }
    return r;
}

// ops.h's attention_block_init and _finish on the host (the CUDA build has them as
// plain kernels, compared with the CPU in tests/gpu/gpu_ops.c).
static void block_init(std::vector<float> &o, std::vector<float> &m, std::vector<float> &l) {
    std::fill(o.begin(), o.end(), 0.0f);
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.0f);
}
static void block_finish(const Problem &p, std::vector<float> &o, std::vector<float> &lse, const std::vector<float> &m,
                         const std::vector<float> &l) {
    for (int b = 0; b < p.B; b++)
        for (int h = 0; h < p.H; h++)
            for (int i = 0; i < p.Sq; i++) {
                const size_t row = ((size_t)b * p.H + h) * p.Sq + i;
                const float inv = l[row] > 0 ? 1.0f / l[row] : 0.0f;
                for (int d = 0; d < p.hd; d++) o[((size_t)b * p.Sq + i) * p.H * p.hd + h * p.hd + d] *= inv;
                lse[row] = l[row] > 0 ? m[row] + std::log(l[row]) : -INFINITY;
            }
}

static Problem make(int B, int Sq, int Sk, int H, int KV, int hd, bool packed) {
    Problem p{B, Sq, Sk, H, KV, hd, 0, 0, 0, 0, {}, {}, {}, {}, {}};
    if (packed) {  // self-attention over qkv (B*S, (H + 2 KV) hd), as attention_forward passes it
        p.ldq = p.ldkv = (H + 2 * KV) * hd + 8;  // padded rows: the kernels honour ld
        p.koff = H * hd;
        p.voff = (H + KV) * hd;
    } else {  // a separate K/V block (a ring step), K and V interleaved per row
        p.ldq = H * hd + 3;
        p.ldkv = 2 * KV * hd + 5;
        p.koff = 1;
        p.voff = 1 + KV * hd;
    }
    p.q = random_vec((size_t)B * Sq * p.ldq, 1.5f);
    p.kv = packed ? p.q : random_vec((size_t)B * Sk * p.ldkv, 1.5f);
    p.dout = random_vec((size_t)B * Sq * H * hd, 1.0f);
    return p;
}

enum Family { WMMA, MMA };
static const char *family_name(Family f) { return f == WMMA ? "wmma" : "mma"; }
static void fwd(Family f, float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff,
                int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd) {
    if (f == WMMA) flash::forward(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV, hd);
    else flash_mma::forward(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV, hd);
}
static void bwd(Family f, float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                const float *dout, const float *lse, const float *rowdot, const int *qpos, const int *kpos, int B,
                int Sq, int Sk, int H, int KV, int hd) {
    if (f == WMMA)
        flash::backward(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq, Sk, H, KV, hd);
    else flash_mma::backward(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq, Sk, H, KV, hd,
                             true);
}

// What a family's run gives: the forward's out and lse, the backward's increments
// of dq, dk and dv (in the reference's layouts).
struct Result {
    std::vector<float> out, lse, dq, dk, dv;
};

// Forward in `splits` key blocks folded in turn (one block: attention_forward),
// then the backward over each block (+= into prefilled dq and dkv); both against
// the reference.
static Result run_family(Family fam, const char *case_name, const Problem &p, int splits) {
    char name[200];
    snprintf(name, sizeof name, "%s: %s", family_name(fam), case_name);
    const int hd = p.hd;
    std::vector<float> qr = rounded(p.q), kvr = rounded(p.kv), dor = rounded(p.dout);
    const Ref ref = reference(p, qr, kvr, dor), unrounded = reference(p, p.q, p.kv, p.dout);

    std::vector<float> o((size_t)p.B * p.Sq * p.H * hd), m((size_t)p.B * p.H * p.Sq), l(m.size()), lse(m.size());
    block_init(o, m, l);
    const int per = (p.Sk + splits - 1) / splits;
    for (int j0 = 0; j0 < p.Sk; j0 += per) {  // each block's keys as their own (B*n, ldkv) array
        const int n = std::min(per, p.Sk - j0);
        std::vector<float> blk((size_t)p.B * n * p.ldkv);
        for (int b = 0; b < p.B; b++)
            std::copy_n(&p.kv[((size_t)b * p.Sk + j0) * p.ldkv], (size_t)n * p.ldkv, &blk[(size_t)b * n * p.ldkv]);
        fwd(fam, o.data(), m.data(), l.data(), p.q.data(), p.ldq, blk.data(), p.ldkv, p.koff, p.voff, p.qpos.data(),
            p.kpos.data() + j0, p.B, p.Sq, n, p.H, p.KV, hd);
        launched_ok(name, "forward");
    }
    block_finish(p, o, lse, m, l);
    if (fam == MMA && splits == 1) {  // the one-kernel forward (attention_forward's): the same bits
        std::vector<float> ow(o.size()), lw(lse.size());
        flash_mma::forward_whole(ow.data(), lw.data(), p.q.data(), p.ldq, p.kv.data(), p.ldkv, p.koff, p.voff,
                                 p.qpos.data(), p.kpos.data(), p.B, p.Sq, p.Sk, p.H, p.KV, hd);
        launched_ok(name, "whole forward");
        CHECK(!memcmp(ow.data(), o.data(), o.size() * sizeof(float)) &&
                  !memcmp(lw.data(), lse.data(), lse.size() * sizeof(float)),
              "%s: the one-kernel forward gives init + block + finish's bits (out and lse)", name);
    }
    const double eo = rel_err(o, ref.out), eo_fp32 = rel_err(o, unrounded.out);
    CHECK(eo < 1e-2, "%s: forward out within 1e-2 of fp64 on bf16 inputs (%.2e)", name, eo);
    CHECK(eo_fp32 > 1e-4, "%s: forward out differs from the unrounded inputs' (%.2e): the kernel rounds", name,
          eo_fp32);
    double e_lse = 0;
    bool masked_ok = true;
    for (size_t i = 0; i < lse.size(); i++) {
        if (std::isinf(ref.lse[i])) masked_ok = masked_ok && std::isinf(lse[i]) && lse[i] < 0;
        else e_lse = std::max(e_lse, std::fabs(lse[i] - ref.lse[i]));
    }
    CHECK(e_lse < 1e-2 && masked_ok, "%s: lse within 1e-2 absolute (%.2e), -inf on rows that see no key", name, e_lse);

    // Backward with the reference's lse and rowdot, into prefilled dq and dkv (+=).
    std::vector<float> lse_f(ref.lse.begin(), ref.lse.end()), rd_f(ref.rowdot.begin(), ref.rowdot.end());
    std::vector<float> dq0 = random_vec((size_t)p.B * p.Sq * p.ldq, 1.0f), dq = dq0;
    std::vector<float> dkv0 = random_vec((size_t)p.B * p.Sk * p.ldkv, 1.0f), dkv = dkv0;
    for (int j0 = 0; j0 < p.Sk; j0 += per) {
        const int n = std::min(per, p.Sk - j0);
        std::vector<float> blk((size_t)p.B * n * p.ldkv), dblk((size_t)p.B * n * p.ldkv);
        for (int b = 0; b < p.B; b++) {
            std::copy_n(&p.kv[((size_t)b * p.Sk + j0) * p.ldkv], (size_t)n * p.ldkv, &blk[(size_t)b * n * p.ldkv]);
            std::copy_n(&dkv[((size_t)b * p.Sk + j0) * p.ldkv], (size_t)n * p.ldkv, &dblk[(size_t)b * n * p.ldkv]);
        }
        const bool self = splits == 1 && p.kv == p.q;  // attention_backward: dq and dkv are one buffer
        bwd(fam, dq.data(), self ? dq.data() : dblk.data(), p.q.data(), p.ldq, self ? p.q.data() : blk.data(), p.ldkv,
            p.koff, p.voff, p.dout.data(), lse_f.data(), rd_f.data(), p.qpos.data(), p.kpos.data() + j0, p.B, p.Sq, n,
            p.H, p.KV, hd);
        launched_ok(name, "backward");
        if (self) dkv = dq;
        else
            for (int b = 0; b < p.B; b++)
                std::copy_n(&dblk[(size_t)b * n * p.ldkv], (size_t)n * p.ldkv, &dkv[((size_t)b * p.Sk + j0) * p.ldkv]);
    }
    const bool self = splits == 1 && p.kv == p.q;
    std::vector<float> gq, gk, gv;  // the increments, in the reference's layouts
    std::vector<double> rq, rk, rv;
    for (int b = 0; b < p.B; b++)
        for (int i = 0; i < p.Sq; i++)
            for (int c = 0; c < p.H * hd; c++) {
                const size_t at = ((size_t)b * p.Sq + i) * p.ldq + c;
                gq.push_back(dq[at] - dq0[at]);
                rq.push_back(ref.dq[((size_t)b * p.Sq + i) * p.H * hd + c]);
            }
    for (int b = 0; b < p.B; b++)
        for (int j = 0; j < p.Sk; j++)
            for (int c = 0; c < p.KV * hd; c++) {
                const size_t row = ((size_t)b * p.Sk + j) * p.ldkv, r0 = ((size_t)b * p.Sk + j) * p.KV * hd + c;
                const std::vector<float> &base = self ? dq0 : dkv0;
                gk.push_back(dkv[row + p.koff + c] - base[row + p.koff + c]);
                gv.push_back(dkv[row + p.voff + c] - base[row + p.voff + c]);
                rk.push_back(ref.dk[r0]);
                rv.push_back(ref.dv[r0]);
            }
    const double e1 = rel_err(gq, rq), e2 = rel_err(gk, rk), e3 = rel_err(gv, rv);
    CHECK(e1 < 1e-2 && e2 < 1e-2 && e3 < 1e-2, "%s: backward dq, dk, dv (+=) within 1e-2 of fp64 (%.2e %.2e %.2e)", name,
          e1, e2, e3);
    const double u = std::max({rel_err(o, unrounded.out), rel_err(gq, unrounded.dq), rel_err(gk, unrounded.dk),
                               rel_err(gv, unrounded.dv)});
    printf("  %s: largest difference from the unrounded inputs' fp64 attention: %.2e\n", name, u);
    return Result{o, lse, gq, gk, gv};
}

static double max_rel(const std::vector<float> &a, const std::vector<float> &b) {
    std::vector<double> bd(b.begin(), b.end());
    for (auto &x : bd)
        if (std::isinf(x)) x = 0;  // lse of rows that see no key (both -inf: checked above)
    std::vector<float> ad(a);
    for (auto &x : ad)
        if (std::isinf(x)) x = 0;
    return rel_err(ad, bd);
}
static bool same_bits(const Result &a, const Result &b) {
    auto eq = [](const std::vector<float> &x, const std::vector<float> &y) {
        return x.size() == y.size() && memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    return eq(a.out, b.out) && eq(a.lse, b.lse) && eq(a.dq, b.dq) && eq(a.dk, b.dk) && eq(a.dv, b.dv);
}

// The case under each family that takes its head dimension; where both do, they
// agree within 1e-2 (each is within 1e-2 of fp64; they differ by where they round
// P and dS and by their sums' order). The mma family runs twice: the same bits.
static void run_case(const char *name, const Problem &p, int splits) {
    const bool wmma = flash::head_dim_ok(p.hd), mma = flash_mma::head_dim_ok(p.hd);
    Result rw, rm;
    if (wmma) rw = run_family(WMMA, name, p, splits);
    if (mma) {
        const uint64_t seed = rng;  // the same prefilled dq and dkv both times
        rm = run_family(MMA, name, p, splits);
        rng = seed;
        const Result again = run_family(MMA, name, p, splits);
        CHECK(same_bits(rm, again), "mma: %s: twice, bit-identical", name);
    }
    if (wmma && mma) {
        const double e = std::max({max_rel(rm.out, rw.out), max_rel(rm.lse, rw.lse), max_rel(rm.dq, rw.dq),
                                   max_rel(rm.dk, rw.dk), max_rel(rm.dv, rw.dv)});
        CHECK(e < 1e-2, "%s: the mma and wmma kernels agree within 1e-2 (%.2e)", name, e);
    }
}

static void on_alarm(int) {
    static const char msg[] = "FAIL test_flash_emu: timed out (an emulated kernel that never ends?)\n";
    (void)!write(1, msg, sizeof msg - 1);
    _exit(1);
}

int main() {
    signal(SIGALRM, on_alarm);
    alarm(600);
    {  // causal self-attention, GQA 4:2, three query tiles with a partial one
        Problem p = make(2, 150, 150, 4, 2, 64, true);
        for (int i = 0; i < 150; i++) p.qpos.push_back(i), p.kpos.push_back(i);
        run_case("hd 64, S 150, GQA 4/2, causal", p, 1);
    }
    {  // the largest head dimension, multi-query attention
        Problem p = make(1, 70, 70, 2, 1, 128, true);
        for (int i = 0; i < 70; i++) p.qpos.push_back(i), p.kpos.push_back(i);
        run_case("hd 128, S 70, MQA 2/1, causal", p, 1);
    }
    {  // a ring step's view: zigzag query positions, keys from two blocks of another
       // rank (Sk != Sq), the first query rows before every key (they see nothing)
        Problem p = make(2, 96, 136, 4, 4, 32, false);
        for (int i = 0; i < 48; i++) p.qpos.push_back(10 + i);
        for (int i = 0; i < 48; i++) p.qpos.push_back(200 + i);
        for (int j = 0; j < 68; j++) p.kpos.push_back(20 + j);
        for (int j = 0; j < 68; j++) p.kpos.push_back(150 + j);
        run_case("hd 32, ring blocks, zigzag, Sq 96 / Sk 136, masked rows", p, 2);
    }
    {  // every key visible to whole tiles (the kernels' unmasked path), rows not
       // 16-byte aligned, a partial key tile, two key blocks
        Problem p = make(2, 128, 100, 4, 2, 64, false);
        for (int i = 0; i < 128; i++) p.qpos.push_back(1000);
        for (int j = 0; j < 100; j++) p.kpos.push_back(j);
        run_case("hd 64, every key visible, Sq 128 / Sk 100, unaligned rows", p, 2);
    }
    {  // the smallest head dimension, full (non-causal) visibility, three key blocks
        Problem p = make(1, 40, 90, 2, 1, 16, false);
        for (int i = 0; i < 40; i++) p.qpos.push_back(1000);
        for (int j = 0; j < 90; j++) p.kpos.push_back(j);
        run_case("hd 16, every key visible, three key blocks", p, 3);
    }
    return check_summary();
}

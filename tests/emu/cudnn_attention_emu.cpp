// tests/emu/cudnn_attention_emu.cpp — ops/cudnn_attention.h in the emulated CUDA
// build. cuDNN is a closed library of GPU kernels the emulator cannot run, so this
// stands in for it, as tests/emu/cublaslt_emu.h stands in for cuBLASLt: what its
// fused causal attention computes, by the definition, on the host, queued on the
// emulated stream like a kernel. bf16 inputs widened exactly, the scores, softmax
// and sums in fp32, the output and the q|k|v gradients rounded to bf16 once (to
// nearest, ties to even), the stats (B, H, S) the natural log-sum-exp of the
// scaled scores: so ops/attention_cuda.cu's glue around cuDNN (the bf16 copies,
// the views into q|k|v, the parts of the work buffer, the widening, the positions
// check, training.attention's switch) runs in CI. The real library's plans and
// kernels run on a real GPU only (tests/gpu/gpu_ops.c, FEMTOTRON_TEST_CUDNN=require).
#include "ops/cudnn_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_runtime.h"  // tests/emu/include: the emulated stream

namespace {

float widen(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t round_bf16(float f) {  // to nearest, ties to even (finite values)
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

struct Dims {
    int B, S, H, KV, hd, ld, A;
    // Element (b, token i, column c) of a (B*S, width) buffer.
    size_t at(int b, int i, int width, int c) const { return ((size_t)b * S + i) * width + c; }
};

// The scaled scores of query row (b, h, i) against keys 0..i, into s (i + 1).
void scores(const Dims &d, const uint16_t *qkv, int b, int h, int i, float scale, std::vector<float> &s) {
    const int g = h / (d.H / d.KV), qc = h * d.hd, kc = d.H * d.hd + g * d.hd;
    s.assign((size_t)i + 1, 0.0f);
    for (int j = 0; j <= i; j++) {
        float dot = 0.0f;
        for (int c = 0; c < d.hd; c++) dot += widen(qkv[d.at(b, i, d.ld, qc + c)]) * widen(qkv[d.at(b, j, d.ld, kc + c)]);
        s[j] = dot * scale;
    }
}

void forward(const Dims &d, uint16_t *o16, float *lse, const uint16_t *qkv) {
    const float scale = 1.0f / sqrtf((float)d.hd);
    std::vector<float> s, o((size_t)d.hd);
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++)
            for (int i = 0; i < d.S; i++) {
                scores(d, qkv, b, h, i, scale, s);
                float m = -INFINITY, l = 0.0f;
                for (float x : s) m = fmaxf(m, x);
                const int vc = (d.H + d.KV) * d.hd + (h / (d.H / d.KV)) * d.hd;
                o.assign((size_t)d.hd, 0.0f);
                for (int j = 0; j <= i; j++) {
                    const float p = expf(s[j] - m);
                    l += p;
                    for (int c = 0; c < d.hd; c++) o[c] += p * widen(qkv[d.at(b, j, d.ld, vc + c)]);
                }
                for (int c = 0; c < d.hd; c++) o16[d.at(b, i, d.A, h * d.hd + c)] = round_bf16(o[c] / l);
                lse[((size_t)b * d.H + h) * d.S + i] = m + logf(l);
            }
}

void backward(const Dims &d, uint16_t *dqkv16, const uint16_t *qkv, const uint16_t *o16, const uint16_t *do16,
              const float *lse) {
    const float scale = 1.0f / sqrtf((float)d.hd);
    std::vector<float> dqkv((size_t)d.B * d.S * d.ld, 0.0f), s;  // (B*S, ld) fp32 sums, rounded at the end
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++) {
            const int g = h / (d.H / d.KV), qc = h * d.hd, kc = d.H * d.hd + g * d.hd, vc = kc + d.KV * d.hd;
            for (int i = 0; i < d.S; i++) {
                scores(d, qkv, b, h, i, scale, s);
                float rowdot = 0.0f;  // sum over the head of dO * O
                for (int c = 0; c < d.hd; c++)
                    rowdot += widen(do16[d.at(b, i, d.A, qc + c)]) * widen(o16[d.at(b, i, d.A, qc + c)]);
                const float L = lse[((size_t)b * d.H + h) * d.S + i];
                for (int j = 0; j <= i; j++) {
                    const float p = expf(s[j] - L);
                    float dp = 0.0f;
                    for (int c = 0; c < d.hd; c++)
                        dp += widen(do16[d.at(b, i, d.A, qc + c)]) * widen(qkv[d.at(b, j, d.ld, vc + c)]);
                    const float ds = p * (dp - rowdot) * scale;
                    for (int c = 0; c < d.hd; c++) {
                        dqkv[d.at(b, i, d.ld, qc + c)] += ds * widen(qkv[d.at(b, j, d.ld, kc + c)]);
                        dqkv[d.at(b, j, d.ld, kc + c)] += ds * widen(qkv[d.at(b, i, d.ld, qc + c)]);
                        dqkv[d.at(b, j, d.ld, vc + c)] += p * widen(do16[d.at(b, i, d.A, qc + c)]);
                    }
                }
            }
        }
    for (size_t e = 0; e < dqkv.size(); e++) dqkv16[e] = round_bf16(dqkv[e]);
}

}  // namespace

extern "C" const char *cudnn_attention_load(void) { return nullptr; }
extern "C" long cudnn_attention_version(void) { return 0; }  // 0: the emulation, no library

// The workspace the real library asks for on Hopper, so the emulated run meets the
// reserve check of ops/attention_cuda.cu with sizes of the right order: the
// deterministic backward's dP in bf16 (queries padded to 64, keys to 128, as
// cudnn-frontend sizes it) and its fp32 row sums; the forward's stats-sized scratch.
namespace {
size_t pad(size_t x, size_t to) { return (x + to - 1) / to * to; }
size_t workspace_bytes(int backward, int B, int S, int H) {
    const size_t rows = (size_t)B * H * S * sizeof(float);
    return backward ? (size_t)B * H * pad((size_t)S, 64) * pad((size_t)S, 128) * 2 + rows : rows;
}
// cuDNN owns its workspace during the call and leaves garbage in it: scribbled
// over with NaN bytes first, so a workspace carved over one of the call's bf16
// copies (a layout error in the parts) corrupts the results the tests compare.
void scribble(void *workspace, size_t bytes) {
    if (bytes && !workspace) abort();  // a call given no workspace where cuDNN asks for one
    if (bytes) memset(workspace, 0xff, bytes);
}
}  // namespace

extern "C" size_t cudnn_attention_workspace(int backward, int B, int S, int H, int, int) {
    return workspace_bytes(backward, B, S, H);
}

extern "C" void cudnn_attention_forward(uint16_t *o16, float *lse, const uint16_t *qkv16, int B, int S, int H,
                                        int KV, int hd, void *workspace, void *stream) {
    const Dims d{B, S, H, KV, hd, (H + 2 * KV) * hd, H * hd};
    const size_t ws = workspace_bytes(0, B, S, H);
    emu::enqueue([=]() {
        scribble(workspace, ws);
        forward(d, o16, lse, qkv16);
    }, (cudaStream_t)stream);
}

extern "C" void cudnn_attention_backward(uint16_t *dqkv16, const uint16_t *qkv16, const uint16_t *o16,
                                         const uint16_t *do16, const float *lse, int B, int S, int H, int KV, int hd,
                                         void *workspace, void *stream) {
    const Dims d{B, S, H, KV, hd, (H + 2 * KV) * hd, H * hd};
    const size_t ws = workspace_bytes(1, B, S, H);
    emu::enqueue([=]() {
        scribble(workspace, ws);
        backward(d, dqkv16, qkv16, o16, do16, lse);
    }, (cudaStream_t)stream);
}

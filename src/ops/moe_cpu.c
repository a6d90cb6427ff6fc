// ops/moe_cpu.c — the routing kernels of the mixture-of-experts block (ops/ops.h,
// "mixture of experts"): router softmax and top-k, grouping by expert, the
// load-balancing statistics and loss, the router backward. Every loop is per token
// (or per sequence) with a fixed summation order, so results never depend on
// threads. Both builds run these on the host: the CUDA build over managed memory,
// each starting with ops_sync() (the device's queued ops on its buffers finish
// first; nothing to wait for on the CPU), because the model reads the grouping's
// expert starts on the host to size each expert's products (model/moe.c). The
// N*K*D data movement (dispatch, combine, their backwards) is
// ops/moe_dispatch_cpu.c on the CPU and ops/moe_dispatch_cuda.cu on the GPU.
#include <math.h>
#include <string.h>

#include "ops/ops.h"

void moe_route(float *probs, int32_t *sel, float *wts, int N, int E, int K) {
    ops_sync();
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *p = probs + (size_t)t * E;  // (E) logits in, probabilities out
        float mx = p[0];
        for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) p[e] *= inv;
        // Top-k by selection: the j-th pick is the largest probability not yet
        // taken; a strict > keeps the lower index on a tie.
        int32_t *s = sel + (size_t)t * K;
        double chosen = 0.0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= s[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            s[j] = best;
            chosen += p[best];
        }
        for (int j = 0; j < K; j++) wts[(size_t)t * K + j] = (float)(p[s[j]] / chosen);
    }
}

void moe_group(int32_t *start, int32_t *slot_of, int32_t *row_of, const int32_t *sel, int N, int E,
               int K) {
    ops_sync();
    // Counting sort of the N*K slots by expert, stable (tokens stay in order):
    // start[e + 1] counts expert e, a prefix sum makes it the first row of e + 1.
    const size_t n = (size_t)N * K;
    for (int e = 0; e <= E; e++) start[e] = 0;
    for (size_t q = 0; q < n; q++) start[sel[q] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    // Place each slot at its expert's cursor start[e] (advanced as it fills), which
    // leaves start[e] at the old start[e + 1]; shifting back restores the starts.
    for (size_t q = 0; q < n; q++) {
        const int32_t r = start[sel[q]]++;
        row_of[q] = r;
        slot_of[r] = (int32_t)q;
    }
    for (int e = E; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
}

void moe_route_stats(float *count, float *psum, const float *probs, const int32_t *sel, int B, int S,
                     int E, int K) {
    ops_sync();
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *c = count + (size_t)b * E, *ps = psum + (size_t)b * E;
        for (int s = 0; s < S; s++) {
            const size_t t = (size_t)b * S + s;
            for (int j = 0; j < K; j++) c[sel[t * K + j]] += 1.0f;
            for (int e = 0; e < E; e++) ps[e] += probs[t * E + e];
        }
    }
}

void moe_route_backward(float *dlogits, const float *probs, const int32_t *sel, const float *wts,
                        const float *dwts, const float *aux_g, int N, int S, int E, int K) {
    ops_sync();
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E;
        const int32_t *s = sel + (size_t)t * K;
        const float *w = wts + (size_t)t * K, *dw = dwts + (size_t)t * K;
        float *dl = dlogits + (size_t)t * E;  // dL/dprobs first, then dL/dlogits
        for (int e = 0; e < E; e++) dl[e] = aux_g ? aux_g[(size_t)(t / S) * E + e] : 0.0f;
        // w_j = p_j / Z with Z = sum_i p_i over the chosen: dp_j = (dw_j - sum_i dw_i w_i) / Z
        double z = 0.0, corr = 0.0;
        for (int j = 0; j < K; j++) {
            z += p[s[j]];
            corr += (double)dw[j] * w[j];
        }
        for (int j = 0; j < K; j++) dl[s[j]] += (float)((dw[j] - corr) / z);
        double dot = 0.0;  // softmax backward: dlogit_e = p_e (dp_e - sum p dp)
        for (int e = 0; e < E; e++) dot += (double)p[e] * dl[e];
        for (int e = 0; e < E; e++) dl[e] = p[e] * (float)(dl[e] - dot);
    }
}

double moe_aux_loss(float *aux_g, const float *count, const float *psum, int B, int E, double T,
                    float g_scale) {
    ops_sync();
    double total = 0.0;
    for (int b = 0; b < B; b++) {
        double aux = 0.0;
        for (int e = 0; e < E; e++) {
            const size_t i = (size_t)b * E + e;
            aux += (count[i] / T) * (psum[i] / T);
            if (aux_g) aux_g[i] = (float)(g_scale * E * count[i] / (T * T));
        }
        total += E * aux;
    }
    return total;
}

// gen/kv_attention.c — attention over the key/value cache (see kv_attention.h).
#include "gen/kv_attention.h"

#include <math.h>
#include <omp.h>
#include <string.h>

void kv_attention(float *out, const float *q, int q_stride, const float *k_cache,
                  const float *v_cache, int pos0, int n, int H, int KV, int hd, float *scratch) {
    const int kv_row = KV * hd, group = H / KV, span = pos0 + n;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < H; h++) {
            float *s = scratch + (size_t)omp_get_thread_num() * (size_t)span;  // (pos0+t+1)
            const float *qh = q + (size_t)t * q_stride + (size_t)h * hd;
            const int g = h / group, last = pos0 + t;
            float mx = -INFINITY;
            for (int j = 0; j <= last; j++) {
                const float *kj = k_cache + (size_t)j * kv_row + (size_t)g * hd;
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qh[d] * kj[d];
                s[j] = dot * scale;
                if (s[j] > mx) mx = s[j];
            }
            float sum = 0.0f;
            for (int j = 0; j <= last; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            float *o = out + (size_t)t * H * hd + (size_t)h * hd;  // (hd)
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int j = 0; j <= last; j++) {
                const float p = s[j] / sum;
                const float *vj = v_cache + (size_t)j * kv_row + (size_t)g * hd;
                for (int d = 0; d < hd; d++) o[d] += p * vj[d];
            }
        }
    }
}

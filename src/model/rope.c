// model/rope.c — RoPE frequencies: plain, linear and llama3 scaling (model/rope.h).
#include "model/rope.h"

#include <math.h>

#include "util.h"

void rope_plain_frequencies(int hd, double theta, double *freq) {
    for (int i = 0; i < hd / 2; i++) freq[i] = pow(theta, -2.0 * i / hd);
}

void rope_frequencies(const ModelConfig *mc, int hd, double *freq) {
    rope_plain_frequencies(hd, mc->rope_theta, freq);
    const double factor = mc->rope_factor;
    switch (mc->rope_type) {
        case ROPE_DEFAULT:
            return;
        case ROPE_LINEAR:
            for (int i = 0; i < hd / 2; i++) freq[i] /= factor;
            return;
        case ROPE_LLAMA3: {
            const double L = mc->rope_original_max_position_embeddings;
            const double lo = mc->rope_low_freq_factor, hi = mc->rope_high_freq_factor;
            const double w_lo = L / lo, w_hi = L / hi;  // wavelengths bounding the blend
            for (int i = 0; i < hd / 2; i++) {
                const double w = 2.0 * FT_PI / freq[i];
                if (w < w_hi) continue;  // high frequency: kept
                if (w > w_lo) {          // low frequency: interpolated by factor
                    freq[i] /= factor;
                    continue;
                }
                const double s = (L / w - lo) / (hi - lo);  // smooth blend in between
                freq[i] = (1.0 - s) * freq[i] / factor + s * freq[i];
            }
            return;
        }
    }
    die("internal: unknown RoPE type %d", (int)mc->rope_type);
}

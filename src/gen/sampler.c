// gen/sampler.c — temperature, top-k and top-p sampling (rules in sampler.h).
#include "gen/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "model/init.h"
#include "util.h"

void sampler_init(Sampler *s, int V, const uint8_t *allowed, float temperature, int top_k,
                  float top_p, uint64_t seed) {
    *s = (Sampler){.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed,
                   .V = V, .allowed = allowed};
    s->prob = xmalloc((size_t)V * sizeof(float), "sampler probabilities");
    s->order = xmalloc((size_t)V * sizeof(int32_t), "sampler order");
}

void sampler_free(Sampler *s) {
    free(s->prob);
    free(s->order);
}

static const float *sort_key;  // qsort has no context argument
static int by_prob_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_key[i] != sort_key[j]) return sort_key[i] > sort_key[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

int32_t sampler_next(Sampler *s, const float *logits, uint64_t step) {
    const int V = s->V;
    int32_t best = -1;
    for (int i = 0; i < V; i++)
        if (s->allowed[i] && (best < 0 || logits[i] > logits[best])) best = i;
    if (best < 0) die("generate: no token of the vocabulary can be drawn");
    if (s->temperature <= 0) return best;

    // Softmax of logits / temperature over the allowed ids (max subtracted).
    double total = 0;
    const float mx = logits[best];
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (!s->allowed[i]) {
            s->prob[i] = 0;
            continue;
        }
        s->prob[i] = expf((logits[i] - mx) / s->temperature);
        total += s->prob[i];
        s->order[n++] = i;
    }
    if (s->top_k > 0 || s->top_p < 1) {
        sort_key = s->prob;
        qsort(s->order, (size_t)n, sizeof(int32_t), by_prob_desc);
        int keep = n;
        if (s->top_k > 0 && s->top_k < n) {
            keep = s->top_k;  // ties with the k-th are kept, as torch.topk's threshold does
            while (keep < n && s->prob[s->order[keep]] == s->prob[s->order[s->top_k - 1]]) keep++;
        }
        if (s->top_p < 1) {
            double kept_total = 0;
            for (int r = 0; r < keep; r++) kept_total += s->prob[s->order[r]];
            double above = 0;
            int r = 0;
            while (r < keep && above < s->top_p * kept_total) above += s->prob[s->order[r++]];
            keep = r > 0 ? r : 1;
        }
        for (int r = keep; r < n; r++) s->prob[s->order[r]] = 0;
        total = 0;
        for (int r = 0; r < keep; r++) total += s->prob[s->order[r]];
    }
    double u = (double)(init_random_u64(s->seed, "generate", 0, step) >> 11) * 0x1.0p-53;
    double target = u * total, cum = 0;
    int32_t last = best;
    for (int i = 0; i < V; i++) {
        if (s->prob[i] <= 0) continue;
        cum += s->prob[i];
        last = i;
        if (cum > target) return i;
    }
    return last;  // rounding left the target past the end
}

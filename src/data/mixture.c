// data/mixture.c — the weighted mixture of token datasets (data/mixture.h): the
// blending rule, its cursor, and one tokenizer across the sources.
#include "data/mixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepared.h"
#include "util.h"

static void cursor_reset(MixtureCursor *c, int n) {
    c->pos = 0;
    memset(c->count, 0, (size_t)n * sizeof *c->count);
}

// The source of position c->pos under the rule; advances the cursor past it.
static int cursor_step(MixtureCursor *c, const double *w, int n) {
    const double next = (double)(c->pos + 1);
    int best = 0;
    double best_deficit = w[0] * next - (double)c->count[0];
    for (int k = 1; k < n; k++) {
        double d = w[k] * next - (double)c->count[k];
        if (d > best_deficit) {
            best = k;
            best_deficit = d;
        }
    }
    c->count[best]++;
    c->pos++;
    return best;
}

// Walk c to position p (from 0 when p lies behind it).
static void cursor_seek(MixtureCursor *c, const double *w, int n, uint64_t p) {
    if (p < c->pos) cursor_reset(c, n);
    while (c->pos < p) cursor_step(c, w, n);
}

// Sources made by `femtotron prepare` must share one tokenizer: mixing ids of two
// vocabularies would train on nonsense without a word.
static void check_one_tokenizer(const DataMixture *m, const char *key) {
    PreparedInfo first, info;
    int first_k = -1;
    char *first_tok = NULL;
    for (int k = 0; k < m->n; k++) {
        if (!prepared_find(m->spec[k].path, &info)) continue;
        char path[CFG_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/tokenizer.json", info.dir);
        char *tok = info.byte_level ? NULL : read_text_file(path);
        if (first_k < 0) {
            first = info;
            first_k = k;
            first_tok = tok;
            continue;
        }
        int same = info.byte_level == first.byte_level && info.vocab_size == first.vocab_size &&
                   info.eot_id == first.eot_id && info.bos_id == first.bos_id &&
                   (info.byte_level || strcmp(tok, first_tok) == 0);
        free(tok);
        if (!same) {
            free(first_tok);
            die("%s: source %d (%s) was prepared with another tokenizer than source %d (%s): "
                "%s, vocab %u, end-of-text %lld, beginning-of-text %lld against %s, vocab %u, "
                "end-of-text %lld, beginning-of-text %lld%s: a mixture's sources must share one tokenizer",
                key, k + 1, m->spec[k].path, first_k + 1, m->spec[first_k].path,
                info.byte_level ? "byte-level" : "tokenizer.json", info.vocab_size,
                (long long)info.eot_id, (long long)info.bos_id,
                first.byte_level ? "byte-level" : "tokenizer.json", first.vocab_size,
                (long long)first.eot_id, (long long)first.bos_id,
                info.byte_level == first.byte_level && info.vocab_size == first.vocab_size &&
                        info.eot_id == first.eot_id && info.bos_id == first.bos_id
                    ? " (the tokenizer.json files differ)" : "");
        }
    }
    free(first_tok);
}

void mixture_open(DataMixture *m, const char *spec, const char *key, int S, int vocab_size,
                  bool shuffle, uint64_t seed) {
    memset(m, 0, sizeof *m);
    DataSource *all = xmalloc(CFG_MAX_SOURCES * sizeof *all, "data sources");  // (CFG_MAX_SOURCES)
    m->n = config_data_sources(spec, key, all);
    if (m->n == 0) die("%s is empty", key);
    m->spec = xmalloc((size_t)m->n * sizeof *m->spec, "data sources");
    memcpy(m->spec, all, (size_t)m->n * sizeof *m->spec);
    free(all);
    m->w = xmalloc((size_t)m->n * sizeof *m->w, "mixture weights");
    double total = 0;
    for (int k = 0; k < m->n; k++) total += m->spec[k].weight;
    for (int k = 0; k < m->n; k++) m->w[k] = m->spec[k].weight / total;
    if (m->n > 1) check_one_tokenizer(m, key);
    m->src = xcalloc((size_t)m->n * sizeof *m->src, "data sources");
    for (int k = 0; k < m->n; k++)
        tokens_open(&m->src[k], m->spec[k].path, S, vocab_size, shuffle, seed + (uint64_t)k);
    m->read.count = xcalloc((size_t)m->n * sizeof(uint64_t), "mixture cursor");
    m->stats.count = xcalloc((size_t)m->n * sizeof(uint64_t), "mixture cursor");
}

void mixture_close(DataMixture *m) {
    for (int k = 0; k < m->n; k++) tokens_close(&m->src[k]);
    free(m->src);
    free(m->spec);
    free(m->w);
    free(m->read.count);
    free(m->stats.count);
    memset(m, 0, sizeof *m);
}

void mixture_locate(DataMixture *m, uint64_t p, int *k, uint64_t *q) {
    if (m->n == 1) {
        *k = 0;
        *q = p;
        return;
    }
    cursor_seek(&m->read, m->w, m->n, p);
    const int src = cursor_step(&m->read, m->w, m->n);
    *k = src;
    *q = m->read.count[src] - 1;
}

void mixture_fill_batch(DataMixture *m, uint64_t p0, int B, int32_t *inputs, int32_t *targets) {
    for (int b = 0; b < B; b++) {
        int k;
        uint64_t q;
        mixture_locate(m, p0 + (uint64_t)b, &k, &q);
        const size_t S = (size_t)m->src[k].S;
        tokens_read_sequence(&m->src[k], tokens_sequence_at(&m->src[k], q), inputs + (size_t)b * S,
                             targets + (size_t)b * S);
    }
}

void mixture_counts(DataMixture *m, uint64_t p, uint64_t *out) {
    if (m->n == 1) {
        out[0] = p;
        return;
    }
    cursor_seek(&m->stats, m->w, m->n, p);
    memcpy(out, m->stats.count, (size_t)m->n * sizeof *out);
}

// tests/unit/test_mixture.c — weighted data mixtures (data/mixture.h, config_data_sources):
//  - the three spellings of data.train parse to the same sources, and every malformed
//    one is a fatal error naming the problem;
//  - every global position reads the sequence an independent, naive implementation of
//    the rule (recomputed from position 0 for each position) says, forwards, backwards
//    (the cursor restarts) and in batches split any way (the layout must not matter),
//    with and without shuffling;
//  - the proportions hold: after every n positions each source has had w_k * n to
//    within one, over 200,000 positions for several weight sets;
//  - one source is exactly the single-dataset order (tokens_fill_batch);
//  - sources prepared with different tokenizers are refused.
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "run_child.h"
#include "config.h"
#include "data/mixture.h"
#include "data/prepared.h"
#include "data/tokens.h"

static char dir[] = "/tmp/femtotron_test_mixture_XXXXXX";
enum { S = 4 };

static void expect_death(const char *what, void (*fn)(void *), void *ctx, const char *n1,
                         const char *n2) {
    char err[4096];
    int rc = run_child(fn, ctx, err, sizeof err);
    CHECK(rc != 0 && strstr(err, n1) && (!n2 || strstr(err, n2)),
          "%s: refused naming \"%s\"%s%s (stderr: %.300s)", what, n1, n2 ? " and " : "", n2 ? n2 : "",
          err);
}

// ---------------------------------------------------------------- parsing

static void child_parse(void *spec) {
    DataSource src[CFG_MAX_SOURCES];
    config_data_sources((const char *)spec, "data.train", src);
}

static void test_parse(void) {
    DataSource a[CFG_MAX_SOURCES], b[CFG_MAX_SOURCES];
    int n = config_data_sources("web/*.bin", "data.train", a);
    CHECK(n == 1 && strcmp(a[0].path, "web/*.bin") == 0 && a[0].weight == 1.0, "one glob is one source of weight 1");
    n = config_data_sources("odd,name:x.bin", "data.train", a);
    CHECK(n == 1 && strcmp(a[0].path, "odd,name:x.bin") == 0,
          "a path with commas and colons but no :WEIGHT items is one path");
    n = config_data_sources("web/*.bin:0.7,code/*.bin:0.3", "data.train", a);
    int m = config_data_sources("[{\"path\": \"web/*.bin\", \"weight\": 0.7}, {\"path\": \"code/*.bin\", "
                                "\"weight\": 0.3}]", "data.train", b);
    CHECK(n == 2 && m == 2 && strcmp(a[0].path, b[0].path) == 0 && strcmp(a[1].path, b[1].path) == 0 &&
              a[0].weight == b[0].weight && a[1].weight == 0.3 && strcmp(a[1].path, "code/*.bin") == 0,
          "the command-line form and the JSON list give the same two sources");
    m = config_data_sources("[{\"path\": \"x.bin\"}]", "data.train", b);
    CHECK(m == 1 && b[0].weight == 1.0, "a JSON source without a weight weighs 1");
    CHECK(config_data_sources("", "data.val", a) == 0, "an empty data.val has no sources");

    struct { const char *spec, *n1, *n2; } bad[] = {
        {"a.bin:0.5,b.bin", "every comma-separated source needs a weight", "1 of 2"},
        {"a.bin:0,b.bin:1", "weight 0", "finite number > 0"},
        {"a.bin:-1,b.bin:1", "weight -1", NULL},
        {"a.bin:nan,b.bin:1", "weight nan", NULL},
        {":0.5,b.bin:1", "source 1 has an empty path", NULL},
        {"[]", "non-empty JSON array", NULL},
        {"[{\"path\": 3}]", "source 1 must be", NULL},
        {"[{\"path\": \"a\", \"weigth\": 1}]", "unknown field \"weigth\"", NULL},
        {"[{\"path\": \"a\", \"weight\": \"x\"}]", "source 1 must be", NULL},
        {"[{\"path\": \"a\"},", "non-empty JSON array", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_death(bad[i].spec, child_parse, (void *)bad[i].spec, bad[i].n1, bad[i].n2);
    char many[4096] = "";
    for (int k = 0; k <= CFG_MAX_SOURCES; k++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%ss%d.bin:1", k ? "," : "", k);
    expect_death("33 sources", child_parse, many, "more than 32 sources", NULL);
}

// ---------------------------------------------------------------- the rule

// The source of position p by the rule, recomputed from position 0 (no cursor),
// and its own position within that source.
static int naive_source(const double *w, int n, uint64_t p, uint64_t *q) {
    uint64_t c[8] = {0};
    int k = 0;
    for (uint64_t i = 0; i <= p; i++) {
        k = 0;
        for (int j = 1; j < n; j++)
            if (w[j] * (double)(i + 1) - (double)c[j] > w[k] * (double)(i + 1) - (double)c[k]) k = j;
        c[k]++;
    }
    *q = c[k] - 1;
    return k;
}

// Source k's shards: sequences whose first token says (k, sequence): 1000*k + j.
static void write_source(int k, int n_seq, char *glob_out, size_t size) {
    char path[512];
    size_t n = (size_t)n_seq * S + 1;
    uint32_t *t = malloc(n * sizeof *t);  // (n_seq * S + 1)
    for (int j = 0; j < n_seq; j++)
        for (int i = 0; i < S; i++) t[(size_t)j * S + i] = (uint32_t)(1000 * k + j) * (i == 0) + (uint32_t)i * (i != 0);
    t[n - 1] = 1;
    snprintf(path, sizeof path, "%s/src%d", dir, k);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/src%d/train_000000.bin", dir, k);
    tokens_write_shard(path, t, n, 0);
    free(t);
    snprintf(glob_out, size, "%s/src%d/*.bin", dir, k);
}

static void test_rule(void) {
    char g[3][512], spec[2048];
    const int n_seq[3] = {7, 5, 11};
    for (int k = 0; k < 3; k++) write_source(k, n_seq[k], g[k], sizeof g[k]);
    snprintf(spec, sizeof spec, "%s:0.5,%s:0.3,%s:0.2", g[0], g[1], g[2]);
    const double w[3] = {0.5, 0.3, 0.2};
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        DataMixture m;
        mixture_open(&m, spec, "data.train", S, 50000, shuffle, 42);
        TokenDataset ref[3];
        for (int k = 0; k < 3; k++) tokens_open(&ref[k], g[k], S, 50000, shuffle, 42 + (uint64_t)k);
        int32_t in[8 * S], tg[8 * S];
        // Forwards one at a time, then backwards (the cursor restarts), then in batches
        // of 3 and of 8 from odd starting points: every position as the naive rule says.
        int wrong = 0, checked = 0;
        uint64_t order[300];
        for (int i = 0; i < 150; i++) order[i] = (uint64_t)i;
        for (int i = 0; i < 150; i++) order[150 + i] = (uint64_t)(149 - i);
        for (int i = 0; i < 300; i++) {
            uint64_t p = order[i], q;
            int k = naive_source(w, 3, p, &q);
            mixture_fill_batch(&m, p, 1, in, tg);
            uint64_t want = tokens_sequence_at(&ref[k], q);
            wrong += in[0] != (int32_t)(1000 * k + (int)want);
            checked++;
        }
        for (int B = 3; B <= 8; B += 5)
            for (uint64_t p0 = 1; p0 < 120; p0 += (uint64_t)B) {
                mixture_fill_batch(&m, p0, B, in, tg);
                for (int b = 0; b < B; b++) {
                    uint64_t q;
                    int k = naive_source(w, 3, p0 + (uint64_t)b, &q);
                    wrong += in[b * S] != (int32_t)(1000 * k + (int)tokens_sequence_at(&ref[k], q));
                    checked++;
                }
            }
        CHECK(wrong == 0, "shuffle %d: %d positions read forwards, backwards and in batches of 3 and 8 "
                          "are the naive rule's sequences (%d wrong)", shuffle, checked, wrong);
        for (int k = 0; k < 3; k++) tokens_close(&ref[k]);
        mixture_close(&m);
    }
}

// Over n positions, the largest |c_k(n) - w_k n| for weights w (mixture_counts).
static void test_proportions(void) {
    char g[3][512];
    for (int k = 0; k < 3; k++) snprintf(g[k], sizeof g[k], "%s/src%d/*.bin", dir, k);
    const double sets[][3] = {{0.7, 0.3, 0}, {0.5, 0.3, 0.2}, {1, 1, 1}, {0.01, 0.98, 0.01}, {2, 1, 0}};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        int n = sets[s][2] > 0 ? 3 : 2;
        char spec[2048] = "", label[64] = "";
        double total = 0;
        for (int k = 0; k < n; k++) {
            snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%s:%g", k ? "," : "", g[k], sets[s][k]);
            snprintf(label + strlen(label), sizeof label - strlen(label), "%s%g", k ? ":" : "", sets[s][k]);
            total += sets[s][k];
        }
        DataMixture m;
        mixture_open(&m, spec, "data.train", S, 50000, false, 1);
        double worst = 0;
        uint64_t c[3];
        for (uint64_t p = 1; p <= 200000; p++) {
            mixture_counts(&m, p, c);
            for (int k = 0; k < n; k++) worst = fmax(worst, fabs((double)c[k] - sets[s][k] / total * (double)p));
        }
        CHECK(worst <= 1.0, "weights %s: after every n <= 200000 positions each source has had w_k n "
                            "to within %.3f (<= 1)", label, worst);
        mixture_close(&m);
    }
}

static void test_one_source(void) {
    char g[512];
    snprintf(g, sizeof g, "%s/src2/*.bin", dir);
    DataMixture m;
    TokenDataset ds;
    mixture_open(&m, g, "data.train", S, 50000, true, 9);
    tokens_open(&ds, g, S, 50000, true, 9);
    int same = 1;
    int32_t a[5 * S], at[5 * S], b[5 * S], bt[5 * S];
    for (uint64_t p = 0; p < 60; p += 5) {
        mixture_fill_batch(&m, p, 5, a, at);
        tokens_fill_batch(&ds, p, 5, b, bt);
        same = same && memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0;
    }
    uint64_t c;
    mixture_counts(&m, 123, &c);
    CHECK(same && c == 123, "one source reads exactly the single-dataset order (shuffled, seed 9)");
    tokens_close(&ds);
    mixture_close(&m);
}

static char g_spec[2048];
static void child_open(void *p) {
    (void)p;
    DataMixture m;
    mixture_open(&m, g_spec, "data.train", S, 50000, false, 1);
}

static void test_tokenizers_agree(void) {
    char d0[512], d1[512];
    snprintf(d0, sizeof d0, "%s/src0", dir);
    snprintf(d1, sizeof d1, "%s/src1", dir);
    prepared_write(d0, NULL, 256, 10, -1);
    prepared_write(d1, NULL, 256, 10, -1);
    snprintf(g_spec, sizeof g_spec, "%s/*.bin:1,%s/*.bin:1", d0, d1);
    DataMixture m;
    mixture_open(&m, g_spec, "data.train", S, 50000, false, 1);
    CHECK(m.n == 2, "two sources prepared with the same byte-level tokenizer open as one mixture");
    mixture_close(&m);
    prepared_write(d1, NULL, 256, 11, -1);  // another end-of-text id
    expect_death("sources prepared with different tokenizers", child_open, NULL,
                 "source 2", "must share one tokenizer");
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    test_parse();
    test_rule();
    test_proportions();
    test_one_source();
    test_tokenizers_agree();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_summary();
}

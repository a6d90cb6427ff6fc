// tests/unit/test_tokens.c — token shards and the data-order rule (data/tokens.h):
// sequence slicing per shard, shard order, the no-shuffle and Fisher-Yates orders
// against a naive re-implementation, shard writing, and every fatal input error.
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <sys/stat.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "data/byte_tokenizer.h"
#include "data/tokens.h"
#include "model/init.h"

#define VOCAB 70000  // > 65535 so that uint32 shards carry ids uint16 cannot

static char dir[] = "/tmp/femtotron_test_tokens_XXXXXX";

static char *path_in(const char *name) {
    static char buf[8][512];  // a few live at once
    static int next = 0;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

// Token i of test shard `f`: distinct per file so a mix-up shows.
static uint32_t token_value(int f, size_t i, uint32_t limit) {
    return (uint32_t)((i * 2654435761u + (size_t)f * 977u) % limit);
}

// A shard written byte by byte, for headers tokens_write_shard would never write.
static void write_raw(const char *path, int32_t magic, int32_t count, size_t n_tokens,
                      int width, size_t extra_bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    int32_t header[256] = {0};  // (256)
    header[0] = magic;
    header[1] = 1;
    header[2] = count;
    fwrite(header, sizeof header, 1, f);
    for (size_t i = 0; i < n_tokens * (size_t)width + extra_bytes; i++) fputc((int)(i % 200), f);
    fclose(f);
}

// Run tokens_open in a child with stderr captured; true when the child exited
// non-zero and its stderr holds every one of the (up to 3) expected strings.
static bool open_fails_with(const char *pattern, int S, int vocab, const char *want1,
                            const char *want2, const char *want3, char *err, size_t cap) {
    char *errpath = path_in("child_stderr.txt");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);  // a hang must not stall the suite
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        TokenDataset ds;
        tokens_open(&ds, pattern, S, vocab, false, 0);
        tokens_close(&ds);
        _exit(0);  // tokens_open accepted bad input
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *f = fopen(errpath, "r");
    size_t got = f ? fread(err, 1, cap - 1, f) : 0;
    err[got] = '\0';
    if (f) fclose(f);
    char *nl = strchr(err, '\n');
    if (nl && nl[1] == '\0') *nl = '\0';
    bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return failed && strstr(err, want1) && (!want2 || strstr(err, want2)) &&
           (!want3 || strstr(err, want3));
}

// What happens to a shard while a run reads it (the live-input checks).
typedef enum { LIVE_ID_SAME_MTIME, LIVE_TRUNCATE, LIVE_REWRITE } LiveChange;

// In a child: open `path` (S = 8, vocab 300), read sequence 0, make `change` to
// the file, read sequence 0 again. True when the child exited non-zero (not by a
// signal) and its stderr holds want1 and want2.
static bool live_read_fails_with(const char *path, LiveChange change, const char *want1,
                                 const char *want2, char *err, size_t cap) {
    char *errpath = path_in("child_stderr.txt");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        TokenDataset ds;
        tokens_open(&ds, path, 8, 300, false, 0);
        int32_t in[8], tg[8];
        tokens_read_sequence(&ds, 0, in, tg);
        struct stat before;
        stat(path, &before);
        int w = open(path, O_WRONLY);
        if (change == LIVE_TRUNCATE) {
            if (ftruncate(w, 1024 + 2 * 5) != 0) _exit(3);  // 5 tokens left
        } else {
            uint16_t id = change == LIVE_ID_SAME_MTIME ? 1000 : 7;  // 1000: outside vocab 300
            if (pwrite(w, &id, 2, 1024 + 2 * 3) != 2) _exit(3);
        }
        close(w);
        if (change == LIVE_ID_SAME_MTIME) {  // the same size and modification time as before
            struct timespec t[2] = {before.st_atim, before.st_mtim};
            utimensat(AT_FDCWD, path, t, 0);
        }
        tokens_read_sequence(&ds, 0, in, tg);
        _exit(0);  // the change went unnoticed
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *f = fopen(errpath, "r");
    size_t got = f ? fread(err, 1, cap - 1, f) : 0;
    err[got] = '\0';
    if (f) fclose(f);
    bool exited = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    return exited && strstr(err, want1) && (!want2 || strstr(err, want2));
}

static void test_live_changes(void) {
    char err[2048];
    uint32_t good[300];  // (300)
    for (int i = 0; i < 300; i++) good[i] = (uint32_t)i % 250;
    char *p = path_in("live.bin");
    tokens_write_shard(p, good, 300, 0);
    CHECK(live_read_fails_with(p, LIVE_TRUNCATE, p, "changed while training", err, sizeof err),
          "a shard truncated after it was opened stops the run with a message, not SIGBUS: %s", err);
    tokens_write_shard(p, good, 300, 0);
    CHECK(live_read_fails_with(p, LIVE_REWRITE, p, "changed while training", err, sizeof err),
          "a shard rewritten in place (valid ids) after it was opened is named: %s", err);
    tokens_write_shard(p, good, 300, 0);
    CHECK(live_read_fails_with(p, LIVE_ID_SAME_MTIME, "id 1000", "not below vocab_size 300", err, sizeof err),
          "an id outside the vocabulary written in place (size and time kept) is caught where it is "
          "read: %s", err);
}

static void test_errors(void) {
    char err[2048];
    // Fork before this process ever starts an OpenMP team: libgomp's pool does not
    // survive fork, so the children (which scan tokens in parallel) go first.
    uint32_t good[300];  // (300)
    for (int i = 0; i < 300; i++) good[i] = (uint32_t)i;

    char *p = path_in("trunc.bin");
    write_raw(p, 20240520, 300, 299, 2, 1);  // one byte short of 300 uint16 tokens
    CHECK(open_fails_with(p, 8, VOCAB, p, "truncated", NULL, err, sizeof err),
          "truncated shard is fatal and named: %s", err);

    p = path_in("trailing.bin");
    write_raw(p, 20240801, 300, 300, 4, 3);
    CHECK(open_fails_with(p, 8, VOCAB, p, "trailing", NULL, err, sizeof err),
          "shard with trailing bytes is fatal and named: %s", err);

    p = path_in("magic.bin");
    write_raw(p, 20240521, 300, 300, 2, 0);
    CHECK(open_fails_with(p, 8, VOCAB, p, "bad magic", NULL, err, sizeof err),
          "bad magic is fatal and named: %s", err);

    p = path_in("tiny.bin");
    FILE *f = fopen(p, "wb");
    fputs("not a shard", f);
    fclose(f);
    CHECK(open_fails_with(p, 8, VOCAB, p, "shorter than", NULL, err, sizeof err),
          "file shorter than the header is fatal and named: %s", err);

    p = path_in("badtoken.bin");
    good[123] = 257;
    tokens_write_shard(p, good, 300, 0);
    good[123] = 123;
    CHECK(open_fails_with(p, 8, 257, p, "position 123", "id 257", err, sizeof err),
          "token >= vocab_size is fatal, naming file, position and id: %s", err);

    p = path_in("badtoken32.bin");
    good[299] = 70000;
    tokens_write_shard(p, good, 300, 1);
    good[299] = 299;
    CHECK(open_fails_with(p, 8, 70000, p, "position 299", "id 70000", err, sizeof err),
          "uint32 token >= vocab_size (last position) is fatal: %s", err);

    p = path_in("nomatch_*.bin");
    CHECK(open_fails_with(p, 8, VOCAB, p, "no token file matches", NULL, err, sizeof err),
          "pattern matching nothing is fatal and names the pattern: %s", err);

    p = path_in("short.bin");
    tokens_write_shard(p, good, 10, 0);  // 10 tokens: one sequence needs S+1
    CHECK(open_fails_with(p, 10, VOCAB, p, "shorter than one sequence", "11", err, sizeof err),
          "data shorter than one sequence of S+1 tokens is fatal: %s", err);
    // ...while S = 9 needs exactly those 10 tokens.
    TokenDataset ds;
    tokens_open(&ds, p, 9, VOCAB, false, 0);
    CHECK(ds.n_seq == 1, "10 tokens hold one sequence of S=9 (n_seq %llu)",
          (unsigned long long)ds.n_seq);
    tokens_close(&ds);
}

// Byte-level tokenizer: ids are bytes, 256 ends a document and decodes visibly.
static void test_byte_tokenizer(void) {
    const char *text = "h\xc3\xa9llo \xe2\x98\x83";  // "héllo ☃": multi-byte UTF-8
    size_t n = strlen(text);
    uint32_t ids[32];  // (n + 1)
    size_t m = byte_encode_document((const uint8_t *)text, n, ids);
    bool bytes_ok = m == n + 1 && ids[n] == BYTE_EOT;
    for (size_t i = 0; i < n; i++) bytes_ok = bytes_ok && ids[i] == (uint8_t)text[i];
    CHECK(bytes_ok && ids[1] == 0xc3, "encode_document: one id per UTF-8 byte, then 256");
    char out[64];  // (byte_decoded_length)
    size_t len = byte_decoded_length(ids, m);
    size_t got = byte_decode(ids, m, out);
    CHECK(len == n + 13 && got == len && memcmp(out, text, n) == 0 &&
              memcmp(out + n, "<|endoftext|>", 13) == 0,
          "decode: the bytes back, end-of-text as <|endoftext|> (%zu bytes)", got);
    uint32_t zero = 0;
    const char *z = byte_token_text(zero, &len);
    CHECK(len == 1 && z[0] == '\0' && byte_encode((const uint8_t *)"", 0, ids) == 0,
          "byte 0 decodes to a 1-byte NUL; empty text encodes to no ids");

    char errpath[600];
    snprintf(errpath, sizeof errpath, "%s/tok_stderr.txt", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        byte_token_text(BYTE_VOCAB_SIZE, &len);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char err[512] = "";
    FILE *f = fopen(errpath, "r");
    if (f) {
        size_t r = fread(err, 1, sizeof err - 1, f);
        err[r] = '\0';
        fclose(f);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(err, "257"),
          "decoding id 257 is fatal and names the id: %s", err);
}

// Raw header words of a shard file.
static void read_header(const char *path, int32_t header[3], long *size) {
    FILE *f = fopen(path, "rb");
    if (!f || fread(header, 4, 3, f) != 3) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fclose(f);
}

// Shards for the slicing and order tests, written in an order unlike their sort.
enum { N_SHARDS = 4 };
static const char *shard_names[N_SHARDS] = {"d_s_b.bin", "d_s_a.bin", "d_s_C.bin", "d_s_c.bin"};
static const size_t shard_sizes[N_SHARDS] = {777, 1000, 5, 301};
static const int shard_wide[N_SHARDS] = {1, 0, 0, 1};
static uint32_t *shard_tokens[N_SHARDS];  // (shard_sizes[f]) each
// strcmp order of shard_names: "d_s_C" < "d_s_a" < "d_s_b" < "d_s_c".
static const int sorted_to_shard[N_SHARDS] = {2, 1, 0, 3};

static void test_write_and_slice(void) {
    for (int f = 0; f < N_SHARDS; f++) {
        shard_tokens[f] = malloc(shard_sizes[f] * sizeof(uint32_t));
        for (size_t i = 0; i < shard_sizes[f]; i++)
            shard_tokens[f][i] = token_value(f, i, shard_wide[f] ? VOCAB : 65536);
        tokens_write_shard(path_in(shard_names[f]), shard_tokens[f], shard_sizes[f], 0);
    }
    int32_t h[3];
    long size;
    read_header(path_in("d_s_a.bin"), h, &size);
    CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == 1000 && size == 1024 + 2 * 1000,
          "uint16 shard header (%d, %d, %d) and size %ld", h[0], h[1], h[2], size);
    read_header(path_in("d_s_b.bin"), h, &size);
    CHECK(h[0] == 20240801 && h[2] == 777 && size == 1024 + 4 * 777,
          "shard with an id > 65535 is written uint32 (%d, %d) size %ld", h[0], h[2], size);
    uint32_t small[3] = {1, 2, 3};  // (3)
    tokens_write_shard(path_in("forced.bin"), small, 3, 1);
    read_header(path_in("forced.bin"), h, &size);
    CHECK(h[0] == 20240801 && h[2] == 3 && size == 1024 + 12,
          "force_wide writes uint32 (%d, %d) size %ld", h[0], h[2], size);

    int Ss[] = {1, 4, 7, 64, 300, 776};
    for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++) {
        int S = Ss[si];
        TokenDataset ds;
        tokens_open(&ds, path_in("d_s_*.bin"), S, VOCAB, false, 0);
        uint64_t want = 0;
        for (int f = 0; f < N_SHARDS; f++)
            if (shard_sizes[f] >= (size_t)S + 1) want += (shard_sizes[f] - 1) / (size_t)S;
        bool paths_sorted = ds.n_files == N_SHARDS;
        for (int k = 0; k < ds.n_files && paths_sorted; k++)
            paths_sorted = strcmp(ds.paths[k], path_in(shard_names[sorted_to_shard[k]])) == 0;
        // Walk every sequence of every shard in sorted order, naively.
        int32_t *in = malloc((size_t)S * sizeof(int32_t));   // (S)
        int32_t *tg = malloc((size_t)S * sizeof(int32_t));   // (S)
        uint64_t seq = 0, bad = 0;
        for (int k = 0; k < N_SHARDS; k++) {
            int f = sorted_to_shard[k];
            size_t n = shard_sizes[f];
            size_t per = n >= (size_t)S + 1 ? (n - 1) / (size_t)S : 0;
            for (size_t j = 0; j < per; j++, seq++) {
                tokens_read_sequence(&ds, seq, in, tg);
                for (int i = 0; i < S; i++)
                    if ((uint32_t)in[i] != shard_tokens[f][j * S + i] ||
                        (uint32_t)tg[i] != shard_tokens[f][j * S + i + 1])
                        bad++;
            }
        }
        CHECK(paths_sorted && ds.n_seq == want && seq == want && bad == 0,
              "S=%d: files in strcmp order, n_seq %llu (want %llu), every sequence is "
              "tokens[j*S .. j*S+S] of its shard (%llu mismatches)", S,
              (unsigned long long)ds.n_seq, (unsigned long long)want, (unsigned long long)bad);
        free(in);
        free(tg);
        tokens_close(&ds);
    }

    // A plain path (no glob characters) opens just that file.
    TokenDataset one;
    tokens_open(&one, path_in("d_s_c.bin"), 100, VOCAB, false, 0);
    int32_t in[100], tg[100];  // (S) each
    tokens_read_sequence(&one, 2, in, tg);
    CHECK(one.n_files == 1 && one.n_seq == 3 && (uint32_t)in[0] == shard_tokens[3][200] &&
              (uint32_t)tg[99] == shard_tokens[3][300],
          "plain path: 301 tokens give 3 sequences of S=100, the last ending on token 300");
    tokens_close(&one);
}

// The shuffle rule of tokens.h, written again from its text.
static void naive_permutation(uint64_t *perm, uint64_t n, uint64_t seed, uint64_t epoch) {
    for (uint64_t i = 0; i < n; i++) perm[i] = i;
    for (uint64_t i = n - 1; i >= 1; i--) {
        uint64_t j = init_random_u64(seed, "data.shuffle", epoch, i) % (i + 1);
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static bool is_permutation(const uint64_t *perm, uint64_t n) {
    char *seen = calloc(n, 1);
    bool ok = true;
    for (uint64_t i = 0; i < n && ok; i++) {
        ok = perm[i] < n && !seen[perm[i]];
        if (ok) seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_order(void) {
    const char *pattern = path_in("d_s_*.bin");
    int S = 7;
    TokenDataset ds;
    tokens_open(&ds, pattern, S, VOCAB, false, 0);
    uint64_t n = ds.n_seq, bad = 0;
    for (uint64_t p = 0; p < 3 * n + 5; p++)
        if (tokens_sequence_at(&ds, p) != p % n) bad++;
    CHECK(bad == 0, "no shuffle: position p uses sequence p mod N_seq (%llu wrong)",
          (unsigned long long)bad);
    tokens_close(&ds);

    uint64_t seed = 1234;
    tokens_open(&ds, pattern, S, VOCAB, true, seed);
    uint64_t *perm[3];  // (n) each: the naive permutations of epochs 0..2
    for (int e = 0; e < 3; e++) {
        perm[e] = malloc(n * sizeof(uint64_t));
        naive_permutation(perm[e], n, seed, (uint64_t)e);
    }
    CHECK(is_permutation(perm[0], n) && is_permutation(perm[1], n) && is_permutation(perm[2], n),
          "each epoch's Fisher-Yates shuffle is a permutation of [0, %llu)", (unsigned long long)n);
    bool identity = true;
    for (uint64_t i = 0; i < n; i++) identity = identity && perm[0][i] == i;
    CHECK(!identity, "epoch 0 is not the identity");
    CHECK(memcmp(perm[0], perm[1], n * sizeof(uint64_t)) != 0 &&
              memcmp(perm[1], perm[2], n * sizeof(uint64_t)) != 0,
          "epochs 0, 1 and 2 shuffle differently");

    bad = 0;
    for (uint64_t p = 0; p < 3 * n; p++)
        if (tokens_sequence_at(&ds, p) != perm[p / n][p % n]) bad++;
    CHECK(bad == 0, "shuffle: position p uses perm_e[p mod N], e = p / N (%llu wrong)",
          (unsigned long long)bad);
    // Going back to an earlier epoch rebuilds its permutation, not a stale one.
    bad = 0;
    for (uint64_t p = 0; p < n; p++)
        if (tokens_sequence_at(&ds, p) != perm[0][p]) bad++;
    CHECK(bad == 0 && ds.perm_epoch == 0, "returning to epoch 0 after epoch 2 gives epoch 0 again");

    // Same seed reproduces; another seed does not.
    TokenDataset again, other;
    tokens_open(&again, pattern, S, VOCAB, true, seed);
    tokens_open(&other, pattern, S, VOCAB, true, seed + 1);
    uint64_t same = 0, diff = 0;
    for (uint64_t p = 0; p < 2 * n; p++) {
        uint64_t a = tokens_sequence_at(&ds, p);
        same += a == tokens_sequence_at(&again, p);
        diff += a != tokens_sequence_at(&other, p);
    }
    CHECK(same == 2 * n, "same seed reproduces the order (%llu of %llu equal)",
          (unsigned long long)same, (unsigned long long)(2 * n));
    CHECK(diff > n / 2, "a different seed gives a different order (%llu of %llu differ)",
          (unsigned long long)diff, (unsigned long long)(2 * n));

    // A batch straddling the epoch-0/epoch-1 boundary.
    int B = 6;
    uint64_t p0 = n - 3;
    int32_t *bin = malloc((size_t)B * S * sizeof(int32_t));  // (B, S)
    int32_t *btg = malloc((size_t)B * S * sizeof(int32_t));  // (B, S)
    int32_t in[7], tg[7];                                   // (S) each
    tokens_fill_batch(&ds, p0, B, bin, btg);
    bad = 0;
    for (int b = 0; b < B; b++) {
        uint64_t p = p0 + (uint64_t)b;
        tokens_read_sequence(&ds, perm[p / n][p % n], in, tg);
        if (memcmp(in, bin + b * S, sizeof in) || memcmp(tg, btg + b * S, sizeof tg)) bad++;
    }
    CHECK(bad == 0, "fill_batch across an epoch boundary holds the rule's sequences (%llu wrong)",
          (unsigned long long)bad);
    free(bin);
    free(btg);
    for (int e = 0; e < 3; e++) free(perm[e]);
    tokens_close(&again);
    tokens_close(&other);
    tokens_close(&ds);
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    test_errors();
    test_live_changes();
    test_byte_tokenizer();
    test_write_and_slice();
    test_order();
    for (int f = 0; f < N_SHARDS; f++) free(shard_tokens[f]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return check_summary();
}

// data/tokens.c — llm.c token shards: open and validate, the data-order rule
// (tokens.h states it; this file is its one implementation), and shard writing.
#define _POSIX_C_SOURCE 200809L
#include "data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/init.h"
#include "util.h"

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240801

static int cmp_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Expand `pattern` into ds->paths, sorted by strcmp (glob's own sort follows the
// locale, which would make the data order depend on LANG).
static void collect_paths(TokenDataset *ds, const char *pattern) {
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        // A plain path holding glob metacharacters ("data[1].bin") does not match
        // itself as a pattern; accept it when it names an existing file.
        struct stat st;
        if (stat(pattern, &st) != 0) die("no token file matches '%s'", pattern);
        ds->n_files = 1;
        ds->paths = xmalloc(sizeof(char *), "shard paths");
        ds->paths[0] = strdup(pattern);
        if (!ds->paths[0]) die("out of memory copying the path '%s'", pattern);
        return;
    }
    if (rc != 0) die("cannot expand the token file pattern '%s' (glob error %d)", pattern, rc);
    ds->n_files = (int)g.gl_pathc;
    ds->paths = xmalloc(g.gl_pathc * sizeof(char *), "shard paths");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        ds->paths[i] = strdup(g.gl_pathv[i]);
        if (!ds->paths[i]) die("out of memory copying the path '%s'", g.gl_pathv[i]);
    }
    globfree(&g);
    qsort(ds->paths, (size_t)ds->n_files, sizeof(char *), cmp_strings);
}

// First position holding an id >= vocab_size, or n when every id is valid.
// Scanned in parallel: a 100M-token shard is 200-400 MB to read once at start.
static uint64_t first_bad_token(const uint8_t *data, int wide, uint64_t n, uint32_t vocab) {
    uint64_t bad = n;
    if (wide) {
        const uint32_t *t = (const uint32_t *)data;  // (n)
        #pragma omp parallel for reduction(min : bad) schedule(static)
        for (uint64_t i = 0; i < n; i++)
            if (t[i] >= vocab && i < bad) bad = i;
    } else {
        if (vocab > 65535) return n;  // every uint16 fits
        const uint16_t *t = (const uint16_t *)data;  // (n)
        #pragma omp parallel for reduction(min : bad) schedule(static)
        for (uint64_t i = 0; i < n; i++)
            if (t[i] >= vocab && i < bad) bad = i;
    }
    return bad;
}

static uint32_t token_at(const uint8_t *data, int wide, uint64_t i) {
    if (wide) return ((const uint32_t *)data)[i];
    return ((const uint16_t *)data)[i];
}

static int64_t mtime_ns(const struct stat *st) {
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

// Open shard f, check its header against its size and every id against the vocab
// (the whole file once, mapped only for this scan); returns the number of tokens.
static uint64_t open_shard(TokenDataset *ds, int f, int vocab_size) {
    const char *path = ds->paths[f];
    int fd = open(path, O_RDONLY);
    if (fd < 0) die_errno("cannot open token file %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) die_errno("cannot stat token file %s", path);
    if (!S_ISREG(st.st_mode)) die("token file %s is not a regular file", path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < SHARD_HEADER_BYTES)
        die("token file %s is %llu bytes, shorter than the %d-byte llm.c header", path,
            (unsigned long long)size, SHARD_HEADER_BYTES);
    ds->fds[f] = fd;
    ds->bytes[f] = size;
    ds->mtime_ns[f] = mtime_ns(&st);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) die_errno("cannot mmap token file %s", path);

    int32_t header[SHARD_HEADER_INTS];  // (256) llm.c header
    memcpy(header, map, sizeof header);
    if (header[0] == SHARD_MAGIC_U16) ds->wide[f] = 0;
    else if (header[0] == SHARD_MAGIC_U32) ds->wide[f] = 1;
    else
        die("token file %s has bad magic %d (expected %d for uint16 tokens or %d for "
            "uint32): not an llm.c token shard", path, header[0], SHARD_MAGIC_U16,
            SHARD_MAGIC_U32);
    if (header[2] < 0) die("token file %s: header token count %d is negative", path, header[2]);
    uint64_t n = (uint64_t)header[2];
    uint64_t width = ds->wide[f] ? 4 : 2;
    uint64_t want = SHARD_HEADER_BYTES + n * width;
    if (size < want)
        die("token file %s is truncated: its header says %llu tokens (%llu bytes) but the "
            "file has %llu bytes", path, (unsigned long long)n, (unsigned long long)want,
            (unsigned long long)size);
    if (size > want)
        die("token file %s has %llu trailing bytes after the %llu tokens its header "
            "announces", path, (unsigned long long)(size - want), (unsigned long long)n);
    const uint8_t *data = (const uint8_t *)map + SHARD_HEADER_BYTES;
    uint64_t bad = first_bad_token(data, ds->wide[f], n, (uint32_t)vocab_size);
    if (bad < n)
        die("token file %s: token at position %llu has id %u, not below vocab_size %d",
            path, (unsigned long long)bad, token_at(data, ds->wide[f], bad), vocab_size);
    munmap(map, (size_t)size);
    return n;
}

// Fisher-Yates permutation of `epoch` into ds->perm (rule in tokens.h).
static void build_permutation(TokenDataset *ds, uint64_t epoch) {
    uint64_t n = ds->n_seq;
    for (uint64_t i = 0; i < n; i++) ds->perm[i] = i;
    for (uint64_t i = n - 1; i >= 1; i--) {
        uint64_t j = init_random_u64(ds->seed, "data.shuffle", epoch, i) % (i + 1);
        uint64_t t = ds->perm[i];
        ds->perm[i] = ds->perm[j];
        ds->perm[j] = t;
    }
    ds->perm_epoch = epoch;
}

void tokens_open(TokenDataset *ds, const char *pattern, int S, int vocab_size,
                 bool shuffle, uint64_t seed) {
    if (S < 1) die("token data %s: sequence length %d must be at least 1", pattern, S);
    if (vocab_size < 1) die("token data %s: vocab_size %d must be positive", pattern, vocab_size);
    memset(ds, 0, sizeof *ds);
    ds->S = S;
    ds->shuffle = shuffle;
    ds->seed = seed;
    collect_paths(ds, pattern);
    int nf = ds->n_files;
    ds->vocab_size = (uint32_t)vocab_size;
    ds->wide = xcalloc((size_t)nf * sizeof(int), "shard widths");
    ds->fds = xcalloc((size_t)nf * sizeof(int), "shard files");
    for (int f = 0; f < nf; f++) ds->fds[f] = -1;
    ds->bytes = xcalloc((size_t)nf * sizeof(uint64_t), "shard sizes");
    ds->mtime_ns = xcalloc((size_t)nf * sizeof(int64_t), "shard times");
    ds->buf = xmalloc(((size_t)S + 1) * 4, "sequence buffer");  // ((S + 1) * 4) raw tokens
    ds->first_seq = xcalloc((size_t)(nf + 1) * sizeof(uint64_t), "shard sequence offsets");
    uint64_t longest = 0;
    for (int f = 0; f < nf; f++) {
        uint64_t n = open_shard(ds, f, vocab_size);
        if (n > longest) longest = n;
        // A sequence is S+1 tokens; consecutive sequences share one token.
        uint64_t seqs = n >= (uint64_t)S + 1 ? (n - 1) / (uint64_t)S : 0;
        ds->first_seq[f + 1] = ds->first_seq[f] + seqs;
    }
    ds->n_seq = ds->first_seq[nf];
    if (ds->n_seq == 0)
        die("token data %s is shorter than one sequence of S+1 = %d tokens (the longest "
            "of its %d file(s) holds %llu tokens)", pattern, S + 1, nf,
            (unsigned long long)longest);
    if (shuffle) {
        // Allocated once here so the training step never allocates (docs/DESIGN.md,
        // invariant 3: all memory planned).
        ds->perm = xmalloc(ds->n_seq * sizeof(uint64_t), "data shuffle permutation");  // (n_seq)
        build_permutation(ds, 0);
    }
}

void tokens_close(TokenDataset *ds) {
    for (int f = 0; f < ds->n_files; f++) {
        if (ds->fds && ds->fds[f] >= 0) close(ds->fds[f]);
        free(ds->paths[f]);
    }
    free(ds->paths);
    free(ds->wide);
    free(ds->fds);
    free(ds->bytes);
    free(ds->mtime_ns);
    free(ds->buf);
    free(ds->first_seq);
    free(ds->perm);
    memset(ds, 0, sizeof *ds);
}

uint64_t tokens_sequence_at(TokenDataset *ds, uint64_t p) {
    uint64_t idx = p % ds->n_seq;
    if (!ds->shuffle) return idx;
    uint64_t epoch = p / ds->n_seq;
    if (epoch != ds->perm_epoch) build_permutation(ds, epoch);
    return ds->perm[idx];
}

// The shard must still be the file that was opened: same size, same modification time.
static void check_unchanged(const TokenDataset *ds, int f) {
    struct stat st;
    if (fstat(ds->fds[f], &st) != 0) die_errno("cannot stat token file %s", ds->paths[f]);
    if ((uint64_t)st.st_size != ds->bytes[f] || mtime_ns(&st) != ds->mtime_ns[f])
        die("token file %s changed while training (it was %llu bytes when opened, now %llu bytes%s): "
            "shards must not be rewritten under a running job; restore it, or restart on the new data",
            ds->paths[f], (unsigned long long)ds->bytes[f], (unsigned long long)st.st_size,
            (uint64_t)st.st_size == ds->bytes[f] ? ", and modified since" : "");
}

void tokens_read_sequence(TokenDataset *ds, uint64_t seq, int32_t *inputs, int32_t *targets) {
    if (seq >= ds->n_seq)
        die("token data: sequence %llu requested but there are only %llu",
            (unsigned long long)seq, (unsigned long long)ds->n_seq);
    // Last file whose first sequence is <= seq; files with no sequences are
    // skipped because the next file's offset equals theirs.
    int lo = 0, hi = ds->n_files;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (ds->first_seq[mid] <= seq) lo = mid;
        else hi = mid;
    }
    const int S = ds->S, wide = ds->wide[lo];
    const uint64_t start = (seq - ds->first_seq[lo]) * (uint64_t)S;  // first token of the sequence
    const uint64_t width = wide ? 4 : 2, off = SHARD_HEADER_BYTES + start * width;
    const size_t want = ((size_t)S + 1) * width;
    check_unchanged(ds, lo);
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(ds->fds[lo], ds->buf + got, want - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die_errno("token file %s: read at byte %llu failed", ds->paths[lo], (unsigned long long)(off + got));
        if (r == 0)
            die("token file %s ends at byte %llu, before the %zu bytes of sequence %llu: it was truncated "
                "while training", ds->paths[lo], (unsigned long long)(off + got), want, (unsigned long long)seq);
        got += (size_t)r;
    }
    for (int i = 0; i <= S; i++) {
        uint32_t id = token_at(ds->buf, wide, (uint64_t)i);
        if (id >= ds->vocab_size)
            die("token file %s: token at position %llu has id %u, not below vocab_size %u (the file "
                "changed after it was checked at start-up)", ds->paths[lo],
                (unsigned long long)(start + (uint64_t)i), id, ds->vocab_size);
        if (i < S) inputs[i] = (int32_t)id;
        if (i > 0) targets[i - 1] = (int32_t)id;
    }
}

void tokens_fill_batch(TokenDataset *ds, uint64_t p0, int B, int32_t *inputs,
                       int32_t *targets) {
    for (int b = 0; b < B; b++) {
        uint64_t seq = tokens_sequence_at(ds, p0 + (uint64_t)b);
        tokens_read_sequence(ds, seq, inputs + (size_t)b * ds->S, targets + (size_t)b * ds->S);
    }
}

void tokens_write_shard(const char *path, const uint32_t *tokens, size_t n, int force_wide) {
    if (n > (size_t)INT32_MAX)
        die("token file %s: %zu tokens do not fit the int32 count of the llm.c header",
            path, n);
    int wide = force_wide != 0;
    for (size_t i = 0; i < n && !wide; i++)
        if (tokens[i] > 65535) wide = 1;
    int32_t header[SHARD_HEADER_INTS] = {0};  // (256)
    header[0] = wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16;
    header[1] = 1;
    header[2] = (int32_t)n;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die_errno("cannot create token file %s", path);
    write_fully(fd, header, sizeof header, path);
    if (wide) {
        write_fully(fd, tokens, n * sizeof(uint32_t), path);
    } else {
        enum { CHUNK = 1 << 15 };
        uint16_t narrow[CHUNK];  // (CHUNK) uint16 copy of a run of tokens
        for (size_t i = 0; i < n; i += CHUNK) {
            size_t m = n - i < CHUNK ? n - i : CHUNK;
            for (size_t k = 0; k < m; k++) narrow[k] = (uint16_t)tokens[i + k];
            write_fully(fd, narrow, m * sizeof(uint16_t), path);
        }
    }
    // fsync so a shard that prepare reported as written survives a crash.
    if (fsync(fd) != 0) die_errno("cannot fsync token file %s", path);
    if (close(fd) != 0) die_errno("cannot close token file %s", path);
}

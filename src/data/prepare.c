// data/prepare.c — `femtotron prepare`: text files (plain or .gz) → byte-level
// llm.c token shards (uint16, format in data/tokens.h) split into train and val.
//
// Documents: each input file is one document; with --split-on LINE, each run of
// lines between lines equal to LINE (a trailing "\r" ignored) is one, its lines
// keeping their newlines; the separator lines themselves are dropped. Documents
// never span two files. Documents shorter than --min-bytes bytes (default 1, so
// empty chunks between separators disappear) are skipped and not counted.
// Every kept document becomes its bytes followed by end-of-text (byte_tokenizer.h).
// Split: kept document k (from 0, across all inputs in the order given) goes to
// val iff floor((k+1)*F) > floor(k*F) in double arithmetic, so val gets ~F of the
// documents, spread evenly through the corpus, and any tool can recompute it.
// Shards: DIR/train_000000.bin, ... and DIR/val_000000.bin, ...; a shard is closed
// at the first document end at or after --shard-tokens tokens. Each is written as
// NAME.tmp and renamed when complete, so a crash never leaves a shard that looks whole.
#define _POSIX_C_SOURCE 200809L
#include "data/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/byte_tokenizer.h"
#include "util.h"

extern char **environ;  // passed to gzip; not declared by unistd.h in strict POSIX mode

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520  // llm.c magic for uint16 tokens (data/tokens.h)
#define WRITE_BUF_TOKENS 65536
#define READ_CHUNK (1 << 20)

static const char *usage_text =
    "usage: femtotron prepare --input FILE... --output DIR [options]\n"
    "\n"
    "Turn text into byte-level llm.c token shards (uint16; ids 0..255 are bytes,\n"
    "256 is end-of-text, written after every document; vocab_size 257).\n"
    "\n"
    "  --input FILE...       text files, in order; FILE.gz is decompressed with gzip\n"
    "  --output DIR          where train_NNNNNN.bin and val_NNNNNN.bin go (created)\n"
    "  --val-fraction F      fraction of documents for validation (default 0.05):\n"
    "                        document k goes to val iff floor((k+1)F) > floor(kF)\n"
    "  --split-on LINE       a line equal to LINE separates documents (e.g. \"%\" for\n"
    "                        fortune files); default: each file is one document\n"
    "  --shard-tokens N      start a new shard at the first document end after N\n"
    "                        tokens (default 100000000)\n"
    "  --min-bytes M         skip documents shorter than M bytes (default 1)\n"
    "  --force               replace existing train_*.bin / val_*.bin shards in DIR\n"
    "  --help                print this help\n";

// Token stream of one split ("train" or "val") into numbered shards.
typedef struct {
    const char *dir;
    const char *prefix;
    uint64_t shard_tokens;          // close a shard at a document end past this
    int fd;                         // open shard, -1 when none
    int index;                      // number of the open (or next) shard
    char path[4096];                // final name of the open shard
    char tmp_path[4100];            // name while being written
    uint64_t count;                 // tokens in the open shard
    uint16_t buf[WRITE_BUF_TOKENS]; // (WRITE_BUF_TOKENS) tokens not yet written
    size_t buf_n;
    uint64_t docs, tokens;          // totals over every shard
    int files;
} ShardWriter;

// One document being read: its first min_bytes bytes wait in `pending` until it
// is known to be long enough to keep; only then does it get its number k.
typedef struct {
    uint8_t *pending;       // (min_bytes) bytes held back
    size_t pending_n;
    size_t min_bytes;
    ShardWriter *target;    // NULL until kept
} Document;

typedef struct {
    double val_fraction;
    uint64_t next_doc;      // k of the next kept document
    uint64_t skipped;
    ShardWriter *train, *val;
    uint64_t bytes_read;
    double t_start, t_progress;
} Prepare;

static void write_all(int fd, const void *buf, size_t bytes, const char *path) {
    const uint8_t *p = buf;
    while (bytes > 0) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0) {
            if (errno == EINTR) continue;
            die_errno("cannot write shard %s", path);
        }
        p += w;
        bytes -= (size_t)w;
    }
}

static void writer_flush(ShardWriter *w) {
    write_all(w->fd, w->buf, w->buf_n * sizeof(uint16_t), w->tmp_path);
    w->buf_n = 0;
}

static void writer_open_shard(ShardWriter *w) {
    snprintf(w->path, sizeof w->path, "%s/%s_%06d.bin", w->dir, w->prefix, w->index);
    snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", w->path);
    // O_CLOEXEC: a gzip started later must not inherit the shard.
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) die_errno("cannot create shard %s", w->tmp_path);
    // Zero header for now (magic 0: not a valid shard); the real one goes in at close.
    int32_t header[SHARD_HEADER_INTS] = {0};  // (256)
    write_all(w->fd, header, sizeof header, w->tmp_path);
    w->count = 0;
}

static void writer_close_shard(ShardWriter *w) {
    if (w->fd < 0) return;
    writer_flush(w);
    if (w->count > (uint64_t)INT32_MAX)
        die("shard %s would hold %llu tokens, more than the int32 count of the llm.c "
            "header allows; lower --shard-tokens or split the input into documents",
            w->path, (unsigned long long)w->count);
    int32_t header[SHARD_HEADER_INTS] = {0};  // (256)
    header[0] = SHARD_MAGIC_U16;
    header[1] = 1;
    header[2] = (int32_t)w->count;
    if (lseek(w->fd, 0, SEEK_SET) != 0) die_errno("cannot seek in shard %s", w->tmp_path);
    write_all(w->fd, header, sizeof header, w->tmp_path);
    if (fsync(w->fd) != 0) die_errno("cannot fsync shard %s", w->tmp_path);
    if (close(w->fd) != 0) die_errno("cannot close shard %s", w->tmp_path);
    if (rename(w->tmp_path, w->path) != 0)
        die_errno("cannot rename %s to %s", w->tmp_path, w->path);
    w->fd = -1;
    w->index++;
    w->files++;
}

static void writer_put(ShardWriter *w, const uint8_t *bytes, size_t n) {
    if (w->fd < 0) writer_open_shard(w);
    for (size_t i = 0; i < n; i++) {
        if (w->buf_n == WRITE_BUF_TOKENS) writer_flush(w);
        w->buf[w->buf_n++] = bytes[i];  // byte-level: the id is the byte value
    }
    w->count += n;
    w->tokens += n;
}

static void writer_end_document(ShardWriter *w) {
    if (w->fd < 0) writer_open_shard(w);  // an empty kept document (--min-bytes 0)
    if (w->buf_n == WRITE_BUF_TOKENS) writer_flush(w);
    w->buf[w->buf_n++] = BYTE_EOT;
    w->count++;
    w->tokens++;
    w->docs++;
    if (w->count >= w->shard_tokens) writer_close_shard(w);
}

static void progress(Prepare *pp, bool final) {
    double now = now_seconds();
    if (!final && now - pp->t_progress < 0.5) return;
    pp->t_progress = now;
    double mb = (double)pp->bytes_read / 1e6, dt = now - pp->t_start;
    fprintf(stderr, "\rprepare: %.1f MB read, %.1f MB/s, %llu tokens written", mb,
            dt > 0 ? mb / dt : 0.0,
            (unsigned long long)(pp->train->tokens + pp->val->tokens));
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

static void doc_keep(Prepare *pp, Document *d) {
    double F = pp->val_fraction, k = (double)pp->next_doc;
    bool to_val = floor((k + 1.0) * F) > floor(k * F);
    d->target = to_val ? pp->val : pp->train;
    pp->next_doc++;
    writer_put(d->target, d->pending, d->pending_n);
    d->pending_n = 0;
}

static void doc_add(Prepare *pp, Document *d, const uint8_t *bytes, size_t n) {
    while (!d->target) {
        size_t take = d->min_bytes - d->pending_n;
        if (take > n) take = n;
        memcpy(d->pending + d->pending_n, bytes, take);
        d->pending_n += take;
        bytes += take;
        n -= take;
        if (d->pending_n >= d->min_bytes) doc_keep(pp, d);
        else return;  // everything so far is held back
    }
    writer_put(d->target, bytes, n);
}

static void doc_end(Prepare *pp, Document *d) {
    if (!d->target && d->pending_n >= d->min_bytes) doc_keep(pp, d);
    if (d->target) writer_end_document(d->target);
    else pp->skipped++;
    d->target = NULL;
    d->pending_n = 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// Open an input for reading; .gz files through `gzip -dc` (no zlib dependency).
// *child gets gzip's pid, or 0.
static FILE *input_open(const char *path, pid_t *child) {
    *child = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) die_errno("cannot open input %s", path);
    if (!ends_with(path, ".gz")) {
        FILE *f = fdopen(fd, "rb");
        if (!f) die_errno("cannot read input %s", path);
        return f;
    }
    int pipefd[2];
    if (pipe(pipefd) != 0) die_errno("cannot create a pipe to decompress %s", path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    char *args[] = {"gzip", "-dc", NULL};
    int rc = posix_spawnp(child, "gzip", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        die_errno("cannot run gzip to decompress input %s", path);
    }
    close(fd);
    close(pipefd[1]);
    FILE *f = fdopen(pipefd[0], "rb");
    if (!f) die_errno("cannot read the output of gzip for %s", path);
    return f;
}

static void input_close(FILE *f, pid_t child, const char *path) {
    if (ferror(f)) die_errno("cannot read input %s", path);
    fclose(f);
    if (!child) return;
    int status = 0;
    if (waitpid(child, &status, 0) < 0) die_errno("cannot wait for gzip on %s", path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("input %s: gzip -dc failed (status %d): not a valid gzip file?", path,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void read_input(Prepare *pp, Document *d, const char *path, const char *split_on) {
    pid_t child;
    FILE *f = input_open(path, &child);
    if (!split_on) {
        uint8_t *chunk = xmalloc(READ_CHUNK, "input read buffer");  // (READ_CHUNK)
        size_t got;
        while ((got = fread(chunk, 1, READ_CHUNK, f)) > 0) {
            pp->bytes_read += got;
            doc_add(pp, d, chunk, got);
            progress(pp, false);
        }
        free(chunk);
    } else {
        size_t sep_len = strlen(split_on);
        char *line = NULL;
        size_t cap = 0;
        ssize_t got;
        while ((got = getline(&line, &cap, f)) > 0) {
            pp->bytes_read += (uint64_t)got;
            size_t len = (size_t)got;  // content without "\n" / "\r\n"
            if (len && line[len - 1] == '\n') len--;
            if (len && line[len - 1] == '\r') len--;
            if (len == sep_len && memcmp(line, split_on, len) == 0) doc_end(pp, d);
            else doc_add(pp, d, (const uint8_t *)line, (size_t)got);
            progress(pp, false);
        }
        free(line);
    }
    input_close(f, child, path);
    doc_end(pp, d);  // documents never span files
}

static void mkdir_p(const char *dir) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        die("output directory name is too long: %s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                die_errno("cannot create output directory %s", buf);
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        die("output %s is not a directory", dir);
}

static bool is_shard_name(const char *name) {
    bool prefix = strncmp(name, "train_", 6) == 0 || strncmp(name, "val_", 4) == 0;
    return prefix && (ends_with(name, ".bin") || ends_with(name, ".bin.tmp"));
}

// Existing shards would mix with the new ones under a train_*.bin glob, so they
// are refused, or with --force removed before anything is written.
static void clear_old_shards(const char *dir, bool force) {
    DIR *dp = opendir(dir);
    if (!dp) die_errno("cannot list output directory %s", dir);
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(dp)) != NULL) {
        if (!is_shard_name(e->d_name)) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!force)
            die("output directory %s already holds shards (%s); pass --force to "
                "replace them", dir, path);
        if (unlink(path) != 0) die_errno("cannot remove old shard %s", path);
        removed++;
    }
    closedir(dp);
    if (removed) fprintf(stderr, "prepare: --force: removed %d old shard(s) from %s\n", removed, dir);
}

static double parse_double(const char *opt, const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) die("prepare: %s needs a number, got '%s'", opt, s);
    return v;
}

static uint64_t parse_count(const char *opt, const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        die("prepare: %s needs a non-negative integer, got '%s'", opt, s);
    return (uint64_t)v;
}

int prepare_main(int argc, char **argv) {
    const char **inputs = xmalloc((size_t)argc * sizeof(char *), "input list");  // (argc)
    int n_inputs = 0;
    const char *out_dir = NULL, *split_on = NULL;
    double val_fraction = 0.05;
    uint64_t shard_tokens = 100000000, min_bytes = 1;
    bool force = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(a, "--force")) {
            force = true;
        } else if (!strcmp(a, "--input")) {
            // Every following argument up to the next option is an input file.
            int before = n_inputs;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) inputs[n_inputs++] = argv[++i];
            if (n_inputs == before) die("prepare: --input needs at least one file");
        } else if (!strcmp(a, "--output") || !strcmp(a, "--val-fraction") ||
                   !strcmp(a, "--split-on") || !strcmp(a, "--shard-tokens") ||
                   !strcmp(a, "--min-bytes")) {
            if (!has_value) die("prepare: %s needs a value (see femtotron prepare --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--output")) out_dir = v;
            else if (!strcmp(a, "--split-on")) split_on = v;
            else if (!strcmp(a, "--val-fraction")) val_fraction = parse_double(a, v);
            else if (!strcmp(a, "--shard-tokens")) shard_tokens = parse_count(a, v);
            else min_bytes = parse_count(a, v);
        } else {
            die("prepare: unknown argument '%s' (see femtotron prepare --help)", a);
        }
    }
    if (n_inputs == 0) die("prepare: no --input files given (see femtotron prepare --help)");
    if (!out_dir) die("prepare: no --output directory given (see femtotron prepare --help)");
    if (!(val_fraction >= 0.0 && val_fraction <= 1.0))
        die("prepare: --val-fraction %g must lie in [0, 1]", val_fraction);
    if (shard_tokens < 1 || shard_tokens > (uint64_t)INT32_MAX)
        die("prepare: --shard-tokens %llu must lie in [1, %d] (the llm.c header count is int32)",
            (unsigned long long)shard_tokens, INT32_MAX);
    if (min_bytes > ((uint64_t)1 << 30))
        die("prepare: --min-bytes %llu is larger than 1 GiB", (unsigned long long)min_bytes);

    // Check every input before touching the output, so a typo costs nothing.
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) die_errno("cannot open input %s", inputs[i]);
        if (S_ISDIR(st.st_mode)) die("input %s is a directory, not a file", inputs[i]);
        if (access(inputs[i], R_OK) != 0) die_errno("cannot read input %s", inputs[i]);
    }
    mkdir_p(out_dir);
    clear_old_shards(out_dir, force);

    ShardWriter *train = xcalloc(sizeof(ShardWriter), "train shard writer");
    ShardWriter *val = xcalloc(sizeof(ShardWriter), "val shard writer");
    *train = (ShardWriter){.dir = out_dir, .prefix = "train", .shard_tokens = shard_tokens, .fd = -1};
    *val = (ShardWriter){.dir = out_dir, .prefix = "val", .shard_tokens = shard_tokens, .fd = -1};
    Prepare pp = {.val_fraction = val_fraction, .train = train, .val = val};
    pp.t_start = pp.t_progress = now_seconds();
    Document doc = {.min_bytes = (size_t)min_bytes};
    doc.pending = xmalloc((size_t)min_bytes, "document prefix buffer");  // (min_bytes)

    for (int i = 0; i < n_inputs; i++) read_input(&pp, &doc, inputs[i], split_on);
    writer_close_shard(train);
    writer_close_shard(val);
    progress(&pp, true);
    // Make the renames durable too.
    int dfd = open(out_dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }

    printf("prepared %d input file(s), %.1f MB, into %s\n", n_inputs,
           (double)pp.bytes_read / 1e6, out_dir);
    printf("documents: %llu kept, %llu skipped (shorter than --min-bytes %llu)\n",
           (unsigned long long)pp.next_doc, (unsigned long long)pp.skipped,
           (unsigned long long)min_bytes);
    printf("train: %llu documents, %llu tokens, %d files (%s/train_*.bin)\n",
           (unsigned long long)train->docs, (unsigned long long)train->tokens, train->files,
           out_dir);
    printf("val: %llu documents, %llu tokens, %d files (%s/val_*.bin)\n",
           (unsigned long long)val->docs, (unsigned long long)val->tokens, val->files, out_dir);
    printf("files written: %d\n", train->files + val->files);
    printf("vocab: byte-level, %d ids (bytes 0..255, end-of-text %d): set "
           "model.vocab_size to %d or more\n", BYTE_VOCAB_SIZE, BYTE_EOT, BYTE_VOCAB_SIZE);
    fflush(stdout);
    free(doc.pending);
    free(train);
    free(val);
    free(inputs);
    return 0;
}

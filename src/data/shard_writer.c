// data/shard_writer.c — llm.c token shards, uint16 or uint32 (rules in shard_writer.h).
#define _POSIX_C_SOURCE 200809L
#include "data/shard_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520  // llm.c magic for uint16 tokens (data/tokens.h)
#define SHARD_MAGIC_U32 20240801  // ... and for uint32 tokens
#define SHARD_BUF_BYTES (1 << 18)

void shard_writer_init(ShardWriter *w, const char *dir, const char *prefix,
                       uint64_t shard_tokens, int wide) {
    *w = (ShardWriter){.dir = dir, .prefix = prefix, .shard_tokens = shard_tokens,
                       .wide = wide, .fd = -1};
    w->buf = xmalloc(SHARD_BUF_BYTES, "shard write buffer");
}

static void flush(ShardWriter *w) {
    write_fully(w->fd, w->buf, w->buf_bytes, w->tmp_path);
    w->buf_bytes = 0;
}

static void open_shard(ShardWriter *w) {
    snprintf(w->path, sizeof w->path, "%s/%s_%06d.bin", w->dir, w->prefix, w->index);
    snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp", w->path);
    // O_CLOEXEC: a gzip started later must not inherit the shard.
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) die_errno("cannot create shard %s", w->tmp_path);
    // Zero header for now (magic 0: not a valid shard); the real one goes in at close.
    int32_t header[SHARD_HEADER_INTS] = {0};  // (256)
    write_fully(w->fd, header, sizeof header, w->tmp_path);
    w->count = 0;
}

static void close_shard(ShardWriter *w) {
    if (w->fd < 0) return;
    flush(w);
    if (w->count > (uint64_t)INT32_MAX)
        die("shard %s would hold %llu tokens, more than the int32 count of the llm.c "
            "header allows; lower --shard-tokens or split the input into documents",
            w->path, (unsigned long long)w->count);
    int32_t header[SHARD_HEADER_INTS] = {0};  // (256)
    header[0] = w->wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16;
    header[1] = 1;
    header[2] = (int32_t)w->count;
    if (lseek(w->fd, 0, SEEK_SET) != 0) die_errno("cannot seek in shard %s", w->tmp_path);
    write_fully(w->fd, header, sizeof header, w->tmp_path);
    if (fsync(w->fd) != 0) die_errno("cannot fsync shard %s", w->tmp_path);
    if (close(w->fd) != 0) die_errno("cannot close shard %s", w->tmp_path);
    if (rename(w->tmp_path, w->path) != 0)
        die_errno("cannot rename %s to %s", w->tmp_path, w->path);
    w->fd = -1;
    w->index++;
    w->files++;
}

static inline void put_one(ShardWriter *w, uint32_t id) {
    if (w->buf_bytes + 4 > SHARD_BUF_BYTES) flush(w);
    if (w->wide) {
        memcpy(w->buf + w->buf_bytes, &id, 4);  // little-endian host (x86, arm64)
        w->buf_bytes += 4;
    } else {
        uint16_t v = (uint16_t)id;
        memcpy(w->buf + w->buf_bytes, &v, 2);
        w->buf_bytes += 2;
    }
}

void shard_writer_put(ShardWriter *w, const uint32_t *ids, size_t n) {
    if (n == 0) return;
    if (w->fd < 0) open_shard(w);
    for (size_t i = 0; i < n; i++) put_one(w, ids[i]);
    w->count += n;
    w->tokens += n;
}

void shard_writer_end_document(ShardWriter *w, uint32_t eot) {
    if (w->fd < 0) open_shard(w);  // an empty kept document (--min-bytes 0)
    put_one(w, eot);
    w->count++;
    w->tokens++;
    w->docs++;
    if (w->count >= w->shard_tokens) close_shard(w);
}

void shard_writer_finish(ShardWriter *w) {
    close_shard(w);
    free(w->buf);
    w->buf = NULL;
}

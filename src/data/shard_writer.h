// data/shard_writer.h — writes one split ("train" or "val") of llm.c token shards:
// DIR/PREFIX_000000.bin, DIR/PREFIX_000001.bin, ... Header: 256 int32 (magic
// 20240520 with uint16 tokens, 20240801 with uint32 tokens; version 1; count),
// then the tokens (format in data/tokens.h). A shard is closed at the first
// document end at or after shard_tokens tokens. Each is written as NAME.tmp,
// fsync'd and renamed when complete, so a crash never leaves a shard that looks whole.
#ifndef FEMTOTRON_SHARD_WRITER_H
#define FEMTOTRON_SHARD_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *dir;
    const char *prefix;
    uint64_t shard_tokens;   // close a shard at a document end past this
    int wide;                // 1: uint32 tokens, 0: uint16
    int fd;                  // open shard, -1 when none
    int index;               // number of the open (or next) shard
    char path[4096];         // final name of the open shard
    char tmp_path[4100];     // name while being written
    uint64_t count;          // tokens in the open shard
    uint8_t *buf;            // (SHARD_BUF_BYTES) tokens not yet written
    size_t buf_bytes;
    uint64_t docs, tokens;   // totals over every shard
    int files;
} ShardWriter;

void shard_writer_init(ShardWriter *w, const char *dir, const char *prefix,
                       uint64_t shard_tokens, int wide);
// Append ids(n) to the current document (ids must fit the token width).
void shard_writer_put(ShardWriter *w, const uint32_t *ids, size_t n);
// End the current document with the end-of-text id; may close the shard.
void shard_writer_end_document(ShardWriter *w, uint32_t eot);
// Close the open shard (if any) and free the buffer.
void shard_writer_finish(ShardWriter *w);

#endif

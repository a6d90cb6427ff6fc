// data/prepare_impl.h — the state of `femtotron prepare` (data/prepare.c), shared by
// its option handling (prepare.c), its input readers (prepare_input.c) and its
// encode-and-write pipeline (prepare_batch.c). Not a public API.
#ifndef FEMTOTRON_PREPARE_IMPL_H
#define FEMTOTRON_PREPARE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "data/shard_writer.h"
#include "data/tokenizer.h"

#define READ_CHUNK (1 << 20)
#define SEG_BYTES (256 << 10)           // a long document is cut after about this much
#define BATCH_BYTES_PER_THREAD (4 << 20)  // text encoded per batch and thread

// A piece of a document to encode; the pieces of a batch are encoded in parallel.
typedef struct {
    size_t off, len;        // bytes in the batch arena
    ShardWriter *target;
    bool starts_doc;        // the document's first piece: the post-processor's prefix precedes
    bool ends_doc;          // the document's last piece: its suffix and end-of-text follow
    int tid;                // thread that encoded it, and where its ids are
    size_t ids_off, ids_n;
} Segment;

typedef struct {
    // options
    double val_fraction;
    size_t min_bytes;
    int threads;
    const Tokenizer *tok;
    uint32_t eot;
    // state of the reader
    uint64_t next_doc;      // k of the next kept document
    uint64_t skipped;
    ShardWriter *train, *val;
    uint64_t bytes_read, total_bytes;  // total 0: unknown (compressed inputs, standard input)
    size_t file_index, n_files;
    double t_start, t_progress;
    // the batch: bytes of complete segments, then the open document's bytes
    uint8_t *arena;         // (arena_cap)
    size_t used, arena_cap, batch_bytes;
    Segment *seg;           // (seg_cap)
    size_t n_seg, seg_cap;
    // the open document: its not yet segmented bytes are arena[doc_start, used)
    size_t doc_start, doc_bytes, doc_scan;
    int doc_pieces;         // segments the open document has been cut into so far
    ShardWriter *doc_target;  // NULL until the document is known to be kept
    // encoding
    TokenizerState **states;  // (threads)
    TokenList *ids;           // (threads) each thread's ids of the batch
    uint64_t invalid_utf8;
    double encode_seconds;  // wall time of the parallel encoding
    uint64_t encoded_bytes;
} Prepare;

static inline bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// prepare_batch.c: the progress line; documents into segments into batches,
// encoded in parallel and written in order.
void prepare_progress(Prepare *pp, bool final);
void prepare_flush_batch(Prepare *pp);
void prepare_doc_add(Prepare *pp, const uint8_t *bytes, size_t n);
void prepare_doc_end(Prepare *pp);

// prepare_input.c: reading the documents of an input's text (data/decompress.h
// opens it); `name` is how messages call the input.
void prepare_read_text(Prepare *pp, FILE *f, const char *split_on);
void prepare_read_jsonl(Prepare *pp, FILE *f, const char *name, const char *field);
// Whether an input ("-": standard input, text unless --format jsonl) is JSONL.
bool prepare_is_jsonl(const char *path, const char *format);

// prepare_report.c: the summary on stdout, with the documents and tokens of each
// split, and the warnings about an empty or tiny validation split.
void prepare_report(const Prepare *pp, const char *out_dir);

#endif

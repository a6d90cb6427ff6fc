// data/prepare_batch.c — the encode-and-write pipeline of `femtotron prepare`: kept
// documents are cut into segments (where tokenizer_safe_cut allows), collected into
// batches, encoded by --threads threads at once and written to the train or val
// shards in order; and the progress line. See data/prepare.c for the rules.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/prepare_impl.h"
#include "util.h"

void prepare_progress(Prepare *pp, bool final) {
    double now = now_seconds();
    if (!final && now - pp->t_progress < 0.5) return;
    pp->t_progress = now;
    double mb = (double)pp->bytes_read / 1e6, dt = now - pp->t_start;
    char bar[64] = "";
    if (pp->total_bytes) {
        double f = fmin(1.0, (double)pp->bytes_read / (double)pp->total_bytes);
        int filled = (int)(f * 20);
        bar[0] = '[';
        for (int i = 0; i < 20; i++) bar[1 + i] = i < filled ? '#' : '.';
        snprintf(bar + 21, sizeof bar - 21, "] %3.0f%% ", 100 * f);
    } else {
        snprintf(bar, sizeof bar, "file %zu/%zu ", pp->file_index + 1, pp->n_files);
    }
    fprintf(stderr, "\rprepare: %s%.1f MB read, %.1f MB/s, %llu tokens written", bar, mb,
            dt > 0 ? mb / dt : 0.0, (unsigned long long)(pp->train->tokens + pp->val->tokens));
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

// ---------------------------------------------------------------- batches

static void add_segment(Prepare *pp, size_t len, bool ends_doc) {
    if (pp->n_seg == pp->seg_cap) {
        pp->seg_cap = pp->seg_cap ? 2 * pp->seg_cap : 4096;
        pp->seg = realloc(pp->seg, pp->seg_cap * sizeof(Segment));
        if (!pp->seg) die("out of memory for %zu document segments", pp->seg_cap);
    }
    pp->seg[pp->n_seg++] = (Segment){.off = pp->doc_start, .len = len, .target = pp->doc_target,
                                     .starts_doc = pp->doc_pieces++ == 0, .ends_doc = ends_doc};
    pp->doc_start += len;
    pp->doc_scan = 0;
}

// Encode the batch's segments in parallel, write them in order, and move the
// open document's bytes to the front of the arena.
void prepare_flush_batch(Prepare *pp) {
    int n = (int)pp->n_seg;
    for (int t = 0; t < pp->threads; t++) pp->ids[t].n = 0;
    double t0 = now_seconds();
#pragma omp parallel num_threads(pp->threads)
    {
        int tid = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            Segment *s = &pp->seg[i];
            s->tid = tid;
            s->ids_off = pp->ids[tid].n;
            tokenizer_encode(pp->states[tid], pp->arena + s->off, s->len, &pp->ids[tid]);
            s->ids_n = pp->ids[tid].n - s->ids_off;
        }
    }
    pp->encode_seconds += now_seconds() - t0;
    // A document is written as tokenizers' encode(doc) with its special tokens (the
    // post-processor's, e.g. Llama 3's <|begin_of_text|> first), then end-of-text.
    int n_pre, n_post;
    const uint32_t *pre = tokenizer_special_ids(pp->tok, 0, &n_pre), *post = tokenizer_special_ids(pp->tok, 1, &n_post);
    for (int i = 0; i < n; i++) {
        const Segment *s = &pp->seg[i];
        pp->encoded_bytes += s->len;
        if (s->starts_doc && n_pre) shard_writer_put(s->target, pre, (size_t)n_pre);
        shard_writer_put(s->target, pp->ids[s->tid].ids + s->ids_off, s->ids_n);
        if (s->ends_doc && n_post) shard_writer_put(s->target, post, (size_t)n_post);
        if (s->ends_doc) shard_writer_end_document(s->target, pp->eot);
    }
    pp->n_seg = 0;
    size_t open = pp->used - pp->doc_start;
    memmove(pp->arena, pp->arena + pp->doc_start, open);
    pp->used = open;
    pp->doc_start = 0;
}

// ---------------------------------------------------------------- documents

static void doc_keep(Prepare *pp) {
    double F = pp->val_fraction, k = (double)pp->next_doc;
    bool to_val = floor((k + 1.0) * F) > floor(k * F);
    pp->doc_target = to_val ? pp->val : pp->train;
    pp->next_doc++;
}

void prepare_doc_add(Prepare *pp, const uint8_t *bytes, size_t n) {
    if (pp->used + n > pp->arena_cap) {
        while (pp->used + n > pp->arena_cap) pp->arena_cap *= 2;
        pp->arena = realloc(pp->arena, pp->arena_cap);
        if (!pp->arena) die("out of memory holding a document of %zu bytes", pp->used + n);
    }
    memcpy(pp->arena + pp->used, bytes, n);
    pp->used += n;
    pp->doc_bytes += n;
    if (!pp->doc_target && pp->doc_bytes >= pp->min_bytes) doc_keep(pp);
    // Cut a kept document that has grown long where its encoding cannot change.
    while (pp->doc_target && pp->used - pp->doc_start >= 2 * SEG_BYTES) {
        size_t len = pp->used - pp->doc_start;
        size_t from = pp->doc_scan > SEG_BYTES ? pp->doc_scan : SEG_BYTES;
        size_t cut = tokenizer_safe_cut(pp->tok, pp->arena + pp->doc_start, len, from);
        if (!cut) {
            pp->doc_scan = len;  // resume the search here when more text arrives
            break;
        }
        add_segment(pp, cut, false);
        if (pp->doc_start >= pp->batch_bytes) prepare_flush_batch(pp);
    }
}

void prepare_doc_end(Prepare *pp) {
    if (!pp->doc_target && pp->doc_bytes >= pp->min_bytes) doc_keep(pp);
    if (pp->doc_target) {
        add_segment(pp, pp->used - pp->doc_start, true);
    } else {
        pp->skipped++;
        pp->used = pp->doc_start;  // drop its bytes
    }
    pp->doc_target = NULL;
    pp->doc_bytes = 0;
    pp->doc_scan = 0;
    pp->doc_pieces = 0;
    if (pp->used >= pp->batch_bytes) prepare_flush_batch(pp);
}

// data/prepare_report.c — what `femtotron prepare` says when it is done: the
// inputs, the documents and tokens that went to train and to val, the encoding
// speed and the vocabulary on stdout; and a warning on stderr when the validation
// split is empty or too small to measure anything, since an empty val_*.bin glob
// otherwise surfaces only much later, when a training run is configured with it.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "data/byte_tokenizer.h"
#include "data/prepare_impl.h"
#include "util.h"

// A validation split smaller than either is "tiny": a loss averaged over fewer
// documents is mostly noise, and fewer tokens than four sequences of 1024 leave
// most training set-ups (data.val needs at least seq_length + 1 tokens) one
// batch or none to evaluate on.
#define VAL_FEW_DOCS 10
#define VAL_FEW_TOKENS 4096

static double percent(uint64_t part, uint64_t whole) { return whole ? 100.0 * (double)part / (double)whole : 0.0; }

// The fewest kept documents with which the split rule (document k goes to val
// iff floor((k+1)F) > floor(kF)) sends one to val: the smallest n with
// floor(nF) >= 1, found from 1/F and corrected for rounding.
static uint64_t docs_for_first_val(double F) {
    double n = ceil(1.0 / F);
    while (floor(n * F) < 1.0) n += 1.0;
    while (n > 1.0 && floor((n - 1.0) * F) >= 1.0) n -= 1.0;
    return (uint64_t)n;
}

static void warn_about_val(const Prepare *pp) {
    const ShardWriter *val = pp->val;
    const uint64_t docs = pp->next_doc;
    if (pp->val_fraction <= 0.0 || docs == 0) return;  // none asked for, or nothing at all
    if (val->docs == 0) {
        warn("prepare: the validation split is EMPTY: --val-fraction %g of %llu document(s) gives "
             "none (at least %llu documents are needed for one); no val_*.bin was written. "
             "Give more documents (e.g. --split-on for text, or JSONL with one per line) or a larger "
             "--val-fraction", pp->val_fraction, (unsigned long long)docs,
             (unsigned long long)docs_for_first_val(pp->val_fraction));
    } else if (val->docs < VAL_FEW_DOCS || val->tokens < VAL_FEW_TOKENS) {
        warn("prepare: the validation split is tiny: %llu document(s), %llu tokens (fewer than %d "
             "documents or %d tokens): its loss will be noisy, and training reads it only with a "
             "seq_length below %llu. Give more documents or a larger --val-fraction",
             (unsigned long long)val->docs, (unsigned long long)val->tokens, VAL_FEW_DOCS,
             VAL_FEW_TOKENS, (unsigned long long)val->tokens);
    }
}

void prepare_report(const Prepare *pp, const char *out_dir) {
    const ShardWriter *train = pp->train, *val = pp->val;
    const uint64_t docs = train->docs + val->docs, tokens = train->tokens + val->tokens;
    printf("prepared %zu input file(s), %.1f MB, into %s\n", pp->n_files, (double)pp->bytes_read / 1e6,
           out_dir);
    printf("documents: %llu kept, %llu skipped (shorter than --min-bytes %llu)\n",
           (unsigned long long)pp->next_doc, (unsigned long long)pp->skipped,
           (unsigned long long)pp->min_bytes);
    printf("train: %llu documents, %llu tokens, %d files (%s/train_*.bin)\n",
           (unsigned long long)train->docs, (unsigned long long)train->tokens, train->files, out_dir);
    printf("val: %llu documents, %llu tokens, %d files (%s/val_*.bin)\n", (unsigned long long)val->docs,
           (unsigned long long)val->tokens, val->files, out_dir);
    printf("split: train %.1f%% of the documents and %.1f%% of the tokens, val %.1f%% and %.1f%% "
           "(--val-fraction %g)\n", percent(train->docs, docs), percent(train->tokens, tokens),
           percent(val->docs, docs), percent(val->tokens, tokens), pp->val_fraction);
    printf("files written: %d\n", train->files + val->files);
    printf("encoding: %.1f MB in %.2f s on %d thread(s), %.1f MB/s\n", (double)pp->encoded_bytes / 1e6,
           pp->encode_seconds, pp->threads,
           pp->encode_seconds > 0 ? (double)pp->encoded_bytes / 1e6 / pp->encode_seconds : 0.0);
    const Tokenizer *tok = pp->tok;
    if (tokenizer_is_byte_level(tok)) {
        printf("vocab: byte-level, %d ids (bytes 0..255, end-of-text %d): set "
               "model.vocab_size to %d or more\n", BYTE_VOCAB_SIZE, BYTE_EOT, BYTE_VOCAB_SIZE);
    } else {
        size_t len;
        const uint8_t *eb = tokenizer_token_bytes(tok, pp->eot, &len);
        uint32_t vocab = tokenizer_vocab_size(tok);
        printf("vocab: %s; end-of-text \"%.*s\" = %lld; %s tokens: set model.vocab_size to %u "
               "or more\n", tokenizer_describe(tok), (int)len, (const char *)eb, (long long)pp->eot,
               vocab > 65536 ? "uint32" : "uint16", vocab);
    }
    fflush(stdout);
    warn_about_val(pp);
    if (pp->invalid_utf8)
        warn("prepare: the input held %llu bytes that are not valid UTF-8; each was encoded as "
             "its byte token (Hugging Face tokenizers accepts valid UTF-8 only)",
             (unsigned long long)pp->invalid_utf8);
}

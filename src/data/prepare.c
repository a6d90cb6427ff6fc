// data/prepare.c — `femtotron prepare`: text or JSONL inputs (plain, gzip or zstd;
// files, directories, globs, lists of them, standard input) → llm.c token shards
// split into train and val, with the byte-level tokenizer or a Hugging Face
// tokenizer.json (data/tokenizer.h).
//
// Inputs: data/input_list.h expands the names into files in a fixed order, and
// data/decompress.h reads each as its text. prepare is one process (main.c does
// not start MPI for it), so any number of inputs can be named on its command line.
//
// Documents: each text input file is one document; with --split-on LINE, each run
// of lines between lines equal to LINE (a trailing "\r" ignored) is one, its lines
// keeping their newlines; the separator lines themselves are dropped. Each line of
// a JSONL input (.jsonl or .ndjson, also .gz / .zst, or --format jsonl) is one document: the string
// in its --field (default "text"); blank lines are skipped. Documents never span
// two files. Documents shorter than --min-bytes bytes (default 1, so empty chunks
// between separators disappear) are skipped and not counted.
// Every kept document becomes its tokens, with the tokenizer post-processor's special
// tokens around them (Llama 3's <|begin_of_text|> first), then the end-of-text token;
// prepare.json and the tokenizer files are written beside the shards (data/prepared.h).
// Split: kept document k (from 0, across all inputs in the order given) goes to
// val iff floor((k+1)*F) > floor(k*F) in double arithmetic, so val gets ~F of the
// documents, spread evenly through the corpus, and any tool can recompute it.
// Shards: see data/shard_writer.h; uint16 tokens when the vocabulary has at most
// 65536 ids, uint32 otherwise.
//
// Threads: one thread reads and decides documents, splits, and the order of
// everything; a batch of document segments is then encoded by --threads threads
// at once and written in order, so the shards are identical for any thread count.
// A long document is cut into segments only where tokenizer_safe_cut says its
// encoding cannot change; otherwise it is encoded whole.
//
// This file: the command line and the output directory; the inputs are read in
// prepare_input.c, encoded and written in prepare_batch.c, and the summary is
// prepare_report.c's.
#define _POSIX_C_SOURCE 200809L
#include "data/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/byte_tokenizer.h"
#include "data/decompress.h"
#include "data/input_list.h"
#include "data/prepare_impl.h"
#include "data/prepared.h"
#include "data/shard_writer.h"
#include "data/tokenizer.h"
#include "util.h"

static const char *const usage_text =
    "usage: femtotron prepare --input NAME... --output DIR [options]\n"
    "\n"
    "Turn text into llm.c token shards (train_NNNNNN.bin, val_NNNNNN.bin). The default\n"
    "tokenizer is byte-level (uint16; ids 0..255 are bytes, 256 is end-of-text;\n"
    "vocab_size 257); --tokenizer uses a Hugging Face tokenizer.json byte-level BPE\n"
    "(GPT-2, SmolLM, Llama 3, ...). A document is the tokenizer's encode(text) with its\n"
    "post-processor's special tokens (Llama 3: <|begin_of_text|> first), then end-of-text.\n"
    "\n"
    "  --input NAME...       inputs, read in the order given; NAME is a file, a directory\n"
    "                        (every file below it, see below), a glob in quotes ('*.txt';\n"
    "                        expanded by prepare, matches in byte order) or - (standard\n"
    "                        input, e.g. from a converter: text, or JSONL with --format\n"
    "                        jsonl). Plain, gzip and zstd data are told apart by their\n"
    "                        first bytes; a .gz or .zst name must hold that format\n"
    "  --input-list FILE     read the names from FILE, one per line (- : standard input);\n"
    "                        each is expanded like an --input name; blank lines skipped\n"
    "  --include GLOB        directories: read the files whose name matches GLOB (may be\n"
    "                        repeated) instead of the default: names ending in .txt,\n"
    "                        .text, .md, .jsonl or .ndjson, each also with .gz or .zst.\n"
    "                        Hidden files and directories (.name) are always skipped;\n"
    "                        each directory's entries are read in byte order, depth first\n"
    "  --output DIR          where train_NNNNNN.bin and val_NNNNNN.bin go (created)\n"
    "  --tokenizer FILE      Hugging Face tokenizer.json (byte-level BPE) to encode with\n"
    "  --eot TOKEN           end-of-text token written after each document (default:\n"
    "                        <|endoftext|>, <|end_of_text|>, </s> or <eos>, the first\n"
    "                        the tokenizer has)\n"
    "  --format F            auto (default: .jsonl and .ndjson files, also .gz or .zst,\n"
    "                        are JSONL, others and standard input text), text or jsonl\n"
    "  --field NAME          JSONL: the string field holding a document (default text)\n"
    "  --val-fraction F      fraction of documents for validation (default 0.05):\n"
    "                        document k goes to val iff floor((k+1)F) > floor(kF)\n"
    "  --split-on LINE       text: a line equal to LINE separates documents (e.g. \"%\"\n"
    "                        for fortune files); default: each file is one document\n"
    "  --shard-tokens N      start a new shard at the first document end after N\n"
    "                        tokens (default 100000000)\n"
    "  --min-bytes M         skip documents shorter than M bytes (default 1)\n"
    "  --threads T           encoding threads (default: all cores); the output does\n"
    "                        not depend on T\n"
    "  --force               replace existing train_*.bin / val_*.bin shards in DIR\n"
    "  --help                print this help\n"
    "\n"
    "prepare runs as one process (no mpirun; it refuses to run as several ranks) and\n"
    "warns when the validation split is empty or tiny (fewer than 10 documents or\n"
    "4096 tokens).\n";

// ---------------------------------------------------------------- output directory

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

// ---------------------------------------------------------------- options

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

// What the command line names as inputs, in order, before expansion: expansion
// waits for every --include.
typedef struct {
    const char *name;
    bool is_list;  // --input-list FILE rather than --input NAME
} InputName;

int prepare_main(int argc, char **argv) {
    InputName *names = xmalloc((size_t)argc * sizeof(InputName), "input names");  // (argc)
    const char **include = xmalloc((size_t)argc * sizeof(char *), "--include globs");  // (argc)
    int n_names = 0, n_include = 0;
    const char *out_dir = NULL, *split_on = NULL, *tok_path = NULL, *eot_text = NULL;
    const char *field = NULL, *format = "auto";
    double val_fraction = 0.05;
    uint64_t shard_tokens = 100000000, min_bytes = 1, threads = 0;
    bool force = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            free(names);
            free(include);
            return 0;
        } else if (!strcmp(a, "--force")) {
            force = true;
        } else if (!strcmp(a, "--input")) {
            // Every following argument up to the next option is an input name.
            int before = n_names;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                names[n_names++] = (InputName){argv[++i], false};
            if (n_names == before) die("prepare: --input needs at least one file, directory, glob or -");
        } else if (!strcmp(a, "--input-list") || !strcmp(a, "--include")) {
            if (!has_value) die("prepare: %s needs a value (see femtotron prepare --help)", a);
            if (!strcmp(a, "--include")) include[n_include++] = argv[++i];
            else names[n_names++] = (InputName){argv[++i], true};
        } else if (!strcmp(a, "--output") || !strcmp(a, "--val-fraction") ||
                   !strcmp(a, "--split-on") || !strcmp(a, "--shard-tokens") ||
                   !strcmp(a, "--min-bytes") || !strcmp(a, "--tokenizer") || !strcmp(a, "--eot") ||
                   !strcmp(a, "--field") || !strcmp(a, "--format") || !strcmp(a, "--threads")) {
            if (!has_value) die("prepare: %s needs a value (see femtotron prepare --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--output")) out_dir = v;
            else if (!strcmp(a, "--split-on")) split_on = v;
            else if (!strcmp(a, "--tokenizer")) tok_path = v;
            else if (!strcmp(a, "--eot")) eot_text = v;
            else if (!strcmp(a, "--field")) field = v;
            else if (!strcmp(a, "--format")) format = v;
            else if (!strcmp(a, "--val-fraction")) val_fraction = parse_double(a, v);
            else if (!strcmp(a, "--shard-tokens")) shard_tokens = parse_count(a, v);
            else if (!strcmp(a, "--threads")) threads = parse_count(a, v);
            else min_bytes = parse_count(a, v);
        } else {
            die("prepare: unknown argument '%s' (see femtotron prepare --help)", a);
        }
    }
    if (n_names == 0) die("prepare: no --input or --input-list given (see femtotron prepare --help)");
    if (!out_dir) die("prepare: no --output directory given (see femtotron prepare --help)");
    if (!(val_fraction >= 0.0 && val_fraction <= 1.0))
        die("prepare: --val-fraction %g must lie in [0, 1]", val_fraction);
    if (shard_tokens < 1 || shard_tokens > (uint64_t)INT32_MAX)
        die("prepare: --shard-tokens %llu must lie in [1, %d] (the llm.c header count is int32)",
            (unsigned long long)shard_tokens, INT32_MAX);
    if (min_bytes > ((uint64_t)1 << 30))
        die("prepare: --min-bytes %llu is larger than 1 GiB", (unsigned long long)min_bytes);
    if (strcmp(format, "auto") && strcmp(format, "text") && strcmp(format, "jsonl"))
        die("prepare: --format must be auto, text or jsonl, got '%s'", format);
    if (threads > 256) die("prepare: --threads %llu is more than 256", (unsigned long long)threads);
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (uint64_t)(cores < 64 ? cores : 64) : 1;
    }
    InputList inputs = {.include = include, .n_include = (size_t)n_include};
    for (int i = 0; i < n_names; i++) {
        if (names[i].is_list) input_list_add_listed(&inputs, names[i].name);
        else input_list_add(&inputs, names[i].name);
    }
    if (inputs.n == 0) die("prepare: the --input-list names no input (every line is blank)");
    size_t n_inputs = inputs.n;
    size_t n_jsonl = 0;
    for (size_t i = 0; i < n_inputs; i++) n_jsonl += prepare_is_jsonl(inputs.paths[i], format);
    if (field && n_jsonl == 0)
        die("prepare: --field applies to JSONL inputs only (.jsonl, .ndjson, either with .gz or .zst, "
            "or --format jsonl)");
    if (split_on && n_jsonl == n_inputs)
        die("prepare: --split-on applies to text inputs only; each JSONL line is a document");

    // Check every input before touching the output, so a typo costs nothing.
    // The progress bar needs the text's size, which compressed inputs and standard
    // input do not tell; it then counts files instead.
    uint64_t total_bytes = 0;
    bool size_unknown = false;
    for (size_t i = 0; i < n_inputs; i++) {
        const char *path = inputs.paths[i];
        if (!strcmp(path, "-")) {
            size_unknown = true;
            continue;
        }
        struct stat st;
        if (stat(path, &st) != 0) die_errno("cannot open input %s", path);
        if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
            die("input %s is not a file", path);
        if (access(path, R_OK) != 0) die_errno("cannot read input %s", path);
        total_bytes += (uint64_t)st.st_size;
        size_unknown |= decompress_suffix_len(path) > 0 || !S_ISREG(st.st_mode);
    }
    Tokenizer *tok = tok_path ? tokenizer_load(tok_path) : tokenizer_byte_level();
    int64_t eot = eot_text ? tokenizer_token_id(tok, eot_text) : tokenizer_default_eot(tok);
    if (eot < 0) {
        if (eot_text) die("prepare: --eot %s is not a token of %s", eot_text, tokenizer_describe(tok));
        die("prepare: tokenizer %s has no end-of-text token (<|endoftext|>, <|end_of_text|>, </s>, "
            "<eos>); name one with --eot", tokenizer_describe(tok));
    }
    uint32_t vocab = tokenizer_vocab_size(tok);
    int wide = vocab > 65536;
    make_dirs(out_dir, "prepare --output");
    clear_old_shards(out_dir, force);

    ShardWriter *train = xcalloc(sizeof(ShardWriter), "train shard writer");
    ShardWriter *val = xcalloc(sizeof(ShardWriter), "val shard writer");
    shard_writer_init(train, out_dir, "train", shard_tokens, wide);
    shard_writer_init(val, out_dir, "val", shard_tokens, wide);
    Prepare pp = {.val_fraction = val_fraction, .min_bytes = (size_t)min_bytes, .threads = (int)threads,
                  .tok = tok, .eot = (uint32_t)eot, .train = train, .val = val,
                  .total_bytes = size_unknown ? 0 : total_bytes, .n_files = n_inputs};
    pp.batch_bytes = (size_t)BATCH_BYTES_PER_THREAD * (size_t)threads;
    pp.arena_cap = pp.batch_bytes + 4 * SEG_BYTES;
    pp.arena = xmalloc(pp.arena_cap, "prepare batch");
    pp.states = xmalloc((size_t)threads * sizeof(TokenizerState *), "tokenizer states");
    pp.ids = xcalloc((size_t)threads * sizeof(TokenList), "token lists");
    for (int t = 0; t < (int)threads; t++) pp.states[t] = tokenizer_state_new(tok);
    pp.t_start = pp.t_progress = now_seconds();

    for (size_t i = 0; i < n_inputs; i++) {
        const char *path = inputs.paths[i];
        pp.file_index = i;
        FILE *f = decompress_open(path);
        if (prepare_is_jsonl(path, format))
            prepare_read_jsonl(&pp, f, decompress_input_name(path), field ? field : "text");
        else prepare_read_text(&pp, f, split_on);
        decompress_close(f, path);
    }
    prepare_flush_batch(&pp);
    shard_writer_finish(train);
    shard_writer_finish(val);
    // What made these shards, and the tokenizer files, for the run's checkpoints.
    prepared_write(out_dir, tok_path, vocab, eot, prepared_bos_id(tok, tok_path));
    prepare_progress(&pp, true);
    // Make the renames durable too.
    int dfd = open(out_dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    for (int t = 0; t < (int)threads; t++) {
        pp.invalid_utf8 += tokenizer_state_invalid_utf8(pp.states[t]);
        tokenizer_state_free(pp.states[t]);
        token_list_free(&pp.ids[t]);
    }

    prepare_report(&pp, out_dir);
    // Nothing to train on: an error here, after the report and where the cause is
    // known, rather than `train` finding no shard to match its glob later.
    if (train->tokens + val->tokens == 0)
        die("prepare: no tokens written to %s: %llu document(s) kept, %llu skipped as shorter than "
            "--min-bytes %llu (empty inputs, or a --split-on that leaves only separators?)",
            out_dir, (unsigned long long)pp.next_doc, (unsigned long long)pp.skipped,
            (unsigned long long)pp.min_bytes);
    free(pp.arena);
    free(pp.seg);
    free(pp.states);
    free(pp.ids);
    free(train);
    free(val);
    input_list_free(&inputs);
    free(names);
    free(include);
    tokenizer_free(tok);
    return 0;
}

// gen/generate.c — `femtotron generate` (usage below). The prompt is encoded (with
// the tokenizer's post-processor tokens, e.g. a BOS, as Hugging Face's
// tokenizer(prompt) does), run through the model once, then each new token is one
// forward over the key/value cache. Text goes to stdout as it is produced: the
// prompt, then every token's bytes. Generation stops after --max-new-tokens, at the
// end of the model's context, or at an end-of-sequence token (the tokenizer's
// end-of-text and the eos_token_id of the model's config.json; not printed).
#define _POSIX_C_SOURCE 200809L
#include "gen/generate.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "gen/kv_model.h"
#include "gen/sampler.h"
#include "ops/ops.h"
#include "util.h"

// The largest vocabulary generate decodes as bytes without a tokenizer: the 257 ids
// of the byte tokenizer, padded (for tensor parallelism, say) but not a BPE's.
#define BYTE_VOCAB_MAX_MODEL 1024

static const char *const usage_text =
    "usage: femtotron generate --model DIR --prompt TEXT [options]\n"
    "\n"
    "Sample a continuation of TEXT from a model, streaming it to stdout.\n"
    "\n"
    "  --model DIR           a femtotron checkpoint (checkpoint.dir, or one step_NNNNNNN\n"
    "                        in it) or a Hugging Face Llama directory (config.json +\n"
    "                        model.safetensors or its sharded index)\n"
    "  --prompt TEXT         the text to continue (default: empty, which starts from\n"
    "                        the end-of-text token)\n"
    "  --tokenizer FILE      a Hugging Face tokenizer.json (byte-level BPE); default:\n"
    "                        DIR/tokenizer.json if there is one, else byte-level\n"
    "  --max-new-tokens N    tokens to generate at most (default 200)\n"
    "  --temperature T       softmax temperature; 0 = greedy (default 0.8)\n"
    "  --top-k K             sample among the K most likely tokens (default 0 = all)\n"
    "  --top-p P             nucleus: the most likely tokens holding mass P (default 1)\n"
    "  --seed S              seed of the draws: the same seed gives the same text\n"
    "                        (default 1234)\n"
    "  --ignore-eos          do not stop at end-of-text / eos tokens\n"
    "  --threads T           threads (default: all cores; 1 for models under 4M weights)\n"
    "  --print-ids           print the prompt's and the generated token ids to stderr\n"
    "  --help                print this help\n";

static double parse_num(const char *opt, const char *s, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        die("generate: %s needs a number in [%g, %g], got '%s'", opt, lo, hi, s);
    return v;
}

// eos_token_id of DIR/config.json (an integer or a list), appended to ids; DIR is
// the resolved model directory (kv_model_resolve).
static int read_eos_ids(const char *dir, int64_t *ids, int n, int max) {
    char path[CFG_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!path_is_file(path)) return n;
    char *text = read_text_file(path);
    cJSON *j = cJSON_Parse(text);
    const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "eos_token_id") : NULL;
    if (cJSON_IsNumber(e) && n < max) ids[n++] = (int64_t)e->valuedouble;
    if (cJSON_IsArray(e))
        for (const cJSON *v = e->child; v && n < max; v = v->next)
            if (cJSON_IsNumber(v)) ids[n++] = (int64_t)v->valuedouble;
    cJSON_Delete(j);
    free(text);
    return n;
}

int generate_main(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = "", *tok_path = NULL;
    long max_new = 200, top_k = 0, threads = 0;
    double temperature = 0.8, top_p = 1.0;
    unsigned long long seed = 1234;
    bool ignore_eos = false, print_ids = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        } else if (!strcmp(a, "--print-ids")) {
            print_ids = true;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--prompt") || !strcmp(a, "--tokenizer") ||
                   !strcmp(a, "--max-new-tokens") || !strcmp(a, "--temperature") ||
                   !strcmp(a, "--top-k") || !strcmp(a, "--top-p") || !strcmp(a, "--seed") ||
                   !strcmp(a, "--threads")) {
            if (i + 1 >= argc) die("generate: %s needs a value (see femtotron generate --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--model")) model_dir = v;
            else if (!strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "--tokenizer")) tok_path = v;
            else if (!strcmp(a, "--max-new-tokens")) max_new = (long)parse_num(a, v, 0, 1e9);
            else if (!strcmp(a, "--temperature")) temperature = parse_num(a, v, 0, 1e6);
            else if (!strcmp(a, "--top-k")) top_k = (long)parse_num(a, v, 0, 1e9);
            else if (!strcmp(a, "--top-p")) top_p = parse_num(a, v, 1e-9, 1);
            else if (!strcmp(a, "--threads")) threads = (long)parse_num(a, v, 0, 1024);
            else {
                char *end;
                errno = 0;
                seed = strtoull(v, &end, 10);
                if (errno || end == v || *end || v[0] == '-')
                    die("generate: --seed needs a non-negative integer, got '%s'", v);
            }
        } else {
            die("generate: unknown argument '%s' (see femtotron generate --help)", a);
        }
    }
    if (!model_dir) die("generate: no --model directory given (see femtotron generate --help)");

    // A checkpoint.dir stands for its newest checkpoint.
    char resolved[CFG_PATH_MAX];
    kv_model_resolve(model_dir, resolved, sizeof resolved);
    // The tokenizer: --tokenizer, else the checkpoint's own tokenizer.json (femtotron
    // copies the one that made the training data), else bytes.
    char own_tok[CFG_PATH_MAX + 32];
    if (!tok_path) {
        snprintf(own_tok, sizeof own_tok, "%s/tokenizer.json", resolved);
        if (path_is_file(own_tok)) tok_path = own_tok;
    }
    Tokenizer *tok = tok_path ? tokenizer_load(tok_path) : tokenizer_byte_level();
    TokenizerState *ts = tokenizer_state_new(tok);
    TokenList prompt_ids = {0};
    tokenizer_encode_with_specials(ts, (const uint8_t *)prompt, strlen(prompt), &prompt_ids);
    int64_t eot = tokenizer_default_eot(tok);
    if (prompt_ids.n == 0) {
        if (eot < 0) die("generate: the prompt is empty and %s has no end-of-text token to start from",
                         tokenizer_describe(tok));
        token_list_push(&prompt_ids, (uint32_t)eot);
    }

    KVModel km;
    long want = (long)prompt_ids.n + max_new;
    kv_model_load(&km, resolved, want > 1 << 30 ? 1 << 30 : (int)want);
    // One token's forward is about 2 flops per weight: below a few million weights
    // the threads' start-up and barriers cost more than they save.
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = km.m.num_elements < ((size_t)4 << 20) || cores < 1 ? 1 : cores;
    }
    ops_set_threads((int)threads);
    const int V = km.m.V;
    if (prompt_ids.n > (size_t)km.cfg.max_position_embeddings)
        die("generate: the prompt is %zu tokens, more than the model's max_position_embeddings %d",
            prompt_ids.n, km.cfg.max_position_embeddings);
    uint32_t tv = tokenizer_vocab_size(tok);
    if (tokenizer_is_byte_level(tok) && (V < (int)tv || V > BYTE_VOCAB_MAX_MODEL))
        die("generate: %s has no tokenizer.json and the model's vocab_size %d is not a byte-level "
            "vocabulary (%u ids): its output would be bytes of the wrong ids. Pass the tokenizer the "
            "model was trained with (--tokenizer FILE)", resolved, V, tv);
    if (!tokenizer_is_byte_level(tok) && ((int64_t)tv > V || (double)tv < 0.9 * V))
        die("generate: %s has %u ids but the model's vocab_size is %d: not this model's tokenizer "
            "(a model's vocabulary may be padded a little past its tokenizer's, never below it)",
            tokenizer_describe(tok), tv, V);
    for (size_t i = 0; i < prompt_ids.n; i++)
        if ((int64_t)prompt_ids.ids[i] >= V)
            die("generate: the tokenizer gives id %u, outside the model's vocab_size %d: wrong "
                "--tokenizer?", prompt_ids.ids[i], V);
    // Only ids the tokenizer can decode may be drawn (a model's vocab is often padded).
    uint8_t *allowed = xcalloc((size_t)V, "allowed ids");
    for (int i = 0; i < V; i++) {
        size_t len;
        allowed[i] = tokenizer_token_bytes(tok, (uint32_t)i, &len) != NULL;
    }
    int64_t stop[64];
    int n_stop = 0;
    if (!ignore_eos) {
        if (eot >= 0) stop[n_stop++] = eot;
        n_stop = read_eos_ids(resolved, stop, n_stop, 64);
    }
    Sampler sm;
    sampler_init(&sm, V, allowed, (float)temperature, (int)top_k, (float)top_p, seed);

    fwrite(prompt, 1, strlen(prompt), stdout);
    fflush(stdout);
    double t0 = now_seconds();
    kv_model_forward(&km, (const int32_t *)prompt_ids.ids, (int)prompt_ids.n);
    double t_prompt = now_seconds() - t0;
    TokenList out = {0};
    const char *why = "--max-new-tokens";
    for (long step = 0; step < max_new; step++) {
        int32_t next = sampler_next(&sm, km.logits, (uint64_t)step);
        bool is_stop = false;
        for (int s = 0; s < n_stop; s++) is_stop |= stop[s] == next;
        if (is_stop) {
            why = "an end-of-sequence token";
            break;
        }
        token_list_push(&out, (uint32_t)next);
        size_t len;
        const uint8_t *b = tokenizer_token_bytes(tok, (uint32_t)next, &len);
        fwrite(b, 1, len, stdout);
        fflush(stdout);
        if (km.pos >= km.T) {
            why = "the end of the context";
            break;
        }
        kv_model_forward(&km, &next, 1);
    }
    double t_all = now_seconds() - t0;
    if (isatty(STDOUT_FILENO)) fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "generate: %zu prompt tokens (%.0f ms), %zu new tokens, %.1f tokens/s; stopped at %s\n",
            prompt_ids.n, 1e3 * t_prompt, out.n,
            t_all - t_prompt > 0 ? (double)out.n / (t_all - t_prompt) : 0.0, why);
    if (print_ids) {
        fprintf(stderr, "prompt ids:");
        for (size_t i = 0; i < prompt_ids.n; i++) fprintf(stderr, " %u", prompt_ids.ids[i]);
        fprintf(stderr, "\ngenerated ids:");
        for (size_t i = 0; i < out.n; i++) fprintf(stderr, " %u", out.ids[i]);
        fprintf(stderr, "\n");
    }
    sampler_free(&sm);
    free(allowed);
    token_list_free(&out);
    token_list_free(&prompt_ids);
    kv_model_free(&km);
    tokenizer_state_free(ts);
    tokenizer_free(tok);
    return 0;
}

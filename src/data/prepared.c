// data/prepared.c — prepare.json and the tokenizer files beside a prepared data set
// (data/prepared.h).
#define _POSIX_C_SOURCE 200809L
#include "data/prepared.h"

#include <cJSON.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "util.h"

#define PREPARED_FORMAT "femtotron-prepare-1"

const char *const PREPARED_TOKENIZER_FILE[PREPARED_TOKENIZER_FILES] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};

void prepared_write(const char *dir, const char *tokenizer_path, uint32_t vocab_size, int64_t eot_id,
                    int64_t bos_id) {
    char path[CFG_PATH_MAX + 64];
    if (tokenizer_path) {
        // The tokenizer.json itself, and its companions when they sit beside it.
        char src_dir[CFG_PATH_MAX];
        snprintf(src_dir, sizeof src_dir, "%s", tokenizer_path);
        char *slash = strrchr(src_dir, '/');
        if (slash) *slash = '\0';
        else snprintf(src_dir, sizeof src_dir, ".");
        for (int i = 0; i < PREPARED_TOKENIZER_FILES; i++) {
            char from[2 * CFG_PATH_MAX];
            if (i == 0) snprintf(from, sizeof from, "%s", tokenizer_path);
            else snprintf(from, sizeof from, "%s/%s", src_dir, PREPARED_TOKENIZER_FILE[i]);
            snprintf(path, sizeof path, "%s/%s", dir, PREPARED_TOKENIZER_FILE[i]);
            if (i > 0 && !path_is_file(from)) {
                unlink(path);  // an older prepare's companion must not outlive it
                continue;
            }
            copy_file_durable(from, path);
        }
    } else {
        for (int i = 0; i < PREPARED_TOKENIZER_FILES; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, PREPARED_TOKENIZER_FILE[i]);
            unlink(path);
        }
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", PREPARED_FORMAT);
    cJSON_AddStringToObject(root, "tokenizer", tokenizer_path ? "tokenizer.json" : "byte-level");
    cJSON_AddNumberToObject(root, "vocab_size", vocab_size);
    cJSON_AddNumberToObject(root, "eot_token_id", (double)eot_id);
    if (bos_id >= 0) cJSON_AddNumberToObject(root, "bos_token_id", (double)bos_id);
    else cJSON_AddNullToObject(root, "bos_token_id");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("out of memory writing prepare.json");
    snprintf(path, sizeof path, "%s/prepare.json", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || fsync(fileno(f)) != 0)
        die_errno("cannot write %s", path);
    fclose(f);
    free(text);
}

static int64_t id_or(const cJSON *root, const char *key, int64_t none, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return none;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 4294967295.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        die("%s: \"%s\" must be a token id", path, key);
    return (int64_t)v->valuedouble;
}

int prepared_find(const char *train_glob, PreparedInfo *info) {
    memset(info, 0, sizeof *info);
    glob_t g;
    if (glob(train_glob, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        globfree(&g);
        return 0;
    }
    snprintf(info->dir, sizeof info->dir, "%s", g.gl_pathv[0]);
    globfree(&g);
    char *slash = strrchr(info->dir, '/');
    if (slash) *slash = '\0';
    else snprintf(info->dir, sizeof info->dir, ".");
    char path[CFG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/prepare.json", info->dir);
    if (!path_is_file(path)) return 0;
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = root ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL;
    const cJSON *tok = root ? cJSON_GetObjectItemCaseSensitive(root, "tokenizer") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PREPARED_FORMAT) != 0 || !cJSON_IsString(tok))
        die("%s is not a prepare.json femtotron prepare wrote (format \"%s\"): remove it or prepare "
            "the data again", path, PREPARED_FORMAT);
    info->byte_level = strcmp(tok->valuestring, "byte-level") == 0;
    int64_t v = id_or(root, "vocab_size", -1, path);
    if (v < 1) die("%s: \"vocab_size\" is missing", path);
    info->vocab_size = (uint32_t)v;
    info->eot_id = id_or(root, "eot_token_id", -1, path);
    info->bos_id = id_or(root, "bos_token_id", -1, path);
    cJSON_Delete(root);
    if (!info->byte_level) {
        snprintf(path, sizeof path, "%s/tokenizer.json", info->dir);
        if (!path_is_file(path))
            die("%s/prepare.json names tokenizer.json, but %s is missing: prepare the data again",
                info->dir, path);
    }
    return 1;
}

int64_t prepared_bos_id(const Tokenizer *tok, const char *tokenizer_path) {
    if (!tokenizer_path) return -1;
    char path[CFG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s", tokenizer_path);
    char *slash = strrchr(path, '/');
    if (slash) snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "tokenizer_config.json");
    else snprintf(path, sizeof path, "tokenizer_config.json");
    if (path_is_file(path)) {
        char *text = read_text_file(path);
        cJSON *root = cJSON_Parse(text);
        free(text);
        const cJSON *b = root ? cJSON_GetObjectItemCaseSensitive(root, "bos_token") : NULL;
        if (cJSON_IsObject(b)) b = cJSON_GetObjectItemCaseSensitive(b, "content");  // AddedToken form
        int64_t id = cJSON_IsString(b) ? tokenizer_token_id(tok, b->valuestring) : -1;
        cJSON_Delete(root);
        if (id >= 0) return id;
    }
    const char *names[] = {"<|begin_of_text|>", "<s>"};
    for (int i = 0; i < 2; i++) {
        int64_t id = tokenizer_token_id(tok, names[i]);
        if (id >= 0) return id;
    }
    return -1;
}

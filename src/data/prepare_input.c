// data/prepare_input.c — the inputs of `femtotron prepare`: turning the text of a
// text or JSONL input (opened by data/decompress.c) into documents for the
// pipeline in prepare_batch.c. See data/prepare.c for what a document is.
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/decompress.h"
#include "data/prepare_impl.h"
#include "util.h"

void prepare_read_text(Prepare *pp, FILE *f, const char *split_on) {
    if (!split_on) {
        uint8_t *chunk = xmalloc(READ_CHUNK, "input read buffer");  // (READ_CHUNK)
        size_t got;
        while ((got = fread(chunk, 1, READ_CHUNK, f)) > 0) {
            pp->bytes_read += got;
            prepare_doc_add(pp, chunk, got);
            prepare_progress(pp, false);
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
            if (len == sep_len && memcmp(line, split_on, len) == 0) prepare_doc_end(pp);
            else prepare_doc_add(pp, (const uint8_t *)line, (size_t)got);
            prepare_progress(pp, false);
        }
        free(line);
    }
    prepare_doc_end(pp);  // documents never span files
}

void prepare_read_jsonl(Prepare *pp, FILE *f, const char *name, const char *field) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t lineno = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        lineno++;
        pp->bytes_read += (uint64_t)got;
        size_t k = 0;
        while (k < (size_t)got && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)got) continue;  // blank line
        cJSON *j = cJSON_ParseWithLength(line, (size_t)got);
        if (!j || !cJSON_IsObject(j))
            die("input %s line %llu: not a JSON object", name, (unsigned long long)lineno);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, field);
        if (!cJSON_IsString(s))
            die("input %s line %llu: no string field \"%s\" (choose the field with --field)", name,
                (unsigned long long)lineno, field);
        size_t len = strlen(s->valuestring);
        // cJSON ends strings at NUL: a \u0000 escape would silently cut the document.
        if (strstr(line, "\\u0000"))
            die("input %s line %llu: the text holds \\u0000 (NUL), which prepare cannot carry",
                name, (unsigned long long)lineno);
        prepare_doc_add(pp, (const uint8_t *)s->valuestring, len);
        prepare_doc_end(pp);
        cJSON_Delete(j);
        prepare_progress(pp, false);
    }
    free(line);
}

bool prepare_is_jsonl(const char *path, const char *format) {
    if (!strcmp(format, "jsonl")) return true;
    if (!strcmp(format, "text") || !strcmp(path, "-")) return false;
    // The name less .gz / .zst says what the text is.
    size_t stem = strlen(path) - decompress_suffix_len(path);
    return (stem >= 6 && !strncmp(path + stem - 6, ".jsonl", 6)) ||
           (stem >= 7 && !strncmp(path + stem - 7, ".ndjson", 7));
}

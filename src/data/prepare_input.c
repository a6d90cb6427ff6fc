// data/prepare_input.c — the inputs of `femtotron prepare`: opening text or JSONL
// files (FILE.gz through `gzip -dc`) and turning them into documents for the
// pipeline in prepare_batch.c. See data/prepare.c for what a document is.
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/prepare_impl.h"
#include "util.h"

extern char **environ;  // passed to gzip; not declared by unistd.h in strict POSIX mode

// ---------------------------------------------------------------- inputs

// Open an input for reading; .gz files through `gzip -dc` (no zlib dependency).
// *child gets gzip's pid, or 0.
FILE *prepare_input_open(const char *path, pid_t *child) {
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

void prepare_input_close(FILE *f, pid_t child, const char *path) {
    if (ferror(f)) die_errno("cannot read input %s", path);
    fclose(f);
    if (!child) return;
    int status = 0;
    if (waitpid(child, &status, 0) < 0) die_errno("cannot wait for gzip on %s", path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("input %s: gzip -dc failed (status %d): not a valid gzip file?", path,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

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

void prepare_read_jsonl(Prepare *pp, FILE *f, const char *path, const char *field) {
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
            die("input %s line %llu: not a JSON object", path, (unsigned long long)lineno);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, field);
        if (!cJSON_IsString(s))
            die("input %s line %llu: no string field \"%s\" (choose the field with --field)", path,
                (unsigned long long)lineno, field);
        size_t len = strlen(s->valuestring);
        // cJSON ends strings at NUL: a \u0000 escape would silently cut the document.
        if (strstr(line, "\\u0000"))
            die("input %s line %llu: the text holds \\u0000 (NUL), which prepare cannot carry",
                path, (unsigned long long)lineno);
        prepare_doc_add(pp, (const uint8_t *)s->valuestring, len);
        prepare_doc_end(pp);
        cJSON_Delete(j);
        prepare_progress(pp, false);
    }
    free(line);
}

bool prepare_is_jsonl(const char *path, const char *format) {
    if (!strcmp(format, "jsonl")) return true;
    if (!strcmp(format, "text")) return false;
    return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz") || ends_with(path, ".ndjson") ||
           ends_with(path, ".ndjson.gz");
}

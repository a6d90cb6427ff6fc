// data/input_list.c — expanding the names given to `femtotron prepare` into the
// files it reads (see data/input_list.h for the rules): directories with
// scandir(3), globs with glob(3), both sorted by strcmp here rather than by the
// locale's collation, so that the order is the same on every machine.
#define _DEFAULT_SOURCE  // scandir, DT_* (and POSIX 2008: getline, fnmatch)
#include "data/input_list.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "data/decompress.h"
#include "util.h"

// Names (less .gz / .zst) a directory's file is read under when no --include is given.
static const char *const TEXT_SUFFIXES[] = {".txt", ".text", ".md", ".jsonl", ".ndjson"};

static void push(InputList *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->paths = realloc(l->paths, l->cap * sizeof(char *));
        if (!l->paths) die("out of memory for a list of %zu inputs", l->cap);
    }
    size_t len = strlen(path);
    char *copy = xmalloc(len + 1, "input path");  // (len + 1)
    memcpy(copy, path, len + 1);
    l->paths[l->n++] = copy;
}

bool input_list_selects(const InputList *l, const char *name) {
    if (l->n_include) {
        for (size_t i = 0; i < l->n_include; i++)
            if (fnmatch(l->include[i], name, 0) == 0) return true;
        return false;
    }
    size_t stem = strlen(name) - decompress_suffix_len(name);
    for (size_t i = 0; i < sizeof TEXT_SUFFIXES / sizeof *TEXT_SUFFIXES; i++) {
        size_t m = strlen(TEXT_SUFFIXES[i]);
        if (stem > m && strncmp(name + stem - m, TEXT_SUFFIXES[i], m) == 0) return true;
    }
    return false;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

// Add the selected files below `dir`, depth first, each directory's entries in
// strcmp order. Returns how many were added.
static size_t add_directory(InputList *l, const char *dir) {
    struct dirent **entries;
    int n = scandir(dir, &entries, not_hidden, by_name);
    if (n < 0) die_errno("cannot list input directory %s", dir);
    size_t added = 0, dir_len = strlen(dir);
    bool slash = dir_len > 0 && dir[dir_len - 1] == '/';
    char *path = NULL;  // (dir_len + 1 + the longest name + 1) dir/name of one entry
    size_t path_cap = 0;
    for (int i = 0; i < n; i++) {
        const char *name = entries[i]->d_name;
        size_t need = dir_len + 1 + strlen(name) + 1;
        if (need > path_cap) {
            free(path);
            path_cap = 2 * need;
            path = xmalloc(path_cap, "input path");
        }
        snprintf(path, path_cap, "%s%s%s", dir, slash ? "" : "/", name);
        struct stat st, lst;
        if (lstat(path, &lst) != 0) die_errno("cannot look at %s", path);
        bool is_link = S_ISLNK(lst.st_mode);
        if (is_link && stat(path, &st) != 0) {
            warn("prepare: skipping %s: a link to nothing (%s)", path, strerror(errno));
            continue;
        }
        if (!is_link) st = lst;
        if (S_ISDIR(st.st_mode)) {
            if (!is_link) added += add_directory(l, path);  // links to directories: no cycles
        } else if (S_ISREG(st.st_mode) && input_list_selects(l, name)) {
            push(l, path);
            added++;
        }
    }
    for (int i = 0; i < n; i++) free(entries[i]);
    free(entries);
    free(path);
    return added;
}

static void add_directory_top(InputList *l, const char *dir) {
    if (add_directory(l, dir) > 0) return;
    if (l->n_include)
        die("input directory %s holds no file matching --include (hidden files are skipped)", dir);
    die("input directory %s holds no file prepare reads: names ending in .txt, .text, .md, .jsonl "
        "or .ndjson (or those plus .gz or .zst); hidden files are skipped; choose others with "
        "--include GLOB", dir);
}

static int by_strcmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_glob(InputList *l, const char *pattern) {
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) die("no file matches the input pattern %s", pattern);
    if (rc == GLOB_NOSPACE) die("out of memory expanding the input pattern %s", pattern);
    if (rc != 0) die("cannot expand the input pattern %s: a directory on its way cannot be read", pattern);
    // glob(3) sorts by the locale's collation; byte order is the same everywhere.
    qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), by_strcmp);
    // A matched directory adds what the filter selects in it, maybe nothing; only
    // a pattern that yields no file at all is an error.
    size_t added = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            added += add_directory(l, g.gl_pathv[i]);
        } else {
            push(l, g.gl_pathv[i]);
            added++;
        }
    }
    globfree(&g);
    if (!added) die("the input pattern %s matches only directories without a file prepare reads", pattern);
}

static void take_stdin(InputList *l, const char *what) {
    if (l->stdin_taken)
        die("prepare: standard input (-) is named twice (%s); it can be read only once", what);
    l->stdin_taken = true;
}

void input_list_add(InputList *l, const char *name) {
    if (!name[0]) die("prepare: an input name is empty");
    if (strcmp(name, "-") == 0) {
        take_stdin(l, "as an input");
        push(l, name);
        return;
    }
    struct stat st;
    bool exists = stat(name, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) add_directory_top(l, name);
    else if (!exists && strpbrk(name, "*?[")) add_glob(l, name);
    else push(l, name);  // a file: prepare checks that it can be read
}

void input_list_add_listed(InputList *l, const char *list_path) {
    FILE *f = stdin;
    if (strcmp(list_path, "-") == 0) take_stdin(l, "as an --input-list");
    else if (!(f = fopen(list_path, "r"))) die_errno("cannot open the input list %s", list_path);
    char *line = NULL;  // (cap) one line of the list
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        line[len] = '\0';
        if (len) input_list_add(l, line);
    }
    if (ferror(f)) die_errno("cannot read the input list %s", decompress_input_name(list_path));
    free(line);
    if (f != stdin) fclose(f);
}

void input_list_free(InputList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    *l = (InputList){0};
}

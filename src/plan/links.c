// plan/links.c — the measured link matrix between nodes (`femtotron bench links`)
// and its JSON form: a "links" object inside a hardware profile,
//   {"links": {"nodes": ["host0", ..], "bw": [[..], ..], "lat": [[..], ..]}}
// bw in bytes/s and lat in seconds of one message from row to column node.
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/hardware.h"
#include "plan/placement.h"
#include "util.h"

void links_init(LinkMatrix *m, int n) {
    if (n < 1) die("links: %d nodes (need at least 1)", n);
    m->n = n;
    m->names = xcalloc(sizeof *m->names * (size_t)n, "link names");        // (n)
    m->bw = xcalloc(sizeof(double) * (size_t)n * (size_t)n, "link matrix");   // (n, n)
    m->lat = xcalloc(sizeof(double) * (size_t)n * (size_t)n, "link matrix");  // (n, n)
    for (int i = 0; i < n; i++) snprintf(m->names[i], sizeof m->names[i], "node%d", i);
}

void links_free(LinkMatrix *m) {
    free(m->names);
    free(m->bw);
    free(m->lat);
    memset(m, 0, sizeof *m);
}

// Reads an (n, n) array of arrays into out, each entry finite and >= 0 (the
// diagonal is not used) and bw > 0 off the diagonal.
static void load_square(const cJSON *a, int n, double *out, const char *key, const char *path, int positive) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        die("hardware profile %s: links.%s must be an array of %d rows (one per node)", path, key, n);
    for (int i = 0; i < n; i++) {
        const cJSON *row = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != n)
            die("hardware profile %s: links.%s row %d must have %d numbers", path, key, i, n);
        for (int j = 0; j < n; j++) {
            const cJSON *v = cJSON_GetArrayItem(row, j);
            if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
                (positive && i != j && !(v->valuedouble > 0)))
                die("hardware profile %s: links.%s[%d][%d] must be a %s number", path, key, i, j,
                    positive ? "positive" : "non-negative");
            out[(size_t)i * n + j] = v->valuedouble;
        }
    }
}

void links_load(LinkMatrix *m, const char *path) {
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) die("hardware profile %s: invalid JSON", path);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (!cJSON_IsObject(o))
        die("hardware profile %s: no \"links\" object (measure it with: mpirun -np NODES femtotron bench links --output %s)",
            path, path);
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(o, "nodes");
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) < 1)
        die("hardware profile %s: links.nodes must be a non-empty array of host names", path);
    int n = cJSON_GetArraySize(nodes);
    links_init(m, n);
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_GetArrayItem(nodes, i);
        if (!cJSON_IsString(s) || !s->valuestring[0] || strlen(s->valuestring) >= sizeof m->names[i])
            die("hardware profile %s: links.nodes[%d] must be a host name of 1 to 63 characters", path, i);
        snprintf(m->names[i], sizeof m->names[i], "%s", s->valuestring);
    }
    load_square(cJSON_GetObjectItemCaseSensitive(o, "bw"), n, m->bw, "bw", path, 1);
    load_square(cJSON_GetObjectItemCaseSensitive(o, "lat"), n, m->lat, "lat", path, 0);
    cJSON_Delete(root);
}

int links_present(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int has = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "links"));
    cJSON_Delete(root);
    return has;
}

static cJSON *square_json(const double *a, int n) {
    cJSON *rows = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < n; j++) {
            char buf[40];
            snprintf(buf, sizeof buf, "%.6g", a[(size_t)i * n + j]);
            cJSON_AddItemToArray(row, cJSON_CreateRaw(buf));
        }
        cJSON_AddItemToArray(rows, row);
    }
    return rows;
}

void links_save(const LinkMatrix *m, const char *path) {
    cJSON *root = NULL;
    FILE *f = fopen(path, "rb");
    if (f) {  // keep the profile's other keys
        fclose(f);
        char *text = read_text_file(path);
        root = cJSON_Parse(text);
        free(text);
        if (!root || !cJSON_IsObject(root)) die("hardware profile %s: exists but is not a JSON object", path);
        hardware_json_numbers_exact(root);  // the other keys' values written back unchanged
    } else {
        root = cJSON_CreateObject();
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "links");
    cJSON *o = cJSON_AddObjectToObject(root, "links");
    cJSON *names = cJSON_AddArrayToObject(o, "nodes");
    for (int i = 0; i < m->n; i++) cJSON_AddItemToArray(names, cJSON_CreateString(m->names[i]));
    cJSON_AddItemToObject(o, "bw", square_json(m->bw, m->n));
    cJSON_AddItemToObject(o, "lat", square_json(m->lat, m->n));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("hardware profile %s: out of memory while printing", path);
    f = fopen(path, "w");
    if (!f) die_errno("hardware profile %s: cannot open for writing", path);
    if (fputs(text, f) < 0 || fputc('\n', f) == EOF) die_errno("hardware profile %s: write failed", path);
    if (fclose(f) != 0) die_errno("hardware profile %s: write failed", path);
    cJSON_free(text);
}

// config_sources.c — data.train / data.val as a list of weighted sources
// (config_data_sources): one path, the command-line form "PATH:W,PATH:W", or the
// JSON list a config file gives.
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "util.h"

static void add_source(DataSource *out, int *n, const char *key, const char *path, size_t len,
                       double weight) {
    if (*n >= CFG_MAX_SOURCES) die("%s: more than %d sources", key, CFG_MAX_SOURCES);
    if (len == 0) die("%s: source %d has an empty path", key, *n + 1);
    if (len >= CFG_PATH_MAX) die("%s: the path of source %d is longer than %d characters", key, *n + 1, CFG_PATH_MAX - 1);
    if (!isfinite(weight) || weight <= 0)
        die("%s: source %d (%.*s) has weight %g; a weight must be a finite number > 0", key, *n + 1,
            (int)len, path, weight);
    memcpy(out[*n].path, path, len);
    out[*n].path[len] = '\0';
    out[*n].weight = weight;
    (*n)++;
}

static int parse_json_list(const char *spec, const char *key, DataSource *out) {
    cJSON *root = cJSON_Parse(spec);
    if (!cJSON_IsArray(root) || cJSON_GetArraySize(root) == 0) {
        cJSON_Delete(root);
        die("%s: a list of sources must be a non-empty JSON array of {\"path\": ..., \"weight\": ...}", key);
    }
    int n = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
        const cJSON *weight = cJSON_GetObjectItemCaseSensitive(e, "weight");
        if (!cJSON_IsObject(e) || !cJSON_IsString(path) || (weight && !cJSON_IsNumber(weight))) {
            cJSON_Delete(root);
            die("%s: source %d must be {\"path\": \"FILE or GLOB\", \"weight\": NUMBER} (weight "
                "optional, default 1)", key, n + 1);
        }
        for (const cJSON *f = e->child; f; f = f->next)
            if (strcmp(f->string, "path") != 0 && strcmp(f->string, "weight") != 0) {
                char field[64];
                snprintf(field, sizeof field, "%s", f->string);
                cJSON_Delete(root);
                die("%s: source %d has an unknown field \"%s\" (a source has \"path\" and \"weight\")",
                    key, n + 1, field);
            }
        add_source(out, &n, key, path->valuestring, strlen(path->valuestring),
                   weight ? weight->valuedouble : 1.0);
    }
    cJSON_Delete(root);
    return n;
}

// The weight after an item's last ':', when the rest of the item is a number.
static int item_weight(const char *item, size_t len, size_t *path_len, double *w) {
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (item[i] == ':') colon = item + i;
    if (!colon || colon + 1 == item + len) return 0;
    char num[64];
    size_t nl = (size_t)(item + len - colon - 1);
    if (nl >= sizeof num) return 0;
    memcpy(num, colon + 1, nl);
    num[nl] = '\0';
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (end == num || *end || errno) return 0;
    *path_len = (size_t)(colon - item);
    *w = v;
    return 1;
}

int config_data_sources(const char *spec, const char *key, DataSource *out) {
    if (!spec[0]) return 0;
    if (spec[0] == '[') return parse_json_list(spec, key, out);
    // The command-line form when every comma-separated item ends in :NUMBER; a
    // string where none does is one path; a mix is an error.
    int items = 0, weighted = 0;
    for (const char *s = spec;; s++) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s), pl;
        double w;
        items++;
        weighted += item_weight(s, len, &pl, &w);
        if (!e) break;
        s = e;
    }
    if (weighted == 0) {
        int n = 0;
        add_source(out, &n, key, spec, strlen(spec), 1.0);
        return n;
    }
    if (weighted != items)
        die("%s = \"%s\": in a mixture every comma-separated source needs a weight, PATH:WEIGHT "
            "(%d of %d have one)", key, spec, weighted, items);
    int n = 0;
    for (const char *s = spec;; s++) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s), pl = 0;
        double w = 0;
        item_weight(s, len, &pl, &w);
        add_source(out, &n, key, s, pl, w);
        if (!e) break;
        s = e;
    }
    return n;
}

// config_load.c — load a run configuration: JSON config files (config_load_json,
// config_load_file) and `--section.key value` overrides (config_set,
// config_apply_args), each key set through the key table (config_keys.c).
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "util.h"

// ---------------------------------------------------------------- reading files

// Whole file as a NUL-terminated string (caller frees); NULL with errno set.
char *cfg_read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory reading %s", path);
    size_t n;
    while ((n = fread(buf + len, 1, cap - 1 - len, f)) > 0) {
        len += n;
        if (len == cap - 1) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) die("out of memory reading %s", path);
            buf = bigger;
        }
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

// Parse or die with the line, column and a few characters where cJSON stopped.
cJSON *cfg_parse_or_die(const char *text, const char *origin) {
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    if (root) return root;
    const char *err = cJSON_GetErrorPtr();
    if (!err) die("%s: invalid JSON", origin);
    int line = 1, col = 1;
    for (const char *p = text; p < err && *p; p++) {
        if (*p == '\n') line++, col = 1;
        else col++;
    }
    if (!*err) die("%s: invalid JSON: unexpected end of text (unclosed brace, bracket or string?)", origin);
    // A few characters either side of where parsing stopped, on one line.
    char near[40];
    size_t n = 0;
    const char *from = err - text > 12 ? err - 12 : text;
    for (const char *p = from; *p && p - err < 12 && n < sizeof near - 1; p++)
        near[n++] = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
    near[n] = '\0';
    die("%s: invalid JSON at line %d, column %d, near `%s`", origin, line, col, near);
}

// Child named `name` of an object, matched case-sensitively (cJSON's own lookup
// ignores case, which would accept "Hidden_Size").
const cJSON *cfg_child(const cJSON *obj, const char *name) {
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next)
        if (it->string && strcmp(it->string, name) == 0) return it;
    return NULL;
}

static void die_on_duplicate(const cJSON *item, const char *origin, const char *what) {
    for (const cJSON *o = item->next; o; o = o->next)
        if (strcmp(o->string, item->string) == 0) die("%s: %s \"%s\" is given twice", origin, what, item->string);
}

// ---------------------------------------------------------------- loading and overrides

void config_load_json(Config *c, const char *json_text, const char *origin) {
    char where[CFG_PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s", origin);
    cJSON *root = cfg_parse_or_die(json_text, where);
    if (!cJSON_IsObject(root))
        die("%s: the top level must be a JSON object of sections (model, data, training, parallel, "
            "checkpoint, logging)", where);
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        if (!cfg_is_section(sec->string))
            die("%s: unknown section \"%s\" (sections: model, data, training, parallel, checkpoint, logging)",
                where, sec->string);
        die_on_duplicate(sec, where, "section");
        if (!cJSON_IsObject(sec)) die("%s: section \"%s\" must be a JSON object", where, sec->string);
        for (const cJSON *v = sec->child; v; v = v->next) {
            char dotted[256];
            snprintf(dotted, sizeof dotted, "%s.%s", sec->string, v->string);
            int i = cfg_key_index(sec->string, strlen(sec->string), v->string);
            if (i < 0) cfg_die_unknown_key(where, dotted);
            die_on_duplicate(v, where, "key");
            cfg_set_json(c, &CFG_KEYS[i], v, where, dotted);
            cfg_mark_given(c, i);
        }
    }
    cJSON_Delete(root);
    config_resolve_model(c);
}

void config_load_file(Config *c, const char *path) {
    char *text = cfg_read_text_file(path);
    if (!text) die_errno("cannot read config file %s", path);
    config_load_json(c, text, path);
    free(text);
}

void config_set(Config *c, const char *dotted_key, const char *value) {
    const char *dot = strchr(dotted_key, '.');
    int i = dot ? cfg_key_index(dotted_key, (size_t)(dot - dotted_key), dot + 1) : -1;
    if (i < 0) cfg_die_unknown_key("command line", dotted_key);
    const KeyDef *k = &CFG_KEYS[i];
    if (cfg_is_model_from(k) && c->model.from[0] && !value[0]) {
        // Dropping model.from: the model keys it filled go back to their defaults.
        for (int j = 0; j < CFG_NKEYS; j++)
            if (strcmp(CFG_KEYS[j].section, "model") == 0 && !cfg_key_given(c, j))
                cfg_set_text(c, &CFG_KEYS[j], CFG_KEYS[j].def, "built-in default");
    }
    cfg_set_text(c, k, value, "command line");
    cfg_mark_given(c, i);
    if (cfg_is_model_from(k)) config_resolve_model(c);
}

int config_apply_args(Config *c, int argc, char **argv) {
    int i = 0;
    while (i < argc) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !strchr(arg + 2, '.'))
            die("unexpected argument \"%s\": overrides are --section.key value or --section.key=value "
                "(see ./femtotron train --help)", arg);
        const char *eq = strchr(arg, '=');
        char key[256];
        const char *value;
        if (eq) {
            size_t n = (size_t)(eq - arg - 2);
            if (n >= sizeof key) die("argument \"%s\": key too long", arg);
            memcpy(key, arg + 2, n);
            key[n] = '\0';
            value = eq + 1;
            i += 1;
        } else {
            if (strlen(arg + 2) >= sizeof key) die("argument \"%s\": key too long", arg);
            strcpy(key, arg + 2);
            // A value that starts with "--" is the next override: this one has none.
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                die("argument \"%s\" needs a value: --%s VALUE or --%s=VALUE", arg, key, key);
            value = argv[i + 1];
            i += 2;
        }
        config_set(c, key, value);
    }
    return i;
}

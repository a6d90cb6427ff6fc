// io/checkpoint_state.c — a checkpoint's trainer_state.json: step, consumed
// sequences, seed and the run configuration, written and read back.
#include "io/checkpoint.h"

#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_internal.h"
#include "util.h"

void ckpt_write_trainer_state(const char *path, const Config *cfg, const TrainerState *st) {
    char *cfg_json = config_to_json(cfg);
    if (!cfg_json) die("config_to_json returned NULL while writing %s", path);
    cJSON *check = cJSON_Parse(cfg_json);
    if (!check) die("config_to_json produced invalid JSON while writing %s", path);
    cJSON_Delete(check);

    // 64-bit counters are written as raw integer text: a double would round them.
    char num[32];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "step", st->step);
    snprintf(num, sizeof num, "%" PRIu64, st->consumed_sequences);
    cJSON_AddRawToObject(root, "consumed_sequences", num);
    // The loss of the step that ended here, null when it was not finite (JSON has no
    // NaN): after a run of bad steps, the newest checkpoint with a finite loss is named.
    if (st->loss == st->loss && st->loss < 1e308 && st->loss > -1e308) {
        snprintf(num, sizeof num, "%.17g", st->loss);
        cJSON_AddRawToObject(root, "loss", num);
    } else {
        cJSON_AddNullToObject(root, "loss");
    }
    snprintf(num, sizeof num, "%" PRIu64, cfg->training.seed);
    cJSON_AddRawToObject(root, "seed", num);
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddRawToObject(root, "config", cfg_json);
    char *text = cJSON_Print(root);
    if (!text) die("out of memory printing %s", path);
    size_t len = strlen(text);
    char *with_nl = xmalloc(len + 2, "trainer state text");  // (len + 2) JSON + "\n" + NUL
    memcpy(with_nl, text, len);
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    ckpt_write_text_file(path, with_nl);
    free(with_nl);
    free(text);
    cJSON_Delete(root);
    free(cfg_json);
}

static uint64_t json_count(const cJSON *root, const char *key, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it) die("%s: missing \"%s\"", path, key);
    if (!cJSON_IsNumber(it)) die("%s: \"%s\" must be a number", path, key);
    double d = it->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        die("%s: \"%s\" must be a non-negative integer (got %g)", path, key, d);
    return (uint64_t)d;
}

void ckpt_read_trainer_state(const char *path, TrainerState *st) {
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) die("%s: not a valid JSON object", path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT) != 0)
        die("%s: \"format\" is not \"%s\" (not a femtotron checkpoint, or a newer version)",
            path, CKPT_FORMAT);
    uint64_t step = json_count(root, "step", path);
    if (step > 0x7fffffff) die("%s: \"step\" %llu is out of range", path, (unsigned long long)step);
    st->step = (int)step;
    st->consumed_sequences = json_count(root, "consumed_sequences", path);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");  // absent before v2
    st->loss = cJSON_IsNumber(loss) ? loss->valuedouble : (double)NAN;
    cJSON_Delete(root);
    free(text);
}

void checkpoint_read_config(const char *ckpt_dir, Config *out) {
    char path[CFG_PATH_MAX + 64];
    ckpt_path_join(path, ckpt_dir, "trainer_state.json");
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *cfg = root ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
    if (!cJSON_IsObject(cfg)) die("%s: no \"config\" object", path);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(cfg, "model");
    if (cJSON_IsObject(model)) cJSON_DeleteItemFromObjectCaseSensitive(model, "from");
    char *cfg_text = cJSON_PrintUnformatted(cfg);
    cJSON_Delete(root);
    if (!cfg_text) die("out of memory reading %s", path);
    config_defaults(out);
    config_load_json(out, cfg_text, path);
    free(cfg_text);
}

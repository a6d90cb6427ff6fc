// tests/fuzz/fuzz_config.c — the run configuration: the input up to its first NUL is
// a config JSON (config_load_json), what follows is --section.key value overrides,
// one word per line (config_apply_args), then config_validate.
#include "fuzz.h"

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char *text = fuzz_text(data, n);
    size_t json_len = strlen(text);
    char *args[64];
    int argc = 0;
    if (json_len < n) {  // overrides after the NUL, one per line
        for (char *p = strtok(text + json_len + 1, "\n"); p && argc < 64; p = strtok(NULL, "\n")) args[argc++] = p;
    }
    FUZZ_TRY({
        Config c;
        config_defaults(&c);
        config_load_json(&c, text, "fuzz.json");
        config_apply_args(&c, argc, args);
        config_validate(&c, 1);
        free(config_to_json(&c));
    });
    free(text);
    return 0;
}

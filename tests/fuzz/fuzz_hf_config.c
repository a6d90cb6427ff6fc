// tests/fuzz/fuzz_hf_config.c — a Hugging Face config.json read through model.from
// (config_resolve_model: every model key, the refusals of unsupported features).
#include "fuzz.h"

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    fuzz_file("config.json", data, n);
    FUZZ_TRY({
        Config c;
        config_defaults(&c);
        config_set(&c, "model.from", fuzz_dir());
        config_resolve_model(&c);
    });
    return 0;
}

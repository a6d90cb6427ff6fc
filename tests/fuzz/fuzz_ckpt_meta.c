// tests/fuzz/fuzz_ckpt_meta.c — a checkpoint's metadata files: the input as
// trainer_state.json (ckpt_read_trainer_state) and as manifest.json
// (ckpt_read_manifest).
#include "fuzz.h"
#include "io/checkpoint_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *path = fuzz_file("trainer_state.json", data, n);
    FUZZ_TRY({
        TrainerState st;
        ckpt_read_trainer_state(path, &st);
    });
    path = fuzz_file("manifest.json", data, n);
    FUZZ_TRY({
        CkptManifest m;
        ckpt_read_manifest(path, &m);
    });
    return 0;
}

// tests/fuzz/fuzz_safetensors.c — the safetensors header parser and reader on any
// bytes: st_open, then every tensor's first and last element read as fp32 where
// the dtype converts.
#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *path = fuzz_file("model.safetensors", data, n);
    FUZZ_TRY({
        StIndex idx;
        st_open(&idx, path);
        for (int i = 0; i < idx.n; i++) {
            const StTensor *t = &idx.t[i];
            if (t->dtype == ST_OTHER || t->dtype == ST_I32 || t->dtype == ST_I64) continue;
            uint64_t elems = 1;
            for (int d = 0; d < t->ndim; d++) elems *= (uint64_t)t->shape[d];
            if (elems == 0) continue;
            float v;
            st_read_f32(t, 0, 1, &v);
            st_read_f32(t, elems - 1, 1, &v);
        }
        st_close(&idx);
    });
    return 0;
}

// tests/drivers/st_roundtrip_main.c — driver for tests/reference/test_safetensors_interop.py:
//   st_roundtrip IN OUT
// reads every tensor of IN (any float dtype) with st_open/st_read_f32 and writes
// them all, in file order, as F32 to OUT with st_write_f32, so a Python reader
// written independently can check both our reader and our writer.
#include <stdio.h>
#include <stdlib.h>

#include "io/safetensors.h"
#include "util.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
        return 2;
    }
    StIndex idx;
    st_open(&idx, argv[1]);
    StWrite *w = xcalloc((size_t)(idx.n ? idx.n : 1) * sizeof *w, "tensor list");  // (n)
    for (int i = 0; i < idx.n; i++) {
        const StTensor *t = &idx.t[i];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
        float *data = xmalloc(numel * sizeof(float), t->name);  // (numel) fp32 values
        st_read_f32(t, 0, numel, data);
        w[i].name = t->name;
        w[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) w[i].shape[d] = t->shape[d];
        w[i].data = data;
    }
    const char *keys[] = {"source"};
    const char *vals[] = {argv[1]};
    st_write_f32(argv[2], w, idx.n, keys, vals, 1);
    for (int i = 0; i < idx.n; i++) free((void *)w[i].data);
    free(w);
    st_close(&idx);
    return 0;
}

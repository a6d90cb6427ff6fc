// tests/drivers/dump_grads.c — computes the gradient of training step 0's global batch
// exactly as `femtotron train` would (same config handling, same trainer code) and
// writes every parameter gradient under its Hugging Face name, so an independent
// implementation (tests/reference/llama_torch.py) can compare tensor by tensor.
//
// Built against either backend: build/tests/dump_grads (CPU), and
// build-cuda/tests/dump_grads (`make cuda`, the CUDA kernels: tests/gpu/reference.sh).
//
// usage: dump_grads --config RUN.json [--section.key value ...] --out GRADS.safetensors
// prints: loss <mean loss of the step, 17 significant digits>
//         aux <the step's mean load-balancing loss> (mixture of experts with the loss on)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dist/comm.h"
#include "dist/grid.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "train/trainer.h"
#include "util.h"

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    ops_init(comm_launched_local_rank());  // the CUDA build: fatal, saying so, without a GPU
    Config cfg;
    config_defaults(&cfg);
    const char *out = NULL;
    // Pull out --config and --out; everything else is a config override.
    char **rest = xmalloc(sizeof(char *) * (size_t)argc, "argv");
    int n_rest = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config_load_file(&cfg, argv[++i]);
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
        else rest[n_rest++] = argv[i];
    }
    if (!out) die("dump_grads: --out FILE is required");
    config_apply_args(&cfg, n_rest, rest);
    config_validate(&cfg, comm_world_size());
    config_check_backend(&cfg, (Device)config_name_index(DEVICE_NAMES, ops_backend_name()), ops_has_bf16());
    ops_set_matmul_bf16(cfg.training.precision == PRECISION_BF16);
    comm_grid_init(&cfg.parallel);
    ops_set_threads(cfg.training.threads > 0 ? cfg.training.threads : 1);

    Trainer t;
    trainer_init(&t, &cfg, grid_coords(&cfg.parallel, comm_world_rank()));
    double loss = trainer_compute_grads(&t, 0);
    printf("loss %.17g\n", loss);
    if (t.rank.model.moe_aux) printf("aux %.17g\n", t.aux_loss);  // mean load-balancing loss (in loss)

    if (t.rank.dp.grads == NULL || comm_world_size() != 1)
        die("dump_grads: runs on one rank with parallel.zero 0 or 1 (whole gradient buffer)");
    StWrite *w = xcalloc(sizeof(StWrite) * (size_t)t.rank.model.n_params, "tensor list");
    for (int i = 0; i < t.rank.model.n_params; i++) {
        const ParamInfo *p = &t.rank.model.params[i];
        w[i].name = p->name;
        w[i].ndim = p->ndim;
        w[i].shape[0] = p->shape[0];
        w[i].shape[1] = p->shape[1];
        w[i].data = t.rank.dp.grads + p->offset;
    }
    st_write_f32(out, w, t.rank.model.n_params, NULL, NULL, 0);
    free(w);
    free(rest);
    trainer_free(&t);
    comm_finalize();
    return 0;
}

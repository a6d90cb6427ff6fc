// train/train_configure.c — the training command's configuration, agreed by every
// rank: one message per configuration error instead of one per rank plus an abort.
#include "train/train_configure.h"

#include <stdio.h>
#include <stdlib.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "plan/plan_auto.h"
#include "util.h"

typedef struct {
    Config *cfg;
    char **files;  // (n_files) --config files
    int n_files;
    int argc;
    char **argv;
    int world, ranks_per_node;
    char (*hosts)[64];  // (world, 64) every rank's host name: parallel.auto's links
} ConfigureJob;

// Deterministic: no collective, no rank-dependent input, so that every rank dies
// (or not) at the same die() with the same message.
static void configure(void *ctx) {
    ConfigureJob *j = ctx;
    for (int f = 0; f < j->n_files; f++) config_load_file(j->cfg, j->files[f]);
    config_apply_args(j->cfg, j->argc, j->argv);
    if (j->cfg->parallel.auto_layout) {  // the planner replaces the layout keys
        config_resolve_model(j->cfg);
        plan_auto_layout(j->cfg, j->world, j->ranks_per_node, (const char (*)[64])j->hosts);
    }
    config_validate(j->cfg, j->world);
    // training.device and precision against what this binary was built with.
    config_check_backend(j->cfg, (Device)config_name_index(DEVICE_NAMES, ops_backend_name()), ops_has_bf16());
}

void train_configure(Config *cfg, char **config_files, int n_files, int argc, char **argv) {
    // Collectives first: inside the try a rank might never reach them.
    ConfigureJob job = {cfg, config_files, n_files, argc, argv, comm_world_size(), comm_local_size(), NULL};
    job.hosts = xcalloc(sizeof *job.hosts * (size_t)job.world, "host names");  // (world, 64)
    comm_host_names(job.hosts);
    char why[2048];
    const int ok = util_try(configure, &job, why, sizeof why);
    free(job.hosts);
    // Ranks can still disagree (a config file readable on one node only): the
    // lowest failing rank speaks, named unless it is rank 0, and nobody waits.
    const int first = comm_lowest_failed(!ok);
    if (first < 0) {
        // bf16 matrix products from here on (training.precision, resolved and checked
        // against this binary above; the other ops stay fp32: ops.h).
        ops_set_matmul_bf16(cfg->training.precision == PRECISION_BF16);
        ops_set_attention_cudnn(cfg->training.attention == ATTENTION_CUDNN);
        return;
    }
    if (first == comm_world_rank()) {
        if (first == 0) fprintf(stderr, "femtotron: error: %s\n", why);
        else fprintf(stderr, "femtotron: rank %d: error: %s\n", first, why);
    }
    comm_exit(1);
}

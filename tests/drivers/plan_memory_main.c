// tests/drivers/plan_memory_main.c — the planner's prediction of every rank's memory, for
// tests/shell/test_parity.sh to compare with what each rank of the real run reports.
//
// usage: plan_memory_main --world N [--config RUN.json] [--section.key value ...]
//   the same config file and overrides as the `femtotron train` run, and its number
//   of ranks. No MPI: one process predicts every rank (plan/memory_rank.h).
// prints, for every world rank R, the line the trainer prints at start-up:
//   memory bytes (rank R): params N grads N optimizer N activations N comm N
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dist/grid.h"
#include "ops/ops.h"
#include "plan/memory_rank.h"
#include "util.h"

int main(int argc, char **argv) {
    Config cfg;
    config_defaults(&cfg);
    int world = 0;
    // Pull out --world and --config; everything else is a config override.
    char **rest = xmalloc(sizeof(char *) * (size_t)argc, "argv");
    int n_rest = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--world") == 0 && i + 1 < argc) world = atoi(argv[++i]);
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config_load_file(&cfg, argv[++i]);
        else rest[n_rest++] = argv[i];
    }
    if (world < 1) die("plan_memory_main: --world N (the run's number of ranks) is required");
    config_apply_args(&cfg, n_rest, rest);
    config_validate(&cfg, world);
    if (cfg.parallel.auto_layout) die("plan_memory_main: give the layout (parallel.auto is not supported)");
    // The attention tiles in the activation arena are per thread (see memory_rank.h).
    if (cfg.training.threads < 1)
        die("plan_memory_main: training.threads must be given (activations depend on it)");
    ops_set_threads(cfg.training.threads);
    for (int r = 0; r < world; r++) {
        MemoryReport m = plan_rank_memory(&cfg, grid_coords(&cfg.parallel, r));
        printf("memory bytes (rank %d): params %zu grads %zu optimizer %zu activations %zu comm %zu",
               r, m.params, m.grads, m.optimizer, m.activations, m.comm);
        if (m.snapshot) printf(" snapshot %zu", m.snapshot);  // checkpoint.async, as the trainer prints it
        printf("\n");
    }
    free(rest);
    return 0;
}

// main.c — femtotron's command line: one subcommand per job.
//
// Only `train`, `bench calibrate` and `bench links` are MPI programs; MPI is started for them
// alone. prepare, plan, generate, plot and bench peak run as one process: without a
// launcher, and with a command line of any length (Open MPI's initialisation copies the
// arguments and fails past a few thousand input files). Started by a launcher as
// several ranks they refuse, rather than do the same work N times over.
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "bench/peak.h"
#include "data/prepare.h"
#include "dist/comm.h"
#include "gen/generate.h"
#include "ops/ops.h"
#include "plan/plan_cmd.h"
#include "train/plot_cmd.h"
#include "train/train_cmd.h"

static void usage(void) {
    printf("femtotron — Llama pre-training in C with 4D parallelism over MPI\n\n"
           "usage: femtotron <command> [options]     (train, bench calibrate: mpirun -np N femtotron ...)\n\n"
           "commands:\n"
           "  train     train a model:  femtotron train --config run.json [--section.key value ...]\n"
           "  prepare   turn text into token shards:  femtotron prepare --input FILE|DIR|GLOB|-... --output DIR\n"
           "  generate  sample text from a model:  femtotron generate --model DIR --prompt TEXT\n"
           "  plan      choose a parallel layout:  femtotron plan --model llama-3.1-8b --gpus 64 --hardware h100 ...\n"
           "  plot      draw metrics files as a PNG:  femtotron plot runs/x/metrics.jsonl [more.jsonl ...]\n"
           "  bench     measure this machine:  femtotron bench peak | calibrate\n\n"
           "`femtotron <command> --help` lists each command's options.\n");
}

static bool needs_mpi(int argc, char **argv) {
    if (argc < 2) return false;
    if (strcmp(argv[1], "train") == 0) return true;
    return strcmp(argv[1], "bench") == 0 && argc > 2 &&
           (strcmp(argv[2], "calibrate") == 0 || strcmp(argv[2], "links") == 0);
}

int main(int argc, char **argv) {
    ops_init(comm_launched_local_rank());  // the CUDA build stops here, saying so, where there is no GPU
    bool mpi = needs_mpi(argc, argv);
    if (mpi) {
        comm_init(&argc, &argv);
    } else if (comm_launched_size() > 1) {
        if (comm_launched_rank() == 0)
            fprintf(stderr, "femtotron: error: `femtotron %s` runs as one process, but it was started as "
                    "%d ranks (mpirun -np %d); start it without mpirun (it uses every core by itself)\n",
                    argv[1], comm_launched_size(), comm_launched_size());
        return 1;
    }
    int rc;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        rc = argc < 2 ? 1 : 0;
    } else if (strcmp(argv[1], "train") == 0) {
        rc = train_main(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "prepare") == 0) {
        rc = prepare_main(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "generate") == 0) {
        rc = generate_main(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "plan") == 0) {
        rc = plan_main(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "plot") == 0) {
        rc = plot_main(argc - 1, argv + 1);
    } else if (strcmp(argv[1], "bench") == 0) {
        rc = bench_main(argc - 1, argv + 1);
    } else {
        fprintf(stderr, "femtotron: unknown command \"%s\"\n\n", argv[1]);
        usage();
        rc = 1;
    }
    if (mpi) comm_finalize();
    return rc;
}

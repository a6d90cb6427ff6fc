// plan/plan_legend.c — the words under `femtotron plan`'s table: the legend of its
// labels, and the command that trains the chosen layout, so that the plan can be
// read without the source and copied into a run.
#include "plan/plan_legend.h"

#include <stdio.h>

#include "plan/moe_cost.h"

void plan_print_legend(int moe) {
    printf("\nlayout labels: dpN tpN ppN cpN = data-, tensor-, pipeline-, context-parallel ranks "
           "(parallel.dp/tp/pp/cp);\n"
           "  tpNsp = tensor parallel with sequence parallelism (parallel.sequence_parallel); "
           "zN = ZeRO stage N (parallel.zero);\n"
           "  mbsN = sequences per micro-batch (training.micro_batch_size); MN = micro-batches per "
           "step per data-parallel rank (training.grad_acc_steps);\n"
           "  afab / 1f1b / interleaved / zb-h1 / zb-v = pipeline schedule (parallel.pp_schedule), with xN = N model "
           "chunks per rank (parallel.pp_virtual; x4+ = 4 or more);\n"
           "  rc:none / rc:selective / rc:full = activation recomputation (training.recompute).\n");
    if (moe)
        printf("  epN = expert parallelism (parallel.ep): N ranks from within dp x cp share each layer's experts, "
               "E/N each (absent: every rank holds all experts);\n"
               "  each rank stores E/N experts (ZeRO shards them over dp*cp/N ranks) and plans its experts' rows for "
               "the worst case, N x tokens x min(k, E/N).\n");
    printf("columns: memory per rank in GiB; fit = fits the budget; step s = predicted seconds per "
           "step, split into %% of the step:\n"
           "  compute, tp / cp / pp = communication of each parallelism, bubble = pipeline idle, "
           "dp = data-parallel gradient communication, optim = optimizer step;%s MFU = model FLOPs "
           "utilization%s.\n", moe ? "\n  ep = expert-parallel all-to-alls (dispatch and combine, forward and "
           "backward: 4 per layer and micro-batch, each (N-1)/N of tokens x k rows of the width, exposed), priced "
           "like an all-gather of that size on the link the ep group crosses (inside a node when its ranks share "
           "one);" : "", moe ? " on active FLOPs (the k experts a token uses)" : "");
}

// The layout's keys after "--config CONFIG", as the training command spells them.
static void print_keys(const PlanProblem *p, const PlanLayout *l, const char *cfg, const char *config) {
    printf("--config %s --parallel.dp %d --parallel.tp %d --parallel.pp %d --parallel.cp %d --parallel.zero %d "
           "--parallel.sequence_parallel %s --training.micro_batch_size %d --training.grad_acc_steps %d "
           "--training.global_batch_size %lld --parallel.pp_schedule %s --parallel.pp_virtual %d "
           "--training.recompute %s",
           cfg, l->dp, l->tp, l->pp, l->cp, l->zero, l->sp ? "true" : "false", l->mbs, l->micro,
           p->global_seqs, pp_schedule_name(l->sched), l->v, recompute_name(l->recompute));
    if (plan_layout_ep(l) > 1) printf(" --parallel.ep %d", l->ep);
    if (!config) printf(" --training.seq_length %d", p->seq);  // no config of the plan holds it
}

void plan_print_train_command(const PlanProblem *p, const PlanLayout *l, const char *config, const char *placed) {
    const char *cfg = config ? config : "run.json";
    if (placed)  // ranks land on the nodes the placement chose; the trainer's grid is rank order
        printf("\ntrain it (Open MPI):\n  mpirun --rankfile %s.rankfile -np %d ./femtotron train ", placed, p->world);
    else
        printf("\ntrain it (Open MPI):\n  mpirun -np %d ./femtotron train ", p->world);
    print_keys(p, l, cfg, config);
    if (placed)
        printf("\nor (Slurm):\n  SLURM_HOSTFILE=%s.hosts srun --distribution=arbitrary --ntasks %d ./femtotron train ",
               placed, p->world);
    else
        printf("\nor (Slurm):\n  srun --ntasks %d ./femtotron train ", p->world);
    print_keys(p, l, cfg, config);
    printf("\n");
}

// train/train_cmd.c — `femtotron train`: config, start-up report, the loop, logs,
// validation and checkpoints.
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "train/train_cmd.h"

#include <sched.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/run_peak.h"
#include "dist/comm.h"
#include "dist/grid.h"
#include "io/checkpoint.h"
#include "ops/blas_cores.h"
#include "ops/ops.h"
#include "train/metrics_log.h"
#include "train/preempt.h"
#include "train/progress.h"
#include "train/schedule.h"
#include "train/train_configure.h"
#include "train/trace.h"
#include "train/trainer.h"
#include "util.h"

static void train_usage(void) {
    printf("usage: femtotron train [--config RUN.json] [--section.key value ...]\n\n"
           "Trains a Llama-style model. Every config key can be given in the JSON file\n"
           "or overridden on the command line, e.g. --training.steps 20.\n\n");
    config_print_help();
}


// The rank's planned buffers as allocated (counted by buf_alloc, util.h): a
// readable line and an exact one, which tests/shell/test_parity.sh compares with the
// planner's prediction (plan/memory_rank.h) byte for byte.
static void print_memory(void) {
    MemoryReport r = memory_allocated();
    const double MiB = 1024.0 * 1024.0;
    char snap[64] = "", snap_bytes[48] = "";  // only with checkpoint.async
    if (r.snapshot) {
        snprintf(snap, sizeof snap, " | snapshot %.1f MiB", r.snapshot / MiB);
        snprintf(snap_bytes, sizeof snap_bytes, " snapshot %zu", r.snapshot);
    }
    printf("memory (rank %d): params %.1f MiB | grads %.1f MiB | optimizer %.1f MiB | "
           "activations %.1f MiB | comm %.1f MiB%s | total %.1f MiB (activations %zu bytes)\n"
           "memory bytes (rank %d): params %zu grads %zu optimizer %zu activations %zu comm %zu%s\n",
           comm_world_rank(), r.params / MiB, r.grads / MiB, r.optimizer / MiB, r.activations / MiB,
           r.comm / MiB, snap, (r.params + r.grads + r.optimizer + r.activations + r.comm + r.snapshot) / MiB,
           r.activations, comm_world_rank(), r.params, r.grads, r.optimizer, r.activations, r.comm, snap_bytes);
    fflush(stdout);
}

// The largest rank of each kind (pipeline stages differ: the last holds the head
// and the logits, the first the most in-flight micro-batches): collective; rank 0
// prints one line, each kind's maximum with the lowest rank that has it, and the
// largest total with its grid position.
static void print_memory_max(const ParallelConfig *pc) {
    const int world = comm_world_size(), me = comm_world_rank();
    if (world == 1) return;
    enum { COLS = MEM_KINDS + 1 };  // the kinds, then the total
    double *table = xcalloc(sizeof(double) * (size_t)world * COLS, "memory table");  // (world, COLS) bytes
    double total = 0;
    for (int k = 0; k < MEM_KINDS; k++) total += table[(size_t)me * COLS + k] = (double)mem_allocated(k);
    table[(size_t)me * COLS + MEM_KINDS] = total;
    group_allreduce_sum_f64(GROUP_WORLD, table, (size_t)world * COLS);
    if (me == 0) {
        int at[COLS];  // the lowest rank with the largest value of each column
        for (int c = 0; c < COLS; c++) {
            at[c] = 0;
            for (int r = 1; r < world; r++)
                if (table[(size_t)r * COLS + c] > table[(size_t)at[c] * COLS + c]) at[c] = r;
        }
        const double MiB = 1024.0 * 1024.0;
        printf("memory (max over %d ranks):", world);
        for (int k = 0; k < MEM_KINDS; k++) {
            const double b = table[(size_t)at[k] * COLS + k];
            if (k == MEM_SNAPSHOT && b == 0) continue;  // only with checkpoint.async
            printf(" %s %.1f MiB (rank %d) |", mem_kind_name(k), b / MiB, at[k]);
        }
        const int r = at[MEM_KINDS];
        const GridCoords g = grid_coords(pc, r);
        printf(" total %.1f MiB on rank %d (pp stage %d of %d, dp %d, cp %d, tp %d)\n",
               table[(size_t)r * COLS + MEM_KINDS] / MiB, r, g.pp, pc->pp, g.dp, g.cp, g.tp);
        fflush(stdout);
    }
    free(table);
}

// Every output the run writes late (checkpoints, metrics, the trace) is created and
// checked writable now, before any compute that a failed first save would lose.
// Rank 0 also clears what an interrupted save left in checkpoint.dir.
static void check_outputs(const Config *cfg) {
    if (comm_world_rank() == 0) {
        if (cfg->checkpoint.dir[0]) checkpoint_prepare_dir(cfg->checkpoint.dir);
        if (cfg->logging.metrics[0]) check_writable_file(cfg->logging.metrics, "logging.metrics");
    }
    if (cfg->logging.trace[0]) check_writable_file(cfg->logging.trace, "logging.trace");
    group_barrier(GROUP_WORLD);
}

// A resume reads the data that the rule (data/mixture.h) puts at the positions after
// the checkpoint's: with other sources or weights than the run had, that is other
// data than the uninterrupted run would have read. Allowed (moving the shards, or
// changing the mix for the rest of a run, are legitimate), but said.
static void warn_if_data_changed(const DataConfig *was, const DataConfig *now, int step) {
    if (comm_world_rank() != 0) return;
    DataSource *a = xmalloc(2 * CFG_MAX_SOURCES * sizeof *a, "data sources");  // (2, CFG_MAX_SOURCES)
    DataSource *b = a + CFG_MAX_SOURCES;
    int na = config_data_sources(was->train, "the checkpoint's data.train", a);
    int nb = config_data_sources(now->train, "data.train", b);
    int same = na == nb && was->shuffle == now->shuffle;
    double sa = 0, sb = 0;
    for (int k = 0; k < na && same; k++) sa += a[k].weight, sb += b[k].weight;
    for (int k = 0; k < na && same; k++)
        same = strcmp(a[k].path, b[k].path) == 0 && fabs(a[k].weight / sa - b[k].weight / sb) < 1e-12;
    if (!same)
        warn("data.train \"%s\" (data.shuffle %s) is not what the checkpoint's run read (\"%s\", "
             "data.shuffle %s): from step %d on this run reads the new sources' sequences",
             now->train, now->shuffle ? "true" : "false", was->train, was->shuffle ? "true" : "false",
             step + 1);
    free(a);
}

// Resume or refuse: a directory that already holds checkpoints is never written
// over unless the user asked to resume from it.
static void setup_checkpoints(Trainer *t) {
    const CheckpointConfig *cc = &t->cfg.checkpoint;
    if (!cc->dir[0]) return;
    char latest[CFG_PATH_MAX + 64];
    int have = checkpoint_latest(cc->dir, latest, sizeof latest);
    if (cc->resume && have) {
        trainer_load(t, latest);
        if (comm_world_rank() == 0) printf("resumed from %s (step %d)\n", latest, t->state.step);
        Config was;  // the run configuration the checkpoint was written with
        checkpoint_read_config(latest, &was);
        lr_check_resume(&was.training, &t->cfg.training, t->state.step);
        warn_if_data_changed(&was.data, &t->cfg.data, t->state.step);
        uint64_t expect = (uint64_t)t->state.step * (uint64_t)t->cfg.training.global_batch_size;
        if (t->state.consumed_sequences != expect)
            die("checkpoint %s: consumed %llu sequences in %d steps, but training.global_batch_size "
                "= %d implies %llu; resume with the global batch size the run was started with",
                latest, (unsigned long long)t->state.consumed_sequences, t->state.step,
                t->cfg.training.global_batch_size, (unsigned long long)expect);
    } else if (have) {
        die("checkpoint.dir %s already holds checkpoints (latest: %s); set "
            "--checkpoint.resume true to continue that run, or choose another directory",
            cc->dir, latest);
    } else if (cc->resume) {
        if (comm_world_rank() == 0)
            printf("checkpoint.resume: no checkpoint in %s yet, starting from step 0\n", cc->dir);
    }
}

// One step's console line (every logging.every steps, the last, and any with
// validation) and metrics record (every step).
static void log_step(const Progress *p, MetricsLog *metrics, Trainer *t, const StepResult *r, double tokens,
                     double step_s, double flops_per_token, double peak, double val_loss) {
    const TrainingConfig *tc = &t->cfg.training;
    double tps = tokens / step_s, mfu = flops_per_token * tps / peak;
    if (r->step % t->cfg.logging.every == 0 || r->step == tc->steps || !isnan(val_loss))
        progress_print_step(p, t, r, tps, mfu, step_s, val_loss);
    if (!metrics->f) return;
    const int val_sources = t->has_val ? t->val_data.n : 0;
    double source_tokens[CFG_MAX_SOURCES];
    if (t->train_data.n > 1) {
        // Tokens each source has given the run so far (the rule's counts, exact).
        uint64_t seqs[CFG_MAX_SOURCES];
        mixture_counts(&t->train_data, (uint64_t)r->step * (uint64_t)tc->global_batch_size, seqs);
        for (int k = 0; k < t->train_data.n; k++) source_tokens[k] = (double)seqs[k] * tc->seq_length;
    }
    const double *by_source = val_sources > 1 ? t->val_loss_by_source : NULL;
    StepRecord rec = {
        .step = r->step, .loss = r->loss, .lr = r->lr, .grad_norm = r->grad_norm, .tokens = tokens,
        .tokens_per_s = tps, .mfu = mfu, .step_ms = 1e3 * step_s, .skipped = r->skipped,
        .source_tokens = t->train_data.n > 1 ? source_tokens : NULL, .n_sources = t->train_data.n,
        .val_loss = val_loss, .val_by_source = by_source, .n_val_sources = val_sources,
        .aux_loss = t->rank.model.moe_aux ? r->aux_loss : (double)NAN,
        .ep_ms = t->rank.model.ep.size > 1 ? r->ep_ms : (double)NAN,
    };
    metrics_step(metrics, &rec);
    if (!isnan(val_loss)) metrics_val(metrics, r->step, val_loss, by_source, val_sources);
}

// The data lines of the start-up report: each source of a mixture with its
// weight, its sequences and how many epochs of it the run will read.
static void print_sources(const char *what, const DataMixture *m, double positions) {
    if (m->n == 1) return;
    printf("%s: a mixture of %d sources\n", what, m->n);
    for (int k = 0; k < m->n; k++) {
        printf("  source %d: %s | weight %.4f | %llu sequences", k + 1, m->spec[k].path, m->w[k],
               (unsigned long long)m->src[k].n_seq);
        if (positions > 0)
            printf(" | %.3g epochs over the run", m->w[k] * positions / (double)m->src[k].n_seq);
        printf("\n");
    }
}

int train_main(int argc, char **argv) {
    Config cfg;
    config_defaults(&cfg);
    int i = 1, n_files = 0;
    char **files = xmalloc(sizeof(char *) * (size_t)(argc > 0 ? argc : 1), "config file list");  // (argc)
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            train_usage();
            free(files);
            return 0;
        }
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) die("train: --config needs a file");
            files[n_files++] = argv[++i];
        } else {
            break;
        }
    }
    // Files, keys, auto layout, validation: one message per error, not one per rank.
    train_configure(&cfg, files, n_files, argc - i, argv + i);
    free(files);
    comm_grid_init(&cfg.parallel);
    if (cfg.training.threads == 0) cfg.training.threads = comm_default_threads();
    ops_set_threads(cfg.training.threads);
    const int rank0 = comm_world_rank() == 0, world = comm_world_size();
    Progress progress = {0};
    if (rank0) progress_start(&progress);

    preempt_install();  // a signal from here on stops the run after a step, with a checkpoint
    check_outputs(&cfg);
    const TrainingConfig *tc = &cfg.training;
    // MFU denominator: the peak of every rank together (bench/run_peak.h). Before
    // the trainer: a GPU no table knows is measured with products larger than a
    // step's, which the backend's planned work buffers, installed by trainer_init,
    // are not sized for (ops.h).
    if (rank0 && tc->peak_flops <= 0 && !cfg.parallel.profile[0] && ops_device(NULL, 0) == 0) {
        printf("finding the GEMM peak for MFU (cached per node; training.peak_flops skips this) ...\n");
        fflush(stdout);
    }
    const RunPeak peak = run_peak(&cfg, tc->threads);
    if (rank0 && cfg.model.from[0]) {
        printf("loading the weights of %s (model.from) ...\n", cfg.model.from);
        fflush(stdout);
    }
    Trainer t;
    trainer_init(&t, &cfg, grid_coords(&cfg.parallel, comm_world_rank()));
    const LlamaModel *model = &t.rank.model;
    const double fpt = llama_flops_per_token(model, tc->seq_length);
    if (cfg.logging.verbose) {
        const GridCoords g = t.rank.at;
        const ParallelConfig *p = &cfg.parallel;
        printf("rank %d: dp %d/%d pp %d/%d cp %d/%d tp %d/%d (order %s)\n", comm_world_rank(), g.dp,
               p->dp, g.pp, p->pp, g.cp, p->cp, g.tp, p->tp, rank_order_name(p->order));
        fflush(stdout);
    }
    if (rank0) {
        printf("model: %zu parameters (%zu in matmuls; %zu on this rank), %d layers, hidden %d, "
               "heads %d/%d kv, vocab %d\n",
               llama_global_params(model), llama_matmul_params(model), t.rank.dp.n_elements, model->L,
               model->D, model->H, model->KV, model->V);
        if (model->E > 0)  // the matmul count above is the active one: router + k experts per token
            printf("mixture of experts: %d experts per layer, top-%d (active matmul parameters above), "
                   "load-balancing loss %s, expert parallel %d (%d experts computed per rank)\n",
                   model->E, model->K, model->moe_aux ? "on" : "off", model->ep.size, model->E / model->ep.size);
        printf("layout: %d ranks = dp %d x pp %d x cp %d x tp %d, ZeRO-%d, %d gradient buckets, "
               "pipeline %s with %d chunk(s) per rank\n",
               world, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.cp, cfg.parallel.tp,
               cfg.parallel.zero, t.rank.dp.n_buckets, pp_schedule_name(cfg.parallel.pp_schedule),
               cfg.parallel.pp_virtual);
        if (pp_schedule_splits(cfg.parallel.pp_schedule) && cfg.parallel.pp > 1)
            printf("%s lists built for parallel.pp_costs = %s: replayed bubble %.3f of the busiest rank's passes "
                   "under those costs (the unit-time lists: %.3f)\n",
                   pp_schedule_name(cfg.parallel.pp_schedule), cfg.parallel.pp_costs, t.rank.pipe.zb_bubble,
                   t.rank.pipe.zb_unit_bubble);
        const DataParallel *dp = &t.rank.dp;
        if (dp->n_grad_windows > 0)
            printf("ZeRO-%d windows: %d gradient + %d parameter of %.2f MiB each (the largest bucket%s)%s\n",
                   dp->zero, dp->n_grad_windows, dp->n_param_windows,
                   dp_window_elements(dp) * sizeof(float) / (1024.0 * 1024.0),
                   dp->piece_max ? "; embedding and head in pieces" : "",
                   dp->zero == 3 && dp->n_grad_windows == 1
                       ? "; one gradient window, so reductions do not overlap backward: a second would cost more "
                         "than ZeRO-3 saves over ZeRO-1 here"
                       : "");
        printf("batch: %d sequences x %d tokens per step = %d micro-batches of %d per dp rank",
               tc->global_batch_size, tc->seq_length, tc->grad_acc_steps, tc->micro_batch_size);
        if (t.train_data.n == 1)
            printf("; %llu sequences in %s", (unsigned long long)t.train_data.src[0].n_seq, cfg.data.train);
        printf("\n");
        print_sources("data.train", &t.train_data, (double)tc->steps * tc->global_batch_size);
        if (t.has_val) print_sources("data.val (each source scored on its own)", &t.val_data, 0);
        printf("threads %d per rank | %.3g model FLOPs/token\n", tc->threads, fpt);
        char blas_note[320];
        if (blas_kernels_note(blas_note, sizeof blas_note)) printf("BLAS: %s\n", blas_note);
        printf("MFU peak: %.1f GFLOP/s per rank, %.1f GFLOP/s in all (%s)\n", peak.per_rank / 1e9,
               peak.total / 1e9, peak.source);
    }
    if (rank0 || cfg.logging.verbose) print_memory();
    print_memory_max(&cfg.parallel);
    setup_checkpoints(&t);

    MetricsLog metrics = {0};
    if (rank0) metrics_open(&metrics, cfg.logging.metrics, t.state.step);
    t.ckpt.metrics = &metrics;
    const double tokens_per_step = (double)tc->global_batch_size * tc->seq_length;
    trace_open(cfg.logging.trace, now_seconds());
    int exit_code = 0;
    if (rank0) progress_loop(&progress, t.state.step, tc->steps);
    int run_steps = 0;  // steps of this run (a resumed run counts from its own start)
    const int measure_costs = !strcmp(cfg.parallel.pp_costs, "measure") && cfg.parallel.pp > 1;
    while (t.state.step < tc->steps) {
        // The passes' timers wait for the device (a GPU's ops return before they
        // finish) while a trace is written and in the step whose passes
        // parallel.pp_costs = "measure" reads (the second).
        t.rank.pipe.time_passes = trace_enabled() || (measure_costs && run_steps == 1);
        double t0 = now_seconds();
        StepResult r = trainer_step(&t);
        double dt = now_seconds() - t0;
        // parallel.pp_costs = "measure": the passes of the run's second step (the
        // first warms caches and pages) become the zero-bubble lists' costs, the
        // same on every rank; every rank takes part, at the same step.
        if (++run_steps == 2 && measure_costs) {
            double *ms = xmalloc(sizeof(double) * 3 * (size_t)cfg.parallel.pp * cfg.parallel.pp_virtual, "costs");
            double before, after;
            const int changed = pp_adopt_measured_costs(&t.rank.pipe, ms, &before, &after);
            if (rank0) {
                const int K = cfg.parallel.pp * cfg.parallel.pp_virtual;
                printf("%s lists %s for the passes measured in step %d (F:I:W ms per virtual stage", 
                       pp_schedule_name(cfg.parallel.pp_schedule), changed ? "rebuilt" : "kept", r.step);
                for (int k = 0; k < K; k++) printf("%s%.2f:%.2f:%.2f", k ? "," : " ", ms[k], ms[K + k], ms[2 * K + k]);
                printf("): replayed bubble %.3f -> %.3f\n", before, after);
                fflush(stdout);
            }
            free(ms);
        }
        if (r.skipped && rank0) warn("step %d: non-finite loss or gradient norm, update skipped", r.step);
        double val = NAN;
        if (cfg.logging.val_every > 0 && r.step % cfg.logging.val_every == 0)
            val = trainer_validate(&t);
        if (rank0) {
            progress_count(&progress, r.step, tokens_per_step, dt, val);
            log_step(&progress, &metrics, &t, &r, tokens_per_step, dt, fpt, peak.total, val);
        }
        // The ranks agree once per step, in one small all-reduce, whether any of them
        // was signalled and whether every background checkpoint writer is done.
        double ctl[2] = {preempt_signal(), checkpointer_writing(&t)};
        group_allreduce_max_f64(GROUP_WORLD, ctl, 2);
        if (t.ckpt.in_flight && ctl[1] == 0) checkpointer_finish(&t);
        // (a signal during the last step changes nothing: the run is complete)
        const int stop = ctl[0] > 0 && r.step < tc->steps, every = cfg.checkpoint.every;
        const int saves = cfg.checkpoint.dir[0] != '\0';
        if (saves && ((every > 0 && r.step % every == 0) || r.step == tc->steps || stop)) checkpointer_save(&t);
        if (stop) {
            checkpointer_finish(&t);
            if (rank0) {
                char where[CFG_PATH_MAX + 96];
                if (saves)
                    snprintf(where, sizeof where, "wrote the checkpoint %s/step_%07d; resume with "
                             "--checkpoint.resume true", cfg.checkpoint.dir, r.step);
                else
                    snprintf(where, sizeof where, "no checkpoint.dir is set, so nothing was saved");
                printf("preempted: %s received; stopped after step %d of %d and %s (exit code %d)\n",
                       preempt_signal_name((int)ctl[0]), r.step, tc->steps, where, EXIT_PREEMPTED);
                fflush(stdout);
            }
            exit_code = EXIT_PREEMPTED;
            break;
        }
    }
    checkpointer_finish(&t);  // the last async save's line comes before the summary
    if (rank0) progress_summary(&progress, &cfg, fpt, peak.total);
    // GPU buffers' collectives over MPI (ranks sharing a GPU, parallel.comm = mpi)
    // went through pinned host memory (dist/comm_stage.h).
    if (comm_staged_bytes() && (rank0 || cfg.logging.verbose)) {
        printf("rank %d: %.1f MiB of collectives over MPI staged through pinned host memory\n", comm_world_rank(),
               (double)comm_staged_bytes() / 1048576.0);
        fflush(stdout);
    }
    // Pipeline and ring messages over NCCL links (dist/comm.h: group_open_links).
    if (comm_link_bytes() && (rank0 || cfg.logging.verbose)) {
        printf("rank %d: %.1f MiB of point-to-point messages over NCCL links\n", comm_world_rank(),
               (double)comm_link_bytes() / 1048576.0);
        fflush(stdout);
    }
    metrics_close(&metrics);
    t.ckpt.metrics = NULL;
    trace_close();
    trainer_free(&t);
    return exit_code;
}

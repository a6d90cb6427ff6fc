// plan/plan_cmd.c — `femtotron plan`: the ranked table of layouts, the winner
// explained; `--layout` evaluates one given layout. (`train --parallel.auto` asks
// the same search for the fastest layout that fits: plan/plan_auto.c.)
#define _DEFAULT_SOURCE  // sysconf page counts
#include "plan/plan_cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "plan/moe_cost.h"
#include "plan/plan_legend.h"
#include "plan/plan_place.h"
#include "ops/ops.h"
#include "util.h"

static void usage(void) {
    printf("usage: femtotron plan --model PRESET|HF_CONFIG --gpus N --hardware h100|h200|a100|this\n"
           "                      --seq-length S --global-batch-tokens T [options]\n"
           "       femtotron plan --config run.json [--gpus N] [--hardware this] [options]\n\n"
           "Ranks every (dp, tp, pp, cp, ZeRO stage, micro-batch, schedule, recompute; for a mixture of\n"
           "experts also ep) layout by predicted step time, with per-rank memory, and marks the layouts\n"
           "that do not fit.\n\n"
           "  --model M               preset (");
    for (int i = 0; plan_model_preset_name(i); i++) printf("%s%s", i ? ", " : "", plan_model_preset_name(i));
    printf(")\n"
           "                          or a Hugging Face config.json / model directory\n"
           "  --config FILE           femtotron run config: its model, sequence, batch and budget;\n"
           "                          memory is then the trainer's exact fp32 allocation plan\n"
           "  --gpus N                ranks in total (--config: default parallel.dp*tp*pp*cp)\n"
           "  --gpus-per-node G       ranks sharing the fast link (default: the profile's)\n"
           "  --hardware H            h100, h200, a100 (bf16 mixed precision) or this (measured profile)\n"
           "  --profile FILE          the profile for --hardware this (default profile.json, written by\n"
           "                          `femtotron bench calibrate`)\n"
           "  --seq-length S          tokens per sequence\n"
           "  --global-batch-tokens T tokens per optimizer step (a multiple of S)\n"
           "  --memory-gb M           memory budget per rank in GiB (default: the profile's memory,\n"
           "                          minus 5%% and, on GPUs, 2 GiB for the runtime)\n"
           "  --top K                 rows to print (default 10)\n"
           "  --layout L              evaluate only this layout, e.g.\n"
           "                          dp=128,tp=8,pp=16,cp=1,zero=1,sp=1,mbs=1,sched=interleaved,v=2,recompute=none\n"
           "                          (mixture of experts: ep=N, expert-parallel ranks from within dp*cp)\n"
           "  --tsv                   machine-readable rows (tab-separated, with a header)\n"
           "  --links FILE            place the chosen layout on the nodes measured by `femtotron bench links`\n"
           "                          (the profile's \"links\" matrix): which node holds which pipeline stage\n"
           "                          and replica, to minimise communication between nodes\n"
           "  --placement PREFIX      where --links writes PREFIX.rankfile (mpirun --rankfile) and\n"
           "                          PREFIX.hosts (SLURM_HOSTFILE, srun --distribution=arbitrary);\n"
           "                          default placement\n");
}

static const char *need(int argc, char **argv, int i) {
    if (i + 1 >= argc) die("plan: %s needs a value", argv[i]);
    return argv[i + 1];
}

static long long parse_ll(const char *opt, const char *v, long long min) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < min) die("plan: %s %s: expected an integer of at least %lld", opt, v, min);
    return x;
}

void plan_parse_layout(PlanLayout *l, const char *text) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) die("--layout: \"%s\" is not key=value", tok);
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        if (strcmp(k, "sched") == 0) {  // the spellings of parallel.pp_schedule
            int sched = config_name_index(PP_SCHEDULE_NAMES, v);
            if (sched < 0) die("--layout: sched=%s: must be afab, 1f1b, interleaved, zb-h1 or zb-v", v);
            l->sched = (PpSchedule)sched;
        } else if (strcmp(k, "recompute") == 0) {  // and of training.recompute
            int rc = config_name_index(RECOMPUTE_NAMES, v);
            if (rc < 0) die("--layout: recompute=%s: must be none, selective or full", v);
            l->recompute = (Recompute)rc;
        } else {
            int x = (int)parse_ll(k, v, strcmp(k, "zero") == 0 || strcmp(k, "sp") == 0 ? 0 : 1);
            if (strcmp(k, "dp") == 0) l->dp = x;
            else if (strcmp(k, "tp") == 0) l->tp = x;
            else if (strcmp(k, "pp") == 0) l->pp = x;
            else if (strcmp(k, "cp") == 0) l->cp = x;
            else if (strcmp(k, "zero") == 0) l->zero = x;
            else if (strcmp(k, "sp") == 0) l->sp = x;
            else if (strcmp(k, "mbs") == 0) l->mbs = x;
            else if (strcmp(k, "v") == 0) l->v = x;
            else if (strcmp(k, "ep") == 0) l->ep = x;
            else die("--layout: unknown key \"%s\" (dp, tp, pp, cp, ep, zero, sp, mbs, sched, v, recompute)", k);
        }
    }
}

// ------------------------------------------------------------------- output

static double gib(double b) { return b / 1073741824.0; }

// The TSV has every column always (ep = 1 and ep_s = 0 for a dense model, appended
// last so that older readers' column numbers hold); the table shows the ep column
// (the all-to-alls' share of the step) for mixture-of-experts models only.
static void print_header(int tsv, int moe) {
    if (tsv) {
        printf("rank\tlayout\tdp\ttp\tpp\tcp\tzero\tsp\tmbs\tmicro\tsched\tv\trecompute\tparams_B\tgrads_B\t"
               "optimizer_B\tactivations_B\tcomm_B\ttotal_B\tfits\tstep_s\tcompute_s\ttp_s\tcp_s\tpp_s\t"
               "bubble_s\tdp_s\toptimizer_s\ttokens_per_s_per_rank\tmfu\tep\tep_s\n");
        return;
    }
    const int w = moe ? 56 : 50;  // " epN" lengthens a mixture of experts' layout names
    printf("%4s  %-*s %7s %7s %7s %7s %7s %8s %4s | %9s %7s %6s %6s %6s %6s %6s %6s", "#", w,
           "layout", "param", "grad", "optim", "activ", "comm", "total", "fit", "step s", "compute", "tp",
           "cp", "pp", "bubble", "dp", "optim");
    if (moe) printf(" %6s", "ep");
    printf(" %10s %6s\n", "tok/s/rank", "MFU");
    printf("%4s  %-*s %7s %7s %7s %7s %7s %8s %4s | %9s %7s %6s %6s %6s %6s %6s %6s", "", w, "",
           "GiB", "GiB", "GiB", "GiB", "GiB", "GiB", "", "", "%", "%", "%", "%", "%", "%", "%");
    if (moe) printf(" %6s", "%");
    printf(" %10s %6s\n", "", "");
}

static void print_row(int i, const PlanResult *r, int tsv, int moe) {
    char name[128];
    plan_layout_name(&r->layout, name, sizeof name);
    const PlanLayout *l = &r->layout;
    const PlanMemory *m = &r->mem;
    const StepTime *t = &r->time;
    if (tsv) {
        printf("%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%.6g\t"
               "%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.6g\t%.4f\t%d\t%.6g\n",
               i, name, l->dp, l->tp, l->pp, l->cp, l->zero, l->sp, l->mbs, l->micro, pp_schedule_name(l->sched),
               l->v, recompute_name(l->recompute),
               m->params, m->grads, m->optimizer, m->activations, m->comm, m->total, r->fits, t->total, t->compute,
               t->tp_comm, t->cp_comm, t->pp_comm, t->bubble, t->dp_comm, t->optimizer, t->tokens_per_s_per_rank,
               t->mfu, plan_layout_ep(l), t->ep_comm);
        return;
    }
    const double T = t->total / 100.0;
    printf("%4d  %-*s %7.2f %7.2f %7.2f %7.2f %7.2f %8.2f %4s | %9.4g %7.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f", i,
           moe ? 56 : 50, name, gib(m->params), gib(m->grads), gib(m->optimizer), gib(m->activations),
           gib(m->comm), gib(m->total), r->fits ? "yes" : "NO", t->total, t->compute / T, t->tp_comm / T,
           t->cp_comm / T, t->pp_comm / T, t->bubble / T, t->dp_comm / T, t->optimizer / T);
    if (moe) printf(" %6.1f", t->ep_comm / T);
    printf(" %10.4g %5.1f%%\n", t->tokens_per_s_per_rank, 100.0 * t->mfu);
}

// ------------------------------------------------------------------ problem

typedef struct {
    const char *model, *config, *hardware, *profile, *layout, *links, *placement;
    long long gpus, gpus_per_node, seq, batch_tokens;
    double memory_gb;
    int top, tsv;
} PlanArgs;

static void load_hardware(Hardware *hw, const char *name, const char *profile) {
    if (strcmp(name, "this") == 0) {
        if (access(profile, R_OK) != 0)
            die("plan: --hardware this needs the profile %s: run `mpirun -np N femtotron bench calibrate "
                "--output %s` first (N = the ranks you will train with)", profile, profile);
        hardware_load(hw, profile);
        return;
    }
    if (!hardware_builtin(hw, name))
        die("plan: --hardware %s: unknown (h100, h200, a100, or this for the measured profile)", name);
}

// Budget: --memory-gb, else the profile's memory less 5% and, on GPUs, 2 GiB for
// the CUDA context, NCCL buffers and allocator fragmentation.
static double memory_budget(const Hardware *hw, double memory_gb) {
    if (memory_gb > 0) return memory_gb * 1073741824.0;
    return hw->mem_bytes * 0.95 - (hw->bytes_per_value == 2 ? 2.0 * 1073741824.0 : 0.0);
}

static void build_problem(PlanProblem *p, Config *base, const PlanArgs *a) {
    memset(p, 0, sizeof *p);
    const char *hwname = a->hardware ? a->hardware : (a->config ? "this" : NULL);
    if (!hwname) die("plan: --hardware is required (h100, h200, a100 or this)");
    load_hardware(&p->hw, hwname, a->profile);
    if (a->gpus_per_node) p->hw.gpus_per_node = (int)a->gpus_per_node;
    if (a->config) {
        config_defaults(base);
        config_load_file(base, a->config);
        if (a->seq) base->training.seq_length = (int)a->seq;
        plan_model_from_config(&p->model, &base->model);
        p->seq = base->training.seq_length;
        int dp = base->parallel.dp;
        if (base->training.global_batch_size == 0) {
            int acc = base->training.grad_acc_steps ? base->training.grad_acc_steps : 1;
            base->training.global_batch_size = acc * base->training.micro_batch_size * dp;
        }
        p->global_seqs = a->batch_tokens ? a->batch_tokens / p->seq : base->training.global_batch_size;
        p->world = a->gpus ? (int)a->gpus
                           : base->parallel.dp * base->parallel.tp * base->parallel.pp * base->parallel.cp;
        p->mem_budget = memory_budget(&p->hw, a->memory_gb > 0 ? a->memory_gb : base->parallel.memory_gb);
    } else {
        if (!a->model) die("plan: --model is required (a preset or a Hugging Face config.json)");
        if (!a->gpus) die("plan: --gpus is required");
        if (!a->seq) die("plan: --seq-length is required");
        if (!a->batch_tokens) die("plan: --global-batch-tokens is required");
        plan_model_resolve(&p->model, a->model);
        p->seq = (int)a->seq;
        p->world = (int)a->gpus;
        p->global_seqs = a->batch_tokens / a->seq;
        p->mem_budget = memory_budget(&p->hw, a->memory_gb);
        if (p->hw.bytes_per_value == 4) {
            // femtotron on this machine: a run config with the model's shapes.
            if (p->model.ffn_mats != 3 || !p->model.flash)
                die("plan: --model %s is a GPT-style model; femtotron trains Llama-style models only "
                    "(use --hardware h100|h200|a100 to plan it on paper)", a->model);
            config_defaults(base);
            ModelConfig *mc = &base->model;
            mc->hidden_size = p->model.D;
            mc->intermediate_size = p->model.F;
            mc->num_hidden_layers = p->model.L;
            mc->num_attention_heads = p->model.H;
            mc->num_key_value_heads = p->model.KV;
            mc->vocab_size = p->model.V;
            mc->tie_word_embeddings = p->model.tied;
            mc->num_local_experts = p->model.E;
            mc->num_experts_per_tok = p->model.E > 0 ? p->model.K : mc->num_experts_per_tok;
            mc->n_shared_experts = p->model.E > 0 ? p->model.Fs / p->model.F : 0;
            mc->max_position_embeddings = p->seq > mc->max_position_embeddings ? p->seq : mc->max_position_embeddings;
            base->training.seq_length = p->seq;
            base->training.global_batch_size = (int)p->global_seqs;
        }
    }
    if (a->batch_tokens && a->batch_tokens % p->seq)
        die("plan: --global-batch-tokens %lld is not a multiple of the sequence length %d", a->batch_tokens, p->seq);
    if (p->global_seqs < 1) die("plan: the global batch holds no whole sequence");
    if (p->hw.bytes_per_value == 4) {
        p->base = base;
        // The attention kernel's per-thread tiles are part of the activation plan.
        ops_set_threads(p->hw.calib_threads > 0 ? p->hw.calib_threads : 1);
    }
}

static PlanArgs parse_args(int argc, char **argv) {
    PlanArgs a;
    memset(&a, 0, sizeof a);
    a.profile = "profile.json";
    a.placement = "placement";
    a.top = 10;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--tsv") == 0) {
            a.tsv = 1;
            continue;
        }
        const char *v = need(argc, argv, i++);
        if (strcmp(o, "--model") == 0) a.model = v;
        else if (strcmp(o, "--config") == 0) a.config = v;
        else if (strcmp(o, "--hardware") == 0) a.hardware = v;
        else if (strcmp(o, "--profile") == 0) a.profile = v;
        else if (strcmp(o, "--layout") == 0) a.layout = v;
        else if (strcmp(o, "--links") == 0) a.links = v;
        else if (strcmp(o, "--placement") == 0) a.placement = v;
        else if (strcmp(o, "--gpus") == 0) a.gpus = parse_ll(o, v, 1);
        else if (strcmp(o, "--gpus-per-node") == 0) a.gpus_per_node = parse_ll(o, v, 1);
        else if (strcmp(o, "--seq-length") == 0) a.seq = parse_ll(o, v, 2);
        else if (strcmp(o, "--global-batch-tokens") == 0) a.batch_tokens = parse_ll(o, v, 1);
        else if (strcmp(o, "--top") == 0) a.top = (int)parse_ll(o, v, 1);
        else if (strcmp(o, "--memory-gb") == 0) {
            char *end;
            a.memory_gb = strtod(v, &end);
            if (end == v || *end || !(a.memory_gb > 0)) die("plan: --memory-gb %s: expected a positive number", v);
        } else {
            die("plan: unknown option \"%s\" (see femtotron plan --help)", o);
        }
    }
    return a;
}

int plan_main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage();
        return argc < 2 ? 1 : 0;
    }
    PlanArgs a = parse_args(argc, argv);
    Config base;
    PlanProblem p;
    build_problem(&p, &base, &a);
    // Measured links: every layout's collectives are priced on its placement's links.
    LinkMatrix links;
    if (a.links) {
        links_load(&links, a.links);
        const int g = p.hw.gpus_per_node;
        if (p.world % g || p.world / g != links.n)
            die("plan --links %s: the layout's %d ranks fill %d nodes of %d GPUs (--gpus-per-node), the link matrix "
                "has %d nodes", a.links, p.world, p.world / g, g, links.n);
        p.links = &links;
    }
    const int hd = p.model.D / p.model.H, moe = p.model.E > 0;
    if (p.hw.attn_head_dim > 0 && p.hw.attn_head_dim != hd)
        fprintf(stderr, "plan: note: the profile's attention curves are for head dim %d, the model's is %d: "
                        "attention times are off (run bench calibrate --head-dim %d for this model)\n",
                p.hw.attn_head_dim, hd, hd);
    const char *att = ATTENTION_NAMES[base.training.attention];
    if (p.hw.attention[0] && strcmp(p.hw.attention, att))
        fprintf(stderr, "plan: note: the profile's attention curves timed %s's kernels, the run uses %s's "
                        "(training.attention): attention times are off (run bench calibrate --attention %s)\n",
                p.hw.attention, att, att);
    if (!a.tsv && p.model.E > 0) {
        printf("plan: %s (%.3g B parameters, %.3g B active per token: %d experts, top-%d) on %d x %s, sequence "
               "%d, %lld sequences per step, budget %.1f GiB per rank\n\n", p.model.name,
               plan_total_params(&p.model) / 1e9, plan_active_params(&p.model) / 1e9, p.model.E, p.model.K, p.world,
               p.hw.name, p.seq, p.global_seqs, p.mem_budget / 1073741824.0);
    } else if (!a.tsv) {
        printf("plan: %s (%.3g B parameters) on %d x %s, sequence %d, %lld sequences per step, budget %.1f GiB "
               "per rank\n\n", p.model.name, plan_total_params(&p.model) / 1e9, p.world, p.hw.name, p.seq,
               p.global_seqs, p.mem_budget / 1073741824.0);
    }
    if (a.layout) {
        PlanLayout l = {1, 1, 1, 1, 0, 0, 1, 0, PP_1F1B, 1, RECOMPUTE_NONE, 1};
        if (a.config) {  // keys --layout leaves out keep the run config's values
            const ParallelConfig *pc = &base.parallel;
            l = (PlanLayout){pc->dp, pc->tp, pc->pp, pc->cp, pc->zero, pc->sequence_parallel,
                             base.training.micro_batch_size, 0, pc->pp_schedule, pc->pp_virtual,
                             base.training.recompute, pc->ep};
            l.dp = l.tp = l.pp = l.cp = l.ep = 1;  // the grid comes from --layout (and --gpus)
        }
        plan_parse_layout(&l, a.layout);
        if ((long long)l.dp * l.tp * l.pp * l.cp != p.world)
            die("plan: --layout %s: dp*tp*pp*cp = %d, but --gpus is %d", a.layout, l.dp * l.tp * l.pp * l.cp, p.world);
        if (p.global_seqs % ((long long)l.dp * l.mbs))
            die("plan: --layout %s: %lld sequences per step do not split into dp=%d x mbs=%d", a.layout,
                p.global_seqs, l.dp, l.mbs);
        l.micro = (int)(p.global_seqs / ((long long)l.dp * l.mbs));
        if (l.pp == 1) l.sched = PP_1F1B;
        if (l.sched == PP_ZB_V) l.v = 2;
        else if (l.sched != PP_INTERLEAVED) l.v = 1;
        char why[512];
        if (!plan_layout_check(&p, &l, why, sizeof why))
            die("plan: --layout %s cannot run: %s", a.layout, why);
        PlanResult r = plan_evaluate(&p, &l);
        print_header(a.tsv, moe);
        print_row(1, &r, a.tsv, moe);
        if (!a.tsv) {
            plan_print_legend(moe);
            if (a.links) plan_place_print(&p, &r.layout, a.links, a.placement);
            plan_print_train_command(&p, &r.layout, a.config, a.links ? a.placement : NULL);
        }
        if (a.links) links_free(&links), plan_place_forget();
        return 0;
    }
    PlanResult *res;
    int n = plan_search(&p, &res);
    if (n == 0) die("plan: no layout of %d ranks divides this model and batch", p.world);
    print_header(a.tsv, moe);
    for (int i = 0; i < n && i < a.top; i++) print_row(i + 1, &res[i], a.tsv, moe);
    if (!a.tsv) {
        char why[1024];
        plan_print_legend(moe);
        plan_explain(&p, res, n, why, sizeof why);
        printf("\n%s\n", why);
        if (res[0].fits && a.links) plan_place_print(&p, &res[0].layout, a.links, a.placement);
        if (res[0].fits) plan_print_train_command(&p, &res[0].layout, a.config, a.links ? a.placement : NULL);
    }
    free(res);
    if (a.links) links_free(&links), plan_place_forget();
    return 0;
}

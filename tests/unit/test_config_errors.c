// tests/unit/test_config_errors.c — what the run configuration refuses: training.device,
// precision, comm and attention checked against the binary (config_check_backend),
// then one check per fatal error in loading, overrides, model.from and validation,
// each run in a forked child (die() exits 1 when MPI is not running): the process
// fails and its stderr names the key and the offending value. Shared helpers in
// config_fixture.h.
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "config_fixture.h"

// training.device and training.precision: auto resolves per device, and each binary
// accepts only its own device (and bf16 only with bf16 kernels), naming the other.
static void test_device(void) {
    Config c;
    config_defaults(&c);
    CHECK(c.training.device == DEVICE_CPU && c.training.precision == PRECISION_AUTO,
          "defaults: training.device cpu, training.precision auto");
    config_set(&c, "data.train", "train.bin");
    config_validate(&c, 1);
    CHECK(c.training.precision == PRECISION_FP32, "precision auto on cpu resolves to fp32");
    config_defaults(&c);
    config_set(&c, "data.train", "train.bin");
    config_set(&c, "training.device", "cuda");
    config_validate(&c, 1);
    CHECK(c.training.precision == PRECISION_BF16, "precision auto on cuda resolves to bf16");
    char err[4096];
    Case ok_cpu = {.args = "--training.precision fp32", .world = 1, .backend = 1};
    Case ok_cuda = {.args = "--training.device cuda --training.precision fp32", .world = 1, .backend = 2};
    Case ok_bf16 = {.args = "--training.device cuda", .world = 1, .backend = 2, .bf16_ready = 1};
    Case ok_cpu_bf16 = {.args = "--training.precision bf16", .world = 1, .backend = 1, .bf16_ready = 1};
    CHECK(run_case_captured(&ok_cpu, err, sizeof err) == 0 &&
              run_case_captured(&ok_cuda, err, sizeof err) == 0 &&
              run_case_captured(&ok_bf16, err, sizeof err) == 0 &&
              run_case_captured(&ok_cpu_bf16, err, sizeof err) == 0,
          "cpu/fp32 on the CPU build, cuda/fp32 on the CUDA build, cuda/bf16 with bf16 kernels, cpu/bf16 on a "
          "CPU build with bf16 products (oneMKL's) pass");
    {
        Config cpu;
        config_defaults(&cpu);
        config_set(&cpu, "data.train", "train.bin");
        config_validate(&cpu, 1);
        CHECK(cpu.training.precision == PRECISION_FP32, "precision auto on cpu resolves to fp32 (bf16 by name only)");
    }
    expect_fail("bf16 on a CPU build without bf16 products",
                (Case){.args = "--training.precision bf16", .world = 1, .backend = 1},
                "training.precision = bf16 on the CPU needs the oneMKL build|make BLAS=mkl|training.precision = fp32|"
                "./femtotron-cuda");
    expect_fail("cuda on the CPU build", (Case){.args = "--training.device cuda --training.precision fp32", .world = 1, .backend = 1},
                "training.device = cuda|CPU build|make cuda|./femtotron-cuda|training.device = cpu");
    expect_fail("cpu on the CUDA build", (Case){.world = 1, .backend = 2},
                "training.device = cpu|CUDA build|./femtotron|training.device = cuda");
    expect_fail("bf16 without bf16 kernels", (Case){.args = "--training.device cuda", .world = 1, .backend = 2},
                "training.precision = bf16|no bf16 kernels|training.precision = fp32");
    expect_fail("device gpu", (Case){.args = "--training.device gpu"}, "training.device|\"cpu\" or \"cuda\"");
    // parallel.comm: NCCL exists in the CUDA build only; mpi and auto run anywhere.
    CHECK(c.parallel.comm == COMM_AUTO, "parallel.comm defaults to auto");
    Case ok_mpi = {.args = "--parallel.comm mpi --training.precision fp32", .world = 1, .backend = 1};
    Case ok_nccl = {.args = "--parallel.comm nccl --training.device cuda", .world = 1, .backend = 2, .bf16_ready = 1};
    CHECK(run_case_captured(&ok_mpi, err, sizeof err) == 0 &&
              run_case_captured(&ok_nccl, err, sizeof err) == 0,
          "parallel.comm mpi on the CPU build and nccl on the CUDA build pass");
    expect_fail("nccl on the CPU build", (Case){.args = "--parallel.comm nccl", .world = 1, .backend = 1},
                "parallel.comm = nccl|CPU build|make cuda|parallel.comm = mpi");
    expect_fail("comm gloo", (Case){.args = "--parallel.comm gloo"}, "parallel.comm|\"nccl\"");
    expect_fail("precision fp16", (Case){.args = "--training.precision fp16"}, "training.precision|\"bf16\"");
    // training.attention = cudnn: cuda, bf16 and one context-parallel rank only.
    CHECK(c.training.attention == ATTENTION_FEMTOTRON, "training.attention defaults to femtotron");
    Case ok_cudnn = {.args = "--training.device cuda --training.attention cudnn --parallel.dp 2", .world = 2,
                     .backend = 2, .bf16_ready = 1};
    CHECK(run_case_captured(&ok_cudnn, err, sizeof err) == 0,
          "training.attention cudnn with cuda, bf16 and dp 2 passes");
    expect_fail("cudnn on cpu", (Case){.args = "--training.attention cudnn", .world = 1},
                "training.attention = cudnn needs training.device = cuda|training.attention = femtotron");
    expect_fail("cudnn in fp32",
                (Case){.args = "--training.device cuda --training.precision fp32 --training.attention cudnn",
                       .world = 1, .backend = 2},
                "training.attention = cudnn needs training.precision = bf16|training.attention = femtotron");
    expect_fail("cudnn with cp 2",
                (Case){.args = "--training.device cuda --training.attention cudnn --parallel.cp 2", .world = 2,
                       .backend = 2, .bf16_ready = 1},
                "training.attention = cudnn with parallel.cp = 2|ring|training.attention = femtotron");
    expect_fail("attention flash", (Case){.args = "--training.attention flash"}, "training.attention|\"cudnn\"");
    // training.keep_bf16_inputs: bf16, a dense model, not under full recomputation.
    CHECK(!c.training.keep_bf16_inputs, "training.keep_bf16_inputs defaults to false");
    Case ok_keep = {.args = "--training.device cuda --training.keep_bf16_inputs true --training.recompute selective",
                    .world = 1, .backend = 2, .bf16_ready = 1};
    CHECK(run_case_captured(&ok_keep, err, sizeof err) == 0,
          "training.keep_bf16_inputs with bf16 and recompute selective passes");
    expect_fail("keep in fp32", (Case){.args = "--training.keep_bf16_inputs true", .world = 1},
                "training.keep_bf16_inputs = true needs training.precision = bf16");
    expect_fail("keep under full",
                (Case){.args = "--training.device cuda --training.keep_bf16_inputs true --training.recompute full",
                       .world = 1, .backend = 2, .bf16_ready = 1},
                "training.keep_bf16_inputs = true with training.recompute = full|recompute none or selective");
    expect_fail("keep with experts",
                (Case){.args = "--training.device cuda --training.keep_bf16_inputs true --model.num_local_experts 4 "
                               "--model.num_experts_per_tok 2",
                       .world = 1, .backend = 2, .bf16_ready = 1},
                "training.keep_bf16_inputs = true with a mixture-of-experts model|fp32");
}

static void test_errors(void) {
    char path[128], json[512];
    // Loading.
    expect_fail("unknown key", (Case){.json = "{\"training\": {\"stpes\": 3}}"},
                "config case.json|unknown key \"training.stpes\"|training.steps");
    expect_fail("unknown section", (Case){.json = "{\"trainig\": {}}"}, "unknown section \"trainig\"");
    expect_fail("section not an object", (Case){.json = "{\"model\": 3}"}, "section \"model\"");
    expect_fail("int given a fraction", (Case){.json = "{\"training\": {\"steps\": 1.5}}"},
                "\"training.steps\" must be an integer|1.5");
    expect_fail("int given a string", (Case){.json = "{\"model\": {\"hidden_size\": \"64\"}}"},
                "\"model.hidden_size\" must be an integer");
    expect_fail("bool given a number", (Case){.json = "{\"data\": {\"shuffle\": 1}}"},
                "\"data.shuffle\" must be true or false");
    expect_fail("string given a number", (Case){.json = "{\"checkpoint\": {\"dir\": 5}}"},
                "\"checkpoint.dir\" must be a string");
    expect_fail("sources given a number", (Case){.json = "{\"data\": {\"train\": 5}}"},
                "\"data.train\" must be a path, a glob or a list of sources|got 5");
    expect_fail("seed negative", (Case){.json = "{\"training\": {\"seed\": -1}}"}, "\"training.seed\"|-1");
    expect_fail("duplicate key", (Case){.json = "{\"training\": {\"steps\": 1, \"steps\": 2}}"},
                "\"steps\" is given twice");
    expect_fail("invalid JSON", (Case){.json = "{\"training\": {\n  \"steps\": 3,,\n}}"},
                "config case.json|invalid JSON at line 2");
    snprintf(path, sizeof path, "%s/no_such.json", hf_dir);
    expect_fail("missing config file", (Case){.file = path}, "no_such.json|No such file");
    // Overrides.
    expect_fail("override unknown key", (Case){.args = "--training.stpes 3"}, "unknown key \"training.stpes\"");
    expect_fail("override bad int", (Case){.args = "--training.steps 3x"}, "\"training.steps\"|\"3x\"");
    expect_fail("override bad bool", (Case){.args = "--data.shuffle yes"}, "\"data.shuffle\"|\"yes\"");
    expect_fail("override bad float", (Case){.args = "--training.lr nan"}, "\"training.lr\"|\"nan\"");
    expect_fail("override negative seed", (Case){.args = "--training.seed -5"}, "\"training.seed\"|\"-5\"");
    expect_fail("stray argument", (Case){.args = "--training.steps 3 extra"}, "unexpected argument \"extra\"");
    expect_fail("override without value", (Case){.args = "--training.steps"}, "\"--training.steps\" needs a value");
    // model.from: features we cannot honour.
    snprintf(json, sizeof json, "{\"model\": {\"from\": \"%s\"}}", hf_dir);
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}");
    expect_fail("HF hidden_act gelu", (Case){.json = json}, "hidden_act = \"gelu\"|config.json");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"attention_bias\": true}");
    expect_fail("HF attention_bias", (Case){.json = json}, "attention_bias = true");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"mlp_bias\": true}");
    expect_fail("HF mlp_bias", (Case){.json = json}, "mlp_bias = true");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}");
    expect_fail("HF rope_scaling yarn", (Case){.json = json}, "rope_scaling of type \"yarn\" is not supported|llama3");
    write_hf("{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}");
    expect_fail("HF rope_scaling dynamic (old spelling)", (Case){.json = json}, "type \"dynamic\" is not supported");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}");
    expect_fail("HF rope_scaling llama3 incomplete", (Case){.json = json}, "\"llama3\" needs a number \"low_freq_factor\"");
    write_hf("{\"rope_scaling\": {\"factor\": 8.0}}");
    expect_fail("HF rope_scaling default with a factor", (Case){.json = json}, "\"default\" with a factor");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
             "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}}");
    expect_fail("HF rope_scaling llama3 high <= low", (Case){.json = json, .world = 1}, "rope_high_freq_factor = 1|rope_low_freq_factor = 4");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 33}");
    expect_fail("HF head_dim odd", (Case){.json = json, .world = 1}, "head dim = 33|model.head_dim|odd");
    expect_fail("linear RoPE factor < 1", (Case){.args = "--model.rope_type linear --model.rope_factor 0.5", .world = 1},
                "model.rope_factor = 0.5|at least 1");
    expect_fail("unknown RoPE type", (Case){.args = "--model.rope_type ntk"}, "model.rope_type|ntk");
    write_hf("{\"model_type\": \"mixtral\", \"sliding_window\": 4096}");
    expect_fail("HF Mixtral sliding_window", (Case){.json = json}, "sliding_window = 4096|sliding-window attention");
    write_hf("{\"model_type\": \"mixtral\", \"router_jitter_noise\": 0.1}");
    expect_fail("HF Mixtral router noise", (Case){.json = json}, "router_jitter_noise must be 0");
    write_hf("{\"model_type\": \"mistral\"}");
    expect_fail("HF model_type", (Case){.json = json}, "model_type = \"mistral\"");
    write_hf("{\"hidden_size\": 64.5}");
    expect_fail("HF wrong type", (Case){.json = json}, "\"hidden_size\" must be an integer|64.5");
    write_hf("{\"hidden_size\": 64,");
    expect_fail("HF invalid JSON", (Case){.json = json}, "model.from|config.json|invalid JSON");
    expect_fail("HF missing dir", (Case){.args = "--model.from /nonexistent/femtotron_model"},
                "model.from|/nonexistent/femtotron_model/config.json");
    // Validation: one key each.
    struct {
        const char *name, *args, *needles;
        int world;
    } v[] = {
        {"hidden_size 0", "--model.hidden_size 0", "model.hidden_size = 0", 1},
        {"heads do not divide hidden", "--model.hidden_size 250", "model.hidden_size = 250|num_attention_heads = 4", 1},
        {"odd head dim", "--model.hidden_size 20", "head dim|= 5|even", 1},
        {"kv heads do not divide heads", "--model.num_key_value_heads 3", "num_attention_heads = 4|num_key_value_heads = 3", 1},
        {"vocab_size 1", "--model.vocab_size 1", "model.vocab_size = 1", 1},
        {"rms_norm_eps 0", "--model.rms_norm_eps 0", "model.rms_norm_eps = 0", 1},
        {"seq_length > max pos", "--training.seq_length 2048", "training.seq_length = 2048|max_position_embeddings = 1024", 1},
        {"seq_length 0", "--training.seq_length 0", "training.seq_length = 0", 1},
        {"steps 0", "--training.steps 0", "training.steps = 0", 1},
        {"micro_batch_size 0", "--training.micro_batch_size 0", "training.micro_batch_size = 0", 1},
        {"lr 0", "--training.lr 0", "training.lr = 0", 1},
        {"min_lr > lr", "--training.min_lr 0.01", "training.min_lr = 0.01|training.lr = 0.0003", 1},
        {"min_lr < 0", "--training.min_lr -1", "training.min_lr = -1", 1},
        {"warmup < 0", "--training.warmup_steps -2", "training.warmup_steps = -2", 1},
        {"weight_decay < 0", "--training.weight_decay -0.1", "training.weight_decay = -0.1", 1},
        {"beta1 = 1", "--training.beta1 1", "training.beta1 = 1", 1},
        {"beta2 < 0", "--training.beta2 -0.5", "training.beta2 = -0.5", 1},
        {"eps 0", "--training.eps 0", "training.eps = 0", 1},
        {"grad_clip < 0", "--training.grad_clip -1", "training.grad_clip = -1", 1},
        {"data.train unset", "--data.train=", "data.train is not set|femtotron prepare", 1},
        {"grid != world", "--parallel.dp 2", "= 2, but the job has 4 ranks", 4},
        {"tp heads", "--parallel.tp 3", "num_attention_heads = 4 is not divisible by parallel.tp = 3", 3},
        {"tp kv heads", "--parallel.tp 4", "num_key_value_heads = 2 is not divisible by parallel.tp = 4", 4},
        {"tp ffn", "--parallel.tp 2 --model.intermediate_size 769", "intermediate_size = 769|parallel.tp = 2", 2},
        {"sp tokens", "--parallel.tp 2 --parallel.sequence_parallel true --training.micro_batch_size 1 --training.seq_length 7",
         "sequence_parallel|7 tokens|parallel.tp = 2", 2},
        {"pp > layers", "--parallel.pp 8", "parallel.pp * parallel.pp_virtual|a stage would be empty", 8},
        {"pp schedule", "--parallel.pp 2 --parallel.pp_schedule gpipe", "parallel.pp_schedule|gpipe", 2},
        {"pp virtual", "--parallel.pp 2 --parallel.pp_virtual 2", "pp_virtual = 2|interleaved", 2},
        {"zb-h1 with experts", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --model.num_local_experts 4 --model.num_experts_per_tok 2",
         "zb-h1|mixture-of-experts|num_local_experts = 4|not supported", 2},
        {"zb-v without its V", "--parallel.pp 2 --parallel.pp_schedule zb-v", "zb-v|parallel.pp_virtual = 2|it is 1", 2},
        {"zb-v, 3 chunks", "--parallel.pp 2 --parallel.pp_schedule zb-v --parallel.pp_virtual 3 --model.num_hidden_layers 6",
         "zb-v|parallel.pp_virtual = 2|it is 3", 2},
        {"interleaved M", "--parallel.pp 2 --parallel.pp_schedule interleaved --parallel.pp_virtual 2 --training.grad_acc_steps 3",
         "interleaved|grad_acc_steps = 3|multiple of parallel.pp = 2", 2},
        {"pp_layers sum", "--parallel.pp 2 --parallel.pp_layers 1,2", "parallel.pp_layers|2 stages with 3 layers", 2},
        {"pp_layers empty", "--parallel.pp 2 --parallel.pp_layers 4,0", "parallel.pp_layers|empty stage", 2},
        {"pp_costs count", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:1:1",
         "parallel.pp_costs = \"1:1:1\"|costs of 1 stages; expected 2", 2},
        {"pp_costs zero", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:0:1,1:1:1",
         "parallel.pp_costs|stage 0|three positive numbers F:I:W", 2},
        {"pp_costs pairs", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:1,1:1",
         "parallel.pp_costs|stage 0|separated by ':'", 2},
        {"pp_costs word", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs fast",
         "parallel.pp_costs = \"fast\"|\"flops\", \"unit\" or \"measure\"", 2},
        {"pp_costs measure 1f1b", "--parallel.pp 2 --parallel.pp_costs measure",
         "parallel.pp_costs = \"measure\"|zero-bubble|not parallel.pp_schedule \"1f1b\"", 2},
        {"pp_costs 1f1b", "--parallel.pp 2 --parallel.pp_costs 1:1:1,1:1:1",
         "parallel.pp_costs|zero-bubble schedules|not parallel.pp_schedule \"1f1b\"", 2},
        {"cp seq", "--parallel.cp 2 --training.seq_length 250", "parallel.cp = 2|seq_length = 250|2 * cp = 4", 2},
        {"zero 4", "--parallel.zero 4", "parallel.zero = 4|0, 1, 2 or 3", 1},
        {"order", "--parallel.order tp-dp", "parallel.order|dp-pp-cp-tp", 1},
        {"recompute", "--training.recompute some", "training.recompute = \"some\"|\"none\", \"selective\" or \"full\"", 1},
        {"bucket 0", "--parallel.bucket_mb 0", "parallel.bucket_mb", 1},
        {"timeout 0", "--parallel.timeout_s 0", "parallel.timeout_s", 1},
        {"max_bad_steps 0", "--training.max_bad_steps 0", "training.max_bad_steps", 1},
        {"G not divisible", "--training.global_batch_size 20 --training.micro_batch_size 4 --parallel.dp 2",
         "global_batch_size = 20|= 4 * 2 = 8", 2},
        {"G != A*B*dp", "--training.global_batch_size 20 --training.grad_acc_steps 2 --training.micro_batch_size 4",
         "global_batch_size = 20|= 2 * 4 * 1 = 8", 1},
        {"checkpoint.every < 0", "--checkpoint.every -1", "checkpoint.every = -1", 1},
        {"resume without dir", "--checkpoint.resume true", "checkpoint.resume|checkpoint.dir", 1},
        {"logging.every 0", "--logging.every 0", "logging.every = 0", 1},
        {"val_every < 0", "--logging.val_every -3", "logging.val_every = -3", 1},
        {"val_batches 0", "--logging.val_batches 0", "logging.val_batches = 0", 1},
        {"experts < 0", "--model.num_local_experts -1", "model.num_local_experts = -1", 1},
        {"top-k > experts", "--model.num_local_experts 4 --model.num_experts_per_tok 5",
         "model.num_experts_per_tok = 5|between 1 and model.num_local_experts = 4", 1},
        {"top-k 0", "--model.num_local_experts 4 --model.num_experts_per_tok 0", "model.num_experts_per_tok = 0", 1},
        {"aux coef < 0", "--model.num_local_experts 4 --model.router_aux_loss_coef -0.1",
         "model.router_aux_loss_coef = -0.1", 1},
        {"ep without experts", "--parallel.dp 2 --parallel.ep 2", "parallel.ep = 2 needs a mixture-of-experts model", 2},
        {"ep outside dp x cp", "--model.num_local_experts 4 --parallel.tp 2 --parallel.ep 2",
         "parallel.ep = 2 does not divide parallel.dp * parallel.cp = 1 * 1 = 1", 2},
        {"ep experts", "--model.num_local_experts 6 --parallel.dp 4 --parallel.ep 4",
         "parallel.ep = 4 does not divide model.num_local_experts = 6", 4},
        {"ep 0", "--parallel.ep 0", "parallel.ep = 0", 1},
        {"shared experts without experts", "--model.n_shared_experts 1",
         "model.n_shared_experts = 1 needs a mixture-of-experts model", 1},
        {"val_every without data.val", "--logging.val_every 10", "logging.val_every = 10|data.val is not set", 1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        expect_fail(v[i].name, (Case){.args = v[i].args, .world = v[i].world}, v[i].needles);
}

int main(void) {
    hf_dir_create();
    test_device();
    test_errors();
    hf_dir_remove();
    return check_summary();
}

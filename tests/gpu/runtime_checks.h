// tests/gpu/runtime_checks.h — gpu_ops.c's checks of the backend's runtime around
// the ops: queued uploads, token ids checked on the device, the planned workspace
// and what it refuses, and the attention kernel knob refused where it cannot
// apply (the fatal cases in child processes of gpu_ops itself). Included once, by
// gpu_ops.c (one translation unit: one PASS/FAIL count).
#ifndef FEMTOTRON_GPU_RUNTIME_CHECKS_H
#define FEMTOTRON_GPU_RUNTIME_CHECKS_H

// ---- queued uploads and id checks (a training step's token ids, ops.h) ----

// A queued upload runs after the ops issued before it (which still read the old
// contents) and from the staging's contents as they are then.
static void test_queued_upload(void) {
    const size_t n = 4096;
    Pair dst = pair_fill(n, 1.0f), out = pair_fill(n, 1.0f);
    float *stage = ops_host_alloc(n * sizeof(float), "test staging");  // (n)
    for (size_t i = 0; i < n; i++) stage[i] = (float)i;
    copy_f32(out.d, dst.d, n);                      // reads the old contents
    ops_upload_queued(dst.d, stage, n * sizeof(float));  // then they are replaced
    cpu_copy_f32(out.h, dst.h, n);
    memcpy(dst.h, stage, n * sizeof(float));
    expect_close("an op issued before a queued upload reads the old contents", out);
    expect_close("the queued upload lands", dst);
    ops_sync();
    stage[7] = -1.0f;  // after the wait the staging is the host's again
    expect_close("rewriting the staging after a wait changes nothing", dst);
    ops_host_free(stage);
    pair_free(dst), pair_free(out);
}

// argv[0] --bad-id K: queue op K on ids in a planned buffer holding id 300 at
// position 2 (vocabulary 257), print a line, then wait: the CUDA build refuses the
// id at the wait (the CPU build at once, before the line).
static int bad_id_child(int which) {
    ops_init(0);
    enum { N = 4, D = 4, V = 257 };
    const int32_t ids[N] = {5, 9, 300, 0};
    int32_t *d = buf_alloc(MEM_ACTIVATIONS, sizeof ids, "ids");  // (N)
    float *table = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * V * D, "table");   // (V, D)
    float *out = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * N * V, "out");       // (N, V)
    double *acc = buf_alloc(MEM_ACTIVATIONS, sizeof(double), "loss");            // (1)
    ops_upload(d, ids, sizeof ids);
    if (which == 0) embedding_forward(out, d, table, N, D, V);
    if (which == 1) embedding_backward(table, out, d, N, D, V);
    if (which == 2) cross_entropy_forward_backward(out, d, N, V, 1.0f, acc);
    if (which == 3) cross_entropy_forward(out, d, N, V, acc);
    printf("queued\n");
    fflush(stdout);
    ops_sync();
    printf("not refused\n");
    return 0;
}

// Run this driver again as `self FLAG k` and capture its output (out, size bytes)
// and exit status: the checks that end a process.
static int run_self(const char *self, const char *flag, int k, char *out, size_t size) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s %d 2>&1", self, flag, k);
    FILE *p = popen(cmd, "r");
    size_t got = p ? fread(out, 1, size - 1, p) : 0;
    out[got] = '\0';
    return p ? pclose(p) : -1;
}

static void test_bad_ids(const char *self) {
    const char *names[] = {"embedding_forward", "embedding_backward", "cross_entropy_forward_backward",
                           "cross_entropy_forward"};
    const int deferred = strcmp(ops_backend_name(), "cuda") == 0;
    for (int k = 0; k < 4; k++) {
        char out[4096];
        const int rc = run_self(self, "--bad-id", k, out, sizeof out);
        const char *q = strstr(out, "queued"), *e = strstr(out, "id 300 at position 2");
        CHECK(rc != 0 && e && strstr(out, "[0, 257)") && !strstr(out, "not refused") &&
                  (deferred ? q && q < e : !q),
              "%s on id 300 (vocabulary 257) in a planned buffer: refused naming it and its position, %s "
              "(status %d: %.200s)", names[k], deferred ? "at the next wait" : "at once", rc, out);
    }
}

// The CUDA backend's planned work buffers (ops.h: ops_set_workspace). Installed,
// sized for exactly the operands of one bf16 product check, they carry that check
// (the backend's own buffers are freed at the install and none may grow while it
// is in: a copy outside the parts would be fatal), and an op beyond them ends the
// process naming the part (a child: argv[0] --beyond-workspace K).
static const OpsBounds WS_BOUNDS = {.rows = 29, .in_cols = 64, .out_cols = 257, .weight = 257 * 64, .bf16 = 1};

static int beyond_workspace_child(int which) {
    ops_init(0);
    void *ws = buf_alloc(MEM_ACTIVATIONS, ops_cuda_workspace(&WS_BOUNDS).total, "workspace");
    ops_set_workspace(ws, &WS_BOUNDS);
    ops_set_matmul_bf16(1);
    // 17000 rows: more than the bounds' 29, and row losses (136000 bytes) beyond the scratch part (the
    // larger of 256 partial sums and RMSNorm's 512 x 64 column partials: 131072 bytes)
    enum { N = 17000, D = 64, V = 257 };
    float *x = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * N * V, "x");        // (N, V)
    float *w = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * V * D, "w");        // (V, D)
    int32_t *t = buf_alloc(MEM_ACTIVATIONS, sizeof(int32_t) * N, "targets");  // (N)
    double *acc = buf_alloc(MEM_ACTIVATIONS, sizeof(double), "loss");         // (1)
    if (which == 0) matmul_forward(x, x, w, 29, D, V);  // within the bounds
    if (which == 1) matmul_forward(x, x, w, N, D, V);   // an input copy of 17000 rows
    if (which == 2) cross_entropy_forward(x, t, N, V, acc);  // 17000 row losses
    ops_sync();
    printf("not refused\n");
    return 0;
}

static void test_workspace(const char *self) {
    void *ws = buf_alloc(MEM_ACTIVATIONS, ops_cuda_workspace(&WS_BOUNDS).total, "workspace");
    ops_set_workspace(ws, &WS_BOUNDS);
    test_matmul_bf16(29, 64, 257, 301);  // the checks of the same shape, now inside the planned parts
    ops_set_workspace(NULL, NULL);
    buf_free(ws);
    const char *names[] = {"a bf16 product within the bounds", "a bf16 product of 17000 rows (bounds: 29)",
                           "a cross-entropy of 17000 rows (131072 bytes of scratch planned)"};
    const char *parts[] = {NULL, "a bf16 operand copy", "the row losses or partial sums"};
    for (int k = 0; k < 3; k++) {
        char out[4096];
        const int rc = run_self(self, "--beyond-workspace", k, out, sizeof out);
        if (!parts[k])
            CHECK(rc == 0 && strstr(out, "not refused"), "%s runs in the installed workspace (status %d: %.200s)",
                  names[k], rc, out);
        else
            CHECK(rc != 0 && strstr(out, parts[k]) && strstr(out, "planned workspace holds") &&
                      !strstr(out, "not refused"),
                  "%s: fatal, naming the part, nothing allocated (status %d: %.300s)", names[k], rc, out);
    }
}

// FEMTOTRON_ATTENTION naming no kernel family: a bf16 attention ends the process
// naming the value and the choices (a child: argv[0] --attention-kernel 0); naming
// femtotron's mma kernels to the bf16 ops, which only cuDNN serves (a cudnn run's,
// LlamaModel.att_bf16), ends it too, naming the fix (--attention-kernel 1).
static int attention_kernel_child(int kept) {
    ops_init(0);
    ops_set_matmul_bf16(1);
    enum { B = 1, S = 16, H = 2, KV = 1, HD = 64, LD = (H + 2 * KV) * HD };
    float *qkv = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * S * LD, "qkv");     // (S, LD)
    float *out = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * S * H * HD, "out"); // (S, H*HD)
    float *st = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * 3 * H * S, "stats"); // lse, m, l: (H*S) each
    int *pos = buf_alloc(MEM_ACTIVATIONS, sizeof(int) * S, "pos");              // (S)
    int pos_h[S];
    for (int i = 0; i < S; i++) pos_h[i] = i;
    ops_upload(pos, pos_h, sizeof pos_h);
    zero_f32(qkv, (size_t)S * LD);
    setenv("FEMTOTRON_ATTENTION", kept ? "mma" : "flash3", 1);
    if (kept) attention_forward_bf16((uint16_t *)out, st, (const uint16_t *)qkv, pos, B, S, H, KV, HD);
    else attention_forward(out, st, st + H * S, st + 2 * H * S, qkv, pos, B, S, H, KV, HD, NULL);
    ops_sync();
    printf("not refused\n");
    return 0;
}

static void test_attention_kernel_refused(const char *self) {
    char out[4096];
    const int rc = run_self(self, "--attention-kernel", 0, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "FEMTOTRON_ATTENTION=flash3") && strstr(out, "mma") && strstr(out, "wmma") &&
              strstr(out, "cudnn") && !strstr(out, "not refused"),
          "FEMTOTRON_ATTENTION=flash3: refused, naming the kernels there are (status %d: %.200s)", rc, out);
    const int rk = run_self(self, "--attention-kernel", 1, out, sizeof out);
    CHECK(rk != 0 && strstr(out, "FEMTOTRON_ATTENTION=mma") && strstr(out, "training.attention = femtotron") &&
              !strstr(out, "not refused"),
          "FEMTOTRON_ATTENTION=mma to the bf16 ops (a cudnn run's): refused rather than ignored, naming the fix "
          "(status %d: %.200s)", rk, out);
}

#endif

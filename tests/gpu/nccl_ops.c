// tests/gpu/nccl_ops.c — dist/device_comm.h's NCCL path on a machine with one GPU
// (tests/gpu/nccl.sh runs it; make cuda builds it). One GPU allows a one-rank
// communicator only (NCCL refuses two ranks on one GPU), so the sums themselves
// are not exercised here (a one-rank sum is the identity; the CPU-equal sums of
// several ranks need one GPU each); what is: creating a communicator from a
// unique id, every collective enqueued on its stream and finished through its
// event, the in-place and uneven variants leaving the data as a one-rank
// collective must, several collectives in flight at once, the ordering by events
// with the ops' stream (no host wait between the op that writes a collective's
// input, the collective and the op that reads its output), which memory the
// library takes, and the watchdog: a two-rank communicator whose second rank
// never comes ends the process after parallel.timeout_s with a message naming
// the group. Ends on "N passed, N failed".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "dist/device_comm.h"
#include "ops/ops.h"
#include "util.h"

#define N 1000

// Poll an event to completion (the collectives are local: 60 s means a hang).
static void finish(int ev) {
    const double deadline = now_seconds() + 60.0;
    while (!devcomm_event_test(ev, "a test collective"))
        if (now_seconds() > deadline) die("nccl_ops: a one-rank collective has not finished after 60 s");
}

// x (n) on the device equals want (n) on the host, bit for bit.
static int equals(const float *x, const float *want, size_t n) {
    float *got = xmalloc(n * sizeof(float), "downloaded");
    ops_download(got, x, n * sizeof(float));
    int same = !memcmp(got, want, n * sizeof(float));
    free(got);
    return same;
}

int main(int argc, char **argv) {
    ops_init(0);  // dies, saying so, without a GPU
    if (argc == 3 && !strcmp(argv[1], "--stalled-peer")) {
        // A communicator of two ranks whose second never joins: must die after argv[2] s.
        unsigned char id[DEVCOMM_ID_BYTES];
        devcomm_unique_id(id);
        devcomm_group_init(1, "stalled pair", id, 0, 2, atof(argv[2]));
        printf("the communicator was created without its second rank\n");
        return 0;
    }
    CHECK(devcomm_available() && devcomm_gpu_count() >= 1, "NCCL is linked and sees %d GPU(s)", devcomm_gpu_count());
    char gpu[DEVCOMM_GPU_ID_BYTES];
    devcomm_gpu_id(gpu);
    CHECK(strlen(gpu) > 4 && strchr(gpu, ':'), "this process's GPU has a PCI bus id: %s", gpu);
    unsigned char id[DEVCOMM_ID_BYTES];
    devcomm_unique_id(id);
    devcomm_group_init(1, "one rank", id, 0, 1, 60.0);
    CHECK(devcomm_group_ready(1) && !devcomm_group_ready(2), "a one-rank communicator in slot 1, none in slot 2");

    float *host = xmalloc(N * sizeof(float), "host values");  // (N)
    for (int i = 0; i < N; i++) host[i] = 0.25f * (float)i - 7.0f;
    float *x = buf_alloc(MEM_ACTIVATIONS, N * sizeof(float), "x");  // (N)
    float *y = buf_alloc(MEM_ACTIVATIONS, N * sizeof(float), "y");  // (N)
    ops_upload(x, host, N * sizeof(float));
    CHECK(devcomm_usable(x) && !devcomm_usable(host), "planned buffers are usable by NCCL, plain host memory is not");

    finish(devcomm_allreduce_f32(1, x, N, 0));
    CHECK(equals(x, host, N), "all-reduce (sum) over one rank leaves the buffer as it was");
    finish(devcomm_allreduce_f32(1, x, N, 1));
    CHECK(equals(x, host, N), "all-reduce (max) over one rank leaves the buffer as it was");
    zero_f32(y, N);
    finish(devcomm_reduce_scatter_f32(1, x, y, N));
    CHECK(equals(y, host, N), "reduce-scatter over one rank copies its input");
    finish(devcomm_allgather_f32(1, x, N));
    CHECK(equals(x, host, N), "all-gather in place over one rank leaves the buffer as it was");
    zero_f32(y, N);
    finish(devcomm_reduce_scatter_split_f32(1, x, y, N));
    CHECK(equals(y, host, N), "uneven reduce-scatter over one rank copies its input");
    finish(devcomm_reduce_scatter_split_f32(1, NULL, x, N));
    CHECK(equals(x, host, N), "uneven reduce-scatter in place over one rank (its part reduced where it lies) leaves the buffer");
    finish(devcomm_allgather_split_f32(1, x, N));
    CHECK(equals(x, host, N), "uneven all-gather over one rank leaves the buffer as it was");

    // Ordered by events: the ops queued before the collective write its input, the
    // one queued after its follow reads its output, and the host waits only at the end.
    float *z = buf_alloc(MEM_ACTIVATIONS, N * sizeof(float), "z");  // (N)
    ops_upload(y, host, N * sizeof(float));
    zero_f32(x, N);
    copy_f32(x, y, N);  // x = host values, queued
    zero_f32(y, N);     // y = 0, queued: the collective's output, written by NCCL
    int e = devcomm_reduce_scatter_f32(1, x, y, N);
    int followed = devcomm_event_follow(e, "a test reduce-scatter");
    copy_f32(z, y, N);  // queued after the follow: NCCL's output
    ops_sync();
    devcomm_watch();    // finished: nothing to report
    CHECK(followed && equals(z, host, N),
          "a collective between queued ops, ordered by events both ways (no host wait until the end)");
    buf_free(z);

    int ev[40];  // many in flight, finished out of order
    for (int i = 0; i < 40; i++) ev[i] = devcomm_allreduce_f32(1, x, N, i & 1);
    for (int i = 39; i >= 0; i--) finish(ev[i]);
    CHECK(equals(x, host, N), "40 collectives in flight at once, finished in reverse order");

    // The watchdog: a child process waits for a peer that never comes.
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "timeout -k 5 60 %s --stalled-peer 3 2>&1", argv[0]);  // a hang fails, not blocks
    double t0 = now_seconds();
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];  // all of the child's output (NCCL may log before the message)
    size_t len = 0, got;
    while (p && len < sizeof out - 1 && (got = fread(out + len, 1, sizeof out - 1 - len, p)) > 0) len += got;
    out[len] = '\0';
    int status = p ? pclose(p) : -1;
    double took = now_seconds() - t0;
    CHECK(status != 0 && strstr(out, "stalled pair") && strstr(out, "parallel.timeout_s") && took < 60,
          "a communicator whose peer never joins ends the process after the timeout (3 s; took %.1f s), naming the "
          "group: %.200s", took, out);

    devcomm_finalize();
    CHECK(!devcomm_group_ready(1), "devcomm_finalize destroys the communicator");
    buf_free(x);
    buf_free(y);
    free(host);
    return check_summary();
}

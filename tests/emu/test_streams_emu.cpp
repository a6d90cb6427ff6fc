// tests/emu/test_streams_emu.cpp — the emulated streams (tests/emu/cuda_emu.h,
// CUDA_EMU_STREAMS) can show a missing event. Two streams: the main one (the
// process's first, as the ops' stream) and a side one (as an NCCL group's). A copy
// on the side stream of a buffer the main stream writes, and a copy on the main
// stream of what the side one wrote:
//   - without an event, `side-first` runs the side copy before the main write (it
//     copies the old contents) and `side-last` runs the main copy before the side
//     write: each mode shows one of the two missing events as wrong values;
//   - with the events (cudaEventRecord, cudaStreamWaitEvent) every mode gets the
//     new values;
//   - `order` runs everything in issue order (the default, as before);
//   - a side item that never finishes (NCCL_EMU_HANG_AT's stall) holds only what
//     waits for it: in `side-last` the main stream runs up to its wait, and a
//     query of the main stream then says "not ready";
//   - a message (asynchronous work on a stream with a queue of its own, as an
//     NCCL link's) in flight holds only its own stream: the main stream's work
//     runs past it, its stream's later work waits for it, a query leaves it in
//     flight (not stalled), and a host wait polls it until it finishes; it
//     starts before the main stream's work in `order` and `side-first`, after it
//     in `side-last`.
// The parent runs itself once per mode (the mode is read once per process).
#include "cuda_emu.h"
#include "../unit/check.h"

#include <string>

static float *dev(float v) {  // one float of device memory holding v
    float *p = nullptr;
    cudaMalloc((void **)&p, sizeof(float));
    cudaMemcpy(p, &v, sizeof v, cudaMemcpyHostToDevice);
    return p;
}
static float host(const float *p) {  // its value, after a host wait
    float v = 0;
    cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost);
    return v;
}

// x = 1 on main, then y = x on side; then z = w on main after w = 2 on side.
// Returns y and z as the host sees them after a wait.
static void run(cudaStream_t main_s, cudaStream_t side_s, bool events, float *y_out, float *z_out) {
    float *x = dev(0), *y = dev(0), *w = dev(0), *z = dev(0), *one = dev(1), *two = dev(2);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaMemcpyAsync(x, one, sizeof(float), cudaMemcpyDefault, main_s);  // the op writing a collective's input
    if (events) cudaEventRecord(e, main_s), cudaStreamWaitEvent(side_s, e, 0);
    cudaMemcpyAsync(y, x, sizeof(float), cudaMemcpyDefault, side_s);  // the collective reading it
    cudaMemcpyAsync(w, two, sizeof(float), cudaMemcpyDefault, side_s);  // the collective writing its result
    if (events) cudaEventRecord(e, side_s), cudaStreamWaitEvent(main_s, e, 0);
    cudaMemcpyAsync(z, w, sizeof(float), cudaMemcpyDefault, main_s);  // the op reading the result
    *y_out = host(y);
    *z_out = host(z);
    cudaEventDestroy(e);
}

static int child(const char *mode) {
    const std::string m = mode;
    cudaStream_t main_s, side_s;  // the process's first stream is the main one
    cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&side_s, cudaStreamNonBlocking);
    CHECK(!emu::is_side(main_s) && emu::is_side(side_s) && !emu::is_side(nullptr),
          "%s: the first stream and the default one are main, a later one is a side stream", mode);
    float y, z;
    run(main_s, side_s, false, &y, &z);
    if (m == "side-first")
        CHECK(y == 0 && z == 2, "side-first without events: the side copy ran before the main write (y %g) — "
              "a missing event before a collective shows", y);
    else if (m == "side-last")
        CHECK(y == 1 && z == 0, "side-last without events: the main copy ran before the side write (z %g) — "
              "a missing event after a collective shows", z);
    else
        CHECK(y == 1 && z == 2, "order without events: issue order, new values (y %g, z %g)", y, z);
    run(main_s, side_s, true, &y, &z);
    CHECK(y == 1 && z == 2, "%s with the events: every copy reads the new values (y %g, z %g)", mode, y, z);
    {  // a message in flight on a link's stream
        cudaStream_t link_s;
        cudaStreamCreateWithFlags(&link_s, cudaStreamNonBlocking);
        float *p = dev(0), *q = dev(0), *one = dev(1);
        int polls = 0;
        std::string order;  // 'm': the main stream's work ran, 's': the message started
        emu::enqueue_async([&]() {
            if (!polls) order += 's';
            return ++polls >= 50;  // finished at its 50th poll (a few happen per run of the queues)
        }, link_s);
        cudaMemcpyAsync(p, one, sizeof(float), cudaMemcpyDefault, link_s);  // behind the message
        emu::enqueue([&]() { order += 'm'; }, main_s);
        cudaMemcpyAsync(q, one, sizeof(float), cudaMemcpyDefault, main_s);
        const cudaError_t ql = cudaStreamQuery(link_s), qm = cudaStreamQuery(main_s);
        float pv = 0, qv = 0;
        memcpy(&pv, p, sizeof pv);  // managed memory: readable without a host wait
        memcpy(&qv, q, sizeof qv);
        CHECK(ql == cudaErrorNotReady && qm == cudaSuccess && qv == 1 && pv == 0 && emu::in_flight() && !emu::stalled,
              "%s: a message in flight holds its own stream only (main's copy %g, the copy behind it %g)", mode, qv, pv);
        CHECK(order == (m == "side-last" ? "ms" : "sm"), "%s: the message started %s the main stream's work (%s)",
              mode, m == "side-last" ? "after" : "before", order.c_str());
        const float after_wait = host(p);
        CHECK(after_wait == 1 && polls == 50 && !emu::in_flight(),
              "%s: a host wait polls the message until it finishes, then runs what waited for it (%d polls, %g)", mode,
              polls, after_wait);
    }
    if (m == "side-last") {  // a stall on the side stream holds only what waits for it
        float *a = dev(0), *b = dev(0), *one = dev(1);
        cudaEvent_t e;
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        emu::enqueue([]() {}, side_s, nullptr, true);  // never finishes
        cudaEventRecord(e, side_s);
        cudaMemcpyAsync(a, one, sizeof(float), cudaMemcpyDefault, main_s);
        cudaStreamWaitEvent(main_s, e, 0);
        cudaMemcpyAsync(b, one, sizeof(float), cudaMemcpyDefault, main_s);
        const cudaError_t q = cudaStreamQuery(main_s);
        float av = 0, bv = 0;
        memcpy(&av, a, sizeof av);  // managed memory: readable without a (failing) host wait
        memcpy(&bv, b, sizeof bv);
        CHECK(q == cudaErrorNotReady && av == 1 && bv == 0 && emu::stalled,
              "side-last with a side item that never finishes: the main stream ran up to its wait (a %g), not "
              "past it (b %g), and a query says not ready", av, bv);
    }
    return check_summary();
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--mode")) return child(argv[2]);
    int failed = 0;
    for (const char *mode : {"order", "side-first", "side-last"}) {
        const std::string cmd = std::string("CUDA_EMU_STREAMS=") + mode + " '" + argv[0] + "' --mode " + mode;
        fflush(stdout);
        failed |= system(cmd.c_str()) != 0;
    }
    return failed;
}

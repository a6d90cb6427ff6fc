// tests/emu/cuda_emu_streams.h — the emulation's device state (allocations, pinned memory, launch
// attributes) and its streams: work queued until the host waits (cuda_emu.h's head
// comment, "Streams").
// A part of tests/emu/cuda_emu.h, which includes its parts in order (each reads
// what the ones before it declare); include cuda_emu.h, not this.
#ifndef FEMTOTRON_CUDA_EMU_STREAMS_H
#define FEMTOTRON_CUDA_EMU_STREAMS_H

namespace emu {
inline cudaError_t sticky = cudaSuccess;  // the last launch's error (cudaGetLastError)
inline std::map<uintptr_t, size_t> allocations;  // cudaMalloc'd ranges: start -> bytes
inline std::map<uintptr_t, size_t> pinned;       // cudaMallocHost'd ranges: start -> bytes
inline std::map<const void *, int> smem_allowed;  // cudaFuncSetAttribute's dynamic shared memory
inline std::map<const void *, bool> barrier_free;  // kernels whose first block used no barrier

// ---- the streams: work queued until the host waits (see the top) ----
struct Work {
    std::function<void()> fn;
    long seq;                     // issue order
    std::shared_ptr<bool> after;  // cudaStreamWaitEvent: runs once this record has run (null: no wait)
    bool never;                   // a collective that never finishes (NCCL_EMU_HANG_AT)
    cudaStream_t stream;
    // Asynchronous work (a point-to-point message), instead of fn: the first call
    // starts it, and it has finished when a call returns true.
    std::function<bool()> step;
    bool started;
};
inline std::deque<Work> main_q, side_q;  // the main stream's work; every other stream's, in issue order
inline std::map<cudaStream_t, std::deque<Work>> own_q;  // the streams with a queue of their own (see the top)
inline EmuStream *first_stream;          // the first stream the process created: the main one
inline long issued;
inline bool running_queue;  // run_ready() is running queued work
inline bool sync_mode() {
    static const int on = getenv("CUDA_EMU_SYNC") && atoi(getenv("CUDA_EMU_SYNC")) != 0;
    return on;
}
enum StreamOrder { ORDER_ISSUE, ORDER_SIDE_FIRST, ORDER_SIDE_LAST };
inline StreamOrder stream_order() {
    static const StreamOrder o = [] {
        const char *v = getenv("CUDA_EMU_STREAMS");
        if (!v || !v[0] || !strcmp(v, "order")) return ORDER_ISSUE;
        if (!strcmp(v, "side-first")) return ORDER_SIDE_FIRST;
        if (!strcmp(v, "side-last")) return ORDER_SIDE_LAST;
        emu_fail("CUDA_EMU_STREAMS must be order, side-first or side-last");
    }();
    return o;
}
inline bool is_side(cudaStream_t s) { return s && s != first_stream; }
// A queued piece of work that never finishes (a collective whose peers never come,
// tests/emu/nccl_emu.h's NCCL_EMU_HANG_AT) stalls its stream: nothing after it
// there runs, nor what waits for it; queries say "not ready" for ever, and a host
// wait fails (on a GPU it would hang).
inline bool stalled;
inline std::deque<Work> &queue_of(cudaStream_t s) {
    auto own = own_q.find(s);
    return own != own_q.end() ? own->second : is_side(s) ? side_q : main_q;
}
inline void enqueue(std::function<void()> work, cudaStream_t stream, std::shared_ptr<bool> after = nullptr,
                    bool never = false) {
    if ((sync_mode() || running_queue) && !stalled && !never && !own_q.count(stream)) {
        work();
        return;
    }
    queue_of(stream).push_back(Work{std::move(work), issued++, std::move(after), never, stream, nullptr, false});
}
// Give stream s a queue of its own (a point-to-point link's), taking its work
// already queued with the other side streams'.
inline void own_queue(cudaStream_t s) {
    if (own_q.count(s)) return;
    std::deque<Work> mine, rest;
    for (Work &w : side_q) (w.stream == s ? mine : rest).push_back(std::move(w));
    side_q = std::move(rest);
    own_q[s] = std::move(mine);
}
// Queue asynchronous work (see Work) on stream s, which gets its own queue.
inline void enqueue_async(std::function<bool()> step, cudaStream_t s) {
    own_queue(s);
    own_q[s].push_back(Work{nullptr, issued++, nullptr, false, s, std::move(step), false});
}
inline bool runnable(const std::deque<Work> &q) {
    return !q.empty() && !q.front().never && (!q.front().after || *q.front().after);
}
// Messages started and not yet finished.
inline bool in_flight() {
    for (auto &kv : own_q)
        if (!kv.second.empty() && kv.second.front().started) return true;
    return false;
}
// Let the own queues act: each runs its runnable work and starts or polls the
// message at its head, as far as it can. Returns whether anything happened.
inline bool run_own_queues() {
    bool progress = false;
    for (auto &kv : own_q) {
        std::deque<Work> &q = kv.second;
        while (runnable(q)) {
            Work &w = q.front();
            if (w.step) {
                w.started = true;
                if (!w.step()) break;  // in flight
                q.pop_front();
            } else {
                std::function<void()> fn = std::move(w.fn);
                q.pop_front();
                fn();
            }
            progress = true;
        }
    }
    return progress;
}
// Run what the streams allow, in CUDA_EMU_STREAMS's order, up to what waits for a
// stall (what a query sees).
inline void run_ready() {
    if (running_queue) return;
    running_queue = true;
    for (;;) {
        // The own queues (messages) first, except in side-last while the main stream can run.
        const StreamOrder o = stream_order();
        bool progress = (o != ORDER_SIDE_LAST || !runnable(main_q)) && run_own_queues();
        // The preferred queue's next piece if it can run; else, outside issue order,
        // the other's (in issue order the older piece alone may run).
        const bool side_older = !side_q.empty() && (main_q.empty() || side_q.front().seq < main_q.front().seq);
        const bool prefer_side = o == ORDER_SIDE_FIRST || (o == ORDER_ISSUE && side_older);
        std::deque<Work> *first = prefer_side ? &side_q : &main_q, *second = prefer_side ? &main_q : &side_q;
        std::deque<Work> *q = runnable(*first) ? first : o != ORDER_ISSUE && runnable(*second) ? second : nullptr;
        if (q) {
            std::function<void()> fn = std::move(q->front().fn);
            q->pop_front();
            fn();
            progress = true;
        }
        if (!progress) break;
    }
    running_queue = false;
    // Work left that cannot run: behind (or waiting for) a collective that never
    // finishes, unless a message is still in flight (it may yet finish).
    bool queued = !main_q.empty() || !side_q.empty();
    for (auto &kv : own_q) queued = queued || !kv.second.empty();
    stalled = queued && !in_flight();
}
// A host wait: every queued piece of work, polling the messages in flight until
// they finish (their peers make the matching calls when their hosts next wait).
inline void flush() {
    const time_t start = time(nullptr);
    for (;;) {
        run_ready();
        if (stalled)
            emu_fail("the host waits for work queued behind a collective that never finishes (NCCL_EMU_HANG_AT), "
                     "or behind a point-to-point message's stream that cannot go on: on a GPU this wait would hang "
                     "for ever");
        if (!in_flight()) return;
        if (time(nullptr) - start > 300)
            emu_fail("a point-to-point message has been in flight for 300 s: its peer never made the matching call "
                     "(on a GPU this wait would hang for ever)");
        usleep(50);
    }
}
// 1 when [p, p + bytes) lies in one cudaMalloc'd (device or managed) allocation.
inline bool device_memory(const void *p, size_t bytes) {
    auto it = allocations.upper_bound((uintptr_t)p);
    if (it == allocations.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + bytes <= it->first + it->second;
}
// 1 when [p, p + bytes) lies in one cudaMallocHost'd allocation.
inline bool pinned_memory(const void *p, size_t bytes) {
    auto it = pinned.upper_bound((uintptr_t)p);
    if (it == pinned.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + bytes <= it->first + it->second;
}

}  // namespace emu

#endif

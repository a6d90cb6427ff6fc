// tests/emu/cuda_emu.h — the part of CUDA that femtotron's CUDA backend uses, run
// on the host, so its kernels and the host code around them are tested on
// machines without a GPU (in CI): the kernels' language (qualifiers, thread and
// block indices, __syncthreads, __syncwarp, static and dynamic shared memory,
// bf16, WMMA fragments), the launch, and the runtime calls of src/ops/*.cu.
// cuBLASLt is tests/emu/cublaslt_emu.h; tests/emu/include/ puts both where the
// .cu files include <cuda_runtime.h>, <cublasLt.h>, <cuda_bf16.h> and <mma.h>;
// tests/emu/cu2cpp.py rewrites the `<<<...>>>` launches into emu_kernel_call.
//
// Threads. A block's threads are user-level contexts on the calling thread, run in index order; a barrier suspends the thread and the scheduler
// resumes the waiting threads once every live thread of the block (__syncthreads)
// or of the warp (__syncwarp) has arrived, or fails naming the deadlock. A kernel
// whose first block never reaches a barrier runs its later blocks as plain calls.
// Blocks run one after another (in grid order, or reversed: CUDA_EMU_ORDER below),
// so a function-level static is the block's shared memory: tests/emu/cu2cpp.py
// declares each `__shared__ T name[N];` as a static EmuStaticShared (below; this
// header's __shared__ is a name that fails to compile, so a form cu2cpp does not
// rewrite, or a header it does not read, cannot silently keep stale contents).
// Those arrays and the dynamic shared memory (one buffer per block) are filled with
// NaN bytes before each block, as cudaMalloc'd memory is once, so a read of what no
// thread of the block wrote shows up, instead of what the last block left there.
//
// WMMA (m16n16k16, bf16 operands, fp32 accumulators): a fragment holds the whole
// 16x16 tile (a GPU spreads it over the warp in an unspecified layout, which the
// kernels must not rely on: they never touch its elements), and lane 0 does each
// operation for the warp. The documented rules are checked: the pointer 256-bit
// aligned, ldm a multiple of 16 bytes, every lane of the warp making the same calls.
//
// Streams. Work is queued, not run: a launch, a cuBLASLt product, an async copy
// or memset between device (or managed) memory runs when the host next waits
// (cudaStreamSynchronize, cudaDeviceSynchronize, cudaFree, a copy into plain host
// memory, which CUDA completes before returning). So host code that reads a buffer
// an op has not finished sees the old contents, as it may on a GPU, instead of the
// answer: a missing wait fails the tests. The order between streams is
// CUDA_EMU_STREAMS's: `order` (the default) runs all streams in the order the host
// issued the work; `side-first` runs the work of the other streams (NCCL's group
// streams) as early as their stream order and events allow, and `side-last` as
// late, the process's first stream (the ops' stream) and the default stream being
// the main one. Each stream keeps its order and cudaStreamWaitEvent holds a
// stream until the event's record has run; the other streams are kept in one
// queue, in issue order, which keeps every rank's collectives in issue order too.
// So a missing event between the ops' stream and a collective's stream shows as
// wrong numbers in one of the two modes (a collective reading its buffer before the
// op writing it ran, or an op reading the collective's result before it arrived).
// A stream that carries point-to-point messages (NCCL's links, nccl_emu.h) gets a
// queue of its own (own_queue): a message waits for its peer, and on a GPU it holds
// its own stream only. Its messages are asynchronous work: started when they reach
// the head of their queue (a send reads its buffer then), finished when MPI says
// so (a receive writes its buffer then); the queue's later work waits for that.
// These queues act as early as they can in `order` and `side-first`, and in
// `side-last` only while the main stream cannot run, so a missing event around a
// message shows too. A host wait polls messages in flight until they finish.
// A copy out of plain host memory reads it when issued (CUDA stages pageable memory then); a copy out of pinned memory (cudaMallocHost) reads
// it when it runs, as a GPU's DMA does, so host code that rewrites pinned memory
// before its copy ran sends the new contents. CUDA_EMU_SYNC=1 runs everything at once.
//
// Launch checks as on sm_90: at most 1024 threads, grid y and z at most 65535,
// dynamic shared memory above 48 KiB only after cudaFuncSetAttribute allowed it and
// never above 227 KiB; a bad launch leaves its error for cudaGetLastError.
//
// What it cannot check: the order of memory accesses between the lanes of a warp
// (only lane 0 touches WMMA tiles here), timing and races between blocks (they do not overlap
// here), register and shared-memory limits beyond the above, speed, and anything
// the hardware does differently from its documentation.
#ifndef FEMTOTRON_CUDA_EMU_H
#define FEMTOTRON_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <type_traits>
#include <vector>

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// tests/emu/cu2cpp.py rewrites each `__shared__ T name[N];` (EmuStaticShared, below);
// one it did not see (in a header, say) fails to compile, naming why.
#define __shared__ shared_memory_not_rewritten_by_tests_emu_cu2cpp_py

[[noreturn]] inline void emu_fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    fflush(stderr);
    abort();
}

struct alignas(8) int2 {  // as CUDA's: 8-byte aligned, one 64-bit access
    int x, y;
};
inline int2 make_int2(int x, int y) { return int2{x, y}; }
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(8) uint2 {
    unsigned x, y;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

// ---------------------------------------------------------------- runtime types
typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorNotReady = 600,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
} cudaError_t;
typedef cudaError_t cudaError;
struct EmuStream;
typedef EmuStream *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost, cudaMemoryTypeDevice, cudaMemoryTypeManaged };
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
enum cudaDeviceAttr { cudaDevAttrConcurrentManagedAccess = 89 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
#define cudaStreamNonBlocking 0x01
#define cudaMemAttachGlobal 0x01

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

// ---- the block scheduler ----
// Context switches: on x86-64 a few instructions (the callee-saved registers and the
// stack pointer), since ucontext's swapcontext makes a system call each time and a
// block of 256 threads meeting at 8 barriers switches 2,000 times; elsewhere
// ucontext. MXCSR and the x87 control word are not switched: nothing here changes
// the floating-point environment, so every context has the process's, and loading
// them (ldmxcsr, fldcw) took over half of a switch's time.
enum State { NEW, READY, WAIT_BLOCK, WAIT_WARP, DONE };
constexpr size_t STACK_BYTES = 256 * 1024;
#if defined(__x86_64__)
extern "C" void emu_ctx_switch(void **save_sp, void *load_sp);
asm(".text\n.weak emu_ctx_switch\n.type emu_ctx_switch,@function\nemu_ctx_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "subq $8, %rsp\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "addq $8, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");
struct Context {
    void *sp = nullptr;
};
inline void switch_to(Context *save, Context *load) { emu_ctx_switch(&save->sp, load->sp); }
// A fresh context that starts in entry() (which never returns) on the stack.
inline void make_context(Context *c, char *stack, void (*entry)()) {
    uintptr_t top = ((uintptr_t)stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)(top - 72);  // after the switch pops 64 bytes, rsp = top - 8, as after a call
    sp[0] = nullptr;                               // the switch's 8 bytes of padding (keeps rsp 16-aligned)
    for (int i = 1; i <= 6; i++) sp[i] = nullptr;  // r15 r14 r13 r12 rbx rbp
    sp[7] = (void *)entry;                          // where the switch's ret goes
    sp[8] = nullptr;                                // entry's return address: it never returns
    c->sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_to(Context *save, Context *load) { swapcontext(&save->uc, &load->uc); }
inline void make_context(Context *c, char *stack, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = STACK_BYTES;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif
struct Thread {
    Context ctx;
    char *stack = nullptr;
    State state = NEW;
};
inline Context scheduler;
inline std::vector<Thread> threads;
inline std::vector<char *> free_stacks;
inline unsigned current;
inline std::vector<uint64_t> collective_calls;  // warp-collective calls per thread of the running block
// The warp's exchange for the per-lane collectives (mma.sync, ldmatrix, shuffles):
// two slots per warp, used by a warp's calls in turn, so that one barrier a call
// suffices (a lane can write the next call's slot only once every lane has passed
// this call's barrier, by which time each has read this one's).
constexpr size_t XBYTES = 64;
struct XSlot {
    alignas(16) unsigned char lane[32][XBYTES];
    float result[32][4];  // a collective whose work one lane does for the warp (mma) leaves each lane's here
    uint64_t done;        // the call (a lane's exchange count) whose result is here; 0 none
};
inline std::vector<XSlot> xslots;     // 2 per warp of the running block
inline std::vector<uint64_t> xcalls;  // exchanges per thread of the running block
// cp.async: each thread's copies not yet waited for (they land at its wait).
struct AsyncCopy {
    void *dst;
    unsigned bytes;
    unsigned char data[16];
};
inline std::vector<std::vector<AsyncCopy>> async_copies;  // per thread of the running block
inline const std::function<void()> *body;
inline bool direct, used_barrier;
inline unsigned char *smem;
// Every static shared array a kernel has declared so far (EmuStaticShared registers
// itself the first time its declaration runs): refilled with NaN bytes before each block.
struct SharedArray {
    void *p;
    size_t bytes;
};
inline std::vector<SharedArray> static_shared;

inline void entry();
// Thread t made the running one: a stack and a fresh context if it is NEW.
inline Context *resume(unsigned t) {
    Thread &th = threads[t];
    if (th.state == NEW) {
        if (free_stacks.empty()) free_stacks.push_back((char *)malloc(STACK_BYTES));
        th.stack = free_stacks.back();
        free_stacks.pop_back();
        make_context(&th.ctx, th.stack, entry);
    }
    th.state = READY;
    current = t;
    threadIdx = dim3(t);
    return &th.ctx;
}

// CUDA_EMU_ORDER: `up` (the default) runs a launch's blocks in grid order and each
// round of a block's threads in index order, `down` both in reverse. A GPU runs
// them in no set order, so a kernel whose threads read what another wrote (or
// overwrite what another still reads) without a barrier between, or whose blocks
// depend on one another, gets one of the two orders wrong: running its tests both
// ways shows a missing __syncthreads or __syncwarp (tests/shell/test_cuda_emu.sh
// runs gpu_ops both ways), as compute-sanitizer's racecheck would on a GPU.
inline bool order_down() {
    static const bool down = [] {
        const char *v = getenv("CUDA_EMU_ORDER");
        if (!v || !v[0] || !strcmp(v, "up")) return false;
        if (!strcmp(v, "down")) return true;
        emu_fail("CUDA_EMU_ORDER must be up or down");
    }();
    return down;
}
constexpr unsigned ROUND_START = ~0u;
// The thread of this round after `from` (ROUND_START: the first) that can run, in
// the round's order; threads.size() when none is left.
inline unsigned next_runnable(unsigned from) {
    const unsigned n = (unsigned)threads.size();
    auto runnable = [](const Thread &th) { return th.state == NEW || th.state == READY; };
    if (order_down()) {
        for (unsigned t = from == ROUND_START ? n : from; t-- > 0;)
            if (runnable(threads[t])) return t;
        return n;
    }
    for (unsigned t = from == ROUND_START ? 0 : from + 1; t < n; t++)
        if (runnable(threads[t])) return t;
    return n;
}

// The running thread, suspended at a barrier or done, hands over to the next thread
// of the round that can run, or to the scheduler at the round's end: one switch a
// thread and round, not two through the scheduler.
inline void leave() {
    const unsigned from = current, t = next_runnable(from);
    switch_to(&threads[from].ctx, t < threads.size() ? resume(t) : &scheduler);
}

inline void barrier(State kind) {
    if (direct)
        emu_fail("a kernel reached a barrier in a later block but in none of its first block's threads; "
                 "run it without the plain-call shortcut (not emulated)");
    used_barrier = true;
    threads[current].state = kind;
    leave();
}

// A thread's start: run the kernel, then on to the next thread for good (its stack
// goes back to the pool at the round's end, once nothing runs on it).
inline void entry() {
    (*body)();
    threads[current].state = DONE;
    leave();
    emu_fail("a finished thread was resumed");
}

// One block of n threads (n a multiple of 32).
inline void check_collectives(unsigned n);
inline void check_async_copies(unsigned n);
inline void run_block(unsigned n) {
    collective_calls.assign(n, 0);
    if (async_copies.size() < n) async_copies.resize(n);
    for (unsigned t = 0; t < n; t++) async_copies[t].clear();  // (each keeps its capacity from block to block)
    xcalls.assign(n, 0);
    if (xslots.size() < 2 * (size_t)(n / 32)) xslots.resize(2 * (size_t)(n / 32));
    for (XSlot &x : xslots) x.done = 0;  // call counts start again in every block
    if (direct) {
        for (unsigned i = 0; i < n; i++) {
            threadIdx = dim3(order_down() ? n - 1 - i : i);
            (*body)();
        }
        check_collectives(n);
        check_async_copies(n);
        return;
    }
    threads.assign(n, Thread());
    for (;;) {
        // A round: every thread that can run, in the round's order, each handing
        // over to the next (leave), the last back here.
        const unsigned first = next_runnable(ROUND_START);
        if (first < n) switch_to(&scheduler, resume(first));
        unsigned live = 0;
        for (auto &th : threads) {
            if (th.state != DONE) live++;
            else if (th.stack) free_stacks.push_back(th.stack), th.stack = nullptr;
        }
        if (live == 0) {
            check_collectives(n);
            check_async_copies(n);
            return;
        }
        // Everyone live waits: release the block barrier, or the warps whose live
        // lanes all wait at theirs.
        bool released = false;
        unsigned at_block = 0;
        for (auto &th : threads) at_block += th.state == WAIT_BLOCK;
        if (at_block == live) {
            for (auto &th : threads)
                if (th.state == WAIT_BLOCK) th.state = READY;
            released = true;
        } else {
            for (unsigned w = 0; w < n / 32; w++) {
                unsigned wlive = 0, wwait = 0;
                for (unsigned l = 0; l < 32; l++) {
                    State s = threads[w * 32 + l].state;
                    wlive += s != DONE;
                    wwait += s == WAIT_WARP;
                }
                if (wlive && wwait == wlive) {  // its waiting lanes go on; lanes that returned stay done
                    for (unsigned l = 0; l < 32; l++)
                        if (threads[w * 32 + l].state == WAIT_WARP) threads[w * 32 + l].state = READY;
                    released = true;
                }
            }
        }
        if (!released) {
            fprintf(stderr, "cuda_emu: deadlock in block (%u,%u,%u): %u threads live, %u at __syncthreads, the "
                    "rest at __syncwarp with part of their warp elsewhere or exited\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, live, at_block);
            abort();
        }
    }
}

// WMMA operations are warp-collective: every lane of a warp makes the same calls.
inline void check_collectives(unsigned n) {
    for (unsigned t = 0; t < n; t++)
        if (collective_calls[t] != collective_calls[t - t % 32]) {
            fprintf(stderr, "cuda_emu: block (%u,%u,%u): lane %u of warp %u made %llu WMMA calls, lane 0 %llu: a "
                    "collective operation called from divergent code\n", blockIdx.x, blockIdx.y, blockIdx.z, t % 32,
                    t / 32, (unsigned long long)collective_calls[t], (unsigned long long)collective_calls[t - t % 32]);
            abort();
        }
}

// A thread that ends with copies it never waited for: on a GPU they land at some
// unknown time, after the kernel has read (or not) what they overwrite.
inline void check_async_copies(unsigned n) {
    for (unsigned t = 0; t < n; t++)
        if (!async_copies[t].empty()) {
            fprintf(stderr, "cuda_emu: block (%u,%u,%u): thread %u ended with %zu cp.async copies it never waited for\n",
                    blockIdx.x, blockIdx.y, blockIdx.z, t, async_copies[t].size());
            abort();
        }
}

// The launch checks: false (and the error left for cudaGetLastError) when refused.
inline bool launch_ok(const void *kernel, dim3 grid, dim3 block, size_t smem_bytes) {
    const unsigned nthreads = block.x * block.y * block.z;
    const auto allowed = smem_allowed.find(kernel);
    if (nthreads == 0 || nthreads > 1024 || block.y != 1 || block.z != 1 || grid.x == 0 || grid.y == 0 ||
        grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
        sticky = cudaErrorInvalidConfiguration;
        return false;
    }
    if (nthreads % 32) emu_fail("blocks of whole warps only are emulated");
    if (smem_bytes > 227 * 1024 ||
        (smem_bytes > 48 * 1024 && (allowed == smem_allowed.end() || (size_t)allowed->second < smem_bytes))) {
        sticky = cudaErrorInvalidValue;  // too much dynamic shared memory for this kernel
        return false;
    }
    return true;
}

// Run a checked launch: every block, one after another.
inline void run_launch(const void *kernel, dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &fn) {
    const unsigned nthreads = block.x * block.y * block.z;
    gridDim = grid;
    blockDim = block;
    void *mem = nullptr;  // exactly smem_bytes: under AddressSanitizer a kernel reading past it is reported
    if (posix_memalign(&mem, 128, smem_bytes ? smem_bytes : 1) != 0) emu_fail("out of host memory for shared memory");
    smem = (unsigned char *)mem;
    body = &fn;
    const auto known = barrier_free.find(kernel);
    direct = known != barrier_free.end() && known->second;
    const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t i = 0; i < blocks; i++) {  // x fastest, then y, then z; or the reverse (CUDA_EMU_ORDER)
        const uint64_t b = order_down() ? blocks - 1 - i : i;
        blockIdx = dim3((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y));
        memset(smem, 0xff, smem_bytes);  // NaN floats: unwritten shared memory shows
        for (const SharedArray &a : static_shared) memset(a.p, 0xff, a.bytes);
        used_barrier = false;
        run_block(nthreads);
        if (!direct && !used_barrier) {
            barrier_free[kernel] = true;
            direct = true;
        } else if (!direct) {
            barrier_free[kernel] = false;
        }
    }
    body = nullptr;
    smem = nullptr;
    free(mem);
}
}  // namespace emu

// `__shared__ T name[N];` in a kernel, as tests/emu/cu2cpp.py writes it: a function-
// level `static EmuStaticShared<T[N]>`, and `name` a reference to its array v. The
// first thread to reach the declaration constructs it (filled with NaN bytes, and
// registered, so every later block starts from NaN bytes too).
template <typename A>
struct EmuStaticShared {
    static_assert(std::is_array<A>::value && std::is_trivially_copyable<A>::value,
                  "__shared__ holds arrays of plain values (as CUDA: no constructors)");
    A v;  // nothing after it: under AddressSanitizer a read past the array is reported
    EmuStaticShared() {
        memset(&v, 0xff, sizeof v);
        emu::static_shared.push_back({&v, sizeof v});
    }
};

inline void __syncthreads() { emu::barrier(emu::WAIT_BLOCK); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu_fail("__syncwarp with a partial mask is not emulated");
    emu::barrier(emu::WAIT_WARP);
}
inline unsigned char *emu_dynamic_smem() { return emu::smem; }

// kernel<<<grid, block, smem, stream>>>(args...) is emu_kernel_call(kernel, grid,
// block, smem, stream)(args...) (tests/emu/cu2cpp.py).
template <class... P>
struct EmuCall {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A>
    void operator()(A... args) const {
        void (*k)(P...) = kernel;
        if (!emu::launch_ok((const void *)k, grid, block, smem)) return;
        const dim3 g = grid, b = block;
        const size_t sm = smem;
        emu::enqueue(
            [=]() {  // the arguments as they were at the launch
                const std::function<void()> fn = [=]() { k(args...); };
                emu::run_launch((const void *)k, g, b, sm, fn);
            },
            stream);
    }
};
template <class... P>
inline EmuCall<P...> emu_kernel_call(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0,
                                     cudaStream_t stream = nullptr) {
    return EmuCall<P...>{kernel, grid, block, smem, stream};
}

// ---------------------------------------------------------------- runtime calls
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    }
    return "unknown error";
}
inline cudaError_t cudaGetLastError() {
    cudaError_t e = emu::sticky;
    emu::sticky = cudaSuccess;
    return e;
}
// CUDA_EMU_DEVICES=0 plays a machine without a GPU.
inline cudaError_t cudaGetDeviceCount(int *n) {
    const char *s = getenv("CUDA_EMU_DEVICES");
    *n = s ? atoi(s) : 1;
    return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
namespace emu {
inline int device;  // cudaSetDevice's
}
inline cudaError_t cudaSetDevice(int d) {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n) return cudaErrorInvalidValue;
    emu::device = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
    *d = emu::device;
    return cudaSuccess;
}
// CUDA_EMU_DEVICES=N plays N GPUs, with the bus ids 0000:01:00.0 .. (so ranks of
// one node that take different devices count as having GPUs of their own).
inline cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    snprintf(id, (size_t)len, "0000:%02x:00.0", d + 1);
    return cudaSuccess;
}
// The emulated device is an H100 SXM, as its launch limits are sm_90's;
// CUDA_EMU_DEVICE_NAME names it otherwise (a GPU no table knows, say).
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    const char *n = getenv("CUDA_EMU_DEVICE_NAME");
    snprintf(p->name, sizeof p->name, "%s", n && n[0] ? n : "NVIDIA H100 80GB HBM3 (cuda_emu)");
    p->totalGlobalMem = (size_t)81559 << 20;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = (size_t)81559 << 20;  // an H100's 80 GiB (less the driver's reserve)
    *free_b = *total;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) {
    *v = 1;
    return cudaSuccess;
}
struct EmuStream {
    int id;
};
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    static int streams;
    *s = new EmuStream{++streams};
    if (!emu::first_stream) emu::first_stream = *s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s != emu::first_stream) delete s;  // (the main one stays: the queue keys on it)
    return cudaSuccess;
}
// Events: a record is queued on its stream and marks the event's latest record
// done when it runs; a query runs what can run first (so every event completes when
// asked, as the device would eventually, unless behind a stall).
// A record that has run holds the host's monotonic time then (cudaEventElapsedTime:
// the time between two records' runs, the emulated device's work between them).
struct EmuEvent {
    std::shared_ptr<bool> record;  // the latest record (null: never recorded)
    std::shared_ptr<double> when;  // the time it ran, seconds
};
typedef EmuEvent *cudaEvent_t;
#define cudaEventDisableTiming 0x02
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new EmuEvent;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;  // the queued records and waits hold their own flags
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
    std::shared_ptr<bool> r = std::make_shared<bool>(false);
    std::shared_ptr<double> w = std::make_shared<double>(0.0);
    e->record = r;
    e->when = w;
    emu::enqueue([r, w]() {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *w = ts.tv_sec + 1e-9 * ts.tv_nsec;
        *r = true;
    }, stream);
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->record && !*e->record) emu::flush();
    return cudaSuccess;
}
// ms from start's latest record to end's, both run (else not ready).
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    emu::run_ready();
    if (!start->record || !end->record) return cudaErrorInvalidResourceHandle;
    if (!*start->record || !*end->record) return cudaErrorNotReady;
    *ms = (float)(1e3 * (*end->when - *start->when));
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    emu::run_ready();
    return !e->record || *e->record ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    emu::run_ready();
    return emu::queue_of(s).empty() ? cudaSuccess : cudaErrorNotReady;
}
// The stream's later work waits until the event's latest record (at this call) has run.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    if (e->record) emu::enqueue([]() {}, s, e->record);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
    emu::flush();
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::flush();
    return cudaSuccess;
}
template <class K>
inline cudaError_t cudaFuncSetAttribute(K *kernel, cudaFuncAttribute, int value) {
    emu::smem_allowed[(const void *)kernel] = value;
    return cudaSuccess;
}

// 256-byte aligned, as cudaMalloc's, and exactly `bytes` long: built with
// AddressSanitizer (make emu-asan) an access past the end is reported, not hidden
// in rounding slack.
inline void *emu_alloc(size_t bytes) {
    void *p = nullptr;
    if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) p = nullptr;
    if (p) {
        memset(p, 0xff, bytes);  // uninitialised device memory reads as NaN
        emu::allocations[(uintptr_t)p] = bytes;
    }
    return p;
}
inline cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = emu_alloc(bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <class T>
inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
inline cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned) { return cudaMalloc(p, bytes); }
inline cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    emu::flush();  // cudaFree waits for the device
    if (!emu::allocations.erase((uintptr_t)p)) return cudaErrorInvalidValue;
    free(p);
    return cudaSuccess;
}
// Pinned host memory: plain memory the copies read when they run (see the top).
inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = nullptr;
    if (posix_memalign(p, 256, bytes ? bytes : 1) != 0 || !*p) return cudaErrorMemoryAllocation;
    emu::pinned[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    emu::flush();  // cudaFreeHost waits for the device
    if (!emu::pinned.erase((uintptr_t)p)) return cudaErrorInvalidValue;
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    if (emu::pinned_memory(p, 1)) a->type = cudaMemoryTypeHost;
    auto it = emu::allocations.upper_bound((uintptr_t)p);
    if (it != emu::allocations.begin()) {
        --it;
        if ((uintptr_t)p < it->first + it->second) a->type = cudaMemoryTypeManaged;
    }
    return cudaSuccess;
}
// cudaMemcpy's ranges must not overlap (undefined on a GPU): refused here.
// Between device (or managed) ranges the copy is queued; out of plain host memory
// the source is read now (CUDA stages pageable memory before returning) and the
// copy queued; into plain host memory everything queued runs first and the copy is
// done on return (CUDA completes those before returning).
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t stream = nullptr) {
    const uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    if (bytes && d < s + bytes && s < d + bytes && d != s) return cudaErrorInvalidValue;
    if (bytes == 0) return cudaSuccess;
    if (!emu::device_memory(dst, bytes)) {
        emu::flush();
        memmove(dst, src, bytes);
    } else if (emu::pinned_memory(src, bytes)) {
        emu::enqueue([=]() { memcpy(dst, src, bytes); }, stream);  // the DMA reads the source when it runs
    } else if (!emu::device_memory(src, bytes)) {
        std::vector<unsigned char> staged((const unsigned char *)src, (const unsigned char *)src + bytes);
        emu::enqueue([=]() { memcpy(dst, staged.data(), bytes); }, stream);
    } else {
        emu::enqueue([=]() { memmove(dst, src, bytes); }, stream);
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
    emu::flush();
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k);
    emu::flush();
    return e;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t stream = nullptr) {
    emu::enqueue([=]() { memset(p, v, bytes); }, stream);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void *p, int v, size_t bytes) {
    cudaMemsetAsync(p, v, bytes);
    emu::flush();
    return cudaSuccess;
}
// 2D copies: between device ranges queued; with plain host memory on either side
// done now, after the queue (the copy_rows_f32 callers pass planned buffers).
inline cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t stream = nullptr) {
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    if (height == 0 || width == 0) return cudaSuccess;
    auto copy = [=]() {
        for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    };
    const size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
    if (emu::device_memory(dst, dspan) && emu::device_memory(src, sspan)) {
        emu::enqueue(copy, stream);
    } else {
        emu::flush();
        copy();
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height,
                                     cudaStream_t stream = nullptr) {
    if (width > pitch) return cudaErrorInvalidPitchValue;
    emu::enqueue(
        [=]() {
            for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
        },
        stream);
    return cudaSuccess;
}

// ---------------------------------------------------------------- bf16 (cuda_bf16.h)
// Round to nearest, ties to even; NaN stays NaN.
struct __nv_bfloat16 {
    uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) r.bits = (uint16_t)((u >> 16) | 0x40u);
    else r.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---------------------------------------------------------------- WMMA (mma.h)
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "only m16n16k16 is emulated");
    T e[16 * 16];  // the whole tile, row-major: e[r * 16 + c]
};

// A collective operation: counted for every lane (run_block checks that the lanes
// of a warp made the same number of calls); only lane 0 does the work, since all
// lanes pass the same arguments and hold the same tiles, and only lane 0's tiles
// are ever stored.
inline bool lane0_of_collective() {
    emu::collective_calls[threadIdx.x]++;
    return threadIdx.x % 32 == 0;
}
inline bool collective(const void *p, unsigned ldm, size_t elem) {
    if (!lane0_of_collective()) return false;
    if ((uintptr_t)p % 32) emu_fail("wmma pointer not 256-bit aligned");
    if ((ldm * elem) % 16) emu_fail("wmma ldm not a multiple of 16 bytes");
    return true;
}
template <class L>
inline size_t at(int r, int c, unsigned ldm) {
    return std::is_same<L, row_major>::value ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}

template <class Use, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ldm) {
    if (!collective(p, ldm, 2)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.e[r * 16 + c] = p[at<L>(r, c, ldm)];
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                             layout_t layout) {
    if (!collective(p, ldm, 4)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.e[r * 16 + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout) {
    if (!collective(p, ldm, 4)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.e[r * 16 + c];
}
template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
    for (int i = 0; i < 256; i++) f.e[i] = v;
}
// d = a b + c: products of bf16 values are exact in fp32, summed in fp32 (the
// tensor core's order of the 16 terms is unspecified; here k = 0..15).
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    if (!lane0_of_collective()) return;
    float bt[256], out[256];  // b transposed, for a row-by-row inner loop; out: d may be c
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++) bt[n * 16 + k] = __bfloat162float(b.e[k * 16 + n]);
    for (int r = 0; r < 16; r++) {
        float ar[16];
        for (int k = 0; k < 16; k++) ar[k] = __bfloat162float(a.e[r * 16 + k]);
        for (int n = 0; n < 16; n++) {
            float s = c.e[r * 16 + n];
            for (int k = 0; k < 16; k++) s += ar[k] * bt[n * 16 + k];
            out[r * 16 + n] = s;
        }
    }
    memcpy(d.e, out, sizeof out);
}
}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------- cp.async
// cp.async(.cg 16 / .ca 4 bytes).shared.global with src-size `valid ? bytes : 0`:
// the source is read now, the shared memory written only at the thread's wait
// (cp.async.wait_all), so a kernel that reads before waiting, or before the barrier
// after every thread's wait, reads stale or poisoned (NaN) shared memory.
inline void emu_copy_async(void *dst, const void *src, unsigned bytes, bool valid) {
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes) emu_fail("cp.async address not aligned to its size");
    emu::AsyncCopy c;
    c.dst = dst;
    c.bytes = bytes;
    if (valid)
        memcpy(c.data, src, bytes);
    else
        memset(c.data, 0, bytes);
    emu::async_copies[threadIdx.x].push_back(c);
}
inline void emu_copy_async_wait() {
    for (const emu::AsyncCopy &c : emu::async_copies[threadIdx.x]) memcpy(c.dst, c.data, c.bytes);
    emu::async_copies[threadIdx.x].clear();
}

// ---------------------------------------------------------------- per-lane warp collectives
// Unlike WMMA's, these instructions spread their operands over the lanes in a
// documented layout (PTX ISA: mma.m16n8k16, ldmatrix, shfl.sync), which the
// kernels rely on, so each lane holds only its own registers here too: every lane
// puts its part in the warp's exchange, meets the others at a warp barrier, and
// reads what the instruction gives it. All 32 lanes must make the same calls
// (counted as WMMA's are); a lane elsewhere deadlocks the warp, which the scheduler
// reports.
namespace emu {
template <class T>
inline XSlot &warp_exchange(const T &mine) {
    static_assert(sizeof(T) <= XBYTES, "exchange record too large");
    const unsigned t = threadIdx.x;
    collective_calls[t]++;
    XSlot &slot = xslots[2 * (t / 32) + xcalls[t]++ % 2];
    memcpy(slot.lane[t % 32], &mine, sizeof(T));
    barrier(WAIT_WARP);
    return slot;
}
template <class T>
inline T from_lane(const XSlot &slot, unsigned lane) {
    T v;
    memcpy(&v, slot.lane[lane], sizeof(T));
    return v;
}
inline float bf16_half(uint32_t reg, int hi) {
    uint32_t u = hi ? reg & 0xffff0000u : reg << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
}  // namespace emu

// shfl.sync.bfly: the value of lane (this lane ^ lane_mask), for 4-byte T, and 8-byte
// T (double, long long: CUDA's overloads shuffle the two halves).
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- and 8-byte shuffles only are emulated");
    if (mask != 0xffffffffu || width != 32) emu_fail("__shfl_xor_sync with a partial mask or width is not emulated");
    const emu::XSlot &slot = emu::warp_exchange(v);
    return emu::from_lane<T>(slot, (threadIdx.x % 32) ^ (unsigned)lane_mask);
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a b + c, a 16x16 and b
// 16x8 bf16, c and d 16x8 fp32. With g = lane / 4 and t = lane % 4, a lane holds
// a's (g, 2t..2t+1) in a[0], (g+8, 2t..) in a[1], (g, 2t+8..) in a[2] and
// (g+8, 2t+8..) in a[3] (the lower half of a register the first element); b's
// (2t..2t+1, g) in b[0] and (2t+8.., g) in b[1]; c's and d's (g, 2t..2t+1) in
// [0..1] and (g+8, 2t..) in [2..3]. Products of bf16 values are exact in fp32;
// the 16 terms are added in k order here (the tensor core's order is unspecified).
inline void emu_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    struct Regs {
        uint32_t a[4], b[2];
        float c[4];
    } mine;
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, c, sizeof mine.c);
    emu::XSlot &slot = emu::warp_exchange(mine);
    const uint64_t call = emu::xcalls[threadIdx.x];  // the same on every lane of the warp
    if (slot.done != call) {  // the first lane past the barrier does the warp's product for all
        slot.done = call;
        Regs L[32];
        for (unsigned l = 0; l < 32; l++) L[l] = emu::from_lane<Regs>(slot, l);
        float A[16][16], B[16][8];  // the whole operands, unpacked from the lanes' registers
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++)
                A[r][k] = emu::bf16_half(L[(r % 8) * 4 + (k % 8) / 2].a[(r >= 8) + 2 * (k >= 8)], k % 2);
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) B[k][n] = emu::bf16_half(L[n * 4 + (k % 8) / 2].b[k >= 8], k % 2);
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 4; i++) {
                const int r = lane / 4 + 8 * (i / 2), n = 2 * (lane % 4) + i % 2;
                float s = L[lane].c[i];
                for (int k = 0; k < 16; k++) s += A[r][k] * B[k][n];
                slot.result[lane][i] = s;
            }
    }
    memcpy(d, slot.result[threadIdx.x % 32], 4 * sizeof(float));
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8x8 matrices of 16-bit
// values; lanes 8i..8i+7 give the addresses of matrix i's rows 0..7 (16 bytes each,
// 16-byte aligned). Register i of a lane gets matrix i's (lane / 4, 2 (lane % 4)..+1),
// or with trans its (2 (lane % 4), lane / 4) and (2 (lane % 4) + 1, lane / 4).
inline void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    if ((uintptr_t)row % 16) emu_fail("ldmatrix row address not 16-byte aligned");
    const emu::XSlot &slot = emu::warp_exchange(row);
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = 0; i < 4; i++) {
        uint16_t e[2];
        for (unsigned h = 0; h < 2; h++) {
            const unsigned rr = trans ? 2 * (lane % 4) + h : lane / 4, cc = trans ? lane / 4 : 2 * (lane % 4) + h;
            const uint16_t *p = emu::from_lane<const uint16_t *>(slot, 8 * i + rr);
            e[h] = p[cc];
        }
        r[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
}

#endif

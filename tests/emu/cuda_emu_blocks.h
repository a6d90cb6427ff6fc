// tests/emu/cuda_emu_blocks.h — the block scheduler (a block's threads as user-level contexts
// switched at barriers, shared memory filled with NaN bytes before each block),
// the static __shared__ arrays cu2cpp.py declares, and the launch (cuda_emu.h's
// head comment, "Threads").
// A part of tests/emu/cuda_emu.h, which includes its parts in order (each reads
// what the ones before it declare); include cuda_emu.h, not this.
#ifndef FEMTOTRON_CUDA_EMU_BLOCKS_H
#define FEMTOTRON_CUDA_EMU_BLOCKS_H

namespace emu {

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

#endif

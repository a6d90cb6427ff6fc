// tests/emu/test_threads_emu.cpp — the emulated block scheduler (tests/emu/cuda_emu.h),
// which every emulated kernel of the CUDA backend runs on. A block's threads are
// user-level contexts run in index order (or reversed); at a barrier each hands over to the next
// thread that can run, the last back to the scheduler, which then releases the
// block barrier (every live thread at __syncthreads) or a warp's (its live lanes all
// at __syncwarp), or reports a deadlock. Checked:
//   - the order: every thread's step before a barrier comes before any thread's
//     step after it, threads in index order within a round;
//   - a shared-memory tree reduction over 256 threads (8 barriers), two blocks;
//   - threads that return early no longer hold a barrier;
//   - a warp barrier releases its warp while another warp waits at the block's, and
//     the block's barrier waits for a thread at its warp's barrier;
//   - a barrier that can never be released (a lane at __syncthreads, the rest of
//     its warp at __syncwarp) ends the process naming the deadlock;
//   - the stacks of finished threads go back to the pool and are reused: three
//     blocks of 1024 threads meeting at barriers allocate 1024 stacks, not 3072;
//   - a grid's blocks run in grid order, x fastest; CUDA_EMU_ORDER=down runs
//     them and each round of threads in reverse order (a child process);
//   - a shared value read from a neighbour without a barrier is wrong in both
//     orders (63 and 1 of 64 threads), right in both with the barrier;
//   - __shfl_xor_sync of 4- and 8-byte values (float, double, long long) gives
//     each lane lane ^ mask's value, all 64 bits of it;
//   - a __shared__ array reads as NaN where no thread of the block wrote it: in a
//     launch's first block (not the zero a C++ static starts as) and in later blocks
//     and launches (not what the last block left).
#include "cuda_emu.h"
#include "../unit/check.h"

#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

static int g_log[4096];  // (steps) what the threads did, in the order they did it
static int g_n;

__global__ void k_rounds() {  // three steps, two barriers between them
    const int t = threadIdx.x;
    g_log[g_n++] = t;
    __syncthreads();
    g_log[g_n++] = 1000 + t;
    __syncthreads();
    g_log[g_n++] = 2000 + t;
}

__global__ void k_tree_sum(float *out) {  // sum of 1 .. 256 + 256 * block, every thread's copy
    __shared__ float sh[256];
    const int t = threadIdx.x;
    sh[t] = (float)(t + 1 + 256 * blockIdx.x);
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    out[blockIdx.x * 256 + t] = sh[0];
}

__global__ void k_early_exit() {  // threads from 64 on return at once
    const int t = threadIdx.x;
    if (t >= 64) return;
    g_log[g_n++] = t;
    __syncthreads();
    g_log[g_n++] = 1000 + t;
}

__global__ void k_warp_then_block() {  // warp 0 meets at its barrier, warp 1 at the block's
    const int t = threadIdx.x;
    g_log[g_n++] = t;
    if (t < 32) {
        __syncwarp();
        g_log[g_n++] = 100 + t;
    } else {
        __syncthreads();
        g_log[g_n++] = 200 + t;
    }
}

__global__ void k_lone_lane() {  // warp 1 is lane 32 alone (33-63 return), at its warp's barrier
    const int t = threadIdx.x;
    if (t > 32) return;
    g_log[g_n++] = t;
    if (t == 32) {
        __syncwarp();
        g_log[g_n++] = 100 + t;
    } else {
        __syncthreads();
        g_log[g_n++] = 200 + t;
    }
}

__global__ void k_block_order() {  // each block's position, as the blocks run
    if (threadIdx.x == 0) g_log[g_n++] = 10 * (int)blockIdx.y + (int)blockIdx.x;
}

// A grid of 3 x 2 blocks: the order its blocks ran in, "" when it is `want`.
static std::string block_order_differs(const std::vector<int> &want) {
    g_n = 0;
    emu_kernel_call(k_block_order, dim3(3, 2), dim3(32))();
    cudaDeviceSynchronize();
    std::string got;
    for (int i = 0; i < g_n; i++) got += (i ? " " : "") + std::to_string(g_log[i]);
    return std::vector<int>(g_log, g_log + g_n) == want ? "" : got;
}

template <bool SYNC>  // two kernels: a kernel's first block tells the emulation whether it meets at barriers
__global__ void k_neighbour(float *out, float base) {  // out[t] = what thread t + 1 (mod 64) shared
    __shared__ float sh[64];
    const int t = threadIdx.x;
    sh[t] = base + t;
    if (SYNC) __syncthreads();
    out[t] = sh[(t + 1) % 64];
}

__global__ void k_stale(float *out) {  // reads its slot before writing it: what the block found there
    __shared__ float sh[32];
    const int t = threadIdx.x;
    out[blockIdx.x * 32 + t] = sh[t];
    sh[t] = (float)(100 * blockIdx.x + t);
}

__global__ void k_shuffles(double *d, long long *q, float *f) {  // lane l gets lane l ^ 5's values
    const int l = threadIdx.x;
    d[l] = __shfl_xor_sync(0xffffffffu, 1e12 * l + 0.25, 5);  // needs all 64 bits
    q[l] = __shfl_xor_sync(0xffffffffu, (1LL << 40) * l + l, 5);
    f[l] = __shfl_xor_sync(0xffffffffu, 0.5f + (float)l, 5);
}

__global__ void k_deadlock() {  // lane 0 at the block's barrier, lanes 1-31 at the warp's
    if (threadIdx.x == 0) __syncthreads();
    else __syncwarp();
}

__global__ void k_stacks(int *count) {  // 1024 threads, two barriers
    __shared__ int sh[1024];
    sh[threadIdx.x] = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int i = 0; i < 1024; i++) s += sh[i];
        count[blockIdx.x] = s;
    }
    __syncthreads();
}

// Runs kernel k on one block of n threads and compares what its threads logged
// with `want`: "N steps as expected", or the first difference (ok false).
static std::string run_logged(void (*k)(), unsigned n, const std::vector<int> &want, bool *ok) {
    g_n = 0;
    emu_kernel_call(k, dim3(1), dim3(n))();
    cudaDeviceSynchronize();
    *ok = false;
    if (g_n != (int)want.size()) return "logged " + std::to_string(g_n) + " steps, expected " + std::to_string(want.size());
    for (int i = 0; i < g_n; i++)
        if (g_log[i] != want[i])
            return "step " + std::to_string(i) + " was " + std::to_string(g_log[i]) + ", expected " +
                   std::to_string(want[i]);
    *ok = true;
    return std::to_string(g_n) + " steps as expected";
}

// thread ids lo .. hi - 1, each plus `add`, appended to v
static void ids(std::vector<int> &v, int lo, int hi, int add) {
    for (int t = lo; t < hi; t++) v.push_back(add + t);
}

// A device array of n values (NaN bytes, as cudaMalloc's here), and its values
// copied back to the host once the launches writing it ran, the array freed.
template <typename T>
static T *device_array(size_t n) {
    T *p = nullptr;
    cudaMalloc((void **)&p, n * sizeof(T));
    return p;
}
template <typename T>
static std::vector<T> to_host_and_free(T *dev, size_t n) {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    return h;
}

// k_neighbour on one block of 64 threads (a fresh base each call, so a value left by
// an earlier launch shows): how many threads read a wrong value.
static int neighbour_wrong(bool sync) {
    static float base = 0.0f;
    base += 1000.0f;
    float *out = device_array<float>(64);
    if (sync) emu_kernel_call(k_neighbour<true>, dim3(1), dim3(64))(out, base);
    else emu_kernel_call(k_neighbour<false>, dim3(1), dim3(64))(out, base);
    const std::vector<float> host = to_host_and_free(out, 64);
    int wrong = 0;
    for (int t = 0; t < 64; t++) wrong += host[t] != base + (float)((t + 1) % 64);
    return wrong;
}

// Runs k_deadlock in a child process: its exit status and what it printed on stderr.
static std::string deadlock_child(int *status) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        emu_kernel_call(k_deadlock, dim3(1), dim3(32))();
        cudaDeviceSynchronize();
        _exit(0);  // not reached: the scheduler aborts
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    ssize_t r;
    while ((r = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)r);
    close(fds[0]);
    waitpid(pid, status, 0);
    return err;
}

// The checks of CUDA_EMU_ORDER=down, in a process of its own (the order is read
// once a process): each round in reverse thread order, and a read of a
// neighbour's shared value without a barrier wrong for the one thread that runs
// before its neighbour (up, it is wrong for all but one).
static int down_child(void) {
    bool ok = false;
    std::vector<int> want;
    for (int r = 0; r < 3; r++)
        for (int t = 95; t >= 0; t--) want.push_back(1000 * r + t);
    const std::string d = run_logged(k_rounds, 96, want, &ok);
    CHECK(ok, "CUDA_EMU_ORDER=down: each round in reverse thread order, no step past a barrier early (%s)",
          d.c_str());
    const std::string b = block_order_differs({12, 11, 10, 2, 1, 0});
    CHECK(b.empty(), "CUDA_EMU_ORDER=down: a 3 x 2 grid's blocks run in reverse grid order (%s)",
          b.empty() ? "(2,1) first, (0,0) last" : b.c_str());
    const int racy = neighbour_wrong(false), synced = neighbour_wrong(true);
    CHECK(racy == 1 && synced == 0,
          "CUDA_EMU_ORDER=down: a neighbour's shared value read without a barrier is wrong for %d of 64 threads "
          "(expected 1: the missing barrier shows), with one for %d (expected 0)", racy, synced);
    return check_summary();
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--down")) return down_child();
    bool ok = false;
    std::vector<int> want;
    ids(want, 0, 96, 0), ids(want, 0, 96, 1000), ids(want, 0, 96, 2000);
    std::string d = run_logged(k_rounds, 96, want, &ok);
    CHECK(ok, "96 threads, two barriers: each round in thread order, no step past a barrier early (%s)", d.c_str());

    const std::string b = block_order_differs({0, 1, 2, 10, 11, 12});
    CHECK(b.empty(), "a 3 x 2 grid's blocks run in grid order, x fastest (%s)", b.empty() ? "(0,0) first" : b.c_str());
    const int racy = neighbour_wrong(false), synced = neighbour_wrong(true);
    CHECK(racy == 63 && synced == 0,
          "a neighbour's shared value read without a barrier is wrong for %d of 64 threads (expected 63: all but the "
          "last read it before it is written), with one for %d (expected 0)", racy, synced);

    float *out = device_array<float>(512);
    emu_kernel_call(k_tree_sum, dim3(2), dim3(256))(out);
    const std::vector<float> host = to_host_and_free(out, 512);
    int wrong = 0;
    for (int i = 0; i < 512; i++) wrong += host[i] != (i < 256 ? 32896.0f : 32896.0f + 65536.0f);
    CHECK(wrong == 0, "a shared-memory tree sum over 256 threads (8 barriers), two blocks: %d of 512 values wrong "
          "(block 0 %g, block 1 %g)", wrong, host[0], host[256]);

    want.clear();
    ids(want, 0, 64, 0), ids(want, 0, 64, 1000);
    d = run_logged(k_early_exit, 128, want, &ok);
    CHECK(ok, "threads that returned early do not hold the others' barrier (%s)", d.c_str());

    // Round 1: every thread logs t; warp 0 stops at __syncwarp, warp 1 at
    // __syncthreads. Not all live threads are at the block's barrier, so warp 0 is
    // released: it logs 100 + t and ends. Then warp 1, the only live threads, all at
    // the block's barrier, is released: 200 + t.
    want.clear();
    ids(want, 0, 64, 0), ids(want, 0, 32, 100), ids(want, 32, 64, 200);
    d = run_logged(k_warp_then_block, 64, want, &ok);
    CHECK(ok, "a warp barrier releases its warp while another warp waits at the block's (%s)", d.c_str());

    // The block barrier waits for lane 32 too, which is at its warp's barrier (one
    // live thread short): lane 32 goes on and ends first, then warp 0.
    want.clear();
    ids(want, 0, 33, 0), ids(want, 32, 33, 100), ids(want, 0, 32, 200);
    d = run_logged(k_lone_lane, 64, want, &ok);
    CHECK(ok, "the block's barrier waits for a live thread still at its warp's barrier (%s)", d.c_str());

    int status = 0;
    const std::string err = deadlock_child(&status);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && err.find("deadlock in block (0,0,0)") != std::string::npos &&
              err.find("32 threads live, 1 at __syncthreads") != std::string::npos,
          "a barrier that can never be released ends the run naming the deadlock (%s)",
          err.empty() ? "no message" : err.substr(0, err.find('\n')).c_str());

    double *sd = device_array<double>(32);
    long long *sq = device_array<long long>(32);
    float *sf = device_array<float>(32);
    emu_kernel_call(k_shuffles, dim3(1), dim3(32))(sd, sq, sf);
    const std::vector<double> hd = to_host_and_free(sd, 32);
    const std::vector<long long> hq = to_host_and_free(sq, 32);
    const std::vector<float> hf = to_host_and_free(sf, 32);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        bad += hd[l] != 1e12 * (l ^ 5) + 0.25 || hq[l] != (1LL << 40) * (l ^ 5) + (l ^ 5) || hf[l] != 0.5f + (float)(l ^ 5);
    CHECK(bad == 0, "__shfl_xor_sync with mask 5: every lane gets lane ^ 5's double, long long and float (%d of 32 "
          "lanes wrong; lane 0 got %.17g, %lld)", bad, hd[0], hq[0]);

    float *found = device_array<float>(2 * 2 * 32);  // (launch, block, thread)
    emu_kernel_call(k_stale, dim3(2), dim3(32))(found);
    emu_kernel_call(k_stale, dim3(2), dim3(32))(found + 64);
    const std::vector<float> seen = to_host_and_free(found, 128);
    int numbers = 0;
    for (int i = 0; i < 128; i++) numbers += !isnan(seen[i]);
    CHECK(numbers == 0, "a __shared__ array's unwritten values read as NaN in every block of two launches: %d of 128 "
          "reads saw a number (first block %g, second %g: zero, or the last block's values, unless refilled)",
          numbers, seen[0], seen[33]);

    int *count = device_array<int>(3);
    const size_t pooled = emu::free_stacks.size();
    emu_kernel_call(k_stacks, dim3(3), dim3(1024))(count);
    const std::vector<int> got = to_host_and_free(count, 3);  // (the launch runs at this wait)
    const size_t after = emu::free_stacks.size();
    CHECK(got[0] == 1024 && got[1] == 1024 && got[2] == 1024 && after == (pooled > 1024 ? pooled : 1024),
          "three blocks of 1024 threads at barriers: sums %d %d %d, stacks in the pool %zu before, %zu after "
          "(finished threads' stacks reused)", got[0], got[1], got[2], pooled, after);

    // The same binary in reverse thread order: its checks' lines are this run's.
    const std::string cmd = std::string("CUDA_EMU_ORDER=down '") + argv[0] + "' --down";
    fflush(stdout);
    const int rc = system(cmd.c_str());
    CHECK(rc == 0, "the checks in reverse thread order (CUDA_EMU_ORDER=down) ran and passed (status %d)", rc);
    return check_summary();
}

// tests/emu/cuda_emu_runtime.h — the CUDA runtime calls of src/ops/*.cu on the host: errors,
// devices, memory, copies, streams and events, the launch checks of sm_90.
// A part of tests/emu/cuda_emu.h, which includes its parts in order (each reads
// what the ones before it declare); include cuda_emu.h, not this.
#ifndef FEMTOTRON_CUDA_EMU_RUNTIME_H
#define FEMTOTRON_CUDA_EMU_RUNTIME_H

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

#endif

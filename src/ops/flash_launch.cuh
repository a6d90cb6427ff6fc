// ops/flash_launch.cuh — how both tensor-core attention families
// (ops/flash_attention.cuh, ops/flash_mma.cuh) declare their dynamic shared memory
// and launch their kernels, under nvcc and under the emulation (tests/emu/cuda_emu.h,
// which runs a launch's blocks on CPU threads). Both run blocks of FLASH_THREADS.
#ifndef FEMTOTRON_FLASH_LAUNCH_CUH
#define FEMTOTRON_FLASH_LAUNCH_CUH

#define FLASH_THREADS 128  // 4 warps a block, in both families

#ifndef CUDA_EMU
#define FLASH_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#define FLASH_KERNEL_CALL(kernel, grid, smem) kernel<<<grid, FLASH_THREADS, smem, cuda_stream()>>>
#else
#define FLASH_SMEM(name) unsigned char *name = emu_dynamic_smem()
#define FLASH_KERNEL_CALL(kernel, grid, smem) emu_kernel_call(kernel, grid, dim3(FLASH_THREADS), smem)
#endif
// Above 48 KiB of dynamic shared memory a kernel must be allowed it first, once
// (each kernel has one fixed size: the static is per instantiation); a failure of
// either call is left for cudaGetLastError (the caller's check).
#define FLASH_LAUNCH(kernel, grid, smem, ...)                                                               \
    do {                                                                                                    \
        static bool allowed_ = false;                                                                       \
        if (!allowed_)                                                                                      \
            allowed_ = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem)) == cudaSuccess; \
        if (allowed_) FLASH_KERNEL_CALL(kernel, grid, smem)(__VA_ARGS__);                                   \
    } while (0)

#endif

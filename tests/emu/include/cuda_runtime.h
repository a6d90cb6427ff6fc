// tests/emu/include/cuda_runtime.h — the host emulation of CUDA in its place (tests/emu/cuda_emu.h).
#include "../cuda_emu.h"

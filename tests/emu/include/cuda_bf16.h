// tests/emu/include/cuda_bf16.h — the host emulation of CUDA in its place (tests/emu/cuda_emu.h).
#include "../cuda_emu.h"

// tests/emu/include/mma.h — the host emulation of CUDA in its place (tests/emu/cuda_emu.h).
#include "../cuda_emu.h"

// tests/emu/include/cublasLt.h — the host emulation of cuBLASLt in its place (tests/emu/cublaslt_emu.h).
#include "../cublaslt_emu.h"

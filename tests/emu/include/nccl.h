// tests/emu/include/nccl.h — the host emulation of NCCL in its place (tests/emu/nccl_emu.h).
#include "../nccl_emu.h"

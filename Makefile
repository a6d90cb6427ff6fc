# femtotron — `make` builds ./femtotron; `make test` builds and runs every test;
# `make cuda` builds ./femtotron-cuda, the CUDA backend (in progress, issue 14).
CC       ?= mpicc
CC       := mpicc
OPT      ?= -O3 -march=native
# -fno-math-errno: nothing here reads errno after a math call, and without it GCC
# keeps sqrtf behind an errno check, so loops that take a square root (AdamW's
# update) stay scalar: AdamW over 33.5M parameters took 156 ms instead of 21.
CFLAGS   := -std=c11 -Wall -Wextra -Werror $(OPT) -fno-math-errno -fopenmp -Isrc -I/usr/include/cjson $(EXTRA_CFLAGS)
# OpenBLAS, OpenMP flavour: it shares our OpenMP thread pool, and a BLAS call made
# inside an OpenMP parallel region runs single-threaded instead of oversubscribing.
# `make BLAS=blis build-blis/femtotron` links BLIS instead (Debian's
# libblis-openmp-dev, through its CBLAS layer) into build-blis/, leaving ./femtotron
# alone; bench/blas.sh compares the two.
# `make BLAS=mkl build-mkl/femtotron` links Intel's oneMKL (its GNU-OpenMP threading
# layer, so it too shares our thread pool) from MKLROOT: a oneAPI install, or
# PyPI's `mkl` and `mkl-devel` wheels in a virtual environment, which
# scripts/install_mkl.sh puts in build/mklenv (the default). bench/blas.sh compares all three.
# `make BLAS=scipy-openblas build-scipy-openblas/femtotron` links a recent OpenBLAS
# (Debian 12's is 0.3.21): PyPI's scipy-openblas32, which scripts/install_scipy_openblas.sh
# unpacks into build/scipy-openblas. Its symbols are prefixed (ops/blas_api.h maps
# them) and it runs its own threads, not OpenMP's (ops/blas_cores.c keeps the two
# pools from spinning against each other).
BLAS     ?= openblas
MKLROOT  ?= $(CURDIR)/build/mklenv
ifeq ($(BLAS),blis)
BLASDIR  := /usr/lib/x86_64-linux-gnu/blis-openmp
BLASLIB  := -lblis
CFLAGS   += -DFEMTOTRON_BLIS
BUILD    ?= build-blis
else ifeq ($(BLAS),mkl)
BLASDIR  := $(MKLROOT)/lib
ifeq ($(wildcard $(BLASDIR)/libmkl_core.so*),)
$(error BLAS=mkl: no oneMKL in MKLROOT=$(MKLROOT) (no $(BLASDIR)/libmkl_core.so*): run bash scripts/install_mkl.sh, or give MKLROOT)
endif
# the wheels ship only versioned names (libmkl_core.so.3): link the files themselves
mkl_lib   = $(firstword $(wildcard $(BLASDIR)/libmkl_$(1).so*))
BLASLIB  := -Wl,--no-as-needed $(call mkl_lib,intel_lp64) $(call mkl_lib,gnu_thread) $(call mkl_lib,core) \
            -Wl,--as-needed -ldl -lpthread
CFLAGS   += -DFEMTOTRON_MKL -I$(MKLROOT)/include
BUILD    ?= build-mkl
else ifeq ($(BLAS),scipy-openblas)
SCIPY_OPENBLAS ?= $(CURDIR)/build/scipy-openblas/scipy_openblas32
BLASDIR  := $(SCIPY_OPENBLAS)/lib
ifeq ($(wildcard $(BLASDIR)/libscipy_openblas.so),)
$(error BLAS=scipy-openblas: no $(BLASDIR)/libscipy_openblas.so: run bash scripts/install_scipy_openblas.sh, or give SCIPY_OPENBLAS)
endif
BLASLIB  := -lscipy_openblas
CFLAGS   += -DFEMTOTRON_SCIPY_OPENBLAS -I$(SCIPY_OPENBLAS)/include
BUILD    ?= build-scipy-openblas
else
BLASDIR  := /usr/lib/x86_64-linux-gnu/openblas-openmp
BLASLIB  := -lopenblas
endif
# zlib and libzstd: `prepare` reads gzip and zstd inputs (src/data/decompress.c).
LDLIBS   := -L$(BLASDIR) -Wl,-rpath,$(BLASDIR) $(BLASLIB) -lcjson -lz -lzstd -lm -fopenmp $(EXTRA_LDFLAGS)

SRC      := $(shell find src -name '*.c' ! -name main.c | sort)
# BUILD: where objects go (tests/shell/test_sanitizers.sh builds into build-asan).
BUILD    ?= build
OBJ      := $(SRC:src/%.c=$(BUILD)/%.o)
# Unit tests (tests/unit) and the drivers the shell tests launch (tests/drivers)
# all build into $(BUILD)/tests; tests/README.md describes the kinds.
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%) $(BUILD)/tests/dump_grads \
            $(BUILD)/tests/plan_memory_main $(BUILD)/tests/test_flash_emu $(BUILD)/tests/test_streams_emu \
            $(BUILD)/tests/test_threads_emu

.PHONY: all test clean tests-bin fuzzers fuzz-bins fuzz cuda nvcc-flags blas-libs emu emu-asan
all: femtotron

femtotron: $(BUILD)/main.o $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The program built into $(BUILD) (tests/shell/test_sanitizers.sh: build-asan/femtotron).
$(BUILD)/femtotron: $(BUILD)/main.o $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: src/%.c $(shell find src -name '*.h') Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<
# The AMX attention's element-wise passes with 512-bit vectors (ops/attention_amx_cpu.c:
# its own file so that the fp32 kernels keep their width, and their sums' order).
$(BUILD)/ops/attention_amx_cpu.o: CFLAGS += -mprefer-vector-width=512

$(BUILD)/tests/%: tests/unit/%.c $(OBJ) $(wildcard tests/unit/*.h)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(OBJ) $(LDLIBS)

# The CPU's bf16 products against naive loops: the oneMKL build only
# (tests/shell/test_blas_mkl.sh: make BLAS=mkl build-mkl/tests/test_bf16_products).
$(BUILD)/tests/test_bf16_products: tests/mkl/test_bf16_products.c $(OBJ) tests/unit/check.h
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(OBJ) $(LDLIBS)

# The CUDA backend's tensor-core attention kernels run on CPU threads (tests/emu):
# C++, built by the host compiler, no CUDA toolkit needed.
CXX ?= g++
$(BUILD)/tests/test_flash_emu: tests/emu/test_flash_emu.cpp $(wildcard tests/emu/cuda_emu*.h) src/ops/flash_attention.cuh \
                           src/ops/flash_mma*.cuh src/ops/flash_launch.cuh src/ops/mma_bf16.cuh
	@mkdir -p $(BUILD)/tests
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -DFLASH_MMA_CHUNK=2 -Isrc -Itests/emu -o $@ $<

# The emulated streams' orders (CUDA_EMU_STREAMS) show a missing event.
$(BUILD)/tests/test_streams_emu: tests/emu/test_streams_emu.cpp $(wildcard tests/emu/cuda_emu*.h)
	@mkdir -p $(BUILD)/tests
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Isrc -Itests/emu -o $@ $<

# The emulated block scheduler: barrier order, releases, deadlocks, stacks, shared
# memory; its kernels' __shared__ arrays rewritten as the .cu files' are (the C++ it
# compiles goes to $(BUILD)/emu-src: every file of $(BUILD)/tests is a test to run).
$(BUILD)/tests/test_threads_emu: tests/emu/test_threads_emu.cpp $(wildcard tests/emu/cuda_emu*.h) tests/emu/cu2cpp.py
	@mkdir -p $(BUILD)/tests $(BUILD)/emu-src
	python3 tests/emu/cu2cpp.py $< > $(BUILD)/emu-src/test_threads_emu.cpp
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -Isrc -Itests/emu -o $@ $(BUILD)/emu-src/test_threads_emu.cpp

$(BUILD)/tests/%: tests/drivers/%.c $(OBJ)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(OBJ) $(LDLIBS)

tests-bin: $(TEST_BIN)

test: femtotron $(TEST_BIN)
	@bash tests/run_all.sh


# The CUDA backend (docs/DESIGN.md, invariant 6: the backend boundary): one binary
# per backend, as llm.c does. ./femtotron-cuda links the CPU build's C objects
# (the same sources compiled the same way) except the CPU kernels (ops/*_cpu.c,
# ops/cpu.c), and the CUDA kernels (src/ops/*.cu) compiled by nvcc into
# build-cuda/ for Hopper (sm_90a) and Ampere (sm_80), host warnings as errors
# (--threads 2: nvcc compiles the two architectures at once).
# $(CUDA_BUILD)/tests/gpu_ops is the GPU test driver, plan_memory_main the memory
# predictor of the CUDA build (tests/gpu/run.sh).
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_BUILD ?= build-cuda
NVCCFLAGS  := -std=c++17 -O3 --threads 2 -Isrc -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
              -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lnccl -lcudart -lstdc++ -ldl
# cuDNN's fused attention (training.attention = cudnn) through the header-only
# cudnn-frontend (third_party/cudnn-frontend, v1.32.0 from PyPI's
# nvidia-cudnn-frontend wheel, MIT): one C++ translation unit, host code only, so
# the host compiler builds it (-O1: it only builds and launches cuDNN's plans;
# about 35 s), cuDNN itself dlopened at run time (no link-time dependency). The
# frontend's own warnings are its own (-isystem); ours fail the build.
CUDNN_FE_FLAGS := -std=c++17 -O1 -Wall -Wextra -Werror -Isrc -isystem third_party/cudnn-frontend/include \
                  -isystem $(CUDA_HOME)/include -DCUDNN_FRONTEND_SKIP_JSON_LIB -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
# The CPU build's own pieces, replaced in the CUDA build: the CPU kernels, and the
# absent device collectives library (dist/device_comm_none.c; NCCL's is a .cu file).
CPU_KERNELS := $(BUILD)/ops/cpu.o $(BUILD)/ops/matmul_cpu.o $(BUILD)/ops/loss_optim_cpu.o $(BUILD)/ops/attention_cpu.o $(BUILD)/ops/attention_amx_cpu.o $(BUILD)/ops/buffers_cpu.o $(BUILD)/ops/matmul_bf16_cpu.o \
               $(BUILD)/ops/moe_dispatch_cpu.o $(BUILD)/dist/device_comm_none.o
CUDA_OBJ   := $(filter-out $(CPU_KERNELS),$(OBJ)) \
              $(patsubst src/%.cu,$(CUDA_BUILD)/%.o,$(wildcard src/ops/*.cu src/dist/*.cu)) \
              $(CUDA_BUILD)/ops/cudnn_attention.o
cuda: femtotron-cuda $(CUDA_BUILD)/tests/gpu_ops $(CUDA_BUILD)/tests/plan_memory_main $(CUDA_BUILD)/tests/dump_grads \
      $(CUDA_BUILD)/tests/nccl_ops $(CUDA_BUILD)/tests/nccl_links $(CUDA_BUILD)/tests/attention_gpu \
      $(CUDA_BUILD)/tests/cudnn_graphs
# The flags nvcc gets (tests/shell/test_cuda_build.sh checks a warning fails them).
nvcc-flags:
	@echo $(NVCCFLAGS)

# How this BLAS build links its BLAS (bench/gemm_in_situ.sh links its helpers alike).
blas-libs:
	@echo -L$(BLASDIR) -Wl,-rpath,$(BLASDIR) $(BLASLIB)

femtotron-cuda: $(BUILD)/main.o $(CUDA_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)

$(CUDA_BUILD)/%.o: src/%.cu $(wildcard src/ops/*.cuh) $(shell find src -name '*.h') Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(CUDA_BUILD)/ops/cudnn_attention.o: src/ops/cudnn_attention.cpp src/ops/cudnn_attention.h src/util.h Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CUDNN_FE_FLAGS) -c -o $@ $<

$(CUDA_BUILD)/tests/gpu_ops: tests/gpu/gpu_ops.c $(wildcard tests/gpu/*.h) \
                             $(CUDA_OBJ)
	@mkdir -p $(CUDA_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)

# NCCL's collectives on one GPU, and its links between two (tests/gpu/nccl.sh); cuDNN's
# attention graphs checked without a GPU (tests/shell/test_cuda_build.sh).
$(CUDA_BUILD)/tests/nccl_ops $(CUDA_BUILD)/tests/nccl_links $(CUDA_BUILD)/tests/cudnn_graphs: $(CUDA_BUILD)/tests/%: tests/gpu/%.c $(CUDA_OBJ)
	@mkdir -p $(CUDA_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)

# The attention ops timed alone (bench/attention_gpu.sh).
$(CUDA_BUILD)/tests/attention_gpu: bench/tools/attention_gpu.c $(CUDA_OBJ)
	@mkdir -p $(CUDA_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)

# The memory predictor with the CUDA backend's kernel scratch sizes (tests/gpu/train_parity.sh),
# and step 0's gradients on the GPU for the PyTorch reference (tests/gpu/reference.sh).
$(CUDA_BUILD)/tests/plan_memory_main $(CUDA_BUILD)/tests/dump_grads: $(CUDA_BUILD)/tests/%: tests/drivers/%.c $(CUDA_OBJ)
	@mkdir -p $(CUDA_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_OBJ) $(LDLIBS) $(CUDA_LDLIBS)

# The CUDA backend on the CPU (tests/emu): src/ops/*.cu rewritten by
# tests/emu/cu2cpp.py and compiled by the host compiler against tests/emu/include
# (CUDA, cuBLASLt, bf16 and WMMA emulated on the host; NCCL over MPI,
# tests/emu/nccl_emu.h). `make emu` builds $(EMU_BUILD)/femtotron-cuda and the
# GPU test drivers from it, so tests/shell/test_cuda_emu.sh runs the GPU tests in
# CI. The kernels run as written, block by block: slow, for small shapes.
EMU_BUILD ?= build-emu
EMU_CXXFLAGS := -std=c++17 -O2 -Wall -Wextra -Werror -Isrc -Itests/emu/include \
                $(shell mpicc --showme:compile 2>/dev/null) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $(EMU_SAN)
EMU_OBJ   := $(filter-out $(CPU_KERNELS),$(OBJ)) \
             $(patsubst src/%.cu,$(EMU_BUILD)/%.o,$(wildcard src/ops/*.cu src/dist/*.cu)) \
             $(EMU_BUILD)/cudnn_attention_emu.o
EMU_LIBS  := -lstdc++ $(EMU_SAN)
# `make emu-asan`: the GPU test driver gpu_ops with the kernels and the emulation
# built with AddressSanitizer into build-emu-asan, so a kernel's read or write past
# a cudaMalloc'd buffer, the dynamic shared memory or a __shared__ array is reported
# (the emulation allocates each exactly; tests/shell/test_cuda_emu.sh runs it).
# -O1: 22 s to build against 34 at -O2, gpu_ops as fast. Every emulated binary that
# way: make emu EMU_BUILD=build-emu-asan EMU_SAN="$(EMU_ASAN)". The C objects are
# the CPU build's, uninstrumented: built here first, so that `make -j emu emu-asan`
# never compiles one twice at once.
EMU_ASAN := -fsanitize=address -fno-omit-frame-pointer -O1
emu-asan: $(BUILD)/main.o $(OBJ)
	$(MAKE) build-emu-asan/tests/gpu_ops EMU_BUILD=build-emu-asan EMU_SAN="$(EMU_ASAN)"
emu: $(EMU_BUILD)/femtotron-cuda $(EMU_BUILD)/tests/gpu_ops $(EMU_BUILD)/tests/plan_memory_main \
     $(EMU_BUILD)/tests/dump_grads $(EMU_BUILD)/tests/nccl_ops $(EMU_BUILD)/tests/nccl_links \
     $(EMU_BUILD)/tests/attention_gpu
$(EMU_BUILD)/%.o: src/%.cu $(wildcard src/ops/*.cuh) $(wildcard tests/emu/*.h tests/emu/include/*.h) \
                  tests/emu/cu2cpp.py $(shell find src -name '*.h') Makefile
	@mkdir -p $(dir $@)
	python3 tests/emu/cu2cpp.py $< > $(@:.o=.cpp)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $(@:.o=.cpp)
# cuDNN's fused attention stands in by its definition (tests/emu/cudnn_attention_emu.cpp).
$(EMU_BUILD)/cudnn_attention_emu.o: tests/emu/cudnn_attention_emu.cpp src/ops/cudnn_attention.h Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<
$(EMU_BUILD)/femtotron-cuda: $(BUILD)/main.o $(EMU_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(EMU_LIBS)
$(EMU_BUILD)/tests/gpu_ops: tests/gpu/gpu_ops.c $(wildcard tests/gpu/*.h) \
                            $(EMU_OBJ)
	@mkdir -p $(EMU_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(EMU_OBJ) $(LDLIBS) $(EMU_LIBS)
$(EMU_BUILD)/tests/plan_memory_main $(EMU_BUILD)/tests/dump_grads: $(EMU_BUILD)/tests/%: tests/drivers/%.c $(EMU_OBJ)
	@mkdir -p $(EMU_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(EMU_OBJ) $(LDLIBS) $(EMU_LIBS)
$(EMU_BUILD)/tests/nccl_ops $(EMU_BUILD)/tests/nccl_links: $(EMU_BUILD)/tests/%: tests/gpu/%.c $(EMU_OBJ)
	@mkdir -p $(EMU_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(EMU_OBJ) $(LDLIBS) $(EMU_LIBS)
$(EMU_BUILD)/tests/attention_gpu: bench/tools/attention_gpu.c $(EMU_OBJ)
	@mkdir -p $(EMU_BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(EMU_OBJ) $(LDLIBS) $(EMU_LIBS)

# The same driver against the CPU kernels: the CPU compared with itself, a check of
# the driver on machines without a GPU (tests/shell/test_cuda_build.sh).
$(BUILD)/tests/gpu_ops_cpu: tests/gpu/gpu_ops.c $(wildcard tests/gpu/*.h) \
                           tests/gpu/cudnn_none.c $(OBJ)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< tests/gpu/cudnn_none.c $(OBJ) $(LDLIBS)

# Fuzzing (tests/fuzz/README.md): clang's libFuzzer with ASan and UBSan. `make
# fuzzers` builds the whole tree with clang (through mpicc: OMPI_CC) into build-fuzz
# and links one binary per harness; `make fuzz FUZZ_SECONDS=60` runs each that long
# on a seed corpus the project generates (tests/fuzz/make_corpus.sh).
FUZZ_SECONDS ?= 60
FUZZ_OPT := -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
# The harness frees what a refused parse allocated (tests/fuzz/fuzz.h): it sees every
# allocation of femtotron's code through these wrappers.
FUZZ_WRAP := $(foreach f,malloc calloc realloc posix_memalign strdup free,-Wl,--wrap=$(f))
FUZZERS = $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
fuzzers:
	OMPI_CC=clang $(MAKE) BUILD=build-fuzz OPT="$(FUZZ_OPT)" EXTRA_CFLAGS=-Wno-pass-failed fuzz-bins
fuzz-bins: $(FUZZERS)
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(OBJ)
	@mkdir -p $(BUILD)/fuzz
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Itests/fuzz -o $@ $< $(OBJ) $(LDLIBS) $(FUZZ_WRAP)
fuzz: femtotron fuzzers
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-fuzz build-cuda build-emu build-emu-asan build-blis build-mkl femtotron femtotron-cuda

# femtotron — `make` builds ./femtotron; `make test` builds and runs every test.
CC       ?= mpicc
CC       := mpicc
OPT      ?= -O3 -march=native
CFLAGS   := -std=c11 -Wall -Wextra -Werror $(OPT) -fopenmp -Isrc -I/usr/include/cjson $(EXTRA_CFLAGS)
# OpenBLAS, OpenMP flavour: it shares our OpenMP thread pool, and a BLAS call made
# inside an OpenMP parallel region runs single-threaded instead of oversubscribing.
BLASDIR  := /usr/lib/x86_64-linux-gnu/openblas-openmp
LDLIBS   := -L$(BLASDIR) -Wl,-rpath,$(BLASDIR) -lopenblas -lcjson -lm -fopenmp $(EXTRA_LDFLAGS)

SRC      := $(shell find src -name '*.c' ! -name main.c | sort)
# BUILD: where objects go (tests/shell/test_sanitizers.sh builds into build-asan).
BUILD    ?= build
OBJ      := $(SRC:src/%.c=$(BUILD)/%.o)
# Unit tests (tests/unit) and the drivers the shell tests launch (tests/drivers)
# all build into $(BUILD)/tests; tests/README.md describes the kinds.
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%) $(BUILD)/tests/dump_grads \
            $(BUILD)/tests/plan_memory_main

.PHONY: all test clean tests-bin
all: femtotron

femtotron: $(BUILD)/main.o $(OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: src/%.c $(shell find src -name '*.h')
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(OBJ) tests/unit/check.h tests/unit/run_child.h
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(OBJ) $(LDLIBS)

$(BUILD)/tests/%: tests/drivers/%.c $(OBJ)
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -o $@ $< $(OBJ) $(LDLIBS)

tests-bin: $(TEST_BIN)

test: femtotron $(TEST_BIN)
	@bash tests/run_all.sh


clean:
	rm -rf build build-asan femtotron

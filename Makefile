# podsim: build, run, test, bench, plots, install.
#
# `make run` and `make test` are all a new user types: both depend on
# `deps`, which installs the Debian packages pkg-config cannot find (as
# root), or prints the apt-get command to run.

PREFIX      ?= /usr/local
CC          ?= cc
PKGS        := glib-2.0 gio-2.0 json-c zlib
DEB_PKGS    := libglib2.0-dev libjson-c-dev libopenblas-dev zlib1g-dev pkg-config \
               gnuplot-nox dataset-fashion-mnist
VERSION     := 0.1.0
BUILD       ?= build
# where the CLI and test binaries go (the sanitizer build puts its own apart)
PODSIM_BIN  ?= podsim
TESTBIN     ?= tests/bin

# MPI=1 builds podsim with OpenMPI (mpicc, -DPS_WITH_MPI) so that `mpirun
# -np K podsim sweep ...` spreads a sweep's points over K processes; it
# installs openmpi-bin and libopenmpi-dev (as root) when they are missing.
# A plain build needs no MPI.  $(BUILD)/mpi.txt remembers which kind of
# build $(BUILD) holds, so switching rebuilds sweep.o and relinks.
MPI         ?= 0
MPI_ON      := $(if $(filter 1,$(MPI)),1,0)
MPI_DEB_PKGS := openmpi-bin libopenmpi-dev
MPI_STAMP   := $(BUILD)/mpi.txt
ifeq ($(MPI_ON),1)
CC          := mpicc
MPI_CFLAGS  := -DPS_WITH_MPI
MPI_DEPS    := mpi-deps
endif
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(MPI_STAMP) 2>/dev/null)" = "MPI=$(MPI_ON)" ] || \
  echo "MPI=$(MPI_ON)" > $(MPI_STAMP); })

PKG_CFLAGS   = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS     = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
BLAS_CFLAGS  = $(shell pkg-config --cflags openblas 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/openblas-pthread)
BLAS_LIBS    = $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter
OPT      ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -MMD -MP \
            -DPS_VERSION='"$(VERSION)"' -DPS_DATA_DIR='"$(PREFIX)/share/podsim"' \
            -Isim $(PKG_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS)
LDLIBS   += $(PKG_LIBS) $(BLAS_LIBS) -lm

LIB_SRC   := $(filter-out sim/cli/main.c,$(wildcard sim/*.c sim/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(TESTBIN)/%)
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps bench-deps mpi-deps run test golden regress bench plots install uninstall clean \
        check-asan check-valgrind fuzz

all: $(PODSIM_BIN) $(BUILD)/libpodsim.a

deps:
	@missing=""; \
	for p in glib-2.0 gio-2.0 json-c zlib; do \
	  pkg-config --exists $$p 2>/dev/null || missing="yes"; done; \
	[ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || \
	  pkg-config --exists openblas 2>/dev/null || missing="yes"; \
	command -v gnuplot >/dev/null 2>&1 || missing="yes"; \
	command -v prove >/dev/null 2>&1 || missing="yes"; \
	[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || missing="yes"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing $(DEB_PKGS) perl"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends $(DEB_PKGS) perl make gcc >/dev/null; \
	  else \
	    echo "deps: missing packages; run as root:"; \
	    echo "  apt-get install -y $(DEB_PKGS) perl"; exit 1; \
	  fi; \
	fi

mpi-deps:
	@if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "mpi-deps: installing $(MPI_DEB_PKGS)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends $(MPI_DEB_PKGS) >/dev/null; \
	  else \
	    echo "mpi-deps: MPI=1 needs OpenMPI; run as root:"; \
	    echo "  apt-get install -y $(MPI_DEB_PKGS)"; exit 1; \
	  fi; \
	fi

# Order-only on deps: with -j, nothing compiles before the headers are there.
$(BUILD)/%.o: %.c | deps $(MPI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/sim/cli/sweep.o: $(MPI_STAMP)

$(BUILD)/libpodsim.a: $(LIB_OBJ)
	@rm -f $@
	@echo "  AR    $@"
	@ar rcs $@ $^

$(PODSIM_BIN): $(BUILD)/sim/cli/main.o $(BUILD)/libpodsim.a
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(TESTBIN)/%: $(BUILD)/tests/%.o $(BUILD)/libpodsim.a
	@mkdir -p $(TESTBIN)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libpodsim.a
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The SimGrid side-by-side bench also links SimGrid (libsimgrid-dev, which
# only `make bench` needs and installs; `make test` never does).
$(BUILD)/bench/bench_simgrid: $(BUILD)/bench/bench_simgrid.o $(BUILD)/libpodsim.a | bench-deps
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs simgrid 2>/dev/null || echo -lsimgrid)

$(BUILD)/bench/bench_simgrid.o: | bench-deps

bench-deps:
	@if ! pkg-config --exists simgrid 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "bench-deps: installing libsimgrid-dev"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq --no-install-recommends libsimgrid-dev >/dev/null; \
	  else \
	    echo "bench-deps: SimGrid is missing; run as root:"; \
	    echo "  apt-get install -y libsimgrid-dev"; exit 1; \
	  fi; \
	fi

# keep test and bench objects between builds
.SECONDARY:

run: deps all
	./podsim run experiments/default.json

# Each GTest binary speaks TAP (--tap); prove runs them and summarises.
# Test binaries call the library directly, so they pin OpenBLAS's kernel the
# way the podsim binary does itself (see pin_blas_kernel in sim/cli/main.c):
# Haswell's on any x86-64 CPU with AVX2 and FMA, for the same numbers on
# every machine.
BLAS_PIN := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && echo OPENBLAS_CORETYPE=Haswell)

test: deps all $(TEST_BIN)
	$(BLAS_PIN) PODSIM=$(abspath $(PODSIM_BIN)) PODSIM_DATA_DIR=$(CURDIR) \
	  prove -f $(TEST_BIN) :: --tap

# Rewrites tests/golden/step-times.txt from the current model: do it on
# purpose, and say in the commit why the predictions moved.
golden: all
	tests/golden/regen.sh

# The golden cases against the current model: old, new and the difference
# of each that moved (`podsim regress --help`).
regress: all
	$(abspath $(PODSIM_BIN)) regress

bench: deps bench-deps all $(BENCH_BIN)
	@for b in $(BENCH_BIN); do echo "== $$b"; $$b || exit 1; done

plots: deps all
	$(MAKE) -C plots

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/include/podsim $(DESTDIR)$(PREFIX)/share/podsim
	install -m 755 podsim $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/libpodsim.a $(DESTDIR)$(PREFIX)/lib/
	cd sim && find . -name '*.h' ! -name '*-private.h' ! -path './cli/*' -exec install -D -m 644 {} \
	  $(DESTDIR)$(PREFIX)/include/podsim/{} \;
	cp -r topologies models experiments $(DESTDIR)$(PREFIX)/share/podsim/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' podsim.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/podsim.pc

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/bin/podsim $(DESTDIR)$(PREFIX)/lib/libpodsim.a \
	  $(DESTDIR)$(PREFIX)/include/podsim $(DESTDIR)$(PREFIX)/share/podsim \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/podsim.pc

# Address and undefined-behaviour sanitizers over the whole test suite.
check-asan:
	$(MAKE) BUILD=build-asan PODSIM_BIN=build-asan/podsim TESTBIN=build-asan/tests/bin \
	  OPT="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  LDFLAGS="-fsanitize=address,undefined" test

# Under valgrind, minus the one-epoch training run (an hour there; the
# sanitizer build covers it).
check-valgrind: all $(TEST_BIN)
	@for t in $(TEST_BIN); do \
	  $(BLAS_PIN) PODSIM=$(abspath $(PODSIM_BIN)) PODSIM_DATA_DIR=$(CURDIR) \
	  valgrind -q --error-exitcode=3 --leak-check=full --errors-for-leak-kinds=definite $$t -q \
	    -s /run/default/cnn-data-parallel-epoch || exit 1; done

clean:
	rm -rf build build-asan tests/bin podsim traces/*.json

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# libFuzzer harnesses of the experiment, topology and model loaders and the
# --set parser (tests/fuzz/README.md): `make fuzz FUZZ_SECONDS=600` runs each
# for that long (clang needed; not part of `make test`, whose
# test_fuzz_regressions replays every input the fuzzers found).
FUZZ_SECONDS ?= 60
fuzz:
	$(MAKE) -C tests/fuzz
	$(MAKE) -C tests/fuzz run FUZZ_SECONDS=$(FUZZ_SECONDS)

# podsim's traces (the default run's, a replicated --trace-links one and a
# pipeline's) in catapult and speedscope, through the trace viewer harness
# of ../shared/tools/trace-viewer (Chromium, Node 20, `npm ci` there): every
# trace must load with no error and no warning (tests/check-trace.sh).
TRACE_VIEWER ?= ../shared/tools/trace-viewer
check-trace: all
	tests/check-trace.sh $(TRACE_VIEWER)

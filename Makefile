# podsim: build, run, test, bench, plots, install.
#
# `make run` and `make test` are all a new user types: both depend on
# `deps`, which installs the Debian packages pkg-config cannot find (as
# root), or prints the apt-get command to run.

PREFIX      ?= /usr/local
CC          ?= cc
PKGS        := glib-2.0 gio-2.0 json-c zlib
DEB_PKGS    := libglib2.0-dev libjson-c-dev libopenblas-dev zlib1g-dev pkg-config \
               gnuplot-nox dataset-fashion-mnist fortunes \
               python3 python3-pytest python3-pandas python3-matplotlib
VERSION     := 0.1.0
# the shared library's ABI: libpodsim.so.$(SOVERSION) -> libpodsim.so.$(VERSION)
SOVERSION   := 0
BUILD       ?= build
# where the CLI and test binaries go (the sanitizer build puts its own apart)
PODSIM_BIN  ?= podsim
TESTBIN     ?= tests/bin

# MPI=1 builds podsim with OpenMPI (mpicc, -DPS_WITH_MPI) so that `mpirun
# -np K podsim sweep ...` spreads a sweep's points over K processes; it
# installs openmpi-bin and libopenmpi-dev (as root) when they are missing.
# A plain build needs no MPI.  $(BUILD)/mpi.txt remembers which kind of
# build $(BUILD) holds, so switching rebuilds the sweep's objects (sweep.o,
# and sweep-mpi.o, the MPI driver) and relinks.
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
# Every object is position-independent: the library's go into both
# libpodsim.a and libpodsim.so.  Nothing depends on PREFIX: the data
# directory is found at run time (ps_data_dirs in sim/io/config.c).
CFLAGS   += -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) -fPIC -MMD -MP \
            -DPS_VERSION='"$(VERSION)"' \
            -Isim $(PKG_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS)
LDLIBS   += $(PKG_LIBS) $(BLAS_LIBS) -lm
# $(BUILD)/flags.txt holds our compile flags: objects built with others
# (before -fPIC, another OPT) are rebuilt.  Not the packages' (they change
# when `deps` installs them), nor MPI's, which only the sweep's objects read
# ($(MPI_STAMP) above; mpicc compiles as cc does).
FLAGS_STAMP := $(BUILD)/flags.txt
$(file >$(FLAGS_STAMP).new,$(filter-out $(PKG_CFLAGS) $(BLAS_CFLAGS) $(MPI_CFLAGS),$(CFLAGS)))
$(shell cmp -s $(FLAGS_STAMP).new $(FLAGS_STAMP) && rm -f $(FLAGS_STAMP).new || \
  mv -f $(FLAGS_STAMP).new $(FLAGS_STAMP))

# libpodsim: everything but the command line.  The subcommands (sim/cli/)
# go into build/libpodsim-cli.a, for podsim and the tests, never installed.
LIB_SRC   := $(filter-out sim/cli/%,$(wildcard sim/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC   := $(filter-out sim/cli/main.c,$(wildcard sim/cli/*.c))
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB_A     := $(BUILD)/libpodsim.a
CLI_A     := $(BUILD)/libpodsim-cli.a
LIB_SO    := $(BUILD)/libpodsim.so.$(VERSION)
LIB_LINKS := $(BUILD)/libpodsim.so.$(SOVERSION) $(BUILD)/libpodsim.so
# The embedding API: include/podsim/podsim.h and the headers of sim/ it
# reaches (run/run.h, run/experiment.h and what they include), installed under include/podsim/
# with their paths (run/run.h, io/config.h, ...); $(BUILD)/umbrella.txt lists them.
UMBRELLA  := include/podsim/podsim.h
HDR_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -Isim $(PKG_CFLAGS) $(BLAS_CFLAGS)
# the longest suites first, so that prove -j keeps both cores busy to the end
# (under the sanitizers test_shard_numerics alone took the last minutes)
TEST_FIRST := tests/test_shard_numerics.c tests/test_cli.c
TEST_SRC  := $(TEST_FIRST) $(filter-out $(TEST_FIRST),$(wildcard tests/test_*.c))
TEST_BIN  := $(TEST_SRC:tests/%.c=$(TESTBIN)/%)
# what the tests share (tests/support/: the command line's, the numerics'),
# linked into each
TEST_SUPPORT := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/support/*.c))
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps bench-deps mpi-deps run test test-slow golden regress bench plots docs-plots plots-slow docs-plots-slow check-plots install uninstall clean \
        check-asan check-valgrind fuzz check-trace

all: $(PODSIM_BIN) $(LIB_A) $(LIB_SO) $(LIB_LINKS) $(BUILD)/umbrella.txt

deps:
	@missing=""; \
	for p in glib-2.0 gio-2.0 json-c zlib; do \
	  pkg-config --exists $$p 2>/dev/null || missing="yes"; done; \
	[ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || \
	  pkg-config --exists openblas 2>/dev/null || missing="yes"; \
	command -v gnuplot >/dev/null 2>&1 || missing="yes"; \
	command -v prove >/dev/null 2>&1 || missing="yes"; \
	[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || missing="yes"; \
	[ -e /usr/share/games/fortunes/fortunes ] || missing="yes"; \
	/usr/bin/python3 -c 'import pytest, pandas, matplotlib' 2>/dev/null || missing="yes"; \
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
$(BUILD)/%.o: %.c $(FLAGS_STAMP) | deps $(MPI_DEPS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/sim/cli/sweep.o $(BUILD)/sim/cli/sweep-mpi.o: $(MPI_STAMP)

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	@echo "  AR    $@"
	@ar rcs $@ $^

$(CLI_A): $(CLI_OBJ)
	@rm -f $@
	@echo "  AR    $@"
	@ar rcs $@ $^

# --no-undefined: the library names every library it needs (DT_NEEDED), so
# `cc prog.c -lpodsim` links with nothing else; --as-needed drops the rest
# (mpicc's MPI libraries under MPI=1: only the CLI's sweep uses MPI).
$(LIB_SO): $(LIB_OBJ)
	@echo "  LD    $@"
	@$(CC) -shared -Wl,-soname,libpodsim.so.$(SOVERSION) -Wl,--no-undefined \
	  -Wl,--as-needed $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(LIB_LINKS): $(LIB_SO)
	@ln -sf $(notdir $<) $(BUILD)/libpodsim.so.$(SOVERSION)
	@ln -sf libpodsim.so.$(SOVERSION) $(BUILD)/libpodsim.so

# The public headers: what the umbrella header reaches under sim/ (checked
# to compile in the tree with -Iinclude -Isim, and to hold nothing of the
# CLI and no *-private.h).
$(BUILD)/umbrella.txt: $(UMBRELLA) $(wildcard sim/*/*.h) | deps
	@echo "  HDRS  $@"
	@$(CC) $(HDR_CFLAGS) -fsyntax-only -x c $(UMBRELLA)
	@$(CC) $(HDR_CFLAGS) -MM -MT x $(UMBRELLA) | tr ' \\' '\n\n' | grep '^sim/' | \
	  xargs realpath -m --relative-to=sim | sort -u > $@.tmp
	@if grep -E '^cli/|-private\.h$$' $@.tmp; then \
	  echo "$(UMBRELLA) reaches a CLI or private header (above)"; rm -f $@.tmp; exit 1; fi
	@mv $@.tmp $@

$(PODSIM_BIN): $(BUILD)/sim/cli/main.o $(CLI_A) $(LIB_A)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(TESTBIN)/%: $(BUILD)/tests/%.o $(TEST_SUPPORT) $(CLI_A) $(LIB_A)
	@mkdir -p $(TESTBIN)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(CLI_A) $(LIB_A)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The SimGrid side-by-side bench also links SimGrid (libsimgrid-dev, which
# only `make bench` needs and installs; `make test` never does).
$(BUILD)/bench/bench_simgrid: $(BUILD)/bench/bench_simgrid.o $(CLI_A) $(LIB_A) | bench-deps
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
# No environment pins the numbers: libpodsim's own GEMM gives the same
# bits on every machine (sim/model/gemm.c).

# tests/test_install.sh installs this build into a temporary prefix (the
# make variables reach its `make install` through MAKEFLAGS) and builds a
# program against it with $(LDFLAGS) (the sanitizers' under check-asan).
# tests/test_examples.py runs every command README.md and docs/*.md show
# with its output and compares (docs/design.md, "Examples that stay true", says how to mark one).
# tests/test_python.sh runs the Python package's tests (python/tests, pytest
# under Debian's python3) against this build's libpodsim.so and podsim.
# tests/test_fidelity.py holds docs/fidelity.md to the topology files, the
# loaders' keys, the cost code's constants and the calibration points.
# tests/test_model_flops.py holds podsim's model FLOPs (MaxText's causal
# count) to the MFU and TFLOP/s/device the recipes publish beside their steps.
TEST_SCRIPTS := tests/test_install.sh tests/test_examples.py tests/test_python.sh \
  tests/test_fidelity.py tests/test_model_flops.py

TEST_ENV = PODSIM=$(abspath $(PODSIM_BIN)) PODSIM_DATA_DIR=$(CURDIR) \
  PODSIM_TEST_LDFLAGS="$(LDFLAGS)" PODSIM_TEST_LIB=$(abspath $(LIB_SO))

# The suites are independent processes (each test's files in a scratch
# directory of its own), so prove runs them on every core.
PROVE_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

test: deps all $(TEST_BIN)
	$(TEST_ENV) prove -j$(PROVE_JOBS) -f $(TEST_BIN) $(TEST_SCRIPTS) :: --tap

# The same suites in GTest's thorough mode (-m thorough): also the slow
# tests, which g_test_thorough() leaves out of `make test` (one epoch of
# the default experiment, about 76 s; /cli/blas-pinned; /run/trace/estimate).
# CI runs this one.
test-slow: deps all $(TEST_BIN)
	$(TEST_ENV) prove -j$(PROVE_JOBS) -f $(TEST_BIN) $(TEST_SCRIPTS) :: --tap -m thorough

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

# `make plots` writes build/plots/ only; `make docs-plots` also copies the
# figures over docs/*.png (tracked: the README shows them).
plots: deps all
	$(MAKE) -C plots

docs-plots: deps all
	$(MAKE) -C plots docs

# the studies of an hour or more (the GPT-3 layouts), apart from `make plots`
plots-slow: deps all
	$(MAKE) -C plots slow

docs-plots-slow: deps all
	$(MAKE) -C plots docs-slow

# make plots leaves every tracked file as it was (CI runs it)
check-plots: deps all
	tests/check-plots.sh

# DESTDIR stages a package; PREFIX is only where the files go: the installed
# podsim and libpodsim find PREFIX/share/podsim from their own path at run
# time, so the tree can move.  Data: topologies, models, experiments, and the
# measured points and golden cases `podsim validate` and `regress` read.
# Requires.private names openblas when it has a .pc file, else Libs.private.
DATA_DIRS   := topologies models experiments tests/measured
DATA_FILES  := tests/golden/step-times.txt
PC_REQUIRES := glib-2.0 json-c
PC_REQ_PRIV := gio-2.0 zlib$(if $(shell pkg-config --exists openblas 2>/dev/null && echo y), openblas)
PC_LIBS_PRIV := $(if $(findstring openblas,$(PC_REQ_PRIV)),,$(BLAS_LIBS) )-lm
DEST        := $(DESTDIR)$(PREFIX)

install: all
	install -d $(DEST)/bin $(DEST)/lib/pkgconfig $(DEST)/include/podsim $(DEST)/share/podsim
	install -m 755 $(PODSIM_BIN) $(DEST)/bin/podsim
	install -m 644 $(LIB_A) $(DEST)/lib/
	install -m 755 $(LIB_SO) $(DEST)/lib/
	ln -sf libpodsim.so.$(VERSION) $(DEST)/lib/libpodsim.so.$(SOVERSION)
	ln -sf libpodsim.so.$(SOVERSION) $(DEST)/lib/libpodsim.so
	rm -rf $(DEST)/include/podsim/*
	install -m 644 $(UMBRELLA) $(DEST)/include/podsim/
	cd sim && for h in $$(cat $(abspath $(BUILD)/umbrella.txt)); do \
	  install -D -m 644 $$h $(DEST)/include/podsim/$$h || exit 1; done
	for d in $(DATA_DIRS); do rm -rf $(DEST)/share/podsim/$$d; done
	find $(DATA_DIRS) $(DATA_FILES) -type f -exec install -D -m 644 {} $(DEST)/share/podsim/{} \;
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	  -e 's|@REQUIRES@|$(PC_REQUIRES)|' -e 's|@REQUIRES_PRIVATE@|$(PC_REQ_PRIV)|' \
	  -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIV)|' podsim.pc.in > $(DEST)/lib/pkgconfig/podsim.pc

uninstall:
	rm -rf $(DEST)/bin/podsim $(DEST)/lib/libpodsim.a $(DEST)/lib/libpodsim.so \
	  $(DEST)/lib/libpodsim.so.$(SOVERSION) $(DEST)/lib/libpodsim.so.$(VERSION) \
	  $(DEST)/include/podsim $(DEST)/share/podsim $(DEST)/lib/pkgconfig/podsim.pc

# Address and undefined-behaviour sanitizers over make test's suites (the
# slow ones run unsanitized in test-slow: one epoch under ASan at -O1 is
# over ten minutes of CI).  PODSIM_TEST_SANITIZED makes the sharded
# numerics' mesh lists run their first mesh only (each ten times slower
# there; make test runs them all) and the CLI's numerics run skip the test
# set's evaluation (over three minutes there).  Its build runs on every core, as its
# suites do (deps are installed by then: make test ran first).
check-asan:
	PODSIM_TEST_SANITIZED=1 $(MAKE) -j$(PROVE_JOBS) BUILD=build-asan PODSIM_BIN=build-asan/podsim TESTBIN=build-asan/tests/bin \
	  OPT="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  LDFLAGS="-fsanitize=address,undefined" test

# Under valgrind, without the slow tests (the one-epoch training run is an
# hour there; test-slow runs it).
check-valgrind: all $(TEST_BIN)
	@for t in $(TEST_BIN); do \
	  PODSIM=$(abspath $(PODSIM_BIN)) PODSIM_DATA_DIR=$(CURDIR) \
	  valgrind -q --error-exitcode=3 --leak-check=full --errors-for-leak-kinds=definite $$t -q \
	  || exit 1; done

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

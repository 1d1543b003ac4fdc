# msched - build. `make` builds everything that needs no GPU; `make test` runs the whole CPU suite.
#
# Layout (each directory one part of the architecture, see docs/architecture.md):
#   core/      pure C11 decisions (no CUDA, threads, sockets, getenv)   -> libmscore.a
#   gpu/       the seam's implementations: fake/ (tests), sim/ (virtual clock), cuda/ (real GPU)
#   sim/       trace replay on the simulated GPU, built-in workloads, plots -> libmssim.a
#   cli/       the `msched` program
#   shim/      libmsched, the CUDA driver interposer (shim/shim.mk)
#   tests/     unit/ (cmocka), fuzz/ (libFuzzer targets + stored corpus), cli/ (bad input)
#
# Variables: SANITIZE=address,undefined (or thread) builds into build-<sanitizer>/ with
# sanitizers on; V=1 shows commands.
#
# Installing: `make install` (PREFIX=/usr/local, DESTDIR, BINDIR, LIBDIR, MANDIR) puts msched and
# mschedd in BINDIR, libmsched in LIBDIR/msched/, man pages generated from the help text, bash
# completion, the LICENSE, the systemd units in SYSTEMDUNITDIR (mschedd.service with BINDIR and
# SYSCONFDIR filled in, mschedd.socket) and SYSCONFDIR/msched/msched.conf unless one is there;
# `make uninstall` removes exactly those (the configuration file only if unchanged); `make package` builds a
# Debian package with packaging/build-deb.sh.

CC      ?= cc
comma := ,
SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD   := build
SANFLAGS :=
else
BUILD   := build-$(subst $(comma),-,$(SANITIZE))
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
# Sanitizer builds also check promises that plain builds trust for speed (core/predict.h:
# a chunk set marked ascending).
CHECKDEFS := -DMS_CHECK_SETS
endif

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS  ?= -O2 -g
ALLCFLAGS := -std=c11 $(WARN) $(CFLAGS) $(SANFLAGS) $(CHECKDEFS) -I. -MMD -MP
EDGEDEFS := -D_GNU_SOURCE
LDLIBS  := -lm
LDFLAGS += $(SANFLAGS)

ifneq ($(V),1)
Q := @
endif

CORE_SRC := $(wildcard core/*.c)
GPU_SRC  := $(wildcard gpu/fake/*.c gpu/sim/*.c)
SIM_SRC  := $(wildcard sim/*.c)
IPC_SRC  := $(wildcard ipc/*.c)
DAEMON_SRC := $(wildcard daemon/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TSUP_SRC := $(wildcard tests/support/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

CUDA_HOME ?= /usr/local/cuda
NVCC    ?= $(CUDA_HOME)/bin/nvcc
HAVE_CUDA := $(wildcard $(CUDA_HOME)/include/cuda.h)
CUDA_INC := -I$(CUDA_HOME)/include
ifneq ($(HAVE_CUDA),)
GPU_PROGS := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/*.c))
endif

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

CORE_LIB := $(BUILD)/lib/libmscore.a
GPU_LIB  := $(BUILD)/lib/libmsgpu.a
SIM_LIB  := $(BUILD)/lib/libmssim.a
IPC_LIB  := $(BUILD)/lib/libmsipc.a
MSCHEDD  := $(BUILD)/bin/mschedd
TSUP_LIB := $(BUILD)/lib/libmstest.a
MSCHED   := $(BUILD)/bin/msched
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/replay_%,$(FUZZ_SRC))

.PHONY: all test test-build unit fuzz clean demo format check-format gpu install uninstall package
.SECONDARY:
ifneq ($(DAEMON_SRC),)
DAEMON_BIN := $(MSCHEDD)
endif
all: $(MSCHED) $(DAEMON_BIN) $(GPU_PROGS)

$(BUILD)/obj/core/%.o: core/%.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC    $<")
	$(Q)$(CC) $(ALLCFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC    $<")
	$(Q)$(CC) $(ALLCFLAGS) $(EDGEDEFS) -c $< -o $@

$(CORE_LIB): $(call obj,$(CORE_SRC))
$(GPU_LIB): $(call obj,$(GPU_SRC))
$(SIM_LIB): $(call obj,$(SIM_SRC))
$(TSUP_LIB): $(call obj,$(TSUP_SRC))
$(IPC_LIB): $(call obj,$(IPC_SRC))
$(CORE_LIB) $(GPU_LIB) $(SIM_LIB) $(TSUP_LIB) $(IPC_LIB):
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  AR    $@")
	$(Q)rm -f $@ && ar rcs $@ $^

LIBS := $(SIM_LIB) $(GPU_LIB) $(IPC_LIB) $(CORE_LIB)

# `msched top` draws with ncurses when its header is present (scripts/setup.sh installs it).
HAVE_NCURSES := $(wildcard /usr/include/ncurses.h)
ifneq ($(HAVE_NCURSES),)
$(BUILD)/obj/cli/cmd_top.o: EDGEDEFS += -DMS_HAVE_NCURSES
CLI_LIBS := -lncurses
endif

$(MSCHED): $(call obj,$(CLI_SRC)) $(LIBS)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(call obj,$(CLI_SRC)) $(LIBS) $(LDLIBS) $(CLI_LIBS) -ldl

# The fake shim client of the daemon tests.
$(BUILD)/tests/fake_shim: $(BUILD)/obj/tests/daemon/fake_shim.o $(IPC_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
TEST_EXTRA += $(BUILD)/tests/fake_shim

# What a fault's planning costs on the CPU (bench/engine/plan_cost.c).
$(BUILD)/bench/plan_cost: $(BUILD)/obj/bench/engine/plan_cost.o $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
TEST_EXTRA += $(BUILD)/bench/plan_cost

# The fake daemon of the shim's tests (tests/cli/shim_fake_daemon.sh).
$(BUILD)/tests/fake_daemon: $(BUILD)/obj/tests/daemon/fake_daemon.o $(IPC_LIB) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
TEST_EXTRA += $(BUILD)/tests/fake_daemon

$(MSCHEDD): $(call obj,$(DAEMON_SRC)) $(LIBS)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(call obj,$(DAEMON_SRC)) $(LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TSUP_LIB) $(LIBS)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TSUP_LIB) $(LIBS) -lcmocka $(LDLIBS)

# Fuzz targets: replay binaries (any compiler) run the stored corpus in `make test`;
# `make fuzz` builds libFuzzer binaries with clang for open-ended fuzzing.
$(BUILD)/fuzz/replay_%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/replay_main.o $(LIBS)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

FUZZ_BIN := $(patsubst tests/fuzz/%.c,build-fuzz/%,$(FUZZ_SRC))
fuzz: $(FUZZ_BIN)
build-fuzz/%: tests/fuzz/%.c $(CORE_SRC) $(SIM_SRC) $(GPU_SRC) $(IPC_SRC)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -fsanitize=fuzzer,address,undefined $< $(CORE_SRC) $(SIM_SRC) $(GPU_SRC) $(IPC_SRC) -o $@ -lm

# The real-GPU seam and the GPU programs (built when the CUDA toolkit is present; run on a GPU
# machine only: `make gpu` also compiles their kernels to PTX with nvcc).
$(BUILD)/obj/gpu/cuda/%.o: gpu/cuda/%.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC    $<")
	$(Q)$(CC) $(ALLCFLAGS) $(EDGEDEFS) $(CUDA_INC) -fPIC -c $< -o $@
$(BUILD)/obj/tests/gpu/%.o: tests/gpu/%.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC    $<")
	$(Q)$(CC) $(ALLCFLAGS) $(EDGEDEFS) $(CUDA_INC) -c $< -o $@
$(BUILD)/gpu/%: $(BUILD)/obj/tests/gpu/%.o $(BUILD)/obj/gpu/cuda/gpu_cuda.o $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -ldl $(LDLIBS)
$(BUILD)/gpu/kernels.ptx: tests/gpu/kernels.cu
	@mkdir -p $(dir $@)
	$(NVCC) -ptx -arch=compute_80 $< -o $@
$(BUILD)/gpu/hash.ptx: gpu/cuda/hash.cu
	@mkdir -p $(dir $@)
	$(NVCC) -ptx -arch=compute_80 $< -o $@
gpu: $(GPU_PROGS) $(BUILD)/gpu/kernels.ptx $(BUILD)/gpu/hash.ptx

-include shim/shim.mk

# The fake driver's own test of host-located VMM handles (cmocka, linked to the fake driver;
# tests/shim/run_shim_tests.sh runs it). Built where shim/shim.mk builds the fake (CUDA headers).
ifneq ($(FAKE_LIB),)
$(SHIM_TDIR)/fake_host: tests/shim/fake_host.c gpu/fakecuda/fakecuda.h $(FAKE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -L$(FAKE_DIR) -lcuda -lcmocka
TEST_EXTRA += $(SHIM_TDIR)/fake_host
endif

unit: $(UNIT_BIN)

# test-build: everything the tests run, built without running them (then, for example,
# BUILD=build-thread bash tests/cli/daemon_prepare.sh runs one check).
test-build: $(MSCHED) $(DAEMON_BIN) $(UNIT_BIN) $(FUZZ_REPLAY) $(TEST_EXTRA)

test: test-build
	$(Q)BUILD=$(BUILD) tests/run.sh

demo: $(MSCHED)
	$(MSCHED) demo

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
check-format:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-* 

# ---- install ----------------------------------------------------------------------------------
# `msched run` looks for libmsched in <bindir>/../lib/msched and starts <bindir>/mschedd, so when
# LIBDIR/msched is not that directory, install links it there.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib
DATADIR ?= $(PREFIX)/share
MANDIR  ?= $(DATADIR)/man
DOCDIR  ?= $(DATADIR)/doc/msched
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
# systemd: the units, and the configuration file the service reads (in /etc whatever PREFIX is:
# `msched config set --save` writes /etc/msched/msched.conf by default)
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
UNITS := $(BUILD)/systemd/mschedd.service packaging/systemd/mschedd.socket

$(BUILD)/systemd/mschedd.service: packaging/systemd/mschedd.service.in
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $< >$@.tmp && mv $@.tmp $@
.PHONY: $(BUILD)/systemd/mschedd.service
SHIM_INSTALL := $(wildcard $(CUDA_HOME)/include/cuda.h)
MAN_PAGES := $(BUILD)/man/msched.1 $(BUILD)/man/mschedd.1

$(MAN_PAGES) &: $(MSCHED) $(MSCHEDD) packaging/gen-man.sh
	$(if $(Q),@echo "  MAN   $(BUILD)/man")
	$(Q)packaging/gen-man.sh $(BUILD)/bin $(BUILD)/man

install: all $(MAN_PAGES) $(UNITS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSCONFDIR)/msched
	install -m 644 $(UNITS) $(DESTDIR)$(SYSTEMDUNITDIR)/
	@# the configuration file is the administrator's once it is there
	[ -e $(DESTDIR)$(SYSCONFDIR)/msched/msched.conf ] || \
	    install -m 644 packaging/systemd/msched.conf $(DESTDIR)$(SYSCONFDIR)/msched/msched.conf
	install -m 755 $(MSCHED) $(MSCHEDD) $(DESTDIR)$(BINDIR)/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 packaging/bash-completion/msched $(DESTDIR)$(BASHCOMPDIR)/msched
	ln -sf msched $(DESTDIR)$(BASHCOMPDIR)/mschedd
	install -m 644 LICENSE README.md $(DESTDIR)$(DOCDIR)/
ifneq ($(SHIM_INSTALL),)
	install -d $(DESTDIR)$(LIBDIR)/msched
	install -m 755 $(SHIM_LIB) $(SHIM_PRELOAD) $(DESTDIR)$(LIBDIR)/msched/
	ln -sf libcuda.so.1 $(DESTDIR)$(LIBDIR)/msched/libcuda.so
	@want=$$(realpath -m "$(BINDIR)/../lib/msched"); have=$$(realpath -m "$(LIBDIR)/msched"); \
	if [ "$$want" != "$$have" ]; then \
	    echo "install -d $(DESTDIR)$$(dirname $$want); ln -sfn $$have $(DESTDIR)$$want"; \
	    install -d "$(DESTDIR)$$(dirname $$want)" && ln -sfn "$$have" "$(DESTDIR)$$want"; \
	fi
else
	@echo "install: no CUDA headers, so no libmsched to install ('msched run' will not work)"
endif

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/msched $(DESTDIR)$(BINDIR)/mschedd
	rm -f $(DESTDIR)$(MANDIR)/man1/msched.1 $(DESTDIR)$(MANDIR)/man1/mschedd.1
	rm -f $(DESTDIR)$(BASHCOMPDIR)/msched $(DESTDIR)$(BASHCOMPDIR)/mschedd
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/mschedd.service $(DESTDIR)$(SYSTEMDUNITDIR)/mschedd.socket
	@# the configuration file goes only if nobody changed it
	if cmp -s packaging/systemd/msched.conf $(DESTDIR)$(SYSCONFDIR)/msched/msched.conf; then \
	    rm -f $(DESTDIR)$(SYSCONFDIR)/msched/msched.conf; fi
	-rmdir $(DESTDIR)$(SYSCONFDIR)/msched 2>/dev/null
	rm -f $(DESTDIR)$(DOCDIR)/LICENSE $(DESTDIR)$(DOCDIR)/README.md
	-rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null
	rm -f $(DESTDIR)$(LIBDIR)/msched/libcuda.so.1 $(DESTDIR)$(LIBDIR)/msched/libcuda.so \
	    $(DESTDIR)$(LIBDIR)/msched/libmsched.so
	-rmdir $(DESTDIR)$(LIBDIR)/msched 2>/dev/null
	@want=$$(realpath -m "$(BINDIR)/../lib/msched"); have=$$(realpath -m "$(LIBDIR)/msched"); \
	if [ "$$want" != "$$have" ] && [ -L "$(DESTDIR)$$want" ]; then \
	    echo "rm -f $(DESTDIR)$$want"; rm -f "$(DESTDIR)$$want"; \
	fi

package: all $(MAN_PAGES)
	BUILD=$(BUILD) packaging/build-deb.sh

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

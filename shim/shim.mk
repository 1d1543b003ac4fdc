# shim/shim.mk - libmsched (the CUDA driver interposer), the fake CUDA driver, and their tests.
# Included by the top-level Makefile; uses its BUILD, CC, ALLCFLAGS, EDGEDEFS, LDFLAGS, Q.
#
#   $(BUILD)/lib/msched/libcuda.so.1   libmsched, to be found first on the library path
#   $(BUILD)/lib/msched/libcuda.so     symlink (for -lcuda)
#   $(BUILD)/lib/msched/libmsched.so   the same plus a dlsym override, for LD_PRELOAD
#   $(BUILD)/lib/fakecuda/libcuda.so.1 the CPU-only fake driver the tests run on
#   $(BUILD)/tests/shim/               test programs (tests/shim/run_shim_tests.sh runs them)
#
# Shared objects need position-independent code, so the sources they use (core/ and ipc/ ones
# included: the daemon client speaks the protocol through ipc/sock.c and ipc/conn.c) are
# compiled again with -fPIC into $(BUILD)/pic/. Nothing here is built when the CUDA
# headers are missing (CUDA_HOME, default /usr/local/cuda); the test script then skips.
#
# Targets: gen-shim (regenerate shim/gen/ from the toolkit), check-gen-shim (fail when
# shim/gen/ differs from what the toolkit generates; also a prerequisite of check-gen).

CUDA_HOME ?= /usr/local/cuda

ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)

SHIM_PIC     := $(BUILD)/pic
SHIM_DIR     := $(BUILD)/lib/msched
SHIM_LIB     := $(SHIM_DIR)/libcuda.so.1
SHIM_PRELOAD := $(SHIM_DIR)/libmsched.so
FAKE_DIR     := $(BUILD)/lib/fakecuda
FAKE_LIB     := $(FAKE_DIR)/libcuda.so.1
SHIM_TDIR    := $(BUILD)/tests/shim

# LOCKCHECK=1 (the default) checks the shim's lock order at run time (shim/locks.h).
LOCKCHECK    ?= 1
ifeq ($(LOCKCHECK),1)
LOCKDEFS     := -DMS_LOCK_CHECK
endif
# TLS descriptors on x86-64: the shim's thread-locals (the launch gate's pins, the lock-order
# check) cost an inline load instead of a call to __tls_get_addr per access, and the library
# stays loadable by dlopen (initial-exec would take static TLS space a dlopen may not have).
# Sanitizer builds keep the default dialect: the sanitizers track dynamic TLS through
# __tls_get_addr.
SHIM_TLS     := $(if $(SANITIZE),,$(if $(filter x86_64,$(shell uname -m)),-mtls-dialect=gnu2))
SHIM_CFLAGS  = $(ALLCFLAGS) $(EDGEDEFS) $(LOCKDEFS) -isystem $(CUDA_HOME)/include -fPIC \
               -fvisibility=hidden $(SHIM_TLS)
SHIM_SOFLAGS = $(LDFLAGS) -shared -Wl,-Bsymbolic-functions -Wl,-z,defs -Wl,-z,now
SHIM_TFLAGS  = $(ALLCFLAGS) $(EDGEDEFS) -isystem $(CUDA_HOME)/include

SHIM_SRC := shim/log.c shim/phases.c shim/locks.c shim/config.c shim/driver.c shim/shim.c shim/events.c shim/recorder.c shim/funcinfo.c cuabi/procaddr.c shim/hook_init.c \
            shim/hook_mem.c shim/hook_copy.c shim/hook_launch.c shim/hook_graph.c shim/graph_pieces.c shim/hook_capture.c shim/hook_vmm.c shim/hook_ptr.c shim/tensormap.c \
            cuabi/ptrattr.c cuabi/tmap.c cuabi/gen/syms.c shim/gen/tramp.c shim/engine.c shim/engine_mem.c shim/engine_gate.c shim/engine_graph.c shim/engine_alloc.c shim/hostmem.c shim/accuracy.c shim/profile.c shim/profile_san.c \
            shim/client.c shim/client_conn.c shim/client_gate.c shim/client_orders.c gpu/cuda/gpu_cuda.c core/trace.c core/alloc.c core/region.c \
            core/predict.c core/template.c core/template_fit.c core/template_learn.c core/template_text.c core/history.c core/accuracy.c core/plan.c core/slab.c core/exec.c core/timeline.c core/proto.c \
            core/units.c ipc/shimopt.c \
            ipc/sock.c ipc/conn.c $(BUILD)/gen/hash_ptx.c $(BUILD)/gen/prof_patch.c

# The GPU hash kernel's PTX, embedded as a string (no nvcc: no GPU hash, see engine.h).
NVCC ?= $(CUDA_HOME)/bin/nvcc
$(BUILD)/gen/hash_ptx.c: gpu/cuda/hash.cu scripts/embed.py
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  GEN   $@")
	$(Q)if [ -x "$(NVCC)" ] && $(NVCC) -ptx -arch=compute_80 $< -o $@.ptx 2>/dev/null; then \
	    python3 scripts/embed.py ms_hash_ptx $@.ptx >$@; \
	else python3 scripts/embed.py ms_hash_ptx - >$@; fi
# The Compute Sanitizer headers (the profiler's touch source, shim/profile_san.c): the toolkit's,
# else the nvidia-cuda-sanitizer-api wheel scripts/setup.sh installs into build/venv. Without
# them the profiler is built unavailable and its tests skip.
SANITIZER_INC ?= $(firstword $(patsubst %/sanitizer.h,%,$(wildcard \
                   $(CUDA_HOME)/compute-sanitizer/include/sanitizer.h \
                   $(CUDA_HOME)/extras/compute-sanitizer/include/sanitizer.h \
                   build/venv/lib/python3*/site-packages/nvidia/cu*/compute-sanitizer/include/sanitizer.h)))
ifneq ($(SANITIZER_INC),)
SHIM_CFLAGS += -isystem $(SANITIZER_INC)
# Older Sanitizer headers (CUDA 12's, some 13.0 installs) have no tensor-copy (TMA) patch point.
ifneq ($(shell grep -l SANITIZER_INSTRUCTION_TMA_LOAD $(SANITIZER_INC)/*.h 2>/dev/null),)
SHIM_CFLAGS += -DMS_SAN_TMA=1
endif
endif

# The profiler's device patch, compiled as a tools patch and embedded (NULL without nvcc or the
# Sanitizer headers: the profiler then says it is unavailable). It holds machine code for each of
# PROF_SMS that this nvcc knows, and PTX of the newest: a patch without code the GPU runs makes
# sanitizerPatchInstructions fail with an invalid parameter (seen on an H100 with the default
# target, sm_75, alone).
PROF_SMS ?= 75 80 86 89 90 100 120
PROF_GENCODE = $(shell for a in $(PROF_SMS); do $(NVCC) --list-gpu-code 2>/dev/null | grep -qx sm_$$a && \
                 last=$$a && printf -- '-gencode arch=compute_%s,code=sm_%s ' $$a $$a; done; \
                 [ -n "$$last" ] && printf -- '-gencode arch=compute_%s,code=compute_%s' $$last $$last)
$(BUILD)/gen/prof_patch.c: shim/prof_patch.cu shim/profile_patch.h scripts/embed.py
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  GEN   $@")
	$(Q)if [ -n "$(SANITIZER_INC)" ] && [ -x "$(NVCC)" ] && $(NVCC) --fatbin \
	    --compile-as-tools-patch $(PROF_GENCODE) -I$(SANITIZER_INC) -I. $< -o $@.fatbin 2>$@.log; then \
	    python3 scripts/embed.py ms_prof_patch $@.fatbin >$@; \
	else echo "  note: the profiler's device patch is not built (needs nvcc and the Compute" \
	    "Sanitizer headers; see $@.log)"; python3 scripts/embed.py ms_prof_patch - >$@; fi
FAKE_SRC := gpu/fakecuda/fakecuda.c gpu/fakecuda/fakecuda_mem.c gpu/fakecuda/fakecuda_launch.c gpu/fakecuda/fakecuda_um.c gpu/fakecuda/fakecuda_graph.c gpu/fakecuda/fakecuda_ptr.c \
            gpu/fakecuda/fakecuda_capture.c gpu/fakecuda/fakecuda_touch.c gpu/fakecuda/fakecuda_tmap.c cuabi/procaddr.c cuabi/ptrattr.c cuabi/tmap.c cuabi/gen/syms.c

shim_pic = $(patsubst %.c,$(SHIM_PIC)/%.o,$(1))

$(SHIM_PIC)/%.o: %.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  CC    $< (pic)")
	$(Q)$(CC) $(SHIM_CFLAGS) -c $< -o $@

$(SHIM_LIB): $(call shim_pic,$(SHIM_SRC)) shim/exports.map
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_SOFLAGS) -Wl,-soname,libcuda.so.1 -Wl,--version-script=shim/exports.map \
	    -o $@ $(call shim_pic,$(SHIM_SRC)) -ldl -lpthread
	$(Q)ln -sf libcuda.so.1 $(SHIM_DIR)/libcuda.so

$(SHIM_PRELOAD): $(call shim_pic,$(SHIM_SRC) shim/preload.c) shim/exports.map
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_SOFLAGS) -Wl,-soname,libmsched.so -Wl,--version-script=shim/exports.map \
	    -o $@ $(call shim_pic,$(SHIM_SRC) shim/preload.c) -ldl -lpthread

$(FAKE_LIB): $(call shim_pic,$(FAKE_SRC)) gpu/fakecuda/exports.map
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_SOFLAGS) -Wl,-soname,libcuda.so.1 \
	    -Wl,--version-script=gpu/fakecuda/exports.map -o $@ $(call shim_pic,$(FAKE_SRC)) -lpthread
	$(Q)ln -sf libcuda.so.1 $(FAKE_DIR)/libcuda.so

# Test programs. cuda_test_linked links -lcuda (resolved at run time by LD_LIBRARY_PATH or
# LD_PRELOAD); cuda_test_dl only dlopens libcuda.so.1. api_link.c is compiled twice, the second
# time with CUDA_API_PER_THREAD_DEFAULT_STREAM so that it names the _ptds/_ptsz exports.
SHIM_TEST_COMMON := tests/shim/cuda_test.c tests/shim/workload.c tests/shim/api_load.c
SHIM_TEST_HDRS := tests/shim/api.h tests/shim/workload.h gpu/fakecuda/fakecuda.h
SHIM_TESTS := $(SHIM_TDIR)/cuda_test_linked $(SHIM_TDIR)/cuda_test_dl $(SHIM_TDIR)/trace_check \
              $(SHIM_TDIR)/engine_stress $(SHIM_TDIR)/alloc_fail $(SHIM_TDIR)/lock_order \
              $(SHIM_TDIR)/thread_race $(SHIM_TDIR)/ptr_query $(SHIM_TDIR)/capture \
              $(SHIM_TDIR)/exit_signal \
              $(SHIM_TDIR)/libcupti_fake.so

# A Compute Sanitizer stand-in over the fake driver, for the profiler's tests (only with the
# Sanitizer headers), and the profiled test program.
ifneq ($(SANITIZER_INC),)
SHIM_TESTS += $(SHIM_TDIR)/libsanitizer_fake.so
$(SHIM_TDIR)/libsanitizer_fake.so: tests/shim/fake_sanitizer.c gpu/fakecuda/fakecuda.h shim/profile_patch.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) -isystem $(SANITIZER_INC) -fPIC -fvisibility=hidden $(SHIM_SOFLAGS) \
	    -o $@ $< -ldl
endif
SHIM_TESTS += $(SHIM_TDIR)/profile_prog
$(SHIM_TDIR)/profile_prog: tests/shim/profile_prog.c gpu/fakecuda/fakecuda.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl

# A CUPTI stand-in over the fake driver, for the accuracy probe's tests.
$(SHIM_TDIR)/libcupti_fake.so: tests/shim/fake_cupti.c gpu/fakecuda/fakecuda.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) -fPIC -fvisibility=hidden $(SHIM_SOFLAGS) -o $@ $< -ldl -lpthread

$(SHIM_TDIR)/engine_stress: tests/shim/engine_stress.c gpu/fakecuda/fakecuda.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl -lpthread

$(SHIM_TDIR)/thread_race: tests/shim/thread_race.c gpu/fakecuda/fakecuda.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl -lpthread

$(SHIM_TDIR)/ptr_query: tests/shim/ptr_query.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl

$(SHIM_TDIR)/capture: tests/shim/capture.c gpu/fakecuda/fakecuda.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl -lpthread

$(SHIM_TDIR)/exit_signal: tests/shim/exit_signal.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl

$(SHIM_TDIR)/alloc_fail: tests/shim/alloc_fail.c
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $< -ldl

$(SHIM_TDIR)/lock_order: tests/shim/lock_order.c shim/locks.c shim/log.c shim/locks.h shim/log.h
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) -DMS_LOCK_CHECK $(LDFLAGS) -o $@ tests/shim/lock_order.c shim/locks.c \
	    shim/log.c -lpthread

$(SHIM_TDIR)/api_link_legacy.o: tests/shim/api_link.c tests/shim/api.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SHIM_TFLAGS) -DMS_API_LINK_FN=ms_api_link_legacy -c $< -o $@

$(SHIM_TDIR)/api_link_pt.o: tests/shim/api_link.c tests/shim/api.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(SHIM_TFLAGS) -DCUDA_API_PER_THREAD_DEFAULT_STREAM \
	    -DMS_API_LINK_FN=ms_api_link_pt -c $< -o $@

$(SHIM_TDIR)/cuda_test_linked: $(SHIM_TEST_COMMON) $(SHIM_TEST_HDRS) $(SHIM_TDIR)/api_link_legacy.o \
                               $(SHIM_TDIR)/api_link_pt.o $(FAKE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -DMS_TEST_LINKED -o $@ $(SHIM_TEST_COMMON) \
	    $(SHIM_TDIR)/api_link_legacy.o $(SHIM_TDIR)/api_link_pt.o -L$(FAKE_DIR) -lcuda \
	    -ldl -lpthread

$(SHIM_TDIR)/cuda_test_dl: $(SHIM_TEST_COMMON) $(SHIM_TEST_HDRS)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(SHIM_TFLAGS) $(LDFLAGS) -o $@ $(SHIM_TEST_COMMON) -ldl -lpthread

$(SHIM_TDIR)/trace_check: tests/shim/trace_check.c $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(if $(Q),@echo "  LD    $@")
	$(Q)$(CC) $(ALLCFLAGS) $(EDGEDEFS) $(LDFLAGS) -o $@ $< $(CORE_LIB) -lm

TEST_EXTRA += $(SHIM_LIB) $(SHIM_PRELOAD) $(FAKE_LIB) $(SHIM_TESTS)

.PHONY: shim gen-shim check-gen-shim check-gen
shim: $(SHIM_LIB) $(SHIM_PRELOAD) $(FAKE_LIB)
all: shim

gen-shim:
	python3 scripts/gen_shim.py --cuda $(CUDA_HOME) --outdir shim/gen --abi-outdir cuabi/gen

check-gen-shim:
	$(Q)tmp=$$(mktemp -d) && python3 scripts/gen_shim.py --cuda $(CUDA_HOME) --outdir $$tmp/shim \
	    --abi-outdir $$tmp/cuabi && diff -ru shim/gen $$tmp/shim && diff -ru cuabi/gen $$tmp/cuabi; \
	    rc=$$?; rm -rf $$tmp; \
	    if [ $$rc -ne 0 ]; then echo "shim/gen or cuabi/gen is stale: run 'make gen-shim'"; fi; \
	    exit $$rc
check-gen: check-gen-shim

-include $(shell find $(SHIM_PIC) $(SHIM_TDIR) -name '*.d' 2>/dev/null)

endif

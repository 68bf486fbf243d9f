# nccl-trim. Targets: all (default), test, asan, tsan, fuzz, demo, bench, conformance, docs, python-libs, clean.
# Everything lands in $(BUILD)/ (default build/); `make asan` uses build-asan/, `make tsan` build-tsan/.

BUILD   ?= build
NPROC   := $(shell nproc 2>/dev/null || echo 2)
CXX     := g++
SAN     ?=
DEBUG   ?=

CPPFLAGS := -I. -MMD -MP
# -ffp-contract=off: no silent FMA fusion, so scalar and vector kernels (and later the GPU)
# compute the same bits.
CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -Werror -fPIC -pthread -ffp-contract=off \
            -fvisibility=hidden -fvisibility-inlines-hidden
LDFLAGS  := -pthread
ifneq ($(DEBUG),)
  CXXFLAGS += -O1
  CPPFLAGS += -DTRIM_ENABLE_TRACE
endif
# Sanitizer builds at -O1 -g1 (what the ASan/TSan docs advise: line tables are enough for their
# reports): half the compile time of -O2 -g, which CI pays for twice.
ifneq ($(SAN)$(TSAN),)
  CXXFLAGS += -O1 -g1
endif
ifneq ($(SAN),)
  CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
  LDFLAGS  += -fsanitize=address,undefined
endif
# ThreadSanitizer. -Wno-tsan: GCC warns that TSan ignores atomic_thread_fence; the only fences
# are the profiler's seqlock, whose fields are all atomics, so no race hides behind them.
ifneq ($(TSAN),)
  CXXFLAGS += -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
  LDFLAGS  += -fsanitize=thread
endif

# libtrim-rht.so: the comm hook's rotation (cuda/trim_rht.h), loaded by the Python package with
# ctypes. The host twin always; the GPU kernels (cuda/rotate.cu) when nvcc is found, else a stub
# whose trim_rht_cuda_available() says "built without nvcc"; NVCC= (empty) forces the stub.
# cuda/ is NOT part of the plugin, which makes no CUDA call (docs/ARCHITECTURE.md): only
# libtrim-rht.so, trim-bench and the tests link it, with cudart statically (they run, reporting
# no GPU, where there is no driver).
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
RHT_LIB := $(BUILD)/lib/libtrim-rht.so
ifneq ($(NVCC),)
  CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(realpath $(NVCC))))
  RHT_GPU_SRCS :=
  RHT_CU_SRCS  := cuda/rotate.cu
  # --fmad=false: no FMA contraction, the same bits as the CPU build's -ffp-contract=off; no
  # -ftz/--use_fast_math: denormals are kept, as on the CPU.
  NVCCFLAGS := -std=c++17 -O3 --fmad=false -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=[sm_90,compute_90] \
               -Xcompiler -fPIC,-fvisibility=hidden,-ffp-contract=off,-Wall,-Wextra,-Werror -Werror all-warnings
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl
  # The .cc files that call the CUDA runtime themselves (the bench, the GPU tests) compile their
  # CUDA parts only with TRIM_HAVE_CUDA.
  CUDA_CPPFLAGS := -I$(CUDA_HOME)/include -DTRIM_HAVE_CUDA=1
else
  RHT_GPU_SRCS := cuda/rht_cuda_stub.cc
  RHT_CU_SRCS  :=
  CUDA_LDLIBS  :=
  CUDA_CPPFLAGS :=
endif
RHT_OBJS := $(BUILD)/obj/cuda/rht_host.o $(RHT_GPU_SRCS:%.cc=$(BUILD)/obj/%.o) \
            $(RHT_CU_SRCS:%.cu=$(BUILD)/obj/%.o)

# One archive per layer, each linked only with what is below it, so a call up the layers is a
# link error: common <- codec <- transport <- plugin; cuda/ (RHT_OBJS) sits on codec beside the
# transport (never in the plugin); the switch model (switch_sim/*.cc) sits on common and codec. The
# plugin .so takes the objects of common, codec, transport and plugin.
COMMON_OBJS    := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard common/*.cc))
CODEC_OBJS     := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard codec/*.cc))
TRANSPORT_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard transport/*.cc))
PLUGIN_OBJS    := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard plugin/*.cc))
# coll/ plays NCCL against a net plugin it dlopens (ring collectives, the proxy, the profiler
# chain): it sits on common and codec, beside the transport, and never links the plugin.
COLL_OBJS      := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard coll/*.cc))
LIB_OBJS  := $(COMMON_OBJS) $(CODEC_OBJS) $(TRANSPORT_OBJS) $(PLUGIN_OBJS)
TEST_SRCS := $(wildcard tests/*.cc)
TEST_OBJS := $(TEST_SRCS:%.cc=$(BUILD)/obj/%.o)
BENCH_SRCS := $(wildcard tools/bench/*.cc)
BENCH_OBJS := $(BENCH_SRCS:%.cc=$(BUILD)/obj/%.o)
HARNESS_SRCS := $(wildcard tools/harness/*.cc)
HARNESS_OBJS := $(HARNESS_SRCS:%.cc=$(BUILD)/obj/%.o)
# The switch model (switch_sim/*.cc) is shared by the live daemon and the simulator; it is not
# part of the plugin.
SW_SRCS := $(wildcard switch_sim/*.cc)
SW_OBJS := $(SW_SRCS:%.cc=$(BUILD)/obj/%.o)
SWITCH_SRCS := $(wildcard switch_sim/daemon/*.cc)
SWITCH_OBJS := $(SWITCH_SRCS:%.cc=$(BUILD)/obj/%.o)
SIM_SRCS := $(wildcard switch_sim/sim/*.cc)
SIM_OBJS := $(SIM_SRCS:%.cc=$(BUILD)/obj/%.o)

A_COMMON    := $(BUILD)/lib/libtrim_common.a
A_CODEC     := $(BUILD)/lib/libtrim_codec.a
A_TRANSPORT := $(BUILD)/lib/libtrim_transport.a
A_PLUGIN    := $(BUILD)/lib/libtrim_plugin.a
A_COLL      := $(BUILD)/lib/libtrim_coll.a
SW_ARCHIVE  := $(BUILD)/lib/libtrimsw.a
# Top layer first: a lower archive can never resolve a symbol of a higher one. The programs that
# measure or test the rotation (trim-bench, trim-tests) link RHT_OBJS before them.
ARCHIVES := $(A_PLUGIN) $(A_TRANSPORT) $(A_CODEC) $(A_COMMON)
# trim-sim's endpoints share exactly one unit with the transport: its loss recovery.
RECOVERY_OBJ := $(BUILD)/obj/transport/recovery.o
PLUGIN  := $(BUILD)/lib/libnccl-net-trim.so
# libtrim-coll.so: the collective engine's C ABI (coll/trim_coll.h) for the Python package's
# torch.distributed backend "trim"; trim-harness links the same objects.
COLL_LIB := $(BUILD)/lib/libtrim-coll.so
TOOLS   := $(BUILD)/bin/trim-bench $(BUILD)/bin/trim-config $(BUILD)/bin/trim-demo \
           $(BUILD)/bin/trim-harness
ifneq ($(SWITCH_SRCS),)
  TOOLS += $(BUILD)/bin/trim-switch
endif
ifneq ($(SIM_SRCS),)
  TOOLS += $(BUILD)/bin/trim-sim
endif
TESTS   := $(BUILD)/bin/trim-tests

.PHONY: all setup test run-tests python-libs asan tsan fuzz demo bench conformance docs clean
.DEFAULT_GOAL := all
# Keep object files of the pattern-built tools (make would delete them as intermediates).
.SECONDARY:

all: $(PLUGIN) $(BUILD)/lib/libnccl-net.so $(RHT_LIB) $(COLL_LIB) $(TOOLS)

# What the Python package ships (setup.py runs this): the plugin, the comm hook's rotation and
# the collective engine of the CPU backend.
python-libs: $(PLUGIN) $(RHT_LIB) $(COLL_LIB)

# spdlog is used header-only, in this one translation unit only.
$(BUILD)/obj/common/log.o: CPPFLAGS += -DSPDLOG_HEADER_ONLY
# The tests find the plugin they dlopen here (and libtrim-rht.so beside it).
$(BUILD)/obj/tests/%.o: CPPFLAGS += -DTRIM_TEST_PLUGIN_PATH='"$(abspath $(PLUGIN))"' \
                                    -DTRIM_TEST_SOURCE_DIR='"$(CURDIR)"'
$(BUILD)/obj/tools/bench/cuda_bench.o $(BUILD)/obj/tests/rotate_cuda_test.o: CPPFLAGS += $(CUDA_CPPFLAGS)

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) -I. -MMD -MP -MF $(@:.o=.d) $(NVCCFLAGS) -c $< -o $@

define archive_rule
$(1): $(2)
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(eval $(call archive_rule,$(A_COMMON),$(COMMON_OBJS)))
$(eval $(call archive_rule,$(A_CODEC),$(CODEC_OBJS)))
$(eval $(call archive_rule,$(A_TRANSPORT),$(TRANSPORT_OBJS)))
$(eval $(call archive_rule,$(A_PLUGIN),$(PLUGIN_OBJS)))
$(eval $(call archive_rule,$(A_COLL),$(COLL_OBJS)))

# Only the ncclNetPlugin_vN (and later profiler/tuner) symbols leave the library.
$(PLUGIN): $(LIB_OBJS) plugin/exports.map
	@mkdir -p $(@D)
	$(CXX) -shared $(CXXFLAGS) -o $@ $(LIB_OBJS) $(LDFLAGS) -ldl \
	  -Wl,--version-script=plugin/exports.map -Wl,-z,defs -Wl,--exclude-libs,ALL -Wl,-z,nodelete
# (nodelete: NCCL dlcloses the plugin with the last communicator; its threads and logger
# singletons must not lose their code under them.)

# Only trim_rht_* leave it; cudart is linked statically (the application's torch brings its own).
$(RHT_LIB): $(RHT_OBJS) $(A_CODEC) $(A_COMMON) cuda/rht_exports.map
	@mkdir -p $(@D)
	$(CXX) -shared $(CXXFLAGS) -o $@ $(RHT_OBJS) $(A_CODEC) $(A_COMMON) $(LDFLAGS) $(if $(RHT_CU_SRCS),$(CUDA_LDLIBS)) \
	  -Wl,--version-script=cuda/rht_exports.map -Wl,-z,defs -Wl,--exclude-libs,ALL

# Only trim_coll_* leave it.
$(COLL_LIB): $(COLL_OBJS) $(A_CODEC) $(A_COMMON) coll/exports.map
	@mkdir -p $(@D)
	$(CXX) -shared $(CXXFLAGS) -o $@ $(COLL_OBJS) $(A_CODEC) $(A_COMMON) \
	  $(LDFLAGS) -ldl -Wl,--version-script=coll/exports.map -Wl,-z,defs -Wl,--exclude-libs,ALL

$(BUILD)/lib/libnccl-net.so: $(PLUGIN)
	ln -sf libnccl-net-trim.so $@

$(BUILD)/bin/trim-bench: $(BENCH_OBJS) $(RHT_OBJS) $(ARCHIVES)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $(BENCH_OBJS) $(RHT_OBJS) $(ARCHIVES) $(LDFLAGS) $(CUDA_LDLIBS) -ldl

# trim-harness plays NCCL's proxy against the built plugin (dlopen), one process per rank.
# --prerotate rotates as the comm hook does, with libtrim-rht's host twin.
$(BUILD)/bin/trim-harness: $(HARNESS_OBJS) $(BUILD)/obj/cuda/rht_host.o $(A_COLL) $(ARCHIVES)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $(HARNESS_OBJS) $(BUILD)/obj/cuda/rht_host.o $(A_COLL) $(ARCHIVES) $(LDFLAGS) -ldl

$(SW_ARCHIVE): $(SW_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $(SW_OBJS)

# The switch links the port model, the codec (packet headers) and common: not the transport.
$(BUILD)/bin/trim-switch: $(SWITCH_OBJS) $(SW_ARCHIVE) $(A_CODEC) $(A_COMMON)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $(SWITCH_OBJS) $(SW_ARCHIVE) $(A_CODEC) $(A_COMMON) -pthread

$(BUILD)/bin/trim-sim: $(SIM_OBJS) $(SW_ARCHIVE) $(RECOVERY_OBJ) $(A_CODEC) $(A_COMMON)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $(SIM_OBJS) $(SW_ARCHIVE) $(RECOVERY_OBJ) $(A_CODEC) $(A_COMMON) -pthread

$(BUILD)/bin/trim-%: $(BUILD)/obj/tools/trim_%.o $(ARCHIVES)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $< $(ARCHIVES) $(LDFLAGS) -ldl

# The plugin tests dlopen the built library (and libtrim-rht.so), so they come with the test
# binary; the rotation tests link RHT_OBJS statically. The simulator's event queue is
# unit-tested on its own (SimEventQueue.*), so its object comes too, and so does its TCP model (SimTcp.*).
SIM_QUEUE_OBJ := $(BUILD)/obj/switch_sim/sim/event_queue.o $(BUILD)/obj/switch_sim/sim/tcp.o
$(TESTS): $(TEST_OBJS) $(SIM_QUEUE_OBJ) $(SW_ARCHIVE) $(RHT_OBJS) $(A_COLL) $(ARCHIVES) | $(PLUGIN) $(BUILD)/lib/libnccl-net.so $(RHT_LIB) $(COLL_LIB) $(TOOLS)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -o $@ $(TEST_OBJS) $(SIM_QUEUE_OBJ) $(SW_ARCHIVE) $(RHT_OBJS) $(A_COLL) $(ARCHIVES) $(LDFLAGS) $(CUDA_LDLIBS) \
	  -lgtest_main -lgtest -ldl

setup:
	@scripts/setup.sh

# The README's test command: install what is missing (torch included: TRIM_SKIP_TORCH=1 skips it
# and the PyTorch tests), build, run every test that needs no GPU.
test: setup
	$(MAKE) --no-print-directory -j$(NPROC) all $(TESTS)
	$(MAKE) --no-print-directory run-tests

run-tests: all $(TESTS)
	scripts/run_tests.sh $(TESTS)
	$(if $(SAN),@echo "python tests: skipped under SAN=1 (python cannot load ASan-built libraries; the bench uses no sanitized binary: make test runs them)",TRIM_REQUIRE_TORCH=$(if $(filter 1,$(TRIM_SKIP_TORCH)),0,1) scripts/run_python_tests.sh $(BUILD))

# allocator_may_return_null=1: an allocation that cannot succeed returns null as it does without
# a sanitizer, so the tests that check it becomes an error (CollMemory.*) run here too.
asan:
	$(MAKE) --no-print-directory -j$(NPROC) BUILD=build-asan SAN=1 all build-asan/bin/trim-tests
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(MAKE) --no-print-directory BUILD=build-asan SAN=1 run-tests

# The threaded code under ThreadSanitizer: the transport (engines, codec pool, close and
# deregMr), the plugin, the harness's multi-process runs (their ranks load build-tsan's .so) and
# coll/'s communicators, several to a process on their own threads (Coll.*).
TSAN_TESTS ?= ErrorFeedbackScope.*:CollLog.*:CodecPool.*:CodecCancel.*:Loopback.*:Close*:Proto*:Wire*:ErrorFeedback.*:QuietConnection.*:Mtu*:HandshakeVersion.*:HookTag.*:PluginTest.*:Harness*:Coll.*:FabricTransport.*:CutRx*:CompletionSignal.*:WaitAny.*
tsan:
	$(MAKE) --no-print-directory -j$(NPROC) BUILD=build-tsan TSAN=1 all build-tsan/bin/trim-tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1" \
	  scripts/run_tests.sh build-tsan/bin/trim-tests --gtest_filter='$(TSAN_TESTS)'

FUZZ_SECONDS ?= 60
fuzz:
	scripts/setup.sh --fuzz --no-torch
	$(MAKE) --no-print-directory -j$(NPROC) -f scripts/fuzz.mk FUZZ_SECONDS=$(FUZZ_SECONDS)

demo: setup
	$(MAKE) --no-print-directory -j$(NPROC) all
	python3 -m bench demo $(BUILD)

bench: all
	$(BUILD)/bin/trim-bench codec --json

# PyTorch's own distributed suite on trim against gloo, 2 and 3 ranks (~1.5 hours on 2 cores):
# every test that passes on gloo passes on trim or is in tests/conformance/exclusions.txt with
# its reason. make test runs a subset (tests/python/test_conformance.py).
conformance: setup python-libs
	PYTHONPATH=$(CURDIR)/python NCCL_TRIM_LIB_DIR=$(CURDIR)/$(BUILD)/lib python3 tests/conformance/run.py \
	  --out $(BUILD)/conformance

# docs/CONFIG.md and common/param_enums.h are generated from the params list; a test fails when
# either is stale.
docs: $(BUILD)/bin/trim-config
	$(BUILD)/bin/trim-config --markdown > docs/CONFIG.md
	$(BUILD)/bin/trim-config --enums > common/param_enums.h

clean:
	rm -rf build build-asan build-tsan build-fuzz

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

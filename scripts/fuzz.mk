# make fuzz: libFuzzer (clang from Debian), FUZZ_SECONDS each, on
#   packet-fuzz: the data packet parser and the decoder;
#   wire-fuzz:   the transport's control packets, stream frames, handshake and handle parsers,
#                and the send/receive state machines behind them (tests/fuzz/wire_fuzz.cc);
#   cut-fuzz:    NCCL_TRIM_RX_CUT's frame parser (tests/fuzz/cut_fuzz.cc; starts from an empty corpus).
FUZZ_SECONDS ?= 60
FB := build-fuzz
CLANG := clang++
SRCS := $(wildcard common/*.cc codec/*.cc)
# Only what the protocol state machines need: no sockets, engine or plugin.
# (codec_pool: the state machines hand encoded messages to it when a pool is configured;
# completion: a finished request wakes a caller blocked in ncclTrimWaitRequests.)
WIRE_SRCS := transport/wire.cc transport/send_proto.cc transport/recv_proto.cc transport/congestion.cc transport/codec_pool.cc \
             transport/feedback.cc transport/completion.cc \
             transport/recovery.cc
# The packet socket's frame parser (cut_rx.cc needs devices.cc for the interface lookup).
CUT_SRCS := transport/cut_rx.cc transport/devices.cc
OBJS := $(SRCS:%.cc=$(FB)/obj/%.o)
WIRE_OBJS := $(WIRE_SRCS:%.cc=$(FB)/obj/%.o)
FLAGS := -std=c++17 -O1 -g -I. -MMD -MP -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
         -Wall -Wextra -Werror -Wno-pass-failed
# The seed writers are plain (uninstrumented) g++ builds.
SEED_FLAGS := -std=c++17 -O1 -I. -MMD -MP -Wall -Wextra -Werror
FUZZ_ARGS := -max_total_time=$(FUZZ_SECONDS) -max_len=9000 -timeout=10 -print_final_stats=1

# The three fuzzers run side by side (make -j): each is one process for FUZZ_SECONDS.
.PHONY: run run-packet run-wire run-cut
run: run-packet run-wire run-cut

run-packet: $(FB)/packet-fuzz $(FB)/make-seeds
	@mkdir -p $(FB)/corpus
	$(FB)/make-seeds $(FB)/corpus
	$(FB)/packet-fuzz $(FUZZ_ARGS) $(FB)/corpus

run-wire: $(FB)/wire-fuzz $(FB)/wire-seeds
	@mkdir -p $(FB)/corpus-wire
	$(FB)/wire-seeds $(FB)/corpus-wire
	$(FB)/wire-fuzz $(FUZZ_ARGS) $(FB)/corpus-wire

run-cut: $(FB)/cut-fuzz
	@mkdir -p $(FB)/corpus-cut
	$(FB)/cut-fuzz $(FUZZ_ARGS) $(FB)/corpus-cut

# spdlog is used header-only, in this one translation unit only (as in the main build).
$(FB)/obj/common/log.o $(FB)/seed-obj/common/log.o: SPDLOG := -DSPDLOG_HEADER_ONLY

# clang with UBSan on top of ASan and coverage spends minutes on the FWHT's unrolled passes
# (2026-11-29: fwht_avx2.cc 387 s, fwht_avx512.cc 130 s, fwht.cc 42 s; 9 s without UBSan): those
# three are built here without UBSan (ASan and coverage kept). `make asan` runs their gtests
# under g++'s UBSan, bit for bit against the scalar FWHT.
$(FB)/obj/codec/fwht.o $(FB)/obj/codec/fwht_avx2.o $(FB)/obj/codec/fwht_avx512.o: NO_UBSAN := -fno-sanitize=undefined

$(FB)/obj/%.o: %.cc
	@mkdir -p $(@D)
	$(CLANG) $(FLAGS) $(NO_UBSAN) $(SPDLOG) -c $< -o $@

$(FB)/seed-obj/%.o: %.cc
	@mkdir -p $(@D)
	g++ $(SEED_FLAGS) $(SPDLOG) -c $< -o $@

$(FB)/packet-fuzz: $(FB)/obj/tests/fuzz/packet_fuzz.o $(OBJS)
	$(CLANG) -fsanitize=fuzzer,address,undefined $^ -o $@

$(FB)/wire-fuzz: $(FB)/obj/tests/fuzz/wire_fuzz.o $(WIRE_OBJS) $(OBJS)
	$(CLANG) -fsanitize=fuzzer,address,undefined $^ -o $@

$(FB)/cut-fuzz: $(FB)/obj/tests/fuzz/cut_fuzz.o $(CUT_SRCS:%.cc=$(FB)/obj/%.o) $(OBJS)
	$(CLANG) -fsanitize=fuzzer,address,undefined $^ -o $@

$(FB)/make-seeds: $(FB)/seed-obj/tests/fuzz/make_seeds.o $(SRCS:%.cc=$(FB)/seed-obj/%.o)
	g++ $^ -o $@ -pthread

$(FB)/wire-seeds: $(FB)/seed-obj/tests/fuzz/wire_seeds.o $(WIRE_SRCS:%.cc=$(FB)/seed-obj/%.o) $(SRCS:%.cc=$(FB)/seed-obj/%.o)
	g++ $^ -o $@ -pthread

-include $(shell find $(FB)/obj $(FB)/seed-obj -name '*.d' 2>/dev/null)

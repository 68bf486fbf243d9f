# make fuzz: libFuzzer (clang from Debian) on the packet parser and decoder for a bounded time.
FUZZ_SECONDS ?= 60
FB := build-fuzz
CLANG := clang++
SRCS := $(wildcard common/*.cc codec/*.cc)
OBJS := $(SRCS:%.cc=$(FB)/obj/%.o)
FLAGS := -std=c++17 -O1 -g -I. -MMD -MP -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
         -Wall -Wextra -Werror -Wno-pass-failed

.PHONY: run
run: $(FB)/packet-fuzz $(FB)/make-seeds
	@mkdir -p $(FB)/corpus
	$(FB)/make-seeds $(FB)/corpus
	$(FB)/packet-fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=9000 -timeout=10 -print_final_stats=1 $(FB)/corpus

# spdlog is used header-only, in this one translation unit only (as in the main build).
$(FB)/obj/common/log.o: FLAGS += -DSPDLOG_HEADER_ONLY

$(FB)/obj/%.o: %.cc
	@mkdir -p $(@D)
	$(CLANG) $(FLAGS) -c $< -o $@

$(FB)/packet-fuzz: $(FB)/obj/tests/fuzz/packet_fuzz.o $(OBJS)
	$(CLANG) -fsanitize=fuzzer,address,undefined $^ -o $@

$(FB)/make-seeds: tests/fuzz/make_seeds.cc $(SRCS)
	@mkdir -p $(@D)
	g++ -std=c++17 -O1 -I. -DSPDLOG_HEADER_ONLY tests/fuzz/make_seeds.cc $(SRCS) -o $@ -pthread

-include $(shell find $(FB)/obj -name '*.d' 2>/dev/null)

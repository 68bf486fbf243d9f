# make fuzz: libFuzzer (clang from Debian) on the packet parser and decoder for a bounded time.
FUZZ_SECONDS ?= 60
FB := build-fuzz
CLANG := clang++
SRCS := $(wildcard common/*.cc codec/*.cc)
SRCS := $(filter-out common/log.cc,$(SRCS))
FLAGS := -std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Wall -Wextra -Werror -Wno-pass-failed

.PHONY: run
run: $(FB)/packet-fuzz $(FB)/make-seeds
	@mkdir -p $(FB)/corpus
	$(FB)/make-seeds $(FB)/corpus
	$(FB)/packet-fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=9000 -timeout=10 -print_final_stats=1 $(FB)/corpus

$(FB)/packet-fuzz: tests/fuzz/packet_fuzz.cc $(SRCS) $(wildcard common/*.h codec/*.h)
	@mkdir -p $(@D)
	$(CLANG) $(FLAGS) tests/fuzz/packet_fuzz.cc $(SRCS) -o $@

$(FB)/make-seeds: tests/fuzz/make_seeds.cc $(SRCS)
	@mkdir -p $(@D)
	g++ -std=c++17 -O2 -I. tests/fuzz/make_seeds.cc $(SRCS) -o $@ -pthread

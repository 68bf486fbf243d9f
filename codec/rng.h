// Shared randomness: a counter-based generator, so both ends (and the GPU kernels'
// threads) compute the value of element i without running a sequential generator in the same
// order. Key = (seed, message sequence, row, stream); counter = element or word index.
// The mixer is SplitMix64's finalizer (Steele et al., 2014), which passes BigCrush when fed
// consecutive counters.
#pragma once

#include <cstdint>

#include "codec/types.h"

namespace trim::codec {

enum class RngStream : uint32_t { kRhtSigns = 1, kDither = 2 };

TRIM_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Key of one row's stream: every argument changes every bit of the key.
TRIM_HD uint64_t rng_key(uint64_t seed, uint32_t msg_seq, uint32_t row, RngStream stream) {
  uint64_t k = mix64(seed + 0x9E3779B97F4A7C15ull);
  k = mix64(k ^ ((static_cast<uint64_t>(msg_seq) << 32) | row));
  return mix64(k + static_cast<uint64_t>(stream) * 0xD1B54A32D192ED03ull);
}

// The counter-th 64-bit word of a stream.
TRIM_HD uint64_t rng_word(uint64_t key, uint64_t counter) {
  return mix64(key + (counter + 1) * 0x9E3779B97F4A7C15ull);
}

// Uniform in [0, 1) with 24 random bits: exact in fp32 on every device.
TRIM_HD float rng_uniform(uint64_t key, uint64_t counter) {
  return static_cast<float>(rng_word(key, counter) >> 40) * 5.9604644775390625e-8f;
}

}  // namespace trim::codec

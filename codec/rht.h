// Row-level Randomized Hadamard Transform over power-of-two blocks. A row that is not a
// power of two (a message's last row) is split into its binary decomposition, largest
// block first (1000 = 512+256+128+64+32+8), so it costs no padding on the wire. The random
// diagonal is one bit per element of the row's kRhtSigns stream.
#pragma once

#include <cstdint>
#include <vector>

namespace trim::codec {

template <typename F>
void for_each_rht_block(uint32_t elems, F&& f) {
  uint32_t offset = 0;
  for (int b = 31; b >= 0; --b) {
    if (elems & (1u << b)) {
      f(offset, b);
      offset += 1u << b;
    }
  }
}

// Sign words of a row: word w = rng_word(key, w); bit i % 64 of word i / 64 negates element i.
void rht_sign_words(uint64_t key, uint32_t elems, std::vector<uint64_t>* words);
// out = R(in) for a whole row (in == out allowed).
void rht_row_forward(const float* in, float* out, uint32_t elems, const std::vector<uint64_t>& words);
// data = R^-1(data) for a whole row.
void rht_row_inverse(float* data, uint32_t elems, const std::vector<uint64_t>& words);

}  // namespace trim::codec

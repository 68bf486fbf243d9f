#include "codec/rht.h"

#include "codec/fwht.h"
#include "codec/rng.h"

namespace trim::codec {
namespace {

// Blocks of 64 or more start at a multiple of 64 (every earlier block is a larger power of
// two); smaller ones may not, so their bits are shifted into a word of their own.
const uint64_t* block_signs(const std::vector<uint64_t>& words, uint32_t offset, uint32_t size, uint64_t* tmp) {
  const uint32_t w = offset / 64, s = offset % 64;
  if (s == 0) return &words[w];
  uint64_t v = words[w] >> s;
  if (s + size > 64) v |= words[w + 1] << (64 - s);
  *tmp = v;
  return tmp;
}

}  // namespace

void rht_sign_words(uint64_t key, uint32_t elems, std::vector<uint64_t>* words) {
  words->resize((elems + 63) / 64);
  for (size_t w = 0; w < words->size(); ++w) (*words)[w] = rng_word(key, w);
}

void rht_row_forward(const float* in, float* out, uint32_t elems, const std::vector<uint64_t>& words) {
  for_each_rht_block(elems, [&](uint32_t offset, int log2n) {
    uint64_t tmp;
    rht_forward(in + offset, out + offset, log2n, block_signs(words, offset, 1u << log2n, &tmp));
  });
}

void rht_row_inverse(float* data, uint32_t elems, const std::vector<uint64_t>& words) {
  for_each_rht_block(elems, [&](uint32_t offset, int log2n) {
    uint64_t tmp;
    rht_inverse(data + offset, log2n, block_signs(words, offset, 1u << log2n, &tmp));
  });
}

}  // namespace trim::codec

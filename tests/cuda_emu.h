// Host emulation of the GPU kernels (cuda/encode.cu, cuda/decode.cu): the same steps in the
// same order, calling the same TRIM_HD functions of cuda/codec_index.h, with one "thread"
// doing what a block does. Lets CI (no GPU) check the kernels' index math and arithmetic order
// against codec::Encoder / codec::Decoder.
#pragma once

#include <cstring>
#include <vector>

#include "codec/fwht.h"
#include "codec/layout.h"
#include "cuda/codec_index.h"
#include "cuda/geom_host.h"

namespace trim::gpu::emu {

struct Norms {
  double sum_sq = 0, sum_abs = 0;
  bool finite = true;
};

// group_norms: 8 lanes, each sequential, then the shuffle tree.
inline Norms group_norms(const std::vector<float>& s, uint32_t first, uint32_t n) {
  double sq[8], ab[8];
  bool fin[8];
  for (uint32_t j = 0; j < 8; ++j) {
    sq[j] = ab[j] = 0;
    fin[j] = true;
    for (uint32_t i = j; i < n; i += 8) {
      const float x = s[smem_index(first + i)];
      const bool ok = std::isfinite(x);
      fin[j] = fin[j] && ok;
      const double xd = x;
      sq[j] += ok ? xd * xd : 0.0;
      ab[j] += std::fabs(xd);
    }
  }
  for (uint32_t m = 1; m <= 4; m <<= 1) {  // __shfl_xor_sync(m): lane j adds lane j ^ m
    double nsq[8], nab[8];
    bool nfin[8];
    for (uint32_t j = 0; j < 8; ++j) {
      nsq[j] = sq[j] + sq[j ^ m];
      nab[j] = ab[j] + ab[j ^ m];
      nfin[j] = fin[j] && fin[j ^ m];
    }
    std::memcpy(sq, nsq, sizeof sq);
    std::memcpy(ab, nab, sizeof ab);
    std::memcpy(fin, nfin, sizeof fin);
  }
  return Norms{sq[0], ab[0], fin[0]};
}

// fwht_pass / fwht_block / fwht_row: the same passes and groups, one group after another.
inline void fwht_row(std::vector<float>& s, uint32_t elems, const uint64_t* inverse_signs) {
  uint32_t off = 0;
  for (int b = 31; b >= 0; --b) {
    if (!(elems & (1u << b))) continue;
    const int log2n = b;
    const float scale = codec::fwht_scale(log2n);
    int st = 0;
    do {
      const int k = fwht_pass_stages(log2n, st);
      const bool last = st + k >= log2n;
      for (uint32_t g = 0; g < ((1u << log2n) >> k); ++g) {
        switch (k) {
          case 0: fwht_group<0>(s.data(), off, st, g, last, scale, inverse_signs); break;
          case 1: fwht_group<1>(s.data(), off, st, g, last, scale, inverse_signs); break;
          case 2: fwht_group<2>(s.data(), off, st, g, last, scale, inverse_signs); break;
          case 3: fwht_group<3>(s.data(), off, st, g, last, scale, inverse_signs); break;
          case 4: fwht_group<4>(s.data(), off, st, g, last, scale, inverse_signs); break;
          default: fwht_group<5>(s.data(), off, st, g, last, scale, inverse_signs); break;
        }
      }
      st += k;
    } while (st < log2n);
    off += 1u << b;
  }
}

inline std::vector<uint64_t> sign_words(const codec::CodecConfig& cfg, uint32_t msg_seq, uint32_t row, uint32_t elems) {
  std::vector<uint64_t> w((elems + 63) / 64);
  const uint64_t key = codec::rng_key(cfg.seed, msg_seq, row, codec::RngStream::kRhtSigns);
  for (size_t i = 0; i < w.size(); ++i) w[i] = codec::rng_word(key, i);
  return w;
}

// encode_rows_kernel for rows [first_row, first_row + n_rows).
void encode_rows(const codec::CodecConfig& cfg, const codec::Layout& layout, const codec::MessageId& id,
                 const uint8_t* msg, uint32_t first_row, uint32_t n_rows, uint8_t* out, size_t stride);

// decode_rows_kernel: received[j] = bytes of packet j of the range that arrived (0 = missing).
void decode_rows(const codec::CodecConfig& cfg, const codec::Layout& layout, const codec::MessageId& id,
                 const uint8_t* packets, size_t stride, const uint32_t* received, uint32_t first_row, uint32_t n_rows,
                 uint8_t* out);

}  // namespace trim::gpu::emu

// Portable reference kernels and the dispatch to the vector ones (codec/planes_avx512.cc,
// codec/planes_avx2.cc).
#include "codec/planes.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "codec/packet.h"
#include "codec/rng.h"
#include "codec/types.h"

namespace trim::codec {
namespace {

inline void store_le(uint8_t* p, uint64_t v, uint32_t bytes) {
  for (uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint64_t load_le(const uint8_t* p, uint32_t bytes) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Field i of a 15-bit stream, reading only the 2 or 3 bytes that hold it (the stream may end
// right after it).
inline uint32_t field15(const uint8_t* p1, uint32_t i) {
  const uint32_t bit = 15 * i, shift = bit & 7;
  return static_cast<uint32_t>(load_le(p1 + (bit >> 3), (shift + 15 + 7) / 8) >> shift) & 0x7FFFu;
}

// Packs 15-bit fields as a little-endian bitstream; 8 fields fill 15 bytes exactly.
template <typename Get>
inline void pack15(Get field, uint32_t n, uint8_t* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8, out += 15) {
    uint64_t lo = field(i) | (field(i + 1) << 15) | (field(i + 2) << 30) | (field(i + 3) << 45) |
                  (field(i + 4) << 60);
    uint64_t hi = (field(i + 4) >> 4) | (field(i + 5) << 11) | (field(i + 6) << 26) | (field(i + 7) << 41);
    store_le(out, lo, 8);
    store_le(out + 8, hi, 7);
  }
  // A last partial group: accumulate into whole bytes.
  uint64_t acc = 0;
  uint32_t bits = 0;
  for (; i < n; ++i) {
    acc |= field(i) << bits;
    bits += 15;
    while (bits >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      bits -= 8;
    }
  }
  if (bits > 0) *out = static_cast<uint8_t>(acc);
}

// The best kernels this CPU runs, found once: AVX-512 where it has it, else AVX2 for the fp32
// hot path (planes_kernels_f32.inc; the other kernels stay scalar there).
enum class Isa { kScalar, kAvx2, kAvx512 };
const Isa kBestIsa = avx512::supported() ? Isa::kAvx512 : avx2::supported() ? Isa::kAvx2 : Isa::kScalar;
std::atomic<bool> g_force_scalar{false};

inline Isa isa() { return g_force_scalar.load(std::memory_order_relaxed) ? Isa::kScalar : kBestIsa; }
inline bool vector_path() { return isa() == Isa::kAvx512; }

// A kernel of planes_kernels_f32.inc on the best path.
#define TRIM_PICK_F32(fn, ...)                     \
  (isa() == Isa::kAvx512 ? avx512::fn(__VA_ARGS__) \
   : isa() == Isa::kAvx2 ? avx2::fn(__VA_ARGS__)   \
                         : scalar::fn(__VA_ARGS__))

}  // namespace

namespace scalar {

void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2, Norms* norms) {
  pack_sign_bits32(v, n, p0);
  if (p1 != nullptr) {
    pack15_from32(v, n, p1);
    pack16_from32(v, n, 0, p2);
  }
  bool finite = true;
  norms->sum_sq += sum_squares(v, n, &finite);
  norms->sum_abs += sum_abs(v, n);
  norms->finite = norms->finite && finite;
}

void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                  Norms* norms) {
  scalar::pack_f32_sign_layout(rot, n, p0, nullptr, nullptr, norms);
  scalar::pack16_from32(v, n, 16, p1);
  scalar::pack16_from32(v, n, 0, p2);
}

void pack_sign_bits32(const float* v, uint32_t n, uint8_t* p0) {
  for (uint32_t i = 0; i < n; i += 8) {
    uint32_t b = 0;
    for (uint32_t k = 0; k < 8 && i + k < n; ++k) b |= (f32_bits(v[i + k]) >> 31) << k;
    p0[i >> 3] = static_cast<uint8_t>(b);
  }
}

void pack15_from32(const float* v, uint32_t n, uint8_t* p1) {
  pack15([v](uint32_t i) { return static_cast<uint64_t>((f32_bits(v[i]) >> 16) & 0x7FFFu); }, n, p1);
}

void pack16_from32(const float* v, uint32_t n, int shift, uint8_t* out) {
  for (uint32_t i = 0; i < n; ++i) store_le(out + 2 * i, (f32_bits(v[i]) >> shift) & 0xFFFFu, 2);
}

void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n,
                  float* dst) {
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t top;
    if (value_layout) {
      top = static_cast<uint32_t>(load_le(p1 + 2 * i, 2));
    } else {
      top = (head_bit(p0, i) << 15) | field15(p1, i);
    }
    dst[i] = bits_f32((top << 16) | static_cast<uint32_t>(load_le(p2 + 2 * i, 2)));
  }
}

void fill_heads(const uint8_t* p0, uint32_t begin, uint32_t end, float if_set, float if_clear, float* dst) {
  for (uint32_t i = begin; i < end; ++i) dst[i - begin] = head_bit(p0, i) ? if_set : if_clear;
}

void random_heads(uint64_t key, uint32_t first, const float* v, uint32_t n, float clip, bool sd, uint8_t* p0) {
  const float two_l = 2.0f * clip;
  for (uint32_t i = 0; i < n; i += 8) {
    uint32_t byte = 0;
    for (uint32_t k = 0; k < 8 && i + k < n; ++k) {
      // max(NaN, -L) is -L here, as in the vector code (its max returns the second operand).
      const float x = std::min(std::isnan(v[i + k]) ? -clip : std::max(v[i + k], -clip), clip);
      const float u = rng_uniform(key, first + i + k);
      const bool head = sd ? x + (2.0f * u - 1.0f) * clip > 0.0f : u * two_l < clip + x;
      byte |= static_cast<uint32_t>(head) << k;
    }
    p0[i >> 3] = static_cast<uint8_t>(byte);
  }
}

void widen16(const uint16_t* v, uint32_t n, bool bf16, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = bf16 ? bf16_to_f32(v[i]) : f16_to_f32(v[i]);
}

void narrow16(const float* v, uint32_t n, bool bf16, uint16_t* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = bf16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
}

void pack16_sign_layout(const uint16_t* v, uint32_t n, uint8_t* p0, uint8_t* p1) {
  pack_sign_bits16(v, n, p0);
  pack15_from16(v, n, p1);
}

void assemble16(const uint8_t* p0, const uint8_t* p1, bool value_layout, uint32_t n, uint16_t* dst) {
  for (uint32_t i = 0; i < n; ++i) {
    if (value_layout) {
      dst[i] = static_cast<uint16_t>(load_le(p1 + 2 * i, 2));
    } else {
      dst[i] = static_cast<uint16_t>((head_bit(p0, i) << 15) | field15(p1, i));
    }
  }
}

double widen16_sum_squares(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite, double* sum_abs) {
  scalar::widen16(v, n, bf16, out);
  if (sum_abs != nullptr) *sum_abs = scalar::sum_abs(out, n);
  return scalar::sum_squares(out, n, all_finite);
}

void fill_heads16(const uint8_t* p0, uint32_t begin, uint32_t end, uint16_t if_set, uint16_t if_clear, uint16_t* dst) {
  for (uint32_t i = begin; i < end; ++i) dst[i - begin] = head_bit(p0, i) ? if_set : if_clear;
}

void pack_heads_sum_abs(const float* v, uint32_t n, uint8_t* p0, double lanes[8]) {
  pack_sign_bits32(v, n, p0);
  add_norm_lanes(v, 0, n, nullptr, lanes, nullptr);
}

void subtract_dither(uint64_t key, uint32_t first, uint32_t n, float clip, float* dst) {
  for (uint32_t i = 0; i < n; ++i) dst[i] -= (2.0f * rng_uniform(key, first + i) - 1.0f) * clip;
}

void add_norm_lanes(const float* v, uint32_t i, uint32_t n, double* sq, double* ab, bool* finite) {
  // Eight lanes keep the dependency chains short; a non-finite value is skipped (and
  // reported) so one NaN does not poison the scale of a whole row.
  for (; i < n; ++i) {
    const double x = v[i];
    if (sq != nullptr) {
      const bool ok = std::isfinite(v[i]);
      *finite = *finite && ok;
      sq[i & 7] += ok ? x * x : 0.0;
    }
    if (ab != nullptr) ab[i & 7] += std::fabs(x);
  }
}

double sum_squares(const float* v, uint32_t n, bool* all_finite) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  *all_finite = true;
  add_norm_lanes(v, 0, n, acc, nullptr, all_finite);
  return lanes_total(acc);
}

double sum_abs(const float* v, uint32_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  add_norm_lanes(v, 0, n, nullptr, acc, nullptr);
  return lanes_total(acc);
}

void pack_bins(const float* v, uint32_t n, float threshold, uint8_t* pq, BinSums* sums) {
  double in_abs[8] = {0, 0, 0, 0, 0, 0, 0, 0}, out_abs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t outer = 0, finite = 0;
  for (uint32_t i = 0; i < n; i += 8) {
    uint32_t byte = 0;
    for (uint32_t k = 0; k < 8 && i + k < n; ++k) {
      const float a = std::fabs(v[i + k]);
      const bool out = a > threshold;                            // false for NaN
      const bool fin = a <= std::numeric_limits<float>::max();  // false for NaN and inf
      byte |= static_cast<uint32_t>(out) << k;
      out_abs[k] += out && fin ? a : 0.0;
      in_abs[k] += !out && fin ? a : 0.0;
      outer += out && fin;
      finite += fin;
    }
    pq[i >> 3] = static_cast<uint8_t>(byte);
  }
  sums->outer_abs += lanes_total(out_abs);
  sums->inner_abs += lanes_total(in_abs);
  sums->outer += outer;
  sums->inner += finite - outer;
}

void fill_heads2(const uint8_t* p0, const uint8_t* pq, uint32_t begin, uint32_t end, uint32_t nq,
                 const BinLevels& levels, float* dst) {
  for (uint32_t i = begin; i < end; ++i) {
    const float level = i < nq ? (head_bit(pq, i) ? levels.outer : levels.inner) : levels.unknown;
    dst[i - begin] = head_bit(p0, i) ? -level : level;
  }
}

}  // namespace scalar

const char* kernels_isa() {
  switch (isa()) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}
void kernels_force_scalar(bool force) { g_force_scalar.store(force); }

void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2, Norms* norms) {
  TRIM_PICK_F32(pack_f32_sign_layout, v, n, p0, p1, p2, norms);
}
// The rht pass: AVX-512 CPUs with VPCLMULQDQ fold with their own 16-wide pass where n % 8 == 0;
// everywhere else but scalar it is AVX2's, on AVX-512 CPUs too: its one read of both rows (and
// its CRC fold) beat the AVX-512 kernels' composition, three passes plus the CRC read back (Xeon
// with AVX-512 and VPCLMULQDQ: encode 4.10 -> 4.59 GB/s, and 4.23 -> 4.72 with the 16-wide pass).
namespace {
bool rht_pass_avx2() {
  static const bool avx2 = avx2::supported();
  return avx2 && isa() != Isa::kScalar;
}
}  // namespace
void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                  Norms* norms) {
  if (rht_pass_avx2()) return avx2::pack_f32_rht(rot, v, n, p0, p1, p2, norms);
  pack_f32_sign_layout(rot, n, p0, nullptr, nullptr, norms);
  pack16_from32(v, n, 16, p1);
  pack16_from32(v, n, 0, p2);
}
bool pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                      Norms* norms, uint32_t regs[2], size_t ahead) {
  static const bool crc = avx2::crc_supported(), crc512 = avx512::crc_supported();
  if (isa() == Isa::kAvx512 && crc512 && n % 8 == 0) {
    avx512::pack_f32_rht_crc(rot, v, n, p0, p1, p2, norms, regs, ahead);
    return true;
  }
  if (!rht_pass_avx2() || !crc || n % 8 != 0) {
    pack_f32_rht(rot, v, n, p0, p1, p2, norms);
    return false;
  }
  avx2::pack_f32_rht_crc(rot, v, n, p0, p1, p2, norms, regs);
  return true;
}
void pack16_from32(const float* v, uint32_t n, int shift, uint8_t* out) {
  TRIM_PICK_F32(pack16_from32, v, n, shift, out);
}
void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n,
                  float* dst) {
  TRIM_PICK_F32(assemble_f32, p0, p1, p2, value_layout, n, dst);
}
void fill_heads(const uint8_t* p0, uint32_t begin, uint32_t end, float if_set, float if_clear, float* dst) {
  TRIM_PICK_F32(fill_heads, p0, begin, end, if_set, if_clear, dst);
}
double sum_squares(const float* v, uint32_t n, bool* all_finite) {
  return TRIM_PICK_F32(sum_squares, v, n, all_finite);
}
double sum_abs(const float* v, uint32_t n) { return TRIM_PICK_F32(sum_abs, v, n); }
// The 16-bit dtypes' kernels (planes_kernels_16.inc) have all three ISAs too.
void widen16(const uint16_t* v, uint32_t n, bool bf16, float* out) { TRIM_PICK_F32(widen16, v, n, bf16, out); }
void narrow16(const float* v, uint32_t n, bool bf16, uint16_t* out) { TRIM_PICK_F32(narrow16, v, n, bf16, out); }
void pack16_sign_layout(const uint16_t* v, uint32_t n, uint8_t* p0, uint8_t* p1) {
  TRIM_PICK_F32(pack16_sign_layout, v, n, p0, p1);
}
void assemble16(const uint8_t* p0, const uint8_t* p1, bool value_layout, uint32_t n, uint16_t* dst) {
  TRIM_PICK_F32(assemble16, p0, p1, value_layout, n, dst);
}
double widen16_sum_squares(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite, double* sum_abs) {
  return TRIM_PICK_F32(widen16_sum_squares, v, n, bf16, out, all_finite, sum_abs);
}
void fill_heads16(const uint8_t* p0, uint32_t begin, uint32_t end, uint16_t if_set, uint16_t if_clear, uint16_t* dst) {
  TRIM_PICK_F32(fill_heads16, p0, begin, end, if_set, if_clear, dst);
}
void pack_heads_sum_abs(const float* v, uint32_t n, uint8_t* p0, double lanes[8]) {
  TRIM_PICK_F32(pack_heads_sum_abs, v, n, p0, lanes);
}
void random_heads(uint64_t key, uint32_t first, const float* v, uint32_t n, float clip, bool sd, uint8_t* p0) {
  vector_path() ? avx512::random_heads(key, first, v, n, clip, sd, p0)
                : scalar::random_heads(key, first, v, n, clip, sd, p0);
}
void pack_bins(const float* v, uint32_t n, float threshold, uint8_t* pq, BinSums* sums) {
  vector_path() ? avx512::pack_bins(v, n, threshold, pq, sums) : scalar::pack_bins(v, n, threshold, pq, sums);
}
void fill_heads2(const uint8_t* p0, const uint8_t* pq, uint32_t begin, uint32_t end, uint32_t nq,
                 const BinLevels& levels, float* dst) {
  vector_path() ? avx512::fill_heads2(p0, pq, begin, end, nq, levels, dst)
                : scalar::fill_heads2(p0, pq, begin, end, nq, levels, dst);
}
void subtract_dither(uint64_t key, uint32_t first, uint32_t n, float clip, float* dst) {
  vector_path() ? avx512::subtract_dither(key, first, n, clip, dst) : scalar::subtract_dither(key, first, n, clip, dst);
}

// The scalar 16-bit kernels' building blocks and the 15-bit stream decode: portable only.
void pack_sign_bits16(const uint16_t* v, uint32_t n, uint8_t* p0) {
  for (uint32_t i = 0; i < n; i += 8) {
    uint32_t b = 0;
    for (uint32_t k = 0; k < 8 && i + k < n; ++k) b |= static_cast<uint32_t>(v[i + k] >> 15) << k;
    p0[i >> 3] = static_cast<uint8_t>(b);
  }
}

void pack15_from16(const uint16_t* v, uint32_t n, uint8_t* p1) {
  pack15([v](uint32_t i) { return static_cast<uint64_t>(v[i] & 0x7FFFu); }, n, p1);
}

// The wire is little-endian; so are the hosts we build for, where u16 arrays copy as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "planes.cc assumes a little-endian host");

void pack16_from16(const uint16_t* v, uint32_t n, uint8_t* out) { std::memcpy(out, v, 2 * static_cast<size_t>(n)); }

void unpack15(const uint8_t* p1, uint32_t n, uint16_t* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8, p1 += 15) {
    const uint64_t lo = load_le(p1, 8), hi = load_le(p1 + 8, 7);
    out[i + 0] = static_cast<uint16_t>(lo & 0x7FFF);
    out[i + 1] = static_cast<uint16_t>((lo >> 15) & 0x7FFF);
    out[i + 2] = static_cast<uint16_t>((lo >> 30) & 0x7FFF);
    out[i + 3] = static_cast<uint16_t>((lo >> 45) & 0x7FFF);
    out[i + 4] = static_cast<uint16_t>(((lo >> 60) | (hi << 4)) & 0x7FFF);
    out[i + 5] = static_cast<uint16_t>((hi >> 11) & 0x7FFF);
    out[i + 6] = static_cast<uint16_t>((hi >> 26) & 0x7FFF);
    out[i + 7] = static_cast<uint16_t>((hi >> 41) & 0x7FFF);
  }
  // Remaining fields: read exactly the bytes that hold them.
  for (uint32_t k = 0; i < n; ++i, ++k) out[i] = static_cast<uint16_t>(field15(p1, k));
}

void unpack16(const uint8_t* p, uint32_t n, uint16_t* out) { std::memcpy(out, p, 2 * static_cast<size_t>(n)); }

}  // namespace trim::codec

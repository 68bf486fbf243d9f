// AVX2 path of the FWHT (see fwht_kernel.h for the schedule, fwht.h for the contract). Compiled
// for AVX2 and FMA by the pragma below, not by global flags; only called where the CPU has both.
#include <cstddef>
#include <cstdint>

#include "codec/fwht_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

// Standard headers above, so none of their inline functions is compiled for AVX2 here.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#include "codec/fwht_kernel.h"

namespace trim::codec::detail {
namespace {

struct VAvx2 {
  using Reg = __m256;
  static constexpr int kLog2W = 3, kMaxK1 = 3, kMaxK = 3, kLog2Block = 12, kLog2Block2 = 17;
  static TRIM_FWHT_INLINE Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static TRIM_FWHT_INLINE void store(float* p, Reg x) { _mm256_storeu_ps(p, x); }
  static TRIM_FWHT_INLINE Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static TRIM_FWHT_INLINE Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static TRIM_FWHT_INLINE Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static TRIM_FWHT_INLINE Reg set1(float f) { return _mm256_set1_ps(f); }
  // Shift sign bit l of the byte into bit 31 of lane l, keep only bit 31, xor.
  static TRIM_FWHT_INLINE Reg flip(Reg x, uint64_t bits) {
    const int byte = static_cast<int>(bits & 0xFF);
    const __m256i shifted = _mm256_sllv_epi32(_mm256_set1_epi32(byte),
                                              _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24));
    const __m256i mask = _mm256_and_si256(shifted, _mm256_set1_epi32(INT32_MIN));
    return _mm256_xor_ps(x, _mm256_castsi256_ps(mask));
  }
  // The 8 registers of a 64-float group from one sign word: each 32-bit half broadcast once,
  // then per register one variable shift brings bit 8j + l to bit 31 of lane l (3 ops a
  // register where flip spends 3 more extracting, moving and broadcasting its byte).
  static constexpr bool kWordFlips = true;
  static constexpr bool kFixedStrides = true;  // rht_forward 2^15: 0.59 -> 0.50 ns/element (d99982d)
  static TRIM_FWHT_INLINE void flip64(Reg* v, uint64_t word) {
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(word)), hi = _mm256_set1_epi32(static_cast<int>(word >> 32));
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const int b = 8 * (j & 3);  // the register's first bit within its half
      const __m256i counts = _mm256_setr_epi32(31 - b, 30 - b, 29 - b, 28 - b, 27 - b, 26 - b, 25 - b, 24 - b);
      const __m256i m = _mm256_and_si256(_mm256_sllv_epi32(j < 4 ? lo : hi, counts), sign);
      v[j] = _mm256_xor_ps(v[j], _mm256_castsi256_ps(m));
    }
  }
  // Bits i .. i + 7 of the stream (i a multiple of 8): the 32-bit word holding them broadcast
  // straight from memory (a load, no byte extract or move), shifted into bit 31 of each lane.
  static TRIM_FWHT_INLINE Reg flip_at(Reg x, const uint64_t* bits, size_t i) {
    const __m256i word =
        _mm256_broadcastd_epi32(_mm_loadu_si32(reinterpret_cast<const uint32_t*>(bits) + (i >> 5)));
    const __m256i counts = _mm256_sub_epi32(_mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24),
                                            _mm256_set1_epi32(static_cast<int>(i & 31)));
    const __m256i m = _mm256_and_si256(_mm256_sllv_epi32(word, counts), _mm256_set1_epi32(INT32_MIN));
    return _mm256_xor_ps(x, _mm256_castsi256_ps(m));
  }
  // Stage h: lane l becomes x * 1 + partner (bit h of l clear: a + b) or x * -1 + partner
  // (set: b's partner a, plus -b). One rounding of an exact sum: the bits of a + b and a - b,
  // one uop fewer than negating first. (The cross-register adds stay adds: as FMAs they were
  // slower on a Xeon, 0.46 -> 0.51 ns/element.)
  template <int T>
  static TRIM_FWHT_INLINE Reg inreg(Reg x) {
    constexpr int kLanes = T == 0 ? 0xAA : T == 1 ? 0xCC : 0xF0;  // lanes with bit T set
    const Reg sgn = _mm256_blend_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(-1.0f), kLanes);
    if constexpr (T == 0) return _mm256_fmadd_ps(x, sgn, _mm256_permute_ps(x, 0xB1));
    if constexpr (T == 1) return _mm256_fmadd_ps(x, sgn, _mm256_permute_ps(x, 0x4E));
    return _mm256_fmadd_ps(x, sgn, _mm256_permute2f128_ps(x, x, 0x01));
  }
};

}  // namespace

void fwht_run_avx2(const float* in, float* out, int log2n, const uint64_t* sign_in,
                   const uint64_t* sign_out, float scale) {
  if (log2n < VAvx2::kLog2W) return fwht_run_scalar(in, out, log2n, sign_in, sign_out, scale);
  fwht_run<VAvx2>(in, out, log2n, {sign_in, sign_out, scale, size_t{1} << log2n});
}

}  // namespace trim::codec::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

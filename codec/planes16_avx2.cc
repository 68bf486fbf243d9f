// AVX2 (+BMI2) versions of the 16-bit dtype kernels (planes_kernels_16.inc) for CPUs without
// AVX-512: bf16 and fp16 widening (with the row's norms) and narrowing, the sign layout's planes
// 0+1, rht's heads with their l1 lanes, head-only estimates. Integer arithmetic only (no F16C):
// each result is its scalar twin's (planes.cc, types.h) to the bit, NaN payloads and subnormals
// included, whatever MXCSR says (tests/planes16_test.cc).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "codec/planes.h"

#define TRIM_AVX2 __attribute__((target("avx2,bmi,bmi2")))

namespace trim::codec::avx2 {
namespace {

TRIM_AVX2 inline __m256i c32(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }

// fp16 -> fp32 of 8 values (zero-extended to u32 lanes), as f16_to_f32: the exponent rebiased
// in place; inf/NaN keep every mantissa bit; a subnormal m * 2^-24 is (2^-14 + m 2^-24) - 2^-14,
// both normal floats and the difference exact, so no rounding mode or DAZ/FTZ can change it.
TRIM_AVX2 inline __m256i f16_to_f32x8(__m256i h) {
  const __m256i exp_field = c32(0x1Fu << 23);
  __m256i o = _mm256_slli_epi32(_mm256_and_si256(h, c32(0x7FFF)), 13);
  const __m256i e = _mm256_and_si256(o, exp_field);
  o = _mm256_add_epi32(o, c32(112u << 23));
  o = _mm256_add_epi32(o, _mm256_and_si256(_mm256_cmpeq_epi32(e, exp_field), c32(112u << 23)));  // 255
  const __m256 sub = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(o, c32(1u << 23))),
                                   _mm256_castsi256_ps(c32(113u << 23)));
  o = _mm256_blendv_epi8(o, _mm256_castps_si256(sub), _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
  return _mm256_or_si256(o, _mm256_slli_epi32(_mm256_and_si256(h, c32(0x8000)), 16));
}

// fp32 bits -> bf16 in the low 16 bits of each lane, as f32_to_bf16.
TRIM_AVX2 inline __m256i f32_to_bf16x8(__m256i u) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, c32(0x7FFFFFFF)), c32(0x7F800000));
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i round = _mm256_add_epi32(c32(0x7FFF), _mm256_and_si256(hi, c32(1)));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, round), 16);
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, c32(0x40)), nan);
}

// fp32 bits -> fp16 in the low 16 bits of each lane, as f32_to_f16: every case computed, the
// right one blended in. abs is at most 0x7FFFFFFF, so signed compares order it.
TRIM_AVX2 inline __m256i f32_to_f16x8(__m256i u) {
  const __m256i abs = _mm256_and_si256(u, c32(0x7FFFFFFF));
  // Normal: rebias 127 -> 15, round to nearest even at bit 13.
  __m256i r = _mm256_sub_epi32(abs, c32(0x38000000));
  const __m256i round = _mm256_add_epi32(c32(0xFFF), _mm256_and_si256(_mm256_srli_epi32(r, 13), c32(1)));
  r = _mm256_srli_epi32(_mm256_add_epi32(r, round), 13);
  // Subnormal: the significand shifted right by 126 - exp (14..24 where it matters; clamped to
  // 31, which gives 0 as any shift past 24 must), rounded to nearest even.
  const __m256i shift = _mm256_min_epu32(_mm256_sub_epi32(c32(126), _mm256_srli_epi32(abs, 23)), c32(31));
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(abs, c32(0x7FFFFF)), c32(0x800000));
  const __m256i half_m1 = _mm256_sub_epi32(_mm256_sllv_epi32(c32(1), _mm256_sub_epi32(shift, c32(1))), c32(1));
  const __m256i odd = _mm256_and_si256(_mm256_srlv_epi32(mant, shift), c32(1));
  const __m256i sub = _mm256_srlv_epi32(_mm256_add_epi32(mant, _mm256_add_epi32(half_m1, odd)), shift);
  r = _mm256_blendv_epi8(r, sub, _mm256_cmpgt_epi32(c32(0x38800000), abs));
  r = _mm256_blendv_epi8(r, c32(0x7C00), _mm256_cmpgt_epi32(abs, c32(0x477FEFFF)));
  const __m256i nan = _mm256_or_si256(c32(0x7E00), _mm256_and_si256(_mm256_srli_epi32(abs, 13), c32(0x3FF)));
  r = _mm256_blendv_epi8(r, nan, _mm256_cmpgt_epi32(abs, c32(0x7F800000)));
  return _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi32(u, 16), c32(0x8000)));
}

// Multipliers that move bit j of a 16-bit mask (broadcast) to bit 15 of lane j: 2^(15 - j).
TRIM_AVX2 inline __m256i head_to_bit15() {
  return _mm256_setr_epi16(-32768, 1 << 14, 1 << 13, 1 << 12, 1 << 11, 1 << 10, 1 << 9, 1 << 8, 1 << 7, 1 << 6, 1 << 5,
                           1 << 4, 1 << 3, 1 << 2, 1 << 1, 1);
}

// Sixteen u32 lanes (a: elements 0..7, b: 8..15), each below 2^16, as 16 u16 in order.
TRIM_AVX2 inline __m256i narrow_u32x16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
}

// The 15-bit fields (bits 14..0) of sixteen u16 lanes to the 30 bytes at p1: per 64-bit lane
// four fields shift together into 60 bits, per 128-bit half two such lanes join into 120 bits
// (15 bytes) as in planes_avx2.cc's pack15x8. more: p1[30] belongs to the next group (which
// rewrites it), so both halves go out as 16-byte stores; else exactly 30 bytes.
TRIM_AVX2 inline void pack15x16(__m256i h, uint8_t* p1, bool more) {
  __m256i v = _mm256_and_si256(h, _mm256_set1_epi64x(0x7FFF));
  v = _mm256_or_si256(v, _mm256_and_si256(_mm256_srli_epi64(h, 1), _mm256_set1_epi64x(0x7FFFll << 15)));
  v = _mm256_or_si256(v, _mm256_and_si256(_mm256_srli_epi64(h, 2), _mm256_set1_epi64x(0x7FFFll << 30)));
  v = _mm256_or_si256(v, _mm256_and_si256(_mm256_srli_epi64(h, 3), _mm256_set1_epi64x(0x7FFFll << 45)));
  // Per half (a, b) -> (a | b << 60, b >> 4).
  v = _mm256_or_si256(_mm256_blend_epi32(v, _mm256_srli_epi64(v, 4), 0xCC),
                      _mm256_bsrli_epi128(_mm256_slli_epi64(v, 60), 8));
  if (more) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p1), _mm256_castsi256_si128(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p1 + 15), _mm256_extracti128_si256(v, 1));
  } else {
    alignas(32) uint8_t tmp[32];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), _mm256_castsi256_si128(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(tmp + 15), _mm256_extracti128_si256(v, 1));
    std::memcpy(p1, tmp, 30);
  }
}

// Eight fp32 values into double lanes (lo: lanes 0..3, hi: 4..7) as the scalar norms add them:
// a square that is not below inf (the value was NaN or inf) adds +0.0 and clears ok; |x| adds
// to ab when kAbs. A float's square is exact in double, so no lane can overflow on finite data.
struct NormLanes {
  __m256d sq_lo, sq_hi, ab_lo, ab_hi, ok;
};

template <bool kSq, bool kAbs>
TRIM_AVX2 inline void norm_lanes_add8(__m256 x, NormLanes* a) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  if (kSq) {
    const __m256d inf = _mm256_set1_pd(__builtin_inf());
    const __m256d sq_lo = _mm256_mul_pd(lo, lo), sq_hi = _mm256_mul_pd(hi, hi);
    const __m256d fin_lo = _mm256_cmp_pd(sq_lo, inf, _CMP_LT_OQ), fin_hi = _mm256_cmp_pd(sq_hi, inf, _CMP_LT_OQ);
    a->sq_lo = _mm256_add_pd(a->sq_lo, _mm256_and_pd(sq_lo, fin_lo));
    a->sq_hi = _mm256_add_pd(a->sq_hi, _mm256_and_pd(sq_hi, fin_hi));
    a->ok = _mm256_and_pd(a->ok, _mm256_and_pd(fin_lo, fin_hi));
  }
  if (kAbs) {
    const __m256d sign = _mm256_set1_pd(-0.0);
    a->ab_lo = _mm256_add_pd(a->ab_lo, _mm256_andnot_pd(sign, lo));
    a->ab_hi = _mm256_add_pd(a->ab_hi, _mm256_andnot_pd(sign, hi));
  }
}

TRIM_AVX2 inline __m256 widen8(const uint16_t* v, bool bf16) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)));
  return _mm256_castsi256_ps(bf16 ? _mm256_slli_epi32(h, 16) : f16_to_f32x8(h));
}

template <bool kAbs>
TRIM_AVX2 double widen16_norms(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite,
                               double* sum_abs) {
  const __m256d z = _mm256_setzero_pd();
  NormLanes a{z, z, z, z, _mm256_castsi256_pd(_mm256_set1_epi64x(-1))};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = widen8(v + i, bf16);
    _mm256_storeu_ps(out + i, f);
    norm_lanes_add8<true, kAbs>(f, &a);
  }
  alignas(32) double sq[8], ab[8];
  _mm256_store_pd(sq, a.sq_lo);
  _mm256_store_pd(sq + 4, a.sq_hi);
  _mm256_store_pd(ab, a.ab_lo);
  _mm256_store_pd(ab + 4, a.ab_hi);
  bool finite = _mm256_movemask_pd(a.ok) == 0xF;
  if (i < n) {
    scalar::widen16(v + i, n - i, bf16, out + i);
    scalar::add_norm_lanes(out, i, n, sq, kAbs ? ab : nullptr, &finite);
  }
  *all_finite = finite;
  if (kAbs) *sum_abs = lanes_total(ab);
  return lanes_total(sq);
}

}  // namespace

TRIM_AVX2 double widen16_sum_squares(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite,
                                     double* sum_abs) {
  return sum_abs != nullptr ? widen16_norms<true>(v, n, bf16, out, all_finite, sum_abs)
                            : widen16_norms<false>(v, n, bf16, out, all_finite, nullptr);
}

TRIM_AVX2 void pack_heads_sum_abs(const float* v, uint32_t n, uint8_t* p0, double lanes[8]) {
  const __m256d z = _mm256_setzero_pd();
  NormLanes a{z, z, _mm256_loadu_pd(lanes), _mm256_loadu_pd(lanes + 4), z};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(v + i);
    p0[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(x));
    norm_lanes_add8<false, true>(x, &a);
  }
  _mm256_storeu_pd(lanes, a.ab_lo);
  _mm256_storeu_pd(lanes + 4, a.ab_hi);
  if (i < n) {
    scalar::pack_sign_bits32(v + i, n - i, p0 + i / 8);
    scalar::add_norm_lanes(v, i, n, nullptr, lanes, nullptr);
  }
}

// Whole 16-element groups of plane 0 (two bytes: lane j's bit moved to bit 15 by a multiply)
// select with a blend; the edges of [begin, end) in scalar.
TRIM_AVX2 void fill_heads16(const uint8_t* p0, uint32_t begin, uint32_t end, uint16_t if_set, uint16_t if_clear,
                            uint16_t* dst) {
  const uint32_t lo = ((begin + 15) & ~15u) < end ? (begin + 15) & ~15u : end;
  const uint32_t hi = lo + ((end - lo) & ~15u);
  scalar::fill_heads16(p0, begin, lo, if_set, if_clear, dst);
  const __m256i set = _mm256_set1_epi16(static_cast<int16_t>(if_set));
  const __m256i clear = _mm256_set1_epi16(static_cast<int16_t>(if_clear));
  for (uint32_t i = lo; i < hi; i += 16) {
    uint16_t m;
    std::memcpy(&m, p0 + i / 8, 2);
    const __m256i bit15 = _mm256_mullo_epi16(_mm256_set1_epi16(static_cast<int16_t>(m)), head_to_bit15());
    // srai: bit 15 across the lane, a byte mask for the blend.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (i - begin)),
                        _mm256_blendv_epi8(clear, set, _mm256_srai_epi16(bit15, 15)));
  }
  scalar::fill_heads16(p0, hi, end, if_set, if_clear, dst + (hi - begin));
}

TRIM_AVX2 void widen16(const uint16_t* v, uint32_t n, bool bf16, float* out) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, widen8(v + i, bf16));
  if (i < n) scalar::widen16(v + i, n - i, bf16, out + i);
}

TRIM_AVX2 void narrow16(const float* v, uint32_t n, bool bf16, uint16_t* out) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 8));
    const __m256i h = bf16 ? narrow_u32x16(f32_to_bf16x8(a), f32_to_bf16x8(b))
                           : narrow_u32x16(f32_to_f16x8(a), f32_to_f16x8(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  if (i < n) scalar::narrow16(v + i, n - i, bf16, out + i);
}

// 16 values a step: plane 0 from the signs (saturating to bytes keeps them), plane 1 by
// pack15x16. Every group starts on a byte of both planes, so the scalar tail can take over.
TRIM_AVX2 void pack16_sign_layout(const uint16_t* v, uint32_t n, uint8_t* p0, uint8_t* p1) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    // Bytes 0..7: the signs of elements 0..7, bytes 16..23: of 8..15.
    const uint32_t m = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_packs_epi16(h, _mm256_setzero_si256())));
    const uint16_t signs = static_cast<uint16_t>((m & 0xFFu) | ((m >> 8) & 0xFF00u));
    std::memcpy(p0 + i / 8, &signs, 2);
    pack15x16(h, p1 + (15 * i) / 8, i + 16 < n);
  }
  if (i < n) scalar::pack16_sign_layout(v + i, n - i, p0 + i / 8, p1 + (15 * i) / 8);
}

// Sign layout, 16 values a step, one group of eight fields (15 bytes) per 128-bit half. Field j
// of a group starts at bit s = 15j % 8 of byte b = 15j / 8; in 16-bit lanes, with x the bytes
// (b, b+1) and y (b+1, b+2), the field is (y << (8 - s) | (x << (8 - s)) >> 8) & 0x7FFF: two
// multiplies by 2^(8 - s) stand in for the per-lane shifts AVX2 lacks for 16-bit lanes.
TRIM_AVX2 void assemble16(const uint8_t* p0, const uint8_t* p1, bool value_layout, uint32_t n, uint16_t* dst) {
  if (value_layout) {
    if (n != 0) std::memcpy(dst, p1, 2 * static_cast<size_t>(n));  // an empty plane may be null
    return;
  }
  alignas(32) int8_t xi[32], yi[32];
  alignas(32) int16_t mul[16];
  for (int j = 0; j < 8; ++j) {
    const int b = (15 * j) / 8;
    xi[2 * j] = static_cast<int8_t>(b);
    xi[2 * j + 1] = yi[2 * j] = static_cast<int8_t>(b + 1);
    // Byte 15 lies past the group; field 7 (s = 1) does not need it: read it as zero.
    yi[2 * j + 1] = static_cast<int8_t>(b + 2 > 14 ? -1 : b + 2);
    mul[j] = static_cast<int16_t>(1 << (8 - (15 * j) % 8));
  }
  std::memcpy(xi + 16, xi, 16);
  std::memcpy(yi + 16, yi, 16);
  std::memcpy(mul + 8, mul, 16);
  const __m256i xs = _mm256_load_si256(reinterpret_cast<const __m256i*>(xi));
  const __m256i ys = _mm256_load_si256(reinterpret_cast<const __m256i*>(yi));
  const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(mul));
  const __m256i head_mul = head_to_bit15();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint8_t* g = p1 + (15 * i) / 8;
    __m256i bytes;
    if (i + 17 <= n) {  // the stream holds byte 30 (the next group's): two 16-byte loads
      bytes = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(g + 15), reinterpret_cast<const __m128i*>(g));
    } else {
      alignas(32) uint8_t tmp[32] = {};
      std::memcpy(tmp, g, 15);
      std::memcpy(tmp + 16, g + 15, 15);
      bytes = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
    }
    const __m256i x = _mm256_mullo_epi16(_mm256_shuffle_epi8(bytes, xs), m);
    const __m256i y = _mm256_mullo_epi16(_mm256_shuffle_epi8(bytes, ys), m);
    const __m256i field = _mm256_and_si256(_mm256_or_si256(y, _mm256_srli_epi16(x, 8)), _mm256_set1_epi16(0x7FFF));
    uint16_t signs;
    std::memcpy(&signs, p0 + i / 8, 2);
    const __m256i head = _mm256_and_si256(_mm256_mullo_epi16(_mm256_set1_epi16(static_cast<int16_t>(signs)), head_mul),
                                          _mm256_set1_epi16(static_cast<int16_t>(0x8000)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_or_si256(field, head));
  }
  if (i < n) scalar::assemble16(p0 + i / 8, p1 + (15 * i) / 8, false, n - i, dst + i);
}

}  // namespace trim::codec::avx2

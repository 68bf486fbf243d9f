// AVX-512 (+BMI2) versions of the plane kernels. Compiled with function-level target
// attributes (the build has no -march) and only called when supported() says so. Each one
// must produce exactly what its scalar twin in planes.cc produces (tests/planes_test.cc).
// GCC 12 reports its own _mm*_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); the kernels below read no uninitialized data.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "codec/planes.h"
#include "codec/types.h"

#define TRIM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,bmi,bmi2")))

namespace trim::codec::avx512 {

bool supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("bmi2");
}

TRIM_AVX512 void pack_sign_bits32(const float* v, uint32_t n, uint8_t* p0) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint16_t m = _mm512_movepi32_mask(_mm512_castps_si512(_mm512_loadu_ps(v + i)));
    std::memcpy(p0 + i / 8, &m, 2);
  }
  if (i < n) scalar::pack_sign_bits32(v + i, n - i, p0 + i / 8);
}

TRIM_AVX512 void pack16_from32(const float* v, uint32_t n, int shift, uint8_t* out) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i x = _mm512_castps_si512(_mm512_loadu_ps(v + i));
    if (shift != 0) x = _mm512_srli_epi32(x, 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), _mm512_cvtepi32_epi16(x));
  }
  if (i < n) scalar::pack16_from32(v + i, n - i, shift, out + 2 * i);
}


// Sixteen 15-bit fields (the low 15 bits of each u16 lane of f) to 30 bytes at p1: per
// 64-bit lane, four fields shift together into 60 bits; lanes 1 and 3 shift 4 bits more, and
// two byte permutes place the lanes at bit offsets 0, 60, 120 and 180. 256-bit registers:
// Zen 4 runs them at full rate.
struct Pack15Consts {
  __m256i idx_a, idx_b;
  __mmask32 mask_a, mask_b;
};

TRIM_AVX512 Pack15Consts pack15_consts() {
  alignas(32) uint8_t a[32], b[32];
  for (int p = 0; p < 32; ++p) {
    a[p] = static_cast<uint8_t>(p < 8 ? p : (p >= 15 && p < 23) ? 16 + p - 15 : 0);
    b[p] = static_cast<uint8_t>((p >= 7 && p < 15) ? 8 + p - 7 : (p >= 22 && p < 30) ? 24 + p - 22 : 0);
  }
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(a)), _mm256_load_si256(reinterpret_cast<const __m256i*>(b)),
          0xFFu | (0xFFu << 15), (0xFFu << 7) | (0xFFu << 22)};
}

TRIM_AVX512 inline void pack15x16(__m256i f, const Pack15Consts& k, uint8_t* p1) {
  constexpr int kOrAnd = 0xF8;  // ternary logic: a | (b & c)
  __m256i v = _mm256_and_si256(f, _mm256_set1_epi64x(0x7FFF));
  v = _mm256_ternarylogic_epi64(v, _mm256_srli_epi64(f, 1), _mm256_set1_epi64x(0x7FFFll << 15), kOrAnd);
  v = _mm256_ternarylogic_epi64(v, _mm256_srli_epi64(f, 2), _mm256_set1_epi64x(0x7FFFll << 30), kOrAnd);
  v = _mm256_ternarylogic_epi64(v, _mm256_srli_epi64(f, 3), _mm256_set1_epi64x(0x7FFFll << 45), kOrAnd);
  v = _mm256_sllv_epi64(v, _mm256_set_epi64x(4, 0, 4, 0));
  const __m256i bytes = _mm256_or_si256(_mm256_maskz_permutexvar_epi8(k.mask_a, k.idx_a, v),
                                        _mm256_maskz_permutexvar_epi8(k.mask_b, k.idx_b, v));
  _mm256_mask_storeu_epi8(p1, 0x3FFFFFFFu, bytes);
}

TRIM_AVX512 void pack15_from32(const float* v, uint32_t n, uint8_t* p1) {
  const Pack15Consts k = pack15_consts();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(v + i));
    pack15x16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)), k, p1 + (15 * i) / 8);
  }
  if (i < n) scalar::pack15_from32(v + i, n - i, p1 + (15 * i) / 8);
}

// 16 fp32 values per step, read once: plane 0 from the sign mask, plane 2 by narrowing,
// plane 1 by pack15x16, and the norms in fp32 lanes.
TRIM_AVX512 void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                                      Norms* norms) {
  const Pack15Consts k = pack15_consts();
  // fp32 lanes suffice here: a call covers one packet (~1000 values, ~64 per lane), and the
  // per-packet totals are summed in double by the caller's Norms.
  __m512 sq = _mm512_setzero_ps(), ab = _mm512_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xf = _mm512_loadu_ps(v + i);
    const __m512i x = _mm512_castps_si512(xf);
    sq = _mm512_fmadd_ps(xf, xf, sq);
    ab = _mm512_add_ps(ab, _mm512_abs_ps(xf));
    const uint16_t signs = _mm512_movepi32_mask(x);
    std::memcpy(p0 + i / 8, &signs, 2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p2 + 2 * i), _mm512_cvtepi32_epi16(x));
    pack15x16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)), k, p1 + (15 * i) / 8);
  }
  if (i < n) {
    // The last r < 16 values with masks: zero lanes add nothing to the norms and leave the
    // unused bits of the last bytes zero, as the reference does.
    const uint32_t r = n - i;
    const __mmask16 m = static_cast<__mmask16>((1u << r) - 1);
    const __m512 xf = _mm512_maskz_loadu_ps(m, v + i);
    const __m512i x = _mm512_castps_si512(xf);
    sq = _mm512_fmadd_ps(xf, xf, sq);
    ab = _mm512_add_ps(ab, _mm512_abs_ps(xf));
    const uint16_t signs = _mm512_movepi32_mask(x);
    const uint32_t sign_bytes = (r + 7) / 8, p1_bytes = (15 * r + 7) / 8;
    std::memcpy(p0 + i / 8, &signs, sign_bytes);
    _mm256_mask_storeu_epi16(p2 + 2 * i, m, _mm512_cvtepi32_epi16(x));
    alignas(32) uint8_t tmp[32];
    pack15x16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)), k, tmp);
    std::memcpy(p1 + (15 * i) / 8, tmp, p1_bytes);
    i = n;
  }
  alignas(64) float sq_lanes[16], ab_lanes[16];
  _mm512_store_ps(sq_lanes, sq);
  _mm512_store_ps(ab_lanes, ab);
  double sum_sq = 0.0, sum_ab = 0.0;
  for (int k = 0; k < 16; ++k) {
    sum_sq += sq_lanes[k];
    sum_ab += ab_lanes[k];
  }
  bool finite = true;
  if (!(std::isfinite(sum_sq) && std::isfinite(sum_ab))) {
    // A NaN or inf, or finite values whose squares overflow fp32 (|x| > 1.8e19): redo this
    // packet in double, which also tells the two apart.
    sum_sq = sum_squares(v, i, &finite);
    sum_ab = sum_abs(v, i);
  }
  norms->sum_sq += sum_sq;
  norms->sum_abs += sum_ab;
  norms->finite = norms->finite && finite;
}

// 16 elements per step. Sign layout: field j of the group sits at bit 15j of 30 bytes; a
// byte permute brings bytes [15j/8, 15j/8 + 4) into lane j and a variable shift aligns it.
TRIM_AVX512 void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n,
                              float* dst) {
  alignas(64) uint8_t idx_bytes[64];
  alignas(64) uint32_t shifts[16];
  for (int j = 0; j < 16; ++j) {
    for (int b = 0; b < 4; ++b) idx_bytes[4 * j + b] = static_cast<uint8_t>((15 * j) / 8 + b);
    shifts[j] = (15 * j) % 8;
  }
  const __m512i idx = _mm512_load_si512(idx_bytes);
  const __m512i shift = _mm512_load_si512(shifts);
  const __m512i field_mask = _mm512_set1_epi32(0x7FFF);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p2 + 2 * i)));
    __m512i top;
    if (value_layout) {
      top = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + 2 * i)));
    } else {
      const __m512i bytes = _mm512_maskz_loadu_epi8(0x3FFFFFFFull, p1 + (15 * i) / 8);
      top = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi8(idx, bytes), shift), field_mask);
      uint16_t signs;
      std::memcpy(&signs, p0 + i / 8, 2);
      top = _mm512_mask_or_epi32(top, signs, top, _mm512_srli_epi32(sign_bit, 16));
    }
    _mm512_storeu_si512(dst + i, _mm512_or_si512(_mm512_slli_epi32(top, 16), low));
  }
  // i is a multiple of 16, so every plane of the tail starts on a byte boundary.
  if (i < n) {
    scalar::assemble_f32(p0 + i / 8, p1 + (value_layout ? 2 * i : (15 * i) / 8), p2 + 2 * i, value_layout, n - i,
                         dst + i);
  }
}

TRIM_AVX512 void fill_heads(const uint8_t* p0, uint32_t begin, uint32_t end, float if_set, float if_clear,
                            float* dst) {
  uint32_t i = begin;
  const uint32_t aligned = (begin + 15) & ~15u;
  if (aligned > i) {
    const uint32_t stop = aligned < end ? aligned : end;
    scalar::fill_heads(p0, i, stop, if_set, if_clear, dst);
    i = stop;
  }
  const __m512 set = _mm512_set1_ps(if_set), clear = _mm512_set1_ps(if_clear);
  for (; i + 16 <= end; i += 16) {
    uint16_t m;
    std::memcpy(&m, p0 + i / 8, 2);
    _mm512_storeu_ps(dst + (i - begin), _mm512_mask_blend_ps(m, clear, set));
  }
  if (i < end) scalar::fill_heads(p0, i, end, if_set, if_clear, dst + (i - begin));
}

TRIM_AVX512 double sum_squares(const float* v, uint32_t n, bool* all_finite) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  __mmask16 bad = 0;
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exp_mask), exp_mask);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    a0 = _mm512_fmadd_pd(lo, lo, a0);
    a1 = _mm512_fmadd_pd(hi, hi, a1);
  }
  // A NaN or inf anywhere: the reference skips it; it is rare, so redo the row that way.
  if (bad != 0) return scalar::sum_squares(v, n, all_finite);
  bool tail_finite = true;
  const double tail = scalar::sum_squares(v + i, n - i, &tail_finite);
  *all_finite = tail_finite;
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1)) + tail;
}

TRIM_AVX512 double sum_abs(const float* v, uint32_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_abs_ps(_mm512_loadu_ps(v + i));
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1)) + scalar::sum_abs(v + i, n - i);
}

}  // namespace trim::codec::avx512

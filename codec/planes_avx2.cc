// AVX2 (+BMI2) versions of the fp32 hot-path plane kernels (planes_kernels_f32.inc), for CPUs
// without AVX-512 (Zen 2/3, client Intel); the rht pass runs on AVX-512 CPUs too. Compiled with
// function-level target attributes (the build has no -march) and only called when supported() says so. Each one must produce exactly
// what its scalar twin in planes.cc produces, norms included (tests/planes_test.cc). No FMA: the
// norms multiply then add, as the reference does.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own _mm*_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive, as in planes_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "codec/packet.h"
#include "codec/planes.h"

#define TRIM_AVX2 __attribute__((target("avx2,bmi,bmi2")))
// The rht pass that also folds its planes' CRC (crc_supported()).
#define TRIM_AVX2_CRC __attribute__((target("avx2,bmi,bmi2,pclmul,vpclmulqdq,sse4.2")))

namespace trim::codec::avx2 {

bool supported() {
  __builtin_cpu_init();
  // The target attribute lets the compiler use BMI1/2 in the scalar parts too.
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}

namespace {

// The 16 bytes at p, or only the first 15 (the 16th as zero) where the 16th may lie past the
// buffer: a group of eight 15-bit fields is 15 bytes.
TRIM_AVX2 inline __m128i load_group15(const uint8_t* p, bool sixteen_ok) {
  if (sixteen_ok) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  alignas(16) uint8_t tmp[16] = {};
  std::memcpy(tmp, p, 15);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
}

// Lane j (of 8) gets bit j of `byte` in its sign bit (bit 31), the other bits garbage.
TRIM_AVX2 inline __m256i head_bits8(uint8_t byte) {
  return _mm256_sllv_epi32(_mm256_set1_epi32(byte), _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24));
}

// The low 16 bits of the 8 u32 lanes of x as 8 little-endian u16 (16 bytes).
TRIM_AVX2 inline __m128i low16x8(__m256i x) {
  const __m256i m = _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF));  // packus saturates: mask first
  return _mm_packus_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
}

// Eight 15-bit fields (the low 15 bits of each u32 lane of f, the rest zero) to the 15 bytes at
// p1: pairs of lanes join in 64-bit lanes (30 bits), pairs of those in the low quadword of each
// 128-bit half (60 bits), and the two halves into 120 bits. sixteen_ok: p1[15] may be written
// (the next group overwrites it), else exactly 15 bytes.
TRIM_AVX2 inline void pack15x8(__m256i f, uint8_t* p1, bool sixteen_ok) {
  __m256i v = _mm256_and_si256(_mm256_or_si256(f, _mm256_srli_epi64(f, 17)), _mm256_set1_epi64x(0x3FFFFFFF));
  v = _mm256_or_si256(v, _mm256_slli_epi64(_mm256_bsrli_epi128(v, 8), 30));
  const __m128i t = _mm256_castsi256_si128(_mm256_permute4x64_epi64(v, 0x08));  // (a, b): 60 bits each
  // (a | b << 60, b >> 4): b's 60 bits start at bit 60 of the 128.
  const __m128i out = _mm_or_si128(_mm_blend_epi32(t, _mm_srli_epi64(t, 4), 0x0C),
                                   _mm_bsrli_si128(_mm_slli_epi64(t, 60), 8));
  if (sixteen_ok) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p1), out);
  } else {
    alignas(16) uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), out);
    std::memcpy(p1, tmp, 15);
  }
}

// The norms in the scalar reference's exact order (planes.cc): element i goes to double lane
// i % 8 (lo: lanes 0..3, hi: 4..7), each lane adds in element order, and the lanes combine in
// the fixed tree of lanes_total. A float's square is exact in double; a non-finite value adds
// +0.0 to its lane, as the reference's `ok ? x * x : 0.0` does, so no fallback is needed.
struct Lanes {
  __m256d sq_lo, sq_hi, ab_lo, ab_hi;
  __m256d ok_lo, ok_hi;  // all ones while every square so far was finite
};

TRIM_AVX2 inline Lanes lanes_zero() {
  const __m256d z = _mm256_setzero_pd(), ones = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
  return Lanes{z, z, z, z, ones, ones};
}

TRIM_AVX2 inline void add_sq4(__m256d x, __m256d* acc, __m256d* ok) {
  const __m256d sq = _mm256_mul_pd(x, x);
  const __m256d finite = _mm256_cmp_pd(sq, _mm256_set1_pd(__builtin_inf()), _CMP_LT_OQ);  // NaN, inf: no
  *acc = _mm256_add_pd(*acc, _mm256_and_pd(sq, finite));
  *ok = _mm256_and_pd(*ok, finite);
}

TRIM_AVX2 inline void add_abs4(__m256d x, __m256d* acc) {
  *acc = _mm256_add_pd(*acc, _mm256_andnot_pd(_mm256_set1_pd(-0.0), x));
}

// Adds 8 values (elements 8k .. 8k+7 of the run) to the squares and/or the magnitudes.
template <bool kSq, bool kAbs>
TRIM_AVX2 inline void lanes_add8(__m256 x, Lanes* a) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
  if (kSq) {
    add_sq4(lo, &a->sq_lo, &a->ok_lo);
    add_sq4(hi, &a->sq_hi, &a->ok_hi);
  }
  if (kAbs) {
    add_abs4(lo, &a->ab_lo);
    add_abs4(hi, &a->ab_hi);
  }
}

// The totals after the scalar elements [i, n) of the same run (i a multiple of 8); sum_sq or
// sum_ab null: not wanted (then finite is not either).
TRIM_AVX2 inline void lanes_finish(const Lanes& a, const float* v, uint32_t i, uint32_t n, double* sum_sq,
                                   double* sum_ab, bool* finite) {
  alignas(32) double sq[8], ab[8];
  _mm256_store_pd(sq, a.sq_lo);
  _mm256_store_pd(sq + 4, a.sq_hi);
  _mm256_store_pd(ab, a.ab_lo);
  _mm256_store_pd(ab + 4, a.ab_hi);
  bool ok = _mm256_movemask_pd(_mm256_and_pd(a.ok_lo, a.ok_hi)) == 0xF;
  scalar::add_norm_lanes(v, i, n, sum_sq != nullptr ? sq : nullptr, sum_ab != nullptr ? ab : nullptr, &ok);
  if (sum_sq != nullptr) *sum_sq = lanes_total(sq), *finite = ok;
  if (sum_ab != nullptr) *sum_ab = lanes_total(ab);
}

}  // namespace

TRIM_AVX2 void pack16_from32(const float* v, uint32_t n, int shift, uint8_t* out) {
  const __m128i count = _mm_cvtsi32_si128(shift);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_srl_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), count);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), low16x8(x));
  }
  if (i < n) scalar::pack16_from32(v + i, n - i, shift, out + 2 * i);
}

// 8 fp32 values per step, read once: plane 0 from the sign mask, plane 2 by narrowing, plane 1
// by pack15x8, and the norms in the reference's lanes. p1 == nullptr: plane 0 and the norms
// only (rht heads).
TRIM_AVX2 void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                                    Norms* norms) {
  Lanes acc = lanes_zero();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xf = _mm256_loadu_ps(v + i);
    lanes_add8<true, true>(xf, &acc);
    p0[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(xf));
    if (p1 == nullptr) continue;
    const __m256i x = _mm256_castps_si256(xf);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p2 + 2 * i), low16x8(x));
    pack15x8(_mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x7FFF)), p1 + (15 * i) / 8, i + 8 < n);
  }
  // i is a multiple of 8: every plane of the tail starts on a byte boundary.
  if (i < n) {
    scalar::pack_sign_bits32(v + i, n - i, p0 + i / 8);
    if (p1 != nullptr) {
      scalar::pack15_from32(v + i, n - i, p1 + (15 * i) / 8);
      scalar::pack16_from32(v + i, n - i, 0, p2 + 2 * i);
    }
  }
  double sum_sq, sum_ab;
  bool finite;
  lanes_finish(acc, v, i, n, &sum_sq, &sum_ab, &finite);
  norms->sum_sq += sum_sq;
  norms->sum_abs += sum_ab;
  norms->finite = norms->finite && finite;
}

// rht: 8 elements per step, both inputs read once. The norms skip the reference's finiteness
// masks: a square of a finite float is exact in double and 2^32 of them stay far below double's
// range, so the lanes end finite exactly when every value was, and then hold the reference's
// sums (same lanes, same order). Plane 1+2: one byte shuffle splits each 128-bit half into its
// low and high u16s, a quadword permute gathers the eight of each. kCrc: the two planes' 16-byte
// blocks also fold into one register pair (plane 2 in the low half, plane 1 in the high), each
// half multiplied forward by x^128 and the next block added, as crc32c_fold's last step does, so
// the planes' CRC registers come out of the pass that writes them (n a multiple of 8).
template <bool kCrc>
TRIM_AVX2_CRC inline void pack_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1,
                                   uint8_t* p2, Norms* norms, uint32_t regs[2]) {
  __m256d sq_lo = _mm256_setzero_pd(), sq_hi = sq_lo, ab_lo = sq_lo, ab_hi = sq_lo;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  __m256i crc = _mm256_setzero_si256(), k16 = crc;
  if constexpr (kCrc) {
    static const detail::CrcFoldConstants f16(16);
    k16 = _mm256_set_epi64x(static_cast<int64_t>(f16.high), static_cast<int64_t>(f16.low),
                            static_cast<int64_t>(f16.high), static_cast<int64_t>(f16.low));
  }
  uint32_t i = 0;
#pragma GCC unroll 4
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_loadu_ps(rot + i);
    p0[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(r));
    const __m256 a = _mm256_and_ps(r, abs_mask);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    sq_lo = _mm256_add_pd(sq_lo, _mm256_mul_pd(lo, lo));
    sq_hi = _mm256_add_pd(sq_hi, _mm256_mul_pd(hi, hi));
    ab_lo = _mm256_add_pd(ab_lo, lo);
    ab_hi = _mm256_add_pd(ab_hi, hi);
    const __m256i x = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), split), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p2 + 2 * i), _mm256_castsi256_si128(x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p1 + 2 * i), _mm256_extracti128_si256(x, 1));
    if constexpr (kCrc) {
      crc = _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(crc, k16, 0x00),
                                              _mm256_clmulepi64_epi128(crc, k16, 0x11)),
                             x);
    }
  }
  if constexpr (kCrc) {
    // A 16-byte message's CRC from a zero register is M(x) x^32 mod P: two crc32 steps.
    const __m128i c2 = _mm256_castsi256_si128(crc), c1 = _mm256_extracti128_si256(crc, 1);
    regs[0] = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(c1))),
                                                  static_cast<uint64_t>(_mm_extract_epi64(c1, 1))));
    regs[1] = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(c2))),
                                                  static_cast<uint64_t>(_mm_extract_epi64(c2, 1))));
  }
  if (i < n) {
    scalar::pack_sign_bits32(rot + i, n - i, p0 + i / 8);
    scalar::pack16_from32(v + i, n - i, 16, p1 + 2 * i);
    scalar::pack16_from32(v + i, n - i, 0, p2 + 2 * i);
  }
  alignas(32) double sq[8], ab[8];
  _mm256_store_pd(sq, sq_lo);
  _mm256_store_pd(sq + 4, sq_hi);
  _mm256_store_pd(ab, ab_lo);
  _mm256_store_pd(ab + 4, ab_hi);
  // All lanes finite <=> every square so far was (squares are >= 0: no inf - inf).
  const __m256d all = _mm256_add_pd(sq_lo, sq_hi);
  bool finite = _mm256_movemask_pd(_mm256_cmp_pd(all, _mm256_set1_pd(__builtin_inf()), _CMP_LT_OQ)) == 0xF;
  scalar::add_norm_lanes(rot, i, n, sq, ab, &finite);
  norms->sum_sq += lanes_total(sq);
  norms->sum_abs += lanes_total(ab);
  norms->finite = norms->finite && finite;
}

TRIM_AVX2 void pack_f32_rht(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                            Norms* norms) {
  pack_rht<false>(rot, v, n, p0, p1, p2, norms, nullptr);
}

bool crc_supported() {
  __builtin_cpu_init();
  return supported() && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("sse4.2");
}

TRIM_AVX2_CRC void pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1,
                                    uint8_t* p2, Norms* norms, uint32_t regs[2]) {
  pack_rht<true>(rot, v, n, p0, p1, p2, norms, regs);
}

// Sign layout, 8 elements per step: field j of a group sits at bit 15j of its 15 bytes; a byte
// shuffle (the group in both 128-bit halves) brings bytes [15j/8, 15j/8 + 3) into lane j and a
// variable shift aligns it.
TRIM_AVX2 void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n,
                            float* dst) {
  alignas(32) int8_t idx[32];
  for (int j = 0; j < 8; ++j) {
    for (int b = 0; b < 4; ++b) {
      const int byte = (15 * j) / 8 + b;
      // Byte 15 belongs to the next group (or lies past the stream): never needed, read as zero.
      idx[4 * j + b] = static_cast<int8_t>(b == 3 || byte > 14 ? -1 : byte);
    }
  }
  const __m256i shuf = _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
  const __m256i shifts = _mm256_setr_epi32(0, 7, 6, 5, 4, 3, 2, 1);  // (15 j) % 8
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p2 + 2 * i));
    __m256i x;
    if (value_layout) {
      const __m128i top = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 2 * i));
      x = _mm256_set_m128i(_mm_unpackhi_epi16(low, top), _mm_unpacklo_epi16(low, top));
    } else {
      // The 16th byte may be read where more fields follow (15 (i + 9) / 8 >= 15 i / 8 + 16).
      const __m256i group = _mm256_broadcastsi128_si256(load_group15(p1 + (15 * i) / 8, i + 9 <= n));
      const __m256i field = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(group, shuf), shifts),
                                             _mm256_set1_epi32(0x7FFF));
      const __m256i head = _mm256_and_si256(head_bits8(p0[i / 8]), _mm256_set1_epi32(INT32_MIN));
      x = _mm256_or_si256(_mm256_or_si256(head, _mm256_slli_epi32(field, 16)), _mm256_cvtepu16_epi32(low));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), x);
  }
  if (i < n) {
    scalar::assemble_f32(p0 + i / 8, p1 + (value_layout ? 2 * i : (15 * i) / 8), p2 + 2 * i, value_layout, n - i,
                         dst + i);
  }
}

TRIM_AVX2 void fill_heads(const uint8_t* p0, uint32_t begin, uint32_t end, float if_set, float if_clear,
                          float* dst) {
  // Whole bytes of plane 0 in [lo, hi); the elements around them in scalar.
  const uint32_t lo = ((begin + 7) & ~7u) < end ? (begin + 7) & ~7u : end;
  const uint32_t hi = lo + ((end - lo) & ~7u);
  scalar::fill_heads(p0, begin, lo, if_set, if_clear, dst);
  const __m256 set = _mm256_set1_ps(if_set), clear = _mm256_set1_ps(if_clear);
  for (uint32_t i = lo; i < hi; i += 8) {
    _mm256_storeu_ps(dst + (i - begin), _mm256_blendv_ps(clear, set, _mm256_castsi256_ps(head_bits8(p0[i / 8]))));
  }
  scalar::fill_heads(p0, hi, end, if_set, if_clear, dst + (hi - begin));
}

TRIM_AVX2 double sum_squares(const float* v, uint32_t n, bool* all_finite) {
  Lanes acc = lanes_zero();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) lanes_add8<true, false>(_mm256_loadu_ps(v + i), &acc);
  double sum_sq;
  lanes_finish(acc, v, i, n, &sum_sq, nullptr, all_finite);
  return sum_sq;
}

TRIM_AVX2 double sum_abs(const float* v, uint32_t n) {
  Lanes acc = lanes_zero();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) lanes_add8<false, true>(_mm256_loadu_ps(v + i), &acc);
  double sum_ab;
  lanes_finish(acc, v, i, n, nullptr, &sum_ab, nullptr);
  return sum_ab;
}

}  // namespace trim::codec::avx2

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
#include <limits>

#include "codec/packet.h"
#include "codec/planes.h"
#include "codec/rng.h"
#include "codec/types.h"

#define TRIM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,bmi,bmi2")))
// The rht pass with its CRC fold (crc_supported()).
#define TRIM_AVX512_CRC \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,bmi,bmi2,pclmul,vpclmulqdq,sse4.2,prfchw")))

namespace trim::codec::avx512 {

bool supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("bmi2");
}

bool crc_supported() {
  __builtin_cpu_init();
  return supported() && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("sse4.2");
}

// avx2::pack_f32_rht_crc's pass 16 elements a step: one word permute puts the 16 low halves
// (plane 2's 32 bytes) in the low 256 bits and the 16 high halves (plane 1's) above, so lanes
// 0/1 hold plane 2's even/odd 16-byte blocks and 2/3 plane 1's, and each lane folds by 32
// bytes; at the end even is folded by 16 more and the odd added: the serial fold's register.
// Half the shuffle and clmul uops of the 8-wide pass, which port 5 bounded.
TRIM_AVX512_CRC void pack_f32_rht_crc(const float* rot, const float* v, uint32_t n, uint8_t* p0, uint8_t* p1,
                                      uint8_t* p2, Norms* norms, uint32_t regs[2], size_t ahead) {
  // Words 0, 2, .., 30 (the low halves) then 1, 3, .., 31.
  alignas(64) static constexpr uint16_t kSplit[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                      1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  const __m512i split = _mm512_load_si512(kSplit);
  static const detail::CrcFoldConstants f16(16), f32(32);  // once: crc32c_xpow is a bit loop
  const __m512i k32 =
      _mm512_broadcast_i32x4(_mm_set_epi64x(static_cast<int64_t>(f32.high), static_cast<int64_t>(f32.low)));
  const __m256i k16 =
      _mm256_broadcastsi128_si256(_mm_set_epi64x(static_cast<int64_t>(f16.high), static_cast<int64_t>(f16.low)));
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512d sq = _mm512_setzero_pd(), ab = sq;
  __m512i crc = _mm512_setzero_si512();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_loadu_ps(rot + i);
    const uint16_t signs = _mm512_movepi32_mask(_mm512_castps_si512(r));
    std::memcpy(p0 + i / 8, &signs, 2);
    const __m512 a = _mm512_and_ps(r, abs_mask);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    sq = _mm512_fmadd_pd(lo, lo, sq);  // exact squares: one rounding, as multiply then add
    sq = _mm512_fmadd_pd(hi, hi, sq);
    ab = _mm512_add_pd(ab, lo);
    ab = _mm512_add_pd(ab, hi);
    if (ahead != 0) {
      // The stores wait on their lines' reads for ownership (the packet ring is mostly out of
      // L2 by the time it comes round again); asking for the next packet's lines now overlaps them.
      __builtin_prefetch(p1 + 2 * i + ahead, 1, 3);
      __builtin_prefetch(p2 + 2 * i + ahead, 1, 3);
    }
    const __m512i x = _mm512_permutexvar_epi16(split, _mm512_loadu_si512(v + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p2 + 2 * i), _mm512_castsi512_si256(x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p1 + 2 * i), _mm512_extracti64x4_epi64(x, 1));
    crc = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(crc, k32, 0x00), _mm512_clmulepi64_epi128(crc, k32, 0x11),
                                    x, 0x96);
  }
  // Lanes (0, 2) are the even blocks of planes 2 and 1, (1, 3) the odd: [plane 2, plane 1].
  const __m512i eo = _mm512_shuffle_i64x2(crc, crc, _MM_SHUFFLE(3, 1, 2, 0));
  const __m256i even = _mm512_castsi512_si256(eo);
  __m256i c = _mm256_ternarylogic_epi64(_mm256_clmulepi64_epi128(even, k16, 0x00),
                                        _mm256_clmulepi64_epi128(even, k16, 0x11),
                                        _mm512_extracti64x4_epi64(eo, 1), 0x96);
  if (i < n) {  // the last 8 (n is a multiple of 8): avx2's step
    const __m256 r = _mm256_loadu_ps(rot + i);
    p0[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(r));
    const __m512d lo = _mm512_cvtps_pd(_mm256_and_ps(r, _mm512_castps512_ps256(abs_mask)));
    sq = _mm512_fmadd_pd(lo, lo, sq);
    ab = _mm512_add_pd(ab, lo);
    const __m256i split8 = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    const __m256i x = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), split8), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p2 + 2 * i), _mm256_castsi256_si128(x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p1 + 2 * i), _mm256_extracti128_si256(x, 1));
    c = _mm256_ternarylogic_epi64(_mm256_clmulepi64_epi128(c, k16, 0x00), _mm256_clmulepi64_epi128(c, k16, 0x11), x,
                                  0x96);
  }
  // A 16-byte message's CRC from a zero register is M(x) x^32 mod P: two crc32 steps.
  const __m128i c2 = _mm256_castsi256_si128(c), c1 = _mm256_extracti128_si256(c, 1);
  regs[0] = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(c1))),
                                                static_cast<uint64_t>(_mm_extract_epi64(c1, 1))));
  regs[1] = static_cast<uint32_t>(_mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(c2))),
                                                static_cast<uint64_t>(_mm_extract_epi64(c2, 1))));
  // The squares are exact and >= 0: the lanes end finite exactly when every value was, and
  // then hold the reference's sums (same lanes, same order).
  const bool finite = _mm512_cmp_pd_mask(sq, _mm512_set1_pd(__builtin_inf()), _CMP_LT_OQ) == 0xFF;
  alignas(64) double sql[8], abl[8];
  _mm512_store_pd(sql, sq);
  _mm512_store_pd(abl, ab);
  norms->sum_sq += lanes_total(sql);
  norms->sum_abs += lanes_total(abl);
  norms->finite = norms->finite && finite;
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

// The norms in the scalar reference's exact order (planes.cc): element i goes to double lane
// i % 8, each lane adds in element order, and the lanes combine in a fixed tree. A float's
// square is exact in double, so an FMA rounds exactly as the reference's multiply-then-add.
// Bit-identical norms on every ISA (and on the GPU, cuda/) make the header's scale, and so
// every packet, the same wherever it is encoded.
struct Lanes8 {
  __m512d sq, ab;
};

TRIM_AVX512 inline Lanes8 lanes8_zero() { return Lanes8{_mm512_setzero_pd(), _mm512_setzero_pd()}; }

// Adds 16 values (elements 16k .. 16k+15 of the run: lanes 0..7 twice, in order).
TRIM_AVX512 inline void lanes8_add16(__m512 x, Lanes8* a) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  a->sq = _mm512_fmadd_pd(lo, lo, a->sq);
  a->sq = _mm512_fmadd_pd(hi, hi, a->sq);
  const __m512d sign = _mm512_set1_pd(-0.0);
  a->ab = _mm512_add_pd(a->ab, _mm512_andnot_pd(sign, lo));
  a->ab = _mm512_add_pd(a->ab, _mm512_andnot_pd(sign, hi));
}

// The lanes' totals after the scalar elements [i, n) of the same run (i a multiple of 8).
TRIM_AVX512 inline void lanes8_finish(const Lanes8& a, const float* v, uint32_t i, uint32_t n, double* sum_sq,
                                      double* sum_ab) {
  alignas(64) double sq[8], ab[8];
  _mm512_store_pd(sq, a.sq);
  _mm512_store_pd(ab, a.ab);
  for (; i < n; ++i) {
    const double x = v[i];
    sq[i & 7] += x * x;
    ab[i & 7] += std::fabs(x);
  }
  if (sum_sq != nullptr) *sum_sq = lanes_total(sq);
  if (sum_ab != nullptr) *sum_ab = lanes_total(ab);
}

TRIM_AVX512 inline __mmask16 non_finite16(__m512 x) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exp_mask), exp_mask);
}

// 16 fp32 values per step, read once: plane 0 from the sign mask, plane 2 by narrowing,
// plane 1 by pack15x16, and the norms in the reference's lanes. p1 == nullptr: plane 0 and
// the norms only (rht heads).
TRIM_AVX512 void pack_f32_sign_layout(const float* v, uint32_t n, uint8_t* p0, uint8_t* p1, uint8_t* p2,
                                      Norms* norms) {
  const Pack15Consts k = pack15_consts();
  Lanes8 acc = lanes8_zero();
  __mmask16 bad = 0;
  const bool tails = p1 != nullptr;
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 xf = _mm512_loadu_ps(v + i);
    const __m512i x = _mm512_castps_si512(xf);
    bad |= non_finite16(xf);
    lanes8_add16(xf, &acc);
    const uint16_t signs = _mm512_movepi32_mask(x);
    std::memcpy(p0 + i / 8, &signs, 2);
    if (!tails) continue;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p2 + 2 * i), _mm512_cvtepi32_epi16(x));
    pack15x16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)), k, p1 + (15 * i) / 8);
  }
  const uint32_t full = i;
  if (i < n) {
    // The last r < 16 values with masks, leaving the unused bits of the last bytes zero as the
    // reference does (their norms are added in scalar order below).
    const uint32_t r = n - i;
    const __mmask16 m = static_cast<__mmask16>((1u << r) - 1);
    const __m512 xf = _mm512_maskz_loadu_ps(m, v + i);
    const __m512i x = _mm512_castps_si512(xf);
    bad |= non_finite16(xf) & m;
    const uint16_t signs = _mm512_movepi32_mask(x);
    const uint32_t sign_bytes = (r + 7) / 8, p1_bytes = (15 * r + 7) / 8;
    std::memcpy(p0 + i / 8, &signs, sign_bytes);
    if (tails) {
      _mm256_mask_storeu_epi16(p2 + 2 * i, m, _mm512_cvtepi32_epi16(x));
      alignas(32) uint8_t tmp[32];
      pack15x16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)), k, tmp);
      std::memcpy(p1 + (15 * i) / 8, tmp, p1_bytes);
    }
  }
  double sum_sq, sum_ab;
  bool finite = true;
  if (bad != 0) {
    // A NaN or inf: the reference skips it in the squares (and reports it); rare, so redo the
    // packet that way.
    sum_sq = scalar::sum_squares(v, n, &finite);
    sum_ab = scalar::sum_abs(v, n);
  } else {
    lanes8_finish(acc, v, full, n, &sum_sq, &sum_ab);
  }
  norms->sum_sq += sum_sq;
  norms->sum_abs += sum_ab;
  norms->finite = norms->finite && finite;
}

TRIM_AVX512 void widen16(const uint16_t* v, uint32_t n, bool bf16, float* out) {
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
    _mm512_storeu_ps(out + i, f);
  }
  if (i < n) scalar::widen16(v + i, n - i, bf16, out + i);
}

// bf16: round to nearest even in integer arithmetic, NaN kept quiet (as f32_to_bf16);
// fp16: the hardware conversion, which rounds the same way.
TRIM_AVX512 void narrow16(const float* v, uint32_t n, bool bf16, uint16_t* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_loadu_ps(v + i);
    __m256i h;
    if (bf16) {
      const __m512i u = _mm512_castps_si512(f);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
      __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
      r = _mm512_srli_epi32(r, 16);
      r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
      h = _mm512_cvtepi32_epi16(r);
    } else {
      h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  if (i < n) scalar::narrow16(v + i, n - i, bf16, out + i);
}

TRIM_AVX512 void pack16_sign_layout(const uint16_t* v, uint32_t n, uint8_t* p0, uint8_t* p1) {
  const Pack15Consts k = pack15_consts();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    const uint16_t signs = _mm256_movepi16_mask(h);
    std::memcpy(p0 + i / 8, &signs, 2);
    pack15x16(h, k, p1 + (15 * i) / 8);
  }
  if (i < n) scalar::pack16_sign_layout(v + i, n - i, p0 + i / 8, p1 + (15 * i) / 8);
}

// 16 heads a step from any element: the 2 or 3 bytes of plane 0 that hold them, shifted to bit 0,
// are the blend's mask.
TRIM_AVX512 void fill_heads16(const uint8_t* p0, uint32_t begin, uint32_t end, uint16_t if_set, uint16_t if_clear,
                              uint16_t* dst) {
  const __m256i set = _mm256_set1_epi16(static_cast<int16_t>(if_set));
  const __m256i clear = _mm256_set1_epi16(static_cast<int16_t>(if_clear));
  uint32_t i = begin;
  for (; i + 16 <= end; i += 16) {
    uint32_t word = 0;
    std::memcpy(&word, p0 + i / 8, ((i & 7) + 23) / 8);
    const __mmask16 heads = static_cast<__mmask16>(word >> (i & 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (i - begin)), _mm256_mask_blend_epi16(heads, clear, set));
  }
  if (i < end) scalar::fill_heads16(p0, i, end, if_set, if_clear, dst + (i - begin));
}

// The composition of this ISA's kernels, which already read each value once per call.
TRIM_AVX512 double widen16_sum_squares(const uint16_t* v, uint32_t n, bool bf16, float* out, bool* all_finite,
                                       double* sum_abs) {
  widen16(v, n, bf16, out);
  if (sum_abs != nullptr) *sum_abs = avx512::sum_abs(out, n);
  return sum_squares(out, n, all_finite);
}

// 16 values a step: the sign mask, and |v| widened into lanes 0..7 twice, in element order.
TRIM_AVX512 void pack_heads_sum_abs(const float* v, uint32_t n, uint8_t* p0, double lanes[8]) {
  const __m512d sign = _mm512_set1_pd(-0.0);
  __m512d ab = _mm512_loadu_pd(lanes);
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    const uint16_t signs = _mm512_movepi32_mask(_mm512_castps_si512(x));
    std::memcpy(p0 + i / 8, &signs, 2);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    ab = _mm512_add_pd(ab, _mm512_andnot_pd(sign, lo));
    ab = _mm512_add_pd(ab, _mm512_andnot_pd(sign, hi));
  }
  _mm512_storeu_pd(lanes, ab);
  if (i < n) {
    scalar::pack_sign_bits32(v + i, n - i, p0 + i / 8);
    scalar::add_norm_lanes(v, i, n, nullptr, lanes, nullptr);
  }
}

// Sign layout, 16 elements per step: field j of a group sits at bit 15j of its 30 bytes; a
// byte permute brings bytes [15j/8, 15j/8 + 4) into lane j and a variable shift aligns it.
struct Unpack15Consts {
  __m512i idx, shift;
};

TRIM_AVX512 Unpack15Consts unpack15_consts() {
  alignas(64) uint8_t idx_bytes[64];
  alignas(64) uint32_t shifts[16];
  for (int j = 0; j < 16; ++j) {
    for (int b = 0; b < 4; ++b) idx_bytes[4 * j + b] = static_cast<uint8_t>((15 * j) / 8 + b);
    shifts[j] = (15 * j) % 8;
  }
  return {_mm512_load_si512(idx_bytes), _mm512_load_si512(shifts)};
}

// The 16-bit values (head bit << 15 | 15-bit field) of elements [i, i + 16) in 32-bit lanes.
TRIM_AVX512 inline __m512i signed_fields16(const uint8_t* p0, const uint8_t* p1, uint32_t i, const Unpack15Consts& k) {
  const __m512i bytes = _mm512_maskz_loadu_epi8(0x3FFFFFFFull, p1 + (15 * i) / 8);
  const __m512i x =
      _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi8(k.idx, bytes), k.shift), _mm512_set1_epi32(0x7FFF));
  uint16_t signs;
  std::memcpy(&signs, p0 + i / 8, 2);
  return _mm512_mask_or_epi32(x, signs, x, _mm512_set1_epi32(0x8000));
}

TRIM_AVX512 void assemble_f32(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, bool value_layout, uint32_t n,
                              float* dst) {
  const Unpack15Consts k = unpack15_consts();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i low = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p2 + 2 * i)));
    const __m512i top =
        value_layout ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + 2 * i)))
                     : signed_fields16(p0, p1, i, k);
    _mm512_storeu_si512(dst + i, _mm512_or_si512(_mm512_slli_epi32(top, 16), low));
  }
  // i is a multiple of 16, so every plane of the tail starts on a byte boundary.
  if (i < n) {
    scalar::assemble_f32(p0 + i / 8, p1 + (value_layout ? 2 * i : (15 * i) / 8), p2 + 2 * i, value_layout, n - i,
                         dst + i);
  }
}

TRIM_AVX512 void assemble16(const uint8_t* p0, const uint8_t* p1, bool value_layout, uint32_t n, uint16_t* dst) {
  if (value_layout) {
    if (n != 0) std::memcpy(dst, p1, 2 * static_cast<size_t>(n));  // an empty plane may be null
    return;
  }
  const Unpack15Consts k = unpack15_consts();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(signed_fields16(p0, p1, i, k)));
  }
  if (i < n) scalar::assemble16(p0 + i / 8, p1 + (15 * i) / 8, false, n - i, dst + i);
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

// 16 shared uniforms for elements [elem, elem + 16): rng_uniform vectorized, bit for bit
// (integer mixing, then an exact conversion of 24 bits).
TRIM_AVX512 inline __m512 uniforms16(uint64_t key, uint64_t elem) {
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(0x9E3779B97F4A7C15ull));
  const __m512i c1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull));
  const __m512i c2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull));
  const __m512i k = _mm512_set1_epi64(static_cast<long long>(key));
  __m256 half[2];
  for (int h = 0; h < 2; ++h) {
    const __m512i ctr = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(elem + 1 + 8 * h)),
                                         _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    __m512i z = _mm512_add_epi64(k, _mm512_mullo_epi64(ctr, golden));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    half[h] = _mm512_cvtepu64_ps(_mm512_srli_epi64(z, 40));
  }
  const __m512 u = _mm512_insertf32x8(_mm512_castps256_ps512(half[0]), half[1], 1);
  return _mm512_mul_ps(u, _mm512_set1_ps(5.9604644775390625e-8f));
}

TRIM_AVX512 void random_heads(uint64_t key, uint32_t first, const float* v, uint32_t n, float clip, bool sd,
                              uint8_t* p0) {
  const __m512 l = _mm512_set1_ps(clip), neg_l = _mm512_set1_ps(-clip), two_l = _mm512_set1_ps(2.0f * clip);
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f), zero = _mm512_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_loadu_ps(v + i), neg_l), l);
    const __m512 u = uniforms16(key, first + i);
    __mmask16 head;
    if (sd) {
      const __m512 eps = _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(two, u), one), l);
      head = _mm512_cmp_ps_mask(_mm512_add_ps(x, eps), zero, _CMP_GT_OQ);
    } else {
      head = _mm512_cmp_ps_mask(_mm512_mul_ps(u, two_l), _mm512_add_ps(l, x), _CMP_LT_OQ);
    }
    std::memcpy(p0 + i / 8, &head, 2);
  }
  if (i < n) scalar::random_heads(key, first + i, v + i, n - i, clip, sd, p0 + i / 8);
}

TRIM_AVX512 void subtract_dither(uint64_t key, uint32_t first, uint32_t n, float clip, float* dst) {
  const __m512 l = _mm512_set1_ps(clip), one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 eps = _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(two, uniforms16(key, first + i)), one), l);
    _mm512_storeu_ps(dst + i, _mm512_sub_ps(_mm512_loadu_ps(dst + i), eps));
  }
  if (i < n) scalar::subtract_dither(key, first + i, n - i, clip, dst + i);
}

TRIM_AVX512 double sum_squares(const float* v, uint32_t n, bool* all_finite) {
  Lanes8 acc = lanes8_zero();
  __mmask16 bad = 0;
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    bad |= non_finite16(x);
    lanes8_add16(x, &acc);
  }
  // A NaN or inf anywhere: the reference skips it; it is rare, so redo the row that way.
  if (bad != 0) return scalar::sum_squares(v, n, all_finite);
  for (uint32_t j = i; j < n; ++j) {
    if (!std::isfinite(v[j])) return scalar::sum_squares(v, n, all_finite);
  }
  *all_finite = true;
  double sum_sq;
  lanes8_finish(acc, v, i, n, &sum_sq, nullptr);
  return sum_sq;
}

TRIM_AVX512 double sum_abs(const float* v, uint32_t n) {
  Lanes8 acc = lanes8_zero();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) lanes8_add16(_mm512_loadu_ps(v + i), &acc);
  double sum_ab;
  lanes8_finish(acc, v, i, n, nullptr, &sum_ab);
  return sum_ab;
}

// 16 values a step: plane Q straight from the compare mask, each bin's magnitudes widened to
// double and added into the reference's lanes (element i and i + 8 into lane i mod 8, in order).
TRIM_AVX512 void pack_bins(const float* v, uint32_t n, float threshold, uint8_t* pq, BinSums* sums) {
  const __m512 t = _mm512_set1_ps(threshold), fmax = _mm512_set1_ps(std::numeric_limits<float>::max());
  __m512d in_acc = _mm512_setzero_pd(), out_acc = _mm512_setzero_pd();
  uint64_t outer = 0, finite = 0;
  for (uint32_t i = 0; i < n; i += 16) {
    const uint32_t r = n - i < 16 ? n - i : 16;
    const __mmask16 m = static_cast<__mmask16>(r == 16 ? 0xFFFFu : (1u << r) - 1);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, v + i));
    const __mmask16 out = _mm512_cmp_ps_mask(a, t, _CMP_GT_OQ);
    const __mmask16 fin = _mm512_cmp_ps_mask(a, fmax, _CMP_LE_OQ) & m;
    const __mmask16 fo = out & fin, fi = static_cast<__mmask16>(~out & fin);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1));
    out_acc = _mm512_mask_add_pd(out_acc, static_cast<__mmask8>(fo), out_acc, lo);
    in_acc = _mm512_mask_add_pd(in_acc, static_cast<__mmask8>(fi), in_acc, lo);
    out_acc = _mm512_mask_add_pd(out_acc, static_cast<__mmask8>(fo >> 8), out_acc, hi);
    in_acc = _mm512_mask_add_pd(in_acc, static_cast<__mmask8>(fi >> 8), in_acc, hi);
    outer += static_cast<uint64_t>(__builtin_popcount(fo));
    finite += static_cast<uint64_t>(__builtin_popcount(fin));
    const uint16_t bits = out;
    std::memcpy(pq + i / 8, &bits, (r + 7) / 8);
  }
  alignas(64) double o[8], in[8];
  _mm512_store_pd(o, out_acc);
  _mm512_store_pd(in, in_acc);
  sums->outer_abs += lanes_total(o);
  sums->inner_abs += lanes_total(in);
  sums->outer += outer;
  sums->inner += finite - outer;
}

TRIM_AVX512 void fill_heads2(const uint8_t* p0, const uint8_t* pq, uint32_t begin, uint32_t end, uint32_t nq,
                             const BinLevels& levels, float* dst) {
  uint32_t i = begin;
  const uint32_t aligned = (begin + 15) & ~15u;
  if (aligned > i) {
    const uint32_t stop = aligned < end ? aligned : end;
    scalar::fill_heads2(p0, pq, i, stop, nq, levels, dst);
    i = stop;
  }
  const __m512 outer = _mm512_set1_ps(levels.outer), inner = _mm512_set1_ps(levels.inner);
  const __m512 unknown = _mm512_set1_ps(levels.unknown), sign = _mm512_set1_ps(-0.0f);
  for (; i + 16 <= end; i += 16) {
    uint16_t s, q = 0;
    std::memcpy(&s, p0 + i / 8, 2);
    // Bins that arrived: [i, nq), read only as far as they did.
    const uint32_t have = nq > i ? (nq - i < 16 ? nq - i : 16) : 0;
    std::memcpy(&q, pq + i / 8, (have + 7) / 8);
    const __mmask16 known = static_cast<__mmask16>(have == 16 ? 0xFFFFu : (1u << have) - 1);
    __m512 level = _mm512_mask_blend_ps(static_cast<__mmask16>(q), inner, outer);
    level = _mm512_mask_blend_ps(known, unknown, level);
    _mm512_storeu_ps(dst + (i - begin), _mm512_mask_xor_ps(level, s, level, sign));
  }
  if (i < end) scalar::fill_heads2(p0, pq, i, end, nq, levels, dst + (i - begin));
}

}  // namespace trim::codec::avx512

// AVX2 combine kernels (codec/combine.h): fp32 for every op, bf16 for sum. Compiled with
// function-level target attributes and only called when combine_supported() says so. Each one
// gives exactly what the scalar reference gives (tests/combine_test.cc): IEEE add and multiply
// per lane, max/min with the reference's operand order (NaN and -0 cases included), bf16 rounded
// to nearest even with NaNs quieted as f32_to_bf16 does.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's false positives inside the intrinsic headers (as in planes_avx2.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "codec/combine.h"

#define TRIM_AVX2 __attribute__((target("avx2")))

namespace trim::codec::avx2 {

bool combine_supported() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

namespace {

// in + d and in * d with the received value as the first source: with two NaNs x86 returns the
// first source's payload, which is the reference's rule (nan_first in combine.cc; the test
// compares NaN bits too). Written in asm because the compiler may swap a commutative
// intrinsic's operands. std::max(in, d) is (in < d) ? d : in, which is _mm256_max_ps(d, in)
// (d > in ? d : in; the second operand on NaN); std::min(in, d) is (d < in) ? d : in,
// _mm256_min_ps(d, in): not commutative, so kept in order.
// a + b with a as the first source (its payload when both are NaN).
TRIM_AVX2 inline __m256 add_first(__m256 a, __m256 b) {
  __m256 r;
  asm("vaddps %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
  return r;
}
TRIM_AVX2 inline __m256 mul_first(__m256 a, __m256 b) {
  __m256 r;
  asm("vmulps %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
  return r;
}

template <RedOp kOp>
TRIM_AVX2 inline __m256 op8(__m256 in, __m256 d) {
  if constexpr (kOp == RedOp::kProd) return mul_first(in, d);
  if constexpr (kOp == RedOp::kMax) return _mm256_max_ps(d, in);
  if constexpr (kOp == RedOp::kMin) return _mm256_min_ps(d, in);
  return add_first(in, d);
}

template <RedOp kOp>
TRIM_AVX2 void f32(float* d, const float* in, size_t n) {
  size_t e = 0;
  for (; e + 16 <= n; e += 16) {
    const __m256 a = op8<kOp>(_mm256_loadu_ps(in + e), _mm256_loadu_ps(d + e));
    const __m256 b = op8<kOp>(_mm256_loadu_ps(in + e + 8), _mm256_loadu_ps(d + e + 8));
    _mm256_storeu_ps(d + e, a);
    _mm256_storeu_ps(d + e + 8, b);
  }
  for (; e + 8 <= n; e += 8) _mm256_storeu_ps(d + e, op8<kOp>(_mm256_loadu_ps(in + e), _mm256_loadu_ps(d + e)));
  combine_into_scalar(d + e, in + e, n - e, RedType::kF32, kOp);
}

TRIM_AVX2 inline __m256 widen_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// f32_to_bf16 on 8 lanes, packed into 8 halves.
TRIM_AVX2 inline __m128i narrow_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd)), 16);
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // each lane <= 0xFFFF: packus keeps it
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

TRIM_AVX2 void bf16_sum(uint16_t* d, const uint16_t* in, size_t n) {
  size_t e = 0;
  for (; e + 8 <= n; e += 8) {
    // The received value first (its NaN wins), as the reference's rule says.
    const __m256 s = add_first(widen_bf16(in + e), widen_bf16(d + e));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + e), narrow_bf16(s));
  }
  combine_into_scalar(d + e, in + e, n - e, RedType::kBF16, RedOp::kSum);
}

}  // namespace

bool combine_into(void* dst, const void* in, size_t n, RedType t, RedOp op) {
  if (t == RedType::kF32) {
    float* d = static_cast<float*>(dst);
    const float* p = static_cast<const float*>(in);
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg: f32<RedOp::kSum>(d, p, n); return true;
      case RedOp::kProd: f32<RedOp::kProd>(d, p, n); return true;
      case RedOp::kMax: f32<RedOp::kMax>(d, p, n); return true;
      case RedOp::kMin: f32<RedOp::kMin>(d, p, n); return true;
    }
  }
  if (t == RedType::kBF16 && (op == RedOp::kSum || op == RedOp::kAvg)) {
    bf16_sum(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(in), n);
    return true;
  }
  return false;
}

}  // namespace trim::codec::avx2

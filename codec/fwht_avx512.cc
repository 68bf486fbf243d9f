// AVX-512 path of the FWHT (see fwht_kernel.h for the schedule, fwht.h for the contract).
// Compiled for AVX-512 F/DQ/BW/VL and FMA by the pragma below, not by global flags; only called
// where the CPU has all five.
#include <cstddef>
#include <cstdint>

#include "codec/fwht_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

// Standard headers above, so none of their inline functions is compiled for AVX-512 here.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw")
#endif
#include "codec/fwht_kernel.h"

namespace trim::codec::detail {
namespace {

struct VAvx512 {
  using Reg = __m512;
  // 32 registers: 16 per group leave room for the shuffled copies and constants.
  static constexpr int kLog2W = 4, kMaxK1 = 4, kMaxK = 4, kLog2Block = 12, kLog2Block2 = 17;
  static TRIM_FWHT_INLINE Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static TRIM_FWHT_INLINE void store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
  static TRIM_FWHT_INLINE Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static TRIM_FWHT_INLINE Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static TRIM_FWHT_INLINE Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static TRIM_FWHT_INLINE Reg set1(float f) { return _mm512_set1_ps(f); }
  static TRIM_FWHT_INLINE Reg neg(Reg x, __mmask16 lanes) {
    return _mm512_mask_xor_ps(x, lanes, x, _mm512_set1_ps(-0.0f));
  }
  static constexpr bool kWordFlips = false;  // flip per register
  static constexpr bool kFixedStrides = false;
  static TRIM_FWHT_INLINE Reg flip(Reg x, uint64_t bits) {
    return neg(x, static_cast<__mmask16>(bits));
  }
  // The unmasked permute/shuffle intrinsics trip GCC 12's -Wmaybe-uninitialized (their
  // _mm512_undefined_ps source); the all-lanes masked forms emit the same instruction.
  template <int kImm>
  static TRIM_FWHT_INLINE Reg swap_in_lane(Reg x) {
    return _mm512_mask_permute_ps(x, 0xFFFF, x, kImm);
  }
  template <int kImm>
  static TRIM_FWHT_INLINE Reg swap_lanes(Reg x) {
    return _mm512_mask_shuffle_f32x4(x, 0xFFFF, x, x, kImm);
  }
  // Stage h: lane l becomes x * 1 + partner (bit h of l clear: a + b) or x * -1 + partner
  // (set: b's partner a, plus -b). One rounding of an exact sum: the bits of a + b and a - b,
  // one uop fewer than negating first.
  template <int T>
  static TRIM_FWHT_INLINE Reg inreg(Reg x) {
    constexpr __mmask16 kSet = T == 0 ? 0xAAAA : T == 1 ? 0xCCCC : T == 2 ? 0xF0F0 : 0xFF00;
    const Reg sgn = _mm512_mask_blend_ps(kSet, _mm512_set1_ps(1.0f), _mm512_set1_ps(-1.0f));
    if constexpr (T == 0) return _mm512_fmadd_ps(x, sgn, swap_in_lane<0xB1>(x));
    if constexpr (T == 1) return _mm512_fmadd_ps(x, sgn, swap_in_lane<0x4E>(x));
    if constexpr (T == 2) return _mm512_fmadd_ps(x, sgn, swap_lanes<0xB1>(x));
    return _mm512_fmadd_ps(x, sgn, swap_lanes<0x4E>(x));
  }
};

}  // namespace

void fwht_run_avx512(const float* in, float* out, int log2n, const uint64_t* sign_in,
                     const uint64_t* sign_out, float scale) {
  if (log2n < VAvx512::kLog2W) return fwht_run_scalar(in, out, log2n, sign_in, sign_out, scale);
  fwht_run<VAvx512>(in, out, log2n, {sign_in, sign_out, scale, size_t{1} << log2n});
}

}  // namespace trim::codec::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

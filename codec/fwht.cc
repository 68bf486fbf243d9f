// FWHT / RHT: the reference arithmetic, the baseline (SSE2) fast path and the run-time dispatch.
// The AVX2 and AVX-512 paths live in fwht_avx2.cc / fwht_avx512.cc; all three share the schedule
// in fwht_kernel.h. See fwht.h for the bit-exactness contract.
#include "codec/fwht.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "codec/fwht_internal.h"
#include "codec/fwht_kernel.h"

namespace trim::codec {
namespace {

bool bit_set(const uint64_t* bits, size_t i) { return bits && (bits[i >> 6] >> (i & 63)) & 1; }

void check_log2n(int log2n) {
  if (log2n < 0 || log2n > kFwhtMaxLog2n) {
    std::fprintf(stderr, "trim fwht: log2n=%d outside [0, %d]\n", log2n, kFwhtMaxLog2n);
    std::abort();
  }
}

// The defining arithmetic (fwht.h steps 1-4), radix-2, one stage at a time.
void reference_run(const float* in, float* out, int log2n, const uint64_t* sign_in,
                   const uint64_t* sign_out, float scale) {
  const size_t n = size_t{1} << log2n;
  for (size_t i = 0; i < n; ++i) out[i] = bit_set(sign_in, i) ? -in[i] : in[i];
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t g = 0; g < n; g += 2 * h) {
      for (size_t i = g; i < g + h; ++i) {
        const float a = out[i], b = out[i + h];
        out[i] = a + b;
        out[i + h] = a - b;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const float y = out[i] * scale;
    out[i] = bit_set(sign_out, i) ? -y : y;
  }
}

}  // namespace

float fwht_scale(int log2n) {
  check_log2n(log2n);
  // Built from bits, so it is exact by construction: 2^-k, or 2^-k times fp32(1/sqrt(2)) =
  // 0x3F3504F3, which is correctly rounded (1/sqrt(2) = 0.70710678118654752..., the float is
  // 0.707106769..., the next one up 0.707106828...) and stays so when scaled by 2^-k.
  const uint32_t k = static_cast<uint32_t>(log2n / 2);
  const uint32_t bits = (log2n & 1) ? 0x3F3504F3u - (k << 23) : (127u - k) << 23;
  float c;
  std::memcpy(&c, &bits, sizeof c);
  return c;
}

void fwht_reference(float* data, int log2n) {
  reference_run(data, data, log2n, nullptr, nullptr, fwht_scale(log2n));
}

void rht_forward_reference(const float* in, float* out, int log2n, const uint64_t* sign_bits) {
  reference_run(in, out, log2n, sign_bits, nullptr, fwht_scale(log2n));
}

void rht_inverse_reference(float* data, int log2n, const uint64_t* sign_bits) {
  reference_run(data, data, log2n, nullptr, sign_bits, fwht_scale(log2n));
}

namespace detail {
namespace {

#if defined(__SSE2__)
// Negation masks for 4 lanes, indexed by 4 sign bits.
struct Flip4 {
  alignas(16) uint32_t m[16][4];
  constexpr Flip4() : m{} {
    for (int b = 0; b < 16; ++b)
      for (int l = 0; l < 4; ++l) m[b][l] = (b >> l & 1) ? 0x80000000u : 0u;
  }
};
constexpr Flip4 kFlip4;

// Baseline x86-64 registers; what fwht_isa() calls "scalar" (no AVX needed).
struct VSse2 {
  using Reg = __m128;
  static constexpr int kLog2W = 2, kMaxK1 = 3, kMaxK = 3, kLog2Block = 12, kLog2Block2 = 17;
  static TRIM_FWHT_INLINE Reg load(const float* p) { return _mm_loadu_ps(p); }
  static TRIM_FWHT_INLINE void store(float* p, Reg x) { _mm_storeu_ps(p, x); }
  static TRIM_FWHT_INLINE Reg add(Reg a, Reg b) { return _mm_add_ps(a, b); }
  static TRIM_FWHT_INLINE Reg sub(Reg a, Reg b) { return _mm_sub_ps(a, b); }
  static TRIM_FWHT_INLINE Reg mul(Reg a, Reg b) { return _mm_mul_ps(a, b); }
  static TRIM_FWHT_INLINE Reg set1(float f) { return _mm_set1_ps(f); }
  static constexpr bool kWordFlips = false;  // flip per register
  static constexpr bool kFixedStrides = false;
  static TRIM_FWHT_INLINE Reg flip(Reg x, uint64_t bits) {
    const auto* m = kFlip4.m[bits & 15];
    return _mm_xor_ps(x, _mm_castsi128_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m))));
  }
  // Stage h: lane l becomes partner + x (bit h of l clear: b + a) or partner + (-x) (set:
  // a + (-b)). IEEE 754 defines a - b as a + (-b), so the bits equal a - b exactly.
  template <int T>
  static TRIM_FWHT_INLINE Reg inreg(Reg x) {
    const Reg neg = _mm_castsi128_ps(T == 0 ? _mm_setr_epi32(0, INT32_MIN, 0, INT32_MIN)
                                            : _mm_setr_epi32(0, 0, INT32_MIN, INT32_MIN));
    if constexpr (T == 0) return _mm_add_ps(_mm_shuffle_ps(x, x, 0xB1), _mm_xor_ps(x, neg));
    return _mm_add_ps(_mm_shuffle_ps(x, x, 0x4E), _mm_xor_ps(x, neg));
  }
};
#endif

struct Isa {
  const char* name;
  FwhtRunFn run;
};
constexpr Isa kIsas[] = {{"scalar", fwht_run_scalar}, {"avx2", fwht_run_avx2},
                         {"avx512", fwht_run_avx512}};

bool cpu_has(int isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // idempotent; needed if we run before libgcc's constructor
  // Both vector paths' in-register stages use FMA (exact there: one factor is +-1).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == 1) return avx2;
  if (isa == 2)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
  return isa == 0;
}

int best_isa() {
  static const int best = cpu_has(2) ? 2 : cpu_has(1) ? 1 : 0;
  return best;
}

std::atomic<int> g_forced{-1};

const Isa& current() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return kIsas[forced >= 0 ? forced : best_isa()];
}

int isa_index(const char* name) {
  for (int i = 0; i < 3; ++i)
    if (name && std::strcmp(name, kIsas[i].name) == 0) return i;
  return -1;
}

}  // namespace

void fwht_run_scalar(const float* in, float* out, int log2n, const uint64_t* sign_in,
                     const uint64_t* sign_out, float scale) {
#if defined(__SSE2__)
  if (log2n >= VSse2::kLog2W) return fwht_run<VSse2>(in, out, log2n, {sign_in, sign_out, scale, size_t{1} << log2n});
#endif
  reference_run(in, out, log2n, sign_in, sign_out, scale);
}

#if !(defined(__x86_64__) || defined(__i386__))
// Never selected off x86 (cpu_has says no); defined so the table links.
void fwht_run_avx2(const float* in, float* out, int log2n, const uint64_t* sign_in,
                   const uint64_t* sign_out, float scale) {
  fwht_run_scalar(in, out, log2n, sign_in, sign_out, scale);
}
void fwht_run_avx512(const float* in, float* out, int log2n, const uint64_t* sign_in,
                     const uint64_t* sign_out, float scale) {
  fwht_run_scalar(in, out, log2n, sign_in, sign_out, scale);
}
#endif

bool fwht_isa_supported(const char* isa) {
  const int i = isa_index(isa);
  return i >= 0 && cpu_has(i);
}

bool fwht_force_isa(const char* isa) {
  if (isa == nullptr) {
    g_forced.store(-1, std::memory_order_relaxed);
    return true;
  }
  const int i = isa_index(isa);
  if (i < 0 || !cpu_has(i)) return false;
  g_forced.store(i, std::memory_order_relaxed);
  return true;
}

}  // namespace detail

void fwht(float* data, int log2n) {
  const float c = fwht_scale(log2n);
  detail::current().run(data, data, log2n, nullptr, nullptr, c);
}

void rht_forward(const float* in, float* out, int log2n, const uint64_t* sign_bits) {
  const float c = fwht_scale(log2n);
  detail::current().run(in, out, log2n, sign_bits, nullptr, c);
}

void rht_inverse(float* data, int log2n, const uint64_t* sign_bits) {
  const float c = fwht_scale(log2n);
  detail::current().run(data, data, log2n, nullptr, sign_bits, c);
}

const char* fwht_isa() { return detail::current().name; }

}  // namespace trim::codec

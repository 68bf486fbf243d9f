// Codec vocabulary: schemes, element types, and exact fp16/bf16 <-> fp32 conversions.
// Header-only and free of host-only calls so the CUDA kernels (cuda/) share it.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TRIM_HD __host__ __device__ __forceinline__
#else
#define TRIM_HD inline
#endif

namespace trim::codec {

// Wire values (docs/PROTOCOL.md). The order of kNone..kRht matches NCCL_TRIM_SCHEME's choices.
// kRotated is never configured: it is rht for data the application rotated already (the
// nccl_trim comm hook's communicator), chosen per connection: the sign layout (the head is the
// value's own sign bit), scaled by |x|^2 / |x|_1 as rht is, decoded in the rotated domain.
enum class Scheme : uint8_t { kNone = 0, kSign = 1, kSq = 2, kSd = 3, kRht = 4, kRotated = 5 };
constexpr int kNumSchemes = 6;

enum class DType : uint8_t { kRaw = 0, kF32 = 1, kBF16 = 2, kF16 = 3 };
constexpr int kNumDTypes = 4;

const char* scheme_name(Scheme s);
const char* dtype_name(DType d);
bool parse_scheme(const char* text, Scheme* out);
bool parse_dtype(const char* text, DType* out);

TRIM_HD uint32_t dtype_bytes(DType d) {
  return d == DType::kF32 ? 4u : d == DType::kRaw ? 1u : 2u;
}

TRIM_HD uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
TRIM_HD float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16 = the high half of an fp32. Round to nearest even; NaN stays a quiet NaN.
TRIM_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
TRIM_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even, overflow to inf, subnormals kept.
TRIM_HD uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN, quiet, as F16C
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // result is subnormal (or zero) in fp16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 14..24: align to 2^-24 units
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}
TRIM_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_f32(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_f32(sign);
  // Subnormal: value = mant * 2^-24, exact in fp32.
  float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

}  // namespace trim::codec

// The buckets the rotation tests run (the host emulator of the GPU kernels, tests/rotate_emu_test.cc,
// and the GPU itself, tests/rotate_cuda_test.cc): odd sizes, row sizes and segments, inputs with
// denormals (and, in the `specials` variant, inf, NaN and fp16/bf16 extremes), and the bitwise
// comparison against the host twin.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/types.h"
#include "cuda/trim_rht.h"

namespace trim::testing {

struct RotateCase {
  uint64_t n;
  uint32_t row_log2;
  uint64_t segment_elems;  // 0 = one segment
  std::string name() const {
    return "n=" + std::to_string(n) + " row_log2=" + std::to_string(row_log2) +
           " segment=" + std::to_string(segment_elems);
  }
};

// Every combination of the sizes that exercise a kernel path: single elements, odd tails (the
// last row split into power-of-two blocks), exact rows, multi-row with a tail, many tiles.
inline std::vector<RotateCase> rotate_cases() {
  std::vector<RotateCase> out;
  for (uint64_t n : {1ull, 3ull, 7ull, 1000ull, 32768ull, 32769ull, 3077ull, 100003ull}) {
    for (uint32_t l : {0u, 3u, 10u, 15u}) {
      for (uint64_t seg : {0ull, 1000ull, 4097ull}) out.push_back(RotateCase{n, l, seg});
    }
  }
  return out;
}

inline const char* dtype_label(int dtype) {
  return dtype == TRIM_RHT_F32 ? "fp32" : dtype == TRIM_RHT_BF16 ? "bf16" : "fp16";
}
inline size_t dtype_size(int dtype) { return dtype == TRIM_RHT_F32 ? 4 : 2; }

// n elements of `dtype` as bytes: Gaussian values, every 97th one in fp32's denormal range, a run
// of 200 tiny ones (whole blocks whose results are denormal), and with `specials` +-inf, NaN,
// -0 and each format's extremes at a few places (each poisons only its own block).
inline std::vector<uint8_t> rotate_input(uint64_t n, int dtype, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    v[i] = dist(rng);
    if (i % 97 == 5) v[i] *= 0x1p-130f;
  }
  for (uint64_t i = n / 3; i < n && i < n / 3 + 200; ++i) v[i] = dist(rng) * 0x1p-140f;
  std::vector<uint8_t> out(n * dtype_size(dtype));
  for (uint64_t i = 0; i < n; ++i) {
    if (dtype == TRIM_RHT_F32) {
      std::memcpy(&out[4 * i], &v[i], 4);
    } else {
      const float x = dtype == TRIM_RHT_F16 ? v[i] * 0x1p-10f : v[i];  // fp16: some subnormals
      const uint16_t h = dtype == TRIM_RHT_BF16 ? codec::f32_to_bf16(x) : codec::f32_to_f16(x);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  if (!specials) return out;
  auto put = [&](uint64_t i, uint32_t f32, uint16_t bf16, uint16_t f16) {
    if (i >= n) return;
    if (dtype == TRIM_RHT_F32) {
      std::memcpy(&out[4 * i], &f32, 4);
    } else {
      const uint16_t h = dtype == TRIM_RHT_BF16 ? bf16 : f16;
      std::memcpy(&out[2 * i], &h, 2);
    }
  };
  put(0, 0x7F800000u, 0x7F80, 0x7C00);                 // +inf
  put(n - 1, 0x7FC00123u, 0x7FC1, 0x7E01);             // NaN with a payload
  put(n / 2, 0xFF800000u, 0xFF80, 0xFC00);             // -inf
  put(n / 2 + 9, 0x80000000u, 0x8000, 0x8000);         // -0
  put(2 * n / 3, 0x00000001u, 0x0001, 0x0001);         // the smallest denormal
  put(2 * n / 3 + 1, 0x7F7FFFFFu, 0x7F7F, 0x7BFF);     // the largest finite: fp16 sums overflow to inf
  put(2 * n / 3 + 2, 0x7F7FFFFFu, 0x7F7F, 0x7BFF);
  return out;
}

inline bool is_nan_bits(uint32_t bits, int dtype) {
  if (dtype == TRIM_RHT_F32) return (bits & 0x7FFFFFFFu) > 0x7F800000u;
  if (dtype == TRIM_RHT_BF16) return (bits & 0x7FFFu) > 0x7F80u;
  return (bits & 0x7FFFu) > 0x7C00u;
}

// "" when a and b hold the same bits, element by element, except that any NaN matches any NaN:
// the GPU's fp32 add returns the canonical NaN where x86 propagates an operand's payload (and the
// host twin's own SIMD paths already differ there, codec/fwht.h). Else the first difference.
inline std::string compare_bits(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int dtype) {
  if (got.size() != want.size()) return "sizes differ";
  const size_t es = dtype_size(dtype);
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < got.size() / es; ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &got[i * es], es);
    std::memcpy(&b, &want[i * es], es);
    if (a == b || (is_nan_bits(a, dtype) && is_nan_bits(b, dtype))) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  uint32_t a = 0, b = 0;
  std::memcpy(&a, &got[first * es], es);
  std::memcpy(&b, &want[first * es], es);
  char text[160];
  std::snprintf(text, sizeof text, "%llu elements differ, first at %llu: got 0x%x, want 0x%x",
                static_cast<unsigned long long>(bad), static_cast<unsigned long long>(first), a, b);
  return text;
}

// The host twin's result, the reference the GPU (and its emulator) must match.
inline std::vector<uint8_t> host_twin(std::vector<uint8_t> data, const RotateCase& c, int dtype, uint64_t seed,
                                      bool inverse, std::string* err) {
  const int rc = inverse ? trim_rht_inverse_host(data.data(), c.n, dtype, c.row_log2, c.segment_elems, seed)
                         : trim_rht_forward_host(data.data(), c.n, dtype, c.row_log2, c.segment_elems, seed);
  if (rc != 0) *err = trim_rht_last_error();
  return data;
}

}  // namespace trim::testing

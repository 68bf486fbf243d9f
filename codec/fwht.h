// Fast Walsh–Hadamard transform (FWHT) and the Randomized Hadamard Transform (RHT) built on it.
//
// Bit-exactness contract: every fast path returns exactly the bits of the *_reference functions
// (NaN payloads aside), and a GPU port must follow the same arithmetic:
//   1. (forward only) negate x_i where sign bit i is set (exact sign flip);
//   2. butterfly stages with stride h = 1, 2, 4, ..., n/2 in INCREASING order, each mapping
//      (a = x[i], b = x[i+h]) for i with bit h clear to (a + b, a - b) in IEEE fp32
//      (round to nearest even, no FMA, no reassociation, no flush to zero);
//   3. multiply every element by c = fwht_scale(log2n), the correctly rounded fp32 2^(-log2n/2);
//   4. (inverse only) negate y_i where sign bit i is set.
// Sign bits: d_i = -1 when bit (i % 64) of sign_bits[i / 64] is set, else +1; exactly
// ceil(n / 64) words are read, and sign_bits may be nullptr (all +1). log2n must lie in
// [0, kFwhtMaxLog2n]; anything else aborts (a caller bug that would otherwise write out of
// bounds). Buffers need no particular alignment.
#pragma once

#include <cstdint>

namespace trim::codec {

constexpr int kFwhtMaxLog2n = 20;

// Orthonormal WHT, in place, of n = 2^log2n floats in natural (Sylvester) order.
void fwht(float* data, int log2n);
// out = (H/sqrt(n)) * D * in. in == out is allowed; other overlaps are not.
void rht_forward(const float* in, float* out, int log2n, const uint64_t* sign_bits);
// data = D * (H/sqrt(n)) * data: the inverse of rht_forward up to rounding. In place.
void rht_inverse(float* data, int log2n, const uint64_t* sign_bits);

// Plain radix-2 scalar versions that define the results bit for bit.
void fwht_reference(float* data, int log2n);
void rht_forward_reference(const float* in, float* out, int log2n, const uint64_t* sign_bits);
void rht_inverse_reference(float* data, int log2n, const uint64_t* sign_bits);

// The scale c of step 3: exact 2^(-log2n/2) for even log2n, fp32(2^-k / sqrt(2)) for odd.
float fwht_scale(int log2n);

// Which path the dispatcher runs: "avx512", "avx2" or "scalar" (baseline x86-64, SSE2).
const char* fwht_isa();

}  // namespace trim::codec

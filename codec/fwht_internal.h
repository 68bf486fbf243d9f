// Private to codec/fwht*.cc, their tests and the benchmark: the per-ISA entry points and a switch
// to force one, so every path can be tested and timed on a machine that would pick another.
#pragma once

#include <cstdint>

namespace trim::codec::detail {

// out = D_out * scale * H * D_in * in, where D_x is the identity when sign_x is nullptr.
// Same arithmetic as the reference (see fwht.h). 0 <= log2n <= kFwhtMaxLog2n; in == out allowed.
// The avx2 / avx512 ones may only be called where fwht_isa_supported() says so.
using FwhtRunFn = void (*)(const float* in, float* out, int log2n, const uint64_t* sign_in,
                           const uint64_t* sign_out, float scale);
void fwht_run_scalar(const float* in, float* out, int log2n, const uint64_t* sign_in,
                     const uint64_t* sign_out, float scale);
void fwht_run_avx2(const float* in, float* out, int log2n, const uint64_t* sign_in,
                   const uint64_t* sign_out, float scale);
void fwht_run_avx512(const float* in, float* out, int log2n, const uint64_t* sign_in,
                     const uint64_t* sign_out, float scale);

// isa: "scalar", "avx2" or "avx512".
bool fwht_isa_supported(const char* isa);
// Make the public functions use isa from now on (nullptr: back to the automatic choice).
// Returns false, changing nothing, when isa is unknown or unsupported here. Tests/bench only:
// not meant to race with concurrent transforms (it is atomic, but they may see either path).
bool fwht_force_isa(const char* isa);

}  // namespace trim::codec::detail

// Combining a received value into the destination, as NCCL's reduce kernels do: dst[e] =
// in[e] (op) dst[e]. Types and ops carry NCCL's numbering (ncclDataType_t, ncclRedOp_t), so the
// collectives (coll/reduce.h) and the transport's combining receive (an irecv that reduces into
// its buffer) share one definition. fp16/bf16 are widened exactly to fp32, combined there and
// rounded to nearest even once. AVG combines as SUM (the caller scales). Scalar reference plus
// AVX2 kernels (fp32, bf16 sum), picked per call by CPU, bit-identical to the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "codec/types.h"

namespace trim::codec {

enum class RedType : int {
  kI8 = 0,
  kU8 = 1,
  kI32 = 2,
  kU32 = 3,
  kI64 = 4,
  kU64 = 5,
  kF16 = 6,
  kF32 = 7,
  kF64 = 8,
  kBF16 = 9,
};
inline constexpr int kNumRedTypes = 10;

enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

inline bool valid_red_type(int t) { return t >= 0 && t < kNumRedTypes; }
inline bool valid_red_op(int op) { return op >= 0 && op < kNumRedOps; }
size_t red_type_bytes(RedType t);

// dst[e] = in[e] (op) dst[e] for e < n: the received value first (the ring's summation order).
void combine_into(void* dst, const void* in, size_t n, RedType t, RedOp op);
// The scalar reference (tests).
void combine_into_scalar(void* dst, const void* in, size_t n, RedType t, RedOp op);
// "avx2" or "scalar": what combine_into runs for fp32 on this CPU.
const char* combine_isa();

// Each element type's arithmetic: half types carry their 16 bits and combine in fp32.
namespace arith {
template <typename T>
struct Plain {
  using Store = T;
  static T load(Store v) { return v; }
  static Store store(T v) { return v; }
};
struct Half {
  using Store = uint16_t;
  static float load(Store v) { return f16_to_f32(v); }
  static Store store(float v) { return f32_to_f16(v); }
};
struct BHalf {
  using Store = uint16_t;
  static float load(Store v) { return bf16_to_f32(v); }
  static Store store(float v) { return f32_to_bf16(v); }
};

// Calls fn(Arith{}) with t's arithmetic.
template <typename Fn>
void dispatch(RedType t, Fn&& fn) {
  switch (t) {
    case RedType::kI8: fn(Plain<int8_t>{}); break;
    case RedType::kU8: fn(Plain<uint8_t>{}); break;
    case RedType::kI32: fn(Plain<int32_t>{}); break;
    case RedType::kU32: fn(Plain<uint32_t>{}); break;
    case RedType::kI64: fn(Plain<int64_t>{}); break;
    case RedType::kU64: fn(Plain<uint64_t>{}); break;
    case RedType::kF16: fn(Half{}); break;
    case RedType::kF32: fn(Plain<float>{}); break;
    case RedType::kF64: fn(Plain<double>{}); break;
    case RedType::kBF16: fn(BHalf{}); break;
  }
}
}  // namespace arith

namespace avx2 {
bool combine_supported();
// n fp32 values (any op) / bf16 values (sum, avg); false: not handled here (the caller runs the
// reference).
bool combine_into(void* dst, const void* in, size_t n, RedType t, RedOp op);
}  // namespace avx2

}  // namespace trim::codec

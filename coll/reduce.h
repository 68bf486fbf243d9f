// Element types and reduction ops of the collectives (NCCL's, numbered as coll/trim_coll.h), and
// the reduction a receive applies: what NCCL's kernel does between its recv and send FIFOs.
// fp16/bf16 are widened exactly to fp32, combined there, and rounded to nearest even once, as
// NCCL's and Gloo's half types do per addition.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trim::coll {

enum class DType : int {
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
inline constexpr int kNumDTypes = 10;

enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

bool valid_dtype(int d);
bool valid_op(int op);
size_t dtype_bytes(DType d);
bool is_float(DType d);
// NCCL's names, as its profiler's Coll event spells them ("ncclFloat32", ...).
const char* nccl_dtype_name(DType d);
// "float32", "sum": for error messages.
const char* dtype_name(DType d);
const char* op_name(RedOp op);

// dst[e] = in[e] (op) dst[e] for e < n: the received partial result combined with this rank's
// own value, in that order (the ring's summation order, which the tests' references replay).
// kAvg combines as kSum (see scale_for_avg / finish_avg).
void reduce_into(void* dst, const void* in, size_t n, DType d, RedOp op);

// AVG as NCCL does it: floats are multiplied by 1/nranks before the sum (premultiplied sum);
// integers are summed and divided (truncating toward zero) after.
void scale_for_avg(void* data, size_t n, DType d, int nranks);
void finish_avg(void* data, size_t n, DType d, int nranks);

}  // namespace trim::coll

// Element types and reduction ops of the collectives (NCCL's, numbered as coll/trim_coll.h), and
// the reduction a receive applies: what NCCL's kernel does between its recv and send FIFOs.
// fp16/bf16 are widened exactly to fp32, combined there, and rounded to nearest even once, as
// NCCL's and Gloo's half types do per addition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/combine.h"

namespace trim::coll {

// NCCL's numbering; the arithmetic is codec/combine.h's, shared with the transport's combining
// receive.
using DType = codec::RedType;
inline constexpr int kNumDTypes = codec::kNumRedTypes;
using RedOp = codec::RedOp;
inline constexpr int kNumRedOps = codec::kNumRedOps;

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
inline void reduce_into(void* dst, const void* in, size_t n, DType d, RedOp op) { codec::combine_into(dst, in, n, d, op); }

// AVG as NCCL does it: floats are multiplied by 1/nranks before the sum (premultiplied sum);
// integers are summed and divided (truncating toward zero) after.
void scale_for_avg(void* data, size_t n, DType d, int nranks);
void finish_avg(void* data, size_t n, DType d, int nranks);

}  // namespace trim::coll

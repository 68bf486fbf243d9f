#include "coll/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "codec/types.h"

namespace trim::coll {

namespace {

using codec::arith::dispatch;
using codec::arith::Plain;

template <typename A, typename F>
void map_as(void* data, size_t n, F f) {
  using S = typename A::Store;
  S* d = static_cast<S*>(data);
  for (size_t e = 0; e < n; ++e) d[e] = A::store(f(A::load(d[e])));
}

}  // namespace

bool valid_dtype(int d) { return d >= 0 && d < kNumDTypes; }
bool valid_op(int op) { return op >= 0 && op < kNumRedOps; }

size_t dtype_bytes(DType d) { return codec::red_type_bytes(d); }

bool is_float(DType d) { return d == DType::kF16 || d == DType::kF32 || d == DType::kF64 || d == DType::kBF16; }

const char* nccl_dtype_name(DType d) {
  static const char* const kNames[kNumDTypes] = {"ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",
                                                 "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                                 "ncclFloat64", "ncclBfloat16"};
  return kNames[static_cast<int>(d)];
}

const char* dtype_name(DType d) {
  static const char* const kNames[kNumDTypes] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                                 "uint64",  "float16", "float32", "float64", "bfloat16"};
  return kNames[static_cast<int>(d)];
}

const char* op_name(RedOp op) {
  static const char* const kNames[kNumRedOps] = {"sum", "prod", "max", "min", "avg"};
  return kNames[static_cast<int>(op)];
}

void scale_for_avg(void* data, size_t n, DType d, int nranks) {
  if (!is_float(d)) return;
  dispatch(d, [&](auto arith) {
    using A = decltype(arith);
    if constexpr (std::is_same_v<A, Plain<double>>) {
      const double k = 1.0 / nranks;
      map_as<A>(data, n, [k](double v) { return v * k; });
    } else {
      const float k = 1.0f / static_cast<float>(nranks);
      map_as<A>(data, n, [k](auto v) { return static_cast<decltype(v)>(v * k); });
    }
  });
}

void finish_avg(void* data, size_t n, DType d, int nranks) {
  if (is_float(d)) return;
  dispatch(d, [&](auto arith) {
    using A = decltype(arith);
    map_as<A>(data, n, [nranks](auto v) { return static_cast<decltype(v)>(v / nranks); });
  });
}

}  // namespace trim::coll

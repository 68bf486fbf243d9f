#include "coll/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "codec/types.h"

namespace trim::coll {

namespace {

// Each element type's arithmetic. Half types carry their 16 bits and combine in fp32.
template <typename T>
struct Plain {
  using Store = T;
  static T load(Store v) { return v; }
  static Store store(T v) { return v; }
};
struct Half {
  using Store = uint16_t;
  static float load(Store v) { return codec::f16_to_f32(v); }
  static Store store(float v) { return codec::f32_to_f16(v); }
};
struct BHalf {
  using Store = uint16_t;
  static float load(Store v) { return codec::bf16_to_f32(v); }
  static Store store(float v) { return codec::f32_to_bf16(v); }
};

// Integers wrap, as NCCL's do: in the unsigned type, where overflow is defined.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename A, typename F>
void combine(void* dst, const void* in, size_t n, F f) {
  using S = typename A::Store;
  S* d = static_cast<S*>(dst);
  const S* p = static_cast<const S*>(in);
  for (size_t e = 0; e < n; ++e) d[e] = A::store(f(A::load(p[e]), A::load(d[e])));
}

template <typename A>
void reduce_as(void* dst, const void* in, size_t n, RedOp op) {
  // The received value comes first: a + b, a * b (IEEE addition and multiplication commute bit
  // for bit, but the order is stated so the references need not rely on it). MAX/MIN as NCCL's
  // FuncMax/FuncMin (a NaN operand propagates only through std::max's comparison, as in NCCL).
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg: combine<A>(dst, in, n, [](auto a, auto b) { return wrap_add(a, b); }); break;
    case RedOp::kProd: combine<A>(dst, in, n, [](auto a, auto b) { return wrap_mul(a, b); }); break;
    case RedOp::kMax: combine<A>(dst, in, n, [](auto a, auto b) { return std::max(a, b); }); break;
    case RedOp::kMin: combine<A>(dst, in, n, [](auto a, auto b) { return std::min(a, b); }); break;
  }
}

template <typename A, typename F>
void map_as(void* data, size_t n, F f) {
  using S = typename A::Store;
  S* d = static_cast<S*>(data);
  for (size_t e = 0; e < n; ++e) d[e] = A::store(f(A::load(d[e])));
}

// Calls fn.template operator()<Arith>() for d's arithmetic.
template <typename Fn>
void dispatch(DType d, Fn&& fn) {
  switch (d) {
    case DType::kI8: fn(Plain<int8_t>{}); break;
    case DType::kU8: fn(Plain<uint8_t>{}); break;
    case DType::kI32: fn(Plain<int32_t>{}); break;
    case DType::kU32: fn(Plain<uint32_t>{}); break;
    case DType::kI64: fn(Plain<int64_t>{}); break;
    case DType::kU64: fn(Plain<uint64_t>{}); break;
    case DType::kF16: fn(Half{}); break;
    case DType::kF32: fn(Plain<float>{}); break;
    case DType::kF64: fn(Plain<double>{}); break;
    case DType::kBF16: fn(BHalf{}); break;
  }
}

}  // namespace

bool valid_dtype(int d) { return d >= 0 && d < kNumDTypes; }
bool valid_op(int op) { return op >= 0 && op < kNumRedOps; }

size_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kI8:
    case DType::kU8: return 1;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32: return 4;
    case DType::kI64:
    case DType::kU64:
    case DType::kF64: return 8;
  }
  return 1;
}

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

void reduce_into(void* dst, const void* in, size_t n, DType d, RedOp op) {
  dispatch(d, [&](auto arith) { reduce_as<decltype(arith)>(dst, in, n, op); });
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

#include "codec/combine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace trim::codec {
namespace {

// A NaN operand decides a float sum or product, the received one first, quieted: what x86's
// addps/mulps give with the received value as the first source (the AVX2 kernels), stated here
// so the reference does not depend on which operand order the compiler picks (GCC at -O1 and
// -O2 differ), and with it which NaN's payload survives.
template <typename T>
bool nan_first(T a, T b, T* r) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const T* pick = std::isnan(a) ? &a : std::isnan(b) ? &b : nullptr;
  if (pick == nullptr) return false;
  U bits;
  std::memcpy(&bits, pick, sizeof bits);
  bits |= U{1} << (sizeof(T) == 4 ? 22 : 51);  // the quiet bit
  std::memcpy(r, &bits, sizeof bits);
  return true;
}

// Integers wrap, as NCCL's do: in the unsigned type, where overflow is defined.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    T r;
    return nan_first(a, b, &r) ? r : a + b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    T r;
    return nan_first(a, b, &r) ? r : a * b;
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
void combine_as(void* dst, const void* in, size_t n, RedOp op) {
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

const bool kAvx2 = avx2::combine_supported();

}  // namespace

size_t red_type_bytes(RedType t) {
  switch (t) {
    case RedType::kI8:
    case RedType::kU8: return 1;
    case RedType::kF16:
    case RedType::kBF16: return 2;
    case RedType::kI32:
    case RedType::kU32:
    case RedType::kF32: return 4;
    case RedType::kI64:
    case RedType::kU64:
    case RedType::kF64: return 8;
  }
  return 1;
}

void combine_into_scalar(void* dst, const void* in, size_t n, RedType t, RedOp op) {
  arith::dispatch(t, [&](auto a) { combine_as<decltype(a)>(dst, in, n, op); });
}

void combine_into(void* dst, const void* in, size_t n, RedType t, RedOp op) {
  if (kAvx2 && avx2::combine_into(dst, in, n, t, op)) return;
  combine_into_scalar(dst, in, n, t, op);
}

const char* combine_isa() { return kAvx2 ? "avx2" : "scalar"; }

}  // namespace trim::codec

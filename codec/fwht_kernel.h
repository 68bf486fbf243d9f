// The schedule shared by the fast FWHT paths, parameterised by a register type V.
//
// Include ONLY from the per-ISA kernel files, after their target pragma, with every standard
// header already included: each file then compiles its own copy for its ISA. All of it has
// internal linkage (anonymous namespace, and templates over internal V), so the linker can
// never substitute one ISA's copy for another's.
//
// V provides: Reg; kLog2W (lanes = 2^kLog2W); kMaxK1 / kMaxK (log2 of registers per group in
// the first / later passes); kLog2Block / kLog2Block2 (log2 of floats per L1 / L2 block); load,
// store, add, sub, mul, set1; flip(x, bits) negating lane l where bit l of bits is set (bits
// above the width are junk to ignore); inreg<t>(x) running stage h = 2^t < W inside the register;
// kWordFlips, and when it is true (AVX2) two cheaper forms of flip: flip64(v, word), i.e.
// flip(v[j], word >> (j W)) for the registers of a first-pass group of 64 floats, and
// flip_at(x, bits, i) = flip(x, fwht_signs_at(bits, i)) for i a multiple of W; kFixedStrides:
// whether the widest passes get one copy per constant stride (fwht_mid_s; measured on AVX2 only,
// and each copy costs compile time: clang with UBSan takes minutes over them).
//
// Schedule (stage s has stride h = 2^s): per L1 block of 2^kLog2Block floats, a first pass
// loads 2^K1 registers, flips signs, runs stages 0 .. kLog2W-1 inside each register and the next
// K1 across them; further passes each run up to kMaxK consecutive stages across registers at
// stride h: within the L1 block, then within an L2 block of 2^kLog2Block2 floats, then across
// the whole array. Every butterfly sees the same operands as in the radix-2 reference, in the
// same stage order, so results are bit-identical. The last pass multiplies by the scale (and
// flips output signs) before its store.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trim::codec::detail {
namespace {

#define TRIM_FWHT_INLINE inline __attribute__((always_inline))

struct FwhtCtx {
  const uint64_t* sign_in;
  const uint64_t* sign_out;
  float scale;
  size_t n;  // floats in the whole transform (the input's end, for the prefetch)
};

// The first pass reads the input this many floats ahead into L1 (4 KiB): the input is a
// fresh message in L3 or DRAM, and the hardware prefetcher loses the stream while the
// in-L1 passes run between blocks (AVX2 on Zen 3: 5.9 -> 7.4 GB/s for rows of 2^15).
constexpr size_t kFwhtPrefetchFloats = 1024;

// Sign bits i, i + 1, ... in the low bits of the result.
TRIM_FWHT_INLINE uint64_t fwht_signs_at(const uint64_t* bits, size_t i) {
  return bits[i >> 6] >> (i & 63);
}

// Butterflies across 2^K registers: index strides 1, 2, ..., 2^(K-1), in that order.
template <class V, int K>
TRIM_FWHT_INLINE void fwht_cross(typename V::Reg* v) {
#pragma GCC unroll 8
  for (int s = 0; s < K; ++s) {
    const int hs = 1 << s;
#pragma GCC unroll 16
    for (int g = 0; g < (1 << K); g += 2 * hs) {
#pragma GCC unroll 16
      for (int j = g; j < g + hs; ++j) {
        const typename V::Reg a = v[j], b = v[j + hs];
        v[j] = V::add(a, b);
        v[j + hs] = V::sub(a, b);
      }
    }
  }
}

// In-register stages t .. kLog2W - 1 on each of R registers, stage by stage so that the
// out-of-order core sees R independent chains instead of one long one.
template <class V, int T, size_t R>
TRIM_FWHT_INLINE void fwht_inreg(typename V::Reg* v) {
  if constexpr (T < V::kLog2W) {
#pragma GCC unroll 16
    for (size_t j = 0; j < R; ++j) v[j] = V::template inreg<T>(v[j]);
    fwht_inreg<V, T + 1, R>(v);
  }
}

// Stages 0 .. kLog2W + K - 1 over `count` floats (a multiple of the group size); `base` is the
// index of in[0] in the whole transform, for the sign bits.
template <class V, int K>
void fwht_pass_first(const float* in, float* out, size_t count, size_t base, const FwhtCtx cx,
                     bool last) {
  constexpr size_t kW = size_t{1} << V::kLog2W, kR = size_t{1} << K;
  // Locals, not cx members: the may_alias vector stores would force reloads of the latter.
  const uint64_t *sign_in = cx.sign_in, *sign_out = cx.sign_out;
  const typename V::Reg c = V::set1(cx.scale);
  // Groups of >= 64 floats start on a sign word, so word index and shift are constants.
  constexpr bool kWhole = kW * kR >= 64;
  const auto signs = [&](const uint64_t* bits, size_t g, size_t j) {
    return kWhole ? bits[((base + g) >> 6) + ((j * kW) >> 6)] >> ((j * kW) & 63)
                  : fwht_signs_at(bits, base + g + j * kW);
  };
  for (size_t g = 0; g < count; g += kW * kR) {
    typename V::Reg v[kR];
    if (base + g + kFwhtPrefetchFloats < cx.n) {
#pragma GCC unroll 16
      for (size_t j = 0; j < kW * kR; j += 16) __builtin_prefetch(in + g + kFwhtPrefetchFloats + j, 0, 3);
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < kR; ++j) v[j] = V::load(in + g + j * kW);
    if constexpr (kW * kR == 64 && V::kWordFlips) {
      if (sign_in) V::flip64(v, sign_in[(base + g) >> 6]);
    } else if (sign_in) {
#pragma GCC unroll 16
      for (size_t j = 0; j < kR; ++j) v[j] = V::flip(v[j], signs(sign_in, g, j));
    }
    fwht_inreg<V, 0, kR>(v);
    fwht_cross<V, K>(v);
    if (last) {
#pragma GCC unroll 16
      for (size_t j = 0; j < kR; ++j) {
        v[j] = V::mul(v[j], c);
        if (sign_out) v[j] = V::flip(v[j], signs(sign_out, g, j));
      }
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < kR; ++j) V::store(out + g + j * kW, v[j]);
  }
}

// Stages s .. s + K - 1 (stride 2^s >= the width) over `count` floats at x. S >= 0: s == S, a
// constant, so the 2^K rows are one pointer plus fixed displacements (with a run-time stride
// GCC keeps a pointer per row and, short of registers, steps some of them in memory).
template <class V, int K, int S = -1>
void fwht_pass_mid(float* x, size_t count, int s, size_t base, const FwhtCtx cx, bool last) {
  constexpr size_t kW = size_t{1} << V::kLog2W, kR = size_t{1} << K;
  const size_t h = size_t{1} << (S >= 0 ? S : s);
  const uint64_t* sign_out = cx.sign_out;
  const typename V::Reg c = V::set1(cx.scale);
  for (size_t g = 0; g < count; g += h * kR) {
    for (size_t o = g; o < g + h; o += kW) {
      typename V::Reg v[kR];
#pragma GCC unroll 16
      for (size_t j = 0; j < kR; ++j) v[j] = V::load(x + o + j * h);
      fwht_cross<V, K>(v);
      if (last) {
        const size_t i = base + o;
#pragma GCC unroll 16
        for (size_t j = 0; j < kR; ++j) {
          v[j] = V::mul(v[j], c);
          if (!sign_out) continue;
          if constexpr (V::kWordFlips) {
            // h >= 64: the same bit offset i in each register's own stretch of the words.
            if (h >= 64) {
              v[j] = V::flip_at(v[j], sign_out + j * (h >> 6), i);
              continue;
            }
          }
          // h >= 64: every register reads the same shift of its own word
          v[j] = V::flip(v[j], h >= 64 ? sign_out[(i >> 6) + j * (h >> 6)] >> (i & 63)
                                       : fwht_signs_at(sign_out, i + j * h));
        }
      }
#pragma GCC unroll 16
      for (size_t j = 0; j < kR; ++j) V::store(x + o + j * h, v[j]);
    }
  }
}

// Run-time K -> template K.
template <class V, int K = 0>
void fwht_first_k(int k, const float* in, float* out, size_t count, size_t base,
                  const FwhtCtx cx, bool last) {
  if constexpr (K <= V::kMaxK1) {
    if (k == K) return fwht_pass_first<V, K>(in, out, count, base, cx, last);
    fwht_first_k<V, K + 1>(k, in, out, count, base, cx, last);
  }
}

// Run-time s -> template S for the widest passes below the L2 block (every stride of rows up to
// 2^kLog2Block2); larger strides keep the run-time form.
template <class V, int K, int S = V::kLog2W>
void fwht_mid_s(float* x, size_t count, int s, size_t base, const FwhtCtx cx, bool last) {
  if constexpr (S < V::kLog2Block2) {
    if (s == S) return fwht_pass_mid<V, K, S>(x, count, s, base, cx, last);
    return fwht_mid_s<V, K, S + 1>(x, count, s, base, cx, last);
  }
  fwht_pass_mid<V, K>(x, count, s, base, cx, last);
}

template <class V, int K = 1>
void fwht_mid_k(int k, float* x, size_t count, int s, size_t base, const FwhtCtx cx,
                bool last) {
  if constexpr (K <= V::kMaxK) {
    if constexpr (K == V::kMaxK && V::kFixedStrides) {
      if (k == K) return fwht_mid_s<V, K>(x, count, s, base, cx, last);
    }
    if (k == K) return fwht_pass_mid<V, K>(x, count, s, base, cx, last);
    fwht_mid_k<V, K + 1>(k, x, count, s, base, cx, last);
  }
}

// Stages [from, to) in as few passes as kMaxK allows, split evenly.
template <class V>
void fwht_passes(float* x, size_t count, int from, int to, size_t base, const FwhtCtx cx,
                 bool ends) {
  const int m = to - from;
  if (m <= 0) return;
  const int passes = (m + V::kMaxK - 1) / V::kMaxK;
  for (int p = 0, s = from; p < passes; ++p) {
    const int k = m / passes + (p < m % passes ? 1 : 0);
    fwht_mid_k<V>(k, x, count, s, base, cx, ends && p == passes - 1);
    s += k;
  }
}

// The whole transform; needs log2n >= V::kLog2W (callers handle smaller sizes). Three levels:
// L1 blocks of 2^kLog2Block floats, L2 blocks of 2^kLog2Block2, then the whole array, so large
// transforms stream from L3/DRAM in few passes and no pass strides far enough to thrash a
// cache set.
template <class V>
void fwht_run(const float* in, float* out, int log2n, const FwhtCtx cx) {
  static_assert(V::kLog2Block >= V::kLog2W + V::kMaxK1, "block smaller than a first-pass group");
  static_assert(V::kLog2Block2 >= V::kLog2Block, "L2 block smaller than an L1 block");
  const int k1 = log2n - V::kLog2W < V::kMaxK1 ? log2n - V::kLog2W : V::kMaxK1;
  const int s1 = V::kLog2W + k1;  // stages done by the first pass
  const int b1 = log2n < V::kLog2Block ? log2n : V::kLog2Block;
  const int b2 = log2n < V::kLog2Block2 ? log2n : V::kLog2Block2;
  const size_t n = size_t{1} << log2n, block1 = size_t{1} << b1, block2 = size_t{1} << b2;
  for (size_t sb = 0; sb < n; sb += block2) {
    for (size_t blk = sb; blk < sb + block2; blk += block1) {
      fwht_first_k<V>(k1, in + blk, out + blk, block1, blk, cx, s1 == log2n);
      fwht_passes<V>(out + blk, block1, s1, b1, blk, cx, b1 == log2n);
    }
    fwht_passes<V>(out + sb, block2, b1, b2, sb, cx, b2 == log2n);
  }
  fwht_passes<V>(out, n, b2, log2n, 0, cx, true);
}

}  // namespace
}  // namespace trim::codec::detail

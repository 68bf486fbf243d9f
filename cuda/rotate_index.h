// The GPU rotation's index math and per-thread work (cuda/rotate.cu), as TRIM_HD functions that
// nvcc and g++ both compile: the kernel is only their sequence between barriers, and
// tests/rotate_emu_test.cc replays that sequence on the host with the very same functions and
// compares it with the host twin (cuda/rht_host.cc) bit for bit, with no GPU.
//
// One thread block rotates one tile: up to 2^tile_log2 consecutive elements of one segment (one
// row of 2^15, or several smaller rows plus, at a segment's end, its shorter last row). The tile
// lives in shared memory as fp32 at smem_index(i); each pass of up to 5 butterfly stages has
// every thread hold 2^K elements spaced 2^st apart in registers. Signs, stage order, scale and
// rounding follow codec/fwht.h exactly (see cuda/README.md).
#pragma once

#include <cstdint>
#include <cstring>

#include "codec/rng.h"
#include "codec/types.h"
#include "cuda/rht_geom.h"
#include "cuda/trim_rht.h"

// #pragma unroll in device code; host compilers would warn about an unknown pragma.
#ifdef __CUDA_ARCH__
#define TRIM_UNROLL _Pragma("unroll")
#else
#define TRIM_UNROLL
#endif

namespace trim::rht {

// A tile holds at least 2^12 elements, so rows of 2^0..2^11 share a thread block.
constexpr uint32_t kMinTileLog2 = 12;
// Butterfly stages per pass: 2^5 = 32 values in a thread's registers.
constexpr uint32_t kMaxPassStages = 5;
constexpr uint32_t kMaxThreads = 512;
// 16-byte global loads in flight per thread in the load phase (memory-level parallelism).
constexpr uint32_t kLoadBatch = 8;

template <int DT>
constexpr uint32_t kElemBytes = DT == TRIM_RHT_F32 ? 4u : 2u;

TRIM_HD uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
TRIM_HD uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

TRIM_HD uint32_t floor_log2(uint32_t v) {  // v > 0
#ifdef __CUDA_ARCH__
  return 31u - static_cast<uint32_t>(__clz(static_cast<int>(v)));
#else
  return 31u - static_cast<uint32_t>(__builtin_clz(v));
#endif
}

// ---- Geometry: the bucket's tiles (cut like rht_geom.h's rows, which they group).

TRIM_HD uint32_t tile_log2_for(uint32_t row_log2) { return row_log2 > kMinTileLog2 ? row_log2 : kMinTileLog2; }

// One 32-element group per thread per pass, at most kMaxThreads (2^15: two groups each).
TRIM_HD uint32_t tile_threads(uint32_t row_log2) {
  return min_u32(kMaxThreads, (1u << tile_log2_for(row_log2)) >> kMaxPassStages);
}

struct TileGeom {
  uint64_t n = 0;
  uint64_t segment = 0;            // elements per segment (== n when there is one)
  uint64_t segments = 0;
  uint64_t tiles_per_segment = 0;  // of a full segment
  uint64_t tiles = 0;
  uint32_t row_log2 = 0;
  uint32_t tile_log2 = 0;
};

TRIM_HD TileGeom tile_geom(uint64_t n, uint64_t segment_elems, uint32_t row_log2) {
  const BucketGeom b = make_geom(n, segment_elems, row_log2);
  TileGeom g;
  g.n = n;
  g.segment = b.segment;
  g.segments = b.segments;
  g.row_log2 = row_log2;
  g.tile_log2 = tile_log2_for(row_log2);
  if (n == 0) return g;
  const uint64_t tile = 1ull << g.tile_log2;
  g.tiles_per_segment = (g.segment + tile - 1) >> g.tile_log2;
  const uint64_t last = n - (g.segments - 1) * g.segment;  // elements of the last segment
  g.tiles = (g.segments - 1) * g.tiles_per_segment + ((last + tile - 1) >> g.tile_log2);
  return g;
}

// One tile: `full_rows` rows of 2^row_log2 from its start, then (in its segment's last tile) the
// segment's shorter last row of `partial` elements.
struct TileRef {
  uint64_t offset = 0;     // bucket index of its first element
  uint64_t segment = 0;
  uint64_t first_row = 0;  // row index within the segment of its first row
  uint32_t elems = 0;
  uint32_t full_rows = 0;
  uint32_t partial = 0;
};

TRIM_HD TileRef tile_ref(const TileGeom& g, uint64_t t) {
  TileRef r;
  r.segment = t / g.tiles_per_segment;
  const uint64_t in_segment = t - r.segment * g.tiles_per_segment;
  const uint64_t seg_start = r.segment * g.segment;
  const uint64_t seg_end = min_u64(seg_start + g.segment, g.n);
  r.offset = seg_start + (in_segment << g.tile_log2);
  r.elems = static_cast<uint32_t>(min_u64(seg_end - r.offset, 1ull << g.tile_log2));
  r.first_row = in_segment << (g.tile_log2 - g.row_log2);
  r.full_rows = r.elems >> g.row_log2;
  r.partial = r.elems & ((1u << g.row_log2) - 1u);
  return r;
}

// ---- Shared memory: the tile as fp32, then its rows' sign words.

// Slot of tile element i: 4 pad floats every 32 elements. Every pass is then free of bank
// conflicts: a warp's 32 consecutive elements (passes with st >= 5) land in 32 banks, and the
// first pass's 16-byte accesses (a thread's 2^K consecutive elements) cover each bank once per
// quarter warp. 4 (not 1) keeps each aligned run of 4 elements 16-byte aligned for float4.
TRIM_HD uint32_t smem_index(uint32_t i) { return i + ((i >> 5) << 2); }
TRIM_HD uint32_t smem_data_floats(uint32_t tile_log2) { return (1u << tile_log2) + (1u << tile_log2) / 8u; }

// log2 of the elements one sign word covers: 64, or a whole row when it is shorter (each row
// has its own stream, word 0 of which holds its 2^row_log2 bits).
TRIM_HD uint32_t sign_word_log2(uint32_t row_log2) { return row_log2 < 6u ? row_log2 : 6u; }
TRIM_HD uint32_t tile_sign_words(uint32_t row_log2) {
  return 1u << (tile_log2_for(row_log2) - sign_word_log2(row_log2));
}
TRIM_HD uint32_t tile_smem_bytes(uint32_t row_log2) {
  return smem_data_floats(tile_log2_for(row_log2)) * 4u + tile_sign_words(row_log2) * 8u;
}

// The tile's sign words, rows back to back: word w belongs to tile row w >> (row_log2 - m) and
// is word (w mod 2^(row_log2 - m)) of that row's kRhtSigns stream (what rht_sign_words gives
// the host twin). Only the words the tile's elements use. Any thread split works.
TRIM_HD void compute_sign_words(const TileGeom& g, const TileRef& t, uint64_t seed, uint64_t* words, uint32_t tid,
                                uint32_t threads) {
  const uint32_t m = sign_word_log2(g.row_log2);
  const uint32_t per_row_log2 = g.row_log2 - m;
  const uint32_t count = (t.elems + (1u << m) - 1u) >> m;
  for (uint32_t w = tid; w < count; w += threads) {
    RowRef r;
    r.segment = t.segment;
    r.row = static_cast<uint32_t>(t.first_row + (w >> per_row_log2));  // as row_ref: mod 2^32
    words[w] = codec::rng_word(row_sign_key(seed, r), w & ((1u << per_row_log2) - 1u));
  }
}

// Sign bit (1 = negate) of tile element e.
TRIM_HD uint32_t sign_bit(const uint64_t* words, uint32_t e, uint32_t m) {
  return static_cast<uint32_t>(words[e >> m] >> (e & ((1u << m) - 1u))) & 1u;
}

// Sign bits of the `count` (<= 32, a power of two) elements from e0, a multiple of count: one
// word read when they share it.
TRIM_HD uint32_t sign_bits(const uint64_t* words, uint32_t e0, uint32_t count, uint32_t m) {
  const uint32_t mask = count == 32u ? 0xFFFFFFFFu : (1u << count) - 1u;
  if ((1u << m) >= count) return static_cast<uint32_t>(words[e0 >> m] >> (e0 & ((1u << m) - 1u))) & mask;
  uint32_t bits = 0;
  for (uint32_t j = 0; j < count; ++j) bits |= sign_bit(words, e0 + j, m) << j;
  return bits;
}

// Exact negation when bit is 1 (a sign flip, NaN payloads included, as the host's -x).
TRIM_HD float flip_if(float x, uint32_t bit) { return codec::bits_f32(codec::f32_bits(x) ^ (bit << 31)); }

// ---- Global and shared memory access, vectorised where the device allows.

struct Vec16 {
  uint32_t w[4];
};

TRIM_HD Vec16 load16(const uint8_t* p) {  // p 16-byte aligned
  Vec16 v;
#ifdef __CUDA_ARCH__
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  v.w[0] = u.x;
  v.w[1] = u.y;
  v.w[2] = u.z;
  v.w[3] = u.w;
#else
  std::memcpy(v.w, p, 16);
#endif
  return v;
}

TRIM_HD void smem_load4(const float* s, uint32_t at, float* x) {  // at a multiple of 4
#ifdef __CUDA_ARCH__
  const float4 v = *reinterpret_cast<const float4*>(s + at);
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
#else
  std::memcpy(x, s + at, 16);
#endif
}

TRIM_HD void smem_store4(float* s, uint32_t at, const float* x) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<float4*>(s + at) = make_float4(x[0], x[1], x[2], x[3]);
#else
  std::memcpy(s + at, x, 16);
#endif
}

// Element i of a tile in global memory, widened exactly to fp32 (codec/types.h converters).
template <int DT>
TRIM_HD float load_elem(const uint8_t* base, uint32_t i) {
  if constexpr (DT == TRIM_RHT_F32) {
#ifdef __CUDA_ARCH__
    return reinterpret_cast<const float*>(base)[i];
#else
    float f;  // host: the test's buffers are bytes
    std::memcpy(&f, base + 4u * i, 4);
    return f;
#endif
  } else {
#ifdef __CUDA_ARCH__
    const uint16_t h = reinterpret_cast<const uint16_t*>(base)[i];
#else
    uint16_t h;
    std::memcpy(&h, base + 2u * i, 2);
#endif
    return DT == TRIM_RHT_BF16 ? codec::bf16_to_f32(h) : codec::f16_to_f32(h);
  }
}

// Rounded to nearest even once, here, for bf16/fp16.
template <int DT>
TRIM_HD void store_elem(uint8_t* base, uint32_t i, float v) {
  if constexpr (DT == TRIM_RHT_F32) {
#ifdef __CUDA_ARCH__
    reinterpret_cast<float*>(base)[i] = v;
#else
    std::memcpy(base + 4u * i, &v, 4);
#endif
  } else {
    const uint16_t h = DT == TRIM_RHT_BF16 ? codec::f32_to_bf16(v) : codec::f32_to_f16(v);
#ifdef __CUDA_ARCH__
    reinterpret_cast<uint16_t*>(base)[i] = h;
#else
    std::memcpy(base + 2u * i, &h, 2);
#endif
  }
}

// The 16 / kElemBytes elements of a 16-byte load (little endian: element 0 in the low half).
template <int DT>
TRIM_HD void widen16(const Vec16& v, float* x) {
  TRIM_UNROLL
  for (uint32_t j = 0; j < 4; ++j) {
    if constexpr (DT == TRIM_RHT_F32) {
      x[j] = codec::bits_f32(v.w[j]);
    } else {
      const uint16_t lo = static_cast<uint16_t>(v.w[j]), hi = static_cast<uint16_t>(v.w[j] >> 16);
      x[2 * j] = DT == TRIM_RHT_BF16 ? codec::bf16_to_f32(lo) : codec::f16_to_f32(lo);
      x[2 * j + 1] = DT == TRIM_RHT_BF16 ? codec::bf16_to_f32(hi) : codec::f16_to_f32(hi);
    }
  }
}

// ---- Phase 1 (with compute_sign_words, no barrier between): the tile from global memory into
// shared memory as fp32. Consecutive threads take consecutive 16-byte pieces (coalesced), each
// thread kLoadBatch of them in flight; an unaligned tile, and the last few elements, go one by one.
template <int DT>
TRIM_HD void load_tile(const uint8_t* tile, uint32_t elems, float* s, uint32_t tid, uint32_t threads) {
  constexpr uint32_t kVec = 16u / kElemBytes<DT>;
  uint32_t done = 0;
  if (reinterpret_cast<uintptr_t>(tile) % 16u == 0) {
    const uint32_t chunks = elems / kVec;
    for (uint32_t c0 = tid; c0 < chunks; c0 += threads * kLoadBatch) {
      Vec16 v[kLoadBatch];
      TRIM_UNROLL
      for (uint32_t b = 0; b < kLoadBatch; ++b) {
        const uint32_t c = c0 + b * threads;
        if (c < chunks) v[b] = load16(tile + 16u * c);
      }
      TRIM_UNROLL
      for (uint32_t b = 0; b < kLoadBatch; ++b) {
        const uint32_t c = c0 + b * threads;
        if (c >= chunks) break;
        float x[kVec];
        widen16<DT>(v[b], x);
        TRIM_UNROLL
        for (uint32_t j = 0; j < kVec; j += 4) smem_store4(s, smem_index(c * kVec + j), x + j);
      }
    }
    done = chunks * kVec;
  }
  for (uint32_t e = done + tid; e < elems; e += threads) s[smem_index(e)] = load_elem<DT>(tile, e);
}

// ---- The passes. A tile is rotated as runs of equal power-of-two blocks: its full rows (one run
// of full_rows blocks of 2^row_log2), then the blocks of its partial row's binary decomposition,
// largest first (codec::for_each_rht_block), one run each. Each run takes passes of
// pass_stages() butterfly stages in increasing stride order; a barrier follows every pass but a
// run's last, which reads only its own run's elements and writes global memory.

TRIM_HD uint32_t pass_stages(uint32_t log2n, uint32_t st) {
  return log2n - st < kMaxPassStages ? log2n - st : kMaxPassStages;
}

struct TileStep {
  uint32_t off = 0;    // tile index of the run's first element
  uint32_t log2 = 0;   // its blocks' size
  uint32_t count = 0;  // its blocks
  uint32_t rest = 0;   // partial-row elements after this run, still to rotate
  uint32_t st = 0;     // this pass: stages [st, st + k)
  uint32_t k = 0;
  bool last = false;   // the run's last pass: scales, (inverse) signs, stores to global memory
};

TRIM_HD void begin_run(TileStep* s, uint32_t log2, uint32_t count) {
  s->log2 = log2;
  s->count = count;
  s->st = 0;
  s->k = pass_stages(log2, 0);
  s->last = s->k >= log2;  // a block of 1 element still takes one pass (of 0 stages): scale, store
}

TRIM_HD TileStep first_step(const TileRef& t, uint32_t row_log2) {
  TileStep s;
  s.rest = t.partial;
  if (t.full_rows > 0) {
    begin_run(&s, row_log2, t.full_rows);
  } else {  // a tile holds at least one element
    const uint32_t b = floor_log2(s.rest);
    s.rest &= ~(1u << b);
    begin_run(&s, b, 1);
  }
  return s;
}

// Advances to the next pass; false when the tile is done.
TRIM_HD bool next_step(TileStep* s) {
  if (!s->last) {
    s->st += s->k;
    s->k = pass_stages(s->log2, s->st);
    s->last = s->st + s->k >= s->log2;
    return true;
  }
  if (s->rest == 0) return false;
  s->off += s->count << s->log2;
  const uint32_t b = floor_log2(s->rest);
  s->rest &= ~(1u << b);
  begin_run(s, b, 1);
  return true;
}

// First element of group g of a pass over stages [st, st + k): the group's elements are
// base + (r << st), r < 2^k; consecutive groups differ first in the bits below st (so for
// st >= 5 a warp's lanes read 32 consecutive elements), then above st + k.
TRIM_HD uint32_t pass_base(uint32_t g, uint32_t st, uint32_t k) {
  return ((g >> st) << (st + k)) | (g & ((1u << st) - 1u));
}

// Passes start at stage 0, 5 or 10 (rows of at most 2^15), each a compile-time ST below, so
// every shared-memory slot, global offset and sign word of a group is its first one plus a
// constant: no per-element index math.
static_assert(TRIM_RHT_MAX_ROW_LOG2 <= 3 * kMaxPassStages, "a pass may start only at stage 0, 5 or 10");

// smem_index(base + (r << ST)) - smem_index(base) = r * kPassSlotStride<ST>: ST = 0 keeps a
// group (2^K <= 32 elements from a multiple of 2^K) inside one 32-element chunk; st >= 5 adds
// 2^ST elements and 2^(ST-5) pads of 4 per step (base has no bits in [ST, ST + K): no carry).
template <int ST>
constexpr uint32_t kPassSlotStride = ST == 0 ? 1u : 9u << (ST - 3);

// What one pass needs besides its step.
struct PassCtx {
  float* s;
  const uint64_t* words;
  uint8_t* out;     // the tile in global memory
  float scale;      // codec::fwht_scale(step.log2)
  uint32_t sign_m;  // sign_word_log2(row_log2)
};

// A group's 2^K values from (kStore: to) shared memory: 16-byte accesses when they are
// consecutive (the first pass), else one element each.
template <int K, int ST, bool kStore>
TRIM_HD void group_io(float* s, uint32_t slot0, float* x) {
  constexpr uint32_t kN = 1u << K;
  if constexpr (ST == 0 && K >= 2) {
    TRIM_UNROLL
    for (uint32_t q = 0; q < kN; q += 4) {
      if constexpr (kStore) {
        smem_store4(s, slot0 + q, x + q);
      } else {
        smem_load4(s, slot0 + q, x + q);
      }
    }
  } else {
    TRIM_UNROLL
    for (uint32_t r = 0; r < kN; ++r) {
      float& slot = s[slot0 + r * kPassSlotStride<ST>];
      if constexpr (kStore) {
        slot = x[r];
      } else {
        x[r] = slot;
      }
    }
  }
}

// The inverse's sign bits (fwht.h step 4) of a group's elements base + (r << ST).
template <int K, int ST>
TRIM_HD uint32_t group_sign_bits(const uint64_t* words, uint32_t base, uint32_t m) {
  uint32_t bits = 0;
  if constexpr (ST >= 6) {  // m <= 6 <= ST: one bit position, words 2^(ST - m) apart
    const uint32_t w0 = base >> m, pos = base & ((1u << m) - 1u), wstride = (1u << ST) >> m;
    TRIM_UNROLL
    for (uint32_t r = 0; r < (1u << K); ++r) bits |= (static_cast<uint32_t>(words[w0 + r * wstride] >> pos) & 1u) << r;
  } else {
    TRIM_UNROLL
    for (uint32_t r = 0; r < (1u << K); ++r) bits |= sign_bit(words, base + (r << ST), m) << r;
  }
  return bits;
}

// One group: read 2^K values, run K stages, then either write them back to shared memory or
// (last pass) scale, sign (inverse) and store them to global memory.
template <int K, int ST, int DT, bool kInverse>
TRIM_HD void pass_group(const PassCtx& c, const TileStep& step, uint32_t g) {
  constexpr uint32_t kN = 1u << K;
  float x[kN];
  const uint32_t base = step.off + pass_base(g, ST, K);
  const uint32_t slot0 = smem_index(base);
  group_io<K, ST, false>(c.s, slot0, x);
  if constexpr (!kInverse && ST == 0) {  // fwht.h step 1: the forward's signs, before any stage
    const uint32_t bits = sign_bits(c.words, base, kN, c.sign_m);
    TRIM_UNROLL
    for (uint32_t r = 0; r < kN; ++r) x[r] = flip_if(x[r], (bits >> r) & 1u);
  }
  TRIM_UNROLL
  for (int b = 0; b < K; ++b) {  // stride 2^(ST + b): increasing
    const uint32_t h = 1u << b;
    TRIM_UNROLL
    for (uint32_t r = 0; r < kN; ++r) {
      if ((r & h) == 0) {
        const float a = x[r], d = x[r + h];
        x[r] = a + d;
        x[r + h] = a - d;
      }
    }
  }
  if (!step.last) {
    group_io<K, ST, true>(c.s, slot0, x);
    return;
  }
  uint32_t bits = 0;
  if constexpr (kInverse) bits = group_sign_bits<K, ST>(c.words, base, c.sign_m);
  uint8_t* out = c.out + static_cast<size_t>(base) * kElemBytes<DT>;
  TRIM_UNROLL
  for (uint32_t r = 0; r < kN; ++r) {
    const float y = x[r] * c.scale;                       // fwht.h step 3: one multiply
    store_elem<DT>(out, r << ST, flip_if(y, (bits >> r) & 1u));  // step 4 (inverse only)
  }
}

template <int K, int ST, int DT, bool kInverse>
TRIM_HD void pass_groups(const PassCtx& c, const TileStep& step, uint32_t tid, uint32_t threads) {
  const uint32_t groups = step.count << (step.log2 - K);
  for (uint32_t g = tid; g < groups; g += threads) pass_group<K, ST, DT, kInverse>(c, step, g);
}

template <int ST, int DT, bool kInverse>
TRIM_HD void run_pass_at(const PassCtx& c, const TileStep& step, uint32_t tid, uint32_t threads) {
  switch (step.k) {
    case 0:
      if constexpr (ST == 0) pass_groups<0, ST, DT, kInverse>(c, step, tid, threads);  // 1-element blocks
      break;
    case 1: pass_groups<1, ST, DT, kInverse>(c, step, tid, threads); break;
    case 2: pass_groups<2, ST, DT, kInverse>(c, step, tid, threads); break;
    case 3: pass_groups<3, ST, DT, kInverse>(c, step, tid, threads); break;
    case 4: pass_groups<4, ST, DT, kInverse>(c, step, tid, threads); break;
    default: pass_groups<5, ST, DT, kInverse>(c, step, tid, threads); break;
  }
}

// One thread's share of one pass (its first stage and stage count chosen at run time).
template <int DT, bool kInverse>
TRIM_HD void run_pass(const PassCtx& c, const TileStep& step, uint32_t tid, uint32_t threads) {
  switch (step.st) {
    case 0: run_pass_at<0, DT, kInverse>(c, step, tid, threads); break;
    case kMaxPassStages: run_pass_at<kMaxPassStages, DT, kInverse>(c, step, tid, threads); break;
    default: run_pass_at<2 * kMaxPassStages, DT, kInverse>(c, step, tid, threads); break;
  }
}

// ---- Kernel parameters.

struct RotateParams {
  uint8_t* data;
  TileGeom geom;
  uint64_t seed;
  uint64_t first_tile;      // tile of block 0 (grids are launched in pieces of at most 2^30)
  uint32_t words_at;        // float index of the sign words in dynamic shared memory
  float scale[TRIM_RHT_MAX_ROW_LOG2 + 1];  // codec::fwht_scale(b): the host's bits
};

}  // namespace trim::rht

// Fused decode: one thread block per row decodes every element of the row from whatever
// bytes of its packets arrived (best surviving level per element, codec::Decoder::decode_f32 /
// decode_16) and estimates missing packets as 0. rht rows: elements with their own bits are
// written as they decode; when some lost them, the row's scaled heads are rotated back in
// shared memory (Decoder::estimate_rht_row) and only those elements take the estimate.
// CPU reference: codec/decoder.cc (add + finish_row).
#include <cuda_runtime.h>

#include "cuda/kernels.h"
#include "cuda/row_block.cuh"

namespace trim::gpu {
namespace {

struct RowHead {
  int scheme;
  float scale;
  int estimate;  // rht: some element lost its own bits
};

// What arrived of packet k of the row: its bytes (nullptr when missing) and payload bytes.
struct Slot {
  const uint8_t* packet;
  uint32_t payload_received;
};

__device__ inline Slot slot_of(const DecodeParams& p, uint64_t slot) {
  const uint64_t j = slot - p.c.first_slot;
  const uint32_t got = p.received[j];
  if (got < kHeaderBytes) return Slot{nullptr, 0};
  return Slot{p.packets + j * p.c.stride, got - kHeaderBytes};
}

// Payload byte `at` of a raw packet of the row, as decoded (0 where it did not arrive).
__device__ inline uint8_t raw_byte(const DecodeParams& p, uint64_t slot0, uint32_t esize, RawPos at) {
  const Slot sl = slot_of(p, slot0 + at.packet);
  return raw_decoded_byte(sl.packet == nullptr ? nullptr : sl.packet + kHeaderBytes, sl.payload_received, esize,
                          at.within);
}

// 8 bytes at src, with the widest loads its alignment allows.
__device__ inline uint64_t load8(const uint8_t* src) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(src);
  if ((a & 7u) == 0) return *reinterpret_cast<const uint64_t*>(src);
  if ((a & 3u) == 0) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(src);
    return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  }
  uint64_t v = 0;
#pragma unroll
  for (uint32_t b = 0; b < 8; ++b) v |= static_cast<uint64_t>(src[b]) << (8 * b);
  return v;
}

// scheme none and the tail (Decoder::decode_slot): the row's bytes as they arrived, 0 for
// missing ones. Each 8-byte-aligned 8 bytes of the destination is written by one 8-byte store
// (raw_split): NCCL's LL protocol reads its 8-byte lines while they land.
__device__ void decode_raw_row(const DecodeParams& p, const RowDesc& d, uint64_t slot0) {
  const uint32_t esize = d.tail ? 1u : codec::dtype_bytes(static_cast<DType>(p.c.geom.dtype));
  const uint32_t row_bytes = d.elems * esize, packet_payload = d.epp * esize;
  uint8_t* dst = p.out + d.byte_offset;
  const RawSplit sp = raw_split(reinterpret_cast<uintptr_t>(dst), row_bytes);
  for (uint32_t u = threadIdx.x; u < sp.units; u += blockDim.x) {
    const uint32_t i0 = sp.head + 8 * u;
    const RawPos at = raw_pos(i0, packet_payload);
    const Slot sl = slot_of(p, slot0 + at.packet);
    uint64_t v = 0;
    if (sl.packet != nullptr && at.within + 8 <= sl.payload_received / esize * esize) {
      v = load8(sl.packet + kHeaderBytes + at.within);  // all 8 bytes arrived, in one packet
    } else {
#pragma unroll
      for (uint32_t b = 0; b < 8; ++b) {
        v |= static_cast<uint64_t>(raw_byte(p, slot0, esize, raw_pos(i0 + b, packet_payload))) << (8 * b);
      }
    }
    *reinterpret_cast<uint64_t*>(dst + i0) = v;
  }
  // The unaligned ends, fewer than 8 bytes each: [0, head) and [rest, row_bytes).
  for (uint32_t j = threadIdx.x; j < row_bytes - 8 * sp.units; j += blockDim.x) {
    const uint32_t i = j < sp.head ? j : sp.rest + (j - sp.head);
    dst[i] = raw_byte(p, slot0, esize, raw_pos(i, packet_payload));
  }
}

// Word w of what arrived of a payload into the stage: global memory sees whole 4-byte words
// from consecutive threads; bytes past `received` are neither read nor needed.
__device__ inline void copy_word_in(uint8_t* dst, const uint8_t* src, uint32_t received, uint32_t w) {
  const uint32_t n = stage_word_bytes(received, w);
  if (n == 4 && (reinterpret_cast<uintptr_t>(src + 4 * w) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(dst + 4 * w) = __ldg(reinterpret_cast<const uint32_t*>(src + 4 * w));
    return;
  }
  for (uint32_t b = 0; b < n; ++b) dst[4 * w + b] = src[4 * w + b];
}

__global__ void __launch_bounds__(kMaxRowThreads) decode_rows_kernel(DecodeParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const RowGeom& geom = p.c.geom;
  uint64_t slot0;
  const RowDesc d = block_row(p.c, &slot0);
  const uint32_t row = d.row;
  if (d.tail || d.scheme == Scheme::kNone) {
    decode_raw_row(p, d, slot0);
    return;
  }
  const StagePlan plan = stage_plan(geom);
  uint64_t* signs = reinterpret_cast<uint64_t*>(smem_raw);
  uint8_t* stage = reinterpret_cast<uint8_t*>(signs + (geom.row_elems + 63) / 64);
  float* s = reinterpret_cast<float*>(stage + plan.bytes);
  __shared__ RowHead head;

  // The row's scheme and scale come from any packet that arrived (they all agree: the caller
  // validated them); a row with none decodes as the layout's scheme (Decoder::finish_row).
  if (threadIdx.x == 0) {
    head.scheme = static_cast<int>(d.scheme);
    head.scale = 0.0f;
    head.estimate = 0;
    for (uint32_t k = 0; k < d.packets; ++k) {
      const Slot sl = slot_of(p, slot0 + k);
      if (sl.packet != nullptr) {
        head.scheme = sl.packet[4];
        head.scale = codec::bits_f32(get_le(sl.packet + 36, 4));
        break;
      }
    }
  }
  __syncthreads();
  const Scheme scheme = static_cast<Scheme>(head.scheme);
  const float scale = head.scale;
  const DType dtype = static_cast<DType>(geom.dtype);
  const bool bf16 = dtype == DType::kBF16, rht = scheme == Scheme::kRht;
  const uint64_t dither_key = codec::rng_key(p.c.seed, p.c.msg_seq, row, codec::RngStream::kDither);
  uint8_t* dst = p.out + d.byte_offset;
  if (rht) load_sign_words(signs, codec::rng_key(p.c.seed, p.c.msg_seq, row, codec::RngStream::kRhtSigns), d.elems);

  // Rounds of plan.packets packets: gather what arrived into the stage, then decode from it.
  for (uint32_t k0 = 0; k0 < d.packets; k0 += plan.packets) {
    const uint32_t k1 = min_u32(d.packets, k0 + plan.packets);
    for (uint32_t idx = threadIdx.x; idx < (k1 - k0) * (plan.payload_stride / 4); idx += blockDim.x) {
      const StageWord sw = stage_word(plan, d, scheme, dtype, k0, idx);
      const Slot sl = slot_of(p, slot0 + sw.k);
      if (sl.packet == nullptr) continue;
      copy_word_in(stage + sw.j * plan.payload_stride, sl.packet + kHeaderBytes,
                   min_u32(sl.payload_received, sw.payload), sw.w);
    }
    __syncthreads();
    const uint32_t e_end = min_u32(k1 * d.epp, d.elems);
    for (uint32_t e = k0 * d.epp + threadIdx.x; e < e_end; e += blockDim.x) {
      const uint32_t k = e / d.epp, first = k * d.epp;
      const Slot sl = slot_of(p, slot0 + k);
      const uint8_t* payload = stage + (k - k0) * plan.payload_stride;
      const uint32_t n = min_u32(d.epp, d.elems - first);
      if (rht) {
        // Every element's scaled head goes into the inverse transform; its own bits, if any, out.
        s[smem_index(e)] =
            sl.packet == nullptr ? 0.0f : rht_head_coord(dtype, scale, payload, sl.payload_received, n, e - first);
        if (sl.packet == nullptr || !rht_own_bits(dtype, sl.payload_received, n, e - first)) {
          head.estimate = 1;
          continue;
        }
      }
      uint16_t w16 = 0;
      bool whole = false;
      const float v = sl.packet == nullptr ? 0.0f
                                           : decode_elem(dtype, scheme, scale, dither_key, payload, sl.payload_received,
                                                         n, e - first, e, &w16, &whole);
      if (dtype == DType::kF32) {
        reinterpret_cast<float*>(dst)[e] = v;
      } else {
        reinterpret_cast<uint16_t*>(dst)[e] = whole ? w16 : narrow16(v, bf16);
      }
    }
    __syncthreads();  // the next round refills the stage
  }
  if (!rht || head.estimate == 0) return;  // an untrimmed rht row is exact: no inverse transform
  fwht_row(s, d.elems, p.c.fwht_scale, signs);
  for (uint32_t e = threadIdx.x; e < d.elems; e += blockDim.x) {
    const uint32_t k = e / d.epp, first = k * d.epp;
    const Slot sl = slot_of(p, slot0 + k);
    if (sl.packet != nullptr && rht_own_bits(dtype, sl.payload_received, min_u32(d.epp, d.elems - first), e - first)) {
      continue;
    }
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(dst)[e] = s[smem_index(e)];
    } else {
      reinterpret_cast<uint16_t*>(dst)[e] = narrow16(s[smem_index(e)], bf16);
    }
  }
}

}  // namespace

size_t decode_smem_bytes(const RowGeom& g) {
  return (g.row_elems + 63) / 64 * sizeof(uint64_t) + stage_plan(g).bytes + smem_floats(g.row_elems) * sizeof(float);
}

int launch_decode(const DecodeParams& p, void* stream, int device) {
  return launch_rows(decode_rows_kernel, p, p.c, decode_smem_bytes(p.c.geom), stream, device);
}

int prepare_decode(int device) { return prepare_rows_kernel(decode_rows_kernel, device); }

}  // namespace trim::gpu

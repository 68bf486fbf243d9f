// Fused decode: one thread block per row decodes every element of the row from whatever
// bytes of its packets arrived (best surviving level per element, codec::Decoder::decode_f32 /
// decode_16), estimates missing packets as 0, and for rht rows runs the inverse RHT in shared
// memory before writing the row once. CPU reference: codec/decoder.cc (add + finish_row).
#include <cuda_runtime.h>

#include "cuda/kernels.h"
#include "cuda/row_block.cuh"

namespace trim::gpu {
namespace {

struct RowHead {
  int scheme;
  float scale;
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

__device__ void decode_raw_row(const DecodeParams& p, const RowDesc& d, uint64_t slot0) {
  const uint32_t esize = d.tail ? 1u : codec::dtype_bytes(static_cast<DType>(p.c.geom.dtype));
  const uint32_t row_bytes = d.elems * esize, packet_payload = d.epp * esize;
  uint8_t* dst = p.out + d.byte_offset;
  for (uint32_t i = threadIdx.x; i < row_bytes; i += blockDim.x) {
    const uint32_t k = i / packet_payload, within = i - k * packet_payload;
    const Slot sl = slot_of(p, slot0 + k);
    // Only whole elements are kept (Decoder::decode_slot).
    const uint32_t whole_bytes = (sl.payload_received / esize) * esize;
    dst[i] = (sl.packet != nullptr && within < whole_bytes) ? sl.packet[kHeaderBytes + within] : 0;
  }
}

// The decoded value of element i of a packet of n elements whose first `received` payload
// bytes are at `payload` (fp32; the rotated domain for rht), and for 16-bit rows the exact
// value when it arrived whole (*whole = true).
__device__ float decode_elem(DType dtype, Scheme scheme, float scale, uint64_t dither_key, const uint8_t* payload,
                             uint32_t received, uint32_t n, uint32_t i, uint32_t e, uint16_t* whole16, bool* whole) {
  const Planes pl = packet_planes(scheme, dtype, false, n);
  const Levels l = decode_levels(pl, n, received);
  *whole = false;
  if (dtype == DType::kF32) return decode_f32_elem(payload, pl, l, i, scheme, scale, dither_key, e);
  if (i < l.n1) {
    *whole = true;
    *whole16 = decode_16_whole(payload, pl, i);
    return widen16(*whole16, dtype == DType::kBF16);
  }
  if (i < l.n0) return head_value(scheme, payload, i, scale, dither_key, e);
  return 0.0f;
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
  const uint32_t row = p.c.first_row + blockIdx.x;
  const RowDesc d = row_desc(geom, row);
  const uint64_t slot0 = row_first_slot(geom, row);
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
  const uint32_t words = plan.payload_stride / 4;
  for (uint32_t k0 = 0; k0 < d.packets; k0 += plan.packets) {
    const uint32_t k1 = min_u32(d.packets, k0 + plan.packets);
    for (uint32_t idx = threadIdx.x; idx < (k1 - k0) * words; idx += blockDim.x) {
      const uint32_t j = idx / words, w = idx - j * words, k = k0 + j;
      const Slot sl = slot_of(p, slot0 + k);
      if (sl.packet == nullptr) continue;
      const uint32_t payload = packet_planes(scheme, dtype, false, min_u32(d.epp, d.elems - k * d.epp)).total();
      copy_word_in(stage + j * plan.payload_stride, sl.packet + kHeaderBytes, min_u32(sl.payload_received, payload), w);
    }
    __syncthreads();
    const uint32_t e_end = min_u32(k1 * d.epp, d.elems);
    for (uint32_t e = k0 * d.epp + threadIdx.x; e < e_end; e += blockDim.x) {
      const uint32_t k = e / d.epp, first = k * d.epp;
      const Slot sl = slot_of(p, slot0 + k);
      uint16_t w16 = 0;
      bool whole = false;
      const float v = sl.packet == nullptr ? 0.0f
                                           : decode_elem(dtype, scheme, scale, dither_key,
                                                         stage + (k - k0) * plan.payload_stride, sl.payload_received,
                                                         min_u32(d.epp, d.elems - first), e - first, e, &w16, &whole);
      if (rht) {
        s[smem_index(e)] = v;
      } else if (dtype == DType::kF32) {
        reinterpret_cast<float*>(dst)[e] = v;
      } else {
        reinterpret_cast<uint16_t*>(dst)[e] = whole ? w16 : narrow16(v, bf16);
      }
    }
    __syncthreads();  // the next round refills the stage
  }
  if (!rht) return;
  fwht_row(s, d.elems, p.c.fwht_scale, signs);
  if (dtype == DType::kF32) {
    float* out = reinterpret_cast<float*>(dst);
    for (uint32_t e = threadIdx.x; e < d.elems; e += blockDim.x) out[e] = s[smem_index(e)];
  } else {
    uint16_t* out = reinterpret_cast<uint16_t*>(dst);
    for (uint32_t e = threadIdx.x; e < d.elems; e += blockDim.x) out[e] = narrow16(s[smem_index(e)], bf16);
  }
}

}  // namespace

size_t decode_smem_bytes(const RowGeom& g) {
  return (g.row_elems + 63) / 64 * sizeof(uint64_t) + stage_plan(g).bytes + smem_floats(g.row_elems) * sizeof(float);
}

int launch_decode(const DecodeParams& p, void* stream) {
  if (p.c.n_rows == 0) return 0;
  const size_t smem = decode_smem_bytes(p.c.geom);
  cudaError_t e = cudaFuncSetAttribute(decode_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return static_cast<int>(e);
  decode_rows_kernel<<<p.c.n_rows, row_block_threads(p.c.geom.row_elems), smem, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace trim::gpu

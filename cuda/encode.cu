// Fused encode: one thread block per row reads the row into shared memory (applying the RHT
// signs), rotates it there (rht), gathers the norms in the CPU reference's summation order,
// and writes every packet of the row: planes 0/1/2 by groups of 8 elements (rht: heads from
// the rotated row, planes 1+2 from the input, read again), then the headers with the row's
// scale and CRC. CPU reference: codec/encoder.cc (Encoder::encode_row)
// with codec::scalar kernels; the per-element math is in cuda/codec_index.h.
#include <cuda_runtime.h>

#include "cuda/kernels.h"
#include "cuda/row_block.cuh"

namespace trim::gpu {
namespace {

// What the whole block agrees on once the row's values are known.
struct RowState {
  LaneNorms norms;   // whole-row norms, or the per-packet totals for fp32 sign/rht
  LaneNorms extra;   // 16-bit rht: the norms of the rotated values
  int scheme;        // the row's scheme on the wire (rht falls back to sign)
  float scale;
};

__device__ inline uint8_t* packet_ptr(const EncodeParams& p, uint64_t slot) {
  return p.out + (slot - p.c.first_slot) * p.c.stride;
}

// Bytes [0, N) of src as little-endian words of type W at dst (W-aligned).
template <class W, uint32_t N>
__device__ inline void store_words(uint8_t* dst, const uint8_t (&src)[N]) {
#pragma unroll
  for (uint32_t w = 0; w < N / sizeof(W); ++w) {
    W v = 0;
#pragma unroll
    for (uint32_t b = 0; b < sizeof(W); ++b) v |= static_cast<W>(src[sizeof(W) * w + b]) << (8 * b);
    reinterpret_cast<W*>(dst)[w] = v;
  }
}

// A local array to global memory; 8- or 4-byte stores where the target allows.
template <uint32_t N>
__device__ inline void store_bytes(uint8_t* dst, const uint8_t (&src)[N]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  if (N % 8 == 0 && (a & 7u) == 0) {
    store_words<uint64_t>(dst, src);
  } else if (N % 4 == 0 && (a & 3u) == 0) {
    store_words<uint32_t>(dst, src);
  } else {
#pragma unroll
    for (uint32_t b = 0; b < N; ++b) dst[b] = src[b];
  }
}

__device__ void write_headers(const EncodeParams& p, const RowDesc& d, uint64_t slot0, Scheme scheme, float scale) {
  for (uint32_t k = threadIdx.x; k < d.packets; k += blockDim.x) {
    const HeaderFields h = packet_header(p.c.geom, d, p.c.cookie, p.c.msg_seq, p.c.trimmable, scheme, scale, k);
    uint8_t bytes[kHeaderBytes];
    header_bytes(h, bytes);
    store_bytes(packet_ptr(p, slot0 + k), bytes);
  }
}

// scheme none and the tail: raw element bytes (Encoder::encode_raw_row).
__device__ void encode_raw_row(const EncodeParams& p, const RowDesc& d, uint64_t slot0) {
  const uint32_t esize = d.tail ? 1u : codec::dtype_bytes(static_cast<DType>(p.c.geom.dtype));
  const uint32_t row_bytes = d.elems * esize, packet_payload = d.epp * esize;
  const uint8_t* src = p.msg + d.byte_offset;
  for (uint32_t i = threadIdx.x; i < row_bytes; i += blockDim.x) {
    const RawPos at = raw_pos(i, packet_payload);
    packet_ptr(p, slot0 + at.packet)[kHeaderBytes + at.within] = src[i];
  }
  write_headers(p, d, slot0, Scheme::kNone, 0.0f);
}

// The row's input as fp32 into shared memory; rht rows get their signs applied (exact negation).
__device__ void load_row(const EncodeParams& p, const RowDesc& d, float* s, const uint64_t* signs) {
  const DType dtype = static_cast<DType>(p.c.geom.dtype);
  if (dtype == DType::kF32) {
    const float* v = reinterpret_cast<const float*>(p.msg + d.byte_offset);
    if ((reinterpret_cast<uintptr_t>(v) & 15u) == 0) {
      // kLoadUnroll loads in flight per thread before any is used: one block per SM must keep
      // enough bytes in flight to cover DRAM latency.
      constexpr uint32_t kLoadUnroll = 8;
      const uint32_t quads = d.elems / 4;
      for (uint32_t q0 = threadIdx.x; q0 < quads; q0 += kLoadUnroll * blockDim.x) {
        float4 x[kLoadUnroll];
#pragma unroll
        for (uint32_t u = 0; u < kLoadUnroll; ++u) {
          const uint32_t q = q0 + u * blockDim.x;
          if (q < quads) x[u] = __ldg(reinterpret_cast<const float4*>(v) + q);
        }
#pragma unroll
        for (uint32_t u = 0; u < kLoadUnroll; ++u) {
          const uint32_t q = q0 + u * blockDim.x;
          if (q >= quads) break;
          const float xs[4] = {x[u].x, x[u].y, x[u].z, x[u].w};
#pragma unroll
          for (uint32_t j = 0; j < 4; ++j) {
            const uint32_t i = 4 * q + j;
            s[smem_index(i)] = (signs != nullptr && rht_sign(signs, i)) ? -xs[j] : xs[j];
          }
        }
      }
      for (uint32_t i = 4 * quads + threadIdx.x; i < d.elems; i += blockDim.x) {
        s[smem_index(i)] = (signs != nullptr && rht_sign(signs, i)) ? -v[i] : v[i];
      }
    } else {
      for (uint32_t i = threadIdx.x; i < d.elems; i += blockDim.x) {
        s[smem_index(i)] = (signs != nullptr && rht_sign(signs, i)) ? -v[i] : v[i];
      }
    }
  } else {
    const uint16_t* v = reinterpret_cast<const uint16_t*>(p.msg + d.byte_offset);
    const bool bf16 = dtype == DType::kBF16;
    for (uint32_t i = threadIdx.x; i < d.elems; i += blockDim.x) {
      const float x = widen16(v[i], bf16);
      s[smem_index(i)] = (signs != nullptr && rht_sign(signs, i)) ? -x : x;
    }
  }
  __syncthreads();
}

// Per-packet norms of fp32 sign/rht rows, summed over the packets in order
// (Encoder::pack_sign_payloads: one scalar::pack_f32_sign_layout call per packet).
__device__ void packet_norms(const RowDesc& d, const float* s, double* pk_sq, double* pk_abs, int* pk_fin,
                             LaneNorms* out) {
  const uint32_t pairs = d.packets * 8;
  for (uint32_t base = 0; base < pairs; base += blockDim.x) {
    const uint32_t t = base + threadIdx.x;
    const uint32_t k = t / 8;
    const bool active = t < pairs;
    const uint32_t first = active ? k * d.epp : 0;
    const uint32_t n = active ? min_u32(d.epp, d.elems - first) : 0;
    const LaneNorms g = group_norms(s, first, n);
    if (active && (t & 7u) == 0) {
      pk_sq[k] = g.sum_sq;
      pk_abs[k] = g.sum_abs;
      pk_fin[k] = g.finite ? 1 : 0;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    LaneNorms total{0.0, 0.0, true};
    for (uint32_t k = 0; k < d.packets; ++k) {
      total.sum_sq += pk_sq[k];
      total.sum_abs += pk_abs[k];
      total.finite = total.finite && pk_fin[k] != 0;
    }
    *out = total;
  }
  __syncthreads();
}

// Copies `bytes` bytes from shared to global memory as 4-byte words where the target allows;
// word w of the copy is written by one thread (consecutive threads, consecutive words).
__device__ inline void copy_word_out(uint8_t* dst, const uint8_t* src, uint32_t payload, uint32_t w) {
  const uint32_t n = stage_word_bytes(payload, w);
  if (n == 4 && (reinterpret_cast<uintptr_t>(dst + 4 * w) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(dst + 4 * w) = *reinterpret_cast<const uint32_t*>(src + 4 * w);
    return;
  }
  for (uint32_t b = 0; b < n; ++b) dst[4 * w + b] = src[4 * w + b];
}

// build_group's view of the row's input bits, in global memory (fp32 bits, or 16-bit v << 16).
struct InAt {
  const uint8_t* row;
  bool f32;
  __device__ uint32_t operator()(uint32_t e) const {
    return f32 ? __ldg(reinterpret_cast<const uint32_t*>(row) + e)
               : static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(row) + e)) << 16;
  }
};

// Planes of every packet of a lossy row: rounds of plan.packets packets, each built in the
// shared-memory stage by groups of 8 elements, then copied out word by word.
__device__ void pack_row(const EncodeParams& p, const RowDesc& d, uint64_t slot0, const float* s, Scheme scheme,
                         float scale, uint8_t* stage, const StagePlan& plan) {
  const DType dtype = static_cast<DType>(p.c.geom.dtype);
  const uint64_t dither_key = codec::rng_key(p.c.seed, p.c.msg_seq, d.row, codec::RngStream::kDither);
  const RowValues row_at{s};
  const InAt in{p.msg + d.byte_offset, dtype == DType::kF32};
  for (uint32_t k0 = 0; k0 < d.packets; k0 += plan.packets) {
    const uint32_t k1 = min_u32(d.packets, k0 + plan.packets);
    const GroupRange gr = round_groups(d, k0, k1);
    for (uint32_t gi = gr.begin + threadIdx.x; gi < gr.end; gi += blockDim.x) {
      stage_group(stage, plan, d, k0, gi, scheme, dtype, scale, dither_key, row_at, in);
    }
    __syncthreads();
    for (uint32_t idx = threadIdx.x; idx < (k1 - k0) * (plan.payload_stride / 4); idx += blockDim.x) {
      const StageWord sw = stage_word(plan, d, scheme, dtype, k0, idx);
      copy_word_out(packet_ptr(p, slot0 + sw.k) + kHeaderBytes, stage + sw.j * plan.payload_stride, sw.payload, sw.w);
    }
    __syncthreads();  // the next round rebuilds the stage
  }
}

__global__ void __launch_bounds__(kMaxRowThreads) encode_rows_kernel(EncodeParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const RowGeom& geom = p.c.geom;
  uint64_t slot0;
  const RowDesc d = block_row(p.c, &slot0);
  const uint32_t row = d.row;
  if (d.tail || d.scheme == Scheme::kNone) {
    encode_raw_row(p, d, slot0);
    return;
  }
  // Shared memory: packet sums (doubles first, for alignment), sign words, the row, state.
  const uint32_t max_packets = (geom.row_elems + geom.epp - 1) / geom.epp;
  double* pk_sq = reinterpret_cast<double*>(smem_raw);
  double* pk_abs = pk_sq + max_packets;
  uint64_t* signs = reinterpret_cast<uint64_t*>(pk_abs + max_packets);
  const StagePlan plan = stage_plan(geom);
  uint8_t* stage = reinterpret_cast<uint8_t*>(signs + (geom.row_elems + 63) / 64);
  int* pk_fin = reinterpret_cast<int*>(stage + plan.bytes);
  float* s = reinterpret_cast<float*>(pk_fin + max_packets);
  __shared__ RowState st;

  const DType dtype = static_cast<DType>(geom.dtype);
  const bool f32 = dtype == DType::kF32;
  Scheme scheme = d.scheme;
  const bool rht = scheme == Scheme::kRht;
  if (rht) load_sign_words(signs, codec::rng_key(p.c.seed, p.c.msg_seq, row, codec::RngStream::kRhtSigns), d.elems);

  if (f32 && (scheme == Scheme::kSign || rht)) {
    load_row(p, d, s, rht ? signs : nullptr);
    if (rht) fwht_row(s, d.elems, p.c.fwht_scale, nullptr);
    packet_norms(d, s, pk_sq, pk_abs, pk_fin, &st.norms);
    // Every thread reads the verdict before thread 0 may overwrite st.norms below.
    const bool finite = st.norms.finite;
    __syncthreads();
    if (!finite) {
      // NaN/inf in the row or its rotation: per element, scaled by the RMS of the finite input.
      if (rht) load_row(p, d, s, nullptr);
      row_norms(s, d.elems, &st.norms);
      scheme = Scheme::kSign;
      if (threadIdx.x == 0) st.scale = rms_of(st.norms.sum_sq, d.elems);
    } else if (threadIdx.x == 0) {
      st.scale = !rht ? rms_of(st.norms.sum_sq, d.elems)
                      : st.norms.sum_abs > 0.0 ? static_cast<float>(st.norms.sum_sq / st.norms.sum_abs) : 0.0f;
    }
  } else {
    // sq/sd (any dtype) and 16-bit sign/rht: the scale starts from the whole row's RMS.
    load_row(p, d, s, nullptr);
    row_norms(s, d.elems, &st.norms);
    float scale = rms_of(st.norms.sum_sq, d.elems);
    if (scheme == Scheme::kSq || scheme == Scheme::kSd) scale *= p.c.clip_sigmas;
    if (rht && st.norms.finite) {
      // Rotate in fp32: the heads are its signs, f = |V|^2 / |R(V)|_1 (Encoder::encode_16_row).
      load_row(p, d, s, signs);
      fwht_row(s, d.elems, p.c.fwht_scale, nullptr);
      row_norms(s, d.elems, &st.extra);
      const double l1 = st.extra.sum_abs;
      if (isfinite(l1)) {
        scale = l1 > 0.0 ? static_cast<float>(st.norms.sum_sq / l1) : 0.0f;
      } else {
        scheme = Scheme::kSign;  // a bf16 rotation overflowed fp32: send the input unrotated
        load_row(p, d, s, nullptr);
      }
    } else if (rht) {
      scheme = Scheme::kSign;
    }
    if (scheme == Scheme::kSign) scale = rms_of(st.norms.sum_sq, d.elems);
    if (threadIdx.x == 0) st.scale = scale;
  }
  __syncthreads();
  const float scale = st.scale;
  pack_row(p, d, slot0, s, scheme, scale, stage, plan);
  write_headers(p, d, slot0, scheme, scale);
}

}  // namespace

uint32_t row_block_threads(uint32_t row_elems) {
  uint32_t t = row_elems / 32;
  return t < 64 ? 64 : t > kMaxRowThreads ? kMaxRowThreads : t;
}

size_t encode_smem_bytes(const RowGeom& g) {
  const size_t max_packets = (g.row_elems + g.epp - 1) / g.epp;
  return max_packets * (2 * sizeof(double) + sizeof(int)) + (g.row_elems + 63) / 64 * sizeof(uint64_t) +
         stage_plan(g).bytes + smem_floats(g.row_elems) * sizeof(float);
}

int launch_encode(const EncodeParams& p, void* stream, int device) {
  return launch_rows(encode_rows_kernel, p, p.c, encode_smem_bytes(p.c.geom), stream, device);
}

int prepare_encode(int device) { return prepare_rows_kernel(encode_rows_kernel, device); }

}  // namespace trim::gpu

// Index math and per-element arithmetic of the GPU codec, as TRIM_HD inline functions: the
// kernels in cuda/*.cu call them on the device, and tests/cuda_index_test.cc runs the very
// same functions on the host against codec::Encoder / codec::Decoder (no GPU needed). Each
// function mirrors one piece of the CPU codec; the comment names which.
// No CUDA headers and no host-only calls: nvcc and g++ both compile this file.
#pragma once

#include <cmath>
#include <cstdint>

#include "codec/rng.h"
#include "codec/types.h"

// #pragma unroll in device code; host compilers would warn about an unknown pragma.
#ifdef __CUDA_ARCH__
#define TRIM_UNROLL _Pragma("unroll")
#else
#define TRIM_UNROLL
#endif

namespace trim::gpu {

using codec::DType;
using codec::Scheme;

constexpr uint32_t kHeaderBytes = 56;  // codec::kHeaderBytes
constexpr uint32_t kCrcOffset = 52;
constexpr uint8_t kFlagTrimmable = 0x02, kFlagTail = 0x04;

// A codec::Layout reduced to plain fields the device can read (cuda/geom_host.h builds it).
struct RowGeom {
  uint64_t bytes;
  uint64_t typed_elems;
  uint32_t row_elems;
  uint32_t typed_rows;
  uint32_t tail_bytes;
  uint32_t epp;       // elements per packet of typed rows
  uint32_t tail_epp;  // of the tail row
  uint8_t dtype, scheme, head_planes, row_log2;
};

// codec::RowInfo.
struct RowDesc {
  uint32_t row, elems, epp, packets;
  uint64_t byte_offset;
  bool tail;
  Scheme scheme;
};

TRIM_HD uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

TRIM_HD float widen16(uint16_t h, bool bf16) { return bf16 ? codec::bf16_to_f32(h) : codec::f16_to_f32(h); }
TRIM_HD uint16_t narrow16(float f, bool bf16) { return bf16 ? codec::f32_to_bf16(f) : codec::f32_to_f16(f); }

// Shared-memory slot of row element i: one pad float every 32 keeps the FWHT passes free of
// bank conflicts (a thread's 32 consecutive elements, and a warp's elements 32 apart, each
// land in 32 different banks).
TRIM_HD uint32_t smem_index(uint32_t i) { return i + (i >> 5); }
TRIM_HD uint32_t smem_floats(uint32_t row_elems) { return smem_index(row_elems) + 1; }

TRIM_HD uint32_t geom_rows(const RowGeom& g) { return g.typed_rows + (g.tail_bytes != 0 ? 1u : 0u); }

// Layout::row.
TRIM_HD RowDesc row_desc(const RowGeom& g, uint32_t r) {
  RowDesc d{};
  d.row = r;
  if (r >= g.typed_rows) {
    d.tail = true;
    d.elems = g.tail_bytes;
    d.byte_offset = g.bytes - g.tail_bytes;
    d.epp = g.tail_epp;
    d.packets = 1;
    d.scheme = Scheme::kNone;
    return d;
  }
  const uint64_t first = static_cast<uint64_t>(r) * g.row_elems;
  const uint64_t left = g.typed_elems - first;
  d.tail = false;
  d.elems = left < g.row_elems ? static_cast<uint32_t>(left) : g.row_elems;
  d.byte_offset = first * codec::dtype_bytes(static_cast<DType>(g.dtype));
  d.epp = g.epp;
  d.packets = (d.elems + g.epp - 1) / g.epp;
  d.scheme = static_cast<Scheme>(g.scheme);
  return d;
}

// Index of packet 0 of row r among all packets of the message (every typed row but the last
// is full, and the tail row comes last, so no table is needed).
TRIM_HD uint64_t row_first_slot(const RowGeom& g, uint32_t r) {
  const uint64_t full_packets = (g.row_elems + g.epp - 1) / g.epp;
  if (r < g.typed_rows) return static_cast<uint64_t>(r) * full_packets;
  if (g.typed_rows == 0) return 0;
  return static_cast<uint64_t>(g.typed_rows - 1) * full_packets + row_desc(g, g.typed_rows - 1).packets;
}

// codec::plane_bits / plane_bytes / trim_point_bytes.
struct Planes {
  uint32_t b0, b1, b2;  // bits per element
  uint32_t p0, p1, p2;  // bytes of each plane for a packet's element count
  TRIM_HD uint32_t total() const { return p0 + p1 + p2; }
};

TRIM_HD Planes packet_planes(Scheme scheme, DType dtype, bool tail, uint32_t n) {
  Planes p{};
  if (tail) {
    p.b2 = 8;
  } else if (scheme == Scheme::kNone) {
    p.b2 = 8 * codec::dtype_bytes(dtype);
  } else {
    p.b0 = 1;
    p.b1 = scheme == Scheme::kSign ? 15 : 16;  // only the sign scheme's head is a bit of the value
    p.b2 = dtype == DType::kF32 ? 16 : 0;
  }
  p.p0 = static_cast<uint32_t>((static_cast<uint64_t>(n) * p.b0 + 7) / 8);
  p.p1 = static_cast<uint32_t>((static_cast<uint64_t>(n) * p.b1 + 7) / 8);
  p.p2 = static_cast<uint32_t>((static_cast<uint64_t>(n) * p.b2 + 7) / 8);
  return p;
}

TRIM_HD uint32_t trim_bytes_of(const Planes& p, Scheme scheme, uint8_t head_planes) {
  if (scheme == Scheme::kNone) return 0;
  return head_planes >= 2 ? p.p0 + p.p1 : p.p0;
}

// ---- Header (codec::write_header; psn, dst_ip4 and dst_port are 0 as the encoder leaves them).

TRIM_HD uint32_t crc32c_bitwise(const uint8_t* data, uint32_t len) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint32_t i = 0; i < len; ++i) {
    c ^= data[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

TRIM_HD void put_le(uint8_t* p, uint64_t v, uint32_t bytes) {
  for (uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
TRIM_HD uint32_t get_le(const uint8_t* p, uint32_t bytes) {
  uint32_t v = 0;
  for (uint32_t i = 0; i < bytes; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

struct HeaderFields {
  uint8_t flags, scheme, dtype, head_planes, row_log2;
  uint64_t cookie;
  uint32_t msg_seq, msg_bytes, row;
  uint16_t first_elem, elem_count, payload_bytes, trim_bytes;
  float scale;
};

// The header of packet k of a row (Encoder::row_header + set_packet_range).
TRIM_HD HeaderFields packet_header(const RowGeom& g, const RowDesc& d, uint64_t cookie, uint32_t msg_seq,
                                   bool trimmable, Scheme scheme, float scale, uint32_t k) {
  HeaderFields h{};
  h.flags = static_cast<uint8_t>((d.tail ? kFlagTail : 0) | (trimmable && scheme != Scheme::kNone ? kFlagTrimmable : 0));
  h.scheme = static_cast<uint8_t>(scheme);
  h.dtype = g.dtype;
  h.head_planes = g.head_planes;
  h.row_log2 = g.row_log2;
  h.cookie = cookie;
  h.msg_seq = msg_seq;
  h.msg_bytes = static_cast<uint32_t>(g.bytes);
  h.row = d.row;
  h.scale = scale;
  const uint32_t first = k * d.epp, n = min_u32(d.epp, d.elems - first);
  const Planes p = packet_planes(scheme, static_cast<DType>(g.dtype), d.tail, n);
  h.first_elem = static_cast<uint16_t>(first);
  h.elem_count = static_cast<uint16_t>(n);
  h.payload_bytes = static_cast<uint16_t>(p.total());
  h.trim_bytes = static_cast<uint16_t>(trim_bytes_of(p, scheme, g.head_planes));
  return h;
}

TRIM_HD void header_bytes(const HeaderFields& h, uint8_t out[kHeaderBytes]) {
  put_le(out + 0, 0x5254, 2);
  out[2] = 1;
  out[3] = h.flags;
  out[4] = h.scheme;
  out[5] = h.dtype;
  out[6] = h.head_planes;
  out[7] = h.row_log2;
  put_le(out + 8, h.cookie, 8);
  put_le(out + 16, h.msg_seq, 4);
  put_le(out + 20, h.msg_bytes, 4);
  put_le(out + 24, h.row, 4);
  put_le(out + 28, h.first_elem, 2);
  put_le(out + 30, h.elem_count, 2);
  put_le(out + 32, h.payload_bytes, 2);
  put_le(out + 34, h.trim_bytes, 2);
  put_le(out + 36, codec::f32_bits(h.scale), 4);
  for (uint32_t i = 40; i < kCrcOffset; ++i) out[i] = 0;  // psn, dst_ip4, dst_port, reserved
  // The encoder never sets TRIMMED, so the CRC runs over the bytes as they are.
  put_le(out + kCrcOffset, crc32c_bitwise(out, kCrcOffset), 4);
}

// ---- Packing, 8 elements (one "group": 1 byte of plane 0, 15 or 16 of plane 1, 16 of plane 2).
// Group q of a packet holds its elements [8q, 8q + 8); the last group of a row may hold fewer
// (r valid ones), whose missing fields are zero, exactly as the CPU's partial packing leaves
// the unused bits of the last bytes.

struct Group {
  uint8_t p0;
  uint8_t p1[16];
  uint8_t p2[16];
};

// Eight 15-bit fields as a little-endian bitstream of 15 bytes (planes.cc pack15).
TRIM_HD void pack15x8(const uint32_t f[8], uint8_t out[15]) {
  const uint64_t lo = static_cast<uint64_t>(f[0]) | (static_cast<uint64_t>(f[1]) << 15) |
                      (static_cast<uint64_t>(f[2]) << 30) | (static_cast<uint64_t>(f[3]) << 45) |
                      (static_cast<uint64_t>(f[4]) << 60);
  const uint64_t hi = (static_cast<uint64_t>(f[4]) >> 4) | (static_cast<uint64_t>(f[5]) << 11) |
                      (static_cast<uint64_t>(f[6]) << 26) | (static_cast<uint64_t>(f[7]) << 41);
  put_le(out, lo, 8);
  put_le(out + 8, hi, 7);
}

// Bytes of plane 1 and plane 2 a group of r valid elements occupies.
TRIM_HD uint32_t group_p1_bytes(uint32_t b1, uint32_t r) { return (b1 * r + 7) / 8; }
TRIM_HD uint32_t group_p2_bytes(uint32_t b2, uint32_t r) { return b2 * r / 8; }

// fp32 sign layout (sign): plane 0 = bit 31, plane 1 = bits 30..16, plane 2 = bits 15..0.
TRIM_HD void pack_group_f32_sign(const uint32_t x[8], uint32_t r, Group* g) {
  uint32_t f[8];
  g->p0 = 0;
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t v = k < r ? x[k] : 0u;
    g->p0 = static_cast<uint8_t>(g->p0 | ((v >> 31) << k));
    f[k] = (v >> 16) & 0x7FFFu;
    put_le(g->p2 + 2 * k, v & 0xFFFFu, 2);
  }
  pack15x8(f, g->p1);
}

// fp32 value layout (sq, sd, rht): plane 0 = the heads (random, or the rotated value's sign),
// plane 1 = the input's bits 31..16, plane 2 = its bits 15..0.
TRIM_HD void pack_group_f32_value(const uint32_t x[8], uint32_t r, uint8_t heads, Group* g) {
  g->p0 = heads;
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t v = k < r ? x[k] : 0u;
    put_le(g->p1 + 2 * k, v >> 16, 2);
    put_le(g->p2 + 2 * k, v & 0xFFFFu, 2);
  }
}

// The sq/sd head of element `elem` of a row (planes.cc scalar::random_heads).
TRIM_HD bool random_head(uint64_t key, uint32_t elem, float v, float clip, bool sd) {
  const float lo = v != v ? -clip : (v < -clip ? -clip : v);  // max(v, -L), NaN -> -L
  const float x = clip < lo ? clip : lo;                       // min(., L)
  const float u = codec::rng_uniform(key, elem);
  if (sd) return x + (2.0f * u - 1.0f) * clip > 0.0f;
  const float two_l = 2.0f * clip;
  return u * two_l < clip + x;
}

// The row's fp32 values at smem_index(e), as build_group reads them.
struct RowValues {
  const float* s;
  TRIM_HD float operator()(uint32_t e) const { return s[smem_index(e)]; }
};

// Group e0 / 8 of a lossy row (elements [e0, e0 + r), r <= 8) as the encoder packs it
// (Encoder::pack_*_payloads). s(e) is the row's element e as fp32 (rotated for rht), in(e)
// the input bits of element e as an fp32 pattern: a 16-bit value v as v << 16 (its sign is
// then bit 31, its low 15 bits land in plane 1, and its empty plane 2 is not written).
template <class RowAt, class InAt>
TRIM_HD void build_group(RowAt s, InAt in, uint32_t e0, uint32_t r, Scheme scheme, DType dtype, float scale,
                         uint64_t dither_key, Group* g) {
  const bool value_layout = scheme != Scheme::kSign;
  const bool rht = scheme == Scheme::kRht;
  uint8_t heads = 0;
  for (uint32_t j = 0; value_layout && j < r; ++j) {
    // rht: the sign of the rotated value (scalar::pack_sign_bits32); sq/sd: random heads.
    const bool h = rht ? (codec::f32_bits(s(e0 + j)) >> 31) != 0
                       : random_head(dither_key, e0 + j, s(e0 + j), scale, scheme == Scheme::kSd);
    heads = static_cast<uint8_t>(heads | (static_cast<uint32_t>(h) << j));
  }
  // fp32 rows other than rht hold their input in s; rht's s is rotated, so it reads the input.
  const bool from_s = dtype == DType::kF32 && !rht;
  uint32_t x[8];
  for (uint32_t j = 0; j < 8; ++j) x[j] = j >= r ? 0u : from_s ? codec::f32_bits(s(e0 + j)) : in(e0 + j);
  if (value_layout) {
    pack_group_f32_value(x, r, heads, g);
  } else {
    pack_group_f32_sign(x, r, g);
  }
}

// Group q (r valid elements) into the payload of a packet with planes pl, at its place in each plane.
TRIM_HD void place_group(uint8_t* payload, const Planes& pl, uint32_t q, uint32_t r, const Group& g) {
  payload[q] = g.p0;
  uint8_t* p1 = payload + pl.p0 + q * pl.b1;  // a group holds b1 bytes of plane 1
  const uint32_t n1 = group_p1_bytes(pl.b1, r), n2 = group_p2_bytes(pl.b2, r);
  for (uint32_t b = 0; b < n1; ++b) p1[b] = g.p1[b];
  uint8_t* p2 = payload + pl.p0 + pl.p1 + 16 * q;
  for (uint32_t b = 0; b < n2; ++b) p2[b] = g.p2[b];
}

// ---- RHT (codec/rht.h, codec/fwht.h)

// Sign of row element e: bit e % 64 of word e / 64 of the row's kRhtSigns stream.
TRIM_HD bool rht_sign(const uint64_t* words, uint32_t e) { return (words[e >> 6] >> (e & 63)) & 1u; }

// Which binary block of a row of `elems` elements element e falls in (for_each_rht_block:
// largest block first). Returns the block's log2 size and sets *offset.
TRIM_HD int rht_block_of(uint32_t elems, uint32_t e, uint32_t* offset) {
  uint32_t off = 0;
  for (int b = 31; b >= 0; --b) {
    if (elems & (1u << b)) {
      if (e < off + (1u << b)) {
        *offset = off;
        return b;
      }
      off += 1u << b;
    }
  }
  *offset = off;
  return -1;
}


// Element index of register r of group g in an FWHT pass over stages [s, s + k) of a block:
// the group's 2^k elements are spaced 2^s apart.
TRIM_HD uint32_t fwht_pass_elem(uint32_t g, int s, int k, uint32_t r) {
  const uint32_t h = 1u << s;
  const uint32_t base = ((g >> s) << (s + k)) | (g & (h - 1u));
  return base + r * h;
}

// One group of an FWHT pass over stages [st, st + K) of the block of 2^log2n elements at row
// offset `off`: its 2^K elements, spaced 2^st apart, go through the K butterfly stages in
// increasing stride order (the fwht.h contract: (a + b, a - b) in fp32, no FMA). The last pass
// also multiplies by `scale` and, for the inverse, negates where the row's sign bit is set
// (inverse_signs != nullptr). s is the row at smem_index(i).
template <int K>
TRIM_HD void fwht_group(float* s, uint32_t off, int st, uint32_t g, bool last, float scale,
                        const uint64_t* inverse_signs) {
  constexpr uint32_t kRegs = 1u << K;
  float x[kRegs];
  uint32_t idx[kRegs];
TRIM_UNROLL
  for (uint32_t r = 0; r < kRegs; ++r) {
    idx[r] = off + fwht_pass_elem(g, st, K, r);
    x[r] = s[smem_index(idx[r])];
  }
TRIM_UNROLL
  for (int b = 0; b < K; ++b) {
    const uint32_t h = 1u << b;
TRIM_UNROLL
    for (uint32_t r = 0; r < kRegs; ++r) {
      if ((r & h) == 0) {
        const float a = x[r], c = x[r + h];
        x[r] = a + c;
        x[r + h] = a - c;
      }
    }
  }
  if (last) {
TRIM_UNROLL
    for (uint32_t r = 0; r < kRegs; ++r) {
      const float y = x[r] * scale;
      x[r] = (inverse_signs != nullptr && rht_sign(inverse_signs, idx[r])) ? -y : y;
    }
  }
TRIM_UNROLL
  for (uint32_t r = 0; r < kRegs; ++r) s[smem_index(idx[r])] = x[r];
}

// Stages in the FWHT pass that starts at stage st of a block of 2^log2n elements (at most 5).
TRIM_HD int fwht_pass_stages(int log2n, int st) { return log2n - st < 5 ? log2n - st : 5; }

// ---- Packet staging in shared memory
// The kernels build (encode) or gather (decode) the payloads of a few packets at a time in a
// shared-memory stage, payload j of a round at j * payload_stride, so global memory sees
// whole 4-byte words from consecutive threads instead of scattered byte stores.
struct StagePlan {
  uint32_t payload_stride;  // largest payload of the layout, rounded up to 16 bytes
  uint32_t packets;         // packets per round
  uint32_t bytes;           // packets * payload_stride
};

constexpr uint32_t kStageTargetBytes = 16384;

TRIM_HD StagePlan stage_plan(const RowGeom& g) {
  StagePlan p{};
  const uint32_t payload = packet_planes(static_cast<Scheme>(g.scheme), static_cast<DType>(g.dtype), false, g.epp).total();
  p.payload_stride = (payload + 15u) & ~15u;
  p.packets = p.payload_stride >= kStageTargetBytes ? 1u : kStageTargetBytes / p.payload_stride;
  p.bytes = p.packets * p.payload_stride;
  return p;
}

// Bytes [4w, 4w + n) of a payload of `payload` bytes that word w of a copy covers (n = 0: none).
TRIM_HD uint32_t stage_word_bytes(uint32_t payload, uint32_t w) {
  return 4 * w >= payload ? 0u : min_u32(4, payload - 4 * w);
}

// The groups of a lossy row that pack_row builds in the round of packets [k0, k1): [begin, end).
struct GroupRange {
  uint32_t begin, end;
};
TRIM_HD GroupRange round_groups(const RowDesc& d, uint32_t k0, uint32_t k1) {
  return GroupRange{k0 * (d.epp / 8), (min_u32(k1 * d.epp, d.elems) + 7) / 8};
}

// Group gi of a lossy row (elements [8 gi, 8 gi + 8) of the row) packed into its packet's
// payload in the stage of the round that starts at packet k0 (epp is a multiple of 8).
template <class RowAt, class InAt>
TRIM_HD void stage_group(uint8_t* stage, const StagePlan& plan, const RowDesc& d, uint32_t k0, uint32_t gi,
                         Scheme scheme, DType dtype, float scale, uint64_t dither_key, RowAt s, InAt in) {
  const uint32_t groups_per_packet = d.epp / 8;
  const uint32_t k = gi / groups_per_packet, q = gi - k * groups_per_packet;
  const uint32_t e0 = 8 * gi, r = min_u32(8, d.elems - e0);
  const Planes pl = packet_planes(scheme, dtype, false, min_u32(d.epp, d.elems - k * d.epp));
  Group g;
  build_group(s, in, e0, r, scheme, dtype, scale, dither_key, &g);
  place_group(stage + (k - k0) * plan.payload_stride, pl, q, r, g);
}

// Word idx of a round's copy between the stage and the packets (packets [k0, k1) of a lossy
// row, payload_stride / 4 words each): word w of packet k's payload, at stage slot j; the
// payload holds `payload` bytes.
struct StageWord {
  uint32_t j, w, k, payload;
};
TRIM_HD StageWord stage_word(const StagePlan& plan, const RowDesc& d, Scheme scheme, DType dtype, uint32_t k0,
                             uint32_t idx) {
  StageWord sw{};
  const uint32_t words = plan.payload_stride / 4;
  sw.j = idx / words;
  sw.w = idx - sw.j * words;
  sw.k = k0 + sw.j;
  sw.payload = packet_planes(scheme, dtype, false, min_u32(d.epp, d.elems - sw.k * d.epp)).total();
  return sw;
}

// ---- Raw rows (scheme none, and the tail: Encoder::encode_raw_row, Decoder::decode_slot)
// Byte i of a raw row sits at payload byte i % pp of the row's packet i / pp, where pp is a
// packet's payload (epp elements of the row's element size).

struct RawPos {
  uint32_t packet, within;
};
TRIM_HD RawPos raw_pos(uint32_t i, uint32_t packet_payload) {
  const uint32_t k = i / packet_payload;
  return RawPos{k, i - k * packet_payload};
}

// The decoded byte at payload offset `within` of a raw packet of which `payload_received`
// bytes arrived (payload == nullptr: missing). Only whole elements are kept; the rest is 0.
TRIM_HD uint8_t raw_decoded_byte(const uint8_t* payload, uint32_t payload_received, uint32_t esize,
                                 uint32_t within) {
  return (payload != nullptr && within < payload_received / esize * esize) ? payload[within] : 0;
}

// How a raw row's `row_bytes` bytes are written at address `dst`: bytes [0, head) one by one
// until dst + head is 8-byte aligned, then `units` 8-byte stores, then bytes [rest, row_bytes)
// one by one (fewer than 8). NCCL's LL protocol polls 8-byte lines (4 data bytes + a 4-byte
// flag) while they land, so each aligned line must be written by one 8-byte store, never in
// pieces.
struct RawSplit {
  uint32_t head, units, rest;
};
TRIM_HD RawSplit raw_split(uint64_t dst, uint32_t row_bytes) {
  RawSplit sp{};
  sp.head = min_u32(row_bytes, static_cast<uint32_t>((8u - (dst & 7u)) & 7u));
  sp.units = (row_bytes - sp.head) / 8;
  sp.rest = sp.head + 8 * sp.units;
  return sp;
}

// ---- Decoding (codec::Decoder)

// Decoder::Levels: elements [0,n2) whole, [n2,n1) 16-bit prefix, [n1,n0) head only, [n0,n) missing.
struct Levels {
  uint32_t n, n0, n1, n2;
};

TRIM_HD Levels decode_levels(const Planes& pb, uint32_t n, uint32_t received) {
  Levels l{n, 0, 0, 0};
  if (received == 0) return l;
  const uint32_t c = received;
  if (pb.b0 == 0) {
    l.n0 = l.n1 = l.n2 = min_u32(n, c / (pb.b2 / 8));
    return l;
  }
  const uint64_t c8 = static_cast<uint64_t>(c) * 8;
  l.n0 = c8 < n ? static_cast<uint32_t>(c8) : n;
  if (c > pb.p0) {
    const uint64_t f = (static_cast<uint64_t>(c - pb.p0) * 8) / pb.b1;
    l.n1 = f < n ? static_cast<uint32_t>(f) : n;
  }
  if (pb.b2 == 0) {
    l.n2 = l.n1;
  } else if (c > pb.p0 + pb.p1) {
    l.n2 = min_u32(n, (c - pb.p0 - pb.p1) / 2);
  }
  return l;
}

TRIM_HD uint32_t head_bit(const uint8_t* p0, uint32_t i) { return (p0[i >> 3] >> (i & 7)) & 1u; }

// Field i of a 15-bit stream, reading only the bytes that hold it.
TRIM_HD uint32_t field15(const uint8_t* p1, uint32_t i) {
  const uint32_t bit = 15 * i, shift = bit & 7;
  return (get_le(p1 + (bit >> 3), (shift + 15 + 7) / 8) >> shift) & 0x7FFFu;
}

TRIM_HD uint32_t midpoint_fill(uint32_t top16) {
  const uint32_t exp = (top16 >> 7) & 0xFFu;
  return (exp != 0 && exp != 0xFFu) ? 0x8000u : 0u;
}

TRIM_HD float head_estimate(Scheme scheme, uint32_t head, float scale) {
  const bool positive = (scheme == Scheme::kSq || scheme == Scheme::kSd) ? head != 0 : head == 0;
  return positive ? scale : -scale;
}

// Head-only value of element i of a packet (fill_heads, then subtract_dither for sd).
TRIM_HD float head_value(Scheme scheme, const uint8_t* p0, uint32_t i, float scale, uint64_t dither_key,
                         uint32_t elem_in_row) {
  float v = head_estimate(scheme, head_bit(p0, i), scale);
  if (scheme == Scheme::kSd) v -= (2.0f * codec::rng_uniform(dither_key, elem_in_row) - 1.0f) * scale;
  return v;
}

// Decoder::decode_f32 for element i of a packet: payload points at the packet's plane 0.
TRIM_HD float decode_f32_elem(const uint8_t* payload, const Planes& pb, const Levels& l, uint32_t i, Scheme scheme,
                              float scale, uint64_t dither_key, uint32_t elem_in_row) {
  if (i >= l.n0) return 0.0f;
  if (i >= l.n1) return head_value(scheme, payload, i, scale, dither_key, elem_in_row);
  const uint8_t* p1 = payload + pb.p0;
  const bool value_layout = pb.b1 == 16;
  const uint32_t top = value_layout ? get_le(p1 + 2 * i, 2) : (head_bit(payload, i) << 15) | field15(p1, i);
  const uint32_t low = i < l.n2 ? get_le(p1 + pb.p1 + 2 * i, 2) : midpoint_fill(top);
  return codec::bits_f32((top << 16) | low);
}

// The whole 16-bit value of element i < l.n1 (assemble16).
TRIM_HD uint16_t decode_16_whole(const uint8_t* payload, const Planes& pb, uint32_t i) {
  const uint8_t* p1 = payload + pb.p0;
  if (pb.b1 == 16) return static_cast<uint16_t>(get_le(p1 + 2 * i, 2));
  return static_cast<uint16_t>((head_bit(payload, i) << 15) | field15(p1, i));
}


// RMS as the encoder computes it from a double sum of squares.
// Element i of a packet of n elements whose first `received` payload bytes are at `payload`,
// as fp32 (for rht only meaningful when rht_own_bits); for 16-bit rows also the exact value when it arrived
// whole (*whole = true, *whole16). Decoder::decode_f32 / decode_16 for one element; e is its
// index in the row (the sd dither's).
TRIM_HD float decode_elem(DType dtype, Scheme scheme, float scale, uint64_t dither_key, const uint8_t* payload,
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

// rht (Decoder::estimate_rht_row): whether element i of a packet got its own bits (whole, or
// the 16-bit prefix), which decode_elem then decodes; the others are estimated from R^-1 of
// the row's scaled heads.
TRIM_HD bool rht_own_bits(DType dtype, uint32_t received, uint32_t n, uint32_t i) {
  return i < decode_levels(packet_planes(Scheme::kRht, dtype, false, n), n, received).n1;
}

// rht: element i's entry of the scaled heads the decoder rotates back: +-scale by its head,
// 0 when even the head is missing.
TRIM_HD float rht_head_coord(DType dtype, float scale, const uint8_t* payload, uint32_t received, uint32_t n,
                             uint32_t i) {
  const Levels l = decode_levels(packet_planes(Scheme::kRht, dtype, false, n), n, received);
  return i < l.n0 ? head_estimate(Scheme::kRht, head_bit(payload, i), scale) : 0.0f;
}

TRIM_HD float rms_of(double sum_sq, uint32_t n) {
  return n == 0 ? 0.0f : static_cast<float>(std::sqrt(sum_sq / n));
}

}  // namespace trim::gpu

#include "tests/cuda_emu.h"

#include <algorithm>
#include <cmath>

namespace trim::gpu::emu {
namespace {

struct Ctx {
  const codec::CodecConfig* cfg;
  const codec::MessageId* id;
  RowGeom g;
  uint64_t first_slot;
  size_t stride;
};

void write_headers(const Ctx& c, uint8_t* out, const RowDesc& d, uint64_t slot0, Scheme scheme, float scale) {
  for (uint32_t k = 0; k < d.packets; ++k) {
    const HeaderFields h = packet_header(c.g, d, c.id->cookie, c.id->msg_seq, c.id->trimmable, scheme, scale, k);
    header_bytes(h, out + (slot0 + k - c.first_slot) * c.stride);
  }
}

void load_row(const Ctx& c, const uint8_t* msg, const RowDesc& d, std::vector<float>& s, const uint64_t* signs) {
  const DType dtype = static_cast<DType>(c.g.dtype);
  for (uint32_t i = 0; i < d.elems; ++i) {
    float x;
    if (dtype == DType::kF32) {
      std::memcpy(&x, msg + d.byte_offset + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, msg + d.byte_offset + 2 * i, 2);
      x = widen16(h, dtype == DType::kBF16);
    }
    s[smem_index(i)] = (signs != nullptr && rht_sign(signs, i)) ? -x : x;
  }
}

// The input bits of element e of a row (InAt in cuda/encode.cu).
struct InBytes {
  const uint8_t* row;
  bool f32;
  uint32_t operator()(uint32_t e) const {
    if (f32) {
      uint32_t x;
      std::memcpy(&x, row + 4 * static_cast<size_t>(e), 4);
      return x;
    }
    uint16_t h;
    std::memcpy(&h, row + 2 * static_cast<size_t>(e), 2);
    return static_cast<uint32_t>(h) << 16;
  }
};

void pack_row(const Ctx& c, const uint8_t* msg, uint8_t* out, const RowDesc& d, uint64_t slot0,
              const std::vector<float>& s, Scheme scheme, float scale) {
  const DType dtype = static_cast<DType>(c.g.dtype);
  const uint64_t dither_key = codec::rng_key(c.cfg->seed, c.id->msg_seq, d.row, codec::RngStream::kDither);
  const StagePlan plan = stage_plan(c.g);
  const RowValues row_at{s.data()};
  const InBytes in{msg + d.byte_offset, dtype == DType::kF32};
  // Poisoned, so a byte the kernel would copy out without having built it shows up.
  std::vector<uint8_t> stage(plan.bytes, 0xA5);
  for (uint32_t k0 = 0; k0 < d.packets; k0 += plan.packets) {
    const uint32_t k1 = min_u32(d.packets, k0 + plan.packets);
    const GroupRange gr = round_groups(d, k0, k1);
    for (uint32_t gi = gr.begin; gi < gr.end; ++gi) {
      stage_group(stage.data(), plan, d, k0, gi, scheme, dtype, scale, dither_key, row_at, in);
    }
    for (uint32_t idx = 0; idx < (k1 - k0) * (plan.payload_stride / 4); ++idx) {
      const StageWord sw = stage_word(plan, d, scheme, dtype, k0, idx);
      uint8_t* dst = out + (slot0 + sw.k - c.first_slot) * c.stride + kHeaderBytes;
      std::memcpy(dst + 4 * sw.w, stage.data() + sw.j * plan.payload_stride + 4 * sw.w,
                  stage_word_bytes(sw.payload, sw.w));
    }
  }
}

}  // namespace

void encode_rows(const codec::CodecConfig& cfg, const codec::Layout& layout, const codec::MessageId& id,
                 const uint8_t* msg, uint32_t first_row, uint32_t n_rows, uint8_t* out, size_t stride) {
  Ctx c{&cfg, &id, make_geom(cfg, layout), 0, stride};
  c.first_slot = row_first_slot(c.g, first_row);
  std::vector<float> s(smem_floats(c.g.row_elems));
  for (uint32_t row = first_row; row < first_row + n_rows; ++row) {
    const RowDesc d = row_desc(c.g, row);
    const uint64_t slot0 = row_first_slot(c.g, row);
    if (d.tail || d.scheme == Scheme::kNone) {
      const uint32_t esize = d.tail ? 1u : codec::dtype_bytes(layout.dtype());
      const uint32_t packet_payload = d.epp * esize;
      for (uint32_t i = 0; i < d.elems * esize; ++i) {
        const RawPos at = raw_pos(i, packet_payload);
        out[(slot0 + at.packet - c.first_slot) * stride + kHeaderBytes + at.within] = msg[d.byte_offset + i];
      }
      write_headers(c, out, d, slot0, Scheme::kNone, 0.0f);
      continue;
    }
    const DType dtype = layout.dtype();
    const bool f32 = dtype == DType::kF32;
    Scheme scheme = d.scheme;
    const bool rht = scheme == Scheme::kRht;
    const std::vector<uint64_t> signs = sign_words(cfg, id.msg_seq, row, d.elems);
    float scale;
    if (f32 && (scheme == Scheme::kSign || rht)) {
      load_row(c, msg, d, s, rht ? signs.data() : nullptr);
      if (rht) fwht_row(s, d.elems, nullptr);
      Norms total;
      for (uint32_t k = 0; k < d.packets; ++k) {
        const Norms n = group_norms(s, k * d.epp, min_u32(d.epp, d.elems - k * d.epp));
        total.sum_sq += n.sum_sq;
        total.sum_abs += n.sum_abs;
        total.finite = total.finite && n.finite;
      }
      if (!total.finite) {
        if (rht) load_row(c, msg, d, s, nullptr);
        scale = rms_of(group_norms(s, 0, d.elems).sum_sq, d.elems);
        scheme = Scheme::kSign;
      } else {
        scale = !rht ? rms_of(total.sum_sq, d.elems)
                     : total.sum_abs > 0.0 ? static_cast<float>(total.sum_sq / total.sum_abs) : 0.0f;
      }
    } else {
      load_row(c, msg, d, s, nullptr);
      const Norms row_n = group_norms(s, 0, d.elems);
      scale = rms_of(row_n.sum_sq, d.elems);
      if (scheme == Scheme::kSq || scheme == Scheme::kSd) scale *= cfg.clip_sigmas;
      if (rht && row_n.finite) {
        load_row(c, msg, d, s, signs.data());
        fwht_row(s, d.elems, nullptr);
        const double l1 = group_norms(s, 0, d.elems).sum_abs;
        if (std::isfinite(l1)) {
          scale = l1 > 0.0 ? static_cast<float>(row_n.sum_sq / l1) : 0.0f;
        } else {
          scheme = Scheme::kSign;
          load_row(c, msg, d, s, nullptr);
        }
      } else if (rht) {
        scheme = Scheme::kSign;
      }
      if (scheme == Scheme::kSign) scale = rms_of(row_n.sum_sq, d.elems);
    }
    pack_row(c, msg, out, d, slot0, s, scheme, scale);
    write_headers(c, out, d, slot0, scheme, scale);
  }
}

void decode_rows(const codec::CodecConfig& cfg, const codec::Layout& layout, const codec::MessageId& id,
                 const uint8_t* packets, size_t stride, const uint32_t* received, uint32_t first_row, uint32_t n_rows,
                 uint8_t* out) {
  const RowGeom g = make_geom(cfg, layout);
  const uint64_t first_slot = row_first_slot(g, first_row);
  auto slot = [&](uint64_t sl, uint32_t* payload_received) -> const uint8_t* {
    const uint32_t got = received[sl - first_slot];
    *payload_received = got < kHeaderBytes ? 0 : got - kHeaderBytes;
    return got < kHeaderBytes ? nullptr : packets + (sl - first_slot) * stride;
  };
  std::vector<float> s(smem_floats(g.row_elems));
  for (uint32_t row = first_row; row < first_row + n_rows; ++row) {
    const RowDesc d = row_desc(g, row);
    const uint64_t slot0 = row_first_slot(g, row);
    uint8_t* dst = out + d.byte_offset;
    if (d.tail || d.scheme == Scheme::kNone) {
      // decode_raw_row: 8-byte units at 8-byte-aligned addresses, the unaligned ends byte by byte.
      const uint32_t esize = d.tail ? 1u : codec::dtype_bytes(layout.dtype());
      const uint32_t row_bytes = d.elems * esize, packet_payload = d.epp * esize;
      auto byte_at = [&](uint32_t i) {
        const RawPos at = raw_pos(i, packet_payload);
        uint32_t pr;
        const uint8_t* pk = slot(slot0 + at.packet, &pr);
        return raw_decoded_byte(pk == nullptr ? nullptr : pk + kHeaderBytes, pr, esize, at.within);
      };
      const RawSplit sp = raw_split(reinterpret_cast<uintptr_t>(dst), row_bytes);
      for (uint32_t u = 0; u < sp.units; ++u) {
        const uint32_t i0 = sp.head + 8 * u;
        uint64_t v = 0;
        for (uint32_t b = 0; b < 8; ++b) v |= static_cast<uint64_t>(byte_at(i0 + b)) << (8 * b);
        std::memcpy(dst + i0, &v, 8);  // little-endian, as on the GPU
      }
      for (uint32_t j = 0; j < row_bytes - 8 * sp.units; ++j) {
        const uint32_t i = j < sp.head ? j : sp.rest + (j - sp.head);
        dst[i] = byte_at(i);
      }
      continue;
    }
    Scheme scheme = d.scheme;
    float scale = 0.0f;
    for (uint32_t k = 0; k < d.packets; ++k) {
      uint32_t pr;
      const uint8_t* pk = slot(slot0 + k, &pr);
      if (pk != nullptr) {
        scheme = static_cast<Scheme>(pk[4]);
        scale = codec::bits_f32(get_le(pk + 36, 4));
        break;
      }
    }
    const DType dtype = layout.dtype();
    const bool bf16 = dtype == DType::kBF16;
    const uint64_t dither_key = codec::rng_key(cfg.seed, id.msg_seq, row, codec::RngStream::kDither);
    const StagePlan plan = stage_plan(g);
    std::vector<uint8_t> stage(plan.bytes, 0xA5);
    bool estimate = false;
    for (uint32_t k0 = 0; k0 < d.packets; k0 += plan.packets) {
      const uint32_t k1 = min_u32(d.packets, k0 + plan.packets);
      std::fill(stage.begin(), stage.end(), 0xA5);  // bytes that did not arrive are never read
      for (uint32_t idx = 0; idx < (k1 - k0) * (plan.payload_stride / 4); ++idx) {
        const StageWord sw = stage_word(plan, d, scheme, dtype, k0, idx);
        uint32_t pr;
        const uint8_t* pk = slot(slot0 + sw.k, &pr);
        if (pk == nullptr) continue;
        std::memcpy(stage.data() + sw.j * plan.payload_stride + 4 * sw.w, pk + kHeaderBytes + 4 * sw.w,
                    stage_word_bytes(min_u32(pr, sw.payload), sw.w));
      }
      for (uint32_t e = k0 * d.epp; e < min_u32(k1 * d.epp, d.elems); ++e) {
        const uint32_t k = e / d.epp, first = k * d.epp, i = e - first, n = min_u32(d.epp, d.elems - first);
        uint32_t pr;
        const uint8_t* pk = slot(slot0 + k, &pr);
        const uint8_t* payload = stage.data() + (k - k0) * plan.payload_stride;
        if (scheme == Scheme::kRht) {
          s[smem_index(e)] = pk == nullptr ? 0.0f : rht_head_coord(dtype, scale, payload, pr, n, i);
          if (pk == nullptr || !rht_own_bits(dtype, pr, n, i)) {
            estimate = true;
            continue;
          }
        }
        float v = 0.0f;
        bool whole = false;
        uint16_t w16 = 0;
        if (pk != nullptr) v = decode_elem(dtype, scheme, scale, dither_key, payload, pr, n, i, e, &w16, &whole);
        if (dtype == DType::kF32) {
          std::memcpy(dst + 4 * e, &v, 4);
        } else {
          const uint16_t h = whole ? w16 : narrow16(v, bf16);
          std::memcpy(dst + 2 * e, &h, 2);
        }
      }
    }
    if (scheme != Scheme::kRht || !estimate) continue;
    const std::vector<uint64_t> signs = sign_words(cfg, id.msg_seq, row, d.elems);
    fwht_row(s, d.elems, signs.data());
    for (uint32_t e = 0; e < d.elems; ++e) {
      const uint32_t k = e / d.epp, first = k * d.epp;
      uint32_t pr;
      if (slot(slot0 + k, &pr) != nullptr && rht_own_bits(dtype, pr, min_u32(d.epp, d.elems - first), e - first)) {
        continue;
      }
      if (dtype == DType::kF32) {
        std::memcpy(dst + 4 * e, &s[smem_index(e)], 4);
      } else {
        const uint16_t h = narrow16(s[smem_index(e)], bf16);
        std::memcpy(dst + 2 * e, &h, 2);
      }
    }
  }
}

}  // namespace trim::gpu::emu

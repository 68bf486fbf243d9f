// Host side: the RowGeom of a codec::Layout (the device cannot call Layout's methods).
#pragma once

#include "codec/layout.h"
#include "cuda/codec_index.h"

namespace trim::gpu {

inline RowGeom make_geom(const codec::CodecConfig& cfg, const codec::Layout& l) {
  RowGeom g{};
  const uint32_t esize = codec::dtype_bytes(l.dtype());
  g.bytes = l.bytes();
  g.typed_elems = l.bytes() / esize;
  g.row_elems = l.row_elems();
  g.typed_rows = l.typed_rows();
  g.tail_bytes = static_cast<uint32_t>(l.bytes() % esize);
  g.epp = codec::Layout::elems_per_packet(l.scheme(), l.dtype(), false, cfg.packet_bytes, l.row_elems());
  g.tail_epp = codec::Layout::elems_per_packet(codec::Scheme::kNone, codec::DType::kRaw, true, cfg.packet_bytes,
                                               l.row_elems());
  g.dtype = static_cast<uint8_t>(l.dtype());
  g.scheme = static_cast<uint8_t>(l.scheme());
  g.head_planes = l.head_planes();
  g.row_log2 = l.row_log2();
  return g;
}

}  // namespace trim::gpu

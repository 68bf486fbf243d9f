#include "transport/placed_rx.h"

#include <algorithm>
#include <cstring>

#include "codec/packet.h"

namespace trim::transport {

PlacedRead::PlacedRead(const Expectation& e, uint8_t* side, size_t side_bytes)
    : e_(e), side_(side) {
  size_t off = 0;
  for (uint32_t k = 0; k < e.slots; ++k) {
    iov_[iovlen_++] = iovec{side + off, codec::kHeaderBytes};
    iov_[iovlen_++] = iovec{e.slot[k].dst, e.slot[k].bytes};
    off += codec::kHeaderBytes + e.slot[k].bytes;
  }
  iov_[iovlen_++] = iovec{side + off, side_bytes - off};
}

uint32_t PlacedRead::settle(size_t len, uint32_t seg, bool from_peer) {
  uint32_t k = 0;
  size_t off = 0;  // where slot k's header is, in the datagram as the expectation lays it out
  while (from_peer && k < e_.slots && off < len && off == static_cast<size_t>(k) * seg) {
    const codec::InPlaceSlot& s = e_.slot[k];
    codec::PacketHeader h;
    if (std::min<size_t>(seg, len - off) != codec::kHeaderBytes + s.bytes || !codec::peek_header(side_ + off, &h) ||
        h.scheme != codec::Scheme::kNone || h.trimmable() || h.tail() || h.cookie != e_.cookie ||
        h.msg_seq != e_.msg_seq || h.row != s.row || h.first_elem != s.first_elem || h.elem_count != s.elem_count ||
        h.payload_bytes != s.bytes) {
      break;
    }
    off += codec::kHeaderBytes + s.bytes;
    ++k;
  }
  // From slot k on, the kernel's bytes are someone else's: back to their offsets in the side buffer.
  size_t at = off;
  for (uint32_t j = k; j < e_.slots && at < len; ++j) {
    at += codec::kHeaderBytes;  // the header is in the side buffer already
    if (at >= len) break;
    const size_t n = std::min<size_t>(e_.slot[j].bytes, len - at);
    std::memcpy(side_ + at, e_.slot[j].dst, n);
    moved_bytes_ += n;
    at += e_.slot[j].bytes;
  }
  return k;
}

}  // namespace trim::transport

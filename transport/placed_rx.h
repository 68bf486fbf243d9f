// Exact payloads received in place. While an exact receive is under way, the engine reads the
// next datagram with its bytes pointed where the next packets belong: each packet's header to a
// side buffer, at the offset it has in the datagram, its payload into its slot of the receive's
// buffer, and whatever follows into the rest of the side buffer. An in-order run (a GRO batch of
// the sender's segmentation run) then costs one copy, the kernel's, instead of two. Anything else
// (another connection's packet, an ACK, a reordered, resent, cut or foreign packet) is moved back
// into the side buffer as the datagram the kernel would have written and goes the usual way:
// where bytes land is decided here, whether they are accepted only by the receiver, as for any
// packet. A slot is only ever expected while it has not arrived, so a datagram that lands in it
// wrongly overwrites nothing that was received.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "codec/decoder.h"

namespace trim::transport {

constexpr uint32_t kMaxPlacedSlots = 64;  // a GRO batch's segments at most

// The packets a connection expects next: its cookie, the message, their slots in order.
struct Expectation {
  uint64_t cookie = 0;
  uint32_t msg_seq = 0;
  uint32_t slots = 0;
  codec::InPlaceSlot slot[kMaxPlacedSlots];
};

// One datagram read for an expectation, which must outlive it.
class PlacedRead {
 public:
  // `side_bytes` (>= the expected packets' total) bounds the read, as a buffer of that size would.
  PlacedRead(const Expectation& e, uint8_t* side, size_t side_bytes);
  iovec* iov() { return iov_; }
  size_t iovlen() const { return iovlen_; }
  // After the kernel wrote `len` bytes in segments of `seg` bytes (GRO; `len` when not
  // coalesced): how many leading segments are the expected packets, whole, each where it
  // belongs; none unless `from_peer` (the datagram came from the expected sender). Only their
  // headers' slot fields are looked at: the receiver validates every packet as usual. Every byte
  // of the later segments is moved back into the side buffer, which then holds [placed x seg,
  // len) as one contiguous read would have. Call once.
  uint32_t settle(size_t len, uint32_t seg, bool from_peer);
  // Bytes settle() moved back out of slots (a wrong guess's cost).
  size_t moved_bytes() const { return moved_bytes_; }

 private:
  const Expectation& e_;
  uint8_t* side_;
  iovec iov_[2 * kMaxPlacedSlots + 1];
  size_t iovlen_ = 0;
  size_t moved_bytes_ = 0;
};

}  // namespace trim::transport

// Error feedback for trimmed messages (NCCL_TRIM_ERROR_FEEDBACK; docs/ARCHITECTURE.md, "Error
// feedback"). A trim is compression the sender did not choose: the receiver decodes an estimate.
// The receiver's ACKs say which packets arrived cut and how much of each it kept, so the sender
// can decode its own packets as the receiver did, keep what the estimate missed (the residual,
// per send buffer) and add it to the next message sent from the same buffer. Over the steps of a
// training job the trims then lose nothing (EF-SGD): the sum of what arrived equals the sum of
// what was given to send, less one residual.
//
// Keyed by the buffer's address and size, which identifies the same values only where the
// caller keeps them there between calls: the nccl_trim CPU backend's collectives (a DDP bucket
// at one address), never NCCL's staging buffers (the plugin turns it off under NCCL).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "codec/decoder.h"
#include "codec/layout.h"
#include "common/status.h"

namespace trim::transport {

// A packet of a message that arrived cut: its index in the message and the payload bytes kept.
struct CutPacket {
  uint32_t packet = 0;
  uint32_t kept_bytes = 0;
};

class ErrorFeedback {
 public:
  explicit ErrorFeedback(const codec::CodecConfig& cfg, uint64_t max_bytes = uint64_t{1} << 30);

  // What to encode for fp32 message `seq` read from [data, data + bytes): `data` itself, or
  // data + the residual its buffer's previous message left, written into *scratch (which must
  // then live until record()). The residual is used up.
  const uint8_t* source(const uint8_t* data, uint64_t bytes, uint32_t seq, std::vector<float>* scratch);

  // After message `seq` from buffer `data` completed: `src` is what was encoded (source()'s
  // result), `packets` its encoded packets (`stride` apart, sizes[k] bytes each) and `cuts`
  // the packets the receiver reported cut. Keeps src - (what the receiver decoded) for the
  // buffer, zero outside the rows that lost something, and returns true; false when it keeps
  // nothing (not fp32, or over the memory cap: those trims are estimated once, as without).
  Result<bool> record(const uint8_t* data, uint64_t bytes, uint32_t seq, const codec::Layout& layout,
                const codec::MessageId& id, const uint8_t* src, const uint8_t* packets, uint32_t stride,
                const uint32_t* sizes, std::vector<CutPacket> cuts);


 private:
  using Key = std::pair<uintptr_t, uint64_t>;
  struct Entry {
    std::vector<float> residual;
    uint32_t seq = 0;  // message that left it
  };
  void evict_stale(uint32_t seq);

  codec::CodecConfig cfg_;
  uint64_t max_bytes_;
  std::map<Key, Entry> entries_;
  uint64_t held_bytes_ = 0;
  codec::Decoder decoder_;
  std::vector<float> decoded_;
  std::vector<uint32_t> row_first_;
};

}  // namespace trim::transport

#include "transport/feedback.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "codec/packet.h"

namespace trim::transport {

namespace {
// A residual not used within this many messages of its connection belongs to a buffer that is
// no longer sent from (a bucket of a model that was dropped): it goes, and its memory with it.
constexpr uint32_t kStaleMessages = 4096;
}  // namespace

ErrorFeedback::ErrorFeedback(const codec::CodecConfig& cfg, uint64_t max_bytes)
    : cfg_(cfg), max_bytes_(max_bytes), decoder_(cfg) {}

const uint8_t* ErrorFeedback::source(const uint8_t* data, uint64_t bytes, uint32_t seq, std::vector<float>* scratch) {
  if ((seq & 255) == 0) evict_stale(seq);
  auto it = entries_.find(Key{reinterpret_cast<uintptr_t>(data), bytes});
  if (it == entries_.end()) return data;
  const std::vector<float>& r = it->second.residual;
  const size_t n = r.size();  // bytes / 4: a tail of raw bytes carries no residual
  scratch->resize((bytes + 3) / 4);
  std::memcpy(scratch->data(), data, bytes);
  float* x = scratch->data();
  for (size_t i = 0; i < n; ++i) x[i] += r[i];
  held_bytes_ -= n * sizeof(float);
  entries_.erase(it);
  return reinterpret_cast<const uint8_t*>(scratch->data());
}

Result<bool> ErrorFeedback::record(const uint8_t* data, uint64_t bytes, uint32_t seq, const codec::Layout& layout,
                             const codec::MessageId& id, const uint8_t* src, const uint8_t* packets, uint32_t stride,
                             const uint32_t* sizes, std::vector<CutPacket> cuts) {
  if (cuts.empty() || layout.dtype() != codec::DType::kF32) return false;
  const size_t n = bytes / sizeof(float);
  if (held_bytes_ + n * sizeof(float) > max_bytes_) return false;
  std::sort(cuts.begin(), cuts.end(), [](const CutPacket& a, const CutPacket& b) { return a.packet < b.packet; });
  layout.row_first_packets(&row_first_);
  decoded_.resize((bytes + 3) / 4);
  TRIM_RETURN_IF_ERROR(decoder_.begin(layout, id, decoded_.data()));
  Entry e;
  e.seq = seq;
  e.residual.assign(n, 0.0f);
  const float* x = reinterpret_cast<const float*>(src);
  size_t c = 0;
  while (c < cuts.size()) {
    // Decode the row holding the next cut packet as the receiver did: its cut packets as kept,
    // the others whole.
    const uint32_t r = static_cast<uint32_t>(
        std::upper_bound(row_first_.begin(), row_first_.end(), cuts[c].packet) - row_first_.begin() - 1);
    const codec::RowInfo info = layout.row(r);
    if (info.tail) break;  // raw bytes are never cut into an estimate
    for (uint32_t k = row_first_[r]; k < row_first_[r + 1]; ++k) {
      uint32_t kept = UINT32_MAX;
      if (c < cuts.size() && cuts[c].packet == k) kept = cuts[c++].kept_bytes;
      while (c < cuts.size() && cuts[c].packet == k) ++c;  // a repeated report changes nothing
      codec::ParsedPacket p;
      const codec::PacketError pe =
          codec::parse_own_packet(packets + static_cast<size_t>(k) * stride, sizes[k], kept, &p);
      if (pe != codec::PacketError::kOk || decoder_.add(p) != codec::PacketError::kOk) {
        return Status(Code::kInternal, fmt::format("error feedback: own packet {} of message {} does not decode ({})",
                                                   k, seq, codec::packet_error_name(pe)));
      }
    }
    decoder_.finish_row(r);
    const size_t first = info.byte_offset / sizeof(float);
    for (size_t i = first; i < first + info.elems; ++i) e.residual[i] = x[i] - decoded_[i];
  }
  held_bytes_ += n * sizeof(float);
  const Key key{reinterpret_cast<uintptr_t>(data), bytes};
  auto it = entries_.find(key);
  if (it != entries_.end()) {  // two messages from one buffer in flight at once: the later one wins
    held_bytes_ -= it->second.residual.size() * sizeof(float);
  }
  entries_[key] = std::move(e);
  return true;
}

void ErrorFeedback::evict_stale(uint32_t seq) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (seq - it->second.seq > kStaleMessages) {
      held_bytes_ -= it->second.residual.size() * sizeof(float);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace trim::transport

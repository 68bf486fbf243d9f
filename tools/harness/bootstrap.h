// The harness's out-of-band channel: one stream socketpair between the parent and each rank,
// carrying length-prefixed frames. The parent relays allgathers (handle exchange, barriers),
// collects each rank's final report, and forwards fault events. It is NCCL's bootstrap in
// miniature; the plugin never sees it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coll/pipeline.h"
#include "common/status.h"

namespace trim::harness {

using coll::mono_ns;

enum class MsgType : uint32_t {
  kGather = 1,   // rank -> parent: my part of the next allgather
  kGatherReply,  // parent -> rank: every rank's part, in rank order
  kAbort,        // parent -> rank: the allgather cannot complete (a rank died)
  kResult,       // rank -> parent: final report (serialized RankReport)
  kEvent,        // rank -> parent: "I am about to die/freeze at t" (fault scenarios)
  kPeerEvent,    // parent -> rank: a peer's kEvent, forwarded
};

struct Frame {
  MsgType type = MsgType::kGather;
  std::string payload;
};

// Blocking, EINTR-safe writes of one whole frame.
Status write_frame(int fd, MsgType type, const std::string& payload);
// Waits until `deadline_ns` (mono_ns) for one frame; kUnavailable on timeout or EOF.
Result<Frame> read_frame(int fd, int64_t deadline_ns);

// Parent side: frames are cut out of whatever bytes arrived so far.
class FrameReader {
 public:
  void append(const char* data, size_t n) { buf_.append(data, n); }
  // True and one frame when a whole one is buffered.
  bool next(Frame* out);

 private:
  std::string buf_;
};

// Allgather payloads travel as [count][len, bytes]...
std::string pack_parts(const std::vector<std::string>& parts);
Result<std::vector<std::string>> unpack_parts(const std::string& packed);

// Rank side of the channel.
class RankChannel {
 public:
  RankChannel(int fd, int64_t deadline_ns) : fd_(fd), deadline_ns_(deadline_ns) {}
  int fd() const { return fd_; }

  // Every rank's `mine`, in rank order. Fails when a rank died or the deadline passed.
  Result<std::vector<std::string>> allgather(const std::string& mine);
  Status barrier();
  Status send_result(const std::string& report);
  Status send_event(const std::string& event);
  // Non-blocking: a forwarded peer event, if one has arrived.
  bool poll_peer_event(std::string* event);

 private:
  int fd_;
  int64_t deadline_ns_;
  std::vector<std::string> early_events_;  // peer events that arrived during an allgather
};

}  // namespace trim::harness

// The output side of a connection's TCP control stream (CTS, Empty and FIN frames), written by
// the engine thread, which never waits ("the data path never blocks"): a frame is written
// without waiting, and what the socket's send buffer cannot take (a peer that reads slowly, or
// has stopped reading) waits here, whole frames in order behind any partly written one, until
// the engine sees EPOLLOUT on the socket (it watches for it only while something waits).
// Bounded: a peer that stops reading must not grow memory; the connection is failed instead.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "transport/wire.h"

namespace trim::transport {

class CtrlOut {
 public:
  // Frames that may wait (32 KiB). A connection has at most 32 operations posted (NCCL's
  // in-flight limit), each of which sends one frame: so many waiting means a peer gone quiet.
  static constexpr size_t kMaxQueuedFrames = 1024;

  // Writes `frame` after what waits, or queues it (counted: ctrl_buffer_full). A full queue
  // makes the stream fail (failed()): the frame, and every later one, is dropped, since the
  // peer must never see a stream with a hole in it.
  void push(int fd, const uint8_t frame[kFrameBytes]);
  // Writes what waits until the socket's send buffer is full (EPOLLOUT).
  void drain(int fd);
  // Close only (not the engine): drains, waiting up to timeout_ms for room in all.
  void drain_for(int fd, int timeout_ms);
  // Drops what waits and writes nothing more (a failed connection, a socket that refused).
  void abandon();

  bool waiting() const { return !queue_.empty(); }
  size_t queued_frames() const { return queue_.size(); }
  // The queue overflowed: the connection must be failed (why()).
  bool failed() const { return failed_; }
  bool writable() const { return !failed_ && !closed_; }
  // When a byte last left while frames waited (or the first began to wait).
  uint64_t progress_ns() const { return progress_ns_; }
  const std::string& why() const { return why_; }

 private:
  void fail(std::string why);

  std::deque<std::array<uint8_t, kFrameBytes>> queue_;
  size_t front_done_bytes_ = 0;  // of queue_.front(), already written
  uint64_t progress_ns_ = 0;
  bool failed_ = false;  // overflow: the stream would have a hole
  bool closed_ = false;  // abandoned: the socket refused a write, or the connection failed
  std::string why_;
};

}  // namespace trim::transport

#include "transport/ctrl_out.h"

#include <poll.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/engine.h"

namespace trim::transport {

void CtrlOut::push(int fd, const uint8_t frame[kFrameBytes]) {
  if (!writable()) return;
  if (queue_.size() >= kMaxQueuedFrames) {
    fail(fmt::format("{} control frames wait for the peer to read its control connection (at most {} may): it "
                     "stopped reading",
                     queue_.size(), kMaxQueuedFrames));
    return;
  }
  const bool behind = !queue_.empty();
  std::memcpy(queue_.emplace_back().data(), frame, kFrameBytes);
  // Behind what waits it leaves at EPOLLOUT, in order; first, it tries at once.
  if (!behind) {
    progress_ns_ = now_ns();
    drain(fd);
  }
  if (waiting()) global_stats().ctrl_buffer_full.fetch_add(1, std::memory_order_relaxed);
}

void CtrlOut::drain(int fd) {
  constexpr size_t kIov = 64;
  iovec iov[kIov];
  while (!queue_.empty() && writable()) {
    const size_t n = std::min(queue_.size(), kIov);
    for (size_t i = 0; i < n; ++i) {
      const size_t skip = i == 0 ? front_done_bytes_ : 0;
      iov[i] = iovec{queue_[i].data() + skip, kFrameBytes - skip};
    }
    msghdr h{};
    h.msg_iov = iov;
    h.msg_iovlen = n;
    const ssize_t sent = ::sendmsg(fd, &h, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT
    if (sent <= 0) {
      // The peer is gone; reading the stream says how (a FIN frame, or a close without one).
      TRIM_DEBUG("NET/Trim: control write failed: {}", sent < 0 ? std::strerror(errno) : "nothing written");
      abandon();
      return;
    }
    progress_ns_ = now_ns();
    size_t left = front_done_bytes_ + static_cast<size_t>(sent);
    while (left >= kFrameBytes) {
      queue_.pop_front();
      left -= kFrameBytes;
    }
    front_done_bytes_ = left;
  }
}

void CtrlOut::drain_for(int fd, int timeout_ms) {
  const uint64_t deadline_ns = now_ns() + static_cast<uint64_t>(timeout_ms) * 1'000'000ull;
  for (;;) {
    drain(fd);
    const uint64_t now = now_ns();
    if (!waiting() || !writable() || now >= deadline_ns) return;
    pollfd p{fd, POLLOUT, 0};
    const int r = poll(&p, 1, static_cast<int>((deadline_ns - now + 999'999) / 1'000'000));
    if (r < 0 && errno != EINTR) return;
  }
}

void CtrlOut::abandon() {
  closed_ = true;
  queue_.clear();
  front_done_bytes_ = 0;
}

void CtrlOut::fail(std::string why) {
  failed_ = true;
  why_ = std::move(why);
}

}  // namespace trim::transport

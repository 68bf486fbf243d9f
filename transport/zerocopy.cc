#include "transport/zerocopy.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/engine.h"

namespace trim::transport {

namespace {
// ids wrap at 2^32: compare by difference.
bool id_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
}  // namespace

ZeroCopy::ZeroCopy(int fd, Mode mode) : fd_(fd) {
  if (mode == Mode::kOff) return;
  const int on = 1;
  if (setsockopt(fd_, SOL_SOCKET, SO_ZEROCOPY, &on, sizeof on) != 0) {
    TRIM_INFO("NET/Trim: SO_ZEROCOPY unavailable ({}): exact messages are copied (NCCL_TRIM_ZEROCOPY)",
              std::strerror(errno));
    return;
  }
  active_ = true;
}

void ZeroCopy::sent(const std::shared_ptr<ZcHold>* holds, uint32_t n) {
  const uint32_t id = next_id_++;
  ++sends_;
  global_stats().zerocopy_sends.fetch_add(1, std::memory_order_relaxed);
  const ZcHold* last = nullptr;
  for (uint32_t i = 0; i < n; ++i) {
    // Datagrams of one message sit together in a send: count each message once per send.
    if (!holds[i] || holds[i].get() == last) continue;
    last = holds[i].get();
    ++holds[i]->pending;
    ++live_;
    q_.push_back(Entry{id, holds[i]});
  }
}

bool ZeroCopy::refused(int err) {
  if (err != ENOBUFS && err != EMSGSIZE) return false;
  ++refused_;
  global_stats().zerocopy_refused.fetch_add(1, std::memory_order_relaxed);
  copy_next_ = true;
  return true;
}

void ZeroCopy::complete(uint32_t lo, uint32_t hi, bool copied) {
  const uint32_t n = hi - lo + 1;
  if (copied) {
    copied_ += n;
    global_stats().zerocopy_copied.fetch_add(n, std::memory_order_relaxed);
    if (active_) {
      // The kernel copied anyway (the packet was delivered inside this host): pinning and
      // completions are pure cost here. Sends already made still complete as they come.
      TRIM_INFO("NET/Trim: the kernel copies zero-copy sends on this path (local delivery: loopback, veth): "
                "exact messages are copied from now on (NCCL_TRIM_ZEROCOPY)");
      active_ = false;
    }
  }
  for (Entry& e : q_) {
    if (id_before(hi, e.id)) break;  // ids increase along the queue
    if (id_before(e.id, lo) || !e.hold) continue;
    --e.hold->pending;
    --live_;
    e.hold.reset();
  }
  while (!q_.empty() && !q_.front().hold) q_.pop_front();
}

bool ZeroCopy::reap() {
  if (q_.empty()) return false;  // completions come only for sends still in the queue
  bool any = false;
  for (;;) {
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in))];
    msghdr h{};
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    if (recvmsg(fd_, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;  // EAGAIN: nothing more
    for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(&h, cm)) {
      if (cm->cmsg_level != SOL_IP || cm->cmsg_type != IP_RECVERR) continue;
      sock_extended_err e;
      std::memcpy(&e, CMSG_DATA(cm), sizeof e);
      if (e.ee_errno != 0 || e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      complete(e.ee_info, e.ee_data, (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0);
      any = true;
    }
  }
  return any;
}

}  // namespace trim::transport

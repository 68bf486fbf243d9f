// Sends without the copy (MSG_ZEROCOPY, NCCL_TRIM_ZEROCOPY) for the engine's transmit batch:
// which sends may go so, the kernel's completions read from the socket's error queue (never
// waiting), and the accounting that keeps a message from going back to NCCL while the kernel
// may still read its buffer (transport/proto.h, ZcHold).
//
// The kernel numbers the MSG_ZEROCOPY sends of a socket that it accepted 0, 1, 2, ... and
// reports them done as ranges [lo, hi], with SO_EE_CODE_ZEROCOPY_COPIED when it copied the
// data after all (loopback and veth deliver the packet inside this host, and copy it there):
// then pinning and completions are pure cost, and the engine copies from then on.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include <sys/uio.h>

#include "transport/proto.h"

namespace trim::transport {

class ZeroCopy {
 public:
  enum class Mode { kOff, kOn };
  // Pages one send without the copy may reference: the kernel's MAX_SKB_FRAGS (17 unless built
  // otherwise); beyond it the send fails (EMSGSIZE). Each header and each payload slice is at
  // least one (they are not contiguous), so a GSO run without the copy is a few packets long.
  static constexpr uint32_t kMaxFrags = 17;
  static uint32_t frags(const iovec& v) {
    if (v.iov_len == 0) return 0;
    const uintptr_t a = reinterpret_cast<uintptr_t>(v.iov_base);
    return static_cast<uint32_t>(((a + v.iov_len - 1) >> 12) - (a >> 12) + 1);
  }
  // Turns SO_ZEROCOPY on for `fd` when `mode` is on; where the kernel lacks it, stays off (said once).
  ZeroCopy(int fd, Mode mode);

  // Whether the next send of pinned datagrams goes with MSG_ZEROCOPY.
  bool active() const { return active_ && !copy_next_; }
  // A MSG_ZEROCOPY send the kernel accepted, of datagrams whose holds are holds[0..n) (null:
  // none); each distinct hold counts it once.
  void sent(const std::shared_ptr<ZcHold>* holds, uint32_t n);
  // A MSG_ZEROCOPY send failed with `err`: true when it is to be sent again copied at once (the
  // kernel refused to pin it: ENOBUFS, its optmem or locked-memory limit; EMSGSIZE, more pages
  // than one skb holds where the kernel allows fewer than kMaxFrags).
  bool refused(int err);
  // Any successful send: the next one may try without the copy again.
  void sent_any() { copy_next_ = false; }
  // Reads every completion waiting in the error queue (non-blocking); true when some arrived.
  bool reap();
  // The same bookkeeping for a completion of [lo, hi] (reap's, and the tests').
  void complete(uint32_t lo, uint32_t hi, bool copied);

  // (send, message) pairs still owed a completion.
  uint32_t outstanding() const { return live_; }
  uint64_t sends() const { return sends_; }
  uint64_t copied() const { return copied_; }
  uint64_t refusals() const { return refused_; }

 private:
  struct Entry {
    uint32_t id;
    std::shared_ptr<ZcHold> hold;  // null once its completion arrived
  };
  int fd_;
  bool active_ = false;
  bool copy_next_ = false;
  uint32_t next_id_ = 0;
  uint32_t live_ = 0;     // entries of q_ with their hold
  std::deque<Entry> q_;  // in id order
  uint64_t sends_ = 0, copied_ = 0, refused_ = 0;
};

}  // namespace trim::transport

// The engine's transmit batch (internal to engine*.cc): datagrams collect into one sendmmsg;
// TCP control frames are written at once, or wait in their connection's queue (ctrl_out.h). With UDP GSO, a run of same-sized exact data packets
// to one destination leaves as one "super-datagram" the kernel segments (one trip through the
// stack instead of up to kMaxGsoSegments): the wire still carries ordinary packets.
// Every data packet carries its class's DSCP (an IP_TOS control message: trimmable, exact; the
// socket's own TOS is the control class's). With NCCL_TRIM_UDP_CHECKSUM zero (auto: on a
// declared trimming fabric) trimmable packets leave with UDP checksum 0 (the socket's
// SO_NO_CHECK, set around their sends): a switch that cuts one need not fix a checksum for the
// receiving kernel to take it; our header's check points guard what survives. The kernel
// refuses GSO without a checksum, so they leave packet by packet.
// Payloads of large exact messages may leave without a copy (MSG_ZEROCOPY, transport/zerocopy.h):
// one sendmmsg carries either such datagrams only or none, since its flags cover every message.
// A full socket send buffer (EAGAIN, ENOBUFS) never waits: what did not leave is copied into the
// Tx's queue (nothing of a state machine's memory stays referenced across turns: a message may
// complete, a connection close, NCCL free a buffer meanwhile), the engine watches for EPOLLOUT
// and emits no new data while anything waits, and the queue leaves first on a later turn, in
// order, with the same TOS and GSO grouping (only copied, never MSG_ZEROCOPY).
#pragma once

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <deque>
#include <memory>
#include <vector>

#include "codec/packet.h"
#include "common/log.h"
#include "transport/engine.h"
#include "transport/zerocopy.h"

namespace trim::transport {

class Engine::Tx final : public TxSink {
 public:
  Tx(int fd, bool gso, const EngineConfig& cfg)
      : fd_(fd),
        gso_(gso),
        tos_trimmable_(cfg.tos_trimmable),
        tos_exact_(cfg.tos_exact),
        trimmable_no_check_(cfg.trimmable_no_check),
        zc_(fd, cfg.zerocopy),
        ctrl_(kBatch * kCtrlBytes) {}
  void bind(Conn* c) { conn_ = c; }
  void data(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes) override {
    // The class is the packet's own: its header's TRIMMABLE flag.
    const bool trimmable = head_bytes > 3 && (head[3] & codec::kFlagTrimmable) != 0;
    push(head, head_bytes, rest, rest_bytes, conn_->data_dst, trimmable ? Class::kTrimmable : Class::kExact, nullptr);
  }
  void data_pinned(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
                   const std::shared_ptr<ZcHold>& hold) override {
    // Only exact messages are pinned (their payload is NCCL's buffer itself).
    push(head, head_bytes, rest, rest_bytes, conn_->data_dst, Class::kExact, zc_.active() ? &hold : nullptr);
  }
  void ctrl(const CtrlPacket& p) override {
    if (n_ == kBatch) flush();
    uint8_t* b = ctrl_.data() + static_cast<size_t>(n_) * kCtrlBytes;
    write_ctrl(p, b);
    push(b, kCtrlBytes, nullptr, 0, conn_->peer_udp, Class::kCtrl, nullptr);
  }
  void frame(const Frame& f) override {
    if (!conn_->tcp_open) return;
    uint8_t b[kFrameBytes];
    write_frame(f, b);
    conn_->ctrl.push(conn_->tcp.get(), b);  // never waits: queued behind a full buffer (ctrl_out.h)
  }
  // Sends what is queued and batched, in order, without waiting: on a full socket send buffer
  // the rest waits in the queue (waiting()).
  void flush();
  // Datagrams wait for room in the socket's send buffer.
  bool waiting() const { return !queue_.empty(); }
  // A data packet that left from the queue, at_ns: when the kernel took it.
  struct Left {
    uint64_t cookie;
    uint32_t psn;
    uint64_t at_ns;
  };
  // Those that left since the caller last cleared it.
  std::vector<Left>& left_late() { return left_; }
  uint64_t buffer_full() const { return buffer_full_; }  // flushes that found the buffer full
  bool gso() const { return gso_; }
  ZeroCopy& zerocopy() { return zc_; }

 private:
  enum class Class : uint8_t { kCtrl, kExact, kTrimmable };
  // A datagram waiting for the socket: its bytes copied (head, then rest).
  struct Queued {
    std::vector<uint8_t> bytes;
    sockaddr_in to;
    Class cls;
    uint64_t cookie;  // data packets: their connection and psn, restamped when they leave
    uint32_t psn;
  };
  // At most this many wait (the engine emits no data meanwhile: ACKs and keepalives are what
  // may pile up); more are dropped, counted (send_queue_drops): recovery resends data.
  static constexpr size_t kMaxQueued = 4 * kBatch;
  // Datagram i owns iov_[2i] (head) and iov_[2i + 1] (rest, maybe empty), so a run of
  // datagrams is one contiguous iovec array.
  void push(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
            const sockaddr_in& to, Class cls, const std::shared_ptr<ZcHold>* hold) {
    if (n_ == kBatch) flush();
    if (!queue_.empty()) {  // behind what waits (the batch is empty meanwhile)
      enqueue(head, head_bytes, rest, rest_bytes, to, cls, conn_->cookie);
      return;
    }
    if (hold != nullptr) {
      holds_[n_] = *hold;
    } else {
      holds_[n_].reset();
    }
    iov_[2 * n_] = iovec{const_cast<uint8_t*>(head), head_bytes};
    iov_[2 * n_ + 1] = iovec{const_cast<uint8_t*>(rest), rest_bytes};
    to_[n_] = to;
    bytes_[n_] = head_bytes + rest_bytes;
    cls_[n_] = cls;
    cookie_[n_] = conn_->cookie;
    ++n_;
  }
  void enqueue(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
               const sockaddr_in& to, Class cls, uint64_t cookie);
  // Sends batched datagrams [0, n_) until the socket's send buffer is full; returns how many
  // were handled (sent, or skipped as refused). With from_queue, those are queue_'s first n_.
  uint32_t send_batch(bool from_queue);
  void note_full() {
    ++buffer_full_;
    global_stats().send_buffer_full.fetch_add(1, std::memory_order_relaxed);
  }
  // Sets SO_NO_CHECK for the datagrams about to leave (trimmable ones: checksum 0).
  void set_no_check(bool on);
  bool no_check_class(Class c) const { return c == Class::kTrimmable && trimmable_no_check_ && no_check_ok_; }
  // Datagrams [first, end) that can leave as one GSO send starting at `first`.
  uint32_t run_end(uint32_t first) const;
  // Sends datagrams [first, n_) once; returns how many left (0 with errno on failure).
  uint32_t send_some(uint32_t first);

  int fd_;
  bool gso_;
  uint8_t tos_trimmable_, tos_exact_;
  bool trimmable_no_check_;
  bool no_check_ = false;       // the socket's SO_NO_CHECK as last set
  bool no_check_ok_ = true;     // false once the kernel refused it: trimmable packets keep checksums
  bool last_zerocopy_ = false;  // the last sendmmsg went with MSG_ZEROCOPY
  bool refusal_logged_ = false;  // the first refused run is logged (WARN); all are counted
  Conn* conn_ = nullptr;
  uint32_t n_ = 0;
  iovec iov_[2 * kBatch];
  sockaddr_in to_[kBatch];
  uint32_t bytes_[kBatch];
  Class cls_[kBatch];
  uint64_t cookie_[kBatch];  // the connection of each
  std::shared_ptr<ZcHold> holds_[kBatch];  // pinned datagrams: may leave without a copy
  uint32_t first_[kBatch];                 // first datagram of each mmsg_ entry
  ZeroCopy zc_;
  mmsghdr mmsg_[kBatch];
  uint32_t run_[kBatch];  // datagrams in each mmsg_ entry
  alignas(cmsghdr) uint8_t cmsg_[kBatch][CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))];
  std::vector<uint8_t> ctrl_;
  std::deque<Queued> queue_;  // older than the batch: leaves first
  std::vector<Left> left_;
  uint64_t buffer_full_ = 0;
};

}  // namespace trim::transport

// The engine's transmit batch (internal to engine*.cc): datagrams collect into one sendmmsg;
// TCP control frames are written at once. With UDP GSO, a run of same-sized data packets to
// one destination leaves as one "super-datagram" the kernel segments (one trip through the
// stack instead of up to kMaxGsoSegments): the wire still carries ordinary packets.
#pragma once

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <vector>

#include "common/log.h"
#include "transport/engine.h"

namespace trim::transport {

class Engine::Tx final : public TxSink {
 public:
  Tx(int fd, bool gso) : fd_(fd), gso_(gso), ctrl_(kBatch * kCtrlBytes) {}
  void bind(Conn* c) { conn_ = c; }
  void data(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes) override {
    push(head, head_bytes, rest, rest_bytes, conn_->data_dst, true);
  }
  void ctrl(const CtrlPacket& p) override {
    if (n_ == kBatch) flush();
    uint8_t* b = ctrl_.data() + static_cast<size_t>(n_) * kCtrlBytes;
    write_ctrl(p, b);
    push(b, kCtrlBytes, nullptr, 0, conn_->peer_udp, false);
  }
  void frame(const Frame& f) override {
    if (!conn_->tcp_open) return;
    uint8_t b[kFrameBytes];
    write_frame(f, b);
    Status st = write_all(conn_->tcp.get(), b, sizeof b, 1000);
    if (!st.is_ok()) TRIM_DEBUG("NET/Trim: control write to {} failed: {}", conn_->peer_name, st.message());
  }
  void flush();
  bool gso() const { return gso_; }

 private:
  // Datagram i owns iov_[2i] (head) and iov_[2i + 1] (rest, maybe empty), so a run of
  // datagrams is one contiguous iovec array.
  void push(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
            const sockaddr_in& to, bool data) {
    if (n_ == kBatch) flush();
    iov_[2 * n_] = iovec{const_cast<uint8_t*>(head), head_bytes};
    iov_[2 * n_ + 1] = iovec{const_cast<uint8_t*>(rest), rest_bytes};
    to_[n_] = to;
    bytes_[n_] = head_bytes + rest_bytes;
    is_data_[n_] = data;
    ++n_;
  }
  // Datagrams [first, end) that can leave as one GSO send starting at `first`.
  uint32_t run_end(uint32_t first) const;
  // Sends datagrams [first, n_) once; returns how many left (0 with errno on failure).
  uint32_t send_some(uint32_t first);

  int fd_;
  bool gso_;
  Conn* conn_ = nullptr;
  uint32_t n_ = 0;
  iovec iov_[2 * kBatch];
  sockaddr_in to_[kBatch];
  uint32_t bytes_[kBatch];
  bool is_data_[kBatch];
  mmsghdr mmsg_[kBatch];
  uint32_t run_[kBatch];  // datagrams in each mmsg_ entry
  alignas(cmsghdr) uint8_t cmsg_[kBatch][CMSG_SPACE(sizeof(uint16_t))];
  std::vector<uint8_t> ctrl_;
};

}  // namespace trim::transport

// The engine's transmit batch (internal to engine*.cc): datagrams collect into one sendmmsg;
// TCP control frames are written at once.
#pragma once

#include <sys/socket.h>

#include <vector>

#include "common/log.h"
#include "transport/engine.h"

namespace trim::transport {

class Engine::Tx final : public TxSink {
 public:
  explicit Tx(int fd) : fd_(fd), ctrl_(kBatch * kCtrlBytes) {}
  void bind(Conn* c) { conn_ = c; }
  void data(const uint8_t* packet, uint32_t bytes) override { push(packet, bytes, conn_->data_dst); }
  void ctrl(const CtrlPacket& p) override {
    if (n_ == kBatch) flush();
    uint8_t* b = ctrl_.data() + static_cast<size_t>(n_) * kCtrlBytes;
    write_ctrl(p, b);
    push(b, kCtrlBytes, conn_->peer_udp);
  }
  void frame(const Frame& f) override {
    if (!conn_->tcp_open) return;
    uint8_t b[kFrameBytes];
    write_frame(f, b);
    Status st = write_all(conn_->tcp.get(), b, sizeof b, 1000);
    if (!st.is_ok()) TRIM_DEBUG("NET/Trim: control write to {} failed: {}", conn_->peer_name, st.message());
  }
  void flush();

 private:
  void push(const uint8_t* p, uint32_t bytes, const sockaddr_in& to) {
    if (n_ == kBatch) flush();
    iov_[n_] = iovec{const_cast<uint8_t*>(p), bytes};
    to_[n_] = to;
    mmsg_[n_] = mmsghdr{};
    mmsg_[n_].msg_hdr.msg_name = &to_[n_];
    mmsg_[n_].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    mmsg_[n_].msg_hdr.msg_iov = &iov_[n_];
    mmsg_[n_].msg_hdr.msg_iovlen = 1;
    ++n_;
  }
  int fd_;
  Conn* conn_ = nullptr;
  uint32_t n_ = 0;
  mmsghdr mmsg_[kBatch];
  iovec iov_[kBatch];
  sockaddr_in to_[kBatch];
  std::vector<uint8_t> ctrl_;
};


}  // namespace trim::transport

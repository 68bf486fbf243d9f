// A full socket send buffer (EAGAIN) never stalls the progress engine: what did not leave waits
// in the engine's transmit queue, the engine goes on receiving and runs its timers, and the
// queue leaves in order, each packet once, when the socket has room again.
//
// Loopback never fills a UDP socket's send buffer (the kernel gives a datagram's room back as it
// delivers it), so a stand-in (transport::SendBufferForTest) plays a small one: it answers
// EAGAIN when full, is drained by the test, and offers an eventfd as the socket's writability.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/packet.h"
#include "tests/env_guard.h"
#include "tests/net_pair.h"
#include "transport/engine.h"
#include "transport/net_api.h"
#include "transport/socket.h"

namespace trim::net {
namespace {

using Clock = std::chrono::steady_clock;

// A send buffer of `capacity_bytes`, emptied only by drain(); it records the psn of every data
// packet it hands to the kernel, per connection.
class SmallSendBuffer final : public transport::SendBufferForTest {
 public:
  explicit SmallSendBuffer(size_t capacity_bytes)
      : capacity_bytes_(capacity_bytes), efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~SmallSendBuffer() override { close(efd_); }

  int sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) override {
    std::lock_guard<std::mutex> lock(mu_);
    unsigned fit = 0;
    size_t used = used_bytes_;
    for (; fit < n && used + bytes(msgs[fit]) <= capacity_bytes_; ++fit) used += bytes(msgs[fit]);
    if (fit == 0) {
      ++full_answers_;
      set_writable(false);
      errno = EAGAIN;
      return -1;
    }
    const int r = ::sendmmsg(fd, msgs, fit, flags);
    for (int i = 0; i < r; ++i) {
      used_bytes_ += bytes(msgs[i]);
      record(msgs[i].msg_hdr);
    }
    return r;
  }
  int writable_fd() override { return efd_; }

  // Empty, writable, nothing recorded (each test starts so).
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    used_bytes_ = 0;
    set_writable(true);
    full_answers_ = 0;
    psns_.clear();
  }
  void drain() {
    std::lock_guard<std::mutex> lock(mu_);
    used_bytes_ = 0;
    set_writable(true);
  }
  uint64_t full_answers() {
    std::lock_guard<std::mutex> lock(mu_);
    return full_answers_;
  }
  std::map<uint64_t, std::vector<uint32_t>> psns() {
    std::lock_guard<std::mutex> lock(mu_);
    return psns_;
  }

 private:
  static size_t bytes(const mmsghdr& m) {
    size_t b = 0;
    for (size_t i = 0; i < m.msg_hdr.msg_iovlen; ++i) b += m.msg_hdr.msg_iov[i].iov_len;
    return b;
  }
  // Datagram j of a message is iov[2j] (head: the whole packet when it waited) and iov[2j + 1].
  void record(const msghdr& h) {
    for (size_t i = 0; i < h.msg_iovlen; i += 2) {
      const auto* head = static_cast<const uint8_t*>(h.msg_iov[i].iov_base);
      const size_t len = h.msg_iov[i].iov_len;
      if (len < codec::kHeaderBytes || codec::is_ctrl_datagram(head, len)) continue;
      psns_[codec::prefix_cookie(head)].push_back(codec::stamped_psn(head));
    }
  }
  // An eventfd is writable while its count is below 2^64 - 2.
  void set_writable(bool on) {
    uint64_t v = 0;
    if (on && !writable_) {
      ssize_t r = read(efd_, &v, sizeof v);
      (void)r;
    } else if (!on && writable_) {
      v = ~uint64_t{0} - 1;
      ssize_t r = write(efd_, &v, sizeof v);
      (void)r;
    }
    writable_ = on;
  }

  const size_t capacity_bytes_;
  const int efd_;
  std::mutex mu_;
  size_t used_bytes_ = 0;
  bool writable_ = true;
  uint64_t full_answers_ = 0;
  std::map<uint64_t, std::vector<uint32_t>> psns_;
};

class SendBuffer : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::open_loopback(&ctx_, &send_, &recv_, &listen_);
    buffer_->reset();
    transport::set_send_buffer_for_test(buffer_);
  }
  void TearDown() override {
    stop_draining();
    testing::close_loopback(&ctx_, &send_, &recv_, &listen_);
    transport::set_send_buffer_for_test(nullptr);
  }

  // A drain every 300 µs: a link of about 300 MB/s behind a 96 KiB buffer.
  void start_draining() {
    draining_ = true;
    drainer_ = std::thread([this] {
      while (draining_.load()) {
        buffer_->drain();
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
  }
  void stop_draining() {
    draining_ = false;
    if (drainer_.joinable()) drainer_.join();
  }

  Request* post_send(const void* data, size_t bytes) { return testing::post_send(send_, data, bytes); }
  Request* post_recv(void* data, size_t capacity) { return testing::post_recv(recv_, data, capacity); }
  // Waits for a request; returns the completed size, or -1 on error/timeout.
  int64_t wait(Request* r, int timeout_s = 30) { return testing::wait_request(r, timeout_s); }
  static long long counter(const char* name) { return testing::stats_counter(name); }
  static std::vector<uint8_t> pattern(size_t n, uint32_t seed) { return testing::pattern(n, seed); }

  // Every data packet went to the kernel once, in psn order: one connection, psns 0, 1, 2...
  void expect_each_packet_once_in_order() {
    const auto psns = buffer_->psns();
    ASSERT_EQ(psns.size(), 1u) << "data packets of one connection";
    const std::vector<uint32_t>& p = psns.begin()->second;
    ASSERT_FALSE(p.empty());
    for (size_t i = 0; i < p.size(); ++i) {
      ASSERT_EQ(p[i], static_cast<uint32_t>(i)) << "packet " << i << " of " << p.size()
                                                << " (a resend, a gap or a reordering)";
    }
  }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  // Recovery must not resend what only waits for the socket while the test holds it full: a
  // timeout of 4 s (10 ms by default; the tail probe at a quarter of it) keeps resends out of
  // the count of packets sent once.
  testing::EnvGuard rto_{"NCCL_TRIM_MIN_RTO_US", "4000000"};
  Context* ctx_ = nullptr;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
  // Never destroyed: an engine may be inside it, or watch its eventfd, until its next turn.
  // A GSO run (64 KiB) fits; a batch of them does not.
  SmallSendBuffer* const buffer_ = [] {
    static SmallSendBuffer* b = new SmallSendBuffer(96 * 1024);
    return b;
  }();
  std::atomic<bool> draining_{false};
  std::thread drainer_;
};

// Messages far larger than the buffer: each flush fills it, the rest waits in the engine and
// leaves on later turns; bytes exact, every packet sent once, in order, none refused or dropped.
TEST_F(SendBuffer, WhatWaitsLeavesInOrderOnce) {
  const long long full0 = counter("send_buffer_full"), refused0 = counter("send_refused"),
                  drops0 = counter("send_queue_drops");
  ASSERT_GE(full0, 0);
  start_draining();
  const std::vector<size_t> sizes = {4 << 20, (1 << 20) + 7, 3, 2 << 20};
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<Request*> sends, recvs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back(pattern(sizes[i], static_cast<uint32_t>(i + 40)));
    out.emplace_back(sizes[i], 0);
  }
  for (size_t i = 0; i < sizes.size(); ++i) recvs.push_back(post_recv(out[i].data(), out[i].size()));
  for (size_t i = 0; i < sizes.size(); ++i) sends.push_back(post_send(in[i].data(), in[i].size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(wait(sends[i]), static_cast<int64_t>(sizes[i])) << "send " << i;
    ASSERT_EQ(wait(recvs[i]), static_cast<int64_t>(sizes[i])) << "recv " << i;
    EXPECT_EQ(in[i], out[i]) << "message " << i;
  }
  stop_draining();
  EXPECT_GT(buffer_->full_answers(), 0u) << "the buffer was never full: the test tests nothing";
  EXPECT_GT(counter("send_buffer_full"), full0);
  EXPECT_EQ(counter("send_refused"), refused0);
  EXPECT_EQ(counter("send_queue_drops"), drops0);
  expect_each_packet_once_in_order();
}

// Held full for 40 ms: the engine tries the socket again only when woken (it sleeps on the
// buffer's writability), and meanwhile still reads its socket (a stray datagram is counted at
// once); released, everything arrives exact, each packet once. Not longer: the receiver's ACKs
// wait in the same buffer, and the engines are shared with tests that set
// NCCL_TRIM_TIMEOUT_MS=100, after which silence fails the connection.
TEST_F(SendBuffer, FullBufferNeverStallsTheEngine) {
  std::vector<uint8_t> in = pattern(2 << 20, 7), out(2 << 20, 0);
  Request* r = post_recv(out.data(), out.size());
  Request* s = post_send(in.data(), in.size());
  const auto until_full = Clock::now() + std::chrono::seconds(10);
  while (buffer_->full_answers() == 0 && Clock::now() < until_full) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(buffer_->full_answers(), 0u);
  const uint64_t answers0 = buffer_->full_answers();
  const auto full_at = Clock::now();

  const long long malformed0 = counter("malformed");
  const auto sent_at = Clock::now();
  testing::send_to_engine({1, 2, 3, 4, 5});
  while (counter("malformed") == malformed0 && Clock::now() - sent_at < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(counter("malformed"), malformed0 + 1);
  // Generous: on a shared 2-core machine a turn may wait for a CPU.
  EXPECT_LT(Clock::now() - sent_at, std::chrono::milliseconds(40)) << "the engine did not read its socket";
  std::this_thread::sleep_until(full_at + std::chrono::milliseconds(40));
  // Woken by the stray datagram (and maybe a timer): a try each, not a loop of retries.
  EXPECT_LE(buffer_->full_answers() - answers0, 10u) << "the engine retried a full buffer without waiting for room";

  start_draining();
  EXPECT_EQ(wait(s), 2 << 20);
  ASSERT_EQ(wait(r), 2 << 20);
  EXPECT_EQ(in, out);
  stop_draining();
  expect_each_packet_once_in_order();
}

}  // namespace
}  // namespace trim::net

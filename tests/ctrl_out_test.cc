// The control stream's output (transport/ctrl_out.h): a frame never waits for the TCP socket's
// send buffer (the engine thread writes CTS and Empty frames); what does not fit waits, in
// order, for EPOLLOUT; a peer that stopped reading fails the stream, bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "transport/ctrl_out.h"
#include "transport/engine.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace trim::transport {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A loopback TCP pair with the smallest buffers the kernel allows: `writer` (whose send
// buffer fills after a few frames while `reader` does not read) and `reader`.
class CtrlOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const uint32_t lo = htonl(INADDR_LOOPBACK);
    uint16_t port = 0;
    Result<Fd> l = open_tcp_listener(lo, &port);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    const int tiny = 1;  // the kernel rounds it up to its minimum
    ASSERT_EQ(setsockopt(l->get(), SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny), 0);  // accepted sockets inherit it
    Result<Fd> w = start_tcp_connect(make_addr(lo, port));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    writer_ = std::move(w).value();
    ASSERT_EQ(setsockopt(writer_.get(), SOL_SOCKET, SO_SNDBUF, &tiny, sizeof tiny), 0);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!reader_.valid() && Clock::now() < deadline) {
      Result<Fd> a = tcp_accept(l->get());
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      if (a->valid()) reader_ = std::move(a).value();
    }
    ASSERT_TRUE(reader_.valid());
    while (Clock::now() < deadline) {
      Result<bool> done = tcp_connect_done(writer_.get());
      ASSERT_TRUE(done.is_ok()) << done.status().to_string();
      if (done.value()) return;
    }
    FAIL() << "the loopback connection did not finish";
  }

  static void frame(uint64_t seq, uint8_t out[kFrameBytes]) { write_frame(Frame{FrameType::kCts, seq, 1000 + seq}, out); }

  // Pushes frames seq first.. until `n` were pushed; returns the longest push in ms.
  double push(CtrlOut* out, uint64_t first, uint64_t n) {
    double longest_ms = 0;
    for (uint64_t s = first; s < first + n; ++s) {
      uint8_t b[kFrameBytes];
      frame(s, b);
      const auto t0 = Clock::now();
      out->push(writer_.get(), b);
      longest_ms = std::max(longest_ms, ms_since(t0));
    }
    return longest_ms;
  }

  // Reads what arrives, draining `out` whenever the socket can take more (as the engine does at
  // EPOLLOUT), until `bytes` arrived or `give_up` passed.
  std::vector<uint8_t> read_all(CtrlOut* out, size_t bytes, std::chrono::milliseconds give_up = std::chrono::seconds(5)) {
    std::vector<uint8_t> got(bytes);
    size_t have = 0;
    const auto deadline = Clock::now() + give_up;
    while (have < bytes && Clock::now() < deadline) {
      Result<bool> r = read_some(reader_.get(), got.data(), bytes, &have);
      if (!r.is_ok()) break;
      pollfd p{writer_.get(), POLLOUT, 0};
      if (out->waiting() && poll(&p, 1, 1) == 1) out->drain(writer_.get());
    }
    got.resize(have);
    return got;
  }

  // The frames in `got` are seq 0, 1, ... in order, each whole and intact; returns how many.
  static uint64_t check_in_order(const std::vector<uint8_t>& got) {
    uint64_t n = 0;
    for (size_t at = 0; at + kFrameBytes <= got.size(); at += kFrameBytes, ++n) {
      Frame f;
      EXPECT_TRUE(parse_frame(got.data() + at, &f).is_ok()) << "frame " << n;
      EXPECT_EQ(f.seq, n) << "frame " << n;
      EXPECT_EQ(f.value, 1000 + n) << "frame " << n;
      if (f.seq != n) break;
    }
    return n;
  }

  Fd writer_, reader_;
};

TEST_F(CtrlOutTest, FullSendBufferQueuesWithoutWaitingAndAllArriveInOrder) {
  const uint64_t full0 = global_stats().ctrl_buffer_full.load();
  CtrlOut out;
  const uint64_t n = 900;  // far more than the smallest buffers hold, fewer than the queue's bound
  const auto t0 = Clock::now();
  const double longest_ms = push(&out, 0, n);
  const double total_ms = ms_since(t0);
  // A write that waited for room (1 s before this queue) would show here.
  EXPECT_LT(longest_ms, 100.0);
  EXPECT_LT(total_ms, 500.0);
  ASSERT_TRUE(out.waiting()) << "the peer does not read: the buffer must have filled";
  EXPECT_FALSE(out.failed());
  EXPECT_GT(out.queued_frames(), 0u);
  std::printf("%zu of %llu frames waited for room\n", out.queued_frames(), static_cast<unsigned long long>(n));
  // Every frame that stayed behind is counted once.
  EXPECT_EQ(global_stats().ctrl_buffer_full.load() - full0, out.queued_frames());
  std::vector<uint8_t> got = read_all(&out, n * kFrameBytes);
  ASSERT_EQ(got.size(), n * kFrameBytes);
  EXPECT_EQ(check_in_order(got), n);
  EXPECT_FALSE(out.waiting());
  // The stream goes on as before.
  push(&out, n, 3);
  const std::vector<uint8_t> more = read_all(&out, 3 * kFrameBytes);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(check_in_order(got), n + 3);
}

TEST_F(CtrlOutTest, PeerThatStopsReadingOverflowsTheBoundedQueueWithAClearError) {
  CtrlOut out;
  const uint64_t n = CtrlOut::kMaxQueuedFrames + 400;
  const double longest_ms = push(&out, 0, n);
  EXPECT_LT(longest_ms, 100.0);
  ASSERT_TRUE(out.failed());
  EXPECT_NE(out.why().find("stopped reading"), std::string::npos) << out.why();
  EXPECT_LE(out.queued_frames(), CtrlOut::kMaxQueuedFrames);
  EXPECT_FALSE(out.writable());
  // Nothing more is written once failed: the peer sees an in-order prefix, no hole.
  const std::vector<uint8_t> got = read_all(&out, n * kFrameBytes, std::chrono::milliseconds(300));
  EXPECT_LT(got.size(), n * kFrameBytes);
  EXPECT_EQ(check_in_order(got), got.size() / kFrameBytes);
  out.abandon();
  EXPECT_FALSE(out.waiting());
}

TEST_F(CtrlOutTest, GonePeerDropsTheStreamWithoutASignalOrAWait) {
  CtrlOut out;
  reader_ = Fd();  // closed (unread data: the kernel resets the connection)
  uint8_t b[kFrameBytes];
  frame(0, b);
  const auto t0 = Clock::now();
  for (int i = 0; i < 4 && out.writable(); ++i) out.push(writer_.get(), b);  // the first may still be taken
  EXPECT_LT(ms_since(t0), 100.0);
  EXPECT_FALSE(out.writable());
  EXPECT_FALSE(out.failed());  // not an overflow: reading the stream says how the peer went
  EXPECT_FALSE(out.waiting());
}

// The handshake's writes (connect's Hello, accept's HelloAck) never wait either: write_some
// takes what fits and says so; the rest leaves at a later call, in order.
TEST_F(CtrlOutTest, HandshakeWriteTakesWhatFitsWithoutWaitingAndResumes) {
  std::vector<uint8_t> data(256 * 1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  size_t done = 0;
  const auto t0 = Clock::now();
  Result<bool> w = write_some(writer_.get(), data.data(), data.size(), &done);
  EXPECT_LT(ms_since(t0), 100.0);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_FALSE(w.value()) << "the smallest buffers took 256 KiB";
  EXPECT_GT(done, 0u);
  EXPECT_LT(done, data.size());
  std::vector<uint8_t> got(data.size());
  size_t have = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (have < got.size() && Clock::now() < deadline) {
    ASSERT_TRUE(read_some(reader_.get(), got.data(), got.size(), &have).is_ok());
    if (done < data.size()) {
      ASSERT_TRUE(write_some(writer_.get(), data.data(), data.size(), &done).is_ok());
    }
  }
  EXPECT_EQ(done, data.size());
  EXPECT_EQ(got, data);
}

}  // namespace
}  // namespace trim::transport

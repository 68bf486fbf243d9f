// The transport end to end inside one process, through trim::net (the API the plugin adapts):
// handshake, FIFO matching, exact bytes, empty and odd-sized messages, slot exhaustion,
// trimmable classification, close with operations in flight.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "codec/encoder.h"
#include "tests/net_pair.h"
#include "tests/env_guard.h"
#include "transport/net_api.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace trim::net {
namespace {

using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

// The first byte of a buffer the engine may be writing: a race on purpose, to catch a transfer
// mid-way (make tsan is told to look away from this read only).
uint8_t peek_first(const uint8_t* p) {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
  const uint8_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
  return v;
}

class Loopback : public ::testing::Test {
 protected:
  void SetUp() override { testing::open_loopback(&ctx_, &send_, &recv_, &listen_); }
  void TearDown() override { testing::close_loopback(&ctx_, &send_, &recv_, &listen_); }

  Request* post_send(const void* data, size_t bytes) { return testing::post_send(send_, data, bytes); }
  Request* post_recv(void* data, size_t capacity) { return testing::post_recv(recv_, data, capacity); }
  // Waits for a request; returns the completed size, or -1 on error/timeout.
  int64_t wait(Request* r, int timeout_s = 20) { return testing::wait_request(r, timeout_s); }
  static long long counter(const char* name) { return testing::stats_counter(name); }
  static std::vector<uint8_t> pattern(size_t n, uint32_t seed) { return testing::pattern(n, seed); }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  std::vector<uint8_t> a_, b_;  // declared before the comms: alive until TearDown has closed them
  Context* ctx_ = nullptr;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
};

TEST_F(Loopback, ExactBytesOfManySizesInFifoOrder) {
  const std::vector<size_t> sizes = {0, 1, 7, 4068, 4069, 65536, 1000001, 1 << 20, 3};
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<Request*> sends, recvs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back(pattern(sizes[i], static_cast<uint32_t>(i)));
    out.emplace_back(sizes[i] + 100, 0xEE);  // posted bigger than sent: the size comes back
  }
  for (size_t i = 0; i < sizes.size(); ++i) recvs.push_back(post_recv(out[i].data(), out[i].size()));
  for (size_t i = 0; i < sizes.size(); ++i) sends.push_back(post_send(in[i].data(), in[i].size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(wait(sends[i]), static_cast<int64_t>(sizes[i])) << "send " << i;
    ASSERT_EQ(wait(recvs[i]), static_cast<int64_t>(sizes[i])) << "recv " << i;
    if (sizes[i] > 0) {  // memcmp on an empty vector's null data() is UB even at length 0
      EXPECT_EQ(0, std::memcmp(in[i].data(), out[i].data(), sizes[i])) << "message " << i;
    }
    EXPECT_EQ(out[i][sizes[i]], 0xEE) << "wrote past the message " << i;
  }
}

// Exact messages leave zero-copy in GSO super-datagrams and arrive in GRO runs (the default,
// NCCL_TRIM_UDP_OFFLOAD=on); the bytes stay exact either way.
TEST_F(Loopback, ExactTrafficUsesSegmentationOffload) {
  const long long gso0 = counter("gso_sends"), gro0 = counter("gro_batches");
  ASSERT_GE(gso0, 0);
  ASSERT_GE(gro0, 0);
  std::vector<uint8_t> in = pattern(4 << 20, 11), out(4 << 20);
  Request* r = post_recv(out.data(), out.size());
  Request* s = post_send(in.data(), in.size());
  EXPECT_EQ(wait(s), 4 << 20);
  ASSERT_EQ(wait(r), 4 << 20);
  EXPECT_EQ(in, out);
  EXPECT_GT(counter("gso_sends"), gso0);
  EXPECT_GT(counter("gro_batches"), gro0);
}

// Exact messages are received in place (transport/placed_rx.h): after each message's first
// packet, the kernel writes the packets of each run straight into the receive's buffer.
TEST_F(Loopback, ExactMessagesAreReceivedInPlace) {
  const long long placed0 = counter("placed_packets");
  ASSERT_GE(placed0, 0);
  const size_t bytes = (4 << 20) + 3;
  for (uint32_t i = 0; i < 4; ++i) {
    std::vector<uint8_t> in = pattern(bytes, 20 + i), out(bytes + 1, 0xEE);
    Request* r = post_recv(out.data(), out.size());
    Request* s = post_send(in.data(), in.size());
    EXPECT_EQ(wait(s), static_cast<int64_t>(bytes));
    ASSERT_EQ(wait(r), static_cast<int64_t>(bytes));
    EXPECT_EQ(0, std::memcmp(in.data(), out.data(), bytes)) << "message " << i;
    EXPECT_EQ(out[bytes], 0xEE) << "wrote past the message " << i;
  }
  // 8972-byte packets on loopback: 4 x 4 MiB is 2048 packets; most must have been placed.
  EXPECT_GT(counter("placed_packets") - placed0, 1024);
}

// Whatever else arrives at the engine's port is dropped and counted, and never disturbs a
// connection: random bytes, control packets and data packets for cookies nobody owns.
TEST_F(Loopback, GarbageAndForeignPacketsAreCountedAndIgnored) {
  auto send_raw = [](const std::vector<uint8_t>& b) { testing::send_to_engine(b); };
  const long long malformed0 = counter("malformed"), unknown0 = counter("unknown_conn"),
                  cuts0 = counter("header_cuts");
  // Malformed: random bytes, a control magic with nothing behind it, a data header cut short.
  for (int i = 0; i < 10; ++i) send_raw(pattern(1 + 97 * i, 100 + i));
  send_raw({0x54, 0x43, 1, 2, 3});
  // Well-formed, but for a connection that does not exist: an ACK and a data packet.
  transport::CtrlPacket ack;
  ack.cookie = 0xDEADBEEFCAFEull;
  ack.cum_psn = 5;
  std::vector<uint8_t> ctrl(transport::kCtrlBytes);
  transport::write_ctrl(ack, ctrl.data());
  send_raw(ctrl);
  codec::CodecConfig cfg;
  Result<codec::Layout> layout = codec::Layout::make(cfg, codec::DType::kRaw, codec::Scheme::kNone, 1000);
  ASSERT_TRUE(layout.is_ok());
  Result<std::vector<std::vector<uint8_t>>> data =
      codec::Encoder(cfg).encode_message(*layout, codec::MessageId{0xDEADBEEFCAFEull, 0, false}, pattern(1000, 1).data());
  ASSERT_TRUE(data.is_ok());
  send_raw(data->front());
  std::vector<uint8_t> cut(data->front().begin(), data->front().begin() + 20);
  send_raw(cut);
  // The connection still delivers exact bytes, and the engine counted each reject once.
  std::vector<uint8_t> in = pattern(1 << 20, 12), out(1 << 20);
  Request* r = post_recv(out.data(), out.size());
  Request* s = post_send(in.data(), in.size());
  EXPECT_EQ(wait(s), 1 << 20);
  ASSERT_EQ(wait(r), 1 << 20);
  EXPECT_EQ(in, out);
  // The data packet cut inside its header is ours (its magic): a cut by a switch, counted apart.
  EXPECT_EQ(counter("malformed") - malformed0, 11);
  EXPECT_EQ(counter("header_cuts") - cuts0, 1);
  EXPECT_EQ(counter("unknown_conn") - unknown0, 2);
}

TEST_F(Loopback, ThirtyTwoRequestsThenNoSlot) {
  std::vector<uint8_t> buf(64);
  std::vector<Request*> recvs;
  for (int i = 0; i < 32; ++i) recvs.push_back(post_recv(buf.data(), buf.size()));
  Result<Request*> extra = [&] {
    RecvBuffer b;
    b.data = buf.data();
    b.capacity_bytes = buf.size();
    return irecv(recv_, 1, &b, false);
  }();
  ASSERT_TRUE(extra.is_ok());
  EXPECT_EQ(extra.value(), nullptr) << "a 33rd receive must get no slot";
  std::vector<uint8_t> msg = pattern(64, 5);
  for (int i = 0; i < 32; ++i) {
    Request* s = post_send(msg.data(), msg.size());
    EXPECT_EQ(wait(s), 64);
    EXPECT_EQ(wait(recvs[i]), 64);
  }
}

TEST_F(Loopback, TrimmableAllreduceTrafficArrivesWholeWithoutCongestion) {
  OpAttr attr;
  attr.func = Func::kAllReduce;
  attr.algo = Algo::kRing;
  attr.proto = Proto::kSimple;
  ASSERT_TRUE(set_op_attr(ctx_, attr).is_ok());
  // Without NCCL_TRIM_DTYPE nothing is trimmable: bytes stay exact whatever the op.
  std::vector<float> in(262144), out(262144);
  std::mt19937 g(3);
  std::normal_distribution<float> n(0, 1);
  for (float& v : in) v = n(g);
  Request* r = post_recv(out.data(), out.size() * 4);
  Request* s = post_send(in.data(), in.size() * 4);
  EXPECT_EQ(wait(s), 1 << 20);
  EXPECT_EQ(wait(r), 1 << 20);
  EXPECT_EQ(0, std::memcmp(in.data(), out.data(), 1 << 20));
}

// The device advertises host memory only, on every machine (NCCL stages GPU data through host
// memory), and a registration of CUDA memory fails, saying why, instead of being treated as host
// memory.
TEST_F(Loopback, CudaRegistrationIsRefusedHostOnly) {
  Result<DeviceProps> props = device_props(0);
  ASSERT_TRUE(props.is_ok());
  EXPECT_EQ(props->ptr_support, kPtrHost);
  std::vector<uint8_t> buf(4096);
  MemRegion region{buf.data(), buf.size()};
  region.type = MemType::kCuda;
  Result<MemHandle*> m = reg_mr(as_comm(send_), region);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("NCCL_PTR_HOST only"), std::string::npos) << m.status().to_string();
}

TEST_F(Loopback, CloseWithOperationsInFlight) {
  // Members, not locals: TearDown closes both ends with data moving, and the buffers must
  // outlive the close (NCCL frees them after close on a normal teardown).
  a_.assign(1 << 20, 1);
  b_.assign(1 << 20, 0);
  for (int i = 0; i < 4; ++i) post_recv(b_.data(), b_.size());
  for (int i = 0; i < 4; ++i) post_send(a_.data(), a_.size());
  // TearDown must return, and nothing may crash.
}

// NCCL's abort order (net.cc sendProxyFree/recvProxyFree): deregMr, free the buffers, close.
// Deregistering memory that pending operations use must stop the engine from touching it:
// under ASan, a read of the freed send buffer or a write into the freed receive buffer fails.
TEST_F(Loopback, DeregisterThenFreeWithOperationsInFlight) {
  auto src = std::make_unique<std::vector<uint8_t>>(32 << 20, 7);
  auto dst = std::make_unique<std::vector<uint8_t>>(32 << 20, 0);
  Result<MemHandle*> ms = reg_mr(as_comm(send_), MemRegion{src->data(), src->size()});
  Result<MemHandle*> mr = reg_mr(as_comm(recv_), MemRegion{dst->data(), dst->size()});
  ASSERT_TRUE(ms.is_ok() && mr.is_ok());
  Request* r = post_recv(dst->data(), dst->size());
  Request* s = post_send(src->data(), src->size());
  ASSERT_NE(r, nullptr);
  ASSERT_NE(s, nullptr);
  // Mid-transfer: the first packet has landed (the engine writes dst concurrently, hence atomics).
  const auto started = Clock::now() + std::chrono::seconds(10);
  while (peek_first(dst->data()) != 7 && Clock::now() < started) std::this_thread::yield();
  ASSERT_EQ(peek_first(dst->data()), 7) << "no data moved in 10 s";
  EXPECT_TRUE(dereg_mr(as_comm(send_), ms.value()).is_ok());
  src.reset();
  EXPECT_TRUE(dereg_mr(as_comm(recv_), mr.value()).is_ok());
  dst.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // give a stray access time to happen
  // Both operations end (done if they beat the deregistration, failed otherwise): none hangs.
  Completion c;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  bool s_over = false, r_over = false, s_failed = false;
  while ((!s_over || !r_over) && Clock::now() < deadline) {
    if (!s_over) {
      s_failed = !test(s, &c).is_ok();
      s_over = s_failed || c.done;
    }
    if (!r_over) r_over = !test(r, &c).is_ok() || c.done;
  }
  ASSERT_TRUE(s_over && r_over);
  ASSERT_TRUE(s_failed) << "32 MiB finished before the deregistration: nothing tested";
  // The connection is dead now: new operations fail at once, naming the reason.
  Result<Request*> again = isend(send_, nullptr, 0, 0, nullptr, nullptr);
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("deregistered"), std::string::npos) << again.status().to_string();
}

}  // namespace
}  // namespace trim::net

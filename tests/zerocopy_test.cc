// Sends without the copy (MSG_ZEROCOPY): a message goes back to NCCL only once the kernel let
// go of every send of it (retransmissions included), the kernel's refusals and copies are
// counted, and a copy reported by the kernel turns it off. The last test asks the kernel itself (loopback).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/socket.h"
#include "transport/send_proto.h"
#include "transport/zerocopy.h"
#include "tests/proto_util.h"

namespace trim::transport {
namespace {

using testing::ack_upto;

// What the engine's transmit batch does with pinned datagrams, one send each: counted in the
// ledger as the kernel took them.
struct PinningSink final : TxSink {
  explicit PinningSink(ZeroCopy* zc) : zc(zc) {}
  ZeroCopy* zc;
  uint32_t pinned = 0, copied_sends = 0;
  void data(const uint8_t*, uint32_t, const uint8_t*, uint32_t) override { ++copied_sends; }
  void data_pinned(const uint8_t*, uint32_t, const uint8_t*, uint32_t, const std::shared_ptr<ZcHold>& hold) override {
    zc->sent(&hold, 1);
    ++pinned;
  }
  void ctrl(const CtrlPacket&) override {}
  void frame(const Frame&) override {}
};

ConnParams exact_params() {
  ConnParams p;
  p.codec.scheme = codec::Scheme::kNone;
  p.cookie = testing::kTestCookie;
  p.dst_ip4_be = 0x0100007f;
  p.dst_port = 9;
  p.min_rto_ns = 1'000'000'000;  // no timeout resends in the way
  return p;
}

struct ExactSend {
  explicit ExactSend(size_t n) : s(exact_params()), msg(n, 0x5a) {
    op.data = msg.data();
    op.bytes = msg.size();
    EXPECT_TRUE(s.post(&op).is_ok());
    s.on_cts(0, msg.size());
  }
  SendProto s;
  std::vector<uint8_t> msg;
  SendOp op;
};

TEST(ZeroCopySend, CompletesOnlyAfterTheKernelLetGoOfEverySend) {
  ZeroCopy zc(-1, ZeroCopy::Mode::kOff);  // the ledger alone; no socket
  PinningSink sink(&zc);
  ExactSend one(96 * 1024);  // within the first window: every packet leaves at once
  const uint32_t n = one.s.poll_tx(0, 1000, &sink);
  ASSERT_GT(n, 4u);
  ASSERT_EQ(n, one.s.in_flight());
  ASSERT_EQ(sink.pinned, n) << "a large exact message is offered without the copy";
  // The receiver NACKs packet 2 (trimmed, say): it is sent again, a send of its own.
  CtrlPacket nack = ack_upto(0);
  nack.nack_count = 1;
  nack.nacks[0] = 2;
  one.s.on_ack(nack, 10);
  ASSERT_EQ(one.s.poll_tx(20, 1000, &sink), 1u);
  ASSERT_EQ(zc.outstanding(), n + 1);
  one.s.on_ack(ack_upto(n), 30);
  EXPECT_TRUE(one.op.result.pending()) << "acknowledged, but the kernel may still read the buffer";
  // Every first send done (one reported copied), the resend not yet.
  zc.complete(0, n - 2, false);
  zc.complete(n - 1, n - 1, true);
  one.s.on_kernel_released();
  EXPECT_TRUE(one.op.result.pending()) << "the resend of packet 2 still holds the buffer";
  EXPECT_EQ(zc.outstanding(), 1u);
  zc.complete(n, n, false);
  one.s.on_kernel_released();
  ASSERT_EQ(one.op.result.state(), OpResult::kDone);
  EXPECT_EQ(one.op.result.bytes(), one.msg.size());
  EXPECT_EQ(zc.outstanding(), 0u);
  EXPECT_EQ(zc.sends(), n + 1);
  EXPECT_EQ(zc.copied(), 1u);
}

TEST(ZeroCopySend, SmallMessagesAreCopiedAndCompleteOnTheirAck) {
  ZeroCopy zc(-1, ZeroCopy::Mode::kOff);
  PinningSink sink(&zc);
  ExactSend one(16 * 1024);
  const uint32_t n = one.s.poll_tx(0, 1000, &sink);
  EXPECT_EQ(sink.pinned, 0u);
  EXPECT_EQ(sink.copied_sends, n);
  one.s.on_ack(ack_upto(n), 10);
  EXPECT_EQ(one.op.result.state(), OpResult::kDone);
}

// Completions may come out of order and cover ranges; a failed connection forgets its messages
// while the ledger still holds them until the kernel answers.
TEST(ZeroCopyLedger, RangesOutOfOrderAndHoldsThatOutliveTheirMessage) {
  ZeroCopy zc(-1, ZeroCopy::Mode::kOff);
  auto a = std::make_shared<ZcHold>(), b = std::make_shared<ZcHold>();
  {
    const std::shared_ptr<ZcHold> run[4] = {a, a, b, nullptr};  // one send, two messages
    zc.sent(run, 4);
  }
  zc.sent(&b, 1);
  zc.sent(&a, 1);
  EXPECT_EQ(a->pending, 2u);
  EXPECT_EQ(b->pending, 2u);
  zc.complete(2, 2, false);
  EXPECT_EQ(a->pending, 1u);
  EXPECT_EQ(zc.outstanding(), 3u) << "id 0's two messages and id 1's";
  std::weak_ptr<ZcHold> gone = b;
  b.reset();  // its message failed and was forgotten
  zc.complete(0, 1, false);
  EXPECT_EQ(a->pending, 0u);
  EXPECT_EQ(zc.outstanding(), 0u);
  EXPECT_TRUE(gone.expired());
}

TEST(ZeroCopyLedger, RefusalsAreCountedAndTheNextSendIsCopied) {
  uint16_t port = 0;
  Result<sock::Fd> fd = sock::open_udp(htonl(INADDR_LOOPBACK), &port);
  ASSERT_TRUE(fd.is_ok());
  ZeroCopy zc(fd->get(), ZeroCopy::Mode::kOn);
  ASSERT_TRUE(zc.active()) << "SO_ZEROCOPY (Linux >= 4.14)";
  EXPECT_FALSE(zc.refused(EAGAIN)) << "a full socket buffer is not a refusal";
  EXPECT_TRUE(zc.active());
  EXPECT_TRUE(zc.refused(ENOBUFS));
  EXPECT_FALSE(zc.active()) << "sent again copied";
  EXPECT_EQ(zc.refusals(), 1u);
  zc.sent_any();
  EXPECT_TRUE(zc.active()) << "the next send tries without the copy again";
  EXPECT_TRUE(zc.refused(EMSGSIZE)) << "more pages than the kernel's skb holds";
  EXPECT_EQ(zc.refusals(), 2u);
}

TEST(ZeroCopyLedger, CopiesForGoodAtTheFirstCopiedCompletion) {
  uint16_t port = 0;
  Result<sock::Fd> fd = sock::open_udp(htonl(INADDR_LOOPBACK), &port);
  ASSERT_TRUE(fd.is_ok());
  ZeroCopy zc(fd->get(), ZeroCopy::Mode::kOn);
  ASSERT_TRUE(zc.active());
  auto h = std::make_shared<ZcHold>();
  zc.sent(&h, 1);
  zc.sent(&h, 1);
  zc.complete(0, 0, false);
  EXPECT_TRUE(zc.active());
  zc.complete(1, 1, true);
  EXPECT_FALSE(zc.active()) << "the kernel copies on this path: pinning is pure cost";
  EXPECT_EQ(h->pending, 0u);
  EXPECT_EQ(zc.copied(), 1u);
  zc.sent_any();
  EXPECT_FALSE(zc.active()) << "for good, unlike a refusal";
  ZeroCopy off(fd->get(), ZeroCopy::Mode::kOff);
  EXPECT_FALSE(off.active());
}

// Two UDP sockets on loopback: `tx` sends to `rx` (port `rport`).
struct LoopbackPair {
  LoopbackPair() {
    uint16_t port = 0;
    Result<sock::Fd> t = sock::open_udp(htonl(INADDR_LOOPBACK), &port);
    Result<sock::Fd> r = sock::open_udp(htonl(INADDR_LOOPBACK), &rport);
    if (t.is_ok() && r.is_ok()) {
      tx = std::move(t).value();
      rx = std::move(r).value();
    }
  }
  sock::Fd tx, rx;
  uint16_t rport = 0;
};

// The kernel's side on loopback: a MSG_ZEROCOPY send of 64 KiB arrives exact, its completion
// comes through the error queue (read without blocking), and the kernel reports it copied: the
// packet was delivered inside this host, which copies zero-copy pages (why the engine then
// copies again).
TEST(ZeroCopyKernel, LoopbackCompletesAndReportsCopied) {
  LoopbackPair lp;
  ASSERT_TRUE(lp.tx.valid() && lp.rx.valid());
  ZeroCopy zc(lp.tx.get(), ZeroCopy::Mode::kOn);
  ASSERT_TRUE(zc.active());
  std::vector<uint8_t> payload(60000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 3);
  const sockaddr_in to = sock::make_addr(htonl(INADDR_LOOPBACK), lp.rport);
  iovec iov{payload.data(), payload.size()};
  msghdr h{};
  h.msg_name = const_cast<sockaddr_in*>(&to);
  h.msg_namelen = sizeof to;
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  ASSERT_EQ(sendmsg(lp.tx.get(), &h, MSG_ZEROCOPY | MSG_DONTWAIT), static_cast<ssize_t>(payload.size()))
      << std::strerror(errno);
  auto hold = std::make_shared<ZcHold>();
  zc.sent(&hold, 1);
  std::vector<uint8_t> got(65536);
  pollfd p{lp.rx.get(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);
  ASSERT_EQ(recv(lp.rx.get(), got.data(), got.size(), 0), static_cast<ssize_t>(payload.size()));
  got.resize(payload.size());
  EXPECT_EQ(got, payload);
  for (int i = 0; i < 2000 && hold->pending > 0; ++i) {
    pollfd e{lp.tx.get(), 0, 0};  // POLLERR: the error queue has the completion
    poll(&e, 1, 1);
    zc.reap();
  }
  EXPECT_EQ(hold->pending, 0u);
  EXPECT_EQ(zc.outstanding(), 0u);
  EXPECT_EQ(zc.copied(), 1u) << "loopback delivers locally: the kernel copies at delivery";
}

// One send without the copy may reference ZeroCopy::kMaxFrags pages: the engine cuts its GSO
// runs to fit (headers and payload slices are separate pieces). One page more and the kernel
// refuses the send (EMSGSIZE), which the engine then sends again copied.
TEST(ZeroCopyKernel, PagesPerSendAreLimitedAsTheEngineCounts) {
  LoopbackPair lp;
  ASSERT_TRUE(lp.tx.valid() && lp.rx.valid());
  ZeroCopy zc(lp.tx.get(), ZeroCopy::Mode::kOn);
  ASSERT_TRUE(zc.active());
  std::vector<uint8_t> buf(40 * 4096, 0x33);
  uint8_t* page0 = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 4095) & ~uintptr_t{4095});
  std::vector<iovec> iov;
  for (uint32_t i = 0; i < ZeroCopy::kMaxFrags + 1; ++i) iov.push_back(iovec{page0 + i * 8192 + 100, 200});
  EXPECT_EQ(ZeroCopy::frags(iov[0]), 1u);
  EXPECT_EQ(ZeroCopy::frags(iovec{page0 + 4000, 200}), 2u) << "across a page boundary";
  EXPECT_EQ(ZeroCopy::frags(iovec{page0, 0}), 0u);
  const sockaddr_in to = sock::make_addr(htonl(INADDR_LOOPBACK), lp.rport);
  msghdr h{};
  h.msg_name = const_cast<sockaddr_in*>(&to);
  h.msg_namelen = sizeof to;
  h.msg_iov = iov.data();
  h.msg_iovlen = ZeroCopy::kMaxFrags;
  EXPECT_EQ(sendmsg(lp.tx.get(), &h, MSG_ZEROCOPY | MSG_DONTWAIT), 200 * static_cast<ssize_t>(ZeroCopy::kMaxFrags))
      << std::strerror(errno);
  h.msg_iovlen = ZeroCopy::kMaxFrags + 1;
  ASSERT_EQ(sendmsg(lp.tx.get(), &h, MSG_ZEROCOPY | MSG_DONTWAIT), -1) << "a kernel with MAX_SKB_FRAGS > 17?";
  EXPECT_EQ(errno, EMSGSIZE);
  EXPECT_TRUE(zc.refused(errno));
}

}  // namespace
}  // namespace trim::transport

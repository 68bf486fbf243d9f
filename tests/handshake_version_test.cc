// The control handshake is versioned (transport/wire.h, kFrameVersion): the listen handle and
// the Hello carry the version, the HelloAck the listener's. Ranks running builds of different
// versions must fail at once, each with an error naming both versions, never by a timeout or
// by packets the other end cannot decode. The other build is played here by raw sockets that
// speak the parts of the handshake every version keeps (docs/PROTOCOL.md).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "codec/packet.h"
#include "common/socket.h"
#include "tests/env_guard.h"
#include "transport/net_api.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace trim::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint16_t kOurs = transport::kFrameVersion;

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// `text` names both versions of a mismatch.
::testing::AssertionResult names_both(const std::string& text, uint16_t theirs) {
  const std::string a = "version " + std::to_string(theirs), b = "version " + std::to_string(kOurs);
  if (text.find(a) != std::string::npos && text.find(b) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not name both '" << a << "' and '" << b << "'";
}

class HandshakeVersion : public ::testing::Test {
 protected:
  void SetUp() override {
    Params p = default_params();
    p.ifname = "lo";
    InitOptions o;
    o.params = &p;
    Result<Context*> c = init(o);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ctx_ = c.value();
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_TRUE(finalize(ctx_).is_ok());
    }
  }

  // Our connect() against a listener of handshake version `handle_version` (its handle says
  // so), played by a raw socket that takes our Hello and, when `answer`, answers it with a
  // HelloAck of `ack_status` whose version field is `ack_version` (0: a version-1 build's ack,
  // which has none). Returns connect()'s final status and the Hello the listener got.
  Status connect_to(uint16_t handle_version, bool answer, uint32_t ack_status, uint16_t ack_version,
                    uint8_t hello[transport::kHelloBytes]) {
    uint16_t port = 0;
    const uint32_t lo = htonl(INADDR_LOOPBACK);
    Result<transport::Fd> lfd = transport::open_tcp_listener(lo, &port);
    if (!lfd) return lfd.status();
    uint8_t handle[kMaxHandleBytes] = {};
    transport::write_handle(transport::ListenHandle{lo, port, 42}, handle);
    put16(handle + 4, handle_version);  // the version, then the CRC over bytes [0, 24)
    put32(handle + 24, codec::crc32c(handle, 24));
    transport::Fd peer;
    size_t have = 0;
    bool answered = false;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    // The Hello connect sent before it gave up (it stays readable after the close).
    auto take_hello = [&] {
      while (have < transport::kHelloBytes && Clock::now() < deadline) {
        if (!peer.valid()) {
          Result<transport::Fd> a = transport::tcp_accept(lfd->get());
          if (a.is_ok() && a->valid()) peer = std::move(a).value();
          continue;
        }
        if (!transport::read_some(peer.get(), hello, transport::kHelloBytes, &have).is_ok()) return;
      }
    };
    while (Clock::now() < deadline) {
      Result<SendComm*> s = connect(ctx_, 0, handle, ConnectOptions());
      if (!s.is_ok()) {
        take_hello();
        return s.status();
      }
      if (s.value() != nullptr) {
        EXPECT_TRUE(close_send(s.value()).is_ok());
        return Status(Code::kInternal, "connected despite the version mismatch");
      }
      if (!peer.valid()) {
        Result<transport::Fd> a = transport::tcp_accept(lfd->get());
        if (!a) return a.status();
        peer = std::move(a).value();
        continue;
      }
      if (answered) continue;
      Result<bool> got = transport::read_some(peer.get(), hello, transport::kHelloBytes, &have);
      if (!got) return got.status();
      if (!got.value() || !answer) continue;
      transport::HelloAck ack;
      ack.status = ack_status;
      ack.udp_ip4_be = lo;
      ack.udp_port = 9;
      ack.mtu = 1500;
      uint8_t out[transport::kFrameBytes];
      transport::write_hello_ack(ack, out);
      put16(out + 20, ack_version);
      put32(out + transport::kFrameBytes - 4, codec::crc32c(out, transport::kFrameBytes - 4));
      TRIM_RETURN_IF_ERROR(transport::write_all(peer.get(), out, sizeof out, 1000));
      answered = true;
    }
    return Status(Code::kInternal, "connect did not finish in 10 s");
  }

  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  Context* ctx_ = nullptr;
};

// A listener of an older (1, 2) or newer version: connect fails naming both versions as soon
// as its Hello is out, without waiting for an answer the other build may never give, and that
// Hello carries our version, so the listener's own accept can name both too.
TEST_F(HandshakeVersion, ConnectToAListenerOfAnotherVersionNamesBoth) {
  for (uint16_t theirs : {uint16_t{1}, static_cast<uint16_t>(kOurs - 1), static_cast<uint16_t>(kOurs + 1)}) {
    SCOPED_TRACE(theirs);
    uint8_t hello[transport::kHelloBytes] = {};
    const auto t0 = Clock::now();
    const Status st = connect_to(theirs, false, 0, 0, hello);
    ASSERT_FALSE(st.is_ok());
    EXPECT_TRUE(names_both(st.message(), theirs));
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "a mismatch must not wait for a timeout";
    EXPECT_EQ(get16(hello), 0x5254) << "no Hello reached the listener";  // "TRMC", little-endian
    EXPECT_EQ(get16(hello + 4), kOurs) << "the listener must learn our version";
  }
}

// A listener whose handle matches but which refuses our Hello's version answers with its own:
// named too (a version-1 build's ack carries none: "an older build").
TEST_F(HandshakeVersion, RefusedHelloNamesTheListenersVersion) {
  uint8_t hello[transport::kHelloBytes] = {};
  const uint16_t newer = kOurs + 1;
  Status st = connect_to(kOurs, true, transport::kHelloVersion, newer, hello);
  ASSERT_FALSE(st.is_ok());
  EXPECT_TRUE(names_both(st.message(), newer));
  st = connect_to(kOurs, true, transport::kHelloVersion, 0, hello);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("older"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("version " + std::to_string(kOurs)), std::string::npos) << st.to_string();
}

// A connector of another version (its Hello says so): accept fails naming both versions, and
// the connector gets a HelloAck that refuses the version and carries ours.
TEST_F(HandshakeVersion, AcceptOfAnotherVersionNamesBothAndAnswersWithOurs) {
  for (uint16_t theirs : {uint16_t{1}, static_cast<uint16_t>(kOurs - 1), static_cast<uint16_t>(kOurs + 1)}) {
    SCOPED_TRACE(theirs);
    uint8_t handle[kMaxHandleBytes] = {};
    Result<ListenComm*> l = listen(ctx_, 0, handle, sizeof handle);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    transport::ListenHandle target;
    ASSERT_TRUE(transport::parse_handle(handle, &target).is_ok());
    EXPECT_EQ(target.version, kOurs);
    Result<transport::Fd> fd = transport::start_tcp_connect(transport::make_addr(target.ip4_be, target.tcp_port));
    ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::seconds(5);
    bool connected = false;
    while (!connected && Clock::now() < deadline) {
      Result<bool> done = transport::tcp_connect_done(fd->get());
      ASSERT_TRUE(done.is_ok()) << done.status().to_string();
      connected = done.value();
    }
    ASSERT_TRUE(connected);
    transport::Hello h;
    h.listen_nonce = target.nonce;
    h.cookie = 7;
    h.mtu = 1500;
    uint8_t out[transport::kHelloBytes];
    transport::write_hello(h, out);
    put16(out + 4, theirs);
    put32(out + transport::kHelloBytes - 4, codec::crc32c(out, transport::kHelloBytes - 4));
    ASSERT_TRUE(transport::write_all(fd->get(), out, sizeof out, 1000).is_ok());
    Status refused;
    while (refused.is_ok() && Clock::now() < deadline) {
      Result<RecvComm*> r = accept(l.value());
      if (!r.is_ok()) refused = r.status();
      else ASSERT_EQ(r.value(), nullptr) << "a Hello of version " << theirs << " was accepted";
    }
    ASSERT_FALSE(refused.is_ok()) << "accept never answered";
    EXPECT_TRUE(names_both(refused.message(), theirs));
    uint8_t ack_buf[transport::kFrameBytes] = {};
    size_t have = 0;
    bool got_ack = false;
    while (!got_ack && Clock::now() < deadline) {
      Result<bool> got = transport::read_some(fd->get(), ack_buf, sizeof ack_buf, &have);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      got_ack = got.value();
    }
    ASSERT_TRUE(got_ack) << "no HelloAck";
    transport::HelloAck ack;
    ASSERT_TRUE(transport::parse_hello_ack(ack_buf, &ack).is_ok());
    EXPECT_EQ(ack.status, transport::kHelloVersion);
    EXPECT_EQ(ack.version, kOurs);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    EXPECT_TRUE(close_listen(l.value()).is_ok());
  }
}

}  // namespace
}  // namespace trim::net

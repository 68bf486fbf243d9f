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
#include "common/le.h"
#include "tests/handshake_peer.h"
#include "transport/net_api.h"
#include "transport/wire.h"

namespace trim::net {
namespace {

using Clock = testing::HandshakeClock;
using le::get16;
constexpr uint16_t kOurs = transport::kFrameVersion;

// `text` names both versions of a mismatch.
::testing::AssertionResult names_both(const std::string& text, uint16_t theirs) {
  const std::string a = "version " + std::to_string(theirs), b = "version " + std::to_string(kOurs);
  if (text.find(a) != std::string::npos && text.find(b) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not name both '" << a << "' and '" << b << "'";
}

class HandshakeVersion : public testing::LoopbackContextTest {
 protected:
  // Our connect() against a listener of handshake version `handle_version` (its handle says
  // so), which takes our Hello and, when `answer`, answers it with a HelloAck of `ack_status`
  // whose version field is `ack_version` (0: a version-1 build's ack, which has none). Returns
  // connect()'s final status and the Hello the listener got.
  Status connect_to(uint16_t handle_version, bool answer, uint32_t ack_status, uint16_t ack_version,
                    uint8_t hello[transport::kHelloBytes]) {
    testing::FakeListener fake;
    fake.handle_version = handle_version;
    if (answer) {
      fake.answer = [&](const uint8_t*, uint8_t* out) {
        transport::HelloAck ack;
        ack.status = ack_status;
        ack.udp_ip4_be = htonl(INADDR_LOOPBACK);
        ack.udp_port = 9;
        ack.mtu = 1500;
        ack.version = ack_version;
        transport::write_hello_ack(ack, out);
        return true;
      };
    }
    Result<bool> connected = testing::connect_to_fake_listener(ctx_, &fake);
    std::memcpy(hello, fake.hello, transport::kHelloBytes);
    if (!connected) return connected.status();
    return Status(Code::kInternal, "connected despite the version mismatch");
  }
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
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::seconds(5);
    Result<transport::Fd> fd = testing::raw_connect(target, deadline);
    ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
    transport::Hello h;
    h.listen_nonce = target.nonce;
    h.cookie = 7;
    h.mtu = 1500;
    uint8_t out[transport::kHelloBytes];
    transport::write_hello(h, out);
    le::put16(out + 4, theirs);  // the version, then the CRC that ends the Hello
    le::put32(out + transport::kHelloBytes - 4, codec::crc32c(out, transport::kHelloBytes - 4));
    ASSERT_TRUE(transport::write_all(fd->get(), out, sizeof out, 1000).is_ok());
    const Status refused = testing::accept_refusal(l.value(), deadline);
    ASSERT_FALSE(refused.is_ok()) << "accept never answered";
    EXPECT_TRUE(names_both(refused.message(), theirs));
    transport::HelloAck ack;
    const Status got_ack = testing::read_hello_ack(fd->get(), deadline, &ack);
    ASSERT_TRUE(got_ack.is_ok()) << got_ack.to_string();
    EXPECT_EQ(ack.status, transport::kHelloVersion);
    EXPECT_EQ(ack.version, kOurs);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    EXPECT_TRUE(close_listen(l.value()).is_ok());
  }
}

}  // namespace
}  // namespace trim::net

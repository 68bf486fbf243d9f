// Packets sized by the route to the peer, not by the interface (issue 39, item 6): NCCL_TRIM_MTU=auto
// on an interface whose MTU is small still gives a peer on this host loopback's size, because the
// kernel carries that traffic over loopback; an explicit NCCL_TRIM_MTU is never exceeded.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/layout.h"
#include "common/params.h"
#include "tests/net_pair.h"
#include "transport/devices.h"
#include "transport/net_api.h"

namespace trim::transport {
namespace {

uint32_t ip(const char* dotted) { return inet_addr(dotted); }

TEST(ConnectionMtu, AutoFollowsTheRouteExplicitIsACeiling) {
  // auto: the route decides, capped at 9000, above or below the interface's offer
  EXPECT_EQ(connection_mtu(1400, kAuto, 65535), kAutoMtuCapBytes);
  EXPECT_EQ(connection_mtu(9000, kAuto, 1500), 1500);
  // explicit: never above the value, nor above the route
  EXPECT_EQ(connection_mtu(4096, 4096, 65535), 4096);
  EXPECT_EQ(connection_mtu(4096, 4096, 1500), 1500);
  // an unknown or absurd route changes nothing
  EXPECT_EQ(connection_mtu(1400, kAuto, 0), 1400);
  EXPECT_EQ(connection_mtu(1400, kAuto, kMinMtuBytes - 1), 1400);
}

TEST(RouteMtu, LoopbackAndThisHostsOwnAddresses) {
  const int lo = route_mtu(ip("127.0.0.1"), ip("127.0.0.1"));
  EXPECT_GE(lo, kAutoMtuCapBytes) << "loopback's route MTU";
  Result<std::vector<NetIf>> devs = discover_interfaces("", 1);
  ASSERT_TRUE(devs.is_ok()) << devs.status().to_string();
  for (const NetIf& d : *devs) {
    // this host's own address is reached over loopback, whatever the interface's MTU
    EXPECT_EQ(route_mtu(d.ip4_be, d.ip4_be), lo) << d.name << " (MTU " << d.mtu << ")";
  }
}

TEST(RouteMtu, ZeroWhenTheRouteCannotBeAsked) {
  // a source address this host does not have: the probe cannot bind
  EXPECT_EQ(route_mtu(ip("198.18.255.254"), ip("127.0.0.1")), 0);
}

// Two contexts on `dev` with NCCL_TRIM_MTU = `mtu_param`, connected to each other; 0 when the send
// connection's packets are `want_mtu`'s, else 1 with the reason on stderr. For a child process:
// the plugin discovers its devices once per process, so only a fresh one can take `dev`.
int same_host_pair(const std::string& dev, int64_t mtu_param, int want_mtu) {
  Params p = default_params();
  p.ifname = "=" + dev;
  p.mtu = mtu_param;
  net::InitOptions o;
  o.params = &p;
  Result<net::Context*> a = net::init(o);
  Result<net::Context*> b = net::init(o);
  if (!a.is_ok() || !b.is_ok()) {
    std::fprintf(stderr, "init: %s\n", (a.is_ok() ? b.status() : a.status()).to_string().c_str());
    return 1;
  }
  Result<net::DeviceProps> props = net::device_props(0);
  if (!props.is_ok() || props->name != dev) {
    std::fprintf(stderr, "device 0 is not %s\n", dev.c_str());
    return 1;
  }
  net::SendComm* send = nullptr;
  net::RecvComm* recv = nullptr;
  net::ListenComm* listen = nullptr;
  testing::connect_pair(a.value(), b.value(), &send, &recv, &listen);
  Result<uint32_t> packet = send != nullptr ? net::send_packet_bytes(send) : Result<uint32_t>(Status(Code::kInternal, "no connection"));
  const uint32_t want = codec::packet_bytes_for_mtu(static_cast<uint32_t>(want_mtu));
  const bool ok = packet.is_ok() && *packet == want;
  if (!ok) {
    std::fprintf(stderr, "packet bytes %s, want %u (MTU %d)\n",
                 packet.is_ok() ? std::to_string(*packet).c_str() : packet.status().to_string().c_str(), want, want_mtu);
  }
  // Everything closed before the child exits: LeakSanitizer (make asan) fails a child that leaks.
  testing::close_pair(&send, &recv, &listen);
  const bool closed = net::finalize(a.value()).is_ok() && net::finalize(b.value()).is_ok();
  return ok && closed ? 0 : 1;
}

// End to end: an interface whose MTU is below loopback's, the peer on this host.
TEST(RouteMtuDeathTest, SameHostPeerGetsLoopbacksSizeOnASmallMtuInterface) {
  Result<std::vector<NetIf>> devs = discover_interfaces("", 1);
  ASSERT_TRUE(devs.is_ok()) << devs.status().to_string();
  const NetIf* small = nullptr;
  for (const NetIf& d : *devs) {
    if (!d.loopback && d.mtu >= kMinMtuBytes + 100 && d.mtu < kAutoMtuCapBytes) small = &d;
  }
  if (small == nullptr) GTEST_SKIP() << "no up interface with an MTU below " << kAutoMtuCapBytes;
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: devices are discovered once
  SCOPED_TRACE(small->name + " (MTU " + std::to_string(small->mtu) + ")");
  // auto: loopback's route, capped at 9000, not the interface's MTU
  EXPECT_EXIT(std::exit(same_host_pair(small->name, kAuto, kAutoMtuCapBytes)), ::testing::ExitedWithCode(0), "");
  // explicit: exactly what was asked for
  EXPECT_EXIT(std::exit(same_host_pair(small->name, small->mtu - 100, small->mtu - 100)),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace trim::transport

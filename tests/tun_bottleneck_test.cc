// The one bottleneck TCP and our UDP both cross: trim-switch as an IPv4 router over one TUN
// device per rank namespace (scripts/netns_bottleneck.sh). First switch_sim/ipv4.h on
// hand-made packets (no privileges needed), then live runs through real namespaces: trimmed
// and exact trim-harness allreduces, the port's rate and buffer as UDP and TCP see them. The
// live tests skip, saying why, where namespaces or TUN devices cannot be made.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/packet.h"
#include "switch_sim/ipv4.h"
#include "tests/codec_util.h"
#include "tests/ipv4_packet.h"
#include "tests/bottleneck_util.h"
#include "tests/live_util.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace {

using namespace trim;
using namespace trim::live;
using trim::sw::IpClass;
using trim::sw::IpError;
using trim::sw::Ipv4Info;
using trim::testing::ipv4_packet;


// ---- switch_sim/ipv4.h ----

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

std::vector<uint8_t> udp(const std::vector<uint8_t>& payload, uint16_t sport = 40000, uint16_t dport = 50000) {
  std::vector<uint8_t> u(8 + payload.size(), 0);
  u[0] = static_cast<uint8_t>(sport >> 8);
  u[1] = static_cast<uint8_t>(sport);
  u[2] = static_cast<uint8_t>(dport >> 8);
  u[3] = static_cast<uint8_t>(dport);
  u[4] = static_cast<uint8_t>(u.size() >> 8);
  u[5] = static_cast<uint8_t>(u.size());
  u[6] = 0x12;  // a checksum the cut must clear
  u[7] = 0x34;
  std::memcpy(&u[8], payload.data(), payload.size());
  return u;
}

// A real encoded packet (rht, fp32): trimmable, with a trim point inside its payload.
std::vector<uint8_t> our_packet(bool trimmable = true) {
  using namespace trim::codec::testing;
  std::vector<uint8_t> msg = message_bytes(codec::DType::kF32, 1000, 0, 40, false);
  std::vector<uint8_t> p = round_trip(config(codec::Scheme::kRht), codec::DType::kF32, msg, keep_all).packets.at(0);
  if (!trimmable) {
    codec::ParsedPacket pp;
    EXPECT_EQ(codec::parse_packet(p.data(), p.size(), &pp), codec::PacketError::kOk);
    codec::PacketHeader h = pp.hdr;
    h.flags = static_cast<uint8_t>(h.flags & ~codec::kFlagTrimmable);
    codec::write_header(h, p.data());
  }
  return p;
}

TEST(Ipv4, OurDataPacketsAreClassifiedWithTheirTrimPoint) {
  for (bool option : {false, true}) {
    const std::vector<uint8_t> payload = our_packet();
    codec::ParsedPacket pp;
    ASSERT_EQ(codec::parse_packet(payload.data(), payload.size(), &pp), codec::PacketError::kOk);
    ASSERT_TRUE(pp.hdr.trimmable());
    const std::vector<uint8_t> pkt = ipv4_packet(17, udp(payload), 0, option);
    Ipv4Info info;
    ASSERT_EQ(sw::parse_ipv4(pkt.data(), static_cast<uint32_t>(pkt.size()), &info), IpError::kOk);
    const uint32_t ihl = option ? 24 : 20;
    EXPECT_EQ(info.cls, IpClass::kTrimData);
    EXPECT_EQ(info.ihl_bytes, ihl);
    EXPECT_EQ(info.total_len, pkt.size());
    EXPECT_TRUE(info.trimmable);
    EXPECT_EQ(info.header_ip_bytes, ihl + 8 + codec::kHeaderBytes);
    EXPECT_EQ(info.plane0_ip_bytes, ihl + 8 + codec::kHeaderBytes + pp.hdr.trim_bytes);
    EXPECT_EQ(info.dport, 50000);
    const sw::Packet m = sw::model_packet(info);
    EXPECT_EQ(m.bytes, pkt.size());
    EXPECT_TRUE(m.trimmable);
    EXPECT_EQ(m.plane0_bytes, info.plane0_ip_bytes);
    EXPECT_EQ(m.header_bytes, info.header_ip_bytes);
  }
  // Exact class: ours (a header cut is allowed with --trim-exact) but never trimmable.
  const std::vector<uint8_t> exact = ipv4_packet(17, udp(our_packet(false)));
  Ipv4Info info;
  ASSERT_EQ(sw::parse_ipv4(exact.data(), static_cast<uint32_t>(exact.size()), &info), IpError::kOk);
  EXPECT_EQ(info.cls, IpClass::kTrimData);
  EXPECT_FALSE(info.trimmable);
  EXPECT_EQ(sw::model_packet(info).plane0_bytes, 0u);
  EXPECT_GT(sw::model_packet(info).header_bytes, 0u);
}

TEST(Ipv4, OtherTrafficIsNeverCuttable) {
  struct Case {
    std::vector<uint8_t> pkt;
    IpClass want;
  };
  std::vector<uint8_t> ctrl(transport::kCtrlBytes);
  transport::write_ctrl(transport::CtrlPacket{}, ctrl.data());
  std::vector<uint8_t> fake = our_packet();
  fake[20] ^= 0xff;  // starts with 'T' 'R' but its CRC fails: somebody else's UDP
  std::vector<uint8_t> frag = ipv4_packet(17, udp(our_packet()));
  frag[6] = 0x20;  // MF: a first fragment
  {
    const uint16_t c = sw::ipv4_header_checksum(frag.data(), 20);
    frag[10] = static_cast<uint8_t>(c >> 8);
    frag[11] = static_cast<uint8_t>(c);
  }
  const std::vector<Case> cases = {
      {ipv4_packet(17, udp(ctrl)), IpClass::kTrimCtrl},
      {ipv4_packet(17, udp(fake)), IpClass::kUdp},
      {ipv4_packet(17, udp(std::vector<uint8_t>(3000, 0x54))), IpClass::kUdp},
      {ipv4_packet(6, std::vector<uint8_t>(1500, 0)), IpClass::kTcp},
      {ipv4_packet(1, std::vector<uint8_t>(64, 0)), IpClass::kOther},
      {frag, IpClass::kOther},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Ipv4Info info;
    ASSERT_EQ(sw::parse_ipv4(cases[i].pkt.data(), static_cast<uint32_t>(cases[i].pkt.size()), &info), IpError::kOk) << i;
    EXPECT_EQ(info.cls, cases[i].want) << i;
    const sw::Packet m = sw::model_packet(info);
    EXPECT_FALSE(m.trimmable) << i;
    EXPECT_EQ(m.header_bytes, 0u) << i << ": a full queue must drop it, not cut it";
  }
}

TEST(Ipv4, BadInputIsCountedNeverReadPast) {
  const std::vector<uint8_t> good = ipv4_packet(17, udp(our_packet()));
  Ipv4Info info;
  // Every truncation: the packet is shorter than its own total length.
  for (uint32_t len = 0; len < good.size(); ++len) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + len);  // exact-size buffer for ASan
    EXPECT_NE(sw::parse_ipv4(cut.data(), len, &info), IpError::kOk) << len;
  }
  std::vector<uint8_t> v6 = good;
  v6[0] = 0x60;
  EXPECT_EQ(sw::parse_ipv4(v6.data(), static_cast<uint32_t>(v6.size()), &info), IpError::kNotIpv4);
  std::vector<uint8_t> bad_sum = good;
  bad_sum[8] ^= 1;  // TTL changed, checksum not
  EXPECT_EQ(sw::parse_ipv4(bad_sum.data(), static_cast<uint32_t>(bad_sum.size()), &info), IpError::kBadChecksum);
  std::vector<uint8_t> small_ihl = good;
  small_ihl[0] = 0x44;
  EXPECT_EQ(sw::parse_ipv4(small_ihl.data(), static_cast<uint32_t>(small_ihl.size()), &info), IpError::kBadHeader);
  std::vector<uint8_t> udp_len = ipv4_packet(17, udp(our_packet()));
  udp_len[20 + 5] ^= 4;  // UDP length disagrees with the IP total length
  EXPECT_EQ(sw::parse_ipv4(udp_len.data(), static_cast<uint32_t>(udp_len.size()), &info), IpError::kBadHeader);
  // Random bytes: any answer but a crash or a read past the buffer (ASan builds check that).
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(rng() % 200);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    if (!junk.empty()) junk[0] = static_cast<uint8_t>(0x45);
    (void)sw::parse_ipv4(junk.data(), static_cast<uint32_t>(junk.size()), &info);
  }
}

TEST(Ipv4, CutFixesIpAndUdpHeaders) {
  const std::vector<uint8_t> payload = our_packet();
  std::vector<uint8_t> pkt = ipv4_packet(17, udp(payload));
  Ipv4Info info;
  ASSERT_EQ(sw::parse_ipv4(pkt.data(), static_cast<uint32_t>(pkt.size()), &info), IpError::kOk);
  for (uint32_t want : {info.plane0_ip_bytes, info.header_ip_bytes, 10u /* never below the header */}) {
    std::vector<uint8_t> p = pkt;
    const uint32_t len = sw::cut_trim_packet(p.data(), info, want);
    EXPECT_EQ(len, std::max(want, info.header_ip_bytes));
    EXPECT_EQ(be16(&p[2]), len);
    EXPECT_EQ(be16(&p[10]), sw::ipv4_header_checksum(p.data(), 20));
    EXPECT_EQ(be16(&p[24]), len - 20);
    EXPECT_EQ(be16(&p[26]), 0) << "UDP checksum: none after a cut";
    // What the receiving kernel and plugin see: a valid IPv4/UDP packet, ours, marked trimmed.
    Ipv4Info again;
    ASSERT_EQ(sw::parse_ipv4(p.data(), len, &again), IpError::kOk);
    EXPECT_EQ(again.cls, IpClass::kTrimData);
    EXPECT_TRUE(again.already_trimmed);
    EXPECT_FALSE(again.trimmable);
    EXPECT_TRUE(sw::model_packet(again).trimmed) << "a cut packet keeps the header class at a later hop";
  }
}

// A namespace that does not exist: a runtime failure at start (exit 1) naming it, not a hang.
TEST(TunBottleneck, MissingNamespaceFailsAtStart) {
  Child c({bin_dir() + "trim-switch", "--tun-netns", "/nonexistent/trim-ns-a,/nonexistent/trim-ns-b"});
  EXPECT_EQ(c.wait(5), 1);
  EXPECT_NE(c.err().find("/nonexistent/trim-ns-a"), std::string::npos) << c.err();
}

// ---- live, through namespaces (tests/bottleneck_util.h) ----

TEST(TunBottleneck, TrimmedAllreduceCompletesWithTrims) {
  SKIP_UNLESS_NETNS();
  BnRun r = run_harness(kCongested, {"--mode", "allreduce", "--ranks", "4", "--bytes", "2M", "--iters", "3",
                                   "--warmup", "1", "--seed", "3"});
  ASSERT_NE(r.exit_code, 77) << r.context();
  EXPECT_EQ(r.exit_code, 0) << r.context();
  EXPECT_NE(str(r.harness, "verify"), "fail") << r.context();
  EXPECT_NE(str(r.harness, "verify"), "<missing>") << r.context();
  EXPECT_EQ(str(r.harness, "replicas_identical"), "true") << r.context();
  EXPECT_GT(num(r.harness, "trimmed_accepted"), 0) << r.context();
  EXPECT_EQ(str(r.harness, "device"), "trimbn") << "the plugin used the TUN, not loopback";
  EXPECT_GT(num(r.sw, "trim_trimmed"), 0) << r.context();
  EXPECT_GT(num(r.sw, "cross"), 0) << r.context();
  // The plugin's own TCP (its connection setup) crossed the same router, and nothing it saw
  // was unparsable or unroutable.
  EXPECT_GT(num(r.sw, "tcp_forwarded"), 0) << r.context();
  EXPECT_EQ(num(r.sw, "tcp_trimmed"), 0) << r.context();
  EXPECT_EQ(num(r.sw, "bad"), 0) << r.context();
  EXPECT_EQ(num(r.sw, "no_route"), 0) << r.context();
}

TEST(TunBottleneck, ExactAllreduceIsBitExactThroughHeaderCuts) {
  SKIP_UNLESS_NETNS();
  // No profiler: nothing is encoded or trimmable; a full queue cuts our packets to headers
  // (--trim-exact 1, the default), the receivers NACK, the senders resend.
  BnRun r = run_harness(kCongested, {"--mode", "allreduce", "--ranks", "4", "--bytes", "2M", "--iters", "3",
                                   "--warmup", "1", "--seed", "3", "--profiler", "none"});
  ASSERT_NE(r.exit_code, 77) << r.context();
  EXPECT_EQ(r.exit_code, 0) << r.context();
  EXPECT_EQ(str(r.harness, "verify"), "exact") << r.context();
  EXPECT_EQ(str(r.harness, "replicas_identical"), "true") << r.context();
  EXPECT_EQ(num(r.harness, "trimmed_accepted"), 0) << r.context();
  EXPECT_GT(num(r.harness, "trimmed_nacked"), 0) << r.context();
  EXPECT_GT(num(r.sw, "trim_trimmed"), 0) << r.context();
}

// --loss: random loss of every packet (ours, ACKs, the plugin's TCP) on arrival at the router;
// the plugin repairs its share and the result is still bit exact.
TEST(TunBottleneck, RandomLossIsRepairedBitExact) {
  SKIP_UNLESS_NETNS();
  BnRun r = run_harness({"--ranks", "2", "--rate-gbps", "1", "--loss", "1", "--seed", "5"},
                        {"--mode", "allreduce", "--ranks", "2", "--bytes", "2M", "--iters", "3", "--warmup", "1",
                         "--seed", "3", "--profiler", "none"});
  ASSERT_NE(r.exit_code, 77) << r.context();
  EXPECT_EQ(r.exit_code, 0) << r.context();
  EXPECT_EQ(str(r.harness, "verify"), "exact") << r.context();
  EXPECT_GT(num(r.harness, "retransmits"), 0) << r.context();
  EXPECT_GT(num(r.sw, "trim_lost"), 0) << r.context();
  // 1 % of what arrived, within a wide binomial margin (a few thousand packets).
  const double arrived = static_cast<double>(num(r.sw, "datagrams") - num(r.sw, "bad"));
  EXPECT_NEAR(static_cast<double>(num(r.sw, "lost")) / arrived, 0.01, 0.006) << r.context();
}

struct Arrival {
  std::chrono::steady_clock::time_point at;
  size_t bytes;
};

// The receiver's view: what arrived between `from` after the first packet and the last one.
double measured_gbps(const std::vector<Arrival>& a, double skip_s, uint32_t per_packet_overhead) {
  if (a.size() < 2) return 0;
  const auto from = a.front().at + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(skip_s));
  size_t first = 0;
  while (first < a.size() && a[first].at < from) ++first;
  if (first + 1 >= a.size()) return 0;
  double bytes = 0;
  for (size_t i = first + 1; i < a.size(); ++i) bytes += static_cast<double>(a[i].bytes + per_packet_overhead);
  const double s = std::chrono::duration<double>(a.back().at - a[first].at).count();
  return s > 0 ? bytes * 8 / s / 1e9 : 0;
}

constexpr double kRateGbps = 0.2;
// 256 KiB = 10.5 ms at 0.2 Gbit/s: a queue that outlasts the daemon's scheduling gaps on a
// loaded machine (with 64 KiB, 2.6 ms, the measured rate fell 2-7 % below the configured one).
constexpr uint64_t kBuffer = 262144;

// Plain UDP offered at twice the rate for 1.5 s: the receiver gets the configured rate (IP bytes)
// within +3 % / -10 %, the queue fills to the buffer and never beyond, the excess is
// tail-dropped (not trimmed: not ours), and everything the switch forwarded arrived. The
// tolerance is lopsided on purpose: departures follow the model's clock, so the emulator can
// never beat the rate (+3 % is the receiver's timestamp noise), but a daemon descheduled for
// longer than the queue's drain time leaves the link idle, which costs rate on a shared
// 2-core machine.
TEST(TunBottleneck, UdpSeesTheConfiguredRateAndBuffer) {
  SKIP_UNLESS_NETNS();
  HeldBottleneck bn({"--ranks", "2", "--rate-gbps", "0.2", "--buffer-bytes", std::to_string(kBuffer), "--seed", "3"});
  ASSERT_TRUE(bn.ready()) << bn.context();
  transport::Fd tx = socket_in(bn.ns(0), SOCK_DGRAM), rx = socket_in(bn.ns(1), SOCK_DGRAM);
  ASSERT_TRUE(tx.valid() && rx.valid());
  const sockaddr_in to = addr("198.18.0.2", 45000);
  ASSERT_EQ(bind(rx.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0) << std::strerror(errno);
  timeval tv{0, 300000};
  setsockopt(rx.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int big = 8 << 20;
  setsockopt(rx.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  std::vector<Arrival> got;
  got.reserve(20000);
  std::atomic<bool> sending{true};
  std::thread reader([&] {
    std::vector<uint8_t> buf(65536);
    for (;;) {
      const ssize_t n = recv(rx.get(), buf.data(), buf.size(), 0);
      if (n > 0) got.push_back(Arrival{std::chrono::steady_clock::now(), static_cast<size_t>(n)});
      else if (!sending.load()) break;  // timed out after the sender stopped: drained
    }
  });
  constexpr size_t kPayload = 8000;  // + 28 = 8028-byte IP packets, under the 9000 MTU
  const std::vector<uint8_t> payload(kPayload, 0x5a);
  const auto gap = std::chrono::duration<double>((kPayload + 28) * 8 / (2 * kRateGbps * 1e9));
  const auto start = std::chrono::steady_clock::now();
  size_t sent = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
    if (sendto(tx.get(), payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) > 0) ++sent;
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(gap * sent));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the queue drains
  sending = false;
  reader.join();
  const std::string final_line = bn.stop();
  const auto st = flat_json(final_line);
  const auto port = port_of(final_line, "198.18.0.2");
  const double gbps = measured_gbps(got, 0.25, 28);
  RecordProperty("measured_gbps", std::to_string(gbps));
  std::printf("[ udp ] offered %.3f Gbit/s, configured %.3f, measured %.4f Gbit/s; max queue %lld of %llu bytes\n",
              2 * kRateGbps, kRateGbps, gbps, num(port, "max_queue"), static_cast<unsigned long long>(kBuffer));
  EXPECT_LE(gbps, kRateGbps * 1.03) << bn.context();
  EXPECT_GE(gbps, kRateGbps * 0.90) << bn.context();
  EXPECT_LE(num(port, "max_queue"), static_cast<long long>(kBuffer)) << final_line;
  EXPECT_GT(num(port, "max_queue"), static_cast<long long>(kBuffer - 2 * (kPayload + 28))) << "the queue filled: " << final_line;
  EXPECT_GT(num(st, "udp_dropped"), static_cast<long long>(sent / 4)) << "about half the offered load is dropped: " << final_line;
  EXPECT_EQ(num(st, "udp_trimmed"), 0) << final_line;
  EXPECT_EQ(num(st, "udp_forwarded"), static_cast<long long>(got.size())) << "nothing lost after the model: " << final_line;
  EXPECT_EQ(num(st, "udp_received"), static_cast<long long>(sent)) << "nothing lost before it: " << final_line;
}

// TCP through the same port: its goodput stays under the configured rate, its excess is
// tail-dropped by the model (it backs off), and none of it is ever cut. A 64 KiB buffer: with
// 256 KiB the kernel's TCP (small queues, HyStart) never overflows it in 1.5 s.
constexpr uint64_t kTcpBuffer = 65536;
TEST(TunBottleneck, TcpIsPacedAndTailDroppedByTheSamePort) {
  SKIP_UNLESS_NETNS();
  HeldBottleneck bn({"--ranks", "2", "--rate-gbps", "0.2", "--buffer-bytes", std::to_string(kTcpBuffer), "--seed", "3"});
  ASSERT_TRUE(bn.ready()) << bn.context();
  transport::Fd lst = socket_in(bn.ns(1), SOCK_STREAM), tx = socket_in(bn.ns(0), SOCK_STREAM);
  ASSERT_TRUE(lst.valid() && tx.valid());
  const sockaddr_in to = addr("198.18.0.2", 45001);
  const int one = 1;
  setsockopt(lst.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_EQ(bind(lst.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0) << std::strerror(errno);
  ASSERT_EQ(listen(lst.get(), 1), 0);
  ASSERT_EQ(connect(tx.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0) << std::strerror(errno);
  transport::Fd rx(accept(lst.get(), nullptr, nullptr));
  ASSERT_TRUE(rx.valid());
  std::vector<Arrival> got;
  got.reserve(200000);
  std::thread reader([&] {
    std::vector<uint8_t> buf(1 << 16);
    for (;;) {
      const ssize_t n = recv(rx.get(), buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got.push_back(Arrival{std::chrono::steady_clock::now(), static_cast<size_t>(n)});
    }
  });
  timeval tv{0, 200000};
  setsockopt(tx.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const std::vector<uint8_t> chunk(1 << 16, 0x3c);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
    (void)send(tx.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
  }
  shutdown(tx.get(), SHUT_WR);
  reader.join();
  const std::string final_line = bn.stop();
  const auto st = flat_json(final_line);
  const double gbps = measured_gbps(got, 0.25, 0);
  std::printf("[ tcp ] configured %.3f Gbit/s, goodput %.4f Gbit/s; tcp dropped %lld of %lld\n", kRateGbps, gbps,
              num(st, "tcp_dropped"), num(st, "tcp_received"));
  EXPECT_LE(gbps, kRateGbps * 1.02) << final_line;
  EXPECT_GT(gbps, kRateGbps * 0.5) << final_line;
  EXPECT_GT(num(st, "tcp_dropped"), 0) << final_line;
  EXPECT_EQ(num(st, "tcp_trimmed"), 0) << final_line;
  EXPECT_LE(num(port_of(final_line, "198.18.0.2"), "max_queue"), static_cast<long long>(kTcpBuffer)) << final_line;
}

}  // namespace

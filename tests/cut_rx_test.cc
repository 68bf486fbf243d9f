// NCCL_TRIM_RX_CUT (transport/cut_rx.h): the parser of the packet socket's frames on crafted
// frames (cut, whole, truncated, fragments, wrong port or address, bad IHL, bad lengths, random
// garbage), the kernel's BPF filter against the parser (run by the kernel on a socketpair, no
// root needed), the packet socket live on a loopback of a namespace of its own (root), and the
// engine's decision to open it or not, with and without CAP_NET_RAW.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/encoder.h"
#include "common/params.h"
#include "tests/live_util.h"
#include "transport/cut_rx.h"
#include "transport/engine.h"

namespace trim::transport {

// gtest names them in a failure (found by argument-dependent lookup, so outside the unnamed namespace).
void PrintTo(CutCheck c, std::ostream* os) { *os << cut_check_name(c); }

namespace {

constexpr uint16_t kPort = 47001;
const uint32_t kDst = htonl(0xc6120002);  // 198.18.0.2
const uint32_t kSrc = htonl(0xc6120001);

void put16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// An IPv4/UDP frame: `payload` bytes sent, the first `arrived` bytes of the IP packet kept
// (0: all), the headers' lengths as they were before the cut unless a test rewrites them.
struct Spec {
  size_t payload = 400;
  size_t arrived = 0;
  int ihl_words = 5;
  uint8_t version = 4, proto = 17, tos = 11 << 2;
  uint16_t frag = 0x4000;  // DF
  uint32_t dst = kDst;
  uint16_t port = kPort;
  bool fix_ip_len = false, fix_udp_len = false;  // what a well-behaved switch rewrites after a cut
};

std::vector<uint8_t> frame(const Spec& s) {
  const size_t ihl = static_cast<size_t>(s.ihl_words) * 4, full = std::max<size_t>(ihl, 20) + 8 + s.payload;
  std::vector<uint8_t> f(full, 0);
  f[0] = static_cast<uint8_t>((s.version << 4) | s.ihl_words);
  f[1] = s.tos;
  put16(&f[2], static_cast<uint32_t>(full));
  put16(&f[6], s.frag);
  f[8] = 64;
  f[9] = s.proto;
  std::memcpy(&f[12], &kSrc, 4);
  std::memcpy(&f[16], &s.dst, 4);
  const size_t l4 = std::max<size_t>(ihl, 20);
  put16(&f[l4], 40000);
  put16(&f[l4 + 2], s.port);
  put16(&f[l4 + 4], static_cast<uint32_t>(8 + s.payload));
  for (size_t i = l4 + 8; i < full; ++i) f[i] = static_cast<uint8_t>(i * 7);
  const size_t keep = s.arrived != 0 ? s.arrived : full;
  f.resize(keep);
  if (s.fix_ip_len && keep >= 4) put16(&f[2], static_cast<uint32_t>(keep));
  if (s.fix_udp_len && keep >= l4 + 6) put16(&f[l4 + 4], static_cast<uint32_t>(keep - l4));
  return f;
}

// Sends IPv4 frames out of lo through a packet socket, which sends what it is given whatever the
// headers' lengths claim, so they come back in as a switch's would. Made inside the namespace
// whose lo it uses.
class LoFrameSender {
 public:
  LoFrameSender() : fd_(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    to_.sll_family = AF_PACKET;
    to_.sll_protocol = htons(ETH_P_IP);
    to_.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    to_.sll_halen = ETH_ALEN;
  }
  bool valid() const { return fd_.valid(); }
  // What the link layer says the frames carry (ETH_P_IP unless a test lies).
  void set_ethertype(uint16_t ethertype) { to_.sll_protocol = htons(ethertype); }
  ::testing::AssertionResult send(const std::vector<uint8_t>& f) const {
    if (sendto(fd_.get(), f.data(), f.size(), 0, reinterpret_cast<const sockaddr*>(&to_), sizeof to_) ==
        static_cast<ssize_t>(f.size())) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "sendto: " << std::strerror(errno);
  }

 private:
  Fd fd_;
  sockaddr_ll to_{};
};

CutError parse(const std::vector<uint8_t>& f, CutFrame* out = nullptr, uint32_t ip = kDst) {
  CutFrame tmp;
  return parse_cut_frame(f.data(), f.size(), ip, kPort, out != nullptr ? out : &tmp);
}

TEST(CutRxParse, CraftedFrames) {
  // What a switch that keeps the IP total length leaves: 238 of 428 bytes.
  {
    Spec s;
    s.arrived = 238;
    s.fix_udp_len = true;  // the UDP length rewritten, the IP one kept
    const std::vector<uint8_t> f = frame(s);
    CutFrame c;
    ASSERT_EQ(parse(f, &c), CutError::kOk);
    EXPECT_EQ(c.payload, f.data() + 28);
    EXPECT_EQ(c.payload_bytes, 210u);
    EXPECT_EQ(c.tos, 11 << 2);
    EXPECT_EQ(c.from.sin_family, AF_INET);
    EXPECT_EQ(c.from.sin_addr.s_addr, kSrc);
    EXPECT_EQ(ntohs(c.from.sin_port), 40000);
  }
  {  // the UDP length kept, the IP one rewritten
    Spec s;
    s.arrived = 238;
    s.fix_ip_len = true;
    CutFrame c;
    ASSERT_EQ(parse(frame(s), &c), CutError::kOk);
    EXPECT_EQ(c.payload_bytes, 210u);
  }
  {  // both kept
    Spec s;
    s.arrived = 100;
    CutFrame c;
    ASSERT_EQ(parse(frame(s), &c), CutError::kOk);
    EXPECT_EQ(c.payload_bytes, 72u);
  }
  {  // IP options (IHL 6): the UDP header and the payload move by 4 bytes
    Spec s;
    s.ihl_words = 6;
    s.arrived = 238;
    const std::vector<uint8_t> f = frame(s);
    CutFrame c;
    ASSERT_EQ(parse(f, &c), CutError::kOk);
    EXPECT_EQ(c.payload, f.data() + 32);
    EXPECT_EQ(c.payload_bytes, 206u);
  }
  {  // a cut that leaves only the UDP header: an empty payload, ours to judge
    Spec s;
    s.arrived = 28;
    CutFrame c;
    ASSERT_EQ(parse(frame(s), &c), CutError::kOk);
    EXPECT_EQ(c.payload_bytes, 0u);
  }
  struct Case {
    const char* what;
    Spec spec;
    CutError want;
  };
  auto cut = [](Spec s) {
    if (s.arrived == 0) s.arrived = 238;
    return s;
  };
  std::vector<Case> cases = {
      {"whole", Spec{}, CutError::kNotCut},
      {"cut, both lengths fixed", [&] { Spec s = cut({}); s.fix_ip_len = s.fix_udp_len = true; return s; }(), CutError::kNotCut},
      {"cut, IPv6 version", [&] { Spec s = cut({}); s.version = 6; return s; }(), CutError::kNotIpv4},
      {"cut, IHL 4", [&] { Spec s = cut({}); s.ihl_words = 4; return s; }(), CutError::kBadIhl},
      {"cut, IHL 0", [&] { Spec s = cut({}); s.ihl_words = 0; return s; }(), CutError::kBadIhl},
      {"cut, TCP", [&] { Spec s = cut({}); s.proto = 6; return s; }(), CutError::kNotUdp},
      {"cut, first fragment (MF)", [&] { Spec s = cut({}); s.frag = 0x2000; return s; }(), CutError::kFragment},
      {"cut, later fragment", [&] { Spec s = cut({}); s.frag = 0x0010; return s; }(), CutError::kFragment},
      {"cut, another port", [&] { Spec s = cut({}); s.port = kPort + 1; return s; }(), CutError::kNotOurs},
      {"cut, another address", [&] { Spec s = cut({}); s.dst = htonl(0xc6120003); return s; }(), CutError::kNotOurs},
      {"19 bytes", [&] { Spec s; s.arrived = 19; return s; }(), CutError::kShort},
      {"IP header only", [&] { Spec s; s.arrived = 20; return s; }(), CutError::kShort},
      {"27 bytes", [&] { Spec s; s.arrived = 27; return s; }(), CutError::kShort},
      {"IHL 15, 40 bytes", [&] { Spec s; s.ihl_words = 15; s.arrived = 40; return s; }(), CutError::kShort},
  };
  for (const Case& c : cases) EXPECT_EQ(parse(frame(c.spec)), c.want) << c.what;
  EXPECT_EQ(parse(std::vector<uint8_t>{}), CutError::kShort);
  // Lengths below their headers: garbage, never a datagram of ours.
  std::vector<uint8_t> f = frame(cut({}));
  put16(&f[24], 7);
  EXPECT_EQ(parse(f), CutError::kBadLength);
  f = frame(cut({}));
  put16(&f[2], 27);
  EXPECT_EQ(parse(f), CutError::kBadLength);
  // Address 0 (an engine on INADDR_ANY) takes any destination.
  Spec other = cut({});
  other.dst = htonl(0x0a000001);
  EXPECT_EQ(parse(frame(other), nullptr, 0), CutError::kOk);
  // Ethernet padding (a total length below what arrived) is not a cut.
  f = frame(Spec{});
  f.resize(f.size() + 6, 0);
  EXPECT_EQ(parse(f), CutError::kNotCut);
}

// Random frames and random mutations of a cut one, at every length: never a crash, and what is
// accepted lies inside the frame.
TEST(CutRxParse, GarbageNeverCrashes) {
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> base = frame([] { Spec s; s.arrived = 300; return s; }());
  uint64_t ok = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> f = base;
    if (i % 2 == 0) {
      f.resize(rng() % 80);
      for (uint8_t& b : f) b = static_cast<uint8_t>(rng());
      if (f.size() > 0 && i % 4 == 0) f[0] = static_cast<uint8_t>(0x40 | (rng() & 0x0f));
    } else {
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) f[rng() % 32] = static_cast<uint8_t>(rng());
      f.resize(rng() % (f.size() + 1));
    }
    CutFrame c;
    if (parse_cut_frame(f.data(), f.size(), kDst, kPort, &c) == CutError::kOk) {
      ++ok;
      ASSERT_GE(c.payload, f.data() + 28);
      ASSERT_LE(c.payload + c.payload_bytes, f.data() + f.size());
    }
  }
  EXPECT_GT(ok, 0u) << "some mutations stay cut datagrams of ours";
}

// ---- what a codec packet read from the packet socket must prove (verify_cut_packet) ----

// Whole encoded packets of one message: fp32 sign rows (lossy: check points), or raw bytes (exact
// traffic: none). With `udp_checksummed`, flagged as a sender that left the UDP checksum to its
// kernel flags them, which makes parse_packet trust a whole one without its check points.
std::vector<std::vector<uint8_t>> codec_packets(bool raw, bool udp_checksummed) {
  codec::CodecConfig cfg;
  cfg.scheme = codec::Scheme::kSign;
  cfg.packet_bytes = 1500 - codec::kIpv4UdpBytes;
  cfg.row_elems = 1024;
  std::vector<float> x(700);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + 0.01f * static_cast<float>(i));
  Result<codec::Layout> layout = codec::Layout::make(cfg, raw ? codec::DType::kRaw : codec::DType::kF32,
                                                     raw ? codec::Scheme::kNone : codec::Scheme::kSign, 4 * x.size());
  EXPECT_TRUE(layout.is_ok()) << layout.status().to_string();
  if (!layout) return {};
  codec::Encoder enc(cfg);
  Result<std::vector<std::vector<uint8_t>>> pkts =
      enc.encode_message(layout.value(), codec::MessageId{0x5eedf00dcafe1234ull, 3, !raw}, x.data());
  EXPECT_TRUE(pkts.is_ok()) << pkts.status().to_string();
  if (!pkts) return {};
  std::vector<std::vector<uint8_t>> out = std::move(pkts).value();
  for (size_t k = 0; k < out.size(); ++k) {
    if (udp_checksummed) codec::mark_udp_checksummed(out[k].data());
    codec::stamp_transport(out[k].data(), static_cast<uint32_t>(100 + k), kDst, kPort);  // the CRC again
  }
  return out;
}

struct Checked {
  codec::PacketError parsed = codec::PacketError::kBadMagic;
  CutCheck check = CutCheck::kOk;
  bool newly_failed = false;
  codec::ParsedPacket p;
};
Checked check_cut(const std::vector<uint8_t>& pkt, size_t len) {
  Checked c;
  c.parsed = codec::parse_packet(pkt.data(), len, &c.p);
  if (c.parsed == codec::PacketError::kOk) c.check = verify_cut_packet(pkt.data(), len, &c.p, &c.newly_failed);
  return c;
}

TEST(CutRxCheck, CheckPointsVouchForEveryPacketFromTheTap) {
  for (bool flagged : {false, true}) {
    SCOPED_TRACE(flagged ? "flagged UDP_CHECKSUMMED" : "checksum 0");
    const std::vector<std::vector<uint8_t>> pkts = codec_packets(false, flagged);
    ASSERT_FALSE(pkts.empty());
    const std::vector<uint8_t>& pkt = pkts[0];
    codec::ParsedPacket whole;
    ASSERT_EQ(codec::parse_packet(pkt.data(), pkt.size(), &whole), codec::PacketError::kOk);
    const uint32_t trim = whole.hdr.trim_bytes, all = whole.hdr.payload_bytes;
    // Untrimmed: all of it, still exact (the decoder gets every byte).
    Checked c = check_cut(pkt, pkt.size());
    EXPECT_EQ(c.check, CutCheck::kOk);
    EXPECT_EQ(c.p.payload_received, all);
    EXPECT_FALSE(c.p.trimmed);
    // Cut at the trim point (a check point) and between two points: what the points verified.
    c = check_cut(pkt, codec::kHeaderBytes + trim);
    EXPECT_EQ(c.check, CutCheck::kOk);
    EXPECT_EQ(c.p.payload_received, trim);
    EXPECT_TRUE(c.p.trimmed);
    c = check_cut(pkt, codec::kHeaderBytes + trim + 3);
    EXPECT_EQ(c.check, CutCheck::kOk);
    EXPECT_EQ(c.p.payload_received, trim);
    // A forged payload byte inside what arrived: refused, whole or cut. A whole flagged packet
    // is one parse_packet trusts to the kernel's checksum, which a tap's packet never had: the
    // failure is ours to count (newly_failed); in a cut one parse_packet counted it already.
    std::vector<uint8_t> forged = pkt;
    forged[codec::kHeaderBytes + 2] ^= 0x40;
    c = check_cut(forged, forged.size());
    ASSERT_EQ(c.parsed, codec::PacketError::kOk);
    if (flagged) {
      EXPECT_EQ(c.p.payload_received, all) << "parse_packet alone trusts a whole flagged packet";
    }
    EXPECT_EQ(c.check, CutCheck::kBadCheckPoint);
    EXPECT_EQ(c.newly_failed, flagged);
    c = check_cut(forged, codec::kHeaderBytes + trim);
    EXPECT_EQ(c.check, CutCheck::kBadCheckPoint);
    EXPECT_FALSE(c.newly_failed) << "parse_packet verified this one itself";
    // Past the first points: a forged byte in the tails fails the payload's last point.
    forged = pkt;
    forged[pkt.size() - 1] ^= 1;
    EXPECT_EQ(check_cut(forged, forged.size()).check, CutCheck::kBadCheckPoint);
    EXPECT_EQ(check_cut(forged, codec::kHeaderBytes + trim).check, CutCheck::kOk) << "the forged byte was cut off";
  }
  // Raw packets (exact traffic) carry no check points: nothing vouches for them.
  for (bool flagged : {false, true}) {
    const std::vector<std::vector<uint8_t>> raw = codec_packets(true, flagged);
    ASSERT_FALSE(raw.empty());
    for (size_t len : {raw[0].size(), raw[0].size() - 100, size_t{codec::kHeaderBytes}}) {
      const Checked c = check_cut(raw[0], len);
      ASSERT_EQ(c.parsed, codec::PacketError::kOk);
      EXPECT_EQ(c.check, CutCheck::kNoCheckPoints) << len << " bytes";
    }
  }
}

// The kernel runs the filter: on an AF_UNIX datagram socket it sees each message as a frame
// (its length is what arrived), and a message it rejects is dropped silently.
class Filtered {
 public:
  explicit Filtered(uint32_t ip4_be) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return;
    tx_ = Fd(sv[0]);
    rx_ = Fd(sv[1]);
    std::vector<sock_filter> prog = cut_filter(ip4_be, kPort, /*match_protocol=*/false);  // a unix message has none
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    attached_ = setsockopt(rx_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) == 0;
  }
  bool ok() const { return attached_; }
  // Whether the filter passed `f`.
  bool passes(const std::vector<uint8_t>& f) {
    const uint8_t empty = 0;
    if (send(tx_.get(), f.empty() ? &empty : f.data(), f.size(), 0) != static_cast<ssize_t>(f.size())) return false;
    std::vector<uint8_t> buf(f.size() + 16);
    const ssize_t n = recv(rx_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) return false;
    EXPECT_EQ(static_cast<size_t>(n), f.size()) << "a passed frame arrives whole";
    return true;
  }

 private:
  Fd tx_, rx_;
  bool attached_ = false;
};

TEST(CutRxFilter, PassesWhatTheParserAccepts) {
  for (uint32_t ip : {kDst, 0u}) {
    SCOPED_TRACE(ip == 0 ? "any address" : "198.18.0.2");
    Filtered k(ip);
    ASSERT_TRUE(k.ok()) << std::strerror(errno);
    // The crafted cases: the filter agrees with the parser on each.
    std::vector<Spec> specs;
    for (size_t arrived : {0, 19, 20, 27, 28, 29, 100, 238, 427}) {
      for (int variant = 0; variant < 10; ++variant) {
        Spec s;
        s.arrived = arrived;
        switch (variant) {
          case 1: s.fix_ip_len = true; break;
          case 2: s.fix_udp_len = true; break;
          case 3: s.fix_ip_len = s.fix_udp_len = true; break;
          case 4: s.frag = 0x2000; break;
          case 5: s.frag = 0x0001; break;
          case 6: s.port = kPort + 1; break;
          case 7: s.dst = htonl(0xc6120003); break;
          case 8: s.proto = 6; break;
          case 9: s.ihl_words = 4; break;
          default: break;
        }
        specs.push_back(s);
      }
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::vector<uint8_t> f = frame(specs[i]);
      CutFrame c;
      const CutError e = parse_cut_frame(f.data(), f.size(), ip, kPort, &c);
      EXPECT_EQ(k.passes(f), e == CutError::kOk) << "case " << i << " (" << f.size() << " bytes): " << cut_error_name(e);
    }
    // Random mutations: the filter passes everything the parser accepts, and nothing else but
    // frames whose lengths fall below their own headers (the parser's checks alone).
    std::mt19937_64 rng(11);
    const std::vector<uint8_t> base = frame([] { Spec s; s.arrived = 300; return s; }());
    uint64_t passed = 0;
    for (int i = 0; i < 20000; ++i) {
      std::vector<uint8_t> f = base;
      for (int n = 0, m = 1 + static_cast<int>(rng() % 3); n < m; ++n) f[rng() % 32] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) f.resize(rng() % (f.size() + 1));
      CutFrame c;
      const CutError e = parse_cut_frame(f.data(), f.size(), ip, kPort, &c);
      const bool p = k.passes(f);
      passed += p ? 1 : 0;
      if (e == CutError::kOk) {
        ASSERT_TRUE(p) << "mutation " << i;
      } else if (p) {
        ASSERT_TRUE(e == CutError::kBadLength || e == CutError::kShort) << "mutation " << i << ": " << cut_error_name(e);
      }
    }
    EXPECT_GT(passed, 100u);
  }
}

// ---- live: the packet socket on the loopback of a namespace of its own (root) ----

// Runs `body` on a thread in a new network namespace (network namespaces are per thread), its
// loopback up with kDst on it too; false when the namespace could not be made.
bool in_new_netns(const std::function<void()>& body) {
  bool made = false;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) return;
    Fd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (!s.valid() || ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) return;
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) return;
    // Our address as an alias of lo: a frame injected there with a 127/8 source would be a
    // martian (it has no route attached yet), one from 198.18.0.1 is not.
    ifreq alias{};
    std::strncpy(alias.ifr_name, "lo:1", IFNAMSIZ - 1);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = kDst;
    std::memcpy(&alias.ifr_addr, &a, sizeof a);
    if (ioctl(s.get(), SIOCSIFADDR, &alias) != 0) return;
    made = true;
    body();
  });
  t.join();
  return made;
}

TEST(CutRxLive, SeesOnlyTheCutDatagramsTheKernelDrops) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: a namespace of our own and a packet socket need CAP_SYS_ADMIN and CAP_NET_RAW";
  const uint32_t ours = kDst;  // an address of lo
  const bool made = in_new_netns([&] {
    uint16_t port = 0;
    Result<Fd> udp = sock::open_udp(ours, &port);
    ASSERT_TRUE(udp.is_ok()) << udp.status().to_string();
    Result<CutSocket> cut = CutSocket::open(ours, port);
    ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
    EXPECT_EQ(cut.value().ifname(), "lo");
    LoFrameSender out;
    ASSERT_TRUE(out.valid()) << std::strerror(errno);
    auto send_frame = [&](Spec s, bool cut_ip, bool cut_udp) {
      s.dst = ours;
      s.port = port;
      s.arrived = cut_ip || cut_udp ? 238 : 0;
      s.fix_ip_len = !cut_ip;
      s.fix_udp_len = !cut_udp;
      std::vector<uint8_t> f = frame(s);
      // A valid IPv4 header checksum, so only the lengths decide what the kernel takes.
      f[10] = f[11] = 0;
      uint32_t sum = 0;
      const size_t ihl = static_cast<size_t>(f[0] & 0x0f) * 4;
      for (size_t i = 0; i < ihl; i += 2) sum += static_cast<uint32_t>((f[i] << 8) | f[i + 1]);
      while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
      put16(&f[10], ~sum & 0xffff);
      std::memset(&f[ihl + 6], 0, 2);  // no UDP checksum
      ASSERT_TRUE(out.send(f));
    };
    Spec plain;
    send_frame(plain, false, false);  // whole: the UDP socket's
    send_frame(plain, true, false);   // the IP length kept: ours
    send_frame(plain, false, true);   // the UDP length kept: ours
    send_frame(plain, true, true);    // both kept: ours
    Spec frag = plain;
    frag.frag = 0x2000;
    send_frame(frag, true, false);  // a first fragment: the kernel's to reassemble, never ours
    Spec other = plain;
    other.proto = 6;
    send_frame(other, true, false);
    out.set_ethertype(ETH_P_ARP);  // a cut IPv4 datagram of ours, but the link says ARP
    send_frame(plain, true, false);
    out.set_ethertype(ETH_P_IP);
    // Last, one of each kind of another size: once both have arrived, the kernel has handled the
    // frames sent before them (the loopback delivers in order), so nothing is waited on by time.
    Spec marker;
    marker.payload = 300;
    send_frame(marker, false, false);  // whole: 300 bytes on the UDP socket
    send_frame(marker, true, false);   // cut, the IP length kept: 328, where the others say 428
    std::vector<size_t> got_cut, got_udp;
    std::vector<uint8_t> buf(65536);
    auto has = [](const std::vector<size_t>& v, size_t n) { return std::find(v.begin(), v.end(), n) != v.end(); };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool seen_cut_marker = false;
    for (;;) {
      for (ssize_t n; (n = recv(cut.value().fd(), buf.data(), buf.size(), MSG_DONTWAIT)) >= 0;) {
        CutFrame c;
        ASSERT_EQ(parse_cut_frame(buf.data(), static_cast<size_t>(n), ours, port, &c), CutError::kOk);
        // The marker's cut is told from the others by the IP total length it kept, not its size.
        const bool is_marker = (buf[2] << 8 | buf[3]) == 20 + 8 + 300;
        seen_cut_marker = seen_cut_marker || is_marker;
        if (!is_marker) got_cut.push_back(c.payload_bytes);
      }
      for (ssize_t n; (n = recv(udp.value().get(), buf.data(), buf.size(), MSG_DONTWAIT)) >= 0;) {
        got_udp.push_back(static_cast<size_t>(n));
      }
      if ((seen_cut_marker && has(got_udp, 300)) || std::chrono::steady_clock::now() > deadline) break;
      pollfd fds[2] = {{cut.value().fd(), POLLIN, 0}, {udp.value().get(), POLLIN, 0}};
      (void)poll(fds, 2, 100);  // wakes as soon as either has a frame
    }
    ASSERT_TRUE(seen_cut_marker) << "the marker's cut never reached the packet socket (10 s)";
    ASSERT_TRUE(has(got_udp, 300)) << "the whole marker never reached the UDP socket (10 s)";
    EXPECT_EQ(got_cut, (std::vector<size_t>{210, 210, 210})) << "the three cuts, once each";
    EXPECT_EQ(got_udp, (std::vector<size_t>{400, 300})) << "the whole ones only: the kernel dropped the cuts";
    EXPECT_EQ(cut.value().take_drops(), 0u);
  });
  if (!made) GTEST_SKIP() << "cannot make a network namespace here: " << std::strerror(errno);
}

// ---- the engine: when it opens the packet socket ----

EngineConfig config_of(const char* rx_cut, const char* fabric_bytes) {
  Result<Params> p = load_params([&](const char* name) -> const char* {
    if (std::strcmp(name, "NCCL_TRIM_RX_CUT") == 0) return rx_cut;
    if (std::strcmp(name, "NCCL_TRIM_FABRIC_TRIM_BYTES") == 0) return fabric_bytes;
    return nullptr;
  });
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  Status err;
  EngineConfig c = EngineConfig::from_params(p.value(), &err);
  EXPECT_TRUE(err.is_ok());
  return c;
}

TEST(CutRxEngine, KnobDecidesAndDefaultsAreOff) {
  using R = EngineConfig::RxCut;
  EXPECT_EQ(config_of(nullptr, nullptr).rx_cut, R::kOff) << "the default without a trimming fabric";
  EXPECT_NE(config_of(nullptr, nullptr).rx_cut_off_why.find("NCCL_TRIM_FABRIC_TRIM_BYTES"), std::string::npos);
  EXPECT_EQ(config_of("auto", "256").rx_cut, R::kTry);
  EXPECT_EQ(config_of("off", "256").rx_cut, R::kOff);
  EXPECT_EQ(config_of("packet", nullptr).rx_cut, R::kRequired);
  Result<Params> bad = load_params([](const char* name) -> const char* {
    return std::strcmp(name, "NCCL_TRIM_RX_CUT") == 0 ? "raw" : nullptr;
  });
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("NCCL_TRIM_RX_CUT"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("auto|off|packet"), std::string::npos) << bad.status().message();
}

// Drops CAP_NET_RAW from the calling thread (capabilities are per thread): it then cannot open
// a packet socket, as a process that is not root cannot.
bool drop_net_raw() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_NET_RAW / 32].effective &= ~(1u << (CAP_NET_RAW % 32));
  data[CAP_NET_RAW / 32].permitted &= ~(1u << (CAP_NET_RAW % 32));
  return syscall(SYS_capset, &hdr, data) == 0;
}

TEST(CutRxEngine, WithoutCapNetRawAutoIsOffAndPacketIsAClearError) {
  const uint32_t lo = htonl(INADDR_LOOPBACK);
  std::thread t([&] {
    ASSERT_TRUE(drop_net_raw()) << std::strerror(errno);
    ASSERT_LT(socket(AF_PACKET, SOCK_DGRAM, 0), 0) << "CAP_NET_RAW is gone";
    {
      Engine e("lo", lo, config_of("auto", "256"));
      ASSERT_TRUE(e.start().is_ok()) << "auto runs without it";
      EXPECT_FALSE(e.receives_cuts());
    }
    Engine e("lo", lo, config_of("packet", nullptr));
    const Status st = e.start();
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.code(), Code::kBadConfig);
    for (const char* word : {"NCCL_TRIM_RX_CUT=packet", "CAP_NET_RAW", "auto or off"}) {
      EXPECT_NE(st.message().find(word), std::string::npos) << st.message();
    }
  });
  t.join();
  Engine off("lo", lo, config_of(nullptr, nullptr));
  ASSERT_TRUE(off.start().is_ok());
  EXPECT_FALSE(off.receives_cuts()) << "the default, anywhere";
  if (geteuid() != 0) GTEST_SKIP() << "not root: the packet socket itself is tried by CutRxLive and the fabric tests";
  Engine on("lo", lo, config_of("packet", nullptr));
  ASSERT_TRUE(on.start().is_ok());
  EXPECT_TRUE(on.receives_cuts());
}

// The engine itself, live: packets forged onto the loopback of a namespace of its own, each an
// IPv4/UDP frame whose IP total length still claims the bytes a switch cut (so the kernel drops
// it and only the packet socket reads it). Every one must prove itself by its check points: a
// packet whose points fail (a whole one flagged UDP_CHECKSUMMED included, which parse_packet
// alone would take on the kernel's word) and one without points (raw) are counted as
// cut_rejected in the stats JSON and dropped before any connection sees them; a valid cut one
// goes on to the connection lookup (no connection has its cookie here: unknown_conn).
TEST(CutRxLive, EngineRefusesTapPacketsTheirCheckPointsDoNotVouchFor) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: a namespace of our own and a packet socket need CAP_SYS_ADMIN and CAP_NET_RAW";
  const std::vector<std::vector<uint8_t>> lossy = codec_packets(false, true), raw = codec_packets(true, false);
  ASSERT_FALSE(lossy.empty());
  ASSERT_FALSE(raw.empty());
  const bool made = in_new_netns([&] {
    EngineConfig cfg = config_of("packet", nullptr);
    Engine engine("lo", kDst, cfg);
    const Status st = engine.start();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_TRUE(engine.receives_cuts());
    const LoFrameSender out;
    ASSERT_TRUE(out.valid()) << std::strerror(errno);
    // `pkt` as a UDP payload of which `arrived` bytes came, under IP and UDP lengths that claim
    // more (the whole packet's, or 4 bytes more when it all arrived).
    auto send_cut = [&](const std::vector<uint8_t>& pkt, size_t arrived) {
      const size_t claimed = std::max(pkt.size(), arrived + 4);
      std::vector<uint8_t> f(28 + pkt.size(), 0);
      f[0] = 0x45;
      put16(&f[2], static_cast<uint32_t>(28 + claimed));
      put16(&f[6], 0x4000);
      f[8] = 64;
      f[9] = 17;
      std::memcpy(&f[12], &kSrc, 4);
      std::memcpy(&f[16], &kDst, 4);
      put16(&f[20], 40000);
      put16(&f[22], engine.udp_port());
      put16(&f[24], static_cast<uint32_t>(8 + claimed));
      std::memcpy(&f[28], pkt.data(), pkt.size());
      f.resize(28 + arrived);
      ASSERT_TRUE(out.send(f));
    };
    struct Counts {
      long long cut_received, cut_rejected, unknown_conn, malformed, bad_payload_check;
    };
    auto counts = [] {
      const std::map<std::string, std::string> j = live::flat_json(global_stats().to_json());
      auto n = [&j](const char* k) {
        auto it = j.find(k);
        return it == j.end() ? -1ll : std::strtoll(it->second.c_str(), nullptr, 10);
      };
      return Counts{n("cut_received"), n("cut_rejected"), n("unknown_conn"), n("malformed"), n("bad_payload_check")};
    };
    // Sends one packet and waits until the engine has judged it: one of the counters that end
    // its way (refused, no such connection, malformed) has moved. Returns the counters' deltas.
    auto judge = [&](const std::vector<uint8_t>& pkt, size_t arrived) {
      const Counts before = counts();
      send_cut(pkt, arrived);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      Counts now = before;
      while (std::chrono::steady_clock::now() < deadline) {
        now = counts();
        if (now.cut_rejected + now.unknown_conn + now.malformed !=
            before.cut_rejected + before.unknown_conn + before.malformed) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // a poll of the condition, not a wait by time
      }
      return Counts{now.cut_received - before.cut_received, now.cut_rejected - before.cut_rejected,
                    now.unknown_conn - before.unknown_conn, now.malformed - before.malformed,
                    now.bad_payload_check - before.bad_payload_check};
    };
    const std::vector<uint8_t>& pkt = lossy[0];
    codec::ParsedPacket whole;
    ASSERT_EQ(codec::parse_packet(pkt.data(), pkt.size(), &whole), codec::PacketError::kOk);
    const size_t trim = whole.hdr.trim_bytes;
    // A valid cut: read, verified, on to the connection lookup.
    Counts d = judge(pkt, codec::kHeaderBytes + trim);
    EXPECT_EQ(d.cut_received, 1);
    EXPECT_EQ(d.unknown_conn, 1) << "a verified cut goes on";
    EXPECT_EQ(d.cut_rejected, 0);
    // Whole and flagged UDP_CHECKSUMMED, a payload byte forged: no kernel checked that checksum.
    std::vector<uint8_t> forged = pkt;
    forged[pkt.size() - 5] ^= 0x10;
    d = judge(forged, forged.size());
    EXPECT_EQ(d.cut_rejected, 1) << "a whole tap packet whose last check point fails";
    EXPECT_EQ(d.bad_payload_check, 1);
    EXPECT_EQ(d.unknown_conn, 0) << "dropped before the connection lookup";
    // Cut, a byte forged inside what arrived.
    forged = pkt;
    forged[codec::kHeaderBytes + 1] ^= 0x01;
    d = judge(forged, codec::kHeaderBytes + trim);
    EXPECT_EQ(d.cut_rejected, 1) << "a cut tap packet whose check point fails";
    EXPECT_EQ(d.bad_payload_check, 1);
    EXPECT_EQ(d.unknown_conn, 0);
    // Raw (no check points), cut and whole.
    for (size_t arrived : {raw[0].size() - 40, raw[0].size()}) {
      d = judge(raw[0], arrived);
      EXPECT_EQ(d.cut_rejected, 1) << "a raw tap packet of " << arrived << " bytes";
      EXPECT_EQ(d.unknown_conn, 0);
      EXPECT_EQ(d.bad_payload_check, 0);
    }
    engine.stop();
  });
  if (!made) GTEST_SKIP() << "cannot make a network namespace here: " << std::strerror(errno);
}

}  // namespace
}  // namespace trim::transport

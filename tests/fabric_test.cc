// Trimming switches that exist (issue 26, docs/DEPLOYMENT.md): a switch that trims by DSCP to a
// fixed size and never reads our header. First trim-switch's fabric model on hand-made packets
// (switch_sim/fabric.h) and the codec under its cuts, then the plugin through a forwarder in this
// process that marks and cuts as such a switch does (the DSCP per class, checksum 0, trims seen
// from the packet alone), then live: trim-switch --fabric 1 as UDP daemon and as TUN router
// between network namespaces, against the native mode at the same surviving bytes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "codec/packet.h"
#include "switch_sim/fabric.h"
#include "switch_sim/ipv4.h"
#include "switch_sim/port.h"
#include "tests/bottleneck_util.h"
#include "tests/codec_util.h"
#include "tests/ipv4_packet.h"
#include "tests/live_util.h"
#include "transport/socket.h"

namespace {

// recvmsg into buf with the IP_TOS control message that IP_RECVTOS asks the kernel for; *tos
// stays -1 when the datagram came without one.
ssize_t recv_with_tos(int fd, std::vector<uint8_t>& buf, int flags, int* tos) {
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(sizeof(int))];
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = cbuf;
  h.msg_controllen = sizeof cbuf;
  const ssize_t n = recvmsg(fd, &h, flags);
  if (n < 0) return n;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(&h, cm)) {
    if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS) *tos = *CMSG_DATA(cm);
  }
  return n;
}

using namespace trim;
using namespace trim::live;
using sw::FabricConfig;
using sw::IpClass;
using sw::IpError;
using sw::Ipv4Info;
using trim::testing::ipv4_packet;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
void put_be16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// A UDP packet with a valid checksum around `payload`.
std::vector<uint8_t> udp_ip(const std::vector<uint8_t>& payload, uint8_t tos) {
  std::vector<uint8_t> u(8 + payload.size(), 0);
  put_be16(&u[0], 40000);
  put_be16(&u[2], 50000);
  put_be16(&u[4], static_cast<uint32_t>(u.size()));
  std::memcpy(&u[8], payload.data(), payload.size());
  std::vector<uint8_t> p = ipv4_packet(17, u, tos);
  put_be16(&p[26], sw::udp_checksum(p.data(), 20, static_cast<uint32_t>(u.size())));
  return p;
}

// One encoded packet of ours (rht, fp32), trimmable or exact by its own header.
std::vector<uint8_t> our_packet(bool trimmable) {
  using namespace trim::codec::testing;
  codec::MessageId id = test_id();
  id.trimmable = trimmable;
  std::vector<uint8_t> msg = message_bytes(codec::DType::kF32, 2000, 0, 40, false);
  return round_trip(config(codec::Scheme::kRht, 9000), codec::DType::kF32, msg, keep_all, id).packets.at(0);
}

FabricConfig fabric(uint32_t size = 256) {
  FabricConfig f;
  f.on = true;
  f.trimmable.set(18);
  f.trimmed_dscp = 11;
  f.trim_size = size;
  return f;
}

// ---- the fabric model (switch_sim/fabric.h) ----

// A packet is trimmable by its DSCP alone: our own TRIMMABLE flag, its protocol and its payload
// are nothing to the switch. The trimmed DSCP puts a packet in the trimmed class at once.
TEST(FabricModel, TrimmableByDscpAloneWhateverItCarries) {
  const FabricConfig f = fabric();
  struct Case {
    std::vector<uint8_t> pkt;
    bool trimmable, trimmed;
  };
  const std::vector<Case> cases = {
      {udp_ip(our_packet(true), 18 << 2), true, false},
      {udp_ip(our_packet(true), 0), false, false},          // our TRIMMABLE flag alone: no
      {udp_ip(our_packet(false), 18 << 2), true, false},    // our exact class, marked trimmable: yes
      {udp_ip(std::vector<uint8_t>(900, 7), (18 << 2) | 1), true, false},  // anyone's UDP, ECN set
      {ipv4_packet(6, std::vector<uint8_t>(900, 0), 18 << 2), true, false},  // TCP too
      {ipv4_packet(6, std::vector<uint8_t>(900, 0), 0), false, false},
      {udp_ip(our_packet(true), 11 << 2), false, true},     // trimmed upstream
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Ipv4Info info;
    ASSERT_EQ(sw::parse_ipv4(cases[i].pkt.data(), static_cast<uint32_t>(cases[i].pkt.size()), &info, false),
              IpError::kOk) << i;
    EXPECT_NE(info.cls, IpClass::kTrimData) << i << ": the fabric mode never reads our header";
    const sw::Packet p = sw::fabric_packet(info, f);
    EXPECT_EQ(p.trimmable, cases[i].trimmable) << i;
    EXPECT_EQ(p.trimmed, cases[i].trimmed) << i;
    EXPECT_EQ(p.bytes, cases[i].pkt.size()) << i;
    EXPECT_EQ(p.plane0_bytes, 0u) << i;
    EXPECT_EQ(p.header_bytes, 0u) << i << ": no header cut of an exact class (a real switch drops it)";
  }
}

// What the cut leaves of the IP and UDP headers, for every rewrite policy: the DSCP becomes the
// trimmed one (ECN kept) and the IPv4 checksum is always valid; the lengths and the UDP checksum
// as configured. Only a packet whose lengths both describe it (and whose checksum is 0 or right)
// is one a receiving kernel takes.
TEST(FabricModel, RemarkCutsAndRewritesAsConfigured) {
  const std::vector<uint8_t> orig = udp_ip(our_packet(true), (18 << 2) | 2);
  Ipv4Info info;
  ASSERT_EQ(sw::parse_ipv4(orig.data(), static_cast<uint32_t>(orig.size()), &info, false), IpError::kOk);
  const uint16_t orig_csum = be16(&orig[26]);
  ASSERT_NE(orig_csum, 0);
  for (bool fix_ip : {true, false}) {
    for (auto ulen : {FabricConfig::UdpLen::kRewrite, FabricConfig::UdpLen::kKeep}) {
      for (auto csum : {FabricConfig::UdpCsum::kZero, FabricConfig::UdpCsum::kKeep, FabricConfig::UdpCsum::kRecompute}) {
        FabricConfig f = fabric(256);
        f.fix_ip = fix_ip;
        f.udp_len = ulen;
        f.udp_csum = csum;
        SCOPED_TRACE(f.rewrite_text());
        std::vector<uint8_t> p = orig;
        const uint32_t keep = f.ip_keep_bytes();
        ASSERT_EQ(keep, 238u);
        const uint32_t len = sw::fabric_remark(p.data(), info, keep, f);
        EXPECT_EQ(len, keep);
        EXPECT_EQ(p[1], (11 << 2) | 2);
        EXPECT_EQ(be16(&p[10]), sw::ipv4_header_checksum(p.data(), 20));
        EXPECT_EQ(be16(&p[2]), fix_ip ? keep : orig.size());
        const bool udp_rewritten = ulen == FabricConfig::UdpLen::kRewrite;
        EXPECT_EQ(be16(&p[24]), udp_rewritten ? keep - 20 : orig.size() - 20);
        if (csum == FabricConfig::UdpCsum::kZero) {
          EXPECT_EQ(be16(&p[26]), 0);
        } else if (csum == FabricConfig::UdpCsum::kKeep) {
          EXPECT_EQ(be16(&p[26]), orig_csum);
        }
        if (csum == FabricConfig::UdpCsum::kRecompute && udp_rewritten) {
          EXPECT_EQ(be16(&p[26]), sw::udp_checksum(p.data(), 20, keep - 20));
        }
        // The receiving kernel's checks, as the router's own parser makes them.
        Ipv4Info again;
        const IpError e = sw::parse_ipv4(p.data(), len, &again, false);
        if (!fix_ip) {
          EXPECT_EQ(e, IpError::kShort) << "the IP length claims bytes that are gone";
        } else if (!udp_rewritten) {
          EXPECT_EQ(e, IpError::kBadHeader) << "the UDP length claims bytes that are gone";
        } else {
          EXPECT_EQ(e, IpError::kOk);
        }
        // Our payload is whatever is left: the header and 130 bytes of plane 0, untouched.
        EXPECT_TRUE(std::equal(p.begin() + 28, p.begin() + len, orig.begin() + 28));
      }
    }
  }
  // No longer than the trim size: remarked and queued whole, nothing cut or rewritten but the DSCP.
  const std::vector<uint8_t> small = udp_ip(std::vector<uint8_t>(100, 3), 18 << 2);
  std::vector<uint8_t> p = small;
  ASSERT_EQ(sw::parse_ipv4(p.data(), static_cast<uint32_t>(p.size()), &info, false), IpError::kOk);
  EXPECT_EQ(sw::fabric_remark(p.data(), info, fabric().ip_keep_bytes(), fabric()), small.size());
  EXPECT_EQ(p[1], 11 << 2);
  EXPECT_EQ(be16(&p[2]), small.size());
  EXPECT_EQ(be16(&p[26]), be16(&small[26]));
  EXPECT_EQ(be16(&p[10]), sw::ipv4_header_checksum(p.data(), 20));
}

// The plugin's packets under a fabric cut decode exactly as under our native switch's cut of the
// same bytes, at every trim size the shipping switches use: a cut inside our header (64 B) is a
// packet the receiver cannot use at all (a loss); beyond it, what survives is decoded as far as
// the check points vouch for it, and more surviving bytes never make the result worse. With
// NCCL_TRIM_FABRIC_TRIM_BYTES set, every head survives the cut.
TEST(FabricModel, OurCutsDecodeAsTheNativeCutOfTheSameBytes) {
  using namespace trim::codec::testing;
  const std::vector<uint8_t> msg = message_bytes(codec::DType::kF32, 40000, 0, 61, false);
  const std::vector<float> x = as_floats(msg);
  std::map<std::pair<bool, uint32_t>, double> nmse_of;
  std::map<std::pair<bool, uint32_t>, uint64_t> missing_of;
  for (bool sized : {false, true}) {
    for (uint32_t size : {64u, 128u, 206u, 256u, 392u, 1024u}) {
      SCOPED_TRACE(std::to_string(size) + (sized ? " B, packets sized for it" : " B"));
      codec::CodecConfig cfg = config(codec::Scheme::kRht, 9000);
      if (sized) cfg.fabric_keep_bytes = codec::fabric_keep_bytes(size);
      const FabricConfig f = fabric(size);
      uint64_t header_cuts = 0;
      // Every packet trimmed, by the fabric (IP level, our header unread) and by the native
      // switch's rule (the same IP size, never below our header).
      Decoded nat = round_trip(cfg, codec::DType::kF32, msg, [&](size_t, const codec::ParsedPacket& pp) {
        const int64_t keep = static_cast<int64_t>(f.ip_keep_bytes()) - 28;
        return std::max<int64_t>(keep, codec::kHeaderBytes) - codec::kHeaderBytes + 0 * pp.hdr.elem_count;
      });
      codec::Layout layout = codec::Layout::make(cfg, codec::DType::kF32, codec::Scheme::kRht, msg.size()).value();
      codec::Decoder dec(cfg);
      std::vector<uint8_t> out(msg.size());
      ASSERT_TRUE(dec.begin(layout, test_id(), out.data()).is_ok());
      for (const std::vector<uint8_t>& pkt : nat.packets) {
        std::vector<uint8_t> ip = udp_ip(pkt, 18 << 2);
        Ipv4Info info;
        ASSERT_EQ(sw::parse_ipv4(ip.data(), static_cast<uint32_t>(ip.size()), &info, false), IpError::kOk);
        ASSERT_TRUE(sw::fabric_packet(info, f).trimmable);
        const uint32_t len = sw::fabric_remark(ip.data(), info, f.ip_keep_bytes(), f);
        codec::ParsedPacket p;
        const codec::PacketError e = codec::parse_packet(ip.data() + 28, len - 28, &p);
        if (e == codec::PacketError::kTruncatedHeader) {
          ++header_cuts;
          continue;
        }
        ASSERT_EQ(e, codec::PacketError::kOk);
        ASSERT_EQ(dec.add(p), codec::PacketError::kOk);
      }
      const codec::DecodeStats st = dec.finish();
      if (size == 64) {
        EXPECT_EQ(header_cuts, nat.packets.size()) << "64 B leave 18 bytes of our 80-byte header: all lost";
        continue;
      }
      EXPECT_EQ(header_cuts, 0u);
      EXPECT_EQ(out, nat.bytes) << "the same surviving bytes decode to the same result";
      const double nmse = sq_err(as_floats(out), x) / sq_norm(x);
      EXPECT_LE(nmse, 1.0 + 1e-9);
      nmse_of[std::make_pair(sized, size)] = nmse;
      missing_of[std::make_pair(sized, size)] = st.missing;
    }
  }
  // 128 B keep 2 bytes past our header: below the first check point, nothing is used.
  EXPECT_EQ(missing_of[std::make_pair(false, 128)], x.size());
  // Packets sized for the trim keep every head; MTU-sized ones lose heads at 206..392 B (their
  // heads are 269 bytes), and at 1024 B keep them all.
  for (uint32_t size : {206u, 256u, 392u}) {
    EXPECT_GT(missing_of[std::make_pair(false, size)], 0u) << size;
    EXPECT_LT(nmse_of[std::make_pair(true, size)], nmse_of[std::make_pair(false, size)]) << size;
  }
  for (uint32_t size : {206u, 256u, 392u, 1024u}) {
    EXPECT_EQ(missing_of[std::make_pair(true, size)], 0u) << size << ": every head survives";
    EXPECT_LT(nmse_of[std::make_pair(true, size)], 0.6) << size;  // ~ pi/2 - 1 for heads only, less past them
  }
  EXPECT_EQ(missing_of[std::make_pair(false, 1024)], 0u);
  // The check point at the planned cut: at 1024 B the bytes past the heads (16-bit prefixes)
  // are verified and used, where MTU-sized packets have no point between the heads' end and the
  // middle of their tails.
  EXPECT_LT(nmse_of[std::make_pair(true, 1024)], 0.9 * nmse_of[std::make_pair(false, 1024)]);
}

// The trimmed class's share of the link (DWRR by bytes): with both classes backlogged, a quarter
// of the bytes served are trimmed packets, as UEC suggests; with a half, half.
TEST(FabricModel, TrimmedClassGetsItsShareOfTheLink) {
  for (double share : {0.25, 0.5}) {
    sw::PortConfig cfg;
    cfg.rate_gbps = 10;
    cfg.prop_delay_ns = 0;
    cfg.data_queue_bytes = 0;  // no caps: both queues stay backlogged
    cfg.header_queue_bytes = uint64_t{1} << 40;
    cfg.priority = sw::Priority::kDwrr;
    cfg.dwrr_header_share = share;
    sw::EgressPort port(cfg);
    // Trimmed packets (as from an upstream trim: the trimmed class at once) and data, both far
    // more than 10 ms of the link serves.
    for (int i = 0; i < 40000; ++i) {
      sw::Packet t;
      t.bytes = 238;
      t.trimmed = true;
      (void)port.enqueue(t, 0);
      if (i % 8 == 0) {
        sw::Packet d;
        d.bytes = 9000;
        (void)port.enqueue(d, 0);
      }
    }
    port.advance(10'000'000);  // 12.5 MB served
    uint64_t header = 0, total = 0;
    for (const sw::Departure& d : port.departed()) {
      total += d.packet.bytes;
      header += d.packet.header_class ? d.packet.bytes : 0;
    }
    ASSERT_GT(port.data_queue_packets(), 0u);
    ASSERT_GT(port.header_queue_bytes(), 0u);
    EXPECT_NEAR(static_cast<double>(header) / static_cast<double>(total), share, 0.01) << total;
  }
}

// ---- the plugin through a forwarder that marks and cuts as a fabric switch does ----

// A UDP "switch" in this process (NCCL_TRIM_SWITCH points the ranks' data at it): it records the
// DSCP each data packet arrived with, by the class its header says, and forwards it to the
// destination the header carries. Some trimmable packets it cuts and remarks as a fabric switch
// would (the trimmed DSCP, through an IP_TOS control message), some it only remarks, one it cuts
// inside our header; exact ones pass as they came. With root, a raw socket sees the UDP
// checksums on the way in and the DSCP of the ranks' control packets (ACKs go direct).
class MarkingForwarder {
 public:
  MarkingForwarder() {
    sock_ = transport::Fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const sockaddr_in any = addr("127.0.0.1", 0);
    const int on = 1, big = 8 << 20;
    setsockopt(sock_.get(), IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
    setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (bind(sock_.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0) return;
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    getsockname(sock_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.sin_port);
    if (geteuid() == 0) raw_ = transport::Fd(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP));
    thread_ = std::thread([this] { run(); });
  }
  ~MarkingForwarder() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::string addr_text() const { return "127.0.0.1:" + std::to_string(port_); }
  bool has_raw() const { return raw_.valid(); }

  // Filled by the forwarder thread; read after stop().
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::map<int, uint64_t> tos_trimmable, tos_exact;  // TOS byte -> packets
  // Control packets seen on the host (raw socket): (source port, TOS) -> packets; the ranks'
  // are those from an engine the data went to (another process's may pass too).
  std::map<std::pair<uint16_t, int>, uint64_t> ctrl_seen;
  std::set<uint16_t> data_dst_ports;
  std::map<int, uint64_t> ctrl_tos() const {
    std::map<int, uint64_t> out;
    for (const auto& [k, n] : ctrl_seen) {
      if (data_dst_ports.count(k.first) != 0) out[k.second] += n;
    }
    return out;
  }
  uint64_t cut = 0, remarked = 0, header_cut = 0;
  uint64_t csum_zero_trimmable = 0, csum_set_trimmable = 0, csum_zero_exact = 0, csum_set_exact = 0;

 private:
  void run() {
    std::vector<uint8_t> buf(65536);
    uint64_t trimmable_seen = 0;
    while (!stop_) {
      pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {raw_.valid() ? raw_.get() : -1, POLLIN, 0}};
      if (poll(fds, 2, 20) <= 0) continue;
      if ((fds[1].revents & POLLIN) != 0) read_raw(buf);
      if ((fds[0].revents & POLLIN) == 0) continue;
      int tos = -1;
      const ssize_t n = recv_with_tos(sock_.get(), buf, MSG_DONTWAIT, &tos);
      if (n < 50) continue;
      const bool trimmable = (buf[3] & codec::kFlagTrimmable) != 0;
      ++(trimmable ? tos_trimmable : tos_exact)[tos];
      sockaddr_in to{};
      to.sin_family = AF_INET;
      std::memcpy(&to.sin_addr.s_addr, &buf[44], 4);
      to.sin_port = htons(static_cast<uint16_t>(buf[48] | (buf[49] << 8)));
      data_dst_ports.insert(ntohs(to.sin_port));
      size_t len = static_cast<size_t>(n);
      int out_tos = tos < 0 ? 0 : tos;
      if (trimmable) {
        const uint64_t k = trimmable_seen++;
        if (k == 2) {  // inside our header: a loss the sender repairs
          len = 40;
          out_tos = 11 << 2;
          ++header_cut;
        } else if (k % 5 == 1 && len > codec::kHeaderBytes + 40) {
          len = codec::kHeaderBytes + 40;  // 40 bytes of plane 0 left
          out_tos = 11 << 2;
          ++cut;
        } else if (k % 7 == 3) {
          out_tos = 11 << 2;  // remarked, not cut
          ++remarked;
        }
      }
      send_to(buf.data(), len, to, out_tos);
    }
  }
  void send_to(const uint8_t* data, size_t len, const sockaddr_in& to, int tos) {
    iovec iov{const_cast<uint8_t*>(data), len};
    alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(sizeof(int))] = {};
    msghdr h{};
    h.msg_name = const_cast<sockaddr_in*>(&to);
    h.msg_namelen = sizeof to;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = cbuf;
    h.msg_controllen = sizeof cbuf;
    cmsghdr* cm = CMSG_FIRSTHDR(&h);
    cm->cmsg_level = IPPROTO_IP;
    cm->cmsg_type = IP_TOS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &tos, sizeof tos);
    (void)sendmsg(sock_.get(), &h, 0);
  }
  // Every UDP packet of the host, IP header included: ours to the forwarder (checksums), and
  // the ranks' control packets (their DSCP).
  void read_raw(std::vector<uint8_t>& buf) {
    for (;;) {
      const ssize_t n = recv(raw_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < 28) return;
      const uint32_t ihl = (buf[0] & 0x0fu) * 4;
      if (static_cast<size_t>(n) < ihl + 8 + 4) continue;
      const uint8_t* udp = buf.data() + ihl;
      const uint8_t* payload = udp + 8;
      if (be16(udp + 2) == port_ && payload[0] == 'T' && payload[1] == 'R') {
        const bool trimmable = (payload[3] & codec::kFlagTrimmable) != 0;
        const bool zero = be16(udp + 6) == 0;
        ++(trimmable ? (zero ? csum_zero_trimmable : csum_set_trimmable) : (zero ? csum_zero_exact : csum_set_exact));
      } else if (payload[0] == 'T' && payload[1] == 'C' && be16(udp) != port_) {
        ++ctrl_seen[std::make_pair(be16(udp), static_cast<int>(buf[1]))];
      }
    }
  }

  transport::Fd sock_, raw_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The plugin marks each packet's DSCP by its class (trimmable 18, exact 0, control 48), sends
// trimmable datagrams without a UDP checksum (NCCL_TRIM_UDP_CHECKSUM=zero) and exact ones with
// one, and recognises a trim from the packet alone: a cut (shorter than its header says) or the
// trimmed DSCP on a whole packet.
// A cut inside our header is counted and repaired; the exact classes arrive bit exact and the
// replicas stay identical.
TEST(FabricTransport, MarksByClassAndReadsTrimsFromThePacket) {
  MarkingForwarder fw;
  std::vector<std::string> env = {"NCCL_TRIM_SWITCH=" + fw.addr_text(), "NCCL_TRIM_UDP_CHECKSUM=zero"};
  Child h({bin_dir() + "trim-harness", "--json", "--deadline-s", "20", "--mode", "mixed", "--ranks", "2", "--bytes",
           "1M", "--iters", "2", "--warmup", "1", "--seed", "4"},
          env);
  const int rc = h.wait(30);
  fw.stop();
  const auto j = flat_json(h.out());
  const std::string ctx = "harness stdout: " + h.out() + "\nstderr (tail): " + h.err().substr(h.err().size() > 2000 ? h.err().size() - 2000 : 0);
  ASSERT_EQ(rc, 0) << ctx;
  EXPECT_EQ(str(j, "verify"), "ok") << ctx;
  EXPECT_EQ(str(j, "exact_ok"), "true") << ctx;
  EXPECT_EQ(str(j, "replicas_identical"), "true") << ctx;
  // The DSCP per class, as the forwarder received it.
  ASSERT_FALSE(fw.tos_trimmable.empty());
  ASSERT_FALSE(fw.tos_exact.empty());
  EXPECT_EQ(fw.tos_trimmable.size(), 1u);
  EXPECT_EQ(fw.tos_trimmable.begin()->first, 18 << 2);
  EXPECT_EQ(fw.tos_exact.size(), 1u);
  EXPECT_EQ(fw.tos_exact.begin()->first, 0);
  // What the receivers made of the trims: every cut and every remark seen (accepted once each,
  // resends of the header cut aside), the header cut counted apart and repaired.
  EXPECT_GT(fw.cut, 10u);
  EXPECT_GT(fw.remarked, 10u);
  EXPECT_EQ(fw.header_cut, 1u);
  EXPECT_EQ(num(j, "header_cuts"), 1) << ctx;
  // Each marked packet accepted once, but for one whose spurious resend arrived first (a duplicate).
  const long long marked = static_cast<long long>(fw.cut + fw.remarked);
  EXPECT_LE(num(j, "trimmed_marked"), marked) << ctx;
  EXPECT_GE(num(j, "trimmed_marked"), marked - num(j, "dup_packets")) << ctx;
  EXPECT_EQ(num(j, "trimmed_accepted"), num(j, "trimmed_marked")) << "no other trims: " << ctx;
  EXPECT_GT(num(j, "retransmits"), 0) << ctx;
  if (!fw.has_raw()) GTEST_SKIP() << "not root: the UDP checksums and the control DSCP are not visible";
  EXPECT_GT(fw.csum_zero_trimmable, 0u);
  EXPECT_EQ(fw.csum_set_trimmable, 0u) << "a trimmable datagram carries no UDP checksum";
  EXPECT_GT(fw.csum_set_exact, 0u);
  EXPECT_EQ(fw.csum_zero_exact, 0u) << "an exact one keeps the kernel's";
  const std::map<int, uint64_t> ctrl = fw.ctrl_tos();
  ASSERT_FALSE(ctrl.empty()) << "the receivers' ACKs";
  EXPECT_EQ(ctrl.size(), 1u);
  EXPECT_EQ(ctrl.begin()->first, 48 << 2);
}

// ---- live: trim-switch --fabric 1 ----

// The UDP daemon in fabric mode: it learns each datagram's DSCP from its socket, trims the
// trimmable class at a full queue to the trim size, and forwards with the trimmed DSCP.
TEST(FabricLive, UdpDaemonTrimsByDscpUnderCongestion) {
  Child sw({bin_dir() + "trim-switch", "--fabric", "1", "--trim-size", "256", "--rate-gbps", "1", "--buffer-bytes",
            "65536", "--prop-delay-us", "20", "--cross", "const:0.3:all", "--seed", "7"});
  int port = -1;
  for (int i = 0; i < 1000 && port < 0; ++i) {
    const std::string o = sw.out();
    if (o.find('\n') != std::string::npos) port = static_cast<int>(num(flat_json(o.substr(0, o.find('\n'))), "port"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(port, 0) << sw.err();
  Child h({bin_dir() + "trim-harness", "--json", "--deadline-s", "20", "--mode", "mixed", "--ranks", "4", "--bytes",
           "1M", "--iters", "2", "--warmup", "1", "--seed", "3"},
          {"NCCL_TRIM_SWITCH=127.0.0.1:" + std::to_string(port)});
  const int rc = h.wait(30);
  sw.signal(SIGTERM);
  sw.wait(10);
  const auto j = flat_json(h.out());
  std::string final_line;
  {
    std::istringstream in(sw.out());
    std::string line;
    while (std::getline(in, line)) final_line = line.find("\"final\"") != std::string::npos ? line : final_line;
  }
  const auto st = flat_json(final_line);
  const std::string ctx = "harness: " + h.out() + "\nswitch: " + final_line;
  ASSERT_EQ(rc, 0) << ctx;
  EXPECT_NE(str(j, "verify"), "fail") << ctx;
  EXPECT_EQ(str(j, "exact_ok"), "true") << ctx;
  EXPECT_EQ(str(j, "replicas_identical"), "true") << ctx;
  EXPECT_GT(num(st, "dscp_18_trimmed"), 0) << ctx;
  EXPECT_GT(num(st, "dscp_0_received"), 0) << ctx;
  EXPECT_EQ(num(st, "dscp_0_trimmed"), 0) << "the exact class is never trimmed: " << ctx;
  EXPECT_EQ(num(st, "dscp_0_remarked"), 0) << ctx;
  EXPECT_GT(num(j, "trimmed_marked"), 0) << ctx;
  EXPECT_EQ(num(st, "bad"), 0) << ctx;
}

// ---- live: the TUN router in fabric mode, between network namespaces ----

// At every trim size the shipping switches use, the fabric mode (which reads only DSCP) gives
// the NMSE the native mode gives for the same surviving bytes, the replicas stay identical, the
// exact classes (DSCP 0 data, DSCP 48 control and TCP) are never trimmed, and the receivers know
// the trims by DSCP. At 64 B the cut falls inside our header: every such trim is a counted loss,
// repaired by retransmission, and the result is exact.
TEST(FabricTun, NmseMatchesNativeModeForTheSameSurvivingBytes) {
  SKIP_UNLESS_NETNS();
  for (uint32_t size : {64u, 128u, 206u, 256u, 392u, 1024u}) {
    SCOPED_TRACE(std::to_string(size) + " B");
    BnRun nat = trim_run(false, size), fab = trim_run(true, size);
    ASSERT_NE(fab.exit_code, 77) << fab.context();
    ASSERT_EQ(nat.exit_code, 0) << nat.context();
    ASSERT_EQ(fab.exit_code, 0) << fab.context();
    EXPECT_EQ(str(fab.harness, "replicas_identical"), "true") << fab.context();
    EXPECT_EQ(str(fab.sw, "fabric"), "1") << fab.context();
    EXPECT_GT(num(fab.sw, "dscp_18_trimmed"), 0) << fab.context();
    EXPECT_EQ(num(fab.sw, "dscp_0_trimmed"), 0) << fab.context();
    EXPECT_EQ(num(fab.sw, "dscp_48_trimmed"), 0) << fab.context();
    EXPECT_EQ(num(fab.sw, "tcp_trimmed"), 0) << fab.context();
    EXPECT_EQ(num(fab.sw, "bad"), 0) << fab.context();
    if (size == 64) {
      EXPECT_EQ(str(fab.harness, "verify"), "exact") << fab.context();
      EXPECT_GT(num(fab.harness, "header_cuts"), 0) << fab.context();
      EXPECT_EQ(num(fab.harness, "trimmed_accepted"), 0) << fab.context();
      EXPECT_GT(num(fab.harness, "retransmits"), num(fab.harness, "header_cuts") / 2) << fab.context();
      continue;
    }
    EXPECT_EQ(str(nat.harness, "verify"), "ok") << nat.context();
    EXPECT_EQ(str(fab.harness, "verify"), "ok") << fab.context();
    EXPECT_EQ(num(fab.harness, "header_cuts"), 0) << fab.context();
    EXPECT_GT(num(fab.harness, "trimmed_marked"), 0) << fab.context();
    // p = 0.2 of the trimmable half: a trim rate near 0.1 in both modes.
    const double nat_rate = std::stod(str(nat.harness, "trim_rate")), fab_rate = std::stod(str(fab.harness, "trim_rate"));
    EXPECT_NEAR(fab_rate, nat_rate, 0.02) << fab.context() << nat.context();
    const double nat_nmse = std::stod(str(nat.harness, "nmse")), fab_nmse = std::stod(str(fab.harness, "nmse"));
    std::printf("[ fabric ] %4u B: nmse native %.4g fabric %.4g, trim rate %.4f / %.4f\n", size, nat_nmse, fab_nmse,
                nat_rate, fab_rate);
    EXPECT_NEAR(fab_nmse, nat_nmse, 0.15 * nat_nmse) << fab.context() << nat.context();
  }
}

// A switch that leaves a length claiming bytes the cut removed gets its trims dropped by the
// receiving kernel (IP: a truncated packet; UDP: a short one), and so does one that leaves the
// UDP checksum of a datagram sent with one (NCCL_TRIM_UDP_CHECKSUM=kernel, auto without a fabric
// trim size): the plugin never sees them, so each is a loss the sender repairs, and the result
// is exact. Only the trimmable packets no longer than the trim size arrive (remarked whole, as
// such a switch also sends them). Sent without a checksum, the same trims are decoded.
TEST(FabricTun, LengthsTheSwitchLeavesMakeTrimsLosses) {
  SKIP_UNLESS_NETNS();
  for (const char* flag : {"--rewrite-udp-length", "--rewrite-ip-length", "--rewrite-udp-checksum"}) {
    SCOPED_TRACE(flag);
    BnRun r = trim_run(true, 256, {flag, "keep"}, {"NCCL_TRIM_UDP_CHECKSUM=kernel"});
    ASSERT_NE(r.exit_code, 77) << r.context();
    ASSERT_EQ(r.exit_code, 0) << r.context();
    EXPECT_EQ(str(r.harness, "verify"), "exact") << r.context();
    EXPECT_GT(num(r.sw, "dscp_18_trimmed"), 0) << r.context();
    EXPECT_GT(num(r.harness, "retransmits"), num(r.sw, "dscp_18_trimmed") / 2) << r.context();
    EXPECT_EQ(num(r.harness, "header_cuts"), 0) << r.context();
    EXPECT_EQ(num(r.harness, "trimmed_accepted"), num(r.harness, "trimmed_marked")) << r.context();
    EXPECT_EQ(num(r.harness, "cut_received"), 0) << "NCCL_TRIM_RX_CUT=auto is off without a fabric trim size: "
                                                 << r.context();
  }
  BnRun r = trim_run(true, 256, {"--rewrite-udp-checksum", "keep"}, {"NCCL_TRIM_UDP_CHECKSUM=zero"});
  ASSERT_EQ(r.exit_code, 0) << r.context();
  EXPECT_EQ(str(r.harness, "verify"), "ok") << r.context();
  // Every cut arrived and was accepted, but for cuts of resends whose original came first (duplicates).
  EXPECT_GE(num(r.harness, "trimmed_marked"), num(r.sw, "dscp_18_trimmed") - num(r.harness, "dup_packets")) << r.context();
  EXPECT_GT(num(r.harness, "trimmed_marked"), 0) << r.context();
}

// Mixed traffic (a trimmable fp32 AllReduce beside exact int32, broadcast and LL ones) through a
// congested fabric port, packets sized for its 256 B trims: the exact classes arrive bit exact
// and are never trimmed, the replicas stay identical, the plugin's TCP is never cut.
TEST(FabricTun, MixedTrafficUnderCongestionKeepsTheExactClassesExact) {
  SKIP_UNLESS_NETNS();
  BnRun r = mixed_fabric_256_run();
  ASSERT_NO_FATAL_FAILURE(expect_mixed_fabric_run_exact(r));
  EXPECT_GT(num(r.sw, "dscp_0_dropped") + num(r.sw, "dscp_48_dropped"), 0) << "the exact classes are dropped, " << r.context();
  EXPECT_EQ(num(r.sw, "dscp_0_trimmed"), 0) << r.context();
  EXPECT_EQ(num(r.sw, "dscp_48_trimmed"), 0) << r.context();
  EXPECT_EQ(num(r.sw, "tcp_trimmed"), 0) << r.context();
  EXPECT_GT(num(r.harness, "trimmed_marked"), 0) << r.context();
}

struct Got {
  size_t bytes;
  int tos;
};

// Another application's UDP through the same fabric port keeps its own DSCP's behaviour: at twice
// the port's rate, datagrams marked 0 are tail-dropped and arrive whole with DSCP 0; datagrams
// marked with the trimmable DSCP are trimmed to the trim size and arrive remarked, with lengths
// and checksum a kernel accepts (the default rewrite).
TEST(FabricTun, OtherApplicationsKeepTheirOwnDscpBehaviour) {
  SKIP_UNLESS_NETNS();
  HeldBottleneck bn({"--ranks", "2", "--rate-gbps", "0.2", "--buffer-bytes", "262144", "--seed", "3", "--switch-arg",
                     "--fabric", "--switch-arg", "1", "--switch-arg", "--trim-size", "--switch-arg", "256"});
  ASSERT_TRUE(bn.ready()) << bn.context();
  constexpr int kFlows = 2;
  const int dscp[kFlows] = {0, 18};
  transport::Fd tx[kFlows], rx[kFlows];
  sockaddr_in to[kFlows];
  for (int f = 0; f < kFlows; ++f) {
    tx[f] = socket_in(bn.ns(0), SOCK_DGRAM);
    rx[f] = socket_in(bn.ns(1), SOCK_DGRAM);
    ASSERT_TRUE(tx[f].valid() && rx[f].valid());
    to[f] = addr("198.18.0.2", static_cast<uint16_t>(45100 + f));
    ASSERT_EQ(bind(rx[f].get(), reinterpret_cast<const sockaddr*>(&to[f]), sizeof(to[f])), 0) << std::strerror(errno);
    const int tos = dscp[f] << 2, on = 1, big = 8 << 20;
    setsockopt(tx[f].get(), IPPROTO_IP, IP_TOS, &tos, sizeof tos);
    setsockopt(rx[f].get(), IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
    setsockopt(rx[f].get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    timeval tv{0, 300000};
    setsockopt(rx[f].get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  std::vector<Got> got[kFlows];
  std::atomic<bool> sending{true};
  std::vector<std::thread> readers;
  for (int f = 0; f < kFlows; ++f) {
    readers.emplace_back([&, f] {
      std::vector<uint8_t> buf(65536);
      for (;;) {
        int tos = -1;
        const ssize_t n = recv_with_tos(rx[f].get(), buf, 0, &tos);
        if (n < 0) {
          if (!sending.load()) break;
          continue;
        }
        got[f].push_back(Got{static_cast<size_t>(n), tos});
      }
    });
  }
  // Each flow at the port's rate: twice the rate together, for 1 s.
  constexpr size_t kPayload = 4000;
  const std::vector<uint8_t> payload(kPayload, 0x5a);
  const auto gap = std::chrono::duration<double>((kPayload + 28) * 8 / (0.2e9));
  const auto start = std::chrono::steady_clock::now();
  size_t sent = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1000)) {
    for (int f = 0; f < kFlows; ++f) {
      (void)sendto(tx[f].get(), payload.data(), payload.size(), 0, reinterpret_cast<const sockaddr*>(&to[f]), sizeof(to[f]));
    }
    ++sent;
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(gap * sent));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sending = false;
  for (std::thread& t : readers) t.join();
  const auto st = flat_json(bn.stop());
  const std::string ctx = bn.context();
  // DSCP 0: dropped, never trimmed or remarked; what arrives is whole and unmarked.
  EXPECT_GT(num(st, "dscp_0_dropped"), 0) << ctx;
  EXPECT_EQ(num(st, "dscp_0_trimmed"), 0) << ctx;
  EXPECT_EQ(num(st, "dscp_0_remarked"), 0) << ctx;
  ASSERT_FALSE(got[0].empty());
  for (const Got& g : got[0]) {
    EXPECT_EQ(g.bytes, kPayload);
    EXPECT_EQ(g.tos, 0);
  }
  // DSCP 18: trimmed, not dropped; what arrives cut is 256 - 18 - 28 bytes of UDP payload,
  // marked 11; the rest whole and marked 18.
  EXPECT_GT(num(st, "dscp_18_trimmed"), 0) << ctx;
  size_t cut = 0;
  for (const Got& g : got[1]) {
    if (g.bytes == kPayload) {
      EXPECT_EQ(g.tos, 18 << 2);
    } else {
      EXPECT_EQ(g.bytes, 256u - 18 - 28);
      EXPECT_EQ(g.tos, 11 << 2);
      ++cut;
    }
  }
  EXPECT_EQ(static_cast<long long>(cut), num(st, "dscp_18_trimmed")) << "every trim reached the receiver: " << ctx;
  EXPECT_GT(got[1].size(), got[0].size()) << "trimmed instead of dropped";
}

}  // namespace

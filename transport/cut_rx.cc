#include "transport/cut_rx.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "transport/devices.h"

namespace trim::transport {

namespace {

constexpr size_t kIpv4MinBytes = 20, kUdpBytes = 8;
constexpr uint8_t kProtoUdp = 17;
constexpr uint16_t kFragMask = 0x3fff;  // MF and the fragment offset

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

sock_filter stmt(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return sock_filter{code, jt, jf, k}; }

// The interface that holds `ip4_be`, or "" (a packet socket bound to ifindex 0 sees them all).
std::string interface_of(uint32_t ip4_be) {
  if (ip4_be == 0) return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> guard(list, &freeifaddrs);
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || a->ifa_name == nullptr) continue;
    if (reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == ip4_be) {
      return sysfs_device_name(a->ifa_name);  // "eth0:1" is an address label of eth0
    }
  }
  return "";
}

}  // namespace

const char* cut_error_name(CutError e) {
  switch (e) {
    case CutError::kOk: return "ok";
    case CutError::kShort: return "shorter than its headers";
    case CutError::kNotIpv4: return "not IPv4";
    case CutError::kBadIhl: return "IHL below 5";
    case CutError::kNotUdp: return "not UDP";
    case CutError::kFragment: return "a fragment";
    case CutError::kNotOurs: return "another destination";
    case CutError::kBadLength: return "a length below its header";
    case CutError::kNotCut: return "not cut";
  }
  return "?";
}

const char* cut_check_name(CutCheck c) {
  switch (c) {
    case CutCheck::kOk: return "ok";
    case CutCheck::kNoCheckPoints: return "no check points (a raw packet)";
    case CutCheck::kBadCheckPoint: return "a check point that does not match";
  }
  return "?";
}

CutCheck verify_cut_packet(const uint8_t* data, size_t len, codec::ParsedPacket* p, bool* newly_failed) {
  *newly_failed = false;
  // parse_packet accepted the packet: a lossy scheme's has check points, scheme none's has none.
  if (p->hdr.scheme == codec::Scheme::kNone || len < codec::kHeaderBytes) return CutCheck::kNoCheckPoints;
  const uint32_t received =
      static_cast<uint32_t>(std::min<size_t>(len - codec::kHeaderBytes, p->hdr.payload_bytes));
  bool failed = false;
  const uint32_t verified = codec::verified_prefix(data, data + codec::kHeaderBytes, received, &failed);
  if (failed) {
    *newly_failed = !p->check_failed;  // parse_packet counts what it verified itself
    return CutCheck::kBadCheckPoint;
  }
  p->payload_received = verified;
  p->trimmed = verified < p->hdr.payload_bytes;
  return CutCheck::kOk;
}

CutError parse_cut_frame(const uint8_t* f, size_t bytes, uint32_t ip4_be, uint16_t port, CutFrame* out) {
  if (bytes < kIpv4MinBytes) return CutError::kShort;
  if ((f[0] >> 4) != 4) return CutError::kNotIpv4;
  const size_t ihl = static_cast<size_t>(f[0] & 0x0f) * 4;
  if (ihl < kIpv4MinBytes) return CutError::kBadIhl;
  if (bytes < ihl + kUdpBytes) return CutError::kShort;
  if (f[9] != kProtoUdp) return CutError::kNotUdp;
  if ((be16(f + 6) & kFragMask) != 0) return CutError::kFragment;
  uint32_t dst = 0;
  std::memcpy(&dst, f + 16, 4);
  const uint8_t* udp = f + ihl;
  if ((ip4_be != 0 && dst != ip4_be) || be16(udp + 2) != port) return CutError::kNotOurs;
  const size_t total = be16(f + 2), udp_len = be16(udp + 4);
  if (total < ihl + kUdpBytes || udp_len < kUdpBytes) return CutError::kBadLength;
  // What the kernel's checks see: the IP layer trims the frame to its total length (padding)
  // and drops it when that is longer; UDP drops a datagram longer than what is left.
  const size_t l4 = std::min(bytes, total) - ihl;
  if (total <= bytes && udp_len <= l4) return CutError::kNotCut;
  out->payload = udp + kUdpBytes;
  out->payload_bytes = std::min(l4, udp_len) - kUdpBytes;
  out->from = sockaddr_in{};
  out->from.sin_family = AF_INET;
  std::memcpy(&out->from.sin_addr.s_addr, f + 12, 4);
  std::memcpy(&out->from.sin_port, udp, 2);  // already big-endian
  out->tos = f[1];
  return CutError::kOk;
}

std::vector<sock_filter> cut_filter(uint32_t ip4_be, uint16_t port, bool match_protocol) {
  // Offsets are from the IPv4 header (SOCK_DGRAM). A load past the frame's end stops the
  // program with 0 (drop), so short frames never pass. Jumps name their targets (kAccept,
  // kDrop: the last two instructions) and are resolved to distances at the end.
  constexpr uint8_t kNext = 0, kAccept = 0xfe, kDrop = 0xff;
  std::vector<sock_filter> p;
  if (match_protocol) {
    p.push_back(stmt(BPF_LD | BPF_H | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PROTOCOL)));
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, kNext, kDrop));
  }
  p.push_back(stmt(BPF_LD | BPF_B | BPF_ABS, 0));
  p.push_back(stmt(BPF_ALU | BPF_AND | BPF_K, 0xf0));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, 0x40, kNext, kDrop));  // IPv4
  p.push_back(stmt(BPF_LD | BPF_B | BPF_ABS, 0));
  p.push_back(stmt(BPF_ALU | BPF_AND | BPF_K, 0x0f));
  p.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 5, kNext, kDrop));  // IHL >= 5
  p.push_back(stmt(BPF_LD | BPF_B | BPF_ABS, 9));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kProtoUdp, kNext, kDrop));
  p.push_back(stmt(BPF_LD | BPF_H | BPF_ABS, 6));
  p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kFragMask, kDrop, kNext));  // no fragment
  if (ip4_be != 0) {
    p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, 16));  // loaded in host order
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, ntohl(ip4_be), kNext, kDrop));
  }
  p.push_back(stmt(BPF_LDX | BPF_B | BPF_MSH, 0));  // X = IHL * 4
  p.push_back(stmt(BPF_LD | BPF_B | BPF_IND, 7));   // the UDP header's last byte: a whole header
  p.push_back(stmt(BPF_LD | BPF_H | BPF_IND, 2));   // the UDP destination port
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, port, kNext, kDrop));
  p.push_back(stmt(BPF_LD | BPF_W | BPF_LEN, 0));   // the bytes that arrived
  p.push_back(stmt(BPF_ST, 0));
  p.push_back(stmt(BPF_LD | BPF_H | BPF_ABS, 2));   // the IPv4 total length
  p.push_back(stmt(BPF_LDX | BPF_MEM, 0));
  p.push_back(jump(BPF_JMP | BPF_JGT | BPF_X, 0, kAccept, kNext));  // above what arrived
  p.push_back(stmt(BPF_LDX | BPF_B | BPF_MSH, 0));
  p.push_back(stmt(BPF_LD | BPF_H | BPF_IND, 4));   // the UDP length
  p.push_back(stmt(BPF_ALU | BPF_ADD | BPF_X, 0));  // + IHL * 4
  p.push_back(stmt(BPF_LDX | BPF_MEM, 0));
  p.push_back(jump(BPF_JMP | BPF_JGT | BPF_X, 0, kAccept, kDrop));  // above what arrived
  p.push_back(stmt(BPF_RET | BPF_K, 0x40000));  // accept: the whole frame
  p.push_back(stmt(BPF_RET | BPF_K, 0));        // drop
  const size_t accept = p.size() - 2, drop = p.size() - 1;
  auto resolve = [&](size_t i, uint8_t label) -> uint8_t {
    if (label == kAccept) return static_cast<uint8_t>(accept - i - 1);
    if (label == kDrop) return static_cast<uint8_t>(drop - i - 1);
    return label;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    if (BPF_CLASS(p[i].code) != BPF_JMP) continue;
    p[i].jt = resolve(i, p[i].jt);
    p[i].jf = resolve(i, p[i].jf);
  }
  return p;
}

Result<CutSocket> CutSocket::open(uint32_t ip4_be, uint16_t port) {
  CutSocket s;
  // Protocol 0 receives nothing until bind: the filter is in place before the first frame.
  s.fd_ = Fd(socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.fd_.valid()) return errno_status("socket(AF_PACKET)");
  std::vector<sock_filter> prog = cut_filter(ip4_be, port);
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (setsockopt(s.fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) != 0) {
    return errno_status("setsockopt(SO_ATTACH_FILTER)");
  }
  // What this host sends is whole; without the option (kernels before 4.20) the filter drops it.
  const int on = 1;
  (void)setsockopt(s.fd_.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on);
  const int bytes = 4 << 20;
  if (setsockopt(s.fd_.get(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
    (void)setsockopt(s.fd_.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  s.ifname_ = interface_of(ip4_be);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);  // a tap: see CutSocket
  if (!s.ifname_.empty()) {
    ll.sll_ifindex = static_cast<int>(if_nametoindex(s.ifname_.c_str()));
    if (ll.sll_ifindex == 0) s.ifname_.clear();
  }
  if (bind(s.fd_.get(), reinterpret_cast<const sockaddr*>(&ll), sizeof ll) != 0) {
    return errno_status(fmt::format("bind(AF_PACKET, {})", s.ifname_.empty() ? "every interface" : s.ifname_));
  }
  return s;
}

uint64_t CutSocket::take_drops() {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  if (!fd_.valid() || getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &len) != 0) return 0;
  return st.tp_drops;  // the kernel resets both counts on each read
}

}  // namespace trim::transport

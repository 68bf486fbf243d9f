#include "transport/devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_set>

#include <fmt/format.h>

#include "common/params.h"
#include "common/socket.h"

namespace trim::transport {
namespace {

constexpr const char* kBlanks = " \t\r\n";

std::string trim_blanks(const std::string& s) {
  const size_t first = s.find_first_not_of(kBlanks);
  if (first == std::string::npos) return "";
  const size_t last = s.find_last_not_of(kBlanks);
  return s.substr(first, last - first + 1);
}

// Parsed form of an NCCL_SOCKET_IFNAME-style spec.
struct IfSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> entries;
};

IfSpec parse_spec(const std::string& spec) {
  IfSpec out;
  size_t pos = 0;
  // NCCL's order: '^' first, then '=' (so "^=eth0" excludes exactly eth0).
  if (pos < spec.size() && spec[pos] == '^') {
    out.exclude = true;
    ++pos;
  }
  if (pos < spec.size() && spec[pos] == '=') {
    out.exact = true;
    ++pos;
  }
  std::stringstream list(spec.substr(pos));
  std::string entry;
  while (std::getline(list, entry, ',')) {
    entry = trim_blanks(entry);
    // An empty prefix would match everything; NCCL skips empty entries too.
    if (!entry.empty()) out.entries.push_back(entry);
  }
  return out;
}

bool spec_matches(const IfSpec& spec, const std::string& name) {
  for (const std::string& entry : spec.entries) {
    const bool hit = spec.exact ? name == entry : name.compare(0, entry.size(), entry) == 0;
    if (hit) return true;
  }
  return false;
}

// Reads a small sysfs attribute; nullopt when missing or unreadable (e.g. the speed of a link
// that is down reads as EINVAL).
std::optional<std::string> read_attr(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  if (in.bad() || (in.fail() && !in.eof())) return std::nullopt;
  return trim_blanks(text);
}

std::optional<int> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size() || v < INT_MIN || v > INT_MAX) return std::nullopt;
  return static_cast<int>(v);
}

// Names the kernel would never give an interface must not turn into paths outside sysfs_root.
bool safe_path_component(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

void fill_from_sysfs(NetIf& nif, int fallback_speed_mbps, const std::string& sysfs_root) {
  const std::string dev = sysfs_device_name(nif.name);
  nif.speed_mbps = fallback_speed_mbps;
  nif.mtu = 0;
  std::string mac;
  if (safe_path_component(dev)) {
    const std::string dir = sysfs_root + "/" + dev + "/";
    // realpath fails (ENOENT) for virtual interfaces, which have no device link.
    std::unique_ptr<char, decltype(&std::free)> real(realpath((dir + "device").c_str(), nullptr), &std::free);
    if (real) nif.pci_path = real.get();
    if (auto text = read_attr(dir + "speed")) {
      if (auto speed = parse_int(*text); speed && *speed > 0) nif.speed_mbps = *speed;
    }
    if (auto text = read_attr(dir + "mtu")) {
      if (auto mtu = parse_int(*text); mtu && *mtu > 0) nif.mtu = *mtu;
    }
    if (auto text = read_attr(dir + "address")) {
      mac = *text;
      std::transform(mac.begin(), mac.end(), mac.begin(), [](unsigned char c) { return std::tolower(c); });
    }
  }
  // The device name (not the alias label) so aliases of one port share a guid, as NCCL expects;
  // the NUL keeps "ab"+"c" apart from "a"+"bc".
  std::string key = dev;
  key.push_back('\0');
  key += mac;
  nif.guid = fnv1a64(key);
  if (nif.guid == 0) nif.guid = 1;  // 0 reads as "unset" to NCCL-side code
}

// Per-name summary for the no-match message.
struct SeenName {
  std::string name;
  bool any_up = false;
  bool any_running = false;
  bool any_ip4 = false;
  bool any_usable = false;
};

std::string describe_candidates(const std::vector<IfCandidate>& candidates) {
  std::vector<SeenName> seen;
  for (const IfCandidate& c : candidates) {
    auto it = std::find_if(seen.begin(), seen.end(), [&](const SeenName& s) { return s.name == c.name; });
    if (it == seen.end()) it = seen.insert(seen.end(), SeenName{c.name});
    it->any_up |= c.up;
    it->any_running |= c.up && c.running;
    it->any_ip4 |= c.ip4_be != 0;
    it->any_usable |= c.up && c.running && c.ip4_be != 0;
  }
  if (seen.empty()) return "none";
  std::string out;
  for (const SeenName& s : seen) {
    if (!out.empty()) out += ", ";
    out += s.name;
    if (s.any_usable) continue;  // excluded by the spec, not by its state
    if (!s.any_up) {
      out += " (down)";
    } else if (!s.any_running) {
      out += " (no carrier)";
    } else if (!s.any_ip4) {
      out += " (no IPv4)";
    }
  }
  return out;
}

}  // namespace

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV-1a 64-bit prime
  }
  return h;
}

std::string sysfs_device_name(const std::string& name) { return name.substr(0, name.find(':')); }

bool ifname_selected(const std::string& spec, const std::string& name) {
  if (spec.empty()) return true;
  const IfSpec parsed = parse_spec(spec);
  return spec_matches(parsed, name) != parsed.exclude;
}

Result<std::vector<NetIf>> select_interfaces(const std::vector<IfCandidate>& candidates, const std::string& spec,
                                             int fallback_speed_mbps, const std::string& sysfs_root) {
  std::vector<NetIf> picked;
  std::unordered_set<std::string> names;
  for (const IfCandidate& c : candidates) {
    if (!c.up || !c.running || c.ip4_be == 0) continue;
    if (!ifname_selected(spec, c.name)) continue;
    if (!names.insert(c.name).second) continue;  // keep the first IPv4 address only
    NetIf nif;
    nif.name = c.name;
    nif.ip4_be = c.ip4_be;
    nif.if_index = c.if_index;
    nif.loopback = c.loopback;
    picked.push_back(std::move(nif));
  }
  // Loopback carries no traffic between hosts: offer it unasked only on a single-host machine.
  const bool any_real = std::any_of(picked.begin(), picked.end(), [](const NetIf& n) { return !n.loopback; });
  if (spec.empty() && any_real) {
    picked.erase(std::remove_if(picked.begin(), picked.end(), [](const NetIf& n) { return n.loopback; }),
                 picked.end());
  }
  if (picked.empty()) {
    return Status(Code::kUnavailable, "NCCL_TRIM_IFNAME='" + spec + "'" + (spec.empty() ? " (no filter)" : "") +
                                          " matches no IPv4 interface that is up (have: " +
                                          describe_candidates(candidates) + ")");
  }
  std::sort(picked.begin(), picked.end(), [](const NetIf& a, const NetIf& b) {
    if (a.loopback != b.loopback) return !a.loopback;
    return a.name < b.name;
  });
  for (NetIf& nif : picked) fill_from_sysfs(nif, fallback_speed_mbps, sysfs_root);
  return picked;
}

Result<std::vector<NetIf>> discover_interfaces(const std::string& spec, int fallback_speed_mbps) {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    return Status(Code::kSystem, std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> list(raw, &freeifaddrs);
  std::map<std::string, int> index_of;  // one if_nametoindex per device
  std::vector<IfCandidate> candidates;
  for (const ifaddrs* ifa = list.get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_name == nullptr) continue;
    const std::string name = ifa->ifa_name;
    const std::string dev = sysfs_device_name(name);
    auto idx = index_of.find(dev);
    if (idx == index_of.end()) idx = index_of.emplace(dev, static_cast<int>(if_nametoindex(dev.c_str()))).first;
    uint32_t ip4_be = 0;
    if (ifa->ifa_addr != nullptr && ifa->ifa_addr->sa_family == AF_INET) {
      sockaddr_in sin;
      std::memcpy(&sin, ifa->ifa_addr, sizeof(sin));  // no aliasing through the sockaddr cast
      ip4_be = sin.sin_addr.s_addr;
    }
    const unsigned flags = ifa->ifa_flags;
    candidates.push_back(IfCandidate{name, ip4_be, (flags & IFF_UP) != 0, (flags & IFF_RUNNING) != 0,
                                     (flags & IFF_LOOPBACK) != 0, idx->second});
  }
  return select_interfaces(candidates, spec, fallback_speed_mbps, "/sys/class/net");
}

int resolve_mtu(const NetIf& dev, int64_t mtu_param) {
  if (mtu_param != kAuto) return static_cast<int>(mtu_param);
  return dev.mtu > 0 ? std::min(dev.mtu, kAutoMtuCapBytes) : kUnknownIfMtuBytes;
}

int route_mtu(uint32_t src_ip4_be, uint32_t dst_ip4_be) {
  sock::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return 0;
  const sockaddr_in src = sock::make_addr(src_ip4_be, 0);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&src), sizeof src) != 0) return 0;
  const sockaddr_in dst = sock::make_addr(dst_ip4_be, 9);  // any port: a UDP connect only looks the route up
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&dst), sizeof dst) != 0) return 0;
  int mtu = 0;
  socklen_t len = sizeof mtu;
  return ::getsockopt(fd.get(), IPPROTO_IP, IP_MTU, &mtu, &len) == 0 ? mtu : 0;
}

int connection_mtu(int dev_offer_bytes, int64_t mtu_param, int route_mtu_bytes) {
  if (route_mtu_bytes < kMinMtuBytes) return dev_offer_bytes;
  if (mtu_param == kAuto) return std::min(route_mtu_bytes, kAutoMtuCapBytes);
  return std::min(dev_offer_bytes, route_mtu_bytes);
}

Status check_mtu(const std::vector<NetIf>& devices, int64_t mtu_param) {
  for (const NetIf& d : devices) {
    if (d.mtu <= 0) continue;  // unknown: auto takes 1500, an explicit value is trusted
    if (mtu_param == kAuto && d.mtu < kMinMtuBytes) {
      return Status(Code::kBadConfig,
                    fmt::format("NCCL_TRIM_MTU=auto: the MTU of {} ({}) is below {}, the smallest packet the plugin "
                                "sends: raise the interface's MTU, or choose another interface with NCCL_TRIM_IFNAME",
                                d.name, d.mtu, kMinMtuBytes));
    }
    if (mtu_param != kAuto && d.mtu < mtu_param) {
      return Status(Code::kBadConfig,
                    fmt::format("NCCL_TRIM_MTU={} exceeds the MTU of {} ({}): set NCCL_TRIM_MTU to at most {} (or "
                                "auto), or choose another interface with NCCL_TRIM_IFNAME",
                                mtu_param, d.name, d.mtu, d.mtu));
    }
  }
  return Status::ok();
}

std::string ip4_to_string(uint32_t ip4_be) {
  in_addr addr{};
  addr.s_addr = ip4_be;
  char buf[INET_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET, &addr, buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

}  // namespace trim::transport

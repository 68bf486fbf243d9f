// Network-interface discovery: which IPv4 interfaces the plugin offers NCCL as devices, and
// what it says about each (PCI path, speed, guid, MTU). Selection is a pure function of a
// candidate list and a sysfs directory so tests can feed synthetic machines; discover_interfaces
// is the thin getifaddrs() wrapper the plugin calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace trim::transport {

struct NetIf {
  std::string name;        // e.g. "eth0"
  uint32_t ip4_be = 0;     // IPv4 address in network byte order (as in in_addr.s_addr)
  int if_index = 0;
  bool loopback = false;
  std::string pci_path;    // realpath of /sys/class/net/<if>/device when it exists, else empty
  int speed_mbps = 0;      // from /sys/class/net/<if>/speed when > 0, else the fallback given
  uint64_t guid = 0;       // stable per interface: hash of the device name and its MAC; never 0
  int mtu = 0;             // /sys/class/net/<if>/mtu, 0 if unknown
};

// One candidate as seen by getifaddrs (so tests can feed synthetic lists). ip4_be == 0 means
// the entry carries no IPv4 address (a link-layer or IPv6 entry); it is never selected but
// shows up in the "have:" list of the no-match error.
struct IfCandidate {
  std::string name;
  uint32_t ip4_be;
  bool up;
  bool running;
  bool loopback;
  int if_index;
};

// NCCL_SOCKET_IFNAME syntax: comma-separated list; leading '^' on the whole list = exclude those;
// leading '=' (after any '^') = exact names instead of prefixes; empty spec = no filter. Empty
// list entries are ignored and blanks around entries trimmed (interface names hold neither).
// Returns whether `name` is selected.
bool ifname_selected(const std::string& spec, const std::string& name);

// Pure selection: filter by spec; keep only interfaces that are up and running (have carrier)
// with an IPv4 address; one entry per interface name (its first IPv4 address); with an empty
// spec, skip loopback unless it is the only kind left. Order: non-loopback first, then by name.
// Fills pci_path/speed/guid/mtu from files under sysfs_root (normally "/sys/class/net"; an alias
// such as "eth0:1" reads eth0's files and shares its guid), with fallback_speed_mbps when the
// speed is absent or <= 0. Nothing selected: Code::kUnavailable naming the spec and listing
// the candidates, e.g. "NCCL_TRIM_IFNAME='xyz' matches no IPv4 interface that is up
// (have: lo, eth0, eth1 (down))".
Result<std::vector<NetIf>> select_interfaces(const std::vector<IfCandidate>& candidates, const std::string& spec,
                                             int fallback_speed_mbps, const std::string& sysfs_root);

// The real thing: getifaddrs() + select_interfaces(..., "/sys/class/net"). Code::kSystem when
// getifaddrs fails, otherwise as select_interfaces.
Result<std::vector<NetIf>> discover_interfaces(const std::string& spec, int fallback_speed_mbps);

// Dotted quad, e.g. "127.0.0.1".
std::string ip4_to_string(uint32_t ip4_be);

// NCCL_TRIM_MTU=auto on an interface: its MTU, at most kAutoMtuCapBytes (a loopback's 65536 is
// no wire's: a peer would agree to the smaller value anyway, and jumbo frames stop at 9000), or
// kUnknownIfMtuBytes when sysfs gave none (fits any Ethernet).
constexpr int kAutoMtuCapBytes = 9000;
constexpr int kUnknownIfMtuBytes = 1500;
// NCCL_TRIM_MTU's lower bound (common/params.def; the params test checks they agree): the
// smallest MTU a connection may agree on.
constexpr int kMinMtuBytes = 256;

// The MTU this end offers on `dev` for NCCL_TRIM_MTU = `mtu_param` (kAuto or an explicit value,
// which is used as given: check_mtu judges it).
int resolve_mtu(const NetIf& dev, int64_t mtu_param);

// The MTU of the route the kernel takes from `src_ip4_be` to `dst_ip4_be` (IP_MTU of a UDP socket
// bound and connected so: no packet is sent), or 0 when it cannot tell. A peer on this host is
// reached over loopback, whichever interface its address sits on.
int route_mtu(uint32_t src_ip4_be, uint32_t dst_ip4_be);

// What this end offers a connection whose route has `route_mtu_bytes` (0: unknown), on a device
// offering `dev_offer_bytes` (resolve_mtu) for NCCL_TRIM_MTU = `mtu_param`. auto sizes packets by
// the route (capped at kAutoMtuCapBytes), so same-host peers get loopback's size however small the
// interface's MTU; an explicit value is never exceeded, and never the route's MTU either (IP would
// fragment). A route below kMinMtuBytes is ignored: the handshake would refuse it.
int connection_mtu(int dev_offer_bytes, int64_t mtu_param, int route_mtu_bytes);

// Whether NCCL_TRIM_MTU = `mtu_param` fits every interface. An explicit value above an
// interface's MTU would be fragmented by IP (a lost fragment loses the packet; a switch cannot
// trim a fragment); auto fails only on an interface whose MTU is below kMinMtuBytes. The error
// names the interface, both MTUs and what to set.
Status check_mtu(const std::vector<NetIf>& devices, int64_t mtu_param);

// Helpers exposed for tests and logging.
// 64-bit FNV-1a: a hash whose value is fixed by definition (std::hash is not), so guids stay
// equal across processes and builds.
uint64_t fnv1a64(const std::string& bytes);
// The sysfs directory name of an interface: "eth0:1" (an address label) -> "eth0".
std::string sysfs_device_name(const std::string& name);

}  // namespace trim::transport

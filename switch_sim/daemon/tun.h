// TUN devices for trim-switch's router mode: each is created inside a rank's network
// namespace, so its netdev lives there while the fd stays with the daemon (the one process
// that sees every packet of every protocol between the ranks).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/socket.h"

namespace trim::sw::daemon {

struct TunSpec {
  std::string netns;  // a name under /var/run/netns, or a path to a namespace file
  std::string name;   // interface name inside it
  uint32_t addr_be = 0;  // its address (/24)
  uint32_t mtu = 9000;
  uint32_t txqueuelen = 10000;
};

// Enters the namespace on this thread, creates the TUN (IFF_TUN | IFF_NO_PI, non-blocking),
// sets its address, MTU and queue length, brings it and the namespace's lo up, and returns to
// the caller's namespace, on error too. Needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root).
Result<sock::Fd> open_tun_in_netns(const TunSpec& spec);

}  // namespace trim::sw::daemon

#include "switch_sim/daemon/tun.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace trim::sw::daemon {

namespace {

// Returns the thread to the namespace it started in when it goes out of scope.
class NetnsGuard {
 public:
  NetnsGuard() : self_(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {}
  ~NetnsGuard() {
    if (entered_) (void)setns(self_.get(), CLONE_NEWNET);
  }
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;
  Status enter(const std::string& netns) {
    if (!self_.valid()) return sock::errno_status("open /proc/self/ns/net");
    const std::string path = netns.find('/') == std::string::npos ? "/var/run/netns/" + netns : netns;
    sock::Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!target.valid()) return sock::errno_status("open " + path);
    if (setns(target.get(), CLONE_NEWNET) != 0) return sock::errno_status("setns " + path);
    entered_ = true;
    return Status::ok();
  }

 private:
  sock::Fd self_;
  bool entered_ = false;
};

Status ifreq_ioctl(int sock, unsigned long req, ifreq* ifr, const char* what, const std::string& name) {
  if (ioctl(sock, req, ifr) != 0) return sock::errno_status(std::string(what) + " " + name);
  return Status::ok();
}

Status bring_up(int sock, const char* name) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  TRIM_RETURN_IF_ERROR(ifreq_ioctl(sock, SIOCGIFFLAGS, &ifr, "SIOCGIFFLAGS", name));
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  return ifreq_ioctl(sock, SIOCSIFFLAGS, &ifr, "SIOCSIFFLAGS", name);
}

}  // namespace

Result<sock::Fd> open_tun_in_netns(const TunSpec& spec) {
  NetnsGuard guard;
  TRIM_RETURN_IF_ERROR(guard.enter(spec.netns));
  sock::Fd tun(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!tun.valid()) return sock::errno_status("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;  // bare IPv4 packets, no 4-byte prefix
  std::strncpy(ifr.ifr_name, spec.name.c_str(), IFNAMSIZ - 1);
  if (ioctl(tun.get(), TUNSETIFF, &ifr) != 0) return sock::errno_status("TUNSETIFF " + spec.name + " in " + spec.netns);
  // The rest is plain interface configuration, on a socket of that namespace.
  sock::Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return sock::errno_status("socket");
  ifreq r{};
  std::strncpy(r.ifr_name, spec.name.c_str(), IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<sockaddr_in*>(&r.ifr_addr);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = spec.addr_be;
  TRIM_RETURN_IF_ERROR(ifreq_ioctl(sock.get(), SIOCSIFADDR, &r, "SIOCSIFADDR", spec.name));
  sin->sin_addr.s_addr = htonl(0xffffff00u);
  TRIM_RETURN_IF_ERROR(ifreq_ioctl(sock.get(), SIOCSIFNETMASK, &r, "SIOCSIFNETMASK", spec.name));
  r = ifreq{};
  std::strncpy(r.ifr_name, spec.name.c_str(), IFNAMSIZ - 1);
  r.ifr_mtu = static_cast<int>(spec.mtu);
  TRIM_RETURN_IF_ERROR(ifreq_ioctl(sock.get(), SIOCSIFMTU, &r, "SIOCSIFMTU", spec.name));
  r = ifreq{};
  std::strncpy(r.ifr_name, spec.name.c_str(), IFNAMSIZ - 1);
  r.ifr_qlen = static_cast<int>(spec.txqueuelen);
  TRIM_RETURN_IF_ERROR(ifreq_ioctl(sock.get(), SIOCSIFTXQLEN, &r, "SIOCSIFTXQLEN", spec.name));
  TRIM_RETURN_IF_ERROR(bring_up(sock.get(), spec.name.c_str()));
  TRIM_RETURN_IF_ERROR(bring_up(sock.get(), "lo"));
  return tun;
}

}  // namespace trim::sw::daemon

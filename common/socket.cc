#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace trim::sock {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status errno_status(const std::string& what) {
  const int e = errno;
  return Status(Code::kSystem, fmt::format("{}: {}", what, std::strerror(e)));
}

sockaddr_in make_addr(uint32_t ip4_be, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip4_be;
  a.sin_port = htons(port);
  return a;
}

std::string addr_string(const sockaddr_in& a) { return addr_string(a.sin_addr.s_addr, ntohs(a.sin_port)); }

std::string addr_string(uint32_t ip4_be, uint16_t port) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr in{};
  in.s_addr = ip4_be;
  inet_ntop(AF_INET, &in, buf, sizeof buf);
  return fmt::format("{}:{}", buf, port);
}

namespace {

Status set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno_status("fcntl(O_NONBLOCK)");
  return Status::ok();
}

// Large socket buffers absorb bursts of a whole window; the FORCE variants pass rmem_max when
// we may, else the plain ones are capped by the kernel and that is fine.
void grow_buffers(int fd) {
  const int bytes = 32 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
}

Result<uint16_t> bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return errno_status("getsockname");
  return static_cast<uint16_t>(ntohs(a.sin_port));
}

// Linux 6.15's uapi value; older headers lack the name.
constexpr int kTcpRtoMinUs = 45;
constexpr uint32_t kKernelRtoMinCeilUs = 200'000;  // TCP_RTO_MIN: the most the option accepts

Status set_tcp_options(int fd, const TcpOptions& opt) {
  // Control frames are small and wait for an answer: Nagle would hold one behind an unacked one.
  // A listener's setting is inherited by the connections it accepts.
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return errno_status("setsockopt(TCP_NODELAY)");
  if (opt.tos >= 0 && setsockopt(fd, IPPROTO_IP, IP_TOS, &opt.tos, sizeof opt.tos) != 0) {
    return errno_status("setsockopt(IP_TOS)");
  }
  // Below two jiffies the kernel says EINVAL (its clock tick is not known here): double until
  // it takes one. ENOPROTOOPT, an older kernel: the system's minimum stays.
  for (uint32_t us = std::min(opt.rto_min_us, kKernelRtoMinCeilUs); us > 0; us = std::min(2 * us, kKernelRtoMinCeilUs)) {
    const int v = static_cast<int>(us);
    if (setsockopt(fd, IPPROTO_TCP, kTcpRtoMinUs, &v, sizeof v) == 0 || errno != EINVAL || us == kKernelRtoMinCeilUs) {
      break;
    }
  }
  return Status::ok();
}

}  // namespace

Result<Fd> open_udp(uint32_t ip4_be, uint16_t* port_out) {
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno_status("socket(UDP)");
  TRIM_RETURN_IF_ERROR(set_nonblocking(fd.get()));
  grow_buffers(fd.get());
  sockaddr_in a = make_addr(ip4_be, 0);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return errno_status("bind(UDP " + addr_string(ip4_be, 0) + ")");
  }
  Result<uint16_t> port = bound_port(fd.get());
  if (!port) return port.status();
  *port_out = port.value();
  return fd;
}

Result<Fd> open_tcp_listener(uint32_t ip4_be, uint16_t* port_out, const TcpOptions& opt) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno_status("socket(TCP)");
  TRIM_RETURN_IF_ERROR(set_nonblocking(fd.get()));
  TRIM_RETURN_IF_ERROR(set_tcp_options(fd.get(), opt));
  sockaddr_in a = make_addr(ip4_be, 0);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return errno_status("bind(TCP " + addr_string(ip4_be, 0) + ")");
  }
  if (::listen(fd.get(), 256) != 0) return errno_status("listen");
  Result<uint16_t> port = bound_port(fd.get());
  if (!port) return port.status();
  *port_out = port.value();
  return fd;
}

Result<Fd> start_tcp_connect(const sockaddr_in& to, const TcpOptions& opt) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno_status("socket(TCP)");
  TRIM_RETURN_IF_ERROR(set_nonblocking(fd.get()));
  TRIM_RETURN_IF_ERROR(set_tcp_options(fd.get(), opt));  // before connect: the SYN carries them too
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) {
    return errno_status("connect(" + addr_string(to) + ")");
  }
  return fd;
}

Result<bool> tcp_connect_done(int fd) {
  pollfd p{fd, POLLOUT, 0};
  const int r = poll(&p, 1, 0);
  if (r < 0) return errno_status("poll");
  if (r == 0) return false;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno_status("getsockopt(SO_ERROR)");
  if (err != 0) {
    errno = err;
    return errno_status("connect");
  }
  return true;
}

uint32_t tcp_rto_min_us(int fd) {
  int v = 0;
  socklen_t len = sizeof v;
  return getsockopt(fd, IPPROTO_TCP, kTcpRtoMinUs, &v, &len) == 0 && v > 0 ? static_cast<uint32_t>(v) : 0;
}

Result<Fd> tcp_accept(int listen_fd) {
  Fd fd(accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd.valid()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return Fd();
    return errno_status("accept");
  }
  return fd;  // TCP_NODELAY and the RTO minimum come from the listener (set_tcp_options)
}

Result<bool> read_some(int fd, uint8_t* buf, size_t want, size_t* have) {
  while (*have < want) {
    const ssize_t n = ::recv(fd, buf + *have, want - *have, MSG_DONTWAIT);
    if (n > 0) {
      *have += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status(Code::kUnavailable, "peer closed the control connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    if (errno == EINTR) continue;
    return errno_status("recv(control)");
  }
  return true;
}

Result<bool> write_some(int fd, const uint8_t* data, size_t bytes, size_t* done) {
  while (*done < bytes) {
    const ssize_t n = ::send(fd, data + *done, bytes - *done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return errno_status("send(control)");
  }
  return true;
}

Status write_all(int fd, const uint8_t* data, size_t bytes, int timeout_ms) {
  size_t done = 0;
  for (;;) {
    Result<bool> w = write_some(fd, data, bytes, &done);
    if (!w) return w.status();
    if (w.value()) return Status::ok();
    pollfd p{fd, POLLOUT, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r == 0) return Status(Code::kUnavailable, "control connection stalled");
    if (r < 0 && errno != EINTR) return errno_status("poll(control)");
  }
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    // No entropy source: fall back to time and address bits; a cookie only needs to differ.
    v = static_cast<uint64_t>(now_ns()) ^ (reinterpret_cast<uintptr_t>(&v) << 17) ^ static_cast<uint64_t>(getpid());
  }
  return v == 0 ? 1 : v;
}

Result<sockaddr_in> parse_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) {
    return Status(Code::kBadConfig, fmt::format("NCCL_TRIM_SWITCH='{}' is not host:port", text));
  }
  const std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) {
    return Status(Code::kBadConfig, fmt::format("NCCL_TRIM_SWITCH='{}': port must be 1..65535", text));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) {
    return Status(Code::kBadConfig, fmt::format("NCCL_TRIM_SWITCH='{}': cannot resolve '{}'", text, host));
  }
  sockaddr_in a = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  a.sin_port = htons(static_cast<uint16_t>(p));
  return a;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace trim::sock

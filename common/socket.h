// Thin RAII and syscall helpers for sockets, addresses and the clock: low enough for every
// layer (the transport, and the switch emulator, which must not depend on the transport).
// Errors come back as Status with the call and errno text; nothing here blocks unless its name
// says so.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace trim::sock {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

Status errno_status(const std::string& what);
sockaddr_in make_addr(uint32_t ip4_be, uint16_t port);
std::string addr_string(const sockaddr_in& a);
std::string addr_string(uint32_t ip4_be, uint16_t port);

// A non-blocking UDP socket bound to ip:0 with large buffers; returns the bound port.
Result<Fd> open_udp(uint32_t ip4_be, uint16_t* port_out);
// What a TCP socket is given before it connects or listens (accepted connections inherit both).
struct TcpOptions {
  int tos = -1;  // >= 0: the IP TOS byte (DSCP << 2) of everything the socket sends
  // > 0: the socket's own minimum retransmission timeout (TCP_RTO_MIN_US, Linux 6.15; the
  // kernel rounds it up to whole jiffies, between 2 of them and 200 ms). Where the kernel lacks
  // it the socket keeps the system's (200 ms unless an operator lowered it): not an error.
  uint32_t rto_min_us = 0;
};
// A non-blocking listening TCP socket on ip:0.
Result<Fd> open_tcp_listener(uint32_t ip4_be, uint16_t* port_out, const TcpOptions& opt = {});
// Starts a non-blocking connect.
Result<Fd> start_tcp_connect(const sockaddr_in& to, const TcpOptions& opt = {});
// The socket's own minimum RTO in microseconds, as the kernel keeps it; 0 where the kernel has
// no per-socket minimum (before Linux 6.15).
uint32_t tcp_rto_min_us(int fd);
// Whether a connect started above has finished: ok(true) connected, ok(false) not yet.
Result<bool> tcp_connect_done(int fd);
// Non-blocking accept; ok(invalid Fd) when nobody is waiting.
Result<Fd> tcp_accept(int listen_fd);
// Reads into buf[*have, want); ok(true) once `want` bytes are there. EOF is an error.
Result<bool> read_some(int fd, uint8_t* buf, size_t want, size_t* have);
// Writes data[*done, bytes) without waiting; ok(true) once all of it is written, ok(false) when
// the socket's send buffer is full (call again when it has room).
Result<bool> write_some(int fd, const uint8_t* data, size_t bytes, size_t* done);
// Writes all of `bytes`, waiting (poll) up to timeout_ms for room. Tests and tools only: the
// plugin never waits for a socket (write_some, transport/ctrl_out.h).
Status write_all(int fd, const uint8_t* data, size_t bytes, int timeout_ms);
// 64 random bits from the kernel.
uint64_t random_u64();
// Parses "host:port" (IPv4 or a resolvable name).
Result<sockaddr_in> parse_host_port(const std::string& text);
uint64_t now_ns();

}  // namespace trim::sock

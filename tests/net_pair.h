// Connecting a send comm to a receive comm through trim::net, as NCCL's proxy does: listen on
// the receiver, then connect and accept, both non-blocking, retried until both are done.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/net_api.h"
#include "transport/socket.h"

namespace trim::testing {

// Listens on recv_ctx's device 0 (the listen comm is left in *listen for the caller to close)
// and connects from send_ctx; fails the test after 10 s without both ends.
using net::Context;
using net::ListenComm;
using net::RecvComm;
using net::SendComm;

// Posts a send (a receive) of one buffer, retrying while every request slot is taken.
inline net::Request* post_send(SendComm* send, const void* data, size_t bytes) {
  for (;;) {
    Result<net::Request*> r = net::isend(send, data, bytes, 0, nullptr, nullptr);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok() || r.value() != nullptr) return r.is_ok() ? r.value() : nullptr;
    std::this_thread::yield();
  }
}
inline net::Request* post_recv(RecvComm* recv, void* data, size_t capacity) {
  net::RecvBuffer b;
  b.data = data;
  b.capacity_bytes = capacity;
  for (;;) {
    Result<net::Request*> r = net::irecv(recv, 1, &b, false);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok() || r.value() != nullptr) return r.is_ok() ? r.value() : nullptr;
    std::this_thread::yield();
  }
}

// Waits for a request; returns the completed size, or -1 on error/timeout.
inline int64_t wait_request(net::Request* r, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    net::Completion c;
    if (!net::test(r, &c).is_ok()) return -1;
    if (c.done) return static_cast<int64_t>(c.sizes_bytes[0]);
    std::this_thread::yield();
  }
  return -1;
}

// One counter of stats_json(), -1 when absent.
inline long long stats_counter(const char* name) {
  const std::string j = net::stats_json();
  const std::string key = std::string("\"") + name + "\":";
  const size_t at = j.find(key);
  return at == std::string::npos ? -1LL : std::stoll(j.substr(at + key.size()));
}

// Sends `bytes` as one UDP datagram to device 0's progress engine, as a stranger would.
inline void send_to_engine(const std::vector<uint8_t>& bytes) {
  Result<std::string> ep = net::engine_endpoint(0);
  ASSERT_TRUE(ep.is_ok()) << ep.status().to_string();
  Result<sockaddr_in> to = transport::parse_host_port(ep.value());
  ASSERT_TRUE(to.is_ok());
  transport::Fd udp(socket(AF_INET, SOCK_DGRAM, 0));
  ASSERT_TRUE(udp.valid());
  ASSERT_EQ(sendto(udp.get(), bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to.value()),
                   sizeof(sockaddr_in)),
            static_cast<ssize_t>(bytes.size()));
}

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

inline void connect_pair(Context* send_ctx, Context* recv_ctx, SendComm** send, RecvComm** recv, ListenComm** listen) {
  uint8_t handle[net::kMaxHandleBytes] = {};
  Result<ListenComm*> l = trim::net::listen(recv_ctx, 0, handle, sizeof handle);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  *listen = l.value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((*send == nullptr || *recv == nullptr) && std::chrono::steady_clock::now() < deadline) {
    if (*send == nullptr) {
      Result<SendComm*> s = net::connect(send_ctx, 0, handle, net::ConnectOptions());
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      *send = s.value();
    }
    if (*recv == nullptr) {
      Result<RecvComm*> r = net::accept(*listen);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      *recv = r.value();
    }
  }
  ASSERT_NE(*send, nullptr) << "no connection in 10 s";
  ASSERT_NE(*recv, nullptr) << "no connection in 10 s";
}

// Closes whatever of a pair is open, expecting each close to succeed, and clears the pointers.
inline void close_pair(SendComm** send, RecvComm** recv, ListenComm** listen) {
  if (*send != nullptr) {
    EXPECT_TRUE(net::close_send(*send).is_ok());
  }
  if (*recv != nullptr) {
    EXPECT_TRUE(net::close_recv(*recv).is_ok());
  }
  if (*listen != nullptr) {
    EXPECT_TRUE(net::close_listen(*listen).is_ok());
  }
  *send = nullptr;
  *recv = nullptr;
  *listen = nullptr;
}

// A context of default options with a connected pair on it (a test fixture's SetUp), and its
// teardown: the pair closed, then the context finalized.
inline void open_loopback(Context** ctx, SendComm** send, RecvComm** recv, ListenComm** listen) {
  Result<Context*> c = net::init(net::InitOptions());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  *ctx = c.value();
  connect_pair(*ctx, *ctx, send, recv, listen);
}

inline void close_loopback(Context** ctx, SendComm** send, RecvComm** recv, ListenComm** listen) {
  close_pair(send, recv, listen);
  if (*ctx != nullptr) {
    EXPECT_TRUE(net::finalize(*ctx).is_ok());
  }
  *ctx = nullptr;
}

}  // namespace trim::testing

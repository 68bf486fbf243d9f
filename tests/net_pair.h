// Connecting a send comm to a receive comm through trim::net, as NCCL's proxy does: listen on
// the receiver, then connect and accept, both non-blocking, retried until both are done.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "transport/net_api.h"

namespace trim::testing {

// Listens on recv_ctx's device 0 (the listen comm is left in *listen for the caller to close)
// and connects from send_ctx; fails the test after 10 s without both ends.
using net::Context;
using net::ListenComm;
using net::RecvComm;
using net::SendComm;

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

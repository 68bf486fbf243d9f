// A hand-made peer for the control handshake's checks (transport/wire.h), shared by the tests of
// its version (handshake_version_test) and MTU (mtu_test) checks: a raw-socket listener that our
// connect() talks to, and the raw connector side of our accept().
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <chrono>
#include <functional>
#include <utility>

#include "common/params.h"
#include "tests/env_guard.h"
#include "transport/net_api.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace trim::testing {

using HandshakeClock = std::chrono::steady_clock;

// One trim::net context on loopback for each test, made from make_params().
class LoopbackContextTest : public ::testing::Test {
 protected:
  virtual trim::Params make_params() {
    trim::Params p = trim::default_params();
    p.ifname = "lo";
    return p;
  }
  void SetUp() override {
    params_ = make_params();
    net::InitOptions o;
    o.params = &params_;
    Result<net::Context*> c = net::init(o);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ctx_ = c.value();
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_TRUE(net::finalize(ctx_).is_ok());
    }
  }

  EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  trim::Params params_;
  net::Context* ctx_ = nullptr;
};

// What the fake listener of connect_to_fake_listener() does, and the Hello it got.
struct FakeListener {
  uint16_t handle_version = transport::kFrameVersion;  // the version its handle states
  // Called once the Hello is whole: writes the answer frame to `ack` and returns true, or
  // returns false to leave the Hello unanswered. None: never answers.
  std::function<bool(const uint8_t* hello, uint8_t ack[transport::kFrameBytes])> answer;
  uint8_t hello[transport::kHelloBytes] = {};  // out: what arrived of connect()'s Hello
};

// Runs our connect() from ctx against a raw listener on loopback, played as `fake` says, until
// connect() fails (its status; the Hello it sent before it gave up is read first) or connects
// (true; the connection is closed at once). An error after 10 s without either.
inline Result<bool> connect_to_fake_listener(net::Context* ctx, FakeListener* fake) {
  uint16_t port = 0;
  const uint32_t lo = htonl(INADDR_LOOPBACK);
  Result<transport::Fd> lfd = transport::open_tcp_listener(lo, &port);
  if (!lfd) return lfd.status();
  transport::ListenHandle listen_handle{lo, port, 42};
  listen_handle.version = fake->handle_version;
  uint8_t handle[net::kMaxHandleBytes] = {};
  transport::write_handle(listen_handle, handle);
  transport::Fd peer;
  size_t have = 0;
  bool answered = false;
  const auto deadline = HandshakeClock::now() + std::chrono::seconds(10);
  auto take_hello = [&] {
    while (have < transport::kHelloBytes && HandshakeClock::now() < deadline) {
      if (!peer.valid()) {
        Result<transport::Fd> a = transport::tcp_accept(lfd->get());
        if (a.is_ok() && a->valid()) peer = std::move(a).value();
        continue;
      }
      if (!transport::read_some(peer.get(), fake->hello, transport::kHelloBytes, &have).is_ok()) return;
    }
  };
  while (HandshakeClock::now() < deadline) {
    Result<net::SendComm*> s = net::connect(ctx, 0, handle, net::ConnectOptions());
    if (!s.is_ok()) {
      take_hello();
      return s.status();
    }
    if (s.value() != nullptr) {
      EXPECT_TRUE(net::close_send(s.value()).is_ok());
      return true;
    }
    if (!peer.valid()) {
      Result<transport::Fd> a = transport::tcp_accept(lfd->get());
      if (!a) return a.status();
      peer = std::move(a).value();
      continue;
    }
    if (answered) continue;
    Result<bool> got = transport::read_some(peer.get(), fake->hello, transport::kHelloBytes, &have);
    if (!got) return got.status();
    if (!got.value()) continue;
    answered = true;  // the Hello is whole: answered now or never
    uint8_t out[transport::kFrameBytes];
    if (!fake->answer || !fake->answer(fake->hello, out)) continue;
    TRIM_RETURN_IF_ERROR(transport::write_all(peer.get(), out, sizeof out, 1000));
  }
  return Status(Code::kInternal, "connect did not finish in 10 s");
}

// A raw TCP connection to the listener of `target`, connected (an error if not by `deadline`).
inline Result<transport::Fd> raw_connect(const transport::ListenHandle& target, HandshakeClock::time_point deadline) {
  Result<transport::Fd> fd = transport::start_tcp_connect(transport::make_addr(target.ip4_be, target.tcp_port));
  if (!fd) return fd.status();
  while (HandshakeClock::now() < deadline) {
    Result<bool> done = transport::tcp_connect_done(fd->get());
    if (!done) return done.status();
    if (done.value()) return fd;
  }
  return Status(Code::kInternal, "the raw connection did not finish");
}

// Calls accept() until it refuses the connection: its status (ok when it never answered by
// `deadline`; an error of our own when it accepted).
inline Status accept_refusal(net::ListenComm* l, HandshakeClock::time_point deadline) {
  while (HandshakeClock::now() < deadline) {
    Result<net::RecvComm*> r = net::accept(l);
    if (!r.is_ok()) return r.status();
    if (r.value() != nullptr) return Status(Code::kInternal, "accept() took a Hello it should have refused");
  }
  return Status::ok();
}

// Reads the HelloAck a raw connection gets (an error if none by `deadline`).
inline Status read_hello_ack(int fd, HandshakeClock::time_point deadline, transport::HelloAck* ack) {
  uint8_t buf[transport::kFrameBytes] = {};
  size_t have = 0;
  while (HandshakeClock::now() < deadline) {
    Result<bool> got = transport::read_some(fd, buf, sizeof buf, &have);
    if (!got) return got.status();
    if (got.value()) return transport::parse_hello_ack(buf, ack);
  }
  return Status(Code::kInternal, "no HelloAck");
}

}  // namespace trim::testing

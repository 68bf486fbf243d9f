// NCCL_TRIM_MTU end to end through trim::net: each end offers its device's MTU (auto: the
// interface's, at most 9000; else the explicit value), a connection agrees on the smaller at the
// handshake, and both ends cut and decode packets of that size. Two contexts with different
// params in one process (InitOptions.params), plus a hand-made peer for the handshake's checks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codec/layout.h"
#include "common/param_enums.h"
#include "tests/env_guard.h"
#include "tests/handshake_peer.h"
#include "tests/net_pair.h"
#include "transport/devices.h"
#include "transport/net_api.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace trim::net {
namespace {

using Clock = std::chrono::steady_clock;

// Loopback only, and fp32 declared so that ReduceScatter SIMPLE sends are trimmable.
Params params_with_mtu(int64_t mtu) {
  Params p = default_params();
  p.ifname = "lo";
  p.mtu = mtu;
  p.dtype = static_cast<int>(param::Dtype::kFp32);
  return p;
}

// One counter of stats_json() (connections add theirs when they close), -1 when absent.
long long counter(const char* name) {
  const std::string j = stats_json();
  const std::string key = std::string("\"") + name + "\":";
  const size_t at = j.find(key);
  return at == std::string::npos ? -1LL : std::stoll(j.substr(at + key.size()));
}

// Data packets of a message at `mtu_bytes`, as both ends lay it out.
uint64_t packets_at(uint32_t mtu_bytes, codec::DType dtype, codec::Scheme scheme, uint64_t bytes) {
  codec::CodecConfig cfg = codec::CodecConfig::from_params(default_params(), mtu_bytes).value();
  return codec::Layout::make(cfg, dtype, scheme, bytes).value().packets();
}

// The MTU auto resolves to on loopback here.
int loopback_auto_mtu() {
  Result<std::vector<transport::NetIf>> devs = transport::discover_interfaces("=lo", 1);
  EXPECT_TRUE(devs.is_ok()) << devs.status().to_string();
  return devs.is_ok() ? transport::resolve_mtu(devs->front(), kAuto) : 0;
}

class MtuPair : public ::testing::Test {
 protected:
  void TearDown() override { close_all(); }

  // A sending context with `send_mtu`, a receiving one with `recv_mtu`, connected on device 0.
  void connect_pair(int64_t send_mtu, int64_t recv_mtu) {
    send_params_ = params_with_mtu(send_mtu);
    recv_params_ = params_with_mtu(recv_mtu);
    InitOptions so, ro;
    so.params = &send_params_;
    ro.params = &recv_params_;
    Result<Context*> a = init(so);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    send_ctx_ = a.value();
    Result<Context*> b = init(ro);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    recv_ctx_ = b.value();
    testing::connect_pair(send_ctx_, recv_ctx_, &send_, &recv_, &listen_);
  }

  // Sends `in` and receives it; returns whether it arrived bit for bit.
  bool exchange(const std::vector<uint8_t>& in) {
    std::vector<uint8_t> out(in.size() + 64, 0xEE);
    RecvBuffer b;
    b.data = out.data();
    b.capacity_bytes = out.size();
    Request* r = nullptr;
    Request* s = nullptr;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while ((r == nullptr || s == nullptr) && Clock::now() < deadline) {
      if (r == nullptr) {
        Result<Request*> rr = irecv(recv_, 1, &b, false);
        EXPECT_TRUE(rr.is_ok()) << rr.status().to_string();
        if (!rr.is_ok()) return false;
        r = rr.value();
      }
      if (s == nullptr) {
        Result<Request*> ss = isend(send_, in.data(), in.size(), 0, nullptr, nullptr);
        EXPECT_TRUE(ss.is_ok()) << ss.status().to_string();
        if (!ss.is_ok()) return false;
        s = ss.value();
      }
    }
    bool s_done = false, r_done = false;
    size_t got = 0;
    while ((!s_done || !r_done) && Clock::now() < deadline) {
      Completion c;
      if (!s_done) {
        if (!test(s, &c).is_ok()) return false;
        s_done = c.done;
      }
      if (!r_done) {
        if (!test(r, &c).is_ok()) return false;
        r_done = c.done;
        got = c.sizes_bytes[0];
      }
      std::this_thread::yield();
    }
    EXPECT_TRUE(s_done && r_done) << "no completion in 20 s";
    EXPECT_EQ(got, in.size());
    return s_done && r_done && got == in.size() && std::memcmp(in.data(), out.data(), in.size()) == 0;
  }

  void set_attr(Func func) {
    OpAttr attr;
    attr.func = func;
    attr.algo = Algo::kRing;
    attr.proto = Proto::kSimple;
    ASSERT_TRUE(set_op_attr(send_ctx_, attr).is_ok());
  }

  void close_all() {
    testing::close_pair(&send_, &recv_, &listen_);
    if (send_ctx_ != nullptr) {
      EXPECT_TRUE(finalize(send_ctx_).is_ok());
    }
    if (recv_ctx_ != nullptr) {
      EXPECT_TRUE(finalize(recv_ctx_).is_ok());
    }
    send_ctx_ = recv_ctx_ = nullptr;
  }

  // A trimmable fp32 message (rht) and an exact one, bit for bit; returns the data packets the
  // sender sent for them (first sends only: retransmissions are not the layout's).
  long long send_both_kinds() {
    const long long sent0 = counter("sent_packets"), retx0 = counter("retransmitted_packets");
    std::vector<float> grad(kFloats);
    std::mt19937 g(5);
    std::normal_distribution<float> n(0, 1);
    for (float& v : grad) v = n(g);
    std::vector<uint8_t> trimmable(kFloats * 4);
    std::memcpy(trimmable.data(), grad.data(), trimmable.size());
    set_attr(Func::kReduceScatter);  // SIMPLE ReduceScatter of the declared fp32: trimmable
    EXPECT_TRUE(exchange(trimmable)) << "trimmable message not bit-exact";
    std::vector<uint8_t> exact(kExactBytes);
    for (size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<uint8_t>(g());
    set_attr(Func::kBroadcast);  // never trimmed
    EXPECT_TRUE(exchange(exact)) << "exact message not bit-exact";
    close_all();  // the counters arrive at close
    return (counter("sent_packets") - sent0) - (counter("retransmitted_packets") - retx0);
  }

  static uint64_t expected_packets(uint32_t mtu_bytes) {
    return packets_at(mtu_bytes, codec::DType::kF32, codec::Scheme::kRht, kFloats * 4) +
           packets_at(mtu_bytes, codec::DType::kRaw, codec::Scheme::kNone, kExactBytes);
  }

  static constexpr size_t kFloats = 1 << 18;        // 1 MiB: above NCCL_TRIM_MIN_BYTES
  static constexpr size_t kExactBytes = 1000003;  // odd: a short last packet
  testing::EnvGuard ifname_{"NCCL_TRIM_IFNAME", "lo"};
  Params send_params_, recv_params_;
  Context* send_ctx_ = nullptr;
  Context* recv_ctx_ = nullptr;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
};

// The smaller end's MTU wins whichever side it is on; packets of the larger would have been
// fewer, so the count tells which size both ends used (the receiver decodes with the same layout,
// or the bytes would not match).
TEST_F(MtuPair, SmallerMtuIsAgreedWhicheverEndHasIt) {
  ASSERT_NE(expected_packets(1500), expected_packets(4096));
  for (const auto& [send_mtu, recv_mtu] : {std::pair<int64_t, int64_t>{1500, 4096}, {4096, 1500}}) {
    SCOPED_TRACE("sender " + std::to_string(send_mtu) + ", receiver " + std::to_string(recv_mtu));
    connect_pair(send_mtu, recv_mtu);
    if (HasFatalFailure()) return;
    EXPECT_EQ(send_both_kinds(), static_cast<long long>(expected_packets(1500)));
  }
}

// auto on both ends: loopback's 65536 is capped at 9000.
TEST_F(MtuPair, AutoOffersTheInterfaceMtuCappedAt9000) {
  const int mtu = loopback_auto_mtu();
  ASSERT_GE(mtu, transport::kMinMtuBytes);
  EXPECT_LE(mtu, transport::kAutoMtuCapBytes);
  ASSERT_NE(expected_packets(static_cast<uint32_t>(mtu)), expected_packets(codec::kNoInterfaceMtuBytes));
  connect_pair(kAuto, kAuto);
  if (HasFatalFailure()) return;
  EXPECT_EQ(send_both_kinds(), static_cast<long long>(expected_packets(static_cast<uint32_t>(mtu))));
}

// An explicit value meets auto: the explicit 1500 is below loopback's auto.
TEST_F(MtuPair, ExplicitMeetsAuto) {
  ASSERT_GT(loopback_auto_mtu(), 1500);
  connect_pair(kAuto, 1500);
  if (HasFatalFailure()) return;
  EXPECT_EQ(send_both_kinds(), static_cast<long long>(expected_packets(1500)));
}

// ---- The handshake's MTU checks, against a hand-made peer ----

class MtuHandshake : public testing::LoopbackContextTest {
 protected:
  Params make_params() override { return params_with_mtu(1500); }

  // Our connect() against a fake listener that answers its Hello with `ack_mtu`; returns the
  // Hello it got and connect()'s final status.
  Status connect_to_fake(uint16_t ack_mtu, transport::Hello* hello_out) {
    testing::FakeListener fake;
    fake.answer = [&](const uint8_t* hello, uint8_t* out) {
      EXPECT_TRUE(transport::parse_hello(hello, hello_out).is_ok());
      transport::HelloAck ack;
      ack.udp_ip4_be = htonl(INADDR_LOOPBACK);
      ack.udp_port = 9;  // never used: the connection is refused or closed at once
      ack.mtu = ack_mtu;
      transport::write_hello_ack(ack, out);
      return true;
    };
    return testing::connect_to_fake_listener(ctx_, &fake).status();
  }
};

// The Hello carries the resolved MTU (never auto's -1), and an ack above it or below 256 is
// refused naming the value: a peer that agrees on more than we offered would make us send
// packets IP may fragment.
TEST_F(MtuHandshake, ConnectSideChecksTheAgreedMtu) {
  transport::Hello hello;
  Status ok = connect_to_fake(1400, &hello);
  EXPECT_TRUE(ok.is_ok()) << ok.to_string();
  EXPECT_EQ(hello.mtu, 1500);
  for (uint16_t bad : {uint16_t{1501}, uint16_t{255}, uint16_t{0}}) {
    Status st = connect_to_fake(bad, &hello);
    ASSERT_FALSE(st.is_ok()) << bad;
    EXPECT_NE(st.message().find("agrees on MTU " + std::to_string(bad) + ", outside [256, 1500]"), std::string::npos)
        << st.to_string();
  }
}

// A Hello offering less than 256 is refused with its own reason, and the accept names it.
TEST_F(MtuHandshake, AcceptSideRefusesAnMtuBelow256) {
  uint8_t handle[kMaxHandleBytes] = {};
  Result<ListenComm*> l = listen(ctx_, 0, handle, sizeof handle);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  transport::ListenHandle target;
  ASSERT_TRUE(transport::parse_handle(handle, &target).is_ok());
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  Result<transport::Fd> fd = testing::raw_connect(target, deadline);
  ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
  transport::Hello h;
  h.listen_nonce = target.nonce;
  h.cookie = 7;
  h.udp_ip4_be = target.ip4_be;
  h.udp_port = 9;
  h.mtu = 200;
  h.scheme = static_cast<uint8_t>(codec::Scheme::kRht);
  h.head_bits = 1;
  h.row_elems = 32768;
  h.seed = params_.seed;
  h.clip_sigmas = static_cast<float>(params_.clip_sigmas);
  uint8_t out[transport::kHelloBytes];
  transport::write_hello(h, out);
  ASSERT_TRUE(transport::write_all(fd->get(), out, sizeof out, 1000).is_ok());
  const Status refused = testing::accept_refusal(l.value(), deadline);
  ASSERT_FALSE(refused.is_ok()) << "accept never answered";
  EXPECT_NE(refused.message().find("offers MTU 200, below 256"), std::string::npos) << refused.to_string();
  transport::HelloAck ack;
  const Status got_ack = testing::read_hello_ack(fd->get(), deadline, &ack);
  ASSERT_TRUE(got_ack.is_ok()) << got_ack.to_string();
  EXPECT_EQ(ack.status, transport::kHelloBadMtu);
  EXPECT_TRUE(close_listen(l.value()).is_ok());
}

// Two ends that differ in MTU and in another codec setting are still refused, for the other one.
TEST_F(MtuPair, OtherCodecSettingsMustStillMatch) {
  send_params_ = params_with_mtu(1500);
  recv_params_ = params_with_mtu(4096);
  recv_params_.row_elems = 1024;
  InitOptions so, ro;
  so.params = &send_params_;
  ro.params = &recv_params_;
  send_ctx_ = init(so).value();
  recv_ctx_ = init(ro).value();
  uint8_t handle[kMaxHandleBytes] = {};
  listen_ = listen(recv_ctx_, 0, handle, sizeof handle).value();
  Status send_err, recv_err;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while ((send_err.is_ok() || recv_err.is_ok()) && Clock::now() < deadline) {
    if (send_err.is_ok()) {
      Result<SendComm*> s = connect(send_ctx_, 0, handle, ConnectOptions());
      ASSERT_TRUE(!s.is_ok() || s.value() == nullptr) << "connected despite different NCCL_TRIM_ROW_ELEMS";
      if (!s.is_ok()) send_err = s.status();
    }
    if (recv_err.is_ok()) {
      Result<RecvComm*> r = accept(listen_);
      ASSERT_TRUE(!r.is_ok() || r.value() == nullptr) << "accepted despite different NCCL_TRIM_ROW_ELEMS";
      if (!r.is_ok()) recv_err = r.status();
    }
  }
  EXPECT_NE(send_err.message().find("different NCCL_TRIM_* codec settings"), std::string::npos) << send_err.to_string();
  EXPECT_NE(recv_err.message().find("NCCL_TRIM_ROW_ELEMS differs"), std::string::npos) << recv_err.to_string();
  EXPECT_EQ(recv_err.message().find("MTU"), std::string::npos) << recv_err.to_string();
}

}  // namespace
}  // namespace trim::net

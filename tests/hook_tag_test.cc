// How the transport recognises the nccl_trim comm hook's communicator: NCCL's per-communicator
// traffic class (v11 init; v10 passes it to connect) equal to NCCL_TRIM_HOOK_TRAFFIC_CLASS makes
// a send connection offer scheme `rotated` where its context would rotate per hop (rht), but only
// once the hook has declared that class rotated, in the context's rows (declare_rotated): a tag
// alone is trusted by nobody, and such data goes as rht (counted). The receiver takes `rotated`
// when it would take rht (and decodes the data), and refuses it otherwise, saying why.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/param_enums.h"
#include "tests/close_util.h"
#include "tests/env_guard.h"
#include "tests/net_pair.h"
#include "transport/net_api.h"

namespace trim::net {
namespace {

class HookTag : public ::testing::Test {
 protected:
  void SetUp() override { forget_rotated_declarations_for_tests(); }
  // What the hook does before it creates its group (the default rows: 2^15 = NCCL_TRIM_ROW_ELEMS).
  void declare() { ASSERT_TRUE(declare_rotated(116, 15).is_ok()); }
  Context* make_ctx(int traffic_class, param::Scheme scheme = param::Scheme::kRht, uint32_t row_elems = 32768) {
    Params p = default_params();
    p.row_elems = row_elems;
    p.ifname = "lo";
    p.scheme = static_cast<int>(scheme);
    p.dtype = static_cast<int>(param::Dtype::kFp32);  // no profiler here: sends are trimmable by
    p.phase = static_cast<int>(param::Phase::kAll);   // the declared dtype, whatever the phase
    InitOptions opt;
    opt.params = &p;  // copied by init
    opt.traffic_class = traffic_class;
    Result<Context*> c = init(opt);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    contexts_.push_back(c.is_ok() ? c.value() : nullptr);
    return contexts_.back();
  }
  // One trimmable fp32 message (1 MiB) from send_ to recv_: "" when it arrives bit exact
  // (untrimmed, every scheme decodes to the original bits), else what went wrong.
  std::string send_checked(Context* sender, uint32_t seed) {
    using namespace close_test;
    const std::vector<uint8_t> in = gaussian_floats(262144, seed);
    std::vector<uint8_t> out(in.size(), 0xEE);
    if (!set_trimmable(sender, true).is_ok()) return "set_op_attr failed";
    Result<Request*> r = post_recv(recv_, out.data(), out.size());
    Result<Request*> s = post_send(send_, in.data(), in.size());
    if (!r.is_ok() || r.value() == nullptr || !s.is_ok() || s.value() == nullptr) return "could not post";
    const Outcome so = await(s.value(), milliseconds(10000));
    const Outcome ro = await(r.value(), milliseconds(10000));
    if (so.end != End::kDone) return "send did not complete: " + so.error;
    if (ro.end != End::kDone || ro.bytes != in.size()) return "receive did not complete: " + ro.error;
    return out == in ? "" : "bytes differ";
  }
  void TearDown() override {
    forget_rotated_declarations_for_tests();
    testing::close_pair(&send_, &recv_, &listen_);
    for (Context* c : contexts_) {
      if (c != nullptr) {
        EXPECT_TRUE(finalize(c).is_ok());
      }
    }
  }

  std::vector<Context*> contexts_;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
};

TEST_F(HookTag, DeclaredTaggedContextSendsRotatedToAnUntaggedReceiver) {
  declare();
  const HookCounters before = hook_counters();
  Context* hook = make_ctx(116);
  Context* plain = make_ctx(kTrafficClassUnset);
  EXPECT_EQ(hook_counters().comms, before.comms + 1);
  testing::connect_pair(hook, plain, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns + 1);
  // Data through the pair: sent rotated (counted), decoded by the untagged receiver exactly.
  EXPECT_EQ(send_checked(hook, 11), "");
  EXPECT_EQ(hook_counters().rotated_messages, before.rotated_messages + 1);
  testing::close_pair(&send_, &recv_, &listen_);
  // The other direction: an ordinary sender into the hook's context stays rht.
  testing::connect_pair(plain, hook, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns + 1);
  EXPECT_EQ(send_checked(plain, 12), "");
  EXPECT_EQ(hook_counters().rotated_messages, before.rotated_messages + 1);
}

// The same pair without the hook's declaration: the tag alone is not trusted. The data goes as
// per-hop rht (nothing counted as rotated; bit exact), and the connection is counted undeclared.
TEST_F(HookTag, UndeclaredTaggedContextSendsRht) {
  const HookCounters before = hook_counters();
  Context* hook = make_ctx(116);
  Context* plain = make_ctx(kTrafficClassUnset);
  EXPECT_EQ(hook_counters().comms, before.comms + 1);
  testing::connect_pair(hook, plain, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns);
  EXPECT_EQ(hook_counters().undeclared_conns, before.undeclared_conns + 1);
  EXPECT_EQ(send_checked(hook, 13), "");
  EXPECT_EQ(hook_counters().rotated_messages, before.rotated_messages);
  testing::close_pair(&send_, &recv_, &listen_);
  // Declared now: the next connection of the same context is the hook's.
  declare();
  testing::connect_pair(hook, plain, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns + 1);
  EXPECT_EQ(send_checked(hook, 14), "");
  EXPECT_EQ(hook_counters().rotated_messages, before.rotated_messages + 1);
  EXPECT_EQ(hook_counters().undeclared_conns, before.undeclared_conns + 1);
}

// The declaration must match NCCL_TRIM_ROW_ELEMS and NCCL_TRIM_HOOK_TRAFFIC_CLASS (both named
// when not); a context whose rows differ from the declared ones still rotates per hop.
TEST_F(HookTag, DeclarationOfOtherRowsOrAnotherClassIsRefused) {
  {
    trim::testing::EnvGuard rows{"NCCL_TRIM_ROW_ELEMS", "4096"};
    Status st = declare_rotated(116, 15);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("rows of 2^15 elements (row_log2=15)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("NCCL_TRIM_ROW_ELEMS is 4096"), std::string::npos) << st.message();
    EXPECT_TRUE(declare_rotated(116, 12).is_ok());
  }
  Status other = declare_rotated(117, 15);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.message().find("traffic class 117"), std::string::npos) << other.message();
  EXPECT_NE(other.message().find("NCCL_TRIM_HOOK_TRAFFIC_CLASS is 116"), std::string::npos) << other.message();
  {
    trim::testing::EnvGuard bad{"NCCL_TRIM_ROW_ELEMS", "1000"};
    EXPECT_FALSE(declare_rotated(116, 15).is_ok());  // an invalid environment: its own error
  }
  // Declared rows of 2^12, a context of 2^15-element rows: rht, counted.
  const HookCounters before = hook_counters();
  Context* hook = make_ctx(116);
  Context* plain = make_ctx(kTrafficClassUnset);
  testing::connect_pair(hook, plain, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns);
  EXPECT_EQ(hook_counters().undeclared_conns, before.undeclared_conns + 1);
  EXPECT_EQ(send_checked(hook, 15), "");
  EXPECT_EQ(hook_counters().rotated_messages, before.rotated_messages);
}

// Net v10 has no per-communicator init; its connect carries the class.
TEST_F(HookTag, ConnectOptionsTagOneConnection) {
  declare();
  const HookCounters before = hook_counters();
  Context* plain = make_ctx(kTrafficClassUnset);
  uint8_t handle[kMaxHandleBytes] = {};
  Result<ListenComm*> l = listen(plain, 0, handle, sizeof handle);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  listen_ = l.value();
  ConnectOptions tagged;
  tagged.traffic_class = 116;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((send_ == nullptr || recv_ == nullptr) && std::chrono::steady_clock::now() < deadline) {
    if (send_ == nullptr) {
      Result<SendComm*> s = connect(plain, 0, handle, tagged);
      ASSERT_TRUE(s.is_ok()) << s.status().to_string();
      send_ = s.value();
    }
    if (recv_ == nullptr) {
      Result<RecvComm*> r = accept(listen_);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      recv_ = r.value();
    }
  }
  ASSERT_NE(send_, nullptr);
  ASSERT_NE(recv_, nullptr);
  EXPECT_EQ(hook_counters().comms, before.comms);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns + 1);
}

// Under any other scheme the tag changes nothing: the data is sent as that scheme says.
TEST_F(HookTag, OtherSchemesIgnoreTheTag) {
  declare();
  const HookCounters before = hook_counters();
  Context* hook = make_ctx(116, param::Scheme::kSign);
  Context* plain = make_ctx(kTrafficClassUnset, param::Scheme::kSign);
  testing::connect_pair(hook, plain, &send_, &recv_, &listen_);
  EXPECT_EQ(hook_counters().comms, before.comms + 1);
  EXPECT_EQ(hook_counters().send_conns, before.send_conns);
  EXPECT_EQ(hook_counters().undeclared_conns, before.undeclared_conns);
}

// A receiver configured for another scheme refuses a rotated offer, naming both.
TEST_F(HookTag, ReceiverOfAnotherSchemeRefusesRotated) {
  declare();
  Context* hook = make_ctx(116);
  Context* sign = make_ctx(kTrafficClassUnset, param::Scheme::kSign);
  uint8_t handle[kMaxHandleBytes] = {};
  Result<ListenComm*> l = listen(sign, 0, handle, sizeof handle);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  listen_ = l.value();
  std::string accept_error, connect_error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((accept_error.empty() || connect_error.empty()) && std::chrono::steady_clock::now() < deadline) {
    if (connect_error.empty()) {
      Result<SendComm*> s = connect(hook, 0, handle, ConnectOptions());
      ASSERT_TRUE(s.is_ok() ? s.value() == nullptr : true) << "connected despite the mismatch";
      if (!s.is_ok()) connect_error = s.status().message();
    }
    if (accept_error.empty()) {
      Result<RecvComm*> r = accept(listen_);
      ASSERT_TRUE(r.is_ok() ? r.value() == nullptr : true) << "accepted despite the mismatch";
      if (!r.is_ok()) accept_error = r.status().message();
    }
  }
  EXPECT_NE(accept_error.find("NCCL_TRIM_SCHEME differs: sign here, rotated at the peer"), std::string::npos)
      << accept_error;
  EXPECT_NE(connect_error.find("different NCCL_TRIM_* codec settings"), std::string::npos) << connect_error;
}

}  // namespace
}  // namespace trim::net

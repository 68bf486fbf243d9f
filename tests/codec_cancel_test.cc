// Close and deregMr against a stalled codec worker (tests/stalled_workers.h holds every codec
// task at its start). NCCL frees an operation's buffers as soon as either call returns,
// so both must wait for every codec task that may still use them, however long that takes
// (never give up at NCCL_TRIM_TIMEOUT_MS), and the tasks of the operations they abandon must be
// cancelled: once the worker moves again, none of them may read or write NCCL's buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/param_enums.h"
#include "tests/close_util.h"
#include "tests/net_pair.h"
#include "tests/stalled_workers.h"
#include "transport/codec_pool.h"
#include "transport/engine.h"
#include "transport/net_api.h"

namespace trim::net {
namespace {

using namespace close_test;

constexpr int kTimeoutMs = 100;  // NCCL_TRIM_TIMEOUT_MS: the old wait gave up after this
constexpr auto kStalled = std::chrono::milliseconds(4 * kTimeoutMs);
constexpr size_t kFloats = 262144;  // 1 MiB of fp32: eight rows of 32768, a task each

// WARN lines, from any thread.
struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  static void capture(void* ctx, log::Level level, const char*, int, const char* msg) {
    if (level < log::Level::kWarn) return;
    auto* w = static_cast<Warnings*>(ctx);
    std::lock_guard<std::mutex> lock(w->mu);
    w->lines.emplace_back(msg);
  }
  bool has(const std::string& a, const std::string& b) {
    std::lock_guard<std::mutex> lock(mu);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    });
  }
};

class CodecCancel : public ::testing::Test {
 protected:
  Context* make_ctx(int codec_threads) {
    Params p = default_params();
    p.ifname = "lo";
    p.codec_threads = codec_threads;
    p.timeout_ms = kTimeoutMs;
    p.dtype = static_cast<int>(param::Dtype::kFp32);  // no profiler here: the declared dtype
    p.phase = static_cast<int>(param::Phase::kAll);   // and the phase is unknown
    InitOptions opt;
    opt.params = &p;
    Result<Context*> c = init(opt);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    contexts_.push_back(c.is_ok() ? c.value() : nullptr);
    return contexts_.back();
  }
  void SetUp() override { log::set_forward(&Warnings::capture, &warnings_); }
  void TearDown() override {
    workers_.reset();  // before closing: nothing may stay stalled
    testing::close_pair(&send_, &recv_, &listen_);
    for (Context* c : contexts_) {
      if (c != nullptr) {
        EXPECT_TRUE(finalize(c).is_ok());
      }
    }
    log::set_forward(nullptr, nullptr);
  }

  std::vector<Context*> contexts_;
  ListenComm* listen_ = nullptr;
  SendComm* send_ = nullptr;
  RecvComm* recv_ = nullptr;
  std::unique_ptr<testing::StalledWorkers> workers_;
  Warnings warnings_;
};

// A send whose encode tasks are queued behind a stalled worker: close must not return before
// the worker lets go (well past NCCL_TRIM_TIMEOUT_MS, with a warning), and every task of the
// send must then find itself cancelled instead of encoding NCCL's buffer.
TEST_F(CodecCancel, CloseWaitsForAStalledWorkerAndCancelsItsTasks) {
  Context* sender = make_ctx(1);
  Context* receiver = make_ctx(1);
  testing::connect_pair(sender, receiver, &send_, &recv_, &listen_);
  ASSERT_TRUE(set_trimmable(sender, true).is_ok());
  const std::vector<uint8_t> data = gaussian_floats(kFloats, 7);
  const transport::CodecPool* pool = transport::CodecPool::instance(0);
  const uint64_t cancelled0 = pool->tasks_cancelled();
  const uint64_t queued0 = transport::global_stats().codec_tasks.load() + transport::global_stats().codec_inline.load();
  workers_ = std::make_unique<testing::StalledWorkers>();
  Result<Request*> s = post_send(send_, data.data(), data.size());
  ASSERT_TRUE(s.is_ok() && s.value() != nullptr) << (s.is_ok() ? "no slot" : s.status().to_string());
  ASSERT_TRUE(workers_->wait_entered(1, std::chrono::seconds(10))) << "no encode task reached a worker";

  SendComm* closing_comm = send_;
  send_ = nullptr;  // close owns it now
  auto closing = std::async(std::launch::async, [closing_comm] { return close_send(closing_comm); });
  EXPECT_EQ(closing.wait_for(kStalled), std::future_status::timeout)
      << "close returned while a codec task of its send was still stalled (NCCL_TRIM_TIMEOUT_MS=" << kTimeoutMs << ")";
  EXPECT_TRUE(warnings_.has("close of connection", "still waits for")) << "no warning about the stalled wait";
  workers_->release();
  ASSERT_EQ(closing.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "close never returned";
  EXPECT_TRUE(closing.get().is_ok());

  // Close added the connection's counters: every task it queued found itself cancelled.
  const uint64_t queued = transport::global_stats().codec_tasks.load() +
                          transport::global_stats().codec_inline.load() - queued0;
  EXPECT_EQ(queued, 8u) << "1 MiB of fp32 is eight rows, one task each";
  EXPECT_EQ(pool->tasks_cancelled() - cancelled0, queued);
}

// NCCL's abort path: deregMr of a receive buffer while its decode tasks wait behind a stalled
// worker. The receive fails, deregMr waits until no task can touch the buffer, and no task of
// the failed receive writes a byte of it afterwards.
TEST_F(CodecCancel, DeregMrWaitsAndNoCancelledTaskWritesTheBuffer) {
  Context* sender = make_ctx(0);    // encodes on its engine: the stall holds only decoding
  Context* receiver = make_ctx(1);  // decodes on the pool
  testing::connect_pair(sender, receiver, &send_, &recv_, &listen_);
  ASSERT_TRUE(set_trimmable(sender, true).is_ok());
  const std::vector<uint8_t> data = gaussian_floats(kFloats, 8);
  std::vector<uint8_t> out(data.size(), 0xEE);
  MemRegion region;
  region.data = out.data();
  region.bytes = out.size();
  Result<MemHandle*> mh = reg_mr(as_comm(recv_), region);
  ASSERT_TRUE(mh.is_ok()) << mh.status().to_string();
  const transport::CodecPool* pool = transport::CodecPool::instance(0);
  const uint64_t cancelled0 = pool->tasks_cancelled();
  workers_ = std::make_unique<testing::StalledWorkers>();
  Result<Request*> r = post_recv(recv_, out.data(), out.size());
  ASSERT_TRUE(r.is_ok() && r.value() != nullptr) << (r.is_ok() ? "no slot" : r.status().to_string());
  Result<Request*> s = post_send(send_, data.data(), data.size());
  ASSERT_TRUE(s.is_ok() && s.value() != nullptr) << (s.is_ok() ? "no slot" : s.status().to_string());
  ASSERT_TRUE(workers_->wait_entered(1, std::chrono::seconds(10))) << "no decode task reached a worker";

  RecvComm* comm = recv_;
  MemHandle* handle = mh.value();
  auto dereg = std::async(std::launch::async, [comm, handle] { return dereg_mr(as_comm(comm), handle); });
  EXPECT_EQ(dereg.wait_for(kStalled), std::future_status::timeout)
      << "deregMr returned while a decode task into the region was still stalled";
  EXPECT_TRUE(warnings_.has("dereg_mr of connection", "still waits for")) << "no warning about the stalled wait";
  workers_->release();
  ASSERT_EQ(dereg.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "deregMr never returned";
  EXPECT_TRUE(dereg.get().is_ok());

  const Outcome o = await(r.value(), milliseconds(2000));
  EXPECT_EQ(o.end, End::kFailed);
  EXPECT_NE(o.error.find("memory deregistered"), std::string::npos) << o.error;
  EXPECT_GT(pool->tasks_cancelled() - cancelled0, 0u);
  // Give a task that (wrongly) outlived deregMr time to write, then look.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(std::count(out.begin(), out.end(), uint8_t{0xEE}), static_cast<std::ptrdiff_t>(out.size()))
      << "a cancelled decode task wrote into the deregistered buffer";
}

}  // namespace
}  // namespace trim::net

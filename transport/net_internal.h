// The internal side of trim::net (net_api.h): the objects behind its opaque handles, shared by
// the files that implement it — net_api.cc (init, devices, connection setup), net_mem.cc
// (memory registration) and net_ops.cc (the data path and teardown).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/layout.h"
#include "common/params.h"
#include "transport/engine.h"
#include "transport/net_api.h"
#include "transport/send_class.h"

namespace trim::net {

class Context {
 public:
  uint64_t comm_id = 0;
  int traffic_class = kTrafficClassUnset;  // NCCL's per-communicator config (v11)
  Params params;
  codec::CodecConfig codec;
  std::atomic<uint32_t> attr{0};  // packed OpAttr: func | algo << 8 | proto << 16
  std::unique_ptr<transport::SendClassifier> classifier;
  transport::CodecPool* pool = nullptr;  // null: the codec runs on the progress engine's thread
  // Woken when one of this context's operations completes while a wait_any() is armed.
  transport::CompletionSignal completions;
};

class Comm {
 public:
  enum class Kind { kSend, kRecv };
  Comm(Kind kind, Context* ctx) : kind_(kind), ctx_(ctx) {}
  virtual ~Comm() = default;
  Kind kind() const { return kind_; }
  Context* ctx() const { return ctx_; }

 private:
  Kind kind_;
  Context* ctx_;
};

class MemHandle {
 public:
  MemRegion region;
};

class Request {
 public:
  Comm* owner = nullptr;
  bool in_use = false;
  transport::SendOp send;
  transport::RecvOp recv;
};

constexpr int kMaxRequests = 32;

struct CommCore {
  std::unique_ptr<transport::Conn> conn;
  transport::Engine* engine = nullptr;
  std::array<Request, kMaxRequests> reqs;
  uint32_t next_seq = 0;
  bool rotated = false;  // a send connection of the comm hook's communicator (scheme rotated)

  Request* free_slot(Comm* owner) {
    for (Request& r : reqs) {
      if (!r.in_use) {
        r.in_use = true;
        r.owner = owner;
        return &r;
      }
    }
    return nullptr;
  }
};

class SendComm final : public Comm {
 public:
  explicit SendComm(Context* ctx) : Comm(Kind::kSend, ctx) {}
  CommCore core;
};

class RecvComm final : public Comm {
 public:
  explicit RecvComm(Context* ctx) : Comm(Kind::kRecv, ctx) {}
  CommCore core;
};

namespace detail {

inline Status null_argument(const char* call, const char* what) {
  return Status(Code::kInvalidArgument, std::string(call) + ": " + what + " is null");
}

// The core of a send or receive comm (null for anything else).
CommCore* core_of(Comm* comm);

// Close's and deregMr's wait for the connection's codec tasks, which may still read or write
// NCCL's buffers. NCCL frees them as soon as we return, so this waits as long as it takes:
// the caller cancels the tasks of abandoned messages first, and those end within a row. Past
// NCCL_TRIM_TIMEOUT_MS (a stalled worker) it warns, naming `what`, and keeps waiting.
// `found`: the tasks in flight when the caller began, counted before it cancelled any (a
// cancelled task may end at once), for codec_waited_tasks.
uint32_t codec_tasks_in_flight(const transport::Conn& c);
void wait_for_codec(const Context& ctx, const transport::Conn& c, const char* what, uint32_t found);

// The comm hook's declarations (hook_trust.cc): the rows' log2 declared for `traffic_class`,
// -1 when the class was not declared rotated in this process.
int declared_row_log2(int traffic_class);
// A send connection of the hook's class that goes as rht since its class was not declared (or
// with other rows): counted, and said once per process.
void note_undeclared(const Context& ctx, int traffic_class, int declared_log2);

}  // namespace detail
}  // namespace trim::net

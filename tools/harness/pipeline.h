// One operation's transfers on this rank's two connections, progressed the way NCCL's net proxy
// does: up to 8 steps posted per connection, each send issued once its data is ready, the
// oldest request tested, received slots consumed in order. A Schedule says what transfer i
// carries and what it waits for; the ProxyOps of an OpEvents get their step events (posted ->
// done) and hand their phandles to every isend/irecv.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "tools/harness/profiler_host.h"
#include "tools/harness/rank.h"

namespace trim::harness {

// The rank's data (registered with the send comm) and its receive slots (with the recv comm).
struct WorkBuffers {
  char* work = nullptr;
  void* work_mh = nullptr;
  char* staging = nullptr;  // kMaxInFlight slots of slot_bytes
  size_t slot_bytes = 0;
  void* staging_mh = nullptr;
};

struct Span {
  char* data = nullptr;
  size_t bytes = 0;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual size_t sends() const = 0;  // transfers this rank sends (0: none)
  virtual size_t recvs() const = 0;  // transfers it receives
  virtual Span send_span(size_t i) const = 0;
  // Whether send i's data is there once `applied` receives have been consumed.
  virtual bool send_ready(size_t i, size_t applied) const = 0;
  // What receive i must carry (test's size is checked against it).
  virtual size_t recv_bytes(size_t i) const = 0;
  // Whether receive i may be consumed once `sends_done` sends completed (it may overwrite data
  // an earlier send reads).
  virtual bool apply_ready(size_t i, size_t sends_done) const = 0;
  virtual void apply(size_t i, const char* in) = 0;
};

// Runs `s` to completion; `what` names the operation in errors. Stops each ProxyOp after its
// last step.
Status run_pipeline(RankCtx& c, Schedule& s, const WorkBuffers& b, OpEvents& ev, int64_t deadline_ns,
                    const char* what);

}  // namespace trim::harness

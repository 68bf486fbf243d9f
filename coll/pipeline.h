// One operation's transfers on this rank's two connections, progressed the way NCCL's net proxy
// does: up to 8 steps posted per connection, each send issued once its data is ready, the
// oldest request tested, received slots consumed in order. A Schedule says what transfer i
// carries and what it waits for; the ProxyOps of an OpEvents get their step events (posted ->
// done) and hand their phandles to every isend/irecv.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "coll/net_plugin.h"
#include "coll/profiler_host.h"
#include "common/status.h"

namespace trim::coll {

// Largest message one isend carries: NCCL's ring SIMPLE slices are at most 1 MiB.
inline constexpr size_t kSliceBytes = size_t{1} << 20;
// Steps in flight per connection (NCCL_STEPS).
inline constexpr size_t kMaxInFlight = 8;
// Receives posted before the op's descriptor check completes (Gate), which are staged.
inline constexpr size_t kStagedBeforeGate = 1;

// CLOCK_MONOTONIC: one clock for every process on the machine (deadlines, and the harness's
// comparisons of one rank's "killed at" with another's "error seen at").
int64_t mono_ns();

// A plugin call's non-success result as a Status naming the call.
Status plugin_error(const char* call, ncclResult_t r);

// Polling loops call idle() after a pass that moved nothing: yield first, then short sleeps,
// so ranks sharing few cores leave the plugin's own threads room to run. The sleeps grow with the
// time spent idle (a twentieth of it, 20 us to 2 ms), so a loop that waits long (a peer still
// computing, a p2p receiver with nothing to receive) costs ~500 wake-ups a second instead of
// ~8000, and a wait pays at most ~5 % of its length on waking.
// Where the plugin can wait (NetPlugin::can_wait) and the loop has requests pending, idle(net,
// ...) blocks until one completes instead: a wake-up per completion rather than per sleep (issue
// 39 item 4), still at most kMaxSleepNs at a time so that aborts and deadlines are seen as before.
class Backoff {
 public:
  static constexpr int64_t kMinSleepNs = 20000;
  static constexpr int64_t kMaxSleepNs = 2000000;
  // Idle passes that only yield before a wait blocks: a completion often follows at once.
  static constexpr int kYieldPasses = 1;
  void progressed() { idle_passes_ = 0; }
  void idle();
  // `requests`: those whose completion the loop waits for (n may be 0: idle()).
  Status idle(NetPlugin* net, void* const* requests, int n, int64_t deadline_ns);
  // The sleep after `idle_ns` without progress (tests).
  static int64_t sleep_ns(int64_t idle_ns);

 private:
  int idle_passes_ = 0;
  int64_t idle_since_ns_ = 0;
};

// This rank's two ring connections: it sends to rank+1 and receives from rank-1. Either comm
// may be null when the rank never uses it. `abort`, when set, ends a running pipeline.
struct Link {
  NetPlugin* net = nullptr;
  void* send_comm = nullptr;
  void* recv_comm = nullptr;
  int rank = 0;
  int nranks = 1;
  const std::atomic<bool>* abort = nullptr;
};

// The rank's data (registered with the send comm) and its receive slots (with the recv comm).
// work_recv_mh: the data registered with the recv comm too, so that a receive that would only be
// copied into it lands there directly (Schedule::recv_direct); null: every receive uses a slot.
struct WorkBuffers {
  char* work = nullptr;
  void* work_mh = nullptr;
  void* work_recv_mh = nullptr;
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
  // Where receive i belongs when applying it is a plain copy into the work buffer (nullptr: it
  // combines, or has no fixed place): with WorkBuffers::work_recv_mh it is received there and
  // apply() is skipped. Such a receive is posted only once apply_ready() holds, since its data
  // lands when it arrives.
  virtual char* recv_direct(size_t) const { return nullptr; }
  // Where receive i is combined into the work buffer, and as what (NCCL's datatype and op), when
  // the plugin can combine on receipt (NetPlugin::can_combine): then apply() is skipped and the
  // plugin's threads reduce. nullptr: staged and applied here. The caller posts it only after
  // the descriptor check and once apply_ready() holds; nothing may read that place until it
  // completes (the ring sends a reduced segment only after its receive).
  virtual char* recv_combine(size_t, int* /*datatype*/, int* /*op*/) const { return nullptr; }
};

// What must finish before the op's first receive is applied (the op descriptor check of
// coll/comm.cc); polled on every pass of the pipeline until done. Its own requests were posted
// before the op's, so they match first.
class Gate {
 public:
  virtual ~Gate() = default;
  virtual Status poll(bool* done, bool* moved) = 0;
  // Its requests still pending (at most 2 written to `out`), for Backoff's wait.
  virtual int pending(void** out) const = 0;
};

// Runs `s` to completion; `what` names the operation in errors. Stops each ProxyOp after its
// last step. kUnavailable when the deadline passes or link.abort is set.
Status run_pipeline(const Link& link, Schedule& s, const WorkBuffers& b, OpEvents& ev, int64_t deadline_ns,
                    const char* what, Gate* gate = nullptr);

}  // namespace trim::coll

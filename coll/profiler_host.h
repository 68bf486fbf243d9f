// NCCL's side of the profiler plugin API, as NCCL 2.28+ plays it (src/plugin/profiler.cc): load
// the profiler table from the net plugin's own library when no profiler library is configured,
// init it per communicator, emit the event chain GroupApi/CollApi -> Group -> Coll (or P2p) ->
// ProxyOp -> ProxyStep for every operation, and answer the net plugin's profiler callback by
// turning its step handle into a NetPlugin event. Event types are emitted only when the
// activation mask the profiler's init returned enables them, with NCCL's own mask tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "plugin/nccl_ext.h"

namespace trim::coll {

inline constexpr int kNcclSteps = 8;  // NCCL_STEPS: step handles a proxy op cycles through

struct ProxySub;
class ProfilerHost;
// NCCL's ncclProxyEventHandle: what the net plugin receives as phandle with each isend/irecv.
struct ProxyEventHandle {
  void* stepEventHandle = nullptr;
  ProxySub* subArgPtr = nullptr;
};

// The profiler part of NCCL's ncclProxySubArgs (one proxy op on one connection).
struct ProxySub {
  int eActivationMask = 0;
  int rank = -1;
  void* profilerContext = nullptr;
  void* taskEventHandle = nullptr;  // the Coll/P2p event: the ProxyOp's parent
  void* opEventHandle = nullptr;
  ProxyEventHandle pHandles[kNcclSteps];
  ProfilerHost* host = nullptr;  // the communicator's (NCCL finds it through its own proxy state)
};

// One communicator's side of the profiler: the table (loaded once per process, like NCCL's, from
// the net plugin's library), this communicator's context and activation mask. Unloaded, every
// call is a no-op.
class ProfilerHost {
 public:
  ProfilerHost() = default;
  ~ProfilerHost();
  ProfilerHost(const ProfilerHost&) = delete;
  ProfilerHost& operator=(const ProfilerHost&) = delete;

  // NCCL_PROFILER_PLUGIN unset: ncclProfiler_v6, else ncclProfiler_v5, from `library` (the net
  // plugin's dlopen handle). False when it exports neither; nothing is loaded then.
  bool load(void* library);
  // ncclProfilerPluginInit. A failed init is only reported: NCCL goes on with the mask as is.
  void init(uint64_t comm_id, int n_nodes, int n_ranks, int rank);
  // ncclProfilerPluginFinalize: after the last event is stopped.
  void finalize();

  bool loaded() const { return table_ != nullptr; }
  int mask() const { return mask_; }
  void* context() const { return context_; }
  int rank() const { return rank_; }
  // "v6", "v5" or "none": which table was loaded.
  const char* version() const { return version_; }
  // First misuse of NCCL's callback by the net plugin in this process (NCCL itself would
  // crash); empty if none.
  static std::string misuse();

  // The profiler's entry points, called as NCCL calls them (results ignored, as NCCL does).
  void start(void** handle, ncclProfilerEventDescr_trim_t* descr);
  void stop(void* handle);
  void record(void* handle, int state, ncclProfilerEventStateArgs_trim_t* args);
  static void note_misuse(const std::string& what);
  // Operations begun so far (OpEvents alternates its ordering on it) and NCCL's per-function
  // collective sequence number.
  uint64_t next_op() { return ops_++; }
  uint64_t next_seq(const char* func);

 private:
  const ncclProfiler_trim_t* table_ = nullptr;
  const char* version_ = "none";
  void* context_ = nullptr;
  int mask_ = 0;  // ncclProfilerEventMask
  int rank_ = -1;
  bool initialized_ = false;
  uint64_t ops_ = 0;
  std::map<std::string, uint64_t> seq_;
};

// NCCL's ncclProfilerCallback, which NCCL passes to the net plugin's init (v10, v11) whether
// or not a profiler is loaded; it acts on the communicator of the step handle it is given.
ncclResult_t nccl_profiler_callback(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

// ProxyStep states NCCL records (nccl_profiler.h, v4+ numbering).
enum : int {
  kStepSendGpuWait = 8,
  kStepSendWait = 9,
  kStepRecvWait = 10,
  kStepRecvGpuWait = 12,
  kOpInProgress = 19,
  kStepSendPeerWait = 20,
};

// One proxy op on one connection: its ProxyOp event and the step events NCCL keeps in
// pHandles[step % 8]. phandle() is valid (and handed to the plugin) even without a profiler,
// as in NCCL. Not copyable: the plugin holds pointers into it.
class ProxyOp {
 public:
  explicit ProxyOp(ProfilerHost* host) : host_(host) {}
  ~ProxyOp() { stop(); }
  ProxyOp(const ProxyOp&) = delete;
  ProxyOp& operator=(const ProxyOp&) = delete;

  // ncclProfilerStartProxyOpEvent (+ the InProgress state the net proxy records first).
  void start(void* task_handle, int mask, int peer, int n_steps, int chunk_bytes, bool is_send);
  // ncclProfilerStart{Send,Recv}ProxyStepEvent: when the step is posted.
  void start_step(int step);
  void record_step(int step, int state, size_t bytes);
  // What isend/irecv of transfer `step` get as phandle.
  void* phandle(int step) { return &sub_.pHandles[step % kNcclSteps]; }
  void stop_step(int step);
  // Stops open steps, then the op; no-op when not started.
  void stop();
  bool started() const { return started_; }

 private:
  ProfilerHost* host_;
  ProxySub sub_;
  bool started_ = false;
  int open_steps_[kNcclSteps] = {-1, -1, -1, -1, -1, -1, -1, -1};
};

// What an operation announces at enqueue (NCCL's ncclTaskColl / ncclTaskP2p), as the user
// called it: the Coll event of an AllGather or Broadcast reports ncclInt8 and a byte count
// instead, as NCCL's task does (src/enqueue.cc, taskAppend).
struct TaskInfo {
  bool p2p = false;
  const char* func = "AllReduce";  // as ncclFuncToString spells it
  const char* datatype = "ncclFloat32";
  size_t elem_bytes = 4;  // of datatype
  const char* algo = "RING";
  const char* proto = "SIMPLE";
  size_t count = 0;
  int root = 0;  // p2p: the peer
};

// How this rank uses one connection in an operation; n_steps < 0: not at all.
struct OpShape {
  int peer = -1;
  int n_steps = -1;
  int chunk_bytes = 0;
};

// One operation's events on this rank: API and group events, the Coll/P2p task event, and the
// proxy ops of the send and receive connections. begin() alternates, per operation, between
// stopping the task event before the proxy ops start (NCCL stops it once the op is enqueued;
// the proxy thread may start the ops later) and after.
class OpEvents {
 public:
  explicit OpEvents(ProfilerHost* host) : host_(host), send_(host), recv_(host) {}
  ~OpEvents() { end(); }
  OpEvents(const OpEvents&) = delete;
  OpEvents& operator=(const OpEvents&) = delete;

  // Ends the previous operation's events first.
  void begin(const TaskInfo& task, const OpShape& send, const OpShape& recv);
  ProxyOp& send() { return send_; }
  ProxyOp& recv() { return recv_; }
  void end();

 private:
  void start_task(const TaskInfo& task);
  void stop_task();

  ProfilerHost* host_;
  ProxyOp send_, recv_;
  int mask_ = 0;  // the task's eActivationMask, fixed at enqueue
  void* group_api_ = nullptr;
  void* group_ = nullptr;
  void* task_ = nullptr;
  bool task_open_ = false;
};

}  // namespace trim::coll

// The plugin as NCCL sees it: dlopen, one ncclNetPlugin_vN table, and one call surface over
// v8..v12 so the modes are written once. Every call returns the plugin's ncclResult_t as is;
// the only translation is of argument shapes (int vs size_t sizes, ctx, profiler handles, which
// v8/v9 do not take).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"
#include "plugin/nccl_net.h"

namespace trim::coll {

// Which ncclNetPlugin_vN table to drive (NCCL 2.19-2.21: v8; 2.22-2.26: v9; 2.27: v10;
// 2.28-2.29: v11; 2.30+: v12, which it probes first).
enum class Api { kV8, kV9, kV10, kV11, kV12 };
const char* api_name(Api api);

// What the harness needs from getProperties, whatever the version.
struct DeviceInfo {
  std::string name;
  int speed_mbps = 0;
  int ptr_support = 0;
  int max_recvs = 0;
  int max_comms = 0;
  size_t max_p2p_bytes = 0;  // 0 for v8 (absent)
  int rail_id = -1;          // v12 only (NCCL_NET_ID_UNDEF before, as NCCL 2.30 fills it)
  int plane_id = -1;         // v12 only
};

// Who the plugin's log lines belong to: one per communicator (NCCL's logger takes no context).
// The plugin's WARN lines are its only account of why a request failed (ncclResult_t says
// little): the context counts those logged in its scopes and keeps the last one, printed or not,
// so an error can quote what the plugin warned of since `since` (a count taken before the call),
// and never another communicator's.
class LogContext {
 public:
  // `max_level`: NCCL_LOG_WARN, NCCL_LOG_INFO, ...; NCCL_LOG_NONE: warnings are still counted.
  LogContext(std::string name, int max_level);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;
  const std::string& name() const { return name_; }
  int max_level() const { return max_level_; }
  uint64_t warnings() const;
  std::string warning_since(uint64_t since) const;
  void note_warning(const char* msg);  // the logger's

 private:
  const std::string name_;
  const int max_level_;
  mutable std::mutex mu_;  // the logger and the communicator's thread
  uint64_t warnings_ = 0;
  std::string last_warning_;
};

// While it lives, the plugin's lines logged on this thread are `context`'s (nestable). A line
// logged outside every scope (the plugin's own threads) is prefixed "trim-coll" and shown up to
// the most verbose level of any live context.
class LogScope {
 public:
  explicit LogScope(LogContext* context);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  LogContext* prev_;
};

// The logger every init gets (NCCL's role): the plugin's lines go to stderr, one fprintf each,
// prefixed with the scope's name.
void plugin_logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...) __attribute__((format(printf, 5, 6)));

// "ncclRemoteError (6)" for messages.
std::string result_name(int result);

class NetPlugin {
 public:
  // Opens the library and resolves the table of `api`. The stats hook is optional.
  static Result<NetPlugin*> open(const std::string& path, Api api);
  ~NetPlugin();
  NetPlugin(const NetPlugin&) = delete;
  NetPlugin& operator=(const NetPlugin&) = delete;

  Api api() const { return api_; }
  const char* name() const;
  // The dlopen handle: NCCL looks for the profiler plugin in the net plugin's library too.
  void* library() const { return dl_; }

  // v11, v12: per-communicator init returning the ctx every later call gets; v8-v10: global
  // init. `profiler` is NCCL's profiler callback, given to v10+ (v8/v9 have no such argument).
  // traffic_class < 0: unset (v11+ only: older tables have no per-communicator config).
  ncclResult_t init(uint64_t comm_id, ncclProfilerCallback_t profiler, int traffic_class = -1);
  // v11+ only (no-op before); call after every comm is closed.
  ncclResult_t finalize();
  ncclResult_t devices(int* ndev);
  ncclResult_t properties(int dev, DeviceInfo* out);
  ncclResult_t listen(int dev, void* handle, void** listen_comm);
  // NCCL passes the same handle buffer on every retry: so must the caller.
  ncclResult_t connect(int dev, void* handle, void** send_comm);
  ncclResult_t accept(void* listen_comm, void** recv_comm);
  // Registers as NCCL_PTR_HOST, as NCCL does with a host-only plugin.
  ncclResult_t reg_mr(void* comm, void* data, size_t bytes, void** mhandle);
  ncclResult_t dereg_mr(void* comm, void* mhandle);
  // `phandle`: NCCL's per-step profiler handle (ProxyOp::phandle), passed on to v10+.
  ncclResult_t isend(void* send_comm, void* data, size_t bytes, int tag, void* mhandle, void* phandle,
                     void** request);
  // n = 1 receive of at most capacity_bytes; *request is preset to null like NCCL's SIMPLE path.
  ncclResult_t irecv(void* recv_comm, void* data, size_t capacity_bytes, int tag, void* mhandle, void* phandle,
                     void** request);
  ncclResult_t test(void* request, int* done, size_t* bytes);
  // v11+: announces the op for the isends/irecvs that follow (no-op before v11).
  ncclResult_t set_net_attr(uint32_t op_mask, uint32_t algo_mask, uint32_t proto_mask);
  ncclResult_t close_send(void* send_comm);
  ncclResult_t close_recv(void* recv_comm);
  ncclResult_t close_listen(void* listen_comm);

  // Says that `send_comm` sends from buffers that keep their meaning between calls (ours do,
  // NCCL's staging slots do not), which NCCL_TRIM_ERROR_FEEDBACK needs: the plugin's
  // ncclTrimDeclareSendBuffers, before the comm's first isend. Only this comm is affected, so a
  // process that also runs NCCL over the same library keeps it off there. Ok when absent.
  Status declare_send_buffers(void* send_comm);
  // ncclTrimStatsJson if the library exports it; false (and nothing written) when absent.
  bool stats_json(std::string* out) const;
  // Whether the library exports ncclTrimIrecvCombine: a receive that combines what arrives into
  // its buffer with NCCL's (datatype, op) on the plugin's threads.
  bool can_combine() const;
  // That receive (one buffer of at most capacity_bytes); *request null: no slot, retry.
  ncclResult_t irecv_combine(void* recv_comm, void* data, size_t capacity_bytes, int tag, void* mhandle,
                             void* phandle, int datatype, int op, void** request);
  // Whether the library exports ncclTrimWaitRequests: a wait, on the caller's thread, for one of
  // its pending requests (or any of the context's) to complete.
  bool can_wait() const;
  // That wait (n >= 1 requests, none reported done yet), at most timeout_ns; the caller tests after.
  ncclResult_t wait_any(void* const* requests, int n, int64_t timeout_ns);

 private:
  NetPlugin(void* dl, Api api, const void* table);

  void* dl_;
  Api api_;
  const ncclNet_v8_t* v8_ = nullptr;
  const ncclNet_v9_t* v9_ = nullptr;
  const ncclNet_v10_t* v10_ = nullptr;
  const ncclNet_v11_t* v11_ = nullptr;
  const ncclNet_v12_t* v12_ = nullptr;
  void* ctx_ = nullptr;  // v11/v12 context from init
  ncclNetCommConfig_v10_t config_{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  int (*stats_fn_)(char*, int) = nullptr;
  int (*declare_fn_)(void*) = nullptr;
  int (*combine_fn_)(void*, void*, size_t, int, void*, void*, int, int, void**) = nullptr;
  int (*wait_fn_)(void* const*, int, int64_t, int*) = nullptr;
};

namespace testing {
// Whether the ring uses ncclTrimIrecvCombine (on by default): tests turn it off for the fallback.
void set_combine_disabled(bool disabled);
// Combining receives posted in this process (NetPlugin::irecv_combine that got a request).
uint64_t combined_recvs();
// Whether the ring ignores ncclTrimWaitRequests and sleep-polls as with a plugin without it.
void set_wait_disabled(bool disabled);
// NetPlugin::wait_any calls in this process.
uint64_t waits();
}  // namespace testing

}  // namespace trim::coll

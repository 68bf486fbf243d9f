// One rank's process: plugin setup as NCCL does it (net init, then the profiler from the same
// library), the chosen mode's data phase, and teardown. Shared pieces the modes use live here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/harness/bootstrap.h"
#include "tools/harness/net_plugin.h"
#include "tools/harness/options.h"
#include "tools/harness/profiler_host.h"
#include "tools/harness/replica.h"
#include "tools/harness/report.h"

namespace trim::harness {

// Runs rank `rank` to completion over the parent channel `fd`; returns the process exit status.
// `shared` (allreduce and mixed modes) is where rank 0 publishes results for replica_nmse.
int rank_main(const Options& opt, int rank, int fd, int64_t deadline_ns, SharedBuffer* shared);

// ---- For the modes ----

// setNetAttr masks (v11): 1 << ncclFunc_t, 1 << NCCL_ALGO_*, 1 << NCCL_PROTO_* of NCCL 2.28.
inline constexpr uint32_t kFuncBroadcast = 1u << 0;
inline constexpr uint32_t kFuncAllReduce = 1u << 4;
inline constexpr uint32_t kFuncSend = 1u << 6;
inline constexpr uint32_t kFuncRecv = 1u << 7;
inline constexpr uint32_t kAlgoRing = 1u << 1;
inline constexpr uint32_t kProtoLl = 1u << 0;
inline constexpr uint32_t kProtoSimple = 1u << 2;

// A plugin call's non-success result as a Status naming the call.
Status plugin_error(const char* call, ncclResult_t r);

// Page-aligned host memory (NCCL hands the plugin pinned pages; alignment is what we can mimic).
class HostBuffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_;
};

// Every buffer a rank registers, freed only after its comms are closed (a plugin may still
// touch the memory of requests that were in flight until then), or earlier on request
// (--abort-in-flight reproduces NCCL's abort order: deregMr, free, close).
class BufferArena {
 public:
  HostBuffer& make(size_t bytes) {
    buffers_.push_back(std::make_unique<HostBuffer>(bytes));
    return *buffers_.back();
  }
  void free_all() { buffers_.clear(); }

 private:
  std::vector<std::unique_ptr<HostBuffer>> buffers_;
};

// What a mode works with; the comms are opened and closed around it by rank.cc.
struct RankCtx {
  const Options& opt;
  int rank;
  NetPlugin* net;
  ProfilerHost* prof;  // NCCL's profiler side; unloaded with --profiler none
  RankChannel* chan;
  BufferArena* buffers;
  void* send_comm;  // to rank+1; null when this rank never sends
  void* recv_comm;  // from rank-1; null when this rank never receives
  RankReport* report;
  SharedBuffer* shared;  // null in sendrecv mode
};

// regMr on construction's request; deregMr exactly once (release() reports the result).
class MemReg {
 public:
  MemReg(NetPlugin* net, void* comm) : net_(net), comm_(comm) {}
  ~MemReg() { (void)release(); }
  MemReg(const MemReg&) = delete;
  MemReg& operator=(const MemReg&) = delete;
  Status reg(void* data, size_t bytes);
  Status release();
  void* handle() const { return mh_; }

 private:
  NetPlugin* net_;
  void* comm_;
  void* mh_ = nullptr;
};

// Polling loops call idle() after a pass that moved nothing: yield first, then short sleeps,
// so ranks sharing few cores leave the plugin's own threads room to run.
class Backoff {
 public:
  void progressed() { idle_passes_ = 0; }
  void idle();

 private:
  int idle_passes_ = 0;
};

// The modes' data phases (mode_sendrecv.cc, mode_allreduce.cc, mode_mixed.cc).
Status run_sendrecv(RankCtx& c);
Status run_allreduce(RankCtx& c);
Status run_mixed(RankCtx& c);

}  // namespace trim::harness

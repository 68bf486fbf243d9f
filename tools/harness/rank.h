// One rank's process: plugin setup as NCCL does it (net init, then the profiler from the same
// library), the chosen mode's data phase, and teardown. Shared pieces the modes use live here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/comm.h"
#include "common/status.h"
#include "tools/harness/bootstrap.h"
#include "tools/harness/data.h"
#include "tools/harness/options.h"
#include "tools/harness/replica.h"
#include "tools/harness/report.h"

namespace trim::harness {

// Runs rank `rank` to completion over the parent channel `fd`; returns the process exit status.
// `shared` (allreduce and mixed modes) is where rank 0 publishes results for replica_nmse.
int rank_main(const Options& opt, int rank, int fd, int64_t deadline_ns, SharedBuffer* shared);

// ---- For the modes ----

// The engine the modes drive (coll/): ring collectives, NCCL's proxy and profiler chain.
using coll::Backoff;
using coll::HostBuffer;
using coll::MemReg;
using coll::NetPlugin;
using coll::OpEvents;
using coll::OpShape;
using coll::plugin_error;
using coll::ProfilerHost;
using coll::ProxyOp;
using coll::TaskInfo;
using coll::kFuncAllReduce;
using coll::kFuncSend;
using coll::kFuncRecv;
using coll::kAlgoRing;
using coll::kProtoSimple;

// Every buffer a rank registers, freed only after its comms are closed (a plugin may still
// touch the memory of requests that were in flight until then), or earlier on request
// (--abort-in-flight reproduces NCCL's abort order: deregMr, free, close).
class BufferArena {
 public:
  // `*out` lives until free_all(); an allocation failure is the returned error.
  Status make(size_t bytes, const char* what, HostBuffer** out) {
    std::unique_ptr<HostBuffer> b;
    TRIM_RETURN_IF_ERROR(HostBuffer::make(bytes, what, &b));
    *out = b.get();
    buffers_.push_back(std::move(b));
    return Status::ok();
  }
  void free_all() { buffers_.clear(); }

 private:
  std::vector<std::unique_ptr<HostBuffer>> buffers_;
};

// What a mode works with; the communicator is opened and closed around it by rank.cc.
// net, prof, send_comm and recv_comm are the communicator's, for the modes that drive the plugin
// themselves (sendrecv and its fault scenarios).
struct RankCtx {
  const Options& opt;
  int rank;
  coll::Comm* comm;
  NetPlugin* net;
  ProfilerHost* prof;  // NCCL's profiler side; unloaded with --profiler none
  RankChannel* chan;
  BufferArena* buffers;
  void* send_comm;  // to rank+1; null when this rank never sends
  void* recv_comm;  // from rank-1; null when this rank never receives
  RankReport* report;
  SharedBuffer* shared;  // null in sendrecv mode
};

// An fp32 (or int32) ring AllReduce of opt.bytes at `work` through the communicator, announced
// as RING and `proto` ("SIMPLE" or "LL"); a raw tail of bytes % 4 rides in its allgather half.
Status run_ring_allreduce(RankCtx& c, char* work, Elem elem, const char* proto, int64_t deadline_ns);

// Checks an fp32 ring AllReduce's result in `work` against the reference summed in the ring's
// order (keys: every rank's data key), folds it into this rank's report (exactness, error,
// result hash, replica deviation from rank 0) and adds its NMSE to *nmse_sum.
Status record_allreduce(RankCtx& c, const RingGeometry& geo, const uint64_t* keys, char* work, double* nmse_sum);

// The modes' data phases (mode_sendrecv.cc, mode_allreduce.cc, mode_mixed.cc).
Status run_sendrecv(RankCtx& c);
Status run_allreduce(RankCtx& c);
Status run_mixed(RankCtx& c);

}  // namespace trim::harness

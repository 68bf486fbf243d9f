// The collectives the allreduce and mixed modes run over the plugin, each announced the way NCCL
// announces it: setNetAttr (v11) and the profiler event chain with NCCL's step numbering.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "tools/harness/data.h"
#include "tools/harness/pipeline.h"
#include "tools/harness/rank.h"

namespace trim::harness {

// Network transfers per ring step: SIMPLE's chunkSteps / sliceSteps (NCCL_STEPS/2 over
// NCCL_STEPS/4); LL and LL128 move one step per transfer.
inline constexpr int kSimpleSlicesPerStep = 2;
inline constexpr int kLlSlicesPerStep = 1;

// Staging slot size for a geometry's transfers, 64-byte aligned so reductions read aligned values.
inline size_t slot_bytes_for(const RingGeometry& geo) { return (geo.max_message_bytes() + 63) / 64 * 64; }

// The buffers of ring collectives as NCCL's proxy holds them: the work buffer (registered on the
// send comm) and kMaxInFlight receive slots of slot_bytes (registered on the receive comm),
// deregistered when this goes.
class RingBuffers {
 public:
  RingBuffers(RankCtx& c, size_t work_bytes, size_t slot_bytes);
  Status reg();
  const WorkBuffers& bufs() const { return b_; }
  char* work() const { return b_.work; }

 private:
  HostBuffer& work_;
  HostBuffer& staging_;
  MemReg work_reg_, staging_reg_;
  WorkBuffers b_;
};

// Checks an fp32 ring AllReduce's result in `work` against the reference summed in the ring's
// order (keys: every rank's data key), folds it into this rank's report (exactness, error,
// result hash, replica deviation from rank 0) and adds its NMSE to *nmse_sum.
Status record_allreduce(RankCtx& c, const RingGeometry& geo, const uint64_t* keys, char* work, double* nmse_sum);

// NCCL's ring AllReduce (reduce-scatter, then allgather) of `elem` values in b.work, announced
// as RING and `proto` ("SIMPLE" or "LL"). Rank r sends to r+1 and receives from r-1.
Status ring_allreduce(RankCtx& c, const RingGeometry& geo, Elem elem, const char* proto, const WorkBuffers& b,
                      int64_t deadline_ns);

// NCCL's ring Broadcast from rank 0: rank 0 sends b.work's `bytes`, every other rank receives
// them into b.work and all but the last forward them, one transfer per slice of at most
// b.slot_bytes. Called on fp32 data, RING, SIMPLE (its Coll event says ncclInt8, as NCCL's
// does): only the op makes it exact.
Status ring_broadcast(RankCtx& c, size_t bytes, const WorkBuffers& b, int64_t deadline_ns);

}  // namespace trim::harness

// NCCL's ring collectives over one rank's two connections (coll/pipeline.h): the geometry of a
// ring op (which slice of which segment transfer i carries) and the schedules of AllReduce,
// ReduceScatter, AllGather and Broadcast, each announced the way NCCL announces it (setNetAttr,
// and the profiler event chain with NCCL's step numbering).
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/pipeline.h"
#include "coll/reduce.h"
#include "common/status.h"

namespace trim::coll {

// Network transfers per ring step: SIMPLE's chunkSteps / sliceSteps (NCCL_STEPS/2 over
// NCCL_STEPS/4); LL and LL128 move one step per transfer.
inline constexpr int kSimpleSlicesPerStep = 2;
inline constexpr int kLlSlicesPerStep = 1;

// setNetAttr masks (v11): 1 << ncclFunc_t, 1 << NCCL_ALGO_*, 1 << NCCL_PROTO_* of NCCL 2.28.
inline constexpr uint32_t kFuncBroadcast = 1u << 0;
inline constexpr uint32_t kFuncAllGather = 1u << 2;
inline constexpr uint32_t kFuncReduceScatter = 1u << 3;
inline constexpr uint32_t kFuncAllReduce = 1u << 4;
inline constexpr uint32_t kFuncSend = 1u << 6;
inline constexpr uint32_t kFuncRecv = 1u << 7;
inline constexpr uint32_t kAlgoRing = 1u << 1;
inline constexpr uint32_t kProtoLl = 1u << 0;
inline constexpr uint32_t kProtoSimple = 1u << 2;

enum class RingKind { kAllReduce, kReduceScatter, kAllGather };

// One ring step's segment of one loop: [first, first+elems) elements.
struct Segment {
  size_t first = 0;
  size_t elems = 0;
};

// A ring op cut into loops (NCCL's chunks) of N segments. In ring step t rank r sends segment
// send_seg(r, t) and receives recv_seg(r, t), as `slices_per_step` transfers of one slice each,
// like the slices of NCCL's prims. A slice carries at most slice_bytes, so a loop moves
// N x slices_per_step x slice_bytes. Transfer i of the op is (loop, ring step, slice) in that
// order: i = (loop * steps() + t) * slices_per_step + k, NCCL's step numbering.
//   AllReduce: 2(N-1) steps per loop (reduce-scatter, then allgather); loop l covers the l-th
//     run of N x segment elements of the buffer. `tail_bytes` raw bytes past the last element
//     (trim-harness's odd sizes) ride at the end of the last loop's last segment, in the
//     allgather half only.
//   ReduceScatter / AllGather: N-1 steps per loop over N blocks of elems/N elements, block k
//     ending on (ReduceScatter) or coming from (AllGather) rank k; loop l covers the l-th chunk of
//     every block, as NCCL's ring ReduceScatter and AllGather do.
class RingGeometry {
 public:
  RingGeometry(RingKind kind, size_t elems, size_t elem_bytes, int ranks, size_t slice_bytes, int slices_per_step,
               size_t tail_bytes = 0);
  // trim-harness's fp32 AllReduce of `bytes` bytes: floor(bytes/4) values and a raw tail.
  static RingGeometry fp32_bytes(size_t bytes, int ranks, size_t slice_bytes, int slices_per_step) {
    return RingGeometry(RingKind::kAllReduce, bytes / 4, 4, ranks, slice_bytes, slices_per_step, bytes % 4);
  }

  RingKind kind() const { return kind_; }
  int ranks() const { return ranks_; }
  size_t elems() const { return elems_; }
  size_t elem_bytes() const { return elem_bytes_; }
  size_t tail_bytes() const { return tail_bytes_; }
  int loops() const { return loops_; }
  int steps() const { return kind_ == RingKind::kAllReduce ? 2 * (ranks_ - 1) : ranks_ - 1; }
  int slices_per_step() const { return slices_; }
  // Network transfers of the whole op (NCCL's ProxyOp nSteps).
  size_t transfers() const {
    return static_cast<size_t>(loops_) * static_cast<size_t>(steps()) * static_cast<size_t>(slices_);
  }
  int loop_of(size_t i) const { return static_cast<int>(i / static_cast<size_t>(steps() * slices_)); }
  int step_of(size_t i) const {
    return static_cast<int>(i / static_cast<size_t>(slices_) % static_cast<size_t>(steps()));
  }
  int slice_of(size_t i) const { return static_cast<int>(i % static_cast<size_t>(slices_)); }
  // Most bytes one transfer carries (what every irecv posts), and its payload without the tail.
  size_t max_message_bytes() const { return slice_elems_ * elem_bytes_ + tail_bytes_; }
  size_t slice_bytes() const { return slice_elems_ * elem_bytes_; }

  Segment segment(int loop, int seg) const;
  // Slice k of a segment: NCCL's split, rounded to 16 elements, so a short segment's later
  // slices may be empty (and are still sent).
  Segment slice(int loop, int seg, int k) const;
  int send_seg(int rank, int step) const;
  int recv_seg(int rank, int step) const;
  // Whether step `step` carries partial results (reduced on receipt) rather than final ones.
  bool is_reduce_scatter(int step) const {
    return kind_ == RingKind::kReduceScatter || (kind_ == RingKind::kAllReduce && step < ranks_ - 1);
  }
  // AllReduce: the rank holding segment `seg`'s final value after the reduce-scatter half.
  int owner(int seg) const { return (seg + ranks_ - 1) % ranks_; }
  bool carries_tail(int loop, int seg, int step, int k) const {
    return tail_bytes_ > 0 && loop == loops_ - 1 && seg == ranks_ - 1 && k == slices_ - 1 &&
           !is_reduce_scatter(step);
  }

 private:
  RingKind kind_;
  int ranks_;
  int slices_;
  size_t elems_;
  size_t elem_bytes_;
  size_t tail_bytes_;
  size_t slice_elems_;
  int loops_;
};

// Staging slot size for a geometry's transfers, 64-byte aligned so reductions read aligned values.
inline size_t slot_bytes_for(const RingGeometry& geo) { return (geo.max_message_bytes() + 63) / 64 * 64; }

// A ring op over `b.work`, announced as RING and `proto` ("SIMPLE" or "LL"): AllReduce and
// ReduceScatter combine what they receive with `op` (AVG must be prepared by the caller: see
// coll/reduce.h), AllGather copies. The data is the geometry's: AllReduce in place; ReduceScatter
// leaves block `rank`'s result in place (the rest of the buffer holds partial results);
// AllGather expects this rank's block in place and fills the others.
Status ring_run(const Link& l, ProfilerHost* prof, const RingGeometry& geo, DType dtype, RedOp op, const char* proto,
                const WorkBuffers& b, int64_t deadline_ns, Gate* gate = nullptr);

// NCCL's ring Broadcast: `root` sends b.work's `bytes`, every other rank receives them into
// b.work and all but the last forward them, one transfer per slice of at most b.slot_bytes.
// Its Coll event says ncclInt8, as NCCL's does: only the op makes it exact.
Status ring_broadcast(const Link& l, ProfilerHost* prof, size_t bytes, int root, const WorkBuffers& b,
                      int64_t deadline_ns, Gate* gate = nullptr);

}  // namespace trim::coll

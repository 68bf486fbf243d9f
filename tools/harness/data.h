// Test data and its checks: deterministic fp32 and int32 inputs any rank can regenerate, the
// ring's segment geometry, and the reference sum in the ring's own summation order (so an
// untrimmed run must match it bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trim::harness {

// Element type of a buffer's 4-byte values.
enum class Elem { kF32, kI32 };

// Key of one rank's input in one iteration.
uint64_t data_key(uint64_t seed, int rank, int iter);

// Fills `bytes` bytes: floor(bytes/4) values, then 0-3 raw tail bytes. fp32 values are ~N(0,1)
// (Irwin-Hall of 4 uniforms, so bounded by +-3.47 and never NaN); int32 values are uniform over
// all 2^32 (their sums wrap, as NCCL's do).
void fill_input(uint64_t key, void* out, size_t bytes, Elem elem = Elem::kF32);

// 64-bit hash of a buffer, for comparing replicas through the parent.
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed);

// What a check found: exact = every byte matches; nmse = ||got-want||^2 / ||want||^2 over the
// fp32 values (0 when want is all zero and got matches).
struct Check {
  bool exact = true;
  double err2 = 0;
  double ref2 = 0;
  size_t mismatched_bytes = 0;  // of the raw tail: those must always be exact
  double nmse() const { return ref2 > 0 ? err2 / ref2 : (err2 > 0 ? 1.0 : 0.0); }
};

// Compares a received buffer with the sender's input (sendrecv).
Check check_copy(uint64_t key, const void* got, size_t bytes);

// One ring step's segment of one loop: [first, first+elems) fp32 values.
struct Segment {
  size_t first = 0;
  size_t elems = 0;
};

// NCCL's ring allreduce cut into loops (chunks) of N segments: each loop has 2(N-1) ring steps,
// and in ring step t rank r sends segment send_seg(r, t) and receives recv_seg(r, t), as
// `slices_per_step` network transfers of one slice each (SIMPLE: chunkSteps/sliceSteps = 2;
// LL: 1), like the slices of NCCL's prims. A slice carries at most slice_bytes, so a loop is
// ranks x slices_per_step x slice_bytes. Transfer i of the op is (loop, ring step, slice) in
// that order: i = (loop * steps() + t) * slices_per_step + k, NCCL's step numbering.
class RingGeometry {
 public:
  RingGeometry(size_t bytes, int ranks, size_t slice_bytes, int slices_per_step);

  int ranks() const { return ranks_; }
  size_t elems() const { return elems_; }
  size_t tail_bytes() const { return tail_bytes_; }
  int loops() const { return loops_; }
  int steps() const { return 2 * (ranks_ - 1); }
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
  size_t max_message_bytes() const { return slice_elems_ * 4 + tail_bytes_; }
  size_t slice_bytes() const { return slice_elems_ * 4; }

  Segment segment(int loop, int seg) const;
  // Slice k of a segment: NCCL's split, rounded to 16 elements, so a short segment's later
  // slices may be empty (and are still sent).
  Segment slice(int loop, int seg, int k) const;
  int send_seg(int rank, int step) const;
  int recv_seg(int rank, int step) const;
  bool is_reduce_scatter(int step) const { return step < ranks_ - 1; }
  // Rank holding segment `seg`'s final sum after the reduce-scatter half.
  int owner(int seg) const { return (seg + ranks_ - 1) % ranks_; }
  // The raw tail rides at the end of the last loop's last segment (in its last slice), in the
  // allgather half only.
  bool carries_tail(int loop, int seg, int step, int k) const {
    return tail_bytes_ > 0 && loop == loops_ - 1 && seg == ranks_ - 1 && k == slices_ - 1 &&
           !is_reduce_scatter(step);
  }

 private:
  int ranks_;
  int slices_;
  size_t elems_;
  size_t tail_bytes_;
  size_t slice_elems_;
  int loops_;
};

// Compares one rank's allreduce result with the reference computed from every rank's input
// (keys[k] = rank k's data_key), summed in ring order starting at each segment's first sender
// (int32: wrapping sums, where the order does not matter).
Check check_allreduce(const RingGeometry& geo, const uint64_t* keys, const void* got, Elem elem = Elem::kF32);

// ||a-b||^2 / ||b||^2 over `elems` fp32 values (0 when both are all zero).
double nmse_between(const float* a, const float* b, size_t elems);

}  // namespace trim::harness

// Test data and its checks: deterministic fp32 inputs any rank can regenerate, the ring's
// segment geometry, and the reference sum in the ring's own summation order (so an untrimmed
// run must match it bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trim::harness {

// Key of one rank's input in one iteration.
uint64_t data_key(uint64_t seed, int rank, int iter);

// Fills `bytes` bytes: floor(bytes/4) fp32 values ~N(0,1) (Irwin-Hall of 4 uniforms, so bounded
// by +-3.47 and never NaN), then 0-3 raw tail bytes.
void fill_input(uint64_t key, void* out, size_t bytes);

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

// NCCL's ring allreduce cut into loops of ranks x slice: each loop has 2(N-1) steps, and in
// step t rank r sends segment send_seg(r, t) and receives recv_seg(r, t).
class RingGeometry {
 public:
  RingGeometry(size_t bytes, int ranks, size_t slice_bytes);

  int ranks() const { return ranks_; }
  size_t elems() const { return elems_; }
  size_t tail_bytes() const { return tail_bytes_; }
  int loops() const { return loops_; }
  int steps() const { return 2 * (ranks_ - 1); }
  size_t ops() const { return static_cast<size_t>(loops_) * static_cast<size_t>(steps()); }
  // Most bytes one message carries (what every irecv posts).
  size_t max_message_bytes() const { return slice_elems_ * 4 + tail_bytes_; }

  Segment segment(int loop, int seg) const;
  int send_seg(int rank, int step) const;
  int recv_seg(int rank, int step) const;
  bool is_reduce_scatter(int step) const { return step < ranks_ - 1; }
  // Rank holding segment `seg`'s final sum after the reduce-scatter half.
  int owner(int seg) const { return (seg + ranks_ - 1) % ranks_; }
  // The raw tail rides at the end of the last loop's last segment, in the allgather half only.
  bool carries_tail(int loop, int seg, int step) const {
    return tail_bytes_ > 0 && loop == loops_ - 1 && seg == ranks_ - 1 && !is_reduce_scatter(step);
  }

 private:
  int ranks_;
  size_t elems_;
  size_t tail_bytes_;
  size_t slice_elems_;
  int loops_;
};

// Compares one rank's allreduce result with the reference computed from every rank's input
// (keys[k] = rank k's data_key), summed in ring order starting at each segment's first sender.
Check check_allreduce(const RingGeometry& geo, const uint64_t* keys, const void* got);

}  // namespace trim::harness

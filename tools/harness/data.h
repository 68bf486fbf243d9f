// Test data and its checks: deterministic fp32 and int32 inputs any rank can regenerate, the
// ring's segment geometry, and the reference sum in the ring's own summation order (so an
// untrimmed run must match it bit for bit).
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/ring.h"

namespace trim::harness {

using coll::RingGeometry;
using coll::Segment;

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

// Compares one rank's allreduce result with the reference computed from every rank's input
// (keys[k] = rank k's data_key), summed in ring order starting at each segment's first sender
// (int32: wrapping sums, where the order does not matter). `geo` is an AllReduce's
// (RingGeometry::fp32_bytes).
Check check_allreduce(const RingGeometry& geo, const uint64_t* keys, const void* got, Elem elem = Elem::kF32);

// ||a-b||^2 / ||b||^2 over `elems` fp32 values (0 when both are all zero).
double nmse_between(const float* a, const float* b, size_t elems);

}  // namespace trim::harness

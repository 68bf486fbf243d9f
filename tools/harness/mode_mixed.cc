// --mode mixed: what one communicator carries in a training step, on the same connections, per
// iteration:
//   1. fp32 AllReduce, RING/SIMPLE: trimmable in its reduce-scatter half; verified like
//      --mode allreduce (nmse, replicas_identical, replica_nmse);
//   2. int32 AllReduce, RING/SIMPLE: exact (integers have no lossy form);
//   3. Broadcast from rank 0 along the ring: exact (not a reduction);
//   4. fp32 AllReduce announced as LL: exact (LL lines carry flags in every 8 bytes).
// 2-4 must arrive bit exact whatever --trim injects (exact_ok). Only the plugin's classification
// of each send (from the profiler chain, else NCCL_TRIM_DTYPE) keeps them apart.
#include <algorithm>
#include <functional>
#include <vector>

#include "tools/harness/data.h"
#include "tools/harness/rank.h"

namespace trim::harness {

namespace {

constexpr int64_t kNsPerSec = 1000000000;
// Seed salts: each collective gets its own inputs.
constexpr uint64_t kIntSalt = 0x1111111111111111ull;
constexpr uint64_t kBroadcastSalt = 0x2222222222222222ull;
constexpr uint64_t kLlSalt = 0x3333333333333333ull;

class Mixed {
 public:
  Mixed(RankCtx& c, char* work, const RingGeometry& simple, const RingGeometry& ll)
      : c_(c), o_(c.opt), work_(work), simple_(simple), ll_(ll),
        keys_(static_cast<size_t>(o_.ranks)),
        deadline_(mono_ns() + static_cast<int64_t>(o_.deadline_s) * kNsPerSec) {}

  // One iteration; returns the time spent in the four collectives (checks excluded).
  Result<int64_t> iteration(int it) {
    int64_t ns = 0;
    TRIM_RETURN_IF_ERROR(trimmable_allreduce(it, &ns));
    TRIM_RETURN_IF_ERROR(exact_allreduce(it, Elem::kI32, "SIMPLE", simple_, o_.seed ^ kIntSalt, &ns));
    TRIM_RETURN_IF_ERROR(broadcast(it, &ns));
    TRIM_RETURN_IF_ERROR(exact_allreduce(it, Elem::kF32, "LL", ll_, o_.seed ^ kLlSalt, &ns));
    return ns;
  }
  double nmse_sum() const { return nmse_sum_; }

 private:
  // Each collective starts together on every rank (a rank still checking the previous one
  // would otherwise count in the others' time).
  Status timed(const std::function<Status()>& run, int64_t* ns) {
    TRIM_RETURN_IF_ERROR(c_.chan->barrier());
    int64_t t0 = mono_ns();
    TRIM_RETURN_IF_ERROR(run());
    *ns += mono_ns() - t0;
    return Status::ok();
  }

  void fill(uint64_t seed, int it, Elem elem) {
    for (int k = 0; k < o_.ranks; ++k) keys_[static_cast<size_t>(k)] = data_key(seed, k, it);
    fill_input(keys_[static_cast<size_t>(c_.rank)], work_, o_.bytes, elem);
  }

  Status trimmable_allreduce(int it, int64_t* ns) {
    fill(o_.seed, it, Elem::kF32);
    TRIM_RETURN_IF_ERROR(timed([&] { return run_ring_allreduce(c_, work_, Elem::kF32, "SIMPLE", deadline_); }, ns));
    return record_allreduce(c_, simple_, keys_.data(), work_, &nmse_sum_);
  }

  Status exact_allreduce(int it, Elem elem, const char* proto, const RingGeometry& geo, uint64_t seed, int64_t* ns) {
    fill(seed, it, elem);
    TRIM_RETURN_IF_ERROR(timed([&] { return run_ring_allreduce(c_, work_, elem, proto, deadline_); }, ns));
    note_exact(check_allreduce(geo, keys_.data(), work_, elem));
    return Status::ok();
  }

  Status broadcast(int it, int64_t* ns) {
    const uint64_t key = data_key(o_.seed ^ kBroadcastSalt, 0, it);
    // The other ranks' buffers are poisoned, so nothing stale can pass for the payload.
    if (c_.rank == 0) {
      fill_input(key, work_, o_.bytes);
    } else {
      std::fill(work_, work_ + o_.bytes, static_cast<char>(0x5a));
    }
    TRIM_RETURN_IF_ERROR(timed(
        [&] {
          coll::Outcome r = c_.comm->broadcast(work_, o_.bytes, 0, deadline_);
          return r.ok() ? Status::ok() : r.status;
        },
        ns));
    note_exact(check_copy(key, work_, o_.bytes));
    return Status::ok();
  }

  void note_exact(const Check& chk) { c_.report->exact_ok = c_.report->exact_ok && chk.exact; }

  RankCtx& c_;
  const Options& o_;
  char* work_;
  const RingGeometry& simple_;
  const RingGeometry& ll_;
  std::vector<uint64_t> keys_;
  int64_t deadline_;
  double nmse_sum_ = 0;
};

}  // namespace

Status run_mixed(RankCtx& c) {
  const Options& o = c.opt;
  const RingGeometry simple = RingGeometry::fp32_bytes(o.bytes, o.ranks, kSliceBytes, coll::kSimpleSlicesPerStep);
  const RingGeometry ll = RingGeometry::fp32_bytes(o.bytes, o.ranks, kSliceBytes, coll::kLlSlicesPerStep);
  // One work buffer serves all four collectives, which run one at a time.
  HostBuffer* work = nullptr;
  TRIM_RETURN_IF_ERROR(c.buffers->make(o.bytes, "the work buffer", &work));
  Mixed mixed(c, work->data(), simple, ll);
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    Result<int64_t> ns = mixed.iteration(it);
    if (!ns) return ns.status();
    if (it >= o.warmup) c.report->iter_ns.push_back(*ns);
  }
  c.report->verified = true;
  c.report->nmse = mixed.nmse_sum() / (o.warmup + o.iters);
  return c.chan->barrier();
}

}  // namespace trim::harness

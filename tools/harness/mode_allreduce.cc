// --mode allreduce: NCCL's ring AllReduce of fp32 values (RING, SIMPLE), reduce-scatter then
// allgather, over the plugin (collectives.cc), verified against a reference summed in the
// ring's order. With the profiler loaded (the default) the plugin learns what each send is and
// may encode/trim the reduce-scatter half; the replicas must still end bit-identical.
// --prerotate does what the nccl_trim comm hook does around NCCL: every rank rotates its input
// alike (libtrim-rht's host twin; the hook runs the GPU kernels, which write the same bits),
// the ring sums rotated values, and every rank undoes the rotation of the sum.
#include <algorithm>
#include <vector>

#include "cuda/trim_rht.h"
#include "tools/harness/data.h"
#include "tools/harness/rank.h"

namespace trim::harness {

namespace {
constexpr int64_t kNsPerSec = 1000000000;

// The hook's rotation of one bucket (the whole buffer) at step `it`.
Status rotate(const Options& o, char* work, int it, bool forward) {
  const uint64_t seed = trim_rht_bucket_seed(o.seed, 0, static_cast<uint64_t>(it));
  const uint64_t elems = o.bytes / 4;
  const int rc = forward ? trim_rht_forward_host(work, elems, TRIM_RHT_F32, TRIM_RHT_MAX_ROW_LOG2, 0, seed)
                         : trim_rht_inverse_host(work, elems, TRIM_RHT_F32, TRIM_RHT_MAX_ROW_LOG2, 0, seed);
  if (rc != 0) return Status(Code::kInternal, std::string("--prerotate: ") + trim_rht_last_error());
  return Status::ok();
}
}  // namespace

Status run_ring_allreduce(RankCtx& c, char* work, Elem elem, const char* proto, int64_t deadline_ns) {
  const size_t bytes = c.opt.bytes;
  coll::RingExtras extras;
  extras.proto = proto;
  extras.tail_bytes = bytes % 4;
  coll::Outcome o = c.comm->all_reduce(work, bytes / 4, elem == Elem::kF32 ? coll::DType::kF32 : coll::DType::kI32,
                                       coll::RedOp::kSum, deadline_ns, extras);
  return o.ok() ? Status::ok() : o.status;
}

Status record_allreduce(RankCtx& c, const RingGeometry& geo, const uint64_t* keys, char* work, double* nmse_sum) {
  RankReport& rep = *c.report;
  const size_t bytes = c.opt.bytes;
  const Check chk = check_allreduce(geo, keys, work);
  rep.exact = rep.exact && chk.exact;
  rep.raw_exact = rep.raw_exact && chk.mismatched_bytes == 0;
  rep.err2 += chk.err2;
  rep.ref2 += chk.ref2;
  *nmse_sum += chk.nmse();
  rep.result_hash = hash_bytes(work, bytes, rep.result_hash);
  const uint64_t this_hash = hash_bytes(work, bytes, 0);
  Result<double> dev = replica_nmse(c.chan, c.rank, c.shared, work, geo.elems(), this_hash);
  if (!dev) return dev.status();
  rep.replica_nmse = std::max(rep.replica_nmse, *dev);
  return Status::ok();
}

Status run_allreduce(RankCtx& c) {
  const Options& o = c.opt;
  const int n = o.ranks;
  const RingGeometry geo = RingGeometry::fp32_bytes(o.bytes, n, kSliceBytes, coll::kSimpleSlicesPerStep);
  HostBuffer* buf = nullptr;
  TRIM_RETURN_IF_ERROR(c.buffers->make(o.bytes, "the work buffer", &buf));
  char* const work = buf->data();
  const int64_t deadline = mono_ns() + static_cast<int64_t>(o.deadline_s) * kNsPerSec;

  std::vector<uint64_t> keys(static_cast<size_t>(n));
  double nmse_sum = 0;
  RankReport& rep = *c.report;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (int k = 0; k < n; ++k) keys[static_cast<size_t>(k)] = data_key(o.seed, k, it);
    fill_input(keys[static_cast<size_t>(c.rank)], work, o.bytes);
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    int64_t t0 = mono_ns();
    if (o.prerotate) TRIM_RETURN_IF_ERROR(rotate(o, work, it, true));
    TRIM_RETURN_IF_ERROR(run_ring_allreduce(c, work, Elem::kF32, "SIMPLE", deadline));
    if (o.prerotate) TRIM_RETURN_IF_ERROR(rotate(o, work, it, false));
    if (it >= o.warmup) rep.iter_ns.push_back(mono_ns() - t0);

    TRIM_RETURN_IF_ERROR(record_allreduce(c, geo, keys.data(), work, &nmse_sum));
  }
  rep.verified = true;
  rep.nmse = nmse_sum / (o.warmup + o.iters);
  return c.chan->barrier();
}

}  // namespace trim::harness

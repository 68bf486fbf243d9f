// --mode allreduce: NCCL's ring AllReduce of fp32 values (RING, SIMPLE), reduce-scatter then
// allgather, over the plugin (collectives.cc), verified against a reference summed in the
// ring's order. With the profiler loaded (the default) the plugin learns what each send is and
// may encode/trim the reduce-scatter half; the replicas must still end bit-identical.
#include <algorithm>
#include <vector>

#include "tools/harness/collectives.h"
#include "tools/harness/data.h"
#include "tools/harness/rank.h"

namespace trim::harness {

namespace {
constexpr int64_t kNsPerSec = 1000000000;
}  // namespace

Status run_allreduce(RankCtx& c) {
  const Options& o = c.opt;
  const int n = o.ranks;
  RingGeometry geo(o.bytes, n, kSliceBytes, kSimpleSlicesPerStep);
  const size_t slot_bytes = slot_bytes_for(geo);
  RingBuffers ring(c, o.bytes, slot_bytes);
  TRIM_RETURN_IF_ERROR(ring.reg());
  const WorkBuffers& bufs = ring.bufs();
  char* const work = ring.work();
  const int64_t deadline = mono_ns() + static_cast<int64_t>(o.deadline_s) * kNsPerSec;

  std::vector<uint64_t> keys(static_cast<size_t>(n));
  double nmse_sum = 0;
  RankReport& rep = *c.report;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (int k = 0; k < n; ++k) keys[static_cast<size_t>(k)] = data_key(o.seed, k, it);
    fill_input(keys[static_cast<size_t>(c.rank)], work, o.bytes);
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    int64_t t0 = mono_ns();
    TRIM_RETURN_IF_ERROR(ring_allreduce(c, geo, Elem::kF32, "SIMPLE", bufs, deadline));
    if (it >= o.warmup) rep.iter_ns.push_back(mono_ns() - t0);

    TRIM_RETURN_IF_ERROR(record_allreduce(c, geo, keys.data(), work, &nmse_sum));
  }
  rep.verified = true;
  rep.nmse = nmse_sum / (o.warmup + o.iters);
  return c.chan->barrier();
}

}  // namespace trim::harness

// `trim-bench profiler`: what asking NCCL's profiler chain costs per isend. NCCL's side is
// played here as NCCL does it (a ProxyStep event per network transfer, the net plugin's
// callback turned into a NetPlugin startEvent whose parent is that step); the baseline, timed
// in the same run, is the same classification with no profiler answer (what isend pays anyway).
//
//   --json   {"bench":"profiler","iters":...,"ns_per_isend":...,"baseline_ns":...,"added_ns":...}
//   --quick  fewer iterations (CI smoke runs)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/params.h"
#include "plugin/nccl_ext.h"
#include "tools/bench/bench_util.h"
#include "transport/send_class.h"

extern "C" ncclProfiler_trim_t ncclProfiler_v6;

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's per-step profiler handle (src/include/proxy.h ncclProxyEventHandle): what isend gets.
struct StepHandle {
  void* step_event = nullptr;
};

void quiet_logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

template <class F>
double best_ns_per_iter(int reps, int iters, F&& body) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) body(i);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
    if (ns < best) best = ns;
  }
  return best;
}

}  // namespace

int run_profiler_bench(int argc, char** argv) {
  trim::bench::CommonFlags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!trim::bench::take_common_flag(a, &flags) && a != "profiler") {
      std::fprintf(stderr, "usage: trim-bench profiler [--json] [--quick]\n");
      return 2;
    }
  }
  std::vector<std::string> warnings;
  trim::Result<trim::Params> params = trim::process_params(&warnings);
  if (!params) {
    std::fprintf(stderr, "trim-bench: %s\n", params.status().to_string().c_str());
    return 1;
  }
  trim::Result<trim::codec::CodecConfig> codec = trim::codec::CodecConfig::from_params(params.value());
  if (!codec) return 1;

  const ncclProfiler_trim_t& prof = ncclProfiler_v6;
  void* ctx = nullptr;
  int mask = 0;
  const int kRanks = 4;
  if (prof.init(&ctx, 1, &mask, "bench", kRanks, kRanks, 0, quiet_logger) != ncclSuccess) return 1;
  ncclProfilerEventDescr_trim_t coll{};
  coll.type = ncclProfileColl;
  coll.coll.func = "AllReduce";
  coll.coll.datatype = "ncclFloat32";
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  coll.coll.count = 1 << 28;
  coll.coll.nChannels = 1;
  void* coll_h = nullptr;
  prof.startEvent(ctx, &coll_h, &coll);
  const int iters = flags.quick ? 20000 : 1000000;
  ncclProfilerEventDescr_trim_t op{};
  op.type = ncclProfileProxyOp;
  op.parentObj = coll_h;
  op.proxyOp.pid = getpid();
  op.proxyOp.nSteps = 2 * (kRanks - 1) * 2 * (iters / 12 + 1);
  op.proxyOp.isSend = 1;
  op.proxyOp.peer = 1;
  void* op_h = nullptr;
  prof.startEvent(ctx, &op_h, &op);

  // NCCL's callback for a start: a NetPlugin event parented by the step (mask permitting).
  trim::net::ProfilerFn callback = [&](void** ev, trim::net::ProfilerEvent type, void* p_handle, int64_t id,
                                       void* ext) {
    if (type == trim::net::ProfilerEvent::kStart && (mask & ncclProfileNetPlugin) != 0) {
      ncclProfilerEventDescr_trim_t d{};
      d.type = ncclProfileNetPlugin;
      d.parentObj = static_cast<StepHandle*>(p_handle)->step_event;
      d.netPlugin.id = id;
      d.netPlugin.data = ext;
      prof.startEvent(ctx, ev, &d);
    } else if (type == trim::net::ProfilerEvent::kStop) {
      prof.stopEvent(*ev);
    }
    return trim::Status::ok();
  };
  trim::transport::SendClassifier with(params.value(), codec.value(), callback);
  trim::transport::SendClassifier without(params.value(), codec.value(), trim::net::ProfilerFn());
  const trim::net::OpAttr attr{trim::net::Func::kAllReduce, trim::net::Algo::kRing, trim::net::Proto::kSimple};
  std::vector<StepHandle> handles(8);
  uint64_t trimmable = 0;
  const int reps = flags.quick ? 2 : 5;
  const double base = best_ns_per_iter(reps, iters, [&](int) {
    trimmable += without.classify(attr, nullptr, 1 << 20).trimmable;
  });
  const double full = best_ns_per_iter(reps, iters, [&](int i) {
    ncclProfilerEventDescr_trim_t s{};
    s.type = ncclProfileProxyStep;
    s.parentObj = op_h;
    s.proxyStep.step = i;
    StepHandle& h = handles[static_cast<size_t>(i) % handles.size()];
    prof.startEvent(ctx, &h.step_event, &s);
    trimmable += with.classify(attr, &h, 1 << 20).trimmable;
    prof.stopEvent(h.step_event);
  });
  prof.stopEvent(op_h);
  prof.stopEvent(coll_h);
  prof.finalize(ctx);
  if (with.profiler_answers() == 0) {
    std::fprintf(stderr, "trim-bench profiler: the profiler never answered\n");
    return 1;
  }
  if (flags.json) {
    std::printf("{\"bench\":\"profiler\",\"iters\":%d,\"ns_per_isend\":%.1f,\"baseline_ns\":%.1f,\"added_ns\":%.1f,"
                "\"trimmable\":%llu}\n",
                iters, full, base, full - base, static_cast<unsigned long long>(trimmable));
  } else {
    std::printf("profiler path: %.1f ns per isend (step start/stop + NetPlugin query + classify), "
                "classify alone %.1f ns: %.1f ns added\n",
                full, base, full - base);
  }
  return 0;
}

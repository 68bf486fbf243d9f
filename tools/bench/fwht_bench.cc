// `trim-bench fwht`: rht_forward throughput per ISA, with a memcpy of the same bytes timed in the
// same run as the yardstick. By default rows stream through a buffer of >= 64 MiB (the codec's
// case: data from DRAM); --hot reuses one row, so it measures the in-cache compute.
//
//   --json   one JSON object per line:
//            {"bench":"fwht","isa":...,"log2n":...,"bytes":...,"ns_per_elem":...,"gbps":...,
//             "memcpy_gbps":...,"ratio":...}  (ratio = gbps / memcpy_gbps)
//   --quick  8 MiB per measurement and fewer repetitions (CI smoke runs)
//   --hot    one row, transformed over and over (same total bytes)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/fwht.h"
#include "codec/fwht_internal.h"
#include "tools/bench/bench_util.h"

namespace {

struct Options : trim::bench::CommonFlags {
  bool hot = false;
};

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Best of `reps` timed calls after one warm-up call: the least disturbed run on a shared box.
template <class F>
double best_ns(int reps, F&& fn) {
  fn();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_ns();
    fn();
    const double t = now_ns() - t0;
    if (t < best) best = t;
  }
  return best;
}

int usage(const char* bad) {
  std::fprintf(stderr, "trim-bench fwht: unknown argument '%s'\n"
               "usage: trim-bench fwht [--json] [--quick] [--hot]\n", bad);
  return 2;
}

}  // namespace

int run_fwht_bench(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (trim::bench::take_common_flag(a, &opt)) continue;
    if (a == "--hot") {
      opt.hot = true;
    } else if (a != "fwht") {  // tolerate the sub-command name, whichever argv we are given
      return usage(argv[i]);
    }
  }

  const size_t total_bytes = (opt.quick ? size_t{8} : size_t{64}) << 20;
  const int reps = opt.quick ? 3 : 7;
  const size_t total = total_bytes / sizeof(float);
  std::vector<float> in(total), out(total);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : in) x = dist(rng);
  std::memset(out.data(), 0, total_bytes);  // fault the pages in before timing

  if (!opt.json)
    std::printf("fwht bench: rht_forward, %zu MiB per measurement, %s, auto isa=%s\n",
                total_bytes >> 20, opt.hot ? "one hot row" : "rows streamed",
                trim::codec::fwht_isa());
  for (int log2n : {10, 12, 15}) {
    const size_t n = size_t{1} << log2n, rows = total / n;
    std::vector<uint64_t> signs((n + 63) / 64);
    for (auto& w : signs) w = (uint64_t{rng()} << 32) | rng();
    // Hot: every row is row 0 (stays in L1/L2); streamed: row r of the big buffer.
    const size_t stride = opt.hot ? 0 : n;
    const double copy_ns = best_ns(reps, [&] {
      for (size_t r = 0; r < rows; ++r)
        std::memcpy(out.data() + r * stride, in.data() + r * stride, n * sizeof(float));
    });
    for (const char* isa : {"scalar", "avx2", "avx512"}) {
      if (!trim::codec::detail::fwht_force_isa(isa)) continue;
      const double ns = best_ns(reps, [&] {
        for (size_t r = 0; r < rows; ++r)
          trim::codec::rht_forward(in.data() + r * stride, out.data() + r * stride, log2n,
                                   signs.data());
      });
      const double bytes = static_cast<double>(rows * n * sizeof(float));
      const double ns_per_elem = ns / static_cast<double>(rows * n);
      const double gbps = bytes / ns, memcpy_gbps = bytes / copy_ns;
      if (opt.json) {
        std::printf(
            "{\"bench\":\"fwht\",\"isa\":\"%s\",\"log2n\":%d,\"bytes\":%.0f,\"ns_per_elem\":%.4f,"
            "\"gbps\":%.3f,\"memcpy_gbps\":%.3f,\"ratio\":%.4f}\n",
            isa, log2n, bytes, ns_per_elem, gbps, memcpy_gbps, gbps / memcpy_gbps);
      } else {
        std::printf("  2^%-2d %-6s %8.4f ns/elem %8.2f GB/s   memcpy %8.2f GB/s   ratio %.3f\n",
                    log2n, isa, ns_per_elem, gbps, memcpy_gbps, gbps / memcpy_gbps);
      }
    }
  }
  (void)trim::codec::detail::fwht_force_isa(nullptr);
  std::fflush(stdout);
  return 0;
}

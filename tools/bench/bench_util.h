// Shared pieces of trim-bench: timing, JSON lines, flags.
#pragma once

#include <time.h>

#include <chrono>
#include <cstring>
#include <string>

namespace trim::bench {

// `trim-bench codec --cpu-time`: time by this thread's CPU clock, so the time it spends
// descheduled on a loaded shared machine does not count (cache and core contention still do).
inline bool g_thread_cpu_clock = false;

inline double now_s() {
  if (g_thread_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `reps` runs: the least disturbed one on a noisy shared machine.
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    f();
    const double t = now_s() - t0;
    best = t < best ? t : best;
  }
  return best;
}

inline bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

// The flags every sub-command takes: --json (one JSON line) and --quick (fewer runs, for CI).
struct CommonFlags {
  bool json = false, quick = false;
};
// Takes `arg` into *f when it is one of them; false for any other argument.
inline bool take_common_flag(const std::string& arg, CommonFlags* f) {
  if (arg == "--json") {
    f->json = true;
  } else if (arg == "--quick") {
    f->quick = true;
  } else {
    return false;
  }
  return true;
}

}  // namespace trim::bench

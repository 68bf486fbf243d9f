// Stalls the codec pool's workers for a test (codec_pool.h's test-only task hook): while a
// StalledWorkers lives (or until release()), every codec task waits at its start, except on
// threads that called exempt_this_thread() (a test's own producers, whose tasks run inline
// when the queue is full). Each wait is capped at 30 s, so a broken test cannot hang the suite.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "transport/codec_pool.h"

namespace trim::testing {

class StalledWorkers {
 public:
  StalledWorkers() {
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().on = true;
      state().entered = 0;
    }
    transport::testing::set_task_hook(&hook);
  }
  ~StalledWorkers() {
    release();
    transport::testing::set_task_hook(nullptr);
  }
  StalledWorkers(const StalledWorkers&) = delete;
  StalledWorkers& operator=(const StalledWorkers&) = delete;

  static void exempt_this_thread() { exempt() = true; }
  // Whether at least `n` tasks have reached the hook (stalled ones included) within `timeout`.
  bool wait_entered(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(state().mu);
    return state().cv.wait_for(lock, timeout, [n] { return state().entered >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(state().mu);
    state().on = false;
    state().cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool on = false;
    int entered = 0;
  };
  static State& state() {
    static State s;
    return s;
  }
  static bool& exempt() {
    thread_local bool e = false;
    return e;
  }
  static void hook(const transport::CodecWork&, uint32_t) {
    if (exempt()) return;
    State& s = state();
    std::unique_lock<std::mutex> lock(s.mu);
    ++s.entered;
    s.cv.notify_all();
    s.cv.wait_for(lock, std::chrono::seconds(30), [&s] { return !s.on; });
  }
};

}  // namespace trim::testing

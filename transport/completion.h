// Wakes a thread that blocks until one of a context's operations completes
// (ncclTrimWaitRequests: the nccl_trim collectives' caller, instead of sleep-polling test()).
// NCCL never waits here: its proxy only polls, and pays one seq_cst store and one load per
// completed operation while nobody is armed.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace trim::transport {

// Lost wake-up argument (all four accesses seq_cst, so they fall in one total order): the
// completer stores the op's state (C) and then loads armed_ (R); the waiter reads gen_, stores
// armed_ (A) and then loads the states of the ops it waits for (L). If R misses A, then
// C < R < A < L and L sees the completion: the waiter does not block. If R sees A (or a later
// arm), the completer bumps gen_ after the waiter read it, and the futex wait either finds gen_
// changed or is woken. One completion disarms: the others of the same engine batch, until the
// waiter arms again, cost a load each and no system call. (DeferredWakes only moves the bump
// and wake later on the completer's thread, after C.)
class CompletionSignal {
 public:
  // After the operation's state was stored (seq_cst). Any thread; never blocks. On a thread
  // inside a DeferredWakes scope (the engine's turn) the wake waits for the scope's flush().
  void notify() {
    if (armed_.load(std::memory_order_seq_cst) == 0) return;
    notify_armed();
  }
  // Waiter: the generation to pass to wait(); the waiter then rechecks what it waits for.
  uint32_t arm() {
    const uint32_t g = gen_.load(std::memory_order_seq_cst);
    armed_.store(1, std::memory_order_seq_cst);
    return g;
  }
  // Blocks until a completion after arm() (gen_ != gen) or `timeout_ns` passed (or a spurious
  // wake-up: callers recheck).
  void wait(uint32_t gen, int64_t timeout_ns);
  // Futex wake-ups issued (tests).
  uint64_t wakes() const { return wakes_.load(std::memory_order_relaxed); }

 private:
  friend class DeferredWakes;
  void notify_armed();
  void signal_now();
  void wake_all();
  std::atomic<uint32_t> armed_{0};
  std::atomic<uint32_t> gen_{0};
  std::atomic<uint64_t> wakes_{0};
};

// The engine's turn: completions it makes (a receive batch can finish several operations, an ACK
// several sends) wake their waiters once, at flush(), after the turn's sends went out, rather
// than each in the middle of the batch (a woken caller would preempt the engine on a busy core).
// Deferring is safe: flush() does what notify() would have, later; the waiter that armed before
// the completion stays blocked until then, or its timeout. One per thread at a time.
class DeferredWakes {
 public:
  DeferredWakes();
  ~DeferredWakes();
  DeferredWakes(const DeferredWakes&) = delete;
  DeferredWakes& operator=(const DeferredWakes&) = delete;
  void flush();
  // The open scope's flush() on this thread, if any (before the engine tells a command's waiter
  // it is done: the waiter may then free the signals).
  static void flush_this_thread();

 private:
  static void signal_all(std::vector<CompletionSignal*>* signals);
  std::vector<CompletionSignal*> notified_;  // each once
};

}  // namespace trim::transport

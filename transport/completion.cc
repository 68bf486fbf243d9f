#include "transport/completion.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace trim::transport {

namespace {

// The futex word is the 32-bit gen_ itself: std::atomic<uint32_t> is lock-free and laid out as
// the integer on Linux.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

// The open DeferredWakes scope's list on this thread (null: none).
thread_local std::vector<CompletionSignal*>* t_deferred = nullptr;

}  // namespace

void CompletionSignal::notify_armed() {
  if (t_deferred != nullptr) {
    if (std::find(t_deferred->begin(), t_deferred->end(), this) == t_deferred->end()) t_deferred->push_back(this);
    return;
  }
  signal_now();
}

void CompletionSignal::signal_now() {
  if (armed_.exchange(0, std::memory_order_seq_cst) == 0) return;
  gen_.fetch_add(1, std::memory_order_seq_cst);
  wake_all();
}

DeferredWakes::DeferredWakes() { t_deferred = &notified_; }

DeferredWakes::~DeferredWakes() {
  flush();
  t_deferred = nullptr;
}

void DeferredWakes::flush() { signal_all(&notified_); }

void DeferredWakes::flush_this_thread() {
  if (t_deferred != nullptr) signal_all(t_deferred);
}

void DeferredWakes::signal_all(std::vector<CompletionSignal*>* signals) {
  for (CompletionSignal* s : *signals) s->signal_now();
  signals->clear();
}

void CompletionSignal::wait(uint32_t gen, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  const timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  // Returns at once (EAGAIN) when gen_ is no longer `gen`; EINTR and timeouts end it too.
  (void)futex(&gen_, FUTEX_WAIT_PRIVATE, gen, &ts);
}

void CompletionSignal::wake_all() {
  wakes_.fetch_add(1, std::memory_order_relaxed);
  (void)futex(&gen_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

}  // namespace trim::transport

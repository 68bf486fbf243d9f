#include "switch_sim/sim/event_queue.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trim::sim {

namespace {
// std::push_heap keeps the largest first: "later" puts the earliest (time, seq) on top.
struct Later {
  template <class F>
  bool operator()(const F& a, const F& b) const {
    return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
  }
};
}  // namespace

EventQueue::EventQueue() : slots_(1u << kWindowBits) {}

void EventQueue::push_far(uint64_t time_ns, uint32_t packed) {
  if (time_ns < base_ns_) refuse_past(time_ns);
  far_.push_back(Far{time_ns, pushed_, packed});
  std::push_heap(far_.begin(), far_.end(), Later{});
}

void EventQueue::pull_far() {
  while (!far_.empty() && far_.front().time_ns - base_ns_ < kWindowNs) {
    const Far f = far_.front();
    std::pop_heap(far_.begin(), far_.end(), Later{});
    far_.pop_back();
    append(static_cast<uint32_t>(f.time_ns) & kSlotMask, f.packed);
  }
}

void EventQueue::jump_to_far() {
  if (far_.empty()) return;  // an empty queue: pop's caller broke its contract
  base_ns_ = far_.front().time_ns;
  pull_far();
}

void EventQueue::refuse_past(uint64_t time_ns) const {
  throw std::logic_error("EventQueue: push at " + std::to_string(time_ns) + " ns, before the last popped time " +
                         std::to_string(base_ns_) + " ns");
}

void EventQueue::refuse_id(uint32_t id) const {
  throw std::logic_error("EventQueue: id " + std::to_string(id) + " does not fit in 29 bits");
}

}  // namespace trim::sim

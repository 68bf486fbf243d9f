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

EventQueue::EventQueue() : near_slots_(kNearSlots), near_overflow_(kNearSlots), mid_buckets_(kMidBuckets) {}

void EventQueue::push_later(uint64_t time_ns, uint32_t packed) {
  const uint64_t coarse = time_ns >> kCoarseBits;
  if (coarse < migrated_ + kMidBuckets) {
    const uint32_t b = static_cast<uint32_t>(coarse % kMidBuckets);
    const uint32_t n = new_node(packed);
    node_time_[n] = time_ns;
    link(mid_buckets_[b], b, &mid_bits_, n);
    ++mid_;
  } else {
    far_.push_back(Far{time_ns, pushed_, packed});
    std::push_heap(far_.begin(), far_.end(), Later{});
  }
}

void EventQueue::migrate(uint64_t upto) {
  while (migrated_ < upto) {
    // With the wheel empty there is nothing to move bucket by bucket: straight to the last step.
    if (mid_ == 0) migrated_ = std::max(migrated_, upto - 1);
    ++migrated_;
    // This bucket is near now: its events move into their slots, in order.
    const uint32_t b = static_cast<uint32_t>(migrated_ % kMidBuckets);
    List& l = mid_buckets_[b];
    if (l.head != kNil) {
      for (uint32_t n = l.head; n != kNil;) {
        const uint32_t next = nodes_[n].next;
        append_near(node_time_[n], nodes_[n].packed, n);
        --mid_;
        n = next;
      }
      l = List{};
      mid_bits_.clear(b);
    }
    // The wheel reaches one bucket further: the heap's events there move in, in (time, seq)
    // order (after a jump, some may be near already).
    while (!far_.empty() && (far_.front().time_ns >> kCoarseBits) < migrated_ + kMidBuckets) {
      const Far f = far_.front();
      std::pop_heap(far_.begin(), far_.end(), Later{});
      far_.pop_back();
      if ((f.time_ns >> kCoarseBits) <= migrated_) {
        append_near(f.time_ns, f.packed);
      } else {
        const uint32_t fb = static_cast<uint32_t>((f.time_ns >> kCoarseBits) % kMidBuckets);
        const uint32_t n = new_node(f.packed);
        node_time_[n] = f.time_ns;
        link(mid_buckets_[fb], fb, &mid_bits_, n);
        ++mid_;
      }
    }
  }
}

void EventQueue::jump() {
  uint64_t coarse;
  if (mid_ != 0) {
    // The wheel's first occupied bucket after the near ring's; the clock goes to its start.
    const uint32_t from = static_cast<uint32_t>((migrated_ + 1) % kMidBuckets);
    const uint32_t b = mid_bits_.first_from(from);
    coarse = migrated_ + 1 + (b + kMidBuckets - from) % kMidBuckets;
    base_ns_ = coarse << kCoarseBits;
  } else if (!far_.empty()) {
    base_ns_ = far_.front().time_ns;
    coarse = base_ns_ >> kCoarseBits;
  } else {
    return;  // an empty queue: pop's caller broke its contract
  }
  migrate(coarse + 1);
}

bool EventQueue::cancel_current(EventKind kind, uint32_t id) {
  const uint32_t packed = static_cast<uint32_t>(kind) << 29 | id;
  const uint32_t slot = static_cast<uint32_t>(base_ns_) & kNearMask;
  NearSlot& s = near_slots_[slot];
  for (uint32_t i = 0; i < kInline && s.ev[i] != kNil; ++i) {
    if (s.ev[i] != packed) continue;
    const uint32_t last = s.ev[kInline - 1];
    for (uint32_t j = i; j + 1 < kInline; ++j) s.ev[j] = s.ev[j + 1];
    s.ev[kInline - 1] = last == kNil ? kNil : take_overflow(slot);
    if (s.ev[0] == kNil) near_bits_.clear(slot);
    --near_;
    return true;
  }
  List& l = near_overflow_[slot];
  for (uint32_t prev = kNil, n = l.head; n != kNil; prev = n, n = nodes_[n].next) {
    if (nodes_[n].packed != packed) continue;
    if (prev == kNil) {
      l.head = nodes_[n].next;
    } else {
      nodes_[prev].next = nodes_[n].next;
    }
    if (l.tail == n) l.tail = prev;
    free_node(n);
    --near_;
    return true;
  }
  return false;
}

void EventQueue::refuse_past(uint64_t time_ns) const {
  throw std::logic_error("EventQueue: push at " + std::to_string(time_ns) + " ns, before the last popped time " +
                         std::to_string(base_ns_) + " ns");
}

void EventQueue::refuse_id(uint32_t id) const {
  throw std::logic_error("EventQueue: id " + std::to_string(id) + " does not fit in 29 bits");
}

}  // namespace trim::sim

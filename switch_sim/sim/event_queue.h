// The simulator's event queue: a calendar of exact nanoseconds for the near future, a heap for
// the rest, and first-in first-out order at equal times.
//
// Why not one heap: every packet hop costs two events, so the queue sees ~10^9 pushes in a
// 256-host drop run, and the 4-ary (time, seq) heap's sift_down was a third of the profile.
// Nearly every event is due within a few microseconds (serialisation 720 ns, propagation
// 500 ns, an ACK's return 2 us): those go into a ring of kWindowNs one-nanosecond slots, each a
// FIFO list of 8-byte nodes, found again with two bit scans. Only timers and background
// arrivals (milliseconds ahead) go to the far heap.
//
// Order: exactly (time, push order), as the old (time, seq) heap's. A slot holds one time and
// keeps push order. An event goes to the far heap only while its time is at least kWindowNs
// past the last popped time; the heap keeps (time, seq) order, and its events move into the ring
// the moment a pop brings them within the window, before any later push can reach their slot
// directly, so at each time the far heap's events (pushed earlier) come first. The queue is
// monotone: a push before the last popped time is refused (std::logic_error), as a discrete-event
// simulator never schedules into its past.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trim::sim {

enum class EventKind : uint32_t {
  kPort,      // a port's serialiser finishes a packet (id = port; stale when the port moved on)
  kArrive,    // a packet reaches the far end of a link (id = packet pool slot)
  kAck,       // an ACK/NACK reaches the sender (id = packet pool slot that carried the data)
  kTimer,     // a flow's loss-detection timer (id = flow; stale when the flow re-armed it)
  kPace,      // a paced flow may send again (id = flow)
  kBgArrival, // a bursty background source starts a flow (id = host)
  kIterStart, // the workload starts its next iteration (id unused)
};

struct Event {
  uint64_t time_ns;
  EventKind kind;
  uint32_t id;
};

class EventQueue {
 public:
  // Ids are packed with their kind into 32 bits.
  static constexpr uint32_t kMaxId = (1u << 29) - 1;

  EventQueue();

  void push(uint64_t time_ns, EventKind kind, uint32_t id) {
    if (id > kMaxId) refuse_id(id);
    const uint32_t packed = static_cast<uint32_t>(kind) << 29 | id;
    if (time_ns - base_ns_ < kWindowNs) {  // also false for a time before base_ns_ (wraps)
      append(static_cast<uint32_t>(time_ns) & kSlotMask, packed);
    } else {
      push_far(time_ns, packed);
    }
    ++pushed_;
  }
  bool empty() const { return near_ == 0 && far_.empty(); }
  size_t size() const { return near_ + far_.size(); }
  // The earliest event (the first pushed of those at the earliest time). Not on an empty queue.
  Event pop() {
    if (near_ == 0) jump_to_far();
    const uint32_t slot = next_slot();
    const uint64_t time_ns = base_ns_ + ((slot - static_cast<uint32_t>(base_ns_)) & kSlotMask);
    Slot& s = slots_[slot];
    const uint32_t n = s.head;
    const uint32_t packed = nodes_[n].packed;
    s.head = nodes_[n].next;
    if (s.head == kNil) {
      s.tail = kNil;
      clear_bit(slot);
    }
    nodes_[n].next = free_;
    free_ = n;
    --near_;
    if (time_ns != base_ns_) {
      base_ns_ = time_ns;
      if (!far_.empty() && far_.front().time_ns - base_ns_ < kWindowNs) pull_far();
    }
    return Event{time_ns, static_cast<EventKind>(packed >> 29), packed & kMaxId};
  }
  uint64_t pushed() const { return pushed_; }

 private:
  static constexpr uint32_t kWindowBits = 12;
  static constexpr uint64_t kWindowNs = 1ull << kWindowBits;
  static constexpr uint32_t kSlotMask = (1u << kWindowBits) - 1;
  static constexpr uint32_t kWords = (1u << kWindowBits) / 64;  // 64: one summary word
  static constexpr uint32_t kNil = UINT32_MAX;

  struct Node {
    uint32_t packed;  // kind << 29 | id
    uint32_t next;    // next node of the same slot, or of the free list
  };
  struct Slot {
    uint32_t head = kNil, tail = kNil;
  };
  struct Far {
    uint64_t time_ns, seq;
    uint32_t packed;
  };

  void append(uint32_t slot, uint32_t packed) {
    uint32_t n = free_;
    if (n != kNil) {
      free_ = nodes_[n].next;
      nodes_[n] = Node{packed, kNil};
    } else {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{packed, kNil});
    }
    Slot& s = slots_[slot];
    if (s.tail == kNil) {
      s.head = n;
      words_[slot >> 6] |= 1ull << (slot & 63);
      summary_ |= 1ull << (slot >> 6);
    } else {
      nodes_[s.tail].next = n;
    }
    s.tail = n;
    ++near_;
  }
  void clear_bit(uint32_t slot) {
    if ((words_[slot >> 6] &= ~(1ull << (slot & 63))) == 0) summary_ &= ~(1ull << (slot >> 6));
  }
  // The first occupied slot at or after base_ns_'s, cyclically: the earliest time in the ring.
  uint32_t next_slot() const {
    const uint32_t from = static_cast<uint32_t>(base_ns_) & kSlotMask;
    const uint32_t w = from >> 6;
    const uint64_t here = words_[w] & (~0ull << (from & 63));
    if (here != 0) return w * 64 + static_cast<uint32_t>(__builtin_ctzll(here));
    const uint64_t later = w == 63 ? 0 : summary_ & (~0ull << (w + 1));
    const uint64_t pick = later != 0 ? later : summary_;  // else wrap around to the lowest word
    const uint32_t w2 = static_cast<uint32_t>(__builtin_ctzll(pick));
    return w2 * 64 + static_cast<uint32_t>(__builtin_ctzll(words_[w2]));
  }
  void push_far(uint64_t time_ns, uint32_t packed);
  void pull_far();     // far events now within the window move into the ring, in (time, seq) order
  void jump_to_far();  // the ring is empty: the clock jumps to the far heap's earliest time
  [[noreturn]] void refuse_past(uint64_t time_ns) const;
  [[noreturn]] void refuse_id(uint32_t id) const;

  std::vector<Slot> slots_;
  std::vector<Node> nodes_;
  uint32_t free_ = kNil;
  uint64_t words_[kWords] = {};  // one bit per occupied slot
  uint64_t summary_ = 0;         // one bit per non-zero word
  size_t near_ = 0;              // events in the ring
  std::vector<Far> far_;         // a min-heap on (time, seq)
  uint64_t base_ns_ = 0;         // the last popped time: no event is earlier
  uint64_t pushed_ = 0;
};

}  // namespace trim::sim

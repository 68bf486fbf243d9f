// The simulator's event queue: a two-level calendar (a timing wheel) with first-in first-out
// order at equal times, and a heap for what lies beyond it.
//
// Why not one heap: every packet hop costs two events, so the queue sees ~10^9 pushes in a
// 256-host drop run, and the 4-ary (time, seq) heap's sift_down was a third of the profile.
// Nearly every event is due within a few microseconds (serialisation 720 ns, propagation
// 500 ns, an ACK's return 2 us): those go straight into the near ring of 1-ns slots, each a FIFO
// of its first three events in the slot itself and 8-byte nodes beyond, found again with two bit
// scans. Timers and background arrivals (up to
// ~10 ms ahead) wait in the mid wheel, whose buckets are kCoarseNs wide and move into the near
// ring a bucket at a time; only what is further out than the wheel goes to the far heap.
//
// Order: exactly (time, push order), as the old (time, seq) heap's. Every event of one time is
// always in the same place, in push order: coarse bucket k (time >> kCoarseBits) is in the near
// ring once k <= migrated_, in the mid wheel while k < migrated_ + kMidBuckets, in the heap
// beyond; a pop that moves the clock into bucket k raises migrated_ to k + 1 and first moves
// the buckets that became near (mid wheel, in order) and mid (heap, in (time, seq) order), so
// a later push to a time finds the events pushed to it earlier ahead of it. The queue is
// monotone: a push before the last popped time is refused (std::logic_error), as a
// discrete-event simulator never schedules into its past.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trim::sim {

enum class EventKind : uint32_t {
  kPort,      // a port's serialiser finishes a packet (id = port; stale when the port moved on)
  kArrive,    // a packet reaches the far end of a link (id = pool slot | hop << kHopShift)
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

// Which of `Words` x 64 buckets hold something: one bit per bucket, one summary bit per word.
template <uint32_t Words>
class Occupancy {
 public:
  void set(uint32_t i) {
    words_[i >> 6] |= 1ull << (i & 63);
    summary_[i >> 12] |= 1ull << ((i >> 6) & 63);
  }
  void clear(uint32_t i) {
    if ((words_[i >> 6] &= ~(1ull << (i & 63))) == 0) summary_[i >> 12] &= ~(1ull << ((i >> 6) & 63));
  }
  // clear(i) when `really`, without a branch on it.
  void clear_if(uint32_t i, bool really) {
    if ((words_[i >> 6] &= ~(static_cast<uint64_t>(really) << (i & 63))) == 0) {
      summary_[i >> 12] &= ~(1ull << ((i >> 6) & 63));
    }
  }
  // The first occupied bucket at or after `from`, cyclically; only when one is occupied.
  uint32_t first_from(uint32_t from) const {
    const uint32_t w = from >> 6;
    const uint64_t here = words_[w] & (~0ull << (from & 63));
    if (here != 0) return w * 64 + static_cast<uint32_t>(__builtin_ctzll(here));
    const uint32_t next = first_word_from((w + 1) % Words);
    return next * 64 + static_cast<uint32_t>(__builtin_ctzll(words_[next]));
  }

 private:
  static constexpr uint32_t kSummary = (Words + 63) / 64;
  uint32_t first_word_from(uint32_t w) const {
    const uint32_t s0 = w >> 6;
    const uint64_t here = summary_[s0] & (~0ull << (w & 63));
    if (here != 0) return s0 * 64 + static_cast<uint32_t>(__builtin_ctzll(here));
    for (uint32_t k = 1; k <= kSummary; ++k) {  // the other summary words, then s0's low bits
      const uint32_t s = (s0 + k) % kSummary;
      if (summary_[s] != 0) return s * 64 + static_cast<uint32_t>(__builtin_ctzll(summary_[s]));
    }
    return 0;  // unreachable while a bucket is occupied
  }
  uint64_t words_[Words] = {};
  uint64_t summary_[kSummary] = {};
};

class EventQueue {
 public:
  // Ids are packed with their kind into 32 bits.
  static constexpr uint32_t kMaxId = (1u << 29) - 1;

  EventQueue();

  void push(uint64_t time_ns, EventKind kind, uint32_t id) {
    if (id > kMaxId) refuse_id(id);
    const uint32_t packed = static_cast<uint32_t>(kind) << 29 | id;
    const uint64_t coarse = time_ns >> kCoarseBits;
    if (coarse <= migrated_) {
      if (time_ns < base_ns_) refuse_past(time_ns);
      append_near(time_ns, packed);
    } else {
      push_later(time_ns, packed);
    }
    ++pushed_;
  }
  bool empty() const { return near_ + mid_ == 0 && far_.empty(); }
  size_t size() const { return near_ + mid_ + far_.size(); }
  // The earliest event (the first pushed of those at the earliest time). Not on an empty queue.
  Event pop() {
    if (near_ == 0) jump();
    const uint32_t slot = near_bits_.first_from(static_cast<uint32_t>(base_ns_) & kNearMask);
    const uint64_t time_ns = base_ns_ + ((slot - static_cast<uint32_t>(base_ns_)) & kNearMask);
    NearSlot& s = near_slots_[slot];
    // Without a branch on whether the slot holds more (about even odds: mispredicted half the
    // time): the events move up, and the slot's bit goes when none is left.
    const uint32_t packed = s.ev[0];
    const uint32_t last = s.ev[kInline - 1];
    for (uint32_t i = 0; i + 1 < kInline; ++i) s.ev[i] = s.ev[i + 1];
    s.ev[kInline - 1] = kNil;
    // A full slot may have more in its overflow list: the list's head moves up.
    if (last != kNil) s.ev[kInline - 1] = take_overflow(slot);
    near_bits_.clear_if(slot, s.ev[0] == kNil);
    --near_;
    // (Unconditionally: the clock stays put for almost half the pops, another coin flip. A pop
    // at the same time never needs the migration, which the first pop at that time did.)
    base_ns_ = time_ns;
    if ((time_ns >> kCoarseBits) + 1 > migrated_) migrate((time_ns >> kCoarseBits) + 1);
    return Event{time_ns, static_cast<EventKind>(packed >> 29), packed & kMaxId};
  }
  uint64_t pushed() const { return pushed_; }
  // Takes back the event (kind, id) queued for the time of the last pop, which the caller knows
  // will do nothing when it pops; the others keep their order. False when there is none.
  bool cancel_current(EventKind kind, uint32_t id);

 private:
  // The near ring holds the clock's coarse bucket and the next: 4096 ns of 1-ns slots, so a
  // push up to 2048 ns ahead (an ACK's return) always goes straight in.
  static constexpr uint32_t kCoarseBits = 11;
  static constexpr uint32_t kNearSlots = 2u << kCoarseBits;
  static constexpr uint32_t kNearMask = kNearSlots - 1;
  static constexpr uint32_t kMidBuckets = 8192;  // x 2048 ns: 16.8 ms, past the 10 ms RTO
  static constexpr uint32_t kNil = UINT32_MAX;

  struct Node {
    uint32_t packed;  // kind << 29 | id
    uint32_t next;    // next node of the same list, or of the free list
  };
  struct List {
    uint32_t head = kNil, tail = kNil;
  };
  // A near slot keeps its first kInline events itself, in push order (kNil after the last), and
  // any more in a list of nodes (near_overflow_, only while the slot is full): most slots hold one
  // to three events (9000-byte packets and 500 ns links put many events on the same nanoseconds),
  // so pushes and pops rarely touch a node, and a slot is as small as the old first-plus-list one.
  static constexpr uint32_t kInline = 3;
  struct NearSlot {
    uint32_t ev[kInline] = {kNil, kNil, kNil};  // packed; kNil (no kind reaches 7) when unused
  };
  struct Far {
    uint64_t time_ns, seq;
    uint32_t packed;
  };

  uint32_t new_node(uint32_t packed) {
    uint32_t n = free_;
    if (n != kNil) {
      free_ = nodes_[n].next;
      nodes_[n] = Node{packed, kNil};
    } else {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{packed, kNil});
      node_time_.push_back(0);
    }
    return n;
  }
  template <class Bits>
  void link(List& l, uint32_t index, Bits* bits, uint32_t n) {
    if (l.tail == kNil) {
      l.head = n;
      bits->set(index);
    } else {
      nodes_[l.tail].next = n;
    }
    l.tail = n;
  }
  void free_node(uint32_t n) {
    nodes_[n].next = free_;
    free_ = n;
  }
  // Appends to the slot's events; `node` (kNil: none) is a node that already holds `packed`
  // (an event moving in from the mid wheel), reused if the event goes to the overflow list.
  void append_near(uint64_t time_ns, uint32_t packed, uint32_t node = kNil) {
    const uint32_t slot = static_cast<uint32_t>(time_ns) & kNearMask;
    NearSlot& s = near_slots_[slot];
    // Pushes come in fronts (a link's delay, a serialisation, an ACK's return ahead of the
    // clock) that move through the ring with it: the next line of this front is fetched now.
    __builtin_prefetch(&near_slots_[(slot + 8) & kNearMask]);
    // The slot's events are a prefix of ev[]: the first free place is their count, worked out
    // without a branch (how many a slot holds is a coin flip); setting a set bit changes nothing.
    static_assert(kInline == 3, "the count below reads kInline places");
    const uint32_t i = (s.ev[0] != kNil) + (s.ev[1] != kNil) + (s.ev[2] != kNil);
    if (i < kInline) {
      near_bits_.set(slot);
      s.ev[i] = packed;
      if (node != kNil) free_node(node);
    } else {
      const uint32_t n = node != kNil ? node : new_node(packed);
      nodes_[n].next = kNil;
      List& l = near_overflow_[slot];
      if (l.tail == kNil) {
        l.head = n;
      } else {
        nodes_[l.tail].next = n;
      }
      l.tail = n;
    }
    ++near_;
  }
  // The first event of a full slot's overflow list (kNil when it is empty), out of the list.
  uint32_t take_overflow(uint32_t slot) {
    List& l = near_overflow_[slot];
    const uint32_t head = l.head;
    if (head == kNil) return kNil;
    const uint32_t packed = nodes_[head].packed;
    l.head = nodes_[head].next;
    if (l.head == kNil) l.tail = kNil;
    free_node(head);
    return packed;
  }
  void push_later(uint64_t time_ns, uint32_t packed);  // the mid wheel or the far heap
  void migrate(uint64_t upto);  // raises migrated_ to `upto`, moving what became near or mid
  void jump();                  // the near ring is empty: the clock jumps to the next event
  [[noreturn]] void refuse_past(uint64_t time_ns) const;
  [[noreturn]] void refuse_id(uint32_t id) const;

  std::vector<Node> nodes_;
  std::vector<uint64_t> node_time_;  // a mid-wheel node's time (near nodes' is their slot)
  uint32_t free_ = kNil;
  std::vector<NearSlot> near_slots_;
  std::vector<List> near_overflow_;
  Occupancy<kNearSlots / 64> near_bits_;
  size_t near_ = 0;
  std::vector<List> mid_buckets_;
  Occupancy<kMidBuckets / 64> mid_bits_;
  size_t mid_ = 0;
  std::vector<Far> far_;  // a min-heap on (time, seq)
  uint64_t base_ns_ = 0;  // the last popped time (or the start of a bucket jumped to): none earlier
  uint64_t migrated_ = 1;  // coarse buckets up to this one are in the near ring
  uint64_t pushed_ = 0;
};

}  // namespace trim::sim

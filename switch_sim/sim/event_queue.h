// The simulator's event queue: a 4-ary min-heap of compact, trivially copyable events.
//
// Why a hand-rolled heap and not std::priority_queue of std::function: every packet hop costs
// two events, so the queue sees ~10^8 pushes in a 1024-host run; a 24-byte POD event and an
// explicit (time, sequence) order keep it cache-friendly, allocation-free once the vector has
// grown, and deterministic (equal times pop in the order they were pushed).
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
  uint64_t seq;  // push order: ties at equal time pop first-in first-out
  EventKind kind;
  uint32_t id;
};

class EventQueue {
 public:
  void push(uint64_t time_ns, EventKind kind, uint32_t id) {
    heap_.push_back(Event{time_ns, next_seq_++, kind, id});
    sift_up(heap_.size() - 1);
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }
  Event pop();
  uint64_t pushed() const { return next_seq_; }

 private:
  // 4-ary: half the depth of a binary heap, and a node's children share a cache line or two;
  // sift_down dominated the profile with 2 children per level.
  static constexpr size_t kArity = 4;
  static bool before(const Event& a, const Event& b) {
    return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : a.seq < b.seq;
  }
  void sift_up(size_t i);
  void sift_down(size_t i);

  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace trim::sim

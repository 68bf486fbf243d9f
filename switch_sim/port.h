// One switch egress port: the queue model both drivers share (trim-switch, the live UDP
// daemon, and trim-sim, the discrete-event simulator). Time is an input (ns), so the model is
// deterministic and testable on fixed arrival sequences. No sockets, no clocks, no threads.
//
// A packet arrives with enqueue(); the port serialises one packet at a time at the link rate,
// header queue first (strict priority) or by weighted round robin, and a packet leaves the
// far end of the link prop_delay_ns after its last bit was sent.
//
// A third, optional class: enqueue_priority() puts another tenant's packets in their own queue,
// served strictly before both header and data queue (a higher-priority traffic class on a real
// switch). The training classes then share what it leaves, between themselves as before; it is
// never trimmed and drops only beyond its own cap. Unused, the port behaves as without it. advance(now) moves the
// port's clock; departed() lists what has finished serialisation by then, each with the time
// it reaches the far end (which may still be ahead of now).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace trim::sw {

enum class Mode : uint8_t {
  kTrim,    // data queue full: trim a trimmable packet into the header queue, drop the rest
  kDrop,    // an ordinary tail-drop switch: the baseline
  kRandom,  // trim each trimmable packet with probability random_p, whatever the queue (seed's experiments)
  kReplay,  // trim exactly the packets of a recorded transcript, whatever the queue
};
// kDwrr: deficit weighted round robin by bytes, the header queue's share of the link
// dwrr_header_share (UEC suggests trimmed traffic at most 50 %, about 25 % with WDRR).
enum class Priority : uint8_t { kStrict, kWrr, kDwrr };

const char* mode_name(Mode m);
bool parse_mode(const std::string& s, Mode* out);

struct PortConfig {
  double rate_gbps = 10.0;            // serialisation rate of the link behind the port
  uint64_t prop_delay_ns = 1000;      // link propagation delay
  uint64_t data_queue_bytes = 262144; // data queue cap in bytes (0: no byte cap)
  uint32_t data_queue_packets = 0;    // data queue cap in packets (0: no packet cap)
  uint64_t header_queue_bytes = 65536;
  uint64_t prio_queue_bytes = 262144; // enqueue_priority()'s queue cap in bytes (0: no cap)
  Mode mode = Mode::kTrim;
  // Where a trim cuts: 0 = "plane0" (exactly the packet's own trim point, Packet::plane0_bytes);
  // else a fixed size as real switches use (64, 128, ... 1024): a packet no longer than it
  // passes to the header queue untrimmed.
  uint32_t trim_bytes = 0;
  bool ndp_coin = false;              // on overflow, trim the arriving packet or the data queue's tail (50/50)
  // kTrim, a non-trimmable packet at a full data queue: false = dropped (its sender finds out by
  // RACK or timeout); true = cut to its header alone (Packet::header_bytes) and sent on the
  // header queue, so the receiver learns of the loss at once and NACKs it (NDP's rule).
  bool trim_exact_to_header = false;
  Priority priority = Priority::kStrict;
  uint32_t wrr_header_weight = 4;     // kWrr: packets served from the header queue per round ...
  uint32_t wrr_data_weight = 1;       // ... and from the data queue
  double dwrr_header_share = 0.25;    // kDwrr: the header queue's share of the bytes served while both wait
  double random_p = 0.0;              // kRandom
  uint64_t seed = 1;                  // kRandom and the NDP coin
};

// A packet as the model sees it. `bytes` is what serialisation and the queues count (the
// driver decides whether that includes IP/UDP/Ethernet overhead).
struct Packet {
  // (40 bytes, not 48, and the queues and the simulator copy it per hop. `tag` last: a driver
  // that sets it just before handing the packet over stores 8 bytes that the copy's last 8-byte
  // load then takes whole, where a tag inside a 16-byte load stalls store forwarding.)
  uint64_t flow = 0;          // identity for transcripts: connection cookie,
  uint32_t msg = 0;           // message sequence,
  uint32_t psn = 0;           // packet sequence number
  uint32_t bytes = 0;
  uint32_t plane0_bytes = 0;  // size after a plane0 trim (header + plane 0); 0 when not trimmable
  uint32_t header_bytes = 0;  // size cut to the header alone (trim_exact_to_header); 0 = cannot be
  bool trimmable = false;
  bool trimmed = false;       // set when the model trims it
  bool header_class = false;  // set when it travels in the header queue (trimmed, or small control)
  bool priority_class = false;  // set by enqueue_priority(): the other tenant's strict class
  uint64_t tag = 0;           // opaque to the model: the driver's handle on the payload
};
static_assert(sizeof(Packet) == 40, "the queues and the simulator copy a packet per hop");

struct Departure {
  Packet packet;
  uint64_t arrive_ns = 0;  // when the last bit reaches the far end of the link
};

enum class Verdict {
  kQueued,         // into the data queue whole
  kQueuedHeader,   // into the header queue (trimmed, or short enough to pass a fixed trim size)
  kDropped,        // data queue full and not trimmable (or kDrop mode)
  kDroppedHeader,  // trimmed, but the header queue was full
};

struct PortCounters {
  // (What every packet updates first, so it shares the port's hot cache lines.)
  uint64_t received_packets = 0, received_bytes = 0;
  uint64_t sent_packets = 0, sent_bytes = 0;
  uint64_t max_data_queue_bytes = 0, max_header_queue_bytes = 0;
  uint64_t trimmed_packets = 0, trimmed_bytes_removed = 0;
  uint64_t dropped_packets = 0, dropped_bytes = 0;
  uint64_t dropped_header_packets = 0;
  uint64_t exact_cut_packets = 0;  // non-trimmable packets cut to their header (trim_exact_to_header)
  // The priority class (enqueue_priority), also counted in the totals above: what training got
  // is sent less prio_sent.
  uint64_t prio_sent_packets = 0, prio_sent_bytes = 0;
  uint64_t prio_dropped_packets = 0, prio_dropped_bytes = 0;
  uint64_t max_prio_queue_bytes = 0;
  // with_prio: append the priority class's counters (off: the golden traces' exact text).
  std::string to_json(bool with_prio = false) const;
  // Totals over ports: the counts add up, the maxima take the larger.
  void add(const PortCounters& o);
};

// Which packets a port trimmed, in order; what kReplay reproduces.
struct TranscriptEntry {
  uint64_t flow = 0;
  uint32_t msg = 0;
  uint32_t psn = 0;
  bool operator==(const TranscriptEntry& o) const { return flow == o.flow && msg == o.msg && psn == o.psn; }
};

// Cache-line aligned: the simulator touches a port's hot fields on every hop, and they fit in
// five lines when a port does not start mid-line.
class alignas(64) EgressPort {
 public:
  explicit EgressPort(const PortConfig& cfg);

  // Moves the clock to now_ns (never backwards: an earlier time is taken as the current one).
  void advance(uint64_t now_ns);
  // A packet arrives at now_ns (the port advances to it first).
  Verdict enqueue(Packet p, uint64_t now_ns);
  // A packet of the strict-priority class arrives: kQueued, or kDropped beyond prio_queue_bytes.
  Verdict enqueue_priority(Packet p, uint64_t now_ns);
  // When the next packet finishes serialisation (UINT64_MAX when the port is idle and empty).
  uint64_t next_event_ns() const {
    // busy_ ? wire_done_ns_ : UINT64_MAX, without a branch (whether a port is busy is as good as
    // random from one hop to the next, and the compiler made it one).
    return wire_done_ns_ | (static_cast<uint64_t>(busy_) - 1);
  }
  // Packets that have left, in order; the driver takes them (and clears the vector).
  std::vector<Departure>& departed() { return departed_; }
  // Or a driver that handles each departure at once (the simulator) takes them as they happen,
  // in the same order, instead of through departed() (one copy and a cache line fewer a packet).
  using DepartureSink = void (*)(void* ctx, const Departure& d);
  void set_departure_sink(DepartureSink sink, void* ctx) {
    sink_ = sink;
    sink_ctx_ = ctx;
  }

  // kReplay: the packets to trim (by flow, msg, psn).
  void set_replay(const std::vector<TranscriptEntry>& entries);
  // Every trim so far, when recording is on.
  void record_transcript(bool on) { recording_ = on; }
  const std::vector<TranscriptEntry>& transcript() const { return transcript_; }

  uint64_t data_queue_bytes() const { return data_bytes_; }
  uint64_t header_queue_bytes() const { return header_bytes_; }
  uint64_t prio_queue_bytes() const { return prio_bytes_; }
  size_t data_queue_packets() const { return data_.size(); }
  const PortCounters& counters() const { return counters_; }
  const PortConfig& config() const { return cfg_; }
  uint64_t now_ns() const { return now_ns_; }

 private:
  // A FIFO of packets on one power-of-two ring: what std::deque did here, without its
  // per-block allocations and with the head, tail and storage in two cache lines (the simulator
  // touches every port on every hop).
  class PacketRing {
   public:
    bool empty() const { return size_ == 0; }
    size_t size() const { return size_; }
    Packet& front() { return slots_[head_]; }
    Packet& back() { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }
    void push_back(const Packet& p) {
      if (size_ == slots_.size()) grow();
      slots_[(head_ + size_) & (slots_.size() - 1)] = p;
      ++size_;
    }
    // An emptied ring starts again at slot 0: a port that rarely queues more than a packet or
    // two keeps using the same cache lines instead of walking the whole ring.
    void pop_front() {
      head_ = --size_ == 0 ? 0 : (head_ + 1) & static_cast<uint32_t>(slots_.size() - 1);
    }
    void pop_back() {
      if (--size_ == 0) head_ = 0;
    }

   private:
    void grow();
    std::vector<Packet> slots_;
    uint32_t head_ = 0, size_ = 0;
  };

  bool data_full(uint32_t extra_bytes) const;
  bool trim(Packet* p);  // false: nothing to cut (plane0 of a non-trimmable packet)
  Verdict to_header_queue(Packet p);
  void start_next();     // the link is free: pick the next packet to serialise
  void start_idle(const Packet& p);  // the same for a data packet arriving at an idle, empty port
  void start_prio();     // start_next() while the priority queue waits
  inline uint64_t serialise_ns(uint32_t bytes);  // the memo (inlined into its two callers)
  __attribute__((noinline)) uint64_t serialise_new_ns(uint32_t bytes);  // a size not in it

  // What every packet touches, in four cache lines (a port touched in six or seven lines cost an
  // L1 miss each on the simulator's every hop): line 0 the clock, the queue sizes and the
  // configuration's hot fields (copies of cfg_'s); line 1 the packet on the wire and the
  // serialisation memo; line 2 the two rings; line 3 the sink and the per-packet counters. The
  // configuration, the random source, the replay set and the transcript (used by kRandom/kReplay
  // or recording only) last.
  uint64_t wire_done_ns_ = 0;
  uint64_t now_ns_ = 0;
  uint64_t data_bytes_ = 0, header_bytes_ = 0;
  uint64_t prop_delay_ns_;       // cfg_.prop_delay_ns
  uint64_t data_cap_bytes_;      // cfg_.data_queue_bytes
  uint32_t data_cap_packets_;    // cfg_.data_queue_packets
  uint32_t wrr_header_left_ = 0, wrr_data_left_ = 0;
  Mode mode_;                    // cfg_.mode
  Priority priority_;            // cfg_.priority
  bool busy_ = false;
  bool prio_waiting_ = false;    // !prio_.empty(), in the line start_next() reads anyway
  Packet on_wire_;
  // The last two sizes serialised and their times (a port sees few sizes: MTU packets, headers):
  // the same ceil(bytes x 8 / rate) as computed, without a division per packet.
  uint32_t ser_bytes_[2] = {0, 0};
  uint64_t ser_ns_[2] = {0, 0};
  PacketRing data_, header_;
  DepartureSink sink_ = nullptr;
  void* sink_ctx_ = nullptr;
  PortCounters counters_;
  // kDwrr: each queue's credit in bytes, and whose turn it is (true: the header queue's).
  int64_t dwrr_credit_[2] = {0, 0};
  bool dwrr_header_turn_ = false;
  bool dwrr_pick_header();
  std::vector<Departure> departed_;
  PortConfig cfg_;
  bool recording_ = false;
  std::vector<TranscriptEntry> transcript_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::mt19937_64 rng_;
  struct EntryHash {
    size_t operator()(const TranscriptEntry& e) const { return e.flow * 1000003u ^ e.msg * 7919u ^ e.psn; }
  };
  std::unordered_set<TranscriptEntry, EntryHash> replay_;
  PacketRing prio_;              // the priority class: cold unless used
  uint64_t prio_bytes_ = 0;
};

}  // namespace trim::sw

// What the per-connection protocol state machines (send_proto, recv_proto) share: the
// connection's fixed parameters, the completion record of one operation, the sink they emit
// packets into, and the counters. No sockets here: the engine owns those, and tests drive the
// state machines with hand-built packets and a captured sink.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "codec/layout.h"
#include "common/status.h"
#include "transport/codec_pool.h"
#include "transport/completion.h"
#include "transport/wire.h"

namespace trim::transport {

// Fixed once the handshake is done.
struct ConnParams {
  codec::CodecConfig codec;  // seed already keyed with the cookie: both ends hold the same
  uint64_t cookie = 0;
  uint32_t dst_ip4_be = 0;   // the receiver's UDP endpoint, written into every data header
  uint16_t dst_port = 0;     // host order
  uint32_t window_max = 512;
  double target_trim = 0.05;
  uint64_t min_rto_ns = 2'000'000;
  double rate_gbps = 0;      // 0 = no pacing
  bool rto_undo = true;      // NCCL_TRIM_RTO_UNDO: spurious timeouts are detected and undone
  // Lossy packets leave with a kernel UDP checksum (not NCCL_TRIM_UDP_CHECKSUM's 0): they say so,
  // and a receiver skips their check points when they arrive whole.
  bool udp_checksummed = true;
  // NCCL_TRIM_ERROR_FEEDBACK, where the caller's buffers keep their meaning (transport/feedback.h).
  bool error_feedback = false;
  // NCCL_TRIM_QUIET_MS: no trim or loss reported for this long makes the connection quiet (0:
  // never); NCCL_TRIM_QUIET_LAYOUT: its rht and rotated messages then go exact (true) or, rht
  // only, unrotated.
  uint64_t quiet_ns = 0;
  bool quiet_exact = true;
  // A new connection is encoded until it has been quiet for quiet_ns (the plugin's), or starts
  // quiet (tests of the quiet layouts).
  bool start_quiet = false;
  // Codec worker pool for trimmable messages (null: encode/decode on the engine's thread) and
  // what its workers wake when a task is done (the engine; null in tests that poll).
  CodecPool* pool = nullptr;
  Waker* waker = nullptr;
};

// How long the engine sleeps at most while it waits for a codec task (a finished task wakes
// it at once; this only bounds the cost of a wake-up that never came).
inline constexpr uint64_t kCodecPollNs = 200'000;

// Completion of one isend/irecv, written by the engine thread, polled by NCCL's proxy thread.
// The state is stored seq_cst, then the signal (if any) notified: see CompletionSignal.
class OpResult {
 public:
  enum State : int { kPending = 0, kDone = 1, kFailed = 2 };
  void finish(uint64_t bytes) {
    CompletionSignal* const signal = signal_;  // read first: the op may be reused once it is done
    bytes_ = bytes;
    state_.store(kDone, std::memory_order_seq_cst);
    if (signal != nullptr) signal->notify();
  }
  void fail(Status error) {
    if (state_.load(std::memory_order_relaxed) != kPending) return;
    CompletionSignal* const signal = signal_;
    error_ = std::move(error);
    state_.store(kFailed, std::memory_order_seq_cst);
    if (signal != nullptr) signal->notify();
  }
  State state() const { return static_cast<State>(state_.load(std::memory_order_acquire)); }
  // The waiter's recheck (CompletionSignal: it must be seq_cst).
  bool pending_seq_cst() const { return state_.load(std::memory_order_seq_cst) == kPending; }
  bool pending() const { return state() == kPending; }
  // Valid once state() != kPending.
  uint64_t bytes() const { return bytes_; }
  const Status& error() const { return error_; }
  // Before the op is posted; `signal`: whom its completion wakes (null: nobody).
  void reset(CompletionSignal* signal = nullptr) {
    bytes_ = 0;
    error_ = Status::ok();
    signal_ = signal;
    state_.store(kPending, std::memory_order_relaxed);
  }

 private:
  std::atomic<int> state_{kPending};
  uint64_t bytes_ = 0;
  Status error_;
  CompletionSignal* signal_ = nullptr;
};

// Whether the buffer [data, data + bytes) overlaps [lo, hi).
inline bool overlaps(const void* data, uint64_t bytes, uintptr_t lo, uintptr_t hi) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  return bytes > 0 && a < hi && lo < a + bytes;
}

// The kernel's references to a message's buffer (MSG_ZEROCOPY): a send of it the sink made
// without copying counts one until the kernel's completion for it arrives. The message is not
// handed back to NCCL while any is left. Engine thread only; shared with the sink because a
// failed connection forgets its messages while completions are still to come.
struct ZcHold {
  uint32_t pending = 0;
};

// Where a state machine puts what it wants sent. Data packets are already stamped.
class TxSink {
 public:
  virtual ~TxSink() = default;
  // One datagram: `head` then `rest` (zero-copy packets: the header, then the payload straight
  // from NCCL's buffer; staged packets pass rest_bytes = 0).
  virtual void data(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes) = 0;
  // The same, where `rest` may leave without a copy (MSG_ZEROCOPY), counted against `hold`.
  // By default it is copied like any other.
  virtual void data_pinned(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
                           const std::shared_ptr<ZcHold>& hold) {
    (void)hold;
    data(head, head_bytes, rest, rest_bytes);
  }
  virtual void ctrl(const CtrlPacket& p) = 0;
  virtual void frame(const Frame& f) = 0;  // on the connection's TCP stream
};

// Per-connection counters; plain integers, touched by the engine thread only (close reads
// them after the engine has let go of the connection).
struct ConnCounters {
  uint64_t sent_packets = 0, sent_bytes = 0, retransmitted = 0, rto_events = 0, fast_retransmits = 0, tail_probes = 0;
  uint64_t nacks_received = 0;
  uint64_t spurious_rto = 0;  // timeouts whose original arrived after all (ACK echo): undone
  uint64_t rto_resends_cancelled = 0;  // their resends still queued at the verdict: dropped, never sent
  uint64_t received_packets = 0, received_bytes = 0, trimmed_accepted = 0, trimmed_nacked = 0;
  uint64_t trimmed_marked = 0;  // accepted with the trimmed DSCP (cut or not)
  uint64_t cut_received = 0;    // read from the packet socket (NCCL_TRIM_RX_CUT): lengths the switch left
  uint64_t dup_packets = 0, bad_packets = 0, out_of_window = 0;
  uint64_t acks_sent = 0, acks_received = 0;
  uint64_t codec_tasks = 0, codec_inline = 0;  // pool tasks queued / run on the engine (queue full)
  uint64_t trims_reported = 0;  // cut packets of ours the receiver named in its ACKs
  uint64_t trims_unmatched = 0;  // named after their packet was acknowledged (a reordered ACK): not fed back
  uint64_t ef_applied = 0, ef_recorded = 0;  // error feedback: messages sent with a residual, and leaving one
  uint64_t quiet_messages = 0;  // rht/rotated messages sent quiet (NCCL_TRIM_QUIET_MS, _LAYOUT): exact or unrotated
  std::string to_string() const;
};

// Queues task t of w on the pool, counting where it ran (queued, or at once on a full queue).
inline void submit_task(CodecPool* pool, const std::shared_ptr<CodecWork>& w, uint32_t t, ConnCounters* k) {
  ++(pool->submit(w, t) ? k->codec_tasks : k->codec_inline);
}

}  // namespace trim::transport

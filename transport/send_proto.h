// The sending half of a connection: message queue, packet sequence numbers, the in-flight
// window, retransmission (fast, NACK, timeout) and the trim-aware congestion window.
// Driven by one thread (the engine's); see proto.h.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <vector>

#include "codec/encoder.h"
#include "codec/packet.h"
#include "transport/congestion.h"
#include "transport/feedback.h"
#include "transport/proto.h"
#include "transport/recovery.h"

namespace trim::transport {

// One isend, owned by its request slot until it completes.
struct SendOp {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint32_t seq = 0;  // position in the connection's FIFO
  bool trimmable = false;
  codec::DType dtype = codec::DType::kRaw;  // kRaw when exact
  OpResult result;
};

class SendProto {
 public:
  explicit SendProto(const ConnParams& params);
  ~SendProto();

  // A new message, in FIFO order (op->seq must be the next sequence number).
  Status post(SendOp* op);
  // The receiver posted receive `seq` with room for `capacity` bytes.
  void on_cts(uint64_t seq, uint64_t capacity);
  void on_ack(const CtrlPacket& ack, uint64_t now_ns);
  // Retransmissions first, then new packets while the window (and pacing) allow; at most
  // `budget` packets. Returns how many were emitted.
  uint32_t poll_tx(uint64_t now_ns, uint32_t budget, TxSink* sink);
  // The kernel let go of zero-copy sends (MSG_ZEROCOPY completions): messages that only waited
  // for that complete now.
  void on_kernel_released() { complete_finished(); }
  // Packet `psn` left only at now_ns: it waited in the engine for room in the socket's send
  // buffer. Its send time (RTT sample, RACK, tail probe) is when the kernel took it.
  void on_left(uint32_t psn, uint64_t now_ns);
  // The retransmission timer.
  void on_timer(uint64_t now_ns);
  // The earliest time poll_tx/on_timer has something to do (UINT64_MAX: nothing pending).
  uint64_t next_deadline_ns(uint64_t now_ns) const;
  // Fails every pending operation (cancelling its codec tasks).
  void fail_all(const Status& error);
  // Cancels the codec tasks of every pending operation (close: NCCL frees the buffers next).
  void cancel_codec();
  // The receiver closed after completing `completed` receives: those sends are delivered.
  void on_peer_fin(uint64_t completed);

  const ConnParams& params() const { return params_; }
  bool has_pending() const { return !msgs_.empty(); }
  // Whether a pending operation's buffer overlaps [lo, hi): the proto still reads from it.
  bool uses_memory(uintptr_t lo, uintptr_t hi) const;
  const ConnCounters& counters() const { return counters_; }
  ConnCounters& counters() { return counters_; }
  // Codec tasks of this connection queued or running on the pool (close waits for none).
  uint32_t tasks_in_flight() const { return in_flight_->load(std::memory_order_acquire); }
  const TrimCc& cc() const { return cc_; }
  const ErrorFeedback* feedback() const { return ef_.get(); }
  // Turns error feedback on (ConnParams::error_feedback at construction is the other way); true
  // when it was off. Only before the first post: the engine reads ef_ only for posted messages.
  bool enable_error_feedback();
  uint64_t srtt_ns() const { return rec_.srtt_ns(); }
  uint64_t rto_ns() const { return rec_.rto_ns(); }
  uint32_t in_flight() const { return outstanding_; }

 private:
  struct Msg;
  struct Slot {
    Msg* msg = nullptr;
    uint32_t pkt = 0;
    uint64_t sent_ns = 0;
    uint16_t transmissions = 0;
    bool acked = true;
    bool queued = false;  // in retx_
    bool trimmed = false;  // the receiver reported it accepted cut (no RTT sample, no RACK)
    uint32_t rto_episode = 0;  // queued again by this timeout episode (0: none), see rto_
    uint64_t first_sent_ns = 0;  // its first transmission (sent_ns is the latest)
    uint64_t payload_offset = 0;  // zero-copy packets: the payload's place in the message
    uint32_t payload_bytes = 0;
  };
  Slot& slot(uint32_t psn) { return ring_[psn % kSackBits]; }
  bool in_flight_psn(uint32_t psn) const;
  // Lays m out and, for an encoded message, sets its encoding going (on the pool: every task
  // at once, as soon as it is posted, so encoding overlaps sending what is ahead of it).
  Status prepare(Msg* m);
  Status start(Msg* m);
  // Whether m's rows up to the one holding packet `pkt` are encoded (inline: encodes them now;
  // pool: whether their tasks are done). False: wait for the pool.
  Result<bool> encode_rows_through(Msg* m, uint32_t pkt);
  // Header of the zero-copy packet m->next, sent as `psn` (kept in headers_ until acknowledged).
  Status build_zero_copy_header(Msg* m, uint32_t psn);
  uint8_t* header(uint32_t psn) { return headers_.data() + static_cast<size_t>(psn % kSackBits) * codec::kHeaderBytes; }
  void send_packet(uint32_t psn, uint64_t now_ns, TxSink* sink, bool retransmit);
  void mark_acked(uint32_t psn, uint64_t now_ns);
  void queue_retx(uint32_t psn);
  // RACK's detection pass over the packets in flight; arms its reorder timer.
  void rack_detect(uint64_t now_ns);
  // Eifel detection (RFC 3522) of the open timeout by an ACK's echo, before the ACK marks
  // anything acknowledged: its original arrived (spurious: undone) or its resend did (a loss).
  void check_timeout(const AckEcho& echo, uint64_t now_ns);
  void complete_finished();
  // The receiver named these packets cut (before the same ACK acknowledges them).
  void note_trims(const CtrlPacket& ack);
  // Error feedback for a completed message that lost something to trims.
  void feed_back(Msg* m);
  Msg* next_to_send();

  ConnParams params_;
  codec::Encoder encoder_;
  TrimCc cc_;
  std::list<std::unique_ptr<Msg>> msgs_;  // posted and not yet complete, in seq order
  uint32_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> early_cts_;  // CTS for messages not posted yet
  std::vector<Slot> ring_;
  std::vector<uint8_t> headers_;  // one per ring slot: headers of zero-copy packets in flight
  uint32_t snd_una_ = 0, snd_nxt_ = 0;
  uint32_t outstanding_ = 0;  // sent and not acked
  std::deque<uint32_t> retx_;
  Recovery rec_;  // RTT, timeout with backoff, RACK, tail probes (shared with trim-sim)
  uint64_t pace_next_ns_ = 0;
  uint64_t last_accepted_ = 0, last_trimmed_ = 0, last_nacked_ = 0;
  ConnCounters counters_;
  std::vector<std::vector<uint8_t>> staging_pool_;
  SpareWork spare_work_;  // pooled messages' staging, reused
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>(0);
  bool codec_waiting_ = false;  // the next packet waits for a pool task
  std::unique_ptr<ErrorFeedback> ef_;  // NCCL_TRIM_ERROR_FEEDBACK, else null
  // When a trim or loss was last reported (NCCL_TRIM_QUIET_MS), on the clock prepare() reads
  // (on_ack's and on_timer's may be a test's); 0: never.
  uint64_t last_congestion_ns_ = 0;
  void note_congestion();
  // The timeouts since the last one decided (one episode): what they resent is the slots of its
  // number, below end_psn; cwnd_before is the window before the first of them cut it.
  struct OpenTimeout {
    bool open = false;
    uint32_t episode = 0;
    uint32_t end_psn = 0;
    double cwnd_before = 0;
  } rto_;
};

}  // namespace trim::transport

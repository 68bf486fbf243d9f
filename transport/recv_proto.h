// The receiving half of a connection: posted receives (announced to the sender by CTS frames),
// the accepted-psn window, decoding into NCCL's buffers, and ACKs with a selective bitmap.
// A trimmed packet of a trimmable message is accepted (its heads decode); a trimmed packet of
// an exact message is NACKed at once and never marked received. Driven by one thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "codec/decoder.h"
#include "transport/placed_rx.h"
#include "transport/proto.h"

namespace trim::transport {

constexpr uint32_t kMaxPostedRecvs = 32;

// One irecv, owned by its request slot until it completes.
struct RecvOp {
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  uint32_t seq = 0;
  // A combining receive (ncclTrimIrecvCombine): data = received (op) data, element by element,
  // done by the codec workers (trimmable) or the engine (exact), each element once. What arrived
  // is never visible on its own; a failed receive may leave data partly combined.
  bool combine = false;
  codec::RedType combine_type = codec::RedType::kF32;
  codec::RedOp combine_op = codec::RedOp::kSum;
  OpResult result;
};

class RecvProto {
 public:
  explicit RecvProto(const ConnParams& params);
  ~RecvProto();

  // A new receive in FIFO order; emits its CTS.
  Status post(RecvOp* op, TxSink* sink);
  // One validated data packet of this connection (cookie already matched).
  void on_data(const codec::ParsedPacket& p, uint64_t now_ns);
  // Into *e, the packets expected next (placed_rx.h): those after the last exact packet accepted,
  // in its message, while they have not arrived, `max_bytes` with headers at most. False: none.
  bool expect(Expectation* e, uint32_t max_bytes) const;
  // Whether the last exact packet accepted was decoded in place and a receive is still pending:
  // its connection's next datagrams are worth reading one at a time, to be placed.
  bool in_place_stream() const { return last_exact_.valid && last_exact_.in_place && has_pending(); }
  // The sender's message `seq` is empty.
  void on_empty(uint64_t seq);
  // Sends one ACK if anything arrived since the last one (called after each receive batch),
  // or unconditionally when `force` (a duplicate asks for a fresh ACK too).
  void flush_ack(TxSink* sink);
  // Whether the trim reports waiting for the next ACK fill one: flush it now, before another
  // cut packet arrives (a report must travel in the ACK that first acknowledges its packet).
  bool reports_full() const { return trim_reports_.size() >= kMaxTrimReports; }
  // Fails every pending receive (cancelling its codec tasks).
  void fail_all(const Status& error);
  // Cancels the codec tasks of every pending receive (close: NCCL frees the buffers next).
  void cancel_codec();
  // Completes pooled receives whose decode tasks have all finished.
  void poll_codec();
  // Codec tasks of this connection queued or running on the pool (close waits for none).
  uint32_t tasks_in_flight() const { return in_flight_->load(std::memory_order_acquire); }

  const ConnParams& params() const { return params_; }
  bool has_pending() const { return posted_ != completed_; }
  // Whether a pending operation's buffer overlaps [lo, hi): the proto may still write into it.
  bool uses_memory(uintptr_t lo, uintptr_t hi) const;
  uint64_t completed() const { return completed_; }
  const ConnCounters& counters() const { return counters_; }
  ConnCounters& counters() { return counters_; }

 private:
  struct Msg {
    RecvOp* op = nullptr;
    bool started = false;
    bool failed = false;
    codec::Layout layout;
    // Decoded on the pool: each arriving packet is validated here (Decoder::admit) and its
    // payload kept in `work`; a chunk of rows is handed to a worker as soon as all of its
    // slots are filled, and the receive completes when every chunk's task is done.
    std::shared_ptr<CodecWork> work;
    std::vector<uint32_t> task_missing;  // per task: slots not filled yet; kSubmitted once queued
  };
  static constexpr uint32_t kSubmitted = UINT32_MAX;
  bool bit(uint32_t psn) const { return (bits_[(psn % kSackBits) / 64] >> (psn % 64)) & 1; }
  void set_bit(uint32_t psn) { bits_[(psn % kSackBits) / 64] |= uint64_t{1} << (psn % 64); }
  void clear_bit(uint32_t psn) { bits_[(psn % kSackBits) / 64] &= ~(uint64_t{1} << (psn % 64)); }
  const Msg* find(uint32_t seq) const;
  Msg* find(uint32_t seq) { return const_cast<Msg*>(static_cast<const RecvProto*>(this)->find(seq)); }
  bool begin_msg(Msg* m, const codec::PacketHeader& h);
  void complete(Msg* m, uint64_t bytes);
  void note_trim(uint32_t psn, uint32_t received);
  void begin_pooled(Msg* m, const codec::MessageId& id);
  codec::PacketError admit_pooled(Msg* m, codec::Decoder& dec, const codec::ParsedPacket& p);

  ConnParams params_;
  std::array<Msg, kMaxPostedRecvs> msgs_;
  std::array<std::unique_ptr<codec::Decoder>, kMaxPostedRecvs> decoders_;
  uint64_t posted_ = 0, completed_ = 0;
  uint32_t rcv_nxt_ = 0;
  uint64_t bits_[kSackBits / 64] = {};
  uint64_t accepted_total_ = 0, trimmed_accepted_total_ = 0, trimmed_nacked_total_ = 0;
  std::vector<uint32_t> nacks_;
  std::vector<TrimReport> trim_reports_;  // cut trimmable packets accepted since the last ACK
  // The last exact packet accepted: the next ones are expected after it (expect).
  struct LastExact {
    bool valid = false;
    bool in_place = false;  // its receive decodes on this thread into its buffer (not combining)
    uint32_t msg_seq = 0, row = 0, first_elem = 0;
  } last_exact_;
  AckEcho echo_;  // the first packet that advanced rcv_nxt_ since the last ACK
  bool ack_due_ = false;
  ConnCounters counters_;
  SpareWork spare_work_;  // pooled receives' staging, reused
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>(0);
  uint32_t decoding_ = 0;  // pooled receives with every task queued, not yet completed
};

}  // namespace trim::transport

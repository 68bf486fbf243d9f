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
#include "transport/proto.h"
#include "transport/staging_arena.h"

namespace trim::transport {

constexpr uint32_t kMaxPostedRecvs = 32;

// One irecv, owned by its request slot until it completes.
struct RecvOp {
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  uint32_t seq = 0;
  bool on_device = false;  // data is GPU memory: decoded by the connection's DeviceCodec
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
  // The sender's message `seq` is empty.
  void on_empty(uint64_t seq);
  // Sends one ACK if anything arrived since the last one (called after each receive batch),
  // or unconditionally when `force` (a duplicate asks for a fresh ACK too).
  void flush_ack(TxSink* sink);
  void fail_all(const Status& error);
  // Completes device-memory receives whose decode has finished.
  void poll_device();
  // The earliest time poll_device has something to check (UINT64_MAX: nothing).
  uint64_t next_deadline_ns(uint64_t now_ns) const {
    return decoding_ > 0 || dev_.has_retired() ? now_ns + kDevicePollNs : UINT64_MAX;
  }
  // The connection's device side: its codec and staging arrive at regMr (engine commands).
  DeviceStaging& device() { return dev_; }

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
    bool staging_wait = false;  // the last packet found no staging free (not a bad packet)
    codec::Layout layout;
    // Device receives: packets are kept (whole or trimmed, as they arrived) in staging, and
    // each chunk of rows (device_rows_per_chunk) is decoded on the GPU as soon as all of its
    // slots are filled; the receive completes when the last chunk's decode has.
    StagingLease staging;
    uint32_t* got_bytes = nullptr;  // in staging, after the packets: bytes kept per slot; 0 = none
    uint32_t rows_per_chunk = 1;
    std::vector<uint32_t> chunk_missing;  // per chunk: slots not filled yet
    std::vector<uint64_t> chunk_first_slot;  // per chunk: the slot of its first row's packet 0
    std::vector<DeviceCodec::Ticket> chunk_decode;  // per chunk: 0 until launched
    uint32_t chunks_launched = 0;
    DeviceCodec::Ticket decode = 0;  // the last chunk's: the receive is done with it
  };
  bool bit(uint32_t psn) const { return (bits_[(psn % kSackBits) / 64] >> (psn % 64)) & 1; }
  void set_bit(uint32_t psn) { bits_[(psn % kSackBits) / 64] |= uint64_t{1} << (psn % 64); }
  void clear_bit(uint32_t psn) { bits_[(psn % kSackBits) / 64] &= ~(uint64_t{1} << (psn % 64)); }
  Msg* find(uint32_t seq);
  bool begin_msg(Msg* m, const codec::PacketHeader& h);
  void complete(Msg* m, uint64_t bytes);
  bool begin_device(Msg* m, const codec::MessageId& id);
  // Stores a device message's packet; false when it cannot be taken now.
  void keep_for_device(Msg* m, const codec::ParsedPacket& p, uint32_t slot);
  codec::PacketError admit_device(Msg* m, codec::Decoder& dec, const codec::ParsedPacket& p);
  void launch_chunk(Msg* m, uint32_t chunk, bool trimmable);
  // Hands m's staging to dev_ until its device work is done (m ends before it finished).
  void retire_device(Msg* m);

  ConnParams params_;
  DeviceStaging dev_;  // before msgs_: their staging leases go back before the arenas go
  std::array<Msg, kMaxPostedRecvs> msgs_;
  std::array<std::unique_ptr<codec::Decoder>, kMaxPostedRecvs> decoders_;
  uint64_t posted_ = 0, completed_ = 0;
  uint32_t rcv_nxt_ = 0;
  uint64_t bits_[kSackBits / 64] = {};
  uint64_t accepted_total_ = 0, trimmed_accepted_total_ = 0, trimmed_nacked_total_ = 0;
  std::vector<uint32_t> nacks_;
  bool ack_due_ = false;
  ConnCounters counters_;
  uint32_t decoding_ = 0;  // device receives whose last decode is in flight
};

}  // namespace trim::transport

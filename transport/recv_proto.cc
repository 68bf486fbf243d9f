#include "transport/recv_proto.h"

#include <fmt/format.h>

#include <cstring>

#include "codec/packet.h"
#include "common/log.h"

namespace trim::transport {

RecvProto::RecvProto(const ConnParams& params) : params_(params) {}

RecvProto::~RecvProto() {
  // Nothing waits here: staging still used by device work is freed, on the release thread,
  // only after the device is done with it (cudaFreeHost waits for the device).
  for (Msg& m : msgs_) retire_device(&m);
}

void RecvProto::retire_device(Msg* m) {
  if (!m->staging) return;
  DeviceCodec::Ticket last = 0;
  for (DeviceCodec::Ticket t : m->chunk_decode) last = std::max(last, t);
  dev_.retire(std::move(m->staging), last);
  m->got_bytes = nullptr;
}

Status RecvProto::post(RecvOp* op, TxSink* sink) {
  if (op->seq != static_cast<uint32_t>(posted_)) {
    return Status(Code::kInternal, fmt::format("receive posted with seq {}, expected {}", op->seq, posted_));
  }
  Msg& m = msgs_[op->seq % kMaxPostedRecvs];
  if (m.op != nullptr) return Status(Code::kInternal, "more than 32 receives posted");
  m = Msg{};
  m.op = op;
  ++posted_;
  sink->frame(Frame{FrameType::kCts, op->seq, op->capacity});
  return Status::ok();
}

RecvProto::Msg* RecvProto::find(uint32_t seq) {
  Msg& m = msgs_[seq % kMaxPostedRecvs];
  return m.op != nullptr && m.op->seq == seq ? &m : nullptr;
}

bool RecvProto::begin_msg(Msg* m, const codec::PacketHeader& h) {
  if (h.msg_bytes > m->op->capacity) {
    m->failed = true;
    m->op->result.fail(Status(Code::kBadPacket, fmt::format("peer sent {} bytes into a receive of {} bytes (seq {})",
                                                            h.msg_bytes, m->op->capacity, m->op->seq)));
    return false;
  }
  // Exact messages travel as raw bytes; trimmable ones in the connection's scheme.
  const codec::Scheme scheme = h.dtype == codec::DType::kRaw ? codec::Scheme::kNone : params_.codec.scheme;
  Result<codec::Layout> layout = codec::Layout::make(params_.codec, h.dtype, scheme, h.msg_bytes);
  if (!layout) return false;
  const uint32_t idx = m->op->seq % kMaxPostedRecvs;
  if (!decoders_[idx]) decoders_[idx] = std::make_unique<codec::Decoder>(params_.codec);
  codec::MessageId id{params_.cookie, m->op->seq, h.trimmable()};
  m->layout = layout.value();
  if (m->op->on_device) {
    if (!begin_device(m, id)) return false;
  } else if (!decoders_[idx]->begin(layout.value(), id, m->op->data).is_ok()) {
    return false;
  }
  m->started = true;
  return true;
}

bool RecvProto::begin_device(Msg* m, const codec::MessageId& id) {
  // The codec and the staging were made at regMr; nothing here allocates or waits.
  Status st;
  if (dev_.codec() == nullptr) {
    st = Status(Code::kUnavailable, "irecv into GPU memory on a connection with no GPU memory registered");
  }
  const uint64_t packets = m->layout.packets();
  // Packets, then their received sizes (8-byte aligned), in one lease.
  const size_t sizes_at = (static_cast<size_t>(packets) * params_.codec.packet_bytes + 7) / 8 * 8;
  if (st.is_ok()) {
    Result<StagingLease> lease = dev_.lease(m->op->data, sizes_at + packets * sizeof(uint32_t));
    if (!lease) {
      st = lease.status();
    } else if (!*lease) {
      // Every span in use (work of failed receives still running): the packet is not taken,
      // and the sender's loss recovery sends it again.
      ++counters_.staging_waits;
      return false;
    } else {
      m->staging = std::move(lease).value();
    }
  }
  if (!st.is_ok()) {
    m->failed = true;
    m->op->result.fail(st);
    return false;
  }
  m->staging_wait = false;
  m->got_bytes = reinterpret_cast<uint32_t*>(m->staging.data() + sizes_at);
  std::fill(m->got_bytes, m->got_bytes + packets, 0u);
  m->rows_per_chunk = device_rows_per_chunk(m->layout);
  const uint32_t chunks = (m->layout.rows() + m->rows_per_chunk - 1) / m->rows_per_chunk;
  m->chunk_missing.assign(chunks, 0);
  m->chunk_first_slot.assign(chunks, 0);
  m->chunk_decode.assign(chunks, 0);
  m->chunks_launched = 0;
  uint64_t slot = 0;
  for (uint32_t r = 0; r < m->layout.rows(); ++r) {
    if (r % m->rows_per_chunk == 0) m->chunk_first_slot[r / m->rows_per_chunk] = slot;
    m->chunk_missing[r / m->rows_per_chunk] += m->layout.row(r).packets;
    slot += m->layout.row(r).packets;
  }
  ++counters_.device_msgs;
  decoders_[m->op->seq % kMaxPostedRecvs]->begin_collect(m->layout, id);
  return true;
}

void RecvProto::keep_for_device(Msg* m, const codec::ParsedPacket& p, uint32_t slot) {
  // The packet as it arrived (header and whatever payload survived): the GPU decodes it.
  const uint32_t bytes = codec::kHeaderBytes + p.payload_received;
  std::memcpy(m->staging.data() + static_cast<size_t>(slot) * params_.codec.packet_bytes,
              p.payload - codec::kHeaderBytes, bytes);
  m->got_bytes[slot] = bytes;
}

codec::PacketError RecvProto::admit_device(Msg* m, codec::Decoder& dec, const codec::ParsedPacket& p) {
  const uint32_t chunk = p.hdr.row / m->rows_per_chunk;
  // A chunk being decoded has what it needs; its staging must not change under the GPU.
  if (chunk < m->chunk_decode.size() && m->chunk_decode[chunk] != 0) return codec::PacketError::kOk;
  uint32_t slot = UINT32_MAX;
  const uint64_t filled = dec.slots_filled();
  const codec::PacketError e = dec.admit(p, &slot);
  if (e != codec::PacketError::kOk || slot == UINT32_MAX) return e;
  keep_for_device(m, p, slot);
  if (dec.slots_filled() > filled && --m->chunk_missing[chunk] == 0) launch_chunk(m, chunk, p.hdr.trimmable());
  return e;
}

void RecvProto::launch_chunk(Msg* m, uint32_t chunk, bool trimmable) {
  DeviceCodec* device = dev_.codec();
  const uint32_t first_row = chunk * m->rows_per_chunk;
  const uint32_t n_rows = std::min(m->rows_per_chunk, m->layout.rows() - first_row);
  const uint64_t first_slot = m->chunk_first_slot[chunk];
  const codec::MessageId id{params_.cookie, m->op->seq, trimmable};
  const size_t stride = params_.codec.packet_bytes;
  const DeviceCodec::Ticket t =
      device->decode_rows(m->layout, id, m->staging.data() + first_slot * stride, stride, m->got_bytes + first_slot,
                          first_row, n_rows, m->op->data);
  if (t == 0) {
    m->failed = true;
    m->op->result.fail(Status(Code::kInternal, fmt::format("GPU decode: {}", device->last_error())));
    return;
  }
  m->chunk_decode[chunk] = t;
  if (++m->chunks_launched == m->chunk_decode.size()) {
    m->decode = t;  // tickets complete in order: the last launched is the last to finish
    ++decoding_;
  }
}

void RecvProto::poll_device() {
  dev_.poll_retired();
  if (decoding_ == 0) return;
  DeviceCodec* device = dev_.codec();
  for (Msg& m : msgs_) {
    if (m.op == nullptr || m.decode == 0 || !device->poll(m.decode)) continue;
    m.decode = 0;
    --decoding_;
    m.staging.reset();
    m.got_bytes = nullptr;
    if (device->failed()) {
      m.failed = true;
      m.op->result.fail(Status(Code::kSystem, fmt::format("GPU decode failed: {}", device->last_error())));
      continue;
    }
    complete(&m, m.layout.bytes());
  }
}

void RecvProto::complete(Msg* m, uint64_t bytes) {
  m->op->result.finish(bytes);
  m->op = nullptr;
  ++completed_;
}

void RecvProto::on_data(const codec::ParsedPacket& p, uint64_t now_ns) {
  (void)now_ns;
  const uint32_t psn = p.hdr.psn;
  const int32_t d = psn_diff(psn, rcv_nxt_);
  if (d < 0 || (d < static_cast<int32_t>(kSackBits) && bit(psn))) {
    ++counters_.dup_packets;
    ack_due_ = true;  // our ACK may have been lost: say it again
    return;
  }
  if (d >= static_cast<int32_t>(kSackBits)) {
    ++counters_.out_of_window;
    return;
  }
  Msg* m = find(p.hdr.msg_seq);
  if (m == nullptr || m->failed) {
    ++counters_.bad_packets;  // no such receive posted: a misbehaving or confused peer
    return;
  }
  if (p.trimmed && !p.hdr.trimmable()) {
    // Exact data lost its tail: ask for it again now, as NDP does, and keep the slot open.
    ++counters_.trimmed_nacked;
    ++trimmed_nacked_total_;
    if (nacks_.size() < kMaxNacks) nacks_.push_back(psn);
    ack_due_ = true;
    return;
  }
  if (!m->started && !begin_msg(m, p.hdr)) {
    if (!m->staging_wait) ++counters_.bad_packets;
    return;
  }
  codec::Decoder& dec = *decoders_[p.hdr.msg_seq % kMaxPostedRecvs];
  const codec::PacketError e = m->op->on_device ? admit_device(m, dec, p) : dec.add(p);
  if (e != codec::PacketError::kOk) {
    ++counters_.bad_packets;
    TRIM_DEBUG("NET/Trim: packet psn {} of message {} rejected: {}", psn, p.hdr.msg_seq, codec::packet_error_name(e));
    return;
  }
  set_bit(psn);
  ++counters_.received_packets;
  counters_.received_bytes += codec::kHeaderBytes + p.payload_received;
  ++accepted_total_;
  if (p.trimmed) {
    ++counters_.trimmed_accepted;
    ++trimmed_accepted_total_;
  }
  ack_due_ = true;
  // Complete on distinct slots, not packets: a peer repeating a filled slot under a fresh psn
  // must not complete a receive with data missing.
  if (!m->op->on_device && dec.slots_filled() == m->layout.packets()) {
    dec.finish();
    complete(m, m->layout.bytes());
  }
  while (bit(rcv_nxt_)) {
    clear_bit(rcv_nxt_);
    ++rcv_nxt_;
  }
}

void RecvProto::on_empty(uint64_t seq) {
  Msg* m = find(static_cast<uint32_t>(seq));
  if (m == nullptr || m->started) {
    ++counters_.bad_packets;
    return;
  }
  complete(m, 0);
}

void RecvProto::flush_ack(TxSink* sink) {
  if (!ack_due_) return;
  CtrlPacket a;
  a.type = CtrlType::kAck;
  a.to = Role::kSend;
  a.cookie = params_.cookie;
  a.cum_psn = rcv_nxt_;
  a.accepted_total = accepted_total_;
  a.trimmed_accepted_total = trimmed_accepted_total_;
  a.trimmed_nacked_total = trimmed_nacked_total_;
  a.nack_count = static_cast<uint32_t>(nacks_.size());
  for (size_t i = 0; i < nacks_.size(); ++i) a.nacks[i] = nacks_[i];
  // The selective bitmap is the window bitmap rotated to start at rcv_nxt: 64 bits at a time.
  static_assert(kSackBits % 64 == 0, "the window bitmap is whole words");
  constexpr uint32_t kWords = kSackBits / 64;
  for (uint32_t k = 0; k < kWords; ++k) {
    const uint32_t pos = (rcv_nxt_ + 64 * k) % kSackBits;
    const uint32_t w = pos / 64, off = pos % 64;
    uint64_t v = bits_[w] >> off;
    if (off != 0) v |= bits_[(w + 1) % kWords] << (64 - off);
    if (k == 0) v &= ~uint64_t{1};  // rcv_nxt itself is, by definition, not received
    for (uint32_t b = 0; b < 8; ++b) a.sack[8 * k + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  sink->ctrl(a);
  ++counters_.acks_sent;
  nacks_.clear();
  ack_due_ = false;
}

bool RecvProto::uses_memory(uintptr_t lo, uintptr_t hi) const {
  for (const Msg& m : msgs_) {
    if (m.op != nullptr && overlaps(m.op->data, m.op->capacity, lo, hi)) return true;
  }
  return false;
}

void RecvProto::fail_all(const Status& error) {
  decoding_ = 0;
  for (Msg& m : msgs_) {
    retire_device(&m);
    if (m.op != nullptr) m.op->result.fail(error);
    m = Msg{};
  }
}

}  // namespace trim::transport

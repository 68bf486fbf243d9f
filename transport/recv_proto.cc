#include "transport/recv_proto.h"

#include <fmt/format.h>

#include <cstring>

#include "codec/packet.h"
#include "common/log.h"

namespace trim::transport {

RecvProto::RecvProto(const ConnParams& params) : params_(params) {}

RecvProto::~RecvProto() = default;

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

const RecvProto::Msg* RecvProto::find(uint32_t seq) const {
  const Msg& m = msgs_[seq % kMaxPostedRecvs];
  return m.op != nullptr && m.op->seq == seq ? &m : nullptr;
}

bool RecvProto::begin_msg(Msg* m, const codec::PacketHeader& h) {
  if (h.msg_bytes > m->op->capacity) {
    m->failed = true;
    m->op->result.fail(Status(Code::kBadPacket, fmt::format("peer sent {} bytes into a receive of {} bytes (seq {})",
                                                            h.msg_bytes, m->op->capacity, m->op->seq)));
    return false;
  }
  // Exact messages travel as raw bytes; trimmable ones in the connection's scheme, or exact too
  // while the sender's connection is quiet (NCCL_TRIM_QUIET_LAYOUT=exact): rows of scheme none,
  // whose values a combining receive still reduces. (A message's raw tail row is scheme none
  // in every layout: it says nothing.)
  const bool exact = h.dtype == codec::DType::kRaw || (h.scheme == codec::Scheme::kNone && !h.tail());
  const codec::Scheme scheme = exact ? codec::Scheme::kNone : params_.codec.scheme;
  Result<codec::Layout> layout = codec::Layout::make(params_.codec, h.dtype, scheme, h.msg_bytes);
  if (!layout) return false;
  if (m->op->combine) {
    const Status ok = codec::Decoder::check_combine(layout.value(), m->op->combine_type, m->op->combine_op);
    if (!ok.is_ok()) {
      m->failed = true;
      m->op->result.fail(Status(Code::kInvalidArgument,
                                fmt::format("combining receive (seq {}): {}", m->op->seq, ok.message())));
      return false;
    }
  }
  const uint32_t idx = m->op->seq % kMaxPostedRecvs;
  if (!decoders_[idx]) decoders_[idx] = std::make_unique<codec::Decoder>(params_.codec);
  codec::MessageId id{params_.cookie, m->op->seq, h.trimmable()};
  m->layout = layout.value();
  if (params_.pool != nullptr && scheme != codec::Scheme::kNone) {
    decoders_[idx]->begin_collect(layout.value(), id);
    begin_pooled(m, id);
  } else if (!(m->op->combine ? decoders_[idx]->begin_combine(layout.value(), id, m->op->data, m->op->combine_type,
                                                              m->op->combine_op)
                               : decoders_[idx]->begin(layout.value(), id, m->op->data))
                  .is_ok()) {
    return false;
  }
  m->started = true;
  return true;
}

void RecvProto::begin_pooled(Msg* m, const codec::MessageId& id) {
  m->work = spare_work_.take();
  CodecWork& w = *m->work;
  const codec::Layout& l = m->layout;
  w.prepare(CodecWork::Kind::kDecode, params_.codec, l, id, params_.waker, in_flight_);
  w.dst = m->op->data;
  w.combine = m->op->combine;
  w.combine_type = m->op->combine_type;
  w.combine_op = m->op->combine_op;
  w.packets.resize(static_cast<size_t>(l.packets()) * w.stride);  // payloads only: no need to clear
  w.parsed.assign(l.packets(), codec::ParsedPacket());
  m->task_missing.resize(w.tasks);
  for (uint32_t t = 0; t < w.tasks; ++t) m->task_missing[t] = w.row_first[w.end_row(t)] - w.row_first[w.first_row(t)];
}

codec::PacketError RecvProto::admit_pooled(Msg* m, codec::Decoder& dec, const codec::ParsedPacket& p) {
  CodecWork& w = *m->work;
  uint32_t slot = UINT32_MAX;
  const uint64_t filled = dec.slots_filled();
  const codec::PacketError e = dec.admit(p, &slot);
  if (e != codec::PacketError::kOk || slot == UINT32_MAX) return e;
  const uint32_t t = w.task_of_row(p.hdr.row);
  // A queued chunk has every slot it needs (a later, fuller copy of a trimmed packet is
  // ignored: its task may be reading the slot now).
  if (m->task_missing[t] == kSubmitted) return e;
  uint8_t* keep = w.packets.data() + static_cast<size_t>(slot) * w.stride;
  std::memcpy(keep, p.payload, p.payload_received);
  w.parsed[slot] = p;
  w.parsed[slot].payload = keep;
  if (dec.slots_filled() > filled && --m->task_missing[t] == 0) {
    m->task_missing[t] = kSubmitted;
    submit_task(params_.pool, m->work, t, &counters_);
    if (dec.slots_filled() == m->layout.packets()) ++decoding_;  // every task is queued now
  }
  return e;
}

void RecvProto::poll_codec() {
  if (decoding_ == 0) return;
  for (Msg& m : msgs_) {
    if (m.op == nullptr || !m.work || m.failed || !m.work->all_done()) continue;
    bool queued = true;
    for (uint32_t left : m.task_missing) queued = queued && left == kSubmitted;
    if (!queued) continue;
    --decoding_;
    const std::string err = m.work->first_error();
    spare_work_.give_back(&m.work);
    if (!err.empty()) {
      m.failed = true;
      m.op->result.fail(Status(Code::kInternal, "decode: " + err));
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
    // Exact data lost its tail (a cut: the trimmed DSCP alone on a whole packet loses nothing):
    // ask for it again now, as NDP does, and keep the slot open.
    ++counters_.trimmed_nacked;
    ++trimmed_nacked_total_;
    if (nacks_.size() < kMaxNacks) nacks_.push_back(psn);
    ack_due_ = true;
    return;
  }
  if (!m->started && p.hdr.tail() && p.hdr.dtype != codec::DType::kRaw &&
      p.hdr.msg_bytes >= codec::dtype_bytes(p.hdr.dtype)) {
    // A typed message's raw tail row is scheme none in every layout, so it cannot say whether the
    // message's typed rows are encoded or exact (quiet): not accepted before another packet has
    // said it. It was the last packet sent, so only reordering brings it first; loss recovery
    // resends it. (A message of less than one element is its tail alone, the same in every layout.)
    TRIM_DEBUG("NET/Trim: tail packet psn {} of message {} arrived first: left to be resent", psn, p.hdr.msg_seq);
    return;
  }
  if (!m->started && !begin_msg(m, p.hdr)) {
    ++counters_.bad_packets;
    return;
  }
  codec::Decoder& dec = *decoders_[p.hdr.msg_seq % kMaxPostedRecvs];
  const uint64_t filled = dec.slots_filled();
  const codec::PacketError e = m->work ? admit_pooled(m, dec, p) : dec.add(p);
  if (e != codec::PacketError::kOk) {
    ++counters_.bad_packets;
    TRIM_DEBUG("NET/Trim: packet psn {} of message {} rejected: {}", psn, p.hdr.msg_seq, codec::packet_error_name(e));
    return;
  }
  set_bit(psn);
  // A resend of a slot that had arrived says nothing about what comes next.
  if (p.hdr.scheme == codec::Scheme::kNone && !p.trimmed && !p.hdr.tail() && dec.slots_filled() > filled) {
    last_exact_ = LastExact{true, !m->work && !m->op->combine, p.hdr.msg_seq, p.hdr.row, p.hdr.first_elem};
  }
  ++counters_.received_packets;
  counters_.received_bytes += codec::kHeaderBytes + p.payload_received;
  ++accepted_total_;
  if (p.marked_trimmed) ++counters_.trimmed_marked;
  // A switch that marks a trimmable packet it did not need to cut (shorter than its trim size)
  // was still congested: a trim for the congestion control all the same.
  if (p.trimmed || (p.marked_trimmed && p.hdr.trimmable())) {
    ++counters_.trimmed_accepted;
    ++trimmed_accepted_total_;
  }
  if (p.trimmed) note_trim(psn, p.payload_received);
  ack_due_ = true;
  // The first hole filled since the last ACK, and by which copy: the sender's timeout detection.
  if (psn == rcv_nxt_ && !echo_.valid) echo_ = AckEcho{true, p.hdr.resent(), psn};
  // Combining on the engine: a row is combined as soon as all of it arrived, while it is still
  // in cache (a later, fuller copy of one of its packets is then ignored, as on the pool).
  if (!m->work && m->op->combine && dec.row_complete(p.hdr.row)) dec.finish_row(p.hdr.row);
  // Complete on distinct slots, not packets: a peer repeating a filled slot under a fresh psn
  // must not complete a receive with data missing.
  if (!m->work && dec.slots_filled() == m->layout.packets()) {
    dec.finish();
    complete(m, m->layout.bytes());
  }
  while (bit(rcv_nxt_)) {
    clear_bit(rcv_nxt_);
    ++rcv_nxt_;
  }
}

bool RecvProto::expect(Expectation* e, uint32_t max_bytes) const {
  if (!last_exact_.valid) return false;
  const Msg* m = find(last_exact_.msg_seq);
  // Only while its receive is posted, begun and decoding on this thread: the slots' memory is
  // the receive's until it completes, and nothing else writes it meanwhile.
  if (m == nullptr || !m->started || m->failed || m->work) return false;
  e->cookie = params_.cookie;
  e->msg_seq = last_exact_.msg_seq;
  e->slots = decoders_[last_exact_.msg_seq % kMaxPostedRecvs]->exact_slots_after(
      last_exact_.row, last_exact_.first_elem, e->slot, kMaxPlacedSlots, max_bytes);
  return e->slots > 0;
}

void RecvProto::note_trim(uint32_t psn, uint32_t received) {
  // Runs of equal cuts (a fabric's fixed size, native trims of full packets) share a report.
  if (!trim_reports_.empty()) {
    TrimReport& last = trim_reports_.back();
    if (last.psn + last.count == psn && last.received == received && last.count < UINT16_MAX) {
      ++last.count;
      return;
    }
  }
  // The engine flushes an ACK as soon as the list is full (reports_full), so this never drops.
  if (trim_reports_.size() >= kMaxTrimReports) return;
  trim_reports_.push_back(TrimReport{psn, 1, static_cast<uint16_t>(received)});
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
  a.echo = echo_;
  a.accepted_total = accepted_total_;
  a.trimmed_accepted_total = trimmed_accepted_total_;
  a.trimmed_nacked_total = trimmed_nacked_total_;
  a.nack_count = static_cast<uint32_t>(nacks_.size());
  for (size_t i = 0; i < nacks_.size(); ++i) a.nacks[i] = nacks_[i];
  a.trim_count = static_cast<uint32_t>(trim_reports_.size());
  for (size_t i = 0; i < trim_reports_.size(); ++i) a.trims[i] = trim_reports_[i];
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
  trim_reports_.clear();
  echo_ = AckEcho{};
  ack_due_ = false;
}

bool RecvProto::uses_memory(uintptr_t lo, uintptr_t hi) const {
  for (const Msg& m : msgs_) {
    if (m.op != nullptr && overlaps(m.op->data, m.op->capacity, lo, hi)) return true;
  }
  return false;
}

void RecvProto::fail_all(const Status& error) {
  decoding_ = 0;  // tasks still running keep their work alive; close waits for them
  cancel_codec();  // the failed ops' buffers go back to NCCL: their tasks must not write them
  for (Msg& m : msgs_) {
    if (m.op != nullptr) m.op->result.fail(error);
    m = Msg{};
  }
}

void RecvProto::cancel_codec() {
  for (Msg& m : msgs_) {
    if (m.work) m.work->cancel();
  }
}

}  // namespace trim::transport

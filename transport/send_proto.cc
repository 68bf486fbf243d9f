#include "transport/send_proto.h"

#include <fmt/format.h>

#include <algorithm>

#include "codec/packet.h"
#include "common/log.h"
#include "common/socket.h"

namespace trim::transport {

struct SendProto::Msg {
  SendOp* op = nullptr;
  bool cts = false;
  uint64_t capacity = 0;
  bool started = false;
  bool sent_all = false;
  codec::Layout layout;
  uint32_t psn_base = 0;
  uint32_t npackets = 0;
  uint32_t next = 0;   // next packet to send for the first time
  uint32_t acked = 0;
  uint32_t rows_encoded = 0;
  std::vector<uint32_t> row_first;  // first packet of each row, plus the total
  // Exact messages go zero-copy: each packet is a header (headers_) plus a slice of NCCL's
  // buffer. Encoded (trimmable) messages are staged: every packet kept until acknowledged.
  bool zero_copy = false;
  uint32_t zc_row = 0;              // row of packet `next`
  // Large zero-copy messages: the sink may send them without copying (MSG_ZEROCOPY); the
  // message completes only once the kernel let go of every such send (null: always copied).
  std::shared_ptr<ZcHold> pinned;
  std::vector<uint8_t> staging;
  std::vector<uint32_t> sizes;
  bool prepared = false;
  std::shared_ptr<CodecWork> work;  // encoded on the pool: its packets and sizes live there
  // What is encoded: NCCL's buffer, or (error feedback) ef_scratch = it plus a residual.
  const uint8_t* src = nullptr;
  std::vector<float> ef_scratch;
  std::vector<CutPacket> cuts;  // packets the receiver reported cut (error feedback)
  bool rotate = true;  // rht: rotated, unless the connection was quiet when it was laid out
  uint8_t* packets() { return work ? work->packets.data() : staging.data(); }
  uint32_t packet_size(uint32_t k) const { return work ? work->sizes[k] : sizes[k]; }
};

namespace {
constexpr uint32_t kIpUdpBytes = 28;
// Below this a message is always copied: pinning its pages and reading the completion cost
// more than copying a few packets (the kernel's guidance: MSG_ZEROCOPY pays off above ~10 KB a
// send; ours are GSO runs of up to 64 KB).
constexpr uint64_t kPinnedMinBytes = 64 * 1024;

}  // namespace

SendProto::SendProto(const ConnParams& params)
    : params_(params),
      encoder_(params.codec),
      cc_(CcConfig{params.target_trim, std::min<uint32_t>(params.window_max, kSackBits - 1), 2,
                   std::min<uint32_t>(32, params.window_max)}),
      ring_(kSackBits),
      headers_(static_cast<size_t>(kSackBits) * codec::kHeaderBytes),
      rec_(RecoveryConfig::plugin(params.min_rto_ns)),
      ef_(params.error_feedback ? std::make_unique<ErrorFeedback>(params.codec) : nullptr) {
  if (!params.start_quiet) note_congestion();  // encoded until quiet_ns have passed
}

SendProto::~SendProto() = default;

bool SendProto::enable_error_feedback() {
  if (ef_) return false;
  ef_ = std::make_unique<ErrorFeedback>(params_.codec);
  return true;
}

Status SendProto::post(SendOp* op) {
  if (op->seq != next_seq_) {
    return Status(Code::kInternal, fmt::format("send posted with seq {}, expected {}", op->seq, next_seq_));
  }
  ++next_seq_;
  auto m = std::make_unique<Msg>();
  m->op = op;
  while (!early_cts_.empty() && static_cast<uint32_t>(early_cts_.front().first) == op->seq) {
    m->cts = true;
    m->capacity = early_cts_.front().second;
    early_cts_.pop_front();
  }
  // Encoded messages start encoding on the pool now (a layout error is reported at start).
  if (params_.pool != nullptr && op->trimmable && op->bytes > 0) (void)prepare(m.get());
  msgs_.push_back(std::move(m));
  return Status::ok();
}

void SendProto::on_cts(uint64_t seq, uint64_t capacity) {
  for (auto& m : msgs_) {
    if (m->op->seq == static_cast<uint32_t>(seq)) {
      m->cts = true;
      m->capacity = capacity;
      return;
    }
  }
  // The receiver may post before we do; CTS arrive in FIFO order. Bounded: the receiver posts
  // at most 32 receives ahead, more is a misbehaving peer.
  if (early_cts_.size() < 64) {
    early_cts_.emplace_back(seq, capacity);
  } else {
    ++counters_.bad_packets;
  }
}

bool SendProto::in_flight_psn(uint32_t psn) const {
  return psn_diff(psn, snd_una_) >= 0 && psn_diff(psn, snd_nxt_) < 0;
}

Status SendProto::start(Msg* m) {
  const SendOp& op = *m->op;
  if (op.bytes > m->capacity) {
    return Status(Code::kInvalidArgument, fmt::format("send of {} bytes matched a receive of {} bytes (seq {})",
                                                      op.bytes, m->capacity, op.seq));
  }
  if (!m->prepared) TRIM_RETURN_IF_ERROR(prepare(m));
  m->psn_base = snd_nxt_;
  m->started = true;
  return Status::ok();
}

Status SendProto::prepare(Msg* m) {
  const SendOp& op = *m->op;
  codec::Scheme scheme = op.trimmable ? params_.codec.scheme : codec::Scheme::kNone;
  // A quiet connection (no trim or loss reported lately, NCCL_TRIM_QUIET_MS) sends its rht and
  // rotated messages exact (NCCL_TRIM_QUIET_LAYOUT=exact): raw values, no encoding, each cut
  // answered by a resend; or rht unrotated, as sign rows within rht's packets, exact untrimmed
  // and still sign heads when cut. The first trim or loss reported ends the quiet from the next
  // message on.
  // Error feedback keeps to the encoded layouts (an exact message would leave its residual behind).
  const bool exact = params_.quiet_exact && !ef_;
  const bool quiet = (scheme == codec::Scheme::kRht || (scheme == codec::Scheme::kRotated && exact)) &&
                     params_.quiet_ns > 0 &&
                     (last_congestion_ns_ == 0 || sock::now_ns() - last_congestion_ns_ > params_.quiet_ns);
  if (quiet) {
    ++counters_.quiet_messages;
    if (exact) scheme = codec::Scheme::kNone;
    m->rotate = false;
  }
  Result<codec::Layout> layout = codec::Layout::make(params_.codec, op.dtype, scheme, op.bytes);
  if (!layout) return layout.status();
  m->layout = layout.value();
  if (m->layout.packets() > 0xFFFFFFFFull) return Status(Code::kInvalidArgument, "message has too many packets");
  m->npackets = static_cast<uint32_t>(m->layout.packets());
  m->layout.row_first_packets(&m->row_first);
  m->prepared = true;
  m->zero_copy = scheme == codec::Scheme::kNone;
  if (m->zero_copy) {
    if (op.bytes >= kPinnedMinBytes) m->pinned = std::make_shared<ZcHold>();
    return Status::ok();
  }
  m->src = op.data;
  if (ef_ && op.dtype == codec::DType::kF32) {
    m->src = ef_->source(op.data, op.bytes, op.seq, &m->ef_scratch);
    if (m->src != op.data) ++counters_.ef_applied;
  }
  const size_t need = static_cast<size_t>(m->npackets) * params_.codec.packet_bytes;
  if (params_.pool != nullptr) {
    m->work = spare_work_.take();
    CodecWork& w = *m->work;
    w.prepare(CodecWork::Kind::kEncode, params_.codec, m->layout,
              codec::MessageId{params_.cookie, op.seq, op.trimmable, m->rotate}, params_.waker, in_flight_);
    if (m->src != op.data) {
      w.src_copy.swap(m->ef_scratch);
      m->src = reinterpret_cast<const uint8_t*>(w.src_copy.data());
    }
    w.src = m->src;
    w.packets.resize(need);
    w.sizes.assign(m->npackets, 0);
    for (uint32_t t = 0; t < w.tasks; ++t) submit_task(params_.pool, m->work, t, &counters_);
    return Status::ok();
  }
  // Reuse a staging buffer: messages of a connection are mostly the same size.
  for (auto it = staging_pool_.begin(); it != staging_pool_.end(); ++it) {
    if (it->capacity() >= need) {
      m->staging = std::move(*it);
      staging_pool_.erase(it);
      break;
    }
  }
  m->staging.resize(need);
  m->sizes.assign(m->npackets, 0);
  return Status::ok();
}

Result<bool> SendProto::encode_rows_through(Msg* m, uint32_t pkt) {
  if (m->zero_copy) return true;
  if (m->work) {
    const CodecWork& w = *m->work;
    while (m->rows_encoded < m->layout.rows() && m->row_first[m->rows_encoded] <= pkt) {
      const uint32_t t = w.task_of_row(m->rows_encoded);
      const uint8_t state = w.task_state(t);
      if (state == CodecWork::kPending) return false;
      if (state == CodecWork::kFailed) return Status(Code::kInternal, "encode: " + w.errors[t]);
      m->rows_encoded = w.end_row(t);
    }
    return true;
  }
  while (m->rows_encoded < m->layout.rows() && m->row_first[m->rows_encoded] <= pkt) {
    const uint32_t r = m->rows_encoded;
    codec::MessageId id{params_.cookie, m->op->seq, m->op->trimmable, m->rotate};
    const size_t stride = params_.codec.packet_bytes;
    Result<uint32_t> n = encoder_.encode_row(m->layout, id, m->src, r,
                                             m->staging.data() + static_cast<size_t>(m->row_first[r]) * stride,
                                             stride, m->sizes.data() + m->row_first[r]);
    if (!n) return n.status();
    ++m->rows_encoded;
  }
  return true;
}

Status SendProto::build_zero_copy_header(Msg* m, uint32_t psn) {
  while (m->row_first[m->zc_row + 1] <= m->next) ++m->zc_row;
  uint8_t* hdr = header(psn);
  codec::MessageId id{params_.cookie, m->op->seq, false};
  Result<codec::Encoder::RawSlice> r =
      codec::Encoder::raw_packet_header(m->layout, id, m->zc_row, m->next - m->row_first[m->zc_row], hdr);
  if (!r) return r.status();
  codec::stamp_transport(hdr, psn, params_.dst_ip4_be, params_.dst_port);
  Slot& s = slot(psn);
  s.payload_offset = r->payload_offset;
  s.payload_bytes = r->payload_bytes;
  return Status::ok();
}

void SendProto::send_packet(uint32_t psn, uint64_t now_ns, TxSink* sink, bool retransmit) {
  Slot& s = slot(psn);
  Msg* m = s.msg;
  uint32_t bytes;
  if (m->zero_copy) {
    // A resend says so (the receiver echoes it). A pinned original the kernel still reads would
    // see the header change: at worst that copy fails its CRC and is repaired as a loss.
    if (s.transmissions > 0) codec::mark_resent(header(psn));
    if (m->pinned) {
      sink->data_pinned(header(psn), codec::kHeaderBytes, m->op->data + s.payload_offset, s.payload_bytes, m->pinned);
    } else {
      sink->data(header(psn), codec::kHeaderBytes, m->op->data + s.payload_offset, s.payload_bytes);
    }
    bytes = codec::kHeaderBytes + s.payload_bytes;
  } else {
    uint8_t* pkt = m->packets() + static_cast<size_t>(s.pkt) * params_.codec.packet_bytes;
    bytes = m->packet_size(s.pkt);
    if (s.transmissions == 0) {
      if (params_.udp_checksummed) codec::mark_udp_checksummed(pkt);
      codec::stamp_transport(pkt, psn, params_.dst_ip4_be, params_.dst_port);
    }
    if (s.transmissions > 0) codec::mark_resent(pkt);
    sink->data(pkt, bytes, nullptr, 0);
  }
  if (s.transmissions == 0) s.first_sent_ns = now_ns;
  s.sent_ns = now_ns;
  ++s.transmissions;
  ++counters_.sent_packets;
  counters_.sent_bytes += bytes;
  if (retransmit) ++counters_.retransmitted;
  if (params_.rate_gbps > 0) {
    const double ns = static_cast<double>(bytes + kIpUdpBytes) * 8.0 / params_.rate_gbps;
    pace_next_ns_ = std::max(pace_next_ns_, now_ns) + static_cast<uint64_t>(ns);
  }
  rec_.on_send(now_ns, !retransmit, outstanding_ > 0);
}

void SendProto::on_left(uint32_t psn, uint64_t now_ns) {
  if (!in_flight_psn(psn)) return;
  Slot& s = slot(psn);
  if (s.acked || now_ns <= s.sent_ns) return;
  s.sent_ns = now_ns;
  rec_.on_send(now_ns, s.transmissions == 1, outstanding_ > 0);
}

SendProto::Msg* SendProto::next_to_send() {
  for (auto& m : msgs_) {
    if (m->sent_all) continue;
    return m->cts ? m.get() : nullptr;  // FIFO: a later message never overtakes
  }
  return nullptr;
}

uint32_t SendProto::poll_tx(uint64_t now_ns, uint32_t budget, TxSink* sink) {
  uint32_t n = 0;
  codec_waiting_ = false;
  const bool paced = params_.rate_gbps > 0;
  while (n < budget && !retx_.empty()) {
    if (paced && now_ns < pace_next_ns_) return n;
    const uint32_t psn = retx_.front();
    retx_.pop_front();
    Slot& s = slot(psn);
    s.queued = false;
    if (!in_flight_psn(psn) || s.acked) continue;
    send_packet(psn, now_ns, sink, true);
    ++n;
  }
  const uint32_t window = std::min<uint32_t>(cc_.window(), params_.window_max);
  while (n < budget) {
    if (outstanding_ >= window || static_cast<uint32_t>(snd_nxt_ - snd_una_) >= kSackBits - 1) break;
    if (paced && now_ns < pace_next_ns_) break;
    Msg* m = next_to_send();
    if (m == nullptr) break;
    if (!m->started) {
      if (m->op->bytes == 0) {  // no packet carries an empty message: say so on the stream
        sink->frame(Frame{FrameType::kEmpty, m->op->seq, 0});
        m->started = m->sent_all = true;
        continue;
      }
      Status st = start(m);
      if (!st.is_ok()) {
        TRIM_WARN("NET/Trim: {}", st.message());
        m->op->result.fail(st);
        msgs_.remove_if([m](const std::unique_ptr<Msg>& x) { return x.get() == m; });
        continue;
      }
    }
    Result<bool> ready = encode_rows_through(m, m->next);
    if (!ready) {
      fail_all(ready.status());
      return n;
    }
    if (!*ready) {
      codec_waiting_ = true;  // FIFO: nothing later may overtake it; a finished task wakes us
      break;
    }
    Status st;
    const uint32_t psn = m->psn_base + m->next;
    Slot& s = slot(psn);
    s = Slot{m, m->next, 0, 0, false, false};
    if (m->zero_copy) {
      st = build_zero_copy_header(m, psn);
      if (!st.is_ok()) {
        fail_all(st);
        return n;
      }
    }
    ++snd_nxt_;
    ++outstanding_;
    if (++m->next == m->npackets) m->sent_all = true;
    send_packet(psn, now_ns, sink, false);
    ++n;
  }
  complete_finished();
  return n;
}

void SendProto::mark_acked(uint32_t psn, uint64_t now_ns) {
  Slot& s = slot(psn);
  if (s.acked) return;
  s.acked = true;
  ++s.msg->acked;
  --outstanding_;
  rec_.on_delivered(s.sent_ns, now_ns, s.transmissions > 1, s.trimmed, psn);
}

void SendProto::note_congestion() { last_congestion_ns_ = sock::now_ns(); }

void SendProto::queue_retx(uint32_t psn) {
  Slot& s = slot(psn);
  if (s.queued || s.acked) return;
  s.queued = true;
  retx_.push_back(psn);
}

void SendProto::on_ack(const CtrlPacket& ack, uint64_t now_ns) {
  ++counters_.acks_received;
  const uint32_t cum = ack.cum_psn;
  if (psn_diff(cum, snd_nxt_) > 0) {  // acknowledges packets never sent
    ++counters_.bad_packets;
    return;
  }
  note_trims(ack);
  check_timeout(ack.echo, now_ns);
  bool progress = false;
  if (psn_diff(cum, snd_una_) > 0) {
    for (uint32_t p = snd_una_; p != cum; ++p) mark_acked(p, now_ns);
    snd_una_ = cum;
    progress = true;
  }
  for (uint32_t byte = 0; byte < kSackBits / 8; ++byte) {
    if (ack.sack[byte] == 0) continue;
    for (uint32_t bit = 0; bit < 8; ++bit) {
      if (((ack.sack[byte] >> bit) & 1) == 0) continue;
      const uint32_t p = cum + byte * 8 + bit;
      if (!in_flight_psn(p)) continue;
      mark_acked(p, now_ns);
    }
  }
  while (snd_una_ != snd_nxt_ && slot(snd_una_).acked) {
    ++snd_una_;
    progress = true;
  }
  for (uint32_t i = 0; i < ack.nack_count && i < kMaxNacks; ++i) {
    const uint32_t p = ack.nacks[i];
    if (in_flight_psn(p) && !slot(p).acked) {
      ++counters_.nacks_received;
      queue_retx(p);
    }
  }
  // Fast retransmit, time-based (RACK, RFC 8985): a packet sent a reordering window before
  // the latest-sent packet the peer has now acknowledged is lost. Unlike a duplicate
  // threshold it works at any window, and also catches a resend that was lost again.
  if (ack.trimmed_accepted_total > last_trimmed_) rec_.on_trims_reported(now_ns);
  // The path trims (a trimmable packet, or an exact one, which it will resend): not quiet.
  if (ack.trimmed_accepted_total > last_trimmed_ || ack.trimmed_nacked_total > last_nacked_) note_congestion();
  rack_detect(now_ns);
  // Congestion signal: what the receiver accepted and how much of it was trimmed, from its
  // running totals (robust to lost and reordered ACKs).
  if (ack.accepted_total >= last_accepted_ && ack.trimmed_accepted_total >= last_trimmed_ &&
      ack.trimmed_nacked_total >= last_nacked_) {
    cc_.on_ack(ack.accepted_total - last_accepted_, ack.trimmed_accepted_total - last_trimmed_,
               ack.trimmed_nacked_total - last_nacked_);
    last_accepted_ = ack.accepted_total;
    last_trimmed_ = ack.trimmed_accepted_total;
    last_nacked_ = ack.trimmed_nacked_total;
  }
  // Everything the timeouts resent is acknowledged and no echo told: left undecided (kept).
  if (rto_.open && psn_diff(snd_una_, rto_.end_psn) >= 0) rto_.open = false;
  if (progress) rec_.on_progress(now_ns, outstanding_ > 0);
  rec_.arm_probe(now_ns, outstanding_ > 0);
  complete_finished();
}

void SendProto::check_timeout(const AckEcho& echo, uint64_t now_ns) {
  if (!rto_.open || !echo.valid || !in_flight_psn(echo.psn) || !params_.rto_undo) return;
  const Slot& s = slot(echo.psn);
  if (s.acked || s.rto_episode != rto_.episode) return;
  rto_.open = false;
  if (echo.resent) {
    rec_.on_genuine_timeout();
    return;
  }
  // The original arrived: the timeout only saw delay. Undo its window cut; Karn keeps the
  // resends' ACKs from sampling the RTT, and the original's round trip raises the timeout.
  ++counters_.spurious_rto;
  cc_.undo_timeout(rto_.cwnd_before);
  rec_.on_spurious_timeout(now_ns - s.first_sent_ns);
  // Its resends that have not left yet would only duplicate originals on their way: dropped.
  // A packet lost after all is still found (RACK, once later ones are acknowledged, or the
  // next timeout); those already resent are not counted back.
  const size_t queued = retx_.size();
  retx_.erase(std::remove_if(retx_.begin(), retx_.end(),
                             [this](uint32_t psn) {
                               Slot& q = slot(psn);
                               if (!in_flight_psn(psn) || q.acked || q.rto_episode != rto_.episode) return false;
                               q.queued = false;
                               return true;
                             }),
              retx_.end());
  counters_.rto_resends_cancelled += queued - retx_.size();
}

void SendProto::note_trims(const CtrlPacket& ack) {
  for (uint32_t i = 0; i < ack.trim_count && i < kMaxTrimReports; ++i) {
    const TrimReport& t = ack.trims[i];
    counters_.trims_reported += t.count;
    for (uint32_t k = 0; k < t.count; ++k) {
      const uint32_t p = t.psn + k;
      // An acknowledged packet's message may be complete and gone: only live slots count.
      if (!in_flight_psn(p) || slot(p).acked) {
        if (ef_) ++counters_.trims_unmatched;
        continue;
      }
      slot(p).trimmed = true;
      if (!ef_) continue;
      if (slot(p).msg->zero_copy) {
        ++counters_.trims_unmatched;
        continue;
      }
      slot(p).msg->cuts.push_back(CutPacket{slot(p).pkt, t.received});
    }
  }
}

void SendProto::feed_back(Msg* m) {
  const CodecWork* w = m->work.get();
  const uint32_t* sizes = w ? w->sizes.data() : m->sizes.data();
  Result<bool> kept = ef_->record(m->op->data, m->op->bytes, m->op->seq, m->layout,
                                  codec::MessageId{params_.cookie, m->op->seq, m->op->trimmable}, m->src,
                                  m->packets(), params_.codec.packet_bytes, sizes, std::move(m->cuts));
  if (!kept) {
    TRIM_WARN("NET/Trim: {}", kept.status().message());  // this message's trims are estimated once, as without feedback
    return;
  }
  if (*kept) ++counters_.ef_recorded;
}

void SendProto::rack_detect(uint64_t now_ns) {
  // Fast retransmit, time-based (RACK, RFC 8985): works at any window, also for a resend that
  // was lost again; what is not lost yet sets the reorder timer.
  bool lost = false;
  uint64_t next = UINT64_MAX;
  const Recovery::RackPass rule = rec_.rack_pass(now_ns);  // queue_retx leaves rec_ alone
  for (uint32_t p = snd_una_; p != snd_nxt_; ++p) {
    Slot& s = slot(p);
    if (s.acked || s.queued) continue;
    const uint64_t deadline = rule.deadline_ns(s.sent_ns, p);
    if (now_ns >= deadline) {
      queue_retx(p);
      ++counters_.fast_retransmits;
      lost = true;
    } else {
      next = std::min(next, deadline);
    }
  }
  rec_.arm_rack(next);
  if (lost) {
    cc_.on_loss();
    note_congestion();
  }
}

void SendProto::on_timer(uint64_t now_ns) {
  const Recovery::Fired fired = rec_.on_timer(now_ns, outstanding_ > 0);
  if (fired.rack) rack_detect(now_ns);
  // Tail loss probe (RFC 8985 §7): when ACKs stop before the timeout, resend the newest
  // packet in flight. Its ACK carries the SACK state that lets RACK repair the tail (and a
  // lost last ACK is answered again), without the window cut and backoff of a timeout.
  if (fired.probe) {
    for (uint32_t p = snd_nxt_; p != snd_una_;) {
      --p;
      if (!slot(p).acked) {
        queue_retx(p);
        ++counters_.tail_probes;
        break;
      }
    }
  }
  if (!fired.timeout) return;
  ++counters_.rto_events;
  if (!rto_.open) {
    rto_.cwnd_before = cc_.window_exact();
    if (++rto_.episode == 0) rto_.episode = 1;  // 0 is no episode's
  }
  rto_.open = true;
  rto_.end_psn = snd_nxt_;
  cc_.on_timeout();
  note_congestion();
  bool queued = false;
  for (uint32_t p = snd_una_; p != snd_nxt_; ++p) {
    Slot& s = slot(p);
    if (!s.acked && !s.queued && now_ns - s.sent_ns >= fired.rto_ns) {
      queue_retx(p);
      s.rto_episode = rto_.episode;
      queued = true;
    }
  }
  if (!queued && !slot(snd_una_).acked) {
    queue_retx(snd_una_);
    slot(snd_una_).rto_episode = rto_.episode;
  }
}

uint64_t SendProto::next_deadline_ns(uint64_t now_ns) const {
  uint64_t d = rec_.next_deadline_ns();
  if (codec_waiting_) d = std::min(d, now_ns + kCodecPollNs);
  if (params_.rate_gbps > 0 && pace_next_ns_ > now_ns && (!retx_.empty() || !msgs_.empty())) {
    d = std::min(d, pace_next_ns_);
  }
  return d;
}

void SendProto::complete_finished() {
  for (auto it = msgs_.begin(); it != msgs_.end();) {
    Msg* m = it->get();
    // Acknowledged is not enough while the kernel may still read NCCL's buffer (MSG_ZEROCOPY).
    const bool kernel_done = !m->pinned || m->pinned->pending == 0;
    if (m->sent_all && m->acked == m->npackets && kernel_done) {
      if (ef_ && !m->cuts.empty()) feed_back(m);  // may read NCCL's buffer: before it goes back
      m->op->result.finish(m->op->bytes);
      if (m->staging.capacity() > 0 && staging_pool_.size() < 4) staging_pool_.push_back(std::move(m->staging));
      // Every task is done: each packet was sent.
      spare_work_.give_back(&m->work);
      it = msgs_.erase(it);
    } else {
      ++it;
    }
  }
}

void SendProto::fail_all(const Status& error) {
  cancel_codec();  // the failed ops' buffers go back to NCCL: their tasks must leave them alone
  for (auto& m : msgs_) m->op->result.fail(error);
  msgs_.clear();
  for (Slot& s : ring_) s = Slot{};
  retx_.clear();
  rto_.open = false;
  outstanding_ = 0;
  snd_una_ = snd_nxt_;
  rec_.disarm();
}

void SendProto::cancel_codec() {
  for (auto& m : msgs_) {
    if (m->work) m->work->cancel();
  }
}

bool SendProto::uses_memory(uintptr_t lo, uintptr_t hi) const {
  for (const auto& m : msgs_) {
    if (overlaps(m->op->data, m->op->bytes, lo, hi)) return true;
  }
  return false;
}

void SendProto::on_peer_fin(uint64_t completed) {
  // Delivered, only the ACK was missing: complete those, and only then fail the rest, so a
  // finished operation (whose slot NCCL may already reuse) is never touched again.
  for (auto it = msgs_.begin(); it != msgs_.end();) {
    if ((*it)->op->seq < completed) {
      if ((*it)->work) (*it)->work->cancel();  // delivered, so encoded: only a confused peer leaves work
      (*it)->op->result.finish((*it)->op->bytes);
      it = msgs_.erase(it);
    } else {
      ++it;
    }
  }
  fail_all(Status(Code::kUnavailable, "the receiving peer closed the connection"));
}

}  // namespace trim::transport

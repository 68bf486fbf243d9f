// The switch port tests' runner and checker (switch_port_test.cc, switch_port_golden_test.cc):
// packet builders, run_port (arrivals through an EgressPort, every step checked), and
// check_run, which recomputes what the model must have done from the arrivals and the
// departures alone (serialisation times, FIFO order, a link that is never idle while a packet
// waits, counters that match what was seen).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "switch_sim/port.h"


namespace trim::sw::testing {

inline constexpr uint64_t kIdle = UINT64_MAX;

// ---------------------------------------------------------------------------------------------
// Building blocks

// Serialisation time computed without the model, in integers: ceil(bytes * 8 / rate) ns for a
// whole-Gbps rate (every test here uses one).
inline uint64_t ser_ns(uint64_t bytes, double rate_gbps) {
  const uint64_t r = static_cast<uint64_t>(rate_gbps);
  EXPECT_EQ(static_cast<double>(r), rate_gbps) << "the tests use whole-Gbps rates";
  return (bytes * 8 + r - 1) / r;
}

// A trimmable codec packet: `bytes` on the wire, cut to `plane0` (header + plane 0) by a trim.
inline Packet data_packet(uint32_t bytes, uint32_t plane0, uint64_t flow, uint32_t msg, uint32_t psn) {
  Packet p;
  p.bytes = bytes;
  p.trimmable = true;
  p.plane0_bytes = plane0;
  p.flow = flow;
  p.msg = msg;
  p.psn = psn;
  return p;
}

// A packet a switch must not cut (exact-class traffic, control).
inline Packet exact_packet(uint32_t bytes, uint64_t flow, uint32_t msg, uint32_t psn) {
  Packet p;
  p.bytes = bytes;
  p.flow = flow;
  p.msg = msg;
  p.psn = psn;
  return p;
}

struct Arrival {
  uint64_t t_ns = 0;
  Packet packet;
};

// What a packet becomes when the port sends it to the header queue: plane0 mode cuts to the
// packet's own trim point, a fixed size cuts to that size or lets a shorter packet pass whole.
inline uint32_t cut_size(const PortConfig& cfg, const Packet& p) {
  if (cfg.trim_bytes == 0) return std::min(p.bytes, p.plane0_bytes);
  return std::min(p.bytes, cfg.trim_bytes);
}

inline const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kQueued: return "queued";
    case Verdict::kQueuedHeader: return "queued-header";
    case Verdict::kDropped: return "dropped";
    case Verdict::kDroppedHeader: return "dropped-header";
  }
  return "?";
}

inline std::string fmt_line(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt_line(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

using ull = unsigned long long;

inline std::string config_line(const PortConfig& c) {
  return fmt_line(
      "# config: rate_gbps=%g prop_delay_ns=%llu data_queue_bytes=%llu data_queue_packets=%u "
      "header_queue_bytes=%llu mode=%s trim_bytes=%u%s ndp_coin=%d priority=%s wrr=%u:%u random_p=%g seed=%llu",
      c.rate_gbps, (ull)c.prop_delay_ns, (ull)c.data_queue_bytes, c.data_queue_packets, (ull)c.header_queue_bytes,
      mode_name(c.mode), c.trim_bytes, c.trim_bytes == 0 ? "(plane0)" : "", c.ndp_coin ? 1 : 0,
      c.priority == Priority::kStrict ? "strict" : "wrr", c.wrr_header_weight, c.wrr_data_weight, c.random_p,
      (ull)c.seed);
}

// ---------------------------------------------------------------------------------------------
// Running a port over arrivals

struct RunOptions {
  bool record = false;                                // record_transcript(true)
  const std::vector<TranscriptEntry>* replay = nullptr;  // set_replay() before the first arrival
  size_t conservation_every = 0;  // check packet and byte conservation every n arrivals (0: only at the end)
  bool log = false;               // build the golden trace
};

struct Result {
  PortConfig cfg;
  std::vector<Arrival> arrivals;     // tag = index
  std::vector<Verdict> verdicts;     // one per arrival
  std::vector<Departure> departures; // in the order the port released them
  PortCounters counters;
  std::vector<TranscriptEntry> transcript;
  uint64_t header_dropped_bytes = 0;  // cut size of the arrivals answered kDroppedHeader
  std::vector<std::string> log;
};

// Packets and bytes inside the port (queued or on the wire), observed without touching it:
// what a copy releases when no packet arrives any more.
struct Inside {
  uint64_t packets = 0, bytes = 0;
};
inline Inside inside_of(const EgressPort& port) {
  EgressPort copy = port;
  copy.departed().clear();
  for (uint64_t t; (t = copy.next_event_ns()) != kIdle;) copy.advance(t);
  Inside in;
  for (const Departure& d : copy.departed()) {
    ++in.packets;
    in.bytes += d.packet.bytes;
  }
  return in;
}

// The checks that hold after every arrival. Returns the first violation ("" when none).
inline std::string step_violation(const EgressPort& port, const PortConfig& cfg) {
  const PortCounters& c = port.counters();
  if (cfg.data_queue_bytes != 0 && port.data_queue_bytes() > cfg.data_queue_bytes)
    return "data queue over its byte cap";
  if (cfg.data_queue_packets != 0 && port.data_queue_packets() > cfg.data_queue_packets)
    return "data queue over its packet cap";
  if (port.header_queue_bytes() > cfg.header_queue_bytes) return "header queue over its cap";
  if (port.data_queue_bytes() > c.max_data_queue_bytes) return "data queue deeper than max_data_queue_bytes";
  if (port.header_queue_bytes() > c.max_header_queue_bytes) return "header queue deeper than max_header_queue_bytes";
  if (cfg.data_queue_bytes != 0 && c.max_data_queue_bytes > cfg.data_queue_bytes) return "max_data_queue_bytes over the cap";
  if (c.max_header_queue_bytes > cfg.header_queue_bytes) return "max_header_queue_bytes over the cap";
  if (port.next_event_ns() == kIdle && (port.data_queue_packets() != 0 || port.header_queue_bytes() != 0))
    return "port idle with packets queued";
  return "";
}

// (f) and (h) at one instant. Packets: received = sent + dropped + dropped_header + inside.
// Bytes: received = sent + trimmed_bytes_removed + dropped_bytes + inside + (bytes of packets
// dropped at a full header queue, after their cut: no counter carries those, so the caller
// passes what it knows of them: the cut size of every arrival answered kDroppedHeader).
// With the NDP coin a queued packet (the data queue's tail) can be cut and dropped at the
// header queue later, under another packet's verdict; then only an inequality can be checked.
inline std::string conservation_violation(const EgressPort& port, uint64_t header_dropped_bytes, uint64_t verdict_header_drops) {
  const PortCounters& c = port.counters();
  const Inside in = inside_of(port);
  if (in.bytes < port.data_queue_bytes() + port.header_queue_bytes()) return "fewer bytes leave than are queued";
  if (in.packets < port.data_queue_packets()) return "fewer packets leave than are queued";
  const uint64_t out_packets = c.sent_packets + c.dropped_packets + c.dropped_header_packets + in.packets;
  if (c.received_packets != out_packets)
    return fmt_line("packets: received %llu != sent %llu + dropped %llu + dropped_header %llu + inside %llu",
                    (ull)c.received_packets, (ull)c.sent_packets, (ull)c.dropped_packets,
                    (ull)c.dropped_header_packets, (ull)in.packets);
  const uint64_t accounted = c.sent_bytes + c.trimmed_bytes_removed + c.dropped_bytes + in.bytes;
  if (c.received_bytes < accounted) return "bytes: more accounted for than received";
  const uint64_t residual = c.received_bytes - accounted;  // bytes dropped at the header queue
  const bool all_header_drops_known = c.dropped_header_packets == verdict_header_drops;
  if (all_header_drops_known ? residual != header_dropped_bytes : residual < header_dropped_bytes)
    return fmt_line("bytes: received %llu - sent %llu - trimmed_removed %llu - dropped %llu - inside %llu = %llu, "
                    "header-dropped bytes %llu",
                    (ull)c.received_bytes, (ull)c.sent_bytes, (ull)c.trimmed_bytes_removed, (ull)c.dropped_bytes,
                    (ull)in.bytes, (ull)residual, (ull)header_dropped_bytes);
  if (c.dropped_header_packets == 0 && residual != 0) return "bytes lost without a header drop";
  return "";
}

inline Result run_port(const PortConfig& cfg, std::vector<Arrival> arrivals, const RunOptions& opt = {}) {
  Result r;
  r.cfg = cfg;
  EgressPort port(cfg);
  port.record_transcript(opt.record);
  if (opt.replay != nullptr) port.set_replay(*opt.replay);
  if (opt.log) r.log.push_back(config_line(cfg));
  auto collect = [&] {
    for (const Departure& d : port.departed()) {
      r.departures.push_back(d);
      if (opt.log) {
        const uint64_t sent = d.arrive_ns - cfg.prop_delay_ns;
        r.log.push_back(fmt_line("t=%llu depart pkt=%llu bytes=%u trimmed=%d class=%s start=%llu far_end=%llu",
                                 (ull)sent, (ull)d.packet.tag, d.packet.bytes, d.packet.trimmed ? 1 : 0,
                                 d.packet.header_class ? "header" : "data",
                                 (ull)(sent - ser_ns(d.packet.bytes, cfg.rate_gbps)), (ull)d.arrive_ns));
      }
    }
    port.departed().clear();
  };
  std::string first_violation;
  uint64_t verdict_header_drops = 0;
  uint64_t deepest_data = 0, deepest_header = 0;  // the queues only grow in enqueue()
  for (size_t i = 0; i < arrivals.size(); ++i) {
    arrivals[i].packet.tag = i;
    const Packet& p = arrivals[i].packet;
    port.advance(arrivals[i].t_ns);
    collect();
    const Verdict v = port.enqueue(p, arrivals[i].t_ns);
    r.verdicts.push_back(v);
    if (v == Verdict::kDroppedHeader) {
      r.header_dropped_bytes += cut_size(cfg, p);
      ++verdict_header_drops;
    }
    collect();
    deepest_data = std::max(deepest_data, port.data_queue_bytes());
    deepest_header = std::max(deepest_header, port.header_queue_bytes());
    if (opt.log) {
      r.log.push_back(fmt_line("t=%llu arrive pkt=%zu flow=%llu msg=%u psn=%u bytes=%u %s -> %s | dq=%lluB/%zup hq=%lluB",
                               (ull)arrivals[i].t_ns, i, (ull)p.flow, p.msg, p.psn, p.bytes,
                               p.trimmable ? fmt_line("trimmable plane0=%u", p.plane0_bytes).c_str() : "exact",
                               verdict_name(v), (ull)port.data_queue_bytes(), port.data_queue_packets(),
                               (ull)port.header_queue_bytes()));
    }
    if (first_violation.empty()) {
      first_violation = step_violation(port, cfg);
      if (first_violation.empty() && opt.conservation_every != 0 && i % opt.conservation_every == 0)
        first_violation = conservation_violation(port, r.header_dropped_bytes, verdict_header_drops);
      if (!first_violation.empty()) first_violation += fmt_line(" (after arrival %zu)", i);
    }
  }
  if (first_violation.empty()) first_violation = conservation_violation(port, r.header_dropped_bytes, verdict_header_drops);
  EXPECT_EQ(first_violation, "") << mode_name(cfg.mode);
  for (uint64_t t; (t = port.next_event_ns()) != kIdle;) {
    port.advance(t);
    collect();
  }
  EXPECT_EQ(port.data_queue_packets(), 0u);
  EXPECT_EQ(port.header_queue_bytes(), 0u);
  r.counters = port.counters();
  // The maxima are those of what the queues held (waiting, not on the wire).
  EXPECT_EQ(r.counters.max_data_queue_bytes, deepest_data);
  EXPECT_EQ(r.counters.max_header_queue_bytes, deepest_header);
  r.transcript = port.transcript();
  r.arrivals = std::move(arrivals);
  if (opt.log) r.log.push_back("counters " + r.counters.to_json());
  return r;
}

// ---------------------------------------------------------------------------------------------
// What every run must satisfy, recomputed from the arrivals and departures alone.

inline void check_run(const Result& r) {
  const PortConfig& cfg = r.cfg;
  const size_t n = r.arrivals.size();
  ASSERT_EQ(r.verdicts.size(), n);
  std::vector<int> departed(n, 0);
  uint64_t sent_bytes = 0, removed = 0, dropped = 0, dropped_bytes = 0, verdict_header_drops = 0;
  uint64_t prev_sent = 0;
  uint64_t last_data_tag = 0, last_header_tag = 0;
  bool any_data = false, any_header = false;
  // Earliest arrival among the packets released from index k on: an idle link must not leave
  // one of them waiting.
  std::vector<uint64_t> later_min(r.departures.size() + 1, kIdle);
  for (size_t k = r.departures.size(); k-- > 0;)
    later_min[k] = std::min(later_min[k + 1], r.arrivals[r.departures[k].packet.tag].t_ns);
  for (size_t k = 0; k < r.departures.size(); ++k) {
    const Departure& d = r.departures[k];
    const uint64_t tag = d.packet.tag;
    ASSERT_LT(tag, n);
    const Arrival& a = r.arrivals[tag];
    SCOPED_TRACE(fmt_line("departure %zu (pkt %llu)", k, (ull)tag));
    EXPECT_EQ(++departed[tag], 1) << "a packet left twice";
    // Timing: serialisation back to back at the link rate, propagation added.
    ASSERT_GE(d.arrive_ns, cfg.prop_delay_ns);
    const uint64_t sent = d.arrive_ns - cfg.prop_delay_ns;
    const uint64_t ser = ser_ns(d.packet.bytes, cfg.rate_gbps);
    ASSERT_GE(sent, ser);
    const uint64_t start = sent - ser;
    EXPECT_GE(start, prev_sent) << "overlaps the previous packet on the wire";
    EXPECT_GE(start, a.t_ns) << "sent before it arrived";
    if (start > prev_sent) {
      // The link was idle from prev_sent to start: that is fine only if nothing it sends later
      // had arrived by then, and then this packet starts the instant it arrives.
      EXPECT_GE(later_min[k], start) << "link idle while a packet waited";
      EXPECT_EQ(start, a.t_ns);
    }
    prev_sent = sent;
    // Contents: whole, or cut exactly at the trim point.
    const Packet& orig = a.packet;
    EXPECT_EQ(d.packet.flow, orig.flow);
    EXPECT_EQ(d.packet.psn, orig.psn);
    if (d.packet.trimmed) {
      EXPECT_TRUE(orig.trimmable) << "a non-trimmable packet was trimmed";
      EXPECT_NE(cfg.mode, Mode::kDrop) << "drop mode trimmed";
      EXPECT_EQ(d.packet.bytes, cut_size(cfg, orig));
      EXPECT_LT(d.packet.bytes, orig.bytes);
      EXPECT_TRUE(d.packet.header_class);
      removed += orig.bytes - d.packet.bytes;
    } else {
      EXPECT_EQ(d.packet.bytes, orig.bytes);
    }
    if (d.packet.header_class) {
      EXPECT_TRUE(orig.trimmable) << "a non-trimmable packet went to the header queue";
      EXPECT_NE(cfg.mode, Mode::kDrop);
    }
    // Each queue is FIFO. (With the NDP coin a tail can enter the header queue after a packet
    // that arrived later, so only the data queue keeps arrival order there.)
    if (d.packet.header_class) {
      if (any_header && !cfg.ndp_coin) { EXPECT_GT(tag, last_header_tag) << "header queue out of order"; }
      last_header_tag = tag;
      any_header = true;
    } else {
      if (any_data) { EXPECT_GT(tag, last_data_tag) << "data queue out of order"; }
      last_data_tag = tag;
      any_data = true;
    }
    sent_bytes += d.packet.bytes;
  }
  // Verdicts against departures.
  uint64_t vanished = 0;
  std::set<std::tuple<uint64_t, uint32_t, uint32_t>> trimmed_seen;
  for (const Departure& d : r.departures)
    if (d.packet.trimmed) trimmed_seen.insert({d.packet.flow, d.packet.msg, d.packet.psn});
  for (size_t i = 0; i < n; ++i) {
    const Packet& p = r.arrivals[i].packet;
    const Verdict v = r.verdicts[i];
    SCOPED_TRACE(fmt_line("arrival %zu", i));
    if (!p.trimmable || cfg.mode == Mode::kDrop) {
      EXPECT_TRUE(v == Verdict::kQueued || v == Verdict::kDropped) << verdict_name(v);
    }
    switch (v) {
      case Verdict::kDropped:
        ++dropped;
        dropped_bytes += p.bytes;
        EXPECT_EQ(departed[i], 0);
        break;
      case Verdict::kDroppedHeader:
        ++verdict_header_drops;
        EXPECT_EQ(departed[i], 0);
        if (cut_size(cfg, p) < p.bytes) {
          removed += p.bytes - cut_size(cfg, p);
          trimmed_seen.insert({p.flow, p.msg, p.psn});
        }
        break;
      case Verdict::kQueued:
      case Verdict::kQueuedHeader:
        if (departed[i] == 0) ++vanished;  // only the NDP coin's tail drops can do that
        break;
    }
  }
  const PortCounters& c = r.counters;
  EXPECT_EQ(c.received_packets, n);
  uint64_t received_bytes = 0;
  for (const Arrival& a : r.arrivals) received_bytes += a.packet.bytes;
  EXPECT_EQ(c.received_bytes, received_bytes);
  EXPECT_EQ(c.sent_packets, r.departures.size());
  EXPECT_EQ(c.sent_bytes, sent_bytes);
  EXPECT_EQ(c.dropped_packets, dropped);
  EXPECT_EQ(c.dropped_bytes, dropped_bytes);
  EXPECT_EQ(c.dropped_header_packets, verdict_header_drops + vanished);
  if (!cfg.ndp_coin) {
    EXPECT_EQ(vanished, 0u) << "queued packets never left";
    EXPECT_EQ(c.trimmed_packets, trimmed_seen.size());
    EXPECT_EQ(c.trimmed_bytes_removed, removed);
  } else {
    EXPECT_GE(c.trimmed_packets, trimmed_seen.size());
    EXPECT_GE(c.trimmed_bytes_removed, removed);
  }
  if (cfg.mode == Mode::kDrop) { EXPECT_EQ(c.trimmed_packets, 0u); }
  if (!r.transcript.empty() || c.trimmed_packets == 0) {
    // A recorded transcript names every trim once; each trimmed packet seen is in it.
    std::set<std::tuple<uint64_t, uint32_t, uint32_t>> tr;
    for (const TranscriptEntry& e : r.transcript) tr.insert({e.flow, e.msg, e.psn});
    EXPECT_EQ(tr.size(), r.transcript.size()) << "a packet trimmed twice";
    EXPECT_EQ(r.transcript.size(), c.trimmed_packets);
    for (const auto& t : trimmed_seen) EXPECT_EQ(tr.count(t), 1u);
  }
}

// The golden scenarios run at 10 Gbps (0.8 ns a byte) with a 1 us link. Packets are what a
// 1500-byte MTU carries: fp32 `sign`, 352 elements, 56 + 1408 = 1464 bytes, cut at plane 0 to
// 56 + 44 = 100 bytes (1171.2 -> 1172 ns whole, 80 ns trimmed).
inline constexpr uint32_t kMtuPacket = 1464, kMtuPlane0 = 100;

}  // namespace trim::sw::testing

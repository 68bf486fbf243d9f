// Statistics, the human summary, the JSON line and the htsim connection-matrix export.
//
// NMSE estimate (what --help states). A trimmed reduce-scatter packet delivers only its 1-bit
// heads; rht decodes a fully trimmed row with NMSE ~ pi/2 - 1 = 0.5708 relative to the values the
// packet carried (docs/RESULTS.md, DRIVE's bound for Gaussian-like rotated rows); a cut inside
// plane 0 (fixed trim size) leaves a fraction u of the elements without a head, which decode as
// 0: e = 0.5708 (1 - u) + u. Assuming each packet holds whole rows and trim errors of different
// packets are independent:
//   nmse             = sum of e over trimmed / all first deliveries of reduce-scatter packets
//                      (of the trimmable payload for incast / permutation):
//                      the mean error of the rows as sent, relative to the partial sums they carried.
//   nmse_final_indep = sum over trimmed RS packets of e (s+1)/n  /  (RS packets / (n-1)):
//                      the error this leaves in the fully reduced chunk if the n ranks' gradients
//                      are independent with equal energy (a step-s partial sum holds s+1 of n
//                      contributions, so its energy is (s+1)/n of the result's; later steps add
//                      exact data, so errors carry through unchanged). Correlated gradients make
//                      the result's energy grow faster than the partials', lowering this.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "switch_sim/sim/sim.h"

namespace trim::sim {

namespace {


const char* workload_name(Workload w) {
  switch (w) {
    case Workload::kAllreduce: return "allreduce";
    case Workload::kIncast: return "incast";
    case Workload::kPermutation: return "permutation";
  }
  return "?";
}
const char* background_name(Background b) {
  switch (b) {
    case Background::kNone: return "none";
    case Background::kConstant: return "constant";
    case Background::kBursty: return "bursty";
  }
  return "?";
}

// Nearest-rank percentile (with 5 iterations p99 is the worst one, as it should be).
double percentile_ms(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  rank = std::min(std::max<size_t>(rank, 1), v.size());
  return v[rank - 1] / 1e6;
}

struct TierStats {
  uint32_t ports = 0;
  sw::PortCounters sum;  // over the tier's ports
  double util_sum = 0, util_max = 0;
};

}  // namespace

bool parse_bytes(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos, 10);
  } catch (...) {
    return false;
  }
  std::string suf = s.substr(pos);
  uint64_t mul = 1;
  if (suf == "" || suf == "B") mul = 1;
  else if (suf == "K" || suf == "KiB" || suf == "k") mul = 1ull << 10;
  else if (suf == "M" || suf == "MiB") mul = 1ull << 20;
  else if (suf == "G" || suf == "GiB") mul = 1ull << 30;
  else return false;
  *out = v * mul;
  return true;
}

std::string Simulator::json(double wall_seconds) const {
  TierStats tiers[kTiers];
  uint64_t port_violations = 0, trimmed_total = 0, exact_cut_total = 0, prio_sent = 0, prio_dropped = 0;
  const double work_ns = static_cast<double>(std::max<uint64_t>(1, work_end_ns_ ? work_end_ns_ : end_ns_));
  for (size_t i = 0; i < topo_.ports.size(); ++i) {
    const sw::EgressPort& p = topo_.ports[i];
    const sw::PortCounters& c = p.counters();
    TierStats& t = tiers[static_cast<int>(topo_.tier[i])];
    ++t.ports;
    t.sum.add(c);
    const double util = c.sent_bytes * 8.0 / work_ns / p.config().rate_gbps;
    t.util_sum += util;
    t.util_max = std::max(t.util_max, util);
    trimmed_total += c.trimmed_packets;
    exact_cut_total += c.exact_cut_packets;
    // Per port: every arrival left, was dropped (data or header queue), or is still queued.
    const uint64_t queued = p.data_queue_packets() + (p.header_queue_bytes() > 0 ? 1 : 0) +
                            (p.prio_queue_bytes() > 0 ? 1 : 0) + (p.next_event_ns() != UINT64_MAX ? 1 : 0);
    prio_sent += c.prio_sent_packets;
    prio_dropped += c.prio_dropped_packets;
    if (c.received_packets != c.sent_packets + c.dropped_packets + c.dropped_header_packets + queued) ++port_violations;
  }
  const uint64_t in_flight = pool_.size() - free_pkts_.size();
  const bool conserved = ctr_.injected == ctr_.delivered + ctr_.dropped && in_flight == 0 && port_violations == 0;
  const double inj = std::max<double>(1, ctr_.injected);
  const double f = ctr_.rs_packets ? static_cast<double>(ctr_.rs_trimmed) / ctr_.rs_packets : 0.0;
  const double nmse = ctr_.rs_packets ? ctr_.rs_err_sum / ctr_.rs_packets : 0.0;
  const double rs_positions = ctr_.rs_packets ? static_cast<double>(ctr_.rs_packets) / (cfg_.hosts - 1) : 1.0;
  const double nmse_final = ctr_.rs_packets && cfg_.workload == Workload::kAllreduce
                                ? ctr_.rs_err_weight / rs_positions
                                : nmse;  // one hop: the packet's values are the result

  std::string jct = "[";
  for (size_t i = 0; i < jct_ns_.size(); ++i) jct += fmt::format("{}{:.4f}", i ? "," : "", jct_ns_[i] / 1e6);
  jct += "]";
  std::string tj = "{";
  for (int i = 0; i < kTiers; ++i) {
    const TierStats& t = tiers[i];
    const sw::PortCounters& c = t.sum;
    const uint64_t received = c.received_packets;
    tj += fmt::format(
        "{}\"{}\":{{\"ports\":{},\"received\":{},\"trimmed\":{},\"exact_cut\":{},\"dropped\":{},"
        "\"dropped_header\":{},\"trim_rate\":{:.6f},\"exact_cut_rate\":{:.6f},\"drop_rate\":{:.6f},\"util_mean\":{:.4f},\"util_max\":{:.4f},"
        "\"max_queue_bytes\":{},\"max_header_queue_bytes\":{}}}",
        i ? "," : "", tier_name(static_cast<Tier>(i)), t.ports, received, c.trimmed_packets, c.exact_cut_packets,
        c.dropped_packets, c.dropped_header_packets,
        received ? static_cast<double>(c.trimmed_packets) / received : 0.0,
        received ? static_cast<double>(c.exact_cut_packets) / received : 0.0,
        received ? static_cast<double>(c.dropped_packets + c.dropped_header_packets) / received : 0.0,
        t.ports ? t.util_sum / t.ports : 0.0, t.util_max, c.max_data_queue_bytes, c.max_header_queue_bytes);
  }
  tj += "}";
  return fmt::format(
      "{{\"hosts\":{},\"hosts_per_leaf\":{},\"leaves\":{},\"spines\":{},\"oversub\":{},\"uplink_gbps\":{:.3f},"
      "\"workload\":\"{}\",\"mode\":\"{}\",\"routing\":\"{}\",\"background\":\"{}\",\"bg_load\":{},\"bg_priority\":\"{}\","
      "\"prio_sent\":{},\"prio_dropped\":{},"
      "\"bytes\":{},\"iters\":{},\"mtu\":{},\"link_gbps\":{},\"buffer_bytes\":{},\"trim_bytes\":{},"
      "\"window\":{},\"cc\":\"{}\",\"nack_exact\":{},\"fabric\":{},\"trimmed_share\":{},\"header_cuts\":{},"
      "\"rto_us\":{},\"tlp\":{},\"transport\":\"{}\",\"tcp_rack\":{},\"tcp_fast_recoveries\":{},\"ring\":\"{}\",\"seed\":{},"
      "\"jct_ms\":{},\"jct_p50_ms\":{:.4f},\"jct_p99_ms\":{:.4f},"
      "\"injected\":{},\"delivered\":{},\"dropped\":{},\"in_flight_end\":{},\"port_conservation_violations\":{},"
      "\"conservation_ok\":{},\"trimmed\":{},\"trim_rate\":{:.6f},\"trimmable_trim_rate\":{:.6f},\"exact_cut\":{},\"exact_cut_rate\":{:.6f},"
      "\"drop_rate\":{:.6f},"
      "\"retx\":{},\"retx_trimmable\":{},\"retx_nack\":{},\"retx_nack_trimmable\":{},\"retx_rto\":{},"
      "\"retx_rack\":{},\"retx_tlp\":{},\"rto_events\":{},\"spurious_rto\":{},\"duplicates\":{},\"delivered_trimmed\":{},"
      "\"rs_packets\":{},\"rs_trimmed\":{},\"rs_cut_heads\":{},"
      "\"rs_trim_fraction\":{:.6f},\"nmse\":{:.6f},\"nmse_final_indep\":{:.6f},\"bg_flows\":{},"
      "\"tiers\":{},\"events\":{},\"hung\":{},\"sim_seconds\":{:.6f},\"work_seconds\":{:.6f},"
      "\"wall_seconds\":{:.3f}}}",
      cfg_.hosts, std::min(cfg_.hosts_per_leaf, cfg_.hosts), topo_.leaves(), topo_.spines(), cfg_.oversub,
      topo_.uplink_gbps, workload_name(cfg_.workload), sw::mode_name(cfg_.mode),
      cfg_.routing == Routing::kEcmp ? "ecmp" : "spray", background_name(cfg_.background), cfg_.bg_load,
      cfg_.bg_priority ? "high" : "shared", prio_sent, prio_dropped, cfg_.bytes,
      cfg_.iters, cfg_.mtu_bytes, cfg_.link_gbps, cfg_.buffer_bytes, cfg_.trim_bytes, cfg_.window_pkts,
      cfg_.cc == Cc::kFixed ? "fixed" : "aimd", cfg_.nack_exact && !cfg_.fabric ? "true" : "false",
      cfg_.fabric ? "true" : "false", cfg_.trimmed_share, ctr_.header_cuts, cfg_.rto_ns / 1000.0, cfg_.tlp ? "true" : "false",
      cfg_.transport == Transport::kTcp ? "tcp" : "own",
      cfg_.transport == Transport::kTcp && cfg_.tcp_rack ? "true" : "false", ctr_.tcp_fast_recoveries, cfg_.ring == RingOrder::kLinear ? "linear" : "random",
      cfg_.seed, jct, percentile_ms(jct_ns_, 0.5), percentile_ms(jct_ns_, 0.99), ctr_.injected, ctr_.delivered,
      ctr_.dropped, in_flight, port_violations, conserved ? "true" : "false", trimmed_total, trimmed_total / inj,
      trimmed_total / std::max<double>(1, ctr_.injected_trimmable),
      exact_cut_total, exact_cut_total / inj,
      ctr_.dropped / inj, ctr_.retx, ctr_.retx_trimmable, ctr_.retx_nack, ctr_.retx_nack_trimmable, ctr_.retx_rto,
      ctr_.retx_rack, ctr_.retx_tlp, ctr_.rto_events, ctr_.spurious_rto, ctr_.duplicates, ctr_.delivered_trimmed, ctr_.rs_packets,
      ctr_.rs_trimmed, ctr_.rs_cut_heads, f,
      nmse, nmse_final, ctr_.bg_flows, tj, ctr_.events, hung_ ? "true" : "false", end_ns_ / 1e9,
      work_end_ns_ / 1e9, wall_seconds);
}

std::string Simulator::summary() const {
  std::string s = fmt::format(
      "trim-sim: {} hosts ({} leaves x {} hosts, {} spines, uplinks {:.1f} Gb/s, {}:1), {} {} x{}, mode {}, "
      "routing {}, background {}{}\n",
      cfg_.hosts, topo_.leaves(), std::min(cfg_.hosts_per_leaf, cfg_.hosts), topo_.spines(), topo_.uplink_gbps,
      cfg_.oversub, workload_name(cfg_.workload), cfg_.bytes, cfg_.iters, sw::mode_name(cfg_.mode),
      cfg_.routing == Routing::kEcmp ? "ecmp" : "spray", background_name(cfg_.background),
      cfg_.transport == Transport::kTcp ? ", transport tcp" : "");
  s += "  JCT per iteration (ms):";
  for (uint64_t j : jct_ns_) s += fmt::format(" {:.3f}", j / 1e6);
  s += fmt::format("\n  p50 {:.3f} ms, p99 {:.3f} ms\n", percentile_ms(jct_ns_, 0.5), percentile_ms(jct_ns_, 0.99));
  const double inj = std::max<double>(1, ctr_.injected);
  uint64_t trimmed = 0, exact_cut = 0;
  for (const auto& p : topo_.ports) {
    trimmed += p.counters().trimmed_packets;
    exact_cut += p.counters().exact_cut_packets;
  }
  s += fmt::format(
      "  packets: {} sent ({} resent), {} delivered ({} trimmed or cut), {} dropped; trim rate {:.4f}, exact cut to "
      "headers {:.4f}, drop rate {:.4f}\n",
      ctr_.injected, ctr_.retx, ctr_.delivered, ctr_.delivered_trimmed, ctr_.dropped, trimmed / inj, exact_cut / inj,
      ctr_.dropped / inj);
  if (ctr_.rs_packets) {
    const double f = static_cast<double>(ctr_.rs_trimmed) / ctr_.rs_packets;
    s += fmt::format("  reduce-scatter packets trimmed: {:.4f} ({} cut inside plane 0) -> NMSE of the rows ~ {:.4f}\n",
                     f, ctr_.rs_cut_heads, ctr_.rs_err_sum / ctr_.rs_packets);
  }
  s += fmt::format("  simulated {:.6f} s ({} events){}\n", end_ns_ / 1e9, ctr_.events,
                   hung_ ? "  ** did not finish (see --max-sim-ms) **" : "");
  return s;
}

// htsim connection matrix. Layout verified against Broadcom/csg-htsim
// sim/datacenter/connection_matrix.cpp (ConnectionMatrix::load) and
// sim/datacenter/connection_matrices/gen_allreduce.py, perm_16n_16c_2MB.cm: header lines
// "Nodes N", "Connections M", "Triggers T"; then one line per connection
// "src->dst id I (start T | trigger K) size B [send_done_trigger K2]" (ids from 1; a triggered
// flow has no start; the current loader reads T as picoseconds, we only write 0) and one line per trigger "trigger id K oneshot"; the loader checks the
// counts. Only the first iteration's workload is written (htsim has no iterations), background
// traffic is not (it is drawn during the run). As htsim's own gen_allreduce does, a ring step is
// triggered by its predecessor's send_done_trigger.
bool Simulator::write_cm(const std::string& path) const {
  std::ofstream out(path);
  if (!out) return false;
  const uint32_t n = cfg_.hosts;
  if (cfg_.workload == Workload::kAllreduce) {
    const uint32_t S = slices_per_step(), steps = 2 * (n - 1);
    const uint64_t chunk = chunk_bytes();
    const uint64_t conns = static_cast<uint64_t>(n) * steps * S;
    const uint64_t triggers = static_cast<uint64_t>(n) * (steps - 1) * S;
    out << "Nodes " << n << "\nConnections " << conns << "\nTriggers " << triggers << "\n";
    // Connection (rank r, step s, slice j) goes ring_[r] -> ring_[r+1]; it fires trigger
    // t(r, s, j) when done, which starts (r+1, s+1, j).
    auto conn_id = [&](uint64_t r, uint64_t s, uint64_t j) { return 1 + (r * steps + s) * S + j; };
    auto trig_id = [&](uint64_t r, uint64_t s, uint64_t j) { return 1 + (r * (steps - 1) + s) * S + j; };
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t s = 0; s < steps; ++s) {
        for (uint32_t j = 0; j < S; ++j) {
          const uint64_t off = static_cast<uint64_t>(j) * cfg_.slice_bytes;
          const uint64_t b = chunk > off ? std::min<uint64_t>(cfg_.slice_bytes, chunk - off) : 0;
          out << ring_[r] << "->" << ring_next(r) << " id " << conn_id(r, s, j);
          if (s == 0) out << " start 0";
          else out << " trigger " << trig_id((r + n - 1) % n, s - 1, j);
          out << " size " << b;
          if (s + 1 < steps) out << " send_done_trigger " << trig_id(r, s, j);
          out << "\n";
        }
      }
    }
    for (uint64_t t = 1; t <= triggers; ++t) out << "trigger id " << t << " oneshot\n";
  } else {
    out << "Nodes " << n << "\nConnections " << first_pairs_.size() << "\n";
    uint32_t id = 1;
    for (const auto& p : first_pairs_) out << p.first << "->" << p.second << " id " << id++ << " start 0 size " << cfg_.bytes << "\n";
  }
  return static_cast<bool>(out);
}

}  // namespace trim::sim

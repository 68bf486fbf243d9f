#include "tools/harness/report.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace trim::harness {

namespace {

// ---- A minimal binary writer/reader for the rank -> parent report ----

// Writer and Reader share their calls (pod, str, vec; each true when it worked), so that
// report_fields() can list the fields once for both directions.
class Writer {
 public:
  template <typename T>
  bool pod(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return true;
  }
  bool str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    out_ += s;
    return true;
  }
  bool vec(const std::vector<int64_t>& v) {
    pod(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pod(x);
    return true;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool pod(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!pod(n) || in_.size() - pos_ < n) return false;
    s.assign(in_, pos_, n);
    pos_ += n;
    return true;
  }
  bool vec(std::vector<int64_t>& v) {
    uint32_t n = 0;
    bool ok = pod(n);
    for (uint32_t i = 0; ok && i < n; ++i) {
      int64_t x = 0;
      ok = pod(x);
      v.push_back(x);
    }
    return ok;
  }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// A RankReport's fields in wire order, through a Writer (R = const RankReport) or a Reader.
template <class Io, class R>
bool report_fields(Io& io, R& r) {
  return io.pod(r.rank) && io.pod(r.outcome) && io.pod(r.verified) && io.pod(r.exact) && io.pod(r.raw_exact) &&
         io.pod(r.err2) && io.pod(r.ref2) && io.pod(r.nmse) && io.pod(r.result_hash) && io.pod(r.replica_nmse) &&
         io.pod(r.exact_ok) && io.pod(r.error_at_ns) && io.pod(r.in_flight_at_close) &&
         io.pod(r.stats) &&  // trivially copyable, same binary on both ends
         io.str(r.device) && io.str(r.profiler) && io.str(r.error) && io.vec(r.iter_ns);
}

// Integer value of "key": in a flat JSON object; 0 when absent.
int64_t json_int(const std::string& json, const char* key) {
  std::string needle = std::string("\"") + key + "\"";
  size_t at = json.find(needle);
  if (at == std::string::npos) return 0;
  at = json.find(':', at + needle.size());
  if (at == std::string::npos) return 0;
  return std::strtoll(json.c_str() + at + 1, nullptr, 10);
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

// Finite numbers only: JSON has no NaN/Inf.
double finite(double v) { return std::isfinite(v) ? v : -1.0; }

double percentile_ms(std::vector<int64_t> ns, double q) {
  if (ns.empty()) return 0;
  std::sort(ns.begin(), ns.end());
  // Nearest rank: p99 of 5 samples is the largest one.
  size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(ns.size())));
  idx = idx == 0 ? 0 : idx - 1;
  return static_cast<double>(ns[std::min(idx, ns.size() - 1)]) / 1e6;
}


void add_stats(PluginStats* sum, const PluginStats& s) {
  sum->available = sum->available || s.available;
  sum->sent_packets += s.sent_packets;
  sum->retransmitted_packets += s.retransmitted_packets;
  sum->received_packets += s.received_packets;
  sum->trimmed_accepted += s.trimmed_accepted;
  sum->trimmed_nacked += s.trimmed_nacked;
  sum->dup_packets += s.dup_packets;
  sum->bad_packets += s.bad_packets;
  sum->codec_tasks += s.codec_tasks;
  sum->codec_inline += s.codec_inline;
  sum->rotated_messages += s.rotated_messages;
  sum->hook_undeclared_conns += s.hook_undeclared_conns;
  sum->codec_cancelled += s.codec_cancelled;
  sum->codec_waited_tasks += s.codec_waited_tasks;
  sum->trimmed_marked += s.trimmed_marked;
  sum->header_cuts += s.header_cuts;
  sum->cut_received += s.cut_received;
  sum->cut_rejected += s.cut_rejected;
  sum->zerocopy_sends += s.zerocopy_sends;
  sum->zerocopy_copied += s.zerocopy_copied;
  sum->zerocopy_refused += s.zerocopy_refused;
  sum->send_buffer_full += s.send_buffer_full;
  sum->send_queue_drops += s.send_queue_drops;
  sum->ctrl_buffer_full += s.ctrl_buffer_full;
  sum->ctrl_stalled_conns += s.ctrl_stalled_conns;
  sum->placed_packets += s.placed_packets;
  sum->placed_misses += s.placed_misses;
  sum->plugin_cpu_s += s.plugin_cpu_s;
  sum->engine_threads += s.engine_threads;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  return "still running";
}

// Timings: per timed iteration the slowest rank's time (a collective ends when its last rank does).
void fill_timing(const Options& opt, const std::vector<RankReport>& reports, RunSummary* s) {
  std::vector<int64_t> worst;
  for (const RankReport& r : reports) {
    if (r.iter_ns.empty()) continue;
    if (worst.empty()) worst.assign(r.iter_ns.size(), 0);
    for (size_t i = 0; i < worst.size() && i < r.iter_ns.size(); ++i) worst[i] = std::max(worst[i], r.iter_ns[i]);
  }
  if (worst.empty()) return;
  double mean_ns = 0;
  for (int64_t v : worst) mean_ns += static_cast<double>(v);
  mean_ns /= static_cast<double>(worst.size());
  // bytes * 8 / ns = Gbit/s. Mixed: an iteration is three AllReduces and one Broadcast of
  // --bytes each; bus bandwidth counts 2(n-1)/n per AllReduce and 1 per Broadcast (nccl-tests).
  const double n = opt.ranks;
  const double ar_factor = 2.0 * (n - 1) / n;
  const double moved = opt.mode == Mode::kMixed ? 4.0 : 1.0;
  const double bus = opt.mode == Mode::kMixed ? 3.0 * ar_factor + 1.0 : opt.mode == Mode::kAllReduce ? ar_factor : 1.0;
  const double per_ns = mean_ns > 0 ? static_cast<double>(opt.bytes) * 8.0 / mean_ns : 0;
  s->gbps = per_ns * moved;
  s->busbw_gbps = per_ns * bus;
  s->p50_ms = percentile_ms(worst, 0.50);
  s->p99_ms = percentile_ms(worst, 0.99);
}

}  // namespace

PluginStats parse_stats(const std::string& json) {
  PluginStats s;
  s.available = true;
  s.sent_packets = json_int(json, "sent_packets");
  s.retransmitted_packets = json_int(json, "retransmitted_packets");
  s.received_packets = json_int(json, "received_packets");
  s.trimmed_accepted = json_int(json, "trimmed_accepted");
  s.trimmed_nacked = json_int(json, "trimmed_nacked");
  s.dup_packets = json_int(json, "dup_packets");
  s.bad_packets = json_int(json, "bad_packets");
  s.codec_tasks = json_int(json, "codec_tasks");
  s.codec_inline = json_int(json, "codec_inline");
  s.rotated_messages = json_int(json, "rotated_messages");
  s.hook_undeclared_conns = json_int(json, "hook_undeclared_conns");
  s.codec_cancelled = json_int(json, "codec_cancelled");
  s.codec_waited_tasks = json_int(json, "codec_waited_tasks");
  s.trimmed_marked = json_int(json, "trimmed_marked");
  s.header_cuts = json_int(json, "header_cuts");
  s.cut_received = json_int(json, "cut_received");
  s.cut_rejected = json_int(json, "cut_rejected");
  s.zerocopy_sends = json_int(json, "zerocopy_sends");
  s.zerocopy_copied = json_int(json, "zerocopy_copied");
  s.zerocopy_refused = json_int(json, "zerocopy_refused");
  s.send_buffer_full = json_int(json, "send_buffer_full");
  s.send_queue_drops = json_int(json, "send_queue_drops");
  s.ctrl_buffer_full = json_int(json, "ctrl_buffer_full");
  s.ctrl_stalled_conns = json_int(json, "ctrl_stalled_conns");
  s.placed_packets = json_int(json, "placed_packets");
  s.placed_misses = json_int(json, "placed_misses");
  return s;
}

std::string serialize(const RankReport& r) {
  Writer w;
  report_fields(w, r);
  return w.take();
}

Result<RankReport> deserialize(const std::string& bytes) {
  RankReport r;
  Reader rd(bytes);
  if (!report_fields(rd, r)) return Status(Code::kInternal, "malformed rank report");
  return r;
}

RunSummary summarize(const Options& opt, const std::vector<RankReport>& reports,
                     const std::vector<RankFate>& fates, const std::string& parent_error) {
  RunSummary s;
  for (const RankReport& r : reports) {
    add_stats(&s.totals, r.stats);
    if (r.rank == 0) s.profiler = r.profiler;
    s.exact_ok = s.exact_ok && r.exact_ok;
    s.replica_nmse = std::max(s.replica_nmse, r.replica_nmse);
    s.in_flight_at_close += r.in_flight_at_close;
  }
  s.trim_rate = s.totals.received_packets > 0
                    ? static_cast<double>(s.totals.trimmed_accepted) / static_cast<double>(s.totals.received_packets)
                    : 0.0;
  fill_timing(opt, reports, &s);

  // Errors: the parent's own first, then the first rank's; a rank gone without a word is one.
  std::string error = parent_error;
  for (size_t k = 0; k < fates.size() && error.empty(); ++k) {
    if (!fates[k].reported && !fates[k].expected_gone) {
      error = fmt::format("rank {} ended without a report ({})", k, describe_exit(fates[k].exit_status));
    }
  }
  const bool fault_run = opt.fault == Fault::kKillPeer || opt.fault == Fault::kFreezePeer;
  for (const RankReport& r : reports) {
    if (!error.empty()) break;
    if (r.outcome == Outcome::kError || (!fault_run && r.outcome != Outcome::kOk)) {
      error = fmt::format("rank {}: {}", r.rank, r.error);
    }
  }

  if (fault_run) {
    // The sender (rank 0) is the one that must notice its peer is gone.
    s.verify = "skipped";
    const RankReport* sender = nullptr;
    for (const RankReport& r : reports) sender = r.rank == 0 ? &r : sender;
    if (error.empty() && sender == nullptr) error = "the sender sent no report";
    if (error.empty() && sender->outcome == Outcome::kHang) error = "hang: " + sender->error;
    if (error.empty() && sender->outcome == Outcome::kOk) error = "the sender finished without an error";
    if (error.empty()) {
      int64_t event_at = fates.size() > 1 ? fates[1].event_at_ns : 0;
      s.detect_ms = event_at > 0 ? static_cast<double>(sender->error_at_ns - event_at) / 1e6 : -1;
      double limit_ms = 3.0 * effective_timeout_ms(opt);
      s.error = sender->error;
      s.exit_status = (event_at > 0 && s.detect_ms <= limit_ms) ? 3 : 1;
      if (s.exit_status != 3) s.error += fmt::format(" (detected after {:.0f} ms, limit {:.0f} ms)", s.detect_ms, limit_ms);
      return s;
    }
    s.error = error;
    s.exit_status = 1;
    return s;
  }

  if (opt.fault == Fault::kCloseInFlight || opt.fault == Fault::kAbortInFlight) {
    s.verify = error.empty() ? "skipped" : "fail";
  } else {
    bool exact = true;
    bool raw_exact = true;
    double nmse_sum = 0;
    int verified = 0;
    for (const RankReport& r : reports) {
      if (!r.verified) continue;
      ++verified;
      exact = exact && r.exact;
      raw_exact = raw_exact && r.raw_exact;
      nmse_sum += r.nmse;
    }
    s.nmse = verified > 0 ? nmse_sum / verified : 0;
    uint64_t first_hash = reports.empty() ? 0 : reports.front().result_hash;
    for (const RankReport& r : reports) {
      // sendrecv ends with one copy (the receiver's), so it is trivially consistent.
      if (opt.mode != Mode::kSendRecv) s.replicas_identical = s.replicas_identical && r.result_hash == first_hash;
    }
    const bool expected_all = static_cast<int>(reports.size()) == opt.ranks;
    const bool trimmed = s.totals.trimmed_accepted > 0;
    // Encoded traffic that arrived untrimmed decodes to the original bits for every scheme
    // (docs/PROTOCOL.md), so only an accepted trim explains inexact data.
    // A pre-rotated allreduce rounds in the rotation and its inverse as well.
    const bool lossy = trimmed || opt.prerotate;
    if (!error.empty() || verified == 0 || !expected_all || !s.exact_ok) {
      s.verify = "fail";
    } else if (exact) {
      s.verify = "exact";
    } else if (lossy && raw_exact && s.nmse <= opt.nmse_max) {
      // Replica divergence is reported on its own (replicas_identical), not folded in here.
      s.verify = "ok";
    } else {
      s.verify = "fail";
    }
  }
  s.error = error;
  s.exit_status = (s.verify != "fail" && error.empty()) ? 0 : 1;
  return s;
}

std::string to_json(const Options& opt, const RunSummary& s, const std::string& device) {
  const PluginStats& t = s.totals;
  // Keys only some modes have: replica_nmse where there are replicas, exact_ok where exact-class
  // collectives run beside the trimmable one.
  std::string extra;
  if (opt.mode != Mode::kSendRecv) extra += fmt::format("\"replica_nmse\":{:.6g},", finite(s.replica_nmse));
  if (opt.mode == Mode::kMixed) extra += fmt::format("\"exact_ok\":{},", s.exact_ok ? "true" : "false");
  if (opt.fault == Fault::kCloseInFlight || opt.fault == Fault::kAbortInFlight) {
    extra += fmt::format("\"in_flight_at_close\":{},", s.in_flight_at_close);
  }
  return fmt::format(
      "{{\"bench\":\"harness\",\"mode\":\"{}\",\"api\":\"{}\",\"op\":\"{}\",\"ranks\":{},\"bytes\":{},"
      "\"iters\":{},\"warmup\":{},\"device\":\"{}\",\"gbps\":{:.4f},\"busbw_gbps\":{:.4f},"
      "\"p50_ms\":{:.4f},\"p99_ms\":{:.4f},\"verify\":\"{}\",\"nmse\":{:.6g},\"trim_rate\":{:.6g},"
      "\"replicas_identical\":{},{}\"retransmits\":{},\"sent_packets\":{},\"received_packets\":{},"
      "\"trimmed_accepted\":{},\"trimmed_nacked\":{},\"dup_packets\":{},\"bad_packets\":{},"
      "\"codec_tasks\":{},\"codec_inline\":{},\"rotated_messages\":{},\"hook_undeclared_conns\":{},\"codec_cancelled\":{},\"codec_waited_tasks\":{},"
      "\"trimmed_marked\":{},\"header_cuts\":{},\"cut_received\":{},\"cut_rejected\":{},"
      "\"zerocopy_sends\":{},\"zerocopy_copied\":{},\"zerocopy_refused\":{},\"send_buffer_full\":{},\"send_queue_drops\":{},\"ctrl_buffer_full\":{},\"ctrl_stalled_conns\":{},\"placed_packets\":{},\"placed_misses\":{},\"plugin_cpu_s\":{:.4f},\"engine_threads\":{},\"stats_available\":{},\"profiler\":\"{}\",\"detect_ms\":{:.1f},\"error\":\"{}\"}}",
      mode_name(opt.mode), api_name(opt.api), run_op_name(opt), opt.ranks, opt.bytes, opt.iters, opt.warmup,
      json_escape(device), finite(s.gbps), finite(s.busbw_gbps), finite(s.p50_ms), finite(s.p99_ms), s.verify,
      finite(s.nmse), finite(s.trim_rate), s.replicas_identical ? "true" : "false", extra, t.retransmitted_packets,
      t.sent_packets, t.received_packets, t.trimmed_accepted, t.trimmed_nacked, t.dup_packets, t.bad_packets,
      t.codec_tasks, t.codec_inline, t.rotated_messages, t.hook_undeclared_conns, t.codec_cancelled,
      t.codec_waited_tasks, t.trimmed_marked, t.header_cuts, t.cut_received, t.cut_rejected,
      t.zerocopy_sends, t.zerocopy_copied, t.zerocopy_refused, t.send_buffer_full, t.send_queue_drops, t.ctrl_buffer_full, t.ctrl_stalled_conns, t.placed_packets, t.placed_misses, finite(t.plugin_cpu_s), t.engine_threads, t.available ? "true" : "false", json_escape(s.profiler), finite(s.detect_ms), json_escape(s.error));
}

std::string to_text(const Options& opt, const RunSummary& s, const std::string& device) {
  const PluginStats& t = s.totals;
  std::string out = fmt::format("trim-harness: {} {} ranks={} bytes={} iters={} (+{} warmup) device={}\n",
                                mode_name(opt.mode), api_name(opt.api), opt.ranks, opt.bytes, opt.iters,
                                opt.warmup, device.empty() ? "?" : device);
  out += fmt::format("  goodput {:.3f} Gbit/s (bus {:.3f})   p50 {:.3f} ms   p99 {:.3f} ms\n", s.gbps,
                     s.busbw_gbps, s.p50_ms, s.p99_ms);
  out += fmt::format("  verify {}   nmse {:.4g}   replicas identical: {}", s.verify, s.nmse,
                     s.replicas_identical ? "yes" : "no");
  if (opt.mode != Mode::kSendRecv) out += fmt::format(" (largest replica nmse {:.4g})", s.replica_nmse);
  if (opt.mode == Mode::kMixed) {
    out += fmt::format("   exact-class collectives: {}", s.exact_ok ? "exact" : "CORRUPTED");
  }
  out += fmt::format("   profiler {}\n", s.profiler);
  if (t.available) {
    out += fmt::format(
        "  packets: sent {} received {} retransmitted {} trimmed-accepted {} trimmed-nacked {} dup {} bad {}"
        "   trim rate {:.4f}\n",
        t.sent_packets, t.received_packets, t.retransmitted_packets, t.trimmed_accepted, t.trimmed_nacked,
        t.dup_packets, t.bad_packets, s.trim_rate);
  } else {
    out += "  packets: the plugin exports no ncclTrimStatsJson\n";
  }
  if (s.detect_ms >= 0) out += fmt::format("  peer failure detected after {:.1f} ms\n", s.detect_ms);
  if (!s.error.empty()) out += "  error: " + s.error + "\n";
  return out;
}

std::string to_csv(const std::vector<RankReport>& reports) {
  std::vector<const RankReport*> by_rank;
  size_t iters = 0;
  for (const RankReport& r : reports) {
    by_rank.push_back(&r);
    iters = std::max(iters, r.iter_ns.size());
  }
  std::sort(by_rank.begin(), by_rank.end(), [](const RankReport* a, const RankReport* b) { return a->rank < b->rank; });
  std::string out = "iter,ms";
  for (const RankReport* r : by_rank) out += fmt::format(",rank{}_ms", r->rank);
  out += "\n";
  for (size_t i = 0; i < iters; ++i) {
    int64_t worst = 0;
    std::string cols;
    for (const RankReport* r : by_rank) {
      const int64_t t = i < r->iter_ns.size() ? r->iter_ns[i] : 0;
      worst = std::max(worst, t);
      cols += fmt::format(",{:.4f}", static_cast<double>(t) / 1e6);
    }
    out += fmt::format("{},{:.4f}{}\n", i, static_cast<double>(worst) / 1e6, cols);
  }
  return out;
}

}  // namespace trim::harness

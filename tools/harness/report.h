// What each rank reports to the parent, and how the parent turns the ranks' reports into the
// run's one result (JSON line or readable summary) and exit status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/harness/options.h"

namespace trim::harness {

// The plugin's counters (ncclTrimStatsJson); all zero when the plugin has no such hook.
struct PluginStats {
  bool available = false;
  int64_t sent_packets = 0;
  int64_t retransmitted_packets = 0;
  int64_t received_packets = 0;
  int64_t trimmed_accepted = 0;
  int64_t trimmed_nacked = 0;
  int64_t dup_packets = 0;
  int64_t bad_packets = 0;
  int64_t codec_tasks = 0, codec_inline = 0;  // codec pool tasks queued / run on the engine
  int64_t rotated_messages = 0;  // sent as scheme rotated (the comm hook's communicator)
  int64_t hook_undeclared_conns = 0;  // of the hook's class, sent as rht: no --declare-rotated
  // Codec tasks that found their message abandoned, and those close/deregMr found in flight
  // (queued or running) and waited for.
  int64_t codec_cancelled = 0, codec_waited_tasks = 0;
  // Trimming fabrics: packets that arrived with the trimmed DSCP, and ours cut inside our
  // header (losses, repaired by the transport).
  int64_t trimmed_marked = 0, header_cuts = 0;
  // NCCL_TRIM_RX_CUT: cut datagrams read from the packet socket (the switch left their lengths),
  // and frames it passed that were none.
  int64_t cut_received = 0, cut_rejected = 0;
  int64_t zerocopy_sends = 0, zerocopy_copied = 0, zerocopy_refused = 0;  // NCCL_TRIM_ZEROCOPY
  // Flushes that found an engine's socket send buffer full (datagrams waited in the engine),
  // and datagrams dropped as that wait queue was full.
  int64_t send_buffer_full = 0, send_queue_drops = 0;
  // Control frames that waited for room in their TCP socket, and connections failed as their
  // peer stopped reading that stream.
  int64_t ctrl_buffer_full = 0, ctrl_stalled_conns = 0;
  int64_t placed_packets = 0, placed_misses = 0;  // exact packets received straight into place
  // CPU seconds of the plugin's own threads (trim-engine, trim-codec) over the rank's life:
  // the transport's cost, without the harness's data generation and checks.
  double plugin_cpu_s = 0;
  int64_t engine_threads = 0;  // the plugin's progress engines (threads named trim-engine)
};

// Reads the integer keys above out of the plugin's JSON object (other keys are ignored).
PluginStats parse_stats(const std::string& json);

enum class Outcome : int32_t {
  kOk = 0,
  kError = 1,       // something failed (message in `error`)
  kPeerError = 3,   // fault scenario: the expected error from the plugin was seen
  kHang = 4,        // fault scenario: no error from the plugin within 3x its timeout
};

struct RankReport {
  int32_t rank = -1;
  Outcome outcome = Outcome::kOk;
  bool verified = false;  // this rank checked received data (sendrecv: the receiver)
  bool exact = true;
  bool raw_exact = true;      // raw (non-fp32) tail bytes: must match even when trimming
  double err2 = 0, ref2 = 0;  // summed over iterations
  double nmse = 0;            // mean over iterations of per-iteration NMSE
  uint64_t result_hash = 0;   // chained over iterations (allreduce replicas)
  double replica_nmse = 0;    // largest NMSE of this rank's fp32 result against rank 0's
  bool exact_ok = true;       // mixed: every exact-class collective arrived bit exact
  int64_t error_at_ns = 0;    // mono_ns when the fault scenario's error was seen
  int64_t in_flight_at_close = 0;  // --close/--abort-in-flight: requests posted, not done, at deregMr
  PluginStats stats;
  std::string device;
  std::string profiler = "none";  // which profiler table was loaded: v6, v5 or none
  std::string error;
  std::vector<int64_t> iter_ns;  // timed iterations, barrier release to this rank's completion
};

std::string serialize(const RankReport& r);
Result<RankReport> deserialize(const std::string& bytes);

// What the parent learned about each rank besides its report.
struct RankFate {
  bool reported = false;
  bool exited = false;
  int exit_status = 0;  // waitpid status
  bool expected_gone = false;  // fault scenario: killed or frozen on purpose
  int64_t event_at_ns = 0;     // when it announced its own death / freeze
};

struct RunSummary {
  std::string verify = "fail";
  double gbps = 0, busbw_gbps = 0, p50_ms = 0, p99_ms = 0;
  double nmse = 0, trim_rate = 0, detect_ms = -1, replica_nmse = 0;
  int64_t in_flight_at_close = 0;  // summed over the ranks
  bool replicas_identical = true;
  bool exact_ok = true;
  std::string profiler = "none";
  PluginStats totals;
  std::string error;
  int exit_status = 1;
};

// Combines the reports. `parent_error` (deadline, a rank crashed...) wins over everything.
RunSummary summarize(const Options& opt, const std::vector<RankReport>& reports,
                     const std::vector<RankFate>& fates, const std::string& parent_error);

std::string to_json(const Options& opt, const RunSummary& s, const std::string& device);
std::string to_text(const Options& opt, const RunSummary& s, const std::string& device);
// --csv: a header line, then per timed iteration `iter,ms,rank0_ms,...` (ms: the slowest rank).
std::string to_csv(const std::vector<RankReport>& reports);

}  // namespace trim::harness

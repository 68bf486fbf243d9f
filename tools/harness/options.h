// Command line of trim-harness: what to run, how big, which faults to inject.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coll/net_plugin.h"
#include "coll/pipeline.h"
#include "common/status.h"

namespace trim::harness {

using coll::Api;
using coll::api_name;
using coll::kMaxInFlight;
using coll::kSliceBytes;

enum class Mode { kSendRecv, kAllReduce, kMixed };
// What setNetAttr announces in sendrecv mode: p2p (Send/Recv, always exact) or a ring
// AllReduce SIMPLE message (trimmable when --trimmable).
enum class SendRecvOp { kP2p, kAllReduce };
// Which profiler NCCL would load: kAuto = NCCL_PROFILER_PLUGIN unset (the net plugin's own
// ncclProfiler_v6/_v5), kNone = NCCL_PROFILER_PLUGIN=none.
enum class ProfilerChoice { kAuto, kNone };
// Scenarios that end a run early on purpose.
// kCloseInFlight closes with requests pending (buffers outlive the comms); kAbortInFlight does
// what NCCL's proxy teardown does on abort: deregMr, free the buffers, then close.
enum class Fault { kNone, kKillPeer, kFreezePeer, kCloseInFlight, kAbortInFlight };

struct Options {
  Mode mode = Mode::kSendRecv;
  Api api = Api::kV12;
  SendRecvOp op = SendRecvOp::kP2p;
  ProfilerChoice profiler = ProfilerChoice::kAuto;
  Fault fault = Fault::kNone;
  std::string plugin_path;  // empty: next to the binary
  int ranks = 2;
  size_t bytes = size_t{4} << 20;
  int iters = 5;
  int warmup = 1;
  bool json = false;
  std::string csv_path;  // --csv: per-iteration times (empty: none)
  bool verbose = false;
  double nmse_max = 1.0;
  int deadline_s = 120;
  uint64_t seed = 1;  // data and fault-injection seeds derive from it and the rank
  // --netns: rank K runs in network namespace netns[K] (scripts/netns_bottleneck.sh); empty:
  // every rank in the parent's.
  std::vector<std::string> netns;
  // --traffic-class: NCCL's per-communicator net config (v11 init); -1 = unset. --prerotate:
  // rotate the input before the allreduce and undo it after, as the nccl_trim comm hook does.
  int traffic_class = -1;
  bool prerotate = false;
  // --declare-rotated: declare --traffic-class rotated (rows of 2^15) before init, as the comm
  // hook does; without it the plugin trusts no class and rotates the tagged data per hop.
  bool declare_rotated = false;

  // Environment the ranks get (negative / zero: leave the plugin's default or the user's value).
  double drop = -1, dup = -1, reorder = -1, trim = -1;
  bool trimmable = false;
  int mtu_bytes = 0;
  int timeout_ms = 0;
};

const char* mode_name(Mode mode);
const char* op_name(SendRecvOp op);
// What the JSON's "op" says: sendrecv's --op, else the mode's own name.
const char* run_op_name(const Options& opt);

// Parses "16M", "4K", "1G", "1000001" (binary multiples; optional trailing "iB"/"B").
Result<size_t> parse_bytes(const std::string& text);

// Parses argv. *help_printed is set when --help was asked for (the caller exits 0).
Result<Options> parse_options(int argc, char** argv, bool* help_printed);

std::string usage_text();

// The plugin's peer timeout as the ranks will see it: --timeout-ms, else NCCL_TRIM_TIMEOUT_MS,
// else the plugin's default (common/params.def).
int effective_timeout_ms(const Options& opt);

}  // namespace trim::harness

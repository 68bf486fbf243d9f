// Per-context classification of sends: asks NCCL's profiler chain what a send is (through
// the callback NCCL gave init), runs the classifier, and counts sends by what they were, for
// the INFO summary at finalize (so a user can see the (op, proto, dtype, phase) split).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "codec/layout.h"
#include "common/params.h"
#include "transport/classify.h"

namespace trim::transport {

class SendClassifier {
 public:
  SendClassifier(const Params& p, const codec::CodecConfig& codec, net::ProfilerFn profiler);

  // `profiler_op` is the handle NCCL passed to isend (v10+), or null.
  ClassifyResult classify(const net::OpAttr& attr, void* profiler_op, uint64_t bytes);
  // "op/proto/dtype/phase -> count" lines, trimmable and exact, for the close-time INFO log.
  std::string summary() const;
  uint64_t profiler_answers() const { return profiler_answers_.load(std::memory_order_relaxed); }

 private:
  // Fills `info` from our profiler; false when no profiler answered.
  bool ask_profiler(void* profiler_op, net::OpInfo* info);
  void log_source_once(DtypeSource source, bool profiler_answered);
  void count(const net::OpAttr& attr, const net::OpInfo* info, const ClassifyResult& r);

  ClassifyInput base_;
  net::ProfilerFn profiler_;
  std::atomic<uint64_t> profiler_answers_{0};
  std::atomic<bool> logged_source_{false};
  // Indexed by func x proto x dtype x phase x trimmable.
  static constexpr int kFuncs = 7, kProtos = 4, kDtypes = 7, kPhases = 3;
  static size_t slot(int func, int proto, int dtype, int phase, int trimmable) {
    return ((((static_cast<size_t>(func) * kProtos + proto) * kDtypes + dtype) * kPhases + phase) * 2) + trimmable;
  }
  std::array<std::atomic<uint64_t>, kFuncs * kProtos * kDtypes * kPhases * 2> counts_{};
};

const char* func_name(net::Func f);
const char* proto_name(net::Proto p);
const char* data_type_name(net::DataType d);

}  // namespace trim::transport

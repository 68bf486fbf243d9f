#include "transport/send_class.h"

#include <fmt/format.h>

#include "common/log.h"
#include "common/param_enums.h"

namespace trim::transport {

const char* func_name(net::Func f) {
  switch (f) {
    case net::Func::kUnknown: return "unknown";
    case net::Func::kBroadcast: return "Broadcast";
    case net::Func::kReduce: return "Reduce";
    case net::Func::kAllGather: return "AllGather";
    case net::Func::kReduceScatter: return "ReduceScatter";
    case net::Func::kAllReduce: return "AllReduce";
    case net::Func::kP2p: return "SendRecv";
  }
  return "unknown";
}

const char* proto_name(net::Proto p) {
  switch (p) {
    case net::Proto::kUnknown: return "unknown";
    case net::Proto::kLL: return "LL";
    case net::Proto::kLL128: return "LL128";
    case net::Proto::kSimple: return "SIMPLE";
  }
  return "unknown";
}

const char* data_type_name(net::DataType d) {
  switch (d) {
    case net::DataType::kUnknown: return "unknown";
    case net::DataType::kF32: return "fp32";
    case net::DataType::kBF16: return "bf16";
    case net::DataType::kF16: return "fp16";
    case net::DataType::kF64: return "fp64";
    case net::DataType::kInteger: return "int";
    case net::DataType::kF8: return "fp8";
  }
  return "unknown";
}

namespace {

codec::DType declared_dtype(const Params& p) {
  switch (param::dtype(p)) {
    case param::Dtype::kFp32: return codec::DType::kF32;
    case param::Dtype::kBf16: return codec::DType::kBF16;
    case param::Dtype::kFp16: return codec::DType::kF16;
    case param::Dtype::kNone: break;
  }
  return codec::DType::kRaw;
}

}  // namespace

SendClassifier::SendClassifier(const Params& p, const codec::CodecConfig& codec, net::ProfilerFn profiler)
    : profiler_(std::move(profiler)) {
  base_.declared = declared_dtype(p);
  base_.scheme = codec.scheme;
  base_.min_bytes = static_cast<uint64_t>(p.min_bytes);
  base_.phase = param::phase(p) == param::Phase::kAll ? PhaseRule::kAll : PhaseRule::kReduceScatter;
  base_.force = param::force(p) == param::Force::k1;
  if (base_.force) {
    TRIM_WARN("NET/Trim: NCCL_TRIM_FORCE=1: sends NCCL says nothing about count as AllReduce SIMPLE of "
              "NCCL_TRIM_DTYPE. Run with NCCL_PROTO=Simple NCCL_ALGO=Ring, or integer and LL traffic will be "
              "corrupted");
  }
  if (base_.phase == PhaseRule::kAll) {
    TRIM_INFO("NET/Trim: NCCL_TRIM_PHASE=all: the allgather half of ring AllReduce is trimmed too; ranks will "
              "hold different estimates of the same sums (replicas diverge)");
  }
}

bool SendClassifier::ask_profiler(void* profiler_op, net::OpInfo* info) {
  if (!profiler_ || profiler_op == nullptr) return false;
  net::OpQuery q;
  void* event = nullptr;
  Status st = profiler_(&event, net::ProfilerEvent::kStart, profiler_op, net::kProfilerPluginId, &q);
  // Our profiler answers inside startEvent and opens no event; another profiler may have
  // opened one, which must be closed.
  if (st.is_ok() && event != nullptr) {
    (void)profiler_(&event, net::ProfilerEvent::kStop, profiler_op, net::kProfilerPluginId, nullptr);
  }
  if (!st.is_ok() || !q.filled || q.magic != net::kOpQueryMagic) return false;
  *info = q.info;
  profiler_answers_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SendClassifier::log_source_once(DtypeSource source, bool profiler_answered) {
  if (logged_source_.exchange(true, std::memory_order_relaxed)) return;
  if (profiler_answered) {
    TRIM_INFO("NET/Trim: op, protocol and datatype of each send come from NCCL's profiler chain");
  } else if (source == DtypeSource::kDeclared) {
    TRIM_INFO("NET/Trim: no answer from our profiler plugin ({}): datatype from NCCL_TRIM_DTYPE, phase unknown",
              net::profiler_active() ? "NCCL gave no handle with this send" : "not loaded by NCCL");
  } else {
    TRIM_INFO("NET/Trim: no answer from our profiler plugin ({}) and no NCCL_TRIM_DTYPE: nothing is trimmed",
              net::profiler_active() ? "NCCL gave no handle with this send" : "not loaded by NCCL");
  }
}

ClassifyResult SendClassifier::classify(const net::OpAttr& attr, void* profiler_op, uint64_t bytes) {
  ClassifyInput in = base_;
  in.attr = attr;
  in.bytes = bytes;
  net::OpInfo info;
  const bool answered = ask_profiler(profiler_op, &info);
  if (answered) in.info = &info;
  ClassifyResult r = transport::classify(in);
  log_source_once(r.source, answered);
  count(attr, answered ? &info : nullptr, r);
  return r;
}

void SendClassifier::count(const net::OpAttr& attr, const net::OpInfo* info, const ClassifyResult& r) {
  const int f = static_cast<int>(info != nullptr ? info->func : attr.func);
  const int p = static_cast<int>(info != nullptr ? info->proto : attr.proto);
  const int d = static_cast<int>(info != nullptr ? info->dtype : net::DataType::kUnknown);
  const size_t i = slot(f, p, d, static_cast<int>(r.phase), r.trimmable ? 1 : 0);
  if (i < counts_.size()) counts_[i].fetch_add(1, std::memory_order_relaxed);
}

std::string SendClassifier::summary() const {
  std::string out;
  for (int f = 0; f < kFuncs; ++f) {
    for (int p = 0; p < kProtos; ++p) {
      for (int d = 0; d < kDtypes; ++d) {
        for (int ph = 0; ph < kPhases; ++ph) {
          for (int t = 0; t < 2; ++t) {
            const uint64_t n = counts_[slot(f, p, d, ph, t)].load(std::memory_order_relaxed);
            if (n == 0) continue;
            out += fmt::format("{}{}/{}/{}/{}: {} {}", out.empty() ? "" : "; ", func_name(static_cast<net::Func>(f)),
                               proto_name(static_cast<net::Proto>(p)), data_type_name(static_cast<net::DataType>(d)),
                               phase_name(static_cast<Phase>(ph)), n, t == 1 ? "trimmable" : "exact");
          }
        }
      }
    }
  }
  return out.empty() ? "no sends" : out;
}

}  // namespace trim::transport

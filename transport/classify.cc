#include "transport/classify.h"

namespace trim::transport {

const char* exact_reason_name(ExactReason r) {
  switch (r) {
    case ExactReason::kTrimmable: return "trimmable";
    case ExactReason::kNotCollective: return "not_allreduce_or_reducescatter";
    case ExactReason::kNotSimple: return "not_simple_protocol";
    case ExactReason::kNoDtype: return "no_dtype";
    case ExactReason::kTooSmall: return "below_min_bytes";
    case ExactReason::kNoScheme: return "scheme_none";
  }
  return "unknown";
}

ClassifyResult classify(const ClassifyInput& in) {
  ClassifyResult out;
  const bool reducing = in.attr.func == net::Func::kAllReduce || in.attr.func == net::Func::kReduceScatter;
  if (!reducing) {
    out.reason = ExactReason::kNotCollective;
  } else if (in.attr.proto != net::Proto::kSimple) {
    out.reason = ExactReason::kNotSimple;
  } else if (in.declared == codec::DType::kRaw) {
    out.reason = ExactReason::kNoDtype;
  } else if (in.scheme == codec::Scheme::kNone) {
    out.reason = ExactReason::kNoScheme;
  } else if (in.bytes < in.min_bytes || in.bytes < codec::dtype_bytes(in.declared)) {
    out.reason = ExactReason::kTooSmall;
  } else {
    out.trimmable = true;
    out.dtype = in.declared;
    out.reason = ExactReason::kTrimmable;
  }
  return out;
}

}  // namespace trim::transport

#include "common/status.h"

namespace trim {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kBadConfig: return "bad configuration";
    case Code::kBadPacket: return "bad packet";
    case Code::kUnavailable: return "unavailable";
    case Code::kInternal: return "internal error";
    case Code::kSystem: return "system error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

}  // namespace trim

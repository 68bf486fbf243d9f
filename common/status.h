// Status: the one error type of the project's internal API. No exceptions cross layer
// boundaries (the plugin's C ABI cannot carry them); every fallible call returns a Status
// or a Result<T> whose message names what went wrong and what was expected.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace trim {

enum class Code : int {
  kOk = 0,
  kInvalidArgument,  // a caller passed something out of range
  kBadConfig,        // an NCCL_TRIM_* variable holds a value that is not allowed
  kBadPacket,        // a packet failed validation (see codec::PacketError for the reason)
  kUnavailable,      // the feature or peer is not there (yet)
  kInternal,         // an invariant broke: a bug
  kSystem,           // a syscall failed
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace trim

// Propagate a failed Status from an expression (no goto, no exceptions).
#define TRIM_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::trim::Status trim_status_ = (expr);     \
    if (!trim_status_.is_ok()) return trim_status_; \
  } while (0)

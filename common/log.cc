// spdlog lives only in this translation unit (header-only build, fmt compiled once in
// common/fmt_impl.cc), so the plugin .so carries no runtime dependency on libspdlog/libfmt
// and its symbols stay hidden from other fmt copies in the process (PyTorch ships one).
#include "common/log.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

namespace trim::log {
namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace: return spdlog::level::trace;
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
    case Level::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

Level from_spdlog(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return Level::kTrace;
    case spdlog::level::debug: return Level::kDebug;
    case spdlog::level::info: return Level::kInfo;
    case spdlog::level::warn: return Level::kWarn;
    case spdlog::level::err:
    case spdlog::level::critical: return Level::kError;
    default: return Level::kOff;
  }
}

// One sink, two destinations: NCCL's logger when a forwarder is installed, else stderr.
class Sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set_forward(ForwardFn fn, void* ctx) {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    ctx_ = ctx;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (fn_ != nullptr) {
      std::string text(msg.payload.data(), msg.payload.size());
      fn_(ctx_, from_spdlog(msg.level), msg.source.filename, msg.source.line, text.c_str());
      return;
    }
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  ForwardFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

struct State {
  std::shared_ptr<Sink> sink = std::make_shared<Sink>();
  spdlog::logger logger{"nccl-trim", sink};
  std::atomic<int> level{static_cast<int>(Level::kInfo)};
  State() {
    logger.set_pattern("[%H:%M:%S.%e] nccl-trim %^%l%$ %v");
    logger.set_level(spdlog::level::trace);  // filtering happens in enabled()
  }
};

State& state() {
  static State* s = new State();  // never destroyed: lines may be logged during exit
  return *s;
}

}  // namespace

void set_forward(ForwardFn fn, void* ctx) { state().sink->set_forward(fn, ctx); }

void set_level(Level level) { state().level.store(static_cast<int>(level), std::memory_order_relaxed); }

Level level() { return static_cast<Level>(state().level.load(std::memory_order_relaxed)); }

bool enabled(Level lvl) {
  return lvl != Level::kOff && static_cast<int>(lvl) >= state().level.load(std::memory_order_relaxed);
}

void write(Level lvl, const char* file, int line, std::string_view msg) {
  state().logger.log(spdlog::source_loc{file, line, ""}, to_spdlog(lvl), "{}", msg);
}

const char* level_name(Level lvl) {
  switch (lvl) {
    case Level::kTrace: return "trace";
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "info";
}

Result<Level> parse_level(std::string_view text) {
  for (int i = 0; i <= static_cast<int>(Level::kOff); ++i) {
    Level lvl = static_cast<Level>(i);
    if (text == level_name(lvl)) return lvl;
  }
  return Status(Code::kBadConfig, fmt::format("log level '{}' is not one of trace|debug|info|warn|error|off", text));
}

}  // namespace trim::log

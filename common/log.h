// The project's one logger. Call sites format with fmt and never include spdlog (it is
// header-only here and costs seconds per translation unit); common/log.cc owns the spdlog
// logger and its sink. Tools log to stderr; the plugin installs a forwarder so every line
// goes through the logger NCCL passed to init (see plugin/).
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "common/status.h"

namespace trim::log {

enum class Level : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// A forwarder receives every line that passes the level filter, already formatted.
using ForwardFn = void (*)(void* ctx, Level level, const char* file, int line, const char* msg);

// Route lines to fn (nullptr restores stderr). Safe to call at any time.
void set_forward(ForwardFn fn, void* ctx);
void set_level(Level level);
Level level();
bool enabled(Level level);
void write(Level level, const char* file, int line, std::string_view msg);

const char* level_name(Level level);
Result<Level> parse_level(std::string_view text);

}  // namespace trim::log

#define TRIM_LOG_AT(lvl, ...)                                                        \
  do {                                                                               \
    if (::trim::log::enabled(lvl))                                                   \
      ::trim::log::write(lvl, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__));       \
  } while (0)

#define TRIM_DEBUG(...) TRIM_LOG_AT(::trim::log::Level::kDebug, __VA_ARGS__)
#define TRIM_INFO(...) TRIM_LOG_AT(::trim::log::Level::kInfo, __VA_ARGS__)
#define TRIM_WARN(...) TRIM_LOG_AT(::trim::log::Level::kWarn, __VA_ARGS__)
#define TRIM_ERROR(...) TRIM_LOG_AT(::trim::log::Level::kError, __VA_ARGS__)

// Data-path trace: compiled out of release builds (make DEBUG=1 defines TRIM_ENABLE_TRACE).
// The disabled form still type-checks the format string but generates no code.
#ifdef TRIM_ENABLE_TRACE
#define TRIM_TRACE(...) TRIM_LOG_AT(::trim::log::Level::kTrace, __VA_ARGS__)
#else
#define TRIM_TRACE(...)                                   \
  do {                                                    \
    if (false) (void)::fmt::format(__VA_ARGS__);          \
  } while (0)
#endif

#include "common/data_path.h"

#include <atomic>
#include <mutex>

#include "common/log.h"

namespace trim::data_path {
namespace {

thread_local int t_depth = 0;
std::atomic<bool> g_enforce{false};
std::atomic<uint64_t> g_violations{0};

std::mutex& last_mu() {
  static std::mutex* m = new std::mutex();  // never destroyed: engine threads may outlive statics
  return *m;
}
std::string& last() {
  static std::string* s = new std::string();
  return *s;
}

}  // namespace

Scope::Scope() { ++t_depth; }
Scope::~Scope() { --t_depth; }
OffScope::OffScope() : saved_(t_depth) { t_depth = 0; }
OffScope::~OffScope() { t_depth = saved_; }

bool on_data_path() { return t_depth > 0; }

bool allow(CallClass cls, const char* what) {
  if (cls == CallClass::kNeverWaits || t_depth == 0) return true;
  const uint64_t n = g_violations.fetch_add(1, std::memory_order_relaxed);
  const std::string desc = std::string(what) + " on the data path (it may wait for the device)";
  {
    std::lock_guard<std::mutex> lock(last_mu());
    last() = desc;
  }
  const bool refuse = g_enforce.load(std::memory_order_relaxed);
  // Once is enough to find it; a flood of lines on the hot path would hide everything else.
  if (n == 0) TRIM_WARN("NET/Trim: {}{}", desc, refuse ? ": refused (test check)" : "");
  return !refuse;
}

void set_enforce(bool on) { g_enforce.store(on, std::memory_order_relaxed); }
bool enforcing() { return g_enforce.load(std::memory_order_relaxed); }
uint64_t violations() { return g_violations.load(std::memory_order_relaxed); }
std::string last_violation() {
  std::lock_guard<std::mutex> lock(last_mu());
  return last();
}
void reset_violations() {
  g_violations.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(last_mu());
  last().clear();
}

}  // namespace trim::data_path

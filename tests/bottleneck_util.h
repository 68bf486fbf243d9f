// Helpers of the live tests that run through trim-switch's TUN router between network
// namespaces (scripts/netns_bottleneck.sh): tun_bottleneck_test (native mode) and fabric_test
// (fabric mode). They skip, saying why, where namespaces or TUN devices cannot be made.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/live_util.h"
#include "tests/test_paths.h"
#include "transport/socket.h"

namespace trim::live {

inline std::string skip_reason() {
  if (geteuid() != 0) return "not root: network namespaces and TUN devices need CAP_NET_ADMIN";
  if (access("/dev/net/tun", R_OK | W_OK) != 0) return "no /dev/net/tun";
  if (std::system("command -v ip >/dev/null 2>&1") != 0) return "no ip (iproute2)";
  return "";
}

#define SKIP_UNLESS_NETNS()                                                      \
  do {                                                                           \
    const std::string why = skip_reason();                                       \
    if (!why.empty()) GTEST_SKIP() << "TUN bottleneck tests skipped: " << why;   \
  } while (0)

inline std::string script() { return trim::testing::source_dir() + "/scripts/netns_bottleneck.sh"; }
inline std::string build_dir() { return bin_dir() + ".."; }

// The line of `out` that contains `marker`, read as flat JSON.
inline std::map<std::string, std::string> line_with(const std::string& out, const char* marker) {
  std::istringstream in(out);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.find(marker) != std::string::npos) found = line;
  }
  return flat_json(found);
}

// One port of the switch's final line, by the rank address it serves ("198.18.0.2").
inline std::map<std::string, std::string> port_of(const std::string& line, const std::string& addr) {
  const size_t at = line.find("/" + addr + "\"");
  if (at == std::string::npos) return {};
  const size_t open = line.rfind('{', at);
  return flat_json(line.substr(open, line.find('}', at) - open + 1));
}

struct BnRun {
  int exit_code = -1;
  std::string out, err;
  std::map<std::string, std::string> harness, sw;
  std::string sw_line;
  std::string context() const { return "stdout:\n" + out + "\nstderr (tail):\n" + err.substr(err.size() > 3000 ? err.size() - 3000 : 0); }
};

// scripts/netns_bottleneck.sh BOTTLENECK_ARGS -- trim-harness HARNESS_ARGS --netns {netns}.
// `env`: NAME=VALUE for the ranks (e.g. NCCL_TRIM_FABRIC_TRIM_BYTES=256).
inline BnRun run_harness(const std::vector<std::string>& bottleneck, const std::vector<std::string>& harness,
                         const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {script(), "--build", build_dir()};
  argv.insert(argv.end(), bottleneck.begin(), bottleneck.end());
  argv.insert(argv.end(), {"--", bin_dir() + "trim-harness", "--json", "--deadline-s", "25", "--netns", "{netns}"});
  argv.insert(argv.end(), harness.begin(), harness.end());
  Child c(argv, env);
  BnRun r;
  r.exit_code = c.wait(40);
  r.out = c.out();
  r.err = c.err();
  r.harness = line_with(r.out, "\"bench\":\"harness\"");
  r.sw = line_with(r.out, "\"event\":\"final\"");
  return r;
}

// One harness allreduce through the router, trimming each trimmable packet with probability 0.2
// whatever the queue (so both modes trim alike), in fabric mode at `size` frame bytes or in
// native mode at the same IP size (so the same bytes survive).
inline BnRun trim_run(bool fab, uint32_t size, const std::vector<std::string>& more_switch = {},
               const std::vector<std::string>& env = {}) {
  std::vector<std::string> bn = {"--ranks", "2", "--rate-gbps", "2", "--seed", "5", "--switch-arg", "--mode",
                                 "--switch-arg", "random", "--switch-arg", "--random-p", "--switch-arg", "0.2"};
  const std::vector<std::string> mode =
      fab ? std::vector<std::string>{"--fabric", "1", "--trim-size", std::to_string(size)}
          : std::vector<std::string>{"--trim-bytes", std::to_string(size - 18)};
  for (const std::string& a : mode) bn.insert(bn.end(), {"--switch-arg", a});
  for (const std::string& a : more_switch) bn.insert(bn.end(), {"--switch-arg", a});
  return run_harness(bn, {"--mode", "allreduce", "--ranks", "2", "--bytes", "2M", "--iters", "3", "--warmup", "1",
                          "--seed", "3"},
                     env);
}

// A 1 Gbit/s port per rank with a 64 KiB data queue and 30 % cross traffic into every one: a
// 4-rank ring at full speed overflows it every iteration (as switch_live_test's `congested`).
inline const std::vector<std::string> kCongested = {"--ranks", "4", "--rate-gbps", "1", "--buffer-bytes", "65536",
                                             "--cross", "30", "--prop-delay-us", "20", "--seed", "7"};

// The harness's mixed traffic (a trimmable fp32 AllReduce beside exact int32, broadcast and LL
// ones) through kCongested ports in fabric mode at 256-byte trims, the ranks declaring that trim
// size; `more_switch` adds switch flags (what it rewrites after a cut).
inline BnRun mixed_fabric_256_run(const std::vector<std::string>& more_switch = {}) {
  std::vector<std::string> bn = kCongested;
  for (const char* a : {"--fabric", "1", "--trim-size", "256"}) bn.insert(bn.end(), {"--switch-arg", a});
  for (const std::string& a : more_switch) bn.insert(bn.end(), {"--switch-arg", a});
  return run_harness(bn, {"--mode", "mixed", "--ranks", "4", "--bytes", "1M", "--iters", "2", "--warmup", "1",
                          "--seed", "3"},
                     {"NCCL_TRIM_FABRIC_TRIM_BYTES=256"});
}

// What every mixed_fabric_256_run must show: the run finished and verified, the exact classes
// arrived bit exact, the replicas are identical, and the trimmable class was trimmed. Call it
// under ASSERT_NO_FATAL_FAILURE.
inline void expect_mixed_fabric_run_exact(const BnRun& r) {
  ASSERT_NE(r.exit_code, 77) << r.context();
  ASSERT_EQ(r.exit_code, 0) << r.context();
  EXPECT_NE(str(r.harness, "verify"), "fail") << r.context();
  EXPECT_EQ(str(r.harness, "exact_ok"), "true") << r.context();
  EXPECT_EQ(str(r.harness, "replicas_identical"), "true") << r.context();
  EXPECT_GT(num(r.sw, "dscp_18_trimmed"), 0) << r.context();
}

// A socket of another network namespace: a thread enters it (network namespaces are per
// thread), creates the socket and leaves; the socket stays in that namespace.
inline transport::Fd socket_in(const std::string& ns, int type) {
  transport::Fd out;
  std::thread t([&] {
    const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (setns(fd, CLONE_NEWNET) == 0) out = transport::Fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0));
    ::close(fd);
  });
  t.join();
  return out;
}

inline sockaddr_in addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

// The bottleneck held open (`sleep`) while a test sends its own traffic between two ranks.
class HeldBottleneck {
 public:
  explicit HeldBottleneck(const std::vector<std::string>& args) : child_(argv(args)) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      ready_ = line_with(child_.out(), "bottleneck_ready");
      if (!ready_.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string ns(int k) const {
    const std::string all = str(ready_, "netns");
    size_t at = 0;
    for (int i = 0; i < k; ++i) at = all.find(',', at) + 1;
    return all.substr(at, all.find(',', at) - at);
  }
  bool ready() const { return !ready_.empty(); }
  // SIGTERM: the script tears down and prints the switch's final line.
  std::string stop() {
    child_.signal(SIGTERM);
    child_.wait(15);
    std::istringstream in(child_.out());
    std::string line, found;
    while (std::getline(in, line)) {
      if (line.find("\"event\":\"final\"") != std::string::npos) found = line;
    }
    return found;
  }
  std::string context() const { return "stdout:\n" + child_.out() + "\nstderr:\n" + child_.err(); }

 private:
  static std::vector<std::string> argv(const std::vector<std::string>& args) {
    std::vector<std::string> a = {script(), "--build", build_dir()};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--", "sleep", "60"});
    return a;
  }
  Child child_;
  std::map<std::string, std::string> ready_;
};

}  // namespace trim::live

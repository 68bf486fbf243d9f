// Live: build/bin/trim-switch between trim-harness ranks on loopback (NCCL_TRIM_SWITCH), in
// trim, drop and replay modes, plus garbage thrown at it. Every process a test starts is owned
// by an RAII guard that SIGKILLs and reaps it, so a failed assertion leaves nothing behind.
// Rates and sizes are small (1 Gbit/s, 1-2 MiB) so that the file runs in well under 40 s on two
// cores and the bottleneck is the modelled port, not the CPU.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/packet.h"
#include "transport/socket.h"
#include "transport/wire.h"
#include "tests/live_util.h"

namespace {

using namespace trim;
using namespace trim::live;

// trim-switch on 127.0.0.1:0; port() reads the bound port from its first line.
class SwitchProc {
 public:
  explicit SwitchProc(std::vector<std::string> args) : child_(with_bin(std::move(args))) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
      const std::string o = child_.out();
      const size_t nl = o.find('\n');
      if (nl != std::string::npos) {
        port_ = static_cast<int>(num(flat_json(o.substr(0, nl)), "port"));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  int port() const { return port_; }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  // SIGTERM, wait, and the last ("final") stats line.
  std::map<std::string, std::string> stop() {
    child_.signal(SIGTERM);
    exit_code_ = child_.wait(10);
    return last_line("\"event\":\"final\"");
  }
  // SIGUSR1 and the stats line it prints.
  std::map<std::string, std::string> poll_stats() {
    const size_t before = count_lines();
    child_.signal(SIGUSR1);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (count_lines() == before && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return last_line("\"event\":\"stats\"");
  }
  int exit_code() const { return exit_code_; }
  std::string context() const { return "switch stdout:\n" + child_.out() + "\nswitch stderr:\n" + child_.err(); }

 private:
  static std::vector<std::string> with_bin(std::vector<std::string> args) {
    args.insert(args.begin(), bin_dir() + "trim-switch");
    return args;
  }
  size_t count_lines() const {
    const std::string o = child_.out();
    return static_cast<size_t>(std::count(o.begin(), o.end(), '\n'));
  }
  std::map<std::string, std::string> last_line(const char* marker) const {
    std::istringstream in(child_.out());
    std::string line, found;
    while (std::getline(in, line)) {
      if (line.find(marker) != std::string::npos) found = line;
    }
    return flat_json(found);
  }
  Child child_;
  int port_ = -1;
  int exit_code_ = -1;
};

struct HarnessResult {
  int exit_code = -1;
  std::map<std::string, std::string> json;
  std::string context;
};

// trim-harness --json through the switch; its own --deadline-s bounds it, our wait backs that up.
HarnessResult run_harness(const SwitchProc& sw, const std::vector<std::string>& args,
                          std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {bin_dir() + "trim-harness", "--json", "--deadline-s", "20"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.push_back("NCCL_TRIM_SWITCH=" + sw.addr());
  Child h(argv, env);
  HarnessResult r;
  r.exit_code = h.wait(30);
  const std::string out = h.out();
  r.json = flat_json(out);
  const std::string err = h.err();
  r.context = "harness stdout: " + out + "\nharness stderr (tail): " + (err.size() > 2000 ? err.substr(err.size() - 2000) : err);
  return r;
}

// A 1 Gbit/s port with a 64 KiB data queue and 0.3 Gbit/s of background traffic toward every
// receiver: a 4-rank ring at full speed overflows it every iteration.
std::vector<std::string> congested(const char* mode) {
  return {"--mode", mode, "--rate-gbps", "1", "--buffer-bytes", "65536", "--prop-delay-us", "20",
          "--cross", "const:0.3:all", "--seed", "7"};
}

TEST(SwitchLive, AllreduceTrimsUnderCongestion) {
  SwitchProc sw(congested("trim"));
  ASSERT_GT(sw.port(), 0) << sw.context();
  HarnessResult h = run_harness(sw, {"--mode", "allreduce", "--ranks", "4", "--bytes", "2M", "--iters", "3",
                                     "--warmup", "1", "--seed", "3"});
  auto st = sw.stop();
  EXPECT_EQ(h.exit_code, 0) << h.context;
  EXPECT_NE(str(h.json, "verify"), "fail") << h.context;
  EXPECT_EQ(str(h.json, "replicas_identical"), "true") << h.context;
  EXPECT_GT(num(h.json, "trimmed_accepted"), 0) << h.context;
  EXPECT_EQ(sw.exit_code(), 0) << sw.context();
  EXPECT_GT(num(st, "forwarded_trimmed"), 0) << sw.context();
  EXPECT_GT(num(st, "trimmed"), 0) << sw.context();
  EXPECT_GT(num(st, "cross"), 0) << sw.context();
  EXPECT_EQ(num(st, "bad"), 0) << sw.context();
}

// 2-bit heads end to end: the same AllReduce through a switch that trims half of the trimmable
// packets at random, once with 1-bit and once with 2-bit heads (per-hop rht, the unbiased
// scale). A trimmed row loses 0.571 of its energy with 1-bit heads and 0.133 with 2-bit ones
// (CodecTwoBit.*), so the sum's NMSE falls to ~0.23x (measured: 0.140 and 0.033); over ~1000
// trimmed packets a run the ratio's spread is a few percent, and the bound (0.5x) is far from both.
TEST(SwitchLive, TwoBitHeadsCutTheTrimmedError) {
  double nmse[2] = {0, 0};
  for (int b = 0; b < 2; ++b) {
    SwitchProc sw({"--mode", "random", "--random-p", "0.5", "--seed", "7"});
    ASSERT_GT(sw.port(), 0) << sw.context();
    HarnessResult h = run_harness(sw, {"--mode", "allreduce", "--ranks", "2", "--bytes", "4M", "--iters", "3",
                                       "--warmup", "1", "--seed", "3"},
                                  {std::string("NCCL_TRIM_HEAD_BITS=") + (b == 0 ? "1" : "2")});
    auto st = sw.stop();
    ASSERT_EQ(h.exit_code, 0) << h.context;
    EXPECT_EQ(str(h.json, "replicas_identical"), "true") << h.context;
    EXPECT_GT(num(h.json, "trimmed_accepted"), 1000) << h.context;
    EXPECT_EQ(num(st, "bad"), 0) << sw.context();
    nmse[b] = std::strtod(str(h.json, "nmse").c_str(), nullptr);  // num() reads integers
  }
  EXPECT_GT(nmse[0], 0.0);
  EXPECT_LT(nmse[1], 0.5 * nmse[0]) << "1-bit " << nmse[0] << ", 2-bit " << nmse[1];
}

// Mixed: the trimmable fp32 AllReduce beside three exact-class collectives on the same
// connections; through a trimming switch the exact ones must still arrive bit exact.
TEST(SwitchLive, MixedExactClassStaysExactThroughTrims) {
  SwitchProc sw(congested("trim"));
  ASSERT_GT(sw.port(), 0) << sw.context();
  HarnessResult h = run_harness(sw, {"--mode", "mixed", "--ranks", "4", "--bytes", "1M", "--iters", "2",
                                     "--warmup", "1", "--seed", "3"});
  auto st = sw.stop();
  EXPECT_EQ(h.exit_code, 0) << h.context;
  EXPECT_EQ(str(h.json, "exact_ok"), "true") << h.context;
  EXPECT_EQ(str(h.json, "replicas_identical"), "true") << h.context;
  EXPECT_GT(num(st, "forwarded_trimmed"), 0) << sw.context();
}

// --trim-exact: exact-class packets at a full queue arrive as bare headers; the receivers NACK
// them and the senders resend, so the result is still bit exact.
TEST(SwitchLive, ExactPacketsCutToHeadersAreNackedAndResent) {
  std::vector<std::string> args = congested("trim");
  args.insert(args.end(), {"--trim-exact", "1"});
  SwitchProc sw(args);
  ASSERT_GT(sw.port(), 0) << sw.context();
  HarnessResult h = run_harness(sw, {"--mode", "allreduce", "--ranks", "4", "--bytes", "2M", "--iters", "3",
                                     "--warmup", "1", "--seed", "3", "--profiler", "none"});
  auto st = sw.stop();
  EXPECT_EQ(h.exit_code, 0) << h.context;
  EXPECT_EQ(str(h.json, "verify"), "exact") << h.context;
  EXPECT_GT(num(h.json, "trimmed_nacked"), 0) << h.context;
  EXPECT_EQ(num(h.json, "trimmed_accepted"), 0) << h.context;
  EXPECT_GT(num(st, "forwarded_trimmed"), 0) << sw.context();
}

TEST(SwitchLive, DropModeRetransmitsAndNeverTrims) {
  SwitchProc sw(congested("drop"));
  ASSERT_GT(sw.port(), 0) << sw.context();
  // No profiler: nothing is encoded, so the result must be bit exact (with it, rht would make
  // it exact only to rounding even without a single trim).
  HarnessResult h = run_harness(sw, {"--mode", "allreduce", "--ranks", "4", "--bytes", "2M", "--iters", "3",
                                     "--warmup", "1", "--seed", "3", "--profiler", "none"});
  auto st = sw.stop();
  EXPECT_EQ(h.exit_code, 0) << h.context;
  EXPECT_EQ(str(h.json, "verify"), "exact") << h.context;
  EXPECT_EQ(str(h.json, "replicas_identical"), "true") << h.context;
  EXPECT_GT(num(h.json, "retransmits"), 0) << h.context;
  EXPECT_EQ(num(h.json, "trimmed_accepted"), 0) << h.context;
  EXPECT_EQ(num(st, "trimmed"), 0) << sw.context();
  EXPECT_GT(num(st, "dropped"), 0) << sw.context();
}

TEST(SwitchLive, SurvivesGarbageAndTruncatedPackets) {
  SwitchProc sw({"--rate-gbps", "5"});
  ASSERT_GT(sw.port(), 0) << sw.context();
  transport::Fd s(socket(AF_INET, SOCK_DGRAM, 0));
  ASSERT_TRUE(s.valid());
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(sw.port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<std::vector<uint8_t>> junk;
  junk.push_back({});                                        // empty datagram
  junk.push_back(std::vector<uint8_t>(100, 0xab));           // garbage
  junk.push_back(std::vector<uint8_t>(65000, 0x5a));         // large garbage
  std::vector<uint8_t> hdr(codec::kHeaderBytes + 64, 0);
  codec::PacketHeader h;
  h.dst_ip4 = htonl(INADDR_LOOPBACK);
  h.dst_port = 9;
  codec::write_header(h, hdr.data());
  junk.push_back(std::vector<uint8_t>(hdr.begin(), hdr.begin() + 30));  // truncated header
  std::vector<uint8_t> bad_crc = hdr;
  bad_crc[20] ^= 0xff;
  junk.push_back(bad_crc);                                   // header with a broken CRC
  std::vector<uint8_t> ctrl(transport::kCtrlBytes);
  transport::CtrlPacket cp;
  transport::write_ctrl(cp, ctrl.data());
  junk.push_back(ctrl);                                      // control packets go direct, not here
  for (const auto& j : junk) {
    ASSERT_GE(sendto(s.get(), j.data(), j.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto mid = sw.poll_stats();
  EXPECT_EQ(num(mid, "bad"), static_cast<long long>(junk.size())) << sw.context();
  EXPECT_EQ(num(mid, "bad_ctrl"), 1) << sw.context();
  // Still forwarding: a clean exact transfer through it.
  HarnessResult r = run_harness(sw, {"--mode", "sendrecv", "--bytes", "2M", "--iters", "2", "--profiler", "none"});
  auto st = sw.stop();
  EXPECT_EQ(r.exit_code, 0) << r.context;
  EXPECT_EQ(str(r.json, "verify"), "exact") << r.context;
  EXPECT_GT(num(st, "forwarded"), 0) << sw.context();
  EXPECT_EQ(num(st, "bad"), static_cast<long long>(junk.size())) << sw.context();
  EXPECT_EQ(sw.exit_code(), 0) << sw.context();
}

// The distinct lines of a transcript.
std::set<std::string> line_set(const std::string& text) {
  std::set<std::string> v;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) v.insert(line);
  }
  return v;
}

// Record which packets a congested port trims, then replay that transcript on an uncongested
// port: the same packets are trimmed. Compared as sets of distinct (flow, msg, psn): the order
// of the lines follows arrival order at the switch, and a packet the sender happened to resend
// (a timer fired while its trimmed copy was still queued) is trimmed twice in one run and once
// in the other; which packets are trimmed does not depend on that timing. One connection
// (sendrecv) keeps flow ordinals stable across runs, and with NCCL_TRIM_PHASE=all every packet
// is trimmable, so no exact packet is dropped and resent under another psn.
TEST(SwitchLive, ReplayTrimsTheRecordedPackets) {
  TempFile recorded, replayed;
  const std::vector<std::string> harness = {"--mode", "sendrecv", "--op", "allreduce", "--bytes", "2M", "--deadline-s", "10",
                                            "--iters", "2", "--warmup", "0", "--seed", "11"};
  const std::vector<std::string> env = {"NCCL_TRIM_PHASE=all"};
  {
    SwitchProc sw({"--mode", "trim", "--rate-gbps", "1", "--buffer-bytes", "32768", "--header-buffer-bytes",
                   "1048576", "--transcript-out", recorded.path});
    ASSERT_GT(sw.port(), 0) << sw.context();
    HarnessResult h = run_harness(sw, harness, env);
    sw.stop();
    EXPECT_EQ(h.exit_code, 0) << h.context;
    EXPECT_GT(num(h.json, "trimmed_accepted"), 0) << h.context;
  }
  const std::set<std::string> want = line_set(slurp(recorded.path));
  ASSERT_FALSE(want.empty());
  {
    SwitchProc sw({"--mode", "replay", "--replay", recorded.path, "--rate-gbps", "100", "--buffer-bytes", "0",
                   "--header-buffer-bytes", "1073741824", "--transcript-out", replayed.path});
    ASSERT_GT(sw.port(), 0) << sw.context();
    HarnessResult h = run_harness(sw, harness, env);
    auto st = sw.stop();
    EXPECT_EQ(h.exit_code, 0) << h.context;
    EXPECT_EQ(num(h.json, "trimmed_accepted"), static_cast<long long>(want.size())) << h.context;
    EXPECT_EQ(num(st, "dropped"), 0) << sw.context();
  }
  EXPECT_EQ(line_set(slurp(replayed.path)), want);
}

// --cross ...:prio=high: the switch accepts it and reports the priority class per port and in
// total. 1 Gbit/s of it into a 0.1 Gbit/s port with a 16 KiB cap: sent at the port's rate, the
// rest dropped and counted; the shared cross source beside it gets nothing and is dropped.
TEST(SwitchLive, PriorityCrossIsServedFirstAndCounted) {
  SwitchProc sw({"--rate-gbps", "0.1", "--buffer-bytes", "65536", "--prio-buffer-bytes", "16384", "--cross",
                 "const:1:127.0.0.1:9:prio=high", "--cross", "const:0.05:127.0.0.1:9"});
  ASSERT_GT(sw.port(), 0) << sw.context();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::map<std::string, std::string> st = sw.stop();
  ASSERT_EQ(sw.exit_code(), 0) << sw.context();
  EXPECT_GT(num(st, "prio_sent"), 100) << sw.context();  // ~3 packets/ms at 0.1 Gbit/s
  EXPECT_GT(num(st, "prio_dropped"), num(st, "prio_sent")) << sw.context();
  EXPECT_LE(num(st, "prio_max_queue"), 16384) << sw.context();
  EXPECT_GT(num(st, "dropped"), num(st, "prio_dropped")) << sw.context();  // the shared source's
  EXPECT_EQ(num(st, "trimmed"), 0) << sw.context();
  const std::string out = sw.context();
  EXPECT_NE(out.find("\"prio_queue_bytes\":"), std::string::npos);
  EXPECT_NE(out.find("\"max_prio_queue_bytes\":"), std::string::npos);
}

TEST(SwitchLive, BadFlagsExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  } cases[] = {
      {{"--rate-gbps", "fast"}, "--rate-gbps"},
      {{"--mode", "cut"}, "trim, drop, random or replay"},
      {{"--priority", "high"}, "strict or wrr"},
      {{"--cross", "const:1"}, "--cross"},
      {{"--cross", "const:1:all:prio=high:trimmable=1"}, "prio=high"},
      {{"--cross", "const:1:all:prio=low"}, "prio=low"},
      {{"--mode", "replay"}, "--replay"},
      {{"--bogus", "1"}, "--bogus"},
      {{"--loss-p", "2"}, "--loss-p"},
      {{"--tun-name", "a-name-longer-than-15"}, "--tun-name"},
      {{"--tun-netns", "a,,b"}, "--tun-netns"},
      {{"--tun-base", "198.18.0.250", "--tun-netns", "a,b,c,d,e,f,g,h"}, "/24"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {bin_dir() + "trim-switch"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Child ch(argv);
    EXPECT_EQ(ch.wait(5), 2) << c.args[0];
    EXPECT_NE(ch.err().find(c.expect), std::string::npos) << ch.err();
  }
}

}  // namespace

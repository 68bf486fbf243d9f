// Golden traces of the egress-port queue model (SwitchPortGolden.*): fixed arrival sequences run
// through EgressPort (every run also checked by check_run); the per-event log and the final
// counters are compared with tests/golden/switch_port_*.txt. TRIM_UPDATE_GOLDEN=1
// (scripts/update-golden.sh) rewrites the files instead; review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/switch_port_runner.h"
#include "tests/test_paths.h"

namespace trim::sw {
namespace {

using namespace trim::sw::testing;

// ---------------------------------------------------------------------------------------------
// Golden files

bool update_golden() {
  const char* e = std::getenv("TRIM_UPDATE_GOLDEN");
  return e != nullptr && std::string(e) == "1";
}

void compare_golden(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = trim::testing::source_dir() + "/tests/golden/switch_port_" + name + ".txt";
  if (update_golden()) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream out(path, std::ios::trunc);
    for (const std::string& l : lines) out << l << '\n';
    out.close();
    ASSERT_TRUE(out.good()) << "could not write " << path;
    std::printf("[golden] TRIM_UPDATE_GOLDEN=1: rewrote %s (%zu lines); review the diff\n", path.c_str(),
                lines.size());
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "golden file " << path << " is missing (scripts/update-golden.sh writes it)";
  std::vector<std::string> want;
  for (std::string l; std::getline(in, l);) want.push_back(l);
  for (size_t i = 0; i < std::max(want.size(), lines.size()); ++i) {
    const std::string w = i < want.size() ? want[i] : "<end of file>";
    const std::string g = i < lines.size() ? lines[i] : "<end of trace>";
    if (w != g) {
      ADD_FAILURE() << "golden trace mismatch: " << path << ":" << i + 1 << " is the first differing line\n"
                    << "  golden: " << w << "\n"
                    << "  actual: " << g << "\n"
                    << "(if the model changed on purpose: scripts/update-golden.sh, then review the diff)";
      return;
    }
  }
}


PortConfig golden_config() {
  PortConfig c;
  c.rate_gbps = 10;
  c.prop_delay_ns = 1000;
  c.data_queue_bytes = 3 * kMtuPacket;  // three packets behind the one on the wire
  c.header_queue_bytes = 500;  // five cut packets: the burst overflows it
  return c;
}

// Flow 1 offers twice the line rate (one packet every 586 ns against 1172 ns on the wire);
// flow 2 puts an exact (never trimmable) 200-byte packet and a trimmable 200-byte packet into
// the congested queue, and the trace ends with a gap in which the port drains.
std::vector<Arrival> golden_arrivals() {
  std::vector<Arrival> a;
  for (uint32_t i = 0; i < 12; ++i) a.push_back({i * 586ull, data_packet(kMtuPacket, kMtuPlane0, 1, 7, i)});
  a.push_back({6000, exact_packet(200, 2, 1, 0)});
  a.push_back({6100, data_packet(200, 100, 2, 1, 1)});
  a.push_back({30000, data_packet(kMtuPacket, kMtuPlane0, 1, 8, 0)});
  std::stable_sort(a.begin(), a.end(), [](const Arrival& x, const Arrival& y) { return x.t_ns < y.t_ns; });
  return a;
}

// Ten packets at once (1 ns apart): one goes on the wire, three queue, six are cut into the
// header queue. Strict and WRR then order the two queues differently.
std::vector<Arrival> burst_arrivals() {
  std::vector<Arrival> a;
  for (uint32_t i = 0; i < 10; ++i) a.push_back({i, data_packet(kMtuPacket, kMtuPlane0, 3, 0, i)});
  return a;
}

void golden(const std::string& name, const PortConfig& cfg, const std::vector<Arrival>& arrivals) {
  RunOptions opt;
  opt.log = true;
  opt.record = true;
  opt.conservation_every = 1;
  Result r = run_port(cfg, arrivals, opt);
  check_run(r);
  r.log.insert(r.log.begin(), "# golden trace " + name + " of switch_sim/port.h (tests/switch_port_test.cc; "
                              "scripts/update-golden.sh rewrites it)");
  compare_golden(name, r.log);
}

TEST(SwitchPortGolden, TrimPlane0) { golden("trim_plane0", golden_config(), golden_arrivals()); }

TEST(SwitchPortGolden, TrimFixed256) {
  PortConfig c = golden_config();
  c.trim_bytes = 256;  // the 200-byte trimmable packet passes whole into the header queue
  golden("trim_fixed256", c, golden_arrivals());
}

TEST(SwitchPortGolden, Drop) {
  PortConfig c = golden_config();
  c.mode = Mode::kDrop;
  golden("drop", c, golden_arrivals());
}

TEST(SwitchPortGolden, StrictPriority) { golden("strict", golden_config(), burst_arrivals()); }

TEST(SwitchPortGolden, WrrPriority) {
  PortConfig c = golden_config();
  c.priority = Priority::kWrr;
  c.wrr_header_weight = 1;
  c.wrr_data_weight = 2;
  golden("wrr_1_2", c, burst_arrivals());
}

TEST(SwitchPortGolden, NdpCoin) {
  PortConfig c = golden_config();
  c.ndp_coin = true;
  c.seed = 42;
  golden("ndp_coin_seed42", c, golden_arrivals());
}

TEST(SwitchPortGolden, PacketCappedDataQueue) {
  // No byte cap, two packets: a 9000-byte jumbo and a 64-byte packet take a slot each.
  PortConfig c = golden_config();
  c.data_queue_bytes = 0;
  c.data_queue_packets = 2;
  c.header_queue_bytes = 65536;
  std::vector<Arrival> a;
  const uint32_t sizes[] = {9000, 64, 64, 9000, 1464, 64, 9000, 64};
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t b = sizes[i];
    a.push_back({i * 100ull, data_packet(b, b == 64 ? 60 : 56 + (b - 56) / 32, 4, 0, i)});
  }
  golden("packet_cap2", c, a);
}

TEST(SwitchPortGolden, RandomSeed7) {
  PortConfig c = golden_config();
  c.mode = Mode::kRandom;
  c.random_p = 0.3;
  c.seed = 7;
  golden("random_p0.3_seed7", c, golden_arrivals());
}

}  // namespace
}  // namespace trim::sw

// Interface discovery: NCCL_SOCKET_IFNAME-style spec parsing, the selection rules (state,
// loopback, dedup, order) on synthetic candidate lists, sysfs attributes read from a temp tree,
// guid stability, the no-match message, and one smoke test against this machine's loopback.
#include "transport/devices.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/params.h"

namespace {

namespace fs = std::filesystem;
using trim::Code;
using trim::transport::IfCandidate;
using trim::transport::NetIf;
using trim::transport::ifname_selected;
using trim::transport::select_interfaces;

constexpr int kFallbackMbps = 12345;

uint32_t ip(const char* dotted) {
  in_addr a{};
  EXPECT_EQ(inet_pton(AF_INET, dotted, &a), 1) << dotted;
  return a.s_addr;
}

IfCandidate up_if(const std::string& name, const char* addr, int index, bool loopback = false) {
  return IfCandidate{name, addr == nullptr ? 0u : ip(addr), true, true, loopback, index};
}

std::vector<std::string> names_of(const std::vector<NetIf>& ifs) {
  std::vector<std::string> out;
  for (const NetIf& n : ifs) out.push_back(n.name);
  return out;
}

// A scratch sysfs tree, removed with the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trim-devices-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

  // Writes <root>/<ifname>/<attr> with `text`.
  void put(const std::string& ifname, const std::string& attr, const std::string& text) const {
    fs::create_directories(fs::path(path_) / ifname);
    std::ofstream(fs::path(path_) / ifname / attr) << text;
  }

 private:
  std::string path_;
};

// ---- Spec parsing ----

TEST(DevicesSpec, EmptySpecSelectsEverything) {
  EXPECT_TRUE(ifname_selected("", "eth0"));
  EXPECT_TRUE(ifname_selected("", "lo"));
}

TEST(DevicesSpec, PrefixesMatchNameStartsOnly) {
  EXPECT_TRUE(ifname_selected("eth", "eth0"));
  EXPECT_TRUE(ifname_selected("eth", "eth10"));
  EXPECT_TRUE(ifname_selected("eth", "eth"));
  EXPECT_FALSE(ifname_selected("eth", "veth0"));  // prefix, not substring
  EXPECT_FALSE(ifname_selected("eth0", "eth"));   // the name must be at least the prefix
  EXPECT_FALSE(ifname_selected("eth", "ib0"));
}

TEST(DevicesSpec, CommaListIgnoresEmptyEntriesAndBlanks) {
  EXPECT_TRUE(ifname_selected("ib,eth", "ib0"));
  EXPECT_TRUE(ifname_selected("ib,eth", "eth1"));
  EXPECT_FALSE(ifname_selected("ib,eth", "lo"));
  EXPECT_TRUE(ifname_selected("ib, eth", "eth1"));
  // An empty entry would be a prefix of every name; it must not turn into "select all".
  EXPECT_FALSE(ifname_selected("ib,,", "eth0"));
  EXPECT_TRUE(ifname_selected("ib,,", "ib0"));
}

TEST(DevicesSpec, CaretExcludesTheWholeList) {
  EXPECT_FALSE(ifname_selected("^docker,lo", "docker0"));
  EXPECT_FALSE(ifname_selected("^docker,lo", "lo"));
  EXPECT_TRUE(ifname_selected("^docker,lo", "eth0"));
  EXPECT_TRUE(ifname_selected("^", "eth0"));  // excluding nothing keeps everything
}

TEST(DevicesSpec, EqualsMeansExactNames) {
  EXPECT_TRUE(ifname_selected("=eth0", "eth0"));
  EXPECT_FALSE(ifname_selected("=eth0", "eth01"));
  EXPECT_FALSE(ifname_selected("=eth0", "eth0:1"));
  EXPECT_FALSE(ifname_selected("=eth0", "eth"));
  EXPECT_TRUE(ifname_selected("=eth0,ib1", "ib1"));
  EXPECT_FALSE(ifname_selected("=eth0,ib1", "ib10"));
  EXPECT_FALSE(ifname_selected("=", "eth0"));  // an empty exact list names nothing
}

TEST(DevicesSpec, CaretThenEqualsExcludesExactNames) {
  EXPECT_FALSE(ifname_selected("^=eth0", "eth0"));
  EXPECT_TRUE(ifname_selected("^=eth0", "eth01"));
  EXPECT_TRUE(ifname_selected("^=eth0", "lo"));
  // NCCL reads '^' only first: "=^eth0" is the exact name "^eth0", which no interface has.
  EXPECT_FALSE(ifname_selected("=^eth0", "eth0"));
  EXPECT_FALSE(ifname_selected("=^eth0", "lo"));
}

// ---- Selection rules ----

TEST(DevicesSelect, EmptySpecSkipsLoopbackWhenAnotherIsUp) {
  auto r = select_interfaces({up_if("lo", "127.0.0.1", 1, true), up_if("eth0", "10.0.0.2", 2)}, "", kFallbackMbps,
                             "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(names_of(*r), std::vector<std::string>{"eth0"});
  EXPECT_EQ(r->front().ip4_be, ip("10.0.0.2"));
  EXPECT_EQ(r->front().if_index, 2);
  EXPECT_FALSE(r->front().loopback);
}

TEST(DevicesSelect, EmptySpecKeepsLoopbackWhenItIsTheOnlyOne) {
  IfCandidate eth_down = up_if("eth0", "10.0.0.2", 2);
  eth_down.up = false;
  auto r = select_interfaces({up_if("lo", "127.0.0.1", 1, true), eth_down}, "", kFallbackMbps, "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(names_of(*r), std::vector<std::string>{"lo"});
  EXPECT_TRUE(r->front().loopback);
  EXPECT_EQ(r->front().ip4_be, ip("127.0.0.1"));
}

TEST(DevicesSelect, SpecNamingLoopbackChoosesIt) {
  const std::vector<IfCandidate> cands = {up_if("eth0", "10.0.0.2", 2), up_if("lo", "127.0.0.1", 1, true)};
  auto r = select_interfaces(cands, "lo", kFallbackMbps, "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(names_of(*r), std::vector<std::string>{"lo"});
  // Any explicit spec treats loopback like any other interface, after the real ones.
  auto all = select_interfaces(cands, "^docker", kFallbackMbps, "/nonexistent");
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(names_of(*all), (std::vector<std::string>{"eth0", "lo"}));
}

TEST(DevicesSelect, DownOrCarrierlessOrAddresslessInterfacesAreSkipped) {
  IfCandidate down = up_if("eth1", "10.0.1.2", 3);
  down.up = false;
  IfCandidate no_carrier = up_if("eth2", "10.0.2.2", 4);
  no_carrier.running = false;
  const IfCandidate no_ip4 = up_if("eth3", nullptr, 5);
  auto r = select_interfaces({down, no_carrier, no_ip4, up_if("eth0", "10.0.0.2", 2)}, "eth", kFallbackMbps,
                             "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(names_of(*r), std::vector<std::string>{"eth0"});
}

TEST(DevicesSelect, OneEntryPerNameWithItsFirstIpv4Address) {
  // getifaddrs lists a link-layer entry (no IPv4) before the addresses of the same interface.
  auto r = select_interfaces({up_if("eth0", nullptr, 2), up_if("eth0", "10.0.0.2", 2), up_if("eth0", "10.0.0.3", 2)},
                             "", kFallbackMbps, "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().ip4_be, ip("10.0.0.2"));
}

TEST(DevicesSelect, NonLoopbackFirstThenByName) {
  auto r = select_interfaces({up_if("lo", "127.0.0.1", 1, true), up_if("ib0", "10.1.0.2", 4),
                              up_if("eth1", "10.0.1.2", 3), up_if("eth0", "10.0.0.2", 2)},
                             "^docker", kFallbackMbps, "/nonexistent");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(names_of(*r), (std::vector<std::string>{"eth0", "eth1", "ib0", "lo"}));
}

// ---- No match ----

TEST(DevicesError, NoMatchNamesTheSpecAndTheCandidates) {
  auto r = select_interfaces({up_if("lo", "127.0.0.1", 1, true), up_if("eth0", "10.0.0.2", 2)}, "xyz",
                             kFallbackMbps, "/nonexistent");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "NCCL_TRIM_IFNAME='xyz' matches no IPv4 interface that is up (have: lo, eth0)");
}

TEST(DevicesError, CandidateListSaysWhyEachWasUnusable) {
  IfCandidate down = up_if("eth1", "10.0.1.2", 3);
  down.up = false;
  IfCandidate no_carrier = up_if("eth2", "10.0.2.2", 4);
  no_carrier.running = false;
  auto r = select_interfaces({down, no_carrier, up_if("eth3", nullptr, 5)}, "", kFallbackMbps, "/nonexistent");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            "NCCL_TRIM_IFNAME='' (no filter) matches no IPv4 interface that is up "
            "(have: eth1 (down), eth2 (no carrier), eth3 (no IPv4))");
  auto none = select_interfaces({}, "eth", kFallbackMbps, "/nonexistent");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("'eth'"), std::string::npos);
  EXPECT_NE(none.status().message().find("(have: none)"), std::string::npos);
}

// ---- sysfs attributes ----

TEST(DevicesSysfs, ReadsSpeedMtuAndPciPath) {
  TempDir root;
  ASSERT_FALSE(root.path().empty());
  root.put("eth0", "speed", "100000\n");
  root.put("eth0", "mtu", "9000\n");
  root.put("eth0", "address", "0a:1b:2c:3d:4e:5f\n");
  const fs::path pci = fs::path(root.path()) / "devices" / "pci0000:00" / "0000:17:00.0";
  fs::create_directories(pci);
  // sysfs links are relative; resolve through one the same way.
  fs::create_symlink("../devices/pci0000:00/0000:17:00.0", fs::path(root.path()) / "eth0" / "device");

  auto r = select_interfaces({up_if("eth0", "10.0.0.2", 2)}, "", kFallbackMbps, root.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const NetIf& n = r->front();
  EXPECT_EQ(n.speed_mbps, 100000);
  EXPECT_EQ(n.mtu, 9000);
  EXPECT_EQ(n.pci_path, fs::canonical(pci).string());
  EXPECT_EQ(n.pci_path.front(), '/');
  EXPECT_NE(n.guid, 0u);
}

TEST(DevicesSysfs, UnknownSpeedFallsBackAndMissingFilesLeaveDefaults) {
  TempDir root;
  ASSERT_FALSE(root.path().empty());
  root.put("veth0", "speed", "-1\n");  // what virtual links report
  root.put("veth0", "mtu", "1500\n");
  root.put("tap0", "speed", "0\n");
  root.put("bad0", "speed", "fast\n");
  root.put("bad0", "mtu", "-5\n");
  auto r = select_interfaces({up_if("veth0", "10.0.0.2", 2), up_if("tap0", "10.0.0.3", 3),
                              up_if("bad0", "10.0.0.4", 4), up_if("gone0", "10.0.0.5", 5)},
                             "", kFallbackMbps, root.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(names_of(*r), (std::vector<std::string>{"bad0", "gone0", "tap0", "veth0"}));
  for (const NetIf& n : *r) {
    EXPECT_EQ(n.speed_mbps, kFallbackMbps) << n.name;
    EXPECT_TRUE(n.pci_path.empty()) << n.name;  // no device link: a virtual interface
    EXPECT_NE(n.guid, 0u) << n.name;
  }
  EXPECT_EQ((*r)[0].mtu, 0);  // bad0: a negative mtu is not an mtu
  EXPECT_EQ((*r)[1].mtu, 0);  // gone0: no directory at all
  EXPECT_EQ((*r)[3].mtu, 1500);
}

TEST(DevicesSysfs, AliasReadsItsDeviceAndSharesItsGuid) {
  TempDir root;
  ASSERT_FALSE(root.path().empty());
  root.put("eth0", "speed", "25000\n");
  root.put("eth0", "address", "0a:1b:2c:3d:4e:5f\n");
  auto r = select_interfaces({up_if("eth0", "10.0.0.2", 2), up_if("eth0:1", "10.0.9.2", 2)}, "", kFallbackMbps,
                             root.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].name, "eth0:1");
  EXPECT_EQ((*r)[1].speed_mbps, 25000);
  EXPECT_EQ((*r)[0].guid, (*r)[1].guid);  // one physical port
}

// ---- guid ----

TEST(DevicesGuid, Fnv1aMatchesItsDefinition) {
  // Published FNV-1a 64-bit test vectors: the hash, hence every guid, is fixed across builds.
  EXPECT_EQ(trim::transport::fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(trim::transport::fnv1a64("a"), 0xaf63dc4c8601ec8cull);
}

TEST(DevicesGuid, StableAcrossCallsDistinctAcrossNamesAndMacs) {
  TempDir a;
  TempDir b;
  ASSERT_FALSE(a.path().empty());
  ASSERT_FALSE(b.path().empty());
  // Same MAC on two names (e.g. a VLAN over its parent) must still give two guids.
  a.put("eth0", "address", "0a:1b:2c:3d:4e:5f\n");
  a.put("eth1", "address", "0a:1b:2c:3d:4e:5f\n");
  b.put("eth0", "address", "0A:1B:2C:3D:4E:60\n");
  const std::vector<IfCandidate> cands = {up_if("eth0", "10.0.0.2", 2), up_if("eth1", "10.0.1.2", 3)};
  auto first = select_interfaces(cands, "", kFallbackMbps, a.path());
  auto again = select_interfaces(cands, "", kFallbackMbps, a.path());
  auto other_mac = select_interfaces(cands, "", kFallbackMbps, b.path());
  ASSERT_TRUE(first.is_ok() && again.is_ok() && other_mac.is_ok());
  EXPECT_EQ((*first)[0].guid, (*again)[0].guid);
  EXPECT_EQ((*first)[1].guid, (*again)[1].guid);
  EXPECT_NE((*first)[0].guid, (*first)[1].guid);
  EXPECT_NE((*first)[0].guid, (*other_mac)[0].guid);
  // The MAC's letter case does not matter (sysfs prints lower case; tests need not).
  b.put("eth1", "address", "0A:1B:2C:3D:4E:5F\n");
  auto upper = select_interfaces(cands, "", kFallbackMbps, b.path());
  ASSERT_TRUE(upper.is_ok());
  EXPECT_EQ((*upper)[1].guid, (*first)[1].guid);
}

// ---- This machine ----

TEST(DevicesDiscover, FindsLoopbackOnThisMachine) {
  auto r = trim::transport::discover_interfaces("lo", 10000);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const NetIf* lo = nullptr;
  for (const NetIf& n : *r) {
    EXPECT_EQ(n.name.compare(0, 2, "lo"), 0) << n.name;  // the spec is a prefix filter
    if (n.name == "lo") lo = &n;
  }
  ASSERT_NE(lo, nullptr);
  EXPECT_EQ(trim::transport::ip4_to_string(lo->ip4_be), "127.0.0.1");
  EXPECT_TRUE(lo->loopback);
  EXPECT_EQ(lo->if_index, static_cast<int>(if_nametoindex("lo")));
  EXPECT_TRUE(lo->pci_path.empty());
  EXPECT_EQ(lo->speed_mbps, 10000);  // loopback reports no link speed
  EXPECT_NE(lo->guid, 0u);
  if (fs::exists("/sys/class/net/lo/mtu")) {
    EXPECT_GT(lo->mtu, 0);
  }
}

TEST(DevicesDiscover, NoMatchOnThisMachineNamesTheSpec) {
  auto r = trim::transport::discover_interfaces("=no-such-if0", 10000);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("NCCL_TRIM_IFNAME='=no-such-if0'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("lo"), std::string::npos) << r.status().message();
}

TEST(DevicesFormat, Ip4ToString) {
  EXPECT_EQ(trim::transport::ip4_to_string(ip("10.20.30.40")), "10.20.30.40");
  EXPECT_EQ(trim::transport::ip4_to_string(htonl(INADDR_LOOPBACK)), "127.0.0.1");
  EXPECT_EQ(trim::transport::ip4_to_string(0), "0.0.0.0");
}

}  // namespace

// ---- NCCL_TRIM_MTU against the interfaces' MTU ----

namespace {

TEST(Devices, MtuLargerThanAnInterfacesIsRefusedNamingBoth) {
  trim::transport::NetIf eth;
  eth.name = "eth0";
  eth.mtu = 1500;
  trim::transport::NetIf unknown;
  unknown.name = "tun0";
  unknown.mtu = 0;  // not readable: not judged
  EXPECT_TRUE(trim::transport::check_mtu({eth, unknown}, 1500).is_ok());
  const trim::Status st = trim::transport::check_mtu({unknown, eth}, 4096);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), trim::Code::kBadConfig);
  EXPECT_NE(st.message().find("NCCL_TRIM_MTU=4096 exceeds the MTU of eth0 (1500)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("at most 1500"), std::string::npos) << st.message();
  EXPECT_TRUE(trim::transport::check_mtu({eth}, 256).is_ok());  // below the interface's: fine
}

// auto fits any interface whose MTU is known to be at least 256 (or unknown: then 1500).
TEST(Devices, AutoMtuIsRefusedOnlyBelow256) {
  NetIf eth, lo, unknown, tiny;
  eth.name = "eth0";
  eth.mtu = 1500;
  lo.name = "lo";
  lo.mtu = 65536;
  unknown.name = "tun0";
  tiny.name = "slip0";
  tiny.mtu = 200;
  EXPECT_TRUE(trim::transport::check_mtu({eth, lo, unknown}, trim::kAuto).is_ok());
  const trim::Status st = trim::transport::check_mtu({eth, tiny}, trim::kAuto);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), trim::Code::kBadConfig);
  EXPECT_NE(st.message().find("NCCL_TRIM_MTU=auto: the MTU of slip0 (200) is below 256"), std::string::npos)
      << st.message();
}

// What each end offers: auto follows the interface up to 9000 (1500 when unknown); an explicit
// value is offered as given on every interface. The MTUs come from a fake sysfs tree.
TEST(DevicesSysfs, AutoMtuFollowsEachInterfaceCappedAt9000) {
  TempDir root;
  ASSERT_FALSE(root.path().empty());
  root.put("eth0", "mtu", "1500\n");
  root.put("eth1", "mtu", "9000\n");
  root.put("eth2", "mtu", "4200\n");
  root.put("lo", "mtu", "65536\n");
  // tun0: no mtu file (unknown)
  auto r = select_interfaces({up_if("eth0", "10.0.0.1", 2), up_if("eth1", "10.0.0.2", 3), up_if("eth2", "10.0.0.3", 4),
                              up_if("lo", "127.0.0.1", 1, true), up_if("tun0", "10.0.0.4", 5)},
                             "eth,lo,tun", kFallbackMbps, root.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(names_of(*r), (std::vector<std::string>{"eth0", "eth1", "eth2", "tun0", "lo"}));
  const std::vector<int> want = {1500, 9000, 4200, 1500, 9000};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(trim::transport::resolve_mtu((*r)[i], trim::kAuto), want[i]) << (*r)[i].name;
    EXPECT_EQ(trim::transport::resolve_mtu((*r)[i], 1400), 1400) << (*r)[i].name;
  }
}

// The transport's lower bound is NCCL_TRIM_MTU's (params.def), so no agreed MTU is below what
// the knob allows.
TEST(Devices, MinMtuIsTheKnobsLowerBound) {
  bool found = false;
  for (const trim::ParamInfo& info : trim::param_infos()) {
    if (std::string(info.env) != "NCCL_TRIM_MTU") continue;
    found = true;
    EXPECT_EQ(info.min, trim::transport::kMinMtuBytes);
    EXPECT_EQ(info.kind, trim::ParamKind::kIntAuto);
  }
  EXPECT_TRUE(found);
}

}  // namespace

// NCCL_TRIM_RX_CUT live (issue 26): through trim-switch --fabric 1 as the TUN router between
// network namespaces (root), a switch that leaves the IPv4 total length or the UDP length of
// what it cuts, and the receivers reading those cuts from a packet socket. The unit tests of
// the parser, the filter and the knob are in cut_rx_test.cc.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/bottleneck_util.h"
#include "tests/live_util.h"

namespace {

using namespace trim::live;

// The same switches, with the receivers reading the cut datagrams their kernel drops from a packet
// socket (NCCL_TRIM_RX_CUT=packet): every cut arrives once, through the packet socket, and is
// decoded as a trim (its head used, the packet not resent), so the NMSE is the native mode's
// at the same surviving bytes and the replicas stay identical; where the switch fixes the
// lengths, the packet socket sees nothing (the UDP socket gets every cut). Knob off (with a fabric trim size, where auto would turn it
// on), the cuts are losses again, repaired, and the result is exact.
TEST(FabricTun, PacketSocketTurnsCutsWithLengthsLeftBackIntoTrims) {
  SKIP_UNLESS_NETNS();
  const BnRun nat = trim_run(false, 256), fixed = trim_run(true, 256, {}, {"NCCL_TRIM_RX_CUT=packet"});
  ASSERT_NE(nat.exit_code, 77) << nat.context();
  ASSERT_EQ(nat.exit_code, 0) << nat.context();
  ASSERT_EQ(fixed.exit_code, 0) << fixed.context();
  EXPECT_EQ(num(fixed.harness, "cut_received"), 0) << "lengths fixed: the kernel delivers every cut, " << fixed.context();
  const double nat_nmse = std::stod(str(nat.harness, "nmse"));
  for (const char* flag : {"--rewrite-ip-length", "--rewrite-udp-length"}) {
    SCOPED_TRACE(flag);
    BnRun r = trim_run(true, 256, {flag, "keep"}, {"NCCL_TRIM_RX_CUT=packet"});
    ASSERT_EQ(r.exit_code, 0) << r.context();
    EXPECT_EQ(str(r.harness, "verify"), "ok") << r.context();
    EXPECT_EQ(str(r.harness, "replicas_identical"), "true") << r.context();
    EXPECT_EQ(num(r.sw, "bad"), 0) << r.context();
    const long long cuts = num(r.sw, "dscp_18_trimmed");
    EXPECT_GT(cuts, 100) << r.context();
    // Each cut read from the packet socket, never more (a cut of a spurious resend may still
    // be on its way when the ranks report: a 1 % allowance), nothing else passed its filter, and
    // each decoded as a trim.
    EXPECT_LE(num(r.harness, "cut_received"), cuts) << r.context();
    EXPECT_GE(num(r.harness, "cut_received"), cuts - cuts / 100) << r.context();
    EXPECT_EQ(num(r.harness, "cut_rejected"), 0) << r.context();
    EXPECT_EQ(num(r.harness, "header_cuts"), 0) << r.context();
    EXPECT_GE(num(r.harness, "trimmed_marked"), cuts - num(r.harness, "dup_packets")) << r.context();
    EXPECT_EQ(num(r.harness, "trimmed_accepted"), num(r.harness, "trimmed_marked")) << r.context();
    // Not resent. Retransmissions whose original had arrived (received as duplicates: spurious,
    // from scheduling noise on a shared host, as many with the lengths fixed) aside, at most a
    // twentieth of the cuts were resent; without the packet socket every cut is (below).
    const long long needed = num(r.harness, "retransmits") - num(r.harness, "dup_packets");
    EXPECT_LE(needed, cuts / 20) << r.context();
    const double nmse = std::stod(str(r.harness, "nmse"));
    std::printf("[ fabric ] %s keep, packet socket: nmse %.4g (native %.4g), %lld cuts, retransmits %lld (%lld "
                "duplicates; fixed lengths %lld)\n",
                flag, nmse, nat_nmse, cuts, num(r.harness, "retransmits"), num(r.harness, "dup_packets"),
                num(fixed.harness, "retransmits"));
    EXPECT_NEAR(nmse, nat_nmse, 0.15 * nat_nmse) << r.context() << nat.context();
  }
  BnRun off = trim_run(true, 256, {"--rewrite-ip-length", "keep"},
                       {"NCCL_TRIM_RX_CUT=off", "NCCL_TRIM_FABRIC_TRIM_BYTES=256"});
  ASSERT_EQ(off.exit_code, 0) << off.context();
  EXPECT_EQ(str(off.harness, "verify"), "exact") << off.context();
  EXPECT_EQ(num(off.harness, "cut_received"), 0) << off.context();
  EXPECT_GT(num(off.sw, "dscp_18_trimmed"), 0) << off.context();
  EXPECT_GT(num(off.harness, "retransmits") - num(off.harness, "dup_packets"), num(off.sw, "dscp_18_trimmed") / 2)
      << off.context();
}

// Mixed traffic through a congested fabric port that leaves the IP length of what it cuts, the
// ranks declaring its trim size (so NCCL_TRIM_RX_CUT=auto opens the packet socket, as root):
// the trims arrive as trims, the exact classes stay bit exact, the replicas identical.
TEST(FabricTun, MixedTrafficWithLengthsLeftStaysExactUnderAuto) {
  SKIP_UNLESS_NETNS();
  BnRun r = mixed_fabric_256_run({"--rewrite-ip-length", "keep"});
  ASSERT_NO_FATAL_FAILURE(expect_mixed_fabric_run_exact(r));
  EXPECT_GT(num(r.harness, "cut_received"), 0) << r.context();
  EXPECT_LE(num(r.harness, "cut_received"), num(r.sw, "dscp_18_trimmed")) << r.context();
  EXPECT_EQ(num(r.harness, "cut_rejected"), 0) << r.context();
  EXPECT_GT(num(r.harness, "trimmed_accepted"), 0) << r.context();
}

}  // namespace

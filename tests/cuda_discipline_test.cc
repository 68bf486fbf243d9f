// The CUDA-call discipline (common/data_path.h, cuda/cuda_calls.h): calls that may wait for the
// device are refused on the data path when enforcement is on; the emulated device declares
// the same classes, so moving setup work onto the data path fails here, on machines without
// a GPU; no source outside the wrapper calls the CUDA runtime directly; and the staging arenas
// that replace per-message pinned allocation behave.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codec/encoder.h"
#include "common/data_path.h"
#include "tests/codec_util.h"
#include "transport/device_codec.h"
#include "transport/staging_arena.h"
#include "tests/test_paths.h"

namespace {

using trim::data_path::CallClass;
namespace dp = trim::data_path;
namespace tr = trim::transport;

// Restores the process-wide switch and counter around a test.
class DataPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    was_enforcing_ = dp::enforcing();
    dp::reset_violations();
  }
  void TearDown() override {
    dp::set_enforce(was_enforcing_);
    dp::reset_violations();
  }
  bool was_enforcing_ = false;
};

TEST_F(DataPathTest, WaitingCallsAreRefusedOnlyOnTheDataPathWithEnforcement) {
  dp::set_enforce(true);
  EXPECT_TRUE(dp::allow(CallClass::kMayWait, "cudaMalloc"));  // setup thread: allowed
  EXPECT_EQ(dp::violations(), 0u);
  {
    const dp::Scope scope;
    EXPECT_TRUE(dp::on_data_path());
    EXPECT_TRUE(dp::allow(CallClass::kNeverWaits, "cudaEventQuery"));
    EXPECT_FALSE(dp::allow(CallClass::kMayWait, "cudaFree"));
    {
      const dp::Scope nested;
      EXPECT_FALSE(dp::allow(CallClass::kMayWait, "cudaStreamSynchronize"));
    }
    EXPECT_TRUE(dp::on_data_path());  // the outer scope still holds
    const dp::OffScope off;
    EXPECT_TRUE(dp::allow(CallClass::kMayWait, "cudaMalloc"));
  }
  EXPECT_FALSE(dp::on_data_path());
  EXPECT_EQ(dp::violations(), 2u);
  EXPECT_NE(dp::last_violation().find("cudaStreamSynchronize on the data path"), std::string::npos);
}

TEST_F(DataPathTest, WithoutEnforcementTheCallRunsButIsCounted) {
  dp::set_enforce(false);
  const dp::Scope scope;
  EXPECT_TRUE(dp::allow(CallClass::kMayWait, "cudaFreeHost"));
  EXPECT_EQ(dp::violations(), 1u);
}

// What the plugin used to do: create the codec and allocate staging when the first message
// arrived, i.e. on the data path. The emulated device refuses both there (as a GPU would hang).
TEST_F(DataPathTest, EmulatedDeviceRefusesSetupWorkOnTheDataPath) {
  dp::set_enforce(true);
  trim::codec::CodecConfig cfg;
  {
    const dp::Scope scope;
    auto codec = tr::make_device_codec(tr::DeviceMode::kEmulated, cfg);
    ASSERT_FALSE(codec.is_ok());
    EXPECT_NE(codec.status().message().find("data path"), std::string::npos) << codec.status().message();
    std::string err;
    EXPECT_EQ(tr::alloc_device_staging(tr::DeviceMode::kEmulated, 4096, &err), nullptr);
    EXPECT_NE(err.find("cudaHostAlloc"), std::string::npos) << err;
  }
  EXPECT_EQ(dp::violations(), 2u);
  // Off the data path (regMr's thread) both work, and the codec's own calls are data-path safe.
  auto codec = tr::make_device_codec(tr::DeviceMode::kEmulated, cfg);
  ASSERT_TRUE(codec.is_ok());
  std::string err;
  auto staging = tr::alloc_device_staging(tr::DeviceMode::kEmulated, 1 << 20, &err);
  ASSERT_NE(staging, nullptr) << err;
  const std::vector<float> x = trim::codec::testing::gaussian(1000, 7);
  auto layout = trim::codec::Layout::make(cfg, trim::codec::DType::kF32, cfg.scheme, x.size() * 4).value();
  std::vector<uint32_t> sizes(layout.packets());
  const dp::Scope scope;
  const auto t = codec.value()->encode_rows(layout, trim::codec::MessageId{1, 0, true}, x.data(), 0, layout.rows(),
                                            staging->data(), cfg.packet_bytes, sizes.data());
  ASSERT_NE(t, 0u) << codec.value()->last_error();
  EXPECT_TRUE(codec.value()->wait_for(t, 1'000'000'000));
  EXPECT_EQ(dp::violations(), 2u);
}

// ---- No CUDA runtime call outside the wrapper ----

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The code with comments and string literals blanked out (an error message may name a call).
std::string code_only(const std::string& s) {
  std::string out = s;
  enum { kCode, kLine, kBlock, kStr, kChar } st = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = s[i];
    const char n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case kCode:
        if (c == '/' && n == '/') st = kLine;
        else if (c == '/' && n == '*') st = kBlock;
        else if (c == '"') st = kStr;
        else if (c == '\'') st = kChar;
        continue;
      case kLine:
        if (c == '\n') st = kCode;
        break;
      case kBlock:
        if (c == '*' && n == '/') {
          out[i] = ' ';
          out[++i] = ' ';
          st = kCode;
          continue;
        }
        break;
      case kStr:
      case kChar:
        if (c == '\\') {
          out[i] = ' ';
          if (i + 1 < out.size()) out[++i] = ' ';
          continue;
        }
        if (c == (st == kStr ? '"' : '\'')) {
          st = kCode;
          continue;
        }
        break;
    }
    if (out[i] != '\n') out[i] = ' ';
  }
  return out;
}

// The first call of a CUDA runtime function (cudaXxx followed by "(") in code, or "".
// (Hand-written: std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers.)
std::string find_cuda_call(const std::string& code) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  for (size_t i = code.find("cuda"); i != std::string::npos; i = code.find("cuda", i + 1)) {
    if (i > 0 && word(code[i - 1])) continue;
    size_t j = i + 4;
    if (j >= code.size() || !std::isupper(static_cast<unsigned char>(code[j]))) continue;
    while (j < code.size() && word(code[j])) ++j;
    size_t k = j;
    while (k < code.size() && std::isspace(static_cast<unsigned char>(code[k]))) ++k;
    if (k < code.size() && code[k] == '(') return code.substr(i, j - i);
  }
  return "";
}

TEST(CudaDiscipline, OnlyTheWrapperCallsTheRuntime) {
  const std::filesystem::path root = trim::testing::source_dir();
  int scanned = 0;
  std::vector<std::string> offenders;
  for (const char* dir : {"common", "codec", "cuda", "transport", "plugin", "tools", "switch_sim"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = std::filesystem::relative(e.path(), root).string();
      if (rel == "cuda/cuda_calls.h") continue;
      ++scanned;
      const std::string code = code_only(read_file(e.path()));
      const std::string call = find_cuda_call(code);
      if (!call.empty()) offenders.push_back(rel + ": " + call);
      // Launches: the codec's one launcher, and the test spin kernel (harness only).
      if (rel != "cuda/row_block.cuh" && rel != "cuda/spin.cu" && code.find("<<<") != std::string::npos) {
        offenders.push_back(rel + ": kernel launch outside the launchers");
      }
    }
  }
  EXPECT_GT(scanned, 50);
  EXPECT_TRUE(offenders.empty()) << "direct CUDA runtime calls (use cuda/cuda_calls.h):\n"
                                 << ::testing::PrintToString(offenders);
}

TEST(CudaDiscipline, TheScannerSeesCallsButNotCommentsOrStrings) {
  EXPECT_EQ(find_cuda_call(code_only("x = cudaFree(p);")), "cudaFree");
  EXPECT_EQ(find_cuda_call(code_only("x = cudaStreamSynchronize (s);")), "cudaStreamSynchronize");
  EXPECT_EQ(find_cuda_call(code_only("// cudaFree(p)\n")), "");
  EXPECT_EQ(find_cuda_call(code_only("/* cudaMalloc(p) */ int a;")), "");
  EXPECT_EQ(find_cuda_call(code_only("f(\"cudaSetDevice(\" + s);")), "");
  EXPECT_EQ(find_cuda_call(code_only("cudaStream_t s; my_cudaFree(p); cudaSuccess;")), "");
  EXPECT_EQ(find_cuda_call(code_only("f(\"a\\\"\"); cudaMemcpy(a, b, n, k);")), "cudaMemcpy");
}

// ---- Staging arenas ----

// Host staging as the emulated device allocates it (off the data path here).
std::unique_ptr<tr::StagingBuffer> host_staging(size_t bytes) {
  std::string err;
  return tr::alloc_device_staging(tr::DeviceMode::kEmulated, bytes, &err);
}

TEST(StagingArena, FirstFitAlignedAndCoalesced) {
  tr::StagingArena a(host_staging(64 * 100 + 63));
  const size_t cap = a.capacity();
  uint8_t* p1 = a.alloc(100);
  uint8_t* p2 = a.alloc(64 * 10);
  uint8_t* p3 = a.alloc(1);
  ASSERT_NE(p1, nullptr);
  ASSERT_NE(p2, nullptr);
  ASSERT_NE(p3, nullptr);
  for (uint8_t* p : {p1, p2, p3}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(p2 - p1, 128);  // 100 rounds up to two cache lines
  EXPECT_EQ(a.in_use(), 128u + 640u + 64u);
  EXPECT_EQ(a.alloc(cap), nullptr);  // no span that large while others are out
  a.free(p2);
  a.free(p1);  // coalesces with p2's span: 768 bytes at the start
  uint8_t* big = a.alloc(768);
  EXPECT_EQ(big, p1);
  a.free(big);
  a.free(p3);
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(a.spans_in_use(), 0u);
  EXPECT_NE(a.alloc(64 * 100), nullptr);  // everything coalesced back into one span
}

TEST(DeviceStaging, LeasesByRegionRetireUntilTheirWorkIsDone) {
  trim::codec::CodecConfig cfg;
  tr::DeviceStaging dev;
  dev.set_codec(tr::make_device_codec(tr::DeviceMode::kEmulated, cfg).value());
  std::vector<uint8_t> region(1 << 16);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(region.data());
  dev.add_region(lo, lo + region.size(), std::make_unique<tr::StagingArena>(host_staging(8192)));

  auto outside = dev.lease(region.data() + region.size(), 64);
  EXPECT_FALSE(outside.is_ok());  // not in a registered region: an error, not a wait
  auto huge = dev.lease(region.data(), 1 << 20);
  EXPECT_FALSE(huge.is_ok());  // can never fit: an error naming the sizes
  auto a = dev.lease(region.data(), 6000);
  ASSERT_TRUE(a.is_ok() && *a);
  auto b = dev.lease(region.data() + 100, 6000);
  ASSERT_TRUE(b.is_ok());
  EXPECT_FALSE(*b);  // arena busy: empty, the caller retries later

  // A lease whose device work is still queued comes back only once that work is done.
  const std::vector<float> x = trim::codec::testing::gaussian(256, 3);
  auto layout = trim::codec::Layout::make(cfg, trim::codec::DType::kF32, cfg.scheme, x.size() * 4).value();
  std::vector<uint32_t> sizes(layout.packets());
  const auto t = dev.codec()->encode_rows(layout, trim::codec::MessageId{1, 0, true}, x.data(), 0, 1, a->data(),
                                          cfg.packet_bytes, sizes.data());
  ASSERT_NE(t, 0u);
  dev.retire(std::move(a).value(), t);
  EXPECT_TRUE(dev.has_retired());
  bool busy = false;
  EXPECT_EQ(dev.take_region(lo, lo + region.size(), &busy), nullptr);
  EXPECT_TRUE(busy);  // deregMr must wait: the device may still write there
  for (int i = 0; i < 10 && dev.has_retired(); ++i) dev.poll_retired();
  EXPECT_FALSE(dev.has_retired());
  EXPECT_TRUE(dev.device_idle());
  auto c = dev.lease(region.data(), 6000);
  ASSERT_TRUE(c.is_ok() && *c);  // the span is free again
  c.value().reset();
  EXPECT_NE(dev.take_region(lo, lo + region.size(), &busy), nullptr);
  EXPECT_FALSE(busy);
}

TEST(DeviceStaging, SizingCoversTheRegionAndAChunk) {
  trim::codec::CodecConfig cfg;
  for (uint32_t packet_bytes : {1472u, 4068u, 8972u}) {
    cfg.packet_bytes = packet_bytes;
    const uint64_t region = 4u << 20;
    // Raw bytes need the most packets per byte of message; the arena holds them all.
    const auto raw = trim::codec::Layout::make(cfg, trim::codec::DType::kRaw, trim::codec::Scheme::kNone, region).value();
    EXPECT_GE(tr::device_staging_bytes(cfg, region), raw.packets() * packet_bytes);
    // One call's scratch holds a chunk of rows of any dtype.
    for (auto d : {trim::codec::DType::kRaw, trim::codec::DType::kF32, trim::codec::DType::kBF16}) {
      const auto scheme = d == trim::codec::DType::kRaw ? trim::codec::Scheme::kNone : cfg.scheme;
      const auto l = trim::codec::Layout::make(cfg, d, scheme, region).value();
      const uint32_t rows = std::min(l.rows(), tr::device_rows_per_chunk(l));
      uint64_t n = 0;
      for (uint32_t r = 0; r < rows; ++r) n += l.row(r).packets;
      EXPECT_LE(n, tr::device_max_call_packets(cfg)) << packet_bytes;
    }
  }
}

}  // namespace

// trim::log: what the plugin's NCCL forwarder relies on (every passing line reaches the
// forwarder with its level, source and text; the level filter drops the rest) and the names
// NCCL_TRIM_LOG_LEVEL accepts.
#include "common/log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using trim::log::Level;

struct Captured {
  Level level;
  std::string file;
  int line;
  std::string msg;
};

void capture(void* ctx, Level level, const char* file, int line, const char* msg) {
  static_cast<std::vector<Captured>*>(ctx)->push_back(Captured{level, file == nullptr ? "" : file, line, msg});
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_level_ = trim::log::level();
    trim::log::set_forward(&capture, &lines_);
  }
  void TearDown() override {
    trim::log::set_forward(nullptr, nullptr);
    trim::log::set_level(saved_level_);
  }

  std::vector<Captured> lines_;
  Level saved_level_ = Level::kInfo;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST_F(LogTest, ForwardsLevelTextAndSource) {
  trim::log::set_level(Level::kDebug);
  const int line = __LINE__ + 1;
  TRIM_INFO("hello {} from {}", 42, "test");
  TRIM_DEBUG("d");
  TRIM_WARN("w");
  TRIM_ERROR("e");
  ASSERT_EQ(lines_.size(), 4u);
  EXPECT_EQ(lines_[0].level, Level::kInfo);
  EXPECT_EQ(lines_[0].msg, "hello 42 from test");
  EXPECT_TRUE(ends_with(lines_[0].file, "log_test.cc")) << lines_[0].file;
  EXPECT_EQ(lines_[0].line, line);
  EXPECT_EQ(lines_[1].level, Level::kDebug);
  EXPECT_EQ(lines_[2].level, Level::kWarn);
  EXPECT_EQ(lines_[2].msg, "w");
  EXPECT_EQ(lines_[3].level, Level::kError);
}

// The forwarder hands NCCL's printf-style logger "%s" + text, so '%' must arrive untouched.
TEST_F(LogTest, PercentSignsPassThrough) {
  trim::log::set_level(Level::kInfo);
  TRIM_INFO("100% of {}%d", 3);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].msg, "100% of 3%d");
}

TEST_F(LogTest, LevelFilterDropsLowerLevels) {
  trim::log::set_level(Level::kWarn);
  EXPECT_FALSE(trim::log::enabled(Level::kInfo));
  EXPECT_TRUE(trim::log::enabled(Level::kWarn));
  TRIM_DEBUG("dropped");
  TRIM_INFO("dropped");
  TRIM_WARN("kept warn");
  TRIM_ERROR("kept error");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[0].msg, "kept warn");
  EXPECT_EQ(lines_[1].msg, "kept error");

  lines_.clear();
  trim::log::set_level(Level::kOff);
  EXPECT_EQ(trim::log::level(), Level::kOff);
  TRIM_ERROR("dropped too");
  EXPECT_TRUE(lines_.empty());
}

TEST_F(LogTest, NullForwardRestoresStderr) {
  trim::log::set_level(Level::kInfo);
  trim::log::set_forward(nullptr, nullptr);
  ::testing::internal::CaptureStderr();
  TRIM_WARN("to stderr {}", 7);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(lines_.empty());
  EXPECT_NE(err.find("to stderr 7"), std::string::npos) << err;
}

TEST(LogLevelTest, ParseLevelAcceptsEveryName) {
  const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 6; ++i) {
    trim::Result<Level> parsed = trim::log::parse_level(names[i]);
    ASSERT_TRUE(parsed.is_ok()) << names[i];
    EXPECT_EQ(static_cast<int>(*parsed), i) << names[i];
    EXPECT_STREQ(trim::log::level_name(*parsed), names[i]);
  }
}

TEST(LogLevelTest, ParseLevelRejectsUnknownName) {
  trim::Result<Level> parsed = trim::log::parse_level("verbose");
  ASSERT_FALSE(parsed.is_ok());
  EXPECT_EQ(parsed.status().code(), trim::Code::kBadConfig);
  EXPECT_NE(parsed.status().message().find("verbose"), std::string::npos);
  EXPECT_NE(parsed.status().message().find("trace|debug|info|warn|error|off"), std::string::npos)
      << parsed.status().message();
  EXPECT_FALSE(trim::log::parse_level("").is_ok());
}

// TRIM_TRACE type-checks everywhere but only exists in TRIM_ENABLE_TRACE (make DEBUG=1) builds;
// elsewhere even its arguments are not evaluated.
TEST_F(LogTest, TraceOnlyInTraceBuilds) {
  trim::log::set_level(Level::kTrace);
  int evaluated = 0;
  TRIM_TRACE("trace {}", ++evaluated);
#ifdef TRIM_ENABLE_TRACE
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].level, Level::kTrace);
  EXPECT_EQ(lines_[0].msg, "trace 1");
  EXPECT_EQ(evaluated, 1);
#else
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(evaluated, 0);
#endif
}

}  // namespace

// NCCL_TRIM_* parsing: defaults parse, bad values are rejected with a message naming the
// variable, the value and the rule, valid overrides land in the right field, and
// docs/CONFIG.md matches the list. Values are injected through a map, not the environment,
// except where the environment itself is the subject (unknown-variable warnings).
#include "common/params.h"

#include <gtest/gtest.h>

#include "common/param_enums.h"
#include "tests/env_guard.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "codec/layout.h"
#include "tests/test_paths.h"

namespace {

using trim::ParamInfo;
using trim::ParamKind;
using trim::Params;

trim::Result<Params> load(const std::map<std::string, std::string>& env) {
  return trim::load_params([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

const ParamInfo& info_of(const std::string& env) {
  for (const ParamInfo& info : trim::param_infos()) {
    if (env == info.env) return info;
  }
  ADD_FAILURE() << "no knob " << env;
  return trim::param_infos().front();
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

using trim::testing::EnvGuard;

TEST(ParamsTest, EveryDefaultParses) {
  ASSERT_FALSE(trim::param_infos().empty());
  for (const ParamInfo& info : trim::param_infos()) {
    trim::Status st = trim::check_param_text(info, info.default_text);
    EXPECT_TRUE(st.is_ok()) << info.env << ": " << st.to_string();
  }
  trim::Result<Params> p = load({});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->mtu, trim::kAuto);  // resolved per interface and connection by the transport
  EXPECT_EQ(p->codec_threads, trim::kAuto);
  EXPECT_EQ(p->log_level, static_cast<int>(trim::log::Level::kInfo));
}

// "auto" or an integer in range; anything else names the variable and both forms.
TEST(ParamsTest, IntOrAutoKnobs) {
  for (const char* v : {"auto", "AUTO", "0", "17", "64"}) {
    trim::Result<Params> p = load({{"NCCL_TRIM_CODEC_THREADS", v}});
    ASSERT_TRUE(p.is_ok()) << v << ": " << p.status().to_string();
  }
  EXPECT_EQ(load({{"NCCL_TRIM_CODEC_THREADS", "auto"}})->codec_threads, trim::kAuto);
  EXPECT_EQ(load({{"NCCL_TRIM_CODEC_THREADS", "0"}})->codec_threads, 0);
  EXPECT_EQ(load({{"NCCL_TRIM_MTU", "1500"}})->mtu, 1500);
  for (const char* v : {"65", "-1", "automatic", "", "2x"}) {
    trim::Result<Params> p = load({{"NCCL_TRIM_CODEC_THREADS", v}});
    ASSERT_FALSE(p.is_ok()) << v;
    EXPECT_NE(p.status().message().find("NCCL_TRIM_CODEC_THREADS"), std::string::npos);
    EXPECT_NE(p.status().message().find("auto or an integer in [0, 64]"), std::string::npos) << p.status().to_string();
  }
}

// NCCL_TRIM_MTU: auto (the default; the transport resolves it per device, then per connection)
// or an explicit IP MTU in [256, 65535]; the codec packet is the MTU less 28 bytes of IPv4 + UDP.
TEST(ParamsTest, MtuIsAutoOrAnExplicitIpMtu) {
  for (const char* v : {"auto", "Auto", "256", "1500", "9000", "65535"}) {
    trim::Result<Params> p = load({{"NCCL_TRIM_MTU", v}});
    ASSERT_TRUE(p.is_ok()) << v << ": " << p.status().to_string();
  }
  EXPECT_EQ(load({{"NCCL_TRIM_MTU", "AUTO"}})->mtu, trim::kAuto);
  EXPECT_EQ(load({{"NCCL_TRIM_MTU", "256"}})->mtu, 256);
  EXPECT_EQ(load({{"NCCL_TRIM_MTU", "65535"}})->mtu, 65535);
  for (const char* v : {"255", "65536", "-1", "0", "automatic", ""}) {
    trim::Result<Params> p = load({{"NCCL_TRIM_MTU", v}});
    ASSERT_FALSE(p.is_ok()) << v;
    EXPECT_NE(p.status().message().find("NCCL_TRIM_MTU='" + std::string(v) + "'"), std::string::npos)
        << p.status().to_string();
    EXPECT_NE(p.status().message().find("auto or an integer in [256, 65535]"), std::string::npos)
        << p.status().to_string();
  }
  using trim::codec::CodecConfig;
  // Explicit: its packet size. auto without an interface (tools): the documented stand-in.
  EXPECT_EQ(CodecConfig::from_params(*load({{"NCCL_TRIM_MTU", "9000"}}))->packet_bytes, 8972u);
  EXPECT_EQ(CodecConfig::from_params(*load({}))->packet_bytes, trim::codec::kNoInterfaceMtuBytes - 28);
  // The transport gives the MTU a connection agreed on, whatever the knob says.
  EXPECT_EQ(CodecConfig::from_params(*load({{"NCCL_TRIM_MTU", "9000"}}), 1500)->packet_bytes, 1472u);
  EXPECT_EQ(CodecConfig::from_params(*load({}), 256)->packet_bytes, 228u);
  for (uint32_t mtu : {0u, 28u, 100u}) {  // no codec packet fits: refused, never wrapped around
    trim::Result<CodecConfig> c = CodecConfig::from_params(*load({}), mtu);
    ASSERT_FALSE(c.is_ok()) << mtu;
    EXPECT_NE(c.status().message().find("packet_bytes"), std::string::npos) << c.status().to_string();
  }
}

TEST(ParamsTest, LookupIsAskedForEveryKnob) {
  std::set<std::string> asked;
  trim::Result<Params> p = trim::load_params([&asked](const char* name) -> const char* {
    asked.insert(name);
    return nullptr;
  });
  ASSERT_TRUE(p.is_ok());
  std::set<std::string> expected;
  for (const ParamInfo& info : trim::param_infos()) expected.insert(info.env);
  EXPECT_EQ(asked, expected);
}

TEST(ParamsTest, BadValuesNameVariableValueAndRule) {
  struct Case {
    const char* env;
    const char* value;
    const char* rule;
  };
  const Case cases[] = {
      {"NCCL_TRIM_ROW_ELEMS", "1000", "power of two in [8, 32768]"},
      {"NCCL_TRIM_ROW_ELEMS", "4", "power of two in [8, 32768]"},
      {"NCCL_TRIM_ROW_ELEMS", "65536", "power of two in [8, 32768]"},
      {"NCCL_TRIM_SCHEME", "foo", "one of none|sign|sq|sd|rht"},
      {"NCCL_TRIM_HEAD_BITS", "8", "one of 1|2|16"},
      {"NCCL_TRIM_MTU", "99999", "an integer in [256, 65535]"},
      {"NCCL_TRIM_MTU", "1500x", "an integer in [256, 65535]"},
      {"NCCL_TRIM_MTU", "12", "an integer in [256, 65535]"},
      {"NCCL_TRIM_CLIP_SIGMAS", "nan", "a number in [0.25, 64]"},
      {"NCCL_TRIM_CLIP_SIGMAS", "inf", "a number in [0.25, 64]"},
      {"NCCL_TRIM_CLIP_SIGMAS", "0.1", "a number in [0.25, 64]"},
      {"NCCL_TRIM_SEED", "-1", "unsigned 64-bit integer"},
      {"NCCL_TRIM_SEED", "0x1ffffffffffffffff", "unsigned 64-bit integer"},
      {"NCCL_TRIM_SEED", "12abc", "unsigned 64-bit integer"},
      {"NCCL_TRIM_LOG_LEVEL", "verbose", "one of trace|debug|info|warn|error|off"},
  };
  for (const Case& c : cases) {
    trim::Result<Params> p = load({{c.env, c.value}});
    ASSERT_FALSE(p.is_ok()) << c.env << "=" << c.value << " was accepted";
    const std::string msg = p.status().message();
    EXPECT_EQ(p.status().code(), trim::Code::kBadConfig) << msg;
    EXPECT_NE(msg.find(c.env), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + c.value + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.rule), std::string::npos) << msg;
    // The same rule applies through check_param_text.
    EXPECT_FALSE(trim::check_param_text(info_of(c.env), c.value).is_ok()) << c.env << "=" << c.value;
  }
}

// The DSCP knobs: 0..63 each; the trimmable and the trimmed class differ from every other (a
// switch trims by DSCP, the receiver takes the trimmed value for a trim); exact and control may
// share one.
TEST(ParamsTest, DscpClassesAreValidatedAndKeptApart) {
  const Params d = load({}).value();
  EXPECT_EQ(d.dscp_trimmable, 18);
  EXPECT_EQ(d.dscp_exact, 0);
  EXPECT_EQ(d.dscp_control, 48);
  EXPECT_EQ(d.dscp_trimmed, 11);
  EXPECT_EQ(d.fabric_trim_bytes, 0);
  for (const char* name : {"NCCL_TRIM_DSCP_TRIMMABLE", "NCCL_TRIM_DSCP_EXACT", "NCCL_TRIM_DSCP_CONTROL",
                           "NCCL_TRIM_DSCP_TRIMMED"}) {
    for (const char* bad : {"64", "-1", "af21"}) {
      trim::Result<Params> r = load({{name, bad}});
      ASSERT_FALSE(r.is_ok()) << name << "=" << bad;
      EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().to_string();
    }
  }
  struct Clash {
    std::map<std::string, std::string> env;
    const char* named;
  };
  const Clash clashes[] = {
      {{{"NCCL_TRIM_DSCP_TRIMMABLE", "0"}}, "NCCL_TRIM_DSCP_EXACT"},
      {{{"NCCL_TRIM_DSCP_TRIMMED", "18"}}, "NCCL_TRIM_DSCP_TRIMMABLE"},
      {{{"NCCL_TRIM_DSCP_TRIMMED", "48"}}, "NCCL_TRIM_DSCP_CONTROL"},
      {{{"NCCL_TRIM_DSCP_CONTROL", "18"}}, "NCCL_TRIM_DSCP_CONTROL"},
  };
  for (const Clash& c : clashes) {
    trim::Result<Params> r = load(c.env);
    ASSERT_FALSE(r.is_ok()) << c.named;
    EXPECT_NE(r.status().message().find(c.named), std::string::npos) << r.status().to_string();
  }
  EXPECT_TRUE(load({{"NCCL_TRIM_DSCP_CONTROL", "0"}}).is_ok()) << "exact and control may share a class";
  const Params f = load({{"NCCL_TRIM_FABRIC_TRIM_BYTES", "206"}, {"NCCL_TRIM_DSCP_TRIMMED", "21"}}).value();
  EXPECT_EQ(f.fabric_trim_bytes, 206);
  EXPECT_EQ(f.dscp_trimmed, 21);
  EXPECT_FALSE(load({{"NCCL_TRIM_FABRIC_TRIM_BYTES", "9217"}}).is_ok());
}

TEST(ParamsTest, EmptyStringsAreRejected) {
  for (const ParamInfo& info : trim::param_infos()) {
    if (info.kind == ParamKind::kString) continue;  // free text may be empty
    trim::Result<Params> p = load({{info.env, ""}});
    ASSERT_FALSE(p.is_ok()) << info.env << "='' was accepted";
    EXPECT_NE(p.status().message().find(info.env), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find("''"), std::string::npos) << p.status().message();
  }
}

TEST(ParamsTest, ValidOverridesTakeEffect) {
  trim::Result<Params> p = load({{"NCCL_TRIM_SCHEME", "sign"},
                                 {"NCCL_TRIM_MTU", "1500"},
                                 {"NCCL_TRIM_ROW_ELEMS", "1024"},
                                 {"NCCL_TRIM_SEED", "0xff"},
                                 {"NCCL_TRIM_CLIP_SIGMAS", "3"},
                                 {"NCCL_TRIM_HEAD_BITS", "16"},
                                 {"NCCL_TRIM_LOG_LEVEL", "debug"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->scheme, 1);
  EXPECT_EQ(p->mtu, 1500);
  EXPECT_EQ(trim::codec::CodecConfig::from_params(*p)->packet_bytes, 1472u);
  EXPECT_EQ(p->row_elems, 1024);
  EXPECT_EQ(p->seed, 0xffu);
  EXPECT_DOUBLE_EQ(p->clip_sigmas, 3.0);
  EXPECT_EQ(trim::param::head_bits(*p), trim::param::HeadBits::k16);
  EXPECT_EQ(p->log_level, static_cast<int>(trim::log::Level::kDebug));

  trim::Result<Params> q = load({{"NCCL_TRIM_MTU", "9000"},
                                 {"NCCL_TRIM_ROW_ELEMS", "8"},
                                 {"NCCL_TRIM_SEED", "18446744073709551615"},
                                 {"NCCL_TRIM_CLIP_SIGMAS", "0.25"}});
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->mtu, 9000);
  EXPECT_EQ(q->row_elems, 8);
  EXPECT_EQ(q->seed, UINT64_MAX);
  EXPECT_DOUBLE_EQ(q->clip_sigmas, 0.25);
}

TEST(ParamsTest, EnumMatchingIsCaseInsensitive) {
  trim::Result<Params> p = load({{"NCCL_TRIM_SCHEME", "SIGN"}, {"NCCL_TRIM_LOG_LEVEL", "Warn"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->scheme, 1);
  EXPECT_EQ(p->log_level, static_cast<int>(trim::log::Level::kWarn));
  trim::Result<Params> q = load({{"NCCL_TRIM_SCHEME", "Rht"}});
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->scheme, 4);
}

// The plugin turns params.log_level into a trim::log::Level with a cast: the choices must be
// listed in Level order.
TEST(ParamsTest, LogLevelChoicesFollowLevelOrder) {
  std::vector<std::string> choices = split(info_of("NCCL_TRIM_LOG_LEVEL").choices, '|');
  ASSERT_EQ(choices.size(), static_cast<size_t>(trim::log::Level::kOff) + 1);
  for (size_t i = 0; i < choices.size(); ++i) {
    trim::Result<trim::log::Level> level = trim::log::parse_level(choices[i]);
    ASSERT_TRUE(level.is_ok()) << choices[i];
    EXPECT_EQ(static_cast<size_t>(*level), i) << choices[i];
  }
}

// A typo is warned about; a knob is not, nor NCCL_TRIM_LIB_DIR, which the Python package reads
// in the processes that load the plugin. NCCL_TRIM_GPU is no knob any more (host buffers only).
TEST(ParamsTest, UnknownTrimVariableInEnvironmentIsWarned) {
  EnvGuard typo("NCCL_TRIM_FOO", "1");
  EnvGuard known("NCCL_TRIM_MTU", "1500");
  EnvGuard lib_dir("NCCL_TRIM_LIB_DIR", "/tmp/lib");
  EnvGuard gpu("NCCL_TRIM_GPU", "on");
  std::vector<std::string> warnings;
  trim::Result<Params> p = trim::load_params_from_env(&warnings);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->mtu, 1500);
  int foo = 0, gpu_warned = 0;
  for (const std::string& w : warnings) {
    if (w.find("NCCL_TRIM_FOO") != std::string::npos) ++foo;
    if (w.find("NCCL_TRIM_GPU") != std::string::npos) ++gpu_warned;
    EXPECT_EQ(w.find("NCCL_TRIM_MTU"), std::string::npos) << "known variable warned about: " << w;
    EXPECT_EQ(w.find("NCCL_TRIM_LIB_DIR"), std::string::npos) << "the Python package's variable warned about: " << w;
  }
  EXPECT_EQ(foo, 1);
  EXPECT_EQ(gpu_warned, 1);
  for (const ParamInfo& info : trim::param_infos()) {
    EXPECT_STRNE(info.env, "NCCL_TRIM_LIB_DIR") << "not a plugin knob";
    EXPECT_STRNE(info.env, "NCCL_TRIM_GPU") << "removed with the GPU-buffer path";
  }
}

// A file generated from the params list (`make docs`) must equal what the list generates now.
void expect_generated(const std::string& relative_path, const std::string& expected, const char* flag) {
  const std::string path = trim::testing::source_dir() + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path << " is missing: run `make docs`";
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == expected) << path << " is stale (it must equal trim-config " << flag << "): run `make docs`";
}

TEST(ParamsTest, EnumHeaderMatchesParams) {
  expect_generated("common/param_enums.h", trim::params_enum_header(), "--enums");
}

TEST(ParamsTest, ConfigDocMatchesParams) { expect_generated("docs/CONFIG.md", trim::params_markdown(), "--markdown"); }

}  // namespace

// One load per process, shared by the plugin, the transport and the tuner; loaded again only
// when the NCCL_TRIM_* environment changed, and its warnings handed out once.
TEST(ParamsTest, ProcessParamsLoadOnceAndReloadWhenTheEnvironmentChanges) {
  trim::testing::EnvGuard mtu("NCCL_TRIM_MTU", "1500");
  trim::testing::EnvGuard typo("NCCL_TRIM_TYPO_FOR_TEST", "1");
  std::vector<std::string> w1, w2;
  trim::Result<Params> a = trim::process_params(&w1);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->mtu, 1500);
  trim::Result<Params> b = trim::process_params(&w2);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->mtu, 1500);
  const auto mentions_typo = [](const std::vector<std::string>& w) {
    for (const std::string& s : w) {
      if (s.find("NCCL_TRIM_TYPO_FOR_TEST") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(mentions_typo(w1));  // a new environment: loaded, the typo reported
  EXPECT_TRUE(w2.empty());          // the same environment: no reload, nothing new to report
  {
    trim::testing::EnvGuard other("NCCL_TRIM_MTU", "9000");
    std::vector<std::string> w3;
    trim::Result<Params> c = trim::process_params(&w3);
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->mtu, 9000);
    EXPECT_TRUE(mentions_typo(w3));  // a reload reports the typo again
    trim::testing::EnvGuard bad("NCCL_TRIM_MTU", "12");
    EXPECT_FALSE(trim::process_params().is_ok());  // a bad value is an error, not a stale load
  }
  EXPECT_EQ(trim::process_params()->mtu, 1500);
}

// The built plugin as NCCL sees it: dlopen the .so, look the tables up by name, call through
// them. Until the transport exists every init must fail loudly (never fake success) and every
// other entry point must answer with an error code instead of crashing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "tests/env_guard.h"
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plugin/nccl_net.h"
#include "tests/test_paths.h"

namespace {

// ---- A logger NCCL-style: printf format, captured lines ----

struct LogLine {
  ncclDebugLogLevel level;
  unsigned long flags;
  std::string text;
};

std::mutex g_lines_mutex;
std::vector<LogLine> g_lines;

void capture_logger(ncclDebugLogLevel level, unsigned long flags, const char* /*file*/, int /*line*/,
                    const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_lines_mutex);
  g_lines.push_back(LogLine{level, flags, buf});
}

std::vector<LogLine> take_lines() {
  std::lock_guard<std::mutex> lock(g_lines_mutex);
  std::vector<LogLine> out;
  out.swap(g_lines);
  return out;
}

// The first line of `level` containing every needle, if any.
std::optional<LogLine> find_line(const std::vector<LogLine>& lines, int level,
                                 std::initializer_list<const char*> needles) {
  for (const LogLine& l : lines) {
    if (l.level != level) continue;
    bool all = true;
    for (const char* n : needles) all = all && l.text.find(n) != std::string::npos;
    if (all) return l;
  }
  return std::nullopt;
}
std::optional<LogLine> find_warn(const std::vector<LogLine>& lines, std::initializer_list<const char*> needles) {
  return find_line(lines, NCCL_LOG_WARN, needles);
}
std::optional<LogLine> find_info(const std::vector<LogLine>& lines, std::initializer_list<const char*> needles) {
  return find_line(lines, NCCL_LOG_INFO, needles);
}

std::string dump(const std::vector<LogLine>& lines) {
  std::string out;
  for (const LogLine& l : lines) out += "  [" + std::to_string(l.level) + "] " + l.text + "\n";
  return out.empty() ? "  (no lines)\n" : out;
}

using trim::testing::EnvGuard;

std::string run_command(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe.get()) != nullptr) out += buf;
  return out;
}

// Names in `nm` output ("ADDR TYPE NAME" per line).
std::vector<std::string> nm_names(const std::string& args) {
  std::vector<std::string> names;
  std::string out = run_command("nm " + args + " '" + trim::testing::plugin_path() + "' 2>/dev/null");
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(pos, end - pos);
    size_t sp = line.rfind(' ');
    if (sp != std::string::npos) names.push_back(line.substr(sp + 1));
    pos = end + 1;
  }
  return names;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

class PluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The device list is discovered once per process: pin it to loopback, which every machine has.
    setenv("NCCL_TRIM_IFNAME", "lo", 1);
    handle_ = dlopen(trim::testing::plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) open_error_ = dlerror();
  }
  // No dlclose: unloading would orphan the plugin's never-freed singletons (the logger state
  // is kept alive on purpose for exit-time logging) and LeakSanitizer would report them.
  void SetUp() override {
    ASSERT_NE(handle_, nullptr) << "dlopen(" << trim::testing::plugin_path() << ") failed: " << open_error_
                                << " (build it: make build-plugin/lib/libnccl-net-trim.so)";
    v8_ = static_cast<ncclNet_v8_t*>(dlsym(handle_, "ncclNetPlugin_v8"));
    v9_ = static_cast<ncclNet_v9_t*>(dlsym(handle_, "ncclNetPlugin_v9"));
    v10_ = static_cast<ncclNet_v10_t*>(dlsym(handle_, "ncclNetPlugin_v10"));
    v11_ = static_cast<ncclNet_v11_t*>(dlsym(handle_, "ncclNetPlugin_v11"));
    v12_ = static_cast<ncclNet_v12_t*>(dlsym(handle_, "ncclNetPlugin_v12"));
    ASSERT_NE(v8_, nullptr);
    ASSERT_NE(v9_, nullptr);
    ASSERT_NE(v10_, nullptr);
    ASSERT_NE(v11_, nullptr);
    ASSERT_NE(v12_, nullptr) << "NCCL 2.30+ looks for ncclNetPlugin_v12 first";
    take_lines();
  }

  static void* handle_;
  static std::string open_error_;
  ncclNet_v8_t* v8_ = nullptr;
  ncclNet_v9_t* v9_ = nullptr;
  ncclNet_v10_t* v10_ = nullptr;
  ncclNet_v11_t* v11_ = nullptr;
  ncclNet_v12_t* v12_ = nullptr;
};

void* PluginTest::handle_ = nullptr;
std::string PluginTest::open_error_;

// Calls every table has with the same signature (v8 types where they differ).
template <typename Table>
void expect_required_calls(const Table* t) {
  EXPECT_STREQ(t->name, "Trim");
  EXPECT_NE(t->init, nullptr);
  EXPECT_NE(t->devices, nullptr);
  EXPECT_NE(t->getProperties, nullptr);
  EXPECT_NE(t->listen, nullptr);
  EXPECT_NE(t->connect, nullptr);
  EXPECT_NE(t->accept, nullptr);
  EXPECT_NE(t->regMr, nullptr);
  EXPECT_NE(t->deregMr, nullptr);
  EXPECT_NE(t->isend, nullptr);
  EXPECT_NE(t->irecv, nullptr);
  EXPECT_NE(t->iflush, nullptr);
  EXPECT_NE(t->test, nullptr);
  EXPECT_NE(t->closeSend, nullptr);
  EXPECT_NE(t->closeRecv, nullptr);
  EXPECT_NE(t->closeListen, nullptr);
  // We report NCCL_NET_DEVICE_HOST: the device-offload hooks must be absent, not stubs.
  EXPECT_EQ(t->getDeviceMr, nullptr);
  EXPECT_EQ(t->irecvConsumed, nullptr);
}

// v9 added makeVDevice: null, as we have no virtual NICs (NCCL then uses the physical devices
// as they are).
template <typename Table>
void expect_v9_calls(const Table* t) {
  expect_required_calls(t);
  EXPECT_EQ(t->makeVDevice, nullptr);
}

// v11 added finalize and setNetAttr.
template <typename Table>
void expect_v11_calls(const Table* t) {
  expect_v9_calls(t);
  EXPECT_NE(t->finalize, nullptr);
  EXPECT_NE(t->setNetAttr, nullptr);
}

TEST_F(PluginTest, ExportsFiveVersionsNamedTrim) {
  expect_required_calls(v8_);
  expect_v9_calls(v9_);
  expect_v9_calls(v10_);
  expect_v11_calls(v11_);
  expect_v11_calls(v12_);
}

TEST_F(PluginTest, ExportsNothingButPluginTables) {
  std::vector<std::string> exported = nm_names("-D --defined-only");
  ASSERT_FALSE(exported.empty()) << "nm -D printed nothing for " << trim::testing::plugin_path();
  std::vector<std::string> tables;
  for (const std::string& name : exported) {
    const bool ours = name == "ncclTrimStatsJson" || name == "ncclTrimDeclareSendBuffers" ||
                      name == "ncclTrimIrecvCombine" || name == "ncclTrimWaitRequests" ||
                      starts_with(name, "nccl_trim_");  // harness, collectives, comm hook
    bool allowed = starts_with(name, "ncclNetPlugin_v") || starts_with(name, "ncclProfiler_v") ||
                   starts_with(name, "ncclTunerPlugin_v") || ours;
    EXPECT_TRUE(allowed) << "unexpected exported symbol: " << name;
    if (allowed && !ours) tables.push_back(name);
  }
  // NCCL finds the profiler and tuner in the net plugin's library when none is configured.
  std::sort(tables.begin(), tables.end());
  EXPECT_EQ(tables, (std::vector<std::string>{"ncclNetPlugin_v10", "ncclNetPlugin_v11", "ncclNetPlugin_v12",
                                              "ncclNetPlugin_v8", "ncclNetPlugin_v9", "ncclProfiler_v5",
                                              "ncclProfiler_v6", "ncclTunerPlugin_v5", "ncclTunerPlugin_v6"}));

  // Internal code is in the library (full symbol table) but not reachable by dlsym.
  std::vector<std::string> all = nm_names("--defined-only");
  const char* kTrimSymbol = "_ZN4trim9code_nameENS_4CodeE";  // trim::code_name(trim::Code)
  bool has_trim = false;
  std::string fmt_symbol;
  for (const std::string& name : all) {
    has_trim = has_trim || name == kTrimSymbol;
    if (fmt_symbol.empty() && starts_with(name, "_ZN3fmt")) fmt_symbol = name;
  }
  ASSERT_TRUE(has_trim) << kTrimSymbol << " not in the library's symbol table (stripped?)";
  ASSERT_FALSE(fmt_symbol.empty()) << "no fmt symbol in the library's symbol table";
  EXPECT_EQ(dlsym(handle_, kTrimSymbol), nullptr);
  EXPECT_EQ(dlsym(handle_, fmt_symbol.c_str()), nullptr) << fmt_symbol;
}

TEST_F(PluginTest, GenericNameSymlinkResolvesToPlugin) {
  std::string plugin = trim::testing::plugin_path();
  std::string generic = plugin.substr(0, plugin.rfind('/') + 1) + "libnccl-net.so";
  struct stat st {};
  ASSERT_EQ(lstat(generic.c_str(), &st), 0) << generic << " is missing (make builds it with `all`)";
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << generic << " should be a symlink";
  char a[PATH_MAX];
  char b[PATH_MAX];
  ASSERT_NE(realpath(generic.c_str(), a), nullptr);
  ASSERT_NE(realpath(plugin.c_str(), b), nullptr);
  EXPECT_STREQ(a, b);
  void* again = dlopen(generic.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(again, nullptr) << dlerror();
  EXPECT_EQ(again, handle_) << "the generic name should load the same library";
  dlclose(again);
}

// v8-v10 share one process-wide context: every init after the first only refreshes the logger.
TEST_F(PluginTest, LegacyInitSucceedsAndIsShared) {
  EXPECT_EQ(v8_->init(capture_logger), ncclSuccess);
  EXPECT_EQ(v9_->init(capture_logger), ncclSuccess);
  EXPECT_EQ(v10_->init(capture_logger, nullptr), ncclSuccess);
  int ndev = 0;
  EXPECT_EQ(v8_->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1) << "NCCL_TRIM_IFNAME=lo selects exactly one device";
}

TEST_F(PluginTest, V11InitPerCommunicator) {
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* ctxs[2] = {};
  for (int i = 0; i < 2; ++i) {
    void* ctx = reinterpret_cast<void*>(0x1);  // must be overwritten
    EXPECT_EQ(v11_->init(&ctx, 0x1234 + i, &config, capture_logger, nullptr), ncclSuccess);
    EXPECT_NE(ctx, reinterpret_cast<void*>(0x1));
    ASSERT_NE(ctx, nullptr);
    ctxs[i] = ctx;
  }
  EXPECT_NE(ctxs[0], ctxs[1]) << "each communicator gets its own context";
  std::vector<LogLine> lines = take_lines();
  bool said = false;
  for (const LogLine& l : lines) {
    said = said || (l.level == NCCL_LOG_INFO && (l.flags & NCCL_INIT) != 0 &&
                    l.text.find("initialized") != std::string::npos);
  }
  EXPECT_TRUE(said) << dump(lines);
  for (void* ctx : ctxs) EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
}

TEST_F(PluginTest, BadEnvValueFailsInitNamingVariable) {
  {
    EnvGuard mtu("NCCL_TRIM_MTU", "12");
    void* ctx = nullptr;
    EXPECT_EQ(v11_->init(&ctx, 1, nullptr, capture_logger, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ctx, nullptr);
    std::vector<LogLine> lines = take_lines();
    EXPECT_TRUE(find_warn(lines, {"NCCL_TRIM_MTU", "'12'", "[256, 65535]"})) << dump(lines);
  }
  {
    EnvGuard level("NCCL_TRIM_LOG_LEVEL", "verbose");
    void* ctx = nullptr;
    EXPECT_EQ(v11_->init(&ctx, 2, nullptr, capture_logger, nullptr), ncclInvalidUsage);
    std::vector<LogLine> lines = take_lines();
    EXPECT_TRUE(find_warn(lines, {"NCCL_TRIM_LOG_LEVEL", "verbose"})) << dump(lines);
  }
  {
    EnvGuard sw("NCCL_TRIM_SWITCH", "nohost");
    void* ctx = nullptr;
    EXPECT_EQ(v11_->init(&ctx, 3, nullptr, capture_logger, nullptr), ncclInvalidUsage);
    std::vector<LogLine> lines = take_lines();
    EXPECT_TRUE(find_warn(lines, {"NCCL_TRIM_SWITCH", "host:port"})) << dump(lines);
  }
}

// What the nccl_trim comm hook reaches in the copy of the plugin NCCL loaded (ctypes): the
// traffic class that marks its communicator, its declaration of that class as rotated, and
// counters that grow only when NCCL initialised a communicator with that class through this
// library.
TEST_F(PluginTest, CommHookExportsSeeTheTaggedCommunicator) {
  using IntFn = int (*)();
  using U64Fn = uint64_t (*)();
  using DeclareFn = int (*)(int, int, char*, int);
  auto abi = reinterpret_cast<IntFn>(dlsym(handle_, "nccl_trim_hook_abi"));
  auto tc = reinterpret_cast<IntFn>(dlsym(handle_, "nccl_trim_hook_traffic_class"));
  auto comms = reinterpret_cast<U64Fn>(dlsym(handle_, "nccl_trim_hook_comms"));
  auto declare = reinterpret_cast<DeclareFn>(dlsym(handle_, "nccl_trim_hook_declare"));
  ASSERT_NE(abi, nullptr);
  ASSERT_NE(tc, nullptr);
  ASSERT_NE(comms, nullptr);
  ASSERT_NE(declare, nullptr);
  ASSERT_NE(dlsym(handle_, "nccl_trim_hook_send_conns"), nullptr);
  ASSERT_NE(dlsym(handle_, "nccl_trim_hook_undeclared_conns"), nullptr);
  ASSERT_NE(dlsym(handle_, "nccl_trim_rotated_messages"), nullptr);
  EXPECT_EQ(abi(), 2);
  {
    // Rows other than NCCL_TRIM_ROW_ELEMS (32768 = 2^15), or another class: refused, both named.
    char error[512] = "unchanged";
    EXPECT_EQ(declare(116, 14, error, sizeof error), -2);  // the rows
    EXPECT_NE(std::string(error).find("2^14"), std::string::npos) << error;
    EXPECT_NE(std::string(error).find("NCCL_TRIM_ROW_ELEMS is 32768"), std::string::npos) << error;
    char cut[8] = "";
    EXPECT_EQ(declare(117, 15, cut, sizeof cut), -1);
    EXPECT_EQ(std::string(cut), "the hoo");  // cut to the buffer, NUL-terminated
    EXPECT_EQ(declare(117, 15, error, sizeof error), -1);
    EXPECT_NE(std::string(error).find("class 117"), std::string::npos) << error;
    EXPECT_NE(std::string(error).find("NCCL_TRIM_HOOK_TRAFFIC_CLASS is 116"), std::string::npos) << error;
    EXPECT_EQ(declare(116, 14, nullptr, 0), -2);
  }
  EXPECT_EQ(tc(), 116);
  {
    EnvGuard bad("NCCL_TRIM_HOOK_TRAFFIC_CLASS", "300");
    EXPECT_EQ(tc(), -1);  // invalid: init would fail, naming the variable
    void* ctx = nullptr;
    ncclNetCommConfig_v11_t config{116};
    EXPECT_EQ(v11_->init(&ctx, 7, &config, capture_logger, nullptr), ncclInvalidUsage);
    std::vector<LogLine> lines = take_lines();
    EXPECT_TRUE(find_warn(lines, {"NCCL_TRIM_HOOK_TRAFFIC_CLASS", "300"})) << dump(lines);
  }
  const uint64_t before = comms();
  for (int cls : {NCCL_NET_TRAFFIC_CLASS_UNDEF, 0, 117, 116}) {
    void* ctx = nullptr;
    ncclNetCommConfig_v11_t config{cls};
    ASSERT_EQ(v11_->init(&ctx, 8, &config, capture_logger, nullptr), ncclSuccess);
    EXPECT_EQ(comms(), before + (cls == 116 ? 1 : 0)) << cls;
    std::vector<LogLine> lines = take_lines();
    if (cls == 116) {
      EXPECT_TRUE(find_info(lines, {"comm hook", "traffic class 116", "no hook declared it rotated"})) << dump(lines);
    }
    EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
  }
  // Declared (as the hook does before it creates its group): the next communicator of the class
  // is told so.
  char error[512] = "";
  ASSERT_EQ(declare(116, 15, error, sizeof error), 0) << error;
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t config{116};
  ASSERT_EQ(v11_->init(&ctx, 9, &config, capture_logger, nullptr), ncclSuccess);
  std::vector<LogLine> lines = take_lines();
  EXPECT_TRUE(find_info(lines, {"traffic class 116", "declared it rotated", "sent as scheme rotated"})) << dump(lines);
  EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
}

TEST_F(PluginTest, UnknownTrimVariableIsWarnedAbout) {
  EnvGuard typo("NCCL_TRIM_FOO", "1");
  void* ctx = nullptr;
  EXPECT_EQ(v11_->init(&ctx, 7, nullptr, capture_logger, nullptr), ncclSuccess);
  std::vector<LogLine> lines = take_lines();
  EXPECT_TRUE(find_warn(lines, {"NCCL_TRIM_FOO"})) << dump(lines);
  EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
}

TEST_F(PluginTest, LogLevelFromEnvironmentIsApplied) {
  void* ctx = nullptr;
  {
    EnvGuard level("NCCL_TRIM_LOG_LEVEL", "off");
    EXPECT_EQ(v11_->init(&ctx, 8, nullptr, capture_logger, nullptr), ncclSuccess);
    std::vector<LogLine> lines = take_lines();
    EXPECT_TRUE(lines.empty()) << dump(lines);
    EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
  }
  // Back to the default (info): init says so again.
  EXPECT_EQ(v11_->init(&ctx, 9, nullptr, capture_logger, nullptr), ncclSuccess);
  std::vector<LogLine> lines = take_lines();
  EXPECT_FALSE(lines.empty());
  EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
}

// What NCCL checks in getProperties: a HOST device with a sane maxP2pBytes; loopback has no
// PCI device, so pciPath is NULL (a virtual NIC on the CPU).
TEST_F(PluginTest, PropertiesOfTheLoopbackDevice) {
  void* ctx = nullptr;
  ASSERT_EQ(v11_->init(&ctx, 10, nullptr, capture_logger, nullptr), ncclSuccess);
  ncclNetProperties_v11_t p{};
  ASSERT_EQ(v11_->getProperties(0, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.pciPath, nullptr);
  // Host buffers only, GPU or not: NCCL stages GPU data through its pinned host buffers.
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_GT(p.maxP2pBytes, 0u);
  EXPECT_LE(p.maxP2pBytes, static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES));
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_GT(p.speed, 0);
  ncclNetProperties_v8_t p8{};
  EXPECT_EQ(v8_->getProperties(0, &p8), ncclSuccess);
  EXPECT_EQ(v11_->getProperties(1, &p), ncclInvalidArgument);
  EXPECT_EQ(v11_->getProperties(-1, &p), ncclInvalidArgument);
  // A handle that is not ours is refused, not trusted.
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  std::memset(handle, 0x5a, 40);
  std::memset(handle + 64, 0, 8);
  void* comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v11_->connect(ctx, 0, handle, &comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(v11_->finalize(ctx), ncclSuccess);
  take_lines();
}

// v12 (NCCL 2.30+) is v11 with wider vProps and a rail and plane per device. Every byte of the
// struct is written (poisoned first), the fields v11 has match v11's, loopback is rail 0 (one
// physical port) and its plane is unknown.
TEST_F(PluginTest, V12PropertiesAddRailAndPlane) {
  ncclNetCommConfig_v12_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void* ctx = reinterpret_cast<void*>(0x1);  // must be overwritten
  ASSERT_EQ(v12_->init(&ctx, 11, &config, capture_logger, nullptr), ncclSuccess);
  ASSERT_NE(ctx, reinterpret_cast<void*>(0x1));
  ASSERT_NE(ctx, nullptr);
  int ndev = 0;
  ASSERT_EQ(v12_->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1);
  ncclNetProperties_v12_t p;
  std::memset(&p, 0xab, sizeof(p));
  ASSERT_EQ(v12_->getProperties(0, &p), ncclSuccess);
  ncclNetProperties_v11_t q{};
  ASSERT_EQ(v11_->getProperties(0, &q), ncclSuccess);
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.pciPath, nullptr);
  EXPECT_EQ(p.guid, q.guid);
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(p.regIsGlobal, q.regIsGlobal);
  EXPECT_EQ(p.forceFlush, 0);
  EXPECT_EQ(p.speed, q.speed);
  EXPECT_EQ(p.port, q.port);
  EXPECT_EQ(p.latency, q.latency);
  EXPECT_EQ(p.maxComms, q.maxComms);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(p.netDeviceVersion, NCCL_NET_DEVICE_INVALID_VERSION);
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.vProps.devs[0], 0);
  for (int i = 1; i < NCCL_NET_MAX_DEVS_PER_NIC_V12; ++i) EXPECT_EQ(p.vProps.devs[i], 0) << i;
  EXPECT_EQ(p.maxP2pBytes, q.maxP2pBytes);
  EXPECT_GT(p.maxP2pBytes, 0u);
  EXPECT_LE(p.maxP2pBytes, static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES));
  EXPECT_EQ(p.maxCollBytes, q.maxCollBytes);
  EXPECT_EQ(p.maxMultiRequestSize, q.maxMultiRequestSize);
  EXPECT_EQ(p.railId, 0) << "one physical port, one rail";
  EXPECT_EQ(p.planeId, NCCL_NET_ID_UNDEF) << "a UDP socket cannot know the fabric's plane";
  EXPECT_EQ(v12_->getProperties(1, &p), ncclInvalidArgument);
  EXPECT_EQ(v12_->getProperties(-1, &p), ncclInvalidArgument);
  ncclNetAttr_v12_t attr{{-1, -1, -1, -1}, {-1, -1, -1, -1}, 1u << 4, 1u << 1, 1u << 2};  // AllReduce ring SIMPLE
  EXPECT_EQ(v12_->setNetAttr(ctx, &attr), ncclSuccess);
  EXPECT_EQ(v12_->finalize(ctx), ncclSuccess);
  take_lines();
}

TEST_F(PluginTest, NullArgumentsAreInvalidArguments) {
  const ncclResult_t kBad = ncclInvalidArgument;
  void* out = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  int done = 0;

  EXPECT_EQ(v8_->init(nullptr), kBad);
  EXPECT_EQ(v10_->init(nullptr, nullptr), kBad);
  EXPECT_EQ(v11_->init(nullptr, 1, nullptr, capture_logger, nullptr), kBad);
  EXPECT_EQ(v11_->init(&out, 1, nullptr, nullptr, nullptr), kBad);
  EXPECT_EQ(v12_->init(nullptr, 1, nullptr, capture_logger, nullptr), kBad);
  EXPECT_EQ(v12_->init(&out, 1, nullptr, nullptr, nullptr), kBad);

  EXPECT_EQ(v8_->devices(nullptr), kBad);
  EXPECT_EQ(v8_->getProperties(0, nullptr), kBad);
  EXPECT_EQ(v9_->getProperties(0, nullptr), kBad);
  EXPECT_EQ(v11_->getProperties(0, nullptr), kBad);
  EXPECT_EQ(v12_->getProperties(0, nullptr), kBad);

  // Out-parameters are cleared even when the call is refused.
  void* const kStale = reinterpret_cast<void*>(0x1);
  out = kStale;
  EXPECT_EQ(v11_->listen(nullptr, 0, handle, &out), kBad);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(v8_->listen(0, nullptr, nullptr), kBad);
  out = kStale;
  EXPECT_EQ(v11_->connect(nullptr, 0, handle, &out, nullptr), kBad);
  EXPECT_EQ(out, nullptr);
  out = kStale;
  EXPECT_EQ(v12_->listen(nullptr, 0, handle, &out), kBad);
  EXPECT_EQ(out, nullptr);
  out = kStale;
  EXPECT_EQ(v12_->connect(nullptr, 0, handle, &out, nullptr), kBad);
  EXPECT_EQ(out, nullptr);
  out = kStale;
  EXPECT_EQ(v8_->accept(nullptr, &out, nullptr), kBad);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(v11_->accept(nullptr, &out, nullptr), kBad);
  EXPECT_EQ(v11_->accept(nullptr, nullptr, nullptr), kBad);

  out = kStale;
  EXPECT_EQ(v8_->regMr(nullptr, handle, sizeof(handle), NCCL_PTR_HOST, &out), kBad);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(v8_->regMr(nullptr, handle, sizeof(handle), NCCL_PTR_HOST, nullptr), kBad);
  EXPECT_EQ(v8_->regMrDmaBuf(nullptr, handle, sizeof(handle), NCCL_PTR_CUDA, 0, 3, &out), kBad);
  EXPECT_EQ(v8_->deregMr(nullptr, nullptr), kBad);

  // NCCL pre-sets 0x1 (optional completion) for LL receives: a failed call must still clear it.
  void* request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v8_->isend(nullptr, handle, 8, 0, nullptr, &request), kBad);
  EXPECT_EQ(request, nullptr);
  request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v8_->isend(nullptr, handle, -1, 0, nullptr, &request), kBad);
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(v9_->isend(nullptr, handle, 8, 0, nullptr, &request), kBad);
  EXPECT_EQ(v11_->isend(nullptr, handle, 8, 0, nullptr, nullptr, &request), kBad);
  EXPECT_EQ(v11_->isend(nullptr, handle, 8, 0, nullptr, nullptr, nullptr), kBad);

  void* data[1] = {handle};
  int sizes_i[1] = {8};
  size_t sizes_z[1] = {8};
  int tags[1] = {0};
  void* mh[1] = {nullptr};
  request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v8_->irecv(nullptr, 1, data, sizes_i, tags, mh, &request), kBad);
  EXPECT_EQ(request, nullptr);
  request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(v9_->irecv(nullptr, 1, data, sizes_z, tags, mh, &request), kBad);
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(v11_->irecv(nullptr, 1, data, sizes_z, tags, mh, nullptr, &request), kBad);
  EXPECT_EQ(v11_->irecv(nullptr, 1, data, sizes_z, tags, mh, nullptr, nullptr), kBad);
  EXPECT_EQ(v8_->iflush(nullptr, 1, data, sizes_i, mh, &request), kBad);

  done = 1;
  EXPECT_EQ(v8_->test(nullptr, &done, nullptr), kBad);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(v11_->test(nullptr, nullptr, nullptr), kBad);
  EXPECT_EQ(v8_->closeSend(nullptr), kBad);
  EXPECT_EQ(v8_->closeRecv(nullptr), kBad);
  EXPECT_EQ(v8_->closeListen(nullptr), kBad);
  EXPECT_EQ(v11_->finalize(nullptr), kBad);
  EXPECT_EQ(v11_->setNetAttr(nullptr, nullptr), kBad);
  EXPECT_EQ(v12_->finalize(nullptr), kBad);
  EXPECT_EQ(v12_->setNetAttr(nullptr, nullptr), kBad);
}

}  // namespace

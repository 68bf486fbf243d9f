// The plugin makes no CUDA call (docs/ARCHITECTURE.md, "No CUDA on the data path"): the built
// .so must not reference or embed the CUDA runtime or driver. A CUDA call from NCCL's proxy
// thread can deadlock behind the application's own CUDA calls, so the check is on the binary
// itself, not on a convention: any cuda*/cu* symbol, a libcuda/libcudart dependency or an
// embedded static cudart fails it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <cctype>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace {

// Lines a command prints; empty (and *ok false) when it could not run.
std::vector<std::string> run_lines(const std::string& cmd, bool* ok) {
  std::vector<std::string> out;
  FILE* f = popen(cmd.c_str(), "r");
  *ok = f != nullptr;
  if (f == nullptr) return out;
  char buf[4096];
  std::string line;
  while (std::fgets(buf, sizeof buf, f) != nullptr) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      out.push_back(line);
      line.clear();
    }
  }
  *ok = pclose(f) == 0;
  return out;
}

// A CUDA runtime or driver symbol: cudaMalloc, cuLaunchKernel, __cudaRegisterFatBinary, ...
bool is_cuda_symbol(const std::string& name) {
  if (name.rfind("__cuda", 0) == 0 || name.rfind("cudart", 0) == 0) return true;
  if (name.rfind("cuda", 0) == 0 && name.size() > 4 && (std::isupper(static_cast<unsigned char>(name[4])) || name[4] == '_')) return true;
  return name.size() > 2 && name[0] == 'c' && name[1] == 'u' && std::isupper(static_cast<unsigned char>(name[2]));
}

std::vector<std::string> cuda_symbols(const std::string& nm_args) {
  bool ok = false;
  std::vector<std::string> lines = run_lines("nm " + nm_args + " '" + trim::testing::plugin_path() + "' 2>/dev/null", &ok);
  EXPECT_TRUE(ok) << "nm " << nm_args << " failed on " << trim::testing::plugin_path();
  EXPECT_FALSE(lines.empty());
  std::vector<std::string> bad;
  for (const std::string& l : lines) {
    const size_t sp = l.find_last_of(' ');
    const std::string name = sp == std::string::npos ? l : l.substr(sp + 1);
    if (is_cuda_symbol(name)) bad.push_back(l);
  }
  return bad;
}

TEST(NoCuda, SymbolCheckRecognisesCudaNames) {
  // The check itself must be able to fail.
  for (const char* n : {"cudaMalloc", "cudaLaunchKernel", "cuLaunchKernel", "cuInit", "__cudaRegisterFatBinary",
                        "cudart::globalState", "cuda_Foo"}) {
    EXPECT_TRUE(is_cuda_symbol(n)) << n;
  }
  for (const char* n : {"curl_easy_init", "custom", "cubic", "_ZN4trim3net4initE", "cuda", "cuckoo"}) {
    EXPECT_FALSE(is_cuda_symbol(n)) << n;
  }
}

TEST(NoCuda, PluginReferencesNoCudaSymbol) {
  EXPECT_TRUE(cuda_symbols("-D").empty()) << ::testing::PrintToString(cuda_symbols("-D"));
  EXPECT_TRUE(cuda_symbols("-a").empty()) << ::testing::PrintToString(cuda_symbols("-a"));
}

TEST(NoCuda, PluginNeedsNoCudaLibrary) {
  bool ok = false;
  std::vector<std::string> lines = run_lines("readelf -d '" + trim::testing::plugin_path() + "' 2>/dev/null", &ok);
  ASSERT_TRUE(ok);
  bool saw_needed = false;
  for (const std::string& l : lines) {
    if (l.find("(NEEDED)") == std::string::npos) continue;
    saw_needed = true;
    EXPECT_EQ(l.find("libcuda"), std::string::npos) << l;
    EXPECT_EQ(l.find("libnvidia"), std::string::npos) << l;
  }
  EXPECT_TRUE(saw_needed);
}

TEST(NoCuda, PluginEmbedsNoCudaRuntime) {
  std::ifstream in(trim::testing::plugin_path(), std::ios::binary);
  ASSERT_TRUE(in.good());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4096u);
  // A static cudart carries the driver's library name (it dlopens it) and its own error texts.
  for (const char* marker : {"libcuda.so", "cudaErrorInvalidValue", "__cudaRegisterFatBinary", "cudart"}) {
    EXPECT_EQ(bytes.find(marker), std::string::npos) << "the plugin embeds '" << marker << "'";
  }
}

}  // namespace

// The layers, checked on the sources (the per-layer archives check the links): every project
// include points down — common <- codec <- transport <- plugin, cuda/ on common and codec beside
// the transport (the plugin makes no CUDA call: nothing of the plugin's layers reaches cuda/),
// the switch model on common and codec (its simulator also on transport/recovery.h, the loss
// recovery it shares with the plugin), and coll/ (NCCL's side of the ABI, driving a plugin it
// dlopens) on common and codec and NCCL's ABI headers: it never includes the plugin's code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace {

// Which top-level folders each layer may include from (besides itself).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> a = {
      {"common", {}},
      {"codec", {"common"}},
      {"cuda", {"common", "codec"}},
      {"transport", {"common", "codec"}},
      {"plugin", {"common", "codec", "transport"}},
      {"switch_sim", {"common", "codec"}},
      {"coll", {"common", "codec"}},
  };
  return a;
}

// The project path of an #include "dir/file" line ("" for anything else). (Hand-written:
// std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers.)
std::string included(const std::string& line) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return "";
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return "";
  i = line.find('"', i + 7);
  if (i == std::string::npos) return "";
  const size_t end = line.find('"', i + 1);
  if (end == std::string::npos) return "";
  const std::string path = line.substr(i + 1, end - i - 1);
  return path.find('/') == std::string::npos ? "" : path;
}

std::vector<std::string> violations() {
  const std::filesystem::path root = trim::testing::source_dir();
  std::vector<std::string> out;
  for (const auto& [layer, may] : allowed()) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / layer)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = std::filesystem::relative(e.path(), root).string();
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        const std::string file = included(line);
        if (file.empty()) continue;
        const std::string dir = file.substr(0, file.find('/'));
        if (dir == layer || may.count(dir) != 0) continue;
        if (layer == "switch_sim" && rel.rfind("switch_sim/sim/", 0) == 0 && file == "transport/recovery.h") continue;
        if (layer == "coll" && (file == "plugin/nccl_net.h" || file == "plugin/nccl_ext.h")) continue;
        out.push_back(rel + " -> " + file);
      }
    }
  }
  return out;
}

TEST(Layers, EveryIncludePointsDown) {
  const std::vector<std::string> v = violations();
  EXPECT_TRUE(v.empty()) << "includes that point up the layers:\n" << ::testing::PrintToString(v);
}

}  // namespace

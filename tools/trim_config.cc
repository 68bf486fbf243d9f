// trim-config: prints the knob table (docs/CONFIG.md), the enum header (common/param_enums.h), or
// checks the current environment.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/params.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--markdown") == 0) {
    std::fputs(trim::params_markdown().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--enums") == 0) {
    std::fputs(trim::params_enum_header().c_str(), stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--check") == 0) {
    std::vector<std::string> warnings;
    trim::Result<trim::Params> p = trim::process_params(&warnings);
    for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!p) {
      std::fprintf(stderr, "error: %s\n", p.status().message().c_str());
      return 2;
    }
    std::puts("configuration ok");
    return 0;
  }
  std::fprintf(stderr, "usage: trim-config --markdown | --enums | --check\n");
  return 2;
}

// trim-harness: runs the NCCL net plugin the way NCCL's proxy does (and the plugin's profiler
// the way NCCL's profiler layer does), across forked ranks on loopback, and verifies what
// arrives. See usage_text() (options.cc) for the command line.
#include <cstdio>

#include "tools/harness/options.h"
#include "tools/harness/parent.h"

int main(int argc, char** argv) {
  bool help = false;
  trim::Result<trim::harness::Options> opt = trim::harness::parse_options(argc, argv, &help);
  if (!opt) {
    std::fprintf(stderr, "trim-harness: %s\n", opt.status().message().c_str());
    return 2;
  }
  if (help) {
    std::fputs(trim::harness::usage_text().c_str(), stdout);
    return 0;
  }
  return trim::harness::run_harness(opt.value());
}

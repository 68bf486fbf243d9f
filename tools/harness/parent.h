// The parent process of trim-harness: fork the ranks, relay, enforce the deadline, report.
#pragma once

#include "tools/harness/options.h"

namespace trim::harness {

// Runs the whole harness; returns the process exit status (see usage_text()).
int run_harness(Options opt);

}  // namespace trim::harness

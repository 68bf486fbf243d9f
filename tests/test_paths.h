// Where the tests find the built plugin (and the tools beside it) and the source tree: the
// paths compiled in by the Makefile, or TRIM_TEST_PLUGIN / TRIM_TEST_SOURCE at run time, so a
// test binary carried to another machine (scripts/check-gpu.sh on a GPU machine) still works.
#pragma once

#include <cstdlib>
#include <string>

#ifndef TRIM_TEST_PLUGIN_PATH
#define TRIM_TEST_PLUGIN_PATH "build/lib/libnccl-net-trim.so"
#endif
#ifndef TRIM_TEST_SOURCE_DIR
#define TRIM_TEST_SOURCE_DIR "."
#endif

namespace trim::testing {

inline std::string plugin_path() {
  const char* e = std::getenv("TRIM_TEST_PLUGIN");
  return e != nullptr && *e != '\0' ? e : TRIM_TEST_PLUGIN_PATH;
}

inline std::string source_dir() {
  const char* e = std::getenv("TRIM_TEST_SOURCE");
  return e != nullptr && *e != '\0' ? e : TRIM_TEST_SOURCE_DIR;
}

// The tools' directory: bin/ beside the plugin's lib/.
inline std::string bin_dir() {
  const std::string p = plugin_path();
  return p.substr(0, p.rfind('/')) + "/../bin/";
}

// libtrim-rht.so, beside the plugin in lib/.
inline std::string rht_lib_path() {
  const std::string p = plugin_path();
  return p.substr(0, p.rfind('/')) + "/libtrim-rht.so";
}

}  // namespace trim::testing

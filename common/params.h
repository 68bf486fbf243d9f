// Typed, validated access to every NCCL_TRIM_* knob declared in common/params.def.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trim {

enum class ParamKind { kEnum, kInt, kIntAuto, kPow2, kDouble, kU64, kString };

// kIntAuto: "auto" (stored as kAuto, the value is then chosen at run time) or an integer in [min, max].
constexpr int64_t kAuto = -1;

template <ParamKind K> struct ParamValue;
template <> struct ParamValue<ParamKind::kEnum> { using type = int; };  // index into choices
template <> struct ParamValue<ParamKind::kInt> { using type = int64_t; };
template <> struct ParamValue<ParamKind::kIntAuto> { using type = int64_t; };
template <> struct ParamValue<ParamKind::kPow2> { using type = int64_t; };
template <> struct ParamValue<ParamKind::kDouble> { using type = double; };
template <> struct ParamValue<ParamKind::kU64> { using type = uint64_t; };
template <> struct ParamValue<ParamKind::kString> { using type = std::string; };

struct ParamInfo {
  const char* env;           // full variable name, e.g. "NCCL_TRIM_SCHEME"
  ParamKind kind;
  const char* default_text;
  double min, max;
  const char* choices;       // "a|b|c" for kEnum
  const char* doc;
};

struct Params {
#define TRIM_PARAM(field, NAME, kind, def, lo, hi, choices, doc) \
  ParamValue<ParamKind::kind>::type field{};
#include "common/params.def"
#undef TRIM_PARAM
};

// Looks a variable up; returns nullptr when unset. Tests inject a map; production uses getenv.
using EnvLookup = std::function<const char*(const char*)>;

const std::vector<ParamInfo>& param_infos();

// Reads and validates every knob. The error names the variable, the value given and what is
// allowed.
Result<Params> load_params(const EnvLookup& lookup);
// The same from the process environment; unknown NCCL_TRIM_* variables there (typos) are
// reported into `warnings` when it is non-null.
Result<Params> load_params_from_env(std::vector<std::string>* warnings = nullptr);
// The process's params: loaded once (from the environment) and shared by everything in the
// process — the plugin's init, the transport, the tuner, the tools. Loaded again only when the
// NCCL_TRIM_* variables of the environment changed since (tests set them between inits).
// `new_warnings` gets the warnings of a (re)load, so each is reported once.
Result<Params> process_params(std::vector<std::string>* new_warnings = nullptr);
Params default_params();

// Checks one value against a knob's rule (used by load_params and tests).
Status check_param_text(const ParamInfo& info, const std::string& text);

// The docs/CONFIG.md body generated from the list.
std::string params_markdown();

// common/param_enums.h generated from the list: a C++ enum for every enum knob (`make docs`
// writes it; a test fails when it is stale).
std::string params_enum_header();

}  // namespace trim

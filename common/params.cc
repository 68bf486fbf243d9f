#include "common/params.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <strings.h>

extern char** environ;

namespace trim {
namespace {

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = choices; *p != '\0'; ++p) {
    if (*p == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(*p);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::string format_bound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

// What a knob accepts, in words; used both in errors and in docs/CONFIG.md.
std::string allowed_text(const ParamInfo& info) {
  switch (info.kind) {
    case ParamKind::kEnum: return fmt::format("one of {}", info.choices);
    case ParamKind::kInt:
      return fmt::format("an integer in [{}, {}]", format_bound(info.min), format_bound(info.max));
    case ParamKind::kIntAuto:
      return fmt::format("auto or an integer in [{}, {}]", format_bound(info.min), format_bound(info.max));
    case ParamKind::kPow2:
      return fmt::format("a power of two in [{}, {}]", format_bound(info.min), format_bound(info.max));
    case ParamKind::kDouble:
      return fmt::format("a number in [{}, {}]", format_bound(info.min), format_bound(info.max));
    case ParamKind::kU64: return "an unsigned 64-bit integer (decimal or 0x hex)";
    case ParamKind::kString: return "any text";
  }
  return "";
}

const char* kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::kEnum: return "enum";
    case ParamKind::kInt: return "int";
    case ParamKind::kIntAuto: return "int or auto";
    case ParamKind::kPow2: return "int (power of 2)";
    case ParamKind::kDouble: return "float";
    case ParamKind::kU64: return "uint64";
    case ParamKind::kString: return "string";
  }
  return "";
}

Status reject(const ParamInfo& info, const std::string& text) {
  return Status(Code::kBadConfig,
                fmt::format("{}='{}' is not allowed: expected {}", info.env, text, allowed_text(info)));
}

bool parse_i64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

// Parses `text` for `info` into `out` (typed), or returns the error naming the variable.
Status parse_value(const ParamInfo& info, const std::string& text, int* e, int64_t* i, double* d,
                   uint64_t* u, std::string* s) {
  switch (info.kind) {
    case ParamKind::kEnum: {
      std::vector<std::string> choices = split_choices(info.choices);
      for (size_t k = 0; k < choices.size(); ++k) {
        if (strcasecmp(choices[k].c_str(), text.c_str()) == 0) {
          *e = static_cast<int>(k);
          return Status::ok();
        }
      }
      return reject(info, text);
    }
    case ParamKind::kIntAuto:
      if (strcasecmp(text.c_str(), "auto") == 0) {
        *i = kAuto;
        return Status::ok();
      }
      [[fallthrough]];
    case ParamKind::kInt:
    case ParamKind::kPow2: {
      int64_t v = 0;
      if (!parse_i64(text, &v) || static_cast<double>(v) < info.min ||
          static_cast<double>(v) > info.max || (info.kind == ParamKind::kPow2 && !is_pow2(v))) {
        return reject(info, text);
      }
      *i = v;
      return Status::ok();
    }
    case ParamKind::kDouble: {
      errno = 0;
      char* end = nullptr;
      double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
      if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) || v < info.min || v > info.max) {
        return reject(info, text);
      }
      *d = v;
      return Status::ok();
    }
    case ParamKind::kU64: {
      errno = 0;
      char* end = nullptr;
      if (text.empty() || text[0] == '-' || text[0] == '+') return reject(info, text);
      unsigned long long v = std::strtoull(text.c_str(), &end, 0);
      if (errno != 0 || *end != '\0') return reject(info, text);
      *u = v;
      return Status::ok();
    }
    case ParamKind::kString:
      *s = text;
      return Status::ok();
  }
  return Status(Code::kInternal, "unknown param kind");
}

// Typed setters so the X-macro can assign whatever the parser produced to the field.
[[maybe_unused]] void assign(int& field, int e, int64_t, double, uint64_t, const std::string&) { field = e; }
[[maybe_unused]] void assign(int64_t& field, int, int64_t i, double, uint64_t, const std::string&) { field = i; }
[[maybe_unused]] void assign(double& field, int, int64_t, double d, uint64_t, const std::string&) { field = d; }
[[maybe_unused]] void assign(uint64_t& field, int, int64_t, double, uint64_t u, const std::string&) { field = u; }
[[maybe_unused]] void assign(std::string& field, int, int64_t, double, uint64_t, const std::string& s) { field = s; }

// Rules that span several knobs.
Status check_cross(const Params& p) {
  // The codec checks geometry itself. The DSCP classes must be told apart: a switch trims by
  // DSCP, and the receiver reads the trimmed value as a trim.
  struct Dscp {
    const char* name;
    int64_t value;
  };
  const Dscp classes[] = {{"NCCL_TRIM_DSCP_TRIMMABLE", p.dscp_trimmable},
                          {"NCCL_TRIM_DSCP_EXACT", p.dscp_exact},
                          {"NCCL_TRIM_DSCP_CONTROL", p.dscp_control},
                          {"NCCL_TRIM_DSCP_TRIMMED", p.dscp_trimmed}};
  for (size_t i = 0; i < 4; ++i) {
    for (size_t j = i + 1; j < 4; ++j) {
      const bool must_differ = i == 0 || j == 3;  // exact and control may share a class
      if (must_differ && classes[i].value == classes[j].value) {
        return Status(Code::kBadConfig,
                      fmt::format("{}={} equals {}: the trimmable and the trimmed DSCP must each differ from "
                                  "every other class (a switch trims by DSCP; the receiver takes the trimmed "
                                  "value for a trim)",
                                  classes[i].name, classes[i].value, classes[j].name));
      }
    }
  }
  return Status::ok();
}

}  // namespace

const std::vector<ParamInfo>& param_infos() {
  static const std::vector<ParamInfo> infos = {
#define TRIM_PARAM(field, NAME, kind, def, lo, hi, choices, doc) \
  ParamInfo{"NCCL_TRIM_" #NAME, ParamKind::kind, def, lo, hi, choices, doc},
#include "common/params.def"
#undef TRIM_PARAM
  };
  return infos;
}

Status check_param_text(const ParamInfo& info, const std::string& text) {
  int e = 0;
  int64_t i = 0;
  double d = 0;
  uint64_t u = 0;
  std::string s;
  return parse_value(info, text, &e, &i, &d, &u, &s);
}

Result<Params> load_params(const EnvLookup& lookup) {
  Params p;
  size_t index = 0;
  const std::vector<ParamInfo>& infos = param_infos();
#define TRIM_PARAM(field, NAME, kind, def, lo, hi, choices, doc)                      \
  {                                                                                  \
    const ParamInfo& info = infos[index++];                                          \
    const char* env = lookup ? lookup(info.env) : nullptr;                           \
    std::string text = env != nullptr ? std::string(env) : std::string(info.default_text); \
    int e = 0;                                                                       \
    int64_t i = 0;                                                                   \
    double d = 0;                                                                    \
    uint64_t u = 0;                                                                  \
    std::string s;                                                                   \
    Status st = parse_value(info, text, &e, &i, &d, &u, &s);                         \
    if (!st.is_ok()) return st;                                                      \
    assign(p.field, e, i, d, u, s);                                                  \
  }
#include "common/params.def"
#undef TRIM_PARAM
  Status cross = check_cross(p);
  if (!cross.is_ok()) return cross;
  return p;
}

Result<Params> load_params_from_env(std::vector<std::string>* warnings) {
  if (warnings != nullptr && environ != nullptr) {
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (std::strncmp(*e, "NCCL_TRIM_", 10) != 0 || eq == nullptr) continue;
      std::string name(*e, static_cast<size_t>(eq - *e));
      // NCCL_TRIM_LIB_DIR belongs to the nccl_trim Python package (the folder it loads the
      // libraries from), which sets it in the very processes that load the plugin: no typo.
      bool known = name == "NCCL_TRIM_LIB_DIR";
      for (const ParamInfo& info : param_infos()) known = known || name == info.env;
      if (!known) warnings->push_back(fmt::format("{} is not a known NCCL_TRIM_* variable; ignored", name));
    }
  }
  return load_params([](const char* name) { return std::getenv(name); });
}

Result<Params> process_params(std::vector<std::string>* new_warnings) {
  // What identifies a load: every NCCL_TRIM_* variable and its value, in environment order.
  std::string fingerprint;
  if (environ != nullptr) {
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "NCCL_TRIM_", 10) == 0) (fingerprint += *e) += '\n';
    }
  }
  static std::mutex* mu = new std::mutex();  // never destroyed: engine threads may outlive statics
  static std::string* loaded_fingerprint = nullptr;
  static Result<Params>* loaded = nullptr;
  std::lock_guard<std::mutex> lock(*mu);
  if (loaded != nullptr && *loaded_fingerprint == fingerprint) return *loaded;
  std::vector<std::string> warnings;
  Result<Params> p = load_params_from_env(&warnings);
  if (loaded == nullptr) {
    loaded = new Result<Params>(p);
    loaded_fingerprint = new std::string(fingerprint);
  } else {
    *loaded = p;
    *loaded_fingerprint = fingerprint;
  }
  if (new_warnings != nullptr) *new_warnings = std::move(warnings);
  return p;
}

namespace {

// "head_bits" -> "HeadBits"; "reduce_scatter" -> "kReduceScatter"; "16" -> "k16".
std::string camel(const std::string& snake) {
  std::string out;
  bool up = true;
  for (char c : snake) {
    if (c == '_' || c == '-') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

}  // namespace

std::string params_enum_header() {
  std::string out =
      "// Generated from common/params.def by `make docs` (trim-config --enums); a test fails when it\n"
      "// is stale. One enum per enum knob, its values in the order of the knob's choices (which is\n"
      "// the index Params stores), and a typed accessor, so no code compares bare indexes.\n"
      "#pragma once\n\n#include \"common/params.h\"\n\nnamespace trim::param {\n";
  // The fields' names, in the list's order (param_infos() is in the same order).
  static const char* const kFields[] = {
#define TRIM_PARAM(field, NAME, kind, def, lo, hi, choices, doc) #field,
#include "common/params.def"
#undef TRIM_PARAM
  };
  const std::vector<ParamInfo>& infos = param_infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    const ParamInfo* info = &infos[i];
    if (info->kind != ParamKind::kEnum) continue;
    const std::string field = kFields[i];
    const std::string type = camel(field);
    out += fmt::format("\n// {}: {}\nenum class {} : int {{", info->env, info->choices, type);
    std::string choices = info->choices;
    int index = 0;
    for (size_t start = 0; start <= choices.size();) {
      size_t bar = choices.find('|', start);
      if (bar == std::string::npos) bar = choices.size();
      out += fmt::format("{} k{} = {}", index == 0 ? "" : ",", camel(choices.substr(start, bar - start)), index);
      ++index;
      start = bar + 1;
    }
    out += fmt::format(" }};\ninline {} {}(const Params& p) {{ return static_cast<{}>(p.{}); }}\n", type, field, type,
                       field);
  }
  out += "\n}  // namespace trim::param\n";
  return out;
}

Params default_params() {
  Result<Params> p = load_params(EnvLookup());
  return p.value();  // defaults are checked by the params test
}

std::string params_markdown() {
  std::string out =
      "# Configuration\n\n"
      "Every knob is an environment variable read once when the plugin (or a tool) starts.\n"
      "A value outside the allowed set is an error that names the variable, the value and what\n"
      "is allowed. Unknown `NCCL_TRIM_*` variables are reported as warnings (typos).\n\n"
      "<!-- Generated from common/params.def by `make docs`; a test fails when this file is stale. -->\n\n"
      "| Variable | Type | Default | Allowed | Description |\n"
      "|---|---|---|---|---|\n";
  // A '|' inside a cell would end it: escape it.
  auto cell = [](std::string text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  for (const ParamInfo& info : param_infos()) {
    out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", info.env, kind_name(info.kind),
                       info.default_text, cell(allowed_text(info)), cell(info.doc));
  }
  out +=
      "\n## GPU buffers: NCCL stages them through host memory\n\n"
      "The plugin advertises `NCCL_PTR_HOST` only and makes no CUDA call. On a GPU machine NCCL's own\n"
      "kernel copies each slice between GPU memory and pinned host buffers that NCCL allocates, exactly\n"
      "as it does for its Socket transport, and the plugin encodes and decodes those host buffers on its\n"
      "codec threads (`NCCL_TRIM_CODEC_THREADS`). A CUDA call from NCCL's proxy thread can wait behind the\n"
      "application's own CUDA calls while NCCL's kernel waits for the proxy: a deadlock no plugin can\n"
      "rule out (docs/ARCHITECTURE.md). So there is no GPU-buffer knob, and\n"
      "`NCCL_NET_GDR_LEVEL`/`NCCL_NET_GDR_READ` change nothing for this plugin. The GPU Randomized\n"
      "Hadamard Transform belongs on the application's stream, in the PyTorch comm hook.\n"
      "\n## Not the plugin's\n\n"
      "`NCCL_TRIM_LIB_DIR` is read by the `nccl_trim` Python package only (the folder its libraries are\n"
      "taken from, e.g. a checkout's `build/lib`; python/nccl_trim/README.md). The plugin neither reads\n"
      "it nor warns about it.\n";
  return out;
}

}  // namespace trim

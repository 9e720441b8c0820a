#include "uop/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "uop/error.h"

namespace kiln {
namespace {

std::string_view trim(std::string_view s) {
  const char* space = " \t\n\r\f\v";
  size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

std::string to_case(std::string_view s, int (*convert)(int)) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(convert(static_cast<unsigned char>(c)));
  return out;
}

// hi == INT_MAX means "no upper bound", so the hint reads ">= 1" rather than "1..2147483647".
int parse_int(std::string_view source, std::string_view text, int lo, int hi) {
  std::string accepted = hi == INT_MAX ? cat("use an integer >= ", lo) : cat("use an integer ", lo, "..", hi);
  std::string_view digits = trim(text);
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  bool whole = ec != std::errc::invalid_argument && end == digits.data() + digits.size();
  if (!whole) throw Error(cat(source, "=\"", text, "\" is not a number; ", accepted));
  if (ec == std::errc::result_out_of_range || value < lo || value > hi)
    throw Error(cat(source, "=\"", text, "\" is out of range; ", accepted));
  return value;
}

bool parse_bool(std::string_view source, std::string_view text) {
  std::string word = to_case(trim(text), ::tolower);
  if (word == "1" || word == "true") return true;
  if (word == "0" || word == "false") return false;
  throw Error(cat(source, "=\"", text, "\" is not a boolean; use 0, 1, true or false"));
}

// The XDG base-directory spec says to ignore an empty or relative XDG_CACHE_HOME.
std::string default_cache_dir(const std::function<const char*(const char*)>& getenv_fn) {
  const char* xdg = getenv_fn("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return cat(xdg, "/kiln");
  const char* home = getenv_fn("HOME");
  if (home && home[0] != '\0') return cat(home, "/.cache/kiln");
  return "/tmp/kiln-cache";
}

}  // namespace

const std::vector<KnobInfo>& Config::knobs() {
  // Captureless lambdas, so each entry is plain data; the order here is the order of `kiln --help`.
  static const std::vector<KnobInfo> list = {
      {"debug", "KILN_DEBUG", "0",
       "debug output: 1 devices and kernel counts, 2 a line per kernel, 3 opts, 4 source, 5 uops, 6 linear uops",
       [](const Config& c) { return std::to_string(c.debug); },
       [](Config& c, std::string_view src, std::string_view text) { c.debug = parse_int(src, text, 0, 6); }},
      {"device", "KILN_DEVICE", "(automatic)", "default device name, e.g. CPU",
       [](const Config& c) { return c.device; },
       [](Config& c, std::string_view, std::string_view text) { c.device = to_case(trim(text), ::toupper); }},
      {"beam", "KILN_BEAM", "0", "beam width of the kernel optimization search; 0 turns search off",
       [](const Config& c) { return std::to_string(c.beam); },
       [](Config& c, std::string_view src, std::string_view text) { c.beam = parse_int(src, text, 0, INT_MAX); }},
      {"cache_dir", "KILN_CACHE_DIR", "$XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln, else /tmp/kiln-cache",
       "directory of the on-disk kernel and search cache",
       [](const Config& c) { return c.cache_dir; },
       [](Config& c, std::string_view, std::string_view text) { c.cache_dir = trim(text); }},
      {"jit", "KILN_JIT", "1", "capture a training step's kernels once and replay them (0/1/true/false)",
       [](const Config& c) { return std::string(c.jit ? "1" : "0"); },
       [](Config& c, std::string_view src, std::string_view text) { c.jit = parse_bool(src, text); }},
      {"jit_check", "KILN_JIT_CHECK", "0", "rebuild every captured step on each call and compare it with the capture (0/1/true/false)",
       [](const Config& c) { return std::string(c.jit_check ? "1" : "0"); },
       [](Config& c, std::string_view src, std::string_view text) { c.jit_check = parse_bool(src, text); }},
      {"strict", "KILN_STRICT", "0", "deploy mode: compiling a kernel after a captured step replays is an error (0/1/true/false)",
       [](const Config& c) { return std::string(c.strict ? "1" : "0"); },
       [](Config& c, std::string_view src, std::string_view text) { c.strict = parse_bool(src, text); }},
      {"fuzz", "KILN_FUZZ", "1", "multiplier for randomized test counts, for longer local runs",
       [](const Config& c) { return std::to_string(c.fuzz); },
       [](Config& c, std::string_view src, std::string_view text) { c.fuzz = parse_int(src, text, 1, INT_MAX); }},
      {"spirv_val", "KILN_SPIRV_VAL", "0", "VULKAN checks every SPIR-V module it compiles with spirv-val (0/1/true/false)",
       [](const Config& c) { return std::string(c.spirv_val ? "1" : "0"); },
       [](Config& c, std::string_view src, std::string_view text) { c.spirv_val = parse_bool(src, text); }},
      {"cpu_compiler", "KILN_CPU_COMPILER", "auto",
       "the CPU device's compiler: auto (in-process LLVM when libLLVM 14 loads, else a C compiler process), llvm (no fallback), c",
       [](const Config& c) { return c.cpu_compiler; },
       [](Config& c, std::string_view src, std::string_view text) {
         std::string v = to_case(trim(text), ::tolower);
         if (v != "auto" && v != "llvm" && v != "c")
           throw Error(cat(src, "=", text, ": expected auto, llvm or c (the CPU device's compiler)"));
         c.cpu_compiler = v;
       }},
      {"cuda_compile_only", "KILN_CUDA_COMPILE_ONLY", "0",
       "kiln_tests only: every kernel the run lowers is also lowered for a CUDA DeviceSpec and compiled with NVRTC (0/1/true/false)",
       [](const Config& c) { return std::string(c.cuda_compile_only ? "1" : "0"); },
       [](Config& c, std::string_view src, std::string_view text) { c.cuda_compile_only = parse_bool(src, text); }},
  };
  return list;
}

Config Config::from_env() {
  return from_env([](const char* name) -> const char* { return std::getenv(name); });
}

Config Config::from_env(const std::function<const char*(const char*)>& getenv_fn) {
  Config config;
  for (const KnobInfo& knob : knobs()) {
    const char* text = getenv_fn(knob.env);
    // `KILN_DEBUG= kiln ...` is a common way to switch a knob back off, so blank means "default".
    if (text && !trim(text).empty()) knob.parse(config, knob.env, text);
  }
  config.user_cache_dir = default_cache_dir(getenv_fn);
  if (config.cache_dir.empty()) config.cache_dir = config.user_cache_dir;
  const char* mpi_size = getenv_fn("OMPI_COMM_WORLD_SIZE");
  if (mpi_size && !trim(mpi_size).empty()) config.mpi_world_size = parse_int("OMPI_COMM_WORLD_SIZE", mpi_size, 1, INT_MAX);
  const char* local_size = getenv_fn("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local_size && !trim(local_size).empty()) config.mpi_local_size = parse_int("OMPI_COMM_WORLD_LOCAL_SIZE", local_size, 1, INT_MAX);
  return config;
}

std::string Config::describe() const {
  std::ostringstream out;
  for (const KnobInfo& knob : knobs()) {
    out << std::left << std::setw(16) << knob.env << std::setw(24) << cat("=\"", knob.get(*this), "\"") << knob.help
        << " (default " << knob.default_value << ")\n";
  }
  return out.str();
}

Config& config() {
  static Config instance = Config::from_env();  // a function-local static is initialized exactly once
  return instance;
}

}  // namespace kiln

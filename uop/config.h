// Config: every kiln knob in one struct, read from the environment once and overridable from code.
//
//   if (config().debug >= 2) print_kernel_line(k);
//   config().beam = 4;                           // override from code (before starting work)
//   Config c = Config::from_env(fake_getenv);    // tests: parse a made-up environment
//   std::cout << config().describe();            // `kiln --help`: every knob, its variable and value
//
// Knobs are listed once, in Config::knobs(); from_env, describe and README generation all walk that list,
// so adding a knob means adding a field here and one entry there. std::getenv is called only in config.cpp.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct Config;

// One knob: what `kiln --help` and the README say about it, and how to read and write its value as text.
struct KnobInfo {
  const char* name;           // field name in Config, e.g. "debug"
  const char* env;            // environment variable, e.g. "KILN_DEBUG"
  const char* default_value;  // the default, as text for people
  const char* help;           // one line
  std::string (*get)(const Config&);
  // Parses `text` into the knob; throws Error naming `source` (the variable or, later, the CLI flag).
  void (*parse)(Config&, std::string_view source, std::string_view text);
};

struct Config {
  int debug = 0;          // KILN_DEBUG, 0..6 (1 devices+kernel counts; 2 a line per kernel; 3 opts; 4 source; 5 uops; 6 linear uops)
  std::string device;     // KILN_DEVICE, default device name, upper-case ("" = choose automatically)
  int beam = 0;           // KILN_BEAM, beam width, 0 = search off; >= 0
  std::string cache_dir;  // KILN_CACHE_DIR; from_env fills the default ($XDG_CACHE_HOME/kiln, $HOME/.cache/kiln, /tmp/kiln-cache)
  bool jit = true;        // KILN_JIT: kiln::Jit captures and replays steps (0: every call runs eagerly)
  bool jit_check = false; // KILN_JIT_CHECK: every call of a captured step rebuilds it and compares with the capture
  bool strict = false;    // KILN_STRICT: compiling a kernel once a captured step replays is an error
  int fuzz = 1;           // KILN_FUZZ: multiplier for randomized test counts (longer local runs), >= 1
  bool spirv_val = false; // KILN_SPIRV_VAL: the VULKAN device runs spirv-val on every module it compiles
  std::string cpu_compiler = "auto";  // KILN_CPU_COMPILER: the CPU device's compiler: auto (LLVM in-process, else C), llvm, c
  bool cuda_compile_only = false;  // KILN_CUDA_COMPILE_ONLY: the test runner also compiles every kernel of the run with NVRTC
  // Not a knob: the user's cache directory for kiln ($XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln, else
  // /tmp/kiln-cache), whatever KILN_CACHE_DIR says: where `make deps` (scripts/deps.sh) unpacks MNIST.
  std::string user_cache_dir;
  // Not a knob: what the launcher says about this process. Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE
  // in each process it starts; frontend/distributed.h loads MPI only then. 0: not started by mpirun.
  int mpi_world_size = 0;
  // OMPI_COMM_WORLD_LOCAL_SIZE: the job's ranks on this machine; the CPU devices share its cores among
  // them (host_threads() in devices/host.cpp). 0: not started by mpirun.
  int mpi_local_size = 0;

  // Reads the KILN_* variables; an unset or blank variable keeps its default. Throws Error on a bad value.
  static Config from_env();
  static Config from_env(const std::function<const char*(const char*)>& getenv_fn);

  // One line per knob: variable, current value, help and default.
  std::string describe() const;

  static const std::vector<KnobInfo>& knobs();
};

// The process-wide configuration: from_env() on first use (thread-safe), then mutable from code.
// Writes are not synchronized: change knobs at startup or in tests, not while kernels are running.
Config& config();

}  // namespace kiln

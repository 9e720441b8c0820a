#include "bench_reference.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "bench_reference_source.h"  // kBenchReferenceSource: tools/bench_reference.c, embedded by CMake
#include "uop/error.h"

namespace kiln {
namespace {

// Same kind of flags as kiln's CPU kernels (devices/cpu.cpp), with -O3 because gcc 12 vectorizes only there.
const std::vector<std::string> kReferenceFlags = {"-O3", "-march=native", "-fno-math-errno", "-fopenmp"};
const char* const kInstallHint = "install gcc (apt-get install gcc; it brings OpenMP's libgomp) and put it on PATH";

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& word : words) out += (out.empty() ? "" : " ") + word;
  return out;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs argv (argv[0] found on PATH), stdout and stderr into `log`, stdin from /dev/null; returns the exit
// status. No shell, so paths need no quoting. Throws Error when the program cannot be started.
int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int failed = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0) throw Error(cat("bench: cannot run ", argv[0], ": ", std::strerror(failed), "; ", kInstallHint));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A directory under $TMPDIR that removes itself.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      throw Error(cat("bench: cannot create a temporary directory ", pattern, ": ", std::strerror(errno),
                      "; set TMPDIR to a writable directory"));
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // leftovers in $TMPDIR are harmless; a failed cleanup must not hide a real error
    std::filesystem::remove_all(path, ignored);
  }
};

template <typename Fn>
void bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (!fn)
    throw Error(cat("bench: the compiled references have no function ", name, " (bench_reference.c defines it)"));
}

}  // namespace

CReference CReference::build() {
  auto start = std::chrono::steady_clock::now();
  TempDir dir;
  std::filesystem::path source = dir.path / "bench_reference.c", library = dir.path / "bench_reference.so",
                        log = dir.path / "gcc.log";
  std::ofstream out(source);
  out << kBenchReferenceSource;
  out.close();
  if (!out)
    throw Error(cat("bench: cannot write ", source.string(), " (disk full?); set TMPDIR to a writable directory"));

  std::string version = "gcc";
  if (run_logged({"gcc", "-dumpfullversion"}, log) == 0) {
    std::string text = read_text(log);
    version = cat("gcc ", text.substr(0, text.find('\n')));
  }
  std::vector<std::string> argv = {"gcc"};
  argv.insert(argv.end(), kReferenceFlags.begin(), kReferenceFlags.end());
  argv.insert(argv.end(), {"-shared", "-fPIC", source.string(), "-o", library.string(), "-lm"});
  if (run_logged(argv, log) != 0)
    throw Error(cat("bench: compiling the C/OpenMP references failed:\n$ ", join(argv), "\n", read_text(log),
                    "(the references need gcc with OpenMP; ", kInstallHint, ")"));

  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);  // stays mapped after the directory is removed
  if (!handle) throw Error(cat("bench: loading the compiled C/OpenMP references failed: ", dlerror()));
  CReference ref;
  bind(handle, "ref_threads", ref.threads);
  bind(handle, "ref_relu_fma", ref.relu_fma);
  bind(handle, "ref_sum", ref.sum);
  bind(handle, "ref_softmax_rows", ref.softmax_rows);
  bind(handle, "ref_triad", ref.triad);
  bind(handle, "ref_fma_peak", ref.fma_peak);
  ref.compiler = cat(version, " ", join(kReferenceFlags));
  ref.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ref;
}

OpenBlas OpenBlas::load() {
  OpenBlas blas;
  void* handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    blas.problem =
        cat("dlopen(\"libopenblas.so.0\") failed: ", dlerror(), "; install it with apt-get install libopenblas-dev");
    return blas;
  }
  blas.sgemm = reinterpret_cast<Sgemm>(dlsym(handle, "cblas_sgemm"));
  if (!blas.sgemm) {
    blas.problem = "libopenblas.so.0 has no cblas_sgemm";
    return blas;
  }
  // Both are OpenBLAS extensions, present in every release since 0.2; a missing one only costs the label.
  auto corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  auto config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
  blas.core = corename ? corename() : "unknown core";
  blas.config = config ? config() : "";
  while (!blas.config.empty() && blas.config.back() == ' ') blas.config.pop_back();
  return blas;
}

}  // namespace kiln

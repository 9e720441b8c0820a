// The C compiler of the host kit (host.h): clang (or gcc) as a process per kernel, the shared object
// cached on disk and loaded through a memfd with dlopen, so no file is left behind. The CLANG device is
// this compiler; the CPU device uses it when the in-process LLVM compiler is unavailable.
#include "devices/host.h"
#include "uop/process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "uop/config.h"
#include "uop/hash.h"

namespace kiln {
namespace {

// No -ffast-math: NaN and inf must propagate. -fno-math-errno lets sqrt and friends inline. -fwrapv:
// kiln's integers wrap (uop/ops.h), which C leaves undefined for signed types. -ffp-contract=fast: a
// multiply and the add that consumes it become one FMA (one rounding, not two) even across statements,
// as the renderer writes them; without it a matmul's inner loop is vmulps + vaddps, never vfmadd.
const std::vector<std::string> kCompileFlags = {"-O2", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fwrapv",
                                                "-fno-plt", "-ffp-contract=fast"};


std::atomic<size_t> compiler_runs{0};

std::string join(const std::vector<std::string>& words, const char* separator = " ") {
  std::string out;
  for (const std::string& word : words) out += (out.empty() ? "" : separator) + word;
  return out;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }


// The C compiler and what it targets. `fingerprint` holds everything besides the source that changes the
// compiled code, so it goes into every compile cache key.
struct Toolchain {
  std::string program;  // "clang" or "gcc", found on PATH
  std::string version;  // first line of its version output
  std::string arch;     // what -march=native resolves to
  std::string fingerprint;
};


// The value after each `"flag" "` in clang's -### output, in order.
std::vector<std::string> quoted_values_after(const std::string& text, const std::string& flag) {
  std::vector<std::string> values;
  std::string marker = cat("\"", flag, "\" \"");
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
    size_t begin = at + marker.size(), end = text.find('"', begin);
    values.push_back(text.substr(begin, end - begin));
  }
  return values;
}

// `clang -march=native -###` prints its version, then the cc1 command with "-target-cpu" "NAME" and one
// "-target-feature" "+avx2" pair per feature.
Toolchain probe_clang() {
  ProcessResult r = run_process({"clang", "-march=native", "-###", "-x", "c", "/dev/null"});
  if (r.exit_code != 0) throw Error(cat("clang -march=native -### failed: ", first_line(r.output)));
  std::vector<std::string> cpus = quoted_values_after(r.output, "-target-cpu");
  std::vector<std::string> listed = quoted_values_after(r.output, "-target-feature");
  std::set<std::string> features(listed.begin(), listed.end());
  std::string cpu = cpus.empty() ? "unknown" : cpus[0];
  std::string arch = cpu == "x86-64" ? x86_64_level(features) : cpu;
  std::string version = first_line(r.output);
  return {"clang", version, arch, cat(version, '\n', cpu, '\n', join({features.begin(), features.end()}, ","))};
}

// gcc names the CPU itself: `gcc -march=native -Q --help=target` has a line "  -march=  znver3", and the
// rest of that listing (every target option's value) makes the fingerprint.
Toolchain probe_gcc() {
  ProcessResult version = run_process({"gcc", "--version"});
  ProcessResult target = run_process({"gcc", "-march=native", "-Q", "--help=target"});
  if (version.exit_code != 0 || target.exit_code != 0)
    throw Error(cat("gcc -march=native -Q --help=target failed: ", first_line(target.output)));
  std::string arch = "native";
  size_t at = target.output.find("-march=");
  if (at != std::string::npos) {
    size_t begin = target.output.find_first_not_of(" \t", at + 7), end = target.output.find('\n', begin);
    arch = target.output.substr(begin, end - begin);
  }
  return {"gcc", first_line(version.output), arch, cat(first_line(version.output), '\n', target.output)};
}

Toolchain probe_any() {
  std::string clang_problem, gcc_problem;
  try {
    return probe_clang();
  } catch (const Error& e) {
    clang_problem = e.what();
  }
  try {
    return probe_gcc();
  } catch (const Error& e) {
    gcc_problem = e.what();
  }
  throw Error(cat("no working C compiler: ", clang_problem, "; ", gcc_problem,
                  "; install clang (apt-get install clang) or gcc and put it on PATH"));
}

// Probed once per process and program: each probe starts the compiler driver (tens of milliseconds).
const Toolchain& toolchain(const std::string& program) {
  static std::mutex mu;
  static std::map<std::string, Toolchain> found;  // never erased: compilers keep references
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = found.find(program); it != found.end()) return it->second;
  Toolchain tc;
  if (program.empty()) tc = probe_any();
  else if (program == "clang") tc = probe_clang();
  else if (program == "gcc") tc = probe_gcc();
  else throw Error(cat("make_c_compiler: unknown C compiler \"", program, "\"; use \"clang\", \"gcc\" or \"\" (clang, else gcc)"));
  return found.emplace(program, std::move(tc)).first->second;
}

std::optional<std::vector<uint8_t>> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return bytes;
}

bool is_elf(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t written = write(fd, p, n);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    p += written;
    n -= size_t(written);
  }
  return true;
}

// A shared object opened from bytes. glibc's dlopen first looks for an already-loaded object with the
// same path and returns it, so the path must stay unique while this one is loaded: the memfd (or the
// temp file) is kept until after dlclose.
struct SharedObject {
  void* handle = nullptr;
  int fd = -1;
  std::string temp_path;

  SharedObject() = default;
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject() {
    if (handle) dlclose(handle);
    if (fd >= 0) close(fd);
    if (!temp_path.empty()) unlink(temp_path.c_str());
  }
};

bool path_loaded(const std::string& path) {
  void* existing = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (existing) dlclose(existing);
  return existing != nullptr;
}

// Where to dlopen the bytes from: a memfd via /proc/self/fd, or (no memfd, no /proc) a temp file.
std::string place_bytes(SharedObject& so, const Binary& binary, const std::string& device) {
  so.fd = memfd_create("kiln-kernel", MFD_CLOEXEC);
  if (so.fd >= 0 && write_all(so.fd, binary.data.data(), binary.data.size())) {
    std::string path = cat("/proc/self/fd/", so.fd);
    if (access(path.c_str(), R_OK) == 0 && !path_loaded(path)) return path;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "kiln-XXXXXX.so").string();
  int fd = mkstemps(pattern.data(), 3);
  if (fd < 0) throw Error(cat(device, ": loading kernel ", binary.name, ": cannot create ", pattern, ": ", std::strerror(errno)));
  so.temp_path = pattern;
  bool written = write_all(fd, binary.data.data(), binary.data.size());
  close(fd);
  if (!written) throw Error(cat(device, ": loading kernel ", binary.name, ": cannot write ", pattern, ": ", std::strerror(errno)));
  return pattern;
}


class CCompiler : public HostCompiler {
 public:
  CCompiler(const std::string& device, const Toolchain& tc, std::vector<std::string> flags)
      : device_(device), tc_(tc), flags_(std::move(flags)), identity_(cat(tc.version, " ", join(flags_))) {}

  Language language() const override { return Language::C; }
  const std::string& arch() const override { return tc_.arch; }
  const std::string& identity() const override { return identity_; }
  Binary compile(const std::string& source, const std::string& name) override;
  std::pair<HostKernelFn, std::shared_ptr<void>> load(const Binary& binary) override;

 private:
  std::string device_;
  const Toolchain& tc_;
  std::vector<std::string> flags_;  // kCompileFlags, then the device's own
  std::string identity_;
};

// The on-disk cache: <cache_dir>/compile/<hash of source and toolchain>.so. The compiler writes a file
// of its own name and rename() publishes it whole, so concurrent processes never see half a file.
Binary CCompiler::compile(const std::string& source, const std::string& name) {
  std::string dir = config().cache_dir + "/compile";
  std::string key = hash_hex(hash_string(cat(source, '\0', tc_.fingerprint, '\0', join(flags_))));
  std::string cached = cat(dir, "/", key, ".so");
  // An entry that is not ELF (a disk error, a foreign file) is a miss; the rename below replaces it.
  if (auto bytes = read_file(cached); bytes && is_elf(*bytes)) return Binary{name, std::move(*bytes)};

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(cat(device_, ": compiling kernel ", name, ": cannot create the compile cache directory ", dir, ": ",
                    ec.message(), "; set KILN_CACHE_DIR to a writable directory"));
  std::string c_path = cat(dir, "/", key, "-XXXXXX.c");
  int fd = mkstemps(c_path.data(), 2);
  if (fd < 0)
    throw Error(cat(device_, ": compiling kernel ", name, ": cannot create a file in ", dir, ": ", std::strerror(errno),
                    "; set KILN_CACHE_DIR to a writable directory"));
  bool written = write_all(fd, source.data(), source.size());
  close(fd);
  std::string so_path = c_path.substr(0, c_path.size() - 2) + ".so.tmp";
  if (!written) {
    unlink(c_path.c_str());
    throw Error(cat(device_, ": compiling kernel ", name, ": cannot write ", c_path, " (disk full?)"));
  }

  std::vector<std::string> argv = {tc_.program};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  argv.insert(argv.end(), {"-x", "c", c_path, "-o", so_path, "-lm"});
  ProcessResult result;
  try {
    result = run_process(argv);
  } catch (const Error&) {
    unlink(c_path.c_str());
    throw;
  }
  ++compiler_runs;
  unlink(c_path.c_str());
  if (result.exit_code != 0) {
    unlink(so_path.c_str());
    throw CompileError(device_, name, cat("$ ", join(argv), "\n", result.output), source);
  }
  std::optional<std::vector<uint8_t>> bytes = read_file(so_path);
  if (!bytes || !is_elf(*bytes)) {
    unlink(so_path.c_str());
    throw Error(cat(device_, ": compiling kernel ", name, ": the compiler succeeded but ", so_path,
                    " is missing or not a shared object: $ ", join(argv)));
  }
  if (std::rename(so_path.c_str(), cached.c_str()) != 0) unlink(so_path.c_str());  // still usable uncached
  return Binary{name, std::move(*bytes)};
}

std::pair<HostKernelFn, std::shared_ptr<void>> CCompiler::load(const Binary& binary) {
  auto so = std::make_shared<SharedObject>();
  std::string path = place_bytes(*so, binary, device_);
  so->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!so->handle)
    throw Error(cat(device_, ": loading kernel ", binary.name, ": dlopen failed: ", dlerror(),
                    "; the binary must be a shared object compiled for this machine by the C compiler of this device"));
  dlerror();  // clear, so a null from dlsym is told apart from a symbol whose value is null
  auto fn = reinterpret_cast<HostKernelFn>(dlsym(so->handle, binary.name.c_str()));
  if (!fn) {
    const char* why = dlerror();
    throw Error(cat(device_, ": loading kernel ", binary.name, ": no entry point named \"", binary.name,
                    "\" in the binary (dlsym: ", why ? why : "null symbol", "); the kernel's C function must have this name"));
  }
  return {fn, std::move(so)};
}


}  // namespace

std::unique_ptr<HostCompiler> make_c_compiler(const std::string& device_name, const std::string& program,
                                              const std::vector<std::string>& extra_flags) {
  std::vector<std::string> flags = kCompileFlags;
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  return std::make_unique<CCompiler>(device_name, toolchain(program), std::move(flags));
}

size_t cpu_compiler_invocations() { return compiler_runs.load(); }

}  // namespace kiln

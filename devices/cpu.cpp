// The CPU device (see cpu.h for the kernel ABI). Compiling runs the system C compiler as a process;
// loading goes through a memfd so no file is left behind; memory is host memory.
#include "devices/cpu.h"
#include "uop/process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

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

// Buffers this large come from mmap with transparent huge pages: first touch of 4 KiB pages is very
// slow on these machines (NOTES.md), and huge pages cut it about 60x.
constexpr size_t kHugePage = size_t(2) << 20;

std::atomic<size_t> compiler_runs{0};

std::string join(const std::vector<std::string>& words, const char* separator = " ") {
  std::string out;
  for (const std::string& word : words) out += (out.empty() ? "" : separator) + word;
  return out;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The C compiler and what it targets. `fingerprint` holds everything besides the source that changes the
// compiled code, so it goes into every compile cache key.
struct Toolchain {
  std::string program;  // "clang" or "gcc", found on PATH
  std::string version;  // first line of its version output
  std::string arch;     // what -march=native resolves to
  std::string fingerprint;
};

// clang 14 resolves -march=native here to target-cpu "x86-64" plus a feature list (NOTES.md), so the
// x86-64 micro-architecture level is the most telling name for it.
std::string x86_64_level(const std::set<std::string>& features) {
  auto has_all = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* f) { return features.count(cat("+", f)) > 0; });
  };
  if (!has_all({"cx16", "popcnt", "sse4.2", "ssse3", "sahf"})) return "x86-64";
  if (!has_all({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"})) return "x86-64-v2";
  if (!has_all({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})) return "x86-64-v3";
  return "x86-64-v4";
}

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

// Probed once per process: each probe starts the compiler driver (tens of milliseconds).
const Toolchain& toolchain() {
  static const Toolchain found = [] {
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
  }();
  return found;
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
std::string place_bytes(SharedObject& so, const Binary& binary) {
  so.fd = memfd_create("kiln-kernel", MFD_CLOEXEC);
  if (so.fd >= 0 && write_all(so.fd, binary.data.data(), binary.data.size())) {
    std::string path = cat("/proc/self/fd/", so.fd);
    if (access(path.c_str(), R_OK) == 0 && !path_loaded(path)) return path;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "kiln-XXXXXX.so").string();
  int fd = mkstemps(pattern.data(), 3);
  if (fd < 0) throw Error(cat("CPU: loading kernel ", binary.name, ": cannot create ", pattern, ": ", std::strerror(errno)));
  so.temp_path = pattern;
  bool written = write_all(fd, binary.data.data(), binary.data.size());
  close(fd);
  if (!written) throw Error(cat("CPU: loading kernel ", binary.name, ": cannot write ", pattern, ": ", std::strerror(errno)));
  return pattern;
}

using KernelFn = void (*)(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end);

// Helper threads that run a launch's chunks beside the caller, one launch at a time.
//
// Why not the pool's workers: they sleep on a condition variable between tasks, and waking a sleeping
// thread takes up to milliseconds on these virtual machines (the host deschedules an idle vCPU). A
// memory-bound kernel of a few milliseconds then ran both halves on the caller (half the bandwidth), or
// the woken worker preempted the caller on its core and ran both itself: `kiln bench` saw 50% or 100%
// of the OpenMP reference from run to run. These helpers spin for kSpinAfterLaunch after each launch
// before they sleep (as OpenMP's threads do), so back-to-back launches find them awake, and there is
// one fewer of them than cores, since the caller works too.
class LaunchTeam {
 public:
  explicit LaunchTeam(int helpers) {
    for (int i = 0; i < helpers; ++i) helpers_.emplace_back([this] { help(); });
  }
  ~LaunchTeam() {
    stopping_ = true;
    {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    for (std::thread& t : helpers_) t.join();
  }

  // Cuts [0, n) into `chunks` contiguous parts that the caller and the helpers claim in turn; returns
  // false, having run nothing, when another launch holds the team.
  bool run(int64_t n, int64_t chunks, const std::function<void(int64_t, int64_t)>& body) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    // The job's fields are written only while no helper is inside (see the end of this function).
    body_ = &body;
    n_ = n;
    chunks_ = chunks;
    next_ = 0;
    done_ = 0;
    open_.store(true);
    generation_.fetch_add(1);
    if (sleeping_.load() > 0) {  // seq_cst with the helper's sleeping_++ then generation_ check: no lost wakeup
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    run_chunks();
    wait_until([&] { return done_.load() == chunks_; });
    open_.store(false);
    wait_until([&] { return inside_.load() == 0; });  // no helper still reads the fields
    return true;
  }

 private:
  // Long enough to cover the gap between the kernels of one realize and between realizes in a loop
  // (graph building and a cached schedule take tens of microseconds); short enough to give the core
  // back soon when nothing follows.
  static constexpr auto kSpinAfterLaunch = std::chrono::milliseconds(1);

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  template <typename Done>
  static void wait_until(Done done) {
    for (int spins = 0; !done(); ++spins) {
      pause();
      if (spins > 4096) std::this_thread::yield();  // a helper was preempted mid-chunk: let it run
    }
  }

  void run_chunks() {
    int64_t chunk = (n_ + chunks_ - 1) / chunks_;
    for (int64_t i = next_.fetch_add(1); i < chunks_; i = next_.fetch_add(1)) {
      int64_t lo = i * chunk, hi = std::min(n_, lo + chunk);
      if (lo < hi) (*body_)(lo, hi);
      done_.fetch_add(1);
    }
  }

  void help() {
    uint64_t seen = 0;
    while (!stopping_) {
      auto deadline = std::chrono::steady_clock::now() + kSpinAfterLaunch;
      for (int spins = 0; generation_.load() == seen && !stopping_; ++spins) {
        pause();
        if (spins % 256 != 255 || std::chrono::steady_clock::now() < deadline) continue;
        std::unique_lock<std::mutex> lock(sleep_mu_);
        ++sleeping_;
        wake_.wait(lock, [&] { return generation_.load() != seen || stopping_; });
        --sleeping_;
      }
      seen = generation_.load();
      ++inside_;
      if (open_.load()) run_chunks();
      --inside_;
    }
  }

  std::mutex busy_;  // held by the launch using the team
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};  // one more per launch
  std::atomic<bool> open_{false}, stopping_{false};
  std::atomic<int> inside_{0}, sleeping_{0};
  std::atomic<int64_t> next_{0}, done_{0};
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::vector<std::thread> helpers_;
};

// One team for the process (every CPU device and program shares the cores), started on first use and
// leaked on purpose: a program may launch from a static object's destructor.
LaunchTeam& launch_team() {
  static LaunchTeam* team = new LaunchTeam(int(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return *team;
}

class CpuProgram : public Program {
 public:
  CpuProgram(std::unique_ptr<SharedObject> so, KernelFn fn, std::string name, int threads)
      : so_(std::move(so)), fn_(fn), name_(std::move(name)), threads_(threads) {}

  double launch(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims,
                bool timed) override {
    const auto& [global, local] = dims;
    if (global[0] < 0 || global[1] != 1 || global[2] != 1 || local != std::array<int64_t, 3>{1, 1, 1})
      throw Error(cat("CPU: launch of kernel ", name_, " with global {", global[0], ", ", global[1], ", ", global[2],
                      "} and local {", local[0], ", ", local[1], ", ", local[2],
                      "}: the CPU device runs global {n, 1, 1} with local {1, 1, 1} only (its DeviceSpec says so)"));
    std::vector<void*> pointers(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) pointers[i] = bufs[i].handle;
    const int64_t* var_values = vars.empty() ? nullptr : vars.data();
    auto start = std::chrono::steady_clock::now();
    // One contiguous chunk per thread: a gid may be a whole row or a thread's share of an axis, so
    // finer chunks would cut into the lowering's choice; global[0] == 1 stays on this thread, and so
    // does a launch made while another one holds the team (several threads launching at once).
    int64_t n = global[0];
    auto body = [&](int64_t lo, int64_t hi) { fn_(pointers.data(), var_values, lo, hi); };
    if (n > 1 && threads_ > 1) {
      if (!launch_team().run(n, std::min<int64_t>(n, threads_), body)) body(0, n);
    } else if (n > 0) {
      body(0, n);
    }
    if (!timed) return 0.0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  std::unique_ptr<SharedObject> so_;
  KernelFn fn_;
  std::string name_;
  int threads_;
};

// The vector register of this machine, which kernels compiled with -march=native use: the upcast
// heuristics size their tiles by it (an AVX-512 tile on an AVX2 machine spills).
int64_t host_vector_bytes() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) return 64;
  if (__builtin_cpu_supports("avx2")) return 32;
#endif
  return 16;
}

class CpuDevice : public Device {
 public:
  explicit CpuDevice(const Toolchain& tc) : tc_(tc) {
    spec_.name = "CPU";
    spec_.arch = tc.arch;
    spec_.compiler = cat(tc.version, " ", join(kCompileFlags));
    spec_.lang = Language::C;
    spec_.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    spec_.max_global_dims = {INT64_MAX, 1, 1};
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) spec_.max_buffer_bytes = int64_t(pages) * page_size;
    spec_.has_fp16 = false;  // float16 is stored as 16 bits and computed in float
    spec_.has_fp64 = true;
    spec_.vector_bytes = host_vector_bytes();
  }
  ~CpuDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }

  void copy_in(RawBuffer dst, const void* src, size_t bytes) override {
    check_copy("copy_in", dst, bytes);
    if (bytes > 0) std::memcpy(dst.handle, src, bytes);  // an empty vector's data() may be null
  }
  void copy_out(void* dst, RawBuffer src, size_t bytes) override {
    check_copy("copy_out", src, bytes);
    if (bytes > 0) std::memcpy(dst, src.handle, bytes);
  }
  void synchronize() override {}  // launch() returns when the kernel is done

  Binary compile(const std::string& source, const std::string& name) override;
  std::unique_ptr<Program> load(const Binary& binary) override;

 protected:
  RawBuffer alloc_raw(size_t bytes) override;
  void free_raw(RawBuffer buffer) override;

 private:
  void check_copy(const char* what, RawBuffer buffer, size_t bytes) const {
    if (bytes > buffer.bytes)
      throw Error(cat("CPU: ", what, " of ", bytes, " bytes with a buffer of ", buffer.bytes,
                      " bytes; copy at most the buffer's size"));
  }

  const Toolchain& tc_;
  DeviceSpec spec_;
};

// The on-disk cache: <cache_dir>/compile/<hash of source and toolchain>.so. The compiler writes a file
// of its own name and rename() publishes it whole, so concurrent processes never see half a file.
Binary CpuDevice::compile(const std::string& source, const std::string& name) {
  std::string dir = config().cache_dir + "/compile";
  std::string key = hash_hex(hash_string(cat(source, '\0', tc_.fingerprint, '\0', join(kCompileFlags))));
  std::string cached = cat(dir, "/", key, ".so");
  // An entry that is not ELF (a disk error, a foreign file) is a miss; the rename below replaces it.
  if (auto bytes = read_file(cached); bytes && is_elf(*bytes)) return Binary{name, std::move(*bytes)};

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw Error(cat("CPU: compiling kernel ", name, ": cannot create the compile cache directory ", dir, ": ",
                    ec.message(), "; set KILN_CACHE_DIR to a writable directory"));
  std::string c_path = cat(dir, "/", key, "-XXXXXX.c");
  int fd = mkstemps(c_path.data(), 2);
  if (fd < 0)
    throw Error(cat("CPU: compiling kernel ", name, ": cannot create a file in ", dir, ": ", std::strerror(errno),
                    "; set KILN_CACHE_DIR to a writable directory"));
  bool written = write_all(fd, source.data(), source.size());
  close(fd);
  std::string so_path = c_path.substr(0, c_path.size() - 2) + ".so.tmp";
  if (!written) {
    unlink(c_path.c_str());
    throw Error(cat("CPU: compiling kernel ", name, ": cannot write ", c_path, " (disk full?)"));
  }

  std::vector<std::string> argv = {tc_.program};
  argv.insert(argv.end(), kCompileFlags.begin(), kCompileFlags.end());
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
    throw CompileError("CPU", name, cat("$ ", join(argv), "\n", result.output), source);
  }
  std::optional<std::vector<uint8_t>> bytes = read_file(so_path);
  if (!bytes || !is_elf(*bytes)) {
    unlink(so_path.c_str());
    throw Error(cat("CPU: compiling kernel ", name, ": the compiler succeeded but ", so_path,
                    " is missing or not a shared object: $ ", join(argv)));
  }
  if (std::rename(so_path.c_str(), cached.c_str()) != 0) unlink(so_path.c_str());  // still usable uncached
  return Binary{name, std::move(*bytes)};
}

std::unique_ptr<Program> CpuDevice::load(const Binary& binary) {
  auto so = std::make_unique<SharedObject>();
  std::string path = place_bytes(*so, binary);
  so->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!so->handle)
    throw Error(cat("CPU: loading kernel ", binary.name, ": dlopen failed: ", dlerror(),
                    "; the binary must be a shared object compiled for this machine by CPU's compile()"));
  dlerror();  // clear, so a null from dlsym is told apart from a symbol whose value is null
  auto fn = reinterpret_cast<KernelFn>(dlsym(so->handle, binary.name.c_str()));
  if (!fn) {
    const char* why = dlerror();
    throw Error(cat("CPU: loading kernel ", binary.name, ": no entry point named \"", binary.name,
                    "\" in the binary (dlsym: ", why ? why : "null symbol", "); the kernel's C function must have this name"));
  }
  return std::make_unique<CpuProgram>(std::move(so), fn, binary.name, spec_.threads);
}

RawBuffer CpuDevice::alloc_raw(size_t bytes) {
  if (bytes > size_t(spec_.max_buffer_bytes))
    throw OutOfMemory(cat("larger than this machine's memory, ", spec_.max_buffer_bytes, " bytes"));
  if (bytes >= kHugePage) {
    // Over-map by one huge page, then trim, so the buffer starts on a 2 MiB boundary where THP can back it.
    size_t length = round_up(bytes, kHugePage);
    void* base = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw OutOfMemory(cat("mmap failed: ", std::strerror(errno)));
    auto begin = reinterpret_cast<uintptr_t>(base), start = round_up(begin, kHugePage);
    if (start > begin) munmap(base, start - begin);
    munmap(reinterpret_cast<void*>(start + length), begin + kHugePage - start);  // never empty: start < begin + 2 MiB
    madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);  // only a hint: without THP it is slower, not wrong
    return RawBuffer{reinterpret_cast<void*>(start), bytes};
  }
  // aligned_alloc wants a multiple of the alignment; 64 bytes is one cache line and one AVX-512 vector.
  void* p = std::aligned_alloc(64, round_up(std::max<size_t>(bytes, 1), 64));
  if (!p) throw OutOfMemory("aligned_alloc failed");
  return RawBuffer{p, bytes};
}

void CpuDevice::free_raw(RawBuffer buffer) {
  if (buffer.bytes >= kHugePage) {
    munmap(buffer.handle, round_up(buffer.bytes, kHugePage));
  } else {
    std::free(buffer.handle);
  }
}

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(toolchain()); }

size_t cpu_compiler_invocations() { return compiler_runs.load(); }

}  // namespace kiln

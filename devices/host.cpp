// The host-device kit (host.h): host memory, copies, the launch team and the program that launches a
// compiled entry point over it. The compilers are c_compiler.cpp and llvm_compiler.cpp.
#include "devices/host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "uop/config.h"

namespace kiln {
namespace {

// The threads a CPU-style device splits a launch over: the machine's cores, shared among the ranks of an
// MPI job on this machine (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE), as torch users set OMP_NUM_THREADS per
// rank: 2 ranks of 2 threads each on 2 cores spun against each other.
int host_threads() {
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, config().mpi_local_size));
}

// Buffers this large come from mmap with transparent huge pages: first touch of 4 KiB pages is very
// slow on these machines (NOTES.md), and huge pages cut it about 60x.
constexpr size_t kHugePage = size_t(2) << 20;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

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
  static LaunchTeam* team = new LaunchTeam(host_threads() - 1);
  return *team;
}


class HostProgram : public Program {
 public:
  HostProgram(const DeviceSpec& spec, HostKernelFn fn, std::shared_ptr<void> code, std::string name)
      : Program(spec, std::move(name)), fn_(fn), code_(std::move(code)) {}

 protected:
  double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) override {
    std::vector<void*> pointers(bufs.size());
    for (size_t i = 0; i < bufs.size(); ++i) pointers[i] = bufs[i].handle;
    const int64_t* var_values = vars.empty() ? nullptr : vars.data();
    auto start = std::chrono::steady_clock::now();
    // One contiguous chunk per thread: a gid may be a whole row or a thread's share of an axis, so
    // finer chunks would cut into the lowering's choice; global[0] == 1 stays on this thread, and so
    // does a launch made while another one holds the team (several threads launching at once).
    int64_t n = dims.global[0];
    auto body = [&](int64_t lo, int64_t hi) { fn_(pointers.data(), var_values, lo, hi); };
    if (n > 1 && spec_.threads > 1) {
      if (!launch_team().run(n, std::min<int64_t>(n, spec_.threads), body)) body(0, n);
    } else {
      body(0, n);
    }
    if (!timed) return 0.0;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  HostKernelFn fn_;
  std::shared_ptr<void> code_;  // keeps the entry point's code loaded
};

// The vector register of this machine, which kernels compiled for it use: the upcast heuristics size
// their tiles by it (an AVX-512 tile on an AVX2 machine spills).
int64_t host_vector_bytes() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) return 64;
  if (__builtin_cpu_supports("avx2")) return 32;
#endif
  return 16;
}

// How many of them: AVX-512 has 32 (zmm0-31), AVX2 and SSE on x86-64 16, AArch64's NEON 32.
int64_t host_vector_registers() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") ? 32 : 16;
#elif defined(__aarch64__)
  return 32;
#else
  return 16;
#endif
}

class HostDevice : public Device {
 public:
  HostDevice(const std::string& name, std::unique_ptr<HostCompiler> compiler, const std::string& note)
      : compiler_(std::move(compiler)) {
    spec_.name = name;
    spec_.arch = compiler_->arch();
    spec_.compiler = compiler_->identity();
    spec_.note = note;
    spec_.lang = compiler_->language();
    spec_.threads = host_threads();
    spec_.max_global_dims = {INT64_MAX, 1, 1};
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) spec_.max_buffer_bytes = int64_t(pages) * page_size;
    spec_.has_fp16 = false;  // float16 is stored as 16 bits and computed in float
    spec_.has_fp64 = true;
    spec_.vector_bytes = host_vector_bytes();
    spec_.vector_registers = host_vector_registers();
    spec_.alu_transcendentals = true;  // vector loops of exp2f/log2f calls would run lane by lane
  }
  ~HostDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }

  void synchronize() override {}  // launch() returns when the kernel is done

  Binary compile(const std::string& source, const std::string& name) override { return compiler_->compile(source, name); }
  std::unique_ptr<Program> load(const Binary& binary) override {
    auto [fn, code] = compiler_->load(binary);
    return std::make_unique<HostProgram>(spec_, fn, std::move(code), binary.name);
  }

 protected:
  RawBuffer alloc_raw(size_t bytes) override;
  void free_raw(RawBuffer buffer) override;
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override { std::memcpy(dst.handle, src, bytes); }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override { std::memcpy(dst, src.handle, bytes); }

 private:

  std::unique_ptr<HostCompiler> compiler_;
  DeviceSpec spec_;
};

RawBuffer HostDevice::alloc_raw(size_t bytes) {
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

void HostDevice::free_raw(RawBuffer buffer) {
  if (buffer.bytes >= kHugePage) {
    munmap(buffer.handle, round_up(buffer.bytes, kHugePage));
  } else {
    std::free(buffer.handle);
  }
}

}  // namespace

std::unique_ptr<Device> make_host_device(const std::string& name, std::unique_ptr<HostCompiler> compiler,
                                         const std::string& note) {
  return std::make_unique<HostDevice>(name, std::move(compiler), note);
}

std::string x86_64_level(const std::set<std::string>& features) {
  auto has_all = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* f) { return features.count(cat("+", f)) > 0; });
  };
  if (!has_all({"cx16", "popcnt", "sse4.2", "ssse3", "sahf"})) return "x86-64";
  if (!has_all({"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"})) return "x86-64-v2";
  if (!has_all({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})) return "x86-64-v3";
  return "x86-64-v4";
}

}  // namespace kiln

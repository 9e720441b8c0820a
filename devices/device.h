// The device interface: everything kiln needs from a backend, and nothing more.
//
//   Device& cpu = get_device("CPU");                       // throws Error saying why if unavailable
//   RawBuffer a = cpu.alloc(n * 4);                         // freed buffers are reused (see below)
//   cpu.copy_in(a, host.data(), n * 4);
//   Binary bin = cpu.compile(source, "E_16");               // CompileError carries the log and source
//   std::unique_ptr<Program> p = cpu.load(bin);
//   p->launch(std::vector<RawBuffer>{a}, {}, LaunchDims{{16, 1, 1}, {1, 1, 1}}, /*timed=*/false);
//   cpu.copy_out(host.data(), a, n * 4);                    // waits for queued launches first
//   cpu.free(a);
//
// A device is one file in devices/ plus one line in devices/CMakeLists.txt (KILN_DEVICES); the
// registry is generated from that list. Device libraries are dlopen'ed, so a missing library makes
// the device unavailable with a reason, never a crash or a link error.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "uop/error.h"

namespace kiln {

// The language a device's compile() takes.
enum class Language { C, OpenCL, CUDA, SPIRV, UOps, LLVM };
const char* language_name(Language lang);  // "C", "OpenCL C", "CUDA C", "SPIR-V", "linear UOps", "LLVM IR"

struct DeviceSpec {
  std::string name;             // "CPU"
  std::string arch;             // e.g. "x86-64-v4", "sm_90"; part of cache keys
  std::string compiler;         // compiler identity and version; part of cache keys
  std::string note;             // a line for `kiln devices` (e.g. why a fallback compiler is in use); not in cache keys
  Language lang = Language::C;
  int threads = 1;              // CPU: cores the launch is split over (global[0] is cut into chunks)
  int64_t max_local = 0;        // largest workgroup (product of local dims); 0: no local dims
  std::array<int64_t, 3> max_local_dims{0, 0, 0};
  std::array<int64_t, 3> max_global_dims{INT64_MAX, 1, 1};
  int64_t shared_bytes = 0;     // local/shared memory per workgroup
  int64_t max_buffer_bytes = INT64_MAX;  // largest single allocation (or binding)
  bool has_fp16 = false, has_fp64 = true;
  // Bytes of one vector register the upcast heuristics aim at (CPU devices: from the CPU's features, 64
  // with AVX-512); 0: the language has no vector types kiln renders, so upcasts become scalar copies (a
  // register tile) instead of vectors.
  int64_t vector_bytes = 0;
  // How many of those vector registers there are (x86-64: 32 with AVX-512, else 16; AArch64: 32): the
  // register tile's accumulators must fit in them. 0 where vector_bytes is 0.
  int64_t vector_registers = 0;
  // exp2 and log2 of float32 are lowered to ALU ops (lower/transcendental.h) instead of the language's
  // functions: for a compiler that calls a scalar library function per element, even in vector code.
  bool alu_transcendentals = false;
  // A correctness oracle, slow by design (REF, the interpreter): `kiln devices --check` prints its
  // rates without comparing them with the machine's, and probes it with a smaller problem.
  bool oracle = false;
};

// A device allocation. `handle` is the device's own: a host pointer on CPU, a cl_mem on OpenCL, ...
struct RawBuffer {
  void* handle = nullptr;
  size_t bytes = 0;
};

struct LaunchDims {
  std::array<int64_t, 3> global{1, 1, 1};  // number of workgroups per dimension (CPU: global[0] only)
  std::array<int64_t, 3> local{1, 1, 1};   // workgroup size per dimension
};

struct Binary {
  std::string name;           // the kernel's entry point
  std::vector<uint8_t> data;  // what load() takes: a shared object, a program binary, SPIR-V words, ...
};

class CompileError : public Error {
 public:
  CompileError(const std::string& device, const std::string& kernel, const std::string& log, const std::string& source);
  std::string device, kernel, log, source;
};

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

class Program {
 public:
  virtual ~Program() = default;
  // Runs the kernel. vars are the values of the kernel's DEFINE_VARs, in order. With timed, waits for
  // completion and returns the kernel's run time in seconds; otherwise it may return before the
  // kernel finishes (0.0) and synchronize() or copy_out() waits. Dims outside the device's DeviceSpec
  // (max_global_dims, max_local_dims, max_local) throw Error naming the kernel, the dims and the limits;
  // a launch with no work (a global dim of 0) runs nothing and returns 0.0.
  double launch(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed);

 protected:
  // `spec` is the device's: devices outlive their programs (the registry keeps them until exit).
  Program(const DeviceSpec& spec, std::string name) : spec_(spec), name_(std::move(name)) {}
  // launch() after its checks: dims fit the spec and hold some work.
  virtual double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims,
                     bool timed) = 0;
  const DeviceSpec& spec_;
  const std::string name_;  // the kernel's
};

class Device {
 public:
  // A device's own destructor must call release_cached(): by the time ~Device runs, free_raw (a
  // virtual of the derived class) can no longer be called, so whatever is still cached then is dropped.
  virtual ~Device();
  virtual const DeviceSpec& spec() const = 0;

  // Buffers: freed buffers of the same size are kept and reused, because fresh memory is expensive on
  // these machines (first touch ~15 us per 4 KiB page). alloc() retries once after releasing the
  // cache, then throws OutOfMemory naming the size and the device limit. All four are thread-safe.
  RawBuffer alloc(size_t bytes);
  void free(RawBuffer buffer);  // a null handle is ignored
  void release_cached();  // gives every cached buffer back to the device
  size_t cached_bytes() const;

  // Copies between host memory and a buffer. More bytes than the buffer holds throw Error naming the
  // device, the copy and both sizes; copy_out waits for launches queued before it.
  void copy_in(RawBuffer dst, const void* src, size_t bytes);
  void copy_out(void* dst, RawBuffer src, size_t bytes);
  virtual Binary compile(const std::string& source, const std::string& name) = 0;
  virtual std::unique_ptr<Program> load(const Binary& binary) = 0;
  virtual void synchronize() = 0;

 protected:
  virtual RawBuffer alloc_raw(size_t bytes) = 0;  // throws OutOfMemory
  virtual void free_raw(RawBuffer buffer) = 0;
  // copy_in/copy_out after their checks: bytes <= the buffer's size, and more than 0.
  virtual void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) = 0;
  virtual void copy_out_raw(void* dst, RawBuffer src, size_t bytes) = 0;

 private:
  mutable std::mutex cache_mu_;
  std::multimap<size_t, RawBuffer> cache_;  // freed buffers by size
  size_t cached_bytes_ = 0;
};

// --- the registry (devices/registry.cpp, generated list) ---------------------------------------

struct DeviceStatus {
  std::string name;
  bool available = false;
  std::string reason;  // why not, when unavailable
};

std::vector<std::string> device_names();        // every registered device, in KILN_DEVICES order
std::vector<DeviceStatus> probe_devices();       // tries to open each one
// A name may carry an instance index: "CPU:1" is a second instance of the CPU device (its own buffers
// and programs, made by the same factory on first use), for sharding a tensor across devices of one
// process (frontend/shard.h). "CPU:0" is "CPU". Instances share their DeviceSpec's name ("CPU"), so they
// share tuning and compiled-binary caches; tensors on two instances are on different devices.
Device& get_device(std::string_view name);      // opens on first use; throws Error saying why not
// The one spelling of a device name: upper case, ":0" dropped ("cpu:0" -> "CPU", "cpu:1" -> "CPU:1").
// Throws Error for an unknown device or an index that is not a non-negative integer.
std::string canonical_device_name(std::string_view name);
std::string default_device_name();              // KILN_DEVICE if set, else the first available
// The first available device, in registry order, whose DeviceSpec satisfies `wanted`; nullopt when none.
// Tools and tests pick devices by what they are (the oracle, CPU-style, in-process), never by name.
std::optional<std::string> find_device(const std::function<bool(const DeviceSpec&)>& wanted);
// Adds a device after the generated list, opened on first use like the others: for a device made
// outside devices/ (tests/test_devices_check.cpp: a faulty wrapper that `kiln devices --check` must fail).
// Throws Error when the name is taken or is not upper case. Call it before other threads use devices.
void register_device(const std::string& name, std::function<std::unique_ptr<Device>()> make);

}  // namespace kiln

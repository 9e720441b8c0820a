// The host-device kit: what every CPU-style device shares, so that such a device is one compiler.
// Host memory (64-byte aligned, huge pages for big buffers), copies, and launches split over the caller
// and one process-wide team of spinning helper threads (host.cpp: LaunchTeam) are here; a HostCompiler
// turns a kernel's source into a Binary and a loaded Binary into an entry point.
//
//   std::unique_ptr<Device> d = make_host_device("CPU", make_llvm_compiler("CPU"));  // devices/cpu.cpp
//   std::unique_ptr<Device> c = make_host_device("CLANG", make_c_compiler("CLANG")); // devices/clang.cpp
//
// Kernel ABI, the same for every compiler: the source defines, with external linkage, an entry point
//
//   void NAME(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end);
//
// - bufs[i] is the host pointer of the launch's i-th buffer (64-byte aligned), in launch order;
// - vars[i] is the value of the kernel's i-th DEFINE_VAR (vars is null when there are none);
// - the kernel computes every global index gid in [gid_begin, gid_end) of dimension 0, and nothing else.
//
// launch() takes global = {n, 1, 1} and local = {1, 1, 1} (anything else throws Error) and cuts [0, n)
// into at most spec().threads contiguous chunks, one call per chunk, run on the caller and the helpers
// (a launch made while another one holds the helpers runs whole on its caller).
// A gid is whatever unit of work the lowering chose (an element, a row, one thread's share of an axis),
// so the runtime cannot judge how small a launch is: global[0] == 1 runs inline on the caller with no
// thread handoff, and the lowering launches that way for kernels too small to be worth splitting.
// Calls for different chunks run concurrently and must not write the same memory.
// Kernels keep IEEE semantics (no fast-math): NaN and inf propagate.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"

namespace kiln {

using HostKernelFn = void (*)(void* const* bufs, const int64_t* vars, int64_t gid_begin, int64_t gid_end);

// A compiler of a CPU-style device. compile() and load() may be called from several threads at once.
class HostCompiler {
 public:
  virtual ~HostCompiler() = default;
  virtual Language language() const = 0;
  virtual const std::string& arch() const = 0;      // DeviceSpec::arch, e.g. "x86-64-v4"
  virtual const std::string& identity() const = 0;  // DeviceSpec::compiler: the compiler, version and flags
  // Throws CompileError (device, kernel, log, source) when the source does not compile. The Binary's
  // name is the entry point load() looks up; a compiler may make it unique (LLVM: one JIT namespace).
  virtual Binary compile(const std::string& source, const std::string& name) = 0;
  // The entry point of a compiled Binary and what keeps its code loaded (released with the program).
  virtual std::pair<HostKernelFn, std::shared_ptr<void>> load(const Binary& binary) = 0;
};

// A CPU-style device named `name` around `compiler`; `note` is a line for `kiln devices` (why a fallback
// compiler is in use), or empty.
std::unique_ptr<Device> make_host_device(const std::string& name, std::unique_ptr<HostCompiler> compiler,
                                         const std::string& note = "");

// A C compiler as a process per kernel, the shared object loaded with dlopen (devices/c_compiler.cpp).
// `program` "" takes clang, else gcc; "clang" or "gcc" takes that one only. `extra_flags` go after kiln's
// (-O2 -march=native -fPIC ...; e.g. {"-O3"}) and into the identity and the compile cache key.
// Throws Error saying why when the compiler does not work.
std::unique_ptr<HostCompiler> make_c_compiler(const std::string& device_name, const std::string& program = "",
                                              const std::vector<std::string>& extra_flags = {});

// libLLVM (dlopen'ed) in the process: LLVM IR -> O2 -> an object file, linked by ORC's LLJIT
// (devices/llvm_compiler.cpp). Throws Error saying why when libLLVM cannot be loaded or used.
std::unique_ptr<HostCompiler> make_llvm_compiler(const std::string& device_name);

// How many times this process has run the C compiler for a kernel (not counting the probes that read its
// version), and how many modules the in-process LLVM compiler has compiled: tests use them to see the
// compile caches working.
size_t cpu_compiler_invocations();
size_t llvm_compilations();

// The x86-64 micro-architecture level of a set of "+feature" names ("x86-64-v4"): the most telling name
// for what -march=native resolves to when the compiler names the CPU only "x86-64" or "generic".
std::string x86_64_level(const std::set<std::string>& features);

}  // namespace kiln

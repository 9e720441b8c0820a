// The in-process compiler of the host kit (host.h): LLVM IR from lower/renderers/llvm_ir.cpp is parsed,
// optimized with LLVM's O2 pipeline and compiled to an object file by libLLVM 14, which is loaded with
// dlopen (one binary runs with or without it), and objects are linked into the process by ORC's LLJIT.
// No process is started and no file is written except the on-disk cache of objects.
//
// Why LLVM 14: it is the version of the clang that compiles the C path here (Debian bookworm's default
// clang, llvm-14-dev preinstalled), so both paths generate code with the same optimizer and backend and
// `kiln bench` compares compilers, not LLVM versions; its C API has all this needs (IRReader, the new
// pass manager's LLVMRunPasses, TargetMachine, LLJIT with resource trackers). LLVM 14 IR has typed
// pointers, which the renderer writes.
//
// Names: every kernel of one name (a search compiles dozens of "r_64_64_64") is one symbol in one JIT
// namespace, so compile() names the entry point NAME_<hash of the IR> and returns that name in the
// Binary; the same object loaded twice shares one copy of the code.
#include "devices/host.h"

#include <dlfcn.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "devices/binary_cache.h"
#include "uop/config.h"
#include "uop/hash.h"

#if __has_include(<llvm-c/Core.h>)
#define KILN_HAVE_LLVM_C 1
#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#endif

namespace kiln {

namespace {
std::atomic<size_t> g_compilations{0};
}  // namespace

size_t llvm_compilations() { return g_compilations.load(); }

#ifndef KILN_HAVE_LLVM_C

std::unique_ptr<HostCompiler> make_llvm_compiler(const std::string&) {
  throw Error("kiln was built without LLVM's C headers (install llvm-14-dev and rebuild: scripts/deps.sh)");
}

#else

namespace {

// The libLLVM functions kiln calls, looked up with dlsym. Each member is named as the function.
#define KILN_LLVM_FUNCTIONS(X)                                                                                   \
  X(LLVMContextCreate) X(LLVMContextDispose) X(LLVMCreateMemoryBufferWithMemoryRangeCopy)                         \
  X(LLVMDisposeMemoryBuffer) X(LLVMGetBufferStart) X(LLVMGetBufferSize) X(LLVMParseIRInContext)                   \
  X(LLVMDisposeModule) X(LLVMDisposeMessage) X(LLVMSetTarget) X(LLVMSetModuleDataLayout) X(LLVMVerifyModule)      \
  X(LLVMGetNamedFunction) X(LLVMSetValueName2) X(LLVMAddTargetDependentFunctionAttr)                              \
  X(LLVMInitializeX86TargetInfo) X(LLVMInitializeX86Target) X(LLVMInitializeX86TargetMC)                          \
  X(LLVMInitializeX86AsmPrinter) X(LLVMGetDefaultTargetTriple) X(LLVMGetTargetFromTriple) X(LLVMGetHostCPUName)   \
  X(LLVMGetHostCPUFeatures) X(LLVMCreateTargetMachine) X(LLVMDisposeTargetMachine) X(LLVMCreateTargetDataLayout)   \
  X(LLVMDisposeTargetData) X(LLVMTargetMachineEmitToMemoryBuffer) X(LLVMCreatePassBuilderOptions)                 \
  X(LLVMDisposePassBuilderOptions) X(LLVMPassBuilderOptionsSetLoopVectorization)                                  \
  X(LLVMPassBuilderOptionsSetSLPVectorization) X(LLVMPassBuilderOptionsSetLoopUnrolling)                          \
  X(LLVMPassBuilderOptionsSetLoopInterleaving) X(LLVMRunPasses) X(LLVMGetErrorMessage)                            \
  X(LLVMDisposeErrorMessage) X(LLVMOrcCreateLLJIT) X(LLVMOrcLLJITGetMainJITDylib) X(LLVMOrcLLJITGetGlobalPrefix)  \
  X(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess) X(LLVMOrcJITDylibAddGenerator)                          \
  X(LLVMOrcJITDylibCreateResourceTracker) X(LLVMOrcLLJITAddObjectFileWithRT) X(LLVMOrcLLJITLookup)                \
  X(LLVMOrcResourceTrackerRemove) X(LLVMOrcReleaseResourceTracker)

struct Llvm {
#define KILN_MEMBER(fn) decltype(&::fn) fn = nullptr;
  KILN_LLVM_FUNCTIONS(KILN_MEMBER)
#undef KILN_MEMBER
  void* library = nullptr;
};

// The library's soname, then the development symlink.
const char* const kLibraries[] = {"libLLVM-14.so.1", "libLLVM-14.so"};

// Opened once per process and never closed (code it compiled may run until exit).
const Llvm& llvm() {
  static const Llvm loaded = [] {
    Llvm l;
    std::string errors;
    for (const char* name : kLibraries) {
      l.library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (l.library) break;
      const char* why = dlerror();
      errors += cat(errors.empty() ? "" : "; ", why ? why : name);
    }
    if (!l.library) throw Error(cat("cannot load libLLVM 14 (", errors, "); install libllvm14 (scripts/deps.sh)"));
#define KILN_LOOKUP(fn)                                                                                   \
  l.fn = reinterpret_cast<decltype(&::fn)>(dlsym(l.library, #fn));                                        \
  if (!l.fn) throw Error(cat("libLLVM 14 has no function " #fn "; it is not the library kiln was built for"));
    KILN_LLVM_FUNCTIONS(KILN_LOOKUP)
#undef KILN_LOOKUP
#if defined(__x86_64__)
    l.LLVMInitializeX86TargetInfo();
    l.LLVMInitializeX86Target();
    l.LLVMInitializeX86TargetMC();
    l.LLVMInitializeX86AsmPrinter();
#else
    throw Error("the in-process LLVM compiler targets x86-64 only");
#endif
    return l;
  }();
  return loaded;
}

// LLVM's message of an error, which is consumed.
std::string take_message(LLVMErrorRef error) {
  char* text = llvm().LLVMGetErrorMessage(error);
  std::string message = text ? text : "(no message)";
  llvm().LLVMDisposeErrorMessage(text);
  return message;
}

std::string take_string(char* text) {
  std::string s = text ? text : "";
  if (text) llvm().LLVMDisposeMessage(text);
  return s;
}

std::set<std::string> split_features(const std::string& features) {
  std::set<std::string> out;
  std::stringstream in(features);
  for (std::string f; std::getline(in, f, ',');)
    if (!f.empty()) out.insert(f);
  return out;
}

// Loaded code: the object's resources in the JIT, removed when the last program using it goes.
struct LoadedObject {
  LLVMOrcResourceTrackerRef tracker = nullptr;
  HostKernelFn fn = nullptr;
  std::recursive_mutex* mu = nullptr;  // the compiler's: a symbol is removed before it can be added again
  ~LoadedObject() {
    if (!tracker) return;
    std::lock_guard<std::recursive_mutex> lock(*mu);
    if (LLVMErrorRef e = llvm().LLVMOrcResourceTrackerRemove(tracker)) take_message(e);  // nothing to do about it here
    llvm().LLVMOrcReleaseResourceTracker(tracker);
  }
};

class LlvmCompiler : public HostCompiler {
 public:
  explicit LlvmCompiler(const std::string& device) : device_(device) {
    const Llvm& l = llvm();
    triple_ = take_string(l.LLVMGetDefaultTargetTriple());
    cpu_ = take_string(l.LLVMGetHostCPUName());
    features_ = take_string(l.LLVMGetHostCPUFeatures());
    // LLVM 14 calls a CPU it does not know (this machine's Zen 4) "generic"; clang -march=native says
    // "x86-64" with the host's features (NOTES.md), and so does this, to tune the same way.
    if (cpu_ == "generic") cpu_ = "x86-64";
    char* message = nullptr;
    if (l.LLVMGetTargetFromTriple(triple_.c_str(), &target_, &message))
      throw Error(cat("LLVM has no target for ", triple_, ": ", take_string(message)));
    // The name the C path gives the same machine: clang names it "x86-64" plus features (NOTES.md).
    arch_ = cpu_ == "x86-64" ? x86_64_level(split_features(features_)) : cpu_;
    identity_ = cat("LLVM 14 in-process (O2, ", cpu_, ", contract, no fast-math)");
    fingerprint_ = cat(identity_, '\n', triple_, '\n', features_, "\nO2, no loop unrolling");  // what build() runs
    if (LLVMErrorRef e = l.LLVMOrcCreateLLJIT(&jit_, nullptr)) throw Error(cat("LLVM's LLJIT: ", take_message(e)));
    // Symbols the kernels call (sinf, log2f, ...) resolve in the process, as the C path's libm link does.
    LLVMOrcDefinitionGeneratorRef generator = nullptr;
    if (LLVMErrorRef e = l.LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&generator, l.LLVMOrcLLJITGetGlobalPrefix(jit_),
                                                                                 nullptr, nullptr))
      throw Error(cat("LLVM's LLJIT: the process's symbols: ", take_message(e)));
    l.LLVMOrcJITDylibAddGenerator(l.LLVMOrcLLJITGetMainJITDylib(jit_), generator);
  }
  // The JIT is leaked on purpose, as the registry leaks devices: programs may run until exit.

  Language language() const override { return Language::LLVM; }
  const std::string& arch() const override { return arch_; }
  const std::string& identity() const override { return identity_; }
  Binary compile(const std::string& source, const std::string& name) override;
  std::pair<HostKernelFn, std::shared_ptr<void>> load(const Binary& binary) override;

 private:
  std::vector<uint8_t> build(const std::string& source, const std::string& name, const std::string& symbol);
  LLVMTargetMachineRef thread_machine();

  std::string device_, triple_, cpu_, features_, arch_, identity_, fingerprint_;
  LLVMTargetRef target_ = nullptr;
  LLVMOrcLLJITRef jit_ = nullptr;
  std::recursive_mutex loaded_mu_;  // recursive: a failed load drops its LoadedObject under it
  std::map<std::string, std::weak_ptr<LoadedObject>> loaded_;  // by symbol
};

Binary LlvmCompiler::compile(const std::string& source, const std::string& name) {
  std::string symbol = cat(name, "_", hash_hex(hash_string(source)));
  BinaryCacheKey key = binary_cache_key(source, fingerprint_);
  if (auto hit = read_cached_binary("llvm", key)) return Binary{symbol, std::move(*hit)};
  std::vector<uint8_t> object = build(source, name, symbol);
  write_cached_binary("llvm", key, object);
  return Binary{symbol, std::move(object)};
}

// This thread's target machine (one per thread: a machine is not to be shared by concurrent compiles;
// making one per compile cost a few milliseconds). Kept for the thread's life.
LLVMTargetMachineRef LlvmCompiler::thread_machine() {
  struct Machines {
    std::map<const LlvmCompiler*, LLVMTargetMachineRef> by_compiler;
    ~Machines() {
      for (auto& [compiler, machine] : by_compiler) llvm().LLVMDisposeTargetMachine(machine);
    }
  };
  thread_local Machines machines;
  LLVMTargetMachineRef& machine = machines.by_compiler[this];
  if (!machine)
    machine = llvm().LLVMCreateTargetMachine(target_, triple_.c_str(), cpu_.c_str(), features_.c_str(), LLVMCodeGenLevelDefault,
                                             LLVMRelocPIC, LLVMCodeModelDefault);
  return machine;
}

// Parse, verify, rename the entry point, optimize, emit an object file.
std::vector<uint8_t> LlvmCompiler::build(const std::string& source, const std::string& name, const std::string& symbol) {
  const Llvm& l = llvm();
  LLVMContextRef context = l.LLVMContextCreate();
  LLVMModuleRef module = nullptr;
  auto cleanup = [&] {
    if (module) l.LLVMDisposeModule(module);
    l.LLVMContextDispose(context);
  };
  auto fail = [&](const std::string& log) {
    cleanup();
    throw CompileError(device_, name, log, source);
  };
  // The parser takes the buffer.
  LLVMMemoryBufferRef text = l.LLVMCreateMemoryBufferWithMemoryRangeCopy(source.data(), source.size(), name.c_str());
  char* message = nullptr;
  if (l.LLVMParseIRInContext(context, text, &module, &message)) fail(cat("LLVM IR parse error: ", take_string(message)));
  if (l.LLVMVerifyModule(module, LLVMReturnStatusAction, &message)) fail(cat("LLVM IR verifier: ", take_string(message)));
  take_string(message);
  LLVMValueRef fn = l.LLVMGetNamedFunction(module, name.c_str());
  if (!fn) fail(cat("the module defines no function @", name, " (the kernel's entry point)"));
  l.LLVMSetValueName2(fn, symbol.data(), symbol.size());
  l.LLVMAddTargetDependentFunctionAttr(fn, "target-cpu", cpu_.c_str());
  l.LLVMAddTargetDependentFunctionAttr(fn, "target-features", features_.c_str());

  LLVMTargetMachineRef machine = thread_machine();
  if (!machine) fail(cat("LLVM could not create a target machine for ", triple_, " ", cpu_));
  l.LLVMSetTarget(module, triple_.c_str());
  LLVMTargetDataRef layout = l.LLVMCreateTargetDataLayout(machine);
  l.LLVMSetModuleDataLayout(module, layout);
  l.LLVMDisposeTargetData(layout);

  LLVMPassBuilderOptionsRef options = l.LLVMCreatePassBuilderOptions();
  l.LLVMPassBuilderOptionsSetLoopVectorization(options, 1);
  l.LLVMPassBuilderOptionsSetSLPVectorization(options, 1);
  // No loop unrolling: kiln's opts unroll (UPCAST, UNROLL) and the search times the kernel they describe.
  // LLVM's unroller on top multiplied the body of a register-tiled candidate again and took seconds (a
  // conv search's round compiled 1.1 candidates/s with it, 1.9-2.5 without); the heuristics' kernels ran
  // as fast either way (`kiln bench sweep --quick`, interleaved, within this machine's noise).
  l.LLVMPassBuilderOptionsSetLoopUnrolling(options, 0);
  l.LLVMPassBuilderOptionsSetLoopInterleaving(options, 1);
  LLVMErrorRef passes = l.LLVMRunPasses(module, "default<O2>", machine, options);
  l.LLVMDisposePassBuilderOptions(options);
  if (passes) fail(cat("LLVM's O2 pipeline: ", take_message(passes)));

  LLVMMemoryBufferRef object = nullptr;
  if (l.LLVMTargetMachineEmitToMemoryBuffer(machine, module, LLVMObjectFile, &message, &object))
    fail(cat("LLVM code generation: ", take_string(message)));
  const auto* start = reinterpret_cast<const uint8_t*>(l.LLVMGetBufferStart(object));
  std::vector<uint8_t> bytes(start, start + l.LLVMGetBufferSize(object));
  l.LLVMDisposeMemoryBuffer(object);
  cleanup();
  ++g_compilations;
  return bytes;
}

std::pair<HostKernelFn, std::shared_ptr<void>> LlvmCompiler::load(const Binary& binary) {
  const Llvm& l = llvm();
  std::lock_guard<std::recursive_mutex> lock(loaded_mu_);
  if (auto it = loaded_.find(binary.name); it != loaded_.end())
    if (std::shared_ptr<LoadedObject> shared = it->second.lock()) return {shared->fn, shared};
  if (binary.data.size() < 4 || binary.data[0] != 0x7f || binary.data[1] != 'E' || binary.data[2] != 'L' || binary.data[3] != 'F')
    throw Error(cat(device_, ": loading kernel ", binary.name,
                    ": the binary is not an object file; it must come from this device's compile()"));
  auto loaded = std::make_shared<LoadedObject>();
  loaded->mu = &loaded_mu_;
  loaded->tracker = l.LLVMOrcJITDylibCreateResourceTracker(l.LLVMOrcLLJITGetMainJITDylib(jit_));
  LLVMMemoryBufferRef object = l.LLVMCreateMemoryBufferWithMemoryRangeCopy(
      reinterpret_cast<const char*>(binary.data.data()), binary.data.size(), binary.name.c_str());
  if (LLVMErrorRef e = l.LLVMOrcLLJITAddObjectFileWithRT(jit_, loaded->tracker, object))
    throw Error(cat(device_, ": loading kernel ", binary.name, ": LLVM's JIT refused the object: ", take_message(e)));
  LLVMOrcExecutorAddress address = 0;
  if (LLVMErrorRef e = l.LLVMOrcLLJITLookup(jit_, &address, binary.name.c_str()))
    throw Error(cat(device_, ": loading kernel ", binary.name, ": no entry point named \"", binary.name,
                    "\" in the object (", take_message(e), "); the Binary's name must be the one compile() returned"));
  loaded->fn = reinterpret_cast<HostKernelFn>(address);
  loaded_[binary.name] = loaded;
  return {loaded->fn, loaded};
}

}  // namespace

std::unique_ptr<HostCompiler> make_llvm_compiler(const std::string& device_name) {
  return std::make_unique<LlvmCompiler>(device_name);
}

#endif

}  // namespace kiln

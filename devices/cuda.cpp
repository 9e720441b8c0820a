// The CUDA device (see cuda.h): NVRTC compiles, the driver API loads and launches; both libraries are
// dlopen'ed, so a machine without them builds and runs kiln with CUDA listed as unavailable.
#include "devices/cuda.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "devices/binary_cache.h"
#include "uop/config.h"

namespace kiln {
namespace {

// --- NVRTC --------------------------------------------------------------------------------------

using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

struct Nvrtc {
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*GetNumSupportedArchs)(int*);
  nvrtcResult (*GetSupportedArchs)(int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetPTX)(nvrtcProgram, char*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  std::string version;
  std::vector<std::string> archs;  // "sm_75", ... oldest first
};

// NVRTC's sonames by toolkit generation, newest first.
constexpr const char* kNvrtcNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"};

struct NvrtcLoad {
  std::optional<Nvrtc> api;
  NvrtcStatus status;
};

const NvrtcLoad& nvrtc_load() {
  static const NvrtcLoad loaded = [] {
    NvrtcLoad out;
    void* lib = nullptr;
    std::string tried;
    for (const char* name : kNvrtcNames) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      tried += cat(tried.empty() ? "" : ", ", name);
    }
    if (!lib) {
      out.status.reason = cat("NVRTC is not installed (tried ", tried, ": ", dlerror(),
                              "); it comes with the CUDA toolkit (libnvrtc), which CUDA needs to compile kernels");
      return out;
    }
    Nvrtc n{};
    std::string missing;
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!fn) missing += cat(" ", symbol);
    };
    get(n.GetErrorString, "nvrtcGetErrorString");
    get(n.Version, "nvrtcVersion");
    get(n.GetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
    get(n.GetSupportedArchs, "nvrtcGetSupportedArchs");
    get(n.CreateProgram, "nvrtcCreateProgram");
    get(n.DestroyProgram, "nvrtcDestroyProgram");
    get(n.CompileProgram, "nvrtcCompileProgram");
    get(n.GetProgramLogSize, "nvrtcGetProgramLogSize");
    get(n.GetProgramLog, "nvrtcGetProgramLog");
    get(n.GetPTXSize, "nvrtcGetPTXSize");
    get(n.GetPTX, "nvrtcGetPTX");
    get(n.GetCUBINSize, "nvrtcGetCUBINSize");
    get(n.GetCUBIN, "nvrtcGetCUBIN");
    if (!missing.empty()) {
      out.status.reason = cat("the NVRTC found lacks", missing, "; kiln needs NVRTC 11.2 or later");
      return out;
    }
    int major = 0, minor = 0;
    n.Version(&major, &minor);
    n.version = cat(major, ".", minor);
    int count = 0;
    if (n.GetNumSupportedArchs(&count) == 0 && count > 0) {
      std::vector<int> archs(static_cast<size_t>(count));
      if (n.GetSupportedArchs(archs.data()) == 0)
        for (int a : archs) n.archs.push_back(cat("sm_", a));
    }
    out.status = {true, n.version, ""};
    out.api = std::move(n);
    return out;
  }();
  return loaded;
}

const Nvrtc& nvrtc() {
  const NvrtcLoad& l = nvrtc_load();
  if (!l.api) throw Error(cat("CUDA: ", l.status.reason));
  return *l.api;
}

std::atomic<size_t> nvrtc_runs{0};

// No --use_fast_math: NaN and inf must propagate, and sqrt/division stay IEEE-rounded.
std::vector<std::string> nvrtc_options(const std::string& arch) { return {"--gpu-architecture=" + arch}; }

// --- the driver API ----------------------------------------------------------------------------

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0, CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
              CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
              CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
};

// The driver library, opened once; throws Error saying why it cannot be.
const Driver& driver() {
  static const Driver loaded = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::string why = dlerror();  // before NVRTC's dlopen replaces it
      const NvrtcStatus& n = nvrtc_status();
      std::string compile_note =
          n.available ? cat("; NVRTC ", n.version, " is here, so kernels still compile without a GPU (KILN_CUDA_COMPILE_ONLY=1 kiln_tests)")
                      : "";
      throw Error(cat("libcuda.so.1 (the NVIDIA driver) is not installed (dlopen: ", why,
                      "): CUDA needs an NVIDIA GPU and its driver", compile_note));
    }
    Driver d{};
    std::string missing;
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!fn) missing += cat(" ", symbol);
    };
    get(d.Init, "cuInit");
    get(d.DriverGetVersion, "cuDriverGetVersion");
    get(d.GetErrorName, "cuGetErrorName");
    get(d.GetErrorString, "cuGetErrorString");
    get(d.DeviceGetCount, "cuDeviceGetCount");
    get(d.DeviceGet, "cuDeviceGet");
    get(d.DeviceGetName, "cuDeviceGetName");
    get(d.DeviceGetAttribute, "cuDeviceGetAttribute");
    get(d.DeviceTotalMem, "cuDeviceTotalMem_v2");
    get(d.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    get(d.CtxSetCurrent, "cuCtxSetCurrent");
    get(d.CtxSynchronize, "cuCtxSynchronize");
    get(d.MemAlloc, "cuMemAlloc_v2");
    get(d.MemFree, "cuMemFree_v2");
    get(d.MemGetInfo, "cuMemGetInfo_v2");
    get(d.MemcpyHtoD, "cuMemcpyHtoD_v2");
    get(d.MemcpyDtoH, "cuMemcpyDtoH_v2");
    get(d.ModuleLoadData, "cuModuleLoadData");
    get(d.ModuleUnload, "cuModuleUnload");
    get(d.ModuleGetFunction, "cuModuleGetFunction");
    get(d.LaunchKernel, "cuLaunchKernel");
    get(d.EventCreate, "cuEventCreate");
    get(d.EventRecord, "cuEventRecord");
    get(d.EventSynchronize, "cuEventSynchronize");
    get(d.EventElapsedTime, "cuEventElapsedTime");
    get(d.EventDestroy, "cuEventDestroy_v2");
    if (!missing.empty()) throw Error(cat("libcuda.so.1 lacks", missing, "; the NVIDIA driver is too old for kiln"));
    return d;
  }();
  return loaded;
}

std::string describe(CUresult code) {
  const char *name = nullptr, *text = nullptr;
  driver().GetErrorName(code, &name);
  driver().GetErrorString(code, &text);
  return cat(name ? name : "CUDA error", " (", code, (text ? cat(": ", text) : std::string()), ")");
}

void check(CUresult code, const std::string& what) {
  if (code != CUDA_SUCCESS) throw Error(cat("CUDA: ", what, " failed: ", describe(code)));
}

// The kernel's parameter count, read from its signature in the source (`NAME(T* data0, ..., int64_t var0)`):
// a kernel declares buffers only up to the last one it uses, and its vars come after them.
uint32_t count_params(const std::string& source, const std::string& name) {
  size_t at = source.find("__global__");
  at = at == std::string::npos ? std::string::npos : source.find(name + "(", at);
  if (at == std::string::npos) return UINT32_MAX;  // unknown: launch passes what it is given
  size_t open = at + name.size() + 1, close = source.find(')', open);
  std::string params = source.substr(open, close - open);
  if (params.find_first_not_of(" \t\n") == std::string::npos || params == "void") return 0;
  return uint32_t(std::count(params.begin(), params.end(), ',') + 1);
}

// What compile() returns and load() takes: a header (magic, parameter count) then the CUBIN or PTX.
constexpr char kBinaryMagic[8] = {'k', 'i', 'l', 'n', 'c', 'u', 'd', '1'};

class CudaDevice;

class CudaProgram : public Program {
 public:
  CudaProgram(CUcontext context, CUmodule module, CUfunction function, std::string name, uint32_t num_params,
              const DeviceSpec& spec)
      : Program(spec, std::move(name)), context_(context), module_(module), function_(function), num_params_(num_params) {}
  ~CudaProgram() override {
    driver().CtxSetCurrent(context_);
    driver().ModuleUnload(module_);
  }


 protected:
  double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) override {
    if (num_params_ != UINT32_MAX) {
      if (vars.size() > num_params_ || bufs.size() + vars.size() < num_params_)
        throw Error(cat("CUDA: launch of kernel ", name_, " with ", bufs.size(), " buffers and ", vars.size(),
                        " vars; the kernel takes ", num_params_, " parameters (its buffers, then its vars)"));
      bufs = bufs.first(num_params_ - vars.size());
    }
    std::vector<CUdeviceptr> pointers(bufs.size());
    std::vector<int64_t> values(vars.begin(), vars.end());
    std::vector<void*> params;
    for (size_t i = 0; i < bufs.size(); ++i) {
      pointers[i] = reinterpret_cast<CUdeviceptr>(bufs[i].handle);
      params.push_back(&pointers[i]);
    }
    for (int64_t& v : values) params.push_back(&v);
    const Driver& cu = driver();
    check(cu.CtxSetCurrent(context_), "cuCtxSetCurrent");
    CUevent start = nullptr, end = nullptr;
    if (timed) {
      check(cu.EventCreate(&start, 0), "cuEventCreate");
      check(cu.EventCreate(&end, 0), "cuEventCreate");
      cu.EventRecord(start, nullptr);
    }
    CUresult launched = cu.LaunchKernel(function_, unsigned(dims.global[0]), unsigned(dims.global[1]), unsigned(dims.global[2]),
                                        unsigned(dims.local[0]), unsigned(dims.local[1]), unsigned(dims.local[2]), 0, nullptr,
                                        params.empty() ? nullptr : params.data(), nullptr);
    float ms = 0;
    if (timed) {
      cu.EventRecord(end, nullptr);
      CUresult done = cu.EventSynchronize(end);
      if (done == CUDA_SUCCESS) cu.EventElapsedTime(&ms, start, end);
      cu.EventDestroy(start);
      cu.EventDestroy(end);
      check(launched, cat("launch of kernel ", name_));
      check(done, cat("kernel ", name_));
    } else {
      check(launched, cat("launch of kernel ", name_));
    }
    return double(ms) * 1e-3;
  }

 private:
  CUcontext context_;
  CUmodule module_;
  CUfunction function_;
  uint32_t num_params_;
};

class CudaDevice : public Device {
 public:
  CudaDevice() {
    const Driver& cu = driver();
    CUresult init = cu.Init(0);
    if (init != CUDA_SUCCESS) throw Error(cat("cuInit failed: ", describe(init), "; no usable NVIDIA GPU here"));
    int count = 0;
    check(cu.DeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) throw Error("the NVIDIA driver is installed but sees no GPU");
    check(cu.DeviceGet(&device_, 0), "cuDeviceGet");
    const NvrtcStatus& n = nvrtc_status();
    if (!n.available) throw Error(n.reason);
    check(cu.DevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    check(cu.CtxSetCurrent(context_), "cuCtxSetCurrent");

    auto attribute = [&](int which) {
      int value = 0;
      check(cu.DeviceGetAttribute(&value, which, device_), cat("cuDeviceGetAttribute(", which, ")"));
      return int64_t(value);
    };
    char name[256] = {};
    cu.DeviceGetName(name, sizeof(name) - 1, device_);
    int driver_version = 0;
    cu.DriverGetVersion(&driver_version);
    int64_t major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    std::string sm = cat("sm_", major, minor);
    // A GPU newer than this NVRTC knows gets PTX for the newest arch NVRTC has, which the driver JITs.
    const std::vector<std::string>& archs = nvrtc_archs();
    target_ = archs.empty() || std::find(archs.begin(), archs.end(), sm) != archs.end()
                  ? sm
                  : "compute_" + archs.back().substr(3);
    size_t total = 0;
    check(cu.DeviceTotalMem(&total, device_), "cuDeviceTotalMem");

    spec_.name = "CUDA";
    spec_.arch = sm;
    spec_.compiler = cat("NVRTC ", n.version, " --gpu-architecture=", target_, "; ", name, "; driver ", driver_version / 1000,
                         ".", driver_version % 1000 / 10);
    spec_.lang = Language::CUDA;
    spec_.threads = 1;
    spec_.max_local = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    for (int d = 0; d < 3; ++d) {
      spec_.max_local_dims[d] = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + d);
      spec_.max_global_dims[d] = attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + d);
    }
    spec_.shared_bytes = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);  // static __shared__ limit
    spec_.max_buffer_bytes = int64_t(total);
    spec_.has_fp16 = major * 10 + minor >= 53;
    spec_.has_fp64 = true;
  }
  ~CudaDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }

  void synchronize() override {
    check(driver().CtxSetCurrent(context_), "cuCtxSetCurrent");
    check(driver().CtxSynchronize(), "cuCtxSynchronize (a queued kernel)");
  }

  Binary compile(const std::string& source, const std::string& name) override {
    std::vector<uint8_t> code = nvrtc_compile(source, name, target_);
    std::vector<uint8_t> bytes(kBinaryMagic, kBinaryMagic + 8);
    uint32_t params = count_params(source, name);
    for (int i = 0; i < 4; ++i) bytes.push_back(uint8_t(params >> (8 * i)));
    bytes.insert(bytes.end(), code.begin(), code.end());
    return Binary{name, std::move(bytes)};
  }

  std::unique_ptr<Program> load(const Binary& binary) override {
    if (binary.data.size() < 12 || std::memcmp(binary.data.data(), kBinaryMagic, 8) != 0)
      throw Error(cat("CUDA: loading kernel ", binary.name, ": not a binary that CUDA's compile() made"));
    uint32_t params = 0;
    for (int i = 0; i < 4; ++i) params |= uint32_t(binary.data[8 + i]) << (8 * i);
    std::vector<uint8_t> image(binary.data.begin() + 12, binary.data.end());
    image.push_back(0);  // PTX is read as a NUL-terminated string; a CUBIN ignores the extra byte
    const Driver& cu = driver();
    check(cu.CtxSetCurrent(context_), "cuCtxSetCurrent");
    CUmodule module = nullptr;
    check(cu.ModuleLoadData(&module, image.data()), cat("loading kernel ", binary.name, " (cuModuleLoadData)"));
    CUfunction function = nullptr;
    CUresult found = cu.ModuleGetFunction(&function, module, binary.name.c_str());
    if (found != CUDA_SUCCESS) {
      cu.ModuleUnload(module);
      throw Error(cat("CUDA: loading kernel ", binary.name, ": no kernel named \"", binary.name, "\" (", describe(found),
                      "); the extern \"C\" __global__ function must have this name"));
    }
    return std::make_unique<CudaProgram>(context_, module, function, binary.name, params, spec_);
  }

 protected:
  RawBuffer alloc_raw(size_t bytes) override {
    if (bytes > size_t(spec_.max_buffer_bytes))
      throw OutOfMemory(cat("larger than this GPU's memory, ", spec_.max_buffer_bytes, " bytes"));
    check(driver().CtxSetCurrent(context_), "cuCtxSetCurrent");
    CUdeviceptr p = 0;
    CUresult r = driver().MemAlloc(&p, std::max<size_t>(bytes, 1));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      size_t free = 0, total = 0;
      driver().MemGetInfo(&free, &total);
      throw OutOfMemory(cat("cuMemAlloc: out of memory; ", free, " of the GPU's ", total, " bytes are free"));
    }
    check(r, cat("cuMemAlloc of ", bytes, " bytes"));
    return RawBuffer{reinterpret_cast<void*>(p), bytes};
  }
  void free_raw(RawBuffer buffer) override {
    driver().CtxSetCurrent(context_);
    driver().MemFree(reinterpret_cast<CUdeviceptr>(buffer.handle));  // waits for kernels that use it
  }
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override {
    check(driver().CtxSetCurrent(context_), "cuCtxSetCurrent");
    check(driver().MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst.handle), src, bytes), cat("copy_in of ", bytes, " bytes"));
  }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override {
    check(driver().CtxSetCurrent(context_), "cuCtxSetCurrent");
    // Synchronous on the null stream: every kernel queued before it has finished.
    check(driver().MemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src.handle), bytes),
          cat("copy_out of ", bytes, " bytes (or a kernel queued before it)"));
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string target_;  // what NVRTC compiles for: "sm_90", or "compute_90" for the driver to JIT
  DeviceSpec spec_;
};

}  // namespace

const NvrtcStatus& nvrtc_status() { return nvrtc_load().status; }

std::vector<std::string> nvrtc_archs() {
  const NvrtcLoad& l = nvrtc_load();
  return l.api ? l.api->archs : std::vector<std::string>{};
}

size_t nvrtc_compiles() { return nvrtc_runs.load(); }

std::vector<uint8_t> nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch) {
  const Nvrtc& n = nvrtc();
  std::vector<std::string> options = nvrtc_options(arch);
  std::string joined;
  for (const std::string& o : options) joined += " " + o;
  BinaryCacheKey key = binary_cache_key(source, cat("kiln-cuda-1\nNVRTC ", n.version, joined));
  if (auto cached = read_cached_binary("cuda", key)) return std::move(*cached);

  nvrtcProgram program = nullptr;
  nvrtcResult created = n.CreateProgram(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  if (created != 0) throw Error(cat("CUDA: compiling kernel ", name, ": nvrtcCreateProgram failed: ", n.GetErrorString(created)));
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram& p;
    ~Destroy() { n.DestroyProgram(&p); }
  } destroy{n, program};
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  nvrtcResult compiled = n.CompileProgram(program, int(argv.size()), argv.data());
  ++nvrtc_runs;
  size_t log_size = 0;
  std::string log;
  if (n.GetProgramLogSize(program, &log_size) == 0 && log_size > 1) {
    log.resize(log_size);
    n.GetProgramLog(program, log.data());
    log.resize(std::strlen(log.c_str()));
  }
  if (compiled != 0)
    throw CompileError("CUDA", name, cat("NVRTC ", n.version, joined, ": ", n.GetErrorString(compiled), "\n", log), source);
  bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  nvrtcResult sized = cubin ? n.GetCUBINSize(program, &size) : n.GetPTXSize(program, &size);
  if (sized != 0 || size == 0)
    throw Error(cat("CUDA: compiling kernel ", name, ": NVRTC compiled it but gave no ", cubin ? "CUBIN" : "PTX", " (",
                    n.GetErrorString(sized), ")"));
  std::vector<uint8_t> bytes(size);
  nvrtcResult got = cubin ? n.GetCUBIN(program, reinterpret_cast<char*>(bytes.data()))
                          : n.GetPTX(program, reinterpret_cast<char*>(bytes.data()));
  if (got != 0) throw Error(cat("CUDA: compiling kernel ", name, ": reading NVRTC's output failed: ", n.GetErrorString(got)));
  write_cached_binary("cuda", key, bytes);
  return bytes;
}

DeviceSpec cuda_compile_only_spec(std::string arch) {
  if (arch.empty()) {
    std::vector<std::string> archs = nvrtc_archs();
    arch = archs.empty() || std::find(archs.begin(), archs.end(), "sm_90") != archs.end() ? "sm_90" : archs.back();
  }
  DeviceSpec spec;
  spec.name = "CUDA";
  spec.arch = arch;
  spec.compiler = cat("NVRTC ", nvrtc_status().version, " --gpu-architecture=", arch, " (compile only)");
  spec.lang = Language::CUDA;
  spec.threads = 1;
  spec.max_local = 1024;
  spec.max_local_dims = {1024, 1024, 64};
  spec.max_global_dims = {INT32_MAX, 65535, 65535};
  spec.shared_bytes = 48 * 1024;
  spec.max_buffer_bytes = INT64_MAX;
  spec.has_fp16 = true;
  spec.has_fp64 = true;
  return spec;
}

std::unique_ptr<Device> make_cuda_device() { return std::make_unique<CudaDevice>(); }

}  // namespace kiln

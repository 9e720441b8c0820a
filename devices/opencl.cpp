// The OPENCL device: any OpenCL 1.2+ driver through the ICD loader (libOpenCL.so.1, dlopen'ed), running
// kernels rendered as OpenCL C (lower/renderers/cstyle.h: opencl_language()).
//
//   Device& cl = get_device("OPENCL");   // the first GPU of any platform, else the first device
//   Binary bin = cl.compile(source, "E_16");   // a program binary; the on-disk cache skips the build
//   cl.load(bin)->launch(bufs, vars, LaunchDims{{groups, 1, 1}, {local, 1, 1}}, false);
//
// Kernel ABI: `__kernel void NAME(__global T* data0, ..., long var0, ...)`: the launch's buffers in
// order, then the values of its vars. LaunchDims::global counts workgroups (lower/lower.h), so the
// NDRange's global work size is global[d] * local[d].
//
// Everything goes through one in-order queue: copy_in writes before it returns, launches are queued,
// copy_out and synchronize wait for what was queued before them. Compiled programs are cached as their
// binaries (clGetProgramInfo CL_PROGRAM_BINARIES) under <cache_dir>/opencl, keyed by the source and the
// platform, device, driver and build options; a cached binary still goes through clBuildProgram, which
// for a binary only links it.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/binary_cache.h"
#include "devices/device.h"
#include "uop/config.h"

namespace kiln {
namespace {

// --- the slice of the OpenCL 1.2 API kiln uses (no headers needed) ----------------------------

using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bitfield = cl_ulong;
using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_MEM_OBJECT_ALLOCATION_FAILURE = -4;
constexpr cl_int CL_OUT_OF_RESOURCES = -5;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_bitfield CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_bitfield CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;
constexpr cl_uint CL_PLATFORM_VERSION = 0x0901, CL_PLATFORM_NAME = 0x0902;
constexpr cl_uint CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS = 0x1003, CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004,
                  CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005, CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010,
                  CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F, CL_DEVICE_LOCAL_MEM_SIZE = 0x1023, CL_DEVICE_NAME = 0x102B,
                  CL_DRIVER_VERSION = 0x102D, CL_DEVICE_VERSION = 0x102F, CL_DEVICE_EXTENSIONS = 0x1030,
                  CL_DEVICE_DOUBLE_FP_CONFIG = 0x1032, CL_DEVICE_OPENCL_C_VERSION = 0x103D;
constexpr cl_bitfield CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_bitfield CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_uint CL_PROGRAM_BINARY_SIZES = 0x1165, CL_PROGRAM_BINARIES = 0x1166, CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_uint CL_KERNEL_NUM_ARGS = 0x1191;
constexpr cl_uint CL_PROFILING_COMMAND_START = 0x1282, CL_PROFILING_COMMAND_END = 0x1283;
constexpr cl_uint CL_TRUE = 1;  // blocking reads and writes

// The entry points, looked up in the ICD loader.
struct OpenCL {
  cl_int (*GetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
  cl_int (*GetPlatformInfo)(cl_platform_id, cl_uint, size_t, void*, size_t*);
  cl_int (*GetDeviceIDs)(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
  cl_int (*GetDeviceInfo)(cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_context (*CreateContext)(const intptr_t*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
  cl_command_queue (*CreateCommandQueue)(cl_context, cl_device_id, cl_bitfield, cl_int*);
  cl_mem (*CreateBuffer)(cl_context, cl_bitfield, size_t, void*, cl_int*);
  cl_int (*ReleaseMemObject)(cl_mem);
  cl_int (*EnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, const void*, cl_uint, const cl_event*, cl_event*);
  cl_int (*EnqueueReadBuffer)(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void*, cl_uint, const cl_event*, cl_event*);
  cl_program (*CreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
  cl_program (*CreateProgramWithBinary)(cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**, cl_int*, cl_int*);
  cl_int (*BuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
  cl_int (*GetProgramBuildInfo)(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
  cl_int (*GetProgramInfo)(cl_program, cl_uint, size_t, void*, size_t*);
  cl_int (*ReleaseProgram)(cl_program);
  cl_kernel (*CreateKernel)(cl_program, const char*, cl_int*);
  cl_int (*GetKernelInfo)(cl_kernel, cl_uint, size_t, void*, size_t*);
  cl_int (*ReleaseKernel)(cl_kernel);
  cl_int (*SetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
  cl_int (*EnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*, cl_uint,
                                 const cl_event*, cl_event*);
  cl_int (*WaitForEvents)(cl_uint, const cl_event*);
  cl_int (*GetEventProfilingInfo)(cl_event, cl_uint, size_t, void*, size_t*);
  cl_int (*ReleaseEvent)(cl_event);
  cl_int (*Flush)(cl_command_queue);
  cl_int (*Finish)(cl_command_queue);
};

const char* error_name(cl_int code) {
  switch (code) {
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -30: return "CL_INVALID_VALUE";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -42: return "CL_INVALID_BINARY";
    case -43: return "CL_INVALID_BUILD_OPTIONS";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an OpenCL error";
  }
}

std::string describe(cl_int code) { return cat(error_name(code), " (", code, ")"); }

// The ICD loader, opened once per process and never closed (drivers keep threads that use it).
const OpenCL& api() {
  static const OpenCL loaded = [] {
    void* lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw Error(cat("the OpenCL ICD loader libOpenCL.so.1 is not installed (dlopen: ", dlerror(),
                      "); install it and a driver, e.g. apt-get install ocl-icd-libopencl1 pocl-opencl-icd"));
    OpenCL cl{};
    auto get = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (!fn) throw Error(cat("libOpenCL.so.1 has no ", symbol, "; it is not an OpenCL 1.2 ICD loader"));
    };
    get(cl.GetPlatformIDs, "clGetPlatformIDs");
    get(cl.GetPlatformInfo, "clGetPlatformInfo");
    get(cl.GetDeviceIDs, "clGetDeviceIDs");
    get(cl.GetDeviceInfo, "clGetDeviceInfo");
    get(cl.CreateContext, "clCreateContext");
    get(cl.CreateCommandQueue, "clCreateCommandQueue");
    get(cl.CreateBuffer, "clCreateBuffer");
    get(cl.ReleaseMemObject, "clReleaseMemObject");
    get(cl.EnqueueWriteBuffer, "clEnqueueWriteBuffer");
    get(cl.EnqueueReadBuffer, "clEnqueueReadBuffer");
    get(cl.CreateProgramWithSource, "clCreateProgramWithSource");
    get(cl.CreateProgramWithBinary, "clCreateProgramWithBinary");
    get(cl.BuildProgram, "clBuildProgram");
    get(cl.GetProgramBuildInfo, "clGetProgramBuildInfo");
    get(cl.GetProgramInfo, "clGetProgramInfo");
    get(cl.ReleaseProgram, "clReleaseProgram");
    get(cl.CreateKernel, "clCreateKernel");
    get(cl.GetKernelInfo, "clGetKernelInfo");
    get(cl.ReleaseKernel, "clReleaseKernel");
    get(cl.SetKernelArg, "clSetKernelArg");
    get(cl.EnqueueNDRangeKernel, "clEnqueueNDRangeKernel");
    get(cl.WaitForEvents, "clWaitForEvents");
    get(cl.GetEventProfilingInfo, "clGetEventProfilingInfo");
    get(cl.ReleaseEvent, "clReleaseEvent");
    get(cl.Flush, "clFlush");
    get(cl.Finish, "clFinish");
    return cl;
  }();
  return loaded;
}

void check(cl_int code, const std::string& what) {
  if (code != CL_SUCCESS) throw Error(cat("OPENCL: ", what, " failed: ", describe(code)));
}

std::string platform_string(cl_platform_id p, cl_uint param) {
  size_t n = 0;
  if (api().GetPlatformInfo(p, param, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  api().GetPlatformInfo(p, param, n, s.data(), nullptr);
  return s.c_str();  // without the terminating NUL
}

std::string device_string(cl_device_id d, cl_uint param) {
  size_t n = 0;
  if (api().GetDeviceInfo(d, param, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  api().GetDeviceInfo(d, param, n, s.data(), nullptr);
  return s.c_str();
}

template <typename T>
T device_value(cl_device_id d, cl_uint param) {
  T value{};
  check(api().GetDeviceInfo(d, param, sizeof(T), &value, nullptr), cat("clGetDeviceInfo(", param, ")"));
  return value;
}

std::string build_log(cl_program program, cl_device_id device) {
  size_t n = 0;
  if (api().GetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string log(n, '\0');
  api().GetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  return log.c_str();
}

// No -cl-fast-relaxed-math or -cl-finite-math-only: NaN and inf must propagate, as on the CPU.
constexpr const char* kBuildOptions = "-cl-std=CL1.2";

struct ProgramHandle {
  cl_program program = nullptr;
  ~ProgramHandle() {
    if (program) api().ReleaseProgram(program);
  }
};

class OpenCLProgram : public Program {
 public:
  OpenCLProgram(cl_command_queue queue, cl_program program, cl_kernel kernel, std::string name, cl_uint num_args,
                const DeviceSpec& spec)
      : Program(spec, std::move(name)), queue_(queue), program_(program), kernel_(kernel), num_args_(num_args) {}
  ~OpenCLProgram() override {
    api().ReleaseKernel(kernel_);
    api().ReleaseProgram(program_);
  }

 protected:
  double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) override {
    // A kernel declares the buffers up to the last one it uses: trailing ones it does not use are not
    // its parameters, and are not passed.
    if (vars.size() > num_args_ || bufs.size() + vars.size() < num_args_)
      throw Error(cat("OPENCL: launch of kernel ", name_, " with ", bufs.size(), " buffers and ", vars.size(),
                      " vars; the kernel takes ", num_args_, " arguments (its buffers, then its vars)"));
    bufs = bufs.first(num_args_ - vars.size());
    std::array<size_t, 3> global{}, local{};
    for (int d = 0; d < 3; ++d) {
      global[d] = size_t(dims.global[d]) * size_t(dims.local[d]);
      local[d] = size_t(dims.local[d]);
    }
    cl_event event = nullptr;
    {
      // Arguments live in the kernel object: setting them and enqueueing is one step.
      std::lock_guard<std::mutex> lock(mu_);
      cl_uint arg = 0;
      for (const RawBuffer& b : bufs) {
        cl_mem mem = static_cast<cl_mem>(b.handle);
        check(api().SetKernelArg(kernel_, arg, sizeof(cl_mem), &mem), cat("clSetKernelArg(buffer ", arg, ") of kernel ", name_));
        ++arg;
      }
      for (int64_t v : vars) {
        cl_ulong value = static_cast<cl_ulong>(v);
        check(api().SetKernelArg(kernel_, arg, sizeof(value), &value), cat("clSetKernelArg(var ", arg, ") of kernel ", name_));
        ++arg;
      }
      check(api().EnqueueNDRangeKernel(queue_, kernel_, 3, nullptr, global.data(), local.data(), 0, nullptr,
                                       timed ? &event : nullptr),
            cat("launch of kernel ", name_));
    }
    if (!timed) return 0.0;
    cl_int waited = api().WaitForEvents(1, &event);
    cl_ulong start = 0, end = 0;
    if (waited == CL_SUCCESS) {
      api().GetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
      api().GetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
    }
    api().ReleaseEvent(event);
    check(waited, cat("kernel ", name_));
    return double(end - start) * 1e-9;
  }

 private:
  cl_command_queue queue_;
  cl_program program_;
  cl_kernel kernel_;
  cl_uint num_args_;
  std::mutex mu_;
};

class OpenCLDevice : public Device {
 public:
  OpenCLDevice() {
    const OpenCL& cl = api();
    cl_uint count = 0;
    cl_int found = cl.GetPlatformIDs(0, nullptr, &count);
    if (found == CL_PLATFORM_NOT_FOUND_KHR || (found == CL_SUCCESS && count == 0))
      throw Error("no OpenCL platform: the ICD loader found no driver (no .icd file in /etc/OpenCL/vendors); install "
                  "one, e.g. apt-get install pocl-opencl-icd (any CPU) or the GPU vendor's OpenCL driver");
    check(found, "clGetPlatformIDs");
    std::vector<cl_platform_id> platforms(count);
    check(cl.GetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
    // The first GPU of any platform; else the first device at all.
    for (cl_bitfield type : {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL}) {
      for (cl_platform_id p : platforms) {
        cl_uint n = 0;
        if (cl.GetDeviceIDs(p, type, 1, &device_, &n) == CL_SUCCESS && n > 0) {
          platform_ = p;
          break;
        }
      }
      if (platform_) break;
    }
    if (!platform_) throw Error(cat("no OpenCL device: ", count, " platform(s), none with a device"));

    std::string c_version = device_string(device_, CL_DEVICE_OPENCL_C_VERSION);  // "OpenCL C 1.2 ..."
    int major = 0, minor = 0;
    if (std::sscanf(c_version.c_str(), "OpenCL C %d.%d", &major, &minor) != 2 || major * 10 + minor < 12)
      throw Error(cat("the OpenCL device ", device_string(device_, CL_DEVICE_NAME), " supports \"", c_version,
                      "\"; kiln needs OpenCL C 1.2 or later"));

    cl_int err = CL_SUCCESS;
    intptr_t properties[] = {0x1084 /* CL_CONTEXT_PLATFORM */, reinterpret_cast<intptr_t>(platform_), 0};
    context_ = cl.CreateContext(properties, 1, &device_, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    queue_ = cl.CreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &err);
    check(err, "clCreateCommandQueue");

    std::string name = device_string(device_, CL_DEVICE_NAME), driver = device_string(device_, CL_DRIVER_VERSION);
    spec_.name = "OPENCL";
    spec_.arch = name;
    spec_.compiler = cat(platform_string(platform_, CL_PLATFORM_NAME), " ", platform_string(platform_, CL_PLATFORM_VERSION),
                         "; ", device_string(device_, CL_DEVICE_VERSION), "; driver ", driver, "; ", kBuildOptions);
    spec_.lang = Language::OpenCL;
    spec_.threads = 1;
    spec_.max_local = int64_t(device_value<size_t>(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE));
    cl_uint dims = device_value<cl_uint>(device_, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS);
    std::vector<size_t> sizes(std::max<cl_uint>(dims, 3), 1);
    check(cl.GetDeviceInfo(device_, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(size_t) * dims, sizes.data(), nullptr),
          "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)");
    for (int d = 0; d < 3; ++d) spec_.max_local_dims[d] = d < int(dims) ? int64_t(sizes[d]) : 1;
    // OpenCL sets no limit on the number of workgroups besides size_t; kernels index with 32-bit ids
    // where they can, so the count per dimension stays within int32.
    spec_.max_global_dims = {INT32_MAX, INT32_MAX, INT32_MAX};
    spec_.shared_bytes = int64_t(device_value<cl_ulong>(device_, CL_DEVICE_LOCAL_MEM_SIZE));
    spec_.max_buffer_bytes = int64_t(device_value<cl_ulong>(device_, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
    global_bytes_ = int64_t(device_value<cl_ulong>(device_, CL_DEVICE_GLOBAL_MEM_SIZE));
    std::string extensions = device_string(device_, CL_DEVICE_EXTENSIONS);
    spec_.has_fp16 = extensions.find("cl_khr_fp16") != std::string::npos;
    spec_.has_fp64 = extensions.find("cl_khr_fp64") != std::string::npos ||
                     device_value<cl_ulong>(device_, CL_DEVICE_DOUBLE_FP_CONFIG) != 0;
    fingerprint_ = cat("kiln-opencl-1\n", spec_.compiler, "\n", name, "\n", c_version);
  }
  ~OpenCLDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }

  void synchronize() override { check(api().Finish(queue_), "clFinish (a queued kernel)"); }

  Binary compile(const std::string& source, const std::string& name) override {
    BinaryCacheKey key = binary_cache_key(source, fingerprint_);
    if (auto cached = read_cached_binary("opencl", key)) return Binary{name, std::move(*cached)};
    const char* text = source.c_str();
    size_t length = source.size();
    cl_int err = CL_SUCCESS;
    ProgramHandle p;
    p.program = api().CreateProgramWithSource(context_, 1, &text, &length, &err);
    check(err, cat("clCreateProgramWithSource for kernel ", name));
    cl_int built = api().BuildProgram(p.program, 1, &device_, kBuildOptions, nullptr, nullptr);
    if (built != CL_SUCCESS) {
      std::string log = build_log(p.program, device_);
      if (built == CL_BUILD_PROGRAM_FAILURE || !log.empty())
        throw CompileError("OPENCL", name, cat("clBuildProgram (", kBuildOptions, "): ", describe(built), "\n", log), source);
      check(built, cat("clBuildProgram for kernel ", name));
    }
    size_t size = 0;
    check(api().GetProgramInfo(p.program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr),
          cat("clGetProgramInfo(CL_PROGRAM_BINARY_SIZES) for kernel ", name));
    std::vector<uint8_t> bytes(size);
    unsigned char* where = bytes.data();
    check(api().GetProgramInfo(p.program, CL_PROGRAM_BINARIES, sizeof(where), &where, nullptr),
          cat("clGetProgramInfo(CL_PROGRAM_BINARIES) for kernel ", name));
    if (bytes.empty())
      throw Error(cat("OPENCL: compiling kernel ", name, ": the driver built it but gave an empty program binary"));
    write_cached_binary("opencl", key, bytes);
    return Binary{name, std::move(bytes)};
  }

  std::unique_ptr<Program> load(const Binary& binary) override {
    const unsigned char* data = binary.data.data();
    size_t size = binary.data.size();
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    ProgramHandle p;
    p.program = api().CreateProgramWithBinary(context_, 1, &device_, &size, &data, &status, &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS)
      throw Error(cat("OPENCL: loading kernel ", binary.name, ": clCreateProgramWithBinary failed: ",
                      describe(err != CL_SUCCESS ? err : status),
                      "; the binary must be one that this device's compile() made"));
    cl_int built = api().BuildProgram(p.program, 1, &device_, kBuildOptions, nullptr, nullptr);
    if (built != CL_SUCCESS)
      throw Error(cat("OPENCL: loading kernel ", binary.name, ": clBuildProgram of its binary failed: ", describe(built), "\n",
                      build_log(p.program, device_)));
    cl_kernel kernel = api().CreateKernel(p.program, binary.name.c_str(), &err);
    if (err != CL_SUCCESS)
      throw Error(cat("OPENCL: loading kernel ", binary.name, ": no kernel named \"", binary.name, "\" in the program (",
                      describe(err), "); the __kernel function must have this name"));
    cl_uint num_args = 0;
    check(api().GetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof(num_args), &num_args, nullptr),
          cat("clGetKernelInfo of kernel ", binary.name));
    cl_program program = p.program;
    p.program = nullptr;  // the Program owns it now
    return std::make_unique<OpenCLProgram>(queue_, program, kernel, binary.name, num_args, spec_);
  }

 protected:
  RawBuffer alloc_raw(size_t bytes) override {
    if (bytes > size_t(spec_.max_buffer_bytes))
      throw OutOfMemory(cat("larger than this OpenCL device's largest allocation, ", spec_.max_buffer_bytes,
                            " bytes (CL_DEVICE_MAX_MEM_ALLOC_SIZE; ", global_bytes_, " bytes of device memory in all)"));
    cl_int err = CL_SUCCESS;
    // A zero-byte buffer is invalid in OpenCL; an empty tensor still gets a handle.
    cl_mem mem = api().CreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &err);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == -6 /* CL_OUT_OF_HOST_MEMORY */ ||
        err == -61 /* CL_INVALID_BUFFER_SIZE */)
      throw OutOfMemory(cat("clCreateBuffer: ", describe(err), "; the device has ", global_bytes_,
                            " bytes of memory, at most ", spec_.max_buffer_bytes, " in one allocation"));
    check(err, cat("clCreateBuffer of ", bytes, " bytes"));
    return RawBuffer{mem, bytes};
  }
  void free_raw(RawBuffer buffer) override { api().ReleaseMemObject(static_cast<cl_mem>(buffer.handle)); }
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override {
    check(api().EnqueueWriteBuffer(queue_, static_cast<cl_mem>(dst.handle), CL_TRUE, 0, bytes, src, 0, nullptr, nullptr),
          cat("copy_in of ", bytes, " bytes"));
  }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override {
    // Blocking, on the in-order queue: every launch queued before it has finished.
    check(api().EnqueueReadBuffer(queue_, static_cast<cl_mem>(src.handle), CL_TRUE, 0, bytes, dst, 0, nullptr, nullptr),
          cat("copy_out of ", bytes, " bytes (or a kernel queued before it)"));
  }

 private:

  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  DeviceSpec spec_;
  int64_t global_bytes_ = 0;
  std::string fingerprint_;
};

}  // namespace

std::unique_ptr<Device> make_opencl_device() { return std::make_unique<OpenCLDevice>(); }

}  // namespace kiln

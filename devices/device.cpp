#include "devices/device.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace kiln {

const char* language_name(Language lang) {
  switch (lang) {
    case Language::C: return "C";
    case Language::OpenCL: return "OpenCL C";
    case Language::CUDA: return "CUDA C";
    case Language::SPIRV: return "SPIR-V";
    case Language::UOps: return "linear UOps";
    case Language::LLVM: return "LLVM IR";
  }
  return "?";
}
namespace {

// "   7 | x = y;" for every line, so a compiler's "k.c:7:3: error" can be matched by eye.
std::string number_lines(const std::string& source) {
  std::ostringstream out;
  std::istringstream in(source);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) out << std::setw(4) << number << " | " << line << '\n';
  return out.str();
}

std::string describe_bytes(size_t bytes) {
  auto in = [&](int shift, const char* unit) {
    return cat(bytes, " bytes (", std::fixed, std::setprecision(1), double(bytes) / double(size_t(1) << shift), " ", unit, ")");
  };
  if (bytes >= (size_t(1) << 30)) return in(30, "GiB");
  if (bytes >= (size_t(1) << 20)) return in(20, "MiB");
  return cat(bytes, " bytes");
}

}  // namespace

CompileError::CompileError(const std::string& device, const std::string& kernel, const std::string& log,
                           const std::string& source)
    : Error(cat(device, ": compiling kernel ", kernel, " failed\ncompiler output:\n", log,
                log.empty() || log.back() == '\n' ? "" : "\n", "source of ", kernel, ":\n", number_lines(source))),
      device(device),
      kernel(kernel),
      log(log),
      source(source) {}

// Derived destructors release the cache (see device.h); buffers still here are deliberately dropped.
Device::~Device() = default;

RawBuffer Device::alloc(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto hit = cache_.find(bytes);
    if (hit != cache_.end()) {
      RawBuffer buffer = hit->second;
      cache_.erase(hit);
      cached_bytes_ -= bytes;
      return buffer;
    }
  }
  try {
    return alloc_raw(bytes);
  } catch (const OutOfMemory&) {
    // The cache holds buffers of other sizes; giving them back may leave room for this one.
  }
  size_t released = cached_bytes();
  release_cached();
  try {
    return alloc_raw(bytes);
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(cat(spec().name, ": cannot allocate ", describe_bytes(bytes), ", even after releasing ",
                          describe_bytes(released), " of cached buffers (", e.what(),
                          "); free tensors you no longer need or use smaller sizes"));
  }
}

void Device::free(RawBuffer buffer) {
  if (buffer.handle == nullptr) return;
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_.emplace(buffer.bytes, buffer);
  cached_bytes_ += buffer.bytes;
}

void Device::release_cached() {
  std::multimap<size_t, RawBuffer> released;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    released.swap(cache_);
    cached_bytes_ = 0;
  }
  for (auto& [bytes, buffer] : released) free_raw(buffer);
}

namespace {

void check_copy(const DeviceSpec& spec, const char* what, RawBuffer buffer, size_t bytes) {
  if (bytes > buffer.bytes)
    throw Error(cat(spec.name, ": ", what, " of ", bytes, " bytes with a buffer of ", buffer.bytes,
                    " bytes; copy at most the buffer's size"));
}

std::string dims_text(const std::array<int64_t, 3>& d) { return cat("{", d[0], ", ", d[1], ", ", d[2], "}"); }

}  // namespace

void Device::copy_in(RawBuffer dst, const void* src, size_t bytes) {
  check_copy(spec(), "copy_in", dst, bytes);
  if (bytes > 0) copy_in_raw(dst, src, bytes);
}

void Device::copy_out(void* dst, RawBuffer src, size_t bytes) {
  check_copy(spec(), "copy_out", src, bytes);
  if (bytes > 0) copy_out_raw(dst, src, bytes);
}

// A device without local dims (max_local == 0: CPU-style) takes local {1, 1, 1} only.
double Program::launch(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) {
  const auto& [global, local] = dims;
  int64_t workgroup = 1;
  bool fits = true;
  for (int d = 0; d < 3; ++d) {
    fits = fits && global[d] >= 0 && global[d] <= spec_.max_global_dims[d] && local[d] >= 1 &&
           local[d] <= std::max<int64_t>(1, spec_.max_local_dims[d]);
    workgroup *= std::max<int64_t>(1, local[d]);
  }
  if (!fits || workgroup > std::max<int64_t>(1, spec_.max_local))
    throw Error(cat(spec_.name, ": launch of kernel ", name_, " with global ", dims_text(global), " and local ",
                    dims_text(local), ": outside the device's limits (global at most ", dims_text(spec_.max_global_dims),
                    spec_.max_local > 0 ? cat(", local at most ", dims_text(spec_.max_local_dims), " and ", spec_.max_local,
                                              " work-items in all")
                                        : std::string(", local {1, 1, 1} only"),
                    "); launch with the LaunchDims lower_kernel gives for this device's DeviceSpec"));
  if (global[0] == 0 || global[1] == 0 || global[2] == 0) return 0.0;  // nothing to run
  return run(bufs, vars, dims, timed);
}

size_t Device::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return cached_bytes_;
}

}  // namespace kiln

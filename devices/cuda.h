// The CUDA device: kernels rendered as CUDA C (lower/renderers/cstyle.h: cuda_language()), compiled by
// NVRTC (libnvrtc.so, dlopen'ed) into CUBIN for the GPU's sm_XY, loaded and launched through the driver
// API (libcuda.so.1, dlopen'ed). Without libcuda.so.1 or a GPU the device is unavailable and says why.
//
//   Device& cuda = get_device("CUDA");
//   cuda.load(cuda.compile(source, "E_16"))->launch(bufs, vars, LaunchDims{{blocks, 1, 1}, {threads, 1, 1}}, false);
//
// Kernel ABI: `extern "C" __global__ void NAME(T* data0, ..., int64_t var0, ...)`: the launch's buffers
// in order, then the values of its vars. LaunchDims::global is the grid (blocks), local the block.
// Memory and launches are ordered on the null stream: copy_out waits for queued kernels.
//
// NVRTC alone (the CUDA toolkit without a GPU, as in CI here) still compiles kernels: nvrtc_compile()
// needs no driver, and tests/test_gpu_cstyle.cpp uses it with KILN_CUDA_COMPILE_ONLY=1 to compile every
// kernel of the conformance suite for a CUDA DeviceSpec (cuda_compile_only_spec()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "devices/device.h"

namespace kiln {

// Whether NVRTC could be loaded here, and its version ("13.0") or why not.
struct NvrtcStatus {
  bool available = false;
  std::string version;
  std::string reason;
};
const NvrtcStatus& nvrtc_status();

// The GPU architectures this NVRTC compiles for ("sm_75", ...), oldest first; empty without NVRTC.
std::vector<std::string> nvrtc_archs();

// Compiles CUDA C with NVRTC for `arch` ("sm_90": a CUBIN; "compute_90": PTX for the driver to JIT),
// through the on-disk cache (<cache_dir>/cuda). Throws CompileError("CUDA", name, log, source) when the
// source does not compile, Error when NVRTC is missing. Counts real NVRTC runs (nvrtc_compiles()).
std::vector<uint8_t> nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch);
size_t nvrtc_compiles();

// A CUDA DeviceSpec for lowering where no GPU can be asked: `arch` and the limits every CUDA GPU since
// sm_70 has (1024 threads per block, 48 KiB of static shared memory per block, 2^31-1 x 65535 x 65535
// blocks). The arch defaults to sm_90 where NVRTC supports it, else the newest it does.
DeviceSpec cuda_compile_only_spec(std::string arch = "");

}  // namespace kiln

// The CPU device: the host kit (devices/host.h: the kernel ABI, memory, the launch team) with the
// in-process LLVM compiler (devices/llvm_compiler.cpp) when libLLVM loads, else the C compiler as a
// process (devices/c_compiler.cpp); `kiln devices` shows which and why. The CLANG device
// (devices/clang.cpp) is always the C compiler, so both paths stay certified.
//
//   Device& cpu = get_device("CPU");
//   Binary bin = cpu.compile(source, "E_4");   // LLVM IR (spec().lang == Language::LLVM) or C
//   cpu.load(bin)->launch(bufs, vars, LaunchDims{{n, 1, 1}, {1, 1, 1}}, false);
#pragma once
#include <memory>

#include "devices/device.h"
#include "devices/host.h"

namespace kiln {

// Opens a new CPU device (get_device("CPU") shares one); throws Error saying why when neither compiler works.
std::unique_ptr<Device> make_cpu_device();

}  // namespace kiln

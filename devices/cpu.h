// The CPU device: C kernels compiled by clang (or gcc) into shared objects, loaded with dlopen, and run
// with the launch split over the caller and a team of spinning helper threads (cpu.cpp: LaunchTeam).
//
//   Device& cpu = get_device("CPU");
//   Binary bin = cpu.compile(source, "E_4");   // runs the compiler only on a miss of the on-disk cache
//   cpu.load(bin)->launch(bufs, vars, LaunchDims{{n, 1, 1}, {1, 1, 1}}, false);
//
// Kernel ABI: the C source defines, with external linkage, an entry point named as the kernel:
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
//
// Sources are compiled with -O2 -march=native -fPIC -shared -fno-math-errno -fwrapv -fno-plt, without
// -ffast-math, so NaN and inf propagate as IEEE says. libm is linked.
#pragma once
#include <cstddef>
#include <memory>

#include "devices/device.h"

namespace kiln {

// Opens a new CPU device (get_device("CPU") shares one); throws Error saying why when no C compiler works.
std::unique_ptr<Device> make_cpu_device();

// How many times this process has run the C compiler for a kernel (not counting the probes that read its
// version): tests use it to see the compile cache working.
size_t cpu_compiler_invocations();

}  // namespace kiln

// The REF device: an interpreter of kiln's linear UOps, the correctness oracle for lowering.
//
//   Device& ref = get_device("REF");
//   LoweredKernel k = lower_kernel(ast, ref.spec());          // k.source == serialize_program(k.linear)
//   ref.load(ref.compile(k.source, k.name))->launch(bufs, vars, k.dims, false);
//
// It runs the exact linear program the C renderer renders, with the IR's semantics (uop/ops.h,
// exec_alu), one gid after another: for every gid in [0, global[0]) the whole program runs once, with
// SPECIAL gidx0 = gid. Where C leaves behaviour undefined it throws Error instead of guessing: a LOAD or
// STORE outside its buffer (naming kernel, buffer slot, index and size), integer division by zero or
// INT_MIN / -1, an out-of-range shift, a variable outside its declared range. So a lowering bug that
// would silently corrupt memory on the CPU is an error with a name here. Slow on purpose: it is a
// reference, not a backend.
#pragma once
#include <memory>

#include "devices/device.h"

namespace kiln {

std::unique_ptr<Device> make_ref_device();

}  // namespace kiln

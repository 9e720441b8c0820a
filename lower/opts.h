// Opts: the transformations that decide how a kernel's loops map onto a device. Search (search/)
// chooses a list of them (its action space: search/actions.h); without search, heuristic_opts() does.
//
//   std::vector<Opt> opts = heuristic_opts(ast, spec);          // what lower_kernel(ast, spec) uses
//   Lowering l = lower_with_opts(ast, spec, {{OptOp::UPCAST, 0, 8}, {OptOp::UNROLL, 2, 4}});  // the pipeline: lower.cpp
//   if (!l.kernel) std::cerr << l.rejected;                       // why an opt does not apply
//
// Axes. A kernel's axes are its loops after simplification: the output loops in order, then the
// reduce loops. An opt names an axis by its position in that list, and the list never changes as opts
// apply: an opt that takes a factor out of an axis leaves the axis with the rest (possibly size 1).
//
//   UPCAST(axis, n)    output axis: n neighbouring outputs per iteration (vector lanes where the device
//                      has vector types and the accesses are contiguous, else a register tile)
//   UNROLL(axis, n)    reduce axis: n iterations of the reduction per loop iteration
//   LOCAL(axis, n)     output axis, GPU-style devices: n work-items of a workgroup along it
//   GROUP(axis, n)     reduce axis, GPU-style devices: n work-items share the reduction, each taking
//                      contiguous chunks, combined through shared memory
//   GROUPTOP(axis, n)  like GROUP, work-items take interleaved elements (coalesced on GPUs)
//   THREAD(axis, 0)    output axis: the one the launch splits over the device's threads (CPU)
//   PADTO(axis, n)     rounds the axis up to a multiple of n; the extra iterations are masked
//   SWAP(axis, other)  swaps the order of two output loops
//
// An opt that does not apply (wrong kind of axis, a factor that does not divide, past a device limit,
// after an opt it conflicts with) is rejected with a reason, never a crash or a wrong kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.h"
#include "lower/lower.h"
#include "uop/uop.h"

namespace kiln {

const char* opt_op_name(OptOp op);
std::string to_string(const Opt& opt);                       // "UPCAST(1,8)"
std::string to_string(std::span<const Opt> opts);            // "UPCAST(1,8) UNROLL(2,4)", "" for none
std::optional<Opt> parse_opt(std::string_view text);         // inverse of to_string(Opt)

// The kernel lowered with exactly these opts, or (kernel empty) the reason the first opt that does not
// apply was rejected.
struct Lowering {
  std::optional<LoweredKernel> kernel;
  std::string rejected;
};
Lowering lower_with_opts(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> opts);

// The hand-written heuristics' choice for this kernel on this device.
std::vector<Opt> heuristic_opts(const UOpPtr& ast, const DeviceSpec& spec);

}  // namespace kiln

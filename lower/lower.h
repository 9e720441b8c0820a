// Lowering: a kernel AST from the scheduler to source text a device compiles.
//
//   LoweredKernel k = lower_kernel(item.ast, device.spec());
//   Binary bin = device.compile(k.source, k.name);
//   program->launch(bufs, {}, k.dims, false);
//
// The pipeline is one function, lower_with_opts (lower.cpp), a named pass per step (KILN_DEBUG=5 prints
// the graph after each, 6 the linear program):
//   simplify          symbolic rules on the whole AST (index math, constants)
//   transcendentals   float32 exp2/log2 as ALU ops, on devices that ask (DeviceSpec::alu_transcendentals)
//   <each opt>        UPCAST/UNROLL/LOCAL/GROUP/PADTO in order (opts.h; upcast.h makes tiles and lanes)
//   order loops       SWAPs put the output loops in their order
//   map launch        THREAD's axis -> the launch index (CPU-style); output loops and LOCAL ranges ->
//                     workgroup and work-item ids (GPU-style)
//   combine accesses  host renderers: consecutive scalar loads/stores -> one vector access (upcast.h)
//   lower reduces     REDUCE -> an accumulator register, an update inside its loops, a read after
//   close loops       each store is closed over the ranges it runs in
//   linearize         the DAG -> an ordered list with explicit loop nesting (linearize.h)
//   render            the list -> source in the device's language (renderers/)
// The opts themselves are chosen before: heuristic_opts (lower/heuristics.cpp) or search (search/).
//
// What a linear program may hold beyond plain loops, for renderers and devices:
//   SPECIAL(end) "gidx0"   CPU-style devices (DeviceSpec::max_local == 0): the launch index the device
//                          splits over its threads; 0 <= gidx0 < end == LaunchDims::global[0].
//   SPECIAL(end) "gidx<d>" GPU-style devices (max_local > 0): the workgroup id in dimension d = 0..2,
//                          0 <= gidx<d> < end == LaunchDims::global[d] (the number of workgroups).
//   SPECIAL(end) "lidx<d>" GPU-style devices: the work-item id inside its workgroup in dimension d,
//                          0 <= lidx<d> < end == LaunchDims::local[d].
//   DEFINE_LOCAL           (GPU-style) a workgroup-shared array: dtype ptr(element), arg the slot,
//                          src[0] a CONST holding its number of elements.
//   BARRIER(store...)      (GPU-style) every work-item of the workgroup waits here; shared-memory
//                          writes before it are visible to reads after it. It is always at the top
//                          level of the program (in no loop), so every work-item reaches it.
//   LOAD(INDEX(local, i), BARRIER)  a shared-memory read ordered after the barrier (src[1] is not a gate).
// GROUP/GROUPTOP (lower/opts.h) give: partial reduce -> STORE to DEFINE_LOCAL -> BARRIER -> a loop
// reducing the partials -> STORE(..., gate lidx == 0).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "devices/device.h"
#include "uop/uop.h"

namespace kiln {

enum class OptOp : uint8_t { UPCAST, UNROLL, LOCAL, GROUP, GROUPTOP, THREAD, PADTO, SWAP };

// One loop transformation (lower/opts.h says what each does).
struct Opt {
  OptOp op;
  int axis = 0;
  int64_t amount = 0;  // SWAP: the other axis
  bool operator==(const Opt&) const = default;
};

struct LoweredKernel {
  std::string name;                // e.g. "r_4096_4096"
  std::string source;
  LaunchDims dims;
  std::vector<UOpPtr> linear;      // the ordered program the source was rendered from
  size_t num_buffers = 0;
  std::vector<UOpPtr> vars;        // DEFINE_VARs, in the order launch() takes their values
  std::vector<Opt> opts;           // the opts it was lowered with
};

LoweredKernel lower_kernel(const UOpPtr& ast, const DeviceSpec& spec);  // with heuristic_opts (lower/opts.h)

namespace detail {
std::string kernel_name(const UOpPtr& ast);  // "E_4096_16", "r_4096_4096"
}  // namespace detail

}  // namespace kiln

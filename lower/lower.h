// Lowering: a kernel AST from the scheduler to source text a device compiles.
//
//   LoweredKernel k = lower_kernel(item.ast, device.spec());
//   Binary bin = device.compile(k.source, k.name);
//   program->launch(bufs, {}, k.dims, false);
//
// The pipeline, each step a named pass (KILN_DEBUG=5 prints the graph after each):
//   1. simplify          symbolic rules on the whole AST (index math, constants)
//   2. apply opts        heuristics choose opts: UPCAST copies loops into register tiles or vector
//                        lanes (upcast.h); THREAD turns the outer loop into the launch index
//   3. lower reduces     REDUCE -> an accumulator register, an update inside its loops, a read after
//   4. close loops       each store is closed over the ranges it runs in
//   5. linearize         the DAG -> an ordered list with explicit loop nesting (linearize.h)
//   6. render            the list -> source in the device's language (renderers/)
#pragma once
#include <string>
#include <vector>

#include "devices/device.h"
#include "uop/uop.h"

namespace kiln {

struct LoweredKernel {
  std::string name;                // e.g. "r_4096_4096"
  std::string source;
  LaunchDims dims;
  std::vector<UOpPtr> linear;      // the ordered program the source was rendered from
  size_t num_buffers = 0;
  std::vector<UOpPtr> vars;        // DEFINE_VARs, in the order launch() takes their values
};

LoweredKernel lower_kernel(const UOpPtr& ast, const DeviceSpec& spec);

}  // namespace kiln

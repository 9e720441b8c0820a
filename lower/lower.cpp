#include "lower/lower.h"

#include <algorithm>
#include <iostream>
#include <unordered_map>

#include "lower/linearize.h"
#include "lower/opts.h"
#include "lower/upcast.h"
#include "lower/renderers/cstyle.h"
#include "lower/renderers/llvm_ir.h"
#include "lower/renderers/spirv.h"
#include "uop/config.h"
#include "uop/rewrite.h"
#include "uop/serialize.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

// "E_4096_16" for elementwise kernels, "r_4096_4096" when the kernel reduces: the sizes of the
// output loops, then of the reduce loops.
std::string kernel_name(const UOpPtr& sink) {
  bool reduces = false;
  std::vector<int64_t> sizes;
  std::vector<UOpPtr> ranges;
  for (const UOpPtr& u : toposort(sink)) {
    reduces |= u->op == Op::REDUCE;
    if (u->op == Op::RANGE) ranges.push_back(u);
  }
  std::sort(ranges.begin(), ranges.end(), [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); });
  std::string name = reduces ? "r" : "E";
  for (const UOpPtr& r : ranges) name += "_" + std::to_string(r->end()->vmax());
  return name;
}

}  // namespace

std::string detail::kernel_name(const UOpPtr& ast) { return kiln::kernel_name(ast); }

LoweredKernel lower_kernel(const UOpPtr& ast, const DeviceSpec& spec) {
  KILN_ASSERT(ast->op == Op::SINK, "a kernel AST is a SINK of stores");
  std::vector<Opt> opts = heuristic_opts(ast, spec);
  Lowering l = lower_with_opts(ast, spec, opts);
  // The heuristics aim to emit only opts that apply; should one not (a device limit they did not
  // foresee), the kernel drops opts from the end rather than fail: fewer opts are slower, never wrong.
  while (!l.kernel && !opts.empty()) {
    if (config().debug >= 1) std::cerr << "kiln: heuristic opts rejected (" << l.rejected << "); trying fewer\n";
    opts.pop_back();
    l = lower_with_opts(ast, spec, opts);
  }
  KILN_ASSERT(l.kernel.has_value(), "a kernel lowers with no opts: ", l.rejected);
  return std::move(*l.kernel);
}

LoweredKernel detail::finish_lowering(UOpPtr sink, const DeviceSpec& spec, LoweredKernel k) {
  if (spec.vector_bytes > 0) sink = combine_accesses(sink, spec.vector_bytes);  // the host renderers: unaligned vector loads
  sink = lower_reduces(sink);
  sink = close_loops(sink);
  k.linear = linearize(sink);
  for (const UOpPtr& u : k.linear) {
    if (u->op == Op::DEFINE_GLOBAL) k.num_buffers = std::max(k.num_buffers, static_cast<size_t>(u->arg_as<int64_t>() + 1));
    if (u->op == Op::DEFINE_VAR) k.vars.push_back(u);
  }
  if (config().debug >= 6)
    for (size_t i = 0; i < k.linear.size(); ++i) std::cerr << i << ": " << op_name(k.linear[i]->op) << " " << str(k.linear[i]) << "\n";
  if (spec.lang == Language::UOps) {
    k.source = serialize_program(k.linear);  // the REF device interprets the linear program itself
  } else {
    switch (spec.lang) {
      case Language::C: k.source = render_cstyle(c_language(), k.name, k.linear, k.num_buffers, k.vars); break;
      case Language::OpenCL: k.source = render_cstyle(opencl_language(), k.name, k.linear, k.num_buffers, k.vars); break;
      case Language::CUDA: k.source = render_cstyle(cuda_language(), k.name, k.linear, k.num_buffers, k.vars); break;
      case Language::SPIRV: k.source = render_spirv(k.name, k.linear, k.num_buffers, k.vars); break;
      case Language::LLVM: k.source = render_llvm_ir(k.name, k.linear, k.num_buffers, k.vars); break;
      case Language::UOps: break;
    }
  }
  if (config().debug >= 4) std::cerr << k.source << "\n";
  return k;
}

}  // namespace kiln

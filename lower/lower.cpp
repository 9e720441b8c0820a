#include "lower/lower.h"

#include <algorithm>
#include <iostream>
#include <unordered_map>

#include "lower/linearize.h"
#include "lower/opt_kernel.h"
#include "lower/opts.h"
#include "lower/transcendental.h"
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
  for (const UOpPtr& u : toposort(sink)) {  // analysis: a name from the loops
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

namespace {

// The graph after each named pass at KILN_DEBUG=5.
UOpPtr after(const char* pass, UOpPtr sink) {
  if (config().debug >= 5) std::cerr << "--- after " << pass << "\n" << print_graph(sink);
  return sink;
}

}  // namespace

// The whole lowering, from a kernel AST to the source its device compiles, one named pass per step.
Lowering lower_with_opts(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> opts) {
  KILN_ASSERT(ast->op == Op::SINK, "a kernel AST is a SINK of stores");
  LoweredKernel k;
  k.name = detail::kernel_name(ast);
  k.opts.assign(opts.begin(), opts.end());
  // Index math and constants folded, so that opts see the strides and sizes the kernel really has.
  UOpPtr s = after("simplify", graph_rewrite(ast, pm_symbolic()));
  // float32 exp2/log2 as ALU ops on devices without them (SPIR-V's GLSL set has them; C's libm is slow).
  if (spec.alu_transcendentals) s = after("transcendentals", graph_rewrite(s, pm_transcendental()));
  // Each opt in order (opts.h): register tiles and vector lanes, unrolled and shared reductions.
  detail::OptApplier applier(s, spec);
  for (const Opt& o : opts) {
    if (std::optional<std::string> why = applier.apply(o)) return {std::nullopt, *why};
    if (config().debug >= 5) after(to_string(o).c_str(), applier.sink());
  }
  // SWAPs reorder the output loops once every opt has taken its factors.
  applier.order_loops();
  s = after("order loops", applier.sink());
  // The launch: a CPU's thread index, or a GPU's workgroup and work-item ids.
  if (std::optional<std::string> bad = applier.map_launch(k.dims)) return {std::nullopt, *bad};
  s = after("map launch", applier.sink());
  if (config().debug >= 3) std::cerr << "kiln: " << k.name << " opts: " << to_string(opts) << "\n";
  // Host renderers: consecutive scalar loads and stores of one buffer as one (unaligned) vector access.
  if (spec.vector_bytes > 0) s = after("combine accesses", combine_accesses(s, spec.vector_bytes));
  // REDUCE -> an accumulator register, an update inside its loops, a read after them.
  s = after("lower reduces", lower_reduces(s));
  // Each store closed over the ranges it runs in, so linearize knows where every loop ends.
  s = after("close loops", close_loops(s));
  // The DAG as an ordered list with explicit loop nesting (KILN_DEBUG=6 prints it).
  k.linear = linearize(s);
  for (const UOpPtr& u : k.linear) {
    if (u->op == Op::DEFINE_GLOBAL) k.num_buffers = std::max(k.num_buffers, static_cast<size_t>(u->arg_as<int64_t>() + 1));
    if (u->op == Op::DEFINE_VAR) k.vars.push_back(u);
  }
  if (config().debug >= 6)
    for (size_t i = 0; i < k.linear.size(); ++i) std::cerr << i << ": " << op_name(k.linear[i]->op) << " " << str(k.linear[i]) << "\n";
  // The list as source text in the device's language (renderers/), or serialized for REF to interpret.
  switch (spec.lang) {
    case Language::UOps: k.source = serialize_program(k.linear); break;
    case Language::C: k.source = render_cstyle(c_language(), k.name, k.linear, k.num_buffers, k.vars); break;
    case Language::OpenCL: k.source = render_cstyle(opencl_language(), k.name, k.linear, k.num_buffers, k.vars); break;
    case Language::CUDA: k.source = render_cstyle(cuda_language(), k.name, k.linear, k.num_buffers, k.vars); break;
    case Language::SPIRV: k.source = render_spirv(k.name, k.linear, k.num_buffers, k.vars); break;
    case Language::LLVM: k.source = render_llvm_ir(k.name, k.linear, k.num_buffers, k.vars); break;
  }
  if (config().debug >= 4) std::cerr << k.source << "\n";
  return {std::move(k), ""};
}

}  // namespace kiln

#include "lower/lower.h"

#include <algorithm>
#include <iostream>
#include <unordered_map>

#include "lower/linearize.h"
#include "lower/upcast.h"
#include "lower/renderers/cstyle.h"
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

// Below this many loop iterations in total, handing work to other cores costs more than it saves.
constexpr int64_t kMinThreadedWork = 1 << 15;

int64_t total_iterations(const UOpPtr& sink) {
  int64_t total = 1;
  for (const UOpPtr& u : toposort(sink))
    if (u->op == Op::RANGE) total = total > INT64_MAX / 65536 ? total : total * std::max<int64_t>(1, u->end()->vmax());
  return total;
}

// THREAD for the CPU: the outermost output loop becomes launch dimension 0, split over the cores.
UOpPtr apply_thread_opt(const UOpPtr& sink, const DeviceSpec& spec, LaunchDims& dims) {
  if (spec.threads <= 1 || total_iterations(sink) < kMinThreadedWork) return sink;
  std::vector<UOpPtr> outer = ranges_of(sink->src[0]->src[0]);  // the output address: output loops only
  if (outer.empty()) return sink;
  const UOpPtr& r = outer.front();
  dims.global[0] = r->end()->vmax();
  UOpPtr special = UOp::make(Op::SPECIAL, r->dtype, {r->end()}, std::string("gidx0"));
  return substitute(sink, {{r.get(), special}});
}

// Bytes of one vector register the heuristics aim at: AVX-512 on the CPUs kiln runs on. (A device
// field would be the place once vector widths differ between devices.)
constexpr int64_t kVectorBytes = 64;  // TODO(opts): DeviceSpec::vector_bytes

// The lanes of a vector of `element` that fill a register and divide the loop's `size`; 0 if none does.
int64_t vector_lanes(DType element, int64_t size) {
  int64_t lanes = std::clamp<int64_t>(kVectorBytes / static_cast<int64_t>(element.itemsize()), 2, 16);
  while (lanes >= 2 && size % lanes != 0) lanes /= 2;
  return lanes >= 2 ? lanes : 0;
}

// Whether vector loads serve the loads along r: every load that moves with r walks memory
// contiguously (loads that do not move are broadcast), and at least one moves.
bool loads_contiguously(const UOpPtr& sink, const UOpPtr& r) {
  bool moves = false;
  for (const UOpPtr& u : toposort(sink)) {
    if (u->op != Op::LOAD || u->src[0]->op != Op::INDEX) continue;
    std::optional<int64_t> stride = index_stride(u->src[0]->src[1], r);
    if (stride != 0 && stride != 1) return false;
    moves |= stride == 1;
  }
  return moves;
}

// Whether some load does not move along r (stride 0): its value is reused by every copy of r's
// body, so unrolling r into a register tile saves loads.
bool reused_along(const UOpPtr& sink, const UOpPtr& r) {
  for (const UOpPtr& u : toposort(sink))
    if (u->op == Op::LOAD && u->src[0]->op == Op::INDEX && index_stride(u->src[0]->src[1], r) == 0) return true;
  return false;
}

// The default heuristics (search will choose opts later), for kernels of one store:
// - elementwise: the innermost output loop, contiguous in the output, becomes vector lanes;
// - reductions with two or more output loops (matmul, conv): a register tile of 8 (or 4) rows x one
//   vector of outputs per iteration, one accumulator each. The vector is the innermost output loop
//   when the output and the loads walk it contiguously (else 16 or 8 scalar copies of it); the rows
//   are the output loop, nearest the inside, that some load does not move along (so each load feeds
//   a whole row or column of the tile);
// - reductions with one output loop that the loads walk contiguously (a column sum): vector lanes.
// A loop that no vector width divides keeps its scalar form.
UOpPtr apply_upcast_opt(const UOpPtr& sink) {
  if (sink->src.size() != 1) return sink;
  bool reduces = false;
  for (const UOpPtr& u : toposort(sink)) reduces |= u->op == Op::REDUCE;
  const UOpPtr& store = sink->src[0];
  std::vector<UOpPtr> outputs = ranges_of(store->src[0]);
  if (outputs.empty()) return sink;
  UOpPtr out = sink;
  // Transcendentals stay per lane in vector form (C has no vector exp2/log2/sin/sqrt), which costs
  // more than it saves: such elementwise kernels keep their scalar loop, which clang vectorizes.
  if (!reduces)
    for (const UOpPtr& u : toposort(sink))
      if (u->op == Op::EXP2 || u->op == Op::LOG2 || u->op == Op::SIN || u->op == Op::SQRT) return sink;
  const UOpPtr& last = outputs.back();
  int64_t size = last->end()->vmax(), lanes = vector_lanes(store->src[1]->dtype, size);
  bool vector = lanes != 0 && is_contiguous(store->src[0]->src[1], last) && (!reduces || loads_contiguously(sink, last));
  if (reduces && outputs.size() >= 2) {
    for (size_t i = outputs.size() - 1; i-- > 0;) {
      int64_t rows = outputs[i]->end()->vmax();
      int64_t amount = rows % 8 == 0 && rows >= 16 ? 8 : rows % 4 == 0 && rows >= 8 ? 4 : 0;
      if (amount == 0 || !reused_along(sink, outputs[i])) continue;
      out = upcast(out, outputs[i], amount);
      break;
    }
  }
  if (vector) return upcast_vector(out, last, lanes);
  if (reduces && outputs.size() >= 2 && size % 16 == 0 && size >= 32) return upcast(out, last, 16);
  if (reduces && outputs.size() >= 2 && size % 8 == 0 && size >= 16) return upcast(out, last, 8);
  return out;
}

}  // namespace

LoweredKernel lower_kernel(const UOpPtr& ast, const DeviceSpec& spec) {
  KILN_ASSERT(ast->op == Op::SINK, "a kernel AST is a SINK of stores");
  LoweredKernel k;
  k.name = kernel_name(ast);
  UOpPtr sink = graph_rewrite(ast, pm_symbolic(), nullptr, "simplify");
  sink = apply_upcast_opt(sink);
  sink = apply_thread_opt(sink, spec, k.dims);
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
      case Language::UOps: break;
    }
  }
  if (config().debug >= 4) std::cerr << k.source << "\n";
  return k;
}

}  // namespace kiln

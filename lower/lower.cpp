#include "lower/lower.h"

#include <iostream>
#include <unordered_map>

#include "lower/linearize.h"
#include "lower/renderers/cstyle.h"
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

// UPCAST: the output loop `r` runs `amount` times fewer iterations, each computing `amount`
// neighbouring outputs (r = r'*amount + i, one copy of the stores per i). Interning shares what the
// copies have in common, so the copies of a matmul share their loads of the other operand, and each
// output keeps its own accumulator: register tiling, which the C compiler then vectorizes.
UOpPtr upcast(const UOpPtr& sink, const UOpPtr& r, int64_t amount) {
  int64_t n = r->end()->vmax();
  UOpPtr outer = range(r->axis_id(), const_int(n / amount, r->dtype));
  std::vector<UOpPtr> stores;
  for (int64_t i = 0; i < amount; ++i) {
    UOpPtr at = outer * const_int(amount, r->dtype) + const_int(i, r->dtype);
    for (const UOpPtr& store : sink->src) stores.push_back(substitute(store, {{r.get(), at}}));
  }
  return graph_rewrite(sink->with_src(stores), pm_symbolic(), nullptr, "upcast");
}

// The default heuristic for reductions with at least two output loops (matmul, conv): a 4 x 8 tile of
// outputs per iteration, on the last two output loops where their sizes allow.
UOpPtr apply_upcast_opt(const UOpPtr& sink) {
  bool reduces = false;
  for (const UOpPtr& u : toposort(sink)) reduces |= u->op == Op::REDUCE;
  if (!reduces || sink->src.size() != 1) return sink;
  std::vector<UOpPtr> outputs = ranges_of(sink->src[0]->src[0]);
  if (outputs.size() < 2) return sink;
  UOpPtr out = sink;
  const UOpPtr &last = outputs.back(), &second = outputs[outputs.size() - 2];
  if (last->end()->vmax() % 16 == 0 && last->end()->vmax() >= 32) out = upcast(out, last, 16);
  else if (last->end()->vmax() % 8 == 0 && last->end()->vmax() >= 16) out = upcast(out, last, 8);
  if (second->end()->vmax() % 8 == 0 && second->end()->vmax() >= 16) out = upcast(out, second, 8);
  else if (second->end()->vmax() % 4 == 0 && second->end()->vmax() >= 8) out = upcast(out, second, 4);
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
    KILN_ASSERT(spec.lang == Language::C, "no renderer for ", spec.name, "'s language yet");
    k.source = render_cstyle(c_language(), k.name, k.linear, k.num_buffers, k.vars);
  }
  if (config().debug >= 4) std::cerr << k.source << "\n";
  return k;
}

}  // namespace kiln

#include "search/actions.h"

#include <set>
#include <string>

#include "lower/opt_kernel.h"
#include "lower/opts.h"

namespace kiln {

using namespace detail;

std::vector<Opt> action_space(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> applied) {
  OptApplier k(prepare_for_opts(ast, spec), spec);
  for (const Opt& o : applied)
    if (k.apply(o)) return {};
  std::vector<Opt> out;
  const std::vector<Axis>& axes = k.axes();
  for (size_t i = 0; i < axes.size(); ++i) {
    int axis = static_cast<int>(i);
    if (axes[i].kind == AxisKind::Output) {
      for (int64_t n : {2, 3, 4, 5, 7, 8, 16}) out.push_back({OptOp::UPCAST, axis, n});
      if (is_gpu(spec)) {
        for (int64_t n : {2, 4, 8, 16, 32, 64, 128, 256}) out.push_back({OptOp::LOCAL, axis, n});
      } else {
        out.push_back({OptOp::THREAD, axis, 0});
      }
      for (size_t j = i + 1; j < axes.size(); ++j)
        if (axes[j].kind == AxisKind::Output) out.push_back({OptOp::SWAP, axis, static_cast<int64_t>(j)});
    } else {
      for (int64_t n : {2, 3, 4, 8, 16, 0}) out.push_back({OptOp::UNROLL, axis, n});
      if (is_gpu(spec))
        for (int64_t n : {8, 16, 32, 64, 128, 256}) {
          out.push_back({OptOp::GROUP, axis, n});
          out.push_back({OptOp::GROUPTOP, axis, n});
        }
    }
    for (int64_t n : {8, 16, 32}) out.push_back({OptOp::PADTO, axis, n});
  }
  // Only the ones that apply after `applied`.
  std::vector<Opt> valid;
  for (const Opt& o : out) {
    OptApplier probe = k;
    if (!probe.apply(o)) valid.push_back(o);
  }
  return valid;
}

std::vector<std::vector<Opt>> opt_neighbours(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> opts) {
  std::vector<std::vector<Opt>> out;
  std::set<std::string> seen{to_string(opts)};
  UOpPtr prepared = prepare_for_opts(ast, spec);
  auto offer = [&](std::vector<Opt> list) {
    OptApplier k(prepared, spec);
    for (const Opt& o : list)
      if (k.apply(o)) return;
    if (seen.insert(to_string(list)).second) out.push_back(std::move(list));
  };
  for (size_t i = 0; i < opts.size(); ++i) {
    std::vector<Opt> list(opts.begin(), opts.end());
    if (opts[i].op == OptOp::THREAD || opts[i].op == OptOp::UPCAST) {
      // Moved to another output axis: a register tile of another shape (8 pixels of a row -> 8 rows of a
      // column), the work split along another loop. A conv's best tile (exhaustive search) was the
      // default's with its rows on another axis, three steps away for a beam that only appends.
      std::vector<Opt> without = list;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
      for (const Opt& a : action_space(ast, spec, without))
        if (a.op == opts[i].op && a.axis != opts[i].axis && (a.op == OptOp::THREAD || a.amount == opts[i].amount)) {
          std::vector<Opt> moved = without;
          moved.insert(moved.begin() + static_cast<std::ptrdiff_t>(i), a);
          offer(std::move(moved));
        }
      if (opts[i].op == OptOp::THREAD) {
        offer(std::move(without));  // one thread: a small kernel's launch may cost more than the second core gains
        continue;
      }
    }
    if (opts[i].amount >= 2 && opts[i].op != OptOp::SWAP) {
      for (int64_t amount : {opts[i].amount * 2, opts[i].amount % 2 == 0 ? opts[i].amount / 2 : int64_t{1}}) {
        if (amount < 2) continue;
        std::vector<Opt> changed = list;
        changed[i].amount = amount;
        offer(std::move(changed));
      }
    }
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    offer(std::move(list));
  }
  return out;
}

}  // namespace kiln

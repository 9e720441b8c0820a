// Turning one fused region of the tensor graph into a kernel AST: movement ops become index math.
//
//   KernelBuilder kb(shapes, is_stored);           // is_stored: nodes read from memory, not fused
//   UOpPtr ast = kb.build(root, out_buffer);       // SINK(STORE(INDEX(DEFINE_GLOBAL 0, idx), value))
//   kb.buffers();                                  // BUFFER node of each DEFINE_GLOBAL slot
//
// The kernel loops over the root's shape with one RANGE per axis of size > 1 (axis ids 0..n-1, outer
// first). Each node is "indexed": given an index expression per axis of its shape, it yields the
// scalar value there. Movement ops only rewrite the indices (a view costs no copy):
//   RESHAPE  linearize by the new shape, unflatten by the old one (the simplifier cleans // and %)
//   PERMUTE  permute the indices          EXPAND  broadcast axes read index 0
//   SHRINK   add the begin offsets        FLIP    size-1-i
//            (x[t], one index of the outermost axis, where that only moves addresses, no padding
//            beneath: t is a launch variable, DEFINE_VAR "sN" in [0, the axis's last], so x[t] for
//            every t is one kernel; var_vals() says each one's value)
//   PAD      subtract the before-padding; outside the source the value is 0, guarded by a validity
//            condition that also gates the loads beneath it, so nothing out of bounds is read.
// A fused REDUCE_AXIS opens one new RANGE per reduced axis and becomes a REDUCE over them. Stored
// nodes (buffers, earlier kernels' outputs) become LOADs from a DEFINE_GLOBAL slot.
//
// A stored value need not lie in memory in its own axis order: its Layout names the order of its axes
// in memory, outer first (the scheduler keeps an intermediate in the layout its kernel reads most, see
// schedule.cpp). A kernel built with a layout loops over its axes in that order and stores in it;
// loads of a value stored so index it the same way. An empty Layout is row-major.
#pragma once
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "schedule/shape.h"

namespace kiln {

using Layout = std::vector<int64_t>;  // axes in memory order, outer first; empty: row-major

class KernelBuilder {
 public:
  // stored_buffer(u): the BUFFER holding u's value if u is read from memory in this kernel, else null.
  // layout_of(buffer): the layout of a stored value's BUFFER (null or empty: row-major).
  KernelBuilder(ShapeCache& shapes, std::function<UOpPtr(const UOpPtr&)> stored_buffer,
                std::function<const Layout*(const UOpPtr& buffer)> layout_of = nullptr);

  UOpPtr build(const UOpPtr& root, const UOpPtr& out_buffer, const Layout& layout = {});
  const std::vector<UOpPtr>& buffers() const { return bufs_; }
  const std::vector<UOpPtr>& output_index() const { return out_idx_; }  // build's index per axis of the root
  // The launch variables build made (slice starts), by name, with their values.
  const std::vector<std::pair<std::string, int64_t>>& var_vals() const { return var_vals_; }

 private:
  UOpPtr index(const UOpPtr& u, const std::vector<UOpPtr>& idx, const UOpPtr& valid);
  UOpPtr index_uncached(const UOpPtr& u, const std::vector<UOpPtr>& idx, const UOpPtr& valid);
  UOpPtr load(const UOpPtr& buffer, const Shape& shape, const std::vector<UOpPtr>& idx, const UOpPtr& valid);
  UOpPtr global(const UOpPtr& buffer);
  bool only_addresses(const UOpPtr& u);

  ShapeCache& shapes_;
  std::function<UOpPtr(const UOpPtr&)> stored_buffer_;
  std::function<const Layout*(const UOpPtr&)> layout_of_;
  std::vector<UOpPtr> bufs_;
  std::vector<UOpPtr> out_idx_;
  std::vector<std::pair<std::string, int64_t>> var_vals_;
  std::unordered_map<const UOp*, bool> only_addresses_;
  int64_t next_axis_ = 0;
  std::map<std::vector<const UOp*>, UOpPtr> memo_;  // (node, indices..., valid) -> value
  std::vector<UOpPtr> pinned_;                       // the memo keys' index nodes, kept alive
};

// The index expression of a contiguous row-major layout: sum of idx[i] * stride[i].
UOpPtr linear_index(const Shape& shape, const std::vector<UOpPtr>& idx);
// The same for a value stored in `layout`: shape and indices taken in the layout's order.
UOpPtr linear_index(const Shape& shape, const std::vector<UOpPtr>& idx, const Layout& layout);

}  // namespace kiln

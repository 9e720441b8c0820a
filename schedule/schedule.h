// The scheduler: a tensor graph to an ordered list of kernels and copies.
//
//   Schedule s = create_schedule({loss, grads...}, make_buffer, already_realized);
//   for (const ScheduleItem& item : s.items) run(item);        // in order; free s.free_after[i] after item i
//   s.outputs[k];                                               // the BUFFER now holding outputs[k]
//
// Which nodes are stored (become a kernel's output) and which fuse into their consumers is decided by
// one cost function, `must_store` in schedule.cpp; tests count the kernels of known graphs.
#pragma once
#include <array>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "schedule/shape.h"

namespace kiln {

struct ScheduleItem {
  // Kernel: compiled and launched. Copy: bytes from bufs[1] to bufs[0] (another device). ScatterAdd:
  // SCATTER_ADD run on the host (there is no kernel form of a data-dependent store): bufs[0] zeroed,
  // then bufs[1] (float32 or float64 values) added at the positions bufs[2] (int32 indices) holds.
  enum class Kind { Kernel, Copy, ScatterAdd };
  Kind kind = Kind::Kernel;
  UOpPtr ast;                // Kernel: SINK of STOREs into DEFINE_GLOBAL slots
  std::vector<UOpPtr> bufs;  // BUFFER node per slot: the output first. Copy: {dst, src}. ScatterAdd: {out, values, index}
  // ScatterAdd: the values' shape as (outer, m, inner) around the scattered axis, and the output's size n
  // on it: value p = (o, j, i) goes to out[(o * n + index[p]) * inner + i].
  std::array<int64_t, 4> scatter{};  // outer, m, inner, n
  // Kernel: the value of each DEFINE_VAR in its AST, by the variable's name. One index of the outermost
  // axis of a value read from memory (x[t]) is a launch variable, not a constant (schedule/kernelize.h),
  // so a loop over x[t] runs one kernel for every t instead of compiling one per t.
  std::vector<std::pair<std::string, int64_t>> var_vals;
};

// The values a launch of `item`'s kernel takes, in the order of the lowered kernel's `vars`.
std::vector<int64_t> launch_values(const ScheduleItem& item, std::span<const UOpPtr> vars);

struct Schedule {
  std::vector<ScheduleItem> items;
  std::vector<UOpPtr> outputs;                 // the BUFFER holding each requested output
  std::vector<std::vector<UOpPtr>> free_after; // per item: intermediate buffers whose last use it is
};

// Makes a new BUFFER node on `device` (a DEVICE node) for `size` elements of `dtype`.
using BufferMaker = std::function<UOpPtr(const UOpPtr& device, int64_t size, DType dtype)>;
// The BUFFER already holding this node's value (realized earlier), or null.
using RealizedLookup = std::function<UOpPtr(const UOpPtr& node)>;

Schedule create_schedule(const std::vector<UOpPtr>& outputs, const BufferMaker& make_buffer,
                         const RealizedLookup& realized);

// The DEVICE node a tensor-level node computes on.
UOpPtr device_of(const UOpPtr& u);

// device_of for many nodes of one graph (autograd asks for every gradient node it makes): a node's
// device is its first source's (a COPY's, its destination), memoized, so each walk stops at the first
// node an earlier one passed. The nodes asked about are kept alive while the cache lives.
class DeviceCache {
 public:
  UOpPtr operator()(const UOpPtr& u);

 private:
  std::unordered_map<const UOp*, std::pair<UOpPtr, UOpPtr>> memo_;  // node -> (node, its DEVICE)
};

}  // namespace kiln

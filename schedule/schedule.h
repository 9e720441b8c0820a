// The scheduler: a tensor graph to an ordered list of kernels and copies.
//
//   Schedule s = create_schedule({loss, grads...}, make_buffer, already_realized);
//   for (const ScheduleItem& item : s.items) run(item);        // in order; free s.free_after[i] after item i
//   s.outputs[k];                                               // the BUFFER now holding outputs[k]
//
// Which nodes are stored (become a kernel's output) and which fuse into their consumers is decided by
// one cost function, `must_store` in schedule.cpp; tests count the kernels of known graphs.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "schedule/shape.h"

namespace kiln {

struct ScheduleItem {
  enum class Kind { Kernel, Copy };
  Kind kind = Kind::Kernel;
  UOpPtr ast;                // Kernel: SINK of STOREs into DEFINE_GLOBAL slots
  std::vector<UOpPtr> bufs;  // BUFFER node per slot: the output first. Copy: {dst, src}
};

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

}  // namespace kiln

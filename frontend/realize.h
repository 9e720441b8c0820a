// The realize engine: schedule -> lower -> compile (cached) -> launch.
//
//   std::vector<UOpPtr> buffers = realize_uops({t.uop()});   // the BUFFER now holding each value
//
// Schedules are cached by the graph's structure with its inputs abstracted (schedule/schedule_cache.h),
// kernels in memory by their AST (interned, with no buffer identities) and compiled binaries on disk by
// the device, so realizing the same computation again on new data schedules, lowers and compiles nothing.
#pragma once
#include <functional>
#include <vector>

#include "devices/device.h"
#include "schedule/schedule.h"

namespace kiln {

// Storage behind a BUFFER node (BufferArg::storage): allocated when first written, freed when the
// BUFFER node dies or when the memory plan says its last reader ran.
struct DeviceBuffer {
  Device* device = nullptr;
  RawBuffer raw;
  size_t bytes = 0;
  ~DeviceBuffer();
  void ensure_allocated();
  void release();
};

UOpPtr device_node(const std::string& name);                         // DEVICE(name), name validated
UOpPtr new_buffer(const UOpPtr& device, int64_t size, DType dtype);   // a BUFFER with lazy storage
DeviceBuffer& storage_of(const UOpPtr& buffer);

// Realizes the nodes; returns the BUFFER holding each.
std::vector<UOpPtr> realize_uops(const std::vector<UOpPtr>& outputs);
Schedule schedule_uops(const std::vector<UOpPtr>& outputs);

// Statistics for tests: kernels lowered+compiled (cache misses) and launched since start; realizes whose
// schedule came from the schedule cache (hits) and those that were scheduled (misses).
struct RealizeStats {
  size_t kernels_lowered = 0, kernels_launched = 0;
  size_t schedule_hits = 0, schedule_misses = 0;
};
RealizeStats realize_stats();

// Called with each kernel AST the first time it is lowered for a device, before that lowering; an
// exception it throws leaves the realize. Tests use it to compile every kernel of a run for a device
// that is not here too (tests/test_gpu_cstyle.cpp: NVRTC). Set it before realizing, not during.
void set_kernel_observer(std::function<void(const UOpPtr& ast)> observer);

}  // namespace kiln

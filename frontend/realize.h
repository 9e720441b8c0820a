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
//
// In-place writes (Tensor::assign into a realized tensor) give the new value a BUFFER node of its own
// whose storage is a *version* of the old one's memory: `base` owns the memory, and this one neither
// allocates nor frees. Every write of the memory advances base's `latest`; a node whose `version` is
// behind it holds a value that was overwritten, and reading it is an error (PyTorch's "modified by an
// inplace operation"), never the new numbers read silently.
struct DeviceBuffer {
  Device* device = nullptr;
  RawBuffer raw;
  size_t bytes = 0;
  std::shared_ptr<DeviceBuffer> base;  // the memory's owner, for a version written in place
  uint64_t version = 0;                // which write of the memory this value is
  uint64_t latest = 0;                 // (owner) the newest version written into the memory
  uint64_t serial = 0;                 // creation order: the jit tells state made before a call by it
  ~DeviceBuffer();
  void ensure_allocated();
  void release();
  DeviceBuffer& memory() { return base ? *base : *this; }
  bool stale() { return version != memory().latest; }
};

UOpPtr device_node(const std::string& name);                         // DEVICE(name), name validated
UOpPtr new_buffer(const UOpPtr& device, int64_t size, DType dtype);   // a BUFFER with lazy storage
// Realized graphs stop answering with `buffer` (its memory became a leaf's: Tensor::requires_grad_).
void forget_realized(const UOpPtr& buffer);
DeviceBuffer& storage_of(const UOpPtr& buffer);
std::shared_ptr<DeviceBuffer> storage_ptr(const UOpPtr& buffer);
// The storage that owns the memory: `storage` itself, or for a version written in place its base.
std::shared_ptr<DeviceBuffer> memory_owner(const std::shared_ptr<DeviceBuffer>& storage);
// A new BUFFER node for the value `memory` holds now (its latest version): a captured step's output.
UOpPtr current_value(const std::shared_ptr<DeviceBuffer>& memory, const UOpPtr& device, int64_t size, DType dtype);
uint64_t next_buffer_serial();  // storage made from now on has this serial or a later one
void copy_between(DeviceBuffer& dst, DeviceBuffer& src);  // both allocated; through host memory

// Realizes the nodes; returns the BUFFER holding each. targets[k], when given and not null, is the
// BUFFER whose memory output k should be written into in place (Tensor::assign): it is, when no other
// kernel of the schedule reads that memory after the write (else the value gets new memory).
std::vector<UOpPtr> realize_uops(const std::vector<UOpPtr>& outputs, const std::vector<UOpPtr>& targets = {});
Schedule schedule_uops(const std::vector<UOpPtr>& outputs);

// Statistics for tests: kernels lowered+compiled (cache misses) and launched since start; realizes whose
// schedule came from the schedule cache (hits) and those that were scheduled (misses).
struct RealizeStats {
  size_t kernels_lowered = 0, kernels_launched = 0;
  size_t schedule_hits = 0, schedule_misses = 0;
  size_t allocations = 0;  // device allocations made for BUFFER storage (the device may serve them from a cache)
};
RealizeStats realize_stats();

// Called with each kernel AST the first time it is lowered for a device, before that lowering; an
// exception it throws leaves the realize. Tests use it to compile every kernel of a run for a device
// that is not here too (tests/test_gpu_cstyle.cpp: NVRTC). Set it before realizing, not during.
void set_kernel_observer(std::function<void(const UOpPtr& ast)> observer);

// Capturing a step (frontend/jit.h). While a recorder is set on this thread, realize reports each
// kernel launch and copy it runs, and the frontend reports the host data it puts on a device.
struct CapturedLaunch {
  Program* program = nullptr;  // null: host work over the slots' memory (`host`: a copy, a scatter-add)
  LaunchDims dims;
  UOpPtr ast;                  // the kernel (null for host work): captures are compared by it
  std::string name;
  std::vector<std::shared_ptr<DeviceBuffer>> bufs;  // each slot's storage, output first
  std::function<void(const std::vector<DeviceBuffer*>& slots)> host;  // what a program-less item does
  std::vector<int64_t> vals;   // the kernel's launch variables (a slice's start)
};
class Recorder {
 public:
  virtual ~Recorder() = default;
  virtual void launch(CapturedLaunch launch) = 0;
  // Host bytes copied into new storage (Tensor::from_raw): the same bytes on every call, or an error.
  virtual void upload(const std::shared_ptr<DeviceBuffer>& dst, const void* data, size_t bytes) = 0;
  // Host work that is part of the step (an optimizer's step count, the RNG's counter): run again
  // before the launches that follow it, on every replay.
  virtual void host_work(std::function<void()> work) = 0;
};
Recorder* set_recorder(Recorder* recorder);  // this thread's; returns the previous one
Recorder* current_recorder();

// KILN_STRICT (deploy mode): once a captured step replays, compiling any kernel is an error.
void forbid_compiles_if_strict();

}  // namespace kiln

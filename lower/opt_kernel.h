// What the opt applier (lower/opts.cpp) and the default heuristics (lower/heuristics.cpp) share: a
// kernel's axes as opts number them, and the questions both ask about its loads and stores. Internal
// to lower/; the API is lower/opts.h.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/device.h"
#include "lower/lower.h"
#include "uop/uop.h"

namespace kiln::detail {

enum class AxisKind { Output, Reduce };

struct Axis {
  UOpPtr range;            // the loop that is left of the axis (its size shrinks as opts take factors)
  AxisKind kind;
  UOpPtr local = nullptr;  // LOCAL, GROUP: the range that becomes a work-item id
  bool upcast = false, split = false;
};

// The kernel as opts see it before any applies: simplified (and with float32 exp2/log2 as ALU ops where
// the device asks), its output loops in order, then its reduce loops.
struct KernelAxes {
  UOpPtr sink;
  std::vector<Axis> axes;
};
KernelAxes kernel_axes(const UOpPtr& ast, const DeviceSpec& spec);

// The passes before opts, on which heuristics, search and the lowering choose and apply them: symbolic
// simplification, then float32 exp2/log2 as ALU ops where the device asks (lower.cpp lists the same two
// as the pipeline's first passes).
UOpPtr prepare_for_opts(const UOpPtr& ast, const DeviceSpec& spec);

// Applies opts to a prepared kernel, one at a time, then orders its loops and maps its launch; the
// lowering (lower.cpp) runs each of these steps as a pass. Copies are independent (search probes
// an opt on a copy).
class OptApplier {
 public:
  OptApplier(const UOpPtr& prepared, const DeviceSpec& spec);
  OptApplier(const OptApplier& other);
  ~OptApplier();
  const std::vector<Axis>& axes() const;
  const UOpPtr& sink() const;
  // Applies one opt, or says why it does not apply (and changes nothing then).
  std::optional<std::string> apply(const Opt& o);
  // After the opts: the SWAPs put the output loops in their order.
  void order_loops();
  // Then the launch: THREAD's axis becomes the launch index (CPU-style), or the output loops and LOCAL
  // ranges become workgroup and work-item ids (GPU-style); or why the grid does not fit.
  std::optional<std::string> map_launch(LaunchDims& dims);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

bool is_gpu(const DeviceSpec& spec);
bool has_reduce(const UOpPtr& sink);

// The lanes of a vector of `element` that fill the device's vector register, clamped to 2..16 (0: the
// device has no vector types).
int64_t register_lanes(DType element, const DeviceSpec& spec);

// Whether vector loads serve the loads along r: at least one load walks memory contiguously along r
// under one gate for all lanes, and (strict) every other load that moves with r does too (loads that do
// not move are broadcast). Not strict, the others are gathered lane by lane, as a scalar loop loads them
// anyway: batch norm's sums over a conv's output (stored channels innermost) times an NCHW gradient
// read the conv's output once per channel vector instead of once per channel. A load masked per lane
// (a padded conv's image along its width) stays lane by lane.
bool loads_contiguously(const UOpPtr& sink, const UOpPtr& r, bool strict = true);

// Whether UPCAST(r, lanes) can become vector lanes: the device has vectors of that many elements, and
// every store walks r contiguously with the lanes in one register, or (elementwise) every load that
// moves along r walks it contiguously (the stores then scatter the lanes). In a reduction the loads inside the
// loop decide (loads_contiguously); its stores, once per output, may scatter the lanes (a conv's
// output channels: the weights are contiguous along them, the output is not).
bool vector_eligible(const UOpPtr& sink, const UOpPtr& r, int64_t lanes, const DeviceSpec& spec);

}  // namespace kiln::detail

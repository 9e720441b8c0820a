// `kiln devices --check`: a one-minute verdict per device (tools/devices_check.cpp).
//
//   run_devices_check(measure_machine_limits(CReference::build()));   // every available device
//   bool ok = check_device("OPENCL", {"CPU", "REF"}, &limits, std::cout);  // one device
//
// A device is certified when every check passes and, unless it is an oracle (DeviceSpec::oracle), its
// measured bandwidth and arithmetic rate are not far below the machine's (a device built without
// optimization is not certified). Checks compare bit patterns where the op is exact (copies, integer
// ops, float ops whose inputs make every step exact) and allow a few ulps elsewhere.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "bench_reference.h"

namespace kiln {

// The lowest fraction of the machine's triad bandwidth and FMA peak a device must reach: a tenth. Here
// (2 cores) the CPU devices reach 0.7 of the FMA peak and OPENCL (PoCL) 0.18, while gcc -O0 reaches
// 0.03 and VULKAN (Mesa lavapipe) 0.02 (and 0.03 of the bandwidth).
inline constexpr double kMinBandwidthRatio = 0.1, kMinArithmeticRatio = 0.1;

// Checks `device` (copies across to each of `others` too), prints a line per check, the roofline probe
// and the verdict to `out`; returns whether it is certified. Without `machine` the rates are printed
// but not judged.
bool check_device(const std::string& device, const std::vector<std::string>& others, const MachineLimits* machine,
                  std::ostream& out);

// check_device on every available device against the others; throws Error naming how many failed.
void run_devices_check(const MachineLimits& machine);

}  // namespace kiln

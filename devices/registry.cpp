// The device registry: the list generated from KILN_DEVICES in devices/CMakeLists.txt, each device
// opened at most once per process.
#include <cctype>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>

#include "devices/device.h"
#include "uop/config.h"

namespace kiln {

#define KILN_DEVICE(NAME, FACTORY) std::unique_ptr<Device> FACTORY();
#include "device_list.inc"
#undef KILN_DEVICE

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Device> (*make)();
};

const Entry kEntries[] = {
#define KILN_DEVICE(NAME, FACTORY) {#NAME, FACTORY},
#include "device_list.inc"
#undef KILN_DEVICE
};
constexpr size_t kCount = std::size(kEntries);

// What opening a device gave: the device, or why not. A failure is kept too, so a missing driver is
// probed once, not on every call.
struct Slot {
  std::once_flag opened;
  std::unique_ptr<Device> device;
  std::string reason;
};

// Never destroyed: programs and buffers held by other statics may outlive any destruction order, and
// a driver library may already be torn down at exit.
Slot* slots() {
  static Slot* all = new Slot[kCount];
  return all;
}

std::string registered_list() {
  std::string out;
  for (const Entry& entry : kEntries) out += cat(out.empty() ? "" : ", ", entry.name);
  return out;
}

// Device names are upper case; `get_device("cpu")` is accepted too, as KILN_DEVICE=cpu is.
size_t index_of(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kCount; ++i)
    if (upper == kEntries[i].name) return i;
  throw Error(cat("unknown device \"", name, "\"; the registered devices are ", registered_list(),
                  " (choose one with KILN_DEVICE or --device)"));
}

Slot& open(size_t i) {
  Slot& slot = slots()[i];
  std::call_once(slot.opened, [&] {
    try {
      slot.device = kEntries[i].make();
    } catch (const std::exception& e) {  // the reason is reported by every later get_device
      slot.reason = e.what();
    }
    if (config().debug < 1) return;
    if (slot.device) {
      const DeviceSpec& spec = slot.device->spec();
      std::cerr << "kiln: opened device " << spec.name << " (" << spec.arch << "; " << spec.compiler << ")\n";
    } else {
      std::cerr << "kiln: device " << kEntries[i].name << " is not available: " << slot.reason << "\n";
    }
  });
  return slot;
}

}  // namespace

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (const Entry& entry : kEntries) names.push_back(entry.name);
  return names;
}

std::vector<DeviceStatus> probe_devices() {
  std::vector<DeviceStatus> statuses;
  for (size_t i = 0; i < kCount; ++i) {
    Slot& slot = open(i);
    statuses.push_back({kEntries[i].name, slot.device != nullptr, slot.reason});
  }
  return statuses;
}

Device& get_device(std::string_view name) {
  size_t i = index_of(name);
  Slot& slot = open(i);
  if (!slot.device) throw Error(cat("device ", kEntries[i].name, " is not available: ", slot.reason));
  return *slot.device;
}

std::string default_device_name() {
  if (!config().device.empty()) return kEntries[index_of(config().device)].name;
  // The first that opens, in the list's order: the ones after it are not opened at all (a CPU run
  // does not start PoCL or lavapipe).
  std::string reasons;
  for (size_t i = 0; i < kCount; ++i) {
    Slot& slot = open(i);
    if (slot.device) return kEntries[i].name;
    reasons += cat("\n  ", kEntries[i].name, ": ", slot.reason);
  }
  throw Error(cat("no device is available; why each one is not:", reasons));
}

}  // namespace kiln

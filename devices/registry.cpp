// The device registry: the list generated from KILN_DEVICES in devices/CMakeLists.txt, each device (and
// each further instance of one, "CPU:1") opened at most once per process.
#include <algorithm>
#include <cctype>
#include <deque>
#include <iostream>
#include <iterator>
#include <map>
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
  std::string name;
  std::function<std::unique_ptr<Device>()> make;
};

// What opening a device gave: the device, or why not. A failure is kept too, so a missing driver is
// probed once, not on every call.
struct Slot {
  std::once_flag opened;
  std::unique_ptr<Device> device;
  std::string reason;
};

// The generated list, then the devices register_device added. Never destroyed: programs and buffers
// held by other statics may outlive any destruction order, and a driver library may already be torn
// down at exit. Deques: adding an entry moves no Slot (a once_flag cannot move).
std::deque<Entry>& entries() {
  static auto* all = new std::deque<Entry>{
#define KILN_DEVICE(NAME, FACTORY) {#NAME, FACTORY},
#include "device_list.inc"
#undef KILN_DEVICE
  };
  return *all;
}

std::deque<Slot>& slots() {
  static auto* all = new std::deque<Slot>(entries().size());
  return *all;
}

std::string registered_list() {
  std::string out;
  for (const Entry& entry : entries()) out += cat(out.empty() ? "" : ", ", entry.name);
  return out;
}

// Device names are upper case; `get_device("cpu")` is accepted too, as KILN_DEVICE=cpu is.
std::string upper_case(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  return upper;
}

size_t index_of(std::string_view name) {
  std::string upper = upper_case(name);
  for (size_t i = 0; i < entries().size(); ++i)
    if (upper == entries()[i].name) return i;
  throw Error(cat("unknown device \"", name, "\"; the registered devices are ", registered_list(),
                  " (choose one with KILN_DEVICE or --device; an instance index may follow, as in CPU:1)"));
}

// "CPU:1" -> {the CPU entry, 1}; "CPU" -> {the CPU entry, 0}.
std::pair<size_t, int64_t> parse_name(std::string_view name) {
  size_t colon = name.find(':');
  if (colon == std::string_view::npos) return {index_of(name), 0};
  std::string_view digits = name.substr(colon + 1);
  bool numeric = !digits.empty() && digits.size() <= 9 &&
                 std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!numeric)
    throw Error(cat("device \"", name, "\": the instance index after ':' must be a non-negative integer, as in \"",
                    upper_case(name.substr(0, colon)), ":1\""));
  return {index_of(name.substr(0, colon)), std::stoll(std::string(digits))};
}

Slot& open_slot(Slot& slot, size_t i, const std::string& label) {
  std::call_once(slot.opened, [&] {
    try {
      slot.device = entries()[i].make();
    } catch (const std::exception& e) {  // the reason is reported by every later get_device
      slot.reason = e.what();
    }
    if (config().debug < 1) return;
    if (slot.device) {
      const DeviceSpec& spec = slot.device->spec();
      std::cerr << "kiln: opened device " << label << " (" << spec.arch << "; " << spec.compiler << ")\n";
    } else {
      std::cerr << "kiln: device " << label << " is not available: " << slot.reason << "\n";
    }
  });
  return slot;
}

Slot& open(size_t i) { return open_slot(slots()[i], i, entries()[i].name); }

// Instances 1, 2, ... of entry i, made on first use: a map's nodes never move (a once_flag cannot).
Slot& open_instance(size_t i, int64_t index) {
  if (index == 0) return open(i);
  static std::mutex mu;
  static auto* instances = new std::map<std::pair<size_t, int64_t>, Slot>();  // never destroyed, as slots()
  Slot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    slot = &(*instances)[{i, index}];
  }
  return open_slot(*slot, i, cat(entries()[i].name, ":", index));
}

}  // namespace

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (const Entry& entry : entries()) names.push_back(entry.name);
  return names;
}

std::vector<DeviceStatus> probe_devices() {
  std::vector<DeviceStatus> statuses;
  for (size_t i = 0; i < entries().size(); ++i) {
    Slot& slot = open(i);
    statuses.push_back({entries()[i].name, slot.device != nullptr, slot.reason});
  }
  return statuses;
}

Device& get_device(std::string_view name) {
  auto [i, index] = parse_name(name);
  Slot& slot = open_instance(i, index);
  if (!slot.device) throw Error(cat("device ", canonical_device_name(name), " is not available: ", slot.reason));
  return *slot.device;
}

std::string canonical_device_name(std::string_view name) {
  auto [i, index] = parse_name(name);
  return index == 0 ? entries()[i].name : cat(entries()[i].name, ":", index);
}

std::string default_device_name() {
  if (!config().device.empty()) return canonical_device_name(config().device);
  // The first that opens, in the list's order: the ones after it are not opened at all (a CPU run
  // does not start PoCL or lavapipe).
  std::string reasons;
  for (size_t i = 0; i < entries().size(); ++i) {
    Slot& slot = open(i);
    if (slot.device) return entries()[i].name;
    reasons += cat("\n  ", entries()[i].name, ": ", slot.reason);
  }
  throw Error(cat("no device is available; why each one is not:", reasons));
}

std::optional<std::string> find_device(const std::function<bool(const DeviceSpec&)>& wanted) {
  for (size_t i = 0; i < entries().size(); ++i) {
    Slot& slot = open(i);
    if (slot.device && wanted(slot.device->spec())) return entries()[i].name;
  }
  return std::nullopt;
}

void register_device(const std::string& name, std::function<std::unique_ptr<Device>()> make) {
  bool upper = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
  if (!upper) throw Error(cat("register_device(\"", name, "\"): a device name is upper-case letters, digits and _; e.g. \"MYDEV\""));
  for (const Entry& entry : entries())
    if (entry.name == name)
      throw Error(cat("register_device(\"", name, "\"): a device of that name is registered already (", registered_list(),
                      "); choose another name"));
  slots().emplace_back();  // first: the entry must never be without its slot
  entries().push_back({name, std::move(make)});
}

}  // namespace kiln

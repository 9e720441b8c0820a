#include "frontend/realize.h"

#include <array>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <unordered_map>

#include "lower/lower.h"
#include "schedule/schedule_cache.h"
#include "search/tuned.h"
#include "uop/big_stack.h"
#include "uop/config.h"
#include "uop/hash.h"

namespace kiln {

namespace {

std::atomic<int64_t> g_next_buffer_id{1};
std::atomic<size_t> g_lowered{0}, g_launched{0};

// Nodes realized earlier, so later graphs that contain them read the buffer instead of recomputing.
// Both sides are weak: the map never keeps a buffer (or a graph) alive, so an output tensor's memory
// goes back to the device's cache as soon as the last tensor using it is gone.
class RealizedMap {
 public:
  UOpPtr find(const UOpPtr& u) {
    if (!may_contain(u.get())) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(u.get());
    if (it == map_.end()) return nullptr;
    UOpPtr key = it->second.first.lock(), buffer = it->second.second.lock();
    if (key != u || buffer == nullptr) {  // the node died (its address reused) or the buffer did
      map_.erase(it);
      return nullptr;
    }
    return buffer;
  }
  void add(const UOpPtr& u, const UOpPtr& buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (++adds_ % 256 == 0) prune();
    map_[u.get()] = {u, buffer};
    size_t bit = filter_bit(u.get());
    filter_[bit / 64].fetch_or(uint64_t{1} << (bit % 64));
  }

 private:
  // Every node of every realized graph is looked up, and almost none is here: a filter of the
  // addresses that may be answers most lookups without the lock. add sets an entry's bit; prune
  // stores each word at once, keeping the bits of every entry that remains, so none goes missing.
  static size_t filter_bit(const UOp* u) { return hash_mix(reinterpret_cast<uintptr_t>(u)) % kFilterBits; }
  bool may_contain(const UOp* u) const {
    size_t bit = filter_bit(u);
    return (filter_[bit / 64].load(std::memory_order_relaxed) >> (bit % 64)) & 1;
  }
  void prune() {
    std::array<uint64_t, kFilterBits / 64> kept{};
    for (auto it = map_.begin(); it != map_.end();) {
      if (it->second.first.expired() || it->second.second.expired()) {
        it = map_.erase(it);
        continue;
      }
      size_t bit = filter_bit(it->first);
      kept[bit / 64] |= uint64_t{1} << (bit % 64);
      ++it;
    }
    for (size_t i = 0; i < kept.size(); ++i) filter_[i].store(kept[i], std::memory_order_relaxed);
  }
  static constexpr size_t kFilterBits = 4096;
  std::array<std::atomic<uint64_t>, kFilterBits / 64> filter_{};
  std::mutex mu_;
  size_t adds_ = 0;
  std::unordered_map<const UOp*, std::pair<std::weak_ptr<const UOp>, std::weak_ptr<const UOp>>> map_;
};

RealizedMap& realized_map() {
  static RealizedMap* map = new RealizedMap();
  return *map;
}

struct CompiledKernel {
  UOpPtr ast;
  LoweredKernel lowered;
  std::unique_ptr<Program> program;
};

// Keyed by the AST node itself: ASTs are interned and each entry keeps its AST alive, so the address
// identifies the kernel for as long as the entry exists, and a lookup is one hash of two pointers.
class KernelCache {
 public:
  CompiledKernel& get(Device& device, const ScheduleItem& item) {
    const UOpPtr& ast = item.ast;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<CompiledKernel>& entry = cache_[{&device, ast.get()}];
    if (entry) return *entry;
    if (observer) observer(ast);
    auto compiled = std::make_unique<CompiledKernel>();
    compiled->ast = ast;
    // KILN_BEAM: the tuning cache's opts, or a search's (once per new kernel: this cache keeps the result).
    compiled->lowered = config().beam > 0 ? tuned_kernel(device, ast, kernel_buffers(item.bufs), config().beam)
                                          : lower_kernel(ast, device.spec());
    compiled->program = device.load(device.compile(compiled->lowered.source, compiled->lowered.name));
    ++g_lowered;
    entry = std::move(compiled);
    return *entry;
  }

 private:
  struct KeyHash {
    size_t operator()(const std::pair<const Device*, const UOp*>& k) const {
      return hash_combine(reinterpret_cast<uintptr_t>(k.first), reinterpret_cast<uintptr_t>(k.second));
    }
  };
  std::mutex mu_;
  std::unordered_map<std::pair<const Device*, const UOp*>, std::unique_ptr<CompiledKernel>, KeyHash> cache_;

 public:
  std::function<void(const UOpPtr&)> observer;
};

KernelCache& kernel_cache() {
  static KernelCache* cache = new KernelCache();
  return *cache;
}

size_t item_bytes(const ScheduleItem& item) {
  size_t bytes = 0;
  for (const UOpPtr& b : item.bufs) bytes += static_cast<size_t>(std::get<BufferArg>(b->arg).size) * b->dtype.itemsize();
  return bytes;
}

void run_item(const ScheduleItem& item) {
  for (const UOpPtr& b : item.bufs) storage_of(b).ensure_allocated();
  if (item.kind == ScheduleItem::Kind::Copy) {
    DeviceBuffer &dst = storage_of(item.bufs[0]), &src = storage_of(item.bufs[1]);
    std::vector<uint8_t> staging(src.bytes);
    src.device->copy_out(staging.data(), src.raw, src.bytes);
    dst.device->copy_in(dst.raw, staging.data(), dst.bytes);
    return;
  }
  Device& device = *storage_of(item.bufs[0]).device;
  CompiledKernel& k = kernel_cache().get(device, item);
  std::vector<RawBuffer> raws;
  for (const UOpPtr& b : item.bufs) raws.push_back(storage_of(b).raw);
  bool timed = config().debug >= 2;
  double seconds = k.program->launch(raws, {}, k.lowered.dims, timed);
  ++g_launched;
  if (timed)
    std::cerr << "kiln: " << device.spec().name << " " << k.lowered.name << "  " << seconds * 1e6 << " us  "
              << static_cast<double>(item_bytes(item)) / seconds * 1e-9 << " GB/s\n";
}

}  // namespace

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::ensure_allocated() {
  if (raw.handle == nullptr) raw = device->alloc(bytes);
}

void DeviceBuffer::release() {
  if (raw.handle != nullptr) device->free(raw);
  raw = RawBuffer{};
}

UOpPtr device_node(const std::string& name) {
  // The frontend asks for every constant: remember each name's node (a DEVICE node is tiny and shared).
  // The default device is read from config() each time, since code and tests may change it.
  struct Known {
    std::string name, config_device;
    UOpPtr node;
  };
  static std::mutex mu;
  static std::vector<Known>* known = new std::vector<Known>();  // leaked: nodes may be used after main
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Known& k : *known)
      if (k.name == name && (!name.empty() || k.config_device == config().device)) return k.node;
  }
  std::string resolved = name.empty() ? default_device_name() : name;
  for (char& c : resolved) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  get_device(resolved);  // throws Error naming the device and why it is unavailable
  UOpPtr node = UOp::make(Op::DEVICE, dtypes::void_, {}, resolved);
  std::lock_guard<std::mutex> lock(mu);
  if (known->size() < 64) known->push_back({name, config().device, node});  // bounded: names are few
  return node;
}

UOpPtr new_buffer(const UOpPtr& device, int64_t size, DType dtype) {
  auto storage = std::make_shared<DeviceBuffer>();
  storage->device = &get_device(device->arg_as<std::string>());
  storage->bytes = static_cast<size_t>(size) * dtype.itemsize();
  BufferArg arg{g_next_buffer_id++, size, storage};
  return UOp::make(Op::BUFFER, dtype, {device}, arg);
}

DeviceBuffer& storage_of(const UOpPtr& buffer) {
  const BufferArg& arg = buffer->arg_as<BufferArg>();
  KILN_ASSERT(arg.storage != nullptr, "every BUFFER has storage");
  return *static_cast<DeviceBuffer*>(arg.storage.get());
}

namespace {

UOpPtr find_realized(const UOpPtr& u) { return realized_map().find(u); }

Schedule create_schedule_on_big_stack(const std::vector<UOpPtr>& outputs, const BufferMaker& make_buffer) {
  // The scheduler and kernel builder recurse per node: long graphs get a big stack (uop/big_stack.h).
  return with_big_stack([&] { return create_schedule(outputs, make_buffer, find_realized); });
}

ScheduleCache& schedule_cache() {
  static ScheduleCache* cache = new ScheduleCache();
  return *cache;
}

}  // namespace

Schedule schedule_uops(const std::vector<UOpPtr>& outputs) { return create_schedule_on_big_stack(outputs, new_buffer); }

std::vector<UOpPtr> realize_uops(const std::vector<UOpPtr>& outputs) {
  // The same computation on other data (a loop rebuilding the same graph) reuses its schedule.
  Schedule s = schedule_cache().get(outputs, new_buffer, find_realized, [&](const BufferMaker& make_buffer) {
    return create_schedule_on_big_stack(outputs, make_buffer);
  });
  if (config().debug >= 1) std::cerr << "kiln: realize: " << s.items.size() << " items\n";
  for (size_t i = 0; i < s.items.size(); ++i) {
    run_item(s.items[i]);
    for (const UOpPtr& b : s.free_after[i]) storage_of(b).release();
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i] != s.outputs[i]) realized_map().add(outputs[i], s.outputs[i]);
  return s.outputs;
}

void set_kernel_observer(std::function<void(const UOpPtr& ast)> observer) { kernel_cache().observer = std::move(observer); }

RealizeStats realize_stats() {
  return {g_lowered.load(), g_launched.load(), schedule_cache().hits(), schedule_cache().misses()};
}

}  // namespace kiln

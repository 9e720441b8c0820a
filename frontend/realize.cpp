#include "frontend/realize.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "lower/lower.h"
#include "schedule/schedule_cache.h"
#include "search/tuned.h"
#include "uop/big_stack.h"
#include "uop/config.h"
#include "uop/hash.h"
#include "uop/thread_pool.h"

namespace kiln {

namespace {

std::atomic<int64_t> g_next_buffer_id{1};
std::atomic<uint64_t> g_next_serial{1};
std::atomic<bool> compiles_forbidden{false};
thread_local Recorder* t_recorder = nullptr;

std::string ast_name(const UOpPtr& ast) { return cat("(AST hash ", std::hex, ast->hash(), ")"); }
std::atomic<size_t> g_lowered{0}, g_launched{0}, g_allocations{0};

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
    // The node died (its address reused) or the buffer did, or an in-place write (Tensor::assign) has
    // since overwritten the buffer's memory: then the node is computed again from its sources.
    if (key != u || buffer == nullptr || storage_of(buffer).stale()) {
      map_.erase(it);
      return nullptr;
    }
    return buffer;
  }
  // Drops the entries that answer with `buffer`: its memory is a leaf's now (Tensor::requires_grad_),
  // and a tensor holding an equal graph must compute its own value, not take the leaf's node.
  void forget(const UOpPtr& buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(map_, [&](const auto& entry) { return entry.second.second.lock() == buffer; });
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
//
// Compiles run outside the cache's lock, each kernel's at most once: an entry is made under the cache's
// lock, and its build runs under the entry's own, so every other caller of that kernel waits for it
// while other kernels compile concurrently. realize hands the kernels of a schedule that are not yet
// built to the thread pool (prefetch) and launches them in order as each becomes ready. A prefetch that
// throws keeps its error for the realize that needs the kernel (raised once; the next caller builds
// again), so an error is reported where it was before: in the realize, never lost on a worker. No build
// outlives its realize: one that stops early (an error) cancels its queued prefetches and waits for the
// running ones (settle), so no worker is still compiling when the caller moves on, or the process exits.
class KernelCache {
 public:
  struct Entry;
  using Cancel = std::shared_ptr<std::atomic<bool>>;

  CompiledKernel& get(Device& device, const ScheduleItem& item) {
    Entry& entry = entry_of(device, item.ast);
    std::lock_guard<std::mutex> lock(entry.mu);
    if (!entry.built) {
      if (std::exception_ptr error = std::exchange(entry.error, nullptr)) std::rethrow_exception(error);
      build(entry.kernel, device, item.ast, item.bufs);
      entry.built = true;
    }
    return entry.kernel;
  }

  // Starts building `item`'s kernel on the thread pool unless it is built; the entry handed over, else
  // null. Once `cancel` is set, a task not yet started builds nothing.
  Entry* prefetch(Device& device, const ScheduleItem& item, const Cancel& cancel) {
    Entry& entry = entry_of(device, item.ast);
    if (entry.built) return nullptr;
    // The task holds the AST only, never the schedule's buffers: a queued task outlives its realize until a
    // worker drops it, and memory it held would neither return to the device cache nor count as unshared.
    default_pool().submit([this, &device, &entry, ast = item.ast, cancel] {
      // Someone holds the entry: it is being built (or read) already; a worker never waits for it.
      std::unique_lock<std::mutex> lock(entry.mu, std::try_to_lock);
      if (!lock.owns_lock() || cancel->load() || entry.built || entry.error) return;
      try {
        build(entry.kernel, device, ast, {});
        entry.built = true;
      } catch (...) {
        entry.error = std::current_exception();
      }
    });
    return &entry;
  }

  // Cancels what `handed` still has queued and waits for the builds running now.
  static void settle(const std::vector<Entry*>& handed, const Cancel& cancel) {
    cancel->store(true);
    for (Entry* entry : handed) std::lock_guard<std::mutex> wait(entry->mu);
  }

  struct Entry {
    std::mutex mu;                        // held while building
    std::atomic<bool> built{false};       // read without the lock by prefetch
    std::exception_ptr error;             // a prefetch's, for the next get()
    CompiledKernel kernel;
  };

 private:
  Entry& entry_of(Device& device, const UOpPtr& ast) {
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<Entry>& entry = cache_[{&device, ast.get()}];
    if (!entry) {
      entry = std::make_unique<Entry>();
      entry->kernel.ast = ast;
    }
    return *entry;
  }

  // `bufs` (the kernel's buffers) only matter to a search; prefetches, never run under KILN_BEAM, pass none.
  void build(CompiledKernel& compiled, Device& device, const UOpPtr& ast, const std::vector<UOpPtr>& bufs) {
    if (compiles_forbidden.load(std::memory_order_relaxed) && config().strict)
      throw Error(cat("KILN_STRICT: kernel ", ast_name(ast), " would be compiled after a captured step started replaying; "
                      "deploy mode forbids compiles after the warmup (run every step shape during the warmup, or unset KILN_STRICT)"));
    if (observer) {  // one call at a time: observers need not be thread-safe
      std::lock_guard<std::mutex> lock(observer_mu_);
      observer(ast);
    }
    // KILN_BEAM: the tuning cache's opts, or a search's (once per new kernel: this cache keeps the result).
    auto start = std::chrono::steady_clock::now();
    LoweredKernel lowered = config().beam > 0 ? tuned_kernel(device, ast, kernel_buffers(bufs), config().beam)
                                              : lower_kernel(ast, device.spec());
    auto lowered_at = std::chrono::steady_clock::now();
    compiled.program = device.load(device.compile(lowered.source, lowered.name));
    if (config().debug >= 2) {
      auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
      std::cerr << cat("kiln: built ", lowered.name, " in ", ms(start, std::chrono::steady_clock::now()), " ms (lowering ",
                       ms(start, lowered_at), " ms)\n");
    }
    compiled.lowered = std::move(lowered);
    ++g_lowered;
  }

  struct KeyHash {
    size_t operator()(const std::pair<const Device*, const UOp*>& k) const {
      return hash_combine(reinterpret_cast<uintptr_t>(k.first), reinterpret_cast<uintptr_t>(k.second));
    }
  };
  std::mutex mu_, observer_mu_;
  std::unordered_map<std::pair<const Device*, const UOp*>, std::unique_ptr<Entry>, KeyHash> cache_;

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

// Reading a value that an in-place write has since overwritten: PyTorch's "modified by an inplace
// operation". Raised before anything runs, so no kernel ever reads the newer numbers in its place.
void check_not_overwritten(const UOpPtr& buffer, const char* what) {
  if (!storage_of(buffer).stale()) return;
  throw Error(cat(what, ": a tensor of ", buffer->arg_as<BufferArg>().size, " ", buffer->dtype.name(),
                  " elements that this computation reads was modified by an inplace operation (Tensor::assign) after the "
                  "computation was built; realize it before the assign, or build it again from the tensor's new value"));
}

std::vector<std::shared_ptr<DeviceBuffer>> storages(const std::vector<UOpPtr>& bufs) {
  std::vector<std::shared_ptr<DeviceBuffer>> out;
  for (const UOpPtr& b : bufs) out.push_back(storage_ptr(b));
  return out;
}

}  // namespace

void copy_between(DeviceBuffer& dst, DeviceBuffer& src) {
  std::vector<uint8_t> staging(src.bytes);
  src.device->copy_out(staging.data(), src.raw, src.bytes);
  dst.device->copy_in(dst.raw, staging.data(), dst.bytes);
}

namespace {

// SCATTER_ADD on the host (schedule.h): out zeroed, then each value added at its index, in order.
// Through copy_out and copy_in, so it runs for every device; on the CPU those are memcpys.
void scatter_add(DeviceBuffer& out, DeviceBuffer& values, DeviceBuffer& index, std::array<int64_t, 4> geometry, DType dtype) {
  // Plain names, not a structured binding: clang 15 (the fuzz build) cannot capture bindings in a lambda.
  const int64_t outer = geometry[0], m = geometry[1], inner = geometry[2], n = geometry[3];
  int64_t total = outer * m * inner;
  // Staging kept per thread across calls: fresh memory is slow to touch here (NOTES.md), and a training
  // step scatters the same sizes every time.
  thread_local std::vector<int32_t> at;
  thread_local std::vector<uint8_t> staged_values, staged_result;
  at.resize(static_cast<size_t>(total));
  index.device->copy_out(at.data(), index.memory().raw, at.size() * sizeof(int32_t));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    staged_values.resize(static_cast<size_t>(total) * sizeof(T));
    staged_result.assign(static_cast<size_t>(outer * n * inner) * sizeof(T), 0);  // all-zero bytes: 0.0
    T* v = reinterpret_cast<T*>(staged_values.data());
    T* result = reinterpret_cast<T*>(staged_result.data());
    values.device->copy_out(v, values.memory().raw, staged_values.size());
    for (int64_t p = 0; p < total; ++p) {
      int64_t o = p / (m * inner), i = p % inner, j = at[static_cast<size_t>(p)];
      if (j < 0 || j >= n) throw Error(cat("scatter_add: index ", j, " is out of range for an axis of size ", n));
      result[(o * n + j) * inner + i] += v[p];
    }
    out.device->copy_in(out.memory().raw, result, staged_result.size());
  };
  if (dtype == dtypes::float64) run(double(0));
  else if (dtype == dtypes::float32) run(float(0));
  else throw InternalError(cat("SCATTER_ADD of ", dtype.name(), ": autograd makes it for float32 and float64 only"));
}

void run_item(const ScheduleItem& item) {
  for (size_t i = 1; i < item.bufs.size(); ++i) check_not_overwritten(item.bufs[i], "realize");
  for (const UOpPtr& b : item.bufs) storage_of(b).ensure_allocated();
  if (item.kind == ScheduleItem::Kind::Copy || item.kind == ScheduleItem::Kind::ScatterAdd) {
    std::function<void(const std::vector<DeviceBuffer*>&)> host;
    if (item.kind == ScheduleItem::Kind::Copy) {
      host = [](const std::vector<DeviceBuffer*>& b) { copy_between(*b[0], *b[1]); };
    } else {
      DType dtype = item.bufs[0]->dtype;
      host = [geometry = item.scatter, dtype](const std::vector<DeviceBuffer*>& b) { scatter_add(*b[0], *b[1], *b[2], geometry, dtype); };
    }
    std::vector<DeviceBuffer*> slots;
    for (const UOpPtr& b : item.bufs) slots.push_back(&storage_of(b));
    host(slots);
    if (t_recorder)
      t_recorder->launch({nullptr, {}, nullptr, item.kind == ScheduleItem::Kind::Copy ? "copy" : "scatter_add", storages(item.bufs), host, {}});
    return;
  }
  Device& device = *storage_of(item.bufs[0]).device;
  CompiledKernel& k = kernel_cache().get(device, item);
  std::vector<RawBuffer> raws;
  for (const UOpPtr& b : item.bufs) raws.push_back(storage_of(b).raw);
  bool timed = config().debug >= 2;
  std::vector<int64_t> vals = launch_values(item, k.lowered.vars);
  double seconds = k.program->launch(raws, vals, k.lowered.dims, timed);
  ++g_launched;
  if (t_recorder) t_recorder->launch({k.program.get(), k.lowered.dims, item.ast, k.lowered.name, storages(item.bufs), {}, std::move(vals)});
  if (timed)
    std::cerr << "kiln: " << device.spec().name << " " << k.lowered.name << "  " << seconds * 1e6 << " us  "
              << static_cast<double>(item_bytes(item)) / seconds * 1e-9 << " GB/s\n";
}

}  // namespace

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::ensure_allocated() {
  if (base) {  // a version written in place: the owner's memory
    base->ensure_allocated();
    raw = base->raw;
  } else if (raw.handle == nullptr) {
    raw = device->alloc(bytes);
    ++g_allocations;
  }
}

void DeviceBuffer::release() {
  if (raw.handle != nullptr && !base) device->free(raw);
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
  // One spelling per device ("cpu" and "CPU:0" are "CPU"), so that one device is one DEVICE node.
  std::string resolved = canonical_device_name(name.empty() ? default_device_name() : name);
  get_device(resolved);  // throws Error naming the device and why it is unavailable
  UOpPtr node = UOp::make(Op::DEVICE, dtypes::void_, {}, resolved);
  std::lock_guard<std::mutex> lock(mu);
  if (known->size() < 64) known->push_back({name, config().device, node});  // bounded: names are few
  return node;
}

UOpPtr new_buffer(const UOpPtr& device, int64_t size, DType dtype) {
  auto storage = std::make_shared<DeviceBuffer>();
  storage->serial = g_next_serial++;
  storage->device = &get_device(device->arg_as<std::string>());
  storage->bytes = static_cast<size_t>(size) * dtype.itemsize();
  BufferArg arg{g_next_buffer_id++, size, storage};
  return UOp::make(Op::BUFFER, dtype, {device}, arg);
}

UOpPtr current_value(const std::shared_ptr<DeviceBuffer>& memory, const UOpPtr& device, int64_t size, DType dtype) {
  auto storage = std::make_shared<DeviceBuffer>();
  storage->serial = g_next_serial++;
  storage->device = memory->device;
  storage->bytes = static_cast<size_t>(size) * dtype.itemsize();
  storage->base = memory;
  storage->version = memory->latest;
  storage->ensure_allocated();
  return UOp::make(Op::BUFFER, dtype, {device}, BufferArg{g_next_buffer_id++, size, storage});
}

uint64_t next_buffer_serial() { return g_next_serial.load(); }

DeviceBuffer& storage_of(const UOpPtr& buffer) {
  const BufferArg& arg = buffer->arg_as<BufferArg>();
  KILN_ASSERT(arg.storage != nullptr, "every BUFFER has storage");
  return *static_cast<DeviceBuffer*>(arg.storage.get());
}

std::shared_ptr<DeviceBuffer> storage_ptr(const UOpPtr& buffer) {
  const BufferArg& arg = buffer->arg_as<BufferArg>();
  KILN_ASSERT(arg.storage != nullptr, "every BUFFER has storage");
  return std::static_pointer_cast<DeviceBuffer>(arg.storage);
}

std::shared_ptr<DeviceBuffer> memory_owner(const std::shared_ptr<DeviceBuffer>& storage) { return storage->base ? storage->base : storage; }

void forget_realized(const UOpPtr& buffer) { realized_map().forget(buffer); }

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

namespace {

// --- in-place writes (Tensor::assign) ---------------------------------------------------------------

std::shared_ptr<DeviceBuffer> memory_of(const UOpPtr& buffer) { return memory_owner(storage_ptr(buffer)); }

// Whether a kernel that writes `memory` reads it only at the element it writes (an optimizer's
// p - lr * g): then every element is read before it is overwritten, whatever the order of the work.
bool reads_only_where_it_writes(const ScheduleItem& item, const DeviceBuffer& memory) {
  std::unordered_set<int64_t> slots;
  for (size_t i = 1; i < item.bufs.size(); ++i)
    if (&storage_of(item.bufs[i]).memory() == &memory) slots.insert(static_cast<int64_t>(i));
  if (slots.empty()) return true;
  if (item.ast->src.size() != 1 || item.ast->src[0]->op != Op::STORE) return false;
  const UOpPtr& written = item.ast->src[0]->src[0]->src[1];  // STORE(INDEX(out, index), value)
  for (const UOpPtr& u : toposort(item.ast))  // analysis: whether other indexes read the buffer
    if (u->op == Op::INDEX && u->src[0]->op == Op::DEFINE_GLOBAL && slots.count(u->src[0]->arg_as<int64_t>()) && u->src[1] != written)
      return false;
  return true;
}

// Moves item w to the end of the schedule: a write in place goes after every other reader of the old
// value. Buffers it reads that were freed after a later item are freed after it instead.
void move_to_end(Schedule& s, size_t w) {
  ScheduleItem item = std::move(s.items[w]);
  std::vector<UOpPtr> frees = std::move(s.free_after[w]);
  s.items.erase(s.items.begin() + static_cast<std::ptrdiff_t>(w));
  s.free_after.erase(s.free_after.begin() + static_cast<std::ptrdiff_t>(w));
  for (const UOpPtr& b : item.bufs)
    for (size_t j = w; j < s.free_after.size(); ++j)
      if (auto it = std::find(s.free_after[j].begin(), s.free_after[j].end(), b); it != s.free_after[j].end()) {
        s.free_after[j].erase(it);
        frees.push_back(b);
      }
  s.items.push_back(std::move(item));
  s.free_after.push_back(std::move(frees));
}

// The kernel that computes output k, or null.
std::optional<size_t> writer_of(const Schedule& s, size_t k) {
  for (size_t i = 0; i < s.items.size(); ++i)
    if (s.items[i].kind == ScheduleItem::Kind::Kernel && s.items[i].bufs[0] == s.outputs[k]) return i;
  return std::nullopt;
}

// Whether output k can be a version of `memory` (the schedule in its final order): its kernel is the
// last that touches the memory, reads it only where it writes, and no other output claimed it. Returns
// why not, or null when it can.
const char* in_place_refusal(const Schedule& s, size_t k, const DeviceBuffer& out, const std::shared_ptr<DeviceBuffer>& memory,
                             bool stale, const std::unordered_set<const DeviceBuffer*>& claimed) {
  if (out.base) return "the output is already another tensor's memory";
  if (stale) return "the target was overwritten since";
  if (claimed.count(memory.get())) return "another output of this realize is written into the same memory";
  if (memory->bytes != out.bytes || memory->device != out.device) return "size or device differ";
  std::optional<size_t> w = writer_of(s, k);
  if (!w) return "no kernel of this schedule computes the value";
  for (size_t i = *w + 1; i < s.items.size(); ++i)
    for (const UOpPtr& b : s.items[i].bufs)
      if (&storage_of(b).memory() == memory.get()) return "a later kernel reads the old value";
  if (!reads_only_where_it_writes(s.items[*w], *memory)) return "the kernel reads the old value at other elements than it writes";
  return nullptr;
}

// Makes each output with a target a version of the target's memory where that is safe (Tensor::assign
// in place); otherwise the output keeps its own new memory. First every such kernel whose result no
// other kernel reads moves to the end (after the old value's readers), then each is checked in that
// final order.
void write_in_place(Schedule& s, const std::vector<UOpPtr>& targets) {
  size_t n = std::min(targets.size(), s.outputs.size());
  for (size_t k = 0; k < n; ++k) {
    if (!targets[k]) continue;
    std::optional<size_t> w = writer_of(s, k);
    if (!w) continue;
    bool read_later = std::any_of(s.items.begin() + static_cast<std::ptrdiff_t>(*w) + 1, s.items.end(), [&](const ScheduleItem& item) {
      return std::find(item.bufs.begin(), item.bufs.end(), s.outputs[k]) != item.bufs.end();
    });
    if (!read_later) move_to_end(s, *w);
  }
  std::unordered_set<const DeviceBuffer*> claimed;
  for (size_t k = 0; k < n; ++k) {
    if (!targets[k]) continue;
    std::shared_ptr<DeviceBuffer> out = storage_ptr(s.outputs[k]), memory = memory_of(targets[k]);
    const char* refused = in_place_refusal(s, k, *out, memory, storage_of(targets[k]).stale(), claimed);
    if (!refused) {
      out->base = memory;  // version 0 until its kernel runs (realize_uops)
      claimed.insert(memory.get());
    } else if (config().debug >= 2) {
      std::cerr << "kiln: assign of output " << k << " (" << out->bytes << " bytes) writes new memory: " << refused << "\n";
    }
  }
}

}  // namespace

std::vector<UOpPtr> realize_uops(const std::vector<UOpPtr>& given, const std::vector<UOpPtr>& targets) {
  // An output to write into a target (Tensor::assign) whose value was realized before, in other memory,
  // is copied in by a kernel: read from there, the target's tensor took that memory and shared it with
  // another (a state dict loaded into two models gave both one weight, and their gradients were summed).
  std::vector<UOpPtr> outputs = given;
  for (size_t i = 0; i < outputs.size() && i < targets.size(); ++i)
    if (targets[i])
      if (UOpPtr found = find_realized(outputs[i]); found && storage_of(found).bytes > 0)
        outputs[i] = UOp::make(Op::CONTIGUOUS, found->dtype,
                               {UOp::make(Op::RESHAPE, found->dtype, {found}, Shape{found->arg_as<BufferArg>().size})});
  // The same computation on other data (a loop rebuilding the same graph) reuses its schedule.
  Schedule s = schedule_cache().get(outputs, new_buffer, find_realized, [&](const BufferMaker& make_buffer) {
    return create_schedule_on_big_stack(outputs, make_buffer);
  });
  if (!targets.empty()) write_in_place(s, targets);
  if (config().debug >= 1) std::cerr << "kiln: realize: " << s.items.size() << " items\n";
  // Kernels no cache has built yet compile on the pool while earlier ones run (not under KILN_BEAM: a
  // search uses the pool itself).
  std::vector<KernelCache::Entry*> handed;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  if (config().beam == 0)
    for (const ScheduleItem& item : s.items)
      if (item.kind == ScheduleItem::Kind::Kernel)
        if (KernelCache::Entry* e = kernel_cache().prefetch(*storage_of(item.bufs[0]).device, item, cancel)) handed.push_back(e);
  struct Settle {
    const std::vector<KernelCache::Entry*>& handed;
    const KernelCache::Cancel& cancel;
    ~Settle() { KernelCache::settle(handed, cancel); }
  } settle{handed, cancel};
  for (size_t i = 0; i < s.items.size(); ++i) {
    run_item(s.items[i]);
    if (s.items[i].kind == ScheduleItem::Kind::Kernel) {
      DeviceBuffer& out = storage_of(s.items[i].bufs[0]);
      if (out.base && out.version == 0) out.version = ++out.base->latest;  // the memory now holds this value
    }
    for (const UOpPtr& b : s.free_after[i]) storage_of(b).release();
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i] != s.outputs[i]) realized_map().add(outputs[i], s.outputs[i]);
  return s.outputs;
}

void set_kernel_observer(std::function<void(const UOpPtr& ast)> observer) { kernel_cache().observer = std::move(observer); }

Recorder* set_recorder(Recorder* recorder) { return std::exchange(t_recorder, recorder); }
Recorder* current_recorder() { return t_recorder; }

void forbid_compiles_if_strict() {
  if (config().strict) compiles_forbidden = true;
}

RealizeStats realize_stats() {
  return {g_lowered.load(), g_launched.load(), schedule_cache().hits(), schedule_cache().misses(), g_allocations.load()};
}

}  // namespace kiln

#include "schedule/schedule_cache.h"

#include <unordered_set>

#include "uop/hash.h"

namespace kiln {

namespace {

// The BUFFER holding an input's value and the DEVICE it lives on.
const UOpPtr& device_of_buffer(const UOpPtr& buffer) { return buffer->src[0]; }

}  // namespace

// One walk of the graph above its inputs, in the order both sides of a comparison use.
struct Walk {
  std::vector<const UOp*> order;                   // every node once, sources before users
  std::vector<uint32_t> src_begin;                 // per node: where its sources start in src_index
  std::vector<uint32_t> src_index;                 // positions of the sources, node after node
  std::vector<int32_t> input_of;                   // per node: its input slot, or -1
  std::vector<UOpPtr> input_buffers;               // per input slot: the BUFFER holding it
  std::vector<Shape> input_shapes;
  std::vector<uint32_t> outputs;                   // position of each output
  uint64_t hash = 0;
};

struct ScheduleCache::Signature {
  struct Node {
    Op op;
    DType dtype;
    Arg arg;                    // empty for an input
    std::vector<uint32_t> src;  // positions of the sources
    int32_t input = -1;         // >= 0: this node is that input slot
  };
  struct Input {
    DType dtype;
    Shape shape;
    UOpPtr device;  // interned, so an equal DEVICE is the same node
  };
  std::vector<Node> nodes;
  std::vector<Input> inputs;
  std::vector<uint32_t> outputs;
  uint64_t hash = 0;
};

struct ScheduleCache::Template {
  struct Created {  // a buffer the schedule makes: an output or an intermediate
    UOpPtr device;
    int64_t size;
    DType dtype;
  };
  struct Item {
    ScheduleItem::Kind kind;
    UOpPtr ast;
    std::vector<uint32_t> bufs;
    std::array<int64_t, 4> scatter;
    std::vector<std::pair<std::string, int64_t>> var_vals;
  };
  // Buffer slots: the inputs first (in the signature's order), then `created`.
  std::vector<Created> created;
  std::vector<Item> items;
  std::vector<uint32_t> outputs;
  std::vector<std::vector<uint32_t>> free_after;
};

struct ScheduleCache::Entry {
  Signature sig;
  Template tmpl;
};

namespace {

// Each node's position in a walk. The walk runs on every realize, cache hits included, where
// std::unordered_map's allocation and modulo per node were most of its cost: this is open addressing
// over a power-of-two table, insert-only. (Addresses only pick slots here; nothing persists.)
class NodeIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  uint32_t find(const UOp* u) const {
    for (size_t i = home(u);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].node == u) return slots_[i].at;
      if (slots_[i].node == nullptr) return kAbsent;
    }
  }
  void insert(const UOp* u, uint32_t at) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = home(u);
    while (slots_[i].node != nullptr) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = {u, at};
    ++size_;
  }

 private:
  struct Slot {
    const UOp* node = nullptr;
    uint32_t at = 0;
  };
  // Fibonacci hashing: the top bits of the address times 2^64/phi. One multiply spreads distinct
  // (aligned) addresses well, at a third of hash_mix's cost, and every edge of the graph looks one up.
  size_t home(const UOp* u) const { return (reinterpret_cast<uintptr_t>(u) * 0x9e3779b97f4a7c15ull) >> shift_; }
  void grow() {
    std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(slots_.size() * 2));
    --shift_;
    size_ = 0;
    for (const Slot& s : old)
      if (s.node != nullptr) insert(s.node, s.at);
  }
  // Room for graphs of up to 512 nodes (a 200-op chain is ~360) without growing.
  std::vector<Slot> slots_ = std::vector<Slot>(1024);
  int shift_ = 64 - 10;  // 2^(64 - shift_) slots
  size_t size_ = 0;
};

// Iterative post-order walk that stops at the scheduler's leaves (a BUFFER, or a node realized earlier):
// graphs can be long chains, and this runs on the caller's ordinary stack.
Walk walk_graph(const std::vector<UOpPtr>& outputs, const RealizedLookup& realized) {
  Walk w;
  // Graphs realized in a loop are commonly a few hundred nodes: skip the first doublings.
  w.order.reserve(256);
  w.input_of.reserve(256);
  w.src_begin.reserve(257);
  w.src_index.reserve(512);
  NodeIndex index;  // position in w.order
  std::optional<ShapeCache> shapes;  // only realized inputs need one: a BUFFER's shape is its size
  auto append = [&](const UOp* u, int32_t input, uint64_t h) {
    index.insert(u, static_cast<uint32_t>(w.order.size()));
    w.order.push_back(u);
    w.input_of.push_back(input);
    w.hash = hash_fold(w.hash, h);
  };
  // An input records its BUFFER, shape and device; its slot is its order of first appearance.
  auto add_input = [&](const UOpPtr& u, UOpPtr buffer) {
    Shape shape = u->op == Op::BUFFER ? Shape{std::get<BufferArg>(u->arg).size} : (shapes ? *shapes : shapes.emplace())(u);
    uint64_t h = hash_fold(hash_dtype(u->dtype), device_of_buffer(buffer)->hash());
    for (int64_t d : shape) h = hash_fold(h, static_cast<uint64_t>(d));
    int32_t slot = static_cast<int32_t>(w.input_buffers.size());
    w.input_buffers.push_back(std::move(buffer));
    w.input_shapes.push_back(std::move(shape));
    w.src_begin.push_back(static_cast<uint32_t>(w.src_index.size()));
    append(u.get(), slot, hash_fold(h, static_cast<uint64_t>(slot)));
  };
  auto add_node = [&](const UOpPtr& u) {
    uint64_t h = hash_fold(hash_dtype(u->dtype), static_cast<uint64_t>(u->op));
    if (!std::holds_alternative<std::monostate>(u->arg)) h = hash_fold(h, arg_hash(u->arg));
    w.src_begin.push_back(static_cast<uint32_t>(w.src_index.size()));
    for (const UOpPtr& s : u->src) {
      uint32_t at = index.find(s.get());
      w.src_index.push_back(at);
      h = hash_fold(h, at);
    }
    append(u.get(), -1, h);
  };
  // (node, 0) is not visited yet; (node, k > 0): sources before k-1 are done.
  std::vector<std::pair<const UOpPtr*, size_t>> stack;
  for (const UOpPtr& out : outputs) {
    if (index.find(out.get()) == NodeIndex::kAbsent) stack.push_back({&out, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const UOpPtr& u = *node;
      if (next++ == 0) {
        if (UOpPtr buffer = u->op == Op::BUFFER ? u : realized(u)) {
          add_input(u, std::move(buffer));
          stack.pop_back();
          continue;
        }
      }
      if (next - 1 < u->src.size()) {
        const UOpPtr& s = u->src[next - 1];
        if (index.find(s.get()) == NodeIndex::kAbsent) stack.push_back({&s, 0});
        continue;
      }
      add_node(u);
      stack.pop_back();
    }
    w.outputs.push_back(index.find(out.get()));
    w.hash = hash_fold(w.hash, w.outputs.back());
  }
  w.src_begin.push_back(static_cast<uint32_t>(w.src_index.size()));
  return w;
}

bool matches(const Walk& w, const ScheduleCache::Signature& sig) {
  if (w.hash != sig.hash || w.order.size() != sig.nodes.size() || w.input_buffers.size() != sig.inputs.size() ||
      w.outputs != sig.outputs)
    return false;
  for (size_t i = 0; i < w.order.size(); ++i) {
    const UOp& u = *w.order[i];
    const ScheduleCache::Signature::Node& n = sig.nodes[i];
    if (w.input_of[i] != n.input) return false;
    if (n.input >= 0) {
      const ScheduleCache::Signature::Input& in = sig.inputs[static_cast<size_t>(n.input)];
      const UOpPtr& buffer = w.input_buffers[static_cast<size_t>(n.input)];
      if (u.dtype != in.dtype || device_of_buffer(buffer) != in.device || w.input_shapes[static_cast<size_t>(n.input)] != in.shape)
        return false;
      continue;
    }
    if (u.op != n.op || u.dtype != n.dtype || w.src_begin[i + 1] - w.src_begin[i] != n.src.size()) return false;
    for (size_t j = 0; j < n.src.size(); ++j)
      if (w.src_index[w.src_begin[i] + j] != n.src[j]) return false;
    if (!arg_equal(u.arg, n.arg)) return false;
  }
  return true;
}

ScheduleCache::Signature make_signature(const Walk& w) {
  ScheduleCache::Signature sig;
  sig.hash = w.hash;
  sig.outputs = w.outputs;
  for (size_t i = 0; i < w.order.size(); ++i) {
    const UOp& u = *w.order[i];
    ScheduleCache::Signature::Node n{u.op, u.dtype, {}, {}, w.input_of[i]};
    if (n.input < 0) {
      n.arg = u.arg;
      n.src.assign(w.src_index.begin() + w.src_begin[i], w.src_index.begin() + w.src_begin[i + 1]);
    }
    sig.nodes.push_back(std::move(n));
  }
  sig.inputs.resize(w.input_buffers.size());
  for (size_t i = 0; i < w.order.size(); ++i) {
    if (w.input_of[i] < 0) continue;
    size_t k = static_cast<size_t>(w.input_of[i]);
    sig.inputs[k] = {w.order[i]->dtype, w.input_shapes[k], device_of_buffer(w.input_buffers[k])};
  }
  return sig;
}

// The schedule with its buffers as slots; nullopt when it uses a buffer that is neither an input nor one
// it made (then it is not safe to replay, and is not cached).
std::optional<ScheduleCache::Template> make_template(const Walk& w, const Schedule& s, const std::unordered_set<const UOp*>& made) {
  ScheduleCache::Template t;
  std::unordered_map<const UOp*, uint32_t> slot;
  for (size_t k = 0; k < w.input_buffers.size(); ++k) slot.emplace(w.input_buffers[k].get(), static_cast<uint32_t>(k));
  bool replayable = true;
  auto slot_of = [&](const UOpPtr& b) -> uint32_t {
    if (auto it = slot.find(b.get()); it != slot.end()) return it->second;
    replayable &= made.count(b.get()) > 0;
    t.created.push_back({device_of_buffer(b), std::get<BufferArg>(b->arg).size, b->dtype});
    uint32_t at = static_cast<uint32_t>(w.input_buffers.size() + t.created.size() - 1);
    slot.emplace(b.get(), at);
    return at;
  };
  for (const ScheduleItem& item : s.items) {
    ScheduleCache::Template::Item ti{item.kind, item.ast, {}, item.scatter, item.var_vals};
    for (const UOpPtr& b : item.bufs) ti.bufs.push_back(slot_of(b));
    t.items.push_back(std::move(ti));
  }
  for (const UOpPtr& b : s.outputs) t.outputs.push_back(slot_of(b));
  for (const auto& frees : s.free_after) {
    t.free_after.emplace_back();
    for (const UOpPtr& b : frees) t.free_after.back().push_back(slot_of(b));
  }
  if (!replayable) return std::nullopt;
  return t;
}

Schedule instantiate(const ScheduleCache::Template& t, const Walk& w, const BufferMaker& make_buffer) {
  std::vector<UOpPtr> buffers = w.input_buffers;
  for (const ScheduleCache::Template::Created& c : t.created) buffers.push_back(make_buffer(c.device, c.size, c.dtype));
  Schedule s;
  for (const ScheduleCache::Template::Item& ti : t.items) {
    ScheduleItem item{ti.kind, ti.ast, {}, ti.scatter, ti.var_vals};
    for (uint32_t b : ti.bufs) item.bufs.push_back(buffers[b]);
    s.items.push_back(std::move(item));
  }
  for (uint32_t b : t.outputs) s.outputs.push_back(buffers[b]);
  for (const auto& frees : t.free_after) {
    s.free_after.emplace_back();
    for (uint32_t b : frees) s.free_after.back().push_back(buffers[b]);
  }
  return s;
}

}  // namespace

ScheduleCache::ScheduleCache(size_t capacity) : capacity_(capacity) {}
ScheduleCache::~ScheduleCache() = default;

size_t ScheduleCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t ScheduleCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

Schedule ScheduleCache::get(const std::vector<UOpPtr>& outputs, const BufferMaker& make_buffer,
                            const RealizedLookup& realized, const std::function<Schedule(const BufferMaker&)>& create) {
  Walk w = walk_graph(outputs, realized);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [first, last] = by_hash_.equal_range(w.hash);
    for (auto it = first; it != last; ++it) {
      if (!matches(w, it->second->sig)) continue;
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return instantiate(it->second->tmpl, w, make_buffer);
    }
    ++misses_;
  }
  // Scheduling runs outside the lock; the buffers it makes are recorded to tell them from inputs.
  std::unordered_set<const UOp*> made;
  std::vector<UOpPtr> keep_alive;  // so a recorded address cannot be reused by another node meanwhile
  Schedule s = create([&](const UOpPtr& device, int64_t size, DType dtype) {
    UOpPtr b = make_buffer(device, size, dtype);
    made.insert(b.get());
    keep_alive.push_back(b);
    return b;
  });
  std::optional<Template> t = make_template(w, s, made);
  if (!t) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto [first, last] = by_hash_.equal_range(w.hash);
  for (auto it = first; it != last; ++it)
    if (matches(w, it->second->sig)) return s;  // another thread cached it meanwhile
  lru_.push_front(Entry{make_signature(w), std::move(*t)});
  by_hash_.emplace(w.hash, lru_.begin());
  if (lru_.size() > capacity_) {
    auto oldest = std::prev(lru_.end());
    auto [b, e] = by_hash_.equal_range(oldest->sig.hash);
    for (auto it = b; it != e; ++it)
      if (it->second == oldest) {
        by_hash_.erase(it);
        break;
      }
    lru_.pop_back();
  }
  return s;
}

}  // namespace kiln

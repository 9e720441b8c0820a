#include "uop/uop.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "uop/hash.h"
#include "uop/range.h"
#include "uop/spin_lock.h"

namespace kiln {

// --- args ---------------------------------------------------------------------------------------

namespace {
uint64_t hash_vec(const std::vector<int64_t>& v) {
  uint64_t h = hash_mix(v.size());
  for (int64_t x : v) h = hash_fold(h, static_cast<uint64_t>(x));
  return h;
}
uint64_t hash_const(const ConstValue& c) {
  uint64_t bits = std::visit(
      [](auto x) -> uint64_t {
        if constexpr (std::is_same_v<decltype(x), double>) return std::bit_cast<uint64_t>(x);  // NaN by bits, 0 != -0
        else return static_cast<uint64_t>(x);
      },
      c);
  return hash_fold(c.index(), bits);
}
}  // namespace

bool const_equal(const ConstValue& a, const ConstValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  return a == b;
}

bool arg_equal(const Arg& a, const Arg& b) {
  if (a.index() != b.index()) return false;
  if (const ConstValue* x = std::get_if<ConstValue>(&a)) return const_equal(*x, std::get<ConstValue>(b));
  return a == b;
}

uint64_t arg_hash(const Arg& a) {
  struct Hasher {
    uint64_t operator()(std::monostate) const { return 0; }
    uint64_t operator()(const ConstValue& c) const { return hash_const(c); }
    uint64_t operator()(int64_t x) const { return static_cast<uint64_t>(x); }
    uint64_t operator()(Op op) const { return static_cast<uint64_t>(op); }
    uint64_t operator()(const std::string& s) const { return hash_string(s); }
    uint64_t operator()(const std::vector<int64_t>& v) const { return hash_vec(v); }
    uint64_t operator()(const Pairs& v) const {
      uint64_t h = hash_mix(v.size());
      for (auto [x, y] : v) h = hash_fold(hash_fold(h, static_cast<uint64_t>(x)), static_cast<uint64_t>(y));
      return h;
    }
    uint64_t operator()(const VarArg& v) const {
      return hash_fold(hash_fold(hash_string(v.name), static_cast<uint64_t>(v.min)), static_cast<uint64_t>(v.max));
    }
    uint64_t operator()(const ReduceArg& r) const { return hash_fold(static_cast<uint64_t>(r.op), hash_vec(r.axes)); }
    uint64_t operator()(const BufferArg& b) const { return hash_fold(static_cast<uint64_t>(b.id), static_cast<uint64_t>(b.size)); }
  };
  // Alternatives that are plain integers are mixed here, once, with the alternative's index.
  return hash_fold(a.index(), std::visit(Hasher{}, a));
}

// --- the interning table ------------------------------------------------------------------------
//
// Sharded by hash so that threads building unrelated nodes rarely contend. Each shard is an
// open-addressing set of plain node pointers (linear probing, no allocation per entry). A node is
// made with make_shared (node and control block in one allocation) and its destructor removes its
// entry under the shard lock before any field is destroyed, so a pointer found in the table always
// points to a live object, possibly one whose count already reached zero: then weak_from_this().lock()
// fails, the entry is dropped, and a fresh node takes its place (the dying node's destructor then
// finds no entry of its own and has nothing to remove).

struct UOpTable {
  // Each node made takes its shard's lock twice (made, destroyed); held only for a probe and at most one
  // allocation (uop/spin_lock.h).
  class Shard {
   public:
    SpinLock mu;

    // The live node equal to (op, dtype, src, arg) with hash h, else a new one (called under mu).
    UOpPtr find_or_add(uint64_t h, Op op, DType dtype, std::vector<UOpPtr>& src, Arg& arg) {
      if (slots_.empty()) slots_.resize(16);
      for (size_t i = home(h); slots_[i].node != nullptr; i = next(i)) {
        if (slots_[i].hash != h || !same(*slots_[i].node, op, dtype, src, arg)) continue;
        if (UOpPtr alive = slots_[i].node->weak_from_this().lock()) return alive;
        erase_at(i);  // dying: its destructor will find no entry
        break;
      }
      auto node = std::make_shared<const UOp>(UOp::Key(), op, dtype, std::move(src), std::move(arg), h);
      if (2 * (size_ + 1) > slots_.size()) grow();
      insert({h, node.get()});
      return node;
    }

    void remove(const UOp* dying) {
      if (slots_.empty()) return;
      for (size_t i = home(dying->hash()); slots_[i].node != nullptr; i = next(i))
        if (slots_[i].node == dying) return erase_at(i);
    }

    size_t size() const { return size_; }

   private:
    // The hash is kept beside the pointer so that probing never touches other nodes' memory.
    struct Slot {
      uint64_t hash = 0;
      const UOp* node = nullptr;
    };
    static bool same(const UOp& u, Op op, DType dtype, const std::vector<UOpPtr>& src, const Arg& arg) {
      return u.op == op && u.dtype == dtype && u.src == src && arg_equal(u.arg, arg);
    }
    // The low bits chose the shard; the slot comes from the bits above them.
    size_t home(uint64_t h) const { return static_cast<size_t>(h >> 6) & (slots_.size() - 1); }
    size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

    void insert(Slot s) {
      size_t i = home(s.hash);
      while (slots_[i].node != nullptr) i = next(i);
      slots_[i] = s;
      ++size_;
    }
    void grow() {
      std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(slots_.size() * 2));
      size_ = 0;
      for (const Slot& s : old)
        if (s.node != nullptr) insert(s);
    }
    // Backward-shift deletion: entries after the hole that may live there move up, so every entry
    // stays reachable from its home slot without tombstones.
    void erase_at(size_t hole) {
      --size_;
      for (size_t i = next(hole);; i = next(i)) {
        slots_[hole] = Slot{};
        for (;; i = next(i)) {
          if (slots_[i].node == nullptr) return;
          size_t want = home(slots_[i].hash);
          bool stays = hole <= i ? (hole < want && want <= i) : (hole < want || want <= i);  // want in (hole, i]
          if (!stays) break;
        }
        slots_[hole] = slots_[i];
        hole = i;
      }
    }

    std::vector<Slot> slots_;  // empty, or a power of two in size, at most half full
    size_t size_ = 0;
  };

  static constexpr size_t kShards = 64;
  std::array<Shard, kShards> shards;

  Shard& shard_for(uint64_t hash) { return shards[hash % kShards]; }

  UOpPtr intern(Op op, DType dtype, std::vector<UOpPtr> src, Arg arg) {
    uint64_t h = hash_fold(hash_dtype(dtype), static_cast<uint64_t>(op));
    if (!std::holds_alternative<std::monostate>(arg)) h = hash_fold(h, arg_hash(arg));
    for (const UOpPtr& s : src) h = hash_fold(h, s->hash());
    Shard& shard = shard_for(h);
    std::lock_guard<SpinLock> lock(shard.mu);
    return shard.find_or_add(h, op, dtype, src, arg);
  }

  void remove(const UOp* dying) {
    Shard& shard = shard_for(dying->hash());
    std::lock_guard<SpinLock> lock(shard.mu);
    shard.remove(dying);
  }

  size_t size() {
    size_t n = 0;
    for (Shard& shard : shards) {
      std::lock_guard<SpinLock> lock(shard.mu);
      n += shard.size();
    }
    return n;
  }

  // Leaked on purpose: nodes held by static objects may die after main returns.
  static UOpTable& table() {
    static UOpTable* instance = new UOpTable();
    return *instance;
  }
};

UOp::UOp(Key, Op op_, DType dtype_, std::vector<UOpPtr> src_, Arg arg_, uint64_t hash)
    : op(op_), dtype(dtype_), src(std::move(src_)), arg(std::move(arg_)), hash_(hash) {
  std::tie(vmin_, vmax_) = compute_range(op, dtype, src, arg);
}

UOp::~UOp() {
  UOpTable::table().remove(this);
  // Dropping the sources may free them in turn: a long chain would recurse once per node and overflow
  // the stack. So the sources move to a per-thread queue, which the outermost destructor drains in a
  // loop. (const does not apply to an object under destruction, so moving out of src is allowed.)
  thread_local std::vector<UOpPtr> pending;
  thread_local bool draining = false;
  auto& sources = const_cast<std::vector<UOpPtr>&>(src);
  for (UOpPtr& s : sources)
    if (s.use_count() == 1) pending.push_back(std::move(s));  // only the last owner defers; others just decrement
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    UOpPtr last = std::move(pending.back());
    pending.pop_back();
    last.reset();  // may run nested destructors, which only append to pending
  }
  draining = false;
}

UOpPtr UOp::make(Op op, DType dtype, std::vector<UOpPtr> src, Arg arg) {
  for (const UOpPtr& s : src) KILN_ASSERT(s != nullptr, "a source of ", op_name(op), " is null");
  return UOpTable::table().intern(op, dtype, std::move(src), std::move(arg));
}

size_t live_uop_count() { return UOpTable::table().size(); }

const ConstValue& UOp::const_value() const {
  KILN_ASSERT(op == Op::CONST, "const_value() of ", op_name(op));
  return arg_as<ConstValue>();
}
const VarArg& UOp::var() const {
  KILN_ASSERT(op == Op::DEFINE_VAR, "var() of ", op_name(op));
  return arg_as<VarArg>();
}
const UOpPtr& UOp::end() const {
  KILN_ASSERT(op == Op::RANGE && src.size() == 1, "end() of ", op_name(op));
  return src[0];
}
int64_t UOp::axis_id() const {
  KILN_ASSERT(op == Op::RANGE, "axis_id() of ", op_name(op));
  return arg_as<int64_t>();
}

UOpPtr UOp::with_src(std::vector<UOpPtr> new_src) const { return make(op, dtype, std::move(new_src), arg); }
UOpPtr UOp::with_dtype(DType new_dtype) const { return make(op, new_dtype, src, arg); }

// --- graph walks --------------------------------------------------------------------------------

namespace {

template <typename Known>
std::vector<UOpPtr> toposort_unknown(const UOpPtr& root, const Known& known) {
  // Iterative DFS: graphs of lowered kernels can be deep enough to overflow a recursive walk.
  std::vector<UOpPtr> order;
  if (known(root.get())) return order;
  std::unordered_map<const UOp*, bool> state;  // false: on the stack, true: emitted
  std::vector<std::pair<const UOpPtr*, size_t>> stack{{&root, 0}};
  state[root.get()] = false;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < (*node)->src.size()) {
      const UOpPtr& child = (*node)->src[next++];
      if (state.emplace(child.get(), false).second && !known(child.get())) stack.push_back({&child, 0});
      continue;
    }
    state[node->get()] = true;
    order.push_back(*node);
    stack.pop_back();
  }
  return order;
}

}  // namespace

std::vector<UOpPtr> toposort(const UOpPtr& root) {
  return toposort_unknown(root, [](const UOp*) { return false; });
}

std::vector<UOpPtr> toposort(const UOpPtr& root, const std::function<bool(const UOp*)>& known) {
  return toposort_unknown(root, known);
}

// --- constructors -------------------------------------------------------------------------------

UOpPtr const_of(DType dtype, ConstValue value) { return UOp::make(Op::CONST, dtype, {}, cast_const(value, dtype)); }
UOpPtr const_int(int64_t value, DType dtype) { return const_of(dtype, value); }
UOpPtr const_bool(bool value) { return const_of(dtypes::bool_, value); }

UOpPtr var(std::string name, int64_t min, int64_t max, DType dtype) {
  if (min > max) throw Error(cat("var(", name, "): empty range [", min, ", ", max, "]; min must be <= max"));
  KILN_ASSERT(is_int(dtype), "variables are integers, not ", dtype.name());
  return UOp::make(Op::DEFINE_VAR, dtype, {}, VarArg{std::move(name), min, max});
}

UOpPtr range(int64_t axis_id, const UOpPtr& end) { return UOp::make(Op::RANGE, end->dtype, {end}, axis_id); }

UOpPtr alu(Op op, std::vector<UOpPtr> src) {
  KILN_ASSERT(is_alu(op), op_name(op), " is not an ALU op");
  KILN_ASSERT(src.size() == (is_unary(op) ? 1u : is_binary(op) ? 2u : 3u), op_name(op), " with ", src.size(), " sources");
  DType dtype = is_comparison(op) ? dtypes::bool_.vec(src.back()->dtype.count) : src.back()->dtype;
  return UOp::make(op, dtype, std::move(src));
}

UOpPtr cast(const UOpPtr& x, DType dtype) { return x->dtype == dtype ? x : UOp::make(Op::CAST, dtype, {x}); }
UOpPtr where(const UOpPtr& cond, const UOpPtr& a, const UOpPtr& b) { return alu(Op::WHERE, {cond, a, b}); }

namespace {
UOpPtr binary(Op op, const UOpPtr& a, const UOpPtr& b) {
  if (a->dtype.scalar != b->dtype.scalar)
    throw Error(cat(op_name(op), ": operands have different dtypes (", a->dtype.name(), " and ", b->dtype.name(),
                    "); cast one of them first"));
  return alu(op, {a, b});
}
}  // namespace

UOpPtr operator+(const UOpPtr& a, const UOpPtr& b) { return binary(Op::ADD, a, b); }
UOpPtr operator-(const UOpPtr& a, const UOpPtr& b) { return binary(Op::SUB, a, b); }
UOpPtr operator*(const UOpPtr& a, const UOpPtr& b) { return binary(Op::MUL, a, b); }
UOpPtr operator/(const UOpPtr& a, const UOpPtr& b) { return binary(is_float(a->dtype) ? Op::FDIV : Op::IDIV, a, b); }
UOpPtr operator%(const UOpPtr& a, const UOpPtr& b) { return binary(Op::MOD, a, b); }
UOpPtr operator-(const UOpPtr& a) { return alu(Op::NEG, {a}); }
UOpPtr operator+(const UOpPtr& a, int64_t b) { return a + const_of(a->dtype, b); }
UOpPtr operator-(const UOpPtr& a, int64_t b) { return a - const_of(a->dtype, b); }
UOpPtr operator*(const UOpPtr& a, int64_t b) { return a * const_of(a->dtype, b); }
UOpPtr operator/(const UOpPtr& a, int64_t b) { return a / const_of(a->dtype, b); }
UOpPtr operator%(const UOpPtr& a, int64_t b) { return a % const_of(a->dtype, b); }
UOpPtr max(const UOpPtr& a, const UOpPtr& b) { return binary(Op::MAX, a, b); }
UOpPtr min(const UOpPtr& a, const UOpPtr& b) { return binary(Op::MIN, a, b); }
UOpPtr lt(const UOpPtr& a, const UOpPtr& b) { return binary(Op::CMPLT, a, b); }
UOpPtr lt(const UOpPtr& a, int64_t b) { return lt(a, const_of(a->dtype, b)); }
UOpPtr ne(const UOpPtr& a, const UOpPtr& b) { return binary(Op::CMPNE, a, b); }
UOpPtr eq(const UOpPtr& a, const UOpPtr& b) { return binary(Op::CMPEQ, a, b); }

}  // namespace kiln

#include "uop/uop.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "uop/hash.h"
#include "uop/range.h"

namespace kiln {

// --- args ---------------------------------------------------------------------------------------

namespace {
uint64_t hash_double(double d) { return hash_mix(std::bit_cast<uint64_t>(d)); }
uint64_t hash_vec(const std::vector<int64_t>& v) {
  uint64_t h = hash_mix(v.size());
  for (int64_t x : v) h = hash_combine(h, static_cast<uint64_t>(x));
  return h;
}
uint64_t hash_const(const ConstValue& c) {
  uint64_t payload = std::visit(
      [](auto x) -> uint64_t {
        if constexpr (std::is_same_v<decltype(x), double>) return hash_double(x);
        else return hash_mix(static_cast<uint64_t>(x));
      },
      c);
  return hash_combine(c.index(), payload);
}
bool const_equal(const ConstValue& a, const ConstValue& b) {
  if (a.index() != b.index()) return false;
  if (const double* x = std::get_if<double>(&a)) return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b));
  return a == b;
}
}  // namespace

bool arg_equal(const Arg& a, const Arg& b) {
  if (a.index() != b.index()) return false;
  if (const ConstValue* x = std::get_if<ConstValue>(&a)) return const_equal(*x, std::get<ConstValue>(b));
  return a == b;
}

uint64_t arg_hash(const Arg& a) {
  struct Hasher {
    uint64_t operator()(std::monostate) const { return 0; }
    uint64_t operator()(const ConstValue& c) const { return hash_const(c); }
    uint64_t operator()(int64_t x) const { return hash_mix(static_cast<uint64_t>(x)); }
    uint64_t operator()(Op op) const { return hash_mix(static_cast<uint64_t>(op)); }
    uint64_t operator()(const std::string& s) const { return hash_string(s); }
    uint64_t operator()(const std::vector<int64_t>& v) const { return hash_vec(v); }
    uint64_t operator()(const Pairs& v) const {
      uint64_t h = hash_mix(v.size());
      for (auto [x, y] : v) h = hash_combine(hash_combine(h, static_cast<uint64_t>(x)), static_cast<uint64_t>(y));
      return h;
    }
    uint64_t operator()(const VarArg& v) const {
      return hash_combine(hash_combine(hash_string(v.name), static_cast<uint64_t>(v.min)), static_cast<uint64_t>(v.max));
    }
    uint64_t operator()(const ReduceArg& r) const { return hash_combine(static_cast<uint64_t>(r.op), hash_vec(r.axes)); }
    uint64_t operator()(const BufferArg& b) const { return hash_combine(static_cast<uint64_t>(b.id), static_cast<uint64_t>(b.size)); }
  };
  return hash_combine(a.index(), std::visit(Hasher{}, a));
}

// --- the interning table ------------------------------------------------------------------------
//
// Sharded by hash so that threads building unrelated nodes rarely contend. Each entry keeps a raw
// pointer (to compare fields under the shard lock) and a weak_ptr (to take a strong reference only
// if the node is still alive). A node's deleter removes its entry under the same lock before freeing
// it, so a raw pointer found in the table always points to a live object, possibly one whose count
// already reached zero: then weak.lock() fails and a fresh node replaces the entry.

struct UOpTable {
  struct Entry {
    const UOp* raw;
    std::weak_ptr<const UOp> weak;
  };
  struct Shard {
    std::mutex mu;
    std::unordered_multimap<uint64_t, Entry> entries;
  };
  static constexpr size_t kShards = 64;
  std::array<Shard, kShards> shards;

  Shard& shard_for(uint64_t hash) { return shards[hash % kShards]; }

  static bool same(const UOp& u, Op op, DType dtype, const std::vector<UOpPtr>& src, const Arg& arg) {
    return u.op == op && u.dtype == dtype && u.src == src && arg_equal(u.arg, arg);
  }

  UOpPtr intern(Op op, DType dtype, std::vector<UOpPtr> src, Arg arg) {
    uint64_t h = hash_combine(hash_combine(static_cast<uint64_t>(op), hash_string(dtype.name())), arg_hash(arg));
    for (const UOpPtr& s : src) h = hash_combine(h, s->hash());
    Shard& shard = shard_for(h);
    std::lock_guard<std::mutex> lock(shard.mu);
    auto [first, last] = shard.entries.equal_range(h);
    for (auto it = first; it != last; ++it) {
      if (!same(*it->second.raw, op, dtype, src, arg)) continue;
      if (UOpPtr alive = it->second.weak.lock()) return alive;
      shard.entries.erase(it);  // dying: its deleter will find no entry and just free it
      break;
    }
    UOpPtr node(new UOp(op, dtype, std::move(src), std::move(arg), h), [](const UOp* dying) { table().release(dying); });
    shard.entries.emplace(h, Entry{node.get(), node});
    return node;
  }

  void release(const UOp* dying) {
    {
      Shard& shard = shard_for(dying->hash());
      std::lock_guard<std::mutex> lock(shard.mu);
      auto [first, last] = shard.entries.equal_range(dying->hash());
      for (auto it = first; it != last; ++it) {
        if (it->second.raw == dying) {
          shard.entries.erase(it);
          break;
        }
      }
    }
    // Freeing a node drops its sources, which may free them in turn: a long chain would recurse once
    // per node and overflow the stack. Nested releases on this thread are queued instead, and the
    // outermost release frees the queue in a loop. Deletion happens outside the shard lock.
    thread_local std::vector<const UOp*>* pending = nullptr;
    if (pending != nullptr) {
      pending->push_back(dying);
      return;
    }
    std::vector<const UOp*> queue{dying};
    pending = &queue;
    while (!queue.empty()) {
      const UOp* next = queue.back();
      queue.pop_back();
      delete next;
    }
    pending = nullptr;
  }

  size_t size() {
    size_t n = 0;
    for (Shard& shard : shards) {
      std::lock_guard<std::mutex> lock(shard.mu);
      n += shard.entries.size();
    }
    return n;
  }

  // Leaked on purpose: nodes held by static objects may die after main returns.
  static UOpTable& table() {
    static UOpTable* instance = new UOpTable();
    return *instance;
  }
};

UOp::UOp(Op op_, DType dtype_, std::vector<UOpPtr> src_, Arg arg_, uint64_t hash)
    : op(op_), dtype(dtype_), src(std::move(src_)), arg(std::move(arg_)), hash_(hash) {
  std::tie(vmin_, vmax_) = compute_range(op, dtype, src, arg);
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

std::vector<UOpPtr> toposort(const UOpPtr& root) {
  // Iterative DFS: graphs of lowered kernels can be deep enough to overflow a recursive walk.
  std::vector<UOpPtr> order;
  std::unordered_map<const UOp*, bool> state;  // false: on the stack, true: emitted
  std::vector<std::pair<const UOpPtr*, size_t>> stack{{&root, 0}};
  state[root.get()] = false;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < (*node)->src.size()) {
      const UOpPtr& child = (*node)->src[next++];
      if (state.emplace(child.get(), false).second) stack.push_back({&child, 0});
      continue;
    }
    state[node->get()] = true;
    order.push_back(*node);
    stack.pop_back();
  }
  return order;
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

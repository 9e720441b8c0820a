#include "lower/upcast.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "uop/rewrite.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

// The graph with r = outer*amount + i, simplified: the scalar program of lane i.
UOpPtr lane_of(const UOpPtr& root, const UOpPtr& r, const UOpPtr& outer, int64_t amount, int64_t i) {
  UOpPtr at = outer * const_int(amount, r->dtype) + const_int(i, r->dtype);
  return graph_rewrite(substitute(root, {{r.get(), at}}), pm_symbolic());
}

// Ops whose C spelling works on clang/gcc vector types lane by lane (the renderer's MAX/MIN and WHERE
// select with a mask). A bool vector is a mask of 32-bit lanes (what comparing two vectors of 32-bit
// values gives in C), so comparisons of 32-bit values, AND/OR of their results and WHERE between
// 32-bit values are vector ops too (a ReLU and its gradient inside a matmul's or a conv's tile).
// Casts, math calls and everything on other widths stay per lane.
bool vectorizable(const UOp& u) {
  DType t = u.dtype;
  if (t.is_ptr || t.count != 1 || t.scalar == ScalarType::Void || t.scalar == ScalarType::Float16 || t.scalar == ScalarType::BFloat16)
    return false;
  auto one_of = [&u](std::initializer_list<Op> ops) { return std::find(ops.begin(), ops.end(), u.op) != ops.end(); };
  if (is_bool(t)) {
    if (one_of({Op::CMPLT, Op::CMPNE, Op::CMPEQ})) return !is_bool(u.src[0]->dtype) && u.src[0]->dtype.itemsize() == 4;
    return one_of({Op::AND, Op::OR});
  }
  if (one_of({Op::ADD, Op::SUB, Op::MUL, Op::NEG, Op::MULACC, Op::MAX, Op::MIN, Op::REDUCE})) return true;
  if (one_of({Op::FDIV, Op::RECIP})) return is_float(t);
  if (one_of({Op::AND, Op::OR, Op::XOR, Op::SHL, Op::SHR})) return is_int(t);
  // Between 32-bit lanes (a memcpy of the vector in C, a bitcast in LLVM): the exponent tricks of
  // lower/transcendental.cpp.
  if (u.op == Op::BITCAST) return t.itemsize() == 4 && !is_bool(u.src[0]->dtype) && u.src[0]->dtype.itemsize() == 4;
  if (u.op == Op::WHERE) return t.itemsize() == 4;
  return false;  // every other op (casts, math calls, memory and control) stays per lane
}

// INDEX of a vector of `vec` at the element `index` points to.
UOpPtr vector_index(const UOpPtr& index, DType vec) { return UOp::make(Op::INDEX, vec.ptr(index->dtype.addr), index->src); }

// A vector load or store moves whole elements: anything but bool (C has no vectors of bool).
bool vector_memory(DType element) { return !is_bool(element) && element.count == 1 && !element.is_ptr; }

// What a tuple of lane nodes (one per lane) became.
struct Lanes {
  UOpPtr shared;             // every lane is this node
  UOpPtr vec;                // one node of a vector dtype: lane i is its element i
  std::vector<UOpPtr> each;  // one scalar node per lane
};

using Tuple = std::vector<UOpPtr>;

class Zipper {
 public:
  // pack_lanes: whether float math on lanes read one by one (a strided or transposed load) may be done
  // on a vector of them; see combine().
  Zipper(int64_t lanes, bool pack_lanes) : n_(static_cast<size_t>(lanes)), pack_lanes_(pack_lanes) {}

  // The stores that replace one store per lane: a vector store, or the lanes' own.
  std::vector<UOpPtr> stores(const Tuple& t) {
    KILN_ASSERT(t[0]->op == Op::STORE && parallel(t), "the lanes of an upcast store are stores of one shape");
    if (same(t)) return {t[0]};
    std::optional<UOpPtr> gate = t[0]->src.size() == 3 ? std::optional(column(t, 2)[0]) : std::nullopt;
    bool gate_shared = t[0]->src.size() == 2 || same(column(t, 2));
    UOpPtr address = vector_address(t);
    bool vector_store = address && gate_shared && vector_memory(t[0]->src[1]->dtype);
    packing_ = pack_lanes_ && vector_store;
    const Lanes& value = zip(column(t, 1));
    if (vector_store) {
      std::vector<UOpPtr> src{address, as_vector(value, t[0]->src[1]->dtype)};
      if (gate) src.push_back(*gate);
      return {UOp::make(Op::STORE, dtypes::void_, src, t[0]->arg)};
    }
    std::vector<UOpPtr> out;
    const Lanes* gates = gate ? &zip(column(t, 2)) : nullptr;
    for (size_t i = 0; i < n_; ++i) {
      std::vector<UOpPtr> src{t[i]->src[0], lane(value, i)};
      if (gates) src = {src[0], src[1], lane(*gates, i)};  // not push_back: GCC 12's -Warray-bounds misfires on it here
      out.push_back(t[i]->with_src(src));
    }
    return out;
  }

 private:
  static bool same(const Tuple& t) {
    for (const UOpPtr& u : t)
      if (u != t[0]) return false;
    return true;
  }
  // The lanes are one node shape (op, dtype, arg, arity), differing at most in their sources.
  static bool parallel(const Tuple& t) {
    for (const UOpPtr& u : t)
      if (u->op != t[0]->op || u->dtype != t[0]->dtype || u->src.size() != t[0]->src.size() || !arg_equal(u->arg, t[0]->arg))
        return false;
    return true;
  }
  static Tuple column(const Tuple& t, size_t j) {
    Tuple out;
    for (const UOpPtr& u : t) out.push_back(u->src[j]);
    return out;
  }
  static bool through_index(const UOp& u) { return (u.op == Op::LOAD || u.op == Op::STORE) && u.src[0]->op == Op::INDEX; }

  // The source tuples a tuple's result is built from (the address of a load or store is not one:
  // index math is compared, not zipped).
  std::vector<Tuple> children(const Tuple& t) const {
    if (same(t) || !parallel(t)) return {};
    std::vector<Tuple> out;
    for (size_t j = through_index(*t[0]) ? 1 : 0; j < t[0]->src.size(); ++j) out.push_back(column(t, j));
    return out;
  }

  static std::vector<const UOp*> key(const Tuple& t) {
    std::vector<const UOp*> k;
    for (const UOpPtr& u : t) k.push_back(u.get());
    return k;
  }

  // Bottom-up with an explicit stack: kernels can be deep.
  const Lanes& zip(const Tuple& root) {
    std::vector<std::pair<Tuple, bool>> stack{{root, false}};
    while (!stack.empty()) {
      Tuple t = stack.back().first;
      if (memo_.count(key(t))) {
        stack.pop_back();
        continue;
      }
      if (!stack.back().second) {
        stack.back().second = true;
        for (Tuple& c : children(t))
          if (!memo_.count(key(c))) stack.push_back({std::move(c), false});
        continue;
      }
      stack.pop_back();
      memo_[key(t)] = combine(t);
    }
    return memo_.at(key(root));
  }

  Lanes combine(const Tuple& t) {
    if (same(t)) return Lanes{t[0], nullptr, {}};
    if (!parallel(t)) return Lanes{nullptr, nullptr, t};  // the lanes' own scalar graphs
    const UOp& first = *t[0];
    std::vector<const Lanes*> src;
    size_t skip = through_index(first) ? 1 : 0;
    for (size_t j = skip; j < first.src.size(); ++j) src.push_back(&memo_.at(key(column(t, j))));
    if (first.op == Op::LOAD && skip == 1 && first.src.size() != 2) {
      bool gate_shared = first.src.size() < 3 || src[1]->shared;
      if (UOpPtr address = vector_address(t); address && gate_shared && vector_memory(first.dtype)) {
        std::vector<UOpPtr> vsrc{address};
        if (first.src.size() == 3) vsrc.insert(vsrc.end(), {as_vector(*src[0], first.dtype), src[1]->shared});
        return Lanes{nullptr, UOp::make(Op::LOAD, first.dtype.vec(static_cast<int>(n_)), vsrc, first.arg), {}};
      }
    }
    bool any_vector = false, any_lanes = false, ranges_shared = true;
    for (size_t j = 0; j < src.size(); ++j) {
      any_vector |= src[j]->vec != nullptr;
      any_lanes |= !src[j]->each.empty();
      ranges_shared &= first.op != Op::REDUCE || j == 0 || src[j]->shared != nullptr;
    }
    // Lanes read one by one are packed into a vector where float math uses them, when the kernel has
    // no reduction and its store is a vector (packing_): the store packs the lanes anyway, so packing
    // them earlier costs no more and turns every op after into one vector op (a transposed read under
    // a SiLU was 40 scalar ops per element). Inside a reduction a loaded lane meets one or two ops, and
    // packing it every iteration would cost more than it saves.
    bool pack = packing_ && any_lanes && is_float(first.dtype);
    if ((any_vector || pack) && ranges_shared && vectorizable(first)) {
      std::vector<UOpPtr> vsrc;
      for (size_t j = 0; j < src.size(); ++j)  // a REDUCE's ranges are shared: they stay as they are
        vsrc.push_back(first.op == Op::REDUCE && j > 0 ? src[j]->shared : as_vector(*src[j], first.src[j]->dtype));
      return Lanes{nullptr, UOp::make(first.op, first.dtype.vec(static_cast<int>(n_)), vsrc, first.arg), {}};
    }
    Lanes out;
    for (size_t i = 0; i < n_; ++i) {
      std::vector<UOpPtr> lsrc;
      if (skip == 1) lsrc.push_back(t[i]->src[0]);
      for (const Lanes* s : src) lsrc.push_back(lane(*s, i));
      out.each.push_back(t[i]->with_src(lsrc));
    }
    return out;
  }

  // INDEX(buf, base) of a vector of n elements when lane i reads buf[base + i], else null.
  UOpPtr vector_address(const Tuple& t) const {
    const UOpPtr& index0 = t[0]->src[0];
    if (index0->op != Op::INDEX || index0->src.size() != 2) return nullptr;
    for (size_t i = 0; i < n_; ++i) {
      const UOpPtr& index = t[i]->src[0];
      if (index->op != Op::INDEX || index->src.size() != 2 || index->src[0] != index0->src[0]) return nullptr;
      UOpPtr step = simplify(index->src[1] - index0->src[1]);
      if (step->op != Op::CONST || as_int64(step->const_value()) != static_cast<int64_t>(i)) return nullptr;
    }
    return vector_index(index0, index0->dtype.deref().vec(static_cast<int>(n_)));
  }

  UOpPtr as_vector(const Lanes& l, DType scalar) const {
    if (l.vec) return l.vec;
    DType vec = scalar.vec(static_cast<int>(n_));
    if (l.shared && l.shared->op == Op::CONST) return UOp::make(Op::CONST, vec, {}, l.shared->arg);
    if (l.shared) return UOp::make(Op::VECTORIZE, vec, Tuple(n_, l.shared));
    const UOpPtr& whole = l.each[0]->op == Op::GEP ? l.each[0]->src[0] : nullptr;
    bool taken_apart = whole && whole->dtype.count == n_;
    for (size_t i = 0; i < n_ && taken_apart; ++i)
      taken_apart = l.each[i]->op == Op::GEP && l.each[i]->src[0] == whole && l.each[i]->arg_as<int64_t>() == static_cast<int64_t>(i);
    return taken_apart ? whole : UOp::make(Op::VECTORIZE, vec, l.each);
  }

  UOpPtr lane(const Lanes& l, size_t i) const {
    if (l.shared) return l.shared;
    if (!l.vec) return l.each[i];
    if (l.vec->op == Op::VECTORIZE) return l.vec->src[i];
    if (l.vec->op == Op::CONST) return UOp::make(Op::CONST, l.vec->dtype.scalar_of(), {}, l.vec->arg);
    return UOp::make(Op::GEP, l.vec->dtype.scalar_of(), {l.vec}, static_cast<int64_t>(i));
  }

  size_t n_;
  bool pack_lanes_, packing_ = false;
  std::map<std::vector<const UOp*>, Lanes> memo_;
};

}  // namespace

UOpPtr upcast(const UOpPtr& sink, const UOpPtr& r, int64_t amount) {
  // One copy of the stores per lane. Interning shares what the copies have in common, so the copies
  // of a matmul share their loads of the other operand, and each output keeps its own accumulator.
  UOpPtr outer = range(r->axis_id(), const_int(r->end()->vmax() / amount, r->dtype));
  std::vector<UOpPtr> stores;
  for (int64_t i = 0; i < amount; ++i) {
    UOpPtr lane = lane_of(sink, r, outer, amount, i);
    stores.insert(stores.end(), lane->src.begin(), lane->src.end());
  }
  return sink->with_src(stores);
}

UOpPtr upcast_vector(const UOpPtr& sink, const UOpPtr& r, int64_t lanes) {
  KILN_ASSERT(lanes >= 2 && r->end()->vmax() % lanes == 0, "a vector upcast divides its loop: ", lanes, " lanes of ", str(r));
  UOpPtr outer = range(r->axis_id(), const_int(r->end()->vmax() / lanes, r->dtype));
  std::vector<UOpPtr> lane_sinks;
  for (int64_t i = 0; i < lanes; ++i) lane_sinks.push_back(lane_of(sink, r, outer, lanes, i));
  std::vector<UOpPtr> nodes = toposort(sink);  // analysis: whether the kernel reduces
  bool reduces = std::any_of(nodes.begin(), nodes.end(), [](const UOpPtr& u) { return u->op == Op::REDUCE; });
  Zipper zipper(lanes, !reduces);
  std::vector<UOpPtr> stores;
  for (size_t j = 0; j < sink->src.size(); ++j) {
    Tuple column;
    for (const UOpPtr& s : lane_sinks) column.push_back(s->src.at(j));
    for (UOpPtr& store : zipper.stores(column)) stores.push_back(std::move(store));
  }
  return sink->with_src(stores);
}

namespace {

// idx as base + offset, the offset a constant (base null when idx is a constant).
std::pair<UOpPtr, int64_t> split_offset(const UOpPtr& idx) {
  if (idx->op == Op::CONST) return {nullptr, as_int64(idx->const_value())};
  if (idx->op == Op::ADD && idx->src[1]->op == Op::CONST) return {idx->src[0], as_int64(idx->src[1]->const_value())};
  return {idx, 0};
}

// Accesses (loads or stores) of one buffer at one base, by constant offset.
using Groups = std::map<std::pair<const UOp*, const UOp*>, std::map<int64_t, UOpPtr>>;

void add_access(Groups& groups, const UOpPtr& access) {
  const UOpPtr& index = access->src[0];
  auto [base, offset] = split_offset(index->src[1]);
  groups[{index->src[0].get(), base.get()}].emplace(offset, access);
}

// A plain access of one element of global memory at INDEX(buffer, i): what combine_accesses may merge.
bool plain_access(const UOp& u, size_t arity, DType element) {
  return u.src.size() == arity && u.src[0]->op == Op::INDEX && u.src[0]->src.size() == 2 &&
         u.src[0]->src[0]->op == Op::DEFINE_GLOBAL && element.count == 1 && vector_memory(element);
}

// Each run of consecutive offsets in a group, cut into vectors of a power of two lanes (4 or more, at
// most vector_bytes): fn(accesses of one vector, in lane order).
template <class Fn>
void for_each_vector(const Groups& groups, int64_t vector_bytes, DType (*element)(const UOp&), Fn fn) {
  for (const auto& [key, accesses] : groups) {
    int64_t most = std::min<int64_t>(16, vector_bytes / static_cast<int64_t>(element(*accesses.begin()->second).itemsize()));
    for (auto it = accesses.begin(); it != accesses.end();) {
      std::vector<UOpPtr> run{it->second};
      for (auto next = std::next(it); next != accesses.end() && next->first == it->first + static_cast<int64_t>(run.size()) &&
                                      static_cast<int64_t>(run.size()) < most;
           ++next)
        run.push_back(next->second);
      size_t width = 1;
      while (width * 2 <= run.size()) width *= 2;
      if (width < 4) {
        ++it;
        continue;
      }
      run.resize(width);
      fn(run);
      std::advance(it, static_cast<std::ptrdiff_t>(width));
    }
  }
}

DType loaded(const UOp& u) { return u.dtype; }
DType stored(const UOp& u) { return u.src[1]->dtype; }

// ALU(GEP(a, i), GEP(b, i), ...) -> GEP(ALU(a, b, ...), i): an op on lane i of vectors (constants
// broadcast) is lane i of the op on the vectors. Every lane's copy interns to the same vector op, so a
// transpose tile's scalar work per loaded value becomes one op per loaded vector. Only ops that cannot
// trap on the lanes no one reads (float math, integer add/mul/min/max).
const PatternMatcher& pm_gep_through_alu() {
  static const PatternMatcher pm{{UPat::ops({Op::ADD, Op::SUB, Op::MUL, Op::NEG, Op::MULACC, Op::MAX, Op::MIN, Op::FDIV}),
                                  [](const Match& m) -> UOpPtr {
    const UOpPtr& u = m.root;
    if (u->dtype.count != 1 || !vectorizable(*u) || (u->op == Op::FDIV && !is_float(u->dtype))) return nullptr;
    const UOp* vec = nullptr;
    int64_t lane = -1;
    for (const UOpPtr& s : u->src) {
      if (s->op == Op::CONST) continue;
      if (s->op != Op::GEP || s->src[0]->dtype.count < 2 || (lane >= 0 && (s->arg_as<int64_t>() != lane || s->src[0]->dtype.count != vec->dtype.count)))
        return nullptr;
      vec = s->src[0].get();
      lane = s->arg_as<int64_t>();
    }
    if (!vec) return nullptr;
    int n = vec->dtype.count;
    std::vector<UOpPtr> src;
    for (const UOpPtr& s : u->src)
      src.push_back(s->op == Op::CONST ? UOp::make(Op::CONST, s->dtype.vec(n), {}, s->arg) : s->src[0]);
    return UOp::make(Op::GEP, u->dtype, {UOp::make(u->op, u->dtype.vec(n), src, u->arg)}, lane);
  }}};
  return pm;
}

}  // namespace

UOpPtr combine_accesses(const UOpPtr& sink, int64_t vector_bytes) {
  std::vector<UOpPtr> order = toposort(sink);  // analysis: finds runs; the substitute below rewrites
  // A load whose value is broadcast into a vector stays scalar: x86 broadcasts straight from memory, so a
  // vector load would only add a shuffle per use (a register tile's values meeting a vector of the other
  // operand).
  std::unordered_set<const UOp*> broadcast;
  for (const UOpPtr& u : order)
    if (u->op == Op::VECTORIZE && std::count(u->src.begin(), u->src.end(), u->src[0]) == static_cast<std::ptrdiff_t>(u->src.size()))
      broadcast.insert(u->src[0].get());
  Groups loads, stores;
  for (const UOpPtr& u : order)
    if (u->op == Op::LOAD && plain_access(*u, 1, u->dtype) && !broadcast.count(u.get())) add_access(loads, u);
  for (const UOpPtr& u : sink->src)
    if (u->op == Op::STORE && plain_access(*u, 2, u->src[1]->dtype)) add_access(stores, u);

  std::unordered_map<const UOp*, UOpPtr> replace;
  for_each_vector(loads, vector_bytes, loaded, [&](const std::vector<UOpPtr>& run) {
    DType vec = run[0]->dtype.vec(static_cast<int>(run.size()));
    UOpPtr load = UOp::make(Op::LOAD, vec, {vector_index(run[0]->src[0], vec)}, run[0]->arg);
    for (size_t i = 0; i < run.size(); ++i) replace[run[i].get()] = UOp::make(Op::GEP, run[0]->dtype, {load}, static_cast<int64_t>(i));
  });
  // Stores: the lanes' values put together (a transpose in registers: a tile whose vector runs along an
  // axis the output is strided in, its rows along the one it is contiguous in), one vector store.
  std::unordered_map<const UOp*, UOpPtr> store_of;  // the first store of each run -> the vector store
  std::unordered_set<const UOp*> merged;
  for_each_vector(stores, vector_bytes, stored, [&](const std::vector<UOpPtr>& run) {
    DType vec = run[0]->src[1]->dtype.vec(static_cast<int>(run.size()));
    std::vector<UOpPtr> values;
    for (const UOpPtr& st : run) {
      values.push_back(st->src[1]);
      merged.insert(st.get());
    }
    store_of[run[0].get()] = UOp::make(Op::STORE, dtypes::void_, {vector_index(run[0]->src[0], vec), UOp::make(Op::VECTORIZE, vec, values)}, run[0]->arg);
  });
  UOpPtr out = sink;
  if (!store_of.empty()) {
    std::vector<UOpPtr> src;
    for (const UOpPtr& st : sink->src) {
      if (auto v = store_of.find(st.get()); v != store_of.end()) src.push_back(v->second);
      else if (!merged.count(st.get())) src.push_back(st);
    }
    out = sink->with_src(src);
  }
  return replace.empty() ? out : graph_rewrite(substitute(out, replace), pm_gep_through_alu());
}

}  // namespace kiln

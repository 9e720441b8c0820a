#include "schedule/kernelize.h"

#include <algorithm>
#include <unordered_map>

#include "uop/alu.h"
#include "uop/rewrite.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

const DType kIndex = dtypes::int32;  // TODO(kiln): int64 indices for buffers over 2^31 elements

// Index math is int32 for now: a tensor too big for it is refused, never silently wrapped.
UOpPtr idx_const(int64_t v) {
  if (v > INT32_MAX || v < INT32_MIN)
    throw Error(cat("kernel index ", v, " does not fit in int32: tensors with 2^31 or more elements (or views reaching that far) "
                    "are not supported yet; split the tensor"));
  return const_int(v, kIndex);
}

UOpPtr all_of(const UOpPtr& a, const UOpPtr& b) {
  if (a->op == Op::CONST && std::get<bool>(a->const_value())) return b;
  if (b->op == Op::CONST && std::get<bool>(b->const_value())) return a;
  return alu(Op::AND, {a, b});
}

bool is_true(const UOpPtr& u) { return u->op == Op::CONST && std::get<bool>(u->const_value()); }

// 0 <= e < n, as -1 < e and e < n (the clauses bounds_under reads back).
UOpPtr within(const UOpPtr& e, int64_t n) { return all_of(lt(idx_const(-1), e), lt(e, idx_const(n))); }

// The bounds that the gate `valid` (a conjunction of `c < e` and `e < c` clauses, as PAD makes them)
// puts on index expressions, where they are tighter than the expressions' own ranges.
std::map<const UOp*, std::pair<int64_t, int64_t>> bounds_under(const UOpPtr& valid) {
  std::map<const UOp*, std::pair<int64_t, int64_t>> bounds;
  auto tighten = [&](const UOpPtr& e, int64_t lo, int64_t hi) {
    auto [it, fresh] = bounds.try_emplace(e.get(), e->vmin(), e->vmax());
    it->second = {std::max(it->second.first, lo), std::min(it->second.second, hi)};
  };
  std::vector<UOpPtr> todo{valid};
  while (!todo.empty()) {
    UOpPtr c = todo.back();
    todo.pop_back();
    if (c->op == Op::AND) todo.insert(todo.end(), c->src.begin(), c->src.end());
    if (c->op != Op::CMPLT || !is_int(c->src[0]->dtype)) continue;
    const UOpPtr &a = c->src[0], &b = c->src[1];
    if (a->op == Op::CONST && b->op != Op::CONST) tighten(b, as_int64(a->const_value()) + 1, INT64_MAX);
    if (b->op == Op::CONST && a->op != Op::CONST) tighten(a, INT64_MIN, as_int64(b->const_value()) - 1);
  }
  std::erase_if(bounds, [](const auto& b) {
    const auto& [e, range] = b;
    return range.first > range.second || (range.first <= e->vmin() && range.second >= e->vmax());
  });
  return bounds;
}

}  // namespace

UOpPtr linear_index(const Shape& shape, const std::vector<UOpPtr>& idx) {
  idx_const(numel(shape));  // the largest address must fit the index type
  Shape strides = contiguous_strides(shape);
  UOpPtr out = idx_const(0);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) out = out + idx[i] * strides[i];
  return simplify(out);
}

UOpPtr linear_index(const Shape& shape, const std::vector<UOpPtr>& idx, const Layout& layout) {
  if (layout.empty()) return linear_index(shape, idx);
  Shape s;
  std::vector<UOpPtr> i;
  for (int64_t axis : layout) {
    s.push_back(shape[static_cast<size_t>(axis)]);
    i.push_back(idx[static_cast<size_t>(axis)]);
  }
  return linear_index(s, i);
}

KernelBuilder::KernelBuilder(ShapeCache& shapes, std::function<UOpPtr(const UOpPtr&)> stored_buffer,
                             std::function<const Layout*(const UOpPtr&)> layout_of)
    : shapes_(shapes), stored_buffer_(std::move(stored_buffer)), layout_of_(std::move(layout_of)) {}

UOpPtr KernelBuilder::global(const UOpPtr& buffer) {
  size_t slot = 0;
  while (slot < bufs_.size() && bufs_[slot] != buffer) ++slot;
  if (slot == bufs_.size()) bufs_.push_back(buffer);
  return UOp::make(Op::DEFINE_GLOBAL, buffer->dtype.ptr(), {}, static_cast<int64_t>(slot));
}

UOpPtr KernelBuilder::build(const UOpPtr& root, const UOpPtr& out_buffer, const Layout& layout) {
  UOpPtr out = global(out_buffer);
  const Shape& shape = shapes_(root);
  // One loop per axis, numbered outer first in the order the value is stored in.
  std::vector<UOpPtr> idx(shape.size());
  for (size_t j = 0; j < shape.size(); ++j) {
    size_t axis = layout.empty() ? j : static_cast<size_t>(layout[j]);
    idx[axis] = shape[axis] == 1 ? idx_const(0) : range(next_axis_++, idx_const(shape[axis]));
  }
  out_idx_ = idx;
  UOpPtr value = index(root, idx, const_bool(true));
  UOpPtr store = UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, out->dtype, {out, linear_index(shape, idx, layout)}), value});
  return UOp::make(Op::SINK, dtypes::void_, {store});
}

UOpPtr KernelBuilder::load(const UOpPtr& buffer, const Shape& shape, const std::vector<UOpPtr>& idx, const UOpPtr& valid) {
  UOpPtr ptr = global(buffer);
  const Layout* layout = layout_of_ ? layout_of_(buffer) : nullptr;
  UOpPtr address = UOp::make(Op::INDEX, ptr->dtype, {ptr, linear_index(shape, idx, layout ? *layout : Layout{})});
  if (is_true(valid)) return UOp::make(Op::LOAD, buffer->dtype, {address});
  // A gated load reads 0 where the index is invalid (padding), without touching memory there.
  return UOp::make(Op::LOAD, buffer->dtype, {address, const_of(buffer->dtype, int64_t{0}), valid});
}

// Whether indexing u only computes addresses: down to the stored values it reads, u has no padding or
// gather (whose gates a constant index lets the simplifier fold) and no iota (which reads the index).
bool KernelBuilder::only_addresses(const UOpPtr& u) {
  if (stored_buffer_(u)) return true;
  if (auto it = only_addresses_.find(u.get()); it != only_addresses_.end()) return it->second;
  bool ok = u->op != Op::PAD && u->op != Op::GATHER && u->op != Op::IOTA;
  for (size_t i = 0; ok && i < u->src.size(); ++i) ok = only_addresses(u->src[i]);
  only_addresses_[u.get()] = ok;
  return ok;
}

UOpPtr KernelBuilder::index(const UOpPtr& u, const std::vector<UOpPtr>& idx, const UOpPtr& valid) {
  std::vector<const UOp*> key{u.get(), valid.get()};
  for (const UOpPtr& i : idx) key.push_back(i.get());
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  UOpPtr out = index_uncached(u, idx, valid);
  memo_[key] = out;
  // The key holds raw pointers: keep its nodes alive so no address is reused for another node.
  pinned_.push_back(valid);
  pinned_.insert(pinned_.end(), idx.begin(), idx.end());
  return out;
}

// Not a rule table: one tensor node becomes a different expression under each index it is read at (idx
// and valid come from the reader), and graph_rewrite keeps one result per node.
UOpPtr KernelBuilder::index_uncached(const UOpPtr& u, const std::vector<UOpPtr>& idx, const UOpPtr& valid) {
  // A tensor with no elements has no value to read: a kernel reaches it only through padding that is never
  // inside or a reduction over an empty axis, so any placeholder serves, and no buffer is touched.
  if (numel(shapes_(u)) == 0) return const_of(u->dtype, int64_t{0});
  if (UOpPtr buffer = stored_buffer_(u)) return load(buffer, shapes_(u), idx, valid);
  const Shape& shape = shapes_(u);
  auto src_shape = [&](size_t i) -> const Shape& { return shapes_(u->src[i]); };
  switch (u->op) {
    case Op::CONST: return const_of(u->dtype, u->const_value());
    case Op::IOTA: return cast(idx[0], u->dtype);
    case Op::GATHER: {
      // x read along `axis` at the position the index holds there: the index's value (a load) becomes
      // the index math of x's axis, gated to the axis's length (outside it the element reads 0).
      size_t axis = static_cast<size_t>(u->arg_as<int64_t>());
      UOpPtr at = index(u->src[1], idx, valid);
      if (at->dtype != kIndex) at = cast(at, kIndex);
      std::vector<UOpPtr> x_idx = idx;
      x_idx[axis] = at;
      UOpPtr inside = within(at, src_shape(0)[axis]);
      UOpPtr value = index(u->src[0], x_idx, simplify(all_of(valid, inside)));
      return where(inside, value, const_of(u->dtype, int64_t{0}));
    }
    case Op::DETACH:
    case Op::CONTIGUOUS: return index(u->src[0], idx, valid);
    case Op::CAST:
    case Op::BITCAST: return UOp::make(u->op, u->dtype, {index(u->src[0], idx, valid)});
    case Op::RESHAPE: {
      const Shape& old = src_shape(0);
      std::vector<UOpPtr> old_idx;
      // Fast path: only size-1 axes inserted or removed.
      std::vector<UOpPtr> kept_new, kept_old_dims;
      Shape new_no1, old_no1;
      for (size_t i = 0; i < shape.size(); ++i)
        if (shape[i] != 1) new_no1.push_back(shape[i]), kept_new.push_back(idx[i]);
      for (int64_t d : old)
        if (d != 1) old_no1.push_back(d);
      if (new_no1 == old_no1) {
        size_t k = 0;
        for (int64_t d : old) old_idx.push_back(d == 1 ? idx_const(0) : kept_new[k++]);
      } else {
        // The old indices are the new position's flat offset split by div/mod. A PAD above gates
        // everything read here, so an index it bounds (cat's c - 64, for 64 <= c < 96) may be taken
        // as a variable with those bounds while simplifying: (n*32768 + (c-64)*1024 + r) // 1024 then
        // folds to n*32 + c - 64, where without the gate c - 64 < 0 keeps the division (and a div and
        // mod per element) in the kernel. Outside the gate the index differs, and nothing reads it.
        std::unordered_map<const UOp*, UOpPtr> narrow, widen;
        for (const auto& [e, range] : bounds_under(valid)) {
          UOpPtr v = var(cat("gated", narrow.size()), range.first, range.second, e->dtype);
          narrow[e] = v;
          widen[v.get()] = UOpPtr(e->shared_from_this());
        }
        // The bounds can also steer the simplifier to a form that is worse once the variables are
        // widened back (a transposed conv's stride gates), so the gated forms are kept only when they
        // have fewer div and mod in all.
        auto split = [&](const std::vector<UOpPtr>& at) {
          UOpPtr flat = linear_index(shape, at);
          Shape strides = contiguous_strides(old);
          std::vector<UOpPtr> out;
          for (size_t j = 0; j < old.size(); ++j)
            out.push_back(old[j] == 1 ? idx_const(0) : simplify(j == 0 ? flat / strides[j] : (flat / strides[j]) % old[j]));
          return out;
        };
        auto divisions = [](const std::vector<UOpPtr>& es) {
          std::vector<UOpPtr> nodes = toposort(UOp::make(Op::SINK, dtypes::void_, es));  // analysis: counts div and mod
          return std::count_if(nodes.begin(), nodes.end(), [](const UOpPtr& u) { return u->op == Op::IDIV || u->op == Op::MOD; });
        };
        old_idx = split(idx);
        if (!narrow.empty()) {
          std::vector<UOpPtr> narrowed = idx;
          for (UOpPtr& i : narrowed) i = substitute(i, narrow);
          std::vector<UOpPtr> gated = split(narrowed);
          for (UOpPtr& g : gated) g = simplify(substitute(g, widen));
          if (divisions(gated) < divisions(old_idx)) old_idx = gated;
        }
      }
      return index(u->src[0], old_idx, valid);
    }
    case Op::PERMUTE: {
      const auto& order = std::get<std::vector<int64_t>>(u->arg);
      std::vector<UOpPtr> old_idx(idx.size());
      for (size_t i = 0; i < order.size(); ++i) old_idx[static_cast<size_t>(order[i])] = idx[i];
      return index(u->src[0], old_idx, valid);
    }
    case Op::EXPAND: {
      const Shape& old = src_shape(0);
      std::vector<UOpPtr> old_idx;
      for (size_t i = 0; i < old.size(); ++i) old_idx.push_back(old[i] == 1 ? idx_const(0) : idx[i]);
      return index(u->src[0], old_idx, valid);
    }
    case Op::SHRINK: {
      const Pairs& p = std::get<Pairs>(u->arg);
      // One index of an axis (x[t], the rows of one step) is a launch variable: a loop over t is one
      // kernel, where constants made one per t (a GRU's first step compiled 138 kernels that differed
      // only there). Only where the variable only moves addresses (only_addresses: a slice of padded
      // values keeps its constant, which lets the simplifier fold their gates), and only for a single
      // index of the outermost axis: a wider window's start (a conv's or pool's) is a loop bound the
      // heuristics reason about (LeNet's convs lost their vector axis to it and ran 3-9x slower), and
      // the phases of a transposed conv's weights (one index of an inner axis) changed what the
      // scheduler fused (a DCGAN generator's weight gradient ran 8x slower).
      std::vector<UOpPtr> old_idx;
      for (size_t i = 0; i < idx.size(); ++i) old_idx.push_back(simplify(idx[i] + p[i].first));
      int64_t last = idx.empty() ? 0 : src_shape(0)[0] - 1;
      if (last > 0 && p[0].second - p[0].first == 1 && only_addresses(u->src[0])) {
        std::string name = cat("s", var_vals_.size());
        old_idx[0] = simplify(idx[0] + var(name, 0, last, idx[0]->dtype));
        var_vals_.push_back({std::move(name), p[0].first});
      }
      return index(u->src[0], old_idx, valid);
    }
    case Op::FLIP: {
      const auto& flags = std::get<std::vector<int64_t>>(u->arg);
      std::vector<UOpPtr> old_idx;
      for (size_t i = 0; i < idx.size(); ++i)
        old_idx.push_back(flags[i] ? simplify(idx_const(shape[i] - 1) - idx[i]) : idx[i]);
      return index(u->src[0], old_idx, valid);
    }
    case Op::PAD: {
      const Pairs& p = std::get<Pairs>(u->arg);
      const Shape& old = src_shape(0);
      std::vector<UOpPtr> old_idx;
      UOpPtr inside = const_bool(true);
      for (size_t i = 0; i < idx.size(); ++i) {
        if (p[i].first == 0 && p[i].second == 0) {
          old_idx.push_back(idx[i]);
          continue;
        }
        UOpPtr shifted = simplify(idx[i] - p[i].first);
        old_idx.push_back(shifted);
        inside = all_of(inside, simplify(within(shifted, old[i])));
      }
      inside = simplify(inside);
      UOpPtr value = index(u->src[0], old_idx, simplify(all_of(valid, inside)));
      if (is_true(inside)) return value;
      return where(inside, value, const_of(u->dtype, int64_t{0}));
    }
    case Op::REDUCE_AXIS: {
      const ReduceArg& r = std::get<ReduceArg>(u->arg);
      const Shape& in = src_shape(0);
      for (int64_t axis : r.axes)  // over no elements: the identity (a sum is 0, a product 1)
        if (in[static_cast<size_t>(axis)] == 0) return const_of(u->dtype, reduce_identity(r.op, u->dtype));
      std::vector<UOpPtr> in_idx = idx, ranges;
      for (int64_t axis : r.axes) {
        size_t a = static_cast<size_t>(axis);
        if (in[a] == 1) continue;
        in_idx[a] = range(next_axis_++, idx_const(in[a]));
        ranges.push_back(in_idx[a]);
      }
      UOpPtr value = index(u->src[0], in_idx, valid);
      if (ranges.empty()) return value;
      std::vector<UOpPtr> src{value};
      src.insert(src.end(), ranges.begin(), ranges.end());
      return UOp::make(Op::REDUCE, u->dtype, src, r.op);
    }
    case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
    case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD: case Op::MAX:
    case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND: case Op::OR:
    case Op::XOR: case Op::SHL: case Op::SHR: case Op::WHERE: case Op::MULACC: {
      std::vector<UOpPtr> src;
      for (const UOpPtr& s : u->src) src.push_back(index(s, idx, valid));
      return UOp::make(u->op, u->dtype, src);
    }
    case Op::BUFFER: case Op::COPY: case Op::ASSIGN: case Op::SCATTER_ADD:
      throw_internal("buffers, copies, assigns and scatter-adds are stored, never fused", std::string(op_name(u->op)), __FILE__, __LINE__);
    case Op::SINK: case Op::NOOP: case Op::DEFINE_VAR: case Op::DEVICE: case Op::DEFINE_GLOBAL:
    case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD: case Op::STORE: case Op::RANGE:
    case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER: case Op::IF: case Op::ENDIF:
    case Op::VECTORIZE: case Op::GEP:
      break;
  }
  throw_internal("tensor graphs hold only tensor ops", cat(op_name(u->op), " in a tensor graph"), __FILE__, __LINE__);
}

}  // namespace kiln

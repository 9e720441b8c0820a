#include "lower/opts.h"

#include <algorithm>
#include <set>
#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include "lower/linearize.h"
#include "lower/opt_kernel.h"
#include "lower/upcast.h"
#include "lower/transcendental.h"
#include "uop/config.h"
#include "uop/error.h"
#include "uop/rewrite.h"
#include "uop/symbolic.h"

namespace kiln {

const char* opt_op_name(OptOp op) {
  switch (op) {
    case OptOp::UPCAST: return "UPCAST";
    case OptOp::UNROLL: return "UNROLL";
    case OptOp::LOCAL: return "LOCAL";
    case OptOp::GROUP: return "GROUP";
    case OptOp::GROUPTOP: return "GROUPTOP";
    case OptOp::THREAD: return "THREAD";
    case OptOp::PADTO: return "PADTO";
    case OptOp::SWAP: return "SWAP";
  }
  return "?";
}

std::string to_string(const Opt& opt) { return cat(opt_op_name(opt.op), "(", opt.axis, ",", opt.amount, ")"); }

std::string to_string(std::span<const Opt> opts) {
  std::string out;
  for (const Opt& o : opts) out += (out.empty() ? "" : " ") + to_string(o);
  return out;
}

std::optional<Opt> parse_opt(std::string_view text) {
  size_t open = text.find('('), comma = text.find(','), close = text.find(')');
  if (open == std::string_view::npos || comma == std::string_view::npos || close != text.size() - 1 || comma < open)
    return std::nullopt;
  std::string_view name = text.substr(0, open);
  std::optional<OptOp> op;
  for (OptOp o : {OptOp::UPCAST, OptOp::UNROLL, OptOp::LOCAL, OptOp::GROUP, OptOp::GROUPTOP, OptOp::THREAD, OptOp::PADTO,
                  OptOp::SWAP})
    if (name == opt_op_name(o)) op = o;
  if (!op) return std::nullopt;
  try {
    size_t used = 0;
    std::string axis(text.substr(open + 1, comma - open - 1)), amount(text.substr(comma + 1, close - comma - 1));
    int a = std::stoi(axis, &used);
    if (used != axis.size()) return std::nullopt;
    int64_t n = std::stoll(amount, &used);
    if (used != amount.size()) return std::nullopt;
    return Opt{*op, a, n};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace kiln

namespace kiln::detail {

bool is_gpu(const DeviceSpec& spec) { return spec.max_local > 0; }

int64_t register_lanes(DType element, const DeviceSpec& spec) {
  if (spec.vector_bytes <= 0) return 0;
  return std::clamp<int64_t>(spec.vector_bytes / static_cast<int64_t>(element.itemsize()), 2, 16);
}

bool loads_contiguously(const UOpPtr& sink, const UOpPtr& r, bool strict) {
  bool moves = false;
  for (const UOpPtr& u : toposort(sink)) {  // analysis: how the loads move with r, rewrites nothing
    if (u->op != Op::LOAD || u->src[0]->op != Op::INDEX) continue;
    std::optional<int64_t> stride = index_stride(u->src[0]->src[1], r);
    bool vector = stride == 1 && u->src[0]->src.size() == 2 && !(u->src.size() == 3 && depends_on(u->src[2], r));
    if (strict && stride != 0 && !vector) return false;
    moves |= vector;
  }
  return moves;
}

bool has_reduce(const UOpPtr& sink) {
  for (const UOpPtr& u : toposort(sink))  // analysis
    if (u->op == Op::REDUCE) return true;
  return false;
}

bool vector_eligible(const UOpPtr& sink, const UOpPtr& r, int64_t lanes, const DeviceSpec& spec) {
  if (sink->src.empty()) return false;
  DType element = sink->src[0]->src[1]->dtype;
  int64_t most = register_lanes(element, spec);
  if (most == 0 || lanes < 2 || lanes > most || (lanes & (lanes - 1)) != 0) return false;
  bool reduces = has_reduce(sink);
  for (const UOpPtr& store : sink->src)
    if (store->op != Op::STORE || (!reduces && !is_contiguous(store->src[0]->src[1], r) && !loads_contiguously(sink, r))) return false;
  return !reduces || loads_contiguously(sink, r, /*strict=*/false);
}

}  // namespace kiln::detail

namespace kiln {

namespace {

using namespace detail;

// UNROLL: the reduce loop r runs amount times fewer iterations, each folding `amount` values.
struct UnrollContext : RewriteContext {
  UOpPtr r, outer;
  int64_t amount;
};

const PatternMatcher& pm_unroll_reduce() {
  static const PatternMatcher pm{
      // REDUCE(x, r) -> REDUCE(x[r:=outer*amount] op ... op x[r:=outer*amount+amount-1], outer)
      {UPat::op(Op::REDUCE).named("red"), [](const Match& m) -> UOpPtr {
         const auto& c = m.context<UnrollContext>();
         const UOpPtr& u = m["red"];
         if (std::find(u->src.begin() + 1, u->src.end(), c.r) == u->src.end()) return nullptr;
         UOpPtr folded;
         for (int64_t i = 0; i < c.amount; ++i) {
           UOpPtr at = c.outer * const_int(c.amount, c.r->dtype) + const_int(i, c.r->dtype);
           UOpPtr lane = graph_rewrite(substitute(u->src[0], {{c.r.get(), at}}), pm_symbolic());
           folded = folded ? UOp::make(u->arg_as<Op>(), u->dtype, {folded, lane}) : lane;
         }
         std::vector<UOpPtr> src{folded};
         for (size_t j = 1; j < u->src.size(); ++j) src.push_back(u->src[j] == c.r ? c.outer : u->src[j]);
         return UOp::make(Op::REDUCE, u->dtype, src, u->arg);
       }},
  };
  return pm;
}

UOpPtr unroll_reduce(const UOpPtr& sink, const UOpPtr& r, int64_t amount) {
  UnrollContext ctx;
  ctx.r = r;
  ctx.outer = range(r->axis_id(), const_int(r->end()->vmax() / amount, r->dtype));
  ctx.amount = amount;
  return graph_rewrite(sink, pm_unroll_reduce(), &ctx, "unroll reduce");
}

// The gate g added to an optional existing gate.
UOpPtr and_gate(const UOpPtr& existing, const UOpPtr& g) { return existing ? UOp::make(Op::AND, dtypes::bool_, {existing, g}) : g; }

// Whether gate is g, or ends with it (and_gate(existing, g)): the rules below add g once.
bool gated_by(const UOpPtr& gate, const UOpPtr& g) { return gate == g || (gate->op == Op::AND && gate->src[1] == g); }

// A load's or store's gate with g added, unless g is there already.
std::optional<UOpPtr> add_gate(const UOp& access, size_t gate_at, const UOpPtr& g) {
  UOpPtr existing = access.src.size() > gate_at ? access.src[gate_at] : nullptr;
  if (existing && gated_by(existing, g)) return std::nullopt;
  return and_gate(existing, g);
}

// PADTO: r (size n) runs to `padded`; loads and stores that move with it are masked to r < n, and a
// reduction over it adds its identity for the extra iterations.
struct PadContext : RewriteContext {
  UOpPtr out, valid;
};

const PatternMatcher& pm_pad_range() {
  static const PatternMatcher pm{
      // REDUCE(x, out) -> REDUCE(where(out < n, x, identity), out)
      {UPat::op(Op::REDUCE).named("red"), [](const Match& m) -> UOpPtr {
         const auto& c = m.context<PadContext>();
         const UOpPtr& u = m["red"];
         if (std::find(u->src.begin() + 1, u->src.end(), c.out) == u->src.end()) return nullptr;
         if (u->src[0]->op == Op::WHERE && u->src[0]->src[0] == c.valid) return nullptr;
         std::vector<UOpPtr> src = u->src;
         src[0] = where(c.valid, u->src[0], const_of(u->dtype, reduce_identity(u->arg_as<Op>(), u->dtype)));
         return UOp::make(Op::REDUCE, u->dtype, src, u->arg);
       }},
      // LOAD(INDEX(buf, f(out)), alt?, gate?) -> LOAD(INDEX(...), alt or 0, gate & out < n)
      {UPat::op(Op::LOAD, {UPat::op(Op::INDEX)}).any_len().named("ld"), [](const Match& m) -> UOpPtr {
         const auto& c = m.context<PadContext>();
         const UOpPtr& u = m["ld"];
         if (!depends_on(u->src[0], c.out)) return nullptr;
         std::optional<UOpPtr> gate = add_gate(*u, 2, c.valid);
         if (!gate) return nullptr;
         UOpPtr alt = u->src.size() == 3 ? u->src[1] : const_of(u->dtype, int64_t{0});
         return UOp::make(Op::LOAD, u->dtype, {u->src[0], alt, *gate}, u->arg);
       }},
      // STORE(INDEX(buf, f(out)), x, gate?) -> STORE(INDEX(...), x, gate & out < n)
      {UPat::op(Op::STORE).named("st"), [](const Match& m) -> UOpPtr {
         const auto& c = m.context<PadContext>();
         const UOpPtr& u = m["st"];
         if (!depends_on(u->src[0], c.out)) return nullptr;
         std::optional<UOpPtr> gate = add_gate(*u, 2, c.valid);
         return gate ? UOp::make(Op::STORE, u->dtype, {u->src[0], u->src[1], *gate}, u->arg) : nullptr;
       }},
  };
  return pm;
}

UOpPtr pad_range(const UOpPtr& sink, const UOpPtr& r, int64_t padded, UOpPtr& out) {
  out = range(r->axis_id(), const_int(padded, r->dtype));
  PadContext ctx;
  ctx.out = out;
  ctx.valid = lt(out, const_int(r->end()->vmax(), r->dtype));
  return graph_rewrite(substitute(sink, {{r.get(), out}}), pm_pad_range(), &ctx, "pad range");
}

// GROUP/GROUPTOP: n work-items share the reduction over the loop r. Each reduces its part into a
// register, writes it to shared memory, waits at a barrier, and then reduces the n partial results;
// only work-item 0 of the group stores. GROUP gives each work-item a contiguous chunk
// (r = item*(size/n) + i), GROUPTOP interleaves them (r = i*n + item), which coalesces on GPUs.
struct GroupContext : RewriteContext {
  GroupContext(int64_t& next_id, int64_t& next_local) : next_id(next_id), next_local(next_local) {}
  int64_t& next_id;     // the kernel's counters: each reduction takes a loop and a shared buffer
  int64_t& next_local;
  UOpPtr r, inner, item, at, slot, first;  // at: r as inner and item; slot: this work-item's partial
  int64_t n = 0, slots = 0, shared = 0;
  std::optional<std::string> refused;
};

const PatternMatcher& pm_group_reduce() {
  static const PatternMatcher pm{
      // REDUCE(x, r) -> REDUCE(LOAD(partials[j], BARRIER(STORE(partials[slot], REDUCE(x[r:=at], inner)))), j)
      {UPat::op(Op::REDUCE).named("red"), [](const Match& m) -> UOpPtr {
         auto& c = m.context<GroupContext>();
         const UOpPtr& u = m["red"];
         if (c.refused || std::find(u->src.begin() + 1, u->src.end(), c.r) == u->src.end()) return nullptr;
         if (u->dtype.count != 1) {
           c.refused = "GROUP of a vectorized reduction is not supported";
           return nullptr;
         }
         DType t = c.r->dtype;
         std::vector<UOpPtr> src{graph_rewrite(substitute(u->src[0], {{c.r.get(), c.at}}), pm_symbolic())};
         for (size_t j = 1; j < u->src.size(); ++j) src.push_back(u->src[j] == c.r ? c.inner : u->src[j]);
         UOpPtr partial = UOp::make(Op::REDUCE, u->dtype, src, u->arg);
         UOpPtr local = UOp::make(Op::DEFINE_LOCAL, u->dtype.ptr(), {const_int(c.slots, dtypes::int64)}, c.next_local++);
         c.shared += c.slots * static_cast<int64_t>(u->dtype.itemsize());
         UOpPtr write = UOp::make(Op::STORE, dtypes::void_, {UOp::make(Op::INDEX, local->dtype, {local, c.slot}), partial});
         UOpPtr barrier = UOp::make(Op::BARRIER, dtypes::void_, {write});
         UOpPtr j = range(c.next_id++, const_int(c.n, t));
         UOpPtr read_slot = graph_rewrite(substitute(c.slot, {{c.item.get(), j}}), pm_symbolic());
         UOpPtr read = UOp::make(Op::LOAD, u->dtype, {UOp::make(Op::INDEX, local->dtype, {local, read_slot}), barrier});
         return UOp::make(Op::REDUCE, u->dtype, {read, j}, u->arg);
       }},
      // Every work-item of the group computes the same result: STORE(global, x, gate?) -> STORE(..., gate & item == 0)
      {UPat::op(Op::STORE, {UPat::op(Op::INDEX, {UPat::op(Op::DEFINE_GLOBAL)}).any_len()}).any_len().named("st"),
       [](const Match& m) -> UOpPtr {
         const UOpPtr& u = m["st"];
         std::optional<UOpPtr> gate = add_gate(*u, 2, m.context<GroupContext>().first);
         return gate ? UOp::make(Op::STORE, u->dtype, {u->src[0], u->src[1], *gate}, u->arg) : nullptr;
       }},
  };
  return pm;
}

}  // namespace

class detail::OptApplier::Impl {
 public:
  Impl(const UOpPtr& prepared, const DeviceSpec& spec) : spec_(spec), sink_(prepared) {
    std::vector<UOpPtr> outputs, reduces;
    for (const UOpPtr& u : toposort(sink_)) {  // analysis: collects the axes, rewrites nothing
      if (u->op == Op::RANGE) next_id_ = std::max(next_id_, u->axis_id() + 1);
      if (u->op == Op::STORE)
        for (const UOpPtr& r : ranges_of(u->src[0]))
          if (std::find(outputs.begin(), outputs.end(), r) == outputs.end()) outputs.push_back(r);
      if (u->op == Op::REDUCE)
        for (size_t i = 1; i < u->src.size(); ++i)
          if (std::find(reduces.begin(), reduces.end(), u->src[i]) == reduces.end()) reduces.push_back(u->src[i]);
    }
    auto by_id = [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); };
    std::sort(outputs.begin(), outputs.end(), by_id);
    std::sort(reduces.begin(), reduces.end(), by_id);
    for (const UOpPtr& r : outputs) axes_.push_back({r, AxisKind::Output});
    for (const UOpPtr& r : reduces)
      if (std::find(outputs.begin(), outputs.end(), r) == outputs.end()) axes_.push_back({r, AxisKind::Reduce});
  }

  const std::vector<Axis>& axes() const { return axes_; }
  const UOpPtr& sink() const { return sink_; }

  // Applies one opt, or says why it does not apply (and changes nothing then).
  std::optional<std::string> apply(const Opt& o) {
    auto reject = [&](const std::string& why) -> std::optional<std::string> { return cat(to_string(o), ": ", why); };
    if (o.axis < 0 || o.axis >= static_cast<int>(axes_.size()))
      return reject(cat("the kernel has ", axes_.size(), " axes (0..", static_cast<int>(axes_.size()) - 1, ")"));
    Axis& a = axes_[o.axis];
    int64_t size = a.range->end()->vmax();
    bool output = a.kind == AxisKind::Output;
    // A loop that never runs has nothing to split (and its pieces would intern as the loop itself).
    if (size < 1) return reject("the axis runs 0 iterations; there is nothing to split");
    auto factor = [&](int64_t n) -> std::optional<std::string> {  // n divides the axis, and is at least 2
      if (n < 2) return reject(cat("the amount must be at least 2 (0 takes the whole axis of ", size, ")"));
      if (size % n != 0) return reject(cat("", n, " does not divide the axis's ", size, " iterations"));
      return std::nullopt;
    };
    int64_t n = o.amount == 0 && o.op != OptOp::THREAD && o.op != OptOp::SWAP ? size : o.amount;
    // A GROUP fixed where each work-item's partial result lives in shared memory: more copies of the
    // reduction (UPCAST) or more work-items (LOCAL) after it would collide there.
    if (grouped_ && (o.op == OptOp::UPCAST || o.op == OptOp::LOCAL || o.op == OptOp::PADTO))
      return reject(cat(opt_op_name(o.op), " comes before GROUP"));
    switch (o.op) {
      case OptOp::UPCAST: {
        if (!output) return reject("UPCAST takes an output axis; a reduce axis is unrolled with UNROLL");
        if (auto bad = factor(n)) return bad;
        if (upcast_product_ * n > 256) return reject(cat("more than 256 outputs per iteration (", upcast_product_, " already)"));
        // Vector lanes where the device and the accesses allow (one vector per kernel), else copies.
        bool vector = !vectorized_ && vector_eligible(sink_, a.range, n, spec_);
        if (auto big = too_much_code(upcast_product_ * n, vector ? n : vector_lanes_, unroll_product_)) return reject(*big);
        upcast_product_ *= n;
        if (vector) vector_lanes_ = n;
        sink_ = vector ? upcast_vector(sink_, a.range, n) : upcast(sink_, a.range, n);
        vectorized_ |= vector;
        a.range = range(a.range->axis_id(), const_int(size / n, a.range->dtype));  // what upcast left
        a.upcast = true;
        return std::nullopt;
      }
      case OptOp::UNROLL: {
        if (output) return reject("UNROLL takes a reduce axis; an output axis is upcast with UPCAST");
        if (auto bad = factor(n)) return bad;
        if (n > 32) return reject("more than 32 unrolled iterations");
        if (auto big = too_much_code(upcast_product_, vector_lanes_, unroll_product_ * n)) return reject(*big);
        unroll_product_ *= n;
        UOpPtr before = a.range;
        sink_ = unroll_reduce(sink_, before, n);
        a.range = range(before->axis_id(), const_int(size / n, before->dtype));
        a.split = true;
        return std::nullopt;
      }
      case OptOp::THREAD: {
        if (is_gpu(spec_)) return reject("THREAD is for CPU-style devices; GPU-style ones use LOCAL and the launch grid");
        if (spec_.threads <= 1) return reject(cat(spec_.name, " runs one thread"));
        if (!output) return reject("THREAD takes an output axis (a reduce axis cannot be split over threads)");
        if (o.amount != 0) return reject("THREAD's amount is 0 (the device splits the axis over all its threads)");
        if (thread_axis_ >= 0) return reject(cat("axis ", thread_axis_, " is already threaded"));
        thread_axis_ = o.axis;
        return std::nullopt;
      }
      case OptOp::SWAP: {
        if (!output) return reject("SWAP takes two output axes");
        if (o.amount < 0 || o.amount >= static_cast<int64_t>(axes_.size()) || axes_[o.amount].kind != AxisKind::Output ||
            o.amount == o.axis)
          return reject("the other axis is a different output axis");
        swaps_.push_back({o.axis, static_cast<int>(o.amount)});
        return std::nullopt;
      }
      case OptOp::PADTO: {
        if (a.upcast || a.split || a.local) return reject("PADTO comes before the other opts on its axis");
        if (n < 2) return reject("the amount must be at least 2");
        int64_t padded = (size + n - 1) / n * n;
        if (padded == size) return reject(cat("the axis's ", size, " iterations are already a multiple of ", n));
        if (padded > size * 2) return reject(cat("padding ", size, " to ", padded, " more than doubles the work"));
        for (const UOpPtr& u : toposort(sink_))  // analysis: a check before pm_pad_range
          if ((u->op == Op::IDIV || u->op == Op::MOD) && u->src[1]->op != Op::CONST)
            return reject("the kernel divides by a loaded value, which the masked iterations would make 0");
        UOpPtr before = a.range, after;
        sink_ = pad_range(sink_, before, padded, after);
        a.range = after;
        return std::nullopt;
      }
      case OptOp::LOCAL: {
        if (!is_gpu(spec_)) return reject(cat(spec_.name, " has no workgroups (LOCAL is for GPU-style devices)"));
        if (!output) return reject("LOCAL takes an output axis (a reduce axis is shared with GROUP)");
        if (a.local) return reject("the axis is already local");
        if (auto bad = factor(n)) return bad;
        if (local_product_ * n > spec_.max_local) return reject(cat("more than ", spec_.max_local, " work-items per workgroup"));
        if (locals_ == 3) return reject("three local axes already");
        if (n > spec_.max_local_dims[0]) return reject(cat("more than ", spec_.max_local_dims[0], " work-items along one axis"));
        UOpPtr before = a.range;
        UOpPtr outer = range(before->axis_id(), const_int(size / n, before->dtype));
        a.local = range(next_id_++, const_int(n, before->dtype));
        sink_ = substitute(sink_, {{before.get(), outer * const_int(n, before->dtype) + a.local}});
        sink_ = graph_rewrite(sink_, pm_symbolic());
        a.range = outer;
        a.split = true;
        local_product_ *= n;
        ++locals_;
        return std::nullopt;
      }
      case OptOp::GROUP: case OptOp::GROUPTOP: {
        if (!is_gpu(spec_)) return reject(cat(spec_.name, " has no workgroups (GROUP is for GPU-style devices)"));
        if (output) return reject("GROUP takes a reduce axis (an output axis is spread over work-items with LOCAL)");
        if (grouped_) return reject("one GROUP per kernel");
        if (auto bad = factor(n)) return bad;
        if (local_product_ * n > spec_.max_local) return reject(cat("more than ", spec_.max_local, " work-items per workgroup"));
        if (locals_ == 3) return reject("three local axes already");
        if (n > spec_.max_local_dims[0]) return reject(cat("more than ", spec_.max_local_dims[0], " work-items along one axis"));
        if (auto bad = group_reduce(a, n, o.op == OptOp::GROUPTOP)) return reject(*bad);
        local_product_ *= n;
        ++locals_;
        grouped_ = true;
        return std::nullopt;
      }
    }
    return reject("unknown opt");
  }

  // After the opts: the SWAPs put the output loops in their order.
  void order_loops() {
    for (auto [x, y] : swaps_) {
      UOpPtr& rx = axes_[x].range;
      UOpPtr& ry = axes_[y].range;
      // One substitute: its values are not renamed again, so range(iy, end of x) may be the node ry.
      UOpPtr nx = range(ry->axis_id(), rx->end()), ny = range(rx->axis_id(), ry->end());
      sink_ = substitute(sink_, {{rx.get(), nx}, {ry.get(), ny}});
      rx = nx;
      ry = ny;
    }
  }

  // Then the launch: THREAD's axis becomes the launch index (CPU-style), or the grid (GPU-style).
  std::optional<std::string> map_launch(LaunchDims& dims) {
    if (is_gpu(spec_)) return map_grid(dims);
    if (thread_axis_ >= 0) {
      const UOpPtr& r = axes_[thread_axis_].range;
      dims.global[0] = r->end()->vmax();
      sink_ = substitute(sink_, {{r.get(), UOp::make(Op::SPECIAL, r->dtype, {r->end()}, std::string("gidx0"))}});
    }
    return std::nullopt;
  }

 private:
  // GPU-style: LOCAL ranges become work-item ids, the other output loops workgroup ids. The innermost
  // output loop is dimension 0, the next dimension 1, the rest share dimension 2. A loop of one
  // iteration is not mapped.
  std::optional<std::string> map_grid(LaunchDims& dims) {
    std::vector<UOpPtr> globals, locals;
    for (const Axis& a : axes_) {
      if (a.local && a.local->end()->vmax() > 1) locals.push_back(a.local);
      if (a.kind == AxisKind::Output && a.range->end()->vmax() > 1) globals.push_back(a.range);
    }
    // Innermost first.
    auto by_depth = [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() > b->axis_id(); };
    std::sort(globals.begin(), globals.end(), by_depth);
    std::sort(locals.begin(), locals.end(), by_depth);
    std::unordered_map<const UOp*, UOpPtr> replace;
    auto special = [&](const char* kind, int d, int64_t size, DType t) {
      return UOp::make(Op::SPECIAL, t, {const_int(size, t)}, cat(kind, d));
    };
    for (size_t d = 0; d < locals.size(); ++d) {
      int64_t size = locals[d]->end()->vmax();
      dims.local[d] = size;
      replace[locals[d].get()] = special("lidx", static_cast<int>(d), size, locals[d]->dtype);
    }
    // A loop with more iterations than its dimension allows is split in two (r = hi*n + lo, n the
    // largest divisor that fits) while a dimension is free.
    for (size_t d = 0; d < globals.size() && d < 2 && globals.size() < 3; ++d) {
      const UOpPtr r = globals[d];
      int64_t size = r->end()->vmax(), most = spec_.max_global_dims[d];
      if (size <= most) continue;
      int64_t n = most;
      while (n > 1 && size % n != 0) --n;
      if (n < 2 || size / n > spec_.max_global_dims[d + 1]) continue;
      UOpPtr lo = range(next_id_++, const_int(n, r->dtype)), hi = range(r->axis_id(), const_int(size / n, r->dtype));
      sink_ = substitute(sink_, {{r.get(), hi * const_int(n, r->dtype) + lo}});
      globals[d] = lo;
      globals.insert(globals.begin() + static_cast<std::ptrdiff_t>(d) + 1, hi);
    }
    // Workgroup ids: dims 0 and 1 one loop each, dim 2 the rest (div/mod of one id). A loop that still
    // does not fit stays a loop inside the kernel.
    std::vector<UOpPtr> grid;
    for (const UOpPtr& r : globals) {
      size_t d = std::min<size_t>(grid.size(), 2);
      if (d < 2 && r->end()->vmax() > spec_.max_global_dims[d]) continue;
      grid.push_back(r);
    }
    for (size_t d = 0; d < grid.size() && d < 2; ++d) {
      int64_t size = grid[d]->end()->vmax();
      dims.global[d] = size;
      replace[grid[d].get()] = special("gidx", static_cast<int>(d), size, grid[d]->dtype);
    }
    if (grid.size() > 2) {
      std::vector<UOpPtr> rest(grid.begin() + 2, grid.end());
      auto product = [&] {
        int64_t total = 1;
        for (const UOpPtr& r : rest) total *= r->end()->vmax();
        return total;
      };
      while (!rest.empty() && product() > spec_.max_global_dims[2]) rest.pop_back();  // the outermost stay loops
      if (!rest.empty()) {
        int64_t total = product();
        dims.global[2] = total;
        UOpPtr id = special("gidx", 2, total, rest[0]->dtype);
        int64_t stride = 1;
        for (const UOpPtr& r : rest) {  // innermost first: the fastest-varying part of the id
          int64_t size = r->end()->vmax();
          replace[r.get()] = (id / const_int(stride, id->dtype)) % const_int(size, id->dtype);
          stride *= size;
        }
      }
    }
    sink_ = graph_rewrite(substitute(sink_, replace), pm_symbolic());
    return std::nullopt;
  }

  // GROUP/GROUPTOP over a's loop (pm_group_reduce); changes nothing when refused.
  std::optional<std::string> group_reduce(Axis& a, int64_t n, bool top) {
    const UOpPtr& r = a.range;
    DType t = r->dtype;
    int64_t size = r->end()->vmax();
    GroupContext ctx{next_id_, next_local_};
    ctx.r = r;
    ctx.inner = range(r->axis_id(), const_int(size / n, t));
    ctx.item = range(next_id_++, const_int(n, t));
    ctx.n = n;
    ctx.at = top ? ctx.inner * const_int(n, t) + ctx.item : ctx.item * const_int(size / n, t) + ctx.inner;
    // Where this work-item's partial goes: its group item, then the output work-item ids above it.
    ctx.slot = ctx.item;
    ctx.slots = n;
    for (const Axis& other : axes_)
      if (other.local) {
        ctx.slot = ctx.slot + other.local * const_int(ctx.slots, t);
        ctx.slots *= other.local->end()->vmax();
      }
    ctx.first = eq(ctx.item, const_int(0, t));
    UOpPtr s = graph_rewrite(sink_, pm_group_reduce(), &ctx, "group reduce");
    if (ctx.refused) return ctx.refused;
    if (shared_used_ + ctx.shared > spec_.shared_bytes)
      return cat("the partial results need ", shared_used_ + ctx.shared, " bytes of shared memory; ", spec_.name, " has ",
                 spec_.shared_bytes);
    shared_used_ += ctx.shared;
    sink_ = s;
    a.range = ctx.inner;
    a.local = ctx.item;
    a.split = true;
    return std::nullopt;
  }

  const DeviceSpec& spec_;
  UOpPtr sink_;
  std::vector<Axis> axes_;
  int64_t next_id_ = 0;
  // A loop body of more than this many copies of the kernel's work (vectors count once) takes the
  // compiler seconds to minutes (UPCAST 16 x 16 unvectorized x UNROLL 16: 84 s) and spills registers: no
  // candidate worth timing. The heuristics' largest bodies are ~150 (a 3x3 conv's 16 vector rows).
  static constexpr int64_t kMaxBodyCopies = 512;
  std::optional<std::string> too_much_code(int64_t upcasts, int64_t lanes, int64_t unrolls) const {
    int64_t copies = upcasts / lanes * unrolls;
    if (copies <= kMaxBodyCopies) return std::nullopt;
    return cat("the loop body would hold ", copies, " copies of the work (", upcasts, " outputs in vectors of ", lanes,
               ", ", unrolls, " reduce steps unrolled); at most ", kMaxBodyCopies);
  }
  int64_t upcast_product_ = 1, local_product_ = 1, unroll_product_ = 1, vector_lanes_ = 1;
  int locals_ = 0;
  int thread_axis_ = -1;
  bool vectorized_ = false, grouped_ = false;
  int64_t next_local_ = 0, shared_used_ = 0;
  std::vector<std::pair<int, int>> swaps_;
};

UOpPtr detail::prepare_for_opts(const UOpPtr& ast, const DeviceSpec& spec) {
  UOpPtr s = graph_rewrite(ast, pm_symbolic());
  return spec.alu_transcendentals ? graph_rewrite(s, pm_transcendental()) : s;
}

detail::OptApplier::OptApplier(const UOpPtr& prepared, const DeviceSpec& spec) : impl_(std::make_unique<Impl>(prepared, spec)) {}
detail::OptApplier::OptApplier(const OptApplier& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
detail::OptApplier::~OptApplier() = default;
const std::vector<Axis>& detail::OptApplier::axes() const { return impl_->axes(); }
const UOpPtr& detail::OptApplier::sink() const { return impl_->sink(); }
std::optional<std::string> detail::OptApplier::apply(const Opt& o) { return impl_->apply(o); }
void detail::OptApplier::order_loops() { impl_->order_loops(); }
std::optional<std::string> detail::OptApplier::map_launch(LaunchDims& dims) { return impl_->map_launch(dims); }

detail::KernelAxes detail::kernel_axes(const UOpPtr& ast, const DeviceSpec& spec) {
  OptApplier k(prepare_for_opts(ast, spec), spec);
  return {k.sink(), k.axes()};
}

}  // namespace kiln

#include "schedule/schedule.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <set>
#include <unordered_set>

#include "schedule/kernelize.h"
#include "schedule/repack.h"
#include "schedule/split_reduce.h"
#include "uop/symbolic.h"

namespace kiln {

namespace {

// The nodes a search has seen: a linear scan of a fixed array while few (device_of usually stops
// within a few dozen nodes, where hashing and allocating cost more than the search), a hash set beyond.
class SeenSet {
 public:
  bool insert(const UOp* u) {
    if (size_ > small_.size()) return large_.insert(u).second;
    if (std::find(small_.begin(), small_.begin() + static_cast<ptrdiff_t>(size_), u) != small_.begin() + static_cast<ptrdiff_t>(size_))
      return false;
    if (size_ < small_.size()) {
      small_[size_++] = u;
      return true;
    }
    large_.insert(small_.begin(), small_.end());
    ++size_;  // from now on, past the array: the set holds everything
    return large_.insert(u).second;
  }

 private:
  std::array<const UOp*, 48> small_;
  size_t size_ = 0;
  std::unordered_set<const UOp*> large_;
};

}  // namespace

UOpPtr device_of(const UOpPtr& u) {
  // Breadth first: the nearest DEVICE is usually a few steps away (a constant's), even at the end of a
  // long chain of ops, so this stays cheap when the frontend asks for every new tensor.
  // Scratch kept per thread: the frontend asks once per new tensor, and allocating was most of the cost.
  thread_local std::vector<const UOpPtr*> level, next;
  level.assign(1, &u);
  next.clear();
  SeenSet seen;
  while (!level.empty()) {
    for (const UOpPtr* n : level) {
      if ((*n)->op == Op::DEVICE) return *n;
      if ((*n)->op == Op::COPY) return (*n)->src[1];  // a copy's own DEVICE is its destination
      for (const UOpPtr& s : (*n)->src)
        if (seen.insert(s.get())) next.push_back(&s);
    }
    level.swap(next);
    next.clear();
  }
  throw_internal("every tensor graph reaches a DEVICE", str(u), __FILE__, __LINE__);
}

UOpPtr DeviceCache::operator()(const UOpPtr& u) {
  std::vector<const UOpPtr*> path;
  UOpPtr found;
  for (const UOpPtr* n = &u;; n = &(*n)->src[0]) {
    if (auto it = memo_.find(n->get()); it != memo_.end()) {
      found = it->second.second;
      break;
    }
    if ((*n)->op == Op::DEVICE) {
      found = *n;
      break;
    }
    path.push_back(n);
    if ((*n)->op == Op::COPY) {
      found = (*n)->src[1];
      break;
    }
    if ((*n)->src.empty()) {  // a leaf with no device (a variable): the nearest DEVICE of u's graph
      found = device_of(u);
      break;
    }
  }
  for (const UOpPtr* n : path) memo_.try_emplace(n->get(), *n, found);
  return found;
}

namespace {

// Elementwise nodes used by several consumers are recomputed in each (memory-bound kernels pay
// nothing for a few more ALU ops) unless recomputing would cost more than this many ALU ops per element.
constexpr int kMaxRecomputeOps = 32;
// An elementwise node read through an EXPAND inside a reduction is used by many of the reduction's
// steps (a conv's weight gradient reads each value of the output gradient once per input channel and
// tap, a matmul's once per column): fused, it is recomputed for every use, so it is stored when it
// costs more than this many ALU ops. A ReLU or its gradient mask (four: le is lt or eq) stays fused;
// a ReLU of a bias add (five) is stored: fused into the next Linear's matmul, each of its values was
// recomputed once per 32 output columns, and the broadcast of a computed value is not the FMA's own
// memory operand (MLP 784-512-512-10: that matmul ran at ~120 GFLOP/s against ~250 for the others;
// `kiln bench train --quick --only mlp`, 3 rounds alternating: 159, 158, 147 -> 209, 181, 227 steps/s).
constexpr int kMaxBroadcastOps = 4;
// A region that would fuse more than this many reductions stores each in its own kernel: fused, they
// run one after another in one kernel, each without the tiling it would get alone. The gradient of a
// weight used at every step of an RNN is such a sum of one matmul per step (frontend/autograd.cpp
// reduces the parts of a broadcast's gradient separately past four).
constexpr int kMaxFusedReduces = 4;
// An elementwise node used outside its region is also stored when recomputing it reads more than this
// many full-size buffers: each region that recomputes it reads them all again, where stored it costs one
// write and one read per region. A transformer's residual stream x + attn + mlp + ... is such a node:
// every layer's LayerNorm re-read every earlier layer's outputs, quadratic in the depth (a GPT of 3
// blocks, d 192: the last LayerNorm's two reductions read 14 buffers, ~1 ms each instead of 10-40 us;
// its step 133-146 -> 124-128 ms, 8 blocks 355-374 -> 322-337 ms, alternating runs). Two, not three:
// at three the first layers' reductions still read four buffers each.
constexpr int kMaxRecomputeLoads = 2;

// The layout an elementwise kernel stores an intermediate in: the order in which most of the bytes it
// reads lie in memory. A conv computes its output with the channels innermost (NHWC, see
// Tensor::conv2d), so the batch norm, ReLU and residual add after it read NHWC; stored row-major
// (NCHW), each of them was a transpose that gathered its input lane by lane, and the next reduction
// over both layouts (batch norm's backward) gathered one of them again. Only a full-size operand (as
// many elements as the output, read at affine indices) votes, with its bytes; row-major wins ties. A
// region with a reduction inside keeps row-major: its loop order is the reduction's.
Layout preferred_layout(const UOpPtr& ast, const std::vector<UOpPtr>& bufs, const std::vector<UOpPtr>& out_idx, const Shape& shape) {
  std::vector<size_t> axes;  // the axes that loop
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) axes.push_back(i);
  if (axes.size() < 2) return {};
  std::map<Layout, int64_t> votes;
  for (const UOpPtr& u : toposort(ast)) {  // analysis: votes for a layout, rewrites nothing
    if (u->op == Op::REDUCE) return {};
    if (u->op != Op::INDEX || u->src[0]->op != Op::DEFINE_GLOBAL) continue;
    size_t slot = static_cast<size_t>(u->src[0]->arg_as<int64_t>());
    if (slot == 0 || bufs[slot]->arg_as<BufferArg>().size != numel(shape)) continue;
    std::vector<std::pair<int64_t, int64_t>> strides;  // (stride, axis)
    for (size_t a : axes) {
      std::optional<int64_t> s = index_stride(u->src[1], out_idx[a]);
      if (!s || *s <= 0) break;
      strides.push_back({*s, static_cast<int64_t>(a)});
    }
    if (strides.size() != axes.size()) continue;
    std::stable_sort(strides.begin(), strides.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    Layout order;
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] == 1) order.push_back(static_cast<int64_t>(i));
    for (const auto& [stride, axis] : strides) order.push_back(axis);
    votes[order] += numel(shape) * static_cast<int64_t>(bufs[slot]->dtype.itemsize());
  }
  // Size-1 axes go first in a vote's order: row-major's own vote is the order with them moved there.
  Layout row_major_vote;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1) row_major_vote.push_back(static_cast<int64_t>(i));
  for (size_t a : axes) row_major_vote.push_back(static_cast<int64_t>(a));
  int64_t best = votes.count(row_major_vote) ? votes[row_major_vote] : 0;
  Layout chosen;
  for (const auto& [order, bytes] : votes)
    if (bytes > best) best = bytes, chosen = order;
  return chosen;  // empty: row-major
}

class Scheduler {
 public:
  Scheduler(const BufferMaker& make_buffer, const RealizedLookup& realized) : make_buffer_(make_buffer), realized_(realized) {}

  Schedule run(const std::vector<UOpPtr>& outputs) {
    for (const UOpPtr& out : outputs) outputs_.insert(out.get());
    count_users(outputs);
    for (const UOpPtr& out : outputs) mark_stored(out);
    // Grow the set of stored nodes until every kernel region is valid (see must_store).
    for (size_t i = 0; i < roots_.size(); ++i) explore_region(roots_[i]);
    Schedule s;
    for (const UOpPtr& out : outputs) emit(out, s);
    for (const UOpPtr& out : outputs) s.outputs.push_back(buffer_of(out));
    plan_memory(outputs, s);
    return s;
  }

 private:
  // Only above the leaves: what lies below a realized node is never computed here, so it neither uses
  // a node nor costs a walk (the graph behind a realized node can be a whole training history).
  void count_users(const std::vector<UOpPtr>& outputs) {
    std::vector<UOpPtr> stack(outputs.begin(), outputs.end());
    while (!stack.empty()) {
      UOpPtr u = std::move(stack.back());
      stack.pop_back();
      if (!visited_.insert(u.get()).second || is_leaf(u)) continue;
      for (const UOpPtr& s : u->src) {
        ++users_[s.get()];
        stack.push_back(s);
      }
    }
  }

  bool is_leaf(const UOpPtr& u) const { return u->op == Op::BUFFER || u->op == Op::DEVICE || realized_(u) != nullptr; }

  void mark_stored(const UOpPtr& u) {
    if (stored_.insert(u.get()).second) roots_.push_back(u);
  }

  // How a region reaches a node from its root: through which kinds of views and nodes.
  struct Path {
    bool expanded = false;   // an EXPAND that broadcasts
    bool padded = false;     // a PAD that adds elements
    bool permuted = false;   // a PERMUTE that reorders axes of more than one element
    bool in_reduce = false;  // inside a REDUCE_AXIS
    bool shared = false;     // below a node with several consumers
    // How many times more elements the PADs on the way have than their sources (1: none adds any);
    // capped at kMaxRecomputeOps + 1, past which every padded elementwise node with an op is stored.
    int64_t pad_growth = 1;
    auto operator<=>(const Path&) const = default;
  };

  // The one cost function: whether a node inside a kernel's region is stored instead of fused.
  //  - CONTIGUOUS, COPY and SCATTER_ADD are stored by definition;
  //  - a REDUCE_AXIS is stored if it is broadcast back (read through an EXPAND: fusing would redo
  //    the whole reduction per element), read through a PAD (`padded`: a piece of a cat, a phase of a
  //    strided conv's input gradient, the gradient of a slice; fused, the consumer would run the
  //    reduction's loops for every element, masked where the piece is absent, once per piece; stored,
  //    each reduction runs dense in its own kernel), read through a PERMUTE while it reads through a
  //    PAD itself (`permuted`: fused, the kernel loops in its output's order, whose innermost axis
  //    is gated lane by lane (a padded conv's width), so the vector goes to another axis and its
  //    lanes are stored scattered: a padded conv returned NCHW wrote each vector of output channels
  //    a plane apart, 20 GFLOP/s for a 3->32 channel stem at 32x32; stored in its own NHWC order and
  //    transposed after, 183. Without the PAD the output's innermost axis takes the vector, and a
  //    weight gradient g^T.x fused into its transpose ran 7x faster than in its own order), read
  //    inside another reduction, or read by several consumers, directly or through a node that several consumers
  //    share (`shared`: that node is recomputed in each of them, and the reduction with it);
  //  - an elementwise node read through an EXPAND inside a reduction is stored when it costs more
  //    than kMaxBroadcastOps ALU ops (each of its values is used many times there);
  //  - an elementwise node read through PADs that grow it g-fold (`pad_growth`: a piece of a cat or
  //    a stack, the gradient of a slice) is stored when g times its ALU ops exceed kMaxRecomputeOps:
  //    fused, its ops run for every element of the padded result and the gate discards all but 1/g
  //    of them, once per piece. The gradient of an RNN's input projection, read one step at a time,
  //    is the sum of L such pieces: fused, each element of the (L, N, 3H) sum evaluated all L steps'
  //    gate gradients (a GRU of 50 steps, 64 x 384: 134 ms a direction); stored, ~0.5 ms;
  //  - an elementwise node with consumers outside the region is stored only when recomputing it
  //    costs more than kMaxRecomputeOps ALU ops per element or reads more than kMaxRecomputeLoads
  //    full-size buffers. Consumers inside the region cost nothing: a kernel is a DAG and computes a
  //    shared node once.
  bool must_store(const UOpPtr& u, const Path& p) {
    if (u->op == Op::CONTIGUOUS || u->op == Op::COPY || u->op == Op::ASSIGN || u->op == Op::SCATTER_ADD) return true;
    int users = users_[u.get()];
    if (u->op == Op::REDUCE_AXIS)
      return p.expanded || p.padded || (p.permuted && reads_through_pad(u)) || p.in_reduce || p.shared || users > 1 ||
             region_reduces_ > kMaxFusedReduces;
    if (!is_alu(u->op)) return false;
    bool broadcast = p.expanded && p.in_reduce;
    bool padded = p.pad_growth > 1;
    auto inside = region_users_.find(u.get());
    int outside = users - (inside == region_users_.end() ? 0 : inside->second);
    bool shared_outside = outside > 0 && users > 1;
    if (!broadcast && !shared_outside && !padded) return false;  // the walk below only when a rule needs it
    RecomputeCost cost = recompute_cost(u);
    if (broadcast && cost.alu > kMaxBroadcastOps) return true;
    if (padded && cost.alu * p.pad_growth > kMaxRecomputeOps) return true;
    return shared_outside && (cost.alu > kMaxRecomputeOps || cost.full_loads > kMaxRecomputeLoads);
  }

  // How many consumers of each node lie in root's region, were nothing below it stored (an upper
  // bound: a node stored later moves its sources' consumers to its own region).
  void count_region_users(const UOpPtr& root) {
    region_users_.clear();
    region_reduces_ = count_outer_reduces(root);
    std::vector<UOpPtr> stack(root->src.begin(), root->src.end());
    std::unordered_set<const UOp*> seen;
    while (!stack.empty()) {
      UOpPtr u = std::move(stack.back());
      stack.pop_back();
      ++region_users_[u.get()];
      if (!seen.insert(u.get()).second || is_leaf(u) || stored_.count(u.get())) continue;
      for (const UOpPtr& s : u->src) stack.push_back(s);
    }
  }

  // Walks the nodes below root that its region computes (not leaves, not stored nodes), each once;
  // `visit` says whether to go on below the node, skip what lies below it, or stop the walk.
  enum class Walk { Below, Skip, Stop };
  template <typename Visit>
  void walk_region(const UOpPtr& root, Visit visit) {
    std::vector<UOpPtr> stack(root->src.begin(), root->src.end());
    std::unordered_set<const UOp*> seen;
    while (!stack.empty()) {
      UOpPtr u = std::move(stack.back());
      stack.pop_back();
      if (!seen.insert(u.get()).second || is_leaf(u) || stored_.count(u.get())) continue;
      Walk next = visit(u);
      if (next == Walk::Stop) return;
      if (next == Walk::Below) stack.insert(stack.end(), u->src.begin(), u->src.end());
    }
  }

  // The reductions root's region would fuse side by side: those reached without passing through
  // another (a reduction read inside one is stored anyway).
  int count_outer_reduces(const UOpPtr& root) {
    int n = 0;
    walk_region(root, [&](const UOpPtr& u) {
      if (u->op != Op::REDUCE_AXIS) return Walk::Below;
      ++n;
      return Walk::Skip;
    });
    return n;
  }

  // What recomputing u costs: the ALU ops of its region (counted up to kMaxRecomputeOps + 1, where the
  // walk stops) and how many buffers of at least u's size the region reads.
  struct RecomputeCost {
    int alu = 0, full_loads = 0;
  };
  RecomputeCost recompute_cost(const UOpPtr& u) {
    RecomputeCost cost;
    int64_t size = numel(shapes_(u));
    std::vector<UOpPtr> stack{u};
    std::unordered_set<const UOp*> seen;
    while (!stack.empty() && cost.alu <= kMaxRecomputeOps) {
      UOpPtr n = stack.back();
      stack.pop_back();
      if (!seen.insert(n.get()).second || n->op == Op::DEVICE) continue;
      if (is_leaf(n) || (n != u && stored_.count(n.get()))) {
        cost.full_loads += numel(shapes_(n)) >= size;
        continue;
      }
      cost.alu += is_alu(n->op);
      for (const UOpPtr& s : n->src) stack.push_back(s);
    }
    return cost;
  }

  void explore_region(const UOpPtr& root) {
    if (root->op == Op::COPY || root->op == Op::SCATTER_ADD) {
      // A copy (of bytes) and the host's scatter-add read their sources from buffers, row-major.
      std::vector<UOpPtr> sources(root->src.begin(), root->src.begin() + (root->op == Op::COPY ? 1 : 2));  // mark_stored may move roots_
      for (const UOpPtr& source : sources) {
        copied_.insert(source.get());
        if (!is_leaf(source)) mark_stored(source);
      }
      return;
    }
    count_region_users(root);
    std::vector<std::pair<UOpPtr, Path>> stack;
    for (const UOpPtr& s : root->src) stack.push_back({s, below(root, Path{})});
    std::set<std::pair<const UOp*, Path>> seen;
    while (!stack.empty()) {
      auto [u, p] = stack.back();
      stack.pop_back();
      if (is_leaf(u) || stored_.count(u.get())) continue;
      if (!seen.insert({u.get(), p}).second) continue;
      if (must_store(u, p)) {
        mark_stored(u);
        continue;
      }
      Path q = below(u, p);
      q.shared |= users_[u.get()] > 1;
      for (const UOpPtr& s : u->src) stack.push_back({s, q});
    }
  }

  // The path to u's sources, given the path to u.
  Path below(const UOpPtr& u, Path p) {
    p.expanded |= u->op == Op::EXPAND && numel(shapes_(u)) != numel(shapes_(u->src[0]));
    if (u->op == Op::PAD && numel(shapes_(u)) != numel(shapes_(u->src[0]))) {
      p.padded = true;
      int64_t from = std::max<int64_t>(numel(shapes_(u->src[0])), 1);
      // Whole multiples only: a conv's border (34 x 34 around 32 x 32) grows nothing that counts here.
      p.pad_growth = std::min<int64_t>(p.pad_growth * std::max<int64_t>(numel(shapes_(u)) / from, 1), kMaxRecomputeOps + 1);
    }
    p.permuted |= u->op == Op::PERMUTE && reorders(u);
    p.in_reduce |= u->op == Op::REDUCE_AXIS;
    return p;
  }

  // Whether u's region reads something through a PAD that adds elements (loads gated per element).
  bool reads_through_pad(const UOpPtr& u) {
    bool found = false;
    walk_region(u, [&](const UOpPtr& n) {
      found = n->op == Op::PAD && numel(shapes_(n)) != numel(shapes_(n->src[0]));
      return found ? Walk::Stop : Walk::Below;
    });
    return found;
  }


  // Whether a PERMUTE moves axes of more than one element relative to each other.
  bool reorders(const UOpPtr& permute) {
    const Shape& in = shapes_(permute->src[0]);
    int64_t last = -1;
    for (int64_t axis : std::get<std::vector<int64_t>>(permute->arg)) {
      if (in[static_cast<size_t>(axis)] == 1) continue;
      if (axis < last) return true;
      last = axis;
    }
    return false;
  }

  UOpPtr buffer_of(const UOpPtr& u) {
    if (u->op == Op::BUFFER) return u;
    if (UOpPtr b = realized_(u)) return b;
    auto it = buffers_.find(u.get());
    KILN_ASSERT(it != buffers_.end(), "a stored node has a buffer once emitted: ", str(u));
    return it->second;
  }

  const Layout* layout_of(const UOpPtr& buffer) const {
    auto it = layouts_.find(buffer.get());
    return it == layouts_.end() ? nullptr : &it->second;
  }

  UOpPtr stored_buffer(const UOpPtr& u) {
    if (u->op == Op::BUFFER) return u;
    if (UOpPtr b = realized_(u)) return b;
    if (auto it = buffers_.find(u.get()); it != buffers_.end()) return it->second;
    return nullptr;
  }

  // Emits the items that compute u (after those it depends on), depth first.
  void emit(const UOpPtr& root, Schedule& s) {
    if (is_leaf(root) || buffers_.count(root.get())) return;
    if (numel(shapes_(root)) == 0) {  // nothing to compute or copy: the buffer is never allocated or read
      buffers_[root.get()] = make_buffer_(device_of(root), 1, root->dtype);
      return;
    }
    // The stored nodes this region reads, emitted first.
    std::vector<UOpPtr> deps;
    std::vector<UOpPtr> stack(root->src.begin(), root->src.end());
    std::unordered_set<const UOp*> seen;
    while (!stack.empty()) {
      UOpPtr u = stack.back();
      stack.pop_back();
      if (!seen.insert(u.get()).second || is_leaf(u)) continue;
      if (stored_.count(u.get())) {
        deps.push_back(u);
        continue;
      }
      stack.insert(stack.end(), u->src.begin(), u->src.end());
    }
    for (const UOpPtr& d : deps) emit(d, s);
    const Shape& shape = shapes_(root);
    UOpPtr out = make_buffer_(device_of(root), numel(shape), root->dtype);
    ScheduleItem item;
    if (root->op == Op::COPY) {
      item.kind = ScheduleItem::Kind::Copy;
      item.bufs = {out, buffer_of(root->src[0])};
    } else if (root->op == Op::SCATTER_ADD) {
      item.kind = ScheduleItem::Kind::ScatterAdd;
      item.bufs = {out, buffer_of(root->src[0]), buffer_of(root->src[1])};
      const Shape& values = shapes_(root->src[0]);
      auto axis = static_cast<size_t>(root->arg_as<std::vector<int64_t>>().at(0));
      int64_t outer = 1, inner = 1;
      for (size_t i = 0; i < values.size(); ++i) (i < axis ? outer : inner) *= i == axis ? 1 : values[i];
      item.scatter = {outer, values[axis], inner, shape[axis]};
    } else {
      auto build = [&](const Layout& layout) {
        KernelBuilder kb(shapes_, [this, &root](const UOpPtr& u) { return u == root ? nullptr : stored_buffer(u); },
                         [this](const UOpPtr& buffer) { return layout_of(buffer); });
        item.ast = kb.build(root, out, layout);
        item.bufs = kb.buffers();
        item.var_vals = kb.var_vals();
        return kb.output_index();
      };
      std::vector<UOpPtr> out_idx = build({});
      // An intermediate (no output of the schedule) is stored in the layout its kernel reads most; an
      // explicit contiguous() asks for row-major (conv2d's transposed weights), and so does a device copy
      // (t.transpose(0, 1).to(other device) copied the untransposed bytes).
      if (!outputs_.count(root.get()) && !copied_.count(root.get()) && root->op != Op::ASSIGN && root->op != Op::CONTIGUOUS)
        if (Layout layout = preferred_layout(item.ast, item.bufs, out_idx, shape); !layout.empty()) {
          build(layout);
          layouts_[out.get()] = std::move(layout);
        }
      // Operands a reduction would read strided get a transposed copy first (schedule/repack.h).
      auto make_scratch = [this](const UOpPtr& beside, int64_t size, DType dtype) {
        scratch_.push_back(make_buffer_(beside->src[0], size, dtype));
        return scratch_.back();
      };
      // Both take their kernels from item's AST, so their launch variables are item's.
      for (ScheduleItem& pack : repack_operands(item, make_scratch)) {
        pack.var_vals = item.var_vals;
        s.items.push_back(std::move(pack));
      }
      // A long reduction over inputs larger than a cache sums chunks first (schedule/split_reduce.h).
      for (ScheduleItem& partial : split_reduce(item, make_scratch)) {
        partial.var_vals = item.var_vals;
        s.items.push_back(std::move(partial));
      }
    }
    buffers_[root.get()] = out;
    s.items.push_back(std::move(item));
  }

  // Intermediate buffers are freed right after the item that reads them last, so the device's
  // buffer cache hands their memory to later items: that is the memory plan.
  void plan_memory(const std::vector<UOpPtr>& outputs, Schedule& s) {
    std::unordered_set<const UOp*> keep;
    for (const UOpPtr& out : outputs) keep.insert(buffer_of(out).get());
    std::unordered_map<const UOp*, size_t> last_use;
    std::unordered_map<const UOp*, UOpPtr> node;
    for (size_t i = 0; i < s.items.size(); ++i)
      for (const UOpPtr& b : s.items[i].bufs) {
        last_use[b.get()] = i;
        node[b.get()] = b;
      }
    std::unordered_set<const UOp*> created_here;
    for (const auto& [n, buf] : buffers_) created_here.insert(buf.get());
    for (const UOpPtr& buf : scratch_) created_here.insert(buf.get());
    s.free_after.assign(s.items.size(), {});
    for (const auto& [b, i] : last_use)
      if (created_here.count(b) && !keep.count(b)) s.free_after[i].push_back(node[b]);
  }

  const BufferMaker& make_buffer_;
  const RealizedLookup& realized_;
  ShapeCache shapes_;
  std::unordered_map<const UOp*, int> users_;
  std::unordered_map<const UOp*, int> region_users_;  // consumers inside the region being explored
  int region_reduces_ = 0;                            // the reductions it would fuse side by side (an upper bound)
  std::unordered_set<const UOp*> visited_;
  std::unordered_set<const UOp*> stored_;
  std::vector<UOpPtr> roots_;
  std::unordered_map<const UOp*, UOpPtr> buffers_;
  std::vector<UOpPtr> scratch_;  // buffers only the scheduler's own copies write (repack)
  std::unordered_set<const UOp*> outputs_;              // the requested outputs: row-major, users read them
  std::unordered_set<const UOp*> copied_;               // sources of a COPY or SCATTER_ADD: row-major, read as bytes
  std::unordered_map<const UOp*, Layout> layouts_;      // by BUFFER: intermediates not stored row-major
};

}  // namespace

Schedule create_schedule(const std::vector<UOpPtr>& outputs, const BufferMaker& make_buffer, const RealizedLookup& realized) {
  return Scheduler(make_buffer, realized).run(outputs);
}

}  // namespace kiln

namespace kiln {

std::vector<int64_t> launch_values(const ScheduleItem& item, std::span<const UOpPtr> vars) {
  std::vector<int64_t> out;
  for (const UOpPtr& v : vars) {
    auto it = std::find_if(item.var_vals.begin(), item.var_vals.end(), [&](const auto& nv) { return nv.first == v->var().name; });
    if (it == item.var_vals.end())
      throw InternalError(cat("kernel variable ", v->var().name, " has no value in its schedule item (",
                              item.var_vals.size(), " values)"));
    out.push_back(it->second);
  }
  return out;
}

}  // namespace kiln

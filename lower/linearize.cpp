#include "lower/linearize.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "uop/rewrite.h"

namespace kiln {

namespace {

using RangeSet = std::vector<const UOp*>;  // sorted by pointer, for set operations

// ranges_of for every node of a graph, memoized: the RANGEs open where the node is computed.
class RangeMap {
 public:
  const RangeSet& of(const UOpPtr& root) {
    if (auto hit = memo_.find(root.get()); hit != memo_.end()) return hit->second;
    for (const UOp* u : unvisited_in_order(root)) {
      RangeSet out;
      auto add = [&](const RangeSet& s) {
        RangeSet merged;
        std::set_union(out.begin(), out.end(), s.begin(), s.end(), std::back_inserter(merged));
        out = std::move(merged);
      };
      for (const UOpPtr& s : u->src) add(memo_.at(s.get()));
      if (u->op == Op::RANGE) add({u});
      if (u->op == Op::END || u->op == Op::REDUCE) {  // the ranges an END or REDUCE closes are not open after it
        RangeSet closed;
        for (size_t i = 1; i < u->src.size(); ++i)
          if (u->src[i]->op == Op::RANGE) closed.push_back(u->src[i].get());
        std::sort(closed.begin(), closed.end());
        RangeSet left;
        std::set_difference(out.begin(), out.end(), closed.begin(), closed.end(), std::back_inserter(left));
        out = std::move(left);
      }
      memo_[u] = std::move(out);
    }
    return memo_.at(root.get());
  }

 private:
  // The nodes under root not yet in memo_, sources first. Not toposort(root): linearize asks for every
  // node of a kernel in turn, and walking each one's whole subgraph again made lowering a 200-op
  // elementwise kernel quadratic (0.4 s); this walk stops at nodes already known.
  std::vector<const UOp*> unvisited_in_order(const UOpPtr& root) {
    std::vector<const UOp*> order;
    std::unordered_set<const UOp*> seen;
    std::vector<std::pair<const UOp*, size_t>> stack{{root.get(), 0}};
    seen.insert(root.get());
    while (!stack.empty()) {
      auto& [u, next] = stack.back();
      if (next < u->src.size()) {
        const UOp* s = u->src[next++].get();
        if (!memo_.count(s) && seen.insert(s).second) stack.push_back({s, 0});
        continue;
      }
      order.push_back(u);
      stack.pop_back();
    }
    return order;
  }

  std::unordered_map<const UOp*, RangeSet> memo_;
};

std::vector<UOpPtr> sorted_ranges(const RangeSet& set, const UOpPtr& root) {
  std::vector<UOpPtr> out;
  for (const UOpPtr& u : toposort(root))  // analysis: puts a set of ranges in order, rewrites nothing
    if (std::binary_search(set.begin(), set.end(), u.get())) out.push_back(u);
  std::sort(out.begin(), out.end(), [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); });
  return out;
}

}  // namespace

std::vector<UOpPtr> ranges_of(const UOpPtr& u) {
  RangeMap map;
  return sorted_ranges(map.of(u), u);
}

UOpPtr lower_reduces(const UOpPtr& sink) {
  // Bottom-up: a reduce's value is already lowered when the reduce itself is rewritten.
  struct Ctx : RewriteContext {
    int64_t next_reg = 0;
    std::unordered_map<const UOp*, std::vector<UOpPtr>> around;  // reduce range -> the loops its accumulators live in
  } ctx;
  // Copies of a reduction (upcast lanes) share its loop, and a loop has one place, so their
  // accumulators live in the union of the loops their values need: a lane whose value does not
  // depend on an output loop (its padding folded away) still sits where the other lanes do.
  for (const UOpPtr& u : toposort(sink)) {  // analysis: every lane's loops before the rule lowers any of them
    if (u->op != Op::REDUCE) continue;
    std::vector<UOpPtr> reduce_ranges(u->src.begin() + 1, u->src.end());
    for (const UOpPtr& rg : ranges_of(u->src[0])) {
      if (std::find(reduce_ranges.begin(), reduce_ranges.end(), rg) != reduce_ranges.end()) continue;
      for (const UOpPtr& rr : reduce_ranges) {
        std::vector<UOpPtr>& loops = ctx.around[rr.get()];
        if (std::find(loops.begin(), loops.end(), rg) == loops.end()) loops.push_back(rg);
      }
    }
  }
  static const PatternMatcher pm_lower_reduce{{UPat::op(Op::REDUCE), [](const Match& m) {
    const UOpPtr& r = m.root;
    Op op = r->arg_as<Op>();
    const UOpPtr& value = r->src[0];
    std::vector<UOpPtr> reduce_ranges(r->src.begin() + 1, r->src.end());
    // The accumulator lives in the loops the value needs other than its own ranges, so a reduction
    // that does not depend on an outer loop is computed once, outside it.
    std::vector<UOpPtr> outer;
    for (const UOpPtr& rr : reduce_ranges)
      for (const UOpPtr& rg : m.context<Ctx>().around[rr.get()])
        if (std::find(outer.begin(), outer.end(), rg) == outer.end()) outer.push_back(rg);
    std::sort(outer.begin(), outer.end(), [](const UOpPtr& a, const UOpPtr& b) { return a->axis_id() < b->axis_id(); });
    std::vector<UOpPtr> reg_src{const_of(r->dtype, reduce_identity(op, r->dtype))};
    reg_src.insert(reg_src.end(), outer.begin(), outer.end());
    UOpPtr acc = UOp::make(Op::DEFINE_REG, r->dtype, reg_src, m.context<Ctx>().next_reg++);
    // The update lists the reduce ranges too: it must run once per iteration even when the value does
    // not depend on them (a sum of a loop-invariant value is n times it).
    // Reads of the accumulator inside the loop list the loop's ranges, so they are never hoisted out.
    std::vector<UOpPtr> read_src{acc};
    read_src.insert(read_src.end(), reduce_ranges.begin(), reduce_ranges.end());
    UOpPtr current = UOp::make(Op::LOAD, r->dtype, read_src);
    std::vector<UOpPtr> update_src{acc, UOp::make(op, r->dtype, {current, value})};
    update_src.insert(update_src.end(), reduce_ranges.begin(), reduce_ranges.end());
    UOpPtr update = UOp::make(Op::ASSIGN, r->dtype, update_src);
    std::vector<UOpPtr> end_src{update};
    end_src.insert(end_src.end(), reduce_ranges.begin(), reduce_ranges.end());
    UOpPtr end = UOp::make(Op::END, dtypes::void_, end_src);
    return UOp::make(Op::LOAD, r->dtype, {acc, end});
  }}};
  return graph_rewrite(sink, pm_lower_reduce, &ctx);
}

namespace {

// SINK(stores...) -> SINK(END(stores..., ranges...)...): stores that run in the same loops share one
// END, so each range has one END. Stores outside every loop stay as they are.
UOpPtr close_sink(const Match& m) {
  const UOpPtr& sink = m.root;
  std::vector<std::pair<std::vector<UOpPtr>, std::vector<UOpPtr>>> groups;  // (ranges, stores)
  std::vector<UOpPtr> src;
  for (const UOpPtr& store : sink->src) {
    std::vector<UOpPtr> open = ranges_of(store);
    if (open.empty()) {
      src.push_back(store);
      continue;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == open; });
    if (it == groups.end()) groups.push_back({open, {store}});
    else it->second.push_back(store);
  }
  if (groups.empty()) return nullptr;  // closed already (an END has no open ranges)
  for (auto& [open, stores] : groups) {
    std::vector<UOpPtr> end_src = stores;
    end_src.insert(end_src.end(), open.begin(), open.end());
    src.push_back(UOp::make(Op::END, dtypes::void_, end_src));
  }
  return sink->with_src(src);
}

const PatternMatcher& pm_close_loops() {
  static const PatternMatcher pm{{UPat::op(Op::SINK), close_sink}};
  return pm;
}

}  // namespace

UOpPtr close_loops(const UOpPtr& sink) { return graph_rewrite(sink, pm_close_loops(), nullptr, {}, RewriteOrder::PreOrder); }

namespace {

// Orders a kernel: a tree of loops, each holding the nodes whose innermost range it is.
class Linearizer {
 public:
  explicit Linearizer(const UOpPtr& sink) : sink_(sink), order_(toposort(sink)) {  // not a rewrite: a list out
    for (size_t i = 0; i < order_.size(); ++i) position_[order_[i].get()] = i;
    for (const UOpPtr& u : order_) ranges_.of(u);
    build_loop_tree();
    for (const UOpPtr& u : order_) node_block_[u.get()] = u->op == Op::RANGE ? parent_.at(u.get()) : block_of(u);
    for (const UOpPtr& u : order_) {
      if (u->op == Op::SINK || (u->op == Op::END && u->src.size() > 1)) continue;
      if (u->op == Op::RANGE) children_[parent_.at(u.get())].push_back(u.get());
      else members_[node_block_.at(u.get())].push_back(u.get());
      // Every loop around the node holds it: what a loop item stands for when ordering its block.
      for (const UOp* loop = node_block_.at(u.get()); loop != nullptr; loop = parent_.at(loop)) contents_[loop].push_back(u.get());
    }
  }

  std::vector<UOpPtr> run() {
    std::vector<UOpPtr> out;
    emit_block(nullptr, out);
    return out;
  }

 private:
  // Loops nest by the graph's END nodes: END(x, r1, r2...) puts r1 inside the innermost range open
  // at the END, and r2 inside r1. Outer ENDs (the stores') come later in toposort, so walk backwards.
  void build_loop_tree() {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      const UOpPtr& u = *it;
      if (u->op != Op::END || u->src.size() < 2) continue;
      const UOp* parent = deepest(ranges_.of(u));
      for (size_t i = 1; i < u->src.size(); ++i) {
        if (u->src[i]->op != Op::RANGE) continue;  // END(value, value..., ranges...)
        const UOp* r = u->src[i].get();
        // Copies of a reduction (after UPCAST) share its ranges: one loop runs all their updates.
        if (auto seen = parent_.find(r); seen != parent_.end()) {
          KILN_ASSERT(seen->second == parent, "every END of a range closes it in the same enclosing loop: ", str(u->src[i]));
          parent = r;
          continue;
        }
        parent_[r] = parent;
        depth_[r] = parent == nullptr ? 1 : depth_.at(parent) + 1;
        parent = r;
      }
    }
    for (const UOpPtr& u : order_)
      KILN_ASSERT(u->op != Op::RANGE || parent_.count(u.get()), "every RANGE is closed by an END: ", str(u));
  }

  const UOp* deepest(const RangeSet& set) const {
    const UOp* best = nullptr;
    for (const UOp* r : set)
      if (best == nullptr || depth_.at(r) > depth_.at(best)) best = r;
    return best;
  }

  // The innermost loop of a node; every range it uses must be that loop or one around it.
  const UOp* block_of(const UOpPtr& u) {
    const RangeSet& set = u->op == Op::RANGE ? ranges_.of(u->src[0]) : ranges_.of(u);
    const UOp* block = deepest(set);
    std::unordered_set<const UOp*> chain;
    for (const UOp* r = block; r != nullptr; r = parent_.at(r)) chain.insert(r);
    for (const UOp* r : set) KILN_ASSERT(chain.count(r), "the ranges of a node are nested: ", str(u));
    return block;
  }

  // The item of `block` that node belongs to: itself, or the child loop that contains it.
  const UOp* item_in(const UOp* block, const UOp* node) {
    const UOp* b = node->op == Op::RANGE ? node : node_block_.at(node);
    if (b == block) return node;
    while (b != nullptr && parent_.at(b) != block) b = parent_.at(b);
    return b;  // null: the node is outside this block (emitted before it)
  }

  void emit_block(const UOp* block, std::vector<UOpPtr>& out) {
    // Items: the block's own nodes and its child loops, ordered by dependencies, ties by toposort.
    std::vector<const UOp*> items = members_[block];
    for (const UOp* child : children_[block]) items.push_back(child);
    std::unordered_map<const UOp*, std::vector<const UOp*>> users;
    std::unordered_map<const UOp*, int> pending;
    std::unordered_set<const UOp*> item_set(items.begin(), items.end());
    for (const UOp* item : items) {
      std::unordered_set<const UOp*> deps;
      std::function<void(const UOp*)> depend = [&](const UOp* s) {
        // A graph END stands for the loop it closes: depend on what it ended.
        if (s->op == Op::END && s->src.size() > 1) {
          for (const UOpPtr& v : s->src)
            if (v->op != Op::RANGE) depend(v.get());
          return;
        }
        const UOp* d = item_in(block, s);
        if (d != nullptr && d != item && item_set.count(d)) deps.insert(d);
      };
      for (const UOp* n : nodes_under(item))
        for (const UOpPtr& s : n->src) depend(s.get());
      pending[item] = static_cast<int>(deps.size());
      for (const UOp* d : deps) users[d].push_back(item);
    }
    auto later = [this](const UOp* a, const UOp* b) { return position_.at(a) > position_.at(b); };
    std::priority_queue<const UOp*, std::vector<const UOp*>, decltype(later)> ready(later);
    for (const UOp* item : items)
      if (pending[item] == 0) ready.push(item);
    size_t emitted = 0;
    while (!ready.empty()) {
      const UOp* item = ready.top();
      ready.pop();
      ++emitted;
      if (item->op == Op::RANGE && item != block && parent_.at(item) == block) {
        out.push_back(node(item));
        emit_block(item, out);
        out.push_back(UOp::make(Op::END, dtypes::void_, {node(item)}));
      } else {
        out.push_back(node(item));
      }
      for (const UOp* user : users[item])
        if (--pending[user] == 0) ready.push(user);
    }
    KILN_ASSERT(emitted == items.size(), "the items of a loop have no cyclic dependencies");
  }

  // Every node an item stands for: itself, or everything inside a child loop.
  std::vector<const UOp*> nodes_under(const UOp* item) {
    if (item->op != Op::RANGE) return {item};
    std::vector<const UOp*> out{item};
    const auto& inside_loop = contents_[item];
    out.insert(out.end(), inside_loop.begin(), inside_loop.end());
    return out;
  }

  UOpPtr node(const UOp* raw) const { return order_[position_.at(raw)]; }

  UOpPtr sink_;
  std::vector<UOpPtr> order_;
  std::unordered_map<const UOp*, size_t> position_;
  RangeMap ranges_;
  std::unordered_map<const UOp*, const UOp*> parent_;
  std::unordered_map<const UOp*, int> depth_;
  std::map<const UOp*, std::vector<const UOp*>> members_, children_;
  std::unordered_map<const UOp*, std::vector<const UOp*>> contents_;  // per loop: every node inside it, nested too
  std::unordered_map<const UOp*, const UOp*> node_block_;  // the loop each node sits in (a RANGE: the one it opens in)
};

}  // namespace

std::vector<UOpPtr> linearize(const UOpPtr& sink) { return Linearizer(sink).run(); }

}  // namespace kiln

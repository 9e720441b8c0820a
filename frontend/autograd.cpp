// Autograd as a rewrite of the UOp graph.
//
// pm_gradient has one rule per differentiable tensor-level op: given the gradient of a node (in the
// context), it returns SINK(gradient of each source), with NOOP where a source gets none. backprop()
// walks the graph from the output back to the requested nodes, firing the rule of each node on the
// way and summing the gradients of nodes used more than once. The gradients are ordinary lazy
// graphs built from the forward graph's nodes, so they fuse with it when realized, and they can be
// differentiated again (second order).
//
// Leaves are tensors marked with requires_grad_(); a registry of them (weak) lets backward() find
// which nodes of a graph are leaves. A realized non-leaf's node is recorded with the graph that computed
// it (Autograd::record), so backward() still works after the loss was printed, and through tensors
// computed later from a realized value.
#include <mutex>
#include <numbers>
#include <unordered_map>
#include <unordered_set>

#include "frontend/detail.h"
#include "frontend/realize.h"
#include "uop/pattern.h"
#include "uop/rewrite.h"

namespace kiln {

namespace {

thread_local bool g_grad_enabled = true;

struct GradContext : RewriteContext {
  ShapeCache shapes;
  DeviceCache devices;
  UOpPtr grad;  // the gradient of the node being rewritten
  Tensor t(const UOpPtr& u);  // u as a tensor, its shape and device known (defined after Autograd)
};

GradContext& ctx(const Match& m) { return m.context<GradContext>(); }
Tensor grad_of(const Match& m) { return ctx(m).t(ctx(m).grad); }
Tensor src(const Match& m, size_t i) { return ctx(m).t(m.root->src[i]); }

UOpPtr no_grad() { return UOp::make(Op::NOOP, dtypes::void_); }
UOpPtr grads(std::initializer_list<std::optional<Tensor>> per_source) {
  std::vector<UOpPtr> out;
  for (const auto& g : per_source) out.push_back(g ? g->uop() : no_grad());
  return UOp::make(Op::SINK, dtypes::void_, out);
}

// The gradient of a max/min (binary or reduced) goes to the elements equal to the result, split
// evenly between ties, as torch.maximum and torch.amax do. (So max_pool2d splits a tied window's
// gradient too, where torch's max_pool2d gives it all to one element.)
UOpPtr max_min_grad(const Match& m, bool is_max) {
  Tensor a = src(m, 0), b = src(m, 1), g = grad_of(m);
  Tensor zero = g.zeros_like(), half = g * 0.5;
  Tensor a_wins = is_max ? a.gt(b) : a.lt(b), b_wins = is_max ? b.gt(a) : b.lt(a), tie = a.eq(b);
  return grads({a_wins.where(g, tie.where(half, zero)), b_wins.where(g, tie.where(half, zero))});
}

UOpPtr reduce_grad(const Match& m) {
  const auto& r = m.root->arg_as<ReduceArg>();
  Tensor x = src(m, 0), out = ctx(m).t(m.root), g = grad_of(m).expand(x.shape());
  // A reduce's op is one of four (ReduceArg), not any Op: an if per op, not a switch over every Op.
  if (r.op == Op::ADD) return grads({g});
  if (r.op == Op::MAX || r.op == Op::MIN) {
    Tensor hit = x.eq(out.expand(x.shape())).cast(x.dtype());
    return grads({hit * g / hit.sum(r.axes, true).expand(x.shape())});
  }
  if (r.op == Op::MUL) {
    // The product of the other elements: out/x without zeros; with one zero, the product of the
    // rest at the zero and 0 elsewhere; with two or more, 0 everywhere. Exact, and O(n).
    Tensor zero = x.eq(x.zeros_like());
    Tensor zeros = zero.cast(x.dtype()).sum(r.axes, true).expand(x.shape());
    Tensor rest = zero.where(x.ones_like(), x).prod(r.axes, true).expand(x.shape());
    Tensor none = zeros.eq(zeros.zeros_like()), one = zeros.eq(zeros.ones_like());
    Tensor others = none.where(out.expand(x.shape()) / zero.where(x.ones_like(), x), one.where(zero.where(rest, x.zeros_like()), x.zeros_like()));
    return grads({g * others});
  }
  throw InternalError(kiln::cat("gradient: REDUCE_AXIS with op ", r.op));
}

// From this many (index element x axis position) pairs on, GATHER's gradient is a SCATTER_ADD (run on
// the host: schedule.h) instead of the fused one-hot sum below, which compares every index with every
// position: an Embedding(20000, 128) over 8192 tokens is 2.1e10 pairs, 270 ms a step in the one-hot
// kernel (90% of a text CNN's step; torch took 33 ms for all of it). Below it the one-hot kernel takes
// under ~0.2 ms, less than the scatter's copies of the values and indices.
constexpr double kScatterMinPairs = double(1 << 24);

// GATHER's gradient: each element of x gets the sum of the output gradients whose index points at it.
// (x and the index have one size on every other axis: Tensor::gather cuts x to the index's, and checked
// the index's values.)
UOpPtr gather_grad(const Match& m) {
  int64_t a = m.root->arg_as<int64_t>();
  int64_t n = src(m, 0).shape()[static_cast<size_t>(a)];
  Tensor g = grad_of(m);
  if ((g.dtype() == dtypes::float32 || g.dtype() == dtypes::float64) && static_cast<double>(g.numel()) * static_cast<double>(n) >= kScatterMinPairs)
    return grads({ctx(m).t(UOp::make(Op::SCATTER_ADD, g.dtype(), {g.uop(), m.root->src[1]}, std::vector<int64_t>{a, n})), std::nullopt});
  Tensor hit = detail::index_mask(src(m, 1).transpose(a, -1), n);  // (..., m, n)
  Tensor spread = g.transpose(a, -1).unsqueeze(-1).expand(hit.shape());
  return grads({hit.where(spread, spread.zeros_like()).sum({-2}).transpose(a, -1), std::nullopt});
}

const PatternMatcher& pm_gradient() {
  using P = UPat;
  static const PatternMatcher pm{
      // arithmetic
      {P::op(Op::ADD), [](const Match& m) { return grads({grad_of(m), grad_of(m)}); }},
      {P::op(Op::SUB), [](const Match& m) { return grads({grad_of(m), -grad_of(m)}); }},
      {P::op(Op::MUL), [](const Match& m) { return grads({grad_of(m) * src(m, 1), grad_of(m) * src(m, 0)}); }},
      {P::op(Op::FDIV), [](const Match& m) {
         Tensor g = grad_of(m), b = src(m, 1);
         return grads({g / b, -g * ctx(m).t(m.root) / b});
       }},
      {P::op(Op::MULACC), [](const Match& m) { return grads({grad_of(m) * src(m, 1), grad_of(m) * src(m, 0), grad_of(m)}); }},
      {P::op(Op::NEG), [](const Match& m) { return grads({-grad_of(m)}); }},
      {P::op(Op::RECIP), [](const Match& m) {
         Tensor out = ctx(m).t(m.root);
         return grads({-grad_of(m) * out * out});
       }},
      {P::op(Op::SQRT), [](const Match& m) { return grads({grad_of(m) / (ctx(m).t(m.root) * 2.0)}); }},
      {P::op(Op::EXP2), [](const Match& m) { return grads({grad_of(m) * ctx(m).t(m.root) * std::numbers::ln2}); }},
      {P::op(Op::LOG2), [](const Match& m) { return grads({grad_of(m) / (src(m, 0) * std::numbers::ln2)}); }},
      {P::op(Op::SIN), [](const Match& m) { return grads({grad_of(m) * src(m, 0).cos()}); }},
      {P::op(Op::TRUNC), [](const Match& m) { return grads({grad_of(m).zeros_like()}); }},  // 0 almost everywhere
      {P::op(Op::MAX), [](const Match& m) { return max_min_grad(m, true); }},
      {P::op(Op::MIN), [](const Match& m) { return max_min_grad(m, false); }},
      {P::op(Op::POW), [](const Match& m) {
         // d/da a^b = b a^(b-1); d/db a^b = a^b ln a, taken as 0 where a == 0 and b >= 0 (PyTorch).
         Tensor a = src(m, 0), b = src(m, 1), g = grad_of(m), out = ctx(m).t(m.root);
         Tensor zero = g.zeros_like();
         Tensor db = (a.eq(zero).logical_and(b.ge(zero))).where(zero, out * a.log());
         return grads({g * b * a.pow(b - 1.0), g * db});
       }},
      {P::op(Op::WHERE), [](const Match& m) {
         Tensor c = src(m, 0), g = grad_of(m), zero = g.zeros_like();
         return grads({std::nullopt, c.where(g, zero), c.where(zero, g)});
       }},
      {P::op(Op::CAST), [](const Match& m) {
         DType from = m.root->src[0]->dtype;
         return is_float(from) ? grads({grad_of(m).cast(from)}) : grads({std::nullopt});
       }},
      // tensor-level ops
      {P::op(Op::CONTIGUOUS), [](const Match& m) { return grads({grad_of(m)}); }},
      {P::op(Op::COPY), [](const Match& m) { return grads({grad_of(m).to(src(m, 0).device()), std::nullopt}); }},
      {P::op(Op::REDUCE_AXIS), reduce_grad},
      {P::op(Op::GATHER), gather_grad},
      // SCATTER_ADD's adjoint is GATHER at the same indices.
      {P::op(Op::SCATTER_ADD), [](const Match& m) {
         int64_t a = m.root->arg_as<std::vector<int64_t>>().at(0);
         Tensor g = grad_of(m);
         return grads({ctx(m).t(UOp::make(Op::GATHER, g.dtype(), {g.uop(), m.root->src[1]}, a)), std::nullopt});
       }},
      // movement: the inverse movement (EXPAND's is a sum over the expanded axes)
      {P::op(Op::RESHAPE), [](const Match& m) { return grads({grad_of(m).reshape(src(m, 0).shape())}); }},
      {P::op(Op::PERMUTE), [](const Match& m) {
         const auto& order = m.root->arg_as<std::vector<int64_t>>();
         std::vector<int64_t> inverse(order.size());
         for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
         return grads({grad_of(m).permute(inverse)});
       }},
      {P::op(Op::EXPAND), [](const Match& m) {
         Shape in = src(m, 0).shape();
         Shape out = ctx(m).shapes(m.root);
         std::vector<int64_t> axes;
         for (size_t i = 0; i < in.size(); ++i)
           if (in[i] != out[i]) axes.push_back(static_cast<int64_t>(i));
         Tensor g = grad_of(m);
         return grads({axes.empty() ? g : g.sum(axes, true)});
       }},
      {P::op(Op::PAD), [](const Match& m) {
         const auto& pad = m.root->arg_as<Pairs>();
         Shape in = src(m, 0).shape();
         Pairs bounds;
         for (size_t i = 0; i < in.size(); ++i) bounds.push_back({pad[i].first, pad[i].first + in[i]});
         return grads({grad_of(m).shrink(bounds)});
       }},
      {P::op(Op::SHRINK), [](const Match& m) {
         const auto& bounds = m.root->arg_as<Pairs>();
         Shape in = src(m, 0).shape();
         Pairs pad;
         for (size_t i = 0; i < in.size(); ++i) pad.push_back({bounds[i].first, in[i] - bounds[i].second});
         return grads({grad_of(m).pad(pad)});
       }},
      {P::op(Op::FLIP), [](const Match& m) {
         const auto& flags = m.root->arg_as<std::vector<int64_t>>();
         std::vector<int64_t> axes;
         for (size_t i = 0; i < flags.size(); ++i)
           if (flags[i]) axes.push_back(static_cast<int64_t>(i));
         return grads({grad_of(m).flip(axes)});
       }},
  };
  return pm;
}

// The custom gradients (detail::set_custom_gradient), by node. An entry whose node died is dropped
// when found (its address may be reused by another node) and when the table grows.
struct CustomGradient {
  std::weak_ptr<const UOp> node;
  std::vector<std::weak_ptr<const UOp>> inputs;
  std::vector<Shape> shapes;
  detail::CustomVjp vjp;
};
std::mutex g_custom_mu;
std::unordered_map<const UOp*, CustomGradient> g_custom;
size_t g_custom_purge_at = 64;

std::optional<CustomGradient> custom_gradient_of(const UOp* u) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  auto it = g_custom.find(u);
  if (it == g_custom.end()) return std::nullopt;
  if (it->second.node.lock().get() != u) {
    g_custom.erase(it);
    return std::nullopt;
  }
  return it->second;
}

// The gradient of `root` (seeded with root_grad) with respect to each node in `targets` it reaches.
// `plain`: a node whose custom gradient is ignored (the one a custom gradient differentiates itself).
std::unordered_map<const UOp*, UOpPtr> backprop(const UOpPtr& root, const UOpPtr& root_grad,
                                                const std::unordered_set<const UOp*>& targets, const UOp* plain = nullptr) {
  std::vector<UOpPtr> order = toposort(root);  // sources first; not a rule table: a gradient sums all users
  // The nodes on a path to a target. Only floating-point values carry gradients; DETACH stops them.
  std::unordered_set<const UOp*> on_path;
  for (const UOpPtr& u : order) {
    if (!is_float(u->dtype)) continue;
    bool on = targets.count(u.get()) > 0;
    if (!on && u->op != Op::DETACH)
      for (const UOpPtr& s : u->src) on = on || on_path.count(s.get()) > 0;
    if (on) on_path.insert(u.get());
  }
  std::unordered_map<const UOp*, UOpPtr> grad;
  if (!on_path.count(root.get())) return grad;
  grad[root.get()] = root_grad;
  GradContext ctx;
  // The gradient parts of each EXPAND, kept apart: a broadcast used by many ops (a weight at every
  // step of an RNN: EXPAND(W^T) is one interned node for all of them) has the sum of the parts' sums as
  // its gradient. Summed first, the parts made one reduction over an L-term sum of products that no
  // tiling fits (a GRU's W_hh: 27 GFLOP/s, 0.2 s to lower); past kMaxSummedParts each part is reduced
  // on its own (an ordinary matmul, one compiled kernel for every step) and the sums are added.
  constexpr size_t kMaxSummedParts = 4;
  std::unordered_map<const UOp*, std::vector<UOpPtr>> expand_parts;
  auto add_gradient = [&](const UOp* s, const UOpPtr& part) {
    auto [slot, fresh] = grad.try_emplace(s, part);
    if (s->op == Op::EXPAND) expand_parts[s].push_back(part);  // summed (or not) when s is reached
    else if (!fresh) slot->second = (ctx.t(slot->second) + ctx.t(part)).uop();
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const UOpPtr& u = *it;
    auto g = grad.find(u.get());
    if (g == grad.end() || !on_path.count(u.get())) continue;
    bool inner = false;
    for (const UOpPtr& s : u->src) inner = inner || on_path.count(s.get()) > 0;
    if (!inner) continue;  // a target with nothing to differentiate below it
    if (auto parts = expand_parts.find(u.get()); parts != expand_parts.end()) {
      if (parts->second.size() > kMaxSummedParts && !custom_gradient_of(u.get())) {
        for (const UOpPtr& part : parts->second) {
          ctx.grad = part;
          auto fired = pm_gradient().rewrite(u, &ctx);
          add_gradient(u->src[0].get(), fired->replacement->src[0]);
        }
        continue;
      }
      for (size_t i = 1; i < parts->second.size(); ++i) g->second = (ctx.t(g->second) + ctx.t(parts->second[i])).uop();
    }
    ctx.grad = g->second;
    if (std::optional<CustomGradient> custom = u.get() == plain ? std::nullopt : custom_gradient_of(u.get())) {
      std::vector<UOpPtr> inputs;
      std::vector<bool> wanted;
      for (const auto& w : custom->inputs) {
        inputs.push_back(w.lock());
        wanted.push_back(inputs.back() && on_path.count(inputs.back().get()) > 0);
      }
      std::vector<std::optional<Tensor>> parts = custom->vjp(ctx.t(g->second), wanted);
      for (size_t i = 0; i < inputs.size(); ++i)
        if (wanted[i] && i < parts.size() && parts[i]) {
          if (parts[i]->shape() != custom->shapes[i])
            throw InternalError(kiln::cat("a custom gradient has shape ", shape_str(parts[i]->shape()), " for an input of shape ",
                                          shape_str(custom->shapes[i])));
          add_gradient(inputs[i].get(), parts[i]->uop());
        }
      continue;
    }
    auto fired = pm_gradient().rewrite(u, &ctx);
    if (!fired)
      throw Error(kiln::cat("backward: no gradient rule for op ", u->op, " (", u->dtype.name(), "); it is not differentiable in kiln yet"));
    const UOpPtr& sink = fired->replacement;
    for (size_t i = 0; i < u->src.size(); ++i) {
      const UOpPtr& s = u->src[i];
      if (!on_path.count(s.get()) || sink->src[i]->op == Op::NOOP) continue;
      add_gradient(s.get(), sink->src[i]);
    }
  }
  return grad;
}

}  // namespace

// The registry of leaves, and the hooks Tensor needs (a friend of Tensor).
struct Autograd {
  static const Tensor::State& state(const Tensor& t) { return *t.state_; }
  // A tensor of u whose device is known (Tensor's constructor for it is Autograd's alone).
  static Tensor on_device(UOpPtr u, Shape shape, UOpPtr device) { return Tensor(std::move(u), std::move(shape), std::move(device)); }

  using StatePtr = std::shared_ptr<Tensor::State>;

  static std::mutex& mu() {
    static std::mutex* m = new std::mutex();
    return *m;
  }
  static std::vector<std::weak_ptr<Tensor::State>>& registry() {
    static auto* r = new std::vector<std::weak_ptr<Tensor::State>>();
    return *r;
  }
  static std::vector<StatePtr> leaves() {
    std::lock_guard<std::mutex> lock(mu());
    std::vector<StatePtr> out;
    auto& r = registry();
    std::erase_if(r, [&](const std::weak_ptr<Tensor::State>& w) {
      StatePtr s = w.lock();
      if (!s || !s->requires_grad) return true;
      out.push_back(std::move(s));
      return false;
    });
    return out;
  }
  static void add(const StatePtr& s) {
    std::lock_guard<std::mutex> lock(mu());
    registry().push_back(s);
  }
  // The nodes that stand for each leaf in graphs: its value, and its value before the last update.
  static std::unordered_set<const UOp*> leaf_nodes(const std::vector<StatePtr>& leaves) {
    std::unordered_set<const UOp*> out;
    for (const StatePtr& s : leaves) {
      out.insert(s->uop.get());
      if (s->former) out.insert(s->former.get());
    }
    return out;
  }
  // Realized non-leaf values and the graphs that computed them, so that a tensor built later from a
  // realized value still differentiates through it, as in PyTorch (y.to_vector(); (y * 2).sum().backward()).
  // Keyed by the realized node (RESHAPE of its buffer), weakly: an entry goes when no graph holds that node.
  struct Computed {
    std::weak_ptr<const UOp> node;
    UOpPtr graph;
  };
  static std::unordered_map<const UOp*, Computed>& computed() {
    static auto* m = new std::unordered_map<const UOp*, Computed>();
    return *m;
  }
  static void record(const UOpPtr& node, const UOpPtr& graph) {
    std::lock_guard<std::mutex> lock(mu());
    std::erase_if(computed(), [](const auto& entry) { return entry.second.node.expired(); });  // few live at a time
    computed()[node.get()] = {node, graph};
  }
  // Realized values computed from nothing that required grad then: their graphs are dropped (kept, they
  // would hold their inputs' memory). Only their nodes are remembered, weakly, so that gradients() with
  // respect to an input that never required grad can refuse to differentiate past them.
  static std::unordered_map<const UOp*, std::weak_ptr<const UOp>>& opaque() {
    static auto* m = new std::unordered_map<const UOp*, std::weak_ptr<const UOp>>();
    return *m;
  }
  static void record_opaque(const UOpPtr& node) {
    static size_t purge_at = 64;  // dead entries go in sweeps, each when the table has doubled (under mu())
    std::lock_guard<std::mutex> lock(mu());
    if (opaque().size() >= purge_at) {
      std::erase_if(opaque(), [](const auto& entry) { return entry.second.expired(); });
      purge_at = std::max<size_t>(64, 2 * opaque().size());
    }
    opaque()[node.get()] = node;
  }
  static std::unordered_set<const UOp*> live_opaque() {
    std::lock_guard<std::mutex> lock(mu());
    std::unordered_set<const UOp*> live;
    for (const auto& [key, w] : opaque())
      if (UOpPtr node = w.lock(); node && node.get() == key) live.insert(key);
    return live;
  }
  // A value of `live` that a gradient of root with respect to `targets` would pass: the walk stops at the
  // targets and at DETACH, as the gradient does. Null if none.
  static const UOp* first_opaque(const UOpPtr& root, const std::unordered_set<const UOp*>& targets,
                                 const std::unordered_set<const UOp*>& live) {
    const UOp* found = nullptr;
    gradient_walk(root, targets, [&](const UOp* u) {
      if (!found && live.count(u)) found = u;
      return found == nullptr;
    });
    return found;
  }
  // Visits each node a gradient of root with respect to `targets` passes once, stopping at the targets
  // and at DETACH as the gradient does; visit(u) returns whether to go on below u.
  template <typename Visit>
  static void gradient_walk(const UOpPtr& root, const std::unordered_set<const UOp*>& targets, Visit visit) {
    std::unordered_set<const UOp*> seen;
    std::vector<const UOp*> stack{root.get()};
    while (!stack.empty()) {
      const UOp* u = stack.back();
      stack.pop_back();
      if (!seen.insert(u).second || targets.count(u) || u->op == Op::DETACH || !visit(u)) continue;
      for (const UOpPtr& s : u->src) stack.push_back(s.get());
    }
  }

  // The live entries, copied so that walks need no lock.
  static std::unordered_map<const UOp*, UOpPtr> computed_graphs() {
    std::lock_guard<std::mutex> lock(mu());
    std::unordered_map<const UOp*, UOpPtr> out;
    for (const auto& [key, c] : computed())
      if (UOpPtr node = c.node.lock(); node && node.get() == key) out[key] = c.graph;
    return out;
  }

  // root with every realized value in it (other than the targets themselves) replaced by the graph that
  // computed it, recursively: the graph backprop differentiates.
  static UOpPtr unrealized(const UOpPtr& root, const std::unordered_set<const UOp*>& targets) {
    std::unordered_map<const UOp*, UOpPtr> behind = computed_graphs();
    if (behind.empty()) return root;
    std::unordered_map<const UOp*, UOpPtr> memo;
    return unrealized(root, targets, behind, memo);
  }
  static UOpPtr unrealized(const UOpPtr& root, const std::unordered_set<const UOp*>& targets,
                           const std::unordered_map<const UOp*, UOpPtr>& behind, std::unordered_map<const UOp*, UOpPtr>& memo) {
    std::unordered_map<const UOp*, UOpPtr> replace;
    gradient_walk(root, targets, [&](const UOp* u) {
      auto it = behind.find(u);
      if (it == behind.end()) return true;
      auto [slot, fresh] = memo.try_emplace(u, nullptr);
      if (fresh) slot->second = unrealized(it->second, targets, behind, memo);
      replace[u] = slot->second;
      return false;
    });
    return replace.empty() ? root : substitute(root, replace);
  }

  // Which of `roots` reach one of `nodes` (through the graphs behind realized values too; not below a
  // DETACH), in one walk: each node is visited once however many roots share it (an optimizer's step
  // realizes dozens of values whose graphs share the forward and backward pass; a walk per root cost
  // a tenth of an eager LSTM step).
  static std::vector<bool> each_depends_on(const std::vector<UOpPtr>& roots, const std::unordered_set<const UOp*>& nodes) {
    std::vector<bool> out(roots.size(), false);
    if (nodes.empty()) return out;
    std::unordered_map<const UOp*, UOpPtr> behind = computed_graphs();
    std::unordered_map<const UOp*, bool> reaches;  // settled nodes
    struct Frame {
      const UOp* u;
      size_t next = 0;    // the next edge to follow: sources, then the graph behind it
      bool hit = false;
    };
    std::vector<Frame> stack;
    auto edge = [&](const UOp* u, size_t i) -> const UOp* {
      if (i < u->src.size()) return u->src[i].get();
      if (i == u->src.size())
        if (auto it = behind.find(u); it != behind.end()) return it->second.get();
      return nullptr;
    };
    for (size_t r = 0; r < roots.size(); ++r) {
      if (auto it = reaches.find(roots[r].get()); it != reaches.end()) {
        out[r] = it->second;
        continue;
      }
      reaches.emplace(roots[r].get(), false);
      stack.push_back({roots[r].get()});
      while (!stack.empty()) {
        Frame& f = stack.back();
        if (f.next == 0 && (nodes.count(f.u) || f.u->op == Op::DETACH)) {
          f.hit = nodes.count(f.u) > 0;
          f.next = SIZE_MAX;
        }
        const UOp* child = f.hit || f.next == SIZE_MAX ? nullptr : edge(f.u, f.next);
        if (child) {
          ++f.next;
          // A child is marked (not reaching) when pushed: in a DAG nothing below it leads back to it,
          // and should a cycle ever form through the graphs behind realized values, the walk ends.
          if (auto [it, fresh] = reaches.try_emplace(child, false); !fresh) f.hit = it->second;
          else stack.push_back({child});
          continue;
        }
        bool hit = f.hit;
        reaches[f.u] = hit;  // settled
        stack.pop_back();
        if (!stack.empty() && hit) stack.back().hit = true;
      }
      out[r] = reaches.at(roots[r].get());
    }
    return out;
  }

  // Whether root reaches one of `nodes`, through the graphs behind realized values too.
  static bool depends_on(const UOpPtr& root, const std::unordered_set<const UOp*>& nodes) {
    return each_depends_on({root}, nodes)[0];
  }

  // A leaf's gradient: the sum of those of its node and of its node before its last update (`former`),
  // or none when neither is reached.
  static std::optional<Tensor> leaf_gradient(const std::unordered_map<const UOp*, UOpPtr>& grads, const Tensor::State& s) {
    std::optional<Tensor> g;
    for (const UOpPtr& node : {s.uop, s.former}) {
      if (!node) continue;
      auto it = grads.find(node.get());
      if (it == grads.end()) continue;
      Tensor part(it->second, s.shape);
      g = g ? *g + part : part;
    }
    return g;
  }

  // realize_all calls this after replacing each tensor's node by its buffer (befores[j]: tensors[j]'s
  // node before). A value computed from a leaf keeps its graph for backward().
  static void realized(std::vector<Tensor>& tensors, const std::vector<UOpPtr>& befores) {
    // Leaves realized here first: a value realized with the leaf it was computed from reaches the
    // leaf's node from before (its `former`), which must be among the leaf nodes.
    for (size_t j = 0; j < tensors.size(); ++j)
      if (tensors[j].state_->requires_grad) tensors[j].state_->former = befores[j];
    std::vector<bool> reach = each_depends_on(befores, leaf_nodes(leaves()));  // a leaf's own answer is unused (and immediate)
    for (size_t j = 0; j < tensors.size(); ++j) {
      Tensor::State& s = *tensors[j].state_;
      const UOpPtr& before = befores[j];
      if (s.requires_grad) continue;
      if (reach[j]) record(s.uop, before);
      // Computed here (not a copy of a buffer), and a float: integers and bools carry no gradient (ops realize
      // their indices to check them on the host).
      else if (is_float(before->dtype) && !detail::realized_buffer(before)) record_opaque(s.uop);
    }
  }
};

Tensor GradContext::t(const UOpPtr& u) { return Autograd::on_device(u, shapes(u), devices(u)); }

void detail::after_realize(std::vector<Tensor>& tensors, const std::vector<UOpPtr>& befores) { Autograd::realized(tensors, befores); }

void detail::set_custom_gradient(const Tensor& out, const std::vector<Tensor>& inputs, CustomVjp vjp) {
  CustomGradient c{out.uop(), {}, {}, std::move(vjp)};
  for (const Tensor& x : inputs) {
    c.inputs.push_back(x.uop());
    c.shapes.push_back(x.shape());
  }
  std::lock_guard<std::mutex> lock(g_custom_mu);
  if (g_custom.size() >= g_custom_purge_at) {
    std::erase_if(g_custom, [](const auto& entry) { return entry.second.node.expired(); });
    g_custom_purge_at = std::max<size_t>(64, 2 * g_custom.size());
  }
  g_custom[out.uop().get()] = std::move(c);
}

Tensor detail::plain_gradient(const UOpPtr& out, const Tensor& input, const Tensor& grad) {
  auto grads = backprop(out, grad.uop(), {input.uop().get()}, out.get());
  auto it = grads.find(input.uop().get());
  return it == grads.end() ? input.zeros_like() : Tensor(it->second, input.shape());
}

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

UOpPtr detail::no_grad_wrap(UOpPtr u) {
  if (g_grad_enabled) return u;
  // Leaves and a buffer's reshape carry no graph to cut off.
  bool leaf = u->op == Op::BUFFER || u->op == Op::CONST || u->op == Op::DEVICE || u->op == Op::DETACH || u->op == Op::IOTA;
  if (leaf || (u->op == Op::RESHAPE && u->src[0]->op == Op::BUFFER)) return u;
  return UOp::make(Op::DETACH, u->dtype, {u});
}

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_float(dtype()))
    throw Error(kiln::cat("requires_grad_: only floating-point tensors can require gradients; this one is ", dtype().name()));
  if (on && !state_->requires_grad) {
    if (!requires_grad()) own_memory();
    Autograd::add(state_);
  }
  state_->requires_grad = on;
  return *this;
}

// Autograd knows a leaf by its node, and equal graphs are one node (interned), realized once into one
// buffer: two Tensor::zeros({n}).requires_grad_() alive at once were one leaf, and each was given the
// sum of both gradients. A new leaf's value goes into memory of its own, unless it is already a buffer
// no other tensor holds (a module's parameter, realized where it was made), and no realized graph
// answers with that memory any more, so an equal graph realized later gets its own.
void Tensor::own_memory() {
  if (numel() == 0) return;
  UOpPtr buffer = detail::realized_buffer(state_->uop);
  if (!buffer || state_->uop.use_count() > 1) {
    // Written straight into new memory: nothing reads it yet, so unlike realize_all no pending assign
    // (a batch norm's running statistics) comes along.
    UOpPtr v = buffer ? UOp::make(Op::CONTIGUOUS, state_->uop->dtype, {state_->uop}) : state_->uop;
    buffer = realize_uops({v}, {new_buffer(device_uop(), numel(), dtype())})[0];
    state_->uop = detail::movement(Op::RESHAPE, buffer, shape());
  }
  forget_realized(buffer);
}

bool Tensor::requires_grad() const {
  if (state_->requires_grad) return true;
  return Autograd::depends_on(uop(), Autograd::leaf_nodes(Autograd::leaves()));
}

bool Tensor::is_leaf() const { return state_->requires_grad || !requires_grad(); }

std::optional<Tensor> Tensor::grad() const {
  if (!state_->grad) return std::nullopt;
  return *state_->grad;
}

void Tensor::set_grad(std::optional<Tensor> g) {
  if (g && (g->shape() != shape() || g->dtype() != dtype()))
    throw Error(kiln::cat("set_grad: the gradient is ", shape_str(g->shape()), " ", g->dtype().name(), " but the tensor is ",
                          shape_str(shape()), " ", dtype().name()));
  state_->grad = g ? std::make_shared<Tensor>(*g) : nullptr;
}

Tensor Tensor::detach() const { return Tensor(UOp::make(Op::DETACH, dtype(), {uop()}), shape()); }

Tensor& Tensor::assign(const Tensor& value) {
  if (value.shape() != shape() || value.dtype() != dtype() || value.device() != device())
    throw Error(kiln::cat("assign: the value is ", shape_str(value.shape()), " ", value.dtype().name(), " on ", value.device(),
                          " but the tensor is ", shape_str(shape()), " ", dtype().name(), " on ", device(),
                          "; assign needs the same shape, dtype and device"));
  // The memory to write: this tensor's, if realized; else that of an earlier assign not yet realized.
  UOpPtr target = detail::realized_buffer(state_->uop);
  if (!target) target = state_->target;
  UOpPtr v = value.uop();
  bool realized = detail::realized_buffer(v) != nullptr;
  if (target && realized) v = UOp::make(Op::CONTIGUOUS, v->dtype, {v});  // a kernel copies it in
  // A leaf's new value is data: no gradient flows from it into whatever computed it.
  if (state_->requires_grad && !(realized && !target)) v = UOp::make(Op::DETACH, v->dtype, {v});
  if (state_->requires_grad) state_->former = state_->uop;
  state_->uop = v;
  state_->target = target;
  return *this;
}

namespace {

UOpPtr seed_gradient(const Tensor& output, const std::optional<Tensor>& given, const char* op) {
  if (!is_float(output.dtype()))
    throw Error(kiln::cat(op, ": the output is ", output.dtype().name(), "; only floating-point outputs have gradients"));
  if (given) {
    if (given->shape() != output.shape())
      throw Error(kiln::cat(op, ": the gradient has shape ", shape_str(given->shape()), " but the output has shape ",
                            shape_str(output.shape()), "; they must match"));
    return given->cast(output.dtype()).uop();
  }
  if (output.numel() != 1)
    throw Error(kiln::cat(op, ": the output has shape ", shape_str(output.shape()),
                          "; a gradient is implied only for one element; pass the gradient of the output (e.g. ones)"));
  return Tensor::ones(output.shape(), output.dtype(), output.device()).uop();
}

}  // namespace

void Tensor::backward(std::optional<Tensor> gradient) {
  std::vector<Autograd::StatePtr> leaves = Autograd::leaves();
  std::unordered_set<const UOp*> targets = Autograd::leaf_nodes(leaves);
  if (!Autograd::depends_on(uop(), targets))
    throw Error(kiln::cat("backward: this ", shape_str(shape()), " tensor does not depend on any tensor with requires_grad_() "
                          "(or it was computed under NoGradGuard or from detach())"));
  UOpPtr seed = seed_gradient(*this, gradient, "backward");
  auto grads = backprop(Autograd::unrealized(uop(), targets), seed, targets);
  for (const Autograd::StatePtr& s : leaves) {
    std::optional<Tensor> g = Autograd::leaf_gradient(grads, *s);
    if (!g) continue;
    if (g->dtype() != s->uop->dtype) g = g->cast(s->uop->dtype);
    s->grad = std::make_shared<Tensor>(s->grad ? *s->grad + *g : *g);
  }
}

std::vector<Tensor> gradients(const Tensor& output, const std::vector<Tensor>& inputs, std::optional<Tensor> grad_output) {
  // A leaf stands for its value before its last update too (its `former`), as in backward(): a value
  // computed from the leaf before the update was realized reads that node.
  std::unordered_set<const UOp*> targets;
  for (const Tensor& x : inputs) {
    targets.insert(x.uop().get());
    if (const auto& s = Autograd::state(x); s.requires_grad && s.former) targets.insert(s.former.get());
  }
  UOpPtr seed = seed_gradient(output, grad_output, "gradients");
  UOpPtr graph = Autograd::unrealized(output.uop(), targets);
  // An input that requires no grad (not a requires_grad_() leaf nor computed from one) is differentiated
  // through the lazy graph; a value realized on the way lost its graph, and the gradient through it
  // would silently be 0. PyTorch refuses such inputs outright; kiln refuses them only then.
  std::unordered_set<const UOp*> opaque = Autograd::live_opaque();
  std::unordered_set<const UOp*> leaf_nodes = opaque.empty() ? std::unordered_set<const UOp*>{} : Autograd::leaf_nodes(Autograd::leaves());
  for (size_t i = 0; i < inputs.size() && !opaque.empty(); ++i) {
    if (leaf_nodes.count(inputs[i].uop().get()) || Autograd::depends_on(inputs[i].uop(), leaf_nodes)) continue;
    if (const UOp* realized = Autograd::first_opaque(graph, targets, opaque))
      throw Error(kiln::cat("gradients: input ", i, " (shape ", shape_str(inputs[i].shape()), ") does not require grad, and the ",
                            "output (shape ", shape_str(output.shape()), ") reads a ", realized->dtype.name(),
                            " value realized before anything it depended on required grad, so kiln kept no graph ",
                            "for it and cannot say whether it depends on that input. Call requires_grad_() on the ",
                            "input before computing the output (as PyTorch requires for torch.autograd.grad)"));
    break;
  }
  auto grads = backprop(graph, seed, targets);
  std::vector<Tensor> out;
  for (const Tensor& x : inputs) {
    const auto& s = Autograd::state(x);
    std::optional<Tensor> g;
    if (s.requires_grad) g = Autograd::leaf_gradient(grads, s);
    else if (auto it = grads.find(x.uop().get()); it != grads.end()) g = Tensor(it->second, x.shape());
    out.push_back(g ? g->cast(x.dtype()) : x.zeros_like());
  }
  return out;
}

}  // namespace kiln
